"""Arguments several verbs share: which biLM to load."""

from __future__ import annotations

import argparse

from elmo.bilm import BiLM
from elmo.weights import load_bilm_tf


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--options`` and ``--weights``: the biLM in the original layout."""
    parser.add_argument("--options", required=True, help="options.json of the biLM")
    parser.add_argument("--weights", required=True, help="weights.hdf5 of the biLM")


def load_model(args: argparse.Namespace) -> BiLM:
    """The biLM the arguments name, in eval mode."""
    return load_bilm_tf(args.options, args.weights).eval()
