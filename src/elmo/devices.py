"""Which torch device: the one check of a device name, shared by inference and training, so
that a bad name or a missing GPU gets the same one-line error everywhere (instead of a traceback
from deep inside the first batch)."""

from __future__ import annotations

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


__all__ = ["DEFAULT_DEVICE", "DEVICES", "resolve_device"]
