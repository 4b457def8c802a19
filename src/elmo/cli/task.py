"""``elmo task train CONFIG.toml`` and ``elmo task evaluate RUN_DIR --data FILE``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from elmo.cli.common import add_progress_argument

HELP = ("Train a task model with or without ELMo (tagging, classification, entailment, SRL, coreference, "
        "reading comprehension, ...), or evaluate one.")


def add_parser(parser: argparse.ArgumentParser) -> None:
    from elmo.tasks.catalog import DATASET_KINDS
    from elmo.threads import add_threads_argument

    sub = parser.add_subparsers(dest="task_verb", required=True, metavar="{train,evaluate}")
    train = sub.add_parser("train", help="train the model a TOML config describes",
                           description="Train the model a TOML config describes (see configs/tasks/).")
    train.add_argument("config", help="TOML task config")
    train.add_argument("--output", help="run directory (overrides the config's output)")
    train.add_argument("--seed", type=int, help="random seed (overrides train.seed)")
    train.add_argument("--epochs", type=int, help="most epochs to train (overrides train.epochs)")
    train.add_argument("--no-elmo", action="store_true", help="the baseline: the same model without ELMo")
    train.add_argument("--resume", action="store_true", help="continue the run from its last finished epoch")
    train.add_argument("--force", action="store_true",
                       help="start over: delete the earlier run in the run directory first, if elmo made it and it "
                            "holds nothing but what a task run writes (default: an existing run is refused)")
    add_progress_argument(train, "batches of each epoch")
    add_threads_argument(train)
    train.add_argument("--data-root", help="the folder holding your copy of the data: what the config's "
                       "$ELMO_DATA/... paths are under (default: $ELMO_DATA)")
    evaluate = sub.add_parser("evaluate", help="score a trained run on a data file",
                              description="Score a run's best model on a data file of the run's dataset kind.")
    evaluate.add_argument("run", help="run directory of elmo task train")
    evaluate.add_argument("--data", required=True, help="data file (or folder, for SNLI and LitBank)")
    evaluate.add_argument("--split", help="split inside the file or folder, for CoNLL-2000 (zip), SICK, SNLI and LitBank")
    evaluate.add_argument("--kind", choices=DATASET_KINDS,
                          help="read --data as this dataset kind, one of the run's task (default: the run's own; snli "
                               "scores a SICK entailment model on SNLI, gap a coreference model on GAP)")
    evaluate.add_argument("--vectors", help="the run's word vectors file, where it has moved since training "
                          "(default: data.vectors of the run's config)")
    evaluate.add_argument("--json", help="also write the result as JSON here")
    evaluate.add_argument("--force", action="store_true", help="replace existing --json and --predictions files")
    add_threads_argument(evaluate)
    evaluate.add_argument("--predictions", help="SQuAD: where to write the prediction file, question id -> answer "
                          "(default: RUN/predictions-<data file name>.json)")


def _check_evaluate_outputs(args: argparse.Namespace) -> None:
    """Refuse the --json and --predictions files of ``elmo task evaluate`` where they may not be
    written (:func:`elmo.fileio.check_output_file`): before any work."""
    from elmo.fileio import check_output_file

    inputs = [path for path in (args.data, args.vectors) if path]
    for option, path in (("--json", args.json), ("--predictions", args.predictions)):
        if path:
            check_output_file(path, args.force, inputs=inputs, option=option)
    if args.json and args.predictions and os.path.abspath(args.json) == os.path.abspath(args.predictions):
        raise ValueError(f"--json and --predictions: both name {args.json}; give two files")


def run(args: argparse.Namespace) -> int:
    from elmo.cli.main import require_extra
    from elmo.threads import set_threads

    set_threads(args.threads)
    # The whole [tasks] extra, now: a task imports some of its packages only to score, which
    # comes after the data is read and the first epoch trained.
    require_extra("tasks")
    from elmo.fileio import atomic_write_text
    from elmo.tasks.catalog import make_task
    from elmo.tasks.config import check_task_paths, load_task_config
    from elmo.tasks.training import evaluate_task, train_task

    if args.task_verb == "train":
        overrides: dict = {}
        if args.output:
            overrides["output"] = args.output
        overrides["train"] = {}
        if args.seed is not None:
            overrides["train"]["seed"] = args.seed
        if args.epochs is not None:
            overrides["train"]["epochs"] = args.epochs
        if args.no_elmo:
            overrides["elmo"] = {"enabled": False}
        config = load_task_config(args.config, overrides, data_root=args.data_root)
        # Names the config file and the data root; train_task checks again.
        check_task_paths(config, where=args.config, root=args.data_root)
        metrics = train_task(config, resume=args.resume, progress=args.progress, overwrite=args.force)
        summary = {k: metrics[k] for k in ("best_epoch", "dev", "test") if k in metrics}
        print(json.dumps(summary), file=sys.stderr)
        return 0
    _check_evaluate_outputs(args)  # before the model and the data load
    result = evaluate_task(args.run, args.data, args.split, kind=args.kind, vectors=args.vectors,
                           predictions=args.predictions, overwrite=args.force)
    print(f"{result['metric']} {result['score']:.4f} on {result['examples']} examples")
    if result.get("unseen_labels"):
        print(f"gold label(s) the model never saw in training, counted as missed: {', '.join(result['unseen_labels'])}",
              file=sys.stderr)
    for line in make_task(result["task"]).report(result):
        print(line)
    if result["tokens"]:
        print(f"{result['words_added']} word(s) new to the run got their pretrained vectors; "
              f"{result['unknown_tokens']} of {result['tokens']} tokens "
              f"({100 * result['unknown_tokens'] / result['tokens']:.1f}%) read as <unk>",
              file=sys.stderr)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return 0
