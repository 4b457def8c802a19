"""Dropout that is fast on the CPU, for the task models and the scalar mix.

torch's dropout on the CPU draws its mask with ``bernoulli_``, which costs about three times as
much as drawing uniform numbers and comparing them with ``p`` (1.9M elements on one thread of the
2-core development machine: 27 ms against 8 ms). In a task model's training step that was about a
tenth of the time (``benchmarks/task_step.py --compare dropout`` at commit 29d2312). The mask here has the same
distribution, each element kept with probability ``1 - p`` and the kept ones scaled by
``1 / (1 - p)``; only the way the random numbers are drawn differs, so a run is not bitwise the
run that ``nn.Dropout`` would give with the same seed. On other devices torch's fused kernel is the
faster one, and is used.
"""

from __future__ import annotations

import torch
from torch import nn


def dropout(inputs: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``inputs`` (any shape) with each element zeroed with probability ``p`` and the others scaled
    by ``1 / (1 - p)`` while ``training``; ``inputs`` itself otherwise."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be between 0 and 1, got {p}")
    if not training or p == 0.0:
        return inputs
    if p == 1.0:
        return inputs * 0.0
    if inputs.device.type != "cpu":
        return nn.functional.dropout(inputs, p, True)
    # A uniform draw in [0, 1) is >= p with probability 1 - p. ge_ leaves 0.0/1.0 in the draw's own
    # float tensor, so the mask needs no second allocation.
    keep = torch.rand_like(inputs).ge_(p).mul_(1.0 / (1.0 - p))
    return inputs * keep


class Dropout(nn.Dropout):
    """``nn.Dropout`` with :func:`dropout`'s faster CPU mask (same constructor, no parameters, so
    checkpoints are those of ``nn.Dropout``)."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return dropout(inputs, self.p, self.training)
