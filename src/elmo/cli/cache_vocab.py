"""``elmo cache-vocab``: precompute context-independent token vectors for a word list."""

from __future__ import annotations

import argparse
import sys

from elmo.fileio import read_lines
from elmo.vocab_cache import save_vocab_cache
from elmo.weights import load_bilm_tf

HELP = "Precompute token vectors for a word list (one word per line), for elmo embed --vocab-cache."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", help="word list, one word per line (a vocab.txt works)")
    parser.add_argument("output", help="HDF5 cache file to write")
    parser.add_argument("--options", required=True, help="options.json of the biLM")
    parser.add_argument("--weights", required=True, help="weights.hdf5 of the biLM")


def run(args: argparse.Namespace) -> int:
    model = load_bilm_tf(args.options, args.weights).eval()
    words = [line.strip() for line in read_lines(args.words)]
    n = save_vocab_cache(model, words, args.output)
    print(f"wrote {n} token vectors to {args.output}", file=sys.stderr)
    return 0
