"""The inference LSTM's kernel budget per layer-step, and the machinery of CUDA graphs (buckets,
chunks, masks, captures only for repeated shapes) run on a CPU without capture. The capture
itself is tested on a GPU in tests/test_cuda.py."""

import pytest
import torch
from op_counting import OpCounter

from elmo import BiLM, batch_to_char_ids
from elmo.inference.graphs import ROW_BUCKETS, LstmGraphs
from elmo.inference.runtime import Runtime
from elmo.kernels import blocks as blocks_module
from elmo.kernels import cpu_lstm as lstm_module
from elmo.kernels.cpu_lstm import bilstm_inference, bilstm_static_chunk, stack_directions
from elmo.model.config import BiLMConfig
from elmo.model.network import LstmLayer, lstm_plain

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


def make_config(n_layers=2, skip=True, clip=3.0):
    return BiLMConfig.from_dict({
        "lstm": {"dim": 24, "projection_dim": 12, "n_layers": n_layers, "cell_clip": clip, "proj_clip": clip,
                 "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8], [3, 8]], "n_highway": 1,
                     "activation": "relu", "n_characters": 262, "max_characters_per_token": 50}})


def kernels_per_layer_step(dtype, monkeypatch, gpu_choice):
    """Kernel-launching operators of one layer-step of bilstm_inference, counted by the dispatch
    mode from the difference between 20 and 10 steps (what a call costs once drops out).
    ``gpu_choice``: take the GPU's arithmetic (torch.tanh) while running on the CPU."""
    if gpu_choice:
        monkeypatch.setattr(lstm_module, "tanh_by_sigmoid", lambda device: False)
        monkeypatch.setattr(blocks_module, "ONEDNN", False)  # a GPU's products are batched
    torch.manual_seed(0)
    forward, backward = LstmLayer(8, 16, 8, 3.0, 3.0), LstmLayer(8, 16, 8, 3.0, 3.0)
    weights = stack_directions(forward, backward, dtype)
    counts = []
    for steps in (10, 20):
        inputs, lengths = torch.randn(2, 6, steps, 8), torch.full((6,), steps)
        with OpCounter() as counter:
            bilstm_inference(forward, backward, inputs, lengths, torch.zeros(2, 6, 16), torch.zeros(2, 6, 8),
                             dtype, weights)
        counts.append(counter.kernels)
    return (counts[1] - counts[0]) / 10


# Before issue 37 one layer-step took 24 kernels in float32 and 28 in bfloat16 on either device.
# Issue 44's row blocks add one (the input half of the gates is added after the blocked product,
# since it is computed for the running rows only; each further block of rows adds its products).
# On a CPU with oneDNN, float32 products run per direction and are copied into the step's buffers
# (oneDNN's linear has no output argument): in float32 three kernels more for each of the two products,
# and the input half added per direction from the blocks its products returned, and the j quarter
# doubled on the summed gates, since float32 reads the layers' own weights instead of doubled
# copies (23; the CPU's tanh as 2 sigmoid(2x) - 1 costs its own few in either precision). Where oneDNN also
# has the CPU's bfloat16 instructions, bfloat16 products run per direction too (23 kernels: the
# float32 count, one copy of the bfloat16 state into the outputs, and the input half added per
# direction from the blocks its products returned); else batched (17).
@pytest.mark.parametrize("dtype, gpu_choice, budget", [(torch.float32, True, 11), (torch.bfloat16, True, 13),
                                                       (torch.float32, False, 23), (torch.bfloat16, False, None)])
def test_inference_layer_step_kernel_budget(dtype, gpu_choice, budget, monkeypatch):
    if budget is None:
        budget = 23 if blocks_module.onednn_for("cpu", dtype) else 17
    assert kernels_per_layer_step(dtype, monkeypatch, gpu_choice) <= budget


def test_op_counter_sees_kernels_not_views():
    x = torch.randn(4, 6)
    with OpCounter() as counter:
        y = x.t().reshape(24)  # a copy: the transpose is not contiguous
        z = (y.view(4, 6) * 2).to(torch.float32)  # one kernel; the view and the no-op .to() none
        torch.sigmoid(z)
    assert counter.kernels == 3, counter.table()


def test_tanh_choice_follows_the_device():
    assert lstm_module.tanh_by_sigmoid(torch.device("cpu"))
    assert not lstm_module.tanh_by_sigmoid(torch.device("cuda"))


@pytest.mark.parametrize("gpu_choice", [False, True])
@pytest.mark.parametrize("clip", [None, 0.7])
def test_bilstm_inference_with_either_tanh_matches_plain(gpu_choice, clip, monkeypatch):
    if gpu_choice:
        monkeypatch.setattr(lstm_module, "tanh_by_sigmoid", lambda device: False)
        monkeypatch.setattr(blocks_module, "ONEDNN", False)  # a GPU's products are batched
    torch.manual_seed(3)
    layers = [LstmLayer(6, 10, 5, cell_clip=clip, proj_clip=clip) for _ in range(2)]
    with torch.no_grad():
        for layer in layers:
            layer.bias.normal_()
    lengths = torch.tensor([9, 7, 7, 3, 1, 0])
    mask = torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, 6, 9, 6) * mask[None, :, :, None]
    c, h = torch.randn(2, 6, 10), torch.randn(2, 6, 5)
    out, final_c, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h)
    with torch.no_grad():
        for d in (0, 1):
            expected, (expected_c, expected_h) = lstm_plain(layers[d], inputs[d], mask, (c[d], h[d]))
            torch.testing.assert_close(out[d], expected, rtol=0, atol=1e-6)
            torch.testing.assert_close(final_c[d], expected_c, rtol=0, atol=1e-6)
            torch.testing.assert_close(final_h[d], expected_h, rtol=0, atol=1e-6)


def _static_run(layers, weights, x, lengths, c, h, dtype, skip, steps):
    """bilstm_static_chunk over the whole sequence in chunks of ``steps``, as the graphs drive it."""
    _, batch, time, _ = x.shape
    n_chunks = -(-time // steps)
    inputs = torch.zeros(n_chunks * steps, 2, batch, x.shape[-1])
    inputs[:time] = x.permute(2, 0, 1, 3)
    keep = (torch.arange(n_chunks * steps).unsqueeze(1) < lengths.unsqueeze(0)).float().view(-1, 1, batch, 1)
    c, h = c.transpose(0, 1).clone(), h.transpose(0, 1).clone()
    outputs = torch.zeros(len(layers), n_chunks * steps, 2, batch, h.shape[-1])
    for k in range(n_chunks):
        window = slice(k * steps, (k + 1) * steps)
        bilstm_static_chunk(layers, weights, inputs[window].clone(), keep[window].clone(), c, h, outputs[:, window],
                            dtype, skip)
    return outputs[:, :time], c, h


@pytest.mark.parametrize("gpu_choice", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_masked_chunks_equal_the_eager_path(gpu_choice, dtype, monkeypatch):
    """Every row at every step, masked, in chunks of 4 steps: the eager path's numbers (exactly in
    float32 on the CPU, where the products' rounding does not depend on their row count here)."""
    if gpu_choice:
        monkeypatch.setattr(lstm_module, "tanh_by_sigmoid", lambda device: False)
        monkeypatch.setattr(blocks_module, "ONEDNN", False)  # a GPU's products are batched
    torch.manual_seed(4)
    pairs = [(LstmLayer(6, 10, 6, 3.0, 3.0), LstmLayer(6, 10, 6, 3.0, 3.0)) for _ in range(2)]
    weights = [stack_directions(f, b, dtype) for f, b in pairs]
    lengths = torch.tensor([11, 9, 9, 5, 2, 1])
    mask = torch.arange(11).unsqueeze(0) < lengths.unsqueeze(1)
    x = torch.randn(2, 6, 11, 6) * mask[None, :, :, None]
    c, h = torch.randn(2, 2, 6, 10), torch.randn(2, 2, 6, 6)
    expected, x_in = [], x
    for index, ((f, b), w) in enumerate(zip(pairs, weights)):
        out, c_l, h_l = bilstm_inference(f, b, x_in, lengths, c[:, index], h[:, index], dtype, w)
        out = out + x_in if index > 0 else out
        expected.append((out, c_l, h_l))
        x_in = out
    if weights[0].input is None:
        # oneDNN's bfloat16 weights keep no batched layout (the memory of a second copy), which
        # static chunks need: they run on a GPU, whose weights are stacked for batched products.
        with pytest.raises(ValueError, match="batched layout"):
            _static_run(pairs, weights, x, lengths, c, h, dtype, True, steps=4)
        monkeypatch.setattr(blocks_module, "ONEDNN", False)
        weights = [stack_directions(f, b, dtype) for f, b in pairs]
    outputs, final_c, final_h = _static_run(pairs, weights, x, lengths, c, h, dtype, True, steps=4)
    tolerance = 1e-6 if dtype == torch.float32 else 2e-2
    for index, (out, c_l, h_l) in enumerate(expected):
        torch.testing.assert_close(outputs[index].permute(1, 2, 0, 3), out, rtol=0, atol=tolerance)
        torch.testing.assert_close(final_c[index], c_l, rtol=0, atol=tolerance)
        torch.testing.assert_close(final_h[index], h_l, rtol=0, atol=tolerance)


def _graphed_runtime(model, monkeypatch, **options):
    # Graphs run on a GPU, whose products are batched: static chunks read the batched layout,
    # which weights stacked for oneDNN's products on a CPU do not keep.
    monkeypatch.setattr(blocks_module, "ONEDNN", False)
    runtime = Runtime(model, state="reset")
    layers = list(zip(runtime.model.forward_layers, runtime.model.backward_layers))
    runtime.graphs = LstmGraphs(layers, runtime.dtype, model.config.lstm.use_skip_connections, capture=False,
                                **options)
    return runtime


SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["It", "rained", "."], [], ["Paris", "1984"] * 9,
             ["a"]]


@pytest.mark.parametrize("skip, clip", [(True, 3.0), (False, None)])
def test_runtime_through_graphs_equals_plain_bilm(skip, clip, monkeypatch):
    """The runtime with the graph machinery (no capture on a CPU): bucketed rows, time in chunks
    of 5 steps, sentences of 0 to 18 tokens, states in and out, against the specification."""
    torch.manual_seed(5)
    fast, plain = BiLM(make_config(skip=skip, clip=clip)).eval(), BiLM(make_config(skip=skip, clip=clip),
                                                                       fast=False).eval()
    plain.load_state_dict(fast.state_dict())
    runtime = _graphed_runtime(fast, monkeypatch, capture_after=1, steps=5)
    ids, mask = batch_to_char_ids(SENTENCES)
    state = plain.zero_state(len(SENTENCES))
    state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
    with torch.no_grad():
        got, expected = runtime(ids, mask, state), plain(ids, mask, state)
    assert runtime.graphs.replays == -(-(18 + 2) // 5)  # the longest row: 18 tokens + 2 boundaries
    torch.testing.assert_close(got.layers, expected.layers, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.state.c, expected.state.c, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.state.h, expected.state.h, rtol=0, atol=1e-5)


def test_graphs_are_captured_only_for_shapes_that_repeat(monkeypatch):
    torch.manual_seed(6)
    model = BiLM(make_config()).eval()
    runtime = _graphed_runtime(model, monkeypatch, capture_after=2)
    eager = Runtime(model, state="reset")
    one, ten = SENTENCES[:1], SENTENCES * 2  # buckets of 8 and 16 rows
    for batch, captures in ((one, 0), (ten, 0), (one, 1), (one, 1), (ten, 2), (one, 2), (ten, 2)):
        ids, mask = batch_to_char_ids(batch)
        with torch.no_grad():
            got, expected = runtime(ids, mask), eager(ids, mask)
        torch.testing.assert_close(got.layers, expected.layers, rtol=0, atol=1e-6)
        assert runtime.graphs.captures == captures
    assert sorted(runtime.graphs.graphs) == [8, 16] == list(ROW_BUCKETS[:2])


def test_graphs_follow_weight_changes_and_large_batches_run_eagerly(monkeypatch):
    torch.manual_seed(7)
    model = BiLM(make_config()).eval()
    runtime = _graphed_runtime(model, monkeypatch, capture_after=1)
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.no_grad():
        before = runtime(ids, mask).layers
        runtime.model.forward_layers[0].bias.add_(0.5)  # the runtime restacks; graphs must follow
        after = runtime(ids, mask).layers
        plain = BiLM(make_config(), fast=False).eval()
        plain.load_state_dict(runtime.model.state_dict())
        torch.testing.assert_close(after, plain(ids, mask).layers, rtol=0, atol=1e-5)
    assert (after - before).abs().max() > 1e-3
    too_many = [["x"]] * (ROW_BUCKETS[-1] + 1)
    ids, mask = batch_to_char_ids(too_many)
    replays = runtime.graphs.replays
    with torch.no_grad():
        runtime(ids, mask)
    assert runtime.graphs.replays == replays  # no bucket holds it: the eager path ran


def test_cuda_graphs_need_a_gpu():
    with pytest.raises(ValueError, match="cuda_graphs: CUDA graphs need a CUDA device"):
        Runtime(BiLM(make_config()), device="cpu", cuda_graphs=True)
