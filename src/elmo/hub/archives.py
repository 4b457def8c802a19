"""Models handed over as a zip archive or a folder of files: the NLPL vector repository's ELMo
archives (bilm-tf layout) and ELMoForManyLangs models (:mod:`elmo.hub.manylangs`).

An NLPL ELMo archive holds ``options.json``, the weights as ``model.hdf5`` (or ``weights.hdf5``,
or AllenNLP's ``*_weights.hdf5``) and often ``vocab.txt`` or ``vocab.txt.gz``, at its root or in
one folder. :class:`ModelFolder` reads either form the same way. Small members are read from the
archive; an HDF5 weights file, which h5py must seek in, is extracted once into the cache under a
fingerprint of its content (the archive's CRC-32 and size of the member), so a second archive
with the same weights reuses it.

An archive is refused as a whole, with an error naming it and the member, when a member's path
escapes its folder (absolute, a drive letter or ``..``), when a member is a symbolic link, or when
the archive expands past :func:`max_archive_bytes` (a zip bomb; the bound is far above any ELMo).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import stat
import warnings
import zipfile
import zlib
from pathlib import Path

from elmo.fileio import atomic_path

# The expanded size past which an archive is refused. The largest ELMo files are a few hundred
# MB (2x4096_512: 374 MB of weights; an ELMoForManyLangs model: about 700 MB) and a softmax
# over a million words 2 GB: 16 GiB leaves room for any of them, while a zip bomb (kilobytes that
# expand to terabytes) is stopped before a byte of it is written. $ELMO_MAX_ARCHIVE_BYTES changes it.
MAX_ARCHIVE_BYTES = 16 * 2**30
MAX_ARCHIVE_BYTES_ENV = "ELMO_MAX_ARCHIVE_BYTES"

OPTIONS_NAMES = ("options.json",)
WEIGHTS_NAMES = ("model.hdf5", "weights.hdf5")
VOCAB_NAMES = ("vocab.txt", "vocab.txt.gz")
SOFTMAX_NAME = "softmax_weights.hdf5"
MANYLANGS_NAMES = ("config.json", "encoder.pkl", "token_embedder.pkl")
# What macOS adds to the zips it makes; never part of a model.
_JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$)")
_COPY_CHUNK = 1 << 20


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

    def label(self, name: str) -> str:
        """How errors name a member: ``archive.zip:name`` or the file's path."""
        member = self._members.get(name)
        if isinstance(member, Path):
            return str(member)
        if isinstance(member, zipfile.ZipInfo):
            return f"{self.path}:{member.filename}"
        return f"{self.path}:{name}" if self.is_archive else str(self.path / name)

    def _member(self, name: str) -> zipfile.ZipInfo | Path:
        if name not in self._members:
            raise ArchiveError(f"{self.label(name)}: missing (the {'archive' if self.is_archive else 'folder'} holds "
                               f"{', '.join(self.names()) or 'no files'})")
        return self._members[name]

    def size(self, name: str) -> int:
        member = self._member(name)
        return member.stat().st_size if isinstance(member, Path) else member.file_size

    def read_bytes(self, name: str) -> bytes:
        """The whole member (bounded by the archive check); errors name archive and member."""
        member = self._member(name)
        if isinstance(member, Path):
            return member.read_bytes()
        try:
            with self._zip.open(member) as f:  # zipfile stops at the declared size and checks the CRC
                return f.read()
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:  # a damaged member: bad CRC, truncated data
            raise ArchiveError(f"{self.label(name)}: cannot be read from the archive ({e})") from None

    def read_text(self, name: str) -> str:
        """A UTF-8 member (``.gz`` members are decompressed); errors name archive and member."""
        data = self.read_bytes(name)
        if name.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise ArchiveError(f"{self.label(name)}: not a readable gzip file ({e})") from None
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

    def local_file(self, name: str) -> Path:
        """A path on disk holding the member: the file itself in a folder; for an archive, a copy
        extracted once into ``$ELMO_CACHE/archives/<fingerprint>/``, where ``fingerprint`` comes
        from the member's CRC-32 and size (its content), so any archive holding the same bytes
        shares it. The copy is written atomically and its size checked on every use."""
        member = self._member(name)
        if isinstance(member, Path):
            return member
        from elmo.hub.download import default_cache_dir

        fingerprint = hashlib.sha256(f"{member.CRC:08x}:{member.file_size}".encode()).hexdigest()[:24]
        target = default_cache_dir() / "archives" / fingerprint / Path(member.filename).name
        if target.is_file() and target.stat().st_size == member.file_size:
            return target
        try:
            with atomic_path(target, make_parents=True) as tmp, self._zip.open(member) as src, open(tmp, "wb") as dst:
                # zipfile stops at the member's declared size and checks its CRC at the end.
                shutil.copyfileobj(src, dst, _COPY_CHUNK)
        except (zipfile.BadZipFile, EOFError, zlib.error) as e:  # a damaged member: bad CRC, bad deflate data
            raise ArchiveError(f"{self.label(name)}: cannot be read from the archive ({e})") from None
        return target

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
    return bilm_from_hdf5(config, folder.local_file(weights), options_label=folder.label(options),
                          weights_label=folder.label(weights)).eval()


def language_model_of_folder(path: str | os.PathLike):
    """The language model, vocabulary and origin (``{"path": ...}``) of a model archive or folder
    holding a vocabulary but no softmax (the NLPL repository's ELMo archives): the biLM from its
    weights and a softmax over its vocabulary that starts from random weights, with a warning.
    Fine-tuning then learns the softmax along with the biLM."""
    from elmo.hub.checkpoints import SOFTMAX_FILE
    from elmo.model.lm import LanguageModel
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


__all__ = ["ArchiveError", "MAX_ARCHIVE_BYTES", "ModelFolder", "is_manylangs", "language_model_of_folder",
           "load_bilm_tf_folder",
           "looks_like_model", "max_archive_bytes", "options_member", "read_model_vocabulary", "vocab_member",
           "weights_member"]
