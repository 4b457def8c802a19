"""The CUDA paths of embedding and training, against the CPU specification.

Skipped without a GPU (CI has none); run on a GPU machine with ``python -m pytest tests/test_cuda.py``.
"""

import numpy as np
import pytest
import torch
from conftest import FIXTURES, load_fixture_model

from elmo import BiLM, Embedder, batch_to_char_ids
from elmo.hub.checkpoints import load_train_checkpoint
from elmo.model.lstm import LstmLayer, lstm_fast, lstm_plain

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CORPUS = FIXTURES / "bilm-tf" / "train" / "data.txt"
VOCAB = FIXTURES / "bilm-tf" / "train" / "vocab.txt"
SENTENCES = [s.split() for s in [
    "The committee will meet again next week to discuss the proposal .", "It rained .", "",
    "東京 は 日本 の 首都 です", "a " * 150, "The the THE the"]]


@pytest.fixture(autouse=True)
def _exact_float32_products():
    # TF32 would change the float32 products' rounding (10-bit mantissa); the exact path needs full float32.
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def test_fast_lstm_on_cuda_matches_plain_values_and_gradients():
    layer = LstmLayer(6, 10, 5, cell_clip=0.5, proj_clip=0.5).cuda()
    inputs = torch.randn(3, 300, 6, device="cuda", requires_grad=True)  # longer than one gate chunk
    mask = torch.ones(3, 300, dtype=torch.bool, device="cuda")  # full windows, as in training
    plain_out, (c_p, h_p) = lstm_plain(layer, inputs, mask)
    fast_out, (c_f, h_f) = lstm_fast(layer, inputs, mask)
    torch.testing.assert_close(fast_out, plain_out, rtol=0, atol=1e-5)
    torch.testing.assert_close(c_f, c_p, rtol=0, atol=1e-5)
    weight = torch.randn_like(plain_out)
    g_plain = torch.autograd.grad((plain_out * weight).sum(), [inputs, layer.state_weight])
    g_fast = torch.autograd.grad((fast_out * weight).sum(), [inputs, layer.state_weight])
    for a, b in zip(g_fast, g_plain):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("state", ["warm", "reset", "stateful"])
def test_embedder_on_cuda_matches_cpu_plain_path(state):
    cpu_plain = load_fixture_model("allennlp")
    cpu_plain.fast = False
    reference = Embedder(cpu_plain, state=state, batch_size=3).embed_sentences(SENTENCES)
    gpu = Embedder(load_fixture_model("allennlp"), state=state, device="cuda", batch_size=3)
    vectors = gpu.embed_sentences(SENTENCES)
    for a, b in zip(vectors, reference):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_embedder_on_cuda_leaves_the_callers_model_on_the_cpu():
    model = load_fixture_model("allennlp")
    embedder = Embedder(model, device="cuda")
    embedder.embed_sentences(SENTENCES[:2])
    assert next(model.parameters()).device.type == "cpu"
    assert next(embedder.model.parameters()).device.type == "cuda"


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_reduced_precision_on_cuda_stays_close(precision):
    model = load_fixture_model("allennlp")
    reference = Embedder(model).embed_sentences(SENTENCES)
    vectors = Embedder(load_fixture_model("allennlp"), device="cuda", precision=precision).embed_sentences(SENTENCES)
    scale = max(np.abs(r).max() for r in reference if r.size)
    worst = max(np.abs(a - b).max() for a, b in zip(vectors, reference) if a.size)
    assert worst < 0.02 * scale, (precision, worst, scale)
    assert worst > 0  # reduced precision really ran: identical results would mean float32 was used


def test_bilm_training_forward_on_cuda_matches_cpu():
    model = load_fixture_model("allennlp")
    ids, mask = batch_to_char_ids(SENTENCES)
    with torch.enable_grad():
        cpu = model(ids, mask).layers
        gpu = BiLM(model.config).cuda()
        gpu.load_state_dict(model.state_dict())
        out = gpu(ids.cuda(), mask.cuda()).layers
    torch.testing.assert_close(out.cpu(), cpu, rtol=0, atol=1e-5)


RESUME_CHECK = """
import os, sys, json
from elmo.hub.checkpoints import load_train_checkpoint
from elmo.training.train import TrainSettings, train
out, settings = sys.argv[1], {**json.loads(sys.argv[2]), "deterministic": True}
last = lambda run: load_train_checkpoint(sorted(os.scandir(run + "/checkpoints"), key=lambda e: e.name)[-1].path)
full = train(TrainSettings(output=out + "/full", max_tokens=8 * 10 * 60, **settings))
train(TrainSettings(output=out + "/half", max_tokens=8 * 10 * 30, **settings))
train(TrainSettings(output=out + "/half", max_tokens=8 * 10 * 60, resume=True, **settings))
a, b = last(out + "/full")["model"], last(out + "/half")["model"]
first = float(open(out + "/full/metrics.csv").read().splitlines()[1].split(",")[2])
print(json.dumps({"first_loss": first, "last_loss": full["loss"],
                  "largest_difference": max((a[k].float() - b[k].float()).abs().max().item() for k in a)}))
"""


@pytest.mark.parametrize("bf16", [False, True])
def test_training_on_cuda_runs_resumes_and_learns(tmp_path, bf16):
    """A run killed and resumed on the GPU ends exactly where the uninterrupted run does. The GPU's
    default kernels are not reproducible (two identical uninterrupted runs of this size ended up to
    0.14 apart on an H100), so both runs use deterministic kernels (``deterministic=True``), in a
    fresh process where cuBLAS has not started yet; with them resume was bitwise exact on the H100."""
    import json
    import subprocess
    import sys

    settings = dict(train=[str(CORPUS)], vocab=str(VOCAB), config="tiny", batch_size=8, unroll_steps=10,
                    checkpoint_every=10, log_every=10, progress=False, seed=1, device="cuda", bf16=bf16)
    done = subprocess.run([sys.executable, "-c", RESUME_CHECK, str(tmp_path), json.dumps(settings)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["last_loss"] < result["first_loss"] - 0.5, result
    assert result["largest_difference"] == 0.0, result


def test_cli_train_with_gpus_zero(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "elmo.cli.main", "train", "--train", str(CORPUS), "--vocab",
                             str(VOCAB), "--config", "tiny", "--output", str(out), "--max-tokens", "4000",
                             "--batch-size", "8", "--gpus", "0", "--no-progress"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    payload = load_train_checkpoint(sorted((out / "checkpoints").glob("step-*.pt"))[-1])
    assert payload["tokens"] >= 4000


def test_allennlp_drop_in_on_cuda_gives_the_fixtures_and_keeps_its_state_across_a_move():
    from conftest import ALLENNLP, fixture_batches, top_as_fixture

    from elmo.allennlp import Elmo, ElmoEmbedder, batch_to_ids

    options, weights = str(ALLENNLP / "options.json"), str(ALLENNLP / "lm_weights.hdf5")
    batches = fixture_batches("allennlp")
    sentences = [s for batch, _ in batches for s in batch]
    expected = [e for _, exp in batches for e in exp]
    gpu = ElmoEmbedder(options, weights, cuda_device=0)  # stateful, batches of 3: the original's numbers
    for array, want in zip(gpu.embed_sentences(sentences, batch_size=3), expected):
        np.testing.assert_allclose(top_as_fixture(array), want, atol=1e-5, rtol=0)
    ids = batch_to_ids([["The", "cat", "sat", "."], ["Dogs", "bark"]])
    stay, move = Elmo(options, weights, 1, dropout=0.0), Elmo(options, weights, 1, dropout=0.0)
    stay(ids)
    move(ids)
    move.cuda()  # the carried state moves with the module
    out = move(ids)["elmo_representations"][0]
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), stay(ids)["elmo_representations"][0], rtol=0, atol=1e-5)


# ------------------------------------------------------------------ CUDA graphs (issue 37)
from elmo.inference.graphs import ROW_BUCKETS  # noqa: E402
from elmo.inference.runtime import Runtime  # noqa: E402

MANY = [s.split() for s in ["The committee will meet again next week .", "It rained .", "東京 は 日本 の 首都 です",
                            "a b c d e f g h i j k l m n o p q r s t u v w x y z", "Short one", "x"]] * 4


def _cpu_plain(name="allennlp"):
    model = load_fixture_model(name)
    model.fast = False
    return model


@pytest.mark.parametrize("fixture", ["allennlp", "bilm-tf"])
def test_cuda_graphs_match_eager_and_the_cpu_specification(fixture):
    """The same batch three times: eager, then (second sighting) captured, then replayed. Every
    result within 1e-5 of the CPU plain path, graphs and eager to the products' rounding."""
    ids, mask = batch_to_char_ids(MANY)
    with torch.no_grad():
        expected = _cpu_plain(fixture)(ids, mask)
    graphed = Runtime(load_fixture_model(fixture), device="cuda", state="reset", cuda_graphs=True)
    eager = Runtime(load_fixture_model(fixture), device="cuda", state="reset")
    for attempt in range(3):
        got, reference = graphed(ids, mask), eager(ids, mask)
        torch.testing.assert_close(got.layers.cpu(), reference.layers.cpu(), rtol=0, atol=1e-5)
        torch.testing.assert_close(got.layers.cpu(), expected.layers, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.state.c.cpu(), expected.state.c, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.state.h.cpu(), expected.state.h, rtol=0, atol=1e-5)
    assert graphed.graphs.disabled is None, graphed.graphs.disabled
    assert graphed.graphs.captures == 1 and graphed.graphs.replays > 0
    assert all(g.graph is not None for g in graphed.graphs.graphs.values())  # really captured


def test_cuda_graphs_with_carried_state_and_every_bucket_edge():
    """Stateful rows (random initial states), batches of 1, 8, 9 and 64 rows (bucket edges), each
    run three times, against the CPU specification."""
    cpu = _cpu_plain()
    runtime = Runtime(load_fixture_model("allennlp"), device="cuda", state="reset", cuda_graphs=True)
    for rows in (1, 8, 9, 64):
        batch = (MANY * 3)[:rows]
        ids, mask = batch_to_char_ids(batch)
        state = cpu.zero_state(rows)
        state = type(state)(torch.randn_like(state.c), torch.randn_like(state.h))
        with torch.no_grad():
            expected = cpu(ids, mask, state)
        for _ in range(3):
            got = runtime(ids, mask, state)
            torch.testing.assert_close(got.layers.cpu(), expected.layers, rtol=0, atol=1e-5)
            torch.testing.assert_close(got.state.c.cpu(), expected.state.c, rtol=0, atol=1e-5)
            torch.testing.assert_close(got.state.h.cpu(), expected.state.h, rtol=0, atol=1e-5)
    assert runtime.graphs.disabled is None, runtime.graphs.disabled
    assert sorted(runtime.graphs.graphs) == [8, 16, 64] and set(ROW_BUCKETS) >= {8, 16, 64}


def test_cuda_graphs_follow_weight_changes():
    runtime = Runtime(load_fixture_model("allennlp"), device="cuda", state="reset", cuda_graphs=True)
    ids, mask = batch_to_char_ids(MANY)
    for _ in range(2):
        runtime(ids, mask)
    with torch.no_grad():
        runtime.model.backward_layers[1].bias.add_(0.25)
    for _ in range(3):
        got = runtime(ids, mask)
    cpu = _cpu_plain()
    cpu.load_state_dict({k: v.cpu() for k, v in runtime.model.state_dict().items()})
    with torch.no_grad():
        torch.testing.assert_close(got.layers.cpu(), cpu(ids, mask).layers, rtol=0, atol=1e-5)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_cuda_graphs_in_reduced_precision_match_the_eager_path(precision):
    ids, mask = batch_to_char_ids(MANY)
    graphed = Runtime(load_fixture_model("allennlp"), device="cuda", precision=precision, state="reset",
                      cuda_graphs=True)
    eager = Runtime(load_fixture_model("allennlp"), device="cuda", precision=precision, state="reset")
    reference = eager(ids, mask).layers.float().cpu()
    for _ in range(3):
        got = graphed(ids, mask).layers.float().cpu()
    scale = reference.abs().max()
    assert (got - reference).abs().max() <= 0.02 * scale
    assert graphed.graphs.captures == 1 and graphed.graphs.disabled is None


@pytest.mark.parametrize("state", ["warm", "stateful"])
def test_embedder_with_cuda_graphs_equals_cpu_plain(state):
    """Through the public API, under inference mode (the capture leaves it for its buffers) and
    then under no_grad only, as Elmo calls the runtime."""
    reference = Embedder(_cpu_plain(), state=state, batch_size=4).embed_sentences(MANY)
    embedder = Embedder(load_fixture_model("allennlp"), state=state, device="cuda", batch_size=4, cuda_graphs=True)
    vectors = embedder.embed_sentences(MANY)
    for a, b in zip(vectors, reference):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert embedder.runtime.graphs.captures >= 1 and embedder.runtime.graphs.disabled is None
    ids, mask = batch_to_char_ids(MANY[:4])
    with torch.no_grad():  # not inference mode: the graph's buffers must accept the copies
        for _ in range(2):
            embedder.runtime(ids, mask)


def test_cli_embed_with_cuda_graphs(tmp_path):
    import subprocess
    import sys

    import h5py

    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in MANY) + "\n", encoding="utf-8")
    folder = FIXTURES / "allennlp-elmo"
    common = [sys.executable, "-m", "elmo.cli.main", "embed", str(text), "--options", str(folder / "options.json"),
              "--weights", str(folder / "lm_weights.hdf5"), "--device", "cuda", "--batch-size", "4"]
    for name, extra in (("eager.hdf5", []), ("graphs.hdf5", ["--cuda-graphs"])):
        done = subprocess.run(common[:5] + [str(tmp_path / name)] + common[5:] + extra, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    with h5py.File(tmp_path / "eager.hdf5", "r") as a, h5py.File(tmp_path / "graphs.hdf5", "r") as b:
        for i in range(len(MANY)):
            np.testing.assert_allclose(a[str(i)][...], b[str(i)][...], rtol=0, atol=1e-5)
