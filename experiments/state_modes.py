"""Which initial LSTM state should a sentence start from?  Measures the state policies of
``elmo.states`` against the vectors the same sentence gets inside running text, which is what the
biLM saw during training (state carried from window to window).

For every test sentence and each of ``--contexts`` random contexts (``--context-length``
sentences read first, statefully) we get an *in-context* reference. Each policy's vectors are
compared with those references by cosine similarity, per LSTM layer. The row "another context"
compares two references with each other: how much real context alone moves a vector.

    python experiments/state_modes.py --options OPTIONS.json --weights WEIGHTS.hdf5 \
        --text ../shared/data/lm/wikitext-2/test.txt --output docs/state_modes.md
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np

from elmo import Embedder, load_bilm_tf
from elmo.fileio import read_lines


def sentences_from(path: str, min_len: int = 5, max_len: int = 40) -> list[list[str]]:
    """Split tokenized text into sentences at " . " (WikiText style); skip headings."""
    out = []
    for line in read_lines(path):
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for piece in line.split(" . "):
            tokens = piece.split()
            if min_len <= len(tokens) <= max_len:
                out.append(tokens + ["."])
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--options", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--text", required=True, help="tokenized text to draw sentences from")
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--context-length", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the Markdown table here too")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    pool = sentences_from(args.text)
    rng.shuffle(pool)
    tests, contexts = pool[:args.sentences], pool[args.sentences:]
    model = load_bilm_tf(args.options, args.weights)
    n_layers = model.config.n_output_layers
    policies = {name: Embedder(model, state=name) for name in ("reset", "warm")}
    stream = Embedder(model, state="stateful")
    scores = {name: [[] for _ in range(n_layers)] for name in [*policies, "another context"]}
    for sentence in tests:
        references = []
        for _ in range(args.contexts):
            stream.reset_state()
            stream.embed_sentences(rng.sample(contexts, args.context_length), batch_size=1)
            references.append(stream.embed_sentences([sentence])[0])
        for name, embedder in policies.items():
            vectors = embedder.embed_sentences([sentence])[0]
            for layer in range(1, n_layers):
                scores[name][layer].extend(cosine(vectors[layer], ref[layer]).mean() for ref in references)
        for layer in range(1, n_layers):
            scores["another context"][layer].append(cosine(references[0][layer], references[1][layer]).mean())

    header = "| starting state | " + " | ".join(f"layer {i} cosine to in-context" for i in range(1, n_layers)) + " |"
    lines = [header, "|---" * n_layers + "|"]
    for name, per_layer in scores.items():
        cells = " | ".join(f"{np.mean(per_layer[i]):.4f}" for i in range(1, n_layers))
        lines.append(f"| {name} | {cells} |")
    table = "\n".join(lines)
    print(table)
    print(f"\n{len(tests)} sentences x {args.contexts} contexts of {args.context_length} sentences, "
          f"from {args.text}", file=sys.stderr)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
