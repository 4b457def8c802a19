"""How fast does a task model train, one path against another?

``--compare char_cnn`` (the default): the task char CNN over real words only (``forward``) or over
every slot of the padded batch (``forward_every_slot``, the plain specification). The two compute
the same values, so the losses must agree to float rounding: the table shows the largest
difference.

``--compare dropout``: torch's ``nn.Dropout`` or ``elmo.model.dropout.Dropout`` (the same distribution,
drawn from uniform numbers). Their masks differ, so the losses do too; the table shows each
path's mean loss, which must be close.

Each round runs, for each path, a fresh process that trains ``--steps`` batches of a task config
(its own batch size, data order and seed, as ``train_task`` would) after ``--warmup`` batches, one
thread. ELMo is off, so no biLM is read, unless ``--elmo-cache DIR`` names a layer cache (the
packaged biLM's layers for the config's data are computed there first if they are missing).

    python benchmarks/task_step.py configs/tasks/ner-conll2003.toml --output results/benchmarks/task_step.json
    python benchmarks/task_step.py configs/tasks/ner-conll2003.toml --compare dropout --elmo-cache RUNS/cache \
        --output results/benchmarks/task_step_dropout_conll2003.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine, write_results  # noqa: E402

PATHS = {"char_cnn": ("forward_every_slot", "forward"), "dropout": ("torch", "elmo")}


def measure(config_path: str, compare: str, path: str, steps: int, warmup: int, elmo_cache: str | None) -> dict:
    """Seconds for ``steps`` training batches of ``config_path`` with ``path`` of ``compare``, and the losses."""
    import random
    import time

    import torch

    from elmo.inference.layer_cache import load_or_compute
    from elmo.model.dropout import Dropout
    from elmo.tasks import training
    from elmo.tasks.catalog import task_for
    from elmo.tasks.config import load_task_config
    from elmo.tasks.features import CharCNN, WordVocab, load_glove, vector_words

    torch.set_num_threads(1)
    if compare == "char_cnn":
        CharCNN.forward = getattr(CharCNN, path)
    elif path == "torch":
        Dropout.forward = torch.nn.Dropout.forward
    overrides = {"output": os.devnull, "elmo": {"enabled": elmo_cache is not None}}
    if elmo_cache is not None:
        overrides["cache_dir"] = elmo_cache
    config = load_task_config(config_path, overrides)
    training._seed_everything(config.train.seed)
    task = task_for(config)
    splits = training.load_splits(config)
    splits["train"] = task.prepare_training(splits["train"]).examples
    data = {name: task.split(examples) for name, examples in splits.items()}
    label_names = task.label_names(splits["train"])
    labels = {name: i for i, name in enumerate(label_names)}
    every_word = {w.lower() for split in data.values() for s in split.sentences for w in s}
    vocab = WordVocab.build(data["train"].sentences, also=every_word & vector_words(config.data.vectors))
    embeddings, _ = load_glove(config.data.vectors, vocab, seed=config.train.seed)
    embedder = training.load_bilm_source(config)
    if embedder is not None:
        for name, split in data.items():
            split.layers = load_or_compute(embedder, split.sentences, config.cache_dir, f"{config.data.kind}-{name}",
                                           progress=False)
    n_layers, dim = training.bilm_layer_shape(embedder)
    training._seed_everything(config.train.seed)
    model = training.build_model(task, config, embeddings, label_names, n_layers, dim)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.train.learning_rate)
    order = list(range(len(data["train"].examples)))
    random.shuffle(order)
    size = config.train.batch_size
    losses, seconds = [], 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        batch = task.batch(data["train"], order[step * size:(step + 1) * size], vocab, labels)
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step >= warmup:
            seconds += time.perf_counter() - start
    return {"path": path, "steps": steps, "batch_size": size, "seconds": seconds, "losses": losses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="task config (.toml) whose training data and batch size to use")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", choices=sorted(PATHS), default="char_cnn")
    parser.add_argument("--elmo-cache", help="ELMo on, its layers from (or computed into) this layer cache folder")
    parser.add_argument("--output", default="results/benchmarks/task_step.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process's single measurement
    args = parser.parse_args(argv)
    paths = PATHS[args.compare]
    if args.one:
        print(json.dumps(measure(args.config, args.compare, args.one, args.steps, args.warmup, args.elmo_cache)))
        return 0

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    extra = ["--elmo-cache", args.elmo_cache] if args.elmo_cache else []
    runs: dict[str, list[dict]] = {path: [] for path in paths}
    for _ in range(args.rounds):  # alternated, so the machine's drift hits both paths alike
        for path in paths:
            done = subprocess.run([sys.executable, __file__, args.config, "--compare", args.compare, "--one", path,
                                   "--steps", str(args.steps), "--warmup", str(args.warmup), *extra],
                                  capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise SystemExit(f"{path} failed ({done.returncode}):\n{done.stderr}")
            runs[path].append(json.loads(done.stdout.strip().splitlines()[-1]))
    ms = {path: statistics.median(r["seconds"] for r in runs[path]) / args.steps * 1000 for path in paths}
    mean_loss = {path: statistics.mean(runs[path][0]["losses"]) for path in paths}
    rows = [{args.compare: path, "ms_per_batch": ms[path], "speedup": ms[paths[0]] / ms[path],
             "mean_loss": mean_loss[path]} for path in paths]
    print(f"{args.config}: {args.steps} batches of {runs[paths[0]][0]['batch_size']} after {args.warmup}, "
          f"ELMo {'on' if args.elmo_cache else 'off'}, median of {args.rounds} rounds, one thread, "
          f"{machine()['cpu']}")
    print(f"| {args.compare} | ms per batch | speed-up | mean loss |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row[args.compare]} | {row['ms_per_batch']:.1f} | {row['speedup']:.2f}x | {row['mean_loss']:.4f} |")
    results = {"config": args.config, "compare": args.compare, "elmo": bool(args.elmo_cache), "steps": args.steps,
               "warmup": args.warmup, "rounds": args.rounds, "rows": rows, "runs": runs}
    if args.compare == "char_cnn":  # the same values: only float rounding may differ
        difference = max(abs(a - b) for a, b in zip(runs[paths[0]][0]["losses"], runs[paths[1]][0]["losses"]))
        print(f"largest loss difference between the paths: {difference:.2e}")
        results["largest_loss_difference"] = difference
    write_results(args.output, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
