"""The biLM's word vocabulary in the bilm-tf format: a text file, one word per line, holding
``<S>``, ``</S>`` and ``<UNK>`` (first, by convention) and then the words by descending count."""

from __future__ import annotations

import itertools
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from elmo.checks import check_count
from elmo.fileio import atomic_write_text, read_lines

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = (BOS, EOS, UNK)
# The vocabulary of Google's lm_1b ends with this sentinel; bilm-tf skips it, and so do we.
MAX_TERM_ID = "!!!MAXTERMID"


def _word_problem(word: str) -> str | None:
    """Why ``word`` cannot be a vocabulary entry, or None."""
    if not word:
        return "empty word"
    if len(word.split()) != 1:
        # Shards are split on whitespace, so such a word could never be seen.
        return f"word {word!r} contains whitespace"
    return None


class Vocabulary:
    """Word <-> id mapping of the biLM's softmax; unknown words map to ``<UNK>``.

    ``words`` must hold each word once, and all of ``<S>``, ``</S>`` and ``<UNK>`` (anywhere,
    as bilm-tf allows; :func:`build_vocabulary` puts them first).
    """

    def __init__(self, words: Iterable[str]):
        self._init(list(words), where=lambda i: f"word {i}", source="vocabulary")

    def _init(self, words: list[str], where: Callable[[int], str], source: str) -> None:
        # Errors name entry i as ``where(i)`` (its index, or file and line) and the whole as ``source``.
        self._words = words
        self._ids: dict[str, int] = {}
        for i, word in enumerate(words):
            problem = _word_problem(word)
            if problem:
                raise ValueError(f"{where(i)}: {problem}")
            if word in self._ids:
                raise ValueError(f"{where(i)}: duplicate word {word!r} (first at {where(self._ids[word])})")
            self._ids[word] = i
        missing = [s for s in SPECIALS if s not in self._ids]
        if missing:
            raise ValueError(f"{source}: missing the special word(s) {' '.join(missing)}")
        self._bos, self._eos, self._unk = (self._ids[s] for s in SPECIALS)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a vocabulary file (plain or ``.gz``); surrounding whitespace on a line is ignored.

        Raises ValueError naming the file and line of an empty, duplicate or whitespace-holding
        word, and naming the file when ``<S>``, ``</S>`` or ``<UNK>`` is missing.
        """
        return cls.from_lines(read_lines(path), os.fspath(path))

    @classmethod
    def from_lines(cls, lines: Iterable[str], source: str) -> Vocabulary:
        """:meth:`from_file` for lines read elsewhere (an archive member); errors name ``source``
        and the line."""
        path = source
        words: list[str] = []
        line_numbers: list[int] = []
        for number, line in enumerate(lines, start=1):
            word = line.strip()
            if word == MAX_TERM_ID:
                continue
            words.append(word)
            line_numbers.append(number)
        vocab = cls.__new__(cls)
        vocab._init(words, where=lambda i: f"{path}:{line_numbers[i]}", source=path)
        return vocab

    def save(self, path: str | os.PathLike) -> None:
        """Write one word per line, in id order (atomically: readers never see half a file)."""
        atomic_write_text(path, "".join(word + "\n" for word in self._words))

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: str) -> bool:
        return word in self._ids

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._words == other._words

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} words)"

    @property
    def words(self) -> list[str]:
        """All words in id order (a copy)."""
        return list(self._words)

    @property
    def bos(self) -> int:
        """Id of ``<S>``."""
        return self._bos

    @property
    def eos(self) -> int:
        """Id of ``</S>``."""
        return self._eos

    @property
    def unk(self) -> int:
        """Id of ``<UNK>``, which every unknown word gets."""
        return self._unk

    def word_to_id(self, word: str) -> int:
        return self._ids.get(word, self._unk)

    def id_to_word(self, index: int) -> str:
        if not 0 <= index < len(self._words):
            raise IndexError(f"word id {index} out of range: the vocabulary has {len(self._words)} words")
        return self._words[index]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens``, unknown words as ``<UNK>``; no ``<S>``/``</S>`` is added."""
        # map over two iterables runs the lookups in C: a third of the comprehension's time.
        return list(map(self._ids.get, tokens, itertools.repeat(self._unk)))


def build_vocabulary(paths: Iterable[str | os.PathLike], min_count: int = 1,
                     max_size: int | None = None) -> tuple[Vocabulary, Counter]:
    """Count the tokens of tokenized shards (plain or ``.gz``, tokens split on whitespace) and
    build the vocabulary: ``<S>``, ``</S>``, ``<UNK>``, then words seen at least ``min_count``
    times by descending count, ties in code point order, so the same text always gives the
    same file. ``max_size`` caps the length including the three specials.

    Returns the vocabulary and the token counts of the text (literal ``<S>`` etc. counted as
    they occur, but listed once in the vocabulary).
    """
    check_count(min_count, "min_count")
    if max_size is not None and max_size < len(SPECIALS):
        raise ValueError(f"max_size: must be at least {len(SPECIALS)} (it counts {' '.join(SPECIALS)}), "
                         f"got {max_size}")
    counts: Counter = Counter()
    paths = list(paths)
    for path in paths:
        before = counts.total()
        for line in read_lines(path):
            counts.update(line.split())
        if counts.total() == before:
            warnings.warn(f"{path}: no tokens in this file", stacklevel=2)
    if not counts:
        raise ValueError(f"{', '.join(map(str, paths)) or 'no input'}: no tokens to count; a vocabulary of only "
                         f"{' '.join(SPECIALS)} would be useless, so nothing was written")
    words = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIALS),
                   key=lambda w: (-counts[w], w))
    if max_size is not None:
        words = words[:max_size - len(SPECIALS)]
    return Vocabulary([*SPECIALS, *words]), counts
