"""Word vectors of the task models: reading GloVe files, and growing a trained vocabulary and its
embedding for words seen only at evaluation."""

import pytest
import torch

from elmo.tasks.features import (
    PAD,
    TASK_MAX_CHARS,
    UNK,
    CharCNN,
    TokenFeatures,
    WordVocab,
    char_ids,
    load_glove,
    load_vectors,
    word_ids,
)

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

GLOVE = "the 0.5 0.25\ncat 1.0 -1.0\nparis 2.0 3.0\n<unk> 9.0 9.0\n"


def test_char_ids_are_utf8_bytes_plus_one_padded_and_cut():
    long_word = "x" * (TASK_MAX_CHARS + 5)
    ids = char_ids([["a\x00b", "é"], [long_word], []])
    assert ids.shape == (3, 2, TASK_MAX_CHARS) and ids.dtype == torch.long
    assert ids[0, 0, :4].tolist() == [ord("a") + 1, 1, ord("b") + 1, 0]  # a NUL byte is id 1, not padding
    assert ids[0, 1, :3].tolist() == [0xC3 + 1, 0xA9 + 1, 0]  # "é" is two bytes
    assert ids[1, 0].tolist() == [ord("x") + 1] * TASK_MAX_CHARS  # the first TASK_MAX_CHARS bytes
    assert ids[1, 1].sum() == 0 and ids[2].sum() == 0
    # A shorter time cuts every sentence; a longer one pads.
    assert torch.equal(char_ids([["a", "b", "c"]], time=2), char_ids([["a", "b"]]))
    assert char_ids([["a"]], time=3)[0, 1:].sum() == 0


def test_load_vectors_reads_only_the_words_asked_for(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text(GLOVE + "broken 1.0 x\n")
    vectors, dim = load_vectors(path, ["cat", "paris", "dog"])
    assert dim == 2 and sorted(vectors) == ["cat", "paris"]
    assert vectors["paris"].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match=r"glove.txt:5: not a word followed by numbers"):
        load_vectors(path, ["broken"])
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty vectors file"):
        load_vectors(tmp_path / "empty.txt", ["cat"])


def test_load_glove_fills_the_vocabulary_rows(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text(GLOVE)
    vocab = WordVocab(["cat", "dog", "the"])
    matrix, found = load_glove(path, vocab, seed=0)
    # "<unk>" is a word of the file too: it gives the unknown row its vector.
    assert found == 3 and matrix.shape == (5, 2)
    assert matrix[vocab.id("Cat")].tolist() == [1.0, -1.0] and matrix[vocab.id("the")].tolist() == [0.5, 0.25]
    assert matrix[UNK].tolist() == [9.0, 9.0] and matrix[PAD].tolist() == [0.0, 0.0]
    assert 0 < float(matrix[vocab.id("dog")].abs().sum()) < 1  # no vector: small random


def test_extended_vocabulary_and_embedding_keep_the_old_ids_and_rows():
    vocab = WordVocab(["cat", "the"])
    extended = vocab.extended(["Paris", "the", "apple", "paris"])
    assert extended.words == ["<pad>", "<unk>", "cat", "the", "apple", "paris"]
    assert all(extended.id(w) == vocab.id(w) for w in vocab.words)
    trained = torch.randn(len(vocab), 3)
    for freeze in (True, False):
        features = TokenFeatures(trained.clone(), freeze=freeze, char_filters=0)
        new_rows = torch.randn(2, 3)
        features.add_words(new_rows)
        table = features.words.weight.detach()
        assert torch.equal(table[:len(vocab)], trained) and torch.equal(table[len(vocab):], new_rows)
        assert features.words.weight.requires_grad == (not freeze)
        words = word_ids([["The", "apple", "Paris", "dog"]], extended)
        out = features(words, torch.zeros(1, 4, 1, dtype=torch.long))
        assert torch.equal(out[0], table[[vocab.id("the"), 4, 5, UNK]])
    with pytest.raises(ValueError, match=r"expected vectors of shape \(n, 3\)"):
        features.add_words(torch.randn(2, 4))


def _cnn_cases():
    """Char-id batches for the CNN's fast path: words of every length up to the cut (and longer),
    padding tokens, an all-padding row, a one-token batch and a batch with no real word."""
    sentences = [["The", "internationalisation", "of", "Zürich", "a"], ["x"], [], ["€", "ab" * 15, "abc"]]
    return [char_ids(sentences), char_ids([["word"]]), char_ids([[], []], time=3), char_ids([["a", "b"]], time=5)]


@pytest.mark.parametrize("case", range(4))
def test_char_cnn_fast_path_equals_the_cnn_over_every_slot(case):
    """forward (real words only, trimmed to the longest) against forward_every_slot (the plain
    computation over padding too): the same outputs and the same gradients of every parameter."""
    torch.manual_seed(case)
    cnn = CharCNN()
    chars = _cnn_cases()[case]
    weights = torch.randn(*chars.shape[:2], cnn.output_dim)
    results = []
    for forward in (cnn.forward_every_slot, cnn.forward):
        cnn.zero_grad()
        out = forward(chars)
        if out.requires_grad:  # with no real word the fast path is a constant zero
            (out * weights).sum().backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in cnn.parameters()]
        results.append((out.detach(), grads))
    (plain, plain_grads), (fast, fast_grads) = results
    assert fast.shape == plain.shape == (*chars.shape[:2], cnn.output_dim)
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-6)
    real = chars[..., 0] != 0
    assert torch.all(fast[~real] == 0)
    if real.any():
        assert fast[real].abs().sum() > 0  # the real words did go through the CNN
    for got, want in zip(fast_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
