"""``elmo serve``: the embedding service of :mod:`elmo.serve` on uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from elmo.checks import check_count, check_number
from elmo.cli.common import add_model_arguments, model_source_from_args
from elmo.devices import DEFAULT_DEVICE, DEVICES
from elmo.inference.runtime import DEFAULT_PRECISION, PRECISIONS
from elmo.inference.states import DEFAULT_STATE
from elmo.serve.batching import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_WAIT_MS
from elmo.threads import affinity_cpus, available_cpus, check_threads, default_threads
from elmo.serve.protocol import (
    DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_QUEUED_TOKENS,
    DEFAULT_MODEL_NAME,
    DEFAULT_REQUEST_TIMEOUT,
    Limits,
    check_model_name,
)
from elmo.version import install_hint

HELP = ("Serve ELMo over HTTP (text-embeddings-inference's /embed_all and /embed, OpenAI's /v1/embeddings), "
        "batching concurrent requests. Needs the [serve] extra.")

DEFAULT_LIMITS = Limits()
DEFAULT_GRACEFUL_SECONDS = 30.0


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (0.0.0.0: every interface; then set an API key)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free port, printed)")
    parser.add_argument("--served-model-name", default=DEFAULT_MODEL_NAME, metavar="NAME",
                        help="the model's name in /info, /v1/models and OpenAI answers, whatever --model is "
                             f"(clients send it as 'model'; default: {DEFAULT_MODEL_NAME})")
    parser.add_argument("--device", default=DEFAULT_DEVICE, help=f"torch device: {DEVICES}")
    parser.add_argument("--precision", default=DEFAULT_PRECISION, choices=list(PRECISIONS),
                        help="matrix products in this precision (bfloat16: fast on CPUs with AVX-512 BF16 or AMX; "
                             "int8: CPUs, the original size)")
    parser.add_argument("--state", default=DEFAULT_STATE, choices=("warm", "reset"),
                        help="LSTM state policy; both make every answer independent of other requests")
    parser.add_argument("--threads", type=int, metavar="N",
                        help=f"CPU threads for the model, which runs in a process of its own, 1 to {affinity_cpus()} "
                             "here (default: $OMP_NUM_THREADS if set, else one fewer than the CPUs this process may "
                             "use, at least 1: a core is left to the process that answers HTTP; "
                             f"{model_threads(None) or default_threads()} here)")
    parser.add_argument("--vocab-cache", help="token vectors from elmo cache-vocab (other words use the CNN)")
    parser.add_argument("--max-batch-tokens", type=int, default=DEFAULT_MAX_BATCH_TOKENS,
                        help="a batch of concurrent requests closes at this many tokens (2 more per sentence for "
                             "its boundaries); a bigger request is computed a batch at a time, others' requests "
                             "between")
    parser.add_argument("--max-wait-ms", type=float, default=DEFAULT_MAX_WAIT_MS,
                        help="how long a request waits for others to batch with while the model is idle")
    parser.add_argument("--max-request-tokens", type=int, default=DEFAULT_LIMITS.max_request_tokens,
                        help="refuse (413) a request of more tokens, all its inputs together")
    parser.add_argument("--max-input-tokens", type=int, default=DEFAULT_LIMITS.max_input_tokens,
                        help="refuse (413) an input of more tokens (or cut it, if the request says truncate)")
    parser.add_argument("--max-inputs", type=int, default=DEFAULT_LIMITS.max_inputs,
                        help="refuse (413) a request of more inputs")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_LIMITS.max_body_bytes,
                        help="refuse (413) a request body of more bytes")
    parser.add_argument("--max-concurrent-requests", type=int, default=DEFAULT_MAX_CONCURRENT_REQUESTS,
                        help="embedding requests answered at once; past it, 429 with Retry-After (as "
                             "text-embeddings-inference, whose default this is)")
    parser.add_argument("--max-queued-tokens", type=int, default=DEFAULT_MAX_QUEUED_TOKENS,
                        help="tokens (2 more per sentence) queued or being computed; a request that would pass it "
                             "gets 429 with Retry-After (one alone is always taken)")
    parser.add_argument("--request-timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT,
                        help="seconds a request may take, body, queue and model together, before it gets 503 "
                             "(0: no bound)")
    parser.add_argument("--api-key", default=os.environ.get("ELMO_API_KEY") or None,
                        help="answer only requests with 'Authorization: Bearer KEY' (401 otherwise; /health stays "
                             "open); default $ELMO_API_KEY, which keeps the key out of the process list. Set one "
                             "whenever --host is not a loopback address")
    parser.add_argument("--embed-all-layers", default="all", choices=("all", "top", "average"),
                        help="what /embed_all returns when a request does not say: all layers (layers, tokens, dim), "
                             "or the top layer or the layers' average (tokens, dim), the shape TEI's clients expect")
    parser.add_argument("--graceful-timeout", type=float, default=DEFAULT_GRACEFUL_SECONDS,
                        help="on SIGTERM or Ctrl-C, seconds to let requests in flight finish before closing them")
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                        help="one line per request on standard error")


def check_options(args: argparse.Namespace) -> None:
    """Refuse a count below 1 or a time below 0 (or not finite), naming the option, before
    anything starts."""
    for name in ("max_batch_tokens", "max_request_tokens", "max_input_tokens", "max_inputs", "max_body_bytes",
                 "max_concurrent_requests", "max_queued_tokens"):
        check_count(getattr(args, name), _option(name))
    for name in ("max_wait_ms", "graceful_timeout", "request_timeout"):
        check_number(getattr(args, name), _option(name))
    if args.api_key is not None and (not args.api_key.strip() or args.api_key != args.api_key.strip()):
        raise ValueError("--api-key: empty, or with spaces around it (a Bearer token has none)")
    if args.threads is not None:
        check_threads(args.threads)
    check_model_name(args.served_model_name, "--served-model-name")


def _option(name: str) -> str:
    """The command-line option of an argument's name: ``max_wait_ms`` -> ``--max-wait-ms``."""
    return "--" + name.replace("_", "-")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: a free one), not yet listening: connections
    are refused until the model is warm and uvicorn starts to serve."""
    if not 0 <= port <= 65535:
        raise ValueError(f"--port: expected 0 to 65535, got {port}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ValueError(f"--host {host}: not an address of this machine ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ValueError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    return sock


def _listening_server_class():
    from elmo.serve.http import Server

    class ListeningServer(Server):
        """A uvicorn server that says when it accepts connections (after the app's startup):
        "ready" printed earlier would send callers to a socket that does not listen yet."""

        def __init__(self, config, on_listening):
            super().__init__(config)
            self.on_listening = on_listening

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                self.on_listening()

    return ListeningServer


def model_threads(threads: int | None) -> int | None:
    """The model process's CPU threads: ``--threads``; else None (PyTorch's default) where
    ``OMP_NUM_THREADS`` says (as Ray sets it); else one fewer than PyTorch's default, at least 1.
    The process answering HTTP needs a core too, and an OpenMP team with more threads than free
    cores waits at every operator for a descheduled thread: on the 2-core development machine, a
    batch of 64 sentences took 75 ms on 1 thread and 175 ms on 2 while another process was busy."""
    if threads is not None or os.environ.get("OMP_NUM_THREADS"):
        return threads
    return max(1, available_cpus() - 1)


def uvicorn_config(app, args: argparse.Namespace):
    """The uvicorn configuration ``elmo serve`` runs ``app`` with (elmo.serve.http: h11 with a
    header size bound and a header deadline). uvicorn's own bound on open connections (past it,
    a plain 503 from uvicorn) leaves room for every request the app admits, and as many again
    being read or refused with a 429; connections that have not sent a request's headers do not
    count, and are closed after a few seconds: strangers cannot hold this bound."""
    from elmo.serve.http import server_config

    return server_config(app, log_config=None, log_level="warning", access_log=False, lifespan="on",
                         timeout_graceful_shutdown=args.graceful_timeout,
                         limit_concurrency=2 * args.max_concurrent_requests + 64)


def run(args: argparse.Namespace) -> int:
    check_options(args)
    try:
        import uvicorn

        from elmo.serve.app import create_app
        from elmo.serve.worker import ProcessModel, WorkerSpec

        ListeningServer = _listening_server_class()
    except ImportError as e:
        raise ValueError(f"the [serve] extra is not installed: {install_hint('serve')} ({e})") from None
    limits = Limits(max_input_tokens=args.max_input_tokens, max_inputs=args.max_inputs,
                    max_request_tokens=args.max_request_tokens, max_body_bytes=args.max_body_bytes)
    source = model_source_from_args(args)
    sock = listening_socket(args.host, args.port)  # before the model loads: a taken port fails at once
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    name = args.model or ("default" if args.options is None else args.options)
    print(f"elmo serve: loading {name} ...", file=sys.stderr, flush=True)
    # The model runs in a process of its own (elmo.serve.worker says why); a model that cannot
    # be loaded is this command's one-line error.
    worker = ProcessModel(WorkerSpec(source=list(source) if isinstance(source, tuple) else source,
                                     cache_dir=args.cache_dir, device=args.device, precision=args.precision,
                                     state=args.state, threads=model_threads(args.threads),
                                     vocab_cache=args.vocab_cache, max_batch_tokens=args.max_batch_tokens),
                          stop_timeout=args.graceful_timeout + 30)
    try:
        worker.start()
    except BaseException:
        sock.close()
        raise

    def ready() -> None:
        print(f"elmo serve: ready on {url} (POST /embed_all, /embed, /v1/embeddings; GET /health, /info, "
              f"/metrics), model name {args.served_model_name!r}", file=sys.stderr, flush=True)
        if not args.api_key and not is_loopback(host):
            print(f"elmo serve: warning: listening on {host} without an API key: anyone who reaches this port "
                  "can use it (set ELMO_API_KEY or --api-key)", file=sys.stderr, flush=True)

    fatal: list[str] = []

    def give_up(message: str) -> None:
        # The model's process died and no new one would start: stop, for a supervisor to act.
        fatal.append(message)
        server.should_exit = True

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    serve_log = logging.getLogger("elmo.serve")
    serve_log.addHandler(handler)
    serve_log.setLevel(logging.INFO)
    serve_log.propagate = False
    try:
        app = create_app(worker, model_name=args.served_model_name, limits=limits,
                         max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                         access_log=args.access_log, on_fatal=give_up,
                         max_concurrent_requests=args.max_concurrent_requests,
                         max_queued_tokens=args.max_queued_tokens,
                         request_timeout=args.request_timeout or None, api_key=args.api_key,
                         embed_all_layers=args.embed_all_layers)
        config = uvicorn_config(app, args)
        server = ListeningServer(config, on_listening=ready)
        # uvicorn stops accepting on SIGTERM or SIGINT, lets the requests in flight finish, stops
        # the app (which finishes its queue and stops the model's process), then raises the
        # signal again: the process ends as that signal ends it (SIGINT: elmo's "interrupted",
        # status 130).
        server.run(sockets=[sock])
    finally:
        worker.stop()  # if the app never started; a no-op once it stopped the worker
    if fatal:
        print(f"elmo serve: {fatal[0]}; exiting", file=sys.stderr, flush=True)
        return 1
    if not server.started:
        raise ValueError("the server did not start (the reason is logged above)")
    return 0
