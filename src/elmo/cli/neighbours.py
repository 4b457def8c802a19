"""``elmo neighbours "SENTENCE" --word WORD --corpus FILE``: the corpus uses of a word nearest to its use in a sentence."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import add_model_arguments, add_progress_argument, defaults_of, model_from_args
from elmo.threads import add_threads_argument, set_threads

HELP = "Find the corpus sentences whose use of a word is closest to its use in a given sentence (contextual neighbours)."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sentence", help="the query sentence (tokens split on whitespace)")
    parser.add_argument("--word", required=True, help="the word of the query to look up (matched without case)")
    parser.add_argument("--corpus", required=True, help="text file, one sentence per line (plain or .gz; '-' reads "
                                                        "standard input)")
    parser.add_argument("--layer", type=int, help="biLM layer to compare (0: token encoder; default: the top layer)")
    from elmo.inference.neighbours import contextual_neighbours  # here, as in run(): importing this module stays light

    parser.add_argument("-k", type=int, default=defaults_of(contextual_neighbours)["k"],
                        help="neighbours to show")
    parser.add_argument("--any", action="store_true", help="compare with every word of the corpus, not only WORD")
    parser.add_argument("--vector-cache", metavar="DIR",
                        help="write every layer of the corpus into DIR, so that later queries embed only the query")
    add_progress_argument(parser, "corpus sentences embedded")
    add_threads_argument(parser)
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from elmo.checks import check_count
    from elmo.fileio import read_lines
    from elmo.inference.embed import Embedder
    from elmo.inference.neighbours import contextual_neighbours, word_positions
    from elmo.model.chars import tokenize

    check_count(args.k, "-k")
    set_threads(args.threads)
    query = tokenize(args.sentence)
    if not word_positions(query, args.word):  # before the model and the corpus load: fail fast
        raise ValueError(f"--word: {args.word!r} is not a token of the sentence {' '.join(query)!r}")
    corpus = [tokenize(line) for line in read_lines(args.corpus)]
    corpus = [s for s in corpus if s]
    if not corpus:
        raise ValueError(f"--corpus: {args.corpus} has no sentences")
    embedder = Embedder(model_from_args(args))
    found = contextual_neighbours(embedder, query, args.word, corpus, layer=args.layer, k=args.k, any_word=args.any,
                                  cache_dir=args.vector_cache, progress=args.progress)
    if not found:
        print(f"no use of {args.word!r} in {args.corpus}", file=sys.stderr)
        return 1
    for neighbour in found:
        print(f"{neighbour.score:.4f}\t{neighbour.sentence + 1}\t{neighbour.highlighted()}")
    return 0
