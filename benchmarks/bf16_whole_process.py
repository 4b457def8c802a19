"""Reduced precision, whole process: ``elmo embed --precision bfloat16`` (and int8) against
float32, and their deviation from it (issue 49, item 1).

For each ``--size`` (random weights of the published shapes, saved as bilm-tf files), the same
``--sentences`` sentences are embedded by whole ``elmo embed`` commands (start-up, weight
loading and writing included; all layers, float32 HDF5 output), the configurations of each round
run one after another so that a busy machine slows them alike:

* ``float32``: this checkout's default;
* ``bfloat16``: this checkout with ``--precision bfloat16``;
* ``bfloat16 before`` (with ``--before SRC``): an earlier checkout's ``--precision bfloat16``;
* ``int8`` (with ``--int8``): this checkout with ``--precision int8``.

bfloat16 runs with ``ELMO_BFLOAT16_CHECK=0``, so that it is measured even where the runtime's
check would choose float32. Each timed run's peak resident memory is recorded too (the
process's own ``ru_maxrss``). Each configuration runs once untimed first (the warm state is
computed and cached per precision). The deviation compares the last round's outputs: for every
token vector of every layer, its cosine to float32's (the minimum and the 0.1% quantile) and the
largest absolute difference. After each size's rounds, this CPU's own matrix products are timed in
both precisions (``common.product_peaks``: the LSTM's product and a 2048 square one, through oneDNN
and ``torch.matmul``): the products' own bfloat16 gain, against which each bfloat16 row's gain is
given as a share ("of products' gain": the whole command's speed-up over the products' best-rate
ratio, and over the LSTM shape's oneDNN ratio). Prints a table and writes JSON with the CPU's
model and vector extensions.

    python benchmarks/bf16_whole_process.py --text SENTENCES --sizes small original \
        --before ../elmo-before/src --output results/benchmarks/bf16_whole_process.json

On a machine without data (a GPU lease, whose host may have AMX), ``--generate`` makes the
sentences, and ``--threads 2`` with ``taskset`` holds it to two cores as the issue measured:

    taskset -c 0,1 python benchmarks/bf16_whole_process.py --generate --sizes original --rounds 1 \
        --int8 --threads 2 --output "$OUT/bf16_whole_process_amx.json"

``--quick``: the tiny preset on 8 generated sentences, one round (the GPU suite's ``--quick`` runs
the same sizes): the code, in seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import product_peaks, random_model, time_and_peak_process, time_process, write_results  # noqa: E402
from embed_speed import write_sentences  # noqa: E402


def deviation(reference: str, other: str) -> dict:
    """Cosines and largest absolute difference of every token vector of ``other`` against
    ``reference`` (two ``elmo embed`` HDF5 files of the same sentences)."""
    import h5py
    import numpy as np

    cosines, worst = [], 0.0
    with h5py.File(reference, "r") as a, h5py.File(other, "r") as b:
        keys = [k for k in a.keys() if isinstance(a[k], h5py.Dataset) and k.isdigit()]
        assert keys and set(keys) <= set(b.keys()), "outputs hold different sentences"
        for key in keys:
            x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
            if x.size == 0:
                continue
            dot = (x * y).sum(-1)
            norms = np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)
            cosines.append((dot / np.maximum(norms, 1e-30)).ravel())
            worst = max(worst, float(np.abs(x - y).max()))
    values = np.concatenate(cosines)
    return {"token_vectors": int(values.size), "min_cosine": float(values.min()),
            "cosine_quantile_0.001": float(np.quantile(values, 0.001)), "max_abs_difference": worst}


def products_gain(found: dict) -> dict:
    """bfloat16's gain over float32 in this CPU's own products (``common.product_peaks``): at
    each one's best rate (``peak``) and for the LSTM's shape through oneDNN; empty where bfloat16
    products were not measured."""
    if "bfloat16" not in found or "float32" not in found:
        return {}
    gains = {"peak": found["bfloat16"]["peak"] / found["float32"]["peak"]}
    if found["float32"].get("lstm_onednn") and found["bfloat16"].get("lstm_onednn"):
        gains["lstm_onednn"] = found["bfloat16"]["lstm_onednn"] / found["float32"]["lstm_onednn"]
    return gains


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--text", help="tokenized sentences, one per line (the first --sentences are used)")
    source.add_argument("--generate", action="store_true",
                        help="--sentences made-up sentences instead, as the GPU suite makes them (the packaged "
                             "model's words, news-like lengths): for a machine without data, such as a lease")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--threads", type=int, help="elmo embed --threads (default: its own, all cores)")
    parser.add_argument("--sizes", nargs="+", default=["small", "original"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--before", help="src/ folder of an earlier checkout, for its bfloat16 row")
    parser.add_argument("--int8", action="store_true", help="also time --precision int8")
    parser.add_argument("--output", default="results/benchmarks/bf16_whole_process.json")
    parser.add_argument("--quick", action="store_true", help="the tiny preset, 8 generated sentences, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.sentences, args.rounds, args.generate = ["tiny"], 8, 1, not args.text
    if not (args.text or args.generate):
        parser.error("one of --text or --generate is needed (or --quick)")

    import torch

    from elmo import save_bilm_tf

    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    work = tempfile.mkdtemp(prefix="elmo-bf16-whole-")
    if args.generate:
        from pathlib import Path

        from gpu.common import generate_sentences, packaged_words, write_corpus

        sentences = generate_sentences(args.sentences, seed=5, words=packaged_words())
        text, tokens = os.path.join(work, "sentences.txt"), sum(map(len, sentences))
        write_corpus(Path(text), sentences)
    else:
        text, sentences, tokens = write_sentences(args.text, args.sentences, work)
    sources = {"float32": ("float32", here), "bfloat16": ("bfloat16", here)}
    if args.before:
        sources["bfloat16 before"] = ("bfloat16", os.path.abspath(args.before))
    if args.int8:
        sources["int8"] = ("int8", here)
    rows, deviations, products = [], {}, {}
    for size in args.sizes:
        folder = os.path.join(work, size)
        with torch.no_grad():
            options, weights = map(str, save_bilm_tf(random_model(size), folder))
        commands, envs, outputs = {}, {}, {}
        for name, (precision, src) in sources.items():
            outputs[name] = os.path.join(work, f"{size}-{name.replace(' ', '-')}.hdf5")
            commands[name] = [sys.executable, "-m", "elmo.cli.main", "embed", text, outputs[name], "--force",
                              "--options", options, "--weights", weights, "--batch-size", str(args.batch_size),
                              "--precision", precision, "--device", "cpu"]  # the CPU, on a GPU's host too
            if args.threads:
                commands[name] += ["--threads", str(args.threads)]
            envs[name] = {**os.environ, "PYTHONPATH": src, "ELMO_BFLOAT16_CHECK": "0",
                          "ELMO_CACHE": os.path.join(work, "cache-" + name.replace(" ", "-"))}
            time_process(commands[name], envs[name])  # the warm state, computed and cached: not counted
        seconds, peaks = {name: [] for name in commands}, {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, command in commands.items():
                took, peak = time_and_peak_process(command, envs[name])
                seconds[name].append(took)
                peaks[name].append(peak)
        if args.threads:
            torch.set_num_threads(args.threads)
        products[size] = product_peaks(random_model(size).config, square=512 if args.quick else 2048)
        gains = products_gain(products[size])
        median_float32 = statistics.median(seconds["float32"])
        for name, runs in seconds.items():
            median = statistics.median(runs)
            row = {"size": size, "configuration": name, "sentences": len(sentences), "tokens": tokens,
                   "seconds": runs, "median_seconds": median, "speedup_over_float32": median_float32 / median,
                   "peak_mb": peaks[name], "median_peak_mb": statistics.median(peaks[name])}
            if sources[name][0] == "bfloat16" and gains:
                row["share_of_products_gain"] = {k: row["speedup_over_float32"] / v for k, v in gains.items()}
            rows.append(row)
        for name in commands:
            if name != "float32":
                deviations[f"{size} {name}"] = deviation(outputs["float32"], outputs[name])
        done = subprocess.run([sys.executable, "-c", "import elmo, sys; print(elmo.__file__)"], env=envs["bfloat16"],
                              capture_output=True, text=True, check=True)
        assert done.stdout.strip().startswith(here), done.stdout  # this checkout ran
    shutil.rmtree(work)  # the outputs of every size and configuration: gigabytes at the original size
    print(f"{len(sentences)} sentences, {tokens} tokens, whole elmo embed processes, median of {args.rounds}")
    print(f"{'size':9}{'configuration':>18}{'seconds':>9}{'vs float32':>12}{'peak MB':>9}{'of products gain':>18}")
    for r in rows:
        share = r.get("share_of_products_gain")
        shown = f"{share['peak']:.0%} / {share['lstm_onednn']:.0%}" if share and "lstm_onednn" in share else ""
        print(f"{r['size']:9}{r['configuration']:>18}{r['median_seconds']:>9.2f}{r['speedup_over_float32']:>11.2f}x"
              f"{r['median_peak_mb']:>9.0f}{shown:>18}")
    for size, found in products.items():
        gains = products_gain(found)
        rates = "; ".join(f"{k} {found['float32'][k] / 1e9:.0f} -> {found['bfloat16'][k] / 1e9:.0f}"
                          for k in ("lstm_onednn", "square_onednn", "lstm_matmul", "square_matmul")
                          if found["float32"].get(k) and found["bfloat16"].get(k))
        print(f"{size} products, GFLOP/s float32 -> bfloat16: {rates}; gain at the best rate "
              f"{gains.get('peak', float('nan')):.2f}x, LSTM shape (oneDNN) {gains.get('lstm_onednn', float('nan')):.2f}x")
    print(f"{'deviation from float32':32}{'min cosine':>12}{'0.1% cosine':>13}{'max |diff|':>12}")
    for name, d in deviations.items():
        print(f"{name:32}{d['min_cosine']:>12.6f}{d['cosine_quantile_0.001']:>13.6f}{d['max_abs_difference']:>12.4f}")
    # write_results adds machine(), whose vector_extensions include the bfloat16 and AMX flags.
    write_results(args.output, {"quick": args.quick, "sentences": len(sentences),
                                "tokens": tokens, "text": "generated" if args.generate else "given",
                                "threads": args.threads, "batch_size": args.batch_size, "rounds": args.rounds,
                                "before": args.before, "rows": rows, "deviation": deviations,
                                "product_peaks": products})
    return 0


if __name__ == "__main__":
    sys.exit(main())
