"""Embedding text with a biLM in memory: the :class:`Embedder` API.

``Embedder(model, batch_size=..., ...)`` holds the settings of every call. Three methods embed:

* :meth:`Embedder.embed`: sentences in, one array per sentence out, with per-call options (as
  sentence-transformers' ``encode``);
* :meth:`Embedder.embed_sentence`: one sentence, one array;
* :meth:`Embedder.embed_batch`: one batch as the caller formed it, the path both of them, the file
  pipeline and the server run; :meth:`Embedder.stream_batch` gives the same vectors token by token,
  so that a sentence of any length is never held whole.

:meth:`~Embedder.embed_sentences` (the older name of :meth:`~Embedder.embed`, positional options)
and :meth:`~Embedder.embed_file` (``FileEmbedder(...).write(...)``) are thin aliases, kept because
public code calls them. Files go through the resumable, sharded pipeline of
:mod:`elmo.inference.embed_file`, which uses an Embedder.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence, Set

import numpy as np
import torch

from elmo.checks import NonFiniteOutputError, check_count
from elmo.hub.resolve import ModelSource, load_model, load_model_with_origin
from elmo.inference.embed_file import (
    DEFAULT_CHUNK_SENTENCES,
    MAX_LINE_TOKENS,
    EmbedReport,
    FileEmbedder,
)
from elmo.inference.long_lines import embed_long_sentence
from elmo.inference.outputs import DEFAULT_COMPRESSION, DEFAULT_DTYPE, DEFAULT_LAYERS, DEFAULT_LAYOUT
from elmo.inference.precision import DEFAULT_PRECISION
from elmo.inference.runtime import DEFAULT_TOKEN_MEMO, Runtime
from elmo.inference.states import DEFAULT_STATE
from elmo.model.chars import tokenize
from elmo.model.network import BiLM
from elmo.progress import progress_bar

Layers = str | int | Sequence[int]
# Sentences per batch, and padded tokens per batch (outside stateful mode): the defaults of the
# Embedder, of elmo embed and of a task config's [bilm] section.
DEFAULT_BATCH_SIZE = 64
DEFAULT_MAX_TOKENS = 4096


def as_tokens(sentence: str | Sequence[str], where: str = "sentence") -> list[str]:
    """One sentence as a token list: a string is split on whitespace, a sequence of strings is
    taken as its tokens. Anything else is an error naming ``where``."""
    if isinstance(sentence, str):
        return tokenize(sentence)
    if isinstance(sentence, Sequence) and all(isinstance(t, str) for t in sentence):
        return list(sentence)
    raise TypeError(f"{where}: expected a string or a list of token strings, got {type(sentence).__name__} "
                    f"{str(sentence)[:60]!r}")


def as_sentences(sentences: str | Sequence[str | Sequence[str]]) -> list[list[str]]:
    """Sentences as token lists. A single string is one sentence (never one per character), and a
    flat list of token strings whose items contain no whitespace is *not* guessed at: a list of
    strings is always a list of sentences, each split on whitespace."""
    if isinstance(sentences, str):
        return [tokenize(sentences)]
    # A dict or set iterates, but its order and items are not sentences: {"a": 1} would embed "a".
    if isinstance(sentences, (Mapping, Set, bytes, bytearray)) or (not isinstance(sentences, Sequence)
                                                                   and not hasattr(sentences, "__iter__")):
        raise TypeError(f"sentences: expected a list of sentences (strings or token lists), got "
                        f"{type(sentences).__name__}")
    return [as_tokens(s, f"sentences[{i}]") for i, s in enumerate(sentences)]


def select_layers(layers: np.ndarray, which: Layers) -> np.ndarray:
    """Pick from one sentence's ``(L+1, n_tokens, dim)`` activations.

    ``"all"`` -> ``(L+1, n, dim)``; ``"top"`` -> ``(n, dim)``; ``"average"`` -> ``(n, dim)``;
    one index -> ``(n, dim)`` (0: the token layer); a list of indices -> ``(len(list), n, dim)``.
    ELMoForManyLangs' ``output_layer`` 0, 1, 2 are the indices; its -1 is ``"average"``.
    """
    if isinstance(which, str):
        if which == "all":
            return layers
        if which == "top":
            return layers[-1]
        if which == "average":
            return layers.mean(axis=0)
        raise ValueError(f"layers: expected 'all', 'top', 'average' or a list of indices, got {which!r}")
    if isinstance(which, int) and not isinstance(which, bool):
        return select_layers(layers, [which])[0]
    indices = list(which)
    for i in indices:
        if not -layers.shape[0] <= i < layers.shape[0]:
            raise ValueError(f"layers: index {i} out of range; the biLM has {layers.shape[0]} layers")
    return layers[indices]


def _finite_pieces(pieces: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """The windowed path's pieces, each checked as :meth:`Embedder.embed_batch` checks a batch."""
    for piece in pieces:
        if not np.isfinite(piece.sum()) and not np.isfinite(piece).all():  # the sum first: one cheap pass
            raise NonFiniteOutputError(0)
        yield piece


class Embedder:
    """Turns sentences into ELMo layer activations.

    ``state`` is the LSTM state policy (see :mod:`elmo.inference.states`): ``"warm"`` (default) and
    ``"reset"`` make every sentence's vectors independent of batching and of earlier calls;
    ``"stateful"`` reproduces the original, carrying state by row across batches *and calls*.
    Without ``model``, the packaged default model is used (:func:`elmo.hub.load_model`). The model
    is never changed: it runs through an :class:`~elmo.inference.runtime.Runtime` (copied if it lives on
    another device than ``device``). ``cuda_graphs`` (CUDA only) replays the LSTM's steps from CUDA
    graphs for batch shapes that repeat (see :mod:`elmo.inference.graphs`). ``source``: the model
    source the files :meth:`embed_file` writes record as the model (:meth:`from_pretrained` sets it:
    a Hub id pinned to the commit it resolved to).
    """

    def __init__(self, model: BiLM | None = None, *, state: str = DEFAULT_STATE, device: str | torch.device | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_tokens: int = DEFAULT_MAX_TOKENS,
                 precision: str = DEFAULT_PRECISION, vocab_cache: str | os.PathLike | None = None,
                 token_memo: int = DEFAULT_TOKEN_MEMO, cuda_graphs: bool = False, source: str | None = None):
        check_count(batch_size, "batch_size")
        check_count(max_tokens, "max_tokens")
        if model is None:
            model = load_model()
        self.runtime = Runtime(model, device=device, precision=precision, state=state, vocab_cache=vocab_cache,
                               token_memo=token_memo, cuda_graphs=cuda_graphs)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        # What files written by embed_file record as the model (a Hub id pinned to its commit).
        self.source = source

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Embedder":
        """Load the original ``options.json`` + ``weights.hdf5``."""
        return cls(load_model((options_file, weights_file)), **kwargs)

    @classmethod
    def from_pretrained(cls, name: ModelSource = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Embedder":
        """Load any model source :func:`elmo.hub.load_model` takes: ``"default"`` (packaged), a
        published name or URL, downloaded and cached (``"small"``, ``"medium"``, ``"original"``,
        ``"original-5.5b"``), an ``(options, weights)`` pair, an exported folder, a training run
        directory, a checkpoint file, an NLPL archive (``.zip``) or folder, or an ELMoForManyLangs
        model (see ``docs/other-models.md``)."""
        model, origin = load_model_with_origin(name, cache_dir=cache_dir, progress=progress)
        return cls(model, **{"source": origin["source"], **kwargs})

    @property
    def model(self) -> BiLM:
        """The biLM the runtime runs (the caller's own model, or its copy on ``device``)."""
        return self.runtime.model

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def state(self) -> str:
        return self.runtime.state

    @property
    def precision(self) -> str:
        """The precision the biLM runs at: the one asked for, or float32 where bfloat16 would not
        pay or int8 cannot run on this CPU (:func:`~elmo.inference.precision.effective_precision`)."""
        return self.runtime.precision

    def reset_state(self) -> None:
        """Forget the state carried between calls in stateful mode."""
        self.runtime.reset_state()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batch through the biLM, under the state policy: a ``(L+1, n_tokens, dim)`` float32
        array per sentence. A batch of one sentence over the token budget (``max_tokens``) runs in
        windows (:mod:`elmo.inference.long_lines`) and comes back whole; every other batch runs at
        once (:meth:`Runtime.run_batch <elmo.inference.runtime.Runtime.run_batch>`). A non-finite
        vector raises :class:`~elmo.checks.NonFiniteOutputError` naming its row."""
        rows = [as_tokens(s, "batch") for s in batch]
        if self._in_windows(rows):
            return [np.concatenate(list(self._windows(rows[0]))).transpose(1, 0, 2)]
        return self._run_rows(rows)

    def stream_batch(self, batch: Sequence[Sequence[str]], *, spill_dir: str | os.PathLike | None = None,
                     progress=None) -> Iterator[np.ndarray]:
        """The vectors :meth:`embed_batch` gives, token by token: ``(tokens, L+1, dim)`` float32
        pieces, the batch's sentences in order, which is how the file pipeline stores them. A lone
        sentence over the token budget comes in pieces of at most ``max_tokens`` tokens and is
        never held whole (its temporary files go to ``spill_dir``; ``progress(done, total)`` is
        called after each window); every other sentence comes as one piece."""
        rows = [as_tokens(s, "batch") for s in batch]
        if self._in_windows(rows):
            return self._windows(rows[0], spill_dir, progress)
        return (array.transpose(1, 0, 2) for array in self._run_rows(rows))

    def _in_windows(self, rows: Sequence[Sequence[str]]) -> bool:
        """Whether a batch is a lone sentence over the batch budget, which runs in windows (never in
        stateful mode, where a sentence's state depends on the rows around it)."""
        return len(rows) == 1 and len(rows[0]) + 2 > self.max_tokens and self.state != "stateful"

    def _windows(self, tokens: Sequence[str], spill_dir: str | os.PathLike | None = None,
                 progress=None) -> Iterator[np.ndarray]:
        """One sentence in windows: ``(tokens, L+1, dim)`` pieces (:mod:`elmo.inference.long_lines`)."""
        pieces = embed_long_sentence(self.runtime, tokens, self.max_tokens,
                                     None if spill_dir is None else os.fspath(spill_dir), progress)
        return _finite_pieces(pieces)

    @torch.inference_mode()
    def _run_rows(self, rows: list[list[str]]) -> list[np.ndarray]:
        """A batch at once: ``(L+1, n_tokens, dim)`` views of one array, per sentence."""
        out = self.runtime.run_batch(rows)
        values = out.layers.float().cpu()
        layers = values.numpy()
        arrays = [layers[i, :, :len(sentence)] for i, sentence in enumerate(rows)]
        # The last guard: never a NaN vector returned or written. The batch's sum is finite unless
        # a value is not (or the sum overflows): one reduction, 0.06% of the batch's time on the
        # default model; only then do the rows decide, so that padding never fails a batch.
        if not torch.isfinite(values.sum()):
            bad = next((i for i, array in enumerate(arrays) if not np.isfinite(array).all()), None)
            if bad is not None:
                raise NonFiniteOutputError(bad)
        return arrays

    def batches(self, sentences: Sequence[Sequence[str]], batch_size: int | None = None) -> Iterator[list[int]]:
        """Batches of sentence indices (``batch_size``: this call's, else the embedder's). Stateful
        mode: consecutive runs of ``batch_size`` in input order (which row a sentence takes decides
        its state). Otherwise: longest first, each batch at most ``batch_size`` sentences and
        ``max_tokens`` padded tokens, so similar lengths share a batch and little work goes to
        padding."""
        batch_size = self.batch_size if batch_size is None else check_count(batch_size, "batch_size")
        order = list(range(len(sentences)))
        if self.state == "stateful":
            for start in range(0, len(order), batch_size):
                yield order[start:start + batch_size]
            return
        order.sort(key=lambda i: -len(sentences[i]))
        batch: list[int] = []
        for i in order:
            longest = len(sentences[batch[0]]) + 2 if batch else len(sentences[i]) + 2
            if batch and (len(batch) >= batch_size or (len(batch) + 1) * longest > self.max_tokens):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def embed(self, sentences: str | Sequence[str | Sequence[str]], *, layers: Layers = DEFAULT_LAYERS,
              batch_size: int | None = None, progress: bool = False) -> list[np.ndarray]:
        """Embed sentences, with this call's options: each sentence a string (split on
        whitespace) or a token list; a single string is one sentence (a list of one array comes
        back).

        ``layers``: which layers, as :func:`select_layers` takes them; ``batch_size``: sentences
        per batch for this call (None: the embedder's; below 1 is an error); ``progress``: a bar.
        Returns float32 arrays in input order, each ``(L+1, tokens, dim)`` for ``"all"`` (see
        :func:`select_layers` for the others). In stateful mode, batches are consecutive runs of
        ``batch_size`` sentences in input order. A sentence longer than ``max_tokens`` runs in
        windows of that many tokens, so that only its result is held whole (not in stateful mode).
        """
        batch_size = self.batch_size if batch_size is None else check_count(batch_size, "batch_size")
        tokenized = as_sentences(sentences)
        results: list[np.ndarray | None] = [None] * len(tokenized)
        with progress_bar(progress, total=len(tokenized), unit="sent") as bar:
            for indices in self.batches(tokenized, batch_size):
                try:
                    for i, array in zip(indices, self.embed_batch([tokenized[i] for i in indices])):
                        results[i] = select_layers(array, layers)
                except NonFiniteOutputError as e:  # its row: now the sentence's index in this call
                    raise NonFiniteOutputError(indices[e.row], f"sentence {indices[e.row]}") from None
                bar.update(len(indices))
        return results  # type: ignore[return-value]

    def embed_sentences(self, sentences: str | Sequence[str | Sequence[str]], layers: Layers = DEFAULT_LAYERS,
                        batch_size: int | None = None, progress: bool = False) -> list[np.ndarray]:
        """The older name of :meth:`embed`, whose options may also come by position (``elmo.allennlp``,
        the server and much public code call it): ``embed(sentences, layers=..., batch_size=...,
        progress=...)``."""
        return self.embed(sentences, layers=layers, batch_size=batch_size, progress=progress)

    def embed_sentence(self, sentence: str | Sequence[str], layers: Layers = DEFAULT_LAYERS) -> np.ndarray:
        """Embed one sentence (a string split on whitespace, or a token list): one float32 array
        shaped as :func:`select_layers` says."""
        return self.embed([as_tokens(sentence)], layers=layers)[0]

    def with_batch_size(self, batch_size: int) -> "Embedder":
        """This embedder with another batch size: the same runtime (model, caches, and in stateful
        mode the state it carries), so nothing is loaded or copied."""
        other = copy.copy(self)
        other.batch_size = check_count(batch_size, "batch_size")
        return other

    def embed_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                   layers: Layers = DEFAULT_LAYERS, batch_size: int | None = None, progress: bool | None = None,
                   chunk_sentences: int = DEFAULT_CHUNK_SENTENCES, overwrite: bool = False, *,
                   layout: str = DEFAULT_LAYOUT, dtype: str = DEFAULT_DTYPE,
                   compression: str | None = DEFAULT_COMPRESSION, resume: bool = False,
                   shard: tuple[int, int] = (0, 1), max_line_tokens: int = MAX_LINE_TOKENS,
                   progress_position: int = 0) -> EmbedReport:
        """A thin wrapper kept for compatibility: ``FileEmbedder(self, layers=..., layout=...,
        ...).write(input_path, output_path, overwrite=..., resume=..., shard=...)`` (see
        :class:`~elmo.inference.embed_file.FileEmbedder` for what it writes and guarantees).
        ``batch_size``, when given, is this call's (:meth:`with_batch_size`); None: the embedder's."""
        embedder = self if batch_size is None else self.with_batch_size(batch_size)
        pipeline = FileEmbedder(embedder, layers=layers, layout=layout, dtype=dtype, compression=compression,
                                chunk_sentences=chunk_sentences, max_line_tokens=max_line_tokens, progress=progress,
                                progress_position=progress_position)
        return pipeline.write(input_path, output_path, overwrite=overwrite, resume=resume, shard=shard)
