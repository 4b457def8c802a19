"""Matrix products in row blocks of a fixed size: batch independence by construction.

A BLAS or oneDNN kernel picks its code path (micro-kernel, blocking, threading, vector width)
from the shapes it is asked about, and different paths round differently in the last bits. Which
paths exist and where their thresholds lie differ between CPUs and libraries (MKL takes other
paths on Intel than on AMD), so no padding rule measured on one CPU makes a row's result
independent of the other rows on every CPU. Asking every product the same question does: each
product of the inference path runs on blocks of a fixed number of rows (the last one padded), so
the kernel that computes a row, and its rounding, is decided by the model's sizes and these
constants alone, never by the batch. A row's position inside its block does not choose a kernel:
every row of a block goes through the same call.

The constants are the only shapes the inference path asks for (``tests/test_blocks.py`` records
every product of a run and checks it):
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

# Rows of one recurrent product (LSTM state -> gates) and of one projection (cell -> h): a batch
# is computed in blocks of this many rows, a single sentence in one. The size is fixed (never the
# batch's). Smaller blocks cost a single sentence less and batches more: with oneDNN's kernel the
# original size at 16 rows embedded batches 8% slower than at 32 and one sentence 25% faster
# (docs/speed.md, "Row blocks"), so every size takes 16.
ROW_BLOCK = 16
# Rows of one input-gate product: (row, timestep) pairs, all known before the recurrence runs.
# Larger blocks read the input weight less often; 128 was faster than 64 on the development CPU.
GATE_BLOCK = 128
# Words of one character-CNN convolution block (words of one length bucket).
WORD_BLOCK = 16
# Words of one highway / projection product (words of any length): its weights are large (the
# original size's highway layers are 2048 x 2048), so fewer, larger blocks read them less often.
HEAD_BLOCK = 64
# Gate columns of one float32 recurrent product on a CPU. The original size's recurrent weight is
# 32 MB per direction in float32, as large as the development CPU's L3, so each row block of a
# step read it from memory again; in parts of this many columns (8 MB) the step's row blocks
# find it in the cache (1.24x on that product there, 1.53x with each part multiplied transposed:
# elmo.kernels.cpu_lstm._column_parts; benchmarks/column_parts.py at commit 1a3a222). Like the row blocks, a constant:
# which part a column falls in never depends on the batch. bfloat16's packed weight (16 MB) fits
# the cache and stays whole (its parts measured 0.94x-1.11x at 4,096 columns: no gain shown).
COLUMN_BLOCK = 4096




@dataclass(frozen=True)
class BlockSizes:
    """The fixed block sizes of one kind of device (see the constants above for what each is)."""

    row: int
    gate: int
    word: int
    head: int


# On a GPU one kernel computes a whole block at once, and what a step waits on is the host
# launching kernels (the GPU suite's first runs, docs/gpu.md): larger blocks there, so that a
# batch of 64 sentences is one recurrent block, its input gates a block or two, and its distinct
# words (about 600) a few blocks; not larger, since a single sentence computes whole blocks. Still
# fixed sizes, so a sentence's numbers there never depend on its batch either (on one GPU model and
# library version; a GPU and a CPU round differently anyway).
BLOCK_SIZES = {"cpu": BlockSizes(ROW_BLOCK, GATE_BLOCK, WORD_BLOCK, HEAD_BLOCK),
               "cuda": BlockSizes(row=64, gate=1024, word=256, head=256)}


def block_sizes(device: torch.device | str | None = None) -> BlockSizes:
    """The block sizes of ``device``'s kind (the CPU's for None and any kind not listed)."""
    kind = torch.device(device).type if device is not None else "cpu"
    return BLOCK_SIZES.get(kind, BLOCK_SIZES["cpu"])


def row_block(device: torch.device | str | None = None) -> int:
    """The rows of one recurrent product and projection on ``device`` (:data:`ROW_BLOCK` on a CPU)."""
    return block_sizes(device).row


def padded(rows: int, block: int) -> int:
    """``rows`` rounded up to a whole number of blocks (at least one)."""
    return max(1, -(-rows // block)) * block


def pad_rows(x: torch.Tensor, rows: int, dim: int = 0) -> torch.Tensor:
    """``x`` with zero rows appended along ``dim`` up to ``rows`` (``x`` itself when it has them)."""
    extra = rows - x.shape[dim]
    if extra <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


# Products on a CPU go through oneDNN's float32 linear kernel where this PyTorch has it: on the
# development CPU (AMD EPYC, AVX-512) it ran every product of the inference path at its block size
# as fast as MKL's to 2.9x as fast (``benchmarks/lstm_kernels.py`` at commit 50e1cc9), since MKL takes its slower code
# paths on AMD CPUs while oneDNN picks its kernels from the instruction set. bfloat16 products go
# through its bfloat16 kernel where oneDNN has the CPU's bfloat16 instructions (AVX512_BF16, AMX),
# on weights pre-packed once (:func:`prepack`): on the development CPU 1.04x to 1.8x as fast as
# ``torch.bmm`` in bfloat16 for every product but the small size's projection (0.75x, a small
# share of the time; docs/speed.md). Tests switch it off to run the other branch.
ONEDNN = True


@functools.cache
def _onednn_linear_works() -> bool:
    """Whether this PyTorch has oneDNN's dense linear kernel and it computes a product (probed
    once: the operator is PyTorch's own, used by its compiler, not a documented API)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        x, w = torch.ones(2, 3), torch.ones(4, 3)
        return bool(torch.equal(torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""), x @ w.t()))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


@functools.cache
def _onednn_bfloat16_works() -> bool:
    """Whether oneDNN computes bfloat16 products on this CPU's own instructions (AVX-512 BF16 or
    AMX: oneDNN says so) and this PyTorch's linear kernel takes them (probed once)."""
    if not _onednn_linear_works():
        return False
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        x, w = torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(4, 3, dtype=torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 2)
        return bool(torch.equal(torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), x @ w.t()))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


@functools.cache
def _onednn_int8_works() -> bool:
    """Whether this PyTorch has oneDNN's int8 linear kernel and it computes a product exactly on
    this CPU (probed once: the operators are PyTorch's own, used by its quantization, not a
    documented API). The probe multiplies the largest values, 255 x 127 per term: without VNNI
    (AVX2 alone) oneDNN sums pairs of such terms in 16 bits, which saturate (it returned 1.02
    for 3.0 with ONEDNN_MAX_CPU_ISA=AVX2), and int8 must not run there."""
    if not _onednn_linear_works():
        return False
    try:
        weight = quantize(torch.ones(4, 3), 2)
        return bool(torch.equal(linear(torch.ones(2, 3), weight), torch.full((2, 4), 3.0)))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def int8_for(device: torch.device | str) -> bool:
    """Whether int8 products (:func:`quantize`) run on ``device``: a CPU whose PyTorch has
    oneDNN's int8 linear kernel and where it sums exactly (VNNI or AMX-INT8; see
    :func:`_onednn_int8_works`)."""
    return ONEDNN and torch.device(device).type == "cpu" and _onednn_int8_works()


def products_dtype(dtype: torch.dtype, device: torch.device | str) -> torch.dtype:
    """The dtype the inference path's products run in on ``device`` when ``dtype`` is asked
    for: ``dtype`` itself, except ``torch.int8`` where :func:`int8_for` is False (float32)."""
    return torch.float32 if dtype == torch.int8 and not int8_for(device) else dtype


def activation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype activations take for products in ``dtype``: float32 for int8 products (each row
    of their input is quantized inside the product, :func:`linear`), ``dtype`` itself otherwise."""
    return torch.float32 if dtype == torch.int8 else dtype


class Int8Weight(NamedTuple):
    """A float32 weight ``(out, in)`` quantized to int8 per output row (symmetric: ``weight ~
    scales[:, None] * values``) and packed for oneDNN's int8 kernel: what :func:`quantize`
    makes and :func:`linear` reads."""

    packed: torch.Tensor
    scales: torch.Tensor       # (out,) float32
    zero_points: torch.Tensor  # (out,) zeros: the quantization is symmetric


def _row_scales(m: torch.Tensor) -> torch.Tensor:
    """The symmetric int8 scale of each row of ``m`` ``(rows, k)``: ``(rows, 1)``, its largest
    magnitude over 127 (never zero, so that a zero row quantizes to zeros)."""
    return m.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127


def quantize(weight: torch.Tensor, rows: int) -> Int8Weight:
    """``weight`` ``(out, in)`` float32 quantized once per output row and packed for products of
    ``rows`` rows (docs/speed.md, "Precision: float32, bfloat16, int8")."""
    weight = weight.detach().float()
    scales = _row_scales(weight).squeeze(1)
    values = torch.round(weight / scales.unsqueeze(1)).to(torch.int8)
    packed = torch.ops.onednn.qlinear_prepack(values, [rows, weight.shape[1]])
    return Int8Weight(packed, scales, torch.zeros(len(scales), dtype=torch.long, device=weight.device))


def _int8_linear(x: torch.Tensor, weight: Int8Weight, bias: torch.Tensor | None) -> torch.Tensor:
    """:func:`linear` on an int8 weight: each row of ``x`` quantized on its own scale (read from
    that row alone, so that no row's result depends on another's), the integer product summed
    exactly in int32 by oneDNN, then scaled back by the row's and the column's scales."""
    x = x.float().contiguous()
    row_scales = _row_scales(x)
    # The x86 kernel takes unsigned activations: the symmetric values shifted by a zero point of 128.
    shifted = torch.round(x / row_scales).add_(128).to(torch.uint8)
    y = torch.ops.onednn.qlinear_pointwise(shifted, 1.0, 128, weight.packed, weight.scales, weight.zero_points,
                                           None, 1.0, 0, torch.float32, "none", [], "")
    y.mul_(row_scales)
    return y.add_(bias) if bias is not None else y


def onednn_for(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether :func:`linear` runs oneDNN's kernel for operands of ``dtype`` on ``device``: float32
    on a CPU whose PyTorch has it, bfloat16 where oneDNN also has the CPU's bfloat16 instructions
    (float16 keeps PyTorch's own dispatch)."""
    if not (ONEDNN and torch.device(device).type == "cpu" and _onednn_linear_works()):
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and _onednn_bfloat16_works())


def prepack(weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``weight`` ``(out, in)`` in oneDNN's own blocked layout for products of ``rows`` rows, made
    once so that no product reorders it again: bfloat16 only (float32 products keep the plain
    layout, whose numbers the float32 path is pinned to). Only :func:`linear` can read the
    result; ``weight`` itself where :func:`onednn_for` is False or for float32."""
    if weight.dtype != torch.bfloat16 or not onednn_for(weight.device, weight.dtype):
        return weight
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` ``(rows, out)`` for ``x`` ``(rows, in)``, ``weight`` ``(out, in)``
    contiguous (or :func:`prepack`'s result) and ``bias`` ``(out,)``, in ``x``'s dtype: oneDNN's
    kernel where :func:`onednn_for` says so and no gradient is wanted (it has no backward),
    ``torch.nn.functional.linear`` otherwise; for :func:`quantize`'s weight, oneDNN's int8 kernel
    on ``x`` quantized row by row (float32 result)."""
    if isinstance(weight, Int8Weight):
        return _int8_linear(x, weight, bias)
    if weight.layout == torch._mkldnn:  # prepacked: only oneDNN reads it
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    if (onednn_for(x.device, x.dtype) and weight.dtype == x.dtype
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return torch.nn.functional.linear(x, weight, bias)


class _TrainedLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` on oneDNN's kernel, forward and for ``x``'s gradient; the weight's
    gradient, a sum over the rows, stays PyTorch's product (oneDNN's would read both operands
    transposed into copies)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.mkldnn._linear_pointwise(grad, weight.t().contiguous(), None, "none", [], "")
        if ctx.needs_input_grad[1]:
            grad_weight = grad.t().mm(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return grad_x, grad_weight, grad_bias


def onednn_trains(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a training step's product of ``x`` and ``weight`` runs on oneDNN's kernel: both
    float32, on a CPU where :func:`onednn_for` says so (MKL takes its slower paths on AMD CPUs:
    docs/training.md). Elsewhere, bfloat16 autocast and GPUs included, PyTorch's own products."""
    return x.dtype == weight.dtype == torch.float32 and onednn_for(x.device, x.dtype)


def trained_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` ``(rows, out)`` for a training step, with gradients: ``x`` ``(rows,
    in)``, ``weight`` ``(out, in)``, ``bias`` ``(out,)``. Where :func:`onednn_trains`, oneDNN's
    kernel (on the development EPYC 2.3x MKL's at the sampled softmax's shapes,
    single-threaded); elsewhere ``torch.addmm`` (``torch.mm`` without a bias)."""
    if onednn_trains(x, weight):
        return _TrainedLinear.apply(x.contiguous(), weight.contiguous(), bias)
    if bias is None:
        return x @ weight.t()
    return torch.addmm(bias, x, weight.t())


def in_blocks(x: torch.Tensor, block: int, product: Callable[[torch.Tensor, torch.Tensor], object],
              width: int, dim: int = 0) -> torch.Tensor:
    """A row-wise matrix product of ``x`` in blocks of exactly ``block`` rows along ``dim`` (the
    last block padded with zero rows), cut back to ``x``'s rows: ``(..., rows, width)``.

    ``product(part, out)`` writes the product of ``part`` ``(..., block, k)`` into ``out``
    ``(..., block, width)`` (of ``x``'s dtype), for instance ``torch.bmm(part, w,
    out=out)``. Every call gets contiguous blocks of the same shape and strides, so each row's
    result is that of the same kernel whatever else is in ``x``: given an output that is a view
    into a larger buffer, MKL's AVX2 code computes ``torch.baddbmm`` another way, with other bits
    (a sentence in a batch of 24 came out unlike the same sentence alone)."""
    rows = x.shape[dim]
    total = padded(rows, block)
    x = pad_rows(x, total, dim)
    shape = list(x.shape)
    shape[-1] = width
    out = x.new_empty(shape)
    if total == block:
        product(x.contiguous(), out)
    else:
        shape[dim] = block
        scratch = x.new_empty(shape)
        for start in range(0, total, block):
            product(x.narrow(dim, start, block).contiguous(), scratch)
            out.narrow(dim, start, block).copy_(scratch)
    return out.narrow(dim, 0, rows) if total != rows else out


__all__ = ["BLOCK_SIZES", "COLUMN_BLOCK", "GATE_BLOCK", "HEAD_BLOCK", "ONEDNN", "ROW_BLOCK", "WORD_BLOCK", "BlockSizes",
           "Int8Weight", "activation_dtype", "block_sizes", "in_blocks", "int8_for", "linear", "onednn_for",
           "onednn_trains", "pad_rows", "padded", "prepack", "products_dtype", "quantize", "row_block", "trained_linear"]
