"""The runtime's boundary (elmo.inference.runtime): every other module of the package runs a
biLM through the Runtime's public names only, never one that starts with ``_`` (nor one of its
StateKeeper's), so that the runtime's insides can change without breaking a caller.

Two checks: a scan of the package's source for such an access (``runtime._x``,
``self.embedder.runtime._x``, ``runtime.states._x``, ``getattr(runtime, "_x")``), and a watched
runtime that records every private name a module other than runtime.py asks it for while a file
is embedded (stateful and resumed, with a vocabulary cache, and a long line in windows)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import Interrupt, corpus, interrupt_after, load_fixture_model, write_lines

from elmo import Embedder, FileEmbedder
from elmo.inference.layer_cache import load_or_compute
from elmo.inference.runtime import Runtime
from elmo.inference.vocab_cache import save_vocab_cache

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "elmo"
RUNTIME_MODULE = "inference/runtime.py"
STATES_MODULE = "inference/states.py"
# A name or attribute that holds a runtime: runtime, _runtime, self.runtime, embedder.runtime.
RUNTIME_NAME = re.compile(r"_?runtime")
REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def annotated_runtime(annotation: ast.expr | None) -> bool:
    """Whether an annotation names Runtime (``Runtime``, ``"Runtime"``, ``Runtime | None``, ``runtime.Runtime``)."""
    if annotation is None:
        return False
    text = annotation.value if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str) \
        else ast.unparse(annotation)
    return re.search(r"\bRuntime\b", text) is not None


class RuntimeAccesses(ast.NodeVisitor):
    """The accesses of one module to a runtime's attributes (and to its ``states``): ``private``
    lists ``(line, code)`` of those to a ``_`` name this module may not reach, ``public`` counts the others."""

    def __init__(self, tree: ast.Module, module: str):
        self.module = module
        self.private: list[tuple[int, str]] = []
        self.public = 0
        # Names bound to a runtime: `rt = embedder.runtime`, `def f(rt: Runtime)`.
        self.aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and annotated_runtime(node.annotation):
                self.aliases.add(node.arg)
            elif isinstance(node, ast.Assign) and self.is_runtime(node.value):
                self.aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and (
                    annotated_runtime(node.annotation) or node.value is not None and self.is_runtime(node.value)):
                self.aliases.add(node.target.id)
        self.visit(tree)

    def is_runtime(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return RUNTIME_NAME.fullmatch(node.id) is not None or node.id in self.aliases
        if isinstance(node, ast.Attribute):
            return RUNTIME_NAME.fullmatch(node.attr) is not None
        if isinstance(node, ast.Call):  # Runtime(model)._x
            func = node.func
            return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == "Runtime"
        return False

    def owner(self, node: ast.expr) -> str | None:
        """The module whose private names ``node``'s attributes are: the runtime's, or its StateKeeper's."""
        if self.is_runtime(node):
            return RUNTIME_MODULE
        if isinstance(node, ast.Attribute) and node.attr == "states" and self.is_runtime(node.value):
            return STATES_MODULE
        return None

    def check(self, node: ast.AST, target: ast.expr, name: str) -> None:
        owner = self.owner(target)
        if owner is None:
            return
        if is_private(name) and owner != self.module:
            self.private.append((node.lineno, ast.unparse(node)))
        else:
            self.public += 1

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.check(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if (isinstance(node.func, ast.Name) and node.func.id in REFLECTION and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self.check(node, node.args[0], node.args[1].value)
        self.generic_visit(node)


def scan(source: str, module: str) -> RuntimeAccesses:
    return RuntimeAccesses(ast.parse(source), module)


def test_the_scan_finds_each_way_of_reaching_a_runtimes_private_names():
    source = '''
def f(runtime, embedder, model):
    runtime._token_vectors([["a"]], None)
    embedder.runtime._stacked_weights(0)
    self.runtime._memo.clear()
    self._runtime._lstm_eager
    runtime.states._carried = None
    getattr(embedder.runtime, "_vocab")
    Runtime(model)._forward_fast
    rt = embedder.runtime
    rt._memo_key

def g(engine: Runtime | None):
    return engine._stacked

def h(make):
    kept: Runtime = make()
    return kept._memo
'''
    found = scan(source, "inference/embed_file.py").private
    assert [line for line, _ in found] == [3, 4, 5, 6, 7, 8, 9, 11, 14, 18]
    # The same code is at home in runtime.py, except its StateKeeper's private name.
    assert [code for _, code in scan(source, RUNTIME_MODULE).private] == ["runtime.states._carried"]


def test_the_scan_leaves_public_names_and_a_modules_own_private_attributes_alone():
    source = '''
class Elmo:
    def runtime(self):
        if self._runtime is None or self._runtime.device != self.device:
            self._runtime = Runtime(self.bilm)
        self._runtime.states.carried = None
        return self.runtime.run_batch([["a"]]).layers, self.runtime.__class__
'''
    accesses = scan(source, "inference/elmo.py")
    assert accesses.private == []
    assert accesses.public == 5  # .device, .states, .states.carried, .run_batch, .__class__


def test_no_module_reaches_a_private_name_of_a_runtime_or_its_states():
    found, reaching = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        accesses = scan(path.read_text(encoding="utf-8"), module)
        found += [f"src/elmo/{module}:{line}: {code}" for line, code in accesses.private]
        if accesses.public:
            reaching.add(module)
    assert found == [], "private runtime names reached from outside runtime.py (add a public method there):\n" + \
        "\n".join(found)
    # The scan sees the runtime where the package uses it: a scan that recognised nothing would pass vacuously.
    assert {"inference/embed.py", "inference/embed_file.py", "inference/long_lines.py", "inference/layer_cache.py",
            "inference/elmo.py"} <= reaching


class WatchedRuntime(Runtime):
    """A runtime that records each private name asked of it from outside runtime.py."""

    foreign: ClassVar[list[tuple[str, str]]] = []

    def __getattribute__(self, name: str):
        if is_private(name):
            module = sys._getframe(1).f_globals.get("__name__")
            if module != "elmo.inference.runtime":
                WatchedRuntime.foreign.append((module, name))
        return super().__getattribute__(name)


def watched(embedder: Embedder) -> Embedder:
    embedder.runtime.__class__ = WatchedRuntime
    return embedder


@pytest.fixture
def watch():
    WatchedRuntime.foreign = []
    yield WatchedRuntime.foreign
    WatchedRuntime.foreign = []


def test_the_watch_sees_a_private_name_asked_from_outside(watch):
    embedder = watched(Embedder(load_fixture_model("allennlp"), state="reset"))
    embedder.embed_sentence("a watched runtime")
    assert watch == []  # the runtime's own calls are its business
    embedder.runtime._memo  # noqa: B018
    assert watch == [(__name__, "_memo")]


def test_embedding_files_asks_the_runtime_for_public_names_only(tmp_path, monkeypatch, watch):
    model = load_fixture_model("allennlp")
    lines = corpus(24, seed=5)
    lines[3] = " ".join(f"w{i % 31}" for i in range(300))  # over max_tokens: embedded in windows
    src = write_lines(tmp_path / "in.txt", lines)
    vocab = tmp_path / "vocab.npz"
    save_vocab_cache(model, sorted({w for line in lines for w in line.split()})[:20], vocab)

    def stateful():
        return watched(Embedder(model, state="stateful", batch_size=4, vocab_cache=vocab))

    # Stateful, interrupted, resumed: the journal saves the carried state and the resumed run restores it.
    out = tmp_path / "stateful.hdf5"
    with monkeypatch.context() as patch:
        interrupt_after(patch, 3)
        with pytest.raises(Interrupt):
            FileEmbedder(stateful(), chunk_sentences=8).write(src, out)
    report = FileEmbedder(stateful(), chunk_sentences=8).write(src, out, resume=True)
    assert report.resumed == 12
    # Warm, with a vocabulary cache and a line in windows; and a task's layer cache.
    warm = watched(Embedder(model, max_tokens=128, vocab_cache=vocab))
    FileEmbedder(warm, layout="packed").write(src, tmp_path / "warm.hdf5")
    load_or_compute(warm, [line.split() for line in lines[:5]], tmp_path / "layers", "x", progress=False)
    assert watch == []
