"""AllenNLP's lower-level ELMo classes (``_ElmoCharacterEncoder``, ``_ElmoBiLm``), its state
reset path and its fallbacks for word ids, checked against the original implementation's
fixtures. Written from AllenNLP 2.10's documented behaviour, not copied from its tests."""

import logging
import pickle

import h5py
import numpy as np
import pytest
import torch
from conftest import ALLENNLP, fixture_batches

from elmo.allennlp import (
    Elmo,
    ElmoEmbedder,
    _ElmoBiLm,
    _ElmoCharacterEncoder,
    batch_to_ids,
)
from elmo.model.network import remove_boundaries

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

OPTIONS, WEIGHTS = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")
TOP_ONLY = [-1e10, -1e10, 0.0]  # a fixed mix that is the top layer: the fixtures hold the top layer
TOLERANCE = 1e-5
NO_CACHE = "Word inputs were passed to ELMo but it does not have a cached vocab."


def as_fixture(top: torch.Tensor) -> np.ndarray:
    """(n, 32) top layer -> the fixtures' (2, n, 16) [forward; backward]."""
    top = top.detach().numpy()
    return np.stack([top[:, :16], top[:, 16:]])


def fixture_vocab():
    """Every fixture word, with 0 as padding, and the word ids of a batch."""
    words = sorted({w for batch, _ in fixture_batches("allennlp") for s in batch for w in s})
    vocab = ["@@PADDING@@", *words]
    index = {w: i for i, w in enumerate(vocab)}

    def ids(batch):
        out = torch.zeros(len(batch), max(map(len, batch)), dtype=torch.long)
        for i, sentence in enumerate(batch):
            out[i, :len(sentence)] = torch.tensor([index[w] for w in sentence])
        return out

    return vocab, ids


# ------------------------------------------------------------------ _ElmoCharacterEncoder
def test_character_encoder_gives_the_reference_token_vectors():
    words = (ALLENNLP / "vocab_test.txt").read_text().strip().split("\n")
    with h5py.File(ALLENNLP / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(words) == len(expected)
    rows = [words[i:i + 50] for i in range(0, len(words), 50)]  # the last row is padded
    encoder = _ElmoCharacterEncoder(OPTIONS, WEIGHTS)
    out = encoder(batch_to_ids(rows))
    assert set(out) == {"token_embedding", "mask"}
    embedding, mask = out["token_embedding"], out["mask"]
    assert embedding.shape == (len(rows), 52, 16) and mask.shape == (len(rows), 52) and mask.dtype == torch.bool
    assert mask.sum(dim=1).tolist() == [len(r) + 2 for r in rows]
    without, inner = remove_boundaries(embedding[:, None], mask)
    got = without[:, 0][inner].detach().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    assert encoder.get_output_dim() == 16 and not any(p.requires_grad for p in encoder.parameters())


def test_character_encoder_boundaries_are_the_boundary_tokens():
    encoder = _ElmoCharacterEncoder(OPTIONS, WEIGHTS)
    embedding = encoder(batch_to_ids([["<S>", "cat", "</S>"]]))["token_embedding"][0]
    torch.testing.assert_close(embedding[0], embedding[1], rtol=0, atol=1e-6)  # <S> added, then "<S>"
    torch.testing.assert_close(embedding[4], embedding[3], rtol=0, atol=1e-6)  # "</S>", then </S> added


def test_character_encoder_requires_grad():
    encoder = _ElmoCharacterEncoder(OPTIONS, WEIGHTS, requires_grad=True)
    encoder(batch_to_ids([["a", "cat"]]))["token_embedding"].sum().backward()
    params = list(encoder.parameters())
    assert params and all(p.requires_grad and p.grad is not None for p in params)


# --------------------------------------------------------------------------- _ElmoBiLm
def test_bilm_batch_after_batch_reproduces_the_fixtures():
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS)
    assert bilm.num_layers == 3 and bilm.get_output_dim() == 32
    for batch, expected in fixture_batches("allennlp"):
        out = bilm(batch_to_ids(batch))
        assert set(out) == {"activations", "mask"} and len(out["activations"]) == 3
        mask = out["mask"]
        assert all(a.shape == (3, mask.shape[1], 32) for a in out["activations"])
        assert mask.sum(dim=1).tolist() == [len(s) + 2 for s in batch]
        top, inner = remove_boundaries(out["activations"][2][:, None], mask)
        for row, want in enumerate(expected):
            np.testing.assert_allclose(as_fixture(top[row, 0][inner[row]]), want, atol=TOLERANCE, rtol=0)


def test_bilm_layer_zero_is_the_token_vector_twice_and_padding_is_zero():
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS, state="reset")
    ids = batch_to_ids([["The", "cat", "sat"], ["Hi"]])
    out = bilm(ids)
    tokens = _ElmoCharacterEncoder(OPTIONS, WEIGHTS)(ids)
    layer0, mask = out["activations"][0], out["mask"]
    torch.testing.assert_close(mask, tokens["mask"])
    keep = mask[..., None].float()
    torch.testing.assert_close(layer0, torch.cat([tokens["token_embedding"]] * 2, dim=-1) * keep, rtol=0, atol=1e-6)
    for layer in out["activations"]:
        assert (layer[1, 3:] == 0).all()  # "Hi" has 3 positions with boundaries


def test_reset_states_through_the_attribute_path_allennlp_code_uses():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0)
    fresh = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0)
    ids = batch_to_ids([["The", "cat", "sat", "."], ["Dogs", "bark"]])
    first = elmo(ids)["elmo_representations"][0]
    carried = elmo(ids)["elmo_representations"][0]
    assert (first - carried).abs().max() > 1e-4  # stateful, as AllenNLP
    elmo._elmo_lstm._elmo_lstm.reset_states()
    torch.testing.assert_close(elmo(ids)["elmo_representations"][0], first, rtol=0, atol=0)
    torch.testing.assert_close(fresh(ids)["elmo_representations"][0], first, rtol=0, atol=0)


def test_four_dimensional_input_is_the_batches_run_separately_from_zero_state():
    batches = [[["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "."]],
               [["1", "2"], ["1", "2", "3", "4", "5"]],
               [["1", "2", "3", "4", "50"], ["The"]]]
    ids = [batch_to_ids(b) for b in batches]
    width = max(i.shape[1] for i in ids)
    ids = [torch.nn.functional.pad(i, (0, 0, 0, width - i.shape[1])) for i in ids]
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0)
    together = elmo(torch.stack(ids, dim=1))["elmo_representations"][0]  # (2, 3, width, 32)
    for k, batch_ids in enumerate(ids):
        elmo._elmo_lstm._elmo_lstm.reset_states()
        alone = elmo(batch_ids)["elmo_representations"][0]
        torch.testing.assert_close(together[:, k], alone, rtol=0, atol=1e-6)


def test_reset_states_with_a_row_mask_resets_those_rows_only():
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS)
    first = batch_to_ids([["The", "cat", "sat"], ["Dogs", "bark", "loudly"]])
    second = batch_to_ids([["A", "bird"], ["It", "flew"]])
    bilm(first)
    continued = bilm(second)["activations"][2]
    bilm._elmo_lstm.reset_states()
    bilm(first)
    bilm._elmo_lstm.reset_states(torch.tensor([True, False]))
    partly = bilm(second)["activations"][2]
    bilm._elmo_lstm.reset_states()
    from_zero = bilm(second)["activations"][2]
    torch.testing.assert_close(partly[0], from_zero[0], rtol=0, atol=0)
    torch.testing.assert_close(partly[1], continued[1], rtol=0, atol=0)
    assert (partly[1] - from_zero[1]).abs().max() > 1e-4
    with pytest.raises(ValueError, match="incorrect batch size"):
        bilm._elmo_lstm.reset_states(torch.tensor([True, False, True]))


def test_states_in_allennlp_layout_round_trip():
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS)
    assert bilm._elmo_lstm._states is None
    bilm(batch_to_ids([["The", "cat", "sat"], ["Dogs", "bark"]]))
    hidden, memory = bilm._elmo_lstm._states
    assert hidden.shape == (2, 2, 32) and memory.shape == (2, 2, 128)  # (layers, batch, 2*proj / 2*cell)
    carried = bilm._elmo_lstm.runtime.states.carried
    torch.testing.assert_close(hidden[1, :, 16:], carried.h[1, 1])  # backward half, top layer
    saved = (hidden.clone(), memory.clone())
    ids = batch_to_ids([["A", "bird", "flew"]])
    once = bilm(ids)["activations"][2]
    bilm._elmo_lstm._states = saved  # as flair does after unpickling
    torch.testing.assert_close(bilm(ids)["activations"][2], once, rtol=0, atol=0)
    with pytest.raises(ValueError, match="_states: expected"):
        bilm._elmo_lstm._states = (hidden[:, :, :16], memory)
    warm = _ElmoBiLm(OPTIONS, WEIGHTS, state="warm")
    assert warm._elmo_lstm._states is None
    with pytest.raises(ValueError, match="carries no state"):
        warm._elmo_lstm._states = saved


def test_bilm_requires_grad_and_elmo_parameter_names():
    for requires_grad in (True, False):
        elmo = Elmo(OPTIONS, WEIGHTS, 1, requires_grad=requires_grad, dropout=0.0)
        torch.manual_seed(1)
        ids = torch.randint(0, 262, (3, 4, 50))
        elmo(ids)["elmo_representations"][0].sum().backward()
        grads = [p.grad for name, p in elmo.named_parameters() if "_elmo_lstm" in name]
        assert len(grads) == len(list(elmo._elmo_lstm.bilm.parameters()))
        if requires_grad:
            assert all(g is not None for g in grads)
        else:
            assert all(g is None for g in grads)


# ----------------------------------------------------------------------------- fallbacks
def test_cached_word_ids_reproduce_the_fixtures_batch_after_batch():
    vocab, ids = fixture_vocab()
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS, vocab_to_cache=vocab)
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab, scalar_mix_parameters=TOP_ONLY)
    for batch, expected in fixture_batches("allennlp"):
        chars, words = batch_to_ids(batch), ids(batch)
        out = bilm(chars, words)
        top, inner = remove_boundaries(out["activations"][2][:, None], out["mask"])
        mixed = elmo(None, words)  # our extension: no character ids needed when every word is cached
        for row, want in enumerate(expected):
            np.testing.assert_allclose(as_fixture(top[row, 0][inner[row]]), want, atol=TOLERANCE, rtol=0)
            n = len(batch[row])
            np.testing.assert_allclose(as_fixture(mixed["elmo_representations"][0][row, :n]), want,
                                       atol=TOLERANCE, rtol=0)


def test_uncached_word_ids_fall_back_to_the_characters_and_keep_the_fixture_numbers():
    vocab, ids = fixture_vocab()
    small = vocab[:len(vocab) // 2]  # half the words are outside the cache
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS, vocab_to_cache=small)
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=small, scalar_mix_parameters=TOP_ONLY)
    fell_back = 0
    for batch, expected in fixture_batches("allennlp"):
        words = ids(batch)  # ids into the full vocabulary: some are past the end of `small`
        fell_back += int((words >= len(small)).any())
        out = bilm(batch_to_ids(batch), words)
        top, inner = remove_boundaries(out["activations"][2][:, None], out["mask"])
        mixed = elmo(batch_to_ids(batch), words)["elmo_representations"][0]
        for row, want in enumerate(expected):
            np.testing.assert_allclose(as_fixture(top[row, 0][inner[row]]), want, atol=TOLERANCE, rtol=0)
            np.testing.assert_allclose(as_fixture(mixed[row, :len(batch[row])]), want, atol=TOLERANCE, rtol=0)
    assert fell_back == 10  # every batch took the fallback
    with pytest.raises(ValueError, match="outside vocab_to_cache .* no character ids"):
        bilm(None, torch.tensor([[len(small)]]))
    with pytest.raises(ValueError, match="outside vocab_to_cache"):
        bilm(None, torch.tensor([[-1]]))


def test_word_ids_without_a_cache_warn_and_use_the_characters(caplog):
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, scalar_mix_parameters=TOP_ONLY)
    bilm = _ElmoBiLm(OPTIONS, WEIGHTS)
    nonsense = torch.full((3, 60), 12345)  # never read: there is no cache to look them up in
    for batch, expected in fixture_batches("allennlp"):
        chars = batch_to_ids(batch)
        with caplog.at_level(logging.WARNING, logger="elmo.allennlp.modules"):
            caplog.clear()
            out = elmo(chars, nonsense[:, :chars.shape[1]])["elmo_representations"][0]
        assert [r.getMessage() for r in caplog.records] == [NO_CACHE]
        layers = bilm(chars, nonsense[:, :chars.shape[1]])  # _ElmoBiLm ignores them silently, as AllenNLP's
        top, inner = remove_boundaries(layers["activations"][2][:, None], layers["mask"])
        for row, want in enumerate(expected):
            np.testing.assert_allclose(as_fixture(out[row, :len(batch[row])]), want, atol=TOLERANCE, rtol=0)
            np.testing.assert_allclose(as_fixture(top[row, 0][inner[row]]), want, atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="without vocab_to_cache"):
        elmo(None, nonsense)


def test_cached_word_ids_with_extra_dimensions():
    vocab = ["@@PADDING@@", "This", "is", "a", "sentence", "Here", "'s", "one", "Another"]
    sentences = [["This", "is", "a", "sentence"], ["Here", "'s", "one"], ["Another", "one"]]
    words = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 0], [8, 7, 0, 0]])
    chars = batch_to_ids(sentences)
    single = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab)(chars, words)
    expanded = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab)(
        torch.stack([chars] * 4, dim=1), torch.stack([words] * 4, dim=1))
    representation = expanded["elmo_representations"][0]
    assert representation.shape == (3, 4, 4, 32) and expanded["mask"].shape == (3, 4, 4)
    for k in range(4):
        torch.testing.assert_close(representation[:, k], single["elmo_representations"][0], rtol=0, atol=1e-6)
        assert torch.equal(expanded["mask"][:, k], single["mask"])


def test_elmo_takes_a_bilm_module_as_allennlp():
    ids = batch_to_ids([["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "from", "Elmo", "."]])
    elmo = Elmo(None, None, 2, dropout=0.0, module=_ElmoBiLm(OPTIONS, WEIGHTS))
    reference = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0)
    out, want = elmo(ids), reference(ids)
    assert [tuple(r.shape) for r in out["elmo_representations"]] == [(2, 7, 32)] * 2
    torch.testing.assert_close(out["elmo_representations"][0], want["elmo_representations"][0])
    assert elmo.get_output_dim() == 32

    class Wrapped(torch.nn.Module):  # any module with AllenNLP's protocol, not only ours
        def __init__(self):
            super().__init__()
            self.inner, self.num_layers = _ElmoBiLm(OPTIONS, WEIGHTS), 3

        def get_output_dim(self):
            return 32

        def forward(self, inputs, word_inputs=None):
            return self.inner(inputs, word_inputs)

    other = Elmo(None, None, 1, dropout=0.0, module=Wrapped())
    torch.testing.assert_close(other(ids)["elmo_representations"][0], want["elmo_representations"][0])


def test_embedder_runs_on_its_bilm_and_pickles_with_its_state():
    sentence = ["The", "cat", "sat", "."]
    embedder = ElmoEmbedder(OPTIONS, WEIGHTS)
    assert isinstance(embedder.elmo_bilm, _ElmoBiLm) and embedder.cuda_device == -1
    embedder.embed_sentence(sentence)
    copy = pickle.loads(pickle.dumps(embedder))  # what a library saving its model does
    assert isinstance(copy.elmo_bilm._elmo_lstm._states, tuple)
    np.testing.assert_allclose(copy.embed_sentence(sentence), embedder.embed_sentence(sentence), atol=1e-6, rtol=0)
    embedder.elmo_bilm._elmo_lstm.reset_states()
    fresh = ElmoEmbedder(OPTIONS, WEIGHTS)
    np.testing.assert_allclose(embedder.embed_sentence(sentence), fresh.embed_sentence(sentence), atol=1e-6, rtol=0)
    # A batch with an empty sentence runs it (its row's state moves on, as AllenNLP's did).
    arrays = fresh.embed_batch([["This", "is", "a", "test"], []])
    assert [a.shape for a in arrays] == [(3, 4, 32), (3, 0, 32)]
