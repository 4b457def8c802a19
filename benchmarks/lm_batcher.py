"""How fast the host builds language-model training batches, alone: the ceiling it puts on training.

Training draws one batch per direction per step from :class:`elmo.training.data.LMBatcher` (sentences to
windows, character ids, target ids) in the training process, between the GPU's steps. On an H100
training stopped getting faster between batch 1,024 and 2,048 at about 63,000 tokens/s per
direction (docs/speed.md), which points at the host. This measures the batcher by itself, one
thread, for each batch size: training cannot beat half of its rate (two directions), and where it
comes near, the batches should be built ahead of time.

    python benchmarks/lm_batcher.py --train 'DATA/wiki/train/*.txt' \\
        --output results/benchmarks/lm_batcher.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402


def measure(paths: list[str], vocab, batch_size: int, unroll_steps: int, seconds: float) -> dict:
    from elmo.training.data import LMBatcher, SentenceStream

    batcher = LMBatcher(SentenceStream(paths, seed=0), vocab, batch_size, unroll_steps)
    batcher.next_batch()  # the first batch opens the shard
    batches, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if batcher.next_batch() is None:
            raise SystemExit(f"the training text ran out after {batches} batches: give more text or fewer --seconds")
        batches += 1
    elapsed = time.perf_counter() - start
    return {"batch_size": batch_size, "unroll_steps": unroll_steps, "batches": batches, "seconds": elapsed,
            "tokens_per_second": batches * batch_size * unroll_steps / elapsed}


def main() -> None:
    import torch

    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import expand_paths

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="prepared training shards: paths or a quoted glob")
    parser.add_argument("--vocab", default=None, help="vocabulary file (default: the packaged model's)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256, 1024, 2048])
    parser.add_argument("--unroll-steps", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0, help="time per batch size (default 10)")
    parser.add_argument("--output", default="results/benchmarks/lm_batcher.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    vocab = Vocabulary.from_file(args.vocab or os.path.join(packaged_model_dir(), "vocab.txt"))
    paths = expand_paths([args.train])
    rows = [measure(paths, vocab, size, args.unroll_steps, args.seconds) for size in args.batch_sizes]
    print("| batch | tokens/s, one batcher | training ceiling, tokens/s per direction (two batchers) |")
    print("|---:|---:|---:|")
    for row in rows:
        print(f"| {row['batch_size']:,} | {row['tokens_per_second']:,.0f} | {row['tokens_per_second'] / 2:,.0f} |")
    write_results(args.output, {"train": args.train, "results": rows})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
