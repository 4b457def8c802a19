"""Arguments several verbs share: which biLM to load; and where an option's default comes from."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable

from elmo.hub.pretrained import DEFAULT_MODEL, model_names
from elmo.hub.resolve import load_model_with_origin
from elmo.model.network import BiLM
from elmo.progress import LOG_INTERVAL

# The one progress rule of the long verbs (elmo.progress), in each one's --help.
PROGRESS_HELP = (f"progress on standard error (default: a bar on a terminal, and elsewhere, a log or a pipe, one "
                 f"line every {LOG_INTERVAL:.0f} s of a run that lasts longer); --progress: the bar wherever standard "
                 "error goes; --no-progress: none")


def add_progress_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--progress``/``--no-progress`` (``args.progress``: None by default, the rule of
    :mod:`elmo.progress`; True, the bar anywhere; False, none) with the rule's help."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help=(what + ": " if what else "") + PROGRESS_HELP)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model NAME|PATH``, or ``--options`` + ``--weights`` for files in the original layout."""
    parser.add_argument("--model", default=None, metavar="NAME|PATH",
                        help=f"a named model ({', '.join(model_names())}; default {DEFAULT_MODEL!r}, the one shipped "
                             "in the package; published ones are downloaded once into the cache) or a published "
                             "model's URL, an exported model folder, a training run directory, a checkpoint .pt, "
                             "an NLPL archive (.zip) or folder, or an ELMoForManyLangs model (folder or .zip)")
    parser.add_argument("--options", help="options.json of a biLM (with --weights, instead of --model)")
    parser.add_argument("--weights", help="weights.hdf5 of a biLM (with --options, instead of --model)")
    parser.add_argument("--cache-dir", help="where published models are downloaded (default: $ELMO_CACHE "
                                            "or ~/.cache/elmo)")


def model_source_from_args(args: argparse.Namespace) -> str | tuple[str, str] | None:
    """The model source the arguments name, as :func:`elmo.hub.load_model` takes it."""
    if (args.options is None) != (args.weights is None):
        raise ValueError("--options and --weights go together: give both, or neither (and --model)")
    if args.options is not None:
        if args.model is not None:
            raise ValueError("--model and --options/--weights are alternatives: give one")
        return (args.options, args.weights)
    return args.model


def model_from_args(args: argparse.Namespace) -> BiLM:
    """The biLM the arguments name, in eval mode (resolved by :func:`elmo.hub.load_model`)."""
    return model_and_source_from_args(args)[0]


def model_and_source_from_args(args: argparse.Namespace) -> tuple[BiLM, str]:
    """The biLM the arguments name, in eval mode, and what a run records as the model it used
    (a Hub id pinned to the commit it resolved to: :func:`elmo.hub.load_model_with_origin`)."""
    model, origin = load_model_with_origin(model_source_from_args(args), cache_dir=args.cache_dir)
    return model, origin["source"]


def defaults_of(function: Callable) -> dict:
    """The default of each keyword of ``function``: an option that stands for one of its arguments
    takes its default from there, so that a default is written once, in the library."""
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}

