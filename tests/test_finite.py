"""Finite numbers out: a batch whose vectors hold NaN or infinite values fails the call, naming
the sentence (Embedder) or the file's line (the file pipeline, elmo embed), never exit 0.

Weights that would overflow are refused on load (tests/test_readers.py); this is the last guard,
for an overflow that compounds through the layers. Both ways are tested: a model whose weights
hold a NaN (built in memory, past every load check), and a NaN appearing in one row of one batch.
"""

import numpy as np
import pytest
import torch
from conftest import FIXTURE_MODEL_ARGS, load_fixture_model

from elmo import Embedder
from elmo.checks import NonFiniteOutputError
from elmo.inference.runtime import Runtime


@pytest.fixture
def poisoned(monkeypatch):
    """Runs that give NaN vectors to the row of any sentence holding the word "poison"."""
    real = Runtime.run_batch

    def run_batch(self, rows, *args, **kwargs):
        out = real(self, rows, *args, **kwargs)
        for i, row in enumerate(rows):
            if "poison" in row:
                out.layers[i, :, 0] = float("nan")
        return out

    monkeypatch.setattr(Runtime, "run_batch", run_batch)


def test_a_model_with_a_nan_weight_fails_naming_the_sentence():
    model = load_fixture_model("allennlp")
    with torch.no_grad():
        model.forward_layers[0].projection.view(-1)[0] = float("nan")
    with pytest.raises(NonFiniteOutputError, match=r"^sentence 0: its vectors hold NaN or infinite values"):
        Embedder(model).embed(["the cat sat"])


def test_the_row_named_is_the_sentence_whatever_the_batch_order(poisoned):
    sentences = ["a b c d e f", "the cat", "one poison here", "x"]  # batched longest first
    with pytest.raises(NonFiniteOutputError, match=r"^sentence 2: ") as error:
        Embedder(load_fixture_model("allennlp")).embed(sentences)
    assert error.value.row == 2


def test_padding_never_fails_a_batch(monkeypatch):
    """Non-finite values where a shorter sentence is padded are not its vectors."""
    real = Runtime.run_batch

    def run_batch(self, rows, *args, **kwargs):
        out = real(self, rows, *args, **kwargs)
        shortest = min(range(len(rows)), key=lambda i: len(rows[i]))
        out.layers[shortest, :, len(rows[shortest]):] = float("nan")
        return out

    monkeypatch.setattr(Runtime, "run_batch", run_batch)
    arrays = Embedder(load_fixture_model("allennlp")).embed(["a b c d e f", "the cat"])
    assert all(np.isfinite(a).all() for a in arrays)


def test_elmo_embed_fails_naming_the_line_and_writes_nothing(poisoned, tmp_path, capsys):
    from elmo.cli.main import main
    text, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    text.write_text("the cat sat\na dog\nthe poison line\nlast one\n")
    assert main(["embed", str(text), str(out), *FIXTURE_MODEL_ARGS, "--batch-size", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{text}:3: its vectors hold NaN or infinite values" in err[0], err
    assert not out.exists()


def test_the_windowed_path_is_guarded_too(monkeypatch, tmp_path):
    """A line longer than max_tokens runs in windows (not through run_batch): each window is checked."""
    import elmo.inference.embed
    real = elmo.inference.embed.embed_long_sentence

    def windows(runtime, tokens, *args):
        for piece in real(runtime, tokens, *args):
            yield np.full_like(piece, np.nan) if "poison" in tokens else piece

    monkeypatch.setattr(elmo.inference.embed, "embed_long_sentence", windows)
    embedder = Embedder(load_fixture_model("allennlp"), max_tokens=8)
    text = tmp_path / "in.txt"
    text.write_text("short line\n" + " ".join(["word"] * 20 + ["poison"]) + "\n")
    with pytest.raises(NonFiniteOutputError, match=rf"^{text}:2: "):
        embedder.embed_file(text, tmp_path / "out.hdf5")


def test_printing_vectors_names_the_line(poisoned, tmp_path, capsys):
    from elmo.cli.main import main
    text = tmp_path / "in.txt"
    text.write_text("the cat\npoison\n")
    assert main(["embed", str(text), *FIXTURE_MODEL_ARGS]) == 2
    assert f"{text}:2: its vectors" in capsys.readouterr().err
