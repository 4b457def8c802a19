"""The precision rule (elmo.inference.precision): bfloat16 is never slower than float32. On a CPU
where it measures slower for the model's LSTM size, float32 runs instead, and the measurement is
made once per machine and remembered."""

import json

import pytest
import torch
from conftest import load_fixture_model

import elmo.inference.precision
from elmo.inference.precision import BFLOAT16_CHECK_ENV, bfloat16_pays
from elmo.inference.runtime import Runtime

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """The timing check switched on (conftest switches it off for the other tests), a fresh cache,
    bfloat16 hardware claimed, and fake step timings whose calls are counted."""
    monkeypatch.setenv(BFLOAT16_CHECK_ENV, "1")
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path))
    monkeypatch.setattr(elmo.inference.precision, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    timings = {"float32": 0.010, "bfloat16": 0.004}
    calls = []

    def fake_seconds(dim, projection_dim, dtype, rows=64, steps=8):
        name = "bfloat16" if dtype == torch.bfloat16 else "float32"
        calls.append((dim, projection_dim, name))
        return timings[name]

    monkeypatch.setattr(elmo.inference.precision, "_lstm_step_seconds", fake_seconds)
    return timings, calls, tmp_path / "precision.json"


def test_bfloat16_runs_where_it_measures_faster(measured):
    timings, calls, record = measured
    model = load_fixture_model("allennlp")
    assert Runtime(model, precision="bfloat16").dtype == torch.bfloat16
    assert {name for _, _, name in calls} == {"float32", "bfloat16"}
    assert (calls[0][0], calls[0][1]) == (model.config.lstm.dim, model.config.lstm.projection_dim)
    entry, = json.loads(record.read_text()).values()
    assert entry == {"float32": 0.010, "bfloat16": 0.004}


def test_bfloat16_measured_slower_falls_back_to_float32_with_the_reason(measured):
    timings, calls, record = measured
    timings["bfloat16"] = 0.020
    model = load_fixture_model("allennlp")
    with pytest.warns(UserWarning, match=r"20\.0 ms in bfloat16 against 10\.0 ms in float32"):
        runtime = Runtime(model, precision="bfloat16")
    assert runtime.precision == "float32" and runtime.dtype == torch.float32
    # float32, float16 and GPUs are never measured
    calls.clear()
    Runtime(model, precision="float32")
    assert calls == []


def test_the_choice_is_measured_once_per_machine_and_size(measured, monkeypatch):
    timings, calls, record = measured
    model = load_fixture_model("allennlp")
    Runtime(model, precision="bfloat16")
    assert len(calls) == 2
    Runtime(model, precision="bfloat16")  # remembered, even when timings would now differ
    timings["bfloat16"] = 1.0
    assert Runtime(model, precision="bfloat16").dtype == torch.bfloat16 and len(calls) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # another thread count is another entry
    with pytest.warns(UserWarning, match="slower than float32"):
        assert Runtime(model, precision="bfloat16").dtype == torch.float32
    assert len(calls) == 4 and len(json.loads(record.read_text())) == 2
    # A record made for the other route of the bfloat16 products does not decide for this one
    # (the other route: a CPU without oneDNN's bfloat16 kernel, AVX2 only, starts on the batched one).
    route = elmo.inference.precision.onednn_for("cpu", torch.bfloat16)
    monkeypatch.setattr(elmo.inference.precision, "onednn_for", lambda device, dtype: not route)
    with pytest.warns(UserWarning, match="slower than float32"):
        assert Runtime(model, precision="bfloat16").dtype == torch.float32
    assert len(calls) == 6 and len(json.loads(record.read_text())) == 3


def test_a_damaged_record_is_measured_again(measured):
    timings, calls, record = measured
    record.write_text("{not json")
    with pytest.warns(UserWarning, match=r"precision: ignoring the remembered measurements: .*precision\.json: not valid"):
        assert bfloat16_pays(load_fixture_model("allennlp").config)[0]
    assert len(calls) == 2 and json.loads(record.read_text())


def test_the_check_can_be_switched_off(measured, monkeypatch):
    timings, calls, record = measured
    timings["bfloat16"] = 0.020
    monkeypatch.setenv(BFLOAT16_CHECK_ENV, "0")
    assert Runtime(load_fixture_model("allennlp"), precision="bfloat16").dtype == torch.bfloat16
    assert calls == []


def test_real_measurement_runs_both_precisions():
    """The timing itself, on a tiny size: positive seconds for both precisions."""
    for dtype in (torch.float32, torch.bfloat16):
        assert elmo.inference.precision._lstm_step_seconds(16, 8, dtype, rows=4, steps=2) > 0


def test_int8_is_opt_in_close_to_float32_and_falls_back_where_it_cannot_run(monkeypatch):
    """precision int8: float32 activations, int8 products; every token vector within cosine 0.999
    of float32's (the fixture model), no timing check (it is asked for, not measured), and
    float32 with a warning where oneDNN's int8 kernel is missing. The caller's model is not
    changed."""
    import numpy as np

    from elmo import Embedder
    from elmo.kernels import blocks

    model = load_fixture_model("allennlp")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Colourless", "green", "ideas", "sleep"]]
    exact = Embedder(model).embed_sentences(sentences)
    if blocks.int8_for("cpu"):
        runtime = Runtime(model, precision="int8")
        assert runtime.precision == "int8" and runtime.dtype == torch.int8
        reduced = Embedder(model, precision="int8").embed_sentences(sentences)
        for a, b in zip(reduced, exact):
            a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
            cosines = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            assert cosines.min() >= 0.999
            assert not np.array_equal(a, b)  # int8 really ran
    monkeypatch.setattr(blocks, "_onednn_int8_works", lambda: False)
    with pytest.warns(UserWarning, match="int8 products need oneDNN's int8 kernel"):
        assert Runtime(model, precision="int8").precision == "float32"
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
