"""ELMo for task models: a frozen biLM plus independent scalar mixes.

A task that uses ELMo in ``N`` places (say, at its input and at its output) asks for ``N`` mixes;
each learns its own layer weights and scale on the same frozen biLM layers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elmo.bilm import BiLM
from elmo.chars import batch_to_char_ids
from elmo.scalar_mix import ScalarMix
from elmo.states import DEFAULT_STATE, StateKeeper


@dataclass
class ElmoOutput:
    """``representations``: one ``(batch, time, 2*projection_dim)`` tensor per mix; ``mask``: ``(batch, time)``."""

    representations: list[torch.Tensor]
    mask: torch.Tensor


class Elmo(nn.Module):
    """Frozen biLM + ``num_output_representations`` scalar mixes.

    Without ``bilm``, the packaged default model is used (see :mod:`elmo.pretrained`).

    ``mode``, ``do_layer_norm``, ``dropout`` and ``l2_coef`` configure every mix (see
    :class:`~elmo.scalar_mix.ScalarMix`); ``state`` picks the LSTM state policy
    (:mod:`elmo.states`). The biLM stays in eval mode and gets no gradients.
    """

    def __init__(self, bilm: BiLM | None = None, num_output_representations: int = 1, *, mode: str | int = "mix",
                 do_layer_norm: bool = False, dropout: float = 0.5, l2_coef: float = 0.0,
                 state: str = DEFAULT_STATE):
        super().__init__()
        if bilm is None:
            from elmo.pretrained import load_pretrained

            bilm = load_pretrained()
        self.bilm = bilm
        for p in self.bilm.parameters():
            p.requires_grad_(False)
        self.bilm.eval()
        n_layers = bilm.config.n_output_layers
        self.mixes = nn.ModuleList(ScalarMix(n_layers, mode=mode, do_layer_norm=do_layer_norm,
                                             dropout=dropout, l2_coef=l2_coef)
                                   for _ in range(num_output_representations))
        self.states = StateKeeper(bilm, state)

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Elmo":
        """Build from the original ``options.json`` + ``weights.hdf5``."""
        from elmo.weights import load_bilm_tf

        return cls(load_bilm_tf(options_file, weights_file), **kwargs)

    @classmethod
    def from_pretrained(cls, name: str = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Elmo":
        """Build on a named model: ``"default"`` (packaged) or a published one, downloaded and cached
        (``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``)."""
        from elmo.pretrained import load_pretrained

        return cls(load_pretrained(name, cache_dir=cache_dir, progress=progress), **kwargs)

    @property
    def output_dim(self) -> int:
        return self.bilm.output_dim

    def train(self, mode: bool = True) -> "Elmo":
        super().train(mode)
        self.bilm.eval()  # frozen: never apply the biLM's training dropout
        return self

    def layers(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The raw biLM layers ``(batch, L+1, time, dim)`` and mask ``(batch, time)``."""
        if mask is None:
            mask = (char_ids > 0).any(dim=-1)
        with torch.no_grad():
            out = self.bilm(char_ids, mask, self.states.initial(char_ids.shape[0]))
        self.states.update(out.state)
        return out.layers, out.mask

    def mix(self, layers: torch.Tensor, mask: torch.Tensor) -> ElmoOutput:
        """Apply every mix to precomputed layers (for example, layers cached on disk)."""
        return ElmoOutput([m(layers, mask) for m in self.mixes], mask)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """``char_ids``: ``(batch, time, 50)`` from :func:`~elmo.chars.batch_to_char_ids`."""
        return self.mix(*self.layers(char_ids, mask))

    def embed(self, sentences: Sequence[Sequence[str]]) -> ElmoOutput:
        """Convenience: tokenized sentences in, mixed vectors out."""
        device = next(self.bilm.parameters()).device
        ids, mask = batch_to_char_ids(sentences)
        return self(ids.to(device), mask.to(device))

    def l2_penalty(self) -> torch.Tensor:
        """Sum of every mix's L2 penalty on its layer weights; add it to the task loss."""
        # Summed on the mixes' own device (a CPU zero to start from would fail on a GPU).
        return torch.stack([m.l2_penalty() for m in self.mixes]).sum()
