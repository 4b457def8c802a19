"""The language-model batcher, its sentence stream and the character-id code as they were before
issue 37, kept verbatim (pure Python, one numpy call per token), so that benchmarks can measure
old against new in one run and tests can check that the new code builds bitwise-identical batches.

Not used by the package. ``LegacyLMBatcher`` and ``LegacySentenceStream`` are the old
``elmo.training.data.LMBatcher`` and ``SentenceStream``;
``legacy_batch_to_char_ids`` the old ``elmo.model.chars.batch_to_char_ids``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from elmo.fileio import read_lines
from elmo.model.chars import (
    BOS_IDS,
    BOS_TOKEN,
    BOW_CHAR,
    EOS_IDS,
    EOS_TOKEN,
    EOW_CHAR,
    MAX_BYTES,
    MAX_CHARS,
    PAD_CHAR,
)
from elmo.model.vocab import Vocabulary


def read_sentences(path: str) -> list[list[str]]:
    """The tokenized sentences of one shard (empty lines skipped)."""
    return [line.split() for line in read_lines(path) if line.strip()]


class LegacySentenceStream:
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


@lru_cache(maxsize=100_000)
def _word_ids(word: str) -> bytes:
    if word == BOS_TOKEN:
        return BOS_IDS.tobytes()
    if word == EOS_TOKEN:
        return EOS_IDS.tobytes()
    # 'ignore' only drops what UTF-8 cannot encode at all (lone surrogates), like the original.
    encoded = word.encode("utf-8", "ignore")[:MAX_BYTES]
    ids = np.full(MAX_CHARS, PAD_CHAR, dtype=np.int64)
    ids[0] = BOW_CHAR
    ids[1:1 + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    ids[1 + len(encoded)] = EOW_CHAR
    return (ids + 1).tobytes()


def legacy_batch_to_char_ids(batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Character ids of a batch of tokenized sentences, padded to the longest one.

    Returns ``char_ids`` of shape ``(batch, time, 50)`` (int64, 0 at padded tokens) and ``mask``
    of shape ``(batch, time)`` (bool, True at real tokens). Boundary tokens are *not* added here:
    the biLM adds them itself.
    """
    for i, sentence in enumerate(batch):
        if isinstance(sentence, str):
            raise TypeError(f"batch[{i}] is a string; pass token lists (use tokenize(line))")
    n_time = max((len(s) for s in batch), default=0)
    ids = np.zeros((len(batch), n_time, MAX_CHARS), dtype=np.int64)
    mask = np.zeros((len(batch), n_time), dtype=bool)
    for i, sentence in enumerate(batch):
        for t, word in enumerate(sentence):
            ids[i, t] = np.frombuffer(_word_ids(word), dtype=np.int64)
        mask[i, :len(sentence)] = True
    return torch.from_numpy(ids), torch.from_numpy(mask)


class LegacyLMBatcher:
    """Windows of ``unroll_steps`` (input word, next word) pairs for ``batch_size`` running rows.

    ``rows`` restricts the tensors to a slice of the rows (one rank's share under data-parallel
    training): every rank walks the same global stream, so ``W`` ranks with ``B / W`` rows each
    see exactly the batch one process with ``B`` rows sees.
    """

    def __init__(self, stream: LegacySentenceStream, vocab: Vocabulary, batch_size: int, unroll_steps: int,
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
        char_ids, _ = legacy_batch_to_char_ids([inputs[r] for r in mine])
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
