"""The vocabulary cache (elmo.inference.vocab_cache): a round trip, and the character CNN for words
outside it."""

import numpy as np
import pytest
import torch
from conftest import make_config

from elmo import (
    BiLM,
    Embedder,
)
from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache


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
