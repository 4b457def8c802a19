"""The model in a process of its own: what ``elmo serve`` and its Ray Serve replicas run.

Why. In one process, the thread that runs the model and the thread that answers HTTP share one
interpreter lock (GIL). PyTorch gives it up and takes it back around each operator, thousands of
small ones per batch of ELMo, and each time it takes it back it may wait for the HTTP thread's
turn to end (up to the 5 ms switch interval): on the 2-core development machine a batch of 64
sentences took 15 to 20 times longer while a Python thread of the same process was busy, against
about 2 to 3 times while a busy *process* took the same share of the CPU (``docs/serving.md``).
So the HTTP process does only I/O, JSON and batching, and the model's process only computes.

How. :class:`ProcessModel` starts ``python -m elmo.serve.worker FD`` with one end of a Unix
socket pair, sends it a :class:`WorkerSpec` (JSON), and waits until the worker has loaded the
model and run it on the warm-up text. Then each batch goes over as JSON (the token lists, and
what each request's endpoint returns: its layers, its pooling) and comes back as a JSON header
(each request's array shapes and dtype, or its error) and the arrays' raw bytes: only what the
endpoint answers crosses (one pooled vector per input for ``/embed``, not the activations of
every layer and token), and nothing is pickled either way. The worker ignores SIGINT and SIGTERM (the server
stops it once its queue is drained) and exits when the server says so or its socket closes (the
server died).

A worker that dies (killed, out of memory, a crash in native code) fails the requests of the
batch it was computing (:class:`~elmo.serve.batching.WorkerCrashed`: HTTP 503), and the batcher
starts a new one while requests queue; ``/health`` answers 503 until it is warm. If the new one
cannot start either, the server stops serving (503 to everything) and ``elmo serve`` exits with
status 1, for whatever supervises it to decide. Unix only (a socket pair passed by descriptor).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from elmo.checks import NonFiniteOutputError
from elmo.inference.embed import Embedder
from elmo.serve.batching import (
    DEFAULT_MAX_BATCH_TOKENS,
    EmbeddingFailed,
    Outcome,
    WorkerCrashed,
    compute_requests,
    model_info,
    refuse_stateful,
)
from elmo.serve.protocol import Output

STOP = b"stop"  # the server's last message; a batch is a JSON object, which starts with "{"


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker loads and how it runs it: ``source`` is :func:`elmo.hub.load_model`'s
    (a name, a path, ``[options.json, weights.hdf5]``, or None for the packaged model);
    ``threads`` the model's CPU threads (None: PyTorch's default, all cores unless
    ``OMP_NUM_THREADS`` says otherwise); ``factory``, the ``"module:function"`` that builds the
    :class:`Embedder` from this spec in the worker (None: :func:`serving_embedder_of`), for
    embedders of one's own."""

    source: str | list[str] | None = None
    cache_dir: str | None = None
    device: str | None = None
    precision: str = "float32"
    state: str = "warm"
    vocab_cache: str | None = None
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    threads: int | None = None
    warmup: bool = True
    factory: str | None = None

    def __post_init__(self):
        refuse_stateful(self.state)


def serving_embedder(model, *, device: str | None = None, precision: str = "float32", state: str = "warm",
                     vocab_cache: str | os.PathLike | None = None,
                     max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS) -> Embedder:
    """The :class:`Embedder` a server runs for ``model`` (a BiLM): its forward batches bounded by
    the same token budget as the batches of requests, whatever their count of sentences."""
    refuse_stateful(state)
    return Embedder(model, state=state, device=device, precision=precision, vocab_cache=vocab_cache,
                    max_tokens=max_batch_tokens, batch_size=max_batch_tokens)


def serving_embedder_of(spec: WorkerSpec) -> Embedder:
    """The default factory: the model ``spec.source`` names, loaded, in :func:`serving_embedder`."""
    from elmo.hub.resolve import load_model

    source = tuple(spec.source) if isinstance(spec.source, list) else spec.source
    return serving_embedder(load_model(source, cache_dir=spec.cache_dir, progress=False), device=spec.device,
                            precision=spec.precision, state=spec.state, vocab_cache=spec.vocab_cache,
                            max_batch_tokens=spec.max_batch_tokens)


def _factory(name: str | None):
    if name is None:
        return serving_embedder_of
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


# ------------------------------------------------------------------------------ the worker side
def _answer(conn: Connection, outcomes: Sequence[Outcome]) -> None:
    """Send one batch's outcomes: a JSON header, then the arrays' bytes, in order."""
    described, chunks, size = [], [], 0
    for outcome in outcomes:
        if isinstance(outcome, NonFiniteOutputError):  # the input's fault, told apart from a failure
            described.append({"error": _one_line(outcome), "non_finite_row": outcome.row})
            continue
        if isinstance(outcome, BaseException):
            described.append({"error": _one_line(outcome)})
            continue
        arrays = [np.ascontiguousarray(a) for a in outcome]
        described.append({"shapes": [a.shape for a in arrays], "dtypes": [a.dtype.str for a in arrays]})
        chunks.extend(a.data.cast("B") for a in arrays if a.nbytes)
        size += sum(a.nbytes for a in arrays)
    conn.send_bytes(json.dumps({"outcomes": described, "nbytes": size}).encode())
    if size:
        conn.send_bytes(b"".join(chunks))


def serve_connection(conn: Connection) -> int:
    """The worker: read the spec, load and warm the model, say so (or why not), then compute
    batches until told to stop or the server goes away. Its exit status."""
    spec = WorkerSpec(**json.loads(conn.recv_bytes()))
    try:
        if spec.threads is not None:
            import torch

            torch.set_num_threads(spec.threads)
        embedder = _factory(spec.factory)(spec)
        if spec.warmup:
            from elmo.inference.states import warmup_sentences

            embedder.embed_sentences(warmup_sentences())
        info = model_info(embedder)
    except Exception as error:
        # A bad --model and the like: the server reports it as the command's one-line error.
        conn.send_bytes(json.dumps({"error": str(error) or type(error).__name__,
                                    "input_error": isinstance(error, (ValueError, OSError))}).encode())
        return 1
    conn.send_bytes(json.dumps({"ready": info, "pid": os.getpid()}).encode())
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):  # the server died
            return 0
        if message == STOP:
            return 0
        batch = json.loads(message)
        outputs = [None if o is None else Output(**o) for o in batch["outputs"]]
        _answer(conn, compute_requests(embedder, batch["requests"], outputs))


def main(argv: list[str] | None = None) -> int:
    """``python -m elmo.serve.worker FD``: serve the connection on descriptor FD."""
    argv = sys.argv[1:] if argv is None else argv
    # The server decides when this process ends: a Ctrl-C in a terminal reaches the whole
    # process group, and the server still has requests to finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with Connection(int(argv[0])) as conn:
        return serve_connection(conn)


# ------------------------------------------------------------------------------ the server side
def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class ProcessModel:
    """A :class:`~elmo.serve.batching.Runner` whose model runs in a worker process
    (``python -m elmo.serve.worker``) that :meth:`start` launches for ``spec``. ``info``: the
    model's, as the worker reports it once warm. ``stop_timeout``: seconds the worker gets to
    exit when told before it is killed."""

    def __init__(self, spec: WorkerSpec, stop_timeout: float = 30.0):
        self.spec = spec
        self.stop_timeout = stop_timeout
        self.info: dict = {}
        self.pid: int | None = None
        self.restarts = 0
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-serve-worker-io")
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- blocking, any thread
    def start(self) -> ProcessModel:
        """Launch the worker and wait until its model is loaded and warm (blocking). A model
        that cannot be loaded raises ValueError with the worker's one-line reason (RuntimeError
        for other failures)."""
        with self._lock:
            if self._process is not None:
                raise RuntimeError("ProcessModel.start: already started")
            ours, theirs = socket.socketpair()
            with ours, theirs:
                # The worker imports what this process can: the same sys.path (as spawn does).
                paths = [p or os.getcwd() for p in sys.path]
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
                process = subprocess.Popen([sys.executable, "-m", "elmo.serve.worker", str(theirs.fileno())],
                                           pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env)
                conn = Connection(os.dup(ours.fileno()))
            try:
                conn.send_bytes(json.dumps(dataclasses.asdict(self.spec)).encode())
                header = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                conn.close()
                code = process.wait()
                raise RuntimeError(f"the model worker ended before it was ready ({_describe_exit(code)})") from None
            if "error" in header:
                conn.close()
                process.wait()
                raise (ValueError if header["input_error"] else RuntimeError)(header["error"])
            self.info, self.pid = header["ready"], header["pid"]
            self._process, self._conn = process, conn
            return self

    def stop(self) -> None:
        """Tell the worker to exit and wait for it (killing it after ``stop_timeout``)."""
        with self._lock:
            process, conn = self._process, self._conn
            self._process = self._conn = None
            if process is None:
                return
            try:
                conn.send_bytes(STOP)
            except OSError:
                pass
            conn.close()
            try:
                process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def compute(self, requests: list[list[list[str]]],
                outputs: Sequence[Output | None] | None = None) -> list[Outcome]:
        """One batch, computed by the worker (blocking): one outcome per request, its arrays
        (shaped by its output, :class:`~elmo.serve.protocol.Output`: only what the endpoint
        returns crosses the socket) or an :class:`EmbeddingFailed`. Raises
        :class:`WorkerCrashed` if the worker died, or if the exchange failed in any other way
        (the worker is then killed: what it would send next could not be trusted)."""
        conn, process = self._conn, self._process
        if conn is None:
            raise WorkerCrashed("the model worker is not running")
        outputs = list(outputs) if outputs is not None else [None] * len(requests)
        try:
            # ensure_ascii: tokens that JSON gave as lone surrogates travel as escapes.
            conn.send_bytes(json.dumps({"requests": requests,
                                        "outputs": [None if o is None else o.as_dict() for o in outputs]}).encode())
            header = json.loads(conn.recv_bytes())
            data = bytearray(header["nbytes"])  # the arrays are writable views of it
            if data:
                conn.recv_bytes_into(data)
        except (EOFError, OSError):
            try:
                code = process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            raise WorkerCrashed(f"the model worker died ({_describe_exit(code)}) while it computed this "
                                f"request's batch") from None
        except Exception as error:  # a garbled answer, no memory for it: the channel is lost
            process.kill()
            process.wait()
            raise WorkerCrashed(f"the model worker's answer could not be read ({type(error).__name__}: {error}); "
                                "the worker was stopped") from None
        outcomes: list[Outcome] = []
        offset = 0
        for described in header["outcomes"]:
            if "non_finite_row" in described:
                outcomes.append(NonFiniteOutputError(int(described["non_finite_row"])))
                continue
            if "error" in described:
                outcomes.append(EmbeddingFailed(described["error"]))
                continue
            arrays = []
            for shape, dtype in zip(described["shapes"], described["dtypes"]):
                dtype = np.dtype(dtype)
                count = int(np.prod(shape))
                if not count:  # an input without tokens: (layers, 0, dim)
                    arrays.append(np.zeros(shape, dtype=dtype))
                    continue
                arrays.append(np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape))
                offset += count * dtype.itemsize
            outcomes.append(arrays)
        return outcomes

    def alive(self) -> bool:
        """Whether the worker process runs (a dead one is noticed without waiting for a batch)."""
        process = self._process
        return process is not None and process.poll() is None

    # ---------------------------------------------------------------- the Runner, async
    async def warm(self) -> None:
        """Nothing to do: the worker is warm before :meth:`start` returns."""
        if self._process is None:
            await asyncio.get_running_loop().run_in_executor(None, self.start)

    async def run(self, requests: list[list[list[str]]], outputs: list[Output | None]) -> list[Outcome]:
        return await asyncio.get_running_loop().run_in_executor(self._io, self.compute, requests, outputs)

    async def restart(self) -> None:
        """A new worker in place of a dead one, warm when this returns."""
        def again():
            self.stop()
            self.start()

        await asyncio.get_running_loop().run_in_executor(self._io, again)
        self.restarts += 1

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, self.stop)
        self._io.shutdown(wait=True)


if __name__ == "__main__":
    sys.exit(main())
