"""Two builds of ``elmo serve`` against each other, interleaved so that both see the same load of
a shared machine: for each ``--threads`` value and repeat, each build's server is started on
127.0.0.1 and driven at concurrency 1 and 64 by :mod:`serve`'s callers (``POST /embed``, one
sentence per request). One JSON line per run: throughput (requests/s), p50 ms, reopened
connections, and the load average when the server started. ``--old-src``: the ``src`` folder of
the other build, e.g. the merge before the model process::

    git archive e323588 src | tar -x -C "$OLD"     # OLD=an empty folder
    nice -n 10 python benchmarks/serve_ab.py --old-src "$OLD/src" --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import serve  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-src", required=True, help="the src folder of the other build")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    builds = {"old": os.path.abspath(args.old_src),
              "new": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")}
    texts = serve.sentences()
    for _ in range(args.repeats):
        for threads in args.threads:
            for build, src in builds.items():
                os.environ["PYTHONPATH"] = src  # the server process's elmo
                load = os.getloadavg()[0]
                process, base = serve.start_server(None, 2.0, 4096, threads)
                try:
                    while True:  # an older build printed "ready" before it listened
                        try:
                            if httpx.get(base + "/health").status_code == 200:
                                break
                        except httpx.ConnectError:
                            time.sleep(0.05)
                    row = {"build": build, "threads": threads, "load": round(load, 2)}
                    for concurrency in (1, 64):
                        result = asyncio.run(serve.load(base, texts, concurrency, 3000, args.seconds, 128))
                        row[f"c{concurrency}"] = [result["throughput_rps"], result["p50_ms"],
                                                  result["connections_reopened"]]
                    print(json.dumps(row), flush=True)
                finally:
                    process.terminate()
                    process.wait(60)


if __name__ == "__main__":
    main()
