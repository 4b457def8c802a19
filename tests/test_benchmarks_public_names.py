"""The benchmarks use elmo as a user does: no private name of elmo's modules (one defined in
src/elmo with a leading underscore) is reached from benchmarks/, so that a change inside the
package cannot break a measurement silently, and what is timed is what the package promises."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def private_names() -> set[str]:
    """Names with one leading underscore that src/elmo defines: functions, classes, module
    variables and attributes assigned."""
    names = set()
    for path in (ROOT / "src" / "elmo").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {n for n in names if re.fullmatch(r"_[A-Za-z]\w*", n) and not n.startswith("__")}


def reached(path: Path, private: set[str]) -> set[str]:
    """The private names ``path`` reaches: as attributes, as names imported from elmo, or as
    strings (``getattr(obj, "_name")``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in private:
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "elmo":
            found |= {a.name for a in node.names if a.name.startswith("_")}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in private:
            found.add(node.value)
    return found


def test_no_private_name_of_elmo_is_reached_from_the_benchmarks():
    private = private_names()
    assert {"_token_vectors", "_lstm_eager", "_memo"} <= private  # the scan sees the runtime's internals
    paths = sorted((ROOT / "benchmarks").rglob("*.py"))
    assert (ROOT / "benchmarks" / "gpu" / "common.py") in paths  # the GPU suite's sections' folder is scanned too
    found = {(path.relative_to(ROOT).as_posix(), name) for path in paths for name in reached(path, private)}
    assert sorted(found) == []
