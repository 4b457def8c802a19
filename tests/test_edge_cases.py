"""Awkward text that every embedding must survive (flair keeps a battery like this)."""

import numpy as np
import pytest
import torch
from conftest import load_fixture_model

from elmo import Embedder
from elmo.model.chars import BOS_IDS, EOS_IDS, batch_to_char_ids


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
