"""Operator counters for the tests' kernel ceilings, shared with the benchmarks that report the
same counts (``benchmarks/common.py`` re-exports :class:`OpCounter`; ``benchmarks/op_counts.py``,
in git at commit 14c9fa4, used :func:`count_window`), so a documented count and the ceiling a test
holds it to are counted the same way. A test helper, not library code: nothing under ``src/`` imports it.

Two counters, because two sets of ceilings were measured with them:

* :class:`OpCounter` (the inference kernel's budget per layer-step, the CUDA-graph machinery):
  views and allocations launch nothing, and a ``.to()``/``.contiguous()``/``reshape`` counts only
  where it copied.
* :class:`WindowCounter` (one training window of the LSTM, ``count_window``): a fixed set of
  view and bookkeeping operators launch nothing; everything else is one kernel. Its
  :meth:`~WindowCounter.as_one` counts a whole function as one kernel (what ``torch.compile``
  makes of a pointwise function on a GPU).
"""

from __future__ import annotations

import collections
import contextlib
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

# Operators that launch no kernel: they only make a new view or tensor header, or allocate.
_NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
              "lift_fresh", "set_", "resize_", "_local_scalar_dense", "view", "_unsafe_view", "reshape", "t",
              "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "as_strided", "split",
              "split_with_sizes", "chunk", "unbind", "resolve_conj", "resolve_neg", "view_as"}
# Operators that copy only when they must: counted when their result has its own storage.
_MAYBE_COPY = {"to", "contiguous", "reshape", "type_as", "flatten"}


class OpCounter(TorchDispatchMode):
    """Counts the ATen operators dispatched while active (a ``with`` block), forward and backward.

    :attr:`total` counts every operator; :attr:`kernels` those that launch a kernel on a GPU:
    not views or allocations, and a ``.to()``, ``.contiguous()`` or ``reshape`` only where it
    copied. (Under inference mode such composite operators arrive whole; elsewhere as the copy
    they make.)
    """

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.no_ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.ops[func] += 1
        if func.overloadpacket.__name__ in _MAYBE_COPY and isinstance(result, torch.Tensor) \
                and result.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr():
            self.no_ops[func] += 1
        return result

    @staticmethod
    def launches_kernel(func) -> bool:
        name = func.overloadpacket.__name__
        return name in _MAYBE_COPY or not (func.is_view or name in _NO_KERNEL)

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def kernels(self) -> int:
        return sum(n - self.no_ops[func] for func, n in self.ops.items() if self.launches_kernel(func))

    def table(self) -> dict[str, int]:
        """Operator name -> kernel-launching calls, most frequent first."""
        counts = Counter({str(func): n - self.no_ops[func] for func, n in self.ops.items()
                          if self.launches_kernel(func)})
        return {name: n for name, n in counts.most_common() if n}


# Operations that only make views or do bookkeeping in a training window: no kernel runs.
NOT_KERNELS = frozenset({
    "detach", "t", "view", "select", "split", "split_with_sizes", "unbind", "chunk", "expand", "as_strided", "slice",
    "unsqueeze", "squeeze", "transpose", "permute", "_unsafe_view", "alias", "empty", "empty_like", "empty_strided",
    "_reshape_alias", "lift_fresh", "new_empty", "view_as",
})


class WindowCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while active: ``total``, ``kernels`` (see
    :data:`NOT_KERNELS`) and ``by_name`` (kernels per operation). :meth:`as_one` wraps a function
    so that each call counts as one kernel and nothing inside it is counted."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.kernels = 0
        self.by_name: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.total += 1
        if name not in NOT_KERNELS:
            self.kernels += 1
            self.by_name[name] += 1
        return func(*args, **(kwargs or {}))

    def as_one(self, function):
        def counted(*args, **kwargs):
            self.total += 1
            self.kernels += 1
            self.by_name[getattr(function, "__name__", "unit")] += 1
            with _disable_current_modes():
                return function(*args, **kwargs)
        return counted


@contextlib.contextmanager
def cells_counted_as_one(counter: WindowCounter):
    """Within the block, the fused path's compiled pointwise functions (``compiled=True``) are the
    eager ones, each counted as one kernel: the compiled path's code, without compiling."""
    import elmo.kernels.fused_lstm as fused

    compiled = fused._compiled_cells
    fused._compiled_cells = fused.CellFunctions(*(counter.as_one(f) for f in fused.EAGER_CELLS))
    try:
        yield
    finally:
        fused._compiled_cells = compiled


def window_layers(seed: int = 0, dim: int = 32, projection_dim: int = 16, clip: float | None = 3.0):
    """Two directions x two layers of the given sizes (the packaged model's clips)."""
    from elmo.model.network import LstmLayer

    torch.manual_seed(seed)
    return [[LstmLayer(projection_dim, dim, projection_dim, clip, clip) for _ in range(2)] for _ in range(2)]


def count_window(path: str, bf16: bool = False, units: bool = False, batch: int = 8, steps: int = 20,
                 layers=None, lstm=None) -> WindowCounter:
    """Count one window's forward and backward on the CPU (2 layers x 2 directions x ``steps``
    steps of ``batch`` rows): ``path`` ``"fused"`` (:func:`lstm_fused`, both directions of a layer
    at once; ``units``: its pointwise functions count as one kernel each) or ``"per-direction"``
    (one layer and direction at a time through ``lstm(layer, inputs, mask, state)``, e.g. an old
    checkout's ``lstm_fast``, as ``benchmarks/op_counts.py --before-src`` ran it at commit 14c9fa4)."""
    layers = layers or window_layers()
    dim, proj = layers[0][0].dim, layers[0][0].projection_dim
    inputs = torch.randn(2, batch, steps, proj, requires_grad=True)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    params = [p for stack in layers for layer in stack for p in layer.parameters()]
    for p in [inputs, *params]:
        p.grad = None
    state = (torch.zeros(2, batch, dim), torch.zeros(2, batch, proj))  # a carried (detached) state
    if path == "per-direction" and lstm is None:
        raise ValueError("path 'per-direction' needs the lstm function to count")
    if path not in ("fused", "per-direction"):
        raise ValueError(f"path: fused or per-direction, got {path!r}")
    if path == "fused":
        from elmo.kernels.fused_lstm import lstm_fused  # imported before counting starts
    counter = WindowCounter()
    with counter, (cells_counted_as_one(counter) if units else contextlib.nullcontext()):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if path == "per-direction":
                tops = []
                for direction in range(2):
                    x = inputs[direction]
                    for layer in layers[direction]:
                        x, _ = lstm(layer, x, mask, (state[0][direction], state[1][direction]))
                    tops.append(x)
                top = torch.stack(tops)
            else:
                x = inputs.transpose(1, 2)
                for index in range(2):
                    x, _ = lstm_fused([layers[0][index], layers[1][index]], x, state, compiled=units)
                top = x
            loss = top.float().sum()
        loss.backward()
    return counter
