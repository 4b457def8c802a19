"""Small file helpers: atomic writes (files and whole folders), the ownership of the folders elmo
makes, transparent gzip reading (damage reported in one line) and standard input."""

from __future__ import annotations

import contextlib
import contextvars
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


# ------------------------------------------------------------------ the command's inputs
# The files and folders the running command reads (its arguments that name paths; a folder stands
# for every file in it): no output may be one of them, whatever the flags. Set by the command line
# (elmo.cli.main) or by a library caller with :func:`reading_inputs`; every writer here checks it.
_INPUTS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("elmo_inputs", default=())
# Files looked at inside an input folder for a hard link to the output (a run folder holds a few
# dozen; a bound keeps a folder of millions from costing minutes).
INPUT_FOLDER_SCAN = 100_000


@contextlib.contextmanager
def reading_inputs(paths: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Within the block, every writer of this module refuses an output that is one of ``paths``
    or is linked to one, and a folder it would replace whole that holds one (see
    :func:`check_not_an_input`), ``--force`` or not. Nests (the paths add)."""
    added = tuple(os.fspath(p) for p in paths if os.fspath(p) != STDIN and os.path.lexists(os.fspath(p)))
    token = _INPUTS.set(_INPUTS.get() + added)
    try:
        yield
    finally:
        _INPUTS.reset(token)


def current_inputs() -> tuple[str, ...]:
    """The inputs :func:`reading_inputs` declared for the code running now."""
    return _INPUTS.get()


def _inside(path: str, folder: str) -> bool:
    return path != folder and path.startswith(folder.rstrip(os.sep) + os.sep)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_dev, found.st_ino


def _linked_in_folder(identity: tuple[int, int], folder: str) -> str | None:
    """A file under ``folder`` that is the file of ``identity`` (a hard link, or the same file), if any."""
    seen = 0
    for root, dirs, files in os.walk(folder):
        for name in files:
            seen += 1
            if seen > INPUT_FOLDER_SCAN:
                return None
            if _identity(os.path.join(root, name)) == identity:
                return os.path.join(root, name)
    return None


def input_conflict(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], holds: bool = True,
                   inside: bool = True) -> str | None:
    """Why ``output`` may not be written, given the command's ``inputs``, or None: the output is
    an input (by its device and inode: the same file under another spelling, a symbolic link to
    it or a hard link of it); with ``inside``, an existing file or folder inside an input folder
    (a folder given as input stands for all its files) or a file linked to one in an input
    folder; with ``holds`` (an output folder about to be replaced or deleted whole), a folder
    that holds an input."""
    output = os.fspath(output)
    if output == STDIN:
        return None
    real_output = os.path.realpath(output)
    identity = _identity(output)
    for source in inputs:
        source = os.fspath(source)
        if source == STDIN or not os.path.lexists(source):
            continue
        real_source = os.path.realpath(source)
        if identity is not None and identity == _identity(source):
            return f"this is an input of the command ({source})"
        if holds and _inside(real_source, real_output):
            return f"this folder holds the input {source}"
        if inside and os.path.isdir(real_source) and identity is not None:
            if _inside(real_output, real_source):
                return f"this is in the folder {source}, an input of the command"
            if os.path.isfile(output):
                linked = _linked_in_folder(identity, real_source)
                if linked is not None:
                    return f"this is a link to {linked}, an input of the command"
    return None


def check_not_an_input(output: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), *,
                       option: str | None = None, holds: bool = True) -> None:
    """Refuse, in one line naming ``output`` (and ``option``), an output that is, is in, holds
    (with ``holds``) or is linked to one of ``inputs`` (:func:`input_conflict`), or that is,
    holds or is linked to one of the inputs declared with :func:`reading_inputs` (elmo writes
    its own files into folders it reads, a run's predictions or a cache: the command line
    refuses the outputs a user names inside an input folder before any work): elmo never
    overwrites an input, ``--force`` or not."""
    why = (input_conflict(output, inputs, holds=holds)
           or input_conflict(output, current_inputs(), holds=holds, inside=False))
    if why is not None:
        label = f"{option} {os.fspath(output)}" if option else os.fspath(output)
        raise FileExistsError(f"{label}: {why}; elmo never overwrites an input: give another output")


# ------------------------------------------------------------------ outputs written through
# Where a rename would replace something that is not a file of the user's: a device (/dev/null,
# a terminal), a FIFO, a socket, and any name under these folders (/dev/stdout is a link to
# /proc/self/fd/1). Such an output is opened and written, never renamed over.
THROUGH_ROOTS = ("/dev", "/proc")
# Names of an open file descriptor: writing through them appends to what the descriptor holds
# (``elmo vocab ... --output /dev/stdout >> log`` keeps the log's lines).
_DESCRIPTOR = re.compile(r"/dev/(std(in|out|err)|fd/\d+)|/proc/[^/]+/fd/\d+")
_MAX_LINKS = 40


def _link_chain(path: str) -> list[str]:
    """``path`` and each name its symbolic links lead to, absolute, the folders resolved."""
    names = []
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        current = os.path.join(os.path.realpath(os.path.dirname(current)), os.path.basename(current))
        names.append(current)
        try:
            target = os.readlink(current)
        except (OSError, ValueError):
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return names


def _under_through_root(name: str) -> bool:
    return any(name == root or name.startswith(root + "/") for root in THROUGH_ROOTS)


def writes_through(path: str | os.PathLike) -> bool:
    """Whether an output at ``path`` is written through (opened and written in place) rather
    than renamed into place: a device, a FIFO or a socket, or a name under ``/dev`` or ``/proc``
    (itself, or any link on the way to it)."""
    path = os.fspath(path)
    if path == STDIN:
        return False
    chain = _link_chain(path)
    if any(_under_through_root(name) for name in chain) or any(_DESCRIPTOR.fullmatch(n) for n in chain):
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _through_needs_force(path: str) -> bool:
    """Whether writing through ``path`` replaces a file of the user's (a regular file under
    /dev, such as /dev/shm/x), which wants ``--force`` as any other; a device, FIFO or open
    descriptor does not."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and not any(_DESCRIPTOR.fullmatch(n) for n in _link_chain(path))


def _copy_through(source: str, path: str) -> None:
    """Write the bytes of the file ``source`` into ``path`` in place: appended to a regular file
    reached through an open descriptor's name, over a regular file (truncated first), or simply
    written to a device or FIFO."""
    flags = os.O_WRONLY
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is None:
        flags |= os.O_CREAT | os.O_EXCL
    elif stat.S_ISREG(mode):
        flags |= os.O_APPEND if any(_DESCRIPTOR.fullmatch(n) for n in _link_chain(path)) else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o666)
        with open(source, "rb") as src, open(fd, "wb", closefd=True) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as error:
        if error.errno is None:
            raise
        raise type(error)(error.errno, os.strerror(error.errno), path) from None


# Errors of a write (the disk, the quota, ``ulimit -f``): Python's file objects raise them with no
# file name; within atomic_path they are about the output.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class _RecordingFile:
    """A binary file that keeps the first OSError its writes met: PyTorch's writer turns it
    into a RuntimeError that names nothing ("unexpected pos 576 vs 534")."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data):
        try:
            return self.f.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self):
        try:
            return self.f.flush()
        except OSError as error:
            self.error = self.error or error
            raise

    def __getattr__(self, name):
        return getattr(self.f, name)


def save_torch(payload, path: str | os.PathLike, **options) -> None:
    """``torch.save(payload, path, **options)``, an OS error of the write (a full disk,
    ``ulimit -f``) raised as that OSError (about ``path``), not PyTorch's RuntimeError."""
    import torch

    with open(path, "wb") as raw:
        f = _RecordingFile(raw)
        try:
            torch.save(payload, f, **options)
            f.flush()
        except (RuntimeError, OSError) as error:
            if f.error is None:
                raise
            found = f.error
            raise type(found)(found.errno, os.strerror(found.errno), os.fspath(path)) from error


class _HeldErrorFile:
    """A binary file for HDF5 to write through (h5py's file-object driver) that never lets a write
    error reach HDF5: it keeps the first OSError of a write, truncate or flush and drops what comes
    after, so that HDF5 closes cleanly (its own handling of a failed write raised from destructors,
    and the next file the process opened crashed it: a segfault) and the error is raised after."""

    def __init__(self, f):
        self.f, self.error = f, None

    def _held(self, call, *args, done=None):
        if self.error is None:
            try:
                return call(*args)
            except OSError as error:
                self.error = error
        return done

    def write(self, data):
        return self._held(self.f.write, data, done=memoryview(data).nbytes)

    def truncate(self, size=None):
        return self._held(self.f.truncate, size, done=size)

    def flush(self):
        return self._held(self.f.flush)

    def __getattr__(self, name):
        return getattr(self.f, name)


@contextlib.contextmanager
def atomic_hdf5(path: str | os.PathLike, make_parents: bool = False) -> Iterator:
    """Yield a new ``h5py.File`` written to a temporary file that :func:`atomic_path` renames onto
    ``path`` if the block succeeds. A write error (a full disk, a quota, ``ulimit -f``) is raised,
    naming ``path``, once HDF5 has closed the file: HDF5 never meets it (see :class:`_HeldErrorFile`).
    Its writes go through Python, a little slower than HDF5's own driver."""
    import h5py

    path = os.fspath(path)
    with atomic_path(path, make_parents) as tmp, open(tmp, "w+b") as raw:
        held = _HeldErrorFile(raw)
        try:
            with h5py.File(held, "w") as f:
                yield f
            held.flush()
        except Exception:
            # After a write that failed, HDF5 may read back what never reached the disk and fail on
            # it ("bad heap index"): the write error is what happened.
            if held.error is None:
                raise
        if held.error is not None:
            found = held.error
            raise type(found)(found.errno, os.strerror(found.errno), path) from None


# The errno HDF5 puts in its messages (h5py raises some write errors as RuntimeError, on close).
_HDF5_ERRNO = re.compile(r"\berrno = (\d+)")


def give_plain_permissions(path: str | os.PathLike, *, folder: bool = False) -> None:
    """Give a file (or, with ``folder``, a folder) that elmo made owner-only, as temporary files
    are, the permissions a plain ``open()`` (``mkdir``) would have given it under the umask."""
    umask = os.umask(0)  # the only way to read the umask is to set it: set it straight back
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, make_parents: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    A reader never sees a half-written file, and a crash leaves the old file (if any) intact; the
    temporaries of earlier killed runs are removed first (only elmo's: :func:`temporary_target`).
    The folder must exist unless ``make_parents`` (a typo in an output path should not create
    folders). An OS error raised while writing names ``path``, not the temporary file.
    """
    path = os.fspath(path)
    check_not_an_input(path, holds=False)
    if writes_through(path):
        with _through_path(path) as tmp:
            yield tmp
        return
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
        give_plain_permissions(tmp)  # the temporary file is owner-only
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        translated = _about_output(error, tmp, path)
        if translated is not error:
            raise translated from None
        raise


def _about_output(error: BaseException, tmp: str, path: str) -> BaseException:
    """``error``, met while the temporary ``tmp`` of ``path`` was written, named by ``path``:
    a write error with no file name (a full disk, ``ulimit -f``) is the output's, and so is an
    HDF5 RuntimeError about ``tmp`` that carries a write error's errno."""
    if not isinstance(error, OSError):
        found = _HDF5_ERRNO.search(str(error)) if isinstance(error, RuntimeError) and tmp in str(error) else None
        if found and int(found.group(1)) in WRITE_ERRNOS:
            number = int(found.group(1))
            return OSError(number, os.strerror(number), path)
        return error
    translated = _naming_the_target(error, tmp, path)
    if translated is error and error.errno in WRITE_ERRNOS and error.filename is None:
        return type(error)(error.errno, os.strerror(error.errno), path)
    return translated


@contextlib.contextmanager
def writes_for(path: str | os.PathLike) -> Iterator[None]:
    """Name ``path`` in a write error that names no file (a full disk, a quota, ``ulimit -f``) met
    in the block: for writers whose files on the way are not one temporary file, as the work
    folder of ``elmo embed`` beside its output. An error that names its file passes unchanged."""
    try:
        yield
    except OSError as error:
        if error.errno in WRITE_ERRNOS and error.filename is None:
            raise type(error)(error.errno, os.strerror(error.errno), os.fspath(path)) from None
        raise


@contextlib.contextmanager
def _through_path(path: str) -> Iterator[str]:
    """:func:`atomic_path` for an output written through (:func:`writes_through`): the block
    writes a temporary file in the system's temporary folder, whose bytes then go into ``path``."""
    _existing_parent(path, make_parents=False)
    remove_stale_temporaries(os.path.join(tempfile.gettempdir(), os.path.basename(path)))
    tmp = _new_temporary(path, tempfile.gettempdir())
    try:
        yield tmp
        _copy_through(tmp, path)
    except (OSError, RuntimeError) as error:
        translated = _about_output(error, tmp, path)
        if translated is not error:
            raise translated from None
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


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
                      inputs: Iterable[str | os.PathLike] = (), option: str | None = None,
                      through: bool = True) -> None:
    """Refuse, before any work, an output file that may not or cannot be written: a folder in its
    place, an existing file without ``overwrite``, one of the command's ``inputs`` or of those
    declared with :func:`reading_inputs`, or linked to one (never overwritten, whatever the
    flags: :func:`input_conflict`), and a folder around it that does not exist or cannot be
    written. A device, a FIFO or a name under /dev or /proc (``/dev/stdout``) is written through
    (:func:`writes_through`), without ``overwrite``; with ``through=False`` (an output that must
    be a file: one with a work folder beside it) it is refused. A file is one thing the user
    named: with ``overwrite`` it is replaced, atomically, once the new one is complete (a folder
    may hold anything, so folders have a stricter rule: check_folder). ``option``: the argument
    that named ``path``, to name it in the message."""
    path = os.fspath(path)
    label = f"{option} {path}" if option else path
    if os.path.isdir(path):
        raise IsADirectoryError(f"{label}: a folder is in the way of the output file; give a file name")
    check_not_an_input(path, inputs, option=option, holds=False)
    if writes_through(path):
        if not through:
            raise FileExistsError(f"{label}: a device, a pipe or a name under /dev or /proc, where this output must "
                                  "be a file (elmo keeps its work beside it); give a file name")
        if _through_needs_force(path) and not overwrite:
            raise FileExistsError(f"{label}: already exists; pass --force (overwrite=True) to replace it")
        return
    parent = _existing_parent(path, make_parents=False)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"{label}: the folder {parent} is not writable by you; choose another output or "
                              "change the folder's permissions")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{label}: already exists; pass --force (overwrite=True) to replace it")


def atomic_write_text(path: str | os.PathLike, text: str, make_parents: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path, make_parents) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, make_parents: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (an HDF5 file's image from
    :func:`elmo.hdf5io.hdf5_image`, so that HDF5 never meets a failed write)."""
    with atomic_path(path, make_parents) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


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
    give_plain_permissions(tmp, folder=True)
    return tmp


def make_owned_folder(path: str | os.PathLike, kind: str, make_parents: bool = False) -> str:
    """Create the folder ``path`` holding elmo's marker for ``kind`` (what the folder holds);
    returns the marker's random id. The folder is made beside ``path`` and renamed into place, so
    it never appears without its marker. An empty folder at ``path`` is replaced (there is
    nothing to lose); anything else there raises ForeignFolderError. Its parent must exist,
    unless ``make_parents``."""
    path = os.fspath(path)
    check_not_an_input(path, holds=False)
    _existing_parent(path, make_parents)
    tmp = _new_folder_beside(path, "new")
    try:
        owner_id = _write_owner(tmp, kind)
        os.rename(tmp, path)  # onto an empty folder: replaces it; onto anything else: fails
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.lexists(path) and read_owner(path) is None:
            raise ForeignFolderError(f"{path}: already exists, and elmo did not make it; choose another "
                                     "output, or move it away") from None
        translated = _about_output(error, tmp, path)  # a full disk: the folder asked for, not ours
        if translated is not error:
            raise translated from None
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
    check_not_an_input(path)
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
    check_not_an_input(output, option=option if option.startswith("-") else None)
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
        try:
            _write_owner(os.fspath(tmp), kind)
            write(tmp)
        except (OSError, RuntimeError) as error:  # a full disk names the output, not the temporary folder
            translated = _about_output(error, os.fspath(tmp), os.fspath(output))
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
