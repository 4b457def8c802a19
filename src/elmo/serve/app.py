"""The HTTP service: a FastAPI app around one :class:`~elmo.serve.batching.Batcher`.

:func:`create_app` builds it for a model that runs in a process of its own
(:class:`~elmo.serve.worker.ProcessModel`, what ``elmo serve`` and :func:`load_app` use) or for an
:class:`~elmo.inference.embed.Embedder` run on a thread of this process; uvicorn serves it
(``elmo serve``), and so does Ray Serve (:mod:`elmo.integrations.ray_serve`), unchanged. The model
is warm (run once on the warm-up text) before ``GET /health`` answers 200, so that the first
request is as fast as any. Endpoints::

    GET  /health          200 {"status": "ok"} when warm; 503 while stopping or restarting the model
    GET  /info            model, layers, dimensions, precision, state policy, version, limits
    GET  /metrics         Prometheus text: requests, latency, batch sizes, queue time, tokens
    POST /embed_all       text-embeddings-inference: one (layers, tokens, dim) or (tokens, dim) array per input
    POST /embed           text-embeddings-inference: one pooled vector per input
    POST /v1/embeddings   OpenAI: one pooled vector per input, float or base64, usage in tokens

Each request is logged on one line (``elmo.serve.access``); what the requests ask and what they
get back is :mod:`elmo.serve.protocol`'s business.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import Response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
    from starlette.exceptions import HTTPException
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"elmo serve needs the [serve] extra (FastAPI, uvicorn, prometheus_client): "
                      f"pip install 'elmo[serve]' ({e})") from e

from elmo.inference.embed import Embedder, select_layers
from elmo.serve.batching import (
    DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_MAX_WAIT_MS,
    Batcher,
    BatchRecord,
    EmbeddingFailed,
    ServerClosed,
    WorkerCrashed,
)
from elmo.serve.protocol import (
    DEFAULT_POOLED_LAYERS,
    DEFAULT_POOLING,
    ENCODINGS,
    POOLINGS,
    ApiError,
    Limits,
    as_json_array,
    check_fields,
    dumps,
    openai_response,
    parse_json,
    pool,
    read_bool,
    read_choice,
    read_inputs,
    read_layers,
    read_truncation,
    refuse_empty,
)
from elmo.serve.worker import ProcessModel, WorkerSpec, serving_embedder
from elmo.version import __version__

LOG = logging.getLogger("elmo.serve")
ACCESS_LOG = logging.getLogger("elmo.serve.access")

ENDPOINTS = ("/health", "/info", "/metrics", "/embed_all", "/embed", "/v1/embeddings")
# Fields each endpoint reads. TEI's and OpenAI's fields that change nothing here are accepted so
# that their clients work unchanged: OpenAI's "user", and a TEI "prompt_name" of null.
EMBED_ALL_FIELDS = ("inputs", "layers", "truncate", "truncation_direction", "prompt_name")
EMBED_FIELDS = ("inputs", "normalize", "layers", "pooling", "truncate", "truncation_direction", "prompt_name",
                "dimensions")
OPENAI_FIELDS = ("input", "model", "encoding_format", "dimensions", "user", "layers", "pooling", "normalize")


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


class AccessLog:
    """ASGI middleware: one log line and the request metrics per HTTP request."""

    def __init__(self, app, metrics: Metrics, enabled: bool = True):
        self.app, self.metrics, self.enabled = app, metrics, enabled

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]  # unless a response starts
        scope.setdefault("state", {})

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.in_flight.dec()
            path = scope.get("path", "")
            endpoint = path if path in ENDPOINTS else "other"
            self.metrics.requests.labels(endpoint, str(status[0])).inc()
            self.metrics.request_seconds.labels(endpoint).observe(seconds)
            if self.enabled:
                client = scope.get("client")
                who = f"{client[0]}:{client[1]}" if client else "-"
                work = scope["state"].get("elmo_work", "")
                ACCESS_LOG.info('%s "%s %s" %d %.1f ms%s', who, scope.get("method", "-"), path[:200], status[0],
                                seconds * 1000, work)


def _error_response(error: ApiError, path: str) -> Response:
    body = error.openai_body() if path.startswith("/v1/") else error.tei_body()
    return Response(dumps(body), status_code=error.status, media_type="application/json")


def _json(value) -> Response:
    return Response(dumps(value), media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) once it is over ``limit`` bytes: by its declared length
    before anything is read, else while it arrives."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body: {int(declared):,} bytes, more than max_body_bytes ({limit:,})", field="body",
                       limit="max_body_bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"body: more than max_body_bytes ({limit:,}) bytes", field="body",
                           limit="max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(model: ProcessModel | Embedder, *, model_name: str = "default", limits: Limits | None = None,
               max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
               access_log: bool = True, warmup: bool = True, on_ready: Callable[[], None] | None = None,
               on_fatal: Callable[[str], None] | None = None,
               model_thread: ThreadPoolExecutor | None = None) -> FastAPI:
    """The service for ``model``: a :class:`~elmo.serve.worker.ProcessModel` (the model in a
    process of its own, started here if it is not yet: what ``elmo serve`` runs), or an :class:`Embedder` run on
    ``model_thread`` of this process (:func:`~elmo.serve.batching.new_model_thread`, best the
    thread that loaded it; simpler, slower under load). State policy ``warm`` or ``reset``.
    ``model_name`` is the name in ``/info`` and in OpenAI answers. ``limits`` bound each request
    (:class:`~elmo.serve.protocol.Limits`); ``max_batch_tokens`` and ``max_wait_ms`` shape batches
    (:class:`~elmo.serve.batching.Batcher`). ``on_ready`` is called once the model is warm and the
    app answers; ``on_fatal`` with a message if the model's process died and could not be
    restarted (the app then answers 503 to everything: time to exit)."""
    limits = limits or Limits()
    if isinstance(model, ProcessModel) and not model.info:
        model.start()  # the model loads and warms in its process before the app exists
    metrics = Metrics()
    batcher = Batcher(model, max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms, on_batch=metrics.batch,
                      model_thread=model_thread, on_restart=metrics.restarts.inc, on_fatal=on_fatal)
    metrics.queued.set_function(lambda: batcher.queued)
    model_info = batcher.runner.info
    n_layers, dim = model_info["layers"], model_info["dimensions"]
    info = {"model": model_name, "version": __version__, **model_info,
            "worker": "process" if isinstance(model, ProcessModel) else "thread",
            "max_batch_tokens": max_batch_tokens, "max_wait_ms": max_wait_ms, "limits": limits.as_dict(),
            "pooling": {"default": DEFAULT_POOLING, "layers": DEFAULT_POOLED_LAYERS, "choices": list(POOLINGS)}}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        started = time.perf_counter()
        await batcher.start(warmup=warmup)
        LOG.info("elmo serve: model %s warm in %.1f s (%d layers of %d, %s, state %s, in a %s)", model_name,
                 time.perf_counter() - started, n_layers, dim, model_info["precision"], model_info["state"],
                 "process of its own" if isinstance(model, ProcessModel) else "thread of this process")
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            await batcher.stop()
            LOG.info("elmo serve: stopped")

    app = FastAPI(title="elmo serve", version=__version__, lifespan=lifespan,
                  description="ELMo embeddings: text-embeddings-inference's and OpenAI's HTTP APIs.")
    app.state.batcher, app.state.metrics = batcher, metrics
    app.add_middleware(AccessLog, metrics=metrics, enabled=access_log)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return _error_response(error, request.url.path)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):
        message = f"{request.method} {request.url.path}: {error.detail}"
        if error.status_code == 404:
            message += f" (endpoints: {', '.join(ENDPOINTS)})"
        return _error_response(ApiError(error.status_code, message), request.url.path)

    async def embed(request: Request, sentences: list[list[str]]) -> list[np.ndarray]:
        request.state.elmo_work = f" inputs={len(sentences)} tokens={sum(len(s) for s in sentences)}"
        try:
            return await batcher.embed(sentences, request.state.elmo_coming)
        except (ServerClosed, WorkerCrashed) as e:
            raise ApiError(503, f"{e}; try again") from None
        except EmbeddingFailed as e:  # raised in the model's process: the message names its type
            raise ApiError(500, f"embedding failed: {e}") from None
        except Exception as e:  # the batch failed: this request's error, the server goes on
            LOG.exception("elmo serve: a request's embedding failed")
            raise ApiError(500, f"embedding failed: {type(e).__name__}: {e}") from None

    async def read_request(request: Request, fields: tuple[str, ...]) -> dict:
        body = parse_json(await read_body(request, limits.max_body_bytes))
        check_fields(body, fields)
        if body.get("prompt_name") is not None:
            raise ApiError(422, "prompt_name: this model has no prompts; leave it out", field="prompt_name")
        return body

    def read_dimensions(body: dict) -> None:
        wanted = body.get("dimensions")
        if wanted is not None and wanted != dim:
            raise ApiError(422, f"dimensions: this model's vectors have {dim} dimensions, got {wanted!r}",
                           field="dimensions")

    @app.get("/health")
    async def health():
        if not batcher.ready:
            raise ApiError(503, f"not ready: {batcher.status}")
        return _json({"status": "ok"})

    @app.get("/info")
    async def get_info():
        return _json(info)

    @app.get("/metrics")
    async def get_metrics():
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def batched(handler):
        """An endpoint whose request the batcher expects from its start (it waits for it while
        forming a batch, :meth:`~elmo.serve.batching.Batcher.expecting`)."""
        @functools.wraps(handler)
        async def expected(request: Request):
            with batcher.expecting() as coming:
                request.state.elmo_coming = coming
                return await handler(request)

        return expected

    @app.post("/embed_all")
    @batched
    async def embed_all(request: Request):
        body = await read_request(request, EMBED_ALL_FIELDS)
        sentences = read_inputs(body.get("inputs"), "inputs", limits, read_truncation(body))
        layers = read_layers(body.get("layers", "all"), n_layers, pooled=False)
        arrays = await embed(request, sentences)
        return _json([as_json_array(select_layers(a, layers)) for a in arrays])

    @app.post("/embed")
    @batched
    async def embed_pooled(request: Request):
        body = await read_request(request, EMBED_FIELDS)
        inputs = body.get("inputs")
        sentences = read_inputs(inputs, "inputs", limits, read_truncation(body))
        refuse_empty(sentences, "inputs", isinstance(inputs, str))
        layers = read_layers(body.get("layers", DEFAULT_POOLED_LAYERS), n_layers, pooled=True)
        pooling = read_choice(body, "pooling", POOLINGS, DEFAULT_POOLING)
        normalize = read_bool(body, "normalize", True)  # TEI's default
        read_dimensions(body)
        arrays = await embed(request, sentences)
        return _json([as_json_array(pool(a, layers, pooling, normalize)) for a in arrays])

    @app.post("/v1/embeddings")
    @batched
    async def openai_embeddings(request: Request):
        body = await read_request(request, OPENAI_FIELDS)
        inputs = body.get("input")
        sentences = read_inputs(inputs, "input", limits)
        refuse_empty(sentences, "input", isinstance(inputs, str))
        if not isinstance(body.get("model", ""), str):
            raise ApiError(422, f"model: expected a string, got {body['model']!r}", field="model")
        encoding = read_choice(body, "encoding_format", ENCODINGS, "float")
        layers = read_layers(body.get("layers", DEFAULT_POOLED_LAYERS), n_layers, pooled=True)
        pooling = read_choice(body, "pooling", POOLINGS, DEFAULT_POOLING)
        normalize = read_bool(body, "normalize", False)
        read_dimensions(body)
        arrays = await embed(request, sentences)
        vectors = [pool(a, layers, pooling, normalize) for a in arrays]
        return _json(openai_response(vectors, model_name, encoding, sum(len(s) for s in sentences)))

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
    name = app_options.pop("model_name", None) or (str(model) if model is not None else "default")
    return create_app(worker, model_name=name, **app_options)


__all__ = ["create_app", "load_app", "serving_embedder", "Metrics"]
