"""What every task family offers the training loop: the :class:`Task` interface and its parts.

A task family (tagging, SRL, coreference, ...) is one module under :mod:`elmo.tasks` holding its
record type, its readers, its batches, its model, its metric and how its results are printed,
and one subclass of :class:`Task` that ties them together. The loop in
:mod:`elmo.tasks.training` only calls that object; it never asks which task it runs.

The parts shared by all families live here:

* :class:`ModelSettings`: the fields of every task's ``[model]`` config section (each family
  subclasses it with its own fields and defaults);
* :class:`TokenBatch`: one padded batch of sentences as every task model reads it (the families'
  batches are subclasses, or hold several of them: a premise and a hypothesis);
* :class:`Split`: one split's examples, the sentences the biLM reads for them and their cached
  layers;
* :class:`Evaluation`: a score, its details and, where a task has them, the predictions to write;
* :func:`class_scores`: per-class precision, recall and confusion of a classification.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from elmo.checks import check_count, check_number
from elmo.inference.layer_cache import LayerCache
from elmo.tasks.features import TokenFeatures, WordVocab, char_ids, word_ids
from elmo.tasks.integration import TaskElmo


@dataclass
class ModelSettings:
    """The ``[model]`` fields every task has: the task encoder's size and dropout, and the token
    features (``char_filters=0`` leaves the task's character CNN out; ``freeze_vectors`` keeps
    the pretrained word vectors fixed)."""

    hidden: int = 100
    dropout: float = 0.5
    char_filters: int = 50
    freeze_vectors: bool = True

    def __post_init__(self):
        check_count(self.hidden, "model.hidden")
        check_number(self.dropout, "model.dropout", 0, below=1)
        check_count(self.char_filters, "model.char_filters", 0)


@dataclass
class TokenBatch:
    """A padded batch of sentences, as the task models read it.

    ``words``: ``(batch, time)`` long ids into the run's :class:`WordVocab` (0 = padding);
    ``chars``: ``(batch, time, max_chars)`` byte ids + 1 for the task's character CNN;
    ``mask``: ``(batch, time)`` bool, True at real tokens, which come first in each row;
    ``elmo``: ``(batch, L+1, time, dim)`` cached biLM layers, or None for a model without ELMo.
    """

    words: torch.Tensor
    chars: torch.Tensor
    mask: torch.Tensor
    elmo: torch.Tensor | None = None

    @property
    def tensors(self) -> dict[str, torch.Tensor | None]:
        """The four tensors by name, to build a subclass from (``TaggingBatch(**b.tensors, tags=...)``)."""
        return {"words": self.words, "chars": self.chars, "mask": self.mask, "elmo": self.elmo}


def token_batch(sentences: Sequence[Sequence[str]], vocab: WordVocab, layers: LayerCache | None,
                rows: Sequence[int]) -> TokenBatch:
    """The :class:`TokenBatch` of ``sentences``, padded to the longest (at least one step);
    ``rows``: each sentence's row in ``layers`` (ignored when ``layers`` is None)."""
    time = max(max((len(s) for s in sentences), default=0), 1)
    mask = torch.zeros(len(sentences), time, dtype=torch.bool)
    for row, s in enumerate(sentences):
        mask[row, :len(s)] = True
    elmo = layers.batch(rows, time) if layers is not None else None
    return TokenBatch(words=word_ids(sentences, vocab, time), chars=char_ids(sentences, time), mask=mask, elmo=elmo)


@dataclass
class Split:
    """One split of a task's data: its ``examples``, the ``sentences`` the biLM reads for them (in
    the order of ``layers``' rows), ``rows``, the task's own map from an example to its sentences'
    rows (see each task's :meth:`Task.split`), and the cached biLM ``layers`` (None without ELMo)."""

    examples: list
    sentences: list[list[str]]
    rows: Any = None
    layers: LayerCache | None = None


@dataclass
class Evaluation:
    """A split's ``score`` under ``metric`` (a fraction), ``details`` (per class, per role, the
    other metrics...) and, for tasks that write them, ``predictions`` (id -> prediction)."""

    metric: str
    score: float
    details: dict = field(default_factory=dict)
    predictions: dict | None = None


@dataclass
class Prepared:
    """The training examples a task trains on (see :meth:`Task.prepare_training`), what to add
    to ``metrics.json`` about them, and a line to show while training."""

    examples: list
    metrics: dict = field(default_factory=dict)
    note: str | None = None


# A reader of one dataset kind: ``reader(path)``, or ``reader(path, split)`` for files holding
# several splits (see Task.readers).
Reader = Callable[..., list]


class Task(ABC):
    """One task family, as the training loop, ``elmo task`` and the experiments use it.

    Class attributes: ``name`` (the config's ``task``), ``metrics`` (the config's ``metric``
    choices), ``Settings`` (the dataclass of the config's ``[model]`` section), ``readers``
    (dataset kind -> ``(reader, takes a split)``).

    An instance holds the run's model settings and metric. Its methods, in the order a run calls
    them: :meth:`prepare_training`, :meth:`split`, :meth:`label_names`, :meth:`build_model`,
    :meth:`batch` (training and prediction), :meth:`decode`, :meth:`evaluate`; then, in ``elmo
    task evaluate``, :meth:`tolerates_unseen_labels` and :meth:`report`.
    """

    name: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    Settings: ClassVar[type[ModelSettings]] = ModelSettings
    readers: ClassVar[dict[str, tuple[Reader, bool]]]

    def __init__(self, settings: ModelSettings | None = None, metric: str | None = None):
        self.settings = settings if settings is not None else self.Settings()
        self.metric = metric if metric is not None else self.metrics[0]

    # -------------------------------------------------------------------------------- data
    def prepare_training(self, examples: list) -> Prepared:
        """The training split as the model trains on it (by default unchanged)."""
        return Prepared(examples)

    @abstractmethod
    def split(self, examples: list) -> Split:
        """The examples with the sentences the biLM reads for them and the task's row map."""

    def label_names(self, examples: Sequence) -> list[str]:
        """The labels the model predicts, in output order: the sorted distinct gold labels of the
        training examples; empty where a task's outputs are not labels from a fixed set."""
        return []

    def gold_labels(self, examples: Sequence) -> set[str]:
        """The distinct gold labels of ``examples`` (what :meth:`label_names` sorts)."""
        return set(self.label_names(examples))

    @abstractmethod
    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]):
        """The typed batch of ``split.examples[i]`` for ``i`` in ``indices``; ``labels``: label -> id."""

    # -------------------------------------------------------------------------------- model
    @abstractmethod
    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> nn.Module:
        """The task model over ``features`` and ``elmo``, predicting ``labels`` (in output order).
        It has ``loss(batch)`` (a scalar) and ``predict(batch)`` (what :meth:`decode` reads)."""

    # -------------------------------------------------------------------------------- predictions and metric
    @abstractmethod
    def decode(self, predicted: list, split: Split, indices: Sequence[int], names: Sequence[str]) -> list:
        """The predictions of ``model.predict`` on the batch of ``indices``, as :meth:`evaluate`
        compares them with the gold ones (label names, clusters, answer texts, ...)."""

    @torch.no_grad()
    def predict(self, model: nn.Module, split: Split, vocab: WordVocab, labels: dict[str, int],
                batch_size: int) -> list:
        """The prediction for every example of ``split``, in order (the model in eval mode)."""
        names = [name for name, _ in sorted(labels.items(), key=lambda item: item[1])]
        model.eval()
        out = []
        for start in range(0, len(split.examples), batch_size):
            indices = list(range(start, min(start + batch_size, len(split.examples))))
            out.extend(self.decode(model.predict(self.batch(split, indices, vocab, labels)), split, indices, names))
        return out

    @abstractmethod
    def evaluate(self, examples: Sequence, predictions: list) -> Evaluation:
        """The score of ``predictions`` against the gold ``examples`` under this task's metric."""

    def tolerates_unseen_labels(self, unseen: set[str], gold: set[str]) -> bool:
        """Whether data whose gold labels include ``unseen`` (labels the model never saw in
        training) is scored, the unseen ones counting as missed, or refused as the wrong data."""
        return False

    # -------------------------------------------------------------------------------- printing
    def report(self, result: dict) -> list[str]:
        """The lines ``elmo task evaluate`` prints under the score, from the result of
        :func:`elmo.tasks.training.evaluate_task` (its ``details`` are :meth:`evaluate`'s)."""
        return []


def accuracy(pairs: Sequence[tuple]) -> float:
    """The fraction of ``(gold, predicted)`` pairs that agree (0 for none)."""
    return sum(g == p for g, p in pairs) / max(len(pairs), 1)


def class_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict:
    """Per-class counts and scores of a classification: ``{"classes": {label: {"gold",
    "predicted", "correct", "precision", "recall", "f1"}}, "confusion": {gold label: {predicted
    label: count}}}``, the classes in sorted order; a class never predicted has precision 0."""
    confusion = {label: {other: 0 for other in sorted(set(gold) | set(predicted))}
                 for label in sorted(set(gold) | set(predicted))}
    for g, p in zip(gold, predicted):
        confusion[g][p] += 1
    classes = {}
    for label, row in confusion.items():
        n_gold, correct = sum(row.values()), row[label]
        n_predicted = sum(confusion[other][label] for other in confusion)
        precision = correct / n_predicted if n_predicted else 0.0
        recall = correct / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        classes[label] = {"gold": n_gold, "predicted": n_predicted, "correct": correct,
                          "precision": precision, "recall": recall, "f1": f1}
    return {"classes": classes, "confusion": confusion}


def class_report(details: dict) -> list[str]:
    """The lines of :func:`class_scores`' result: each class's scores, then the confusion (gold
    rows, predicted columns)."""
    lines = [f"  {label:<14} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f} "
             f"gold {row['gold']}" for label, row in details["classes"].items()]
    labels = list(details["confusion"])
    corner = "gold \\ predicted"
    first = max(len(corner), *(len(label) for label in labels)) + 1
    width = max(8, *(len(label) + 1 for label in labels))
    lines.append(f"  {corner:<{first}}" + "".join(label.rjust(width) for label in labels))
    for label, row in details["confusion"].items():
        lines.append(f"  {label:<{first}}" + "".join(str(row[other]).rjust(width) for other in labels))
    return lines


def first_uses(keys) -> dict:
    """Each distinct key, in order of first use, with its position in that order."""
    index: dict = {}
    for key in keys:
        index.setdefault(key, len(index))
    return index


__all__ = ["Evaluation", "ModelSettings", "Prepared", "Reader", "Split", "Task", "TokenBatch", "accuracy",
           "class_report", "class_scores", "first_uses", "token_batch"]
