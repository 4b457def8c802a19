"""Every fast path against the plain, readable implementation (the specification)."""

import pytest
import torch

from elmo import BiLM, batch_to_char_ids
from elmo.config import BiLMConfig
from elmo.encoder import encode_distinct
from elmo.lstm import LstmLayer, lstm_fast, lstm_plain

SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], [], ["the", "the", "THE", "cat"], ["x" * 70]]


def make_config(n_layers=2, skip=True, activation="relu", filters=((1, 4), (2, 8), (3, 8)), n_highway=1):
    return BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 12, "n_layers": n_layers, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [list(f) for f in filters], "n_highway": n_highway,
                     "activation": activation, "n_characters": 262, "max_characters_per_token": 50}})


@pytest.mark.parametrize("clip", [None, 0.5])
def test_lstm_fast_matches_plain(clip):
    layer = LstmLayer(6, 10, 5, cell_clip=clip, proj_clip=clip)
    inputs = torch.randn(3, 7, 6)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [False] * 7])
    state = (torch.randn(3, 10), torch.randn(3, 5))
    plain_out, plain_state = lstm_plain(layer, inputs, mask, state)
    fast_out, fast_state = lstm_fast(layer, inputs, mask, state)
    torch.testing.assert_close(fast_out, plain_out, rtol=0, atol=1e-5)
    for a, b in zip(fast_state, plain_state):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(n_layers=1), dict(n_layers=3, skip=False), dict(activation="tanh"),
                                    dict(filters=((2, 3), (7, 5)), n_highway=2)])
def test_bilm_fast_matches_plain(kwargs):
    config = make_config(**kwargs)
    fast = BiLM(config, fast=True).eval()
    plain = BiLM(config, fast=False).eval()
    plain.load_state_dict(fast.state_dict())
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.no_grad():
        a, b = fast(ids, mask), plain(ids, mask)
    torch.testing.assert_close(a.layers, b.layers, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.state.c, b.state.c, rtol=0, atol=1e-5)


def test_encode_distinct_matches_encoder_and_gradients():
    model = BiLM(make_config())
    ids, _ = batch_to_char_ids(SENTENCES)
    plain = model.token_encoder(ids)
    distinct = encode_distinct(model.token_encoder, ids)
    torch.testing.assert_close(distinct, plain, rtol=0, atol=1e-5)
    weight = torch.randn_like(plain)
    grad_plain = torch.autograd.grad((plain * weight).sum(), model.token_encoder.convs[0].weight)[0]
    grad_distinct = torch.autograd.grad((distinct * weight).sum(), model.token_encoder.convs[0].weight)[0]
    torch.testing.assert_close(grad_distinct, grad_plain, rtol=1e-4, atol=1e-5)
