"""How fast the host builds language-model training batches, alone: the ceiling it puts on training.

Training draws one batch per direction per step from :class:`elmo.training.data.LMBatcher`
(sentences to windows, character ids, target ids). This measures the batcher by itself, on one
thread, for each batch size, the current code and, with ``--before-src``, the batcher of an older
checkout (in a process of its own on that checkout's ``src/``; the per-token code of before issue
37 is the parent of commit dc5ac8f), in interleaved rounds, checking on the way that both build
the same batches (digests of the first five and of the resume state). Each measurement is a fresh batcher making one pass over
the text (``--passes``), reading its shards included (and stopping just before the pass would
read them again). Training cannot beat half of a batcher's rate (two
directions), so "per direction" below is half the batcher's tokens/s. The last column divides by
the CPU seconds the process used instead of the wall-clock seconds: on a shared, loaded machine it
is the rate one thread of its own would give (wall and CPU agree on an idle one). The last
measures a pass after the first, in the same round: a corpus the stream keeps (up to 64 M
tokens) is read and encoded once per run, so that is the rate from the second pass on; a larger
corpus is read again every pass, at the rate of the column before.

    BEFORE=$(mktemp -d) && git archive dc5ac8f^ src | tar -x -C $BEFORE
    python benchmarks/lm_batcher.py --train 'DATA/wiki/train/*.txt' --before-src $BEFORE/src \\
        --output results/benchmarks/lm_batcher.json

Without ``--train`` it generates text (Zipf-distributed words of the packaged vocabulary). Without
``--before-src`` the old columns are left out and the JSON says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# In a process on the older checkout (its elmo first on the path): one measurement of its
# batcher, or the digests of its first batches. Only this module's stdlib-only helpers are shared.
BEFORE = """
import json
from elmo.model.vocab import Vocabulary
from elmo.training.data import LMBatcher, SentenceStream
from lm_batcher import batch_digests, measure
with open({words!r}, encoding="utf-8") as f:
    vocab = Vocabulary(json.load(f))
def make(b, u):
    return LMBatcher(SentenceStream({paths!r}, seed=0), vocab, b, u)
if {check!r}:
    print(json.dumps(batch_digests(make({batch_size!r}, {unroll_steps!r}))))
else:
    print(json.dumps(measure(make, {batch_size!r}, {unroll_steps!r}, {tokens!r})))
"""


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


def measure(make, batch_size: int, unroll_steps: int, tokens: int, after_a_pass: bool = False) -> dict:
    """Tokens per second of a fresh batcher ``make(batch_size, unroll_steps)`` building batches
    of at least ``tokens`` tokens in all, from its start: reading and encoding the shards is
    part of a batcher's work, so every measurement covers whole passes over the text.

    With ``after_a_pass``, the batcher first makes one pass unmeasured and the next one is
    measured: a corpus the stream keeps (up to ``SentenceStream.CACHED_TOKENS``) is read once per
    run, so from its second pass on a training run sees this rate."""
    batcher = make(batch_size, unroll_steps)
    if after_a_pass:
        made = 0
        while made < tokens:
            batcher.next_batch()
            made += batch_size * unroll_steps
    batches, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while batches * batch_size * unroll_steps < tokens:
        batcher.next_batch()
        batches += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    made = batches * batch_size * unroll_steps
    return {"batches": batches, "seconds": elapsed, "cpu_seconds": cpu, "tokens_per_second": made / elapsed,
            "tokens_per_cpu_second": made / cpu}


def batch_digests(batcher, n: int = 5) -> dict:
    """SHA-256 of each of ``batcher``'s first ``n`` batches (every tensor's name, dtype, shape and
    bytes) and of its resume state then: equal digests, equal batches."""
    batches = []
    for _ in range(n):
        digest = hashlib.sha256()
        for key, tensor in sorted(batcher.next_batch().items()):
            array = tensor.numpy()
            digest.update(f"{key} {array.dtype} {array.shape}".encode())
            digest.update(array.tobytes())
        batches.append(digest.hexdigest())
    state = hashlib.sha256(json.dumps(batcher.state_dict(), sort_keys=True).encode()).hexdigest()
    return {"batches": batches, "state": state}


def pass_tokens(targets: int, batch_size: int, unroll_steps: int, passes: float = 1.0) -> int:
    """Tokens a measurement takes for ``passes`` passes over a text of ``targets`` (input, target)
    pairs: two batches short of the end, where the rows' unread remainders would make the stream
    read the text again (a measurement of one pass then pays for one reading, as a pass does)."""
    return max(batch_size * unroll_steps, int(passes * targets) - 2 * batch_size * unroll_steps)


def run(paths: list[str], vocab, batch_sizes: list[int], unroll_steps: int, targets: int, rounds: int,
        passes: float = 1.0, before_src: str | None = None) -> list[dict]:
    """Rows of measurements per batch size: this checkout's batcher ("new"), and with
    ``before_src`` the batcher of that ``src/`` ("old"), each in interleaved rounds."""
    from common import run_in_checkout

    from elmo.training.data import LMBatcher, SentenceStream

    def make_new(b, u):
        return LMBatcher(SentenceStream(paths, seed=0), vocab, b, u)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        words = os.path.join(tmp, "words.json")
        with open(words, "w", encoding="utf-8") as f:
            json.dump(list(vocab.words), f)

        def old(size, tokens=0, check=False):
            return run_in_checkout(before_src, BEFORE.format(words=words, paths=list(paths), check=check,
                                                              batch_size=size, unroll_steps=unroll_steps, tokens=tokens))

        for size in batch_sizes:
            tokens = pass_tokens(targets, size, unroll_steps, passes)
            if before_src and old(size, check=True) != batch_digests(make_new(size, unroll_steps)):
                raise SystemExit(f"batch size {size}: the new batcher's batches or resume state differ from the old one's")
            olds, new, kept = [], [], []
            for _ in range(rounds):  # interleaved: the machine's drift hits both alike
                if before_src:
                    olds.append(old(size, tokens))
                new.append(measure(make_new, size, unroll_steps, tokens))
                kept.append(measure(make_new, size, unroll_steps, tokens, after_a_pass=True))
            new_rate = [m["tokens_per_second"] for m in new]
            new_cpu_rate = [m["tokens_per_cpu_second"] for m in new]
            row = {"batch_size": size, "unroll_steps": unroll_steps, "rounds": rounds, "tokens_each": tokens,
                   "new_tokens_per_second": new_rate, "new_tokens_per_cpu_second": new_cpu_rate,
                   "new_median": statistics.median(new_rate), "new_cpu_median": statistics.median(new_cpu_rate),
                   "kept_tokens_per_second": [m["tokens_per_second"] for m in kept],
                   "kept_tokens_per_cpu_second": [m["tokens_per_cpu_second"] for m in kept],
                   "kept_cpu_median": statistics.median(m["tokens_per_cpu_second"] for m in kept)}
            if olds:
                old_rate = [m["tokens_per_second"] for m in olds]
                row.update({"old_tokens_per_second": old_rate,
                            "old_tokens_per_cpu_second": [m["tokens_per_cpu_second"] for m in olds],
                            "old_median": statistics.median(old_rate),
                            "speedup": statistics.median(new_rate) / statistics.median(old_rate)})
            else:
                row["old"] = "skipped: no --before-src given"
            rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| batch | old tokens/s (rounds) | new tokens/s (rounds) | new, per direction | new / old "
             "| new, per direction per CPU-second | the same, a pass after the first |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        old = " / ".join(f"{v:,.0f}" for v in r.get("old_tokens_per_second", [])) or "(no --before-src)"
        new = " / ".join(f"{v:,.0f}" for v in r["new_tokens_per_second"])
        speedup = f"{r['speedup']:.1f}x" if "speedup" in r else ""
        lines.append(f"| {r['batch_size']:,} | {old} | {new} | {r['new_median'] / 2:,.0f} | {speedup} "
                     f"| {r['new_cpu_median'] / 2:,.0f} | {r['kept_cpu_median'] / 2:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch
    from common import write_results

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
    parser.add_argument("--before-src", metavar="DIR", help="src/ of an older checkout whose batcher to measure "
                        "beside this one's (dc5ac8f^: the per-token code before issue 37)")
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
        rows = run(paths, vocab, args.batch_sizes, args.unroll_steps, targets, args.rounds, args.passes,
                   args.before_src)
    print(table(rows))
    write_results(args.output, {"train": args.train or f"generated ({args.generate_tokens:,} tokens)",
                                "before_src": args.before_src, "results": rows})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
