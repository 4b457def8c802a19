"""Coreference resolution: the CoNLL metrics over mention clusters.

The scores are MUC, B-cubed and CEAF-e (entity-based) precision, recall and F1, and the CoNLL
F1, their average. They come from ``scorch``, a maintained reimplementation of the CoNLL-2012
reference scorer. Its results are checked against hand-computed cases in
``tests/test_task_coref.py``, singletons included.

A cluster is a collection of mentions, and a mention is any hashable value: here ``(start,
end)`` token positions within one document. Mentions of different documents must not collide,
so :func:`corpus_clusters` tags each with its document's index before whole-corpus scoring.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from scorch import scores as _scorch

METRICS = ("muc", "b_cubed", "ceaf_e")


def litbank_split(names: Sequence[str]) -> dict[str, list[str]]:
    """A fixed train/dev/test split of LitBank's files: sorted by name, the first 80% train, the
    next 10% dev, the last 10% test (80/10/10 of its 100 files). The same names always give the
    same split, whatever order they come in."""
    ordered = sorted(names)
    n_train, n_dev = round(0.8 * len(ordered)), round(0.1 * len(ordered))
    return {"train": ordered[:n_train], "dev": ordered[n_train:n_train + n_dev],
            "test": ordered[n_train + n_dev:]}


def enumerate_spans(sentence_lengths: Sequence[int], max_width: int) -> list[tuple[int, int]]:
    """Every candidate mention ``(start, end)`` (inclusive document positions) of at most
    ``max_width`` tokens that does not cross a sentence boundary, ordered by start then end."""
    if max_width < 1:
        raise ValueError(f"max_width: must be at least 1, got {max_width}")
    spans, offset = [], 0
    for length in sentence_lengths:
        for start in range(offset, offset + length):
            for end in range(start, min(start + max_width, offset + length)):
                spans.append((start, end))
        offset += length
    return spans


def corpus_clusters(documents: Sequence[Sequence[Sequence[Hashable]]]) -> list[set]:
    """The clusters of many documents as one corpus: mention ``m`` of document ``i`` becomes
    ``(i, m)``, so that equal spans of different documents stay different mentions."""
    return [{(i, m) for m in cluster} for i, clusters in enumerate(documents) for cluster in clusters]


def coref_scores(gold: Sequence[Sequence[Hashable]], predicted: Sequence[Sequence[Hashable]]) -> dict:
    """``{"muc" | "b_cubed" | "ceaf_e": {"precision", "recall", "f1"}, "conll_f1": ...}`` of the
    predicted clusters against the gold ones. Both are sequences of clusters. A mention in two
    clusters of one side is an error, as it is for the reference scorer."""
    key, response = [set(c) for c in gold if c], [set(c) for c in predicted if c]
    for side, clusters in (("gold", key), ("predicted", response)):
        seen: set = set()
        for cluster in clusters:
            shared = seen & cluster
            if shared:
                raise ValueError(f"coref_scores: the {side} clusters share mention(s) {sorted(shared)[:3]}")
            seen |= cluster
    result: dict = {}
    for name in METRICS:
        if not key and not response:
            p = r = f = 0.0
        else:
            r, p, f = getattr(_scorch, name)(key, response)
        result[name] = {"precision": float(p), "recall": float(r), "f1": float(f)}
    result["conll_f1"] = sum(result[name]["f1"] for name in METRICS) / len(METRICS)
    return result


__all__ = ["METRICS", "coref_scores", "corpus_clusters", "enumerate_spans", "litbank_split"]
