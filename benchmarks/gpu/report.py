"""The GPU suite's tables: (title, header, rows) of every table a report has, as plain text (printed
at the end of a run) or Markdown (``gpu_suite.py --render``, put into docs/gpu.md with ``--into``)."""

from __future__ import annotations

import os
from pathlib import Path


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
                 r["precision"], _fmt(r.get("tokens_per_s_per_direction")),
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
