"""``elmo task train CONFIG.toml`` and ``elmo task evaluate RUN_DIR --data FILE``."""

from __future__ import annotations

import argparse
import json
import sys

from elmo.tasks.readers import DATASET_KINDS

HELP = ("Train a task model with or without ELMo (tagging, classification, sentence pairs, SRL, coreference, "
        "reading comprehension), or evaluate one.")


def add_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="task_verb", required=True, metavar="{train,evaluate}")
    train = sub.add_parser("train", help="train the model a TOML config describes",
                           description="Train the model a TOML config describes (see configs/tasks/).")
    train.add_argument("config", help="TOML task config")
    train.add_argument("--output", help="run directory (overrides the config's output)")
    train.add_argument("--seed", type=int, help="random seed (overrides train.seed)")
    train.add_argument("--epochs", type=int, help="most epochs to train (overrides train.epochs)")
    train.add_argument("--no-elmo", action="store_true", help="the baseline: the same model without ELMo")
    train.add_argument("--resume", action="store_true", help="continue the run from its last finished epoch")
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    evaluate = sub.add_parser("evaluate", help="score a trained run on a data file",
                              description="Score a run's best model on a data file of the run's dataset kind.")
    evaluate.add_argument("run", help="run directory of elmo task train")
    evaluate.add_argument("--data", required=True, help="data file (or folder, for SNLI and LitBank)")
    evaluate.add_argument("--split", help="split inside the file or folder, for CoNLL-2000 (zip), SICK, SNLI and LitBank")
    evaluate.add_argument("--kind", choices=DATASET_KINDS,
                          help="read --data as this dataset kind (default: the run's own; snli scores a SICK model "
                               "on SNLI, gap a coreference model on GAP)")
    evaluate.add_argument("--vectors", help="the run's word vectors file, where it has moved since training "
                          "(default: data.vectors of the run's config)")
    evaluate.add_argument("--json", help="also write the result as JSON here")
    evaluate.add_argument("--predictions", help="SQuAD: where to write the prediction file, question id -> answer "
                          "(default: RUN/predictions-<data file name>.json)")


def run(args: argparse.Namespace) -> int:
    from elmo.fileio import atomic_write_text
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
        config = load_task_config(args.config, overrides)
        check_task_paths(config, where=args.config)  # names the config file; train_task checks again
        metrics = train_task(config, resume=args.resume, progress=not args.no_progress)
        summary = {k: metrics[k] for k in ("best_epoch", "dev", "test") if k in metrics}
        print(json.dumps(summary), file=sys.stderr)
        return 0
    result = evaluate_task(args.run, args.data, args.split, kind=args.kind, vectors=args.vectors,
                           predictions=args.predictions)
    print(f"{result['metric']} {result['score']:.4f} on {result['examples']} examples")
    if result.get("unseen_labels"):
        print(f"gold label(s) the model never saw in training, counted as missed: {', '.join(result['unseen_labels'])}",
              file=sys.stderr)
    details = result.get("details")
    if details and "exact_match" in details:  # SQuAD: the official scores
        print(f"  exact match {100 * details['exact_match']:.2f} f1 {100 * details['f1']:.2f}")
        print(f"predictions (question id -> answer) written to {result['predictions']}")
    elif details and "conll_f1" in details:  # coreference: the CoNLL metrics
        for name in ("muc", "b_cubed", "ceaf_e"):
            row = details[name]
            print(f"  {name:<8} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f}")
    elif details and "bias" in details:  # GAP
        for group, label in (("overall", "overall"), ("M", "masculine"), ("F", "feminine")):
            row = details[group]
            print(f"  {label:<10} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f}")
        print(f"  bias (feminine / masculine F1) {details['bias']:.3f}")
    elif details and "confusion" in details:  # classes: scores, then gold rows x predicted columns
        for label, row in details["classes"].items():
            print(f"  {label:<14} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f} "
                  f"gold {row['gold']}")
        labels = list(details["confusion"])
        corner = "gold \\ predicted"
        first = max(len(corner), *(len(label) for label in labels)) + 1
        width = max(8, *(len(label) + 1 for label in labels))
        print(f"  {corner:<{first}}" + "".join(label.rjust(width) for label in labels))
        for label, row in details["confusion"].items():
            print(f"  {label:<{first}}" + "".join(str(row[other]).rjust(width) for other in labels))
    elif details:  # SRL: the CoNLL-2005 breakdown
        print(f"precision {details['precision']:.4f} recall {details['recall']:.4f} "
              f"({details['correct']} correct of {details['gold']} gold, {details['predicted']} predicted arguments)")
        for role, row in sorted(details["roles"].items(), key=lambda item: -item[1]["gold"]):
            print(f"  {role:<12} precision {row['precision']:.4f} recall {row['recall']:.4f} f1 {row['f1']:.4f} "
                  f"gold {row['gold']}")
    if result["tokens"]:
        print(f"{result['words_added']} word(s) new to the run got their pretrained vectors; "
              f"{result['unknown_tokens']} of {result['tokens']} tokens "
              f"({100 * result['unknown_tokens'] / result['tokens']:.1f}%) read as <unk>",
              file=sys.stderr)
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return 0
