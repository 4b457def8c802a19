"""Downloading model files once and reusing them from a local cache: the published ELMo files
(:func:`fetch`, with their pins) and any other model URL (:func:`fetch_url`).

``fetch`` puts a file at ``cache_dir/<filename>``. Beside it a sidecar ``<filename>.sha256``
(JSON: sha256, size, url) records what the first download fetched. Every later use checks the
cached file against the pinned size/SHA-256 where the file has them, and against that record where
it does not (trust on first use), so a file that was later truncated or corrupted is noticed and
downloaded again.

A download is streamed into a temporary file in the cache folder, checked, and only then renamed
over the final name (``os.replace``). So an interrupted or bad download never leaves anything under
the final name, and a damaged cached file stays where it is until a verified copy replaces it: a
user who is offline keeps what they had.

Only ``https://`` URLs are fetched. Plain ``http://`` (a mirror set through ``$ELMO_MODELS_URL``,
``localhost`` included) is refused unless ``$ELMO_ALLOW_HTTP`` is ``1``, and so is a redirect from
``https://`` to ``http://``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from elmo.fileio import atomic_path, atomic_write_text, default_cache_dir
from elmo.hub.archives import MAX_ARCHIVE_BYTES_ENV, max_archive_bytes
from elmo.jsonio import JSONFileError, read_json
from elmo.jsonio import field as json_field

CHUNK_SIZE = 1 << 20
SIDECAR_SUFFIX = ".sha256"
# A sidecar holds a digest, a size and the URL: a few hundred bytes.
SIDECAR_MAX_BYTES = 1 << 16
# Set to "1" to allow plain http:// downloads (a mirror on a network you trust).
ALLOW_HTTP_ENV = "ELMO_ALLOW_HTTP"


@dataclass(frozen=True)
class RemoteFile:
    """A file to download: where it lives, its name in the cache, and what it should be."""

    url: str
    filename: str  # name in the cache directory
    size: int | None = None  # bytes, when known in advance
    sha256: str | None = None  # hex digest, when known in advance


# How an error about an unreachable server says to load local files instead, in the words of the
# elmo command and the Python API; another command says it in its own (DownloadError.message_for).
LOCAL_FILES_HINT = "pass --options/--weights, or use from_files,"


class DownloadError(RuntimeError):
    """A file could not be downloaded, or what was downloaded is not the expected file.

    ``missing``: for a server that could not be reached (or refused the file), ``(url, path, reason)``
    of each file to put in place by hand (:func:`fetch_all` names them all at once)."""

    missing: tuple[tuple[str, Path, str], ...] = ()

    def message_for(self, local_files: str) -> str:
        """The message, with its advice on loading local files instead (:data:`LOCAL_FILES_HINT`)
        in the words of a command whose options differ, e.g. ``python -m elmo.allennlp elmo``'s."""
        return str(self).replace(LOCAL_FILES_HINT, local_files)


@dataclass(frozen=True)
class _Record:
    """What a sidecar says the first download fetched: the reference for unpinned files."""

    sha256: str
    size: int


@dataclass(frozen=True)
class _Expected:
    """The size and SHA-256 a file must have, each with where it comes from.

    A pin (``RemoteFile.size``/``sha256``) has an empty ``*_source``; a value taken from the
    sidecar record says so, so that a mismatch message names the sidecar.
    """

    size: int | None = None
    sha256: str | None = None
    size_source: str = ""
    sha256_source: str = ""
    hint: str = ""  # how to accept a different file, when the record is what it is held to


def file_sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file, read in chunks so large weight files need little memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def check_url(url: str) -> None:
    """Refuse, with a DownloadError naming ``url``, a URL this module will not download from.

    ``https://`` is accepted. ``http://`` is accepted only when ``$ELMO_ALLOW_HTTP`` is ``1``:
    anyone on the network path can read and alter a plain-http download, and a pinned hash covers
    only the files that have one. ``localhost``/``127.0.0.1`` get no exception, so that one rule
    holds everywhere and a mistyped mirror cannot slip through. Any other scheme is refused.
    """
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme == "https":
        return
    if scheme == "http":
        value = os.environ.get(ALLOW_HTTP_ENV)
        if value == "1":
            return
        current = f" (it is set to {value!r}; only 1 turns it on)" if value else ""
        raise DownloadError(
            f"refusing to download {url}: plain http:// can be read and altered on the way. "
            f"Use an https:// URL (check $ELMO_MODELS_URL), or set {ALLOW_HTTP_ENV}=1 to allow http:// "
            f"for a mirror you trust (localhost included){current}."
        )
    raise DownloadError(f"refusing to download {url}: only https:// URLs are supported "
                        f"(and http:// with {ALLOW_HTTP_ENV}=1)")


class _CheckedRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL :func:`check_url` accepts, so that an https:// download
    cannot be moved to plain http:// by the server (or by whoever answers in its place)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        try:
            check_url(newurl)
        except DownloadError as e:
            raise DownloadError(f"{req.full_url} redirects to {newurl}, which is refused: {e}") from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch(
    remote: RemoteFile, cache_dir: str | os.PathLike, *, progress: bool = True, timeout: float = 30.0
) -> Path:
    """Return the local path of ``remote`` in ``cache_dir``, downloading it only if needed.

    A cached file that verifies (against the pinned size/sha256 of ``remote``, and for what
    ``remote`` leaves open against its sidecar) is returned without any network access, whatever
    the URL. One that does not is reported with a warning and downloaded again; it is replaced only
    once the new copy has been downloaded and verified, and if that fails it is left in place and
    the DownloadError says both that it is damaged and why the download failed. A re-download is
    held to the sidecar's record too: trust goes to the first download, not to whichever comes
    later. Raises DownloadError if the download is refused, fails, or does not verify.
    """
    path = Path(cache_dir) / remote.filename
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    try:
        record = _read_record(sidecar)
        record_problem = None
    except ValueError as e:
        record, record_problem = None, str(e)
    expected = _expected(remote, record, sidecar)
    damage = None
    if path.exists():
        problems = [record_problem] if record_problem else _cached_problems(path, expected)
        if not problems:
            return path
        damage = "; ".join(problems)
        warnings.warn(f"cached file {path} is damaged ({damage}); downloading it again "
                      f"(the damaged file stays until a verified copy replaces it)", stacklevel=2)
    try:
        # The cache folder is ours to create; the caller named it (or it is the default).
        path.parent.mkdir(parents=True, exist_ok=True)
        sha256, size = _download(remote, expected, path, progress=progress, timeout=timeout)
    except (DownloadError, OSError) as e:
        if damage is None:
            if isinstance(e, DownloadError):
                raise
            raise DownloadError(f"could not store {remote.url} at {path}: {e}") from e
        raise DownloadError(
            f"cached file {path} is damaged ({damage}); it was left in place because downloading "
            f"a replacement failed: {e}"
        ) from e
    atomic_write_text(sidecar, json.dumps({"sha256": sha256, "size": size, "url": remote.url}) + "\n")
    return path


URLS_FOLDER = "urls"  # the cache's folder for files named only by a URL (not a published model)


def url_cache_folder(url: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`fetch_url` keeps the file at ``url``: ``<cache>/urls/<first 16 hex digits of
    the URL's SHA-256>/``, one folder per URL, so two files of the same name never meet."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / URLS_FOLDER / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def url_filename(url: str) -> str:
    """The file name a URL ends in (its path's last part, unquoted), made safe for a file system."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return name or "download"


def fetch_url(url: str, cache_dir: str | os.PathLike | None = None, *, progress: bool = True,
              timeout: float = 30.0) -> Path:
    """The local path of the file at any ``url`` (a contributed model's, a mirror's), downloaded
    once into :func:`url_cache_folder`. With no pin to hold it to, it is trusted on first use:
    the sidecar records the SHA-256 and size of the first download, and every later use (and any
    re-download) is checked against it, as :func:`fetch` does. Raises DownloadError."""
    return fetch(RemoteFile(url, url_filename(url)), url_cache_folder(url, cache_dir), progress=progress,
                 timeout=timeout)


def _read_record(sidecar: Path) -> _Record | None:
    """The sidecar's record, or None when there is no sidecar; ValueError when it is unreadable."""
    if not sidecar.exists():
        return None
    try:
        data = read_json(sidecar, max_bytes=SIDECAR_MAX_BYTES)
        sha256 = json_field(data, "sha256", str, os.fspath(sidecar))
        size = json_field(data, "size", int, os.fspath(sidecar))
    except OSError as e:
        raise ValueError(f"unreadable sidecar {sidecar} ({e.strerror or e})") from e
    except JSONFileError as e:
        raise ValueError(f"unreadable sidecar {sidecar} ({e.reason})") from e
    if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256) or size < 0:
        raise ValueError(f"unreadable sidecar {sidecar} (not a SHA-256 and a size in bytes)")
    return _Record(sha256=sha256.lower(), size=size)


def _expected(remote: RemoteFile, record: _Record | None, sidecar: Path) -> _Expected:
    """What the file must be: the pins of ``remote``, and the sidecar's record for what is not pinned.

    A pin wins over the record, so that a file pinned in a newer release is judged by the pin.
    """
    from_record = f" (recorded in {sidecar} by the first download)"
    hint = f" (if the published file really changed, delete {sidecar} to accept the new one)"
    expected = _Expected(size=remote.size, sha256=remote.sha256.lower() if remote.sha256 else None)
    if record is not None and expected.size is None:
        expected = dataclasses.replace(expected, size=record.size, size_source=from_record, hint=hint)
    if record is not None and expected.sha256 is None:
        expected = dataclasses.replace(expected, sha256=record.sha256, sha256_source=from_record, hint=hint)
    return expected


def _mismatches(expected: _Expected, size: int, sha256: str | None) -> list[str]:
    """Differences between ``expected`` and the actual size/sha256 (sha256 None: not computed)."""
    problems = []
    if expected.size is not None and size != expected.size:
        problems.append(f"expected size {expected.size} bytes{expected.size_source}, got {size}")
    if expected.sha256 is not None and sha256 is not None and sha256 != expected.sha256:
        problems.append(f"expected sha256 {expected.sha256}{expected.sha256_source}, got {sha256}")
    return problems


def _cached_problems(path: Path, expected: _Expected) -> list[str]:
    """Why the cached ``path`` cannot be reused (empty if it can).

    A file with neither pins nor a sidecar (e.g. copied in by hand) has nothing to be checked against.
    """
    size = path.stat().st_size
    problems = _mismatches(expected, size, None)  # size first: it costs no read
    if problems or expected.sha256 is None:
        return problems
    return _mismatches(expected, size, file_sha256(path))


def _network_error(remote: RemoteFile, path: Path, reason: str) -> DownloadError:
    """A DownloadError saying which URL failed, why, and how to put the file in place by hand."""
    error = DownloadError(
        f"could not download {remote.url}: {reason}.\n"
        f"To install it by hand, download {remote.url} on a machine with internet access and copy it "
        f"to {path} (or {LOCAL_FILES_HINT} to load files from elsewhere)."
    )
    error.missing = ((remote.url, path, reason),)
    return error


def fetch_all(files: Sequence[tuple[RemoteFile, str | os.PathLike]], *, progress: bool = True,
              timeout: float = 30.0) -> list[Path]:
    """:func:`fetch` of every ``(remote, cache folder)`` of ``files`` (a model's options and
    weights), their local paths in order. Where servers cannot be reached (offline), one
    DownloadError names every file still missing and the path to copy each to, not only the
    first: a user copies them all in one go. Any other failure (a file that does not verify) is
    raised as it is."""
    paths, errors = [], []
    for remote, folder in files:
        try:
            paths.append(fetch(remote, folder, progress=progress, timeout=timeout))
        except DownloadError as e:
            if not e.missing:
                raise
            errors.append(e)
    if not errors:
        return paths
    if len(errors) == 1:
        raise errors[0]
    missing = [entry for error in errors for entry in error.missing]
    (first_url, _, first_reason), rest = missing[0], missing[1:]
    others = "; ".join(f"{url} ({reason})" for url, _, reason in rest)
    steps = "; ".join(f"download {url} and copy it to {path}" for url, path, _ in missing)
    error = DownloadError(
        f"could not download {first_url}: {first_reason}; nor {others}.\n"
        f"To install these {len(missing)} files by hand, on a machine with internet access: {steps} "
        f"(or {LOCAL_FILES_HINT} to load files from elsewhere)."
    )
    error.missing = tuple(missing)
    raise error from errors[0]


def _download(remote: RemoteFile, expected: _Expected, path: Path, *, progress: bool,
              timeout: float) -> tuple[str, int]:
    """Stream ``remote.url`` into a temporary file beside ``path``, check it against ``expected``,
    and only then rename it onto ``path``; return its (sha256, size).

    Nothing is left under ``path`` (or beside it) when the download is refused, fails or does not
    verify, and a file already at ``path`` is untouched until the rename.
    """
    check_url(remote.url)  # before any connection: a refused URL is never contacted
    request = urllib.request.Request(remote.url, headers={"User-Agent": "elmo"})
    opener = urllib.request.build_opener(_CheckedRedirectHandler())
    try:
        response = opener.open(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        raise _network_error(remote, path, f"HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        raise _network_error(remote, path, str(e.reason)) from e
    except (OSError, http.client.HTTPException) as e:  # timeouts, resets
        raise _network_error(remote, path, str(e) or type(e).__name__) from e

    with response:
        header = response.headers.get("Content-Length")
        length = int(header) if header and header.isdigit() else None
        if length is not None and expected.size is not None and length != expected.size:
            raise DownloadError(
                f"{remote.url} is not the expected file: expected size {expected.size} bytes"
                f"{expected.size_source}, the server announces {length}; nothing was downloaded"
                f"{expected.hint}"
            )
        # Unpinned and unrecorded (a URL's first download): bounded as an archive is, while it
        # streams, whether or not the server announces a length.
        bound = expected.size if expected.size is not None else max_archive_bytes()
        too_large = (f"{remote.url}: larger than {bound:,} bytes, the most elmo downloads for a file without a "
                     f"pinned size (${MAX_ARCHIVE_BYTES_ENV} raises it)")
        if expected.size is None and length is not None and length > bound:
            raise DownloadError(f"{too_large}: the server announces {length:,}; nothing was downloaded")
        digest = hashlib.sha256()
        size = 0
        total = length if length is not None else expected.size
        with atomic_path(path) as tmp, open(tmp, "wb") as out, tqdm(
            total=total, unit="B", unit_scale=True, desc=remote.filename, disable=not progress
        ) as bar:
            while True:
                try:
                    chunk = response.read(CHUNK_SIZE)
                except http.client.IncompleteRead as e:
                    chunk = e.partial
                except (OSError, http.client.HTTPException) as e:
                    raise _network_error(remote, path, f"connection lost after {size} bytes ({e})") from e
                if not chunk:
                    break
                size += len(chunk)
                if expected.size is None and size > bound:
                    raise DownloadError(f"{too_large}: the download was stopped after {size:,} bytes and nothing "
                                        "was kept")
                if expected.size is not None and size > expected.size:
                    # Stop at once: a server without Content-Length could otherwise fill the disk.
                    raise DownloadError(
                        f"{remote.url} is not the expected file: expected size {expected.size} bytes"
                        f"{expected.size_source}, the server sent more; the download was stopped "
                        f"and nothing was kept{expected.hint}"
                    )
                out.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
            if length is not None and size < length:
                raise _network_error(remote, path, f"the download ended after {size} of {length} bytes")
            sha256 = digest.hexdigest()
            problems = _mismatches(expected, size, sha256)
            if problems:
                raise DownloadError(f"{remote.url} is not the expected file: {'; '.join(problems)}; "
                                    f"nothing was kept{expected.hint}")
            # On disk before the rename, so that a crash cannot leave a renamed but empty file.
            out.flush()
            os.fsync(out.fileno())
    return sha256, size
