"""The LSTM layer's inference kernel and its products against the per-timestep specification
(``lstm_plain``), values and gradients, clipping inactive and active (the training path's own
tests are tests/test_fused_lstm.py)."""

import pytest
import torch
from conftest import LONG_LENGTHS

from elmo.kernels import blocks as blocks_module
from elmo.kernels import cpu_lstm as lstm_module
from elmo.kernels.blocks import ROW_BLOCK
from elmo.kernels.cpu_lstm import GATE_CHUNK_STEPS, bilstm_inference, stack_directions
from elmo.model.network import LstmLayer, lstm_plain

pytestmark = pytest.mark.exactness


def test_product_kernel_choice(monkeypatch):
    """On a CPU whose PyTorch has oneDNN's linear kernel, float32 products read the layers' own
    weights (no copy: j is doubled on the gates instead) and no batched layout is kept;
    bfloat16 weights are packed for it once where oneDNN has the CPU's bfloat16 instructions;
    float16 keeps the batched products."""
    layer = LstmLayer(12, 8, 6, cell_clip=3.0, proj_clip=3.0)
    available = blocks_module.onednn_for("cpu", torch.float32)
    assert available == (torch.backends.mkldnn.is_available() and blocks_module._onednn_linear_works())
    weights = lstm_module.stack_directions(layer, layer, torch.float32)
    assert (weights.linear is not None) == available
    if available:
        assert weights.linear[1].state.data_ptr() == layer.state_weight.data_ptr()
        assert weights.linear[0].input.data_ptr() == layer.input_weight.data_ptr()
        assert weights.linear[0].input.is_contiguous() and weights.linear[0].input.shape == (32, 12)
        assert weights.input is None and weights.double_j_after and weights.doubled_j
    bfloat16 = blocks_module.onednn_for("cpu", torch.bfloat16)
    assert bfloat16 == (available and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    low = lstm_module.stack_directions(layer, layer, torch.bfloat16)
    assert (low.linear is not None) == bfloat16
    if bfloat16:
        assert all(w.layout == torch._mkldnn and w.dtype == torch.bfloat16 for w in low.linear[0][:3])
        assert low.linear[0].bias.dtype == torch.float32  # never rounded to bfloat16
        assert low.input is None and low.state is None and low.projection is None  # no unpacked copy kept
    assert lstm_module.stack_directions(layer, layer, torch.float16).linear is None
    assert not blocks_module.onednn_for("cpu", torch.float16)
    assert not blocks_module.onednn_for("cuda", torch.float32)
    monkeypatch.setattr(blocks_module, "ONEDNN", False)
    assert lstm_module.stack_directions(layer, layer, torch.float32).linear is None


def test_linear_kernel_equals_pytorch_and_keeps_gradients():
    """blocks.linear: the same product as ``torch.nn.functional.linear`` to float rounding, and
    PyTorch's own (differentiable) product wherever a gradient is wanted."""
    torch.manual_seed(0)
    x, weight, bias = torch.randn(16, 12), torch.randn(20, 12), torch.randn(20)
    torch.testing.assert_close(blocks_module.linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(blocks_module.linear(x, weight), x @ weight.t(), rtol=0, atol=1e-5)
    weight.requires_grad_()
    blocks_module.linear(x, weight, bias).sum().backward()
    torch.testing.assert_close(weight.grad, x.sum(0).expand(20, 12), rtol=0, atol=1e-5)


@pytest.mark.parametrize("with_bias", [True, False])
def test_trained_linear_equals_addmm_values_and_gradients(product_kernel, with_bias):
    """blocks.trained_linear (the sampled softmax's product in training): oneDNN's kernel forward
    and for the input's gradient, or ``torch.addmm``, against the float64 product, values and the
    gradients of the input, the weight and the bias; the fallback is ``addmm`` itself, bit for bit."""
    torch.manual_seed(2)
    x, weight = torch.randn(40, 24).t()[:, :30], torch.randn(50, 30)  # x strided, as a slice
    bias = torch.randn(50) if with_bias else None
    leaves = [t.clone().requires_grad_() for t in (x, weight) + ((bias,) if with_bias else ())]
    out = blocks_module.trained_linear(*leaves, *(() if with_bias else (None,)))
    grad_out = torch.randn(24, 50)
    out.backward(grad_out)
    exact = [t.double().requires_grad_() for t in (x, weight) + ((bias,) if with_bias else ())]
    reference = exact[0] @ exact[1].t() + (exact[2] if with_bias else 0)
    reference.backward(grad_out.double())
    torch.testing.assert_close(out.double(), reference, rtol=0, atol=2e-5)
    for leaf, ref in zip(leaves, exact):
        torch.testing.assert_close(leaf.grad.double(), ref.grad, rtol=0, atol=5e-5)
    if product_kernel == "bmm":
        expected = torch.addmm(bias, x, weight.t()) if with_bias else x @ weight.t()
        assert torch.equal(blocks_module.trained_linear(x, weight, bias), expected)


def test_int8_products_are_close_and_each_row_its_own():
    """blocks.quantize + blocks.linear: within int8's rounding of the float64 product (each
    operand to 1/254 of its row's largest value), the bias added in float32; and a row's result
    is the same bits whatever the block's other rows hold (each row has its own scale, the sums
    are exact int32)."""
    if not blocks_module.int8_for("cpu"):
        pytest.skip("no exact oneDNN int8 kernel here (this PyTorch, or a CPU without VNNI)")
    torch.manual_seed(3)
    x, weight, bias = torch.randn(16, 96), torch.randn(40, 96) * 0.1, torch.randn(40)
    packed = blocks_module.quantize(weight, 16)
    got = blocks_module.linear(x, packed, bias)
    exact = x.double() @ weight.double().t() + bias.double()
    assert got.dtype == torch.float32
    assert float((got.double() - exact).norm() / (exact - bias.double()).norm()) < 0.02
    other = torch.randn(16, 96) * 100.0
    other[3] = x[3]
    assert torch.equal(blocks_module.linear(other, packed, bias)[3], got[3])
    assert blocks_module.linear(torch.zeros(16, 96), packed).abs().max() == 0.0  # padding rows stay zero
    assert not blocks_module.int8_for("cuda")


def test_int8_is_a_products_dtype_on_float32_rows(monkeypatch):
    """``torch.int8`` as the products' dtype of stack_directions and bilstm_inference: weights
    quantized (and no float32 copy kept), the rows and outputs float32, the outputs within int8's
    rounding of float32's; where the int8 kernel cannot run, float32's weights and numbers
    exactly."""
    torch.manual_seed(4)
    forward_layer, backward_layer = (LstmLayer(24, 40, 24, cell_clip=3.0, proj_clip=3.0) for _ in range(2))
    inputs, lengths = torch.randn(2, 3, 7, 24), torch.tensor([7, 5, 2])
    c, h = torch.zeros(2, 3, 40), torch.zeros(2, 3, 24)
    reference = bilstm_inference(forward_layer, backward_layer, inputs, lengths, c, h)[0]
    assert blocks_module.activation_dtype(torch.int8) == torch.float32
    assert blocks_module.activation_dtype(torch.bfloat16) == torch.bfloat16
    if blocks_module.int8_for("cpu"):
        weights = stack_directions(forward_layer, backward_layer, torch.int8)
        assert isinstance(weights.linear[0].state, blocks_module.Int8Weight)
        assert weights.input is None and weights.state is None  # no float32 copy kept beside the int8 one
        out = bilstm_inference(forward_layer, backward_layer, inputs, lengths, c, h, torch.int8, weights)[0]
        assert out.dtype == torch.float32 and not torch.equal(out, reference)
        assert float((out - reference).norm() / reference.norm()) < 0.05
    monkeypatch.setattr(blocks_module, "_onednn_int8_works", lambda: False)
    assert blocks_module.products_dtype(torch.int8, "cpu") == torch.float32
    assert blocks_module.products_dtype(torch.bfloat16, "cpu") == torch.bfloat16
    weights = stack_directions(forward_layer, backward_layer, torch.int8)
    assert weights.linear is None or not isinstance(weights.linear[0].state, blocks_module.Int8Weight)
    assert torch.equal(bilstm_inference(forward_layer, backward_layer, inputs, lengths, c, h, torch.int8)[0],
                       reference)


@pytest.mark.parametrize("rows", [1, 16, 45])
def test_bfloat16_products_match_float32_within_bfloat16_rounding(rows):
    """blocks.linear on bfloat16 operands (oneDNN's kernel on a pre-packed weight where the CPU
    has bfloat16 instructions, PyTorch's product elsewhere) against the float32 product of the
    same bfloat16 values: within float32 accumulation and one bfloat16 rounding of the result."""
    torch.manual_seed(1)
    x, weight = torch.randn(rows, 96).bfloat16(), (torch.randn(200, 96) * 0.1).bfloat16()
    expected = x.float() @ weight.float().t()
    for w in (weight, blocks_module.prepack(weight, rows)):
        got = blocks_module.linear(x, w)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, 200)
        torch.testing.assert_close(got.float(), expected, rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("lengths", LONG_LENGTHS[1:])
def test_bilstm_inference_in_bfloat16_stays_close_to_plain(lengths, product_kernel):
    """Both directions in bfloat16 products (oneDNN's packed kernel or the batched one), float32
    cells: within bfloat16 rounding of the float32 specification over hundreds of steps, on rows
    in several blocks and chunks."""
    torch.manual_seed(8)
    layers = [LstmLayer(24, 40, 24, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    for layer in layers:
        torch.nn.init.uniform_(layer.bias, -0.1, 0.1)
    batch, time = len(lengths), max(lengths)
    lengths_tensor = torch.tensor(lengths)
    mask = torch.arange(time).unsqueeze(0) < lengths_tensor.unsqueeze(1)
    inputs = torch.randn(2, batch, time, 24) * mask[None, :, :, None]
    c, h = torch.randn(2, batch, 40) * 0.1, torch.randn(2, batch, 24) * 0.1
    with torch.no_grad():
        expected = [lstm_plain(layers[d], inputs[d], mask, (c[d], h[d])) for d in (0, 1)]
    weights = lstm_module.stack_directions(layers[0], layers[1], torch.bfloat16)
    assert (weights.linear is not None) == blocks_module.onednn_for("cpu", torch.bfloat16)
    out, final_c, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths_tensor, c, h, torch.bfloat16,
                                             weights)
    assert out.dtype == final_c.dtype == final_h.dtype == torch.float32
    for d in (0, 1):
        deviation = (out[d] - expected[d][0]).abs()
        assert deviation.max() < 0.05, float(deviation.max())  # outputs are O(0.1..1)
        assert deviation.max() > 0  # bfloat16 really ran
        assert (out[d][~mask] == 0).all()
        torch.testing.assert_close(final_c[d], expected[d][1][0], rtol=0, atol=0.05)
        torch.testing.assert_close(final_h[d], expected[d][1][1], rtol=0, atol=0.05)


@pytest.mark.parametrize("lengths", LONG_LENGTHS)
def test_bilstm_inference_matches_plain_past_one_chunk(lengths, product_kernel):
    assert max(lengths) > 2 * GATE_CHUNK_STEPS  # the gates come in three chunks
    assert min(map(len, LONG_LENGTHS)) < ROW_BLOCK < max(map(len, LONG_LENGTHS))  # one block and several
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


def test_gate_chunking_matches_plain_at_any_chunk_size(monkeypatch, product_kernel):
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


@pytest.mark.parametrize("part", [24, 64])
def test_float32_recurrent_product_in_column_parts_matches_plain(monkeypatch, product_kernel, part):
    """oneDNN's float32 recurrent product in parts of gate columns (blocks.COLUMN_BLOCK; 24 leaves a
    partial last part of the 64 columns, 64 is one part): the specification's numbers, over rows in
    several blocks, and a sentence's numbers the same bits alone and in a batch (sizes in multiples
    of 16, as a model's are: the cell's vectorised functions then see each row alike)."""
    monkeypatch.setattr(blocks_module, "COLUMN_BLOCK", part)
    torch.manual_seed(11)
    layers = [LstmLayer(16, 16, 16, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    weights = lstm_module.stack_directions(layers[0], layers[1], torch.float32)
    if product_kernel == "onednn":
        parts = lstm_module._column_parts(weights.linear[0], weights.linear[0].bias)
        assert [p[2] for p in parts] == [slice(lo, min(lo + part, 64)) for lo in range(0, 64, part)]
    else:
        assert weights.linear is None  # the batched products have no parts
    lengths = torch.tensor([30, 30, 25, 19, 17, 9, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1])  # two row blocks
    time = int(lengths.max())
    mask = torch.arange(time).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, len(lengths), time, 16) * mask[None, :, :, None]
    c, h = torch.randn(2, len(lengths), 16) * 0.1, torch.randn(2, len(lengths), 16) * 0.1
    with torch.no_grad():
        expected = [lstm_plain(layers[d], inputs[d], mask, (c[d], h[d])) for d in (0, 1)]
    out, final_c, final_h = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h, weights=weights)
    for d in (0, 1):
        torch.testing.assert_close(out[d], expected[d][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(final_c[d], expected[d][1][0], rtol=0, atol=1e-5)
        torch.testing.assert_close(final_h[d], expected[d][1][1], rtol=0, atol=1e-5)
    alone, _, _ = bilstm_inference(layers[0], layers[1], inputs[:, 3:4, :19], lengths[3:4], c[:, 3:4], h[:, 3:4],
                                   weights=weights)
    assert torch.equal(alone[:, 0], out[:, 3, :19])


def test_input_products_compute_the_running_pairs_only(monkeypatch):
    """oneDNN's input products run on the running (step, row) pairs alone: one sentence of 100
    steps beside fifteen of one step is 115 pairs, one block of GATE_BLOCK, not the 1,600 pairs
    of the padded batch (13 blocks); the numbers are the specification's."""
    if not blocks_module.onednn_for("cpu", torch.float32):
        pytest.skip("this PyTorch has no oneDNN linear kernel")
    monkeypatch.setattr(blocks_module, "ONEDNN", True)
    torch.manual_seed(12)
    layers = [LstmLayer(16, 16, 16, cell_clip=3.0, proj_clip=3.0) for _ in range(2)]
    lengths = torch.tensor([100] + [1] * 15)
    mask = torch.arange(100).unsqueeze(0) < lengths.unsqueeze(1)
    inputs = torch.randn(2, 16, 100, 16) * mask[None, :, :, None]
    c, h = torch.zeros(2, 16, 16), torch.zeros(2, 16, 16)
    calls = []

    def counting(x, weight, bias=None):
        if id(weight) in input_weights:
            calls.append(x.shape[0])
        return blocks_module.linear(x, weight, bias)

    weights = lstm_module.stack_directions(layers[0], layers[1], torch.float32)
    input_weights = {id(w.input) for w in weights.linear}
    monkeypatch.setattr(lstm_module, "linear", counting)
    out, _, _ = bilstm_inference(layers[0], layers[1], inputs, lengths, c, h, weights=weights)
    assert calls == [blocks_module.GATE_BLOCK] * 2  # one block per direction
    with torch.no_grad():
        expected = [lstm_plain(layers[d], inputs[d], mask) for d in (0, 1)]
    for d in (0, 1):
        torch.testing.assert_close(out[d], expected[d][0], rtol=0, atol=1e-5)
