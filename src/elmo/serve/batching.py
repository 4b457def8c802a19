"""Dynamic batching: requests that arrive one sentence at a time, embedded together.

Every request puts its sentences in one queue and awaits them. One task of the event loop takes
requests off the queue into a batch, until the batch holds ``max_batch_tokens`` tokens (each
sentence counts its tokens plus its two boundary markers, as the biLM runs them), or
``max_wait_ms`` have passed since the batch's first request arrived, or no other request is on
its way (:meth:`Batcher.expecting`: the server has begun to read it), and hands the batch to the
model (:meth:`Embedder.embed_sentences <elmo.inference.embed.Embedder.embed_sentences>`: sorted by
length, padded little). While the model computes, the next requests queue up, so that a busy
server batches without waiting.

Where the model runs is a *runner*'s business: :class:`InThreadModel` runs an :class:`Embedder`
on one thread of this process; :class:`elmo.serve.worker.ProcessModel` runs it in a process of
its own, which is what ``elmo serve`` does, because in one process the model's thread and the
thread answering HTTP share one interpreter lock, which PyTorch gives up and takes back around
each of a batch's thousands of small operators (``docs/serving.md`` has the measurements).

Under the ``warm`` and ``reset`` state policies a sentence's vectors do not depend on what else is
in its batch (``docs/state.md``), so every answer is exactly what :class:`Embedder` gives for that
input alone; the ``stateful`` policy, whose vectors depend on the order of batches, is refused.

A batch that fails is run again one request at a time, so that only the requests that fail alone
get the error; a request whose caller went away before its batch ran is not computed. If the
model's process dies, its batch's requests get :class:`WorkerCrashed` and the runner is
restarted; if it cannot be restarted, the batcher stops (``on_fatal``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from elmo.checks import check_count, check_number
from elmo.inference.embed import Embedder
from elmo.inference.states import warmup_sentences
from elmo.serve.protocol import Output

LOG = logging.getLogger("elmo.serve")

DEFAULT_MAX_BATCH_TOKENS = 4096
DEFAULT_MAX_WAIT_MS = 2.0
# Tokens a sentence costs in a batch besides its own: the <S> and </S> the biLM reads around it.
BOUNDARY_TOKENS = 2


def batch_tokens(sentences: Sequence[Sequence[str]]) -> int:
    """What ``sentences`` cost against ``max_batch_tokens``: their tokens plus boundaries."""
    return sum(len(s) + BOUNDARY_TOKENS for s in sentences)


@dataclass
class BatchRecord:
    """One batch the worker ran: its requests, sentences and tokens (without boundaries), the
    seconds it computed, the seconds each request waited in the queue, and how many failed."""

    requests: int
    sentences: int
    tokens: int
    seconds: float
    queue_seconds: list[float] = field(default_factory=list)
    failed: int = 0


def new_model_thread() -> ThreadPoolExecutor:
    """An executor of one thread, for everything that runs the model: loading, warming,
    batches. With OpenMP (PyTorch's CPU threads), each thread that runs parallel work keeps a team
    of threads of its own, and more threads than cores make libgomp stop spinning between parallel
    regions: on the 2-core development machine, one sentence took about twice as long once a
    second thread had run the model (a first, noisy measurement). So the thread that loads the
    model should also be the one that runs it."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-serve-model")


class ServerClosed(RuntimeError):
    """The batcher is stopping or stopped: it takes no new request."""


class WorkerCrashed(RuntimeError):
    """The model's process died while it computed the batch of this request (which may be
    well-formed: it failed with everything else in its batch)."""


class Overloaded(RuntimeError):
    """Taking this request would pass ``max_queued_tokens``: come back in :attr:`retry_after`
    seconds (HTTP 429)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class BatchLost(RuntimeError):
    """The batching task failed while this request's batch was in its hands (a bug, or an
    error of the runner that it did not report as a crash); the task was started again
    (HTTP 503: try again)."""


class EmbeddingFailed(RuntimeError):
    """The model raised on this request, in another process: the message is the error's type
    and message there, ``"RuntimeError: ..."``."""


Outcome = list[np.ndarray] | BaseException


def compute_requests(embedder: Embedder, requests: list[list[list[str]]],
                     outputs: Sequence[Output | None] | None = None) -> list[Outcome]:
    """Every request's arrays, from one :meth:`Embedder.embed_sentences` call for the whole
    batch: one ``(layers, tokens, dim)`` float32 array per sentence, or what the request's
    :class:`~elmo.serve.protocol.Output` in ``outputs`` makes of it (its layers, its pooled
    vector). If the batch fails, from one call per request, each request getting its own error
    (an exception in place of its arrays)."""
    outputs = list(outputs) if outputs is not None else [None] * len(requests)

    def shaped(arrays, output):
        return list(arrays) if output is None else [output.apply(a) for a in arrays]

    try:
        arrays = embedder.embed_sentences([s for sentences in requests for s in sentences])
        out, start = [], 0
        for sentences, output in zip(requests, outputs):
            out.append(shaped(arrays[start:start + len(sentences)], output))
            start += len(sentences)
        return out
    except Exception as error:
        if len(requests) == 1:
            return [error]
    outcomes: list[Outcome] = []
    for sentences, output in zip(requests, outputs):
        try:
            outcomes.append(shaped(embedder.embed_sentences(sentences), output))
        except Exception as error:
            outcomes.append(error)
    return outcomes


def model_info(embedder: Embedder) -> dict:
    """What ``/info`` says of the model an embedder runs."""
    config = embedder.model.config
    return {"layers": config.n_output_layers, "dimensions": config.output_dim,
            "precision": embedder.runtime.precision, "state": embedder.state, "device": str(embedder.device)}


def refuse_stateful(state: str) -> None:
    """Refuse the ``stateful`` policy, under which one caller's vectors would depend on others'."""
    if state == "stateful":
        raise ValueError("state: the stateful policy makes a sentence's vectors depend on the batches before it, "
                         "so a server's answers would depend on other callers; use 'warm' (the default) or "
                         "'reset'")


class Runner(Protocol):
    """Where a :class:`Batcher`'s batches are computed. ``info``: :func:`model_info`'s dict.
    ``run`` gives one outcome per request (:func:`compute_requests`, each request shaped by its
    output, None: the activations as they are) or raises :class:`WorkerCrashed`, after which
    ``restart`` is awaited before the next ``run``."""

    info: dict

    async def warm(self) -> None: ...

    async def run(self, requests: list[list[list[str]]], outputs: list[Output | None]) -> list[Outcome]: ...

    async def restart(self) -> None: ...

    async def close(self) -> None: ...


class InThreadModel:
    """A :class:`Runner` that runs ``embedder`` on one thread of this process
    (``model_thread``, :func:`new_model_thread`, best the thread that loaded it). Simple, and
    what an :class:`Embedder` handed to :func:`elmo.serve.app.create_app` gets; under load the
    HTTP work of the same process slows it down (see :mod:`elmo.serve.worker`)."""

    def __init__(self, embedder: Embedder, model_thread: ThreadPoolExecutor | None = None):
        refuse_stateful(embedder.state)
        self.embedder = embedder
        self.info = model_info(embedder)
        self._executor = model_thread or new_model_thread()

    async def warm(self) -> None:
        """Run the model once on the built-in warm-up text (computes or loads the warm state and
        fills the token memo)."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self.embedder.embed_sentences,
                                                         warmup_sentences())

    async def run(self, requests: list[list[list[str]]], outputs: list[Output | None]) -> list[Outcome]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, compute_requests, self.embedder,
                                                                requests, outputs)

    async def restart(self) -> None:  # a thread does not crash on its own
        raise RuntimeError("an in-thread model cannot be restarted")

    async def close(self) -> None:
        # Waits for a batch still running, off the event loop, which may have to answer others.
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)


@dataclass
class _Coming:
    arrived: bool = False


@dataclass
class _Job:
    sentences: list[list[str]]
    cost: int
    future: asyncio.Future
    queued_at: float
    output: Output | None = None
    taken: int = 0  # sentences handed to batches so far
    done: int = 0  # sentences answered so far
    results: list = field(default_factory=list)

    def __post_init__(self):
        self.results = [None] * len(self.sentences)


# Failures of the batching task in a row (without a batch answered between them) after which it
# is not started again: the server says it is broken and stops, for a supervisor to act.
MAX_LOOP_FAILURES = 3
# Seconds between two looks at an idle model's process (/health turns 503 within them of its death).
WATCH_SECONDS = 0.25


class Batcher:
    """Gathers the sentences of concurrent requests into batches for one model.

    ``model``: an :class:`Embedder` (run on ``model_thread`` of this process, :class:`InThreadModel`)
    or a :class:`Runner` such as :class:`elmo.serve.worker.ProcessModel`. ``max_batch_tokens``: a
    batch closes once it holds this many tokens (boundaries included); a request bigger than what
    is left of it is computed a part at a time, its rest going to the back of the queue after
    each part (a sentence bigger than the budget runs alone). ``max_wait_ms``: the longest a
    request waits for others while the model is idle, and only while others are on their way
    (requests inside :meth:`expecting` that have not reached :meth:`embed` yet): a lone caller
    does not wait at all. ``max_queued_tokens``: the
    most tokens (boundaries included) taken and not yet answered; a request that would pass it
    is refused with :class:`Overloaded` (unless nothing else is queued: a big request alone is
    always taken). None: no bound.
    ``on_batch`` is called in the event loop with a :class:`BatchRecord` after each batch
    (metrics); ``on_dropped`` with ``"queued"`` for a request dropped before its batch because
    its caller left, ``"computing"`` for one whose answer came after its caller left;
    ``on_restart`` after the runner was restarted following a crash; ``on_fatal`` with a
    message if it could not be, or if the batching task failed :data:`MAX_LOOP_FAILURES` times
    in a row (the batcher has stopped: every request gets :class:`ServerClosed`). Use from one
    event loop: :meth:`start`, then :meth:`embed` from any number of tasks, then :meth:`stop`.
    """

    def __init__(self, model: Embedder | Runner, *, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 max_wait_ms: float = DEFAULT_MAX_WAIT_MS, max_queued_tokens: int | None = None,
                 on_batch: Callable[[BatchRecord], None] | None = None,
                 model_thread: ThreadPoolExecutor | None = None, on_restart: Callable[[], None] | None = None,
                 on_fatal: Callable[[str], None] | None = None,
                 on_dropped: Callable[[str], None] | None = None):
        check_count(max_batch_tokens, "max_batch_tokens")
        check_number(max_wait_ms, "max_wait_ms")
        if max_queued_tokens is not None:
            check_count(max_queued_tokens, "max_queued_tokens")
        self.runner: Runner = InThreadModel(model, model_thread) if isinstance(model, Embedder) else model
        refuse_stateful(self.runner.info["state"])
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queued_tokens = max_queued_tokens
        self.on_batch, self.on_restart, self.on_fatal = on_batch, on_restart, on_fatal
        self.on_dropped = on_dropped
        self._pending: deque[_Job] = deque()
        self._pending_cost = 0
        self._current: list[_Job] = []  # the batch being computed
        self._taken_cost = 0  # tokens taken by embed() and not yet answered
        self._tokens_per_second = 0.0  # of recent batches, for Retry-After
        self._coming = 0  # requests being read that will call embed()
        self._arrived: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False
        self._broken: str | None = None  # why the batcher stopped on its own
        self._ready = False
        self.loop_restarts = 0

    @property
    def ready(self) -> bool:
        """Whether requests are being answered: started, warm, not stopping, not restarting its
        model, and its batching task alive."""
        return (self._ready and self._broken is None and self._task is not None and not self._task.done()
                and self._runner_alive())

    def _runner_alive(self) -> bool:
        alive = getattr(self.runner, "alive", None)
        return True if alive is None else alive()

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value

    @property
    def queued(self) -> int:
        """Requests waiting for a batch."""
        return len(self._pending)

    @property
    def queued_tokens(self) -> int:
        """Tokens (boundaries included) taken and not yet answered: queued or being computed."""
        return self._taken_cost

    @property
    def status(self) -> str:
        """Why the batcher is not :attr:`ready`, or ``"ok"``."""
        if self._broken:
            return self._broken
        if self.ready:
            return "ok"
        if self._task is not None and self._task.done() and not self._closing:
            return "the batching task has ended"
        return "the server is stopping" if self._closing else "the server is starting or restarting its model"

    async def start(self, warmup: bool = True) -> None:
        """Start the batching task and, with ``warmup``, warm the model (the runner's
        ``warm``: the warm-up text, which computes or loads the warm state and fills the token
        memo) before :attr:`ready`."""
        if self._task is not None:
            raise RuntimeError("Batcher.start: already started")
        self._arrived = asyncio.Event()
        if warmup:
            await self.runner.warm()
        self._task = asyncio.create_task(self._supervise(), name="elmo-serve-batcher")
        self._task.add_done_callback(self._ended)
        self.ready = True

    @contextlib.contextmanager
    def expecting(self):
        """Around the handling of a request that may call :meth:`embed` (from before its body is
        read): while it has not called it, a batch being formed waits for it (up to
        ``max_wait_ms``). Yields a token to pass to :meth:`embed`."""
        token = _Coming()
        self._coming += 1
        try:
            yield token
        finally:
            if not token.arrived:  # refused, or failed before embed(): nothing more to wait for
                self._coming -= 1
                if self._arrived is not None:
                    self._arrived.set()

    async def embed(self, sentences: Sequence[Sequence[str]], coming: _Coming | None = None, *,
                    output: Output | None = None) -> list[np.ndarray]:
        """The ``(layers, tokens, dim)`` float32 array of each sentence (token lists), as
        ``embedder.embed_sentences(sentences)`` gives them, or what ``output`` makes of it where
        the model runs (:class:`~elmo.serve.protocol.Output`). ``coming``: the token of
        :meth:`expecting` around this request, if any. Cancelling the call (its caller left)
        drops the request if its batch has not started. Raises :class:`Overloaded` past
        ``max_queued_tokens``, :class:`ServerClosed` once stopping or broken."""
        if coming is not None and not coming.arrived:
            coming.arrived = True
            self._coming -= 1
        if self._closing or self._broken or self._task is None or self._task.done():
            raise ServerClosed(self._broken or ("the server is stopping" if self._closing
                                                else "the batcher is not running"))
        rows = [list(s) for s in sentences]
        if not rows:
            return []
        cost = batch_tokens(rows)
        if self.max_queued_tokens is not None and self._taken_cost and \
                self._taken_cost + cost > self.max_queued_tokens:
            raise Overloaded(f"the model is overloaded: {self._taken_cost:,} tokens queued, and this request's "
                             f"{cost:,} would pass max_queued_tokens ({self.max_queued_tokens:,}); try again "
                             "shortly", self.retry_after())
        job = _Job(rows, cost, asyncio.get_running_loop().create_future(), time.perf_counter(), output)
        self._taken_cost += cost
        job.future.add_done_callback(lambda future: self._answered(job, future))
        self._pending.append(job)
        self._pending_cost += job.cost
        self._arrived.set()
        return await job.future

    @contextlib.contextmanager
    def admitted(self, cost: int):
        """Around work for a request done outside the model (``/tokenize``): its ``cost`` in
        tokens counts as taken, under ``max_queued_tokens`` as :meth:`embed`'s requests are
        (:class:`Overloaded` past it, :class:`ServerClosed` once stopping or broken)."""
        if self._closing or self._broken:
            raise ServerClosed(self._broken or "the server is stopping")
        if self.max_queued_tokens is not None and self._taken_cost and \
                self._taken_cost + cost > self.max_queued_tokens:
            raise Overloaded(f"the server is overloaded: {self._taken_cost:,} tokens queued, and this request's "
                             f"{cost:,} would pass max_queued_tokens ({self.max_queued_tokens:,}); try again "
                             "shortly", self.retry_after())
        self._taken_cost += cost
        try:
            yield
        finally:
            self._taken_cost -= cost

    def _answered(self, job: _Job, future: asyncio.Future) -> None:
        """A request's end, whatever it was: its tokens are no longer taken; if its caller left
        (the future cancelled), it is dropped: never computed if no part of it was taken yet."""
        self._taken_cost -= job.cost
        if future.cancelled() and self.on_dropped is not None:
            self.on_dropped("queued" if not job.taken else "computing")

    def retry_after(self) -> int:
        """Seconds until the tokens taken are likely computed (1 to 60), for ``Retry-After``."""
        if self._tokens_per_second <= 0:
            return 1
        return int(min(60, max(1, math.ceil(self._taken_cost / self._tokens_per_second))))

    async def stop(self, timeout: float | None = None) -> None:
        """Take no new request, finish every one taken (those queued and the batch being
        computed) for at most ``timeout`` seconds (None: as long as it takes), fail those left
        with :class:`ServerClosed`, and stop the model. Every request taken is answered or
        failed when this returns."""
        self._closing = True
        self.ready = False
        if self._task is not None:
            deadline = None if timeout is None else time.perf_counter() + timeout
            while (self._pending or self._current) and not self._task.done():
                if deadline is not None and time.perf_counter() > deadline:
                    break
                self._arrived.set()
                await asyncio.sleep(0.005)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # an end that _ended reported
                await self._task
        left = ServerClosed("the server stopped before this request's batch was computed")
        self._fail(self._current, left)
        self._current = []
        self._fail_pending(left)
        await self.runner.close()

    # ------------------------------------------------------------------------------ the loop
    async def _supervise(self) -> None:
        """Run the batching loop; if it fails, fail the batch it held (:class:`BatchLost`) and
        run it again, up to :data:`MAX_LOOP_FAILURES` times in a row; then give up."""
        failures = 0
        while True:
            answered = self._batches = 0
            try:
                await self._run()
                return  # the model could not be restarted: broken, already reported
            except asyncio.CancelledError:
                raise
            except Exception as error:
                answered = self._batches
                what = " ".join(f"{type(error).__name__}: {error}".split())[:500]
                LOG.error("elmo serve: the batching task failed (%s); its batch's requests get 503", what)
                LOG.debug("elmo serve: the batching task's failure", exc_info=True)
                self._fail(self._current, BatchLost(f"the server lost this request's batch ({what})"))
                self._current = []
            failures = 1 if answered else failures + 1
            if failures >= MAX_LOOP_FAILURES:
                self._give_up(f"the batching task failed {failures} times in a row")
                return
            self.loop_restarts += 1

    def _ended(self, task: asyncio.Task) -> None:
        """The batching task's end: expected only while stopping; otherwise the batcher is
        broken, and says so."""
        if self._closing or self._broken:
            return
        error = None if task.cancelled() else task.exception()
        self._give_up(f"the batching task ended ({type(error).__name__}: {error})" if error
                      else "the batching task ended")

    def _give_up(self, why: str) -> None:
        self._broken = why
        self.ready = False
        self._fail(self._current, ServerClosed(why))
        self._current = []
        self._fail_pending(ServerClosed(why))
        if self.on_fatal is not None:
            self.on_fatal(why)

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._arrived.clear()
                try:
                    # Idle, the model's process is looked at every WATCH_SECONDS: one that died
                    # is restarted now (/health says 503 meanwhile), not when a request finds it.
                    await asyncio.wait_for(self._arrived.wait(), WATCH_SECONDS)
                except TimeoutError:
                    if not self._runner_alive() and not self._closing:
                        if not await self._restart(WorkerCrashed("the model worker died while idle")):
                            return
            # The model is idle: wait a little for the requests being read, unless the batch is
            # already full; with none on their way, waiting would only add to the latency.
            deadline = self._pending[0].queued_at + self.max_wait
            while self._pending_cost < self.max_batch_tokens and self._coming > 0:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
            parts = self._take()
            jobs = self._current = [job for job, _, _ in parts]
            if not parts:
                continue
            started = time.perf_counter()
            crashed = None
            try:
                outcomes = await self.runner.run([job.sentences[a:b] for job, a, b in parts],
                                                 [job.output for job in jobs])
            except WorkerCrashed as error:
                crashed = error
                outcomes = [error] * len(parts)
            seconds = time.perf_counter() - started
            failed = 0
            for (job, a, b), outcome in zip(parts, outcomes):
                if job.future.done():  # the caller went away meanwhile (or an earlier part failed)
                    continue
                if isinstance(outcome, BaseException):
                    failed += 1
                    job.future.set_exception(outcome)
                    continue
                job.results[a:b] = outcome
                job.done += b - a
                if job.done == len(job.sentences):
                    job.future.set_result(job.results)
            for job, _, end in parts:
                if end < len(job.sentences) and not job.future.done():
                    self._pending.append(job)  # its rest, after the requests that came meanwhile
            self._current = []
            self._batches += 1
            tokens = sum(len(s) for job, a, b in parts for s in job.sentences[a:b])
            if seconds > 0 and crashed is None:
                rate = tokens / seconds
                self._tokens_per_second = rate if not self._tokens_per_second else \
                    0.8 * self._tokens_per_second + 0.2 * rate
            if self.on_batch is not None:
                record = BatchRecord(requests=len(parts), sentences=sum(b - a for _, a, b in parts),
                                     tokens=tokens, seconds=seconds,
                                     queue_seconds=[started - job.queued_at for job, a, _ in parts if a == 0],
                                     failed=failed)
                try:
                    self.on_batch(record)
                except Exception as error:  # metrics must not stop the batching
                    LOG.error("elmo serve: the per-batch hook failed (%s: %s)", type(error).__name__, error)
            if crashed is not None and not await self._restart(crashed):
                return

    async def _restart(self, crash: WorkerCrashed) -> bool:
        """After the model's process died: a new one, warm, while requests queue (not
        :attr:`ready` meanwhile). If that fails too, the batcher stops: queued and later requests
        get :class:`ServerClosed`, and ``on_fatal`` is told. Whether it goes on."""
        if self._closing:  # stopping anyway: what is queued cannot be computed
            self._fail_pending(ServerClosed(f"the server is stopping and {crash}"))
            return False
        self.ready = False
        try:
            await self.runner.restart()
        except Exception as error:
            self._give_up(f"the model worker died and could not be restarted: {error}")
            return False
        if self.on_restart is not None:
            self.on_restart()
        self.ready = not self._closing
        return True

    @staticmethod
    def _fail(jobs: list[_Job], error: BaseException) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(error)

    def _fail_pending(self, error: BaseException) -> None:
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_exception(error)
        self._pending_cost = 0

    def _take(self) -> list[tuple[_Job, int, int]]:
        """The next batch off the queue, as ``(job, first, end)`` parts (sentences
        ``first:end`` of a request): requests in arrival order while they fit the budget (the
        first sentence always goes, however big); requests whose caller left are dropped. A
        request bigger than what is left of the budget gives a part that fits, and its rest goes
        to the back of the queue once that part is computed (:meth:`_run`): a big request is
        computed a batch at a time, with the requests that came meanwhile between its parts,
        rather than making them all wait for the whole of it."""
        parts: list[tuple[_Job, int, int]] = []
        cost = 0
        while self._pending:
            job = self._pending[0]
            if job.future.done():
                self._pending.popleft()
                self._pending_cost -= sum(batch_tokens([s]) for s in job.sentences[job.taken:])
                continue
            first = end = job.taken
            while end < len(job.sentences):
                sentence_cost = len(job.sentences[end]) + BOUNDARY_TOKENS
                if (parts or end > first) and cost + sentence_cost > self.max_batch_tokens:
                    break
                cost += sentence_cost
                end += 1
            if end == first:
                break  # the batch is full
            self._pending_cost -= sum(batch_tokens([s]) for s in job.sentences[first:end])
            job.taken = end
            parts.append((job, first, end))
            self._pending.popleft()  # with a rest, back in the queue once this part is computed
            if end < len(job.sentences):
                break
        return parts
