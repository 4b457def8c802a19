"""The command line on a core install (torch, numpy, h5py, tqdm): ``elmo --help``, ``elmo
--version`` and every ``elmo VERB --help`` work without any optional extra, and a verb whose
extra is missing says which, in one line, when it runs. Each check runs ``python -m
elmo.cli.main`` in a subprocess whose imports of the extras' packages fail, as they would
there."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from elmo.cli.main import EXTRA_OF_PACKAGE, VERBS

ROOT = Path(__file__).resolve().parent.parent
# Every optional extra's packages (pyproject.toml), flair's and what the tests add on top.
OPTIONAL = sorted(set(EXTRA_OF_PACKAGE) | {"flair", "starlette", "httpx", "openai"})

# Runs ``python -m elmo.cli.main ARGS`` for each ARGS of the JSON list argv[2], in one process in
# which importing a package named in argv[1] (or a module of it) fails as if it were not
# installed; prints the exit status, standard output and standard error of each as JSON.
CORE_INSTALL = """
import contextlib, importlib.abc, io, json, runpy, sys

BLOCKED = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
results = []
for args in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["elmo", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("elmo.cli.main", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    results.append({"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


def core_install(*runs: list[str]) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", CORE_INSTALL, ",".join(OPTIONAL), json.dumps(list(runs))],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_help_and_version_of_every_verb_need_no_extra():
    helps = [[verb, "--help"] for verb in VERBS] + [["task", "train", "--help"], ["task", "evaluate", "--help"]]
    results = core_install(*helps, ["--help"], ["--version"])
    for result in results:
        assert result["code"] == 0, result
        assert result["err"] == "", result
    by_args = {" ".join(r["args"]): r["out"] for r in results}
    for verb in VERBS:
        assert by_args[f"{verb} --help"].startswith(f"usage: elmo {verb} "), by_args[f"{verb} --help"][:200]
    assert "--data-root" in by_args["task train --help"] and "--kind" in by_args["task evaluate --help"]
    assert by_args["--help"].startswith("usage: elmo ") and all(verb in by_args["--help"] for verb in VERBS)
    assert by_args["--version"].startswith("elmo ")


@pytest.mark.parametrize("argv,extra", [
    (["task", "train", "configs/tasks/ner.toml"], "tasks"),
    (["task", "evaluate", "runs/none", "--data", "none.txt"], "tasks"),
    (["prepare", "examples/sentences.txt", "--output", "OUT"], "train"),
    (["export", "default", "--output", "OUT", "--format", "onnx"], "onnx"),
])
def test_a_verb_whose_extra_is_missing_names_it_when_it_runs(tmp_path, argv, extra):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    [result] = core_install(argv)
    assert result["code"] == 2, result
    assert result["err"].endswith(f"from the optional extra {extra!r}: pip install 'elmo-embeddings[{extra}]'\n"), result
    assert len(result["err"].splitlines()) == 1 and result["err"].startswith(f"elmo {argv[0]}: error: this command "
                                                                           "needs "), result
    assert not (tmp_path / "out").exists()


def test_serve_without_its_extra_names_it_when_it_runs():
    [result] = core_install(["serve", "--model", "tiny"])
    assert result["code"] == 2, result
    assert result["err"].startswith("elmo serve: error: the [serve] extra is not installed: pip install "
                                    "'elmo-embeddings[serve]'"), result
    assert len(result["err"].splitlines()) == 1, result


def test_building_the_parser_imports_no_optional_package():
    """With every extra installed, building the whole parser (what ``elmo --help`` does) imports
    none of their packages: each verb imports its own when it runs."""
    code = ("import json, sys; from elmo.cli.main import build_parser; build_parser(); "
            "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "elmo" in loaded and not loaded & set(OPTIONAL), sorted(loaded & set(OPTIONAL))


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_help_and_version_load_no_pytorch(args):
    """``elmo --help`` and ``elmo --version`` answer without importing PyTorch (or numpy, h5py):
    the verbs' one-line help is read from their source, and ``import elmo`` loads the API lazily."""
    code = ("import json, runpy, sys\n"
            f"sys.argv = ['elmo', *{args!r}]\n"
            "try:\n    runpy.run_module('elmo.cli.main', run_name='__main__', alter_sys=True)\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    loaded = set(json.loads(done.stderr.splitlines()[-1]))
    assert "elmo" in loaded and not loaded & {"torch", "numpy", "h5py"}, sorted(loaded & {"torch", "numpy", "h5py"})
    if args == ["--help"]:
        assert all(verb in done.stdout for verb in VERBS) and "Embed a file of sentences" in done.stdout


def test_verb_help_read_from_source_is_the_modules_own():
    from elmo.cli.main import _module, verb_help

    for verb, name in VERBS.items():
        module = _module(verb)
        saved = sys.modules.pop(f"elmo.cli.{name}")  # not loaded: read from the source
        try:
            assert verb_help(verb) == module.HELP, verb
        finally:
            sys.modules[f"elmo.cli.{name}"] = saved
