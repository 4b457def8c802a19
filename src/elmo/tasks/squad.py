"""Reading comprehension on SQuAD v1.1: BiDAF (Seo et al. 2017) and the official EM/F1.

The model, in a size that trains on a laptop CPU, for a question ``q`` about a context ``c``
(see :class:`~elmo.tasks.readers.SquadQuestion`)::

    both: [word vector; char CNN; ELMo_input] -> dropout -> shared BiLSTM -> [h; ELMo_output]
    similarity S_tj = w . [h_t; u_j; h_t * u_j]
    context-to-query: u~_t = sum_j softmax_j(S_tj) u_j
    query-to-context: h~ = sum_t softmax_t(max_j S_tj) h_t, the same for every t
    G = [h; u~; h * u~; h * h~] -> modelling BiLSTM -> M
    start = w1 . [G; M],  end = w2 . [G; BiLSTM(M)]
    loss: cross entropy of the gold start plus that of the gold end

Decoding picks the span ``(i, j)`` with ``i <= j < i + max_answer_length`` that maximises
``log p_start(i) + log p_end(j)``. ELMo goes to the input and/or the output of the contextual
BiLSTM, before the attention, as the paper did for SQuAD. The self-attention layer of Clark and
Gardner (2017), which the paper's baseline had, is not here (see docs/tasks.md).

The metric is the official one (``evaluate-v1.1.py``): answers are normalised (lower case, no
punctuation, no articles ``a``/``an``/``the``, single spaces), exact match and token F1 are taken
as the maximum over the gold answers, and both are averaged over the questions.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import torch
from torch import nn

from elmo.model.dropout import Dropout
from elmo.tasks.features import TokenFeatures
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode, masked_softmax


# ------------------------------------------------------------------------------ metric
def normalize_answer(text: str) -> str:
    """The official normalisation: lower case, punctuation removed, the articles a/an/the
    removed, whitespace collapsed to single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised tokens of a prediction against one gold answer (bags of tokens)."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def squad_scores(gold: Sequence[Sequence[str]], predicted: Sequence[str]) -> dict:
    """``{"exact_match", "f1"}`` (fractions) of predicted answer texts against each question's
    gold answer texts, each the maximum over the gold answers, averaged over the questions."""
    if len(gold) != len(predicted):
        raise ValueError(f"squad_scores: {len(gold)} questions but {len(predicted)} predictions")
    if not gold:
        return {"exact_match": 0.0, "f1": 0.0}
    em = sum(max((exact_match(p, g) for g in answers), default=0.0) for answers, p in zip(gold, predicted))
    f1 = sum(max((token_f1(p, g) for g in answers), default=0.0) for answers, p in zip(gold, predicted))
    return {"exact_match": em / len(gold), "f1": f1 / len(gold)}


# ------------------------------------------------------------------------------ decoding
def best_spans(start_logits: torch.Tensor, end_logits: torch.Tensor, mask: torch.Tensor,
               max_answer_length: int) -> list[tuple[int, int]]:
    """The best ``(start, end)`` of each row: ``start <= end < start + max_answer_length``, both
    real tokens, maximising ``log_softmax(start)[start] + log_softmax(end)[end]``.
    ``start_logits``/``end_logits``: ``(batch, time)``; ``mask``: ``(batch, time)``."""
    very_negative = torch.finfo(start_logits.dtype).min
    start = torch.log_softmax(start_logits.masked_fill(~mask, very_negative), dim=-1)
    end = torch.log_softmax(end_logits.masked_fill(~mask, very_negative), dim=-1)
    time = start.shape[1]
    scores = start.unsqueeze(2) + end.unsqueeze(1)  # (batch, start, end)
    positions = torch.arange(time)
    width = positions.view(1, -1) - positions.view(-1, 1)
    allowed = (width >= 0) & (width < max_answer_length)
    allowed = allowed.unsqueeze(0) & mask.unsqueeze(2) & mask.unsqueeze(1)
    best = scores.masked_fill(~allowed, -torch.inf).view(len(scores), -1).argmax(dim=1)
    return [(int(b) // time, int(b) % time) for b in best]


# ------------------------------------------------------------------------------ model
class BiDAF(nn.Module):
    """BiDAF with optional ELMo at the input and/or the contextual encoder's output.

    ``hidden``: LSTM size per direction; ``modelling_layers``: layers of the modelling BiLSTM;
    ``max_answer_length``: the longest span decoding returns, in tokens.

    A batch is ``{"context": side, "question": side, "span": (batch, 2)}``, each side a dict as the
    tagger's batch (``words``, ``chars``, ``mask``, ``elmo``); ``span`` (the gold start and end
    token) is needed by the loss only.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, *, hidden: int = 100, dropout: float = 0.2,
                 modelling_layers: int = 1, max_answer_length: int = 30):
        super().__init__()
        if modelling_layers < 1 or max_answer_length < 1:
            raise ValueError("BiDAF: modelling_layers and max_answer_length must be at least 1")
        self.features = features
        self.elmo = elmo
        self.max_answer_length = max_answer_length
        self.dropout = Dropout(dropout)
        input_dim = features.output_dim + elmo.input_dim
        self.contextual = nn.LSTM(input_dim, hidden, bidirectional=True, batch_first=True)
        d = 2 * hidden + elmo.output_dim
        self.similarity = nn.Linear(3 * d, 1)
        self.modelling = nn.LSTM(4 * d, hidden, num_layers=modelling_layers, bidirectional=True, batch_first=True,
                                 dropout=dropout if modelling_layers > 1 else 0.0)
        self.end_encoder = nn.LSTM(2 * hidden, hidden, bidirectional=True, batch_first=True)
        self.start_scorer = nn.Linear(4 * d + 2 * hidden, 1)
        self.end_scorer = nn.Linear(4 * d + 2 * hidden, 1)

    def encode_side(self, side: dict) -> torch.Tensor:
        """The contextual states ``(batch, time, d)`` of one side (context or question)."""
        mask = side["mask"].bool()
        layers = side.get("elmo")
        inputs = self.dropout(concat(self.features(side["words"], side["chars"]), self.elmo.for_input(layers, mask)))
        return self.dropout(concat(encode(self.contextual, inputs, mask), self.elmo.for_output(layers, mask)))

    def attention(self, h: torch.Tensor, u: torch.Tensor, c_mask: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
        """``G`` ``(batch, c_time, 4d)`` from context states ``h`` ``(batch, c_time, d)`` and
        question states ``u`` ``(batch, q_time, d)``."""
        d = h.shape[-1]
        w_h, w_u, w_hu = self.similarity.weight[0].split(d)
        # w . [h; u; h * u] for every (t, j), without building the (t, j, 3d) tensor
        similarity = ((h @ w_h).unsqueeze(2) + (u @ w_u).unsqueeze(1) + (h * w_hu) @ u.transpose(1, 2)
                      + self.similarity.bias)
        c2q = masked_softmax(similarity, q_mask.unsqueeze(1)) @ u
        very_negative = torch.finfo(similarity.dtype).min
        best = similarity.masked_fill(~q_mask.unsqueeze(1), very_negative).max(dim=2).values
        q2c = (masked_softmax(best, c_mask).unsqueeze(1) @ h).expand_as(h)
        return torch.cat([h, c2q, h * c2q, h * q2c], dim=-1)

    def logits(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end scores ``(batch, c_time)`` (unnormalised, padding included)."""
        c_mask, q_mask = batch["context"]["mask"].bool(), batch["question"]["mask"].bool()
        h, u = self.encode_side(batch["context"]), self.encode_side(batch["question"])
        g = self.attention(h, u, c_mask, q_mask)
        m = self.dropout(encode(self.modelling, g, c_mask))
        m2 = self.dropout(encode(self.end_encoder, m, c_mask))
        return (self.start_scorer(torch.cat([g, m], -1)).squeeze(-1),
                self.end_scorer(torch.cat([g, m2], -1)).squeeze(-1))

    def loss(self, batch: dict) -> torch.Tensor:
        """Mean over questions of the start and end cross entropies, plus the ELMo mixes' L2 penalty."""
        mask = batch["context"]["mask"].bool()
        start, end = self.logits(batch)
        very_negative = torch.finfo(start.dtype).min
        loss = (nn.functional.cross_entropy(start.masked_fill(~mask, very_negative), batch["span"][:, 0])
                + nn.functional.cross_entropy(end.masked_fill(~mask, very_negative), batch["span"][:, 1]))
        return loss + self.elmo.l2_penalty()

    @torch.no_grad()
    def predict(self, batch: dict) -> list[tuple[int, int]]:
        """The best answer span ``(start, end)`` (context tokens, inclusive) of each question.
        Call ``eval()`` first for deterministic output."""
        start, end = self.logits(batch)
        return best_spans(start, end, batch["context"]["mask"].bool(), self.max_answer_length)


__all__ = ["BiDAF", "best_spans", "exact_match", "normalize_answer", "squad_scores", "token_f1"]
