"""Character ids in the bilm-tf scheme, the only input the token encoder needs.

A token becomes 50 ids: ``[begin-of-word, byte_1, ..., byte_k, end-of-word, pad, ...]`` where the
bytes are its UTF-8 encoding cut to 48 bytes (a multibyte character may be cut in half, exactly as
the original does). Sentence boundaries ``<S>``/``</S>`` are one-"byte" tokens with ids 256/257.
Every id is then shifted by +1 so that 0 can mean "no token here" (padding), which is what the
published weights expect (their ``char_embed`` has no row for 0; we prepend a zero row).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

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


def word_to_char_ids(word: str) -> np.ndarray:
    """The 50 character ids (already shifted by +1) of one token: ``(50,)`` int64."""
    return np.frombuffer(_word_ids(word), dtype=np.int64).copy()


def tokenize(line: str) -> list[str]:
    """Split a line into tokens the way the original tools do: Python's ``str.split()``."""
    return line.split()


def batch_to_char_ids(batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
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


class ByteCharacters:
    """The bilm-tf character scheme as an object: what a :class:`~elmo.model.bilm.BiLM` uses to
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
