"""Trained language models on disk: training checkpoints (``step-*.pt`` in a run directory) and
exported folders (``options.json`` + ``weights.hdf5`` + ``softmax_weights.hdf5`` + ``vocab.txt``).
"""

from __future__ import annotations

import os
import warnings

import h5py
import numpy as np
import torch

from elmo.fileio import atomic_path
from elmo.model.config import BiLMConfig
from elmo.model.lm import LanguageModel
from elmo.model.softmax import Softmax
from elmo.model.vocab import Vocabulary
from elmo.model.weights import WeightsError, check_finite, load_bilm_tf, save_bilm_tf

SOFTMAX_FILE = "softmax_weights.hdf5"
VOCAB_FILE = "vocab.txt"
TRAIN_FORMAT = "elmo-train"


def save_softmax(softmax: Softmax, path: str | os.PathLike, dtype: str = "float32") -> None:
    """Write ``softmax/W`` ``(vocab, dim)`` and ``softmax/b`` ``(vocab,)``, the layout of the
    published softmax weights files; ``dtype="float16"`` halves the file (loading gives float32)."""
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f["softmax/W"] = softmax.weight.detach().float().cpu().numpy().astype(dtype)
        f["softmax/b"] = softmax.bias.detach().float().cpu().numpy().astype(dtype)


def load_softmax(path: str | os.PathLike, vocab_size: int, dim: int) -> Softmax:
    softmax = Softmax(vocab_size, dim)
    with h5py.File(path, "r") as f:
        for name, param, shape in (("softmax/W", softmax.weight, (vocab_size, dim)), ("softmax/b", softmax.bias, (vocab_size,))):
            if name not in f:
                raise WeightsError(f"{path}: dataset '{name}' is missing (expected shape {shape})")
            if tuple(f[name].shape) != shape:
                raise WeightsError(f"{path}: dataset '{name}' has shape {tuple(f[name].shape)}, "
                                   f"but the vocabulary and options need {shape}")
            array = np.asarray(f[name][...], dtype=np.float32)
            check_finite(array, f"{path}: dataset '{name}'")
            with torch.no_grad():
                param.copy_(torch.from_numpy(array))
    return softmax


def export_language_model(model: LanguageModel, vocab: Vocabulary, output_dir: str | os.PathLike,
                          dtype: str = "float32") -> None:
    """Write ``options.json`` + ``weights.hdf5`` (original layout), ``softmax_weights.hdf5`` and
    ``vocab.txt`` into ``output_dir``."""
    save_bilm_tf(model.bilm, output_dir, dtype=dtype)
    save_softmax(model.softmax, os.path.join(output_dir, SOFTMAX_FILE), dtype=dtype)
    vocab.save(os.path.join(output_dir, VOCAB_FILE))


def checkpoint_paths(run_dir: str | os.PathLike) -> list[str]:
    """The checkpoint files of a run directory, oldest first (``step-NNNNNNNNN.pt``, so the name
    order is the step order; temporary files of a killed save are ignored)."""
    folder = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    return [os.path.join(folder, n) for n in names]


def latest_checkpoint(run_dir: str | os.PathLike) -> str | None:
    """Newest checkpoint file of a run directory, readable or not (see
    :func:`load_latest_train_checkpoint` for the newest one that loads)."""
    paths = checkpoint_paths(run_dir)
    return paths[-1] if paths else None


# What a checkpoint written by elmo.training.train.Trainer holds; a file without one of these is damaged.
CHECKPOINT_KEYS = ("config", "vocab", "model", "optimizer", "scheduler", "step", "tokens", "torch_rng",
                   "sampler_rng", "batchers", "lstm_c", "lstm_h")


def load_train_checkpoint(path: str | os.PathLike) -> dict:
    """Read a training checkpoint (``weights_only=True``: it can hold no code). Raises
    :class:`WeightsError` naming the file when it is truncated, unreadable or incomplete."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise WeightsError(f"{path}: not a readable training checkpoint ({type(e).__name__}: {e})") from e
    if not isinstance(payload, dict) or payload.get("format") != TRAIN_FORMAT:
        raise WeightsError(f"{path}: not an elmo training checkpoint")
    missing = [key for key in CHECKPOINT_KEYS if key not in payload]
    if missing:
        raise WeightsError(f"{path}: an incomplete training checkpoint (no {', '.join(missing)})")
    return payload


def load_latest_train_checkpoint(run_dir: str | os.PathLike) -> tuple[str, dict] | None:
    """The newest checkpoint of a run directory that loads, as ``(path, payload)``; None when the
    run has no checkpoint yet.

    A newer file that does not load (truncated by a full disk, a crash before the data reached
    the disk, a partial copy) is skipped with a warning naming it, and the previous one is used:
    the steps since then are simply redone. When none loads, :class:`WeightsError` names the
    folder and what is wrong with each file.
    """
    paths = checkpoint_paths(run_dir)
    problems = []
    for path in reversed(paths):
        try:
            return path, load_train_checkpoint(path)
        except WeightsError as e:
            problems.append(str(e))
            older = "falling back to the previous checkpoint" if path != paths[0] else "no older checkpoint"
            warnings.warn(f"{e}; {older}", stacklevel=2)
    if problems:
        raise WeightsError(f"{os.path.join(run_dir, 'checkpoints')}: no readable checkpoint among "
                           f"{len(paths)} ({'; '.join(problems)})")
    return None


def load_language_model(path: str | os.PathLike) -> tuple[LanguageModel, Vocabulary]:
    """Load a trained LM from a run directory (its newest checkpoint), a checkpoint file, or an
    exported folder (``options.json``, ``weights.hdf5``, ``softmax_weights.hdf5``, ``vocab.txt``)."""
    model, vocab, _ = load_language_model_with_origin(path)
    return model, vocab


def load_language_model_with_origin(path: str | os.PathLike) -> tuple[LanguageModel, Vocabulary, dict]:
    """:func:`load_language_model`, plus where the weights came from: ``{"path": ...}`` naming
    the checkpoint file that was read (a run directory names its newest readable one) or the
    exported folder, and for a checkpoint its ``step``, ``tokens`` and ``elapsed_seconds``, so that
    a run started from it can say at which point of the earlier run it branched off."""
    path = os.fspath(path)
    from elmo.hub.archives import looks_like_model

    if looks_like_model(path) and not os.path.isfile(os.path.join(path, SOFTMAX_FILE)):
        return _language_model_from_archive(path)  # an NLPL archive or folder, without a softmax
    if os.path.isfile(path):
        found: tuple[str, dict] | None = (path, load_train_checkpoint(path))
    else:
        found = load_latest_train_checkpoint(path)  # skips a damaged newest file, with a warning
    if found is not None:
        source, payload = found
        config = BiLMConfig.from_dict(payload["config"])
        vocab = Vocabulary(payload["vocab"])
        model = LanguageModel(config, len(vocab))
        model.load_state_dict(payload["model"])
        origin = {"path": os.path.abspath(source), "step": payload["step"], "tokens": payload["tokens"],
                  "elapsed_seconds": payload.get("elapsed_seconds")}
        return model, vocab, origin
    needed = ["options.json", "weights.hdf5", SOFTMAX_FILE, VOCAB_FILE]
    missing = [n for n in needed if not os.path.isfile(os.path.join(path, n))]
    if missing:
        raise FileNotFoundError(f"{path}: neither a run directory with checkpoints nor an exported model "
                                f"(missing {', '.join(missing)})")
    vocab = Vocabulary.from_file(os.path.join(path, VOCAB_FILE))
    bilm = load_bilm_tf(os.path.join(path, "options.json"), os.path.join(path, "weights.hdf5"))
    model = LanguageModel(bilm.config, len(vocab))
    model.bilm = bilm
    model.softmax = load_softmax(os.path.join(path, SOFTMAX_FILE), len(vocab), bilm.config.lstm.projection_dim)
    return model, vocab, {"path": os.path.abspath(path)}


def _language_model_from_archive(path: str) -> tuple[LanguageModel, Vocabulary, dict]:
    """A language model from a model archive or folder holding a vocabulary but no softmax (the
    NLPL repository's ELMo archives, AllenNLP's models with a vocabulary beside them): the biLM
    from its weights and a softmax over its vocabulary that starts from random weights, with a
    warning. Fine-tuning then learns the softmax along with the biLM."""
    from elmo.hub.archives import (
        ModelFolder,
        is_manylangs,
        load_model_folder,
        vocab_member,
    )

    with ModelFolder(path) as folder:
        if is_manylangs(folder):
            raise ValueError(f"{path}: an ELMoForManyLangs model cannot be fine-tuned here: its releases hold no "
                             f"softmax and no bilm-tf vocabulary, and training reads bytes (bilm-tf's scheme)")
        name = vocab_member(folder)
        if name is None:
            raise FileNotFoundError(f"{path}: fine-tuning needs the model's vocabulary (vocab.txt or vocab.txt.gz), "
                                    f"which it does not hold")
        vocab = Vocabulary.from_lines(folder.read_lines(name), folder.label(name))
    bilm = load_model_folder(path)
    model = LanguageModel(bilm.config, len(vocab))
    model.bilm = bilm.train()
    warnings.warn(f"{path}: no {SOFTMAX_FILE} (NLPL archives ship none): the softmax over the {len(vocab):,} words of "
                  f"its vocabulary starts from random weights and is learned while fine-tuning", stacklevel=3)
    return model, vocab, {"path": os.path.abspath(path)}


__all__ = ["SOFTMAX_FILE", "TRAIN_FORMAT", "VOCAB_FILE", "checkpoint_paths", "export_language_model",
           "latest_checkpoint", "load_language_model", "load_language_model_with_origin",
           "load_latest_train_checkpoint", "load_train_checkpoint", "load_softmax", "save_softmax"]
