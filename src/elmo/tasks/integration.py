"""How a task model uses ELMo: where the vectors go and how the biLM layers are mixed.

The biLM is frozen, so its layers ``(batch, L+1, time, dim)`` are computed once per data set
(:mod:`elmo.inference.layer_cache`) and a task only learns its mixes. Following the paper (section
3.3 and Tables 2-3), ELMo can be concatenated to the task's input ``[x_k; ELMo_k]``, to the
output of its encoder ``[h_k; ELMo_k]`` (with a mix of its own), or both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elmo.checks import check_number
from elmo.inference.elmo import Elmo
from elmo.model.network import ScalarMix

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
        check_number(self.dropout, "elmo.dropout", 0, below=1)
        check_number(self.l2, "elmo.l2")


class TaskElmo(nn.Module):
    """Where a task model puts ELMo: an :class:`~elmo.inference.elmo.Elmo` over cached biLM layers
    (:meth:`Elmo.for_cached_layers`) with one mix for the input and/or one for the output.

    ``n_layers``/``dim``: the biLM's ``L+1`` layers of ``dim`` each. With ELMo disabled it
    contributes nothing (``input_dim == output_dim == 0``) and returns ``None``.
    """

    def __init__(self, options: ElmoOptions, n_layers: int, dim: int):
        super().__init__()
        self.options = options
        self.dim = dim
        self.places = [place for place, placements in (("input", ("input", "both")), ("output", ("output", "both")))
                       if options.enabled and options.placement in placements]
        self.elmo = (Elmo.for_cached_layers(n_layers, dim, len(self.places), mode=options.layers,
                                            do_layer_norm=options.layer_norm, dropout=options.dropout,
                                            l2_coef=options.l2)
                     if self.places else None)

    def _mix_for(self, place: str) -> ScalarMix | None:
        return self.elmo.mixes[self.places.index(place)] if place in self.places else None

    @property
    def input_mix(self) -> ScalarMix | None:
        return self._mix_for("input")

    @property
    def output_mix(self) -> ScalarMix | None:
        return self._mix_for("output")

    @property
    def input_dim(self) -> int:
        return self.dim if "input" in self.places else 0

    @property
    def output_dim(self) -> int:
        return self.dim if "output" in self.places else 0

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
        if self.elmo is None:
            return torch.zeros(())
        return self.elmo.l2_penalty()

    def layer_weights(self) -> dict[str, list[float]]:
        """The softmax-normalised layer weights of each mix (for the paper's Figure 2)."""
        return {place: self._mix_for(place).layer_weights().tolist() for place in self.places}


def concat(*parts: torch.Tensor | None) -> torch.Tensor:
    """Concatenate the given ``(batch, time, d_i)`` tensors on the last axis, skipping None."""
    return torch.cat([p for p in parts if p is not None], dim=-1)


__all__ = ["ElmoOptions", "PLACEMENTS", "TaskElmo", "concat"]
