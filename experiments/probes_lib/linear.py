"""Linear probes: how much of a label one frozen representation gives away by itself.

The paper's Table 6 trains only a linear softmax layer on one biLM layer's vectors to predict
each token's part of speech: a high accuracy means the layer encodes syntax linearly. The same
probe on GloVe vectors of the same words is the context-free reference.

Features are ``(n_tokens, dim)`` float arrays, one row per token of the split, in order; labels
``(n_tokens,)`` class ids (``-1`` for a label the training split never had, which always counts
as wrong).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from elmo.inference.layer_cache import LayerCache


def layer_token_features(cache: LayerCache, layer: int) -> np.ndarray:
    """Every token's vector at ``layer`` ``(total_tokens, dim)`` as float32, sentences in order."""
    if not 0 <= layer < cache.n_layers:
        raise ValueError(f"layer: the biLM has layers 0..{cache.n_layers - 1}, got {layer}")
    return np.asarray(cache.layers[:, layer], dtype=np.float32)


def word_vector_features(sentences: Sequence[Sequence[str]], vectors: dict[str, np.ndarray], dim: int) -> np.ndarray:
    """Context-free features ``(total_tokens, dim)``: each token's pretrained vector (looked up
    lower-cased, as GloVe's vocabulary is), zeros for a word without one."""
    rows = np.zeros((sum(len(s) for s in sentences), dim), dtype=np.float32)
    i = 0
    for sentence in sentences:
        for word in sentence:
            vector = vectors.get(word.lower())
            if vector is not None:
                rows[i] = vector
            i += 1
    return rows


def label_ids(tags: Sequence[Sequence[str]], labels: dict[str, int]) -> np.ndarray:
    """Class id of every token ``(total_tokens,)``; -1 for a tag not in ``labels``."""
    return np.array([labels.get(t, -1) for sentence in tags for t in sentence], dtype=np.int64)


def accuracy(probe: nn.Linear, features: np.ndarray, labels: np.ndarray, batch_size: int = 8192) -> float:
    """Fraction of tokens whose highest-scoring class is their label."""
    if len(labels) == 0:
        return 0.0
    correct = 0
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            x = torch.from_numpy(features[start:start + batch_size])
            correct += int((probe(x).argmax(dim=1).numpy() == labels[start:start + batch_size]).sum())
    return correct / len(labels)


def train_linear_probe(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray,
                       n_classes: int, *, epochs: int = 30, batch_size: int = 256, learning_rate: float = 0.003,
                       patience: int = 3, seed: int = 0) -> tuple[nn.Linear, list[float]]:
    """A softmax layer ``dim -> n_classes`` trained with Adam on cross entropy, the weights of the
    epoch with the best dev accuracy kept (stopping after ``patience`` epochs without a better
    one). Returns the probe and the dev accuracy of every epoch."""
    if train_x.shape[0] != train_y.shape[0] or dev_x.shape[0] != dev_y.shape[0]:
        raise ValueError("train_linear_probe: features and labels differ in length")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    probe = nn.Linear(train_x.shape[1], n_classes)
    optimizer = torch.optim.Adam(probe.parameters(), lr=learning_rate)
    keep = train_y >= 0
    x, y = torch.from_numpy(train_x[keep]), torch.from_numpy(train_y[keep])
    best, best_state, history = -1.0, None, []
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            rows = order[start:start + batch_size]
            loss = nn.functional.cross_entropy(probe(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        score = accuracy(probe, dev_x, dev_y)
        history.append(score)
        if score > best:
            best, best_state = score, copy.deepcopy(probe.state_dict())
        elif len(history) - 1 - history.index(best) >= patience:
            break
    probe.load_state_dict(best_state)
    return probe, history


__all__ = ["accuracy", "label_ids", "layer_token_features", "train_linear_probe", "word_vector_features"]
