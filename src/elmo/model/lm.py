"""The biLM as a language model: the biLM plus its shared softmax and the per-direction loss.

Reading and writing trained language models (run directories, training checkpoints, exported
folders) is :mod:`elmo.hub.checkpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elmo.model.bilm import BACKWARD, FORWARD, BiLM, BiLMState
from elmo.model.config import BiLMConfig
from elmo.model.encoder import encode_distinct
from elmo.model.softmax import Softmax


@dataclass
class DirectionLoss:
    """Summed negative log-likelihood over ``count`` predicted positions, and the final state."""

    nll_sum: torch.Tensor
    count: int
    state: BiLMState | None = None


class LanguageModel(nn.Module):
    """A :class:`BiLM` and the softmax both directions share."""

    def __init__(self, config: BiLMConfig, vocab_size: int):
        super().__init__()
        self.bilm = BiLM(config)
        self.softmax = Softmax(vocab_size, config.lstm.projection_dim)

    @property
    def config(self) -> BiLMConfig:
        return self.bilm.config

    def forward(self, forward_batch: dict, backward_batch: dict, state: BiLMState, dropout: float = 0.0,
                n_samples: int = 0, generator: torch.Generator | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, BiLMState]:
        """One training window of both directions (independent streams, shared encoder and
        softmax). Returns the per-position NLL of each direction and the new (detached) state."""
        nll_f, finals_f = self.direction_nll(FORWARD, forward_batch["char_ids"], forward_batch["targets"],
                                             forward_batch["mask"], state, dropout, n_samples, generator)
        nll_b, finals_b = self.direction_nll(BACKWARD, backward_batch["char_ids"], backward_batch["targets"],
                                             backward_batch["mask"], state, dropout, n_samples, generator)
        new_state = stack_states(finals_f, finals_b)
        return nll_f, nll_b, BiLMState(new_state.c.detach(), new_state.h.detach())

    def direction_nll(self, direction: int, char_ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                      state: BiLMState, dropout: float = 0.0, n_samples: int = 0,
                      generator: torch.Generator | None = None) -> tuple[torch.Tensor, list]:
        """Per-position NLL ``(n_masked,)`` of one direction's window and its layers' final states.

        ``char_ids``: ``(batch, unroll, 50)`` in that direction's reading order; ``targets`` and
        ``mask``: ``(batch, unroll)``. ``n_samples`` > 0 uses the sampled softmax.
        """
        tokens = encode_distinct(self.bilm.token_encoder, char_ids)  # (batch, unroll, projection_dim)
        outputs, finals = self.bilm.run_stack(direction, tokens, mask, state, dropout)
        top = outputs[-1]
        if dropout > 0:
            top = nn.functional.dropout(top, dropout, self.training)
        hidden, wanted = top[mask], targets[mask]
        if n_samples > 0 and self.training:
            nll = self.softmax.sampled_loss(hidden, wanted, n_samples, generator)
        else:
            nll = self.softmax.full_loss(hidden, wanted)
        return nll, finals


def stack_states(forward_finals: list, backward_finals: list) -> BiLMState:
    """Per-layer ``(c, h)`` lists of both directions -> a :class:`BiLMState`."""
    finals = forward_finals + backward_finals
    n_layers = len(forward_finals)
    c = torch.stack([c for c, _ in finals]).view(2, n_layers, *finals[0][0].shape)
    h = torch.stack([h for _, h in finals]).view(2, n_layers, *finals[0][1].shape)
    return BiLMState(c, h)


__all__ = ["BACKWARD", "FORWARD", "DirectionLoss", "LanguageModel", "stack_states"]
