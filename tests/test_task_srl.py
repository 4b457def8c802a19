"""Semantic role labelling: the CoNLL-2012 reader, BIO conversion, constrained decoding, the
CoNLL-2005 metric against hand-computed cases, and the model with and without ELMo on tiny data."""

import gzip
import itertools
import json
import random
from pathlib import Path

import pytest
import torch

from elmo.cli.main import main
from elmo.tasks.catalog import read_dataset
from elmo.tasks.config import TaskConfigError, load_task_config
from elmo.tasks.features import WordVocab
from elmo.tasks.readers import DatasetError
from elmo.tasks.srl import (
    BioDecoder,
    SemanticRoles,
    SrlInstance,
    bio_constraints,
    bio_spans,
    srl_arguments,
    srl_brackets_to_bio,
    srl_counts,
    srl_scores,
)
from elmo.tasks.training import train_task

SHARED_SRL = Path(__file__).resolve().parents[2] / "shared" / "data" / "srl" / "propbank-ewt"


def row(word, lemma="-", roleset="-", *args, sentence=0, token=0):
    return "\t".join(["doc/a.xml", str(sentence), str(token), word, "NN", "*", lemma, roleset, *args])


# Two sentences: the first with two predicates, a continuation and a reference argument; the
# second with a [WORD] placeholder and one predicate that has no arguments.
SAMPLE = "\n".join([
    "#begin document (doc/a.xml); part 000",
    row("The", "-", "-", "(ARG1*", "*"),
    row("man", "-", "-", "*)", "(ARG0*)"),
    row("who", "-", "-", "(R-ARG0*)", "*"),
    row("said", "say", "say.01", "(V*)", "*"),
    row("it", "-", "-", "(C-ARG1*)", "*"),
    row("left", "leave", "leave.01", "*", "(V*)"),
    "",
    row("[WORD]", "-", "-", "*"),
    row("ran", "run", "run.01", "(V*)"),
    row(".", "-", "-", "*"),
    "",
    row("No"),
    row("verbs"),
    "#end document",
    "",
])


@pytest.fixture
def sample_file(tmp_path):
    path = tmp_path / "sample.gold_conll"
    path.write_text(SAMPLE, encoding="utf-8")
    return path


def test_reader_gives_one_instance_per_predicate(sample_file, tmp_path):
    instances = read_dataset("conll2012-srl", sample_file)
    assert [i.predicate for i in instances] == [3, 5, 1]
    assert [i.sentence for i in instances] == [0, 0, 1]
    first, second, third = instances
    assert first.tokens == ["The", "man", "who", "said", "it", "left"]
    assert first.tags == ["B-ARG1", "I-ARG1", "B-R-ARG0", "B-V", "B-C-ARG1", "O"]
    assert second.tags == ["O", "B-ARG0", "O", "O", "O", "B-V"]
    assert third.tokens == ["[WORD]", "ran", "."] and third.tags == ["O", "B-V", "O"]
    counts = srl_counts(instances)
    assert counts["predicates"] == 3 and counts["sentences"] == 2 and counts["tokens"] == 9
    assert counts["roles"] == {"V": 3, "ARG0": 1, "ARG1": 1, "C-ARG1": 1, "R-ARG0": 1}
    # .gz reads the same
    packed = tmp_path / "sample.gold_conll.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(SAMPLE)
    assert read_dataset("conll2012-srl", packed) == instances


def test_brackets_to_bio():
    cells = ["(ARG0*", "*", "*)", "*", "(V*)", "(ARGM-TMP*)", "*"]
    assert srl_brackets_to_bio(cells, range(1, 8), "f", 9) == [
        "B-ARG0", "I-ARG0", "I-ARG0", "O", "B-V", "B-ARGM-TMP", "O"]


@pytest.mark.parametrize("lines, line, message", [
    ([row("a", "-", "-", "(ARG0"), row("b", "go", "go.01", "(V*)")], 1, "column 9: '(ARG0' is not an argument bracket"),
    ([row("a", "-", "-", "(ARG0*"), row("b", "go", "go.01", "(V*)")], 2, "(V opens inside (ARG0"),
    ([row("a", "-", "-", "*)"), row("b", "go", "go.01", "(V*)")], 1, "closes an argument that was never opened"),
    ([row("a", "-", "-", "(V*)"), row("b", "go", "go.01", "(ARG1*")], 2, "(ARG1 is never closed"),
    ([row("a", "-", "-", "(V*)"), row("b", "go", "go.01", "(V*)", "*")], 2, "10 columns, but line 1 of the same sentence has 9"),
    ([row("a", "-", "-", "(V*)", "*"), row("b", "go", "go.01", "*", "(V*)")], 1, "1 predicate(s)"),
    ([row("a", "-", "-", "(V*)"), row("b", "go", "go.01", "(V*)")], 1, "2 (V*) spans"),
    ([row("a", "-", "-", "*"), row("b", "go", "go.01", "*")], 1, "0 (V*) spans"),
    (["doc 0 0 a NN *"], 1, "6 columns, expected at least 8"),
])
def test_malformed_input_names_file_line_and_column(tmp_path, lines, line, message):
    path = tmp_path / "bad.gold_conll"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as error:
        read_dataset("conll2012-srl", path)
    assert error.value.line == line and error.value.path == str(path)
    assert message in str(error.value)
    assert str(error.value).startswith(f"{path}:{line}: ")


def test_a_file_without_predicates_is_an_error(tmp_path):
    path = tmp_path / "none.gold_conll"
    path.write_text(row("a") + "\n" + row("b") + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no predicates"):
        read_dataset("conll2012-srl", path)


@pytest.mark.skipif(not SHARED_SRL.is_dir(), reason="needs ../shared/data/srl")
def test_real_splits_have_their_documented_counts():
    expected = {"train": (40486, 10555, 59), "dev": (4977, 1536, 45), "test": (4799, 1538, 44)}
    for split, (predicates, sentences, roles) in expected.items():
        counts = srl_counts(read_dataset("conll2012-srl", SHARED_SRL / f"{split}.gold_conll.gz"))
        assert (counts["predicates"], counts["sentences"], len(counts["roles"])) == (predicates, sentences, roles)


# ------------------------------------------------------------------------------ decoding
LABELS = ["O", "B-ARG0", "I-ARG0", "B-ARG1", "I-ARG1", "B-V"]


def is_valid(tags):
    return all(not t.startswith("I-") or (i > 0 and tags[i - 1][2:] == t[2:] and tags[i - 1] != "O")
               for i, t in enumerate(tags))


def test_constraints_forbid_exactly_the_invalid_transitions():
    transitions, start = bio_constraints(LABELS)
    for (i, a), (j, b) in itertools.product(enumerate(LABELS), repeat=2):
        follows = not b.startswith("I-") or (a != "O" and a[2:] == b[2:])
        assert (transitions[i, j] == 0) == follows, (a, b)
    assert [bool(s == 0) for s in start] == [not t.startswith("I-") for t in LABELS]


def test_decoder_finds_the_best_valid_sequence_by_brute_force():
    decoder = BioDecoder(LABELS)
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(6, 4, len(LABELS), generator=generator) * 3, dim=-1)
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 1:] = False
    paths = decoder(log_probs, mask)
    for b, path in enumerate(paths):
        n = int(mask[b].sum())
        best = max((seq for seq in itertools.product(range(len(LABELS)), repeat=n)
                    if is_valid([LABELS[t] for t in seq])),
                   key=lambda seq: sum(float(log_probs[b, t, k]) for t, k in enumerate(seq)))
        assert path == list(best)
    # The unconstrained argmax of some row is invalid, so the constraints did something.
    argmax = log_probs.argmax(-1)
    assert any(not is_valid([LABELS[int(t)] for t in argmax[b, :int(mask[b].sum())]]) for b in range(6))


def test_decoder_turns_a_stray_inside_tag_into_a_valid_sequence():
    decoder = BioDecoder(LABELS)
    probs = torch.full((1, 3, len(LABELS)), 0.01)
    probs[0, 0, LABELS.index("I-ARG0")] = 0.9   # invalid at the start
    probs[0, 0, LABELS.index("B-ARG0")] = 0.05
    probs[0, 1, LABELS.index("I-ARG0")] = 0.9
    probs[0, 2, LABELS.index("O")] = 0.9
    path = decoder(probs.log(), torch.ones(1, 3, dtype=torch.bool))[0]
    assert [LABELS[t] for t in path] == ["B-ARG0", "I-ARG0", "O"]


# ------------------------------------------------------------------------------ metric
def test_spans_and_arguments():
    tags = ["B-ARG1", "I-ARG1", "B-R-ARG0", "B-V", "B-C-ARG1", "I-C-ARG1", "I-ARG2", "O"]
    assert bio_spans(tags) == [("ARG1", 0, 1), ("R-ARG0", 2, 2), ("V", 3, 3), ("C-ARG1", 4, 5), ("ARG2", 6, 6)]
    assert srl_arguments(tags) == [("ARG1", ((0, 1), (4, 5))), ("R-ARG0", ((2, 2),)), ("ARG2", ((6, 6),))]
    # a continuation with nothing to continue stands alone
    assert srl_arguments(["B-C-ARG1", "B-V"]) == [("C-ARG1", ((0, 0),))]


def test_metric_against_hand_computed_cases():
    gold = [
        ["B-ARG0", "I-ARG0", "B-V", "B-ARG1", "O"],            # 2 arguments
        ["B-ARG1", "B-V", "B-C-ARG1", "I-C-ARG1"],             # 1 argument in two pieces
        ["O", "B-V", "O"],                                      # a predicate without arguments
        ["B-R-ARG0", "B-V", "B-ARGM-TMP"],                     # 2 arguments
    ]
    predicted = [
        ["B-ARG0", "I-ARG0", "B-V", "B-ARG1", "I-ARG1"],       # ARG0 right, ARG1 too long
        ["B-ARG1", "B-V", "O", "O"],                           # continuation missed: ARG1 wrong
        ["O", "B-V", "B-ARG2"],                                 # one spurious argument
        ["B-R-ARG0", "O", "B-ARGM-TMP"],                       # both right; V missing does not count
    ]
    scores = srl_scores(gold, predicted)
    # gold: 2 + 1 + 0 + 2 = 5; predicted: 2 + 1 + 1 + 2 = 6; correct: ARG0, R-ARG0, ARGM-TMP = 3
    assert (scores["correct"], scores["gold"], scores["predicted"]) == (3, 5, 6)
    assert scores["precision"] == pytest.approx(3 / 6) and scores["recall"] == pytest.approx(3 / 5)
    assert scores["f1"] == pytest.approx(2 * 0.5 * 0.6 / 1.1)
    roles = scores["roles"]
    assert roles["ARG1"]["gold"] == 2 and roles["ARG1"]["predicted"] == 2 and roles["ARG1"]["correct"] == 0
    assert roles["ARG2"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "correct": 0, "gold": 0, "predicted": 1}
    assert roles["R-ARG0"]["f1"] == 1.0 and "V" not in roles
    # everything right, and nothing at all
    assert srl_scores(gold, gold)["f1"] == 1.0
    empty = srl_scores([["B-V"]], [["B-V"]])
    assert (empty["f1"], empty["gold"], empty["predicted"]) == (0.0, 0, 0)
    with pytest.raises(ValueError, match="2 gold sequences but 1"):
        srl_scores(gold[:2], predicted[:1])


# ------------------------------------------------------------------------------ batches
def test_instances_of_one_sentence_share_its_layers(sample_file):
    instances = read_dataset("conll2012-srl", sample_file)
    task = SemanticRoles()
    split = task.split(instances)
    assert split.sentences == [instances[0].tokens, instances[2].tokens]
    assert split.rows == [0, 0, 1]
    vocab = WordVocab.build(split.sentences)
    labels = {t: i for i, t in enumerate(sorted({t for e in instances for t in e.tags}))}
    assert task.label_names(instances) == list(labels)
    batch = task.batch(split, [1, 2], vocab, labels)
    assert batch.predicate.tolist() == [[0, 0, 0, 0, 0, 1], [0, 1, 0, 0, 0, 0]]
    assert batch.tags[1, :3].tolist() == [labels["O"], labels["B-V"], labels["O"]]


# ------------------------------------------------------------------------------ training
SUBJECTS, VERBS, OBJECTS = ["Anna", "Peter", "the dog"], ["saw", "met", "likes"], ["Oslo", "a friend", "the city"]


def write_srl(path, n, seed):
    """Toy SRL data: "SUBJ VERB OBJ and SUBJ VERB OBJ", a predicate per verb, its own subject
    ARG0 and object ARG1; the other clause's words are O."""
    rng = random.Random(seed)
    lines = []
    for s in range(n):
        clauses = [(rng.choice(SUBJECTS).split(), rng.choice(VERBS), rng.choice(OBJECTS).split()) for _ in range(2)]
        tokens, owner, roles = [], [], []
        for c, (subject, verb, obj) in enumerate(clauses):
            if c:
                tokens.append("and"), owner.append(None), roles.append(None)
            for k, w in enumerate(subject):
                tokens.append(w), owner.append(c), roles.append(("ARG0", k == 0, k == len(subject) - 1))
            tokens.append(verb), owner.append(c), roles.append(("V", True, True))
            for k, w in enumerate(obj):
                tokens.append(w), owner.append(c), roles.append(("ARG1", k == 0, k == len(obj) - 1))
        for t, word in enumerate(tokens):
            is_verb = roles[t] is not None and roles[t][0] == "V"
            cells = []
            for c in range(2):
                if owner[t] != c:
                    cells.append("*")
                    continue
                role, first, last = roles[t]
                cells.append(f"{'(' + role if first else ''}*{')' if last else ''}")
            lines.append(row(word, word if is_verb else "-", f"{word}.01" if is_verb else "-", *cells,
                             sentence=s, token=t))
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def srl_config(tmp_path, bilm_dir):
    bilm = bilm_dir
    write_srl(tmp_path / "train.conll", 40, 1)
    write_srl(tmp_path / "dev.conll", 10, 2)
    path = tmp_path / "srl.toml"
    path.write_text(f"""
task = "srl"
metric = "srl_f1"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "conll2012-srl"
train = "{tmp_path / 'train.conll'}"
dev = "{tmp_path / 'dev.conll'}"
test = "{tmp_path / 'dev.conll'}"
[model]
hidden = 16
char_filters = 8
dropout = 0.1
layers = 2
predicate_dim = 4
[elmo]
placement = "both"
dropout = 0.1
[bilm]
model = "{bilm}"
[train]
epochs = 2
batch_size = 8
learning_rate = 0.01
""", encoding="utf-8")
    return path


def test_srl_trains_with_elmo_and_evaluates_from_the_cli(srl_config, tmp_path, capsys):
    instances = read_dataset("conll2012-srl", tmp_path / "train.conll")
    assert len(instances) == 80 and all(i.tags.count("B-V") == 1 for i in instances)
    assert main(["task", "train", str(srl_config), "--no-progress"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    assert metrics["test"] == pytest.approx(metrics["dev"])
    assert metrics["test_details"]["gold"] == 40  # 20 predicates of dev, 2 arguments each
    assert set(metrics["layer_weights"]) == {"input", "output"}
    # one layer file per split, each holding sentences, not predicates
    import h5py
    for cached in (tmp_path / "cache").glob("conll2012-srl-*.hdf5"):
        with h5py.File(cached) as f:
            assert len(f["offsets"]) - 1 in (40, 10)
    capsys.readouterr()
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev.conll")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("srl_f1 ") and "precision" in out and "ARG0" in out
    # a role training never saw counts as missed, not as an error
    dev = (tmp_path / "dev.conll").read_text(encoding="utf-8")
    (tmp_path / "unseen.conll").write_text(dev.replace("(ARG1*", "(ARGM-TMP*"), encoding="utf-8")
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "unseen.conll"), "--json",
                 str(tmp_path / "unseen.json")]) == 0
    result = json.loads((tmp_path / "unseen.json").read_text())
    assert result["unseen_labels"] == ["B-ARGM-TMP", "I-ARGM-TMP"]
    assert result["details"]["roles"]["ARGM-TMP"]["correct"] == 0 and result["details"]["roles"]["ARGM-TMP"]["gold"] == 20
    assert "never saw in training" in capsys.readouterr().err


def test_srl_baseline_learns_the_toy_task(srl_config):
    config = load_task_config(srl_config, {"elmo": {"enabled": False}, "train": {"epochs": 12}})
    metrics = train_task(config, progress=False)
    assert metrics["layer_weights"] == {}
    assert metrics["dev"] > 0.9


def test_srl_task_and_metric_go_together(srl_config):
    with pytest.raises(TaskConfigError, match="srl_f1"):
        load_task_config(srl_config, {"metric": "span_f1"})
    with pytest.raises(TaskConfigError, match="srl_f1"):
        load_task_config(srl_config, {"task": "tagging"})


def test_srl_instance_is_a_tagged_sentence():
    instance = SrlInstance(tokens=["a", "ran"], tags=["O", "B-V"], predicate=1)
    assert instance.tags == ["O", "B-V"] and instance.predicate == 1 and instance.sentence == 0


@pytest.mark.parametrize("placement", [None, "input", "both"])
def test_srl_predictions_do_not_depend_on_padding(placement):
    """An instance alone and in a batch whose padding holds junk ELMo layers: same scores, same
    decoded tags; and every prediction of an untrained model is a valid BIO sequence."""
    from elmo.tasks.features import TokenFeatures, char_ids, word_ids
    from elmo.tasks.integration import ElmoOptions, TaskElmo
    from elmo.tasks.srl import SrlBatch, SrlTagger

    torch.manual_seed(0)
    short, long = ["Anna", "saw", "Oslo"], ["the", "dog", "met", "a", "friend", "and", "left"]
    vocab = WordVocab.build([short, long])
    features = TokenFeatures(torch.randn(len(vocab), 6), char_filters=4)
    options = ElmoOptions(enabled=placement is not None, placement=placement or "input", layers="mix")
    model = SrlTagger(features, TaskElmo(options, 3, 8), LABELS, hidden=8, layers=3, predicate_dim=3).eval()
    with torch.no_grad():
        model.projection.weight.normal_(std=3.0)  # varied, often invalid, argmax predictions
    words = word_ids([short, long], vocab)
    together = SrlBatch(words=words, chars=char_ids([short, long]), mask=words != 0,
                        predicate=torch.tensor([[0, 1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0]]),
                        elmo=torch.randn(2, 3, 7, 8) if placement else None)
    alone = SrlBatch(**{key: (value[:1, :, :3] if key == "elmo" else value[:1, :3]) if value is not None else None
                        for key, value in {**together.tensors, "predicate": together.predicate}.items()})
    predictions = model.predict(together)
    assert model.predict(alone) == predictions[:1]
    torch.testing.assert_close(model.scores(alone), model.scores(together)[:1, :3])
    assert [len(p) for p in predictions] == [3, 7]
    assert all(is_valid([LABELS[t] for t in p]) for p in predictions)
