"""simple_elmo's API over this library: change one import and keep the rest of the code.

NLPL's simple_elmo (TensorFlow) is how most users of the NLPL vector repository's ELMo models
call them::

    from elmo.simple_elmo import ElmoModel      # was: from simple_elmo import ElmoModel

    model = ElmoModel()
    model.load("MODEL.zip")                     # an NLPL archive or its folder, as before
    vectors = model.get_elmo_vectors([["Det", "regner", "."], ["Hei", "!"]])   # (2, 3, dim)
    averages = model.get_elmo_vector_average([["Det", "regner", "."]])         # (1, dim)

The numbers are simple_elmo's: the same state policy (each call starts from zero LSTM state, runs
its first batch once and throws it away when ``warmup=True``, then carries the state by row from
batch to batch of ``max_batch_size`` sentences in input order), the same layers (``"average"``:
the plain mean of the token layer and the LSTM layers, as simple_elmo's untrained scalar weights
give; ``"top"``; ``"all"``), the same shapes and dtype (float64, as simple_elmo's ``np.zeros``
makes them). ``tests/test_simple_elmo.py`` checks them against vectors simple_elmo itself
computed (``tests/fixtures/simple_elmo/``).

Where this module differs from simple_elmo, on purpose:

* Padding is zero. simple_elmo leaves, at the padding positions inside a batch's longest
  sentence, what its character CNN makes of an empty token (in the token layer, so also in
  ``"average"``); here every position past a sentence's end is 0.
* :meth:`ElmoModel.get_elmo_vector_average` averages a sentence's own tokens only. simple_elmo
  sums over every position up to its batch's longest sentence, padding included, and divides by
  that length, so a short sentence's vector depends on which sentences share its batch. Both
  return unit vectors. With ``layers="all"`` each layer's average is a unit vector here (simple_elmo
  divides the whole ``(layers, dim)`` matrix by one norm, after a reshape that mixes tokens and
  layers).
* Errors are exceptions (:class:`ValueError`, :class:`TypeError`) with one line naming what is
  wrong, never ``SystemExit``.
* ``session=`` (a TensorFlow session) and ``full=True`` (TensorFlow checkpoints, for
  ``get_elmo_substitutes``) have no counterpart and are refused by name; ``limit`` (how many
  vocabulary words simple_elmo caches) changes no number and is accepted and unused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np
import torch

from elmo.checks import check_count
from elmo.inference.embed import Embedder

LAYER_CHOICES = ("average", "top", "all")


def tokenize(string: str, limit: int | None = None) -> list[str]:
    """simple_elmo's example tokenizer: the runs of word characters (``\\w+``) of ``string``, at
    most ``limit`` of them. Punctuation is dropped."""
    return re.findall(r"(?u)\w+", string)[:limit]


def _check_texts(texts: Sequence[Sequence[str]]) -> list[list[str]]:
    """``texts`` as lists of token strings; anything else is a one-line TypeError naming the item.
    A string sentence is refused: simple_elmo would take each of its characters as a word."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError(f"texts: expected a list of sentences, each a list of words, got {type(texts).__name__}")
    out = []
    for i, sentence in enumerate(texts):
        if isinstance(sentence, str):
            raise TypeError(f"texts[{i}]: expected a list of words, got the string {sentence[:60]!r}; split it "
                            f"first (sentence.split(), or elmo.simple_elmo.tokenize)")
        if not isinstance(sentence, Sequence) or not all(isinstance(w, str) for w in sentence):
            raise TypeError(f"texts[{i}]: expected a list of words (strings), got {str(sentence)[:60]!r}")
        out.append(list(sentence))
    return out


def _check_layers(layers: str) -> str:
    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers: expected one of {', '.join(map(repr, LAYER_CHOICES))}, got {layers!r}")
    return layers


class ElmoModel:
    """simple_elmo's ``ElmoModel``: :meth:`load` a model, then :meth:`get_elmo_vectors` and
    :meth:`get_elmo_vector_average`. After :meth:`load`, ``batch_size`` (sentences per batch),
    ``max_chars``, ``vector_size`` (``dim``, twice the LSTM projection), ``n_layers`` (the LSTM
    layers plus the token layer) and ``embedder`` (the :class:`~elmo.Embedder` that runs the
    model) are set, as simple_elmo sets its attributes."""

    def __init__(self) -> None:
        self.embedder: Embedder | None = None
        self.batch_size: int | None = None
        self.max_chars: int | None = None
        self.vector_size: int | None = None
        self.n_layers: int | None = None

    def load(self, directory: str | os.PathLike, max_batch_size: int = 32, limit: int | None = 100,
             full: bool = False, *, device: str | torch.device | None = None) -> str:
        """Load a model: an NLPL archive (``.zip``) or folder (``options.json``, ``model.hdf5``,
        maybe ``vocab.txt``), or anything else :meth:`Embedder.from_pretrained` reads (an elmo
        export, a checkpoint, ``"default"``...). ``max_batch_size``: sentences per batch, which
        also decides which sentences share carried state. ``limit`` is accepted for simple_elmo's
        signature and unused (elmo caches character ids by itself). ``device``: where the model
        runs (elmo's own keyword). Returns simple_elmo's message."""
        if full:
            raise ValueError("full=True: TensorFlow checkpoints (simple_elmo's language-model mode, for "
                             "get_elmo_substitutes) cannot be read here; load the model's options.json and "
                             "weights (full=False), or use elmo's own language-model tools (elmo evaluate)")
        check_count(max_batch_size, "max_batch_size")
        if limit is not None:
            check_count(limit, "limit", least=0)
        self.embedder = Embedder.from_pretrained(directory, state="stateful", batch_size=max_batch_size,
                                                 device=device, progress=False)
        config = self.embedder.model.config
        self.batch_size = max_batch_size
        self.max_chars = config.char_cnn.max_characters_per_token
        self.vector_size = self.embedder.model.output_dim
        self.n_layers = config.lstm.n_layers + 1
        return "The model is now loaded."

    def _loaded(self) -> Embedder:
        if self.embedder is None:
            raise RuntimeError("ElmoModel: call load(directory) before asking for vectors")
        return self.embedder

    def _layers(self, texts: list[list[str]], warmup: bool) -> list[np.ndarray]:
        """Each sentence's ``(n_layers, n_tokens, dim)`` float32 activations under simple_elmo's
        state policy: zero state, the first batch once and thrown away if ``warmup``, then
        consecutive batches of ``batch_size`` with state carried by row."""
        embedder = self._loaded()
        embedder.reset_state()
        # load's max_batch_size, or what the caller set since (simple_elmo reads it at each call)
        batch = embedder.batch_size if self.batch_size is None else check_count(self.batch_size, "batch_size")
        chunks = [texts[i:i + batch] for i in range(0, len(texts), batch)]
        if warmup and chunks:
            embedder.embed_batch(chunks[0])
        out: list[np.ndarray] = []
        for chunk in chunks:
            out.extend(embedder.embed_batch(chunk))
        embedder.reset_state()
        return out

    def get_elmo_vectors(self, texts: Sequence[Sequence[str]], warmup: bool = True, layers: str = "average",
                         session: object = None) -> np.ndarray:
        """Contextual vectors of every token: ``texts`` is a list of sentences, each a list of
        words. Returns a float64 array ``(len(texts), max_len, dim)`` (``layers="average"`` or
        ``"top"``) or ``(len(texts), n_layers, max_len, dim)`` (``"all"``), ``max_len`` the longest
        sentence's length, zero past each sentence's end."""
        if session is not None:
            raise TypeError("session: elmo runs no TensorFlow session; drop the argument (each call starts "
                            "from zero state, as with simple_elmo's own session)")
        layers = _check_layers(layers)
        texts = _check_texts(texts)
        activations = self._layers(texts, warmup)
        model = self._loaded().model
        max_len = max((len(t) for t in texts), default=0)
        shape: tuple[int, ...] = (len(texts), max_len, model.output_dim)
        if layers == "all":
            shape = (len(texts), model.n_layers + 1, max_len, model.output_dim)
        result = np.zeros(shape)
        for i, a in enumerate(activations):
            n = a.shape[1]
            if layers == "all":
                result[i, :, :n] = a
            elif layers == "top":
                result[i, :n] = a[-1]
            else:
                # float32 sum and division, as simple_elmo's graph computes its (uniform) weighting
                result[i, :n] = a.mean(axis=0, dtype=np.float32)
        return result

    def get_elmo_vector_average(self, texts: Sequence[Sequence[str]], warmup: bool = True,
                                layers: str = "average", session: object = None) -> np.ndarray:
        """One unit vector per sentence: the mean of its tokens' vectors (its own tokens only,
        unlike simple_elmo, which counts its batch's padding), divided by its norm. Returns float64
        ``(len(texts), dim)``, or ``(len(texts), n_layers, dim)`` for ``layers="all"`` (each layer
        a unit vector). A sentence without tokens gets zeros."""
        vectors = self.get_elmo_vectors(texts, warmup=warmup, layers=layers, session=session)
        lengths = np.array([len(t) for t in texts], dtype=np.float64)
        token_axis = 2 if layers == "all" else 1
        counts = np.maximum(lengths, 1).reshape((-1,) + (1,) * (vectors.ndim - 2))
        means = vectors.sum(axis=token_axis) / counts
        norms = np.linalg.norm(means, axis=-1, keepdims=True)
        return np.divide(means, norms, out=np.zeros_like(means), where=norms > 0)
