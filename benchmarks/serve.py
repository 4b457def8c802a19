"""Load of ``elmo serve``: one-sentence requests from 1, 8 and 64 concurrent callers, against a
loop of ``Embedder.embed_sentence`` in one process.

A real ``elmo serve`` process listens on a free port of 127.0.0.1 (loopback only); this process
is the callers: ``concurrency`` asyncio tasks, each on a keep-alive connection of its own (HTTP/1.1
by hand, which costs the shared cores less than an HTTP library), sending ``POST /embed`` with one
sentence and waiting for its vector before the next, so the server batches whoever is waiting. Both share this machine's cores. Each level runs for ``--requests`` requests or
``--seconds`` seconds, whichever comes first, after ``--warmup`` requests that are not counted.
The direct loop embeds the same sentences one by one in this process (the server idle) and pools
them as the server does (mean over tokens of the layers' average), on as many CPU threads as the
server's model uses (``--server-threads``, else ``elmo serve``'s default). Sentences: the 30 of the
built-in warm-up text (9 to 17 tokens), in turn.

Prints a table and writes JSON (throughput, p50 and p99 latency per level; the ratios the issue's
targets are about):

    nice -n 10 python benchmarks/serve.py --output results/benchmarks/serve.json
    python benchmarks/serve.py --quick --output serve.json   # concurrency 1 and 8, 1 s each: seconds

``--soak SECONDS`` is the overload and fault run instead (loopback only, bounded in time and
traffic): the capacity measured for a mix of request sizes, then twice that offered for SECONDS
(new connections at random times, some callers hanging up unanswered), the model's process
killed half-way; it reports requests served, 429s, 5xx, p50/p99 and the server's memory at the
start and end. ``--interference SECONDS`` measures one-sentence latency alone and while
16,384-token ``/embed_all`` requests are in flight (``docs/serving.md`` has both).

``revisions.py serve`` drives two checkouts' servers with the same callers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402

import torch  # noqa: E402

from elmo import Embedder, load_model  # noqa: E402
from elmo.cli.serve import model_threads  # noqa: E402
from elmo.inference.states import warmup_text  # noqa: E402


def sentences() -> list[str]:
    return [line.strip() for line in warmup_text().decode("utf-8").splitlines() if line.strip()]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def summary(latencies: list[float], seconds: float) -> dict:
    """Requests, throughput and latency (milliseconds) of one measured run."""
    return {"requests": len(latencies), "seconds": round(seconds, 3),
            "throughput_rps": round(len(latencies) / seconds, 1),
            "p50_ms": round(1000 * percentile(latencies, 50), 2), "p99_ms": round(1000 * percentile(latencies, 99), 2),
            "mean_ms": round(1000 * statistics.fmean(latencies), 2)}


def direct(texts: list[str], model: str | None, requests: int, seconds: float, warmup: int,
           threads: int | None) -> dict:
    """``embed_sentence`` in a loop, pooled as the server pools, on ``threads`` CPU threads
    (those of the server's model)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    embedder = Embedder(load_model(model))
    latencies: list[float] = []
    for i in range(warmup):
        embedder.embed_sentence(texts[i % len(texts)], layers="average").mean(axis=0)
    started = time.perf_counter()
    i = 0
    while len(latencies) < requests and time.perf_counter() - started < seconds:
        t = time.perf_counter()
        embedder.embed_sentence(texts[i % len(texts)], layers="average").mean(axis=0)
        latencies.append(time.perf_counter() - t)
        i += 1
    return summary(latencies, time.perf_counter() - started)


class Connection:
    """One keep-alive HTTP/1.1 connection to the server, written by hand on asyncio streams: the
    callers share the server's 2 cores, and httpx spent more of them than the server did (at
    concurrency 64 the server answered in 84 ms on average, by its own /metrics, while httpx's
    callers saw 898 ms)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host
        self.reopened = 0

    @classmethod
    async def open(cls, base: str) -> "Connection":
        host, port = base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer to ``POST path``. A connection the server closed
        while it was idle (HTTP keep-alive allows it) is opened again, once, as HTTP clients do;
        :attr:`reopened` counts them."""
        try:
            return await self._post(path, body)
        except (asyncio.IncompleteReadError, ConnectionResetError) as e:
            if isinstance(e, asyncio.IncompleteReadError) and e.partial:
                raise
        self.writer.close()
        self.reader, self.writer = await asyncio.open_connection(*self.host.rsplit(":", 1))
        self.reopened += 1
        return await self._post(path, body)

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = dict(line.lower().split(":", 1) for line in lines[1:] if ":" in line)
        if "content-length" in headers:
            return status, await self.reader.readexactly(int(headers["content-length"]))
        parts = []  # chunked: the server writes a big answer in pieces
        while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)
        await self.reader.readuntil(b"\r\n")
        return status, b"".join(parts)

    def close(self) -> None:
        self.writer.close()


async def load(base: str, texts: list[str], concurrency: int, requests: int, seconds: float, warmup: int) -> dict:
    """``concurrency`` callers, each on its own connection, sending one sentence at a time and
    waiting for its vector before the next."""
    latencies: list[float] = []
    sent = 0
    bodies = [json.dumps({"inputs": text, "normalize": False}).encode() for text in texts]
    connections = [await Connection.open(base) for _ in range(concurrency)]

    async def caller(k: int, count: int | None, until: float | None, record: bool):
        nonlocal sent
        n = 0
        while (count is None or n < count) and (until is None or time.perf_counter() < until):
            if record and sent >= requests:
                return
            if record:
                sent += 1
            t = time.perf_counter()
            status, body = await connections[k].post("/embed", bodies[(k * 7 + n) % len(bodies)])
            elapsed = time.perf_counter() - t
            if status != 200:
                raise SystemExit(f"POST /embed: {status} {body.decode(errors='replace')}")
            if n == 0 and len(json.loads(body)[0]) < 2:  # a vector came back
                raise SystemExit(f"POST /embed: not a vector: {body[:200]!r}")
            if record:
                latencies.append(elapsed)
            n += 1

    try:
        per_caller = max(1, warmup // concurrency)
        await asyncio.gather(*(caller(k, per_caller, None, False) for k in range(concurrency)))
        started = time.perf_counter()
        until = started + seconds
        await asyncio.gather(*(caller(k, None, until, True) for k in range(concurrency)))
        wall = time.perf_counter() - started
    finally:
        for connection in connections:
            connection.close()
    result = summary(latencies, wall)
    result["connections_reopened"] = sum(c.reopened for c in connections)
    return result


def start_server(model: str | None, max_wait_ms: float, max_batch_tokens: int,
                 threads: int | None, env: dict | None = None,
                 extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """An ``elmo serve`` process on a free port of 127.0.0.1 (``env``: its environment, e.g. another
    checkout first on ``PYTHONPATH``; ``extra``: more options), once it says it is ready: the
    process and its base URL."""
    command = [sys.executable, "-m", "elmo.cli.main", "serve", "--port", "0", "--no-access-log",
               "--max-wait-ms", str(max_wait_ms), "--max-batch-tokens", str(max_batch_tokens), *extra]
    if model:
        command += ["--model", model]
    if threads:
        command += ["--threads", str(threads)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    for line in process.stderr:
        found = re.search(r"ready on (http://\S+)", line)
        if found:
            return process, found.group(1)
    raise SystemExit(f"elmo serve did not start (status {process.wait()})")


# ------------------------------------------------------------------------------ soak and faults
def rss_mib(pid: int) -> float:
    """Resident memory of a process (Linux), MiB; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return 0.0


def model_process(server_pid: int) -> int | None:
    """The model's process: the server's child (Linux), of whichever of its threads started it
    (a new one is started by the thread that talks to the model)."""
    children = []
    try:
        for task in os.listdir(f"/proc/{server_pid}/task"):
            with open(f"/proc/{server_pid}/task/{task}/children") as f:
                children += [int(p) for p in f.read().split()]
    except OSError:
        return None
    return children[0] if children else None


def memory(server_pid: int) -> dict:
    worker = model_process(server_pid)
    return {"server_mib": round(rss_mib(server_pid), 1), "model_mib": round(rss_mib(worker), 1) if worker else 0.0}


class Mix:
    """The soak's requests, drawn at random: mostly one sentence on /embed, some batches of 16 on
    /v1/embeddings, a few big /embed_all of about 1,000 tokens (the top layer: about 5 MB of
    JSON), and callers who send a sentence and hang up without reading the answer."""

    KINDS = (("one", 0.75), ("batch", 0.14), ("big", 0.05), ("abandoned", 0.06))

    def __init__(self, texts: list[str], seed: int = 0):
        import random

        self.random = random.Random(seed)
        self.texts = texts
        words = " ".join(texts).split()
        self.big = json.dumps({"inputs": [" ".join(words[i:i + 20]) for i in range(0, 1000, 20)],
                               "layers": "top"}).encode()

    def draw(self) -> tuple[str, str, bytes]:
        kind = self.random.choices([k for k, _ in self.KINDS], [w for _, w in self.KINDS])[0]
        text = self.random.choice(self.texts)
        if kind in ("one", "abandoned"):
            return kind, "/embed", json.dumps({"inputs": text}).encode()
        if kind == "batch":
            return kind, "/v1/embeddings", json.dumps({"input": self.random.sample(self.texts, 16)}).encode()
        return kind, "/embed_all", self.big


async def one_request(base: str, path: str, body: bytes, abandon: bool, timeout: float) -> tuple[str, float]:
    """Send one request on a new connection: its outcome (the status, ``"503 killed batch"``
    for a request lost with the model's process, ``"abandoned"``, ``"timeout"`` or
    ``"connection error"``) and seconds."""
    started = time.perf_counter()
    connection = None
    try:
        connection = await asyncio.wait_for(Connection.open(base), timeout)
        if abandon:
            connection.writer.write(f"POST {path} HTTP/1.1\r\nHost: {connection.host}\r\nContent-Type: "
                                    f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            await connection.writer.drain()
            await asyncio.sleep(0.01)
            return "abandoned", time.perf_counter() - started
        status, answer = await asyncio.wait_for(connection._post(path, body), timeout)
        if status == 503 and b"model worker died" in answer:
            return "503 killed batch", time.perf_counter() - started
        return str(status), time.perf_counter() - started
    except TimeoutError:
        return "timeout", time.perf_counter() - started
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return "connection error", time.perf_counter() - started
    finally:
        if connection is not None:
            connection.close()


async def closed_loop_rate(base: str, mix: Mix, concurrency: int, seconds: float) -> float:
    """Requests per second the server answers (200) of the mix, abandoned callers aside, with
    ``concurrency`` callers each waiting for its answer before the next: its capacity."""
    done = 0
    until = time.perf_counter() + seconds

    async def caller():
        nonlocal done
        while time.perf_counter() < until:
            kind, path, body = mix.draw()
            if kind == "abandoned":
                continue
            outcome, _ = await one_request(base, path, body, False, 60)
            done += outcome == "200"

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


async def soak(base: str, process: subprocess.Popen, texts: list[str], seconds: float, capacity_seconds: float,
               factor: float, timeout: float) -> dict:
    """The mix at ``factor`` times the measured capacity (arrivals at random, Poisson, each on a
    new connection, whether or not earlier ones were answered) for ``seconds``; the model's
    process killed (SIGKILL) half-way. Outcomes by kind, latencies of the answered ones,
    memory at the start and end."""
    import random
    import signal

    mix = Mix(texts)
    # At 64 callers the server batches as well as it can (the table of docs/serving.md): its
    # capacity; fewer would understate it, and twice that would not overload it.
    capacity = await closed_loop_rate(base, mix, 64, capacity_seconds)
    rate = factor * capacity
    arrivals = random.Random(1)
    outcomes: dict[str, dict[str, int]] = {}
    latencies: dict[str, list[float]] = {}
    tasks: set[asyncio.Task] = set()
    result: dict = {"capacity_rps": round(capacity, 1), "offered_rps": round(rate, 1), "seconds": seconds,
                    "factor": factor, "memory_start": memory(process.pid)}
    peak = dict(result["memory_start"])

    async def request(kind, path, body):
        outcome, elapsed = await one_request(base, path, body, kind == "abandoned", timeout)
        outcomes.setdefault(kind, {}).setdefault(outcome, 0)
        outcomes[kind][outcome] += 1
        if outcome == "200":
            latencies.setdefault(kind, []).append(elapsed)

    started = time.perf_counter()
    killed = None
    next_sample = started
    while (now := time.perf_counter()) - started < seconds:
        if killed is None and now - started >= seconds / 2:
            worker = model_process(process.pid)
            if worker:
                os.kill(worker, signal.SIGKILL)
                killed = {"pid": worker, "at_s": round(now - started, 1)}
        if now >= next_sample:
            for key, value in memory(process.pid).items():
                peak[key] = max(peak[key], value)
            next_sample = now + 1
        task = asyncio.ensure_future(request(*mix.draw()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        await asyncio.sleep(arrivals.expovariate(rate))
    if tasks:
        await asyncio.wait(tasks)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["memory_end"] = memory(process.pid)
    result["memory_peak"] = peak
    result["killed"] = killed
    result["outcomes"] = outcomes
    answered = [x for kind in ("one", "batch", "big") for x in latencies.get(kind, [])]
    result["latency_ms"] = {kind: {"p50": round(1000 * percentile(values, 50), 1),
                                   "p99": round(1000 * percentile(values, 99), 1), "n": len(values)}
                            for kind, values in [*latencies.items(), ("all", answered)] if values}
    totals: dict[str, int] = {}
    for by_outcome in outcomes.values():
        for outcome, n in by_outcome.items():
            totals[outcome] = totals.get(outcome, 0) + n
    result["totals"] = totals
    result["sent"] = sum(totals.values())
    result["served"] = totals.get("200", 0)
    result["refused_429"] = totals.get("429", 0)
    result["errors_5xx"] = sum(n for outcome, n in totals.items() if outcome.startswith("5"))
    result["errors_5xx_outside_killed_batch"] = result["errors_5xx"] - totals.get("503 killed batch", 0)
    return result


async def interference(base: str, texts: list[str], seconds: float, big_tokens: int, big_callers: int,
                       abandoned: int = 200) -> dict:
    """One caller sending one sentence at a time: alone; right after ``abandoned`` callers sent
    16 sentences each and hung up; and while ``big_callers`` callers each keep a ``/embed_all``
    of ``big_tokens`` tokens (all layers) in flight. The one-sentence latency, p50 and p99,
    each way."""
    words = " ".join(texts).split()
    per = 256  # tokens per input: within the default --max-input-tokens
    inputs = [" ".join(words[(i + j) % len(words)] for j in range(per)) for i in range(0, big_tokens, per)]
    big = json.dumps({"inputs": inputs, "layers": "all"}).encode()
    small = [json.dumps({"inputs": text}).encode() for text in texts]

    async def small_caller(until: float) -> list[float]:
        connection = await Connection.open(base)
        out = []
        i = 0
        try:
            while time.perf_counter() < until:
                t = time.perf_counter()
                status, _ = await connection.post("/embed", small[i % len(small)])
                if status != 200:
                    raise SystemExit(f"POST /embed: {status}")
                out.append(time.perf_counter() - t)
                i += 1
        finally:
            connection.close()
        return out

    big_answers = []

    async def big_caller(until: float):
        connection = await Connection.open(base)
        try:
            while time.perf_counter() < until:
                t = time.perf_counter()
                status, body = await connection.post("/embed_all", big)
                if status != 200:
                    raise SystemExit(f"POST /embed_all: {status} {body[:200]!r}")
                big_answers.append((time.perf_counter() - t, len(body)))
        finally:
            connection.close()

    alone = await small_caller(time.perf_counter() + seconds)
    # A burst of callers who send 16 sentences each and hang up at once, then a live caller:
    # what they left behind should not be computed ahead of it.
    burst = json.dumps({"input": texts[:16]}).encode()
    await asyncio.gather(*(one_request(base, "/v1/embeddings", burst, True, 30) for _ in range(abandoned)))
    after_burst = await small_caller(time.perf_counter() + seconds)
    until = time.perf_counter() + seconds
    bigs = [asyncio.ensure_future(big_caller(until)) for _ in range(big_callers)]
    await asyncio.sleep(0.5)  # the big requests are in flight
    loaded = await small_caller(until)
    await asyncio.gather(*bigs)

    def row(values):
        return {"n": len(values), "first_ms": round(1000 * values[0], 2),
                "p50_ms": round(1000 * percentile(values, 50), 2),
                "p99_ms": round(1000 * percentile(values, 99), 2), "max_ms": round(1000 * max(values), 2)}

    return {"big_tokens": big_tokens, "big_callers": big_callers, "alone": row(alone),
            "abandoned_burst": abandoned, "after_abandoned": row(after_burst), "with_big": row(loaded),
            "big_answers": len(big_answers),
            "big_seconds_mean": round(statistics.fmean(t for t, _ in big_answers), 2) if big_answers else None,
            "big_answer_mb": round(big_answers[0][1] / 2**20, 1) if big_answers else None}


def run_soak(args, texts: list[str], results: dict) -> None:
    results["load_average_before"] = os.getloadavg()[0]
    env = None
    if args.server_src:  # another build's server, for a comparison
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.abspath(args.server_src),
                                                             *filter(None, [os.environ.get("PYTHONPATH")])])}
    process, base = start_server(args.model, args.max_wait_ms, args.max_batch_tokens, args.server_threads, env)
    try:
        if args.interference:
            results["interference"] = asyncio.run(interference(base, texts, args.interference, 16384, 2))
            row = results["interference"]
            print(f"one sentence alone:            p50 {row['alone']['p50_ms']:8.2f} ms  "
                  f"p99 {row['alone']['p99_ms']:8.2f} ms  ({row['alone']['n']} requests)")
            print(f"after 200 callers hung up:     p50 {row['after_abandoned']['p50_ms']:8.2f} ms  "
                  f"p99 {row['after_abandoned']['p99_ms']:8.2f} ms  first {row['after_abandoned']['first_ms']:.2f} ms "
                  f"({row['after_abandoned']['n']} requests)")
            print(f"with 2 x 16,384-token embed_all: p50 {row['with_big']['p50_ms']:8.2f} ms  "
                  f"p99 {row['with_big']['p99_ms']:8.2f} ms  ({row['with_big']['n']} requests; "
                  f"{row['big_answers']} big answers of {row['big_answer_mb']} MB, {row['big_seconds_mean']} s each)")
        if args.soak:
            results["soak"] = row = asyncio.run(soak(base, process, texts, args.soak, args.capacity_seconds,
                                                     args.overload, args.client_timeout))
            print(f"capacity {row['capacity_rps']} req/s; offered {row['offered_rps']} req/s for {row['seconds']} s; "
                  f"model process killed at {row['killed'] and row['killed']['at_s']} s")
            print(f"sent {row['sent']}, served {row['served']}, 429 {row['refused_429']}, 5xx {row['errors_5xx']} "
                  f"({row['errors_5xx_outside_killed_batch']} outside the killed batch); all outcomes {row['totals']}")
            for kind, lat in row["latency_ms"].items():
                print(f"  {kind:<10} p50 {lat['p50']:9.1f} ms  p99 {lat['p99']:9.1f} ms  ({lat['n']} answered)")
            print(f"memory (MiB) start {row['memory_start']}, peak {row['memory_peak']}, end {row['memory_end']}")
        with urllib_request(base + "/health") as health:
            results["health_after"] = health.status
        results["server_alive_after"] = process.poll() is None
    finally:
        process.terminate()
        process.wait(60)
    results["load_average_after"] = os.getloadavg()[0]


def urllib_request(url: str):
    import urllib.request

    return urllib.request.urlopen(url, timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model source (default: the packaged model)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--requests", type=int, default=2000, help="requests measured per level, at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds measured per level, at most")
    parser.add_argument("--warmup", type=int, default=128, help="requests per level not measured")
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--server-threads", type=int,
                        help="the server's --threads, and the direct loop's (default: elmo serve's default)")
    parser.add_argument("--output", help="JSON file to write (e.g. results/benchmarks/serve.json)")
    parser.add_argument("--quick", action="store_true",
                        help="concurrency 1 and 8, 1 s and 16 warm-up requests each: the code, in seconds")
    parser.add_argument("--soak", type=float, metavar="SECONDS",
                        help="instead: the soak and fault run, this long (60 to 120 s): the mixed load at --overload "
                             "times the measured capacity, abandoned callers, the model's process killed half-way")
    parser.add_argument("--overload", type=float, default=2.0, help="the soak's load, times the capacity")
    parser.add_argument("--capacity-seconds", type=float, default=10.0, help="seconds to measure the capacity")
    parser.add_argument("--client-timeout", type=float, default=30.0, help="a soak request's timeout, seconds")
    parser.add_argument("--interference", type=float, metavar="SECONDS",
                        help="instead (or before the soak): one-sentence latency alone, then while two callers keep "
                             "16,384-token /embed_all requests in flight, this long each")
    parser.add_argument("--server-src", metavar="DIR",
                        help="with --soak or --interference: run the server of another build's source folder "
                             "(its src), to compare builds")
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency, args.seconds, args.warmup = [1, 8], 1.0, 16
    texts = sentences()
    results: dict = {"command": "python benchmarks/serve.py " + " ".join(sys.argv[1:] if argv is None else argv),
                     "model": args.model or "default", "endpoint": "POST /embed, one sentence per request",
                     "max_wait_ms": args.max_wait_ms, "max_batch_tokens": args.max_batch_tokens,
                     "server_threads": args.server_threads,
                     "sentence_tokens": [len(t.split()) for t in texts]}
    if args.soak or args.interference:
        run_soak(args, texts, results)
        if args.output:
            write_results(args.output, results)
        return
    threads = args.server_threads or model_threads(None)
    results["direct_threads"] = threads or torch.get_num_threads()
    results["load_average_before"] = os.getloadavg()[0]
    results["direct"] = direct(texts, args.model, args.requests, args.seconds, args.warmup, threads)
    process, base = start_server(args.model, args.max_wait_ms, args.max_batch_tokens, args.server_threads)
    try:
        results["server"] = {str(c): asyncio.run(load(base, texts, c, args.requests, args.seconds, args.warmup))
                             for c in args.concurrency}
    finally:
        process.terminate()
        process.wait(60)
    results["load_average_after"] = os.getloadavg()[0]
    server = results["server"]
    lowest, highest = str(min(args.concurrency)), str(max(args.concurrency))
    results["throughput_ratio"] = round(server[highest]["throughput_rps"] / server[lowest]["throughput_rps"], 2)
    results["throughput_vs_direct"] = round(server[highest]["throughput_rps"] / results["direct"]["throughput_rps"], 2)
    results["p50_overhead_ms"] = round(server[lowest]["p50_ms"] - results["direct"]["p50_ms"], 2)
    print(f"{'':<22} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    rows = [("embed_sentence loop", results["direct"])] + [(f"server, concurrency {c}", server[str(c)])
                                                           for c in args.concurrency]
    for name, row in rows:
        print(f"{name:<22} {row['requests']:>8} {row['throughput_rps']:>8.1f} {row['p50_ms']:>8.2f} "
              f"{row['p99_ms']:>8.2f}")
    print(f"load average {results['load_average_before']:.2f} before, {results['load_average_after']:.2f} after")
    print(f"throughput at concurrency {highest} / concurrency {lowest}: {results['throughput_ratio']:.2f}x "
          f"(/ the direct loop: {results['throughput_vs_direct']:.2f}x); "
          f"p50 at concurrency {lowest} minus the direct call's: {results['p50_overhead_ms']:+.2f} ms")
    if args.output:
        write_results(args.output, results)


if __name__ == "__main__":
    main()
