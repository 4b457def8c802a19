"""``elmo embed``: one sentence per line in, HDF5 out (the ``allennlp elmo`` layout), or vectors printed."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from elmo.cli.common import add_model_arguments, model_from_args
from elmo.devices import DEFAULT_DEVICE, DEVICES
from elmo.fileio import STDIN, chunks, read_lines
from elmo.inference.embed import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_TOKENS,
    Embedder,
    check_output,
)
from elmo.inference.runtime import DEFAULT_PRECISION, PRECISIONS
from elmo.inference.states import DEFAULT_STATE, STATE_MODES

HELP = ("Embed a file of sentences (one per line, tokens split on whitespace) into HDF5, "
        "or print a summary of the vectors when no output file is given.")

PREVIEW_VALUES = 4
# Sentences embedded together when printing: output starts early and memory stays bounded.
PRINT_CHUNK = 1024


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="text file, one sentence per line (plain or .gz); '-' reads standard input")
    parser.add_argument("output", nargs="?",
                        help="HDF5 file to write; without it (or with '-'), print each token's vector "
                             "(first values and norm) to standard output")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    add_model_arguments(parser)
    parser.add_argument("--layers", default="all", type=parse_layers, metavar="all|top|average|N",
                        help="all: (layers, tokens, dim) per sentence; top, average or one layer index N (0: the "
                             "token layer; ELMoForManyLangs' output_layer -1 is average): (tokens, dim)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch")
    parser.add_argument("--state", default=DEFAULT_STATE, choices=STATE_MODES,
                        help="LSTM state policy; 'stateful' reproduces allennlp elmo exactly")
    parser.add_argument("--device", default=DEFAULT_DEVICE, help=f"torch device: {DEVICES}")
    parser.add_argument("--precision", default=DEFAULT_PRECISION, choices=list(PRECISIONS),
                        help="matrix products in this precision (bfloat16: fast on CPUs with AVX-512 BF16 or AMX; "
                             "float16: GPUs); states stay float32")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="on a GPU, replay the LSTM's steps from CUDA graphs for batch shapes that repeat "
                             "(fewer kernel launches; the same vectors to float rounding)")
    parser.add_argument("--vocab-cache", help="token vectors from elmo cache-vocab (other words use the CNN)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="padded tokens per batch (not in stateful mode, where batches are --batch-size lines)")


def parse_layers(value: str) -> str | int:
    """``--layers``: a named selection, or a layer index (0 the token layer, 1.. the LSTM layers)."""
    if value in ("all", "top", "average"):
        return value
    try:
        index = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected all, top, average or a layer index, got {value!r}") from None
    if index < 0:
        raise argparse.ArgumentTypeError(f"a layer index counts from 0 (the token layer), got {index}; "
                                         f"ELMoForManyLangs' -1 is 'average' here")
    return index


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size: must be at least 1, got {args.batch_size}")
    if args.max_tokens < 1:
        raise ValueError(f"--max-tokens: must be at least 1, got {args.max_tokens}")
    if args.cuda_graphs and not args.device.startswith("cuda"):
        raise ValueError(f"--cuda-graphs: CUDA graphs need a GPU; pass --device cuda (got --device {args.device})")
    to_stdout = args.output is None or args.output == STDIN
    if not to_stdout:
        check_output(args.input, args.output, args.force)  # before the model loads: fail fast
    elif args.force:
        raise ValueError("--force: there is no output file to replace when printing to standard output")
    embedder = Embedder(model_from_args(args), state=args.state, device=args.device, precision=args.precision,
                        vocab_cache=args.vocab_cache, max_tokens=args.max_tokens, batch_size=args.batch_size,
                        cuda_graphs=args.cuda_graphs)
    if to_stdout:
        print_vectors(embedder, args.input, args.layers)
        return 0
    n = embedder.embed_file(args.input, args.output, layers=args.layers, batch_size=args.batch_size,
                            overwrite=args.force)
    print(f"wrote {n} sentences to {args.output}", file=sys.stderr)
    return 0


def print_vectors(embedder: Embedder, input_path: str, layers: str) -> None:
    """Print, per sentence, the array shape and then one line per token: its first values and
    norm. The input is read once, in chunks, so a pipe works and output starts early."""
    number = 0
    for block in chunks(read_lines(input_path), PRINT_CHUNK):
        sentences = [line.split() for line in block]
        for tokens, vectors in zip(sentences, embedder.embed_sentences(sentences, layers=layers)):
            print(f"sentence {number}: {len(tokens)} tokens, array {tuple(vectors.shape)} "
                  f"({'layers, tokens, dim; the top layer below' if vectors.ndim == 3 else 'tokens, dim'})")
            top = vectors[-1] if vectors.ndim == 3 else vectors
            width = max((len(t) for t in tokens), default=0)
            for token, vector in zip(tokens, top):
                values = " ".join(f"{v:+.3f}" for v in vector[:PREVIEW_VALUES])
                print(f"  {token:<{width}}  [{values} ...]  norm {np.linalg.norm(vector):.2f}")
            number += 1
