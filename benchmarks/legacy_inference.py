"""The inference LSTM kernel as it was before issue 37 (commit 167ab73), kept only so that
benchmarks can compare the new paths with it (speed, kernels per step, numbers). Nothing in
``src/`` uses this module.

Kept verbatim from ``elmo/model/lstm.py`` at 167ab73 (renamed with ``_legacy``):
``bilstm_inference``, ``stack_directions``, ``StackedWeights`` and ``_tanh`` (24 kernels per
layer-step in float32, 28 in bfloat16). :func:`use_legacy_inference_path` runs a
:class:`~elmo.inference.runtime.Runtime` with them for the duration of a ``with`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import nn

from elmo.model.lstm import FORGET_BIAS, LstmLayer

# Timesteps whose input gates are precomputed at once: bounds memory on very long sentences.
GATE_CHUNK_STEPS = 128
# Batched products of fewer than 4 rows take another BLAS kernel whose rounding differs in the
# last bits; with at least 4 rows a row's result does not depend on how many others there are.
# Keeping 4 rows in every product makes a sentence's vectors independent of its batch.
MIN_ACTIVE_ROWS = 4


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x) = 2 sigmoid(2x) - 1``: on this PyTorch's CPU kernels 2.3x faster than
    ``torch.tanh`` for the cell's shapes (61 vs 142 us on (2, 64, 1024)), within 2e-7 of it."""
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


# Recurrent weights of at least this many elements (the original size's 512 x 16384) go through
# oneDNN's float32 matrix product: at 64 rows it ran at 143-152 GFLOP/s against 98-113 for MKL's
# batched product on the 2-core development CPU (MKL repacks the 32 MB weight at every step;
# benchmarks/lstm_kernels.py). For the small size (128 x 4096) the two were within run-to-run
# noise, so smaller weights stay with MKL.
ONEDNN_MIN_RECURRENT_WEIGHT = 1 << 22


class StackedWeightsLegacy(NamedTuple):
    """Both directions' weights laid out for batched products (see :func:`stack_directions`)."""

    input: torch.Tensor        # (2, input_dim, 4*dim)
    state: torch.Tensor        # (2, proj, 4*dim)
    projection: torch.Tensor   # (2, dim, proj)
    bias: torch.Tensor         # (2, 1, 4*dim), float32
    # Per direction, the state weight (4*dim, proj) and the bias (4*dim,) as opaque oneDNN
    # tensors, or None when the recurrent product runs through ``torch.bmm``.
    state_onednn: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None


def use_onednn_recurrent(layer: LstmLayer, dtype: torch.dtype) -> bool:
    """Whether the recurrent product of ``layer`` runs through oneDNN: float32 on a CPU with
    oneDNN, and a weight large enough for it to be the faster kernel."""
    return (dtype == torch.float32 and layer.state_weight.device.type == "cpu"
            and torch.backends.mkldnn.is_available()
            and layer.state_weight.numel() >= ONEDNN_MIN_RECURRENT_WEIGHT)


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ W.t() + b`` for float32 ``x`` ``(rows, in)`` and oneDNN ``weight`` ``(out, in)`` and
    ``bias`` ``(out,)``: the bias is added inside the kernel."""
    return torch._C._nn.mkldnn_linear(x.contiguous().to_mkldnn(), weight, bias).to_dense()


@torch.inference_mode()
def stack_directions_legacy(forward_layer: LstmLayer, backward_layer: LstmLayer, dtype: torch.dtype) -> StackedWeightsLegacy:
    """Both directions' weights for :func:`bilstm_inference`, in ``dtype`` (the bias in float32)."""
    layers = (forward_layer, backward_layer)
    onednn = None
    if use_onednn_recurrent(forward_layer, dtype):
        onednn = tuple((l.state_weight.detach().float().contiguous().to_mkldnn(),
                        l.bias.detach().float().contiguous().to_mkldnn()) for l in layers)
    return StackedWeightsLegacy(torch.stack([l.input_weight.t() for l in layers]).to(dtype),
                          torch.stack([l.state_weight.t() for l in layers]).to(dtype),
                          torch.stack([l.projection.t() for l in layers]).to(dtype),
                          torch.stack([l.bias for l in layers]).unsqueeze(1),
                          onednn)


@torch.inference_mode()
def bilstm_inference_legacy(forward_layer: LstmLayer, backward_layer: LstmLayer, inputs: torch.Tensor,
                     lengths: torch.Tensor, c: torch.Tensor, h: torch.Tensor,
                     dtype: torch.dtype = torch.float32, weights: StackedWeightsLegacy | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both directions of one layer at once, for inference.

    ``inputs``: ``(2, batch, time, input_dim)``: index 0 the forward reading order, 1 the
    backward one (each row already reversed within its length). Rows must be sorted by
    ``lengths`` ``(batch,)``, longest first: at step ``t`` only the rows still running are
    computed, so no work goes to padding. ``c`` ``(2, batch, dim)`` and ``h`` ``(2, batch, proj)``
    are the initial states. Returns ``outputs`` ``(2, batch, time, proj)`` (zero at padding) and
    the final ``(c, h)``. Matrix products run in ``dtype`` (bfloat16/float16 for speed); the
    cell state and nonlinearities stay float32. Same numbers as :func:`lstm_plain` in float32.
    ``weights`` are :func:`stack_directions`'s result, when the caller keeps them between calls.
    """
    _, batch, time, input_dim = inputs.shape
    if batch < MIN_ACTIVE_ROWS:  # pad with empty rows: see MIN_ACTIVE_ROWS
        extra = MIN_ACTIVE_ROWS - batch
        outputs, c, h = bilstm_inference_legacy(
            forward_layer, backward_layer, nn.functional.pad(inputs, (0, 0, 0, 0, 0, extra)),
            nn.functional.pad(lengths, (0, extra)), nn.functional.pad(c, (0, 0, 0, extra)),
            nn.functional.pad(h, (0, 0, 0, extra)), dtype, weights)
        return outputs[:, :batch], c[:, :batch], h[:, :batch]
    dim, proj = forward_layer.dim, forward_layer.projection_dim
    weights = weights if weights is not None else stack_directions_legacy(forward_layer, backward_layer, dtype)
    w_x, w_h, w_p, bias, w_h_onednn = weights
    cell_clip, proj_clip = forward_layer.cell_clip, forward_layer.proj_clip
    c, h = c.clone(), h.clone()
    outputs = inputs.new_zeros((2, batch, time, proj), dtype=torch.float32)
    # running[t] = number of rows whose sentence is longer than t (rows are sorted).
    running = (lengths.unsqueeze(0) > torch.arange(time, device=lengths.device).unsqueeze(1)).sum(1).tolist()
    for start in range(0, time, GATE_CHUNK_STEPS):
        stop = min(time, start + GATE_CHUNK_STEPS)
        if running[start] == 0:
            break
        rows = max(running[start], MIN_ACTIVE_ROWS)
        x = inputs[:, :rows, start:stop].to(dtype).reshape(2, -1, input_dim)
        if w_h_onednn is None:
            x_gates = torch.baddbmm(bias.to(dtype), x, w_x)
        else:
            # The bias joins in the recurrent product's kernel: adding it here would first copy
            # it into every row of this (2, rows * steps, 4*dim) product first.
            x_gates = torch.bmm(x, w_x)
        x_gates = x_gates.float().view(2, rows, stop - start, 4 * dim)
        for t in range(start, stop):
            n = running[t]
            if n == 0:
                break
            # Compute at least MIN_ACTIVE_ROWS rows (finished ones are computed, never stored).
            m = max(n, MIN_ACTIVE_ROWS)
            if w_h_onednn is None:
                gates = x_gates[:, :m, t - start] + torch.bmm(h[:, :m].to(dtype), w_h).float()  # (2, m, 4*dim)
            else:
                gates = x_gates.new_empty(2, m, 4 * dim)
                for d in range(2):
                    torch.add(x_gates[d, :m, t - start], onednn_linear(h[d, :m], *w_h_onednn[d]), out=gates[d])
            gates = gates[:, :n]
            i, j, f, o = gates.chunk(4, dim=2)
            c_new = torch.sigmoid(f + FORGET_BIAS) * c[:, :n] + torch.sigmoid(i) * _tanh(j)
            if cell_clip is not None:
                c_new = c_new.clamp(-cell_clip, cell_clip)
            h_new = torch.bmm((torch.sigmoid(o) * _tanh(c_new)).to(dtype), w_p).float()
            if proj_clip is not None:
                h_new = h_new.clamp(-proj_clip, proj_clip)
            c[:, :n] = c_new
            h[:, :n] = h_new
            outputs[:, :n, t] = h_new
    return outputs, c, h


@contextlib.contextmanager
def use_legacy_inference_path(runtime) -> Iterator:
    """Within the block, ``runtime`` (an :class:`~elmo.inference.runtime.Runtime` without CUDA
    graphs) runs the pre-#37 LSTM kernel: the module's functions are swapped and its stacked
    weights dropped, both restored on leaving."""
    from elmo.inference import runtime as runtime_module

    if runtime.graphs is not None:
        raise ValueError("the legacy inference path has no CUDA graphs: use a runtime without cuda_graphs")
    saved = runtime_module.bilstm_inference, runtime_module.stack_directions
    runtime._stacked.clear()
    runtime_module.bilstm_inference, runtime_module.stack_directions = bilstm_inference_legacy, stack_directions_legacy
    try:
        yield runtime
    finally:
        runtime_module.bilstm_inference, runtime_module.stack_directions = saved
        runtime._stacked.clear()
