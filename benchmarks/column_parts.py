"""One step's recurrent products in parts of gate columns, and transposed: what sets
``elmo.model.blocks.COLUMN_BLOCK`` and the float32 product's orientation (issue 49).

A batch of ``--blocks`` row blocks (16 rows each on a CPU) computes, at every step and for each
direction in turn, its recurrent product ``h W`` on every block. With the weight whole, each
block reads all of it; in parts of P gate columns, every block of the step runs on one part
before the next part, so that a part read from memory by the first block is in the cache for
the others. For each published size, float32 (the layer's own weight, as the runtime reads it)
and bfloat16 (pre-packed per part), both directions; float32 also ``transposed``, as the
runtime runs it: ``part @ block.T`` (the part's thousands of gate rows as oneDNN's rows, the
block's 16 rows as its weight) with the bias added after, against ``block @ part.T`` with the
bias in the kernel. The variants alternate within each round (median of ``--rounds``), and each
result is checked against the whole weight's, bit for bit on this machine. Also one block
alone at several weight sizes, hot in the cache: the rate a 16-row block can reach when its
weight does not come from memory. Prints tables and writes JSON.

    python benchmarks/column_parts.py --output results/benchmarks/column_parts.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import write_results  # noqa: E402

from elmo.model import blocks  # noqa: E402
from elmo.model.config import published_config  # noqa: E402

PARTS = (16384, 8192, 4096, 2048, 1024)


def step_products(h: torch.Tensor, weights: list[list[torch.Tensor]], biases: list[list[torch.Tensor]], part: int,
                  width: int, transposed: bool) -> torch.Tensor:
    """``(2, rows, width)``: each direction's ``h[d] W[d]^T + b[d]`` in row blocks, part by part
    (bfloat16: without the bias, which the runtime adds with the input half)."""
    rows, out = blocks.row_block(), torch.empty(2, h.shape[1], width)
    for d in range(2):
        for index, (weight, bias) in enumerate(zip(weights[d], biases[d])):
            columns = slice(index * part, index * part + weight.shape[0])
            for start in range(0, h.shape[1], rows):
                block = h[d, start:start + rows]
                if transposed:
                    torch.add(blocks.linear(weight, block).t(), bias, out=out[d, start:start + rows, columns])
                else:
                    out[d, start:start + rows, columns] = blocks.linear(block, weight, bias)
    return out


def timed(run, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


def measure_parts(size: str, dtype: torch.dtype, n_blocks: int, rounds: int, min_seconds: float) -> list[dict]:
    lstm = published_config(size).lstm
    width, proj = 4 * lstm.dim, lstm.projection_dim
    torch.manual_seed(0)
    plain = [torch.randn(width, proj) * 0.05 for _ in range(2)]
    bias = [torch.randn(width) for _ in range(2)]
    h = torch.randn(2, n_blocks * blocks.row_block(), proj).to(dtype)
    runs = {}
    for transposed in ([False, True] if dtype == torch.float32 else [False]):
        for part in [p for p in PARTS if p <= width]:
            cuts = range(0, width, part)
            weights = [[blocks.prepack(w[lo:lo + part].to(dtype).contiguous(), blocks.row_block())
                        if dtype != torch.float32 else w[lo:lo + part] for lo in cuts] for w in plain]
            biases = [[b[lo:lo + part] if dtype == torch.float32 else None for lo in cuts] for b in bias]
            runs[part, transposed] = (lambda weights=weights, biases=biases, part=part, transposed=transposed:
                                      step_products(h, weights, biases, part, width, transposed))
    whole_key = (width if width in PARTS else max(p for p in PARTS if p <= width), False)
    whole = runs[whole_key]()
    same_bits = {key: torch.equal(run(), whole) for key, run in runs.items()}
    once = time.perf_counter()
    runs[whole_key]()
    repeats = max(3, int(min_seconds / max(time.perf_counter() - once, 1e-6)))
    seconds = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            seconds[key].append(timed(run, repeats))
    flops = 2 * 2 * h.shape[1] * proj * width
    base = statistics.median(seconds[whole_key])
    element_bytes = torch.empty((), dtype=dtype).element_size()
    return [{"size": size, "dtype": str(dtype).replace("torch.", ""), "row_blocks": n_blocks, "part_columns": part,
             "transposed": transposed, "parts": -(-width // part),
             "weight_mb_per_part": part * proj * element_bytes / 2**20,
             "seconds": statistics.median(times), "gflops": flops / statistics.median(times) / 1e9,
             "speedup_over_whole": base / statistics.median(times), "same_bits_as_whole": same_bits[part, transposed]}
            for (part, transposed), times in seconds.items()]


def measure_hot(proj: int, rounds: int, min_seconds: float) -> list[dict]:
    """One 16-row float32 block against weights of several sizes, the same weight again and again
    (in the cache where it fits)."""
    out = []
    for width in (256, 1024, 4096, 16384):
        weight, x = torch.randn(width, proj), torch.randn(blocks.row_block(), proj)
        run = lambda: blocks.linear(x, weight)  # noqa: E731
        run()
        repeats = max(3, int(min_seconds / max(timed(run, 1), 1e-6)))
        seconds = statistics.median(timed(run, repeats) for _ in range(rounds))
        out.append({"in": proj, "out": width, "weight_mb": width * proj * 4 / 2**20, "seconds": seconds,
                    "gflops": 2 * blocks.row_block() * proj * width / seconds / 1e9})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["original", "small"])
    parser.add_argument("--blocks", type=int, default=4, help="row blocks per step (4: a batch of 64)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.2, help="time per part size per round")
    parser.add_argument("--output", default="results/benchmarks/column_parts.json")
    args = parser.parse_args(argv)
    if not blocks.onednn_for("cpu", torch.float32):
        parser.error("this PyTorch has no oneDNN linear kernel: the runtime has no column parts here")
    dtypes = [torch.float32] + ([torch.bfloat16] if blocks.onednn_for("cpu", torch.bfloat16) else [])
    rows = [row for size in args.sizes for dtype in dtypes
            for row in measure_parts(size, dtype, args.blocks, args.rounds, args.min_seconds)]
    hot = measure_hot(published_config("original").lstm.projection_dim, args.rounds, args.min_seconds)
    print(f"one step, {args.blocks} row blocks, both directions; median of {args.rounds}")
    print(f"{'size':<9} {'dtype':<9} {'transposed':>10} {'columns':>8} {'parts':>5} {'MB/part':>8} {'ms':>8} "
          f"{'GFLOP/s':>8} {'x whole':>8}  same bits")
    for r in rows:
        print(f"{r['size']:<9} {r['dtype']:<9} {str(r['transposed']):>10} {r['part_columns']:>8} {r['parts']:>5} "
              f"{r['weight_mb_per_part']:>8.1f} {r['seconds'] * 1e3:>8.2f} {r['gflops']:>8.0f} "
              f"{r['speedup_over_whole']:>7.2f}x  {r['same_bits_as_whole']}")
    print("one 16-row float32 block, its weight hot in the cache")
    for r in hot:
        print(f"  ({r['in']} -> {r['out']}), {r['weight_mb']:.1f} MB: {r['gflops']:.0f} GFLOP/s")
    write_results(args.output, {"row_blocks": args.blocks, "rounds": args.rounds, "parts": rows, "hot_block": hot})
    return 0


if __name__ == "__main__":
    sys.exit(main())
