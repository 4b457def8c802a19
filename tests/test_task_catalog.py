"""The task layer's shape: one Task subclass per family, named in one catalog; a loop that never
asks which task it runs; typed config sections per task; configs of earlier versions read in
today's shape."""

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from elmo.tasks.base import ModelSettings, Task
from elmo.tasks.catalog import DATASET_KINDS, KIND_TASKS, TASKS, make_task, read_dataset
from elmo.tasks.config import (
    TaskConfigError,
    load_task_config,
    task_config_from_dict,
    upgrade_config_dict,
)

ROOT = Path(__file__).parent.parent
TASKS_DIR = ROOT / "src" / "elmo" / "tasks"


def test_each_family_is_one_task_class_named_in_the_catalog():
    for name, cls in TASKS.items():
        assert issubclass(cls, Task) and cls.name == name
        assert dataclasses.is_dataclass(cls.Settings) and issubclass(cls.Settings, ModelSettings)
        assert cls.metrics and all(isinstance(m, str) for m in cls.metrics)
        task = make_task(name)
        assert task.metric == cls.metrics[0] and isinstance(task.settings, cls.Settings)
    # every dataset kind belongs to exactly one family
    kinds = [kind for cls in TASKS.values() for kind in cls.readers]
    assert len(kinds) == len(set(kinds)) and set(kinds) == set(DATASET_KINDS) == set(KIND_TASKS)
    with pytest.raises(ValueError, match="unknown task 'pos'; known: tagging, classification"):
        make_task("pos")
    with pytest.raises(ValueError, match="unknown dataset kind 'x'; known: conll2003, wnut17"):
        read_dataset("x", "path")


def test_the_loop_never_asks_which_task_it_runs():
    """No isinstance switch and no branch on a task's name or metric in the generic modules."""
    names = set(TASKS) | {"pair", "qa"}
    for module in ("training.py", "base.py", "config.py"):
        tree = ast.parse((TASKS_DIR / module).read_text(encoding="utf-8"))
        # isinstance only on plain Python types (a file's content), never on a task's records
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "isinstance":
                types = {n.id for n in ast.walk(call.args[1]) if isinstance(n, ast.Name)}
                assert types <= {"dict", "list", "str", "int", "float", "bool"}, f"{module}:{call.lineno}"
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                text = ast.unparse(node)
                literals = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                assert not (literals & names) and ".task ==" not in text and ".metric ==" not in text, \
                    f"{module}:{node.lineno}: {text}"


def test_an_unknown_model_field_names_the_file_the_section_and_the_field(tmp_path):
    path = tmp_path / "srl.toml"
    path.write_text('task = "srl"\nmetric = "srl_f1"\noutput = "x"\n[data]\nkind = "conll2012-srl"\ntrain = "t"\n'
                    'dev = "d"\n[model]\ncrf = false\nlayers = 2\n', encoding="utf-8")
    with pytest.raises(TaskConfigError, match=rf"{path}: model.crf: unknown field\(s\) of SrlSettings; expected some "
                                              r"of hidden, dropout, char_filters, freeze_vectors, layers, predicate_dim"):
        load_task_config(path)
    # each task has its own settings and defaults
    text = path.read_text().replace("crf = false\n", "")
    path.write_text(text, encoding="utf-8")
    config = load_task_config(path)
    assert type(config.model).__name__ == "SrlSettings" and config.model.layers == 2
    assert config.model.predicate_dim == 10
    with pytest.raises(TaskConfigError, match=r"model.layers: expected a number like 1, got 'two'"):
        load_task_config(path, {"model": {"layers": "two"}})


def test_a_renamed_task_says_its_new_name(tmp_path):
    with pytest.raises(TaskConfigError, match="task: expected one of tagging, .*, got 'pair' \\(called 'entailment' now\\)"):
        task_config_from_dict({"task": "pair", "metric": "accuracy", "output": "x", "data": {}}, where="x.toml")
    with pytest.raises(TaskConfigError, match="x.toml: task: missing field"):
        task_config_from_dict({"metric": "accuracy"}, where="x.toml")


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "tasks").glob("*.toml")), ids=lambda p: p.stem)
def test_old_shaped_config_dicts_upgrade_to_the_shipped_configs(path):
    """What a run of an earlier version wrote to config.json (the flat [model] with every field,
    chunk_sentences in [data], task "pair", no bilm.precision) reads as today's config."""
    config = load_task_config(path)
    today = config.to_dict()
    old = json.loads(json.dumps(today))
    old["task"] = {"entailment": "pair"}.get(old["task"], old["task"])
    flat = {"hidden": 100, "dropout": 0.5, "char_filters": 50, "layers": 1, "predicate_dim": 10, "crf": True,
            "freeze_vectors": True, "max_span_width": 10, "spans_per_word": 0.4, "max_antecedents": 50,
            "feature_dim": 20, "ffnn_hidden": 150, "mention_loss": 0.0, "modelling_layers": 1, "max_answer_length": 30}
    chunk = old["model"].pop("chunk_sentences", 0)
    old["model"] = {**flat, **old["model"]}
    old["data"]["chunk_sentences"] = chunk
    del old["bilm"]["precision"]  # before the field, every biLM ran float32
    assert upgrade_config_dict(old) == today
    assert upgrade_config_dict(today) == today
    assert task_config_from_dict(upgrade_config_dict(old)) == config


def test_kept_results_configs_read_in_todays_shape():
    """The config.json of every kept run (results/tasks) upgrades to a valid config: the
    experiments compare a finished run's settings with the ones they ask for in today's shape."""
    kept = sorted((ROOT / "results" / "tasks").rglob("config.json"))
    if not kept:
        pytest.skip("no kept results")
    for path in kept:
        values = upgrade_config_dict(json.loads(path.read_text(encoding="utf-8")))
        config = task_config_from_dict(values, where=str(path))
        assert config.to_dict() == values, path
