"""Embedding text with a biLM: the :class:`Embedder` API and the ``allennlp elmo``-compatible
HDF5 output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import h5py
import numpy as np
import torch
from tqdm import tqdm

from elmo.fileio import atomic_path, chunks, read_lines
from elmo.hub.resolve import ModelSource, load_model
from elmo.inference.runtime import DEFAULT_PRECISION, DEFAULT_TOKEN_MEMO, Runtime
from elmo.inference.states import DEFAULT_STATE
from elmo.model.bilm import BiLM
from elmo.model.chars import tokenize

Layers = str | int | Sequence[int]
# Sentences per batch, and padded tokens per batch (outside stateful mode): the defaults of the
# Embedder, of elmo embed and of a task config's [bilm] section.
DEFAULT_BATCH_SIZE = 64
DEFAULT_MAX_TOKENS = 4096


def as_tokens(sentence: str | Sequence[str], where: str = "sentence") -> list[str]:
    """One sentence as a token list: a string is split on whitespace, a sequence of strings is
    taken as its tokens. Anything else is an error naming ``where``."""
    if isinstance(sentence, str):
        return tokenize(sentence)
    if isinstance(sentence, Sequence) and all(isinstance(t, str) for t in sentence):
        return list(sentence)
    raise TypeError(f"{where}: expected a string or a list of token strings, got {type(sentence).__name__} "
                    f"{str(sentence)[:60]!r}")


def as_sentences(sentences: str | Sequence[str | Sequence[str]]) -> list[list[str]]:
    """Sentences as token lists. A single string is one sentence (never one per character), and a
    flat list of token strings whose items contain no whitespace is *not* guessed at: a list of
    strings is always a list of sentences, each split on whitespace."""
    if isinstance(sentences, str):
        return [tokenize(sentences)]
    if not isinstance(sentences, Sequence) and not hasattr(sentences, "__iter__"):
        raise TypeError(f"sentences: expected a list of sentences, got {type(sentences).__name__}")
    return [as_tokens(s, f"sentences[{i}]") for i, s in enumerate(sentences)]


def select_layers(layers: np.ndarray, which: Layers) -> np.ndarray:
    """Pick from one sentence's ``(L+1, n_tokens, dim)`` activations.

    ``"all"`` -> ``(L+1, n, dim)``; ``"top"`` -> ``(n, dim)``; ``"average"`` -> ``(n, dim)``;
    one index -> ``(n, dim)`` (0: the token layer); a list of indices -> ``(len(list), n, dim)``.
    ELMoForManyLangs' ``output_layer`` 0, 1, 2 are the indices; its -1 is ``"average"``.
    """
    if isinstance(which, str):
        if which == "all":
            return layers
        if which == "top":
            return layers[-1]
        if which == "average":
            return layers.mean(axis=0)
        raise ValueError(f"layers: expected 'all', 'top', 'average' or a list of indices, got {which!r}")
    if isinstance(which, int) and not isinstance(which, bool):
        return select_layers(layers, [which])[0]
    indices = list(which)
    for i in indices:
        if not -layers.shape[0] <= i < layers.shape[0]:
            raise ValueError(f"layers: index {i} out of range; the biLM has {layers.shape[0]} layers")
    return layers[indices]


class Embedder:
    """Turns sentences into ELMo layer activations.

    ``state`` is the LSTM state policy (see :mod:`elmo.inference.states`): ``"warm"`` (default) and
    ``"reset"`` make every sentence's vectors independent of batching and of earlier calls;
    ``"stateful"`` reproduces the original, carrying state by row across batches *and calls*.
    Without ``model``, the packaged default model is used (:func:`elmo.hub.load_model`). The model
    is never changed: it runs through an :class:`~elmo.inference.runtime.Runtime` (copied if it lives on
    another device than ``device``). ``cuda_graphs`` (CUDA only) replays the LSTM's steps from CUDA
    graphs for batch shapes that repeat (see :mod:`elmo.inference.graphs`).
    """

    def __init__(self, model: BiLM | None = None, *, state: str = DEFAULT_STATE, device: str | torch.device | None = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_tokens: int = DEFAULT_MAX_TOKENS,
                 precision: str = DEFAULT_PRECISION, vocab_cache: str | os.PathLike | None = None,
                 token_memo: int = DEFAULT_TOKEN_MEMO, cuda_graphs: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens: must be at least 1, got {max_tokens}")
        if model is None:
            model = load_model()
        self.runtime = Runtime(model, device=device, precision=precision, state=state, vocab_cache=vocab_cache,
                               token_memo=token_memo, cuda_graphs=cuda_graphs)
        self.batch_size = batch_size
        self.max_tokens = max_tokens

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Embedder":
        """Load the original ``options.json`` + ``weights.hdf5``."""
        return cls(load_model((options_file, weights_file)), **kwargs)

    @classmethod
    def from_pretrained(cls, name: ModelSource = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Embedder":
        """Load any model source :func:`elmo.hub.load_model` takes: ``"default"`` (packaged), a
        published name or URL, downloaded and cached (``"small"``, ``"medium"``, ``"original"``,
        ``"original-5.5b"``), an ``(options, weights)`` pair, an exported folder, a training run
        directory, a checkpoint file, an NLPL archive (``.zip``) or folder, or an ELMoForManyLangs
        model (see ``docs/other-models.md``)."""
        return cls(load_model(name, cache_dir=cache_dir, progress=progress), **kwargs)

    @property
    def model(self) -> BiLM:
        """The biLM the runtime runs (the caller's own model, or its copy on ``device``)."""
        return self.runtime.model

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def state(self) -> str:
        return self.runtime.state

    def reset_state(self) -> None:
        """Forget the state carried between calls in stateful mode."""
        self.runtime.reset_state()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batch through the biLM: a ``(L+1, n_tokens, dim)`` float32 array per sentence."""
        rows = [as_tokens(s, "batch") for s in batch]
        out = self.runtime.run_batch(rows)
        layers = out.layers.float().cpu().numpy()
        return [layers[i, :, :len(sentence)] for i, sentence in enumerate(rows)]

    def _batches(self, sentences: list[list[str]], batch_size: int) -> Iterable[list[int]]:
        """Batches of sentence indices. Stateful mode: consecutive runs of ``batch_size`` in input
        order (which row a sentence takes decides its state). Otherwise: longest first, each
        batch at most ``batch_size`` sentences and ``max_tokens`` padded tokens, so similar
        lengths share a batch and little work goes to padding."""
        order = list(range(len(sentences)))
        if self.state == "stateful":
            for start in range(0, len(order), batch_size):
                yield order[start:start + batch_size]
            return
        order.sort(key=lambda i: -len(sentences[i]))
        batch: list[int] = []
        for i in order:
            longest = len(sentences[batch[0]]) + 2 if batch else len(sentences[i]) + 2
            if batch and (len(batch) >= batch_size or (len(batch) + 1) * longest > self.max_tokens):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def embed_sentence(self, sentence: str | Sequence[str], layers: Layers = "all") -> np.ndarray:
        """Embed one sentence (a string split on whitespace, or a token list): one float32 array
        shaped as :func:`select_layers` says."""
        return self.embed_sentences([as_tokens(sentence)], layers=layers)[0]

    def embed_sentences(self, sentences: str | Sequence[str | Sequence[str]], layers: Layers = "all",
                        batch_size: int | None = None, progress: bool = False) -> list[np.ndarray]:
        """Embed sentences: each a string (split on whitespace) or a token list. A single string
        is one sentence.

        Returns float32 arrays in input order, shaped as :func:`select_layers` says. In stateful
        mode, batches are consecutive runs of ``batch_size`` sentences in input order.
        """
        batch_size = batch_size or self.batch_size
        if batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        tokenized = as_sentences(sentences)
        results: list[np.ndarray | None] = [None] * len(tokenized)
        with tqdm(total=len(tokenized), unit="sent", disable=not progress) as bar:
            for indices in self._batches(tokenized, batch_size):
                for i, array in zip(indices, self.embed_batch([tokenized[i] for i in indices])):
                    results[i] = select_layers(array, layers)
                bar.update(len(indices))
        return results  # type: ignore[return-value]

    def embed_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                   layers: Layers = "all", batch_size: int | None = None, progress: bool | None = None,
                   chunk_sentences: int = 4096, overwrite: bool = False) -> int:
        """Embed a text file (one sentence per line, plain or ``.gz``; ``"-"`` is standard input)
        into HDF5, in the layout of the old ``allennlp elmo`` command: one float32 dataset per line
        index (``"0"``, ``"1"``, ...) and a ``sentence_to_index`` dataset holding a JSON object from
        line text to index.

        The input is read once, as a stream (pipes and ``/dev/stdin`` work), in chunks, so memory
        stays bounded on long files. The output appears only once complete; it may not be the
        input, and an existing output is replaced only with ``overwrite``. A line that is not
        UTF-8 raises ValueError with its line number. Returns the number of lines embedded.
        """
        batch_size = batch_size or self.batch_size
        check_output(input_path, output_path, overwrite)
        # Whole batches per chunk, so stateful mode still sees consecutive batches of batch_size.
        chunk = max(1, chunk_sentences // batch_size) * batch_size
        sentence_to_index: dict[str, str] = {}
        # tqdm's disable=None means "show only on a terminal".
        disable = None if progress is None else not progress
        with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as fout, \
                tqdm(unit="sent", disable=disable) as bar:
            index = 0
            for block in chunks((line.strip() for line in read_lines(input_path)), chunk):
                vectors = self.embed_sentences(block, layers=layers, batch_size=batch_size)
                for text, array in zip(block, vectors):
                    fout.create_dataset(str(index), data=array.astype(np.float32))
                    sentence_to_index[text] = str(index)
                    index += 1
                bar.update(len(block))
            dataset = fout.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
            dataset[0] = json.dumps(sentence_to_index)
        return index


def load_embeddings(path: str | os.PathLike) -> list[np.ndarray]:
    """The arrays :meth:`Embedder.embed_file` (or ``elmo embed IN OUT``) wrote, in line order:
    one float32 ``(layers, tokens, dim)`` (or ``(tokens, dim)``) array per input line."""
    with h5py.File(path, "r") as f:
        names = [name for name in f if name != "sentence_to_index"]
        if not all(name.isdigit() for name in names) or sorted(map(int, names)) != list(range(len(names))):
            raise ValueError(f"{path}: not an elmo embed file (datasets named 0, 1, ... one per line)")
        return [f[str(i)][...] for i in range(len(names))]


def check_output(input_path: str | os.PathLike, output_path: str | os.PathLike, overwrite: bool) -> None:
    """Refuse an output that is the input (it would be destroyed before being read) and, unless
    ``overwrite``, one that already exists."""
    output = os.fspath(output_path)
    if output == "-":
        raise ValueError("output: '-' (standard output) is for printed vectors; HDF5 needs a file name")
    source = os.fspath(input_path)
    same = os.path.realpath(source) == os.path.realpath(output)
    if not same and source != "-" and os.path.exists(source) and os.path.exists(output):
        same = os.path.samefile(source, output)
    if same:
        raise ValueError(f"{output}: the output file is the input file; choose another output")
    if os.path.exists(output) and not overwrite:
        raise FileExistsError(f"{output}: already exists; pass --force (overwrite=True) to replace it")
