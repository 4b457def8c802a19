"""``elmo serve`` on real loopback servers (uvicorn on an ephemeral port of 127.0.0.1): every
answer equals :class:`Embedder`'s for that input alone, whatever else is in its batch, bit for
bit on this machine; the official ``openai`` client works unchanged; every refusal names its
field or limit; a failing batch fails only its own requests; a model process that dies fails its
batch with 503s and is replaced; SIGTERM lets the request in flight finish. The model runs in a
process of its own (``elmo serve``'s way, :class:`ProcessModel`) or, handed an :class:`Embedder`,
on a thread of the test's process; the tests that concern it run both. Skipped without the ``[serve]`` extra (``pip install -e ".[serve]"``; CI installs it
through the test extra)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import ALLENNLP, FIXTURE_MODEL_ARGS, corpus, load_fixture_model

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install -e '.[serve]'")
uvicorn = pytest.importorskip("uvicorn", reason="the [serve] extra is not installed: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="httpx (the test extra) is not installed")

from elmo import Embedder, load_model  # noqa: E402
from elmo.cli.main import main  # noqa: E402
from elmo.serve.app import create_app  # noqa: E402
from elmo.serve.batching import Batcher, ServerClosed, batch_tokens  # noqa: E402
from elmo.serve.http import Server  # noqa: E402
from elmo.serve.protocol import Limits  # noqa: E402
from elmo.serve.worker import ProcessModel, WorkerSpec  # noqa: E402

FIXTURE_SOURCE = [str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")]


def worker_for(source, **spec):
    """A started model process; the same thread count as this process, whose Embedder is the
    reference (the bits are promised for one thread count, docs/state.md)."""
    return ProcessModel(WorkerSpec(source=source, threads=torch.get_num_threads(), **spec)).start()


@contextlib.contextmanager
def serving_config(config):
    """uvicorn's ``config`` served in a thread, on a free port of 127.0.0.1: yields the base URL
    and the server once the app has started (model warm), stops the server after."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = Server(config)  # elmo serve's, stopped by should_exit from this thread
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@contextlib.contextmanager
def serving(app):
    """``app`` on uvicorn in a thread (:func:`serving_config`): yields the base URL."""
    with serving_config(uvicorn.Config(app, log_config=None, log_level="warning", lifespan="on")) as (url, _):
        yield url


@pytest.fixture(scope="module")
def fixture_model():
    return load_fixture_model("allennlp")


@pytest.fixture(scope="module")
def alone(fixture_model):
    """The reference: the fixture model's Embedder, given one input at a time."""
    return Embedder(fixture_model)


@pytest.fixture(scope="module")
def url(fixture_model):
    app = create_app(Embedder(fixture_model), model_name="fixture",
                     limits=Limits(max_input_tokens=40, max_inputs=8, max_request_tokens=100, max_body_bytes=4000))
    with serving(app) as base:
        yield base


def post(base, path, body, **kwargs):
    return httpx.post(base + path, content=json.dumps(body) if not isinstance(body, bytes) else body, timeout=60,
                      **kwargs)


def as_f32(value):
    return np.asarray(value, dtype=np.float32)


# ------------------------------------------------------------------------------ the numbers
@pytest.mark.parametrize("layers", ["all", "top", "average", 1])
def test_embed_all_gives_what_embedder_gives(url, alone, layers):
    inputs = ["The bank raised rates .", ["naïve", "café", "Zürich", "東京"], "  several   spaces\there ", ""]
    response = post(url, "/embed_all", {"inputs": inputs, "layers": layers})
    assert response.status_code == 200, response.text
    answers = response.json()
    assert len(answers) == len(inputs)
    for text, answer in zip(inputs, answers):
        want = alone.embed_sentence(text, layers=layers)
        got = as_f32(answer).reshape(want.shape)  # an empty input's [[], [], []] has no last dimension
        assert np.array_equal(got, want), text
    # A single string is one input, split on whitespace as elmo embed splits a line.
    one = post(url, "/embed_all", {"inputs": "the cat sat", "layers": layers}).json()
    assert len(one) == 1 and np.array_equal(as_f32(one[0]), alone.embed_sentence("the cat sat", layers=layers))


def test_pooled_vectors_are_the_documented_pooling(url, alone):
    texts = ["The bank raised rates .", "We sat on the river bank ."]
    average = [alone.embed_sentence(t, layers="average") for t in texts]
    top = [alone.embed_sentence(t, layers="top") for t in texts]
    tei = post(url, "/embed", {"inputs": texts, "normalize": False}).json()
    openai = post(url, "/v1/embeddings", {"input": texts, "model": "anything"}).json()
    for i, want in enumerate(average):
        assert np.array_equal(as_f32(tei[i]), want.mean(axis=0))  # the default: mean of the layers' average
        assert np.array_equal(as_f32(openai["data"][i]["embedding"]), want.mean(axis=0))
        assert openai["data"][i]["index"] == i and openai["data"][i]["object"] == "embedding"
    assert openai["model"] == "fixture" and openai["object"] == "list"
    assert openai["usage"] == {"prompt_tokens": 12, "total_tokens": 12}
    # TEI normalizes by default; other layers and poolings on request.
    unit = post(url, "/embed", {"inputs": texts[0]}).json()[0]
    want = average[0].mean(axis=0)
    np.testing.assert_allclose(unit, want / np.linalg.norm(want), rtol=1e-6)
    assert abs(np.linalg.norm(unit) - 1) < 1e-6
    maxed = post(url, "/embed", {"inputs": texts, "layers": "top", "pooling": "max", "normalize": False}).json()
    assert all(np.array_equal(as_f32(m), t.max(axis=0)) for m, t in zip(maxed, top))
    layer0 = post(url, "/v1/embeddings", {"input": texts[1], "layers": 0}).json()["data"][0]["embedding"]
    assert np.array_equal(as_f32(layer0), alone.embed_sentence(texts[1], layers=0).mean(axis=0))
    b64 = post(url, "/v1/embeddings", {"input": texts, "encoding_format": "base64"}).json()
    for i, want in enumerate(average):
        assert np.array_equal(np.frombuffer(base64.b64decode(b64["data"][i]["embedding"]), dtype="<f4"),
                              want.mean(axis=0))


def test_the_openai_client_works_unchanged(url, alone):
    openai = pytest.importorskip("openai", reason="the openai client (test extra) is not installed")
    client = openai.OpenAI(base_url=url + "/v1", api_key="not-needed", max_retries=0)
    texts = ["The bank raised rates .", "We sat on the river bank .", "ELMo"]
    want = [alone.embed_sentence(t, layers="average").mean(axis=0) for t in texts]
    # Not told, the client asks for base64 and decodes it; told "base64", it hands the text over.
    for encoding in (openai.NOT_GIVEN, "float", "base64"):
        result = client.embeddings.create(model="elmo", input=texts, encoding_format=encoding)
        assert [d.index for d in result.data] == [0, 1, 2] and result.model == "fixture"
        assert result.usage.prompt_tokens == result.usage.total_tokens == 13
        for datum, vector in zip(result.data, want):
            got = datum.embedding
            if encoding == "base64":
                got = np.frombuffer(base64.b64decode(got), dtype="<f4")
            assert np.array_equal(as_f32(got), vector)
    single = client.embeddings.create(model="elmo", input="ELMo")
    assert np.array_equal(as_f32(single.data[0].embedding), want[2])
    with pytest.raises(openai.APIStatusError) as refused:
        client.embeddings.create(model="elmo", input="x " * 41)
    assert refused.value.status_code == 413 and "max_input_tokens" in str(refused.value)


def sentences_of_many_lengths(n):
    lines = [line for line in corpus(4 * n, seed=47, longest=30) if line.strip()]
    return list(dict.fromkeys(lines))[:n]


@pytest.mark.exactness
@pytest.mark.parametrize("model, runner", [("fixture", "thread"), ("fixture", "process"), ("default", "process")])
def test_concurrency_does_not_change_a_number(fixture_model, model, runner):
    """Many callers at once, batched together (checked in /metrics), each get the vectors of
    their sentence embedded alone, to the bit, whether the model runs in this process or in a
    process of its own (its arrays sent back as bytes)."""
    bilm = fixture_model if model == "fixture" else load_model()
    alone = Embedder(bilm)
    texts = sentences_of_many_lengths(24)
    want = [alone.embed_sentence(t) for t in texts]
    if runner == "thread":
        served = Embedder(bilm)
    else:
        # Not started: create_app starts it.
        served = ProcessModel(WorkerSpec(source=FIXTURE_SOURCE if model == "fixture" else None,
                                         threads=torch.get_num_threads(), max_batch_tokens=200))
    # A long wait, so that concurrent requests surely share batches; a budget that splits them.
    app = create_app(served, max_wait_ms=150, max_batch_tokens=200, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        def ask(i):
            return i, client.post("/embed_all", json={"inputs": [texts[i]] if i % 2 else texts[i]})

        with ThreadPoolExecutor(len(texts)) as pool:
            answers = dict(pool.map(ask, range(len(texts))))
        metrics = client.get("/metrics").text
    for i, text in enumerate(texts):
        assert answers[i].status_code == 200, answers[i].text
        assert np.array_equal(as_f32(answers[i].json()[0]).reshape(want[i].shape), want[i]), text
    batches = metric(metrics, "elmo_batch_requests_count")
    assert metric(metrics, "elmo_batch_requests_sum") == len(texts) and 1 < batches < len(texts), metrics
    assert metric(metrics, "elmo_inputs_total") == len(texts)
    assert metric(metrics, "elmo_tokens_total") == sum(len(t.split()) for t in texts)


def metric(text: str, name: str) -> float:
    """The value of an unlabelled series in Prometheus' text format."""
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


# ------------------------------------------------------------------------------ refusals
REFUSALS = [
    # (path, body, status, field, limit)
    ("/embed_all", {"inputs": "x " * 41}, 413, "inputs", "max_input_tokens"),
    ("/embed_all", {"inputs": ["a"] * 9}, 413, "inputs", "max_inputs"),
    ("/embed_all", {"inputs": ["x " * 40, "x " * 40, "x " * 40]}, 413, "inputs", "max_request_tokens"),
    ("/embed", {"inputs": ["fine", "x " * 41]}, 413, "inputs[1]", "max_input_tokens"),
    ("/v1/embeddings", {"input": ["a"] * 9}, 413, "input", "max_inputs"),
    ("/v1/embeddings", {"input": "x " * 41}, 413, "input", "max_input_tokens"),
    ("/embed_all", {"input": "a"}, 422, "input", None),  # TEI's field is inputs
    ("/embed_all", {"inputs": "a", "layers": "middle"}, 422, "layers", None),
    ("/embed_all", {"inputs": "a", "layers": 3}, 422, "layers", None),
    ("/embed_all", {"inputs": "a", "layers": True}, 422, "layers", None),
    ("/embed", {"inputs": "a", "layers": "all"}, 422, "layers", None),
    ("/embed_all", {"inputs": []}, 422, "inputs", None),
    ("/embed_all", {}, 422, "inputs", None),
    ("/embed_all", {"inputs": 7}, 422, "inputs", None),
    ("/embed_all", {"inputs": ["a", {"text": "b"}]}, 422, "inputs[1]", None),
    ("/embed_all", {"inputs": ["a", ["b", 3]]}, 422, "inputs[1]", None),
    ("/v1/embeddings", {"input": [101, 2023]}, 422, "input[0]", None),
    ("/v1/embeddings", {"input": [[101, 2023]]}, 422, "input[0]", None),
    ("/v1/embeddings", {"input": "  "}, 422, "input", None),
    ("/embed", {"inputs": ["a", ""]}, 422, "inputs[1]", None),
    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}, 422, "encoding_format", None),
    ("/v1/embeddings", {"input": "a", "dimensions": 8}, 422, "dimensions", None),
    ("/v1/embeddings", {"input": "a", "model": 3}, 422, "model", None),
    ("/embed", {"inputs": "a", "pooling": "cls"}, 422, "pooling", None),
    ("/embed", {"inputs": "a", "normalize": "yes"}, 422, "normalize", None),
    ("/embed", {"inputs": "a", "truncate": True, "truncation_direction": "Middle"}, 422, "truncation_direction", None),
    ("/embed", {"inputs": "a", "prompt_name": "query"}, 422, "prompt_name", None),
    ("/embed_all", ["a"], 422, "body", None),
]


@pytest.mark.parametrize("path, body, status, field, limit", REFUSALS)
def test_every_refusal_names_its_field_and_limit(url, path, body, status, field, limit):
    response = post(url, path, body)
    assert response.status_code == status, response.text
    answer = response.json()
    if path.startswith("/v1/"):  # OpenAI's shape
        error = answer["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == field and error["code"] == limit
        message = error["message"]
    else:  # text-embeddings-inference's shape
        assert answer["error_type"] == "Validation" and answer.get("field") == field and answer.get("limit") == limit
        message = answer["error"]
    assert message.startswith(field) and "\n" not in message
    if limit:
        assert limit in message


def test_malformed_json_and_bodies_over_the_limit(url):
    bad = post(url, "/embed", b'{"inputs": "a",')
    assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"] and "byte 15" in bad.json()["error"]
    assert post(url, "/v1/embeddings", b"\xff\xfe").status_code == 400
    big = {"inputs": "a", "pad": "x" * 5000}
    declared = post(url, "/embed_all", big)
    assert declared.status_code == 413 and declared.json()["limit"] == "max_body_bytes"

    def chunks():  # no Content-Length: refused while it arrives
        for _ in range(10):
            yield b" " * 1000

    streamed = httpx.post(url + "/v1/embeddings", content=chunks(), timeout=60)
    assert streamed.status_code == 413 and streamed.json()["error"]["code"] == "max_body_bytes"
    assert post(url, "/embed", {"inputs": "a", "inputz": "b"}).json()["field"] == "inputz"
    missing = httpx.get(url + "/embeddings")
    assert missing.status_code == 404 and "/v1/embeddings" in missing.json()["error"]
    assert httpx.get(url + "/embed").status_code == 405
    assert httpx.get(url + "/health").json() == {"status": "ok"}  # still serving


def test_truncate_cuts_inputs_instead_of_refusing(url, alone):
    tokens = [f"w{i}" for i in range(50)]
    for direction, kept in (("Right", tokens[:40]), ("Left", tokens[-40:])):
        answer = post(url, "/embed_all", {"inputs": [tokens], "truncate": True, "truncation_direction": direction,
                                          "layers": "top"}).json()
        assert np.array_equal(as_f32(answer[0]), alone.embed_sentence(kept, layers="top"))


def test_info_health_metrics_and_access_log(url, caplog):
    info = httpx.get(url + "/info").json()
    assert info["model"] == "fixture" and info["layers"] == 3 and info["dimensions"] == 32
    assert info["precision"] == "float32" and info["state"] == "warm" and info["version"]
    assert info["limits"]["max_inputs"] == 8 and info["pooling"]["default"] == "mean"
    with caplog.at_level(logging.INFO, logger="elmo.serve.access"):
        assert post(url, "/embed", {"inputs": ["one two", "three"]}).status_code == 200
        deadline = time.monotonic() + 5
        while not any("POST /embed" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.01)
    line = next(r.getMessage() for r in caplog.records if "POST /embed" in r.getMessage())
    assert re.fullmatch(r'127\.0\.0\.1:\d+ "POST /embed" 200 [\d.]+ ms inputs=2 tokens=3', line), line
    text = httpx.get(url + "/metrics").text
    for series in ("elmo_requests_total", "elmo_request_seconds_bucket", "elmo_batch_sentences_bucket",
                   "elmo_batch_tokens_bucket", "elmo_queue_seconds_bucket", "elmo_batch_tokens_per_second",
                   "elmo_tokens_total", "elmo_queued_requests"):
        assert series in text, series
    assert re.search(r'elmo_requests_total\{endpoint="/embed",status="200"\} [1-9]', text)


# ------------------------------------------------------------------------------ failures
@pytest.mark.parametrize("runner", ["thread", "process"])
def test_a_failing_batch_fails_only_its_own_requests(fixture_model, alone, runner):
    if runner == "thread":
        embedder = Embedder(fixture_model)
        real = embedder.embed_sentences

        def fragile(sentences, *args, **kwargs):
            if any("POISON" in s for s in sentences):
                raise RuntimeError("the model broke on POISON")
            return real(sentences, *args, **kwargs)

        embedder.embed_sentences = fragile  # on this instance only
        model = embedder
    else:  # the same failure, raised in the model's process (tests/serve_faults.py)
        model = worker_for(FIXTURE_SOURCE, factory="serve_faults:fragile_embedder")
    app = create_app(model, max_wait_ms=300, access_log=False)
    texts = ["the cat sat", "a POISON pill", "we sat on the bank", "rates rose"]
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        with ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(lambda t: client.post("/embed_all", json={"inputs": t, "layers": "top"}), texts))
        after = client.post("/embed_all", json={"inputs": "after the failure", "layers": "top"})
        metrics = client.get("/metrics").text
    assert metric(metrics, "elmo_batch_requests_sum") >= 4 and metric(metrics, "elmo_failed_requests_total") == 1
    for text, answer in zip(texts, answers):
        if "POISON" in text:
            assert answer.status_code == 500
            assert answer.json()["error"] == "embedding failed: RuntimeError: the model broke on POISON"
        else:
            assert answer.status_code == 200
            assert np.array_equal(as_f32(answer.json()[0]), alone.embed_sentence(text, layers="top"))
    assert after.status_code == 200


@pytest.mark.parametrize("runner", ["thread", "process"])
def test_an_input_whose_vectors_overflow_is_a_422_naming_it_on_every_endpoint(alone, runner, monkeypatch):
    """Vectors that come out NaN for one input (weights that overflow float32 on it) were a 500,
    "embedding failed": now a 422 naming that input's field, in the model's own process as in
    this one, and the other inputs' requests are answered as before."""
    if runner == "thread":
        from serve_faults import overflowing_embedder

        from elmo.inference.runtime import Runtime

        monkeypatch.setattr(Runtime, "run_batch", Runtime.run_batch)  # undone after the test
        model = overflowing_embedder(WorkerSpec(source=FIXTURE_SOURCE))
    else:
        model = worker_for(FIXTURE_SOURCE, factory="serve_faults:overflowing_embedder")
    app = create_app(model, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        for path, field in (("/embed_all", "inputs"), ("/embed", "inputs"), ("/v1/embeddings", "input")):
            for inputs, named in (("an OVERFLOW here", field), (["the cat", "an OVERFLOW here"], f"{field}[1]")):
                answer = client.post(path, json={field: inputs})
                assert answer.status_code == 422, (path, answer.text)
                message = answer.text
                assert f"{named}: the model's vectors for this input hold NaN or infinite values" in message, message
        fine = client.post("/embed_all", json={"inputs": "the cat sat", "layers": "top"})
    assert fine.status_code == 200
    assert np.array_equal(as_f32(fine.json()[0]), alone.embed_sentence("the cat sat", layers="top"))


def test_a_dead_model_process_gives_503s_and_is_replaced(alone, monkeypatch):
    """The model's process is killed (SIGKILL) in the middle of a batch: that batch's requests
    get a 503 saying so, /health is 503 until a new process is warm, then the answers are right
    again. If no new process will start, everything is 503 and the server is told to exit."""
    fatal = []
    worker = worker_for(FIXTURE_SOURCE, factory="serve_faults:fragile_embedder")
    app = create_app(worker, max_wait_ms=200, access_log=False, on_fatal=fatal.append)
    first_pid = worker.pid
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        with ThreadPoolExecutor(2) as pool:
            crashed, neighbour = pool.map(lambda t: client.post("/embed_all", json={"inputs": t, "layers": "top"}),
                                          ["CRASH here", "an innocent neighbour"])
        lost = "the model worker died (killed by SIGKILL) while it computed"
        assert crashed.status_code == 503 and crashed.json()["error"].startswith(lost), crashed.text
        # The neighbour is lost with the process if it shared the batch; if it came later, it
        # waited in the queue for the new process and got its vector.
        if neighbour.status_code == 503:
            assert neighbour.json()["error"].startswith(lost), neighbour.text
        else:
            assert neighbour.status_code == 200, neighbour.text
            assert np.array_equal(as_f32(neighbour.json()[0]),
                                  alone.embed_sentence("an innocent neighbour", layers="top"))
        deadline = time.monotonic() + 120
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "no new model process"
            time.sleep(0.05)
        assert worker.pid != first_pid and not fatal
        again = client.post("/embed_all", json={"inputs": "an innocent neighbour", "layers": "top"})
        assert again.status_code == 200
        assert np.array_equal(as_f32(again.json()[0]), alone.embed_sentence("an innocent neighbour", layers="top"))
        assert metric(client.get("/metrics").text, "elmo_worker_restarts_total") == 1
        # Now no new process will start: the server gives up, loudly.
        monkeypatch.setenv("ELMO_TEST_REFUSE_START", "1")
        lost = client.post("/embed_all", json={"inputs": "CRASH again"})
        assert lost.status_code == 503
        deadline = time.monotonic() + 120
        while not fatal:
            assert time.monotonic() < deadline, "on_fatal was not called"
            time.sleep(0.05)
        health = client.get("/health")
        assert health.status_code == 503 and "could not be restarted" in health.json()["error"]
        later = client.post("/embed", json={"inputs": "too late"})
        assert later.status_code == 503 and "refuses to start" in later.json()["error"]
    assert "could not be restarted" in fatal[0] and "refuses to start" in fatal[0]


def test_batcher_budget_order_and_stop(fixture_model):
    """The batcher itself: batches stay within the token budget (a request bigger than what is
    left of it is split; only a sentence bigger than the budget runs alone), every caller gets
    its own sentences back, in order, and after stop() nothing more is taken."""
    records = []
    embedder = Embedder(fixture_model)
    alone = Embedder(fixture_model)
    requests = [[t.split() for t in corpus(k % 3 + 1, seed=k)] for k in range(30)] + [[["w"] * 60]]

    async def scenario():
        batcher = Batcher(embedder, max_batch_tokens=64, max_wait_ms=50, on_batch=records.append)
        await batcher.start(warmup=False)
        answers = await asyncio.gather(*(batcher.embed(r) for r in requests))
        await batcher.stop()
        with pytest.raises(ServerClosed, match="stopping"):
            await batcher.embed([["late"]])
        return answers

    answers = asyncio.run(scenario())
    for request, answer in zip(requests, answers):
        assert len(answer) == len(request)
        for sentence, array in zip(request, answer):
            assert np.array_equal(array, alone.embed_sentence(sentence))
    assert sum(r.sentences for r in records) == sum(len(r) for r in requests) and len(records) > 1
    for r in records:
        assert r.sentences == 1 or r.tokens + 2 * r.sentences <= 64, r
    assert batch_tokens([["a", "b"], []]) == 6
    with pytest.raises(ValueError, match="stateful policy"):
        Batcher(Embedder(fixture_model, state="stateful"))


def test_the_batcher_waits_only_for_requests_on_their_way(fixture_model):
    """A lone request does not wait ``max_wait_ms`` (here a minute); a request the server has
    begun to read (inside ``expecting``) is waited for, and shares the batch."""
    records = []

    async def scenario():
        batcher = Batcher(Embedder(fixture_model), max_wait_ms=60_000, on_batch=records.append)
        await batcher.start(warmup=False)
        started = time.perf_counter()
        await batcher.embed([["alone"]])
        alone_seconds = time.perf_counter() - started

        async def late():
            with batcher.expecting() as coming:
                await asyncio.sleep(0.2)  # its body is still arriving
                return await batcher.embed([["late", "one"]], coming)

        waiting = asyncio.create_task(late())
        await asyncio.sleep(0.05)
        together = await asyncio.gather(batcher.embed([["early"]]), waiting)
        await batcher.stop()
        return alone_seconds, together

    alone_seconds, together = asyncio.run(scenario())
    assert alone_seconds < 30, alone_seconds
    assert [r.requests for r in records] == [1, 2]
    assert [a[0].shape[1] for a in together] == [1, 2]


# ------------------------------------------------------------------------------ the command
def test_command_refusals_are_one_line(capsys):
    cases = [(["--max-wait-ms", "-1"], "--max-wait-ms: must be at least 0, got -1"),
             (["--max-inputs", "0"], "--max-inputs: must be at least 1, got 0"),
             (["--port", "70000"], "--port: expected 0 to 65535, got 70000")]
    for extra, message in cases:
        assert main(["serve", *FIXTURE_MODEL_ARGS, *extra]) == 2
        assert capsys.readouterr().err == f"elmo serve: error: {message}\n"
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        assert main(["serve", *FIXTURE_MODEL_ARGS, "--port", str(port)]) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert f"--port {port}: cannot listen there" in err and len(err.strip().splitlines()) == 1


def test_a_model_that_cannot_load_is_a_one_line_error(tmp_path, capsys):
    """The model loads in the worker process; its error is still the command's one line."""
    missing = tmp_path / "no-such-model"
    assert main(["serve", "--model", str(missing), "--port", "0"]) == 2
    err = capsys.readouterr().err
    loading, error = err.strip().splitlines()  # nothing else: no traceback from either process
    assert loading.startswith("elmo serve: loading"), err
    assert error.startswith(f"elmo serve: error: {missing}: neither a model name"), err


def test_sigterm_finishes_the_request_in_flight_then_exits(tmp_path, alone):
    """A real ``elmo serve`` process: a request waiting in the queue when SIGTERM comes is
    answered, new connections are refused, and the process ends."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "elmo.cli.main", "serve", *FIXTURE_MODEL_ARGS, "--port", "0",
                                "--max-wait-ms", "1500"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        for line in process.stderr:
            lines.append(line)
            if "ready on" in line:
                break
        base = re.search(r"ready on (http://\S+)", "".join(lines)).group(1)
        assert httpx.get(base + "/health").status_code == 200
        assert httpx.get(base + "/info").json()["worker"] == "process"
        children = f"/proc/{process.pid}/task/{process.pid}/children"  # Linux: the model's process
        workers = [int(p) for p in open(children).read().split()] if os.path.exists(children) else []
        answer = {}
        asking = threading.Thread(target=lambda: answer.update(r=httpx.post(
            base + "/embed_all", json={"inputs": "in flight at SIGTERM", "layers": "top"}, timeout=30)))
        asking.start()
        time.sleep(0.5)  # the request is queued: the batcher waits 1.5 s for company
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(httpx.ConnectError):
            httpx.get(base + "/health", timeout=5)
        asking.join(30)
        assert process.wait(30) == -signal.SIGTERM  # uvicorn ends by the signal it stopped for
        rest = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert answer["r"].status_code == 200
    assert np.array_equal(as_f32(answer["r"].json()[0]), alone.embed_sentence("in flight at SIGTERM", layers="top"))
    assert '"POST /embed_all" 200' in rest and "elmo serve: stopped" in rest and "Traceback" not in rest
    for pid in workers:  # the server stopped its model's process before it exited
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)



# ------------------------------------------------------------------------------ under load, faults and strangers
class GatedEmbedder:
    """An Embedder whose batches wait until :attr:`gate` is set (it is, to begin with, so that the
    model warms), and which records every sentence it is given: what reached the model."""

    def __init__(self, model):
        self.embedder = Embedder(model)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.gate.set()
        self.seen: list[str] = []
        real = self.embedder.embed_sentences

        def gated(sentences, *args, **kwargs):
            self.seen.extend(" ".join(s) for s in sentences)
            self.entered.set()
            assert self.gate.wait(60), "the test never opened the gate"
            return real(sentences, *args, **kwargs)

        self.embedder.embed_sentences = gated  # on this instance only

    def hold(self):
        """Batches wait from now on; forget the warm-up's sentences."""
        self.gate.clear()
        self.entered.clear()
        self.seen.clear()


def wait_for(condition, what: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def labelled(text: str, name: str, **labels) -> float:
    """The value of a labelled series in Prometheus' text format (0 if absent)."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{name}\{{{re.escape(inner)}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def raw_request(base: str, path: str, body: bytes, headers: str = "") -> socket.socket:
    """A connection that has sent ``POST path`` with ``body`` (and the Content-Length of the whole
    ``body``), for the test to read or abandon."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{headers}"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_past_max_concurrent_requests_a_429_with_retry_after(fixture_model, alone):
    """Two requests hold the model; the third embedding request is refused at once (429, in
    the endpoint's dialect, Retry-After, counted), /health still answers, and the two are
    answered once the model moves."""
    gated = GatedEmbedder(fixture_model)
    app = create_app(gated.embedder, max_concurrent_requests=2, max_wait_ms=0, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client, ThreadPoolExecutor(2) as pool:
        gated.hold()
        held = [pool.submit(client.post, "/embed_all", json={"inputs": f"held {i}", "layers": "top"})
                for i in range(2)]
        wait_for(gated.entered.is_set, "the first request did not reach the model")
        wait_for(lambda: re.search(r"^elmo_requests_in_flight 3\.0$", client.get("/metrics").text, re.MULTILINE),
                 "the second request did not arrive")  # two held, and this /metrics itself
        tei = client.post("/embed", json={"inputs": "one too many"})
        openai = client.post("/v1/embeddings", json={"input": "one too many"})
        assert client.get("/health").status_code == 200
        gated.gate.set()
        answers = [f.result() for f in held]
        metrics = client.get("/metrics").text
    assert tei.status_code == 429 and tei.headers["retry-after"].isdigit()
    assert tei.json()["error_type"] == "Overloaded" and tei.json()["limit"] == "max_concurrent_requests"
    assert openai.status_code == 429 and openai.json()["error"]["type"] == "rate_limit_error"
    assert openai.json()["error"]["code"] == "max_concurrent_requests"
    for i, answer in enumerate(answers):
        assert answer.status_code == 200
        assert np.array_equal(as_f32(answer.json()[0]), alone.embed_sentence(f"held {i}", layers="top"))
    assert labelled(metrics, "elmo_refused_requests_total", reason="max_concurrent_requests") == 2
    assert labelled(metrics, "elmo_requests_total", endpoint="/embed", status="429") == 1


def test_past_max_queued_tokens_a_429_and_a_big_request_alone_is_taken(fixture_model):
    gated = GatedEmbedder(fixture_model)
    app = create_app(gated.embedder, max_queued_tokens=20, max_wait_ms=0, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client, ThreadPoolExecutor(1) as pool:
        gated.hold()
        big = pool.submit(client.post, "/embed", json={"inputs": "x " * 30})  # 32 > 20, but alone: taken
        wait_for(gated.entered.is_set, "the big request did not reach the model")
        refused = client.post("/embed", json={"inputs": "a b c"})
        assert client.get("/info").json()["max_queued_tokens"] == 20
        gated.gate.set()
        assert big.result().status_code == 200
        metrics = client.get("/metrics").text
        after = client.post("/embed", json={"inputs": "a b c"})
    assert refused.status_code == 429 and refused.json()["limit"] == "max_queued_tokens"
    assert "32 tokens queued" in refused.json()["error"] and int(refused.headers["retry-after"]) >= 1
    assert labelled(metrics, "elmo_refused_requests_total", reason="max_queued_tokens") == 1
    assert after.status_code == 200


def test_requests_of_callers_who_left_never_reach_the_model(fixture_model, alone):
    """One request holds the model; five more are sent and their connections closed; once the
    model moves, none of the five is computed (each is a one-line 499 in the log), and a live
    request is answered right."""
    gated = GatedEmbedder(fixture_model)
    app = create_app(gated.embedder, max_wait_ms=0, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client, ThreadPoolExecutor(1) as pool:
        gated.hold()
        first = pool.submit(client.post, "/embed", json={"inputs": "the first one"})
        wait_for(gated.entered.is_set, "the first request did not reach the model")
        for i in range(5):
            raw_request(base, "/embed", json.dumps({"inputs": f"abandoned {i}"}).encode()).close()
        wait_for(lambda: labelled(client.get("/metrics").text, "elmo_requests_total", endpoint="/embed",
                                  status="499") == 5, "the server did not see the five callers leave")
        gated.gate.set()
        assert first.result().status_code == 200
        live = client.post("/embed", json={"inputs": "a live one", "normalize": False})
        metrics = client.get("/metrics").text
    assert live.status_code == 200
    assert np.array_equal(as_f32(live.json()[0]), alone.embed_sentence("a live one", layers="average").mean(axis=0))
    assert gated.seen == ["the first one", "a live one"], gated.seen
    abandoned = sum(labelled(metrics, "elmo_abandoned_requests_total", stage=s) for s in ("body", "queued"))
    assert abandoned == 5, metrics


def test_a_request_past_its_timeout_gets_503_and_leaves_the_queue(fixture_model):
    gated = GatedEmbedder(fixture_model)
    app = create_app(gated.embedder, request_timeout=0.5, max_wait_ms=0, access_log=False)
    with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        gated.hold()
        late = client.post("/v1/embeddings", json={"input": "stuck"})
        queued = client.post("/v1/embeddings", json={"input": "behind it"})
        gated.gate.set()
        wait_for(lambda: client.post("/embed", json={"inputs": "fine"}).status_code == 200, "no recovery")
        metrics = client.get("/metrics").text
    assert late.status_code == 503 and late.json()["error"]["code"] == "request_timeout"
    assert "request_timeout (0.5 s)" in late.json()["error"]["message"] and late.headers["retry-after"].isdigit()
    assert queued.status_code == 503
    assert "behind it" not in gated.seen  # dropped from the queue when its time ran out
    assert labelled(metrics, "elmo_refused_requests_total", reason="request_timeout") == 2


class FailingRunner:
    """A Runner around an in-thread model whose ``run`` raises what a bug would (not a crash of
    the model): on a batch holding BUG, or on every batch once :attr:`always` is set."""

    def __init__(self, embedder):
        from elmo.serve.batching import InThreadModel

        self.inner = InThreadModel(embedder)
        self.info = self.inner.info
        self.always = False

    async def warm(self):
        await self.inner.warm()

    async def run(self, requests, outputs):
        if self.always or any("BUG" in s for r in requests for s in r):
            raise KeyError("a bug in the runner")
        return await self.inner.run(requests, outputs)

    async def restart(self):
        raise RuntimeError("cannot")

    async def close(self):
        await self.inner.close()


def test_a_failing_batching_task_is_restarted_then_given_up(fixture_model, caplog):
    """An error the batching task did not expect fails only its batch (503, and the task runs
    on: /health 200); three in a row, and the server says it is broken (/health 503, on_fatal
    told, every request 503) instead of hanging."""
    fatal = []
    runner = FailingRunner(Embedder(fixture_model))
    app = create_app(runner, max_wait_ms=0, access_log=False, on_fatal=fatal.append)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        lost = client.post("/embed", json={"inputs": "a BUG here"})
        assert lost.status_code == 503 and "KeyError" in lost.json()["error"] and lost.json()["error_type"] == \
            "Unhealthy"
        assert client.get("/health").status_code == 200
        assert client.post("/embed", json={"inputs": "fine"}).status_code == 200
        runner.always = True
        for _ in range(3):
            assert client.post("/embed", json={"inputs": "doomed"}).status_code == 503
        health = client.get("/health")
        later = client.post("/embed", json={"inputs": "too late"})
    assert health.status_code == 503 and "failed 3 times in a row" in health.json()["error"]
    assert later.status_code == 503 and fatal == ["the batching task failed 3 times in a row"]
    assert any("the batching task failed (KeyError" in r.getMessage() for r in caplog.records)


def test_stop_answers_or_fails_every_request_it_took(fixture_model):
    """stop() while a batch is held in the model and another request waits: with a bound on
    the wait, both callers get ServerClosed (none hangs); without, both get their vectors."""
    async def scenario(timeout):
        gated = GatedEmbedder(fixture_model)
        gated.hold()
        batcher = Batcher(gated.embedder, max_wait_ms=0)
        await batcher.start(warmup=False)
        first = asyncio.create_task(batcher.embed([["in", "the", "model"]]))
        await asyncio.get_running_loop().run_in_executor(None, gated.entered.wait, 30)
        second = asyncio.create_task(batcher.embed([["queued"]]))
        await asyncio.sleep(0.05)
        stopping = asyncio.create_task(batcher.stop(timeout=timeout))
        if timeout is None:
            await asyncio.sleep(0.1)
            gated.gate.set()
        else:
            await asyncio.sleep(timeout + 0.2)
        outcomes = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 30)
        gated.gate.set()  # the model thread may finish now; stop() then closes it
        await asyncio.wait_for(stopping, 30)
        return outcomes

    failed = asyncio.run(scenario(0.1))
    assert all(isinstance(o, ServerClosed) for o in failed), failed
    finished = asyncio.run(scenario(None))
    assert [o[0].shape[1] for o in finished] == [3, 1]


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"inputs": "a", "layers": ' + b"9" * 5000 + b"}",
    b'{"inputs": "a", "layers": ' + b"9" * 400 + b"}",
    b'{"inputs": "a", "layers": NaN}',
    b'{"inputs": "a", "layers": -Infinity, "pooling": 1e999}',
    b'{"inputs": ["' + b"\\ud800" + b'"], "normalize": [[[[[]]]]]}',
    b'{"inputs": "a", "' + b"k" * 3000 + b'": 1}',
    b"\x00\x01\x02", b"", b"null", b'"a string"', b"1e999", b'{"inputs": "a"}{"inputs": "b"}',
], ids=lambda body: f"{len(body)}-bytes-{body[:12]!r}")
def test_hostile_bodies_get_a_one_line_refusal_never_a_500(url, body):
    for path in ("/embed", "/embed_all", "/v1/embeddings", "/", "/tokenize"):
        response = post(url, path, body)
        assert response.status_code in (400, 413, 422), (path, response.status_code, response.text[:300])
        answer = response.json()
        message = answer["error"]["message"] if path.startswith("/v1/") else answer["error"]
        assert "\n" not in message and len(message) < 400, message


def test_a_lone_surrogate_token_is_embedded_not_a_500(url):
    response = post(url, "/embed_all", b'{"inputs": [["\\ud800", "b"]], "layers": "top"}')
    assert response.status_code == 200 and np.asarray(response.json()).shape == (1, 2, 32)


def test_a_client_leaving_mid_body_is_one_log_line(url, caplog):
    with caplog.at_level(logging.INFO):
        sock = raw_request(url, "/embed", b'{"inputs": "a', headers="")  # declares 13 bytes, sends them...
        sock.close()
        host, port = url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b'{"inputs": "a')
        time.sleep(0.2)
        sock.close()  # ...this one declares 1,000 and leaves after 13
        wait_for(lambda: any("client left" in r.getMessage() for r in caplog.records), "no log line")
        assert httpx.get(url + "/health").status_code == 200
    left = [r.getMessage() for r in caplog.records if "client left" in r.getMessage()]
    assert any(re.fullmatch(r'127\.0\.0\.1:\d+ "POST /embed" 499 [\d.]+ ms client left \(13 bytes into its body\)',
                            line) for line in left), left
    assert not any(r.exc_info or "Traceback" in r.getMessage() or "Exception in ASGI" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_refused_body_reaches_urllib_as_a_refusal(url):
    """A body over max_body_bytes (here 4,000) sent whole by urllib, which reads nothing before
    it has sent everything: it receives the 413, not a broken pipe, and so does the next one on
    a server that goes on."""
    import urllib.error
    import urllib.request

    for size in (5_000, 5 * 2**20):
        data = json.dumps({"inputs": "a", "pad": "x" * size}).encode()
        request = urllib.request.Request(url + "/embed", data=data, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 413 and json.loads(refused.value.read())["limit"] == "max_body_bytes"
    assert httpx.get(url + "/health").status_code == 200


def test_a_body_that_trickles_gets_408_and_the_connection_is_closed(fixture_model):
    app = create_app(Embedder(fixture_model), request_timeout=1, access_log=False)
    with serving(app) as base:
        sock = raw_request(base, "/embed", b'{"inputs": "a"}')  # whole: answered
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        host, port = base.removeprefix("http://").split(":")
        slow = socket.create_connection((host, int(port)))
        slow.settimeout(30)
        slow.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        answer = b""
        while chunk := slow.recv(65536):  # read until the server closes
            answer += chunk
        sock.close()
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower()
    assert json.loads(content)["field"] == "body"


def test_the_api_key(fixture_model, alone):
    """With an API key, every endpoint but /health wants it as a Bearer token (401 in the
    endpoint's dialect otherwise); the openai and huggingface_hub clients send it."""
    app = create_app(Embedder(fixture_model), model_name="fixture", api_key="s3cret-key", access_log=False)
    with serving(app) as base:
        assert httpx.get(base + "/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"},
                        {"Authorization": "Basic s3cret-key"}, {"Authorization": "Bearer s3cret-key-and-more"}):
            for path in ("/embed", "/v1/embeddings", "/info", "/metrics", "/v1/models"):
                response = (httpx.post(base + path, json={"inputs": "a"}, headers=headers) if path.startswith("/e")
                            or path == "/v1/embeddings" else httpx.get(base + path, headers=headers))
                assert response.status_code == 401, (path, headers)
                assert response.headers["www-authenticate"] == "Bearer"
                assert "Authorization: Bearer" in response.text
        # A refused body is read away first: the client gets the 401 (urllib sends it whole).
        import urllib.error
        import urllib.request
        request = urllib.request.Request(base + "/embed", data=b'{"inputs": "' + b"a " * 100_000 + b'"}')
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        assert refused.value.code == 401
        ok = httpx.post(base + "/embed", json={"inputs": "a b", "normalize": False},
                        headers={"Authorization": "bearer s3cret-key"})
        assert ok.status_code == 200
        assert np.array_equal(as_f32(ok.json()[0]), alone.embed_sentence("a b", layers="average").mean(axis=0))
        openai = pytest.importorskip("openai", reason="the openai client (test extra) is not installed")
        good = openai.OpenAI(base_url=base + "/v1", api_key="s3cret-key", max_retries=0)
        assert good.embeddings.create(model="elmo", input="a b").data[0].index == 0
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base + "/v1", api_key="nope", max_retries=0).embeddings.create(model="e", input="a")
        hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub (test extra) is not installed")
        vector = hub.InferenceClient(model=base, token="s3cret-key").feature_extraction("a b", normalize=False)
        assert np.array_equal(vector[0], alone.embed_sentence("a b", layers="average").mean(axis=0))


def test_tei_clients_reach_it_unchanged(fixture_model, alone):
    """huggingface_hub's InferenceClient posts to "/" as to TEI; /tokenize answers TEI's shape;
    with embed_all_layers="top", /embed_all answers TEI's (tokens, dim); the openai client
    lists and retrieves the model."""
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub (test extra) is not installed")
    app = create_app(Embedder(fixture_model), model_name="fixture", embed_all_layers="top", access_log=False)
    with serving(app) as base:
        client = hub.InferenceClient(model=base)
        texts = ["The bank raised rates .", "naïve café"]
        got = client.feature_extraction(texts[0])  # TEI normalizes by default
        want = alone.embed_sentence(texts[0], layers="average").mean(axis=0)
        assert got.shape == (1, 32) and np.allclose(got[0], want / np.linalg.norm(want), rtol=1e-6, atol=0)
        raw = client.feature_extraction(texts, normalize=False)
        assert all(np.array_equal(raw[i], alone.embed_sentence(t, layers="average").mean(axis=0))
                   for i, t in enumerate(texts))
        tokens = httpx.post(base + "/embed_all", json={"inputs": texts[1]}).json()
        assert np.array_equal(as_f32(tokens[0]), alone.embed_sentence(texts[1], layers="top"))
        every = httpx.post(base + "/embed_all", json={"inputs": texts[1], "layers": "all"}).json()
        assert as_f32(every[0]).shape == (3, 2, 32)
        tokenized = httpx.post(base + "/tokenize", json={"inputs": ["  naïve  café", ""]}).json()
        assert tokenized == [
            [{"id": None, "text": "<S>", "special": True, "start": None, "stop": None},
             {"id": None, "text": "naïve", "special": False, "start": 2, "stop": 7},
             {"id": None, "text": "café", "special": False, "start": 9, "stop": 13},
             {"id": None, "text": "</S>", "special": True, "start": None, "stop": None}],
            [{"id": None, "text": "<S>", "special": True, "start": None, "stop": None},
             {"id": None, "text": "</S>", "special": True, "start": None, "stop": None}]]
        plain = httpx.post(base + "/tokenize", json={"inputs": "a b", "add_special_tokens": False}).json()
        assert [t["text"] for t in plain[0]] == ["a", "b"]
        assert httpx.post(base + "/tokenize", json={"inputs": [["a"]]}).status_code == 422
        openai = pytest.importorskip("openai", reason="the openai client (test extra) is not installed")
        models = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0).models
        assert [m.id for m in models.list().data] == ["fixture"] and models.retrieve("fixture").id == "fixture"
        with pytest.raises(openai.NotFoundError):
            models.retrieve("gpt-4")
    with pytest.raises(ValueError, match="embed_all_layers"):
        create_app(Embedder(fixture_model), embed_all_layers="middle")


def test_a_big_answer_is_written_in_pieces_and_equals_the_whole(url, alone, monkeypatch):
    import elmo.serve.app as served
    from elmo.serve.protocol import as_json_array, dumps, json_pieces

    rng = np.random.default_rng(0)
    values = [[rng.standard_normal((3, 50, 7)).astype("f4"), np.zeros((3, 0, 7), "f4")],
              {"data": [{"embedding": rng.standard_normal(9).astype("f4"), "index": i} for i in range(20)], "n": 1}]
    for value in values:
        whole = dumps(served.as_json(value))
        for numbers in (1, 5, 64, 10**6):
            assert b"".join(json_pieces(value, numbers)) == whole
    assert as_json_array(values[0][0]).dtype == np.float64
    monkeypatch.setattr(served, "STREAM_NUMBERS", 50)
    monkeypatch.setattr(served, "STREAM_CHUNK_BYTES", 1000)
    texts = ["The bank raised rates .", "naïve café"]
    response = post(url, "/embed_all", {"inputs": texts})
    assert response.status_code == 200 and "content-length" not in response.headers
    assert response.headers["transfer-encoding"] == "chunked"
    for text, answer in zip(texts, response.json()):
        assert np.array_equal(as_f32(answer), alone.embed_sentence(text))


def test_only_what_the_endpoint_returns_leaves_the_model_process(alone):
    """The model's process pools: /embed's request comes back as one vector per input."""
    from elmo.serve.protocol import Output

    worker = worker_for(FIXTURE_SOURCE)
    try:
        text = "We sat on the river bank .".split()
        (vectors,), (tops,) = (worker.compute([[text]], [Output("average", "mean", False)]),
                               worker.compute([[text]], [Output("top")]))
    finally:
        worker.stop()
    assert vectors[0].shape == (32,) and np.array_equal(vectors[0], alone.embed_sentence(text, layers="average")
                                                        .mean(axis=0))
    assert np.array_equal(tops[0], alone.embed_sentence(text, layers="top"))


def test_new_command_options_are_checked(capsys):
    cases = [(["--max-concurrent-requests", "0"], "--max-concurrent-requests: must be at least 1, got 0"),
             (["--max-queued-tokens", "-5"], "--max-queued-tokens: must be at least 1, got -5"),
             (["--request-timeout", "nan"], "--request-timeout: "),
             (["--api-key", " "], "--api-key: empty, or with spaces around it")]
    for extra, message in cases:
        assert main(["serve", *FIXTURE_MODEL_ARGS, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"elmo serve: error: {message}") and len(err.strip().splitlines()) == 1, err
    from elmo.cli.serve import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")


def test_a_big_request_is_computed_a_batch_at_a_time_with_others_between(fixture_model, alone):
    """A request of many sentences, over the batch budget, is split into batches; a request
    that comes while its first part is computed goes into the next batch, not after the whole
    of it; every sentence's vectors are still those of Embedder alone."""
    records = []
    big = [[f"w{i}", f"v{i}", "and", "more"] for i in range(12)]  # 6 tokens each with boundaries

    async def scenario():
        gated = GatedEmbedder(fixture_model)
        gated.hold()
        batcher = Batcher(gated.embedder, max_batch_tokens=24, max_wait_ms=0, on_batch=records.append)
        await batcher.start(warmup=False)
        whole = asyncio.create_task(batcher.embed(big))
        await asyncio.get_running_loop().run_in_executor(None, gated.entered.wait, 30)
        small = asyncio.create_task(batcher.embed([["a", "small", "one"]]))
        await asyncio.sleep(0.05)
        gated.gate.set()
        answers = await asyncio.gather(whole, small)
        await batcher.stop()
        return gated.seen, answers

    seen, (whole, small) = asyncio.run(scenario())
    assert seen.index("a small one") == 4, seen  # after the first part (4 sentences), before the rest
    assert all(r.tokens + 2 * r.sentences <= 24 for r in records)
    for sentence, array in zip(big, whole):
        assert np.array_equal(array, alone.embed_sentence(sentence))
    assert np.array_equal(small[0], alone.embed_sentence(["a", "small", "one"]))
