"""Linear probes (the paper's Table 6; experiments/probes_lib/linear.py) and the PTB-sample POS reader,
on tiny data."""

import zipfile

import numpy as np
import pytest
import torch
from conftest import load_experiment

from elmo.inference.layer_cache import LayerCache
from elmo.tasks.catalog import read_dataset
from elmo.tasks.readers import DatasetError
from elmo.tasks.tagging import PTB_SAMPLE_SPLITS, read_ptb_sample_pos

# experiments/probes_lib/linear.py: the probes serve experiments/probes.py only.
linear = load_experiment("probes_lib/linear")
accuracy, label_ids, layer_token_features = linear.accuracy, linear.label_ids, linear.layer_token_features
train_linear_probe, word_vector_features = linear.train_linear_probe, linear.word_vector_features


def test_probe_learns_a_linearly_separable_label_and_keeps_the_best_dev_epoch():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 8)).astype(np.float32) * 3
    y = rng.integers(0, 3, size=600)
    x = (centres[y] + rng.normal(size=(600, 8)).astype(np.float32) * 0.3).astype(np.float32)
    probe, history = train_linear_probe(x[:400], y[:400], x[400:500], y[400:500], 3, epochs=10, batch_size=32)
    assert isinstance(probe, torch.nn.Linear) and probe.in_features == 8 and probe.out_features == 3
    assert accuracy(probe, x[400:500], y[400:500]) == pytest.approx(max(history))  # the best epoch's weights
    assert accuracy(probe, x[500:], y[500:]) > 0.95
    # a label the training data never had is always wrong
    unknown = y[500:].copy()
    unknown[:10] = -1
    assert accuracy(probe, x[500:], unknown) <= accuracy(probe, x[500:], y[500:]) - 0.09


def test_probe_on_noise_stays_near_chance():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(800, 4)).astype(np.float32)
    y = rng.integers(0, 4, size=800)
    probe, _ = train_linear_probe(x[:600], y[:600], x[600:700], y[600:700], 4, epochs=5)
    assert accuracy(probe, x[700:], y[700:]) < 0.45


def test_features_and_labels():
    layers = np.arange(5 * 3 * 2, dtype=np.float16).reshape(5, 3, 2)  # (tokens, L+1, dim)
    cache = LayerCache(layers, np.array([0, 2, 5]))
    np.testing.assert_array_equal(layer_token_features(cache, 1), layers[:, 1].astype(np.float32))
    with pytest.raises(ValueError, match="layers 0..2"):
        layer_token_features(cache, 3)
    vectors = {"the": np.ones(2, dtype=np.float32)}
    np.testing.assert_array_equal(word_vector_features([["The", "cat"], ["the"]], vectors, 2),
                                  [[1, 1], [0, 0], [1, 1]])
    assert label_ids([["DT", "NN"], ["XX"]], {"DT": 0, "NN": 1}).tolist() == [0, 1, -1]


def make_treebank(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for number, text in files.items():
            archive.writestr(f"treebank/combined/wsj_{number:04d}.mrg", text)


TREES = """
( (S
    (NP-SBJ (NNP Pierre) (NNP Vinken) )
    (VP (MD will) (VP (VB join) (NP (-NONE- *-1) ) ))
    (. .) ))
( (S (NP-SBJ (PRP It) ) (VP (VBZ rains) ) (. .) ))
"""


def test_ptb_sample_reader(tmp_path):
    path = tmp_path / "treebank.zip"
    make_treebank(path, {n: TREES for n in range(1, 200)})
    train = read_ptb_sample_pos(path, "train")
    assert len(train) == 2 * len(PTB_SAMPLE_SPLITS["train"])
    assert train[0].tokens == ["Pierre", "Vinken", "will", "join", "."]  # the trace is not a word
    assert train[0].tags == ["NNP", "NNP", "MD", "VB", "."]
    assert read_dataset("ptb-sample", path, "test")[1].tokens == ["It", "rains", "."]
    # the three splits are disjoint and cover every file
    files = [n for split in ("train", "dev", "test") for n in PTB_SAMPLE_SPLITS[split]]
    assert sorted(files) == list(range(1, 200))
    with pytest.raises(ValueError, match="split must be one of"):
        read_ptb_sample_pos(path, "validation")


def test_ptb_sample_reader_errors_name_the_member_and_line(tmp_path):
    path = tmp_path / "treebank.zip"
    make_treebank(path, {n: TREES if n != 2 else TREES + "( (S (NN x)\n" for n in range(1, 200)})
    with pytest.raises(DatasetError, match=r"treebank/combined/wsj_0002.mrg:7: a tree is not closed"):
        read_ptb_sample_pos(path, "train")
    make_treebank(path, {n: TREES if n != 1 else "(NN x))\n" for n in range(1, 200)})
    with pytest.raises(DatasetError, match=r"wsj_0001.mrg:1: '\)' closes more brackets"):
        read_ptb_sample_pos(path, "train")
    make_treebank(path, {n: TREES if n != 1 else "( (S (NP (-NONE- *) ) ) )\n" for n in range(1, 200)})
    with pytest.raises(DatasetError, match="a tree without words"):
        read_ptb_sample_pos(path, "train")
