"""The ``cuda_tests`` section: ``pytest tests/test_cuda.py`` in parallel workers (pytest-xdist, in
the ``test`` extra), heavy tests first, each cut at its own limit, each test's outcome and seconds
recorded as it ends (``pytest_progress.py``).

    PYTHONPATH=src python benchmarks/gpu/cuda_tests.py --device cpu --quick --out cuda_tests.json
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import BENCHMARKS, Deadline, Device, Recorder, run_alone, run_group

CUDA_TEST_WORKERS = 8  # pytest-xdist workers for tests/test_cuda.py on a GPU host
CUDA_TEST_TIMEOUT_S = 60  # one CUDA test's limit: cut there, it is recorded as not measured
# The CUDA tests that take longest (training runs, compiles, whole processes), dealt first so
# that the workers' last minutes go to the short ones: cut, a run loses short tests, not these.
HEAVY_CUDA_TESTS = ("test_trainer_with_cuda_graphs_and_compiled_cells", "test_training_on_cuda_runs_resumes",
                    "test_fused_window_on_cuda_matches_the_cpu_specification", "test_cli_train_with_gpus_zero",
                    "test_cli_embed_with_cuda_graphs", "test_elmoformanylangs_model_on_cuda")


def section_cuda_tests(rec: Recorder, args) -> None:
    """``pytest tests/test_cuda.py`` in a subprocess: in parallel workers where pytest-xdist is
    installed (the ``test`` extra has it), each test's outcome and seconds recorded as it ends
    (:mod:`pytest_progress`), stopped short of the section's limit so that a cut run still says
    which tests passed, which were slow and which never ran."""
    import importlib.util

    device, deadline = Device(args.device), Deadline(args.ends_at)
    if importlib.util.find_spec("pytest") is None:
        rec.fail("pytest is not installed in this Python: the CUDA tests did not run (the exactness section "
                 "checks the same paths against the specification)")
        return
    import pytest_progress  # (a pytest plugin: it imports pytest)
    progress = Path(args.work) / "cuda_tests_progress.jsonl"
    with contextlib.suppress(FileNotFoundError):
        progress.unlink()
    command = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider",
               "-p", "pytest_progress"]
    # The heavy tests first, each test cut at CUDA_TEST_TIMEOUT_S (pytest_progress: pytest-timeout
    # is not on the lease), and one compile thread per process: eight workers each starting an
    # inductor pool of a worker per core fought over the 16 cores.
    env = dict(os.environ, ELMO_PYTEST_PROGRESS=str(progress), ELMO_PYTEST_FIRST=",".join(HEAVY_CUDA_TESTS),
               ELMO_PYTEST_TEST_TIMEOUT=str(CUDA_TEST_TIMEOUT_S), TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(BENCHMARKS), os.environ.get("PYTHONPATH", "")]))
    rec.set("per_test_timeout_s", CUDA_TEST_TIMEOUT_S)
    workers = min(CUDA_TEST_WORKERS, max(1, (os.cpu_count() or 1) // 2))
    if importlib.util.find_spec("xdist") is not None and device.cuda and workers > 1:
        # Independent tests, each far from filling the GPU: in parallel they fit the section's
        # limit, the host's cores shared out (workers with every core's threads each for their
        # CPU references were no faster than one worker).
        command += ["-n", str(workers)]
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    else:
        workers = 1
    rec.set("command", " ".join(command[1:]))
    rec.set("workers", workers)
    start = time.monotonic()
    done = run_group(command, max(5.0, deadline.left()), env=env, merge_output=True)
    output, stopped = done.stdout, done.timed_out
    found = pytest_progress.read(str(progress))
    counts: dict[str, int] = {}
    for outcome in found["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    rec.set("seconds", round(time.monotonic() - start, 1))
    rec.set("counts", counts)
    rec.set("collected", len(found["collected"]))
    rec.set("slowest", [f"{s:.1f} s {name}" for name, s in sorted(found["seconds"].items(), key=lambda x: -x[1])[:10]])
    rec.set("seconds_per_test", found["seconds"])
    rec.set("not_run", found["not_run"])
    rec.set("exit_code", done.returncode)
    failed = sorted(name for name, outcome in found["outcomes"].items() if outcome in ("failed", "error"))
    rec.set("summary", [f"{name} {found['outcomes'][name].upper()}" for name in failed])
    failures = re.split(r"\n(?=_{3,} .* _{3,}\n)", output)
    rec.set("failures", [f[:4000] for f in failures[1:]][:12])
    # A test cut at its own limit, or never started before the section's, is not measured: it
    # neither passed nor failed. A failure is one.
    for name, outcome in sorted(found["outcomes"].items()):
        if outcome == "timeout":
            rec.not_measured({"test": name}, f"no time: cut at the per-test limit of {CUDA_TEST_TIMEOUT_S} s")
    for name in found["not_run"]:
        rec.not_measured({"test": name}, "no time: not finished when the section's limit came")
    if failed:
        rec.fail(f"{len(failed)} CUDA tests failed: {failed[:10]}\n{output[-1500:]}")
    elif not stopped and done.returncode not in (0, 1, 5):  # 1: tests failed or were cut; 5: nothing collected
        rec.fail(f"pytest exit code {done.returncode}: {counts}\n{output[-1500:]}")
    elif not stopped and done.returncode == 1 and not any(o == "timeout" for o in found["outcomes"].values()):
        rec.fail(f"pytest exit code 1 with no failed test recorded: {counts}\n{output[-1500:]}")


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"cuda_tests": section_cuda_tests}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
