"""A pytest plugin for the GPU suite's ``cuda_tests`` section: each test's outcome and seconds are
appended to the JSON-lines file named by ``ELMO_PYTEST_PROGRESS`` as soon as the test ends, with
the collected test ids first, so that a run killed at its limit still says which tests passed,
which were slow and which never ran (pytest's own ``--durations`` table is printed only at the
end). Under pytest-xdist the controller writes the results (the workers send it their reports)
and each worker its collection.

    ELMO_PYTEST_PROGRESS=progress.jsonl python -m pytest -p pytest_progress tests/test_cuda.py   # (benchmarks/ on PYTHONPATH)

Two more variables, for a run that must end inside a limit: ``ELMO_PYTEST_FIRST`` (names, comma
separated) runs the tests whose id contains one of them first, in that order; and
``ELMO_PYTEST_TEST_TIMEOUT`` (seconds) cuts a test's body there (SIGALRM, in the main thread:
pytest-timeout need not be installed), recorded with the outcome ``timeout``.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

_config = None


class TestTimedOut(BaseException):
    """A test's body ran past ``ELMO_PYTEST_TEST_TIMEOUT``. Not an ``Exception``: the test's own
    ``except Exception`` (or torch.compile's) must not take it for an error of its code."""

    __test__ = False  # not a test class, whatever its name


def _write(record: dict) -> None:
    path = os.environ.get("ELMO_PYTEST_PROGRESS")
    if path:
        # One write per line on a file opened for appending: lines of several processes do not interleave.
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def pytest_configure(config) -> None:
    global _config
    _config = config


def pytest_collection_modifyitems(session, config, items) -> None:
    first = [name for name in os.environ.get("ELMO_PYTEST_FIRST", "").split(",") if name]
    if first:
        def rank(item) -> int:
            return next((i for i, name in enumerate(first) if name in item.nodeid), len(first))

        items.sort(key=rank)  # stable: the rest keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = float(os.environ.get("ELMO_PYTEST_TEST_TIMEOUT") or 0)
    armed = False
    if seconds > 0:
        def handler(signum, frame):
            raise TestTimedOut(f"cut at the per-test limit of {seconds:g} s")

        try:
            previous = signal.signal(signal.SIGALRM, handler)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            armed = True
        except ValueError:  # not the main thread: no alarm, the caller's limit still holds
            pass
    try:
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def pytest_collection_finish(session) -> None:
    _write({"collected": [item.nodeid for item in session.items]})


def pytest_runtest_logreport(report) -> None:
    if _config is not None and hasattr(_config, "workerinput"):
        return  # an xdist worker: its controller writes the same report
    if report.when == "call" or report.outcome != "passed":  # a skip or an error happens at set-up
        outcome = report.outcome
        if outcome == "failed" and "TestTimedOut" in str(report.longrepr)[-4000:]:
            outcome = "timeout"
        _write({"test": report.nodeid, "when": report.when, "outcome": outcome,
                "seconds": round(report.duration, 3)})


def read(path: str) -> dict:
    """What a run wrote: ``collected`` (test ids), ``outcomes`` (id -> passed, failed, skipped or
    error or timeout), ``seconds`` (id -> seconds of its phases that were reported) and ``not_run``."""
    collected, outcomes, seconds = set(), {}, {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if "collected" in record:
            collected.update(record["collected"])
            continue
        test = record["test"]
        seconds[test] = round(seconds.get(test, 0.0) + record["seconds"], 3)
        outcome = record["outcome"]
        if record["when"] != "call" and outcome == "failed":
            outcome = "error"  # failed in set-up or tear-down, as pytest counts it
        if outcomes.get(test) not in ("failed", "error", "timeout"):
            outcomes[test] = outcome
    return {"collected": sorted(collected), "outcomes": outcomes, "seconds": seconds,
            "not_run": sorted(collected - set(outcomes))}
