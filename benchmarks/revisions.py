"""A/B of two checkouts: one job (embed, train or serve) measured on both, in turns, in one run.

Each round runs the job once per checkout (before, after, then any ``--variant``), each in fresh
processes whose ``elmo`` is that checkout's ``src/`` folder, so that the drift of a shared machine
falls on both sides alike; the table gives each measure's median over the rounds, its range, and
the ratio of the medians (and per round) to the earlier checkout.

* ``embed``: ``Embedder`` defaults at ``--precision`` (bfloat16 run even where the runtime would
  choose float32: ``ELMO_BFLOAT16_CHECK=0``) on random weights of the published ``--size``:
  tokens/s over ``--sentences`` sentences at batch 64, and the median latency of up to 30
  sentences of ``--latency-tokens`` tokens embedded alone.
* ``train``: a whole ``elmo finetune`` process continuing ``--model`` (default: the later
  checkout's packaged model) for ``--steps`` steps of ``--batch-size`` x 20 tokens in float32, the
  loss logged at every step: tokens/s per direction by the wall clock, per CPU-second (user +
  system: what waiting for a shared core does not inflate) and of the training loop alone (the
  per-step rows of ``metrics.csv``). Both see the same data, seed and negatives, so their per-step
  losses must agree to float rounding: the largest difference is reported. ``--variant
  NAME=OPTIONS`` runs the later checkout a further way in the same rounds (``fused='--lstm-path
  fused'``).
* ``contention``: whole ``elmo embed`` (the packaged model, ``--lines`` lines) and whole ``elmo
  train`` (the tiny preset, ``--train-tokens`` tokens) of each checkout beside ``--busy`` busy
  processes (default: one per core; pure-Python spin loops, bounded in time and killed at the
  end), at the default threads (``OMP_NUM_THREADS`` and the OpenMP wait variables removed from
  the environment) and at each of ``--threads`` (as ``OMP_NUM_THREADS``, which every checkout
  honours): seconds per run, and the default's time over the best thread count's.
* ``serve``: a real ``elmo serve`` of each checkout on 127.0.0.1 (``--threads``), driven by
  ``serve.py``'s callers at each ``--concurrency`` (``POST /embed``, one sentence per request) for
  ``--seconds`` each: requests/s, p50 ms, connections reopened, and the load average at its start.

Give each checkout's ``src/`` (``git worktree add ../elmo-before COMMIT``, or ``git archive COMMIT
src | tar -x -C DIR``); ``--quick`` runs this checkout against itself on tiny sizes in seconds.

    python benchmarks/revisions.py embed --before ../elmo-before/src --after src \\
        --text DATA/wiki-heldout/train/shard-00000.txt --size small --rounds 5 --output results/benchmarks/revisions_embed.json
    OMP_NUM_THREADS=1 python benchmarks/revisions.py train --before $BEFORE/src --after $AFTER/src \\
        --train DATA/wiki/train/shard-00000.txt --steps 120 --rounds 4 --output results/benchmarks/revisions_train.json
    nice -n 10 python benchmarks/revisions.py serve --before "$OLD/src" --after src --threads 1 --rounds 2
    python benchmarks/revisions.py contention --before $BEFORE/src --after src --rounds 2 \
        --output results/benchmarks/contention_embed_train.json
    python benchmarks/revisions.py embed --quick --output revisions.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
sys.path.insert(0, HERE)

from common import quick_sentences, random_model  # noqa: E402  (standard library only until called)


def checkout_env(src: str, **extra: str) -> dict:
    """This process's environment with ``src`` first on the path: the child's ``elmo``."""
    return {**os.environ, "PYTHONPATH": os.path.abspath(src), **extra}


# ------------------------------------------------------------------------------------ embed
def embed_one(args) -> dict:
    """One side of an embed round, in this process (started by :func:`measure_embed` with the
    checkout's ``elmo`` first on the path)."""
    import elmo
    from elmo import Embedder

    if not os.path.abspath(elmo.__file__).startswith(os.path.abspath(args.src)):
        raise SystemExit(f"elmo came from {elmo.__file__}, not from {args.src}")
    model = random_model(args.size)
    with open(args.text, encoding="utf-8") as f:
        lines = [line.split() for line in f if line.strip()][:args.sentences]
    # float32 by the default, so that a checkout older than the precision option runs too
    embedder = Embedder(model, **({} if args.precision == "float32" else {"precision": args.precision}))
    embedder.embed_sentences(lines[:2])  # the warm state, computed once: not timed
    start = time.perf_counter()
    embedder.embed_sentences(lines)
    seconds = time.perf_counter() - start
    latencies = []
    for sentence in [s for s in lines if len(s) == args.latency_tokens][:30]:
        start = time.perf_counter()
        embedder.embed_sentences([sentence], batch_size=1)
        latencies.append(time.perf_counter() - start)
    if not latencies:
        raise SystemExit(f"{args.text}: no sentence of {args.latency_tokens} tokens among the first {args.sentences}")
    return {"tokens_per_second": sum(map(len, lines)) / seconds, "latency_ms": 1000 * statistics.median(latencies)}


def measure_embed(src: str, args, extra: list[str]) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "embed", "--one", "--src", src, "--text", args.text,
               "--sentences", str(args.sentences), "--size", args.size, "--precision", args.precision,
               "--latency-tokens", str(args.latency_tokens)]
    env = checkout_env(src, ELMO_BFLOAT16_CHECK="0", ELMO_CACHE=os.path.join(args.work, "elmo-cache"))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"embed on {src} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ train
def measure_train(src: str, args, extra: list[str]) -> dict:
    """One whole ``elmo finetune`` process on checkout ``src``: speeds and the per-step losses."""
    with tempfile.TemporaryDirectory() as output:
        run_dir = os.path.join(output, "run")
        tokens = args.steps * args.batch_size * 20
        command = [sys.executable, "-m", "elmo.cli.main", "finetune", args.model, "--train", args.train,
                   "--output", run_dir, "--batch-size", str(args.batch_size), "--unroll-steps", "20",
                   "--max-tokens", str(tokens), "--seed", str(args.seed), "--log-every", "1",
                   "--checkpoint-every", str(10 * args.steps), "--no-bf16", "--no-progress", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, env=checkout_env(src), capture_output=True, text=True)
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} (PYTHONPATH={src}) failed:\n{done.stderr[-3000:]}")
        with open(os.path.join(run_dir, "metrics.csv"), newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    # One row per step (--log-every 1), each with its step's wall-clock speed: the training loop's
    # own seconds, without start-up, logging and the checkpoint.
    loop_seconds = sum(args.batch_size * 20 / float(row["tokens_per_second"]) for row in rows)
    return {"seconds": seconds, "tokens_per_second": tokens / seconds, "cpu_seconds": cpu_seconds,
            "tokens_per_cpu_second": tokens / cpu_seconds, "loop_tokens_per_second": tokens / loop_seconds,
            "losses": [float(row["loss"]) for row in rows]}


# ------------------------------------------------------------------------------- contention
# The environment a user who set nothing has: what the default thread count and wait policy are
# made of (this script itself is often run with OMP_NUM_THREADS=1).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def start_busy(count: int, seconds: float) -> list[subprocess.Popen]:
    """``count`` processes that each keep a core busy for at most ``seconds``."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(count)]


def stop_busy(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def contention_env(src: str, threads: int | None) -> dict:
    env = {k: v for k, v in checkout_env(src).items() if k not in THREAD_VARIABLES}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def timed(command: list[str], env: dict, what: str) -> dict:
    """One whole process: wall-clock and CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{what}: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return {"seconds": seconds, "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def measure_contention(src: str, args, threads: int | None) -> dict:
    """``elmo embed`` and ``elmo train`` of checkout ``src``, whole processes, at ``threads``
    (None: the default)."""
    env = contention_env(src, threads)
    elmo = [sys.executable, "-m", "elmo.cli.main"]
    with tempfile.TemporaryDirectory(dir=args.work) as out:
        embed = timed([*elmo, "embed", args.text, os.path.join(out, "out.hdf5")], env, "embed")
        train = timed([*elmo, "train", "--vocab", args.vocab, "--config", "tiny", "--train", args.train,
                       "--output", os.path.join(out, "run"), "--max-tokens", str(args.train_tokens),
                       "--batch-size", "8", "--seed", "11", "--checkpoint-every", "1000000", "--no-progress"],
                      env, "train")
    return {"embed_seconds": embed["seconds"], "embed_cpu_seconds": embed["cpu_seconds"],
            "train_seconds": train["seconds"], "train_cpu_seconds": train["cpu_seconds"]}


def run_contention(args) -> int:
    """The ``contention`` job: every checkout x thread setting, in turns, beside the busy processes."""
    settings = [None, *args.threads]
    sides = {"before": args.before, "after": args.after}
    if args.quick:
        sides = {"after": args.after}
    runs: dict[str, list[dict]] = {f"{side} {t or 'default'}": [] for side in sides for t in settings}
    load_before = os.getloadavg()
    busy = start_busy(args.busy, args.busy_seconds)
    # A kill of this script ends the busy processes too (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        time.sleep(1.0)  # the busy processes running before the first measurement
        load_busy = os.getloadavg()
        # Each thread setting on every checkout back to back, so that the drift of a shared
        # machine's load falls on the runs compared with each other.
        for round_index in range(args.rounds):
            for threads in settings:
                for side, src in sides.items():
                    name = f"{side} {threads or 'default'}"
                    result = measure_contention(src, args, threads)
                    result["load_average"] = os.getloadavg()[0]
                    runs[name].append(result)
                    print(f"round {round_index + 1} {name}: { {k: round(v, 2) for k, v in result.items()} }",
                          flush=True)
    finally:
        stop_busy(busy)
    summary: dict = {}
    for side in sides:
        for job in ("embed", "train"):
            medians = {str(t or "default"): statistics.median(r[f"{job}_seconds"] for r in runs[f"{side} {t or 'default'}"])
                       for t in settings}
            best = min(medians, key=medians.get)
            summary[f"{side} {job}"] = {"median_seconds": medians, "best": best,
                                        "default_over_best": medians["default"] / medians[best]}
    print(f"contention: {args.busy} busy processes beside each run on {os.cpu_count()} CPUs; median seconds of "
          f"{args.rounds} round(s), whole process; load average {load_before[0]:.1f} before, {load_busy[0]:.1f} "
          f"with them")
    header = "".join(f"{str(t or 'default') + ' thr':>13}" for t in settings)
    print(f"{'':16}{header}{'default / best':>16}")
    for name, row in summary.items():
        cells = "".join(f"{row['median_seconds'][str(t or 'default')]:>13.1f}" for t in settings)
        print(f"{name:16}{cells}{row['default_over_best']:>16.2f}")
    if args.output:
        from common import write_results

        write_results(args.output, {"job": "contention", "before": args.before, "after": args.after,
                                    "rounds": args.rounds, "quick": args.quick, "busy": args.busy,
                                    "lines": args.lines, "train_tokens": args.train_tokens,
                                    "threads": settings, "load_average_before": load_before,
                                    "load_average_with_busy": load_busy, "runs": runs, "summary": summary})
    return 0


# ------------------------------------------------------------------------------------ serve
def measure_serve(src: str, args, extra: list[str]) -> dict:
    """One side of a serve round: that checkout's server, then the callers at each concurrency."""
    import asyncio
    import urllib.error
    import urllib.request

    import serve

    load = os.getloadavg()[0]
    process, base = serve.start_server(None, 2.0, 4096, args.threads, env=checkout_env(src))
    try:
        while True:  # an older build printed "ready" before it listened
            try:
                with urllib.request.urlopen(base + "/health", timeout=10) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        row = {"load_average": round(load, 2)}
        for concurrency in args.concurrency:
            result = asyncio.run(serve.load(base, serve.sentences(), concurrency, 3000, args.seconds, args.warmup))
            row[f"c{concurrency}_requests_per_s"] = result["throughput_rps"]
            row[f"c{concurrency}_p50_ms"] = result["p50_ms"]
            row[f"c{concurrency}_reopened"] = result["connections_reopened"]
    finally:
        process.terminate()
        process.wait(60)
    return row


MEASURE = {"embed": measure_embed, "train": measure_train, "serve": measure_serve}
# What each job's table shows (the JSON keeps every measure).
SHOWN = {"embed": ("tokens_per_second", "latency_ms"),
         "train": ("tokens_per_second", "tokens_per_cpu_second", "loop_tokens_per_second"),
         "serve": ("_requests_per_s", "_p50_ms")}  # the measures ending so, at each concurrency


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Median, range, and ratios to the earlier checkout of every number the rounds measured."""
    summary = {}
    for name, rows in runs.items():
        values = {}
        for key, first in rows[0].items():
            if isinstance(first, bool) or not isinstance(first, (int, float)):
                continue
            got = [r[key] for r in rows]
            values[key] = {"median": statistics.median(got), "min": min(got), "max": max(got)}
            base = [r[key] for r in runs["before"]]
            if name != "before" and statistics.median(base):
                values[key]["ratio_of_medians"] = values[key]["median"] / statistics.median(base)
                values[key]["ratios_per_round"] = [a / b if b else None for a, b in zip(got, base)]
        if name != "before" and "losses" in rows[0]:
            values["largest_loss_difference"] = max(
                abs(a - b) for r_a, r_b in zip(rows, runs["before"]) for a, b in zip(r_a["losses"], r_b["losses"]))
        summary[name] = values
    return summary


def print_summary(job: str, summary: dict, rounds: int) -> None:
    keys = SHOWN[job] if job != "serve" else \
        [k for k in summary["before"] if k.endswith(SHOWN["serve"])]
    print(f"{job}: median of {rounds} round(s); / before: ratio of medians, then per round")
    for key in keys:
        print(f"{key:28} {'median':>10} {'min':>10} {'max':>10} {'/ before':>9}")
        for name, values in summary.items():
            v = values[key]
            ratio = "" if "ratio_of_medians" not in v else \
                f" {v['ratio_of_medians']:>9.3f}   " + ", ".join("-" if r is None else f"{r:.2f}"
                                                             for r in v["ratios_per_round"])
            print(f"  {name:26} {v['median']:>10.1f} {v['min']:>10.1f} {v['max']:>10.1f}{ratio}")
    for name, values in summary.items():
        if "largest_loss_difference" in values:
            print(f"{name}: largest per-step loss difference from before: {values['largest_loss_difference']:.2e}")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    jobs = top.add_subparsers(dest="job", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--before", help="src/ folder of the earlier checkout (--quick: this checkout's)")
    shared.add_argument("--after", help="src/ folder of the later checkout (--quick: this checkout's)")
    shared.add_argument("--rounds", type=int, default=3)
    shared.add_argument("--quick", action="store_true", help="tiny sizes, one round, no data needed: seconds")
    shared.add_argument("--output", help="JSON file to write (e.g. results/benchmarks/revisions_embed.json)")

    embed = jobs.add_parser("embed", parents=[shared], help="Embedder speed on random weights")
    embed.add_argument("--text", help="tokenized sentences, one per line")
    embed.add_argument("--sentences", type=int, default=1000)
    embed.add_argument("--size", default="small", help="published size (or preset) of the random weights")
    embed.add_argument("--precision", default="float32")
    embed.add_argument("--latency-tokens", type=int, default=20, help="length of the sentences timed alone")
    embed.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: one side, in this process
    embed.add_argument("--src", help=argparse.SUPPRESS)

    train = jobs.add_parser("train", parents=[shared], help="whole elmo finetune processes")
    train.add_argument("--train", help="one tokenized training shard")
    train.add_argument("--model", help="model to continue (default: the packaged one, from --after)")
    train.add_argument("--steps", type=int, default=300)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--seed", type=int, default=11)
    train.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                       help="also run the later checkout with these extra elmo finetune options, under NAME "
                            "(e.g. fused='--lstm-path fused'); repeatable")

    serve = jobs.add_parser("serve", parents=[shared], help="elmo serve under load")
    serve.add_argument("--threads", type=int, default=1, help="the servers' --threads")
    serve.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    serve.add_argument("--seconds", type=float, default=5.0, help="seconds measured per concurrency")
    serve.add_argument("--warmup", type=int, default=128, help="requests per concurrency not measured")
    contention = jobs.add_parser("contention", parents=[shared],
                                 help="whole elmo embed and elmo train beside one busy process per core")
    contention.add_argument("--lines", type=int, default=300, help="lines elmo embed embeds")
    contention.add_argument("--train-tokens", type=int, default=2000, help="tokens elmo train trains on")
    contention.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                            help="thread counts measured beside the default")
    contention.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy processes (default: one per core)")
    contention.add_argument("--busy-seconds", type=float, default=3600.0,
                            help="the longest a busy process runs (they are killed when the measuring ends)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.job == "embed" and args.one:
        print(json.dumps(embed_one(args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="elmo-revisions-") as work:
        args.work = work  # the warm states of the embed job's random weights (the untimed part) go here
        if args.quick:
            args.before, args.after, args.rounds = args.before or SRC, args.after or SRC, 1
            if args.job == "embed":
                args.size, args.sentences, args.latency_tokens = "tiny", 40, 12
                args.text = args.text or quick_sentences(os.path.join(work, "sentences.txt"), args.sentences)
            elif args.job == "train":
                args.steps, args.batch_size = 2, 4
                args.train = args.train or quick_sentences(os.path.join(work, "train.txt"), 200)
            elif args.job == "contention":
                args.lines, args.train_tokens, args.threads = 20, 200, [1]
            else:
                args.seconds, args.warmup, args.concurrency = 1.0, 16, [1, 8]
        missing = [f"--{name}" for name in ("before", "after", *{"embed": ["text"], "train": ["train"]}.get(args.job, []))
                   if not getattr(args, name)]
        if missing:
            raise SystemExit(f"revisions.py {args.job}: {', '.join(missing)} needed (or --quick)")
        args.before, args.after = os.path.abspath(args.before), os.path.abspath(args.after)
        if args.job == "contention":
            args.text = quick_sentences(os.path.join(work, "embed.txt"), args.lines)
            args.train = quick_sentences(os.path.join(work, "train.txt"), 400)
            args.vocab = os.path.join(args.after, "elmo", "resources", "model", "vocab.txt")
            return run_contention(args)
        sides = {"before": (args.before, []), "after": (args.after, [])}
        if args.job == "train":
            args.model = args.model or os.path.join(args.after, "elmo", "resources", "model")
            for spec in args.variant:
                name, _, options = spec.partition("=")
                sides[name] = (args.after, options.split())
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        for round_index in range(args.rounds):
            for name, (src, extra) in sides.items():
                result = MEASURE[args.job](src, args, extra)
                runs[name].append(result)
                shown = {k: round(v, 2) for k, v in result.items() if isinstance(v, float)}
                print(f"round {round_index + 1} {name}: {shown}", flush=True)
    summary = summarize(runs)
    print_summary(args.job, summary, args.rounds)
    if args.output:
        from common import write_results

        options = {key: value for key, value in vars(args).items()
                   if key not in ("job", "before", "after", "rounds", "output", "one", "src", "quick", "work")}
        write_results(args.output, {"job": args.job, "before": args.before, "after": args.after, "rounds": args.rounds,
                                    "quick": args.quick, "options": options,
                                    "threads": os.environ.get("OMP_NUM_THREADS"), "runs": runs,
                                    "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
