"""The token encoder's fast paths: :func:`encode_distinct` (training: the CNN once per distinct
token of a batch, over the character slots its characters reach, with autograd) and
:func:`encode_words_fast` / :func:`encode_fast` (inference: the same convolutions in fixed blocks
of words, products through oneDNN's kernels in float32, bfloat16 or int8, weights converted once
and remembered in ``_CONVERTED``). Both compute what :class:`elmo.model.network.TokenEncoder`
computes, to float rounding, and are tested against it.
"""

from __future__ import annotations

import functools
import weakref
from typing import NamedTuple

import torch
from torch import nn

from elmo.kernels.blocks import (HEAD_BLOCK, activation_dtype, block_sizes, linear, prepack, products_dtype,
                                 quantize)
from elmo.model.network import PAD_ID, TokenEncoder, highway

# Buckets of real-slot counts: short words are convolved over short character windows.
LENGTH_BUCKETS = (6, 8, 10, 12, 16, 24, 32)
# Words whose pooled CNN features are held at once by the inference path: bounds its memory.
WORDS_PER_PART = 64 * HEAD_BLOCK


class Words(NamedTuple):
    """The distinct tokens of a batch, for :func:`encode_distinct`.

    ``distinct``: ``(n, width)`` their ids, ordered by group; ``inverse``: the batch's shape without
    the last axis, each position's row of ``distinct``; ``groups``: ``(stop, longest)`` per group of
    consecutive rows of similar length (each group runs from the previous one's ``stop``), with the
    most real slots (begin-of-word to end-of-word) of any of its tokens, which bounds the slots its
    convolutions read. Plain Python numbers, known where the ids were made."""

    distinct: torch.Tensor
    inverse: torch.Tensor
    groups: tuple[tuple[int, int], ...]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Words":
        return Words(self.distinct.to(device, non_blocking=non_blocking),
                     self.inverse.to(device, non_blocking=non_blocking), self.groups)


@functools.lru_cache(maxsize=8)
def _hash_powers(width: int) -> torch.Tensor:
    """``(width,)`` int64 powers of an odd multiplier (wrapping 64-bit arithmetic), on the CPU:
    powers of an odd number are odd, so each column's term of :func:`unique_rows`' keys is a
    bijection of its value. Made once per width, not per call (a GPU would launch a kernel per
    column)."""
    multiplier = torch.tensor(0x9E3779B97F4A7C15 - (1 << 64), dtype=torch.long)
    powers = torch.ones(width, dtype=torch.long)
    for j in range(1, width):
        powers[j] = powers[j - 1] * multiplier
    return powers


def length_buckets(n_slots: int) -> tuple[int, ...]:
    """The upper bounds of real-slot counts that group words by length for ``n_slots`` slots:
    :data:`LENGTH_BUCKETS` below ``n_slots``, then ``n_slots``."""
    return tuple(b for b in LENGTH_BUCKETS if b < n_slots) + (n_slots,)


def unique_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of ``rows`` ``(n, width)`` (integer ids) and, for each row, its index among
    them: ``(distinct (k, width), inverse (n,))`` with ``distinct[inverse] == rows``, as
    ``torch.unique(rows, dim=0, return_inverse=True)`` gives but ordered by a hash of the row, not
    lexicographically. Why: on a CPU ``unique`` over rows sorts them column by column, about 0.2 s
    for one training step's 80,000 tokens; unique 64-bit keys take a few milliseconds. The keys
    are a polynomial hash (wrapping 64-bit arithmetic), so two rows could share one: the result is
    checked exactly, and a collision falls back to ``torch.unique``."""
    if rows.dtype.is_floating_point or rows.shape[0] == 0:
        return torch.unique(rows, dim=0, return_inverse=True)
    keys = (rows.long() * _hash_powers(rows.shape[1]).to(rows.device)).sum(dim=1)
    unique_keys, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full((len(unique_keys),), rows.shape[0], dtype=torch.long, device=rows.device)
    first = first.scatter_reduce(0, inverse, torch.arange(rows.shape[0], device=rows.device), reduce="amin")
    distinct = rows[first]
    if not torch.equal(distinct[inverse], rows):  # two rows shared a key
        return torch.unique(rows, dim=0, return_inverse=True)
    return distinct, inverse


def distinct_words(char_ids: torch.Tensor, pad_id: int = PAD_ID, word_column: bool = False) -> Words:
    """The distinct tokens of ``char_ids`` ``(..., width)``, grouped by length (:class:`Words`), with
    ``distinct[inverse] == char_ids``. Where the ids are made on the host, computing this there
    spares the device the synchronisations it needs (how many tokens, how long). ``pad_id`` and
    ``word_column`` are the encoder's (:attr:`TokenEncoder.pad_id`, a word id in column 0)."""
    width = char_ids.shape[-1]
    n_slots = width - 1 if word_column else width
    distinct, inverse = unique_rows(char_ids.reshape(-1, width))
    n_real = (distinct[:, 1:] if word_column else distinct) != pad_id
    n_real = n_real.sum(dim=1)
    buckets = length_buckets(n_slots)
    bucket = torch.bucketize(n_real, torch.tensor(buckets, device=n_real.device))
    order = torch.argsort(bucket, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device)
    counts = torch.bincount(bucket, minlength=len(buckets)).tolist()
    longest = torch.zeros(len(buckets), dtype=n_real.dtype, device=n_real.device).scatter_reduce(
        0, bucket, n_real, reduce="amax").tolist()
    groups, stop = [], 0
    for count, most in zip(counts, longest):
        if count:
            stop += count
            groups.append((stop, most))
    return Words(distinct[order], rank[inverse].view(char_ids.shape[:-1]), tuple(groups))


def ladder_size(n: int) -> int:
    """The smallest size at least ``n`` of the form ``m * 2**e`` with ``m`` in 4..7 (1, 2, 3 below
    4): four sizes per octave, so that padding to one wastes at most a quarter and a run meets
    few distinct shapes."""
    if n <= 4:
        return max(n, 1)
    exponent = max(n.bit_length() - 3, 0)
    return -(-n // (1 << exponent)) << exponent


def group_shapes(words: Words, n_slots: int, widest: int, fixed_shapes: bool) -> list[tuple[int, int, int, int]]:
    """How :func:`encode_distinct` runs each length group of ``words``: ``(start, stop, rows, span)``,
    the group's rows ``start:stop`` of ``words.distinct``, the rows its convolutions run on
    (``stop - start``, or with ``fixed_shapes`` that count padded to :func:`ladder_size`) and the
    character slots they read (``span``: those any window of the ``widest`` filter touching a real
    slot reaches; with ``fixed_shapes`` counted from the group's length bucket's bound instead of its
    longest word). ``(rows, span)`` is the shape of the group's convolution input, which on a GPU
    costs cuDNN a plan for each new one."""
    buckets = length_buckets(n_slots)
    shapes, start = [], 0
    for stop, longest in words.groups:
        rows = stop - start
        if fixed_shapes:
            longest = next(b for b in buckets if b >= longest)  # the bucket's bound, not this batch's longest
            rows = ladder_size(rows)
        shapes.append((start, stop, rows, min(n_slots, longest + widest - 1)))
        start = stop
    return shapes


def encode_distinct(encoder: TokenEncoder, char_ids: torch.Tensor, words: Words | None = None,
                    fixed_shapes: bool | None = None) -> torch.Tensor:
    """Same result as ``encoder(char_ids)`` (to float rounding, values and gradients), running the
    CNN once per distinct token of the batch and only over the character slots a token's real
    characters reach.

    ``char_ids``: ``(..., time, width)`` -> ``(..., time, output_dim)``. Natural text repeats
    words a lot (a batch of 64 x 20 tokens has ~600 distinct ones), and the CNN dominates the
    token encoder's cost; most words fill a handful of the slots, and the windows of padding
    alone all give the same value (:func:`padding_window_constants`), which joins the max-pool as
    one constant. Gradients flow through the gather to the shared computation.
    This is the training path; inference's (:func:`encode_words_fast`) runs the same convolutions
    (:func:`_cnn_on_real_slots`) but in fixed blocks of words, for batch independence, with its
    products through inference-only kernels (oneDNN's, int8), which have no gradients; training
    runs each length group whole.
    ``words``: :func:`distinct_words` of ``char_ids``, when the caller has it (None: computed here,
    which on a GPU waits for the device).
    ``fixed_shapes`` (None: on a GPU) runs each group's convolutions over its length bucket's
    whole span and a word count padded to :func:`ladder_size` (the padding rows' outputs are
    dropped, so they add exact zeros to the gradients): the groups' sizes change with every batch,
    and on a GPU each new shape costs cuDNN a new plan on the host, which made the step wait on
    the host (docs/gpu.md, the host's part of a training step); the ladder keeps a run to a few dozen shapes.
    """
    if words is None:
        words = distinct_words(char_ids, encoder.pad_id, encoder.word_embedding is not None)
    if fixed_shapes is None:
        fixed_shapes = words.distinct.is_cuda
    word_ids, distinct = encoder.split_ids(words.distinct)
    constants = padding_window_constants(encoder)
    convs = tuple((conv.weight, conv.bias) for conv in encoder.convs)
    widest = max(conv.kernel_size[0] for conv in encoder.convs)
    pooled = []
    for start, stop, rows, span in group_shapes(words, encoder.n_slots, widest, fixed_shapes):
        ids = distinct[start:stop]
        if rows > stop - start:  # fixed shapes: the group padded with copies of its first word
            ids = torch.cat([ids, ids[:1].expand(rows - (stop - start), -1)])
        n_real = (ids != encoder.pad_id).sum(dim=1)
        # The inference path's convolutions (the same arithmetic), here with autograd over a whole group.
        pooled.append(_cnn_on_real_slots(encoder, ids, n_real, constants, torch.float32, span, convs)[:stop - start])
    vectors = encoder.head(torch.cat(pooled), word_ids)  # (n_distinct, output_dim)
    return vectors[words.inverse]


def padding_window_constants(encoder: TokenEncoder, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """For each convolution, its output on a window made only of padding slots: ``(n_filters,)``.

    Every word has such windows after its end-of-word marker, and they give the same value for
    every word, so the max over all positions is the max over the windows that touch real
    characters and this constant.
    """
    pad = encoder.char_embedding.weight[encoder.pad_id].to(dtype)  # (char_dim,)
    out = []
    for conv in encoder.convs:
        weight = conv.weight.to(dtype)  # (n_filters, char_dim, width)
        out.append(conv.bias.to(dtype) + torch.einsum("ocw,c->o", weight, pad))
    return out


class EncoderWeights(NamedTuple):
    """The token encoder's weights in the dtype of the products (:func:`encoder_weights`):
    convolution ``(weight, bias)`` pairs, their :func:`padding_window_constants`, highway
    ``(carry weight, carry bias, transform weight, transform bias)`` and the projection's
    ``(weight, bias)`` (None without one). Biases of the highway and projection stay float32
    (added to the product's result in float32); weights of their products are
    :func:`~elmo.kernels.blocks.prepack`'s, for blocks of the head's size."""

    convs: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    constants: list[torch.Tensor]
    highways: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], ...]
    projection: tuple[torch.Tensor, torch.Tensor] | None


# Reduced-precision copies of an encoder's weights, per encoder, dtype and device, with the
# parameters' versions they were made from: converted once, not at every block of every call.
_CONVERTED: "weakref.WeakKeyDictionary[TokenEncoder, dict]" = weakref.WeakKeyDictionary()


def encoder_weights(encoder: TokenEncoder, dtype: torch.dtype, head_rows: int) -> EncoderWeights:
    """``encoder``'s weights for :func:`encode_words_fast`'s products in ``dtype``, for head
    products of ``head_rows`` rows. In float32 the parameters themselves (no copy); in reduced
    precision converted (and pre-packed) once; for ``torch.int8`` (on a CPU where
    :func:`elmo.kernels.blocks.int8_for`, elsewhere float32) the highway and projection weights
    quantized once (:func:`elmo.kernels.blocks.quantize`) and the convolutions' weights left
    float32.
    Remembered until a parameter changes (a tensor's ``_version`` grows with every in-place
    update) or the encoder is gone."""
    device = encoder.char_embedding.weight.device
    dtype = products_dtype(dtype, device)
    if dtype == torch.float32:
        return EncoderWeights(tuple((conv.weight, conv.bias) for conv in encoder.convs),
                              padding_window_constants(encoder, dtype),
                              tuple((h.carry.weight, h.carry.bias, h.transform.weight, h.transform.bias)
                                    for h in encoder.highways),
                              (encoder.projection.weight, encoder.projection.bias)
                              if encoder.projection is not None else None)
    version = tuple((id(p), p._version) for p in encoder.parameters())
    known = _CONVERTED.setdefault(encoder, {})
    key = (dtype, device, head_rows)
    cached = known.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    # A head weight (highway, projection) in what its products read: quantized for int8, else
    # converted and packed. The convolutions run in the activations' dtype (float32 for int8).
    int8, activations = dtype == torch.int8, activation_dtype(dtype)
    head = (lambda w: quantize(w, head_rows)) if int8 else (lambda w: prepack(w.to(dtype), head_rows))
    with torch.no_grad():  # copies for inference (oneDNN's packed weights have no backward)
        weights = EncoderWeights(
            tuple((conv.weight.to(activations), conv.bias.to(activations)) for conv in encoder.convs),
            padding_window_constants(encoder, activations),
            tuple((head(h.carry.weight), h.carry.bias.float(), head(h.transform.weight), h.transform.bias.float())
                  for h in encoder.highways),
            (head(encoder.projection.weight), encoder.projection.bias.float())
            if encoder.projection is not None else None)
    known[key] = (version, weights)
    return weights


def _cnn_on_real_slots(encoder: TokenEncoder, ids: torch.Tensor, n_real: torch.Tensor, constants: list[torch.Tensor],
                       dtype: torch.dtype, span: int, convs: tuple[tuple[torch.Tensor, torch.Tensor], ...]) -> torch.Tensor:
    """Pooled CNN features ``(n, n_filters)`` of tokens ``ids`` ``(n, slots)`` whose real slots
    (begin-of-word to end-of-word) number at most ``span - max width + 1``: the convolutions run
    over the first ``span`` slots, which every window touching a real slot lies in; ``convs``:
    :attr:`EncoderWeights.convs`."""
    widths = [conv.kernel_size[0] for conv in encoder.convs]
    n_slots = encoder.n_slots
    chars = encoder.char_embedding(ids[:, :span]).to(dtype).transpose(1, 2)  # (n, char_dim, span)
    pooled = []
    for (weight, bias), width, constant in zip(convs, widths, constants):
        values = nn.functional.conv1d(chars, weight, bias)  # (n, filters, span-width+1)
        best = values.max(dim=2).values
        # Only words with an all-padding window in the full slots take the constant into the max.
        has_padding_window = (n_real <= n_slots - width).unsqueeze(1)
        pooled.append(torch.where(has_padding_window, torch.maximum(best, constant), best).float())
    return torch.cat(pooled, dim=1)


def encode_words_fast(encoder: TokenEncoder, ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Token vectors ``(n, output_dim)`` for ``n`` *distinct, real* tokens ``ids`` ``(n, width)``.

    Equal to ``encoder(ids)`` up to float rounding, but convolves each word only over the
    windows that touch its characters (grouped in length buckets). The convolutions run on blocks
    of exactly :data:`~elmo.kernels.blocks.WORD_BLOCK` words of one bucket over a slot span fixed by
    the bucket, the highway layers and projection on blocks of
    :data:`~elmo.kernels.blocks.HEAD_BLOCK` words (larger on a GPU,
    :data:`~elmo.kernels.blocks.BLOCK_SIZES`; each last block padded with copies of its first word), so every convolution and product has a shape that the model and the word's bucket
    decide: a word's vector is the same bits whatever other words are encoded with it
    (:mod:`elmo.kernels.blocks`), and memory stays bounded however many words come in. ``dtype``
    may be ``torch.bfloat16`` (or float16 on GPU) for the convolutions and matrix products, or
    ``torch.int8`` for the highway and projection products (:func:`encoder_weights`); the result
    is float32.
    """
    n = ids.shape[0]
    out = ids.new_zeros((n, encoder.output_dim), dtype=torch.float32)
    if n == 0:
        return out
    word_ids, ids = encoder.split_ids(ids)
    n_real = (ids != encoder.pad_id).sum(dim=1)  # begin-of-word .. end-of-word
    sizes = block_sizes(ids.device)
    word_block, head_block = sizes.word, sizes.head
    weights = encoder_weights(encoder, dtype, head_block)
    dtype = activation_dtype(products_dtype(dtype, ids.device))  # what the words' rows are in
    buckets = length_buckets(encoder.n_slots)
    bucket_of = torch.bucketize(n_real, torch.tensor(buckets, device=ids.device))
    widest = max(conv.kernel_size[0] for conv in encoder.convs)
    for head_start in range(0, n, WORDS_PER_PART):
        part = torch.arange(head_start, min(n, head_start + WORDS_PER_PART), device=ids.device)
        features = torch.empty(len(part), encoder.config.n_filters, dtype=torch.float32, device=ids.device)
        part_buckets = bucket_of[part]
        for bucket in part_buckets.unique().tolist():
            members = part[part_buckets == bucket]
            span = min(encoder.n_slots, buckets[bucket] + widest - 1)  # the slots any window touching a real one reaches
            for start in range(0, len(members), word_block):
                rows = members[start:start + word_block]
                block = pad_rows_with_first(rows, word_block)
                pooled = _cnn_on_real_slots(encoder, ids[block], n_real[block], weights.constants, dtype, span,
                                            weights.convs)
                features[rows - head_start] = pooled[:len(rows)]
        for start in range(0, len(part), head_block):
            rows = part[start:start + head_block]
            block = pad_rows_with_first(rows, head_block)
            words = word_ids[block] if word_ids is not None else None
            vectors = _highway_and_projection(encoder, encoder.activation(features[block - head_start]), dtype, words,
                                              weights)
            out[rows] = vectors[:len(rows)]
    return out


def pad_rows_with_first(rows: torch.Tensor, count: int) -> torch.Tensor:
    """The indices ``rows`` ``(k,)``, ``1 <= k <= count``, followed by copies of the first up to ``count``."""
    return torch.cat([rows, rows[:1].expand(count - len(rows))]) if len(rows) < count else rows


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T + bias`` ``(n, out)`` in float32: the product in ``x``'s dtype, and in
    reduced precision the float32 ``bias`` added after the result is widened (never rounded; a
    copy and an add in place, since one add of mixed dtypes took 10x longer on this PyTorch)."""
    if x.dtype == torch.float32:
        return linear(x, weight, bias)
    return linear(x, weight).float().add_(bias)


def _highway_and_projection(encoder: TokenEncoder, x: torch.Tensor, dtype: torch.dtype,
                            word_ids: torch.Tensor | None = None, weights: EncoderWeights | None = None,
                            ) -> torch.Tensor:
    """The encoder after pooling, with the matrix products in ``dtype`` and the rest in float32;
    ``word_ids`` ``(n,)`` for a model with a word embedding; ``weights``: :func:`encoder_weights`
    for ``x``'s rows (None: made here)."""
    if weights is None:
        weights = encoder_weights(encoder, dtype, x.shape[0])
    for carry_weight, carry_bias, transform_weight, transform_bias in weights.highways:
        x_low = x.to(dtype)
        x = highway(_product(x_low, carry_weight, carry_bias), _product(x_low, transform_weight, transform_bias), x)
    if word_ids is not None:
        x = torch.cat([encoder.word_embedding.weight[word_ids].float(), x], dim=1)
    if weights.projection is not None:
        x = _product(x.to(dtype), *weights.projection)
    return x


def encode_fast(encoder: TokenEncoder, char_ids: torch.Tensor, mask: torch.Tensor,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Token vectors ``(batch, time, output_dim)`` for ``char_ids`` ``(batch, time, width)``,
    running the encoder once per distinct real token and never on padding (zero there), with
    products in ``dtype`` (:func:`encode_words_fast`)."""
    batch, time, n_chars = char_ids.shape
    out = char_ids.new_zeros((batch, time, encoder.output_dim), dtype=torch.float32)
    real = char_ids[mask]  # (n_real, width)
    if real.shape[0] == 0:
        return out
    distinct, inverse = unique_rows(real)
    out[mask] = encode_words_fast(encoder, distinct, dtype)[inverse]
    return out
