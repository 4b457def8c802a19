"""docs/architecture.md keeps in step with ``src/elmo``: every package folder (a folder with an
``__init__.py``) and every top-level module is named there by its path, and every ``src/elmo/...``
path the page names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "elmo"
PATH = re.compile(r"src/elmo(?:/[\w.-]+)*/?")


def named_paths() -> set[str]:
    """Every ``src/elmo...`` path the page names, as written (a folder may end in ``/``)."""
    return set(PATH.findall(PAGE.read_text(encoding="utf-8")))


def test_every_package_folder_and_top_level_module_is_on_the_page():
    named = {p.rstrip("/") for p in named_paths()}
    folders = {str(init.parent.relative_to(ROOT)) for init in PACKAGE.rglob("__init__.py")}
    modules = {str(path.relative_to(ROOT)) for path in PACKAGE.glob("*.py") if path.name != "__init__.py"}
    assert folders and modules
    missing = sorted((folders | modules) - named)
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_every_path_the_page_names_exists():
    paths = named_paths()
    assert "src/elmo/model/" in paths
    gone = sorted(p for p in paths if not (ROOT / p).exists())
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_the_page_names_every_floor_of_the_layout_test():
    """The floors table lists the rooms tests/test_layout.py holds, each once."""
    layout = (ROOT / "tests" / "test_layout.py").read_text(encoding="utf-8")
    floors = re.search(r"^FLOORS = \((.*?)^\)", layout, re.S | re.M).group(1)
    rooms = re.findall(r'"(\w+)"', "\n".join(line.split("#")[0] for line in floors.splitlines()))
    table = re.findall(r"^\| (\d+) \| (.*) \|$", PAGE.read_text(encoding="utf-8"), re.M)
    listed = [name for _, cell in table for name in re.findall(r"`(\w+)`", cell)]
    assert rooms and listed == rooms
