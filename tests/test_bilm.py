"""The biLM (elmo.model.network): the original implementation's reference outputs, and its fast
training stack against the plain one."""

import h5py
import numpy as np
import pytest
import torch
from conftest import (
    ALLENNLP,
    SENTENCES,
    fixture_batches,
    load_fixture_model,
    make_config,
    top_as_fixture,
)

from elmo import (
    BiLM,
    batch_to_char_ids,
)
from elmo.inference.runtime import Runtime
from elmo.kernels.dispatch import bilm_forward, run_stack

pytestmark = pytest.mark.exactness


@pytest.mark.parametrize("kwargs", [dict(n_layers=1), dict(n_layers=3, skip=False), dict(activation="tanh"),
                                    dict(filters=((2, 3), (7, 5)), n_highway=2)])
def test_bilm_fast_matches_plain(kwargs):
    config = make_config(**kwargs)
    fast = BiLM(config, fast=True).eval()
    plain = BiLM(config, fast=False).eval()
    plain.load_state_dict(fast.state_dict())
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.no_grad():
        a, b = Runtime(fast)(ids, mask), plain(ids, mask)
    torch.testing.assert_close(a.layers, b.layers, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.state.c, b.state.c, rtol=0, atol=1e-5)


def test_bilm_training_stack_fast_equals_plain_on_full_windows():
    """run_stack (dispatch), as the LM's training step calls it (full windows, carried state), with the
    fast and the plain LSTM: same outputs, same final states, same parameter gradients."""
    torch.manual_seed(7)
    config = make_config(n_layers=2, skip=True)
    fast, plain = BiLM(config, fast=True).train(), BiLM(config, fast=False).train()
    plain.load_state_dict(fast.state_dict())
    tokens = torch.randn(3, 11, 12)
    mask = torch.ones(3, 11, dtype=torch.bool)
    state = fast.zero_state(3)
    state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
    for direction in (0, 1):
        results = []
        for model in (fast, plain):
            outputs, finals = run_stack(model, direction, tokens, mask, state)
            total = sum((o * (i + 1)).sum() for i, o in enumerate(outputs)) + sum(h.sum() for _, h in finals)
            layers = model.forward_layers if direction == 0 else model.backward_layers
            results.append((outputs, finals, torch.autograd.grad(total, list(layers.parameters()))))
        (fast_out, fast_finals, fast_grads), (plain_out, plain_finals, plain_grads) = results
        for a, b in zip(fast_out, plain_out):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        for (c_a, h_a), (c_b, h_b) in zip(fast_finals, plain_finals):
            torch.testing.assert_close(c_a, c_b, rtol=0, atol=1e-5)
            torch.testing.assert_close(h_a, h_b, rtol=0, atol=1e-5)
        for a, b in zip(fast_grads, plain_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


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
            out = bilm_forward(model, ids, mask, state) if path == "training" else model(ids, mask, state)
            state = out.state
            for row, (tokens, want) in enumerate(zip(batch, expected)):
                got = top_as_fixture(out.layers[row, :, :len(tokens)].numpy())
                assert got.shape == want.shape
                worst = max(worst, float(np.abs(got - want).max()))
    assert worst < TOLERANCE


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
    # The model encodes the sentence with its boundary tokens, this call without: other shapes, so
    # other kernels may round differently (1.4e-6 on a value of 4.7 with AVX2-held kernels on an Intel Xeon).
    torch.testing.assert_close(layer0[:, :16], tokens, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(layer0[:, 16:], layer0[:, :16], rtol=0, atol=0)
