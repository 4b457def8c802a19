"""Contextual nearest neighbours (the paper's Table 4): the library and `elmo neighbours`."""

import numpy as np
import pytest
from conftest import ALLENNLP, load_fixture_model

from elmo.cli.main import main
from elmo.inference.embed import Embedder
from elmo.inference.neighbours import contextual_neighbours, word_positions

CORPUS = [
    "He scored a goal in the second half of the game .".split(),
    "The actors rehearsed the play for weeks .".split(),
    "The children play in the park after school .".split(),
    "She went to see a play at the theatre .".split(),
    "The team tried a new play on the final down .".split(),
    "A Play and another play .".split(),
]
QUERY = "She went to see a play at the theatre ."
MODEL_ARGS = ["--options", str(ALLENNLP / "options.json"), "--weights", str(ALLENNLP / "lm_weights.hdf5")]


@pytest.fixture(scope="module")
def embedder():
    return Embedder(load_fixture_model("allennlp"))


def cosine(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_neighbours_rank_every_use_by_cosine(embedder, tmp_path):
    found = contextual_neighbours(embedder, QUERY, "play", CORPUS, k=10, skip_query=False)
    # every use of the word (case-insensitive), each once, best first
    assert sorted((n.sentence, n.position) for n in found) == [(1, 4), (2, 2), (3, 5), (4, 5), (5, 1), (5, 4)]
    assert [n.score for n in found] == sorted((n.score for n in found), reverse=True)
    assert (found[0].sentence, found[0].position) == (3, 5) and found[0].score == pytest.approx(1.0, abs=1e-5)
    assert found[0].highlighted() == "She went to see a [[play]] at the theatre ."
    # the scores are the cosines of the top layer's vectors
    query = embedder.embed_sentences([QUERY.split()])[0][-1, 5]
    other = embedder.embed_sentences([CORPUS[1]])[0][-1, 4]
    assert next(n.score for n in found if n.sentence == 1) == pytest.approx(cosine(query, other), abs=1e-5)
    # k, another layer, and the vector cache give the same ranking
    assert contextual_neighbours(embedder, QUERY, "play", CORPUS, k=2, skip_query=False) == found[:2]
    # by default the query's own sentence is not its own neighbour
    assert contextual_neighbours(embedder, QUERY, "play", CORPUS, k=10) == found[1:]
    layer0 = contextual_neighbours(embedder, QUERY, "play", CORPUS, k=10, layer=0)
    assert {n.score for n in layer0} != {n.score for n in found}
    cached = contextual_neighbours(embedder, QUERY, "play", CORPUS, k=10, cache_dir=tmp_path, skip_query=False)
    assert [(n.sentence, n.position) for n in cached] == [(n.sentence, n.position) for n in found]
    np.testing.assert_allclose([n.score for n in cached], [n.score for n in found], atol=2e-3)  # float16 cache
    assert list(tmp_path.glob("neighbours-*.hdf5"))


def test_any_word_and_errors(embedder):
    found = contextual_neighbours(embedder, QUERY.split(), "play", CORPUS, k=3, any_word=True, skip_query=False)
    assert len(found) == 3 and (found[0].sentence, found[0].position) == (3, 5)
    assert word_positions(["A", "Play", "play"], "PLAY") == [1, 2]
    with pytest.raises(ValueError, match="not a token of the query"):
        contextual_neighbours(embedder, "no such word here", "play", CORPUS)
    with pytest.raises(ValueError, match="layers 0..2"):
        contextual_neighbours(embedder, QUERY, "play", CORPUS, layer=3)
    assert contextual_neighbours(embedder, QUERY, "theatre", CORPUS[:3]) == []


def test_cli_end_to_end(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(s) + "\n" for s in CORPUS), encoding="utf-8")
    assert main(["neighbours", QUERY, "--word", "play", "--corpus", str(corpus), "-k", "2", "--no-progress",
                 *MODEL_ARGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    score, line, sentence = lines[0].split("\t")
    assert float(score) < 0.9999 and line != "4" and "[[play]]" in sentence  # not the query's own line
    assert main(["neighbours", "nothing here", "--word", "play", "--corpus", str(corpus), *MODEL_ARGS]) == 2
    assert "not a token of the sentence" in capsys.readouterr().err
    assert main(["neighbours", "a theatre", "--word", "theatre", "--corpus", str(corpus), "--no-progress",
                 *MODEL_ARGS]) == 0
    assert main(["neighbours", "a zebra", "--word", "zebra", "--corpus", str(corpus), "--no-progress",
                 *MODEL_ARGS]) == 1
    assert "no use of 'zebra'" in capsys.readouterr().err
