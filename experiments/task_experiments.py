"""The paper's task analyses, each one command that writes a Markdown table or a PNG into docs/.

    python experiments/task_experiments.py main        [--seeds 1 2 3] [--configs ...] [--variants ...]
    python experiments/task_experiments.py layers      # Table 2: no ELMo, top layer, mix with lambda 1 / 0.001 (--variants average: equal weights)
    python experiments/task_experiments.py placement   # Table 3: ELMo at input, output, both
    python experiments/task_experiments.py samples     # Figure 1: 1% / 10% / 100% of the training data
    python experiments/task_experiments.py weights     # Figure 2: learned layer weights (from earlier runs)
    python experiments/task_experiments.py snli        # the main table's SICK models scored on SNLI dev/test
    python experiments/task_experiments.py gap         # the main table's LitBank coreference models scored on GAP
    python experiments/task_experiments.py domain-text --output TEXT [--split dev]  # the task's text, for elmo finetune
    python experiments/task_experiments.py domain --finetuned MODEL_DIR   # the biLM adapted to that text
    python experiments/task_experiments.py precision   # the biLM in bfloat16 and int8 against float32, same seeds (CoNLL-2003)
    python experiments/task_experiments.py main --status   # where each planned run stands; trains nothing

Every run goes to ``--runs/<experiment>/<config>/<variant>/seed-<n>`` and is skipped when its
``metrics.json`` exists, so an interrupted experiment continues where it stopped. Common flags:
``--epochs`` caps the epochs of every run (for quick looks), ``--bilm`` picks the biLM (default:
the packaged model), ``--variants`` runs only some of an experiment's variants (two processes
with different variants can train side by side; a later run without it finds their results).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

from elmo.fileio import atomic_write_text
from elmo.tasks.config import load_task_config, upgrade_config_dict
from elmo.tasks.training import train_task

ALL_CONFIGS = ["configs/tasks/ner-conll2003.toml", "configs/tasks/ner-wnut17.toml", "configs/tasks/pos-ewt.toml",
               "configs/tasks/chunk-conll2000.toml", "configs/tasks/sst5.toml", "configs/tasks/sick.toml",
               "configs/tasks/snli-mini.toml", "configs/tasks/sick-relatedness.toml",
               "configs/tasks/srl-propbank-ewt.toml", "configs/tasks/coref-litbank.toml", "configs/tasks/squad.toml"]


def shown_command(script: str, arguments: list[str]) -> str:
    """The command line as a page shows it: a path under the folder in $RUNS (experiments/all_tables.sh
    exports it) starts with ``$RUNS``, so that no committed page names one machine's folders."""
    runs = os.environ.get("RUNS", "").rstrip("/")
    shown = [("$RUNS" + a[len(runs):]) if runs and (a == runs or a.startswith(runs + "/")) else a for a in arguments]
    return " ".join([f"python {script}", *shown])

# The configs of the experiments that do not default to ALL_CONFIGS; the transfer tables (snli, gap)
# read their default task's main runs, which keep those evaluations as soon as they train.
DEFAULT_CONFIGS = {"samples": ["configs/tasks/ner-conll2003.toml", "configs/tasks/sst5.toml"],
                   "domain": ["configs/tasks/ner-wnut17.toml"], "domain-text": ["configs/tasks/ner-wnut17.toml"],
                   "snli": ["configs/tasks/sick.toml"], "gap": ["configs/tasks/coref-litbank.toml"],
                   "diagnose": ["configs/tasks/sick.toml"], "precision": ["configs/tasks/ner-conll2003.toml"]}

VARIANTS = {
    "main": {"baseline": {"elmo": {"enabled": False}}, "elmo": {}},
    "layers": {"baseline": {"elmo": {"enabled": False}}, "top": {"elmo": {"layers": "top"}},
               "mix-l2-1": {"elmo": {"layers": "mix", "l2": 1.0}},
               "mix-l2-0.001": {"elmo": {"layers": "mix", "l2": 0.001}},
               "average": {"elmo": {"layers": "average"}}},
    "placement": {"input": {"elmo": {"placement": "input"}}, "output": {"elmo": {"placement": "output"}},
                  "both": {"elmo": {"placement": "both"}}},
    # The float32 variant has the main table's +ELMo settings, so it reuses those runs where they are.
    "precision": {"float32": {}, "bfloat16": {"bilm": {"precision": "bfloat16"}}, "int8": {"bilm": {"precision": "int8"}}},
}

# The variants a table runs when --variants does not name them: every one, except that the layer
# table is the paper's Table 2 (no ELMo, the top layer, the mix with lambda 1 and with 0.001).
# "average" (fixed equal weights) is what lambda 1 approaches, as the paper says: with the first
# packaged model at one seed it was within 0.06 points of lambda 1 on every tagging task (commit
# 3bfb23c's docs/tasks/layers.md), so it is run only on request.
DEFAULT_VARIANTS = {"layers": ["baseline", "top", "mix-l2-1", "mix-l2-0.001"]}


def task_name(config_path: str) -> str:
    """The name a task's runs and table rows go by: its config's file name without ``.toml``."""
    return os.path.splitext(os.path.basename(config_path))[0]


def variant_config(args, experiment: str, config_path: str, variant: str, overrides: dict, seed: int):
    """The TaskConfig of one (config, variant, seed): the file plus the variant's overrides."""
    name = task_name(config_path)
    merged = {key: dict(value) for key, value in overrides.items()}
    merged["output"] = os.path.join(args.runs, experiment, name, variant, f"seed-{seed}")
    merged["train"] = {**merged.get("train", {}), "seed": seed}
    if args.epochs and "epochs" not in merged["train"]:  # a variant's own epochs (samples') win
        merged["train"]["epochs"] = args.epochs
    if args.bilm:  # a variant's own biLM (the domain experiment's) wins
        merged["bilm"] = {"model": args.bilm, **merged.get("bilm", {})}
    merged["cache_dir"] = args.cache
    return load_task_config(config_path, merged, data_root=args.data_root)


def finished_run(args, name: str, config) -> tuple[str | None, bool]:
    """The folder whose metrics.json holds the result of ``config`` (a run of task ``name``) and
    whether it is another experiment's identical run; (None, False) while nothing has trained it.
    A finished run in ``config``'s own folder with other settings (say, the domain experiment's
    "fine-tuned" runs of another fine-tuned biLM) is an error, not a result of ``config``."""
    if os.path.isfile(os.path.join(config.output, "metrics.json")):
        differences = setting_differences(os.path.join(config.output, "config.json"), config.to_dict())
        if differences:
            raise SystemExit(f"{config.output}: holds a finished run with other settings than this experiment "
                             f"asks for ({'; '.join(differences)}); move it away or give another --runs")
        return config.output, False
    same = identical_run(args.runs, name, config.train.seed, config.to_dict())
    return (same, True) if same is not None else (None, False)


def run_variant(args, experiment: str, config_path: str, variant: str, overrides: dict, seed: int) -> dict:
    """Train one (config, variant, seed) unless it, or an identical run, has finished; return its metrics.
    A finished run whose later evaluations (:func:`later_evaluations`) are not kept and whose model
    is gone trains again."""
    name = task_name(config_path)
    config = variant_config(args, experiment, config_path, variant, overrides, seed)
    folder, reused = finished_run(args, name, config)
    later = later_evaluations(args, experiment, name)
    if getattr(args, "status", False):
        row = run_state(experiment, name, variant, config, folder, reused)
        if row["state"] == "done" and needs_retraining(folder, later):
            row["state"] = "retrain"
        args.status_rows.append(row)
        return {"dev": 0.0}  # a stand-in: with --status the tables built from it are not written
    if folder is not None and not reused and needs_retraining(folder, later):
        kept = retrain_from_scratch(folder)
        print(f"{name} {variant} seed {seed}: training again, for {', '.join(label for label, *_ in later)}: "
              f"only the JSON files of this run were kept, not its model (dev was {kept['dev']:.4f})", file=sys.stderr)
        folder = None
    if folder is not None:
        with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        if reused:
            print(f"{name} {variant} seed {seed}: same settings as {folder}, reusing its metrics", file=sys.stderr)
            args.reused += 1
        else:
            count_time(args, metrics)
            keep_later_evaluations(args, folder, later)
        return with_evaluated_test(args, folder, config, metrics)
    started = time.time()
    metrics = train_task(config, resume=True, progress=not args.quiet)
    count_time(args, metrics)
    print(f"{name} {variant} seed {seed}: dev {metrics['dev']:.4f}"
          + (f" test {metrics['test']:.4f}" if "test" in metrics else "")
          + f" ({time.time() - started:.0f} s)", file=sys.stderr)
    keep_later_evaluations(args, config.output, later)
    return with_evaluated_test(args, config.output, config, metrics)


def later_evaluations(args, experiment: str, name: str) -> list[tuple[str, str, str | None, str]]:
    """The evaluations of a run of task ``name`` that a later table reads, besides its test score,
    as ``(label, data, split, kind)``: the transfer tables' (``snli``, ``gap``) for the main
    experiment's runs of their default task. Only the runs' JSON files outlive a machine
    (experiments/all_tables.sh keeps them in the repository), so these are made as soon as the run
    has trained, while its model is on disk."""
    if experiment != "main":
        return []
    if name == task_name(DEFAULT_CONFIGS["snli"][0]):
        return snli_evaluations(args)
    if name == task_name(DEFAULT_CONFIGS["gap"][0]):
        return gap_evaluations(args)
    return []


def snli_evaluations(args) -> list[tuple[str, str, str | None, str]]:
    """SNLI dev and test (``--snli``) as ``(label, data, split, kind)``."""
    return [(f"snli-{split}", args.snli, split, "snli") for split in ("dev", "test")]


def gap_evaluations(args) -> list[tuple[str, str, str | None, str]]:
    """GAP's development and test files (``--gap``) as ``(label, data, split, kind)``."""
    return [(f"gap-{name}", os.path.join(args.gap, f"gap-{name}.tsv"), None, "gap") for name in ("development", "test")]


def missing_evaluations(folder: str, later: list[tuple]) -> list[str]:
    """The labels of ``later`` that have no kept ``<label>.json`` in ``folder``."""
    return [label for label, *_ in later if not os.path.isfile(os.path.join(folder, f"{label}.json"))]


def needs_retraining(folder: str, later: list[tuple]) -> bool:
    """Whether a finished run lacks a later evaluation and its model: on a new machine only its JSON
    files came back from the repository, so the model must be trained again to evaluate it."""
    return bool(missing_evaluations(folder, later)) and not os.path.isfile(os.path.join(folder, "best.pt"))


FIRST_TRAINING = "first-training-metrics.json"


def retrain_from_scratch(folder: str) -> dict:
    """Clear a finished run whose model is gone so that it trains again, and return its old metrics,
    which stay beside it as ``first-training-metrics.json``. Its evaluations go: they belong to the
    old model, and the tables must read one model's scores. ``metrics.json`` goes last, so an
    interruption leaves a run that is still recognised as finished (and cleared again) or one that
    resumes from its ``last.pt``."""
    with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
        kept = json.load(f)
    for path in glob.glob(os.path.join(folder, "*.json")):
        if os.path.basename(path) not in ("config.json", "metrics.json", FIRST_TRAINING):
            os.remove(path)
    os.replace(os.path.join(folder, "metrics.json"), os.path.join(folder, FIRST_TRAINING))
    return kept


def keep_later_evaluations(args, folder: str, later: list[tuple]) -> None:
    """Make (and keep next to the run) each of ``later`` that is not kept yet."""
    for label, data, split, kind in later:
        kept_evaluation(args, folder, label, data, split, kind=kind)


def count_time(args, metrics: dict) -> None:
    """Adds a run's ``seconds`` to the experiment's training time, noting a run whose time before a
    resume was not recorded (its checkpoint predates that)."""
    args.trained.append(metrics["seconds"])
    if "seconds_counted_from_epoch" in metrics:
        args.untimed += 1


def run_state(experiment: str, name: str, variant: str, config, folder: str | None, reused: bool) -> dict:
    """Where one planned run stands, without training anything: ``state`` is ``done`` (its
    metrics.json exists), ``reused`` (an identical run of another experiment finished), ``partial``
    (``last.pt`` holds finished epochs; training resumes after them) or ``pending``."""
    row = {"experiment": experiment, "task": name, "variant": variant, "seed": config.train.seed,
           "max_epochs": config.train.epochs, "epochs": 0, "best_epoch": None, "seconds": None}
    if folder is not None:
        with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        row.update(state="reused" if reused else "done", epochs=len(metrics.get("history", [])),
                   best_epoch=metrics.get("best_epoch"), seconds=metrics.get("seconds"), folder=folder,
                   counted_from=metrics.get("seconds_counted_from_epoch"))
        return row
    last = os.path.join(config.output, "last.pt")
    if os.path.isfile(last):
        import torch

        state = torch.load(last, map_location="cpu", weights_only=True)
        row.update(state="partial", epochs=int(state["epoch"]), best_epoch=int(state["best_epoch"]))
    else:
        row["state"] = "pending"
    return row


def status_lines(rows: list[dict]) -> list[str]:
    """A Markdown table of :func:`run_state` rows and a summary: CPU minutes of the finished runs,
    and an estimate for the rest from the mean time of the same task and variant's finished runs
    (runs of a task and variant with none finished are counted, not estimated; a finished run that
    must train again, state ``retrain``, is estimated at its own earlier time)."""
    lines = ["| experiment | task | variant | seed | state | epochs (best) | minutes |", "|---|---|---|---:|---|---:|---:|"]
    for r in rows:
        best = f" ({r['best_epoch']})" if r["best_epoch"] else ""
        minutes = f"{r['seconds'] / 60:.1f}" if r["seconds"] is not None else ""
        if r.get("counted_from"):
            minutes += f" (from epoch {r['counted_from']} on)"
        lines.append(f"| {r['experiment']} | {r['task']} | {r['variant']} | {r['seed']} | {r['state']} | "
                     f"{r['epochs']}/{r['max_epochs']}{best} | {minutes} |")
    done = [r for r in rows if r["state"] == "done"]
    times: dict[tuple, list[float]] = {}
    for r in done:
        times.setdefault((r["task"], r["variant"]), []).append(r["seconds"])
    left = [r for r in rows if r["state"] in ("partial", "pending", "retrain")]
    estimate, unknown = 0.0, 0
    for r in left:
        known = times.get((r["task"], r["variant"]))
        if r["state"] == "retrain":  # its own time, the first time it trained
            estimate += r["seconds"]
        elif known:
            share = 1 - r["epochs"] / r["max_epochs"] if r["state"] == "partial" else 1.0
            estimate += statistics.mean(known) * share
        else:
            unknown += 1
    counts = {state: sum(r["state"] == state for r in rows) for state in ("done", "reused", "partial", "pending", "retrain")}
    retrain = (f", {counts['retrain']} to train again (finished, but the model that a later evaluation needs is gone)"
               if counts["retrain"] else "")
    lines += ["", f"{len(rows)} runs: {counts['done']} done ({sum(r['seconds'] for r in done) / 60:.1f} CPU-minutes), "
                  f"{counts['reused']} reused, {counts['partial']} partly trained, {counts['pending']} not started{retrain}.",
              f"Left: about {estimate / 60:.0f} CPU-minutes for {len(left) - unknown} runs (the mean of their task and "
              f"variant's finished runs, all epochs; early stopping can end them sooner); {unknown} more runs have no "
              f"finished run to estimate from."]
    return lines


def kept_evaluation(args, folder: str, label: str, data: str, split: str | None, kind: str | None = None,
                    needs: str | None = None) -> dict:
    """``elmo task evaluate`` of the run in ``folder`` on ``data`` (``split``, read as ``kind``),
    kept next to the run as ``<label>.json`` with its ``seconds`` and read back from there; a kept
    result whose details lack ``needs`` (made by an older version) is computed again."""
    from elmo.tasks.training import evaluate_task

    path = os.path.join(folder, f"{label}.json")
    result = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    if result is None or (needs is not None and needs not in result.get("details", {})):
        started = time.time()
        result = evaluate_task(folder, data, split, kind=kind, progress=not args.quiet)
        result["seconds"] = round(time.time() - started, 1)
        atomic_write_text(path, json.dumps(result, indent=1) + "\n", make_parents=True)
    return result


def with_evaluated_test(args, folder: str, config, metrics: dict) -> dict:
    """``metrics`` with its test score replaced by what ``elmo task evaluate`` gives on the
    config's test file: the number a user who evaluates the run gets, new words' vectors included.
    The result is kept next to the run as ``test-eval.json``; a difference from the score the
    training computed is reported (it would mean the two paths disagree)."""
    if config.data.test is None:
        return metrics
    result = kept_evaluation(args, folder, "test-eval", config.data.test.path, config.data.test.split)
    args.evaluated.append(result["seconds"])
    if "test" in metrics and abs(result["score"] - metrics["test"]) > 1e-9:
        print(f"{folder}: elmo task evaluate gives test {result['score']:.6f}, training gave {metrics['test']:.6f}",
              file=sys.stderr)
    return {**metrics, "test": result["score"]}


def setting_differences(config_json: str, settings: dict) -> list[str]:
    """Each setting (dotted name: the run's value, the wanted value) in which the run whose
    ``config.json`` is given differs from ``settings``; where a run and its layer cache live does
    not count. A run without a config.json has nothing to compare; one written by an earlier
    version is read in today's shape (:func:`elmo.tasks.config.upgrade_config_dict`)."""
    if not os.path.isfile(config_json):
        return []
    with open(config_json, encoding="utf-8") as f:
        earlier = upgrade_config_dict(json.load(f))

    def flat(values: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in values.items():
            if key in ("output", "cache_dir") and not prefix:
                continue
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    have, want = flat(earlier), flat(settings)
    return [f"{key}: the run's {have.get(key, 'unset')!r}, wanted {want.get(key, 'unset')!r}"
            for key in sorted(set(have) | set(want)) if have.get(key, "unset") != want.get(key, "unset")]


def identical_run(runs: str, name: str, seed: int, settings: dict) -> str | None:
    """A finished run of another experiment whose settings equal ``settings`` (apart from its
    output folder), so that e.g. the layers experiment's "mix, lambda 0.001" reuses the main
    table's +ELMo run instead of training the same model again."""
    # Where a run and its layer cache live does not change its result.
    wanted = {k: v for k, v in settings.items() if k not in ("output", "cache_dir")}
    for path in sorted(glob.glob(os.path.join(runs, "*", name, "*", f"seed-{seed}", "config.json"))):
        folder = os.path.dirname(path)
        if os.path.normpath(folder) == os.path.normpath(settings["output"]):
            continue
        if not os.path.isfile(os.path.join(folder, "metrics.json")):
            continue
        with open(path, encoding="utf-8") as f:
            earlier = upgrade_config_dict(json.load(f))
        if {k: v for k, v in earlier.items() if k not in ("output", "cache_dir")} == wanted:
            return folder
    return None


def reported(metrics: dict) -> float:
    """The number a table reports: test when the data set has a test split, else dev."""
    return metrics.get("test", metrics["dev"])


def mean_std(values: list[float]) -> str:
    """Percent, mean ± std over seeds (just the value for a single seed)."""
    if len(values) == 1:
        return f"{100 * values[0]:.2f}"
    return f"{100 * statistics.mean(values):.2f} ± {100 * statistics.stdev(values):.2f}"


def weight_mean_std(values: list[float], digits: int) -> str:
    """A layer weight (a fraction, not percent), mean ± std over seeds (just the value for one seed)."""
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def table(args, experiment: str, variants: dict) -> list[str]:
    """Run every config x variant x seed; a Markdown table of mean ± std per variant."""
    chosen = args.variants or DEFAULT_VARIANTS.get(experiment)
    if chosen:
        unknown = sorted(set(chosen) - set(variants))
        if unknown:
            raise SystemExit(f"--variants: {', '.join(unknown)} not among {', '.join(variants)}")
        variants = {v: o for v, o in variants.items() if v in chosen}
    lines = ["| task | metric | split | " + " | ".join(variants) + " |",
             "|---|---|---|" + "---:|" * len(variants)]
    results = {}
    for config_path in args.configs:
        config = load_task_config(config_path)
        scores = {v: [reported(run_variant(args, experiment, config_path, v, o, s)) for s in args.seeds]
                  for v, o in variants.items()}
        results[config_path] = scores
        split = "test" if config.data.test is not None else "dev"
        lines.append(f"| {task_name(config_path)} | {config.metric} | {split} | " + " | ".join(mean_std(scores[v]) for v in variants) + " |")
    if experiment == "main" and set(variants) == {"baseline", "elmo"}:
        lines += ["", "| task | increase (absolute) | relative error reduction |", "|---|---:|---:|"]
        for config_path, scores in results.items():
            base, elmo = statistics.mean(scores["baseline"]), statistics.mean(scores["elmo"])
            reduction = (elmo - base) / (1 - base) if base < 1 else 0.0
            lines.append(f"| {task_name(config_path)} | {100 * (elmo - base):+.2f} | {100 * reduction:.1f}% |")
    return lines


def precision_table(args) -> list[str]:
    """The ``precision`` table: the task with float32, bfloat16 and int8 biLM layers (mean ± std
    over seeds), then each seed's scores and each reduced precision's difference from float32. A
    reduced-precision run that fell back to float32 (a CPU without the instructions: its
    config.json records the precision that ran) stops the experiment, since its score would say
    nothing about that precision."""
    os.environ["ELMO_BFLOAT16_CHECK"] = "0"  # run bfloat16 where the CPU has it, even where float32 is faster
    variants = {v: o for v, o in VARIANTS["precision"].items() if not args.variants or v in args.variants}
    if not variants:
        raise SystemExit(f"--variants: none of {', '.join(args.variants)} among {', '.join(VARIANTS['precision'])}")
    lines = ["| task | metric | split | " + " | ".join(variants) + " |", "|---|---|---|" + "---:|" * len(variants)]
    reduced = [v for v in variants if v != "float32"] if "float32" in variants else []
    pairs = ["", "| task | seed | float32 | " + " | ".join(f"{v} | {v} - float32" for v in reduced) + " |",
             "|---|---:|---:|" + "---:|---:|" * len(reduced)]
    for config_path in args.configs:
        scores = {}
        for variant, overrides in variants.items():
            scores[variant] = [reported(run_variant(args, "precision", config_path, variant, overrides, seed))
                               for seed in args.seeds]
            for seed in args.seeds:
                config = variant_config(args, "precision", config_path, variant, overrides, seed)
                own = os.path.join(config.output, "config.json")
                if os.path.isfile(own):
                    with open(own, encoding="utf-8") as f:
                        ran = json.load(f).get("bilm", {}).get("precision", "float32")
                    if ran != config.bilm.precision:
                        raise SystemExit(f"{config.output}: asked for a {config.bilm.precision} biLM, ran {ran} (this "
                                         "CPU lacks its instructions); the comparison needs a CPU that has them")
        config = load_task_config(config_path)
        split = "test" if config.data.test is not None else "dev"
        lines.append(f"| {task_name(config_path)} | {config.metric} | {split} | "
                     + " | ".join(mean_std(scores[v]) for v in variants) + " |")
        for i, seed in enumerate(args.seeds):
            exact = scores.get("float32", [None] * len(args.seeds))[i]
            cells = [f"{100 * scores[v][i]:.2f} | {100 * (scores[v][i] - exact):+.2f}" for v in reduced]
            pairs.append(f"| {task_name(config_path)} | {seed} | {100 * exact:.2f} | " + " | ".join(cells) + " |"
                         if reduced else "")
    return lines + (pairs if reduced else [])


def write_markdown(args, path: str, title: str, command: str, lines: list[str]) -> None:
    if args.experiment == "weights":
        cost = "Read from the runs' metrics.json: trains nothing."
    elif args.experiment in ("snli", "gap", "diagnose"):
        evaluations = args.trained + args.evaluated
        cost = (f"Time: {sum(evaluations) / 60:.1f} minutes for the {len(evaluations)} evaluations (one thread, "
                f"the biLM layers computed once per file and cached).")
    else:
        cost = (f"Training time: {sum(args.trained) / 60:.1f} minutes over the {len(args.trained)} runs of this "
                f"experiment (the sum of each run's `seconds` in its metrics.json, one thread per run, layer caching "
                f"included); {args.reused} more came from identical runs of an earlier experiment. Test scores: "
                f"`elmo task evaluate` on the test file, {sum(args.evaluated) / 60:.1f} minutes over "
                f"{len(args.evaluated)} evaluations.")
        if args.untimed:
            cost += (f" {args.untimed} of the runs were resumed from a checkpoint that did not record the time "
                     f"spent before it: only their time from the resumed epoch on is counted, so the total is low.")
    seeds = (f"mean ± std over seeds {', '.join(map(str, args.seeds))}" if len(args.seeds) > 1
             else f"one seed ({args.seeds[0]})")
    unit = "Weights sum to 1 over a mix's layers" if args.experiment == "weights" else "Scores are percentages"
    text = (f"# {title}\n\nProduced by `{command}`.\n{unit}, {seeds}.\n\n"
            + "\n".join(lines) + "\n\n" + cost + "\n")
    atomic_write_text(path, text, make_parents=True)
    print(text)


DEFAULT_PNG = "docs/tasks/layer-weights.png"
SAMPLE_EPOCHS = 20  # the most epochs a 1% or 10% run gets (the configs' own cap)


def samples(args) -> list[str]:
    """Figure 1 as a table. A fraction below 100% trains for ``--epochs / fraction`` epochs, at
    most SAMPLE_EPOCHS, without early stopping (the best dev epoch is still the one kept). With the
    full data's 6 epochs, or with patience, 1% of CoNLL-2003 gets a few dozen updates while its
    dev F1 sits at 0 and stops before it learns anything, with or without ELMo."""
    fractions = [0.01, 0.1, 1.0]
    lines = ["| task | training data | epochs at most | baseline | +ELMo |", "|---|---:|---:|---:|---:|"]
    for config_path in args.configs:
        name = task_name(config_path)
        full_epochs = load_task_config(config_path).train.epochs if args.epochs is None else args.epochs
        for fraction in fractions:
            row = []
            epochs = full_epochs
            if fraction < 1:
                epochs = max(full_epochs, min(math.ceil(full_epochs / fraction), SAMPLE_EPOCHS))
            for variant, overrides in VARIANTS["main"].items():
                merged = {**overrides, "data": {"train_fraction": fraction}}
                if fraction < 1:
                    merged["train"] = {"epochs": epochs, "patience": epochs}
                row.append(mean_std([reported(run_variant(args, "samples", config_path, f"{variant}-{fraction:g}",
                                                          merged, s)) for s in args.seeds]))
            lines.append(f"| {name} | {100 * fraction:g}% | {epochs} | {row[0]} | {row[1]} |")
    return lines


def transferred(args, label: str, data: str, split: str | None, kind: str) -> dict[str, list[dict]]:
    """The main experiment's runs of ``args.configs[0]`` (baseline and +ELMo, every seed) scored
    by ``elmo task evaluate`` on another data set: ``{variant: [result per seed]}``. Each result
    is kept next to its run as ``<label>.json`` and read from there when it exists."""
    out: dict[str, list[dict]] = {}
    for variant, overrides in VARIANTS["main"].items():
        for seed in args.seeds:
            config = variant_config(args, "main", args.configs[0], variant, overrides, seed)
            folder, _ = finished_run(args, task_name(args.configs[0]), config)
            if folder is None:
                raise SystemExit(f"{config.output}: not trained yet; run the 'main' experiment first")
            result = kept_evaluation(args, folder, label, data, split, kind=kind)
            args.trained.append(result["seconds"])
            out.setdefault(variant, []).append(result)
    return out


def snli_transfer(args) -> list[str]:
    """The SICK models of the main experiment under ``--runs`` scored on SNLI dev and test, an
    extra test set (kept next to each run as ``snli-<split>.json``)."""
    lines = ["| SNLI split | baseline | +ELMo |", "|---|---:|---:|"]
    for label, data, split, kind in snli_evaluations(args):
        results = transferred(args, label, data, split, kind)
        lines.append(f"| {split} | " + " | ".join(mean_std([r["score"] for r in results[v]]) for v in VARIANTS["main"])
                     + " |")
    return lines


def gap_transfer(args) -> list[str]:
    """The LitBank coreference models of the main experiment scored on GAP (out of domain:
    Wikipedia paragraphs, one ambiguous pronoun each), as GAP's scorer counts: F1 of the
    (pronoun, name) coreference decisions overall and by the pronoun's gender, and the bias
    (feminine F1 / masculine F1). Kept next to each run as ``gap-<file>.json``."""
    lines = ["| GAP file | model | overall F1 | masculine F1 | feminine F1 | bias (F/M) |", "|---|---|---:|---:|---:|---:|"]
    for file_label, data, split, kind in gap_evaluations(args):
        name = file_label.removeprefix("gap-")
        results = transferred(args, file_label, data, split, kind)
        for variant, label in (("baseline", "baseline"), ("elmo", "+ELMo")):
            details = [r["details"] for r in results[variant]]
            cells = [mean_std([d[group]["f1"] for d in details]) for group in ("overall", "M", "F")]
            bias = [d["bias"] for d in details]
            spread = f" ± {statistics.stdev(bias):.2f}" if len(bias) > 1 else ""
            lines.append(f"| {name} | {label} | " + " | ".join(cells) + f" | {statistics.mean(bias):.2f}{spread} |")
    return lines


def main_runs(args, config_path: str) -> dict[str, list[tuple[str, dict]]]:
    """The finished main-experiment runs of one config: ``{variant: [(folder, metrics) per seed]}``."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for variant, overrides in VARIANTS["main"].items():
        for seed in args.seeds:
            config = variant_config(args, "main", config_path, variant, overrides, seed)
            folder, _ = finished_run(args, task_name(config_path), config)
            if folder is None:
                raise SystemExit(f"{config.output}: not trained yet; run the 'main' experiment first")
            with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
                out.setdefault(variant, []).append((folder, json.load(f)))
    return out


def class_details(args, folder: str, config) -> dict:
    """Per-class scores and confusion of a classification run on its test split (dev where there
    is none), from ``elmo task evaluate``: the kept ``<split>-eval.json`` the tables use."""
    split = config.data.test if config.data.test is not None else config.data.dev
    name = "test" if config.data.test is not None else "dev"
    result = kept_evaluation(args, folder, f"{name}-eval", split.path, split.split, needs="confusion")
    args.evaluated.append(result["seconds"])
    return result["details"]


def diagnose(args) -> list[str]:
    """Why +ELMo does (not) help one classification or entailment task: the learning curves, the
    per-class errors and the learned layer weights of the main experiment's runs (baseline and
    +ELMo, every seed), with a plot of the dev curves (``--png``)."""
    config_path = args.configs[0]
    config = load_task_config(config_path)
    if config.task not in ("classification", "entailment"):
        raise SystemExit(f"{config_path}: diagnose covers classification and sentence-pair tasks")
    runs = main_runs(args, config_path)
    labels = {"baseline": "baseline", "elmo": "+ELMo"}
    lines = ["**Learning curves.** Dev accuracy and training loss by epoch, mean over the seeds that "
             "trained that epoch (early stopping ends runs at different epochs); the best epoch of each "
             "seed is in brackets.", "",
             "| epoch | " + " | ".join(f"{labels[v]} dev | {labels[v]} train loss" for v in runs) + " |",
             "|---:|" + "---:|---:|" * len(runs)]
    longest = max(len(m["history"]) for variant in runs.values() for _, m in variant)
    for epoch in range(1, longest + 1):
        cells = []
        for variant in runs.values():
            rows = [m["history"][epoch - 1] for _, m in variant if len(m["history"]) >= epoch]
            cells.append(f"{100 * statistics.mean(r['dev'] for r in rows):.2f} ({len(rows)})" if rows else "")
            cells.append(f"{statistics.mean(r['train_loss'] for r in rows):.4f}" if rows else "")
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    best = [cell for variant in runs.values() for cell in (f"[{', '.join(str(m['best_epoch']) for _, m in variant)}]", "")]
    lines.append("| best epoch by seed | " + " | ".join(best) + " |")
    split = "test" if config.data.test is not None else "dev"
    details = {v: [class_details(args, folder, config) for folder, _ in variant] for v, variant in runs.items()}
    classes = sorted(details["baseline"][0]["classes"])
    lines += ["", f"**Per-class errors on {split}.** Recall and precision of each class, mean over seeds.", "",
              "| class | gold | " + " | ".join(f"{labels[v]} recall | {labels[v]} precision" for v in runs) + " |",
              "|---|---:|" + "---:|---:|" * len(runs)]
    for label in classes:
        cells = []
        for v in runs:
            rows = [d["classes"][label] for d in details[v]]
            cells += [mean_std([r["recall"] for r in rows]), mean_std([r["precision"] for r in rows])]
        lines.append(f"| {label} | {details['baseline'][0]['classes'][label]['gold']} | " + " | ".join(cells) + " |")
    for v in runs:
        total = {g: {p: sum(d["confusion"][g][p] for d in details[v]) for p in classes} for g in classes}
        lines += ["", f"Confusion of {labels[v]}, summed over the seeds (rows: gold, columns: predicted):", "",
                  "| gold \\ predicted | " + " | ".join(classes) + " |", "|---|" + "---:|" * len(classes)]
        lines += [f"| {g} | " + " | ".join(str(total[g][p]) for p in classes) + " |" for g in classes]
    weights = [m["layer_weights"] for _, m in runs["elmo"]]
    lines += ["", "**Learned layer weights** of +ELMo (softmax-normalised, mean ± std over seeds; token layer first).", "",
              "| mix | " + " | ".join(f"layer {i}" for i in range(len(next(iter(weights[0].values()))))) + " |",
              "|---|" + "---:|" * len(next(iter(weights[0].values())))]
    for place in weights[0]:
        per_layer = list(zip(*(w[place] for w in weights)))
        cells = [weight_mean_std(list(x), 3) for x in per_layer]
        lines.append(f"| {place} | " + " | ".join(cells) + " |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for (variant, runs_of_variant), color in zip(runs.items(), ("tab:blue", "tab:orange")):
        for seed, (_, m) in zip(args.seeds, runs_of_variant):
            ax.plot([r["epoch"] for r in m["history"]], [100 * r["dev"] for r in m["history"]], color=color,
                    linewidth=1, alpha=0.8, label=labels[variant] if seed == args.seeds[0] else None)
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev accuracy (%)")
    ax.set_title(f"{task_name(config_path)}: dev accuracy by epoch, seeds {', '.join(map(str, args.seeds))}")
    ax.grid(True, linewidth=0.3)
    ax.legend()
    fig.tight_layout()
    png = args.png if args.png != DEFAULT_PNG else f"docs/tasks/{task_name(config_path)}-curves.png"
    os.makedirs(os.path.dirname(png) or ".", exist_ok=True)
    fig.savefig(png, dpi=110)
    lines += ["", f"![dev accuracy by epoch]({os.path.basename(png)})"]
    return lines


def layer_names(layers: int) -> list[str]:
    """Column names of a mix's weights: the token layer, then the LSTM layers."""
    return ["tokens"] + [f"LSTM {i}" for i in range(1, layers)]


def learned_weights(args, experiment: str = "placement", variant: str = "both") -> list[tuple[str, str, list[list[float]]]]:
    """``(task, placement, weights per seed)`` for each ELMo mix in the finished runs of one
    experiment's variant (Figure 2's: the placement experiment's "both" runs, with an input and an
    output mix), each weight vector softmax-normalised over the layers (tokens, LSTM 1, ...)."""
    rows = []
    for config_path in args.configs:
        name = task_name(config_path)
        per_placement = {"input": [], "output": []}
        for seed in args.seeds:
            config = variant_config(args, experiment, config_path, variant, VARIANTS[experiment][variant], seed)
            folder, _ = finished_run(args, name, config)
            if folder is None:
                continue
            with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
                weights = json.load(f)["layer_weights"]
            for placement, kept in per_placement.items():
                if weights.get(placement):
                    kept.append(weights[placement])
        rows += [(name, placement, kept) for placement, kept in per_placement.items() if kept]
    return rows


def weights_plot(args) -> list[str]:
    """Figure 2: the learned layer weights of the placement "both" runs, their mean over seeds drawn
    as a heat map (``--png``); returns their Markdown table of mean ± std over the finished seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = learned_weights(args)
    if not rows:
        raise SystemExit(f"no placement runs under {args.runs}/placement: run the 'placement' experiment first")
    layers = len(rows[0][2][0])
    names = layer_names(layers)
    means = [[statistics.mean(column) for column in zip(*runs)] for _, _, runs in rows]
    spreads = [[statistics.stdev(column) if len(runs) > 1 else 0.0 for column in zip(*runs)] for _, _, runs in rows]
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * len(rows) + 1.2))
    image = ax.imshow(means, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_yticks(range(len(rows)), [f"{name} ({placement})" for name, placement, _ in rows])
    ax.set_xticks(range(layers), names)
    for y, (mean, spread) in enumerate(zip(means, spreads)):
        for x, (m, sd) in enumerate(zip(mean, spread)):
            ax.text(x, y, f"{m:.2f} ± {sd:.2f}", ha="center", va="center", color="white" if m < 0.6 else "black",
                    fontsize=7)
    seeds = sorted({len(runs) for _, _, runs in rows})
    fig.colorbar(image, ax=ax, label="softmax-normalised weight")
    ax.set_title(f"Learned ELMo layer weights, ELMo at input and output (mean ± std, {'/'.join(map(str, seeds))} seeds)",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
    partial = args.png + ".partial.png"  # renamed into place: an interrupted run leaves the old plot whole
    fig.savefig(partial, dpi=110)
    plt.close(fig)
    os.replace(partial, args.png)
    print(f"wrote {args.png}")
    lines = ["| task | ELMo at | seeds | " + " | ".join(names) + " |", "|---|---|---:|" + "---:|" * layers]
    for name, placement, runs in rows:
        cells = [weight_mean_std(list(column), 2) for column in zip(*runs)]
        lines.append(f"| {name} | {placement} | {len(runs)} | " + " | ".join(cells) + " |")
    return lines + ["", f"The plot: [{os.path.basename(args.png)}]({os.path.basename(args.png)})."]


def lambda_weights(args) -> list[str]:
    """What lambda does to the weights: the Markdown table of the input mix of the layer table's
    lambda-1 and lambda-0.001 runs (mean over seeds), for the tasks where both have finished; no
    lines while none has."""
    mixes = {variant: {name: runs for name, _, runs in learned_weights(args, "layers", variant)}
             for variant in ("mix-l2-1", "mix-l2-0.001")}
    names_both = [task_name(c) for c in args.configs if all(task_name(c) in kept for kept in mixes.values())]
    if not names_both:
        return []
    layers = len(mixes["mix-l2-1"][names_both[0]][0])
    lines = ["", "The input mix of the layer-weighting table's runs, lambda 1 against lambda 0.001 (mean over seeds):",
             "", "| task | lambda | seeds | " + " | ".join(layer_names(layers)) + " |", "|---|---:|---:|" + "---:|" * layers]
    for name in names_both:
        for variant, label in (("mix-l2-1", "1"), ("mix-l2-0.001", "0.001")):
            runs = mixes[variant][name]
            lines.append(f"| {name} | {label} | {len(runs)} | "
                         + " | ".join(f"{statistics.mean(column):.2f}" for column in zip(*runs)) + " |")
    return lines


def domain_variants(args) -> dict:
    """The domain experiment's two biLMs: the packaged one and ``--finetuned``."""
    return {"unadapted": {}, "fine-tuned": {"bilm": {"model": args.finetuned}}}


def write_task_text(config_path: str, split: str, output: str, data_root: str | None = None) -> None:
    """One split's sentences, one per line: the training split is the unlabeled in-domain text for
    ``elmo finetune``; dev gives held-out text for ``elmo evaluate``."""
    from elmo.tasks.catalog import task_for
    from elmo.tasks.training import load_splits

    config = load_task_config(config_path, data_root=data_root)
    examples = load_splits(config).get(split)
    if examples is None:
        raise SystemExit(f"{config_path}: has no {split} split")
    sentences = task_for(config).split(examples).sentences
    atomic_write_text(output, "".join(" ".join(s) + "\n" for s in sentences), make_parents=True)
    print(f"wrote {len(examples)} {split} examples of {config_path} to {output}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", choices=["main", "layers", "placement", "samples", "weights", "snli", "gap",
                                               "diagnose", "domain-text", "domain", "precision"])
    parser.add_argument("--configs", nargs="+", help="task configs (default: depends on the experiment)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", help="main, layers, placement: run only these variants (default: all; for layers, all but average)")
    parser.add_argument("--runs", default="runs/experiments", help="where the runs go")
    parser.add_argument("--cache", default="cache/layers", help="biLM layer cache")
    parser.add_argument("--epochs", type=int, help="cap the epochs of every run")
    parser.add_argument("--bilm", help="biLM name or folder (default: the packaged model)")
    parser.add_argument("--finetuned", help="domain: exported folder of the biLM fine-tuned on the task text")
    parser.add_argument("--output", help="Markdown file to write (default under docs/tasks/)")
    parser.add_argument("--png", default=DEFAULT_PNG, help="weights: the plot (default %(default)s); diagnose: "
                                                          "the learning curves (default docs/tasks/TASK-curves.png)")
    parser.add_argument("--data-root", default=os.environ.get("ELMO_DATA") or "../shared/data",
                        help="the folder the configs' $ELMO_DATA/... data paths are under (default: $ELMO_DATA, else "
                             "%(default)s)")
    parser.add_argument("--snli", default="../shared/data/nli/snli-devtest", help="snli: the SNLI dev/test folder")
    parser.add_argument("--gap", default="../shared/data/coref/gap", help="gap: the folder of GAP's tsv files")
    parser.add_argument("--split", default="train", choices=["train", "dev", "test"], help="domain-text: which split")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--status", action="store_true", help="main, layers, placement, samples, domain: list "
                        "where each planned run stands (done, reused, partly trained, not started, or to train again) "
                        "and train nothing")
    args = parser.parse_args(argv)
    args.status_rows = []
    # Seconds of this experiment's own runs and of its test evaluations; runs taken from earlier ones.
    args.trained, args.evaluated, args.reused, args.untimed = [], [], 0, 0
    command = shown_command("experiments/task_experiments.py", argv if argv is not None else sys.argv[1:])
    args.configs = args.configs or DEFAULT_CONFIGS.get(args.experiment, ALL_CONFIGS)
    titles = {"main": "Baseline vs +ELMo (the paper's Table 1)", "layers": "Layer weighting (the paper's Table 2)",
              "placement": "Where to include ELMo (the paper's Table 3)",
              "weights": "Learned layer weights (the paper's Figure 2), from the placement experiment's \"both\" runs",
              "samples": "Sample efficiency (the paper's Figure 1)",
              "domain": "Domain fine-tuning of the biLM",
              "precision": "The biLM in bfloat16 against float32: what reduced precision does to a task",
              "snli": "SICK models scored on SNLI (an extra test set)",
              "gap": "LitBank coreference models scored on GAP (out of domain)",
              "diagnose": f"What ELMo changes in {task_name(args.configs[0])}: learning curves, per-class errors, layer weights"}
    output = args.output or f"docs/tasks/{args.experiment}.md"
    if args.status:
        planned = {"main": lambda: table(args, "main", VARIANTS["main"]),
                   "layers": lambda: table(args, "layers", VARIANTS["layers"]),
                   "placement": lambda: table(args, "placement", VARIANTS["placement"]),
                   "samples": lambda: samples(args), "domain": lambda: table(args, "domain", domain_variants(args)),
                   "precision": lambda: table(args, "precision", VARIANTS["precision"])}
        if args.experiment not in planned:
            parser.error(f"--status covers {', '.join(planned)}, not {args.experiment}")
        if args.experiment == "domain" and not args.finetuned:
            parser.error("domain needs --finetuned: the exported biLM fine-tuned with elmo finetune on the task text")
        planned[args.experiment]()
        print("\n".join(status_lines(args.status_rows)))
        return 0
    if args.experiment in ("main", "layers", "placement"):
        write_markdown(args, output, titles[args.experiment], command, table(args, args.experiment, VARIANTS[args.experiment]))
    elif args.experiment == "samples":
        write_markdown(args, output, titles["samples"], command, samples(args))
    elif args.experiment == "precision":
        write_markdown(args, output, titles["precision"], command, precision_table(args))
    elif args.experiment == "snli":
        write_markdown(args, output, titles["snli"], command, snli_transfer(args))
    elif args.experiment == "gap":
        write_markdown(args, output, titles["gap"], command, gap_transfer(args))
    elif args.experiment == "diagnose":
        output = args.output or f"docs/tasks/{task_name(args.configs[0])}-diagnosis.md"
        write_markdown(args, output, titles["diagnose"], command, diagnose(args))
    elif args.experiment == "weights":
        write_markdown(args, output, titles["weights"], command, weights_plot(args) + lambda_weights(args))
    elif args.experiment == "domain-text":
        if not args.output:
            parser.error("domain-text needs --output: the text file to write")
        write_task_text(args.configs[0], args.split, args.output, args.data_root)
    else:
        if not args.finetuned:
            parser.error("domain needs --finetuned: the exported biLM fine-tuned with elmo finetune on the task text")
        write_markdown(args, output, titles["domain"], command, table(args, "domain", domain_variants(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
