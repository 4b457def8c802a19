"""The HTTP service: a FastAPI app around one :class:`~elmo.serve.batching.Batcher`.

:func:`create_app` builds it for a model that runs in a process of its own
(:class:`~elmo.serve.worker.ProcessModel`, what ``elmo serve`` and :func:`load_app` use) or for an
:class:`~elmo.inference.embed.Embedder` run on a thread of this process; uvicorn serves it
(``elmo serve``), and so does Ray Serve (:mod:`elmo.integrations.ray_serve`), unchanged. The model
is warm (run once on the warm-up text) before ``GET /health`` answers 200, so that the first
request is as fast as any. Endpoints::

    GET  /health          200 {"status": "ok"} when warm; 503 while stopping, restarting the model, or broken
    GET  /info            model, layers, dimensions, precision, state policy, version, limits
    GET  /metrics         Prometheus text: requests, latency, batch sizes, queue time, tokens, refusals
    POST /embed_all       text-embeddings-inference: one (layers, tokens, dim) or (tokens, dim) array per input
    POST /embed           text-embeddings-inference: one pooled vector per input
    POST /                text-embeddings-inference's route for its clients: what /embed answers
    POST /tokenize        text-embeddings-inference: the tokens each input is embedded as
    POST /v1/embeddings   OpenAI: one pooled vector per input, float or base64, usage in tokens
    GET  /v1/models       OpenAI: the one model served (and GET /v1/models/{id})

In front of the endpoints (:class:`Front`): the API key, if one is set (``/health`` stays open);
at most ``max_concurrent_requests`` embedding requests at once, 429 past it; a body refused
before it was read is read and thrown away first (up to a bound), so that a client that sends
it whole still receives the refusal; a client that leaves is one line of the access log, and
its queued work is dropped. Each request is logged on one line (``elmo.serve.access``); what
the requests ask and what they get back is :mod:`elmo.serve.protocol`'s business. Behind it,
:class:`Admission` gives each request its deadline and its place in the batcher's queue, and
:class:`Endpoints` holds the handlers, put in the route table by :func:`add_routes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from elmo.version import install_hint

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
    )
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"elmo serve needs the [serve] extra (FastAPI, uvicorn, prometheus_client): "
                      f"{install_hint('serve')} ({e})") from e

from elmo.checks import NonFiniteOutputError, check_count, check_number
from elmo.inference.embed import Embedder
from elmo.serve.batching import (
    DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_MAX_WAIT_MS,
    Batcher,
    BatchLost,
    BatchRecord,
    EmbeddingFailed,
    Overloaded,
    ServerClosed,
    WorkerCrashed,
    batch_tokens,
)
from elmo.serve.protocol import (
    DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_QUEUED_TOKENS,
    DEFAULT_MODEL_NAME,
    DEFAULT_POOLED_LAYERS,
    DEFAULT_POOLING,
    DEFAULT_REQUEST_TIMEOUT,
    ENCODINGS,
    POOLINGS,
    ApiError,
    Limits,
    Output,
    as_json,
    check_fields,
    check_model_name,
    count_numbers,
    dumps,
    json_pieces,
    openai_response,
    parse_json,
    read_bool,
    read_choice,
    read_inputs,
    read_layers,
    read_truncation,
    refuse_empty,
    refuse_surrogates,
    shown,
    tokenize_response,
)
from elmo.serve.worker import ProcessModel, WorkerSpec, serving_embedder
from elmo.version import __version__

LOG = logging.getLogger("elmo.serve")
ACCESS_LOG = logging.getLogger("elmo.serve.access")

ENDPOINTS = ("/health", "/info", "/metrics", "/embed_all", "/embed", "/", "/tokenize", "/v1/embeddings",
             "/v1/models")
# The endpoints that run the model: what max_concurrent_requests counts.
EMBEDDING_ENDPOINTS = ("/embed_all", "/embed", "/", "/v1/embeddings")
# Requests under max_concurrent_requests: the embedding ones and /tokenize.
ADMITTED_ENDPOINTS = (*EMBEDDING_ENDPOINTS, "/tokenize")
OPEN_ENDPOINTS = ("/health",)  # answered without the API key
# Fields each endpoint reads. TEI's and OpenAI's fields that change nothing here are accepted so
# that their clients work unchanged: OpenAI's "user", and a TEI "prompt_name" of null.
EMBED_ALL_FIELDS = ("inputs", "layers", "truncate", "truncation_direction", "prompt_name")
EMBED_FIELDS = ("inputs", "normalize", "layers", "pooling", "truncate", "truncation_direction", "prompt_name",
                "dimensions")
OPENAI_FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "layers", "pooling", "normalize")
TOKENIZE_FIELDS = ("inputs", "add_special_tokens", "prompt_name")

# A body must arrive within this (or the request timeout, if shorter): a client that trickles
# it would otherwise hold a connection and a request slot for ever.
BODY_SECONDS = 30.0
# A body refused before it was read (413 by its length, 401, 429) is read and thrown away, up to
# this many bytes and seconds, before the answer, so that a client that sends its body whole
# before reading (urllib, requests) receives the refusal instead of a broken pipe.
DRAIN_BYTES = 16 * 2**20
DRAIN_SECONDS = 10.0
# Answers of more numbers than this are written in pieces (protocol.json_pieces), each about
# this many numbers, the event loop free between them.
STREAM_NUMBERS = 65536
STREAM_CHUNK_BYTES = 2**20


class Metrics:
    """The Prometheus series of one app, in a registry of its own (two apps in one process, as
    in the tests, do not share counts)."""

    def __init__(self):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("elmo_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=registry)
        self.request_seconds = Histogram("elmo_request_seconds", "Time from request to answer, by endpoint",
                                         ["endpoint"], registry=registry,
                                         buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.in_flight = Gauge("elmo_requests_in_flight", "HTTP requests being answered", registry=registry)
        self.queued = Gauge("elmo_queued_requests", "Requests waiting for a batch", registry=registry)
        self.queued_tokens = Gauge("elmo_queued_tokens", "Tokens (boundaries included) queued or being computed",
                                   registry=registry)
        self.inputs = Counter("elmo_inputs", "Inputs (sentences) embedded", registry=registry)
        self.tokens = Counter("elmo_tokens", "Tokens embedded; rate() of it is tokens per second",
                              registry=registry)
        self.batch_requests = Histogram("elmo_batch_requests", "Requests per batch", registry=registry,
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.batch_sentences = Histogram("elmo_batch_sentences", "Sentences per batch", registry=registry,
                                         buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))
        self.batch_tokens = Histogram("elmo_batch_tokens", "Tokens per batch (without boundaries)",
                                      registry=registry, buckets=(16, 64, 256, 1024, 4096, 16384, 65536))
        self.batch_seconds = Histogram("elmo_batch_seconds", "Time the model computed one batch", registry=registry,
                                       buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.queue_seconds = Histogram("elmo_queue_seconds", "Time a request waited before its batch ran",
                                       registry=registry,
                                       buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
        self.tokens_per_second = Gauge("elmo_batch_tokens_per_second", "Tokens per second of the last batch",
                                       registry=registry)
        self.failed = Counter("elmo_failed_requests", "Requests whose embedding failed", registry=registry)
        self.restarts = Counter("elmo_worker_restarts", "Model worker processes started again after one died",
                                registry=registry)
        self.refused = Counter("elmo_refused_requests", "Requests refused for the server's sake (429, 503 on "
                               "timeout), by the bound they met", ["reason"], registry=registry)
        self.abandoned = Counter("elmo_abandoned_requests", "Requests whose caller left before the answer, by "
                                 "where they were: body (being read), queued (dropped, never computed), "
                                 "computing (computed, not answered)", ["stage"], registry=registry)

    def batch(self, record: BatchRecord) -> None:
        self.batch_requests.observe(record.requests)
        self.batch_sentences.observe(record.sentences)
        self.batch_tokens.observe(record.tokens)
        self.batch_seconds.observe(record.seconds)
        for seconds in record.queue_seconds:
            self.queue_seconds.observe(seconds)
        if record.seconds > 0:
            self.tokens_per_second.set(record.tokens / record.seconds)
        self.inputs.inc(record.sentences)
        self.tokens.inc(record.tokens)
        self.failed.inc(record.failed)


class ClientGone(Exception):
    """The caller closed its connection before its answer: nobody to answer."""


class Body:
    """An ASGI ``receive`` that remembers how much of the request's body has come, whether all
    of it, and whether the client left; :meth:`drain` reads and throws away the rest."""

    def __init__(self, receive, scope):
        self._receive = receive
        self.bytes = 0
        self.complete = False
        self.gone = False
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length", b"")
        self.declared = int(length) if length.isdigit() else None
        self.has_body = bool(self.declared) or b"transfer-encoding" in headers
        self.expects_continue = headers.get(b"expect", b"").lower() == b"100-continue"

    async def receive(self):
        message = await self._receive()
        if message["type"] == "http.request":
            self.bytes += len(message.get("body", b""))
            if not message.get("more_body", False):
                self.complete = True
        elif message["type"] == "http.disconnect":
            self.gone = True
        return message

    async def drain(self) -> bool:
        """Read the rest of the body and throw it away, up to :data:`DRAIN_BYTES` and
        :data:`DRAIN_SECONDS`: whether the connection can go on (all of it came)."""
        if self.complete or not self.has_body:
            return True
        if self.gone or self.expects_continue or (self.declared or 0) > DRAIN_BYTES:
            return False  # a client waiting for "100 Continue" sends nothing more
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while not self.complete and not self.gone and self.bytes <= DRAIN_BYTES:
                    await self.receive()
        except TimeoutError:
            return False
        return self.complete


async def until_disconnected(receive) -> None:
    """Return once the client has closed its connection (ASGI ``http.disconnect``), the body
    having been read."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("body") and not message.get("more_body"):
            await asyncio.sleep(0.05)  # a server that repeats empty messages: do not spin


def _error_bytes(error: ApiError, path: str) -> bytes:
    body = error.openai_body() if path.startswith("/v1/") else error.tei_body()
    try:
        return dumps(body)
    except (TypeError, ValueError):  # a lone surrogate from the request in the message: escaped
        return json.dumps(body, ensure_ascii=True).encode()


def _error_response(error: ApiError, path: str) -> Response:
    return Response(_error_bytes(error, path), status_code=error.status, media_type="application/json",
                    headers=error.headers)


class Front:
    """ASGI middleware in front of the app: the API key, the bound on concurrent embedding
    requests, the reading away of refused bodies, clients that leave, and one log line and the
    request metrics per HTTP request."""

    def __init__(self, app, metrics: Metrics, enabled: bool = True, api_key: str | None = None,
                 max_concurrent_requests: int | None = None, retry_after: Callable[[], int] = lambda: 1):
        self.app, self.metrics, self.enabled = app, metrics, enabled
        self.api_key = None if not api_key else api_key.encode()
        self.max_concurrent = max_concurrent_requests
        self.retry_after = retry_after
        self.busy = 0  # embedding requests being answered

    def authorized(self, scope) -> bool:
        """Whether the request carries ``Authorization: Bearer KEY``, compared in constant time."""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key)
        return False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]  # unless a response starts
        scope.setdefault("state", {})
        path = scope.get("path", "")
        body = Body(receive, scope)

        async def send_checked(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                closing = (b"connection", b"close") in [(k.lower(), v.lower()) for k, v in message.get("headers", [])]
                if message["status"] >= 400 and not closing and not await body.drain():
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        async def refuse(error: ApiError, reason: str | None = None):
            if reason is not None:
                self.metrics.refused.labels(reason).inc()
            headers = [(b"content-type", b"application/json")]
            headers += [(k.lower().encode(), str(v).encode()) for k, v in error.headers.items()]
            content = _error_bytes(error, path)
            headers.append((b"content-length", str(len(content)).encode()))
            await send_checked({"type": "http.response.start", "status": error.status, "headers": headers})
            await send({"type": "http.response.body", "body": content})

        counted = scope.get("method") == "POST" and path in ADMITTED_ENDPOINTS
        self.metrics.in_flight.inc()
        if counted:
            self.busy += 1
        try:
            if self.api_key is not None and path not in OPEN_ENDPOINTS and not self.authorized(scope):
                await refuse(ApiError(401, "authorization: a missing or wrong API key; send the header "
                                           "'Authorization: Bearer KEY'", headers={"WWW-Authenticate": "Bearer"}))
            elif counted and self.max_concurrent is not None and self.busy > self.max_concurrent:
                await refuse(ApiError(429, f"the model is overloaded: {self.max_concurrent:,} requests in flight "
                                           f"(max_concurrent_requests); try again shortly",
                                      limit="max_concurrent_requests",
                                      headers={"Retry-After": str(self.retry_after())}), "max_concurrent_requests")
            else:
                await self.app(scope, body.receive, send_checked)
        except (ClientGone, ClientDisconnect):
            status[0] = 499  # nginx's "client closed request": nobody was answered
            if not body.complete:
                self.metrics.abandoned.labels("body").inc()
        finally:
            seconds = time.perf_counter() - started
            self.metrics.in_flight.dec()
            if counted:
                self.busy -= 1
            endpoint = path if path in ENDPOINTS else ("/v1/models" if path.startswith("/v1/models/") else "other")
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.request_seconds.labels(endpoint).observe(seconds)
            if self.enabled:
                client = scope.get("client")
                who = f"{client[0]}:{client[1]}" if client else "-"
                work = scope["state"].get("elmo_work", "")
                if status[0] == 499:
                    where = "after its body" if body.complete else f"{body.bytes:,} bytes into its body"
                    work += f" client left ({where})"
                ACCESS_LOG.info('%s "%s %s" %d %.1f ms%s', who, scope.get("method", "-"), path[:200], status[0],
                                seconds * 1000, work)


class PiecesResponse(Response):
    """A JSON answer written in pieces (:func:`~elmo.serve.protocol.json_pieces`), the event
    loop free between them, and stopped if the client leaves."""

    media_type = "application/json"

    def __init__(self, value, status_code: int = 200):
        super().__init__(None, status_code=status_code)
        del self.headers["content-length"]
        self.value = value

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.ensure_future(until_disconnected(receive))
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            chunk = bytearray()
            for piece in json_pieces(self.value, STREAM_NUMBERS):
                chunk += piece
                if len(chunk) >= STREAM_CHUNK_BYTES:
                    if watcher.done():
                        raise ClientGone()
                    await send({"type": "http.response.body", "body": bytes(chunk), "more_body": True})
                    chunk.clear()
                    await asyncio.sleep(0)  # let the loop answer others
            await send({"type": "http.response.body", "body": bytes(chunk), "more_body": False})
        finally:
            watcher.cancel()


def _answer(value) -> Response:
    """A JSON answer: in one piece if small, else written in pieces (:class:`PiecesResponse`)."""
    if count_numbers(value) > STREAM_NUMBERS:
        return PiecesResponse(value)
    return Response(dumps(as_json(value)), media_type="application/json")


def _json(value) -> Response:
    return Response(dumps(value), media_type="application/json")


async def read_body(request: Request, limit: int, deadline: float | None = None) -> bytes:
    """The request's body, refused (413) once it is over ``limit`` bytes: by its declared length
    before anything is read, else while it arrives; 408 if it has not all come by ``deadline``
    (``time.monotonic()``); :class:`ClientGone` if the client leaves meanwhile."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body: {int(declared):,} bytes, more than max_body_bytes ({limit:,})", field="body",
                       limit="max_body_bytes")
    chunks, size = [], 0
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        try:
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            message = await asyncio.wait_for(request.receive(), remaining)
        except TimeoutError:
            raise ApiError(408, f"body: {size:,} bytes came, and not the rest in time; send the body at once",
                           field="body", headers={"Connection": "close"}) from None
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"body: more than max_body_bytes ({limit:,}) bytes", field="body",
                           limit="max_body_bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def deadline_of(request: Request) -> float | None:
    """The ``time.monotonic()`` by which the request must be answered (None: no bound), set once
    on entry by :meth:`Admission.timed`."""
    return request.state.elmo_deadline


async def read_request(request: Request, limits: Limits, fields: tuple[str, ...]) -> dict:
    """The request's JSON body, read within :data:`BODY_SECONDS` (or the request's deadline, if
    sooner), holding only ``fields``, and no TEI ``prompt_name``."""
    deadline = deadline_of(request)
    body_deadline = time.monotonic() + BODY_SECONDS
    body = parse_json(await read_body(request, limits.max_body_bytes,
                                      body_deadline if deadline is None else min(deadline, body_deadline)))
    check_fields(body, fields)
    if body.get("prompt_name") is not None:
        raise ApiError(422, "prompt_name: this model has no prompts; leave it out", field="prompt_name")
    return body


class Admission:
    """How far one app lets a request in, after :class:`Front`'s bound on concurrent requests:
    its deadline (``request_timeout``, set once on entry), the tokens the batcher queues
    (``max_queued_tokens``, 429 past it), and the batcher's errors turned into answers."""

    def __init__(self, batcher: Batcher, metrics: Metrics, request_timeout: float | None):
        self.batcher, self.metrics, self.request_timeout = batcher, metrics, request_timeout

    def timed(self, handler, batched: bool = False):
        """``handler`` within the request's time: the one place its deadline is set. ``batched``:
        the batcher expects the request from its start (it waits for it while forming a batch,
        :meth:`~elmo.serve.batching.Batcher.expecting`)."""
        @functools.wraps(handler)
        async def expected(request: Request):
            request.state.elmo_deadline = (None if self.request_timeout is None
                                           else time.monotonic() + self.request_timeout)
            if not batched:
                return await handler(request)
            with self.batcher.expecting() as coming:
                request.state.elmo_coming = coming
                return await handler(request)

        return expected

    def overloaded(self, error: Overloaded) -> ApiError:
        """The 429 for a request past ``max_queued_tokens``, counted."""
        self.metrics.refused.labels("max_queued_tokens").inc()
        return ApiError(429, str(error), limit="max_queued_tokens", headers={"Retry-After": str(error.retry_after)})

    def timed_out(self) -> ApiError:
        """The 503 for a request past ``request_timeout``, counted."""
        self.metrics.refused.labels("request_timeout").inc()
        return ApiError(503, f"no answer within request_timeout ({self.request_timeout:g} s): the model is busy or "
                             "stuck; try again", limit="request_timeout",
                        headers={"Retry-After": str(self.batcher.retry_after())})

    async def embed(self, request: Request, sentences: list[list[str]], output: Output, field: str = "inputs",
                    one_text: bool = False) -> list[np.ndarray]:
        """What the batcher gives for ``sentences``, shaped by ``output``; given up (and dropped
        from the queue) if the client leaves or the request's time runs out. ``field``: the
        request's field the sentences came from (``one_text``: a single string, not a list), named
        when an input's vectors come out non-finite."""
        request.state.elmo_work = f" inputs={len(sentences)} tokens={sum(len(s) for s in sentences)}"
        work = asyncio.ensure_future(self.batcher.embed(sentences, request.state.elmo_coming, output=output))
        watcher = asyncio.ensure_future(until_disconnected(request.receive))
        deadline = deadline_of(request)
        try:
            done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED,
                                         timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        finally:
            watcher.cancel()
            if not work.done():
                work.cancel()  # its job leaves the queue, or its answer is thrown away
        if work not in done:
            if watcher in done:
                raise ClientGone()
            raise self.timed_out()
        return self._result(work, field, one_text)

    def _result(self, work: asyncio.Future, field: str, one_text: bool) -> list[np.ndarray]:
        """The finished ``work``'s vectors, or its failure as the request's answer."""
        try:
            return work.result()
        except Overloaded as e:
            raise self.overloaded(e) from None
        except (ServerClosed, WorkerCrashed, BatchLost) as e:
            raise ApiError(503, f"{e}; try again", headers={"Retry-After": "1"}) from None
        except NonFiniteOutputError as e:  # this input overflows the model: nothing to retry
            at = field if one_text else f"{field}[{e.row}]"
            raise ApiError(422, f"{at}: the model's vectors for this input hold NaN or infinite values (its weights "
                                "overflow float32 on it); nothing was returned for it", field=at) from None
        except EmbeddingFailed as e:  # raised in the model's process: the message names its type
            raise ApiError(500, f"embedding failed: {e}") from None
        except Exception as e:  # the batch failed: this request's error, the server goes on
            LOG.exception("elmo serve: a request's embedding failed")
            raise ApiError(500, f"embedding failed: {type(e).__name__}: {e}") from None

    async def off_loop(self, cost: int, work: Callable[[], bytes]) -> bytes:
        """``work`` run on a thread, ``cost`` tokens counted against ``max_queued_tokens`` while
        it runs (what ``/tokenize`` does instead of a batch)."""
        try:
            with self.batcher.admitted(cost):
                return await asyncio.to_thread(work)
        except Overloaded as e:
            raise self.overloaded(e) from None
        except ServerClosed as e:
            raise ApiError(503, f"{e}; try again", headers={"Retry-After": "1"}) from None


class Endpoints:
    """The endpoint handlers of one app and what they share: the model's shape, the request
    limits, the name served, and the :class:`Admission` that runs the model for them. The
    handlers have comments, not docstrings: FastAPI would put a docstring in ``/openapi.json``."""

    def __init__(self, admission: Admission, model_name: str, info: dict, limits: Limits):
        self.admission, self.batcher, self.metrics = admission, admission.batcher, admission.metrics
        self.model_name, self.info, self.limits = model_name, info, limits
        self.n_layers, self.dim = info["layers"], info["dimensions"]
        self.embed_all_default = info["embed_all_layers"]
        self.created = int(time.time())

    def read_dimensions(self, body: dict) -> None:
        """Refuse (422) a ``dimensions`` other than the model's: vectors are not cut."""
        wanted = body.get("dimensions")
        if wanted is not None and wanted != self.dim:
            raise ApiError(422, f"dimensions: this model's vectors have {self.dim} dimensions, got {shown(wanted)}",
                           field="dimensions")

    async def health(self):
        if not self.batcher.ready:
            raise ApiError(503, f"not ready: {self.batcher.status}")
        return _json({"status": "ok"})

    async def get_info(self):
        return _json(self.info)

    async def get_metrics(self):
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # TEI's ``/embed_all``: one (layers, tokens, dim) or (tokens, dim) array per input.
    async def embed_all(self, request: Request):
        body = await read_request(request, self.limits, EMBED_ALL_FIELDS)
        sentences = read_inputs(body.get("inputs"), "inputs", self.limits, read_truncation(body))
        layers = read_layers(body.get("layers", self.embed_all_default), self.n_layers, pooled=False)
        return _answer(await self.admission.embed(request, sentences, Output(layers=layers), "inputs",
                                                  isinstance(body.get("inputs"), str)))

    # TEI's ``/embed`` (and ``/``): one pooled vector per input.
    async def tei_embed(self, request: Request):
        body = await read_request(request, self.limits, EMBED_FIELDS)
        inputs = body.get("inputs")
        sentences = read_inputs(inputs, "inputs", self.limits, read_truncation(body))
        refuse_empty(sentences, "inputs", isinstance(inputs, str))
        layers = read_layers(body.get("layers", DEFAULT_POOLED_LAYERS), self.n_layers, pooled=True)
        pooling = read_choice(body, "pooling", POOLINGS, DEFAULT_POOLING)
        normalize = read_bool(body, "normalize", True)  # TEI's default
        self.read_dimensions(body)
        return _answer(await self.admission.embed(request, sentences, Output(layers, pooling, normalize), "inputs",
                                                  isinstance(inputs, str)))

    # OpenAI's ``/v1/embeddings``: one pooled vector per input, float or base64.
    async def openai_embeddings(self, request: Request):
        body = await read_request(request, self.limits, OPENAI_FIELDS)
        inputs = body.get("input")
        sentences = read_inputs(inputs, "input", self.limits)
        refuse_empty(sentences, "input", isinstance(inputs, str))
        if not isinstance(body.get("model", ""), str):
            raise ApiError(422, f"model: expected a string, got {shown(body['model'])}", field="model")
        encoding = read_choice(body, "encoding_format", ENCODINGS, "float")
        layers = read_layers(body.get("layers", DEFAULT_POOLED_LAYERS), self.n_layers, pooled=True)
        pooling = read_choice(body, "pooling", POOLINGS, DEFAULT_POOLING)
        normalize = read_bool(body, "normalize", False)
        self.read_dimensions(body)
        vectors = await self.admission.embed(request, sentences, Output(layers, pooling, normalize), "input",
                                             isinstance(inputs, str))
        return _answer(openai_response(vectors, self.model_name, encoding, sum(len(s) for s in sentences)))

    # TEI's ``/tokenize``: the tokens each input is embedded as, under the same bounds.
    async def tokenize(self, request: Request):
        body = await read_request(request, self.limits, TOKENIZE_FIELDS)
        inputs = body.get("inputs")
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ApiError(422, f"inputs: expected a string or a non-empty list of strings, got {shown(inputs)}",
                           field="inputs")
        special = read_bool(body, "add_special_tokens", True)

        def counted() -> int:  # the same bounds as an embedding request's, off the event loop
            for i, text in enumerate(texts):
                refuse_surrogates(text, "inputs" if isinstance(inputs, str) else f"inputs[{i}]")
            return batch_tokens(read_inputs(inputs, "inputs", self.limits))

        cost = await asyncio.to_thread(counted)
        answer = await self.admission.off_loop(cost, lambda: dumps(tokenize_response(texts, special)))
        return Response(answer, media_type="application/json")

    def model_card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "elmo"}

    async def list_models(self):
        return _json({"object": "list", "data": [self.model_card()]})

    async def get_model(self, name: str):
        if name != self.model_name:
            raise ApiError(404, f"model: no model {shown(name)} here; this server serves {self.model_name!r}",
                           field="model", limit="model_not_found")
        return _json(self.model_card())


async def _api_error(request: Request, error: ApiError):
    return _error_response(error, request.url.path)


async def _http_error(request: Request, error: HTTPException):
    """Starlette's own refusals (404, 405) in the API's error body, a 404 naming the endpoints."""
    message = f"{request.method} {shown(request.url.path, 200)}: {error.detail}"
    if error.status_code == 404:
        message += f" (endpoints: {', '.join(ENDPOINTS)})"
    return _error_response(ApiError(error.status_code, message), request.url.path)


def add_routes(app: FastAPI, endpoints: Endpoints) -> None:
    """The route table: each endpoint's method, path and handler, the POST ones within the
    request's time (:meth:`Admission.timed`), those that run the model expected by the batcher;
    and the handlers that answer errors."""
    timed = endpoints.admission.timed
    routes = (
        ("GET", "/health", endpoints.health),
        ("GET", "/info", endpoints.get_info),
        ("GET", "/metrics", endpoints.get_metrics),
        ("POST", "/embed_all", timed(endpoints.embed_all, batched=True)),
        ("POST", "/embed", timed(endpoints.tei_embed, batched=True)),
        # TEI answers its clients (huggingface_hub's InferenceClient.feature_extraction) on "/".
        ("POST", "/", timed(endpoints.tei_embed, batched=True)),
        ("POST", "/v1/embeddings", timed(endpoints.openai_embeddings, batched=True)),
        ("POST", "/tokenize", timed(endpoints.tokenize)),
        ("GET", "/v1/models", endpoints.list_models),
        ("GET", "/v1/models/{name:path}", endpoints.get_model),
    )
    for method, path, handler in routes:
        app.add_api_route(path, handler, methods=[method])
    # The decorator's form: Starlette's add_exception_handler is typed for handlers of any Exception.
    app.exception_handler(ApiError)(_api_error)
    app.exception_handler(HTTPException)(_http_error)


def _lifespan(batcher: Batcher, *, model_name: str, warmup: bool, request_timeout: float | None, in_process: bool,
              on_ready: Callable[[], None] | None):
    """The app's lifespan: the model warm before it answers, the batcher stopped (within
    ``request_timeout``) after."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        started = time.perf_counter()
        await batcher.start(warmup=warmup)
        info = batcher.runner.info
        LOG.info("elmo serve: model %s warm in %.1f s (%d layers of %d, %s, state %s, in a %s)", model_name,
                 time.perf_counter() - started, info["layers"], info["dimensions"], info["precision"], info["state"],
                 "process of its own" if in_process else "thread of this process")
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await batcher.stop(timeout=request_timeout)
            LOG.info("elmo serve: stopped")

    return lifespan


def _check_options(model_name: str, max_concurrent_requests: int | None, request_timeout: float | None) -> None:
    """Refuse (ValueError) options :func:`create_app` cannot serve with."""
    check_model_name(model_name)
    if max_concurrent_requests is not None:
        check_count(max_concurrent_requests, "max_concurrent_requests")
    if request_timeout is not None:
        check_number(request_timeout, "request_timeout", above=True)


def _new_batcher(model: ProcessModel | Embedder, metrics: Metrics, on_fatal: Callable[[str], None] | None,
                 **options) -> Batcher:
    """The app's :class:`Batcher` for ``model``, reporting to ``metrics``."""
    batcher = Batcher(model, on_batch=metrics.batch, on_restart=metrics.restarts.inc, on_fatal=on_fatal,
                      on_dropped=lambda stage: metrics.abandoned.labels(stage).inc(), **options)
    metrics.queued.set_function(lambda: batcher.queued)
    metrics.queued_tokens.set_function(lambda: batcher.queued_tokens)
    return batcher


def create_app(model: ProcessModel | Embedder, *, model_name: str = DEFAULT_MODEL_NAME, limits: Limits | None = None,
               max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
               max_concurrent_requests: int | None = DEFAULT_MAX_CONCURRENT_REQUESTS,
               max_queued_tokens: int | None = DEFAULT_MAX_QUEUED_TOKENS,
               request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT, api_key: str | None = None,
               embed_all_layers: str | int = "all",
               access_log: bool = True, warmup: bool = True, on_ready: Callable[[], None] | None = None,
               on_fatal: Callable[[str], None] | None = None,
               model_thread: ThreadPoolExecutor | None = None) -> FastAPI:
    """The service for ``model``: a :class:`~elmo.serve.worker.ProcessModel` (the model in a
    process of its own, started here if it is not yet: what ``elmo serve`` runs), or an :class:`Embedder` run on
    ``model_thread`` of this process (:func:`~elmo.serve.batching.new_model_thread`, best the
    thread that loaded it; simpler, slower under load). State policy ``warm`` or ``reset``.
    ``model_name`` is the name in ``/info``, ``/v1/models`` and every OpenAI answer. ``limits`` bound each request
    (:class:`~elmo.serve.protocol.Limits`); ``max_batch_tokens`` and ``max_wait_ms`` shape batches
    (:class:`~elmo.serve.batching.Batcher`). Past ``max_concurrent_requests`` embedding requests
    at once, or ``max_queued_tokens`` tokens taken and not answered, a request gets 429 with
    ``Retry-After`` (None: no bound). ``request_timeout``: seconds a request may take before it
    gets 503 (None: no bound). ``api_key``: the Bearer token every endpoint but ``/health``
    wants (None: none). ``embed_all_layers``: what ``/embed_all`` returns when the request does
    not say (``"all"``: ``(layers, tokens, dim)``; ``"top"`` or ``"average"``: TEI's
    ``(tokens, dim)``). ``on_ready`` is called once the model is warm and the app answers;
    ``on_fatal`` with a message if the model's process died and could not be restarted, or the
    batching task kept failing (the app then answers 503 to everything: time to exit)."""
    limits = limits or Limits()
    _check_options(model_name, max_concurrent_requests, request_timeout)
    if isinstance(model, ProcessModel) and not model.info:
        model.start()  # the model loads and warms in its process before the app exists
    metrics = Metrics()
    batcher = _new_batcher(model, metrics, on_fatal, max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms,
                           max_queued_tokens=max_queued_tokens, model_thread=model_thread)
    model_info = batcher.runner.info
    try:
        embed_all_default = read_layers(embed_all_layers, model_info["layers"], pooled=False,
                                        field="embed_all_layers")
    except ApiError as e:  # an option, not a request: the caller's ValueError
        raise ValueError(e.message) from None
    in_process = isinstance(model, ProcessModel)
    info = {"model": model_name, "version": __version__, **model_info, "worker": "process" if in_process else "thread",
            "max_batch_tokens": max_batch_tokens, "max_wait_ms": max_wait_ms, "limits": limits.as_dict(),
            "max_concurrent_requests": max_concurrent_requests, "max_queued_tokens": max_queued_tokens,
            "request_timeout": request_timeout, "auth": api_key is not None and api_key != "",
            "embed_all_layers": embed_all_default,
            "pooling": {"default": DEFAULT_POOLING, "layers": DEFAULT_POOLED_LAYERS, "choices": list(POOLINGS)}}
    lifespan = _lifespan(batcher, model_name=model_name, warmup=warmup, request_timeout=request_timeout,
                         in_process=in_process, on_ready=on_ready)
    app = FastAPI(title="elmo serve", version=__version__, lifespan=lifespan,
                  description="ELMo embeddings: text-embeddings-inference's and OpenAI's HTTP APIs.")
    app.state.batcher, app.state.metrics = batcher, metrics
    app.add_middleware(Front, metrics=metrics, enabled=access_log, api_key=api_key,
                       max_concurrent_requests=max_concurrent_requests, retry_after=batcher.retry_after)
    add_routes(app, Endpoints(Admission(batcher, metrics, request_timeout), model_name, info, limits))
    return app


def load_app(model=None, *, device: str | None = None, precision: str = "float32", state: str = "warm",
             threads: int | None = None, cache_dir: str | os.PathLike | None = None,
             vocab_cache: str | os.PathLike | None = None, **app_options) -> FastAPI:
    """:func:`create_app` for a model source :func:`elmo.hub.load_model` takes (None: the
    packaged model), loaded and warmed in a worker process (:class:`~elmo.serve.worker.ProcessModel`)
    before this returns: what each Ray Serve replica runs (:mod:`elmo.integrations.ray_serve`)."""
    if isinstance(model, tuple):
        model = [os.fspath(p) for p in model]
    elif model is not None:
        model = os.fspath(model)
    spec = WorkerSpec(source=model, cache_dir=None if cache_dir is None else os.fspath(cache_dir), device=device,
                      precision=precision, state=state, threads=threads,
                      vocab_cache=None if vocab_cache is None else os.fspath(vocab_cache),
                      max_batch_tokens=app_options.get("max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS))
    worker = ProcessModel(spec).start()
    return create_app(worker, **app_options)


__all__ = ["Metrics", "create_app", "load_app", "serving_embedder"]
