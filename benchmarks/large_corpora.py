"""Embedding large corpora: output layouts, processes, Ray, a kill and resume, a very long line.

Every part prints a table and writes JSON (``--output``). Timed runs of the compared
configurations are interleaved (``--repeats`` rounds of all of them), so that the drift of a
shared machine falls on all alike; the tables give medians and the range of the rounds.

* ``layouts``: embeds ``--embed-sentences`` lines once (packed, float32, all layers: the
  end-to-end speed of ``FileEmbedder.write``), then writes ``--sentences`` lines in every layout x dtype x
  compression (the embedded ones over and over when fewer, as embedding them all would take hours
  on a shared 2-core machine; sizes and write speeds do not depend on which vectors they are) and
  reads them back: bytes per token, write and read throughput.
* ``processes``: one ``elmo embed`` process (2 threads, then 1) against ``torchrun
  --nproc-per-node 2`` (one thread each), sentences/s of the whole command.
* ``ray``: ``elmo embed --layers top`` against ``examples/ray_embed.py`` on a local Ray cluster
  with the same CPUs (1 thread and one 1-CPU actor; 2 threads and two 1-CPU actors or one 2-CPU
  actor), sentences/s of the whole command.
* ``resume``: an uninterrupted run against one killed (SIGKILL) halfway and resumed: the time lost.
* ``long-line``: peak resident memory of ``elmo embed`` on one line of ``--tokens`` tokens,
  windowed (default --max-tokens) and whole (--max-tokens above the line's length).

    python benchmarks/large_corpora.py layouts --text SENTENCES.txt --sentences 100000 --embed-sentences 10000 \
        --output results/benchmarks/large_corpora_layouts.json
    python benchmarks/large_corpora.py processes --text SENTENCES.txt --sentences 20000 \
        --output results/benchmarks/large_corpora_processes.json
    python benchmarks/large_corpora.py ray --text SENTENCES.txt --sentences 20000 \
        --output results/benchmarks/large_corpora_ray.json
    python benchmarks/large_corpora.py resume --text SENTENCES.txt --sentences 10000 \
        --output results/benchmarks/large_corpora_resume.json
    python benchmarks/large_corpora.py long-line --text SENTENCES.txt --tokens 100000 \
        --output results/benchmarks/large_corpora_long_line.json

``SENTENCES.txt`` is one tokenized sentence per line, e.g. from ``elmo prepare`` over Wikipedia
articles. The model is ``--model`` (default: the packaged one). ``--quick`` runs a part on a few
hundred lines of the built-in warm-up text, once (long-line: 2,000 tokens): the code, in seconds.

    python benchmarks/large_corpora.py layouts --quick --output large_corpora_layouts.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import quick_sentences, time_and_peak_process, time_process, write_results  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELMO = [sys.executable, "-m", "elmo.cli.main"]


def take_lines(source: str, n: int, destination: str) -> int:
    """The first ``n`` non-empty lines of ``source`` into ``destination``; returns their tokens."""
    tokens = kept = 0
    with open(source, encoding="utf-8") as f, open(destination, "w", encoding="utf-8") as out:
        for line in f:
            if line.strip():
                out.write(line if line.endswith("\n") else line + "\n")
                tokens += len(line.split())
                kept += 1
                if kept == n:
                    break
    if kept < n:
        raise SystemExit(f"{source}: only {kept} non-empty lines, {n} wanted")
    return tokens


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def model_args(args) -> list[str]:
    return ["--model", args.model] if args.model else []


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def print_table(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths)))


# ---------------------------------------------------------------------------------- layouts
def bench_layouts(args, work: str) -> dict:
    import h5py
    import numpy as np

    from elmo import Embedder, FileEmbedder, open_embeddings
    from elmo.hub import load_model
    from elmo.inference.outputs import OutputOptions, create_writer

    text = os.path.join(work, "sentences.txt")
    embedded = min(args.embed_sentences or args.sentences, args.sentences)
    take_lines(args.text, embedded, text)
    source = os.path.join(work, "source.hdf5")
    embedder = Embedder(load_model(args.model))
    report = FileEmbedder(embedder, layout="packed", progress=False).write(text, source)
    embedding = {"sentences": report.sentences, "tokens": report.tokens, "seconds": report.seconds,
                 "write_seconds": report.write_seconds, "sentences_per_s": report.sentences / report.seconds,
                 "tokens_per_s": report.tokens / report.seconds}
    print(f"embedded {report.sentences:,} sentences ({report.tokens:,} tokens) in {report.seconds:.0f} s "
          f"({embedding['sentences_per_s']:.0f} sentences/s), {report.write_seconds:.1f} s of it writing the output")
    combos = [(layout, dtype, compression, "all") for layout in ("allennlp", "packed")
              for dtype in ("float32", "float16") for compression in ("none", "lzf", "gzip")]
    combos.append(("packed", "float16", "none", "top"))
    results = {c: {"write": [], "read": []} for c in combos}
    with open_embeddings(source) as vectors:
        texts = [vectors.text(i) for i in range(len(vectors))]
        lengths = [vectors.n_tokens(i) for i in range(len(vectors))]
    order = [i % embedded for i in range(args.sentences)]  # the lines written, by embedded line
    tokens = sum(lengths[i] for i in order)

    def source_sentences(vectors):
        """The embedded sentences, over and over, read in order (the packed reader's blocks)."""
        while True:
            yield from zip(texts, vectors)

    for _ in range(args.repeats):
        for combo in combos:
            layout, dtype, compression, layers = combo
            options = OutputOptions(layout, layers, dtype, compression)
            path = os.path.join(work, "out.hdf5")
            with open_embeddings(source) as vectors:
                start = time.perf_counter()
                with h5py.File(path, "w") as f:
                    writer = create_writer(f, options, options.token_shape(*vectors.token_shape))
                    for _, (text_, array) in zip(order, source_sentences(vectors)):
                        rows = np.ascontiguousarray(array.transpose(1, 0, 2))  # (tokens, layers, dim)
                        writer.add(text_, len(rows), [options.select(rows)])
                    writer.finish({})
                results[combo]["write"].append(time.perf_counter() - start)
            results[combo]["bytes"] = os.path.getsize(path)
            start = time.perf_counter()
            with open_embeddings(path) as got:
                for _array in got:
                    pass
            results[combo]["read"].append(time.perf_counter() - start)
            remove(path)
    rows, table = [], []
    for combo in combos:
        r = results[combo]
        entry = {"layout": combo[0], "dtype": combo[1], "compression": combo[2], "layers": combo[3],
                 "bytes": r["bytes"], "bytes_per_token": r["bytes"] / tokens,
                 "write_seconds": spread(r["write"]), "read_seconds": spread(r["read"]),
                 "write_tokens_per_s": tokens / statistics.median(r["write"]),
                 "write_mb_per_s": r["bytes"] / 1e6 / statistics.median(r["write"]),
                 "read_tokens_per_s": tokens / statistics.median(r["read"])}
        rows.append(entry)
        table.append([*combo, f"{entry['bytes_per_token']:.0f}", f"{r['bytes'] / 2**30:.2f}",
                      f"{entry['write_tokens_per_s'] / 1e3:.0f}k",
                      f"{min(r['write']):.1f}-{max(r['write']):.1f}", f"{entry['read_tokens_per_s'] / 1e3:.0f}k"])
    print_table(["layout", "dtype", "compression", "layers", "bytes/token", "GiB", "write tok/s", "write s (range)",
                 "read tok/s"], table)
    remove(source)
    return {"sentences": args.sentences, "embedded_sentences": embedded, "tokens": tokens, "embedding": embedding,
            "layouts": rows}


# -------------------------------------------------------------------------------- processes
def bench_processes(args, work: str) -> dict:
    text = os.path.join(work, "sentences.txt")
    tokens = take_lines(args.text, args.sentences, text)
    common = [text, "--layout", "packed", "--dtype", "float16", *model_args(args)]
    configs = {
        # --threads: the caller's OMP_NUM_THREADS (1 on a shared machine) must not decide the baseline.
        "1 process, 2 threads": lambda out: [*ELMO, "embed", *common[:1], out, *common[1:], "--threads", "2"],
        "1 process, 1 thread": lambda out: [*ELMO, "embed", *common[:1], out, *common[1:], "--threads", "1"],
        "torchrun, 2 processes x 1 thread": lambda out: [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "elmo.cli.main", "embed", *common[:1], out, *common[1:]],
    }
    times = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, command in configs.items():
            out = os.path.join(work, "out")
            times[name].append(time_process(command(out)))
            remove(out)
    return report_rates(times, args.sentences, tokens, "processes")


def report_rates(times: dict, sentences: int, tokens: int, what: str) -> dict:
    rows, table = [], []
    base = statistics.median(next(iter(times.values())))
    for name, values in times.items():
        median = statistics.median(values)
        rows.append({"config": name, "seconds": spread(values), "sentences_per_s": sentences / median,
                     "tokens_per_s": tokens / median, "speed_vs_first": base / median})
        table.append([name, f"{median:.1f}", f"{min(values):.1f}-{max(values):.1f}", f"{sentences / median:.0f}",
                      f"{tokens / median:.0f}", f"{base / median:.2f}"])
    print_table([what, "s (median)", "range", "sentences/s", "tokens/s", "x first"], table)
    return {"sentences": sentences, "tokens": tokens, "configs": rows}


# -------------------------------------------------------------------------------------- ray
def bench_ray(args, work: str) -> dict:
    text = os.path.join(work, "sentences.txt")
    tokens = take_lines(args.text, args.sentences, text)
    example = os.path.join(REPO, "examples", "ray_embed.py")
    model = args.model or "default"

    def embed(threads: int):
        return lambda out: [*ELMO, "embed", text, out, "--layers", "top", "--layout", "packed", "--threads",
                            str(threads), *model_args(args)]

    def on_ray(actors: int, cpus: int):
        return lambda out: [sys.executable, example, text, out, "--model", model, "--layers", "top", "--concurrency",
                            str(actors), "--num-cpus", str(cpus), "--batch-size", "256"]

    # Pairs of equal compute: the Ray path's overhead is each Ray row against the elmo embed row before it.
    configs = {
        "elmo embed --layers top, 1 thread": embed(1),
        "Ray, 1 actor x 1 CPU": on_ray(1, 1),
        "elmo embed --layers top, 2 threads": embed(2),
        "Ray, 2 actors x 1 CPU": on_ray(2, 1),
        "Ray, 1 actor x 2 CPUs": on_ray(1, 2),
    }
    # Without OMP_NUM_THREADS, Ray gives each actor's torch as many threads as its num_cpus.
    env = {**{k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}, "RAY_DATA_DISABLE_PROGRESS_BARS": "1"}
    times = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, command in configs.items():
            out = os.path.join(work, "out")
            times[name].append(time_process(command(out), env))
            remove(out)
    return report_rates(times, args.sentences, tokens, "path")


# ----------------------------------------------------------------------------------- resume
def bench_resume(args, work: str) -> dict:
    from elmo.inference.journal import WorkFolder

    text = os.path.join(work, "sentences.txt")
    tokens = take_lines(args.text, args.sentences, text)
    out = os.path.join(work, "out.hdf5")
    command = [*ELMO, "embed", text, out, "--layout", "packed", *model_args(args)]
    # What any resumed run pays again before its first batch: the start of a process.
    one_line = os.path.join(work, "one.txt")
    take_lines(args.text, 1, one_line)
    startup_command = [*ELMO, "embed", one_line, os.path.join(work, "one.hdf5"), "--force", *model_args(args)]
    uninterrupted, interrupted, lost, committed, startup = [], [], [], [], []
    for _ in range(args.repeats):
        startup.append(time_process(startup_command))
        uninterrupted.append(time_process(command))
        size = os.path.getsize(out)
        remove(out)
        # Killed once the journal holds about half of the vectors (the output's size, near enough).
        journal = WorkFolder(out).journal_path
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not (os.path.exists(journal) and os.path.getsize(journal) >= size // 2):
            if process.poll() is not None:
                raise SystemExit("the run ended before it was killed")
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_after = time.perf_counter() - start
        committed.append(sum(f.sentences for f in WorkFolder(out).scan()))
        resumed = time_process(command + ["--resume"])
        interrupted.append(killed_after + resumed)
        lost.append(killed_after + resumed - uninterrupted[-1])
        remove(out)
    median = statistics.median(uninterrupted)
    print_table(["run", "s (median)", "range"],
                [["uninterrupted", f"{median:.1f}", f"{min(uninterrupted):.1f}-{max(uninterrupted):.1f}"],
                 ["killed at half + resumed", f"{statistics.median(interrupted):.1f}",
                  f"{min(interrupted):.1f}-{max(interrupted):.1f}"],
                 ["time lost", f"{statistics.median(lost):.1f}", f"{min(lost):.1f}-{max(lost):.1f}"],
                 ["start-up (a one-line run)", f"{statistics.median(startup):.1f}",
                  f"{min(startup):.1f}-{max(startup):.1f}"]])
    return {"sentences": args.sentences, "tokens": tokens, "startup_seconds": spread(startup),
            "uninterrupted_seconds": spread(uninterrupted),
            "killed_and_resumed_seconds": spread(interrupted), "lost_seconds": spread(lost),
            "sentences_committed_at_kill": committed}


# -------------------------------------------------------------------------------- long line
def bench_long_line(args, work: str) -> dict:
    words = []
    with open(args.text, encoding="utf-8") as f:
        for line in f:
            words.extend(line.split())
            if len(words) >= args.tokens:
                break
    words = words[:args.tokens]
    line_file = os.path.join(work, "line.txt")
    with open(line_file, "w", encoding="utf-8") as f:
        f.write(" ".join(words) + "\n")
    short_file = os.path.join(work, "short.txt")
    take_lines(args.text, 100, short_file)
    runs = {"100 ordinary sentences": (short_file, []),
            f"one line of {args.tokens:,} tokens, windowed (--max-tokens 4096)": (line_file, []),
            f"one line of {args.tokens:,} tokens, whole (--max-tokens {args.tokens + 2})": (
                line_file, ["--max-tokens", str(args.tokens + 2)])}
    rows, table = [], []
    for name, (source, extra) in runs.items():
        out = os.path.join(work, "out.hdf5")
        seconds, peak_mb = time_and_peak_process([*ELMO, "embed", source, out, "--layout", "packed",
                                                  *model_args(args), *extra])
        rows.append({"run": name, "peak_rss_bytes": int(peak_mb * 2**20), "seconds": seconds,
                     "output_bytes": os.path.getsize(out)})
        table.append([name, f"{peak_mb:.0f}", f"{seconds:.0f}", f"{os.path.getsize(out) / 2**20:.0f}"])
        remove(out)
    print_table(["run", "peak RSS MiB", "s", "output MiB"], table)
    return {"tokens": args.tokens, "runs": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["layouts", "processes", "ray", "resume", "long-line"])
    parser.add_argument("--text", help="one tokenized sentence per line (needed unless --quick)")
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--embed-sentences", type=int, default=None,
                        help="layouts: embed only this many lines, and write them over and over up to --sentences")
    parser.add_argument("--tokens", type=int, default=100_000, help="long-line: tokens of the line")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default=None, help="model name or path (default: the packaged one)")
    parser.add_argument("--workdir", default=None, help="where the temporary files go (default: a temp folder)")
    parser.add_argument("--output", required=True, help="JSON file to write")
    parser.add_argument("--quick", action="store_true",
                        help="a few hundred lines of the built-in warm-up text, one round: seconds, no data needed")
    args = parser.parse_args(argv)
    run = {"layouts": bench_layouts, "processes": bench_processes, "ray": bench_ray, "resume": bench_resume,
           "long-line": bench_long_line}[args.part]
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        if args.quick:
            # resume: 10 batches of 64, so that the run can be killed halfway
            args.sentences, args.embed_sentences, args.tokens, args.repeats = \
                (640 if args.part == "resume" else 200), 40, 2000, 1
            args.text = args.text or quick_sentences(os.path.join(work, "quick.txt"), 640)
        if not args.text:
            parser.error("--text is needed (or --quick)")
        results = run(args, work)
    write_results(args.output, {"part": args.part, "quick": args.quick,
                                "command": " ".join(sys.argv if argv is None else ["large_corpora.py", *argv]),
                                **results})


if __name__ == "__main__":
    main()
