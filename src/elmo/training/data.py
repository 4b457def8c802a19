"""Language-model training data in the original bilm-tf pipeline.

Each direction reads an independent, endless stream of sentences: shards in a shuffled order,
sentences shuffled within each shard (every pass reshuffles), each sentence wrapped as
``<S> w_1 ... w_n </S>`` (reversed for the backward direction). Row ``i`` of a batch is a running
stream: it takes ``unroll_steps`` (input, next token) pairs from its current sentence and moves on
to the next sentence when that one is used up, so no position is padding, and the LSTM state is
carried from one window to the next. The batcher's whole position fits in :meth:`state_dict`,
so training resumes exactly.
"""

from __future__ import annotations

import glob
import os
import queue
import random
import threading
from collections.abc import Sequence

import numpy as np
import torch

from elmo.fileio import read_lines
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN, batch_to_char_ids
from elmo.model.vocab import Vocabulary


def expand_paths(patterns: str | Sequence[str]) -> list[str]:
    """Expand one or more glob patterns (or plain paths) into a sorted list; error if none match."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    paths: list[str] = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise FileNotFoundError(f"{pattern}: matches no file")
        for path in matched:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such file")
        paths.extend(matched)
    return paths


def read_sentences(path: str) -> list[list[str]]:
    """The tokenized sentences of one shard (empty lines skipped)."""
    return [line.split() for line in read_lines(path) if line.strip()]


def count_tokens(paths: Sequence[str]) -> tuple[int, int]:
    """``(sentences, prediction targets)`` in the shards: each sentence of ``n`` words gives
    ``n + 1`` targets per direction (every word and the end marker)."""
    sentences = targets = 0
    for path in paths:
        for line in read_lines(path):
            n = len(line.split())
            if n:
                sentences += 1
                targets += n + 1
    return sentences, targets


class SentenceStream:
    """Endless, deterministic stream of sentences from shards, resumable from :meth:`state_dict`.

    With ``shuffle``, pass ``p`` visits the shards in an order drawn from ``(seed, p)`` and each
    shard's sentences in an order drawn from ``(seed, p, shard)``, so no RNG state needs saving.
    Without ``shuffle`` (evaluation), one pass in file order, then :meth:`next` returns None.
    """

    def __init__(self, paths: Sequence[str], seed: int = 0, shuffle: bool = True, reverse: bool = False):
        if not paths:
            raise ValueError("no training shards given")
        self.paths, self.seed, self.shuffle, self.reverse = list(paths), seed, shuffle, reverse
        self.pass_index, self.shard_position, self.sentence_position = 0, 0, 0
        self.emitted = 0  # sentences handed out so far: the index of the next one
        self._loaded: tuple[int, int] | None = None
        self._sentences: list[list[str]] = []

    def _shard_order(self) -> list[int]:
        order = list(range(len(self.paths)))
        if self.shuffle:
            random.Random(f"{self.seed}/{self.pass_index}").shuffle(order)
        return order

    def _load(self) -> None:
        key = (self.pass_index, self.shard_position)
        if self._loaded == key:
            return
        shard = self._shard_order()[self.shard_position]
        sentences = read_sentences(self.paths[shard])
        if self.shuffle:
            random.Random(f"{self.seed}/{self.pass_index}/{shard}").shuffle(sentences)
        self._sentences, self._loaded = sentences, key

    def next(self) -> list[str] | None:
        """The next sentence as ``[<S>, w_1, ..., w_n, </S>]`` (reversed when ``reverse``)."""
        while True:
            if self.shard_position >= len(self.paths):
                if not self.shuffle:
                    return None
                self.pass_index, self.shard_position, self.sentence_position = self.pass_index + 1, 0, 0
            self._load()
            if self.sentence_position < len(self._sentences):
                words = self._sentences[self.sentence_position]
                self.sentence_position += 1
                self.emitted += 1
                sentence = [BOS_TOKEN, *words, EOS_TOKEN]
                return sentence[::-1] if self.reverse else sentence
            self.shard_position, self.sentence_position = self.shard_position + 1, 0

    def state_dict(self) -> dict:
        return {"pass_index": self.pass_index, "shard_position": self.shard_position,
                "sentence_position": self.sentence_position, "emitted": self.emitted}

    def load_state_dict(self, state: dict) -> None:
        self.pass_index = state["pass_index"]
        self.shard_position = state["shard_position"]
        self.sentence_position = state["sentence_position"]
        self.emitted = state["emitted"]


class LMBatcher:
    """Windows of ``unroll_steps`` (input word, next word) pairs for ``batch_size`` running rows.

    ``rows`` restricts the tensors to a slice of the rows (one rank's share under data-parallel
    training): every rank walks the same global stream, so ``W`` ranks with ``B / W`` rows each
    see exactly the batch one process with ``B`` rows sees.
    """

    def __init__(self, stream: SentenceStream, vocab: Vocabulary, batch_size: int, unroll_steps: int,
                 rows: slice | None = None):
        self.stream, self.vocab = stream, vocab
        self.batch_size, self.unroll_steps = batch_size, unroll_steps
        self.rows = rows or slice(0, batch_size)
        self.current: list[list[str]] = [[] for _ in range(batch_size)]
        self.current_index = [-1] * batch_size  # which sentence each row is reading

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """Returns ``char_ids`` ``(rows, unroll, 50)``, ``targets`` ``(rows, unroll)`` int64 word
        ids, ``mask`` ``(rows, unroll)`` (all True while the stream lasts; at the end of a finite
        stream, rows that ran dry are masked) and ``sentence_ids`` ``(rows, unroll)``, the index
        in stream order of the sentence each target belongs to (-1 where masked). None once
        nothing is left."""
        inputs = [[] for _ in range(self.batch_size)]
        targets = [[] for _ in range(self.batch_size)]
        sentence_ids = [[] for _ in range(self.batch_size)]
        for row in range(self.batch_size):
            while len(inputs[row]) < self.unroll_steps:
                if len(self.current[row]) < 2:
                    sentence = self.stream.next()
                    if sentence is None:
                        break
                    self.current[row], self.current_index[row] = sentence, self.stream.emitted - 1
                take = min(len(self.current[row]) - 1, self.unroll_steps - len(inputs[row]))
                inputs[row].extend(self.current[row][:take])
                targets[row].extend(self.current[row][1:take + 1])
                sentence_ids[row].extend([self.current_index[row]] * take)
                # The last word taken stays: it is the next window's first input.
                self.current[row] = self.current[row][take:]
        if not any(inputs):
            return None
        mine = range(self.batch_size)[self.rows]
        char_ids, _ = batch_to_char_ids([inputs[r] for r in mine])
        if char_ids.shape[1] < self.unroll_steps:  # only at the very end of a finite stream
            char_ids = torch.nn.functional.pad(char_ids, (0, 0, 0, self.unroll_steps - char_ids.shape[1]))
        target_ids = np.zeros((len(mine), self.unroll_steps), dtype=np.int64)
        mask = np.zeros((len(mine), self.unroll_steps), dtype=bool)
        sentences = np.full((len(mine), self.unroll_steps), -1, dtype=np.int64)
        for i, r in enumerate(mine):
            ids = self.vocab.encode(targets[r])
            target_ids[i, :len(ids)] = ids
            mask[i, :len(ids)] = True
            sentences[i, :len(ids)] = sentence_ids[r]
        return {"char_ids": char_ids, "targets": torch.from_numpy(target_ids), "mask": torch.from_numpy(mask),
                "sentence_ids": torch.from_numpy(sentences)}

    def state_dict(self) -> dict:
        return {"stream": self.stream.state_dict(), "current": [list(c) for c in self.current],
                "current_index": list(self.current_index)}

    def load_state_dict(self, state: dict) -> None:
        self.stream.load_state_dict(state["stream"])
        self.current = [list(c) for c in state["current"]]
        self.current_index = list(state["current_index"])


class PrefetchingBatcher:
    """An :class:`LMBatcher` whose batches are built ahead, in a background thread.

    Batch building is plain Python (lists of words, character ids): on a GPU it took about 40% of
    a training step while the device waited (``benchmarks/lm_batcher.py``). The thread builds the
    next ``depth`` batches while the device runs the current step (PyTorch releases the GIL
    while it waits). The batches and their order are exactly the wrapped batcher's, and
    :meth:`state_dict` is the state after the last batch *handed out*, not the last one built,
    so a checkpoint resumes exactly where an unprefetched run would.
    """

    def __init__(self, batcher: LMBatcher, depth: int = 2, pin_memory: bool = False):
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1, not {depth}")
        self.batcher, self.depth, self.pin_memory = batcher, depth, pin_memory
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._state: dict | None = None  # after the last batch handed out; None: nothing handed out yet
        self._finished = False

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.batcher.next_batch()
                if batch is not None and self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                self._put((batch, self.batcher.state_dict(), None))
                if batch is None:
                    return
        except BaseException as error:  # handed to the consumer, which raises it
            self._put((None, None, error))

    def _put(self, item: tuple) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """The wrapped batcher's next batch (see :meth:`LMBatcher.next_batch`)."""
        if self._finished:
            return None
        if self._stop.is_set():
            raise RuntimeError("this prefetching batcher was closed")
        if self._thread is None:
            self._state = self.batcher.state_dict()
            self._queue = queue.Queue(maxsize=self.depth)
            self._thread = threading.Thread(target=self._work, name="lm-batcher", daemon=True)
            self._thread.start()
        batch, state, error = self._queue.get()
        if error is not None:
            self.close()
            raise error
        if batch is None:
            self.close()
            self._finished = True
            return None
        self._state = state
        return batch

    def state_dict(self) -> dict:
        return self.batcher.state_dict() if self._state is None else self._state

    def load_state_dict(self, state: dict) -> None:
        if self._thread is not None:
            raise RuntimeError("a prefetching batcher's state can only be loaded before its first batch")
        self.batcher.load_state_dict(state)

    def close(self) -> None:
        """Stop the thread (the batches it built ahead are dropped; :meth:`state_dict` stays)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
