"""``elmo vocab``: tokenized shards in, a bilm-tf vocabulary file out."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import defaults_of
from elmo.fileio import check_output_file
from elmo.model.vocab import build_vocabulary
from elmo.training.data import expand_paths

HELP = "Count the words of tokenized shards and write the vocabulary (<S>, </S>, <UNK>, then by count)."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shards", nargs="+", metavar="SHARDS",
                        help="tokenized files, one sentence per line, plain or .gz (quoted glob patterns are expanded)")
    parser.add_argument("--output", required=True, help="vocabulary file to write, one word per line")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    default = defaults_of(build_vocabulary)
    parser.add_argument("--min-count", type=int, default=default["min_count"],
                        help="keep words seen at least this often")
    parser.add_argument("--max-size", type=int, default=default["max_size"],
                        help="keep at most this many words, counting <S> </S> <UNK> (default: all)")


def run(args: argparse.Namespace) -> int:
    shards = expand_paths(args.shards)
    check_output_file(args.output, args.force, inputs=shards, option="--output")  # before the shards are counted
    vocab, counts = build_vocabulary(shards, min_count=args.min_count, max_size=args.max_size)
    vocab.save(args.output)
    total = sum(counts.values())
    covered = sum(counts[word] for word in vocab.words)
    coverage = f", covering {100 * covered / total:.2f}% of {total} tokens" if total else ""
    print(f"wrote {len(vocab)} words to {args.output}{coverage}", file=sys.stderr)
    return 0
