"""Embed a file of sentences with an exported ELMo graph (``elmo export --format onnx``) on
onnxruntime alone: numpy, onnxruntime and h5py, no PyTorch and no ``elmo``. Writes what
``elmo embed`` writes by default (the ``allennlp`` layout: one float32 dataset ``(layers,
tokens, dim)`` per line, keyed by the line's index, plus ``sentence_to_index``).

    python examples/onnx_embed.py MODEL.onnx SENTENCES.txt VECTORS.hdf5 [--batch-size 16]

Also the character-id rule written out in Python without the library (docs/onnx.md), for a port
to another language: :func:`token_ids`.
"""

from __future__ import annotations

import argparse
import json
import sys

import h5py
import numpy as np
import onnxruntime as ort

WIDTH = 50  # ids per token
BOW, EOW, PAD = 259, 260, 261  # begin-of-word, end-of-word, in-word padding (bilm-tf's 258-260, + 1)
BOS_ROW = np.array([BOW, 257, EOW] + [PAD] * (WIDTH - 3), dtype=np.int64)  # <S>: "byte" 256, + 1
EOS_ROW = np.array([BOW, 258, EOW] + [PAD] * (WIDTH - 3), dtype=np.int64)  # </S>: "byte" 257, + 1


def token_ids(token: str) -> np.ndarray:
    """The 50 ids of one token: begin-of-word, its UTF-8 bytes (the first 48) each + 1,
    end-of-word, padding. The strings ``<S>`` and ``</S>`` are the boundary rows themselves."""
    if token == "<S>":
        return BOS_ROW
    if token == "</S>":
        return EOS_ROW
    data = token.encode("utf-8", "ignore")[:WIDTH - 2]  # may cut a character in two, as bilm-tf does
    row = np.full(WIDTH, PAD, dtype=np.int64)
    row[0] = BOW
    row[1:1 + len(data)] = np.frombuffer(data, dtype=np.uint8) + 1
    row[1 + len(data)] = EOW
    return row


def batch_ids(sentences: list[list[str]]) -> np.ndarray:
    """The graph's input ``(batch, longest + 2, 50)``: <S>, the tokens, </S>, then zero rows."""
    ids = np.zeros((len(sentences), max(map(len, sentences)) + 2, WIDTH), dtype=np.int64)
    for row, tokens in enumerate(sentences):
        ids[row, 0] = BOS_ROW
        for t, token in enumerate(tokens):
            ids[row, t + 1] = token_ids(token)
        ids[row, len(tokens) + 1] = EOS_ROW
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the .onnx file elmo export --format onnx wrote (state warm or reset)")
    parser.add_argument("input", help="text, one sentence per line, tokens separated by whitespace")
    parser.add_argument("output", help="HDF5 file to write")
    # 16: at the original size 8 to 16 sentences per call ran fastest here (60 sentences: 3.3 s
    # against 5.0 s at 64) and held a third of the memory (829 MB against 1,547 MB at 64).
    parser.add_argument("--batch-size", type=int, default=16, help="sentences per call (default 16)")
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime's threads (0: its default)")
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    with open(args.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    sentences = [line.split() for line in lines]
    # Batches of sentences of similar length (less padding); each written under its line's index.
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    with h5py.File(args.output, "w") as out:
        for start in range(0, len(order), args.batch_size):
            rows = order[start:start + args.batch_size]
            layers, _ = session.run(["layers", "mask"], {"char_ids": batch_ids([sentences[i] for i in rows])})
            for row, i in enumerate(rows):
                out.create_dataset(str(i), data=layers[row, :, :len(sentences[i])])
        index = {line.strip(): str(i) for i, line in reversed(list(enumerate(lines)))}  # the first of repeats
        out.create_dataset("sentence_to_index", data=np.array([json.dumps(index)], dtype=h5py.string_dtype()))
    print(f"wrote {len(sentences)} sentences to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
