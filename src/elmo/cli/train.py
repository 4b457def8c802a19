"""``elmo train``: train a biLM from scratch on tokenized shards."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import socket
import sys

from elmo.checks import check_count
from elmo.cli.common import add_progress_argument
from elmo.devices import DEVICES
from elmo.model.config import PRESETS
from elmo.model.network import DEFAULT_LSTM_PATH, LSTM_PATHS
from elmo.threads import add_threads_argument, check_threads, default_threads, set_threads
from elmo.training.recipe import (
    CPU_MAX_BATCH,
    DEFAULT_PRESET,
    FINETUNE_MIN_BATCH,
    FINETUNE_UPDATES,
    OPTIMIZERS,
    RECIPE,
    TrainSettings,
)
from elmo.training.resume import discard_run
from elmo.training.train import train

HELP = "Train a biLM on tokenized shards (one sentence per line)."


# What TrainSettings defaults to, for the options whose default is a value (not "see the config").
SETTINGS = {f.name: f.default for f in dataclasses.fields(TrainSettings)}
FINETUNE_RULE = (f"the fine-tuning rule: the largest power of two that makes at least {FINETUNE_UPDATES} updates, "
                 f"at least {FINETUNE_MIN_BATCH}, at most the model's pretraining batch (its options.json) and on a "
                 f"CPU at most {CPU_MAX_BATCH}")


def add_common(parser: argparse.ArgumentParser, source: str = "the --config preset's",
               batch_source: str | None = None) -> None:
    """Options shared by ``elmo train`` and ``elmo finetune``; ``source`` says where a hyperparameter
    left out comes from (the preset, or the model being fine-tuned), ``batch_source`` where the
    batch size comes from when that differs."""
    run = "; on --resume: the run's"
    batch_source = batch_source or f"{source}, else {RECIPE.batch_size}"
    parser.add_argument("--train", required=True, nargs="+", help="training shards: paths or quoted globs")
    parser.add_argument("--output", required=True, help="run directory (checkpoints, metrics, options.json)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--max-tokens", type=int,
                        help=f"stop after this many tokens per direction (default: one epoch{run})")
    length.add_argument("--epochs", type=float,
                        help=f"passes over the training tokens (default: 1{run}); with Adagrad, a resumed run "
                             "may be given a new length")
    parser.add_argument("--batch-size", type=int,
                        help=f"rows per step over all processes (default: {batch_source}{run})")
    parser.add_argument("--unroll-steps", type=int,
                        help=f"tokens per row per step (default: {source}, else {RECIPE.unroll_steps}{run})")
    parser.add_argument("--optimizer", choices=OPTIMIZERS,
                        help=f"default: {source}, else {RECIPE.optimizer}, as the original{run}")
    parser.add_argument("--learning-rate", type=float,
                        help=f"default: {source}, else {RECIPE.adagrad_learning_rate} for Adagrad and "
                             f"{RECIPE.adamw_learning_rate} for AdamW{run}")
    parser.add_argument("--warmup-steps", type=int,
                        help=f"AdamW warm-up steps (default: {source}, else min({RECIPE.max_warmup_steps}, "
                             f"steps / 10){run})")
    parser.add_argument("--dropout", type=float,
                        help=f"dropout on the LSTM inputs and the top layer (default: {source}, else "
                             f"{RECIPE.dropout}{run})")
    parser.add_argument("--negative-samples", type=int, dest="n_negative_samples",
                        help="sampled-softmax negatives per batch; 0 or >= vocabulary size: full softmax "
                             f"(default: {source}, else {RECIPE.n_negative_samples_batch}{run})")
    parser.add_argument("--seed", type=int, help=f"seed of the data order, dropout and negatives (default: 0{run})")
    parser.add_argument("--checkpoint-every", type=int, default=SETTINGS["checkpoint_every"],
                        help="steps between checkpoints (default %(default)s)")
    parser.add_argument("--keep-checkpoints", type=int, default=SETTINGS["keep_checkpoints"],
                        help="newest checkpoints kept (default %(default)s)")
    parser.add_argument("--log-every", type=int, default=SETTINGS["log_every"], help="steps between metric rows (default %(default)s)")
    parser.add_argument("--heldout", nargs="+",
                        help="held-out shards for perplexity during training, with --eval-every (default: none)")
    parser.add_argument("--eval-every", type=int, default=SETTINGS["eval_every"],
                        help="steps between held-out evaluations (default %(default)s; 0: none)")
    parser.add_argument("--eval-targets", type=int, default=SETTINGS["eval_targets"],
                        help="held-out predictions per evaluation (default %(default)s)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run directory's newest readable checkpoint, with the run's settings "
                             "(giving a different --config, --seed, hyperparameter or data is an error)")
    parser.add_argument("--force", action="store_true",
                        help="start over: delete the earlier run in --output first, if elmo made that run directory "
                             "and it holds nothing but what a run writes (default: an existing run is refused; "
                             "--resume continues it)")
    parser.add_argument("--device", default=SETTINGS["device"], help=f"{DEVICES} (default %(default)s)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast of the matrix products (default: on for GPUs, off on the CPU, where "
                             "it pays only with bfloat16 instructions: docs/training.md)")
    parser.add_argument("--prefetch", type=int, default=None,
                        help="batches built ahead in a background thread while the device trains; 0: none "
                             "(default: 2 on a GPU, 0 on the CPU, where it did not pay: docs/speed.md)")
    parser.add_argument("--deterministic", action="store_true",
                        help="reproducible GPU kernels, so that runs repeat and resume bit for bit (slower; "
                             "default: the GPU's fast kernels, whose results drift slightly run to run)")
    parser.add_argument("--lstm-path", choices=LSTM_PATHS,
                        help="how the LSTM trains: the per-timestep specification (plain), one direction and layer "
                             "at a time (fast), or both directions of a layer as one fused autograd Function over "
                             f"the window (fused); the same model and numbers (default: {DEFAULT_LSTM_PATH})")
    parser.add_argument("--compile-cells", action="store_true",
                        help="the fused path's pointwise functions through torch.compile: one kernel each on a GPU "
                             "(default: eager)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="capture the LSTM of each full training window (forward and backward) in a CUDA graph "
                             "and replay it (GPU, one process, fused path; default: eager launches)")
    parser.add_argument("--gpus", help="comma-separated GPU ids: one process per GPU on this machine, DDP "
                                       "(default: none, one process on --device)")
    parser.add_argument("--processes", type=int, default=1,
                        help="CPU data-parallel processes (gloo); for multi-node use torchrun (default %(default)s)")
    add_threads_argument(parser, "CPU threads of each process (by default shared out among --processes)")
    add_progress_argument(parser, "steps, loss, perplexity and tokens/s")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", required=True, help="vocabulary file (elmo vocab)")
    parser.add_argument("--config",
                        help=f"a preset ({', '.join(PRESETS)}) or an options.json "
                             f"(default: {DEFAULT_PRESET}; on --resume: the run's)")
    add_common(parser)


def settings_from(args: argparse.Namespace, **fixed) -> TrainSettings:
    """The run's settings from the arguments; with ``--force``, the earlier run in ``--output``
    is deleted first (:func:`elmo.training.resume.discard_run`)."""
    names = TrainSettings.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in names}
    values.update(fixed)
    settings = TrainSettings(**values)
    if args.force:
        start_over(settings)
    return settings


def start_over(settings: TrainSettings) -> None:
    """``--force``: delete the earlier run in the run directory, once the settings are valid."""
    if settings.resume:
        raise ValueError("--force and --resume: give one (--force deletes the earlier run, --resume continues it)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Every rank runs this command: one deleting while another reads the folder would race.
        raise ValueError(f"--force under torchrun: delete the earlier run in {settings.output} before launching "
                         "(or choose another --output)")
    settings.validate()
    target = os.path.realpath(settings.output)
    inputs = [settings.vocab, settings.init_from, *(glob.glob(p) or [p] for p in [*settings.train,
                                                                                    *(settings.heldout or [])])]
    for path in (p for entry in inputs for p in (entry if isinstance(entry, list) else [entry])):
        if path and (os.path.realpath(path) + os.sep).startswith(target + os.sep):
            raise ValueError(f"--force: {settings.output} holds the input {path}, which elmo never deletes; "
                             "choose another --output")
    discard_run(settings.output)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, gpus: list[str] | None, settings: TrainSettings,
            threads: int | None = None) -> None:
    if threads is not None:
        set_threads(threads)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    train(settings)


def launch(settings: TrainSettings, gpus: str | None, processes: int, threads: int | None = None) -> int:
    """Run ``train`` in this process, or spawn one process per GPU / CPU worker (the one-machine
    shortcut for ``torchrun --nproc-per-node``), each computing with ``threads`` CPU threads
    (None: :func:`elmo.threads.default_threads` here, shared out among the spawned workers)."""
    gpu_list = _gpu_ids(gpus) if gpus is not None else None
    check_count(processes, "--processes")
    if threads is not None:
        check_threads(threads)
    if gpu_list and processes != 1:
        raise ValueError(f"--gpus {gpus} and --processes {processes}: give one (--gpus runs one process per GPU)")
    world = len(gpu_list) if gpu_list else processes
    if gpu_list:
        settings.device = "cuda"
    if world == 1 or "WORLD_SIZE" in os.environ:  # a single process, or already under torchrun
        if gpu_list:
            # Before anything asks CUDA about devices: afterwards the variable has no effect.
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(gpu_list))
        _check_gpus(gpus)
        set_threads(threads)
        train(settings)
        return 0
    _check_gpus(gpus)  # the workers are fresh processes: asking CUDA here binds none of them
    settings.validate()  # one clear error here rather than one per worker
    import torch.multiprocessing as mp

    # Each worker its share of the CPUs (an OpenMP team per worker on every core oversubscribes them).
    per_worker = threads if threads is not None else max(1, default_threads() // world)
    mp.spawn(_worker, args=(world, _free_port(), gpu_list, settings, per_worker), nprocs=world, join=True)
    return 0


def _gpu_ids(gpus: str) -> list[str]:
    """``--gpus 0,1,2,3`` -> ``["0", "1", "2", "3"]``; ValueError naming a malformed list."""
    ids = [g.strip() for g in gpus.split(",")]
    if not ids or not all(g.isdigit() for g in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"--gpus: expected distinct GPU ids separated by commas, like 0,1,2,3; got {gpus!r}")
    return ids


def _check_gpus(gpus: str | None) -> None:
    """With ``--gpus``, a machine without CUDA gets an error naming --gpus (not --device)."""
    if gpus is None:
        return
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"--gpus {gpus}: CUDA is not available here; use --device cpu (or --processes N)")


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    code = launch(settings, args.gpus, args.processes, args.threads)
    print(f"run directory: {settings.output}", file=sys.stderr)
    return code
