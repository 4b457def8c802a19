"""The paper's task analyses, each one command that writes a Markdown table or a PNG into docs/.

    python experiments/task_experiments.py main        [--seeds 1 2 3] [--configs ...]
    python experiments/task_experiments.py layers      # Table 2: mix with lambda 1 / 0.001, top, average
    python experiments/task_experiments.py placement   # Table 3: ELMo at input, output, both
    python experiments/task_experiments.py samples     # Figure 1: 1% / 10% / 100% of the training data
    python experiments/task_experiments.py weights     # Figure 2: learned layer weights (from earlier runs)
    python experiments/task_experiments.py domain-text --output TEXT   # the task's training text, for elmo finetune
    python experiments/task_experiments.py domain --finetuned MODEL_DIR   # the biLM adapted to that text

Every run goes to ``--runs/<experiment>/<config>/<variant>/seed-<n>`` and is skipped when its
``metrics.json`` exists, so an interrupted experiment continues where it stopped. Common flags:
``--epochs`` caps the epochs of every run (for quick looks), ``--bilm`` picks the biLM (default:
the packaged model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from elmo.fileio import atomic_write_text
from elmo.tasks.config import load_task_config
from elmo.tasks.training import train_task

ALL_CONFIGS = ["configs/tasks/ner-conll2003.toml", "configs/tasks/ner-wnut17.toml", "configs/tasks/pos-ewt.toml",
               "configs/tasks/chunk-conll2000.toml", "configs/tasks/sst5.toml", "configs/tasks/sick.toml"]

VARIANTS = {
    "main": {"baseline": {"elmo": {"enabled": False}}, "elmo": {}},
    "layers": {"mix-l2-1": {"elmo": {"layers": "mix", "l2": 1.0}},
               "mix-l2-0.001": {"elmo": {"layers": "mix", "l2": 0.001}},
               "top": {"elmo": {"layers": "top"}}, "average": {"elmo": {"layers": "average"}}},
    "placement": {"input": {"elmo": {"placement": "input"}}, "output": {"elmo": {"placement": "output"}},
                  "both": {"elmo": {"placement": "both"}}},
}


def run_variant(args, experiment: str, config_path: str, variant: str, overrides: dict, seed: int) -> dict:
    """Train one (config, variant, seed) unless its metrics already exist; return its metrics."""
    name = os.path.splitext(os.path.basename(config_path))[0]
    output = os.path.join(args.runs, experiment, name, variant, f"seed-{seed}")
    done = os.path.join(output, "metrics.json")
    if os.path.isfile(done):
        with open(done, encoding="utf-8") as f:
            return json.load(f)
    merged = {key: dict(value) for key, value in overrides.items()}
    merged["output"] = output
    merged["train"] = {**merged.get("train", {}), "seed": seed}
    if args.epochs:
        merged["train"]["epochs"] = args.epochs
    if args.bilm:  # a variant's own biLM (the domain experiment's) wins
        merged["bilm"] = {"model": args.bilm, **merged.get("bilm", {})}
    merged["cache_dir"] = args.cache
    config = load_task_config(config_path, merged)
    started = time.time()
    metrics = train_task(config, resume=True, progress=not args.quiet)
    print(f"{name} {variant} seed {seed}: dev {metrics['dev']:.4f}"
          + (f" test {metrics['test']:.4f}" if "test" in metrics else "")
          + f" ({time.time() - started:.0f} s)", file=sys.stderr)
    return metrics


def reported(metrics: dict) -> float:
    """The number a table reports: test when the data set has a test split, else dev."""
    return metrics.get("test", metrics["dev"])


def mean_std(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.2f} ± {100 * spread:.2f}"


def table(args, experiment: str, variants: dict) -> list[str]:
    """Run every config x variant x seed; a Markdown table of mean ± std per variant."""
    lines = ["| task | metric | split | " + " | ".join(variants) + " |",
             "|---|---|---|" + "---:|" * len(variants)]
    results = {}
    for config_path in args.configs:
        config = load_task_config(config_path)
        scores = {v: [reported(run_variant(args, experiment, config_path, v, o, s)) for s in args.seeds]
                  for v, o in variants.items()}
        results[config_path] = scores
        split = "test" if config.data.test is not None else "dev"
        name = os.path.splitext(os.path.basename(config_path))[0]
        lines.append(f"| {name} | {config.metric} | {split} | " + " | ".join(mean_std(scores[v]) for v in variants) + " |")
    if experiment == "main":
        lines += ["", "| task | increase (absolute) | relative error reduction |", "|---|---:|---:|"]
        for config_path, scores in results.items():
            base, elmo = statistics.mean(scores["baseline"]), statistics.mean(scores["elmo"])
            reduction = (elmo - base) / (1 - base) if base < 1 else 0.0
            name = os.path.splitext(os.path.basename(config_path))[0]
            lines.append(f"| {name} | {100 * (elmo - base):+.2f} | {100 * reduction:.1f}% |")
    return lines


def write_markdown(path: str, title: str, command: str, lines: list[str]) -> None:
    text = f"# {title}\n\nProduced by `{command}`.\nScores are percentages, mean ± std over seeds.\n\n" + "\n".join(lines) + "\n"
    atomic_write_text(path, text)
    print(text)


def samples(args) -> list[str]:
    fractions = [0.01, 0.1, 1.0]
    lines = ["| task | training data | baseline | +ELMo |", "|---|---:|---:|---:|"]
    for config_path in args.configs:
        name = os.path.splitext(os.path.basename(config_path))[0]
        for fraction in fractions:
            row = []
            for variant, overrides in VARIANTS["main"].items():
                merged = {**overrides, "data": {"train_fraction": fraction}}
                row.append(mean_std([reported(run_variant(args, "samples", config_path, f"{variant}-{fraction:g}",
                                                          merged, s)) for s in args.seeds]))
            lines.append(f"| {name} | {100 * fraction:g}% | {row[0]} | {row[1]} |")
    return lines


def weights_plot(args) -> None:
    """Figure 2: the softmax-normalised layer weights learned in the placement runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    for config_path in args.configs:
        name = os.path.splitext(os.path.basename(config_path))[0]
        for placement in ("input", "output"):
            path = os.path.join(args.runs, "placement", name, "both", f"seed-{args.seeds[0]}", "metrics.json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    weights = json.load(f)["layer_weights"].get(placement)
                if weights:
                    rows.append((f"{name} ({placement})", weights))
    if not rows:
        raise SystemExit(f"no placement runs under {args.runs}/placement: run the 'placement' experiment first")
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(rows) + 1.2))
    image = ax.imshow([w for _, w in rows], cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_xticks(range(len(rows[0][1])), ["tokens"] + [f"LSTM {i}" for i in range(1, len(rows[0][1]))])
    for y, (_, weights) in enumerate(rows):
        for x, w in enumerate(weights):
            ax.text(x, y, f"{w:.2f}", ha="center", va="center", color="white" if w < 0.6 else "black", fontsize=8)
    fig.colorbar(image, ax=ax, label="softmax-normalised weight")
    ax.set_title("Learned ELMo layer weights (ELMo at input and output)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.png), exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


def write_task_text(config_path: str, output: str) -> None:
    """The training split's sentences, one per line: unlabeled in-domain text for ``elmo finetune``."""
    from elmo.tasks.training import load_splits, sentences_of

    train = load_splits(load_task_config(config_path))["train"]
    atomic_write_text(output, "".join(" ".join(s) + "\n" for s in sentences_of(train)))
    print(f"wrote {len(train)} training examples of {config_path} to {output}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["main", "layers", "placement", "samples", "weights", "domain-text", "domain"])
    parser.add_argument("--configs", nargs="+", help="task configs (default: depends on the experiment)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--runs", default="runs/experiments", help="where the runs go")
    parser.add_argument("--cache", default="cache/layers", help="biLM layer cache")
    parser.add_argument("--epochs", type=int, help="cap the epochs of every run")
    parser.add_argument("--bilm", help="biLM name or folder (default: the packaged model)")
    parser.add_argument("--finetuned", help="domain: exported folder of the biLM fine-tuned on the task text")
    parser.add_argument("--output", help="Markdown file to write (default under docs/tasks/)")
    parser.add_argument("--png", default="docs/tasks/layer-weights.png")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    command = "python experiments/task_experiments.py " + " ".join(argv if argv is not None else sys.argv[1:])
    default_configs = {"samples": ["configs/tasks/ner-conll2003.toml", "configs/tasks/sst5.toml"],
                       "domain": ["configs/tasks/ner-wnut17.toml"]}
    args.configs = args.configs or default_configs.get(args.experiment, ALL_CONFIGS)
    titles = {"main": "Baseline vs +ELMo (the paper's Table 1)", "layers": "Layer weighting (the paper's Table 2)",
              "placement": "Where to include ELMo (the paper's Table 3)",
              "samples": "Sample efficiency (the paper's Figure 1)",
              "domain": "Domain fine-tuning of the biLM"}
    output = args.output or f"docs/tasks/{args.experiment}.md"
    if args.experiment in ("main", "layers", "placement"):
        write_markdown(output, titles[args.experiment], command, table(args, args.experiment, VARIANTS[args.experiment]))
    elif args.experiment == "samples":
        write_markdown(output, titles["samples"], command, samples(args))
    elif args.experiment == "weights":
        weights_plot(args)
    elif args.experiment == "domain-text":
        if not args.output:
            parser.error("domain-text needs --output: the text file to write")
        write_task_text(args.configs[0], args.output)
    else:
        if not args.finetuned:
            parser.error("domain needs --finetuned: the exported biLM fine-tuned with elmo finetune on the task text")
        variants = {"unadapted": {}, "fine-tuned": {"bilm": {"model": args.finetuned}}}
        write_markdown(output, titles["domain"], command, table(args, "domain", variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
