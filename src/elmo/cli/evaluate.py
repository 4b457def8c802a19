"""``elmo evaluate``: held-out perplexity with the full softmax."""

from __future__ import annotations

import argparse
import json
import os

from elmo.cli.common import add_progress_argument
from elmo.devices import DEFAULT_DEVICE, DEVICES
from elmo.fileio import atomic_path, check_output_file
from elmo.hub.resolve import load_language_model
from elmo.threads import add_threads_argument, set_threads
from elmo.training.data import expand_paths
from elmo.training.evaluate import EVAL_BATCH_SIZE, EVAL_UNROLL_STEPS, evaluate

HELP = "Forward, backward and average perplexity of a trained biLM on tokenized text."


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="run directory, training checkpoint file, exported folder, or default (the packaged model)")
    parser.add_argument("--data", required=True, nargs="+", help="tokenized shards: paths or quoted globs")
    parser.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE,
                        help="running streams read side by side, the state carried over (default %(default)s)")
    parser.add_argument("--unroll-steps", type=int, default=EVAL_UNROLL_STEPS, help="tokens per stream per window (default %(default)s)")
    parser.add_argument("--max-targets", type=int,
                        help="stop each direction after about this many predictions (default: all of the data)")
    parser.add_argument("--per-sentence",
                        help="write per-sentence log-probabilities (TSV) here (default: not written)")
    parser.add_argument("--json", help="also write the results as JSON here (default: printed only)")
    parser.add_argument("--force", action="store_true", help="replace existing --json and --per-sentence files")
    parser.add_argument("--device", default=DEFAULT_DEVICE, help=f"{DEVICES} (default %(default)s)")
    add_threads_argument(parser)
    add_progress_argument(parser, "tokens scored")


def check_output_files(args: argparse.Namespace, inputs: list[str]) -> None:
    """Refuse the --per-sentence and --json files, before any work, where they may not be written
    (:func:`elmo.fileio.check_output_file`), and the two options naming one file."""
    outputs = [(option, path) for option, path in (("--per-sentence", args.per_sentence), ("--json", args.json))
               if path]
    for option, path in outputs:
        check_output_file(path, args.force, inputs=inputs, option=option)
    if len(outputs) == 2 and os.path.abspath(outputs[0][1]) == os.path.abspath(outputs[1][1]):
        raise ValueError(f"--per-sentence and --json: both name {args.json}; give two files")


def run(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    data = expand_paths(args.data)
    check_output_files(args, data)  # before the evaluation, which may take hours
    model, vocab = load_language_model(args.model)
    result = evaluate(model, vocab, data, batch_size=args.batch_size,
                      unroll_steps=args.unroll_steps, max_targets=args.max_targets,
                      per_sentence=bool(args.per_sentence), device=args.device, progress=args.progress)
    sentences = result.pop("sentences", None)
    print(f"forward perplexity   {result['forward_perplexity']:.2f}")
    print(f"backward perplexity  {result['backward_perplexity']:.2f}")
    print(f"average perplexity   {result['average_perplexity']:.2f}")
    print(f"unigram perplexity   {result['unigram_perplexity']:.2f}  (the data's own unigram distribution)")
    print(f"predictions per direction {result['targets']}, vocabulary {result['vocab_size']}, "
          f"out-of-vocabulary rate {100 * result['oov_rate']:.2f}% (scored as <UNK>)")
    if args.per_sentence:
        with atomic_path(args.per_sentence) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write("sentence\tforward_logprob\tbackward_logprob\tpredictions\n")
            for index, forward, backward, count in sentences:
                f.write(f"{index}\t{forward:.6f}\t{backward:.6f}\t{count}\n")
    if args.json:
        with atomic_path(args.json) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0
