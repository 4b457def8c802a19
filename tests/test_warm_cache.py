"""The warm state is computed once per model and kept on disk: same bits, no stale reuse."""

import numpy as np
import pytest
import torch
from conftest import load_fixture_model

import elmo.inference.runtime
from elmo import Embedder
from elmo.hub import load_model
from elmo.hub.pretrained import packaged_model_dir
from elmo.inference.runtime import (
    Runtime,
    compute_warm_state,
    load_or_compute_warm_state,
    warm_state_key,
)
from elmo.inference.states import WARM_STATE_FILE, warm_state_cache_path

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

SENTENCE = ["The", "committee", "met", "again", "."]


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "warm-states"


def _no_compute(*args, **kwargs):
    raise AssertionError("the warm state was computed again instead of read from the cache")


def test_cached_warm_state_gives_the_same_bits_without_recomputing(cache, monkeypatch):
    model = load_fixture_model("allennlp")
    first = Embedder(model).embed_sentence(SENTENCE)
    assert len(list(cache.glob("*.npz"))) == 1
    monkeypatch.setattr(elmo.inference.runtime, "compute_warm_state", _no_compute)
    again = Embedder(model).embed_sentence(SENTENCE)
    np.testing.assert_array_equal(again, first)


def test_a_changed_model_or_precision_gets_its_own_state(cache, bfloat16_selected):
    model = load_fixture_model("allennlp")
    runtime = Runtime(model)
    key = warm_state_key(runtime)
    assert warm_state_key(Runtime(model, precision="bfloat16")) != key
    changed = load_fixture_model("allennlp")
    with torch.no_grad():
        changed.forward_layers[1].bias.add_(0.5)
    assert warm_state_key(Runtime(changed)) != key
    a, b = load_or_compute_warm_state(runtime), load_or_compute_warm_state(Runtime(changed))
    assert (a.c - b.c).abs().max() > 1e-4
    torch.testing.assert_close(b.c, compute_warm_state(Runtime(changed)).c, rtol=0, atol=0)


def test_a_damaged_cache_file_is_recomputed_and_rewritten(cache):
    runtime = Runtime(load_fixture_model("allennlp"))
    expected = load_or_compute_warm_state(runtime)
    path = warm_state_cache_path(warm_state_key(runtime))
    path.write_bytes(b"not a numpy archive")
    state = load_or_compute_warm_state(runtime)
    torch.testing.assert_close(state.c, expected.c, rtol=0, atol=0)
    with np.load(path, allow_pickle=False) as f:  # rewritten whole
        np.testing.assert_array_equal(f["h"], expected.h.numpy())


def test_an_unwritable_cache_only_warns(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("ELMO_CACHE", str(blocker))
    with pytest.warns(UserWarning, match="could not keep the warm state"):
        vectors = Embedder(load_fixture_model("allennlp")).embed_sentence(SENTENCE)
    assert vectors.shape == (3, 5, 32)


def test_the_packaged_model_ships_its_warm_state(cache, monkeypatch):
    runtime = Runtime(load_model())
    with np.load(packaged_model_dir() / WARM_STATE_FILE, allow_pickle=False) as f:
        assert str(f["key"]) == warm_state_key(runtime), "re-run experiments/write_warm_state.py after re-packaging"
        shipped_c = f["c"]
    # The last bits of a computed state depend on the CPU and the thread count (2.7e-6 seen).
    torch.testing.assert_close(torch.from_numpy(shipped_c), compute_warm_state(runtime).c, rtol=0, atol=1e-5)
    monkeypatch.setattr(elmo.inference.runtime, "compute_warm_state", _no_compute)
    load_or_compute_warm_state(runtime)
    assert not cache.exists()  # read from the package, nothing written
