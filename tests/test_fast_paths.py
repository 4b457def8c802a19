"""Every fast path against the plain, readable implementation (the specification)."""

import pytest
import torch

from elmo import BiLM, batch_to_char_ids
from elmo.inference.runtime import Runtime
from elmo.model.config import BiLMConfig
from elmo.model.encoder import encode_distinct
from elmo.model.lstm import LstmLayer, lstm_fast, lstm_plain

SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], [], ["the", "the", "THE", "cat"], ["x" * 70]]


def make_config(n_layers=2, skip=True, activation="relu", filters=((1, 4), (2, 8), (3, 8)), n_highway=1):
    return BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 12, "n_layers": n_layers, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [list(f) for f in filters], "n_highway": n_highway,
                     "activation": activation, "n_characters": 262, "max_characters_per_token": 50}})


@pytest.mark.parametrize("clip", [None, 0.5])
def test_lstm_fast_matches_plain(clip):
    layer = LstmLayer(6, 10, 5, cell_clip=clip, proj_clip=clip)
    inputs = torch.randn(3, 7, 6)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [False] * 7])
    state = (torch.randn(3, 10), torch.randn(3, 5))
    plain_out, plain_state = lstm_plain(layer, inputs, mask, state)
    fast_out, fast_state = lstm_fast(layer, inputs, mask, state)
    torch.testing.assert_close(fast_out, plain_out, rtol=0, atol=1e-5)
    for a, b in zip(fast_state, plain_state):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(n_layers=1), dict(n_layers=3, skip=False), dict(activation="tanh"),
                                    dict(filters=((2, 3), (7, 5)), n_highway=2)])
def test_bilm_fast_matches_plain(kwargs):
    config = make_config(**kwargs)
    fast = BiLM(config, fast=True).eval()
    plain = BiLM(config, fast=False).eval()
    plain.load_state_dict(fast.state_dict())
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.no_grad():
        a, b = Runtime(fast)(ids, mask), plain(ids, mask)
    torch.testing.assert_close(a.layers, b.layers, rtol=0, atol=1e-5)
    torch.testing.assert_close(a.state.c, b.state.c, rtol=0, atol=1e-5)


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


# ------------------------------------------------------------------ Embedder: fast vs plain
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from conftest import load_fixture_model  # noqa: E402

from elmo import Embedder  # noqa: E402
from elmo.inference.vocab_cache import load_vocab_cache, save_vocab_cache  # noqa: E402
from elmo.model.encoder import encode_fast, encode_words_fast  # noqa: E402

TEXT = [s.split() for s in [
    "The committee will meet again next week to discuss the proposal .",
    "It rained .", "", "東京 は 日本 の 首都 です 🍕",
    "a " * 60, "prices rose by 3 percent in the first quarter , according to the report .",
    "x" * 80 + " é" * 5, "The the THE the",
]]


def twin_embedders(config, **kwargs):
    fast_model = BiLM(config, fast=True).eval()
    plain_model = BiLM(config, fast=False).eval()
    plain_model.load_state_dict(fast_model.state_dict())
    return Embedder(fast_model, **kwargs), Embedder(plain_model, **kwargs)


@pytest.mark.parametrize("state", ["warm", "reset", "stateful"])
@pytest.mark.parametrize("kwargs", [dict(n_layers=1), dict(n_layers=2), dict(n_layers=3, skip=False),
                                    dict(activation="tanh", filters=((1, 3), (4, 6), (6, 5)), n_highway=2)])
def test_embedder_fast_equals_plain_in_every_state_mode(state, kwargs):
    torch.manual_seed(1)
    fast, plain = twin_embedders(make_config(**kwargs), state=state)
    for _ in range(2):  # the second round checks carried state (stateful) and the memo
        a = fast.embed_sentences(TEXT, batch_size=3)
        b = plain.embed_sentences(TEXT, batch_size=3)
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def test_fixture_model_fast_equals_plain_on_awkward_text():
    fast = Embedder(load_fixture_model("allennlp"))
    plain_model = load_fixture_model("allennlp")
    plain_model.fast = False
    plain = Embedder(plain_model)
    for x, y in zip(fast.embed_sentences(TEXT), plain.embed_sentences(TEXT)):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


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


def test_vocab_cache_round_trip_and_fallback(tmp_path):
    torch.manual_seed(4)
    model = BiLM(make_config()).eval()
    path = tmp_path / "cache.hdf5"
    assert save_vocab_cache(model, ["the", "cat", "the", "", "sat"], path) == 3
    cache = load_vocab_cache(path, model)
    assert list(cache) == ["the", "cat", "sat"]
    cached = Embedder(model, vocab_cache=path, token_memo=0).embed_sentences(["the cat sat on the unseenword"])[0]
    plain = Embedder(model, token_memo=0).embed_sentences(["the cat sat on the unseenword"])[0]
    np.testing.assert_allclose(cached, plain, atol=1e-5, rtol=0)
    other = BiLM(make_config()).eval()
    with pytest.raises(ValueError, match="different model"):
        load_vocab_cache(path, other)


def test_bfloat16_stays_close_to_float32(bfloat16_selected):
    model = load_fixture_model("allennlp")
    reference = Embedder(model).embed_sentences(TEXT)
    low = Embedder(model, precision="bfloat16").embed_sentences(TEXT)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(low, reference) if a.size)
    scale = max(float(np.abs(b).max()) for b in reference if b.size)
    assert 0 < worst < 0.05 * scale
    with pytest.raises(ValueError, match="precision"):
        Embedder(model, precision="int8")


def test_token_budget_batches_keep_input_order():
    embedder = Embedder(load_fixture_model("allennlp"), max_tokens=20)
    sentences = [["w"] * n for n in (3, 9, 1, 7, 0, 5)]
    batches = list(embedder._batches(sentences, batch_size=4))
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * (len(sentences[b[0]]) + 2) <= 20 or len(b) == 1 for b in batches)
    arrays = embedder.embed_sentences(sentences, layers="top")
    assert [a.shape[0] for a in arrays] == [3, 9, 1, 7, 0, 5]


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


# ------------------------------------------- full windows (training) and long sentences (inference)
from elmo.model import lstm as lstm_module  # noqa: E402
from elmo.model.lstm import GATE_CHUNK_STEPS, MIN_ACTIVE_ROWS, bilstm_inference  # noqa: E402


def values_and_gradients(run, layer, inputs, mask, state):
    """``run``'s outputs and final ``(c, h)``, and the gradients of a fixed random function of all
    three with respect to the inputs, the initial state and every parameter of ``layer``."""
    inputs, state = inputs.clone().requires_grad_(True), tuple(s.clone().requires_grad_(True) for s in state)
    out, (c, h) = run(layer, inputs, mask, state)
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(t.shape, generator=generator) for t in (out, c, h)]
    total = sum((t * w).sum() for t, w in zip((out, c, h), weights))
    grads = torch.autograd.grad(total, [inputs, *state, *layer.parameters()])
    return [out.detach(), c.detach(), h.detach()], list(grads)


@pytest.mark.parametrize("clip", [None, 0.5])
def test_lstm_fast_full_window_matches_plain_values_and_gradients(clip):
    """The branch LM training always takes: every timestep real, so no masking at all."""
    torch.manual_seed(6)
    layer = LstmLayer(6, 10, 5, cell_clip=clip, proj_clip=clip)
    with torch.no_grad():
        layer.bias.normal_()
    inputs = torch.randn(3, 9, 6)
    mask = torch.ones(3, 9, dtype=torch.bool)
    state = (torch.randn(3, 10), torch.randn(3, 5))
    plain_values, plain_grads = values_and_gradients(lstm_plain, layer, inputs, mask, state)
    fast_values, fast_grads = values_and_gradients(lstm_fast, layer, inputs, mask, state)
    for a, b in zip(fast_values, plain_values):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(fast_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert all(g.abs().sum() > 0 for g in plain_grads)  # every gradient carries something to compare


def test_bilm_training_stack_fast_equals_plain_on_full_windows():
    """BiLM.run_stack, as the LM's training step calls it (full windows, carried state), with the
    fast and the plain LSTM: same outputs, same final states, same parameter gradients."""
    torch.manual_seed(7)
    config = make_config(n_layers=2, skip=True)
    fast, plain = BiLM(config, fast=True).train(), BiLM(config, fast=False).train()
    plain.load_state_dict(fast.state_dict())
    tokens = torch.randn(3, 11, 12)
    mask = torch.ones(3, 11, dtype=torch.bool)
    state = fast.zero_state(3)
    state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
    for direction in (0, 1):
        results = []
        for model in (fast, plain):
            outputs, finals = model.run_stack(direction, tokens, mask, state)
            total = sum((o * (i + 1)).sum() for i, o in enumerate(outputs)) + sum(h.sum() for _, h in finals)
            layers = model.forward_layers if direction == 0 else model.backward_layers
            results.append((outputs, finals, torch.autograd.grad(total, list(layers.parameters()))))
        (fast_out, fast_finals, fast_grads), (plain_out, plain_finals, plain_grads) = results
        for a, b in zip(fast_out, plain_out):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        for (c_a, h_a), (c_b, h_b) in zip(fast_finals, plain_finals):
            torch.testing.assert_close(c_a, c_b, rtol=0, atol=1e-5)
            torch.testing.assert_close(h_a, h_b, rtol=0, atol=1e-5)
        for a, b in zip(fast_grads, plain_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture(params=["bmm", "onednn"])
def recurrent_kernel(request, monkeypatch):
    """Runs a test with each kernel of the recurrent product: MKL's batched product (the small
    sizes) and oneDNN (float32 weights of at least ONEDNN_MIN_RECURRENT_WEIGHT elements, here
    forced down to every size)."""
    if request.param == "onednn":
        if not torch.backends.mkldnn.is_available():
            pytest.skip("this PyTorch has no oneDNN")
        monkeypatch.setattr(lstm_module, "ONEDNN_MIN_RECURRENT_WEIGHT", 0)
    else:
        monkeypatch.setattr(lstm_module, "ONEDNN_MIN_RECURRENT_WEIGHT", float("inf"))
    return request.param


def test_recurrent_kernel_choice_by_size():
    """The published original size (512 x 16384 state weight) takes oneDNN in float32; the small
    size, any reduced precision and any GPU keep the batched product."""
    original = LstmLayer(512, 4096, 512, cell_clip=3.0, proj_clip=3.0)
    small = LstmLayer(128, 1024, 128, cell_clip=3.0, proj_clip=3.0)
    assert lstm_module.use_onednn_recurrent(original, torch.float32) == torch.backends.mkldnn.is_available()
    assert not lstm_module.use_onednn_recurrent(original, torch.bfloat16)
    assert not lstm_module.use_onednn_recurrent(small, torch.float32)
    weights = lstm_module.stack_directions(original, original, torch.float32)
    assert (weights.state_onednn is not None) == torch.backends.mkldnn.is_available()


# Lengths around and past the input-gate chunk (128 steps): a batch smaller than MIN_ACTIVE_ROWS
# (padded with empty rows) and one larger, with rows that end inside each chunk and on its edges.
LONG_LENGTHS = [[300, 17], [300, 300, 257, 129, 128, 40, 1, 0]]


@pytest.mark.parametrize("lengths", LONG_LENGTHS)
def test_bilstm_inference_matches_plain_past_one_chunk(lengths, recurrent_kernel):
    assert max(lengths) > 2 * GATE_CHUNK_STEPS  # the gates come in three chunks
    assert min(map(len, LONG_LENGTHS)) < MIN_ACTIVE_ROWS < max(map(len, LONG_LENGTHS))
    torch.manual_seed(8)
    layers = [LstmLayer(6, 10, 5, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    batch, time = len(lengths), max(lengths)
    lengths_tensor = torch.tensor(lengths)
    mask = torch.arange(time).unsqueeze(0) < lengths_tensor.unsqueeze(1)
    inputs = torch.randn(2, batch, time, 6) * mask[None, :, :, None]  # each direction's reading order
    c, h = torch.randn(2, batch, 10), torch.randn(2, batch, 5)
    with torch.no_grad():
        expected = [lstm_plain(layers[d], inputs[d], mask, (c[d], h[d])) for d in (0, 1)]
    out, final_c, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths_tensor, c, h)
    for d in (0, 1):
        torch.testing.assert_close(out[d], expected[d][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(final_c[d], expected[d][1][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(final_h[d], expected[d][1][1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("lengths", LONG_LENGTHS)
def test_runtime_equals_plain_bilm_on_sentences_longer_than_one_chunk(lengths, recurrent_kernel):
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


def test_long_sentence_gives_the_same_bits_alone_and_in_a_batch(recurrent_kernel):
    """MIN_ACTIVE_ROWS's promise: a sentence's outputs do not depend on its batch, to the bit,
    whether it runs alone (padded up to MIN_ACTIVE_ROWS rows) or among others, in every chunk."""
    torch.manual_seed(11)
    layers = [LstmLayer(16, 32, 8, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    lengths = torch.tensor(LONG_LENGTHS[1])
    time = int(lengths.max())
    mask = torch.arange(time).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, len(lengths), time, 16) * mask[None, :, :, None]
    c, h = torch.randn(2, len(lengths), 32), torch.randn(2, len(lengths), 8)
    out, _, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h)
    for row, n in enumerate(lengths.tolist()):
        alone, _, alone_h = bilstm_inference(layers[0], layers[1], inputs[:, row:row + 1, :max(n, 1)],
                                             lengths[row:row + 1], c[:, row:row + 1], h[:, row:row + 1])
        assert torch.equal(alone[:, 0, :n], out[:, row, :n]) and torch.equal(alone_h[:, 0], final_h[:, row]), row


def test_gate_chunking_matches_plain_at_any_chunk_size(monkeypatch, recurrent_kernel):
    """Chunks of 7 steps on short sentences: every chunk edge (and rows ending on one) is crossed."""
    torch.manual_seed(10)
    monkeypatch.setattr(lstm_module, "GATE_CHUNK_STEPS", 7)
    layers = [LstmLayer(4, 6, 3, cell_clip=None, proj_clip=None) for _ in range(2)]
    lengths = torch.tensor([23, 21, 14, 7, 6, 2])
    time = int(lengths.max())
    mask = torch.arange(time).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, len(lengths), time, 4) * mask[None, :, :, None]
    c, h = torch.zeros(2, len(lengths), 6), torch.zeros(2, len(lengths), 3)
    with torch.no_grad():
        expected = [lstm_plain(layers[d], inputs[d], mask) for d in (0, 1)]
    out, final_c, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h)
    for d in (0, 1):
        torch.testing.assert_close(out[d], expected[d][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(final_h[d], expected[d][1][1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_cpu_dropout_is_the_definition_of_dropout(p):
    """elmo.dropout draws its mask from uniform numbers instead of bernoulli_: the result must be
    exactly ``x * [u >= p] / (1 - p)`` for the draws ``u`` of the same generator state, keep
    about ``1 - p`` of the elements, and pass gradients through the kept ones only."""
    from elmo.model.dropout import Dropout, dropout

    x = torch.randn(64, 50, 40, requires_grad=True)
    torch.manual_seed(7)
    expected = x.detach() * (torch.rand_like(x) >= p).float() / (1 - p)
    torch.manual_seed(7)
    out = dropout(x, p, training=True)
    assert torch.allclose(out, expected, rtol=1e-6, atol=0)
    kept = out.detach() != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # 128,000 draws: 4 standard deviations
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() / (1 - p), rtol=1e-6, atol=0)

    module = Dropout(p)
    assert isinstance(module, torch.nn.Dropout)
    module.eval()
    assert module(x) is x  # evaluation and p = 0 leave the input as it is
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


def test_cpu_dropout_keeps_the_distribution_of_torch_dropout():
    """Over many draws, elmo.model.dropout and torch's dropout agree in keep rate and mean output."""
    from elmo.model.dropout import dropout

    x = torch.full((400_000,), 2.0)
    ours = dropout(x, 0.3, training=True)
    theirs = torch.nn.functional.dropout(x, 0.3, training=True)
    assert abs((ours != 0).float().mean() - (theirs != 0).float().mean()) < 0.005
    assert abs(ours.mean().item() - 2.0) < 0.02 and abs(theirs.mean().item() - 2.0) < 0.02


def test_dropout_rejects_a_probability_out_of_range():
    from elmo.model.dropout import dropout

    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(torch.ones(3), 1.5, training=True)


def test_task_models_use_the_fast_dropout():
    """Every dropout of the task models, the scalar mix and the AllenNLP-style Elmo module is
    elmo.dropout's (torch's own on the CPU was a tenth of a task's training step)."""
    import inspect

    from elmo import allennlp
    from elmo.model import scalar_mix
    from elmo.model.dropout import Dropout
    from elmo.tasks import classification, coref, entailment, qa, srl, tagging

    for module in (allennlp, scalar_mix, classification, coref, entailment, qa, srl, tagging):
        source = inspect.getsource(module)
        assert "nn.Dropout(" not in source and "functional.dropout(" not in source, module.__name__
        assert "Dropout(" in source, module.__name__
    assert type(scalar_mix.ScalarMix(3, dropout=0.5).dropout) is Dropout
