"""CPU embedding speed: the fast path against the plain per-timestep path in one process, and
(``--whole-process``) whole ``elmo embed`` commands against AllenNLP's ``ElmoEmbedder``.

For each model size (random weights of the published shapes) and batch size, every
configuration runs in a fresh process (so its peak memory is its own) over the same real
sentences:

* ``plain``: the readable specification (``BiLM(fast=False)``), batches in input order, the
  character CNN over every slot of every padded position, one LSTM step at a time: how the
  widely used PyTorch ELMo runs.
* ``fast``: ``Embedder`` defaults (float32, warm state, length-sorted token-budget batches).
* ``fast+bf16``: the same with bfloat16 matrix products (AVX-512 BF16 on this CPU).
* ``fast+cache``: float32 with a vocabulary cache of ``--cache-words`` words.
* ``fast+bf16+cache``: both.

Printed and saved: tokens/s, sentences/s, peak memory, speed-up over plain, and the roofline
figure: the work done (the FLOPs the computation really needs, ``common.embedding_work_flops``:
the LSTM over real positions, the token encoder over distinct words) per second, as GFLOP/s and
as a percentage of this machine's peak for the row's precision, measured in the same run
(``common.product_peaks``: the LSTM's own product and a large square one, through
``torch.matmul`` and oneDNN; printed under the table, saved as ``product_peaks``); for bf16 its
largest and mean deviation from float32. Batch 1 also reports the latency of sentences of
``--latency-tokens`` tokens (20).

    python benchmarks/embed_speed.py --text DATA/wiki-heldout/train/shard-00000.txt \
        --cache-words DATA/vocab-50k.txt --output results/benchmarks/embed_speed.json

``--whole-process`` times instead what a user times: the whole ``elmo embed TEXT OUT.hdf5``
command (start-up included) for each size and option, ``--repeats`` times, the runs of all
configurations interleaved so that the machine's drift falls on all of them alike; with
``--allennlp-src`` (an unpacked AllenNLP 0.9.0 wheel, run by ``allennlp_embed.py`` as ``allennlp
elmo --all`` would), AllenNLP's ``ElmoEmbedder`` is timed in the same rounds on the same weights;
with ``--bilm-tf-src`` and ``--bilm-tf-python`` (a bilm-tf checkout and a TensorFlow 2
interpreter, run by ``bilm_tf_dump.py``), bilm-tf's own ``dump_bilm_embeddings``, one sentence per
``session.run``, and its output checked against ``--state stateful``'s (the states carried alike).
Each row has its wall-clock and CPU seconds (user and system, every thread) and its peak memory.
One further process per configuration splits the time into imports, weight loading, warm state
and embedding with writing.

    python benchmarks/embed_speed.py --whole-process --text DATA/wiki-heldout/train/shard-00000.txt \
        --cache-words DATA/vocab-50k.txt --allennlp-src "$WORK/allennlp-0.9.0" \
        --output results/benchmarks/embed_whole_process.json
    python benchmarks/embed_speed.py --whole-process --text sentences.txt --cache-words DATA/words.txt \
        --sentences 200 --batch-sizes 1 --configurations float32 float32+stateful \
        --bilm-tf-src "$BILM_TF" --bilm-tf-python "$TFENV/bin/python" \
        --output results/benchmarks/one_sentence_against_bilm_tf.json

``--quick`` (either mode) runs the tiny preset on 12 sentences of the built-in warm-up text, at
batch 1, or (whole process) in float32 with the vocabulary cache: the code, in seconds, no data needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from allennlp_embed import allennlp_command  # noqa: E402
from bilm_tf_dump import bilm_tf_command, bilm_tf_env  # noqa: E402
from common import (  # noqa: E402
    embedding_work_flops,
    installed_env,
    lstm_flops,
    matmul_peak_flops,
    measure_process,
    peak_rss_bytes,
    product_peaks,
    quick_sentences,
    random_model,
    time_process,
    token_encoder_flops,
    write_results,
)
from startup import breakdown_command, run_breakdown  # noqa: E402


def write_sentences(path: str, n: int, work: str) -> tuple[str, list[list[str]], int]:
    """The first ``n`` sentences of ``path`` written to ``work/sentences.txt``, one per line:
    ``(that file, the sentences, their token count)``."""
    sentences = load_sentences(path, n)
    text = os.path.join(work, "sentences.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.writelines(" ".join(s) + "\n" for s in sentences)
    return text, sentences, sum(map(len, sentences))


def load_sentences(path: str, n: int, all_of_them: bool = True) -> list[list[str]]:
    """The first ``n`` sentences of ``path`` (fewer if it has fewer and not ``all_of_them``)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            tokens = line.split()
            if tokens:
                out.append(tokens)
            if len(out) == n:
                break
    if len(out) < n and all_of_them:
        raise SystemExit(f"{path}: only {len(out)} sentences, {n} wanted")
    return out


def run_one(args) -> dict:
    """One configuration, in this process."""
    import numpy as np
    import torch

    from elmo import Embedder
    from elmo.model.chars import batch_to_char_ids

    sentences = load_sentences(args.text, args.sentences)
    model = random_model(args.size, fast=args.path != "plain")
    result = {"size": args.size, "path": args.path, "batch_size": args.batch_size, "sentences": len(sentences),
              "tokens": sum(map(len, sentences))}
    if args.path == "plain":
        start = time.perf_counter()
        with torch.inference_mode():
            for i in range(0, len(sentences), args.batch_size):
                ids, mask = batch_to_char_ids(sentences[i:i + args.batch_size])
                model(ids, mask)
        seconds = time.perf_counter() - start
    else:
        options = {"precision": "bfloat16" if "bf16" in args.path else "float32"}
        if "cache" in args.path:
            from elmo.inference.vocab_cache import save_vocab_cache

            with open(args.cache_words, encoding="utf-8") as f:
                words = [line.strip() for line in f if line.strip()]
            cache = os.path.join(tempfile.mkdtemp(), "cache.hdf5")
            start = time.perf_counter()
            save_vocab_cache(model, words, cache)
            result["cache_build_seconds"] = time.perf_counter() - start
            result["cache_words"] = len(words)
            covered = sum(w in set(words) for s in sentences for w in s)
            result["cache_coverage"] = covered / result["tokens"]
            options["vocab_cache"] = cache
        embedder = Embedder(model, batch_size=args.batch_size, **options)
        embedder.embed_sentences(sentences[:2])  # the warm state is computed once, not timed
        start = time.perf_counter()
        vectors = embedder.embed_sentences(sentences, batch_size=args.batch_size)
        seconds = time.perf_counter() - start
        if args.path == "fast+bf16":
            reference = Embedder(model, batch_size=args.batch_size).embed_sentences(sentences)
            diffs = [np.abs(a - b) for a, b in zip(vectors, reference)]
            result["bf16_max_abs_deviation"] = float(max(d.max() for d in diffs if d.size))
            result["bf16_mean_abs_deviation"] = float(np.mean([d.mean() for d in diffs if d.size]))
            result["reference_mean_abs_value"] = float(np.mean([np.abs(r).mean() for r in reference if r.size]))
        if args.batch_size == 1:
            alone = [s for s in load_sentences(args.text, 20 * args.sentences, False) if len(s) == args.latency_tokens][:30]
            latencies = []
            for s in alone:
                t0 = time.perf_counter()
                embedder.embed_sentences([s], batch_size=1)
                latencies.append(time.perf_counter() - t0)
            result[f"latency_{args.latency_tokens}_tokens_ms"] = 1000 * statistics.median(latencies)
    result["seconds"] = seconds
    result["tokens_per_second"] = result["tokens"] / seconds
    result["sentences_per_second"] = len(sentences) / seconds
    result["peak_memory_bytes"] = peak_rss_bytes()
    config = model.config
    result["model_flops_per_token"] = token_encoder_flops(config) + 2 * lstm_flops(config)
    # The precision the products ran in (bfloat16 asked for falls back to float32 where this CPU
    # would not gain from it): the peak it is held against.
    result["precision"] = embedder.precision if args.path != "plain" else "float32"
    result["work_flops"] = embedding_work_flops(config, sentences)
    result["work_flops_per_second"] = result["work_flops"] / seconds
    return result


# The whole-process configurations: (precision, with the vocabulary cache, state policy).
WHOLE_PROCESS_CONFIGURATIONS = {"float32": ("float32", False, "warm"), "bfloat16": ("bfloat16", False, "warm"),
                                "int8": ("int8", False, "warm"), "float32+cache": ("float32", True, "warm"),
                                "bfloat16+cache": ("bfloat16", True, "warm"),
                                "float32+stateful": ("float32", False, "stateful")}
ALLENNLP = "AllenNLP ElmoEmbedder"
BILM_TF = "bilm-tf dump_bilm_embeddings"


def whole_process(args, work: str) -> list[dict]:
    """The ``--whole-process`` table (see the module's docstring), its files under ``work``."""
    import torch

    from elmo import save_bilm_tf

    work = os.path.join(work, "whole-process")
    os.makedirs(work)
    text, sentences, tokens = write_sentences(args.text, args.sentences, work)
    env = installed_env({**os.environ, "ELMO_CACHE": os.path.join(work, "elmo-cache")}, work)
    if args.allennlp_src:
        subprocess.run([sys.executable, "-m", "compileall", "-q", args.allennlp_src], check=True,
                       stdout=subprocess.DEVNULL, env=env)
    envs = {BILM_TF: bilm_tf_env(env)}
    vocab = os.path.join(work, "bilm-tf-vocab.txt")  # bilm-tf's Batcher wants one; characters need only these
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("<S>\n</S>\n<UNK>\n")
    outputs = {name: os.path.join(work, f"out-{index}.hdf5")
               for index, name in enumerate([*WHOLE_PROCESS_CONFIGURATIONS, ALLENNLP, BILM_TF])}
    batch = str(args.batch_sizes[0])
    rows = []
    for size in args.sizes:
        folder = os.path.join(work, size)
        with torch.no_grad():
            options, weights = map(str, save_bilm_tf(random_model(size), folder))
        cache = os.path.join(folder, "cache.hdf5")
        subprocess.run([sys.executable, "-m", "elmo.cli.main", "cache-vocab", args.cache_words, cache,
                        "--options", options, "--weights", weights], check=True, stdout=subprocess.DEVNULL, env=env)

        def elmo_embed(name):
            precision, cached, state = WHOLE_PROCESS_CONFIGURATIONS[name]
            return [sys.executable, "-m", "elmo.cli.main", "embed", text, outputs[name], "--force",
                    "--options", options, "--weights", weights, "--batch-size", batch, "--precision", precision,
                    "--state", state, *(["--vocab-cache", cache] if cached else [])]

        commands = {name: elmo_embed(name) for name in WHOLE_PROCESS_CONFIGURATIONS if name in args.configurations}
        if args.allennlp_src:
            commands[ALLENNLP] = allennlp_command(args.allennlp_src, options, weights, text, outputs[ALLENNLP],
                                                  "--batch-size", batch)
        if args.bilm_tf_src:
            commands[BILM_TF] = bilm_tf_command(args.bilm_tf_python, args.bilm_tf_src, vocab, text, options, weights,
                                                outputs[BILM_TF])
        warmed = set()
        for name in commands:
            precision, _, state = WHOLE_PROCESS_CONFIGURATIONS.get(name, (None, None, None))
            if state == "warm" and precision not in warmed:
                time_process(commands[name], env)  # computes and caches its warm state; not counted
                warmed.add(precision)
        runs = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                if os.path.exists(outputs[name]):
                    os.remove(outputs[name])  # every run writes its output from nothing
                runs[name].append(measure_process(command, envs.get(name, env)))
        size_rows = []
        for name, measured in runs.items():
            seconds = [m["seconds"] for m in measured]
            row = {"size": size, "configuration": name, "sentences": len(sentences), "tokens": tokens,
                   "batch_size": 1 if name == BILM_TF else args.batch_sizes[0], "seconds": seconds,
                   "median_seconds": statistics.median(seconds),
                   "cpu_seconds": [m["cpu_seconds"] for m in measured],
                   "median_cpu_seconds": statistics.median(m["cpu_seconds"] for m in measured),
                   "peak_mb": max(m["peak_mb"] for m in measured)}
            if name in WHOLE_PROCESS_CONFIGURATIONS:
                precision, cached, state = WHOLE_PROCESS_CONFIGURATIONS[name]
                command = breakdown_command(options, weights, "--text", text, "--embed-output", outputs[name],
                                            "--batch-size", batch, "--precision", precision, "--state", state,
                                            *(["--vocab-cache", cache] if cached else []))
                row["breakdown_seconds"] = run_breakdown(command, env)
            size_rows.append(row)
        for reference, key in ((ALLENNLP, "allennlp"), (BILM_TF, "bilm_tf")):
            if reference in runs:
                base = next(r for r in size_rows if r["configuration"] == reference)
                for row in size_rows:
                    row[f"speedup_over_{key}"] = base["median_seconds"] / row["median_seconds"]
                    row[f"cpu_seconds_of_{key}"] = row["median_cpu_seconds"] / base["median_cpu_seconds"]
        if BILM_TF in runs and "float32+stateful" in runs:
            # bilm-tf carries the LSTM states from sentence to sentence, as --state stateful does:
            # the same numbers, so the two did the same work.
            next(r for r in size_rows if r["configuration"] == BILM_TF)["max_abs_difference_from_stateful"] = (
                max_abs_difference(outputs[BILM_TF], outputs["float32+stateful"], len(sentences)))
        rows += size_rows
    print(f"{'size':9} {'configuration':30}{'batch':>6}{'median s':>9}{'CPU s':>8}{'peak MB':>8}{'runs':>20}"
          f"{'x AllenNLP':>11}{'x bilm-tf':>10}{'CPU of bilm-tf':>15}  breakdown")
    for r in rows:
        shown = " ".join(f"{x:.1f}" for x in r["seconds"])
        ratios = "".join(f"{r[key]:>{width}.2f}" if key in r else " " * width for key, width in (
            ("speedup_over_allennlp", 11), ("speedup_over_bilm_tf", 10), ("cpu_seconds_of_bilm_tf", 15)))
        parts = " ".join(f"{k} {v:.2f}" for k, v in r.get("breakdown_seconds", {}).items())
        print(f"{r['size']:9} {r['configuration']:30}{r['batch_size']:>6}{r['median_seconds']:>9.2f}"
              f"{r['median_cpu_seconds']:>8.1f}{r['peak_mb']:>8.0f}{shown:>20}{ratios}  {parts}")
        if "max_abs_difference_from_stateful" in r:
            print(f"{'':9} bilm-tf against elmo --state stateful: largest difference "
                  f"{r['max_abs_difference_from_stateful']:.2e} over every layer of every sentence")
    return rows


def max_abs_difference(left: str, right: str, sentences: int) -> float:
    """The largest absolute difference between two outputs that hold every layer of each line
    under the line's index (bilm-tf's layout and elmo's default)."""
    import h5py
    import numpy as np

    with h5py.File(left, "r") as a, h5py.File(right, "r") as b:
        return max(float(np.abs(a[str(i)][()] - b[str(i)][()]).max()) for i in range(sentences))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", help="tokenized sentences, one per line (needed unless --quick)")
    parser.add_argument("--cache-words", help="word list for the vocabulary cache (needed unless --quick)")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--plain-sentences", type=int, default=200,
                        help="sentences for the slow plain path of the original size (and its ratio)")
    parser.add_argument("--sizes", nargs="+", default=["small", "original"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[64, 1])
    parser.add_argument("--output", default="results/benchmarks/embed_speed.json")
    parser.add_argument("--whole-process", action="store_true", help="time whole elmo embed commands")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each whole-process configuration")
    parser.add_argument("--allennlp-src", help="an unpacked allennlp 0.9.0 wheel: time its ElmoEmbedder too")
    parser.add_argument("--bilm-tf-src", help="a checkout of allenai/bilm-tf: time its dump_bilm_embeddings too "
                                              "(one sentence per session.run, whatever the batch size)")
    parser.add_argument("--bilm-tf-python", help="the interpreter of an environment with TensorFlow 2 and tf-keras "
                                                 "(see bilm_tf_dump.py), for --bilm-tf-src")
    parser.add_argument("--configurations", nargs="+", choices=list(WHOLE_PROCESS_CONFIGURATIONS),
                        default=list(WHOLE_PROCESS_CONFIGURATIONS),
                        help="the whole-process configurations to time (all by default); each precision runs once "
                             "first, untimed, to cache its warm state")
    parser.add_argument("--latency-tokens", type=int, default=20, help="batch 1: length of the sentences timed")
    parser.add_argument("--quick", action="store_true",
                        help="the tiny preset on 12 sentences of the built-in warm-up text, batch 1 (with "
                             "--whole-process: float32 with the vocabulary cache, one round): seconds")
    parser.add_argument("--one", nargs=4, metavar=("SIZE", "PATH", "BATCH", "SENTENCES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        args.size, args.path, batch, n = args.one
        args.batch_size, args.sentences = int(batch), int(n)
        print(json.dumps(run_one(args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="elmo-embed-speed-") as work:
        if args.quick:
            args.sizes, args.sentences, args.plain_sentences, args.latency_tokens = ["tiny"], 12, 12, 12
            args.batch_sizes, args.repeats = [1], 1
            args.configurations = ["float32+cache"]
            args.text = args.text or quick_sentences(os.path.join(work, "sentences.txt"), args.sentences)
            if not args.cache_words:
                args.cache_words = os.path.join(work, "words.txt")
                with open(args.text, encoding="utf-8") as f, open(args.cache_words, "w", encoding="utf-8") as out:
                    out.writelines(f"{word}\n" for word in sorted({w for line in f for w in line.split()}))
        if not (args.text and args.cache_words):
            parser.error("--text and --cache-words are needed (or --quick)")
        if bool(args.bilm_tf_src) != bool(args.bilm_tf_python):
            parser.error("--bilm-tf-src and --bilm-tf-python go together")
        if args.whole_process:
            rows = whole_process(args, work)
            write_results(args.output, {"quick": args.quick, "matmul_peak_flops": matmul_peak_flops(),
                                        "load_average": os.getloadavg(), "results": rows})
        else:
            in_process(args)
    return 0


def in_process(args) -> None:
    """The in-process table: see the module's docstring."""
    def one(size, path, batch, n):
        out = subprocess.run([sys.executable, __file__, "--text", args.text, "--cache-words", args.cache_words,
                              "--latency-tokens", str(args.latency_tokens), "--one", size, path, str(batch), str(n)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{size} {path} batch {batch} failed ({out.returncode}):\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    peak = matmul_peak_flops()
    results, peaks = [], {}
    for size in args.sizes:
        # This machine's products at this size's shapes, measured here, between the rows' processes.
        peaks[size] = product_peaks(random_model(size).config, square=512 if args.quick else 2048)
        for batch in args.batch_sizes:
            # The plain path of the big model is slow: it and its ratio use fewer sentences.
            n_plain = args.sentences if size in ("tiny", "small") else args.plain_sentences
            rows = [one(size, "plain", batch, n_plain)]
            if n_plain != args.sentences:
                rows.append(dict(one(size, "fast", batch, n_plain), note="ratio reference"))
            rows += [one(size, path, batch, args.sentences)
                     for path in ("fast", "fast+bf16", "fast+cache", "fast+bf16+cache")]
            plain_rate = rows[0]["tokens_per_second"]
            same_set = rows[1]["tokens_per_second"] if n_plain != args.sentences else None
            for row in rows:
                row["speedup_over_plain"] = row["tokens_per_second"] / plain_rate
                if same_set and row["path"] != "plain":
                    # Scale by the fast path's rate on the plain path's own sentences.
                    row["speedup_over_plain"] = (row["tokens_per_second"] / rows[2]["tokens_per_second"]) * same_set / plain_rate
                row["fraction_of_matmul_peak"] = row["model_flops_per_token"] * row["tokens_per_second"] / peak
                row["peak_flops_per_second"] = peaks[size][row["precision"]]["peak"]
                row["fraction_of_peak"] = row["work_flops_per_second"] / row["peak_flops_per_second"]
                results.append(row)
    header = (f"{'size':9}{'batch':>6} {'path':12}{'sents':>6}{'tokens/s':>10}{'sent/s':>8}{'peak MB':>9}"
              f"{'x plain':>8}{'GFLOP/s':>9}{'% peak':>8}")
    print(header)
    for r in results:
        print(f"{r['size']:9}{r['batch_size']:>6} {r['path']:12}{r['sentences']:>6}{r['tokens_per_second']:>10.0f}"
              f"{r['sentences_per_second']:>8.1f}{r['peak_memory_bytes'] / 2**20:>9.0f}{r['speedup_over_plain']:>8.1f}"
              f"{r['work_flops_per_second'] / 1e9:>9.1f}{100 * r['fraction_of_peak']:>7.1f}%" + "".join(
                  f"  {key.split('_')[1]}-token latency {value:.1f} ms" for key, value in r.items()
                  if key.startswith("latency_")))
    print("% peak: the work done (LSTM over real positions, token encoder over distinct words) per second, of this "
          "machine's best product in the row's precision, measured in this run (GFLOP/s; None: not reachable):")
    for size, by_precision in peaks.items():
        for precision, rates in by_precision.items():
            shown = ", ".join(f"{k} {'-' if v is None else f'{v / 1e9:.0f}'}" for k, v in rates.items()
                              if k not in ("shapes", "peak"))
            print(f"  {size} {precision}: peak {rates['peak'] / 1e9:.0f} ({shown}; shapes {rates['shapes']})")
    write_results(args.output, {"quick": args.quick, "matmul_peak_flops": peak, "product_peaks": peaks,
                                "threads": os.environ.get("OMP_NUM_THREADS"), "load_average": os.getloadavg(),
                                "results": results})


if __name__ == "__main__":
    sys.exit(main())
