"""How fast does a task model train, with the task char CNN over real words only (``forward``)
or over every slot of the padded batch (``forward_every_slot``, the plain specification)?

Each round runs, for each path, a fresh process that trains ``--steps`` batches of a task config
(its own batch size, data order and seed, as ``train_task`` would; ELMo off, so no biLM is read)
after ``--warmup`` batches, one thread. The two paths compute the same values, so the losses must
agree to float rounding: the table shows the largest difference.

    python benchmarks/task_step.py configs/tasks/ner-conll2003.toml --output benchmarks/results/task_step.json
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

PATHS = ("forward_every_slot", "forward")


def measure(config_path: str, path: str, steps: int, warmup: int) -> dict:
    """Seconds for ``steps`` training batches of ``config_path`` with the CNN's ``path``, and the losses."""
    import random
    import time

    import torch

    from elmo.tasks import training
    from elmo.tasks.config import load_task_config
    from elmo.tasks.features import CharCNN, vector_words

    torch.set_num_threads(1)
    CharCNN.forward = getattr(CharCNN, path)
    config = load_task_config(config_path, {"output": os.devnull, "elmo": {"enabled": False}})
    training._seed_everything(config.train.seed)
    splits = training.load_splits(config)
    labels = {name: i for i, name in enumerate(sorted(training.label_set(splits["train"])))}
    every_word = {w.lower() for examples in splits.values() for s in training.sentences_of(examples) for w in s}
    vocab = training.WordVocab.build(training.sentences_of(splits["train"]),
                                     also=every_word & vector_words(config.data.vectors))
    embeddings, _ = training.load_glove(config.data.vectors, vocab, seed=config.train.seed)
    data = training._layers_for(None, splits, config, False)
    training._seed_everything(config.train.seed)
    model = training.build_model(config, embeddings, sorted(labels), 1, 1)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.train.learning_rate)
    order = list(range(len(data["train"].examples)))
    random.shuffle(order)
    size = config.train.batch_size
    losses, seconds = [], 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        batch = training.make_batch(data["train"], order[step * size:(step + 1) * size], vocab, labels)
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
    parser.add_argument("--output", default="benchmarks/results/task_step.json")
    parser.add_argument("--one", choices=PATHS, help=argparse.SUPPRESS)  # a child process's single measurement
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.config, args.one, args.steps, args.warmup)))
        return 0

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    runs: dict[str, list[dict]] = {path: [] for path in PATHS}
    for _ in range(args.rounds):  # alternated, so the machine's drift hits both paths alike
        for path in PATHS:
            done = subprocess.run([sys.executable, __file__, args.config, "--one", path, "--steps", str(args.steps),
                                   "--warmup", str(args.warmup)], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise SystemExit(f"{path} failed ({done.returncode}):\n{done.stderr}")
            runs[path].append(json.loads(done.stdout.strip().splitlines()[-1]))
    ms = {path: statistics.median(r["seconds"] for r in runs[path]) / args.steps * 1000 for path in PATHS}
    difference = max(abs(a - b) for a, b in zip(runs[PATHS[0]][0]["losses"], runs[PATHS[1]][0]["losses"]))
    rows = [{"char_cnn": path, "ms_per_batch": ms[path], "speedup": ms[PATHS[0]] / ms[path]} for path in PATHS]
    print(f"{args.config}: {args.steps} batches of {runs['forward'][0]['batch_size']} after {args.warmup}, "
          f"median of {args.rounds} rounds, one thread, {machine()['cpu']}")
    print("| char CNN | ms per batch | speed-up |\n|---|---:|---:|")
    for row in rows:
        print(f"| {row['char_cnn']} | {row['ms_per_batch']:.1f} | {row['speedup']:.2f}x |")
    print(f"largest loss difference between the paths: {difference:.2e}")
    write_results(args.output, {"config": args.config, "steps": args.steps, "warmup": args.warmup,
                                "rounds": args.rounds, "rows": rows, "largest_loss_difference": difference,
                                "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
