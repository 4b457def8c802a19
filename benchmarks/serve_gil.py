"""Why ``elmo serve`` runs its model in a process of its own: one batch of 64 one-sentence
requests (the built-in warm-up text), timed alone, while a Python thread of the same process is
busy making JSON (as the HTTP thread does), at the interpreter's default switch interval (5 ms)
and at 0.5 ms, and while a separate *process* does the same work (same CPU competition, no
shared interpreter lock). Prints one line per case: median and fastest of ``--repeats`` runs.

    nice -n 10 python benchmarks/serve_gil.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import threading
import time

import torch

from elmo import Embedder, load_model
from elmo.inference.states import warmup_sentences


def busy(stop) -> None:
    """JSON of floats until told to stop: the HTTP thread's kind of work."""
    while not stop.is_set():
        json.dumps([float(i) for i in range(2000)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="the model's CPU threads")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    batch = (warmup_sentences() * 3)[:64]
    embedder = Embedder(load_model())
    embedder.embed_sentences(batch)

    def report(case: str) -> None:
        seconds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            embedder.embed_sentences(batch)
            seconds.append(time.perf_counter() - started)
        print(f"threads {args.threads}  {case:<44} median {1000 * statistics.median(seconds):8.1f} ms  "
              f"fastest {1000 * min(seconds):8.1f} ms", flush=True)

    report("alone")
    for interval in (0.005, 0.0005):
        sys.setswitchinterval(interval)
        stop = threading.Event()
        thread = threading.Thread(target=busy, args=(stop,))
        thread.start()
        report(f"a thread of this process busy, switch {interval * 1000:g} ms")
        stop.set()
        thread.join()
    sys.setswitchinterval(0.005)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=busy, args=(stop,))
    process.start()
    time.sleep(1)  # its interpreter has started
    report("another process busy")
    stop.set()
    process.join()
    report("alone again")


if __name__ == "__main__":
    main()
