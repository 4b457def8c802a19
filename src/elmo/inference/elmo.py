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

from elmo.hub.resolve import ModelSource, load_model
from elmo.inference.precision import DEFAULT_PRECISION
from elmo.inference.runtime import Runtime
from elmo.inference.states import DEFAULT_STATE
from elmo.model.network import BiLM, ScalarMix


@dataclass
class ElmoOutput:
    """``representations``: one ``(batch, time, 2*projection_dim)`` tensor per mix; ``mask``: ``(batch, time)``."""

    representations: list[torch.Tensor]
    mask: torch.Tensor


# Dropout on the mixed ELMo vectors unless told otherwise: AllenNLP's Elmo default.
DEFAULT_DROPOUT = 0.5


class ElmoMixes(nn.Module):
    """The scalar mixes of an :class:`Elmo` without its biLM, for layers computed beforehand (a
    task's layer cache: the biLM ran once per data set, so the task model holds only its mixes).

    ``n_layers`` layers of ``output_dim`` each go into ``num_output_representations`` mixes;
    ``mode``, ``do_layer_norm``, ``dropout`` and ``l2_coef`` configure every mix (see
    :class:`~elmo.model.network.ScalarMix`).
    """

    def __init__(self, n_layers: int, output_dim: int, num_output_representations: int = 1, *,
                 mode: str | int = "mix", do_layer_norm: bool = False, dropout: float = DEFAULT_DROPOUT,
                 l2_coef: float = 0.0):
        super().__init__()
        self.n_layers = n_layers
        self._output_dim = output_dim
        self.mixes = nn.ModuleList(ScalarMix(n_layers, mode=mode, do_layer_norm=do_layer_norm, dropout=dropout,
                                             l2_coef=l2_coef) for _ in range(num_output_representations))

    @property
    def output_dim(self) -> int:
        return self._output_dim

    def mix(self, layers: torch.Tensor, mask: torch.Tensor) -> ElmoOutput:
        """Apply every mix to precomputed layers ``(batch, L+1, time, dim)`` (for example, layers
        cached on disk) with their mask ``(batch, time)``."""
        return ElmoOutput([m(layers, mask) for m in self.mixes], mask)

    def l2_penalty(self) -> torch.Tensor:
        """Sum of every mix's L2 penalty on its layer weights; add it to the task loss."""
        # Summed on the mixes' own device (a CPU zero to start from would fail on a GPU).
        return torch.stack([m.l2_penalty() for m in self.mixes]).sum()


class Elmo(ElmoMixes):
    """Frozen biLM + ``num_output_representations`` scalar mixes.

    Without ``bilm``, the packaged default model is used (:func:`elmo.hub.load_model`).

    ``mode``, ``do_layer_norm``, ``dropout`` and ``l2_coef`` configure every mix (see
    :class:`~elmo.model.network.ScalarMix`); ``state`` picks the LSTM state policy
    (:mod:`elmo.inference.states`) and ``precision`` the matrix products' dtype. The biLM becomes part of
    this module (``.to()`` moves it), stays in eval mode and gets no gradients; it runs through an
    :class:`~elmo.inference.runtime.Runtime`, rebuilt when the module moves to another device.
    """

    def __init__(self, bilm: BiLM | None = None, num_output_representations: int = 1, *, mode: str | int = "mix",
                 do_layer_norm: bool = False, dropout: float = DEFAULT_DROPOUT, l2_coef: float = 0.0,
                 state: str = DEFAULT_STATE, precision: str = DEFAULT_PRECISION):
        if bilm is None:
            bilm = load_model()
        super().__init__(bilm.config.n_output_layers, bilm.output_dim, num_output_representations, mode=mode,
                         do_layer_norm=do_layer_norm, dropout=dropout, l2_coef=l2_coef)
        self.bilm = bilm
        for p in self.bilm.parameters():
            p.requires_grad_(False)
        self.bilm.eval()
        self._runtime_options = {"state": state, "precision": precision}
        self._runtime: Runtime | None = None
        self.runtime  # a bad state or precision fails here, not at the first batch

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Elmo":
        """Build from the original ``options.json`` + ``weights.hdf5``."""
        return cls(load_model((options_file, weights_file)), **kwargs)

    @classmethod
    def from_pretrained(cls, name: ModelSource = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Elmo":
        """Build on any model source :func:`elmo.hub.load_model` takes: ``"default"`` (packaged),
        a published name or URL, downloaded and cached (``"small"``, ``"medium"``, ``"original"``,
        ``"original-5.5b"``), an ``(options, weights)`` pair, an exported folder, a training run
        directory, a checkpoint file, an NLPL archive (``.zip``) or folder, or an ELMoForManyLangs
        model (see ``docs/other-models.md``)."""
        return cls(load_model(name, cache_dir=cache_dir, progress=progress), **kwargs)

    @classmethod
    def for_cached_layers(cls, n_layers: int, output_dim: int, num_output_representations: int = 1,
                          **mix_options) -> ElmoMixes:
        """The mixes alone (an :class:`ElmoMixes`), for layers computed beforehand: :meth:`mix`
        and :meth:`l2_penalty` work as on an Elmo, and there is no biLM to run."""
        return ElmoMixes(n_layers, output_dim, num_output_representations, **mix_options)

    @property
    def output_dim(self) -> int:
        return self.bilm.output_dim

    def train(self, mode: bool = True) -> "Elmo":
        super().train(mode)
        self.bilm.eval()  # frozen: never apply the biLM's training dropout
        return self

    @property
    def runtime(self) -> Runtime:
        """The inference runtime over the biLM, on the biLM's current device."""
        device = next(self.bilm.parameters()).device
        if self._runtime is None or self._runtime.device != device or self._runtime.model is not self.bilm:
            self._runtime = Runtime(self.bilm, **self._runtime_options)
        return self._runtime

    @property
    def state(self) -> str:
        return self._runtime_options["state"]

    def reset_state(self) -> None:
        """Forget the state carried between batches (stateful mode)."""
        self.runtime.reset_state()

    def layers(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The raw biLM layers ``(batch, L+1, time, dim)`` and mask ``(batch, time)``."""
        if mask is None:
            mask = (char_ids > 0).any(dim=-1)
        out = self.runtime.step(char_ids, mask)
        return out.layers, out.mask

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """``char_ids``: ``(batch, time, width)`` from ``bilm.characters.batch(sentences)``
        (:func:`~elmo.model.chars.batch_to_char_ids` for every bilm-tf model)."""
        return self.mix(*self.layers(char_ids, mask))

    def embed(self, sentences: Sequence[Sequence[str]]) -> ElmoOutput:
        """Convenience: tokenized sentences in, mixed vectors out."""
        device = next(self.bilm.parameters()).device
        ids, mask = self.bilm.characters.batch(sentences)
        return self(ids.to(device), mask.to(device))


__all__ = ["Elmo", "ElmoMixes", "ElmoOutput"]
