"""Contextual nearest neighbours: the corpus sentences whose use of a word is closest to a query's.

The paper's Table 4: the biLM vector of "play" in a sports sentence is nearest to SemCor
sentences about sports, and in a theatre sentence to sentences about theatre, where a
context-free vector (GloVe) has a single set of neighbours for every use. A vector here is one
biLM layer's vector of the word's token (by default the top layer), compared by cosine.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elmo.checks import check_count
from elmo.inference.embed import Embedder
from elmo.model.chars import tokenize


@dataclass(frozen=True)
class Neighbour:
    """One use of a word in the corpus: its cosine with the query, the sentence's index in the
    corpus, the token's position and the sentence's tokens."""

    score: float
    sentence: int
    position: int
    tokens: tuple[str, ...]

    def highlighted(self) -> str:
        """The sentence with the token in ``[[...]]``."""
        return " ".join(f"[[{t}]]" if i == self.position else t for i, t in enumerate(self.tokens))


def word_positions(tokens: Sequence[str], word: str) -> list[int]:
    """Positions of ``word`` in ``tokens``, compared without case."""
    wanted = word.lower()
    return [i for i, token in enumerate(tokens) if token.lower() == wanted]


def contextual_neighbours(embedder: Embedder, query: str | Sequence[str], word: str,
                          corpus: Sequence[Sequence[str]], *, layer: int | None = None, k: int = 5,
                          any_word: bool = False, cache_dir: str | os.PathLike | None = None,
                          progress: bool = False, chunk: int = 256, skip_query: bool = True) -> list[Neighbour]:
    """The ``k`` uses of ``word`` in ``corpus`` (or, with ``any_word``, of any word) whose vector
    at ``layer`` (default: the top one) has the highest cosine with ``word``'s vector in
    ``query`` (its first occurrence), best first.

    ``query``: a sentence, as text (split on whitespace) or tokens; ``corpus``: token lists.
    Without ``cache_dir`` only the sentences that hold a candidate are embedded; with it, all
    layers of every corpus sentence are computed once and kept there (the task layer cache,
    keyed by the model and the corpus), so later queries on the same corpus embed nothing but
    the query. With ``skip_query``, a corpus sentence identical to the query is left out (it
    would be its own nearest neighbour). Raises ValueError when the query lacks the word or the
    layer does not exist.
    """
    tokens = tokenize(query) if isinstance(query, str) else list(query)
    positions = word_positions(tokens, word)
    if not positions:
        raise ValueError(f"word: {word!r} is not a token of the query {' '.join(tokens)!r}")
    check_count(k, "k")
    n_layers = embedder.model.config.n_output_layers
    layer = n_layers - 1 if layer is None else layer
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer: the biLM has layers 0..{n_layers - 1}, got {layer}")
    target = embedder.embed_sentences([tokens], layers="all")[0][layer, positions[0]].astype(np.float64)
    target /= np.linalg.norm(target) + 1e-12

    candidates = [(i, list(range(len(s))) if any_word else word_positions(s, word)) for i, s in enumerate(corpus)]
    candidates = [(i, p) for i, p in candidates if p and not (skip_query and list(corpus[i]) == tokens)]
    best: list[tuple[float, int, int, int]] = []  # min-heap of (score, -sentence, -position, sentence)

    def consider(index: int, vectors: np.ndarray, places: list[int]) -> None:
        rows = vectors[places].astype(np.float64)  # (n, dim)
        scores = rows @ target / (np.linalg.norm(rows, axis=1) + 1e-12)
        for place, score in zip(places, scores):
            item = (float(score), -index, -place, index)  # ties: the earlier use wins
            if len(best) < k:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)

    if cache_dir is not None:
        from elmo.inference.layer_cache import load_or_compute

        cache = load_or_compute(embedder, [list(s) for s in corpus], cache_dir, "neighbours", progress=progress)
        for index, places in candidates:
            consider(index, cache[index][layer], places)
    else:
        from elmo.progress import progress_bar

        bar = progress_bar(progress, total=len(candidates), desc="corpus", unit="sentence")
        for start in range(0, len(candidates), chunk):
            part = candidates[start:start + chunk]
            arrays = embedder.embed_sentences([list(corpus[i]) for i, _ in part], layers="all")
            for (index, places), array in zip(part, arrays):
                consider(index, array[layer], places)
            bar.update(len(part))
        bar.close()
    ranked = sorted(best, reverse=True)
    return [Neighbour(score, index, -negative_place, tuple(corpus[index]))
            for score, _, negative_place, index in ranked]


__all__ = ["Neighbour", "contextual_neighbours", "word_positions"]
