"""bilm-tf's own ``dump_bilm_embeddings`` on a text file, for whole-process comparisons.

bilm-tf (allenai/bilm-tf, TensorFlow 1) is the original implementation; its
``dump_bilm_embeddings(vocab, text, options, weights, out)`` is how its README tells users to
embed a file: one sentence per line split on whitespace, **one sentence per ``session.run``**,
the LSTM states carried from each sentence to the next, every layer written to HDF5 under the
line's index as ``(3, tokens, 2 * projection)`` (the sentence boundaries removed).

TensorFlow 1 no longer installs; bilm-tf's code runs unchanged on TensorFlow 2's
``tf.compat.v1`` with the legacy Keras that its ``tf.nn.rnn_cell.LSTMCell`` needs. This script
makes ``import tensorflow`` inside bilm-tf mean ``tensorflow.compat.v1`` (graph mode, as in
TensorFlow 1) and calls bilm-tf's function; nothing of its numerics or its loop is changed.

Get it once, in an environment of its own (not elmo's: TensorFlow brings its own numpy pins)::

    python -m venv "$TFENV" && "$TFENV/bin/pip" install tensorflow-cpu tf-keras h5py
    git clone https://github.com/allenai/bilm-tf "$BILM_TF"

Run (``embed_speed.py --whole-process --bilm-tf-src`` calls it)::

    TF_USE_LEGACY_KERAS=1 PATH="$TFENV/bin:$PATH" python benchmarks/bilm_tf_dump.py \
        --bilm-tf-src "$BILM_TF" VOCAB.txt TEXT OPTIONS.json WEIGHTS.hdf5 OUT.hdf5
"""

from __future__ import annotations

import argparse
import os
import sys


def bilm_tf_command(python: str, src: str, vocab: str, text: str, options: str, weights: str,
                    output: str) -> list[str]:
    """The command line that runs bilm-tf's ``dump_bilm_embeddings`` with ``python`` (an
    interpreter with TensorFlow 2 and tf-keras) from the checkout ``src``."""
    return [python, os.path.abspath(__file__), "--bilm-tf-src", src, vocab, text, options, weights, output]


def bilm_tf_env(env: dict) -> dict:
    """``env`` for that command: the legacy Keras bilm-tf's LSTM cells need, TensorFlow's start-up
    chatter off."""
    return {**env, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bilm-tf-src", required=True, help="a checkout of allenai/bilm-tf (holds bilm/)")
    for name in ("vocab", "text", "options", "weights", "output"):
        parser.add_argument(name)
    args = parser.parse_args(argv)

    import tensorflow as tf2

    tf = tf2.compat.v1
    tf.disable_v2_behavior()
    sys.modules["tensorflow"] = tf  # bilm-tf's `import tensorflow as tf` is TensorFlow 1's API
    sys.path.insert(0, os.path.abspath(args.bilm_tf_src))
    from bilm import dump_bilm_embeddings

    dump_bilm_embeddings(args.vocab, args.text, args.options, args.weights, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
