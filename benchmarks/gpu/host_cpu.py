"""The ``host_cpu`` section: the lease's own CPU (on the H200's, an Intel Xeon with AMX): the
tests marked ``exactness`` with CUDA hidden, and ``bf16_whole_process.py --generate`` (bfloat16
and int8 against float32, whole process, two cores).

    PYTHONPATH=src python benchmarks/gpu/host_cpu.py --device cpu --quick --out host_cpu.json
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import BENCHMARKS, Deadline, Recorder, read_json, run_alone, run_group, run_row_process

# The lease's own CPU: what it may take. Never run on a lease yet; sized from this development
# machine's runs (results/benchmarks/bf16_whole_process.json: 1,000 sentences at the original
# size took 25 s in float32 on two cores, 12 s in bfloat16), so 200 sentences, no int8.
HOST_CPU_TESTS_S = 35.0  # the exactness tests' share of the section; unfinished ones are not measured
HOST_CPU_WHOLE_PROCESS_S = 25.0  # the least left for the whole-process comparison to be started


def host_cpu_exactness_command(quick: bool, cores: int, xdist: bool) -> tuple[list[str], dict]:
    """The pytest command of the tests marked ``exactness`` and not ``slow`` (as CI's AVX2 pass
    runs them: ``-m`` replaces the ``-m 'not slow'`` of ``addopts``, so a bare ``-m exactness``
    would run the slow tests too), with the progress plugin, and the environment it adds."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "exactness and not slow", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-p", "pytest_progress"]
    env = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join([str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])}
    if quick:
        command.append("tests/test_states.py")
    elif xdist and cores >= 8:
        command += ["-n", "4"]
        env["OMP_NUM_THREADS"] = str(max(1, cores // 4))
    return command, env


def section_host_cpu(rec: Recorder, args) -> None:
    """The lease machine's CPU, for what no other machine has shown (the H200's host is an Intel
    Xeon with AMX): the tests marked ``exactness`` (and not ``slow``) with CUDA hidden (batch
    independence by construction on an Intel CPU, where it once failed), each test's outcome
    recorded as it ends and the unfinished ones left as not measured; then
    ``bf16_whole_process.py --generate`` on two cores (bfloat16 against float32, whole process).
    ``--quick`` runs one exactness test file and the tiny size on a few sentences: the code, not
    the numbers."""
    import importlib.util

    import pytest_progress

    deadline = Deadline(args.ends_at)
    cores = os.cpu_count() or 1
    command, extra_env = host_cpu_exactness_command(args.quick, cores, importlib.util.find_spec("xdist") is not None)
    progress = Path(args.work) / "host_cpu_progress.jsonl"
    with contextlib.suppress(FileNotFoundError):
        progress.unlink()
    env = dict(os.environ, **extra_env, ELMO_PYTEST_PROGRESS=str(progress))
    rec.set("exactness_command", " ".join(command[1:]))
    limit = deadline.left() if args.quick else min(deadline.left() - HOST_CPU_WHOLE_PROCESS_S, HOST_CPU_TESTS_S)
    done = run_group(command, max(1.0, limit), env=env)
    found = pytest_progress.read(str(progress))
    counts: dict[str, int] = {}
    for outcome in found["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    rec.set("exactness_tests", {"exit_code": done.returncode, "summary": tail[0] if not done.timed_out else
                                f"{counts} before the cut", "counts": counts, "collected": len(found["collected"]),
                                "seconds": round(done.seconds, 1)})
    bad = sorted(name for name, outcome in found["outcomes"].items() if outcome in ("failed", "error"))
    if bad or (not done.timed_out and done.returncode != 0):
        rec.fail(f"exactness tests with CUDA hidden: exit code {done.returncode}: {bad[:10]} {done.stdout[-2000:]}")
    if done.timed_out:
        for name in found["not_run"] or ["(collection)"]:
            rec.not_measured({"what": "exactness test", "test": name},
                             f"no time: the tests' share ({limit:.0f} s) ended first")
    output = Path(args.work) / "bf16_whole_process.json"
    # --quick: the tiny preset on a few sentences, float32 against bfloat16 only (30-60 s here).
    extra = ["--sizes", "tiny", "--sentences", "8"] if args.quick else ["--sizes", "original", "--sentences", "200"]
    command = [sys.executable, "benchmarks/bf16_whole_process.py", "--generate", *extra, "--rounds", "1",
               "--threads", "2", "--output", str(output)]
    if shutil.which("taskset") and cores > 2:
        command = ["taskset", "-c", "0,1", *command]
    rec.set("whole_process_command", " ".join(command).replace(sys.executable, "python").replace(str(output), "OUT"))
    need = 10.0 if args.quick else HOST_CPU_WHOLE_PROCESS_S
    done = run_row_process(rec, deadline, {"what": "bf16_whole_process"}, command, need, "bf16_whole_process")
    if done is None:
        return
    rec.set("whole_process", read_json(output))
    rec.set("whole_process_seconds", round(done.seconds, 1))


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"host_cpu": section_host_cpu}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
