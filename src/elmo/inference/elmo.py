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

from elmo.inference.runtime import Runtime
from elmo.inference.states import DEFAULT_STATE
from elmo.model.bilm import BiLM
from elmo.model.scalar_mix import ScalarMix


@dataclass
class ElmoOutput:
    """``representations``: one ``(batch, time, 2*projection_dim)`` tensor per mix; ``mask``: ``(batch, time)``."""

    representations: list[torch.Tensor]
    mask: torch.Tensor


class Elmo(nn.Module):
    """Frozen biLM + ``num_output_representations`` scalar mixes.

    Without ``bilm``, the packaged default model is used (see :mod:`elmo.hub.pretrained`).

    ``mode``, ``do_layer_norm``, ``dropout`` and ``l2_coef`` configure every mix (see
    :class:`~elmo.model.scalar_mix.ScalarMix`); ``state`` picks the LSTM state policy
    (:mod:`elmo.inference.states`) and ``precision`` the matrix products' dtype. The biLM becomes part of
    this module (``.to()`` moves it), stays in eval mode and gets no gradients; it runs through an
    :class:`~elmo.inference.runtime.Runtime`, rebuilt when the module moves to another device.
    """

    def __init__(self, bilm: BiLM | None = None, num_output_representations: int = 1, *, mode: str | int = "mix",
                 do_layer_norm: bool = False, dropout: float = 0.5, l2_coef: float = 0.0,
                 state: str = DEFAULT_STATE, precision: str = "float32"):
        super().__init__()
        if bilm is None:
            from elmo.hub.pretrained import load_model

            bilm = load_model()
        self.bilm = bilm
        for p in self.bilm.parameters():
            p.requires_grad_(False)
        self.bilm.eval()
        self._add_mixes(bilm.config.n_output_layers, num_output_representations, mode=mode,
                        do_layer_norm=do_layer_norm, dropout=dropout, l2_coef=l2_coef)
        self._runtime_options = {"state": state, "precision": precision}
        self._runtime: Runtime | None = None
        self.runtime  # a bad state or precision fails here, not at the first batch

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Elmo":
        """Build from the original ``options.json`` + ``weights.hdf5``."""
        from elmo.hub.pretrained import load_model

        return cls(load_model((options_file, weights_file)), **kwargs)

    @classmethod
    def from_pretrained(cls, name: str = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Elmo":
        """Build on a model named as :func:`elmo.hub.pretrained.load_model` takes it: ``"default"``
        (packaged), a published one, downloaded and cached (``"small"``, ``"medium"``,
        ``"original"``, ``"original-5.5b"``), an exported folder, a training run directory, an NLPL
        archive (``.zip``) or folder, or an ELMoForManyLangs model (see ``docs/other-models.md``)."""
        from elmo.hub.pretrained import load_model

        return cls(load_model(name, cache_dir=cache_dir, progress=progress), **kwargs)

    @classmethod
    def for_cached_layers(cls, n_layers: int, output_dim: int, num_output_representations: int = 1,
                          **mix_options) -> "Elmo":
        """Mixes alone, for layers computed beforehand (a task's layer cache): the biLM ran once
        per data set, so the task model holds only its mixes. :meth:`mix` works; :meth:`layers`
        and :meth:`forward` need a biLM and refuse."""
        elmo = cls.__new__(cls)
        nn.Module.__init__(elmo)
        elmo.bilm = None
        elmo._runtime, elmo._runtime_options = None, {}
        elmo._cached_layers = (n_layers, output_dim)
        elmo._add_mixes(n_layers, num_output_representations, **mix_options)
        return elmo

    def _add_mixes(self, n_layers: int, count: int, *, mode: str | int = "mix", do_layer_norm: bool = False,
                   dropout: float = 0.5, l2_coef: float = 0.0) -> None:
        self.mixes = nn.ModuleList(ScalarMix(n_layers, mode=mode, do_layer_norm=do_layer_norm,
                                             dropout=dropout, l2_coef=l2_coef) for _ in range(count))

    @property
    def output_dim(self) -> int:
        return self.bilm.output_dim if self.bilm is not None else self._cached_layers[1]

    def train(self, mode: bool = True) -> "Elmo":
        super().train(mode)
        if self.bilm is not None:
            self.bilm.eval()  # frozen: never apply the biLM's training dropout
        return self

    @property
    def runtime(self) -> Runtime:
        """The inference runtime over the biLM, on the biLM's current device."""
        if self.bilm is None:
            raise ValueError("this Elmo mixes precomputed layers (Elmo.for_cached_layers); it has no biLM to run")
        device = next(self.bilm.parameters()).device
        if self._runtime is None or self._runtime.device != device or self._runtime.model is not self.bilm:
            self._runtime = Runtime(self.bilm, **self._runtime_options)
        return self._runtime

    @property
    def state(self) -> str:
        return self._runtime_options.get("state")

    def reset_state(self) -> None:
        """Forget the state carried between batches (stateful mode)."""
        self.runtime.reset_state()

    def layers(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The raw biLM layers ``(batch, L+1, time, dim)`` and mask ``(batch, time)``."""
        if mask is None:
            mask = (char_ids > 0).any(dim=-1)
        runtime = self.runtime
        out = runtime(char_ids, mask, runtime.states.initial(char_ids.shape[0]))
        runtime.states.update(out.state)
        return out.layers, out.mask

    def mix(self, layers: torch.Tensor, mask: torch.Tensor) -> ElmoOutput:
        """Apply every mix to precomputed layers (for example, layers cached on disk)."""
        return ElmoOutput([m(layers, mask) for m in self.mixes], mask)

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """``char_ids``: ``(batch, time, width)`` from ``bilm.characters.batch(sentences)``
        (:func:`~elmo.model.chars.batch_to_char_ids` for every bilm-tf model)."""
        return self.mix(*self.layers(char_ids, mask))

    def embed(self, sentences: Sequence[Sequence[str]]) -> ElmoOutput:
        """Convenience: tokenized sentences in, mixed vectors out."""
        device = next(self.bilm.parameters()).device
        ids, mask = self.bilm.characters.batch(sentences)
        return self(ids.to(device), mask.to(device))

    def l2_penalty(self) -> torch.Tensor:
        """Sum of every mix's L2 penalty on its layer weights; add it to the task loss."""
        # Summed on the mixes' own device (a CPU zero to start from would fail on a GPU).
        return torch.stack([m.l2_penalty() for m in self.mixes]).sum()
