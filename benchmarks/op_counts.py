"""Operations in one training window of the LSTM: the fused path, and the pre-#37 path of an old
checkout beside it.

A window is what one training step runs through the LSTM: 2 layers x 2 directions x 20 steps,
forward and backward (the layers only: no encoder, dropout or softmax). Every aten operation that
reaches the dispatcher is counted (``TorchDispatchMode``), and split into views and bookkeeping
(``view``, ``t``, ``select``, ``unbind``, ``detach``, ``empty``, ...), which launch no kernel, and
the rest ("kernels"). The fused path is counted twice: as it runs eagerly (each pointwise function
is several kernels) and with each pointwise function counted as the one kernel ``torch.compile``
makes of it on a GPU (``--compile-cells``). The counter and the window are
``tests/op_counting.py``'s, the ones ``tests/test_fused_lstm.py`` holds to their ceilings.

The pre-#37 path (``lstm_fast`` of commit 167ab73, one layer and direction at a time) is counted
in a process of its own on that commit's ``src/`` when ``--before-src`` names it; without it that
row is left out and the JSON says so::

    BEFORE=$(mktemp -d) && git archive 167ab73 src | tar -x -C $BEFORE
    python benchmarks/op_counts.py --before-src $BEFORE/src --output results/benchmarks/op_counts.json
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# In a process on the old checkout: its lstm_fast through this tree's window counter.
BEFORE = """
import json
from elmo.model.lstm import lstm_fast
from op_counting import count_window
rows = {}
for bf16 in (False, True):
    counter = count_window("per-direction", bf16, lstm=lstm_fast)
    rows["bf16" if bf16 else "float32"] = {"total": counter.total, "kernels": counter.kernels,
                                           "by_name": dict(counter.by_name.most_common())}
print(json.dumps(rows))
"""


def main(argv: list[str] | None = None) -> int:
    from common import run_in_checkout, write_results
    from op_counting import count_window

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-src", metavar="DIR", help="src/ of the commit whose per-direction lstm_fast to "
                        "count beside the fused path (167ab73: the pre-#37 path)")
    parser.add_argument("--output", default="results/benchmarks/op_counts.json")
    args = parser.parse_args(argv)
    before = run_in_checkout(args.before_src, BEFORE) if args.before_src else None
    rows = []
    for bf16 in (False, True):
        precision = "bf16 autocast" if bf16 else "float32"
        old = before["bf16" if bf16 else "float32"] if before else None
        counted = [("fused, eager", count_window("fused", bf16)),
                   ("fused, pointwise compiled", count_window("fused", bf16, units=True))]
        if old:
            rows.append({"path": "before (per-direction lstm_fast)", "precision": precision, "all_ops": old["total"],
                         "kernels": old["kernels"], "legacy_kernels_per_kernel": 1.0, "by_name": old["by_name"]})
        for name, counter in counted:
            rows.append({"path": name, "precision": precision, "all_ops": counter.total, "kernels": counter.kernels,
                         "legacy_kernels_per_kernel": old["kernels"] / counter.kernels if old else None,
                         "by_name": dict(counter.by_name.most_common())})
    print(f"{'path':34} {'precision':14} {'all ops':>8} {'kernels':>8} {'before / this':>14}   "
          f"(one window: 2 layers x 2 directions x 20 steps, forward + backward)")
    for r in rows:
        ratio = r["legacy_kernels_per_kernel"]
        print(f"{r['path']:34} {r['precision']:14} {r['all_ops']:>8} {r['kernels']:>8} "
              f"{'' if ratio is None else f'{ratio:.1f}':>14}")
    write_results(args.output, {"window": "2 layers x 2 directions x 20 steps, batch 8, forward + backward",
                                "before_src": args.before_src or None,
                                "before": "counted" if before else "skipped: no --before-src given", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
