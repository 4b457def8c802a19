"""The packaged model's held-out curve through its GPU training, on one measure, as CSV + PNG.

The CPU curve (``docs/pretraining/curve.png``, from ``results/pretraining/curve.csv``) scores the first 50,000 held-out predictions; the
GPU runs were scored on the first 200,960 (``--eval-targets 200000``). This draws the GPU part on
its own measure: the 34.12M-token CPU model and the first lease's 66.07M-token result
(``elmo evaluate MODEL --data ... --max-targets 200000``), then every held-out evaluation of the
second lease's phases, each phase's tokens counted on from the checkpoint the next phase started
from (the newest multiple of ``--checkpoint-every`` steps at or before its last logged step),
and the packaged result (``heldout-200k-packaged.json``: the same ``elmo evaluate`` on it).

    python experiments/gpu_curve.py

reads ``results/pretraining/gpu`` and ``results/pretraining/gpu2`` and writes
``results/pretraining/gpu2/curve.csv`` and the figure ``docs/pretraining/gpu-curve.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from elmo.fileio import atomic_path

CPU_TOKENS = 34_120_320  # the CPU chain (results/pretraining/curve.csv)
START_TOKENS = CPU_TOKENS + 780 * 2048 * 20  # the first lease: 780 steps of 2,048 x 20 (docs/pretraining.md)


def points(folder: str, first_lease: str, checkpoint_every: int) -> list[dict]:
    rows = []
    for name, tokens in (("heldout-200k-before.json", CPU_TOKENS), ("heldout-200k-after.json", START_TOKENS)):
        result = json.load(open(os.path.join(first_lease, name)))
        rows.append({"phase": "cpu" if tokens == CPU_TOKENS else "lease-1", "tokens": tokens,
                     "heldout_average": result["average_perplexity"]})
    offset = START_TOKENS
    phase = 1
    while os.path.exists(path := os.path.join(folder, f"phase-{phase}-metrics.csv")):
        with open(path, newline="") as f:
            logged = list(csv.DictReader(f))
        for row in logged:
            if row["heldout_perplexity"]:
                rows.append({"phase": f"lease-2 phase {phase}", "tokens": offset + int(row["tokens"]),
                             "heldout_average": float(row["heldout_perplexity"])})
        last_step = int(logged[-1]["step"])
        kept_steps = last_step - last_step % checkpoint_every
        offset += kept_steps * int(logged[-1]["tokens"]) // last_step
        phase += 1
    packaged = os.path.join(folder, "heldout-200k-packaged.json")
    if os.path.exists(packaged):  # the export of the last phase's newest checkpoint
        rows.append({"phase": "packaged", "tokens": offset,
                     "heldout_average": json.load(open(packaged))["average_perplexity"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", default="results/pretraining/gpu2", help="the second lease's metrics")
    parser.add_argument("--first-lease", default="results/pretraining/gpu", help="the first lease's evaluations")
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--output", default="results/pretraining/gpu2", help="folder for curve.csv")
    parser.add_argument("--figure", default="docs/pretraining/gpu-curve.png")
    args = parser.parse_args(argv)
    rows = points(args.folder, args.first_lease, args.checkpoint_every)
    with atomic_path(os.path.join(args.output, "curve.csv")) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, ["phase", "tokens", "heldout_average"])
        writer.writeheader()
        writer.writerows(rows)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for phase in dict.fromkeys(r["phase"] for r in rows):
        mine = [r for r in rows if r["phase"] == phase]
        ax.plot([r["tokens"] / 1e6 for r in mine], [r["heldout_average"] for r in mine], "o-", label=phase)
    ax.set_xlabel("training tokens per direction (millions)")
    ax.set_ylabel("held-out perplexity, first 200,960 predictions")
    ax.set_title("Packaged model: CPU, then two H100 leases")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(args.figure) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    for r in rows:
        print(f"{r['phase']:>18} {r['tokens'] / 1e6:8.2f}M {r['heldout_average']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
