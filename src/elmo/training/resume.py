"""The resume policy of a training run: what a run directory fixes (:class:`PreviousRun`, from its
newest readable checkpoint or the settings it was started with), which settings may change on
``--resume`` (:data:`CHANGEABLE_ON_RESUME`) and which may not (:data:`FIXED_ON_RESUME`, the
architecture, the vocabulary, the data, the seed, an AdamW run's length), and how a run directory
from before runs were marked is recognised.
"""

from __future__ import annotations

import os
import types
import typing
from dataclasses import dataclass, fields

from elmo.fileio import check_folder, owner_id, remove_owned_folder, temporary_target
from elmo.hub.checkpoints import VOCAB_FILE, checkpoint_paths
from elmo.jsonio import field as json_field, read_json
from elmo.model.config import BiLMConfig
from elmo.model.vocab import Vocabulary
from elmo.training.recipe import TrainSettings, load_config_spec, resolve_config, run_steps

SETTINGS_FILE = "train_settings.json"

# Hyperparameters a run keeps for its whole life, as (TrainSettings field, training key of the
# config, command-line option): on --resume, a value given again must equal the run's.
FIXED_ON_RESUME = (("batch_size", "batch_size", "--batch-size"), ("unroll_steps", "unroll_steps", "--unroll-steps"),
                   ("optimizer", "optimizer", "--optimizer"), ("learning_rate", "learning_rate", "--learning-rate"),
                   ("warmup_steps", "warmup_steps", "--warmup-steps"), ("dropout", "dropout", "--dropout"),
                   ("n_negative_samples", "n_negative_samples_batch", "--negative-samples"))
# What may differ on --resume: how often the run saves, logs and evaluates, where it runs, and
# (Adagrad only, whose learning rate does not depend on it) its length. Everything else --
# --config, the hyperparameters above, --seed, --vocab, the training data -- is the run's.
CHANGEABLE_ON_RESUME = ("--checkpoint-every", "--keep-checkpoints", "--log-every", "--heldout", "--eval-every",
                        "--eval-targets", "--device", "--bf16/--no-bf16", "--prefetch", "--deterministic", "--gpus",
                        "--processes", "--threads", "--progress/--no-progress", "--lstm-path", "--compile-cells",
                        "--cuda-graphs",
                        "--max-tokens/--epochs (Adagrad)")


def describe_architecture(config: BiLMConfig) -> str:
    """A config's architecture in words, for a conflict message."""
    lstm, cnn = config.lstm, config.char_cnn
    return (f"LSTM {lstm.n_layers}x{lstm.dim}_{lstm.projection_dim}, {cnn.n_filters} CNN filters, "
            f"{cnn.n_highway} highway")


def architecture(config: BiLMConfig) -> tuple:
    """What a resumed run's ``--config`` must agree on: the LSTM and char-CNN sections."""
    options = config.to_dict()
    return options["lstm"], options["char_cnn"]


@dataclass
class PreviousRun:
    """What a run directory fixes for ``--resume``: from its newest readable checkpoint, or, when
    it was stopped before the first one, from the settings it was started with."""

    config: BiLMConfig
    vocab: list[str] | None
    seed: int | None  # None: not recorded (checkpoints older than these fields)
    max_steps: int | None
    step: int
    settings: dict | None  # train_settings.json, when present


RUN_KIND = "training run"  # the kind in the marker of a run directory (elmo.fileio.claim_folder)


def is_run_from_before_markers(folder: str) -> bool:
    """Whether ``folder``, without elmo's marker, is a run directory made before runs were
    marked: it has the ``train_settings.json`` every run writes when it starts, or checkpoints.
    (A folder of someone's own ``options.json`` and ``metrics.csv`` is not one.)"""
    try:
        recorded = read_json(os.path.join(folder, SETTINGS_FILE))
    except (OSError, ValueError):
        recorded = None
    if isinstance(recorded, dict) and {"train", "output"} <= recorded.keys():
        return True
    return bool(checkpoint_paths(folder))


def _run_entry(name: str) -> bool:
    """Whether ``name`` (relative to a run directory) is something a training run writes there."""
    top, _, rest = name.partition("/")
    if not rest:
        return name in {"options.json", VOCAB_FILE, SETTINGS_FILE, "metrics.csv", "checkpoints", "tensorboard"}
    if top == "tensorboard":
        return "/" not in rest and rest.startswith("events.out.tfevents.")
    if top == "checkpoints":
        name = temporary_target(rest) or rest
        return name.startswith("step-") and name.endswith(".pt") and "/" not in name
    return False


def discard_run(run_dir: str | os.PathLike) -> bool:
    """Delete the run directory ``run_dir`` to start a run over in it (``elmo train --force``):
    only one elmo made (its marker, or a run from before the marker) holding nothing but what a
    run writes; anything else raises :class:`elmo.fileio.ForeignFolderError` naming what is in
    the way, and nothing is deleted. Returns whether there was a run to delete."""
    def check(folder: str) -> str | None:
        check_folder(folder, RUN_KIND, recognise=is_run_from_before_markers, allowed=_run_entry, option="--output")
        return owner_id(folder)

    if not check_folder(run_dir, RUN_KIND, recognise=is_run_from_before_markers, allowed=_run_entry,
                        option="--output"):
        return False
    remove_owned_folder(run_dir, check)
    return True


def _settings_schema() -> dict[str, tuple[type, ...]]:
    """The JSON types of each field of ``train_settings.json``: those of :class:`TrainSettings`'s
    annotations (``int | None`` -> int or null, ``list[str]`` -> an array), and the fields the
    run adds (``seed``, ``config``)."""
    schema = {}
    for name, hint in typing.get_type_hints(TrainSettings).items():
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        schema[name] = tuple(typing.get_origin(a) or a for a in (typing.get_args(hint) if union else (hint,)))
    schema["train"] += (str,)  # one shard given as a string
    return schema


def read_settings(run_dir: str) -> dict | None:
    """The settings a run was started with (its ``train_settings.json``), None without the file.
    A file that is not one (unreadable, out of :mod:`elmo.jsonio`'s bounds, or a field of the
    wrong type) raises :class:`elmo.jsonio.JSONFileError` naming the file and the field: a
    resume never guesses what a run was started with."""
    path = os.path.join(run_dir, SETTINGS_FILE)
    if not os.path.isfile(path):
        return None
    recorded = read_json(path)
    for name, kinds in _settings_schema().items():
        json_field(recorded, name, kinds, path, required=False)
    return recorded


def previous_run(settings: TrainSettings, payload: dict | None, base: BiLMConfig | None, vocab_size: int,
                 n_train_tokens: int) -> PreviousRun | None:
    """What the run directory ``settings.output`` fixes for a resume (None: there is no run there
    yet): from ``payload``, its newest readable checkpoint, else from the settings it was started
    with (``base``: the config of the model fine-tuned, if any; ``vocab_size`` and
    ``n_train_tokens``: this session's vocabulary and training data)."""
    s = settings
    recorded = read_settings(s.output)
    if payload is not None:
        config = BiLMConfig.from_dict(payload["config"])
        vocab, step = payload["vocab"], payload["step"]
        seed, max_steps = payload.get("seed"), payload.get("max_steps")
    elif recorded is not None:
        # Stopped before its first checkpoint: nothing is trained yet, but the run keeps the
        # settings it was started with.
        names = {f.name for f in fields(TrainSettings)}
        started = TrainSettings(**{k: v for k, v in recorded.items() if k in names})
        config = resolve_config(started, base, vocab_size, n_train_tokens)
        vocab_path = os.path.join(s.output, VOCAB_FILE)
        vocab = Vocabulary.from_file(vocab_path).words if os.path.isfile(vocab_path) else None
        step, seed, max_steps = 0, None, None
    else:
        return None
    if recorded is not None:
        # Checkpoints written before the seed and length were stored: the started settings have them.
        if seed is None:
            seed = recorded.get("seed")
        if max_steps is None:
            t = config.training
            max_steps = run_steps(recorded.get("max_tokens"), recorded.get("epochs"),
                                  t.get("n_train_tokens", n_train_tokens), t["batch_size"] * t["unroll_steps"])
    return PreviousRun(config, vocab, seed, max_steps, step, recorded)


def resume_conflicts(settings: TrainSettings, previous: PreviousRun, vocab: Vocabulary,
                     n_train_tokens: int) -> list[str]:
    """Each setting given for the resume that differs from the run's, as ``option: the run's
    value, the given value`` (``vocab`` and ``n_train_tokens``: this session's)."""
    s, t = settings, previous.config.training
    conflicts = []
    if previous.vocab is not None and previous.vocab != vocab.words:
        option = f"--vocab {s.vocab}" if s.init_from is None else f"the vocabulary of {s.init_from}"
        differ = next((i for i, (a, b) in enumerate(zip(previous.vocab, vocab.words)) if a != b),
                      min(len(previous.vocab), len(vocab.words)))
        here = repr(vocab.words[differ]) if differ < len(vocab) else "nothing"
        there = repr(previous.vocab[differ]) if differ < len(previous.vocab) else "nothing"
        conflicts.append(f"{option}: {len(vocab)} words, the run's {len(previous.vocab)} (word {differ} is "
                         f"{here} here, {there} in the run)")
    if t.get("n_train_tokens", n_train_tokens) != n_train_tokens:
        shards = s.train if isinstance(s.train, str) else " ".join(s.train)
        conflicts.append(f"--train {shards}: {n_train_tokens} training tokens, the run's shards "
                         f"held {t['n_train_tokens']}")
    if s.config is not None:
        given = load_config_spec(s.config)
        if architecture(given) != architecture(previous.config):
            started = (previous.settings or {}).get("config") or "its options.json"
            conflicts.append(f"--config: the run's is {started} ({describe_architecture(previous.config)}), "
                             f"got {s.config} ({describe_architecture(given)})")
    for name, key, option in FIXED_ON_RESUME:
        value = getattr(s, name)
        if value is not None and value != t.get(key):
            run_value = t.get(key, "unset (the default)")
            conflicts.append(f"{option}: the run's is {run_value}, got {value}")
    if s.seed is not None and previous.seed is not None and s.seed != previous.seed:
        conflicts.append(f"--seed: the run's is {previous.seed}, got {s.seed}")
    if (s.max_tokens is not None or s.epochs is not None) and previous.max_steps is not None \
            and t["optimizer"] != "adagrad":
        steps = run_steps(s.max_tokens, s.epochs, n_train_tokens, t["batch_size"] * t["unroll_steps"])
        if steps != previous.max_steps:
            conflicts.append(f"{length_option(s)}: the run's length is {previous.max_steps} steps, this "
                             f"gives {steps} ({t['optimizer']}'s learning-rate schedule is fixed by the length)")
    return conflicts


def length_option(settings: TrainSettings) -> str:
    """The option that gave the run's length, as given: ``--max-tokens N`` or ``--epochs E``."""
    s = settings
    return f"--max-tokens {s.max_tokens}" if s.max_tokens is not None else f"--epochs {s.epochs}"
