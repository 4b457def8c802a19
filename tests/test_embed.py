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

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

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
    batches = list(embedder.batches(sentences, batch_size=4))
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


def test_embed_takes_per_call_options_as_embed_sentences_did(embedder):
    """embed() is the one in-memory call; embed_sentences/embed_sentence give its arrays."""
    sentences = ["The bank raised rates .", "We sat on the river bank .", "a"]
    per_call = embedder.embed(sentences, layers="top", batch_size=2)
    for got, want in zip(per_call, embedder.embed_sentences(sentences, "top", 2)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(embedder.embed_sentence(sentences[2]), embedder.embed([sentences[2]])[0])
    assert [a.shape for a in per_call] == [(5, 32), (7, 32), (1, 32)]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_a_bad_batch_size_is_an_error_wherever_it_enters(embedder, tmp_path, bad):
    """A batch size below 1 (or not a count) is refused, naming it: never replaced by a default."""
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    with pytest.raises(ValueError, match="batch_size: must be at least 1"):
        Embedder(embedder.model, batch_size=bad)
    with pytest.raises(ValueError, match="batch_size: must be at least 1"):
        embedder.embed(["a b"], batch_size=bad)
    with pytest.raises(ValueError, match="batch_size: must be at least 1"):
        embedder.embed_sentences(["a b"], batch_size=bad)
    with pytest.raises(ValueError, match="batch_size: must be at least 1"):
        embedder.embed_file(src, tmp_path / "out.hdf5", batch_size=bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_file_embedder_uses_the_embedder_and_embed_file_wraps_it(tmp_path):
    """FileEmbedder writes with its Embedder's batch size; Embedder.embed_file(batch_size=N) is
    the same as FileEmbedder over an Embedder of batch size N, and leaves the embedder as it was."""
    from elmo import FileEmbedder, open_embeddings

    model = load_fixture_model("allennlp")
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{' '.join(['w'] * (i % 7 + 1))} end\n" for i in range(11)))
    base = Embedder(model, state="stateful")
    base.embed_file(src, tmp_path / "wrapped.hdf5", batch_size=3, layers="top")
    assert base.batch_size == 64
    FileEmbedder(Embedder(model, state="stateful", batch_size=3), layers="top").write(src, tmp_path / "direct.hdf5")
    with open_embeddings(tmp_path / "wrapped.hdf5") as a, open_embeddings(tmp_path / "direct.hdf5") as b:
        assert len(a) == len(b) == 11
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # Stateful batches of 3 and of 64 carry different states: the batch size did reach the file.
    base.embed_file(src, tmp_path / "default.hdf5", layers="top")
    with open_embeddings(tmp_path / "wrapped.hdf5") as a, open_embeddings(tmp_path / "default.hdf5") as b:
        assert any(not np.array_equal(x, y) for x, y in zip(a, b))
