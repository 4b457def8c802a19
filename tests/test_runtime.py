"""The inference runtime (elmo.inference.runtime): the same numbers as the plain biLM on long
sentences and in any batch, its token memo and stacked weights following weight changes,
bfloat16, bounded memory."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import LONG_LENGTHS, TEXT, load_fixture_model, make_config

from elmo import (
    BiLM,
    Embedder,
    batch_to_char_ids,
)
from elmo.inference.runtime import Runtime
from elmo.kernels.cpu_lstm import bilstm_inference
from elmo.model.network import LstmLayer

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


def test_memo_is_dropped_when_weights_change():
    torch.manual_seed(3)
    model = BiLM(make_config()).eval()
    embedder = Embedder(model, state="reset")
    before = embedder.embed_sentences([["hello", "world"]])[0]
    with torch.no_grad():
        model.token_encoder.projection.weight.mul_(2.0)
    after = embedder.embed_sentences([["hello", "world"]])[0]
    fresh = Embedder(model, state="reset", token_memo=0).embed_sentences([["hello", "world"]])[0]
    np.testing.assert_allclose(after, fresh, atol=1e-6, rtol=0)
    assert np.abs(after - before).max() > 1e-3


def test_bfloat16_stays_close_to_float32(bfloat16_selected):
    model = load_fixture_model("allennlp")
    reference = Embedder(model).embed_sentences(TEXT)
    low = Embedder(model, precision="bfloat16").embed_sentences(TEXT)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(low, reference) if a.size)
    scale = max(float(np.abs(b).max()) for b in reference if b.size)
    assert 0 < worst < 0.05 * scale
    with pytest.raises(ValueError, match="precision"):
        Embedder(model, precision="int4")


LONG_SENTENCE = """
import json, resource, sys
import torch
from elmo import BiLM, Embedder
from elmo.model.config import published_config
model = BiLM(published_config("small")).eval()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
words = [f"w{i % 997}" for i in range(10_000)]
(vectors,) = Embedder(model, state="reset").embed_sentences([words], layers="top")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"shape": list(vectors.shape), "growth_mb": (after - before) / 1024}))
"""


@pytest.mark.slow  # 20 s: CI runs it in its slow pass
def test_ten_thousand_token_sentence_has_bounded_memory():
    out = subprocess.run([sys.executable, "-c", LONG_SENTENCE], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["shape"] == [10_000, 256]
    assert result["growth_mb"] < 400, result


def test_stacked_weights_follow_weight_changes():
    torch.manual_seed(5)
    model = BiLM(make_config()).eval()
    ids, mask = batch_to_char_ids([["a", "b", "c"]])
    runtime = Runtime(model)
    with torch.no_grad():
        before = runtime(ids, mask).layers
        model.forward_layers[0].state_weight.mul_(1.5)
        after = runtime(ids, mask).layers
        plain = BiLM(make_config(), fast=False).eval()
        plain.load_state_dict(model.state_dict())
        torch.testing.assert_close(after, plain(ids, mask).layers, rtol=0, atol=1e-5)
    assert (after - before).abs().max() > 1e-4



def test_weights_fingerprint_is_hashed_once_and_follows_weight_changes(monkeypatch):
    import elmo.inference.runtime as runtime_module
    from elmo.model.weights import weights_fingerprint

    torch.manual_seed(6)
    model = BiLM(make_config()).eval()
    runtime = Runtime(model)
    hashed = []
    monkeypatch.setattr(runtime_module, "weights_fingerprint", lambda m: hashed.append(m) or weights_fingerprint(m))
    first = runtime.weights_fingerprint()
    assert first == weights_fingerprint(model)
    assert runtime.weights_fingerprint() == first and runtime_module.warm_state_key(runtime)
    assert len(hashed) == 1  # the second call and the warm state's key reuse it
    with torch.no_grad():
        model.backward_layers[1].bias.add_(0.25)
    changed = runtime.weights_fingerprint()
    assert changed != first and changed == weights_fingerprint(model)
    assert len(hashed) == 2
    with torch.no_grad():
        model.backward_layers[1].bias.sub_(0.25)
    # A parameter replaced by another tensor is seen too, even with the same version count.
    model.forward_layers[0].bias = torch.nn.Parameter(model.forward_layers[0].bias.detach() + 1)
    assert runtime.weights_fingerprint() == weights_fingerprint(model) != first


def test_the_carried_state_saved_and_restored_continues_a_stateful_run_exactly():
    torch.manual_seed(7)
    model = BiLM(make_config()).eval()
    runtime = Runtime(model, state="stateful")
    assert runtime.carried_state is None
    runtime.run_batch([["a", "b", "c"], ["d"]])
    saved = runtime.carried_state
    assert saved.c.shape == (2, 2, 2, model.config.lstm.dim)  # (2, L, rows, dim)
    assert saved.h.shape == (2, 2, 2, model.config.lstm.projection_dim)
    saved = type(saved)(saved.c.clone(), saved.h.clone())
    expected = runtime.run_batch([["e", "f"], ["g", "h", "i"]]).layers
    runtime.reset_state()
    assert runtime.carried_state is None
    runtime.carried_state = saved  # as a resumed file's run restores the journal's state
    assert torch.equal(runtime.run_batch([["e", "f"], ["g", "h", "i"]]).layers, expected)
    with pytest.raises(ValueError, match="carries no state"):
        Runtime(model, state="warm").carried_state = saved


def test_the_vocab_cache_fingerprint_follows_the_cache(tmp_path):
    from elmo.inference.vocab_cache import save_vocab_cache

    torch.manual_seed(8)
    model = BiLM(make_config()).eval()
    assert Runtime(model).vocab_cache_fingerprint() is None
    save_vocab_cache(model, ["the", "cat", "sat"], tmp_path / "a.npz")
    save_vocab_cache(model, ["the", "cat", "mat"], tmp_path / "b.npz")
    first = Runtime(model, vocab_cache=tmp_path / "a.npz").vocab_cache_fingerprint()
    assert len(first) == 64 and first == Runtime(model, vocab_cache=tmp_path / "a.npz").vocab_cache_fingerprint()
    assert Runtime(model, vocab_cache=tmp_path / "b.npz").vocab_cache_fingerprint() != first


@pytest.mark.parametrize("token_memo", [0, 100])
def test_token_vectors_are_the_token_layer_of_a_batch(tmp_path, token_memo):
    from elmo.inference.vocab_cache import save_vocab_cache

    torch.manual_seed(10)
    model = BiLM(make_config()).eval()
    save_vocab_cache(model, ["cat"], tmp_path / "vocab.npz")
    runtime = Runtime(model, state="reset", token_memo=token_memo, vocab_cache=tmp_path / "vocab.npz")
    words = ["the", "cat", "sat", "the"]
    proj = model.config.lstm.projection_dim
    vectors = runtime.token_vectors(words)
    assert vectors.shape == (4, proj)
    assert torch.equal(vectors, runtime.run_batch([words]).layers[0, 0, :, :proj])

@pytest.mark.parametrize("lengths", LONG_LENGTHS)
def test_runtime_equals_plain_bilm_on_sentences_longer_than_one_chunk(lengths, product_kernel):
    """The whole inference path (both directions, two layers, skip connections, sorting and
    restoring the rows) on 300-token sentences mixed with short and empty ones."""
    torch.manual_seed(9)
    config = make_config(n_layers=2)
    fast, plain = BiLM(config, fast=True).eval(), BiLM(config, fast=False).eval()
    plain.load_state_dict(fast.state_dict())
    words = ["the", "cat", "sat", "on", "a", "mat", "Paris", "1984", "."]
    sentences = [[words[(i * 7 + row) % len(words)] for i in range(n)] for row, n in enumerate(lengths)]
    ids, mask = batch_to_char_ids(sentences)
    with torch.no_grad():
        a, b = Runtime(fast)(ids, mask), plain(ids, mask)
    torch.testing.assert_close(a.layers, b.layers, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.state.c, b.state.c, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.state.h, b.state.h, rtol=0, atol=1e-5)


def test_long_sentence_gives_the_same_bits_alone_and_in_a_batch(product_kernel):
    """The row blocks' promise (elmo.kernels.blocks): a sentence's outputs do not depend on its
    batch, to the bit, whether it runs alone (one padded block) or among others (in any block,
    at any position), in every chunk."""
    torch.manual_seed(11)
    layers = [LstmLayer(16, 32, 8, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    lengths = torch.tensor(LONG_LENGTHS[2])
    time = int(lengths.max())
    mask = torch.arange(time).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, len(lengths), time, 16) * mask[None, :, :, None]
    c, h = torch.randn(2, len(lengths), 32), torch.randn(2, len(lengths), 8)
    out, _, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h)
    for row, n in enumerate(lengths.tolist()):
        alone, _, alone_h = bilstm_inference(layers[0], layers[1], inputs[:, row:row + 1, :max(n, 1)],
                                             lengths[row:row + 1], c[:, row:row + 1], h[:, row:row + 1])
        assert torch.equal(alone[:, 0, :n], out[:, row, :n]) and torch.equal(alone_h[:, 0], final_h[:, row]), row
