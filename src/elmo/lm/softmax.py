"""The biLM's output layer: a softmax over the word vocabulary, shared by both directions.

Training uses the full softmax for small vocabularies, or a sampled softmax with a log-uniform
(Zipfian) candidate sampler and negatives shared by the whole batch, as bilm-tf does through
``tf.nn.sampled_softmax_loss``. Evaluation always uses the full softmax.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from elmo.kernels.blocks import trained_linear


class Softmax(nn.Module):
    """``logits = h W^T + b``; ``weight``: ``(vocab, projection_dim)``, ``bias``: ``(vocab,)``."""

    def __init__(self, vocab_size: int, dim: int, device: torch.device | str | None = None):
        super().__init__()
        # ``device``: where the weights are made and initialised. For a large vocabulary the
        # initialisation is the cost: 93 s for the original 793,471 x 512 on 2 CPU cores, far less
        # on the GPU the trainer would move it to anyway (issue 58).
        self.weight = nn.Parameter(torch.empty(vocab_size, dim, device=device))
        self.bias = nn.Parameter(torch.zeros(vocab_size, device=device))
        # bilm-tf: truncated normal with stddev 1/sqrt(dim).
        nn.init.trunc_normal_(self.weight, std=1.0 / math.sqrt(dim), a=-2.0 / math.sqrt(dim), b=2.0 / math.sqrt(dim))

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden``: ``(n, dim)`` -> log-probabilities ``(n, vocab)`` (full softmax)."""
        return torch.log_softmax(hidden @ self.weight.t() + self.bias, dim=-1)

    def full_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-position negative log-likelihood ``(n,)`` of ``targets`` ``(n,)``."""
        logits = hidden @ self.weight.t() + self.bias
        return nn.functional.cross_entropy(logits.float(), targets, reduction="none")

    def sampled_loss(self, hidden: torch.Tensor, targets: torch.Tensor, n_samples: int,
                     generator: torch.Generator | None = None) -> torch.Tensor:
        """Sampled-softmax negative log-likelihood ``(n,)``, an estimate of :meth:`full_loss`.

        ``n_samples`` distinct negatives are drawn once for the whole batch from the log-uniform
        distribution (which suits a vocabulary sorted by descending frequency). Every logit is
        corrected by ``-log(expected count)``, and a negative that equals a row's target is masked
        out ("accidental hit"), as in TensorFlow.
        """
        sample = log_uniform_sample(self.vocab_size, n_samples, hidden.device, generator)
        return self.sampled_losses([hidden], [targets], [sample])[0]

    def sampled_losses(self, hidden: list[torch.Tensor], targets: list[torch.Tensor],
                       samples: list[tuple[torch.Tensor, torch.Tensor, int]],
                       rows: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[torch.Tensor]:
        """:meth:`sampled_loss` for several groups of rows (the two directions), each with its own
        negatives (:func:`log_uniform_sample`'s result): ``hidden[k]`` ``(n_k, dim)``, ``targets[k]``
        ``(n_k,)`` -> NLL ``(n_k,)`` per group. The softmax rows of every group's targets and
        negatives are gathered in one index: its gradient is one scatter into one zero-filled
        ``(vocab, dim)`` tensor, where a gather per use would make one such tensor each.

        ``rows``: ``(weights, index)``: the weight rows to use, a tensor ``(k, dim)`` (a leaf whose
        gradient the caller wants compact) and, for the ids in order (group 0's targets, its
        negatives, group 1's targets, ...), their row in it."""
        ids = torch.cat([t for group in zip(targets, (s[0] for s in samples)) for t in group])
        weights = self.weight[ids] if rows is None else rows[0][rows[1]]
        biases = self.bias[ids]
        losses, start = [], 0
        for h, wanted, (sampled, sampled_count, tries) in zip(hidden, targets, samples):
            n, k = len(wanted), len(sampled)
            true_w, true_b = weights[start:start + n], biases[start:start + n]
            sampled_w, sampled_b = weights[start + n:start + n + k], biases[start + n:start + n + k]
            start += n + k
            true_count = expected_count(wanted, self.vocab_size, tries)
            true_logits = (h * true_w).sum(-1) + true_b - torch.log(true_count)
            correction = sampled_b - torch.log(sampled_count)
            if torch.is_autocast_enabled(h.device.type):
                # The product comes out in the autocast dtype; the float32 bias keeps the sum float32.
                sampled_logits = h @ sampled_w.t() + correction
            else:  # the bias joins the product's kernel: no (n, k) pass for it
                sampled_logits = trained_linear(h, sampled_w, correction)
            hits = wanted.unsqueeze(1) == sampled.unsqueeze(0)
            sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)
            # -log_softmax([true, sampled])[0], without copying the logits into one (n, k + 1) tensor.
            true_logits = true_logits.float()
            losses.append(torch.logaddexp(true_logits, torch.logsumexp(sampled_logits.float(), dim=1)) - true_logits)
        return losses


def log_uniform_probability(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """P(k) = log((k + 2) / (k + 1)) / log(vocab_size + 1), the Zipfian sampler of TensorFlow."""
    ids = ids.double()
    return (torch.log1p(1.0 / (ids + 1.0)) / math.log(vocab_size + 1.0)).float()


def expected_count(ids: torch.Tensor, vocab_size: int, tries: int) -> torch.Tensor:
    """Expected number of times ``ids`` appear in ``tries`` draws, as TF's unique sampler reports:
    ``1 - (1 - p)^tries``."""
    p = log_uniform_probability(ids, vocab_size).double()
    return (-torch.expm1(tries * torch.log1p(-p))).float().clamp_min(1e-30)


def log_uniform_sample(vocab_size: int, n_samples: int, device: torch.device | str,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Draw until ``n_samples`` distinct ids are seen. Returns them ``(n_samples,)``, their
    expected counts ``(n_samples,)`` and the number of draws it took."""
    n_samples = min(n_samples, vocab_size)
    log_range = math.log(vocab_size + 1.0)
    seen: list[torch.Tensor] = []
    found = torch.zeros(vocab_size, dtype=torch.bool)
    n_found, tries = 0, 0
    while n_found < n_samples:
        # Inverse CDF of the log-uniform distribution.
        u = torch.rand(2 * n_samples, generator=generator, dtype=torch.float64)
        draws = (torch.exp(u * log_range).floor().long() - 1).clamp(0, vocab_size - 1)
        for start in range(0, len(draws), 1024):  # stop counting tries as soon as enough are found
            chunk = draws[start:start + 1024]
            is_new = ~found[chunk]
            # Within the chunk, only the first occurrence of an id is new.
            first = torch.zeros_like(is_new)
            uniq, inverse = torch.unique(chunk, return_inverse=True)
            first_pos = torch.full((len(uniq),), len(chunk), dtype=torch.long).scatter_reduce(
                0, inverse, torch.arange(len(chunk)), reduce="amin")
            first[first_pos] = True
            new = is_new & first
            cumulative = n_found + new.long().cumsum(0)
            if cumulative[-1] >= n_samples:
                stop = int(torch.nonzero(cumulative >= n_samples)[0]) + 1
                chunk, new = chunk[:stop], new[:stop]
            seen.append(chunk[new])
            found[chunk[new]] = True
            n_found += int(new.sum())
            tries += len(chunk)
            if n_found >= n_samples:
                break
    sampled = torch.cat(seen)[:n_samples]
    counts = expected_count(sampled, vocab_size, tries)
    if torch.device(device).type == "cuda":
        # From pinned memory the copies do not wait for the work already queued on the GPU.
        return sampled.pin_memory().to(device, non_blocking=True), counts.pin_memory().to(device, non_blocking=True), tries
    return sampled.to(device), counts.to(device), tries
