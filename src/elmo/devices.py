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


def _read_int(path: str) -> int | None:
    """The integer a kernel file holds (None: absent, unreadable, or ``max``)."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def available_memory() -> int | None:
    """Bytes this process may still allocate in main memory, as far as the system says: the
    least of the machine's available memory (``MemAvailable``), the room left under this
    process's address-space limit (``ulimit -v``) and under its container's limit (cgroup v2 or
    v1). None where none of them can be read (not Linux)."""
    room = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    room.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open("/proc/self/status", encoding="ascii") as f:
                size = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)
            room.append(max(0, limit - size))
    except (ImportError, OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 2**60:  # v1 writes "no limit" as ~2**63
            room.append(max(0, limit - usage))
    return min(room) if room else None


__all__ = ["DEFAULT_DEVICE", "DEVICES", "available_memory", "resolve_device", "torchrun_environment"]
