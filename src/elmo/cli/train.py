"""``elmo train``: train a biLM from scratch on tokenized shards."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from elmo.train import PRESETS, TrainSettings, train

HELP = "Train a biLM on tokenized shards (one sentence per line)."


def add_common(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``elmo train`` and ``elmo finetune``."""
    parser.add_argument("--train", required=True, nargs="+", help="training shards: paths or quoted globs")
    parser.add_argument("--output", required=True, help="run directory (checkpoints, metrics, options.json)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--max-tokens", type=int, help="stop after this many tokens per direction")
    length.add_argument("--epochs", type=float, help="passes over the training tokens (default 1)")
    parser.add_argument("--batch-size", type=int, help="rows per step over all processes (preset's by default)")
    parser.add_argument("--unroll-steps", type=int, help="tokens per row per step (default 20)")
    parser.add_argument("--optimizer", choices=["adagrad", "adamw"], help="default: adagrad, as the original")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--warmup-steps", type=int, help="AdamW warm-up steps")
    parser.add_argument("--dropout", type=float)
    parser.add_argument("--negative-samples", type=int, dest="n_negative_samples",
                        help="sampled-softmax negatives per batch; 0 or >= vocabulary size: full softmax")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints")
    parser.add_argument("--keep-checkpoints", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=10, help="steps between metric rows")
    parser.add_argument("--heldout", nargs="+", help="held-out shards for perplexity during training")
    parser.add_argument("--eval-every", type=int, default=0, help="steps between held-out evaluations")
    parser.add_argument("--eval-targets", type=int, default=50_000, help="held-out predictions per evaluation")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's newest checkpoint")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--no-bf16", dest="bf16", action="store_false", default=None,
                        help="disable bf16 autocast (on by default on GPUs)")
    parser.add_argument("--gpus", help="comma-separated GPU ids: one process per GPU on this machine (DDP)")
    parser.add_argument("--processes", type=int, default=1,
                        help="CPU data-parallel processes (gloo); for multi-node use torchrun")
    parser.add_argument("--no-progress", dest="progress", action="store_false")


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", required=True, help="vocabulary file (elmo vocab)")
    parser.add_argument("--config", default="tiny", help=f"a preset ({', '.join(PRESETS)}) or an options.json")
    add_common(parser)


def settings_from(args: argparse.Namespace, **fixed) -> TrainSettings:
    names = TrainSettings.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in names}
    values.update(fixed)
    return TrainSettings(**values)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, gpus: list[str] | None, settings: TrainSettings) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    train(settings)


def launch(settings: TrainSettings, gpus: str | None, processes: int) -> int:
    """Run ``train`` in this process, or spawn one process per GPU / CPU worker (the one-machine
    shortcut for ``torchrun --nproc-per-node``)."""
    gpu_list = gpus.split(",") if gpus else None
    world = len(gpu_list) if gpu_list else processes
    if gpu_list:
        settings.device = "cuda"
    if world == 1 or "WORLD_SIZE" in os.environ:  # a single process, or already under torchrun
        if gpu_list:
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(gpu_list))
        train(settings)
        return 0
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(world, _free_port(), gpu_list, settings), nprocs=world, join=True)
    return 0


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    code = launch(settings, args.gpus, args.processes)
    print(f"run directory: {settings.output}", file=sys.stderr)
    return code
