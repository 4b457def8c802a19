"""Reading and writing biLM weights in the original bilm-tf layout, ``options.json`` +
``weights.hdf5``, as published by AllenNLP and read by every ELMo tool; every TensorFlow
convention is undone here and nowhere else. (This library's own ``.pt`` checkpoints are
:mod:`elmo.hub.checkpoints`.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import h5py
import numpy as np
import torch
from torch import nn

from elmo.fileio import atomic_path
from elmo.model.bilm import BiLM
from elmo.model.config import BiLMConfig

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


def check_finite(array: np.ndarray | torch.Tensor, where: str) -> None:
    """Refuse NaN or infinite weights, naming the dataset: they would load silently and turn
    every vector into NaN."""
    array = np.asarray(array)
    if np.isfinite(array).all():
        return
    bad = int((~np.isfinite(array)).sum())
    if bad:
        raise WeightsError(f"{where} holds {bad} NaN or infinite value(s); the file is damaged or the "
                           f"training diverged")


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
    config = BiLMConfig.from_json(options_file)
    model = BiLM(config)
    written: set[int] = set()
    try:
        fin = h5py.File(weights_file, "r")
    except OSError as e:
        raise WeightsError(f"{weights_file}: cannot open as HDF5 ({e})") from e
    with fin, torch.no_grad():
        for name, shape, param, conversion in _tf_datasets(model):
            written.add(id(param))
            if name not in fin:
                raise WeightsError(f"{weights_file}: dataset '{name}' is missing "
                                   f"(expected shape {shape} from {options_file})")
            dataset = fin[name]
            if not isinstance(dataset, h5py.Dataset) or tuple(dataset.shape) != shape:
                got = tuple(dataset.shape) if isinstance(dataset, h5py.Dataset) else "a group"
                raise WeightsError(f"{weights_file}: dataset '{name}' has shape {got}, but "
                                   f"{options_file} needs {shape}")
            array = dataset[...]
            check_finite(array, f"{weights_file}: dataset '{name}'")
            param.copy_(_tf_to_torch(array, conversion, param))
    unset = [name for name, p in model.named_parameters() if id(p) not in written]
    if unset:  # pragma: no cover - _tf_datasets covers every parameter of a BiLM
        raise AssertionError(f"parameters not in the bilm-tf layout: {unset}")
    return model


def save_bilm_tf(model: BiLM, output_dir: str | os.PathLike, *, weights_name: str = "weights.hdf5",
                 options_name: str = "options.json", dtype: str = STORAGE_DTYPES[0]) -> tuple[str, str]:
    """Write ``options.json`` and ``weights.hdf5`` in the original layout (atomically).

    ``dtype`` may be ``"float16"`` to halve the file; :func:`load_bilm_tf` restores float32.
    Returns the two paths.
    """
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
    weights_path = os.path.join(output_dir, weights_name)
    with atomic_path(weights_path) as tmp:
        with h5py.File(tmp, "w") as fout:
            for name, array in arrays.items():
                fout.create_dataset(name, data=array.astype(dtype))
    options_path = os.path.join(output_dir, options_name)
    model.config.to_json(options_path)
    return options_path, weights_path


def weights_fingerprint(module: nn.Module) -> str:
    """SHA-256 of a module's parameters and buffers (names included): tells apart the models a
    derived file (vocabulary cache, cached layers) was computed with."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()
