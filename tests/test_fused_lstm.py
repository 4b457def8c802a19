"""The training paths of the LSTM (issue 37) against the specification and against the path they
replace (the pre-#37 fast path of commit 167ab73), values and every gradient.

What the pre-#37 path produced is recorded in ``tests/fixtures/legacy/training.npz`` and
``training.json`` (made by ``tests/fixtures/legacy/make_fixtures.py``, see
``tests/fixtures/README.md``): floats recorded on one CPU, so they are compared with tolerances,
never bit for bit."""

import copy
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_gradients_close
from op_counting import WindowCounter, count_window

from elmo import BiLM, BiLMState, batch_to_char_ids
from elmo.kernels import blocks
from elmo.kernels.dispatch import bilm_forward, dropout_masks
from elmo.kernels.encoder import distinct_words, encode_distinct
import elmo.kernels.fused_lstm as fused_module
from elmo.kernels.fused_lstm import lstm_fused
from elmo.model.config import BiLMConfig
from elmo.model.network import DEFAULT_LSTM_PATH, LSTM_PATHS, LstmLayer, lstm_plain
from elmo.lm.model import LanguageModel

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy"


@lru_cache(maxsize=None)
def _recordings():
    with open(LEGACY / "training.json", encoding="utf-8") as f:
        meta = json.load(f)
    with np.load(LEGACY / "training.npz") as arrays:
        return meta, {name: torch.from_numpy(arrays[name]) for name in arrays.files}


def recorded(prefix):
    """The pre-#37 path's tensors recorded under ``prefix/``, by name (float32)."""
    _, arrays = _recordings()
    found = {name[len(prefix) + 1:]: tensor for name, tensor in arrays.items() if name.startswith(prefix + "/")}
    assert found, f"nothing recorded under {prefix}/ in {LEGACY / 'training.npz'}"
    return found


def recorded_numbers(key):
    """Numbers the recording script measured on the pre-#37 path (errors, kernel counts)."""
    return _recordings()[0][key]


def make_config(clip=3.0, n_layers=2, skip=True):
    return BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 12, "n_layers": n_layers, "cell_clip": clip, "proj_clip": clip,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8], [3, 8]], "n_highway": 1,
                     "activation": "relu", "n_characters": 262, "max_characters_per_token": 50}})


def random_layers(n, input_dim, dim, proj, clip, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    layers = [LstmLayer(input_dim, dim, proj, clip, clip).to(dtype) for _ in range(n)]
    with torch.no_grad():
        for layer in layers:
            layer.bias.uniform_(-1.0, 1.0)  # the specification's zero init would leave the bias untested
    return layers


# ------------------------------------------------------------------ 1. the exact cheap fixes


def fast_path_case(clip, full):
    """The layer, inputs, mask, initial state and output weights of the fast-path comparison."""
    layer = random_layers(1, 6, 10, 5, clip)[0]
    inputs = torch.randn(3, 9, 6, requires_grad=True)
    mask = torch.ones(3, 9, dtype=torch.bool)
    if not full:
        mask[1, 5:] = False
    state = (torch.randn(3, 10), torch.randn(3, 5))
    weight = torch.randn(3, 9, 5)
    return layer, inputs, mask, state, weight


def fast_path_results(run, layer, inputs, weight):
    """``run()``'s outputs ``[out, c, h]`` and the gradients of inputs and every layer weight."""
    out, (c, h) = run()
    loss = (out * weight).sum() + c.sum() + h.sum()
    return [out, c, h], list(torch.autograd.grad(loss, [inputs, *layer.parameters()]))


FAST_PATH_NAMES = ["out", "c", "h", "grad_inputs", "grad_input_weight", "grad_state_weight", "grad_bias",
                   "grad_projection"]


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("full", [True, False])
def test_the_specification_equals_the_pre_37_fast_path(clip, full):
    """One layer through the specification gives the pre-#37 fast path's values and gradients,
    recorded (that path is retired; across CPUs the products may round differently, so 1e-5)."""
    layer, inputs, mask, state, weight = fast_path_case(clip, full)
    assert [name for name, _ in layer.named_parameters()] == ["input_weight", "state_weight", "bias", "projection"]
    values, grads = fast_path_results(lambda: lstm_plain(layer, inputs, mask, state), layer, inputs, weight)
    expected = recorded(f"fast/clip={clip}/full={full}")
    assert sorted(expected) == sorted(FAST_PATH_NAMES)
    for name, tensor in zip(FAST_PATH_NAMES, values + grads):
        torch.testing.assert_close(tensor, expected[name], rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_dropout_masks_are_the_ones_functional_dropout_draws():
    """The fused path draws its masks up front; they must be those the per-direction path's
    F.dropout calls draw, one after the other, from the same generator state."""
    x = torch.ones(3, 5, 7)
    torch.manual_seed(4)
    expected = [torch.nn.functional.dropout(x, 0.3, True) for _ in range(4)]
    torch.manual_seed(4)
    masks = dropout_masks(0.3, 4, x.shape, x)
    for a, b in zip(masks, expected):
        assert torch.equal(a, b)


def tiny_batches(batch=4, unroll=6, vocab=50, seed=0, full=True):
    generator = torch.Generator().manual_seed(seed)

    def one():
        ids = torch.randint(1, 262, (batch, unroll, 50), generator=generator)
        ids[..., 6:] = 261  # in-word padding after six slots, as real words have
        mask = torch.ones(batch, unroll, dtype=torch.bool)
        if not full:
            mask[1, 3:] = False
        return {"char_ids": ids, "targets": torch.randint(0, vocab, (batch, unroll), generator=generator), "mask": mask}

    return one(), one()


def language_model_case(full):
    """The model, batches and carried state of the training-window comparison."""
    torch.manual_seed(0)
    base = LanguageModel(make_config(clip=0.5), 50).train()
    forward_batch, backward_batch = tiny_batches(full=full)
    state = BiLMState(torch.randn(2, 2, 4, 24), torch.randn(2, 2, 4, 12))
    return base, forward_batch, backward_batch, state


def language_model_results(model, step):
    """``step()``'s ``(nll_f, nll_b, state)`` after seeding as the comparison does (dropout from
    the global generator, seed 5; negatives from a generator of seed 3), and the gradients of
    their mean losses by parameter name."""
    torch.manual_seed(5)
    nll_f, nll_b, new_state = step(torch.Generator().manual_seed(3))
    loss = nll_f.mean() + nll_b.mean()
    names = [name for name, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return {"nll_f": nll_f, "nll_b": nll_b, "c": new_state.c, "h": new_state.h}, dict(zip(names, grads))


@pytest.mark.parametrize("path", ["plain", "fused"])
@pytest.mark.parametrize("full", [True, False])
def test_language_model_paths_equal_the_pre_37_step(path, full):
    """A whole training window (dropout, sampled softmax, carried state) of every path against
    167ab73's LanguageModel.forward (recorded): the same random numbers, the same losses and
    gradients."""
    base, forward_batch, backward_batch, state = language_model_case(full)
    model = copy.deepcopy(base)
    model.bilm.lstm_path = path
    words = distinct_words(torch.stack([forward_batch["char_ids"], backward_batch["char_ids"]]))
    values, grads = language_model_results(model, lambda generator: model(
        forward_batch, backward_batch, state, dropout=0.3, n_samples=10, generator=generator, full=full, words=words))
    expected = recorded(f"lm/full={full}")
    for name, tensor in values.items():
        torch.testing.assert_close(tensor, expected[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    assert sorted(f"grad/{name}" for name in grads) == sorted(k for k in expected if k.startswith("grad/"))
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[f"grad/{name}"], rtol=1e-4, atol=1e-6,
                                   msg=lambda m, n=name: f"grad of {n}: {m}")
    # every LSTM and encoder weight is compared (the softmax's sampled rows alone may be zero)
    assert all(g.abs().sum() > 0 for name, g in grads.items() if not name.startswith("softmax"))


def test_full_window_loss_is_a_reshape_of_the_masked_one():
    torch.manual_seed(2)
    model = LanguageModel(make_config(), 50).eval()
    forward_batch, backward_batch = tiny_batches(seed=3)
    state = model.bilm.zero_state(4)
    with torch.no_grad():
        known = model(forward_batch, backward_batch, state, full=True)
        asked = model(forward_batch, backward_batch, state)
    for a, b in zip(known[:2], asked[:2]):
        assert torch.equal(a, b)


SYNCING_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive",
               "is_nonzero", "item"}


@pytest.mark.parametrize("path", ["plain", "fused"])
def test_training_step_asks_the_device_nothing(path):
    """Forward, backward and gradient clipping of a window whose fullness and distinct words come
    from the host: no operation that makes the host wait for the device (a scalar read, a boolean
    index, a unique). On a GPU each of these stalls the launch queue. (Adagrad's step, after it,
    reads its step counters, which live on the host.)"""
    torch.manual_seed(3)
    model = LanguageModel(make_config(), 50, lstm_path=path).train()
    forward_batch, backward_batch = tiny_batches(seed=4)
    words = distinct_words(torch.stack([forward_batch["char_ids"], backward_batch["char_ids"]]))
    counter = WindowCounter()
    with counter:
        nll_f, nll_b, _ = model(forward_batch, backward_batch, model.bilm.zero_state(4), dropout=0.1, full=True,
                                words=words)
        (0.5 * (nll_f.mean() + nll_b.mean())).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    assert not SYNCING_OPS & set(counter.by_name), {k: counter.by_name[k] for k in SYNCING_OPS & set(counter.by_name)}
    assert counter.kernels > 100  # the counter saw the step


# ------------------------------------------------------------- 2. the fused autograd Function


def spec_and_fused(clip, lengths, dtype=torch.float64, use_finals=True, seed=0):
    """Two directions through lstm_plain (the specification) one at a time and through
    lstm_fused at once: the values and the gradients of inputs, initial state and every weight."""
    layers = random_layers(2, 6, 10, 5, clip, dtype, seed)
    batch, time = lengths.shape[1], 7
    torch.manual_seed(seed + 1)
    inputs = torch.randn(2, batch, time, 6, dtype=dtype, requires_grad=True)
    c0 = torch.randn(2, batch, 10, dtype=dtype, requires_grad=True)
    h0 = torch.randn(2, batch, 5, dtype=dtype, requires_grad=True)
    mask = torch.arange(time).view(1, 1, time) < lengths.unsqueeze(-1)
    weights = (torch.randn(2, batch, time, 5, dtype=dtype), torch.randn(2, batch, 10, dtype=dtype),
               torch.randn(2, batch, 5, dtype=dtype))
    wrt = [inputs, c0, h0] + [p for layer in layers for p in layer.parameters()]

    def loss(out, c, h):
        value = (out * weights[0]).sum()
        return value + (c * weights[1]).sum() + (h * weights[2]).sum() if use_finals else value

    spec = [lstm_plain(layers[d], inputs[d], mask[d], (c0[d], h0[d])) for d in range(2)]
    spec_out = torch.stack([o for o, _ in spec])
    spec_c, spec_h = torch.stack([s[0] for _, s in spec]), torch.stack([s[1] for _, s in spec])
    spec_grads = torch.autograd.grad(loss(spec_out, spec_c, spec_h), wrt)
    full = bool((lengths == time).all())
    out, (c, h) = lstm_fused(layers, inputs.transpose(1, 2), (c0, h0), None if full else lengths)
    out = out.transpose(1, 2)
    grads = torch.autograd.grad(loss(out, c, h), wrt)
    return (spec_out, spec_c, spec_h), spec_grads, (out, c, h), grads


LENGTHS = {"full": torch.tensor([[7, 7, 7], [7, 7, 7]]), "padded": torch.tensor([[7, 4, 0], [2, 7, 5]])}


@pytest.mark.parametrize("clip", [None, 0.2])
@pytest.mark.parametrize("lengths", ["full", "padded"])
@pytest.mark.parametrize("use_finals", [True, False])
def test_fused_window_equals_the_specification_in_float64(clip, lengths, use_finals):
    spec_values, spec_grads, values, grads = spec_and_fused(clip, LENGTHS[lengths], use_finals=use_finals)
    for a, b in zip(values, spec_values):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(grads, spec_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if clip is not None:  # the clips bit: some cells and some projections were cut
        out, c, _ = spec_values
        assert (out.abs() == clip).any()
        assert (c.abs() == clip).any()


def bf16_window_case():
    """Layers, inputs, mask, output weights of the bf16 comparison (float32 tensors)."""
    layers = random_layers(2, 32, 48, 32, 3.0, seed=4)
    inputs = torch.randn(2, 8, 20, 32, requires_grad=True)
    mask = torch.ones(8, 20, dtype=torch.bool)
    weight = torch.randn(2, 8, 20, 32)
    return layers, inputs, mask, weight


def bf16_window_grads(run, bf16, layers, inputs, weight):
    """``run()`` (under CPU bf16 autocast when ``bf16``) as float32, and the gradients of inputs
    and every weight."""
    params = [p for layer in layers for p in layer.parameters()]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = run()
    return out.float(), torch.autograd.grad((out.float() * weight).sum(), [inputs, *params])


def test_fused_window_under_bfloat16_autocast_stays_close():
    """bf16 products, float32 cell: within what bf16 allows of the float32 specification, and
    with the gradients a bf16 path has (the pre-#37 path under autocast for scale: its distances
    from the specification were recorded for these inputs)."""
    layers, inputs, mask, weight = bf16_window_case()
    spec = lambda: torch.stack([lstm_plain(layers[d], inputs[d], mask)[0] for d in range(2)])  # noqa: E731
    fused = lambda: lstm_fused(layers, inputs.transpose(1, 2))[0].transpose(1, 2)  # noqa: E731
    ref_out, ref_grads = bf16_window_grads(spec, False, layers, inputs, weight)
    new_out, new_grads = bf16_window_grads(fused, True, layers, inputs, weight)
    legacy = recorded_numbers("bf16_window")
    assert len(legacy["grad_error_norms"]) == len(new_grads)
    assert (new_out - ref_out).abs().max() < 0.05
    assert (new_out - ref_out).abs().max() <= 1.5 * legacy["output_max_abs_error"]
    for new, old_error, ref in zip(new_grads, legacy["grad_error_norms"], ref_grads):
        assert (new - ref).norm() <= 1.5 * old_error + 1e-6
        assert (new - ref).norm() < 0.05 * ref.norm()


def test_fused_window_in_float32_matches_the_specification(product_kernel):
    spec_values, spec_grads, values, grads = spec_and_fused(3.0, LENGTHS["padded"], dtype=torch.float32)
    for a, b in zip(values, spec_values):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(grads, spec_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(), dict(n_layers=3, skip=False), dict(clip=None)])
def test_bilm_forward_fused_equals_plain_with_gradients(kwargs, product_kernel):
    """bilm_forward (padding, both directions, every layer, the state) on the fused path against the
    plain one, with the gradients of every parameter."""
    torch.manual_seed(6)
    fused = BiLM(make_config(**kwargs)).train()
    plain = BiLM(make_config(**kwargs), fast=False).train()
    plain.load_state_dict(fused.state_dict())
    assert fused.lstm_path == "fused"
    ids, mask = batch_to_char_ids([["The", "cat", "sat", "."], [], ["a", "b"], ["one"] * 9])
    results = []
    for model in (fused, plain):
        output = bilm_forward(model, ids, mask)
        loss = (output.layers * torch.linspace(-1, 1, output.layers.shape[-1])).sum() + output.state.c.sum()
        results.append((output.layers, output.state.c, output.state.h, torch.autograd.grad(loss, list(model.parameters()))))
    for a, b in zip(results[0][:3], results[1][:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(results[0][3], results[1][3]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------- the path selection


def test_path_selection():
    config = make_config()
    assert LSTM_PATHS == ("plain", "fused")
    assert BiLM(config).lstm_path == DEFAULT_LSTM_PATH == "fused"
    assert BiLM(config, fast=False).lstm_path == "plain"
    assert BiLM(config, lstm_path="fused").fast
    with pytest.raises(ValueError, match="expected one of plain, fused, got 'fast'"):
        BiLM(config, lstm_path="fast")  # the retired per-direction path
    model = BiLM(config)
    model.fast = False
    assert model.lstm_path == "plain" and not model.fast
    model.fast = True
    assert model.lstm_path == DEFAULT_LSTM_PATH
    assert LanguageModel(config, 10, lstm_path="plain").bilm.lstm_path == "plain"
    with pytest.raises(ValueError, match="lstm_path"):
        BiLM(config, lstm_path="quick")
    with pytest.raises(ValueError, match="contradicts"):
        BiLM(config, fast=False, lstm_path="fused")
    with pytest.raises(ValueError, match="expected one of plain, fused, got 'cudnn'"):
        BiLM(config, lstm_path="cudnn")  # torch's own LSTM kernel: no measured row where it won
    with pytest.raises(ValueError, match="fused"):
        LanguageModel(config, 10, lstm_path="plain").use_cuda_graphs()


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_encoder_on_host_words_equals_the_encoder(fixed_shapes):
    """encode_distinct with the words grouped by length on the host (what the trainer passes)
    against the plain encoder over all 50 slots, values and gradients; ``fixed_shapes`` (what a GPU
    runs) pads each group's words to a ladder size and its span to the bucket's bound."""
    torch.manual_seed(7)
    model = BiLM(make_config())
    with torch.no_grad():
        for conv in model.token_encoder.convs:
            conv.bias.uniform_(-0.5, 0.5)
    sentences = [["The", "cat", "x" * 60, "antidisestablishmentarianism", "é" * 30], ["a", "<S>", "", "b" * 46]]
    ids, _ = batch_to_char_ids(sentences)
    ids = torch.stack([ids, ids.flip(1)])  # two "directions", as the language model stacks them
    words = distinct_words(ids)
    assert len(words.groups) >= 3 and words.groups[-1][0] == len(words.distinct)
    plain = model.token_encoder(ids.view(-1, *ids.shape[2:])).view(*ids.shape[:3], -1)
    grouped = encode_distinct(model.token_encoder, ids, words, fixed_shapes=fixed_shapes)
    torch.testing.assert_close(grouped, plain, rtol=0, atol=1e-5)
    assert_gradients_close(grouped, plain, list(model.token_encoder.parameters()), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------- the op-count ceiling


@pytest.mark.parametrize("bf16", [False, True])
def test_training_window_op_counts_stay_down(bf16, monkeypatch):
    """One window (2 layers x 2 directions x 20 steps, forward and backward) of the fused path
    against the pre-#37 one, counted at the dispatcher. With the pointwise functions as the one
    kernel each that torch.compile makes of them on a GPU, at least 10x fewer kernels; as they run
    eagerly on a CPU, at least 2x fewer. The pre-#37 counts are recorded (float32 3766, bf16 4512,
    under PyTorch 2.13); ceilings from the counts measured when this was written (float32: 1789
    eager, 363 compiled; bf16: 1863, 395), with a little room. Counted with the step products
    batched over the directions, as on a GPU: a CPU's float32 window runs them as oneDNN's kernel
    once per direction instead (more kernels, less time; docs/training.md)."""
    monkeypatch.setattr(blocks, "ONEDNN", False)
    legacy = recorded_numbers("window_kernels")["bf16" if bf16 else "float32"]
    eager = count_window("fused", bf16)
    units = count_window("fused", bf16, units=True)
    assert units.kernels * 10 <= legacy, (units.kernels, legacy, units.by_name)
    assert units.kernels <= (400 if bf16 else 370), units.by_name
    assert eager.kernels * 2 <= legacy, (eager.kernels, legacy)
    assert eager.kernels <= (1900 if bf16 else 1830), eager.by_name
    per_step = {"baddbmm", "bmm", "cell_forward", "cell_backward"}
    assert all(units.by_name[name] >= 38 for name in per_step)  # the units really ran as units


@pytest.mark.slow
def test_compiled_cells_equal_the_eager_ones():
    """The pointwise functions through torch.compile (C++ on this CPU; Triton on a GPU, where
    tests/test_cuda.py checks them again): the same window, values and gradients."""
    layers = random_layers(2, 6, 10, 5, 0.5, seed=8)
    inputs = torch.randn(2, 7, 3, 6, requires_grad=True)
    lengths = torch.tensor([[7, 4, 0], [2, 7, 5]])
    params = [p for layer in layers for p in layer.parameters()]
    results = []
    for compiled in (False, True):
        out, (c, h) = lstm_fused(layers, inputs, lengths=lengths, compiled=compiled)
        results.append([out, c, h, *torch.autograd.grad(out.sum() + c.sum() + h.sum(), [inputs, *params])])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert fused_module._compiled_cells is not None
