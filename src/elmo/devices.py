"""Which torch device: the one check of a device name, shared by inference and training, so
that a bad name or a missing GPU gets the same one-line error everywhere (instead of a traceback
from deep inside the first batch); and the one reading of torchrun's variables, which say which
process (and so which GPU) this is."""

from __future__ import annotations

import os

import torch

DEFAULT_DEVICE = "cpu"
DEVICES = "cpu, cuda or cuda:N"


def resolve_device(device: str | torch.device | None, default: str | torch.device = DEFAULT_DEVICE, *,
                   option: str = "device") -> torch.device:
    """``device`` (None: ``default``) as a torch.device, if this machine has it; else ValueError
    naming ``option`` (the argument or command-line option it came from) and the value."""
    if device is None:
        device = default
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{option}: {device!r} is not a device name (expected {DEVICES})") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            why = "this PyTorch has no CUDA support" if torch.version.cuda is None else "no GPU is visible"
            raise ValueError(f"{option} {device}: CUDA is not available here ({why}); use cpu")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"{option} {device}: only {count} GPU(s) are visible (cuda:0 to cuda:{count - 1})")
    elif resolved.type != "cpu":
        raise ValueError(f"{option}: {device!r} is not supported (expected {DEVICES})")
    return resolved


def torchrun_environment() -> dict[str, int] | None:
    """torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (the last two
    0 and 1 when unset), or None outside torchrun: neither ``RANK`` nor ``WORLD_SIZE`` set, or
    only one of them saying one process (``WORLD_SIZE=1``, ``RANK=0``). A ValueError names what
    is wrong when they are not integers, or when one is set without the other for several
    processes: ignored, every process would do all the work."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    try:
        values = {k: int(os.environ[k]) for k in names if k in os.environ}
    except ValueError:
        shown = ", ".join(f"{k}={os.environ[k]!r}" for k in names if k in os.environ)
        raise ValueError(f"{shown}: torchrun's variables must be integers") from None
    rank, world = values.get("RANK"), values.get("WORLD_SIZE")
    if rank is None and world is None:
        return None
    if rank is None or world is None:
        if world == 1 or rank == 0:
            return None  # one process, whatever the other says
        given, missing = ("WORLD_SIZE", "RANK") if rank is None else ("RANK", "WORLD_SIZE")
        raise ValueError(f"{given}={os.environ[given]} is set but {missing} is not: torchrun sets both for each "
                         f"process; set {missing} too, or unset {given} to run one process")
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank}, WORLD_SIZE={world}: expected 0 <= RANK < WORLD_SIZE")
    return {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": values.get("LOCAL_RANK", 0),
            "LOCAL_WORLD_SIZE": values.get("LOCAL_WORLD_SIZE", 1)}


__all__ = ["DEFAULT_DEVICE", "DEVICES", "resolve_device", "torchrun_environment"]
