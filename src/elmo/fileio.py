"""Small file helpers: atomic writes (files and whole folders), transparent gzip reading and standard input."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

STDIN = "-"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Delete the temporary files that :func:`atomic_path` left beside ``path`` in a process that
    has since died (killed mid-write, they would otherwise pile up: one was 319 MB). Only files of
    our own naming, ``<name>.<pid>.<random>.tmp``, whose process no longer runs, are touched.
    Returns the removed paths."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(re.escape(os.path.basename(path)) + r"\.(\d+)\.[A-Za-z0-9_]+\.tmp")
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            match = pattern.fullmatch(name)
            if match and int(match.group(1)) != os.getpid() and not _process_alive(int(match.group(1))):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, name))
                    removed.append(os.path.join(directory, name))
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, make_parents: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    A reader never sees a half-written file, and a crash leaves the old file (if any) intact; the
    temporaries of earlier killed runs are removed first. The folder must exist unless
    ``make_parents`` (a typo in an output path should not create folders).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if make_parents:
        os.makedirs(directory, exist_ok=True)
    elif not os.path.isdir(directory):
        raise FileNotFoundError(f"{path}: the folder {directory} does not exist")
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{os.path.basename(path)}.{os.getpid()}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        # mkstemp makes the file owner-only; give it the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, make_parents: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path, make_parents) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def atomic_folder(output: str | os.PathLike, write, overwrite: bool = False) -> None:
    """Run ``write(folder)`` into a fresh temporary folder beside ``output`` and rename it into
    place, so ``output`` is either complete or untouched. An existing ``output`` is replaced only
    with ``overwrite``."""
    output = Path(output)
    if output.exists() and not overwrite:
        raise FileExistsError(f"{output}: already exists; pass --force (overwrite=True) to replace it")
    if not output.parent.is_dir():
        raise FileNotFoundError(f"{output}: the folder {output.parent} does not exist")
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        write(tmp)
        if output.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{output.name}.old.", dir=output.parent))
            os.replace(output, old / output.name)
            os.replace(tmp, output)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of up to ``size`` items, reading ``items`` once (a stream stays a stream)."""
    iterator = iter(items)
    while block := list(itertools.islice(iterator, size)):
        yield block


def open_text(path: str | os.PathLike) -> IO[bytes]:
    """Open a plain or ``.gz`` file for reading as bytes (decode line by line to report errors).
    ``"-"`` is standard input (never closed by the caller's ``with``)."""
    path = os.fspath(path)
    if path == STDIN:
        return contextlib.nullcontext(sys.stdin.buffer)  # type: ignore[return-value]
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_lines(path: str | os.PathLike, max_bytes: int | None = None) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (plain or ``.gz``; ``"-"`` for standard input)
    without their line endings, reading the file once, as a stream (pipes work).

    Raises ValueError naming the file and 1-based line number of a line that is not valid UTF-8,
    or, with ``max_bytes``, of a line longer than that (found before the whole line is held:
    memory stays bounded even when a file has no line breaks).
    """
    with open_text(path) as f:
        lines = f if max_bytes is None else _bounded_lines(f, max_bytes, path)
        for number, raw in enumerate(lines, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            yield line.rstrip("\r\n")


def _bounded_lines(f: IO[bytes], max_bytes: int, path: str | os.PathLike) -> Iterator[bytes]:
    """The raw lines of ``f``, refusing one of more than ``max_bytes`` bytes (line break excluded)."""
    number = 0
    while raw := f.readline(max_bytes + 2):
        number += 1
        if len(raw.rstrip(b"\r\n")) > max_bytes:
            raise ValueError(f"{path}:{number}: the line is longer than {max_bytes:,} bytes, the limit for one line")
        yield raw


def is_regular_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file (which can be read twice), not standard input, a pipe or a device."""
    path = os.fspath(path)
    if path == STDIN:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def count_lines(path: str | os.PathLike) -> int | None:
    """The number of lines :func:`read_lines` will yield for a regular file (plain or ``.gz``),
    counted in one extra pass over it; None for standard input, a pipe or anything else that
    can be read only once, and for a file that cannot be read."""
    if not is_regular_file(path):
        return None
    count, last = 0, b"\n"
    try:
        with open_text(path) as f:
            while block := f.read(1 << 20):
                count += block.count(b"\n")
                last = block[-1:]
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return count + (last != b"\n")
