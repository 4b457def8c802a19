"""Held-out perplexity of a biLM with the full softmax, the way the paper reports it.

Each direction reads the held-out sentences once, in file order, as ``batch_size`` running
streams with the LSTM state carried from window to window (bilm-tf's test procedure). Every word
and every end-of-sentence marker is predicted; an out-of-vocabulary word is predicted as
``<UNK>`` (one word type), as on the 1B Word Benchmark.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch

from elmo.devices import DEFAULT_DEVICE
from elmo.model.network import BACKWARD, FORWARD
from elmo.model.vocab import Vocabulary
from elmo.progress import progress_bar
from elmo.training.data import LMBatcher, SentenceStream
from elmo.lm.model import LanguageModel

# Running streams read side by side, and tokens per stream per window, when evaluating.
EVAL_BATCH_SIZE = 64
EVAL_UNROLL_STEPS = 20


@torch.inference_mode()
def evaluate(model: LanguageModel, vocab: Vocabulary, paths: Sequence[str], batch_size: int = EVAL_BATCH_SIZE,
             unroll_steps: int = EVAL_UNROLL_STEPS, max_targets: int | None = None, per_sentence: bool = False,
             device: str | torch.device = DEFAULT_DEVICE, progress: bool = False) -> dict:
    """Forward, backward and average perplexity over the sentences of ``paths``.

    Returns a dict with ``forward_perplexity``, ``backward_perplexity``, ``average_perplexity``
    (their mean, the paper's figure), ``targets`` (predictions per direction), ``oov_rate``, and
    ``unigram_perplexity`` (of the data's own unigram distribution over the same vocabulary: what
    a model that ignores context at best achieves). With ``per_sentence``, also ``sentences``:
    ``[(index, forward_logprob, backward_logprob, n_targets), ...]`` in file order (natural log).
    ``max_targets`` stops each direction after about that many predictions.
    """
    model = model.to(device).eval()
    results = {}
    per_sentence_logprob: list[dict[int, float]] = [{}, {}]
    sentence_targets: Counter = Counter()
    counts: Counter = Counter()
    for direction in (FORWARD, BACKWARD):
        stream = SentenceStream(paths, shuffle=False, reverse=(direction == BACKWARD))
        batcher = LMBatcher(stream, vocab, batch_size, unroll_steps)
        state = model.bilm.zero_state(batch_size)
        total_nll, total = 0.0, 0
        with progress_bar(progress, unit="tok", desc="forward" if direction == FORWARD else "backward") as bar:
            while (batch := batcher.next_batch()) is not None:
                mask = batch["mask"].to(device)
                nll, finals = model.direction_nll(direction, batch["char_ids"].to(device),
                                                  batch["targets"].to(device), mask, state)
                state = _update_state(state, direction, finals)
                total_nll += float(nll.double().sum())
                total += int(mask.sum())
                if direction == FORWARD:
                    counts.update(batch["targets"][batch["mask"]].tolist())
                if per_sentence:
                    logprob = per_sentence_logprob[direction]
                    for sentence, value in zip(batch["sentence_ids"][batch["mask"]].tolist(), (-nll).tolist()):
                        logprob[sentence] = logprob.get(sentence, 0.0) + value
                        if direction == FORWARD:
                            sentence_targets[sentence] += 1
                bar.update(int(mask.sum()))
                if max_targets is not None and total >= max_targets:
                    break
        if total == 0:
            raise ValueError(f"{', '.join(paths)}: no sentences to evaluate")
        name = "forward" if direction == FORWARD else "backward"
        results[f"{name}_perplexity"] = math.exp(total_nll / total)
        results[f"{name}_targets"] = total
    results["average_perplexity"] = (results["forward_perplexity"] + results["backward_perplexity"]) / 2
    n = sum(counts.values())
    results["targets"] = results["forward_targets"]
    results["oov_rate"] = counts[vocab.unk] / n
    results["unigram_perplexity"] = math.exp(-sum(c * math.log(c / n) for c in counts.values()) / n)
    results["vocab_size"] = len(vocab)
    if per_sentence:
        forward, backward = per_sentence_logprob
        # With max_targets, the last sentences may be scored in one direction only: keep both-scored ones.
        results["sentences"] = [(i, forward[i], backward[i], sentence_targets[i])
                                for i in sorted(forward) if i in backward]
    return results


def _update_state(state, direction, finals):
    """Write one direction's final per-layer ``(c, h)`` into the carried state."""
    for layer, (c, h) in enumerate(finals):
        state.c[direction, layer] = c
        state.h[direction, layer] = h
    return state
