"""Precomputed context-independent token vectors (``elmo cache-vocab``).

The token encoder's output for a word never depends on context, so the vectors of a word list
can be computed once and looked up instead of running the character CNN; words not in the
cache fall back to the CNN. The file is HDF5: ``embedding`` ``(n_words, projection_dim)``
float32 (the name bilm-tf's ``dump_token_embeddings`` uses), ``words`` ``(n_words,)`` and the
``fingerprint`` of the token encoder it was computed with, so a cache is never used with another
model.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import h5py
import numpy as np
import torch

from elmo.fileio import atomic_hdf5, check_output_file
from elmo.hdf5io import HDF5FileError, open_hdf5, read_dataset
from elmo.kernels.encoder import encode_words_fast
from elmo.model.network import BiLM
from elmo.model.weights import check_finite, weights_fingerprint


def encoder_fingerprint(model: BiLM) -> str:
    """What decides a token's vector: the token encoder's weights, and for a dictionary model
    (ELMoForManyLangs') its dictionaries too. Byte-scheme fingerprints are those of earlier caches."""
    fingerprint = weights_fingerprint(model.token_encoder)
    extra = model.characters.fingerprint()
    return fingerprint if not extra else hashlib.sha256(f"{fingerprint}:{extra}".encode()).hexdigest()


@torch.inference_mode()
def compute_token_vectors(model: BiLM, words: Sequence[str], chunk: int = 4096) -> np.ndarray:
    """Token vectors ``(len(words), projection_dim)`` float32, computed with the fast encoder."""
    out = np.zeros((len(words), model.config.lstm.projection_dim), dtype=np.float32)
    for start in range(0, len(words), chunk):
        ids, _ = model.characters.batch([[w] for w in words[start:start + chunk]])
        vectors = encode_words_fast(model.token_encoder, ids[:, 0].to(next(model.parameters()).device))
        out[start:start + len(vectors)] = vectors.cpu().numpy()
    return out


def save_vocab_cache(model: BiLM, words: Sequence[str], path: str | os.PathLike, overwrite: bool = False) -> int:
    """Compute and write the cache for ``words`` (duplicates and empty strings dropped). An
    existing file is replaced only with ``overwrite`` (atomically); a folder never is."""
    check_output_file(path, overwrite)
    unique = list(dict.fromkeys(w for w in words if w))
    vectors = compute_token_vectors(model, unique)
    with atomic_hdf5(path) as f:
        f["embedding"] = vectors
        f.create_dataset("words", data=unique, dtype=h5py.string_dtype())
        f.attrs["fingerprint"] = encoder_fingerprint(model)
    return len(unique)


def load_vocab_cache(path: str | os.PathLike, model: BiLM) -> dict[str, torch.Tensor]:
    """Read a cache as ``word -> vector``; refuses a cache made with another token encoder, and
    with a ValueError naming the file anything that is not a cache (not HDF5, a dataset missing or
    of the wrong type or shape)."""
    try:  # links, external storage and non-numbers refused (elmo.hdf5io); the words are text
        f = open_hdf5(path, text=("words",))
    except HDF5FileError as e:
        reason = str(e).removeprefix(f"{path}: ")
        raise ValueError(f"{path}: not a vocabulary cache ({reason}); make one with elmo cache-vocab") from None
    with f:
        for name, kinds in (("embedding", "fiu"), ("words", "SUO")):
            if name not in f:
                raise ValueError(f"{path}: not a vocabulary cache (no '{name}' dataset)")
            if not isinstance(f[name], h5py.Dataset) or f[name].dtype.kind not in kinds:
                what = f"dtype {f[name].dtype}" if isinstance(f[name], h5py.Dataset) else "a group"
                raise ValueError(f"{path}: not a vocabulary cache ('{name}' is {what}, not "
                                 f"{'numbers' if name == 'embedding' else 'strings'})")
        if f.attrs.get("fingerprint") != encoder_fingerprint(model):
            raise ValueError(f"{path}: this cache was computed with a different model's token encoder")
        try:
            words = [w.decode("utf-8") if isinstance(w, bytes) else w for w in f["words"][...]]
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: 'words' holds a word that is not UTF-8 ({e.reason})") from None
        where = f"{path}: dataset 'embedding'"
        stored = read_dataset(f["embedding"], where)
        try:  # NaN, infinite or overflowing vectors would be written out as vectors, with exit 0
            check_finite(stored, where)
        except ValueError as e:
            raise ValueError(f"{e}; not a vocabulary cache to use (make it again with elmo cache-vocab)") from None
        vectors = torch.from_numpy(np.asarray(stored, dtype=np.float32))
    if vectors.shape != (len(words), model.config.lstm.projection_dim):
        raise ValueError(f"{path}: 'embedding' has shape {tuple(vectors.shape)}, expected "
                         f"({len(words)}, {model.config.lstm.projection_dim})")
    return dict(zip(words, vectors))
