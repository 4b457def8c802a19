"""Task-specific collapse of the biLM layers into one vector per token.

``ELMo_k = gamma * sum_j softmax(s)_j * h_{k,j}`` (Peters et al. 2018, eq. 1), with optional layer
normalisation of each ``h_j`` before mixing, dropout on the result and an L2 penalty on ``s``.
"""

from __future__ import annotations

import torch
from torch import nn

from elmo.model.dropout import Dropout

LAYER_NORM_EPS = 1e-12  # bilm-tf's weight_layers uses the same


def masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Normalise one biLM layer as the original does: a single mean and variance over *all*
    unmasked elements of the batch (not per token). ``layer``: ``(batch, time, dim)``,
    ``mask``: ``(batch, time)``."""
    keep = mask.unsqueeze(-1).to(layer.dtype)
    count = keep.sum() * layer.shape[-1]
    mean = (layer * keep).sum() / count
    variance = (((layer - mean) * keep) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + LAYER_NORM_EPS)


class ScalarMix(nn.Module):
    """Mix ``n_layers`` biLM layers into one.

    ``mode``: ``"mix"`` (learned softmax weights), ``"average"`` (fixed equal weights), ``"top"``
    (last layer only) or an ``int`` (that single layer). ``gamma`` is learned in every mode.
    ``l2_coef`` is the paper's lambda: :meth:`l2_penalty` returns ``l2_coef * sum(s**2)`` for the
    task to add to its loss (zero for the fixed modes).
    """

    def __init__(self, n_layers: int, mode: str | int = "mix", do_layer_norm: bool = False,
                 dropout: float = 0.0, l2_coef: float = 0.0):
        super().__init__()
        if isinstance(mode, int) and not isinstance(mode, bool):
            if not -n_layers <= mode < n_layers:
                raise ValueError(f"mode: layer {mode} does not exist; the biLM has {n_layers} layers")
        elif mode not in ("mix", "average", "top"):
            raise ValueError(f"mode: expected 'mix', 'average', 'top' or a layer index, got {mode!r}")
        self.n_layers, self.mode, self.do_layer_norm, self.l2_coef = n_layers, mode, do_layer_norm, l2_coef
        # s starts at 0 (equal weights) and gamma at 1; s only trains in "mix" mode.
        self.scalars = nn.Parameter(torch.zeros(n_layers), requires_grad=(mode == "mix"))
        self.gamma = nn.Parameter(torch.ones(1))
        self.dropout = Dropout(dropout)

    def layer_weights(self) -> torch.Tensor:
        """The softmax-normalised layer weights ``(n_layers,)`` this mix applies."""
        if self.mode in ("mix", "average"):
            return torch.softmax(self.scalars, dim=0)
        index = self.n_layers - 1 if self.mode == "top" else self.mode % self.n_layers
        return torch.nn.functional.one_hot(torch.tensor(index), self.n_layers).to(self.gamma.dtype)

    def forward(self, layers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``layers``: ``(batch, n_layers, time, dim)``; ``mask``: ``(batch, time)`` ->
        ``(batch, time, dim)``."""
        if layers.shape[1] != self.n_layers:
            raise ValueError(f"ScalarMix built for {self.n_layers} layers got {layers.shape[1]}")
        if self.mode in ("top",) or isinstance(self.mode, int):
            index = self.n_layers - 1 if self.mode == "top" else self.mode
            chosen = [layers[:, index]]
            weights = torch.ones(1, dtype=layers.dtype, device=layers.device)
        else:
            chosen = list(layers.unbind(dim=1))
            weights = torch.softmax(self.scalars, dim=0).to(layers.dtype)
        if self.do_layer_norm:
            chosen = [masked_layer_norm(h, mask) for h in chosen]
        mixed = sum(w * h for w, h in zip(weights, chosen))
        return self.dropout(self.gamma.to(layers.dtype) * mixed)

    def l2_penalty(self) -> torch.Tensor:
        """``l2_coef * sum(s**2)``: add it to the task loss (the paper's lambda * ||w||^2)."""
        if self.mode != "mix":
            return self.scalars.new_zeros(())
        return self.l2_coef * (self.scalars ** 2).sum()
