"""What the server's endpoints read and write: requests checked against the limits, one error per
bad field, vectors pooled and encoded. No web framework here: :mod:`elmo.serve.app` routes
requests to these functions.

Two dialects are spoken. Hugging Face text-embeddings-inference's (TEI): ``POST /embed_all``
``{"inputs": str | [str] | [[token, ...]], "layers": ...}`` answers one array per input, and
``POST /embed`` one vector per input; its errors are ``{"error": message, "error_type": kind}``.
OpenAI's ``POST /v1/embeddings`` ``{"input": str | [str], "model": ..., "encoding_format":
"float" | "base64"}`` answers ``{"object": "list", "data": [...], "model": ..., "usage": ...}``;
its errors are ``{"error": {"message", "type", "param", "code"}}``.

Strings are split on whitespace, as ``elmo embed`` splits a line; a list of strings inside the
list of inputs is one input's tokens. A pooled vector is by default the mean over the tokens of
the average of the biLM's layers, ``Embedder.embed_sentence(s, layers="average").mean(axis=0)``;
``layers`` (``"average"``, ``"top"`` or a layer index) and ``pooling`` (``"mean"`` or ``"max"``)
choose others.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from elmo.checks import check_count
from elmo.inference.embed import select_layers
from elmo.model.chars import tokenize

POOLINGS = ("mean", "max")
DEFAULT_POOLING = "mean"
DEFAULT_POOLED_LAYERS = "average"
ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class Limits:
    """What one request may ask. ``max_input_tokens``: tokens of one input (after splitting on
    whitespace); ``max_inputs``: inputs in one request; ``max_request_tokens``: tokens of all the
    inputs of one request together; ``max_body_bytes``: the request's body."""

    max_input_tokens: int = 2048
    max_inputs: int = 2048
    max_request_tokens: int = 16384
    max_body_bytes: int = 2 * 2**20

    def __post_init__(self):
        for name, value in asdict(self).items():
            check_count(value, name)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ApiError(Exception):
    """A request the server refuses or could not answer: the HTTP ``status``, one line of
    ``message``, the request's ``field`` at fault and the ``limit`` it broke, if any."""

    def __init__(self, status: int, message: str, *, field: str | None = None, limit: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field, self.limit = status, message, field, limit

    def tei_body(self) -> dict:
        """text-embeddings-inference's error shape (its ``error_type`` names)."""
        kind = {503: "Unhealthy", 500: "Backend"}.get(self.status, "Validation")
        body: dict = {"error": self.message, "error_type": kind}
        if self.field is not None:
            body["field"] = self.field
        if self.limit is not None:
            body["limit"] = self.limit
        return body

    def openai_body(self) -> dict:
        """OpenAI's error shape: ``param`` names the field, ``code`` the limit broken."""
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        return {"error": {"message": self.message, "type": kind, "param": self.field, "code": self.limit}}


# ------------------------------------------------------------------------------ reading requests
def parse_json(body: bytes) -> dict:
    """A request body as a JSON object; malformed JSON is a 400 naming the byte at fault."""
    try:
        value = json.loads(body)
    except UnicodeDecodeError as e:
        raise ApiError(400, f"body: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"body: malformed JSON at line {e.lineno}, column {e.colno} (byte {e.pos}): {e.msg}") \
            from None
    if not isinstance(value, dict):
        raise ApiError(422, f"body: expected a JSON object, got {_json_kind(value)}", field="body")
    return value


def _json_kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def check_fields(body: dict, known: Sequence[str]) -> None:
    """Refuse a field the endpoint does not know (a misspelt option would otherwise be ignored)."""
    for name in body:
        if name not in known:
            raise ApiError(422, f"{name}: unknown field; this endpoint takes {', '.join(known)}", field=name)


def read_inputs(value, field: str, limits: Limits, truncate: str | None = None) -> list[list[str]]:
    """The inputs of a request as token lists: a string is one input, split on whitespace; a
    list holds inputs, each a string or a list of token strings. Checked against ``limits``:
    413 naming the limit; with ``truncate`` (``"right"`` or ``"left"``), an input over
    ``max_input_tokens`` loses its last (or first) tokens instead."""
    if value is None:
        raise ApiError(422, f"{field}: required (a string or a list of inputs)", field=field)
    if isinstance(value, str):
        items, single = [value], True
    elif isinstance(value, list):
        items, single = value, False
    else:
        raise ApiError(422, f"{field}: expected a string or a list of inputs, got {_json_kind(value)}", field=field)
    if not items:
        raise ApiError(422, f"{field}: an empty list; give at least one input", field=field)
    if len(items) > limits.max_inputs:
        raise ApiError(413, f"{field}: {len(items):,} inputs, more than max_inputs ({limits.max_inputs:,}) for one "
                            "request; send them in several requests", field=field, limit="max_inputs")
    sentences, total = [], 0
    for i, item in enumerate(items):
        where = field if single else f"{field}[{i}]"
        if isinstance(item, str):
            tokens = tokenize(item)
        elif isinstance(item, list) and all(isinstance(t, str) for t in item):
            tokens = list(item)  # taken as given, as Embedder takes a token list
        elif isinstance(item, int) or (isinstance(item, list) and item and isinstance(item[0], int)):
            raise ApiError(422, f"{where}: token ids are not understood (ELMo reads characters): send the text",
                           field=where)
        else:
            raise ApiError(422, f"{where}: expected a string or a list of token strings, got {_json_kind(item)}",
                           field=where)
        if len(tokens) > limits.max_input_tokens:
            if not truncate:
                raise ApiError(413, f"{where}: {len(tokens):,} tokens, more than max_input_tokens "
                                    f"({limits.max_input_tokens:,}) for one input", field=where,
                               limit="max_input_tokens")
            tokens = tokens[:limits.max_input_tokens] if truncate == "right" else tokens[-limits.max_input_tokens:]
        total += len(tokens)
        if total > limits.max_request_tokens:
            raise ApiError(413, f"{field}: more than max_request_tokens ({limits.max_request_tokens:,}) tokens in one "
                                f"request (reached at {where}); send fewer inputs per request", field=field,
                           limit="max_request_tokens")
        sentences.append(tokens)
    return sentences


def read_layers(value, n_layers: int, pooled: bool, field: str = "layers") -> str | int:
    """``layers``: ``"all"`` (not for a pooled vector), ``"top"``, ``"average"``, or a layer index
    from 0 (the token layer) to ``n_layers - 1``."""
    names = ("top", "average") if pooled else ("all", "top", "average")
    if isinstance(value, str) and value in names:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < n_layers:
            return value
        raise ApiError(422, f"{field}: layer {value} out of range; the biLM has layers 0 (tokens) to {n_layers - 1}",
                       field=field)
    choices = ", ".join(repr(n) for n in names)
    raise ApiError(422, f"{field}: expected {choices} or a layer index 0..{n_layers - 1}, got {value!r}"
                        + (" ('all' gives no single vector: use /embed_all)" if pooled and value == "all" else ""),
                   field=field)


def read_truncation(body: dict) -> str | None:
    """text-embeddings-inference's ``truncate`` (default false) and ``truncation_direction``
    (``"Right"``, the default, or ``"Left"``): None, ``"right"`` or ``"left"``."""
    if not read_bool(body, "truncate", False):
        return None
    direction = body.get("truncation_direction", "Right")
    if not isinstance(direction, str) or direction.lower() not in ("right", "left"):
        raise ApiError(422, f"truncation_direction: expected 'Right' or 'Left', got {direction!r}",
                       field="truncation_direction")
    return direction.lower()


def read_choice(body: dict, field: str, choices: Sequence[str], default: str) -> str:
    value = body.get(field, default)
    if value not in choices:
        raise ApiError(422, f"{field}: expected one of {', '.join(choices)}, got {value!r}", field=field)
    return value


def read_bool(body: dict, field: str, default: bool) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise ApiError(422, f"{field}: expected true or false, got {value!r}", field=field)
    return value


def refuse_empty(sentences: list[list[str]], field: str, single: bool) -> None:
    """A pooled vector is a mean over tokens: an input without tokens has none."""
    for i, tokens in enumerate(sentences):
        if not tokens:
            where = field if single else f"{field}[{i}]"
            raise ApiError(422, f"{where}: no tokens (empty or only whitespace); a pooled vector needs at least one",
                           field=where)


# ------------------------------------------------------------------------------ computing answers
def pool(layers: np.ndarray, which: str | int = DEFAULT_POOLED_LAYERS, pooling: str = DEFAULT_POOLING,
         normalize: bool = False) -> np.ndarray:
    """One vector ``(dim,)`` float32 from one sentence's ``(L+1, tokens, dim)`` activations:
    the layers ``which`` picks (:func:`~elmo.inference.embed.select_layers`), then the mean (or
    max) over tokens, then, with ``normalize``, scaled to unit length."""
    tokens = select_layers(layers, which)
    vector = tokens.mean(axis=0) if pooling == "mean" else tokens.max(axis=0)
    if normalize:
        norm = np.linalg.norm(vector)
        if norm > 0:
            vector = vector / norm
    return vector.astype(np.float32, copy=False)


@functools.cache
def _orjson():
    """orjson, several times faster than json for arrays, where the [serve] extra installed it;
    else None. Imported at the first answer, not with this module: elmo serve's parser reads its
    defaults from here, and ``elmo --help`` imports no optional package."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - exercised only without the extra's orjson
        return None
    return orjson


def dumps(value) -> bytes:
    """JSON bytes; numpy arrays as nested lists of numbers. float32 values are written as the
    float64 they convert to exactly, so that parsing gives back the same float32 bits."""
    orjson = _orjson()
    if orjson is not None:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=_orjson_default)
    return json.dumps(value, default=_json_default, separators=(",", ":")).encode()


def as_json_array(array: np.ndarray) -> np.ndarray:
    """An array ready for :func:`dumps`: float64 (exact for float32), contiguous."""
    return np.ascontiguousarray(array, dtype=np.float64)


def _orjson_default(value):
    if isinstance(value, np.ndarray):
        return as_json_array(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.astype(np.float64).tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


def base64_vector(vector: np.ndarray) -> str:
    """OpenAI's ``encoding_format: "base64"``: the float32 values, little-endian, in base64."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def openai_response(vectors: list[np.ndarray], model: str, encoding: str, tokens: int) -> dict:
    """The body of an OpenAI embeddings answer."""
    data = [{"object": "embedding", "index": i,
             "embedding": base64_vector(v) if encoding == "base64" else as_json_array(v)}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
