"""The character CNN token encoder: its distinct-word path and padding shortcut against the plain
encoder, values and gradients."""

import pytest
import torch
from conftest import SENTENCES, TEXT, assert_gradients_close, make_config

from elmo import BiLM, batch_to_char_ids
from elmo.kernels import blocks
from elmo.kernels.encoder import encode_distinct, encode_fast, encode_words_fast, encoder_weights

pytestmark = pytest.mark.exactness


def test_encode_distinct_matches_encoder_and_gradients():
    model = BiLM(make_config())
    ids, _ = batch_to_char_ids(SENTENCES)
    plain = model.token_encoder(ids)
    distinct = encode_distinct(model.token_encoder, ids)
    torch.testing.assert_close(distinct, plain, rtol=0, atol=1e-5)
    weight = torch.randn_like(plain)
    grad_plain = torch.autograd.grad((plain * weight).sum(), model.token_encoder.convs[0].weight)[0]
    grad_distinct = torch.autograd.grad((distinct * weight).sum(), model.token_encoder.convs[0].weight)[0]
    torch.testing.assert_close(grad_distinct, grad_plain, rtol=1e-4, atol=1e-5)


def test_ladder_sizes_bound_padding_and_shapes():
    from elmo.kernels.encoder import ladder_size

    sizes = [ladder_size(n) for n in range(1, 20_001)]
    assert all(n <= size <= n + n // 4 for n, size in zip(range(1, 20_001), sizes))
    assert len(set(sizes)) <= 60  # a run meets few distinct shapes


def test_fixed_shapes_pad_groups_and_give_the_same_numbers():
    """On the GPU's fixed shapes each group is padded (here the nine one-letter words to 10, and to
    the bucket's span) and the padding changes nothing: values equal, gradients equal to rounding."""
    from elmo.kernels.encoder import distinct_words, ladder_size

    torch.manual_seed(3)
    model = BiLM(make_config())
    ids, _ = batch_to_char_ids([["a", "b", "c", "d", "e", "f", "g", "h", "i", "eeeeeee", "ffffffff", "ggggggggg"]])
    words = distinct_words(ids)
    assert any(ladder_size(stop - start) > stop - start
               for (start, _), (stop, _) in zip([(0, 0), *words.groups[:-1]], words.groups))
    plain = encode_distinct(model.token_encoder, ids, words, fixed_shapes=False)
    fixed = encode_distinct(model.token_encoder, ids, words, fixed_shapes=True)
    torch.testing.assert_close(fixed, plain, rtol=0, atol=1e-6)
    assert_gradients_close(fixed, plain, list(model.token_encoder.parameters()), rtol=1e-5, atol=1e-6)


def test_group_shapes_are_the_convolution_inputs_of_both_modes():
    """group_shapes says what encode_distinct runs: each group's rows (padded to the ladder with
    fixed shapes) and its span (from the group's longest word, or its bucket's bound)."""
    from elmo.kernels.encoder import distinct_words, group_shapes, ladder_size, length_buckets

    ids, _ = batch_to_char_ids([["a", "b", "c", "d", "e", "f", "g", "h", "i", "eeeeeee", "ffffffff", "ggggggggg"]])
    words = distinct_words(ids)
    n_slots, widest = ids.shape[-1], 7
    exact = group_shapes(words, n_slots, widest, fixed_shapes=False)
    fixed = group_shapes(words, n_slots, widest, fixed_shapes=True)
    assert [(start, stop) for start, stop, _, _ in exact] == [(start, stop) for start, stop, _, _ in fixed]
    assert exact[-1][1] == len(words.distinct) and exact[0][0] == 0
    for (start, stop, rows, span), (_, longest) in zip(exact, words.groups):
        assert rows == stop - start and span == min(n_slots, longest + widest - 1)
    buckets = length_buckets(n_slots)
    for (start, stop, rows, span), (_, longest) in zip(fixed, words.groups):
        bound = next(b for b in buckets if b >= longest)
        assert rows == ladder_size(stop - start) and span == min(n_slots, bound + widest - 1)
    assert any(f[2] > e[2] for f, e in zip(fixed, exact))  # the nine one-letter words padded to ten


def test_encoder_skips_padding_slots_exactly():
    """Words of every length, including ones that fill all 50 slots (no all-padding window)."""
    torch.manual_seed(2)
    model = BiLM(make_config(filters=((1, 4), (3, 5), (7, 6)))).eval()
    words = ["a", "ab", "word", "x" * 40, "y" * 43, "z" * 45, "w" * 48, "v" * 90, "<S>", "</S>", "é" * 24]
    ids, _ = batch_to_char_ids([[w] for w in words])
    with torch.no_grad():
        expected = model.token_encoder(ids)[:, 0]
        torch.testing.assert_close(encode_words_fast(model.token_encoder, ids[:, 0]), expected, rtol=0, atol=1e-5)
        batch_ids, mask = batch_to_char_ids(TEXT)
        got = encode_fast(model.token_encoder, batch_ids, mask)
        torch.testing.assert_close(got, model.token_encoder(batch_ids) * mask.unsqueeze(-1), rtol=0, atol=1e-5)
    assert (got[~mask] == 0).all()


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn", "pytorch"])
def test_bfloat16_encoder_stays_close_and_converts_its_weights_once(onednn, monkeypatch):
    """The character CNN, highway and projection in bfloat16 (oneDNN's packed products where the
    CPU has bfloat16 instructions) within bfloat16 rounding of the float32 encoder; the converted
    weights are made once and made again after a parameter changes in place."""
    monkeypatch.setattr(blocks, "ONEDNN", onednn)
    torch.manual_seed(3)
    model = BiLM(make_config(filters=((1, 4), (3, 5), (7, 6)))).eval()
    words = ["a", "ab", "word", "x" * 40, "z" * 45, "v" * 90, "<S>", "</S>"] + [f"w{i}" for i in range(70)]
    ids, _ = batch_to_char_ids([[w] for w in words])
    encoder = model.token_encoder
    with torch.no_grad():
        expected = encoder(ids)[:, 0]
        got = encode_words_fast(encoder, ids[:, 0], torch.bfloat16)
        assert got.dtype == torch.float32
        deviation = (got - expected).abs().max()
        assert 0 < deviation < 0.02 * expected.abs().max(), float(deviation)
        first = encoder_weights(encoder, torch.bfloat16, 64)
        assert encoder_weights(encoder, torch.bfloat16, 64) is first  # not converted again
        packed = blocks.onednn_for("cpu", torch.bfloat16)
        assert (first.highways[0][0].layout == torch._mkldnn) == packed
        assert first.highways[0][1].dtype == torch.float32  # biases stay float32
        encoder.projection.weight.mul_(2.0)
        again = encoder_weights(encoder, torch.bfloat16, 64)
        assert again is not first
        torch.testing.assert_close(encode_words_fast(encoder, ids[:, 0], torch.bfloat16), encoder(ids)[:, 0],
                                   rtol=0, atol=float(0.02 * expected.abs().max() * 2))
