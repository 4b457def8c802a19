"""The distribution: its name on PyPI in every install hint, its license, its long description
(the README with absolute links, made by setup.py) and, in the slow pass, the wheel and sdist that
``python -m build`` makes from the repository."""

import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
import tarfile
from pathlib import Path

import pytest

from elmo.version import DISTRIBUTION, install_hint

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def load_setup():
    spec = importlib.util.spec_from_file_location("elmo_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_distribution_name_is_the_one_every_hint_names():
    assert PROJECT["name"] == DISTRIBUTION == "elmo-embeddings"
    assert install_hint("serve") == "pip install 'elmo-embeddings[serve]'"
    # The test extra installs the others through the distribution's own name, not `elmo`'s.
    for requirement in PROJECT["optional-dependencies"]["test"]:
        assert not requirement.startswith("elmo["), requirement


def test_no_install_hint_names_the_other_projects_elmo():
    """``pip install elmo`` installs an unrelated project: no message or page may say it."""
    wrong = re.compile(r"""pip install (-U |--upgrade )?["']?elmo(\[|["'\s]|$)""")
    offending = []
    for path in [*sorted((ROOT / "src").rglob("*.py")), ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if wrong.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offending, "\n".join(offending)


def test_the_license_is_apache_2_in_the_file_and_the_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]


def test_the_long_description_links_only_absolutely_and_to_files_that_exist():
    setup = load_setup()
    repository = PROJECT["urls"]["Repository"]
    text = setup.long_description((ROOT / "README.md").read_text(), repository)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets, "the README has links"
    relative = [t for t in targets if not re.match(r"(https?://|mailto:|#)", t)]
    assert not relative, relative
    base = repository + "/blob/main/"
    into_repository = [t for t in targets if t.startswith(base)]
    assert into_repository
    missing = [t for t in into_repository if not (ROOT / t.removeprefix(base).split("#")[0]).exists()]
    assert not missing, missing
    # Only the links changed: the rest of the README is the same text.
    assert re.sub(r"\]\([^)]*\)", "]()", text) == re.sub(r"\]\([^)]*\)", "]()", (ROOT / "README.md").read_text())


def test_long_description_rewrites_relative_targets_and_leaves_urls_and_anchors():
    setup = load_setup()
    got = setup.long_description("[a](docs/x.md#y) [b](https://e.org/z) [c](#here) ![d](./img.png)", "https://g.com/o/r/")
    assert got == ("[a](https://g.com/o/r/blob/main/docs/x.md#y) [b](https://e.org/z) [c](#here) "
                   "![d](https://g.com/o/r/blob/main/img.png)")


@pytest.mark.slow
def test_build_makes_a_wheel_and_sdist_with_the_license_and_without_the_tests(tmp_path):
    """``python -m build`` from a copy of the committed tree (without network: no isolation, the
    installed setuptools); ``twine check`` where twine is installed."""
    pytest.importorskip("build")
    source = tmp_path / "source"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(source)],
                          capture_output=True, text=True, timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)} | {
                              k: v for k, v in __import__("os").environ.items() if k in ("PATH", "PYTHONPATH")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # setuptools' own deprecation warnings (a license table, a missing file) would show here.
    assert "SetuptoolsDeprecationWarning" not in done.stdout + done.stderr, done.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("elmo_embeddings-*.whl")
    [sdist] = (tmp_path / "dist").glob("elmo_embeddings-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "elmo/py.typed" in names and "elmo/resources/model/weights.hdf5" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata and "Name: elmo-embeddings" in metadata
    assert "](docs/" not in metadata
    members = [m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m]
    assert "LICENSE" in members and "CHANGELOG.md" in members and "src/elmo/py.typed" in members
    assert not [m for m in members if m.startswith("tests/")], "the sdist ships no tests"
    if importlib.util.find_spec("twine") is not None:
        checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                                 capture_output=True, text=True, timeout=120)
        assert checked.returncode == 0, checked.stdout + checked.stderr
