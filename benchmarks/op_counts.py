"""Operations in one training window of the LSTM: the pre-#37 path against the fused one.

A window is what one training step runs through the LSTM: 2 layers x 2 directions x 20 steps,
forward and backward (the layers only: no encoder, dropout or softmax). Every aten operation that
reaches the dispatcher is counted (``TorchDispatchMode``), and split into views and bookkeeping
(``view``, ``t``, ``select``, ``unbind``, ``detach``, ``empty``, ...), which launch no kernel, and
the rest ("kernels"). The fused path is counted twice: as it runs eagerly (each pointwise function
is several kernels) and with each pointwise function counted as the one kernel ``torch.compile``
makes of it on a GPU (``--compile-cells``).

    python benchmarks/op_counts.py --output results/benchmarks/op_counts.json

``tests/test_fused_lstm.py`` holds the counts to their ceilings.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Operations that only make views or do bookkeeping: no kernel runs.
NOT_KERNELS = frozenset({
    "detach", "t", "view", "select", "split", "split_with_sizes", "unbind", "chunk", "expand", "as_strided", "slice",
    "unsqueeze", "squeeze", "transpose", "permute", "_unsafe_view", "alias", "empty", "empty_like", "empty_strided",
    "_reshape_alias", "lift_fresh", "new_empty", "view_as",
})


class OpCounter(TorchDispatchMode):
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
def cells_counted_as_one(counter: OpCounter):
    """Within the block, the fused path's compiled pointwise functions (``compiled=True``) are the
    eager ones, each counted as one kernel: the compiled path's code, without compiling."""
    import elmo.model.fused_lstm as fused

    compiled = fused._compiled_cells
    fused._compiled_cells = fused.CellFunctions(*(counter.as_one(f) for f in fused.EAGER_CELLS))
    try:
        yield
    finally:
        fused._compiled_cells = compiled


def window_layers(seed: int = 0, dim: int = 32, projection_dim: int = 16, clip: float | None = 3.0):
    """Two directions x two layers of the given sizes (the packaged model's clips)."""
    from elmo.model.lstm import LstmLayer

    torch.manual_seed(seed)
    return [[LstmLayer(projection_dim, dim, projection_dim, clip, clip) for _ in range(2)] for _ in range(2)]


def count_window(path: str, bf16: bool = False, units: bool = False, batch: int = 8, steps: int = 20,
                 layers=None) -> OpCounter:
    """Count one window's forward and backward on the CPU: ``path`` ``"legacy"`` (the pre-#37
    ``lstm_fast``, one layer and direction at a time) or ``"fused"`` (:func:`lstm_fused`, both
    directions of a layer at once); ``units``: the fused pointwise functions count as one each."""
    from legacy_paths import lstm_fast_legacy

    from elmo.model.fused_lstm import lstm_fused

    layers = layers or window_layers()
    dim, proj = layers[0][0].dim, layers[0][0].projection_dim
    inputs = torch.randn(2, batch, steps, proj, requires_grad=True)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    params = [p for stack in layers for layer in stack for p in layer.parameters()]
    for p in [inputs, *params]:
        p.grad = None
    state = (torch.zeros(2, batch, dim), torch.zeros(2, batch, proj))  # a carried (detached) state
    counter = OpCounter()
    with counter, (cells_counted_as_one(counter) if units else contextlib.nullcontext()):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if path == "legacy":
                tops = []
                for direction in range(2):
                    x = inputs[direction]
                    for layer in layers[direction]:
                        x, _ = lstm_fast_legacy(layer, x, mask, (state[0][direction], state[1][direction]))
                    tops.append(x)
                top = torch.stack(tops)
            elif path == "fused":
                x = inputs.transpose(1, 2)
                for index in range(2):
                    x, _ = lstm_fused([layers[0][index], layers[1][index]], x, state, compiled=units)
                top = x
            else:
                raise ValueError(f"path: legacy or fused, got {path!r}")
            loss = top.float().sum()
        loss.backward()
    return counter


def main(argv: list[str] | None = None) -> int:
    from common import write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="results/benchmarks/op_counts.json")
    args = parser.parse_args(argv)
    rows = []
    for bf16 in (False, True):
        legacy = count_window("legacy", bf16)
        for name, counter in (("legacy (pre-#37 lstm_fast)", legacy), ("fused, eager", count_window("fused", bf16)),
                              ("fused, pointwise compiled", count_window("fused", bf16, units=True))):
            rows.append({"path": name, "precision": "bf16 autocast" if bf16 else "float32", "all_ops": counter.total,
                         "kernels": counter.kernels, "legacy_kernels_per_kernel": legacy.kernels / counter.kernels,
                         "by_name": dict(counter.by_name.most_common())})
    print(f"{'path':28} {'precision':14} {'all ops':>8} {'kernels':>8} {'legacy / this':>14}   "
          f"(one window: 2 layers x 2 directions x 20 steps, forward + backward)")
    for r in rows:
        print(f"{r['path']:28} {r['precision']:14} {r['all_ops']:>8} {r['kernels']:>8} {r['legacy_kernels_per_kernel']:>14.1f}")
    write_results(args.output, {"window": "2 layers x 2 directions x 20 steps, batch 8, forward + backward",
                                "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
