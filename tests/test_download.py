"""fetch() against a local HTTP server serving the fixture options.json and weights."""

import contextlib
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import socket
import threading
import urllib.request
from pathlib import Path

import pytest
from conftest import serve_directory

from elmo.hub import download
from elmo.hub.download import (
    DownloadError,
    RemoteFile,
    check_url,
    default_cache_dir,
    fetch,
    file_sha256,
)

FIXTURES = Path(__file__).parent / "fixtures" / "allennlp-elmo"
FILES = ("options.json", "lm_weights.hdf5")


@pytest.fixture(autouse=True)
def allow_http(monkeypatch):
    """The local test server speaks plain http://, which fetch() refuses unless opted in."""
    monkeypatch.setenv("ELMO_ALLOW_HTTP", "1")


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


@pytest.mark.parametrize("value", [None, "", "0", "true"])
def test_plain_http_is_refused_without_opt_in(server, tmp_path, monkeypatch, value):
    base, requests, _ = server
    if value is None:
        monkeypatch.delenv("ELMO_ALLOW_HTTP")
    else:
        monkeypatch.setenv("ELMO_ALLOW_HTTP", value)
    cache = tmp_path / "cache"
    remote = remote_for(base, "options.json")
    with pytest.raises(DownloadError) as info:
        fetch(remote, cache, progress=False)
    message = str(info.value)
    assert f"refusing to download {remote.url}" in message  # 127.0.0.1 gets no exception
    assert "ELMO_ALLOW_HTTP=1" in message
    if value:
        assert repr(value) in message  # says why the setting did not count
    assert requests == []  # the server was never contacted
    assert leftovers(cache) == []


def test_cached_file_is_used_whatever_the_url(server, tmp_path, monkeypatch):
    """A verified cached file needs no network, so the http:// refusal does not get in its way."""
    base, requests, _ = server
    cache = tmp_path / "cache"
    remote = remote_for(base, "options.json")
    path = fetch(remote, cache, progress=False)
    monkeypatch.delenv("ELMO_ALLOW_HTTP")
    assert fetch(remote, cache, progress=False) == path
    assert len(requests) == 1


@pytest.mark.parametrize("url", ["ftp://example.invalid/x.hdf5", "file:///etc/passwd", "example.invalid/x"])
def test_other_schemes_are_refused(url):
    with pytest.raises(DownloadError, match=re.escape(f"refusing to download {url}")):
        check_url(url)


def test_https_url_is_accepted_and_redirect_to_http_is_refused(monkeypatch):
    monkeypatch.delenv("ELMO_ALLOW_HTTP")
    check_url("https://example.invalid/x.hdf5")
    handler = download._CheckedRedirectHandler()
    request = urllib.request.Request("https://example.invalid/x.hdf5")
    with pytest.raises(DownloadError) as info:
        handler.redirect_request(request, io.BytesIO(), 302, "Found", {}, "http://example.invalid/x.hdf5")
    message = str(info.value)
    assert "https://example.invalid/x.hdf5 redirects to http://example.invalid/x.hdf5" in message
    assert "ELMO_ALLOW_HTTP=1" in message


def test_redirects_are_followed_when_allowed(server, tmp_path):
    """The checking redirect handler still follows an allowed redirect (here http -> http, opted in)."""
    base, requests, served = server
    (served / "moved").mkdir()
    shutil.copy(FIXTURES / "options.json", served / "moved" / "options.json")
    # SimpleHTTPRequestHandler answers a folder without its slash with 301 -> /moved/.
    remote = RemoteFile(url=f"{base}/moved", filename="listing.html")
    path = fetch(remote, tmp_path / "cache", progress=False)
    assert requests == ["/moved", "/moved/"]
    assert b"options.json" in path.read_bytes()  # the directory listing the redirect led to


def _damage(path: Path, how: str) -> bytes:
    data = path.read_bytes()
    damaged = data[:1000] if how == "truncate" else b"\0" * 100 + data[100:]
    path.write_bytes(damaged)
    return damaged


@pytest.mark.parametrize("failure", ["404", "unreachable"])
def test_damaged_cache_is_kept_when_the_download_fails(server, tmp_path, failure):
    base, _, served = server
    cache = tmp_path / "cache"
    name = "lm_weights.hdf5"
    remote = remote_for(base, name, size=None, sha256=None)  # only the sidecar knows the file
    path = fetch(remote, cache, progress=False)
    sidecar_text = (cache / f"{name}.sha256").read_text()
    damaged = _damage(path, "truncate")
    if failure == "404":
        (served / name).unlink()
    else:
        with socket.socket() as s:  # a port that nothing listens on any more
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        remote = RemoteFile(url=f"http://127.0.0.1:{port}/{name}", filename=name)
    with pytest.warns(UserWarning, match="damaged"), pytest.raises(DownloadError) as info:
        fetch(remote, cache, progress=False, timeout=2)
    message = str(info.value)
    assert f"cached file {path} is damaged" in message
    assert "left in place" in message
    assert f"could not download {remote.url}" in message
    assert path.read_bytes() == damaged  # the offline user keeps what they had
    assert (cache / f"{name}.sha256").read_text() == sidecar_text
    assert leftovers(cache) == sorted([name, f"{name}.sha256"])  # no temporary left behind


@pytest.mark.parametrize("pinned", [False, True])
def test_damaged_cache_is_replaced_only_by_a_verified_copy(server, tmp_path, pinned):
    """A re-download that does not match the pin (or, unpinned, the first download's record)
    replaces nothing: the damaged file and its record stay, and the error names the sidecar."""
    base, _, served = server
    cache = tmp_path / "cache"
    name = "lm_weights.hdf5"
    remote = remote_for(base, name) if pinned else remote_for(base, name, size=None, sha256=None)
    path = fetch(remote, cache, progress=False)
    damaged = _damage(path, "overwrite")
    original = (served / name).read_bytes()
    (served / name).write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # same size, other bytes
    with pytest.warns(UserWarning, match="damaged"), pytest.raises(DownloadError) as info:
        fetch(remote, cache, progress=False)
    message = str(info.value)
    assert f"cached file {path} is damaged" in message
    assert f"{remote.url} is not the expected file" in message
    assert hashlib.sha256(original).hexdigest() in message
    if not pinned:
        assert f"recorded in {cache / (name + '.sha256')} by the first download" in message
    assert path.read_bytes() == damaged
    assert leftovers(cache) == sorted([name, f"{name}.sha256"])


def test_damaged_cache_is_replaced_atomically(server, tmp_path, monkeypatch):
    """The old file stays under its name until the verified download is renamed over it from a
    temporary file in the same folder."""
    base, _, _ = server
    cache = tmp_path / "cache"
    name = "lm_weights.hdf5"
    remote = remote_for(base, name, size=None, sha256=None)
    path = fetch(remote, cache, progress=False)
    damaged = _damage(path, "truncate")
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        if Path(dst) == path:
            replaced.append((Path(src), path.read_bytes(), Path(src).read_bytes()))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    with pytest.warns(UserWarning, match="damaged"):
        fetch(remote, cache, progress=False)
    [(src, before, new)] = replaced
    assert src.parent == cache and src.name.endswith(".tmp")
    assert before == damaged  # still there while the new copy was downloaded and checked
    assert new == (FIXTURES / name).read_bytes()
    assert path.read_bytes() == new
    assert leftovers(cache) == sorted([name, f"{name}.sha256"])


def test_missing_file_with_a_sidecar_is_held_to_the_record(server, tmp_path):
    """Trust on first use: once recorded, a file deleted from the cache must come back the same."""
    base, _, served = server
    cache = tmp_path / "cache"
    remote = remote_for(base, "options.json", size=None, sha256=None)
    path = fetch(remote, cache, progress=False)
    path.unlink()
    (served / "options.json").write_text("{}")
    with pytest.raises(DownloadError, match="by the first download") as info:
        fetch(remote, cache, progress=False)
    assert f"delete {cache / 'options.json.sha256'}" in str(info.value)
    assert leftovers(cache) == ["options.json.sha256"]
    (cache / "options.json.sha256").unlink()  # what the message says to do to accept the new file
    assert fetch(remote, cache, progress=False).read_text() == "{}"


@contextlib.contextmanager
def serve_without_length(data: bytes):
    """An HTTP/1.0 server on 127.0.0.1 that sends ``data`` with no Content-Length (the end of the
    body is the end of the connection): yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client may hang up once it has seen enough
                self.wfile.write(data)

        def log_message(self, format, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.mark.parametrize("pinned_size", [10, 3 * download.CHUNK_SIZE])
def test_pinned_size_is_enforced_without_content_length(tmp_path, pinned_size):
    data = b"x" * (2 * download.CHUNK_SIZE + 5)
    cache = tmp_path / "cache"
    with serve_without_length(data) as url:
        remote = RemoteFile(url=url, filename="file.bin", size=pinned_size)
        with pytest.raises(DownloadError) as info:
            fetch(remote, cache, progress=False)
    message = str(info.value)
    assert f"{url} is not the expected file: expected size {pinned_size} bytes" in message
    if pinned_size < len(data):
        assert "stopped" in message  # not read to the end first
    else:
        assert f"got {len(data)}" in message
    assert leftovers(cache) == []


def test_unusable_cache_folder_names_the_path(server, tmp_path):
    base, _, _ = server
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    remote = remote_for(base, "options.json")
    expected = f"could not store {remote.url} at {blocker / 'options.json'}"
    with pytest.raises(DownloadError, match=re.escape(expected)):
        fetch(remote, blocker, progress=False)


@pytest.mark.parametrize("announced", [True, False])
def test_an_unpinned_download_is_bounded_while_it_streams(tmp_path, monkeypatch, announced):
    """A URL's first download (no pinned size, no record) is held to $ELMO_MAX_ARCHIVE_BYTES, with
    or without Content-Length: one with none wrote 5.49 GB into the cache under a 10 MB bound."""
    monkeypatch.setenv("ELMO_MAX_ARCHIVE_BYTES", str(download.CHUNK_SIZE + 100))
    data = b"x" * (4 * download.CHUNK_SIZE)
    cache = tmp_path / "cache"
    if announced:
        (tmp_path / "www").mkdir()
        (tmp_path / "www" / "file.bin").write_bytes(data)
        with serve_directory(tmp_path / "www") as (base, _):
            with pytest.raises(DownloadError) as info:
                fetch(RemoteFile(url=f"{base}/file.bin", filename="file.bin"), cache, progress=False)
        assert f"the server announces {len(data):,}; nothing was downloaded" in str(info.value)
    else:
        with serve_without_length(data) as url:
            with pytest.raises(DownloadError) as info:
                fetch(RemoteFile(url=url, filename="file.bin"), cache, progress=False)
        assert "the download was stopped after" in str(info.value)
    assert f"larger than {download.CHUNK_SIZE + 100:,} bytes" in str(info.value) and "\n" not in str(info.value)
    assert leftovers(cache) == []


def test_an_unpinned_download_within_the_bound_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_MAX_ARCHIVE_BYTES", "100")
    with serve_without_length(b"y" * 100) as url:
        assert fetch(RemoteFile(url=url, filename="file.bin"), tmp_path / "cache", progress=False).read_bytes() == b"y" * 100
