"""ELMoForManyLangs models (HIT-SCIR; the CoNLL 2018 shared task's 44 languages), read natively.

A model is a folder or zip archive of ``config.json`` (the training run's settings, whose
``config_path`` names the architecture file), ``char.dic`` and ``word.dic``
(:mod:`elmo.model.dictionary`), and two PyTorch state dicts, ``token_embedder.pkl`` and
``encoder.pkl``. The state dicts are read with ``torch.load(weights_only=True)`` only: a file
holding anything but tensors is refused, never unpickled.

What their released models use is an option of this library's model, not a second
implementation: the ``cnn`` token embedder (word embedding + character CNN over their character
dictionary, highway layers, projection) is ``char_cnn.characters = "dictionary"`` plus
``char_cnn.word_embedding``, and the ``elmo`` encoder (LSTM with projection, cell and projection
clipping, a residual between layers) is this library's LSTM. Their conventions are undone here,
once: their highway gate multiplies the *input* (so the carry weights are negated), their LSTM
orders gates input, forget, cell, output with no built-in forget bias (so gates are reordered and
1 is taken off the forget bias).

Not supported (refused with the reason): the ``lstm`` token embedder (a character BiLSTM instead
of the CNN), the ``lstm`` encoder (a plain ``nn.LSTM``), and models without a character CNN
(``char_dim`` 0). Their classifier (``classifier.pkl``, absent from the released models) is not
needed for embedding and is ignored.

``config_path`` is found as their loader finds it: joined to the model folder (so a relative path
may name a subfolder, and an absolute path is used as it is), else its base name in the model
folder. Released models carry an absolute ``config_path`` from their authors' machine and no
architecture file; their loader then falls back to its bundled ``cnn_50_100_512_4096_sample.json``.
Here every size is read from the weights' shapes instead, and the rest (clipping 3 and 3, relu, 50
characters per token) from that published file, with a warning.
"""

from __future__ import annotations

import io
import json
import os
import re
import warnings
from collections import OrderedDict
from pathlib import Path

import torch

from elmo import jsonio
from elmo.fileio import atomic_path, atomic_write_text, save_torch
from elmo.hub.archives import MAX_ARCHIVE_BYTES_ENV, ArchiveError, ModelFolder, max_archive_bytes, member_bound
from elmo.hub.pickles import UnsafePickleError, check_pickle, torch_reason
from elmo.model.config import BiLMConfig, CharCNNConfig, ConfigError, LSTMConfig
from elmo.model.dictionary import (
    CharacterDictionary,
    format_dictionary,
    parse_dictionary,
)
from elmo.model.network import BiLM
from elmo.model.weights import check_finite

# Their published architecture file (elmoformanylangs/configs/cnn_50_100_512_4096_sample.json),
# used by every released model: the values the weights' shapes cannot tell.
PUBLISHED_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu",
                       "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                       "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50},
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
ARCHITECTURE_FILE = "cnn_config.json"  # the name save_manylangs gives the architecture file
# Their gate order (input, forget, cell, output) -> ours (input, cell, forget, output), and back.
_GATES_FROM_THEIRS = (0, 2, 1, 3)


class ManyLangsError(ValueError):
    """An ELMoForManyLangs model is malformed or unsupported; the message names the file and entry."""


# ----------------------------------------------------------------------------------- reading
def _first_line(error: BaseException) -> str:
    """An exception as one short line (torch's messages run over many lines, or are empty)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


def load_tensors(folder: ModelFolder, name: str, limit: int | None = None, why: str = "") -> dict[str, torch.Tensor]:
    """A state dict from a ``.pkl`` member, read with ``weights_only=True``: tensors and plain
    containers only. The member is read as a stream, refused when it does not start as a pickle
    or PyTorch's zip format, or once past ``limit`` bytes (default :func:`max_archive_bytes`;
    ``why`` says where the bound comes from), so memory holds at most the member's bytes and then
    its tensors. A pickle that imports anything outside PyTorch's tensor rebuilding
    (:mod:`elmo.hub.pickles`) is refused with an error naming the file and the global, never
    unpickled."""
    label = folder.label(name)
    if limit is None:
        limit, why = max_archive_bytes(), f"${MAX_ARCHIVE_BYTES_ENV} allows"
    # a pickle's PROTO opcode, or PyTorch's zip format
    data = folder.read_bytes(name, limit=limit, why=why, magic=(b"\x80", b"PK\x03\x04"), kind="a PyTorch file")
    try:
        check_pickle(data, label)
    except UnsafePickleError as e:
        raise ManyLangsError(str(e)) from None
    try:
        with warnings.catch_warnings():  # torch remarks on pickle protocols; the refusal below says enough
            warnings.simplefilter("ignore")
            payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for files that are not its own
        raise ManyLangsError(f"{label}: not a readable PyTorch file: damaged or truncated ({torch_reason(e)})") from None
    del data
    if not isinstance(payload, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in payload.items()):
        raise ManyLangsError(f"{label}: expected a state dict (parameter names -> tensors), got "
                             f"{type(payload).__name__}")
    for key, tensor in payload.items():
        if tensor.is_floating_point():
            check_finite(tensor.float(), f"{label}: tensor '{key}'")
    return payload


def _json_member(folder: ModelFolder, name: str) -> dict:
    text = folder.read_text(name)
    try:
        value = jsonio.loads(text, folder.label(name))
    except jsonio.JSONFileError as e:
        if e.reason.startswith("its JSON is nested too deeply"):
            raise ManyLangsError(f"{folder.label(name)}: its JSON is nested too deeply to read (a model's config is "
                                 "one level deep)") from None
        raise ManyLangsError(str(e)) from None
    if not isinstance(value, dict):
        raise ManyLangsError(f"{folder.label(name)}: expected a JSON object")
    return value


def read_architecture(folder: ModelFolder) -> dict | None:
    """Their architecture (``encoder``, ``token_embedder``, ...) from the file ``config.json``'s
    ``config_path`` names, found as their loader finds it: relative to the model folder (or an
    absolute path, as it is), else by its base name in the model folder; None, with a warning,
    only when it is in neither place (the released models: an absolute path on their authors'
    machine), where their loader falls back to its bundled file of that name."""
    run = _json_member(folder, "config.json")
    config_path = run.get("config_path")
    if not isinstance(config_path, str) or not config_path:
        raise ManyLangsError(f"{folder.label('config.json')}: config_path: expected the architecture file's name, "
                             f"got {config_path!r}")
    found = folder.find_file(config_path)
    if found is not None:
        return _json_member(folder, found)
    base = re.split(r"[/\\]", config_path)[-1]
    if folder.has(base):
        return _json_member(folder, base)
    warnings.warn(f"{folder.label('config.json')}: config_path {config_path!r} is neither a file relative to the "
                  f"model nor an absolute path on this machine, and no {base} is in the model; its sizes come "
                  f"from the weights, and clipping ({PUBLISHED_ARCHITECTURE['encoder']['cell_clip']}, "
                  f"{PUBLISHED_ARCHITECTURE['encoder']['proj_clip']}), activation (relu) and characters per token "
                  f"(50) from ELMoForManyLangs' published cnn_50_100_512_4096_sample.json, as their loader does",
                  stacklevel=3)
    return None


def _count(tensors: dict[str, torch.Tensor], pattern: str) -> int:
    return len({m.group(1) for k in tensors if (m := re.fullmatch(pattern, k))})


def _section(arch: dict, name: str, where: str) -> dict:
    value = arch.get(name)
    if not isinstance(value, dict):
        raise ManyLangsError(f"{where}: {name}: missing or not an object")
    return value


def build_config(arch: dict | None, embedder: dict[str, torch.Tensor], encoder: dict[str, torch.Tensor],
                 where: str) -> BiLMConfig:
    """Our config for their model: the sizes from the tensors, checked against ``arch`` (their
    architecture file, ``where`` in errors) when there is one."""
    published = arch is None
    arch = PUBLISHED_ARCHITECTURE if arch is None else arch
    te, en = _section(arch, "token_embedder", where), _section(arch, "encoder", where)
    if str(te.get("name", "")).lower() != "cnn":
        raise ManyLangsError(f"{where}: token_embedder.name is {te.get('name')!r}: only their 'cnn' token embedder "
                             f"is supported (the 'lstm' one, a character BiLSTM, is not; no released model uses it)")
    if str(en.get("name", "")).lower() != "elmo":
        raise ManyLangsError(f"{where}: encoder.name is {en.get('name')!r}: only their 'elmo' encoder is supported "
                             f"(the 'lstm' one, a plain nn.LSTM without clipping or residual, is not)")
    if "char_emb_layer.embedding.weight" not in embedder or (not published and not te.get("char_dim")):
        raise ManyLangsError(f"{where}: the model has no character CNN (char_dim 0); only models with one are "
                             f"supported, as every released one")
    n_convs, n_highway = _count(embedder, r"convolutions\.(\d+)\.weight"), _count(embedder, r"highways\._layers\.(\d+)\.weight")
    n_layers = _count(encoder, r"forward_layer_(\d+)\.state_projection\.weight")
    filters = [(int(embedder[f"convolutions.{i}.weight"].shape[2]), int(embedder[f"convolutions.{i}.weight"].shape[0]))
               for i in range(n_convs) if f"convolutions.{i}.weight" in embedder]
    words = embedder.get("word_emb_layer.embedding.weight")
    projection = embedder.get("projection.weight")
    state_projection = encoder.get("forward_layer_0.state_projection.weight")
    if projection is None or state_projection is None or not filters:
        missing = "projection.weight" if projection is None else (
            "forward_layer_0.state_projection.weight" if state_projection is None else "convolutions.0.weight")
        raise ManyLangsError(f"{where}: tensor '{missing}' is missing")
    sizes = {"filters": [list(f) for f in filters], "n_highway": n_highway,
             "char_dim": int(embedder["char_emb_layer.embedding.weight"].shape[1]),
             "word_dim": int(words.shape[1]) if words is not None else 0,
             "projection_dim": int(projection.shape[0]), "dim": int(state_projection.shape[1]), "n_layers": n_layers}
    if not published:  # the file must describe these weights
        declared = {"filters": te.get("filters"), "n_highway": te.get("n_highway"), "char_dim": te.get("char_dim"),
                    "word_dim": te.get("word_dim"), "projection_dim": en.get("projection_dim"),
                    "dim": en.get("dim"), "n_layers": en.get("n_layers")}
        for key, value in declared.items():
            if value != sizes[key]:
                raise ManyLangsError(f"{where}: {key} is {value!r}, but the weights have {sizes[key]!r}")

    def clip(value, name: str) -> float | None:
        if value is None or value == 0:  # their cell: "if clip_value:" -- 0 and null mean none
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ManyLangsError(f"{where}: encoder.{name}: expected a non-negative number, got {value!r}")
        return value

    max_chars = te.get("max_characters_per_token", 50)
    try:
        config = BiLMConfig(
            char_cnn=CharCNNConfig(embedding_dim=sizes["char_dim"], filters=filters, n_highway=n_highway,
                                   activation=te.get("activation", "relu"),
                                   n_characters=int(embedder["char_emb_layer.embedding.weight"].shape[0]),
                                   max_characters_per_token=max_chars, characters="dictionary",
                                   word_dim=sizes["word_dim"], n_words=int(words.shape[0]) if words is not None else 0),
            lstm=LSTMConfig(dim=sizes["dim"], projection_dim=sizes["projection_dim"], n_layers=n_layers,
                            cell_clip=clip(en.get("cell_clip"), "cell_clip"),
                            proj_clip=clip(en.get("proj_clip"), "proj_clip"), use_skip_connections=True))
        config.validate()
    except ConfigError as e:
        raise ManyLangsError(f"{where}: {e}") from None
    return config


def _expected_tensors(config: BiLMConfig) -> dict[str, dict[str, tuple[int, ...]]]:
    """Every tensor of their two state dicts, with its shape, for a model of ``config``."""
    cnn, lstm = config.char_cnn, config.lstm
    n = cnn.n_filters
    embedder: dict[str, tuple[int, ...]] = {"char_emb_layer.embedding.weight": (cnn.n_characters, cnn.embedding_dim)}
    if cnn.word_dim:
        embedder["word_emb_layer.embedding.weight"] = (cnn.n_words, cnn.word_dim)
    for i, (width, count) in enumerate(cnn.filters):
        embedder[f"convolutions.{i}.weight"] = (count, cnn.embedding_dim, width)
        embedder[f"convolutions.{i}.bias"] = (count,)
    for k in range(cnn.n_highway):
        embedder[f"highways._layers.{k}.weight"] = (2 * n, n)
        embedder[f"highways._layers.{k}.bias"] = (2 * n,)
    embedder["projection.weight"] = (lstm.projection_dim, n + cnn.word_dim)
    embedder["projection.bias"] = (lstm.projection_dim,)
    encoder: dict[str, tuple[int, ...]] = {}
    for layer in range(lstm.n_layers):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = (4 * lstm.dim, lstm.projection_dim)
            encoder[f"{prefix}.state_linearity.weight"] = (4 * lstm.dim, lstm.projection_dim)
            encoder[f"{prefix}.state_linearity.bias"] = (4 * lstm.dim,)
            encoder[f"{prefix}.state_projection.weight"] = (lstm.projection_dim, lstm.dim)
    return {"token_embedder.pkl": embedder, "encoder.pkl": encoder}


def _check_tensors(folder: ModelFolder, name: str, tensors: dict[str, torch.Tensor],
                   expected: dict[str, tuple[int, ...]]) -> None:
    for key, shape in expected.items():
        if key not in tensors:
            raise ManyLangsError(f"{folder.label(name)}: tensor '{key}' is missing (expected shape {shape})")
        if tuple(tensors[key].shape) != shape:
            raise ManyLangsError(f"{folder.label(name)}: tensor '{key}' has shape {tuple(tensors[key].shape)}, "
                                 f"expected {shape}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ManyLangsError(f"{folder.label(name)}: unexpected tensor '{extra[0]}' (not part of the supported "
                             f"cnn token embedder and elmo encoder)")


def _read_dictionary(folder: ModelFolder, name: str) -> dict[str, int]:
    entries = parse_dictionary(folder.read_text(name), folder.label(name))
    if not entries:
        raise ManyLangsError(f"{folder.label(name)}: empty")
    return entries


def _check_rows(folder: ModelFolder, name: str, entries: dict[str, int], rows: int, what: str) -> None:
    token, largest = max(entries.items(), key=lambda item: item[1])
    if largest >= rows:
        raise ManyLangsError(f"{folder.label(name)}: id {largest} of {token!r} is outside the {what} of "
                             f"token_embedder.pkl ({rows} rows)")


def _rows(entries: dict[str, int] | None) -> int:
    return max(entries.values()) + 1 if entries else 0


def member_parameters(arch: dict | None, n_chars: int, n_words: int) -> dict[str, int]:
    """How many parameters each state dict of a model of ``arch`` (their architecture file;
    their published one when None) holds, for dictionaries of ``n_chars`` and ``n_words`` rows:
    what bounds the members' sizes before they are read. A size the file does not give as a
    number counts as the published one (:func:`build_config` names it later)."""
    def entry(section: str, key: str):
        value = arch.get(section) if isinstance(arch, dict) else None
        return value.get(key) if isinstance(value, dict) else None

    def size(section: str, key: str) -> int:
        value = entry(section, key)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return value if ok else PUBLISHED_ARCHITECTURE[section][key]

    filters = entry("token_embedder", "filters")
    if not (isinstance(filters, list) and all(isinstance(f, list) and len(f) == 2 and
                                              all(isinstance(v, int) and v >= 0 for v in f) for f in filters)):
        filters = PUBLISHED_ARCHITECTURE["token_embedder"]["filters"]
    char_dim, word_dim = size("token_embedder", "char_dim"), size("token_embedder", "word_dim")
    n_highway = size("token_embedder", "n_highway")
    dim, proj, layers = size("encoder", "dim"), size("encoder", "projection_dim"), size("encoder", "n_layers")
    n = sum(count for _, count in filters)
    embedder = (n_chars * char_dim + n_words * word_dim + sum(count * (char_dim * width + 1) for width, count in filters)
                + n_highway * (2 * n * n + 2 * n) + proj * (n + word_dim) + proj)
    encoder = 2 * layers * (2 * 4 * dim * proj + 4 * dim + proj * dim)
    return {"token_embedder.pkl": embedder, "encoder.pkl": encoder}


def load_manylangs(source: ModelFolder | str | os.PathLike) -> BiLM:
    """The biLM of an ELMoForManyLangs model (folder or zip), in eval mode. Errors name the file
    and the entry or tensor at fault (:class:`ManyLangsError`, :class:`~elmo.hub.archives.ArchiveError`)."""
    if not isinstance(source, ModelFolder):
        with ModelFolder(source) as folder:
            return load_manylangs(folder)
    folder = source
    for name in ("config.json", "token_embedder.pkl", "encoder.pkl", "char.dic"):
        if not folder.has(name):
            raise ArchiveError(f"{folder.label(name)}: missing; an ELMoForManyLangs model holds config.json, "
                               f"char.dic, word.dic, token_embedder.pkl and encoder.pkl")
    arch = read_architecture(folder)
    # The architecture and the dictionaries say how large the state dicts can be: a member past
    # that is refused while it is read, before it fills memory.
    chars = _read_dictionary(folder, "char.dic")
    words = _read_dictionary(folder, "word.dic") if folder.has("word.dic") else None
    counts = member_parameters(arch, _rows(chars), _rows(words))
    origin = f"the architecture in {folder.label('config.json')}" if arch is not None else \
        "ELMoForManyLangs' published architecture"
    embedder, encoder = (load_tensors(folder, name, member_bound(counts[name]),
                                      f"{name} of {origin} with {folder.label('char.dic')} can need "
                                      f"({counts[name]:,} parameters)")
                         for name in ("token_embedder.pkl", "encoder.pkl"))
    where = folder.label("config.json") if arch is None else "the architecture file named by " + folder.label("config.json")
    config = build_config(arch, embedder, encoder, where)
    for name, expected in _expected_tensors(config).items():
        _check_tensors(folder, name, embedder if name == "token_embedder.pkl" else encoder, expected)
    cnn = config.char_cnn
    _check_rows(folder, "char.dic", chars, cnn.n_characters, "character embedding")
    if cnn.word_dim:
        if words is None:
            raise ArchiveError(f"{folder.label('word.dic')}: missing; the model has a word embedding")
        _check_rows(folder, "word.dic", words, cnn.n_words, "word embedding")
    else:
        words = None  # their loader reads word.dic only for a word embedding
    try:
        characters = CharacterDictionary(chars, words, cnn.max_characters_per_token,
                                         where_chars=folder.label("char.dic"), where_words=folder.label("word.dic"))
    except ValueError as e:
        raise ManyLangsError(str(e)) from None
    model = BiLM(config, characters=characters)
    _copy_weights_in(model, embedder, encoder)
    return model.eval()


def _gates(tensor: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    return torch.cat([tensor.chunk(4, dim=0)[i] for i in order], dim=0)


@torch.no_grad()
def _copy_weights_in(model: BiLM, embedder: dict[str, torch.Tensor], encoder: dict[str, torch.Tensor]) -> None:
    enc = model.token_encoder
    enc.char_embedding.weight[1:] = embedder["char_emb_layer.embedding.weight"]
    enc.char_embedding.weight[0] = 0
    if enc.word_embedding is not None:
        enc.word_embedding.weight[1:] = embedder["word_emb_layer.embedding.weight"]
        enc.word_embedding.weight[0] = 0
    for i, conv in enumerate(enc.convs):
        conv.weight.copy_(embedder[f"convolutions.{i}.weight"])
        conv.bias.copy_(embedder[f"convolutions.{i}.bias"])
    n = enc.config.n_filters
    for k, highway in enumerate(enc.highways):
        # theirs: y = g * x + (1 - g) * relu(A x), g = sigmoid(B x); ours gates the transformed
        # input, so our carry is -B (the same identity AllenNLP uses for bilm-tf's files)
        weight, bias = embedder[f"highways._layers.{k}.weight"], embedder[f"highways._layers.{k}.bias"]
        highway.transform.weight.copy_(weight[:n])
        highway.transform.bias.copy_(bias[:n])
        highway.carry.weight.copy_(-weight[n:])
        highway.carry.bias.copy_(-bias[n:])
    enc.projection.weight.copy_(embedder["projection.weight"])
    enc.projection.bias.copy_(embedder["projection.bias"])
    for direction, stack in (("forward", model.forward_layers), ("backward", model.backward_layers)):
        for index, layer in enumerate(stack):
            prefix = f"{direction}_layer_{index}"
            layer.input_weight.copy_(_gates(encoder[f"{prefix}.input_linearity.weight"], _GATES_FROM_THEIRS))
            layer.state_weight.copy_(_gates(encoder[f"{prefix}.state_linearity.weight"], _GATES_FROM_THEIRS))
            bias = _gates(encoder[f"{prefix}.state_linearity.bias"], _GATES_FROM_THEIRS).clone()
            bias[2 * layer.dim:3 * layer.dim] -= 1.0  # our cell adds bilm-tf's forget bias of 1 itself
            layer.bias.copy_(bias)
            layer.projection.copy_(encoder[f"{prefix}.state_projection.weight"])


# ----------------------------------------------------------------------------------- writing
def manylangs_problems(model: BiLM) -> list[str]:
    """Why ``model`` cannot be written in the ELMoForManyLangs format; empty when it can."""
    if model.config.char_cnn.characters != "dictionary":
        return ["characters: the model reads UTF-8 bytes (bilm-tf's scheme); ELMoForManyLangs reads Unicode "
                "characters through a dictionary, where a character is one id and not one to four, so no dictionary "
                "gives this model's numbers"]
    return []


@torch.no_grad()
def _tensors_out(model: BiLM) -> tuple[OrderedDict, OrderedDict]:
    enc = model.token_encoder
    embedder: OrderedDict[str, torch.Tensor] = OrderedDict()
    if enc.word_embedding is not None:
        embedder["word_emb_layer.embedding.weight"] = enc.word_embedding.weight[1:].clone()
    embedder["char_emb_layer.embedding.weight"] = enc.char_embedding.weight[1:].clone()
    for i, conv in enumerate(enc.convs):
        embedder[f"convolutions.{i}.weight"] = conv.weight.clone()
        embedder[f"convolutions.{i}.bias"] = conv.bias.clone()
    for k, highway in enumerate(enc.highways):
        embedder[f"highways._layers.{k}.weight"] = torch.cat([highway.transform.weight, -highway.carry.weight])
        embedder[f"highways._layers.{k}.bias"] = torch.cat([highway.transform.bias, -highway.carry.bias])
    embedder["projection.weight"] = enc.projection.weight.clone()
    embedder["projection.bias"] = enc.projection.bias.clone()
    encoder: OrderedDict[str, torch.Tensor] = OrderedDict()
    for index in range(model.n_layers):
        for direction, stack in (("forward", model.forward_layers), ("backward", model.backward_layers)):
            layer, prefix = stack[index], f"{direction}_layer_{index}"
            encoder[f"{prefix}.input_linearity.weight"] = _gates(layer.input_weight, _GATES_FROM_THEIRS)
            encoder[f"{prefix}.state_linearity.weight"] = _gates(layer.state_weight, _GATES_FROM_THEIRS)
            bias = layer.bias.clone()
            bias[2 * layer.dim:3 * layer.dim] += 1.0
            encoder[f"{prefix}.state_linearity.bias"] = _gates(bias, _GATES_FROM_THEIRS)
            encoder[f"{prefix}.state_projection.weight"] = layer.projection.clone()
    return embedder, encoder


def architecture_of(config: BiLMConfig) -> dict:
    """Their architecture file for ``config`` (a dictionary model)."""
    cnn, lstm = config.char_cnn, config.lstm
    return {
        "encoder": {"name": "elmo", "projection_dim": lstm.projection_dim, "cell_clip": lstm.cell_clip or 0,
                    "proj_clip": lstm.proj_clip or 0, "dim": lstm.dim, "n_layers": lstm.n_layers},
        "token_embedder": {"name": "cnn", "activation": cnn.activation, "filters": [list(f) for f in cnn.filters],
                           "n_highway": cnn.n_highway, "word_dim": cnn.word_dim, "char_dim": cnn.embedding_dim,
                           "max_characters_per_token": cnn.max_characters_per_token},
        "classifier": {"name": "sampled_softmax", "n_samples": 8192},
        "dropout": config.training.get("dropout", 0.1),
    }


def save_manylangs(model: BiLM, output_dir: str | os.PathLike) -> None:
    """Write a dictionary model in the ELMoForManyLangs format (their ``Embedder`` loads it):
    ``config.json`` (``config_path`` relative, as their README asks), the architecture file,
    ``char.dic``, ``word.dic`` and the two state dicts in the serialisation PyTorch 0.4 wrote.
    Each file is written atomically. Raises :class:`ManyLangsError` for a byte-scheme model."""
    problems = manylangs_problems(model)
    if problems:
        raise ManyLangsError("this model has no place in the ELMoForManyLangs format: " + "; ".join(problems))
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    embedder, encoder = _tensors_out(model)
    for name, tensors in (("token_embedder.pkl", embedder), ("encoder.pkl", encoder)):
        with atomic_path(out / name) as tmp:
            save_torch(tensors, tmp, _use_new_zipfile_serialization=False)
    atomic_write_text(out / "char.dic", format_dictionary(model.characters.chars))
    if model.characters.words is not None:  # their loader reads word.dic only for a word embedding
        atomic_write_text(out / "word.dic", format_dictionary(model.characters.words))
    atomic_write_text(out / ARCHITECTURE_FILE, json.dumps(architecture_of(model.config), indent=1) + "\n")
    atomic_write_text(out / "config.json", json.dumps({"config_path": ARCHITECTURE_FILE}) + "\n")


__all__ = ["ManyLangsError", "PUBLISHED_ARCHITECTURE", "architecture_of", "build_config", "load_manylangs",
           "load_tensors", "manylangs_problems", "member_parameters", "read_architecture", "save_manylangs"]
