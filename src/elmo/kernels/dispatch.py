"""Which fast path runs a biLM's LSTM, and running it.

A :class:`~elmo.model.network.BiLM` names the path its LSTM takes under autograd
(:attr:`~elmo.model.network.BiLM.lstm_path`, one of :data:`~elmo.model.network.LSTM_PATHS`); the
model's own methods always compute the specification, and the functions here run the named path:
:func:`bilm_forward` (the whole biLM, as ``BiLM.forward``), :func:`run_stack` (one direction, as
``BiLM.run_stack``) and :func:`fused_stacks` (several stacks side by side, the training window).

* ``"plain"``: the per-timestep specification (:func:`elmo.model.network.lstm_plain`).
* ``"fused"`` (the default): every direction of a layer at once as one autograd Function over the
  window (:func:`elmo.kernels.fused_lstm.lstm_fused`), which CUDA graphs and ``torch.compile`` wrap.

No third path runs torch's own LSTM kernel (cuDNN on a GPU): it cannot clip, so it could run only
models without clipping, and it never had a measured row where it wins, so it is not here. A model
whose options say ``"backend": "cudnn"`` (no clipping) runs the fused path like any other.

Why ``"fused"`` is the default: it trained the packaged size 1.9x faster than the per-direction
``fast`` path it replaced on the 2-core development CPU (docs/training.md, "Training speed"), and
on the H200 (docs/gpu.md, the training tables) it was faster than ``fast`` in every row where both
ran. It was not faster than the ``legacy`` path (the per-direction path before the fused one, which
the GPU suite times from an older checkout, ``--before-src``) everywhere: at the original size
``legacy`` ran 35,347 tokens/s per direction in bfloat16 against 31,936 for ``fused+graphs`` (the
fastest fused row), and 33,530 in float32 against 29,667 (``fused+compile``); at the packaged size
``legacy`` ran 144,019 in float32 against 128,192 (``fused``) and 127,258 (``fused+graphs``), while
in bfloat16 ``fused+graphs`` ran 120,375 against ``legacy``'s 91,815. ``fused+graphs`` also took
about half ``legacy``'s peak memory in every row.

Inference without gradients goes through :class:`elmo.inference.runtime.Runtime`, which runs the
specification when the model is not ``fast`` and the kernels of :mod:`elmo.kernels.cpu_lstm` and
:mod:`elmo.kernels.encoder` (CUDA graphs of :func:`~elmo.kernels.cpu_lstm.bilstm_static_chunk`
where asked) otherwise.
"""

from __future__ import annotations

import torch

from elmo.kernels.fused_lstm import lstm_fused
from elmo.model.network import BACKWARD, FORWARD, BiLM, BiLMOutput, BiLMState, State, reverse_within_length

def dropout_masks(p: float, count: int, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """``count`` dropout multipliers of ``shape`` (0, or ``1 / (1 - p)`` with probability ``1 - p``),
    stacked: ``(count, *shape)``, in ``like``'s dtype and device.

    Each is drawn as ``torch.nn.functional.dropout`` draws its mask on the CPU (``bernoulli_`` on a
    fresh tensor of ``shape``, then scaled), one after the other: a model that draws its masks here,
    in the order the per-direction path applies them, consumes the CPU generator exactly as that
    path does and trains on the same masks. On other devices one draw makes them all."""
    masks = like.new_empty((count, *shape))
    if like.device.type == "cpu":
        for mask in masks:
            mask.bernoulli_(1.0 - p)
    else:
        masks.bernoulli_(1.0 - p)
    return masks.div_(1.0 - p)


def run_fused_stacks(stacks: list, inputs: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor,
                     drop: torch.Tensor | None, lengths: torch.Tensor | None, skip_connections: bool,
                     compiled: bool = False) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """:func:`fused_stacks` on explicit ``lengths`` ``(n, batch)`` (None: every row full)."""
    x = inputs.transpose(1, 2)  # (n, time, batch, proj): time-major, as the fused window wants it
    outputs, finals_c, finals_h = [], [], []
    for index in range(len(stacks[0])):
        x_in = x if drop is None else x * drop[:, index].transpose(1, 2)
        layers = [stack[index] for stack in stacks]
        out, (c, h) = lstm_fused(layers, x_in, (c0[:, index], h0[:, index]), lengths, compiled=compiled)
        if index > 0 and skip_connections:
            out = out + x  # the residual joins the output only; the carried state h stays the cell's own
        outputs.append(out)
        finals_c.append(c)
        finals_h.append(h)
        x = out
    return [out.transpose(1, 2) for out in outputs], torch.stack(finals_c, dim=1), torch.stack(finals_h, dim=1)


def fused_stacks(bilm: BiLM, inputs: torch.Tensor, mask: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor,
                 stacks: list, drop: torch.Tensor | None = None, full: bool | None = None,
                 ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run ``n`` stacks of ``bilm``'s layers (``stacks``: ``n`` lists of its LSTM layers, e.g.
    ``[forward_layers, backward_layers]``) side by side with :func:`lstm_fused`, layer by layer.

    ``inputs``: ``(n, batch, time, projection_dim)``, each in its stack's reading order;
    ``mask``: ``(n, batch, time)``; ``c0`` ``(n, L, batch, dim)`` and ``h0`` ``(n, L, batch,
    projection_dim)``: initial states; ``drop``: ``(n, L, batch, time, projection_dim)`` dropout
    multipliers of each layer's input, or None. Returns each layer's output ``(n, batch, time,
    projection_dim)`` (residual added, zero at padding) and the final ``c`` ``(n, L, batch, dim)``
    and ``h`` ``(n, L, batch, projection_dim)``."""
    if full is None:
        full = bool(mask.all())
    lengths = None if full else mask.sum(dim=2)
    return run_fused_stacks(stacks, inputs, c0, h0, drop, lengths, bilm.config.lstm.use_skip_connections,
                            bilm.compile_cells)


def run_stack(bilm: BiLM, direction: int, inputs: torch.Tensor, mask: torch.Tensor, state: BiLMState,
              dropout: float = 0.0, full: bool | None = None) -> tuple[list[torch.Tensor], list[State]]:
    """:meth:`BiLM.run_stack <elmo.model.network.BiLM.run_stack>` through ``bilm``'s LSTM path:
    one direction's layers over ``inputs`` ``(batch, time, projection_dim)`` in its reading order
    -> each layer's output ``(batch, time, projection_dim)`` and final ``(c, h)``. ``full``: whether
    ``mask`` is all True, when the caller knows it (None: asked of ``mask``)."""
    if bilm.lstm_path != "fused":
        return bilm.run_stack(direction, inputs, mask, state, dropout)
    layers = bilm.forward_layers if direction == FORWARD else bilm.backward_layers
    drop = None
    if dropout > 0 and bilm.training:
        drop = dropout_masks(dropout, len(layers), inputs.shape, inputs).unsqueeze(1)
    c0, h0 = state.c[direction:direction + 1], state.h[direction:direction + 1]
    outputs, c, h = fused_stacks(bilm, inputs.unsqueeze(0), mask.unsqueeze(0), c0, h0, [layers], drop, full)
    return [out[0] for out in outputs], [(c[0, i], h[0, i]) for i in range(len(layers))]


def bilm_forward(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor, state: BiLMState | None = None,
                 keep_boundaries: bool = False) -> BiLMOutput:
    """``bilm(char_ids, mask, state, keep_boundaries)`` through its LSTM path, with or without
    gradients: ``char_ids`` ``(batch, time, 50)``, ``mask`` ``(batch, time)`` -> the layers
    ``(batch, L+1, time, 2*projection_dim)`` (``time + 2`` when ``keep_boundaries``). The plain
    path is ``BiLM.forward`` itself; the fused path runs both stacks side by side (:func:`fused_stacks`)."""
    if bilm.lstm_path != "fused":
        return bilm(char_ids, mask, state, keep_boundaries=keep_boundaries)
    if state is None:
        state = bilm.zero_state(char_ids.shape[0])
    tokens, full_mask = bilm.boundary_tokens(char_ids, mask)
    backward_in = reverse_within_length(tokens, full_mask)
    both_masks = full_mask.unsqueeze(0).expand(2, -1, -1)
    outputs, c, h = fused_stacks(bilm, torch.stack([tokens, backward_in]), both_masks, state.c, state.h,
                                 [bilm.forward_layers, bilm.backward_layers])
    forward_out = [out[FORWARD] for out in outputs]
    backward_out = [reverse_within_length(out[BACKWARD], full_mask) for out in outputs]
    return bilm.output(tokens, forward_out, backward_out, full_mask, BiLMState(c, h), keep_boundaries)
