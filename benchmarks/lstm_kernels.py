"""The LSTM's matrix products by kernel: what decides which one the runtime uses.

For the small and original published sizes, at ``--rows`` rows per direction (the batch), both
directions at once, best of ``--repeats``:

* the recurrent product ``h (rows, proj) x W_h (proj, 4*dim)``: MKL's batched product in float32,
  oneDNN's (``elmo.model.lstm.onednn_linear``, bias in the kernel) in float32, and the batched product
  in bfloat16;
* the projection ``(rows, dim) x (dim, proj)``, float32 and bfloat16;
* the input half of the gates for ``--steps`` timesteps at once ``(rows*steps, proj) x W_x``.

Printed as GFLOP/s beside this machine's float32 and bfloat16 square-matmul peaks, and saved:

    python benchmarks/lstm_kernels.py --output results/benchmarks/lstm_kernels.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import matmul_peak_flops, write_results  # noqa: E402

from elmo.model.config import published_config  # noqa: E402
from elmo.model.lstm import onednn_linear  # noqa: E402


def best_seconds(run, repeats: int) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure(size: str, rows: int, steps: int, repeats: int) -> list[dict]:
    lstm = published_config(size).lstm
    dim, proj = lstm.dim, lstm.projection_dim
    torch.manual_seed(0)
    h, w_h = torch.randn(2, rows, proj), torch.randn(2, proj, 4 * dim)
    cell, w_p = torch.randn(2, rows, dim), torch.randn(2, dim, proj)
    x, w_x, bias = torch.randn(2, rows * steps, proj), torch.randn(2, proj, 4 * dim), torch.randn(2, 1, 4 * dim)
    onednn = [(w_h[d].t().contiguous().to_mkldnn(), bias[d, 0].contiguous().to_mkldnn()) for d in range(2)]
    h16, w_h16, cell16, w_p16 = h.bfloat16(), w_h.bfloat16(), cell.bfloat16(), w_p.bfloat16()
    cases = [
        ("recurrent", "float32", "MKL batched", 2 * 2 * rows * proj * 4 * dim, lambda: torch.bmm(h, w_h)),
        ("recurrent", "float32", "oneDNN", 2 * 2 * rows * proj * 4 * dim,
         lambda: [onednn_linear(h[d], *onednn[d]) for d in range(2)]),
        ("recurrent", "bfloat16", "MKL batched", 2 * 2 * rows * proj * 4 * dim, lambda: torch.bmm(h16, w_h16)),
        ("projection", "float32", "MKL batched", 2 * 2 * rows * dim * proj, lambda: torch.bmm(cell, w_p)),
        ("projection", "bfloat16", "MKL batched", 2 * 2 * rows * dim * proj, lambda: torch.bmm(cell16, w_p16)),
        (f"input half ({steps} steps)", "float32", "MKL batched", 2 * 2 * rows * steps * proj * 4 * dim,
         lambda: torch.bmm(x, w_x)),
    ]
    out = []
    for product, dtype, kernel, flops, run in cases:
        seconds = best_seconds(run, repeats)
        out.append({"size": size, "rows": rows, "product": product, "dtype": dtype, "kernel": kernel,
                    "seconds": seconds, "gflops": flops / seconds / 1e9})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "original"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--output", default="results/benchmarks/lstm_kernels.json")
    args = parser.parse_args(argv)
    peaks = {"float32": matmul_peak_flops() / 1e9, "bfloat16": matmul_peak_flops(torch.bfloat16) / 1e9}
    rows = [r for size in args.sizes for r in measure(size, args.rows, args.steps, args.repeats)]
    print(f"{'size':9}{'product':22}{'dtype':10}{'kernel':13}{'GFLOP/s':>9}")
    for r in rows:
        print(f"{r['size']:9}{r['product']:22}{r['dtype']:10}{r['kernel']:13}{r['gflops']:>9.0f}")
    print(f"square matmul peak: float32 {peaks['float32']:.0f}, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s")
    write_results(args.output, {"peak_gflops": peaks, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
