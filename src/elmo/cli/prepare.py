"""``elmo prepare``: raw text in, tokenized training shards out (the 1B Word Benchmark layout)."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import add_progress_argument, defaults_of
from elmo.training.data import expand_paths
from elmo.training.prepare import check_prepared_folder, prepare_corpus

HELP = ("Split raw text (one paragraph per line, a blank line between articles) into sentences, "
        "tokenize them and write train/held-out shards of one sentence per line.")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="RAW",
                        help="raw text files, plain or .gz (quoted glob patterns are expanded)")
    parser.add_argument("--output", required=True,
                        help="directory for train/shard-*.txt, heldout/shard-*.txt and prepare.json (a new or "
                             "empty one; it appears complete or not at all)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output folder, if elmo prepare wrote it and it holds nothing else")
    default = defaults_of(prepare_corpus)
    parser.add_argument("--heldout-fraction", type=float, default=default["heldout_fraction"],
                        help="share of articles that go to held-out, by a hash of their text")
    parser.add_argument("--sentences-per-shard", type=int, default=default["sentences_per_shard"],
                        help="sentences per shard file")
    parser.add_argument("--lang", default=default["lang"],
                        help="language of the Moses tokenizer's rules")
    parser.add_argument("--min-tokens", type=int, default=default["min_tokens"],
                        help="drop sentences with fewer tokens")
    parser.add_argument("--wrapped", action="store_true",
                        help="hard-wrapped text such as Project Gutenberg's: a paragraph's lines run on until a "
                             "blank line, and two or more blank lines end a document")
    add_progress_argument(parser, "input lines read")


def run(args: argparse.Namespace) -> int:
    inputs = expand_paths(args.inputs)
    check_prepared_folder(args.output, args.force, inputs)  # before the tokenizers load
    stats = prepare_corpus(inputs, args.output, heldout_fraction=args.heldout_fraction,
                           sentences_per_shard=args.sentences_per_shard, lang=args.lang,
                           min_tokens=args.min_tokens, progress=args.progress, wrapped=args.wrapped, overwrite=args.force)
    for split in ("train", "heldout"):
        s = stats[split]
        if s["articles"]:
            print(f"{split}: {s['articles']} articles, {s['sentences']} sentences, {s['tokens']} tokens "
                  f"in {s['shards']} shards under {args.output}/{split}", file=sys.stderr)
    return 0
