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
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from elmo.checks import check_count
from elmo.inference.embed import select_layers
from elmo.model.chars import tokenize

POOLINGS = ("mean", "max")
DEFAULT_POOLING = "mean"
DEFAULT_POOLED_LAYERS = "average"
ENCODINGS = ("float", "base64")
# The service's bounds (elmo.serve.app; here so that `elmo serve --help` imports no framework).
# text-embeddings-inference's default: past this many embedding requests at once, 429.
DEFAULT_MAX_CONCURRENT_REQUESTS = 512
# Four requests of the default max_request_tokens: what the queue may hold before 429.
DEFAULT_MAX_QUEUED_TOKENS = 65536
DEFAULT_REQUEST_TIMEOUT = 120.0
# The model's name in /info, /v1/models and every OpenAI answer (`elmo serve --served-model-name`,
# TEI's and vLLM's flag): what clients put in "model", whatever model file is behind it.
DEFAULT_MODEL_NAME = "elmo"


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
    ``message``, the request's ``field`` at fault and the ``limit`` it broke, if any, and the
    answer's extra ``headers`` (``Retry-After``, ``WWW-Authenticate``, ``Connection``)."""

    def __init__(self, status: int, message: str, *, field: str | None = None, limit: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.field, self.limit = status, message, field, limit
        self.headers = dict(headers or {})

    def tei_body(self) -> dict:
        """text-embeddings-inference's error shape (its ``error_type`` names)."""
        kind = {503: "Unhealthy", 504: "Unhealthy", 500: "Backend", 429: "Overloaded",
                401: "Unauthorized"}.get(self.status, "Validation")
        body: dict = {"error": self.message, "error_type": kind}
        if self.field is not None:
            body["field"] = self.field
        if self.limit is not None:
            body["limit"] = self.limit
        return body

    def openai_body(self) -> dict:
        """OpenAI's error shape: ``param`` names the field, ``code`` the limit broken."""
        kind = {401: "authentication_error", 429: "rate_limit_error"}.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.field, "code": self.limit}}


# ------------------------------------------------------------------------------ reading requests
def check_model_name(name, where: str = "model_name") -> str:
    """``name`` if it can name the served model: a non-empty string without spaces around it or
    control characters (clients send it back in JSON and in ``/v1/models/{name}``); else a
    ValueError naming ``where``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: expected a non-empty name, got {name!r}")
    if name != name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError(f"{where}: {name!r} has spaces around it or control characters")
    return name


def parse_json(body: bytes) -> dict:
    """A request body as a JSON object; malformed JSON is a 400 naming the byte at fault, and so
    is JSON that Python will not hold (nested too deep, an integer of thousands of digits)."""
    try:
        value = json.loads(body)
    except UnicodeDecodeError as e:
        raise ApiError(400, f"body: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"body: malformed JSON at line {e.lineno}, column {e.colno} (byte {e.pos}): {e.msg}") \
            from None
    except RecursionError:
        raise ApiError(400, "body: JSON nested too deeply (a request is at most 3 levels deep)") from None
    except ValueError as e:  # an integer of more digits than int() takes, and the like
        raise ApiError(400, f"body: JSON that cannot be read: {str(e)[:200]}") from None
    if not isinstance(value, dict):
        raise ApiError(422, f"body: expected a JSON object, got {_json_kind(value)}", field="body")
    return value


def shown(value, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, for a refusal's message: a field may hold
    megabytes, or an integer too long to print."""
    try:
        text = repr(value)
    except ValueError:  # an int past sys.get_int_max_str_digits
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return text if len(text) <= width else text[:width - 3] + "..."


def _json_kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


# A UTF-16 surrogate alone: JSON's "\ud800" escape gives one, and no answer can encode it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape (``\\ud800``): encodable in an answer."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(text) else text


def refuse_surrogates(text: str, field: str) -> None:
    """A 422 naming ``field`` for a text holding a lone surrogate (not text: no answer could
    give it back)."""
    found = _SURROGATE.search(text)
    if found:
        raise ApiError(422, f"{field}: a lone surrogate ({printable(found.group())}) at character {found.start():,}, "
                            "which is not text; send valid Unicode", field=field)


def check_fields(body: dict, known: Sequence[str]) -> None:
    """Refuse a field the endpoint does not know (a misspelt option would otherwise be ignored)."""
    for name in body:
        if name not in known:
            name = printable(name if len(name) <= 60 else name[:57] + "...")  # a name can be megabytes long
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
        raise ApiError(422, f"{field}: layer {shown(value)} out of range; the biLM has layers 0 (tokens) to "
                            f"{n_layers - 1}", field=field)
    choices = ", ".join(repr(n) for n in names)
    raise ApiError(422, f"{field}: expected {choices} or a layer index 0..{n_layers - 1}, got {shown(value)}"
                        + (" ('all' gives no single vector: use /embed_all)" if pooled and value == "all" else ""),
                   field=field)


def read_truncation(body: dict) -> str | None:
    """text-embeddings-inference's ``truncate`` (default false) and ``truncation_direction``
    (``"Right"``, the default, or ``"Left"``): None, ``"right"`` or ``"left"``."""
    if not read_bool(body, "truncate", False):
        return None
    direction = body.get("truncation_direction", "Right")
    if not isinstance(direction, str) or direction.lower() not in ("right", "left"):
        raise ApiError(422, f"truncation_direction: expected 'Right' or 'Left', got {shown(direction)}",
                       field="truncation_direction")
    return direction.lower()


def read_choice(body: dict, field: str, choices: Sequence[str], default: str) -> str:
    value = body.get(field, default)
    if value not in choices:
        raise ApiError(422, f"{field}: expected one of {', '.join(choices)}, got {shown(value)}", field=field)
    return value


def read_bool(body: dict, field: str, default: bool) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise ApiError(422, f"{field}: expected true or false, got {shown(value)}", field=field)
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


@dataclass(frozen=True)
class Output:
    """What an endpoint returns of one sentence's ``(L+1, tokens, dim)`` activations, applied
    where the model runs, so that only that crosses to the HTTP process: the layers ``layers``
    picks (:func:`~elmo.inference.embed.select_layers`), and with ``pooling`` (``"mean"`` or
    ``"max"``) one vector pooled over the tokens (:func:`pool`), scaled to unit length with
    ``normalize``. The default is the activations as they are."""

    layers: str | int = "all"
    pooling: str | None = None
    normalize: bool = False

    def apply(self, array: np.ndarray) -> np.ndarray:
        if self.pooling is None:
            return np.ascontiguousarray(select_layers(array, self.layers))
        return pool(array, self.layers, self.pooling, self.normalize)

    def as_dict(self) -> dict:
        return asdict(self)


def tokenize_response(texts: list[str], special: bool) -> list[list[dict]]:
    """text-embeddings-inference's ``/tokenize`` answer: for each text its tokens as the server
    embeds them (split on whitespace), each ``{"id", "text", "special", "start", "stop"}`` with
    ``start``/``stop`` its character offsets in the text; with ``special``, the ``<S>`` and
    ``</S>`` the biLM reads around every sentence. ``id`` is null: ELMo reads a token's
    characters and has no token ids."""
    answers = []
    for text in texts:
        tokens = [{"id": None, "text": m.group(), "special": False, "start": m.start(), "stop": m.end()}
                  for m in _TOKEN.finditer(text)]
        if special:
            tokens = [_special("<S>"), *tokens, _special("</S>")]
        answers.append(tokens)
    return answers


_TOKEN = re.compile(r"\S+")


def _special(text: str) -> dict:
    return {"id": None, "text": text, "special": True, "start": None, "stop": None}


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


def json_pieces(value, numbers: int = 65536) -> Iterator[bytes]:
    """:func:`dumps` of ``value`` (lists, dicts, float32 arrays as :func:`as_json_array` makes
    them, scalars), byte for byte, in pieces that each encode at most about ``numbers``
    numbers: a big answer is written a little at a time, so that the event loop answers other
    requests between pieces (orjson holds the interpreter lock for the whole of one call, so a
    thread would not help), and no float64 copy of a whole answer is ever made."""
    if isinstance(value, np.ndarray):
        yield from _array_pieces(value, numbers)
    elif count_numbers(value) <= numbers:
        yield dumps(as_json(value))
    elif isinstance(value, dict):
        yield b"{"
        for i, (key, item) in enumerate(value.items()):
            yield (b"," if i else b"") + dumps(key) + b":"
            yield from json_pieces(item, numbers)
        yield b"}"
    else:
        yield from _list_pieces(value, lambda item: json_pieces(item, numbers))


def _list_pieces(items, pieces: Callable[[object], Iterator[bytes]]) -> Iterator[bytes]:
    """A JSON list of ``items`` in pieces: ``[``, each item's ``pieces`` with commas between, ``]``."""
    yield b"["
    for i, item in enumerate(items):
        if i:
            yield b","
        yield from pieces(item)
    yield b"]"


def as_json(value):
    """``value`` (JSON-ready but for its arrays) with every array made ready for :func:`dumps`
    (:func:`as_json_array`)."""
    if isinstance(value, np.ndarray):
        return as_json_array(value)
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value


def count_numbers(value) -> int:
    """About how many numbers :func:`dumps` writes for ``value``."""
    if isinstance(value, np.ndarray):
        return value.size
    if isinstance(value, dict):
        return sum(count_numbers(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(count_numbers(v) for v in value)
    return 1


def _array_pieces(array: np.ndarray, numbers: int) -> Iterator[bytes]:
    if array.size <= numbers:
        yield dumps(as_json_array(array))
    elif array.ndim > 2:
        yield from _list_pieces(array, lambda part: _array_pieces(part, numbers))
    else:
        rows = max(1, numbers // array.shape[-1]) if array.ndim == 2 else numbers
        yield b"["
        for start in range(0, len(array), rows):
            text = dumps(as_json_array(array[start:start + rows]))
            yield (b"," if start else b"") + text[1:-1]  # the rows without the block's brackets
        yield b"]"
