"""The GPU lease's one command, rehearsed on the CPU against the lease's rules, so that a change
that breaks them fails here and not on the GPU (docs/gpu.md, "Running the suite on a lease").

The command is read from the docs' block that follows the marker line, and run as written by
bash, with ``$OUT`` an empty folder and the three variables that stand in for ``--device cpu``,
``--quick`` and a shorter budget. The rules checked are the lease's: exit 0; at most 8 files
come back from ``$OUT``, none deeper than ``$OUT/a/b/file``, names of letters, digits, ``.``,
``_`` and ``-``, each under 16 MiB and 64 MiB together; the JSON holds every goal figure as a
value or as not measured with its reason; and no process of the run is alive after it returns.

Marked slow (a few minutes of CPU): CI's slow pass runs it (.ci/run)."""

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "gpu.md"
MARKER_LINE = "<!-- the lease command: tests/test_gpu_lease.py runs the line of the next block as written -->"
BUDGET_S = 150  # the rehearsal's budget: sections past it are skipped or cut, which the rules allow
GOALS = ("train_original_bf16_tokens_per_s_per_direction", "embed_cuda_tokens_per_s", "embed_vs_allennlp_ratio",
         "embed_vs_allennlp_ratio_in_process", "float32_max_diff:inference:eager",
         "float32_max_diff:training:fused")
NAME = re.compile(r"[A-Za-z0-9._-]+")

pytestmark = pytest.mark.slow


def lease_command(text: str) -> str:
    """The one command line of the fenced block that follows the marker line of docs/gpu.md."""
    assert text.count(MARKER_LINE) == 1, "docs/gpu.md: the lease command's marker line is missing or doubled"
    after = text.split(MARKER_LINE, 1)[1].lstrip("\n")
    match = re.match(r"```bash\n(.*?)\n```", after, re.S)
    assert match, "docs/gpu.md: no ```bash block right after the lease command's marker line"
    lines = [line for line in match.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == 1, f"docs/gpu.md: the lease's block must hold one command, not {lines}"
    return lines[0]


def marked_processes(value: str) -> list[int]:
    """Processes whose environment carries the run's marker (every process of the run inherits it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"ELMO_GPU_SUITE_RUN={value}".encode() in environ and state != "Z":
            found.append(int(entry))
    return found


def test_the_docs_lease_command_is_the_suite_on_python3():
    command = lease_command(DOC.read_text(encoding="utf-8"))
    assert command.split()[:3] == ["PYTHONPATH=src", "python3", "benchmarks/gpu_suite.py"]
    assert '"$OUT/' in command


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux's /proc to find the run's processes")
def test_the_lease_command_keeps_the_lease_rules(tmp_path):
    command = lease_command(DOC.read_text(encoding="utf-8"))
    out = tmp_path / "OUT"
    out.mkdir()
    marker = uuid.uuid4().hex
    # `python3` as the lease has it: this interpreter, where its folder has that name.
    folder = Path(sys.executable).parent
    path = os.environ.get("PATH", "")
    if (folder / "python3").exists():
        path = os.pathsep.join([str(folder), path])
    env = dict(os.environ, OUT=str(out), PATH=path, ELMO_GPU_SUITE_DEVICE="cpu", ELMO_GPU_SUITE_QUICK="1",
               ELMO_GPU_SUITE_BUDGET_S=str(BUDGET_S), ELMO_GPU_SUITE_RUN=marker)
    env.pop("PYTHONPATH", None)  # the command sets its own, as on the lease
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=BUDGET_S + 240)
    seconds = time.monotonic() - start
    left = marked_processes(marker)
    for pid in left:  # (so that a failure here does not leave them on the machine)
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert left == [], f"processes of the run still alive after it returned: {left}"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert seconds < BUDGET_S + 120, seconds  # the budget holds (the driver's own time aside)

    files = [p for p in out.rglob("*") if p.is_file() or p.is_symlink()]
    assert 1 <= len(files) <= 8, files
    total = 0
    for file in files:
        parts = file.relative_to(out).parts
        assert len(parts) <= 3, f"{file}: deeper than $OUT/a/b/file"
        assert all(NAME.fullmatch(part) for part in parts), f"{file}: a name the lease leaves out"
        assert file.is_file() and not file.is_symlink()
        size = file.stat().st_size
        assert size < 16 * 2 ** 20, f"{file}: {size} bytes"
        total += size
    assert total < 64 * 2 ** 20

    report = json.loads((out / "gpu_suite.json").read_text(encoding="utf-8"))
    assert report["suite"]["device"] == "cpu" and report["suite"]["budget_s"] == BUDGET_S
    assert set(report["sections"]) == {"environment", "exactness", "train_original", "allennlp", "cuda_tests",
                                       "train_packaged", "embed", "embed_process", "train_process", "host_step",
                                       "host_cpu"}
    assert report["sections"]["environment"]["status"] == "ok"
    goals = report["goals"]
    assert set(GOALS) <= set(goals)
    for name, goal in goals.items():
        assert goal.get("target"), name
        has_value, reason = "value" in goal, goal.get("not_measured")
        assert has_value != (reason is not None), (name, goal)  # one or the other
        if has_value:
            assert isinstance(goal["value"], (int, float)), (name, goal)
        else:
            assert isinstance(reason, str) and len(reason) > 10, (name, goal)
    for name in GOALS[:4]:  # the GPU's figures: never a value on a CPU
        assert "value" not in goals[name], goals[name]
