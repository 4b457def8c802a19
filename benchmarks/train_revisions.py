"""Training speed and loss curve of two checkouts of this library, whole process, interleaved.

Each round runs, for each checkout in turn (A B A B ...), a fresh ``elmo finetune`` process that
continues ``MODEL`` (default: the packaged model) on ``--train`` for ``--steps`` steps of
``--batch-size`` x 20 tokens in float32, logging the loss of every step. The wall-clock time of the
whole process (start-up, data, checkpoint included) gives tokens/s per direction; the medians and
the spread over the rounds are printed. Both checkouts see the same data, seed and negatives, so
their per-step losses must agree to float rounding: the table shows the largest difference. ``--variant``
runs the later checkout a second way in the same rounds (another LSTM path, say).

    BEFORE=$(mktemp -d) && git archive 167ab73 src | tar -x -C $BEFORE
    OMP_NUM_THREADS=1 python benchmarks/train_revisions.py --before $BEFORE/src --after src \\
        --train DATA/wiki/train/shard-00000.txt --output results/benchmarks/train_revisions.json
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_once(src: str, model: str, train: str, steps: int, batch_size: int, seed: int, extra: list[str]) -> dict:
    """One whole ``elmo finetune`` process on checkout ``src``: seconds and the per-step losses."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    with tempfile.TemporaryDirectory() as output:
        run_dir = os.path.join(output, "run")
        command = [sys.executable, "-m", "elmo.cli.main", "finetune", model, "--train", train, "--output", run_dir,
                   "--batch-size", str(batch_size), "--unroll-steps", "20", "--max-tokens", str(steps * batch_size * 20),
                   "--seed", str(seed), "--log-every", "1", "--checkpoint-every", str(10 * steps), "--no-bf16",
                   "--no-progress", *extra]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} (PYTHONPATH={src}) failed:\n{done.stderr}")
        with open(os.path.join(run_dir, "metrics.csv"), newline="", encoding="utf-8") as f:
            losses = [float(row["loss"]) for row in csv.DictReader(f)]
    return {"seconds": seconds, "tokens_per_second": steps * batch_size * 20 / seconds, "losses": losses}


def main(argv: list[str] | None = None) -> int:
    from common import write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="src/ folder of the earlier checkout")
    parser.add_argument("--after", required=True, help="src/ folder of the later checkout")
    parser.add_argument("--train", required=True, help="one tokenized training shard")
    parser.add_argument("--model", help="model to continue (default: the packaged one, from --after)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                        help="also run the later checkout with these extra options, under NAME "
                             "(e.g. fast='--lstm-path fast'); repeatable")
    parser.add_argument("--output", default="results/benchmarks/train_revisions.json")
    args = parser.parse_args(argv)
    model = args.model or os.path.join(args.after, "elmo", "resources", "model")
    variants = {"before": (args.before, []), "after": (args.after, [])}
    for spec in args.variant:
        name, _, options = spec.partition("=")
        variants[name] = (args.after, options.split())
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name, (src, extra) in variants.items():
            result = run_once(src, model, args.train, args.steps, args.batch_size, args.seed, extra)
            runs[name].append(result)
            print(f"round {round_index + 1} {name:8} {result['tokens_per_second']:8.1f} tokens/s "
                  f"({result['seconds']:.1f} s)", flush=True)
    summary = {}
    for name, rows in runs.items():
        speeds = [r["tokens_per_second"] for r in rows]
        summary[name] = {"median_tokens_per_second": statistics.median(speeds), "min": min(speeds), "max": max(speeds),
                         "options": " ".join(variants[name][1])}
        if name != "before":
            summary[name]["ratio_of_medians"] = summary[name]["median_tokens_per_second"] / \
                summary["before"]["median_tokens_per_second"]
            summary[name]["ratios_per_round"] = [a["tokens_per_second"] / b["tokens_per_second"]
                                                 for a, b in zip(rows, runs["before"])]
            summary[name]["largest_loss_difference"] = max(
                abs(a - b) for r_a, r_b in zip(rows, runs["before"]) for a, b in zip(r_a["losses"], r_b["losses"]))
    print(f"{'checkout':8} {'tokens/s median':>16} {'min':>8} {'max':>8} {'/ before':>9} {'per round':>22} {'max |loss diff|':>16}"
          f"   ({args.rounds} rounds, whole process, batch {args.batch_size} x 20, {args.steps} steps, float32, "
          f"{os.environ.get('OMP_NUM_THREADS', 'all')} threads)")
    for name, values in summary.items():
        extra = ""
        if name != "before":
            extra = (f" {values['ratio_of_medians']:>9.3f} {', '.join(f'{r:.2f}' for r in values['ratios_per_round']):>22}"
                     f" {values['largest_loss_difference']:>16.2e}")
        print(f"{name:8} {values['median_tokens_per_second']:>16.1f} {values['min']:>8.1f} {values['max']:>8.1f}{extra}")
    write_results(args.output, {"before": args.before, "after": args.after, "model": model, "train": args.train,
                                "steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
                                "threads": os.environ.get("OMP_NUM_THREADS"), "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
