"""Every shell and Python block of the README runs as written, in order, in one temporary folder
with tiny data made for it (a raw corpus, a domain corpus, tiny CoNLL-2003 files and GloVe
vectors under $ELMO_DATA), so that a block that breaks fails CI (its slow pass).

What is not run, by these rules and no others:

- ``pip install ...`` (and the ``&&`` joining it to what follows): installing is what the test
  environment did already; the command after it runs.
- ``python -m pytest ...``: the test suite, which this test is part of.
- A line with an optional part in brackets (``[--layer N]``): a synopsis of a command, not one.
- ``python experiments/...``: the paper's experiments, on the data sets they name (SemCor, the
  tasks' corpora), which are not tiny.

``elmo serve`` starts in the background and the blocks after it in its section talk to it; it is
stopped at the section's end (the section is skipped without the ``[serve]`` extra).
"""

import gzip
import importlib.util
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
SERVE_PORT = 8080


def sections() -> list[tuple[str, list[tuple[str, str, int]]]]:
    """The README's ``##`` sections that hold fenced blocks, each with its blocks: (language,
    text, line number)."""
    text = README.read_text()
    starts = [0] + [m.start() for m in re.finditer(r"^## ", text, re.M)] + [len(text)]
    found = []
    for start, end in zip(starts, starts[1:]):
        heading = text[start:text.index("\n", start)].removeprefix("## ") if start else ""
        blocks = [(b.group(1), b.group(2), text.count("\n", 0, start + b.start()) + 1)
                  for b in FENCE.finditer(text[start:end])]
        if blocks:
            found.append((heading, blocks))
    return found


def logical_lines(script: str) -> list[str]:
    """The block's lines with backslash continuations joined."""
    return script.replace("\\\n", " ").splitlines()


def runnable(line: str) -> str | None:
    """``line`` under the module's rules: None when it is not run, else what runs."""
    stripped = line.split(" #")[0].strip() if not line.lstrip().startswith("#") else ""
    if not stripped:
        return None
    if "[--" in stripped or "[-" in stripped.replace("[-e", ""):
        return None  # a synopsis
    parts = [p.strip() for p in line.split("&&")]
    parts = [p for p in parts if not p.startswith("pip install")]
    if not parts:
        return None
    command = " && ".join(parts)
    if command.startswith("python -m pytest") or command.startswith("python experiments/"):
        return None
    return command


def make_data(work: Path, home: Path) -> None:
    """The files the README's commands read, tiny."""
    shutil.copytree(ROOT / "examples", work / "examples")
    words = ("the cat sat on the mat while a dog slept near the door and the bank raised its rates "
             "again this morning because the river was high").split()
    articles = []
    for i in range(300):  # many short articles, so that a 0.02 held-out fraction takes some of them
        sentence = " ".join(words[(i + j) % len(words)] for j in range(8 + i % 5)).capitalize()
        articles.append(f"{sentence} . Article {i} ends here .")
    (work / "raw").mkdir()
    with gzip.open(work / "raw" / "wiki.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n\n".join(articles) + "\n")
    (work / "domain" / "train").mkdir(parents=True)
    (work / "domain" / "train" / "notes.txt").write_text(
        "\n".join(" ".join(words[i:i + 9]) + " ." for i in range(0, len(words) - 9)) + "\n")
    conll = (ROOT / "tests" / "fixtures" / "tasks" / "conll2003.txt").read_text()
    ner = home / "data" / "ner" / "conll2003"
    ner.mkdir(parents=True)
    (ner / "train.txt").write_text(conll)
    (ner / "valid.txt").write_text(conll)
    vocabulary = sorted({line.split()[0] for line in conll.splitlines() if line.strip() and not line.startswith("-DOC")})
    (home / "data" / "vectors").mkdir()
    with gzip.open(home / "data" / "vectors" / "glove.6B.50d.top100k.txt.gz", "wt", encoding="utf-8") as f:
        for n, word in enumerate(vocabulary):
            f.write(word.lower() + " " + " ".join(f"{((n * 7 + d) % 13 - 6) / 10:.1f}" for d in range(50)) + "\n")


def wait_for(url: str, server: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"elmo serve exited with {server.returncode}: {server.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url}: no answer in {seconds} s")


def test_the_rules_leave_commands_and_drop_installs_and_synopses():
    assert runnable('pip install torch==2.13.0 --index-url X && pip install -e ".[train,test]" && elmo embed a.txt') \
        == "elmo embed a.txt"
    assert runnable('pip install -e ".[serve]"') is None
    assert runnable("elmo embed in.txt out.hdf5 [--model NAME] [--layers all|top]") is None
    assert runnable("python -m pytest -q") is None
    assert runnable("elmo vocab 'data/train/*.txt' --output vocab.txt   # words") == \
        "elmo vocab 'data/train/*.txt' --output vocab.txt   # words"  # bash reads the comment as one
    assert runnable("# a comment") is None
    names = [name for name, _ in sections()]
    assert "Set up" in names and "Train your own" in names and "Serving" in names


def test_the_readme_sample_output_is_what_the_set_up_command_prints(tmp_path):
    """The set-up line's ``elmo embed examples/sentences.txt`` against the README's sample output:
    the lines exactly, the numbers (printed to 3 and 2 decimals) within a rounding step."""
    elmo = shutil.which("elmo")
    if elmo is None:
        pytest.skip("the elmo command is not on PATH (pip install -e . makes it)")
    text = README.read_text()
    sample = FENCE.findall(text[text.index("It prints, per sentence"):])[0][1]
    done = subprocess.run([elmo, "embed", "examples/sentences.txt"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shown = [line for line in sample.splitlines() if line != "..."]
    printed = done.stdout.splitlines()[:len(shown)]
    number = re.compile(r"[+-]?\d+\.\d+")
    for want, got in zip(shown, printed, strict=True):
        assert number.sub("#", want) == number.sub("#", got), (want, got)
        for a, b in zip(number.findall(want), number.findall(got), strict=True):
            assert abs(float(a) - float(b)) <= 1.5 * 10 ** -len(a.split(".")[1]), (want, got)


@pytest.mark.slow
def test_every_readme_block_runs_as_written(tmp_path):
    elmo = shutil.which("elmo")
    if elmo is None:
        pytest.skip("the elmo command is not on PATH (pip install -e . makes it)")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    make_data(work, home)
    env = {**os.environ, "HOME": str(home), "DATA": str(home / "data"), "OMP_NUM_THREADS": "1",
           "ELMO_CACHE": os.environ.get("ELMO_CACHE", str(Path.home() / ".cache" / "elmo"))}
    # The commands' configs and scripts are the repository's: the README runs at its root.
    for name in ("configs",):
        shutil.copytree(ROOT / name, work / name)
    ran = []
    for heading, blocks in sections():
        server = None
        try:
            for language, script, line in blocks:
                if language == "bash":
                    commands = [c for c in map(runnable, logical_lines(script)) if c is not None]
                    for command in commands:
                        if command.startswith("elmo serve"):
                            if importlib.util.find_spec("fastapi") is None:
                                pytest.skip("the [serve] extra is not installed")
                            with socket.socket() as s:
                                if s.connect_ex(("127.0.0.1", SERVE_PORT)) == 0:
                                    pytest.skip(f"port {SERVE_PORT}, which the README's commands use, is taken")
                            server = subprocess.Popen(shlex.split(command, comments=True), cwd=work, env=env, text=True,
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                            wait_for(f"http://127.0.0.1:{SERVE_PORT}/health", server, 180)
                            ran.append(f"README.md:{line}: {command}")
                            continue
                    rest = [c for c in commands if not c.startswith("elmo serve")]
                    if not rest:
                        continue
                    done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(rest)], cwd=work, env=env,
                                          capture_output=True, text=True, timeout=900)
                    assert done.returncode == 0, f"README.md:{line} ({heading}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
                    ran += [f"README.md:{line}: {c}" for c in rest]
                elif language == "python":
                    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True,
                                          text=True, timeout=600)
                    assert done.returncode == 0, f"README.md:{line} ({heading}):\n{done.stderr[-4000:]}"
                    ran.append(f"README.md:{line}: python block")
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
    # What the blocks made, where later blocks read it.
    assert (work / "models" / "tiny" / "weights.hdf5").is_file()
    assert list((work / "data" / "heldout").glob("*.txt"))
    assert (work / "runs" / "domain").is_dir()
    assert any("elmo task evaluate" in r for r in ran) and any("python block" in r for r in ran), ran
