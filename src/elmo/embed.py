"""Embedding text with a biLM: the :class:`Embedder` API and the ``allennlp elmo``-compatible
HDF5 output.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Sequence

import h5py
import numpy as np
import torch
from tqdm import tqdm

from elmo.bilm import BiLM
from elmo.chars import BOS_TOKEN, EOS_TOKEN, batch_to_char_ids, tokenize
from elmo.encoder import encode_words_fast
from elmo.fileio import atomic_path, read_lines
from elmo.states import DEFAULT_STATE, StateKeeper

Layers = str | Sequence[int]

# Precision of the matrix products on the fast path; states and nonlinearities stay float32.
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def select_layers(layers: np.ndarray, which: Layers) -> np.ndarray:
    """Pick from one sentence's ``(L+1, n_tokens, dim)`` activations.

    ``"all"`` -> ``(L+1, n, dim)``; ``"top"`` -> ``(n, dim)``; ``"average"`` -> ``(n, dim)``;
    a list of indices -> ``(len(list), n, dim)``.
    """
    if isinstance(which, str):
        if which == "all":
            return layers
        if which == "top":
            return layers[-1]
        if which == "average":
            return layers.mean(axis=0)
        raise ValueError(f"layers: expected 'all', 'top', 'average' or a list of indices, got {which!r}")
    indices = list(which)
    for i in indices:
        if not -layers.shape[0] <= i < layers.shape[0]:
            raise ValueError(f"layers: index {i} out of range; the biLM has {layers.shape[0]} layers")
    return layers[indices]


class Embedder:
    """Turns sentences into ELMo layer activations.

    ``state`` is the LSTM state policy (see :mod:`elmo.states`): ``"warm"`` (default) and
    ``"reset"`` make every sentence's vectors independent of batching and of earlier calls;
    ``"stateful"`` reproduces the original, carrying state by row across batches *and calls*.
    Without ``model``, the packaged default model is used (see :mod:`elmo.pretrained`).
    """

    def __init__(self, model: BiLM | None = None, *, state: str = DEFAULT_STATE, device: str | torch.device | None = None,
                 batch_size: int = 64, max_tokens: int = 4096, precision: str = "float32",
                 vocab_cache: str | os.PathLike | None = None, token_memo: int = 100_000):
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {sorted(PRECISIONS)}, got {precision!r}")
        if model is None:
            from elmo.pretrained import load_pretrained

            model = load_pretrained()
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.model = model.to(self.device).eval()
        self.model.compute_dtype = PRECISIONS[precision]
        self.states = StateKeeper(self.model, state)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.cache: dict[str, torch.Tensor] = {}
        # Token vectors never depend on context: a word seen in an earlier batch is looked up,
        # not encoded again. Bounded, and dropped whenever the encoder's weights change.
        self.token_memo_size = token_memo
        self._memo: dict[str, torch.Tensor] = {}
        self._memo_key: tuple | None = None
        if vocab_cache is not None:
            from elmo.vocab_cache import load_vocab_cache

            self.cache = {w: v.to(self.device) for w, v in load_vocab_cache(vocab_cache, self.model).items()}

    @classmethod
    def from_files(cls, options_file: str | os.PathLike, weights_file: str | os.PathLike, **kwargs) -> "Embedder":
        """Load the original ``options.json`` + ``weights.hdf5``."""
        from elmo.weights import load_bilm_tf

        return cls(load_bilm_tf(options_file, weights_file), **kwargs)

    @classmethod
    def from_pretrained(cls, name: str = "default", *, cache_dir: str | os.PathLike | None = None,
                        progress: bool = True, **kwargs) -> "Embedder":
        """Load a named model: ``"default"`` (packaged) or a published one, downloaded and cached
        (``"small"``, ``"medium"``, ``"original"``, ``"original-5.5b"``)."""
        from elmo.pretrained import load_pretrained

        return cls(load_pretrained(name, cache_dir=cache_dir, progress=progress), **kwargs)

    @property
    def state(self) -> str:
        return self.states.mode

    def reset_state(self) -> None:
        """Forget the state carried between calls in stateful mode."""
        self.states.reset()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batch through the biLM: a ``(L+1, n_tokens, dim)`` float32 array per sentence."""
        rows = list(batch)
        ids, mask = batch_to_char_ids(rows)
        ids, mask = ids.to(self.device), mask.to(self.device)
        use_lookup = self.model.fast and (self.cache or self.token_memo_size > 0)
        tokens = self._token_vectors(rows, ids, mask) if use_lookup else None
        out = self.model(ids, mask, self.states.initial(len(rows)), tokens=tokens)
        self.states.update(out.state)
        layers = out.layers.float().cpu().numpy()
        return [layers[i, :, :len(sentence)] for i, sentence in enumerate(batch)]

    def _memo_for_current_weights(self) -> dict[str, torch.Tensor]:
        # A tensor's _version grows with every in-place change (optimizer steps, load_state_dict).
        key = (self.model.compute_dtype,) + tuple((id(p), p._version) for p in self.model.token_encoder.parameters())
        if key != self._memo_key or len(self._memo) > self.token_memo_size:
            self._memo, self._memo_key = {}, key
        return self._memo

    def _token_vectors(self, rows: list[list[str]], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Token vectors ``(batch, time+2, dim)`` with boundaries: words in the vocabulary cache
        or the memo are looked up, the others encoded once each (and remembered)."""
        memo = self._memo_for_current_weights() if self.token_memo_size > 0 else {}
        found, missing = {}, {}
        for sentence in rows:
            for word in (BOS_TOKEN, *sentence, EOS_TOKEN):
                if word in found or word in missing:
                    continue
                vector = self.cache.get(word)
                if vector is None:
                    vector = memo.get(word)
                if vector is None:
                    missing[word] = len(missing)
                else:
                    found[word] = vector
        if missing:
            words = list(missing)
            word_ids, _ = batch_to_char_ids([[w] for w in words])
            vectors = encode_words_fast(self.model.token_encoder, word_ids[:, 0].to(self.device), self.model.compute_dtype)
            for word, vector in zip(words, vectors):
                found[word] = vector
                if self.token_memo_size > 0:
                    memo[word] = vector
        table = torch.stack(list(found.values()))  # (n_words, dim)
        index = {word: i for i, word in enumerate(found)}
        positions = torch.zeros(ids.shape[0], ids.shape[1] + 2, dtype=torch.long)
        keep = torch.zeros(ids.shape[0], ids.shape[1] + 2, 1)
        for i, sentence in enumerate(rows):
            row = [index[BOS_TOKEN], *(index[w] for w in sentence), index[EOS_TOKEN]]
            positions[i, :len(row)] = torch.tensor(row)
            keep[i, :len(row)] = 1.0
        return table[positions.to(self.device)] * keep.to(self.device)

    def _batches(self, sentences: list[list[str]], batch_size: int) -> Iterable[list[int]]:
        """Batches of sentence indices. Stateful mode: consecutive runs of ``batch_size`` in input
        order (which row a sentence takes decides its state). Otherwise: longest first, each
        batch at most ``batch_size`` sentences and ``max_tokens`` padded tokens, so similar
        lengths share a batch and little work goes to padding."""
        order = list(range(len(sentences)))
        if self.states.mode == "stateful":
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

    def embed_sentences(self, sentences: Sequence[str | Sequence[str]], layers: Layers = "all",
                        batch_size: int | None = None, progress: bool = False) -> list[np.ndarray]:
        """Embed sentences (strings are split on whitespace, or pass token lists).

        Returns float32 arrays in input order, shaped as :func:`select_layers` says. In stateful
        mode, batches are consecutive runs of ``batch_size`` sentences in input order.
        """
        batch_size = batch_size or self.batch_size
        tokenized = [tokenize(s) if isinstance(s, str) else list(s) for s in sentences]
        results: list[np.ndarray | None] = [None] * len(tokenized)
        with tqdm(total=len(tokenized), unit="sent", disable=not progress) as bar:
            for indices in self._batches(tokenized, batch_size):
                for i, array in zip(indices, self.embed_batch([tokenized[i] for i in indices])):
                    results[i] = select_layers(array, layers)
                bar.update(len(indices))
        return results  # type: ignore[return-value]

    def embed_file(self, input_path: str | os.PathLike, output_path: str | os.PathLike,
                   layers: Layers = "all", batch_size: int | None = None, progress: bool | None = None,
                   chunk_sentences: int = 4096) -> int:
        """Embed a text file (one sentence per line, plain or ``.gz``) into HDF5, in the layout of
        the old ``allennlp elmo`` command: one float32 dataset per line index (``"0"``, ``"1"``,
        ...) and a ``sentence_to_index`` dataset holding a JSON object from line text to index.

        Streams the input in chunks, so memory stays bounded on long files. The output appears
        only once complete. A line that is not UTF-8 raises ValueError with its line number.
        Returns the number of lines embedded.
        """
        batch_size = batch_size or self.batch_size
        # Whole batches per chunk, so stateful mode still sees consecutive batches of batch_size.
        chunk = max(1, chunk_sentences // batch_size) * batch_size
        n_lines = sum(1 for _ in read_lines(input_path))
        sentence_to_index: dict[str, str] = {}
        # tqdm's disable=None means "show only on a terminal".
        disable = None if progress is None else not progress
        with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as fout, \
                tqdm(total=n_lines, unit="sent", disable=disable) as bar:
            lines = read_lines(input_path)
            index = 0
            while True:
                block = [line.strip() for line in itertools.islice(lines, chunk)]
                if not block:
                    break
                vectors = self.embed_sentences(block, layers=layers, batch_size=batch_size)
                for text, array in zip(block, vectors):
                    fout.create_dataset(str(index), data=array.astype(np.float32))
                    sentence_to_index[text] = str(index)
                    index += 1
                bar.update(len(block))
            dataset = fout.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
            dataset[0] = json.dumps(sentence_to_index)
        return index
