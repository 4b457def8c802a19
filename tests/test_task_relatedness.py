"""SICK relatedness (elmo.tasks.relatedness): the reader, the target distribution, Pearson and
Spearman against SciPy and hand-computed cases, and training and evaluation end to end, with and
without ELMo, on tiny data."""

import json
import random

import numpy as np
import pytest
import torch

from elmo.cli.main import main
from elmo.inference.layer_cache import load_or_compute
from elmo.tasks.catalog import read_dataset
from elmo.tasks.config import TaskConfigError, load_task_config
from elmo.tasks.readers import DatasetError
from elmo.tasks.relatedness import (
    Relatedness,
    ScoredPair,
    pearson,
    ranks,
    score_distribution,
    spearman,
)
from elmo.tasks.training import load_bilm_source, load_task_model, train_task

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

HEADER = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
          "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set")


def sick_row(i, a, b, score, split="TRAIN", label="NEUTRAL"):
    return f"{i}\t{a}\t{b}\t{label}\t{score}\tx\tx\tx\tx\tx\tx\t{split}"


# ------------------------------------------------------------------------------ reader
def test_reader_gives_each_splits_pairs_with_their_scores(tmp_path):
    path = tmp_path / "SICK.txt"
    path.write_text("\r\n".join([HEADER, sick_row(1, "A man isn't running.", "A man is running", 3.6),
                                 sick_row(2, "A dog barks", "A cat sleeps", 1, "TRIAL"),
                                 sick_row(3, "Two kids play", "Kids are playing", "4.9", "TEST")]), encoding="utf-8")
    (train,) = read_dataset("sick-relatedness", path, "train")
    assert train == ScoredPair(["A", "man", "isn", "'t", "running", "."], ["A", "man", "is", "running"], 3.6)
    assert [p.score for p in read_dataset("sick-relatedness", path, "trial")] == [1.0]
    assert [p.score for p in read_dataset("sick-relatedness", path, "test")] == [4.9]


@pytest.mark.parametrize("score", ["0.5", "5.2", "high", "nan", ""])
def test_a_score_that_is_not_from_1_to_5_names_the_line(tmp_path, score):
    path = tmp_path / "SICK.txt"
    # The bad row is in another split than the one read: every row is checked.
    path.write_text("\n".join([HEADER, sick_row(1, "a", "b", 3), sick_row(2, "c", "d", score, "TEST")]) + "\n",
                    encoding="utf-8")
    with pytest.raises(DatasetError, match=rf"SICK.txt:3: relatedness_score '{score}' is not a number from 1 to 5"):
        read_dataset("sick-relatedness", path, "train")


def test_reader_errors(tmp_path):
    path = tmp_path / "SICK.txt"
    path.write_text(HEADER.replace("relatedness_score", "score") + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="SICK.txt:1: the header has no column relatedness_score"):
        read_dataset("sick-relatedness", path, "train")
    path.write_text("\n".join([HEADER, sick_row(1, "a", "b", 3)]) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no pairs with SemEval_set TEST"):
        read_dataset("sick-relatedness", path, "test")
    with pytest.raises(ValueError, match="sick: split must be one of train, trial, test"):
        read_dataset("sick-relatedness", path, "dev")


# ------------------------------------------------------------------------------ target and metrics
def test_score_distribution_puts_the_score_between_its_two_integers():
    target = score_distribution(torch.tensor([1.0, 4.5, 5.0, 3.2, 1.7]))
    expected = torch.tensor([[1, 0, 0, 0, 0], [0, 0, 0, 0.5, 0.5], [0, 0, 0, 0, 1], [0, 0, 0.8, 0.2, 0],
                             [0.3, 0.7, 0, 0, 0]])
    torch.testing.assert_close(target, expected)
    torch.testing.assert_close(target @ torch.arange(1.0, 6.0), torch.tensor([1.0, 4.5, 5.0, 3.2, 1.7]))


def test_pearson_and_spearman_by_hand():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # x = 1, 2, 3, 4; y = 1, 3, 2, 4: means 2.5, covariance sum 4, variance sums 5 and 5
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 5)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0 and pearson([2.0], [3.0]) == 0.0  # undefined: 0
    assert ranks([10, 30, 20, 20]).tolist() == [1.0, 4.0, 2.5, 2.5]
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)  # monotone, not linear
    with pytest.raises(ValueError, match="3 values against 2"):
        pearson([1, 2, 3], [1, 2])


def test_pearson_and_spearman_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.integers(1, 6, size=40).astype(float)  # many ties
        y = x + rng.normal(size=40)
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)


def test_evaluation_reports_both_correlations_and_the_error():
    examples = [ScoredPair(["a"], ["b"], s) for s in (1.0, 2.0, 4.0, 5.0)]
    predicted = [1.5, 2.0, 3.0, 4.5]
    evaluation = Relatedness().evaluate(examples, predicted)
    assert evaluation.metric == "pearson" and evaluation.score == pytest.approx(pearson(predicted, [1, 2, 4, 5]))
    assert evaluation.details["mse"] == pytest.approx((0.25 + 0 + 1 + 0.25) / 4)
    by_rank = Relatedness(metric="spearman").evaluate(examples, predicted)
    assert by_rank.score == 1.0 and by_rank.details == evaluation.details


# ------------------------------------------------------------------------------ end to end
def write_sick(path, n, seed):
    """Pairs whose score follows from the words: the same sentence scores 5, one word changed 3,
    unrelated sentences 1 (plus a little noise)."""
    rng = random.Random(seed)
    rows = [HEADER]
    for i in range(n):
        subject, verb = rng.choice(["A man", "A woman", "A dog"]), rng.choice(["running", "sleeping"])
        kind = rng.random()
        if kind < 0.35:
            other, score = f"{subject} is {verb}", 4.6 + 0.4 * rng.random()
        elif kind < 0.7:
            other, score = f"{subject} is not {verb}", 2.8 + 0.4 * rng.random()
        else:
            other, score = "The sky is blue", 1.0 + 0.4 * rng.random()
        split = "TRAIN" if i < n * 0.7 else ("TRIAL" if i < n * 0.85 else "TEST")
        rows.append(sick_row(i, f"{subject} is {verb}", other, f"{score:.1f}", split))
    path.write_text("\r\n".join(rows), encoding="utf-8")


@pytest.fixture
def relatedness_config(tmp_path, bilm_dir):
    write_sick(tmp_path / "SICK.txt", 80, 1)
    path = tmp_path / "relatedness.toml"
    path.write_text(f"""
task = "relatedness"
metric = "pearson"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "sick-relatedness"
train = {{ path = "{tmp_path / 'SICK.txt'}", split = "train" }}
dev = {{ path = "{tmp_path / 'SICK.txt'}", split = "trial" }}
test = {{ path = "{tmp_path / 'SICK.txt'}", split = "test" }}
[model]
hidden = 12
char_filters = 4
dropout = 0.0
[elmo]
placement = "both"
dropout = 0.0
[bilm]
model = "{bilm_dir}"
[train]
epochs = 2
batch_size = 8
learning_rate = 0.01
""", encoding="utf-8")
    return path


def test_relatedness_trains_with_elmo_and_evaluates_from_the_cli(relatedness_config, tmp_path, capsys):
    assert main(["task", "train", str(relatedness_config), "--no-progress"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["task"] == "relatedness" and metrics["metric"] == "pearson"
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    assert set(metrics["test_details"]) == {"pearson", "spearman", "mse"}
    assert metrics["test"] == metrics["test_details"]["pearson"]
    assert set(metrics["layer_weights"]) == {"input", "output"} and metrics["cpu_seconds"] > 0
    # The reported test score is Pearson's r of the best model's expected scores, counted here.
    model, config, vocab, labels = load_task_model(run)
    task = Relatedness(config.model, config.metric)
    test = read_dataset("sick-relatedness", tmp_path / "SICK.txt", "test")
    split = task.split(test)
    split.layers = load_or_compute(load_bilm_source(config), split.sentences, config.cache_dir, "check",
                                   progress=False)
    # At training's batch size: the task model's own products, unlike the biLM's, may round
    # differently in another batch (they did with kernels held to AVX2: 2e-6 in Pearson's r).
    predicted = task.predict(model, split, vocab, labels, batch_size=config.train.batch_size)
    assert all(1.0 <= p <= 5.0 for p in predicted)
    assert metrics["test"] == pytest.approx(pearson(predicted, [p.score for p in test]))
    capsys.readouterr()
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "SICK.txt"), "--split", "test", "--json",
                 str(tmp_path / "eval.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pearson ") and "spearman" in out and "mean squared error" in out
    assert json.loads((tmp_path / "eval.json").read_text())["score"] == pytest.approx(metrics["test"])
    # The entailment labels of the same file are another task's data.
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "SICK.txt"), "--split", "test",
                 "--kind", "sick"]) == 2
    assert "cannot be scored by the relatedness model" in capsys.readouterr().err


def test_relatedness_baseline_learns_the_toy_task(relatedness_config):
    config = load_task_config(relatedness_config, {"elmo": {"enabled": False}, "train": {"epochs": 10}})
    metrics = train_task(config, progress=False)
    assert metrics["layer_weights"] == {}
    assert metrics["dev"] > 0.9 and metrics["test_details"]["spearman"] > 0.8


def test_relatedness_metric_and_settings(relatedness_config):
    assert load_task_config(relatedness_config, {"metric": "spearman"}).metric == "spearman"
    with pytest.raises(TaskConfigError, match="task 'relatedness' is scored by pearson or spearman, got 'accuracy'"):
        load_task_config(relatedness_config, {"metric": "accuracy"})
    with pytest.raises(TaskConfigError, match=r"relatedness.toml: model.crf: unknown field\(s\) of ModelSettings"):
        load_task_config(relatedness_config, {"model": {"crf": True}})
