"""The package's layout: its import graph has no circle, and no import runs back up its floors.

Every ``import`` and ``from ... import`` in ``src/elmo`` counts, at module level or inside a
function (a function-local import only delays a circle, it does not break it), ``if
TYPE_CHECKING:`` blocks included. ``from package import name`` is an edge to the submodule
``package.name`` when there is one, else to the package's ``__init__``.

The rooms (``elmo.<room>``: a subpackage or a top-level module) stand on :data:`FLOORS`, from the
ground up. A module may import its own room and the rooms of lower floors, never a room on its
own floor or above (exceptions, known and to be moved, would be listed in :data:`UPWARD_EXCEPTIONS`).
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "elmo"

# The floors, from the ground up; "elmo" is the package's own __init__ (the public API).
FLOORS = (
    ("jsonio",),  # the one JSON reader: below everything that reads JSON, fileio included
    ("version", "fileio", "devices", "checks", "hdf5io", "progress"),  # leaves: nothing of the package but jsonio below them
    ("threads",),  # how many CPU threads and how they wait: before PyTorch loads (imports checks)
    ("model",),  # the network (model.network, the specification), config, char ids, vocabularies, weights
    ("kernels",),  # the network's fast paths, and the one choice between them (kernels.dispatch)
    ("lm",),  # the biLM as a language model (its softmax, its loss), trained through the kernels
    ("hub",),  # where models come from: resolve, checkpoints, downloads, archives
    ("inference", "training"),  # running a biLM; training one
    ("serve",),  # a running biLM behind HTTP (elmo serve; Ray Serve's deployment builds on it)
    ("tasks", "integrations", "allennlp", "simple_elmo"),  # what uses a running biLM
    ("elmo",),  # the public API (src/elmo/__init__.py)
    ("cli",),  # the command line: only it parses arguments
)
# Imports that run back up, known and to be moved: (importing module, imported module).
UPWARD_EXCEPTIONS: set[tuple[str, str]] = set()


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its __init__)."""
    modules = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` (at ``path``) imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # "import elmo.a.b" names elmo.a.b; a name inside a module is an edge to the module.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def room_of(module: str) -> str:
    """``elmo.inference.embed`` -> ``inference``; the package itself -> ``elmo``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], floors=FLOORS, allowed=frozenset()) -> list[str]:
    """Each import of ``graph`` into another room on its own floor or above, as ``a -> b``
    (``allowed``: (a, b) pairs let through). A room on no floor is an error too: a new room must
    be given its floor."""
    floor = {room: level for level, rooms in enumerate(floors) for room in rooms}
    found = []
    for module, targets in sorted(graph.items()):
        if room_of(module) not in floor:
            found.append(f"{module}: its room {room_of(module)!r} is on no floor (add it to FLOORS)")
            continue
        for target in sorted(targets):
            here, there = room_of(module), room_of(target)
            if there != here and floor.get(there, len(floors)) >= floor[here] and (module, target) not in allowed:
                found.append(f"{module} -> {target}")
    return found


def test_no_import_runs_back_up_the_floors():
    upward = upward_imports(import_graph(), allowed=UPWARD_EXCEPTIONS)
    assert not upward, "imports on the same floor or upward: " + "; ".join(upward)


def test_the_floor_check_finds_an_import_that_runs_back_up():
    """The check itself can fail: an upward import, a sideways one, and a room with no floor."""
    floors = (("fileio",), ("model",), ("inference", "training"))
    graph = {"elmo.fileio": set(), "elmo.model.bilm": {"elmo.fileio"},
             "elmo.inference.embed": {"elmo.model.bilm", "elmo.inference.runtime"},
             "elmo.inference.runtime": set(), "elmo.model.lstm": {"elmo.inference.runtime"},
             "elmo.training.train": {"elmo.inference.embed"}, "elmo.serve.app": set()}
    assert upward_imports(graph, floors) == [
        "elmo.model.lstm -> elmo.inference.runtime", "elmo.serve.app: its room 'serve' is on no floor (add it to "
        "FLOORS)", "elmo.training.train -> elmo.inference.embed"]
    assert upward_imports(graph, floors, allowed={("elmo.model.lstm", "elmo.inference.runtime"),
                                                  ("elmo.training.train", "elmo.inference.embed")}) == [
        "elmo.serve.app: its room 'serve' is on no floor (add it to FLOORS)"]


# What the specification (elmo.model.network) may import of the package: the leaves its inputs
# and parameters are described in, nothing that computes.
NETWORK_LEAVES = {"elmo.devices", "elmo.model.chars", "elmo.model.config", "elmo.model.dictionary",
                  "elmo.model.dropout"}


def test_the_network_imports_no_fast_path():
    """The network is read top to bottom on its own: model.network imports only description
    leaves, no room of the model imports kernels, inference or training (nor the kernels those
    two), whatever FLOORS says of them."""
    graph = import_graph()
    assert graph["elmo.model.network"] <= NETWORK_LEAVES, sorted(graph["elmo.model.network"] - NETWORK_LEAVES)
    above = {"model": ("kernels", "inference", "training"), "kernels": ("inference", "training")}
    wrong = [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
             if room_of(target) in above.get(room_of(module), ())]
    assert not wrong, "; ".join(wrong)
    assert {"elmo.kernels.dispatch", "elmo.kernels.fused_lstm"} <= graph["elmo.lm.model"]


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert len(graph) > 30 and "elmo.inference.runtime" in graph["elmo.inference.embed"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_function_local_circle(tmp_path):
    """The check itself can fail: two modules importing each other, one inside a function."""
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from elmo.sub.b import thing\n")
    (package / "sub" / "b.py").write_text("def thing():\n    from . import a\n    return a\n")
    modules = {"elmo": package / "__init__.py", "elmo.sub": package / "sub" / "__init__.py",
               "elmo.sub.a": package / "sub" / "a.py", "elmo.sub.b": package / "sub" / "b.py"}
    graph = {name: imported_modules(name, path, modules) for name, path in modules.items()}
    assert graph["elmo.sub.b"] == {"elmo.sub.a"} and graph["elmo.sub.a"] == {"elmo.sub.b"}
    assert find_cycle(graph) == ["elmo.sub.a", "elmo.sub.b", "elmo.sub.a"]
