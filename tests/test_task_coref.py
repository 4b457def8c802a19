"""Coreference: the CoNLL-2012 reader (nested, multi-token and singleton mentions, malformed
input) and the CoNLL metrics against hand-computed cases."""

from pathlib import Path

import pytest

from elmo.tasks.coref import coref_scores, corpus_clusters, enumerate_spans, litbank_split
from elmo.tasks.readers import DatasetError, read_dataset

LITBANK = Path(__file__).resolve().parents[2] / "shared" / "data" / "coref" / "litbank" / "conll"


def doc(rows, name="doc"):
    lines = [f"#begin document ({name}); part 0"]
    for row in rows:
        lines.append("" if row is None else "\t".join([name, "0", "0", row[0], "_", "_", "_", "_", "_", "_", "_", "_",
                                                       row[1]]))
    return "\n".join(lines + ["#end document"]) + "\n"


SAMPLE = doc([("Mr.", "(0"), ("Smith", "0)"), ("met", "_"), ("his", "(1|(0)"), ("wife", "1)"), (".", "_"), None,
              ("She", "(1)"), ("smiled", "_"), ("at", "_"), ("the", "(2"), ("man", "(3)|2)"), (".", "_")]) + \
    doc([("He", "(0)"), ("left", "_")], name="other")


def test_reader_nested_multi_token_and_singleton_mentions(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(SAMPLE, encoding="utf-8")
    first, second = read_dataset("litbank", path)
    assert first.name == "doc/part-0" and first.sentences == [["Mr.", "Smith", "met", "his", "wife", "."],
                                                              ["She", "smiled", "at", "the", "man", "."]]
    # cluster 0: "Mr. Smith", "his" (nested inside "his wife"); 1: "his wife", "She"; 2: "the man"; 3: "man"
    assert first.clusters == [[(0, 1), (3, 3)], [(3, 4), (6, 6)], [(9, 10)], [(10, 10)]]
    assert second.name == "other/part-0" and second.clusters == [[(0, 0)]]


def test_reader_same_cluster_nested_in_itself(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(doc([("the", "(4"), ("king", "(4)"), ("'s", "_"), ("men", "4)")]), encoding="utf-8")
    assert read_dataset("litbank", path)[0].clusters == [[(0, 3), (1, 1)]]


@pytest.mark.parametrize("text, line, message", [
    (doc([("a", "(0"), ("b", "_")]), 2, "never closed"),
    (doc([("a", "0)")]), 2, "never opened"),
    (doc([("a", "(x)")]), 2, "'(x)' is not (N), (N or N)"),
    (doc([("a", "(0)|")]), 2, "'' is not"),
    ("doc 0 0 a _ (0)\n", 1, "outside any #begin document"),
    ("#begin document (d); part 0\ndoc\t0\t0\ta\t(0)\n", 2, "d/part-0 has no #end document"),
    ("#end document\n", 1, "without #begin document"),
    ("#begin document (d); part 0\n#begin document (e); part 0\n", 2, "inside d/part-0"),
    ("#begin document (d); part 0\nx y\n#end document\n", 2, "2 columns"),
    ("\n", 1, "no documents"),
])
def test_malformed_input_names_the_line(tmp_path, text, line, message):
    path = tmp_path / "bad.conll"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        read_dataset("litbank", path)
    assert error.value.line == line and message in str(error.value)


@pytest.mark.skipif(not LITBANK.is_dir(), reason="needs ../shared/data/coref/litbank")
def test_litbank_counts():
    documents = [d for f in sorted(LITBANK.glob("*.conll")) for d in read_dataset("litbank", f)]
    assert len(documents) == 100
    assert sum(len(d.tokens) for d in documents) == 210532
    assert sum(len(c) for d in documents for c in d.clusters) == 29103


def test_metrics_against_hand_computed_cases():
    gold = [{1, 2, 3}, {4, 5}, {6}]
    predicted = [{1, 2}, {3, 4, 5}, {6}]
    scores = coref_scores(gold, predicted)
    # MUC: recall (3-2 + 2-1) / (2 + 1 + 0) = 2/3; precision (2-1 + 3-2) / (1 + 2 + 0) = 2/3
    assert scores["muc"]["recall"] == pytest.approx(2 / 3) and scores["muc"]["precision"] == pytest.approx(2 / 3)
    # B-cubed recall, per mention: 2/3, 2/3, 1/3, 1, 1, 1 -> 14/18; precision: 1, 1, 1/3, 2/3, 2/3, 1 -> 14/18
    assert scores["b_cubed"]["recall"] == pytest.approx(14 / 18)
    assert scores["b_cubed"]["precision"] == pytest.approx(14 / 18)
    # CEAF-e: the best alignment pairs {1,2,3}-{1,2} (2*2/5), {4,5}-{3,4,5} (2*2/5), {6}-{6} (1): 2.6 over 3
    assert scores["ceaf_e"]["recall"] == pytest.approx(2.6 / 3) and scores["ceaf_e"]["precision"] == pytest.approx(2.6 / 3)
    assert scores["conll_f1"] == pytest.approx((2 / 3 + 14 / 18 + 2.6 / 3) / 3)


def test_metrics_with_singletons_and_extremes():
    # Only singletons, all right: MUC has no links to score (0), B-cubed and CEAF-e are perfect.
    singletons = coref_scores([{1}, {2}], [{1}, {2}])
    assert singletons["muc"]["f1"] == 0.0 and singletons["b_cubed"]["f1"] == 1.0 and singletons["ceaf_e"]["f1"] == 1.0
    # Everything merged into one cluster: MUC recall 1, precision 1 of 3 links; B-cubed precision
    # per mention 2/4, 2/4, 1/4, 1/4.
    merged = coref_scores([{1, 2}, {3}, {4}], [{1, 2, 3, 4}])
    assert merged["muc"]["recall"] == 1.0 and merged["muc"]["precision"] == pytest.approx(1 / 3)
    assert merged["b_cubed"]["recall"] == 1.0
    assert merged["b_cubed"]["precision"] == pytest.approx((2 / 4 + 2 / 4 + 1 / 4 + 1 / 4) / 4)
    assert coref_scores([], [])["conll_f1"] == 0.0
    assert coref_scores([{1, 2}], [])["muc"]["f1"] == 0.0
    with pytest.raises(ValueError, match="share mention"):
        coref_scores([{1, 2}, {2, 3}], [{1}])


def test_corpus_clusters_keep_documents_apart():
    clusters = corpus_clusters([[[(0, 1), (3, 3)]], [[(0, 1)]]])
    assert clusters == [{(0, (0, 1)), (0, (3, 3))}, {(1, (0, 1))}]


def test_litbank_split_is_fixed_80_10_10_by_name():
    names = [f"{i:03d}_book.conll" for i in range(100)]
    split = litbank_split(list(reversed(names)))
    assert (len(split["train"]), len(split["dev"]), len(split["test"])) == (80, 10, 10)
    assert split["train"][0] == "000_book.conll" and split["dev"][0] == "080_book.conll"
    assert split["test"][-1] == "099_book.conll"
    assert split == litbank_split(names)  # order of the input does not matter


def test_spans_stay_inside_sentences_and_width():
    assert enumerate_spans([2, 3], max_width=2) == [(0, 0), (0, 1), (1, 1), (2, 2), (2, 3), (3, 3), (3, 4), (4, 4)]
    assert len(enumerate_spans([10], max_width=10)) == 55
    assert enumerate_spans([0, 1], max_width=3) == [(0, 0)]
    with pytest.raises(ValueError, match="max_width"):
        enumerate_spans([3], max_width=0)
