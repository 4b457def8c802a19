"""Small file helpers: atomic writes (files and whole folders), the ownership of the folders elmo
makes, transparent gzip reading (damage reported in one line) and standard input."""

from __future__ import annotations

import contextlib
import errno
import gzip
import itertools
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from elmo.jsonio import read_json

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


# elmo's temporary files: ``<name>.elmo-tmp.<pid>.<32 hex digits>.tmp`` beside the file ``<name>``
# they become. No user names a file so (a 128-bit random part), and only files of exactly this
# form are ever cleaned up: a user's ``out.hdf5.4000000.backup.tmp`` is never touched.
TEMPORARY_TAG = "elmo-tmp"
_TEMPORARY = re.compile(r"(?P<target>.+)\." + TEMPORARY_TAG + r"\.(?P<pid>\d+)\.[0-9a-f]{32}\.tmp")


def temporary_target(name: str) -> str | None:
    """The name of the file whose temporary ``name`` is (one :func:`atomic_path` made), or None
    when ``name`` is not one of elmo's temporary files."""
    match = _TEMPORARY.fullmatch(name)
    return match.group("target") if match else None


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Delete the temporary files that :func:`atomic_path` left beside ``path`` in a process that
    has since died (killed mid-write, they would otherwise pile up: one was 319 MB). Only files of
    elmo's own naming (:func:`temporary_target`) whose process no longer runs are touched.
    Returns the removed paths."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError, PermissionError):
        for name in os.listdir(directory):
            match = _TEMPORARY.fullmatch(name)
            if (match and match.group("target") == os.path.basename(path) and int(match.group("pid")) != os.getpid()
                    and not _process_alive(int(match.group("pid")))):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(directory, name))
                    removed.append(os.path.join(directory, name))
    return removed


def _existing_parent(path: str, make_parents: bool) -> str:
    """The folder ``path`` goes in, created where ``make_parents``; otherwise it must exist (a typo
    in an output path should not create folders). A file where a folder of the path should be is
    refused naming it."""
    parent = os.path.dirname(os.path.abspath(path))
    blocking = parent
    while blocking and not os.path.exists(blocking):  # the nearest part of the path that exists
        blocking = os.path.dirname(blocking) if os.path.dirname(blocking) != blocking else ""
    if blocking and not os.path.isdir(blocking):
        raise NotADirectoryError(f"{path}: {blocking} is a file, not a folder; give a path inside a folder")
    if make_parents:
        os.makedirs(parent, exist_ok=True)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{path}: the folder {parent} does not exist")
    return parent


def _new_temporary(path: str, directory: str) -> str:
    """Create an empty temporary file of elmo's naming for ``path`` in ``directory``."""
    tmp = os.path.join(directory, f"{os.path.basename(path)}.{TEMPORARY_TAG}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return tmp


def _naming_the_target(error: OSError, tmp: str, path: str) -> OSError:
    """``error`` met while writing ``tmp``, the temporary file (or folder) of ``path``, as an
    error about ``path``: what the user sees names what they gave, never elmo's temporary name."""
    names = [os.fsdecode(n) if isinstance(n, (str, bytes)) else None for n in (error.filename, error.filename2)]
    if not any(n is not None and n.startswith(tmp) for n in names) and tmp not in str(error):
        return error
    if error.errno is None:
        return type(error)(str(error).replace(tmp, path))
    if error.errno == errno.EISDIR and os.path.isdir(path):
        return IsADirectoryError(f"{path}: a folder is in the way of the output file; give a file name")
    named = next((n for n in names if n is not None and n.startswith(tmp)), tmp)
    return type(error)(error.errno, os.strerror(error.errno), path + named[len(tmp):])


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, make_parents: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    A reader never sees a half-written file, and a crash leaves the old file (if any) intact; the
    temporaries of earlier killed runs are removed first (only elmo's: :func:`temporary_target`).
    The folder must exist unless ``make_parents`` (a typo in an output path should not create
    folders). An OS error raised while writing names ``path``, not the temporary file.
    """
    path = os.fspath(path)
    directory = _existing_parent(path, make_parents)
    remove_stale_temporaries(path)
    try:
        tmp = _new_temporary(path, directory)
    except OSError as error:
        if error.errno is None:
            raise
        raise type(error)(error.errno, os.strerror(error.errno), path) from None
    try:
        yield tmp
        # The temporary file is owner-only; give it the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(error, OSError):
            translated = _naming_the_target(error, tmp, path)
            if translated is not error:
                raise translated from None
        raise


# What each operating-system error means to someone running elmo, and what to do about it.
_OS_ERROR_WORDS = {
    errno.ENOENT: "no such file or folder; check the path (a typo, or a file not made yet?)",
    errno.EISDIR: "a folder, where a file was expected; give a file",
    errno.ENOTDIR: "a part of this path is a file, where a folder was expected; check the path",
    errno.EACCES: "permission denied; check the permissions of the file and its folders, or choose another path",
    errno.EPERM: "operation not permitted; check the permissions of the file and its folders, or choose another path",
    errno.EEXIST: "already exists; choose another path, or move it away",
    errno.ENOTEMPTY: "a folder that is not empty is in the way; choose another path, or move it away",
    errno.ENOSPC: "no space left on the device; free some space, or write elsewhere",
    errno.EDQUOT: "over the disk quota; free some space, or write elsewhere",
    errno.EROFS: "on a read-only file system; write elsewhere",
    errno.ENAMETOOLONG: "a name in this path is too long for the file system; choose a shorter one",
    errno.ELOOP: "too many symbolic links (a link pointing to itself?); check the path",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n) or close other programs",
    errno.ENFILE: "too many open files on this system; try again later",
    errno.EIO: "input/output error (a failing disk or an unreachable network file system?); check the device",
    errno.ETXTBSY: "in use by a running program; choose another path",
    errno.EFBIG: "the file is too large for the file system or your limits (ulimit -f); write elsewhere",
    errno.EXDEV: "across file systems, which a rename cannot do; write on the same file system",
}
# The file an HDF5 error is about, which h5py gives only inside its message.
_HDF5_NAME = re.compile(r"\b(?:name|filename) = '([^']*)'")


def os_error_message(error: OSError) -> str:
    """One line saying, in elmo's words, what an OS error means: the path it is about (the one
    the user gave), what was wrong and what to do. An error elmo raised itself (no errno: its
    message already says so) is returned as it is."""
    if error.errno is None:
        return " ".join(str(error).split("\n"))
    path = error.filename
    if path is None and isinstance(error.strerror, str):
        found = _HDF5_NAME.search(error.strerror)
        path = found.group(1) if found else None
    words = _OS_ERROR_WORDS.get(error.errno)
    if words is None:
        code = errno.errorcode.get(error.errno, str(error.errno))
        words = f"{os.strerror(error.errno).lower()} ({code})"
    if path is None:
        return words[0].upper() + words[1:]
    path = os.fsdecode(path)
    temporary = temporary_target(os.path.basename(path))
    if temporary is not None:  # never a temporary name: the file it was to become
        path = os.path.join(os.path.dirname(path), temporary)
    return f"{path}: {words}"


def check_input_file(path: str | os.PathLike, option: str | None = None) -> None:
    """Refuse, in one line naming ``path`` (and ``option``, the argument that gave it), an input
    file that cannot be read: missing, a folder, under a file where a folder should be, or not
    readable by the user. ``"-"`` (standard input) passes."""
    path = os.fspath(path)
    if path == STDIN:
        return
    label = f"{option} {path}" if option else path
    if os.path.isdir(path):
        raise IsADirectoryError(f"{label}: a folder, where a file was expected; give a file (or a quoted glob of the "
                                f"files in it, such as '{os.path.join(path, '*')}', where the command takes several)")
    if not os.path.exists(path):
        blocking = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(blocking):
            blocking = os.path.dirname(blocking)
        if not os.path.isdir(blocking):
            raise NotADirectoryError(f"{label}: {blocking} is a file, not a folder; check the path")
        raise FileNotFoundError(f"{label}: no such file; check the path (a typo, or a file not made yet?)")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{label}: not readable by you; check its permissions")


def check_output_file(path: str | os.PathLike, overwrite: bool = False, *,
                      inputs: Iterable[str | os.PathLike] = (), option: str | None = None) -> None:
    """Refuse, before any work, an output file that may not or cannot be written: anything but a
    regular file in its place (a folder, a device, a pipe: never replaced, whatever the flags),
    an existing file without ``overwrite``, one of the command's ``inputs`` (never overwritten,
    whatever the flags), and a folder around it that does not exist or cannot be written. A file
    is one thing the user named: with ``overwrite`` it is replaced, atomically, once the new one
    is complete (a folder may hold anything, so folders have a stricter rule: check_folder).
    ``option``: the argument that named ``path``, to name it in the message."""
    path = os.fspath(path)
    label = f"{option} {path}" if option else path
    if os.path.isdir(path):
        raise IsADirectoryError(f"{label}: a folder is in the way of the output file; give a file name")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise FileExistsError(f"{label}: not a regular file (a device or a pipe?), so not an output elmo replaces; "
                              "give a file name")
    for source in inputs:
        if source != STDIN and _same_file(path, source):
            raise FileExistsError(f"{label}: this is an input of the command ({os.fspath(source)}); elmo never "
                                  "overwrites an input: give another output file")
    parent = _existing_parent(path, make_parents=False)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{label}: the folder {parent} is not writable by you; choose another output or "
                              "change the folder's permissions")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{label}: already exists; pass --force (overwrite=True) to replace it")


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def atomic_write_text(path: str | os.PathLike, text: str, make_parents: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path, make_parents) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


# ------------------------------------------------------------------ the folders elmo makes
# Every folder elmo makes holds this marker, a small JSON file with a random id and what the folder
# is: elmo replaces or deletes a folder only when it can show it made it (see check_folder).
OWNER_FILE = ".elmo-owner"
OWNER_FORMAT = "elmo-owner"
OWNER_MAX_BYTES = 4096
SHOWN_ENTRIES = 3


class ForeignFolderError(FileExistsError):
    """Something elmo cannot show it made is where it would write, replace or delete a folder;
    the message (one line) names the path and what is in the way."""


def shown_entries(names: Iterable[str]) -> str:
    """A few of ``names``, sorted, for a one-line message."""
    names = sorted(names)
    return ", ".join(names[:SHOWN_ENTRIES]) + (f" and {len(names) - SHOWN_ENTRIES} more" if len(names) > SHOWN_ENTRIES
                                               else "")


def read_owner(folder: str | os.PathLike) -> dict | None:
    """The marker of ``folder`` (``{"format", "kind", "id"}``), or None when it has no readable
    marker of elmo's."""
    try:
        info = read_json(os.path.join(os.fspath(folder), OWNER_FILE), max_bytes=OWNER_MAX_BYTES)
    except (OSError, ValueError):
        return None
    if (isinstance(info, dict) and info.get("format") == OWNER_FORMAT and isinstance(info.get("kind"), str)
            and isinstance(info.get("id"), str)):
        return info
    return None


def _write_owner(folder: str, kind: str) -> str:
    owner_id = uuid.uuid4().hex
    with open(os.path.join(folder, OWNER_FILE), "x", encoding="utf-8") as f:
        f.write(json.dumps({"format": OWNER_FORMAT, "kind": kind, "id": owner_id}) + "\n")
    return owner_id


def _new_folder_beside(path: str, tag: str) -> str:
    """A fresh private folder beside ``path`` with a plain folder's permissions (mkdtemp's are owner-only)."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=f".{tag}", dir=parent)
    except OSError as error:  # about the folder the user named, not our private one
        if error.errno is None:
            raise
        raise type(error)(error.errno, os.strerror(error.errno), path) from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


def make_owned_folder(path: str | os.PathLike, kind: str, make_parents: bool = False) -> str:
    """Create the folder ``path`` holding elmo's marker for ``kind`` (what the folder holds);
    returns the marker's random id. The folder is made beside ``path`` and renamed into place, so
    it never appears without its marker. An empty folder at ``path`` is replaced (there is
    nothing to lose); anything else there raises ForeignFolderError. Its parent must exist,
    unless ``make_parents``."""
    path = os.fspath(path)
    _existing_parent(path, make_parents)
    tmp = _new_folder_beside(path, "new")
    try:
        owner_id = _write_owner(tmp, kind)
        os.rename(tmp, path)  # onto an empty folder: replaces it; onto anything else: fails
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.lexists(path) and read_owner(path) is None:
            raise ForeignFolderError(f"{path}: already exists, and elmo did not make it; choose another "
                                     "output, or move it away") from None
        raise
    return owner_id


def check_folder(path: str | os.PathLike, kind: str, *, recognise: Callable[[str], bool] | None = None,
                 allowed: Callable[[str], bool] | None = None, writes: Iterable[str] | None = None,
                 option: str = "output") -> bool:
    """Whether ``path`` is a folder elmo made to hold a ``kind`` (True), or there is nothing
    there to lose: no such path, or an empty folder (False). Anything else raises
    ForeignFolderError with one line naming ``path`` and what is in the way: a file, a folder of
    another kind, a folder without elmo's marker (unless ``recognise(path)``, for folders made
    before the marker existed: see each caller for what it recognises), and, with ``allowed``
    (for a folder about to be replaced or deleted whole), a folder holding any entry whose
    relative path (``name``, or ``sub/name`` inside a sub-folder ``allowed`` accepts) ``allowed``
    rejects. ``writes``: the entries the coming write makes; a folder without elmo's marker
    (recognised) is replaced only when it holds nothing else, since elmo cannot show it wrote
    the rest. Reads only; ``option`` names the argument that gave ``path``."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return False
    if os.path.islink(path) or not os.path.isdir(path):
        raise ForeignFolderError(f"{path}: {'a link' if os.path.islink(path) else 'a file'} is in the way "
                                 f"of the {kind} folder elmo would write here; choose another {option}, or move it "
                                 "away")
    names = [n for n in os.listdir(path) if n != OWNER_FILE]
    owner = read_owner(path)
    if owner is None and not names and not os.path.lexists(os.path.join(path, OWNER_FILE)):
        return False
    if owner is not None and owner["kind"] != kind:
        raise ForeignFolderError(f"{path}: an elmo {owner['kind']}, not a {kind}; choose another {option}")
    if owner is None and not (recognise is not None and recognise(path)):
        raise ForeignFolderError(f"{path}: a folder elmo did not make (it holds {shown_entries(names) or OWNER_FILE}"
                                 f" and no {OWNER_FILE} of elmo's) is in the way of the {kind}; elmo writes only "
                                 f"into a new or empty folder or one it made: choose another {option}, or move it "
                                 "away")
    strays = _entries_not_allowed(path, names, allowed) if allowed is not None else []
    if strays:
        raise ForeignFolderError(f"{path}: holds {shown_entries(strays)}, which elmo did not write there, beside the "
                                 f"{kind}; elmo replaces or deletes only what it wrote: move them away, or choose "
                                 f"another {option}")
    if owner is None and writes is not None:
        kept = sorted(set(names) - set(writes))
        if kept:
            raise ForeignFolderError(f"{path}: holds {shown_entries(kept)}, which this {kind} does not hold, in a "
                                     f"folder without elmo's {OWNER_FILE}; elmo cannot show it wrote them, so it "
                                     f"does not delete them, even with --force: move them away, or choose another "
                                     f"{option}")
    return True


def _entries_not_allowed(path: str, names: Iterable[str], allowed: Callable[[str], bool]) -> list[str]:
    """The entries of the folder ``path`` (``names``: its top level) whose relative paths
    ``allowed`` rejects, looking into the sub-folders it accepts (a link is not looked into)."""
    strays = []
    for name in names:
        if not allowed(name):
            strays.append(name)
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            inner = [f"{name}/{n}" for n in os.listdir(full)]
            strays += _entries_not_allowed(path, inner, allowed)
    return strays


def claim_folder(path: str | os.PathLike, kind: str, *, recognise: Callable[[str], bool] | None = None,
                 option: str = "output", make_parents: bool = False) -> str:
    """Make ``path`` the folder of a ``kind`` that elmo writes into: create it (or an empty one)
    with elmo's marker, or take one elmo made (or one ``recognise`` shows it made before the
    marker existed: the marker is added). Refuses anything else as :func:`check_folder` does.
    Returns the marker's id. Safe when several processes claim the same folder at once. The
    parent folder must exist, unless ``make_parents``."""
    path = os.fspath(path)
    if not check_folder(path, kind, recognise=recognise, option=option):
        try:
            return make_owned_folder(path, kind, make_parents)
        except OSError as error:
            # Another process made it at the same moment (the ranks of one torchrun job): its
            # folder, with its marker, is in place, and renaming ours onto it failed (ENOTEMPTY
            # on Linux, EEXIST elsewhere). Take that folder if it is one of this kind.
            if not isinstance(error, ForeignFolderError) and error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not check_folder(path, kind, recognise=recognise, option=option):
                raise
    owner = read_owner(path)
    if owner is not None:
        return owner["id"]
    try:
        return _write_owner(path, kind)  # recognised from before the marker existed
    except FileExistsError:
        owner = read_owner(path)
        if owner is None or owner["kind"] != kind:
            raise ForeignFolderError(f"{path}: its {OWNER_FILE} is not elmo's marker of a {kind}; choose another "
                                     f"{option}, or move it away") from None
        return owner["id"]


def _move_aside_checked(path: str, check: Callable[[str], object], expected: object, doing: str) -> str:
    """Move the folder ``path`` into a fresh private folder beside it and run ``check`` on it
    there; if ``check`` raises or returns other than ``expected`` (the folder was swapped since
    it was checked), put it back and raise. Returns the private folder (``path``'s folder is in
    it under its own name): what is then deleted is exactly what was checked."""
    aside = _new_folder_beside(path, doing)
    moved = os.path.join(aside, os.path.basename(path))
    try:
        os.rename(path, moved)
    except BaseException:
        os.rmdir(aside)
        raise
    try:
        if check(moved) != expected:
            raise ForeignFolderError(f"{path}: changed while elmo was about to {doing} it; left in place")
    except BaseException as error:
        os.rename(moved, path)
        os.rmdir(aside)
        if isinstance(error, ForeignFolderError) and moved in str(error):  # name the user's path, not ours
            raise ForeignFolderError(str(error).replace(moved, path)) from None
        raise
    return aside


def remove_owned_folder(path: str | os.PathLike, check: Callable[[str], object]) -> None:
    """Delete the folder ``path`` once ``check(path)`` accepted it (it raises otherwise, and
    returns what identifies the folder: its marker's id). The folder is first moved aside under
    a private name and checked again there, so that what is deleted is exactly what was checked
    even if the folder at ``path`` was swapped in between (then it is put back, and the second
    check's error raised)."""
    path = os.fspath(path)
    shutil.rmtree(_move_aside_checked(path, check, check(path), "delete"))


def owner_id(path: str) -> str | None:
    """The id in ``path``'s marker (None: no marker), for :func:`remove_owned_folder`."""
    owner = read_owner(path)
    return None if owner is None else owner["id"]


def atomic_folder(output: str | os.PathLike, write, overwrite: bool = False, *, kind: str = "model",
                  allowed: Callable[[str], bool] | None = None, recognise: Callable[[str], bool] | None = None,
                  option: str = "output", make_parents: bool = False) -> None:
    """Run ``write(folder)`` into a fresh temporary folder beside ``output`` (with elmo's marker
    for ``kind``) and rename it into place, so ``output`` is either complete or untouched.
    Nothing is there, or an empty folder: it is written. An existing ``output`` is replaced only
    with ``overwrite``, and only when elmo made it as a ``kind`` (its marker, or ``recognise``
    for one made before the marker existed) and it holds nothing but what ``allowed`` accepts
    (see :func:`check_folder`); one without the marker, only when it holds nothing but what
    ``write`` wrote. Anything else raises ForeignFolderError naming what is in the way, even with
    ``overwrite``. The parent folder must exist, unless ``make_parents``."""
    output = Path(output)
    _existing_parent(os.fspath(output), make_parents)
    exists = check_folder(output, kind, recognise=recognise, allowed=allowed, option=option)
    if exists and not overwrite:
        raise FileExistsError(f"{output}: already exists; pass --force (overwrite=True) to replace it")
    checked_id = owner_id(os.fspath(output)) if exists else None
    written: list[str] = []

    def check(folder: str) -> str | None:  # the same check, on the folder about to be deleted
        check_folder(folder, kind, recognise=recognise, allowed=allowed, writes=written, option=option)
        return owner_id(folder)

    tmp = Path(_new_folder_beside(os.fspath(output), "new"))
    try:
        _write_owner(os.fspath(tmp), kind)
        try:
            write(tmp)
        except OSError as error:
            translated = _naming_the_target(error, os.fspath(tmp), os.fspath(output))
            if translated is not error:
                raise translated from None
            raise
        if not exists:
            os.replace(tmp, output)  # onto an empty folder: replaces it; onto anything else: fails
            return
        written.extend(n for n in os.listdir(tmp) if n != OWNER_FILE)
        check_folder(output, kind, recognise=recognise, allowed=allowed, writes=written, option=option)
        old = _move_aside_checked(os.fspath(output), check, checked_id, "replace")
        os.replace(tmp, output)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of up to ``size`` items, reading ``items`` once (a stream stays a stream)."""
    iterator = iter(items)
    while block := list(itertools.islice(iterator, size)):
        yield block


# What gzip raises for a damaged file: cut short (EOFError), corrupt deflate data (zlib.error), a bad
# header or checksum (BadGzipFile).
GZIP_DAMAGE = (EOFError, zlib.error, gzip.BadGzipFile)


class DamagedInputError(ValueError):
    """An input file that cannot be read to its end (a truncated or corrupt ``.gz``); the message
    names the file, and the line and byte where the damage was found."""


class _CheckedGzipFile(gzip.GzipFile):
    """A gzip file whose damage is a :class:`DamagedInputError` naming the file, the lines read
    before it and the compressed byte where it was found (gzip's own exceptions name none)."""

    def __init__(self, path: str):
        super().__init__(path, "rb")
        self.label, self.lines = path, 0

    def _damaged(self, e: BaseException) -> DamagedInputError:
        try:  # how far the gzip reader has read (it reads ahead, so the damage is at or before it)
            at = f"read up to byte {self.fileobj.tell():,} of {os.path.getsize(self.label):,}"
        except (AttributeError, OSError, ValueError):
            at = "at an unknown byte"
        after = f"after line {self.lines:,}, " if self.lines else ""
        reason = str(e) or type(e).__name__
        return DamagedInputError(f"{self.label}: not readable as gzip ({after}{at}: {reason}): the file is truncated "
                                 "or corrupt (an interrupted download or copy?), or not gzip despite its name")

    @contextlib.contextmanager
    def _reporting_damage(self):
        try:
            yield
        except GZIP_DAMAGE as e:
            raise self._damaged(e) from None

    def read(self, size=-1):
        with self._reporting_damage():
            return super().read(size)

    def read1(self, size=-1):
        with self._reporting_damage():
            return super().read1(size)

    def peek(self, n):
        with self._reporting_damage():
            return super().peek(n)

    def readline(self, size=-1):  # line iteration goes through here too
        with self._reporting_damage():
            line = super().readline(size)
        self.lines += line.endswith(b"\n")
        return line


def open_text(path: str | os.PathLike) -> IO[bytes]:
    """Open a plain or ``.gz`` file for reading as bytes (decode line by line to report errors).
    ``"-"`` is standard input (never closed by the caller's ``with``). A damaged ``.gz`` raises
    :class:`DamagedInputError` (a ValueError) naming the file, line and byte, when it is read."""
    path = os.fspath(path)
    if path == STDIN:
        if sys.stdin is None:  # started with standard input closed (`0<&-`): Python sets None
            raise ValueError("-: standard input is closed; pipe the text in (`... | elmo embed - OUT`) or give a file")
        return contextlib.nullcontext(sys.stdin.buffer)  # type: ignore[return-value]
    if path.endswith(".gz"):
        return _CheckedGzipFile(path)
    return open(path, "rb")


# The longest line any verb reads: elmo embed's bound (a million tokens of at most 64 bytes each,
# elmo.inference.embed_file). A longer line is refused naming the file and line, found before it
# is held, so that a file without line breaks (/dev/zero) costs this much memory and no more.
MAX_LINE_BYTES = 64_000_000


def read_lines(path: str | os.PathLike, max_bytes: int | None = MAX_LINE_BYTES) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (plain or ``.gz``; ``"-"`` for standard input)
    without their line endings, reading the file once, as a stream (pipes work).

    Raises ValueError naming the file and 1-based line number of a line that is not valid UTF-8,
    or of a line longer than ``max_bytes`` (:data:`MAX_LINE_BYTES`; found before the whole line is
    held: memory stays bounded even when a file has no line breaks; None: no bound).
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
    except (OSError, ValueError):  # a damaged .gz: the reading pass reports it
        return None
    return count + (last != b"\n")


def default_cache_dir() -> Path:
    """elmo's cache folder (downloads, unpacked archives, warm states, the precision choice):
    ``$ELMO_CACHE``, else ``$XDG_CACHE_HOME/elmo``, else ``~/.cache/elmo``."""
    if os.environ.get("ELMO_CACHE"):
        return Path(os.environ["ELMO_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "elmo"
    return Path.home() / ".cache" / "elmo"
