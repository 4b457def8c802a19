"""The opt-in cuDNN backend (issue 37): torch's LSTM kernel for new models trained without
clipping. The gate layouts mapped both ways, parity with the specification on the CPU (where
``nn.LSTM(proj_size=...)`` runs too), the options key, and a trained model exported to bilm-tf's
files read back through the ordinary path."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import FIXTURES

from elmo import Embedder, batch_to_char_ids
from elmo.hub import load_language_model
from elmo.kernels.cudnn_lstm import from_torch_lstm, load_torch_lstm, lstm_cudnn, to_torch_lstm
from elmo.model.config import BiLMConfig, ConfigError
from elmo.model.network import LstmLayer, lstm_plain
from elmo.model.weights import load_bilm_tf
from elmo.lm.model import LanguageModel

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness

CORPUS = FIXTURES / "bilm-tf" / "train" / "data.txt"
VOCAB = FIXTURES / "bilm-tf" / "train" / "vocab.txt"
CLI = [sys.executable, "-m", "elmo.cli.main"]


def cudnn_options(**lstm):
    return {"lstm": {"dim": 24, "projection_dim": 12, "n_layers": 2, "cell_clip": None, "proj_clip": None,
                     "use_skip_connections": True, "backend": "cudnn", **lstm},
            "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8], [3, 8]], "n_highway": 1,
                         "activation": "relu", "n_characters": 262, "max_characters_per_token": 50}}


def random_layer(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    layer = LstmLayer(6, 10, 5, None, None).to(dtype)
    with torch.no_grad():
        layer.bias.uniform_(-1.0, 1.0)
    return layer


def test_gate_layouts_map_both_ways():
    """bilm-tf's i, j, f, o with one bias and +1 on f <-> torch's i, f, g, o with two biases:
    ours -> torch -> ours is bit for bit; torch's own weights come back as one bias b_ih + b_hh - 1."""
    layer = random_layer(torch.float32)
    weights = to_torch_lstm(layer)
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    dim = layer.dim
    i, j, f, o = layer.input_weight.chunk(4)
    assert torch.equal(w_ih, torch.cat([i, f, j, o]))  # torch's g is bilm-tf's j
    assert torch.equal(b_hh, torch.tensor([0.0] * dim + [1.0] * dim + [0.0] * (2 * dim)))  # the forget bias
    assert w_hr is layer.projection
    back = from_torch_lstm(*weights)
    for a, b in zip(back, (layer.input_weight, layer.state_weight, layer.bias, layer.projection)):
        assert torch.equal(a, b)
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(6, 10, proj_size=5)
    other = LstmLayer(6, 10, 5, None, None)
    load_torch_lstm(other, lstm)
    b = lstm.bias_ih_l0 + lstm.bias_hh_l0
    torch.testing.assert_close(other.bias[2 * dim:3 * dim], b[dim:2 * dim] - 1.0)  # f: torch's second block
    torch.testing.assert_close(other.bias[dim:2 * dim], b[2 * dim:3 * dim])  # j: torch's third


def test_torch_lstm_equals_the_specification_values_and_gradients():
    """nn.LSTM(proj_size) with weights from a layer, against lstm_plain without clipping, in
    float64: outputs, final states, and the gradients of the input, the initial state and every
    bilm-tf weight (through the mapping)."""
    layers = [random_layer(seed=s) for s in (2, 3)]
    torch.manual_seed(4)
    inputs = torch.randn(2, 3, 7, 6, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(2, 3, 10, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 3, 7, 5, dtype=torch.float64)
    wrt = [inputs, c0, h0] + [p for layer in layers for p in layer.parameters()]
    mask = torch.ones(3, 7, dtype=torch.bool)
    spec = [lstm_plain(layers[d], inputs[d], mask, (c0[d], h0[d])) for d in range(2)]
    spec_values = (torch.stack([o for o, _ in spec]), torch.stack([s[0] for _, s in spec]),
                   torch.stack([s[1] for _, s in spec]))
    out, (c, h) = lstm_cudnn(layers, inputs.transpose(1, 2), (c0, h0))
    values = (out.transpose(1, 2), c, h)

    def loss(v):
        return (v[0] * weights).sum() + v[1].sum() + (v[2] * 2).sum()

    for a, b in zip(values, spec_values):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(torch.autograd.grad(loss(values), wrt), torch.autograd.grad(loss(spec_values), wrt)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_options_key_round_trips_and_refuses_clipping():
    config = BiLMConfig.from_dict(cudnn_options())
    assert config.lstm.backend == "cudnn" and config.lstm.cell_clip is None
    written = config.to_dict()
    assert written["lstm"]["backend"] == "cudnn"
    assert BiLMConfig.from_dict(written) == config
    ordinary = BiLMConfig.from_dict({**cudnn_options(), "lstm": {k: v for k, v in cudnn_options()["lstm"].items()
                                                                if k != "backend"}})
    assert "backend" not in ordinary.to_dict()["lstm"]  # published files round-trip unchanged
    with pytest.raises(ConfigError, match=r"lstm.backend: cudnn .*has no clipping.*cell_clip is 3"):
        BiLMConfig.from_dict(cudnn_options(cell_clip=3))
    with pytest.raises(ConfigError, match=r"lstm.backend: cudnn .*proj_clip 3"):
        BiLMConfig.from_dict(cudnn_options(proj_clip=3))
    with pytest.raises(ConfigError, match="lstm.backend: expected cudnn"):
        BiLMConfig.from_dict(cudnn_options(backend="tensorrt"))


def test_bilm_tf_and_allennlp_readers_ignore_the_backend_key():
    """bilm-tf reads options['lstm'] with .get, AllenNLP's _ElmoBiLm indexes the keys it needs
    (dim, projection_dim, n_layers, cell_clip, proj_clip, use_skip_connections): neither looks at
    others. This is those readers' access pattern on an exported cuDNN model's options."""
    lstm = BiLMConfig.from_dict(cudnn_options()).to_dict()["lstm"]
    read_by_allennlp = [lstm[k] for k in ("projection_dim", "dim", "n_layers", "cell_clip", "proj_clip")] + [
        lstm.get("use_skip_connections")]
    read_by_bilm_tf = [lstm.get(k) for k in ("dim", "projection_dim", "n_layers", "cell_clip", "proj_clip",
                                             "use_skip_connections")]
    assert read_by_allennlp == [12, 24, 2, None, None, True]
    assert read_by_bilm_tf == [24, 12, 2, None, None, True]


def test_cudnn_options_write_explicit_null_clips():
    """AllenNLP indexes options['lstm']['cell_clip'] and ['proj_clip']: a model without clipping
    writes them as null, not leaves them out; the backend key is written only when set, and a
    clipped model's options are as bilm-tf wrote them."""
    lstm = BiLMConfig.from_dict(cudnn_options()).to_dict()["lstm"]
    assert "cell_clip" in lstm and lstm["cell_clip"] is None
    assert "proj_clip" in lstm and lstm["proj_clip"] is None
    assert lstm["backend"] == "cudnn"
    clipped = cudnn_options(cell_clip=3, proj_clip=3)
    del clipped["lstm"]["backend"]
    assert BiLMConfig.from_dict(clipped).to_dict()["lstm"] == clipped["lstm"]  # no backend key, clips as given


def read_like_allennlp(options_file):
    """What AllenNLP's _ElmoBiLm and _ElmoCharacterEncoder take from an options file, read the
    way they read it: by indexing (a missing key is a KeyError there)."""
    options = json.loads(open(options_file, encoding="utf-8").read())
    lstm, cnn = options["lstm"], options["char_cnn"]
    return {"input_size": lstm["projection_dim"], "hidden_size": lstm["projection_dim"], "cell_size": lstm["dim"],
            "num_layers": lstm["n_layers"], "memory_cell_clip_value": lstm["cell_clip"],
            "state_projection_clip_value": lstm["proj_clip"], "filters": cnn["filters"],
            "n_highway": cnn["n_highway"], "char_embed_dim": cnn["embedding"]["dim"],
            "n_characters": cnn["n_characters"], "activation": cnn["activation"]}


def test_cudnn_model_trains_through_torchs_kernel_and_the_language_model_matches_the_fused_path():
    torch.manual_seed(5)
    config = BiLMConfig.from_dict(cudnn_options())
    cudnn = LanguageModel(config, 30).train()
    assert cudnn.bilm.lstm_path == "cudnn"
    fused = LanguageModel(config, 30, lstm_path="fused").train()
    fused.load_state_dict(cudnn.state_dict())
    generator = torch.Generator().manual_seed(0)

    def batch():
        ids = torch.randint(1, 262, (3, 5, 50), generator=generator)
        ids[..., 7:] = 261
        return {"char_ids": ids, "targets": torch.randint(0, 30, (3, 5), generator=generator),
                "mask": torch.ones(3, 5, dtype=torch.bool)}

    forward_batch, backward_batch = batch(), batch()
    state = cudnn.bilm.zero_state(3)
    results = []
    for model in (cudnn, fused):
        torch.manual_seed(6)
        nll_f, nll_b, new_state = model(forward_batch, backward_batch, state, dropout=0.2, full=True)
        grads = torch.autograd.grad(nll_f.mean() + nll_b.mean(), list(model.parameters()))
        results.append(([nll_f, nll_b, new_state.c, new_state.h], grads))
    for a, b in zip(results[0][0], results[1][0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # several processes: CI runs it in its slow pass
def test_a_trained_cudnn_model_exported_to_bilm_tf_files_embeds_the_same_through_the_spec(tmp_path):
    """Train a cuDNN model with `elmo train` (a few steps on the CPU), export it, load the
    bilm-tf files with the ordinary loader, and embed through the plain path (the specification):
    the vectors are the trained model's own (its cuDNN path, values of BiLM.forward)."""
    options = tmp_path / "cudnn.json"
    tiny = json.loads(open(FIXTURES.parent.parent / "src" / "elmo" / "resources" / "presets" / "tiny.json").read())
    tiny["lstm"].update({"cell_clip": None, "proj_clip": None, "backend": "cudnn", "dim": 32, "projection_dim": 16})
    options.write_text(json.dumps(tiny))
    run, out = tmp_path / "run", tmp_path / "exported"
    subprocess.run([*CLI, "train", "--train", str(CORPUS), "--vocab", str(VOCAB), "--config", str(options),
                    "--output", str(run), "--max-tokens", "640", "--batch-size", "8", "--unroll-steps", "10",
                    "--no-progress"], check=True, capture_output=True)
    subprocess.run([*CLI, "export", str(run), "--output", str(out)], check=True, capture_output=True)
    exported = json.loads((out / "options.json").read_text())
    assert exported["lstm"]["backend"] == "cudnn"
    text = (out / "options.json").read_text()
    assert '"cell_clip": null' in text and '"proj_clip": null' in text  # explicit, for AllenNLP's indexing
    read = read_like_allennlp(out / "options.json")
    assert read["memory_cell_clip_value"] is None and read["state_projection_clip_value"] is None
    assert (read["cell_size"], read["hidden_size"]) == (32, 16)
    trained, _ = load_language_model(run)
    trained_bilm = trained.bilm.eval()
    assert trained_bilm.lstm_path == "cudnn"
    spec = load_bilm_tf(out / "options.json", out / "weights.hdf5").eval()
    spec.fast = False
    assert spec.lstm_path == "plain"
    sentences = [["The", "cat", "sat"], ["a"] * 9, []]
    ids, mask = batch_to_char_ids(sentences)
    with torch.no_grad():
        ours = trained_bilm(ids, torch.ones_like(mask)).layers  # full rows: the cuDNN kernel runs
        theirs = spec(ids, torch.ones_like(mask)).layers
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    vectors = Embedder(load_bilm_tf(out / "options.json", out / "weights.hdf5")).embed_sentences(sentences)
    plain = Embedder(spec).embed_sentences(sentences)
    for a, b in zip(vectors, plain):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    # AllenNLP's own API (our drop-in) on the exported pair: the same layers as the trained model.
    from elmo.allennlp import ElmoEmbedder

    allennlp = ElmoEmbedder(str(out / "options.json"), str(out / "weights.hdf5"), state="warm")  # as Embedder
    allennlp_vectors = allennlp.embed_batch(sentences[:2])
    for a, b in zip(allennlp_vectors, vectors[:2]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
