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
        length = next(int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length:"))
        return status, await self.reader.readexactly(length)

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
                 threads: int | None, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """An ``elmo serve`` process on a free port of 127.0.0.1 (``env``: its environment, e.g. another
    checkout first on ``PYTHONPATH``), once it says it is ready: the process and its base URL."""
    command = [sys.executable, "-m", "elmo.cli.main", "serve", "--port", "0", "--no-access-log",
               "--max-wait-ms", str(max_wait_ms), "--max-batch-tokens", str(max_batch_tokens)]
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
    args = parser.parse_args(argv)
    if args.quick:
        args.concurrency, args.seconds, args.warmup = [1, 8], 1.0, 16
    texts = sentences()
    results: dict = {"command": "python benchmarks/serve.py " + " ".join(sys.argv[1:] if argv is None else argv),
                     "model": args.model or "default", "endpoint": "POST /embed, one sentence per request",
                     "max_wait_ms": args.max_wait_ms, "max_batch_tokens": args.max_batch_tokens,
                     "server_threads": args.server_threads,
                     "sentence_tokens": [len(t.split()) for t in texts]}
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
