"""Downloading the published ELMo files once and reusing them from a local cache.

``fetch`` puts a file at ``cache_dir/<filename>``. Beside it a sidecar ``<filename>.sha256``
(JSON: sha256, size, url) records what was downloaded, so a cached file that was later
truncated or corrupted is noticed and downloaded again. A download is streamed into a
temporary file and renamed into place only once it has been checked, so an interrupted or
bad download never leaves anything under the final name.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from elmo.fileio import atomic_path, atomic_write_text

CHUNK_SIZE = 1 << 20
SIDECAR_SUFFIX = ".sha256"


@dataclass(frozen=True)
class RemoteFile:
    """A file to download: where it lives, its name in the cache, and what it should be."""

    url: str
    filename: str  # name in the cache directory
    size: int | None = None  # bytes, when known in advance
    sha256: str | None = None  # hex digest, when known in advance


class DownloadError(RuntimeError):
    """A file could not be downloaded, or what was downloaded is not the expected file."""


def default_cache_dir() -> Path:
    """The cache directory: ``$ELMO_CACHE``, else ``$XDG_CACHE_HOME/elmo``, else ``~/.cache/elmo``."""
    if os.environ.get("ELMO_CACHE"):
        return Path(os.environ["ELMO_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "elmo"
    return Path.home() / ".cache" / "elmo"


def file_sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file, read in chunks so large weight files need little memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(
    remote: RemoteFile, cache_dir: str | os.PathLike, *, progress: bool = True, timeout: float = 30.0
) -> Path:
    """Return the local path of ``remote`` in ``cache_dir``, downloading it only if needed.

    A cached file that verifies (against the known size/sha256 and against its sidecar) is
    returned without any network access; one that does not is deleted, with a warning, and
    downloaded again. Raises DownloadError if the download fails or does not verify.
    """
    path = Path(cache_dir) / remote.filename
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    if path.exists():
        problems = _cached_problems(path, sidecar, remote)
        if not problems:
            return path
        reason = "; ".join(problems)
        warnings.warn(f"cached file {path} is damaged ({reason}); downloading it again", stacklevel=2)
        path.unlink()
        sidecar.unlink(missing_ok=True)
    sha256, size = _download(remote, path, progress=progress, timeout=timeout)
    atomic_write_text(sidecar, json.dumps({"sha256": sha256, "size": size, "url": remote.url}) + "\n")
    return path


def _mismatches(remote: RemoteFile, size: int, sha256: str | None) -> list[str]:
    """Differences between the known size/sha256 of ``remote`` and the actual ones."""
    problems = []
    if remote.size is not None and size != remote.size:
        problems.append(f"expected size {remote.size} bytes, got {size}")
    if remote.sha256 is not None and sha256 is not None and sha256 != remote.sha256.lower():
        problems.append(f"expected sha256 {remote.sha256.lower()}, got {sha256}")
    return problems


def _cached_problems(path: Path, sidecar: Path, remote: RemoteFile) -> list[str]:
    """Why the cached ``path`` cannot be reused (empty if it can).

    A file without a sidecar (e.g. copied in by hand) is checked only against ``remote``.
    """
    size = path.stat().st_size
    recorded = None
    if sidecar.exists():
        try:
            recorded = json.loads(sidecar.read_text(encoding="utf-8"))
            recorded_size, recorded_sha256 = int(recorded["size"]), str(recorded["sha256"])
        except (ValueError, KeyError, TypeError):
            return [f"unreadable sidecar {sidecar}"]
    problems = _mismatches(remote, size, None)  # size first: it costs no read
    if recorded is not None and size != recorded_size:
        problems.append(f"size {size} bytes, but {recorded_size} were downloaded")
    if problems or (remote.sha256 is None and recorded is None):
        return problems
    sha256 = file_sha256(path)
    problems = _mismatches(remote, size, sha256)
    if recorded is not None and sha256 != recorded_sha256:
        problems.append(f"sha256 {sha256}, but {recorded_sha256} was downloaded")
    return problems


def _network_error(remote: RemoteFile, path: Path, reason: str) -> DownloadError:
    """A DownloadError saying which URL failed, why, and how to put the file in place by hand."""
    return DownloadError(
        f"could not download {remote.url}: {reason}.\n"
        f"To install it by hand, download {remote.url} on a machine with internet access and copy it "
        f"to {path} (or pass --options/--weights, or use from_files, to load files from elsewhere)."
    )


def _download(remote: RemoteFile, path: Path, *, progress: bool, timeout: float) -> tuple[str, int]:
    """Stream ``remote.url`` into ``path`` atomically, checking it; return its (sha256, size)."""
    request = urllib.request.Request(remote.url, headers={"User-Agent": "elmo"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        raise _network_error(remote, path, f"HTTP {e.code} {e.reason}") from e
    except urllib.error.URLError as e:
        raise _network_error(remote, path, str(e.reason)) from e
    except (OSError, http.client.HTTPException) as e:  # timeouts, resets
        raise _network_error(remote, path, str(e) or type(e).__name__) from e

    with response:
        header = response.headers.get("Content-Length")
        length = int(header) if header and header.isdigit() else None
        if length is not None and remote.size is not None and length != remote.size:
            raise DownloadError(
                f"{remote.url} is not the expected file: expected size {remote.size} bytes, "
                f"the server announces {length}; nothing was downloaded"
            )
        digest = hashlib.sha256()
        size = 0
        total = length if length is not None else remote.size
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
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
            if length is not None and size < length:
                raise _network_error(remote, path, f"the download ended after {size} of {length} bytes")
            sha256 = digest.hexdigest()
            problems = _mismatches(remote, size, sha256)
            if problems:
                raise DownloadError(f"{remote.url} is not the expected file: {'; '.join(problems)}")
    return sha256, size
