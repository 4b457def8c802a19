"""The one JSON reader: every JSON document elmo reads (its own state files, a model's
``options.json``, a task's data, an output's attributes) goes through :func:`read_json` (a file)
or :func:`loads` (text already in hand), bounded in size, depth and numbers, so that no file can
make elmo read without end, recurse out of its stack, or hold a 5,000-digit number. A document
outside a bound is a :class:`JSONFileError` (a ValueError) naming the file, and, for the state
files' small schemas (:func:`field`), the field. A test scans ``src/`` so that no other
``json.load``/``json.loads`` creeps back in (the server's request bodies have their own bounded
parser, ``elmo.serve.protocol``).

A leaf: it imports nothing of the package, so that every room may import it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat

# The default size bound: elmo's own state files are a few kilobytes; a model's options.json,
# a run's settings, a download's sidecar likewise. A reader expecting more says so.
MAX_BYTES = 1 << 20
# Nesting depth: elmo's documents nest at most four or five deep. Python's json recurses once per
# level, so a document nested 100,000 deep would otherwise raise RecursionError.
MAX_DEPTH = 64
# Characters in one number: a float needs at most 24 (17 digits, sign, point, exponent); a
# 5,000-digit integer costs quadratic time to convert and means nothing to elmo.
MAX_NUMBER_CHARS = 40


class JSONFileError(ValueError):
    """A JSON document that is unreadable, outside a bound, or not of its schema; the message
    names the file (and the field). ``reason`` is the message without the file, ``line`` the
    1-based line of a syntax error (else None), for a caller that words its own message."""

    def __init__(self, source: str, reason: str, line: int | None = None):
        super().__init__(f"{source}: {reason}")
        self.source, self.reason, self.line = source, reason, line

    def __reduce__(self):  # crosses process boundaries (a worker's error) intact
        return type(self), (self.source, self.reason, self.line)


class _Refused(ValueError):
    """A number refused by the parser's hooks (turned into a JSONFileError naming the source)."""


def _number(text: str, convert, most: int, finite: bool):
    if len(text) > most:
        raise _Refused(f"a number of {len(text):,} characters (at most {most:,})")
    value = convert(text)
    if finite and isinstance(value, float) and not math.isfinite(value):
        raise _Refused(f"the number {text[:most]} is not finite in double precision")
    return value


def _constant(name: str):
    raise _Refused(f"{name} is not a JSON number")


# Strings (which may hold brackets) and the brackets outside them, in one left-to-right pass.
_STRUCTURE = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]', re.DOTALL)


def _depth(text: str) -> int:
    """The deepest nesting of ``text``'s arrays and objects (strings skipped), found without
    parsing it: linear in the text's length, with no recursion."""
    depth = deepest = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif token in "]}":
            depth -= 1
    return deepest


def loads(text: str | bytes, source: str, *, max_bytes: int | None = MAX_BYTES, max_depth: int = MAX_DEPTH,
          finite: bool = True, max_number_chars: int = MAX_NUMBER_CHARS):
    """The JSON value of ``text`` (``bytes`` are decoded as UTF-8), read from ``source`` (a file's
    path, or a description such as ``"OUT.hdf5: the attribute elmo_info"``, which every error
    names). Refused with :class:`JSONFileError`: more than ``max_bytes`` (None: text already held
    whole, bounded by whatever held it), not UTF-8, nested deeper than ``max_depth``, a number of
    more than ``max_number_chars`` characters, or not JSON at all (truncated); with ``finite``
    (elmo's own files), also a number past double precision (``1e400``) and ``NaN``/``Infinity``.
    A reader of files elmo did not write that may say ``Infinity`` (bilm-tf's ``options.json``)
    passes ``finite=False`` and checks each number itself (:mod:`elmo.checks`)."""
    if max_bytes is not None and len(text) > max_bytes:
        raise JSONFileError(source, f"larger than {max_bytes:,} bytes, the limit for this file; not read "
                                    "(is it the right file?)")
    if isinstance(text, (bytes, bytearray)):
        raw = bytes(text)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONFileError(source, f"not valid UTF-8 ({e.reason} at byte {e.start:,})",
                                raw[:e.start].count(b"\n") + 1) from None
    if _depth(text) > max_depth:
        raise JSONFileError(source, f"its JSON is nested too deeply to read (more than {max_depth} levels)")
    try:
        return json.loads(text, parse_int=lambda s: _number(s, int, max_number_chars, finite),
                          parse_float=lambda s: _number(s, float, max_number_chars, finite),
                          parse_constant=_constant if finite else None)
    except _Refused as e:
        raise JSONFileError(source, str(e)) from None
    except json.JSONDecodeError as e:
        cut = " (cut short?)" if e.pos >= len(text.rstrip()) else ""
        raise JSONFileError(source, f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}{cut}",
                            e.lineno) from None
    except (ValueError, RecursionError) as e:  # int()'s own digit limit; depth is bounded above
        raise JSONFileError(source, f"not readable as JSON ({e})") from None


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              finite: bool = True, max_number_chars: int = MAX_NUMBER_CHARS):
    """The JSON value of the file ``path``, bounded as :func:`loads`; a regular file larger than
    ``max_bytes`` is refused before any of it is read, anything else (a pipe, a device) after
    ``max_bytes + 1`` bytes. OSError (a missing file) propagates as it is, for the caller to word."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            raise JSONFileError(path, f"{info.st_size:,} bytes, larger than {max_bytes:,}, the limit for this file; "
                                      "not read (is it the right file?)")
        data = f.read(max_bytes + 1)
    return loads(data, path, max_bytes=max_bytes, max_depth=max_depth, finite=finite,
                 max_number_chars=max_number_chars)


_TYPE_WORDS = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
               bool: "true or false", type(None): "null"}


def _kind(value: object) -> str:
    return _TYPE_WORDS.get(type(value), type(value).__name__)


def field(document: object, name: str, types: type | tuple[type, ...], source: str, *, required: bool = True,
          default=None):
    """The field ``name`` of ``document`` (a state file's top-level object), checked to be of
    ``types`` (``int`` never accepts ``true``; ``float`` accepts an integer), else a
    :class:`JSONFileError` naming ``source`` and the field: the small schema of elmo's state
    files is written with it. A missing field is an error where ``required``, else ``default``."""
    if not isinstance(document, dict):
        raise JSONFileError(source, f"not a JSON object but {_kind(document)}")
    if name not in document:
        if required:
            raise JSONFileError(source, f"the field {name!r} is missing")
        return default
    value = document[name]
    wanted = types if isinstance(types, tuple) else (types,)
    if float in wanted and isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, bool) and bool not in wanted or not isinstance(value, wanted):
        words = " or ".join(_TYPE_WORDS.get(t, t.__name__) for t in wanted)
        raise JSONFileError(source, f"the field {name!r} must be {words}, not {_kind(value)}")
    return value
