"""Textual entailment (SICK, SNLI): the data, ESIM with ELMo, accuracy.

Data: sentence pairs and their relation (``entailment``, ``neutral``, ``contradiction``):

==========================  =====================================================================
dataset kind                reader
==========================  =====================================================================
``sick``                    :func:`read_sick`: SICK's ``train``/``trial``/``test`` pairs, raw text
                            tokenized by Moses (:func:`~elmo.tasks.readers.tokenize_text`)
``snli``                    :func:`read_snli_devtest`: SNLI in the InferSent / e-SNLI layout
==========================  =====================================================================

SICK's labels are lower-cased like SNLI's, so that a SICK model can be scored on SNLI.

The model is the enhanced sequential inference model (ESIM) of Chen et al. (2017), which the
ELMo paper used for SNLI, on the shared classifier parts of :mod:`elmo.tasks.classification`:
ELMo at the *input* is concatenated to the token features, at the *output* to the input
encoder BiLSTM's output, before the attention (the paper's section 5.1).

The metric is accuracy; an evaluation also gives each class's precision, recall and F1 and the
confusion (:func:`~elmo.tasks.base.class_scores`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elmo.model.chars import tokenize as split_on_whitespace
from elmo.model.dropout import Dropout
from elmo.tasks.base import (
    Evaluation,
    ModelSettings,
    Split,
    Task,
    TokenBatch,
    accuracy,
    class_report,
    class_scores,
    token_batch,
)
from elmo.tasks.classification import ClassifierModel, bilstm
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode, masked_max, masked_mean, masked_softmax
from elmo.tasks.readers import (
    DatasetError,
    PathLike,
    numbered_lines,
    sick_rows,
    sick_sentences,
)


@dataclass
class SentencePair:
    """A premise, a hypothesis and their relation (entailment)."""

    premise: list[str]
    hypothesis: list[str]
    label: str


# ---------------------------------------------------------------------------------------------
# Readers

SICK_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")


def read_sick(path: PathLike, split: str) -> list[SentencePair]:
    """The pairs of SICK's ``split`` (``"train"``, ``"trial"`` or ``"test"``, by ``SemEval_set``).

    ``SICK.txt`` is tab-separated with a header naming the columns (read by name, see
    :func:`~elmo.tasks.readers.sick_rows`); premise = ``sentence_A``, hypothesis = ``sentence_B``
    (raw text, Moses-tokenized), label = ``entailment_label``, lower-cased like SNLI's
    (``entailment``, ``neutral``, ``contradiction``). Every row is checked, not only those of
    ``split``.
    """
    pairs: list[SentencePair] = []
    for number, fields, wanted in sick_rows(path, split, ("sentence_A", "sentence_B", "entailment_label")):
        if fields["entailment_label"] not in SICK_LABELS:
            raise DatasetError(path, number, f"unknown entailment_label {fields['entailment_label']!r}")
        if not wanted:
            continue
        premise, hypothesis = sick_sentences(path, number, fields)
        # SNLI's lower-case spelling, so that a SICK model can be scored on SNLI.
        pairs.append(SentencePair(premise=premise, hypothesis=hypothesis, label=fields["entailment_label"].lower()))
    if not pairs:
        raise DatasetError(path, 1, f"no pairs with SemEval_set {split.upper()}")
    return pairs


SNLI_LABELS = ("entailment", "neutral", "contradiction")
SNLI_SPLITS = ("train", "dev", "test")


def read_snli_devtest(directory: PathLike, split: str) -> list[SentencePair]:
    """SNLI pairs in the InferSent / e-SNLI layout: ``s1.{split}`` (premises), ``s2.{split}``
    (hypotheses), ``labels.{split}`` (``entailment``/``neutral``/``contradiction``), one pair per
    line. Sentences are already tokenized (split on whitespace). The three files must have the
    same number of lines.
    """
    if split not in SNLI_SPLITS:
        raise ValueError(f"snli: split must be one of {', '.join(SNLI_SPLITS)}, got {split!r}")
    paths = [os.path.join(os.fspath(directory), f"{name}.{split}") for name in ("s1", "s2", "labels")]
    premises, hypotheses, labels = ([line for _, line in numbered_lines(p)] for p in paths)
    counts = [len(premises), len(hypotheses), len(labels)]
    if len(set(counts)) > 1:
        longest = max(range(3), key=counts.__getitem__)
        summary = ", ".join(f"{p} has {c}" for p, c in zip(paths, counts))
        raise DatasetError(paths[longest], min(counts) + 1,
                           f"line counts differ ({summary}); they must have one line per pair")
    if not counts[0]:
        raise DatasetError(paths[0], 1, "empty file")
    pairs: list[SentencePair] = []
    for i, (s1, s2, label) in enumerate(zip(premises, hypotheses, labels)):
        label = label.strip()
        if label not in SNLI_LABELS:
            raise DatasetError(paths[2], i + 1, f"unknown label {label!r}")
        premise, hypothesis = split_on_whitespace(s1), split_on_whitespace(s2)
        for path, tokens in ((paths[0], premise), (paths[1], hypothesis)):
            if not tokens:
                raise DatasetError(path, i + 1, "empty sentence")
        pairs.append(SentencePair(premise=premise, hypothesis=hypothesis, label=label))
    return pairs


# ---------------------------------------------------------------------------------------------
# The model

@dataclass
class PairBatch:
    """Sentence pairs: ``premise`` and ``hypothesis`` (each a :class:`~elmo.tasks.base.TokenBatch`,
    row ``i`` of both the same pair) and their class ids ``label`` ``(batch,)`` long."""

    premise: TokenBatch
    hypothesis: TokenBatch
    label: torch.Tensor | None = None


class ESIM(ClassifierModel):
    """Enhanced sequential inference model (Chen et al. 2017) for sentence pairs, e.g. SNLI, SICK.

    For premise ``a`` (length ``Ta``) and hypothesis ``b`` (``Tb``), with ``H = hidden``::

        [features; ELMo_in] -> dropout -> BiLSTM          (B, Ta, 2H), (B, Tb, 2H)
        -> [.; ELMo_out]                                  a: (B, Ta, D), b: (B, Tb, D), D = 2H + E_out
        e_ij = a_i . b_j                                  (B, Ta, Tb)
        a~ = softmax_j(e) b,  b~ = softmax_i(e)^T a       over the other side's real tokens
        m_a = [a; a~; a - a~; a * a~]                     (B, Ta, 4D), likewise m_b
        -> Linear + ReLU -> dropout                       (B, Ta, H)
        -> BiLSTM composition                             v_a: (B, Ta, 2H), likewise v_b
        [mean v_a; max v_a; mean v_b; max v_b]            (B, 8H)
        -> dropout -> Linear + tanh -> Linear             (B, n_classes)

    Both sides share every layer, including the ELMo mixes. Batch: a :class:`PairBatch` (or any
    batch with a ``premise`` and a ``hypothesis``, each a :class:`~elmo.tasks.base.TokenBatch`).
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_classes: int, *, hidden: int = ModelSettings.hidden,
                 dropout: float = ModelSettings.dropout):
        super().__init__()
        self.features = features
        self.elmo = elmo
        self.dropout = Dropout(dropout)
        self.input_encoder = bilstm(features.output_dim + elmo.input_dim, hidden)
        self.projection = nn.Linear(4 * (2 * hidden + elmo.output_dim), hidden)
        self.composition = bilstm(hidden, hidden)
        self.hidden = nn.Linear(4 * 2 * hidden, hidden)
        self.output = nn.Linear(hidden, n_classes)

    def logits(self, batch: PairBatch) -> torch.Tensor:
        """``(B, n_classes)`` unnormalised class scores."""
        premise, hypothesis = batch.premise, batch.hypothesis
        mask_a, mask_b = premise.mask, hypothesis.mask
        inputs_a, elmo_out_a = self._inputs(premise)
        inputs_b, elmo_out_b = self._inputs(hypothesis)
        # The output ELMo joins the encoder's states, so it takes part in the alignment too.
        a = concat(encode(self.input_encoder, self.dropout(inputs_a), mask_a), elmo_out_a)  # (B, Ta, D)
        b = concat(encode(self.input_encoder, self.dropout(inputs_b), mask_b), elmo_out_b)  # (B, Tb, D)

        # Soft alignment: each token of one side attends over the real tokens of the other.
        e = a @ b.transpose(1, 2)                                          # (B, Ta, Tb)
        a_aligned = masked_softmax(e, mask_b.unsqueeze(1), dim=2) @ b      # a~: (B, Ta, D)
        b_aligned = masked_softmax(e, mask_a.unsqueeze(2), dim=1).transpose(1, 2) @ a  # b~: (B, Tb, D)

        v_a = self._compose(a, a_aligned, mask_a)                          # (B, Ta, 2H)
        v_b = self._compose(b, b_aligned, mask_b)                          # (B, Tb, 2H)
        pooled = torch.cat([masked_mean(v_a, mask_a), masked_max(v_a, mask_a),
                            masked_mean(v_b, mask_b), masked_max(v_b, mask_b)], dim=-1)  # (B, 8H)
        return self.output(torch.tanh(self.hidden(self.dropout(pooled))))

    def _compose(self, x: torch.Tensor, aligned: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Enhance ``x`` ``(B, T, D)`` with its alignment ``aligned`` ``(B, T, D)``, project and run
        the composition BiLSTM -> ``(B, T, 2H)``."""
        enhanced = torch.cat([x, aligned, x - aligned, x * aligned], dim=-1)  # (B, T, 4D)
        projected = torch.relu(self.projection(enhanced))                   # (B, T, H)
        return encode(self.composition, self.dropout(projected), mask)


# ---------------------------------------------------------------------------------------------
# The task

def pair_split(examples: list) -> Split:
    """The split of sentence pairs (anything with a ``premise`` and a ``hypothesis``): the
    premises are the layers' first rows, in order, then the hypotheses."""
    return Split(examples, [e.premise for e in examples] + [e.hypothesis for e in examples])


def pair_sides(split: Split, indices: Sequence[int], vocab: WordVocab) -> tuple[TokenBatch, TokenBatch]:
    """The premises and the hypotheses of ``split.examples[i]`` for ``i`` in ``indices``."""
    examples = [split.examples[i] for i in indices]
    n = len(split.examples)
    return (token_batch([e.premise for e in examples], vocab, split.layers, list(indices)),
            token_batch([e.hypothesis for e in examples], vocab, split.layers, [n + i for i in indices]))


class Entailment(Task):
    """Textual entailment: the relation of a pair of sentences, scored by accuracy."""

    name = "entailment"
    metrics = ("accuracy",)
    Settings = ModelSettings
    readers = {"sick": (read_sick, True), "snli": (read_snli_devtest, True)}

    def split(self, examples: list[SentencePair]) -> Split:
        return pair_split(examples)

    def label_names(self, examples: Sequence[SentencePair]) -> list[str]:
        return sorted({e.label for e in examples})

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> PairBatch:
        premise, hypothesis = pair_sides(split, indices, vocab)
        label = torch.tensor([labels.get(split.examples[i].label, 0) for i in indices], dtype=torch.long)
        return PairBatch(premise, hypothesis, label)

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> ESIM:
        return ESIM(features, elmo, len(labels), hidden=self.settings.hidden, dropout=self.settings.dropout)

    def decode(self, predicted: list[int], split: Split, indices: Sequence[int], names: Sequence[str]) -> list[str]:
        return [names[p] for p in predicted]

    def evaluate(self, examples: Sequence[SentencePair], predictions: list[str]) -> Evaluation:
        """Accuracy; ``details``: the per-class scores and the confusion."""
        gold = [e.label for e in examples]
        return Evaluation(self.metric, accuracy(list(zip(gold, predictions))), class_scores(gold, predictions))

    def report(self, result: dict) -> list[str]:
        return class_report(result["details"])


__all__ = ["ESIM", "Entailment", "PairBatch", "SICK_LABELS", "SNLI_LABELS", "SentencePair", "pair_sides",
           "pair_split", "read_sick", "read_snli_devtest"]
