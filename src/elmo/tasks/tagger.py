"""Sequence tagging (NER, POS, chunking): a BiLSTM-CRF over word vectors, a char CNN and ELMo.

A simplified version of the tagger of Peters et al. (2018), section 5 (after Peters et al. 2017
and Lample et al. 2016)::

    [word vector; char CNN; ELMo_input] -> dropout -> BiLSTM -> dropout -> [h; ELMo_output]
        -> linear -> tag scores -> CRF (or a per-token softmax)

ELMo enters only through :class:`~elmo.tasks.integration.TaskElmo`, so with ELMo disabled the
model is exactly the baseline. Batches follow :mod:`elmo.tasks.features`: a dict with
``"words"`` ``(batch, time)``, ``"chars"`` ``(batch, time, max_chars)``, ``"mask"``
``(batch, time)`` (True at real tokens, rows left-aligned), ``"elmo"`` ``(batch, L+1, time, dim)``
or None, and for training ``"tags"`` ``(batch, time)`` (0 at padding).
"""

from __future__ import annotations

import torch
from torch import nn

from elmo.model.dropout import Dropout
from elmo.tasks.features import TokenFeatures
from elmo.tasks.integration import TaskElmo, concat
from elmo.tasks.masked import encode


class CRF(nn.Module):
    """A linear-chain conditional random field over ``n_tags`` tags.

    The score of tags ``y_1..y_n`` for emissions ``e`` is
    ``start[y_1] + sum_t e_t[y_t] + sum_{t>1} transitions[y_{t-1}, y_t] + end[y_n]``, and
    ``p(y | x)`` is its softmax over all ``n_tags ** n`` tag sequences.

    All methods take left-aligned rows: ``mask`` ``(batch, time)`` is True for the first
    ``length`` positions of each row and False after them.
    """

    def __init__(self, n_tags: int):
        super().__init__()
        self.n_tags = n_tags
        # transitions[i, j]: score of tag i followed by tag j.
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log p(tags | emissions)`` per row.

        ``emissions``: ``(batch, time, n_tags)``; ``tags``: ``(batch, time)`` long; ``mask``:
        ``(batch, time)`` bool -> ``(batch,)``. Rows of length 0 get 0.
        """
        batch, time, _ = emissions.shape
        if time == 0:
            return emissions.new_zeros(batch)
        mask = mask.bool()
        lengths = mask.sum(dim=1)
        score = self._path_score(emissions, tags, mask, lengths)
        log_partition = self._log_partition(emissions, mask)
        return torch.where(lengths > 0, score - log_partition, torch.zeros_like(score))

    def _path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor,
                    lengths: torch.Tensor) -> torch.Tensor:
        """The unnormalised score ``(batch,)`` of the given tag sequences."""
        keep = mask.to(emissions.dtype)
        # Emission of each position's tag: (batch, time).
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)
        score = (emitted * keep).sum(dim=1)
        score = score + self.start[tags[:, 0]]
        # Transition from position t-1 into position t counts when t is a real token.
        transition = self.transitions[tags[:, :-1], tags[:, 1:]]  # (batch, time - 1)
        score = score + (transition * keep[:, 1:]).sum(dim=1)
        last = (lengths - 1).clamp(min=0)
        last_tags = tags.gather(1, last.unsqueeze(1)).squeeze(1)
        return score + self.end[last_tags]

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log sum_y exp(score(y))`` ``(batch,)`` by the forward algorithm."""
        # alpha[b, j]: log-sum of the scores of all prefixes ending in tag j at the current step.
        alpha = self.start.unsqueeze(0) + emissions[:, 0]  # (batch, n_tags)
        for t in range(1, emissions.shape[1]):
            # (batch, previous tag i, next tag j)
            candidates = alpha.unsqueeze(2) + self.transitions.unsqueeze(0) + emissions[:, t].unsqueeze(1)
            next_alpha = torch.logsumexp(candidates, dim=1)
            # Past the end of a row alpha stays as it was at its last token.
            alpha = torch.where(mask[:, t].unsqueeze(1), next_alpha, alpha)
        return torch.logsumexp(alpha + self.end.unsqueeze(0), dim=1)

    @torch.no_grad()
    def viterbi_decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The highest-scoring tag sequence of each row (``mask.sum(1)`` tags long).

        ``emissions``: ``(batch, time, n_tags)``; ``mask``: ``(batch, time)`` bool.
        """
        batch, time, _ = emissions.shape
        mask = mask.bool()
        lengths = mask.sum(dim=1).tolist()
        if time == 0:
            return [[] for _ in range(batch)]
        # best[b, j]: score of the best prefix ending in tag j; backpointers[t - 1][b, j]: the
        # previous tag on that prefix at step t.
        best = self.start.unsqueeze(0) + emissions[:, 0]
        backpointers = []
        for t in range(1, time):
            candidates = best.unsqueeze(2) + self.transitions.unsqueeze(0)  # (batch, i, j)
            top, previous = candidates.max(dim=1)
            best = torch.where(mask[:, t].unsqueeze(1), top + emissions[:, t], best)
            backpointers.append(previous)
        final = best + self.end.unsqueeze(0)

        paths = []
        for row, length in enumerate(lengths):
            if length == 0:
                paths.append([])
                continue
            tag = int(final[row].argmax())
            path = [tag]
            for t in range(length - 1, 0, -1):
                tag = int(backpointers[t - 1][row, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


class Tagger(nn.Module):
    """BiLSTM(-CRF) sequence tagger with optional ELMo at its input and/or output.

    ``features``: the token's word vector and char CNN; ``elmo``: the task's mixes (disabled for
    the baseline); ``hidden``: LSTM size per direction; ``layers``: stacked BiLSTM layers;
    ``dropout``: before and after the BiLSTM (and between its layers); ``crf=False`` scores
    each token independently with a softmax.
    """

    def __init__(self, features: TokenFeatures, elmo: TaskElmo, n_tags: int, *, hidden: int = 100,
                 layers: int = 1, dropout: float = 0.5, crf: bool = True):
        super().__init__()
        self.features = features
        self.elmo = elmo
        self.n_tags = n_tags
        self.input_dropout = Dropout(dropout)
        self.encoder = nn.LSTM(features.output_dim + elmo.input_dim, hidden, num_layers=layers,
                               bidirectional=True, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.output_dropout = Dropout(dropout)
        self.projection = nn.Linear(2 * hidden + elmo.output_dim, n_tags)
        self.crf = CRF(n_tags) if crf else None

    def scores(self, batch: dict) -> torch.Tensor:
        """Unnormalised tag scores ``(batch, time, n_tags)``."""
        mask = batch["mask"].bool()
        layers = batch.get("elmo")
        inputs = concat(self.features(batch["words"], batch["chars"]), self.elmo.for_input(layers, mask))
        inputs = self.input_dropout(inputs)

        # Packed, so padding stays out of both directions; scores at padding are masked anyway.
        encoded = self.output_dropout(encode(self.encoder, inputs, mask))

        encoded = concat(encoded, self.elmo.for_output(layers, mask))
        return self.projection(encoded)

    def loss(self, batch: dict) -> torch.Tensor:
        """Scalar training loss: mean negative log-likelihood per sentence (CRF) or mean cross
        entropy per real token (softmax), plus the ELMo mixes' L2 penalty."""
        scores = self.scores(batch)
        mask = batch["mask"].bool()
        tags = batch["tags"]
        if self.crf is not None:
            loss = -self.crf.log_likelihood(scores, tags, mask).mean()
        else:
            loss = nn.functional.cross_entropy(scores[mask], tags[mask])
        return loss + self.elmo.l2_penalty().to(loss.device)

    @torch.no_grad()
    def predict(self, batch: dict) -> list[list[int]]:
        """Tag ids of each sentence, without padding (Viterbi with the CRF, else argmax).
        Call ``eval()`` first for deterministic output."""
        scores = self.scores(batch)
        mask = batch["mask"].bool()
        if self.crf is not None:
            return self.crf.viterbi_decode(scores, mask)
        best = scores.argmax(dim=-1)
        return [best[row, :length].tolist() for row, length in enumerate(mask.sum(dim=1).tolist())]


__all__ = ["CRF", "Tagger"]
