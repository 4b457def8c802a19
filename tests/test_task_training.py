"""elmo.tasks end to end on tiny synthetic data: configs, the layer cache, training, resuming,
evaluation from the CLI, with and without ELMo (the fixture biLM stands in for a real one)."""

import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from elmo.cli.main import main
from elmo.inference.embed import Embedder
from elmo.inference.layer_cache import load_or_compute
from elmo.tasks.base import class_scores
from elmo.tasks.catalog import read_dataset, task_for
from elmo.tasks.classification import Classification, LabeledSentence
from elmo.tasks.config import TaskConfigError, load_task_config
from elmo.tasks.tagging import TaggedSentence, Tagging
from elmo.tasks.training import (
    evaluate_task,
    load_bilm_source,
    load_task_model,
    train_task,
)

NAMES = ["Anna", "Berg", "Oslo", "Paris", "Maria", "Peter"]
WORDS = ["visited", "the", "city", "of", "met", "and", "saw", "a", "friend", "in"]


def write_ner(path, n, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        for _ in range(rng.randint(3, 7)):
            if rng.random() < 0.35:
                lines.append(f"{rng.choice(NAMES)} NNP B-NP B-PER")
            else:
                lines.append(f"{rng.choice(WORDS)} NN B-NP O")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_sst(path, n, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        good = rng.random() < 0.5
        word = "great" if good else "awful"
        label = 4 if good else 0
        lines.append(f"({label} (2 (2 the) (2 film)) ({label} (2 is) ({label} {word})))")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_sick(path, n, seed):
    rng = random.Random(seed)
    header = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
              "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set")
    rows = [header]
    for i in range(n):
        subject = rng.choice(["A man", "A woman", "A dog"])
        same = rng.random() < 0.5
        other = subject if same else ("A cat" if subject != "A cat" else "A man")
        label = "ENTAILMENT" if same else "CONTRADICTION"  # the reader lower-cases them
        split = "TRAIN" if i < n * 0.7 else ("TRIAL" if i < n * 0.85 else "TEST")
        rows.append(f"{i}\t{subject} is running\t{other} is running\t{label}\t3\tx\tx\tx\tx\tx\tx\t{split}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def write_vectors(path):
    rng = np.random.default_rng(0)
    words = [w.lower() for w in NAMES + WORDS] + ["great", "awful", "film", "is", "man", "running"]
    path.write_text("".join(f"{w} {' '.join(f'{v:.3f}' for v in rng.normal(size=6))}\n" for w in words))


def write_config(path, body):
    path.write_text(body, encoding="utf-8")
    return path


def best_model_predictions(run, examples):
    """What a run's best model predicts for ``examples``, through the biLM when it uses ELMo."""
    model, config, vocab, labels = load_task_model(run)
    task = task_for(config)
    split = task.split(examples)
    embedder = load_bilm_source(config)
    if embedder is not None:
        split.layers = load_or_compute(embedder, split.sentences, config.cache_dir, "check", progress=False)
    # Training's batch size, as its evaluation ran: the task model's own products may round
    # differently in another batch (only the biLM's are batch-independent).
    return task.predict(model, split, vocab, labels, batch_size=config.train.batch_size)


def accuracy(predicted, examples):
    """Fraction of ``examples`` whose gold label equals the prediction, counted here."""
    assert len(predicted) == len(examples)
    return sum(p == e.label for p, e in zip(predicted, examples)) / len(examples)


@pytest.fixture
def ner_config(tmp_path, bilm_dir):
    write_ner(tmp_path / "train.txt", 40, 1)
    write_ner(tmp_path / "dev.txt", 10, 2)
    write_vectors(tmp_path / "vectors.txt")
    return write_config(tmp_path / "ner.toml", f"""
task = "tagging"
metric = "span_f1"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "conll2003"
train = "{tmp_path / 'train.txt'}"
dev = "{tmp_path / 'dev.txt'}"
test = "{tmp_path / 'dev.txt'}"
vectors = "{tmp_path / 'vectors.txt'}"
[model]
hidden = 16
char_filters = 8
dropout = 0.1
[elmo]
placement = "input"
dropout = 0.1
[bilm]
model = "{bilm_dir}"
[train]
epochs = 3
batch_size = 8
learning_rate = 0.01
""")


def test_tagger_trains_with_elmo_and_evaluates_from_the_cli(ner_config, tmp_path, capsys):
    assert main(["task", "train", str(ner_config), "--no-progress"]) == 0
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert metrics["dev"] == max(h["dev"] for h in metrics["history"])
    assert metrics["test"] == metrics["dev"]  # the test file is the dev file here
    weights = metrics["layer_weights"]["input"]
    assert len(weights) == 3 and sum(weights) == pytest.approx(1.0)
    assert len(list((tmp_path / "cache").glob("conll2003-*.hdf5"))) == 3  # train, dev, test
    capsys.readouterr()
    out = tmp_path / "eval.json"
    assert main(["task", "evaluate", str(run), "--data", str(tmp_path / "dev.txt"), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["score"] == pytest.approx(metrics["dev"])
    assert capsys.readouterr().out.startswith("span_f1 ")


def test_tags_unseen_in_training_count_as_missed_unless_most_are_unknown(ner_config, tmp_path):
    """CoNLL-2000's test set has I-LST, which its training set lacks: the spans of such a tag
    are scored as missed (seqeval on the gold strings), not refused. A file most of whose tags
    the model never saw is the wrong data, and an error."""
    from seqeval.metrics import f1_score

    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 3}})
    train_task(config, progress=False)
    run = tmp_path / "run"
    rows = (tmp_path / "dev.txt").read_text(encoding="utf-8").splitlines()
    first_o = next(i for i, r in enumerate(rows) if r.endswith(" O"))
    rows[first_o] = rows[first_o][:-1] + "B-MISC"  # a tag the training file never has
    (tmp_path / "dev-misc.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    result = evaluate_task(run, str(tmp_path / "dev-misc.txt"), progress=False)
    assert result["unseen_labels"] == ["B-MISC"]
    examples = read_dataset("conll2003", str(tmp_path / "dev-misc.txt"))
    predicted = best_model_predictions(run, examples)
    assert "B-MISC" not in {t for tags in predicted for t in tags}
    assert result["score"] == pytest.approx(f1_score([e.tags for e in examples], predicted))
    assert result["score"] < evaluate_task(run, str(tmp_path / "dev.txt"), progress=False)["score"]

    swapped = [" ".join(r.split()[:-1] + [{"B-PER": "B-X", "O": "I-Y"}.get(r.split()[-1], "B-Z")]) if r.strip()
               else r for r in rows]
    (tmp_path / "dev-wrong.txt").write_text("\n".join(swapped) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev-wrong.txt: label\(s\) .*B-X.* are not among"):
        evaluate_task(run, str(tmp_path / "dev-wrong.txt"), progress=False)


def test_baseline_needs_no_bilm_and_resume_continues(ner_config, tmp_path):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 2}})
    first = train_task(config, progress=False)
    assert first["layer_weights"] == {} and not (tmp_path / "cache").exists()
    longer = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 3}})
    resumed = train_task(longer, resume=True, progress=False)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    assert resumed["history"][:2] == first["history"]
    # Without resume, a run is refused (its checkpoints are not lost); with overwrite it starts
    # over: the same seed gives the same first epochs.
    with pytest.raises(FileExistsError, match="already holds a trained run; pass --resume"):
        train_task(config, progress=False)
    again = train_task(config, progress=False, overwrite=True)
    assert again["history"] == first["history"]


@pytest.mark.parametrize("elmo", [False, True])
def test_resume_gives_the_uninterrupted_run(ner_config, tmp_path, elmo):
    """Stopped after epoch 2 and resumed, a run trains epoch 3 exactly as without the stop: the
    example order (each epoch shuffles the last one's) is restored with the weights and RNGs."""
    def config(epochs, folder):
        return load_task_config(ner_config, {"elmo": {"enabled": elmo}, "train": {"epochs": epochs},
                                             "output": str(tmp_path / folder)})

    straight = train_task(config(3, "straight"), progress=False)
    train_task(config(2, "stopped"), progress=False)
    resumed = train_task(config(3, "stopped"), resume=True, progress=False)
    assert resumed["history"] == straight["history"] and resumed["dev"] == straight["dev"]
    # A checkpoint from before the order was saved: the order is replayed from the seed.
    train_task(config(2, "old"), progress=False)
    state = torch.load(tmp_path / "old" / "last.pt", weights_only=True)
    del state["order"]
    torch.save(state, tmp_path / "old" / "last.pt")
    assert train_task(config(3, "old"), resume=True, progress=False)["history"] == straight["history"]


def test_an_old_checkpoint_whose_order_cannot_be_replayed_warns(ner_config, tmp_path):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 1}})
    train_task(config, progress=False)
    last = tmp_path / "run" / "last.pt"
    state = torch.load(last, weights_only=True)
    del state["order"]
    state["python_rng"] = [3, list(random.Random(99).getstate()[1]), None]  # not where the seed's shuffles end
    torch.save(state, last)
    longer = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 2}})
    with pytest.warns(UserWarning, match="could not be replayed"):
        resumed = train_task(longer, resume=True, progress=False)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]


def test_resumed_run_counts_the_time_before_the_resume(ner_config, tmp_path):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 1}})
    train_task(config, progress=False)
    last = tmp_path / "run" / "last.pt"
    state = torch.load(last, weights_only=True)
    assert 0 < state["seconds"] < 600
    # As if the first process had trained for 1000 s before it was stopped.
    torch.save({**state, "seconds": 1000.0}, last)
    longer = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 2}})
    resumed = train_task(longer, resume=True, progress=False)
    # metrics.json rounds to 0.1 s (an epoch of this toy run can take less than 0.05 s); the
    # checkpoint keeps the unrounded sum, which must have grown.
    assert 1000 <= resumed["seconds"] < 1600 and "seconds_counted_from_epoch" not in resumed
    assert torch.load(last, weights_only=True)["seconds"] > 1000
    # A checkpoint written before the time was recorded: the metrics say what the seconds cover.
    state = torch.load(last, weights_only=True)
    del state["seconds"]
    torch.save(state, last)
    longest = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 3}})
    partly_timed = train_task(longest, resume=True, progress=False)
    assert partly_timed["seconds_counted_from_epoch"] == 3 and partly_timed["seconds"] < 600


def test_tagger_learns_the_toy_task(ner_config):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 8}})
    assert train_task(config, progress=False)["dev"] > 0.9


@pytest.mark.parametrize("placement", ["output", "both"])
def test_sentence_classifier_and_esim_train(tmp_path, bilm_dir, placement, capsys):
    write_sst(tmp_path / "sst.txt", 30, 3)
    write_sick(tmp_path / "SICK.txt", 40, 4)
    write_vectors(tmp_path / "vectors.txt")
    common = f"""
[model]
hidden = 12
char_filters = 0
dropout = 0.1
[elmo]
placement = "{placement}"
layers = "average"
[bilm]
model = "{bilm_dir}"
[train]
epochs = 2
batch_size = 8
"""
    sst = write_config(tmp_path / "sst.toml", f"""
task = "classification"
metric = "accuracy"
output = "{tmp_path / 'sst-run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "sst5"
train = "{tmp_path / 'sst.txt'}"
dev = "{tmp_path / 'sst.txt'}"
vectors = "{tmp_path / 'vectors.txt'}"
""" + common)
    sick = write_config(tmp_path / "sick.toml", f"""
task = "entailment"
metric = "accuracy"
output = "{tmp_path / 'sick-run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "sick"
train = {{ path = "{tmp_path / 'SICK.txt'}", split = "train" }}
dev = {{ path = "{tmp_path / 'SICK.txt'}", split = "trial" }}
test = {{ path = "{tmp_path / 'SICK.txt'}", split = "test" }}
""" + common)
    sst_dev = read_dataset("sst5", tmp_path / "sst.txt")
    sick_dev, sick_test = (read_dataset("sick", tmp_path / "SICK.txt", split) for split in ("trial", "test"))
    for config_path, run, dev, test in ((sst, "sst-run", sst_dev, None), (sick, "sick-run", sick_dev, sick_test)):
        metrics = train_task(load_task_config(config_path), progress=False)
        assert len(metrics["history"]) == 2
        assert metrics["dev"] == max(h["dev"] for h in metrics["history"])
        # The reported scores are the best model's accuracy, counted here from its predictions.
        assert metrics["dev"] == pytest.approx(accuracy(best_model_predictions(tmp_path / run, dev), dev))
        if test is not None:
            assert metrics["test"] == pytest.approx(accuracy(best_model_predictions(tmp_path / run, test), test))
        assert set(metrics["layer_weights"]) == ({"output"} if placement == "output" else {"input", "output"})
    assert main(["task", "evaluate", str(tmp_path / "sick-run"), "--data", str(tmp_path / "SICK.txt"),
                 "--split", "test"]) == 0
    printed = capsys.readouterr().out
    test_predicted = best_model_predictions(tmp_path / "sick-run", sick_test)
    for label in sorted({p.label for p in sick_test}):
        gold_count = sum(p.label == label for p in sick_test)
        assert f"{label:<14} precision" in printed and f"gold {gold_count}" in printed
    result = evaluate_task(tmp_path / "sick-run", str(tmp_path / "SICK.txt"), "test", progress=False)
    confusion = result["details"]["confusion"]
    for gold in confusion:
        for predicted in confusion[gold]:
            assert confusion[gold][predicted] == sum(p.label == gold and q == predicted
                                                     for p, q in zip(sick_test, test_predicted))
    # SNLI as an extra test set of the SICK model: same (lower-case) label names, read as kind snli.
    snli = tmp_path / "snli"
    snli.mkdir()
    (snli / "s1.test").write_text("A man is running\nA dog is running\n", encoding="utf-8")
    (snli / "s2.test").write_text("A man is running\nA cat is running\n", encoding="utf-8")
    (snli / "labels.test").write_text("entailment\ncontradiction\n", encoding="utf-8")
    pairs = read_dataset("snli", snli, "test")
    predicted = best_model_predictions(tmp_path / "sick-run", pairs)
    result = evaluate_task(tmp_path / "sick-run", str(snli), "test", kind="snli", progress=False)
    assert result["kind"] == "snli" and result["examples"] == 2
    assert result["score"] == pytest.approx(accuracy(predicted, pairs))
    # Gold labels equal to the model's own predictions score 1, the other label on every pair 0.
    other = {"entailment": "contradiction", "contradiction": "entailment"}
    (snli / "labels.test").write_text("".join(f"{p}\n" for p in predicted), encoding="utf-8")
    assert evaluate_task(tmp_path / "sick-run", str(snli), "test", kind="snli", progress=False)["score"] == 1.0
    (snli / "labels.test").write_text("".join(f"{other[p]}\n" for p in predicted), encoding="utf-8")
    assert evaluate_task(tmp_path / "sick-run", str(snli), "test", kind="snli", progress=False)["score"] == 0.0
    (snli / "labels.test").write_text("entailment\nneutral\n", encoding="utf-8")  # never in this SICK sample
    with pytest.raises(ValueError, match=r"snli: label\(s\) neutral are not among"):
        evaluate_task(tmp_path / "sick-run", str(snli), "test", kind="snli", progress=False)


def test_layer_cache_matches_the_embedder_and_is_reused(tmp_path, bilm_dir):
    embedder = Embedder.from_files(bilm_dir / "options.json", bilm_dir / "weights.hdf5")
    sentences = [["The", "cat", "sat"], ["A", "dog"], []]
    cache = load_or_compute(embedder, sentences, tmp_path, "toy", progress=False)
    direct = embedder.embed_sentences(sentences)
    for i, expected in enumerate(direct):
        assert cache[i].shape == expected.shape
        np.testing.assert_allclose(cache[i].astype(np.float32), expected, atol=2e-3, rtol=1e-3)  # float16 storage
    files = list(tmp_path.glob("toy-*.hdf5"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    again = load_or_compute(embedder, sentences, tmp_path, "toy", progress=False)
    assert files[0].stat().st_mtime_ns == stamp and np.array_equal(again.layers, cache.layers)
    load_or_compute(embedder, sentences[:2], tmp_path, "toy", progress=False)
    assert len(list(tmp_path.glob("toy-*.hdf5"))) == 2  # other sentences, another file
    batch = cache.batch([1, 0], time=4)
    assert batch.shape == (2, 3, 4, 32) and float(batch[0, :, 2:].abs().sum()) == 0.0


def test_layer_cache_keeps_each_precision_apart(tmp_path, bilm_dir, bfloat16_selected):
    import hashlib

    from elmo.inference.layer_cache import cache_path, sentences_fingerprint
    from elmo.model.weights import weights_fingerprint

    sentences = [["The", "cat", "sat"], ["A", "dog"]]
    exact = Embedder.from_files(bilm_dir / "options.json", bilm_dir / "weights.hdf5")
    reduced = Embedder.from_files(bilm_dir / "options.json", bilm_dir / "weights.hdf5", precision="bfloat16")
    assert (exact.precision, reduced.precision) == ("float32", "bfloat16")
    float32_layers = load_or_compute(exact, sentences, tmp_path, "toy", progress=False)
    bfloat16_layers = load_or_compute(reduced, sentences, tmp_path, "toy", progress=False)
    files = {h5py.File(f, "r").attrs["precision"]: f.name for f in tmp_path.glob("toy-*.hdf5")}
    assert set(files) == {"float32", "bfloat16"}
    # float32's file name is the one caches made before the key had a precision: they stay valid.
    old_key = f"{weights_fingerprint(exact.model)}:{exact.state}:{sentences_fingerprint(sentences)}"
    assert files["float32"] == f"toy-{hashlib.sha256(old_key.encode()).hexdigest()[:16]}.hdf5"
    assert files["float32"] == cache_path(tmp_path, "toy", exact, sentences).name
    assert not np.array_equal(float32_layers.layers, bfloat16_layers.layers)
    np.testing.assert_allclose(bfloat16_layers.layers.astype(np.float32), float32_layers.layers.astype(np.float32),
                               atol=0.05, rtol=0.05)


def test_task_bilm_precision_reaches_the_embedder_and_is_checked(ner_config, bfloat16_selected, capsys):
    config = load_task_config(ner_config)
    assert config.bilm.precision == "float32" and load_bilm_source(config).precision == "float32"
    ner_config.write_text(ner_config.read_text().replace("[bilm]\n", '[bilm]\nprecision = "bfloat16"\n'))
    assert load_bilm_source(load_task_config(ner_config)).precision == "bfloat16"
    ner_config.write_text(ner_config.read_text().replace('precision = "bfloat16"', 'precision = "int4"'))
    with pytest.raises(TaskConfigError, match=f"{ner_config}: bilm.precision: expected one of float32, bfloat16"):
        load_task_config(ner_config)
    assert main(["task", "train", str(ner_config)]) == 2
    assert "bilm.precision: expected one of" in capsys.readouterr().err


def test_a_task_run_records_the_precision_that_ran(ner_config, tmp_path, monkeypatch):
    """bfloat16 asked for on a CPU without its instructions runs float32 (with a warning); the
    run's config.json says float32, so that evaluating it later computes the same layers."""
    import elmo.inference.precision

    monkeypatch.setattr(elmo.inference.precision, "cpu_has_bfloat16", lambda: False)
    ner_config.write_text(ner_config.read_text().replace("[bilm]\n", '[bilm]\nprecision = "bfloat16"\n'))
    config = load_task_config(ner_config)
    config.train.epochs = 1
    with pytest.warns(UserWarning, match="neither AVX-512 BF16 nor AMX"):
        train_task(config, progress=False)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["bilm"]["precision"] == "float32"
    cached = [h5py.File(f, "r").attrs["precision"] for f in (tmp_path / "cache").glob("*.hdf5")]
    assert cached and set(cached) == {"float32"}


def test_class_scores_count_by_hand():
    gold = ["a", "a", "a", "b", "b", "c"]
    predicted = ["a", "b", "a", "b", "a", "b"]
    result = class_scores(gold, predicted)
    assert result["confusion"] == {"a": {"a": 2, "b": 1, "c": 0}, "b": {"a": 1, "b": 1, "c": 0},
                                   "c": {"a": 0, "b": 1, "c": 0}}
    assert result["classes"]["a"] == {"gold": 3, "predicted": 3, "correct": 2, "precision": 2 / 3,
                                      "recall": 2 / 3, "f1": pytest.approx(2 / 3)}
    assert result["classes"]["b"]["precision"] == 1 / 3 and result["classes"]["b"]["recall"] == 1 / 2
    assert result["classes"]["c"] == {"gold": 1, "predicted": 0, "correct": 0, "precision": 0.0,
                                      "recall": 0.0, "f1": 0.0}


def test_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    examples = [TaggedSentence(tokens=["a", "b", "c", "d"], tags=gold[0])]
    spans = Tagging(metric="span_f1")
    assert spans.evaluate(examples, gold).score == 1.0
    assert spans.evaluate(examples, [["B-PER", "O", "O", "B-LOC"]]).score == pytest.approx(0.5)
    tokens = Tagging(metric="accuracy")
    assert tokens.evaluate(examples, [["B-PER", "O", "O", "B-LOC"]]).score == 0.75
    sentences = [LabeledSentence(tokens=["x"], label=label) for label in ["1", "2", "3", "4"]]
    assert Classification().evaluate(sentences, ["1", "2", "0", "0"]).score == 0.5


ROOT = Path(__file__).parent.parent
SHIPPED_CONFIGS = sorted([*(ROOT / "configs" / "tasks").glob("*.toml"), *(ROOT / "experiments" / "configs").glob("*.toml")])


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: p.stem)
def test_shipped_task_configs_are_valid(path):
    """Every config under configs/tasks and experiments/configs parses and validates (its data
    paths are under $ELMO_DATA, which a fresh clone lacks, so they are not checked here:
    test_task_data_root.py checks that they are under the data root)."""
    config = load_task_config(path)
    assert config.task and config.metric and config.data.train.path
    assert config.data.dev is not None or config.data.dev_fraction > 0


def test_snli_mini_holds_out_a_tenth_of_snli_dev():
    config = load_task_config(Path(__file__).parent.parent / "configs" / "tasks" / "snli-mini.toml")
    assert (config.data.kind, config.data.train.split, config.data.test.split) == ("snli", "dev", "test")
    assert config.data.dev is None and config.data.dev_fraction == 0.1
    assert config.elmo.placement == "both"


def test_sick_without_early_stopping_differs_from_sick_only_in_patience():
    """The SICK diagnosis compares the two configs' runs, so nothing else may differ."""
    plain = load_task_config(ROOT / "configs" / "tasks" / "sick.toml")
    patient = load_task_config(ROOT / "experiments" / "configs" / "sick-patience-20.toml")
    assert patient.train.patience >= patient.train.epochs > plain.train.patience
    patient.train.patience = plain.train.patience
    patient.output = plain.output
    assert patient == plain


def test_wnut17_first_half_differs_from_wnut17_only_in_its_training_sentences():
    """The half-split test of domain fine-tuning compares its runs with the main WNUT-17 runs."""
    plain = load_task_config(ROOT / "configs" / "tasks" / "ner-wnut17.toml")
    half = load_task_config(ROOT / "experiments" / "configs" / "wnut17-first-half.toml")
    assert plain.data.train_examples == 0 and half.data.train_examples == 1697  # of 3,394
    half.data.train_examples, half.output = plain.data.train_examples, plain.output
    assert half == plain


def test_bad_config_names_file_and_field(ner_config, capsys):
    text = ner_config.read_text().replace('placement = "input"', 'placement = "middle"')
    ner_config.write_text(text)
    assert main(["task", "train", str(ner_config)]) == 2
    assert f"{ner_config}: elmo.placement: expected one of input, output, both" in capsys.readouterr().err


def set_field(config, section: str, name: str, value: str) -> None:
    """Rewrite TOML ``config`` with ``[section] name = value`` (replacing the field if it is there)."""
    lines, current = [], None
    for line in config.read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        if not (current == section and line.startswith(f"{name} = ")):
            lines.append(line)
        if line == f"[{section}]":
            lines.append(f"{name} = {value}")
    config.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("section,name,value,wording", [
    ("train", "batch_size", "-1", "must be at least 1, got -1"),
    ("train", "batch_size", "0", "must be at least 1, got 0"),
    ("train", "epochs", "0", "must be at least 1, got 0"),
    ("train", "learning_rate", "-0.01", "must be above 0, got -0.01"),
    ("train", "learning_rate", "nan", "must be above 0, got nan, which is not a finite number"),
    ("train", "patience", "-1", "must be at least 0, got -1"),
    ("train", "grad_clip", "0.0", "must be above 0, got 0"),
    ("train", "seed", "-1", "must be at least 0 and at most 4294967295, got -1"),
    ("model", "hidden", "0", "must be at least 1, got 0"),
    ("model", "dropout", "1.0", "must be at least 0 and below 1, got 1"),
    ("model", "char_filters", "-8", "must be at least 0, got -8"),
    ("model", "layers", "0", "must be at least 1, got 0"),
    ("elmo", "dropout", "-0.1", "must be at least 0 and below 1, got -0.1"),
    ("elmo", "l2", "inf", "must be at least 0, got inf, which is not a finite number"),
    ("bilm", "batch_size", "-1", "must be at least 1, got -1"),
])
def test_a_bad_number_in_a_task_config_is_one_line_naming_file_and_field(ner_config, tmp_path, capsys, section,
                                                                         name, value, wording):
    """Every numeric setting is checked when the config is read (a batch size of -1 used to
    train every epoch on no batch and report success): one line naming the file and the field,
    exit status 2, nothing created."""
    set_field(ner_config, section, name, value)
    assert main(["task", "train", str(ner_config), "--no-progress"]) == 2
    assert capsys.readouterr().err == f"elmo task: error: {ner_config}: {section}.{name}: {wording}\n"
    with pytest.raises(TaskConfigError, match=f"{section}.{name}: "):
        load_task_config(ner_config)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_a_bad_epochs_option_names_the_field(ner_config, tmp_path, capsys):
    assert main(["task", "train", str(ner_config), "--epochs", "0"]) == 2
    assert capsys.readouterr().err == f"elmo task: error: {ner_config}: train.epochs: must be at least 1, got 0\n"
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------- paths that are not there
@pytest.mark.parametrize("field", ["data.train", "data.dev", "data.test", "data.vectors", "bilm.model"])
def test_missing_path_fails_before_anything_is_created(ner_config, tmp_path, capsys, field):
    """A config naming a file that is not there fails with the field and the path, from the CLI
    and from train_task, and leaves neither a run directory nor a layer cache behind."""
    missing = tmp_path / "nowhere" / "missing.txt"
    section, name = field.split(".")
    text = ner_config.read_text()
    if field == "bilm.model":
        text = text.replace(f'model = "{tmp_path.parent}', "model = \"" + str(tmp_path / "nowhere") + "/")
        missing = None
    else:
        old = next(line for line in text.splitlines() if line.startswith(f"{name} = "))
        text = text.replace(old, f'{name} = "{missing}"')
    ner_config.write_text(text)
    config = load_task_config(ner_config)
    source = config.bilm.model if missing is None else str(missing)
    assert main(["task", "train", str(ner_config), "--no-progress"]) == 2
    assert f"{ner_config}: {field}: {source}" in capsys.readouterr().err
    with pytest.raises(TaskConfigError, match=f"{field}: {source}"):
        train_task(config, progress=False)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


# ------------------------------------------------- evaluation: words new to the run
POSITIVE, NEGATIVE = ["great", "superb", "good"], ["awful", "bad", "dreadful"]


def write_polarity(path, words):
    """SST trees "the film is WORD", labelled 4 for a positive word and 0 for a negative one;
    a word may be ``noun/word`` to change the noun."""
    lines = []
    for entry in words:
        noun, _, word = entry.rpartition("/")
        label = 4 if word in POSITIVE + ["wonderful"] else 0
        lines.append(f"({label} (2 (2 the) (2 {noun or 'film'})) ({label} (2 is) ({label} {word})))")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_polarity_vectors(path):
    """6-d vectors whose first component is the polarity (+-3); "wonderful" and "terrible" are in
    the file but in no training or dev sentence, "movie" has no vector at all."""
    rng = np.random.default_rng(1)
    rows = []
    for word in ["the", "film", "is", *POSITIVE, "wonderful", *NEGATIVE, "terrible"]:
        vector = 0.3 * rng.normal(size=6)
        vector[0] = 3.0 if word in POSITIVE + ["wonderful"] else (-3.0 if word in NEGATIVE + ["terrible"] else 0.0)
        rows.append(f"{word} {' '.join(f'{v:.4f}' for v in vector)}\n")
    path.write_text("".join(rows), encoding="utf-8")
    return {line.split()[0]: np.array(line.split()[1:], dtype=np.float32) for line in rows}


@pytest.fixture
def polarity_run(tmp_path):
    """A baseline sentence classifier trained (with fine-tuned word vectors) on the polarity toy."""
    write_polarity(tmp_path / "train.txt", (POSITIVE + NEGATIVE) * 4)
    vectors = write_polarity_vectors(tmp_path / "vectors.txt")
    config = write_config(tmp_path / "polarity.toml", f"""
task = "classification"
metric = "accuracy"
output = "{tmp_path / 'run'}"
cache_dir = "{tmp_path / 'cache'}"
[data]
kind = "sst5"
train = "{tmp_path / 'train.txt'}"
dev = "{tmp_path / 'train.txt'}"
vectors = "{tmp_path / 'vectors.txt'}"
[model]
hidden = 8
char_filters = 0
dropout = 0.0
freeze_vectors = false
[elmo]
enabled = false
[train]
epochs = 6
batch_size = 4
learning_rate = 0.01
""")
    metrics = train_task(load_task_config(config), progress=False)
    assert metrics["dev"] == 1.0 and metrics["vocabulary"] == 2 + 9  # <pad>, <unk>, the words of train
    return tmp_path / "run", vectors


def test_evaluation_gives_new_words_their_pretrained_vectors(polarity_run, tmp_path, capsys):
    run, vectors = polarity_run
    new = tmp_path / "new.txt"
    write_polarity(new, ["wonderful", "terrible", "movie/wonderful", "movie/terrible"])
    result = evaluate_task(run, str(new), progress=False)
    # As <unk>, "wonderful" and "terrible" would look alike and one of them would be wrong.
    assert result["score"] == 1.0
    assert (result["words_added"], result["unknown_tokens"], result["tokens"]) == (2, 2, 16)  # "movie" twice

    # The embedding: the run's rows as trained, then the new words' vectors from the file.
    trained = torch.load(run / "best.pt", weights_only=True)["model"]["features.words.weight"]
    model, _, vocab, _ = load_task_model(run, [["The", "film", "is", "Wonderful", "terrible", "movie"]])
    table = model.features.words.weight.detach()
    assert len(vocab) == len(trained) + 2 and vocab.words[-2:] == ["terrible", "wonderful"]
    torch.testing.assert_close(table[:len(trained)], trained, rtol=0, atol=0)
    for word in ("terrible", "wonderful"):
        torch.testing.assert_close(table[vocab.id(word)], torch.from_numpy(vectors[word]), rtol=0, atol=0)
    assert vocab.id("movie") == 1  # no vector: <unk>
    assert not torch.allclose(table[vocab.id("great")], torch.from_numpy(vectors["great"]))  # fine-tuned

    capsys.readouterr()
    assert main(["task", "evaluate", str(run), "--data", str(new)]) == 0
    assert "2 word(s) new to the run got their pretrained vectors; 2 of 16 tokens (12.5%) read as <unk>" in capsys.readouterr().err


def test_evaluation_without_the_vectors_file_names_it(polarity_run, tmp_path, capsys):
    run, _ = polarity_run
    new = tmp_path / "new.txt"
    write_polarity(new, ["wonderful", "terrible"])
    moved = tmp_path / "moved.txt"
    (tmp_path / "vectors.txt").rename(moved)
    with pytest.raises(FileNotFoundError, match=f"data.vectors: {tmp_path / 'vectors.txt'}: no such file"):
        evaluate_task(run, str(new), progress=False)
    assert main(["task", "evaluate", str(run), "--data", str(new)]) == 2
    assert f"data.vectors: {tmp_path / 'vectors.txt'}: no such file" in capsys.readouterr().err
    # Data with no word new to the run needs no vectors file; --vectors points at the moved one.
    assert evaluate_task(run, str(tmp_path / "train.txt"), progress=False)["score"] == 1.0
    assert main(["task", "evaluate", str(run), "--data", str(new), "--vectors", str(moved), "--json",
                 str(tmp_path / "eval.json")]) == 0
    assert json.loads((tmp_path / "eval.json").read_text())["score"] == 1.0


# ------------------------------------------------------------------------------ damaged checkpoints
class Untrusted:
    """Not a tensor or a plain value: a checkpoint holding it cannot be read with weights_only."""


def damage(path, how):
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"not a checkpoint at all")
    else:  # untrusted: a pickled object of a class of its own
        torch.save({"format": "elmo-task-2", "model": Untrusted()}, path)


@pytest.mark.parametrize("how", ["truncated", "garbage", "untrusted"])
def test_evaluating_a_damaged_or_untrusted_checkpoint_is_one_line_naming_it(ner_config, tmp_path, capsys, how):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 1}})
    train_task(config, progress=False)
    best = tmp_path / "run" / "best.pt"
    damage(best, how)
    capsys.readouterr()
    assert main(["task", "evaluate", str(tmp_path / "run"), "--data", str(tmp_path / "dev.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elmo task: error: {best}: not a readable task checkpoint: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_resume_falls_back_to_best_when_last_is_damaged(ner_config, tmp_path, capsys):
    """best.pt holds the training state too: a run whose last.pt is damaged continues from its best
    epoch with a warning, and trains the epochs after it again to the uninterrupted run's numbers."""
    def config(epochs, folder):
        return load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": epochs},
                                             "output": str(tmp_path / folder)})

    straight = train_task(config(3, "straight"), progress=False)
    first = train_task(config(2, "stopped"), progress=False)
    last = tmp_path / "stopped" / "last.pt"
    damage(last, "truncated")
    with pytest.warns(UserWarning, match=f"{last}: not a readable task checkpoint: .*resuming from .*best.pt "
                                         f"\\(epoch {first['best_epoch']}\\)"):
        resumed = train_task(config(3, "stopped"), resume=True, progress=False)
    assert resumed["history"] == straight["history"] and resumed["dev"] == straight["dev"]
    # From the command line: the warning is one line, and the run finishes.
    train_task(config(2, "cli"), progress=False)
    damage(tmp_path / "cli" / "last.pt", "untrusted")
    capsys.readouterr()
    assert main(["task", "train", str(ner_config), "--no-elmo", "--epochs", "3", "--output", str(tmp_path / "cli"),
                 "--resume", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "elmo task: warning: " in err and "resuming from" in err and "Traceback" not in err


def test_resume_with_no_readable_checkpoint_names_both(ner_config, tmp_path, capsys):
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 1}})
    train_task(config, progress=False)
    run = tmp_path / "run"
    damage(run / "last.pt", "garbage")
    damage(run / "best.pt", "untrusted")
    capsys.readouterr()
    assert main(["task", "train", str(ner_config), "--no-elmo", "--epochs", "2", "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"elmo task: error: {run}: no checkpoint to resume from ({run / 'last.pt'}: ")
    assert f"{run / 'best.pt'}: not a readable task checkpoint" in err and err.count("\n") == 1


def test_resume_with_a_damaged_best_checkpoint(ner_config, tmp_path):
    """The last epoch was the best: best.pt is written again from last.pt. An earlier best model
    cannot be recovered: an error says so rather than report another model as the best."""
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 2}})
    first = train_task(config, progress=False)
    run = tmp_path / "run"
    state = torch.load(run / "last.pt", weights_only=True)
    damage(run / "best.pt", "truncated")
    longer = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 3}})
    if first["best_epoch"] != 2:  # make the last epoch the best one
        torch.save({**state, "best_epoch": 2, "best_score": state["history"][-1]["dev"]}, run / "last.pt")
    with pytest.warns(UserWarning, match="the best epoch is the last one"):
        train_task(longer, resume=True, progress=False)
    assert torch.load(run / "best.pt", weights_only=True)["epoch"] >= 2
    # The best epoch (1) is not the last one (2) and best.pt is damaged.
    torch.save({**state, "best_epoch": 1}, run / "last.pt")
    damage(run / "best.pt", "garbage")
    with pytest.raises(ValueError, match=r"best.pt: not a readable task checkpoint: .* the best model \(epoch 1\) is "
                                         r"lost"):
        train_task(longer, resume=True, progress=False)


def test_an_old_run_of_before_one_home_per_task_still_evaluates(ner_config, tmp_path):
    """A best.pt of format elmo-task-1 (one flat [model] section, chunk_sentences in [data]) is read
    in today's shape."""
    config = load_task_config(ner_config, {"elmo": {"enabled": False}, "train": {"epochs": 1}})
    train_task(config, progress=False)
    best = tmp_path / "run" / "best.pt"
    payload = torch.load(best, weights_only=True)
    expected = evaluate_task(tmp_path / "run", str(tmp_path / "dev.txt"), progress=False)["score"]
    old = {key: payload[key] for key in ("config", "model", "vocab", "labels", "bilm_layers", "bilm_dim")}
    old["format"] = "elmo-task-1"
    old["config"]["model"].update(predicate_dim=10, max_span_width=10, modelling_layers=1)  # the flat section
    old["config"]["data"]["chunk_sentences"] = 0
    torch.save(old, best)
    assert evaluate_task(tmp_path / "run", str(tmp_path / "dev.txt"), progress=False)["score"] == expected
    old["format"] = "elmo-task-2"  # today's format with the old shape: the unknown fields are errors
    del old["config"]["data"]["chunk_sentences"]
    torch.save(old, best)
    with pytest.raises(TaskConfigError, match=r"best.pt: model.max_span_width, modelling_layers, predicate_dim: "
                                              r"unknown field\(s\) of TaggingSettings"):
        evaluate_task(tmp_path / "run", str(tmp_path / "dev.txt"), progress=False)


def test_a_folder_that_is_not_a_task_run_is_refused_as_output(ner_config, tmp_path, capsys, monkeypatch):
    """Issue 45 (one ownership rule for every writing command): task train writes only into a new
    or empty folder, or a task run elmo made (an old one is recognised by its config.json)."""
    import elmo.tasks.training

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "config"}')
    (mine / "best.pt").write_bytes(b"my own model")
    monkeypatch.setattr(elmo.tasks.training, "load_splits", lambda config: pytest.fail("loaded the data first"))
    for flags in ([], ["--resume"]):
        assert main(["task", "train", str(ner_config), "--output", str(mine), "--no-progress", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"elmo task: error: {mine}: a folder elmo did not make (it "
                                                       "holds best.pt, config.json and no .elmo-owner"), err
    assert (mine / "best.pt").read_bytes() == b"my own model"
    assert (mine / "config.json").read_text() == '{"my": "config"}'
    monkeypatch.undo()
    # A run made before runs were marked: recognised by its task config, and resumed.
    assert main(["task", "train", str(ner_config), "--no-progress", "--epochs", "1"]) == 0
    run = tmp_path / "run"
    (run / ".elmo-owner").unlink()
    assert main(["task", "train", str(ner_config), "--no-progress", "--epochs", "2", "--resume"]) == 0
    assert [h["epoch"] for h in json.loads((run / "metrics.json").read_text())["history"]] == [1, 2]
    assert (run / ".elmo-owner").is_file()
