"""Masked building blocks of the task models: padding never changes a result.

Tensors are batch-first; ``mask`` ``(batch, time)`` is True at real tokens, which come first in
each row. Fully masked rows (empty sentences) give zeros rather than NaN.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def _very_negative(tensor: torch.Tensor) -> float:
    """The most negative finite value of ``tensor``'s dtype: a fill that loses every max and softmax."""
    return torch.finfo(tensor.dtype).min


def encode(lstm: nn.LSTM, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Run a batch-first ``lstm`` over the real tokens of each row only.

    ``inputs``: ``(batch, time, in_dim)``; ``mask``: ``(batch, time)`` with the real tokens first.
    Returns ``(batch, time, out_dim)``, zero at masked positions. The sequences are packed, so the
    backward direction of a bidirectional LSTM starts at each row's last real token and padding
    never leaks in. Empty rows are run over one (padding) step and then zeroed.
    """
    lengths = mask.sum(dim=1).clamp(min=1).cpu()
    packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    outputs, _ = lstm(packed)
    outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=inputs.shape[1])
    return zero_masked(outputs, mask)


def zero_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values``: ``(batch, time, dim)`` with the positions where ``mask`` ``(batch, time)`` is False set to 0."""
    return values.masked_fill(~mask.unsqueeze(-1), 0.0)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` over the positions where ``mask`` (broadcastable) is True.

    Masked positions get weight exactly 0; a slice with no allowed position is all zeros (not NaN).
    """
    scores = scores.masked_fill(~mask, _very_negative(scores))
    return torch.softmax(scores, dim=dim) * mask.to(scores.dtype)


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over time of the real tokens: ``(batch, time, dim)``, ``(batch, time)`` -> ``(batch, dim)``
    (zeros for an empty row)."""
    filled = values.masked_fill(~mask.unsqueeze(-1), _very_negative(values))
    return filled.max(dim=1).values.masked_fill(~mask.any(dim=1, keepdim=True), 0.0)


def masked_min(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Min over time of the real tokens: ``(batch, time, dim)``, ``(batch, time)`` -> ``(batch, dim)``."""
    return -masked_max(-values, mask)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over time of the real tokens: ``(batch, time, dim)``, ``(batch, time)`` -> ``(batch, dim)``."""
    total = zero_masked(values, mask).sum(dim=1)
    count = mask.sum(dim=1, keepdim=True).clamp(min=1).to(values.dtype)
    return total / count


__all__ = ["encode", "masked_max", "masked_mean", "masked_min", "masked_softmax", "zero_masked"]
