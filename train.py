"""Train a biLM the way the paper's authors ran it: ``python train.py [--gpus 0,1,2,3]``.

A thin wrapper over ``elmo train`` (the same code: :func:`elmo.cli.train.launch`), run from the
repository root. It takes bilm-tf's flag names as well as ours, and its defaults are the README's
"Train your own" layout, so after

    elmo prepare raw/*.txt.gz --output data          # tokenized shards in data/train/
    elmo vocab 'data/train/*.txt' --output vocab.txt

plain ``python train.py`` (or ``python train.py --gpus 0,1,2,3``) trains into ``runs/train``.
Every other ``elmo train`` option (``--config``, ``--epochs``, ``--resume``, ...) is passed through.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

DEFAULT_TRAIN = "data/train/*.txt"
DEFAULT_VOCAB = "vocab.txt"
DEFAULT_OUTPUT = "runs/train"


def build_parser() -> argparse.ArgumentParser:
    """The wrapper's own options: where the data, vocabulary and run directory are."""
    parser = argparse.ArgumentParser(
        prog="train.py", allow_abbrev=False,  # an abbreviation must not swallow an elmo train option
        description="Train a biLM (elmo train with bilm-tf's flag names and the README's layout as defaults).",
        epilog="Every other option of elmo train is passed through (see elmo train --help): --gpus, --config, "
               "--epochs, --max-tokens, --batch-size, --resume, ...")
    parser.add_argument("--train_prefix", "--train", dest="train", nargs="+", default=[DEFAULT_TRAIN],
                        metavar="SHARDS", help=f"training shards: paths or quoted globs (default {DEFAULT_TRAIN}, "
                                               "as elmo prepare --output data writes them)")
    parser.add_argument("--vocab_file", "--vocab", dest="vocab", default=DEFAULT_VOCAB, metavar="FILE",
                        help=f"vocabulary file, from elmo vocab (default {DEFAULT_VOCAB})")
    parser.add_argument("--save_dir", "--output", dest="output", default=DEFAULT_OUTPUT, metavar="DIR",
                        help=f"run directory: checkpoints, metrics, options.json (default {DEFAULT_OUTPUT})")
    return parser


def missing_input(train: list[str], vocab: str) -> str | None:
    """What to run first when the default data or vocabulary is not there (None: go ahead; a
    path the user gave that does not exist gets elmo train's own error)."""
    if train == [DEFAULT_TRAIN] and not glob.glob(DEFAULT_TRAIN):
        return (f"no training data at {DEFAULT_TRAIN}; make it first with: elmo prepare RAW_TEXT.txt.gz --output data "
                f"(or give --train_prefix)")
    if vocab == DEFAULT_VOCAB and not os.path.isfile(DEFAULT_VOCAB):
        return (f"no vocabulary at {DEFAULT_VOCAB}; make it first with: elmo vocab '{train[0]}' "
                f"--output {DEFAULT_VOCAB} (or give --vocab_file)")
    return None


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    problem = missing_input(args.train, args.vocab)
    if problem is not None:
        print(f"train.py: error: {problem}", file=sys.stderr)
        return 2
    try:
        from elmo.cli.main import main as elmo
    except ImportError:  # a checkout that was never pip-installed: use its source tree
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
        from elmo.cli.main import main as elmo
    return elmo(["train", "--train", *args.train, "--vocab", args.vocab, "--output", args.output, *rest])


if __name__ == "__main__":
    sys.exit(main())
