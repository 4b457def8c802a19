"""Which precision the matrix products of inference run in: the choice of ``"float32"``,
``"bfloat16"`` or ``"float16"``, and the rule that turns a bfloat16 request on a CPU into float32
where bfloat16 would be slower.

bfloat16 pays on a CPU only with hardware for it (AVX-512 BF16 or AMX, read from
``/proc/cpuinfo``), and even then only where this PyTorch's kernels make this model's LSTM
faster: :func:`bfloat16_pays` measures that once per CPU, thread count, PyTorch version and
LSTM size and remembers it. :class:`~elmo.inference.runtime.Runtime` asks
:func:`effective_precision` when it is built. States and nonlinearities stay float32 whatever
the precision.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
import warnings
from pathlib import Path

import torch

from elmo.fileio import atomic_path
from elmo.jsonio import JSONFileError, read_json
from elmo.jsonio import field as json_field
from elmo.kernels.blocks import int8_for, onednn_for
from elmo.kernels.cpu_lstm import bilstm_inference, stack_directions
from elmo.model.config import BiLMConfig
from elmo.model.network import LstmLayer

# Precision of the matrix products on the fast path; states and nonlinearities stay float32.
# Each name maps to the dtype of the products, which the activations take too, except for int8:
# activations stay float32 and the LSTM's and the highway and projection layers' products run
# on int8 operands (elmo.kernels.blocks.quantize, activation_dtype): a CPU with oneDNN's int8
# kernel only, opt-in (docs/speed.md, "Precision: float32, bfloat16, int8").
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.int8}
DEFAULT_PRECISION = "float32"
# /proc/cpuinfo flags of x86 CPUs that compute bfloat16 products in hardware.
BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> set[str] | None:
    """The x86 feature flags of this CPU from ``/proc/cpuinfo``, or None where they cannot be
    read (not Linux, not x86)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def cpu_has_bfloat16() -> bool | None:
    """Whether the CPU computes bfloat16 products in hardware (AVX-512 BF16 or AMX); None where
    its flags cannot be read."""
    flags = cpu_flags()
    if flags is None:
        return None
    return bool(flags & BFLOAT16_FLAGS)


# Set to 0 to trust the CPU's flags alone and skip the timing that decides whether bfloat16 pays.
BFLOAT16_CHECK_ENV = "ELMO_BFLOAT16_CHECK"


def _lstm_step_seconds(dim: int, projection_dim: int, dtype: torch.dtype, rows: int = 64, steps: int = 8) -> float:
    """Best-of-3 seconds of ``steps`` steps of both directions of one LSTM layer of these sizes at
    ``rows`` rows, with matrix products in ``dtype``: the work that dominates embedding."""
    torch.manual_seed(0)
    layer = LstmLayer(projection_dim, dim, projection_dim, cell_clip=3.0, proj_clip=3.0)
    weights = stack_directions(layer, layer, dtype)
    inputs = torch.randn(2, rows, steps, projection_dim)
    lengths = torch.full((rows,), steps)
    c, h = torch.zeros(2, rows, dim), torch.zeros(2, rows, projection_dim)
    best = float("inf")
    for _ in range(4):  # the first run is a warm-up
        start = time.perf_counter()
        bilstm_inference(layer, layer, inputs, lengths, c, h, dtype, weights)
        best = min(best, time.perf_counter() - start)
    return best


def read_precision_record(path: Path) -> dict[str, dict[str, float]]:
    """The measurements remembered in ``path`` (``$ELMO_CACHE/precision.json``: for each key, the
    seconds of ``float32`` and ``bfloat16`` steps), or ``{}``. A cache: a file that is not one of
    elmo's (out of :mod:`elmo.jsonio`'s bounds, or an entry that is not two positive numbers) is
    ignored with a one-line warning, and measured again (then rewritten)."""
    try:
        known = read_json(path)
        if not isinstance(known, dict):
            raise JSONFileError(os.fspath(path), "not a JSON object")
        for key, entry in known.items():
            for name in ("float32", "bfloat16"):
                seconds = json_field(entry, name, float, f"{path}: the entry {key[:80]!r}")
                if not (math.isfinite(seconds) and seconds > 0):
                    raise JSONFileError(f"{path}: the entry {key[:80]!r}", f"the field {name!r} must be a positive "
                                        f"number of seconds, not {seconds}")
    except FileNotFoundError:
        return {}
    except (OSError, JSONFileError) as e:
        warnings.warn(f"precision: ignoring the remembered measurements: {e}", stacklevel=3)
        return {}
    return known


def bfloat16_pays(config: BiLMConfig) -> tuple[bool, str]:
    """Whether bfloat16 products make this model's LSTM faster than float32 on this CPU, and why.

    Measured once (a fraction of a second) per CPU, thread count, PyTorch version, LSTM size and
    route of the bfloat16 products (oneDNN's packed kernel or PyTorch's batched product, which
    differ up to 2x: a record made for one route never decides for the other), and remembered
    in ``$ELMO_CACHE/precision.json``, so that a given machine always makes the same choice.
    Hardware support alone does not settle it: the gain depends on the kernels this PyTorch
    picks for these shapes."""
    from elmo.fileio import default_cache_dir

    dim, proj = config.lstm.dim, config.lstm.projection_dim
    flags = cpu_flags() or set()
    key = "|".join([platform.processor() or platform.machine(), ",".join(sorted(flags & BFLOAT16_FLAGS)),
                    torch.__version__, f"threads={torch.get_num_threads()}", f"lstm={dim}x{proj}",
                    f"bf16={'onednn-packed' if onednn_for('cpu', torch.bfloat16) else 'batched'}"])
    path = default_cache_dir() / "precision.json"
    known = read_precision_record(path)
    entry = known.get(key)
    if not (isinstance(entry, dict) and {"float32", "bfloat16"} <= entry.keys()):
        entry = {"float32": _lstm_step_seconds(dim, proj, torch.float32),
                 "bfloat16": _lstm_step_seconds(dim, proj, torch.bfloat16)}
        known[key] = entry
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:
                Path(tmp).write_text(json.dumps(known, indent=1), encoding="utf-8")
        except OSError:
            pass  # measured again next time, nothing else lost
    why = (f"8 LSTM steps of this model's size took {1000 * entry['bfloat16']:.1f} ms in bfloat16 against "
           f"{1000 * entry['float32']:.1f} ms in float32 on this CPU (remembered in {path})")
    return entry["bfloat16"] < entry["float32"], why


def effective_precision(precision: str, device: torch.device, config: BiLMConfig | None = None) -> str:
    """The precision to run: ``precision``, except bfloat16 on a CPU where it would be slower
    than float32, where float32 runs and a warning says why: an x86 CPU without bfloat16
    hardware (it would be emulated), or one where :func:`bfloat16_pays` measured it slower for
    this model's size. ``$ELMO_BFLOAT16_CHECK=0`` skips that measurement. int8 runs only on a
    CPU with oneDNN's int8 kernel (elsewhere float32, with a warning); it is asked for, not
    measured, since it is opt-in and its gain depends on the model's size (docs/speed.md)."""
    if precision == "int8" and not int8_for(device):
        warnings.warn(f"precision: int8 products need oneDNN's int8 kernel on a CPU with VNNI or AMX-INT8, not "
                      f"available on {device} here; running float32", stacklevel=3)
        return "float32"
    if precision != "bfloat16" or device.type != "cpu":
        return precision
    if cpu_has_bfloat16() is False:
        warnings.warn("precision: this CPU has neither AVX-512 BF16 nor AMX, so bfloat16 would be slower than "
                      "float32; running float32", stacklevel=3)
        return "float32"
    if config is not None and os.environ.get(BFLOAT16_CHECK_ENV, "1") != "0":
        pays, why = bfloat16_pays(config)
        if not pays:
            warnings.warn(f"precision: bfloat16 would be slower than float32 here: {why}; running float32 "
                          f"(set {BFLOAT16_CHECK_ENV}=0 to run bfloat16 anyway)", stacklevel=3)
            return "float32"
    return precision
