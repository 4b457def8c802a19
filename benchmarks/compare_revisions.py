"""Embedding speed of two checkouts of this library, measured alternately in one run, so that a
refactor can show it changed no speed (the machine's drift hits both sides alike).

Each round runs, for each checkout, a fresh process that embeds ``--sentences`` sentences with
``Embedder`` defaults at batch 64 (random weights of the published ``--size``) and then 30
20-token sentences one at a time. Prints a table and writes JSON.

    git worktree add ../elmo-before <commit>       # any folder outside this checkout
    python benchmarks/compare_revisions.py --before ../elmo-before/src --after src \
        --text DATA/wiki-heldout/train/shard-00000.txt --output results/benchmarks/compare_revisions.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EMBED_SPEED  # noqa: E402

ONE = """
import json, statistics, sys, time
sys.path.insert(0, {src!r})
import torch
import elmo
from elmo import BiLM, Embedder
from elmo.model.config import published_config
assert elmo.__file__.startswith({src!r}), elmo.__file__
""" + EMBED_SPEED


def main(argv: list[str] | None = None) -> int:
    from common import write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="src/ folder of the earlier checkout")
    parser.add_argument("--after", required=True, help="src/ folder of the later checkout")
    parser.add_argument("--text", required=True, help="tokenized sentences, one per line")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--size", default="small")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="float32", help="float32 or bfloat16 (run even where the "
                        "runtime would measure it slower: ELMO_BFLOAT16_CHECK=0)")
    parser.add_argument("--output", default="results/benchmarks/compare_revisions.json")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side in ("before", "after"):
            src = os.path.abspath(getattr(args, side))
            code = ONE.format(src=src, size=args.size, text=args.text, n=args.sentences, precision=args.precision)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 env={**os.environ, "ELMO_BFLOAT16_CHECK": "0"})
            runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    summary = {side: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for side, rows in runs.items()}
    print(f"{'checkout':<8} {'tokens/s (batch 64)':>20} {'20-token latency':>17}   median of {args.rounds}")
    for side, values in summary.items():
        print(f"{side:<8} {values['tokens_per_second']:>20.0f} {values['latency_20_tokens_ms']:>14.1f} ms")
    ratio = summary["after"]["tokens_per_second"] / summary["before"]["tokens_per_second"]
    print(f"after / before throughput: {ratio:.3f}")
    write_results(args.output, {"before": args.before, "after": args.after, "size": args.size,
                                "precision": args.precision, "runs": runs,
                                "median": summary, "throughput_ratio": ratio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
