"""Train and evaluate a task model from a :class:`~elmo.tasks.config.TaskConfig`: the one loop of
every task family.

The loop never asks which task it runs: the config's task object
(:func:`elmo.tasks.catalog.task_for`, a :class:`~elmo.tasks.base.Task`) reads its data, lays out
the sentences the biLM reads, builds its batches and its model, decodes predictions and scores
them. What is here is what all tasks share: splits and a dev set carved from training data, the
word vocabulary and vectors, the biLM layer cache, the optimizer, early stopping on dev,
checkpoints and resuming, and scoring a trained run on a data file.

A run directory holds ``config.json``, ``best.pt`` (the model with the best dev score so far),
``last.pt`` (the state after the last finished epoch), and ``metrics.json`` (dev score per epoch,
best epoch, dev and test scores of the best model, the learned ELMo layer weights, and the time
the run took: ``seconds`` of wall-clock time and ``cpu_seconds`` of the process's CPU time, which
on a busy shared machine is the fairer measure, both summed over resumed processes). Both
checkpoints hold everything needed to continue training (model, optimizer, epoch, history,
random state, example order): a killed run continues with ``resume=True`` from ``last.pt``, or
from ``best.pt`` when ``last.pt`` is damaged. Checkpoints are written atomically and read with
``weights_only=True`` (:func:`read_task_checkpoint`), so a damaged or untrusted file is an error
naming it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from elmo.fileio import (
    atomic_path,
    atomic_write_text,
    check_folder,
    check_output_file,
    claim_folder,
    owner_id,
    remove_owned_folder,
    save_torch,
    temporary_target,
)
from elmo.hub.checkpoints import read_checkpoint
from elmo.jsonio import read_json
from elmo.inference.layer_cache import load_or_compute
from elmo.model.weights import WeightsError
from elmo.progress import progress_bar
from elmo.tasks.base import Prepared, Split, Task
from elmo.tasks.catalog import KIND_TASKS, read_dataset, task_for
from elmo.tasks.config import (
    TaskConfig,
    check_task_paths,
    task_config_from_dict,
    upgrade_config_dict,
)
from elmo.tasks.features import (
    UNK,
    TokenFeatures,
    WordVocab,
    load_glove,
    load_vectors,
    vector_words,
)
from elmo.tasks.integration import TaskElmo

CHECKPOINT_FORMAT = "elmo-task-2"
# elmo-task-1: the same payload, with the config of before one home per task (upgrade_config_dict)
# and best.pt without the training state.
EARLIER_FORMATS = ("elmo-task-1",)
MODEL_KEYS = ("config", "model", "vocab", "labels", "bilm_layers", "bilm_dim")
TRAINING_KEYS = ("optimizer", "epoch", "history", "best_score", "best_epoch", "torch_rng", "python_rng")
FALLBACK_VECTOR_DIM = 50


# ------------------------------------------------------------------------------------ data
def read_split(config: TaskConfig, which: str) -> list | None:
    """The examples of split ``which`` (``"train"``, ``"dev"``, ``"test"``) of the config's data,
    None when the config has no such split."""
    spec = getattr(config.data, which)
    if spec is None:
        return None
    return read_dataset(config.data.kind, spec.path, spec.split)


def load_splits(config: TaskConfig) -> dict[str, list]:
    """train / dev / test examples as the files hold them; dev carved from train when the config
    asks for it (the same dev set for every seed), ``train_examples`` and ``train_fraction``
    applied. What a task does to its training examples (:meth:`Task.prepare_training`) is not."""
    train = read_split(config, "train")
    if config.data.train_examples:
        train = train[:config.data.train_examples]
    generator = random.Random(config.train.seed)
    if config.data.dev is None:
        order = list(range(len(train)))
        random.Random(0).shuffle(order)  # the same dev set for every seed
        n_dev = max(1, round(config.data.dev_fraction * len(train)))
        dev = [train[i] for i in sorted(order[:n_dev])]
        train = [train[i] for i in sorted(order[n_dev:])]
    else:
        dev = read_split(config, "dev")
    if config.data.train_fraction < 1.0:
        order = list(range(len(train)))
        generator.shuffle(order)
        keep = max(1, round(config.data.train_fraction * len(train)))
        train = [train[i] for i in sorted(order[:keep])]
    splits = {"train": train, "dev": dev}
    test = read_split(config, "test")
    if test is not None:
        splits["test"] = test
    return splits


# ------------------------------------------------------------------------------------ model
def build_model(task: Task, config: TaskConfig, embeddings: torch.Tensor, labels: Sequence[str], n_layers: int,
                dim: int) -> torch.nn.Module:
    """``task``'s model on the given word vectors ``(vocab, dim)``, predicting ``labels`` (the
    label names in output order); ``n_layers``/``dim`` are the biLM's."""
    features = TokenFeatures(embeddings, freeze=config.model.freeze_vectors, char_filters=config.model.char_filters)
    elmo = TaskElmo(config.elmo, n_layers, dim)
    return task.build_model(features, elmo, labels)


def load_bilm_source(config: TaskConfig):
    """The Embedder that computes ELMo layers for this config (None for a baseline)."""
    if not config.elmo.enabled:
        return None
    from elmo.inference.embed import Embedder

    return Embedder.from_pretrained(config.bilm.model, state=config.bilm.state, batch_size=config.bilm.batch_size,
                                    precision=config.bilm.precision)


def bilm_layer_shape(embedder) -> tuple[int, int]:
    """``(n_layers, dim)`` of the ELMo layers ``embedder`` gives, which size a task model's scalar
    mix and ELMo input; ``(1, 1)`` for a baseline (``embedder`` None), whose ELMo parts are empty."""
    if embedder is None:
        return 1, 1
    return embedder.model.config.n_output_layers, 2 * embedder.model.config.lstm.projection_dim


# ------------------------------------------------------------------------------------ running
def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _save(path: str, payload: dict) -> None:
    with atomic_path(path) as tmp:
        save_torch(payload, tmp)


TASK_RUN_KIND = "task run"  # the kind in the marker of a task run directory (elmo.fileio.claim_folder)


def is_task_run_from_before_markers(folder: str) -> bool:
    """Whether ``folder``, without elmo's marker, is a task run made before runs were marked:
    its ``config.json`` is a task config (what :func:`train_task` writes first)."""
    try:
        config = read_json(os.path.join(folder, "config.json"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"task", "metric", "output", "data"} <= config.keys()


def _task_run_entry(name: str) -> bool:
    """Whether ``name`` is a file a task run writes into its run directory (or its temporary)."""
    name = temporary_target(name) or name
    return name in {"config.json", "best.pt", "last.pt", "metrics.json", "test-predictions.json"} or (
        name.startswith("predictions-") and name.endswith(".json") and "/" not in name)


def discard_task_run(run_dir: str | os.PathLike) -> bool:
    """Delete the task run directory ``run_dir`` to start over in it (``elmo task train
    --force``): only one elmo made holding nothing but what a task run writes; anything else
    raises :class:`elmo.fileio.ForeignFolderError` naming what is in the way, and nothing is
    deleted. Returns whether there was a run to delete."""
    def check(folder: str) -> str | None:
        check_folder(folder, TASK_RUN_KIND, recognise=is_task_run_from_before_markers, allowed=_task_run_entry)
        return owner_id(folder)

    if not check_folder(run_dir, TASK_RUN_KIND, recognise=is_task_run_from_before_markers, allowed=_task_run_entry):
        return False
    remove_owned_folder(run_dir, check)
    return True


def train_task(config: TaskConfig, *, resume: bool = False, progress: bool = True, overwrite: bool = False) -> dict:
    """Train ``config``'s model with early stopping on dev; returns the final metrics dict.

    A path in the config that is not there fails first (:func:`check_task_paths`), and the run
    directory is only created once the data, the vectors and the biLM have loaded: a config that
    cannot run leaves nothing behind. With ``resume``, the run continues from its last
    checkpoint that reads (see :func:`resume_point`). A run directory that already holds a
    run's checkpoints is refused unless ``resume`` or ``overwrite`` (start over: the earlier run
    is deleted first, :func:`discard_task_run`)."""
    check_task_paths(config)
    if resume and overwrite:
        raise ValueError("resume and overwrite (--resume, --force): give one")
    if overwrite:
        discard_task_run(config.output)
    # A folder that is not a task run of elmo's is refused now, before the data and the biLM load.
    if (check_folder(config.output, TASK_RUN_KIND, recognise=is_task_run_from_before_markers, option="output")
            and not resume and any(os.path.exists(os.path.join(config.output, n)) for n in ("last.pt", "best.pt"))):
        raise FileExistsError(f"{config.output}: already holds a trained run; pass --resume (resume=True) to "
                              "continue it, or --force (overwrite=True) to start over")
    _seed_everything(config.train.seed)
    clock = _Clock(time.time(), time.process_time())
    task = task_for(config)
    data, label_names, prepared = _setup_data(task, config, progress)
    labels = {name: i for i, name in enumerate(label_names)}
    vocab, embeddings, found = _setup_word_vectors(config, data)
    n_layers, dim, config = _setup_bilm_layers(config, data, progress)
    _start_run_directory(config)
    _seed_everything(config.train.seed)
    model = build_model(task, config, embeddings, label_names, n_layers, dim)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.train.learning_rate)
    run = _RunState(order=list(range(len(data["train"].examples))))
    if resume:
        _resume(config, model, optimizer, run)
    _train_epochs(task, config, model, optimizer, data, vocab, labels, run, clock, progress,
                  model_part=lambda: _payload(config, model, vocab, label_names, n_layers, dim))
    return _final_metrics(task, config, data, vocab, labels, found, prepared, run, clock)


@dataclass
class _Clock:
    """When this process started on the run: wall-clock and CPU seconds (``time.process_time``)."""

    started: float
    cpu_started: float


@dataclass
class _RunState:
    """What an epoch leaves for the next, and what a checkpoint keeps of it: the dev history, the
    best score and its epoch, the next epoch, the example order (each epoch shuffles the previous
    one's in place, so the order is part of the state), and the time earlier processes spent on
    the run up to their last checkpoint (None: a checkpoint from before it was recorded)."""

    order: list[int]
    history: list[dict] = field(default_factory=list)
    best_score: float = -math.inf
    best_epoch: int = 0
    first_epoch: int = 1
    earlier_seconds: float | None = 0.0
    earlier_cpu: float | None = 0.0


def _setup_data(task: Task, config: TaskConfig, progress: bool) -> tuple[dict[str, Split], list[str], Prepared]:
    """The splits as the task lays them out, the label names in output order, and what the
    task's preparation of the training examples said and measured."""
    splits = load_splits(config)
    prepared = task.prepare_training(splits["train"])
    splits["train"] = prepared.examples
    if progress is not False and prepared.note:
        print(prepared.note)
    data = {name: task.split(examples) for name, examples in splits.items()}
    return data, task.label_names(splits["train"]), prepared


def _setup_word_vectors(config: TaskConfig, data: dict[str, Split]) -> tuple[WordVocab, torch.Tensor, int]:
    """The word vocabulary, its vectors ``(vocab, dim)`` and how many words had a pretrained one:
    from the config's vectors file, else small random vectors of :data:`FALLBACK_VECTOR_DIM`."""
    if config.data.vectors:
        # Dev and test words join the vocabulary only where they have a pretrained vector.
        every_word = {w.lower() for split in data.values() for s in split.sentences for w in s}
        vocab = WordVocab.build(data["train"].sentences, also=every_word & vector_words(config.data.vectors))
        embeddings, found = load_glove(config.data.vectors, vocab, seed=config.train.seed)
    else:
        vocab = WordVocab.build(data["train"].sentences)
        embeddings = torch.randn(len(vocab), FALLBACK_VECTOR_DIM) * 0.1
        embeddings[0] = 0
        found = 0
    return vocab, embeddings, found


def _setup_bilm_layers(config: TaskConfig, data: dict[str, Split], progress: bool,
                       ) -> tuple[int, int, TaskConfig]:
    """Each split's biLM layers (from the layer cache, or computed into it) set on the split;
    returns ``(n_layers, dim)`` of those layers (:func:`bilm_layer_shape`) and the config, with
    its biLM pinned where the source resolved to an exact revision (a Hub commit) and its
    precision the one that ran."""
    embedder = load_bilm_source(config)
    if embedder is not None:
        for name, split in data.items():
            split.layers = load_or_compute(embedder, split.sentences, config.cache_dir, f"{config.data.kind}-{name}",
                                           progress=progress)
    if embedder is not None and (embedder.source, embedder.precision) != (config.bilm.model, config.bilm.precision):
        # A Hub id pinned to the commit it resolved to, and the precision that ran (bfloat16 falls
        # back to float32 where it would not pay): the run's config and checkpoints name the exact
        # biLM and arithmetic, so that evaluating the task model later computes the same layers.
        config = dataclasses.replace(config, bilm=dataclasses.replace(config.bilm, model=embedder.source,
                                                                      precision=embedder.precision))
    return (*bilm_layer_shape(embedder), config)


def _start_run_directory(config: TaskConfig) -> None:
    """Claim the run directory (made now, with elmo's marker) and write its ``config.json``."""
    claim_folder(config.output, TASK_RUN_KIND, recognise=is_task_run_from_before_markers, option="output",
                 make_parents=True)
    atomic_write_text(os.path.join(config.output, "config.json"), json.dumps(config.to_dict(), indent=1))


def _resume(config: TaskConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, run: _RunState) -> None:
    """Continue from the run's last checkpoint that reads (:func:`resume_point`), if any: the
    model, optimizer, random states, history and example order."""
    point = resume_point(config.output)
    if point is None:
        return
    path, state = point
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    run.history, run.best_score, run.best_epoch = state["history"], state["best_score"], state["best_epoch"]
    run.first_epoch = state["epoch"] + 1
    torch.set_rng_state(state["torch_rng"])
    random.setstate(_tuple_state(state["python_rng"]))
    run.earlier_seconds = state.get("seconds")  # None: a checkpoint from before this was recorded
    run.earlier_cpu = state.get("cpu_seconds")
    n = len(run.order)
    order = state["order"] if "order" in state else _replayed_order(n, config.train.seed, state["epoch"],
                                                                     random.getstate())
    if order is None:
        warnings.warn(f"{path}: an older checkpoint without the example order, which could not be "
                      f"replayed; the run goes on with a new order, so it will not match an uninterrupted run")
        order = list(range(n))
    run.order = order


def _train_epochs(task: Task, config: TaskConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  data: dict[str, Split], vocab: WordVocab, labels: dict[str, int], run: _RunState, clock: _Clock,
                  progress: bool, model_part: Callable[[], dict]) -> None:
    """Epochs from ``run.first_epoch`` until ``config.train.epochs`` or early stopping (no better
    dev score for ``patience`` epochs), each scored on dev and checkpointed: ``best.pt`` when it
    improved, ``last.pt`` always (``model_part``: the model's part of a checkpoint, :func:`_payload`)."""
    best_path, last_path = os.path.join(config.output, "best.pt"), os.path.join(config.output, "last.pt")
    for epoch in range(run.first_epoch, config.train.epochs + 1):
        if epoch - run.best_epoch > config.train.patience and run.best_epoch > 0:
            break
        train_loss = _train_epoch(task, config, model, optimizer, data["train"], vocab, labels, run.order, epoch,
                                  progress)
        dev_score = _evaluate(task, config, model, data["dev"], vocab, labels).score
        run.history.append({"epoch": epoch, "train_loss": train_loss, "dev": dev_score})
        if progress is not False:
            print(f"epoch {epoch}: train loss {train_loss:.4f}, dev {config.metric} {dev_score:.4f}")
        improved = dev_score > run.best_score
        if improved:
            run.best_score, run.best_epoch = dev_score, epoch
        state = {**model_part(), "optimizer": optimizer.state_dict(),
                 "epoch": epoch, "history": run.history, "best_score": run.best_score, "best_epoch": run.best_epoch,
                 "torch_rng": torch.get_rng_state(), "python_rng": _list_state(random.getstate()), "order": run.order,
                 "seconds": (run.earlier_seconds or 0.0) + time.time() - clock.started,
                 "cpu_seconds": (run.earlier_cpu or 0.0) + time.process_time() - clock.cpu_started}
        if improved:  # the best model, with all it takes to continue from it should last.pt be lost
            _save(best_path, state)
        _save(last_path, state)


def _train_epoch(task: Task, config: TaskConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 train: Split, vocab: WordVocab, labels: dict[str, int], order: list[int], epoch: int,
                 progress: bool) -> float:
    """One pass over the training examples in ``order``, shuffled in place first; returns the
    mean training loss of its batches."""
    model.train()
    random.shuffle(order)
    total, batches = 0.0, 0
    bar = progress_bar(progress, iterable=range(0, len(order), config.train.batch_size), desc=f"epoch {epoch}",
                       unit="batch", leave=False)
    for start in bar:
        batch = task.batch(train, order[start:start + config.train.batch_size], vocab, labels)
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        total, batches = total + loss.item(), batches + 1
        bar.set_postfix(loss=f"{total / batches:.3f}")
    return total / max(batches, 1)


def _final_metrics(task: Task, config: TaskConfig, data: dict[str, Split], vocab: WordVocab,
                   labels: dict[str, int], found: int, prepared: Prepared, run: _RunState, clock: _Clock) -> dict:
    """The best model's metrics (dev, test and its predictions when there is a test split, the
    learned layer weights, the time the run took), written to ``metrics.json`` and returned."""
    best = load_task_model(config.output)[0]
    metrics = {"task": config.task, "metric": config.metric, "elmo": config.to_dict()["elmo"],
               "best_epoch": run.best_epoch, "dev": _evaluate(task, config, best, data["dev"], vocab, labels).score,
               "history": run.history, "train_examples": len(data["train"].examples),
               "words_with_vectors": found, "vocabulary": len(vocab),
               "layer_weights": best.elmo.layer_weights(),
               "seconds": round((run.earlier_seconds or 0.0) + time.time() - clock.started, 1),
               "cpu_seconds": round((run.earlier_cpu or 0.0) + time.process_time() - clock.cpu_started, 1)}
    if run.earlier_seconds is None or run.earlier_cpu is None:
        # Resumed from a checkpoint without the earlier processes' time: "seconds" and
        # "cpu_seconds" count only this process, from this epoch on.
        metrics["seconds_counted_from_epoch"] = run.first_epoch
    metrics.update(prepared.metrics)
    if "test" in data:
        evaluation = _evaluate(task, config, best, data["test"], vocab, labels)
        metrics["test"] = evaluation.score
        if evaluation.predictions is not None:
            atomic_write_text(os.path.join(config.output, "test-predictions.json"),
                              json.dumps(evaluation.predictions) + "\n")
        if evaluation.details:
            metrics["test_details"] = evaluation.details
    atomic_write_text(os.path.join(config.output, "metrics.json"), json.dumps(metrics, indent=1))
    return metrics


def _evaluate(task: Task, config: TaskConfig, model, split: Split, vocab: WordVocab, labels: dict[str, int]):
    """The task's :class:`~elmo.tasks.base.Evaluation` of ``model``'s predictions on ``split``."""
    return task.evaluate(split.examples, task.predict(model, split, vocab, labels, config.train.batch_size))


def _replayed_order(n: int, seed: int, epochs: int, python_state: tuple) -> list[int] | None:
    """The example order after ``epochs`` epochs of a run seeded with ``seed``, for checkpoints
    that predate saving it: only the epochs' shuffles draw from Python's ``random`` after the
    seeding, so replaying them gives the order exactly when it ends in the saved state (checked;
    None when it does not)."""
    replay = random.Random(seed)
    order = list(range(n))
    for _ in range(epochs):
        replay.shuffle(order)
    return order if replay.getstate() == python_state else None


def _payload(config, model, vocab, label_names, n_layers, dim) -> dict:
    return {"format": CHECKPOINT_FORMAT, "config": config.to_dict(), "model": model.state_dict(),
            "vocab": vocab.words[2:], "labels": label_names, "bilm_layers": n_layers, "bilm_dim": dim}


def _list_state(state):
    """random.getstate() as nested lists (loadable with weights_only=True)."""
    return [state[0], list(state[1]), state[2]]


def _tuple_state(state):
    return (state[0], tuple(state[1]), state[2])


# ------------------------------------------------------------------------------------ checkpoints
def read_task_checkpoint(path: str | os.PathLike, *, training: bool = False) -> dict:
    """A task run's checkpoint (``best.pt`` or ``last.pt``), read with ``weights_only=True`` (it can
    hold no code); with ``training``, it must hold the training state too (optimizer, epoch, ...).
    A file that is truncated, damaged, not a task checkpoint, holds something other than tensors
    and plain values, or lacks a part raises :class:`~elmo.model.weights.WeightsError` (a
    ``ValueError``) whose one line names the file."""
    payload = read_checkpoint(path, {fmt: 1 for fmt in (CHECKPOINT_FORMAT, *EARLIER_FORMATS)},
                              what="task checkpoint")
    missing = [key for key in (*MODEL_KEYS, *(TRAINING_KEYS if training else ())) if key not in payload]
    if missing:
        what = "the training state" if training and not set(MODEL_KEYS) & set(missing) else "a complete checkpoint"
        raise WeightsError(f"{path}: not {what} (no {', '.join(missing)})")
    return payload


def resume_point(run_dir: str | os.PathLike) -> tuple[str, dict] | None:
    """``(path, state)`` a run continues from: ``last.pt``, or ``best.pt`` with a warning when
    ``last.pt`` is missing or does not read (the epochs after the best one are trained again);
    None when the run has neither. When ``last.pt`` reads but ``best.pt`` does not, the best
    model is lost unless it is the last one (then ``best.pt`` is written again from ``last.pt``):
    an error naming it. Errors name every file and what is wrong with it."""
    last, best = os.path.join(run_dir, "last.pt"), os.path.join(run_dir, "best.pt")
    if not os.path.isfile(last) and not os.path.isfile(best):
        return None
    problems = []
    if os.path.isfile(last):
        try:
            state = read_task_checkpoint(last, training=True)
        except WeightsError as e:
            problems.append(str(e))
        else:
            _check_best(best, state)
            return last, state
    else:
        problems.append(f"{last}: no such file")
    try:
        state = read_task_checkpoint(best, training=True)
    except (WeightsError, FileNotFoundError) as e:
        problems.append(str(e))
        raise WeightsError(f"{run_dir}: no checkpoint to resume from ({'; '.join(problems)}); "
                           f"start over with --force (overwrite=True) instead of --resume") from None
    warnings.warn(f"{problems[0]}; resuming from {best} (epoch {state['epoch']}) instead: the epochs after it are "
                  f"trained again", stacklevel=2)
    return best, state


def _check_best(best: str, last_state: dict) -> None:
    """Make sure a run resumed from ``last_state`` still has its best model in ``best``."""
    if last_state["best_epoch"] == 0:  # nothing was ever best (no epoch finished with a score)
        return
    try:
        read_task_checkpoint(best)
        return
    except (WeightsError, FileNotFoundError) as e:
        problem = str(e)
    if last_state["best_epoch"] == last_state["epoch"]:
        warnings.warn(f"{problem}; the best epoch is the last one, so {best} is written again from last.pt",
                      stacklevel=3)
        _save(best, last_state)
        return
    raise WeightsError(f"{problem}; the best model (epoch {last_state['best_epoch']}) is lost and the run "
                       f"cannot report it: start over with --force (overwrite=True) instead of --resume")


def load_task_model(run_dir: str | os.PathLike, sentences: Iterable[Sequence[str]] | None = None, *,
                    vectors: str | os.PathLike | None = None):
    """``(model, config, vocab, labels)`` of a run's best checkpoint, in eval mode.

    ``sentences``: the text the model is about to read. Its words that are not in the run's
    vocabulary but have a vector in the run's vectors file (``data.vectors`` of its config, or
    ``vectors`` when that file has moved) join the vocabulary with their pretrained vectors, as
    the words of dev and test did in training; otherwise every word new to the run would read as
    ``<unk>``. The run's own rows, fine-tuned or not, are kept. A damaged or untrusted
    ``best.pt`` is an error naming it (:func:`read_task_checkpoint`).
    """
    path = os.path.join(run_dir, "best.pt")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no best checkpoint; is {run_dir} a task run directory?")
    payload = read_task_checkpoint(path)
    values = payload["config"]
    if payload["format"] in EARLIER_FORMATS:
        values = upgrade_config_dict(values)
    config = task_config_from_dict(values, where=path)
    vocab = WordVocab(payload["vocab"])
    embeddings = payload["model"]["features.words.weight"]
    model = build_model(task_for(config), config, embeddings, payload["labels"], payload["bilm_layers"],
                        payload["bilm_dim"])
    model.load_state_dict(payload["model"])
    labels = {name: i for i, name in enumerate(payload["labels"])}
    if sentences is not None:
        vocab = add_pretrained_words(model, config, vocab, sentences, vectors, where=path)
    elif vectors is not None:
        raise ValueError("load_task_model: vectors is only used with sentences")
    return model.eval(), config, vocab, labels


def add_pretrained_words(model: torch.nn.Module, config: TaskConfig, vocab: WordVocab,
                         sentences: Iterable[Sequence[str]], vectors: str | os.PathLike | None = None,
                         where: str = "run") -> WordVocab:
    """The vocabulary extended by the words of ``sentences`` that it lacks and that have a vector
    in the run's vectors file (``vectors``, by default ``config.data.vectors``); their vectors
    are appended to ``model``'s word embedding (:meth:`TokenFeatures.add_words`). A run trained
    without pretrained vectors has none to add. A vectors file that is not there, when there are
    new words to look up, is an error naming ``data.vectors`` and the path."""
    if config.data.vectors is None:
        if vectors is not None:
            raise ValueError(f"{where}: the run was trained without pretrained vectors (data.vectors is not set), "
                             f"so {vectors} cannot give its words vectors")
        return vocab
    new = {w.lower() for s in sentences for w in s} - vocab.index.keys()
    if not new:
        return vocab
    source = os.fspath(vectors) if vectors is not None else config.data.vectors
    if not os.path.isfile(source):
        hint = "" if os.path.isabs(source) else f" (relative to the current directory, {os.getcwd()})"
        raise FileNotFoundError(
            f"{where}: data.vectors: {source}: no such file{hint}. It is needed to give the {len(new)} word(s) "
            f"the run never saw their pretrained vectors instead of <unk>; pass the same vectors file "
            f"(elmo task evaluate --vectors PATH) if it has moved")
    found, dim = load_vectors(source, new)
    words = model.features.words
    if dim != words.embedding_dim:
        raise ValueError(f"{where}: data.vectors: {source} has {dim}-dimensional vectors, but the run's word "
                         f"embedding has {words.embedding_dim}: not the file the run was trained with")
    if not found:
        return vocab
    extended = vocab.extended(found)
    model.features.add_words(torch.from_numpy(np.stack([found[w] for w in extended.words[len(vocab):]])))
    return extended


def unknown_tokens(sentences: Iterable[Sequence[str]], vocab: WordVocab) -> tuple[int, int]:
    """``(tokens that read as <unk>, all tokens)`` of ``sentences`` under ``vocab``."""
    ids = [vocab.id(w) for s in sentences for w in s]
    return sum(i == UNK for i in ids), len(ids)


def evaluate_task(run_dir: str | os.PathLike, path: str, split: str | None = None, *, kind: str | None = None,
                  vectors: str | os.PathLike | None = None, predictions: str | os.PathLike | None = None,
                  progress: bool = True, overwrite: bool = False) -> dict:
    """Score a run's best model on a data file, read as dataset ``kind`` (by default the run's
    own; any kind of the run's task family: ``kind="snli"`` scores a SICK entailment model on
    SNLI, ``kind="gap"`` a coreference model on GAP). Gold labels the model never saw are an
    error, not a silent miss, unless the task tolerates them (:meth:`Task.tolerates_unseen_labels`:
    SRL's rare roles, and tagging's tags absent from training, as CoNLL-2000's ``I-LST``, unless
    most of a file's tags are unknown): they count as missed and ``unseen_labels`` lists them.
    Words of the data that the run never saw get their vectors from the run's vectors file
    (``vectors`` where it has moved; see :func:`add_pretrained_words`); the result counts them
    (``words_added``) and the tokens that still read as ``<unk>``. A task whose evaluation has
    predictions to keep (reading comprehension: question id -> answer text) writes them to
    ``predictions`` (default: ``RUN/predictions-<data file name>.json``), named in the result's
    ``predictions``; a ``predictions`` file given that exists is replaced only with ``overwrite``
    (the default one is in the run directory, elmo's). The result names the ``task``;
    :meth:`Task.report` prints its details."""
    if predictions is not None:  # refused before the model and the data load
        check_output_file(predictions, overwrite, inputs=[path], option="predictions")
    model, config, vocab, labels = load_task_model(run_dir)
    task = task_for(config)
    kind = kind or config.data.kind
    if kind in KIND_TASKS and kind not in task.readers:
        raise ValueError(f"{path}: data of kind {kind!r} cannot be scored by the {config.task} model in {run_dir} "
                         f"(its kinds: {', '.join(task.readers)})")
    examples = read_dataset(kind, path, split)
    gold_labels = task.gold_labels(examples)
    unknown = gold_labels - labels.keys()
    if unknown and not task.tolerates_unseen_labels(unknown, gold_labels):
        raise ValueError(f"{path}: label(s) {', '.join(sorted(unknown))} are not among those the model "
                         f"in {run_dir} was trained on ({', '.join(labels)})")
    data = task.split(examples)
    trained_words = len(vocab)
    vocab = add_pretrained_words(model, config, vocab, data.sentences, vectors,
                                 where=os.path.join(os.fspath(run_dir), "best.pt"))
    embedder = load_bilm_source(config)
    if embedder is not None:
        data.layers = load_or_compute(embedder, data.sentences, config.cache_dir, f"{config.data.kind}-eval",
                                      progress=progress)
    evaluation = _evaluate(task, config, model, data, vocab, labels)
    n_unknown, n_tokens = unknown_tokens(data.sentences, vocab)
    result = {"run": os.fspath(run_dir), "data": path, "split": split, "kind": kind, "task": config.task,
              "metric": evaluation.metric, "score": evaluation.score, "examples": len(examples),
              "words_added": len(vocab) - trained_words, "tokens": n_tokens, "unknown_tokens": n_unknown}
    if evaluation.predictions is not None:
        if predictions is None:
            stem = os.path.basename(os.path.normpath(path)).removesuffix(".gz").removesuffix(".json")
            predictions = os.path.join(run_dir, f"predictions-{stem}.json")
        atomic_write_text(predictions, json.dumps(evaluation.predictions, ensure_ascii=False) + "\n")
        result["predictions"] = os.fspath(predictions)
    if evaluation.details:
        result["details"] = evaluation.details
    if unknown:
        result["unseen_labels"] = sorted(unknown)
    return result


__all__ = ["add_pretrained_words", "build_model", "evaluate_task", "load_splits", "load_task_model",
           "read_task_checkpoint", "resume_point", "train_task", "unknown_tokens"]
