"""What every section of the GPU suite shares: the paths, running a command in a process group
of its own (:func:`run_group`) and killing what a run left (:func:`kill_marked`), a section's
record (:class:`Recorder`) and its clock (:class:`Deadline`, :class:`OutOfTime`), the one place
a GPU differs from a CPU (:class:`Device`), generated text, the parity fixtures, matmul peaks and
kernel counts, and running one section alone (:func:`run_alone`).

A section module (``benchmarks/gpu/embed.py`` and the others) imports this one as ``gpu.common``,
with benchmarks/ on the path; there ``common`` is benchmarks/common.py (the FLOP counts).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent
SUITE = BENCHMARKS / "gpu_suite.py"  # the driver: its hidden options run a section's in-process parts
# Run from a checkout without installing: this tree's package first, for this process and its
# children; a section of --before-src runs on that package instead (set by the driver).
SRC = os.environ.get("ELMO_SUITE_SRC") or str(ROOT / "src")
sys.path[:0] = [SRC, str(BENCHMARKS)]
os.environ["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])

SECTION_RESERVE_S = 4  # of a section's limit, kept for writing its record and ending its process


# Every process of a run carries this variable (children inherit it), so that a test can tell
# whether one of them outlived the run.
RUN_MARKER = "ELMO_GPU_SUITE_RUN"


def kill_marked(value: str) -> int:
    """SIGKILL every other process whose environment holds ``RUN_MARKER=value`` (Linux's
    ``/proc``; elsewhere nothing): what a section started in sessions of its own (``run_group``'s
    children) outlives the kill of the section's own group at its limit. Returns how many."""
    needle, killed = f"{RUN_MARKER}={value}".encode(), 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return killed


class Finished:
    """What :func:`run_group` returns: ``returncode`` (None when killed at the timeout),
    ``stdout``, ``stderr`` (empty with ``merge_output``), ``timed_out`` and ``seconds``."""

    def __init__(self, returncode, stdout: str, stderr: str, timed_out: bool, seconds: float):
        self.returncode, self.stdout, self.stderr = returncode, stdout or "", stderr or ""
        self.timed_out, self.seconds = timed_out, seconds


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_group(command: list[str], timeout: float, *, env: dict | None = None, cwd=None,
              merge_output: bool = False) -> Finished:
    """Run ``command`` in a session of its own for at most ``timeout`` seconds, its output
    captured; then kill its whole process group: at the timeout (``subprocess.run`` kills only
    the direct child, and pytest's workers or ``elmo embed``'s own children ran on, on every
    core, through the timings after) and after a normal end too (whatever it left behind). The
    output goes to files, not pipes, so that a grandchild holding them open cannot keep this
    waiting past the child's end."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        process = subprocess.Popen(command, stdout=out, stderr=out if merge_output else err, text=True,
                                   cwd=ROOT if cwd is None else cwd, env=env, start_new_session=True)
        timed_out = False
        try:
            process.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also when interrupted (OutOfTime, ^C) before it ended
            kill_group(process.pid)
            process.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return Finished(None if timed_out else process.returncode, stdout, stderr, timed_out,
                    time.monotonic() - start)


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

    def fail(self, message: str) -> None:
        """The section goes on, and ends ``failed`` with ``message`` (the first one kept)."""
        if "_error" not in self.data:
            self.set("_error", message)

    def not_measured(self, row: dict, why: str) -> None:
        self.add("not_measured", {**row, "why": why})


class Deadline:
    """The wall-clock end of a section's limit, less :data:`SECTION_RESERVE_S`; rows ask it
    whether their estimated cost still fits."""

    def __init__(self, ends_at: float, reserve: float = SECTION_RESERVE_S):
        self.ends_at = ends_at - reserve

    def left(self) -> float:
        return self.ends_at - time.time()

    def fits(self, estimate_s: float) -> bool:
        return estimate_s <= self.left()

    def why_not(self, estimate_s: float) -> str:
        return f"no time: needs about {estimate_s:.0f} s, {max(self.left(), 0):.0f} s of the section's limit left"

    @contextlib.contextmanager
    def stop_at(self):
        """Within the block, :class:`OutOfTime` is raised when the deadline passes (SIGALRM; the
        main thread only): an estimate that was wrong (a compile slower than the H200's) costs
        the row, not the section's record."""
        def handler(signum, frame):
            raise OutOfTime(f"stopped at the section's limit ({self.ends_at - started:.0f} s after the row began)")

        started = time.time()
        previous = signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, max(0.01, self.left()))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class OutOfTime(BaseException):
    """A row ran into its section's deadline (:meth:`Deadline.stop_at`). Not an ``Exception``:
    raised by the alarm wherever the row happens to be, it must pass every ``except Exception``
    on its way out (torch.compile's, which would wrap it in its own error; a CUDA graph
    capture's, which would turn it into "graphs off" and run on to the kill)."""


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


# ================================================================= the device, in one place
class Device:
    """Everything the suite does differently on a GPU: synchronising, peak memory, profiling,
    CUDA graphs, and which rows need CUDA at all. Every other line of the suite runs the same on
    a CPU, which is how ``--device cpu --quick`` checks it between leases."""

    def __init__(self, name: str):
        import torch

        self.name = name
        self.cuda = torch.device(name).type == "cuda"

    def sync(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def reset_peak_memory(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak_memory_bytes(self) -> int:
        import torch
        from common import peak_rss_bytes

        return int(torch.cuda.max_memory_allocated()) if self.cuda else peak_rss_bytes()

    def release(self) -> None:
        import torch

        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def why_not(self, needs: str | None) -> str | None:
        """Why a row that ``needs`` ("cuda": CUDA graphs at inference; "compile": torch.compile's
        kernels) does not run here, or None when it does."""
        if needs is None or self.cuda:
            return None
        if needs == "compile":
            return "not run on a CPU: compiling the cells takes minutes here (the GPU run times it)"
        return "needs a CUDA device"

    def profiler_activities(self) -> list:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if self.cuda else [ProfilerActivity.CPU]

    def graphed(self, module, sample_args: tuple):
        """``module`` as CUDA graphs (``torch.cuda.make_graphed_callables``); on a CPU the module
        itself, so that the code around the capture runs (its numbers then are eager ones)."""
        import torch

        if not self.cuda:
            return module
        return torch.cuda.make_graphed_callables(module, sample_args)

    def matmul_modes(self) -> list[str]:
        return ["float32", "tf32", "bfloat16", "float16"] if self.cuda else ["float32", "bfloat16"]

    @contextlib.contextmanager
    def tf32(self, enabled: bool):
        """Float32 matmuls and cuDNN convolutions with or without TF32 within the block."""
        import torch

        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    def float32_matmul_mode(self) -> str:
        """What float32 matmuls run as now: "tf32" where TF32 is allowed on a GPU, else "float32"."""
        import torch

        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        return "tf32" if self.cuda and tf32 else "float32"


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


# ======================================================= matmul peaks and kernel counts
def matmul_peak(device: Device, mode: str, size: int, repeats: int) -> float:
    """Best FLOP/s of a square product in ``mode``: float32 (TF32 off), tf32, bfloat16, float16."""
    import torch

    dtype = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}[mode]
    with device.tf32(mode == "tf32"):
        a = torch.randn(size, size, device=device.name).to(dtype)
        b = torch.randn(size, size, device=device.name).to(dtype)
        best = float("inf")
        for _ in range(repeats + 2):  # the first two warm up
            device.sync()
            start = time.perf_counter()
            for _ in range(4):
                a @ b
            device.sync()
            best = min(best, (time.perf_counter() - start) / 4)
    return 2 * size ** 3 / best


def measured_peaks(device: Device, quick: bool) -> dict:
    """The suite's own matmul peaks per mode (:meth:`Device.matmul_modes`), measured once per
    process where a section needs them (cheap)."""
    size = 8192 if device.cuda and not quick else 512
    repeats = 5 if device.cuda and not quick else 2
    return {mode: matmul_peak(device, mode, size, repeats) for mode in device.matmul_modes()}


def peak_mode(device: Device, precision: str) -> str:
    """The matmul mode whose peak a row's MFU divides by: the precision that ran, and for float32
    whether TF32 was allowed."""
    if precision == "bfloat16":
        return "bfloat16"
    return device.float32_matmul_mode()


PROFILE_TOP = 12  # operators kept per table of a profiled call


def count_kernels(device: Device, run, profile_top: int = 0) -> dict:
    """Kernels of one call of ``run``: on a GPU the profiler's device events (kernels, copies and
    fills, from every thread), on a CPU the ATen operators that launch one
    (:class:`common.OpCounter`); with ``profile_top``, the operators that took the most host time
    and the most device time, from ``torch.profiler`` on either (where a step's time goes). A
    profiler failure is recorded, not replaced (a dispatch mode could make compiled code recompile)."""
    import torch

    counts = {}
    if device.cuda or profile_top:
        try:
            from torch.profiler import profile

            start = time.perf_counter()
            with profile(activities=device.profiler_activities()) as prof:
                run()
                device.sync()
            counts["profiled_call_s"] = round(time.perf_counter() - start, 4)
            if device.cuda:
                counts["cuda_kernels"] = sum(1 for e in prof.events()
                                             if e.device_type == torch.autograd.DeviceType.CUDA)
            if profile_top:
                counts["profile"] = profile_tables(prof, profile_top)
        except Exception as error:
            counts["profiler_error"] = f"{type(error).__name__}: {error}"
    if not device.cuda:
        from common import OpCounter

        with OpCounter() as counter:
            run()
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


# ============================================================================ the fixtures
def fixture_model(name: str):
    from elmo.model.weights import load_bilm_tf

    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    return load_bilm_tf(folder / "options.json", folder / "lm_weights.hdf5").eval()


def fixture_sentences(name: str) -> list[list[str]]:
    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    file = {"allennlp": "sentences.json", "bilm-tf": "lm_embeddings_sentences.json"}[name]
    groups = json.loads((folder / file).read_text(encoding="utf-8"))
    return [s.split() for group in groups for s in group]


# ===================================================================== a row's own process
def run_row_process(rec: Recorder, deadline: Deadline, key: dict, command: list[str], need_s: float,
                    what: str) -> Finished | None:
    """Run one row's ``command`` in a process group of its own (:func:`run_group`) until the
    section's deadline, if ``need_s`` seconds still fit it. Returns the finished process, or None
    after recording why there is none: ``key`` not measured (no time before it, or still running
    at the deadline), or the section failed (``what``, the exit code and the end of standard error)."""
    if not deadline.fits(need_s):
        rec.not_measured(key, deadline.why_not(need_s))
        return None
    done = run_group(command, max(1.0, deadline.left()))
    if done.timed_out:
        rec.not_measured(key, f"no time: still running after {done.seconds:.0f} s")
        return None
    if done.returncode != 0:
        rec.fail(f"{what}: exit code {done.returncode}: {done.stderr[-2000:]}")
        return None
    return done


# ==================================================================== running one section
def run_recorded(rec: Recorder, run) -> int:
    """Call ``run()`` (one section, recording into ``rec``); an error, or an alarm left armed past
    its row, is recorded as ``_error`` (the section then ends ``failed``), not a crash. Returns the
    exit status: 0, or 1 after an error."""
    try:
        run()
    except (Exception, OutOfTime) as error:
        rec.set("_error", f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}")
        traceback.print_exc()
        return 1
    return 0


def run_alone(runs: dict, argv: list[str] | None = None) -> int:
    """The command line of a section module run alone (``runs``: its sections by name, each a
    ``section(rec, args)``): ``python benchmarks/gpu/MODULE.py [--section NAME] --device cpu
    --quick --out X.json`` runs one section in this process, without the driver, under
    ``--limit-s``, its record (what the driver's part file holds) rewritten to ``--out`` after
    every row. Returns the exit status (1 when the section failed)."""
    parser = argparse.ArgumentParser(description=f"one section of the GPU suite ({', '.join(runs)}), alone")
    parser.add_argument("--section", choices=list(runs), default=next(iter(runs)), help="default: %(default)s")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="default: %(default)s")
    parser.add_argument("--quick", action="store_true", help="small shapes: the same code in seconds on a CPU")
    parser.add_argument("--out", required=True, help="the section's JSON, rewritten after every row")
    parser.add_argument("--limit-s", type=float, default=600.0,
                        help="the section's limit: rows that no longer fit are not measured (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.device == "cpu" and args.quick:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the driver sets it for a CPU check's children
    args.ends_at = time.time() + args.limit_s
    rec = Recorder(args.out)
    with tempfile.TemporaryDirectory(prefix=f"gpu-{args.section}-") as work:
        args.work = work
        status = run_recorded(rec, lambda: runs[args.section](rec, args))
    print(f"{args.section}: {'failed' if status or '_error' in rec.data else 'ok'}; wrote {args.out}")
    return 1 if status or "_error" in rec.data else 0
