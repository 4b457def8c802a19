"""The inference LSTM kernel of this checkout, and with ``--before-src`` that of an older one
beside it: kernels per layer-step (ATen operators that launch one, counted by a dispatch mode)
and seconds per layer, interleaved rounds, on whatever device is given.

    BEFORE=$(mktemp -d) && git archive 167ab73 src | tar -x -C $BEFORE   # the kernel before issue 37
    python benchmarks/inference_kernel.py --before-src $BEFORE/src --output results/benchmarks/inference_kernel.json
    python benchmarks/inference_kernel.py --device cuda --before-src $BEFORE/src --output inference_kernel-gpu.json

Both kernels run one layer of both directions over ``--rows`` sentences of ``--steps`` tokens
with random weights of each published size (the same weights and inputs on both sides). The older
kernel runs in processes of its own on that checkout's ``src/`` (``bilstm_inference`` and
``stack_directions`` of ``elmo.model.lstm``, which kept their signatures), one per round; the
new one is checked against it on the way. Without ``--before-src`` the old columns are left out
and the JSON says so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZES = {"small": (1024, 128), "packaged": (512, 128), "original": (4096, 512)}

# In a process on the older checkout: its kernel on the weights and inputs the parent saved,
# either checked (outputs saved, kernels per step) or timed once after a warm-up.
BEFORE = """
import json, torch
from elmo.model.lstm import bilstm_inference, stack_directions
from inference_kernel import Kernel
print(json.dumps(Kernel(bilstm_inference, stack_directions, {saved!r}, {device!r}, {precision!r}).{action}))
"""


class Kernel:
    """One kernel (``bilstm_inference``, ``stack_directions``: this checkout's or another's) on
    the layers and inputs saved in ``saved`` (a ``torch.save`` of ``layers``, two state dicts,
    and ``inputs``, ``(2, rows, steps, proj)``), in ``precision``, on ``device``."""

    def __init__(self, bilstm_inference, stack_directions, saved: str, device: str, precision: str):
        import torch

        from elmo.model.lstm import LstmLayer

        data = torch.load(saved, weights_only=True)
        self.device, self.dtype = torch.device(device), getattr(torch, precision)
        self.layers = []
        for state in data["layers"]:
            proj, dim = state["projection"].shape  # (projection_dim, dim)
            layer = LstmLayer(proj, dim, proj, 3.0, 3.0)
            layer.load_state_dict(state)
            self.layers.append(layer.to(self.device))
        self.inputs = data["inputs"].to(self.device)
        self.function = bilstm_inference
        self.weights = stack_directions(*self.layers, self.dtype)

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def call(self, steps: int, inputs=None):
        """Outputs ``(2, rows, steps, proj)`` of the kernel on ``inputs`` (default: random)."""
        import torch

        rows, proj, dim = self.inputs.shape[1], self.inputs.shape[3], self.layers[0].dim
        if inputs is None:
            inputs = torch.randn(2, rows, steps, proj, device=self.device)
        lengths = torch.full((rows,), steps, device=self.device)
        c, h = torch.zeros(2, rows, dim, device=self.device), torch.zeros(2, rows, proj, device=self.device)
        return self.function(*self.layers, inputs, lengths, c, h, self.dtype, self.weights)[0]

    def kernels_per_step(self) -> float:
        """Kernel-launching operators per step, from runs of 10 and 20 steps (the call's fixed cost drops out)."""
        from op_counting import OpCounter

        counts = []
        for steps in (10, 20):
            with OpCounter() as counter:
                self.call(steps)
            counts.append(counter.kernels)
        return (counts[1] - counts[0]) / 10

    def check(self, out: str) -> dict:
        """Saves the outputs on the saved inputs to ``out``; returns the kernels per step."""
        import torch

        torch.save(self.call(self.inputs.shape[2], self.inputs).float().cpu(), out)
        return {"kernels_per_layer_step": self.kernels_per_step()}

    def time(self) -> float:
        """Seconds of one call on the saved inputs' shape, after a warm-up call."""
        steps = self.inputs.shape[2]
        self.call(steps)
        self.sync()
        start = time.perf_counter()
        self.call(steps)
        self.sync()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    import torch
    from common import run_in_checkout, write_results

    from elmo.model.lstm import LstmLayer, bilstm_inference, stack_directions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", nargs="+", default=["packaged", "original"], choices=sorted(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=27, help="tokens per sentence, boundaries included")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before-src", metavar="DIR", help="src/ of an older checkout whose kernel to measure "
                        "beside this one's (167ab73: the kernel before issue 37)")
    parser.add_argument("--output", default="results/benchmarks/inference_kernel.json")
    args = parser.parse_args(argv)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        saved, old_out = os.path.join(tmp, "kernel.pt"), os.path.join(tmp, "old.pt")

        def old(action):
            code = BEFORE.format(saved=saved, device=args.device, precision=precision, action=action)
            return run_in_checkout(args.before_src, code)

        for size in args.sizes:
            dim, proj = SIZES[size]
            torch.manual_seed(0)
            layers = [LstmLayer(proj, dim, proj, 3.0, 3.0) for _ in range(2)]
            torch.manual_seed(1)
            inputs = torch.randn(2, args.rows, args.steps, proj)
            torch.save({"layers": [layer.state_dict() for layer in layers], "inputs": inputs}, saved)
            for precision in args.precisions:
                new = Kernel(bilstm_inference, stack_directions, saved, args.device, precision)
                row = {"size": size, "lstm": f"{dim}_{proj}", "precision": precision, "rows": args.rows,
                       "steps": args.steps, "kernels_per_layer_step": {"new": new.kernels_per_step()}}
                seconds = {"new": []}
                if args.before_src:
                    row["kernels_per_layer_step"]["old"] = old(f"check({old_out!r})")["kernels_per_layer_step"]
                    expected = torch.load(old_out, weights_only=True)
                    row["max_abs_diff_new_vs_old"] = float((new.call(args.steps, new.inputs).float().cpu()
                                                            - expected).abs().max())
                    seconds["old"] = []
                else:
                    row["old"] = "skipped: no --before-src given"
                for _ in range(args.rounds):  # interleaved: the machine's drift hits both alike
                    if args.before_src:
                        seconds["old"].append(old("time()"))
                    seconds["new"].append(new.time())
                row["seconds"] = seconds
                if args.before_src:
                    row["speedup_median"] = statistics.median(seconds["old"]) / statistics.median(seconds["new"])
                results.append(row)
                print(f"{size} {precision}: kernels/step {row['kernels_per_layer_step']}, "
                      + (f"old {statistics.median(seconds['old']) * 1e3:.1f} ms, " if args.before_src else "")
                      + f"new {statistics.median(seconds['new']) * 1e3:.1f} ms", flush=True)
    print()
    print("| size | precision | kernels per layer-step, old -> new | ms per layer, old (rounds) | "
          "ms per layer, new (rounds) | old / new (medians) |")
    print("|---|---|---|---|---|---:|")
    for r in results:
        k = r["kernels_per_layer_step"]
        old_ms = " / ".join(f"{1e3 * s:.1f}" for s in r["seconds"].get("old", [])) or "(no --before-src)"
        new_ms = " / ".join(f"{1e3 * s:.1f}" for s in r["seconds"]["new"])
        speedup = f"{r['speedup_median']:.2f}x" if "speedup_median" in r else ""
        old_k = f"{k['old']:.0f}" if "old" in k else "-"
        print(f"| {r['size']} ({r['lstm']}) | {r['precision']} | {old_k} -> {k['new']:.0f} "
              f"| {old_ms} | {new_ms} | {speedup} |")
    write_results(args.output, {"device": args.device, "before_src": args.before_src, "results": results})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
