"""Parity with the original TensorFlow implementation (the first test, as minGPT would have it)."""

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, fixture_batches, load_fixture_model, top_as_fixture

from elmo import Embedder, batch_to_char_ids
from elmo.inference.runtime import Runtime

TOLERANCE = 1e-5


@pytest.mark.parametrize("path", ["runtime", "training", "plain"])
@pytest.mark.parametrize("name", ["allennlp", "bilm-tf"])
def test_stateful_biLM_reproduces_reference_outputs(name, path):
    """The fast inference runtime, the (fast) training path and the plain specification."""
    model = load_fixture_model(name)
    model.fast = path != "plain"
    if path == "runtime":
        model = Runtime(model, state="reset")
    state = None
    worst = 0.0
    with torch.no_grad():
        for batch, expected in fixture_batches(name):
            ids, mask = batch_to_char_ids(batch)
            out = model(ids, mask, state)
            state = out.state
            for row, (tokens, want) in enumerate(zip(batch, expected)):
                got = top_as_fixture(out.layers[row, :, :len(tokens)].numpy())
                assert got.shape == want.shape
                worst = max(worst, float(np.abs(got - want).max()))
    assert worst < TOLERANCE


@pytest.mark.parametrize("name", ["allennlp", "bilm-tf"])
def test_embedder_stateful_matches_reference(name):
    """The same numbers through the public API: batches of 3 in input order, state by row."""
    embedder = Embedder(load_fixture_model(name), state="stateful")
    for batch, expected in fixture_batches(name):
        arrays = embedder.embed_sentences(batch, layers="all", batch_size=3)
        for array, want in zip(arrays, expected):
            np.testing.assert_allclose(top_as_fixture(array), want, atol=TOLERANCE, rtol=0)


def test_token_vectors_match_reference(allennlp_model):
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    with h5py.File(ALLENNLP / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(words) == expected.shape[0] == 458
    ids, _ = batch_to_char_ids([[w] for w in words])
    with torch.no_grad():
        got = allennlp_model.token_encoder(ids)[:, 0].numpy()
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)


def test_layer_zero_is_duplicated_token_vector(allennlp_model):
    ids, mask = batch_to_char_ids([["Hello", "world", "."]])
    with torch.no_grad():
        out = allennlp_model(ids, mask)
        tokens = allennlp_model.token_encoder(ids)[0]
    layer0 = out.layers[0, 0]
    torch.testing.assert_close(layer0[:, :16], tokens, rtol=0, atol=1e-6)
    torch.testing.assert_close(layer0[:, 16:], layer0[:, :16], rtol=0, atol=0)
