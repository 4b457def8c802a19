"""Held-out perplexity versus training tokens of a run, as CSV + PNG, with a power-law forecast.

    python experiments/pretrain_curve.py RUN --output results/pretraining/first-run

Reads ``RUN/metrics.csv`` (written by ``elmo train``), keeps the rows with a held-out evaluation,
and writes ``curve.csv``, ``forecast.json`` and ``curve.png`` into ``--output`` (the figure to
``--figure`` instead, where a page shows it). Training time is summed over the
run's sessions (``elapsed_seconds`` restarts from zero at every ``--resume``). A power law
``ppl = a * tokens^b`` fitted to the last ``--fit-points`` evaluations forecasts the number of
tokens at which held-out perplexity would reach ``--target``.

A run that continues an earlier one (``elmo finetune`` of its exported model, whose steps and
tokens count from zero again) is drawn after it with ``--continues EARLIER/curve.csv``: its steps,
tokens and hours are offset by the earlier curve's last row, and the ``run`` column says which
run each evaluation belongs to.

    python experiments/pretrain_curve.py RUN --continues results/pretraining/first-run/curve.csv \
        --output results/pretraining/continued

A run that branched off an earlier run before that run's last evaluation (``elmo finetune`` of
its run directory, which reads the newest checkpoint then: ``init_checkpoint`` in the new run's
``train_settings.json``) gives the total tokens of the branch point with ``--continues-at``; the
earlier evaluations after it are left out. Its steps count on from there at this run's tokens per
step, and its hours from the last evaluation kept plus the tokens in between at this run's median
speed (an estimate: the earlier run's wall clock at the branch point was not evaluated).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys

import numpy as np

from elmo.fileio import atomic_path


def read_curve(metrics_path: str) -> tuple[list[dict], float]:
    """Held-out rows of a metrics file and the run's median training speed (tokens/s).

    Each row carries ``wall_hours``, the run's summed wall-clock time (sessions added up; it
    includes the periods the run was paused for other measurements on the same machine), and
    ``busy_hours``, the tokens so far divided by the median speed: the time an unshared machine
    would have needed.
    """
    all_rows = []
    with open(metrics_path, newline="", encoding="utf-8") as f:
        all_rows = list(csv.DictReader(f))
    median_rate = float(np.median([float(r["tokens_per_second"]) for r in all_rows]))
    rows, offset, last_elapsed = [], 0.0, 0.0
    for row in all_rows:
        elapsed = float(row["elapsed_seconds"])
        if elapsed < last_elapsed:  # a resumed session: its clock starts again at zero
            offset += last_elapsed
        last_elapsed = elapsed
        if row.get("heldout_perplexity"):
            rows.append({"step": int(row["step"]), "tokens": int(row["tokens"]),
                         "wall_hours": round((offset + elapsed) / 3600, 3),
                         "busy_hours": round(int(row["tokens"]) / median_rate / 3600, 3),
                             "heldout_forward": float(row["heldout_forward_perplexity"]),
                             "heldout_backward": float(row["heldout_backward_perplexity"]),
                             "heldout_average": float(row["heldout_perplexity"])})
    # An evaluation repeated after a resume appears twice; keep the first.
    unique = {r["step"]: r for r in reversed(rows)}
    return [unique[s] for s in sorted(unique)], median_rate


def read_earlier_curve(path: str) -> list[dict]:
    """The rows of a curve.csv this script wrote, typed; a file from before the ``run`` column
    names its run "earlier"."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{path}: no evaluations")
    typed = []
    for row in rows:
        typed.append({"run": row.get("run") or "earlier", "step": int(row["step"]), "tokens": int(row["tokens"]),
                      **{key: float(row[key]) for key in ("wall_hours", "busy_hours", "heldout_forward",
                                                          "heldout_backward", "heldout_average")}})
    return typed


def read_options(run: str) -> dict:
    """The run's ``options.json`` (bilm-tf layout: ``batch_size``, ``unroll_steps`` at the top)."""
    with open(os.path.join(run, "options.json"), encoding="utf-8") as f:
        return json.load(f)


def fit_power_law(tokens: list[int], perplexities: list[float]) -> tuple[float, float]:
    """Least-squares fit of ``log ppl = log a + b log tokens``; returns ``(a, b)``."""
    b, log_a = np.polyfit(np.log(tokens), np.log(perplexities), 1)
    return math.exp(log_a), float(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="training run directory (with metrics.csv)")
    parser.add_argument("--output", required=True, help="folder for curve.csv, forecast.json and curve.png")
    parser.add_argument("--figure", help="where the PNG goes (default: curve.png in --output)")
    parser.add_argument("--fit-points", type=int, default=4, help="evaluations the forecast is fitted to")
    parser.add_argument("--target", type=float, default=100.0, help="perplexity the forecast aims at")
    parser.add_argument("--continues", help="curve.csv of the run this one continues from")
    parser.add_argument("--continues-at", type=int,
                        help="with --continues: total training tokens at which this run branched off (default: "
                             "the earlier curve's last evaluation)")
    args = parser.parse_args(argv)

    curve, median_rate = read_curve(os.path.join(args.run, "metrics.csv"))
    name = os.path.basename(os.path.normpath(args.run))
    curve = [{"run": name, **row} for row in curve]
    continued_at = None
    if args.continues_at is not None and not args.continues:
        parser.error("--continues-at needs --continues")
    if args.continues:
        earlier = read_earlier_curve(args.continues)
        at = earlier[-1]["tokens"] if args.continues_at is None else args.continues_at
        earlier = [row for row in earlier if row["tokens"] <= at]
        if not earlier:
            parser.error(f"--continues-at {at}: before the first evaluation of {args.continues}")
        last = earlier[-1]
        between = at - last["tokens"]
        options = read_options(args.run)
        hours = between / median_rate / 3600
        offset = {"step": last["step"] + between // (options["batch_size"] * options["unroll_steps"]),
                  "tokens": at, "wall_hours": last["wall_hours"] + hours, "busy_hours": last["busy_hours"] + hours}
        continued_at = at
        branched_from = "the packaged model" if last["run"] == "earlier" else last["run"]
        for row in curve:
            for key in ("step", "tokens", "wall_hours", "busy_hours"):
                row[key] = round(row[key] + offset[key], 3) if isinstance(row[key], float) else row[key] + offset[key]
        curve = [row for row in earlier if row["run"] != name] + curve
    if len(curve) < 2:
        print(f"{args.run}: fewer than two held-out evaluations in metrics.csv", file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    with atomic_path(os.path.join(args.output, "curve.csv")) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(curve[0]))
        writer.writeheader()
        writer.writerows(curve)

    fitted = curve[-args.fit_points:]
    a, b = fit_power_law([r["tokens"] for r in fitted], [r["heldout_average"] for r in fitted])
    # A curve that has stopped falling forecasts nothing: the fit would reach the target backwards.
    falling = b < 0
    target_tokens, busy_hours_at_target = None, None
    if falling:
        target_tokens = (args.target / a) ** (1 / b)
        busy_hours_at_target = round(curve[-1]["busy_hours"]
                                     + max(target_tokens - curve[-1]["tokens"], 0) / median_rate / 3600, 1)
    forecast = {"fit": f"ppl = {a:.4g} * tokens^{b:.4f}", "fit_points": len(fitted), "target": args.target,
                "tokens_at_target": round(target_tokens) if falling else None,
                "median_tokens_per_second": round(median_rate), "busy_hours_at_target": busy_hours_at_target,
                "last": curve[-1]}
    with atomic_path(os.path.join(args.output, "forecast.json")) as tmp, open(tmp, "w") as f:
        json.dump(forecast, f, indent=1)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    tokens = np.array([r["tokens"] for r in curve])
    for key, label in (("heldout_forward", "forward"), ("heldout_backward", "backward"), ("heldout_average", "average")):
        ax.plot(tokens / 1e6, [r[key] for r in curve], label=label, linewidth=2 if key == "heldout_average" else 1)
    runs = list(dict.fromkeys(r["run"] for r in curve))
    for run in runs:  # each run's evaluations in their own colour, so a chain of runs reads as one
        rows = [r for r in curve if r["run"] == run]
        chained = len(runs) > 1
        label = ("the first run" if run == "earlier" else f"run {run}") if chained else None
        ax.plot([r["tokens"] / 1e6 for r in rows], [r["heldout_average"] for r in rows], "o", markersize=4,
                label=label, color=None if chained else "C2")
    if falling:
        extension = np.geomspace(fitted[0]["tokens"], max(target_tokens, tokens[-1]) * 1.05, 50)
        ax.plot(extension / 1e6, a * extension ** b, "k--", linewidth=1,
                label=f"power law fitted to the last {len(fitted)}, exponent {b:.2f}")
    ax.axhline(args.target, color="grey", linewidth=0.8)
    if continued_at is not None:
        ax.axvline(continued_at / 1e6, color="grey", linestyle=":", linewidth=1,
                   label=f"{name} starts from {branched_from}'s weights (new optimizer state)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("held-out perplexity")
    ax.set_title("Default model (2x512_128) on Wikipedia held-out")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    with atomic_path(args.figure or os.path.join(args.output, "curve.png")) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    for r in curve:
        print(f"{r['step']:>7} {r['tokens']:>11,} {r['busy_hours']:>6.2f} h  ppl {r['heldout_average']:.1f}")
    if falling:
        print(f"forecast: {forecast['fit']}; {args.target:g} at {target_tokens / 1e6:.0f}M tokens "
              f"(~{forecast['busy_hours_at_target']} h at the median {median_rate:.0f} tokens/s)")
    else:
        print(f"no forecast: the last {len(fitted)} evaluations no longer fall ({forecast['fit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
