"""Embedding text with a biLM: the :class:`Embedder` API and the ``allennlp elmo``-compatible
HDF5 output.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass

import h5py
import numpy as np
import torch
from tqdm import tqdm

from elmo.fileio import (
    STDIN,
    atomic_path,
    atomic_write_text,
    check_output_file,
    chunks,
    claim_folder,
    count_lines,
    is_regular_file,
    read_lines,
)
from elmo.hub.resolve import ModelSource, load_model, load_model_with_origin
from elmo.inference.journal import Frame, WorkFolder, chunk_digest
from elmo.inference.long_lines import embed_long_sentence, window_for
from elmo.inference.outputs import (
    DEFAULT_COMPRESSION,
    DEFAULT_DTYPE,
    DEFAULT_LAYOUT,
    DTYPES,
    MANIFEST,
    OutputOptions,
    create_writer,
    file_info,
    manifest_for,
    open_embeddings,
    shard_lines,
    shard_name,
)
from elmo.inference.runtime import DEFAULT_PRECISION, DEFAULT_TOKEN_MEMO, Runtime
from elmo.inference.states import DEFAULT_STATE
from elmo.model.bilm import BiLM, BiLMState
from elmo.model.chars import tokenize
from elmo.version import __version__

Layers = str | int | Sequence[int]
# Sentences per batch, and padded tokens per batch (outside stateful mode): the defaults of the
# Embedder, of elmo embed and of a task config's [bilm] section.
DEFAULT_BATCH_SIZE = 64
DEFAULT_MAX_TOKENS = 4096

# A longer line is refused (with its line number) rather than held: its text and token list are
# the only things a line costs in memory whatever its length (see elmo.inference.long_lines).
MAX_LINE_TOKENS = 1_000_000
# Bytes per token allowed when reading a line, before it is split: a line of more than
# MAX_BYTES_PER_TOKEN * max_line_tokens bytes is refused unread.
MAX_BYTES_PER_TOKEN = 64


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
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens: must be at least 1, got {max_tokens}")
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

    def reset_state(self) -> None:
        """Forget the state carried between calls in stateful mode."""
        self.runtime.reset_state()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batch through the biLM: a ``(L+1, n_tokens, dim)`` float32 array per sentence."""
        rows = [as_tokens(s, "batch") for s in batch]
        out = self.runtime.run_batch(rows)
        layers = out.layers.float().cpu().numpy()
        return [layers[i, :, :len(sentence)] for i, sentence in enumerate(rows)]

    def _batches(self, sentences: list[list[str]], batch_size: int) -> Iterable[list[int]]:
        """Batches of sentence indices. Stateful mode: consecutive runs of ``batch_size`` in input
        order (which row a sentence takes decides its state). Otherwise: longest first, each
        batch at most ``batch_size`` sentences and ``max_tokens`` padded tokens, so similar
        lengths share a batch and little work goes to padding."""
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

    def embed_sentence(self, sentence: str | Sequence[str], layers: Layers = "all") -> np.ndarray:
        """Embed one sentence (a string split on whitespace, or a token list): one float32 array
        shaped as :func:`select_layers` says."""
        return self.embed_sentences([as_tokens(sentence)], layers=layers)[0]

    def _is_long(self, sentence: Sequence[str]) -> bool:
        """Whether a sentence is over the batch budget and goes through the windowed path
        (:mod:`elmo.inference.long_lines`); never in stateful mode."""
        return len(sentence) + 2 > self.max_tokens and self.state != "stateful"

    def embed_long_sentence(self, sentence: Sequence[str], spill_dir: str | os.PathLike | None = None,
                            progress=None) -> Iterator[np.ndarray]:
        """One sentence of any length in bounded memory: ``(tokens, L+1, dim)`` float32 pieces of
        at most ``max_tokens`` tokens, in order (see :mod:`elmo.inference.long_lines`; ``progress``
        is called there after each window)."""
        return embed_long_sentence(self.runtime, as_tokens(sentence), self.max_tokens,
                                   None if spill_dir is None else os.fspath(spill_dir), progress)

    def embed_sentences(self, sentences: str | Sequence[str | Sequence[str]], layers: Layers = "all",
                        batch_size: int | None = None, progress: bool = False) -> list[np.ndarray]:
        """Embed sentences: each a string (split on whitespace) or a token list. A single string
        is one sentence.

        Returns float32 arrays in input order, shaped as :func:`select_layers` says. In stateful
        mode, batches are consecutive runs of ``batch_size`` sentences in input order. A sentence
        longer than ``max_tokens`` runs in windows of that many tokens, so that only its result is
        held whole (not in stateful mode).
        """
        batch_size = batch_size or self.batch_size
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        tokenized = as_sentences(sentences)
        results: list[np.ndarray | None] = [None] * len(tokenized)
        with tqdm(total=len(tokenized), unit="sent", disable=not progress) as bar:
            for indices in self._batches(tokenized, batch_size):
                if len(indices) == 1 and self._is_long(tokenized[indices[0]]):
                    whole = np.concatenate(list(self.embed_long_sentence(tokenized[indices[0]])))
                    results[indices[0]] = select_layers(whole.transpose(1, 0, 2), layers)
                else:
                    for i, array in zip(indices, self.embed_batch([tokenized[i] for i in indices])):
                        results[i] = select_layers(array, layers)
                bar.update(len(indices))
        return results  # type: ignore[return-value]

    def _token_major_batch(self, rows: list[list[str]], options: OutputOptions) -> list[np.ndarray]:
        """One batch through the biLM, each sentence's stored vectors ``(tokens, *token_shape)``."""
        layers = self.runtime.run_batch(rows).layers.float().cpu().numpy()  # (batch, L+1, time, dim)
        return [options.select(layers[i, :, :len(row)].transpose(1, 0, 2)) for i, row in enumerate(rows)]

    def fingerprint(self, options: OutputOptions, batch_size: int, chunk_sentences: int,
                    shard: tuple[int, int]) -> dict:
        """What decides the vectors a run writes: a resumed run must match the interrupted one."""
        from elmo.model.weights import weights_fingerprint

        cache = hashlib.sha256()
        for word in sorted(self.runtime.cache):
            cache.update(word.encode("utf-8", "surrogatepass") + b"\0")
            cache.update(self.runtime.cache[word].float().cpu().numpy().tobytes())
        return {"elmo": __version__, "model": weights_fingerprint(self.model),
                "vocab_cache": cache.hexdigest() if self.runtime.cache else None, "state": self.state,
                "precision": self.runtime.precision, "device": self.device.type, "batch_size": batch_size,
                "max_tokens": self.max_tokens, "chunk_sentences": chunk_sentences, "shard": list(shard),
                **options.describe()}

    def embed_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                   layers: Layers = "all", batch_size: int | None = None, progress: bool | None = None,
                   chunk_sentences: int = 4096, overwrite: bool = False, *, layout: str = DEFAULT_LAYOUT,
                   dtype: str = DEFAULT_DTYPE, compression: str | None = DEFAULT_COMPRESSION, resume: bool = False,
                   shard: tuple[int, int] = (0, 1), max_line_tokens: int = MAX_LINE_TOKENS,
                   progress_position: int = 0) -> EmbedReport:
        """Embed a text file (one sentence per line, plain or ``.gz``; ``"-"`` is standard input)
        into HDF5 in ``layout`` (see :mod:`elmo.inference.outputs`: ``"allennlp"``, the ``allennlp
        elmo`` command's, or ``"packed"``, for millions of sentences), storing ``layers`` in
        ``dtype``, optionally compressed.

        The input is read once, as a stream (pipes and ``/dev/stdin`` work). Vectors go batch by
        batch into a work file beside the output (``OUTPUT.partial/``, see
        :mod:`elmo.inference.journal`), and the output is written from it at the end, then renamed
        into place: it appears only complete. A run killed at any moment continues with
        ``resume=True`` (with the same input, model and options, which is checked), redoing at most
        the batch it was in; with ``resume=True`` and no work file, a run starts afresh, and with an
        output already complete from the same settings, it returns at once. The output may not be
        the input; an existing output is replaced only with ``overwrite``, which also discards an
        interrupted run's work file when not resuming.

        ``shard=(rank, world)`` embeds only the lines whose 0-based number ``n`` has
        ``n % world == rank`` into ``output_path/shard-RRRRR-of-WWWWW.hdf5`` (``output_path`` is then
        a folder, with a ``manifest.json``): each rank reads the whole input and keeps its own
        lines. Not for standard input (it cannot be read by several processes), nor for stateful
        mode. A line of more than ``max_line_tokens`` tokens is refused with its line number;
        longer than ``max_tokens``, it runs in windows (see :mod:`elmo.inference.long_lines`).
        In stateful mode a file starts from zero state, as a new ``allennlp elmo`` run does (and a
        resumed one from the state the journal carries).

        Returns what was written (sentences, tokens, bytes).
        """
        started = time.perf_counter()
        batch_size = batch_size or self.batch_size
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        if max_line_tokens < 1:
            raise ValueError(f"max_line_tokens: must be at least 1, got {max_line_tokens}")
        options = OutputOptions(layout, layers if isinstance(layers, (str, int)) else tuple(layers), dtype, compression)
        n_layers, dim = self.model.config.lstm.n_layers + 1, 2 * self.model.config.lstm.projection_dim
        token_shape = options.token_shape(n_layers, dim)
        rank, world = check_shard(shard)
        check_sharding(input_path, rank, world, self.state)
        target = shard_target(output_path, rank, world)
        check_output(input_path, target, overwrite=True)  # never the input; an existing output: below
        # Stateful mode needs whole batches of consecutive lines per chunk.
        chunk = max(1, chunk_sentences // batch_size) * batch_size
        fingerprint = json.loads(json.dumps(self.fingerprint(options, batch_size, chunk, (rank, world))))
        work = WorkFolder(target)
        try:
            if os.path.exists(target):
                info = file_info(target) if resume else None
                if info is not None and info.get("fingerprint") == fingerprint:
                    work.remove()  # a run killed after its output was in place, before cleaning up
                    if world > 1:
                        write_manifest(output_path, world, fingerprint)
                    return EmbedReport(target, info["sentences"], info["tokens"], os.path.getsize(target), 0,
                                       time.perf_counter() - started, already_complete=True)
                if not overwrite:
                    finished = " and is not the finished output of a run with these settings" if resume else ""
                    raise FileExistsError(f"{target}: already exists{finished}; pass --force (overwrite=True) to "
                                          "replace it")
            about = {"input": os.fspath(input_path), "output": os.fspath(target), "model_source": self.source}
            if work.exists():
                work.check_ours()  # never take over or delete a folder that is not ours
            if work.exists() and resume:
                work.open(fingerprint)
            elif work.exists() and overwrite:
                work.remove()
                work.create(fingerprint, about)
            elif work.exists():
                raise FileExistsError(f"{work.path}: the work file of an interrupted run of {target}: continue it "
                                      "with --resume (resume=True), or start over with --force (overwrite=True)")
            elif os.path.exists(work.path):
                raise FileExistsError(f"{work.path}: in the way of this run's work file; move it away")
            else:
                work.create(fingerprint, about)
            try:
                # Every frame is verified (CRC-32) before it is reused; a damaged one is embedded again.
                frames = work.scan(chained=self.state == "stateful")
                resumed = sum(f.sentences for f in frames)
                appended, again = self._embed_into_journal(input_path, work, frames, options, token_shape, batch_size,
                                                           chunk, rank, world, max_line_tokens, progress,
                                                           progress_position)
                frames = sorted(frames + appended, key=lambda f: (f.chunk, f.batch))
                writing = time.perf_counter()
                with atomic_path(target) as tmp, h5py.File(tmp, "w") as fout:
                    writer = create_writer(fout, options, token_shape)
                    write_from_journal(work, frames, writer, token_shape, np.dtype(DTYPES[options.dtype]),
                                       window_for(self.max_tokens))
                    # The source is recorded, not fingerprinted: the weights' fingerprint decides.
                    writer.finish({"fingerprint": fingerprint, "input": os.fspath(input_path),
                                   "shard": [rank, world], "state": self.state, "model_source": self.source})
                writing = time.perf_counter() - writing
                if world > 1:
                    write_manifest(output_path, world, fingerprint)
                work.remove()
            except BaseException:
                if work.exists() and work.is_empty():
                    work.remove()  # nothing to resume: leave no trace
                raise
        finally:
            work.release()
        return EmbedReport(target, writer.sentences, writer.tokens, os.path.getsize(target), resumed,
                           time.perf_counter() - started, write_seconds=writing, reembedded=again)

    def _embed_into_journal(self, input_path, work: WorkFolder, frames: list[Frame], options: OutputOptions,
                            token_shape: tuple[int, ...], batch_size: int, chunk: int, rank: int, world: int,
                            max_line_tokens: int, progress: bool | None, position: int) -> tuple[list[Frame], int]:
        """Embed every line not yet in the journal (``frames``: its verified frames, sorted),
        batch by batch, one frame per batch. Returns the frames appended, and how many of their
        sentences were embedded again because the journal's frame for them was damaged (the
        user is warned, in one line)."""
        done_batches: dict[int, dict[int, Frame]] = {}  # chunk -> batch -> its frame
        for frame in frames:
            done_batches.setdefault(frame.chunk, {})[frame.batch] = frame
        # Lost to damage: the batches damaged headers name, those missing between whole frames,
        # and the first ones appended over a damaged end.
        lost = set().union(*(d.lost() for d in work.damage))
        frontier = (frames[-1].chunk, frames[-1].batch) if frames else (-1, -1)
        lost_tail_bytes, again = work.lost_tail_bytes, 0
        row_bytes = int(np.prod(token_shape)) * np.dtype(DTYPES[options.dtype]).itemsize
        if self.state == "stateful":
            self.runtime.reset_state()
            if frames:
                with open(work.journal_path, "rb") as f:
                    self.runtime.states.carried = self._decode_state(work.read_state(f, frames[-1]))
        total: list[int | None] = [None]
        counter = threading.Thread(target=lambda: total.__setitem__(0, count_lines(input_path)), daemon=True)
        counter.start()
        counter.join(timeout=1.0)  # a plain file is counted by then; a big .gz goes on in the background
        # tqdm's disable=None means "show only on a terminal".
        disable = None if progress is None else not progress
        desc = f"shard {rank}/{world}" if world > 1 else None
        done = sum(f.sentences for f in frames)
        tokens_done = 0
        max_bytes = max_line_tokens * MAX_BYTES_PER_TOKEN
        lines = ((n, line) for n, line in enumerate(read_lines(input_path, max_bytes)) if n % world == rank)
        with work.appender() as journal, tqdm(unit="sent", initial=done, disable=disable, desc=desc,
                                              position=position, dynamic_ncols=True) as bar:
            started = time.perf_counter()
            for c, block in enumerate(chunks(lines, chunk)):
                digest = chunk_digest(line for _, line in block)
                have = done_batches.get(c, {})
                if any(f.digest != digest for f in have.values()):
                    raise ValueError(f"{input_path}: lines {block[0][0] + 1}..{block[-1][0] + 1} differ from those the "
                                     f"interrupted run embedded (its work file {work.path}): resume only with the "
                                     "same input, or start over with --force (overwrite=True)")
                if have and have[max(have)].last and len(have) == max(have) + 1:
                    continue  # complete
                texts = [line.strip() for _, line in block]
                tokenized = [tokenize(t) for t in texts]
                for (number, _), tokens in zip(block, tokenized):
                    if len(tokens) > max_line_tokens:
                        raise ValueError(f"{input_path}:{number + 1}: {len(tokens):,} tokens, more than the limit of "
                                         f"{max_line_tokens:,} for one line (max_line_tokens, --max-line-tokens)")
                    if self.state == "stateful" and len(tokens) + 2 > self.max_tokens:
                        raise ValueError(f"{input_path}:{number + 1}: {len(tokens):,} tokens; stateful mode embeds a "
                                         f"line only within a batch, of at most max_tokens ({self.max_tokens:,}) "
                                         "padded tokens per row: raise --max-tokens, or use --state warm or reset, "
                                         "which embed long lines in windows")
                batches = list(self._batches(tokenized, batch_size))
                # A chunk the interrupted run was in: its batches come again, alike.
                for b, frame in have.items():
                    if b >= len(batches) or frame.sentences != len(batches[b]) or frame.last != (b == len(batches) - 1):
                        raise ValueError(f"{work.path}: its batches do not match this run's for lines "
                                         f"{block[0][0] + 1}..{block[-1][0] + 1}; start over with --force")
                for b, indices in enumerate(batches):
                    if bar.total is None and total[0] is not None:
                        bar.total = shard_lines(total[0], rank, world)
                        bar.refresh()
                    if b in have:
                        continue
                    rows = [tokenized[i] for i in indices]
                    n_tokens = [len(r) for r in rows]
                    if len(rows) == 1 and self._is_long(rows[0]):
                        moving = _LongLineProgress(bar, f"line {block[indices[0]][0] + 1}")
                        pieces = (options.select(p) for p in self.embed_long_sentence(rows[0], spill_dir=work.path,
                                                                                      progress=moving))
                    else:
                        pieces = self._token_major_batch(rows, options)
                    state = b""
                    if self.state == "stateful":
                        carried = self.runtime.states.carried
                        state = (carried.c.float().cpu().numpy().tobytes() + carried.h.float().cpu().numpy().tobytes())
                    frame = journal.append(chunk=c, batch=b, last=b == len(batches) - 1, digest=digest,
                                           line_numbers=[block[i][0] for i in indices], n_tokens=n_tokens,
                                           texts=[texts[i] for i in indices], vectors=pieces,
                                           vector_bytes=sum(n_tokens) * row_bytes,
                                           state=state)
                    bar.n = int(bar.n)  # drops a long line's fraction (_LongLineProgress): whole lines count here
                    if (c, b) in lost or (c, b) < frontier:
                        again += len(indices)
                    elif lost_tail_bytes > 0:
                        again += len(indices)
                        lost_tail_bytes -= frame.end - frame.offset
                    bar.update(len(indices))
                    tokens_done += sum(n_tokens)
                    bar.set_postfix_str(f"{tokens_done / max(1e-9, time.perf_counter() - started):,.0f} tok/s",
                                        refresh=False)
            if bar.total is None:
                bar.total = bar.n
                bar.refresh()
        if work.damage:
            warnings.warn(work.damage_report(again), stacklevel=3)
        return journal.frames, again

    def _decode_state(self, data: bytes) -> BiLMState:
        lstm = self.model.config.lstm
        per_row = 2 * lstm.n_layers * (lstm.dim + lstm.projection_dim)
        rows = len(data) // (4 * per_row)
        values = np.frombuffer(data, dtype=np.float32)
        split = 2 * lstm.n_layers * rows * lstm.dim
        c = torch.from_numpy(values[:split].copy()).view(2, lstm.n_layers, rows, lstm.dim)
        h = torch.from_numpy(values[split:].copy()).view(2, lstm.n_layers, rows, lstm.projection_dim)
        return BiLMState(c.to(self.device), h.to(self.device))


class _LongLineProgress:
    """Moves a sentences bar within one long line (tens of seconds for 20,000 tokens, which would
    otherwise show no progress): by the fraction of the line embedded, with its tokens shown."""

    def __init__(self, bar: tqdm, label: str):
        self.bar, self.label, self.start = bar, label, bar.n

    def __call__(self, done: int, total: int) -> None:
        self.bar.n = round(self.start + min(0.99, done / total), 2)
        self.bar.set_postfix_str(f"{self.label}: {min(done, total - 2):,} of {total - 2:,} tokens", refresh=False)
        self.bar.refresh()


@dataclass
class EmbedReport:
    """What :meth:`Embedder.embed_file` wrote: ``sentences``, ``tokens`` and ``bytes`` (the file's
    size) at ``path``; ``resumed``: sentences taken over from an interrupted run; ``seconds``: the
    whole call, of which ``write_seconds`` writing the output from the work file;
    ``already_complete``: the output was already there, complete, from the same settings;
    ``reembedded``: sentences embedded again because their frame in the work file was damaged."""

    path: str
    sentences: int
    tokens: int
    bytes: int
    resumed: int = 0
    seconds: float = 0.0
    already_complete: bool = False
    write_seconds: float = 0.0
    reembedded: int = 0

    def __str__(self) -> str:
        done = "already complete: " if self.already_complete else "wrote "
        resumed = f", {self.resumed:,} of them from the interrupted run" if self.resumed and not self.already_complete else ""
        return (f"{done}{self.sentences:,} sentences, {self.tokens:,} tokens, {self.bytes:,} bytes "
                f"({self.bytes / 2**20:,.1f} MiB) to {self.path}{resumed}")


def write_from_journal(work: WorkFolder, frames: list[Frame], writer, token_shape: tuple[int, ...],
                       dtype: np.dtype, piece_rows: int) -> None:
    """Write the journal's sentences into ``writer`` in input order: chunk by chunk (a chunk's
    batches are sorted by length), each sentence's vectors read in pieces of ``piece_rows`` rows."""
    row_bytes = int(np.prod(token_shape)) * dtype.itemsize
    with open(work.journal_path, "rb") as f:
        start = 0
        while start < len(frames):
            stop = start
            while not frames[stop].last:
                stop += 1
                if stop == len(frames):
                    raise RuntimeError(f"{work.journal_path}: the last chunk is not complete")
            if [(f.chunk, f.batch) for f in frames[start:stop + 1]] != [(frames[start].chunk, b)
                                                                         for b in range(stop + 1 - start)]:
                raise RuntimeError(f"{work.journal_path}: chunk {frames[start].chunk} is not complete")
            sentences = []
            for frame in frames[start:stop + 1]:
                numbers, n_tokens, texts = work.read_meta(f, frame)
                offset = frame.vector_offset
                for number, n, text in zip(numbers.tolist(), n_tokens.tolist(), texts):
                    sentences.append((number, n, text, offset))
                    offset += n * row_bytes
            sentences.sort()
            for _, n, text, offset in sentences:
                writer.add(text, n, WorkFolder.read_vectors(f, offset, n, token_shape, dtype, piece_rows))
            start = stop + 1


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    rank, world = (int(x) for x in shard)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard: rank {rank} of {world} shards; expected 0 <= rank < world")
    return rank, world


def check_sharding(input_path: str | os.PathLike, rank: int, world: int, state: str) -> None:
    """Refuse what a sharded run cannot do: standard input, and the order-dependent stateful policy."""
    if world == 1:
        return
    if os.fspath(input_path) == STDIN or not is_regular_file(input_path):
        raise ValueError(f"{input_path}: a sharded run ({world} ranks) needs a file that every rank can read "
                         "whole, keeping its own lines; standard input or a pipe can be read only once, by one "
                         "process: write it to a file first, or embed it with one process")
    if state == "stateful":
        raise ValueError("state: the stateful policy carries each row's LSTM state from one batch to the next in "
                         "input order, so a line's vectors depend on the lines before it, which other ranks "
                         "embed: it cannot be sharded. Use --state warm (the default) or reset, whose vectors "
                         "do not depend on batching or order")


def shard_target(output_path: str | os.PathLike, rank: int, world: int) -> str:
    """The file a rank writes: ``output_path`` itself for one process, else its shard in the
    folder ``output_path`` (created if missing; its parent must exist)."""
    output = os.fspath(output_path)
    if world == 1:
        return output
    if os.path.exists(output) and not os.path.isdir(output):
        raise FileExistsError(f"{output}: a sharded run writes a folder of shards here, but this is a file")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{output}: the folder {parent} does not exist")
    claim_folder(output, SHARD_FOLDER_KIND, recognise=_is_shard_folder, option="output")
    return os.path.join(output, shard_name(rank, world))


SHARD_FOLDER_KIND = "embed shard folder"  # the kind in the marker of a sharded run's output folder
_SHARD_ENTRY = re.compile(r"shard-\d+-of-\d+\.hdf5(\.partial|\.\d+\.\w+\.tmp)?|" + re.escape(MANIFEST))


def _is_shard_folder(folder: str) -> bool:
    """A sharded run's folder from before the marker existed: shards, their work files and the manifest only."""
    names = os.listdir(folder)
    return bool(names) and all(_SHARD_ENTRY.fullmatch(n) for n in names)


def write_manifest(folder: str | os.PathLike, world: int, fingerprint: dict) -> None:
    """The shard folder's ``manifest.json`` (every rank writes the same one when it finishes)."""
    info = {k: v for k, v in fingerprint.items() if k != "shard"}
    atomic_write_text(os.path.join(os.fspath(folder), MANIFEST), json.dumps(manifest_for(world, info), indent=1))


def load_embeddings(path: str | os.PathLike) -> list[np.ndarray]:
    """The arrays :meth:`Embedder.embed_file` (or ``elmo embed IN OUT``) wrote, in line order, all
    in memory: one ``(layers, tokens, dim)`` (or ``(tokens, dim)``) array per input line, in the
    stored dtype. Any layout or shard folder; for big outputs, :func:`open_embeddings` reads lazily."""
    with open_embeddings(path) as vectors:
        return list(vectors)


def check_output(input_path: str | os.PathLike, output_path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse an output that is the input (it would be destroyed before being read), a folder or
    anything else but a regular file, and, unless ``overwrite``, one that already exists
    (:func:`elmo.fileio.check_output_file`)."""
    output = os.fspath(output_path)
    if output == "-":
        raise ValueError("output: '-' (standard output) is for printed vectors; HDF5 needs a file name")
    source = os.fspath(input_path)
    same = os.path.realpath(source) == os.path.realpath(output)
    if not same and source != "-" and os.path.exists(source) and os.path.exists(output):
        same = os.path.samefile(source, output)
    if same:
        raise ValueError(f"{output}: the output file is the input file; choose another output")
    if os.path.isdir(output):  # found now, not once everything is embedded
        raise IsADirectoryError(f"{output}: a folder is in the way of the output file (one process writes one HDF5 "
                                "file; a sharded run writes a folder): give a file name")
    check_output_file(output, overwrite)
