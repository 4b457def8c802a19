"""Whether int8 products pay for embedding on this CPU: speed and deviation (issue 49, item 4).

It was first run before ``--precision int8`` existed, with its own copy of the int8 product
swapped into the runtime (the numbers in docs/speed.md's probe table); that product is now the
library's (:func:`elmo.model.blocks.quantize` and :func:`~elmo.model.blocks.linear`), and this
script measures it through the runtime's int8 precision. int8 is dynamic and batch-independent by construction: each weight quantized once per
output row (symmetric), each input row quantized on its own scale (symmetric, read from that row
alone), the integer product on oneDNN's int8 kernel (``torch.ops.onednn.qlinear_pointwise``:
VNNI or AMX-INT8 where the CPU has them) with exact int32 sums, then each result scaled by its
row's and column's scales. Two measurements, 2 threads, random weights of the published size:

* **products**: one block of each of the runtime's products at its block size, float32 oneDNN,
  bfloat16 packed (what ``--precision bfloat16`` runs) and int8, microseconds per call (best of
  5, kernels interleaved), with each one's relative error against float64;
* **embedding**: ``--sentences`` sentences of ``--text`` embedded in-process by the runtime in
  float32, in bfloat16 and in int8 (every product of the LSTM and of the highway and projection
  layers on int8 operands; the character convolutions stay float32): tokens/s, and every token
  vector's cosine to float32's.

    python benchmarks/int8_probe.py --text sentences.txt --size original --sentences 300 \\
        --output results/benchmarks/int8_probe_original.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402
from embed_speed import load_sentences, make_model  # noqa: E402

from elmo.model import blocks  # noqa: E402


def best_time(function, repeats: int = 5, calls: int = 20) -> float:
    """Best of ``repeats`` means over ``calls`` calls, in microseconds."""
    for _ in range(3):
        function()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        best = min(best, (time.perf_counter() - start) / calls)
    return 1e6 * best


def product_rows(config) -> list[tuple[str, int, int, int]]:
    """(product, rows, in, out) of each product the runtime runs, at its block size."""
    dim, proj = config.lstm.dim, config.lstm.projection_dim
    highway = sum(n for _, n in config.char_cnn.filters)
    return [("recurrent", blocks.ROW_BLOCK, proj, 4 * dim), ("projection", blocks.ROW_BLOCK, dim, proj),
            ("input gates", blocks.GATE_BLOCK, proj, 4 * dim), ("highway", blocks.HEAD_BLOCK, highway, 2 * highway)]


def products(config) -> list[dict]:
    rows = []
    for name, m, k, n in product_rows(config):
        torch.manual_seed(0)
        x, weight = torch.randn(m, k), torch.randn(n, k) / k ** 0.5
        exact = x.double() @ weight.double().t()
        x16, packed16, quantized = x.bfloat16(), blocks.prepack(weight.bfloat16(), m), blocks.quantize(weight, m)
        kernels = {"float32": lambda: blocks.linear(x, weight), "bfloat16": lambda: blocks.linear(x16, packed16),
                   "int8": lambda: blocks.linear(x, quantized)}
        times = {key: [] for key in kernels}
        for _ in range(5):
            for key, kernel in kernels.items():
                times[key].append(best_time(kernel, repeats=1))
        row = {"product": name, "rows": m, "in": k, "out": n}
        for key, kernel in kernels.items():
            row[f"{key}_us"] = min(times[key])
            row[f"{key}_relative_error"] = float((kernel().double() - exact).norm() / exact.norm())
        rows.append(row)
    return rows


def embed(size: str, sentences: list[list[str]]) -> dict:
    from elmo import Embedder

    os.environ["ELMO_BFLOAT16_CHECK"] = "0"
    model = make_model(size, fast=True)
    tokens = sum(map(len, sentences))
    runs, vectors = {}, {}
    for name in ("float32", "bfloat16", "int8"):
        embedder = Embedder(model, precision=name, batch_size=64)
        embedder.embed_sentences(sentences[:64], layers="all")  # packs, warms
        start = time.perf_counter()
        vectors[name] = embedder.embed_sentences(sentences, layers="all")
        runs[name] = {"seconds": time.perf_counter() - start}
        runs[name]["tokens_per_second"] = tokens / runs[name]["seconds"]
    for name in ("bfloat16", "int8"):
        cosines = []
        for a, b in zip(vectors[name], vectors["float32"]):
            a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
            cosines.append((a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30))
        cosines = np.concatenate(cosines)
        runs[name].update(min_cosine=float(cosines.min()), mean_cosine=float(cosines.mean()),
                          below_0_999=int((cosines < 0.999).sum()), vectors=int(cosines.size))
    return {"size": size, "sentences": len(sentences), "tokens": tokens, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", required=True, help="tokenized sentences, one per line")
    parser.add_argument("--size", default="original", help="published size (random weights)")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--output", default="results/benchmarks/int8_probe.json")
    args = parser.parse_args(argv)
    if not blocks.int8_for("cpu"):
        raise SystemExit("no exact oneDNN int8 kernel here (this PyTorch, or a CPU without VNNI or AMX-INT8)")
    from elmo.model.config import published_config

    product_table = products(published_config(args.size))
    print(f"{'product':12}{'rows':>5}{'in':>6}{'out':>7}{'f32 us':>9}{'bf16 us':>9}{'int8 us':>9}"
          f"{'int8/bf16 speed':>16}{'bf16 err':>10}{'int8 err':>10}")
    for r in product_table:
        print(f"{r['product']:12}{r['rows']:>5}{r['in']:>6}{r['out']:>7}{r['float32_us']:>9.1f}{r['bfloat16_us']:>9.1f}"
              f"{r['int8_us']:>9.1f}{r['bfloat16_us'] / r['int8_us']:>15.2f}x{r['bfloat16_relative_error']:>10.4f}"
              f"{r['int8_relative_error']:>10.4f}")
    embedding = embed(args.size, load_sentences(args.text, args.sentences))
    print(f"\nembedding {embedding['sentences']} sentences ({embedding['tokens']} tokens), {args.size} size:")
    for name, run in embedding["runs"].items():
        extra = (f"  min cosine {run['min_cosine']:.6f}, mean {run['mean_cosine']:.6f}, "
                 f"{run['below_0_999']} of {run['vectors']} vectors below 0.999") if "min_cosine" in run else ""
        print(f"  {name:9}{run['tokens_per_second']:>9.0f} tokens/s{extra}")
    write_results(args.output, {"size": args.size, "threads": torch.get_num_threads(), "products": product_table,
                                "embedding": embedding})
    return 0


if __name__ == "__main__":
    sys.exit(main())
