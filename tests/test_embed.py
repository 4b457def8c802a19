"""The Embedder (elmo.inference.embed): the reference outputs in stateful mode, fast equals plain in
every state mode, batches by token budget in input order, awkward sentences, layer selection."""

import numpy as np
import pytest
import torch
from conftest import (
    TEXT,
    fixture_batches,
    load_fixture_model,
    make_config,
    top_as_fixture,
)

from elmo import BiLM, Embedder, batch_to_char_ids
from elmo.model.chars import BOS_IDS, EOS_IDS

TOLERANCE = 1e-5


@pytest.mark.parametrize("name", ["allennlp", "bilm-tf"])
def test_embedder_stateful_matches_reference(name):
    """The same numbers through the public API: batches of 3 in input order, state by row."""
    embedder = Embedder(load_fixture_model(name), state="stateful")
    for batch, expected in fixture_batches(name):
        arrays = embedder.embed_sentences(batch, layers="all", batch_size=3)
        for array, want in zip(arrays, expected):
            np.testing.assert_allclose(top_as_fixture(array), want, atol=TOLERANCE, rtol=0)


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


def test_token_budget_batches_keep_input_order():
    embedder = Embedder(load_fixture_model("allennlp"), max_tokens=20)
    sentences = [["w"] * n for n in (3, 9, 1, 7, 0, 5)]
    batches = list(embedder._batches(sentences, batch_size=4))
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * (len(sentences[b[0]]) + 2) <= 20 or len(b) == 1 for b in batches)
    arrays = embedder.embed_sentences(sentences, layers="top")
    assert [a.shape[0] for a in arrays] == [3, 9, 1, 7, 0, 5]


@pytest.fixture(scope="module")
def embedder():
    return Embedder(load_fixture_model("allennlp"))


AWKWARD = {
    "empty": [],
    "one token": ["Hello"],
    "long sentence": [f"w{i % 37}" for i in range(200)],
    "token over 50 bytes": ["x" * 120, "end"],
    "multibyte cut at 48 bytes": ["a" * 47 + "é", "é" * 30],
    "emoji": ["I", "love", "🍕", "👩‍👩‍👧"],
    "CJK": ["東京", "は", "日本", "の", "首都", "です"],
    "literal boundary": ["<S>", "a", "</S>"],
    "zero-width and bidi": ["a\u200bb", "\u202eabc", "\ufeff"],
}


@pytest.mark.parametrize("name", list(AWKWARD))
def test_awkward_sentences_embed(embedder, name):
    tokens = AWKWARD[name]
    (array,) = embedder.embed_sentences([tokens])
    assert array.shape == (3, len(tokens), 32)
    assert array.dtype == np.float32
    assert np.isfinite(array).all()


def test_all_awkward_together_equal_alone(embedder):
    together = embedder.embed_sentences(list(AWKWARD.values()), batch_size=4)
    for tokens, array in zip(AWKWARD.values(), together):
        np.testing.assert_allclose(array, embedder.embed_sentences([tokens])[0], atol=1e-6, rtol=0)


def test_literal_boundary_token_is_the_boundary(embedder):
    ids, _ = batch_to_char_ids([["<S>", "</S>"]])
    np.testing.assert_array_equal(ids[0, 0].numpy(), BOS_IDS)
    np.testing.assert_array_equal(ids[0, 1].numpy(), EOS_IDS)
    # Its token vector is the boundary's: layer 0 of a literal "<S>" equals the model's own <S>.
    model = embedder.model
    with torch.no_grad():
        out = model(*batch_to_char_ids([["<S>"]]), keep_boundaries=True)
    np.testing.assert_allclose(out.layers[0, 0, 0].numpy(), out.layers[0, 0, 1].numpy(), atol=1e-6)


def test_truncation_makes_long_tokens_share_a_vector(embedder):
    a, b = embedder.embed_sentences([["y" * 48 + "tail"], ["y" * 48 + "other"]], layers=[0])
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    (c,) = embedder.embed_sentences([["y" * 47]], layers=[0])  # one byte short: a different word
    assert np.abs(a - c).max() > 1e-3


@pytest.mark.parametrize("layers, shape", [("all", (3, 4, 32)), ("top", (4, 32)), ("average", (4, 32)),
                                           ([0, 2], (2, 4, 32)), ([-1], (1, 4, 32))])
def test_layer_selection_shapes(embedder, layers, shape):
    (array,) = embedder.embed_sentences(["one two three four"], layers=layers)
    assert array.shape == shape


def test_layer_selection_values(embedder):
    all_layers = embedder.embed_sentences(["one two three"])[0]
    np.testing.assert_allclose(embedder.embed_sentences(["one two three"], layers="average")[0],
                               all_layers.mean(axis=0), atol=1e-7)
    np.testing.assert_array_equal(embedder.embed_sentences(["one two three"], layers="top")[0], all_layers[2])


@pytest.mark.parametrize("layers", ["bottom", [3]])
def test_bad_layer_selection(embedder, layers):
    with pytest.raises(ValueError, match="layers:"):
        embedder.embed_sentences(["a b"], layers=layers)
