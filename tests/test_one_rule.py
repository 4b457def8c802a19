"""One rule per concern, held by a scan of ``src/``: every JSON read goes through ``elmo.jsonio``'s
bounded reader, every number a caller gives is checked by ``elmo.checks`` (one wording of "must be
at least"), the umask idiom lives in ``elmo.fileio`` and so does every HDF5 file written to disk. A new module that does any of these its
own way fails here, not in a user's hands. Each exception below says why it is one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "elmo"

# (module, why its json.loads is not jsonio's)
JSON_EXCEPTIONS = {
    "serve/protocol.py": "a request body, read after the server bounded its size; its errors are 400s naming the "
                         "byte at fault, which the clients' tests hold",
    "serve/worker.py": "messages between the server and its own model process over a pipe, never a user's bytes",
}
# (module, the owner of the words)
CHECK_EXCEPTIONS = {
    "checks.py": "the one check itself",
    "inference/outputs.py": "a field of an output's attribute, checked with jsonio's words",
    "inference/precision.py": "a field of the precision cache, checked with jsonio's words",
    "model/dropout.py": "a probability from 0 to 1, both allowed, where check_number's upper bound is strict",
    "model/config.py": "lstm.cell_clip and proj_clip, where Infinity is allowed and check_number refuses it",
    "model/vocab.py": "max_size, whose least is the count of the special tokens, which the message names",
}
# A bound worded by hand: "must be at least", "must be >= 0", "must be more than", "must be in [0, 1]"...
HAND_WORDED_BOUND = re.compile(r"must be (at least|at most|more than|less than|above|below|between|positive|"
                               r"a positive|>=|<=|>|<|in \[)")


def modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_every_json_read_goes_through_the_bounded_reader():
    found = []
    for name, tree in modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("load", "loads") and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "json" and name != "jsonio.py" and name not in JSON_EXCEPTIONS):
                found.append(f"{name}:{node.lineno}")
    assert not found, f"read JSON with elmo.jsonio.read_json or loads (bounded size and depth): {found}"


def test_the_json_exceptions_are_still_needed():
    """An exception whose module no longer reads JSON its own way leaves the list."""
    readers = {name for name, tree in modules() for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr in ("load", "loads")
               and isinstance(node.value, ast.Name) and node.value.id == "json"}
    assert set(JSON_EXCEPTIONS) <= readers, set(JSON_EXCEPTIONS) - readers


def _raised_strings(tree: ast.AST):
    """(line, text) of every string constant inside a ``raise``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            for inner in ast.walk(node.exc):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    yield inner.lineno, inner.value


def test_every_bound_on_a_number_is_worded_by_elmo_checks():
    found = [f"{name}:{line}: {text.strip()!r}" for name, tree in modules() if name not in CHECK_EXCEPTIONS
             for line, text in _raised_strings(tree) if HAND_WORDED_BOUND.search(text)]
    assert not found, f"check the number with elmo.checks.check_count or check_number: {found}"


def test_the_check_exceptions_are_still_needed():
    worded = {name for name, tree in modules() for _, text in _raised_strings(tree) if HAND_WORDED_BOUND.search(text)}
    assert set(CHECK_EXCEPTIONS) - {"checks.py"} <= worded, set(CHECK_EXCEPTIONS) - worded - {"checks.py"}


def test_the_scan_finds_a_hand_worded_bound():
    """The scan itself can fail: a module written the old way is caught."""
    tree = ast.parse('def f(k):\n    if k < 1:\n        raise ValueError(f"k: must be at least 1, got {k}")\n')
    worded = [text for _, text in _raised_strings(tree) if HAND_WORDED_BOUND.search(text)]
    assert worded == ["k: must be at least 1, got "]


def test_the_umask_is_read_only_in_fileio():
    found = [f"{name}:{node.lineno}" for name, tree in modules() if name != "fileio.py" for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in ("umask", "chmod")]
    assert not found, f"give a file plain permissions with elmo.fileio.give_plain_permissions: {found}"


# (module, why it makes an HDF5 file itself)
HDF5_WRITER_EXCEPTIONS = {
    "fileio.py": "the one writer itself (atomic_hdf5)",
    "hdf5io.py": "a file image built in memory (hdf5_image), which fileio.atomic_write_bytes writes",
}


def _writes_hdf5(node: ast.AST) -> bool:
    """A call ``h5py.File(..., mode)`` that creates or changes a file (any mode but ``"r"``, h5py's default)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "File"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "h5py"):
        return False
    modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
    return not all(isinstance(m, ast.Constant) and m.value == "r" for m in modes)


def test_every_hdf5_file_is_written_by_the_one_writer():
    """h5py's own driver does not survive a failed write (a full disk, ``ulimit -f``): a segfault in
    the next file opened. elmo.fileio.atomic_hdf5 keeps the error from HDF5 and names the output."""
    found = [f"{name}:{node.lineno}" for name, tree in modules() if name not in HDF5_WRITER_EXCEPTIONS
             for node in ast.walk(tree) if _writes_hdf5(node)]
    assert not found, f"write HDF5 with elmo.fileio.atomic_hdf5: {found}"
    opened = [name for name, tree in modules() if any(_writes_hdf5(node) for node in ast.walk(tree))]
    assert sorted(opened) == sorted(HDF5_WRITER_EXCEPTIONS)


def test_the_hdf5_scan_sees_a_writer():
    tree = ast.parse('import h5py\nh5py.File(p, "w")\nh5py.File(p, mode="a")\nh5py.File(p)\nh5py.File(p, "r")\n')
    assert [_writes_hdf5(node) for node in ast.walk(tree) if isinstance(node, ast.Call)] == [True, True, False, False]


# (module, why it opens a file for writing other than the temporary of elmo.fileio.atomic_path)
WRITE_EXCEPTIONS = {
    "fileio.py": "the one writer itself",
    "hub/checkpoints.py": "a model card inside the temporary folder of fileio.atomic_folder, renamed whole",
    "inference/journal.py": "the journal in embed's own work folder, appended frame by frame and checked by CRC",
    "training/prepare.py": "a shard's atomic_path temporary, held open across lines through an ExitStack",
    "training/train.py": "metrics.csv in the run folder elmo owns, appended a row per logged step",
}


def _write_opens(tree: ast.AST) -> list[int]:
    """Lines of ``open(path, mode)`` calls with a writing mode whose path is not a name bound by
    ``with atomic_path(...) as name``."""
    bound = {item.optional_vars.id for node in ast.walk(tree) if isinstance(node, (ast.With, ast.AsyncWith))
             for item in node.items if isinstance(item.context_expr, ast.Call)
             and getattr(item.context_expr.func, "id", getattr(item.context_expr.func, "attr", None)) == "atomic_path"
             and isinstance(item.optional_vars, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open" and node.args:
            modes = node.args[1:2] + [k.value for k in node.keywords if k.arg == "mode"]
            mode = modes[0].value if modes and isinstance(modes[0], ast.Constant) else "r"
            path = node.args[0]
            if any(c in mode for c in "wax+") and not (isinstance(path, ast.Name) and path.id in bound):
                found.append(node.lineno)
    return found


def test_every_file_is_written_through_the_one_writer():
    """A file opened for writing is an atomic_path temporary (renamed into place whole, its OS
    errors naming the output, never an input), or its module says here why not."""
    found = [f"{name}:{line}" for name, tree in modules() if name not in WRITE_EXCEPTIONS
             for line in _write_opens(tree)]
    assert not found, f"write through elmo.fileio (atomic_path, atomic_write_text, atomic_hdf5...): {found}"
    writers = {name for name, tree in modules() if _write_opens(tree)}
    assert set(WRITE_EXCEPTIONS) <= writers, set(WRITE_EXCEPTIONS) - writers  # an exception still needed


def test_the_write_scan_sees_a_plain_open():
    tree = ast.parse('with atomic_path(p) as tmp, open(tmp, "w") as f:\n    pass\nopen(p, "wb")\nopen(p)\n'
                     'open(p, mode="a")\n')
    assert _write_opens(tree) == [3, 5]


LONGEST = 80  # lines of a function, its def to its last line
REASON = "Long on purpose"


def long_functions():
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LONGEST and REASON not in (ast.get_docstring(node) or ""):
                    yield f"{name}:{node.name}", length


def test_no_function_is_long_without_saying_why():
    """A function over 80 lines splits into named steps, or its docstring says why it may not."""
    found = dict(long_functions())
    assert not found, f"split these, or say in the docstring why not ({REASON!r}): {found}"
