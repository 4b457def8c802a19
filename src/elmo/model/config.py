"""Typed configuration of a biLM, read from and written to the bilm-tf ``options.json``.

The original implementation describes a model with a nested JSON object::

    {"lstm": {...}, "char_cnn": {...}, <training fields>}

:class:`BiLMConfig` mirrors it field for field, so ``BiLMConfig.from_dict(d).to_dict() == d`` for
every options file the original wrote. Unknown or inconsistent fields raise :class:`ConfigError`
with the dotted name of the field at fault, and a model too large to allocate is refused here,
before anything is allocated (:data:`MAX_PARAMETER_BYTES`).

Two extension keys of ``char_cnn``, never written for a bilm-tf model, describe the
ELMoForManyLangs token encoder (:mod:`elmo.model.dictionary`): ``"characters": "dictionary"``
(characters looked up in the model's own dictionary instead of UTF-8 bytes; ``n_characters`` is
then the dictionary's size) and ``"word_embedding": {"dim": D, "n_words": N}`` (a word embedding
concatenated before the projection). They appear only in this library's native checkpoints:
bilm-tf and AllenNLP have no place for them (see ``docs/other-models.md``).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from elmo import jsonio
from elmo.checks import check_count, check_number


class ConfigError(ValueError):
    """An options file or dict is malformed; the message names the field at fault."""


ACTIVATIONS = ("relu", "tanh")
# How tokens become character ids: bilm-tf's UTF-8 bytes, or a dictionary kept with the model.
CHARACTER_SCHEMES = ("bytes", "dictionary")
# The largest biLM this library builds, in float32 bytes of parameters. The largest published ELMo
# (2x4096_512) holds 93.6M parameters, 0.37 GB; 32 GiB is 90 times that, more than any GPU of
# 2026 trains in float32 with its optimizer state. Above it an options file is taken for a typo
# (lstm.dim of 10**9 would need 64 EB) and refused with one line instead of a failed allocation.
MAX_PARAMETER_BYTES = 32 * 2**30
# Leading bytes of the binary files most often given where options.json belongs.
_BINARY_KINDS = {b"\x89HDF\r\n\x1a\n": "an HDF5 file", b"PK\x03\x04": "a zip archive (a PyTorch file or a model archive?)",
                 b"\x80": "a Python pickle (a PyTorch file?)", b"\x1f\x8b": "a gzip file"}
_BINARY_SIGNATURES = tuple(_BINARY_KINDS)
# An options.json is a few hundred bytes; one of more than this is not one (and is not read whole).
MAX_OPTIONS_BYTES = 1 << 20
# bilm-tf trains with 261 character ids (0..260) and its inference code adds 1 so that 0 can be
# padding, which makes 262. Files in the wild carry either number; the model is the same.
VALID_N_CHARACTERS = (261, 262)


@dataclass
class CharCNNConfig:
    """The character CNN token encoder: ``options["char_cnn"]``."""

    embedding_dim: int = 16
    filters: list[tuple[int, int]] = field(default_factory=lambda: [(1, 32), (2, 32), (3, 64)])
    n_highway: int = 1
    activation: str = "relu"
    n_characters: int = 262
    max_characters_per_token: int = 50
    characters: str = "bytes"  # see CHARACTER_SCHEMES and the module docstring
    word_dim: int = 0  # width of the word embedding beside the CNN (dictionary models only); 0: none
    n_words: int = 0  # rows of that word embedding

    @property
    def n_filters(self) -> int:
        """Total number of convolution filters: the width of the highway layers."""
        return sum(n for _, n in self.filters)


# Values of ``options["lstm"]["backend"]``, an extension key of ours (bilm-tf and AllenNLP read the
# lstm section by name and ignore it). Absent (None): bilm-tf's cell, clipping as the options say.
# "cudnn": a model trained with torch's LSTM kernel (cuDNN on a GPU), which has no clipping: the
# same cell with cell_clip and proj_clip null, so every reader computes it as it is written. Files
# that say so load and train as any model without clipping does (the fused path); the key is kept
# so that they round-trip.
LSTM_BACKENDS = ("cudnn",)


@dataclass
class LSTMConfig:
    """The two LSTM stacks: ``options["lstm"]``. ``cell_clip``/``proj_clip`` of None mean no clipping
    (an options file may also say ``Infinity``, which is read as null and written back as null).
    ``backend``: None, or ``"cudnn"`` for a model trained with torch's LSTM kernel (no clipping), kept as written."""

    dim: int = 1024
    projection_dim: int = 128
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True
    backend: str | None = None


# Top-level training fields of bilm-tf's options.json, plus the few of our own. Every one is
# optional: published inference-only options files carry none of them.
TRAINING_FIELDS: dict[str, type | tuple[type, ...]] = {
    "bidirectional": bool,
    "dropout": (int, float),
    "n_epochs": int,
    "n_train_tokens": int,
    "batch_size": int,
    "all_clip_norm_val": (int, float),
    "n_negative_samples_batch": int,
    "unroll_steps": int,
    "n_tokens_vocab": int,
    "sample_softmax": bool,
    "share_embedding_softmax": bool,
    "learning_rate": (int, float),
    # Our own additions; bilm-tf ignores keys it does not know.
    "optimizer": str,
    "weight_decay": (int, float),
    "warmup_steps": int,
}


@dataclass
class BiLMConfig:
    """A whole biLM: token encoder, LSTM stacks and (optionally) the training settings."""

    char_cnn: CharCNNConfig = field(default_factory=CharCNNConfig)
    lstm: LSTMConfig = field(default_factory=LSTMConfig)
    training: dict[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------------------- reading
    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> "BiLMConfig":
        """Build and validate a config from an ``options.json`` object."""
        if not isinstance(options, dict):
            raise ConfigError("options: expected a JSON object")
        unknown = set(options) - {"lstm", "char_cnn"} - set(TRAINING_FIELDS)
        if unknown:
            raise ConfigError(f"{sorted(unknown)[0]}: unknown field (known: lstm, char_cnn, "
                              f"{', '.join(TRAINING_FIELDS)})")
        if "char_cnn" not in options:
            raise ConfigError("char_cnn: missing; only character-input biLMs are supported")
        if "lstm" not in options:
            raise ConfigError("lstm: missing")
        training = {}
        for name, value in options.items():
            if name in TRAINING_FIELDS:
                _check_type(name, value, TRAINING_FIELDS[name])
                training[name] = value
        config = cls(char_cnn=_char_cnn_from_dict(options["char_cnn"]),
                     lstm=_lstm_from_dict(options["lstm"]), training=training)
        config.validate()
        return config

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "BiLMConfig":
        """Read an ``options.json`` file; errors name the file and the field."""
        with open(path, "rb") as f:
            return cls.from_bytes(f.read(MAX_OPTIONS_BYTES + 1), os.fspath(path))

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "BiLMConfig":
        """Parse the bytes of an ``options.json`` (a file, or an archive member); errors name
        ``where``. A binary file (a weights file given as options, say) is named as such."""
        if data.startswith(_BINARY_SIGNATURES) or b"\0" in data[:4096]:
            kind = next((name for sig, name in _BINARY_KINDS.items() if data.startswith(sig)), "a binary file")
            raise ConfigError(f"{where}: not an options.json: this is {kind}, not JSON text"
                              f"{' (the weights file?)' if kind.startswith('an HDF5') else ''}")
        if len(data) > MAX_OPTIONS_BYTES:
            raise ConfigError(f"{where}: not an options.json: more than {MAX_OPTIONS_BYTES // 2**20} MiB (an options "
                              "file is a few hundred bytes)")
        try:
            # bilm-tf's files may say Infinity (and a hand-edited one NaN or 1e400): each field's
            # own check names it.
            options = jsonio.loads(data.decode("utf-8"), where, max_bytes=MAX_OPTIONS_BYTES, finite=False,
                                   max_number_chars=1000)
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not an options.json: byte {e.start} is not UTF-8 text") from None
        except jsonio.JSONFileError as e:
            if e.reason.startswith("its JSON is nested too deeply"):
                raise ConfigError(f"{where}: not an options.json: its JSON is nested too deeply to read (an options "
                                  "file is three levels deep)") from None
            raise ConfigError(str(e)) from None
        try:
            return cls.from_dict(options)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from e

    # ----------------------------------------------------------------------------- writing
    def to_dict(self) -> dict[str, Any]:
        """The ``options.json`` object, in the original's layout."""
        cnn = self.char_cnn
        # No clipping is written as null: AllenNLP indexes both keys (bilm-tf reads them with .get).
        # Other unset fields (extension keys) are left out.
        lstm = {k: v for k, v in asdict(self.lstm).items() if v is not None or k in ("cell_clip", "proj_clip")}
        options: dict[str, Any] = {
            "lstm": lstm,
            "char_cnn": {
                "embedding": {"dim": cnn.embedding_dim},
                "filters": [[w, n] for w, n in cnn.filters],
                "n_highway": cnn.n_highway,
                "activation": cnn.activation,
                "n_characters": cnn.n_characters,
                "max_characters_per_token": cnn.max_characters_per_token,
            },
        }
        if cnn.characters != "bytes":  # extension keys: see the module docstring
            options["char_cnn"]["characters"] = cnn.characters
        if cnn.word_dim:
            options["char_cnn"]["word_embedding"] = {"dim": cnn.word_dim, "n_words": cnn.n_words}
        options.update(self.training)
        return options

    def to_json(self, path: str | os.PathLike) -> None:
        """Write ``options.json`` atomically."""
        from elmo.fileio import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    # -------------------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first inconsistent field."""
        cnn, lstm = self.char_cnn, self.lstm
        _check_count("char_cnn.embedding.dim", cnn.embedding_dim)
        if not cnn.filters:
            raise ConfigError("char_cnn.filters: needs at least one [width, n_filters] pair")
        for i, (width, n) in enumerate(cnn.filters):
            _check_count(f"char_cnn.filters[{i}] width", width)
            _check_count(f"char_cnn.filters[{i}] n_filters", n)
            if width > cnn.max_characters_per_token:
                raise ConfigError(f"char_cnn.filters[{i}]: width {width} is wider than "
                                  f"max_characters_per_token={cnn.max_characters_per_token}")
        _check_count("char_cnn.n_highway", cnn.n_highway, least=0)
        if cnn.activation not in ACTIVATIONS:
            raise ConfigError(f"char_cnn.activation: must be one of {ACTIVATIONS}, got {cnn.activation!r}")
        if cnn.characters not in CHARACTER_SCHEMES:
            raise ConfigError(f"char_cnn.characters: must be one of {CHARACTER_SCHEMES}, got {cnn.characters!r}")
        if cnn.characters == "bytes":
            if cnn.n_characters not in VALID_N_CHARACTERS:
                raise ConfigError(f"char_cnn.n_characters: must be 261 or 262 (the bilm-tf byte "
                                  f"scheme), got {cnn.n_characters}")
            if cnn.max_characters_per_token != 50:
                raise ConfigError("char_cnn.max_characters_per_token: the character id scheme is "
                                  f"fixed at 50 slots, got {cnn.max_characters_per_token}")
            if cnn.word_dim:
                raise ConfigError("char_cnn.word_embedding: a word embedding needs a word dictionary, which only "
                                  "'dictionary' models carry (char_cnn.characters)")
        else:
            _check_count("char_cnn.n_characters", cnn.n_characters)
            if cnn.max_characters_per_token < 3:
                raise ConfigError(f"char_cnn.max_characters_per_token: needs room for both markers and a "
                                  f"character, got {cnn.max_characters_per_token}")
        if cnn.word_dim:
            _check_count("char_cnn.word_embedding.dim", cnn.word_dim)
            _check_count("char_cnn.word_embedding.n_words", cnn.n_words)
        else:
            _check_count("char_cnn.word_embedding.dim", cnn.word_dim, least=0)
        _check_count("lstm.dim", lstm.dim)
        _check_count("lstm.projection_dim", lstm.projection_dim)
        _check_count("lstm.n_layers", lstm.n_layers)
        for name in ("cell_clip", "proj_clip"):
            value = getattr(lstm, name)
            # NaN compares false with everything: it would pass "<= 0" and make every vector NaN.
            if value is not None and (math.isnan(value) or value <= 0):
                raise ConfigError(f"lstm.{name}: must be a positive number (or null, or Infinity, for no clipping), "
                                  f"got {value}")
        if lstm.backend is not None and lstm.backend not in LSTM_BACKENDS:
            raise ConfigError(f"lstm.backend: expected {' or '.join(LSTM_BACKENDS)} (or no backend key), "
                              f"got {lstm.backend!r}")
        if lstm.backend == "cudnn" and (lstm.cell_clip is not None or lstm.proj_clip is not None):
            raise ConfigError(f"lstm.backend: cudnn (torch's LSTM kernel) has no clipping, but cell_clip is "
                              f"{lstm.cell_clip} and proj_clip {lstm.proj_clip}; set both to null for a cuDNN "
                              f"model, or drop the backend key to train with clipping")
        for name, least, above, below in (("dropout", 0, False, 1), ("learning_rate", 0, True, None),
                                          ("all_clip_norm_val", 0, True, None), ("weight_decay", 0, False, None)):
            if name in self.training:
                try:
                    check_number(self.training[name], name, least, above=above, below=below)
                except ValueError as error:
                    raise ConfigError(str(error)) from None
        if self.training.get("bidirectional") is False:
            raise ConfigError("bidirectional: only bidirectional biLMs are supported")
        for name in ("n_epochs", "batch_size", "unroll_steps", "n_tokens_vocab", "n_train_tokens"):
            if name in self.training:
                _check_count(name, self.training[name])
        # 0 negative samples: the full softmax.
        _check_count("n_negative_samples_batch", self.training.get("n_negative_samples_batch", 0), least=0)
        self._check_size()

    def parameter_count(self) -> int:
        """Parameters of the biLM these options describe (token encoder and both LSTM stacks,
        without a softmax), computed without allocating anything."""
        return sum(_parameter_terms(self).values())

    def _check_size(self) -> None:
        """Refuse options whose model would not fit :data:`MAX_PARAMETER_BYTES`, naming the size
        field that makes it so (the one whose reduction to 1 shrinks the model most)."""
        n = self.parameter_count()
        if 4 * n <= MAX_PARAMETER_BYTES:
            return
        shrunk = {name: sum(_parameter_terms(self, {name: 1}).values()) for name in _SIZE_FIELDS}
        culprit = min(shrunk, key=shrunk.get)
        raise ConfigError(f"{culprit}: {_shown_count(_field_value(self, culprit))} makes a biLM of {_count(n)} parameters, "
                          f"{_bytes(4 * n)} in float32; elmo refuses biLMs above {MAX_PARAMETER_BYTES / 2**30:g} GiB "
                          f"(the largest published ELMo has 93.6M parameters, 0.37 GB), so this is taken "
                          f"for a mistake")

    @property
    def output_dim(self) -> int:
        """Width of every ELMo layer: forward and backward projections concatenated."""
        return 2 * self.lstm.projection_dim

    @property
    def n_output_layers(self) -> int:
        """Number of biLM layers an ELMo mix sees: the token layer plus one per LSTM layer."""
        return self.lstm.n_layers + 1


# Size fields, by their dotted names in options.json, that the size check may blame.
_SIZE_FIELDS = ("lstm.dim", "lstm.projection_dim", "lstm.n_layers", "char_cnn.embedding.dim", "char_cnn.filters",
                "char_cnn.n_highway", "char_cnn.n_characters", "char_cnn.word_embedding.dim",
                "char_cnn.word_embedding.n_words")


def _field_value(config: BiLMConfig, name: str) -> Any:
    cnn, lstm = config.char_cnn, config.lstm
    return {"lstm.dim": lstm.dim, "lstm.projection_dim": lstm.projection_dim, "lstm.n_layers": lstm.n_layers,
            "char_cnn.embedding.dim": cnn.embedding_dim, "char_cnn.filters": f"{cnn.n_filters} filters",
            "char_cnn.n_highway": cnn.n_highway, "char_cnn.n_characters": cnn.n_characters,
            "char_cnn.word_embedding.dim": cnn.word_dim, "char_cnn.word_embedding.n_words": cnn.n_words}[name]


def _parameter_terms(config: BiLMConfig, override: dict[str, int] | None = None) -> dict[str, int]:
    """Parameter counts of the biLM's parts, with the size fields in ``override`` replaced
    (``"char_cnn.filters": 1`` makes every filter count 1). Python integers: no overflow."""
    o = override or {}
    cnn, lstm = config.char_cnn, config.lstm
    dim, proj, layers = (o.get(f"lstm.{k}", getattr(lstm, k)) for k in ("dim", "projection_dim", "n_layers"))
    char_dim = o.get("char_cnn.embedding.dim", cnn.embedding_dim)
    filters = [(w, o.get("char_cnn.filters", n)) for w, n in cnn.filters]
    n_filters = sum(n for _, n in filters)
    n_highway = o.get("char_cnn.n_highway", cnn.n_highway)
    n_chars = 262 if cnn.characters == "bytes" else o.get("char_cnn.n_characters", cnn.n_characters) + 1
    word_dim = o.get("char_cnn.word_embedding.dim", cnn.word_dim)
    n_words = o.get("char_cnn.word_embedding.n_words", cnn.n_words) + 1 if word_dim else 0
    projection_in = n_filters + word_dim
    return {
        "char_embedding": n_chars * char_dim,
        "convolutions": sum(n * (char_dim * w + 1) for w, n in filters),
        "highways": n_highway * 2 * (n_filters * n_filters + n_filters),
        "word_embedding": n_words * word_dim,
        "projection": projection_in * proj + proj,
        # per direction and layer: input and state weights, bias, projection
        "lstm": 2 * layers * (4 * dim * (proj + proj) + 4 * dim + dim * proj),
    }


def _count(n: int) -> str:
    """A Python integer of any size, as an error shows it: 3 significant digits (``9.36e+07``),
    or its order of magnitude where a float cannot hold it (options may hold a 400-digit integer)."""
    return f"{n:.3g}" if n < 10**300 else f"about 10^{len(str(n)) - 1}"


def _shown_count(value: Any) -> str:
    return _count(value) if isinstance(value, int) and value >= 10**15 else str(value)


def _bytes(n: int) -> str:
    if n >= 10**300:
        return f"about 10^{len(str(n)) - 1} bytes"
    for unit, size in (("EB", 10**18), ("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


def _check_type(name: str, value: Any, expected: type | tuple[type, ...]) -> None:
    # bool is an int in Python; a field that wants a number must not accept true/false.
    if isinstance(value, bool) and bool not in (expected if isinstance(expected, tuple) else (expected,)):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if not isinstance(value, expected):
        want = expected.__name__ if isinstance(expected, type) else "/".join(t.__name__ for t in expected)
        raise ConfigError(f"{name}: expected {want}, got {value!r}")


def _check_count(name: str, value: Any, least: int = 1) -> None:
    """:func:`elmo.checks.check_count`'s check and words, as a :class:`ConfigError`."""
    try:
        check_count(value, name, least)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _take(section: str, d: Any, allowed: dict[str, type | tuple[type, ...]], required: set[str]) -> dict:
    if not isinstance(d, dict):
        raise ConfigError(f"{section}: expected a JSON object")
    unknown = set(d) - set(allowed)
    if unknown:
        raise ConfigError(f"{section}.{sorted(unknown)[0]}: unknown field (known: {', '.join(allowed)})")
    missing = required - set(d)
    if missing:
        raise ConfigError(f"{section}.{sorted(missing)[0]}: missing")
    for name, value in d.items():
        if value is None and name in ("cell_clip", "proj_clip"):
            continue
        _check_type(f"{section}.{name}", value, allowed[name])
    return d


def _char_cnn_from_dict(d: Any) -> CharCNNConfig:
    d = _take("char_cnn", d, {"embedding": dict, "filters": list, "n_highway": int, "activation": str,
                              "n_characters": int, "max_characters_per_token": int, "characters": str,
                              "word_embedding": dict},
              {"embedding", "filters", "n_highway", "n_characters"})
    embedding = _take("char_cnn.embedding", d["embedding"], {"dim": int}, {"dim"})
    words = _take("char_cnn.word_embedding", d.get("word_embedding", {"dim": 0, "n_words": 0}),
                  {"dim": int, "n_words": int}, {"dim", "n_words"})
    filters = []
    for i, pair in enumerate(d["filters"]):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
            raise ConfigError(f"char_cnn.filters[{i}]: expected [width, n_filters], got {pair!r}")
        filters.append((pair[0], pair[1]))
    return CharCNNConfig(embedding_dim=embedding["dim"], filters=filters, n_highway=d["n_highway"],
                         activation=d.get("activation", "relu"), n_characters=d["n_characters"],
                         max_characters_per_token=d.get("max_characters_per_token", 50),
                         characters=d.get("characters", "bytes"), word_dim=words["dim"], n_words=words["n_words"])


def _lstm_from_dict(d: Any) -> LSTMConfig:
    number = (int, float)
    d = _take("lstm", d, {"dim": int, "projection_dim": int, "n_layers": int, "cell_clip": number,
                          "proj_clip": number, "use_skip_connections": bool, "backend": str},
              {"dim", "projection_dim", "n_layers"})
    def clip(name: str) -> float | None:
        value = d.get(name)
        return None if value == math.inf else value  # Infinity: no clipping, as null says

    return LSTMConfig(dim=d["dim"], projection_dim=d["projection_dim"], n_layers=d["n_layers"],
                      cell_clip=clip("cell_clip"), proj_clip=clip("proj_clip"),
                      use_skip_connections=d.get("use_skip_connections", False), backend=d.get("backend"))


# Training presets, one options.json each under resources/presets/: the architecture and the
# training fields in which a preset departs from bilm-tf's recipe (elmo.training.recipe.RECIPE).
# "small", "medium" and "original" are the architectures of the models AllenNLP published, and
# the one place their sizes are written down (elmo.hub.pretrained names its downloads from them).
def _preset_folder():
    from importlib import resources

    return resources.files("elmo").joinpath("resources/presets")


def _preset_names() -> tuple[str, ...]:
    names = [entry.name[:-len(".json")] for entry in _preset_folder().iterdir() if entry.name.endswith(".json")]
    return tuple(sorted(names, key=lambda name: (preset_config(name).lstm.dim, name)))


def preset_config(name: str) -> BiLMConfig:
    """The config of a training preset: ``tiny`` (minutes on a laptop CPU), ``small``
    (2x1024_128), ``medium`` (2x2048_256) or ``original`` (2x4096_512, 2 highway layers)."""
    entry = _preset_folder().joinpath(f"{name}.json")
    if not isinstance(name, str) or "/" in name or not entry.is_file():
        raise ConfigError(f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
    try:
        return BiLMConfig.from_dict(jsonio.loads(entry.read_bytes(), f"preset {name}"))
    except ConfigError as e:  # pragma: no cover - the package's own files are tested
        raise ConfigError(f"preset {name}: {e}") from e


PRESETS: tuple[str, ...] = _preset_names()


def published_config(name: str) -> BiLMConfig:
    """The architecture of a published model: ``"small"`` (2x1024_128), ``"medium"``
    (2x2048_256) or ``"original"`` (2x4096_512, also the 5.5B model's): its preset."""
    return preset_config(name)
