"""The LSTM's inference kernels: both directions of a layer at once (:func:`bilstm_inference`),
every matrix product on fixed row blocks through oneDNN on a CPU (:mod:`elmo.kernels.blocks`),
the cell's pointwise part in place (:func:`lstm_cell_inplace`), and the static-shape chunk a CUDA
graph captures (:func:`bilstm_static_chunk`). The arithmetic is the specification's
(:func:`elmo.model.network.lstm_plain`: bilm-tf's gates, forget bias, clipping), folded into the
weights where that is exact; in float32 the same numbers, to float rounding.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

import torch

from elmo.kernels import blocks
from elmo.kernels.blocks import (GATE_BLOCK, activation_dtype, block_sizes, in_blocks, linear, onednn_for, pad_rows,
                                 padded, prepack, products_dtype, quantize, row_block)
from elmo.model.network import FORGET_BIAS, LstmLayer

# Timesteps whose input gates are precomputed at once: bounds memory on very long sentences.
GATE_CHUNK_STEPS = 128


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x) = 2 sigmoid(2x) - 1``: on this PyTorch's CPU kernels 2.3x faster than
    ``torch.tanh`` for the cell's shapes (61 vs 142 us on (2, 64, 1024)), within 2e-7 of it."""
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


class LinearWeights(NamedTuple):
    """One direction's weights in the layout of :func:`elmo.kernels.blocks.linear` (``(out, in)``,
    contiguous, in float32; in bfloat16 pre-packed by :func:`elmo.kernels.blocks.prepack` for the
    block size each runs on; for int8, :func:`elmo.kernels.blocks.quantize`'s weights), for the CPU's
    oneDNN products."""

    input: torch.Tensor        # (4*dim, input_dim)
    state: torch.Tensor        # (4*dim, proj)
    projection: torch.Tensor   # (proj, dim)
    # (4*dim,) float32, forget bias included: added in float32 by the kernel of the recurrent
    # product (float32) or of the input half (bfloat16, before its result's one rounding).
    bias: torch.Tensor


class StackedWeights(NamedTuple):
    """Both directions' weights laid out for batched products (see :func:`stack_directions`).

    The gate arithmetic is folded into them, exactly or to float rounding: the bias includes the
    forget gate's +1, and where ``doubled_j`` the rows of the ``j`` gate are multiplied by 2 (exact)
    so that one sigmoid over all four gates also gives ``tanh(j) = 2 sigmoid(2j) - 1``. Where
    ``double_j_after``, the weights are the layers' own instead (no copy) and the ``j`` quarter
    of the gates is doubled once they are summed: the same bits, since doubling is exact.
    """

    # The batched layout, or None where only oneDNN's products run (a CPU): ``linear`` holds
    # their weights, and a batched copy would double the memory they take.
    input: torch.Tensor | None        # (2, input_dim, 4*dim)
    state: torch.Tensor | None        # (2, proj, 4*dim)
    projection: torch.Tensor | None   # (2, dim, proj)
    bias: torch.Tensor                # (2, 1, 4*dim), float32, forget bias included
    # Per direction, the same weights for oneDNN's products (:func:`elmo.kernels.blocks.linear`), or
    # None where the products run through ``torch.bmm`` (a GPU, float16, no oneDNN, or bfloat16
    # where oneDNN lacks the CPU's bfloat16 instructions).
    linear: tuple[LinearWeights, LinearWeights] | None = None
    doubled_j: bool = False
    double_j_after: bool = False


def tanh_by_sigmoid(device: torch.device) -> bool:
    """Whether tanh is computed as ``2 sigmoid(2x) - 1`` on ``device`` (see :func:`_tanh`): on a
    CPU, where it is faster; on a GPU ``torch.tanh`` is one kernel, the other form four."""
    return device.type == "cpu"


@torch.inference_mode()
def stack_directions(forward_layer: LstmLayer, backward_layer: LstmLayer, dtype: torch.dtype) -> StackedWeights:
    """Both directions' weights for :func:`bilstm_inference`'s products in ``dtype`` (the bias in
    float32). Where oneDNN's products run (a CPU), only what they read is kept
    (:attr:`StackedWeights.linear`): in float32 the layers' own weights, no copy; in bfloat16
    packed copies; for ``torch.int8`` (where :func:`elmo.kernels.blocks.int8_for`, elsewhere
    float32) quantized ones (:func:`elmo.kernels.blocks.quantize`). Elsewhere (a GPU, float16, no
    oneDNN) the batched layout for ``torch.bmm``."""
    layers = (forward_layer, backward_layer)
    dim = forward_layer.dim
    device = forward_layer.state_weight.device
    dtype = products_dtype(dtype, device)
    int8, dtype = dtype == torch.int8, activation_dtype(dtype)
    doubled = tanh_by_sigmoid(device)
    # Per gate row: 2 for j's rows where doubled (exact in floating point), 1 elsewhere.
    scale = torch.ones(4 * dim, device=device)
    if doubled:
        scale[dim:2 * dim] = 2.0
    forget = torch.zeros_like(scale)
    forget[2 * dim:3 * dim] = FORGET_BIAS * scale[2 * dim:3 * dim]
    biases = [l.bias.detach().float() * scale + forget for l in layers]  # (4*dim,) each
    if onednn_for(device, dtype) and dtype == torch.float32 and not int8:
        # The layers' own weights, in the (out, in) layout oneDNN reads: no copy (288 MB at the
        # original size). j's doubling moves to the summed gates (double_j_after), and so does
        # the bias's: the bias here is unscaled (forget's +1 is on f's rows, never doubled).
        bias = torch.stack([l.bias.detach().float() + forget for l in layers])  # (2, 4*dim)
        linear = tuple(LinearWeights(l.input_weight.detach().contiguous(), l.state_weight.detach().contiguous(),
                                     l.projection.detach().contiguous(), bias[d]) for d, l in enumerate(layers))
        return StackedWeights(None, None, None, bias.unsqueeze(1), linear, doubled, double_j_after=doubled)
    state_weights = [l.state_weight.detach() * scale.unsqueeze(1) for l in layers]  # (4*dim, proj)
    if onednn_for(device, dtype):
        inputs = torch.stack([l.input_weight.detach() * scale.unsqueeze(1) for l in layers]).to(dtype)  # (2, 4*dim, in)
        states = torch.stack(state_weights).to(dtype)  # (2, 4*dim, proj)
        projections = torch.stack([l.projection.detach() for l in layers]).to(dtype)  # (2, proj, dim)
        bias = torch.stack(biases)  # (2, 4*dim)
        rows, gate = row_block(device), block_sizes(device).gate
        # Each weight made once into what its products read, for the block size it runs on: int8
        # quantized; bfloat16 packed, so that no product reorders it again (docs/speed.md,
        # "What bounds bfloat16 on this CPU"). Only these are kept: the plain copies above
        # (144 MB in bfloat16 at the original size, 288 MB in float32 for int8) go.
        pack = quantize if int8 else prepack
        linear = tuple(LinearWeights(pack(inputs[d], gate), pack(states[d], rows), pack(projections[d], rows), bias[d])
                       for d in range(2))
        return StackedWeights(None, None, None, bias.unsqueeze(1), linear, doubled)
    return StackedWeights(torch.stack([l.input_weight.detach().t() * scale for l in layers]).to(dtype),
                          torch.stack([w.t() for w in state_weights]).to(dtype),
                          torch.stack([l.projection.detach().t() for l in layers]).to(dtype),
                          torch.stack(biases).unsqueeze(1),
                          None, doubled)


def lstm_cell_inplace(gates: torch.Tensor, c: torch.Tensor, cell_clip: float | None, doubled_j: bool,
                      c_out: torch.Tensor | None = None, dtype: torch.dtype = torch.float32,
                      q_out: torch.Tensor | None = None) -> torch.Tensor:
    """The cell's pointwise part, for gates computed with :class:`StackedWeights` (forget bias
    included; ``j`` doubled where ``doubled_j``): writes the new, clipped cell state into ``c_out``
    (default: ``c`` itself, in place) and returns ``sigmoid(o) * tanh(c_new)`` ``(..., dim)`` in
    ``dtype``, the projection's input (written into ``q_out`` where given). ``c``: ``(..., dim)``; ``gates`` ``(..., 4*dim)`` float32 is
    overwritten.

    Few kernels: one sigmoid over all four gates, ``c * f + i * tanh(j)`` as one multiply and one
    ``addcmul``, the product cast to ``dtype`` as it is written, and tanh as ``2 sigmoid(2x) - 1``
    only where ``doubled_j`` (a CPU)."""
    if doubled_j:
        i, j, f, o = torch.sigmoid_(gates).chunk(4, dim=-1)
        tanh_j, tanh = j.mul_(2.0).sub_(1.0), _tanh  # 2 sigmoid(2j) - 1
    else:
        dim = gates.shape[-1] // 4
        tanh_j, tanh = torch.tanh(gates[..., dim:2 * dim]), torch.tanh
        i, _, f, o = torch.sigmoid_(gates).chunk(4, dim=-1)
    c = torch.mul(c, f, out=c if c_out is None else c_out).addcmul_(i, tanh_j)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    if q_out is not None:
        return torch.mul(o, tanh(c), out=q_out)
    if dtype == torch.float32:
        return o * tanh(c)
    return torch.mul(o, tanh(c), out=torch.empty(o.shape, dtype=dtype, device=o.device))


def _recurrent_gates(x_gates: torch.Tensor, h: torch.Tensor, weights: StackedWeights) -> torch.Tensor:
    """``x_gates + h W_h`` ``(2, rows, 4*dim)`` float32, for the input half ``x_gates`` (float32)
    and the state ``h`` ``(2, rows, proj)`` in the products' precision, as one batched product (the
    static-shape chunks of CUDA graphs)."""
    if h.dtype == torch.float32:
        return torch.baddbmm(x_gates, h, weights.state)
    return torch.add(x_gates, torch.bmm(h, weights.state))  # float32 + low precision: float32


class BlockedGates:
    """The input half of the gates of one chunk's running (step, row) pairs, in time-major order,
    as oneDNN's products compute it: on whole blocks of ``block`` pairs (the last padded with zero
    rows), each block computed when a step first needs it and dropped once the steps have passed
    it. Only the running pairs are in ``x``: with the padding of a batch's shorter sentences
    beside them, the blocks of its last steps were mostly padding (328 blocks where 244 do now,
    at the original size on 300 Wikipedia sentences); each pair's numbers are the same wherever
    its block puts it. In bfloat16 (``with_bias``) the float32 bias is added in the kernel before
    its one rounding; in float32 the recurrent product adds it instead.

    Computing every block of the chunk first and keeping them (hundreds of megabytes at the
    original size) cost more than the products: memory that large is fresh, and reading it back
    from memory at every step was slower still. A block's numbers are the same whenever it is
    computed (the same product on the same rows), so computing them as needed changes none.
    ``x``: ``(2, pairs, input_dim)`` in the products' dtype, ``step_rows[i]`` pairs (the first rows)
    for the chunk's step ``i``."""

    def __init__(self, x: torch.Tensor, linear_weights: tuple[LinearWeights, LinearWeights], block: int,
                 step_rows: Sequence[int], with_bias: bool = True):
        self.x = pad_rows(x, padded(x.shape[1], block), dim=1)
        self.weights, self.block = linear_weights, block
        self.firsts = [0, *itertools.accumulate(step_rows)]  # each step's first pair
        self.with_bias = with_bias
        self.blocks: dict[int, list[torch.Tensor]] = {}

    def _block(self, k: int) -> list[torch.Tensor]:
        """Block ``k``'s products, per direction ``(block, 4*dim)`` bfloat16 (steps only move on:
        the blocks before it are dropped)."""
        found = self.blocks.get(k)
        if found is None:
            for passed in [j for j in self.blocks if j < k]:
                del self.blocks[passed]
            part = slice(k * self.block, (k + 1) * self.block)
            found = self.blocks[k] = [linear(self.x[d, part], w.input, w.bias if self.with_bias else None)
                                      for d, w in enumerate(self.weights)]
        return found

    def add_to(self, gates: torch.Tensor, step: int, count: int) -> torch.Tensor:
        """``gates`` ``(2, count, 4*dim)`` float32 plus the input half of the first ``count`` rows
        at ``step`` (of the chunk; at most its running rows), in place; returns ``gates``."""
        first = self.firsts[step]
        stop = first + count
        assert stop <= self.firsts[step + 1], "more rows than the step's running ones"
        for k in range(first // self.block, -(-stop // self.block)):
            lo, hi = max(first, k * self.block), min(stop, (k + 1) * self.block)
            products = self._block(k)
            for d in range(2):
                gates[d, lo - first:hi - first].add_(products[d][lo - k * self.block:hi - k * self.block])
        return gates


def _column_parts(direction: LinearWeights, bias: torch.Tensor | None,
                  ) -> list[tuple[object, torch.Tensor | None, slice, bool]]:
    """One direction's recurrent product in parts of gate columns: ``[(weight, bias, columns,
    transposed), ...]``. A plain float32 weight comes in parts of
    :data:`~elmo.kernels.blocks.COLUMN_BLOCK` columns (views, no copy), each multiplied
    ``transposed``: as ``part @ block.T``, the bias added after, with the part's gate rows
    (thousands) in oneDNN's row dimension and the block's 16 rows as its weight. On the original
    size's step that ran 1.23x as fast as ``block @ part.T`` (233 against 189 GFLOP/s), with the
    same bits (measured by ``benchmarks/column_parts.py`` at commit 1a3a222), and a block's rows are still one fixed-shape
    product's, whatever the batch. A packed or quantized weight comes whole (``slice(None)``, not
    transposed): it cannot be sliced, and bfloat16's fits the cache and runs faster packed."""
    state = direction.state
    if not (isinstance(state, torch.Tensor) and state.dtype == torch.float32 and state.layout == torch.strided):
        return [(state, bias, slice(None), False)]
    width, part = state.shape[0], blocks.COLUMN_BLOCK
    return [(state[lo:lo + part], bias[lo:lo + part], slice(lo, min(lo + part, width)), True)
            for lo in range(0, width, part)]


def _recurrent_gates_in_blocks(x_gates: torch.Tensor | tuple[BlockedGates, int], h: torch.Tensor,
                               weights: StackedWeights, rows: int, gates: torch.Tensor, block_rows: int,
                               ) -> torch.Tensor:
    """``x_gates + h W_h`` ``(2, rows, 4*dim)`` float32 for the ``rows`` rows of ``x_gates`` (the
    running ones), with the products over whole blocks of ``block_rows`` rows of ``h`` (the bias
    added with them), written into ``gates`` ``(2, >= rows rounded up to a block,
    4*dim)`` float32; ``h`` as in :func:`_recurrent_gates`. ``x_gates`` may be a
    :class:`BlockedGates` and the step to read from it. The ``j`` quarter comes out doubled where
    ``weights.doubled_j``."""
    starts = range(0, padded(rows, block_rows), block_rows)
    if weights.linear is not None:
        # Direction by direction, all of its blocks in a row: a direction's weight (16 MB in
        # bfloat16 at the original size) is then read from memory once per step and from the
        # cache for its other blocks, not once per block (both directions' weights do not fit in
        # a 32 MB L3 together); float32's 32 MB weight, in column parts (:func:`_column_parts`).
        # The same products on the same rows: the same numbers.
        for d, direction in enumerate(weights.linear):
            # In bfloat16 the bias joined the input half (:class:`BlockedGates`).
            bias = direction.bias if h.dtype == torch.float32 else None
            for state, part_bias, columns, transposed in _column_parts(direction, bias):
                for start in starts:
                    block = h[d, start:start + block_rows]
                    if transposed:
                        torch.add(linear(state, block.contiguous()).t(), part_bias,
                                  out=gates[d, start:start + block_rows, columns])
                    else:
                        gates[d, start:start + block_rows, columns] = linear(block, state, part_bias)
    else:
        for start in starts:
            block = slice(start, start + block_rows)
            if h.dtype == torch.float32:
                torch.bmm(h[:, block], weights.state, out=gates[:, block])
            else:  # a low-precision product, widened to float32 as it is stored
                gates[:, block] = torch.bmm(h[:, block], weights.state)
    # The input half joins after the product: it exists for the running rows only.
    if isinstance(x_gates, tuple) and isinstance(x_gates[0], BlockedGates):
        summed = x_gates[0].add_to(gates[:, :rows], x_gates[1], rows)
    else:
        summed = gates[:, :rows].add_(x_gates)
    if weights.double_j_after:  # what doubled weights would have given, bit for bit
        dim = summed.shape[-1] // 4
        summed[..., dim:2 * dim].mul_(2.0)
    return summed


def _input_gates(x: torch.Tensor, weights: StackedWeights, dtype: torch.dtype, block: int | None = GATE_BLOCK,
                 step_rows: Sequence[int] = ()) -> "torch.Tensor | BlockedGates":
    """The input half of the gates ``(2, rows, 4*dim)`` float32 for ``x`` ``(2, rows, input_dim)``,
    in blocks of ``block`` rows (None: one product, for the static shapes of CUDA graphs); with
    the bias where the products are batched. oneDNN's products give :class:`BlockedGates` instead,
    ``x`` then holding ``step_rows[i]`` rows for step ``i``."""
    x = x.to(dtype)
    width = weights.bias.shape[-1]
    if weights.linear is not None and block is not None:
        # In float32 the bias joins in the recurrent product's kernel instead.
        return BlockedGates(x, weights.linear, block, step_rows, with_bias=dtype != torch.float32)
    bias = weights.bias.to(dtype)
    if block is None:
        return torch.baddbmm(bias, x, weights.input).float()
    return in_blocks(x, block, lambda part, out: torch.baddbmm(bias, part, weights.input, out=out), width,
                     dim=1).float()


@torch.inference_mode()
def bilstm_inference(forward_layer: LstmLayer, backward_layer: LstmLayer, inputs: torch.Tensor,
                     lengths: torch.Tensor, c: torch.Tensor, h: torch.Tensor,
                     dtype: torch.dtype = torch.float32, weights: StackedWeights | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both directions of one layer at once, for inference.

    ``inputs``: ``(2, batch, time, input_dim)``: index 0 the forward reading order, 1 the
    backward one (each row already reversed within its length). Rows must be sorted by
    ``lengths`` ``(batch,)``, longest first: at step ``t`` only the blocks holding rows still
    running are computed, so little work goes to padding. ``c`` ``(2, batch, dim)`` and ``h``
    ``(2, batch, proj)`` are the initial states. Returns ``outputs`` ``(2, batch, time, proj)``
    (zero at padding) and the final ``(c, h)``. Matrix products run in ``dtype`` (bfloat16/float16
    for speed, or ``torch.int8`` on float32 rows: :func:`stack_directions`); the cell state and
    nonlinearities stay float32. Same numbers as
    :func:`lstm_plain` in float32. ``weights`` are :func:`stack_directions`'s result, when the
    caller keeps them between calls.

    Every matrix product runs on row blocks of a fixed size (:mod:`elmo.kernels.blocks`): the
    recurrent product and the projection on :func:`~elmo.kernels.blocks.row_block` rows, the input
    half of the gates on :data:`~elmo.kernels.blocks.GATE_BLOCK` (row, step) pairs (larger blocks on
    a GPU: :data:`~elmo.kernels.blocks.BLOCK_SIZES`), so a row's numbers never depend on the other
    rows, on any CPU. Per layer-step: the recurrent products,
    the input half added, :func:`lstm_cell_inplace` on the running rows' cell state, and the
    projections written into a time-major output buffer, which is the next step's ``h`` (in
    reduced precision, into a low-precision ``h`` copied out).

    Long on purpose: the buffers made before the step loop are written in place by every step, and
    one function keeps their lifetimes and the block arithmetic in one view (the specification,
    :func:`elmo.model.network.lstm_plain`, is the short reading).
    """
    _, batch, time, input_dim = inputs.shape
    dim, proj = forward_layer.dim, forward_layer.projection_dim
    weights = weights if weights is not None else stack_directions(forward_layer, backward_layer, dtype)
    dtype = activation_dtype(dtype)  # int8 products take float32 rows
    cell_clip, proj_clip = forward_layer.cell_clip, forward_layer.proj_clip
    low = dtype != torch.float32
    # Rows in whole blocks: the products read the rows of the last, partial block too (finished
    # rows and padding are computed there, never stored).
    block_rows = row_block(inputs.device)
    gate_block = block_sizes(inputs.device).gate
    rows_total = padded(batch, block_rows)
    c = pad_rows(c, rows_total, dim=1).clone()
    outputs = inputs.new_zeros((time, 2, rows_total, proj), dtype=torch.float32)  # time-major
    gates = inputs.new_empty((2, rows_total, 4 * dim), dtype=torch.float32)
    q = inputs.new_zeros((2, rows_total, dim), dtype=dtype)  # the projection's input
    # The state h the products read: a view of the last step's outputs in float32; its own
    # buffer in reduced precision, which the projection writes and its clip clips exactly.
    h_prev = pad_rows(h, rows_total, dim=1)
    if low:
        h_prev = h_prev.to(dtype, copy=True)
    # running_rows[t, r]: row r's sentence is longer than t; running[t]: how many rows (sorted) are.
    running_rows = pad_rows(lengths, rows_total).unsqueeze(0) > torch.arange(time, device=lengths.device).unsqueeze(1)
    running = running_rows.sum(1).tolist()
    if weights.linear is not None:  # (a copy where the last layer's time-major outputs come in)
        input_rows = inputs.reshape(2, batch * time, input_dim)
    for start in range(0, time, GATE_CHUNK_STEPS):
        stop = min(time, start + GATE_CHUNK_STEPS)
        if running[start] == 0:
            break
        rows = running[start]
        if weights.linear is not None:  # oneDNN's blocks: the running pairs alone (BlockedGates)
            # Gathered in time-major order as rows of (batch * time, input_dim): one copy, and a
            # faster one than a boolean mask's.
            steps, pair_rows = running_rows[start:stop, :rows].nonzero(as_tuple=True)
            x = input_rows.index_select(1, pair_rows * time + start + steps)
            x_gates = _input_gates(x, weights, dtype, gate_block, running[start:stop])
        else:
            x = inputs[:, :rows, start:stop].transpose(1, 2).reshape(2, -1, input_dim)  # time-major
            x_gates = _input_gates(x, weights, dtype, gate_block).view(2, stop - start, rows, 4 * dim)
        for t in range(start, stop):
            n = running[t]
            if n == 0:
                break
            m = padded(n, block_rows)  # the blocks holding the running rows
            step_input = (x_gates, t - start) if isinstance(x_gates, BlockedGates) else x_gates[:, t - start, :n]
            step_gates = _recurrent_gates_in_blocks(step_input, h_prev, weights, n, gates, block_rows)
            # Only the running rows' cells advance; the other rows of their block keep an earlier q
            # (projected with the block, never stored).
            lstm_cell_inplace(step_gates, c[:, :n], cell_clip, weights.doubled_j, dtype=dtype, q_out=q[:, :n])
            out = h_prev if low else outputs[t]
            if weights.linear is not None:  # direction by direction, as the recurrent products
                for d, direction in enumerate(weights.linear):
                    for block in range(0, m, block_rows):
                        out[d, block:block + block_rows] = linear(q[d, block:block + block_rows], direction.projection)
            else:
                for block in range(0, m, block_rows):
                    torch.bmm(q[:, block:block + block_rows], weights.projection, out=out[:, block:block + block_rows])
            if proj_clip is not None:
                out[:, :m].clamp_(-proj_clip, proj_clip)  # exact in reduced precision too (a bound or the value)
            if low:
                outputs[t, :, :n] = out[:, :n]
            else:
                h_prev = outputs[t]
    if not low:  # finished rows of a partial block were computed at each step: zero, as padding is
        outputs.mul_(running_rows.view(time, 1, rows_total, 1))
    outputs, c = outputs[:, :, :batch], c[:, :batch]
    # A row's final h is its output at its last step (its initial h when it is empty).
    last = (lengths - 1).clamp(min=0)
    final_h = outputs[last, :, torch.arange(batch, device=lengths.device)].transpose(0, 1)  # (2, batch, proj)
    final_h = torch.where((lengths > 0).view(1, batch, 1), final_h, h)
    return outputs.permute(1, 2, 0, 3), c, final_h


@torch.no_grad()
def bilstm_static_chunk(layers: Sequence[tuple[LstmLayer, LstmLayer]], weights: Sequence[StackedWeights],
                        inputs: torch.Tensor, keep: torch.Tensor, c: torch.Tensor, h: torch.Tensor,
                        outputs: torch.Tensor, dtype: torch.dtype, skip_connections: bool) -> None:
    """``K`` steps of every layer of both directions, with static shapes and no host
    synchronisation: what a CUDA graph captures (:mod:`elmo.inference.graphs`).

    ``inputs`` ``(K, 2, R, input_dim)`` float32, time-major, zero where masked; ``keep``
    ``(K, 1, R, 1)`` float32, 1 where a row's sentence is running at that step, else 0; ``c``
    ``(L, 2, R, dim)`` and ``h`` ``(L, 2, R, proj)`` float32, the states, carried in place (a
    row's state is unchanged at steps it does not run); ``outputs`` ``(L, K, 2, R, proj)`` receives
    each layer's output (the residual included where ``skip_connections``), zero where not kept.
    Every row is computed at every step, masked: the arithmetic of :func:`bilstm_inference`,
    except for the shapes of the matrix products (their rounding). The recurrent product always
    runs through ``torch.bmm`` (never oneDNN).
    """
    steps, _, rows, _ = inputs.shape
    running = keep > 0
    low = dtype != torch.float32
    x = inputs
    for index, ((forward_layer, _), stacked) in enumerate(zip(layers, weights)):
        if stacked.input is None:
            raise ValueError("bilstm_static_chunk needs the batched layout of the weights: stack them for a GPU "
                             "(stack_directions without oneDNN's reduced-precision products)")
        stacked = stacked._replace(linear=None)
        dim, cell_clip, proj_clip = forward_layer.dim, forward_layer.cell_clip, forward_layer.proj_clip
        x_gates = _input_gates(x.transpose(0, 1).reshape(2, steps * rows, -1), stacked, dtype, block=None)
        x_gates = x_gates.view(2, steps, rows, 4 * dim)
        c_l, out = c[index], outputs[index]
        # In reduced precision the state is carried in that precision (rows that never run in the
        # chunk come back rounded: the caller restores those it needs).
        h_l = h[index].to(dtype) if low else h[index]
        for k in range(steps):
            gates = _recurrent_gates(x_gates[:, k], h_l, stacked)
            c_new = torch.empty_like(c_l)
            q = lstm_cell_inplace(gates, c_l, cell_clip, stacked.doubled_j, c_out=c_new, dtype=dtype)
            h_new = torch.bmm(q, stacked.projection)
            if proj_clip is not None:
                h_new.clamp_(-proj_clip, proj_clip)
            torch.where(running[k], c_new, c_l, out=c_l)
            torch.where(running[k], h_new, h_l, out=h_l)
            torch.mul(h_new, keep[k], out=out[k])
        if low:
            h[index].copy_(h_l)
        if index > 0 and skip_connections:
            out.add_(x)
        x = out
