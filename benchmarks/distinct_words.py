"""The host's share of a training step that the trainer computes before the device works: the
distinct words of both directions' batches (``elmo.model.encoder.distinct_words``), with the
rows found by ``torch.unique(dim=0)`` (before) and by 64-bit keys checked exactly (now,
``elmo.model.encoder.unique_rows``), on the real batcher's batches of generated text over the
packaged model's vocabulary. One thread, as the trainer's main thread is beside the device.

    OMP_NUM_THREADS=1 python benchmarks/distinct_words.py --batch-sizes 256 2048 \
        --output results/benchmarks/distinct_words.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    import torch
    from common import write_results
    from gpu_suite import generate_sentences, packaged_words, write_corpus, write_vocab

    from elmo.model import encoder as encoder_module
    from elmo.model.encoder import PAD_ID, distinct_words
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import LMBatcher, SentenceStream

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--steps", type=int, default=10, help="steps timed per batch size and way")
    parser.add_argument("--output", default="results/benchmarks/distinct_words.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    def by_sorting_rows(rows: torch.Tensor):
        return torch.unique(rows, dim=0, return_inverse=True)

    work = Path(tempfile.mkdtemp(prefix="elmo-distinct-"))
    words = packaged_words()
    corpus, vocab_path = work / "corpus.txt", work / "vocab.txt"
    write_corpus(corpus, generate_sentences(60_000, seed=1, words=words))
    write_vocab(vocab_path, words, len(words) + 3)
    vocab = Vocabulary.from_file(str(vocab_path))
    rows_out = []
    for batch_size in args.batch_sizes:
        batchers = [LMBatcher(SentenceStream([str(corpus)], seed=d, reverse=bool(d)), vocab, batch_size, 20)
                    for d in (0, 1)]
        steps = [torch.stack([b.next_batch()["char_ids"] for b in batchers]) for _ in range(args.steps + 1)][1:]
        times = {}
        for way, find in (("torch.unique(dim=0)", by_sorting_rows), ("64-bit keys", encoder_module.unique_rows)):
            saved = encoder_module.unique_rows
            encoder_module.unique_rows = find
            try:
                seconds = []
                for ids in steps:
                    start = time.perf_counter()
                    found = distinct_words(ids, PAD_ID)
                    seconds.append(time.perf_counter() - start)
                    assert torch.equal(found.distinct[found.inverse], ids)
            finally:
                encoder_module.unique_rows = saved
            times[way] = statistics.median(seconds)
        row = {"batch_size": batch_size, "tokens_per_step": 2 * batch_size * 20,
               "distinct_words": int(len(distinct_words(steps[0], PAD_ID).distinct)),
               "median_seconds": {k: round(v, 4) for k, v in times.items()},
               "speedup": round(times["torch.unique(dim=0)"] / times["64-bit keys"], 2)}
        rows_out.append(row)
        print(f"batch {batch_size:>5} ({row['tokens_per_step']:,} tokens, {row['distinct_words']:,} distinct): "
              f"torch.unique(dim=0) {times['torch.unique(dim=0)'] * 1e3:7.1f} ms, "
              f"64-bit keys {times['64-bit keys'] * 1e3:6.1f} ms, {row['speedup']}x")
    write_results(args.output, {"threads": 1, "steps": args.steps, "rows": rows_out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
