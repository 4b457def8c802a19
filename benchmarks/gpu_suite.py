"""One prepared run of every GPU measurement, for a short GPU lease: JSON out, a table printed at
the end, every section in its own process under its own time limit, each planned to fit it.

    PYTHONPATH=src python3 benchmarks/gpu_suite.py --out "$OUT/gpu_suite.json"    # the lease's command (docs/gpu.md)
    PYTHONPATH=src python benchmarks/gpu_suite.py --device cpu --quick --out suite.json   # anywhere, ~2 min
    PYTHONPATH=src python benchmarks/gpu_suite.py --before-src before/src --out "$OUT/gpu_before.json"  # old rows
    python benchmarks/gpu_suite.py --render "$OUT/gpu_suite.json"   # the Markdown tables, printed
    python benchmarks/gpu_suite.py --render gpu_suite.json --into docs/gpu.md   # ... put into the docs
    PYTHONPATH=src python benchmarks/gpu_suite.py --host-step --device cpu --out host_step.json  # item 6 alone

Sections, in this order; each has a limit (:data:`TIMEOUTS`, which add up to less than the
budget), plans its rows by value (the defaults first) and leaves out, recorded under
``not_measured`` with the reason, each row whose estimated cost no longer fits what is left of
its limit. A section ends ``ok`` when its code ran to its end; ``failed`` on an error or a result
out of tolerance; ``timeout`` only if its plan was wrong. The suite exits 0 when every section
ended ``ok``, ``skipped`` or ``cut`` (the budget's end). The JSON at ``--out``, the only file
written in that folder, is rewritten after every section, with the goal figures (``goals``: a value, or
``not_measured`` and why); each section's own record, rewritten after every row, lives in a
work folder outside it, so a kill loses nothing measured. Every child process runs in a
session of its own and is killed with its group (:func:`run_group`).

* ``environment``: GPU, driver, torch/CUDA/cuDNN, CPU; measured fp32, TF32, bf16 and fp16 matmul peaks.
* ``exactness``: every fast path (training: each LSTM path's outputs and gradients, the CUDA
  graph of the training window on its top layer; inference: eager, CUDA graphs) against the CPU
  plain path on the parity fixtures.
* ``allennlp``: ``elmo embed`` against AllenNLP 0.9's ``ElmoEmbedder`` on the same device, the
  same weights (the original size) and sentences, whole process and in-process (its code from
  ``benchmarks/gpu_lease_prepare.py``).
* ``cuda_tests``: ``pytest tests/test_cuda.py`` in parallel workers (pytest-xdist, in the
  ``test`` extra), heavy tests first, each cut at its own limit, each test's outcome and seconds
  recorded as it ends (``pytest_progress.py``).
* ``train_original`` (then ``train_packaged``): training tokens/s per direction, s/step, peak
  memory, model FLOP utilisation and kernels per step (the real ``Trainer`` step on generated
  text with the real batcher), per LSTM path and precision, with each trainer's set-up time, the
  host's share of a step (batches, distinct words, CNN shapes) and a profile of the first row.
* ``embed``: embedding tokens/s per path (eager, CUDA graphs, plain) and precision, with a
  per-stage breakdown (character ids on the host, the runtime's step, copy to the host, HDF5).
* ``embed_process``: whole-process ``elmo embed`` of generated sentences, eager and with CUDA
  graphs, and an in-process breakdown (imports, loading, embedding without and with HDF5).
* ``train_process``: whole-process ``elmo train`` on a generated corpus with the real batcher.
* ``host_step``: the host's part of a training step at the original size, batches 512 and
  2,048, one thread: seconds per step for the two directions' batches and their distinct words,
  and how many distinct CNN input shapes the steps meet (each new one costs cuDNN a plan).
* ``host_cpu``: the lease's own CPU (on the H200's, an Intel Xeon with AMX): the tests marked
  ``exactness`` with CUDA hidden, and ``bf16_whole_process.py --generate`` (bfloat16 and int8
  against float32, whole process, two cores).

Only :class:`Device` differs between a GPU and a CPU. On a CPU (``--device cpu --quick``, run by
``tests/test_gpu_suite.py``) every section plans the same rows as on a GPU; a row that needs CUDA
(CUDA graphs at inference, compiled cells) is recorded under ``not_measured`` with that reason,
and the training window's CUDA graph runs its code with the window left eager.

The code before a change is measured from a checkout of the older commit, as a command of its own
(it does not fit in the same 8 minutes): ``--before-src DIR`` (an old commit's ``src/``, carried
beside this tree: ``git archive 167ab73 src | tar -x -C before``) runs :data:`BEFORE_SECTIONS`
in processes whose ``elmo`` is that one (recorded as ``embed@before`` and so on).

Model FLOPs (:func:`train_flops_per_token`, docs/gpu.md): per token of one direction, what a
training step really computes, forward times three: the character CNN over the step's distinct
words (both directions' batches) and over each length group's real span of character slots
(not the 50 slots of the model's input, not the padding of fixed shapes), the highway layers and
projection of those words, both directions' LSTM stacks, and both softmaxes (sampled: the target
and the shared negatives). MFU divides the achieved FLOP/s by the measured matmul peak of the
mode that ran: bfloat16 rows bfloat16's (float16's where the LSTM kernel ran float16), float32
rows TF32's where float32 matmuls may use TF32, else plain float32's.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import re
import shutil
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

from common import encoder_step_flops  # noqa: E402  (the FLOP counts live in common.py)

SECTIONS = ("environment", "exactness", "train_original", "allennlp", "cuda_tests", "train_packaged", "embed",
            "embed_process", "train_process", "host_step", "host_cpu")
# Seconds each section may take, child process start included. From the two H200 runs
# (results/benchmarks/gpu_suite-h200-*.json): environment 6-7 s, exactness 28-30 s (now with
# the float32 inference rows twice on a GPU: TF32 as PyTorch leaves it, and off), embed 51 s
# (fewer sentences now), cuda_tests 18 of 32 tests in 135 s one at a time; the training,
# embedding, AllenNLP and process sections plan their rows to fit whatever they are given. The
# goal figures' sections come first: the original size's training, then AllenNLP's code.
TIMEOUTS = {"environment": 15, "exactness": 40, "train_original": 75, "allennlp": 45, "cuda_tests": 100,
            "train_packaged": 35, "embed": 35, "embed_process": 30, "train_process": 20, "host_step": 10,
            "host_cpu": 60}
DEFAULT_BUDGET_S = 480  # the whole suite: 8 minutes of a 15-minute lease
DRIVER_SLACK_S = 15  # the driver's own time between sections, kept out of the limits' sum
assert sum(TIMEOUTS.values()) + DRIVER_SLACK_S <= DEFAULT_BUDGET_S, "the sections' limits exceed the budget"
# Sections run once more on the package of --before-src: a command of its own.
BEFORE_SECTIONS = ("embed", "train_packaged")
QUICK_TIMEOUT = 150  # per section on a CPU with --quick
MIN_SECTION_S = 10  # a section is skipped when less than this is left of the budget
SECTION_RESERVE_S = 4  # of a section's limit, kept for writing its record and ending its process
CUDA_TEST_WORKERS = 8  # pytest-xdist workers for tests/test_cuda.py on a GPU host
CUDA_TEST_TIMEOUT_S = 60  # one CUDA test's limit: cut there, it is recorded as not measured
# The CUDA tests that take longest (training runs, compiles, whole processes), dealt first so
# that the workers' last minutes go to the short ones: cut, a run loses short tests, not these.
HEAVY_CUDA_TESTS = ("test_trainer_with_cuda_graphs_and_compiled_cells", "test_training_on_cuda_runs_resumes",
                    "test_fused_window_on_cuda_matches_the_cpu_specification", "test_cli_train_with_gpus_zero",
                    "test_cli_embed_with_cuda_graphs", "test_elmoformanylangs_model_on_cuda")
# Where benchmarks/gpu_lease_prepare.py unpacks AllenNLP 0.9's code (carried to the lease).
ALLENNLP_SRC = ROOT / ".lease" / "allennlp-0.9.0"
ORIGINAL_VOCAB = 793_471  # the 1B Word Benchmark vocabulary the original model was trained with


# =============================================================================== the driver
def run_suite(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    os.environ.setdefault(RUN_MARKER, f"{os.getpid()}-{time.time():.0f}")  # inherited by every child
    out = Path(args.out).absolute()  # the sections run in the checkout's root: a relative path would land there
    report = {"suite": {"device": args.device, "quick": args.quick, "budget_s": args.budget_s,
                        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S %z")},
              "sections": {}}
    wanted = args.sections or list(SECTIONS)
    before_src = getattr(args, "before_src", None)
    if before_src:  # its own command: the old package's sections alone
        wanted = [f"{name}@before" for name in BEFORE_SECTIONS if name in wanted]
        report["suite"]["before"] = {"src": before_src, "sections": wanted}
    else:
        report["suite"]["before"] = ("skipped: no --before-src given (the old code's rows are a command of their own, "
                                     "see docs/gpu.md)")
    # Only the JSON goes to the output's folder: a lease brings back at most 8 files of $OUT,
    # and which ones is not ours to choose. Each section's own record (rewritten after every
    # row, so that a killed section keeps what it measured), the CUDA tests' progress, generated
    # text and HDF5 files all live in a work folder outside it.
    with tempfile.TemporaryDirectory(prefix="gpu-suite-") as work:
        parts = Path(work) / "parts"
        parts.mkdir()
        for name in wanted:
            left = args.budget_s - (time.monotonic() - started)
            limit = QUICK_TIMEOUT if args.quick else TIMEOUTS[name.split("@")[0]]
            limit = min(limit * args.timeout_scale, left)
            if limit < MIN_SECTION_S:
                report["sections"][name] = {"status": "skipped", "why": f"{left:.0f} s of the budget left"}
            else:
                print(f"[{time.monotonic() - started:6.1f} s] {name} (limit {limit:.0f} s)", flush=True)
                section = run_section(name, args, work, limit, parts)
                stragglers = kill_marked(os.environ[RUN_MARKER])
                if stragglers:
                    section["stragglers_killed"] = stragglers
                own = (QUICK_TIMEOUT if args.quick else TIMEOUTS[name.split("@")[0]]) * args.timeout_scale
                if section["status"] == "timeout" and limit < own - 0.5:
                    # The budget's end, not a wrong plan: what it measured is kept, the rest not measured.
                    section["status"] = "cut"
                    section["why"] = f"the suite's budget left it {limit:.0f} s of its {own:.0f} s"
                report["sections"][name] = section
                print(f"[{time.monotonic() - started:6.1f} s] {name}: {report['sections'][name]['status']}", flush=True)
            report["suite"]["elapsed_s"] = round(time.monotonic() - started, 1)
            try:
                report["goals"] = goal_figures(report, wanted)
            except Exception as error:  # the figures are read from the record: never lose the record for them
                report["goals"] = {"error": f"{type(error).__name__}: {error}"}
            write_json(out, report)
    print()
    print(render_text(report))
    print(f"\nwrote {out}")
    return report


# The mission's figures, each a key of the report's "goals": a value, or "not_measured" and why.
GOALS = {
    "train_original_bf16_tokens_per_s_per_direction":
        ">= 150,000 on one H200 (original size, bfloat16), the host's time per step under the device's",
    "embed_cuda_tokens_per_s": "elmo embed --device cuda, whole process, original size (AllenNLP's comparison)",
    "embed_vs_allennlp_ratio": ">= 20 (whole process, same GPU, weights and sentences)",
    "embed_vs_allennlp_ratio_in_process": ">= 20 (in-process, same GPU, weights and sentences)",
}
FLOAT32_TARGET = 1e-5  # every float32 path's largest difference from the CPU specification


def float32_goal_paths() -> list[str]:
    """The float32 paths whose largest difference from the CPU specification is a goal figure
    (``float32_max_diff:KIND:PATH``): inference's eager and CUDA graphs, every training path
    but the specification itself."""
    return ["inference:eager", "inference:graphs"] + [f"training:{p}" for p in training_paths() if p != "plain"]


def goal_figures(report: dict, wanted: list[str]) -> dict:
    """The report's goal figures (:data:`GOALS`, and ``float32_max_diff:KIND:PATH`` per path of
    :func:`float32_goal_paths`), each ``{"target", "value", ...}`` or ``{"target",
    "not_measured": why}``, from what the sections recorded. Nothing is estimated: a figure
    whose row did not run says why."""
    suite, sections = report["suite"], report["sections"]
    goals: dict[str, dict] = {}

    def result(name: str) -> tuple[dict | None, str | None]:
        section = sections.get(name)
        if section is None:
            return None, (f"the {name} section is not in this command's sections" if name not in wanted
                          else f"the {name} section has not run yet")
        if section["status"] == "skipped":
            return None, f"the {name} section was skipped: {section.get('why')}"
        return section.get("result") or {}, None

    def why_not(res: dict, name: str, match) -> str:
        reasons = [r["why"] for r in res.get("not_measured", []) if match(r)]
        status = sections[name]["status"]
        if reasons:
            return reasons[0]
        if status != "ok":
            return f"the {name} section ended {status}: {(sections[name].get('error') or sections[name].get('why') or '')[:300]}"
        return "no such row ran"

    gpu = suite.get("device") == "cuda" and not suite.get("quick")
    not_gpu = ("a GPU figure: this run is on the CPU" if suite.get("device") != "cuda" else
               "--quick ran small shapes, not the original size")
    # Training at the original size in bfloat16: the best row, with its step's host and device time.
    target = GOALS["train_original_bf16_tokens_per_s_per_direction"]
    res, why = result("train_original")
    if not gpu:
        goals["train_original_bf16_tokens_per_s_per_direction"] = {"target": target, "not_measured": not_gpu}
    elif res is None:
        goals["train_original_bf16_tokens_per_s_per_direction"] = {"target": target, "not_measured": why}
    else:
        rows = [r for r in res.get("rows", []) if r["precision"] == "bfloat16" and "error" not in r
                and r.get("path") != "cudnn"]
        if not rows:
            goals["train_original_bf16_tokens_per_s_per_direction"] = {
                "target": target, "not_measured": why_not(res, "train_original", lambda r: r.get("precision") == "bfloat16")}
        else:
            best = max(rows, key=lambda r: r["tokens_per_s_per_direction"])
            profile = (best.get("kernels_per_step") or {}).get("profile")
            host = next((h for h in res.get("host_preparation", []) if h["batch"] == best["batch"]), {})
            goals["train_original_bf16_tokens_per_s_per_direction"] = {
                "target": target, "value": best["tokens_per_s_per_direction"], "batch": best["batch"],
                "path": best["path"], "s_per_step": best["s_per_step"],
                "profiled_step_host_s": round(profile["host_ms_total"] / 1e3, 4) if profile else
                {"not_measured": "this row's step was not profiled"},
                "profiled_step_device_s": round(profile["device_ms_total"] / 1e3, 4) if profile else
                {"not_measured": "this row's step was not profiled"},
                "host_batches_and_distinct_words_s": round(host["next_batch_s"] + host["distinct_words_s"], 4)
                if host else {"not_measured": "no host_preparation row at this batch"},
                "batches_tried": sorted({r["batch"] for r in res.get("rows", [])})}
    # elmo embed on the GPU against AllenNLP's ElmoEmbedder on the same GPU.
    res, why = result("allennlp")
    for key, run in (("embed_cuda_tokens_per_s", "elmo"), ("embed_vs_allennlp_ratio", "ratio"),
                     ("embed_vs_allennlp_ratio_in_process", "ratio_in_process")):
        entry = {"target": GOALS[key]}
        if not gpu:
            entry["not_measured"] = not_gpu
        elif res is None:
            entry["not_measured"] = why
        else:
            figures = res.get("figures", {})
            if run in figures:
                entry.update(value=figures[run], **res.get("setting", {}))
            else:
                entry["not_measured"] = why_not(res, "allennlp", lambda r: True)
        goals[key] = entry
    # Every float32 path's largest difference from the CPU specification, TF32 as PyTorch leaves it.
    res, why = result("exactness")
    for path in float32_goal_paths():
        kind, name = path.split(":")
        entry = {"target": f"<= {FLOAT32_TARGET:g}"}
        if res is None:
            entry["not_measured"] = why
        else:
            rows = [r for r in res.get(kind, []) if r["path"] == name and r.get("tf32", "default") == "default"
                    and r.get("precision", r.get("dtype", "float32")) == "float32" and "error" not in r]
            if rows:
                key = "max_abs_diff" if kind == "inference" else "max_abs_diff_values"
                entry.update(value=max(r[key] for r in rows), device=suite.get("device"),
                             fixtures=sorted({r["fixture"] for r in rows}),
                             tf32=res.get("tf32_defaults"))
                if kind == "training":
                    entry["gradients_max_rel_diff"] = max(r["max_rel_diff_gradients"] for r in rows)
            else:
                errors = [r["error"] for r in res.get(kind, []) if r["path"] == name and "error" in r]
                entry["not_measured"] = (f"error: {errors[0]}" if errors else
                                         why_not(res, "exactness", lambda r: r.get("kind") == kind and r["path"] == name))
        goals[f"float32_max_diff:{path}"] = entry
    return goals


def run_section(name: str, args: argparse.Namespace, work: str, limit: float, parts: Path | None = None) -> dict:
    """Run one section in a child process (its own session, killed whole at the limit); what the
    child recorded (in ``parts``, default ``work``) survives any end. ``NAME@before`` runs section
    NAME on the package of ``args.before_src``. The child plans against the same clock: it is
    told the wall-clock time its limit ends (``--ends-at``)."""
    part = Path(parts or work) / f"{name}.json"
    with contextlib.suppress(FileNotFoundError):
        part.unlink()  # a record of an earlier run must not pass for this one's
    section, _, before = name.partition("@")
    command = [sys.executable, str(Path(__file__)), "--section", section, "--part", str(part), "--device", args.device,
               "--work", work, "--ends-at", f"{time.time() + limit:.3f}"] + (["--quick"] if args.quick else [])
    env = dict(os.environ)
    if before:
        src = os.path.abspath(args.before_src)
        env.update(ELMO_SUITE_SRC=src, PYTHONPATH=os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])]))
    if args.device == "cpu" and args.quick:
        # The CPU check runs the code, it measures nothing: one thread, since torch's threads
        # beside another busy process spin so long that a section took 100 s instead of 6.
        env.setdefault("OMP_NUM_THREADS", "1")
    start = time.monotonic()
    done = run_group(command, limit, env=env, merge_output=True)
    output = done.stdout
    status = "timeout" if done.timed_out else "ok" if done.returncode == 0 else "failed"
    result = read_json(part) or {}
    error = result.pop("_error", None)
    if status == "ok" and error:
        status = "failed"
    section = {"status": status, "seconds": round(time.monotonic() - start, 1), "limit_s": round(limit),
               "result": result}
    if status != "ok":
        section["error"] = error or f"exit code {done.returncode}"
        section["output_tail"] = (output or "")[-3000:]
    return section


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


# ======================================================================== FLOPs and peaks
def train_flops_per_token(config, n_samples: int, vocab_size: int, encoder_flops_per_token: float) -> float:
    """Model FLOPs of one training token of one direction, forward and backward (forward times 3):
    ``encoder_flops_per_token`` (:func:`encoder_step_flops` of a step over the tokens of one
    direction's batch: the encoder runs once for both directions), both directions' LSTM stacks
    and both softmaxes (sampled: each token's target row and the shared negatives; full: every
    row)."""
    from common import lstm_flops

    width = (n_samples + 1) if n_samples else vocab_size
    forward = encoder_flops_per_token + 2 * lstm_flops(config) + 2 * 2 * config.lstm.projection_dim * width
    return 3.0 * forward


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


def peak_mode(device: Device, precision: str, lstm_ran_in: str | None = None) -> str:
    """The matmul mode whose peak a row's MFU divides by: the precision that ran (a cuDNN row
    asked for bfloat16 may run its LSTM in float16), and for float32 whether TF32 was allowed."""
    if precision == "bfloat16":
        return "float16" if lstm_ran_in == "float16" else "bfloat16"
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


# ============================================================================= environment
def section_environment(rec: Recorder, args) -> None:
    import torch

    device = Device(args.device)
    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cpu": cpu_name(), "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "cpu_vector_flags": sorted(cpu_vector_flags()),
           "tf32_defaults": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
                             "float32_matmul_precision": torch.get_float32_matmul_precision()}}
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:  # not installed (CPU builds)
        env["triton"] = None
    if device.cuda:
        properties = torch.cuda.get_device_properties(0)
        env.update({"gpu": properties.name, "gpu_memory_gib": round(properties.total_memory / 2 ** 30, 1),
                    "gpu_count": torch.cuda.device_count(), "compute_capability": f"{properties.major}.{properties.minor}",
                    "driver": nvidia_smi("driver_version")})
    rec.set("environment", env)
    peaks = measured_peaks(device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def cpu_vector_flags() -> set[str]:
    from elmo.inference.precision import cpu_flags

    return {f for f in (cpu_flags() or set()) if re.match(r"(avx|amx|fma|sse4|f16c)", f)}


def nvidia_smi(field: str) -> str | None:
    try:
        done = run_group(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], 20)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except OSError:
        return None


# ============================================================================== exactness
def fixture_model(name: str):
    from elmo.model.weights import load_bilm_tf

    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    return load_bilm_tf(folder / "options.json", folder / "lm_weights.hdf5").eval()


def fixture_sentences(name: str) -> list[list[str]]:
    folder = ROOT / "tests" / "fixtures" / {"allennlp": "allennlp-elmo", "bilm-tf": "bilm-tf/model"}[name]
    file = {"allennlp": "sentences.json", "bilm-tf": "lm_embeddings_sentences.json"}[name]
    groups = json.loads((folder / file).read_text(encoding="utf-8"))
    return [s.split() for group in groups for s in group]


def training_paths() -> list[str]:
    """The LSTM paths of training in this checkout, default first: the model's fast paths
    (``elmo.model.network.LSTM_PATHS``, its default first), "fused+graphs" (the training window as
    CUDA graphs) and "fused+compile" (the cells through torch.compile) where the model has them,
    and "plain" (the specification) last. The cuDNN backend is another model (no clipping): see
    :func:`cudnn_config`. The same list on any device: :meth:`Device.why_not` says which run."""
    import inspect

    from elmo.model import network as bilm
    from elmo.training import lm

    default = getattr(bilm, "DEFAULT_LSTM_PATH", "fast")
    fast = [p for p in getattr(bilm, "LSTM_PATHS", ("plain", "fast")) if p not in ("plain", "cudnn")]
    paths = [default] + [p for p in fast if p != default]
    if "fused" in fast:
        if hasattr(lm.LanguageModel, "use_cuda_graphs"):
            paths.insert(paths.index("fused") + 1, "fused+graphs")
        if "compile_cells" in inspect.signature(bilm.BiLM).parameters:
            paths.append("fused+compile")
    return paths + ["plain"]


def path_needs(path: str) -> str | None:
    """What a training path needs beyond a CPU (:meth:`Device.why_not`): compiled cells need
    torch.compile's kernels; the window's CUDA graphs run eager on a CPU, so they need nothing."""
    return "compile" if "compile" in path else None


def cudnn_config(config):
    """``config`` as a cuDNN-backend model (no clipping), where this checkout has that backend."""
    import dataclasses

    from elmo.model import network as bilm

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
    """Every path against the CPU specification, as a user runs it: TF32 as PyTorch leaves it
    (float32 matmuls without, cuDNN's convolutions with TF32 on a GPU: elmo sets neither), so
    the default float32 path is the one checked. On a GPU each float32 inference row runs once
    more with TF32 off (``"tf32": "off"``): the difference between the two is TF32's share. Each
    row runs under the section's alarm (a cold compile slower than estimated is cut, recorded)."""
    import torch

    device, deadline = Device(args.device), Deadline(args.ends_at)
    rec.set("tf32_defaults", {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                              "cudnn": bool(torch.backends.cudnn.allow_tf32),
                              "float32_matmul_precision": torch.get_float32_matmul_precision()})
    fixtures = ("allennlp",) if args.quick else ("allennlp", "bilm-tf")
    slowest = 2.0  # seconds of the dearest row so far: the estimate of the next
    plans = [("inference", fixture, variant, "default") for fixture in fixtures for variant in inference_variants()]
    plans += [("training", fixture, path, "default") for fixture in fixtures for path in training_paths()]
    if device.cuda:  # TF32's share of the default's difference, measured after every default row
        plans += [("inference", fixture, variant, "off") for fixture in fixtures for variant in inference_variants()
                  if variant[1] == "float32"]
    for kind, fixture, what, tf32 in plans:
        key = {"fixture": fixture, "path": what if kind == "training" else what[0], "tf32": tf32}
        if kind == "inference":
            key["precision"] = what[1]
        why = device.why_not(path_needs(what) if kind == "training" else what[2])
        if why is None and not deadline.fits(slowest):
            why = deadline.why_not(slowest)
        if why is not None:
            rec.not_measured({"kind": kind, **key}, why)
            continue
        start = time.monotonic()
        try:
            with deadline.stop_at(), (device.tf32(False) if tf32 == "off" else contextlib.nullcontext()):
                row = (inference_exactness(fixture, device, *what[:2]) if kind == "inference"
                       else training_exactness(fixture, device, what))
        except OutOfTime as stopped:
            rec.not_measured({"kind": kind, **key}, f"no time: {stopped}")
            return  # the deadline has passed: nothing else fits
        row["tf32"] = tf32
        slowest = max(slowest, time.monotonic() - start)
        rec.add(kind, row)
        if tf32 == "default" and ("error" in row or row.get("values_within_1e-5") is False
                                  or row.get("gradients_within_1e-4") is False or row.get("within_1e-5") is False):
            rec.fail(f"exactness: {kind} {key} is off the specification: {row}")


def _max_diff(a, b) -> float:
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


_TRAINING_REFERENCE: dict = {}  # fixture -> (inputs, the CPU plain path's results): computed once


def training_exactness(fixture: str, device: Device, path: str) -> dict:
    """One training path's outputs, final states and every parameter gradient of one full window
    (both directions, dropout off, random carried state) on ``device``, against the CPU plain path."""
    import copy

    import torch

    if fixture not in _TRAINING_REFERENCE:
        torch.manual_seed(0)
        reference = fixture_model(fixture)
        config = reference.config
        batch, steps = 5, 20
        tokens = torch.randn(batch, steps, config.lstm.projection_dim)
        state = reference.zero_state(batch)
        state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
        weights = torch.randn(config.lstm.n_layers, batch, steps, config.lstm.projection_dim)
        inputs = (reference, tokens, state, weights)
        with training_path(reference, "plain"):
            expected = run_window(copy.deepcopy(reference), "cpu", tokens, state, weights)
        _TRAINING_REFERENCE[fixture] = inputs, expected
    (reference, tokens, state, weights), expected = _TRAINING_REFERENCE[fixture]
    if path == "fused+graphs":  # a LanguageModel's graph of the whole window: compared on its top layer
        return graphs_exactness(reference, fixture, tokens, state, weights[-1], device)
    model = copy.deepcopy(reference)
    try:
        with training_path(model, path):
            got = run_window(model, device.name, tokens, state, weights)
    except Exception as error:
        return {"fixture": fixture, "path": path, "device": device.name, "error": f"{type(error).__name__}: {error}"}
    values = max(_max_diff(a, b) for g, e in zip(got, expected) for a, b in zip(g[0] + g[1], e[0] + e[1]))
    grads = max(_max_diff(a, b) / max(1.0, float(b.abs().max())) for g, e in zip(got, expected)
                for a, b in zip(g[2], e[2]))
    return {"fixture": fixture, "path": path, "device": device.name, "dtype": "float32",
            "max_abs_diff_values": values, "max_rel_diff_gradients": grads,
            "values_within_1e-5": values <= 1e-5, "gradients_within_1e-4": grads <= 1e-4}


def run_window(model, on: str, tokens, state, weights) -> list:
    """Both directions' stacks over one window on ``on``: per direction (outputs, final states,
    gradients of a weighted sum of every layer and the final states)."""
    import torch

    from elmo.kernels.dispatch import run_stack

    model = model.to(on).train()
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool)
    results = []
    for direction in (0, 1):
        with torch.enable_grad():
            inputs = tokens.to(on).requires_grad_(True)
            carried = type(state)(state.c.to(on), state.h.to(on))
            outputs, finals = run_stack(model, direction, inputs, mask.to(on), carried)
            total = sum((o * w.to(on)).sum() for o, w in zip(outputs, weights)) + sum(h.sum() for _, h in finals)
            layers = model.forward_layers if direction == 0 else model.backward_layers
            grads = torch.autograd.grad(total, [inputs, *layers.parameters()])
        results.append(([o.detach() for o in outputs], [t.detach() for f in finals for t in f], list(grads)))
    return results


def graphs_exactness(reference, fixture: str, tokens, state, top_weight, device: Device) -> dict:
    """The training window as :meth:`LanguageModel.use_cuda_graphs` captures it (``LstmWindow``
    through ``torch.cuda.make_graphed_callables``, replayed; on a CPU the window itself, eager)
    against the CPU plain path: the top layer of both directions, the final states, and the
    gradients of ``(top * top_weight).sum()`` with respect to the inputs and every LSTM parameter
    (the window's outputs are the top layer and the detached states, so its gradients are of the
    top layer alone)."""
    import copy

    import torch

    from elmo.training.lm import LstmWindow

    row = {"fixture": fixture, "path": "fused+graphs", "device": device.name, "dtype": "float32",
           "graph": "captured and replayed" if device.cuda else "not captured (no CUDA): the window ran eager"}
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
        model = copy.deepcopy(reference).to(device.name).train()
        with training_path(model, "fused"), torch.enable_grad():
            window = LstmWindow(model)
            x = torch.stack([tokens, tokens]).to(device.name).requires_grad_(True)
            c0, h0 = state.c.to(device.name), state.h.to(device.name)
            graphed = device.graphed(window, (x.detach().clone().requires_grad_(True), c0, h0))
            for _ in range(2):  # replays, not the capture's own run
                top, c, h = graphed(x, c0, h0)
            weight = torch.stack([top_weight, top_weight]).to(device.name)
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


def inference_variants() -> list[tuple[str, str, str | None]]:
    """(path, precision, what it needs) of inference, default first."""
    return [("eager", "float32", None), ("eager", "bfloat16", None), ("graphs", "float32", "cuda"),
            ("graphs", "bfloat16", "cuda")]


def inference_exactness(fixture: str, device: Device, path: str, precision: str) -> dict:
    """One inference path on ``device`` against the CPU plain path, on the fixture's sentences
    (three calls, so that CUDA graphs are captured and replayed)."""
    import torch

    from elmo import batch_to_char_ids
    from elmo.inference.runtime import Runtime

    sentences = fixture_sentences(fixture)
    ids, mask = batch_to_char_ids(sentences)
    plain = fixture_model(fixture)
    plain.fast = False
    with torch.no_grad():
        expected = plain(ids, mask).layers
    row = {"fixture": fixture, "path": path, "precision": precision, "device": device.name}
    try:
        runtime = Runtime(fixture_model(fixture), device=device.name, precision=precision, state="reset",
                          cuda_graphs=path == "graphs")
        for _ in range(3):
            got = runtime(ids, mask).layers
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"
        return row
    diff = _max_diff(got, expected)
    row.update({"ran_in": runtime.precision, "max_abs_diff": diff,
                "within_1e-5": diff <= 1e-5 if runtime.precision == "float32" else None})
    if runtime.graphs is not None:
        row.update(graph_captures=runtime.graphs.captures, graph_replays=runtime.graphs.replays,
                   graphs_disabled=runtime.graphs.disabled)
    return row


# ============================================================================== CUDA tests
def section_cuda_tests(rec: Recorder, args) -> None:
    """``pytest tests/test_cuda.py`` in a subprocess: in parallel workers where pytest-xdist is
    installed (the ``test`` extra has it), each test's outcome and seconds recorded as it ends
    (:mod:`pytest_progress`), stopped short of the section's limit so that a cut run still says
    which tests passed, which were slow and which never ran."""
    import importlib.util

    device, deadline = Device(args.device), Deadline(args.ends_at)
    if importlib.util.find_spec("pytest") is None:
        rec.fail("pytest is not installed in this Python: the CUDA tests did not run (the exactness section "
                 "checks the same paths against the specification)")
        return
    import pytest_progress  # (a pytest plugin: it imports pytest)
    progress = Path(args.work) / "cuda_tests_progress.jsonl"
    with contextlib.suppress(FileNotFoundError):
        progress.unlink()
    command = [sys.executable, "-m", "pytest", "tests/test_cuda.py", "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider",
               "-p", "pytest_progress"]
    # The heavy tests first, each test cut at CUDA_TEST_TIMEOUT_S (pytest_progress: pytest-timeout
    # is not on the lease), and one compile thread per process: eight workers each starting an
    # inductor pool of a worker per core fought over the 16 cores.
    env = dict(os.environ, ELMO_PYTEST_PROGRESS=str(progress), ELMO_PYTEST_FIRST=",".join(HEAVY_CUDA_TESTS),
               ELMO_PYTEST_TEST_TIMEOUT=str(CUDA_TEST_TIMEOUT_S), TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    rec.set("per_test_timeout_s", CUDA_TEST_TIMEOUT_S)
    workers = min(CUDA_TEST_WORKERS, max(1, (os.cpu_count() or 1) // 2))
    if importlib.util.find_spec("xdist") is not None and device.cuda and workers > 1:
        # Independent tests, each far from filling the GPU: in parallel they fit the section's
        # limit, the host's cores shared out (workers with every core's threads each for their
        # CPU references were no faster than one worker).
        command += ["-n", str(workers)]
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    else:
        workers = 1
    rec.set("command", " ".join(command[1:]))
    rec.set("workers", workers)
    start = time.monotonic()
    done = run_group(command, max(5.0, deadline.left()), env=env, merge_output=True)
    output, stopped = done.stdout, done.timed_out
    found = pytest_progress.read(str(progress))
    counts: dict[str, int] = {}
    for outcome in found["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    rec.set("seconds", round(time.monotonic() - start, 1))
    rec.set("counts", counts)
    rec.set("collected", len(found["collected"]))
    rec.set("slowest", [f"{s:.1f} s {name}" for name, s in sorted(found["seconds"].items(), key=lambda x: -x[1])[:10]])
    rec.set("seconds_per_test", found["seconds"])
    rec.set("not_run", found["not_run"])
    rec.set("exit_code", done.returncode)
    failed = sorted(name for name, outcome in found["outcomes"].items() if outcome in ("failed", "error"))
    rec.set("summary", [f"{name} {found['outcomes'][name].upper()}" for name in failed])
    failures = re.split(r"\n(?=_{3,} .* _{3,}\n)", output)
    rec.set("failures", [f[:4000] for f in failures[1:]][:12])
    # A test cut at its own limit, or never started before the section's, is not measured: it
    # neither passed nor failed. A failure is one.
    for name, outcome in sorted(found["outcomes"].items()):
        if outcome == "timeout":
            rec.not_measured({"test": name}, f"no time: cut at the per-test limit of {CUDA_TEST_TIMEOUT_S} s")
    for name in found["not_run"]:
        rec.not_measured({"test": name}, "no time: not finished when the section's limit came")
    if failed:
        rec.fail(f"{len(failed)} CUDA tests failed: {failed[:10]}\n{output[-1500:]}")
    elif not stopped and done.returncode not in (0, 1, 5):  # 1: tests failed or were cut; 5: nothing collected
        rec.fail(f"pytest exit code {done.returncode}: {counts}\n{output[-1500:]}")
    elif not stopped and done.returncode == 1 and not any(o == "timeout" for o in found["outcomes"].values()):
        rec.fail(f"pytest exit code 1 with no failed test recorded: {counts}\n{output[-1500:]}")


# ================================================================================ training
# The planner's estimate of a training step until the section has measured one: seconds per
# step of the default row (fused, bfloat16) at one batch size on the H200
# (results/benchmarks/gpu_suite-h200-2.json), scaled by batch size for the others.
PRIOR_S_PER_STEP = {"train_original": (512, 0.46), "train_packaged": (2048, 0.38), "quick": (4, 0.05)}
# Seconds per step of each path against the default's there (fast 1.1-1.8x; plain never
# measured on a GPU, assumed slow).
PATH_COST = {"fast": 1.8, "plain": 6.0}
COMPILE_S = 20.0  # torch.compile's warm-up of the cells: 14-17 s on the H200
TRAINER_PRIOR_S = 12.0  # a trainer's set-up and the host's share: 4-9 s, then a few batches


def train_sizes(name: str, quick: bool) -> dict:
    """What a training section runs: the config, batch sizes, vocabulary size, negatives, and
    ``steps``: (warm-up, at least, at most, seconds at least) per row."""
    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.config import BiLMConfig, preset_config, published_config

    if quick:  # the same code on a CPU in seconds: the tiny preset at small batches
        return {"config": preset_config("tiny"), "batches": [4, 2], "vocab": 2000, "negatives": 256,
                "steps": (1, 2, 4, 0.0), "prior": PRIOR_S_PER_STEP["quick"]}
    if name == "train_original":
        # Batch 2,048 first, its bfloat16 rows alone (the goal's figure may need the larger batch;
        # the H200 has the memory: batch 512 peaked at 11 GiB), then batch 512's full plan.
        return {"config": published_config("original"), "batches": [512, 128], "vocab": ORIGINAL_VOCAB,
                "negatives": 8192, "steps": (2, 3, 10, 0.6), "prior": PRIOR_S_PER_STEP[name],
                "larger": [2048]}
    return {"config": BiLMConfig.from_json(packaged_model_dir() / "options.json"), "batches": [2048, 256],
            "vocab": len(packaged_words()) + 3, "negatives": 2048, "steps": (2, 3, 10, 0.6),
            "prior": PRIOR_S_PER_STEP[name]}


def training_plan(paths: list[str], batches: list[int], cudnn: bool, larger: list[int] = ()) -> list[dict]:
    """The trainers of a training section and their rows, ``[{"batch", "options", "rows": [(path,
    bf16), ...]}]``, most valuable first: at the largest batch, what a GPU user gets by default
    (``paths[0]`` in bfloat16), the window as CUDA graphs, both again in float32, the other fast
    paths, compiled cells last (they compile first); the cuDNN model (another trainer); at the
    smallest batch the default and graphs in bfloat16 and the plain path (the specification,
    slow), which at one batch size only joins the first trainer. Each batch of ``larger`` comes
    before all of them, with the default and the window's graphs in bfloat16 alone."""
    default, large, small = paths[0], max(batches), min(batches)
    graphs = [p for p in paths if "graphs" in p]
    others = [p for p in paths if p not in (default, "plain", *graphs) and "compile" not in p]
    compiled = [p for p in paths if "compile" in p]
    first = [(default, True), *[(p, True) for p in graphs], (default, False), *[(p, False) for p in graphs],
             *[(p, True) for p in others], *[(p, False) for p in others], *[(p, True) for p in compiled]]
    plain = [("plain", True), ("plain", False)] if "plain" in paths else []
    plan = [{"batch": b, "options": "model", "rows": [(default, True), *[(p, True) for p in graphs]]}
            for b in larger]
    plan.append({"batch": large, "options": "model", "rows": first + (plain if small == large else [])})
    if cudnn:
        plan.append({"batch": large, "options": "cudnn", "rows": [("cudnn", True), ("cudnn", False)]})
    if small != large:
        plan.append({"batch": small, "options": "model",
                     "rows": [(default, True), *[(p, True) for p in graphs], *plain]})
    return plan


def estimate_row_s(s_per_step: float, path: str, steps: tuple) -> float:
    """Seconds a training row should take: warm-up and timed steps (:func:`time_training`), the
    profiled and counted steps after them, torch.compile's warm-up where the cells compile."""
    warmup, min_steps, max_steps, min_seconds = steps
    per_step = s_per_step * PATH_COST.get(path.split("+")[0], 1.0)
    timed = min(max_steps, max(min_steps, math.ceil(min_seconds / per_step)))
    return (warmup + timed + 3) * per_step + (COMPILE_S if "compile" in path else 0.0) + 1.0


def default_step_s(measured: list[dict], batch: int, prior: tuple[int, float]) -> float:
    """The planner's seconds per step of the default path at ``batch``: the slowest measured at
    that batch (each row's over its path's cost), else the prior scaled by batch size."""
    seen = [r["s_per_step"] / PATH_COST.get(r["path"].split("+")[0], 1.0) for r in measured
            if r.get("batch") == batch and "s_per_step" in r]
    if seen:
        return max(seen)
    prior_batch, prior_s = prior
    return prior_s * max(batch / prior_batch, 0.25)


def training_data(work: Path, quick: bool) -> tuple[Path, Path]:
    """A generated training text (shared by the training sections) and its folder."""
    folder = work / "train-data"
    corpus = folder / "corpus.txt"
    if not corpus.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_corpus(corpus, generate_sentences(2_000 if quick else 60_000, seed=1, words=packaged_words()))
    return folder, corpus


def section_train(rec: Recorder, args, name: str) -> None:
    """Training throughput of one size (:func:`training_plan`): per trainer (real batcher, the
    device's default prefetching) its set-up and the host's share of a step, then per row
    warm-up steps, timed steps, peak memory, kernels of one step and MFU; a row that would not
    fit what is left of the limit is recorded as not measured."""
    import torch

    from elmo.model.config import BiLMConfig
    from elmo.training.train import Trainer, TrainSettings

    device, deadline = Device(args.device), Deadline(args.ends_at)
    section_start = time.monotonic()
    work = Path(args.work)
    size = train_sizes(name, args.quick)
    config = size["config"]
    folder, corpus = training_data(work, args.quick)
    vocab = folder / f"vocab-{size['vocab']}.txt"
    if not vocab.exists():
        write_vocab(vocab, packaged_words(), size["vocab"])
    peaks = measured_peaks(device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})
    rec.set("math", {"float32_matmuls": device.float32_matmul_mode(),
                     "cudnn_convolutions_tf32": bool(torch.backends.cudnn.allow_tf32) if device.cuda else None})
    rec.set("model", {"lstm": f"{config.lstm.n_layers}x{config.lstm.dim}_{config.lstm.projection_dim}",
                      "cnn_filters": config.char_cnn.n_filters, "highway": config.char_cnn.n_highway,
                      "vocab": size["vocab"], "negatives": size["negatives"], "unroll_steps": 20})
    training = {"batch_size": max(size["batches"] + size.get("larger", [])), "unroll_steps": 20, "n_negative_samples_batch": size["negatives"],
                "dropout": 0.1, "all_clip_norm_val": 10.0, "optimizer": "adagrad", "learning_rate": 0.2}
    options = {"model": folder / f"{name}-options.json"}
    BiLMConfig(char_cnn=config.char_cnn, lstm=config.lstm, training=training).to_json(options["model"])
    cudnn = cudnn_config(config)
    if cudnn is not None:
        options["cudnn"] = folder / f"{name}-cudnn-options.json"
        BiLMConfig(char_cnn=cudnn.char_cnn, lstm=cudnn.lstm, training=training).to_json(options["cudnn"])
    paths = training_paths()
    plan = training_plan(paths, size["batches"], cudnn is not None, size.get("larger", []))
    rec.set("plan", [{**t, "rows": [f"{p} {'bfloat16' if bf16 else 'float32'}" for p, bf16 in t["rows"]]}
                     for t in plan])
    measured: list[dict] = []
    trainer_s = TRAINER_PRIOR_S if not args.quick else 3.0
    profiled = False
    for trainer_plan in plan:
        batch = trainer_plan["batch"]
        keys = [{"batch": batch, "path": p, "precision": "bfloat16" if bf16 else "float32"}
                for p, bf16 in trainer_plan["rows"]]
        first = estimate_row_s(default_step_s(measured, batch, size["prior"]), trainer_plan["rows"][0][0],
                               size["steps"])
        if not deadline.fits(trainer_s + first):
            for key in keys:
                rec.not_measured(key, deadline.why_not(trainer_s + first) + " (with the trainer's set-up)")
            continue
        with tempfile.TemporaryDirectory(dir=work) as output:
            built = time.monotonic()
            trainer = Trainer(TrainSettings(train=[str(corpus)], vocab=str(vocab), output=output,
                                            config=str(options[trainer_plan["options"]]), batch_size=batch,
                                            max_tokens=10 ** 12, progress=False, device=args.device,
                                            checkpoint_every=10 ** 9, log_every=10 ** 9))
            setup_s = time.monotonic() - built
            try:
                host = host_preparation(trainer, device)
                rec.add("trainers", {"batch": batch, "options": options[trainer_plan["options"]].name,
                                     "setup_s": round(setup_s, 1), "host_s": host.pop("seconds"),
                                     "at_s": round(time.monotonic() - section_start, 1)})
                rec.add("host_preparation", {"batch": batch, **host})
                trainer_s = max(trainer_s, setup_s + 2.0)
                flops = train_flops_per_token(config, size["negatives"], size["vocab"],
                                              host["encoder_gflop_per_step"] * 1e9 / trainer.tokens_per_step)
                for key, (path, bf16) in zip(keys, trainer_plan["rows"]):
                    why = device.why_not(path_needs(path))
                    estimate = estimate_row_s(default_step_s(measured, batch, size["prior"]), path, size["steps"])
                    if why is None and not deadline.fits(estimate):
                        why = deadline.why_not(estimate)
                    if why is not None:
                        rec.not_measured(key, why)
                        continue
                    row = {**key, "estimate_s": round(estimate, 1)}
                    start = time.monotonic()
                    try:
                        lstm_ran_in = autocast_lstm_dtype(trainer, bf16, args.device) if path == "cudnn" else None
                        if lstm_ran_in is not None:  # what autocast makes of torch's LSTM kernel
                            row["lstm_ran_in"] = lstm_ran_in
                        with deadline.stop_at():  # every bfloat16 row profiled: the goal's host and device time
                            row.update(time_training(trainer, path, bf16, *size["steps"], device, deadline,
                                                     profile=not profiled or bf16))
                        profiled = True
                        tokens = row["tokens_per_s_per_direction"]
                        mode = peak_mode(device, row["precision"], lstm_ran_in)
                        row.update(gflop_per_token=round(flops / 1e9, 4), peak=mode,
                                   achieved_tflops=round(flops * tokens / 1e12, 3),
                                   mfu=round(flops * tokens / peaks[mode], 4))
                    except OutOfTime as stopped:
                        rec.not_measured(key, f"no time: {stopped} (estimated {estimate:.0f} s)")
                        return  # the deadline has passed: nothing else fits
                    except Exception as error:
                        if not device.cuda and path == "cudnn" and "primitive descriptor" in str(error):
                            # torch's own LSTM kernel in bfloat16 needs a CPU with bfloat16
                            # instructions (oneDNN); this one has none: the row cannot run here.
                            rec.not_measured(key, f"not run on this CPU: {type(error).__name__}: {str(error)[:200]}")
                            continue
                        row["error"] = f"{type(error).__name__}: {error}"
                        row["traceback"] = traceback.format_exc()[-1500:]
                        rec.fail(f"{name}: {key}: {row['error']}")
                    row["seconds_in_all"] = round(time.monotonic() - start, 1)
                    row["at_s"] = round(time.monotonic() - section_start, 1)
                    rec.add("rows", row)
                    measured.append(row)
            finally:
                for batcher in trainer.batchers:
                    if hasattr(batcher, "close"):
                        batcher.close()
                del trainer
                device.release()


def autocast_lstm_dtype(trainer, bf16: bool, device: str) -> str:
    """The dtype of torch's LSTM kernel's output under the trainer's autocast: a cuDNN row asked
    for bfloat16 may run in another precision, and its row says which."""
    import torch

    # The trainer's autocast, as its settings define it (bfloat16, weight casts not cached under graphs).
    layer = torch.nn.LSTM(8, 8).to(device)
    with torch.no_grad(), torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16,
                                         cache_enabled=not trainer.settings.cuda_graphs):
        out, _ = layer(torch.randn(3, 2, 8, device=device))
    return str(out.dtype).replace("torch.", "")


def time_training(trainer, path: str, bf16: bool, warmup: int, min_steps: int, max_steps: int, min_seconds: float,
                  device: Device, deadline: Deadline, profile: bool = False) -> dict:
    """Warm-up steps, then timed steps (at least ``min_steps`` and ``min_seconds``, at most
    ``max_steps``, and none that would pass the deadline once one ran), peak memory over them,
    and the kernels of one more step (``profile``: with the operators that took the most host
    and device time)."""
    trainer.settings.bf16 = bf16
    # The carried LSTM state takes the precision of the last step: start each setting from zeros.
    trainer.state = trainer.model.bilm.zero_state(trainer.state.batch_size)
    # A step that leaves the losses on the device where the trainer has one (no host sync per step).
    step = getattr(trainer, "train_step_tensors", trainer.train_step)  # (an older checkout's Trainer: train_step alone)
    with training_path(trainer.model, path, trainer):
        start = time.perf_counter()
        for _ in range(warmup):
            step()
        device.sync()
        warmup_seconds = time.perf_counter() - start
        device.reset_peak_memory()
        steps, start = 0, time.perf_counter()
        while steps < max_steps and (steps < min_steps or time.perf_counter() - start < min_seconds):
            if steps and deadline.left() < 4 * (time.perf_counter() - start) / steps:
                break  # leave the time of a counted and a profiled step
            step()
            steps += 1
            if steps == 1:
                device.sync()  # a first step of its own, so that the deadline check above knows a step's cost
        device.sync()
        seconds = time.perf_counter() - start
        memory = device.peak_memory_bytes()
        tokens = trainer.tokens_per_step
        row = {"steps": steps, "seconds": round(seconds, 3), "s_per_step": round(seconds / steps, 4),
               "tokens_per_s_per_direction": round(steps * tokens / seconds, 1),
               "peak_memory_gib": round(memory / 2 ** 30, 3), "warmup_s": round(warmup_seconds, 2)}
        try:  # the row is timed already: a failing count must not lose it
            row["kernels_per_step"] = count_kernels(device, step, PROFILE_TOP if profile else 0)
        except Exception as error:
            row["kernels_per_step"] = {"error": f"{type(error).__name__}: {error}"}
    return row


def step_words(batches: list[dict], encoder):
    """The distinct words of one step's two batches, as the trainer finds them on the host."""
    import torch

    from elmo.kernels.encoder import distinct_words

    return distinct_words(torch.stack([b["char_ids"] for b in batches]), encoder.pad_id,
                          encoder.word_embedding is not None)


def cnn_shapes(words, config) -> tuple[set, set]:
    """The CNN input shapes ``(rows, span)`` of one step's length groups: as a GPU runs them
    (fixed shapes: the length bucket's span, rows on the ladder) and as a CPU does (exact)."""
    from elmo.kernels.encoder import group_shapes

    n_slots = config.char_cnn.max_characters_per_token
    widest = max(width for width, _ in config.char_cnn.filters)
    return tuple({(rows, span) for _, _, rows, span in group_shapes(words, n_slots, widest, fixed)}
                 for fixed in (True, False))


def host_preparation(trainer, device: Device, steps: int = 3) -> dict:
    """Seconds per step of what the trainer's step does on the host before the device works: the
    next batch of each direction (from the trainer's batchers, prefetching as in training) and
    the distinct words of both; the encoder's real FLOPs of those steps (:func:`encoder_step_flops`,
    for MFU) and the CNN shapes they meet. Then building one direction's batch in this thread on
    a batcher of its own over the same text, and pinning it (what the prefetching thread does
    on a GPU)."""
    import torch

    from elmo.training.data import LMBatcher, SentenceStream

    started = time.monotonic()
    encoder = trainer.model.bilm.token_encoder
    config = trainer.model.bilm.config
    for batcher in trainer.batchers:  # the first batch reads the text: not a step's cost
        batcher.next_batch()
    fetch = distinct = flops = 0.0
    fixed, exact = set(), set()
    for _ in range(steps):
        start = time.perf_counter()
        batches = [batcher.next_batch() for batcher in trainer.batchers]
        middle = time.perf_counter()
        words = step_words(batches, encoder)
        fetch, distinct = fetch + middle - start, distinct + time.perf_counter() - middle
        flops += encoder_step_flops(config, words)
        shapes = cnn_shapes(words, config)
        fixed |= shapes[0]
        exact |= shapes[1]
    result = {"next_batch_s": round(fetch / steps, 4), "distinct_words_s": round(distinct / steps, 4),
              "encoder_gflop_per_step": round(flops / steps / 1e9, 6),
              "cnn_shapes_fixed": len(fixed), "cnn_shapes_exact": len(exact), "steps": steps}
    own = LMBatcher(SentenceStream(trainer.paths, seed=12345), trainer.vocab, trainer.batch_size,
                    trainer.unroll_steps)
    own.next_batch()  # the first batch reads the shard
    build = pin = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        batch = own.next_batch()
        middle = time.perf_counter()
        if device.cuda:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        build, pin = build + middle - start, pin + time.perf_counter() - middle
    result.update({"build_one_direction_s": round(build / steps, 4), "pin_one_direction_s": round(pin / steps, 4),
                   "seconds": round(time.monotonic() - started, 1)})
    del torch
    return result


def section_train_process(rec: Recorder, args) -> None:
    """``elmo train`` as a user runs it, whole process: the packaged size on generated text,
    stopped (and recorded as not measured) if it would pass the section's limit."""
    from elmo.hub.pretrained import packaged_model_dir

    deadline = Deadline(args.ends_at)
    work = Path(args.work)
    folder, corpus = training_data(work, args.quick)
    vocab = folder / "vocab-packaged.txt"
    write_vocab(vocab, packaged_words(), len(packaged_words()) + 3)
    batch = 8 if args.quick else 256
    # 40 steps did not end inside 28 s on the H200 (start-up included): 20 now, logged every 5.
    steps = 4 if args.quick else 20
    config = "tiny" if args.quick else str(packaged_model_dir() / "options.json")
    with tempfile.TemporaryDirectory(dir=work) as output:
        command = [sys.executable, "-m", "elmo.cli.main", "train", "--train", str(corpus), "--vocab", str(vocab),
                   "--config", config, "--output", output + "/run", "--batch-size", str(batch), "--max-tokens",
                   str(steps * batch * 20), "--log-every", "5" if not args.quick else "2", "--no-progress",
                   "--device", args.device, "--checkpoint-every", str(10 ** 6)]
        rec.set("command", " ".join(["elmo", *command[3:]]).replace(str(work), "WORK"))
        start = time.monotonic()
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured({"batch": batch, "steps": steps}, f"no time: still running after "
                                                               f"{time.monotonic() - start:.0f} s")
            return
        seconds = time.monotonic() - start
        if done.returncode != 0:
            rec.fail(f"exit code {done.returncode}: {done.stderr[-2000:]}")
            return
        rows = (Path(output) / "run" / "metrics.csv").read_text(encoding="utf-8").splitlines()
        header = rows[0].split(",")
        metrics = [dict(zip(header, r.split(","))) for r in rows[1:]]
        rates = [float(m["tokens_per_second"]) for m in metrics]
        rec.set("result", {"batch": batch, "steps": steps, "whole_process_s": round(seconds, 2),
                           "tokens_per_s_per_direction_logged": [round(r, 1) for r in rates],
                           "median_after_first_window": round(statistics.median(rates[1:] or rates), 1),
                           "first_loss": float(metrics[0]["loss"]), "last_loss": float(metrics[-1]["loss"])})


# ====================================================================== the host of a step
HOST_STEP_BATCHES = (512, 2048)


def section_host_step(rec: Recorder, args, max_steps: int = 200) -> None:
    """The host's part of a training step at the original size, one thread, per batch size of
    :data:`HOST_STEP_BATCHES` (the tiny preset at 8 and 32 with ``--quick``): both directions'
    batches from their :class:`LMBatcher` and the distinct words of the two, timed per step, and
    the distinct CNN input shapes met so far (fixed shapes as a GPU runs them; each new one costs
    cuDNN a plan), for ``max_steps`` steps or the batch size's share of the limit."""
    import torch

    from elmo.model.config import preset_config, published_config
    from elmo.model.network import TokenEncoder
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import LMBatcher, SentenceStream

    torch.set_num_threads(1)
    deadline = Deadline(args.ends_at)
    config = preset_config("tiny") if args.quick else published_config("original")
    encoder = TokenEncoder(config.char_cnn, config.lstm.projection_dim)
    folder, corpus = training_data(Path(args.work), args.quick)
    vocab_file = folder / "vocab-packaged.txt"
    write_vocab(vocab_file, packaged_words(), len(packaged_words()) + 3)
    vocab = Vocabulary.from_file(vocab_file)
    batches = (8, 32) if args.quick else HOST_STEP_BATCHES
    rec.set("setting", {"config": "tiny" if args.quick else "original", "unroll_steps": 20, "threads": 1,
                        "text": "generated", "max_steps": max_steps})
    for index, batch in enumerate(batches):
        share = deadline.left() / (len(batches) - index)
        ends = time.time() + share
        batchers = [LMBatcher(SentenceStream([str(corpus)], seed=d, reverse=bool(d)), vocab, batch, 20) for d in (0, 1)]
        for batcher in batchers:
            batcher.next_batch()  # reading the text is not a step's cost
        build, words_s, distinct, flops = [], [], [], 0.0
        fixed, exact, growth = set(), set(), {}
        while len(build) < max_steps and (not build or time.time() + 2 * (build[-1] + words_s[-1]) < ends):
            start = time.perf_counter()
            step = [batcher.next_batch() for batcher in batchers]
            middle = time.perf_counter()
            words = step_words(step, encoder)
            build.append(middle - start)
            words_s.append(time.perf_counter() - middle)
            distinct.append(len(words.distinct))
            flops += encoder_step_flops(config, words)
            shapes = cnn_shapes(words, config)
            fixed |= shapes[0]
            exact |= shapes[1]
            if len(build) in (1, 10, 50, 100, 200) or len(build) == max_steps:
                growth[len(build)] = len(fixed)
        steps = len(build)
        rec.add("rows", {"batch": batch, "steps": steps, "tokens_per_direction_per_step": batch * 20,
                         "batches_s_per_step": round(statistics.mean(build), 4),
                         "distinct_words_s_per_step": round(statistics.mean(words_s), 4),
                         "host_s_per_step": round(statistics.mean(build) + statistics.mean(words_s), 4),
                         "distinct_words_per_step": round(statistics.mean(distinct)),
                         "encoder_gflop_per_step": round(flops / steps / 1e9, 3),
                         "cnn_shapes_fixed": len(fixed), "cnn_shapes_exact": len(exact),
                         "cnn_shapes_fixed_after_steps": growth})


# ================================================================================ embedding
EMBED_ROW_PRIOR_S = 8.0  # a row's seconds until one is measured: 3-6 s on the H200 (model, warm-up, passes)


def embed_sizes(quick: bool) -> list[dict]:
    from elmo.model.config import published_config

    if quick:
        return [{"size": "fixture", "model": "fixture", "sentences": 24, "plain_sentences": 6}]
    return [{"size": "packaged", "model": "packaged", "sentences": 1200, "plain_sentences": 200},
            {"size": "original", "model": published_config("original"), "sentences": 600, "plain_sentences": 100}]


def embed_variants() -> list[tuple[str, str, str | None]]:
    """(path, precision, what it needs) of the embed section, default first; the plain path
    (the specification, slow) last."""
    return [("eager", "float32", None), ("eager", "bfloat16", None), ("graphs", "float32", "cuda"),
            ("graphs", "bfloat16", "cuda"), ("plain", "float32", None)]


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
    device, deadline = Device(args.device), Deadline(args.ends_at)
    words = packaged_words()
    slowest = EMBED_ROW_PRIOR_S if not args.quick else 2.0
    for spec in embed_sizes(args.quick):
        model = None
        warm = generate_sentences(max(8, spec["sentences"] // 8), seed=3, words=words)
        sentences = generate_sentences(spec["sentences"], seed=2, words=words)
        for path, precision, needs in embed_variants():
            chosen = sentences[:spec["plain_sentences"]] if path == "plain" else sentences
            key = {"size": spec["size"], "path": path, "precision": precision, "sentences": len(chosen),
                   "tokens": sum(map(len, chosen))}
            why = device.why_not(needs)
            if why is None and not deadline.fits(slowest):
                why = deadline.why_not(slowest)
            if why is not None:
                rec.not_measured(key, why)
                continue
            row, start = dict(key), time.monotonic()
            try:
                with deadline.stop_at():
                    model = model or embed_model(spec["model"])
                    row.update(time_embedding(model, path, precision, chosen, warm, device))
            except OutOfTime as stopped:
                rec.not_measured(key, f"no time: {stopped}")
                return
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
                row["traceback"] = traceback.format_exc()[-1500:]
                rec.fail(f"embed: {key}: {row['error']}")
            row["seconds_in_all"] = round(time.monotonic() - start, 1)
            slowest = max(slowest, row["seconds_in_all"])
            rec.add("rows", row)
            device.release()


def time_embedding(model, path: str, precision: str, sentences, warm, device: Device) -> dict:
    """Tokens/s of ``Embedder.embed_sentences`` (batch 64) after a warm-up on other sentences, then
    one instrumented pass for the per-stage breakdown (stages synchronised, so slower). ``model``
    is not changed (the runtime copies it to the device; the plain path runs a copy)."""
    import copy

    from elmo import Embedder

    if path == "plain":
        model = copy.deepcopy(model)
        model.fast = False
    embedder = Embedder(model, device=device.name, precision=precision, batch_size=64,
                        **({"cuda_graphs": True} if path == "graphs" else {}))  # (older checkouts lack the option)
    embedder.embed_sentences(warm)
    if path == "graphs":
        # A graph is captured per row bucket on its second sighting: a second warm-up pass over
        # other sentences captures the timed pass's batches of 64 (a capture is not a step's
        # cost), and the timed pass still meets its own words as a first pass does.
        embedder.embed_sentences(warm)
    device.sync()
    device.reset_peak_memory()
    start = time.perf_counter()
    embedder.embed_sentences(sentences)
    device.sync()
    seconds = time.perf_counter() - start
    memory = device.peak_memory_bytes()
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
    return result


def embedding_stages(embedder, sentences, device: Device) -> dict:
    """Seconds per stage of embedding ``sentences`` with a fresh runtime of the same settings
    (a cold token memo, as a first pass meets it), each stage synchronised, through the
    runtime's public steps only: building the character ids on the host, the runtime's
    :meth:`~elmo.inference.runtime.Runtime.step` (initial state, token encoder, LSTM and the
    rest of the forward: the runtime exposes no finer stages), the copy to the host, and
    writing the arrays to HDF5 as ``elmo embed`` does."""
    import h5py
    import numpy as np
    import torch

    from elmo import Embedder
    from elmo.inference.embed import select_layers
    from elmo.model.chars import batch_to_char_ids

    old = embedder.runtime
    runtime = Embedder(old.model, device=device.name, precision=old.precision, batch_size=embedder.batch_size,
                       **({"cuda_graphs": True} if old.graphs is not None else {})).runtime
    stages = dict.fromkeys(["host", "step", "to_host", "hdf5"], 0.0)
    arrays = []
    with torch.inference_mode():
        for indices in embedder.batches(sentences, embedder.batch_size):
            rows = [sentences[i] for i in indices]
            start = time.perf_counter()
            ids, mask = batch_to_char_ids(rows)
            stages["host"] += time.perf_counter() - start
            device.sync()
            start = time.perf_counter()
            out = runtime.step(ids, mask, words=rows)
            device.sync()
            stages["step"] += time.perf_counter() - start
            start = time.perf_counter()
            layers = out.layers.float().cpu().numpy()
            arrays += [select_layers(layers[i, :, :len(r)], "all") for i, r in enumerate(rows)]
            stages["to_host"] += time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        with h5py.File(Path(folder) / "out.hdf5", "w") as f:
            for index, array in enumerate(arrays):
                f.create_dataset(str(index), data=array.astype(np.float32))
        stages["hdf5"] = time.perf_counter() - start
    return {k: round(v, 4) for k, v in stages.items()}


# ======================================================================= whole-process embed
EMBED_PROCESS_PRIOR_S = 15.0  # one whole-process run of 4,000 sentences on the H200, until one is measured


def section_embed_process(rec: Recorder, args) -> None:
    """Whole-process ``elmo embed`` of generated sentences with the packaged model (eager, then
    CUDA graphs), and one in-process breakdown of the eager run (about 1.5 runs), each only if
    its estimate fits what is left."""
    device, deadline = Device(args.device), Deadline(args.ends_at)
    work = Path(args.work)
    n = 100 if args.quick else 4_000
    text = work / f"embed-{n}.txt"
    sentences = generate_sentences(n, seed=4, words=packaged_words())
    write_corpus(text, sentences)
    tokens = sum(map(len, sentences))
    rec.set("input", {"sentences": n, "tokens": tokens})
    model = ["--options", str(ROOT / "tests/fixtures/allennlp-elmo/options.json"), "--weights",
             str(ROOT / "tests/fixtures/allennlp-elmo/lm_weights.hdf5")] if args.quick else []
    estimate = EMBED_PROCESS_PRIOR_S if not args.quick else 10.0
    for name, extra, needs in (("eager", [], None), ("graphs", ["--cuda-graphs"], "cuda")):
        out = work / f"embed-{name}.hdf5"
        command = [sys.executable, "-m", "elmo.cli.main", "embed", str(text), str(out), "--device", args.device,
                   "--batch-size", "64", "--force", *model, *extra]
        key = {"run": name, "command": " ".join(["elmo", *command[3:]]).replace(str(work), "WORK")}
        why = device.why_not(needs) or (None if deadline.fits(estimate) else deadline.why_not(estimate))
        if why is not None:
            rec.not_measured(key, why)
            continue
        start = time.monotonic()
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured(key, f"no time: still running after {time.monotonic() - start:.0f} s")
            continue
        seconds = time.monotonic() - start
        estimate = max(estimate if name != "eager" else 0.0, seconds)
        row = {**key, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
               "exit_code": done.returncode}
        if done.returncode != 0:
            row["stderr"] = done.stderr[-2000:]
            rec.fail(f"embed_process: {name}: exit code {done.returncode}")
        elif out.exists():
            row["output_gib"] = round(out.stat().st_size / 2 ** 30, 3)
            out.unlink()
        rec.add("whole_process", row)
    # In-process: where the time goes, in a fresh interpreter like the command's.
    command = [sys.executable, str(Path(__file__)), "--embed-breakdown", str(text), "--device", args.device,
               "--work", str(work)] + (["--quick"] if args.quick else [])
    if not deadline.fits(1.5 * estimate):
        rec.not_measured({"run": "breakdown"}, deadline.why_not(1.5 * estimate))
        return
    done = run_group(command, max(1.0, deadline.left()))
    if done.timed_out:
        rec.not_measured({"run": "breakdown"}, "no time: still running at the section's limit")
        return
    if done.returncode != 0:
        rec.fail(f"breakdown: exit code {done.returncode}: {done.stderr[-2000:]}")
        return
    rec.set("breakdown_s", json.loads(done.stdout.strip().splitlines()[-1]))


def embed_breakdown(text: str, device: str, work: str, quick: bool) -> dict:
    """Seconds of each part of what ``elmo embed TEXT OUT.hdf5`` does, in this fresh process."""
    start = time.perf_counter()
    import torch  # noqa: F401

    from elmo import Embedder
    from elmo.hub import load_model
    from elmo.inference.embed import as_sentences
    dev = Device(device)
    times = {"imports": time.perf_counter() - start}
    start = time.perf_counter()
    model = fixture_model("allennlp") if quick else load_model()
    times["load_model"] = time.perf_counter() - start
    start = time.perf_counter()
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    dev.sync()
    times["runtime_and_warm_state"] = time.perf_counter() - start
    lines = Path(text).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines[:1000]))  # what the process's first batches pay once
    dev.sync()
    times["first_1000_sentences_warm_up"] = time.perf_counter() - start
    # Fresh runtimes (cold token memos) for the two timed runs, so that they differ by the output only.
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines))
    dev.sync()
    times["embed_without_output"] = time.perf_counter() - start
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    dev.sync()
    start = time.perf_counter()
    embedder.embed_file(text, Path(work) / "breakdown.hdf5", overwrite=True)
    times["embed_file_with_hdf5"] = time.perf_counter() - start
    times["hdf5_share"] = times["embed_file_with_hdf5"] - times["embed_without_output"]
    with contextlib.suppress(OSError):
        os.remove(Path(work) / "breakdown.hdf5")
    return {k: round(v, 3) for k, v in times.items()}


# ================================================================ against AllenNLP's code
ALLENNLP_SENTENCES = 1_000  # on the GPU, original size: ~24,000 tokens (AllenNLP's whole process was never timed there)
ALLENNLP_PRIOR_S = 20.0  # a whole-process run's seconds until one is measured (start-up, 374 MB of weights)


def allennlp_source() -> Path:
    """AllenNLP 0.9's unpacked code: ``ELMO_ALLENNLP_SRC``, else :data:`ALLENNLP_SRC`."""
    return Path(os.environ.get("ELMO_ALLENNLP_SRC") or ALLENNLP_SRC)


def section_allennlp(rec: Recorder, args) -> None:
    """``elmo embed --device cuda`` against AllenNLP 0.9's own ``ElmoEmbedder`` with
    ``cuda_device=0``, on the same GPU, the same weights (random, generated at the original size
    and written in the original layout, which both read) and the same generated sentences:
    whole process (``elmo embed`` and ``benchmarks/allennlp_embed.py``, every layer to HDF5,
    batches of 64), then in-process (each tool's embedder built and warmed up, then timed on the
    sentences, arrays back on the host), and the largest difference between the two tools'
    arrays. The ratios are goal figures. With ``--quick`` (or on a CPU) the same code runs on the
    test fixture's small model on the CPU: the code, not the figures. Without AllenNLP's code
    (``benchmarks/gpu_lease_prepare.py`` puts it in the tree) every row is not measured."""
    import numpy as np

    device, deadline = Device(args.device), Deadline(args.ends_at)
    source = allennlp_source()
    if not (source / "allennlp" / "modules" / "elmo.py").is_file():
        rec.not_measured({"what": "AllenNLP's ElmoEmbedder"},
                         f"AllenNLP 0.9's code is not in the tree ({source.name} missing): run python3 "
                         "benchmarks/gpu_lease_prepare.py before the lease and carry .lease/allennlp-0.9.0")
        return
    work = Path(args.work)
    small = args.quick or not device.cuda
    if small:
        folder = ROOT / "tests" / "fixtures" / "allennlp-elmo"
        options, weights = folder / "options.json", folder / "lm_weights.hdf5"
    else:
        import torch

        from elmo import BiLM
        from elmo.model.config import published_config
        from elmo.model.weights import save_bilm_tf

        options, weights = work / "allennlp-original" / "options.json", work / "allennlp-original" / "weights.hdf5"
        if not weights.exists():
            torch.manual_seed(0)
            save_bilm_tf(BiLM(published_config("original")).eval(), options.parent)
    n = 40 if small else ALLENNLP_SENTENCES
    sentences = generate_sentences(n, seed=5, words=packaged_words())
    text = work / f"allennlp-{n}.txt"
    write_corpus(text, sentences)
    tokens = sum(map(len, sentences))
    rec.set("setting", {"size": "fixture (small)" if small else "original", "sentences": n, "tokens": tokens,
                        "batch_size": 64, "device": args.device, "allennlp": "0.9.0"})
    cuda = ["--cuda-device", "0"] if device.cuda else ["--cuda-device", "-1"]
    runs = {"elmo": [sys.executable, "-m", "elmo.cli.main", "embed", str(text), str(work / "elmo.hdf5"), "--device",
                     args.device, "--batch-size", "64", "--force", "--options", str(options), "--weights", str(weights)],
            "allennlp": [sys.executable, str(HERE / "allennlp_embed.py"), "--allennlp-src", str(source), str(options),
                         str(weights), str(text), str(work / "allennlp.hdf5"), "--batch-size", "64", *cuda]}
    seconds: dict[str, float] = {}
    estimate = 10.0 if small else ALLENNLP_PRIOR_S
    for name, command in runs.items():
        key = {"run": f"{name}, whole process", "command": " ".join(command[1:]).replace(str(work), "WORK")}
        if not deadline.fits(estimate):
            rec.not_measured(key, deadline.why_not(estimate))
            continue
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured(key, f"no time: still running after {done.seconds:.0f} s")
            continue
        if done.returncode != 0:
            rec.add("whole_process", {**key, "exit_code": done.returncode, "stderr": done.stderr[-2000:]})
            rec.fail(f"allennlp: {name}: exit code {done.returncode}: {done.stderr[-500:]}")
            continue
        seconds[name] = done.seconds
        estimate = max(estimate, done.seconds)
        rec.add("whole_process", {**key, "exit_code": 0, "seconds": round(done.seconds, 2),
                                  "tokens_per_s": round(tokens / done.seconds, 1)})
    figures = {}
    if "elmo" in seconds:
        figures["elmo"] = round(tokens / seconds["elmo"], 1)
    if len(seconds) == 2:
        figures["ratio"] = round(seconds["allennlp"] / seconds["elmo"], 2)
    rec.set("figures", figures)
    # In-process, in a fresh interpreter (AllenNLP's imports stay out of this one).
    command = [sys.executable, str(Path(__file__)), "--allennlp-in-process", str(text), "--device", args.device,
               "--work", str(work), "--options", str(options), "--weights", str(weights)]
    if not deadline.fits(2 * estimate):
        rec.not_measured({"run": "in-process"}, deadline.why_not(2 * estimate))
        return
    done = run_group(command, max(1.0, deadline.left()))
    if done.timed_out:
        rec.not_measured({"run": "in-process"}, f"no time: still running after {done.seconds:.0f} s")
        return
    if done.returncode != 0:
        rec.fail(f"allennlp in-process: exit code {done.returncode}: {done.stderr[-2000:]}")
        return
    found = json.loads(done.stdout.strip().splitlines()[-1])
    rec.set("in_process", found)
    # On the CPU both run float32 exactly: they must agree. On a GPU both run cuDNN's convolutions
    # in TF32 (PyTorch's default), differently grouped: the difference is recorded, not judged.
    if small and found["max_abs_diff_elmo_stateful_vs_allennlp"] > 1e-4:
        rec.fail(f"allennlp: the two tools' arrays differ by {found['max_abs_diff_elmo_stateful_vs_allennlp']:.3g}: "
                 "not the same computation")
    figures["ratio_in_process"] = round(found["allennlp_s"] / found["elmo_s"], 2)
    rec.set("figures", figures)
    del np


def allennlp_in_process(text: str, device: str, options: str, weights: str) -> dict:
    """Seconds of each tool's embedder over the sentences of ``text`` in this process, each built
    and warmed up first (on the first 64 sentences), arrays back on the host, elmo in its default
    state mode (what ``elmo embed`` runs); and, as the comparison's check, the largest difference
    between fresh embedders of the two on the first 128 sentences, elmo's ``state="stateful"``
    (AllenNLP's: the state carried from batch to batch of consecutive sentences)."""
    import numpy as np
    import torch

    from allennlp_embed import import_allennlp
    from elmo import Embedder
    from elmo.model.weights import load_bilm_tf

    dev = Device(device)
    lines = Path(text).read_text(encoding="utf-8").splitlines()
    sentences = [line.split() for line in lines if line.strip()]
    embedder = Embedder(load_bilm_tf(options, weights).eval(), device=device, batch_size=64)
    embedder.embed_sentences(sentences[:64], layers="all")
    dev.sync()
    start = time.perf_counter()
    ours = embedder.embed_sentences(sentences, layers="all")
    dev.sync()
    elmo_s = time.perf_counter() - start
    ElmoEmbedder = import_allennlp(str(allennlp_source()))
    theirs_embedder = ElmoEmbedder(options_file=options, weight_file=weights, cuda_device=0 if dev.cuda else -1)
    list(theirs_embedder.embed_sentences(sentences[:64], batch_size=64))
    dev.sync()
    start = time.perf_counter()
    theirs = list(theirs_embedder.embed_sentences(sentences, batch_size=64))
    dev.sync()
    allennlp_s = time.perf_counter() - start
    del ours, theirs
    check = sentences[:128]
    ours = Embedder(load_bilm_tf(options, weights).eval(), device=device, batch_size=64,
                    state="stateful").embed_sentences(check, layers="all")
    theirs = list(ElmoEmbedder(options_file=options, weight_file=weights,
                               cuda_device=0 if dev.cuda else -1).embed_sentences(check, batch_size=64))
    diff = max(float(np.abs(np.asarray(a, dtype=np.float32) - np.asarray(b, dtype=np.float32)).max())
               for a, b in zip(ours, theirs))
    del torch
    return {"elmo_s": round(elmo_s, 3), "allennlp_s": round(allennlp_s, 3), "sentences": len(sentences),
            "tokens": sum(map(len, sentences)), "max_abs_diff_elmo_stateful_vs_allennlp": diff}


# ================================================================== the lease's own CPU
# The lease's own CPU: what it may take. Never run on a lease yet; sized from this development
# machine's runs (results/benchmarks/bf16_whole_process.json: 1,000 sentences at the original
# size took 25 s in float32 on two cores, 12 s in bfloat16), so 200 sentences, no int8.
HOST_CPU_TESTS_S = 35.0  # the exactness tests' share of the section; unfinished ones are not measured
HOST_CPU_WHOLE_PROCESS_S = 25.0  # the least left for the whole-process comparison to be started


def host_cpu_exactness_command(quick: bool, cores: int, xdist: bool) -> tuple[list[str], dict]:
    """The pytest command of the tests marked ``exactness`` and not ``slow`` (as CI's AVX2 pass
    runs them: ``-m`` replaces the ``-m 'not slow'`` of ``addopts``, so a bare ``-m exactness``
    would run the slow tests too), with the progress plugin, and the environment it adds."""
    command = [sys.executable, "-m", "pytest", "-q", "-m", "exactness and not slow", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-p", "pytest_progress"]
    env = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    if quick:
        command.append("tests/test_states.py")
    elif xdist and cores >= 8:
        command += ["-n", "4"]
        env["OMP_NUM_THREADS"] = str(max(1, cores // 4))
    return command, env


def section_host_cpu(rec: Recorder, args) -> None:
    """The lease machine's CPU, for what no other machine has shown (the H200's host is an Intel
    Xeon with AMX): the tests marked ``exactness`` (and not ``slow``) with CUDA hidden (batch
    independence by construction on an Intel CPU, where it once failed), each test's outcome
    recorded as it ends and the unfinished ones left as not measured; then
    ``bf16_whole_process.py --generate`` on two cores (bfloat16 against float32, whole process).
    ``--quick`` runs one exactness test file and the tiny size on a few sentences: the code, not
    the numbers."""
    import importlib.util

    import pytest_progress

    deadline = Deadline(args.ends_at)
    cores = os.cpu_count() or 1
    command, extra_env = host_cpu_exactness_command(args.quick, cores, importlib.util.find_spec("xdist") is not None)
    progress = Path(args.work) / "host_cpu_progress.jsonl"
    with contextlib.suppress(FileNotFoundError):
        progress.unlink()
    env = dict(os.environ, **extra_env, ELMO_PYTEST_PROGRESS=str(progress))
    rec.set("exactness_command", " ".join(command[1:]))
    limit = deadline.left() if args.quick else min(deadline.left() - HOST_CPU_WHOLE_PROCESS_S, HOST_CPU_TESTS_S)
    done = run_group(command, max(1.0, limit), env=env)
    found = pytest_progress.read(str(progress))
    counts: dict[str, int] = {}
    for outcome in found["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    rec.set("exactness_tests", {"exit_code": done.returncode, "summary": tail[0] if not done.timed_out else
                                f"{counts} before the cut", "counts": counts, "collected": len(found["collected"]),
                                "seconds": round(done.seconds, 1)})
    bad = sorted(name for name, outcome in found["outcomes"].items() if outcome in ("failed", "error"))
    if bad or (not done.timed_out and done.returncode != 0):
        rec.fail(f"exactness tests with CUDA hidden: exit code {done.returncode}: {bad[:10]} {done.stdout[-2000:]}")
    if done.timed_out:
        for name in found["not_run"] or ["(collection)"]:
            rec.not_measured({"what": "exactness test", "test": name},
                             f"no time: the tests' share ({limit:.0f} s) ended first")
    output = Path(args.work) / "bf16_whole_process.json"
    # --quick: the tiny preset on a few sentences, float32 against bfloat16 only (30-60 s here).
    extra = ["--sizes", "tiny", "--sentences", "8"] if args.quick else ["--sizes", "original", "--sentences", "200"]
    command = [sys.executable, "benchmarks/bf16_whole_process.py", "--generate", *extra, "--rounds", "1",
               "--threads", "2", "--output", str(output)]
    if shutil.which("taskset") and cores > 2:
        command = ["taskset", "-c", "0,1", *command]
    rec.set("whole_process_command", " ".join(command).replace(sys.executable, "python").replace(str(output), "OUT"))
    need = 10.0 if args.quick else HOST_CPU_WHOLE_PROCESS_S
    if not deadline.fits(need):
        rec.not_measured({"what": "bf16_whole_process"}, deadline.why_not(need))
        return
    done = run_group(command, max(1.0, deadline.left()))
    if done.timed_out:
        rec.not_measured({"what": "bf16_whole_process"}, f"no time: still running after {done.seconds:.0f} s")
        return
    if done.returncode != 0:
        rec.fail(f"bf16_whole_process: exit code {done.returncode}: {done.stderr[-2000:]}")
        return
    rec.set("whole_process", read_json(output))
    rec.set("whole_process_seconds", round(done.seconds, 1))


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


def not_measured_table(result: dict, title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    rows = result.get("not_measured") or []
    if not rows:
        return []
    return [(f"{title}: not measured", ["row", "why"],
             [[", ".join(f"{v}" for k, v in r.items() if k not in ("why", "command")), r["why"]] for r in rows])]


def embed_table(result: dict, title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """The embedding table of an ``embed`` section's ``result`` (none when it has no rows)."""
    if not result.get("rows"):
        return not_measured_table(result, title)
    rows = []
    for r in result["rows"]:
        st = r.get("stages_s", {})
        kernels = r.get("kernels_per_batch_of_64") or {}
        rows.append([r["size"], r["path"], _precision(r), _fmt(r.get("tokens_per_s")), _fmt(r.get("sentences")),
                     *(_fmt(st.get(k), 2) for k in ("host", "step", "to_host", "hdf5")),
                     _fmt(kernels.get("cuda_kernels", kernels.get("aten_kernel_ops"))), r.get("error", "")[:60]])
    return [(f"{title} (batch 64, generated sentences); stage seconds from a second, synchronised pass",
             ["size", "path", "precision", "tokens/s", "sentences", "host s", "runtime step s", "to host s", "HDF5 s",
              "kernels per batch of 64", "error"], rows)] + \
        not_measured_table(result, title)


def training_tables(result: dict, title: str) -> list[tuple[str, list[str], list[list[str]]]]:
    out = []
    model = result.get("model", {})
    title = (f"{title} (LSTM {model.get('lstm')}, {model.get('cnn_filters')} filters, vocabulary "
             f"{model.get('vocab', 0):,}, {model.get('negatives', 0):,} negatives, random weights)")
    if result.get("rows"):
        rows = [[_fmt(r["batch"]), r["path"],
                 r["precision"] + (f" (LSTM ran {r['lstm_ran_in']})" if r.get("lstm_ran_in", r["precision"])
                                   != r["precision"] else ""), _fmt(r.get("tokens_per_s_per_direction")),
                 _fmt(r.get("s_per_step"), 3), _fmt(r.get("peak_memory_gib"), 2), _fmt(r.get("gflop_per_token"), 3),
                 # (a row of a run before the documented count has no "peak": its MFU is not shown)
                 f"{100 * r['mfu']:.1f}% of {r['peak']}" if "peak" in r else "", _kernels(r), r.get("error", "")[:60]]
                for r in result["rows"]]
        out.append((title, ["batch", "path", "precision", "tokens/s per direction", "s/step", "peak GiB",
                            "GFLOP per token", "MFU", "kernels/step", "error"], rows))
    host = [[_fmt(h["batch"]), _fmt(h.get("next_batch_s"), 4), _fmt(h.get("distinct_words_s"), 4),
             _fmt(h.get("build_one_direction_s"), 4), _fmt(h.get("pin_one_direction_s"), 4),
             _fmt(h.get("encoder_gflop_per_step"), 2), _fmt(h.get("cnn_shapes_fixed"))]
            for h in result.get("host_preparation", [])]
    if host:
        setups = "; ".join(f"batch {t['batch']} ({t['options']}) {t['setup_s']} s" for t in result.get("trainers", []))
        out.append((f"{title.split(' (')[0]}: the host's share of a step (seconds; trainers' set-up: {setups})",
                    ["batch", "next batches s", "distinct words s", "build one direction s", "pin one direction s",
                     "encoder GFLOP per step", "CNN shapes"], host))
    profiled = next((r for r in result.get("rows", []) if (r.get("kernels_per_step") or {}).get("profile")), None)
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
    return out + not_measured_table(result, title.split(" (")[0])


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
        rows = [[r["fixture"], r["path"], _precision(r), f"{r.get('max_abs_diff', float('nan')):.2e}",
                 r.get("error") or {True: "yes", False: "NO", None: "(reduced precision)"}[r.get("within_1e-5")]]
                for r in ex.get("inference", [])]
        out.append(("Exactness of inference paths against the CPU specification",
                    ["fixture", "path", "precision", "max abs diff", "within 1e-5"], rows))
        out += not_measured_table(ex, "Exactness")
    tests = sections.get("cuda_tests", {}).get("result", {})
    if tests:
        out.append(("CUDA tests (tests/test_cuda.py)", ["counts", "workers", "failed tests", "not run", "slowest"],
                    [[", ".join(f"{v} {k}" for k, v in tests.get("counts", {}).items()), _fmt(tests.get("workers")),
                      "; ".join(tests.get("summary", []))[:300] or "none", _fmt(len(tests.get("not_run", []))),
                      "; ".join(tests.get("slowest", [])[:3])]]))
    for name, title in (("train_original", "Training, original size"), ("train_packaged", "Training, packaged size"),
                        ("train_packaged@before", "Training, packaged size, the --before-src checkout")):
        result = sections.get(name, {}).get("result", {})
        if result.get("rows") or result.get("not_measured"):
            out += training_tables(result, title)
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
    out += not_measured_table(proc, "Whole-process elmo embed")
    tp = sections.get("train_process", {}).get("result", {}).get("result")
    if tp:
        out.append(("Whole-process elmo train (packaged size, generated text, real batcher)",
                    ["batch", "steps", "whole process s", "median tokens/s per direction", "loss first -> last"],
                    [[_fmt(tp["batch"]), _fmt(tp["steps"]), _fmt(tp["whole_process_s"], 1),
                      _fmt(tp["median_after_first_window"]), f"{tp['first_loss']:.2f} -> {tp['last_loss']:.2f}"]]))
    host = sections.get("host_step", {}).get("result", {})
    if host.get("rows"):
        out.append(host_step_table(host))
    cpu = sections.get("host_cpu", {}).get("result", {})
    if cpu:
        tests = cpu.get("exactness_tests", {})
        rows = [["tests marked exactness, CUDA hidden", tests.get("summary", ""), _fmt(tests.get("seconds"), 1)]]
        for r in (cpu.get("whole_process") or {}).get("rows", []):
            rows.append([f"whole-process elmo embed, {r['size']} size, {r['configuration']}, {r['sentences']} sentences",
                         f"{r['speedup_over_float32']:.2f}x float32", _fmt(r["median_seconds"], 2)])
        out.append(("The lease's own CPU", ["what", "result", "seconds"], rows))
        out += not_measured_table(cpu, "The lease's own CPU")
    return out


def host_step_table(result: dict) -> tuple[str, list[str], list[list[str]]]:
    setting = result.get("setting", {})
    rows = [[_fmt(r["batch"]), _fmt(r["steps"]), _fmt(r["batches_s_per_step"], 4), _fmt(r["distinct_words_s_per_step"], 4),
             _fmt(r["host_s_per_step"], 4), _fmt(r["distinct_words_per_step"]), _fmt(r["encoder_gflop_per_step"], 2),
             _fmt(r["cnn_shapes_fixed"]), _fmt(r["cnn_shapes_exact"])] for r in result["rows"]]
    return (f"The host's part of a training step ({setting.get('config')} size, {setting.get('threads')} thread, "
            f"{setting.get('text')} text)",
            ["batch", "steps", "both batches s/step", "distinct words s/step", "host s/step", "distinct words",
             "encoder GFLOP/step", "CNN shapes (fixed, as on a GPU)", "CNN shapes (exact)"], rows)


def render_text(report: dict) -> str:
    blocks = []
    for title, header, rows in tables(report):
        widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)] if rows else [len(h) for h in header]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths))]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# docs/gpu.md holds the rendered tables between these two lines (``--render JSON --into FILE``).
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
    except (Exception, OutOfTime) as error:  # (an alarm left armed past its row: recorded, not a crash)
        rec.set("_error", f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}")
        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The lease's command is rehearsed on a CPU as written (tests/test_gpu_lease.py): these three
    # variables stand in for --device cpu, --quick and a shorter --budget-s.
    env = os.environ
    parser.add_argument("--device", default=env.get("ELMO_GPU_SUITE_DEVICE") or "cuda", choices=["cuda", "cpu"],
                        help="default: $ELMO_GPU_SUITE_DEVICE, else cuda")
    parser.add_argument("--quick", action="store_true", default=env.get("ELMO_GPU_SUITE_QUICK") == "1",
                        help="small shapes: the same code in a few minutes on a CPU (or ELMO_GPU_SUITE_QUICK=1)")
    parser.add_argument("--out", default="gpu_suite.json", help="the JSON written after every section")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, help="only these sections (default: all)")
    parser.add_argument("--budget-s", type=float, default=float(env.get("ELMO_GPU_SUITE_BUDGET_S") or DEFAULT_BUDGET_S),
                        help="seconds for the whole suite (default: $ELMO_GPU_SUITE_BUDGET_S, else %(default)s)")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every section's time limit")
    parser.add_argument("--before-src", metavar="DIR", help="src/ of an older commit (167ab73: before issue 37): "
                        f"run {', '.join(BEFORE_SECTIONS)} on it alone (a command of its own)")
    parser.add_argument("--host-step", action="store_true", help="only the host_step measurement, in this process, "
                        "for --steps steps per batch size, written to --out")
    parser.add_argument("--steps", type=int, default=200, help="with --host-step: steps per batch size")
    parser.add_argument("--render", metavar="JSON", help="print the Markdown tables of a suite's JSON and exit")
    parser.add_argument("--into", metavar="MARKDOWN", help="with --render: put the tables between the markers of "
                                                          "this file (docs/gpu.md) instead of printing them")
    parser.add_argument("--section", help=argparse.SUPPRESS)  # internal: run one section
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--ends-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--embed-breakdown", help=argparse.SUPPRESS)
    parser.add_argument("--allennlp-in-process", help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ends_at is None:
        args.ends_at = time.time() + 3600.0
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
    if args.allennlp_in_process:
        print(json.dumps(allennlp_in_process(args.allennlp_in_process, args.device, args.options, args.weights)))
        return 0
    if args.section:
        return child(args)
    if args.host_step:
        with tempfile.TemporaryDirectory(prefix="host-step-") as work:
            args.work = work
            rec = Recorder(args.out)
            rec.set("machine", __import__("common").machine())
            rec.set("command", " ".join(["python", "benchmarks/gpu_suite.py", *(argv if argv is not None else sys.argv[1:])]))
            section_host_step(rec, args, max_steps=args.steps)
            print(render_text({"sections": {"host_step": {"result": rec.data}}}).split("\n\n")[-1])
        return 0
    if args.before_src and not (Path(args.before_src) / "elmo" / "__init__.py").is_file():
        parser.error(f"--before-src: {args.before_src} is not a src/ folder with the elmo package")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device here (use --device cpu --quick to check the suite itself)")
    report = run_suite(args)
    # A section the budget skipped or cut ran inside the rules (its rows say "not measured");
    # one that failed, or passed its own limit (a wrong plan), did not.
    bad = [n for n, s in report["sections"].items() if s["status"] not in ("ok", "skipped", "cut")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
