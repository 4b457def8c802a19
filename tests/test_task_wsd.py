"""Word-sense disambiguation by nearest centroid: the readers, the WordNet sense keys, the
centroid and nearest-sense logic, and the scorer against hand-computed cases."""

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import load_experiment, load_fixture_model

from elmo.inference.embed import Embedder
from elmo.tasks.readers import DatasetError

# experiments/probes_lib/wsd.py: the method serves experiments/probes.py only.
wsd = load_experiment("probes_lib/wsd")
WordNetSenses = wsd.WordNetSenses
WsdSentence = wsd.WsdSentence
WsdToken = wsd.WsdToken
annotated_token_vectors = wsd.annotated_token_vectors
disambiguate = wsd.disambiguate
first_sense_predictions = wsd.first_sense_predictions
nearest_sense = wsd.nearest_sense
read_raganato = wsd.read_raganato
read_semcor = wsd.read_semcor
sense_centroids = wsd.sense_centroids
token_vectors = wsd.token_vectors
wsd_scores = wsd.wsd_scores


# ------------------------------------------------------------------------------ WordNet
def write_wordnet(folder: Path, synsets: dict[str, list[dict]]) -> None:
    """A miniature WordNet dict folder. ``synsets[pos]``: dicts with ``name`` (a label for
    pointers), ``lexfile``, ``ss_type``, ``words`` [(word, lex_id)], ``pointers`` [(symbol,
    target name, pos)]. Offsets are the synsets' byte positions, as in WordNet's data files."""
    header = "  1 This is a license header line.\n"
    offsets: dict[str, int] = {}
    lines: dict[str, list[str]] = {}

    def line(s: dict, resolve) -> str:
        words = " ".join(f"{w} {i:x}" for w, i in s["words"])
        pointers = " ".join(f"{sym} {resolve(target):08d} {pos} 0000" for sym, target, pos in s.get("pointers", []))
        return (f"{resolve(s['name']):08d} {s['lexfile']:02d} {s['ss_type']} {len(s['words']):02x} {words} "
                f"{len(s.get('pointers', [])):03d} {pointers} | a gloss\n")

    for _ in range(2):  # the first pass measures (every offset is 8 digits), the second writes
        for pos, items in synsets.items():
            position = len(header)
            lines[pos] = []
            for s in items:
                offsets.setdefault(s["name"], position)
                offsets[s["name"]] = position
                text = line(s, lambda name: offsets.get(name, 0))
                lines[pos].append(text)
                position += len(text.encode("utf-8"))
    files = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
    for pos, name in files.items():
        (folder / f"data.{name}").write_text(header + "".join(lines.get(pos, [])), encoding="utf-8")
        index: dict[str, list[int]] = {}
        for s in synsets.get(pos, []):
            for word, _ in s["words"]:
                lemma = re.sub(r"\(\w+\)$", "", word).lower()  # index files carry no (p)/(a)/(ip) marker
                index.setdefault(lemma, []).append(offsets[s["name"]])
        (folder / f"index.{name}").write_text(header + "".join(
            f"{lemma} {pos} {len(o)} 0 {len(o)} 0 {' '.join(f'{x:08d}' for x in o)}\n"
            for lemma, o in sorted(index.items())), encoding="utf-8")


@pytest.fixture
def wordnet(tmp_path):
    write_wordnet(tmp_path, {
        "n": [dict(name="slope", lexfile=17, ss_type="n", words=[("bank", 1), ("side", 0)]),
              dict(name="institution", lexfile=14, ss_type="n", words=[("depository_financial_institution", 0),
                                                                       ("bank", 0)])],
        "a": [dict(name="good", lexfile=0, ss_type="a", words=[("good", 0)]),
              dict(name="fine", lexfile=0, ss_type="s", words=[("fine", 0), ("O.K.(p)", 2)],
                   pointers=[("&", "good", "a")])],
        "v": [dict(name="play", lexfile=41, ss_type="v", words=[("play", 12)])],
    })
    return WordNetSenses(tmp_path)


def test_sense_keys_in_wordnet_order(wordnet):
    assert wordnet.senses("bank", "n") == ["bank%1:17:01::", "bank%1:14:00::"]
    assert wordnet.senses("Bank", "n") == wordnet.senses("bank", "n")
    assert wordnet.first_sense("depository financial institution", "n") == "depository_financial_institution%1:14:00::"
    assert wordnet.senses("fine", "a") == ["fine%5:00:00:good:00"]  # satellite: the head's word and lex id
    assert wordnet.senses("o.k.", "a") == ["o.k.%5:00:02:good:00"]  # the (p) marker is not part of the word
    assert wordnet.senses("play", "v") == ["play%2:41:12::"]
    assert wordnet.senses("bank", "v") == [] and wordnet.first_sense("zebra", "n") is None
    with pytest.raises(ValueError, match="pos"):
        wordnet.senses("bank", "x")


def test_a_folder_that_is_not_wordnet_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        WordNetSenses(tmp_path)


@pytest.mark.skipif(not Path("/usr/share/wordnet/index.noun").is_file(), reason="needs Debian's wordnet-base")
def test_real_wordnet_keys():
    senses = WordNetSenses()
    assert senses.senses("art", "n")[:3] == ["art%1:06:00::", "art%1:04:00::", "art%1:09:00::"]
    assert "peculiar%5:00:00:specific:00" in senses.senses("peculiar", "a")
    assert senses.first_sense("belong_to", "v") == "belong_to%2:42:00::"


# ------------------------------------------------------------------------------ readers
SEMCOR = "\n".join([
    "br-a01\t1\tThe\tDT\t_\t-\t-",
    "br-a01\t1\tFulton_County\tNNP\tgroup\tgroup%1:03:00::\t1",
    "br-a01\t1\tsaid\tVB\tsay\tsay%2:32:00::\t1",
    "",
    "br-a01\t2\tyear\tNN\tyear\tyear%1:28:02::;year%1:28:01::\t2;1",
    "",
])


def test_read_semcor(tmp_path):
    path = tmp_path / "semcor.tsv"
    path.write_text(SEMCOR, encoding="utf-8")
    first, second = read_semcor(path)
    assert first.id == "br-a01.s1" and [t.text for t in first.tokens] == ["The", "Fulton_County", "said"]
    assert first.tokens[0] == WsdToken("The", None, None, ())
    assert first.tokens[1].pos == "n" and first.tokens[1].keys == ("group%1:03:00::",)
    assert first.words_and_spans() == (["The", "Fulton", "County", "said"], [(0, 1), (1, 3), (3, 4)])
    assert second.tokens[0].keys == ("year%1:28:02::", "year%1:28:01::")
    path.write_text("br-a01\t1\tThe\tDT\t_\t-\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r":1: 6 tab-separated columns, expected 7"):
        read_semcor(path)
    path.write_text("br-a01\t1\tsaid\tVB\tsay\tsay-2-32\t1\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="not a WordNet sense key"):
        read_semcor(path)


XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="test">
<text id="d000">
<sentence id="d000.s000">
<wf lemma="the" pos="DET">The</wf>
<instance id="d000.s000.t000" lemma="bank" pos="NOUN">bank</instance>
<instance id="d000.s000.t001" lemma="belong_to" pos="VERB">belongs to</instance>
</sentence>
</text>
</corpus>
"""


def test_read_raganato_and_its_errors(tmp_path):
    data, keys = tmp_path / "x.data.xml", tmp_path / "x.gold.key.txt"
    data.write_text(XML, encoding="utf-8")
    keys.write_text("d000.s000.t000 bank%1:14:00::\nd000.s000.t001 belong_to%2:42:00:: belong_to%2:40:00::\n")
    sentence, = read_raganato(data)
    assert [t.instance for t in sentence.tokens] == [None, "d000.s000.t000", "d000.s000.t001"]
    assert sentence.tokens[2].keys == ("belong_to%2:42:00::", "belong_to%2:40:00::")
    assert sentence.tokens[2].words == ["belongs", "to"] and sentence.tokens[2].pos == "v"
    keys.write_text("d000.s000.t000 bank%1:14:00::\n")
    with pytest.raises(DatasetError, match="no gold key for instance d000.s000.t001"):
        read_raganato(data)
    keys.write_text("d000.s000.t000 a%1:1:1::\nd000.s000.t001 b%2:1:1::\nd000.s000.t009 c%1:1:1::\n")
    with pytest.raises(DatasetError, match="1 key.*not in"):
        read_raganato(data)
    keys.write_text("d000.s000.t000\n")
    with pytest.raises(DatasetError, match=":1: expected an instance id and at least one sense key"):
        read_raganato(data)
    data.write_text(XML.replace("</sentence>", ""), encoding="utf-8")
    keys.write_text("d000.s000.t000 a%1:1:1::\nd000.s000.t001 b%2:1:1::\n")
    with pytest.raises(DatasetError, match="not well-formed XML"):
        read_raganato(data)


# ------------------------------------------------------------------------------ method
def test_token_vectors_average_the_words_of_a_token():
    layers = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)  # (L+1, words, dim)
    vectors = token_vectors(layers, [(0, 1), (1, 3), (3, 4)])
    assert vectors.shape == (3, 2, 3)
    np.testing.assert_allclose(vectors[1], (layers[:, 1] + layers[:, 2]) / 2)


def test_centroids_and_nearest_sense():
    keys, centroids = sense_centroids([
        (("a",), np.array([[1.0, 0.0], [0.0, 1.0]])),
        (("a", "b"), np.array([[3.0, 0.0], [0.0, 3.0]])),   # counts for both of its gold keys
        (("c",), np.array([[0.0, 1.0], [1.0, 0.0]])),
    ])
    assert keys == ["a", "b", "c"] and centroids.shape == (3, 2, 2)
    np.testing.assert_allclose(centroids[0], [[2.0, 0.0], [0.0, 2.0]])
    index = {k: i for i, k in enumerate(keys)}
    layer0 = centroids[:, 0]
    assert nearest_sense(np.array([1.0, 0.1]), ["c", "a"], index, layer0) == "a"
    assert nearest_sense(np.array([0.1, 1.0]), ["c", "a"], index, layer0) == "c"
    assert nearest_sense(np.array([0.1, 1.0]), ["zzz", "a"], index, layer0) == "a"  # only a has a centroid
    assert nearest_sense(np.array([1.0, 0.0]), ["zzz"], index, layer0) is None
    # a and b have the same direction at layer 0: the earlier candidate wins
    assert nearest_sense(np.array([1.0, 0.0]), ["b", "a"], index, layer0) == "b"


def test_disambiguate_falls_back_to_the_first_sense(wordnet):
    keys, centroids = sense_centroids([(("bank%1:14:00::",), np.array([[1.0, 0.0]]))])
    instances = [(WsdToken("bank", "bank", "n", ("bank%1:14:00::",), "i1"), np.array([[0.9, 0.1]])),
                 (WsdToken("plays", "play", "v", ("play%2:41:12::",), "i2"), np.array([[0.0, 1.0]])),
                 (WsdToken("zebra", "zebra", "n", ("zebra%1:05:00::",), "i3"), np.array([[0.0, 1.0]]))]
    predicted, fallbacks = disambiguate(instances, wordnet, keys, centroids, layer=0)
    # bank: SemCor knows one of its senses, so that one, although it is WordNet's second sense;
    # play: no sense in SemCor, so WordNet's first; zebra: not in WordNet, so no answer
    assert predicted == {"i1": "bank%1:14:00::", "i2": "play%2:41:12::"} and fallbacks == 2
    assert first_sense_predictions([t for t, _ in instances], wordnet) == {"i1": "bank%1:17:01::",
                                                                          "i2": "play%2:41:12::"}


def test_annotated_token_vectors_follow_the_embedder():
    embedder = Embedder(load_fixture_model("allennlp"))
    sentences = [WsdSentence("s1", [WsdToken("The"), WsdToken("Fulton_County", "group", "n", ("group%1:03:00::",)),
                                    WsdToken("said", "say", "v", (), "i9")]),
                 WsdSentence("s2", [WsdToken("year", "year", "n", ("year%1:28:02::",))])]
    found = list(annotated_token_vectors(embedder, sentences, chunk=1))
    assert [t.text for t, _ in found] == ["Fulton_County", "said", "year"]
    whole = embedder.embed_sentences([["The", "Fulton", "County", "said"]], layers="all")[0]
    np.testing.assert_allclose(found[0][1], whole[:, 1:3].mean(axis=1), rtol=0, atol=1e-6)
    np.testing.assert_allclose(found[1][1], whole[:, 3], rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------ scorer
def test_scores_as_the_framework_scorer_computes_them():
    gold = {"i1": ("a",), "i2": ("b", "c"), "i3": ("d",), "i4": ("e",)}
    predicted = {
        "i1": "a",            # right
        "i2": ["c", "x"],     # two answers, one right: half a point
        "i3": "z",            # wrong
        # i4 unanswered: lowers recall only
        "i9": "a",            # not a gold instance: ignored
    }
    scores = wsd_scores(gold, predicted)
    assert scores["precision"] == pytest.approx(1.5 / 3)
    assert scores["recall"] == pytest.approx(1.5 / 4)
    assert scores["f1"] == pytest.approx(2 * 0.5 * 0.375 / 0.875)
    assert scores["answered"] == 3 and scores["instances"] == 4
    assert wsd_scores(gold, {})["f1"] == 0.0
