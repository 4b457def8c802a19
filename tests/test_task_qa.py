"""Reading comprehension: the SQuAD reader (character offsets through unicode and whitespace,
answer mapping, error messages), span decoding, the official metric against hand-computed cases,
and BiDAF with and without ELMo on tiny data."""

import gzip
import itertools
import json
from pathlib import Path

import pytest
import torch

from elmo.cli.main import main
from elmo.tasks.catalog import read_dataset
from elmo.tasks.config import TaskConfigError, load_task_config
from elmo.tasks.qa import (
    answer_mapping_counts,
    best_spans,
    exact_match,
    normalize_answer,
    squad_scores,
    token_f1,
    tokenize_squad,
)
from elmo.tasks.readers import DatasetError
from elmo.tasks.training import train_task


def squad_file(path, paragraphs, gz=False):
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}
    text = json.dumps(data, ensure_ascii=False)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def qa(ident, question, *answers):
    return {"id": ident, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}


# ------------------------------------------------------------------------------ reader
def test_offsets_survive_unicode_and_whitespace(tmp_path):
    context = "Zoë  moved to\u00a0Köln–Bonn in the 1990s.\n\nShe said “hello” at 45°. Mr. Smith's dog didn't."
    start = context.index("Köln")
    path = squad_file(tmp_path / "s.json.gz", [{"context": context, "qas": [
        qa("q1", "Where did Zoë move?", ("Köln", start)),
        qa("q2", "What did she say?", ("hello", context.index("hello"))),
        qa("q3", "How many degrees?", ("45", context.index("45")))]}], gz=True)
    q1, q2, q3 = read_dataset("squad", path)
    c = q1.context
    assert q2.context is c  # tokenized once per paragraph
    assert all(c.text[a:b] == t for t, (a, b) in zip(c.tokens, c.offsets))
    assert "Köln" in c.tokens and "–" in c.tokens and "Bonn" in c.tokens and "45" in c.tokens
    assert c.tokens[c.tokens.index("Smith") + 1] == "'s" and "n't" in c.tokens
    for q in (q1, q2, q3):
        assert c.answer_text(*q.span) == q.answers[0][0] and q.mapping == "offset"
    # a span across the double newline maps back to the exact substring, whitespace and all
    end = c.tokens.index("She")
    assert c.answer_text(end - 1, end) == ".\n\nShe"
    assert q1.question == ["Where", "did", "Zoë", "move", "?"]


def test_answers_not_at_their_offset_are_searched_and_counted(tmp_path):
    context = "Red fish and blue fish swim past a green boat ."
    path = squad_file(tmp_path / "s.json", [{"context": context, "qas": [
        qa("ok", "q", ("blue", context.index("blue"))),
        qa("moved", "q", ("green", 0)),         # not at 0, once elsewhere
        qa("twice", "q", ("fish", 0)),          # not at 0, twice elsewhere: the first is taken
        qa("missing", "q", ("purple", 3)),      # nowhere
        qa("repeated", "q", ("fish", context.index("fish"))),  # at its offset but also elsewhere
        qa("none", "q")]}])
    questions = {q.id: q for q in read_dataset("squad", path)}
    assert questions["moved"].mapping == "searched" and questions["moved"].context.answer_text(*questions["moved"].span) == "green"
    assert questions["twice"].mapping == "ambiguous" and questions["twice"].span == (1, 1)
    assert questions["missing"].mapping == "unmapped" and questions["missing"].span is None
    assert questions["none"].span is None and questions["none"].answers == []
    counts = answer_mapping_counts(list(questions.values()))
    assert counts == {"offset": 2, "searched": 1, "ambiguous": 1, "unmapped": 2, "repeated": 1}


@pytest.mark.parametrize("content, message", [
    ('{"data": [', "1: not valid JSON"),
    ('{"version": "1.1"}', "(top level).data: missing"),
    ('{"data": [{"paragraphs": [{"qas": []}]}]}', "data[0].paragraphs[0].context: missing"),
    ('{"data": [{"paragraphs": [{"context": "a b", "qas": [{"id": "x", "question": "q", "answers": '
     '[{"text": "a", "answer_start": "0"}]}]}]}]}', "data[0].paragraphs[0].qas[0].answers[0].answer_start: expected int, got str"),
    ('{"data": [{"paragraphs": [{"context": "a b", "qas": [{"question": "q", "answers": []}]}]}]}',
     "data[0].paragraphs[0].qas[0].id: missing"),
    ('{"data": []}', "no questions"),
    ('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}", "not a SQuAD file: its JSON is nested too deeply"),  # issue 60
])
def test_reader_errors_name_the_field(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        read_dataset("squad", path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_tokenizer_splits_hyphens_and_keeps_offsets():
    tokens, offsets = tokenize_squad("The 1990-91 season ran Paris/Lyon.")
    assert tokens == ["The", "1990", "-", "91", "season", "ran", "Paris", "/", "Lyon", "."]
    assert [b - a for a, b in offsets] == [len(t) for t in tokens]


# ------------------------------------------------------------------------------ decoding and metric
def test_best_spans_match_brute_force():
    torch.manual_seed(0)
    start, end = torch.randn(4, 7), torch.randn(4, 7)
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2, [True] * 1 + [False] * 6, [True] * 7])
    for max_length in (1, 3, 30):
        got = best_spans(start, end, mask, max_length)
        for row in range(4):
            n = int(mask[row].sum())
            ls, le = torch.log_softmax(start[row, :n], 0), torch.log_softmax(end[row, :n], 0)
            best = max(((i, j) for i, j in itertools.product(range(n), repeat=2) if i <= j < i + max_length),
                       key=lambda s: (ls[s[0]] + le[s[1]]).item())
            assert got[row] == best


def test_official_metric_by_hand():
    assert normalize_answer("  The Cat, (sat)!  ") == "cat sat"
    assert normalize_answer("An apple a day") == "apple day"
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    # "big cat" against "cat": 1 common token, precision 1/2, recall 1 -> F1 2/3
    assert token_f1("the big cat", "a cat") == pytest.approx(2 / 3)
    assert token_f1("dog", "cat") == 0.0 and token_f1("", "cat") == 0.0
    # the maximum over the gold answers, then the mean over questions
    scores = squad_scores([["cat", "the big cat"], ["Denver Broncos"], ["x"]], ["big cat", "Broncos", "y"])
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)
    with pytest.raises(ValueError, match="2 questions but 1"):
        squad_scores([["a"], ["b"]], ["a"])


# ------------------------------------------------------------------------------ model
CITIES = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Peru", "Lima"), ("Chile", "Santiago"),
          ("Japan", "Tokyo"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Cuba", "Havana"), ("Iran", "Tehran"),
          ("Nepal", "Kathmandu"), ("Ghana", "Accra")]


def toy_paragraphs(pairs, prefix):
    paragraphs = []
    for i, (country, city) in enumerate(pairs):
        context = f"People say the weather is mild . The capital of {country} is {city} , a large city ."
        paragraphs.append({"context": context, "qas": [
            qa(f"{prefix}-{i}", f"What is the capital of {country} ?", (city, context.index(city)))]})
    return paragraphs


@pytest.fixture
def squad_config(tmp_path, bilm_dir):
    bilm = bilm_dir
    squad_file(tmp_path / "train.json", toy_paragraphs(CITIES[:8] * 4, "train"))
    squad_file(tmp_path / "dev.json", toy_paragraphs(CITIES[8:], "dev"))
    path = tmp_path / "squad.toml"
    path.write_text(f"""
task = "qa"
metric = "squad_f1"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "squad"
train = "{tmp_path / 'train.json'}"
test = "{tmp_path / 'dev.json'}"
dev_fraction = 0.25
train_examples = 30
[model]
hidden = 8
char_filters = 8
dropout = 0.0
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


def test_squad_trains_with_elmo_and_writes_the_prediction_file(squad_config, tmp_path, capsys):
    assert main(["task", "train", str(squad_config), "--no-progress"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    # train_examples keeps the first 30 of 32 questions; a quarter of them is the early-stopping set
    assert metrics["train_examples"] == 22 and metrics["train_answer_mapping"]["offset"] == 22
    assert set(metrics["test_details"]) == {"exact_match", "f1"} and metrics["test_details"]["f1"] == metrics["test"]
    assert set(metrics["layer_weights"]) == {"input", "output"}
    written = json.loads((run / "test-predictions.json").read_text())
    assert sorted(written) == [f"dev-{i}" for i in range(4)]
    capsys.readouterr()
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev.json"), "--json",
                 str(tmp_path / "result.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("squad_f1 ") and "exact match" in out
    result = json.loads((tmp_path / "result.json").read_text())
    predictions = json.loads(Path(result["predictions"]).read_text())
    assert Path(result["predictions"]) == run / "predictions-dev.json" and predictions == written
    contexts = {p["qas"][0]["id"]: p["context"] for p in toy_paragraphs(CITIES[8:], "dev")}
    assert all(answer in contexts[ident] for ident, answer in predictions.items())
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev.json"), "--predictions",
                 str(tmp_path / "mine.json")]) == 0
    assert json.loads((tmp_path / "mine.json").read_text()) == written
    # the default name drops .json and .gz, and keeps every other dot of the data file's name
    with gzip.open(tmp_path / "dev-v1.1.json.gz", "wt", encoding="utf-8") as f:
        f.write((tmp_path / "dev.json").read_text(encoding="utf-8"))
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev-v1.1.json.gz")]) == 0
    assert json.loads((run / "predictions-dev-v1.1.json").read_text()) == written


def test_squad_baseline_learns_the_toy_task(squad_config):
    config = load_task_config(squad_config, {"elmo": {"enabled": False}, "train": {"epochs": 15},
                                             "data": {"train_examples": 0}})
    metrics = train_task(config, progress=False)
    assert metrics["layer_weights"] == {}
    assert metrics["test_details"]["exact_match"] > 0.7


def test_squad_task_and_metric_go_together(squad_config):
    with pytest.raises(TaskConfigError, match="squad_f1"):
        load_task_config(squad_config, {"metric": "accuracy"})
    with pytest.raises(TaskConfigError, match="train_examples"):
        load_task_config(squad_config, {"data": {"train_examples": -1}})


@pytest.mark.parametrize("placement", ["input", "output", "both"])
def test_bidaf_takes_elmo_at_each_placement_and_padding_changes_nothing(placement):
    from elmo.tasks.base import TokenBatch
    from elmo.tasks.features import TokenFeatures, WordVocab, char_ids, word_ids
    from elmo.tasks.integration import ElmoOptions, TaskElmo
    from elmo.tasks.qa import BiDAF, QaBatch

    torch.manual_seed(0)
    contexts = [["a", "b", "c", "d", "e"], ["c", "d", "e"]]
    questions = [["a", "b"], ["e", "c", "d"]]
    vocab = WordVocab(["a", "b", "c", "d", "e"])
    model = BiDAF(TokenFeatures(torch.randn(len(vocab), 4), char_filters=3),
                  TaskElmo(ElmoOptions(placement=placement, dropout=0.0), 3, 6), hidden=5, dropout=0.0).eval()

    def side(sentences, layers):
        time = max(len(s) for s in sentences)
        mask = torch.tensor([[i < len(s) for i in range(time)] for s in sentences])
        return TokenBatch(words=word_ids(sentences, vocab, time), chars=char_ids(sentences, time), mask=mask,
                          elmo=layers[:, :, :time])

    c_layers, q_layers = torch.randn(2, 3, 5, 6), torch.randn(2, 3, 3, 6)
    batch = QaBatch(side(contexts, c_layers), side(questions, q_layers), torch.tensor([[1, 2], [0, 0]]))
    start, end = model.logits(batch)
    assert start.shape == (2, 5) and torch.isfinite(model.loss(batch))
    # the second question alone, without padding, scores its real tokens the same
    alone = QaBatch(side(contexts[1:], c_layers[1:]), side(questions[1:], q_layers[1:]))
    start_alone, end_alone = model.logits(alone)
    assert torch.allclose(start[1, :3], start_alone[0], atol=1e-5) and torch.allclose(end[1, :3], end_alone[0], atol=1e-5)
    assert model.predict(batch)[1] == model.predict(alone)[0]
