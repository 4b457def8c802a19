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
import itertools
import os
import queue
import random
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from elmo.checks import check_count
from elmo.fileio import MAX_LINE_BYTES, check_input_file, open_text, read_lines
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS, words_to_char_ids
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
            check_input_file(path)
            if not os.path.isfile(path):  # shards are read more than once: a pipe would not do
                raise ValueError(f"{path}: not a regular file (a pipe or a device?); give a file")
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


class EncodedText:
    """Sentences as ids into their own list of distinct words, so that batching does numpy
    gathers instead of Python work per token.

    ``tokens`` ``(n_tokens,)`` int32 indexes ``words``; sentence ``k`` is
    ``tokens[starts[k]:starts[k + 1]]``. The character ids and vocabulary ids of the words are
    computed once, for all words at once, when first asked for.
    """

    def __init__(self, words: list[str], tokens: np.ndarray, starts: list[int]):
        self.words, self.tokens, self.starts = words, tokens, starts
        self._chars: np.ndarray | None = None
        self._vocab_ids: tuple[Vocabulary, np.ndarray] | None = None

    @classmethod
    def from_sentences(cls, sentences: Iterable[Sequence[str]], boundaries: bool = False,
                       reverse: bool = False) -> EncodedText:
        """``sentences`` as token lists; ``boundaries`` wraps each in ``<S>`` ... ``</S>``, and
        ``reverse`` reverses each (after wrapping)."""
        flat: list[str] = []
        lengths: list[int] = []
        for sentence in sentences:
            if boundaries:
                flat.append(EOS_TOKEN if reverse else BOS_TOKEN)
            flat.extend(reversed(sentence) if reverse else sentence)
            if boundaries:
                flat.append(BOS_TOKEN if reverse else EOS_TOKEN)
            lengths.append(len(sentence) + 2 * boundaries)
        words, tokens = _number_words(flat)
        return cls(words, tokens, [0, *itertools.accumulate(lengths)])

    def __len__(self) -> int:
        return len(self.starts) - 1

    def span_words(self, start: int, end: int) -> list[str]:
        """The words of ``tokens[start:end]``."""
        words = self.words
        return [words[i] for i in self.tokens[start:end].tolist()]

    def char_ids(self) -> np.ndarray:
        """Character ids of :attr:`words`: ``(n_words, 50)`` int16."""
        if self._chars is None:
            self._chars = words_to_char_ids(self.words).astype(np.int16)
        return self._chars

    def vocab_ids(self, vocab: Vocabulary) -> np.ndarray:
        """Ids of :attr:`words` in ``vocab``: ``(n_words,)`` int64."""
        if self._vocab_ids is None or self._vocab_ids[0] is not vocab:
            self._vocab_ids = (vocab, np.array(vocab.encode(self.words), dtype=np.int64))
        return self._vocab_ids[1]


def _number_words(tokens: list[str], first: Sequence[str] = ()) -> tuple[list[str], np.ndarray]:
    """Distinct words of ``tokens`` (``first`` taking the first ids) and each token's id
    ``(len(tokens),)`` int32. A word's id is its rank of first appearance: a missing key takes
    the counter's next value, so one pass in C (no Python per token) numbers them all."""
    index: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    for word in first:
        index[word]  # noqa: B018 (reserves the id)
    ids = np.fromiter(map(index.__getitem__, tokens), dtype=np.int32, count=len(tokens))
    return list(index), ids  # insertion order: by id


# Marks line ends in read_encoded; a shard holding this character takes the line-by-line path.
_LINE_END = "\x00"


def _check_line_lengths(data: bytes, path: str) -> None:
    """Refuse a shard holding a line longer than :data:`elmo.fileio.MAX_LINE_BYTES`, naming the
    file and line, as every verb's line reader does (one vectorised pass, only for a shard larger
    than the bound: a smaller one cannot hold such a line)."""
    if len(data) <= MAX_LINE_BYTES:
        return
    ends = np.concatenate([[-1], np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10), [len(data)]])
    lengths = np.diff(ends) - 1
    longest = int(np.argmax(lengths))
    if lengths[longest] > MAX_LINE_BYTES:
        raise ValueError(f"{path}:{longest + 1}: the line is longer than {MAX_LINE_BYTES:,} bytes, the limit for one "
                         "line")


def read_encoded(path: str, reverse: bool = False) -> EncodedText:
    """The sentences of one shard (lines with at least one token, split as ``str.split()``
    does), each wrapped in ``<S>`` ... ``</S>`` (and reversed when ``reverse``), encoded.

    The whole shard is decoded at once and split by one ``str.split()`` with a marker token at
    each line end, so no Python runs per line or per token; the sentences are then laid out by
    numpy. A line that is not UTF-8 raises ValueError with its line number."""
    with open_text(path) as f:
        data = f.read()
    _check_line_lengths(data, path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for _ in read_lines(path):  # raises the error naming the line
            pass
        raise
    del data
    if _LINE_END in text:
        return EncodedText.from_sentences((words for line in text.split("\n") if (words := line.split())),
                                          boundaries=True, reverse=reverse)
    words, ids = _number_words(text.replace("\n", f" {_LINE_END} ").split(), first=(_LINE_END, BOS_TOKEN, EOS_TOKEN))
    del text
    line_end, bos, eos = 0, 1, 2
    # Lines lie between the markers (and the text's end); those with tokens are the sentences.
    ends = np.append(np.flatnonzero(ids == line_end), len(ids))
    begins = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - begins
    begins, lengths = begins[lengths > 0], lengths[lengths > 0]
    offsets = np.concatenate([[0], np.cumsum(lengths + 2)])  # each sentence with its two boundaries
    tokens = np.empty(int(offsets[-1]), dtype=np.int32)
    sentence = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    source = begins[sentence] + position
    if reverse:
        tokens[offsets[sentence] + lengths[sentence] - position] = ids[source]
    else:
        tokens[offsets[sentence] + 1 + position] = ids[source]
    tokens[offsets[:-1]] = eos if reverse else bos
    tokens[offsets[1:] - 1] = bos if reverse else eos
    return EncodedText(words, tokens, offsets.tolist())


class SentenceStream:
    """Endless, deterministic stream of sentences from shards, resumable from :meth:`state_dict`.

    With ``shuffle``, pass ``p`` visits the shards in an order drawn from ``(seed, p)`` and each
    shard's sentences in an order drawn from ``(seed, p, shard)``, so no RNG state needs saving.
    Without ``shuffle`` (evaluation), one pass in file order, then :meth:`next` returns None.

    Shards read (encoded) are kept for later passes while they hold at most
    :attr:`CACHED_TOKENS` tokens in all (4 bytes each): a corpus of that size is read once per
    run, a larger one shard by shard each pass. Shards must not change during a run.
    """

    CACHED_TOKENS = 64_000_000

    def __init__(self, paths: Sequence[str], seed: int = 0, shuffle: bool = True, reverse: bool = False):
        if not paths:
            raise ValueError("no training shards given")
        self.paths, self.seed, self.shuffle, self.reverse = list(paths), seed, shuffle, reverse
        self.pass_index, self.shard_position, self.sentence_position = 0, 0, 0
        self.emitted = 0  # sentences handed out so far: the index of the next one
        self._loaded: tuple[int, int] | None = None
        self._text: EncodedText | None = None
        self._order: list[int] = []  # the loaded shard's sentences in reading order
        self._cache: dict[int, EncodedText] = {}  # shard index -> its text, see CACHED_TOKENS
        self._cached_tokens = 0

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
        text = self._cache.get(shard)
        if text is None:
            text = read_encoded(self.paths[shard], self.reverse)
            if self._cached_tokens + len(text.tokens) <= self.CACHED_TOKENS:
                self._cache[shard] = text
                self._cached_tokens += len(text.tokens)
        # Shuffling positions permutes exactly as shuffling the sentences themselves would.
        order = list(range(len(text)))
        if self.shuffle:
            random.Random(f"{self.seed}/{self.pass_index}/{shard}").shuffle(order)
        self._text, self._order, self._loaded = text, order, key

    def next_span(self) -> tuple[EncodedText, int, int] | None:
        """The next sentence as ``(text, start, end)``: its words are ``text.tokens[start:end]``,
        ``<S> w_1 ... w_n </S>`` (reversed when ``reverse``). None at the end of a finite stream."""
        while True:
            if self.shard_position >= len(self.paths):
                if not self.shuffle:
                    return None
                self.pass_index, self.shard_position, self.sentence_position = self.pass_index + 1, 0, 0
            self._load()
            if self.sentence_position < len(self._order):
                k = self._order[self.sentence_position]
                self.sentence_position += 1
                self.emitted += 1
                return self._text, self._text.starts[k], self._text.starts[k + 1]
            self.shard_position, self.sentence_position = self.shard_position + 1, 0

    def next(self) -> list[str] | None:
        """The next sentence as ``[<S>, w_1, ..., w_n, </S>]`` (reversed when ``reverse``)."""
        span = self.next_span()
        return None if span is None else span[0].span_words(span[1], span[2])

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

    The host must keep up with the device. Shards are read as :class:`EncodedText` (word ids, one
    dictionary lookup per token, in C), each row is a position in one sentence, and a batch is one
    Python step per sentence piece and numpy gathers: no Python work per token.
    """

    def __init__(self, stream: SentenceStream, vocab: Vocabulary, batch_size: int, unroll_steps: int,
                 rows: slice | None = None):
        self.stream, self.vocab = stream, vocab
        self.batch_size, self.unroll_steps = batch_size, unroll_steps
        self.rows = rows or slice(0, batch_size)
        # Row r reads text[r].tokens[position[r]:end[r]]: what is left of its sentence.
        empty = EncodedText.from_sentences([])
        self._texts: list[EncodedText] = [empty] * batch_size
        self._positions = [0] * batch_size
        self._ends = [0] * batch_size
        self.current_index = [-1] * batch_size  # which sentence each row is reading

    @property
    def current(self) -> list[list[str]]:
        """What is left of each row's sentence (its first word is the row's next input)."""
        return [text.span_words(start, end) for text, start, end in zip(self._texts, self._positions, self._ends)]

    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """Returns ``char_ids`` ``(rows, unroll, 50)``, ``targets`` ``(rows, unroll)`` int64 word
        ids, ``mask`` ``(rows, unroll)`` (all True while the stream lasts; at the end of a finite
        stream, rows that ran dry are masked) and ``sentence_ids`` ``(rows, unroll)``, the index
        in stream order of the sentence each target belongs to (-1 where masked). None once
        nothing is left."""
        unroll, stream, current_index = self.unroll_steps, self.stream, self.current_index
        texts, positions, ends = self._texts, self._positions, self._ends
        mine = range(self.batch_size)[self.rows]
        first, last = (mine.start, mine.stop) if mine.step == 1 else (None, None)
        # Pieces of sentences, row after row, of this process's rows only (every row advances):
        # piece k is ``takes[k]`` (input, target) pairs from ``piece_texts[k]`` at ``starts[k]``.
        piece_texts: list[EncodedText] = []
        starts: list[int] = []
        takes: list[int] = []
        piece_sentences: list[int] = []
        counts = [0] * self.batch_size
        for row in range(self.batch_size):
            keep = (first <= row < last) if first is not None else row in mine
            text, position, end, need = texts[row], positions[row], ends[row], unroll
            while need:
                if end - position < 2:
                    span = stream.next_span()
                    if span is None:
                        break
                    text, position, end = span
                    current_index[row] = stream.emitted - 1
                take = min(end - position - 1, need)
                if keep:
                    piece_texts.append(text)
                    starts.append(position)
                    takes.append(take)
                    piece_sentences.append(current_index[row])
                # The last word taken stays: it is the next window's first input.
                position += take
                need -= take
            texts[row], positions[row], ends[row] = text, position, end
            counts[row] = unroll - need
        if not any(counts):
            return None
        take_counts = np.array(takes, dtype=np.int64)
        n_pairs = int(take_counts.sum())
        piece_of_pair = np.repeat(np.arange(len(takes)), take_counts)
        first_pair = np.cumsum(take_counts) - take_counts
        inputs = np.array(starts, dtype=np.int64)[piece_of_pair] + np.arange(n_pairs) - first_pair[piece_of_pair]
        texts = list(dict.fromkeys(piece_texts))
        if len(texts) == 1:  # all from one text: the usual case
            text = texts[0]
            # np.take along rows is several times faster than fancy indexing here.
            char_ids = np.take(text.char_ids(), text.tokens[inputs], axis=0).astype(np.int64)
            target_ids = text.vocab_ids(self.vocab)[text.tokens[inputs + 1]]
        else:  # rows straddle a shard boundary (or the rows of a resumed state)
            char_ids = np.zeros((n_pairs, MAX_CHARS), dtype=np.int64)
            target_ids = np.zeros(n_pairs, dtype=np.int64)
            for text in texts:
                pairs = np.array([t is text for t in piece_texts], dtype=bool)[piece_of_pair]
                here = inputs[pairs]
                char_ids[pairs] = np.take(text.char_ids(), text.tokens[here], axis=0)
                target_ids[pairs] = text.vocab_ids(self.vocab)[text.tokens[here + 1]]
        sentences = np.repeat(np.array(piece_sentences, dtype=np.int64), take_counts)
        n_rows = len(mine)
        row_counts = np.array([counts[r] for r in mine], dtype=np.int64)
        if (row_counts == unroll).all():
            return {"char_ids": torch.from_numpy(char_ids.reshape(n_rows, unroll, MAX_CHARS)),
                    "targets": torch.from_numpy(target_ids.reshape(n_rows, unroll)),
                    "mask": torch.ones(n_rows, unroll, dtype=torch.bool),
                    "sentence_ids": torch.from_numpy(sentences.reshape(n_rows, unroll))}
        # Only at the very end of a finite stream: rows that ran dry are padded and masked.
        mask = np.arange(unroll) < row_counts[:, None]
        padded_chars = np.zeros((n_rows, unroll, MAX_CHARS), dtype=np.int64)
        padded_targets = np.zeros((n_rows, unroll), dtype=np.int64)
        padded_sentences = np.full((n_rows, unroll), -1, dtype=np.int64)
        # The mask's row-major order is the order of the flat pairs.
        padded_chars[mask], padded_targets[mask], padded_sentences[mask] = char_ids, target_ids, sentences
        return {"char_ids": torch.from_numpy(padded_chars), "targets": torch.from_numpy(padded_targets),
                "mask": torch.from_numpy(mask), "sentence_ids": torch.from_numpy(padded_sentences)}

    def state_dict(self) -> dict:
        return {"stream": self.stream.state_dict(), "current": self.current,
                "current_index": list(self.current_index)}

    def load_state_dict(self, state: dict) -> None:
        self.stream.load_state_dict(state["stream"])
        leftovers = EncodedText.from_sentences(state["current"])
        self._texts = [leftovers] * self.batch_size
        self._positions = leftovers.starts[:-1]
        self._ends = leftovers.starts[1:]
        self.current_index = list(state["current_index"])


class PrefetchingBatcher:
    """An :class:`LMBatcher` whose batches are built ahead, in a background thread.

    Batch building holds the GIL (reading and encoding shards, one Python step per sentence
    piece), which the thread running the device also needs (``benchmarks/lm_batcher.py``, in git
    at commit c9df86d, measured it). The thread builds the
    next ``depth`` batches while the device runs the current step (PyTorch releases the GIL
    while it waits). The batches and their order are exactly the wrapped batcher's, and
    :meth:`state_dict` is the state after the last batch *handed out*, not the last one built,
    so a checkpoint resumes exactly where an unprefetched run would.
    """

    def __init__(self, batcher: LMBatcher, depth: int = 2, pin_memory: bool = False):
        check_count(depth, "depth")
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
