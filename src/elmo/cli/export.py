"""``elmo export``: write a run's model in the original layout, plus softmax and vocabulary; with
``--hub-card``, a folder ready to upload to the Hugging Face Hub (:mod:`elmo.hub.card`); with
``--format onnx``, the biLM as one ONNX file (:mod:`elmo.inference.onnx_export`)."""

from __future__ import annotations

import argparse
import shlex
import sys

from elmo.hub.checkpoints import check_model_folder, export_language_model
from elmo.hub.resolve import load_language_model
from elmo.model.weights import STORAGE_DTYPES
from elmo.threads import add_threads_argument, set_threads

HELP = ("Export a training run as options.json + weights.hdf5 (+ softmax_weights.hdf5, vocab.txt), "
        "or any biLM as one ONNX file (--format onnx).")
FORMATS = ("hdf5", "onnx")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run directory (its newest checkpoint), a training checkpoint file, or any language model "
                                       "(an exported folder, default)")
    parser.add_argument("--output", required=True,
                        help="folder to write (a new or empty one, its parent folders made if missing; it appears "
                             "complete or not at all); with "
                             "--format onnx, the .onnx file to write")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                        help="hdf5: the original layout in a folder; onnx: the biLM as one ONNX graph for "
                             "onnxruntime and other runtimes (docs/onnx.md; needs the extra 'onnx'; "
                             "default %(default)s)")
    parser.add_argument("--state", choices=("warm", "reset", "stateful"), default="warm",
                        help="--format onnx: the state each sentence starts from, baked in as elmo embed's "
                             "--state (warm, reset), or stateful: state inputs and outputs the caller carries "
                             "(default %(default)s)")
    parser.add_argument("--dtype", choices=STORAGE_DTYPES, default=STORAGE_DTYPES[0],
                        help="storage precision of the weights; loading always gives float32 (default %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output folder, if elmo made it and it holds nothing else")
    add_threads_argument(parser, "CPU threads (--format onnx traces and checks the graph)")
    hub = parser.add_argument_group("a folder for the Hugging Face Hub")
    hub.add_argument("--hub-card", action="store_true",
                     help="also write README.md, a model card with the Hub's metadata (needs --license)")
    hub.add_argument("--license", help="the model's license, as a Hub license id (apache-2.0, cc-by-sa-4.0, other, "
                                       "...); no default: --hub-card needs one")
    hub.add_argument("--language", action="append", default=[], metavar="CODE",
                     help="a language of the training text (ISO 639 code, e.g. en); repeat for several (default: none)")
    hub.add_argument("--dataset", action="append", default=[], metavar="ID",
                     help="a Hub dataset id of the training corpus; repeat for several (default: none)")
    hub.add_argument("--name", help="the card's title: the Hub repository id it goes to (OWNER/NAME, which also "
                                    "fills its examples) or any name (default: the Hub repository or training "
                                    "run it came from)")


def command_of(args: argparse.Namespace) -> str:
    """The ``elmo export`` command ``args`` came from, for the card."""
    words = ["elmo", "export", args.run, "--output", args.output]
    if args.dtype != STORAGE_DTYPES[0]:
        words += ["--dtype", args.dtype]
    words += ["--hub-card", "--license", args.license]
    for language in args.language:
        words += ["--language", language]
    for dataset in args.dataset:
        words += ["--dataset", dataset]
    if args.name:
        words += ["--name", args.name]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    if args.format == "onnx":
        return run_onnx(args)
    if args.state != "warm":
        raise ValueError("--state: the state policy goes into an ONNX graph; add --format onnx")
    if not args.hub_card and (args.license or args.language or args.dataset or args.name):
        raise ValueError("--license, --language, --dataset and --name go into the model card: add --hub-card")
    if args.hub_card and not args.license:
        raise ValueError("--hub-card: give the model's license (--license, a Hub license id such as apache-2.0)")
    # What is in the way is refused before the model loads (and checked again when it is written).
    check_model_folder(args.output, args.force, option="--output")
    if args.hub_card:
        from elmo.hub.card import export_for_hub

        export_for_hub(args.run, args.output, license=args.license, languages=args.language, datasets=args.dataset,
                       command=command_of(args), dtype=args.dtype, overwrite=args.force, name=args.name,
                       make_parents=True)
        print(f"exported to {args.output}: options.json weights.hdf5 softmax_weights.hdf5 vocab.txt README.md "
              f"(review README.md, then upload the folder to the Hub)", file=sys.stderr)
        return 0
    model, vocab = load_language_model(args.run)
    # As train and prepare do with their --output: models/tiny makes models/ too.
    export_language_model(model, vocab, args.output, dtype=args.dtype, overwrite=args.force, make_parents=True)
    print(f"exported to {args.output}: options.json weights.hdf5 softmax_weights.hdf5 vocab.txt", file=sys.stderr)
    return 0


def run_onnx(args: argparse.Namespace) -> int:
    """``--format onnx``: the biLM of ``args.run`` as one ONNX file (elmo.inference.onnx_export)."""
    if args.hub_card or args.license or args.language or args.dataset or args.name:
        raise ValueError("--hub-card, --license, --language, --dataset and --name describe a Hub folder; "
                         "--format onnx writes one file")
    if args.dtype != STORAGE_DTYPES[0]:
        raise ValueError(f"--dtype: the ONNX graph holds float32 weights; {args.dtype} is for --format hdf5")
    import importlib.util

    from elmo.fileio import check_output_file

    if importlib.util.find_spec("onnx") is None:  # before the model loads; the command names the extra
        raise ModuleNotFoundError("No module named 'onnx'", name="onnx")
    check_output_file(args.output, args.force, option="--output")
    from elmo.inference.onnx_export import export_onnx
    from elmo.hub.resolve import load_model

    written = export_onnx(load_model(args.run), args.output, state=args.state, overwrite=args.force)
    print(f"exported to {' + '.join(map(str, written))} (state {args.state}; inputs and outputs: docs/onnx.md)",
          file=sys.stderr)
    return 0
