"""The one progress rule of elmo's long commands (embed, train, finetune, evaluate, neighbours,
prepare, task train): on a terminal, tqdm's bar; anywhere else (a log file, a pipe, a CI job), one
plain line every :data:`LOG_INTERVAL` seconds of a run that lasts that long, and its last line at
the end, never carriage-return redraws (short runs into a log print nothing); ``--progress`` asks for
the bar even there, ``--no-progress`` shows nothing."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm import tqdm

# Seconds between two progress lines in a log.
LOG_INTERVAL = 30.0


class LogLines(tqdm):
    """tqdm that writes one plain line (no ``\\r``, no redraw) per ``interval`` seconds, and the
    last state when closed if it wrote any line before; the same line is never written twice."""

    def __init__(self, *args: Any, file: TextIO | None = None, interval: float | None = None, **kwargs: Any):
        self._out = file if file is not None else sys.stderr
        self._interval = LOG_INTERVAL if interval is None else interval
        self._last_at = time.monotonic()
        self._last_line: str | None = None
        self._closing = False
        kwargs.pop("position", None)
        kwargs.pop("dynamic_ncols", None)
        super().__init__(*args, file=_Nowhere(), mininterval=min(self._interval, 10.0), ascii=True, ncols=100, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        now = time.monotonic()
        if not self._closing and now - self._last_at < self._interval:
            return True
        if self._closing and self._last_line is None:
            return True  # a run shorter than the interval stays quiet
        line = (self.__str__() if msg is None else msg).strip()
        if line and line != self._last_line:
            self._out.write(line + "\n")
            self._out.flush()
            self._last_line = line
        self._last_at = now
        return True

    def close(self) -> None:
        if not self.disable:
            self._closing = True
        super().close()


class _Nowhere:
    """tqdm's own output, which :class:`LogLines` replaces by its lines."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def progress_bar(enabled: bool | None = None, *, file: TextIO | None = None, **kwargs: Any) -> tqdm:
    """A progress bar: ``enabled`` None follows the rule above (a bar on a terminal, periodic lines
    elsewhere), True asks for the bar wherever ``file`` is (``--progress``: a user who wants it in
    a log gets it), False shows nothing. ``file``: standard error by default; ``kwargs`` are
    tqdm's (``total``, ``unit``, ``desc``, ``initial``, ...)."""
    stream = file if file is not None else sys.stderr
    if enabled is False:
        return tqdm(disable=True, **kwargs)
    if enabled is True or _is_terminal(stream):
        kwargs.setdefault("dynamic_ncols", True)
        return tqdm(file=stream, **kwargs)
    return LogLines(file=stream, **kwargs)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
