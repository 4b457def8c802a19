"""Does building the training batches ahead, in a thread, speed up training? Same run, both ways.

Each setting runs in a fresh process from the same starting model, seed, data order and sampled
negatives: ``--steps`` steps of the real training loop (``Trainer.train_step``, which includes
waiting for the next batch), timed after ``--warmup`` steps, with ``--prefetch 0`` (each batch
built inside the step) and ``--prefetch 2`` (a thread per direction builds the next two while the
device computes). The batches are the same, so the losses must be equal: the table shows the
largest difference (0 unless the device's arithmetic is not deterministic).

    python benchmarks/train_prefetch.py src/elmo/resources/model --train 'DATA/wiki/train/*.txt' \
        --device cuda --batch-size 2048 --output results/benchmarks/train_prefetch-h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402

SETTINGS = (0, 2)


def measure(model: str, train: str, prefetch: int, device: str, batch_size: int, steps: int, warmup: int,
            seed: int) -> dict:
    import tempfile

    import torch

    from elmo.training.train import Trainer, TrainSettings

    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(TrainSettings(train=[train], init_from=model, output=output, max_tokens=10 ** 12,
                                        batch_size=batch_size, seed=seed, device=device, prefetch=prefetch,
                                        progress=False))
        losses, seconds = [], 0.0
        for step in range(warmup + steps):
            start = time.perf_counter()
            forward, backward = trainer.train_step()  # float() of the losses waits for the device
            if step >= warmup:
                seconds += time.perf_counter() - start
            losses.append(0.5 * (forward + backward))
        for batcher in trainer.batchers:
            getattr(batcher, "close", lambda: None)()
        peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    return {"prefetch": prefetch, "steps_timed": steps, "warmup": warmup, "seconds": seconds,
            "tokens_per_second": steps * trainer.tokens_per_step / seconds, "losses": losses,
            "peak_gpu_bytes": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="exported model or run directory to start from")
    parser.add_argument("--train", required=True, help="training shards (quoted glob)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--output", default="results/benchmarks/train_prefetch.json")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one setting, JSON out
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.model, args.train, args.one, args.device, args.batch_size, args.steps,
                                 args.warmup, args.seed)))
        return 0
    results = []
    for prefetch in SETTINGS:
        out = subprocess.run([sys.executable, __file__, args.model, "--one", str(prefetch), "--train", args.train,
                              "--device", args.device, "--batch-size", str(args.batch_size),
                              "--steps", str(args.steps), "--warmup", str(args.warmup), "--seed", str(args.seed)],
                             check=True, capture_output=True, text=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'prefetch':>8} {'tokens/s per direction':>23} {'s/step':>7}")
    for r in results:
        print(f"{r['prefetch']:>8} {r['tokens_per_second']:>23.0f} {r['seconds'] / r['steps_timed']:>7.3f}")
    speedup = results[1]["tokens_per_second"] / results[0]["tokens_per_second"]
    largest = max(abs(a - b) for a, b in zip(results[0]["losses"], results[1]["losses"]))
    print(f"prefetch 2 / prefetch 0: {speedup:.2f}x; largest per-step loss difference {largest:.2g}; "
          f"batch {args.batch_size} x 20 on {args.device}")
    write_results(args.output, {"model": args.model, "device": args.device, "batch_size": args.batch_size,
                                "speedup": speedup, "largest_loss_difference": largest,
                                "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
