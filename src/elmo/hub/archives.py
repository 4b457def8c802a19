"""Models handed over as a zip archive or a folder of files: the NLPL vector repository's ELMo
archives (bilm-tf layout) and ELMoForManyLangs models (:mod:`elmo.hub.manylangs`).

An NLPL ELMo archive holds ``options.json``, the weights as ``model.hdf5`` (or ``weights.hdf5``,
or AllenNLP's ``*_weights.hdf5``) and often ``vocab.txt`` or ``vocab.txt.gz``, at its root or in
one folder. :class:`ModelFolder` reads either form the same way. Small members are read from the
archive; an HDF5 weights file, which h5py must seek in, is extracted once into the cache under
the SHA-256 of its bytes (computed while streaming them), so a second archive with the same
weights reuses it, and no archive can place its bytes where another archive's are looked up.
(Zip's own CRC-32 only guards the transfer: four chosen bytes give any content any CRC-32.)

An archive is refused as a whole, with an error naming it and the member, when a member's path
escapes its folder (absolute, a drive letter or ``..``), when a member is a symbolic link, or when
the archive expands past :func:`max_archive_bytes` (a zip bomb; the bound is far above any ELMo).
Each member is then read as a stream, bounded by what the format needs: the weights by what a
model of the archive's options can hold (:func:`member_bound`: 4 bytes a parameter, times
:data:`BOUND_FACTOR`, plus :data:`BOUND_MARGIN`), text members by :data:`MAX_TEXT_BYTES`; its
first bytes must be the format's signature (HDF5's for weights), and reading stops the moment the
bound is passed. A refused member leaves nothing in the cache: the weights are streamed once
through SHA-256 without writing anything, and only a member that passed every check is written
(and removed again when the weights inside it are refused).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import re
import shutil
import stat
import warnings
import zipfile
import zlib
from pathlib import Path

from elmo.fileio import atomic_path

# The expanded size past which an archive is refused, and the most any one member of it may write
# to disk, whatever the archive's own options.json claims (options may declare a biLM of billions
# of parameters and stay under elmo's ceiling: the bound must not come from the archive). The
# largest ELMo files are a few hundred MB (2x4096_512: 374 MB of weights; an ELMoForManyLangs
# model: about 700 MB) and a softmax over a million words 2 GB: 4 GiB leaves room for any of them,
# while a zip bomb (kilobytes that expand to terabytes) is stopped before a byte of it is written.
# $ELMO_MAX_ARCHIVE_BYTES changes it. An extraction also needs the room on the cache's disk.
MAX_ARCHIVE_BYTES = 4 * 2**30
MAX_ARCHIVE_BYTES_ENV = "ELMO_MAX_ARCHIVE_BYTES"

OPTIONS_NAMES = ("options.json",)
WEIGHTS_NAMES = ("model.hdf5", "weights.hdf5")
VOCAB_NAMES = ("vocab.txt", "vocab.txt.gz")
SOFTMAX_NAME = "softmax_weights.hdf5"
MANYLANGS_NAMES = ("config.json", "encoder.pkl", "token_embedder.pkl")
# What macOS adds to the zips it makes; never part of a model.
_JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$)")
_COPY_CHUNK = 1 << 20

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# A model's member holds at most what its options need: 4 bytes (float32) a parameter, times this
# factor, plus this margin for the container's own structures (HDF5 headers and B-trees, a
# pickle's names). The published ELMo weights are 4.0 bytes a parameter plus a few kilobytes.
BOUND_FACTOR = 1.25
BOUND_MARGIN = 16 * 2**20
# Options, vocabularies and dictionaries: a vocabulary of a million words is about 10 MB.
MAX_TEXT_BYTES = 256 * 2**20


class ArchiveError(ValueError):
    """A model archive or folder is unusable; the message names it and the member at fault."""


def max_archive_bytes() -> int:
    """The expanded size past which archives are refused (see :data:`MAX_ARCHIVE_BYTES`)."""
    value = os.environ.get(MAX_ARCHIVE_BYTES_ENV)
    if not value:
        return MAX_ARCHIVE_BYTES
    try:
        return int(value)
    except ValueError:
        raise ArchiveError(f"${MAX_ARCHIVE_BYTES_ENV}: expected a number of bytes, got {value!r}") from None


def member_bound(parameters: int) -> int:
    """The most bytes a member holding ``parameters`` weights may expand to (see
    :data:`BOUND_FACTOR`), and never past :func:`max_archive_bytes`."""
    return min(int(4 * parameters * BOUND_FACTOR) + BOUND_MARGIN, max_archive_bytes())


# Left free on the cache's disk after an extraction: a disk filled to the last byte fails whatever
# writes next (another program's files included).
ROOM_MARGIN = 64 * 2**20


def _check_room(folder: Path, size: int, label: str) -> None:
    """Refuse, before writing a byte, an extraction of ``size`` bytes into ``folder`` that the
    disk has no room for (rather than an ``[Errno 28]`` halfway through)."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # the write itself will say
    if size + ROOM_MARGIN > free:
        raise ArchiveError(f"{label}: extracting it needs {size / 2**20:,.0f} MiB in {folder}, which has "
                           f"{free / 2**20:,.0f} MiB free; free some space, or set $ELMO_CACHE to a folder on a "
                           "larger disk")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_empty_folders(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``stop``, while they are empty."""
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (another archive's extraction), or gone
            return
        folder = folder.parent


class _CheckedReader:
    """A member's bytes as a file-like ``read``: its SHA-256 computed on the way, its first bytes
    checked against ``magic`` before any more is read, and an error the moment more than
    ``limit`` bytes have come (``why`` says where the bound comes from, for the message)."""

    def __init__(self, folder: "ModelFolder", name: str, limit: int, why: str, magic: tuple[bytes, ...],
                 kind: str):
        self.folder, self.name, self.limit, self.why = folder, name, limit, why
        self.sha256 = hashlib.sha256()
        self.count = 0
        size = folder.size(name)
        if size > limit:  # the declared size: zipfile never reads past it
            raise self._too_big(declared=size)
        member = folder._member(name)
        self._raw = None
        self._raw = self._guard(lambda: open(member, "rb") if isinstance(member, Path) else folder._zip.open(member))
        self._pending = b""
        if magic:
            head = self._guard(lambda: self._raw.read(max(len(m) for m in magic)))
            if not head.startswith(magic):
                self.close()
                raise ArchiveError(f"{folder.label(name)}: not {kind} (it starts with {head[:8]!r}); refusing it "
                                   f"before reading further")
            self._pending = head

    def _too_big(self, declared: int | None = None) -> ArchiveError:
        amount = f"declares {declared:,} bytes" if declared is not None else f"expands past {self.limit:,} bytes"
        return ArchiveError(f"{self.folder.label(self.name)}: {amount}, more than the {self.limit:,} that {self.why}; "
                            f"refusing it as a possible zip bomb")

    def _guard(self, read):
        try:
            return read()
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:  # bad CRC, truncated or bad deflate data
            self.close()
            raise ArchiveError(f"{self.folder.label(self.name)}: cannot be read from the archive ({e})") from None

    def read(self, n: int = -1) -> bytes:
        room = self.limit + 1 - self.count  # one byte past the bound is enough to refuse
        n = room if n is None or n < 0 else min(n, room)
        data, self._pending = self._pending[:n], self._pending[n:]
        if len(data) < n:
            data += self._guard(lambda: self._raw.read(n - len(data)))
        self.count += len(data)
        if self.count > self.limit:
            self.close()
            raise self._too_big()
        self.sha256.update(data)
        return data

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()

    def __enter__(self) -> "_CheckedReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _escapes(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return name.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", name)) or ".." in parts


class ModelFolder:
    """The files of a model in a zip archive or a folder, by their names relative to the model's
    root (an archive whose files all sit in one folder has that folder as its root).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._zip: zipfile.ZipFile | None = None
        self._members: dict[str, zipfile.ZipInfo | Path] = {}
        self._prefix = ""  # the root folder inside an archive
        self._nested: dict[str, zipfile.ZipInfo | Path] = {}  # files found by find_file, outside the root's list
        self._extracted: dict[str, tuple[Path, Path]] = {}  # name -> (extracted file, the folder it was made in)
        if self.path.is_dir():
            self._members = {p.name: p for p in sorted(self.path.iterdir()) if p.is_file()}
        elif self.path.is_file():
            self._open_zip()
        else:
            raise ArchiveError(f"{self.path}: no such file or folder")

    def _open_zip(self) -> None:
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as e:
            raise ArchiveError(f"{self.path}: not a readable zip archive ({e})") from None
        infos = self._zip.infolist()
        total, largest = 0, None
        for info in infos:
            if _escapes(info.filename):
                raise ArchiveError(f"{self.path}: member {info.filename!r} points outside the archive's folder (an "
                                   f"absolute path or '..'); refusing the archive")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise ArchiveError(f"{self.path}: member {info.filename!r} is a symbolic link; refusing the archive")
            total += info.file_size
            if largest is None or info.file_size > largest.file_size:
                largest = info
        bound = max_archive_bytes()
        if total > bound:
            raise ArchiveError(f"{self.path}: expands to {total:,} bytes (member {largest.filename!r} alone "
                               f"{largest.file_size:,} from {largest.compress_size:,}), past the {bound:,} bytes this "
                               f"library unpacks; refusing it as a possible zip bomb (${MAX_ARCHIVE_BYTES_ENV} "
                               f"raises the bound)")
        files = [i for i in infos if not i.is_dir() and not _JUNK.search(i.filename)]
        roots = {i.filename.split("/", 1)[0] for i in files if "/" in i.filename}
        prefix = f"{roots.pop()}/" if len(roots) == 1 and all("/" in i.filename for i in files) else ""
        self._prefix = prefix
        for info in files:
            name = info.filename[len(prefix):]
            if "/" not in name:  # only the root's own files: a model is one flat folder
                self._members[name] = info

    # ------------------------------------------------------------------------------ access
    def __enter__(self) -> "ModelFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    @property
    def is_archive(self) -> bool:
        return self._zip is not None or self.path.is_file()

    def names(self) -> list[str]:
        """Member names at the model's root."""
        return list(self._members)

    def has(self, name: str) -> bool:
        return name in self._members

    def find_file(self, path: str) -> str | None:
        """The member name under which the file at ``path`` reads, or None where there is none:
        ``path`` relative to the model's root (subfolders included), or absolute, as
        ``os.path.join(model_folder, path)`` finds it. In a folder that is any file; in an
        archive a relative path is a member (never outside it), an absolute one a file on disk."""
        if path in self._members:
            return path
        if path in self._nested:
            return path
        found: zipfile.ZipInfo | Path | None = None
        if self._zip is None or Path(path).is_absolute():
            candidate = self.path / path if self._zip is None else Path(path)  # an absolute path stays as it is
            found = candidate if candidate.is_file() else None
        elif not _escapes(path):
            try:
                found = self._zip.getinfo(self._prefix + path.replace("\\", "/"))
            except KeyError:
                found = None
        if found is None:
            return None
        self._nested[path] = found
        return path

    def label(self, name: str) -> str:
        """How errors name a member: ``archive.zip:name`` or the file's path."""
        member = self._members.get(name, self._nested.get(name))
        if isinstance(member, Path):
            return str(member)
        if isinstance(member, zipfile.ZipInfo):
            return f"{self.path}:{member.filename}"
        return f"{self.path}:{name}" if self.is_archive else str(self.path / name)

    def _member(self, name: str) -> zipfile.ZipInfo | Path:
        if name in self._nested:
            return self._nested[name]
        if name not in self._members:
            raise ArchiveError(f"{self.label(name)}: missing (the {'archive' if self.is_archive else 'folder'} holds "
                               f"{', '.join(self.names()) or 'no files'})")
        return self._members[name]

    def size(self, name: str) -> int:
        member = self._member(name)
        return member.stat().st_size if isinstance(member, Path) else member.file_size

    def read_bytes(self, name: str, limit: int | None = None, why: str = "", magic: tuple[bytes, ...] = (),
                   kind: str = "") -> bytes:
        """The whole member, read as a stream and refused once past ``limit`` bytes (default
        :data:`MAX_TEXT_BYTES`; ``why`` names the bound's origin in the message) or when it does
        not start with one of ``magic`` (``kind`` names the format). Errors name archive and member."""
        if limit is None:
            limit, why = MAX_TEXT_BYTES, "elmo reads for a text member (options, vocabulary, dictionary)"
        # One growing buffer, whose value is taken without a copy: memory holds the member once.
        buffer = io.BytesIO()
        with _CheckedReader(self, name, limit, why, magic, kind) as reader:
            while chunk := reader.read(_COPY_CHUNK):
                buffer.write(chunk)
        return buffer.getvalue()

    def read_text(self, name: str) -> str:
        """A UTF-8 member (``.gz`` members are decompressed, to at most :data:`MAX_TEXT_BYTES`);
        errors name archive and member."""
        data = self.read_bytes(name)
        if name.endswith(".gz"):
            try:
                with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
                    data = f.read(MAX_TEXT_BYTES + 1)
            except (OSError, EOFError) as e:
                raise ArchiveError(f"{self.label(name)}: not a readable gzip file ({e})") from None
            if len(data) > MAX_TEXT_BYTES:
                raise ArchiveError(f"{self.label(name)}: expands past the {MAX_TEXT_BYTES:,} bytes elmo reads for a "
                                   f"text member; refusing it as a possible gzip bomb")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ArchiveError(f"{self.label(name)}: not UTF-8 text (byte {e.start})") from None

    def read_lines(self, name: str) -> list[str]:
        """A text member's lines, split at newlines only, as :func:`elmo.fileio.read_lines` splits a file."""
        lines = [line.rstrip("\r") for line in self.read_text(name).split("\n")]
        if lines and lines[-1] == "":
            lines.pop()
        return lines

    def local_file(self, name: str, limit: int | None = None, why: str = "", magic: tuple[bytes, ...] = (),
                   kind: str = "") -> Path:
        """A path on disk holding the member: the file itself in a folder; for an archive, a copy
        extracted once into ``$ELMO_CACHE/archives/<sha256>/``, the SHA-256 of the member's bytes,
        so any archive holding the same bytes shares it and no other bytes are ever found there.

        The member is streamed twice at most: once through SHA-256 alone (nothing written), which
        finds a copy already there (whose own SHA-256 is checked on every use), then, for a new
        one, into a temporary file renamed into place. Both passes refuse it past ``limit``
        bytes (default :func:`max_archive_bytes`) or without one of the signatures ``magic``, as
        :meth:`read_bytes` does; a refusal or an interruption leaves nothing in the cache."""
        member = self._member(name)
        if isinstance(member, Path):
            return member
        from elmo.fileio import default_cache_dir

        if limit is None:
            limit, why = max_archive_bytes(), f"${MAX_ARCHIVE_BYTES_ENV} allows"
        with _CheckedReader(self, name, limit, why, magic, kind) as reader:
            while reader.read(_COPY_CHUNK):
                pass
        key = reader.sha256.hexdigest()
        target = default_cache_dir() / "archives" / key / Path(member.filename).name
        if target.is_file() and _file_sha256(target) == key:
            self._extracted[name] = (target, target.parent)
            return target
        made_from = next(folder for folder in target.parents if folder.exists())  # what a refusal leaves
        _check_room(made_from, member.file_size, self.label(name))
        try:
            with atomic_path(target, make_parents=True) as tmp, open(tmp, "wb") as dst, \
                    _CheckedReader(self, name, limit, why, magic, kind) as src:
                shutil.copyfileobj(src, dst, _COPY_CHUNK)
                if src.sha256.hexdigest() != key:
                    raise ArchiveError(f"{self.label(name)}: changed while it was read (SHA-256 {key[:12]}... then "
                                       f"{src.sha256.hexdigest()[:12]}...); refusing it")
        except BaseException:
            _remove_empty_folders(target.parent, made_from)
            raise
        self._extracted[name] = (target, made_from)
        return target

    def discard(self, name: str) -> None:
        """Remove what :meth:`local_file` extracted for ``name`` (its content was refused), and
        the folders that extraction made, when they are left empty; nothing for a folder's own
        files."""
        target, made_from = self._extracted.pop(name, (None, None))
        if target is not None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            _remove_empty_folders(target.parent, made_from)

    def find(self, names: tuple[str, ...], suffix: str | None = None, what: str = "file") -> str | None:
        """The first of ``names`` present; else the one member ending in ``suffix`` (AllenNLP's
        ``elmo_..._weights.hdf5``); None when absent. Two suffix matches are an error."""
        for name in names:
            if self.has(name):
                return name
        if suffix is None:
            return None
        matches = [n for n in self.names() if n.endswith(suffix)]
        if len(matches) > 1:
            raise ArchiveError(f"{self.path}: {len(matches)} candidate {what}s ({', '.join(matches)}); keep one")
        return matches[0] if matches else None


def options_member(folder: ModelFolder) -> str | None:
    return folder.find(OPTIONS_NAMES, "_options.json", "options file")


def weights_member(folder: ModelFolder) -> str | None:
    return folder.find(WEIGHTS_NAMES, "_weights.hdf5", "weights file")


def vocab_member(folder: ModelFolder) -> str | None:
    return folder.find(VOCAB_NAMES)


def is_manylangs(folder: ModelFolder) -> bool:
    """Whether the folder holds an ELMoForManyLangs model (``encoder.pkl`` is theirs alone)."""
    return folder.has("encoder.pkl") or folder.has("token_embedder.pkl")


def looks_like_model(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a model archive or folder (:func:`elmo.hub.load_model`'s ``"archive"``): a ``.zip`` file, or a folder holding an
    options file or an ELMoForManyLangs model (not a training run directory, which holds an
    options file too). Cheap: nothing is read."""
    path = Path(path)
    if path.is_file():
        return path.suffix.lower() == ".zip"
    if not path.is_dir() or (path / "checkpoints").is_dir():  # a training run directory is not one
        return False
    names = {p.name for p in path.iterdir()}
    # config.json alone is not enough: task runs write one too.
    return bool(names & {*OPTIONS_NAMES, "encoder.pkl", "token_embedder.pkl"}) or \
        any(n.endswith("_options.json") for n in names)


def load_bilm_tf_folder(folder: ModelFolder):
    """The biLM of an NLPL archive or folder (bilm-tf layout), in eval mode. Errors name the
    archive or folder and the member at fault. (:func:`elmo.hub.load_model` also takes
    ELMoForManyLangs models, which :mod:`elmo.hub.manylangs` reads.)"""
    from elmo.model.config import BiLMConfig
    from elmo.model.weights import bilm_from_hdf5

    options, weights = options_member(folder), weights_member(folder)
    if options is None or weights is None:
        missing = "options file (options.json)" if options is None else \
            "weights file (model.hdf5, weights.hdf5 or *_weights.hdf5)"
        raise ArchiveError(f"{folder.path}: not a model: no {missing} among {', '.join(folder.names()) or 'no files'} "
                           f"(expected the bilm-tf layout of NLPL archives, or an ELMoForManyLangs model: "
                           f"{', '.join(MANYLANGS_NAMES)}, char.dic, word.dic)")
    config = BiLMConfig.from_bytes(folder.read_bytes(options), folder.label(options))
    # The options say how large the weights can be: a bigger member is refused while streaming.
    parameters = config.parameter_count()
    path = folder.local_file(weights, limit=member_bound(parameters), magic=(HDF5_SIGNATURE,), kind="an HDF5 file",
                             why=f"a model of {folder.label(options)} can need ({parameters:,} parameters)")
    try:
        return bilm_from_hdf5(config, path, options_label=folder.label(options),
                              weights_label=folder.label(weights)).eval()
    except Exception:
        folder.discard(weights)  # refused weights leave nothing in the cache
        raise


def language_model_of_folder(path: str | os.PathLike):
    """The language model, vocabulary and origin (``{"path": ...}``) of a model archive or folder
    holding a vocabulary but no softmax (the NLPL repository's ELMo archives): the biLM from its
    weights and a softmax over its vocabulary that starts from random weights, with a warning.
    Fine-tuning then learns the softmax along with the biLM."""
    from elmo.hub.checkpoints import SOFTMAX_FILE
    from elmo.lm.model import LanguageModel
    from elmo.model.vocab import Vocabulary

    with ModelFolder(path) as folder:
        if is_manylangs(folder):
            raise ValueError(f"{path}: an ELMoForManyLangs model cannot be fine-tuned here: its releases hold no "
                             f"softmax and no bilm-tf vocabulary, and training reads bytes (bilm-tf's scheme)")
        name = vocab_member(folder)
        if name is None:
            raise FileNotFoundError(f"{path}: fine-tuning needs the model's vocabulary (vocab.txt or vocab.txt.gz), "
                                    f"which it does not hold")
        vocab = Vocabulary.from_lines(folder.read_lines(name), folder.label(name))
        bilm = load_bilm_tf_folder(folder)
    model = LanguageModel(bilm.config, len(vocab))
    model.bilm = bilm.train()
    warnings.warn(f"{path}: no {SOFTMAX_FILE} (NLPL archives ship none): the softmax over the {len(vocab):,} words of "
                  f"its vocabulary starts from random weights and is learned while fine-tuning", stacklevel=3)
    return model, vocab, {"path": os.path.abspath(path)}


def read_model_vocabulary(path: str | os.PathLike) -> tuple[list[str], str] | None:
    """The words of a model archive's or folder's ``vocab.txt``/``vocab.txt.gz`` (one per line,
    surrounding whitespace dropped, empty lines skipped) and the member's label; None when it has
    none."""
    with ModelFolder(path) as folder:
        name = vocab_member(folder)
        if name is None:
            return None
        words = [line.strip() for line in folder.read_lines(name)]
        return [w for w in words if w], folder.label(name)


__all__ = ["ArchiveError", "BOUND_FACTOR", "BOUND_MARGIN", "HDF5_SIGNATURE", "MAX_ARCHIVE_BYTES", "MAX_TEXT_BYTES",
           "ModelFolder", "member_bound", "is_manylangs", "language_model_of_folder",
           "load_bilm_tf_folder",
           "looks_like_model", "max_archive_bytes", "options_member", "read_model_vocabulary", "vocab_member",
           "weights_member"]
