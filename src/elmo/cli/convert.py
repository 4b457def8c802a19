"""``elmo convert``: write a model in another tool's format (bilm-tf/AllenNLP, native, ELMoForManyLangs)."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import defaults_of
from elmo.hub.convert import FORMATS, convert_model
from elmo.model.weights import STORAGE_DTYPES

HELP = ("Write a model (a name, an exported folder, an NLPL zip, an ELMoForManyLangs model, ...) in the "
        "bilm-tf/AllenNLP layout, this library's native checkpoint, or the ELMoForManyLangs format.")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="the model: anything --model takes elsewhere (name, folder, .zip, run, .pt)")
    parser.add_argument("output", help="folder to write (bilm-tf, manylangs), or .pt file (elmo)")
    default = defaults_of(convert_model)
    parser.add_argument("--to", default=default["to"], choices=FORMATS,
                        help="bilm-tf: options.json + weights.hdf5 (bilm-tf, AllenNLP, simple_elmo); elmo: native "
                             "checkpoint holding any model; manylangs: ELMoForManyLangs' folder (dictionary models)")
    parser.add_argument("--dtype", choices=STORAGE_DTYPES, default=default["dtype"],
                        help="storage precision of bilm-tf weights; loading always gives float32")
    parser.add_argument("--force", action="store_true", help="replace an existing output")


def run(args: argparse.Namespace) -> int:
    result = convert_model(args.source, args.output, to=args.to, overwrite=args.force, dtype=args.dtype)
    for note in result.notes:
        print(f"elmo convert: note: {note}", file=sys.stderr)
    print(f"wrote {args.output} ({args.to}): {', '.join(p.rsplit('/', 1)[-1] for p in result.paths)}", file=sys.stderr)
    return 0
