"""The fused training path of the LSTM: every direction of one layer over a whole window, as one
``torch.autograd.Function`` (:func:`lstm_fused`).

The arithmetic is the specification's (:func:`elmo.model.network.lstm_plain`: bilm-tf's gates
``i, j, f, o``, the forget bias +1, cell and projection clipping), so a model trains the same and
its files do not change. What changes is how many operations a window takes. The directions' layers
(the same sizes, their own weights) run as one batched product over a leading direction axis, and
per timestep the forward is::

    gates = baddbmm(x_gates[t], h, W_h)        # recurrent half of the gates, all directions
    acts, c_raw, c, m = cell_forward(gates, c)  # one pointwise function
    h = clip(bmm(m, W_P))                        # projection and its clip

and the backward::

    dh = clip_backward(baddbmm(dout[t], dgates[t+1], W_h), h_raw[t])  # one pointwise function
    dm = bmm(dh, W_P)
    dc, dgates[t] = cell_backward(dm, dc, acts[t], ...)                # one pointwise function

The input half of the gates is one product over all ``time x batch`` rows before the loop, and the
weight gradients are one product each over all rows after it. The pointwise functions are plain
PyTorch (several kernels each: on a CPU a step's slices stay in cache between them); with
``compiled=True`` they go through ``torch.compile``, which on a GPU makes each of them one kernel.

Buffers are time-major, ``(directions, time, batch, ...)``: a timestep's slice of every direction is
one strided block, and ``(directions, time * batch, ...)`` is a view for the window-wide products.
Under autocast the products run in the autocast dtype and the cell state and nonlinearities'
derivatives in float32, as :func:`elmo.kernels.cpu_lstm.bilstm_inference` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from elmo.kernels import blocks
from elmo.model.network import FORGET_BIAS, LstmLayer


def _cell_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh``: on a CPU in float32 as ``2 sigmoid(2x) - 1`` (3.2x faster than ``torch.tanh`` for a
    cell's (2, 32, 512) on the development CPU, within 2e-7 of it), elsewhere ``torch.tanh`` (one
    kernel on a GPU, and exact in float64)."""
    if x.device.type == "cpu" and x.dtype == torch.float32:
        return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)
    return torch.tanh(x)

# ------------------------------------------------------------------ the pointwise functions


def cell_forward(gates: torch.Tensor, c_prev: torch.Tensor, cell_clip: float | None,
                 out: tuple[torch.Tensor | None, ...] | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cell's pointwise step.

    ``gates``: ``(n, batch, 4*dim)`` pre-activations in bilm-tf's order ``i, j, f, o`` with the
    forget bias already added to ``f``; ``c_prev``: ``(n, batch, dim)`` (float32, or float64).
    Returns the activations ``(n, batch, 4*dim)`` ``[sigmoid(i), tanh(j), sigmoid(f), sigmoid(o)]``
    in ``gates``' dtype, the unclipped cell ``c_raw`` and the clipped cell ``c`` (``c_prev``'s
    dtype), and ``m = sigmoid(o) * tanh(c)`` in ``gates``' dtype (the projection's input).
    ``out``: tensors to write the four results into (``c``'s None without a clip, which leaves
    ``c`` the same tensor as ``c_raw``), or None for new ones.
    """
    acts_out, raw_out, c_out, m_out = out if out is not None else (None, None, None, None)
    dim = c_prev.shape[-1]
    acts = torch.sigmoid(gates, out=acts_out)
    acts[..., dim:2 * dim] = _cell_tanh(gates[..., dim:2 * dim])
    i, g, f, o = acts[..., :dim], acts[..., dim:2 * dim], acts[..., 2 * dim:3 * dim], acts[..., 3 * dim:]
    # sigmoid(f + 1) * c_prev + sigmoid(i) * tanh(j)
    c_raw = torch.addcmul(f * c_prev, i.to(c_prev.dtype), g, out=raw_out)
    c = torch.clamp(c_raw, -cell_clip, cell_clip, out=c_out) if cell_clip is not None else c_raw
    if m_out is not None:
        m = torch.mul(o, _cell_tanh(c), out=m_out)
    else:
        m = (o * _cell_tanh(c)).to(gates.dtype)
    return acts, c_raw, c, m


def cell_backward(dm: torch.Tensor, dc_next: torch.Tensor, acts: torch.Tensor, c_prev: torch.Tensor, c: torch.Tensor,
                  c_raw: torch.Tensor | None, f_next: torch.Tensor | None, cell_clip: float | None,
                  extra: torch.Tensor | None = None, out: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the backward recurrence, from :func:`cell_forward`'s saved results of that step.

    ``dm``: ``(n, batch, dim)``, the gradient of ``m``; ``dc_next``: the gradient of the next
    step's unclipped cell, which reaches this step's cell through the next forget gate ``f_next``
    (``(n, batch, dim)``, that step's activation; None at the window's last step, where
    ``dc_next`` is the final cell's own gradient, or None when it has none); ``extra``: a gradient that reaches this step's
    cell from outside (a final state taken here). Returns this step's unclipped cell's gradient
    ``dc`` (``c``'s dtype) and the gates' gradient ``(n, batch, 4*dim)`` in ``dm``'s dtype (computed
    in ``c``'s, in ``out`` when given).
    """
    dim = c.shape[-1]
    a = acts.to(c.dtype)
    i, g, o = a[..., :dim], a[..., dim:2 * dim], a[..., 3 * dim:]
    dmf = dm.to(c.dtype)
    tc = _cell_tanh(c)  # as the forward computed it
    dc = dmf * o
    dc = torch.addcmul(dc, dc * tc, tc, value=-1.0)  # through m = o * tanh(c)
    if f_next is not None:
        dc = torch.addcmul(dc, dc_next, f_next)
    elif dc_next is not None:
        dc = dc + dc_next
    if extra is not None:
        dc = dc + extra
    if cell_clip is not None:
        dc = torch.where(c_raw.abs() <= cell_clip, dc, 0.0)  # torch.clamp's rule: the bounds pass
    d_gates = torch.addcmul(a, a, a, value=-1.0, out=out)  # s (1 - s): the sigmoid gates' slopes
    d_gates[..., dim:2 * dim] = torch.addcmul(torch.ones_like(g), g, g, value=-1.0)  # 1 - tanh(j)^2
    n, batch = dc.shape[:2]
    by_gate = d_gates.view(n, batch, 4, dim)  # times what each gate's activation multiplies
    by_gate[:, :, :3].mul_(dc.unsqueeze(-2))
    by_gate[:, :, 0].mul_(g)
    by_gate[:, :, 1].mul_(i)
    by_gate[:, :, 2].mul_(c_prev)
    by_gate[:, :, 3].mul_(dmf * tc)
    return dc, d_gates.to(dm.dtype)


def clip_backward(grad: torch.Tensor, raw: torch.Tensor, clip: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """The gradient through ``raw.clamp(-clip, clip)``: ``grad`` where ``|raw| <= clip``, else 0."""
    return torch.mul(grad, raw.abs() <= clip, out=out)


class CellFunctions(NamedTuple):
    """The pointwise functions of the fused path (eager, or compiled)."""

    forward: Callable
    backward: Callable
    clip_backward: Callable


EAGER_CELLS = CellFunctions(cell_forward, cell_backward, clip_backward)
_compiled_cells: CellFunctions | None = None


def cell_functions(compiled: bool) -> CellFunctions:
    """The pointwise functions: eager, or each through ``torch.compile`` (compiled on first use;
    one kernel each on a GPU, C++ on a CPU with a compiler)."""
    global _compiled_cells
    if not compiled:
        return EAGER_CELLS
    if _compiled_cells is None:
        _compiled_cells = CellFunctions(*(torch.compile(f, dynamic=False, fullgraph=True) for f in EAGER_CELLS))
    return _compiled_cells


# ------------------------------------------------------------------------------ the Function


class _Plan(NamedTuple):
    """What a window's Function needs beyond its tensors."""

    cell_clip: float | None
    proj_clip: float | None
    dtype: torch.dtype  # of the matrix products (the autocast dtype, or the weights')
    cell_dtype: torch.dtype  # of the cell state and the derivatives
    lengths: torch.Tensor | None  # (n, batch); None: every row runs the whole window
    cells: CellFunctions


def _stack(weights: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    return torch.stack(list(weights)).to(dtype)


def _backward_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``(n, out, in)`` transposed, for the backward's products, which multiply by the
    weight rather than by its transpose: a contiguous ``(n, in, out)`` copy, made once per window,
    where :func:`_product` runs oneDNN's kernel (which reads it so), else a view."""
    transposed = weight.transpose(1, 2)
    return transposed.contiguous() if blocks.onednn_trains(weight, weight) else transposed


def _product(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None = None,
             out: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T`` per direction, plus ``add`` ``(n, rows, out)`` or ``bias`` ``(n, out)``
    if given: ``x`` ``(n, rows, in)``, ``weight`` ``(n, out, in)``; written into ``out`` when
    given. One batched product (``torch.bmm``/``baddbmm``, the GPU's branch), or oneDNN's kernel
    once per direction where :func:`elmo.kernels.blocks.onednn_trains` says so (it reads ``weight``
    contiguous): at a training step's shapes (batch 32, the packaged model) 1.3-1.7x as fast as
    MKL's batched product on the development EPYC, single-threaded (docs/training.md)."""
    if not blocks.onednn_trains(x, weight):
        if bias is not None:
            add = bias.unsqueeze(1)
        if add is None:
            return torch.bmm(x, weight.transpose(1, 2), out=out)
        return torch.baddbmm(add, x, weight.transpose(1, 2), out=out)
    if out is None:
        out = x.new_empty((x.shape[0], x.shape[1], weight.shape[1]))
    for direction in range(x.shape[0]):
        product = blocks.linear(x[direction].contiguous(), weight[direction].contiguous(),
                                bias[direction] if bias is not None else None)
        if add is None:
            out[direction].copy_(product)
        else:
            torch.add(product, add[direction], out=out[direction])
    return out


class _FusedWindow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, c0: torch.Tensor, h0: torch.Tensor, plan: _Plan, *weights: torch.Tensor):
        ctx.set_materialize_grads(False)
        with torch.autocast(x.device.type, enabled=False):
            return _window_forward(ctx, x, c0, h0, plan, weights)

    @staticmethod
    def backward(ctx, d_out: torch.Tensor | None, d_c: torch.Tensor | None, d_h: torch.Tensor | None):
        with torch.autocast(ctx.device_type, enabled=False):
            return _window_backward(ctx, d_out, d_c, d_h)


def _window_forward(ctx, x, c0, h0, plan: _Plan, weights):
    n, time, batch, input_dim = x.shape
    dtype, cell_dtype = plan.dtype, plan.cell_dtype
    w_x, w_h, bias, w_p = (_stack(weights[k::4], dtype) for k in range(4))  # (n, 4*dim, in), (n, 4*dim, proj), ...
    dim, proj = w_p.shape[2], w_p.shape[1]
    bias[:, 2 * dim:3 * dim] += FORGET_BIAS  # a fresh tensor: the parameters are untouched
    xs = x.to(dtype).reshape(n, time * batch, input_dim)
    x_gates = _product(xs, w_x, bias=bias).view(n, time, batch, 4 * dim)
    c, h = c0.to(cell_dtype), h0.to(dtype)
    cells_fn, cell_clip, proj_clip = plan.cells, plan.cell_clip, plan.proj_clip
    if cells_fn is EAGER_CELLS:
        # Every step writes into whole-window buffers: nothing is copied into place afterwards.
        all_acts = x_gates.new_empty((n, time, batch, 4 * dim))
        all_c = c.new_empty((n, time + 1, batch, dim))
        raw_c = c.new_empty((n, time, batch, dim)) if cell_clip is not None else None
        ms = x_gates.new_empty((n, time, batch, dim))
        all_h = x_gates.new_empty((n, time + 1, batch, proj))
        raw_h = x_gates.new_empty((n, time, batch, proj)) if proj_clip is not None else None
        all_c[:, 0], all_h[:, 0] = c, h
        acts_t, c_t, m_t, h_t = all_acts.unbind(1), all_c.unbind(1), ms.unbind(1), all_h.unbind(1)
        raw_c_t = raw_c.unbind(1) if raw_c is not None else None
        raw_h_t = raw_h.unbind(1) if raw_h is not None else None
        for t, x_gates_t in enumerate(x_gates.unbind(1)):
            gates = _product(h, w_h, add=x_gates_t)  # (n, batch, 4*dim)
            out = (acts_t[t], raw_c_t[t], c_t[t + 1], m_t[t]) if raw_c_t is not None else (acts_t[t], c_t[t + 1], None, m_t[t])
            _, _, c, m = cells_fn.forward(gates, c, cell_clip, out)
            if raw_h_t is not None:
                h = torch.clamp(_product(m, w_p, out=raw_h_t[t]), -proj_clip, proj_clip, out=h_t[t + 1])
            else:
                h = _product(m, w_p, out=h_t[t + 1])
    else:
        acts_steps, raw_cells, cells, m_steps, raw_outputs, outputs = [], [], [c], [], [], [h]
        for x_gates_t in x_gates.unbind(1):
            gates = _product(h, w_h, add=x_gates_t)  # (n, batch, 4*dim)
            acts, c_raw, c, m = cells_fn.forward(gates, c, cell_clip)
            h_raw = _product(m, w_p)  # (n, batch, proj)
            h = h_raw.clamp(-proj_clip, proj_clip) if proj_clip is not None else h_raw
            acts_steps.append(acts)
            raw_cells.append(c_raw)
            cells.append(c)
            m_steps.append(m)
            raw_outputs.append(h_raw)
            outputs.append(h)
        all_h = torch.stack(outputs, dim=1)  # (n, time + 1, batch, proj): the initial h first
        all_c = torch.stack(cells, dim=1)  # (n, time + 1, batch, dim)
        all_acts = raw_c = ms = raw_h = None  # stacked below, only if a backward will need them
    out = all_h[:, 1:]
    keep = None
    if plan.lengths is not None:
        # Each row's final state is the one after its last real step (the initial one for an empty
        # row); padded steps ran on, but their outputs are zeroed and no gradient reaches them.
        index = plan.lengths.view(n, 1, batch, 1)
        c = all_c.gather(1, index.expand(n, 1, batch, dim)).squeeze(1)
        h = all_h.gather(1, index.expand(n, 1, batch, proj)).squeeze(1)
        keep = (torch.arange(time, device=x.device).view(1, time, 1) < plan.lengths.unsqueeze(1)).unsqueeze(-1)
        out = out * keep
    if any(ctx.needs_input_grad):
        ctx.plan, ctx.keep, ctx.shape = plan, keep, (n, time, batch, input_dim, dim, proj)
        ctx.device_type = x.device.type
        ctx.weight_dtypes = [w.dtype for w in weights]
        if all_acts is None:
            all_acts, ms = torch.stack(acts_steps, dim=1), torch.stack(m_steps, dim=1)
            raw_c = torch.stack(raw_cells, dim=1) if cell_clip is not None else None
            raw_h = torch.stack(raw_outputs, dim=1) if proj_clip is not None else None
        ctx.save_for_backward(xs, all_acts, raw_c, all_c, ms, raw_h, all_h, w_x, w_h, w_p)
    return out, c, h.to(cell_dtype)


def _window_backward(ctx, d_out, d_c, d_h):
    """The gradients of :func:`_window_forward`'s window (``d_out`` ``(n, time, batch, proj)``, the
    final states' ``d_c`` and ``d_h``), step by step from the last, through the clipped cell and
    the projection, to the inputs and the three weights.

    Long on purpose: one reverse pass over the saved activations, whose running ``d_c``/``d_h``
    and weight-gradient accumulators live across every step; split, each piece would take and
    return all of them. tests/test_fused_lstm.py holds it to autograd through the specification.
    """
    xs, acts, raw_c, all_c, ms, raw_h, all_h, w_x, w_h, w_p = ctx.saved_tensors
    plan: _Plan = ctx.plan
    cells = plan.cells
    n, time, batch, input_dim, dim, proj = ctx.shape
    dtype = plan.dtype
    # Final states nobody used (a training window's, detached) come as None: zeros, not computed.
    d_out = d_out.to(dtype) if d_out is not None else torch.zeros_like(all_h[:, 1:])
    d_c = d_c.to(plan.cell_dtype) if d_c is not None else None
    d_h = d_h.to(dtype) if d_h is not None else None
    extra = None
    if plan.lengths is None:
        dc = d_c  # the last step's dc_next: the final cell's gradient (None: none)
        d_out_last = d_out[:, -1] + d_h if d_h is not None else d_out[:, -1]
    else:
        # The final state was taken after each row's last real step: its gradients enter there.
        if d_h is None:
            d_h = torch.zeros_like(all_h[:, 0])
        if d_c is None:
            d_c = torch.zeros_like(all_c[:, 0])
        real = (plan.lengths > 0).unsqueeze(-1)  # (n, batch, 1)
        index = (plan.lengths - 1).clamp(min=0).view(n, 1, batch, 1)
        d_out = (d_out * ctx.keep).scatter_add(1, index.expand(n, 1, batch, proj), (d_h * real).unsqueeze(1))
        extra = torch.zeros_like(all_c[:, 1:]).scatter(1, index.expand(n, 1, batch, dim), (d_c * real).unsqueeze(1))
        extra = extra.unbind(1)
        dc = torch.zeros_like(d_c)
        d_out_last = d_out[:, -1]
    d_out_steps, acts_steps, cell_steps = d_out.unbind(1), acts.unbind(1), all_c.unbind(1)
    raw_c_steps = raw_c.unbind(1) if raw_c is not None else [None] * time
    raw_h_steps = raw_h.unbind(1) if raw_h is not None else None
    eager = cells is EAGER_CELLS
    if eager:  # whole-window buffers, as in the forward (d_gates in the cell's dtype, cast once below)
        d_gates_buffer = all_c.new_empty((n, time, batch, 4 * dim))
        dh_buffer = all_h.new_empty((n, time, batch, proj))
        d_gates_out, dh_out = d_gates_buffer.unbind(1), dh_buffer.unbind(1)
    d_gates, d_hs = [None] * time, [None] * time
    d_gates_next = None
    w_h_back, w_p_back = _backward_weight(w_h), _backward_weight(w_p)
    for t in range(time - 1, -1, -1):
        if raw_h_steps is not None:
            dh = d_out_last if d_gates_next is None else _product(d_gates_next, w_h_back, add=d_out_steps[t])
            dh = cells.clip_backward(dh, raw_h_steps[t], plan.proj_clip, out=dh_out[t] if eager else None)
        elif d_gates_next is None:
            dh = dh_out[t].copy_(d_out_last) if eager else d_out_last
        else:  # (n, batch, 4*dim) @ (n, 4*dim, proj)
            dh = _product(d_gates_next, w_h_back, add=d_out_steps[t], out=dh_out[t] if eager else None)
        dm = _product(dh, w_p_back)  # (n, batch, proj) @ (n, proj, dim)
        f_next = acts_steps[t + 1][..., 2 * dim:3 * dim] if t + 1 < time else None
        dc, d_gates_next = cells.backward(dm, dc, acts_steps[t], cell_steps[t], cell_steps[t + 1], raw_c_steps[t],
                                          f_next, plan.cell_clip, extra[t] if extra is not None else None,
                                          out=d_gates_out[t] if eager else None)
        d_gates[t], d_hs[t] = d_gates_next, dh
    if eager:
        all_d_gates = d_gates_buffer.to(dtype).view(n, time * batch, 4 * dim)
        all_dh = dh_buffer.view(n, time * batch, proj)
    else:
        all_d_gates = torch.stack(d_gates, dim=1).view(n, time * batch, 4 * dim)
        all_dh = torch.stack(d_hs, dim=1).view(n, time * batch, proj)
    needs = ctx.needs_input_grad
    dx = dc0 = dh0 = None
    if needs[0]:
        dx = _product(all_d_gates, _backward_weight(w_x)).view(n, time, batch, input_dim)
    if needs[1]:
        dc0 = dc * acts[:, 0, :, 2 * dim:3 * dim]
        if plan.lengths is not None:
            dc0 = dc0 + d_c * (plan.lengths == 0).unsqueeze(-1)
    if needs[2]:
        dh0 = _product(d_gates_next, w_h_back)
        if plan.lengths is not None:
            dh0 = dh0 + d_h * (plan.lengths == 0).unsqueeze(-1)
    # Sums over every row of the window, kept as batched products: oneDNN's kernel would read both
    # operands transposed into copies, which cost it what it saved (docs/training.md).
    d_gates_t = all_d_gates.transpose(1, 2)  # (n, 4*dim, time * batch)
    grads = (torch.bmm(d_gates_t, xs),  # input weights (n, 4*dim, in)
             torch.bmm(d_gates_t, all_h[:, :-1].reshape(n, time * batch, proj)),  # state weights
             all_d_gates.sum(1),  # biases
             torch.bmm(all_dh.transpose(1, 2), ms.reshape(n, time * batch, dim)))  # projections (n, proj, dim)
    per_weight = []
    for direction in range(n):
        for kind in range(4):
            per_weight.append(grads[kind][direction].to(ctx.weight_dtypes[4 * direction + kind])
                              if needs[4 + 4 * direction + kind] else None)
    return (dx, dc0, dh0, None, *per_weight)


# --------------------------------------------------------------------------- the public path


def autocast_dtype(device: torch.device, default: torch.dtype) -> torch.dtype:
    """The dtype of the matrix products: autocast's when it is on for ``device``, else ``default``."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return default


def lstm_fused(layers: Sequence[LstmLayer], inputs: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None,
               lengths: torch.Tensor | None = None, compiled: bool = False,
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``len(layers)`` LSTM layers of the same sizes and clips (the directions of one biLM layer),
    each over its own input, as one fused window.

    ``inputs``: ``(n, time, batch, input_dim)``, time-major; ``state``: ``(c (n, batch, dim),
    h (n, batch, projection_dim))`` or None for zeros; ``lengths``: ``(n, batch)`` real steps per
    row (a prefix of each row; None: all ``time``). Returns ``outputs`` ``(n, time, batch,
    projection_dim)`` (zero past each row's length) and the final ``(c, h)`` of every row, float32
    (float64 for float64 weights). The numbers are :func:`elmo.model.network.lstm_plain`'s for each
    layer, to float rounding, values and gradients (inputs, initial state, every weight).
    ``compiled``: the pointwise functions through ``torch.compile`` (:func:`cell_functions`).
    """
    first = layers[0]
    for layer in layers[1:]:
        if (layer.input_dim, layer.dim, layer.projection_dim, layer.cell_clip, layer.proj_clip) != (
                first.input_dim, first.dim, first.projection_dim, first.cell_clip, first.proj_clip):
            raise ValueError("lstm_fused: the layers differ in size or clipping")
    n, time, batch, _ = inputs.shape
    if n != len(layers):
        raise ValueError(f"lstm_fused: {len(layers)} layers but inputs for {n}")
    weight_dtype = first.input_weight.dtype
    dtype = autocast_dtype(inputs.device, weight_dtype)
    cell_dtype = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    if state is None:
        state = (inputs.new_zeros((n, batch, first.dim), dtype=cell_dtype),
                 inputs.new_zeros((n, batch, first.projection_dim), dtype=cell_dtype))
    if time == 0:
        return inputs.new_zeros((n, 0, batch, first.projection_dim), dtype=dtype), state
    plan = _Plan(first.cell_clip, first.proj_clip, dtype, cell_dtype, lengths, cell_functions(compiled))
    weights = [w for layer in layers for w in (layer.input_weight, layer.state_weight, layer.bias, layer.projection)]
    out, c, h = _FusedWindow.apply(inputs, state[0], state[1], plan, *weights)
    return out, (c, h)
