import numpy as np
import pytest

from elmo.model.chars import (
    BOS_IDS,
    EOS_IDS,
    batch_to_char_ids,
    tokenize,
    word_to_char_ids,
)

BOW, EOW, PAD = 259, 260, 261  # bilm-tf's 258, 259, 260 shifted by +1


def test_plain_word():
    ids = word_to_char_ids("Hi")
    assert ids.shape == (50,)
    assert list(ids[:4]) == [BOW, ord("H") + 1, ord("i") + 1, EOW]
    assert (ids[4:] == PAD).all()


def test_sentence_boundary_tokens():
    assert list(word_to_char_ids("<S>")[:4]) == [BOW, 257, EOW, PAD]
    assert list(word_to_char_ids("</S>")[:4]) == [BOW, 258, EOW, PAD]
    np.testing.assert_array_equal(word_to_char_ids("<S>"), BOS_IDS)
    np.testing.assert_array_equal(word_to_char_ids("</S>"), EOS_IDS)
    # Anything else that merely looks like a marker is spelled out byte by byte.
    assert word_to_char_ids("<s>")[1] == ord("<") + 1


def test_long_token_truncated_to_48_bytes():
    ids = word_to_char_ids("x" * 80)
    assert ids[0] == BOW and ids[49] == EOW
    assert (ids[1:49] == ord("x") + 1).all()


def test_multibyte_character_cut_at_limit():
    word = "a" * 47 + "é"  # é is 2 bytes: only its first byte fits in the 48
    ids = word_to_char_ids(word)
    assert ids[48] == 0xC3 + 1 and ids[49] == EOW


@pytest.mark.parametrize("word", ["😀", "東京", "naïve", "\u200b"])
def test_utf8_bytes(word):
    encoded = word.encode("utf-8")
    ids = word_to_char_ids(word)
    assert list(ids[1:1 + len(encoded)]) == [b + 1 for b in encoded]
    assert ids[1 + len(encoded)] == EOW


def test_batch_padding_and_mask():
    ids, mask = batch_to_char_ids([["a", "b", "c"], [], ["d"]])
    assert ids.shape == (3, 3, 50) and mask.shape == (3, 3)
    assert mask.tolist() == [[True] * 3, [False] * 3, [True, False, False]]
    assert (ids[1] == 0).all() and (ids[2, 1:] == 0).all()


def test_batch_rejects_untokenized_strings():
    with pytest.raises(TypeError, match="batch\\[0\\] is a string"):
        batch_to_char_ids(["not tokenized"])


def test_tokenize_is_str_split():
    assert tokenize("  a  b\tc\n") == ["a", "b", "c"]
    assert tokenize("") == []


def test_many_words_at_once_equal_one_at_a_time():
    from elmo.model.chars import words_to_char_ids

    words = ["Hi", "<S>", "</S>", "<s>", "x" * 80, "a" * 47 + "é", "😀", "東京", "naïve", "\u200b", "\ud800x", "q"]
    np.testing.assert_array_equal(words_to_char_ids(words), np.stack([word_to_char_ids(w) for w in words]))
    assert words_to_char_ids([]).shape == (0, 50)
