"""Shared pieces of the benchmarks: this machine's matmul peak, model FLOPs, peak memory, an
operator counter, and the JSON file each benchmark writes."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from elmo.fileio import atomic_write_text
from elmo.model.config import BiLMConfig


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def time_process(command: list[str], env: dict | None = None) -> float:
    """Wall-clock seconds of one whole process; its standard output is discarded, and a failure
    stops the benchmark with the command's standard error."""
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return seconds


def matmul_peak_flops(dtype: torch.dtype = torch.float32, size: int = 2048, repeats: int = 5,
                      device: str = "cpu") -> float:
    """Best achieved FLOP/s of a square matrix product: the denominator of MFU."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        if device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def token_encoder_flops(config: BiLMConfig) -> int:
    """Forward FLOPs of the token encoder for one token (all 50 character slots)."""
    cnn = config.char_cnn
    flops = sum(2 * width * cnn.embedding_dim * n * (cnn.max_characters_per_token - width + 1)
                for width, n in cnn.filters)
    flops += cnn.n_highway * 2 * (2 * cnn.n_filters ** 2)
    if cnn.n_filters != config.lstm.projection_dim:
        flops += 2 * cnn.n_filters * config.lstm.projection_dim
    return flops


def lstm_flops(config: BiLMConfig) -> int:
    """Forward FLOPs of one direction's LSTM stack for one token."""
    lstm = config.lstm
    per_layer = 2 * (2 * lstm.projection_dim) * 4 * lstm.dim + 2 * lstm.dim * lstm.projection_dim
    return lstm.n_layers * per_layer


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def write_results(path: str | os.PathLike, results: dict) -> None:
    """Write a benchmark's results as JSON to ``path`` (atomically, creating its folder), after
    this machine's description under ``"machine"``."""
    atomic_write_text(path, json.dumps({"machine": machine(), **results}, indent=2), make_parents=True)


# Operators that launch no kernel: they only make a new view or tensor header, or allocate.
_NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
              "lift_fresh", "set_", "resize_", "_local_scalar_dense", "view", "_unsafe_view", "reshape", "t",
              "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "as_strided", "split",
              "split_with_sizes", "chunk", "unbind", "resolve_conj", "resolve_neg", "view_as"}
# Operators that copy only when they must: counted when their result has its own storage.
_MAYBE_COPY = {"to", "contiguous", "reshape", "type_as", "flatten"}


class OpCounter(TorchDispatchMode):
    """Counts the ATen operators dispatched while active (a ``with`` block), forward and backward.

    :attr:`total` counts every operator; :attr:`kernels` those that launch a kernel on a GPU:
    not views or allocations, and a ``.to()``, ``.contiguous()`` or ``reshape`` only where it
    copied. (Under inference mode such composite operators arrive whole; elsewhere as the copy
    they make.)
    """

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.no_ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.ops[func] += 1
        if func.overloadpacket.__name__ in _MAYBE_COPY and isinstance(result, torch.Tensor) \
                and result.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr():
            self.no_ops[func] += 1
        return result

    @staticmethod
    def launches_kernel(func) -> bool:
        name = func.overloadpacket.__name__
        return name in _MAYBE_COPY or not (func.is_view or name in _NO_KERNEL)

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def kernels(self) -> int:
        return sum(n - self.no_ops[func] for func, n in self.ops.items() if self.launches_kernel(func))

    def table(self) -> dict[str, int]:
        """Operator name -> kernel-launching calls, most frequent first."""
        counts = Counter({str(func): n - self.no_ops[func] for func, n in self.ops.items()
                          if self.launches_kernel(func)})
        return {name: n for name, n in counts.most_common() if n}
