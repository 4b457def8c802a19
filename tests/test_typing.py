"""Types: ``py.typed`` ships, the public API (``elmo``'s and ``elmo.allennlp``'s exports) passes
``mypy --strict`` as a user's code sees it (tests/typed_usage.py), and, in the slow pass, the whole
package passes mypy's default mode with the per-module ``ignore_errors`` list of pyproject.toml,
which may only shrink."""

import ast
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

import elmo
import elmo.allennlp

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "tests" / "typed_usage.py"


def mypy(*arguments: str, config: Path | None = None) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    # The cache outside the repository makes a second run take seconds (a first one of the whole
    # package takes minutes on 2 cores).
    cache = os.environ.get("MYPY_CACHE_DIR", os.path.join(tempfile.gettempdir(), "elmo-mypy-cache"))
    command = [sys.executable, "-m", "mypy", "--cache-dir", cache, "--no-error-summary", "--hide-error-context"]
    command += ["--config-file", str(config or ROOT / "pyproject.toml"), *arguments]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_the_package_says_it_is_typed():
    assert (ROOT / "src" / "elmo" / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["elmo"]
    assert "py.typed" in package_data


def test_the_typed_usage_file_uses_every_public_name():
    tree = ast.parse(USAGE.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "elmo"
                for alias in node.names}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                  and isinstance(node.value, ast.Attribute) and node.value.attr == "allennlp"}
    assert not set(elmo.__all__) - imported, set(elmo.__all__) - imported
    assert not set(elmo.allennlp.__all__) - attributes, set(elmo.allennlp.__all__) - attributes


# mypy's runs are in CI's slow pass: a first run, without a cache, takes minutes on 2 cores.
@pytest.mark.slow
def test_the_public_api_passes_mypy_strict():
    # --follow-imports=silent: the user's file is checked against elmo's signatures; the errors of
    # elmo's own bodies are the next test's business.
    done = mypy("--strict", "--follow-imports=silent", str(USAGE))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_mypy_strict_fails_on_a_misuse_of_the_api(tmp_path):
    """The check above can fail: a wrong type for an Embedder's result is an error."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text('from elmo import Embedder\n\nvectors: int = Embedder().embed_sentence("a b")\n')
    done = mypy("--strict", "--follow-imports=silent", str(wrong))
    assert done.returncode == 1 and "Incompatible types in assignment" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_the_package_passes_mypy_and_its_ignore_list_only_shrinks(tmp_path):
    """One run of mypy without the ignore list: every error must be in a listed module (else the
    package fails mypy with the list), and every listed module must have one (else it leaves the list)."""
    text = (ROOT / "pyproject.toml").read_text()
    config = tomllib.loads(text)["tool"]["mypy"]
    listed = {module for override in config["overrides"] if override.get("ignore_errors")
              for module in override["module"]}
    assert listed, "the list is in pyproject.toml"
    # The same config without the ignore_errors block.
    without = re.sub(r"\[\[tool\.mypy\.overrides\]\]\n(#[^\n]*\n)*module = \[[^\]]*\]\nignore_errors = true\n", "", text)
    assert "ignore_errors = true" not in without
    (tmp_path / "pyproject.toml").write_text(without.replace('mypy_path = "src"', f'mypy_path = "{ROOT / "src"}"'))
    done = mypy(str(ROOT / "src" / "elmo"), config=tmp_path / "pyproject.toml")
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    failing = {re.match(r"(?:.*/)?src/(.+)\.py:", line).group(1).replace("/", ".") for line in errors}
    assert not failing - listed, "mypy errors in modules not on the list:\n" + "\n".join(
        line for line in errors if re.match(r"(?:.*/)?src/(.+)\.py:", line).group(1).replace("/", ".") not in listed)
    assert not listed - failing, f"no mypy errors left in {sorted(listed - failing)}: take them off the list in pyproject.toml"
