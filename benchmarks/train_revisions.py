"""Training speed and loss curve of two checkouts of this library, whole process, interleaved.

Each round runs, for each checkout in turn (A B A B ...), a fresh ``elmo finetune`` process that
continues ``MODEL`` (default: the packaged model) on ``--train`` for ``--steps`` steps of
``--batch-size`` x 20 tokens in float32, logging the loss of every step. The wall-clock time of the
whole process (start-up, data, checkpoint included) gives tokens/s per direction; the medians and
the spread over the rounds are printed, and beside them the training loop's own speed (from
the per-step rows of ``metrics.csv``: no start-up, logging or checkpoint). On a machine shared with other jobs the wall clock also
counts the time the process waited for a core, so the processes' CPU time (user + system, from
``getrusage``) is kept beside it: tokens per CPU-second, which such waiting does not inflate. Both checkouts see the same data, seed and negatives, so
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
import resource
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
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} (PYTHONPATH={src}) failed:\n{done.stderr}")
        with open(os.path.join(run_dir, "metrics.csv"), newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        losses = [float(row["loss"]) for row in rows]
        # One row per step (--log-every 1), each with its step's wall-clock speed: the training
        # loop's own seconds, without start-up, logging and the checkpoint.
        loop_seconds = sum(batch_size * 20 / float(row["tokens_per_second"]) for row in rows)
    tokens = steps * batch_size * 20
    return {"seconds": seconds, "tokens_per_second": tokens / seconds, "cpu_seconds": cpu_seconds,
            "tokens_per_cpu_second": tokens / cpu_seconds, "loop_seconds": loop_seconds,
            "loop_tokens_per_second": tokens / loop_seconds, "losses": losses}


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
        values = {}
        for key in ("tokens_per_second", "tokens_per_cpu_second", "loop_tokens_per_second"):
            speeds = [r[key] for r in rows]
            values[key] = {"median": statistics.median(speeds), "min": min(speeds), "max": max(speeds)}
            if name != "before":
                values[key]["ratio_of_medians"] = values[key]["median"] / \
                    statistics.median(r[key] for r in runs["before"])
                values[key]["ratios_per_round"] = [a[key] / b[key] for a, b in zip(rows, runs["before"])]
        values["options"] = " ".join(variants[name][1])
        if name != "before":
            values["largest_loss_difference"] = max(
                abs(a - b) for r_a, r_b in zip(rows, runs["before"]) for a, b in zip(r_a["losses"], r_b["losses"]))
        summary[name] = values
    print(f"({args.rounds} rounds, whole process, batch {args.batch_size} x 20, {args.steps} steps, float32, "
          f"{os.environ.get('OMP_NUM_THREADS', 'all')} threads)")
    for key, label in (("tokens_per_second", "tokens/s (wall clock)"), ("tokens_per_cpu_second", "tokens/CPU-second"),
                       ("loop_tokens_per_second", "tokens/s (training loop)")):
        print(f"{label:24} {'median':>9} {'min':>8} {'max':>8} {'/ before':>9}   per round")
        for name, values in summary.items():
            v = values[key]
            extra = "" if name == "before" else \
                f" {v['ratio_of_medians']:>9.3f}   {', '.join(f'{r:.2f}' for r in v['ratios_per_round'])}"
            print(f"  {name:22} {v['median']:>9.1f} {v['min']:>8.1f} {v['max']:>8.1f}{extra}")
    for name, values in summary.items():
        if name != "before":
            print(f"{name}: largest per-step loss difference from before: {values['largest_loss_difference']:.2e} "
                  f"over {len(runs[name][0]['losses'])} steps")
    write_results(args.output, {"before": args.before, "after": args.after, "model": model, "train": args.train,
                                "steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
                                "threads": os.environ.get("OMP_NUM_THREADS"), "runs": runs, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
