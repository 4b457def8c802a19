"""``python -m elmo.allennlp elmo``: AllenNLP's ``allennlp elmo`` command (0.9), flag for flag.

An old shell script runs after replacing ``allennlp`` with ``python -m elmo.allennlp``: the same
arguments, the same HDF5 layout in each mode (``--all``, ``--top``, ``--average``), the same
refusal of empty lines, and the same numbers (stateful, batches of ``--batch-size`` lines in file
order, as AllenNLP ran them). As AllenNLP did, an existing output file is replaced (here only once
the new one is complete). ``elmo embed`` is this library's own command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from elmo.allennlp.commands import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_OPTIONS_FILE,
    DEFAULT_WEIGHT_FILE,
    ElmoEmbedder,
    check_lines,
)
from elmo.checks import check_count
from elmo.fileio import STDIN, check_output_file, read_lines

PROG = "python -m elmo.allennlp"
COMMAND = f"{PROG} elmo"
HELP = "Create word vectors using a pretrained ELMo model (AllenNLP's `allennlp elmo`)."
# This command's way to load local files instead of downloading (it has no --options/--weights).
LOCAL_FILES = "pass local paths as --options-file and --weight-file,"
# tqdm's settings with --file-friendly-logging: plain lines, at most one every 10 seconds.
FILE_FRIENDLY_PROGRESS = {"disable": False, "ascii": True, "mininterval": 10.0}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="AllenNLP's command line, for its elmo command only "
                                     "(the rest of AllenNLP is not provided).",
                                     epilog=f"{PROG} run CONSOLE_SCRIPT ARGS... runs an installed command of a "
                                     "library that imports AllenNLP (such as SeqVec's seqvec) on elmo's drop-in.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{elmo}")
    elmo = sub.add_parser("elmo", help=HELP, description=HELP + " One float32 HDF5 dataset per input line, keyed "
                          "by line index (or by the sentence), plus a sentence_to_index JSON map.")
    elmo.add_argument("input_file", help="tokenized text, one sentence per line, tokens separated by whitespace "
                      "('-' reads standard input); empty lines are refused")
    elmo.add_argument("output_file", help="the HDF5 file to write (replaced if it exists)")
    mode = elmo.add_mutually_exclusive_group(required=True)
    mode.add_argument("--all", action="store_true", help="all the biLM's layers: (3, tokens, dim) per sentence")
    mode.add_argument("--top", action="store_true", help="the top layer: (tokens, dim)")
    mode.add_argument("--average", action="store_true", help="the average of the layers: (tokens, dim)")
    elmo.add_argument("--vocab-path", help="accepted and ignored, as AllenNLP 0.9 ignored it")
    elmo.add_argument("--options-file", default=DEFAULT_OPTIONS_FILE,
                      help="the biLM's options.json: a path, or a published model's URL (downloaded once into "
                           "elmo's cache) (default: the original model)")
    elmo.add_argument("--weight-file", default=DEFAULT_WEIGHT_FILE,
                      help="the biLM's weights.hdf5, as --options-file (default: the original model)")
    elmo.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                      help=f"sentences per batch, in file order (default: {DEFAULT_BATCH_SIZE})")
    elmo.add_argument("--file-friendly-logging", action="store_true",
                      help="progress as plain lines, at most one every 10 seconds, even when not on a terminal")
    elmo.add_argument("--cuda-device", type=int, default=-1, help="the GPU to run on; -1 for the CPU (default: -1)")
    elmo.add_argument("--forget-sentences", action="store_true",
                      help="do not write sentence_to_index, the JSON map from each sentence to its key")
    elmo.add_argument("--use-sentence-keys", action="store_true",
                      help="key each dataset by its sentence instead of its line index (no sentence_to_index "
                           "is written; sentences must be unique)")
    elmo.add_argument("--include-package", action="append", default=[], metavar="PACKAGE",
                      help="a Python package to import first (repeatable)")
    return parser


def check_output(input_file: str, output_file: str) -> None:
    """Refuse an output that is the input (it would be lost) or standard output, and, before
    anything is embedded, one that cannot be written: a folder or anything but a regular file in
    its place, or a folder that does not exist around it. An existing file is replaced (as
    AllenNLP did), once the new one is complete."""
    if output_file == STDIN:
        raise ValueError("output_file: HDF5 needs a file name, not '-'")
    if input_file != STDIN and os.path.exists(input_file) and os.path.exists(output_file) \
            and os.path.samefile(input_file, output_file):
        raise ValueError(f"{output_file}: the output file is the input file; choose another output")
    check_output_file(output_file, overwrite=True)


def run(args: argparse.Namespace) -> int:
    for package in args.include_package:
        try:
            importlib.import_module(package)
        except ImportError as e:
            raise ValueError(f"--include-package: cannot import {package!r}: {e}") from None
    if args.vocab_path is not None:
        warnings.warn("--vocab-path is ignored (AllenNLP 0.9's elmo command ignored it too)", stacklevel=2)
    check_count(args.batch_size, "--batch-size")
    output_format = "all" if args.all else "top" if args.top else "average"
    check_output(args.input_file, args.output_file)
    # The whole input is read first, as AllenNLP did: its errors come before the model loads.
    sentences = [line.strip() for line in read_lines(args.input_file)]
    source = "<stdin>" if args.input_file == STDIN else args.input_file
    check_lines(sentences, source, args.use_sentence_keys)
    embedder = ElmoEmbedder(args.options_file, args.weight_file, args.cuda_device)
    progress = FILE_FRIENDLY_PROGRESS if args.file_friendly_logging else {"disable": None}
    embedder._write_hdf5(sentences, source, args.output_file, output_format, args.batch_size,
                         args.forget_sentences, args.use_sentence_keys, progress=progress, checked=True)
    print(f"wrote {len(sentences)} sentences to {args.output_file}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from elmo.fileio import os_error_message
    from elmo.hub.download import DownloadError

    def show_warning(message, category, filename, lineno, file=None, line=None):
        print(f"{COMMAND}: warning: {message}", file=sys.stderr)

    shown, warnings.showwarning = warnings.showwarning, show_warning
    try:
        return run(args)
    except (ValueError, OSError, DownloadError) as e:
        # Bad input gets one clear line naming the file, line or option, not a traceback.
        if isinstance(e, DownloadError):
            message = e.message_for(LOCAL_FILES)
        else:
            message = os_error_message(e) if isinstance(e, OSError) else str(e)
        print(f"{COMMAND}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\n{COMMAND}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = shown
