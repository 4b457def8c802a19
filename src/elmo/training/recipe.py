"""The biLM training recipe and what a run is asked to do: bilm-tf's :class:`Recipe` (the
training fields a config leaves out), :class:`TrainSettings` (what ``elmo train`` / ``elmo
finetune`` are given, checked by :meth:`TrainSettings.validate`), :func:`resolve_config` (the
run's config from a preset or a model's, the recipe and the settings) and the fine-tuning batch
rule (:func:`finetune_batch_size`). Nothing here reads data or touches a run directory.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from elmo.checks import check_count, check_number
from elmo.devices import DEFAULT_DEVICE, resolve_device
from elmo.model.config import PRESETS, BiLMConfig, ConfigError, preset_config
from elmo.model.network import DEFAULT_LSTM_PATH, LSTM_PATHS


@dataclass(frozen=True)
class Recipe:
    """bilm-tf's training recipe: the value of each training field that a config (a preset, an
    ``options.json``) leaves out, and the optimizers' own defaults. A preset states only where it
    departs from this (``tiny``: batch 32, 2,048 negatives)."""

    batch_size: int = 128
    unroll_steps: int = 20
    dropout: float = 0.1
    n_negative_samples_batch: int = 8192  # 0: the full softmax
    all_clip_norm_val: float = 10.0
    optimizer: str = "adagrad"
    adagrad_learning_rate: float = 0.2
    adamw_learning_rate: float = 1e-3
    adamw_weight_decay: float = 0.01
    max_warmup_steps: int = 1000  # AdamW warm-up: this many steps, or a tenth of a shorter run

    def learning_rate(self, optimizer: str) -> float:
        return self.adagrad_learning_rate if optimizer == "adagrad" else self.adamw_learning_rate


RECIPE = Recipe()
# The training fields a run's config always has, from RECIPE where its base config lacks them.
RECIPE_FIELDS = ("batch_size", "unroll_steps", "dropout", "n_negative_samples_batch", "all_clip_norm_val", "optimizer")
OPTIMIZERS = ("adagrad", "adamw")
DEFAULT_PRESET = "tiny"

# The fine-tuning batch rule (docs/training.md, "Fine-tune on your domain"): without --batch-size, a
# fine-tune takes the largest power of two of rows that still makes FINETUNE_UPDATES optimizer
# updates over the run's tokens, at least FINETUNE_MIN_BATCH rows, and at most the model's
# pretraining batch (its options.json) or, on a CPU, CPU_MAX_BATCH: a CPU trains no faster per
# token with bigger batches, so there a bigger batch only means fewer updates.
FINETUNE_UPDATES = 500
FINETUNE_MIN_BATCH = 16
CPU_MAX_BATCH = 32


def finetune_batch_size(run_tokens: int, unroll_steps: int, pretraining_batch: int,
                        device: str | torch.device) -> tuple[int, str]:
    """The fine-tuning rule's batch size (rows) for a run of ``run_tokens`` tokens per direction
    in windows of ``unroll_steps``, and why, in words."""
    cap, capped_by = pretraining_batch, "the model's pretraining batch"
    if torch.device(device).type == "cpu" and CPU_MAX_BATCH < cap:
        cap, capped_by = CPU_MAX_BATCH, "the most for a CPU"
    wanted = run_tokens / (unroll_steps * FINETUNE_UPDATES)
    power = 1 << math.floor(math.log2(wanted)) if wanted >= 1 else 0
    batch = max(FINETUNE_MIN_BATCH, power)
    if batch >= cap:
        return cap, f"{cap} rows, {capped_by}"
    if power < FINETUNE_MIN_BATCH:
        return batch, (f"{batch} rows, the rule's smallest batch: {run_tokens:,} tokens are too few for "
                       f"{FINETUNE_UPDATES} updates")
    return batch, f"the largest power of two that makes at least {FINETUNE_UPDATES} updates of {run_tokens:,} tokens"




@dataclass
class TrainSettings:
    """What ``elmo train`` / ``elmo finetune`` are asked to do. ``None`` means: take the value
    from the config's training fields (the preset's, or the model's being fine-tuned), or on
    ``resume`` the run's own. :meth:`validate` names a bad value by its command-line option."""

    train: list[str]
    output: str
    vocab: str | None = None
    config: str | None = None  # None: "tiny" (not fine-tuning), or the run's on resume
    init_from: str | None = None  # fine-tune: a run directory or an exported model
    max_tokens: int | None = None
    epochs: float | None = None  # neither: one epoch, or the run's length on resume
    batch_size: int | None = None
    unroll_steps: int | None = None
    optimizer: str | None = None
    learning_rate: float | None = None
    dropout: float | None = None
    n_negative_samples: int | None = None  # 0: full softmax
    warmup_steps: int | None = None
    seed: int | None = None  # None: 0, or the run's on resume
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    log_every: int = 10
    heldout: list[str] | None = None
    eval_every: int = 0
    eval_targets: int = 50_000
    device: str = DEFAULT_DEVICE
    bf16: bool | None = None  # None: on for CUDA, off on CPU
    prefetch: int | None = None  # batches built ahead in a thread; 0: none; None: 2 on CUDA, 0 on CPU
    deterministic: bool = False  # reproducible GPU kernels (see use_deterministic_kernels)
    lstm_path: str | None = None  # how the LSTM trains (elmo.model.network.LSTM_PATHS); None: the default
    compile_cells: bool = False  # the fused path's pointwise functions through torch.compile
    cuda_graphs: bool = False  # the LSTM of each full window as a CUDA graph (LanguageModel.use_cuda_graphs)
    resume: bool = False
    progress: bool | None = None  # elmo.progress: None the rule, True a bar anywhere, False none

    def validate(self) -> None:
        """Raise ValueError naming the option and the bad value for anything that would fail
        mid-run, divide by zero or be silently ignored. Reads no data and writes nothing, so a
        run refused here leaves no run directory behind."""
        if not self.train:
            raise ValueError("--train: no training shards given")
        if not self.output:
            raise ValueError("--output: no run directory given")
        if self.init_from is None and self.vocab is None:
            raise ValueError("--vocab: a vocabulary is needed (make one with elmo vocab)")
        if self.config is not None:
            if self.init_from is not None:
                raise ValueError(f"--config {self.config}: fine-tuning keeps the architecture of the model "
                                 f"it starts from ({self.init_from}); give no config")
            if self.config not in PRESETS and not os.path.isfile(self.config):
                raise ValueError(f"--config: {self.config!r} is neither a preset ({', '.join(PRESETS)}) "
                                 f"nor an options.json file that exists")
        if self.max_tokens is not None and self.epochs is not None:
            raise ValueError(f"--max-tokens {self.max_tokens} and --epochs {self.epochs}: give one, not both")
        if self.max_tokens is not None:
            check_count(self.max_tokens, "--max-tokens")
        if self.epochs is not None:
            check_number(self.epochs, "--epochs", 0, above=True)
        for option, value, least in (("--batch-size", self.batch_size, 1), ("--unroll-steps", self.unroll_steps, 1),
                                     ("--negative-samples", self.n_negative_samples, 0),
                                     ("--warmup-steps", self.warmup_steps, 0), ("--seed", self.seed, 0),
                                     ("--checkpoint-every", self.checkpoint_every, 1),
                                     ("--keep-checkpoints", self.keep_checkpoints, 1),
                                     ("--log-every", self.log_every, 1), ("--eval-every", self.eval_every, 0),
                                     ("--eval-targets", self.eval_targets, 1), ("--prefetch", self.prefetch, 0)):
            if value is not None:  # None: the config's value, or the run's on resume
                check_count(value, option, least)
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"--optimizer: expected {' or '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.learning_rate is not None:
            check_number(self.learning_rate, "--learning-rate", 0, above=True)
        if self.dropout is not None:
            check_number(self.dropout, "--dropout", 0, below=1)
        if self.eval_every and not self.heldout:
            raise ValueError(f"--eval-every {self.eval_every}: there is nothing to evaluate on; give --heldout shards")
        if self.lstm_path is not None and self.lstm_path not in LSTM_PATHS:
            raise ValueError(f"--lstm-path: expected {', '.join(LSTM_PATHS)}, got {self.lstm_path!r}")
        device = resolve_device(self.device, option="--device")
        if self.cuda_graphs:
            if device.type != "cuda":
                raise ValueError(f"--cuda-graphs: CUDA graphs need a GPU; --device is {self.device}")
            if (self.lstm_path or DEFAULT_LSTM_PATH) != "fused":
                raise ValueError(f"--cuda-graphs captures the fused LSTM path, not --lstm-path {self.lstm_path}")


def load_config_spec(spec: str) -> BiLMConfig:
    """The config ``--config`` names: a preset or an ``options.json`` path."""
    return preset_config(spec) if spec in PRESETS else BiLMConfig.from_json(spec)


def resolve_config(settings: TrainSettings, base: BiLMConfig | None, vocab_size: int, n_train_tokens: int) -> BiLMConfig:
    """The run's config: the preset/options file (or the fine-tuned model's), :data:`RECIPE` for
    the training fields it lacks, the settings' overrides, the fine-tuning batch rule
    (:func:`finetune_batch_size`) when fine-tuning without a batch size, and the counts measured
    from the data written into its training fields."""
    if base is None:
        base = load_config_spec(settings.config or DEFAULT_PRESET)
    training = dict(base.training)
    for key in RECIPE_FIELDS:
        training.setdefault(key, getattr(RECIPE, key))
    if settings.init_from is not None and settings.batch_size is None:
        unroll = settings.unroll_steps or training["unroll_steps"]
        training["batch_size"] = finetune_batch_size(run_tokens(settings.max_tokens, settings.epochs, n_train_tokens),
                                                     unroll, training["batch_size"], settings.device)[0]
    overrides = {"batch_size": settings.batch_size, "unroll_steps": settings.unroll_steps,
                 "dropout": settings.dropout, "n_negative_samples_batch": settings.n_negative_samples,
                 "optimizer": settings.optimizer, "learning_rate": settings.learning_rate,
                 "warmup_steps": settings.warmup_steps}
    training.update({k: v for k, v in overrides.items() if v is not None})
    if training["optimizer"] not in OPTIMIZERS:
        raise ConfigError(f"optimizer: expected 'adagrad' or 'adamw', got {training['optimizer']!r}")
    training.setdefault("learning_rate", RECIPE.learning_rate(training["optimizer"]))
    training["n_tokens_vocab"] = vocab_size
    training["n_train_tokens"] = n_train_tokens
    training["bidirectional"] = True
    config = BiLMConfig(char_cnn=base.char_cnn, lstm=base.lstm, training=training)
    config.validate()
    return config


def run_tokens(max_tokens: int | None, epochs: float | None, n_train_tokens: int) -> int:
    """Tokens per direction of a run of ``max_tokens`` or ``epochs`` passes (neither: one epoch)."""
    return max_tokens if max_tokens is not None else round((epochs if epochs is not None else 1.0) * n_train_tokens)


def run_steps(max_tokens: int | None, epochs: float | None, n_train_tokens: int, tokens_per_step: int) -> int:
    """Optimizer steps of a run of ``max_tokens`` or ``epochs`` passes (neither: one epoch)."""
    tokens = max_tokens if max_tokens is not None else (epochs if epochs is not None else 1.0) * n_train_tokens
    return max(1, math.ceil(tokens / tokens_per_step))
