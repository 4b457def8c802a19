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
import glob
import importlib
import importlib.util
import os
import re
import sys
import warnings

from elmo import __version__
from elmo.version import install_hint

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
    verb_parsers: dict[str, argparse.ArgumentParser] = {}
    for name in VERBS:
        if wanted is not None and name != wanted:
            sub.add_parser(name)
            continue
        if argv is not None and wanted is None:
            sub.add_parser(name, help=verb_help(name))
            continue
        module = _module(name)
        verb_parsers[name] = sub.add_parser(name, help=module.HELP, description=module.HELP,
                                            formatter_class=DefaultsHelpFormatter)
        module.add_parser(verb_parsers[name])
    parser.set_defaults(_verb_parsers=verb_parsers)
    return parser


# An argument is an output when it is named so (dest "output") or its help says it is written
# ("HDF5 file to write", "also write the results as JSON here"). Found by this rule, not listed,
# so that a new verb's output joins the check below by being in the parser.
_WRITES = re.compile(r"\bwrite\b", re.IGNORECASE)
_GLOB = re.compile(r"[*?[]")


def is_output_action(action: argparse.Action) -> bool:
    """Whether ``action`` names a file or folder the command writes."""
    return (isinstance(action, (argparse._StoreAction, argparse._AppendAction)) and action.type is None
            and not action.choices and (action.dest == "output" or bool(_WRITES.search(action.help or ""))))


def chosen_parsers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """``parser`` and the sub-parser of each verb ``args`` chose (``task`` then ``train``)."""
    chain = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            verb = getattr(args, action.dest, None)
            chosen = action.choices.get(verb) if isinstance(verb, str) else None
            if chosen is not None:
                chain += chosen_parsers(chosen, args)
    return chain


def _label(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


def _values(value) -> list[str]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, str) and v]


def command_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[str]]:
    """The outputs ``args`` name, as (option, path), and their inputs: every other argument's
    value that names an existing file or folder (a quoted glob: the files it matches)."""
    outputs, inputs = [], []
    for sub in chosen_parsers(parser, args):
        for action in sub._actions:
            if action.dest in ("help", "version") or isinstance(action, argparse._SubParsersAction):
                continue
            values = _values(getattr(args, action.dest, None))
            if is_output_action(action):
                outputs += [(_label(action), v) for v in values]
                continue
            if action.type is not None or action.choices or action.nargs == 0:
                continue
            for value in values:
                found = glob.glob(value) if _GLOB.search(value) and not os.path.lexists(value) else [value]
                inputs += [f for f in found if os.path.lexists(f)]
    return outputs, inputs


def check_outputs_are_not_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """Refuse, before any work, an output that is, is in, is linked to or (replaced with
    ``--force``) holds an input of the command, ``--force`` or not (:func:`elmo.fileio.input_conflict`);
    returns the inputs, which the writers check again (:func:`elmo.fileio.reading_inputs`)."""
    from elmo.fileio import check_not_an_input

    outputs, inputs = command_paths(parser, args)
    for option, path in outputs:
        check_not_an_input(path, inputs, option=option, holds=bool(getattr(args, "force", False)))
    return inputs


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that an argument the verb does not know is answered with
    the verb's usage (not the top-level one) and, for a mistyped option, the closest option's name:
    argparse suggests names only from Python 3.14 on, and only for choices."""
    args, unknown = parser.parse_known_args(argv)
    verb_parsers = vars(args).pop("_verb_parsers", {})
    if unknown:
        verb_parser = verb_parsers.get(args.verb, parser)
        verb_parser.error(unrecognized_message(verb_parser, unknown))
    return args


def unrecognized_message(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """argparse's "unrecognized arguments: ..." with, for each unknown option, the closest option
    of ``parser`` (difflib's ratio of at least 0.6): "(did you mean --batch-size?)"."""
    import difflib

    options = [option for action in parser._actions for option in action.option_strings if option.startswith("--")]
    hints = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close:
                hints.append(f"{arg.split('=', 1)[0]}: did you mean {close[0]}?")
    message = "unrecognized arguments: " + " ".join(unknown)
    return message + (f" ({'; '.join(hints)})" if hints else "")


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = _join_dash_values(sys.argv[1:] if argv is None else argv)
    try:  # the verb's module is imported to build its options
        parser = build_parser(argv)
        args = _parse(parser, argv)
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
    if from_command_line:
        sys.unraisablehook = _quiet_unraisable

    try:
        from elmo.fileio import reading_inputs

        with reading_inputs(check_outputs_are_not_inputs(parser, args)):
            return _module(args.verb).run(args) or 0
    except (ValueError, OSError, DownloadError) as e:
        if isinstance(e, BrokenPipeError):
            return _broken_pipe()
        # Bad input gets one clear line naming the file, line or field, not a traceback; an OS
        # error is put in elmo's words (the path given, what was wrong, what to do).
        from elmo.fileio import os_error_message

        message = os_error_message(e) if isinstance(e, OSError) else str(e)
        print(f"elmo {args.verb}: error: {command_line_words(message)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        return _missing_extra(args.verb, e)
    except KeyboardInterrupt:
        hint = " (continue a training run with --resume)" if args.verb in ("train", "finetune") else ""
        print(f"\nelmo {args.verb}: interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _quiet_unraisable(unraisable) -> None:
    """Python's hook for errors it cannot raise, without the ones h5py meets freeing a file whose
    write failed (a full disk: "Can't decrement id ref count"): the command has said, in one
    line naming the file, what went wrong."""
    if (isinstance(unraisable.exc_value, RuntimeError) and "h5py" in repr(unraisable.object)
            and "ref count" in str(unraisable.exc_value)):
        return
    sys.__unraisablehook__(unraisable)


# The library's messages name both spellings of an option, "--force (overwrite=True)"; on the
# command line the Python argument's name is noise.
_PYTHON_ARGUMENT = re.compile(r" \((?:overwrite|resume)=True\)")


def command_line_words(message: str) -> str:
    """``message`` without the Python arguments that stand beside their command-line options:
    "pass --force (overwrite=True) to replace it" becomes "pass --force to replace it"."""
    return _PYTHON_ARGUMENT.sub("", message)


def _missing_extra(verb: str, error: ModuleNotFoundError) -> int:
    """One line naming the optional extra that installs the missing package (exit status 2); any
    other missing module is a broken install, and its error goes on up."""
    package = (error.name or "").split(".")[0]
    extra = EXTRA_OF_VERB_PACKAGE.get((verb, package), EXTRA_OF_PACKAGE.get(package))
    if extra is None:
        raise error
    print(f"elmo {verb}: error: this command needs {package}, from the optional extra {extra!r}: "
          f"{install_hint(extra)}", file=sys.stderr)
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
