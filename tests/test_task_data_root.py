"""Task data on the user's machine: configs name their data under ``$ELMO_DATA``, the data root
(``elmo task train --data-root``, or the environment variable)."""

import json
import re
from pathlib import Path

import pytest
from test_task_training import write_ner, write_vectors

from elmo.cli.main import main
from elmo.tasks.config import check_task_paths, load_task_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted([*(ROOT / "configs" / "tasks").glob("*.toml"), *(ROOT / "experiments" / "configs").glob("*.toml")])


def tiny_ner(tmp_path):
    """A data root holding a tiny CoNLL-2003-style copy, and a config that names it as the
    shipped configs do."""
    data = tmp_path / "my data"
    (data / "ner" / "conll2003").mkdir(parents=True)
    write_ner(data / "ner" / "conll2003" / "train.txt", 20, 1)
    write_ner(data / "ner" / "conll2003" / "valid.txt", 6, 2)
    (data / "vectors").mkdir()
    write_vectors(data / "vectors" / "glove.txt")
    config = tmp_path / "ner.toml"
    config.write_text(f"""
task = "tagging"
metric = "span_f1"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "conll2003"
train = "$ELMO_DATA/ner/conll2003/train.txt"
dev = "${{ELMO_DATA}}/ner/conll2003/valid.txt"
vectors = "$ELMO_DATA/vectors/glove.txt"
[model]
hidden = 8
char_filters = 4
[elmo]
enabled = false
[train]
epochs = 1
batch_size = 8
""", encoding="utf-8")
    return data, config


def test_a_task_trains_on_data_under_the_data_root(tmp_path, monkeypatch, capsys):
    data, config = tiny_ner(tmp_path)
    monkeypatch.delenv("ELMO_DATA", raising=False)
    assert main(["task", "train", str(config), "--data-root", str(data), "--no-progress"]) == 0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["data"]
    assert saved["train"]["path"] == f"{data}/ner/conll2003/train.txt"  # the run records where its data was
    assert saved["dev"]["path"] == f"{data}/ner/conll2003/valid.txt"
    assert saved["vectors"] == f"{data}/vectors/glove.txt"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1]

    # $ELMO_DATA does the same; --data-root wins over it.
    monkeypatch.setenv("ELMO_DATA", str(data))
    assert load_task_config(config).data.train.path == f"{data}/ner/conll2003/train.txt"
    assert load_task_config(config, data_root=tmp_path / "other").data.train.path == \
        f"{tmp_path / 'other'}/ner/conll2003/train.txt"


def test_missing_data_names_the_file_and_the_variable(tmp_path, monkeypatch, capsys):
    data, config = tiny_ner(tmp_path)
    monkeypatch.delenv("ELMO_DATA", raising=False)
    assert main(["task", "train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{config}: data.train: $ELMO_DATA/ner/conll2003/train.txt: $ELMO_DATA is not set; set it "
                        f"(or pass --data-root) to the folder that holds your copy of the data")
    assert "\n" not in err

    (data / "ner" / "conll2003" / "valid.txt").unlink()
    monkeypatch.setenv("ELMO_DATA", str(data))
    assert main(["task", "train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{config}: data.dev: {data}/ner/conll2003/valid.txt: no such file or folder (under the data "
                        f"root {data}, from --data-root or $ELMO_DATA)")
    assert not (tmp_path / "run").exists()  # nothing was made
    with pytest.raises(ValueError, match=r"data\.dev: .*valid\.txt: no such file or folder \(under the data root"):
        check_task_paths(load_task_config(config), where=str(config))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_configs_name_their_data_under_the_data_root(path, tmp_path, monkeypatch):
    monkeypatch.delenv("ELMO_DATA", raising=False)
    text = path.read_text(encoding="utf-8")
    assert "../shared" not in re.sub(r"#.*", "", text)  # no path of the development machine
    config = load_task_config(path, data_root=tmp_path)
    paths = [s.path for s in (config.data.train, config.data.dev, config.data.test) if s is not None]
    paths += [config.data.vectors] if config.data.vectors else []
    assert paths and all(p.startswith(f"{tmp_path}/") for p in paths), paths
