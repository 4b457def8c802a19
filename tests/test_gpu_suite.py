"""benchmarks/gpu_suite.py, the script a GPU lease runs once, runs here on the CPU with --quick:
every section ends ok with sane numbers, and its JSON renders as the docs' tables. (So that the
script does not rot between leases; the numbers themselves mean nothing on a CPU.)

Marked slow (a minute or more of CPU): not in the default run. It is run on purpose, by .ci/run
and by hand: python -m pytest -q -m slow tests/test_gpu_suite.py"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "gpu_suite.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("suite") / "suite.json"
    # Generous limits: this machine may be shared; on a quiet 2-core CPU the run takes about 2-3 minutes.
    done = subprocess.run([sys.executable, str(SUITE), "--device", "cpu", "--quick", "--out", str(out),
                           "--budget-s", "1500", "--timeout-scale", "3"], capture_output=True, text=True, cwd=ROOT)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done


def test_every_section_ran_ok(report):
    data, done = report
    statuses = {name: section["status"] for name, section in data["sections"].items()}
    assert statuses == dict.fromkeys(["environment", "exactness", "train_original", "allennlp", "cuda_tests",
                                      "train_packaged", "embed", "embed_process", "train_process", "host_step",
                                      "host_cpu"], "ok"), (
        statuses, {n: s.get("error") for n, s in data["sections"].items()}, done.stdout[-2000:])
    assert done.returncode == 0
    assert "Sections" in done.stdout and "Exactness" in done.stdout  # the plain-text tables at the end


def test_numbers_are_sane(report):
    sections = {name: s["result"] for name, s in report[0]["sections"].items()}
    env = sections["environment"]
    assert env["environment"]["torch"] and env["matmul_peak_tflops"]["float32"] > 0
    exact = sections["exactness"]
    assert {r["path"] for r in exact["training"]} >= {"plain", "fused", "fused+graphs"}
    assert all("error" not in r and r["values_within_1e-5"] and r["gradients_within_1e-4"] for r in exact["training"])
    graphs = next(r for r in exact["training"] if r["path"] == "fused+graphs")
    assert graphs["graph"].startswith("not captured")  # the window's code ran, eager, on the CPU
    assert all(r["within_1e-5"] in (True, None) for r in exact["inference"])
    assert {r["path"] for r in exact["inference"]} >= {"eager"}
    left_out = {(r["kind"], r["path"]): r["why"] for r in exact["not_measured"]}
    assert left_out[("inference", "graphs")] == "needs a CUDA device"
    assert left_out[("training", "fused+compile")].startswith("not run on a CPU")
    tests = sections["cuda_tests"]
    # No GPU here: every CUDA test skips, each recorded as it ended.
    assert tests["counts"].get("skipped", 0) > 10 and not tests["counts"].get("failed")
    assert tests["collected"] == sum(tests["counts"].values()) and tests["not_run"] == []
    assert len(tests["seconds_per_test"]) == tests["collected"]
    for name in ("train_original", "train_packaged"):
        result = sections[name]
        rows = result["rows"]
        planned = {row for t in result["plan"] for row in t["rows"]}
        ran = {f"{r['path']} {r['precision']}" for r in rows}
        left = {f"{r['path']} {r['precision']}" for r in result.get("not_measured", [])}
        assert ran | left == planned and "fused+compile bfloat16" in left  # every planned row accounted for
        assert {r["path"] for r in rows} >= {"plain", "fused", "fused+graphs"}
        assert {r["precision"] for r in rows} == {"float32", "bfloat16"}
        assert rows[0]["path"] == "fused" and rows[0]["precision"] == "bfloat16"  # the GPU default first
        for r in rows:
            assert "error" not in r, r
            assert r["tokens_per_s_per_direction"] > 0 and r["s_per_step"] > 0 and r["mfu"] > 0
            # (bfloat16's peak on a CPU without bfloat16 instructions is an emulated product's,
            # measured in a moment on a busy machine: a bfloat16 row may pass it; float32's may not)
            assert r["precision"] == "bfloat16" or r["mfu"] < 1
            assert r["peak"] == ("bfloat16" if r["precision"] == "bfloat16" else "float32")
            assert r["kernels_per_step"]["aten_kernel_ops"] > 100 and r["peak_memory_gib"] > 0
            assert r["gflop_per_token"] > 0 and r["estimate_s"] > 0
        assert "profile" in rows[0]["kernels_per_step"]  # the profiler's tables, built on the CPU too
        host = result["host_preparation"][0]
        assert host["encoder_gflop_per_step"] > 0 and 0 < host["cnn_shapes_fixed"] <= host["cnn_shapes_exact"]
    rows = sections["embed"]["rows"]
    assert {r["path"] for r in rows} == {"plain", "eager"}
    assert {r["path"] for r in sections["embed"]["not_measured"]} == {"graphs"}
    for r in rows:
        assert "error" not in r, r
        assert r["tokens_per_s"] > 0 and r["stages_s"]["hdf5"] >= 0
    fast = next(r for r in rows if r["path"] == "eager" and r["precision"] == "float32")
    assert fast["stages_s"]["step"] > 0 and fast["stages_s"]["host"] > 0
    process = sections["embed_process"]
    assert all(r["exit_code"] == 0 and r["seconds"] > 0 for r in process["whole_process"])
    assert process["breakdown_s"]["embed_without_output"] > 0 and process["breakdown_s"]["imports"] > 0
    trained = sections["train_process"]["result"]
    assert trained["whole_process_s"] > 0 and trained["tokens_per_s_per_direction_logged"]
    for r in sections["host_step"]["rows"]:
        assert r["steps"] > 0 and r["host_s_per_step"] > 0 and r["distinct_words_per_step"] > 0
        assert 0 < r["cnn_shapes_fixed"] <= r["cnn_shapes_exact"]
    cpu = sections["host_cpu"]
    assert cpu["exactness_tests"]["exit_code"] == 0 and "passed" in cpu["exactness_tests"]["summary"]
    assert {r["configuration"] for r in cpu["whole_process"]["rows"]} >= {"float32", "bfloat16"}
    assert report[0]["suite"]["before"].startswith("skipped: no --before-src")  # and the JSON says why
    allennlp = sections["allennlp"]
    if (ROOT / ".lease" / "allennlp-0.9.0").is_dir():  # benchmarks/gpu_lease_prepare.py ran (CI runs it)
        assert [r["exit_code"] for r in allennlp["whole_process"]] == [0, 0]
        assert allennlp["in_process"]["max_abs_diff_elmo_stateful_vs_allennlp"] <= 1e-4  # the same computation
        assert allennlp["figures"]["ratio"] > 0 and allennlp["figures"]["ratio_in_process"] > 0
    else:
        assert "gpu_lease_prepare.py" in allennlp["not_measured"][0]["why"]
    goals = report[0]["goals"]
    # On a CPU every GPU figure says why it is not measured; the float32 paths that ran here are values.
    for name in ("train_original_bf16_tokens_per_s_per_direction", "embed_cuda_tokens_per_s",
                 "embed_vs_allennlp_ratio", "embed_vs_allennlp_ratio_in_process"):
        assert goals[name]["not_measured"] == "a GPU figure: this run is on the CPU"
    assert goals["float32_max_diff:inference:eager"]["value"] <= 1e-5
    assert goals["float32_max_diff:training:fused"]["value"] <= 1e-5
    assert goals["float32_max_diff:inference:graphs"]["not_measured"] == "needs a CUDA device"


def test_before_src_is_a_command_of_its_own(tmp_path):
    """--before-src DIR runs the embed section alone in processes whose elmo is DIR's (here this
    checkout's own src/, standing in for an old commit's), recorded as embed@before."""
    out = tmp_path / "suite.json"
    src = ROOT / "src"
    done = subprocess.run([sys.executable, str(SUITE), "--device", "cpu", "--quick", "--out", str(out), "--sections",
                           "embed", "--before-src", str(src), "--budget-s", "600", "--timeout-scale", "3"],
                          capture_output=True, text=True, cwd=ROOT)
    data = json.loads(out.read_text())
    assert {n: s["status"] for n, s in data["sections"].items()} == {"embed@before": "ok"}, done.stdout
    assert data["suite"]["before"] == {"src": str(src), "sections": ["embed@before"]}
    before = data["sections"]["embed@before"]["result"]["rows"]
    assert {r["path"] for r in before} == {"plain", "eager"} and all("error" not in r for r in before)
    rendered = subprocess.run([sys.executable, str(SUITE), "--render", str(out)], capture_output=True, text=True,
                              cwd=ROOT)
    assert "**Embedding, the --before-src checkout" in rendered.stdout
    bad = subprocess.run([sys.executable, str(SUITE), "--device", "cpu", "--before-src", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "not a src/ folder with the elmo package" in bad.stderr


def test_json_renders_as_markdown_tables(report, tmp_path):
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(report[0]))
    done = subprocess.run([sys.executable, str(SUITE), "--render", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for title in ("Environment", "Exactness of training paths", "Training, packaged size", "Embedding",
                  "Whole-process elmo embed", "Whole-process elmo train", "The host's part of a training step",
                  "The lease's own CPU", "Exactness: not measured"):
        assert f"**{title}" in done.stdout
    assert "| section | status |" in done.stdout


def test_a_section_that_fails_or_hangs_is_recorded_and_the_suite_goes_on(tmp_path):
    """The driver's promises, checked cheaply: a section past its limit is killed and recorded as
    a timeout, a failing one as failed, and the JSON holds every section afterwards."""
    # The driver's functions run in a process of their own: the script is the thing under test,
    # and its folder never goes on this process's sys.path.
    code = f"""
import json, runpy
suite = runpy.run_path({str(SUITE)!r})
args = suite["argparse"].Namespace(device="cpu", quick=True, out={str(tmp_path / "suite.json")!r},
                                   sections=["environment"], budget_s=0.5, timeout_scale=1.0)
report = suite["run_suite"](args)
print(json.dumps({{"report": report,
                  "missing": suite["run_section"]("no_such_section", args, {str(tmp_path)!r}, limit=60),
                  "sleep": suite["run_section"]("sleep", args, {str(tmp_path)!r}, limit=15)}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["report"]["sections"]["environment"]["status"] == "skipped"  # the budget was spent
    assert json.loads((tmp_path / "suite.json").read_text())["sections"]["environment"]["status"] == "skipped"
    section = found["missing"]
    assert section["status"] == "failed" and "no_such_section" in section["error"] + section["output_tail"]
    section = found["sleep"]
    assert section["status"] == "timeout" and section["result"] == {"started": True}
