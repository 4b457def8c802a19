"""ELMoForManyLangs' token scheme: characters and words looked up in dictionaries kept with the model.

bilm-tf reads UTF-8 bytes (:mod:`elmo.model.chars`). The ELMoForManyLangs models (HIT-SCIR, the
CoNLL 2018 shared task's 44 languages) read Unicode characters through their own ``char.dic`` and,
beside the character CNN, look each token up in a ``word.dic`` for a word embedding. A token
becomes ``width`` ids: the word id first (when the model has a word embedding), then
``max_chars`` character ids ``[first marker, c_1, ..., c_k, last marker, pad, ...]`` where the
token is cut to ``max_chars - 2`` characters (the word is looked up after the cut, as theirs).
Every id is shifted by +1 so that 0 means "no token here", as in the byte scheme.

Their batcher reads the id of ``<eow>`` into the variable it puts first and the id of ``<bow>``
into the one it puts last (the names are swapped in their ``create_one_batch``); their released
models learned with that order, so it is kept. Their sentence markers ``<bos>``/``<eos>`` are
tokens of one special character, and a token spelled ``<bos>`` or ``<eos>`` in the input is
encoded exactly as the marker, as their code does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
import torch

SPECIAL_CHARS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")
SPECIAL_WORDS = ("<oov>", "<pad>")
BOS_TOKEN, EOS_TOKEN = "<bos>", "<eos>"
# Their dictionary reader strips each line, so a whitespace character loses its token; a line
# left with only an id stands for U+3000 (the ideographic space), and so it does here.
STRIPPED_TOKEN = "\u3000"
# Token ids remembered per dictionary: bounded, like the byte scheme's cache.
ID_CACHE_SIZE = 100_000


class DictionaryError(ValueError):
    """A ``char.dic``/``word.dic`` is malformed; the message names the file and line or entry."""


def parse_dictionary(text: str, where: str) -> dict[str, int]:
    """``token -> id`` of a ``char.dic``/``word.dic``, read as ELMoForManyLangs reads it.

    Lines are split as Python's ``codecs`` reader splits them (``str.splitlines``, which also
    breaks at U+2028, U+0085 and the like), stripped, and split at a tab; a line left with one
    field is U+3000 (see :data:`STRIPPED_TOKEN`). A later line with the same token wins. Raises
    :class:`DictionaryError` naming ``where`` and the line for anything else.
    """
    entries: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, STRIPPED_TOKEN)
        if len(fields) != 2:
            raise DictionaryError(f"{where}:{number}: expected 'token<TAB>id', got {line!r}")
        token, value = fields
        try:
            entries[token] = int(value)
        except ValueError:
            raise DictionaryError(f"{where}:{number}: the id {value!r} is not an integer") from None
        if entries[token] < 0:
            raise DictionaryError(f"{where}:{number}: negative id {value}")
    return entries


def format_dictionary(entries: dict[str, int]) -> str:
    """The text of a ``char.dic``/``word.dic`` (``token<TAB>id`` lines), as their training writes it."""
    return "".join(f"{token}\t{i}\n" for token, i in entries.items())


class CharacterDictionary:
    """The ELMoForManyLangs scheme (see the module docstring) for one model.

    ``chars``/``words``: ``token -> id`` (``words`` None for a model without a word embedding);
    ``max_chars``: character slots per token. ``where_chars``/``where_words`` name the files in
    errors. Same interface as :class:`elmo.model.chars.ByteCharacters`: ``width``, ``pad_id``,
    ``bos_ids``, ``eos_ids``, :meth:`batch`, :meth:`fingerprint`.
    """

    kind = "dictionary"

    def __init__(self, chars: dict[str, int], words: dict[str, int] | None, max_chars: int, *,
                 where_chars: str = "char.dic", where_words: str = "word.dic"):
        missing = [s for s in SPECIAL_CHARS if s not in chars]
        if missing:
            raise DictionaryError(f"{where_chars}: missing the special character(s) {' '.join(missing)}")
        if words is not None:
            missing = [s for s in SPECIAL_WORDS if s not in words]
            if missing:
                raise DictionaryError(f"{where_words}: missing the special word(s) {' '.join(missing)}")
        shared = [c for c, i in chars.items() if i == chars["<pad>"] and c != "<pad>"]
        if shared:
            raise DictionaryError(f"{where_chars}: {shared[0]!r} has the id of <pad> ({chars['<pad>']}); a character "
                                  f"must not read as padding")
        if max_chars < 3:
            raise DictionaryError(f"max_characters_per_token: needs room for a character between the two "
                                  f"markers, got {max_chars}")
        self.chars = dict(chars)
        self.words = dict(words) if words is not None else None
        self.max_chars = max_chars
        self.where_chars, self.where_words = where_chars, where_words
        self.n_char_ids = max(self.chars.values()) + 1
        self.n_word_ids = max(self.words.values()) + 1 if self.words is not None else 0
        self.width = max_chars + (1 if self.words is not None else 0)
        self.pad_id = self.chars["<pad>"] + 1
        self._first, self._last = self.chars["<eow>"] + 1, self.chars["<bow>"] + 1  # their order: see above
        self._oov = self.chars["<oov>"] + 1
        self._word_oov = self.words["<oov>"] + 1 if self.words is not None else 0
        self._cache: dict[str, np.ndarray] = {}
        self.bos_ids = self._ids(BOS_TOKEN, user_token=False)
        self.eos_ids = self._ids(EOS_TOKEN, user_token=False)

    def _ids(self, token: str, user_token: bool = True) -> np.ndarray:
        if user_token:  # their reader cuts input tokens before anything looks at them
            token = token[:self.max_chars - 2]
        chars = np.full(self.max_chars, self.pad_id, dtype=np.int64)
        chars[0] = self._first
        if token in (BOS_TOKEN, EOS_TOKEN):
            chars[1] = self.chars[token] + 1
            chars[2] = self._last
        else:
            for k, ch in enumerate(token):
                chars[k + 1] = self.chars.get(ch, self._oov - 1) + 1
            chars[len(token) + 1] = self._last
        if self.words is None:
            return chars
        return np.concatenate([[self.words.get(token, self._word_oov - 1) + 1], chars])

    def token_ids(self, token: str) -> np.ndarray:
        """The ``(width,)`` ids (shifted by +1) of one input token."""
        ids = self._cache.get(token)
        if ids is None:
            if len(self._cache) >= ID_CACHE_SIZE:
                self._cache.clear()
            ids = self._cache[token] = self._ids(token)
        return ids

    def batch(self, batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids ``(batch, time, width)`` (0 at padding) and mask ``(batch, time)`` of token lists;
        the sentence markers are added by the biLM, as for the byte scheme."""
        for i, sentence in enumerate(batch):
            if isinstance(sentence, str):
                raise TypeError(f"batch[{i}] is a string; pass token lists (use tokenize(line))")
        n_time = max((len(s) for s in batch), default=0)
        ids = np.zeros((len(batch), n_time, self.width), dtype=np.int64)
        mask = np.zeros((len(batch), n_time), dtype=bool)
        for i, sentence in enumerate(batch):
            for t, token in enumerate(sentence):
                ids[i, t] = self.token_ids(token)
            mask[i, :len(sentence)] = True
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def fingerprint(self) -> str:
        """SHA-256 of the dictionaries: with the weights, what decides a token's vector."""
        payload = json.dumps(self.to_payload(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_payload(self) -> dict:
        """Plain data (strings and ints) for a native checkpoint."""
        return {"chars": self.chars, "words": self.words, "max_chars": self.max_chars}

    @classmethod
    def from_payload(cls, payload: dict, where: str) -> "CharacterDictionary":
        if not isinstance(payload, dict) or not isinstance(payload.get("chars"), dict) or "max_chars" not in payload:
            raise DictionaryError(f"{where}: the character dictionary is missing or malformed")
        return cls(payload["chars"], payload.get("words"), payload["max_chars"],
                   where_chars=f"{where} (characters)", where_words=f"{where} (words)")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CharacterDictionary) and self.max_chars == other.max_chars
                and self.chars == other.chars and self.words == other.words)

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        words = f"{len(self.words)} words" if self.words is not None else "no words"
        return f"CharacterDictionary({len(self.chars)} characters, {words}, max_chars={self.max_chars})"


__all__ = ["BOS_TOKEN", "CharacterDictionary", "DictionaryError", "EOS_TOKEN", "SPECIAL_CHARS", "SPECIAL_WORDS",
           "STRIPPED_TOKEN", "format_dictionary", "parse_dictionary"]
