"""What the recurrent row block's size costs and gains: embedding throughput at batch 64 and a
single sentence's latency, for several sizes of :data:`elmo.model.blocks.ROW_BLOCK` (the rows of
one recurrent product and projection on a CPU).

For each ``--blocks`` size, a fresh process replaces the CPU's block sizes before anything runs,
embeds ``--sentences`` sentences with ``Embedder`` defaults at batch 64 (random weights of the
published ``--size``, ``--precision``), then up to 30 of their 20-token sentences one at a time (their
median latency): ``common.EMBED_SPEED``, as ``compare_revisions.py`` measures. The sizes alternate
within each of ``--rounds`` rounds; medians are reported. Prints a table and writes JSON:

    python benchmarks/row_block_sizes.py --text sentences.txt --size original --precision bfloat16 \\
        --blocks 16 32 64 --sentences 300 --output results/benchmarks/row_block_sizes_bfloat16.json

A block size is fixed per device so that a row's numbers do not depend on its batch
(``elmo.model.blocks``); this measures what another fixed size would have given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EMBED_SPEED, write_results  # noqa: E402

ONE = """
import json, statistics, time
import torch
import elmo.model.blocks as blocks
from elmo import BiLM, Embedder
from elmo.model.config import published_config
cpu = blocks.BLOCK_SIZES["cpu"]
blocks.BLOCK_SIZES["cpu"] = blocks.BlockSizes({block}, cpu.gate, cpu.word, cpu.head)
""" + EMBED_SPEED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", required=True, help="tokenized sentences, one per line")
    parser.add_argument("--size", default="original")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--blocks", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="results/benchmarks/row_block_sizes.json")
    args = parser.parse_args(argv)
    env = {**os.environ, "ELMO_BFLOAT16_CHECK": "0"}
    runs: dict[int, list[dict]] = {block: [] for block in args.blocks}
    for _ in range(args.rounds):
        for block in args.blocks:
            code = ONE.format(block=block, size=args.size, text=os.path.abspath(args.text), n=args.sentences,
                              precision=args.precision)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
            runs[block].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = [{"block": block, "runs": results,
             "tokens_per_second": statistics.median(r["tokens_per_second"] for r in results),
             "latency_20_tokens_ms": statistics.median(r["latency_20_tokens_ms"] for r in results)}
            for block, results in runs.items()]
    print(f"{args.size}, {args.precision}, {args.sentences} sentences at batch 64, then their 20-token ones alone;"
          f" median of {args.rounds}")
    print(f"{'rows per block':>15}{'tokens/s':>10}{'20-token sentence':>19}")
    for r in rows:
        print(f"{r['block']:>15}{r['tokens_per_second']:>10.0f}{r['latency_20_tokens_ms']:>16.1f} ms")
    write_results(args.output, {"size": args.size, "precision": args.precision, "sentences": args.sentences,
                                "rounds": args.rounds, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
