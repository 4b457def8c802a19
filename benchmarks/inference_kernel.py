"""The inference LSTM kernel before and after issue 37, in one process: kernels per layer-step
(ATen operators that launch one, counted by a dispatch mode) and seconds per layer, interleaved
rounds, on whatever device is given.

    python benchmarks/inference_kernel.py --output results/benchmarks/inference_kernel.json
    python benchmarks/inference_kernel.py --device cuda --output inference_kernel-gpu.json

Both kernels run one layer of both directions over ``--rows`` sentences of ``--steps`` tokens
with random weights of each published size; the new one is checked against the old on the way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import OpCounter, write_results  # noqa: E402

SIZES = {"small": (1024, 128), "packaged": (512, 128), "original": (4096, 512)}


def kernels_per_step(run) -> float:
    """Kernel-launching operators per step, from runs of 10 and 20 steps (the call's fixed cost drops out)."""
    counts = []
    for steps in (10, 20):
        with OpCounter() as counter:
            run(steps)
        counts.append(counter.kernels)
    return (counts[1] - counts[0]) / 10


def main(argv: list[str] | None = None) -> int:
    import torch
    from legacy_inference import bilstm_inference_legacy, stack_directions_legacy

    from elmo.model.lstm import LstmLayer, bilstm_inference, stack_directions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", nargs="+", default=["packaged", "original"], choices=sorted(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=27, help="tokens per sentence, boundaries included")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default="results/benchmarks/inference_kernel.json")
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    results = []
    for size in args.sizes:
        dim, proj = SIZES[size]
        torch.manual_seed(0)
        layers = [LstmLayer(proj, dim, proj, 3.0, 3.0).to(device) for _ in range(2)]
        for precision in args.precisions:
            dtype = getattr(torch, precision)
            kernels = {"old": (bilstm_inference_legacy, stack_directions_legacy(*layers, dtype)),
                       "new": (bilstm_inference, stack_directions(*layers, dtype))}

            def call(name, steps, rows=args.rows):
                function, weights = kernels[name]
                inputs = torch.randn(2, rows, steps, proj, device=device, generator=None)
                lengths = torch.full((rows,), steps, device=device)
                c, h = torch.zeros(2, rows, dim, device=device), torch.zeros(2, rows, proj, device=device)
                return function(*layers, inputs, lengths, c, h, dtype, weights)

            torch.manual_seed(1)
            inputs = torch.randn(2, args.rows, args.steps, proj, device=device)
            lengths = torch.full((args.rows,), args.steps, device=device)
            zeros = torch.zeros(2, args.rows, dim, device=device), torch.zeros(2, args.rows, proj, device=device)
            old = kernels["old"][0](*layers, inputs, lengths, *zeros, dtype, kernels["old"][1])[0]
            new = kernels["new"][0](*layers, inputs, lengths, *zeros, dtype, kernels["new"][1])[0]
            difference = float((old - new).abs().max())
            row = {"size": size, "lstm": f"{dim}_{proj}", "precision": precision, "rows": args.rows,
                   "steps": args.steps, "max_abs_diff_new_vs_old": difference,
                   "kernels_per_layer_step": {name: kernels_per_step(lambda s, n=name: call(n, s)) for name in kernels}}
            seconds = {"old": [], "new": []}
            for name in kernels:  # warm-up
                call(name, args.steps)
            for _ in range(args.rounds):
                for name in kernels:
                    sync()
                    start = time.perf_counter()
                    call(name, args.steps)
                    sync()
                    seconds[name].append(time.perf_counter() - start)
            row["seconds"] = seconds
            row["speedup_median"] = statistics.median(seconds["old"]) / statistics.median(seconds["new"])
            results.append(row)
            print(f"{size} {precision}: kernels/step {row['kernels_per_layer_step']}, "
                  f"old {statistics.median(seconds['old']) * 1e3:.1f} ms, new {statistics.median(seconds['new']) * 1e3:.1f} ms",
                  flush=True)
    print()
    print("| size | precision | kernels per layer-step, old -> new | ms per layer, old (rounds) | "
          "ms per layer, new (rounds) | old / new (medians) |")
    print("|---|---|---|---|---|---:|")
    for r in results:
        k = r["kernels_per_layer_step"]
        old = " / ".join(f"{1e3 * s:.1f}" for s in r["seconds"]["old"])
        new = " / ".join(f"{1e3 * s:.1f}" for s in r["seconds"]["new"])
        print(f"| {r['size']} ({r['lstm']}) | {r['precision']} | {k['old']:.0f} -> {k['new']:.0f} | {old} | {new} | "
              f"{r['speedup_median']:.2f}x |")
    write_results(args.output, {"device": str(device), "results": results})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
