"""The training step's fast path as it was before issue 37 (commit 167ab73), kept only so that
benchmarks and tests can compare the new paths with it (op counts, speed, numbers). Nothing in
``src/`` uses this module; do not build on it.

What is kept verbatim from 167ab73:

* ``lstm_step`` and ``lstm_fast`` of ``elmo/model/lstm.py`` (here :func:`lstm_step_legacy` and
  :func:`lstm_fast_legacy`): one direction at a time, ``h @ W.t()``, ``x_gates[:, t]``,
  ``bool(mask.all())``;
* ``BiLM.run_stack``, ``BiLM.forward`` and ``LanguageModel.forward``/``direction_nll`` (each
  direction on its own, ``top[mask]``), and ``encode_distinct`` (``torch.unique`` on the device).

:func:`use_legacy_training_path` runs a :class:`~elmo.model.bilm.BiLM` or a
:class:`~elmo.model.lm.LanguageModel` with them for the duration of a ``with`` block::

    with use_legacy_training_path(model):
        nll_f, nll_b, state = model(forward_batch, backward_batch, state, dropout=0.1, ...)
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
from torch import nn

from elmo.model.bilm import (
    BACKWARD,
    FORWARD,
    BiLM,
    BiLMOutput,
    BiLMState,
    add_boundaries,
    remove_boundaries,
    reverse_within_length,
)
from elmo.model.lstm import FORGET_BIAS, LstmLayer, State, lstm_plain
from elmo.model.softmax import expected_count, log_uniform_sample

# ------------------------------------------------------------------------ lstm.py at 167ab73


def lstm_step_legacy(layer: LstmLayer, x_gates: torch.Tensor, state: State) -> State:
    """One timestep from precomputed input gates ``x_gates`` ``(batch, 4*dim)``; returns ``(c, h)``."""
    c_prev, h_prev = state
    gates = x_gates + h_prev @ layer.state_weight.t()
    i, j, f, o = gates.chunk(4, dim=1)
    c = torch.sigmoid(f + FORGET_BIAS) * c_prev + torch.sigmoid(i) * torch.tanh(j)
    if layer.cell_clip is not None:
        c = c.clamp(-layer.cell_clip, layer.cell_clip)
    h = (torch.sigmoid(o) * torch.tanh(c)) @ layer.projection.t()
    if layer.proj_clip is not None:
        h = h.clamp(-layer.proj_clip, layer.proj_clip)
    return c, h


def lstm_fast_legacy(layer: LstmLayer, inputs: torch.Tensor, mask: torch.Tensor,
                     state: State | None = None) -> tuple[torch.Tensor, State]:
    """The pre-#37 training fast path (``lstm_fast`` at 167ab73), kept only for comparisons.

    ``inputs``: ``(batch, time, input_dim)``; ``mask``: ``(batch, time)``; ``state``: ``(c, h)``
    or None. Returns ``(batch, time, projection_dim)`` outputs and the final ``(c, h)``.
    """
    batch, time, _ = inputs.shape
    c, h = state if state is not None else layer.zero_state(batch, inputs)
    x_gates = torch.addmm(layer.bias, inputs.reshape(batch * time, -1), layer.input_weight.t())
    x_gates = x_gates.view(batch, time, -1)  # (batch, time, 4*dim)
    full = bool(mask.all())
    outputs = []
    for t in range(time):
        c_new, h_new = lstm_step_legacy(layer, x_gates[:, t], (c, h))
        if full:
            c, h = c_new, h_new
            outputs.append(h_new)
            continue
        keep = mask[:, t].unsqueeze(1)
        c = torch.where(keep, c_new, c)
        h = torch.where(keep, h_new, h)
        outputs.append(h_new * keep)
    if not outputs:
        return inputs.new_zeros(batch, 0, layer.projection_dim), (c, h)
    return torch.stack(outputs, dim=1), (c, h)


# ---------------------------------------------------------------------- encoder.py at 167ab73


def encode_distinct_legacy(encoder: nn.Module, char_ids: torch.Tensor) -> torch.Tensor:
    """``encode_distinct`` at 167ab73: ``(batch, time, 50)`` -> ``(batch, time, output_dim)``."""
    batch, time, n_chars = char_ids.shape
    distinct, inverse = torch.unique(char_ids.reshape(-1, n_chars), dim=0, return_inverse=True)
    vectors = encoder(distinct.unsqueeze(0))[0]  # (n_distinct, output_dim)
    return vectors[inverse].reshape(batch, time, -1)


# ---------------------------------------------------------------------- softmax.py at 167ab73


def _sampled_loss_legacy(self, hidden: torch.Tensor, targets: torch.Tensor, n_samples: int,
                         generator: torch.Generator | None = None, sample: tuple | None = None) -> torch.Tensor:
    # (``sample``: negatives the caller drew, as today's trainer draws them; not in 167ab73.)
    if sample is None:
        sample = log_uniform_sample(self.vocab_size, n_samples, hidden.device, generator)
    sampled, sampled_count, tries = sample
    true_count = expected_count(targets, self.vocab_size, tries)
    true_logits = (hidden * self.weight[targets]).sum(-1) + self.bias[targets] - torch.log(true_count)
    sampled_logits = hidden @ self.weight[sampled].t() + self.bias[sampled] - torch.log(sampled_count)
    hits = targets.unsqueeze(1) == sampled.unsqueeze(0)
    sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)
    logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], dim=1).float()
    return -torch.log_softmax(logits, dim=1)[:, 0]


# --------------------------------------------------------------- bilm.py and lm.py at 167ab73


def _layer_forward_legacy(self: LstmLayer, inputs: torch.Tensor, mask: torch.Tensor, state: State | None = None,
                          fast: bool = True) -> tuple[torch.Tensor, State]:
    return (lstm_fast_legacy if fast else lstm_plain)(self, inputs, mask, state)


def _run_stack_legacy(self: BiLM, direction: int, inputs: torch.Tensor, mask: torch.Tensor,
                      state, dropout: float = 0.0, **_ignored) -> tuple[list[torch.Tensor], list[State]]:
    layers = self.forward_layers if direction == FORWARD else self.backward_layers
    outputs, finals = [], []
    x = inputs
    for index, layer in enumerate(layers):
        x_in = nn.functional.dropout(x, dropout, self.training) if dropout > 0 else x
        out, final = layer(x_in, mask, state.layer(direction, index), fast=self.fast)
        if index > 0 and self.config.lstm.use_skip_connections:
            out = out + x
        outputs.append(out)
        finals.append(final)
        x = out
    return outputs, finals


def _bilm_forward_legacy(self, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None = None,
                         keep_boundaries: bool = False) -> BiLMOutput:
    batch = char_ids.shape[0]
    ids, full_mask = add_boundaries(char_ids, mask)
    if state is None:
        state = self.zero_state(batch)
    tokens = self.token_encoder(ids)  # (batch, time+2, projection_dim)
    keep = full_mask.unsqueeze(-1).to(tokens.dtype)
    tokens = tokens * keep

    forward_out, forward_final = self.run_stack(FORWARD, tokens, full_mask, state)
    backward_in = reverse_within_length(tokens, full_mask)
    backward_out, backward_final = self.run_stack(BACKWARD, backward_in, full_mask, state)
    backward_out = [reverse_within_length(out, full_mask) for out in backward_out]

    layers = [torch.cat([tokens, tokens], dim=-1)]
    layers += [torch.cat([f, b], dim=-1) * keep for f, b in zip(forward_out, backward_out)]
    stacked = torch.stack(layers, dim=1)  # (batch, L+1, time+2, 2*projection_dim)

    finals = forward_final + backward_final  # forward layers first, then backward
    c = torch.stack([c for c, _ in finals]).view(2, self.n_layers, batch, -1)
    h = torch.stack([h for _, h in finals]).view(2, self.n_layers, batch, -1)
    new_state = BiLMState(c, h)
    if keep_boundaries:
        return BiLMOutput(stacked, full_mask, new_state)
    stacked, out_mask = remove_boundaries(stacked, full_mask)
    return BiLMOutput(stacked, out_mask, new_state)


def _lm_forward_legacy(self, forward_batch: dict, backward_batch: dict, state, dropout: float = 0.0,
                       n_samples: int = 0, generator: torch.Generator | None = None, samples: list | None = None,
                       **_ignored):
    from elmo.model.lm import stack_states

    # (``samples``: negatives the caller drew, as today's trainer draws them; not in 167ab73.)
    samples = samples or [None, None]
    nll_f, finals_f = _direction_nll_legacy(self, FORWARD, forward_batch["char_ids"], forward_batch["targets"],
                                            forward_batch["mask"], state, dropout, n_samples, generator, samples[0])
    nll_b, finals_b = _direction_nll_legacy(self, BACKWARD, backward_batch["char_ids"], backward_batch["targets"],
                                            backward_batch["mask"], state, dropout, n_samples, generator, samples[1])
    new_state = stack_states(finals_f, finals_b)
    return nll_f, nll_b, BiLMState(new_state.c.detach(), new_state.h.detach())


def _direction_nll_legacy(self, direction: int, char_ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                          state, dropout: float = 0.0, n_samples: int = 0,
                          generator: torch.Generator | None = None, sample: tuple | None = None,
                          ) -> tuple[torch.Tensor, list]:
    tokens = encode_distinct_legacy(self.bilm.token_encoder, char_ids)
    outputs, finals = _run_stack_legacy(self.bilm, direction, tokens, mask, state, dropout)
    top = outputs[-1]
    if dropout > 0:
        top = nn.functional.dropout(top, dropout, self.training)
    hidden, wanted = top[mask], targets[mask]
    if (n_samples > 0 or sample is not None) and self.training:
        nll = _sampled_loss_legacy(self.softmax, hidden, wanted, n_samples, generator, sample)
    else:
        nll = self.softmax.full_loss(hidden, wanted)
    return nll, finals


@contextlib.contextmanager
def use_legacy_training_path(model) -> Iterator:
    """Within the block, ``model`` (a ``BiLM``, a ``LanguageModel`` or a ``Trainer``) trains as it
    did before issue 37: its LSTM layers run :func:`lstm_fast_legacy` (or the plain loop where the
    model is not ``fast``), ``BiLM.run_stack``, ``BiLM.forward`` and ``LanguageModel.forward`` are
    167ab73's, and a trainer's Adagrad steps the whole softmax weight. The methods are set on the
    instances and removed on leaving; the parameters are not touched. (The sampled softmax's
    sampler is today's, which draws the same negatives.)"""
    trainer = model if hasattr(model, "sparse_softmax") else None
    if trainer is not None:
        model = trainer.model
    bilm = model.bilm if hasattr(model, "bilm") else model
    if not isinstance(bilm, BiLM):
        raise TypeError(f"expected a BiLM or a LanguageModel, got {type(model).__name__}")
    patched: list[tuple[nn.Module, str]] = []

    def patch(module: nn.Module, name: str, function) -> None:
        if name in module.__dict__:
            raise RuntimeError(f"{type(module).__name__}.{name} is already patched (nested use_legacy_training_path?)")
        setattr(module, name, types.MethodType(function, module))
        patched.append((module, name))

    try:
        for layer in [*bilm.forward_layers, *bilm.backward_layers]:
            patch(layer, "forward", _layer_forward_legacy)
        patch(bilm, "run_stack", _run_stack_legacy)
        patch(bilm, "forward", _bilm_forward_legacy)
        if bilm is not model:
            patch(model, "forward", _lm_forward_legacy)
            patch(model, "direction_nll", _direction_nll_legacy)
        sparse = trainer.sparse_softmax if trainer is not None else None
        if trainer is not None:
            trainer.sparse_softmax = False
        yield trainer if trainer is not None else model
    finally:
        for module, name in reversed(patched):
            delattr(module, name)
        if trainer is not None:
            trainer.sparse_softmax = sparse
