"""What a PyTorch file would import if it were unpickled, read from its pickle's opcodes alone.

``torch.load(weights_only=True)`` is what keeps code in a file from running; this module only
recognises such a file first, by its own rule, so that the refusal is one line of elmo's naming
the first Python global the file reaches for, whatever PyTorch's messages say (they changed in
2.13, and they advise loading with ``weights_only`` off, which elmo never suggests).

A pickle runs code only through the globals it imports (``GLOBAL``, ``STACK_GLOBAL``, ``INST``,
and the copyreg extension codes ``EXT1/2/4``). :func:`unsafe_global` lists them with the standard
library's :func:`pickletools.genops`, which decodes opcodes without executing any, and returns the
first one outside PyTorch's tensor-rebuild set (:data:`SAFE_GLOBALS`: what torch's own
``weights_only`` unpickler accepts). It reads ``data.pkl`` of PyTorch's zip format, or the
pickles at the start of the legacy format (magic number, protocol, system info, the object, the
storage keys); the tensor data after them is never read.
"""

from __future__ import annotations

import _compat_pickle
import io
import os
import pickletools
import zipfile
from typing import IO

import torch

# The legacy format is five pickles in a row, then the raw storage data.
_LEGACY_PICKLES = 5
_STRING_OPS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
                         "BINUNICODE8"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NOT_A_NAME = object()  # a stack entry the scan does not track (anything but a string constant)


def _torch_allowed() -> set[str]:
    # torch's weights_only unpickler's own list (dtypes, storage and tensor classes, rebuild
    # functions), when this torch still has it under that name; the static names below otherwise.
    try:
        from torch._weights_only_unpickler import _get_allowed_globals
        return set(_get_allowed_globals())
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - a torch without it
        return set()


def _static_allowed() -> set[str]:
    """What elmo's and ELMoForManyLangs' files use, spelled out so the rule holds without torch's list."""
    names = {"collections.OrderedDict", "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
             "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
             "torch._tensor._rebuild_from_type_v2", "torch.Size", "torch.device", "torch.Tensor",
             "torch.nn.parameter.Parameter", "_codecs.encode", "builtins.set", "builtins.bytearray"}
    names |= {f"torch.{n}" for n in ("FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
                                     "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage")}
    names |= {str(getattr(torch, n)) for n in ("float32", "float64", "float16", "bfloat16", "int64", "int32",
                                               "int16", "int8", "uint8", "bool")}
    return names


SAFE_GLOBALS: frozenset[str] = frozenset(_torch_allowed() | _static_allowed())


class UnsafePickleError(ValueError):
    """A file's pickle imports a global outside :data:`SAFE_GLOBALS`; it is never unpickled."""

    def __init__(self, label: str, name: str):
        self.name = name
        super().__init__(f"{label}: holds Python objects that elmo never runs (its pickle imports {name}); "
                         f"refusing it (a file of weights holds only tensors and plain data)")


def _full_name(module: str, name: str) -> str:
    # Protocol 2 pickles (torch.save's default) spell Python 3's modules the Python 2 way
    # (__builtin__.print); map them as the unpickler would.
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"


def pickle_globals(stream: IO[bytes]):
    """Yield the ``module.name`` of every global one pickle in ``stream`` imports, in order,
    reading up to its ``STOP`` opcode and running nothing. A global whose name the opcodes do
    not spell out (``STACK_GLOBAL`` on computed values, an extension code) is yielded as a
    description in angle brackets, which no allow-list holds. Raises ValueError on bytes that
    are not a pickle (``genops``' own check)."""
    stack: list = []  # a shadow of the pickle stack, tracking string constants only
    memo: dict = {}
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name in ("GLOBAL", "INST"):
            module, _, attr = arg.partition(" ")
            yield _full_name(module, attr)
            stack.append(_NOT_A_NAME)
        elif name == "STACK_GLOBAL":
            attr = stack.pop() if stack else _NOT_A_NAME
            module = stack.pop() if stack else _NOT_A_NAME
            if isinstance(module, str) and isinstance(attr, str):
                yield _full_name(module, attr)
            else:
                yield "<a global whose name is computed>"
            stack.append(_NOT_A_NAME)
        elif name.startswith("EXT"):
            yield f"<copyreg extension code {arg}>"
            stack.append(_NOT_A_NAME)
        elif name in _STRING_OPS:
            stack.append(arg.decode("latin-1") if isinstance(arg, bytes) else arg)
        elif name in _PUT_OPS:
            memo[arg] = stack[-1] if stack else _NOT_A_NAME
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else _NOT_A_NAME
        elif name in _GET_OPS:
            stack.append(memo.get(arg, _NOT_A_NAME))
        elif name == "STOP":
            return
        else:
            # Everything else only builds values from what is on the stack; what it leaves there
            # is never a name, and STACK_GLOBAL's operands are pushed right before it.
            stack.append(_NOT_A_NAME)


# The longest text line a pickle opcode may spell (a GLOBAL's module and name, a text-protocol
# number or string): Python names are short, and a line is read whole before it is checked.
_MAX_LINE_BYTES = 1 << 16


class _Bounded:
    """``stream`` read no further than ``size`` bytes from where it is: every length an opcode
    claims (``BINBYTES8`` may claim 2**64) is checked against what is left before it is read, so
    that a 14-byte file claiming a terabyte is damage, not a terabyte-sized allocation."""

    def __init__(self, stream: IO[bytes], size: int):
        self._stream, self._end = stream, stream.tell() + size

    def _left(self) -> int:
        return max(0, self._end - self._stream.tell())

    def read(self, n: int = -1) -> bytes:
        left = self._left()
        if n is None or n < 0:
            n = left
        if n > left:
            raise ValueError(f"a pickle opcode claims {n:,} bytes where {left:,} are left in the file")
        return self._stream.read(n)

    def readline(self, limit: int = -1) -> bytes:
        line = self._stream.readline(min(self._left(), _MAX_LINE_BYTES))
        if len(line) == _MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise ValueError(f"a pickle opcode's text line is longer than {_MAX_LINE_BYTES:,} bytes")
        return line

    def tell(self) -> int:
        return self._stream.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._stream.seek(offset, whence)


def _first_unsafe(stream: IO[bytes], pickles: int, size: int) -> str | None:
    """The first unsafe global of the ``pickles`` pickles in a row in ``stream``, which holds
    ``size`` bytes from where it is (every length read is bounded by them)."""
    stream = _Bounded(stream, size)
    for _ in range(pickles):
        if not stream.read(1):
            return None
        stream.seek(-1, io.SEEK_CUR)
        for name in pickle_globals(stream):
            if name not in SAFE_GLOBALS:
                return name
    return None


def unsafe_global(source: str | os.PathLike | bytes) -> str | None:
    """The first global outside :data:`SAFE_GLOBALS` that the PyTorch file ``source`` (a path,
    or the file's bytes) would import when unpickled; None when there is none, and None too when
    the file is not a readable pickle or PyTorch zip (``torch.load`` then says it is damaged)."""
    f = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb")
    try:
        with f:
            if f.read(4) == b"PK\x03\x04":  # PyTorch's zip format: the object is <folder>/data.pkl
                f.seek(0)
                with zipfile.ZipFile(f) as z:
                    for info in z.infolist():
                        if info.filename.count("/") == 1 and info.filename.endswith("/data.pkl"):
                            with z.open(info) as pkl:
                                found = _first_unsafe(pkl, 1, info.file_size)
                            if found:
                                return found
                return None
            size = f.seek(0, io.SEEK_END)
            f.seek(0)
            return _first_unsafe(f, _LEGACY_PICKLES, size)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, IndexError, KeyError):
        return None  # not a pickle: damaged, which torch.load reports


def check_pickle(source: str | os.PathLike | bytes, label: str) -> None:
    """Raise :class:`UnsafePickleError` (one line naming ``label`` and the global) when the
    PyTorch file ``source`` would import anything outside :data:`SAFE_GLOBALS`."""
    found = unsafe_global(source)
    if found is not None:
        raise UnsafePickleError(label, found)


def torch_reason(error: BaseException) -> str:
    """torch's reason for refusing a file, as one short line without its advice (torch suggests
    loading with ``weights_only`` off, or allow-listing the global: elmo never does either)."""
    text = str(error)
    for marker in ("WeightsUnpickler error:", "Trying to load"):
        at = text.find(marker)
        if at >= 0:
            line = text[at:].splitlines()[0].split(". Please")[0].strip()
            return line[:200]
    lines = [line.strip() for line in text.strip().splitlines()
             if line.strip() and "weights_only" not in line and "Weights only" not in line]
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


__all__ = ["SAFE_GLOBALS", "UnsafePickleError", "check_pickle", "pickle_globals", "torch_reason", "unsafe_global"]
