"""The TOML file that describes one task run: data, model, ELMo settings and training.

Example (``configs/tasks/ner-conll2003.toml``)::

    task = "tagging"                 # a key of elmo.tasks.catalog.TASKS
    metric = "span_f1"               # one of the task's metrics (tagging: span_f1 | accuracy)
    output = "runs/ner-elmo"

    [data]
    kind = "conll2003"               # a dataset kind of the task (elmo.tasks.catalog.read_dataset)
    train = "$ELMO_DATA/ner/conll2003/train.txt"
    dev = "$ELMO_DATA/ner/conll2003/valid.txt"
    vectors = "$ELMO_DATA/vectors/glove.6B.50d.top100k.txt.gz"

    [model]                          # the task's own settings (tagging: elmo.tasks.tagging.TaggingSettings)
    hidden = 100
    crf = true

    [elmo]
    enabled = true
    placement = "input"              # input | output | both
    layers = "mix"                   # mix | average | top | a layer index
    l2 = 0.001

A split is a path, or a table ``{ path = "...", split = "train" }`` for files that hold several
splits (CoNLL-2000's zip, SICK, the SNLI folder). ``dev_fraction`` carves a dev set out of the
training data when there is none. A data path that starts with ``$ELMO_DATA/`` is under the data
root: the folder where the user keeps their copies of the datasets, given by ``data_root`` (``elmo
task train --data-root``) or else the environment variable ``ELMO_DATA`` (the shipped configs name
their data so). Other relative paths are relative to the directory the command runs in. ``[model]`` is typed by the task: each family's ``Settings`` dataclass (a subclass of
:class:`~elmo.tasks.base.ModelSettings`) gives its fields and their defaults. Every unknown or
mistyped field is an error naming the file, the section and the field, and so is a number out of
its range (each section's ``__post_init__``, with :mod:`elmo.checks`) and a path that is not
there (:func:`check_task_paths`, run before training creates anything).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from elmo.checks import check_count, check_number
from elmo.hub.pretrained import DEFAULT_MODEL
from elmo.inference.embed import DEFAULT_BATCH_SIZE
from elmo.inference.precision import DEFAULT_PRECISION, PRECISIONS
from elmo.inference.states import DEFAULT_STATE
from elmo.tasks.base import ModelSettings
from elmo.tasks.catalog import TASKS
from elmo.tasks.integration import ElmoOptions

# The data root in a config's data paths ("$ELMO_DATA/ner/train.txt"), and the variable that sets it.
DATA_ROOT_ENV = "ELMO_DATA"
_DATA_ROOT_PREFIXES = ("$ELMO_DATA/", "${ELMO_DATA}/")

# The largest seed: numpy's generator takes 0 to 2**32 - 1.
SEED_MOST = 2**32 - 1

# Task names of earlier versions, as run directories made by them name their task.
RENAMED_TASKS = {"pair": "entailment"}


class TaskConfigError(ValueError):
    """A task config with a missing, unknown or invalid field (the message names it)."""


@dataclass
class Split:
    path: str
    split: str | None = None


@dataclass
class DataConfig:
    kind: str
    train: Split
    dev: Split | None = None
    test: Split | None = None
    vectors: str | None = None
    dev_fraction: float = 0.0  # taken from the training data when there is no dev split
    train_fraction: float = 1.0  # for sample-efficiency runs: the first shuffled fraction is kept
    train_examples: int = 0  # keep only the first this many training examples, in file order (0: all)


@dataclass
class BiLMSource:
    """Which biLM gives the ELMo layers: any model source :func:`elmo.hub.load_model` takes (a
    model name, a folder with ``options.json`` + ``weights.hdf5``, a training run directory, a
    checkpoint file, an NLPL ``.zip`` or an ELMoForManyLangs model), and how it embeds (the
    :class:`~elmo.inference.embed.Embedder`'s defaults)."""

    model: str = DEFAULT_MODEL
    state: str = DEFAULT_STATE
    batch_size: int = DEFAULT_BATCH_SIZE
    # The biLM's arithmetic (elmo.inference.precision.PRECISIONS). Its layers are cached per
    # precision, so a float32 run and a bfloat16 run never share them.
    precision: str = DEFAULT_PRECISION

    def __post_init__(self):
        check_count(self.batch_size, "bilm.batch_size")
        if self.precision not in PRECISIONS:
            raise ValueError(f"bilm.precision: expected one of {', '.join(PRECISIONS)}, got {self.precision!r}")


@dataclass
class TrainConfig:
    """``[train]``: how the task model trains. ``patience`` 0 stops at the first epoch that does
    not improve the dev score; ``grad_clip`` is the largest gradient norm."""

    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 0.001
    patience: int = 4  # epochs without a better dev score before stopping
    grad_clip: float = 5.0
    seed: int = 1

    def __post_init__(self):
        # Each would otherwise fail late or not at all: a batch size of -1 trained every epoch
        # on no batch and reported success, a seed outside numpy's range failed after the data loaded.
        check_count(self.epochs, "train.epochs")
        check_count(self.batch_size, "train.batch_size")
        check_number(self.learning_rate, "train.learning_rate", 0, above=True)
        check_count(self.patience, "train.patience", 0)
        check_number(self.grad_clip, "train.grad_clip", 0, above=True)
        check_count(self.seed, "train.seed", 0, SEED_MOST)


@dataclass
class TaskConfig:
    """One task run. ``model`` is the task family's own settings (``TASKS[task].Settings``)."""

    task: str
    metric: str
    output: str
    data: DataConfig
    model: ModelSettings = field(default_factory=ModelSettings)
    elmo: ElmoOptions = field(default_factory=ElmoOptions)
    bilm: BiLMSource = field(default_factory=BiLMSource)
    train: TrainConfig = field(default_factory=TrainConfig)
    cache_dir: str = "cache/layers"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls: type, values: Any, source: str, section: str = "", sections: dict | None = None):
    """Instantiate dataclass ``cls`` from a TOML table; errors name ``source``, the section and
    the field. ``sections``: the dataclass of each table of a :class:`TaskConfig`."""
    label = lambda name: f"{source}: {section + '.' if section else ''}{name}"  # noqa: E731
    if not isinstance(values, dict):
        raise TaskConfigError(f"{source}: {section or 'config'}: expected a table, got {values!r}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        owner = f" of {sections['model'].__name__}" if section == "model" and sections else ""
        raise TaskConfigError(f"{label(', '.join(unknown))}: unknown field(s){owner}; "
                              f"expected some of {', '.join(names)}")
    kwargs = {}
    for name, value in values.items():
        split_field = cls is DataConfig and name in ("train", "dev", "test")
        if split_field and value is None:  # a missing split, as to_dict() writes it
            pass
        elif split_field:
            value = Split(value) if isinstance(value, str) else _build(Split, value, source, f"data.{name}")
        elif cls is TaskConfig and name in sections:
            value = _build(sections[name], value, source, name, sections)
        else:
            expected = names[name].default
            if not (value is None and expected is None):
                if isinstance(expected, bool) and not isinstance(value, bool):
                    raise TaskConfigError(f"{label(name)}: expected true or false, got {value!r}")
                if isinstance(expected, float) and isinstance(value, int) and not isinstance(value, bool):
                    value = float(value)
                if isinstance(expected, (int, float)) and not isinstance(expected, bool) \
                        and type(value) is not type(expected):
                    raise TaskConfigError(f"{label(name)}: expected a number like {expected!r}, got {value!r}")
        kwargs[name] = value
    missing = [n for n, f in names.items() if n not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise TaskConfigError(f"{label(', '.join(missing))}: missing field(s)")
    try:
        return cls(**kwargs)
    except ValueError as e:  # the dataclass's own checks name the field
        raise TaskConfigError(f"{source}: {e}") from e


SECTIONS = {"data": DataConfig, "elmo": ElmoOptions, "bilm": BiLMSource, "train": TrainConfig}


def task_config_from_dict(values: dict, where: str = "config") -> TaskConfig:
    """The :class:`TaskConfig` of a parsed TOML file (or ``to_dict()``'s output); ``where`` names
    the file in errors. The task and its metric are checked first, then every section, the
    ``[model]`` section against the task's own settings."""
    if not isinstance(values, dict):
        raise TaskConfigError(f"{where}: expected a table, got {values!r}")
    task, metric = values.get("task"), values.get("metric")
    if task is None:
        raise TaskConfigError(f"{where}: task: missing field; expected one of {', '.join(TASKS)}")
    if not isinstance(task, str) or task not in TASKS:
        hint = f" (called {RENAMED_TASKS[task]!r} now)" if isinstance(task, str) and task in RENAMED_TASKS else ""
        raise TaskConfigError(f"{where}: task: expected one of {', '.join(TASKS)}, got {task!r}{hint}")
    metrics = TASKS[task].metrics
    if metric is not None and metric not in metrics:
        raise TaskConfigError(f"{where}: metric: task {task!r} is scored by {' or '.join(metrics)}, got {metric!r}")
    config = _build(TaskConfig, {"model": {}, **values}, where,
                    sections={**SECTIONS, "model": TASKS[task].Settings})
    if not 0.0 < config.data.train_fraction <= 1.0:
        raise TaskConfigError(f"{where}: data.train_fraction: expected a value in (0, 1], got {config.data.train_fraction}")
    if not 0.0 <= config.data.dev_fraction < 1.0:
        raise TaskConfigError(f"{where}: data.dev_fraction: expected a value in [0, 1), got {config.data.dev_fraction}")
    if config.data.train_examples < 0:
        raise TaskConfigError(f"{where}: data.train_examples: expected 0 (all) or more, got {config.data.train_examples}")
    if config.data.dev is None and config.data.dev_fraction == 0.0:
        raise TaskConfigError(f"{where}: data: give a dev split or a dev_fraction (early stopping needs a dev set)")
    return config


def upgrade_config_dict(values: dict) -> dict:
    """A config dict written by an earlier version (a run's ``config.json``, a checkpoint's
    config) in today's shape: renamed tasks get their new name, coreference's
    ``data.chunk_sentences`` moves to ``model``, the fields of the one flat ``model`` section
    of old that the task's own settings do not have (they were never read by its model) are
    dropped, and a ``bilm`` section from before ``precision`` existed gets float32, which is what
    ran. A dict in today's shape comes back equal."""
    values = copy.deepcopy(values)
    if isinstance(values.get("bilm"), dict):
        values["bilm"].setdefault("precision", DEFAULT_PRECISION)
    task = values.get("task")
    if isinstance(task, str) and task in RENAMED_TASKS:
        task = values["task"] = RENAMED_TASKS[task]
    data = values.get("data")
    chunk = data.pop("chunk_sentences", None) if isinstance(data, dict) else None
    model = values.get("model")
    if task in TASKS and isinstance(model, dict):
        known = {f.name for f in dataclasses.fields(TASKS[task].Settings)}
        values["model"] = {k: v for k, v in model.items() if k in known}
        if chunk is not None and "chunk_sentences" in known:
            values["model"]["chunk_sentences"] = chunk
    return values


def _where_relative(path: str) -> str:
    """A hint for a relative path that was not found: where it was looked for."""
    return "" if os.path.isabs(path) else f" (relative to the current directory, {os.getcwd()})"


def resolve_data_root(given: str | os.PathLike | None = None) -> str | None:
    """The data root: ``given`` (``--data-root``), else ``$ELMO_DATA``, else None."""
    if given is not None:
        return os.fspath(given)
    return os.environ.get(DATA_ROOT_ENV) or None


def _under_root(path: str) -> str | None:
    """The part of ``path`` after a leading ``$ELMO_DATA/``, or None when it has none."""
    for prefix in _DATA_ROOT_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix):]
    return None


def with_data_root(config: TaskConfig, root: str | os.PathLike | None) -> TaskConfig:
    """A copy of ``config`` whose data paths starting with ``$ELMO_DATA/`` are under ``root``
    (``root/ner/train.txt``); with ``root`` None they keep the variable, which
    :func:`check_task_paths` reports as unset."""
    if root is None:
        return config
    root = os.fspath(root).rstrip("/\\") or "/"
    config = copy.deepcopy(config)

    def resolved(path: str) -> str:
        rest = _under_root(path)
        return path if rest is None else f"{root}/{rest}"

    for name in ("train", "dev", "test"):
        split = getattr(config.data, name)
        if split is not None:
            split.path = resolved(split.path)
    if config.data.vectors is not None:
        config.data.vectors = resolved(config.data.vectors)
    return config


def _missing(where: str, field_name: str, path: str, what: str, root: str | None) -> TaskConfigError:
    """The error for a data path that is not there, saying where it was looked for."""
    rest = _under_root(path)
    if rest is not None:  # the variable was never replaced: no data root was given
        return TaskConfigError(f"{where}: {field_name}: {path}: ${DATA_ROOT_ENV} is not set; set it (or pass "
                               f"--data-root) to the folder that holds your copy of the data")
    if root is not None and path.startswith(root.rstrip("/\\") + "/"):
        return TaskConfigError(f"{where}: {field_name}: {path}: no such {what} (under the data root {root}, from "
                               f"--data-root or ${DATA_ROOT_ENV})")
    return TaskConfigError(f"{where}: {field_name}: {path}: no such {what}{_where_relative(path)}")


def check_task_paths(config: TaskConfig, where: str = "config", root: str | os.PathLike | None = None) -> None:
    """Raise :class:`TaskConfigError` naming the field and the path when a file the run reads is
    not there: the data splits, the vectors file and (with ELMo) the biLM folder. Training calls
    this before it creates anything, so that a typo costs no run directory and no layer cache.
    ``root``: the data root the paths were resolved against (default :func:`resolve_data_root`),
    named in the message of a file that is not under it."""
    root = resolve_data_root(root)
    for name in ("train", "dev", "test"):
        split = getattr(config.data, name)
        # A split may be a folder (SNLI) or a file (everything else).
        if split is not None and (_under_root(split.path) is not None or not os.path.exists(split.path)):
            raise _missing(where, f"data.{name}", split.path, "file or folder", root)
    vectors = config.data.vectors
    if vectors is not None and (_under_root(vectors) is not None or not os.path.isfile(vectors)):
        raise _missing(where, "data.vectors", vectors, "file", root)
    if config.elmo.enabled:
        from elmo.hub.resolve import locate

        try:
            locate(config.bilm.model)  # what the name or path names, without reading or downloading it
        except (ValueError, OSError) as e:
            where_relative = "" if "://" in config.bilm.model else _where_relative(config.bilm.model)
            raise TaskConfigError(f"{where}: bilm.model: {e}{where_relative}") from None


def load_task_config(path: str | os.PathLike, overrides: dict | None = None,
                     data_root: str | os.PathLike | None = None) -> TaskConfig:
    """Read a TOML task config; ``overrides`` (``{"elmo": {"enabled": False}, ...}``) are merged
    over its tables, for the experiments' variations of one config. Data paths starting with
    ``$ELMO_DATA/`` are put under ``data_root``, or else under ``$ELMO_DATA``
    (:func:`with_data_root`)."""
    try:
        with open(path, "rb") as f:
            values = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise TaskConfigError(f"{path}: not valid TOML ({e})") from None
    for key, value in (overrides or {}).items():
        if isinstance(value, dict):
            values[key] = {**values.get(key, {}), **value}
        else:
            values[key] = value
    return with_data_root(task_config_from_dict(values, where=os.fspath(path)), resolve_data_root(data_root))


__all__ = ["BiLMSource", "DATA_ROOT_ENV", "DataConfig", "RENAMED_TASKS", "Split", "TaskConfig", "TaskConfigError",
           "TrainConfig", "check_task_paths", "load_task_config", "resolve_data_root", "task_config_from_dict",
           "upgrade_config_dict", "with_data_root"]
