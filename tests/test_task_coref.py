"""Coreference: the CoNLL-2012 reader (nested, multi-token and singleton mentions, malformed
input) and the CoNLL metrics against hand-computed cases."""

import json
import math
from pathlib import Path

import pytest
import torch

from elmo.tasks.catalog import read_dataset
from elmo.tasks.config import TaskConfigError, load_task_config
from elmo.tasks.coref import (
    CorefBatch,
    CorefDocument,
    CorefDocumentBatch,
    CorefModel,
    GapExample,
    antecedent_loss,
    clusters_from_antecedents,
    coref_scores,
    corpus_clusters,
    distance_bucket,
    enumerate_spans,
    gap_scores,
    litbank_split,
    split_document,
)
from elmo.tasks.features import TokenFeatures, WordVocab, char_ids, word_ids
from elmo.tasks.integration import ElmoOptions, TaskElmo
from elmo.tasks.readers import DatasetError
from elmo.tasks.training import train_task

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
    first, second = read_dataset("conll2012-coref", path)
    assert first.name == "doc/part-0" and first.sentences == [["Mr.", "Smith", "met", "his", "wife", "."],
                                                              ["She", "smiled", "at", "the", "man", "."]]
    # cluster 0: "Mr. Smith", "his" (nested inside "his wife"); 1: "his wife", "She"; 2: "the man"; 3: "man"
    assert first.clusters == [[(0, 1), (3, 3)], [(3, 4), (6, 6)], [(9, 10)], [(10, 10)]]
    assert second.name == "other/part-0" and second.clusters == [[(0, 0)]]


def test_reader_same_cluster_nested_in_itself(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(doc([("the", "(4"), ("king", "(4)"), ("'s", "_"), ("men", "4)")]), encoding="utf-8")
    assert read_dataset("conll2012-coref", path)[0].clusters == [[(0, 3), (1, 1)]]


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
        read_dataset("conll2012-coref", path)
    assert error.value.line == line and message in str(error.value)


@pytest.mark.skipif(not LITBANK.is_dir(), reason="needs ../shared/data/coref/litbank")
def test_litbank_counts():
    documents = [d for f in sorted(LITBANK.glob("*.conll")) for d in read_dataset("conll2012-coref", f)]
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


# ------------------------------------------------------------------------------ LitBank by split
def test_litbank_reads_one_split_of_a_folder(tmp_path):
    for i in range(10):
        (tmp_path / f"{i:02d}_book.conll").write_text(doc([(f"w{i}", "(0)")], name=f"{i:02d}_book"), encoding="utf-8")
    (tmp_path / "README.md").write_text("not a document\n", encoding="utf-8")
    assert [d.name for d in read_dataset("litbank", tmp_path, "dev")] == ["08_book/part-0"]
    assert len(read_dataset("litbank", tmp_path, "train")) == 8
    with pytest.raises(ValueError, match="split must be"):
        read_dataset("litbank", tmp_path, "validation")
    with pytest.raises(ValueError, match="conll2012-coref"):
        read_dataset("litbank", tmp_path / "00_book.conll", "train")


# ------------------------------------------------------------------------------ model pieces
def test_split_document_keeps_mentions_inside_each_piece():
    document = CorefDocument("d", [["A", "b"], ["c"], ["D", "e"]], [[(0, 0), (3, 3)], [(1, 2)], [(4, 4)]])
    first, second = split_document(document, 2)
    assert first.sentences == [["A", "b"], ["c"]] and second.sentences == [["D", "e"]]
    # (1, 2) crosses no piece boundary; (3, 3) becomes (0, 0) of the second piece
    assert first.clusters == [[(0, 0)], [(1, 2)]] and second.clusters == [[(0, 0)], [(1, 1)]]
    assert first.name == "d#0" and second.name == "d#1"
    assert split_document(document, 0) == [document] and split_document(document, 3) == [document]


def test_distance_buckets_follow_lee_et_al():
    distances = torch.tensor([0, 1, 4, 5, 7, 8, 15, 16, 63, 64, 1000])
    assert distance_bucket(distances).tolist() == [0, 1, 4, 5, 5, 6, 6, 7, 8, 9, 9]


def test_clusters_from_antecedents():
    spans = [(0, 0), (2, 3), (5, 5), (7, 7), (9, 9)]
    # 2 -> 0, 4 -> 2; 3 -> 1; nothing points at nothing else
    assert clusters_from_antecedents(spans, [-1, -1, 0, 1, 2]) == [[(0, 0), (5, 5), (9, 9)], [(2, 3), (7, 7)]]
    assert clusters_from_antecedents(spans, [-1] * 5) == []
    # singletons: only spans that are in no link and are marked
    assert clusters_from_antecedents(spans, [-1, -1, 0, -1, -1], [True, True, False, False, True]) == \
        [[(0, 0), (5, 5)], [(2, 3)], [(9, 9)]]


def test_antecedent_loss_by_hand():
    very_negative = torch.finfo(torch.float32).min
    scores = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, very_negative]])
    gold = torch.tensor([[False, False, True], [False, False, False]])
    # row 0: gold is the second candidate; row 1 has no gold antecedent, so the dummy is gold
    expected = (math.log(1 + math.e + math.e ** 2) - 2.0) + math.log(1 + math.e ** 3)
    assert antecedent_loss(scores, gold).item() == pytest.approx(expected, rel=1e-6)
    # two gold antecedents: the loss is on their summed probability
    both = torch.tensor([[False, True, True], [False, False, False]])
    expected = (math.log(1 + math.e + math.e ** 2) - math.log(math.e + math.e ** 2)) + math.log(1 + math.e ** 3)
    assert antecedent_loss(scores, both).item() == pytest.approx(expected, rel=1e-6)


def tiny_model(vocab_size=20, elmo=None, **kwargs):
    torch.manual_seed(0)
    features = TokenFeatures(torch.randn(vocab_size, 6), char_filters=4)
    options = dict(hidden=5, dropout=0.0, max_span_width=3, spans_per_word=0.5, max_antecedents=4, feature_dim=3,
                   ffnn_hidden=7)
    options.update(kwargs)
    return CorefModel(features, elmo or TaskElmo(ElmoOptions(enabled=False), 1, 1), **options).eval()


def tiny_document(sentences, clusters, elmo=None):
    vocab = WordVocab(sorted({w for s in sentences for w in s}))
    time = max(len(s) for s in sentences)
    mask = torch.zeros(len(sentences), time, dtype=torch.bool)
    for i, s in enumerate(sentences):
        mask[i, :len(s)] = True
    return CorefDocumentBatch(words=word_ids(sentences, vocab, time), chars=char_ids(sentences, time), mask=mask,
                              elmo=elmo, clusters=clusters)


HAND_MADE = [["John", "met", "Mary", "."], ["He", "liked", "her", "."]]
HAND_CLUSTERS = [[(0, 0), (4, 4)], [(2, 2), (6, 6)]]


def test_pruning_and_candidate_antecedents():
    model = tiny_model()
    out = model.score_document(tiny_document(HAND_MADE, HAND_CLUSTERS))
    assert out["spans"].tolist() == [list(s) for s in enumerate_spans([4, 4], 3)]
    k = 4  # floor(0.5 * 8 words)
    assert out["kept"].tolist() == sorted(torch.topk(out["mention_scores"], k).indices.tolist())
    assert out["antecedents"].shape == (k, 3)  # at most k - 1 candidates
    # nearest first; the first kept span has none, the second one
    assert out["valid"].tolist() == [[False] * 3, [True, False, False], [True, True, False], [True, True, True]]
    assert out["antecedents"][3].tolist() == [2, 1, 0]
    assert out["scores"].shape == (k, 4) and (out["scores"][:, 0] == 0).all()
    # a span's score with an antecedent includes both mention scores
    kept = out["kept"]
    pair_free = out["mention_scores"][kept[3]] + out["mention_scores"][kept[2]]
    assert out["scores"][3, 1].item() != pytest.approx(0.0) and torch.isfinite(pair_free)


def test_document_loss_is_the_marginal_likelihood_on_a_hand_made_document():
    model = tiny_model(spans_per_word=10.0)  # keep every span, so that every gold mention is a candidate
    document = tiny_document(HAND_MADE, HAND_CLUSTERS)
    out = model.score_document(document)
    spans = [tuple(s) for s in out["spans"][out["kept"]].tolist()]
    cluster_of = {m: c for c, cluster in enumerate(HAND_CLUSTERS) for m in cluster}
    expected = 0.0
    for i, span in enumerate(spans):
        row = out["scores"][i]
        gold = [1 + j for j, (a, ok) in enumerate(zip(out["antecedents"][i].tolist(), out["valid"][i].tolist()))
                if ok and span in cluster_of and cluster_of.get(spans[a]) == cluster_of[span]]
        gold = gold or [0]
        expected += (torch.logsumexp(row, 0) - torch.logsumexp(row[gold], 0)).item()
    assert model.document_loss(document).item() == pytest.approx(expected, rel=1e-5)
    # "He" (4, 4) may only link back to "John": with max_antecedents large enough it is a candidate
    he = spans.index((4, 4))
    assert spans.index((0, 0)) in out["antecedents"][he][out["valid"][he]].tolist() or model.max_antecedents < he


def test_mention_loss_adds_a_binary_cross_entropy_over_all_spans():
    document = tiny_document(HAND_MADE, HAND_CLUSTERS)
    plain, weighted = tiny_model(), tiny_model(mention_loss=2.0)
    out = plain.score_document(document)
    gold = torch.tensor([float(tuple(s) in {(0, 0), (4, 4), (2, 2), (6, 6)}) for s in out["spans"].tolist()])
    extra = torch.nn.functional.binary_cross_entropy_with_logits(out["mention_scores"], gold, reduction="sum")
    assert weighted.document_loss(document).item() == pytest.approx(plain.document_loss(document).item()
                                                                    + 2.0 * extra.item(), rel=1e-5)


def test_span_embedding_head_of_a_one_token_span_is_that_token():
    model = tiny_model()
    inputs, states = torch.randn(6, 8), torch.randn(6, 10)
    g = model.span_embeddings(inputs, states, torch.tensor([2, 1]), torch.tensor([2, 3]))
    head = g[0, 20:28]  # after the two boundary states (2 * 10)
    assert torch.allclose(head, inputs[2])
    # a wider span's head is a convex combination of its own tokens only
    weights = torch.linalg.lstsq(inputs[1:4].T, g[1, 20:28]).solution
    assert weights.sum().item() == pytest.approx(1.0, abs=1e-4) and (weights > -1e-4).all()
    assert torch.equal(g[1, 28:], model.width.weight[2])


def test_coref_model_overfits_a_tiny_document_with_and_without_elmo():
    for elmo in (None, TaskElmo(ElmoOptions(dropout=0.0), 3, 4)):
        model = tiny_model(elmo=elmo, spans_per_word=1.0, mention_loss=1.0).train()
        layers = torch.randn(2, 3, 4, 4) if elmo is not None else None
        document = tiny_document(HAND_MADE, HAND_CLUSTERS, layers)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
        first = model.loss(CorefBatch([document])).item()
        for _ in range(150):
            loss = model.loss(CorefBatch([document]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        assert loss.item() < 0.1 * first
        model.eval()
        assert model.predict(CorefBatch([document])) == [HAND_CLUSTERS]


# ------------------------------------------------------------------------------ GAP
GAP_HEADER = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL\n"


def gap_row(text, pronoun, a, b, a_coref="TRUE", b_coref="FALSE", ident="t-1"):
    return "\t".join([ident, text, pronoun, str(text.index(pronoun)), a, str(text.index(a)), a_coref, b,
                      str(text.index(b)), b_coref, "http://x"]) + "\n"


def test_gap_reader_maps_offsets_to_tokens(tmp_path):
    text = "Zoë  Telford met Mr. Brown in Köln. Later she thanked Brown's wife."
    path = tmp_path / "gap.tsv"
    path.write_text(GAP_HEADER + gap_row(text, "she", "Zoë  Telford", "Brown's"), encoding="utf-8")
    (example,) = read_dataset("gap", path)
    assert example.sentences == [["Zoë", "Telford", "met", "Mr.", "Brown", "in", "Köln", "."],
                                 ["Later", "she", "thanked", "Brown", "'s", "wife", "."]]
    tokens = example.tokens
    assert tokens[example.pronoun[0]] == "she" and example.pronoun[0] == example.pronoun[1]
    assert tokens[example.a[0]:example.a[1] + 1] == ["Zoë", "Telford"]
    assert tokens[example.b[0]:example.b[1] + 1] == ["Brown", "'s"]
    assert example.a_coref and not example.b_coref and example.gender == "F" and example.clusters == []


@pytest.mark.parametrize("row, message", [
    (gap_row("He saw Al and Bo.", "He", "Al", "Bo").replace("\t0\tAl", "\t1\tAl"), "Pronoun-offset: 1 does not point"),
    (gap_row("He saw Al and Bo.", "He", "Al", "Bo", a_coref="yes"), "A-coref: expected TRUE or FALSE"),
    (gap_row("He saw Al and Bo.", "He", "Al", "Bo").replace("\t7\t", "\tseven\t"), "A-offset: 'seven' is not a number"),
    (gap_row("It saw Al and Bo.", "It", "Al", "Bo"), "not a gendered"),
    ("t-1\tjust text\n", "2 columns, expected 11"),
])
def test_gap_reader_errors_name_line_and_column(tmp_path, row, message):
    path = tmp_path / "gap.tsv"
    path.write_text(GAP_HEADER + row, encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        read_dataset("gap", path)
    assert error.value.line == 2 and message in str(error.value)
    path.write_text("ID\tText\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="header lacks column"):
        read_dataset("gap", path)


def test_gap_scores_by_hand():
    def example(gender, a_coref, b_coref):
        return GapExample("x", [["p", "a", "b"]], [], pronoun=(0, 0), a=(1, 1), b=(2, 2), a_coref=a_coref,
                          b_coref=b_coref, gender=gender)

    examples = [example("M", True, False), example("M", False, True), example("F", True, False),
                example("F", False, False)]
    predicted = [[[(0, 0), (1, 1)]],            # M: A right
                 [[(0, 0), (1, 1)]],            # M: A wrong (fp), B missed (fn)
                 [[(1, 1)], [(0, 0), (2, 2)]],  # F: A missed, B wrong: the pronoun's own cluster counts
                 [[(1, 2), (2, 2)]]]            # F: the pronoun in no cluster, so nothing is said
    scores = gap_scores(examples, predicted)
    # M: tp 1, said 2, gold 2 -> P = R = F1 = 1/2; F: tp 0 -> F1 0; overall: tp 1, said 3, gold 3
    assert scores["M"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    assert scores["F"]["f1"] == 0.0 and scores["bias"] == 0.0
    assert scores["overall"]["precision"] == pytest.approx(1 / 3) and scores["overall"]["recall"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------ training and evaluation
NAMES = ["Ann", "Bob", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ida", "Jon", "Kim", "Lou"]


def write_toy_documents(path, names, start=0):
    """Documents "<Name> opened the door . He smiled ." with the name and "He" one cluster."""
    text = []
    for i, name in enumerate(names):
        text.append(doc([(name, "(0)"), ("opened", "_"), ("the", "_"), ("door", "_"), (".", "_"), None,
                         ("He", "(0)"), ("smiled", "_"), (".", "_")], name=f"d{start + i}"))
    path.write_text("".join(text), encoding="utf-8")


@pytest.fixture
def coref_config(tmp_path, bilm_dir):
    bilm = bilm_dir
    write_toy_documents(tmp_path / "train.conll", NAMES[:8] * 3)
    write_toy_documents(tmp_path / "dev.conll", NAMES[8:], start=100)
    path = tmp_path / "coref.toml"
    path.write_text(f"""
task = "coref"
metric = "coref_f1"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "conll2012-coref"
train = "{tmp_path / 'train.conll'}"
dev = "{tmp_path / 'dev.conll'}"
test = "{tmp_path / 'dev.conll'}"
[model]
chunk_sentences = 1
hidden = 8
char_filters = 8
dropout = 0.0
max_span_width = 3
max_antecedents = 5
feature_dim = 4
ffnn_hidden = 16
mention_loss = 1.0
[elmo]
placement = "both"
dropout = 0.0
[bilm]
model = "{bilm}"
[train]
epochs = 2
batch_size = 4
learning_rate = 0.01
""", encoding="utf-8")
    return path


def test_coref_trains_with_elmo_and_evaluates_on_conll_and_gap_from_the_cli(coref_config, tmp_path, capsys):
    from elmo.cli.main import main

    assert main(["task", "train", str(coref_config), "--no-progress"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    # chunk_sentences = 1 cuts each training document in two pieces
    assert metrics["train_examples"] == 48
    assert metrics["test"] == pytest.approx(metrics["dev"])
    assert set(metrics["test_details"]) == {"muc", "b_cubed", "ceaf_e", "conll_f1"}
    assert set(metrics["layer_weights"]) == {"input", "output"}
    capsys.readouterr()
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev.conll")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("coref_f1 ") and "b_cubed" in out and "ceaf_e" in out
    gap = tmp_path / "gap.tsv"
    gap.write_text(GAP_HEADER + gap_row("Ann opened the door. Bob smiled at her.", "her", "Ann", "Bob")
                   + gap_row("Cal opened the door. Dee smiled at him.", "him", "Cal", "Dee", ident="t-2"),
                   encoding="utf-8")
    assert main(["task", "evaluate", str(run), "--data", str(gap), "--kind", "gap", "--json",
                 str(tmp_path / "gap.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gap_f1 ") and "feminine" in out and "bias" in out
    result = json.loads((tmp_path / "gap.json").read_text())
    assert result["examples"] == 2 and set(result["details"]) == {"overall", "M", "F", "bias"}
    # a tagger's data cannot be scored by a coreference model
    conll = tmp_path / "ner.txt"
    conll.write_text("Ann B-PER\n", encoding="utf-8")
    assert main(["task", "evaluate", str(run), "--data", str(conll), "--kind", "conll2003"]) != 0
    assert "cannot be scored by the coref model" in capsys.readouterr().err


def test_coref_baseline_learns_the_toy_task(coref_config):
    config = load_task_config(coref_config, {"elmo": {"enabled": False}, "train": {"epochs": 8}})
    metrics = train_task(config, progress=False)
    assert metrics["layer_weights"] == {}
    assert metrics["dev"] > 0.9


def test_coref_task_and_metric_go_together(coref_config):
    with pytest.raises(TaskConfigError, match="coref_f1"):
        load_task_config(coref_config, {"metric": "span_f1"})
    with pytest.raises(TaskConfigError, match="chunk_sentences"):
        load_task_config(coref_config, {"model": {"chunk_sentences": -1}})


@pytest.mark.skipif(not LITBANK.is_dir(), reason="needs ../shared/data/coref/litbank")
def test_the_shipped_config_reads_the_documented_split():
    config = load_task_config(Path(__file__).parents[1] / "configs" / "tasks" / "coref-litbank.toml")
    text = (Path(__file__).parents[1] / "configs" / "tasks" / "coref-litbank.toml").read_text()
    names = sorted(p.name for p in LITBANK.glob("*.conll"))
    for split in ("dev", "test"):
        for name in litbank_split(names)[split]:
            assert name.split("_brat")[0].split("_")[0] + "_" in text
    assert config.data.kind == "litbank" and config.data.train.split == "train"


def test_reader_takes_gzip(tmp_path):
    import gzip

    path = tmp_path / "a.conll.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(SAMPLE)
    assert [d.clusters for d in read_dataset("conll2012-coref", path)] == \
        [d.clusters for d in read_dataset("conll2012-coref", _plain(tmp_path))]


def _plain(tmp_path):
    path = tmp_path / "plain.conll"
    path.write_text(SAMPLE, encoding="utf-8")
    return path


def test_padding_of_a_documents_sentences_changes_nothing():
    model = tiny_model(elmo=TaskElmo(ElmoOptions(dropout=0.0), 3, 4))
    sentences = [["John", "met", "Mary", "."], ["He", "left"]]
    layers = torch.randn(2, 3, 4, 4)
    document = tiny_document(sentences, [[(0, 0), (4, 4)]], layers)
    extra = 3
    padded = CorefDocumentBatch(words=torch.nn.functional.pad(document.words, (0, extra)),
                                chars=torch.nn.functional.pad(document.chars, (0, 0, 0, extra)),
                                mask=torch.nn.functional.pad(document.mask, (0, extra)),
                                elmo=torch.nn.functional.pad(layers, (0, 0, 0, extra), value=7.0),  # never read
                                clusters=document.clusters)
    a, b = model.score_document(document), model.score_document(padded)
    assert torch.equal(a["spans"], b["spans"]) and torch.equal(a["kept"], b["kept"])
    assert torch.allclose(a["scores"], b["scores"], atol=1e-5)
    assert model.document_loss(document).item() == pytest.approx(model.document_loss(padded).item(), rel=1e-5)
