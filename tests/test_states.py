"""Each state mode keeps its promise."""

import numpy as np
import pytest
from conftest import fixture_batches, load_fixture_model

from elmo import DEFAULT_STATE, Embedder
from elmo.inference.runtime import compute_warm_state
from elmo.inference.states import StateKeeper

pytestmark = pytest.mark.exactness

TARGET = "the committee agreed to share the cost of the new bridge .".split()
OTHERS = [s.split() for s in [
    "prices rose sharply in the first quarter of the year .",
    "she wrote several books about the history of music .",
    "it rained all day .",
    "the species is found in tropical forests in south america and in parts of africa .",
]]


@pytest.mark.parametrize("state", ["warm", "reset"])
def test_vectors_independent_of_batch_and_history(state):
    embedder = Embedder(load_fixture_model("allennlp"), state=state)
    alone = embedder.embed_sentences([TARGET])[0]
    in_batch = embedder.embed_sentences(OTHERS[:2] + [TARGET] + OTHERS[2:], batch_size=5)[2]
    for _ in range(3):  # earlier calls with other text must not matter
        embedder.embed_sentences(OTHERS, batch_size=2)
    after = embedder.embed_sentences([TARGET] + OTHERS, batch_size=2)[0]
    # To the bit, on any CPU: every product runs on fixed row blocks (elmo.kernels.blocks).
    assert np.array_equal(in_batch, alone)
    assert np.array_equal(after, alone)


def test_default_is_warm_and_differs_from_reset():
    assert DEFAULT_STATE == "warm"
    model = load_fixture_model("allennlp")
    warm = Embedder(model).embed_sentences([TARGET])[0]
    reset = Embedder(model, state="reset").embed_sentences([TARGET])[0]
    np.testing.assert_array_equal(warm[0], reset[0])  # the token layer has no state
    assert np.abs(warm[1:] - reset[1:]).max() > 1e-3


def test_warm_state_is_deterministic_and_derived_from_model():
    model = load_fixture_model("allennlp")
    a, b = compute_warm_state(model), compute_warm_state(model)
    assert a.c.shape == (2, 2, 1, 64) and a.h.shape == (2, 2, 1, 16)
    np.testing.assert_array_equal(a.c.numpy(), b.c.numpy())
    assert a.c.abs().sum() > 0


def test_stateful_depends_on_history_and_resets():
    embedder = Embedder(load_fixture_model("allennlp"), state="stateful")
    first = embedder.embed_sentences([TARGET])[0]
    second = embedder.embed_sentences([TARGET])[0]
    assert np.abs(first[1:] - second[1:]).max() > 1e-4
    embedder.reset_state()
    np.testing.assert_allclose(embedder.embed_sentences([TARGET])[0], first, atol=1e-6, rtol=0)


def test_stateful_carries_by_row_and_keeps_unused_rows():
    model = load_fixture_model("allennlp")
    embedder = Embedder(model, state="stateful")
    embedder.embed_sentences(OTHERS[:3], batch_size=3)   # rows 0, 1, 2 get state
    embedder.embed_sentences(OTHERS[3:4], batch_size=1)  # only row 0 moves on
    row2 = embedder.embed_sentences(OTHERS[:2] + [TARGET], batch_size=3)[2]
    # Reference: row 2 has only read OTHERS[2] before TARGET.
    reference = Embedder(model, state="stateful")
    reference.embed_sentences([OTHERS[2]])
    np.testing.assert_allclose(row2, reference.embed_sentences([TARGET])[0], atol=1e-6, rtol=0)


def test_stateful_equals_running_the_fixture_in_one_call():
    name = "allennlp"
    batches = fixture_batches(name)
    flat = [s for batch, _ in batches for s in batch]
    arrays = Embedder(load_fixture_model(name), state="stateful").embed_sentences(flat, batch_size=3)
    expected = [e for _, exp in batches for e in exp]
    for array, want in zip(arrays, expected):
        top = array[-1]
        np.testing.assert_allclose(np.stack([top[:, :16], top[:, 16:]]), want, atol=1e-5, rtol=0)


def test_unknown_state_is_rejected():
    with pytest.raises(ValueError, match="state: expected one of"):
        StateKeeper("sticky")
