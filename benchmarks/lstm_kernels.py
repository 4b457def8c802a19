"""The inference path's matrix products by kernel, at the block sizes they run on: what decides
which kernel the runtime uses (``elmo.model.blocks.linear``).

Every product of the inference path runs on row blocks of a fixed size (``elmo.model.blocks``).
For the small and original published sizes, one block of each product, both directions (the
LSTM's) or one (the character CNN's), float32:

* ``MKL``: PyTorch's own product (``torch.nn.functional.linear``, MKL on an x86 CPU build);
* ``oneDNN``: oneDNN's linear kernel (``torch.ops.mkldnn._linear_pointwise``), what
  ``elmo.model.blocks.linear`` runs on a CPU where PyTorch has it;

and the reduced precisions: bfloat16 through PyTorch's batched product (what the runtime ran
before issue 49) and through oneDNN's linear on the plain weight and on the weight pre-packed
once (``elmo.model.blocks.prepack``, what it runs now where oneDNN has the CPU's bfloat16
instructions), and PyTorch's dynamic int8 product (weights quantized per output row, activations per
call), each with its largest error relative to the largest exact value (float64). The kernels
alternate within each round (best of ``--rounds``), so that a busy machine slows all alike. Printed as microseconds per row
and GFLOP/s, beside this machine's square-matmul peaks (the best of PyTorch's product and
oneDNN's), and saved:

    python benchmarks/lstm_kernels.py --output results/benchmarks/lstm_kernels.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from common import matmul_peak_flops, write_results  # noqa: E402

from elmo.model.blocks import block_sizes, onednn_for, prepack, row_block  # noqa: E402
from elmo.model.config import published_config  # noqa: E402


def products(size: str) -> list[tuple[str, int, int, int, int]]:
    """``(product, rows of a block, in, out, directions)`` of the inference path for ``size``."""
    config = published_config(size)
    lstm, cnn = config.lstm, config.char_cnn
    dim, proj = lstm.dim, lstm.projection_dim
    sizes = block_sizes("cpu")
    rows = row_block()
    filters = cnn.n_filters
    return [("recurrent", rows, proj, 4 * dim, 2), ("projection", rows, dim, proj, 2),
            ("input gates", sizes.gate, proj, 4 * dim, 2), ("highway (one of two)", sizes.head, filters, filters, 1),
            ("CNN projection", sizes.head, filters, proj, 1)]


def int8_weight(weight: torch.Tensor, bias: torch.Tensor) -> object:
    """``weight`` ``(out, in)`` quantized to int8 per output row (symmetric) and packed with ``bias``
    for PyTorch's dynamic int8 product (fbgemm / oneDNN with VNNI or AMX-INT8 where the CPU has them)."""
    scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
    with warnings.catch_warnings():  # PyTorch's quantized tensors are deprecated in favour of torchao
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_channel(weight, scales, torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8)
        return torch.ops.quantized.linear_prepack(quantized, bias)


def measure(size: str, rounds: int, min_seconds: float) -> list[dict]:
    out = []
    for product, rows, n_in, n_out, directions in products(size):
        torch.manual_seed(0)
        x = torch.randn(directions, rows, n_in)
        weight, bias = torch.randn(directions, n_out, n_in) * 0.05, torch.randn(n_out)
        x16, w16 = x.bfloat16(), weight.transpose(1, 2).contiguous().bfloat16()
        weight16 = weight.bfloat16()
        int8 = [int8_weight(weight[d], bias) for d in range(directions)]
        kernels = {
            "MKL": lambda: [torch.nn.functional.linear(x[d], weight[d], bias) for d in range(directions)],
            "oneDNN": lambda: [torch.ops.mkldnn._linear_pointwise(x[d], weight[d], bias, "none", [], "")
                               for d in range(directions)],
            "bfloat16 batched": lambda: torch.bmm(x16, w16),
            "bfloat16 oneDNN": lambda: [torch.ops.mkldnn._linear_pointwise(x16[d], weight16[d], None, "none", [], "")
                                        for d in range(directions)],
            "bfloat16 oneDNN packed": lambda: [torch.ops.mkldnn._linear_pointwise(x16[d], packed[d], None, "none", [],
                                                                                  "") for d in range(directions)],
            "int8 dynamic": lambda: [torch.ops.quantized.linear_dynamic(x[d], int8[d], True) for d in range(directions)],
        }
        if not onednn_for("cpu", torch.float32):
            del kernels["oneDNN"]
        if onednn_for("cpu", torch.bfloat16):
            packed = [prepack(weight16[d], rows) for d in range(directions)]
        else:
            del kernels["bfloat16 oneDNN"], kernels["bfloat16 oneDNN packed"]
        exact = torch.stack([x[d].double() @ weight[d].double().t() + bias.double() for d in range(directions)])
        error = {}
        for name, run in kernels.items():
            got = run()
            got = torch.stack(got) if isinstance(got, list) else got
            if name.startswith("bfloat16"):
                got = got.double() + bias.double()  # (the bias joins in float32 on this path)
            error[name] = ((got.double() - exact).abs().max() / exact.abs().max()).item()
        for run in kernels.values():
            run()  # warm-up: primitives made, weights in cache
        once = time.perf_counter()
        kernels["MKL"]()
        repeats = max(3, int(min_seconds / max(time.perf_counter() - once, 1e-6)))
        best = dict.fromkeys(kernels, float("inf"))
        for _ in range(rounds):
            for name, run in kernels.items():
                start = time.perf_counter()
                for _ in range(repeats):
                    run()
                best[name] = min(best[name], (time.perf_counter() - start) / repeats)
        flops = 2 * directions * rows * n_in * n_out
        for name, seconds in best.items():
            out.append({"size": size, "product": product, "rows": rows, "in": n_in, "out": n_out,
                        "directions": directions, "kernel": name, "seconds": seconds,
                        "us_per_row": seconds / rows * 1e6, "gflops": flops / seconds / 1e9,
                        "mkl_over_this": best["MKL"] / seconds, "relative_error": error[name]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "original"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.05, help="time per kernel per round")
    parser.add_argument("--output", default="results/benchmarks/lstm_kernels.json")
    args = parser.parse_args(argv)
    peaks = {"float32": matmul_peak_flops() / 1e9, "bfloat16": matmul_peak_flops(torch.bfloat16) / 1e9}
    rows = [r for size in args.sizes for r in measure(size, args.rounds, args.min_seconds)]
    print(f"{'size':9}{'product':22}{'block':>6}{'kernel':>24}{'us/row':>9}{'GFLOP/s':>9}{'vs MKL':>8}"
          f"{'rel. error':>11}")
    for r in rows:
        print(f"{r['size']:9}{r['product']:22}{r['rows']:>6}{r['kernel']:>24}{r['us_per_row']:>9.2f}"
              f"{r['gflops']:>9.0f}{r['mkl_over_this']:>7.2f}x{r['relative_error']:>11.1e}")
    print(f"square matmul peak (best of PyTorch's product and oneDNN's): float32 {peaks['float32']:.0f}, "
          f"bfloat16 {peaks['bfloat16']:.0f} GFLOP/s")
    write_results(args.output, {"peak_gflops": peaks, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
