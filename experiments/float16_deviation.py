"""How far float16 storage moves a model's ELMo vectors from the float32 originals.

    python experiments/float16_deviation.py RUN --text FILE [--sentences 500]

(RUN: a training run directory, checkpoint or exported folder; FILE: tokenized sentences, one a line.)

Exports the run's biLM twice (float32 and float16 storage, both loaded back as float32), embeds
the same sentences with both, and prints the largest and mean absolute deviation per layer, the
mean magnitude, and the lowest cosine similarity between corresponding token vectors.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

import numpy as np

from elmo.fileio import read_lines
from elmo.hub import load_language_model
from elmo.inference.embed import Embedder
from elmo.model.weights import load_bilm_tf, save_bilm_tf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="run directory, checkpoint or exported folder")
    parser.add_argument("--text", required=True, help="tokenized sentences, one per line")
    parser.add_argument("--sentences", type=int, default=500)
    args = parser.parse_args(argv)

    sentences = []
    for line in read_lines(args.text):
        if line.split():
            sentences.append(line.split())
        if len(sentences) == args.sentences:
            break
    model, _ = load_language_model(args.model)
    outputs = {}
    with tempfile.TemporaryDirectory() as folder:
        for dtype in ("float32", "float16"):
            options, weights = save_bilm_tf(model.bilm, folder, weights_name=f"{dtype}.hdf5", dtype=dtype)
            outputs[dtype] = Embedder(load_bilm_tf(options, weights), state="reset").embed_sentences(sentences)
    full = np.concatenate(outputs["float32"], axis=1)  # (layers, tokens, dim)
    half = np.concatenate(outputs["float16"], axis=1)
    print(f"{len(sentences)} sentences, {full.shape[1]} tokens")
    print("layer  max |diff|  mean |diff|  mean |value|  min cosine")
    for layer in range(full.shape[0]):
        a, b = full[layer], half[layer]
        diff = np.abs(a - b)
        cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        print(f"{layer:>5}  {diff.max():.2e}    {diff.mean():.2e}     {np.abs(a).mean():.3f}        {cosine.min():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
