"""Does bf16 autocast pay for training the biLM on this CPU? Speed and the loss curve, side by side.

Each precision runs in a fresh process from the same starting model, with the same seed, data
order and sampled negatives: ``--steps`` steps of the real training loop (Adagrad, sampled
softmax), timed after ``--warmup`` steps. The training loss of each step is kept, and the
held-out perplexity after the last step is computed in float32 for both, so a precision that
trains faster but learns worse shows it.

    python benchmarks/train_bf16.py src/elmo/resources/model --train 'DATA/wiki/train/*.txt' \
        --heldout 'DATA/wiki-heldout/train/*.txt' --output results/benchmarks/train_bf16.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402

PRECISIONS = ("float32", "bfloat16")


def measure(model: str, train: str, heldout: str, precision: str, steps: int, warmup: int,
            eval_targets: int, seed: int) -> dict:
    from elmo.training.train import Trainer, TrainSettings

    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(TrainSettings(train=[train], init_from=model, output=output, max_tokens=10 ** 12,
                                        heldout=[heldout], eval_targets=eval_targets, seed=seed,
                                        bf16=precision == "bfloat16", progress=False))
        losses, seconds = [], 0.0
        for step in range(warmup + steps):
            start = time.perf_counter()
            forward, backward = trainer.train_step()
            if step >= warmup:
                seconds += time.perf_counter() - start
            losses.append(0.5 * (forward + backward))
        heldout_result = trainer.evaluate_heldout()
    return {"precision": precision, "steps_timed": steps, "warmup": warmup, "seconds": seconds,
            "tokens_per_second": steps * trainer.tokens_per_step / seconds, "losses": losses,
            "heldout_perplexity": heldout_result["heldout_perplexity"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="exported model or run directory to start from")
    parser.add_argument("--train", required=True, help="training shards (quoted glob)")
    parser.add_argument("--heldout", required=True, help="held-out shards (quoted glob)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--eval-targets", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--output", default="results/benchmarks/train_bf16.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one precision, print JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.model, args.train, args.heldout, args.one, args.steps, args.warmup,
                                 args.eval_targets, args.seed)))
        return 0
    results = []
    for precision in PRECISIONS:
        out = subprocess.run([sys.executable, __file__, args.model, "--one", precision, "--train", args.train,
                              "--heldout", args.heldout, "--steps", str(args.steps), "--warmup", str(args.warmup),
                              "--eval-targets", str(args.eval_targets), "--seed", str(args.seed)],
                             check=True, capture_output=True, text=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    third = max(1, args.steps // 3)
    print(f"{'precision':10} {'tokens/s':>9} {'loss, first third':>18} {'loss, last third':>17} {'held-out ppl':>13}")
    for r in results:
        timed = r["losses"][r["warmup"]:]
        print(f"{r['precision']:10} {r['tokens_per_second']:>9.0f} {sum(timed[:third]) / third:>18.4f} "
              f"{sum(timed[-third:]) / third:>17.4f} {r['heldout_perplexity']:>13.2f}")
    speedup = results[1]["tokens_per_second"] / results[0]["tokens_per_second"]
    largest = max(abs(a - b) for a, b in zip(results[0]["losses"], results[1]["losses"]))
    print(f"bfloat16 / float32 tokens/s: {speedup:.2f}x; largest per-step loss difference {largest:.4f} "
          f"(a perplexity factor of {math.exp(largest):.3f})")
    write_results(args.output, {"model": args.model, "speedup": speedup, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
