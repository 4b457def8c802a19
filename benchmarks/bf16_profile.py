"""Where the time of a bfloat16 embed goes, op by op, against float32 (issue 49, item 1).

For each precision, a fresh process embeds ``--sentences`` sentences with ``Embedder`` defaults
(random weights of the published ``--size``, ``ELMO_BFLOAT16_CHECK=0`` so that bfloat16 runs
even where the runtime's check would choose float32) under ``torch.profiler`` and reports the
operators with the most self CPU time, their call counts and input shapes, and the whole time.
Prints a table and writes JSON.

    python benchmarks/bf16_profile.py --text TEXT --size small --sentences 200 \
        --output results/benchmarks/bf16_profile_small.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import RANDOM_MODEL_EMBEDDER  # noqa: E402

ONE = """
import json, sys, time
import torch
from torch.profiler import ProfilerActivity, profile
from elmo import BiLM, Embedder
from elmo.model.config import published_config
""" + RANDOM_MODEL_EMBEDDER + """
start = time.perf_counter()
embedder.embed_sentences(lines)
plain = time.perf_counter() - start
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    embedder.embed_sentences(lines)
rows = []
for e in prof.key_averages(group_by_input_shape=True):
    rows.append({{"op": e.key, "shapes": str(e.input_shapes)[:120], "calls": e.count,
                  "self_ms": e.self_cpu_time_total / 1000}})
rows.sort(key=lambda r: -r["self_ms"])
print(json.dumps({{"seconds": plain, "tokens": sum(map(len, lines)), "top": rows[:{top}]}}))
"""


def main(argv: list[str] | None = None) -> int:
    from common import machine, write_results

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", required=True, help="sentences, one per line (split on whitespace)")
    parser.add_argument("--size", default="small")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("--output", default="results/benchmarks/bf16_profile.json")
    args = parser.parse_args(argv)
    results = {}
    for precision in args.precisions.split(","):
        code = ONE.format(size=args.size, text=args.text, n=args.sentences, precision=precision, top=args.top)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "ELMO_BFLOAT16_CHECK": "0"})
        result = json.loads(out.stdout.strip().splitlines()[-1])
        results[precision] = result
        print(f"\n{precision}: {result['seconds']:.2f} s unprofiled for {result['tokens']} tokens "
              f"({result['tokens'] / result['seconds']:.0f} tokens/s)")
        print(f"{'self ms':>9} {'calls':>7}  op  shapes")
        for row in result["top"]:
            print(f"{row['self_ms']:>9.1f} {row['calls']:>7}  {row['op']}  {row['shapes']}")
    write_results(args.output, {"size": args.size, "sentences": args.sentences, "machine": machine(),
                                "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
