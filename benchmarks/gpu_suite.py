"""One prepared run of every GPU measurement of issue 37, for a short GPU lease: JSON out, a table
printed at the end, every section in its own process under its own time limit.

    PYTHONPATH=src python benchmarks/gpu_suite.py --out "$OUT/gpu_suite.json"     # on the GPU (8 min at most)
    PYTHONPATH=src python benchmarks/gpu_suite.py --device cpu --quick --out suite.json   # anywhere
    PYTHONPATH=src python benchmarks/gpu_suite.py --before-src before/src --out "$OUT/gpu_suite.json"  # + old rows
    python benchmarks/gpu_suite.py --render "$OUT/gpu_suite.json"   # the Markdown tables, printed
    python benchmarks/gpu_suite.py --render gpu_suite.json --into docs/speed.md   # ... put into the docs

Sections, in this order (a section that fails or runs out of time is recorded as such, with what it
measured so far, and the suite goes on; the JSON is rewritten after every section):

* ``environment``: GPU, driver, torch/CUDA/cuDNN, CPU; measured fp32, TF32 and bf16 matmul peaks.
* ``exactness``: every fast path (training: each LSTM path's outputs and gradients, the CUDA
  graph of the training window on its top layer; inference: eager, CUDA graphs) against the CPU
  plain path on the parity fixtures.
* ``cuda_tests``: ``pytest tests/test_cuda.py`` in a subprocess (parallel workers where
  pytest-xdist is installed): counts, the slowest tests and the failures' text.
* ``embed``: embedding tokens/s per path (plain, eager, CUDA graphs) and precision, with a per-stage breakdown (host, encoder, LSTM, rest of the forward, copy to the
  host, HDF5 writing).
* ``train_packaged`` (then ``train_original``): training tokens/s per direction, s/step, peak
  memory, model FLOP utilisation and kernels per step (the real ``Trainer`` step on generated
  text with the real batcher), per LSTM path and precision, with each trainer's set-up time, the
  host's preparation of a step (batches, distinct words) and a profile of the first row's step.
* ``embed_process``: whole-process ``elmo embed`` of 10,000 generated sentences, with and without
  CUDA graphs, and an in-process breakdown (imports, loading, embedding without and with HDF5).
* ``train_process``: whole-process ``elmo train`` on a generated corpus with the real batcher.
* ``batcher``: the host's batch building alone, one thread (``benchmarks/lm_batcher.py``), on
  this host; with ``--before-batcher-src``, an older checkout's batcher against the current one.

The code before a change is measured from a checkout of the older commit, not from copies kept
here. ``--before-src DIR`` (an old commit's ``src/``, carried beside this tree: ``git archive
167ab73 src | tar -x -C before``) runs the sections of :data:`BEFORE_SECTIONS` once more after the
others, in processes whose ``elmo`` is that one (recorded as ``embed@before`` and so on: there the
old code's own paths, e.g. its ``fast`` LSTM and its inference kernel, are the pre-#37 ones).
``--before-batcher-src DIR`` (``dc5ac8f^``) gives the batcher section its old column. Without
them these rows are left out and the JSON's ``suite.before`` says so.

FLOPs per token are derived from the config the way the issue counts them: per token of one
direction, the encoder and the LSTM stack of both directions' inputs and both softmaxes, times
three for forward and backward (the original size with 8,192 negatives: ~0.82 GFLOP).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Run from a checkout without installing: this tree's package first, for this process and its
# children; a section of --before-src runs on that package instead (set by the driver).
SRC = os.environ.get("ELMO_SUITE_SRC") or str(ROOT / "src")
sys.path[:0] = [SRC, str(HERE)]
os.environ["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])

# Cheap sections first, so that a budget that runs out cuts the dearest. The limits come from the
# two runs on one H200 (2026-11-27, results/benchmarks/gpu_suite-h200-*.json), with room to spare.
SECTIONS = ("environment", "exactness", "cuda_tests", "embed", "train_packaged", "train_original", "embed_process",
            "train_process", "batcher")
# Seconds each section may take (full run; --quick gives each QUICK_TIMEOUT). Measured there:
# environment 6-7, exactness 28-30, embed 51, embed_process 90 (now half the sentences, ~45);
# cuda_tests ran 18 of 32 tests in 135 s one at a time (now in parallel workers, estimated 60-100);
# the training sections time rows until their limit cuts them. Expected in all: about 470 s.
TIMEOUTS = {"environment": 20, "exactness": 45, "cuda_tests": 100, "embed": 60, "train_packaged": 70,
            "train_original": 100, "embed_process": 60, "train_process": 45, "batcher": 25}
# Sections run once more on the package of --before-src, after all the others.
BEFORE_SECTIONS = ("embed", "train_packaged")
QUICK_TIMEOUT = 100  # per section on a CPU with --quick
DEFAULT_BUDGET_S = 480  # the whole suite: 8 minutes
MIN_SECTION_S = 20  # a section is skipped when less than this is left of the budget
CUDA_TEST_WORKERS = 6  # pytest-xdist workers for tests/test_cuda.py on a GPU host
ORIGINAL_VOCAB = 793_471  # the 1B Word Benchmark vocabulary the original model was trained with


# =============================================================================== the driver
def run_suite(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    out = Path(args.out).absolute()  # the sections run in the checkout's root: a relative path would land there
    report = {"suite": {"device": args.device, "quick": args.quick, "budget_s": args.budget_s,
                        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S %z")},
              "sections": {}}
    wanted = args.sections or list(SECTIONS)
    before_src = getattr(args, "before_src", None)
    if before_src:
        wanted = wanted + [f"{name}@before" for name in BEFORE_SECTIONS if name in wanted]
        report["suite"]["before"] = {"src": before_src, "sections": [n for n in wanted if n.endswith("@before")]}
    else:
        report["suite"]["before"] = ("skipped: no --before-src given (the old code's rows come from an old "
                                     "commit's src/, see docs/speed.md)")
    # Each section's own record lives beside the output, so that it survives even a kill of this
    # process in the middle of the section; generated text and HDF5 files go to a temporary folder.
    parts = out.with_name(out.stem + "-parts")
    parts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as work:
        for name in wanted:
            left = args.budget_s - (time.monotonic() - started)
            limit = QUICK_TIMEOUT if args.quick else TIMEOUTS[name.split("@")[0]]
            limit = min(limit * args.timeout_scale, left)
            if limit < MIN_SECTION_S:
                report["sections"][name] = {"status": "skipped", "why": f"{left:.0f} s of the budget left"}
            else:
                print(f"[{time.monotonic() - started:6.1f} s] {name} (limit {limit:.0f} s)", flush=True)
                report["sections"][name] = run_section(name, args, work, limit, parts)
                print(f"[{time.monotonic() - started:6.1f} s] {name}: {report['sections'][name]['status']}", flush=True)
            report["suite"]["elapsed_s"] = round(time.monotonic() - started, 1)
            write_json(out, report)
    print()
    print(render_text(report))
    print(f"\nwrote {out}")
    return report


def run_section(name: str, args: argparse.Namespace, work: str, limit: float, parts: Path | None = None) -> dict:
    """Run one section in a child process (its own session, killed whole at the limit); what the
    child recorded (in ``parts``, default ``work``) survives any end. ``NAME@before`` runs section
    NAME on the package of ``args.before_src``."""
    part = Path(parts or work) / f"{name}.json"
    with contextlib.suppress(FileNotFoundError):
        part.unlink()  # a record of an earlier run must not pass for this one's
    section, _, before = name.partition("@")
    command = [sys.executable, str(Path(__file__)), "--section", section, "--part", str(part), "--device", args.device,
               "--work", work, "--limit", str(limit)] + (["--quick"] if args.quick else [])
    if getattr(args, "before_batcher_src", None):
        command += ["--before-batcher-src", os.path.abspath(args.before_batcher_src)]
    env = dict(os.environ)
    if before:
        src = os.path.abspath(args.before_src)
        env.update(ELMO_SUITE_SRC=src, PYTHONPATH=os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])]))
    if args.device == "cpu" and args.quick:
        # The CPU check runs the code, it measures nothing: one thread, since torch's threads
        # beside another busy process spin so long that a section took 100 s instead of 6.
        env.setdefault("OMP_NUM_THREADS", "1")
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, cwd=ROOT, env=env)
    try:
        output, _ = process.communicate(timeout=limit)
        status = "ok" if process.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = "timeout"
    result = read_json(part) or {}
    error = result.pop("_error", None)
    if status == "ok" and error:
        status = "failed"
    section = {"status": status, "seconds": round(time.monotonic() - start, 1), "limit_s": round(limit),
               "result": result}
    if status != "ok":
        section["error"] = error or f"exit code {process.returncode}"
        section["output_tail"] = (output or "")[-3000:]
    return section


class Recorder:
    """What a section measured, rewritten to its part file after every change (so that a kill
    loses nothing already measured)."""

    def __init__(self, path: str):
        self.path, self.data = Path(path), {}

    def set(self, key: str, value) -> None:
        self.data[key] = value
        write_json(self.path, self.data)

    def add(self, key: str, row: dict) -> None:
        self.data.setdefault(key, []).append(row)
        write_json(self.path, self.data)
        print(json.dumps(row, default=str), flush=True)


def write_json(path: Path, data: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ========================================================================= shared helpers
def device_sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def reset_peak_memory(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_bytes(device) -> int:
    import torch
    from common import peak_rss_bytes

    if torch.device(device).type == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return peak_rss_bytes()  # the process's peak so far (CPU)


def generate_sentences(n: int, seed: int, words: list[str]) -> list[list[str]]:
    """``n`` sentences of words drawn Zipf-like from ``words`` (most frequent first), lengths as in
    news text (1 to 70, mean about 24)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    lengths = np.clip(rng.gamma(2.5, 9.6, size=n).astype(int), 1, 70)
    drawn = rng.choice(len(words), size=int(lengths.sum()), p=p)
    sentences, position = [], 0
    for length in lengths:
        sentences.append([words[i] for i in drawn[position:position + length]])
        position += length
    return sentences


def packaged_words() -> list[str]:
    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.vocab import Vocabulary

    return Vocabulary.from_file(packaged_model_dir() / "vocab.txt").words[3:]


def write_corpus(path: Path, sentences: list[list[str]]) -> None:
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")


def write_vocab(path: Path, words: list[str], size: int) -> None:
    """``<S>``, ``</S>``, ``<UNK>``, ``words``, then made-up words up to ``size`` entries."""
    entries = ["<S>", "</S>", "<UNK>", *words][:size]
    entries += [f"w{i:07d}" for i in range(size - len(entries))]
    path.write_text("\n".join(entries) + "\n", encoding="utf-8")


def train_flops_per_token(config, n_samples: int, vocab_size: int) -> float:
    """Model FLOPs of one training token of one direction (forward and backward): the encoder and
    the LSTM stack over both directions' inputs, and both directions' softmax, forward times 3."""
    from common import lstm_flops, token_encoder_flops

    width = (n_samples + 1) if n_samples else vocab_size
    forward = 2 * token_encoder_flops(config) + 2 * lstm_flops(config) + 2 * 2 * config.lstm.projection_dim * width
    return 3.0 * forward


def matmul_peak(device: str, dtype_name: str, size: int, repeats: int) -> float:
    """Best FLOP/s of a square product in ``dtype_name``: float32 (TF32 off), tf32, bfloat16."""
    import torch

    dtype = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    try:
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        best = float("inf")
        for _ in range(repeats + 2):  # the first two warm up
            device_sync(device)
            start = time.perf_counter()
            for _ in range(4):
                a @ b
            device_sync(device)
            best = min(best, (time.perf_counter() - start) / 4)
        return 2 * size ** 3 / best
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def measured_peaks(device: str, quick: bool) -> dict:
    """The suite's own peaks, measured once per process where a section needs them (cheap)."""
    size = 512 if quick or device == "cpu" else 8192
    repeats = 2 if quick or device == "cpu" else 5
    peaks = {"float32": matmul_peak(device, "float32", size, repeats)}
    if device != "cpu":
        peaks["tf32"] = matmul_peak(device, "tf32", size, repeats)
    peaks["bfloat16"] = matmul_peak(device, "bfloat16", size, repeats)
    return peaks


@contextlib.contextmanager
def exact_float32():
    """No TF32 anywhere (matmuls and cuDNN convolutions): the exactness checks need full float32."""
    import torch

    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


PROFILE_TOP = 12  # operators kept per table of a profiled call


def count_kernels(device: str, run, profile_top: int = 0) -> dict:
    """Kernels of one call of ``run``: on a GPU the profiler's device events (kernels, copies and
    fills, from every thread), and with ``profile_top`` the operators that took the most host
    time and the most device time (where a step's time goes); on a CPU, the ATen operators that
    launch one (:class:`common.OpCounter`). On a GPU a profiler failure is recorded, not
    replaced by the operator count (a dispatch mode could make compiled code recompile)."""
    import torch

    counts = {}
    if torch.device(device).type == "cuda":
        try:
            from torch.profiler import ProfilerActivity, profile

            start = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run()
                torch.cuda.synchronize()
            counts["profiled_call_s"] = round(time.perf_counter() - start, 4)
            counts["cuda_kernels"] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            if profile_top:
                counts["profile"] = profile_tables(prof, profile_top)
        except Exception as error:
            counts["cuda_kernels_error"] = f"{type(error).__name__}: {error}"
        return counts
    from common import OpCounter

    with OpCounter() as counter:
        run()
    device_sync(device)
    counts["aten_kernel_ops"] = counter.kernels
    return counts


def profile_tables(prof, top: int) -> dict:
    """The ``top`` operators by their own host time and by device time, in milliseconds."""
    averages = prof.key_averages()

    def device_ms(event, own: bool) -> float:
        for name in (("self_device_time_total", "self_cuda_time_total") if own else
                     ("device_time_total", "cuda_time_total")):
            value = getattr(event, name, None)
            if value is not None:
                return value / 1e3
        return 0.0

    rows = [{"op": e.key[:80], "calls": e.count, "self_host_ms": round(e.self_cpu_time_total / 1e3, 3),
             "self_device_ms": round(device_ms(e, True), 3)} for e in averages]
    return {"host": sorted(rows, key=lambda r: -r["self_host_ms"])[:top],
            "device": sorted(rows, key=lambda r: -r["self_device_ms"])[:top],
            "host_ms_total": round(sum(r["self_host_ms"] for r in rows), 1),
            "device_ms_total": round(sum(r["self_device_ms"] for r in rows), 1)}


# ============================================================================= environment
def section_environment(rec: Recorder, args) -> None:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cpu": cpu_name(), "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "cpu_vector_flags": sorted(cpu_vector_flags()),
           "tf32_defaults": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # not installed (CPU builds)
        env["triton"] = None
    if args.device != "cpu":
        properties = torch.cuda.get_device_properties(0)
        env.update({"gpu": properties.name, "gpu_memory_gib": round(properties.total_memory / 2 ** 30, 1),
                    "gpu_count": torch.cuda.device_count(), "compute_capability": f"{properties.major}.{properties.minor}",
                    "driver": nvidia_smi("driver_version")})
    rec.set("environment", env)
    peaks = measured_peaks(args.device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cpu_vector_flags() -> set[str]:
    from elmo.inference.runtime import cpu_flags

    return {f for f in (cpu_flags() or set()) if re.match(r"(avx|amx|fma|sse4|f16c)", f)}


def nvidia_smi(field: str) -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


# ============================================================================== exactness
def fixture_model(name: str):
    from elmo import load_bilm_tf

    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    return load_bilm_tf(folder / "options.json", folder / "lm_weights.hdf5").eval()


def fixture_sentences(name: str) -> list[list[str]]:
    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    file = {"allennlp": "sentences.json", "bilm-tf": "lm_embeddings_sentences.json"}[name]
    groups = json.loads((folder / file).read_text(encoding="utf-8"))
    return [s.split() for group in groups for s in group]


def training_paths(device: str) -> list[str]:
    """The LSTM paths of training in this checkout, slowest first: "plain" (the specification),
    the model's own fast paths (``elmo.model.bilm.LSTM_PATHS``), and on a GPU "fused+compile" (its cells through
    torch.compile) and "fused+graphs" (the training window as CUDA graphs) where the model has
    them. The cuDNN backend is another model (no clipping): see :func:`cudnn_config`."""
    import inspect

    from elmo.model import bilm, lm

    paths = ["plain"]
    model_paths = [p for p in getattr(bilm, "LSTM_PATHS", ("plain", "fast")) if p not in ("plain", "cudnn")]
    paths += model_paths
    if device != "cpu" and "fused" in model_paths:
        if "compile_cells" in inspect.signature(bilm.BiLM).parameters:
            paths.append("fused+compile")
        if hasattr(lm.LanguageModel, "use_cuda_graphs"):
            paths.append("fused+graphs")
    return paths


def cudnn_config(config):
    """``config`` as a cuDNN-backend model (no clipping), where this checkout has that backend."""
    import dataclasses

    from elmo.model import bilm

    if "cudnn" not in getattr(bilm, "LSTM_PATHS", ()) or not hasattr(config.lstm, "backend"):
        return None
    lstm = dataclasses.replace(config.lstm, cell_clip=None, proj_clip=None, backend="cudnn")
    return dataclasses.replace(config, lstm=lstm)


@contextlib.contextmanager
def training_path(model, name: str, trainer=None):
    """``model`` (a LanguageModel or a BiLM; ``trainer``'s, when given) trains on LSTM path
    ``name`` within the block; everything is restored after."""
    bilm = getattr(model, "bilm", model)
    saved = {k: getattr(bilm, k) for k in ("lstm_path", "compile_cells", "fast") if hasattr(bilm, k)}
    sparse = getattr(trainer, "sparse_softmax", None)
    graphs = False
    try:
        base, *extras = name.split("+")
        if hasattr(bilm, "lstm_path"):
            bilm.lstm_path = base
            if hasattr(bilm, "compile_cells"):
                bilm.compile_cells = "compile" in extras
        else:  # before the LSTM paths: fast or plain only
            bilm.fast = base != "plain"
        if "graphs" in extras:
            model.use_cuda_graphs(True)
            graphs = True
            if trainer is not None:  # the trainer's autocast must not cache weight casts under graphs
                trainer.settings.cuda_graphs = True
        yield model
    finally:
        if sparse is not None:
            trainer.sparse_softmax = sparse
        if graphs:
            model.use_cuda_graphs(False)
            if trainer is not None:
                trainer.settings.cuda_graphs = False
        for key, value in saved.items():
            if key != "fast":
                setattr(bilm, key, value)
        if "lstm_path" not in saved:
            bilm.fast = saved["fast"]


def section_exactness(rec: Recorder, args) -> None:
    import torch

    device = args.device
    fixtures = ("allennlp",) if args.quick else ("allennlp", "bilm-tf")
    with exact_float32():
        for fixture in fixtures:
            for row in inference_exactness(fixture, device, args.quick):
                rec.add("inference", row)
        for fixture in fixtures:  # (a path through torch.compile compiles first: it comes last)
            for row in training_exactness(fixture, device):
                rec.add("training", row)
    del torch


def _max_diff(a, b) -> float:
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


def training_exactness(fixture: str, device: str) -> list[dict]:
    """Each training path's outputs, final states and every parameter gradient of one full window
    (both directions, dropout off, random carried state) on ``device``, against the CPU plain path."""
    import copy

    import torch

    torch.manual_seed(0)
    reference = fixture_model(fixture)
    config = reference.config
    batch, steps = 5, 20
    tokens = torch.randn(batch, steps, config.lstm.projection_dim)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    state = reference.zero_state(batch)
    state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
    weights = torch.randn(config.lstm.n_layers, batch, steps, config.lstm.projection_dim)

    def run(model, on):
        model = model.to(on).train()
        results = []
        for direction in (0, 1):
            with torch.enable_grad():
                inputs = tokens.to(on).requires_grad_(True)
                carried = type(state)(state.c.to(on), state.h.to(on))
                outputs, finals = model.run_stack(direction, inputs, mask.to(on), carried)
                total = sum((o * w.to(on)).sum() for o, w in zip(outputs, weights)) + sum(h.sum() for _, h in finals)
                layers = model.forward_layers if direction == 0 else model.backward_layers
                grads = torch.autograd.grad(total, [inputs, *layers.parameters()])
            results.append(([o.detach() for o in outputs], [t.detach() for f in finals for t in f], list(grads)))
        return results

    with training_path(reference, "plain"):
        expected = run(copy.deepcopy(reference), "cpu")
    rows = []
    for path in training_paths(device):
        if path == "fused+graphs":  # a LanguageModel's graph of the whole window: compared on its top layer
            rows.append(graphs_exactness(reference, fixture, tokens, state, weights[-1], device))
            continue
        model = copy.deepcopy(reference)
        try:
            with training_path(model, path):
                got = run(model, device)
        except Exception as error:
            rows.append({"fixture": fixture, "path": path, "device": device, "error": f"{type(error).__name__}: {error}"})
            continue
        values = max(_max_diff(a, b) for g, e in zip(got, expected) for a, b in zip(g[0] + g[1], e[0] + e[1]))
        grads = max(_max_diff(a, b) / max(1.0, float(b.abs().max())) for g, e in zip(got, expected)
                    for a, b in zip(g[2], e[2]))
        rows.append({"fixture": fixture, "path": path, "device": device, "dtype": "float32",
                     "max_abs_diff_values": values, "max_rel_diff_gradients": grads,
                     "values_within_1e-5": values <= 1e-5, "gradients_within_1e-4": grads <= 1e-4})
    return rows


def graphs_exactness(reference, fixture: str, tokens, state, top_weight, device: str) -> dict:
    """The training window as :meth:`LanguageModel.use_cuda_graphs` captures it (``LstmWindow``
    through ``torch.cuda.make_graphed_callables``, replayed) against the CPU plain path: the top
    layer of both directions, the final states, and the gradients of ``(top * top_weight).sum()``
    with respect to the inputs and every LSTM parameter (the window's outputs are the top layer
    and the detached states, so its gradients are of the top layer alone)."""
    import copy

    import torch

    from elmo.model.lm import LstmWindow

    row = {"fixture": fixture, "path": "fused+graphs", "device": device, "dtype": "float32"}
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
    spec = copy.deepcopy(reference).train()
    expected_top, expected_finals, expected_grads = [], [], []
    with training_path(spec, "plain"), torch.enable_grad():
        for direction in (0, 1):
            inputs = tokens.clone().requires_grad_(True)
            outputs, finals = spec.run_stack(direction, inputs, mask, state)
            layers = spec.forward_layers if direction == 0 else spec.backward_layers
            expected_grads.append(torch.autograd.grad((outputs[-1] * top_weight).sum(), [inputs, *layers.parameters()]))
            expected_top.append(outputs[-1].detach())
            expected_finals.append([t.detach() for f in finals for t in f])
    try:
        model = copy.deepcopy(reference).to(device).train()
        with training_path(model, "fused"), torch.enable_grad():
            window = LstmWindow(model)
            x = torch.stack([tokens, tokens]).to(device).requires_grad_(True)
            c0, h0 = state.c.to(device), state.h.to(device)
            graphed = torch.cuda.make_graphed_callables(window, (x.detach().clone().requires_grad_(True), c0, h0))
            for _ in range(2):  # replays, not the capture's own run
                top, c, h = graphed(x, c0, h0)
            weight = torch.stack([top_weight, top_weight]).to(device)
            grads = torch.autograd.grad((top * weight).sum(), [x, *window.parameters()])
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"
        return row
    n_forward = len(list(model.forward_layers.parameters()))
    got_grads = [(grads[0][0], *grads[1:1 + n_forward]), (grads[0][1], *grads[1 + n_forward:])]
    values = max(_max_diff(top[d], expected_top[d]) for d in (0, 1))
    n_layers = c.shape[1]
    for d in (0, 1):
        got = [t for layer in range(n_layers) for t in (c[d, layer], h[d, layer])]
        values = max(values, *(_max_diff(a, b) for a, b in zip(got, expected_finals[d])))
    gradients = max(_max_diff(a, b) / max(1.0, float(b.abs().max()))
                    for d in (0, 1) for a, b in zip(got_grads[d], expected_grads[d]))
    row.update({"max_abs_diff_values": values, "max_rel_diff_gradients": gradients,
                "values_within_1e-5": values <= 1e-5, "gradients_within_1e-4": gradients <= 1e-4})
    return row


def inference_exactness(fixture: str, device: str, quick: bool) -> list[dict]:
    """Every inference path on ``device`` against the CPU plain path, on the fixture's sentences
    (three calls each, so that CUDA graphs are captured and replayed)."""
    import torch

    from elmo import batch_to_char_ids
    from elmo.inference.runtime import Runtime

    sentences = fixture_sentences(fixture)
    ids, mask = batch_to_char_ids(sentences)
    plain = fixture_model(fixture)
    plain.fast = False
    with torch.no_grad():
        expected = plain(ids, mask).layers
    rows = []
    variants = [("eager", "float32"), ("eager", "bfloat16")]
    if device != "cpu":
        variants += [("graphs", "float32"), ("graphs", "bfloat16")]
    for path, precision in variants:
        runtime = Runtime(fixture_model(fixture), device=device, precision=precision, state="reset",
                          cuda_graphs=path == "graphs")
        for _ in range(3):
            got = runtime(ids, mask).layers
        diff = _max_diff(got, expected)
        row = {"fixture": fixture, "path": path, "precision": precision, "ran_in": runtime.precision,
               "device": device, "max_abs_diff": diff,
               "within_1e-5": diff <= 1e-5 if runtime.precision == "float32" else None}
        if runtime.graphs is not None:
            row.update(graph_captures=runtime.graphs.captures, graph_replays=runtime.graphs.replays,
                       graphs_disabled=runtime.graphs.disabled)
        rows.append(row)
    return rows


# ============================================================================== CUDA tests
def section_cuda_tests(rec: Recorder, args) -> None:
    """``pytest tests/test_cuda.py`` in a subprocess, stopped short of the section's limit so that
    the results of the tests that finished are kept."""
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        rec.set("_error", "pytest is not installed in this Python: the CUDA tests did not run "
                          "(the exactness section checks the same paths against the specification)")
        return
    command = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-v", "-rfE", "--tb=short", "-p", "no:cacheprovider",
               "--durations=8"]
    env = dict(os.environ)
    if importlib.util.find_spec("xdist") is not None and args.device != "cpu":
        # Independent tests, each far from filling the GPU: in parallel they fit the section's
        # limit, with the host's cores shared out (the first parallel run, each worker with every
        # core's threads for its CPU references, was no faster than one worker).
        command += ["-n", str(CUDA_TEST_WORKERS)]
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // CUDA_TEST_WORKERS))
    rec.set("command", " ".join(command[1:]))
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                               start_new_session=True, env=env)
    try:
        output, _ = process.communicate(timeout=max(10.0, args.limit - 15))
        stopped = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        stopped = True
    # One at a time pytest -v prints "name OUTCOME"; its parallel workers print "[gwN] [ n%] OUTCOME name".
    outcomes = re.findall(r"^(tests/test_cuda\.py::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)", output, re.M)
    outcomes += [(name, outcome) for outcome, name in re.findall(
        r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (tests/test_cuda\.py::\S+)", output, re.M)]
    durations = re.findall(r"^(\d+\.\d+)s (call|setup|teardown)\s+(tests/test_cuda\.py::\S+)", output, re.M)
    rec.set("slowest", [f"{seconds} s {name}" for seconds, when, name in durations if when == "call"])
    counts: dict[str, int] = {}
    for _, outcome in outcomes:
        counts[outcome.lower()] = counts.get(outcome.lower(), 0) + 1
    rec.set("seconds", round(time.monotonic() - start, 1))
    rec.set("counts", counts)
    rec.set("exit_code", None if stopped else process.returncode)
    rec.set("summary", [f"{name} {outcome}" for name, outcome in outcomes if outcome in ("FAILED", "ERROR")])
    failures = re.split(r"\n(?=_{3,} .* _{3,}\n)", output)
    rec.set("failures", [f[:4000] for f in failures[1:]][:12])
    if stopped:
        rec.set("_error", f"pytest stopped at the section's limit after {len(outcomes)} tests: {counts}\n"
                          f"{output[-1500:]}")
    elif process.returncode not in (0, 5):  # 5: nothing collected
        rec.set("_error", f"pytest exit code {process.returncode}: {counts}\n{output[-1500:]}")


# ================================================================================ training
def train_sizes(name: str, quick: bool) -> dict:
    """What a training section runs: the config, batch sizes, vocabulary size, negatives."""
    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.config import BiLMConfig, published_config

    if quick:  # the same code on a CPU in seconds: the tiny preset at small batches
        try:
            from elmo.model.config import preset_config
        except ImportError:  # an older checkout (--before-src): presets were read by the trainer
            from elmo.training.train import load_preset as preset_config

        config = preset_config("tiny")
        return {"config": config, "batches": [4], "vocab": 2000, "negatives": 256, "steps": (1, 2, 10, 0.0)}
    # steps: (warm-up, at least, at most, seconds at least): warm-up covers a compile's first calls.
    if name == "train_original":
        config = published_config("original")
        return {"config": config, "batches": [128, 512], "vocab": ORIGINAL_VOCAB, "negatives": 8192,
                "steps": (2, 3, 10, 0.6)}
    config = BiLMConfig.from_json(packaged_model_dir() / "options.json")
    return {"config": config, "batches": [256, 2048], "vocab": len(packaged_words()) + 3, "negatives": 2048,
            "steps": (2, 3, 10, 0.6)}


def training_data(work: Path, quick: bool) -> tuple[Path, Path]:
    """A generated training text (shared by the training sections) and its folder."""
    folder = work / "train-data"
    corpus = folder / "corpus.txt"
    if not corpus.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_corpus(corpus, generate_sentences(2_000 if quick else 60_000, seed=1, words=packaged_words()))
    return folder, corpus


def section_train(rec: Recorder, args, name: str) -> None:
    """Training throughput of one size: per batch size one Trainer on generated text (real
    batcher, the device's default prefetching), then per LSTM path and precision: warm-up steps,
    timed steps, peak memory, kernels of one step."""
    import torch

    from elmo.model.config import BiLMConfig
    from elmo.training.train import Trainer, TrainSettings

    section_start = time.monotonic()
    device, work = args.device, Path(args.work)
    size = train_sizes(name, args.quick)
    config = size["config"]
    folder, corpus = training_data(work, args.quick)
    vocab = folder / f"vocab-{size['vocab']}.txt"
    if not vocab.exists():
        write_vocab(vocab, packaged_words(), size["vocab"])
    peaks = measured_peaks(device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})
    flops = train_flops_per_token(config, size["negatives"], size["vocab"])
    rec.set("model", {"lstm": f"{config.lstm.n_layers}x{config.lstm.dim}_{config.lstm.projection_dim}",
                      "cnn_filters": config.char_cnn.n_filters, "highway": config.char_cnn.n_highway,
                      "vocab": size["vocab"], "negatives": size["negatives"], "unroll_steps": 20,
                      "train_gflop_per_token_per_direction": round(flops / 1e9, 4)})
    options = folder / f"{name}-options.json"
    training = {"batch_size": size["batches"][0], "unroll_steps": 20, "n_negative_samples_batch": size["negatives"],
                "dropout": 0.1, "all_clip_norm_val": 10.0, "optimizer": "adagrad", "learning_rate": 0.2}
    BiLMConfig(char_cnn=config.char_cnn, lstm=config.lstm, training=training).to_json(options)
    paths = training_paths(device)
    rec.set("paths", paths)
    cudnn = cudnn_config(config)
    if cudnn is not None:
        cudnn_options = folder / f"{name}-cudnn-options.json"
        BiLMConfig(char_cnn=cudnn.char_cnn, lstm=cudnn.lstm, training=training).to_json(cudnn_options)

    def measure(options_file: Path, batch: int, plan: list[tuple[str, bool]]) -> None:
        with tempfile.TemporaryDirectory(dir=work) as output:
            built = time.monotonic()
            trainer = Trainer(TrainSettings(train=[str(corpus)], vocab=str(vocab), output=output,
                                            config=str(options_file), batch_size=batch, max_tokens=10 ** 12,
                                            progress=False, device=device, checkpoint_every=10 ** 9,
                                            log_every=10 ** 9))
            rec.add("trainers", {"batch": batch, "options": options_file.name,
                                 "setup_s": round(time.monotonic() - built, 1)})
            try:
                if device != "cpu" or args.quick:
                    rec.add("host_preparation", {"batch": batch, **host_preparation(trainer),
                                                 "at_s": round(time.monotonic() - section_start, 1)})
                for index, (path, bf16) in enumerate(plan):
                    row = {"batch": batch, "path": path, "precision": "bfloat16" if bf16 else "float32"}
                    try:
                        if path == "cudnn":  # what autocast makes of torch's LSTM kernel, not what was asked
                            row["lstm_ran_in"] = autocast_lstm_dtype(trainer, bf16, device)
                        row.update(time_training(trainer, path, bf16, *size["steps"], device, profile=index == 0))
                        tokens = row["tokens_per_s_per_direction"]
                        row["mfu"] = round(flops * tokens / peaks["bfloat16" if bf16 else "float32"], 4)
                        row["achieved_tflops"] = round(flops * tokens / 1e12, 2)
                    except Exception as error:
                        row["error"] = f"{type(error).__name__}: {error}"
                        row["traceback"] = traceback.format_exc()[-1500:]
                    row["at_s"] = round(time.monotonic() - section_start, 1)
                    rec.add("rows", row)
            finally:
                for batcher in trainer.batchers:
                    if hasattr(batcher, "close"):
                        batcher.close()
                del trainer
                gc.collect()
                if device != "cpu":
                    torch.cuda.empty_cache()

    # The largest batch first: the throughput targets are about it (a limit cuts the rest).
    for batch in sorted(size["batches"], reverse=True):
        measure(options, batch, training_plan(paths, batch, size["batches"], args.quick))
        if cudnn is not None:  # another model: torch's LSTM kernel, no clipping
            measure(cudnn_options, batch, [("cudnn", False)] if args.quick else [("cudnn", True), ("cudnn", False)])


def autocast_lstm_dtype(trainer, bf16: bool, device: str) -> str:
    """The dtype of torch's LSTM kernel's output under the trainer's autocast: a cuDNN row asked
    for bfloat16 may run in another precision, and its row says which."""
    import torch

    trainer.settings.bf16 = bf16
    layer = torch.nn.LSTM(8, 8).to(device)
    with torch.no_grad(), trainer._autocast():
        out, _ = layer(torch.randn(3, 2, 8, device=device))
    return str(out.dtype).replace("torch.", "")


def training_plan(paths: list[str], batch: int, batches: list[int], quick: bool) -> list[tuple[str, bool]]:
    """(path, bf16) pairs to time at ``batch``, most telling first (a limit cuts the rest): in
    bf16 then fp32, the newest path, the others; at a smaller batch, fp32 only for those two; the plain path only at the smallest batch
    (it is slow). ``quick``: each path once (the newest in both precisions)."""
    fast = [p for p in paths if p != "plain"]  # slowest first
    if quick:
        return [(fast[-1], True)] + [(p, False) for p in reversed(fast)] + [("plain", False)]
    first = [fast[-1]]
    # A path through torch.compile compiles on its first steps: it comes last.
    order = first + sorted((p for p in reversed(fast) if p not in first), key=lambda p: "compile" in p)
    plan = [(p, True) for p in order] + [(p, False) for p in (order if batch == max(batches) else first)]
    if batch == min(batches):
        plan += [("plain", True), ("plain", False)]
    return plan


def time_training(trainer, path: str, bf16: bool, warmup: int, min_steps: int, max_steps: int, min_seconds: float,
                  device: str, profile: bool = False) -> dict:
    """Warm-up steps, then timed steps (at least ``min_steps`` and ``min_seconds``, at most
    ``max_steps``), peak memory over them, and the kernels of one more step (``profile``: with
    the operators that took the most host and device time)."""
    trainer.settings.bf16 = bf16
    # The carried LSTM state takes the precision of the last step: start each setting from zeros.
    trainer.state = trainer.model.bilm.zero_state(trainer.state.batch_size)
    # A step that leaves the losses on the device where the trainer has one (no host sync per step).
    step = getattr(trainer, "_step", trainer.train_step)
    with training_path(trainer.model, path, trainer):
        start = time.perf_counter()
        for _ in range(warmup):
            step()
        device_sync(device)
        warmup_seconds = time.perf_counter() - start
        reset_peak_memory(device)
        steps, start = 0, time.perf_counter()
        while steps < max_steps and (steps < min_steps or time.perf_counter() - start < min_seconds):
            step()
            steps += 1
        device_sync(device)
        seconds = time.perf_counter() - start
        memory = peak_memory_bytes(device)
        tokens = trainer.tokens_per_step
        row = {"steps": steps, "seconds": round(seconds, 3), "s_per_step": round(seconds / steps, 4),
               "tokens_per_s_per_direction": round(steps * tokens / seconds, 1),
               "peak_memory_gib": round(memory / 2 ** 30, 3), "warmup_s": round(warmup_seconds, 2)}
        try:  # the row is timed already: a failing count must not lose it
            row["kernels_per_step"] = count_kernels(device, step, PROFILE_TOP if profile else 0)
        except Exception as error:
            row["kernels_per_step"] = {"error": f"{type(error).__name__}: {error}"}
    return row


def host_preparation(trainer, steps: int = 3) -> dict:
    """Seconds per step of what the trainer's step does on the host before the device works: the
    next batch of each direction (from the prefetching batcher, as in training) and the distinct
    words of both (``elmo.model.encoder.distinct_words``); no device work. Then the parts of a
    batch apart, on a batcher of its own over the same text: building one direction's batch in
    this thread, and pinning it (what the prefetching thread does on a GPU)."""
    import torch

    from elmo.training.data import LMBatcher, SentenceStream

    try:
        from elmo.model.encoder import distinct_words
    except ImportError:  # an older checkout (--before-src): the device found the distinct words
        return {"unavailable": "this checkout has no elmo.model.encoder.distinct_words"}
    encoder = trainer.model.bilm.token_encoder
    for batcher in trainer.batchers:  # the first batch reads the text: not a step's cost
        batcher.next_batch()
    fetch = words = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        batches = [batcher.next_batch() for batcher in trainer.batchers]
        middle = time.perf_counter()
        distinct_words(torch.stack([b["char_ids"] for b in batches]), encoder.pad_id,
                       encoder.word_embedding is not None)
        fetch, words = fetch + middle - start, words + time.perf_counter() - middle
    result = {"next_batch_s": round(fetch / steps, 4), "distinct_words_s": round(words / steps, 4)}
    own = LMBatcher(SentenceStream(trainer.paths, seed=12345), trainer.vocab, trainer.batch_size,
                    trainer.unroll_steps)
    own.next_batch()  # the first batch reads the shard
    build = pin = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        batch = own.next_batch()
        middle = time.perf_counter()
        if torch.cuda.is_available():
            batch = {k: v.pin_memory() for k, v in batch.items()}
        build, pin = build + middle - start, pin + time.perf_counter() - middle
    result.update({"build_one_direction_s": round(build / steps, 4), "pin_one_direction_s": round(pin / steps, 4)})
    return result


def section_train_process(rec: Recorder, args) -> None:
    """``elmo train`` as a user runs it, whole process: the packaged size on generated text."""
    from elmo.hub.pretrained import packaged_model_dir

    work = Path(args.work)
    folder, corpus = training_data(work, args.quick)
    vocab = folder / "vocab-packaged.txt"
    write_vocab(vocab, packaged_words(), len(packaged_words()) + 3)
    batch = 8 if args.quick else 256
    steps = 4 if args.quick else 60
    config = "tiny" if args.quick else str(packaged_model_dir() / "options.json")
    with tempfile.TemporaryDirectory(dir=work) as output:
        command = [sys.executable, "-m", "elmo.cli.main", "train", "--train", str(corpus), "--vocab", str(vocab),
                   "--config", config, "--output", output + "/run", "--batch-size", str(batch), "--max-tokens",
                   str(steps * batch * 20), "--log-every", "10" if not args.quick else "2", "--no-progress",
                   "--device", args.device, "--checkpoint-every", str(10 ** 6)]
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        seconds = time.monotonic() - start
        rec.set("command", " ".join(["elmo", *command[3:]]))
        if done.returncode != 0:
            rec.set("_error", f"exit code {done.returncode}: {done.stderr[-2000:]}")
            return
        rows = (Path(output) / "run" / "metrics.csv").read_text(encoding="utf-8").splitlines()
        header = rows[0].split(",")
        metrics = [dict(zip(header, r.split(","))) for r in rows[1:]]
        rates = [float(m["tokens_per_second"]) for m in metrics]
        rec.set("result", {"batch": batch, "steps": steps, "whole_process_s": round(seconds, 2),
                           "tokens_per_s_per_direction_logged": [round(r, 1) for r in rates],
                           "median_after_first_window": round(statistics.median(rates[1:] or rates), 1),
                           "first_loss": float(metrics[0]["loss"]), "last_loss": float(metrics[-1]["loss"])})


# ================================================================================ embedding
def embed_sizes(quick: bool) -> list[dict]:
    from elmo.model.config import published_config

    if quick:
        return [{"size": "fixture", "model": "fixture", "sentences": 24, "plain_sentences": 6}]
    return [{"size": "packaged", "model": "packaged", "sentences": 1200, "plain_sentences": 200},
            {"size": "original", "model": published_config("original"), "sentences": 600, "plain_sentences": 100}]


def embed_model(spec):
    import torch

    from elmo import BiLM

    if spec == "fixture":
        return fixture_model("allennlp")
    if spec == "packaged":
        from elmo.hub import load_model

        return load_model()
    torch.manual_seed(0)
    return BiLM(spec).eval()  # random weights of a published size


def section_embed(rec: Recorder, args) -> None:
    import torch

    device = args.device
    words = packaged_words()
    for spec in embed_sizes(args.quick):
        model = embed_model(spec["model"])
        warm = generate_sentences(max(8, spec["sentences"] // 8), seed=3, words=words)
        sentences = generate_sentences(spec["sentences"], seed=2, words=words)
        variants = [("plain", "float32"), ("eager", "float32"), ("eager", "bfloat16")]
        if device != "cpu":
            variants[2:2] = [("graphs", "float32")]
            variants.append(("graphs", "bfloat16"))
        for path, precision in variants:
            chosen = sentences[:spec["plain_sentences"]] if path == "plain" else sentences
            row = {"size": spec["size"], "path": path, "precision": precision, "sentences": len(chosen),
                   "tokens": sum(map(len, chosen))}
            try:
                row.update(time_embedding(model, path, precision, chosen, warm, device))
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
                row["traceback"] = traceback.format_exc()[-1500:]
            rec.add("rows", row)
            gc.collect()
            if device != "cpu":
                torch.cuda.empty_cache()


def time_embedding(model, path: str, precision: str, sentences, warm, device: str) -> dict:
    """Tokens/s of ``Embedder.embed_sentences`` (batch 64) after a warm-up on other sentences, then
    one instrumented pass for the per-stage breakdown (stages synchronised, so slower). ``model``
    is not changed (the runtime copies it to the device; the plain path runs a copy)."""
    import copy

    import torch

    from elmo import Embedder

    if path == "plain":
        model = copy.deepcopy(model)
        model.fast = False
    embedder = Embedder(model, device=device, precision=precision, batch_size=64,
                        **({"cuda_graphs": True} if path == "graphs" else {}))  # (older checkouts lack the option)
    embedder.embed_sentences(warm)
    if path == "graphs":
        # Every batch shape of the timed pass captured first (a capture is not a step's cost),
        # then the token memo emptied, so that the timed pass meets its words as a first pass.
        embedder.embed_sentences(sentences)
        embedder.runtime._memo.clear()
    device_sync(device)
    reset_peak_memory(device)
    start = time.perf_counter()
    embedder.embed_sentences(sentences)
    device_sync(device)
    seconds = time.perf_counter() - start
    memory = peak_memory_bytes(device)
    try:
        stages = embedding_stages(embedder, sentences, device)
    except AttributeError as error:  # an older checkout's runtime (--before-src) lacks the stages' hooks
        stages = {"unavailable": f"{type(error).__name__}: {error}"}
    batch = sorted(sentences, key=len)[len(sentences) // 2:][:64]  # 64 sentences of about the median length
    kernels = count_kernels(device, lambda: embedder.embed_batch(batch))
    tokens = sum(map(len, sentences))
    result = {"ran_in": embedder.runtime.precision, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
              "sentences_per_s": round(len(sentences) / seconds, 1), "peak_memory_gib": round(memory / 2 ** 30, 3),
              "stages_s": stages, "kernels_per_batch_of_64": kernels}
    graphs = getattr(embedder.runtime, "graphs", None)  # (older checkouts have no CUDA graphs)
    if graphs is not None:
        result.update(graph_captures=graphs.captures, graph_replays=graphs.replays, graphs_disabled=graphs.disabled)
    del torch
    return result


def embedding_stages(embedder, sentences, device: str) -> dict:
    """Seconds per stage of embedding ``sentences`` (each stage synchronised): building the
    character ids on the host, the token encoder, the LSTM, the rest of the forward (sorting,
    boundaries, concatenation), the copy to the host, and writing the arrays to HDF5 as
    ``elmo embed`` does."""
    import h5py
    import numpy as np
    import torch

    from elmo.inference import runtime as runtime_module
    from elmo.inference.embed import select_layers
    from elmo.model.chars import batch_to_char_ids

    runtime = embedder.runtime
    runtime._memo.clear()  # the encoder's stage as a first pass meets it, not on words remembered
    stages = dict.fromkeys(["host", "encoder", "lstm", "forward_rest", "to_host", "hdf5"], 0.0)

    def timed(stage, function):
        def wrapper(*a, **k):
            device_sync(device)
            start = time.perf_counter()
            result = function(*a, **k)
            device_sync(device)
            stages[stage] += time.perf_counter() - start
            return result
        return wrapper

    saved = {"_token_vectors": runtime._token_vectors, "_lstm_eager": runtime._lstm_eager}
    saved_encode = runtime_module.encode_fast
    runtime._token_vectors = timed("encoder", runtime._token_vectors)
    runtime._lstm_eager = timed("lstm", runtime._lstm_eager)
    runtime_module.encode_fast = timed("encoder", saved_encode)
    graphs_run = None
    if runtime.graphs is not None:
        graphs_run = runtime.graphs.run
        runtime.graphs.run = timed("lstm", graphs_run)
    arrays = []
    try:
        with torch.inference_mode():
            for indices in embedder._batches(sentences, embedder.batch_size):
                rows = [sentences[i] for i in indices]
                start = time.perf_counter()
                ids, mask = batch_to_char_ids(rows)
                initial = runtime.states.initial(len(rows))
                stages["host"] += time.perf_counter() - start
                device_sync(device)
                inner = stages["encoder"] + stages["lstm"]
                start = time.perf_counter()
                out = runtime.forward(ids, mask, initial, words=rows)
                device_sync(device)
                stages["forward_rest"] += time.perf_counter() - start - (stages["encoder"] + stages["lstm"] - inner)
                runtime.states.update(out.state)
                start = time.perf_counter()
                layers = out.layers.float().cpu().numpy()
                arrays += [select_layers(layers[i, :, :len(r)], "all") for i, r in enumerate(rows)]
                stages["to_host"] += time.perf_counter() - start
    finally:
        runtime.__dict__.pop("_token_vectors", None)
        runtime.__dict__.pop("_lstm_eager", None)
        runtime_module.encode_fast = saved_encode
        if graphs_run is not None:
            runtime.graphs.run = graphs_run
        del saved
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        with h5py.File(Path(folder) / "out.hdf5", "w") as f:
            for index, array in enumerate(arrays):
                f.create_dataset(str(index), data=array.astype(np.float32))
        stages["hdf5"] = time.perf_counter() - start
    return {k: round(v, 4) for k, v in stages.items()}


# ======================================================================= whole-process embed
def section_embed_process(rec: Recorder, args) -> None:
    """Whole-process ``elmo embed`` of 10,000 generated sentences with the packaged model (eager,
    then CUDA graphs), and one in-process breakdown of the eager run."""
    work = Path(args.work)
    n = 100 if args.quick else 10_000
    text = work / f"embed-{n}.txt"
    sentences = generate_sentences(n, seed=4, words=packaged_words())
    write_corpus(text, sentences)
    tokens = sum(map(len, sentences))
    rec.set("input", {"sentences": n, "tokens": tokens})
    model = ["--options", str(ROOT / "tests/fixtures/allennlp-elmo/options.json"), "--weights",
             str(ROOT / "tests/fixtures/allennlp-elmo/lm_weights.hdf5")] if args.quick else []
    runs = [("eager", []), ("graphs", ["--cuda-graphs"])] if args.device != "cpu" else [("eager", [])]
    for name, extra in runs:
        out = work / f"embed-{name}.hdf5"
        command = [sys.executable, "-m", "elmo.cli.main", "embed", str(text), str(out), "--device", args.device,
                   "--batch-size", "64", "--force", *model, *extra]
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        seconds = time.monotonic() - start
        row = {"run": name, "command": " ".join(["elmo", *command[3:]]).replace(str(work), "WORK"),
               "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1), "exit_code": done.returncode}
        if done.returncode != 0:
            row["stderr"] = done.stderr[-2000:]
        elif out.exists():
            row["output_gib"] = round(out.stat().st_size / 2 ** 30, 3)
            out.unlink()
        rec.add("whole_process", row)
    # In-process: where the time goes, in a fresh interpreter like the command's.
    command = [sys.executable, str(Path(__file__)), "--embed-breakdown", str(text), "--device", args.device,
               "--work", str(work)] + (["--quick"] if args.quick else [])
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        rec.set("_error", f"breakdown: exit code {done.returncode}: {done.stderr[-2000:]}")
        return
    rec.set("breakdown_s", json.loads(done.stdout.strip().splitlines()[-1]))


def embed_breakdown(text: str, device: str, work: str, quick: bool) -> dict:
    """Seconds of each part of what ``elmo embed TEXT OUT.hdf5`` does, in this fresh process."""
    start = time.perf_counter()
    import torch  # noqa: F401

    from elmo import Embedder
    from elmo.hub import load_model
    from elmo.inference.embed import as_sentences
    times = {"imports": time.perf_counter() - start}
    start = time.perf_counter()
    model = fixture_model("allennlp") if quick else load_model()
    times["load_model"] = time.perf_counter() - start
    start = time.perf_counter()
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    device_sync(device)
    times["runtime_and_warm_state"] = time.perf_counter() - start
    lines = Path(text).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines[:2000]))  # what the process's first batches pay once
    device_sync(device)
    times["first_2000_sentences_warm_up"] = time.perf_counter() - start
    # Fresh runtimes (cold token memos) for the two timed runs, so that they differ by the output only.
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines))
    device_sync(device)
    times["embed_without_output"] = time.perf_counter() - start
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    device_sync(device)
    start = time.perf_counter()
    embedder.embed_file(text, Path(work) / "breakdown.hdf5", overwrite=True)
    times["embed_file_with_hdf5"] = time.perf_counter() - start
    times["hdf5_share"] = times["embed_file_with_hdf5"] - times["embed_without_output"]
    with contextlib.suppress(OSError):
        os.remove(Path(work) / "breakdown.hdf5")
    return {k: round(v, 3) for k, v in times.items()}


def section_batcher(rec: Recorder, args) -> None:
    """benchmarks/lm_batcher.py's measurement on this host: one thread, the current batcher (and
    with --before-batcher-src an older checkout's beside it), each a whole pass over a generated
    text (reading it included), interleaved rounds."""
    import torch
    from lm_batcher import generate_corpus, run

    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import count_tokens

    torch.set_num_threads(1)
    vocab = Vocabulary.from_file(packaged_model_dir() / "vocab.txt")
    text = Path(args.work) / "batcher.txt"
    generate_corpus(str(text), vocab.words[3:], 20_000 if args.quick else 1_000_000)
    _, targets = count_tokens([str(text)])
    sizes = [32] if args.quick else [256, 2048]
    rec.set("text", {"tokens": targets, "generated": True})
    for row in run([str(text)], vocab, sizes, 20, targets, 1 if args.quick else 2, before_src=args.before_batcher_src):
        rec.add("rows", row)


def section_sleep(rec: Recorder, args) -> None:
    """Not a measurement: records one value and hangs, so that the tests can check that a section
    past its limit is killed and what it recorded survives."""
    rec.set("started", True)
    time.sleep(3600)


# ================================================================================ rendering
def _fmt(value, digits: int = 0) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _precision(row: dict) -> str:
    ran = row.get("ran_in", row["precision"])
    return row["precision"] if ran == row["precision"] else f"{row['precision']} (ran {ran})"


def _kernels(row: dict) -> str:
    k = row.get("kernels_per_step") or {}
    return _fmt(k.get("cuda_kernels", k.get("aten_kernel_ops")))


def embed_table(result: dict, title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """The embedding table of an ``embed`` section's ``result`` (none when it has no rows)."""
    if not result.get("rows"):
        return []
    rows = []
    for r in result["rows"]:
        st = r.get("stages_s", {})
        kernels = r.get("kernels_per_batch_of_64") or {}
        rows.append([r["size"], r["path"], _precision(r), _fmt(r.get("tokens_per_s")), _fmt(r.get("sentences")),
                     *(_fmt(st.get(k), 2) for k in ("host", "encoder", "lstm", "forward_rest", "to_host", "hdf5")),
                     _fmt(kernels.get("cuda_kernels", kernels.get("aten_kernel_ops"))), r.get("error", "")[:60]])
    return [(f"{title} (batch 64, generated sentences); stage seconds from a second, synchronised pass",
             ["size", "path", "precision", "tokens/s", "sentences", "host s", "encoder s", "LSTM s",
              "rest of forward s", "to host s", "HDF5 s", "kernels per batch of 64", "error"], rows)]


def tables(report: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table the report has."""
    sections = report.get("sections", {})
    out = [("Sections", ["section", "status", "seconds", "limit s", "note"],
            [[name, s.get("status", ""), _fmt(s.get("seconds"), 1), _fmt(s.get("limit_s")),
              (s.get("error") or s.get("why") or "")[:90].replace("\n", " ")] for name, s in sections.items()])]
    env = sections.get("environment", {}).get("result", {})
    if env:
        e = env.get("environment", {})
        peaks = env.get("matmul_peak_tflops", {})
        out.append(("Environment", ["what", "value"], [
            ["GPU", f"{e.get('gpu', 'none')} ({e.get('gpu_memory_gib', '')} GiB), driver {e.get('driver')}"],
            ["software", f"torch {e.get('torch')}, CUDA {e.get('torch_cuda')}, cuDNN {e.get('cudnn')}, "
                         f"triton {e.get('triton')}, Python {e.get('python')}"],
            ["CPU", f"{e.get('cpu')} ({e.get('cpu_cores')} cores; {' '.join(e.get('cpu_vector_flags', [])[:12])})"],
            ["matmul peak, TFLOP/s", ", ".join(f"{k} {v:,.3g}" for k, v in peaks.items())]]))
    ex = sections.get("exactness", {}).get("result", {})
    if ex:
        rows = [[r["fixture"], r["path"], r.get("dtype", "float32"), f"{r.get('max_abs_diff_values', float('nan')):.2e}",
                 f"{r.get('max_rel_diff_gradients', float('nan')):.2e}", r.get("error", "yes" if r.get(
                     "values_within_1e-5") and r.get("gradients_within_1e-4") else "NO")] for r in ex.get("training", [])]
        out.append(("Exactness of training paths against the CPU specification (one window, both directions)",
                    ["fixture", "path", "dtype", "max abs diff, values", "max rel diff, gradients", "within 1e-5 / 1e-4"],
                    rows))
        rows = [[r["fixture"], r["path"], _precision(r), f"{r['max_abs_diff']:.2e}",
                 {True: "yes", False: "NO", None: "(reduced precision)"}[r.get("within_1e-5")]]
                for r in ex.get("inference", [])]
        out.append(("Exactness of inference paths against the CPU specification",
                    ["fixture", "path", "precision", "max abs diff", "within 1e-5"], rows))
    tests = sections.get("cuda_tests", {}).get("result", {})
    if tests:
        out.append(("CUDA tests (tests/test_cuda.py)", ["counts", "failed tests"],
                    [[", ".join(f"{v} {k}" for k, v in tests.get("counts", {}).items()),
                      "; ".join(tests.get("summary", []))[:300] or "none"]]))
    for name, title in (("train_original", "Training, original size"), ("train_packaged", "Training, packaged size"),
                        ("train_packaged@before", "Training, packaged size, the --before-src checkout")):
        result = sections.get(name, {}).get("result", {})
        if result.get("rows"):
            model = result.get("model", {})
            title = (f"{title} (LSTM {model.get('lstm')}, {model.get('cnn_filters')} filters, vocabulary "
                     f"{model.get('vocab', 0):,}, {model.get('negatives', 0):,} negatives, random weights)")
            rows = [[_fmt(r["batch"]), r["path"],
                     r["precision"] + (f" (LSTM ran {r['lstm_ran_in']})" if r.get("lstm_ran_in", r["precision"])
                                       != r["precision"] else ""), _fmt(r.get("tokens_per_s_per_direction")),
                     _fmt(r.get("s_per_step"), 3), _fmt(r.get("peak_memory_gib"), 2),
                     f"{100 * r['mfu']:.1f}%" if "mfu" in r else "", _kernels(r), r.get("error", "")[:60]]
                    for r in result["rows"]]
            out.append((f"{title}; {model.get('train_gflop_per_token_per_direction', '?')} GFLOP per token per direction",
                        ["batch", "path", "precision", "tokens/s per direction", "s/step", "peak GiB", "MFU",
                         "kernels/step", "error"], rows))
            host = [[_fmt(h["batch"]), _fmt(h.get("next_batch_s"), 4), _fmt(h.get("distinct_words_s"), 4),
                     _fmt(h.get("build_one_direction_s"), 4), _fmt(h.get("pin_one_direction_s"), 4)]
                    for h in result.get("host_preparation", [])]
            host += [[_fmt(t["batch"]), f"trainer set-up ({t['options']})", _fmt(t.get("setup_s"), 1), "", ""]
                     for t in result.get("trainers", [])]
            if host:
                out.append((f"{title.split(' (')[0]}: the host's share (seconds per step, and each trainer's set-up)",
                            ["batch", "next batches s / what", "distinct words s / seconds",
                             "build one direction s", "pin one direction s"], host))
            profiled = next((r for r in result["rows"] if (r.get("kernels_per_step") or {}).get("profile")), None)
            if profiled:
                profile = profiled["kernels_per_step"]["profile"]
                ops = [["host", o["op"], _fmt(o["calls"]), _fmt(o["self_host_ms"], 2), _fmt(o["self_device_ms"], 2)]
                       for o in profile["host"][:8]]
                ops += [["device", o["op"], _fmt(o["calls"]), _fmt(o["self_host_ms"], 2), _fmt(o["self_device_ms"], 2)]
                        for o in profile["device"][:8]]
                out.append((f"{title.split(' (')[0]}: one profiled step ({profiled['path']}, {profiled['precision']}, "
                            f"batch {profiled['batch']}; host {profile['host_ms_total']} ms, device "
                            f"{profile['device_ms_total']} ms in all)",
                            ["by", "operator", "calls", "own host ms", "own device ms"], ops))
    for name, title in (("embed", "Embedding"), ("embed@before", "Embedding, the --before-src checkout")):
        out += embed_table(sections.get(name, {}).get("result", {}), title)
    proc = sections.get("embed_process", {}).get("result", {})
    if proc.get("whole_process"):
        rows = [[r["run"], _fmt(r["seconds"], 1), _fmt(r["tokens_per_s"]), _fmt(r.get("output_gib"), 2),
                 "" if r["exit_code"] == 0 else r.get("stderr", "")[-80:]] for r in proc["whole_process"]]
        out.append((f"Whole-process elmo embed, packaged model, {proc['input']['sentences']:,} sentences "
                    f"({proc['input']['tokens']:,} tokens)", ["run", "seconds", "tokens/s", "HDF5 GiB", "error"], rows))
        if proc.get("breakdown_s"):
            out.append(("Where the time of elmo embed goes (seconds, in-process)", ["part", "seconds"],
                        [[k, _fmt(v, 2)] for k, v in proc["breakdown_s"].items()]))
    batcher = sections.get("batcher", {}).get("result", {})
    if batcher.get("rows"):
        rows = [[_fmt(r["batch_size"]),
                 " / ".join(_fmt(v) for v in r.get("old_tokens_per_second", [])) or "(no --before-batcher-src)",
                 " / ".join(_fmt(v) for v in r["new_tokens_per_second"]),
                 f"{r['speedup']:.1f}x" if "speedup" in r else ""] for r in batcher["rows"]]
        out.append(("Host batch building, one thread (LMBatcher; whole passes over a generated text, reading included)",
                    ["batch", "old tokens/s (rounds)", "new tokens/s (rounds)", "new / old"], rows))
    tp = sections.get("train_process", {}).get("result", {}).get("result")
    if tp:
        out.append(("Whole-process elmo train (packaged size, generated text, real batcher)",
                    ["batch", "steps", "whole process s", "median tokens/s per direction", "loss first -> last"],
                    [[_fmt(tp["batch"]), _fmt(tp["steps"]), _fmt(tp["whole_process_s"], 1),
                      _fmt(tp["median_after_first_window"]), f"{tp['first_loss']:.2f} -> {tp['last_loss']:.2f}"]]))
    return out


def render_text(report: dict) -> str:
    blocks = []
    for title, header, rows in tables(report):
        widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)] if rows else [len(h) for h in header]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths))]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# docs/speed.md holds the rendered tables between these two lines (``--render JSON --into FILE``).
BEGIN_MARK, END_MARK = "<!-- gpu-suite tables: begin -->", "<!-- gpu-suite tables: end -->"


def render_into(path: Path, markdown: str) -> None:
    """Replace what lies between :data:`BEGIN_MARK` and :data:`END_MARK` in ``path`` by ``markdown``."""
    text = path.read_text(encoding="utf-8")
    if text.count(BEGIN_MARK) != 1 or text.count(END_MARK) != 1 or text.index(BEGIN_MARK) > text.index(END_MARK):
        raise SystemExit(f"{path}: needs one line {BEGIN_MARK} and, after it, one line {END_MARK}")
    before, rest = text.split(BEGIN_MARK)
    _, after = rest.split(END_MARK)
    write_text = before + BEGIN_MARK + "\n" + markdown.rstrip() + "\n" + END_MARK + after
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(write_text, encoding="utf-8")
    os.replace(tmp, path)


def render_markdown(report: dict) -> str:
    suite = report.get("suite", {})
    blocks = [f"Measured by `{suite.get('command', 'benchmarks/gpu_suite.py')}` on {suite.get('started', '?')} "
              f"({suite.get('elapsed_s', '?')} s in all)."]
    for title, header, rows in tables(report):
        lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# ==================================================================================== main
def child(args: argparse.Namespace) -> int:
    rec = Recorder(args.part)
    try:
        if args.section in ("train_original", "train_packaged"):
            section_train(rec, args, args.section)
        else:
            globals()[f"section_{args.section}"](rec, args)
    except Exception as error:
        rec.set("_error", f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}")
        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="small shapes: the same code in about a minute on a CPU")
    parser.add_argument("--out", default="gpu_suite.json", help="the JSON written after every section")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, help="only these sections (default: all)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="seconds for the whole suite")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every section's time limit")
    parser.add_argument("--before-src", metavar="DIR", help="src/ of an older commit (167ab73: before issue 37): "
                        f"run {', '.join(BEFORE_SECTIONS)} once more on it, after the others")
    parser.add_argument("--before-batcher-src", metavar="DIR", help="src/ of an older commit (dc5ac8f^: the "
                        "per-token batcher) for the batcher section's old column")
    parser.add_argument("--render", metavar="JSON", help="print the Markdown tables of a suite's JSON and exit")
    parser.add_argument("--into", metavar="MARKDOWN", help="with --render: put the tables between the markers of "
                                                          "this file (docs/speed.md) instead of printing them")
    parser.add_argument("--section", help=argparse.SUPPRESS)  # internal: run one section
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=float, default=3600.0, help=argparse.SUPPRESS)
    parser.add_argument("--embed-breakdown", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        report = read_json(Path(args.render))
        if report is None:
            parser.error(f"--render: {args.render} is not a readable JSON file")
        if args.into:
            render_into(Path(args.into), render_markdown(report))
            print(f"wrote the tables into {args.into}")
        else:
            print(render_markdown(report))
        return 0
    if args.embed_breakdown:
        print(json.dumps(embed_breakdown(args.embed_breakdown, args.device, args.work, args.quick)))
        return 0
    if args.section:
        return child(args)
    for option in ("before_src", "before_batcher_src"):
        folder = getattr(args, option)
        if folder and not (Path(folder) / "elmo" / "__init__.py").is_file():
            parser.error(f"--{option.replace('_', '-')}: {folder} is not a src/ folder with the elmo package")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device here (use --device cpu --quick to check the suite itself)")
    report = run_suite(args)
    bad = [n for n, s in report["sections"].items() if s["status"] not in ("ok",)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
