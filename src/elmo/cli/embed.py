"""``elmo embed``: one sentence per line in, HDF5 out (the ``allennlp elmo`` layout)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from elmo.cli.common import add_model_arguments, load_model
from elmo.embed import Embedder
from elmo.fileio import read_lines
from elmo.states import DEFAULT_STATE, STATE_MODES

HELP = ("Embed a file of sentences (one per line, tokens split on whitespace) into HDF5, "
        "or print a summary of the vectors when no output file is given.")

PREVIEW_VALUES = 4


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="text file, one sentence per line (plain or .gz)")
    parser.add_argument("output", nargs="?",
                        help="HDF5 file to write; without it, print each token's vector (first values and norm)")
    add_model_arguments(parser)
    parser.add_argument("--layers", default="all", choices=["all", "top", "average"],
                        help="all: (layers, tokens, dim) per sentence; top or average: (tokens, dim)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    parser.add_argument("--state", default=DEFAULT_STATE, choices=STATE_MODES,
                        help="LSTM state policy; 'stateful' reproduces allennlp elmo exactly "
                             f"(default {DEFAULT_STATE})")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="matrix products in this precision (bfloat16: fast on CPUs with AVX-512 BF16 or AMX; "
                             "float16: GPUs); states stay float32")
    parser.add_argument("--vocab-cache", help="token vectors from elmo cache-vocab (other words use the CNN)")
    parser.add_argument("--max-tokens", type=int, default=4096,
                        help="padded tokens per batch (not in stateful mode, where batches are --batch-size lines)")


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size: must be at least 1, got {args.batch_size}")
    embedder = Embedder(load_model(args), state=args.state, device=args.device, precision=args.precision,
                        vocab_cache=args.vocab_cache, max_tokens=args.max_tokens)
    if args.output is None:
        print_vectors(embedder, args.input, args.layers)
        return 0
    n = embedder.embed_file(args.input, args.output, layers=args.layers, batch_size=args.batch_size)
    print(f"wrote {n} sentences to {args.output}", file=sys.stderr)
    return 0


def print_vectors(embedder: Embedder, input_path: str, layers: str) -> None:
    """Print, per sentence, the array shape and then one line per token: its first values and norm."""
    sentences = [line.split() for line in read_lines(input_path)]
    for number, (tokens, vectors) in enumerate(zip(sentences, embedder.embed_sentences(sentences, layers=layers))):
        print(f"sentence {number}: {len(tokens)} tokens, array {tuple(vectors.shape)} "
              f"({'layers, tokens, dim; the top layer below' if vectors.ndim == 3 else 'tokens, dim'})")
        top = vectors[-1] if vectors.ndim == 3 else vectors
        width = max((len(t) for t in tokens), default=0)
        for token, vector in zip(tokens, top):
            values = " ".join(f"{v:+.3f}" for v in vector[:PREVIEW_VALUES])
            print(f"  {token:<{width}}  [{values} ...]  norm {np.linalg.norm(vector):.2f}")
