"""Entry point of the ``elmo`` command: dispatches to one module per verb.

Only the module of the verb being run is imported (``elmo embed`` never loads the task,
training or text-preparation code); ``elmo --help`` and ``elmo --version`` import none (each
verb's one-line ``HELP`` is read from its source), so that they answer without loading PyTorch. No verb's
module imports a package of an optional extra before the verb runs, so that the help of every
verb works on a core install, and a verb whose extra is missing says which, in one line.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import sys
import warnings

from elmo import __version__

VERBS = {"embed": "embed", "train": "train", "finetune": "finetune", "export": "export", "evaluate": "evaluate",
         "prepare": "prepare", "vocab": "vocab", "cache-vocab": "cache_vocab", "task": "task",
         "neighbours": "neighbours", "convert": "convert", "serve": "serve"}

# Exit status of a command stopped by Ctrl-C, and of one whose reader went away (as shells report
# a process ended by SIGINT or SIGPIPE).
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
# Packages of the optional extras (pyproject.toml), by the extra that installs them: a verb that
# needs one that is missing says which extra to install, in one line.
EXTRA_OF_PACKAGE = {"nltk": "tasks", "sacremoses": "tasks", "seqeval": "tasks", "conllu": "tasks", "scorch": "tasks",
                    "huggingface_hub": "hub", "fastapi": "serve", "uvicorn": "serve", "prometheus_client": "serve",
                    "orjson": "serve", "tensorboard": "train", "matplotlib": "train", "ray": "ray",
                    "onnx": "onnx", "onnxruntime": "onnx"}
# ... except where a verb takes a package from another extra (elmo prepare's tokenizers).
EXTRA_OF_VERB_PACKAGE = {("prepare", "nltk"): "train", ("prepare", "sacremoses"): "train"}


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already states one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text.lower() or default is None
                or default is argparse.SUPPRESS or isinstance(default, bool)):
            return text
        return text + " (default: %(default)s)"


# Options whose value may start with '-' and a digit ("--shard -1/2"): argparse would take the value
# for an option and say only "expected one argument"; joined as "--shard=-1/2", the verb's own
# check of the value says what is wrong with it.
DASH_VALUE_OPTIONS = ("--shard",)


def _join_dash_values(argv: list[str]) -> list[str]:
    """``argv`` with ``OPTION VALUE`` joined as ``OPTION=VALUE`` for the options of
    :data:`DASH_VALUE_OPTIONS` whose value starts with '-' and a digit."""
    joined: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in DASH_VALUE_OPTIONS:
            value = next(args, None)
            if value is not None and len(value) > 1 and value[0] == "-" and value[1].isdigit():
                joined.append(f"{arg}={value}")
                continue
            joined.append(arg)
            if value is not None:
                joined.append(value)
            continue
        joined.append(arg)
    return joined


def _module(verb: str):
    import elmo

    # PyTorch and the API first, with the cyclic collector held off while they load (elmo's
    # __init__ says why): a verb's module would otherwise import them with it running.
    elmo._load_api()
    return importlib.import_module(f"elmo.cli.{VERBS[verb]}")


def verb_help(verb: str) -> str:
    """The one-line ``HELP`` of ``verb``'s module, read from its source without importing it
    (which would load PyTorch); from the module itself where it is loaded already or has no
    source file."""
    import ast

    name = f"elmo.cli.{VERBS[verb]}"
    if name not in sys.modules:
        # The file beside this one (not importlib's find_spec, which would make elmo load its API).
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{VERBS[verb]}.py")
        try:
            with open(source, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELP" for t in node.targets):
                try:
                    return ast.literal_eval(node.value)
                except ValueError:
                    break
    return _module(verb).HELP


def _requested_verb(argv: list[str]) -> str | None:
    """The verb on the command line, if any (the first argument not starting with '-')."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in VERBS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser; with ``argv``, only the verb it names gets its full sub-parser (none
    when it names none: ``elmo --help`` lists the verbs from their one-line help alone)."""
    parser = argparse.ArgumentParser(prog="elmo", description="ELMo: deep contextualized word representations.",
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"elmo {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    wanted = _requested_verb(argv) if argv is not None else None
    for name in VERBS:
        if wanted is not None and name != wanted:
            sub.add_parser(name)
            continue
        if argv is not None and wanted is None:
            sub.add_parser(name, help=verb_help(name))
            continue
        module = _module(name)
        module.add_parser(sub.add_parser(name, help=module.HELP, description=module.HELP,
                                         formatter_class=DefaultsHelpFormatter))
    return parser


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = _join_dash_values(sys.argv[1:] if argv is None else argv)
    try:  # the verb's module is imported to build its options
        args = build_parser(argv).parse_args(argv)
    except ModuleNotFoundError as e:
        return _missing_extra(next((a for a in argv if a in VERBS), "?"), e)
    if from_command_line:
        # What is loaded now (PyTorch, the verb's code) lives as long as the command: the cyclic
        # collector never walks it again, nor at exit (0.1 s of a one-sentence elmo embed). Not
        # when called from Python, whose other objects it would freeze too.
        gc.freeze()
    from elmo.hub.download import DownloadError

    def show_warning(message, category, filename, lineno, file=None, line=None):
        # One line in the command's voice, not Python's "file:line: UserWarning" with source.
        print(f"elmo {args.verb}: warning: {message}", file=sys.stderr)

    warnings.showwarning = show_warning

    try:
        return _module(args.verb).run(args) or 0
    except (ValueError, OSError, DownloadError) as e:
        if isinstance(e, BrokenPipeError):
            return _broken_pipe()
        # Bad input gets one clear line naming the file, line or field, not a traceback; an OS
        # error is put in elmo's words (the path given, what was wrong, what to do).
        from elmo.fileio import os_error_message

        message = os_error_message(e) if isinstance(e, OSError) else str(e)
        print(f"elmo {args.verb}: error: {message}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        return _missing_extra(args.verb, e)
    except KeyboardInterrupt:
        hint = " (continue a training run with --resume)" if args.verb in ("train", "finetune") else ""
        print(f"\nelmo {args.verb}: interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _missing_extra(verb: str, error: ModuleNotFoundError) -> int:
    """One line naming the optional extra that installs the missing package (exit status 2); any
    other missing module is a broken install, and its error goes on up."""
    package = (error.name or "").split(".")[0]
    extra = EXTRA_OF_VERB_PACKAGE.get((verb, package), EXTRA_OF_PACKAGE.get(package))
    if extra is None:
        raise error
    print(f"elmo {verb}: error: this command needs {package}, from the optional extra {extra!r}: "
          f"pip install 'elmo[{extra}]'", file=sys.stderr)
    return 2


def require_extra(extra: str) -> None:
    """Raise ModuleNotFoundError for the first package of the optional extra ``extra`` that is not
    installed (the command then names the extra, in one line). For a verb to call when it runs,
    before any work, where it would otherwise import a package of its extra only late. Nothing is
    imported: the verb's parser and ``--help`` never need the extra."""
    for package, of in EXTRA_OF_PACKAGE.items():
        if of == extra and importlib.util.find_spec(package) is None:
            raise ModuleNotFoundError(f"No module named {package!r}", name=package)


def _broken_pipe() -> int:
    """The reader of our output went away (``elmo embed f | head``): stop quietly, as Unix tools
    do, instead of a traceback when Python flushes standard output at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
