"""The one resolver: every model source, what it names (without reading or downloading it), and
the same error style for each way a source can be wrong."""

import shutil

import pytest
import torch
from conftest import ALLENNLP

from elmo import BiLM, Elmo, Embedder, load_model, save_bilm_tf, save_checkpoint
from elmo.model.weights import load_bilm_tf
from elmo.hub import Location, locate
from elmo.hub.pretrained import PUBLISHED, packaged_model_dir
from elmo.tasks.config import TaskConfigError, check_task_paths, task_config_from_dict

OPTIONS, WEIGHTS = ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5"
ORIGINAL = ("https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/"
            "elmo_2x4096_512_2048cnn_2xhighway_{}")


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Nothing here may reach the network: a download would hit the discard port and fail."""
    monkeypatch.setenv("ELMO_MODELS_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))


def test_locate_names_each_kind_without_reading_or_downloading(allennlp_model, tmp_path):
    folder = tmp_path / "exported"
    save_bilm_tf(allennlp_model, folder)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    save_checkpoint(allennlp_model, tmp_path / "model.pt")
    packaged = packaged_model_dir()
    assert locate(None) == locate("default") == Location(
        "files", "default", path=packaged / "options.json", weights=packaged / "weights.hdf5", folder=packaged)
    for name in PUBLISHED:
        assert locate(name) == Location("published", name, name=name)
    assert locate(ORIGINAL.format("weights.hdf5")).name == "original"
    assert locate(ORIGINAL.format("options.json").rsplit("/", 1)[0] + "/").name == "original"  # the folder
    pair = locate((ORIGINAL.format("options.json"), ORIGINAL.format("weights.hdf5")))
    assert (pair.kind, pair.name) == ("published", "original")
    assert locate((OPTIONS, WEIGHTS)) == Location("files", f"{OPTIONS} + {WEIGHTS}", path=OPTIONS, weights=WEIGHTS)
    assert locate(folder).kind == "files" and locate(folder).folder == folder
    assert locate(tmp_path / "run") == Location("run", str(tmp_path / "run"), path=tmp_path / "run")
    assert locate(tmp_path / "model.pt").kind == "checkpoint"
    assert not (tmp_path / "cache").exists()


def test_every_source_loads_the_same_weights(allennlp_model, tmp_path):
    save_bilm_tf(allennlp_model, tmp_path / "exported")
    save_checkpoint(allennlp_model, tmp_path / "model.pt")
    sources = [(OPTIONS, WEIGHTS), str(tmp_path / "exported"), tmp_path / "exported", tmp_path / "model.pt"]
    for source in sources:
        model = load_model(source)
        assert isinstance(model, BiLM) and not model.training, source
        for (name, a), b in zip(allennlp_model.state_dict().items(), model.state_dict().values()):
            assert torch.equal(a, b), (source, name)
    bias = allennlp_model.forward_layers[0].bias
    assert torch.equal(Embedder.from_pretrained(tmp_path / "model.pt").model.forward_layers[0].bias, bias)
    assert torch.equal(Elmo.from_pretrained(tmp_path / "model.pt").bilm.forward_layers[0].bias, bias)
    packaged = load_model()
    reference = load_bilm_tf(packaged_model_dir() / "options.json", packaged_model_dir() / "weights.hdf5")
    assert all(torch.equal(a, b) for a, b in zip(packaged.parameters(), reference.parameters()))


@pytest.mark.parametrize("source, message", [
    ("huge", "huge: neither a model name (default, small, medium, original, original-5.5b) nor an existing path"),
    ("https://example.org/my-model/", "https://example.org/my-model/: not the URL of a published model "
                                      "(small, medium, original, original-5.5b), a model archive (.zip) or a "
                                      "checkpoint (.pt); pass the URLs of its options and weights files as a pair"),
    (("https://example.org/options.json", "missing.hdf5"), "missing.hdf5: no such weights file"),
])
def test_sources_that_name_no_model_are_one_line_errors(source, message):
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        locate(source)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_paths_that_hold_no_model_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: not a model: expected a folder with options.json and weights.hdf5"):
        locate(tmp_path / "empty")
    shutil.copy(OPTIONS, tmp_path / "options.json")
    with pytest.raises(ValueError, match="options.json: not a model"):
        locate(tmp_path / "options.json")
    with pytest.raises(FileNotFoundError, match="missing.hdf5: no such weights file"):
        locate((OPTIONS, tmp_path / "missing.hdf5"))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ValueError, match="run: a training run directory with no checkpoint yet"):
        load_model(tmp_path / "run")


def test_a_task_config_is_checked_by_the_same_resolver(tmp_path, bilm_dir):
    train = tmp_path / "train.txt"
    train.write_text("x\n")
    values = {"task": "tagging", "metric": "span_f1", "output": str(tmp_path / "out"),
              "data": {"kind": "conll2003", "train": str(train), "dev": str(train)}}
    for good in ("default", "original", ORIGINAL.format("weights.hdf5"), str(bilm_dir)):
        check_task_paths(task_config_from_dict({**values, "bilm": {"model": good}}))  # no download: offline
    with pytest.raises(TaskConfigError, match="bilm.model: https://example.org/m: not the URL of a published model"):
        check_task_paths(task_config_from_dict({**values, "bilm": {"model": "https://example.org/m"}}))
