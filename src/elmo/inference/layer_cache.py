"""biLM layers of a data set, computed once and kept on disk.

The biLM is frozen while a task trains, so its ``L+1`` layers for every sentence never change:
they are computed once per (model, sentences) pair and stored in one HDF5 file holding
``layers`` ``(total_tokens, L+1, dim)`` and ``offsets`` ``(n_sentences + 1,)``. The file name
carries a hash of the model's weights, the embedding state policy and the sentences, so a
changed model or data set never reads a stale cache. Layers are stored as float16 by default,
which halves the file; the task's mixes see them as float32.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from elmo.fileio import atomic_hdf5
from elmo.hdf5io import DamagedDatasetError, HDF5FileError, open_hdf5, read_dataset
from elmo.inference.embed import Embedder
from elmo.inference.precision import DEFAULT_PRECISION

FORMAT = "elmo-layer-cache-1"


def sentences_fingerprint(sentences: Sequence[Sequence[str]]) -> str:
    """SHA-256 of the tokenized sentences (token boundaries included)."""
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update("\x1f".join(sentence).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


class LayerCache:
    """The cached layers of one data set, held in memory: ``cache[i]`` is ``(L+1, n_i, dim)``."""

    def __init__(self, layers: np.ndarray, offsets: np.ndarray):
        self.layers = layers  # (total_tokens, L+1, dim)
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_layers(self) -> int:
        return self.layers.shape[1]

    @property
    def dim(self) -> int:
        return self.layers.shape[2]

    def __getitem__(self, index: int) -> np.ndarray:
        start, end = self.offsets[index], self.offsets[index + 1]
        return self.layers[start:end].transpose(1, 0, 2)

    def batch(self, indices: Sequence[int], time: int) -> torch.Tensor:
        """Padded float32 layers ``(len(indices), L+1, time, dim)`` for a batch of sentences."""
        out = torch.zeros(len(indices), self.n_layers, time, self.dim)
        for row, index in enumerate(indices):
            start, end = self.offsets[index], self.offsets[index + 1]
            n = min(end - start, time)
            out[row, :, :n] = torch.from_numpy(self.layers[start:start + n].astype(np.float32)).transpose(0, 1)
        return out


def cache_path(cache_dir: str | os.PathLike, name: str, embedder: Embedder, sentences: Sequence[Sequence[str]]) -> Path:
    """Where the layers of ``sentences`` under ``embedder`` (its model's weights, its state policy
    and the precision it runs at) are (or will be) cached. The weights' hash is the runtime's,
    made once for all of a task's splits."""
    key = f"{embedder.runtime.weights_fingerprint()}:{embedder.state}:{sentences_fingerprint(sentences)}"
    if embedder.precision != DEFAULT_PRECISION:  # float32's key is the one caches made before precisions had
        key += f":{embedder.precision}"
    key = hashlib.sha256(key.encode())
    return Path(cache_dir) / f"{name}-{key.hexdigest()[:16]}.hdf5"


def load_or_compute(embedder: Embedder, sentences: Sequence[Sequence[str]], cache_dir: str | os.PathLike,
                    name: str, *, dtype: str = "float16", progress: bool = True) -> LayerCache:
    """The layers of ``sentences``: read from ``cache_dir`` if cached, else computed and saved."""
    path = cache_path(cache_dir, name, embedder, sentences)
    if os.path.lexists(path):
        # A file of the cache's name that elmo did not write is never replaced (nor a folder).
        try:
            with open_hdf5(path) as f:
                ours = f.attrs.get("format") == FORMAT
                if ours and len(f["offsets"]) == len(sentences) + 1:
                    return LayerCache(read_dataset(f["layers"], f"{path}: dataset 'layers'"),
                                      read_dataset(f["offsets"], f"{path}: dataset 'offsets'"))
        except DamagedDatasetError:  # one of ours whose chunk rotted: said so, naming the dataset
            raise
        except (HDF5FileError, OSError, KeyError, TypeError):
            ours = False
        if not ours:
            raise FileExistsError(f"{path}: in the cache folder {cache_dir} under a name elmo's layer cache uses, "
                                  "but not a cache elmo wrote; move it away (elmo replaces only its own caches)")
    arrays = embedder.embed_sentences([list(s) for s in sentences], layers="all", progress=progress)
    lengths = [a.shape[1] for a in arrays]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_layers = embedder.model.config.n_output_layers
    dim = 2 * embedder.model.config.lstm.projection_dim
    layers = np.zeros((offsets[-1], n_layers, dim), dtype=dtype)
    for array, start in zip(arrays, offsets[:-1]):
        layers[start:start + array.shape[1]] = array.transpose(1, 0, 2)
    with atomic_hdf5(path, make_parents=True) as f:
        f.attrs["format"] = FORMAT
        f.attrs["state"] = embedder.state
        f.attrs["precision"] = embedder.precision
        f.create_dataset("layers", data=layers)
        f.create_dataset("offsets", data=offsets)
    return LayerCache(layers, offsets)


__all__ = ["LayerCache", "cache_path", "load_or_compute", "sentences_fingerprint"]
