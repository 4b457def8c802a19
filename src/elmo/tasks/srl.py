"""Semantic role labelling: a deep BiLSTM tagger over one predicate at a time (He et al. 2017).

Each instance is one predicate of a sentence (:class:`~elmo.tasks.readers.SrlInstance`), its
arguments as BIO tags. The model, in a size that trains on a laptop CPU::

    [word vector; char CNN; predicate indicator; ELMo_input] -> dropout
        -> BiLSTM -> BiLSTM + residual -> ... -> dropout -> [h; ELMo_output]
        -> linear -> per-token softmax over BIO tags

and decoding is Viterbi over the softmax's log-probabilities with the BIO constraints as the
only transition scores (``I-X`` only after ``B-X`` or ``I-X``, never first), so a prediction
is always a valid tag sequence. He et al. used 8 layers with highway connections and
alternating directions; here the layers are bidirectional and joined by residual connections.

The metric is the CoNLL-2005 one (``srl-eval.pl``): precision, recall and F1 of labelled
arguments with exact boundaries, the predicate's own ``V`` excluded. A continuation argument
(``C-ARG1``) is one piece of the argument it continues: the argument counts as correct only if
every piece matches. Reference arguments (``R-ARG0``) are arguments of their own role.

A batch is the tagger's (see :mod:`elmo.tasks.tagger`) plus ``"predicate"`` ``(batch, time)``
long, 1 at the predicate's token and 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from elmo.model.dropout import Dropout
from elmo.tasks.features import TokenFeatures
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode
from elmo.tasks.tagger import CRF

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
class SrlTagger(nn.Module):
    """Deep BiLSTM SRL tagger with optional ELMo at its input and/or output.

    ``labels``: the BIO tag names, in the order of the model's outputs (for the decoding
    constraints); ``hidden``: LSTM size per direction; ``layers``: stacked BiLSTMs, each after the
    first with a residual connection; ``predicate_dim``: size of the predicate-indicator
    embedding; ``dropout``: before, between and after the BiLSTMs.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, labels: Sequence[str], *, hidden: int = 100,
                 layers: int = 2, dropout: float = 0.5, predicate_dim: int = 10):
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

    def scores(self, batch: dict) -> torch.Tensor:
        """Unnormalised tag scores ``(batch, time, n_tags)``."""
        mask = batch["mask"].bool()
        layers = batch.get("elmo")
        inputs = concat(self.features(batch["words"], batch["chars"]), self.predicate(batch["predicate"]),
                        self.elmo.for_input(layers, mask))
        hidden = self.dropout(inputs)
        for i, encoder in enumerate(self.encoders):
            # Packed, so padding stays out of both directions.
            encoded = encode(encoder, hidden, mask)
            hidden = self.dropout(encoded if i == 0 else hidden + encoded)
        return self.projection(concat(hidden, self.elmo.for_output(layers, mask)))

    def loss(self, batch: dict) -> torch.Tensor:
        """Mean cross entropy per real token, plus the ELMo mixes' L2 penalty."""
        mask = batch["mask"].bool()
        scores = self.scores(batch)
        loss = nn.functional.cross_entropy(scores[mask], batch["tags"][mask])
        return loss + self.elmo.l2_penalty().to(loss.device)

    @torch.no_grad()
    def predict(self, batch: dict) -> list[list[int]]:
        """Tag ids of each instance, without padding: the best valid BIO sequence.
        Call ``eval()`` first for deterministic output."""
        log_probs = torch.log_softmax(self.scores(batch), dim=-1)
        return self.decoder(log_probs, batch["mask"].bool())


__all__ = ["BioDecoder", "SrlTagger", "bio_constraints", "bio_spans", "srl_arguments", "srl_scores"]
