"""The repository itself: commands a user can run anywhere, results in one documented place.

- No committed text names an absolute path of a particular machine (``/work/...``,
  ``/root/...``, ``/home/<user>/...``, ``/tmp/<something>``): commands take arguments or
  ``DATA=...``/``RUNS=...`` variables. Run records under ``results/`` (JSON, CSV, logs) are data,
  not commands: they keep the paths their run had.
- Every experiment script starts with what it produces and the command that runs it, and a shell
  script given no arguments prints its usage instead of running with a default of one machine.
- Every relative link of the Markdown pages leads to a file of the repository (results moved
  without their readers would break one).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A path of one machine: its root-level folders for work, users and scratch. The look-behind keeps
# the relative and variable forms (../shared/data, $DATA/work/, DATA/tmp/) and URLs out.
MACHINE_PATH = re.compile(r"(?<![\w.:/~$-])(?:/work/|/root/|/home/[^/\s]+/|/Users/[^/\s]+/|/tmp/[\w.-]|/mnt/|/scratch/)")

# Committed files where such a path is not a command; each with the reason.
EXCEPTIONS = {
    "tests/test_repository.py": "this test names the paths it looks for",
}
# Run records (what a run wrote about itself: its config with its own paths, metrics, logs) and
# reference fixtures are data, not commands.
DATA_SUFFIXES = (".json", ".csv", ".txt", ".tsv", ".npz", ".hdf5", ".png", ".pt")


def committed_files() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the committed files cannot be listed")
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def is_data(name: str) -> bool:
    return name.startswith(("tests/fixtures/", "results/")) and name.endswith(DATA_SUFFIXES)


def text_lines(name: str) -> list[str] | None:
    raw = (ROOT / name).read_bytes()
    if b"\0" in raw[:8192]:
        return None  # binary
    try:
        return raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def test_machine_path_pattern_finds_machine_paths_and_leaves_portable_ones():
    found = ["bash x.sh /work/runs", "--cache /root/.cache/x", "cp a /home/alice/b", "--out /tmp/gpu-out",
             '"/tmp/vectors.hdf5"', "cd /mnt/disk", "`/work/data/wiki`"]
    portable = ["bash x.sh ../shared/data/lm DATA", "--runs $RUNS/experiments", "DATA/wiki/train/*.txt",
                "https://example.org/work/x", "see docs/tmp/x", "~/work/x", "/dev/stdin", "#!/usr/bin/env bash",
                "${TMPDIR:-/tmp}"]
    assert all(MACHINE_PATH.search(line) for line in found)
    assert not any(MACHINE_PATH.search(line) for line in portable)


def test_no_committed_file_names_a_path_of_one_machine():
    offending = []
    for name in committed_files():
        if name in EXCEPTIONS or is_data(name):
            continue
        lines = text_lines(name)
        for number, line in enumerate(lines or [], 1):
            if MACHINE_PATH.search(line):
                offending.append(f"{name}:{number}: {line.strip()[:160]}")
    assert not offending, ("absolute paths of one machine in committed files (use arguments or DATA=/RUNS= "
                           "variables):\n" + "\n".join(offending))


def experiment_scripts() -> list[str]:
    """The runnable files of experiments/ and benchmarks/ (and their folders, as benchmarks/gpu/):
    shell scripts, and Python files with a
    main (not the modules that scripts import, such as common.py)."""
    return sorted(name for name in committed_files()
                  if re.fullmatch(r"(experiments|benchmarks)/([^/]+/)?[^/]+\.(sh|py)", name)
                  and (name.endswith(".sh") or '__name__ == "__main__"' in (ROOT / name).read_text()))


def test_every_experiment_script_says_what_it_makes_and_how_to_run_it():
    missing = []
    for name in experiment_scripts():
        head = "\n".join((ROOT / name).read_text().splitlines()[:60])
        runner = "bash" if name.endswith(".sh") else "python"
        if f"{runner} {name}" not in head:
            missing.append(f"{name}: its opening comment lacks the command '{runner} {name} ...'")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("script", [name for name in (experiment_scripts() if (ROOT / ".git").exists() else [])
                                    if name.endswith(".sh")])
def test_a_shell_script_without_arguments_prints_its_usage_and_does_nothing(script, tmp_path):
    # Run from an empty folder with no elmo on the PATH: a script that went on would write there or fail.
    done = subprocess.run(["bash", str(ROOT / script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, (script, done.returncode, done.stderr)
    assert done.stderr.startswith(f"usage: bash {script}"), done.stderr
    assert not list(tmp_path.iterdir())


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_of_the_pages_leads_to_a_file():
    broken = []
    for name in committed_files():
        if not name.endswith(".md") or name.startswith("tests/fixtures/"):
            continue
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            for target in MARKDOWN_LINK.findall(line):
                path = target.split("#")[0]
                if not path or re.match(r"[a-z]+:", path):
                    continue  # an anchor in the page itself, or a URL
                if not (ROOT / name).parent.joinpath(path).resolve().exists():
                    broken.append(f"{name}:{number}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


@pytest.mark.parametrize("script", ["task_experiments", "probes"])
def test_a_page_names_the_runs_folder_as_runs_not_as_this_machines_path(script, monkeypatch):
    """The experiments write their command line into the pages they make; experiments/all_tables.sh
    exports its runs folder as RUNS, so that the line shows ``$RUNS`` and stays a portable command."""
    from conftest import load_experiment

    shown_command = load_experiment(script).shown_command
    monkeypatch.setenv("RUNS", "/srv/alice/runs/")
    arguments = ["main", "--runs", "/srv/alice/runs/experiments", "--cache", "/srv/alice/runs",
                 "--output", "/srv/alice/runs-old/x.md", "--configs", "configs/tasks/sst5.toml"]
    assert shown_command(f"experiments/{script}.py", arguments) == (
        f"python experiments/{script}.py main --runs $RUNS/experiments --cache $RUNS "
        "--output /srv/alice/runs-old/x.md --configs configs/tasks/sst5.toml")
    monkeypatch.delenv("RUNS")
    assert shown_command(f"experiments/{script}.py", arguments) == f"python experiments/{script}.py " + " ".join(arguments)


# The packaged model's files as committed; a new model ships as release assets instead
# (docs/training.md, "Shipping a new packaged model"), so that no clone grows by its size again.
PACKAGED_MODEL_SHA256 = {
    "weights.hdf5": "486434a91a149ac652847cbbec33c32181e7281919e92d850fef1bef1e3f8e24",
    "softmax_weights.hdf5": "e99763712e095167ea30740925d8f77c2646b87b02a9ef0ff82ba3fb926b18ec",
    "vocab.txt": "061b6baf40a052972128a8cf7156f0b65f5c8924485972cf4a998ff7d4370d72",
    "warm_state.npz": "d31ac47ec3efecaf68390fbec6be73ef6638e2ef299d96c35122ca6637a95e51",
}


def test_the_packaged_model_files_are_not_committed_again():
    import hashlib

    folder = ROOT / "src" / "elmo" / "resources" / "model"
    for name, expected in PACKAGED_MODEL_SHA256.items():
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert digest == expected, (f"{name} changed: ship a new packaged model as release assets "
                                    "(docs/training.md, 'Shipping a new packaged model'), not as a commit")
