"""How fast the host builds language-model training batches, alone: the ceiling it puts on training.

Training draws one batch per direction per step from :class:`elmo.training.data.LMBatcher`
(sentences to windows, character ids, target ids). This measures the batcher by itself, on one
thread, for each batch size, the old per-token code (``benchmarks/legacy_batcher.py``, as before
issue 37) against the current one in the same process, in interleaved rounds, and checks on the
way that both build the same batches. Each measurement is a fresh batcher making one pass over
the text (``--passes``), reading its shards included (and stopping just before the pass would
read them again). Training cannot beat half of a batcher's rate (two
directions), so "per direction" below is half the batcher's tokens/s. The last column divides by
the CPU seconds the process used instead of the wall-clock seconds: on a shared, loaded machine it
is the rate one thread of its own would give (wall and CPU agree on an idle one).

    python benchmarks/lm_batcher.py --train 'DATA/wiki/train/*.txt' \\
        --output results/benchmarks/lm_batcher.json

Without ``--train`` it generates text (Zipf-distributed words of the packaged vocabulary).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402


def generate_corpus(path: str, words: list[str], n_tokens: int, seed: int = 0) -> None:
    """A text of about ``n_tokens`` tokens, one sentence per line: words drawn Zipf-like from
    ``words`` (most frequent first), sentence lengths 1 to 60 (mean about 24)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(words) + 1)
    p = 1.0 / ranks
    p /= p.sum()
    drawn = rng.choice(len(words), size=n_tokens, p=p)
    lengths = np.clip(rng.gamma(3.0, 8.0, size=n_tokens // 4 + 1).astype(int), 1, 60)
    lines, position = [], 0
    for n in lengths:
        if position >= n_tokens:
            break
        lines.append(" ".join(words[i] for i in drawn[position:position + n]))
        position += n
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def measure(make, batch_size: int, unroll_steps: int, tokens: int) -> dict:
    """Tokens per second of a fresh batcher ``make(batch_size, unroll_steps)`` building batches
    of at least ``tokens`` tokens in all, from its start: reading and encoding the shards is
    part of a batcher's work, so every measurement covers whole passes over the text."""
    batcher = make(batch_size, unroll_steps)
    batches, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while batches * batch_size * unroll_steps < tokens:
        batcher.next_batch()
        batches += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    made = batches * batch_size * unroll_steps
    return {"batches": batches, "seconds": elapsed, "cpu_seconds": cpu, "tokens_per_second": made / elapsed,
            "tokens_per_cpu_second": made / cpu}


def check_same_batches(make_old, make_new, batch_size: int, unroll_steps: int, n: int = 5) -> None:
    import torch

    old, new = make_old(batch_size, unroll_steps), make_new(batch_size, unroll_steps)
    for step in range(n):
        a, b = old.next_batch(), new.next_batch()
        for key in a:
            if not torch.equal(a[key], b[key]):
                raise SystemExit(f"batch {step}, {key}: the new batcher differs from the old one")
    if old.state_dict() != new.state_dict():
        raise SystemExit("the new batcher's resume state differs from the old one's")


def pass_tokens(targets: int, batch_size: int, unroll_steps: int, passes: float = 1.0) -> int:
    """Tokens a measurement takes for ``passes`` passes over a text of ``targets`` (input, target)
    pairs: two batches short of the end, where the rows' unread remainders would make the stream
    read the text again (a measurement of one pass then pays for one reading, as a pass does)."""
    return max(batch_size * unroll_steps, int(passes * targets) - 2 * batch_size * unroll_steps)


def run(paths: list[str], vocab, batch_sizes: list[int], unroll_steps: int, targets: int, rounds: int,
        passes: float = 1.0) -> list[dict]:
    from legacy_batcher import LegacyLMBatcher, LegacySentenceStream

    from elmo.training.data import LMBatcher, SentenceStream

    def make_old(b, u):
        return LegacyLMBatcher(LegacySentenceStream(paths, seed=0), vocab, b, u)

    def make_new(b, u):
        return LMBatcher(SentenceStream(paths, seed=0), vocab, b, u)

    rows = []
    for size in batch_sizes:
        tokens = pass_tokens(targets, size, unroll_steps, passes)
        check_same_batches(make_old, make_new, size, unroll_steps)
        old, new = [], []
        for _ in range(rounds):  # interleaved: the machine's drift hits both alike
            old.append(measure(make_old, size, unroll_steps, tokens))
            new.append(measure(make_new, size, unroll_steps, tokens))
        old_rate, new_rate = [m["tokens_per_second"] for m in old], [m["tokens_per_second"] for m in new]
        new_cpu_rate = [m["tokens_per_cpu_second"] for m in new]
        rows.append({"batch_size": size, "unroll_steps": unroll_steps, "rounds": rounds, "tokens_each": tokens,
                     "old_tokens_per_second": old_rate, "new_tokens_per_second": new_rate,
                     "old_tokens_per_cpu_second": [m["tokens_per_cpu_second"] for m in old],
                     "new_tokens_per_cpu_second": new_cpu_rate,
                     "old_median": statistics.median(old_rate), "new_median": statistics.median(new_rate),
                     "new_cpu_median": statistics.median(new_cpu_rate),
                     "speedup": statistics.median(new_rate) / statistics.median(old_rate)})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| batch | old tokens/s (rounds) | new tokens/s (rounds) | new, per direction | new / old "
             "| new, per direction per CPU-second |",
             "|---:|---|---|---:|---:|---:|"]
    for r in rows:
        old = " / ".join(f"{v:,.0f}" for v in r["old_tokens_per_second"])
        new = " / ".join(f"{v:,.0f}" for v in r["new_tokens_per_second"])
        lines.append(f"| {r['batch_size']:,} | {old} | {new} | {r['new_median'] / 2:,.0f} | {r['speedup']:.1f}x "
                     f"| {r['new_cpu_median'] / 2:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch

    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import count_tokens, expand_paths

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default=None, help="prepared training shards: paths or a quoted glob "
                                                      "(default: a generated text)")
    parser.add_argument("--generate-tokens", type=int, default=400_000, help="size of the generated text")
    parser.add_argument("--vocab", default=None, help="vocabulary file (default: the packaged model's)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 256, 1024, 2048])
    parser.add_argument("--unroll-steps", type=int, default=20)
    parser.add_argument("--passes", type=float, default=1.0,
                        help="passes over the text per measurement (each covers its shard reads; default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of old and new")
    parser.add_argument("--output", default="results/benchmarks/lm_batcher.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    vocab = Vocabulary.from_file(args.vocab or os.path.join(packaged_model_dir(), "vocab.txt"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.train:
            paths = expand_paths([args.train])
        else:
            paths = [os.path.join(tmp, "generated.txt")]
            generate_corpus(paths[0], vocab.words[3:], args.generate_tokens)
        _, targets = count_tokens(paths)
        rows = run(paths, vocab, args.batch_sizes, args.unroll_steps, targets, args.rounds, args.passes)
    print(table(rows))
    write_results(args.output, {"train": args.train or f"generated ({args.generate_tokens:,} tokens)",
                                "results": rows})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
