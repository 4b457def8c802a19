"""Entry point of the ``elmo`` command: dispatches to one module per verb."""

from __future__ import annotations

import argparse
import sys

from elmo.download import DownloadError
from elmo.cli import embed, train, finetune, export, evaluate, prepare, vocab, cache_vocab, task

VERBS = {"embed": embed, "train": train, "finetune": finetune, "export": export, "evaluate": evaluate,
         "prepare": prepare, "vocab": vocab, "cache-vocab": cache_vocab, "task": task}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo", description="ELMo: deep contextualized word representations.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, module in VERBS.items():
        module.add_parser(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return VERBS[args.verb].run(args) or 0
    except (ValueError, OSError, DownloadError) as e:
        # Bad input gets one clear line naming the file, line or field, not a traceback.
        print(f"elmo {args.verb}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
