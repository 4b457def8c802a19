"""Shared pieces of the benchmarks: this machine's matmul peak, model FLOPs, peak memory, an
operator counter, code run on another checkout's package, and the JSON file each benchmark
writes."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch

from elmo.fileio import atomic_write_text
from elmo.inference.precision import cpu_flags
from elmo.model.config import BiLMConfig


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    flags = cpu_flags() or set()
    return {"cpu": cpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "vector_extensions": sorted(flags & VECTOR_EXTENSIONS),
            # What PyTorch's own kernels run with, which ISA_LIMITS can hold below the hardware's.
            "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "isa_limits": {name: os.environ[name] for name in ISA_LIMITS if name in os.environ}}


# The /proc/cpuinfo flags that decide which kernels the products run on.
VECTOR_EXTENSIONS = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                               "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"})
# Environment variables that hold PyTorch (ATen), MKL or oneDNN to a smaller instruction set
# than the CPU has: how an AVX2-only machine is imitated on a newer one.
ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
              "MKL_DEBUG_CPU_TYPE")


def time_process(command: list[str], env: dict | None = None) -> float:
    """Wall-clock seconds of one whole process; its standard output is discarded, and a failure
    stops the benchmark with the command's standard error."""
    return time_and_peak_process(command, env)[0]


# Runs a command and prints its seconds, peak memory and exit status. The peak is read by a small
# process of its own: Linux gives a child the high-water mark of the memory it was forked from
# (the benchmark's, which holds models) as its own ru_maxrss, so the command must be started from
# a small process for its peak to be its own.
_LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
stderr = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
child.returncode = os.waitstatus_to_exitcode(status)
seconds = time.perf_counter() - start
sys.stderr.buffer.write(stderr)
print(json.dumps({"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "returncode": child.returncode}))
"""


def time_and_peak_process(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall-clock seconds and peak resident memory (MB: the kernel's ``ru_maxrss``) of one whole
    process, as :func:`time_process` runs it, started from a small launcher (see ``_LAUNCHER``),
    whose own start-up is not counted."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"returncode": done.returncode}
    if result["returncode"] != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result['returncode']}):\n{done.stderr}")
    return result["seconds"], result["peak_mb"]


def installed_env(env: dict, work: str) -> dict:
    """``env`` for timing whole processes as an installed package runs them: an install carries
    compiled bytecode, while a checkout run with ``PYTHONDONTWRITEBYTECODE`` (some sandboxes set
    it) would compile every module in every process, about 0.3 s that no user pays. The bytecode
    goes to ``work/pycache``, not into the checkout."""
    env = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    return env


def matmul_peak_flops(dtype: torch.dtype = torch.float32, size: int = 2048, repeats: int = 5,
                      device: str = "cpu") -> float:
    """Best achieved FLOP/s of a square matrix product: the denominator of MFU. On a CPU the best
    of PyTorch's own product and oneDNN's linear kernel, since MKL takes slower code paths on AMD
    CPUs (on the development EPYC its float32 "peak" was half of oneDNN's)."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    products = [lambda: a @ b]
    if device == "cpu" and torch.backends.mkldnn.is_available():
        products.append(lambda: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], ""))
    best = float("inf")
    for product in products:
        for _ in range(repeats + 1):
            if device != "cpu":
                torch.cuda.synchronize()
            start = time.perf_counter()
            product()
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


def run_in_checkout(src: str | os.PathLike, code: str) -> dict:
    """Run Python ``code`` in a fresh process whose ``elmo`` is the package under ``src`` (the
    ``src/`` folder of another checkout, e.g. an old commit's: ``git worktree add ../elmo-before
    COMMIT`` or ``git archive COMMIT src | tar -x -C DIR``), with this folder and ``tests/`` (the
    operator counters) importable after it. ``code`` prints one JSON object as its last line of
    output: returned. A failure stops the benchmark with the child's standard error."""
    src = os.path.abspath(src)
    here = os.path.dirname(os.path.abspath(__file__))
    prelude = (f"import sys\nsys.path[:0] = [{src!r}, {here!r}, {os.path.join(os.path.dirname(here), 'tests')!r}]\n"
               f"import elmo\nassert elmo.__file__.startswith({src!r}), elmo.__file__\n")
    done = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": src})
    if done.returncode != 0:
        raise SystemExit(f"the code run on {src} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# The operator counter is the tests' (tests/op_counting.py), so that a count the docs report and
# the ceiling a test holds it to are counted alike.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import op_counting  # noqa: E402

OpCounter = op_counting.OpCounter


# Python source, for ``str.format``, that builds a biLM of the published ``size`` with random
# weights (biases too), reads the first ``n`` sentences of ``text`` into ``lines`` and warms an
# ``embedder`` of ``precision`` on two of them: the shared start of the benchmarks' one-process
# scripts (compare_revisions.py, bf16_profile.py). It needs torch, BiLM, Embedder and
# published_config imported.
RANDOM_MODEL_EMBEDDER = """
torch.manual_seed(0)
model = BiLM(published_config({size!r})).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.uniform_(-0.1, 0.1)
lines = [line.split() for line in open({text!r}, encoding="utf-8") if line.strip()][:{n}]
embedder = Embedder(model, precision={precision!r})
embedder.embed_sentences(lines[:2])
"""

# Then the speed of that embedder: the lines at batch 64 (tokens/s), and the median latency of
# up to 30 of their 20-token sentences embedded alone; printed as the process's last line of
# JSON (compare_revisions.py, row_block_sizes.py). It needs json, statistics and time imported.
EMBED_SPEED = RANDOM_MODEL_EMBEDDER + """
start = time.perf_counter()
embedder.embed_sentences(lines)
seconds = time.perf_counter() - start
latencies = []
for sentence in [s for s in lines if len(s) == 20][:30]:
    t0 = time.perf_counter()
    embedder.embed_sentences([sentence], batch_size=1)
    latencies.append(time.perf_counter() - t0)
print(json.dumps({{"tokens_per_second": sum(map(len, lines)) / seconds,
                  "latency_20_tokens_ms": 1000 * statistics.median(latencies)}}))
"""
