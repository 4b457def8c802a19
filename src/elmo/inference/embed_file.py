"""Embedding a text file into HDF5: the resumable, sharded pipeline over an :class:`Embedder`.

:class:`FileEmbedder` reads a file of sentences once, as a stream, embeds it batch by batch with
an :class:`~elmo.inference.embed.Embedder` (the in-memory API: its model, runtime, batch size,
token budget and state policy), appends each batch's vectors to a journal in a work folder beside
the output (:mod:`elmo.inference.journal`), and at the end writes the output from the journal in
one of the layouts of :mod:`elmo.inference.outputs`, renamed into place. A run killed at any
moment resumes from its journal; ``shard=(rank, world)`` splits the lines over processes, each
writing its own shard into a folder with a manifest.

This module never imports :mod:`elmo.inference.embed`: the embedder is handed in (and
``Embedder.embed_file`` delegates here), so that the two depend on each other one way only.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from elmo import jsonio
from elmo.checks import NonFiniteOutputError, check_count
from elmo.fileio import (
    MAX_LINE_BYTES,
    STDIN,
    atomic_hdf5,
    atomic_write_text,
    check_output_file,
    chunks,
    claim_folder,
    count_lines,
    is_regular_file,
    read_lines,
    writes_for,
)
from elmo.inference.journal import Frame, WorkFolder, chunk_digest
from elmo.inference.long_lines import window_for
from elmo.inference.outputs import (
    DEFAULT_COMPRESSION,
    DEFAULT_DTYPE,
    DEFAULT_LAYERS,
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
from elmo.model.chars import tokenize
from elmo.model.network import BiLMState
from elmo.progress import progress_bar
from elmo.version import __version__

# Bytes per token allowed when reading a line, before it is split: a line of more than
# MAX_BYTES_PER_TOKEN * max_line_tokens bytes is refused unread.
MAX_BYTES_PER_TOKEN = 64
# A longer line is refused (with its line number) rather than held: its text and token list are
# the only things a line costs in memory whatever its length (see elmo.inference.long_lines).
# With the bytes per token, the bound of every verb that reads text (elmo.fileio.MAX_LINE_BYTES).
MAX_LINE_TOKENS = MAX_LINE_BYTES // MAX_BYTES_PER_TOKEN
# Lines per chunk of the work file's journal (rounded down to whole batches): the unit in which a
# resumed run checks that its input is the interrupted run's.
DEFAULT_CHUNK_SENTENCES = 4096


class FileEmbedder:
    """Embeds text files into HDF5 with ``embedder`` (an :class:`~elmo.inference.embed.Embedder`,
    which decides the model, device, precision, state policy, ``batch_size`` and ``max_tokens``),
    resumable and shardable.

    What is stored is set here: ``layers`` (as :func:`~elmo.inference.embed.select_layers` takes
    them), the ``layout`` (:mod:`elmo.inference.outputs`: ``"allennlp"``, the ``allennlp elmo``
    command's, or ``"packed"``, for millions of sentences), the stored ``dtype`` and
    ``compression``. ``chunk_sentences`` lines make one chunk of the journal (rounded down to whole
    batches); a line of more than ``max_line_tokens`` tokens is refused with its line number.
    ``progress``: :mod:`elmo.progress`'s rule (a bar on a terminal, a line every 30 s elsewhere; None as True), False none; on a terminal at row ``progress_position``.

    The embedder is used, never changed (in stateful mode a file starts from zero state, so the
    state it carries between calls is reset, as ``Embedder.embed_file`` always did). It is used
    through public names only: its settings, :meth:`~elmo.inference.embed.Embedder.batches`,
    :meth:`~elmo.inference.embed.Embedder.stream_batch` (the embedder's one batch path, token by
    token, long lines in windows); of its runtime, what the run's fingerprint records
    (:meth:`~elmo.inference.runtime.Runtime.weights_fingerprint`,
    :meth:`~elmo.inference.runtime.Runtime.vocab_cache_fingerprint`, ``precision``) and, in
    stateful mode, :meth:`~elmo.inference.runtime.Runtime.reset_state` and
    :attr:`~elmo.inference.runtime.Runtime.carried_state`, which the journal saves after every
    batch and a resumed run restores.
    """

    def __init__(self, embedder, *, layers: str | int | Sequence[int] = DEFAULT_LAYERS, layout: str = DEFAULT_LAYOUT,
                 dtype: str = DEFAULT_DTYPE, compression: str | None = DEFAULT_COMPRESSION,
                 chunk_sentences: int = DEFAULT_CHUNK_SENTENCES, max_line_tokens: int = MAX_LINE_TOKENS,
                 progress: bool | None = None, progress_position: int = 0):
        check_count(max_line_tokens, "max_line_tokens")
        self.embedder = embedder
        self.options = OutputOptions(layout, layers if isinstance(layers, (str, int)) else tuple(layers), dtype,
                                     compression)
        self.chunk_sentences = chunk_sentences
        self.max_line_tokens = max_line_tokens
        self.progress = progress
        self.progress_position = progress_position

    def fingerprint(self, chunk_sentences: int, shard: tuple[int, int]) -> dict:
        """What decides the vectors a run writes: a resumed run must match the interrupted one."""
        embedder, runtime = self.embedder, self.embedder.runtime
        return {"elmo": __version__, "model": runtime.weights_fingerprint(),
                "vocab_cache": runtime.vocab_cache_fingerprint(), "state": embedder.state,
                "precision": runtime.precision, "device": embedder.device.type, "batch_size": embedder.batch_size,
                "max_tokens": embedder.max_tokens, "chunk_sentences": chunk_sentences, "shard": list(shard),
                **self.options.describe()}

    def write(self, input_path: str | os.PathLike, output_path: str | os.PathLike, *, overwrite: bool = False,
              resume: bool = False, shard: tuple[int, int] = (0, 1)) -> EmbedReport:
        """Embed a text file (one sentence per line, plain or ``.gz``; ``"-"`` is standard input)
        into the HDF5 file ``output_path``.

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
        mode. A line longer than the embedder's ``max_tokens`` runs in windows (see
        :mod:`elmo.inference.long_lines`). In stateful mode a file starts from zero state, as a new
        ``allennlp elmo`` run does (and a resumed one from the state the journal carries).

        Returns what was written (sentences, tokens, bytes).
        """
        started = time.perf_counter()
        embedder, options = self.embedder, self.options
        n_layers, dim = embedder.model.config.lstm.n_layers + 1, 2 * embedder.model.config.lstm.projection_dim
        token_shape = options.token_shape(n_layers, dim)
        rank, world = check_shard(shard)
        check_sharding(input_path, rank, world, embedder.state)
        target = shard_target(output_path, rank, world)
        check_output(input_path, target, overwrite=True)  # never the input; an existing output: below
        # Stateful mode needs whole batches of consecutive lines per chunk.
        batch_size = embedder.batch_size
        chunk = max(1, self.chunk_sentences // batch_size) * batch_size
        # As work.json and elmo_info will hold it (tuples as lists), to compare with what they hold.
        fingerprint = jsonio.loads(json.dumps(self.fingerprint(chunk, (rank, world))), "the run's fingerprint")
        work = WorkFolder(target)
        with writes_for(target):  # the work folder's errors too name the output the user gave
            return self._write(input_path, output_path, target, work, fingerprint, token_shape, chunk, rank, world,
                               resume=resume, overwrite=overwrite, started=started)

    def _write(self, input_path, output_path, target: str, work: WorkFolder, fingerprint: dict,
               token_shape: tuple[int, ...], chunk: int, rank: int, world: int, *, resume: bool, overwrite: bool,
               started: float) -> EmbedReport:
        """:meth:`write`'s work once its settings are checked: the journal, then the output from it."""
        embedder = self.embedder
        try:
            finished = self._finished_output(target, fingerprint, resume, overwrite)
            if finished is not None:
                work.remove()  # a run killed after its output was in place, before cleaning up
                if world > 1:
                    write_manifest(output_path, world, fingerprint)
                return EmbedReport(target, finished["sentences"], finished["tokens"], os.path.getsize(target), 0,
                                   time.perf_counter() - started, already_complete=True)
            about = {"input": os.fspath(input_path), "output": os.fspath(target), "model_source": embedder.source}
            open_work_folder(work, target, fingerprint, about, resume=resume, overwrite=overwrite)
            try:
                # Every frame is verified (CRC-32) before it is reused; a damaged one is embedded again.
                frames = work.scan(chained=embedder.state == "stateful")
                resumed = sum(f.sentences for f in frames)
                appended, again = self._embed_into_journal(input_path, work, frames, token_shape, chunk, rank,
                                                           world)
                frames = sorted(frames + appended, key=lambda f: (f.chunk, f.batch))
                writing = time.perf_counter()
                written = self._write_output(work, frames, target, token_shape, fingerprint, input_path, (rank, world))
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
        return EmbedReport(target, written.sentences, written.tokens, os.path.getsize(target), resumed,
                           time.perf_counter() - started, write_seconds=writing, reembedded=again)

    def _finished_output(self, target: str, fingerprint: dict, resume: bool, overwrite: bool) -> dict | None:
        """The ``elmo_info`` of an output already in place from a run with these settings (only when
        resuming), else None; an output in the way without ``overwrite`` is refused."""
        if not os.path.exists(target):
            return None
        try:
            info = file_info(target) if resume else None
        except jsonio.JSONFileError:  # its elmo_info is not elmo's: refused, named, unless replaced
            if not overwrite:
                raise
            info = None
        if info is not None and info.get("fingerprint") == fingerprint:
            return info
        if not overwrite:
            finished = " and is not the finished output of a run with these settings" if resume else ""
            raise FileExistsError(f"{target}: already exists{finished}; pass --force (overwrite=True) to replace it")
        return None

    def _write_output(self, work: WorkFolder, frames: list[Frame], target: str, token_shape: tuple[int, ...],
                      fingerprint: dict, input_path, shard: tuple[int, int]):
        """The output, from the journal's frames, written to a temporary file renamed into place;
        returns the layout's writer (its ``sentences`` and ``tokens``)."""
        embedder, options = self.embedder, self.options
        with atomic_hdf5(target) as fout:
            writer = create_writer(fout, options, token_shape)
            write_from_journal(work, frames, writer, token_shape, np.dtype(DTYPES[options.dtype]),
                               window_for(embedder.max_tokens))
            # The source is recorded, not fingerprinted: the weights' fingerprint decides.
            writer.finish({"fingerprint": fingerprint, "input": os.fspath(input_path), "shard": list(shard),
                           "state": embedder.state, "model_source": embedder.source})
        return writer

    def _embed_into_journal(self, input_path, work: WorkFolder, frames: list[Frame], token_shape: tuple[int, ...],
                            chunk: int, rank: int, world: int) -> tuple[list[Frame], int]:
        """Embed every line not yet in the journal (``frames``: its verified frames, sorted),
        batch by batch, one frame per batch. Returns the frames appended, and how many of their
        sentences were embedded again because the journal's frame for them was damaged (the
        user is warned, in one line)."""
        embedder = self.embedder
        done_batches: dict[int, dict[int, Frame]] = {}  # chunk -> batch -> its frame
        for frame in frames:
            done_batches.setdefault(frame.chunk, {})[frame.batch] = frame
        # Lost to damage: the batches damaged headers name, those missing between whole frames,
        # and the first ones appended over a damaged end.
        lost = set().union(*(d.lost() for d in work.damage))
        frontier = (frames[-1].chunk, frames[-1].batch) if frames else (-1, -1)
        lost_tail_bytes, again = work.lost_tail_bytes, 0
        row_bytes = int(np.prod(token_shape)) * np.dtype(DTYPES[self.options.dtype]).itemsize
        self._restore_state(work, frames)
        total = count_lines_in_background(input_path)
        desc = f"shard {rank}/{world}" if world > 1 else None
        tokens_done = 0
        max_bytes = self.max_line_tokens * MAX_BYTES_PER_TOKEN
        lines = ((n, line) for n, line in enumerate(read_lines(input_path, max_bytes)) if n % world == rank)
        with work.appender() as journal, progress_bar(self.progress, unit="sent", desc=desc,
                                                      initial=sum(f.sentences for f in frames),
                                                      position=self.progress_position) as bar:
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
                texts, tokenized = self._read_block(input_path, block)
                batches = list(embedder.batches(tokenized))
                check_batches_alike(work, block, have, batches)
                for b, indices in enumerate(batches):
                    if bar.total is None and total[0] is not None:
                        bar.total = shard_lines(total[0], rank, world)
                        bar.refresh()
                    if b in have:
                        continue
                    sentences = [(block[i][0], texts[i], tokenized[i]) for i in indices]
                    frame = self._append_batch(journal, input_path, work, sentences, chunk=c, batch=b,
                                               last=b == len(batches) - 1, digest=digest, row_bytes=row_bytes, bar=bar)
                    if (c, b) in lost or (c, b) < frontier:
                        again += len(indices)
                    elif lost_tail_bytes > 0:
                        again += len(indices)
                        lost_tail_bytes -= frame.end - frame.offset
                    bar.update(len(indices))
                    tokens_done += frame.tokens
                    bar.set_postfix_str(f"{tokens_done / max(1e-9, time.perf_counter() - started):,.0f} tok/s",
                                        refresh=False)
            if bar.total is None:
                bar.total = bar.n
                bar.refresh()
        if work.damage:
            warnings.warn(work.damage_report(again), stacklevel=4)
        return journal.frames, again

    def _restore_state(self, work: WorkFolder, frames: list[Frame]) -> None:
        """Stateful mode: a file starts from zero state, a resumed one from the state its journal's last frame carries."""
        runtime = self.embedder.runtime
        if self.embedder.state != "stateful":
            return
        runtime.reset_state()
        if frames:
            with open(work.journal_path, "rb") as f:
                runtime.carried_state = self._decode_state(work.read_state(f, frames[-1]))

    def _read_block(self, input_path, block: list[tuple[int, str]]) -> tuple[list[str], list[list[str]]]:
        """A chunk's lines (``(number, line)``) as texts and token lists; a line over the token limit,
        or in stateful mode over the batch budget, is refused with its line number."""
        embedder, max_line_tokens = self.embedder, self.max_line_tokens
        texts = [line.strip() for _, line in block]
        tokenized = [tokenize(t) for t in texts]
        for (number, _), tokens in zip(block, tokenized):
            if len(tokens) > max_line_tokens:
                raise ValueError(f"{input_path}:{number + 1}: {len(tokens):,} tokens, more than the limit of "
                                 f"{max_line_tokens:,} for one line (max_line_tokens, --max-line-tokens)")
            if embedder.state == "stateful" and len(tokens) + 2 > embedder.max_tokens:
                raise ValueError(f"{input_path}:{number + 1}: {len(tokens):,} tokens; stateful mode embeds a "
                                 f"line only within a batch, of at most max_tokens ({embedder.max_tokens:,}) "
                                 "padded tokens per row: raise --max-tokens, or use --state warm or reset, "
                                 "which embed long lines in windows")
        return texts, tokenized

    def _append_batch(self, journal, input_path, work: WorkFolder, sentences: list[tuple[int, str, list[str]]], *,
                      chunk: int, batch: int, last: bool, digest: bytes, row_bytes: int, bar) -> Frame:
        """Embed one batch (``sentences``: ``(line number, text, tokens)``) and append its frame to the
        journal: the vectors token by token, and in stateful mode the state it leaves. A NaN vector
        fails the run, naming its line (never exit 0)."""
        embedder = self.embedder
        rows = [tokens for _, _, tokens in sentences]
        n_tokens = [len(r) for r in rows]
        try:
            # Token by token, (tokens, *token_shape); a long line moves the bar as it goes.
            moving = _LongLineProgress(bar, f"line {sentences[0][0] + 1}")
            pieces = (self.options.select(p) for p in embedder.stream_batch(rows, spill_dir=work.path,
                                                                            progress=moving))
            state = b""
            if embedder.state == "stateful":
                carried = embedder.runtime.carried_state
                state = carried.c.float().cpu().numpy().tobytes() + carried.h.float().cpu().numpy().tobytes()
            frame = journal.append(chunk=chunk, batch=batch, last=last, digest=digest,
                                   line_numbers=[number for number, _, _ in sentences], n_tokens=n_tokens,
                                   texts=[text for _, text, _ in sentences], vectors=pieces,
                                   vector_bytes=sum(n_tokens) * row_bytes, state=state)
        except NonFiniteOutputError as e:
            raise e.at(f"{input_path}:{sentences[e.row][0] + 1}") from None
        bar.n = int(bar.n)  # drops a long line's fraction (_LongLineProgress): whole lines count here
        return frame

    def _decode_state(self, data: bytes) -> BiLMState:
        """The LSTM state a journal frame stored (float32 ``c`` then ``h``): ``c`` ``(2, L, rows, dim)``,
        ``h`` ``(2, L, rows, projection_dim)``, on the CPU (the runtime takes it to its device)."""
        lstm = self.embedder.model.config.lstm
        per_row = 2 * lstm.n_layers * (lstm.dim + lstm.projection_dim)
        rows = len(data) // (4 * per_row)
        values = np.frombuffer(data, dtype=np.float32)
        split = 2 * lstm.n_layers * rows * lstm.dim
        c = torch.from_numpy(values[:split].copy()).view(2, lstm.n_layers, rows, lstm.dim)
        h = torch.from_numpy(values[split:].copy()).view(2, lstm.n_layers, rows, lstm.projection_dim)
        return BiLMState(c, h)


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
    """What :meth:`FileEmbedder.write` wrote: ``sentences``, ``tokens`` and ``bytes`` (the file's
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


def count_lines_in_background(input_path) -> list[int | None]:
    """The input's line count, for the progress bar: a one-item list that a background thread fills
    in (a plain file is counted within a second, a big ``.gz`` goes on while embedding starts)."""
    total: list[int | None] = [None]
    counter = threading.Thread(target=lambda: total.__setitem__(0, count_lines(input_path)), daemon=True)
    counter.start()
    counter.join(timeout=1.0)
    return total


def check_batches_alike(work: WorkFolder, block: list[tuple[int, str]], have: dict[int, Frame],
                        batches: list[list[int]]) -> None:
    """A chunk the interrupted run was in: its batches (``have``: batch -> frame) must come again, alike."""
    for b, frame in have.items():
        if b >= len(batches) or frame.sentences != len(batches[b]) or frame.last != (b == len(batches) - 1):
            raise ValueError(f"{work.path}: its batches do not match this run's for lines "
                             f"{block[0][0] + 1}..{block[-1][0] + 1}; start over with --force")


def open_work_folder(work: WorkFolder, target: str, fingerprint: dict, about: dict, *, resume: bool,
                     overwrite: bool) -> None:
    """Open an interrupted run's work folder to resume it, or create a fresh one (discarding the old
    one with ``overwrite``); a folder that is not ours, or an interrupted run without ``resume`` or
    ``overwrite``, is refused."""
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
    """The arrays :meth:`FileEmbedder.write` (or ``elmo embed IN OUT``) wrote, in line order, all
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
    check_output_file(output, overwrite, through=False)  # its work folder goes beside it

