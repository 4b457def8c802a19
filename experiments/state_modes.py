"""Which initial LSTM state should a sentence start from?  Measures the state policies of
``elmo.inference.states`` against the vectors the same sentence gets inside running text, which is what the
biLM saw during training (state carried from window to window).

For every test sentence and each of ``--contexts`` random contexts (``--context-length``
sentences read first, statefully) we get an *in-context* reference. Each policy's vectors are
compared with those references by cosine similarity, per LSTM layer. The row "another context"
compares two references with each other: how much real context alone moves a vector.

With ``--model`` (an exported language model: weights, softmax and vocabulary, such as the
packaged ``src/elmo/resources/model``) the test sentences are also scored by the language model,
each direction starting from each policy's state and from the in-context states: the perplexity
(full softmax, every word and the end-of-sentence marker predicted, as ``elmo evaluate`` counts)
says how well the model predicts from that starting point.

    python experiments/state_modes.py --model src/elmo/resources/model \
        --text ../shared/data/lm/wikitext-2/test.txt --output docs/state_modes.md
    python experiments/state_modes.py --options OPTIONS.json --weights WEIGHTS.hdf5 --text TEXT
"""

from __future__ import annotations

import argparse
import math
import random
import sys

import numpy as np
import torch

from elmo import Embedder
from elmo.fileio import atomic_write_text, read_lines
from elmo.hub import load_language_model
from elmo.inference.runtime import compute_warm_state
from elmo.model.chars import BOS_TOKEN, EOS_TOKEN, batch_to_char_ids
from elmo.model.network import BACKWARD, FORWARD, BiLMState
from elmo.model.vocab import Vocabulary
from elmo.model.weights import load_bilm_tf
from elmo.lm.model import LanguageModel, stack_states


def sentences_from(path: str, min_len: int = 5, max_len: int = 40) -> list[list[str]]:
    """Split tokenized text into sentences at " . " (WikiText style); skip headings."""
    out = []
    for line in read_lines(path):
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for piece in line.split(" . "):
            tokens = piece.split()
            if tokens and tokens[-1] == ".":  # the line's last sentence keeps its own full stop
                tokens = tokens[:-1]
            if min_len <= len(tokens) <= max_len:
                out.append(tokens + ["."])
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-9)


@torch.inference_mode()
def read_sentence(lm: LanguageModel, vocab: Vocabulary, sentence: list[str], direction: int,
                  state: BiLMState) -> tuple[float, int, BiLMState]:
    """Score one sentence in one direction from ``state`` (one row): the summed NLL of its words
    and end marker, their count, and the state after it (the other direction's part unchanged)."""
    words = [BOS_TOKEN, *sentence, EOS_TOKEN]
    if direction == BACKWARD:
        words = words[::-1]
    char_ids, _ = batch_to_char_ids([words[:-1]])
    targets = torch.tensor([vocab.encode(words[1:])])
    nll, finals = lm.direction_nll(direction, char_ids, targets, torch.ones_like(targets, dtype=torch.bool), state)
    after = stack_states(finals, finals)
    c, h = state.c.clone(), state.h.clone()
    c[direction], h[direction] = after.c[direction], after.h[direction]
    return float(nll.double().sum()), targets.shape[1], BiLMState(c, h)


def perplexities(lm: LanguageModel, vocab: Vocabulary, tests: list[list[str]], contexts: list[list[list[str]]]
                 ) -> dict[str, float]:
    """Average (forward, backward) perplexity of ``tests`` from a zero state, the warm state and
    in context: after each of the sentence's ``contexts`` (a list of context lists), read in
    order from zero in the direction's reading order (the backward model reads them reversed,
    as it reads running text)."""
    lm = lm.eval()
    zero = lm.bilm.zero_state(1)
    starts = {"reset": zero, "warm": compute_warm_state(lm.bilm)}
    totals = {name: [[0.0, 0], [0.0, 0]] for name in (*starts, "in context")}
    for sentence, sentence_contexts in zip(tests, contexts):
        for direction in (FORWARD, BACKWARD):
            for name, state in starts.items():
                nll, n, _ = read_sentence(lm, vocab, sentence, direction, state)
                totals[name][direction][0] += nll
                totals[name][direction][1] += n
            for context in sentence_contexts:
                state = zero
                for earlier in (context if direction == FORWARD else context[::-1]):
                    _, _, state = read_sentence(lm, vocab, earlier, direction, state)
                nll, n, _ = read_sentence(lm, vocab, sentence, direction, state)
                totals["in context"][direction][0] += nll / len(sentence_contexts)
                totals["in context"][direction][1] += n / len(sentence_contexts)
    return {name: sum(math.exp(nll / n) for nll, n in per_direction) / 2 for name, per_direction in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="exported language model folder (cosines and perplexity)")
    source.add_argument("--options", help="bilm-tf options.json, with --weights (cosines only)")
    parser.add_argument("--weights")
    parser.add_argument("--text", required=True, help="tokenized text to draw sentences from")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--context-length", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the Markdown tables here too")
    args = parser.parse_args(argv)
    if args.options and not args.weights:
        parser.error("--options needs --weights")

    rng = random.Random(args.seed)
    pool = sentences_from(args.text)
    rng.shuffle(pool)
    tests, pool = pool[:args.sentences], pool[args.sentences:]
    if len(tests) < args.sentences or len(pool) < args.context_length:
        raise SystemExit(f"{args.text}: too few sentences of 5 to 40 tokens for {args.sentences} test sentences "
                         f"and their contexts")
    contexts = [[rng.sample(pool, args.context_length) for _ in range(args.contexts)] for _ in tests]
    lm, vocab = load_language_model(args.model) if args.model else (None, None)
    model = lm.bilm if lm is not None else load_bilm_tf(args.options, args.weights)
    n_layers = model.config.n_output_layers
    policies = {name: Embedder(model, state=name) for name in ("reset", "warm")}
    stream = Embedder(model, state="stateful")
    # Per layer: the cosine averaged over the sentence's words, and at its first word alone, where
    # the starting state weighs most.
    scores = {name: [[] for _ in range(n_layers)] for name in [*policies, "another context"]}
    first = {name: [[] for _ in range(n_layers)] for name in scores}
    for sentence, sentence_contexts in zip(tests, contexts):
        references = []
        for context in sentence_contexts:
            stream.reset_state()
            stream.embed_sentences(context, batch_size=1)
            references.append(stream.embed_sentences([sentence])[0])
        for name, embedder in policies.items():
            vectors = embedder.embed_sentences([sentence])[0]
            for layer in range(1, n_layers):
                for ref in references:
                    per_word = cosine(vectors[layer], ref[layer])
                    scores[name][layer].append(per_word.mean())
                    first[name][layer].append(per_word[0])
        for layer in range(1, n_layers):
            per_word = cosine(references[0][layer], references[1][layer])
            scores["another context"][layer].append(per_word.mean())
            first["another context"][layer].append(per_word[0])

    header = ("| starting state | " + " | ".join(f"layer {i} cosine to in-context" for i in range(1, n_layers))
              + " | " + " | ".join(f"layer {i}, first word" for i in range(1, n_layers)) + " |")
    lines = [header, "|---" * (2 * n_layers - 1) + "|"]
    for name, per_layer in scores.items():
        cells = " | ".join(f"{np.mean(values[i]):.4f}" for values in (per_layer, first[name]) for i in range(1, n_layers))
        lines.append(f"| {name} | {cells} |")
    if lm is not None:
        lines += ["", "| starting state | perplexity (forward and backward averaged) |", "|---|---:|"]
        lines += [f"| {name} | {value:.1f} |" for name, value in perplexities(lm, vocab, tests, contexts).items()]
    table = "\n".join(lines)
    print(table)
    print(f"\n{len(tests)} sentences x {args.contexts} contexts of {args.context_length} sentences, "
          f"from {args.text}", file=sys.stderr)
    if args.output:
        atomic_write_text(args.output, table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
