"""Task models for sentence classification (SST-5) and sentence-pair inference (SNLI, SICK).

Two classic architectures the ELMo paper (Peters et al. 2018, section 5) adds ELMo to:

* :class:`SentenceClassifier`: the biattentive classification network (BCN) of McCann et al.
  (2017), used for SST-5, simplified (one sentence attending to itself, a ReLU classifier in
  place of the maxout network) but with the same stages;
* :class:`ESIM`: the enhanced sequential inference model of Chen et al. (2017), used for SNLI.

Each model is identical with and without ELMo except for the concatenated ELMo vectors: a
:class:`~elmo.tasks.integration.TaskElmo` with ELMo disabled has ``input_dim == output_dim == 0``
and contributes nothing. ELMo at the *input* is concatenated to the token features, ELMo at the
*output* to the encoder output the paper names (BCN: the integrator's output; ESIM: the input
encoder BiLSTM's output, before the attention, as in the paper's section 5.1).

Batches follow :mod:`elmo.tasks.features`; one sentence (or one side of a pair) is a dict

* ``"words"``: ``(batch, time)`` long; ``"chars"``: ``(batch, time, max_chars)`` long;
* ``"mask"``: ``(batch, time)`` bool, True at real tokens, which come first in each row;
* ``"elmo"``: ``(batch, L+1, time, dim)`` cached biLM layers, or None for a model without ELMo.

Masking is exact: what lies beyond the mask (word ids, characters, ELMo values) never changes a
result. The recurrent layers run on packed sequences, attention and pooling ignore masked
positions, and fully masked rows (empty sentences) give zeros rather than NaN.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from elmo.model.dropout import Dropout
from elmo.tasks.features import TokenFeatures
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import (
    encode,
    masked_max,
    masked_mean,
    masked_min,
    masked_softmax,
    zero_masked,
)

Batch = dict  # a sentence dict as in the module docstring, or a pair/labelled batch of them


def bilstm(input_dim: int, hidden: int) -> nn.LSTM:
    """A one-layer batch-first BiLSTM: ``input_dim`` -> ``2 * hidden``."""
    return nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True)


# --------------------------------------------------------------------------- shared pieces

class _TaskModel(nn.Module):
    """What both models share: token features with ELMo, the loss and the predictions."""

    features: TokenFeatures
    elmo: TaskElmo

    def _elmo_parts(self, sentence: Batch) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The ELMo vectors ``(batch, time, dim)`` for the input and the output (None where unused),
        zero beyond the mask. Raises ValueError when the model uses ELMo and the batch has none."""
        mask, layers = sentence["mask"], sentence.get("elmo")
        if layers is not None and layers.shape[2] != mask.shape[1]:
            raise ValueError(f"ELMo layers cover {layers.shape[2]} tokens, the batch {mask.shape[1]}")
        parts = self.elmo.for_input(layers, mask), self.elmo.for_output(layers, mask)
        return tuple(None if p is None else zero_masked(p, mask) for p in parts)

    def _inputs(self, sentence: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[features; ELMo input]`` ``(batch, time, features.output_dim + elmo.input_dim)`` and the
        output ELMo ``(batch, time, elmo.output_dim)`` or None."""
        elmo_in, elmo_out = self._elmo_parts(sentence)
        tokens = self.features(sentence["words"], sentence["chars"])
        return concat(tokens, elmo_in), elmo_out

    def logits(self, batch: Batch) -> torch.Tensor:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def forward(self, batch: Batch) -> torch.Tensor:
        """Same as :meth:`logits`."""
        return self.logits(batch)

    def loss(self, batch: Batch) -> torch.Tensor:
        """Scalar: mean cross-entropy against ``batch["label"]`` ``(batch,)`` plus the ELMo mixes'
        L2 penalty."""
        logits = self.logits(batch)
        return F.cross_entropy(logits, batch["label"]) + self.elmo.l2_penalty().to(logits)

    @torch.no_grad()
    def predict(self, batch: Batch) -> list[int]:
        """The most likely class of each example. Call ``eval()`` first to turn dropout off."""
        return self.logits(batch).argmax(dim=-1).tolist()


# --------------------------------------------------------------------------- BCN

class SentenceClassifier(_TaskModel):
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

    Batch: a sentence dict (``"words"``, ``"chars"``, ``"mask"``, ``"elmo"``) plus ``"label"``
    ``(B,)`` long for :meth:`loss`.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_classes: int, *,
                 hidden: int = 100, dropout: float = 0.3):
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

    def logits(self, batch: Batch) -> torch.Tensor:
        """``(B, n_classes)`` unnormalised class scores."""
        mask = batch["mask"]
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


# --------------------------------------------------------------------------- ESIM

class ESIM(_TaskModel):
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

    Both sides share every layer, including the ELMo mixes. Batch: ``"premise"`` and
    ``"hypothesis"``, each a sentence dict, and ``"label"`` ``(B,)`` long for :meth:`loss`.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_classes: int, *,
                 hidden: int = 100, dropout: float = 0.5):
        super().__init__()
        self.features = features
        self.elmo = elmo
        self.dropout = Dropout(dropout)
        self.input_encoder = bilstm(features.output_dim + elmo.input_dim, hidden)
        self.projection = nn.Linear(4 * (2 * hidden + elmo.output_dim), hidden)
        self.composition = bilstm(hidden, hidden)
        self.hidden = nn.Linear(4 * 2 * hidden, hidden)
        self.output = nn.Linear(hidden, n_classes)

    def logits(self, batch: Batch) -> torch.Tensor:
        """``(B, n_classes)`` unnormalised class scores."""
        premise, hypothesis = batch["premise"], batch["hypothesis"]
        mask_a, mask_b = premise["mask"], hypothesis["mask"]
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


__all__ = ["ESIM", "SentenceClassifier", "bilstm"]
