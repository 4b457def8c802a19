"""AllenNLP's ``allennlp.modules.scalar_mix.ScalarMix``: its constructor, its forward and its
parameters by name and shape (``scalar_parameters.{k}`` ``(1,)`` each, ``gamma`` ``(1,)``), so
that ``elmo.scalar_mix_0.scalar_parameters`` and AllenNLP's ``state_dict`` keys work unchanged.
The arithmetic is the library's (:mod:`elmo.model.network`), which is AllenNLP's.
"""

from __future__ import annotations

import torch
from torch import nn

from elmo.model.network import masked_layer_norm


class ScalarMix(nn.Module):
    """``gamma * sum_k softmax(w)_k * tensor_k``, with ``w`` and ``gamma`` scalar parameters.

    ``initial_scalar_parameters``: the ``mixture_size`` starting values of ``w`` (zeros: equal
    weights); ``trainable=False`` freezes ``w`` and ``gamma``, as AllenNLP's ``Elmo`` does when
    given ``scalar_mix_parameters``. ``do_layer_norm``: normalise each tensor over its unmasked
    elements first (then ``forward`` needs the mask).
    """

    def __init__(self, mixture_size: int, do_layer_norm: bool = False,
                 initial_scalar_parameters: list[float] | None = None, trainable: bool = True):
        super().__init__()
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        elif len(initial_scalar_parameters) != mixture_size:
            raise ValueError(f"initial_scalar_parameters: {len(initial_scalar_parameters)} values for a mixture of "
                             f"{mixture_size}")
        self.scalar_parameters = nn.ParameterList(
            nn.Parameter(torch.tensor([float(value)]), requires_grad=trainable) for value in initial_scalar_parameters)
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)
        self.register_load_state_dict_pre_hook(_split_scalars)

    def layer_weights(self) -> torch.Tensor:
        """The softmax-normalised weights ``(mixture_size,)``."""
        return torch.softmax(torch.cat(list(self.scalar_parameters)), dim=0)

    def forward(self, tensors: list[torch.Tensor] | torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``tensors``: ``mixture_size`` tensors ``(batch, time, dim)`` (or one tensor ``(batch,
        mixture_size, time, dim)``); ``mask`` ``(batch, time)`` -> ``(batch, time, dim)``."""
        if isinstance(tensors, torch.Tensor):
            tensors = list(tensors.unbind(dim=1))
        if len(tensors) != self.mixture_size:
            raise ValueError(f"{len(tensors)} tensors were passed, but the module was initialized to mix "
                             f"{self.mixture_size} tensors.")
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("mask: needed with do_layer_norm")
            tensors = [masked_layer_norm(t, mask.bool()) for t in tensors]
        weights = self.layer_weights().to(tensors[0].dtype)
        return self.gamma.to(tensors[0].dtype) * sum(w * t for w, t in zip(weights, tensors))


def _split_scalars(module: ScalarMix, state: dict, prefix: str, metadata, strict, missing, unexpected,
                   errors) -> None:
    """Read the one ``scalars`` ``(mixture_size,)`` tensor that ``state_dict``\\ s of the drop-in
    held before it took AllenNLP's names, as AllenNLP's ``scalar_parameters.{k}``."""
    scalars = state.get(prefix + "scalars")
    if scalars is not None and tuple(scalars.shape) == (module.mixture_size,):
        del state[prefix + "scalars"]
        for k, value in enumerate(scalars.split(1)):
            state[f"{prefix}scalar_parameters.{k}"] = value


__all__ = ["ScalarMix"]
