"""The GPU suite's planning, counting and bookkeeping (benchmarks/gpu_suite.py, the driver, and
its sections' modules in benchmarks/gpu/), checked cheaply in
the default run: the limits fit the budget, the training plan starts with what a GPU user gets,
rows stop being planned when they no longer fit, MFU divides by the peak of the mode that ran,
the model FLOPs count distinct words over their real spans, and the CUDA tests' progress file
survives a cut run. (tests/test_gpu_suite.py runs the whole suite on the CPU; it is slow.)"""

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def suite(monkeypatch):
    """benchmarks/gpu_suite.py as a module; the paths and environment it changes are put back, and
    the modules it imports (benchmarks/gpu/ among them) are dropped after."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # restores the whole sys.path afterwards
    monkeypatch.setenv("PYTHONPATH", __import__("os").environ.get("PYTHONPATH", ""))
    spec = importlib.util.spec_from_file_location("gpu_suite_under_test", BENCHMARKS / "gpu_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    for name in [n for n in sys.modules if n == "gpu" or n.startswith("gpu.")]:
        del sys.modules[name]
    for name in ("common", "op_counting", "pytest_progress"):
        sys.modules.pop(name, None)


@pytest.fixture
def sections(suite):
    """The package of the suite's sections (benchmarks/gpu/), as the driver imported it."""
    return sys.modules["gpu"]


def test_the_section_limits_fit_the_budget(suite):
    assert set(suite.TIMEOUTS) == set(suite.SECTIONS)
    assert sum(suite.TIMEOUTS.values()) + suite.DRIVER_SLACK_S <= suite.DEFAULT_BUDGET_S
    assert suite.SECTIONS[-1] == "host_cpu"  # the lease's own CPU last: it measures the host, not the GPU
    assert set(suite.BEFORE_SECTIONS) <= set(suite.SECTIONS)


def test_the_training_plan_starts_with_the_default_and_keeps_the_plain_path_to_the_small_batch(sections):
    paths = sections.exactness.training_paths()
    from elmo.model.network import DEFAULT_LSTM_PATH

    assert paths[0] == DEFAULT_LSTM_PATH and paths[-1] == "plain"
    assert {"fused+graphs", "fused+compile"} <= set(paths)
    plan = sections.train.training_plan(paths, [512, 128])
    assert [t["batch"] for t in plan] == [512, 128]
    first = plan[0]["rows"]
    assert first[:3] == [(DEFAULT_LSTM_PATH, True), ("fused+graphs", True), (DEFAULT_LSTM_PATH, False)]
    assert first[-1] == ("fused+compile", True)  # it compiles first: last
    assert all(path != "plain" for path, _ in first)
    assert ("plain", False) in plan[-1]["rows"] and plan[-1]["rows"][0] == (DEFAULT_LSTM_PATH, True)
    single = sections.train.training_plan(paths, [4])
    assert len(single) == 1 and single[0]["rows"][-2:] == [("plain", True), ("plain", False)]


def test_rows_are_estimated_from_what_was_measured_and_left_out_when_they_do_not_fit(sections):
    steps = (2, 3, 10, 0.6)
    prior = sections.train.default_step_s([], 1024, (512, 0.5))
    assert prior == pytest.approx(1.0)  # the prior scaled by batch size
    measured = [{"batch": 512, "path": "plain", "s_per_step": 2.4}, {"batch": 512, "path": "fused", "s_per_step": 0.5}]
    assert sections.train.default_step_s(measured, 512, (512, 5.0)) == pytest.approx(0.5)  # plain: 2.4 / 6 = 0.4
    fused = sections.train.estimate_row_s(0.4, "fused", steps)
    assert sections.train.estimate_row_s(0.4, "plain", steps) > 3 * fused
    assert sections.train.estimate_row_s(0.4, "fused+compile", steps) >= fused + sections.train.COMPILE_S
    deadline = sections.common.Deadline(time.time() + 30, reserve=4)
    assert deadline.fits(fused) and not deadline.fits(27)
    assert "needs about 27 s" in deadline.why_not(27)
    with pytest.raises(sections.common.OutOfTime, match="stopped at the section's limit"):
        with sections.common.Deadline(time.time() + 0.3, reserve=0).stop_at():
            time.sleep(5)  # a compile slower than estimated: the row is cut, the section goes on to record it
    with sections.common.Deadline(time.time() + 5, reserve=0).stop_at():
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # a row that ended in time leaves no alarm behind


def test_mfu_divides_by_the_peak_of_the_mode_that_ran(sections, monkeypatch):
    cpu, gpu = sections.common.Device("cpu"), sections.common.Device("cuda")
    assert sections.common.peak_mode(cpu, "bfloat16") == "bfloat16"
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    torch.set_float32_matmul_precision("highest")
    assert sections.common.peak_mode(gpu, "float32") == "float32"
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    assert sections.common.peak_mode(gpu, "float32") == "tf32"
    assert sections.common.peak_mode(cpu, "float32") == "float32"  # no TF32 on a CPU
    assert set(gpu.matmul_modes()) == {"float32", "tf32", "bfloat16", "float16"}
    assert set(cpu.matmul_modes()) == {"float32", "bfloat16"}


def test_the_encoder_flops_count_distinct_words_over_their_real_spans(sections):
    from elmo.model.chars import batch_to_char_ids
    from elmo.model.config import preset_config
    from elmo.kernels.encoder import distinct_words
    from elmo.model.network import TokenEncoder

    config = preset_config("tiny")
    cnn = config.char_cnn
    encoder = TokenEncoder(cnn, config.lstm.projection_dim)
    ids, _ = batch_to_char_ids([["a", "a", "a", "cat"], ["cat", "a", "elephants", "a"]])
    words = distinct_words(ids, encoder.pad_id)
    n_distinct = len(words.distinct)  # <S>, </S>, "a", "cat", "elephants" and the padding token
    widest = max(w for w, _ in cnn.filters)
    head = cnn.n_highway * 4 * cnn.n_filters ** 2 + (2 * cnn.n_filters * config.lstm.projection_dim
                                                    if cnn.n_filters != config.lstm.projection_dim else 0)
    expected = 0
    start = 0
    for stop, longest in words.groups:
        span = min(cnn.max_characters_per_token, longest + widest - 1)
        expected += (stop - start) * sum(2 * w * cnn.embedding_dim * n * (span - w + 1) for w, n in cnn.filters)
        start = stop
    assert __import__("common").encoder_step_flops(config, words) == pytest.approx(expected + n_distinct * head)
    every_slot = sum(2 * w * cnn.embedding_dim * n * (cnn.max_characters_per_token - w + 1) for w, n in cnn.filters)
    assert __import__("common").encoder_step_flops(config, words) < ids[..., 0].numel() * (every_slot + head) / 4
    per_token = sections.train.train_flops_per_token(config, 256, 2000, encoder_flops_per_token=1e6)
    assert per_token == pytest.approx(3 * (1e6 + 2 * __import__("common").lstm_flops(config)
                                           + 4 * config.lstm.projection_dim * 257))


def test_the_cuda_tests_progress_survives_a_cut_run(tmp_path, suite):
    """pytest_progress writes the collection and each test's end as they happen: a run that
    finished says what passed, failed and skipped with seconds; a file cut mid-run (a kill) says
    which tests never ran."""
    tests = tmp_path / "test_sample.py"
    tests.write_text("import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert False\n\n"
                     "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n")
    progress = tmp_path / "progress.jsonl"
    env = dict(__import__("os").environ, ELMO_PYTEST_PROGRESS=str(progress),
               PYTHONPATH=f"{BENCHMARKS}:{__import__('os').environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pytest_progress", "-p", "no:cacheprovider",
                           str(tests)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout
    import pytest_progress

    found = pytest_progress.read(str(progress))
    by_name = {k.split("::")[-1]: v for k, v in found["outcomes"].items()}
    assert by_name == {"test_ok": "passed", "test_bad": "failed", "test_skipped": "skipped"}
    assert len(found["collected"]) == 3 and found["not_run"] == []
    assert all(s >= 0 for s in found["seconds"].values())
    lines = progress.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-line
    found = pytest_progress.read(str(cut))
    assert len(found["outcomes"]) == 1 and len(found["not_run"]) == 2


def test_the_section_records_what_it_left_out_and_why(sections, tmp_path):
    rec = sections.common.Recorder(str(tmp_path / "part.json"))
    rec.not_measured({"batch": 512, "path": "fused+compile"}, "needs a CUDA device")
    rec.fail("first")
    rec.fail("second")
    data = json.loads((tmp_path / "part.json").read_text())
    assert data["not_measured"] == [{"batch": 512, "path": "fused+compile", "why": "needs a CUDA device"}]
    assert data["_error"] == "first"
    assert sections.common.Device("cpu").why_not("cuda") == "needs a CUDA device"
    assert sections.common.Device("cpu").why_not(None) is None and sections.common.Device("cuda").why_not("compile") is None


def test_a_row_cut_at_its_deadline_passes_every_except_exception(sections, monkeypatch):
    """The alarm's OutOfTime is raised wherever the row is: inside torch.compile (which wraps an
    ``Exception`` from its backend in its own error) or inside a CUDA graph's capture (whose
    ``except Exception`` turns a failure into "graphs off" and runs on). It must come out as
    itself from both, so that the section records the row as cut and goes on."""
    assert not issubclass(sections.common.OutOfTime, Exception)

    def backend(graph_module, example_inputs):  # the alarm firing while the backend compiles
        raise sections.common.OutOfTime("stopped at the section's limit")

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.sin(x) + 1, backend=backend)
    with pytest.raises(sections.common.OutOfTime):
        compiled(torch.ones(3))
    torch._dynamo.reset()

    from elmo.inference.graphs import LstmGraphs
    from elmo.inference.runtime import Runtime

    model = sections.common.fixture_model("allennlp")
    runtime = Runtime(model, state="reset")
    layers = list(zip(runtime.model.forward_layers, runtime.model.backward_layers))
    graphs = LstmGraphs(layers, runtime.dtype, model.config.lstm.use_skip_connections, capture=False)
    graphs.capture = True  # as on a GPU: the capture below is the one that runs into the alarm

    def capture(graph):
        raise sections.common.OutOfTime("stopped at the section's limit")

    monkeypatch.setattr(graphs, "_capture", capture)
    with pytest.raises(sections.common.OutOfTime):
        graphs._build(8, model.config.lstm.projection_dim)
    assert graphs.disabled is None  # not taken for a failed capture


@pytest.mark.slow  # a whole section in a child process: CI's slow pass
def test_the_suite_writes_its_json_alone_into_the_output_folder(tmp_path):
    """A lease brings back at most 8 files of $OUT, which ones not ours to choose: the sections'
    own records and the CUDA tests' progress live in a work folder elsewhere, and the output
    folder ends holding the JSON alone."""
    out = tmp_path / "OUT"
    out.mkdir()
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_suite.py"), "--device", "cpu", "--quick",
                           "--sections", "environment", "--out", str(out / "gpu_suite.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["gpu_suite.json"]
    report = json.loads((out / "gpu_suite.json").read_text())
    assert report["sections"]["environment"]["status"] == "ok"
    assert report["sections"]["environment"]["result"]["environment"]["torch"]  # the part's record was read back


def test_the_host_cpu_tests_leave_out_the_slow_ones(sections, tmp_path):
    """``-m`` replaces the ``-m 'not slow'`` of addopts: the lease's CPU section must ask for
    ``exactness and not slow`` itself, or the slow tests (compiling, torchrun, a 10,000-token
    sentence) run under its short limit and are cut. Run here on a file of three tests."""
    command, env = sections.host_cpu.host_cpu_exactness_command(quick=False, cores=16, xdist=False)
    marker = command[len(command) - 1 - command[::-1].index("-m") + 1]  # (the first -m is python's)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    exactness: numbers\n")
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n@pytest.mark.exactness\ndef test_exact():\n    pass\n\n"
        "@pytest.mark.exactness\n@pytest.mark.slow\ndef test_exact_and_slow():\n    pass\n\n"
        "def test_other():\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-m", marker,
                           "test_sample.py"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "PASSED test_sample.py::test_exact" in done.stdout and "1 passed, 2 deselected" in done.stdout
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "pytest_progress" in command  # CUDA hidden; outcomes as they end


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


@pytest.mark.slow  # waits for the timeout: CI's slow pass
@pytest.mark.parametrize("hangs", [False, True])
def test_a_child_process_is_killed_with_everything_it_started(sections, tmp_path, hangs):
    """run_group kills the child's whole process group, at the timeout and after a normal end
    alike: a grandchild (an xdist worker, elmo embed's own children) does not run on through
    the timings that follow."""
    pid_file = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
            f"time.sleep({60 if hangs else 0})\n")
    done = sections.common.run_group([sys.executable, "-c", code], timeout=10 if hangs else 30)
    assert done.timed_out is hangs and (done.returncode is None) is hangs
    grandchild = int(pid_file.read_text())
    deadline = time.time() + 5
    while _alive(grandchild) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_the_cuda_tests_run_heavy_first_and_a_test_past_its_limit_is_cut(tmp_path, suite):
    """pytest_progress (no pytest-timeout on the lease): ELMO_PYTEST_FIRST runs the named tests
    first, ELMO_PYTEST_TEST_TIMEOUT cuts a test's body and records it as ``timeout`` (the suite
    leaves it not measured), even past the test's own ``except Exception``; the run goes on."""
    tests = tmp_path / "test_sample.py"
    tests.write_text("import time\n\ndef test_light():\n    pass\n\ndef test_hangs():\n    try:\n"
                     "        time.sleep(30)\n    except Exception:\n        pass\n\ndef test_heavy():\n    pass\n")
    progress = tmp_path / "progress.jsonl"
    env = dict(__import__("os").environ, ELMO_PYTEST_PROGRESS=str(progress), ELMO_PYTEST_FIRST="test_heavy,test_hangs",
               ELMO_PYTEST_TEST_TIMEOUT="1", PYTHONPATH=f"{BENCHMARKS}:{__import__('os').environ.get('PYTHONPATH', '')}")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pytest_progress", "-p", "no:cacheprovider",
                           str(tests)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert time.monotonic() - start < 25 and done.returncode == 1, done.stdout
    import pytest_progress

    ended = [json.loads(line)["test"].split("::")[-1] for line in progress.read_text().splitlines()[1:]]
    assert ended == ["test_heavy", "test_hangs", "test_light"]
    found = pytest_progress.read(str(progress))
    by_name = {k.split("::")[-1]: v for k, v in found["outcomes"].items()}
    assert by_name == {"test_heavy": "passed", "test_hangs": "timeout", "test_light": "passed"}


def test_the_goal_figures_are_values_from_rows_or_say_why_not(suite):
    """goal_figures on a made-up GPU report: the best bfloat16 row at the original size with its
    profiled step's host and device seconds, AllenNLP's ratios, each float32 path's largest
    difference under PyTorch's TF32 defaults (not the TF32-off diagnostic rows); a figure whose
    section did not run or whose row was left out says why."""
    profile = {"host_ms_total": 400.0, "device_ms_total": 150.0}
    report = {"suite": {"device": "cuda", "quick": False}, "sections": {
        "train_original": {"status": "ok", "result": {
            "rows": [{"batch": 2048, "path": "fused", "precision": "bfloat16", "tokens_per_s_per_direction": 90000.0,
                      "s_per_step": 0.45, "kernels_per_step": {"profile": profile}},
                     {"batch": 512, "path": "fused+graphs", "precision": "bfloat16",
                      "tokens_per_s_per_direction": 30000.0, "s_per_step": 0.34, "kernels_per_step": {}},
                     {"batch": 2048, "path": "fused", "precision": "float32", "tokens_per_s_per_direction": 99999.0,
                      "s_per_step": 0.4}],
            "host_preparation": [{"batch": 2048, "next_batch_s": 0.06, "distinct_words_s": 0.17}]}},
        "allennlp": {"status": "ok", "result": {"figures": {"elmo": 50000.0, "ratio": 21.5},
                                                "setting": {"size": "original"},
                                                "not_measured": [{"run": "in-process", "why": "no time: x"}]}},
        "exactness": {"status": "ok", "result": {
            "inference": [{"fixture": "allennlp", "path": "eager", "precision": "float32", "tf32": "default",
                           "max_abs_diff": 3e-3},
                          {"fixture": "allennlp", "path": "eager", "precision": "float32", "tf32": "off",
                           "max_abs_diff": 1e-6}],
            "training": [{"fixture": "allennlp", "path": "fused", "dtype": "float32", "tf32": "default",
                          "max_abs_diff_values": 9e-7, "max_rel_diff_gradients": 5e-7}],
            "not_measured": [{"kind": "inference", "path": "graphs", "why": "no time: needs about 9 s"}]}}}}
    goals = suite.goal_figures(report, list(suite.SECTIONS))
    train = goals["train_original_bf16_tokens_per_s_per_direction"]
    assert (train["value"], train["batch"], train["path"]) == (90000.0, 2048, "fused")
    assert train["profiled_step_host_s"] == 0.4 and train["profiled_step_device_s"] == 0.15
    assert train["host_batches_and_distinct_words_s"] == pytest.approx(0.23)
    assert goals["embed_cuda_tokens_per_s"]["value"] == 50000.0 and goals["embed_vs_allennlp_ratio"]["value"] == 21.5
    assert goals["embed_vs_allennlp_ratio_in_process"]["not_measured"] == "no time: x"
    assert goals["float32_max_diff:inference:eager"]["value"] == 3e-3  # the default, TF32 convolutions and all
    assert goals["float32_max_diff:inference:graphs"]["not_measured"] == "no time: needs about 9 s"
    assert goals["float32_max_diff:training:fused"]["value"] == 9e-7
    cpu = suite.goal_figures({"suite": {"device": "cpu", "quick": True}, "sections": {}}, ["environment"])
    assert cpu["train_original_bf16_tokens_per_s_per_direction"]["not_measured"] == "a GPU figure: this run is on the CPU"
    assert cpu["float32_max_diff:training:fused"]["not_measured"] == \
        "the exactness section is not in this command's sections"


def test_the_trainers_public_step_leaves_its_losses_on_the_device(sections, tmp_path):
    """Trainer.train_step_tensors, the public hook the suite times training with: one optimizer step whose two
    losses come back as detached 0-dim tensors (not read, so the host need not wait), the same
    step train_step reads."""
    from elmo.training.train import Trainer, TrainSettings

    corpus, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    sections.common.write_corpus(corpus, sections.common.generate_sentences(200, seed=1, words=sections.common.packaged_words()[:500]))
    sections.common.write_vocab(vocab, sections.common.packaged_words()[:500], 600)
    trainer = Trainer(TrainSettings(train=[str(corpus)], vocab=str(vocab), output=str(tmp_path / "run"), config="tiny",
                                    batch_size=4, max_tokens=10 ** 9, progress=False, device="cpu",
                                    checkpoint_every=10 ** 9, log_every=10 ** 9))
    try:
        before = [p.detach().clone() for p in trainer.model.parameters()]
        losses = trainer.train_step_tensors()
        assert all(isinstance(t, torch.Tensor) and t.dim() == 0 and not t.requires_grad for t in losses)
        assert all(0 < float(t) < 100 for t in losses)
        assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))  # it stepped
    finally:
        for batcher in trainer.batchers:
            if hasattr(batcher, "close"):
                batcher.close()


def test_a_rows_own_process_is_run_or_recorded_with_why_not(sections, tmp_path):
    """run_row_process, the one way a section runs a row's command: the finished process when it
    ran to exit 0; else nothing, and the record says why: not measured when it did not fit or ran
    into the deadline, the section failed with the exit code and standard error otherwise."""
    common = sections.common
    rec = common.Recorder(str(tmp_path / "part.json"))
    deadline = common.Deadline(time.time() + 30, reserve=0)
    done = common.run_row_process(rec, deadline, {"run": "ok"}, [sys.executable, "-c", "print(7)"], 1.0, "ok")
    assert done is not None and done.stdout.strip() == "7"
    assert common.run_row_process(rec, deadline, {"run": "dear"}, [sys.executable, "-c", ""], 60.0, "dear") is None
    assert rec.data["not_measured"][-1]["run"] == "dear" and "needs about 60 s" in rec.data["not_measured"][-1]["why"]
    failing = [sys.executable, "-c", "import sys; sys.stderr.write('broken'); sys.exit(3)"]
    assert common.run_row_process(rec, deadline, {"run": "bad"}, failing, 1.0, "bad row") is None
    assert rec.data["_error"] == "bad row: exit code 3: broken"
    short = common.Deadline(time.time() + 1.5, reserve=0)
    hangs = [sys.executable, "-c", "import time; time.sleep(30)"]
    start = time.monotonic()
    assert common.run_row_process(rec, short, {"run": "hangs"}, hangs, 0.1, "hangs") is None
    assert time.monotonic() - start < 10  # killed at the deadline, not waited for
    row = rec.data["not_measured"][-1]
    assert row["run"] == "hangs" and row["why"].startswith("no time: still running after")
    assert rec.data["_error"] == "bad row: exit code 3: broken"  # the first failure stays the section's


@pytest.mark.slow  # a section in a process of its own: CI's slow pass
def test_a_section_module_runs_alone(tmp_path):
    """Each module of benchmarks/gpu/ runs its section without the driver (run_alone): here the
    environment section, its record written to --out; an unknown --section is refused."""
    out = tmp_path / "environment.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu" / "environment.py"), "--device", "cpu", "--quick",
                           "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["environment"]["torch"] == torch.__version__ and "_error" not in record
    assert set(record["matmul_peak_tflops"]) == {"float32", "bfloat16"}
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "gpu" / "train.py"), "--section", "embed", "--out",
                          str(tmp_path / "x.json")], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'embed'" in bad.stderr
