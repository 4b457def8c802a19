"""Models on disk in this library's own formats: one checkpoint family (``.pt`` files, each with
a ``format`` and a ``version`` marker, read by :func:`read_checkpoint`), training run directories
(``checkpoints/step-*.pt``) and exported folders (``options.json`` + ``weights.hdf5`` +
``softmax_weights.hdf5`` + ``vocab.txt``).

The ``.pt`` formats:

* ``elmo-bilm`` (version 1): a biLM, :func:`save_checkpoint`;
* ``elmo-train`` (version 2): everything a training run needs to go on, written by
  :class:`elmo.training.train.Trainer` (a file without a version is version 1);
* ``elmo-task-1``: a task model (``best.pt``/``last.pt`` of ``elmo task train``), read by the task layer
  through :func:`read_checkpoint` too.

Which file or folder a user means is :mod:`elmo.hub.resolve`'s question; this module reads and
writes the files once that is settled.
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from collections.abc import Iterable, Mapping

import h5py
import numpy as np
import torch

from elmo.fileio import atomic_folder, atomic_path, atomic_write_bytes, check_folder, save_torch
from elmo.hdf5io import HDF5FileError, hdf5_image, open_hdf5, read_dataset
from elmo.hub.pickles import torch_reason, unsafe_global
from elmo.model.config import BiLMConfig, ConfigError
from elmo.model.dictionary import CharacterDictionary, DictionaryError
from elmo.model.network import BiLM
from elmo.model.vocab import Vocabulary
from elmo.model.weights import (
    STORAGE_DTYPES,
    WeightsError,
    check_finite,
    load_bilm_tf,
    save_bilm_tf,
)
from elmo.lm.model import LanguageModel
from elmo.lm.softmax import Softmax

SOFTMAX_FILE = "softmax_weights.hdf5"
VOCAB_FILE = "vocab.txt"
NATIVE_FORMAT = "elmo-bilm"
NATIVE_VERSION = 1
TRAIN_FORMAT = "elmo-train"
TRAIN_VERSION = 2
# What each format marker is, for messages.
FORMAT_NAMES = {NATIVE_FORMAT: "a biLM checkpoint (elmo.save_checkpoint)",
                TRAIN_FORMAT: "a training checkpoint (elmo train)",
                "elmo-task-1": "a task model checkpoint (elmo task train)",
                "elmo-task-2": "a task model checkpoint (elmo task train)"}


def _first_line(error: BaseException) -> str:
    """An exception as one short line: torch's messages run over many lines."""
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(error).__name__}: {line[:200]}" if line else type(error).__name__


def read_checkpoint(path: str | os.PathLike, formats: Mapping[str, int], what: str = "elmo checkpoint",
                    map_location: str | torch.device = "cpu") -> dict:
    """The payload of a ``.pt`` file of this library, checked against what the caller can read.

    ``formats`` maps each format marker the caller accepts to the newest version it reads (a file
    without a ``version`` is version 1). Opened with ``torch.load(weights_only=True)``, so a file
    handed to us can never run code. Raises :class:`WeightsError`, one line naming the file, when
    it is damaged (truncated, not a checkpoint at all), holds Python objects (not written by this
    library), is another program's or another kind of elmo file, or was written by a newer version.
    ``what`` names the expected kind in the messages ("training checkpoint", ...).
    """
    # elmo's own check first: a file whose pickle imports anything outside PyTorch's tensor
    # rebuilding is named as such, whatever torch's wording (torch.load below still refuses it).
    found = unsafe_global(path) if os.path.isfile(path) else None
    if found is not None:
        raise WeightsError(f"{path}: not a readable {what}: it holds Python objects that elmo never runs (its pickle "
                           f"imports {found}); a file elmo writes holds only tensors and plain data")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except pickle.UnpicklingError as e:
        raise WeightsError(f"{path}: not a readable {what}: damaged or not a checkpoint ({torch_reason(e)})") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise WeightsError(f"{path}: not a readable {what}: damaged or truncated ({torch_reason(e)})") from None
    marker = payload.get("format") if isinstance(payload, dict) else None
    if not isinstance(marker, str):
        raise WeightsError(f"{path}: not an elmo checkpoint (no format marker: another program's file)")
    wanted = " or ".join(FORMAT_NAMES.get(name, name) for name in formats)
    if marker not in formats:
        found = FORMAT_NAMES.get(marker, f"a {marker!r} file")
        raise WeightsError(f"{path}: {found}, not {wanted}")
    version = payload.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise WeightsError(f"{path}: damaged: version {version!r} is not a version number")
    if version > formats[marker]:
        raise WeightsError(f"{path}: {marker} version {version} was written by a newer elmo; this one reads "
                           f"up to version {formats[marker]} (upgrade elmo)")
    return payload


def bilm_from_state(path: str | os.PathLike, config: dict, state_dict: dict, characters: dict | None = None) -> BiLM:
    """A biLM from a checkpoint's config and state dict, refusing NaN weights and a state dict that
    does not fit the config (errors name ``path``). ``characters``: the payload of the model's
    character dictionary (:meth:`CharacterDictionary.to_payload`), for a model that reads one
    (ELMoForManyLangs')."""
    try:
        config = BiLMConfig.from_dict(config)
    except ConfigError as e:
        raise WeightsError(f"{path}: damaged config: {e}") from None
    for name, tensor in state_dict.items():
        if torch.is_tensor(tensor) and tensor.is_floating_point():
            check_finite(tensor.detach().cpu().float(), f"{path}: parameter '{name}'")
    dictionary = None
    if config.char_cnn.characters == "dictionary":
        try:
            dictionary = CharacterDictionary.from_payload(characters, os.fspath(path))
        except DictionaryError as e:
            raise WeightsError(str(e)) from None
    model = BiLM(config, characters=dictionary)
    try:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
    except RuntimeError as e:  # a tensor of the wrong shape
        raise WeightsError(f"{path}: state dict does not match its config ({_first_line(e)})") from None
    if missing or unexpected:
        raise WeightsError(f"{path}: state dict does not match its config "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model


def bilm_of_payload(path: str | os.PathLike, payload: dict) -> BiLM:
    """The biLM of a read ``elmo-bilm`` or ``elmo-train`` payload."""
    needed = ("config", "model") if payload["format"] == TRAIN_FORMAT else ("config", "state_dict")
    missing = [key for key in needed if not isinstance(payload.get(key), dict)]
    if missing:
        raise WeightsError(f"{path}: an incomplete checkpoint (no {', '.join(missing)})")
    if payload["format"] == TRAIN_FORMAT:
        state = {key[len("bilm."):]: value for key, value in payload["model"].items() if key.startswith("bilm.")}
        return bilm_from_state(path, payload["config"], state, payload.get("characters"))
    return bilm_from_state(path, payload["config"], payload["state_dict"], payload.get("characters"))


def save_checkpoint(model: BiLM, path: str | os.PathLike, **extra) -> None:
    """Save a biLM's state dict and config (plus any plain-data ``extra``) atomically, as an
    ``elmo-bilm`` checkpoint: :func:`load_checkpoint`, :func:`elmo.hub.load_model` and every
    ``--model`` option read it."""
    payload = {"format": NATIVE_FORMAT, "version": NATIVE_VERSION, "config": model.config.to_dict(),
               "state_dict": model.state_dict(), **extra}
    if isinstance(model.characters, CharacterDictionary):  # plain strings and ints: weights_only reads them
        payload["characters"] = model.characters.to_payload()
    with atomic_path(path) as tmp:
        save_torch(payload, tmp)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> tuple[BiLM, dict]:
    """The biLM of a checkpoint file (``elmo-bilm``, or the biLM of an ``elmo-train`` training
    checkpoint) and the whole payload. Errors are one-line :class:`WeightsError` messages naming the file."""
    payload = read_checkpoint(path, {NATIVE_FORMAT: NATIVE_VERSION, TRAIN_FORMAT: TRAIN_VERSION},
                              map_location=map_location)
    if payload["format"] == TRAIN_FORMAT:
        check_train_payload(path, payload)
    return bilm_of_payload(path, payload), payload


def save_softmax(softmax: Softmax, path: str | os.PathLike, dtype: str = STORAGE_DTYPES[0]) -> None:
    """Write ``softmax/W`` ``(vocab, dim)`` and ``softmax/b`` ``(vocab,)``, the layout of the
    published softmax weights files; ``dtype="float16"`` halves the file (loading gives float32)."""
    atomic_write_bytes(path, hdf5_image({"softmax/W": softmax.weight.detach().float().cpu().numpy().astype(dtype),
                                         "softmax/b": softmax.bias.detach().float().cpu().numpy().astype(dtype)}))


def load_softmax(path: str | os.PathLike, vocab_size: int, dim: int) -> Softmax:
    softmax = Softmax(vocab_size, dim)
    try:
        f = open_hdf5(path)
    except HDF5FileError as e:
        raise WeightsError(str(e)) from None
    with f:
        for name, param, shape in (("softmax/W", softmax.weight, (vocab_size, dim)), ("softmax/b", softmax.bias, (vocab_size,))):
            if name not in f or not isinstance(f[name], h5py.Dataset):
                raise WeightsError(f"{path}: dataset '{name}' is missing (expected shape {shape})")
            if tuple(f[name].shape) != shape:
                raise WeightsError(f"{path}: dataset '{name}' has shape {tuple(f[name].shape)}, "
                                   f"but the vocabulary and options need {shape}")
            try:
                array = read_dataset(f[name], f"{path}: dataset '{name}'")
            except HDF5FileError as e:
                raise WeightsError(str(e)) from None
            check_finite(array, f"{path}: dataset '{name}'")  # strings, NaN: refused naming the dataset
            array = np.asarray(array, dtype=np.float32)
            with torch.no_grad():
                param.copy_(torch.from_numpy(array))
    return softmax


MODEL_FOLDER_KIND = "model folder"  # the kind in the marker of a folder elmo writes a model into
# Every file elmo writes into a model folder: the bilm-tf layout (save_bilm_tf), an export's softmax
# and vocabulary, and the ELMoForManyLangs format (elmo.hub.manylangs.save_manylangs).
MODEL_FILES = frozenset({"options.json", "weights.hdf5", SOFTMAX_FILE, VOCAB_FILE, "config.json", "cnn_config.json",
                         "char.dic", "word.dic", "token_embedder.pkl", "encoder.pkl"})


# The model card elmo export --hub-card writes (elmo.hub.card), marked so that a --force export
# replaces a README.md only where it is elmo's own card, never one a person wrote.
CARD_FILE = "README.md"
CARD_MARK = "<!-- written by elmo export: elmo export --force replaces this card while this line is in it -->"


def _replaceable(output: str | os.PathLike):
    """Which names elmo may replace in the model folder ``output``: the model files, and a
    ``README.md`` that is elmo's own card (its :data:`CARD_MARK`)."""
    try:
        with open(os.path.join(os.fspath(output), CARD_FILE), "rb") as f:
            ours = CARD_MARK.encode() in f.read(1 << 20)
    except OSError:
        ours = False
    return lambda name: name in MODEL_FILES or (ours and name == CARD_FILE)


def is_model_folder_from_before_markers(folder: str) -> bool:
    """Whether ``folder``, without elmo's marker, is a model folder elmo wrote before it marked
    them: it holds a model's weights and nothing but the files elmo writes there."""
    names = set(os.listdir(folder))
    return bool(names & {"weights.hdf5", "encoder.pkl"}) and names <= MODEL_FILES


def check_model_folder(output: str | os.PathLike, overwrite: bool = False, option: str = "output",
                       writes: Iterable[str] | None = None) -> None:
    """Refuse, before any work, what :func:`write_model_folder` would: an existing ``output``
    without ``overwrite``, and anything there elmo cannot show is a model folder it made.
    ``writes``: the files the coming write makes, where known; a folder without elmo's marker
    holding anything else is refused (:func:`elmo.fileio.check_folder`)."""
    if check_folder(output, MODEL_FOLDER_KIND, recognise=is_model_folder_from_before_markers,
                    allowed=_replaceable(output), writes=writes, option=option) and not overwrite:
        raise FileExistsError(f"{output}: already exists; pass --force (overwrite=True) to replace it")


def write_model_folder(output: str | os.PathLike, write, overwrite: bool = False, make_parents: bool = False) -> None:
    """Write a model folder with ``write(folder)`` atomically (:func:`elmo.fileio.atomic_folder`):
    an existing ``output`` is replaced only with ``overwrite``, and only when it is a model folder
    elmo made holding nothing else (see :data:`MODEL_FILES`); one without elmo's marker, only
    when it holds nothing but what ``write`` writes. The parent folder must exist, unless
    ``make_parents``."""
    atomic_folder(output, write, overwrite, kind=MODEL_FOLDER_KIND, allowed=_replaceable(output),
                  recognise=is_model_folder_from_before_markers, option="output", make_parents=make_parents)


def export_language_model(model: LanguageModel, vocab: Vocabulary, output_dir: str | os.PathLike,
                          dtype: str = STORAGE_DTYPES[0], overwrite: bool = False, card: str | None = None,
                          make_parents: bool = False) -> None:
    """Write ``options.json`` + ``weights.hdf5`` (original layout), ``softmax_weights.hdf5`` and
    ``vocab.txt`` into the folder ``output_dir``, which appears complete or not at all. An existing
    one is replaced only with ``overwrite``, and only when elmo made it (:func:`write_model_folder`).
    ``card``: the text of a ``README.md`` model card to write beside them (:mod:`elmo.hub.card`);
    ``make_parents``: create the folders ``output_dir`` goes in (else they must exist)."""
    def write(folder) -> None:
        save_bilm_tf(model.bilm, folder, dtype=dtype)
        save_softmax(model.softmax, os.path.join(folder, SOFTMAX_FILE), dtype=dtype)
        vocab.save(os.path.join(folder, VOCAB_FILE))
        if card is not None:
            with open(os.path.join(folder, CARD_FILE), "w", encoding="utf-8") as f:
                f.write(card)

    write_model_folder(output_dir, write, overwrite, make_parents)


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


def check_train_payload(path: str | os.PathLike, payload: dict) -> None:
    """Refuse a training checkpoint that lacks one of :data:`CHECKPOINT_KEYS`."""
    missing = [key for key in CHECKPOINT_KEYS if key not in payload]
    if missing:
        raise WeightsError(f"{path}: an incomplete training checkpoint (no {', '.join(missing)})")


def load_train_checkpoint(path: str | os.PathLike) -> dict:
    """Read a training checkpoint (``weights_only=True``: it can hold no code). Raises
    :class:`WeightsError` naming the file when it is truncated, unreadable, foreign, newer or
    incomplete."""
    payload = read_checkpoint(path, {TRAIN_FORMAT: TRAIN_VERSION}, what="training checkpoint")
    check_train_payload(path, payload)
    return payload


def save_train_checkpoint(payload: dict, path: str | os.PathLike) -> None:
    """Write a training checkpoint's payload (the trainer builds it) atomically, with its format
    and version markers."""
    with atomic_path(path) as tmp:
        save_torch({**payload, "format": TRAIN_FORMAT, "version": TRAIN_VERSION}, tmp)


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


def language_model_of_payload(path: str | os.PathLike, payload: dict) -> tuple[LanguageModel, Vocabulary, dict]:
    """The language model, vocabulary and origin (``{"path", "step", "tokens",
    "elapsed_seconds"}``) of a read training checkpoint."""
    config = BiLMConfig.from_dict(payload["config"])
    vocab = Vocabulary(payload["vocab"])
    model = LanguageModel(config, len(vocab))
    model.load_state_dict(payload["model"])
    origin = {"path": os.path.abspath(path), "step": payload["step"], "tokens": payload["tokens"],
              "elapsed_seconds": payload.get("elapsed_seconds")}
    return model, vocab, origin


def load_exported_language_model(options: str | os.PathLike, weights: str | os.PathLike,
                                  softmax: str | os.PathLike, vocab_file: str | os.PathLike) -> tuple[LanguageModel, Vocabulary]:
    """A language model from the files :func:`export_language_model` writes."""
    vocab = Vocabulary.from_file(vocab_file)
    bilm = load_bilm_tf(options, weights)
    model = LanguageModel(bilm.config, len(vocab))
    model.bilm = bilm
    model.softmax = load_softmax(softmax, len(vocab), bilm.config.lstm.projection_dim)
    return model, vocab


__all__ = ["CHECKPOINT_KEYS", "FORMAT_NAMES", "MODEL_FILES", "MODEL_FOLDER_KIND", "NATIVE_FORMAT", "NATIVE_VERSION",
           "SOFTMAX_FILE", "TRAIN_FORMAT", "TRAIN_VERSION", "VOCAB_FILE", "bilm_from_state", "bilm_of_payload",
           "check_model_folder", "check_train_payload", "checkpoint_paths", "export_language_model",
           "language_model_of_payload", "latest_checkpoint", "load_checkpoint", "load_exported_language_model",
           "load_latest_train_checkpoint", "load_softmax", "load_train_checkpoint", "read_checkpoint",
           "save_checkpoint", "save_softmax", "save_train_checkpoint", "write_model_folder"]
