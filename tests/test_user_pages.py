"""The user pages (README.md, docs/, benchmarks/README.md, results/README.md) say what to expect,
what to set and how to reproduce, not how the project got there: no commit hash, no ``git show``
or ``git log`` pointer into history, no issue number and no work-session label. History lives in
git; a page that needs the older code says what it is (the JSON of a comparison records which
versions it compared)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "results" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]

HISTORY = {
    "a commit hash in backticks": re.compile(r"`[0-9a-f]{7,40}\^?`"),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b\^?"),
    "a version named by its hash": re.compile(r"\b(commit|code at|code of|checkout of|worktree of)s? [0-9a-f]{7,40}\b"),
    "a pointer into git history": re.compile(r"\bgit (show|log|blame)\b|\bremoved since\b"),
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w(/#&-])#\d+\b"),
    "a work-session label": re.compile(
        r"\b[Ss]essions? \d+\b|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|\d+(st|nd|rd|th))"
        r" session\b|session\d+", re.I),
}


def history_references(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, match) of every history reference in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind, pattern in HISTORY.items():
            found += [(number, kind, m.group(0)) for m in pattern.finditer(line)]
    return found


def test_the_patterns_catch_history_and_leave_ordinary_text():
    caught = history_references(
        "at commit 4c07a18\n`e153875`\n`git show 14c9fa4:x.py`\nissue 44\nsee #49\nsession 6\n"
        "the seventh session\ncompare_revisions_session6_float32.json\nremoved since; see\ncode at 2506848")
    assert {kind for _, kind, _ in caught} == set(HISTORY)
    assert sorted({number for number, _, _ in caught}) == list(range(1, 11))
    ordinary = ("[Many GPUs](#7-many-gpus-many-nodes), 2x512_128, 374,434,792 bytes, 1e-5, a TensorFlow session,"
                " `git archive HEAD src`, step 24,000, AVX-512, float16, 0.999935, sha256 of 1,031 MiB")
    assert history_references(ordinary) == []


def test_no_user_page_points_into_the_project_history():
    assert len(PAGES) > 10
    offending = [f"{page.relative_to(ROOT)}:{number}: {kind}: {match}"
                 for page in PAGES for number, kind, match in history_references(page.read_text(encoding="utf-8"))]
    assert not offending, "\n".join(offending)


def test_the_readme_is_a_first_page_not_a_manual():
    """At most 200 lines: what elmo is, the two set-up commands, a taste of each use and the map
    of the docs. Everything longer belongs in docs/ (the layout in docs/architecture.md)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the detail into docs/"
