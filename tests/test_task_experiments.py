"""The experiment runner's reuse of identical runs (experiments/task_experiments.py)."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def experiments():
    spec = importlib.util.spec_from_file_location("task_experiments", os.path.join(ROOT, "experiments", "task_experiments.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(folder, settings, finished=True):
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(settings, f)
    if finished:
        with open(os.path.join(folder, "metrics.json"), "w") as f:
            json.dump({"dev": 0.5, "seconds": 1.0}, f)


def test_identical_run_ignores_output_and_matches_everything_else(experiments, tmp_path):
    runs = str(tmp_path)
    settings = {"output": "x", "elmo": {"l2": 0.001, "layers": "mix"}, "train": {"seed": 1, "epochs": 6}}
    earlier = os.path.join(runs, "main", "ner", "elmo", "seed-1")
    _run(earlier, {**settings, "output": earlier})
    wanted = {**settings, "output": os.path.join(runs, "layers", "ner", "mix-l2-0.001", "seed-1")}
    assert experiments.identical_run(runs, "ner", 1, wanted) == earlier
    # Any other difference (here lambda, or the epoch cap) means a new run.
    assert experiments.identical_run(runs, "ner", 1, {**wanted, "elmo": {"l2": 1.0, "layers": "mix"}}) is None
    assert experiments.identical_run(runs, "ner", 1, {**wanted, "train": {"seed": 1, "epochs": 20}}) is None
    # A different seed folder or task name is never matched.
    assert experiments.identical_run(runs, "ner", 2, wanted) is None
    assert experiments.identical_run(runs, "pos", 1, wanted) is None


def test_identical_run_skips_unfinished_runs_and_the_run_itself(experiments, tmp_path):
    runs = str(tmp_path)
    settings = {"elmo": {"l2": 0.001}}
    unfinished = os.path.join(runs, "main", "ner", "elmo", "seed-1")
    _run(unfinished, {**settings, "output": unfinished}, finished=False)
    assert experiments.identical_run(runs, "ner", 1, {**settings, "output": "elsewhere"}) is None
    itself = os.path.join(runs, "layers", "ner", "top", "seed-1")
    _run(itself, {**settings, "output": itself})
    assert experiments.identical_run(runs, "ner", 1, {**settings, "output": itself}) is None
