"""Small file helpers: atomic writes and transparent gzip reading."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Iterator
from typing import IO


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    A reader never sees a half-written file, and a crash leaves the old file (if any) intact.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
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


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def open_text(path: str | os.PathLike) -> IO[bytes]:
    """Open a plain or ``.gz`` file for reading as bytes (decode line by line to report errors)."""
    path = os.fspath(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (plain or ``.gz``) without their line endings.

    Raises ValueError naming the file and 1-based line number of a line that is not valid UTF-8.
    """
    with open_text(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            yield line.rstrip("\r\n")
