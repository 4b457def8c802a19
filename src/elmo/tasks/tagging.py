"""Sequence tagging (NER, POS, chunking): the data, a BiLSTM-CRF with ELMo, span F1 or accuracy.

Data (readers; every tagged file comes back in IOB2 where its tags are spans):

==========================  ==========================  =====================================
dataset kind                data set                    reader
==========================  ==========================  =====================================
``conll2003``, ``wnut17``   CoNLL-2003, WNUT-17 (NER)   :func:`read_conll_ner` (BIO tags)
``conll2000``               CoNLL-2000 (chunking)       :func:`read_conll2000_chunks` (BIO tags)
``ud-ewt``                  UD English-EWT (POS)        :func:`read_conllu_upos` (UPOS tags)
``ptb-sample``              PTB WSJ sample (NLTK)       :func:`read_ptb_sample_pos` (Penn POS tags)
==========================  ==========================  =====================================

Each sentence goes through :func:`iob1_to_iob2`, which turns IOB1 into IOB2 and leaves IOB2 as it
is, so either scheme reads the same way (and a stray ``I-X`` that follows a span of another
type starts a new span, as conlleval counts it).

The model is a simplified version of the tagger of Peters et al. (2018), section 5 (after Peters
et al. 2017 and Lample et al. 2016)::

    [word vector; char CNN; ELMo_input] -> dropout -> BiLSTM -> dropout -> [h; ELMo_output]
        -> linear -> tag scores -> CRF (or a per-token softmax)

ELMo enters only through :class:`~elmo.tasks.integration.TaskElmo`, so with ELMo disabled the
model is exactly the baseline. A batch is a :class:`TaggingBatch`: the sentences' tensors
(:class:`~elmo.tasks.base.TokenBatch`) and, for training, ``tags`` ``(batch, time)`` (0 at
padding).

The metric is ``span_f1`` (seqeval's span F1 on the IOB2 tags) or ``accuracy`` (per token). Tags
the training data never had count as missed, unless most of a file's tags are unknown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elmo.checks import check_count
from elmo.model.dropout import Dropout
from elmo.tasks.base import (
    Evaluation,
    ModelSettings,
    Split,
    Task,
    TokenBatch,
    accuracy,
    token_batch,
)
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode
from elmo.tasks.readers import DatasetError, PathLike, numbered_lines, zip_member_lines


@dataclass
class TaggedSentence:
    """A sentence with one tag per token (NER, chunking, POS)."""

    tokens: list[str]
    tags: list[str]



# ---------------------------------------------------------------------------------------------
# Column-tagged files: CoNLL-2003, WNUT-17, CoNLL-2000

_BIO_TAG = re.compile(r"O|[BI]-\S+")


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """The IOB2 (BIO) form of one sentence's tags, in which every span starts with ``B-``.

    An ``I-X`` that starts a span (first tag, after ``O``, or after a tag of another type)
    becomes ``B-X``; everything else is kept. IOB2 input comes back unchanged. Raises
    ``ValueError`` for a tag that is not ``O``, ``B-X`` or ``I-X``.
    """
    result = []
    previous = "O"
    for i, tag in enumerate(tags):
        if not _BIO_TAG.fullmatch(tag):
            raise ValueError(f"tag {i}: {tag!r} is not O, B-TYPE or I-TYPE")
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        result.append(tag)
        previous = tag
    return result


def _read_column_tagged(lines: Iterator[tuple[int, str]], where: PathLike) -> list[TaggedSentence]:
    """Token per line, columns separated by tabs (if the line has any) or single spaces; first
    column the token, last the tag; blank lines end sentences; ``-DOCSTART-`` lines are skipped.
    Every token line must have as many columns as the file's first one."""
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    n_columns = 0
    columns_line = 0

    def finish() -> None:
        if tokens:
            sentences.append(TaggedSentence(tokens=list(tokens), tags=iob1_to_iob2(tags)))
            tokens.clear()
            tags.clear()

    for number, line in lines:
        if not line.strip():
            finish()
            continue
        columns = line.split("\t") if "\t" in line else line.split(" ")
        if columns[0] == "-DOCSTART-":
            finish()
            continue
        if not n_columns:
            if len(columns) < 2:
                raise DatasetError(where, number, f"expected a token and a tag, found {len(columns)} column")
            n_columns, columns_line = len(columns), number
        elif len(columns) != n_columns:
            raise DatasetError(where, number, f"{len(columns)} columns, but line {columns_line} has {n_columns}")
        for i, column in enumerate(columns, start=1):
            if not column:
                raise DatasetError(where, number, f"column {i} is empty")
        tag = columns[-1]
        if not _BIO_TAG.fullmatch(tag):
            raise DatasetError(where, number, f"invalid tag {tag!r} (expected O, B-TYPE or I-TYPE)")
        tokens.append(columns[0])
        tags.append(tag)
    finish()
    if not sentences:
        raise DatasetError(where, 1, "no sentences")
    return sentences


def read_conll_ner(path: PathLike) -> list[TaggedSentence]:
    """CoNLL-2003 (``token POS chunk NER``) or WNUT-17 (``token<TAB>tag``) NER data.

    The first column is the token and the last the tag, returned in IOB2. Blank (or
    whitespace-only) lines separate sentences; ``-DOCSTART-`` lines are skipped.
    """
    return _read_column_tagged(numbered_lines(path), path)


def read_conll2000_chunks(zip_path: PathLike, split: str) -> list[TaggedSentence]:
    """CoNLL-2000 chunking (``token POS chunk``), split ``"train"`` or ``"test"``, read from NLTK's
    ``conll2000.zip`` (members ``conll2000/train.txt``, ``conll2000/test.txt``) without NLTK.

    Tags are the chunk column, in IOB2. Errors name the member as ``{zip_path}/{member}``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"conll2000: split must be 'train' or 'test', got {split!r}")
    member = f"conll2000/{split}.txt"
    return _read_column_tagged(zip_member_lines(zip_path, member), f"{os.fspath(zip_path)}/{member}")



# ---------------------------------------------------------------------------------------------
# Penn Treebank POS: NLTK's 10% sample of the WSJ

# NLTK's sample has files wsj_0001 .. wsj_0199 (3,914 sentences). A fixed split by file, at the
# file boundaries nearest 80% and 90% of the sentences: wsj_0001-0142 for training (3,167
# sentences), wsj_0143-0172 for development (358), wsj_0173-0199 for test (389).
PTB_SAMPLE_SPLITS = {"train": range(1, 143), "dev": range(143, 173), "test": range(173, 200)}
_PREterminal = re.compile(r"\(([^\s()]+) ([^\s()]+)\)")


def _ptb_sentences(lines: Iterator[tuple[int, str]], where: str) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """``(first line, [(word, tag)])`` of each top-level tree of a bracketed ``.mrg`` file."""
    depth, start, text = 0, 0, []
    for number, line in lines:
        if not line.strip():
            continue
        if depth == 0:
            start, text = number, []
        text.append(line)
        depth += line.count("(") - line.count(")")
        if depth < 0:
            raise DatasetError(where, number, "')' closes more brackets than were opened")
        if depth == 0:
            yield start, _PREterminal.findall(" ".join(text))
    if depth:
        raise DatasetError(where, start, "a tree is not closed before the end of the file")


def read_ptb_sample_pos(zip_path: PathLike, split: str) -> list[TaggedSentence]:
    """Part-of-speech tags of NLTK's Penn Treebank sample (``treebank.zip``, the WSJ files'
    ``combined/*.mrg`` trees), split ``"train"``, ``"dev"`` or ``"test"`` by file
    (:data:`PTB_SAMPLE_SPLITS`). Empty elements (tag ``-NONE-``: traces, null complementisers)
    are not words and are left out. Errors name ``{zip_path}/{member}`` and the line."""
    if split not in PTB_SAMPLE_SPLITS:
        raise ValueError(f"ptb-sample: split must be one of {', '.join(PTB_SAMPLE_SPLITS)}, got {split!r}")
    sentences = []
    for number in PTB_SAMPLE_SPLITS[split]:
        member = f"treebank/combined/wsj_{number:04d}.mrg"
        where = f"{os.fspath(zip_path)}/{member}"
        for line, leaves in _ptb_sentences(zip_member_lines(zip_path, member), where):
            words = [(word, tag) for tag, word in leaves if tag != "-NONE-"]
            if not words:
                raise DatasetError(where, line, "a tree without words")
            sentences.append(TaggedSentence(tokens=[w for w, _ in words], tags=[t for _, t in words]))
    return sentences


# ---------------------------------------------------------------------------------------------
# CoNLL-U: UD English-EWT

UPOS_TAGS = frozenset({
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
    "PUNCT", "SCONJ", "SYM", "VERB", "X",
})


def read_conllu_upos(path: PathLike) -> list[TaggedSentence]:
    """Words and UPOS tags of a CoNLL-U file (plain or ``.gz``).

    Multiword-token ranges (``3-4``) and empty nodes (``3.1``) are skipped, so the tokens are
    the syntactic words. Lines are split on tabs only, as the CoNLL-U spec says (UD v2 allows
    spaces inside FORM); the ID column is parsed by the ``conllu`` library. Word IDs must run
    1, 2, 3, ... in each sentence, and UPOS must be one of the 17 universal tags.
    """
    from conllu.exceptions import ParseException
    from conllu.parser import parse_id_value

    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    for number, line in numbered_lines(path):
        if not line.strip():
            if tokens:
                sentences.append(TaggedSentence(tokens=tokens, tags=tags))
                tokens, tags = [], []
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise DatasetError(path, number, f"expected 10 tab-separated columns, found {len(columns)}")
        try:
            token_id = parse_id_value(columns[0])
        except ParseException:
            token_id = None
        if token_id is None:
            raise DatasetError(path, number, f"invalid ID {columns[0]!r}")
        if isinstance(token_id, tuple):  # (3, "-", 4): multiword token; (3, ".", 1): empty node
            continue
        if token_id != len(tokens) + 1:
            raise DatasetError(path, number, f"word ID {token_id}, expected {len(tokens) + 1}")
        form, upos = columns[1], columns[3]
        if not form:
            raise DatasetError(path, number, "empty FORM")
        if upos not in UPOS_TAGS:
            raise DatasetError(path, number, f"UPOS {upos!r} is not a universal POS tag")
        tokens.append(form)
        tags.append(upos)
    if tokens:
        sentences.append(TaggedSentence(tokens=tokens, tags=tags))
    if not sentences:
        raise DatasetError(path, 1, "no sentences")
    return sentences



# ---------------------------------------------------------------------------------------------
# The model

class CRF(nn.Module):
    """A linear-chain conditional random field over ``n_tags`` tags.

    The score of tags ``y_1..y_n`` for emissions ``e`` is
    ``start[y_1] + sum_t e_t[y_t] + sum_{t>1} transitions[y_{t-1}, y_t] + end[y_n]``, and
    ``p(y | x)`` is its softmax over all ``n_tags ** n`` tag sequences.

    All methods take left-aligned rows: ``mask`` ``(batch, time)`` is True for the first
    ``length`` positions of each row and False after them.
    """

    def __init__(self, n_tags: int):
        super().__init__()
        self.n_tags = n_tags
        # transitions[i, j]: score of tag i followed by tag j.
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log p(tags | emissions)`` per row.

        ``emissions``: ``(batch, time, n_tags)``; ``tags``: ``(batch, time)`` long; ``mask``:
        ``(batch, time)`` bool -> ``(batch,)``. Rows of length 0 get 0.
        """
        batch, time, _ = emissions.shape
        if time == 0:
            return emissions.new_zeros(batch)
        mask = mask.bool()
        lengths = mask.sum(dim=1)
        score = self._path_score(emissions, tags, mask, lengths)
        log_partition = self._log_partition(emissions, mask)
        return torch.where(lengths > 0, score - log_partition, torch.zeros_like(score))

    def _path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor,
                    lengths: torch.Tensor) -> torch.Tensor:
        """The unnormalised score ``(batch,)`` of the given tag sequences."""
        keep = mask.to(emissions.dtype)
        # Emission of each position's tag: (batch, time).
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)
        score = (emitted * keep).sum(dim=1)
        score = score + self.start[tags[:, 0]]
        # Transition from position t-1 into position t counts when t is a real token.
        transition = self.transitions[tags[:, :-1], tags[:, 1:]]  # (batch, time - 1)
        score = score + (transition * keep[:, 1:]).sum(dim=1)
        last = (lengths - 1).clamp(min=0)
        last_tags = tags.gather(1, last.unsqueeze(1)).squeeze(1)
        return score + self.end[last_tags]

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log sum_y exp(score(y))`` ``(batch,)`` by the forward algorithm."""
        # alpha[b, j]: log-sum of the scores of all prefixes ending in tag j at the current step.
        alpha = self.start.unsqueeze(0) + emissions[:, 0]  # (batch, n_tags)
        for t in range(1, emissions.shape[1]):
            # (batch, previous tag i, next tag j)
            candidates = alpha.unsqueeze(2) + self.transitions.unsqueeze(0) + emissions[:, t].unsqueeze(1)
            next_alpha = torch.logsumexp(candidates, dim=1)
            # Past the end of a row alpha stays as it was at its last token.
            alpha = torch.where(mask[:, t].unsqueeze(1), next_alpha, alpha)
        return torch.logsumexp(alpha + self.end.unsqueeze(0), dim=1)

    @torch.no_grad()
    def viterbi_decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The highest-scoring tag sequence of each row (``mask.sum(1)`` tags long).

        ``emissions``: ``(batch, time, n_tags)``; ``mask``: ``(batch, time)`` bool.
        """
        batch, time, _ = emissions.shape
        mask = mask.bool()
        lengths = mask.sum(dim=1).tolist()
        if time == 0:
            return [[] for _ in range(batch)]
        # best[b, j]: score of the best prefix ending in tag j; backpointers[t - 1][b, j]: the
        # previous tag on that prefix at step t.
        best = self.start.unsqueeze(0) + emissions[:, 0]
        backpointers = []
        for t in range(1, time):
            candidates = best.unsqueeze(2) + self.transitions.unsqueeze(0)  # (batch, i, j)
            top, previous = candidates.max(dim=1)
            best = torch.where(mask[:, t].unsqueeze(1), top + emissions[:, t], best)
            backpointers.append(previous)
        final = best + self.end.unsqueeze(0)

        paths = []
        for row, length in enumerate(lengths):
            if length == 0:
                paths.append([])
                continue
            tag = int(final[row].argmax())
            path = [tag]
            for t in range(length - 1, 0, -1):
                tag = int(backpointers[t - 1][row, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


@dataclass
class TaggingBatch(TokenBatch):
    """Sentences (see :class:`~elmo.tasks.base.TokenBatch`) and their gold tag ids ``tags``
    ``(batch, time)`` long, 0 at padding (None when predicting)."""

    tags: torch.Tensor | None = None


@dataclass
class TaggingSettings(ModelSettings):
    """``[model]`` of a tagging run: ``layers`` stacked BiLSTM layers; ``crf=False`` scores each
    token on its own with a softmax."""

    layers: int = 1
    crf: bool = True

    def __post_init__(self):
        super().__post_init__()
        check_count(self.layers, "model.layers")


class Tagger(nn.Module):
    """BiLSTM(-CRF) sequence tagger with optional ELMo at its input and/or output.

    ``features``: the token's word vector and char CNN; ``elmo``: the task's mixes (disabled for
    the baseline); ``hidden``: LSTM size per direction; ``layers``: stacked BiLSTM layers;
    ``dropout``: before and after the BiLSTM (and between its layers); ``crf=False`` scores
    each token independently with a softmax.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_tags: int, *, hidden: int = TaggingSettings.hidden,
                 layers: int = TaggingSettings.layers, dropout: float = TaggingSettings.dropout,
                 crf: bool = TaggingSettings.crf):
        super().__init__()
        self.features = features
        self.elmo = elmo
        self.n_tags = n_tags
        self.input_dropout = Dropout(dropout)
        self.encoder = nn.LSTM(features.output_dim + elmo.input_dim, hidden, num_layers=layers,
                               bidirectional=True, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.output_dropout = Dropout(dropout)
        self.projection = nn.Linear(2 * hidden + elmo.output_dim, n_tags)
        self.crf = CRF(n_tags) if crf else None

    def scores(self, batch: TokenBatch) -> torch.Tensor:
        """Unnormalised tag scores ``(batch, time, n_tags)``."""
        mask = batch.mask.bool()
        layers = batch.elmo
        inputs = concat(self.features(batch.words, batch.chars), self.elmo.for_input(layers, mask))
        inputs = self.input_dropout(inputs)

        # Packed, so padding stays out of both directions; scores at padding are masked anyway.
        encoded = self.output_dropout(encode(self.encoder, inputs, mask))

        encoded = concat(encoded, self.elmo.for_output(layers, mask))
        return self.projection(encoded)

    def loss(self, batch: TaggingBatch) -> torch.Tensor:
        """Scalar training loss: mean negative log-likelihood per sentence (CRF) or mean cross
        entropy per real token (softmax), plus the ELMo mixes' L2 penalty."""
        scores = self.scores(batch)
        mask = batch.mask.bool()
        tags = batch.tags
        if self.crf is not None:
            loss = -self.crf.log_likelihood(scores, tags, mask).mean()
        else:
            loss = nn.functional.cross_entropy(scores[mask], tags[mask])
        return loss + self.elmo.l2_penalty().to(loss.device)

    @torch.no_grad()
    def predict(self, batch: TokenBatch) -> list[list[int]]:
        """Tag ids of each sentence, without padding (Viterbi with the CRF, else argmax).
        Call ``eval()`` first for deterministic output."""
        scores = self.scores(batch)
        mask = batch.mask.bool()
        if self.crf is not None:
            return self.crf.viterbi_decode(scores, mask)
        best = scores.argmax(dim=-1)
        return [best[row, :length].tolist() for row, length in enumerate(mask.sum(dim=1).tolist())]


# ---------------------------------------------------------------------------------------------
# The task

class Tagging(Task):
    """Sequence tagging: one label per token, scored by span F1 or token accuracy."""

    name = "tagging"
    metrics = ("span_f1", "accuracy")
    Settings = TaggingSettings
    readers = {"conll2003": (read_conll_ner, False), "wnut17": (read_conll_ner, False),
               "ud-ewt": (read_conllu_upos, False), "conll2000": (read_conll2000_chunks, True),
               "ptb-sample": (read_ptb_sample_pos, True)}

    def split(self, examples: list[TaggedSentence]) -> Split:
        """One sentence per example; example ``i`` is row ``i`` of the layers."""
        return Split(examples, [e.tokens for e in examples])

    def label_names(self, examples: Sequence[TaggedSentence]) -> list[str]:
        return sorted({t for e in examples for t in e.tags})

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> TaggingBatch:
        examples = [split.examples[i] for i in indices]
        tokens = token_batch([e.tokens for e in examples], vocab, split.layers, list(indices))
        tags = torch.zeros(tokens.mask.shape, dtype=torch.long)
        for row, e in enumerate(examples):
            tags[row, :len(e.tags)] = torch.tensor([labels.get(t, 0) for t in e.tags], dtype=torch.long)
        return TaggingBatch(**tokens.tensors, tags=tags)

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> Tagger:
        s = self.settings
        return Tagger(features, elmo, len(labels), hidden=s.hidden, layers=s.layers, dropout=s.dropout, crf=s.crf)

    def decode(self, predicted: list[list[int]], split: Split, indices: Sequence[int],
               names: Sequence[str]) -> list[list[str]]:
        return [[names[t] for t in tags] for tags in predicted]

    def evaluate(self, examples: Sequence[TaggedSentence], predictions: list[list[str]]) -> Evaluation:
        """Span F1 (seqeval, on IOB2 tags) or the accuracy per token."""
        gold = [e.tags for e in examples]
        if self.metric == "span_f1":
            from seqeval.metrics import f1_score

            return Evaluation(self.metric, float(f1_score(gold, predictions)))
        return Evaluation(self.metric, accuracy([(g, p) for gs, ps in zip(gold, predictions) for g, p in zip(gs, ps)]))

    def tolerates_unseen_labels(self, unseen: set[str], gold: set[str]) -> bool:
        """A tag that training never saw is a real part of some test sets (CoNLL-2000's test set
        has ``I-LST``, its training set not): it counts as missed, unless more than half of the
        file's tags are unknown to the model (the wrong data or model)."""
        return len(unseen) * 2 <= len(gold)


__all__ = ["CRF", "PTB_SAMPLE_SPLITS", "TaggedSentence", "Tagger", "Tagging", "TaggingBatch", "TaggingSettings",
           "UPOS_TAGS", "iob1_to_iob2", "read_conll2000_chunks", "read_conll_ner", "read_conllu_upos",
           "read_ptb_sample_pos"]
