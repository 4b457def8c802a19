"""The model shipped in the package: it loads, embeds, is the default everywhere, and makes sense."""

import h5py
import numpy as np
import pytest
import torch

from elmo import Elmo, Embedder
from elmo.cli.main import main
from elmo.hub import load_model
from elmo.hub.pretrained import model_files, packaged_model_dir

MAX_PACKAGED_BYTES = 60 * 1024 * 1024


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def test_packaged_files_are_complete_and_small():
    folder = packaged_model_dir()
    names = {"options.json", "weights.hdf5", "softmax_weights.hdf5", "vocab.txt", "MODEL_CARD.md"}
    assert names <= {p.name for p in folder.iterdir()}
    assert sum(p.stat().st_size for p in folder.iterdir()) < MAX_PACKAGED_BYTES


def test_float16_storage_loads_as_float32():
    _, weights = model_files()
    with h5py.File(weights, "r") as f:
        assert f["CNN_proj/W_proj"].dtype == np.float16
    model = load_model()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not model.training


def test_embedder_and_elmo_default_to_the_packaged_model(embedder):
    vectors = embedder.embed_sentences(["The cat sat on the mat ."])
    dim = 2 * embedder.model.config.lstm.projection_dim
    assert vectors[0].shape == (embedder.model.config.n_output_layers, 7, dim)
    assert np.isfinite(vectors[0]).all() and np.abs(vectors[0]).max() > 0
    elmo = Elmo(dropout=0.0)
    out = elmo.embed([["The", "cat", "sat", "on", "the", "mat", "."]])
    assert out.representations[0].shape == (1, 7, dim)
    # Same weights as the Embedder's: the mix of equal weights is the average of the layers.
    np.testing.assert_allclose(out.representations[0][0].detach().numpy(), vectors[0].mean(axis=0), atol=1e-5)


def _play_vector(embedder, sentence: str, layer: int) -> np.ndarray:
    tokens = sentence.split()
    return embedder.embed_sentences([tokens])[0][layer, tokens.index("play")]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("layer", [1, 2])
def test_play_in_sports_is_nearer_to_sports_than_to_theatre(embedder, layer):
    sports = ["The children went outside to play football in the park .",
              "They play soccer every weekend with their friends ."]
    theatre = ["We saw a play at the theatre last night .",
               "The actors rehearsed the play on the stage for weeks ."]
    s1, s2 = (_play_vector(embedder, s, layer) for s in sports)
    t1, t2 = (_play_vector(embedder, s, layer) for s in theatre)
    assert _cosine(s1, s2) > _cosine(s1, t1)
    assert _cosine(s1, s2) > _cosine(s1, t2)
    assert _cosine(t1, t2) > _cosine(t1, s2)
    # The context-independent token layer cannot tell the senses apart.
    assert _cosine(_play_vector(embedder, sports[0], 0), _play_vector(embedder, theatre[0], 0)) == pytest.approx(1.0)


def test_cli_embeds_with_the_default_model_and_prints_without_output(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("A short sentence .\nAnother one\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(src), str(out)]) == 0
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 4, 256) and f["1"].shape == (3, 2, 256)
    assert main(["embed", str(src)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("sentence 0: 4 tokens, array (3, 4, 256)")
    assert [line.split()[0] for line in printed[1:5]] == ["A", "short", "sentence", "."]
    assert printed[5].startswith("sentence 1: 2 tokens")


def test_the_readme_shows_what_the_packaged_model_prints(capsys):
    """The README's sample output is the packaged model's own: re-packaging a model without
    updating it fails here."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    assert main(["embed", str(root / "examples" / "sentences.txt")]) == 0
    printed = capsys.readouterr().out.splitlines()
    readme = (root / "README.md").read_text(encoding="utf-8").splitlines()
    start = readme.index(printed[0])
    shown = readme[start:readme.index("...", start)]
    assert len(shown) >= 5 and shown == printed[:len(shown)]


def test_cli_rejects_half_a_model_and_two_models(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    options, weights = model_files()
    assert main(["embed", str(src), "--options", str(options)]) == 2
    assert "--options and --weights go together" in capsys.readouterr().err
    assert main(["embed", str(src), "--options", str(options), "--weights", str(weights), "--model", "small"]) == 2
    assert "alternatives" in capsys.readouterr().err


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown name 'huge'.*default, small, medium, original, original-5.5b"):
        model_files("huge")
