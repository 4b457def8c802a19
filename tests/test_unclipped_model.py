"""Models without clipping (``cell_clip`` and ``proj_clip`` null), as options files that say
``"backend": "cudnn"`` describe them: the options key round-trips and refuses clipping, the files
stay readable by bilm-tf's and AllenNLP's readers, such a model trains on the fused path equal to
the specification, and a trained one exported to bilm-tf's files embeds the same through it."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import FIXTURES

from elmo import Embedder, batch_to_char_ids
from elmo.hub import load_language_model
from elmo.model.config import BiLMConfig, ConfigError
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


def test_an_unclipped_model_trains_on_the_fused_path_as_the_specification_does():
    """Values and gradients of the language model's loss, fused path against the plain one, on a
    model without clipping (the fused cell's clip branches off), dropout drawn alike. (Clipping's
    own branches are tests/test_fused_lstm.py's.)"""
    torch.manual_seed(5)
    config = BiLMConfig.from_dict(cudnn_options())
    fused = LanguageModel(config, 30).train()
    assert fused.bilm.lstm_path == "fused"  # the default, whatever the backend key says
    plain = LanguageModel(config, 30, lstm_path="plain").train()
    plain.load_state_dict(fused.state_dict())
    generator = torch.Generator().manual_seed(0)

    def batch():
        ids = torch.randint(1, 262, (3, 5, 50), generator=generator)
        ids[..., 7:] = 261
        return {"char_ids": ids, "targets": torch.randint(0, 30, (3, 5), generator=generator),
                "mask": torch.ones(3, 5, dtype=torch.bool)}

    forward_batch, backward_batch = batch(), batch()
    state = fused.bilm.zero_state(3)
    results = []
    for model in (fused, plain):
        torch.manual_seed(6)
        nll_f, nll_b, new_state = model(forward_batch, backward_batch, state, dropout=0.2, full=True)
        grads = torch.autograd.grad(nll_f.mean() + nll_b.mean(), list(model.parameters()))
        results.append(([nll_f, nll_b, new_state.c, new_state.h], grads))
    for a, b in zip(results[0][0], results[1][0]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # several processes: CI runs it in its slow pass
def test_a_trained_unclipped_model_exported_to_bilm_tf_files_embeds_the_same_through_the_spec(tmp_path):
    """Train a model without clipping with `elmo train` (a few steps on the CPU), export it, load
    the bilm-tf files with the ordinary loader, and embed through the plain path (the
    specification): the vectors are the trained model's own (its fused path)."""
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
    assert trained_bilm.lstm_path == "fused"
    spec = load_bilm_tf(out / "options.json", out / "weights.hdf5").eval()
    spec.fast = False
    assert spec.lstm_path == "plain"
    sentences = [["The", "cat", "sat"], ["a"] * 9, []]
    ids, mask = batch_to_char_ids(sentences)
    with torch.no_grad():
        ours = trained_bilm(ids, torch.ones_like(mask)).layers
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
