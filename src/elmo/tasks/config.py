"""The TOML file that describes one task run: data, model, ELMo settings and training.

Example (``configs/tasks/ner-conll2003.toml``)::

    task = "tagging"                 # tagging | classification | pair | srl | coref | qa
    metric = "span_f1"               # span_f1 | accuracy | srl_f1 | coref_f1 | squad_f1
    output = "runs/ner-elmo"

    [data]
    kind = "conll2003"               # see elmo.tasks.readers.read_dataset
    train = "../shared/data/ner/conll2003/train.txt"
    dev = "../shared/data/ner/conll2003/valid.txt"
    vectors = "../shared/data/vectors/glove.6B.50d.top100k.txt.gz"

    [elmo]
    enabled = true
    placement = "input"              # input | output | both
    layers = "mix"                   # mix | average | top | a layer index
    l2 = 0.001

A split is a path, or a table ``{ path = "...", split = "train" }`` for files that hold several
splits (CoNLL-2000's zip, SICK, the SNLI folder). ``dev_fraction`` carves a dev set out of the
training data when there is none. Relative paths are relative to the directory the command runs
in. Every unknown or mistyped field is an error naming it, and so is a path that is not there
(:func:`check_task_paths`, run before training creates anything).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from elmo.hub.pretrained import DEFAULT_MODEL
from elmo.inference.embed import DEFAULT_BATCH_SIZE
from elmo.inference.states import DEFAULT_STATE
from elmo.tasks.integration import ElmoOptions

TASKS = ("tagging", "classification", "pair", "srl", "coref", "qa")
METRICS = ("span_f1", "accuracy", "srl_f1", "coref_f1", "squad_f1")
# The tasks whose metric is their own and goes with no other task.
OWN_METRICS = {"srl": "srl_f1", "coref": "coref_f1", "qa": "squad_f1"}


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
    chunk_sentences: int = 0  # coref: training documents cut into pieces of at most this many sentences (0: whole)
    train_examples: int = 0  # keep only the first this many training examples, in file order (0: all)


@dataclass
class ModelConfig:
    hidden: int = 100
    dropout: float = 0.5
    char_filters: int = 50
    layers: int = 1  # tagger and SRL BiLSTM layers
    predicate_dim: int = 10  # SRL: size of the predicate-indicator embedding
    crf: bool = True
    freeze_vectors: bool = True
    # Coreference (Lee et al. 2017; see elmo.tasks.coref.CorefModel)
    max_span_width: int = 10
    spans_per_word: float = 0.4
    max_antecedents: int = 50
    feature_dim: int = 20
    ffnn_hidden: int = 150
    mention_loss: float = 0.0
    # Reading comprehension (BiDAF; see elmo.tasks.squad.BiDAF)
    modelling_layers: int = 1
    max_answer_length: int = 30


@dataclass
class BiLMSource:
    """Which biLM gives the ELMo layers: any model source :func:`elmo.hub.load_model` takes (a
    model name, a folder with ``options.json`` + ``weights.hdf5``, a training run directory, a
    checkpoint file, an NLPL ``.zip`` or an ELMoForManyLangs model), and how it embeds (the
    :class:`~elmo.inference.embed.Embedder`'s defaults)."""

    model: str = DEFAULT_MODEL
    state: str = DEFAULT_STATE
    batch_size: int = DEFAULT_BATCH_SIZE


@dataclass
class TrainConfig:
    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 0.001
    patience: int = 4  # epochs without a better dev score before stopping
    grad_clip: float = 5.0
    seed: int = 1


@dataclass
class TaskConfig:
    task: str
    metric: str
    output: str
    data: DataConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    elmo: ElmoOptions = field(default_factory=ElmoOptions)
    bilm: BiLMSource = field(default_factory=BiLMSource)
    train: TrainConfig = field(default_factory=TrainConfig)
    cache_dir: str = "cache/layers"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _build(cls: type, values: Any, source: str, section: str = ""):
    """Instantiate dataclass ``cls`` from a TOML table; errors name ``source`` and the field."""
    label = lambda name: f"{source}: {section + '.' if section else ''}{name}"  # noqa: E731
    if not isinstance(values, dict):
        raise TaskConfigError(f"{source}: {section or 'config'}: expected a table, got {values!r}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TaskConfigError(f"{label(', '.join(unknown))}: unknown field(s); expected some of {', '.join(names)}")
    kwargs = {}
    for name, value in values.items():
        split_field = cls is DataConfig and name in ("train", "dev", "test")
        if split_field and value is None:  # a missing split, as to_dict() writes it
            pass
        elif split_field:
            value = Split(value) if isinstance(value, str) else _build(Split, value, source, f"data.{name}")
        elif cls is TaskConfig and name in SECTIONS:
            value = _build(SECTIONS[name], value, source, name)
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


SECTIONS = {"data": DataConfig, "model": ModelConfig, "elmo": ElmoOptions, "bilm": BiLMSource, "train": TrainConfig}


def task_config_from_dict(values: dict, where: str = "config") -> TaskConfig:
    config = _build(TaskConfig, values, where)
    if config.task not in TASKS:
        raise TaskConfigError(f"{where}: task: expected one of {', '.join(TASKS)}, got {config.task!r}")
    if config.metric not in METRICS:
        raise TaskConfigError(f"{where}: metric: expected one of {', '.join(METRICS)}, got {config.metric!r}")
    for task, metric in OWN_METRICS.items():
        if (config.task == task) != (config.metric == metric):
            raise TaskConfigError(f"{where}: metric: task \"{task}\" goes with metric \"{metric}\" and only with "
                                  f"it (got task {config.task!r}, metric {config.metric!r})")
    if not 0.0 < config.data.train_fraction <= 1.0:
        raise TaskConfigError(f"{where}: data.train_fraction: expected a value in (0, 1], got {config.data.train_fraction}")
    if not 0.0 <= config.data.dev_fraction < 1.0:
        raise TaskConfigError(f"{where}: data.dev_fraction: expected a value in [0, 1), got {config.data.dev_fraction}")
    if config.data.train_examples < 0:
        raise TaskConfigError(f"{where}: data.train_examples: expected 0 (all) or more, got {config.data.train_examples}")
    if config.data.chunk_sentences < 0:
        raise TaskConfigError(f"{where}: data.chunk_sentences: expected 0 (whole documents) or more, "
                              f"got {config.data.chunk_sentences}")
    if config.data.dev is None and config.data.dev_fraction == 0.0:
        raise TaskConfigError(f"{where}: data: give a dev split or a dev_fraction (early stopping needs a dev set)")
    return config


def _where_relative(path: str) -> str:
    """A hint for a relative path that was not found: where it was looked for."""
    return "" if os.path.isabs(path) else f" (relative to the current directory, {os.getcwd()})"


def check_task_paths(config: TaskConfig, where: str = "config") -> None:
    """Raise :class:`TaskConfigError` naming the field and the path when a file the run reads is
    not there: the data splits, the vectors file and (with ELMo) the biLM folder. Training calls
    this before it creates anything, so that a typo costs no run directory and no layer cache."""
    for name in ("train", "dev", "test"):
        split = getattr(config.data, name)
        # A split may be a folder (SNLI) or a file (everything else).
        if split is not None and not os.path.exists(split.path):
            raise TaskConfigError(f"{where}: data.{name}: {split.path}: no such file or folder"
                                  f"{_where_relative(split.path)}")
    vectors = config.data.vectors
    if vectors is not None and not os.path.isfile(vectors):
        raise TaskConfigError(f"{where}: data.vectors: {vectors}: no such file{_where_relative(vectors)}")
    if config.elmo.enabled:
        from elmo.hub.resolve import locate

        try:
            locate(config.bilm.model)  # what the name or path names, without reading or downloading it
        except (ValueError, OSError) as e:
            where_relative = "" if "://" in config.bilm.model else _where_relative(config.bilm.model)
            raise TaskConfigError(f"{where}: bilm.model: {e}{where_relative}") from None


def load_task_config(path: str | os.PathLike, overrides: dict | None = None) -> TaskConfig:
    """Read a TOML task config; ``overrides`` (``{"elmo": {"enabled": False}, ...}``) are merged
    over its tables, for the experiments' variations of one config."""
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
    return task_config_from_dict(values, where=os.fspath(path))


__all__ = ["BiLMSource", "DataConfig", "METRICS", "ModelConfig", "Split", "TASKS", "TaskConfig", "TaskConfigError",
           "TrainConfig", "check_task_paths", "load_task_config", "task_config_from_dict"]
