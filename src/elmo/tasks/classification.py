"""Sentence classification (SST-5): the data, the biattentive classification network, accuracy.

Data: SST-5's PTB-format trees, one per line (dataset kind ``sst5``, :func:`read_sst`), whose
root label (``"0"``..``"4"``) is the sentence's class and whose leaves are its tokens.

The model is the biattentive classification network (BCN) of McCann et al. (2017), which the
ELMo paper (Peters et al. 2018, section 5) adds ELMo to, simplified (one sentence attending to
itself, a ReLU classifier in place of the maxout network) but with the same stages. It is
identical with and without ELMo except for the concatenated ELMo vectors: a
:class:`~elmo.tasks.integration.TaskElmo` with ELMo disabled has ``input_dim == output_dim == 0``
and contributes nothing. ELMo at the *input* is concatenated to the token features, ELMo at the
*output* to the integrator's output.

Masking is exact: what lies beyond the mask (word ids, characters, ELMo values) never changes a
result. The recurrent layers run on packed sequences, attention and pooling ignore masked
positions, and fully masked rows (empty sentences) give zeros rather than NaN.

:class:`ClassifierModel` (the loss and predictions of a classifier over token features and ELMo)
and :func:`bilstm` are shared with the sentence-pair models of :mod:`elmo.tasks.entailment`.

The metric is accuracy; an evaluation also gives each class's precision, recall and F1 and the
confusion (:func:`~elmo.tasks.base.class_scores`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

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
from elmo.tasks.features import TokenFeatures, WordVocab
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import (
    encode,
    masked_max,
    masked_mean,
    masked_min,
    masked_softmax,
    zero_masked,
)
from elmo.tasks.readers import DatasetError, PathLike, numbered_lines


@dataclass
class LabeledSentence:
    """A sentence with one label (sentiment)."""

    tokens: list[str]
    label: str



# ---------------------------------------------------------------------------------------------
# PTB-format trees: SST-5

SST_LABELS = ("0", "1", "2", "3", "4")
_TREE_ATOM = re.compile(r"[^ \t()]+")  # a label or a word; only ASCII space and tab separate


@dataclass
class _Node:
    label: str
    column: int
    words: int = 0
    subtrees: int = 0


def parse_sst_tree(text: str) -> tuple[str, list[str]]:
    """The root label and the leaves (words) of one SST tree such as ``(3 (2 It) (4 works))``.

    Every node is ``(LABEL WORD)`` or ``(LABEL SUBTREE...)`` with LABEL one of ``0``..``4``.
    Only spaces and tabs separate atoms, so a word may hold other whitespace (SST's
    ``8<NBSP>1\\/2`` is one word). Raises ``ValueError`` saying what is wrong and at which
    (1-based) column.
    """
    stack: list[_Node] = []
    leaves: list[str] = []
    root: str | None = None
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char in " \t":
            i += 1
            continue
        if root is not None and char != ")":
            raise ValueError(f"column {i + 1}: text after the end of the tree")
        if char == "(":
            j = i + 1
            while j < n and text[j] in " \t":
                j += 1
            label = _TREE_ATOM.match(text, j)
            if label is None:
                raise ValueError(f"column {i + 1}: node without a label")
            if label.group() not in SST_LABELS:
                raise ValueError(f"column {j + 1}: label {label.group()!r} is not one of 0-4")
            if stack:
                parent = stack[-1]
                if parent.words:
                    raise ValueError(f"column {i + 1}: a node holds both a word and subtrees")
                parent.subtrees += 1
            stack.append(_Node(label.group(), i + 1))
            i = label.end()
        elif char == ")":
            if not stack:
                raise ValueError(f"column {i + 1}: unbalanced parentheses: ')' closes nothing")
            node = stack.pop()
            if not node.words and not node.subtrees:
                raise ValueError(f"column {node.column}: node with label {node.label} is empty")
            if not stack:
                root = node.label
            i += 1
        else:
            word = _TREE_ATOM.match(text, i)
            assert word is not None
            if not stack:
                raise ValueError(f"column {i + 1}: expected '(', found {word.group()!r}")
            node = stack[-1]
            if node.words:
                raise ValueError(f"column {i + 1}: a node holds more than one word")
            if node.subtrees:
                raise ValueError(f"column {i + 1}: a node holds both a word and subtrees")
            node.words = 1
            leaves.append(word.group())
            i = word.end()
    if stack:
        raise ValueError(f"column {n + 1}: unbalanced parentheses: {len(stack)} node(s) not closed")
    if root is None:
        raise ValueError("no tree")
    return root, leaves


def read_sst(path: PathLike) -> list[LabeledSentence]:
    """SST-5 trees, one per line: tokens are the leaves, the label the root's ("0".."4").

    Blank lines are skipped.
    """
    sentences: list[LabeledSentence] = []
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            label, tokens = parse_sst_tree(line)
        except ValueError as e:
            raise DatasetError(path, number, str(e)) from None
        sentences.append(LabeledSentence(tokens=tokens, label=label))
    if not sentences:
        raise DatasetError(path, 1, "no trees")
    return sentences



# --------------------------------------------------------------------------- the model

@dataclass
class ClassificationBatch(TokenBatch):
    """Sentences (see :class:`~elmo.tasks.base.TokenBatch`) and their class ids ``label``
    ``(batch,)`` long."""

    label: torch.Tensor | None = None


def bilstm(input_dim: int, hidden: int) -> nn.LSTM:
    """A one-layer batch-first BiLSTM: ``input_dim`` -> ``2 * hidden``."""
    return nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)


# --------------------------------------------------------------------------- shared pieces

class ClassifierModel(nn.Module):
    """What the sentence and sentence-pair classifiers share: token features with ELMo, the loss
    and the predictions. A batch has ``label`` ``(batch,)`` long for :meth:`loss`."""

    features: TokenFeatures
    elmo: TaskElmo

    def _elmo_parts(self, sentence: TokenBatch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The ELMo vectors ``(batch, time, dim)`` for the input and the output (None where unused),
        zero beyond the mask. Raises ValueError when the model uses ELMo and the batch has none."""
        mask, layers = sentence.mask, sentence.elmo
        if layers is not None and layers.shape[2] != mask.shape[1]:
            raise ValueError(f"ELMo layers cover {layers.shape[2]} tokens, the batch {mask.shape[1]}")
        parts = self.elmo.for_input(layers, mask), self.elmo.for_output(layers, mask)
        return tuple(None if p is None else zero_masked(p, mask) for p in parts)

    def _inputs(self, sentence: TokenBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[features; ELMo input]`` ``(batch, time, features.output_dim + elmo.input_dim)`` and the
        output ELMo ``(batch, time, elmo.output_dim)`` or None."""
        elmo_in, elmo_out = self._elmo_parts(sentence)
        tokens = self.features(sentence.words, sentence.chars)
        return concat(tokens, elmo_in), elmo_out

    def logits(self, batch) -> torch.Tensor:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def forward(self, batch) -> torch.Tensor:
        """Same as :meth:`logits`."""
        return self.logits(batch)

    def loss(self, batch) -> torch.Tensor:
        """Scalar: mean cross-entropy against ``batch.label`` ``(batch,)`` plus the ELMo mixes'
        L2 penalty."""
        logits = self.logits(batch)
        return F.cross_entropy(logits, batch.label) + self.elmo.l2_penalty().to(logits)

    @torch.no_grad()
    def predict(self, batch) -> list[int]:
        """The most likely class of each example. Call ``eval()`` first to turn dropout off."""
        return self.logits(batch).argmax(dim=-1).tolist()


# --------------------------------------------------------------------------- BCN

class SentenceClassifier(ClassifierModel):
    """Biattentive classification network (McCann et al. 2017) for one sentence, e.g. SST-5.

    Stages, with ``H = hidden`` and ``E_in``/``E_out`` the ELMo dims (0 when unused)::

        [features; ELMo_in]                     (B, T, F + E_in)
        -> Linear + ReLU                        (B, T, H)
        -> BiLSTM encoder: X                    (B, T, 2H)
        -> biattention with itself:             A = softmax(X X^T) over real tokens, C = A X
        -> BiLSTM integrator on [X; X-C; X*C]   (B, T, 2H)
        -> [.; ELMo_out]: Y                     (B, T, 2H + E_out)
        -> pool Y: max, mean, min, self-attentive (B, 4 (2H + E_out))
        -> dropout -> Linear + ReLU -> Linear   (B, n_classes)

    Batch: a :class:`ClassificationBatch`.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_classes: int, *, hidden: int = ModelSettings.hidden,
                 dropout: float = ModelSettings.dropout):
        super().__init__()
        self.features = features
        self.elmo = elmo
        self.pre_encode = nn.Linear(features.output_dim + elmo.input_dim, hidden)
        self.encoder = bilstm(hidden, hidden)
        self.integrator = bilstm(3 * 2 * hidden, hidden)
        pooled_dim = 2 * hidden + elmo.output_dim
        self.self_attention = nn.Linear(pooled_dim, 1)
        self.dropout = Dropout(dropout)
        self.hidden = nn.Linear(4 * pooled_dim, hidden)
        self.output = nn.Linear(hidden, n_classes)

    def logits(self, batch: TokenBatch) -> torch.Tensor:
        """``(B, n_classes)`` unnormalised class scores."""
        mask = batch.mask
        inputs, elmo_out = self._inputs(batch)                        # (B, T, F + E_in)
        encoded = encode(self.encoder, torch.relu(self.pre_encode(inputs)), mask)  # X: (B, T, 2H)

        # Biattention of the sentence with itself: every token attends over the real tokens.
        scores = encoded @ encoded.transpose(1, 2)                   # (B, T, T)
        attention = masked_softmax(scores, mask.unsqueeze(1))         # rows: queries, cols: keys
        context = attention @ encoded                                 # C: (B, T, 2H)

        integrated = encode(self.integrator,
                            torch.cat([encoded, encoded - context, encoded * context], dim=-1), mask)
        integrated = concat(integrated, elmo_out)                     # Y: (B, T, 2H + E_out)

        weights = masked_softmax(self.self_attention(integrated).squeeze(-1), mask)  # (B, T)
        self_attended = (weights.unsqueeze(-1) * integrated).sum(dim=1)              # (B, 2H + E_out)
        pooled = torch.cat([masked_max(integrated, mask), masked_mean(integrated, mask),
                            masked_min(integrated, mask), self_attended], dim=-1)
        return self.output(torch.relu(self.hidden(self.dropout(pooled))))


# --------------------------------------------------------------------------- the task

class Classification(Task):
    """Sentence classification: one class per sentence, scored by accuracy."""

    name = "classification"
    metrics = ("accuracy",)
    Settings = ModelSettings
    readers = {"sst5": (read_sst, False)}

    def split(self, examples: list[LabeledSentence]) -> Split:
        """One sentence per example; example ``i`` is row ``i`` of the layers."""
        return Split(examples, [e.tokens for e in examples])

    def label_names(self, examples: Sequence[LabeledSentence]) -> list[str]:
        return sorted({e.label for e in examples})

    def batch(self, split: Split, indices: Sequence[int], vocab: WordVocab,
              labels: dict[str, int]) -> ClassificationBatch:
        examples = [split.examples[i] for i in indices]
        tokens = token_batch([e.tokens for e in examples], vocab, split.layers, list(indices))
        return ClassificationBatch(**tokens.tensors,
                                   label=torch.tensor([labels.get(e.label, 0) for e in examples], dtype=torch.long))

    def build_model(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str]) -> SentenceClassifier:
        return SentenceClassifier(features, elmo, len(labels), hidden=self.settings.hidden,
                                  dropout=self.settings.dropout)

    def decode(self, predicted: list[int], split: Split, indices: Sequence[int], names: Sequence[str]) -> list[str]:
        return [names[p] for p in predicted]

    def evaluate(self, examples: Sequence[LabeledSentence], predictions: list[str]) -> Evaluation:
        """Accuracy; ``details``: the per-class scores and the confusion."""
        gold = [e.label for e in examples]
        return Evaluation(self.metric, accuracy(list(zip(gold, predictions))), class_scores(gold, predictions))

    def report(self, result: dict) -> list[str]:
        return class_report(result["details"])


__all__ = ["Classification", "ClassificationBatch", "ClassifierModel", "LabeledSentence", "SST_LABELS",
           "SentenceClassifier", "bilstm", "parse_sst_tree", "read_sst"]
