"""The character CNN token encoder: its distinct-word path and padding shortcut against the plain
encoder, values and gradients."""

import pytest
import torch
from conftest import SENTENCES, TEXT, make_config

from elmo import BiLM, batch_to_char_ids
from elmo.model.encoder import encode_distinct, encode_fast, encode_words_fast

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
    from elmo.model.encoder import ladder_size

    sizes = [ladder_size(n) for n in range(1, 20_001)]
    assert all(n <= size <= n + n // 4 for n, size in zip(range(1, 20_001), sizes))
    assert len(set(sizes)) <= 60  # a run meets few distinct shapes


def test_fixed_shapes_pad_groups_and_give_the_same_numbers():
    """On the GPU's fixed shapes each group is padded (here the nine one-letter words to 10, and to
    the bucket's span) and the padding changes nothing: values equal, gradients equal to rounding."""
    from elmo.model.encoder import distinct_words, ladder_size

    torch.manual_seed(3)
    model = BiLM(make_config())
    ids, _ = batch_to_char_ids([["a", "b", "c", "d", "e", "f", "g", "h", "i", "eeeeeee", "ffffffff", "ggggggggg"]])
    words = distinct_words(ids)
    assert any(ladder_size(stop - start) > stop - start
               for (start, _), (stop, _) in zip([(0, 0), *words.groups[:-1]], words.groups))
    plain = encode_distinct(model.token_encoder, ids, words, fixed_shapes=False)
    fixed = encode_distinct(model.token_encoder, ids, words, fixed_shapes=True)
    torch.testing.assert_close(fixed, plain, rtol=0, atol=1e-6)
    weight = torch.randn_like(plain)
    params = list(model.token_encoder.parameters())
    for a, b in zip(torch.autograd.grad((fixed * weight).sum(), params), torch.autograd.grad((plain * weight).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


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
