"""fetch() against a local HTTP server serving the fixture options.json and weights."""

import hashlib
import json
import re
import shutil
import socket
from pathlib import Path

import pytest

from conftest import serve_directory
from elmo.download import DownloadError, RemoteFile, default_cache_dir, fetch, file_sha256

FIXTURES = Path(__file__).parent / "fixtures" / "allennlp-elmo"
FILES = ("options.json", "lm_weights.hdf5")


@pytest.fixture
def server(tmp_path):
    """Yield (base_url, requests list, served directory); shut down afterwards."""
    served = tmp_path / "served"
    served.mkdir()
    for name in FILES:
        shutil.copy(FIXTURES / name, served / name)
    with serve_directory(served) as (base, requests):
        yield base, requests, served


def remote_for(base: str, name: str, **overrides) -> RemoteFile:
    data = (FIXTURES / name).read_bytes()
    fields = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), **overrides}
    return RemoteFile(url=f"{base}/{name}", filename=name, **fields)


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


@pytest.mark.parametrize("name", FILES)
def test_fetch_downloads_and_writes_sidecar(server, tmp_path, name):
    base, requests, _ = server
    cache = tmp_path / "cache"
    remote = remote_for(base, name)
    path = fetch(remote, cache, progress=False)
    assert path == cache / name
    assert path.read_bytes() == (FIXTURES / name).read_bytes()
    assert requests == [f"/{name}"]
    sidecar = json.loads((cache / f"{name}.sha256").read_text())
    assert sidecar == {"sha256": remote.sha256, "size": remote.size, "url": remote.url}
    assert leftovers(cache) == sorted([name, f"{name}.sha256"])


def test_second_fetch_uses_cache(server, tmp_path):
    base, requests, served = server
    cache = tmp_path / "cache"
    remote = remote_for(base, "lm_weights.hdf5")
    first = fetch(remote, cache, progress=False)
    (served / "lm_weights.hdf5").unlink()  # a second request would now 404
    assert fetch(remote, cache, progress=False) == first
    assert len(requests) == 1


def test_wrong_sha256_raises_and_leaves_nothing(server, tmp_path):
    base, _, _ = server
    cache = tmp_path / "cache"
    remote = remote_for(base, "lm_weights.hdf5", sha256="0" * 64)
    with pytest.raises(DownloadError) as info:
        fetch(remote, cache, progress=False)
    message = str(info.value)
    assert remote.url in message
    assert "0" * 64 in message and file_sha256(FIXTURES / "lm_weights.hdf5") in message
    assert leftovers(cache) == []  # neither the file, a sidecar, nor a *.tmp


def test_wrong_size_raises(server, tmp_path):
    base, _, _ = server
    cache = tmp_path / "cache"
    real_size = (FIXTURES / "options.json").stat().st_size
    remote = remote_for(base, "options.json", size=real_size + 1)
    with pytest.raises(DownloadError, match=rf"{real_size}.*{real_size + 1}|{real_size + 1}.*{real_size}"):
        fetch(remote, cache, progress=False)
    assert leftovers(cache) == []


@pytest.mark.parametrize("damage", ["truncate", "overwrite"])
def test_corrupted_cache_is_downloaded_again(server, tmp_path, damage):
    base, requests, _ = server
    cache = tmp_path / "cache"
    original = (FIXTURES / "lm_weights.hdf5").read_bytes()
    # unknown size/sha256: only the sidecar can tell that the cached file was damaged
    remote = remote_for(base, "lm_weights.hdf5", size=None, sha256=None)
    path = fetch(remote, cache, progress=False)
    if damage == "truncate":
        path.write_bytes(original[:1000])
    else:
        path.write_bytes(b"\0" * 100 + original[100:])  # same size, different bytes
    with pytest.warns(UserWarning, match="damaged"):
        again = fetch(remote, cache, progress=False)
    assert again.read_bytes() == original
    assert len(requests) == 2


def test_unknown_size_and_sha256(server, tmp_path):
    base, _, _ = server
    cache = tmp_path / "cache"
    remote = RemoteFile(url=f"{base}/options.json", filename="options.json")
    path = fetch(remote, cache, progress=False)
    data = (FIXTURES / "options.json").read_bytes()
    assert path.read_bytes() == data
    sidecar = json.loads((cache / "options.json.sha256").read_text())
    assert sidecar["sha256"] == hashlib.sha256(data).hexdigest()
    assert sidecar["size"] == len(data)


def test_file_placed_by_hand_is_used(server, tmp_path):
    base, requests, _ = server
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(FIXTURES / "options.json", cache / "options.json")  # no sidecar
    assert fetch(remote_for(base, "options.json"), cache, progress=False) == cache / "options.json"
    assert requests == []


def test_unreachable_server_explains_manual_install(tmp_path):
    with socket.socket() as s:  # a port that nothing listens on any more
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = tmp_path / "cache"
    remote = RemoteFile(url=f"http://127.0.0.1:{port}/lm_weights.hdf5", filename="lm_weights.hdf5")
    with pytest.raises(DownloadError) as info:
        fetch(remote, cache, progress=False, timeout=2)
    message = str(info.value)
    assert f"could not download {remote.url}" in message
    assert f"copy it to {cache / 'lm_weights.hdf5'}" in message
    assert "--options/--weights" in message
    assert leftovers(cache) == []


def test_http_404(server, tmp_path):
    base, _, _ = server
    remote = RemoteFile(url=f"{base}/missing.hdf5", filename="missing.hdf5")
    with pytest.raises(DownloadError, match=re.escape(f"could not download {remote.url}: HTTP 404")):
        fetch(remote, tmp_path / "cache", progress=False)
    assert leftovers(tmp_path / "cache") == []


def test_stream_ending_early(server, tmp_path):
    base, _, _ = server
    cache = tmp_path / "cache"
    remote = RemoteFile(url=f"{base}/truncated", filename="truncated.bin")
    with pytest.raises(DownloadError, match="ended after 10 of 1000 bytes"):
        fetch(remote, cache, progress=False)
    assert leftovers(cache) == []


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "elmo-cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "elmo-cache"
    monkeypatch.delenv("ELMO_CACHE")
    assert default_cache_dir() == tmp_path / "xdg" / "elmo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "elmo"
