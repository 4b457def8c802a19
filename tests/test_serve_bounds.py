"""``elmo serve`` bounded before the body and before the model, on real loopback servers
(127.0.0.1, ephemeral ports) configured as the command configures them (elmo.serve.http):
connections dribbling header lines, never-ending headers, lone surrogates on every endpoint,
``/tokenize`` under the same admission as the embedding endpoints and off the event loop, and
``/health`` honest within a second of the model process's death. Each test is bounded in time
and in connections."""

import contextlib
import json
import os
import signal
import socket
import threading
import time

import pytest

pytest.importorskip("uvicorn", reason="the [serve] extra is not installed: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx")
from conftest import ALLENNLP, load_fixture_model  # noqa: E402
from test_serve import serving_config  # noqa: E402

import elmo.serve.app as app_module  # noqa: E402
from elmo.inference.embed import Embedder  # noqa: E402
from elmo.serve.app import ENDPOINTS, create_app  # noqa: E402
from elmo.serve.http import GuardedH11Protocol, server_config  # noqa: E402
from elmo.serve.protocol import Limits  # noqa: E402

HEADER_SECONDS = 1.5  # the test's deadline for headers (the command's: elmo.serve.http.HEADER_SECONDS)
CAP = 40  # uvicorn's connection cap in these tests (the command's: 2 x max_concurrent_requests + 64)


class QuickHeaders(GuardedH11Protocol):
    header_seconds = HEADER_SECONDS


@contextlib.contextmanager
def serving(app, **options):
    """``app`` on uvicorn in a thread with elmo serve's HTTP settings; yields (base URL, server)."""
    config = server_config(app, log_config=None, log_level="critical", lifespan="on", http=QuickHeaders,
                           limit_concurrency=CAP, **options)
    with serving_config(config) as (url, server):
        yield url, server


@pytest.fixture(scope="module")
def app():
    return create_app(Embedder(load_fixture_model("allennlp")), model_name="fixture", access_log=False,
                      limits=Limits(max_input_tokens=40, max_inputs=8, max_request_tokens=100, max_body_bytes=4000),
                      max_concurrent_requests=1, max_queued_tokens=50)


@pytest.fixture(scope="module")
def served(app):
    with serving(app) as (base, server):
        yield base, server


def _address(base):
    host, port = base.rsplit("/", 1)[1].split(":")
    return host, int(port)


def _health(base) -> int:
    return httpx.get(base + "/health", timeout=10).status_code


def test_connections_dribbling_headers_cannot_hold_the_cap(served):
    """Twice the cap in connections that send a header line now and then: uvicorn had no header
    timeout, they held its cap and /health answered 503 as long as they stayed."""
    base, _ = served
    slow = []
    try:
        for _ in range(2 * CAP):
            s = socket.create_connection(_address(base), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        for _ in range(3):  # still dribbling: every 0.3 s a header line, never the end
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")
            assert _health(base) == 200
            time.sleep(0.3)
        # Past the deadline every one of them has been closed by the server.
        time.sleep(HEADER_SECONDS)
        closed = 0
        for s in slow:
            s.settimeout(2)
            try:
                closed += s.recv(1) == b""
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
        assert closed == len(slow)
        assert _health(base) == 200
    finally:
        for s in slow:
            s.close()


def test_never_ending_headers_are_refused_without_buffering_them(served):
    """300 MB of headers was buffered (+307 MB). h11 holds at most MAX_HEADER_BYTES: the answer
    is a 400 and the connection closed long before the client is done sending."""
    base, _ = served
    sent = 0
    with socket.create_connection(_address(base), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        chunk = b"a" * 65536
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            while sent < 64 * 1024 * 1024:
                s.sendall(chunk)
                sent += len(chunk)
        s.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            answer = s.recv(200)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer
    assert sent < 16 * 1024 * 1024, sent  # refused after about 64 KiB (the rest fills socket buffers)
    assert _health(base) == 200


def _raw_post(base, path, raw: bytes) -> httpx.Response:
    return httpx.post(base + path, content=raw, headers={"content-type": "application/json"}, timeout=30)


@pytest.mark.parametrize("path", ["/embed_all", "/embed", "/", "/v1/embeddings", "/tokenize"])
def test_a_lone_surrogate_as_a_field_name_is_a_422_naming_it(served, path):
    base, _ = served
    field = "input" if path.startswith("/v1/") else "inputs"
    response = _raw_post(base, path, b'{"\\ud800": 1, "%s": "a b"}' % field.encode())
    assert response.status_code == 422, response.text
    body = response.json()
    where = body["error"]["param"] if path.startswith("/v1/") else body["field"]
    assert where == "\\ud800"


def test_a_lone_surrogate_in_tokenize_text_is_a_422_naming_the_input(served):
    base, _ = served
    response = _raw_post(base, "/tokenize", b'{"inputs": "a \\ud800 b"}')
    assert response.status_code == 422 and response.json()["field"] == "inputs", response.text
    response = _raw_post(base, "/tokenize", b'{"inputs": ["fine", "x\\udc00"]}')
    assert response.status_code == 422 and response.json()["field"] == "inputs[1]", response.text
    assert "lone surrogate" in response.json()["error"]
    assert _raw_post(base, "/tokenize", b'{"inputs": "a b"}').status_code == 200


def test_tokenize_is_bounded_as_the_embedding_endpoints_are(served, app):
    """One 2 MB /tokenize answered 69 MB in 30 s: it was outside max_request_tokens."""
    base, _ = served
    response = httpx.post(base + "/tokenize", json={"inputs": "a " * 1_000_000}, timeout=30)
    assert response.status_code == 413 and response.json()["limit"] == "max_body_bytes", response.text
    response = httpx.post(base + "/tokenize", json={"inputs": ["a " * 30] * 5}, timeout=30)
    assert response.status_code == 413 and response.json()["limit"] == "max_request_tokens", response.text
    response = httpx.post(base + "/tokenize", json={"inputs": "a " * 41}, timeout=30)
    assert response.status_code == 413 and response.json()["limit"] == "max_input_tokens", response.text
    # max_queued_tokens: tokens taken by other requests count against it.
    with app.state.batcher.admitted(40):
        response = httpx.post(base + "/tokenize", json={"inputs": "a " * 20}, timeout=30)
    assert response.status_code == 429 and response.json()["limit"] == "max_queued_tokens", response.text
    assert "Retry-After" in response.headers


def test_tokenize_counts_under_max_concurrent_requests_and_leaves_the_loop_free(served, monkeypatch):
    """Eight big /tokenize requests at once delayed /health by 7.6 s: it ran on the event loop,
    outside --max-concurrent-requests."""
    base, _ = served
    real = app_module.tokenize_response

    def slow(texts, special):
        time.sleep(1.5)
        return real(texts, special)

    monkeypatch.setattr(app_module, "tokenize_response", slow)
    answers = []
    first = threading.Thread(target=lambda: answers.append(
        httpx.post(base + "/tokenize", json={"inputs": "a b"}, timeout=30).status_code))
    first.start()
    time.sleep(0.4)
    started = time.monotonic()
    assert _health(base) == 200
    assert time.monotonic() - started < 0.5  # the loop is free while the first one is worked on
    second = httpx.post(base + "/tokenize", json={"inputs": "a b"}, timeout=30)
    assert second.status_code == 429 and second.json()["limit"] == "max_concurrent_requests", second.text
    first.join(30)
    assert answers == [200]


def test_the_command_serves_with_the_guarded_protocol_and_its_bounds():
    """elmo serve ran uvicorn's default protocol (httptools, where installed): no header size
    bound (300 MB of headers buffered) and no header deadline."""
    from elmo.cli.main import build_parser
    from elmo.cli.serve import uvicorn_config
    from elmo.serve.http import HEADER_SECONDS, MAX_HEADER_BYTES

    args = build_parser(["serve"]).parse_args(["serve", "--max-concurrent-requests", "8"])
    config = uvicorn_config(object(), args)
    assert issubclass(config.http, GuardedH11Protocol) and config.http.header_seconds == HEADER_SECONDS
    assert config.h11_max_incomplete_event_size == MAX_HEADER_BYTES and config.limit_concurrency == 80
    assert config.timeout_keep_alive == 5


def test_a_stopping_server_closes_connections_waiting_for_headers_on_its_own_loop():
    """Stopped (``should_exit``, from this thread) with connections waiting for their headers,
    five times over, the server closes each of them and the process lives. These tests used to
    close them from their own thread while uvloop ran the server in another, a transport closed
    off its loop, and CI's pytest died of a segfault; elmo.serve.http.Server now closes them on
    its loop as it shuts down, and no function to call from elsewhere is left."""
    model = load_fixture_model("allennlp")
    for _ in range(5):  # an app serves one lifespan: one each time
        with serving(create_app(Embedder(model), model_name="fixture", access_log=False)) as (base, server):
            waiting = [socket.create_connection(_address(base), timeout=5) for _ in range(4)]
            for s in waiting[:2]:
                s.sendall(b"GET /health HTTP/1.1\r\n")  # a header line, never the end of them
            deadline = time.monotonic() + 5
            while len(getattr(server.server_state, "elmo_waiting", ())) < 4:
                assert time.monotonic() < deadline, "the connections were not seen as waiting"
                time.sleep(0.01)
        try:
            for s in waiting:  # each closed by the server: end of stream, not a timeout
                assert s.recv(1) == b""
        finally:
            for s in waiting:
                s.close()


def test_every_endpoint_is_served_by_the_guarded_protocol(served):
    base, server = served
    assert server.config.http_protocol_class is QuickHeaders and issubclass(QuickHeaders, GuardedH11Protocol)
    assert server.config.h11_max_incomplete_event_size == 64 * 1024
    for path in ENDPOINTS:
        if path in ("/health", "/info", "/metrics"):
            assert httpx.get(base + path, timeout=10).status_code == 200, path


@pytest.mark.slow  # two model processes started: about 18 s on 2 busy cores
def test_health_turns_503_within_a_second_of_the_workers_death_while_idle():
    """A model process killed while idle left /health at 200 for over 30 s: the death was found
    only by the next batch. Now the idle batcher looks every 0.25 s and restarts it."""
    from elmo.serve.worker import ProcessModel, WorkerSpec

    worker = ProcessModel(WorkerSpec(source=[str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")],
                                     threads=1)).start()
    served_app = create_app(worker, model_name="fixture", access_log=False)
    with serving(served_app) as (base, _):
        assert _health(base) == 200
        os.kill(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        while _health(base) == 200:
            assert time.monotonic() - killed < 1.5, "still 200 after the model process died"
            time.sleep(0.05)
        seen = time.monotonic() - killed
        assert seen < 1.5
        deadline = time.monotonic() + 60  # restarted, warm, and answering again
        while _health(base) != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        response = httpx.post(base + "/embed", json={"inputs": "a b"}, timeout=60)
        assert response.status_code == 200, response.text
