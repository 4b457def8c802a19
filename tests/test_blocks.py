"""Batch independence by construction (elmo.kernels.blocks): every matrix product and convolution of
the inference path is asked the same question whatever the batch.

BLAS and oneDNN choose their kernels (and so their rounding) from the shapes they are given, and
where their thresholds lie differs between CPUs: comparing outputs on one CPU cannot show that a
sentence's vectors are independent of its batch on another. These tests record the shape of
every product the inference path runs (PyTorch's dispatch hook sees each one) and check that the
shapes never depend on batch composition, length mix, the token memo or where a run resumed,
which holds, or fails, on any CPU alike.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import corpus, load_fixture_model
from torch.utils._python_dispatch import TorchDispatchMode

from elmo import Embedder
from elmo.kernels import blocks
from elmo.kernels.blocks import GATE_BLOCK, HEAD_BLOCK, ROW_BLOCK, WORD_BLOCK

pytestmark = pytest.mark.exactness

aten = torch.ops.aten
# Where each product's rows are: (argument index, dimension).
ROWS_AT = {aten.mm: (0, 0), aten.addmm: (1, 0), aten.linear: (0, 0), aten.matmul: (0, -2), aten.bmm: (0, 1),
           aten.baddbmm: (1, 1), aten.conv1d: (0, 0), aten.convolution: (0, 0), aten.mkldnn_linear: (0, 0),
           torch.ops.mkldnn._linear_pointwise: (0, 0)}
# oneDNN's int8 product (precision int8), where this PyTorch has it: its weight is packed (in, out).
QLINEAR = getattr(torch.ops.onednn, "qlinear_pointwise", None)
if QLINEAR is not None:
    ROWS_AT[QLINEAR] = (0, 0)
# Products whose operands are the model's weights alone (no rows of a batch).
MODEL_ONLY = {aten.einsum}


class ProductShapes(TorchDispatchMode):
    """Records ``(op, operand shapes)`` of every matrix product and convolution dispatched."""

    def __init__(self):
        super().__init__()
        self.shapes: set[tuple] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        if packet in ROWS_AT or packet in MODEL_ONLY:
            operands = args[1] if packet is aten.einsum else args
            self.shapes.add((packet.__name__, tuple(tuple(a.shape) for a in operands if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def product_shapes(run) -> set[tuple]:
    # Which oneDNN kernels work is probed once per process on a tiny product of its own, never on
    # a batch's rows: done before recording, so that only the inference path's products are seen.
    blocks.onednn_for("cpu", torch.float32), blocks.onednn_for("cpu", torch.bfloat16)
    with ProductShapes() as recorder:
        run()
    assert recorder.shapes, "no product was recorded: the hook saw nothing"
    return recorder.shapes


def rows_of(shape: tuple) -> int | None:
    name, operands = shape
    at = {packet.__name__: where for packet, where in ROWS_AT.items()}.get(name)
    if at is None:
        return None
    if name == "_linear_pointwise" and operands[0] in STATE_PARTS:
        return operands[1][0]  # the transposed recurrent product: the block's rows are its weight
    index, dim = at
    return operands[index][dim]


LINES = [line.split() for line in corpus(60, seed=3, longest=30) if line.split()]
TARGET = LINES[7]


def embedder(**kwargs) -> Embedder:
    return Embedder(load_fixture_model("allennlp"), **kwargs)


def alone(**kwargs):
    return lambda: embedder(**kwargs).embed_sentences([TARGET])


def in_a_batch(**kwargs):
    return lambda: embedder(**kwargs).embed_sentences(LINES[:40], batch_size=40)


KERNELS = [pytest.param({}, id="float32"), pytest.param({"token_memo": 0}, id="no-memo"),
           pytest.param({"precision": "bfloat16"}, id="bfloat16"), pytest.param({"precision": "int8"}, id="int8")]


@pytest.fixture(autouse=True)
def _int8_here(request):
    """The int8 cases need oneDNN's int8 kernel (elsewhere int8 runs float32, tested elsewhere)."""
    params = request.node.callspec.params if hasattr(request.node, "callspec") else {}
    if params.get("options", {}).get("precision") == "int8":
        if params.get("product_kernel") == "bmm":
            pytest.skip("int8 is oneDNN's kernel: no batched-product branch to test")
        if not blocks.int8_for("cpu"):
            pytest.skip("no exact oneDNN int8 kernel here (this PyTorch, or a CPU without VNNI)")


@pytest.mark.parametrize("options", KERNELS)
def test_every_product_runs_on_whole_blocks(options, product_kernel, bfloat16_selected):
    """Alone, in a batch of 40 (several row blocks) or of 5, every product has exactly a block's
    rows."""
    row_block = ROW_BLOCK
    shapes = set()
    for run in (alone(**options), in_a_batch(**options),
                lambda: embedder(**options).embed_sentences(LINES[:5], batch_size=5)):
        shapes |= product_shapes(run)
    rows = {rows_of(shape) for shape in shapes} - {None}
    allowed = {row_block, GATE_BLOCK, WORD_BLOCK, HEAD_BLOCK}
    assert rows <= allowed, sorted(s for s in shapes if rows_of(s) not in allowed | {None})
    assert row_block in rows  # the recurrent products were seen


LSTM_PRODUCTS = {"bmm", "baddbmm", "mkldnn_linear"}
# oneDNN's linear runs both the LSTM's products and the character CNN's highway and projection:
# those are told apart by their weight, (out, in) (the fixture model's shapes, checked below).
MODEL = load_fixture_model("allennlp")
LSTM_WEIGHTS = {tuple(p.shape) for layer in MODEL.forward_layers for p in layer.parameters() if p.dim() == 2}
CNN_WEIGHTS = {tuple(p.shape) for p in MODEL.token_encoder.parameters() if p.dim() == 2}
# float32's recurrent product runs on a CPU as (weight part) x (block)^T (lstm._column_parts): the
# parts of the state weight come first, the block's rows second.
STATE_PARTS = {(min(blocks.COLUMN_BLOCK, width - lo), proj) for layer in MODEL.forward_layers
               for width, proj in [tuple(layer.state_weight.shape)] for lo in range(0, width, blocks.COLUMN_BLOCK)}


def split(shapes: set[tuple]) -> tuple[set[tuple], set[tuple]]:
    """The LSTM's products and the character CNN's (convolutions, highway, projection)."""
    assert not LSTM_WEIGHTS & CNN_WEIGHTS  # else the weights could not tell them apart
    lstm = {s for s in shapes
            if s[0] in LSTM_PRODUCTS
            or (s[0] == "_linear_pointwise" and (s[1][1] in LSTM_WEIGHTS or s[1][0] in STATE_PARTS))
            or (s[0] == "qlinear_pointwise" and s[1][1][::-1] in LSTM_WEIGHTS)}
    return lstm, shapes - lstm


@pytest.mark.parametrize("options", KERNELS)
def test_a_sentence_meets_the_same_products_alone_and_in_any_batch(options, product_kernel, bfloat16_selected):
    """The products that one sentence's embedding runs are the same alone, among other sentences
    (in another block, at another position), after the memo has seen its words, and when a run
    resumes at it (a fresh embedder, its lines from there on)."""
    alone(**options)()  # the warm state, computed once outside the recording
    reference_lstm, reference_cnn = split(product_shapes(alone(**options)))
    warm = embedder(**options)
    warm.embed_sentences(LINES[:40], batch_size=40)
    runs = [("in a batch", lambda: embedder(**options).embed_sentences(LINES[:8] + [TARGET], batch_size=9)),
            ("resumed", lambda: embedder(**options).embed_sentences(LINES[7:40], batch_size=40)),
            ("memo has its words", lambda: warm.embed_sentences([TARGET]))]
    for label, run in runs:
        lstm, cnn = split(product_shapes(run))
        assert lstm == reference_lstm, label
        if label == "memo has its words" and options.get("token_memo", 1):
            assert not cnn, label  # its words are looked up, not encoded
        else:  # other sentences' words may add other length buckets; none of its own is missing
            assert reference_cnn <= cnn, label


@pytest.mark.parametrize("options", [pytest.param({}, id="float32"), pytest.param({"precision": "int8"}, id="int8")])
def test_vectors_are_the_same_bits_alone_in_any_batch_and_resumed(options):
    """The consequence, checked on this CPU: a sentence's vectors to the bit, whatever its batch
    (sizes 1, 3, 16, 17 and 40: one row block, a partial one, two), its position, the memo's
    contents and where the run started. int8 quantizes each row on its own scale and sums in
    int32, exactly: the same holds."""
    reference = embedder(token_memo=0, **options).embed_sentences([TARGET])[0]
    shared = embedder(**options)
    for batch_size in (1, 3, 16, 17, 40):
        got = embedder(**options).embed_sentences(LINES[:40], batch_size=batch_size)[LINES.index(TARGET)]
        assert np.array_equal(got, reference), batch_size
    shared.embed_sentences(LINES[20:40])
    assert np.array_equal(shared.embed_sentences(LINES[:40])[LINES.index(TARGET)], reference)
    resumed = embedder(**options).embed_sentences(LINES[LINES.index(TARGET):40])[0]
    assert np.array_equal(resumed, reference)


def test_the_gpu_block_sizes_keep_the_numbers_and_batch_independence(monkeypatch):
    """A GPU runs the same code on larger blocks (blocks.BLOCK_SIZES["cuda"]). Run here with those
    sizes: the products are asked only those sizes, the vectors match the plain path as the CPU's
    do, and a sentence's vectors are the same bits alone and in batches of other sizes (all within
    one block here: a GPU block holds 64 sentences)."""
    gpu = blocks.BLOCK_SIZES["cuda"]
    assert (gpu.row, gpu.gate, gpu.word, gpu.head) != (ROW_BLOCK, GATE_BLOCK, WORD_BLOCK, HEAD_BLOCK)
    monkeypatch.setitem(blocks.BLOCK_SIZES, "cpu", gpu)

    def embedder(**kwargs) -> Embedder:  # the zero state: no warm state computed (or cached) with these sizes
        return Embedder(load_fixture_model("allennlp"), state="reset", **kwargs)

    batch = lambda: embedder(token_memo=0).embed_sentences(LINES[:20], batch_size=20)  # noqa: E731
    rows = {rows_of(shape) for shape in product_shapes(batch)} - {None}
    assert rows <= {gpu.row, gpu.gate, gpu.word, gpu.head}, rows
    reference = embedder(token_memo=0).embed_sentences([TARGET])[0]
    for batch_size in (9, 20):  # (on a CPU each one-sentence batch computes whole GPU blocks: slow)
        got = embedder().embed_sentences(LINES[:20], batch_size=batch_size)[LINES.index(TARGET)]
        assert np.array_equal(got, reference), batch_size
    plain = load_fixture_model("allennlp")
    plain.fast = False
    expected = Embedder(plain, state="reset").embed_sentences([TARGET])[0]
    np.testing.assert_allclose(reference, expected, rtol=0, atol=1e-5)
