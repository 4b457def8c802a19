"""Every fast path against the plain, readable implementation (the specification)."""

import pytest
import torch

from elmo import BiLM, batch_to_char_ids
from elmo.config import BiLMConfig
from elmo.encoder import encode_distinct
from elmo.lstm import LstmLayer, lstm_fast, lstm_plain
from elmo.runtime import Runtime

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
        a, b = Runtime(fast)(ids, mask), plain(ids, mask)
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


# ------------------------------------------------------------------ Embedder: fast vs plain
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

from conftest import load_fixture_model  # noqa: E402
from elmo import Embedder  # noqa: E402
from elmo.encoder import encode_fast, encode_words_fast  # noqa: E402
from elmo.vocab_cache import load_vocab_cache, save_vocab_cache  # noqa: E402

TEXT = [s.split() for s in [
    "The committee will meet again next week to discuss the proposal .",
    "It rained .", "", "東京 は 日本 の 首都 です 🍕",
    "a " * 60, "prices rose by 3 percent in the first quarter , according to the report .",
    "x" * 80 + " é" * 5, "The the THE the",
]]


def twin_embedders(config, **kwargs):
    fast_model = BiLM(config, fast=True).eval()
    plain_model = BiLM(config, fast=False).eval()
    plain_model.load_state_dict(fast_model.state_dict())
    return Embedder(fast_model, **kwargs), Embedder(plain_model, **kwargs)


@pytest.mark.parametrize("state", ["warm", "reset", "stateful"])
@pytest.mark.parametrize("kwargs", [dict(n_layers=1), dict(n_layers=2), dict(n_layers=3, skip=False),
                                    dict(activation="tanh", filters=((1, 3), (4, 6), (6, 5)), n_highway=2)])
def test_embedder_fast_equals_plain_in_every_state_mode(state, kwargs):
    torch.manual_seed(1)
    fast, plain = twin_embedders(make_config(**kwargs), state=state)
    for _ in range(2):  # the second round checks carried state (stateful) and the memo
        a = fast.embed_sentences(TEXT, batch_size=3)
        b = plain.embed_sentences(TEXT, batch_size=3)
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def test_fixture_model_fast_equals_plain_on_awkward_text():
    fast = Embedder(load_fixture_model("allennlp"))
    plain_model = load_fixture_model("allennlp")
    plain_model.fast = False
    plain = Embedder(plain_model)
    for x, y in zip(fast.embed_sentences(TEXT), plain.embed_sentences(TEXT)):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def test_encoder_skips_padding_slots_exactly():
    """Words of every length, including ones that fill all 50 slots (no all-padding window)."""
    torch.manual_seed(2)
    model = BiLM(make_config(filters=((1, 4), (3, 5), (7, 6)))).eval()
    words = ["a", "ab", "word", "x" * 40, "y" * 43, "z" * 45, "w" * 48, "v" * 90, "<S>", "</S>", "é" * 24]
    ids, _ = batch_to_char_ids([[w] for w in words])
    with torch.no_grad():
        expected = model.token_encoder(ids)[:, 0]
        torch.testing.assert_close(encode_words_fast(model.token_encoder, ids[:, 0]), expected, rtol=0, atol=1e-5)
        batch_ids, mask = batch_to_char_ids(TEXT)
        got = encode_fast(model.token_encoder, batch_ids, mask)
        torch.testing.assert_close(got, model.token_encoder(batch_ids) * mask.unsqueeze(-1), rtol=0, atol=1e-5)
    assert (got[~mask] == 0).all()


def test_memo_is_dropped_when_weights_change():
    torch.manual_seed(3)
    model = BiLM(make_config()).eval()
    embedder = Embedder(model, state="reset")
    before = embedder.embed_sentences([["hello", "world"]])[0]
    with torch.no_grad():
        model.token_encoder.projection.weight.mul_(2.0)
    after = embedder.embed_sentences([["hello", "world"]])[0]
    fresh = Embedder(model, state="reset", token_memo=0).embed_sentences([["hello", "world"]])[0]
    np.testing.assert_allclose(after, fresh, atol=1e-6, rtol=0)
    assert np.abs(after - before).max() > 1e-3


def test_vocab_cache_round_trip_and_fallback(tmp_path):
    torch.manual_seed(4)
    model = BiLM(make_config()).eval()
    path = tmp_path / "cache.hdf5"
    assert save_vocab_cache(model, ["the", "cat", "the", "", "sat"], path) == 3
    cache = load_vocab_cache(path, model)
    assert list(cache) == ["the", "cat", "sat"]
    cached = Embedder(model, vocab_cache=path, token_memo=0).embed_sentences(["the cat sat on the unseenword"])[0]
    plain = Embedder(model, token_memo=0).embed_sentences(["the cat sat on the unseenword"])[0]
    np.testing.assert_allclose(cached, plain, atol=1e-5, rtol=0)
    other = BiLM(make_config()).eval()
    with pytest.raises(ValueError, match="different model"):
        load_vocab_cache(path, other)


def test_bfloat16_stays_close_to_float32():
    model = load_fixture_model("allennlp")
    reference = Embedder(model).embed_sentences(TEXT)
    low = Embedder(model, precision="bfloat16").embed_sentences(TEXT)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(low, reference) if a.size)
    scale = max(float(np.abs(b).max()) for b in reference if b.size)
    assert 0 < worst < 0.05 * scale
    with pytest.raises(ValueError, match="precision"):
        Embedder(model, precision="int8")


def test_token_budget_batches_keep_input_order():
    embedder = Embedder(load_fixture_model("allennlp"), max_tokens=20)
    sentences = [["w"] * n for n in (3, 9, 1, 7, 0, 5)]
    batches = list(embedder._batches(sentences, batch_size=4))
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * (len(sentences[b[0]]) + 2) <= 20 or len(b) == 1 for b in batches)
    arrays = embedder.embed_sentences(sentences, layers="top")
    assert [a.shape[0] for a in arrays] == [3, 9, 1, 7, 0, 5]


LONG_SENTENCE = """
import json, resource, sys
import torch
from elmo import BiLM, Embedder
from elmo.config import published_config
model = BiLM(published_config("small")).eval()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
words = [f"w{i % 997}" for i in range(10_000)]
(vectors,) = Embedder(model, state="reset").embed_sentences([words], layers="top")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"shape": list(vectors.shape), "growth_mb": (after - before) / 1024}))
"""


def test_ten_thousand_token_sentence_has_bounded_memory():
    out = subprocess.run([sys.executable, "-c", LONG_SENTENCE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["shape"] == [10_000, 256]
    assert result["growth_mb"] < 400, result


def test_stacked_weights_follow_weight_changes():
    torch.manual_seed(5)
    model = BiLM(make_config()).eval()
    ids, mask = batch_to_char_ids([["a", "b", "c"]])
    runtime = Runtime(model)
    with torch.no_grad():
        before = runtime(ids, mask).layers
        model.forward_layers[0].state_weight.mul_(1.5)
        after = runtime(ids, mask).layers
        plain = BiLM(make_config(), fast=False).eval()
        plain.load_state_dict(model.state_dict())
        torch.testing.assert_close(after, plain(ids, mask).layers, rtol=0, atol=1e-5)
    assert (after - before).abs().max() > 1e-4
