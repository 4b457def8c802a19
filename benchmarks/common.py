"""Shared pieces of the benchmarks: what the numbers were measured on, whole processes timed with
their peak memory, this machine's matmul peak, model FLOPs, a model of random weights, the
sentences of a ``--quick`` run, and the JSON file each benchmark writes.

Importing it imports nothing but the standard library (PyTorch and ``elmo`` when a function needs
them), so a process whose ``elmo`` is another checkout's can use it too. Run as a script it is the
small launcher that :func:`time_and_peak_process` starts (``python benchmarks/common.py COMMAND
...``: runs the command, prints its seconds, peak memory and exit status as one JSON line).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def machine() -> dict:
    """What the numbers were measured on."""
    import torch

    from elmo.inference.precision import cpu_flags

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


def time_and_peak_process(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall-clock seconds and peak resident memory (MB) of one whole process: see
    :func:`measure_process`."""
    measured = measure_process(command, env)
    return measured["seconds"], measured["peak_mb"]


def measure_process(command: list[str], env: dict | None = None) -> dict:
    """``seconds`` (wall clock), ``cpu_seconds`` (user and system, all its threads and children)
    and ``peak_mb`` (peak resident memory: the kernel's ``ru_maxrss``) of one whole process,
    started from a small launcher (this file run as a script, see :func:`launch`), whose own
    start-up is not counted. The launcher is there for the peak: Linux gives a child the
    high-water mark of the memory it was forked from (the benchmark's, which holds models) as its
    own ``ru_maxrss``, so the command must be started from a small process for its peak to be its
    own. Its standard output is discarded; a failure stops the benchmark with its standard error."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *command], capture_output=True, text=True,
                          env=env)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"returncode": done.returncode}
    if result["returncode"] != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result['returncode']}):\n{done.stderr}")
    return {key: result[key] for key in ("seconds", "cpu_seconds", "peak_mb")}


def launch(command: list[str]) -> int:
    """Run ``command`` (its standard output discarded, its standard error passed on) and print one
    JSON line: its seconds, peak resident memory in MB and exit status."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    sys.stderr.buffer.write(stderr)
    print(json.dumps({"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime,  # less swayed by other jobs than wall time
                      "returncode": os.waitstatus_to_exitcode(status)}))
    return 0


def installed_env(env: dict, work: str) -> dict:
    """``env`` for timing whole processes as an installed package runs them: an install carries
    compiled bytecode, while a checkout run with ``PYTHONDONTWRITEBYTECODE`` (some sandboxes set
    it) would compile every module in every process, about 0.3 s that no user pays. The bytecode
    goes to ``work/pycache``, not into the checkout."""
    env = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    return env


def matmul_peak_flops(dtype=None, size: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """Best achieved FLOP/s of a square matrix product (``dtype``: float32 unless given): the
    denominator of MFU. On a CPU the best of PyTorch's own product and oneDNN's linear kernel,
    since MKL takes slower code paths on AMD CPUs (on the development EPYC its float32 "peak" was
    half of oneDNN's)."""
    import torch

    dtype = dtype or torch.float32
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


def token_encoder_flops(config) -> int:
    """Forward FLOPs of the token encoder for one token (all 50 character slots) of a
    :class:`~elmo.model.config.BiLMConfig`."""
    cnn = config.char_cnn
    flops = sum(2 * width * cnn.embedding_dim * n * (cnn.max_characters_per_token - width + 1)
                for width, n in cnn.filters)
    flops += cnn.n_highway * 2 * (2 * cnn.n_filters ** 2)
    if cnn.n_filters != config.lstm.projection_dim:
        flops += 2 * cnn.n_filters * config.lstm.projection_dim
    return flops


def lstm_flops(config) -> int:
    """Forward FLOPs of one direction's LSTM stack for one token."""
    lstm = config.lstm
    per_layer = 2 * (2 * lstm.projection_dim) * 4 * lstm.dim + 2 * lstm.dim * lstm.projection_dim
    return lstm.n_layers * per_layer


def encoder_step_flops(config, words) -> float:
    """Forward FLOPs of the token encoder on one step's distinct words (``words``:
    :func:`elmo.kernels.encoder.distinct_words` of both directions' character ids): each length
    group's convolutions over its real span (:func:`elmo.kernels.encoder.group_shapes` without
    fixed shapes: what the model must compute, not the padding a GPU adds for fewer shapes), then
    the highway layers and the projection of every distinct word."""
    from elmo.kernels.encoder import group_shapes

    cnn = config.char_cnn
    widest = max(width for width, _ in cnn.filters)
    flops = 0.0
    for start, stop, rows, span in group_shapes(words, cnn.max_characters_per_token, widest, fixed_shapes=False):
        flops += rows * sum(2 * width * cnn.embedding_dim * n * (span - width + 1) for width, n in cnn.filters)
    head = cnn.n_highway * 2 * (2 * cnn.n_filters ** 2)
    if cnn.n_filters != config.lstm.projection_dim:
        head += 2 * cnn.n_filters * config.lstm.projection_dim
    return flops + len(words.distinct) * head


def embedding_work_flops(config, sentences) -> float:
    """FLOPs of the computation embedding ``sentences`` (token lists) really needs: both
    directions' LSTM stacks over every real position (each token and the sentence's two
    boundaries), and the token encoder over the input's distinct words, each over its real
    character slots (:func:`encoder_step_flops`). Padding, repeated words and the 50-slot
    convolutions of the plain path are not work: the roofline's numerator."""
    from elmo.model.chars import batch_to_char_ids
    from elmo.kernels.encoder import distinct_words

    positions = sum(len(s) + 2 for s in sentences)
    words = sorted({w for s in sentences for w in s})
    encoder = encoder_step_flops(config, distinct_words(batch_to_char_ids([words])[0])) if words else 0.0
    return encoder + positions * 2 * lstm_flops(config)


def product_peaks(config, precisions=("float32", "bfloat16"), square: int = 2048, rows: int = 64,
                  repeats: int = 3) -> dict:
    """This machine's measured FLOP/s of matrix products, per precision: the best over the LSTM's
    own input product (``rows`` x projection -> 4 x cell) and a ``square`` one, each through
    ``torch.matmul`` and through oneDNN's linear kernel (its weight prepacked, as elmo's
    ``blocks.linear`` does) where this CPU and PyTorch reach it. Each entry holds every product's
    rate (None: not reachable) and ``peak``, their best: the roofline's denominator."""
    import torch

    lstm = config.lstm
    shapes = {"lstm": (rows, lstm.projection_dim, 4 * lstm.dim), "square": (square, square, square)}
    found = {}
    for precision in precisions:
        dtype = getattr(torch, precision)
        rates: dict = {}
        for shape_name, (m, k, n) in shapes.items():
            x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
            wt = w.t().contiguous()
            products = {"matmul": lambda: torch.matmul(x, wt)}
            try:
                if not torch.backends.mkldnn.is_available():
                    raise RuntimeError("no oneDNN")
                if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
                    raise RuntimeError("no bfloat16 in oneDNN on this CPU")
                packed = torch.ops.mkldnn._reorder_linear_weight(w, m)
                torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
                products["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
            except (RuntimeError, AttributeError):
                rates[f"{shape_name}_onednn"] = None
            for product_name, product in products.items():
                best = float("inf")
                for _ in range(repeats + 1):
                    start = time.perf_counter()
                    product()
                    best = min(best, time.perf_counter() - start)
                rates[f"{shape_name}_{product_name}"] = 2 * m * k * n / best
        rates["shapes"] = {name: list(shape) for name, shape in shapes.items()}
        rates["peak"] = max(v for v in rates.values() if isinstance(v, float))
        found[precision] = rates
    return found


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def random_model(size: str, fast: bool = True):
    """A biLM of the published (or preset) ``size`` with random weights, biases too (so no gate
    sits at an untypical exact zero), seed 0, in eval mode. Only ``BiLM`` and ``published_config``
    are used, so an old checkout's ``elmo`` builds it as well."""
    import torch

    from elmo import BiLM
    from elmo.model.config import published_config

    torch.manual_seed(0)
    model = BiLM(published_config(size), fast=fast).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    return model


def quick_sentences(path: str | os.PathLike, n: int) -> str:
    """Write ``n`` sentences to ``path``, one per line, tokens separated by spaces: the 30 of the
    package's built-in warm-up text (9 to 17 tokens), over and over. The text of a ``--quick`` run,
    which needs no data. Returns ``path``."""
    from elmo.inference.states import warmup_sentences

    sentences = warmup_sentences()
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(" ".join(sentences[i % len(sentences)]) + "\n" for i in range(n))
    return str(path)


def write_results(path: str | os.PathLike, results: dict) -> None:
    """Write a benchmark's results as JSON to ``path`` (atomically, creating its folder), after
    this machine's description under ``"machine"``."""
    from elmo.fileio import atomic_write_text

    atomic_write_text(path, json.dumps({"machine": machine(), **results}, indent=2), make_parents=True)


def __getattr__(name: str):
    # The operator counter is the tests' (tests/op_counting.py), so that a count the docs report and
    # the ceiling a test holds it to are counted alike; imported (with PyTorch) on first use.
    if name == "OpCounter":
        tests = os.path.join(REPO, "tests")
        if tests not in sys.path:
            sys.path.append(tests)
        import op_counting

        return op_counting.OpCounter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
