"""A biLM as one ONNX graph (``elmo export --format onnx``), for runtimes without Python.

The graph holds the whole biLM of the specification (:meth:`elmo.model.network.BiLM.forward`): the
character CNN with its highway layers and projection, and both LSTM stacks with their clipping
and residual connections, each layer a ``Scan`` over time that carries the state past padding
as :func:`elmo.model.network.lstm_plain` does. Batch size and sentence length are free. Every weight
is stored once, as an initializer (the highway, projection and LSTM matrices transposed, not
copied), so the file is the weights plus a few kilobytes of graph; above
:data:`EXTERNAL_DATA_BYTES` the weights go to ``NAME.onnx.<16 hex digits>.data`` beside it (ONNX's
external-data layout: protobuf cannot hold 2 GB), a name taken from the weights' SHA-256, so that
a graph only ever reads the data written with it (:func:`export_onnx`).

Input and output (what a client in another language must build and read; docs/onnx.md):

* ``char_ids`` int64 ``(batch, time + 2, 50)``: bilm-tf's character ids *with* the sentence
  boundaries, as bilm-tf's ``Batcher`` makes them. Row 0 of each sentence is ``<S>``, then one row
  per token, then ``</S>``, then rows of zeros up to the batch's longest sentence. A token's row
  is ``[259, b_1 + 1, ..., b_k + 1, 260, 261, 261, ...]`` (50 ids): begin-of-word 258 + 1, its
  UTF-8 bytes cut to the first 48 (each + 1), end-of-word 259 + 1, then the in-word padding
  260 + 1. ``<S>`` is ``[259, 257, 260, 261, ...]``, ``</S>`` ``[259, 258, 260, 261, ...]``. An
  empty sentence is just ``<S> </S>``. :func:`elmo.model.chars.word_to_char_ids` is the rule in
  Python; :func:`onnx_char_ids` builds the whole input.
* ``layers`` float32 ``(batch, L + 1, time, 2 * projection_dim)``: the layers as ``elmo embed``
  writes them (boundaries removed; layer 0 the token vector twice, layer ``l`` ``[forward_l;
  backward_l]``), zero past each sentence's end; ``mask`` bool ``(batch, time)``: the real tokens.

The state each sentence starts from is fixed when exporting (``state``): ``"warm"`` (the default,
as ``elmo embed``'s) bakes in the model's warm state, ``"reset"`` zeros; ``"stateful"`` adds the
inputs ``initial_c`` ``(2, L, batch, dim)`` and ``initial_h`` ``(2, L, batch, projection_dim)``
(forward stack first) and the outputs ``final_c`` and ``final_h`` of the same shapes, which the
caller hands to the next batch row by row, as the stateful policy does
(:mod:`elmo.inference.states`).

The graph is written node by node with ``onnx.helper`` rather than traced by ``torch.onnx``: in
PyTorch 2.13 the default (``dynamo=True``) exporter needs ``onnxscript`` too and exports a loop
over a dynamic length only through the private ``torch._higher_order_ops.scan``; the TorchScript
exporter (``dynamo=False``) turns a scripted loop into ``Loop`` but is deprecated. Both worked on
a toy LSTM here; a graph of a few dozen node kinds written directly depends on neither and names
its inputs, outputs and weights as this module documents them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from elmo.model.chars import BOS_IDS, EOS_IDS, MAX_CHARS, ByteCharacters, words_to_char_ids
from elmo.model.config import ConfigError
from elmo.model.network import BiLM

if TYPE_CHECKING:  # onnx is an optional extra: imported only when a graph is built or read
    import onnx

# ONNX's operator set: 17 runs on every onnxruntime since 1.13 (and its Node, Java and C# builds).
OPSET = 17
# Above this many bytes of weights, they go into NAME.data beside the graph: protobuf's limit is
# 2 GiB for the whole file, and the graph itself needs a little room.
EXTERNAL_DATA_BYTES = 2**31 - 2**26
EXPORT_STATES = ("warm", "reset", "stateful")
INT64_MAX = np.iinfo(np.int64).max


def _require_onnx():
    """The ``onnx`` package; ModuleNotFoundError names it (the command names its extra)."""
    import onnx

    return onnx


def onnx_char_ids(sentences: Sequence[Sequence[str]]) -> np.ndarray:
    """The graph's ``char_ids`` for token lists: ``(batch, longest + 2, 50)`` int64, each sentence
    wrapped in ``<S>`` ... ``</S>`` and padded with rows of zeros (see the module docstring).
    ValueError for no sentences at all: onnxruntime stops on a batch of none (a floating-point
    exception, not an error)."""
    if not len(sentences):
        raise ValueError("sentences: none to embed; the graph needs a batch of at least one (an empty sentence "
                         "is one)")
    longest = max((len(s) for s in sentences), default=0)
    ids = np.zeros((len(sentences), longest + 2, MAX_CHARS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        ids[row, 0] = BOS_IDS
        ids[row, 1:len(sentence) + 1] = words_to_char_ids(list(sentence))
        ids[row, len(sentence) + 1] = EOS_IDS
    return ids


@dataclass
class _Builder:
    """Nodes and initializers of the graph being built, with unique names."""

    nodes: list
    initializers: list
    prefix: str = ""  # a body graph's: its names may not repeat any of the outer graph's
    count: int = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def weight(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def node(self, op: str, inputs: Sequence[str], hint: str | None = None, outputs: int = 1, **attributes):
        """Add one node; returns its output's name (a list of names when ``outputs`` > 1)."""
        from onnx import helper

        names = [self.name(hint or op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, **attributes))
        return names[0] if outputs == 1 else names


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().float().numpy()


def _initial_state(model: BiLM, state: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The one-row state ``(c (2, L, 1, dim), h (2, L, 1, proj))`` every sentence starts from, or
    None for ``"stateful"`` (the caller's)."""
    if state == "stateful":
        return None
    if state == "reset":
        zero = model.zero_state(1)
        return _array(zero.c), _array(zero.h)
    # The Embedder's own warm state (float32 products): the same numbers elmo embed starts from.
    from elmo.inference.runtime import Runtime

    warm = Runtime(model, device="cpu", precision="float32", state="warm").initial_state(1)
    return _array(warm.c), _array(warm.h)


def _lstm_body(layer, prefix: str, cell_clip: float | None, proj_clip: float | None):
    """The Scan body of one LSTM layer: state ``(c (batch, dim), h (batch, proj))`` and this
    step's input gates ``(batch, 4*dim)`` and mask ``(batch, 1)`` in; the new state and the step's
    output (zero where masked) out. The weights are the outer graph's initializers."""
    from onnx import TensorProto, helper

    body = _Builder([], [], prefix=f"{prefix}_step_")
    c_prev, h_prev, x_gates, keep = (f"{prefix}_{n}" for n in ("c_in", "h_in", "xg_in", "keep_in"))
    gates = body.node("Add", [x_gates, body.node("MatMul", [h_prev, f"{prefix}_state_t"])], "gates")
    i, j, f, o = body.node("Split", [gates, "gate_split"], "gate", outputs=4, axis=1)
    c = body.node("Add", [body.node("Mul", [body.node("Sigmoid", [body.node("Add", [f, "forget_bias"])]), c_prev]),
                          body.node("Mul", [body.node("Sigmoid", [i]), body.node("Tanh", [j])])], "c")
    if cell_clip is not None:
        c = body.node("Clip", [c, f"{prefix}_cell_min", f"{prefix}_cell_max"], "c_clipped")
    h = body.node("MatMul", [body.node("Mul", [body.node("Sigmoid", [o]), body.node("Tanh", [c])]),
                             f"{prefix}_projection_t"], "h")
    if proj_clip is not None:
        h = body.node("Clip", [h, f"{prefix}_proj_min", f"{prefix}_proj_max"], "h_clipped")
    # Past a row's end the state is carried and the output is zero (dynamic_rnn's sequence_length).
    outputs = [body.node("Where", [keep, c, c_prev], "c_out"), body.node("Where", [keep, h, h_prev], "h_out"),
               body.node("Where", [keep, h, "zero"], "y_out")]
    dim, proj = layer.dim, layer.projection_dim
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        body.nodes, f"{prefix}_step",
        [value(c_prev, TensorProto.FLOAT, ["batch", dim]), value(h_prev, TensorProto.FLOAT, ["batch", proj]),
         value(x_gates, TensorProto.FLOAT, ["batch", 4 * dim]), value(keep, TensorProto.BOOL, ["batch", 1])],
        [value(outputs[0], TensorProto.FLOAT, ["batch", dim]), value(outputs[1], TensorProto.FLOAT, ["batch", proj]),
         value(outputs[2], TensorProto.FLOAT, ["batch", proj])])
    return graph


def _token_encoder(model: BiLM, b: _Builder, char_ids: str, batch_time: str) -> str:
    """The character CNN, highway layers and projection on ``char_ids`` ``(batch, time, 50)``:
    token vectors ``(batch, time, proj)`` (:meth:`elmo.model.network.TokenEncoder.forward`)."""
    encoder = model.token_encoder
    width = encoder.n_slots
    flat = b.node("Reshape", [char_ids, b.weight("chars_shape", np.array([-1, width], dtype=np.int64))], "ids")
    chars = b.node("Gather", [b.weight("char_embedding", _array(encoder.char_embedding.weight)), flat], "chars")
    chars = b.node("Transpose", [chars], "chars_t", perm=[0, 2, 1])  # (n, char_dim, slots): channels first
    pooled = []
    for k, conv in enumerate(encoder.convs):
        values = b.node("Conv", [chars, b.weight(f"conv{k}_weight", _array(conv.weight)),
                                 b.weight(f"conv{k}_bias", _array(conv.bias))], f"conv{k}")
        pooled.append(b.node("ReduceMax", [values], f"pool{k}", axes=[2], keepdims=0))
    x = b.node("Concat", pooled, "pooled", axis=1)
    x = b.node("Tanh" if encoder.config.activation == "tanh" else "Relu", [x], "activated")
    for k, highway in enumerate(encoder.highways):
        carry = b.node("Add", [b.node("MatMul", [x, b.weight(f"highway{k}_carry_t", _array(highway.carry.weight).T)]),
                               b.weight(f"highway{k}_carry_bias", _array(highway.carry.bias))])
        transform = b.node("Add", [b.node("MatMul", [x, b.weight(f"highway{k}_transform_t",
                                                                 _array(highway.transform.weight).T)]),
                                   b.weight(f"highway{k}_transform_bias", _array(highway.transform.bias))])
        gate = b.node("Sigmoid", [carry], f"highway{k}_gate")
        x = b.node("Add", [b.node("Mul", [gate, b.node("Relu", [transform])]),
                           b.node("Mul", [b.node("Sub", ["one", gate]), x])], f"highway{k}")
    if encoder.projection is not None:
        x = b.node("Add", [b.node("MatMul", [x, b.weight("projection_t", _array(encoder.projection.weight).T)]),
                           b.weight("projection_bias", _array(encoder.projection.bias))], "projected")
    shape = b.node("Concat", [batch_time, b.weight("proj_dim", np.array([encoder.output_dim], dtype=np.int64))],
                   "tokens_shape", axis=0)
    return b.node("Reshape", [x, shape], "tokens")


def build_onnx(model: BiLM, state: str = "warm") -> "onnx.ModelProto":
    """The ONNX model of ``model`` (see the module docstring) under the state policy ``state``.

    Refuses, in one line, what the graph cannot hold: a model of ELMoForManyLangs' character
    dictionary (its ids are not bilm-tf's)."""
    _require_onnx()
    from onnx import helper

    if state not in EXPORT_STATES:
        raise ValueError(f"state: expected one of {', '.join(EXPORT_STATES)}, got {state!r}")
    if not isinstance(model.characters, ByteCharacters):
        raise ConfigError("char_cnn.characters: the ONNX export takes bilm-tf's character ids; this model reads "
                          "ELMoForManyLangs' dictionary ids, which the graph cannot make")
    lstm = model.config.lstm
    b = _Builder([], [])
    b.weight("one", np.array(1.0, dtype=np.float32))
    b.weight("zero", np.array(0.0, dtype=np.float32))
    b.weight("forget_bias", np.array(1.0, dtype=np.float32))  # elmo.model.network.FORGET_BIAS, not in the bias
    b.weight("gate_split", np.array([lstm.dim] * 4, dtype=np.int64))
    masks = _masks(b)
    tokens = b.node("Mul", [_token_encoder(model, b, "char_ids", masks.batch_time), masks.keep_float],
                    "tokens_masked")
    initial = _initial_state(model, state)
    if initial is not None:
        b.weight("initial_c", initial[0])
        b.weight("initial_h", initial[1])
    outputs, finals_c, finals_h = {}, [], []
    for d, (direction, layers) in enumerate((("forward", model.forward_layers), ("backward", model.backward_layers))):
        outputs[direction], final_c, final_h = _direction(b, lstm, d, direction, layers, tokens, masks,
                                                          initial is not None)
        finals_c.append(final_c)
        finals_h.append(final_h)
    _layers_output(b, tokens, outputs, masks.token_mask)
    proto = _model_proto(b, model, state, finals_c, finals_h)
    from elmo.version import __version__

    helper.set_model_props(proto, {"elmo_version": __version__, "state": state, "n_layers": str(lstm.n_layers),
                                   "output_dim": str(2 * lstm.projection_dim),
                                   "char_ids": "bilm-tf, with <S> and </S> rows"})
    proto.ir_version = min(proto.ir_version, 8)  # what onnxruntime 1.13+ reads (opset 17's IR)
    return proto


@dataclass
class _Masks:
    """The graph's names for which rows are real: ``token_mask`` (batch, time + 2) bool, ``lengths``
    (batch,), ``keep`` (batch, time + 2, 1) bool and ``keep_float``, and the shapes ``batch_time``, ``batch``."""

    token_mask: str
    lengths: str
    keep: str
    keep_float: str
    batch_time: str
    batch: str


def _masks(b: "_Builder") -> _Masks:
    """Which rows of ``char_ids`` are real: a boundary or a token, where any of its ids is non-zero (as in bilm-tf)."""
    from onnx import TensorProto

    token_mask = b.node("Greater", [b.node("ReduceMax", [b.node("Cast", ["char_ids"], to=TensorProto.FLOAT)],
                                           "row_max", axes=[2], keepdims=0), "zero"], "token_mask")
    lengths = b.node("ReduceSum", [b.node("Cast", [token_mask], to=TensorProto.INT64),
                                   b.weight("time_axis", np.array([1], dtype=np.int64))], "lengths", keepdims=0)
    keep = b.node("Unsqueeze", [token_mask, b.weight("last_axis", np.array([2], dtype=np.int64))], "keep")
    keep_float = b.node("Cast", [keep], "keep_float", to=TensorProto.FLOAT)
    batch_time = b.node("Shape", ["char_ids"], "batch_time", start=0, end=2)
    batch = b.node("Shape", ["char_ids"], "batch", start=0, end=1)
    return _Masks(token_mask, lengths, keep, keep_float, batch_time, batch)


def _direction(b: "_Builder", lstm, d: int, direction: str, layers, tokens: str, masks: _Masks,
               initial_per_row: bool) -> tuple[list[str], str, str]:
    """One direction's LSTM stack over ``tokens`` (the backward one on the reversed sequence, its
    outputs reversed back): the layers' outputs (batch, time + 2, proj) and the final ``c``
    (L, batch, dim) and ``h`` (L, batch, proj)."""
    x = tokens if d == 0 else b.node("ReverseSequence", [tokens, masks.lengths], "backward_in", batch_axis=0,
                                     time_axis=1)
    layer_outputs, layer_c, layer_h = [], [], []
    for index, layer in enumerate(layers):
        prefix = f"{direction}{index}"
        out, c_final, h_final = _lstm_layer(b, lstm, layer, prefix, d, index, x, masks, initial_per_row)
        if index > 0 and lstm.use_skip_connections:
            out = b.node("Add", [out, x], f"{prefix}_residual")  # the output only: the state stays the cell's
        layer_outputs.append(out)
        layer_c.append(b.node("Unsqueeze", [c_final, b.weight(f"{prefix}_axis0", np.array([0], dtype=np.int64))]))
        layer_h.append(b.node("Unsqueeze", [h_final, f"{prefix}_axis0"]))
        x = out
    if d == 1:
        layer_outputs = [b.node("ReverseSequence", [out, masks.lengths], "backward_out", batch_axis=0, time_axis=1)
                         for out in layer_outputs]
    return (layer_outputs, b.node("Concat", layer_c, f"{direction}_c", axis=0),
            b.node("Concat", layer_h, f"{direction}_h", axis=0))


def _lstm_layer(b: "_Builder", lstm, layer, prefix: str, d: int, index: int, x: str, masks: _Masks,
                initial_per_row: bool) -> tuple[str, str, str]:
    """One LSTM layer as a ``Scan`` over time: its input product for all steps at once, then the
    step (:func:`_lstm_body`) from this layer's slice of the initial state. Returns the names of
    its output (batch, time + 2, proj), final ``c`` and final ``h``."""
    dim, proj = lstm.dim, lstm.projection_dim
    starts = []
    b.weight(f"{prefix}_d", np.array(d, dtype=np.int64))
    for part, size in (("c", dim), ("h", proj)):
        # This layer's (batch, size) slice of the initial state (2, L, rows, size).
        one = b.node("Gather", [b.node("Gather", [f"initial_{part}", f"{prefix}_d"],
                                       axis=0), b.weight(f"{prefix}_{part}_l", np.array(index, dtype=np.int64))], axis=0)
        if initial_per_row:  # one row for every sentence
            one = b.node("Expand", [one, b.node("Concat", [masks.batch, b.weight(f"{prefix}_{part}_size",
                                                                                 np.array([size], dtype=np.int64))],
                                                axis=0)], f"{prefix}_{part}0")
        starts.append(one)
    x_gates = b.node("Add", [b.node("MatMul", [x, b.weight(f"{prefix}_input_t", _array(layer.input_weight).T)]),
                             b.weight(f"{prefix}_bias", _array(layer.bias))], f"{prefix}_x_gates")
    b.weight(f"{prefix}_state_t", _array(layer.state_weight).T)
    b.weight(f"{prefix}_projection_t", _array(layer.projection).T)
    for clip, which in ((lstm.cell_clip, "cell"), (lstm.proj_clip, "proj")):
        if clip is not None:
            b.weight(f"{prefix}_{which}_min", np.array(-clip, dtype=np.float32))
            b.weight(f"{prefix}_{which}_max", np.array(clip, dtype=np.float32))
    body = _lstm_body(layer, prefix, lstm.cell_clip, lstm.proj_clip)
    c_final, h_final, out = b.node("Scan", [*starts, x_gates, masks.keep], f"{prefix}_scan", outputs=3, body=body,
                                   num_scan_inputs=2, scan_input_axes=[1, 1], scan_output_axes=[1])
    return out, c_final, h_final


def _layers_output(b: "_Builder", tokens: str, outputs: dict[str, list[str]], token_mask: str) -> None:
    """The graph's outputs ``layers`` (batch, L+1, time, 2*proj), the token layer twice then each
    layer's two directions, boundary rows dropped and padding zero, and ``mask`` (batch, time)."""
    from onnx import TensorProto, helper

    stack = [b.node("Concat", [tokens, tokens], "layer0", axis=2)]
    stack += [b.node("Concat", [f, bw], f"layer{k + 1}", axis=2)
              for k, (f, bw) in enumerate(zip(outputs["forward"], outputs["backward"]))]
    axis1 = b.weight("axis1", np.array([1], dtype=np.int64))
    stacked = b.node("Concat", [b.node("Unsqueeze", [layer, axis1]) for layer in stack], "stacked", axis=1)
    # Drop the boundary rows: token t is row t + 1, real while row t + 2 is (the </S> row then follows).
    cut = b.node("Slice", [stacked, b.weight("cut_start", np.array([1], dtype=np.int64)),
                           b.weight("cut_end", np.array([-1], dtype=np.int64)),
                           b.weight("cut_axis", np.array([2], dtype=np.int64))], "cut")
    out_mask = b.node("Slice", [token_mask, b.weight("mask_start", np.array([2], dtype=np.int64)),
                                b.weight("mask_end", np.array([INT64_MAX], dtype=np.int64)), axis1], "out_mask")
    out_keep = b.node("Cast", [b.node("Unsqueeze", [b.node("Unsqueeze", [out_mask, axis1]),
                                                    b.weight("axis3", np.array([3], dtype=np.int64))])],
                      "out_keep", to=TensorProto.FLOAT)
    b.nodes.append(helper.make_node("Mul", [cut, out_keep], ["layers"]))
    b.nodes.append(helper.make_node("Identity", [out_mask], ["mask"]))


def _model_proto(b: "_Builder", model: BiLM, state: str, finals_c: list[str], finals_h: list[str]) -> "onnx.ModelProto":
    """The graph's inputs and outputs (in stateful mode also the state in and out) around its nodes, as a model."""
    from onnx import TensorProto, helper

    lstm = model.config.lstm
    n_layers, dim, proj = lstm.n_layers, lstm.dim, lstm.projection_dim
    value = helper.make_tensor_value_info
    width = model.token_encoder.n_slots
    inputs = [value("char_ids", TensorProto.INT64, ["batch", "time_with_boundaries", width])]
    graph_outputs = [value("layers", TensorProto.FLOAT, ["batch", n_layers + 1, "time", 2 * proj]),
                     value("mask", TensorProto.BOOL, ["batch", "time"])]
    if state == "stateful":
        inputs += [value("initial_c", TensorProto.FLOAT, [2, n_layers, "batch", dim]),
                   value("initial_h", TensorProto.FLOAT, [2, n_layers, "batch", proj])]
        b.weight("axis0", np.array([0], dtype=np.int64))
        b.nodes.append(helper.make_node("Concat", [b.node("Unsqueeze", [c, "axis0"]) for c in finals_c], ["final_c"],
                                        axis=0))
        b.nodes.append(helper.make_node("Concat", [b.node("Unsqueeze", [h, "axis0"]) for h in finals_h],
                                        ["final_h"], axis=0))
        graph_outputs += [value("final_c", TensorProto.FLOAT, [2, n_layers, "batch", dim]),
                          value("final_h", TensorProto.FLOAT, [2, n_layers, "batch", proj])]
    inputs[0].doc_string = ("bilm-tf character ids (batch, time + 2, 50) int64: <S>, one row per token, </S>, "
                            "then zero rows (docs/onnx.md)")
    graph = helper.make_graph(b.nodes, "elmo_bilm", inputs, graph_outputs, b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="elmo",
                             doc_string="ELMo biLM (elmo export --format onnx); inputs and outputs: docs/onnx.md")


def weight_bytes(proto: "onnx.ModelProto") -> int:
    """Bytes of the weights (initializers, outer graph only) of ``proto``."""
    return sum(len(t.raw_data) for t in proto.graph.initializer)


# An export's temporary folder beside its target: ``.elmo-onnx-<pid>-<32 hex digits>``; those of
# processes that have died (killed mid-export) are removed by the next export into that folder.
_ONNX_TEMPORARY = re.compile(r"\.elmo-onnx-(?P<pid>\d+)-[0-9a-f]{32}")


def external_data_name(path: str | os.PathLike, digest: str) -> str:
    """The name of the external-data file of the graph ``path`` whose weights' SHA-256 is
    ``digest``: ``NAME.onnx.<first 16 hex digits>.data``."""
    return f"{os.path.basename(os.fspath(path))}.{digest[:16]}.data"


def weights_digest(proto: "onnx.ModelProto") -> str:
    """SHA-256 of the weights of ``proto`` (each initializer's name and bytes, in order): what
    names its external-data file and is kept in the graph's metadata (``weights_sha256``)."""
    digest = hashlib.sha256()
    for tensor in proto.graph.initializer:
        digest.update(tensor.name.encode() + b"\0" + len(tensor.raw_data).to_bytes(8, "little"))
        digest.update(tensor.raw_data)
    return digest.hexdigest()


def remove_stale_exports(path: str | os.PathLike) -> list[str]:
    """Delete the temporary folders that exports killed mid-way left beside ``path`` (only
    folders of elmo's naming whose process has died). Returns the removed paths."""
    from elmo.fileio import _process_alive

    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            match = _ONNX_TEMPORARY.fullmatch(name)
            if match and int(match.group("pid")) != os.getpid() and not _process_alive(int(match.group("pid"))):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
                removed.append(os.path.join(folder, name))
    return removed


def _old_data_files(path: Path, keep: str) -> list[Path]:
    """External-data files of earlier exports to ``path`` (elmo's naming), but ``keep``."""
    pattern = re.compile(re.escape(path.name) + r"\.[0-9a-f]{16}\.data")
    with contextlib.suppress(OSError):
        return [path.parent / n for n in os.listdir(path.parent) if pattern.fullmatch(n) and n != keep]
    return []


def export_onnx(model: BiLM, path: str | os.PathLike, state: str = "warm", overwrite: bool = False,
                external_data_bytes: int = EXTERNAL_DATA_BYTES) -> list[Path]:
    """Write ``model`` as ONNX to ``path`` (:func:`build_onnx`), atomically; weights of more than
    ``external_data_bytes`` go to a data file beside it (:func:`external_data_name`). Returns the
    files written.

    The two files of an external-data export are never a mismatched pair, whenever the process is
    killed: the data file's name is its weights' digest (also in the graph's metadata,
    ``weights_sha256``), so a new export never writes over the data an old graph reads. Both are
    written in a fresh folder beside the target, the data moved into place first, then the graph;
    the data files of earlier exports to ``path`` are deleted only after that (with
    ``overwrite``, so is the ``NAME.onnx.data`` of earlier versions)."""
    onnx = _require_onnx()
    from elmo.fileio import atomic_path, check_output_file, give_plain_permissions

    path = Path(path)
    check_output_file(path, overwrite, option="--output")
    proto = build_onnx(model.eval(), state)
    if weight_bytes(proto) <= external_data_bytes:
        with atomic_path(path) as tmp:
            onnx.save_model(proto, tmp)
        return [path]
    remove_stale_exports(path)
    digest = weights_digest(proto)
    helper = onnx.helper
    helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, "weights_sha256": digest})
    data = path.with_name(external_data_name(path, digest))
    check_output_file(data, True)  # an input in its place is refused; an earlier same-weights file is replaced
    folder = path.parent / f".elmo-onnx-{os.getpid()}-{uuid.uuid4().hex}"
    os.mkdir(folder, 0o700)
    try:
        onnx.save_model(proto, str(folder / path.name), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data.name, size_threshold=1024)
        for name in (data.name, path.name):  # as any file the user writes (onnx makes its data file 0600)
            give_plain_permissions(folder / name)
        os.replace(folder / data.name, data)  # a new name: the data of the graph in place is untouched
        os.replace(folder / path.name, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    legacy = path.with_name(path.name + ".data")
    for old in _old_data_files(path, data.name) + ([legacy] if overwrite and legacy.is_file() else []):
        with contextlib.suppress(FileNotFoundError):
            os.remove(old)
    return [path, data]


__all__ = ["EXPORT_STATES", "EXTERNAL_DATA_BYTES", "OPSET", "build_onnx", "export_onnx", "external_data_name",
           "onnx_char_ids", "remove_stale_exports", "weight_bytes", "weights_digest"]
