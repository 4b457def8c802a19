"""Is adding Gutenberg novels to the default model's Wikipedia training text worth it? (issue 17)

Two biLMs are trained on the same number of tokens with the continued pretraining's recipe
(batch 32, 2,048 sampled negatives, Adagrad 0.2, bf16 autocast), both from the packaged model
(``--init-from``: the question is whether to continue its training on the mix) or both from
scratch in its architecture (``configs/pretrain-wiki-512x128.json``, its vocabulary):

* ``wiki``: Wikipedia training sentences only;
* ``mixed``: the same Wikipedia sentences for ``1 - share`` of the tokens, novels for ``share``.

Each is then scored (full softmax, the first ``--eval-targets`` predictions per direction) on
Wikipedia held-out, novels it never saw, WikiText-2 test and PTB test: what the mix costs on the
default model's own yardstick and what it buys on other text. One thread, low priority;
resumable (a finished run or evaluation is read back, an interrupted run continues).

    python experiments/gutenberg_mix.py --wiki 'DATA/wiki/train/*.txt' \\
        --novels 'DATA/novels/train/*.txt' --init-from src/elmo/resources/model \\
        --eval wikipedia='DATA/wiki-heldout/train/*.txt' novels='DATA/novels-heldout/train/*.txt' \\
               wikitext-2='DATA/wikitext2-test/train/*.txt' ptb='DATA/ptb-test/train/*.txt' \\
        --work DATA/gutenberg-mix --output docs/pretraining/gutenberg-mix.md

(``experiments/gutenberg_mix.sh LM DATA`` prepares the texts and runs this.)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time

from elmo.fileio import atomic_write_text
from elmo.training.data import read_sentences

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "pretrain-wiki-512x128.json")


def take_tokens(paths: list[str], tokens: int) -> list[str]:
    """Sentences (as lines) from ``paths`` in file order until ``tokens`` prediction targets
    (words plus the end marker) are reached."""
    lines, count = [], 0
    for path in paths:
        for sentence in read_sentences(path):
            if count >= tokens:
                return lines
            lines.append(" ".join(sentence))
            count += len(sentence) + 1
    if count < tokens:
        raise SystemExit(f"{', '.join(paths)}: only {count} tokens, {tokens} wanted")
    return lines


def write_corpus(path: str, lines: list[str], seed: int) -> None:
    """One training shard of ``lines`` in a fixed random order, so that the sources interleave."""
    if os.path.isfile(path):
        return
    lines = list(lines)
    random.Random(seed).shuffle(lines)
    atomic_write_text(path, "\n".join(lines) + "\n", make_parents=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wiki", required=True, help="Wikipedia training shards (quoted glob)")
    parser.add_argument("--novels", required=True, help="novels training shards (quoted glob)")
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument("--init-from", help="exported model both runs continue from")
    start.add_argument("--vocab", help="vocabulary of two runs from scratch in the default architecture")
    parser.add_argument("--eval", nargs="+", required=True, metavar="NAME=GLOB", help="texts to score")
    parser.add_argument("--tokens", type=int, default=1_280_000, help="training tokens per direction, each run")
    parser.add_argument("--share", type=float, default=0.25, help="novels' share of the mixed run's tokens")
    parser.add_argument("--eval-targets", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--work", required=True, help="folder for the corpora, runs and scores")
    parser.add_argument("--output", help="Markdown table to write")
    args = parser.parse_args(argv)
    evals = dict(item.split("=", 1) for item in args.eval)

    from elmo.hub import load_language_model
    from elmo.training.evaluate import evaluate
    from elmo.training.train import Trainer, TrainSettings

    wiki, novels = sorted(glob.glob(args.wiki)), sorted(glob.glob(args.novels))
    wiki_tokens = round((1 - args.share) * args.tokens)
    corpora = {"wiki": take_tokens(wiki, args.tokens),
               "mixed": take_tokens(wiki, wiki_tokens) + take_tokens(novels, args.tokens - wiki_tokens)}
    rows = {}
    for name, lines in corpora.items():
        corpus = os.path.join(args.work, name, "train.txt")
        write_corpus(corpus, lines, args.seed)
        run = os.path.join(args.work, name, "run")
        started = time.time()
        start = {"init_from": args.init_from} if args.init_from else {"vocab": args.vocab, "config": CONFIG}
        trainer = Trainer(TrainSettings(train=[corpus], output=run, **start, max_tokens=args.tokens, batch_size=32, n_negative_samples=2048,
                                        learning_rate=0.2, seed=args.seed, bf16=True, log_every=100,
                                        checkpoint_every=500, keep_checkpoints=1, progress=False,
                                        resume=os.path.isdir(os.path.join(run, "checkpoints"))))
        trainer.run()
        print(f"{name}: trained ({time.time() - started:.0f} s this time)", file=sys.stderr)
        model, vocab = load_language_model(run)
        rows[name] = {}
        for text, pattern in evals.items():
            path = os.path.join(args.work, name, f"eval-{text}.json")
            if not os.path.isfile(path):
                result = evaluate(model, vocab, sorted(glob.glob(pattern)), max_targets=args.eval_targets)
                atomic_write_text(path, json.dumps(result, indent=1) + "\n")
            with open(path, encoding="utf-8") as f:
                rows[name][text] = json.load(f)
    if args.init_from:  # where both runs started
        model, vocab = load_language_model(args.init_from)
        rows = {"start": {}, **rows}
        for text, pattern in evals.items():
            path = os.path.join(args.work, f"start-eval-{text}.json")
            if not os.path.isfile(path):
                result = evaluate(model, vocab, sorted(glob.glob(pattern)), max_targets=args.eval_targets)
                atomic_write_text(path, json.dumps(result, indent=1) + "\n", make_parents=True)
            with open(path, encoding="utf-8") as f:
                rows["start"][text] = json.load(f)
    lines = ["| training text | " + " | ".join(evals) + " |", "|---|" + "---:|" * len(evals)]
    labels = {"start": f"(start: {args.init_from})", "wiki": f"+ {args.tokens / 1e6:g}M tokens of Wikipedia",
              "mixed": f"+ {args.tokens / 1e6:g}M tokens, {100 * args.share:g}% of them novels"}
    for name, scores in rows.items():
        lines.append(f"| {labels[name]} | " + " | ".join(f"{scores[t]['average_perplexity']:.1f}" for t in evals) + " |")
    oov = " | ".join(f"{100 * rows['wiki'][t]['oov_rate']:.2f}%" for t in evals)
    lines.append(f"| (out of vocabulary) | {oov} |")
    table = "\n".join(lines)
    print(table)
    if args.output:
        atomic_write_text(args.output, table + "\n", make_parents=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
