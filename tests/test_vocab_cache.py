"""The vocabulary cache (elmo.inference.vocab_cache): a round trip, and the character CNN for words
outside it."""

import h5py
import numpy as np
import pytest
import torch
from conftest import make_config

from elmo import (
    BiLM,
    Embedder,
)
from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


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


@pytest.mark.parametrize("content", ["garbage", "strings", "group"])
def test_a_file_that_is_not_a_cache_is_one_line_naming_it(tmp_path, capsys, content):
    """Issue 45: a garbage --vocab-cache file gave h5py's error, which does not name the file."""
    from conftest import FIXTURE_MODEL_ARGS

    from elmo.cli.main import main

    cache = tmp_path / "cache.hdf5"
    if content == "garbage":
        cache.write_bytes(b"not an HDF5 file at all " * 100)
    else:
        with h5py.File(cache, "w") as f:
            f.create_dataset("words", data=["a", "b"], dtype=h5py.string_dtype())
            if content == "strings":
                f.create_dataset("embedding", data=[["x"] * 16] * 2, dtype=h5py.string_dtype())
            else:
                f.create_group("embedding")
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    assert main(["embed", str(src), str(tmp_path / "out.hdf5"), *FIXTURE_MODEL_ARGS, "--vocab-cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"elmo embed: error: {cache}: not a vocabulary cache ("), err
    assert not (tmp_path / "out.hdf5").exists()
