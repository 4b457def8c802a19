"""``elmo cache-vocab``: precompute context-independent token vectors for a word list."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import add_model_arguments, model_from_args
from elmo.fileio import check_output_file, read_lines
from elmo.inference.vocab_cache import save_vocab_cache
from elmo.threads import add_threads_argument, set_threads

HELP = "Precompute token vectors for a word list (one word per line), for elmo embed --vocab-cache."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("words", help="word list, one word per line (a vocab.txt works), or a model archive or "
                                      "folder holding vocab.txt or vocab.txt.gz (an NLPL .zip) to use its vocabulary")
    parser.add_argument("output", help="HDF5 cache file to write")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    add_threads_argument(parser)
    add_model_arguments(parser)


def model_vocabulary_or_lines(path: str) -> list[str]:
    """The words of a word-list file, or the vocabulary inside a model archive or folder."""
    from elmo.hub.archives import looks_like_model, read_model_vocabulary

    if path != "-" and looks_like_model(path):
        found = read_model_vocabulary(path)
        if found is None:
            raise ValueError(f"{path}: this model has no vocab.txt or vocab.txt.gz; give a word list instead")
        return found[0]
    return [line.strip() for line in read_lines(path)]


def run(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    check_output_file(args.output, args.force)  # before the model loads
    model = model_from_args(args)
    words = model_vocabulary_or_lines(args.words)
    n = save_vocab_cache(model, words, args.output, overwrite=args.force)
    print(f"wrote {n} token vectors to {args.output}", file=sys.stderr)
    return 0
