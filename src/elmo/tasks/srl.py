"""Semantic role labelling: PropBank data, a deep BiLSTM tagger over one predicate at a time
(He et al. 2017), and the CoNLL-2005 F1.

Data: PropBank semantic roles in CoNLL-2012 columns (dataset kind ``conll2012-srl``,
:func:`read_conll2012_srl`), one :class:`SrlInstance` per predicate: the sentence, the
predicate's position and its arguments as BIO tags over the sentence.

The model, in a size that trains on a laptop CPU::

    [word vector; char CNN; predicate indicator; ELMo_input] -> dropout
        -> BiLSTM -> BiLSTM + residual -> ... -> dropout -> [h; ELMo_output]
        -> linear -> per-token softmax over BIO tags

and decoding is Viterbi over the softmax's log-probabilities with the BIO constraints as the
only transition scores (``I-X`` only after ``B-X`` or ``I-X``, never first), so a prediction
is always a valid tag sequence. He et al. used 8 layers with highway connections and
alternating directions; here the layers are bidirectional and joined by residual connections.
The biLM layers of a sentence are computed once and shared by all of its predicates.

The metric is the CoNLL-2005 one (``srl-eval.pl``): precision, recall and F1 of labelled
arguments with exact boundaries, the predicate's own ``V`` excluded. A continuation argument
(``C-ARG1``) is one piece of the argument it continues: the argument counts as correct only if
every piece matches. Reference arguments (``R-ARG0``) are arguments of their own role. A role
that training never saw counts as missed (SRL's rare roles are a real part of test sets).

A batch is an :class:`SrlBatch`: the tagger's batch plus the predicate indicator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
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
    first_uses,
    token_batch,
)
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode
from elmo.tasks.readers import DatasetError, PathLike, conll2012_blocks
from elmo.tasks.tagging import CRF, TaggedSentence, TaggingBatch


@dataclass
class SrlInstance(TaggedSentence):
    """One predicate of a sentence and its arguments as BIO tags over the sentence (``B-ARG0``,
    ``I-ARG0``, ``B-V``, ``B-C-ARG1``, ``B-R-ARG0``, ... and ``O``). ``predicate`` is the index
    of the predicate's first token; ``sentence`` numbers the sentences of the file from 0, so
    that the instances of one sentence can share its biLM layers."""

    predicate: int = 0
    sentence: int = 0


# ------------------------------------------------------------------------------ reader
# Fixed columns before the argument columns: document, sentence, token, word, POS, parse bit,
# predicate lemma, roleset; then one bracketed argument column per predicate.
SRL_FIXED_COLUMNS = 8
_SRL_CELL = re.compile(r"(?:\(([^()*\s]+))?\*(\))?")


def srl_brackets_to_bio(cells: Sequence[str], lines: Sequence[int], where: PathLike, column: int) -> list[str]:
    """One predicate's bracketed argument column (``(ARG0*``, ``*``, ``*)``, ``(V*)``) as BIO tags.

    ``lines`` are the cells' line numbers, for errors: a cell that is not one of those forms, an
    argument opened inside another or closed when none is open, and one left open at the end of
    the sentence raise :class:`DatasetError` naming the line and the column (1-based).
    """
    tags, role, opened = [], None, 0
    for cell, number in zip(cells, lines):
        match = _SRL_CELL.fullmatch(cell)
        if match is None:
            raise DatasetError(where, number, f"column {column}: {cell!r} is not an argument bracket "
                                              f"like (ARG0*, *, *) or (V*)")
        label, closes = match.group(1), match.group(2) is not None
        if label is not None:
            if role is not None:
                raise DatasetError(where, number, f"column {column}: ({label} opens inside ({role} "
                                                  f"(opened on line {opened}), which is not closed")
            role, opened = label, number
            tags.append("B-" + label)
        elif role is not None:
            tags.append("I-" + role)
        else:
            tags.append("O")
        if closes:
            if role is None:
                raise DatasetError(where, number, f"column {column}: ')' closes an argument that was never opened")
            role = None
    if role is not None:
        raise DatasetError(where, opened, f"column {column}: ({role} is never closed before the sentence ends")
    return tags


def read_conll2012_srl(path: PathLike) -> list[SrlInstance]:
    """PropBank semantic roles in CoNLL-2012 columns: one :class:`SrlInstance` per predicate.

    Blank lines end sentences and ``#begin document`` / ``#end document`` lines are skipped
    (:func:`~elmo.tasks.readers.conll2012_blocks`).
    Every line of a sentence has the same number of columns: the eight fixed ones and one per
    predicate, whose rows are those with a roleset (column 8) other than ``-``. Each predicate's
    column has exactly one ``(V*)`` span; its first token is the instance's ``predicate``.
    Tokens are kept as they are (the ``[WORD]`` placeholders of some EWT sentences included). A
    sentence without predicates gives no instance but still takes a ``sentence`` number.
    """
    instances: list[SrlInstance] = []
    n_sentences = 0
    for kind, _, block in conll2012_blocks(path):
        if kind != "sentence":
            continue
        numbers = [number for number, _ in block]
        rows = []
        for number, columns in block:
            if len(columns) < SRL_FIXED_COLUMNS:
                raise DatasetError(path, number, f"{len(columns)} columns, expected at least {SRL_FIXED_COLUMNS} "
                                                 f"(document, sentence, token, word, POS, parse, lemma, roleset)")
            if rows and len(columns) != len(rows[0]):
                raise DatasetError(path, number, f"{len(columns)} columns, but line {numbers[0]} of the same "
                                                 f"sentence has {len(rows[0])}")
            rows.append(columns)
        n_arguments = len(rows[0]) - SRL_FIXED_COLUMNS
        predicates = [i for i, row in enumerate(rows) if row[7] != "-"]
        if len(predicates) != n_arguments:
            raise DatasetError(path, numbers[0], f"the sentence has {len(predicates)} predicate(s) (rows with a "
                                                 f"roleset in column 8) but {n_arguments} argument column(s)")
        tokens = [row[3] for row in rows]
        for k in range(n_arguments):
            column = SRL_FIXED_COLUMNS + k + 1
            tags = srl_brackets_to_bio([row[SRL_FIXED_COLUMNS + k] for row in rows], numbers, path, column)
            verbs = [i for i, tag in enumerate(tags) if tag == "B-V"]
            if len(verbs) != 1:
                raise DatasetError(path, numbers[0], f"column {column}: the predicate's column has "
                                                     f"{len(verbs)} (V*) spans, expected 1")
            instances.append(SrlInstance(tokens=list(tokens), tags=tags, predicate=verbs[0], sentence=n_sentences))
        n_sentences += 1
    if not instances:
        raise DatasetError(path, 1, "no predicates")
    return instances


def srl_counts(instances: Sequence[SrlInstance]) -> dict:
    """What a SRL file holds: predicates, sentences with at least one, tokens of those sentences,
    and the role labels (without ``B-``/``I-``) with their number of arguments."""
    sentences = {}
    roles: dict[str, int] = {}
    for instance in instances:
        sentences[instance.sentence] = len(instance.tokens)
        for tag in instance.tags:
            if tag.startswith("B-"):
                roles[tag[2:]] = roles.get(tag[2:], 0) + 1
    return {"predicates": len(instances), "sentences": len(sentences), "tokens": sum(sentences.values()),
            "roles": dict(sorted(roles.items(), key=lambda item: (-item[1], item[0])))}



# Score of a forbidden transition: low enough that no allowed path loses to it, finite so that
# sums stay comparable (-inf - -inf would be NaN).
FORBIDDEN = -1e4


# ------------------------------------------------------------------------------ decoding
def bio_constraints(labels: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Transition scores ``(n, n)`` (``[i, j]``: tag ``i`` followed by ``j``) and start scores
    ``(n,)`` that allow exactly the valid BIO sequences over ``labels``: 0 where allowed,
    :data:`FORBIDDEN` where not. ``I-X`` may follow only ``B-X`` or ``I-X`` and may not start."""
    n = len(labels)
    transitions = torch.zeros(n, n)
    start = torch.zeros(n)
    for j, label in enumerate(labels):
        if not label.startswith("I-"):
            continue
        start[j] = FORBIDDEN
        role = label[2:]
        for i, previous in enumerate(labels):
            if previous not in ("B-" + role, "I-" + role):
                transitions[i, j] = FORBIDDEN
    return transitions, start


class BioDecoder(nn.Module):
    """Constrained Viterbi decoding: the most probable valid BIO sequence under per-token
    log-probabilities. Nothing in it is learned."""

    def __init__(self, labels: Sequence[str]):
        super().__init__()
        self.chain = CRF(len(labels)).requires_grad_(False)
        transitions, start = bio_constraints(labels)
        with torch.no_grad():
            self.chain.transitions.copy_(transitions)
            self.chain.start.copy_(start)

    def forward(self, log_probs: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Tag ids of each row (``mask.sum(1)`` long) for ``log_probs`` ``(batch, time, n_tags)``."""
        return self.chain.viterbi_decode(log_probs, mask)


# ------------------------------------------------------------------------------ metric
Argument = tuple[str, tuple[tuple[int, int], ...]]  # (role, pieces as (start, end) inclusive)


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(role, start, end)`` (inclusive) of each span of a BIO sequence, in order. An ``I-X``
    that does not continue a span of ``X`` starts one, as conlleval reads it."""
    spans: list[tuple[str, int, int]] = []
    role, start = None, 0
    for i, tag in enumerate([*tags, "O"]):
        continues = tag.startswith("I-") and tag[2:] == role
        if role is not None and not continues:
            spans.append((role, start, i - 1))
            role = None
        if tag != "O" and not continues:
            role, start = tag[2:], i
    return spans


def srl_arguments(tags: Sequence[str]) -> list[Argument]:
    """The arguments of one predicate as ``srl-eval.pl`` counts them: the ``V`` span left out, and
    each ``C-X`` span joined, as a further piece, to the closest ``X`` argument before it (a
    ``C-X`` with no ``X`` before it stands alone, under its own label)."""
    arguments: list[tuple[str, list[tuple[int, int]]]] = []
    for role, start, end in bio_spans(tags):
        if role == "V":
            continue
        if role.startswith("C-"):
            base = [a for a in arguments if a[0] == role[2:]]
            if base:
                base[-1][1].append((start, end))
                continue
        arguments.append((role, [(start, end)]))
    return [(role, tuple(pieces)) for role, pieces in arguments]


def srl_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """CoNLL-2005 scores of predicted against gold BIO sequences (one per predicate).

    Returns ``precision``, ``recall``, ``f1`` (fractions; 0 where undefined), the counts
    ``correct``, ``gold``, ``predicted``, and ``roles``: the same for each role, by the role of the
    gold or predicted argument."""
    if len(gold) != len(predicted):
        raise ValueError(f"srl_scores: {len(gold)} gold sequences but {len(predicted)} predicted")
    counts: dict[str, list[int]] = {}  # role -> [correct, gold, predicted]

    def count(role: str, index: int) -> None:
        counts.setdefault(role, [0, 0, 0])[index] += 1

    for g, p in zip(gold, predicted):
        if len(g) != len(p):
            raise ValueError(f"srl_scores: a gold sequence of {len(g)} tags against a prediction of {len(p)}")
        gold_arguments, predicted_arguments = set(srl_arguments(g)), set(srl_arguments(p))
        for argument in gold_arguments:
            count(argument[0], 1)
        for argument in predicted_arguments:
            count(argument[0], 2)
        for argument in gold_arguments & predicted_arguments:
            count(argument[0], 0)

    def prf(correct: int, n_gold: int, n_predicted: int) -> dict:
        precision = correct / n_predicted if n_predicted else 0.0
        recall = correct / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "correct": correct, "gold": n_gold,
                "predicted": n_predicted}

    total = [sum(c[i] for c in counts.values()) for i in range(3)]
    return {**prf(*total), "roles": {role: prf(*c) for role, c in sorted(counts.items())}}


# ------------------------------------------------------------------------------ model
@dataclass
class SrlBatch(TaggingBatch):
    """One predicate's sentence per row (see :class:`~elmo.tasks.tagging.TaggingBatch`: the
    argument tags as ``tags``) and ``predicate`` ``(batch, time)`` long, 1 at the predicate's
    token and 0 elsewhere."""

    predicate: torch.Tensor | None = None


@dataclass
class SrlSettings(ModelSettings):
    """``[model]`` of an SRL run: ``layers`` stacked BiLSTMs (each after the first with a residual
    connection) and ``predicate_dim``, the size of the predicate-indicator embedding."""

    layers: int = 1
    predicate_dim: int = 10

    def __post_init__(self):
        super().__post_init__()
        check_count(self.layers, "model.layers")
        check_count(self.predicate_dim, "model.predicate_dim")


class SrlTagger(nn.Module):
    """Deep BiLSTM SRL tagger with optional ELMo at its input and/or output.

    ``labels``: the BIO tag names, in the order of the model's outputs (for the decoding
    constraints); ``hidden``: LSTM size per direction; ``layers``: stacked BiLSTMs, each after the
    first with a residual connection; ``predicate_dim``: size of the predicate-indicator
    embedding; ``dropout``: before, between and after the BiLSTMs.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str], *,
                 hidden: int = SrlSettings.hidden, layers: int = SrlSettings.layers,
                 dropout: float = SrlSettings.dropout, predicate_dim: int = SrlSettings.predicate_dim):
        super().__init__()
        if layers < 1:
            raise ValueError(f"layers: an SRL tagger needs at least 1 BiLSTM layer, got {layers}")
        self.features = features
        self.elmo = elmo
        self.predicate = nn.Embedding(2, predicate_dim)
        self.dropout = Dropout(dropout)
        input_dim = features.output_dim + predicate_dim + elmo.input_dim
        self.encoders = nn.ModuleList(
            nn.LSTM(input_dim if i == 0 else 2 * hidden, hidden, bidirectional=True, batch_first=True)
            for i in range(layers))
        self.projection = nn.Linear(2 * hidden + elmo.output_dim, len(labels))
        self.decoder = BioDecoder(labels)

    def scores(self, batch: SrlBatch) -> torch.Tensor:
        """Unnormalised tag scores ``(batch, time, n_tags)``."""
        mask = batch.mask.bool()
        layers = batch.elmo
        inputs = concat(self.features(batch.words, batch.chars), self.predicate(batch.predicate),
                        self.elmo.for_input(layers, mask))
        hidden = self.dropout(inputs)
        for i, encoder in enumerate(self.encoders):
            # Packed, so padding stays out of both directions.
            encoded = encode(encoder, hidden, mask)
            hidden = self.dropout(encoded if i == 0 else hidden + encoded)
        return self.projection(concat(hidden, self.elmo.for_output(layers, mask)))

    def loss(self, batch: SrlBatch) -> torch.Tensor:
        """Mean cross entropy per real token, plus the ELMo mixes' L2 penalty."""
        mask = batch.mask.bool()
        scores = self.scores(batch)
        loss = nn.functional.cross_entropy(scores[mask], batch.tags[mask])
        return loss + self.elmo.l2_penalty().to(loss.device)

    @torch.no_grad()
    def predict(self, batch: SrlBatch) -> list[list[int]]:
        """Tag ids of each instance, without padding: the best valid BIO sequence.
        Call ``eval()`` first for deterministic output."""
        log_probs = torch.log_softmax(self.scores(batch), dim=-1)
        return self.decoder(log_probs, batch.mask.bool())


# ------------------------------------------------------------------------------ the task
class SemanticRoles(Task):
    """Semantic role labelling: the arguments of each predicate, scored by the CoNLL-2005 F1."""

    name = "srl"
    metrics = ("srl_f1",)
    Settings = SrlSettings
    readers = {"conll2012-srl": (read_conll2012_srl, False)}

    def split(self, examples: list[SrlInstance]) -> Split:
        """Each distinct sentence once, in order of first use (its predicates share its biLM
        layers); ``rows``: the row of each instance's sentence."""
        index = first_uses(tuple(e.tokens) for e in examples)
        return Split(examples, [list(tokens) for tokens in index], [index[tuple(e.tokens)] for e in examples])

    def label_names(self, examples: Sequence[SrlInstance]) -> list[str]:
        return sorted({t for e in examples for t in e.tags})

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> SrlBatch:
        examples = [split.examples[i] for i in indices]
        tokens = token_batch([e.tokens for e in examples], vocab, split.layers, [split.rows[i] for i in indices])
        predicate = torch.zeros(tokens.mask.shape, dtype=torch.long)
        for row, e in enumerate(examples):
            predicate[row, e.predicate] = 1
        tags = torch.zeros(tokens.mask.shape, dtype=torch.long)
        for row, e in enumerate(examples):
            tags[row, :len(e.tags)] = torch.tensor([labels.get(t, 0) for t in e.tags], dtype=torch.long)
        return SrlBatch(**tokens.tensors, tags=tags, predicate=predicate)

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> SrlTagger:
        s = self.settings
        return SrlTagger(features, elmo, labels, hidden=s.hidden, layers=s.layers, dropout=s.dropout,
                         predicate_dim=s.predicate_dim)

    def decode(self, predicted: list[list[int]], split: Split, indices: Sequence[int],
               names: Sequence[str]) -> list[list[str]]:
        return [[names[t] for t in tags] for tags in predicted]

    def evaluate(self, examples: Sequence[SrlInstance], predictions: list[list[str]]) -> Evaluation:
        """The CoNLL-2005 F1; ``details``: precision, recall, counts and the scores of each role."""
        scores = srl_scores([e.tags for e in examples], predictions)
        return Evaluation(self.metric, scores["f1"], scores)

    def tolerates_unseen_labels(self, unseen: set[str], gold: set[str]) -> bool:
        """A role that training never saw is part of real test sets: it counts as missed."""
        return True

    def report(self, result: dict) -> list[str]:
        details = result["details"]
        lines = [f"precision {details['precision']:.4f} recall {details['recall']:.4f} "
                 f"({details['correct']} correct of {details['gold']} gold, {details['predicted']} predicted arguments)"]
        for role, row in sorted(details["roles"].items(), key=lambda item: -item[1]["gold"]):
            lines.append(f"  {role:<12} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f} "
                         f"gold {row['gold']}")
        return lines


__all__ = ["BioDecoder", "SemanticRoles", "SrlBatch", "SrlInstance", "SrlSettings", "SrlTagger", "bio_constraints",
           "bio_spans", "read_conll2012_srl", "srl_arguments", "srl_brackets_to_bio", "srl_counts", "srl_scores"]
