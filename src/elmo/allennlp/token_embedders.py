"""AllenNLP's ``allennlp.modules.token_embedders.ElmoTokenEmbedder``, on this library: one ELMo
representation as the token embedding of a model, optionally projected, as people's own PyTorch
models use it.

Its constructor arguments, defaults, ``get_output_dim()``, forward and ``state_dict`` names
(``_elmo.*``, ``_projection.*``) are AllenNLP 2.10's.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from elmo.allennlp.commands import DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE
from elmo.allennlp.modules import ALLENNLP_STATE, Elmo


class ElmoTokenEmbedder(nn.Module):
    """A single mix of the biLM's layers, ``Elmo(options_file, weight_file, 1, ...)``, followed by
    a learned ``Linear`` to ``projection_dim`` when that is given.

    ``forward(elmo_tokens, word_inputs=None)`` takes character ids ``(batch, timesteps, 50)`` from
    :func:`~elmo.allennlp.batch_to_ids` (more leading dimensions are kept) and, with
    ``vocab_to_cache``, word ids ``(batch, timesteps)``; it returns ``(batch, timesteps,
    get_output_dim())``: ``projection_dim`` if given, else the biLM's ``2 * projection_dim``.
    ``state``: the biLM's LSTM state policy, as :class:`~elmo.allennlp.Elmo`'s.
    """

    def __init__(self, options_file: str | os.PathLike = DEFAULT_OPTIONS_FILE,
                 weight_file: str | os.PathLike = DEFAULT_WEIGHT_FILE, do_layer_norm: bool = False,
                 dropout: float = 0.5, requires_grad: bool = False, projection_dim: int | None = None,
                 vocab_to_cache: list[str] | None = None, scalar_mix_parameters: list[float] | None = None, *,
                 state: str = ALLENNLP_STATE):
        super().__init__()
        self._elmo = Elmo(options_file, weight_file, 1, do_layer_norm=do_layer_norm, dropout=dropout,
                          requires_grad=requires_grad, vocab_to_cache=vocab_to_cache,
                          scalar_mix_parameters=scalar_mix_parameters, state=state)
        if projection_dim:
            self._projection: nn.Linear | None = nn.Linear(self._elmo.get_output_dim(), projection_dim)
            self.output_dim = projection_dim
        else:
            self._projection = None
            self.output_dim = self._elmo.get_output_dim()

    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(self, elmo_tokens: torch.Tensor, word_inputs: torch.Tensor | None = None) -> torch.Tensor:
        representations = self._elmo(elmo_tokens, word_inputs)["elmo_representations"][0]
        if self._projection is not None:
            # nn.Linear maps the last axis whatever the leading ones (AllenNLP's TimeDistributed).
            representations = self._projection(representations)
        return representations


__all__ = ["ElmoTokenEmbedder"]
