"""Arguments several verbs share: which biLM to load."""

from __future__ import annotations

import argparse

from elmo.bilm import BiLM
from elmo.pretrained import DEFAULT_MODEL, load_pretrained, model_names
from elmo.weights import load_bilm_tf


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model NAME``, or ``--options`` + ``--weights`` for files in the original layout."""
    parser.add_argument("--model", choices=model_names(), default=None,
                        help=f"a named model (default: {DEFAULT_MODEL!r}, the one shipped in the package); "
                             "published ones are downloaded once into the cache ($ELMO_CACHE)")
    parser.add_argument("--options", help="options.json of a biLM (with --weights, instead of --model)")
    parser.add_argument("--weights", help="weights.hdf5 of a biLM (with --options, instead of --model)")
    parser.add_argument("--cache-dir", help="where published models are downloaded (default: $ELMO_CACHE "
                                            "or ~/.cache/elmo)")


def load_model(args: argparse.Namespace) -> BiLM:
    """The biLM the arguments name, in eval mode."""
    if (args.options is None) != (args.weights is None):
        raise ValueError("--options and --weights go together: give both, or neither (and --model)")
    if args.options is not None:
        if args.model is not None:
            raise ValueError("--model and --options/--weights are alternatives: give one")
        return load_bilm_tf(args.options, args.weights).eval()
    return load_pretrained(args.model or DEFAULT_MODEL, cache_dir=args.cache_dir)
