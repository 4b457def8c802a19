"""CUDA graphs for the biLM's LSTM stack at inference: the step loop replayed, not relaunched.

On a GPU, a layer-step of the eager path (:func:`~elmo.kernels.cpu_lstm.bilstm_inference`) is about ten
small kernels, and a batch of 64 sentences of 25 tokens launches thousands of them: the host's
launches, not the GPU, set the pace. A CUDA graph records the kernels of ``K`` steps of every layer
once and replays them with one launch.

A graph needs static shapes and no host synchronisation, so it runs
:func:`~elmo.kernels.cpu_lstm.bilstm_static_chunk`: every row at every step, masked. Shapes are
bucketed: rows up to the next size in :data:`ROW_BUCKETS` (empty rows), time in chunks of
``K`` steps (one replay per chunk, the state carried in the graph's buffers). A bucket is
captured only when it has been seen ``capture_after`` times, so embedding one sentence never
pays for a capture; before that, and for batches larger than the largest bucket, the eager path
runs. The results equal the eager path's to the rounding of the matrix products (whose shapes
differ). A graph holds the weights it was captured with: when the runtime restacks them (the
model's parameters changed), every graph is dropped.

:class:`LstmGraphs` also runs without CUDA (``capture=False``): the same buckets, buffers and
chunks, with the static loop called directly instead of replayed. The tests check the whole
mechanism that way on a CPU, and the capture itself on a GPU (tests/test_cuda.py).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from elmo.checks import check_count
from elmo.kernels.cpu_lstm import StackedWeights, bilstm_static_chunk
from elmo.model.network import LstmLayer

# Row counts a graph is captured for: a batch takes the smallest that holds it.
ROW_BUCKETS = (8, 16, 32, 64, 128, 256, 512)
# Steps per replay. Longer chunks launch less but pad more of the last chunk.
CHUNK_STEPS = 16
# The input half of the gates of one chunk stays below this many bytes (chunks shrink for wide models).
CHUNK_GATE_BYTES = 256 << 20


@dataclass
class _Graph:
    """One bucket's static buffers (see :func:`bilstm_static_chunk`) and its captured graph."""

    inputs: torch.Tensor   # (K, 2, R, input_dim)
    keep: torch.Tensor     # (K, 1, R, 1) float32
    c: torch.Tensor        # (L, 2, R, dim)
    h: torch.Tensor        # (L, 2, R, proj)
    outputs: torch.Tensor  # (L, K, 2, R, proj)
    graph: "torch.cuda.CUDAGraph | None" = None


class LstmGraphs:
    """Bucketed graphs of the LSTM stack of ``layers`` (pairs of forward and backward layers,
    bottom first), products in ``dtype``. See the module docstring.

    ``capture``: record CUDA graphs (default: when the layers are on a GPU); without it the
    static loop runs directly. ``capture_after``: sightings of a bucket before it is captured.
    ``max_graphs``: graphs kept at once (the least recently used is dropped).
    """

    def __init__(self, layers: Sequence[tuple[LstmLayer, LstmLayer]], dtype: torch.dtype,
                 skip_connections: bool, *, capture: bool | None = None, capture_after: int = 2,
                 max_graphs: int = 8, steps: int | None = None):
        check_count(capture_after, "capture_after")
        self.layers = list(layers)
        self.dtype, self.skip_connections = dtype, skip_connections
        self.device = self.layers[0][0].state_weight.device
        self.capture = self.device.type == "cuda" if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need the model on a CUDA device; it is on {self.device}")
        self.capture_after, self.max_graphs = capture_after, max_graphs
        self.steps = steps
        self.seen: Counter = Counter()
        self.graphs: OrderedDict[int, _Graph] = OrderedDict()
        self.replays = 0  # chunks run through graphs (or the static loop without capture)
        self.captures = 0
        self.disabled: str | None = None  # why graphs are off (a failed capture), if they are
        self._weights_key: tuple | None = None
        self._weights: list[StackedWeights] = []

    def rows_bucket(self, batch: int) -> int | None:
        """The bucket of a batch of ``batch`` rows, or None when it is larger than any."""
        return next((size for size in ROW_BUCKETS if size >= batch), None)

    def chunk_steps(self, rows: int) -> int:
        """Steps per replay for ``rows`` rows: :data:`CHUNK_STEPS`, fewer where the chunk's input
        gates would pass :data:`CHUNK_GATE_BYTES`."""
        if self.steps is not None:
            return self.steps
        dim = self.layers[0][0].dim
        fits = CHUNK_GATE_BYTES // (2 * rows * 4 * dim * 4)
        return max(1, min(CHUNK_STEPS, fits))

    def run(self, x: torch.Tensor, lengths: torch.Tensor, c: torch.Tensor, h: torch.Tensor,
            weights: Sequence[StackedWeights]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor] | None:
        """Every layer over ``x`` ``(2, batch, time, input_dim)`` (each direction in its reading
        order, zero at padding) with ``lengths`` ``(batch,)`` and initial states ``c``
        ``(2, L, batch, dim)``, ``h`` ``(2, L, batch, proj)``; ``weights`` each layer's
        :class:`StackedWeights`. Returns each layer's outputs ``(2, batch, time, proj)`` (residual
        included, zero at padding) and the final ``(c, h)`` as ``(2, L, batch, ...)``; or None
        where the eager path should run (a bucket not seen often enough yet, a batch too large,
        graphs disabled)."""
        if self.disabled is not None:
            return None
        _, batch, time, input_dim = x.shape
        rows = self.rows_bucket(batch)
        if rows is None or time == 0:
            return None
        key = tuple(id(t) for w in weights for t in (w.input, w.state, w.projection, w.bias))
        if key != self._weights_key:  # restacked: the old graphs read the old weights
            self.graphs.clear()
            self.seen.clear()
            self._weights_key, self._weights = key, list(weights)
        self.seen[rows] += 1
        graph = self.graphs.get(rows)
        if graph is None:
            if self.seen[rows] < self.capture_after:
                return None
            graph = self._build(rows, input_dim)
            if graph is None:
                return None
        self.graphs.move_to_end(rows)
        return self._replay(graph, rows, x, lengths, c, h)

    # ------------------------------------------------------------------------------ internals
    def _static_chunk(self, graph: _Graph) -> None:
        bilstm_static_chunk(self.layers, self._weights, graph.inputs, graph.keep, graph.c, graph.h,
                            graph.outputs, self.dtype, self.skip_connections)

    def _build(self, rows: int, input_dim: int) -> _Graph | None:
        """Buffers for a bucket of ``rows`` rows, and its graph when capturing; None (and graphs
        disabled, with a warning) when the capture fails."""
        while len(self.graphs) >= self.max_graphs:
            self.graphs.popitem(last=False)
        first = self.layers[0][0]
        n_layers, dim, proj, steps = len(self.layers), first.dim, first.projection_dim, self.chunk_steps(rows)
        # Ordinary tensors even when called under inference mode: callers copy into them later
        # outside it (Elmo runs under no_grad), which inference tensors refuse.
        with torch.inference_mode(False), torch.no_grad():
            options = {"device": self.device, "dtype": torch.float32}
            graph = _Graph(torch.zeros(steps, 2, rows, input_dim, **options), torch.zeros(steps, 1, rows, 1, **options),
                           torch.zeros(n_layers, 2, rows, dim, **options), torch.zeros(n_layers, 2, rows, proj, **options),
                           torch.zeros(n_layers, steps, 2, rows, proj, **options))
            if self.capture:
                try:
                    graph.graph = self._capture(graph)
                except Exception as error:  # any capture failure: eager from now on, said once
                    self.disabled = f"{type(error).__name__}: {error}"
                    warnings.warn(f"CUDA graphs are off for this runtime: capturing one failed ({self.disabled}); "
                                  f"running the eager path", stacklevel=4)
                    return None
        self.graphs[rows] = graph
        self.captures += 1
        return graph

    def _capture(self, graph: _Graph) -> "torch.cuda.CUDAGraph":
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up outside the capture: cuBLAS handles, workspaces, allocator
                self._static_chunk(graph)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            self._static_chunk(graph)
        return cuda_graph

    def _replay(self, graph: _Graph, rows: int, x: torch.Tensor, lengths: torch.Tensor, c: torch.Tensor,
                h: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        _, batch, time, input_dim = x.shape
        steps = graph.inputs.shape[0]
        n_chunks = math.ceil(time / steps)
        padded_time = n_chunks * steps
        n_layers = len(self.layers)
        # Time-major, padded with empty rows and steps (zero inputs, never kept).
        inputs = x.new_zeros(padded_time, 2, rows, input_dim, dtype=torch.float32)
        inputs[:time, :, :batch] = x.permute(2, 0, 1, 3)
        padded_lengths = torch.zeros(rows, dtype=lengths.dtype, device=lengths.device)
        padded_lengths[:batch] = lengths
        keep = (torch.arange(padded_time, device=lengths.device).unsqueeze(1) < padded_lengths.unsqueeze(0))
        keep = keep.to(torch.float32).view(padded_time, 1, rows, 1)
        graph.c.zero_()
        graph.h.zero_()
        graph.c[:, :, :batch] = c.transpose(0, 1)
        graph.h[:, :, :batch] = h.transpose(0, 1)
        outputs = x.new_empty(n_layers, padded_time, 2, rows, graph.outputs.shape[-1], dtype=torch.float32)
        for chunk in range(n_chunks):
            window = slice(chunk * steps, (chunk + 1) * steps)
            graph.inputs.copy_(inputs[window])
            graph.keep.copy_(keep[window])
            if graph.graph is not None:
                graph.graph.replay()
            else:
                self._static_chunk(graph)
            outputs[:, window] = graph.outputs
            self.replays += 1
        final_c = graph.c[:, :, :batch].transpose(0, 1).clone()
        final_h = graph.h[:, :, :batch].transpose(0, 1)
        # A row that never ran keeps its initial state exactly (in reduced precision the graph
        # carries h rounded to that precision).
        final_h = torch.where((lengths > 0).view(1, 1, batch, 1), final_h, h)
        layers = [outputs[index, :time, :, :batch].permute(1, 2, 0, 3) for index in range(n_layers)]
        return layers, final_c, final_h


__all__ = ["CHUNK_STEPS", "ROW_BUCKETS", "LstmGraphs"]
