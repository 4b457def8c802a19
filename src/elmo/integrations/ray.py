"""ELMo in a Ray Data pipeline: a callable class for ``Dataset.map_batches``.

Ray starts ``concurrency`` actors, each constructing one :class:`RayEmbedder` (so each loads the
model once) and calling it on batches of rows. A batch comes in Ray's default batch format, a
dict of column name to numpy array; the embedder reads the text column (one sentence per row,
tokens split on whitespace) and returns the batch with two more columns: the vectors of each row
(an array per row, ``(tokens, dim)`` for ``top``/``average`` or ``(layers, tokens, dim)`` for
``all``, which Ray stores as a variable-shaped tensor column) and its token count::

    import ray
    from elmo.integrations.ray import RayEmbedder

    ds = ray.data.read_text("corpus.txt", drop_empty_lines=False)       # column "text"
    ds = ds.map_batches(RayEmbedder, fn_constructor_kwargs={"model": "default", "layers": "top"},
                        concurrency=4, num_gpus=1, batch_size=256)      # num_gpus=0 on CPUs
    ds.write_parquet("vectors/")

The vectors are those of ``elmo embed`` for the same sentences, model and state policy (the warm
and reset policies make a sentence's vectors independent of its batch). The stateful policy is
refused: Ray hands batches to actors in no fixed order. On a GPU actor (``num_gpus=1``), Ray makes
one GPU visible and the embedder runs there; on CPU actors, torch uses ``num_cpus`` threads (Ray
sets ``OMP_NUM_THREADS``), unless ``threads`` says otherwise. ``examples/ray_embed.py`` is a
complete program. Install with ``pip install "elmo-embeddings[ray]"``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from elmo.inference.embed import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, Embedder
from elmo.inference.outputs import DTYPES, LAYER_NAMES
from elmo.inference.precision import DEFAULT_PRECISION
from elmo.inference.states import DEFAULT_STATE


class RayEmbedder:
    """Embeds the ``text_column`` of each batch into ``output_column`` (and ``n_tokens``).

    ``model``: any model source :func:`elmo.hub.load_model` takes (``"default"``: the
    packaged model), or ``options`` + ``weights`` files; ``layers``: ``"top"``, ``"average"`` or
    ``"all"``; ``dtype``: ``"float32"`` or ``"float16"`` for the returned vectors; ``device``:
    default ``cuda`` when this actor sees a GPU, else ``cpu``. ``state``, ``precision``,
    ``batch_size`` and ``max_tokens`` are :class:`~elmo.inference.embed.Embedder`'s.
    """

    def __init__(self, model: str | os.PathLike | None = None, *, options: str | os.PathLike | None = None,
                 weights: str | os.PathLike | None = None, layers: str = "top", dtype: str = "float32",
                 state: str = DEFAULT_STATE, precision: str = DEFAULT_PRECISION, device: str | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_tokens: int = DEFAULT_MAX_TOKENS, text_column: str = "text",
                 output_column: str = "embeddings", threads: int | None = None, cache_dir: str | None = None):
        from elmo.hub import load_model

        if layers not in LAYER_NAMES:
            raise ValueError(f"layers: expected one of {', '.join(LAYER_NAMES)}, got {layers!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
        if state == "stateful":
            raise ValueError("state: the stateful policy carries LSTM state from one batch to the next in input "
                             "order, and Ray hands batches to actors in no fixed order; use 'warm' (the default) "
                             "or 'reset', whose vectors do not depend on batching")
        if (options is None) != (weights is None):
            raise ValueError("options and weights go together: give both, or neither (and model)")
        if options is not None and model is not None:
            raise ValueError("model and options/weights are alternatives: give one")
        if threads is not None:
            torch.set_num_threads(threads)
        spec = (options, weights) if options is not None else model
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.embedder = Embedder(load_model(spec, cache_dir=cache_dir), state=state, device=device,
                                 precision=precision, batch_size=batch_size, max_tokens=max_tokens)
        self.layers, self.dtype = layers, np.dtype(DTYPES[dtype])
        self.text_column, self.output_column = text_column, output_column

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``batch``: columns as numpy arrays, one of them ``text_column``; returns the same
        columns plus ``output_column`` (one array per row) and ``n_tokens``."""
        if self.text_column not in batch:
            raise KeyError(f"RayEmbedder: no column {self.text_column!r} in the batch (columns: "
                           f"{', '.join(batch)}); pass text_column=")
        texts = [_as_text(t) for t in batch[self.text_column]]
        vectors = self.embedder.embed(texts, layers=self.layers)
        column = np.empty(len(vectors), dtype=object)  # one array per row, of its own length
        for i, array in enumerate(vectors):
            column[i] = array.astype(self.dtype, copy=False)
        return {**batch, self.output_column: column,
                "n_tokens": np.asarray([v.shape[-2] for v in vectors], dtype=np.int64)}


def _as_text(value) -> str | list[str]:
    """A row's sentence: a string (split on whitespace), or its tokens when already tokenized."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, (Sequence, np.ndarray)):
        return [str(t) for t in value]
    raise TypeError(f"RayEmbedder: a row's text is {type(value).__name__}, expected a string or a list of tokens")


__all__ = ["RayEmbedder"]
