"""``elmo finetune``: continue training a trained biLM on in-domain text, keeping its vocabulary."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.train import FINETUNE_RULE, add_common, launch, settings_from

HELP = "Fine-tune a trained biLM (run directory or exported model) on new text."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="run directory, training checkpoint, exported folder with softmax_weights.hdf5 "
                                       "and vocab.txt, or default (the packaged model)")
    add_common(parser, source="the model's options.json", batch_source=FINETUNE_RULE)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args, init_from=args.model, config=None, vocab=None)
    code = launch(settings, args.gpus, args.processes, args.threads)
    print(f"run directory: {settings.output}", file=sys.stderr)
    return code
