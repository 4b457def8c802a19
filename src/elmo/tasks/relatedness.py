"""Semantic relatedness (SICK-R): the data, an ESIM regressor with ELMo, Pearson and Spearman.

Data: SICK's sentence pairs with their ``relatedness_score``, the mean of ten human ratings from
1 (unrelated) to 5 (very related) (dataset kind ``sick-relatedness``, :func:`read_sick_relatedness`;
the same ``train``/``trial``/``test`` splits and Moses tokenization as SICK's entailment labels in
:mod:`elmo.tasks.entailment`).

The model is ESIM (:class:`~elmo.tasks.entailment.ESIM`, ELMo at its input and/or at its input
encoder's output) whose five outputs are read as a distribution over the integer scores 1..5, as
Tai et al. (2015) did for SICK: a gold score ``y`` is the distribution ``p`` with
``p[floor(y)] = floor(y) - y + 1`` and ``p[floor(y) + 1] = y - floor(y)`` (:func:`score_distribution`),
the loss is ``KL(p || softmax(logits))``, and the prediction is the expected score
``sum_r r * softmax(logits)_r``, in [1, 5].

The metric is Pearson's r between predicted and gold scores (``pearson``, the number SICK-R
results report), or Spearman's rho (``spearman``); an evaluation gives both and the mean squared
error. Both are computed here in numpy (Spearman: Pearson's r of the ranks, tied values taking
their mean rank), and checked against SciPy's in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from elmo.tasks.base import Evaluation, ModelSettings, Split, Task, TokenBatch
from elmo.tasks.entailment import ESIM, pair_sides, pair_split
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo
from elmo.tasks.readers import DatasetError, PathLike, sick_rows, sick_sentences

LOWEST, HIGHEST = 1, 5  # SICK's rating scale


@dataclass
class ScoredPair:
    """Two sentences and how related they are: ``score`` from 1 (unrelated) to 5."""

    premise: list[str]
    hypothesis: list[str]
    score: float


def read_sick_relatedness(path: PathLike, split: str) -> list[ScoredPair]:
    """The pairs of SICK's ``split`` (``"train"``, ``"trial"`` or ``"test"``, by ``SemEval_set``)
    with their ``relatedness_score``: ``sentence_A`` and ``sentence_B`` Moses-tokenized. Every
    row is checked, not only those of ``split``: a score that is not a number from 1 to 5 is an
    error naming the line."""
    pairs: list[ScoredPair] = []
    for number, fields, wanted in sick_rows(path, split, ("sentence_A", "sentence_B", "relatedness_score")):
        text = fields["relatedness_score"]
        try:
            score = float(text)
        except ValueError:
            score = math.nan
        if not LOWEST <= score <= HIGHEST:  # NaN fails too
            raise DatasetError(path, number, f"relatedness_score {text!r} is not a number from {LOWEST} to {HIGHEST}")
        if not wanted:
            continue
        premise, hypothesis = sick_sentences(path, number, fields)
        pairs.append(ScoredPair(premise, hypothesis, score))
    if not pairs:
        raise DatasetError(path, 1, f"no pairs with SemEval_set {split.upper()}")
    return pairs


# ---------------------------------------------------------------------------------------------
# The model

def score_distribution(scores: torch.Tensor) -> torch.Tensor:
    """Tai et al.'s target: scores ``(batch,)`` in [1, 5] as distributions ``(batch, 5)`` over the
    integer scores whose expectation is the score (weight on the two integers around it)."""
    low = scores.floor().clamp(LOWEST, HIGHEST)
    above = (scores - low).unsqueeze(1)                                  # (batch, 1)
    index = (low - LOWEST).long().unsqueeze(1)                           # 0-based class of floor(y)
    target = torch.zeros(len(scores), HIGHEST - LOWEST + 1, dtype=scores.dtype)
    target.scatter_(1, index, 1 - above)
    return target.scatter_add_(1, (index + 1).clamp(max=HIGHEST - LOWEST), above)  # y = 5: above is 0


@dataclass
class ScoredPairBatch:
    """Sentence pairs (``premise``, ``hypothesis``: :class:`~elmo.tasks.base.TokenBatch` each, row
    ``i`` of both one pair) and their gold scores ``score`` ``(batch,)`` float."""

    premise: TokenBatch
    hypothesis: TokenBatch
    score: torch.Tensor | None = None


class RelatednessESIM(ESIM):
    """ESIM (see :class:`~elmo.tasks.entailment.ESIM`) whose five outputs are a distribution over
    the scores 1..5. Batch: a :class:`ScoredPairBatch`."""

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, *, hidden: int = ModelSettings.hidden,
                 dropout: float = ModelSettings.dropout):
        super().__init__(features, elmo, HIGHEST - LOWEST + 1, hidden=hidden, dropout=dropout)

    def loss(self, batch: ScoredPairBatch) -> torch.Tensor:
        """Scalar: mean over pairs of ``KL(target || predicted)`` over the five scores, plus the
        ELMo mixes' L2 penalty."""
        log_probs = F.log_softmax(self.logits(batch), dim=-1)            # (batch, 5)
        target = score_distribution(batch.score.to(log_probs.dtype))
        return F.kl_div(log_probs, target, reduction="batchmean") + self.elmo.l2_penalty().to(log_probs)

    @torch.no_grad()
    def predict(self, batch: ScoredPairBatch) -> list[float]:
        """The expected score of each pair, in [1, 5]. Call ``eval()`` first to turn dropout off."""
        probs = torch.softmax(self.logits(batch), dim=-1)                # (batch, 5)
        return (probs @ torch.arange(LOWEST, HIGHEST + 1, dtype=probs.dtype)).tolist()


# ---------------------------------------------------------------------------------------------
# The metrics

def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation coefficient of two equally long sequences; 0 where either is
    constant (or shorter than 2), where it is undefined."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"pearson: {len(x)} values against {len(y)}")
    if len(x) < 2:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    norm = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / norm if norm > 0 else 0.0


def ranks(x: Sequence[float]) -> np.ndarray:
    """The 1-based rank of each value, tied values sharing their mean rank (``(n,)`` float)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    plain = np.empty(len(x))
    plain[order] = np.arange(1, len(x) + 1)
    _, groups, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(groups, weights=plain) / counts)[groups]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's r of the ranks (ties averaged)."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    return pearson(ranks(x), ranks(y))


# ---------------------------------------------------------------------------------------------
# The task

class Relatedness(Task):
    """Semantic relatedness of sentence pairs, a score from 1 to 5, scored by Pearson's r (or
    Spearman's rho) against the gold scores."""

    name = "relatedness"
    metrics = ("pearson", "spearman")
    Settings = ModelSettings
    readers = {"sick-relatedness": (read_sick_relatedness, True)}

    def split(self, examples: list[ScoredPair]) -> Split:
        return pair_split(examples)

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab,
              labels: dict[str, int]) -> ScoredPairBatch:
        premise, hypothesis = pair_sides(split, indices, vocab)
        return ScoredPairBatch(premise, hypothesis, torch.tensor([split.examples[i].score for i in indices]))

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> RelatednessESIM:
        return RelatednessESIM(features, elmo, hidden=self.settings.hidden, dropout=self.settings.dropout)

    def decode(self, predicted: list[float], split: Split, indices: Sequence[int], names: Sequence[str]) -> list:
        return predicted

    def evaluate(self, examples: Sequence[ScoredPair], predictions: list[float]) -> Evaluation:
        """Pearson's r or Spearman's rho (the config's metric); ``details``: both, and the mean
        squared error."""
        gold = [e.score for e in examples]
        error = float(np.mean((np.asarray(predictions) - np.asarray(gold)) ** 2)) if gold else 0.0
        details = {"pearson": pearson(predictions, gold), "spearman": spearman(predictions, gold), "mse": error}
        return Evaluation(self.metric, details[self.metric], details)

    def report(self, result: dict) -> list[str]:
        details = result["details"]
        return [f"  pearson {details['pearson']:.4f} spearman {details['spearman']:.4f} "
                f"mean squared error {details['mse']:.4f}"]


__all__ = ["Relatedness", "RelatednessESIM", "ScoredPair", "ScoredPairBatch", "pearson", "ranks",
           "read_sick_relatedness", "score_distribution", "spearman"]
