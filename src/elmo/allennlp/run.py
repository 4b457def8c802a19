"""``python -m elmo.allennlp run CONSOLE_SCRIPT ARGS...``: run an installed command of a library that
imports AllenNLP's ELMo (SeqVec's ``seqvec``), unchanged, on this library's drop-in.

Such a command imports ``allennlp`` when its module loads, before any code of the user's could
call :func:`~elmo.allennlp.install_as_allennlp`; this runs the call first, then the command, with
``sys.argv`` as the command would have seen it. The command is found as a console-script entry
point of an installed distribution (what ``pip install`` makes ``seqvec`` from), else as a Python
script of that name on ``PATH`` or at that path.
"""

from __future__ import annotations

import importlib.metadata
import os
import runpy
import shutil
import sys

PROG = "python -m elmo.allennlp run"
USAGE = f"usage: {PROG} CONSOLE_SCRIPT [ARGS...]"


def find_command(name: str):
    """``("entry point", EntryPoint)`` for an installed console script ``name``, ``("script", path)``
    for a Python script of that name on ``PATH`` (or at the path ``name``), or None."""
    found = importlib.metadata.entry_points(group="console_scripts", name=name)
    for entry_point in found:
        return "entry point", entry_point
    path = name if os.sep in name or (os.altsep and os.altsep in name) else shutil.which(name)
    if path and os.path.isfile(path) and _is_python(path):
        return "script", path
    return None


def _is_python(path: str) -> bool:
    """Whether ``path`` is a Python script: its name ends in ``.py`` or its first line names Python."""
    if path.endswith(".py"):
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv[0]`` with the arguments after it on the drop-in; its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\nRun an installed command of a library that imports AllenNLP's ELMo (such as SeqVec's "
              f"seqvec) on elmo's drop-in, unchanged.", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    name, args = argv[0], argv[1:]
    command = find_command(name)
    if command is None:
        print(f"{PROG}: error: {name}: no such command: no installed distribution has a console script of that "
              f"name, and no Python script of that name is on PATH", file=sys.stderr)
        return 2
    from elmo.allennlp.install import install_as_allennlp

    try:
        install_as_allennlp()
    except RuntimeError as e:  # a real AllenNLP is installed: never shadowed
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    kind, what = command
    sys.argv = [name if kind == "entry point" else what, *args]
    try:
        if kind == "entry point":
            result = what.load()()
        else:
            runpy.run_path(what, run_name="__main__")
            result = 0
    except SystemExit as e:  # what the console script's own wrapper would have exited with
        result = e.code
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    print(result, file=sys.stderr)  # sys.exit("message"), as Python reports it
    return 1


__all__ = ["find_command", "main"]
