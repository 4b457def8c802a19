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
session of its own and is killed with its group (:func:`gpu.common.run_group`).

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

Only :class:`gpu.common.Device` differs between a GPU and a CPU. On a CPU (``--device cpu --quick``, run by
``tests/test_gpu_suite.py``) every section plans the same rows as on a GPU; a row that needs CUDA
(CUDA graphs at inference, compiled cells) is recorded under ``not_measured`` with that reason,
and the training window's CUDA graph runs its code with the window left eager.

The code before a change is measured from a checkout of the older commit, as a command of its own
(it does not fit in the same 8 minutes): ``--before-src DIR`` (an old commit's ``src/``, carried
beside this tree: ``git archive 167ab73 src | tar -x -C before``) runs :data:`BEFORE_SECTIONS`
in processes whose ``elmo`` is that one (recorded as ``embed@before`` and so on).

The driver is this file (the plan, the budget, the goal figures, the command line); each section
lives in a module of ``benchmarks/gpu/`` (the package ``gpu``: ``environment``, ``exactness``,
``train``, ``allennlp``, ``cuda_tests``, ``embed``, ``host_cpu``; what they share in
``gpu/common.py``, the tables in ``gpu/report.py``), each of which also runs alone:
``PYTHONPATH=src python benchmarks/gpu/embed.py --device cpu --quick --out embed.json``.

Model FLOPs (:func:`gpu.train.train_flops_per_token`, docs/gpu.md): per token of one direction, what a
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
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# The sections live in benchmarks/gpu/, imported as the package ``gpu`` with this folder on the
# path (run as a script it is; runpy, as tests/test_gpu_suite.py loads the driver, puts nothing there).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu import allennlp, cuda_tests, embed, environment, exactness, host_cpu, train  # noqa: E402
from gpu.common import RUN_MARKER, Recorder, kill_marked, read_json, run_group, run_recorded, write_json  # noqa: E402
from gpu.report import render_into, render_markdown, render_text  # noqa: E402

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
    return ["inference:eager", "inference:graphs"] + [f"training:{p}" for p in exactness.training_paths() if p != "plain"]


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
        rows = [r for r in res.get("rows", []) if r["precision"] == "bfloat16" and "error" not in r]
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


def section_sleep(rec: Recorder, args) -> None:
    """Not a measurement: records one value and hangs, so that the tests can check that a section
    past its limit is killed and what it recorded survives."""
    rec.set("started", True)
    time.sleep(3600)


# Every section by name, from the module that holds it (and the tests' hanging one).
RUNS = {**environment.RUNS, **exactness.RUNS, **train.RUNS, **allennlp.RUNS, **cuda_tests.RUNS, **embed.RUNS,
        **host_cpu.RUNS, "sleep": section_sleep}
assert set(SECTIONS) <= set(RUNS), "a section no module runs"


# ==================================================================================== main
def child(args: argparse.Namespace) -> int:
    """The child process of :func:`run_section`: section ``args.section`` (:data:`RUNS`),
    recorded into ``args.part``; an unknown name is recorded as the section's error."""
    rec = Recorder(args.part)
    return run_recorded(rec, lambda: RUNS[args.section](rec, args))


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
        print(json.dumps(embed.embed_breakdown(args.embed_breakdown, args.device, args.work, args.quick)))
        return 0
    if args.allennlp_in_process:
        print(json.dumps(allennlp.allennlp_in_process(args.allennlp_in_process, args.device, args.options, args.weights)))
        return 0
    if args.section:
        return child(args)
    if args.host_step:
        with tempfile.TemporaryDirectory(prefix="host-step-") as work:
            args.work = work
            rec = Recorder(args.out)
            rec.set("machine", __import__("common").machine())
            rec.set("command", " ".join(["python", "benchmarks/gpu_suite.py", *(argv if argv is not None else sys.argv[1:])]))
            train.section_host_step(rec, args, max_steps=args.steps)
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
