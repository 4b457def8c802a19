"""``elmo export``: write a run's model in the original layout, plus softmax and vocabulary."""

from __future__ import annotations

import argparse
import sys

from elmo.hub.checkpoints import check_model_folder, export_language_model
from elmo.hub.resolve import load_language_model
from elmo.model.weights import STORAGE_DTYPES

HELP = "Export a training run as options.json + weights.hdf5 (+ softmax_weights.hdf5, vocab.txt)."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run directory (its newest checkpoint), a training checkpoint file, or any language model "
                                       "(an exported folder, default)")
    parser.add_argument("--output", required=True,
                        help="folder to write (a new or empty one; it appears complete or not at all)")
    parser.add_argument("--dtype", choices=STORAGE_DTYPES, default=STORAGE_DTYPES[0],
                        help="storage precision of the weights; loading always gives float32 (default %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output folder, if elmo made it and it holds nothing else")


def run(args: argparse.Namespace) -> int:
    # What is in the way is refused before the model loads (and checked again when it is written).
    check_model_folder(args.output, args.force, option="--output")
    model, vocab = load_language_model(args.run)
    export_language_model(model, vocab, args.output, dtype=args.dtype, overwrite=args.force)
    print(f"exported to {args.output}: options.json weights.hdf5 softmax_weights.hdf5 vocab.txt", file=sys.stderr)
    return 0
