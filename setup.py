"""The long description on PyPI: the README with its links into the repository made absolute.

The README links to docs/ and src/ relatively, which GitHub renders and PyPI's page cannot (there
is no docs/ next to it). Everything else about the package is declared in pyproject.toml; this
file only computes ``readme``, which pyproject.toml marks dynamic."""

import re
import tomllib
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
# A Markdown link or image whose target is not a URL, an anchor on the same page or an e-mail.
RELATIVE_LINK = re.compile(r"(\]\()(?!https?://|mailto:|#)([^)\s]+)(\))")


def long_description(readme: str, repository: str) -> str:
    """``readme`` with every relative link target made absolute under ``repository``'s main
    branch: ``docs/x.md#y`` becomes ``REPOSITORY/blob/main/docs/x.md#y``."""
    base = repository.rstrip("/") + "/blob/main/"
    return RELATIVE_LINK.sub(lambda m: m.group(1) + base + m.group(2).removeprefix("./") + m.group(3), readme)


if __name__ == "__main__":
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    setup(long_description=long_description((ROOT / "README.md").read_text(encoding="utf-8"),
                                            project["urls"]["Repository"]),
          long_description_content_type="text/markdown")
