"""Reading and writing biLM weights in the original bilm-tf layout, ``options.json`` +
``weights.hdf5``, as published by AllenNLP and read by every ELMo tool; every TensorFlow
convention is undone here and nowhere else. (This library's own ``.pt`` checkpoints are
:mod:`elmo.hub.checkpoints`.)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator

import h5py
import numpy as np
import torch
from torch import nn

from elmo.fileio import atomic_write_bytes, atomic_write_text
from elmo.hdf5io import HDF5FileError, hdf5_image, open_hdf5, read_dataset
from elmo.model.config import BiLMConfig, ConfigError
from elmo.model.network import BiLM

# Storage precisions of a weights file; loading always gives float32.
STORAGE_DTYPES = ("float32", "float16")


class WeightsError(ValueError):
    """A weights file does not match its options; the message names the dataset and shapes."""


def _lstm_prefix(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def _tf_datasets(model: BiLM) -> Iterator[tuple[str, tuple[int, ...], torch.Tensor, str]]:
    """Every dataset of the bilm-tf file as ``(name, tf_shape, parameter, conversion)``.

    ``conversion`` says how the TF array maps onto our parameter:
    ``"copy"`` (same layout), ``"t"`` (TF stores ``x @ W``, torch ``W @ x``: transpose),
    ``"conv"`` (TF ``(1, width, in, out)`` vs torch ``(out, in, width)``),
    ``"embed"`` (TF has no row for the padding id 0: ours is row 0, kept at zero),
    ``"lstm_x"``/``"lstm_h"`` (TF stacks the input and the state weights in one ``W_0`` of shape
    ``(input_dim + projection_dim, 4*dim)``, inputs first).
    """
    enc = model.token_encoder
    cfg = model.config
    yield "char_embed", (261, cfg.char_cnn.embedding_dim), enc.char_embedding.weight, "embed"
    for i, conv in enumerate(enc.convs):
        out_ch, in_ch, width = conv.weight.shape
        yield f"CNN/W_cnn_{i}", (1, width, in_ch, out_ch), conv.weight, "conv"
        yield f"CNN/b_cnn_{i}", (out_ch,), conv.bias, "copy"
    for k, highway in enumerate(enc.highways):
        n = highway.carry.weight.shape[0]
        for name, linear in (("carry", highway.carry), ("transform", highway.transform)):
            yield f"CNN_high_{k}/W_{name}", (n, n), linear.weight, "t"
            yield f"CNN_high_{k}/b_{name}", (n,), linear.bias, "copy"
    if enc.projection is not None:
        out_dim, in_dim = enc.projection.weight.shape
        yield "CNN_proj/W_proj", (in_dim, out_dim), enc.projection.weight, "t"
        yield "CNN_proj/b_proj", (out_dim,), enc.projection.bias, "copy"
    for direction, stack in enumerate((model.forward_layers, model.backward_layers)):
        for index, layer in enumerate(stack):
            prefix = _lstm_prefix(direction, index)
            w0 = (layer.input_dim + layer.projection_dim, 4 * layer.dim)
            yield f"{prefix}/W_0", w0, layer.input_weight, "lstm_x"
            yield f"{prefix}/W_0", w0, layer.state_weight, "lstm_h"
            yield f"{prefix}/B", (4 * layer.dim,), layer.bias, "copy"
            yield f"{prefix}/W_P_0", (layer.dim, layer.projection_dim), layer.projection, "t"


def check_numbers(dtype: np.dtype, where: str) -> None:
    """Refuse weights that are not real numbers (strings, objects, booleans, complex numbers),
    naming the dataset: checked from the dtype, before anything is read."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "fiu":
        raise WeightsError(f"{where} holds {_dtype_words(dtype)}, not numbers; the file is damaged or not a "
                           "weights file")


def _dtype_words(dtype: np.dtype) -> str:
    """What values of ``dtype`` are, in words (h5py marks its variable-length types in the metadata)."""
    vlen = (dtype.metadata or {}).get("vlen")
    if vlen is not None:
        return "variable-length strings" if vlen in (str, bytes) else "variable-length arrays"
    kinds = {"S": "byte strings", "U": "strings", "O": "Python objects", "b": "booleans", "c": "complex numbers",
             "V": "raw or compound records", "M": "dates", "m": "time spans"}
    return f"{kinds.get(dtype.kind, 'values')} ({dtype})"


# The largest magnitude a weight may have: float16's largest value, 65,504. Every model elmo can
# write fits in a float16 weights file (STORAGE_DTYPES; the default model's largest weight is 4.1),
# and a weight beyond it is damage: finite but huge weights (3e38) overflow float32 in the first
# product and turned most output values into NaN. The bound is on each value, checked in the
# same pass as finiteness; an overflow that still compounds through the layers is caught by the
# last guard, the check of every batch's output (elmo.inference.runtime).
MAX_WEIGHT = float(np.finfo(np.float16).max)


def check_finite(array: np.ndarray | torch.Tensor, where: str, bound: float = MAX_WEIGHT) -> None:
    """Refuse weights that are not numbers (:func:`check_numbers`), NaN or infinite, or of a
    magnitude above ``bound`` (:data:`MAX_WEIGHT`), naming the dataset: they would fail deep inside
    numpy, or load silently and turn every vector into NaN."""
    array = np.asarray(array)
    check_numbers(array.dtype, where)
    if array.dtype.kind != "f" or array.size == 0:
        return
    peak = float(np.max(np.abs(array)))  # NaN if any value is NaN: one pass decides
    if peak <= bound:
        return
    bad = int((~np.isfinite(array)).sum())
    if bad:
        raise WeightsError(f"{where} holds {bad} NaN or infinite value(s); the file is damaged or the "
                           f"training diverged")
    raise WeightsError(f"{where} holds a value of magnitude {peak:.3g}, beyond {bound:g}, the largest a weight may "
                       "have (its products would overflow float32); the file is damaged or the training diverged")


def _tf_to_torch(array: np.ndarray, conversion: str, param: torch.Tensor) -> torch.Tensor:
    if conversion == "copy":
        out = array
    elif conversion == "t":
        out = array.T
    elif conversion == "conv":
        out = array[0].transpose(2, 1, 0)
    elif conversion == "embed":
        out = np.concatenate([np.zeros((1, array.shape[1]), dtype=array.dtype), array])
    elif conversion == "lstm_x":
        out = array[: param.shape[1]].T
    elif conversion == "lstm_h":
        out = array[-param.shape[1]:].T
    else:  # pragma: no cover - the table above is closed
        raise AssertionError(conversion)
    # A view in the file's dtype: the parameter's copy_ transposes and widens it in one pass.
    return torch.from_numpy(np.asarray(out))


def load_bilm_tf(options_file: str | os.PathLike, weights_file: str | os.PathLike) -> BiLM:
    """Build a :class:`BiLM` from the original ``options.json`` and ``weights.hdf5``.

    Accepts float16 or float32 datasets and always gives a float32 model. A missing or mis-shaped
    dataset raises :class:`WeightsError` naming it and the shape the options call for.
    """
    return bilm_from_hdf5(BiLMConfig.from_json(options_file), weights_file, options_label=os.fspath(options_file))


def bilm_from_hdf5(config: BiLMConfig, weights_file: str | os.PathLike, *, options_label: str = "the options",
                   weights_label: str | None = None) -> BiLM:
    """:func:`load_bilm_tf` for a config already read (from an archive member, say). Errors name
    ``weights_label`` (default: the file's path) and ``options_label``."""
    if config.char_cnn.characters != "bytes":
        raise WeightsError(f"{options_label}: char_cnn.characters is {config.char_cnn.characters!r}: the bilm-tf layout "
                           f"holds only byte-scheme models (load a dictionary model from its ELMoForManyLangs folder "
                           f"or a native checkpoint)")
    label = weights_label or os.fspath(weights_file)
    try:
        fin = open_hdf5(weights_file, label)
    except HDF5FileError as e:
        raise WeightsError(str(e)) from None
    written: set[int] = set()
    with fin, torch.no_grad():
        try:
            model = BiLM(config)  # allocated once the file is known to be HDF5: a bad file costs no model
        except ConfigError as e:  # too large for this machine
            raise ConfigError(f"{options_label}: {e}") from None
        for name, shape, param, conversion in _tf_datasets(model):
            written.add(id(param))
            if name not in fin:
                raise WeightsError(f"{label}: dataset '{name}' is missing "
                                   f"(expected shape {shape} from {options_label})")
            dataset = fin[name]
            if not isinstance(dataset, h5py.Dataset) or tuple(dataset.shape) != shape:
                got = tuple(dataset.shape) if isinstance(dataset, h5py.Dataset) else "a group"
                raise WeightsError(f"{label}: dataset '{name}' has shape {got}, but "
                                   f"{options_label} needs {shape}")
            check_numbers(dataset.dtype, f"{label}: dataset '{name}'")  # before reading it
            try:
                array = read_dataset(dataset, f"{label}: dataset '{name}'")
            except HDF5FileError as e:
                raise WeightsError(str(e)) from None
            check_finite(array, f"{label}: dataset '{name}'")
            param.copy_(_tf_to_torch(array, conversion, param))
    unset = [name for name, p in model.named_parameters() if id(p) not in written]
    if unset:  # pragma: no cover - _tf_datasets covers every parameter of a BiLM
        raise AssertionError(f"parameters not in the bilm-tf layout: {unset}")
    return model


def bilm_tf_problems(model: BiLM) -> list[str]:
    """Why ``model`` has no exact place in the bilm-tf/AllenNLP layout; empty when it has one.

    Each reason names the part of the model and what the readers' code does instead (bilm-tf's
    ``BidirectionalLanguageModelGraph``, AllenNLP's ``_ElmoCharacterEncoder``/``_ElmoBiLm``).
    """
    config, problems = model.config, []
    cnn, lstm = config.char_cnn, config.lstm
    if cnn.word_dim:
        problems.append(f"word embedding: each token's input to the projection is a {cnn.word_dim}-dim word vector "
                        f"({cnn.n_words} words) beside the CNN's {cnn.n_filters} filters; bilm-tf's options.json has "
                        f"no word-embedding input, and AllenNLP builds its projection as "
                        f"Linear({cnn.n_filters}, {lstm.projection_dim}), which cannot hold these weights")
    if cnn.characters != "bytes":
        problems.append(f"characters: the model reads its own dictionary of {len(model.characters.chars)} "
                        f"Unicode characters; bilm-tf and AllenNLP read UTF-8 bytes (ids 0-261), where a "
                        f"non-ASCII character is several ids")
    return problems


def bilm_tf_reader_notes(config: BiLMConfig) -> list[str]:
    """Which of the other readers of the bilm-tf layout cannot load a model of ``config`` exactly,
    and why (from their loaders' code): the layout holds it, but a reader builds another network."""
    cnn, lstm = config.char_cnn, config.lstm
    notes = []
    if not lstm.use_skip_connections:
        notes.append("AllenNLP refuses biLMs without residual connections (_ElmoBiLm: 'We only support pretrained "
                     "biLMs with residual connections'); bilm-tf reads it")
    if lstm.projection_dim >= lstm.dim:
        notes.append(f"bilm-tf builds its LSTM without a projection when projection_dim ({lstm.projection_dim}) is "
                     f"not below dim ({lstm.dim}), so it would ignore W_P_0 and compute other numbers")
    if cnn.n_filters < lstm.projection_dim:
        notes.append(f"bilm-tf asserts n_filters > projection_dim for its token projection ({cnn.n_filters} filters, "
                     f"projection_dim {lstm.projection_dim})")
    return notes


def save_bilm_tf(model: BiLM, output_dir: str | os.PathLike, *, weights_name: str = "weights.hdf5",
                 options_name: str = "options.json", dtype: str = STORAGE_DTYPES[0]) -> tuple[str, str]:
    """Write ``options.json`` and ``weights.hdf5`` in the original layout (atomically).

    ``dtype`` may be ``"float16"`` to halve the file; :func:`load_bilm_tf` restores float32.
    Returns the two paths.
    """
    problems = bilm_tf_problems(model)
    if problems:
        raise WeightsError("this model has no place in the bilm-tf layout: " + "; ".join(problems))
    os.makedirs(output_dir, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for name, shape, param, conversion in _tf_datasets(model):
        value = param.detach().float().cpu().numpy()
        if conversion == "copy":
            arrays[name] = value
        elif conversion == "t":
            arrays[name] = value.T
        elif conversion == "conv":
            arrays[name] = value.transpose(2, 1, 0)[None]
        elif conversion == "embed":
            arrays[name] = value[1:]
        elif conversion == "lstm_x":
            arrays[name] = np.concatenate([value.T, np.zeros((shape[0] - value.shape[1], shape[1]), np.float32)])
        elif conversion == "lstm_h":
            arrays[name][-value.shape[1]:] = value.T
        assert arrays[name].shape == shape, (name, arrays[name].shape, shape)
    if model.token_encoder.projection is None:
        # bilm-tf has no projection when the filters already have the LSTM's width, but AllenNLP
        # always builds one and reads CNN_proj: an identity gives it the same numbers, and bilm-tf
        # (and this library) never look at the extra datasets.
        n = model.config.char_cnn.n_filters
        arrays["CNN_proj/W_proj"] = np.eye(n, dtype=np.float32)
        arrays["CNN_proj/b_proj"] = np.zeros(n, dtype=np.float32)
    weights_path = os.path.join(output_dir, weights_name)
    atomic_write_bytes(weights_path, hdf5_image({name: array.astype(dtype) for name, array in arrays.items()}))
    options_path = os.path.join(output_dir, options_name)
    options = model.config.to_dict()
    # bilm-tf's inference code refuses any other value (its training uses 261; the model is the same).
    options["char_cnn"]["n_characters"] = 262
    atomic_write_text(options_path, json.dumps(options, indent=2) + "\n")
    return options_path, weights_path


def weights_fingerprint(module: nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers (names included): tells apart the models a
    derived file (vocabulary cache, cached layers) was computed with."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()
