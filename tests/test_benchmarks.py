"""The maintained benchmarks of benchmarks/ (listed in benchmarks/README.md): each says its one
purpose and has a --quick mode; the slow tests run every quick mode in a fresh process, writing
its JSON here, and check that the rows are sane (the numbers themselves mean nothing at these
sizes). gpu_suite.py has tests/test_gpu_suite.py.

The listing test runs by default. The others are marked slow (about 3 minutes of CPU on 2 cores):
not in the default run; .ci/run runs them on purpose, as does
python -m pytest -q -m slow tests/test_benchmarks.py"""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
# Imported by the benchmarks, not benchmarks themselves.
SUPPORT = {"common.py", "allennlp_embed.py", "bilm_tf_dump.py", "pytest_progress.py", "gpu_lease_prepare.py"}


def listed() -> dict[str, str]:
    """benchmarks/README.md's table: script name -> what it measures."""
    rows = re.findall(r"^\| `([a-z_0-9]+\.py)` \| ([^|]+) \|", (BENCHMARKS / "README.md").read_text(), re.M)
    return dict(rows)


def test_every_benchmark_is_listed_says_its_purpose_and_has_a_quick_mode():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - SUPPORT
    assert set(listed()) == scripts, "benchmarks/README.md lists other scripts than benchmarks/ holds"
    assert len(scripts) <= 10, "a maintained set, not a collection: at most about ten"
    for name in scripts:
        source = (BENCHMARKS / name).read_text()
        docstring = ast.get_docstring(ast.parse(source)) or ""
        assert docstring and docstring.splitlines()[0].strip(), f"{name}: no one-line purpose opens its docstring"
        assert '"--quick"' in source, f"{name}: no --quick mode"
    for name in SUPPORT:
        assert (BENCHMARKS / name).exists() and f"`{name}`" in (BENCHMARKS / "README.md").read_text()


def quick(tmp_path, script: str, *args: str, timeout: float = 600) -> dict:
    """Run ``benchmarks/SCRIPT.py ARGS --quick`` on one thread, its JSON written under ``tmp_path``:
    the JSON."""
    output = tmp_path / f"{script}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ELMO_CACHE": str(tmp_path / "elmo-cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), *args, "--quick", "--output", str(output)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["machine"]["torch"] and result["machine"]["threads"] == 1
    return result


@pytest.mark.slow
def test_embed_speed_in_process(tmp_path):
    rows = quick(tmp_path, "embed_speed")["results"]
    assert [r["path"] for r in rows] == ["plain", "fast", "fast+bf16", "fast+cache", "fast+bf16+cache"]
    for row in rows:
        assert row["size"] == "tiny" and row["batch_size"] == 1 and row["tokens"] > 100
        assert row["tokens_per_second"] > 0 and row["peak_memory_bytes"] > 0 and 0 < row["fraction_of_matmul_peak"] < 1
    assert all(r["latency_12_tokens_ms"] > 0 for r in rows[1:])
    assert 0 < rows[3]["cache_coverage"] <= 1
    # The roofline: the real work per second against this run's own products, per precision.
    for row in rows:
        assert row["precision"] in (("bfloat16", "float32") if "bf16" in row["path"] else ("float32",))
        assert row["work_flops"] > 0 and row["peak_flops_per_second"] > 0
        assert row["fraction_of_peak"] == pytest.approx(row["work_flops_per_second"] / row["peak_flops_per_second"])


def test_embedding_work_counts_real_positions_and_distinct_words():
    """The roofline's numerator: the LSTM over every real position (tokens and two boundaries per
    sentence), the token encoder once per distinct word, over its real character slots only."""
    sys.path.insert(0, str(BENCHMARKS))
    from common import embedding_work_flops, lstm_flops

    from elmo.model.config import published_config

    config = published_config("tiny")
    once = embedding_work_flops(config, [["the", "cat"]])
    twice = embedding_work_flops(config, [["the", "cat"], ["cat", "the"]])
    per_position = 2 * lstm_flops(config)
    assert twice - once == pytest.approx(4 * per_position)  # same words: only the positions add
    longer = embedding_work_flops(config, [["the", "caterpillar"]])
    assert longer > once  # more characters in a word: more convolution work
    assert embedding_work_flops(config, []) == 0


@pytest.mark.slow
def test_embed_speed_whole_process(tmp_path):
    rows = quick(tmp_path, "embed_speed", "--whole-process")["results"]
    assert [(r["size"], r["configuration"]) for r in rows] == [("tiny", "float32+cache")]
    assert rows[0]["median_seconds"] > 0 and rows[0]["peak_mb"] > 0
    assert 0 < rows[0]["median_cpu_seconds"] == rows[0]["cpu_seconds"][0]
    assert set(rows[0]["breakdown_seconds"]) == {"imports", "weight_loading", "warm_state", "embedding_and_writing"}


@pytest.mark.slow
def test_startup(tmp_path):
    result = quick(tmp_path, "startup")
    assert result["size"] == "tiny" and result["first_run_seconds"] > 0 and result["median_cached_run_seconds"] > 0
    assert result["import_torch_seconds"] > 0 and result["median_run_seconds_compiling_every_module"] > 0
    assert set(result["breakdown_seconds"]) == {"imports", "weight_loading", "warm_state", "first_batch"}


@pytest.mark.slow
def test_bf16_whole_process(tmp_path):
    result = quick(tmp_path, "bf16_whole_process", "--threads", "1")
    assert [(r["size"], r["configuration"]) for r in result["rows"]] == [("tiny", "float32"), ("tiny", "bfloat16")]
    assert all(r["median_seconds"] > 0 and r["median_peak_mb"] > 0 for r in result["rows"])
    deviation = result["deviation"]["tiny bfloat16"]
    assert deviation["token_vectors"] == 3 * result["tokens"] and deviation["min_cosine"] > 0.99


@pytest.mark.slow
@pytest.mark.parametrize("job", ["embed", "train", "serve"])
def test_revisions(tmp_path, job):
    """This checkout against itself: both sides measured, and the ratios computed."""
    result = quick(tmp_path, "revisions", job)
    assert result["job"] == job and result["before"] == result["after"] == str(ROOT / "src")
    measure = {"embed": "tokens_per_second", "train": "tokens_per_second", "serve": "c8_requests_per_s"}[job]
    summary = result["summary"]
    assert summary["before"][measure]["median"] > 0 and summary["after"][measure]["ratio_of_medians"] > 0
    if job == "train":  # the same code, data, seed and negatives: the same losses
        assert len(result["runs"]["before"][0]["losses"]) == 2
        assert summary["after"]["largest_loss_difference"] < 1e-4


@pytest.mark.slow
def test_revisions_contention(tmp_path):
    result = quick(tmp_path, "revisions", "contention")
    assert result["busy"] >= 1 and result["threads"] == [None, 1]
    assert set(result["runs"]) == {"after default", "after 1"}
    for job in ("embed", "train"):
        row = result["summary"][f"after {job}"]
        assert set(row["median_seconds"]) == {"default", "1"} and row["default_over_best"] >= 1


@pytest.mark.slow
def test_train_speed(tmp_path):
    (row,) = quick(tmp_path, "train_speed")["results"]
    assert row["preset"] == "tiny" and row["steps_timed"] == 2 and row["softmax"] == "sampled (2048)"
    assert row["tokens_per_second"] > 0 and 0 < row["mfu"] < 1 and row["peak_memory_bytes"] > 0


@pytest.mark.slow
def test_serve(tmp_path):
    result = quick(tmp_path, "serve")
    assert set(result["server"]) == {"1", "8"}
    for row in [result["direct"], *result["server"].values()]:
        assert row["requests"] > 0 and row["throughput_rps"] > 0 and row["p50_ms"] > 0
    assert result["throughput_ratio"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("part", ["layouts", "resume"])
def test_large_corpora(tmp_path, part):
    """Two of its five parts: the in-process layouts and the kill and resume (processes, ray and
    long-line are whole elmo embed commands, as resume's are)."""
    result = quick(tmp_path, "large_corpora", part)
    if part == "layouts":
        assert result["embedding"]["sentences"] == 40 and len(result["layouts"]) == 13
        assert all(r["bytes_per_token"] > 0 and r["write_tokens_per_s"] > 0 for r in result["layouts"])
    else:
        assert result["sentences"] == 640 and 0 < result["sentences_committed_at_kill"][0] < 640
        assert result["killed_and_resumed_seconds"]["median"] > 0


@pytest.mark.slow
def test_hostile_archives(tmp_path):
    """Every bomb is refused and leaves nothing in the cache; the one past the bound unread."""
    result = quick(tmp_path, "hostile_archives")
    for kind in ("nlpl", "manylangs"):
        at, past = result[kind]["at the bound"], result[kind]["twice the bound"]
        assert at["member_bytes"] == result[kind]["bound"] and at["error"] and past["error"]
        assert at["left_in_cache"] == past["left_in_cache"] == 0 and past["peak_disk"] == 0
        assert at["peak_disk"] <= result[kind]["bound"]
    assert result["reuse"]["member_bytes"] == 4 * 10**6


@pytest.mark.slow
def test_onnx_speed(tmp_path):
    """Both sides ran on the same sentences, and onnxruntime's layers are the Embedder's."""
    pytest.importorskip("onnxruntime")
    (row,) = quick(tmp_path, "onnx_speed")["results"]
    assert row["parity"]["max_abs_diff"] <= 1e-5 and row["files_max_abs_diff"] <= 1e-5
    assert set(row["whole_process"]) == {"elmo embed", "onnxruntime"}
    assert all(w["seconds"] > 0 for w in row["whole_process"].values())
