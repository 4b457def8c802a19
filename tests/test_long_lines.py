"""Lines too long for one batch (elmo.inference.long_lines): embedded in windows with the numbers
of the whole sentence, streamed from a file, refused past the bound with their line number."""

import random
import subprocess

import numpy as np
import pytest
from conftest import (
    EMBED_CLI,
    EMBED_WORDS,
    FIXTURE_MODEL_ARGS,
    corpus,
    load_fixture_model,
    write_lines,
)

from elmo import Embedder, open_embeddings

# The numbers' promises: CI runs these again with the CPU kernels held to AVX2.
pytestmark = pytest.mark.exactness


@pytest.fixture(scope="module")
def model():
    return load_fixture_model("allennlp")


def test_a_long_sentence_in_windows_equals_it_whole(model):
    rng = random.Random(7)
    sentence = [rng.choice(EMBED_WORDS) for _ in range(300)]
    whole = Embedder(model, max_tokens=10_000).embed_sentence(sentence)
    windowed = Embedder(model, max_tokens=128).embed_sentence(sentence)  # 3 windows
    np.testing.assert_allclose(windowed, whole, rtol=0, atol=1e-5)
    reset = Embedder(model, max_tokens=10_000, state="reset").embed_sentence(sentence)
    np.testing.assert_allclose(Embedder(model, max_tokens=200, state="reset").embed_sentence(sentence), reset,
                               rtol=0, atol=1e-5)


def test_the_batch_path_streamed_is_the_batch_path_whole(model):
    """stream_batch, the file pipeline's one path, gives embed_batch's vectors token by token: a
    long sentence in pieces of at most max_tokens, every other sentence in one piece."""
    rng = random.Random(11)
    long = [rng.choice(EMBED_WORDS) for _ in range(300)]
    embedder = Embedder(model, max_tokens=128)
    pieces = list(embedder.stream_batch([long]))
    assert len(pieces) == 3 and all(len(p) <= 128 for p in pieces)
    (whole,) = embedder.embed_batch([long])
    np.testing.assert_array_equal(np.concatenate(pieces).transpose(1, 0, 2), whole)
    short = corpus(4, seed=12)
    arrays = embedder.embed_batch([s.split() for s in short])
    streamed = list(embedder.stream_batch([s.split() for s in short]))
    assert [p.shape[0] for p in streamed] == [len(s.split()) for s in short]
    for piece, array in zip(streamed, arrays):
        np.testing.assert_array_equal(piece.transpose(1, 0, 2), array)


@pytest.mark.parametrize("layout", ["allennlp", "packed"])
def test_a_file_with_a_long_line_streams_it_in_windows(tmp_path, model, layout):
    lines = corpus(12, seed=8)
    rng = random.Random(9)
    lines[5] = " ".join(rng.choice(EMBED_WORDS) for _ in range(300))
    src = write_lines(tmp_path / "in.txt", lines)
    Embedder(model, max_tokens=128).embed_file(src, tmp_path / "out.hdf5", layout=layout, layers="all")
    expected = Embedder(model, max_tokens=10_000).embed_sentences(lines)
    with open_embeddings(tmp_path / "out.hdf5") as got:
        assert got[5].shape == (3, 300, 32)
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_too_long_lines_are_refused_with_their_line_number(tmp_path, model):
    lines = ["short one", "a b c d e f", "ok"]
    src = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder(model, max_tokens=4)
    with pytest.raises(ValueError, match=r"in.txt:2: 6 tokens, more than the limit of 5 for one line"):
        embedder.embed_file(src, tmp_path / "out.hdf5", max_line_tokens=5)
    src.write_text("x\n" + "y" * 1000 + "\n")  # refused before it is split: 64 bytes per token allowed
    with pytest.raises(ValueError, match=r"in.txt:2: the line is longer than 320 bytes"):
        embedder.embed_file(src, tmp_path / "out.hdf5", max_line_tokens=5, overwrite=True)
    write_lines(src, lines)
    with pytest.raises(ValueError, match=r"in.txt:2: 6 tokens; stateful mode .* --state warm or reset"):
        Embedder(model, max_tokens=4, state="stateful").embed_file(src, tmp_path / "out.hdf5", overwrite=True)
    assert not (tmp_path / "out.hdf5").exists()
    result = subprocess.run([*EMBED_CLI, str(src), str(tmp_path / "o.hdf5"), *FIXTURE_MODEL_ARGS, "--max-line-tokens", "3"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "in.txt:2: 6 tokens, more than the limit of 3" in result.stderr


def test_the_progress_bar_moves_within_a_long_line(tmp_path, model, capsys):
    """Issue 45: a 20,000-token line showed a bar stuck at 0/1 for 40 s. The bar now moves by the
    fraction of the line embedded, window by window, with its tokens shown."""
    src = write_lines(tmp_path / "in.txt", ["short line first", " ".join(["word"] * 1_000)])
    capsys.readouterr()
    Embedder(model, max_tokens=128).embed_file(src, tmp_path / "out.hdf5", progress=True)
    states = [s.strip() for s in capsys.readouterr().err.replace("\r", "\n").splitlines() if s.strip()]
    bars = [(s.split("|")[2].split("/")[0].strip(), s) for s in states if s.count("|") >= 2]
    within = [(count, s) for count, s in bars if "." in count]  # the bar's count within the long line
    assert len(within) >= 5 and all("of 1,000 tokens" in s for _, s in within), states  # one per window of 128
    fractions = [float(count) for count, _ in within]
    # Within one line (whichever batch comes first): fractions of it, rising through it.
    assert fractions == sorted(fractions) and int(fractions[0]) == int(fractions[-1]), fractions
    assert 0 < fractions[0] % 1 < 0.2 and fractions[-1] % 1 > 0.9, fractions
    assert bars[-1][0] == "2", states  # whole lines count at the end
