"""Character ids in the bilm-tf scheme, the only input the token encoder needs.

A token becomes 50 ids: ``[begin-of-word, byte_1, ..., byte_k, end-of-word, pad, ...]`` where the
bytes are its UTF-8 encoding cut to 48 bytes (a multibyte character may be cut in half, exactly as
the original does). Sentence boundaries ``<S>``/``</S>`` are one-"byte" tokens with ids 256/257.
Every id is then shifted by +1 so that 0 can mean "no token here" (padding), which is what the
published weights expect (their ``char_embed`` has no row for 0; we prepend a zero row).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

from elmo.checks import check_count

MAX_CHARS = 50
MAX_BYTES = MAX_CHARS - 2  # room for the begin- and end-of-word markers

# Ids before the +1 shift, as in bilm-tf's UnicodeCharsVocabulary.
BOS_CHAR = 256  # beginning of sentence
EOS_CHAR = 257  # end of sentence
BOW_CHAR = 258  # beginning of word
EOW_CHAR = 259  # end of word
PAD_CHAR = 260  # padding inside a word

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_ids(char: int) -> np.ndarray:
    ids = np.full(MAX_CHARS, PAD_CHAR, dtype=np.int64)
    ids[0], ids[1], ids[2] = BOW_CHAR, char, EOW_CHAR
    return ids + 1


BOS_IDS = _marker_ids(BOS_CHAR)
EOS_IDS = _marker_ids(EOS_CHAR)


def _word_char_ids(word: str) -> np.ndarray:
    """The 50 shifted character ids of one token, ``(50,)`` int64 (see the module docstring)."""
    if word == BOS_TOKEN:
        return BOS_IDS.copy()
    if word == EOS_TOKEN:
        return EOS_IDS.copy()
    # 'ignore' only drops what UTF-8 cannot encode at all (lone surrogates), like the original.
    encoded = word.encode("utf-8", "ignore")[:MAX_BYTES]
    ids = np.full(MAX_CHARS, PAD_CHAR + 1, dtype=np.int64)
    ids[0] = BOW_CHAR + 1
    ids[1:1 + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
    ids[1:1 + len(encoded)] += 1
    ids[1 + len(encoded)] = EOW_CHAR + 1
    return ids


def word_to_char_ids(word: str) -> np.ndarray:
    """The 50 character ids (already shifted by +1) of one token: ``(50,)`` int64."""
    return _word_char_ids(word)


def words_to_char_ids(words: Sequence[str]) -> np.ndarray:
    """:func:`word_to_char_ids` of many words at once: ``(len(words), 50)`` int64, without a
    numpy call per word."""
    encoded = [word.encode("utf-8", "ignore")[:MAX_BYTES] for word in words]
    n = len(encoded)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    ids = np.full((n, MAX_CHARS), PAD_CHAR + 1, dtype=np.int64)
    ids[:, 0] = BOW_CHAR + 1
    if n:
        rows = np.repeat(np.arange(n), lengths)
        starts = np.cumsum(lengths) - lengths
        columns = 1 + np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
        ids[rows, columns] = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.int64) + 1
        ids[np.arange(n), lengths + 1] = EOW_CHAR + 1
    # Only words of 3 or 4 bytes can be <S> or </S>: look at those alone.
    for i in np.flatnonzero((lengths == len(BOS_TOKEN)) | (lengths == len(EOS_TOKEN))).tolist():
        if words[i] == BOS_TOKEN or words[i] == EOS_TOKEN:
            ids[i] = BOS_IDS if words[i] == BOS_TOKEN else EOS_IDS
    return ids


def tokenize(line: str) -> list[str]:
    """Split a line into tokens the way the original tools do: Python's ``str.split()``."""
    return line.split()


class CharIdTable:
    """Character ids of words, one numpy row per distinct word seen, so that the ids of a whole
    batch are one dictionary lookup per token and one gather (no per-token numpy call).

    Holds at most ``max_words`` words (100 bytes each): a lookup that would pass that starts the
    table again from empty. Thread-safe: a lookup and its gather happen under one lock.
    """

    def __init__(self, max_words: int = 200_000):
        check_count(max_words, "max_words")
        self.max_words = max_words
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._index: dict[str, int] = {}
        # Ids go up to 262, so int16 rows: a quarter of the memory of int64.
        self._chars = np.empty((1024, MAX_CHARS), dtype=np.int16)

    def __len__(self) -> int:
        return len(self._index)

    def lookup(self, words: Sequence[str]) -> np.ndarray:
        """Character ids of ``words``: ``(len(words), 50)`` int64, equal row by row to
        :func:`word_to_char_ids`."""
        with self._lock:
            get = self._index.get
            rows = np.array([get(word, -1) for word in words], dtype=np.intp)
            missing = np.flatnonzero(rows < 0)
            if len(missing):
                new = list(dict.fromkeys(words[i] for i in missing.tolist()))
                if len(self._index) + len(new) > self.max_words:
                    self._clear()
                    missing, new = np.arange(len(words)), list(dict.fromkeys(words))
                self._add(new)
                get = self._index.get
                rows[missing] = [get(words[i]) for i in missing.tolist()]
            return self._chars[rows].astype(np.int64)

    def _add(self, words: list[str]) -> None:
        start = len(self._index)
        needed = start + len(words)
        if needed > len(self._chars):
            chars = np.empty((max(needed, 2 * len(self._chars)), MAX_CHARS), dtype=np.int16)
            chars[:start] = self._chars[:start]
            self._chars = chars
        self._chars[start:needed] = words_to_char_ids(words)
        self._index.update(zip(words, range(start, needed)))


# The table behind batch_to_char_ids, shared by every caller in the process.
_TABLE = CharIdTable()


def batch_to_char_ids(batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Character ids of a batch of tokenized sentences, padded to the longest one.

    Returns ``char_ids`` of shape ``(batch, time, 50)`` (int64, 0 at padded tokens) and ``mask``
    of shape ``(batch, time)`` (bool, True at real tokens). Boundary tokens are *not* added here:
    the biLM adds them itself.
    """
    for i, sentence in enumerate(batch):
        if isinstance(sentence, str):
            raise TypeError(f"batch[{i}] is a string; pass token lists (use tokenize(line))")
    lengths = np.array([len(s) for s in batch], dtype=np.int64)
    n_time = int(lengths.max()) if len(batch) else 0
    mask = np.arange(n_time) < lengths[:, None]  # (batch, time)
    ids = np.zeros((len(batch), n_time, MAX_CHARS), dtype=np.int64)
    words = [word for sentence in batch for word in sentence]
    if words:
        ids[mask] = _TABLE.lookup(words)  # row-major order of the mask is the order of ``words``
    return torch.from_numpy(ids), torch.from_numpy(mask)


class ByteCharacters:
    """The bilm-tf character scheme as an object: what a :class:`~elmo.model.network.BiLM` uses to
    turn tokens into the ids its token encoder reads. Every published bilm-tf/AllenNLP model uses
    it; :class:`elmo.model.dictionary.CharacterDictionary` is the other scheme (ELMoForManyLangs').

    ``width``: ids per token (50); ``pad_id``: the id of a padding slot inside a word; ``bos_ids``
    and ``eos_ids``: the ``(width,)`` ids of the sentence boundary tokens.
    """

    kind = "bytes"
    width = MAX_CHARS
    pad_id = PAD_CHAR + 1
    bos_ids = BOS_IDS
    eos_ids = EOS_IDS

    def batch(self, batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids ``(batch, time, 50)`` and mask ``(batch, time)``: :func:`batch_to_char_ids`."""
        return batch_to_char_ids(batch)

    def fingerprint(self) -> str:
        """What besides the weights decides a token's vector: nothing for this fixed scheme."""
        return ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByteCharacters)

    def __hash__(self) -> int:
        return hash(self.kind)


BYTES = ByteCharacters()
