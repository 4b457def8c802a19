"""Coreference resolution: the end-to-end span-ranking model of Lee et al. (2017) and the CoNLL metrics.

The model, in a size that trains on a laptop CPU, for one document at a time::

    per sentence: [word vector; char CNN; ELMo_input] -> dropout -> BiLSTM -> [h; ELMo_output] = x*
    every span (i, j) of at most max_span_width tokens within a sentence:
        g = [x*_i; x*_j; attention-weighted sum of the span's inputs x (its "head"); width feature]
    mention score s_m(g) by a feed-forward net; the top spans_per_word * words spans are kept
    for each kept span, its max_antecedents nearest kept spans before it are candidates:
        s(i, j) = s_m(i) + s_m(j) + FFNN([g_i; g_j; g_i * g_j; distance feature]),  s(i, dummy) = 0
    loss: -log of the probability mass on the gold antecedents (the dummy where there is none)

Clusters are read off the argmax antecedents. The biLM layers are computed sentence by
sentence, as the paper did; the task's BiLSTM also runs per sentence, as Lee et al.'s did.
Lee et al. had no speaker or genre here (fiction has neither annotated). One addition,
off by default: ``mention_loss`` > 0 adds a binary cross entropy of every span's mention score
against the gold mentions (LitBank annotates every mention, singletons included), and a kept
span with a positive mention score and no antecedent is then output as a singleton, as the
LitBank gold clusters contain them.

Data: CoNLL-2012 coreference documents (dataset kind ``conll2012-coref``, one file;
``litbank``, a folder of LitBank's files split 80/10/10 by name) as :class:`CorefDocument`, and
GAP's pronoun examples (``gap``, :class:`GapExample`) for evaluation only: GAP is scored as its
own scorer scores it (:func:`gap_scores`).

The scores are MUC, B-cubed and CEAF-e (entity-based) precision, recall and F1, and the CoNLL
F1, their average. They come from ``scorch``, a maintained reimplementation of the CoNLL-2012
reference scorer. Its results are checked against hand-computed cases in
``tests/test_task_coref.py``, singletons included.

A cluster is a collection of mentions, and a mention is any hashable value: here ``(start,
end)`` token positions within one document. Mentions of different documents must not collide,
so :func:`corpus_clusters` tags each with its document's index before whole-corpus scoring.
"""


from __future__ import annotations

import math
import os
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from elmo.checks import check_count, check_number
from elmo.model.dropout import Dropout
from elmo.tasks.base import (
    Evaluation,
    ModelSettings,
    Prepared,
    Split,
    Task,
    TokenBatch,
    token_batch,
)
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode, masked_softmax
from elmo.tasks.readers import (
    DatasetError,
    PathLike,
    conll2012_blocks,
    numbered_lines,
    tokenize_with_offsets,
)

# ---------------------------------------------------------------------------------------------
# Readers: CoNLL-2012 documents, LitBank, GAP

# ---------------------------------------------------------------------------------------------
# Coreference: CoNLL-2012 documents

@dataclass
class CorefDocument:
    """A document's sentences and its gold mention clusters. A mention is ``(start, end)``,
    inclusive token positions counted over the whole document; a cluster of one mention is a
    singleton. ``name`` is the ``#begin document`` name with its part."""

    name: str
    sentences: list[list[str]]
    clusters: list[list[tuple[int, int]]]

    @property
    def tokens(self) -> list[str]:
        return [t for sentence in self.sentences for t in sentence]


_COREF_PART = re.compile(r"\((\d+)\)|\((\d+)|(\d+)\)")


def read_conll2012_coref(path: PathLike) -> list[CorefDocument]:
    """CoNLL-2012 coreference documents: ``#begin document (NAME); part N`` ... ``#end
    document``, one token per line (the word in column 4, the coreference column last), blank
    lines between sentences. The coreference column is ``_`` or ``-`` for no mention, or
    ``|``-joined parts: ``(7)`` a one-token mention, ``(7`` a mention opening and ``7)`` one
    closing (the innermost open mention of that cluster), so nested and multi-token mentions
    of one cluster both work. Anything malformed (a part that is not one of those, a mention
    closed that was never opened or left open at the end of the document, a token outside a
    document, a line with fewer than 4 columns) raises :class:`DatasetError` with the line. The
    file's lines are grouped by :func:`~elmo.tasks.readers.conll2012_blocks`, as SRL's are."""
    documents: list[CorefDocument] = []
    current: CorefDocument | None = None
    open_mentions: dict[int, list[tuple[int, int]]] = {}  # cluster -> [(start, line)] stack
    mentions: dict[int, list[tuple[int, int]]] = {}
    position = 0
    for kind, number, block in conll2012_blocks(path):
        if kind == "begin":
            if current is not None:
                raise DatasetError(path, number, f"a document begins inside {current.name}, which has no #end document")
            match = re.match(r"#begin document \(?([^)]*)\)?;?\s*(?:part\s+(\d+))?", block)
            name = match.group(1) + (f"/part-{int(match.group(2))}" if match.group(2) else "")
            current, position, open_mentions, mentions = CorefDocument(name, [], []), 0, {}, {}
        elif kind == "end":
            if current is None:
                raise DatasetError(path, number, "#end document without #begin document")
            for cluster, stack in open_mentions.items():
                if stack:
                    raise DatasetError(path, stack[-1][1], f"a mention of cluster {cluster} opens here and is never "
                                                           f"closed before the end of {current.name}")
            current.clusters = [sorted(spans) for _, spans in sorted(mentions.items())]
            documents.append(current)
            current = None
        elif kind == "sentence":
            if current is None:
                raise DatasetError(path, number, "a token line outside any #begin document ... #end document")
            sentence = []
            for number, columns in block:
                if len(columns) < 4:
                    raise DatasetError(path, number, f"{len(columns)} columns, expected at least 4 (document, part, "
                                                     f"token number, word, ..., coreference)")
                _read_mentions(path, number, columns[-1], position, open_mentions, mentions)
                sentence.append(columns[3])
                position += 1
            current.sentences.append(sentence)
        elif current is not None:  # the end of the file inside a document
            raise DatasetError(path, number, f"{current.name} has no #end document")
    if not documents:
        raise DatasetError(path, 1, "no documents")
    return documents


def _read_mentions(path: PathLike, number: int, cell: str, position: int, open_mentions: dict, mentions: dict) -> None:
    """Read one token's coreference cell (``_``, ``-``, or ``|``-joined ``(N)``, ``(N``, ``N)``)
    into the document's open mentions and finished mentions; ``position`` is the token's."""
    if cell in ("_", "-"):
        return
    for part in cell.split("|"):
        match = _COREF_PART.fullmatch(part)
        if match is None:
            raise DatasetError(path, number, f"coreference column: {part!r} is not (N), (N or N)")
        single, opening, closing = match.groups()
        if single is not None:
            mentions.setdefault(int(single), []).append((position, position))
        elif opening is not None:
            open_mentions.setdefault(int(opening), []).append((position, number))
        else:
            stack = open_mentions.get(int(closing))
            if not stack:
                raise DatasetError(path, number, f"coreference column: cluster {closing} closes a mention "
                                                 f"that was never opened")
            start, _ = stack.pop()
            mentions.setdefault(int(closing), []).append((start, position))


def litbank_split(names: Sequence[str]) -> dict[str, list[str]]:
    """A fixed train/dev/test split of LitBank's files: sorted by name, the first 80% train, the
    next 10% dev, the last 10% test (80/10/10 of its 100 files). The same names always give the
    same split, whatever order they come in."""
    ordered = sorted(names)
    n_train, n_dev = round(0.8 * len(ordered)), round(0.1 * len(ordered))
    return {"train": ordered[:n_train], "dev": ordered[n_train:n_train + n_dev],
            "test": ordered[n_train + n_dev:]}


def read_litbank(folder: PathLike, split: str) -> list[CorefDocument]:
    """The documents of one split (``train``, ``dev`` or ``test``, by :func:`litbank_split`) of
    a folder of LitBank's ``*.conll`` files."""
    if split not in ("train", "dev", "test"):
        raise ValueError(f"litbank: split must be 'train', 'dev' or 'test', got {split!r}")
    if not os.path.isdir(folder):
        raise ValueError(f"litbank: {folder}: expected the folder of LitBank's *.conll files "
                         f"(for one file, use kind conll2012-coref)")
    names = [n for n in os.listdir(folder) if n.endswith(".conll")]
    if not names:
        raise FileNotFoundError(f"litbank: {folder}: no *.conll files")
    return [d for name in litbank_split(names)[split] for d in read_conll2012_coref(os.path.join(folder, name))]


@dataclass
class GapExample(CorefDocument):
    """One GAP example: its text as a document (no gold clusters), the token spans ``(start,
    end)`` (inclusive) of the pronoun and of the names A and B, whether each name corefers with
    the pronoun, and the pronoun's gender (``"M"`` or ``"F"``)."""

    pronoun: tuple[int, int] = (0, 0)
    a: tuple[int, int] = (0, 0)
    b: tuple[int, int] = (0, 0)
    a_coref: bool = False
    b_coref: bool = False
    gender: str = "M"


GAP_COLUMNS = ("ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref")
GAP_GENDERS = {"he": "M", "him": "M", "his": "M", "himself": "M", "she": "F", "her": "F", "hers": "F",
               "herself": "F"}


def read_gap(path: PathLike) -> list[GapExample]:
    """GAP's tab-separated file (header ``ID, Text, Pronoun, Pronoun-offset, A, A-offset,
    A-coref, B, B-offset, B-coref, URL``): each text tokenized by :func:`tokenize_with_offsets`,
    and the pronoun and names located by their character offsets. A name is the tokens that
    overlap its characters. A missing column, an offset that is not a number or does not point
    at the text it names, or a coref value other than TRUE/FALSE is an error naming the line and
    column."""
    lines = numbered_lines(path)
    try:
        _, header = next(lines)
    except StopIteration:
        raise DatasetError(path, 1, "empty file; expected GAP's header") from None
    names = header.rstrip("\n").split("\t")
    missing = [c for c in GAP_COLUMNS if c not in names]
    if missing:
        raise DatasetError(path, 1, f"header lacks column(s) {', '.join(missing)}")
    column = {c: names.index(c) for c in GAP_COLUMNS}
    examples = []
    for number, line in lines:
        if not line.strip():
            continue
        cells = line.rstrip("\n").split("\t")
        if len(cells) < len(names):
            raise DatasetError(path, number, f"{len(cells)} columns, expected {len(names)}")
        cell = {c: cells[i] for c, i in column.items()}
        text = cell["Text"]
        sentences = tokenize_with_offsets(text)
        flat = [t for sentence in sentences for t in sentence]

        def locate(name: str) -> tuple[int, int]:
            try:
                offset = int(cell[f"{name}-offset"])
            except ValueError:
                raise DatasetError(path, number, f"{name}-offset: {cell[name + '-offset']!r} is not a number") from None
            surface = cell[name]
            if text[offset:offset + len(surface)] != surface:
                raise DatasetError(path, number, f"{name}-offset: {offset} does not point at {surface!r} in Text")
            covered = [i for i, (a, b) in enumerate(flat) if a < offset + len(surface) and b > offset]
            if not covered:
                raise DatasetError(path, number, f"{name}: no token covers {surface!r} at {offset}")
            return covered[0], covered[-1]

        def coref(name: str) -> bool:
            value = cell[f"{name}-coref"].strip().upper()
            if value not in ("TRUE", "FALSE"):
                raise DatasetError(path, number, f"{name}-coref: expected TRUE or FALSE, got {cell[name + '-coref']!r}")
            return value == "TRUE"

        pronoun = cell["Pronoun"].strip().lower()
        if pronoun not in GAP_GENDERS:
            raise DatasetError(path, number, f"Pronoun: {cell['Pronoun']!r} is not a gendered third-person pronoun")
        examples.append(GapExample(
            name=cell["ID"], sentences=[[text[a:b] for a, b in sentence] for sentence in sentences], clusters=[],
            pronoun=locate("Pronoun"), a=locate("A"), b=locate("B"), a_coref=coref("A"), b_coref=coref("B"),
            gender=GAP_GENDERS[pronoun]))
    if not examples:
        raise DatasetError(path, 1, "no examples")
    return examples



# ---------------------------------------------------------------------------------------------
# The model and the metrics

METRICS = ("muc", "b_cubed", "ceaf_e")
# Upper bounds (inclusive) of the token-distance buckets of Lee et al.: 0, 1, 2, 3, 4, 5-7,
# 8-15, 16-31, 32-63, 64 and more.
DISTANCE_BUCKETS = (0, 1, 2, 3, 4, 7, 15, 31, 63)


def enumerate_spans(sentence_lengths: Sequence[int], max_width: int) -> list[tuple[int, int]]:
    """Every candidate mention ``(start, end)`` (inclusive document positions) of at most
    ``max_width`` tokens that does not cross a sentence boundary, ordered by start then end."""
    check_count(max_width, "max_width")
    spans, offset = [], 0
    for length in sentence_lengths:
        for start in range(offset, offset + length):
            for end in range(start, min(start + max_width, offset + length)):
                spans.append((start, end))
        offset += length
    return spans


def split_document(document: CorefDocument, max_sentences: int) -> list[CorefDocument]:
    """``document`` cut into consecutive pieces of at most ``max_sentences`` sentences (the whole
    document when it is shorter, or when ``max_sentences`` is 0), for training on more, shorter
    examples (Lee et al. truncated training documents to 50 sentences). Each piece keeps the
    mentions that lie inside it, renumbered from its first token; a mention across two pieces is
    dropped, and so is a cluster left empty."""
    if max_sentences <= 0 or len(document.sentences) <= max_sentences:
        return [document]
    pieces, offset = [], 0
    for first in range(0, len(document.sentences), max_sentences):
        sentences = document.sentences[first:first + max_sentences]
        length = sum(len(s) for s in sentences)
        clusters = [[(a - offset, b - offset) for a, b in cluster if a >= offset and b < offset + length]
                    for cluster in document.clusters]
        pieces.append(CorefDocument(f"{document.name}#{len(pieces)}", [list(s) for s in sentences],
                                    [c for c in clusters if c]))
        offset += length
    return pieces


def distance_bucket(distance: torch.Tensor) -> torch.Tensor:
    """The bucket (0..9) of each token distance (a long tensor, any shape) in :data:`DISTANCE_BUCKETS`."""
    return torch.bucketize(distance, torch.tensor(DISTANCE_BUCKETS, dtype=distance.dtype), right=False)


def clusters_from_antecedents(spans: Sequence[tuple[int, int]], antecedents: Sequence[int],
                              singletons: Sequence[bool] | None = None) -> list[list[tuple[int, int]]]:
    """Clusters of ``spans`` (in document order) given each one's chosen antecedent (an index
    into ``spans`` before it, or -1 for none): a span joins its antecedent's cluster. A span in
    no link is left out, unless ``singletons`` marks it, when it is a cluster of its own."""
    cluster_of: dict[int, int] = {}
    clusters: list[list[tuple[int, int]]] = []
    for i, antecedent in enumerate(antecedents):
        if antecedent < 0:
            continue
        if antecedent not in cluster_of:
            cluster_of[antecedent] = len(clusters)
            clusters.append([spans[antecedent]])
        cluster_of[i] = cluster_of[antecedent]
        clusters[cluster_of[i]].append(spans[i])
    if singletons is not None:
        clusters += [[spans[i]] for i, single in enumerate(singletons) if single and i not in cluster_of]
    return [sorted(c) for c in clusters]


def antecedent_loss(scores: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """The marginal log-likelihood loss of Lee et al.: ``scores`` ``(spans, 1 + candidates)``,
    column 0 the dummy antecedent (score 0), and ``gold`` the same shape, True at each gold
    antecedent. A row with no gold antecedent has the dummy as its gold. Returns
    ``sum_i -log sum_{gold j} softmax(scores_i)_j`` (a scalar)."""
    gold = gold.clone()
    gold[:, 0] = ~gold[:, 1:].any(dim=1)
    gold_scores = scores.masked_fill(~gold, torch.finfo(scores.dtype).min)
    return (torch.logsumexp(scores, dim=1) - torch.logsumexp(gold_scores, dim=1)).sum()


def _feed_forward(input_dim: int, hidden: int, dropout: float) -> nn.Sequential:
    """Lee et al.'s scorers: two ReLU hidden layers, dropout after each, one score out."""
    return nn.Sequential(nn.Linear(input_dim, hidden), nn.ReLU(), Dropout(dropout),
                         nn.Linear(hidden, hidden), nn.ReLU(), Dropout(dropout), nn.Linear(hidden, 1))


@dataclass
class CorefDocumentBatch(TokenBatch):
    """One document: its sentences as rows (see :class:`~elmo.tasks.base.TokenBatch`) and, for
    training, its gold ``clusters`` of ``(start, end)`` document positions."""

    clusters: list[list[tuple[int, int]]] | None = None


@dataclass
class CorefBatch:
    """The documents of a batch, each scored on its own."""

    documents: list[CorefDocumentBatch]


@dataclass
class CorefSettings(ModelSettings):
    """``[model]`` of a coreference run (see :class:`CorefModel`), and ``chunk_sentences``:
    training documents cut into pieces of at most this many sentences (0: whole documents;
    :func:`split_document`)."""

    max_span_width: int = 10
    spans_per_word: float = 0.4
    max_antecedents: int = 50
    feature_dim: int = 20
    ffnn_hidden: int = 150
    mention_loss: float = 0.0
    chunk_sentences: int = 0

    def __post_init__(self):
        super().__post_init__()
        for name in ("max_span_width", "max_antecedents", "feature_dim", "ffnn_hidden"):
            check_count(getattr(self, name), f"model.{name}")
        check_number(self.spans_per_word, "model.spans_per_word", 0, above=True)
        check_number(self.mention_loss, "model.mention_loss")
        check_count(self.chunk_sentences, "model.chunk_sentences", 0)  # 0: whole documents


class CorefModel(nn.Module):
    """The span-ranking coreference model (see the module docstring) with optional ELMo.

    ``hidden``: BiLSTM size per direction; ``max_span_width``: the longest candidate mention;
    ``spans_per_word``: the fraction of a document's words kept as candidate mentions after
    pruning; ``max_antecedents``: candidate antecedents per kept span; ``feature_dim``: size of the
    width and distance embeddings; ``ffnn_hidden``: size of the scorers' hidden layers;
    ``mention_loss``: weight of the auxiliary mention loss (0: Lee et al.'s loss alone).

    A batch is a :class:`CorefBatch`: documents, each a :class:`CorefDocumentBatch` of its
    sentences (``words`` ``(sentences, time)``, ``chars``, ``mask``, ``elmo``) and, for training,
    its gold clusters of ``(start, end)`` document positions.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, *, hidden: int = CorefSettings.hidden,
                 dropout: float = CorefSettings.dropout, max_span_width: int = CorefSettings.max_span_width,
                 spans_per_word: float = CorefSettings.spans_per_word,
                 max_antecedents: int = CorefSettings.max_antecedents, feature_dim: int = CorefSettings.feature_dim,
                 ffnn_hidden: int = CorefSettings.ffnn_hidden, mention_loss: float = CorefSettings.mention_loss):
        super().__init__()
        check_count(max_span_width, "max_span_width")
        check_count(max_antecedents, "max_antecedents")
        check_number(spans_per_word, "spans_per_word", 0.0, above=True)
        self.features = features
        self.elmo = elmo
        self.max_span_width = max_span_width
        self.spans_per_word = spans_per_word
        self.max_antecedents = max_antecedents
        self.mention_loss_weight = mention_loss
        self.dropout = Dropout(dropout)
        input_dim = features.output_dim + elmo.input_dim
        self.encoder = nn.LSTM(input_dim, hidden, bidirectional=True, batch_first=True)
        state_dim = 2 * hidden + elmo.output_dim
        self.head_scorer = nn.Linear(state_dim, 1)
        self.width = nn.Embedding(max_span_width, feature_dim)
        self.distance = nn.Embedding(len(DISTANCE_BUCKETS) + 1, feature_dim)
        span_dim = 2 * state_dim + input_dim + feature_dim
        self.mention_scorer = _feed_forward(span_dim, ffnn_hidden, dropout)
        self.antecedent_scorer = _feed_forward(3 * span_dim + feature_dim, ffnn_hidden, dropout)

    # ---------------------------------------------------------------- pieces
    def encode_tokens(self, document: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, states)``: the document's tokens in order, ``(words, input_dim)`` (the
        embeddings, after dropout) and ``(words, state_dim)`` (BiLSTM outputs, with output ELMo)."""
        mask = document.mask.bool()
        layers = document.elmo
        inputs = self.dropout(concat(self.features(document.words, document.chars),
                                     self.elmo.for_input(layers, mask)))
        states = concat(encode(self.encoder, inputs, mask), self.elmo.for_output(layers, mask))
        return inputs[mask], self.dropout(states[mask])

    def span_embeddings(self, inputs: torch.Tensor, states: torch.Tensor, starts: torch.Tensor,
                        ends: torch.Tensor) -> torch.Tensor:
        """``g`` ``(spans, span_dim)`` of the spans ``starts``/``ends`` ``(spans,)`` (inclusive)."""
        offsets = torch.arange(self.max_span_width)
        positions = starts.unsqueeze(1) + offsets  # (spans, max_width)
        inside = positions <= ends.unsqueeze(1)
        positions = torch.minimum(positions, ends.unsqueeze(1))
        head_scores = self.head_scorer(states).squeeze(-1)[positions]
        weights = masked_softmax(head_scores, inside)
        heads = (weights.unsqueeze(-1) * inputs[positions]).sum(dim=1)
        return torch.cat([states[starts], states[ends], heads, self.width(ends - starts)], dim=-1)

    def score_document(self, document: TokenBatch) -> dict:
        """Everything the loss and the prediction need for one document: ``spans`` ``(n, 2)``
        (every candidate), ``mention_scores`` ``(n,)``, ``kept`` ``(k,)`` (indices of the kept
        spans, in document order), ``antecedents`` ``(k, c)`` (for each kept span, positions in
        ``kept`` of its candidates, nearest first), ``valid`` ``(k, c)``, and ``scores``
        ``(k, 1 + c)`` (column 0 the dummy antecedent)."""
        lengths = document.mask.sum(dim=1).tolist()
        spans = torch.tensor(enumerate_spans(lengths, self.max_span_width), dtype=torch.long).view(-1, 2)
        inputs, states = self.encode_tokens(document)
        g = self.span_embeddings(inputs, states, spans[:, 0], spans[:, 1])
        mention_scores = self.mention_scorer(g).squeeze(-1)
        n_words = int(sum(lengths))
        k = min(len(spans), max(1, math.floor(self.spans_per_word * n_words)))
        # Spans are enumerated by start then end, so sorted indices are in document order.
        kept = torch.topk(mention_scores, k).indices.sort().values
        c = min(self.max_antecedents, max(k - 1, 1))
        antecedents = torch.arange(k).unsqueeze(1) - 1 - torch.arange(c)  # nearest first
        valid = antecedents >= 0
        antecedents = antecedents.clamp(min=0)
        kept_g, kept_scores, kept_starts = g[kept], mention_scores[kept], spans[kept, 0]
        g_i = kept_g.unsqueeze(1).expand(-1, c, -1)
        g_j = kept_g[antecedents]
        distance = self.distance(distance_bucket(kept_starts.unsqueeze(1) - kept_starts[antecedents]))
        pair = self.antecedent_scorer(torch.cat([g_i, g_j, g_i * g_j, distance], dim=-1)).squeeze(-1)
        scores = kept_scores.unsqueeze(1) + kept_scores[antecedents] + pair
        scores = scores.masked_fill(~valid, torch.finfo(scores.dtype).min)
        scores = torch.cat([torch.zeros(k, 1, dtype=scores.dtype), scores], dim=1)
        return {"spans": spans, "mention_scores": mention_scores, "kept": kept, "antecedents": antecedents,
                "valid": valid, "scores": scores}

    # ---------------------------------------------------------------- training and prediction
    def document_loss(self, document: CorefDocumentBatch) -> torch.Tensor:
        """Lee et al.'s loss on one document (plus the weighted mention loss)."""
        out = self.score_document(document)
        cluster_of = {tuple(m): i for i, cluster in enumerate(document.clusters) for m in cluster}
        span_cluster = torch.tensor([cluster_of.get(tuple(s), -1) for s in out["spans"].tolist()], dtype=torch.long)
        kept_cluster = span_cluster[out["kept"]]
        gold = (kept_cluster.unsqueeze(1) == kept_cluster[out["antecedents"]]) & (kept_cluster.unsqueeze(1) >= 0) \
            & out["valid"]
        gold = torch.cat([torch.zeros(len(gold), 1, dtype=torch.bool), gold], dim=1)
        loss = antecedent_loss(out["scores"], gold)
        if self.mention_loss_weight > 0:
            is_mention = (span_cluster >= 0).to(out["mention_scores"].dtype)
            loss = loss + self.mention_loss_weight * nn.functional.binary_cross_entropy_with_logits(
                out["mention_scores"], is_mention, reduction="sum")
        return loss

    def loss(self, batch: CorefBatch) -> torch.Tensor:
        """Mean over the batch's documents of their summed losses, plus the ELMo mixes' L2 penalty."""
        losses = [self.document_loss(document) for document in batch.documents]
        return torch.stack(losses).mean() + self.elmo.l2_penalty()

    @torch.no_grad()
    def predict(self, batch: CorefBatch) -> list[list[list[tuple[int, int]]]]:
        """The clusters of each document, each a sorted list of ``(start, end)`` mentions. Call
        ``eval()`` first for deterministic output."""
        out = []
        for document in batch.documents:
            scored = self.score_document(document)
            best = scored["scores"].argmax(dim=1)  # 0: the dummy
            kept = scored["kept"]
            rows = torch.arange(len(kept))
            chosen = torch.where(best > 0, scored["antecedents"][rows, (best - 1).clamp(min=0)], -1)
            spans = [tuple(s) for s in scored["spans"][kept].tolist()]
            singletons = None
            if self.mention_loss_weight > 0:
                singletons = (scored["mention_scores"][kept] > 0).tolist()
            out.append(clusters_from_antecedents(spans, chosen.tolist(), singletons))
        return out


def gap_scores(examples: Sequence[GapExample], predicted: Sequence[Sequence[Sequence[tuple[int, int]]]]) -> dict:
    """GAP's scores (as its ``gap_scorer.py`` counts them) of predicted clusters: for each example
    and each of its names A and B, the system says "coreferent" when the pronoun's predicted
    cluster has a mention that overlaps the name's tokens. Returns precision, recall and F1
    over all (example, name) decisions (``overall``) and by the pronoun's gender (``M``, ``F``),
    and ``bias``: F1 on feminine over F1 on masculine examples."""
    if len(examples) != len(predicted):
        raise ValueError(f"gap_scores: {len(examples)} examples but {len(predicted)} predictions")
    counts = {g: [0, 0, 0] for g in ("overall", "M", "F")}  # true positives, predicted, gold

    def overlaps(mention: tuple[int, int], name: tuple[int, int]) -> bool:
        return mention[0] <= name[1] and mention[1] >= name[0]

    for example, clusters in zip(examples, predicted):
        pronoun_cluster = next((c for c in clusters if tuple(example.pronoun) in {tuple(m) for m in c}), [])
        others = [m for m in pronoun_cluster if tuple(m) != tuple(example.pronoun)]
        for name, gold in ((example.a, example.a_coref), (example.b, example.b_coref)):
            said = any(overlaps(m, name) for m in others)
            for group in ("overall", example.gender):
                counts[group][0] += said and gold
                counts[group][1] += said
                counts[group][2] += gold

    def prf(tp: int, n_predicted: int, n_gold: int) -> dict:
        precision = tp / n_predicted if n_predicted else 0.0
        recall = tp / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    result = {group: prf(*c) for group, c in counts.items()}
    result["bias"] = result["F"]["f1"] / result["M"]["f1"] if result["M"]["f1"] else 0.0
    return result


def corpus_clusters(documents: Sequence[Sequence[Sequence[Hashable]]]) -> list[set]:
    """The clusters of many documents as one corpus: mention ``m`` of document ``i`` becomes
    ``(i, m)``, so that equal spans of different documents stay different mentions."""
    return [{(i, m) for m in cluster} for i, clusters in enumerate(documents) for cluster in clusters]


def coref_scores(gold: Sequence[Sequence[Hashable]], predicted: Sequence[Sequence[Hashable]]) -> dict:
    """``{"muc" | "b_cubed" | "ceaf_e": {"precision", "recall", "f1"}, "conll_f1": ...}`` of the
    predicted clusters against the gold ones. Both are sequences of clusters. A mention in two
    clusters of one side is an error, as it is for the reference scorer."""
    key, response = [set(c) for c in gold if c], [set(c) for c in predicted if c]
    for side, clusters in (("gold", key), ("predicted", response)):
        seen: set = set()
        for cluster in clusters:
            shared = seen & cluster
            if shared:
                raise ValueError(f"coref_scores: the {side} clusters share mention(s) {sorted(shared)[:3]}")
            seen |= cluster
    # Here, not at the module's top: the [tasks] extra installs scorch, and elmo's parser (elmo
    # task --help) imports this module without it.
    from scorch import scores

    result: dict = {}
    for name in METRICS:
        if not key and not response:
            p = r = f = 0.0
        else:
            r, p, f = getattr(scores, name)(key, response)
        result[name] = {"precision": float(p), "recall": float(r), "f1": float(f)}
    result["conll_f1"] = sum(result[name]["f1"] for name in METRICS) / len(METRICS)
    return result


# ---------------------------------------------------------------------------------------------
# The task

class Coreference(Task):
    """Coreference resolution: the mention clusters of each document, scored by the CoNLL F1 (and
    GAP's examples by GAP's F1)."""

    name = "coref"
    metrics = ("coref_f1",)
    Settings = CorefSettings
    readers = {"conll2012-coref": (read_conll2012_coref, False), "litbank": (read_litbank, True),
               "gap": (read_gap, False)}

    def prepare_training(self, examples: list[CorefDocument]) -> Prepared:
        """Training documents cut into pieces of ``chunk_sentences`` (Lee et al. truncated theirs)."""
        if not self.settings.chunk_sentences:
            return Prepared(examples)
        return Prepared([piece for document in examples
                         for piece in split_document(document, self.settings.chunk_sentences)])

    def split(self, examples: list[CorefDocument]) -> Split:
        """The sentences of every document in turn (the biLM reads one sentence at a time);
        ``rows``: the row of each document's first sentence."""
        rows = np.cumsum([0] + [len(e.sentences) for e in examples[:-1]]).tolist() if examples else []
        return Split(examples, [list(s) for e in examples for s in e.sentences], rows)

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> CorefBatch:
        documents = []
        for i in indices:
            e, first = split.examples[i], split.rows[i]
            tokens = token_batch([list(s) for s in e.sentences], vocab, split.layers,
                                 list(range(first, first + len(e.sentences))))
            documents.append(CorefDocumentBatch(**tokens.tensors, clusters=e.clusters))
        return CorefBatch(documents)

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> CorefModel:
        s = self.settings
        return CorefModel(features, elmo, hidden=s.hidden, dropout=s.dropout, max_span_width=s.max_span_width,
                          spans_per_word=s.spans_per_word, max_antecedents=s.max_antecedents,
                          feature_dim=s.feature_dim, ffnn_hidden=s.ffnn_hidden, mention_loss=s.mention_loss)

    def decode(self, predicted: list, split: Split, indices: Sequence[int], names: Sequence[str]) -> list:
        return predicted

    def evaluate(self, examples: Sequence[CorefDocument], predictions: list) -> Evaluation:
        """The CoNLL F1 over the whole corpus, ``details`` every CoNLL metric; on GAP examples the
        overall GAP F1 (metric ``gap_f1``), ``details`` the rest of :func:`gap_scores`."""
        if examples and isinstance(examples[0], GapExample):
            result = gap_scores(examples, predictions)
            return Evaluation("gap_f1", result["overall"]["f1"], result)
        scores = coref_scores(corpus_clusters([e.clusters for e in examples]), corpus_clusters(predictions))
        return Evaluation(self.metric, scores["conll_f1"], scores)

    def report(self, result: dict) -> list[str]:
        details = result["details"]
        if result["metric"] == "gap_f1":
            lines = []
            for group, label in (("overall", "overall"), ("M", "masculine"), ("F", "feminine")):
                row = details[group]
                lines.append(f"  {label:<10} precision {row['precision']:.4f} recall {row['recall']:.4f} "
                             f"f1 {row['f1']:.4f}")
            return lines + [f"  bias (feminine / masculine F1) {details['bias']:.3f}"]
        return [f"  {name:<8} precision {details[name]['precision']:.4f} recall {details[name]['recall']:.4f} "
                f"f1 {details[name]['f1']:.4f}" for name in METRICS]


__all__ = ["CorefBatch", "CorefDocument", "CorefDocumentBatch", "CorefModel", "CorefSettings", "Coreference",
           "DISTANCE_BUCKETS", "GAP_COLUMNS", "GAP_GENDERS", "GapExample", "METRICS", "antecedent_loss",
           "clusters_from_antecedents", "coref_scores", "corpus_clusters", "distance_bucket", "enumerate_spans",
           "gap_scores", "litbank_split", "read_conll2012_coref", "read_gap", "read_litbank", "split_document"]
