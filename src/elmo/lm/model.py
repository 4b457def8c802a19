"""The biLM as a language model: the biLM plus its shared softmax and the per-direction loss.

Reading and writing trained language models (run directories, training checkpoints, exported
folders) is :mod:`elmo.hub.checkpoints`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elmo.kernels.dispatch import dropout_masks, fused_stacks, run_fused_stacks, run_stack
from elmo.kernels.encoder import Words, encode_distinct
from elmo.kernels.fused_lstm import autocast_dtype
from elmo.model.config import BiLMConfig
from elmo.model.network import BACKWARD, FORWARD, BiLM, BiLMState
from elmo.lm.softmax import Softmax, log_uniform_sample


@dataclass
class DirectionLoss:
    """Summed negative log-likelihood over ``count`` predicted positions, and the final state."""

    nll_sum: torch.Tensor
    count: int
    state: BiLMState | None = None


class LanguageModel(nn.Module):
    """A :class:`BiLM` and the softmax both directions share.

    ``lstm_path`` and ``compile_cells`` choose how the LSTM trains (see :data:`elmo.model.network.LSTM_PATHS`;
    None: the default, the fused path); they change the speed, not the model.
    """

    def __init__(self, config: BiLMConfig, vocab_size: int, lstm_path: str | None = None,
                 compile_cells: bool = False, softmax_device: torch.device | str | None = None):
        super().__init__()
        self.bilm = BiLM(config, lstm_path=lstm_path, compile_cells=compile_cells)
        # The softmax, by far the largest part with a published vocabulary, is made where it will
        # train (``softmax_device``), not initialised on the CPU and moved.
        self.softmax = Softmax(vocab_size, config.lstm.projection_dim, device=softmax_device)
        self._graphs: dict | None = None  # CUDA graphs of the LSTM window, by shape (use_cuda_graphs)

    def use_cuda_graphs(self, enabled: bool = True) -> None:
        """Run the LSTM of full training windows on a GPU (the fused path, every layer of both
        directions, forward and backward) as CUDA graphs: one captured per window shape and
        precision on its first use, replayed after, where the eager path launches each of its
        kernels from Python. Anything else (padded windows, no gradients, the CPU) stays eager.
        Under autocast, the autocast's weight cache must be off (``cache_enabled=False``), as
        ``torch.cuda.make_graphed_callables`` requires."""
        if enabled and self.bilm.lstm_path != "fused":
            raise ValueError(f"CUDA graphs capture the fused LSTM path; this model's is {self.bilm.lstm_path!r}")
        self._graphs = {} if enabled else None

    @property
    def config(self) -> BiLMConfig:
        return self.bilm.config

    def forward(self, forward_batch: dict, backward_batch: dict, state: BiLMState, dropout: float = 0.0,
                n_samples: int = 0, generator: torch.Generator | None = None, full: bool | None = None,
                words: Words | None = None, samples: list | None = None,
                softmax_rows: tuple[torch.Tensor, torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, BiLMState]:
        """One training window of both directions (independent streams, shared encoder and
        softmax). Returns the per-position NLL of each direction (``(n_masked,)``, in the order of
        ``mask``'s True positions) and the new (detached) state.

        ``full``: whether both batches' masks are all True, when the caller knows it without asking
        the device (the trainer reads it from the batcher's host tensors; None: asked of the masks).
        ``words``: :func:`elmo.kernels.encoder.distinct_words` of the two batches' ``char_ids``
        stacked, computed where the ids are made (None: computed here).
        The two directions' sampled negatives are drawn from ``generator`` forward first, and the
        dropout masks from the global generator in the per-direction path's order, so every
        LSTM path trains on the same random numbers. ``samples``: the two directions' negatives
        (:func:`elmo.lm.softmax.log_uniform_sample`'s results), when the caller drew them
        (then ``n_samples`` and ``generator`` are not used). ``softmax_rows``: ``(rows, index)``,
        a leaf tensor of softmax weight rows and, for every target and negative in
        :meth:`Softmax.sampled_losses`' order, its row there: the weight's gradient then lands,
        compact, in ``rows.grad`` (the trainer's sparse Adagrad step)."""
        char_ids = torch.stack([forward_batch["char_ids"], backward_batch["char_ids"]])
        targets = torch.stack([forward_batch["targets"], backward_batch["targets"]])
        masks = torch.stack([forward_batch["mask"], backward_batch["mask"]])
        if full is None:
            full = bool(masks.all())
        tokens = encode_distinct(self.bilm.token_encoder, char_ids, words)  # (2, batch, unroll, projection_dim)
        if not self.training:
            samples = None
        elif samples is None and n_samples > 0:
            samples = [log_uniform_sample(self.softmax.vocab_size, n_samples, tokens.device, generator)
                       for _ in (FORWARD, BACKWARD)]
        if self.bilm.lstm_path == "fused":
            top, c, h = self._fused_top(tokens, masks, state, dropout, full)
        else:
            tops, finals = [], []
            for direction in (FORWARD, BACKWARD):
                outputs, direction_finals = self.bilm.run_stack(direction, tokens[direction], masks[direction], state,
                                                                dropout)
                top = outputs[-1]
                if dropout > 0:
                    top = nn.functional.dropout(top, dropout, self.training)
                tops.append(top)
                finals.append(direction_finals)
            top = torch.stack(tops)
            new_state = stack_states(*finals)
            c, h = new_state.c, new_state.h
        nll_f, nll_b = self._losses(top, targets, masks, full, samples, softmax_rows)
        return nll_f, nll_b, BiLMState(c.detach(), h.detach())

    def _fused_top(self, tokens: torch.Tensor, masks: torch.Tensor, state: BiLMState, dropout: float, full: bool,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Both directions' stacks through the fused path: the top layer ``(2, batch, unroll,
        projection_dim)`` (dropped out) and the final ``c``, ``h`` ``(2, L, batch, ...)``."""
        n_layers = self.bilm.n_layers
        drop = None
        if dropout > 0 and self.training:
            # The per-direction path drops the forward stack's layer inputs and top, then the
            # backward stack's: the same masks, drawn in that order.
            drop = dropout_masks(dropout, 2 * (n_layers + 1), tokens.shape[1:], tokens)
            drop = drop.view(2, n_layers + 1, *tokens.shape[1:])
        if self._graphs is not None and full and tokens.is_cuda and torch.is_grad_enabled():
            args = (tokens, state.c, state.h) + ((drop,) if drop is not None else ())
            top, c, h = self._graphed_window(args)(*args)
            # The graph's outputs live in its static buffers, which its next replay overwrites.
            return top, c.clone(), h.clone()
        outputs, c, h = fused_stacks(self.bilm, tokens, masks, state.c, state.h,
                                     [self.bilm.forward_layers, self.bilm.backward_layers],
                                     drop[:, :n_layers] if drop is not None else None, full)
        top = outputs[-1]
        if drop is not None:
            top = top * drop[:, n_layers]
        return top, c, h

    def _graphed_window(self, args: tuple[torch.Tensor, ...]):
        """The CUDA graph of :class:`LstmWindow` for ``args``' shapes (captured now if new)."""
        key = (tuple(tuple(a.shape) for a in args), args[0].dtype, autocast_dtype(args[0].device, None),
               self.training, self.bilm.compile_cells)
        graphed = self._graphs.get(key)
        if graphed is None:
            samples = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
            graphed = torch.cuda.make_graphed_callables(LstmWindow(self.bilm), samples)
            self._graphs[key] = graphed
        return graphed

    def _losses(self, top: torch.Tensor, targets: torch.Tensor, masks: torch.Tensor, full: bool,
                samples: list | None, softmax_rows: tuple | None = None) -> list[torch.Tensor]:
        """Per-position NLL of each direction from the top layer ``(2, batch, unroll, dim)``."""
        hidden = predicted(top, masks, full)
        wanted = predicted(targets, masks, full)
        if samples is not None:
            return self.softmax.sampled_losses(hidden, wanted, samples, softmax_rows)
        return [self.softmax.full_loss(x, y) for x, y in zip(hidden, wanted)]

    def direction_nll(self, direction: int, char_ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                      state: BiLMState, dropout: float = 0.0, n_samples: int = 0,
                      generator: torch.Generator | None = None) -> tuple[torch.Tensor, list]:
        """Per-position NLL ``(n_masked,)`` of one direction's window and its layers' final states.

        ``char_ids``: ``(batch, unroll, 50)`` in that direction's reading order; ``targets`` and
        ``mask``: ``(batch, unroll)``. ``n_samples`` > 0 uses the sampled softmax.
        """
        tokens = encode_distinct(self.bilm.token_encoder, char_ids)  # (batch, unroll, projection_dim)
        outputs, finals = run_stack(self.bilm, direction, tokens, mask, state, dropout)
        top = outputs[-1]
        if dropout > 0:
            top = nn.functional.dropout(top, dropout, self.training)
        hidden, wanted = top[mask], targets[mask]
        if n_samples > 0 and self.training:
            nll = self.softmax.sampled_loss(hidden, wanted, n_samples, generator)
        else:
            nll = self.softmax.full_loss(hidden, wanted)
        return nll, finals


class LstmWindow(nn.Module):
    """A biLM's LSTM over one full training window: both stacks through the fused path, every
    layer, the dropout multipliers given. What :meth:`LanguageModel.use_cuda_graphs` captures; it
    shares the biLM's layers (and so their parameters) and holds nothing of its own."""

    def __init__(self, bilm: BiLM):
        super().__init__()
        self.forward_layers, self.backward_layers = bilm.forward_layers, bilm.backward_layers
        self.skip_connections = bilm.config.lstm.use_skip_connections
        self.compile_cells = bilm.compile_cells

    def forward(self, tokens: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor, drop: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``tokens`` ``(2, batch, unroll, proj)``; ``c0``, ``h0`` ``(2, L, batch, ...)``; ``drop``
        ``(2, L + 1, batch, unroll, proj)`` or None -> the dropped-out top layer ``(2, batch,
        unroll, proj)`` and the final (detached) ``c``, ``h``."""
        n_layers = len(self.forward_layers)
        outputs, c, h = run_fused_stacks([self.forward_layers, self.backward_layers], tokens, c0, h0,
                                         drop[:, :n_layers] if drop is not None else None, None,
                                         self.skip_connections, self.compile_cells)
        top = outputs[-1]
        if drop is not None:
            top = top * drop[:, n_layers]
        return top, c.detach(), h.detach()


def predicted(values: torch.Tensor, masks: torch.Tensor, full: bool) -> list[torch.Tensor]:
    """Each direction's ``values`` ``(2, batch, unroll, ...)`` at its predicted positions, in
    ``masks``' order: ``(n_d, ...)`` per direction. A full window is a reshape, not a boolean index
    (which waits for the device)."""
    if full:
        return [values[d].reshape(-1, *values.shape[3:]) for d in (FORWARD, BACKWARD)]
    return [values[d][masks[d]] for d in (FORWARD, BACKWARD)]


def stack_states(forward_finals: list, backward_finals: list) -> BiLMState:
    """Per-layer ``(c, h)`` lists of both directions -> a :class:`BiLMState`."""
    finals = forward_finals + backward_finals
    n_layers = len(forward_finals)
    c = torch.stack([c for c, _ in finals]).view(2, n_layers, *finals[0][0].shape)
    h = torch.stack([h for _, h in finals]).view(2, n_layers, *finals[0][1].shape)
    return BiLMState(c, h)


__all__ = ["BACKWARD", "FORWARD", "DirectionLoss", "LanguageModel", "LstmWindow", "predicted", "stack_states"]
