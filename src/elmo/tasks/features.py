"""What a task model sees of each token: word vectors, its own character CNN, and ELMo.

The task side is deliberately small and classic (Peters et al. 2018, section 5): pretrained GloVe
word vectors plus a small character CNN of the task's own, to which ELMo is concatenated
(:mod:`elmo.tasks.integration`). Everything here works on padded batches:

* ``words``: ``(batch, time)`` ids into a :class:`WordVocab` (0 = padding, 1 = unknown);
* ``chars``: ``(batch, time, max_chars)`` ids, the UTF-8 bytes + 1 (0 = padding);
* ``mask``: ``(batch, time)``, True at real tokens.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import nn

from elmo.fileio import read_lines

PAD, UNK = 0, 1
TASK_MAX_CHARS = 20  # longer words keep their first 20 bytes: the task CNN only needs affixes


class WordVocab:
    """Word -> id for the task's word embedding. Lookup lowercases, as GloVe 6B is uncased."""

    def __init__(self, words: Sequence[str]):
        self.words = ["<pad>", "<unk>", *words]
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("WordVocab: duplicate words")

    def __len__(self) -> int:
        return len(self.words)

    def id(self, word: str) -> int:
        return self.index.get(word.lower(), UNK)

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1,
              also: Iterable[str] = ()) -> "WordVocab":
        """Every lowercased training word seen ``min_count`` times, plus the words in ``also``
        (for example every word of the dev and test sets that has a pretrained vector)."""
        counts = Counter(w.lower() for s in sentences for w in s)
        words = sorted(w for w, c in counts.items() if c >= min_count)
        seen = set(words)
        extra = sorted({w.lower() for w in also} - seen)
        return cls(words + extra)

    def extended(self, words: Iterable[str]) -> "WordVocab":
        """This vocabulary with ``words`` (lowercased, those not in it yet, sorted) appended: every
        old word keeps its id, so an embedding table grows by rows at the end."""
        extra = sorted({w.lower() for w in words} - self.index.keys())
        return WordVocab([*self.words[2:], *extra])


def vector_words(path: str | os.PathLike) -> set[str]:
    """The words that have a vector in a GloVe text file (plain or ``.gz``)."""
    return {line.partition(" ")[0] for line in read_lines(path)}


def load_vectors(path: str | os.PathLike, words: Iterable[str]) -> tuple[dict[str, np.ndarray], int]:
    """The vectors of ``words`` in a GloVe text file (plain or ``.gz``), and the file's dimension.

    Words are matched exactly as the file spells them (GloVe 6B is lowercase, as
    :meth:`WordVocab.id` looks words up). A malformed line among those read raises ValueError
    naming the file and line; so does an empty file.
    """
    wanted = set(words)
    vectors: dict[str, np.ndarray] = {}
    dim = None
    for number, line in enumerate(read_lines(path), start=1):
        word, _, rest = line.partition(" ")
        if word not in wanted:
            if dim is None:
                dim = len(rest.split())
            continue
        try:
            values = np.array(rest.split(), dtype=np.float32)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: not a word followed by numbers ({e})") from None
        if dim is None:
            dim = len(values)
        if len(values) != dim:
            raise ValueError(f"{path}:{number}: {len(values)} values, but earlier lines have {dim}")
        vectors[word] = values
    if dim is None:
        raise ValueError(f"{path}:1: empty vectors file")
    return vectors, dim


def load_glove(path: str | os.PathLike, vocab: WordVocab, *, seed: int = 0) -> tuple[torch.Tensor, int]:
    """An embedding matrix ``(len(vocab), dim)`` from a GloVe text file (plain or ``.gz``).

    Words without a vector get small random ones (padding gets zeros). Returns the matrix and the
    number of vocabulary words found in the file. A malformed line raises ValueError naming the
    file and line.
    """
    vectors, dim = load_vectors(path, vocab.index)
    generator = np.random.default_rng(seed)
    matrix = generator.normal(0.0, 0.1, size=(len(vocab), dim)).astype(np.float32)
    matrix[PAD] = 0.0
    for word, values in vectors.items():
        matrix[vocab.index[word]] = values
    return torch.from_numpy(matrix), len(vectors)


def char_ids(sentences: Sequence[Sequence[str]], time: int | None = None) -> torch.Tensor:
    """``(batch, time, TASK_MAX_CHARS)`` byte ids (+1; 0 is padding) for the task's CNN."""
    time = time if time is not None else max((len(s) for s in sentences), default=0)
    # Filled in numpy: a tensor built per word cost about 4x more, on every training batch.
    ids = np.zeros((len(sentences), time, TASK_MAX_CHARS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        for col, word in enumerate(sentence[:time]):
            data = word.encode("utf-8")[:TASK_MAX_CHARS]
            ids[row, col, :len(data)] = np.frombuffer(data, dtype=np.uint8)
            ids[row, col, :len(data)] += 1
    return torch.from_numpy(ids)


def word_ids(sentences: Sequence[Sequence[str]], vocab: WordVocab, time: int | None = None) -> torch.Tensor:
    """``(batch, time)`` word ids, padded with 0."""
    time = time if time is not None else max((len(s) for s in sentences), default=0)
    ids = torch.zeros(len(sentences), time, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        ids[row, :len(sentence[:time])] = torch.tensor([vocab.id(w) for w in sentence[:time]], dtype=torch.long)
    return ids


class CharCNN(nn.Module):
    """The task's own character CNN: byte embeddings -> one convolution -> max over the word."""

    def __init__(self, embedding_dim: int = 16, filters: int = 50, width: int = 3):
        super().__init__()
        self.embedding = nn.Embedding(257, embedding_dim, padding_idx=0)
        self.conv = nn.Conv1d(embedding_dim, filters, width, padding=width // 2)
        self.output_dim = filters

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """``chars``: ``(batch, time, max_chars)`` -> ``(batch, time, filters)``; zeros at
        padding tokens and empty words.

        The same values as :meth:`forward_every_slot`, which is the specification, computed only
        for the real words and only as wide as the batch's longest one. Padding tokens are most
        of a randomly ordered batch (about 64% on CoNLL-2003), so this makes the CNN about 4x
        faster and a tagger's training step about a fifth faster. The zero embedding of padding
        bytes equals the convolution's own zero padding, so trimming them changes no output.
        """
        batch, time, n_chars = chars.shape
        flat = chars.reshape(batch * time, n_chars)
        lengths = (flat != 0).sum(dim=1)  # bytes come first in each slot, then 0s
        real = (lengths > 0).nonzero().squeeze(1)
        if real.numel() == 0:
            return self.conv.weight.new_zeros(batch, time, self.output_dim)
        words = flat[real, :int(lengths.max())]
        hidden = self.conv(self.embedding(words).transpose(1, 2))  # (real words, filters, width)
        hidden = hidden.masked_fill((words == 0).unsqueeze(1), float("-inf"))
        pooled = torch.relu(hidden.max(dim=2).values)
        every = pooled.new_zeros(batch * time, self.output_dim).index_copy(0, real, pooled)
        return every.reshape(batch, time, -1)

    def forward_every_slot(self, chars: torch.Tensor) -> torch.Tensor:
        """The plain computation that :meth:`forward` must equal: the CNN over every slot of
        ``chars`` ``(batch, time, max_chars)``, padding included -> ``(batch, time, filters)``."""
        batch, time, n_chars = chars.shape
        flat = chars.reshape(batch * time, n_chars)
        hidden = self.conv(self.embedding(flat).transpose(1, 2))  # (words, filters, max_chars)
        # Padding slots must not win the max.
        hidden = hidden.masked_fill((flat == 0).unsqueeze(1), float("-inf"))
        pooled = hidden.max(dim=2).values
        pooled = torch.where(torch.isfinite(pooled), pooled, torch.zeros_like(pooled))  # empty words
        return torch.relu(pooled).reshape(batch, time, -1)


class TokenFeatures(nn.Module):
    """``[word vector; char CNN]`` per token: the context-independent input of a task model.

    ``embeddings``: pretrained ``(vocab, dim)`` matrix, kept frozen when ``freeze`` (the
    usual choice with GloVe and small data); ``char_filters=0`` leaves the CNN out.
    """

    def __init__(self, embeddings: torch.Tensor, *, freeze: bool = True, char_filters: int = 50):
        super().__init__()
        self.words = nn.Embedding.from_pretrained(embeddings, freeze=freeze, padding_idx=PAD)
        self.chars = CharCNN(filters=char_filters) if char_filters > 0 else None
        self.output_dim = embeddings.shape[1] + (char_filters if char_filters > 0 else 0)

    def forward(self, words: torch.Tensor, chars: torch.Tensor) -> torch.Tensor:
        """``words``: ``(batch, time)``, ``chars``: ``(batch, time, max_chars)`` ->
        ``(batch, time, output_dim)``."""
        parts = [self.words(words)]
        if self.chars is not None:
            parts.append(self.chars(chars))
        return torch.cat(parts, dim=-1)

    def add_words(self, vectors: torch.Tensor) -> None:
        """Append ``vectors`` ``(n, dim)`` as new rows of the word embedding: the ids that
        :meth:`WordVocab.extended` gives new words. The rows already there (trained or not) are
        kept as they are, and whether the embedding trains stays as it was."""
        old = self.words.weight
        if vectors.dim() != 2 or vectors.shape[1] != old.shape[1]:
            raise ValueError(f"add_words: expected vectors of shape (n, {old.shape[1]}), got {tuple(vectors.shape)}")
        weight = torch.cat([old.detach(), vectors.to(dtype=old.dtype, device=old.device)])
        self.words = nn.Embedding.from_pretrained(weight, freeze=not old.requires_grad, padding_idx=PAD)


__all__ = ["CharCNN", "PAD", "TASK_MAX_CHARS", "TokenFeatures", "UNK", "WordVocab", "char_ids", "load_glove",
           "load_vectors", "vector_words", "word_ids"]
