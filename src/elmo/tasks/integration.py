"""How a task model uses ELMo: where the vectors go and how the biLM layers are mixed.

The biLM is frozen, so its layers ``(batch, L+1, time, dim)`` are computed once per data set
(:mod:`elmo.tasks.layer_cache`) and a task only learns its mixes. Following the paper (section
3.3 and Tables 2-3), ELMo can be concatenated to the task's input ``[x_k; ELMo_k]``, to the
output of its encoder ``[h_k; ELMo_k]`` (with a mix of its own), or both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elmo.scalar_mix import ScalarMix

PLACEMENTS = ("input", "output", "both")


@dataclass
class ElmoOptions:
    """ELMo settings of a task model.

    ``enabled=False`` is the baseline: the identical model without ELMo. ``layers`` is
    ``"mix"`` (learned weights, the paper's default), ``"average"``, ``"top"`` or a layer index.
    ``l2`` is the paper's lambda on the mix weights (it compares 1 and 0.001), ``dropout`` acts
    on the ELMo vector, ``layer_norm`` normalises each layer before mixing.
    """

    enabled: bool = True
    placement: str = "input"
    layers: str | int = "mix"
    dropout: float = 0.5
    l2: float = 0.001
    layer_norm: bool = False

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"elmo.placement: expected one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if not (isinstance(self.layers, int) or self.layers in ("mix", "average", "top")):
            raise ValueError(f"elmo.layers: expected 'mix', 'average', 'top' or a layer index, got {self.layers!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"elmo.dropout: expected a value in [0, 1), got {self.dropout}")
        if self.l2 < 0:
            raise ValueError(f"elmo.l2: must not be negative, got {self.l2}")


class TaskElmo(nn.Module):
    """The task's scalar mixes over cached biLM layers, one per place ELMo is used.

    ``n_layers``/``dim``: the biLM's ``L+1`` layers of ``dim`` each. With ELMo disabled it
    contributes nothing (``input_dim == output_dim == 0``) and returns ``None``.
    """

    def __init__(self, options: ElmoOptions, n_layers: int, dim: int):
        super().__init__()
        self.options = options
        self.dim = dim
        make = lambda: ScalarMix(n_layers, mode=options.layers, do_layer_norm=options.layer_norm,  # noqa: E731
                                 dropout=options.dropout, l2_coef=options.l2)
        use_input = options.enabled and options.placement in ("input", "both")
        use_output = options.enabled and options.placement in ("output", "both")
        self.input_mix = make() if use_input else None
        self.output_mix = make() if use_output else None

    @property
    def input_dim(self) -> int:
        return self.dim if self.input_mix is not None else 0

    @property
    def output_dim(self) -> int:
        return self.dim if self.output_mix is not None else 0

    def for_input(self, layers: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
        """``(batch, time, dim)`` ELMo vectors for the model's input, or None."""
        return self._mix(self.input_mix, layers, mask)

    def for_output(self, layers: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
        """``(batch, time, dim)`` ELMo vectors for the encoder's output, or None."""
        return self._mix(self.output_mix, layers, mask)

    @staticmethod
    def _mix(mix: ScalarMix | None, layers: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
        if mix is None:
            return None
        if layers is None:
            raise ValueError("this model uses ELMo, but the batch carries no biLM layers")
        return mix(layers, mask)

    def l2_penalty(self) -> torch.Tensor:
        """The mixes' L2 penalties (lambda * sum s^2), to add to the task loss."""
        mixes = [m for m in (self.input_mix, self.output_mix) if m is not None]
        if not mixes:
            return torch.zeros(())
        return torch.stack([m.l2_penalty() for m in mixes]).sum()

    def layer_weights(self) -> dict[str, list[float]]:
        """The softmax-normalised layer weights of each mix (for the paper's Figure 2)."""
        return {name: mix.layer_weights().tolist() for name, mix in
                (("input", self.input_mix), ("output", self.output_mix)) if mix is not None}


def concat(*parts: torch.Tensor | None) -> torch.Tensor:
    """Concatenate the given ``(batch, time, d_i)`` tensors on the last axis, skipping None."""
    return torch.cat([p for p in parts if p is not None], dim=-1)


__all__ = ["ElmoOptions", "PLACEMENTS", "TaskElmo", "concat"]
