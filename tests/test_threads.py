"""The thread policy (elmo.threads): the CPUs a process may use (affinity and cgroup v1/v2 CPU
quota, read from fake cgroup files here), the OpenMP wait policy set before PyTorch loads only
where the user set none, one ``--threads`` on every verb that computes, and its one check, which
names the option instead of letting the OpenMP runtime abort the process."""

import json
import os
import subprocess
import sys

import pytest

from elmo import threads
from elmo.cli.main import VERBS, build_parser, main

# The verbs that compute nothing with PyTorch's threads: they read and write text and files.
NOT_COMPUTING = {"prepare", "vocab", "convert"}


def fake_cgroup(tmp_path, proc_line: str, files: dict[str, str]) -> tuple[str, str]:
    """A cgroup file system under tmp_path/cgroup with ``files`` (relative path -> text), and a
    /proc/self/cgroup holding ``proc_line``."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(proc_line + "\n")
    return str(root), str(proc)


def test_cgroup_v2_quota_is_the_least_of_the_process_group_and_its_parents(tmp_path):
    root, proc = fake_cgroup(tmp_path, "0::/system.slice/job.scope", {
        "cpu.max": "max 100000\n",
        "system.slice/cpu.max": "150000 100000\n",
        "system.slice/job.scope/cpu.max": "300000 100000\n",
    })
    assert threads.cgroup_cpu_quota(root, proc) == pytest.approx(1.5)
    # 1.5 CPUs' worth of time keeps at most 2 threads busy, and never more than the affinity mask.
    assert threads.available_cpus(root, proc) == min(2, threads.affinity_cpus())


def test_cgroup_v2_without_a_quota_leaves_the_affinity_mask(tmp_path):
    root, proc = fake_cgroup(tmp_path, "0::/", {"cpu.max": "max 100000\n"})
    assert threads.cgroup_cpu_quota(root, proc) is None
    assert threads.available_cpus(root, proc) == threads.affinity_cpus()


def test_cgroup_v1_quota_and_its_no_limit(tmp_path):
    root, proc = fake_cgroup(tmp_path, "4:cpu,cpuacct:/docker/abc", {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    assert threads.cgroup_cpu_quota(root, proc) == pytest.approx(0.5)
    assert threads.available_cpus(root, proc) == 1  # half a CPU: one thread, not zero
    (tmp_path / "cgroup" / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_cpu_quota(root, proc) is None


def test_unreadable_or_malformed_cgroup_files_mean_no_quota(tmp_path):
    root, proc = fake_cgroup(tmp_path, "garbage line\n0::/a", {"a/cpu.max": "lots 100000\n", "cpu.max": "0 0\n"})
    assert threads.cgroup_cpu_quota(root, proc) is None
    assert threads.cgroup_cpu_quota(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_the_default_is_the_users_omp_num_threads_else_the_available_cpus():
    assert threads.default_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert threads.default_threads({"OMP_NUM_THREADS": "4,2"}) == 4  # nested levels: the first
    assert threads.default_threads({"OMP_NUM_THREADS": "lots"}) == threads.available_cpus()
    assert threads.default_threads({}) == threads.available_cpus()


def test_the_wait_policy_is_set_only_where_the_user_set_none():
    # PyTorch is loaded in this test process: too late for any change, so nothing is changed.
    environ: dict = {}
    assert "torch" in sys.modules and threads.prepare_openmp(environ, load=99.0) is False and environ == {}
    code = ("import os, sys; from elmo.threads import prepare_openmp; env = {}; "
            "print(prepare_openmp(env, load=99.0), env, 'torch' in sys.modules); "
            "print(prepare_openmp({'GOMP_SPINCOUNT': '1000'}, load=99.0), "
            "prepare_openmp({'OMP_WAIT_POLICY': 'active'}, load=99.0), "
            "prepare_openmp({'KMP_BLOCKTIME': '0'}, load=99.0))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True {'OMP_WAIT_POLICY': 'PASSIVE'} False", "False False False"]


def test_passive_waiting_only_where_other_work_needs_the_cores():
    """Quiet cores keep OpenMP's own spin-then-sleep (passive waiting cost 2x there); cores that
    other work keeps busy get passive waiting (spinning cost 2-3x there)."""
    code = ("import json; from elmo.threads import prepare_openmp, available_cpus; n = available_cpus(); "
            "cases = [({}, 0.0), ({}, n - 0.4), ({}, n + 0.0), ({'OMP_NUM_THREADS': '1'}, n - 1.0), "
            "({'OMP_NUM_THREADS': '1'}, n - 0.2), ({}, float('inf'))]; "
            "print(json.dumps([n] + [prepare_openmp(dict(env), load=load) for env, load in cases]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    n, *chosen = json.loads(done.stdout)
    # all threads on all CPUs: busy past half a core; one thread: past n - 0.5 cores.
    assert chosen == [False, n >= 1 and n - 0.4 > 0.5, True, n - 1.0 > n - 0.5, True, True]


def test_the_load_of_others_is_the_tasks_running_now_besides_this_one():
    assert threads.others_load("0.25 0.20 0.10 1/90 123\n") == 0  # only this process runs
    assert threads.others_load("0.25 0.20 0.10 4/90 123\n") == 3  # three others running now
    assert threads.others_load("3.50 2.00 1.00 1/90 123\n") == 0  # a past minute's load is not now's
    assert threads.others_load("garbage") == float("inf")  # unreadable: taken as busy
    assert 0 <= threads.others_load() < float("inf")  # this machine's, read five times


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_importing_elmo_before_torch_decides_the_wait_policy_unless_the_user_chose(user):
    env = {k: v for k, v in os.environ.items() if k not in threads.WAIT_VARIABLES}
    if user:
        env["OMP_WAIT_POLICY"] = user
    code = ("import json, os, elmo, torch; print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
            "elmo.threads.LAST_DECISION]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    policy, decision = json.loads(done.stdout)
    if user:
        assert policy == user and decision is None
    else:  # what it saw decides: passive exactly where the machine was busy
        assert policy == ("PASSIVE" if decision["passive"] else None), decision
        assert decision["passive"] == (decision["load"] > decision["cpus"] - decision["threads"] + 0.5)


def test_check_threads_names_the_option_and_the_bound():
    most = threads.affinity_cpus()
    assert threads.check_threads(most) == most and threads.check_threads(1) == 1
    for bad in (0, -1, most + 1, 1_000_000_000):
        with pytest.raises(ValueError, match=rf"^--threads: must be at least 1 and at most {most}, got"):
            threads.check_threads(bad)
    with pytest.raises(ValueError, match="^threads: "):
        threads.check_threads(2.5, "threads")


def computing_parsers():
    """(command words, parser) of every verb and sub-verb the CLI's own parser has."""
    import argparse

    def walk(words, parser):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield words, parser
        for action in subs:
            for name, child in action.choices.items():
                yield from walk([*words, name], child)

    return list(walk([], build_parser()))


def test_every_verb_that_computes_takes_threads():
    found = computing_parsers()
    assert {words[0] for words, _ in found} == set(VERBS)
    for words, parser in found:
        options = {o for a in parser._actions for o in a.option_strings}
        if words[0] in NOT_COMPUTING:
            continue
        assert "--threads" in options, f"elmo {' '.join(words)} has no --threads"
        (action,) = [a for a in parser._actions if "--threads" in a.option_strings]
        assert action.default is None and "OMP_NUM_THREADS" in action.help, words


@pytest.mark.parametrize("argv", [
    ["embed", "in.txt", "out.hdf5"], ["serve"], ["train", "--vocab", "v", "--train", "t", "--output", "o"],
    ["finetune", "default", "--train", "t", "--output", "o"], ["evaluate", "default", "--data", "d"],
    ["task", "train", "c.toml"], ["task", "evaluate", "run", "--data", "d"], ["neighbours", "a b", "--word", "a",
    "--corpus", "c"], ["cache-vocab", "w.txt", "out.hdf5"], ["export", "default", "--output", "o"],
])
def test_a_huge_threads_is_one_line_naming_the_option(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--threads", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elmo {argv[0]}: error: --threads: must be at least 1 and at most "), err
    assert len(err.splitlines()) == 1 and not os.listdir(tmp_path)


def test_set_threads_sets_what_is_asked_and_by_default_never_raises_a_lower_count():
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert threads.set_threads(None) == 1 and torch.get_num_threads() == 1
        assert threads.set_threads(threads.affinity_cpus()) == threads.affinity_cpus()
        assert torch.get_num_threads() == threads.affinity_cpus()
        with pytest.raises(ValueError, match="^--threads: "):
            threads.set_threads(0)
    finally:
        torch.set_num_threads(before)
