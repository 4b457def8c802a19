"""The one HDF5 opener for what elmo reads as a model (a ``weights.hdf5``, a softmax, a vocabulary
cache, a layer cache): :func:`open_hdf5` refuses, before any value is read, a file whose content
may lie outside it or is not numbers, naming the file and the dataset:

* links other than hard links (a soft link, dangling or looping; an external link, to
  ``/etc/passwd`` or to the file itself; a user-defined link): a name must be an object *in* the file;
* datasets whose raw data is stored in other files (HDF5's external storage) or assembled from
  other datasets (virtual datasets): an archive is content-addressed, and its model may read no
  byte from outside what was hashed;
* datasets of anything but real floats (16, 32 or 64 bits; ``long double`` is not portable) and
  integers, except the datasets named as text.

:func:`read_dataset` reads one dataset whole, reporting a damaged chunk (a corrupt gzip or
fletcher32 block, which h5py reports as "Can't synchronously read data") with the file and dataset.

A leaf: it imports nothing of the package but :mod:`elmo.jsonio`'s floor (nothing), so that every
room may use it.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping

import h5py
import numpy as np

# The float widths a model's numbers may have: half, single and double precision. numpy's
# longdouble ("f16" on x86-64, 80 bits padded) has no one meaning across machines.
FLOAT_BYTES = (2, 4, 8)


class HDF5FileError(ValueError):
    """An HDF5 file elmo refuses to read from (a link, external or virtual storage, values that are
    not numbers, a damaged chunk); the message names the file and the dataset or link."""


class DamagedDatasetError(HDF5FileError):
    """A dataset whose values cannot be read (a damaged chunk); names the file and dataset."""


_LINK_WORDS = {h5py.h5l.TYPE_SOFT: "a soft link", h5py.h5l.TYPE_EXTERNAL: "an external link"}


def _link_target(f: h5py.File, name: str, kind: int) -> str:
    try:
        link = f.get(name, getlink=True)
    except (KeyError, TypeError, OSError, RuntimeError):
        return ""
    if isinstance(link, h5py.SoftLink):
        return f" to {link.path}"
    if isinstance(link, h5py.ExternalLink):
        return f" to {link.filename}:{link.path}"
    return ""


def _check_links(f: h5py.File, label: str) -> None:
    """Refuse any link that is not a hard link, found without following one (H5Lvisit)."""
    found: list[tuple[str, int]] = []

    def visit(name: bytes, info) -> int | None:
        if info.type != h5py.h5l.TYPE_HARD:
            found.append((name.decode("utf-8", "replace"), info.type))
            return 1  # stop: one is enough to refuse the file
        return None

    f.id.links.visit(visit, info=True)
    if found:
        name, kind = found[0]
        words = _LINK_WORDS.get(kind, f"a user-defined link (type {kind})")
        raise HDF5FileError(f"{label}: '{name}' is {words}{_link_target(f, name, kind)}, not data in the file; "
                            "elmo reads only what the file itself holds (links are refused)")


def check_numbers(dataset: h5py.Dataset, where: str) -> None:
    """Refuse ``dataset`` unless it holds real floats of :data:`FLOAT_BYTES` or integers, naming
    ``where``: checked from the dtype, before anything is read."""
    dtype = dataset.dtype
    if dtype.kind in "iu" or (dtype.kind == "f" and dtype.itemsize in FLOAT_BYTES):
        return
    raise HDF5FileError(f"{where} holds {dtype_words(dtype)}, not numbers elmo reads (floats of 16, 32 or 64 bits, "
                        "or integers); the file is damaged or not one of this kind")


def dtype_words(dtype: np.dtype) -> str:
    """What values of ``dtype`` are, in words (h5py marks its variable-length types in the metadata)."""
    dtype = np.dtype(dtype)
    metadata: dict = dict(dtype.metadata or {})
    vlen = metadata.get("vlen")
    if vlen is not None:
        return "variable-length strings" if vlen in (str, bytes) else "variable-length arrays"
    if dtype.kind == "f":
        return f"floats of {8 * dtype.itemsize} bits ({dtype})"
    kinds = {"S": "byte strings", "U": "strings", "O": "Python objects", "b": "booleans", "c": "complex numbers",
             "V": "raw or compound records", "M": "dates", "m": "time spans"}
    return f"{kinds.get(dtype.kind, 'values')} ({dtype})"


def _check_datasets(f: h5py.File, label: str, text: frozenset[str]) -> None:
    problems: list[str] = []

    def visit(name: str, obj) -> None:
        if problems or not isinstance(obj, h5py.Dataset):
            return
        where = f"{label}: dataset '{name}'"
        if obj.is_virtual:
            problems.append(f"{where} is a virtual dataset (its values come from other datasets or files); "
                            "elmo reads only what the file itself holds")
        elif obj.id.get_create_plist().get_external_count():
            problems.append(f"{where} keeps its values in other files (HDF5 external storage); elmo reads only "
                            "what the file itself holds")
        elif name not in text:
            try:
                check_numbers(obj, where)
            except HDF5FileError as e:
                problems.append(str(e))

    f.visititems(visit)
    if problems:
        raise HDF5FileError(problems[0])


def open_hdf5(path: str | os.PathLike, label: str | None = None, *, text: Iterable[str] = (), **options) -> h5py.File:
    """``path`` open for reading, once every link in it is a hard link and every dataset holds its
    own values, stored in the file, of real numbers (except the datasets named in ``text``, which
    may be strings); else :class:`HDF5FileError` naming ``label`` (default: the path) and the link
    or dataset. A file h5py cannot open is an HDF5FileError too. ``options`` go to ``h5py.File``
    (``rdcc_nbytes``). The caller closes the file (``with open_hdf5(...) as f``)."""
    label = label or os.fspath(path)
    try:
        f = h5py.File(path, "r", **options)
    except (OSError, ValueError) as e:  # h5py's message does not name the file
        raise HDF5FileError(f"{label}: cannot open as HDF5 ({e})") from None
    try:
        _check_links(f, label)
        _check_datasets(f, label, frozenset(text))
    except HDF5FileError:
        f.close()
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as e:  # a damaged object header, say
        f.close()
        raise HDF5FileError(f"{label}: damaged: its structure cannot be read ({e})") from None
    return f


def read_dataset(dataset: h5py.Dataset, where: str) -> np.ndarray:
    """The whole of ``dataset`` as an array; a chunk that cannot be read (damaged compression or
    checksum: h5py's "Can't synchronously read data") is an :class:`HDF5FileError` naming
    ``where`` (the file and dataset): a :class:`DamagedDatasetError`."""
    try:
        return dataset[...]
    except OSError as e:
        reason = str(e).split("(", 1)[0].strip() or type(e).__name__
        raise DamagedDatasetError(f"{where}: damaged: its values cannot be read ({reason}: a corrupt compressed or "
                            "checksummed block); the file is damaged (an interrupted copy?)") from None


def hdf5_image(datasets: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of an HDF5 file holding ``datasets`` (name, such as ``"softmax/W"``, to array),
    built in memory, for :func:`elmo.fileio.atomic_write_bytes` to write. A model's files are
    written this way because HDF5 does not survive a failed write: past ``ulimit -f`` or on a full
    disk, its cleanup raised from destructors and the next file the process opened crashed it (a
    segfault), where Python's own write fails with an error that names the file. The cost is one
    copy of the file in memory while it is written."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for name, array in datasets.items():
            f.create_dataset(name, data=array)
    return buffer.getvalue()


__all__ = ["FLOAT_BYTES", "DamagedDatasetError", "HDF5FileError", "check_numbers", "dtype_words", "hdf5_image",
           "open_hdf5", "read_dataset"]
