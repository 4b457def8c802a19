"""Train and evaluate a task model from a :class:`~elmo.tasks.config.TaskConfig`.

A run directory holds ``config.json``, ``best.pt`` (the model with the best dev score so far),
``last.pt`` (everything needed to continue: model, optimizer, epoch, history, random state),
and ``metrics.json`` (dev score per epoch, best epoch, dev and test scores of the best model,
the learned ELMo layer weights). Checkpoints are written atomically and loaded with
``weights_only=True``; a killed run continues with ``resume=True`` from its last finished epoch.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from elmo.fileio import atomic_path, atomic_write_text
from elmo.inference.layer_cache import LayerCache, load_or_compute
from elmo.tasks.config import TaskConfig, check_task_paths, task_config_from_dict
from elmo.tasks.features import (
    UNK,
    TokenFeatures,
    WordVocab,
    char_ids,
    load_glove,
    load_vectors,
    vector_words,
    word_ids,
)
from elmo.tasks.integration import TaskElmo
from elmo.tasks.readers import (
    CorefDocument,
    GapExample,
    SentencePair,
    SquadQuestion,
    SrlInstance,
    TaggedSentence,
    read_dataset,
)

CHECKPOINT_FORMAT = "elmo-task-1"
FALLBACK_VECTOR_DIM = 50


# ------------------------------------------------------------------------------------ data
def sentences_of(examples: Sequence) -> list[list[str]]:
    """Every token sequence in the examples (both sides of a pair), in a fixed order; for SRL,
    whose instances share sentences (one per predicate), each distinct sentence once; for
    coreference, the sentences of every document in turn (the biLM reads one sentence at a time);
    for reading comprehension, each distinct context once, then every question."""
    if examples and isinstance(examples[0], CorefDocument):
        return [list(s) for e in examples for s in e.sentences]
    if examples and isinstance(examples[0], SquadQuestion):
        # The reader shares one context object per paragraph; a dict keeps first-use order.
        contexts = {id(e.context): e.context for e in examples}.values()
        return [list(c.tokens) for c in contexts] + [list(e.question) for e in examples]
    if examples and isinstance(examples[0], SentencePair):
        return [e.premise for e in examples] + [e.hypothesis for e in examples]
    if examples and isinstance(examples[0], SrlInstance):
        return [list(tokens) for tokens in _first_uses(tuple(e.tokens) for e in examples)]
    return [e.tokens for e in examples]


def _first_uses(keys: Iterable) -> dict:
    """Each distinct key, in order of first use, with its position in that order."""
    index: dict = {}
    for key in keys:
        index.setdefault(key, len(index))
    return index


def sentence_rows(examples: Sequence) -> list[int] | None:
    """For SRL, the position of each instance's sentence in :func:`sentences_of`, so that the
    biLM layers of a sentence are computed once for all its predicates; for coreference, the
    position of each document's first sentence; for reading comprehension, the position of each
    question's context (its question's row is the number of contexts plus its index); None for
    the others."""
    if examples and isinstance(examples[0], CorefDocument):
        return np.cumsum([0] + [len(e.sentences) for e in examples[:-1]]).tolist()
    if examples and isinstance(examples[0], SquadQuestion):
        index = _first_uses(id(e.context) for e in examples)
        return [index[id(e.context)] for e in examples]
    if not examples or not isinstance(examples[0], SrlInstance):
        return None
    index = _first_uses(tuple(e.tokens) for e in examples)
    return [index[tuple(e.tokens)] for e in examples]


def labels_of(example) -> list | str:
    """The gold labels of an example: its tags, its class, or (coreference) its clusters."""
    if isinstance(example, CorefDocument):
        return example.clusters
    if isinstance(example, SquadQuestion):
        return [text for text, _ in example.answers]
    return example.tags if isinstance(example, TaggedSentence) else example.label


def label_set(examples: Sequence) -> set[str]:
    """Every distinct gold label (tag or class) of the examples; none for coreference and reading
    comprehension, whose clusters and answers are not labels from a fixed set."""
    if examples and isinstance(examples[0], (CorefDocument, SquadQuestion)):
        return set()
    return {t for e in examples for t in (e.tags if isinstance(e, TaggedSentence) else [e.label])}


@dataclass
class LoadedSplit:
    """Examples of one split and, when ELMo is used, their cached biLM layers (for pairs the
    premises come first, then the hypotheses, as in :func:`sentences_of`)."""

    examples: list
    layers: LayerCache | None = None
    rows: list[int] | None = None  # layer row of each example, where examples share sentences (SRL)
    question_offset: int = 0  # reading comprehension: the layer row of the first question

    def __post_init__(self):
        if self.rows is None:
            self.rows = sentence_rows(self.examples)
        if self.examples and isinstance(self.examples[0], SquadQuestion):
            self.question_offset = max(self.rows) + 1  # the contexts come first, numbered from 0


def make_batch(split: LoadedSplit, indices: Sequence[int], vocab: WordVocab, labels: dict[str, int]) -> dict:
    """The batch dict the task models take (see :mod:`elmo.tasks.tagger` and ``classifiers``)."""
    examples = [split.examples[i] for i in indices]

    def side(sentences: list[list[str]], layer_indices: list[int] | None) -> dict:
        time = max(max((len(s) for s in sentences), default=0), 1)
        mask = torch.zeros(len(sentences), time, dtype=torch.bool)
        for row, s in enumerate(sentences):
            mask[row, :len(s)] = True
        layers = split.layers.batch(layer_indices, time) if split.layers is not None else None
        return {"words": word_ids(sentences, vocab, time), "chars": char_ids(sentences, time), "mask": mask,
                "elmo": layers}

    if isinstance(examples[0], SquadQuestion):
        return {"context": side([e.context.tokens for e in examples], [split.rows[i] for i in indices]),
                "question": side([e.question for e in examples], [split.question_offset + i for i in indices]),
                "span": torch.tensor([e.span or (0, 0) for e in examples], dtype=torch.long)}
    if isinstance(examples[0], CorefDocument):
        documents = []
        for i, e in zip(indices, examples):
            first = split.rows[i]
            document = side([list(s) for s in e.sentences], list(range(first, first + len(e.sentences))))
            document["clusters"] = e.clusters
            documents.append(document)
        return {"documents": documents}
    if isinstance(examples[0], SentencePair):
        n = len(split.examples)
        batch = {"premise": side([e.premise for e in examples], list(indices)),
                 "hypothesis": side([e.hypothesis for e in examples], [n + i for i in indices])}
    else:
        rows = [split.rows[i] for i in indices] if split.rows is not None else list(indices)
        batch = side([e.tokens for e in examples], rows)
    if isinstance(examples[0], SrlInstance):
        predicate = torch.zeros(batch["mask"].shape, dtype=torch.long)
        for row, e in enumerate(examples):
            predicate[row, e.predicate] = 1
        batch["predicate"] = predicate
    if isinstance(examples[0], TaggedSentence):
        tags = torch.zeros(batch["mask"].shape, dtype=torch.long)
        for row, e in enumerate(examples):
            tags[row, :len(e.tags)] = torch.tensor([labels.get(t, 0) for t in e.tags], dtype=torch.long)
        batch["tags"] = tags
    else:
        batch["label"] = torch.tensor([labels.get(e.label, 0) for e in examples], dtype=torch.long)
    return batch


def read_split(config: TaskConfig, which: str) -> list | None:
    spec = getattr(config.data, which)
    if spec is None:
        return None
    return read_dataset(config.data.kind, spec.path, spec.split)


def load_splits(config: TaskConfig) -> dict[str, list]:
    """train / dev / test examples; dev carved from train when the config asks for it."""
    train = read_split(config, "train")
    if config.data.train_examples:
        train = train[:config.data.train_examples]
    generator = random.Random(config.train.seed)
    if config.data.dev is None:
        order = list(range(len(train)))
        random.Random(0).shuffle(order)  # the same dev set for every seed
        n_dev = max(1, round(config.data.dev_fraction * len(train)))
        dev = [train[i] for i in sorted(order[:n_dev])]
        train = [train[i] for i in sorted(order[n_dev:])]
    else:
        dev = read_split(config, "dev")
    if config.data.train_fraction < 1.0:
        order = list(range(len(train)))
        generator.shuffle(order)
        keep = max(1, round(config.data.train_fraction * len(train)))
        train = [train[i] for i in sorted(order[:keep])]
    if config.task == "coref" and config.data.chunk_sentences:
        from elmo.tasks.coref import split_document

        train = [piece for document in train for piece in split_document(document, config.data.chunk_sentences)]
    splits = {"train": train, "dev": dev}
    test = read_split(config, "test")
    if test is not None:
        splits["test"] = test
    return splits


# ------------------------------------------------------------------------------------ model
def build_model(config: TaskConfig, embeddings: torch.Tensor, labels: Sequence[str], n_layers: int,
                dim: int) -> torch.nn.Module:
    """The task model of ``config.task`` on the given word vectors, predicting ``labels`` (the
    label names in output order); ``n_layers``/``dim`` are the biLM's."""
    features = TokenFeatures(embeddings, freeze=config.model.freeze_vectors, char_filters=config.model.char_filters)
    elmo = TaskElmo(config.elmo, n_layers, dim)
    m = config.model
    n_labels = len(labels)
    if config.task == "tagging":
        from elmo.tasks.tagger import Tagger

        return Tagger(features, elmo, n_labels, hidden=m.hidden, layers=m.layers, dropout=m.dropout, crf=m.crf)
    if config.task == "qa":
        from elmo.tasks.squad import BiDAF

        return BiDAF(features, elmo, hidden=m.hidden, dropout=m.dropout, modelling_layers=m.modelling_layers,
                     max_answer_length=m.max_answer_length)
    if config.task == "coref":
        from elmo.tasks.coref import CorefModel

        return CorefModel(features, elmo, hidden=m.hidden, dropout=m.dropout, max_span_width=m.max_span_width,
                          spans_per_word=m.spans_per_word, max_antecedents=m.max_antecedents,
                          feature_dim=m.feature_dim, ffnn_hidden=m.ffnn_hidden, mention_loss=m.mention_loss)
    if config.task == "srl":
        from elmo.tasks.srl import SrlTagger

        return SrlTagger(features, elmo, labels, hidden=m.hidden, layers=m.layers, dropout=m.dropout,
                         predicate_dim=m.predicate_dim)
    from elmo.tasks.classifiers import ESIM, SentenceClassifier

    if config.task == "classification":
        return SentenceClassifier(features, elmo, n_labels, hidden=m.hidden, dropout=m.dropout)
    return ESIM(features, elmo, n_labels, hidden=m.hidden, dropout=m.dropout)


def load_bilm_source(config: TaskConfig):
    """The Embedder that computes ELMo layers for this config (None for a baseline)."""
    if not config.elmo.enabled:
        return None
    from elmo.hub import load_model
    from elmo.inference.embed import Embedder

    return Embedder(load_model(config.bilm.model), state=config.bilm.state, batch_size=config.bilm.batch_size)


def bilm_layer_shape(embedder) -> tuple[int, int]:
    """``(n_layers, dim)`` of the ELMo layers ``embedder`` gives, which size a task model's scalar
    mix and ELMo input; ``(1, 1)`` for a baseline (``embedder`` None), whose ELMo parts are empty."""
    if embedder is None:
        return 1, 1
    return embedder.model.config.n_output_layers, 2 * embedder.model.config.lstm.projection_dim


# ------------------------------------------------------------------------------------ metrics
def score(config: TaskConfig, gold: list, predicted: list) -> float:
    """Span F1 (seqeval, on IOB2 tags), the CoNLL-2005 SRL F1, the CoNLL coreference F1 (the
    average of MUC, B-cubed and CEAF-e over the whole corpus), or accuracy (per token for
    tagging), as a fraction."""
    if config.metric == "coref_f1":
        from elmo.tasks.coref import coref_scores, corpus_clusters

        return coref_scores(corpus_clusters(gold), corpus_clusters(predicted))["conll_f1"]
    if config.metric == "squad_f1":
        from elmo.tasks.squad import squad_scores

        return squad_scores(gold, predicted)["f1"]
    if config.metric == "srl_f1":
        from elmo.tasks.srl import srl_scores

        return srl_scores(gold, predicted)["f1"]
    if config.metric == "span_f1":
        from seqeval.metrics import f1_score

        return float(f1_score(gold, predicted))
    if config.task == "tagging":
        pairs = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
    else:
        pairs = list(zip(gold, predicted))
    return sum(g == p for g, p in pairs) / max(len(pairs), 1)


@torch.no_grad()
def predict(model, split: LoadedSplit, vocab: WordVocab, labels: dict[str, int], batch_size: int) -> list:
    """Predicted labels (strings) for every example of the split, in order; for coreference, the
    predicted clusters of each document; for reading comprehension, each answer's text."""
    names = {i: name for name, i in labels.items()}
    model.eval()
    out = []
    for start in range(0, len(split.examples), batch_size):
        indices = list(range(start, min(start + batch_size, len(split.examples))))
        if isinstance(split.examples[0], CorefDocument):
            out.extend(model.predict(make_batch(split, indices, vocab, labels)))
            continue
        if isinstance(split.examples[0], SquadQuestion):
            spans = model.predict(make_batch(split, indices, vocab, labels))
            out.extend(split.examples[i].context.answer_text(*span) for i, span in zip(indices, spans))
            continue
        for prediction in model.predict(make_batch(split, indices, vocab, labels)):
            out.append([names[t] for t in prediction] if isinstance(prediction, list) else names[prediction])
    return out


def evaluate_split(config, model, split: LoadedSplit, vocab, labels, details: dict | None = None) -> float:
    """The split's score under ``config.metric``; for SRL, ``details`` (a dict, if given) receives
    the precision, recall and per-role scores too, for coreference every CoNLL metric, and for
    classification and sentence pairs the per-class scores and confusion (:func:`class_scores`). On
    GAP examples a coreference model is scored as GAP scores it (:func:`elmo.tasks.coref.gap_scores`):
    the score is the overall F1 and ``details`` gets the rest."""
    predicted = predict(model, split, vocab, labels, config.train.batch_size)
    if split.examples and isinstance(split.examples[0], GapExample):
        from elmo.tasks.coref import gap_scores

        result = gap_scores(split.examples, predicted)
        if details is not None:
            details.update(result)
        return result["overall"]["f1"]
    gold = [labels_of(e) for e in split.examples]
    if details is not None and config.metric == "coref_f1":
        from elmo.tasks.coref import coref_scores, corpus_clusters

        details.update(coref_scores(corpus_clusters(gold), corpus_clusters(predicted)))
    if details is not None and config.metric == "squad_f1":
        from elmo.tasks.squad import squad_scores

        details.update(squad_scores(gold, predicted))
        details["predictions"] = {e.id: p for e, p in zip(split.examples, predicted)}
    if details is not None and config.metric == "srl_f1":
        from elmo.tasks.srl import srl_scores

        details.update(srl_scores(gold, predicted))
    if details is not None and config.task in ("classification", "pair"):
        details.update(class_scores(gold, predicted))
    return score(config, gold, predicted)


def class_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict:
    """Per-class counts and scores of a classification: ``{"classes": {label: {"gold",
    "predicted", "correct", "precision", "recall", "f1"}}, "confusion": {gold label: {predicted
    label: count}}}``, the classes in sorted order; a class never predicted has precision 0."""
    confusion = {label: {other: 0 for other in sorted(set(gold) | set(predicted))}
                 for label in sorted(set(gold) | set(predicted))}
    for g, p in zip(gold, predicted):
        confusion[g][p] += 1
    classes = {}
    for label, row in confusion.items():
        n_gold, correct = sum(row.values()), row[label]
        n_predicted = sum(confusion[other][label] for other in confusion)
        precision = correct / n_predicted if n_predicted else 0.0
        recall = correct / n_gold if n_gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        classes[label] = {"gold": n_gold, "predicted": n_predicted, "correct": correct,
                          "precision": precision, "recall": recall, "f1": f1}
    return {"classes": classes, "confusion": confusion}


# ------------------------------------------------------------------------------------ running
def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _save(path: str, payload: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def _layers_for(embedder, splits: dict[str, list], config: TaskConfig, progress: bool) -> dict[str, LoadedSplit]:
    out = {}
    for name, examples in splits.items():
        layers = None
        if embedder is not None:
            label = f"{config.data.kind}-{name}"
            layers = load_or_compute(embedder, sentences_of(examples), config.cache_dir, label, progress=progress)
        out[name] = LoadedSplit(examples, layers)
    return out


def train_task(config: TaskConfig, *, resume: bool = False, progress: bool = True) -> dict:
    """Train ``config``'s model with early stopping on dev; returns the final metrics dict.

    A path in the config that is not there fails first (:func:`check_task_paths`), and the run
    directory is only created once the data, the vectors and the biLM have loaded: a config that
    cannot run leaves nothing behind."""
    check_task_paths(config)
    _seed_everything(config.train.seed)
    started = time.time()
    splits = load_splits(config)
    answer_mapping = None
    if config.task == "qa":
        # Training needs a gold span; evaluation keeps every question and all its answers.
        from elmo.tasks.readers import answer_mapping_counts

        answer_mapping = answer_mapping_counts(splits["train"])
        splits["train"] = [q for q in splits["train"] if q.span is not None]
        if progress:
            print(f"training answers: {answer_mapping}; {answer_mapping['unmapped']} question(s) without a span "
                  f"skipped in training")
    label_names = sorted(label_set(splits["train"]))
    labels = {name: i for i, name in enumerate(label_names)}
    if config.data.vectors:
        # Dev and test words join the vocabulary only where they have a pretrained vector.
        every_word = {w.lower() for examples in splits.values() for s in sentences_of(examples) for w in s}
        vocab = WordVocab.build(sentences_of(splits["train"]), also=every_word & vector_words(config.data.vectors))
        embeddings, found = load_glove(config.data.vectors, vocab, seed=config.train.seed)
    else:
        vocab = WordVocab.build(sentences_of(splits["train"]))
        embeddings = torch.randn(len(vocab), FALLBACK_VECTOR_DIM) * 0.1
        embeddings[0] = 0
        found = 0

    embedder = load_bilm_source(config)
    data = _layers_for(embedder, splits, config, progress)
    n_layers, dim = bilm_layer_shape(embedder)
    os.makedirs(config.output, exist_ok=True)
    atomic_write_text(os.path.join(config.output, "config.json"), json.dumps(config.to_dict(), indent=1))
    _seed_everything(config.train.seed)
    model = build_model(config, embeddings, label_names, n_layers, dim)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=config.train.learning_rate)
    history: list[dict] = []
    best_score, best_epoch, first_epoch = -math.inf, 0, 1
    # Seconds spent by earlier processes on this run, up to their last checkpoint: a resumed run
    # reports its whole time, not just the part since the resume.
    earlier_seconds: float | None = 0.0
    # Each epoch shuffles the previous epoch's order in place, so the order is part of the state.
    order = list(range(len(data["train"].examples)))
    last_path = os.path.join(config.output, "last.pt")
    if resume and os.path.isfile(last_path):
        state = torch.load(last_path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        history, best_score, best_epoch = state["history"], state["best_score"], state["best_epoch"]
        first_epoch = state["epoch"] + 1
        torch.set_rng_state(state["torch_rng"])
        random.setstate(_tuple_state(state["python_rng"]))
        earlier_seconds = state.get("seconds")  # None: a checkpoint from before this was recorded
        order = state["order"] if "order" in state else _replayed_order(len(order), config.train.seed,
                                                                         state["epoch"], random.getstate())
        if order is None:
            warnings.warn(f"{last_path}: an older checkpoint without the example order, which could not be "
                          f"replayed; the run goes on with a new order, so it will not match an uninterrupted run")
            order = list(range(len(data["train"].examples)))

    for epoch in range(first_epoch, config.train.epochs + 1):
        if epoch - best_epoch > config.train.patience and best_epoch > 0:
            break
        model.train()
        random.shuffle(order)
        total, batches = 0.0, 0
        bar = tqdm(range(0, len(order), config.train.batch_size), desc=f"epoch {epoch}", unit="batch",
                   disable=not progress, leave=False)
        for start in bar:
            batch = make_batch(data["train"], order[start:start + config.train.batch_size], vocab, labels)
            loss = model.loss(batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
            bar.set_postfix(loss=f"{total / batches:.3f}")
        dev_score = evaluate_split(config, model, data["dev"], vocab, labels)
        history.append({"epoch": epoch, "train_loss": total / max(batches, 1), "dev": dev_score})
        if progress:
            print(f"epoch {epoch}: train loss {total / max(batches, 1):.4f}, dev {config.metric} {dev_score:.4f}")
        payload = _payload(config, model, vocab, label_names, n_layers, dim)
        if dev_score > best_score:
            best_score, best_epoch = dev_score, epoch
            _save(os.path.join(config.output, "best.pt"), payload)
        _save(last_path, {**payload, "optimizer": optimizer.state_dict(), "epoch": epoch, "history": history,
                          "best_score": best_score, "best_epoch": best_epoch, "torch_rng": torch.get_rng_state(),
                          "python_rng": _list_state(random.getstate()), "order": order,
                          "seconds": (earlier_seconds or 0.0) + time.time() - started})

    best = load_task_model(config.output)[0]
    metrics = {"task": config.task, "metric": config.metric, "elmo": config.to_dict()["elmo"],
               "best_epoch": best_epoch, "dev": evaluate_split(config, best, data["dev"], vocab, labels),
               "history": history, "train_examples": len(data["train"].examples),
               "words_with_vectors": found, "vocabulary": len(vocab),
               "layer_weights": best.elmo.layer_weights(),
               "seconds": round((earlier_seconds or 0.0) + time.time() - started, 1)}
    if earlier_seconds is None:
        # Resumed from a checkpoint without the earlier processes' time: "seconds" counts only
        # this process, from this epoch on.
        metrics["seconds_counted_from_epoch"] = first_epoch
    if answer_mapping is not None:
        metrics["train_answer_mapping"] = answer_mapping
    if "test" in data:
        details: dict = {}
        metrics["test"] = evaluate_split(config, best, data["test"], vocab, labels, details)
        predictions = details.pop("predictions", None)
        if predictions is not None:
            atomic_write_text(os.path.join(config.output, "test-predictions.json"), json.dumps(predictions) + "\n")
        if details:
            metrics["test_details"] = details
    atomic_write_text(os.path.join(config.output, "metrics.json"), json.dumps(metrics, indent=1))
    return metrics


def _replayed_order(n: int, seed: int, epochs: int, python_state: tuple) -> list[int] | None:
    """The example order after ``epochs`` epochs of a run seeded with ``seed``, for checkpoints
    that predate saving it: only the epochs' shuffles draw from Python's ``random`` after the
    seeding, so replaying them gives the order exactly when it ends in the saved state (checked;
    None when it does not)."""
    replay = random.Random(seed)
    order = list(range(n))
    for _ in range(epochs):
        replay.shuffle(order)
    return order if replay.getstate() == python_state else None


def _payload(config, model, vocab, label_names, n_layers, dim) -> dict:
    return {"format": CHECKPOINT_FORMAT, "config": config.to_dict(), "model": model.state_dict(),
            "vocab": vocab.words[2:], "labels": label_names, "bilm_layers": n_layers, "bilm_dim": dim}


def _list_state(state):
    """random.getstate() as nested lists (loadable with weights_only=True)."""
    return [state[0], list(state[1]), state[2]]


def _tuple_state(state):
    return (state[0], tuple(state[1]), state[2])


def load_task_model(run_dir: str | os.PathLike, sentences: Iterable[Sequence[str]] | None = None, *,
                    vectors: str | os.PathLike | None = None):
    """``(model, config, vocab, labels)`` of a run's best checkpoint, in eval mode.

    ``sentences``: the text the model is about to read. Its words that are not in the run's
    vocabulary but have a vector in the run's vectors file (``data.vectors`` of its config, or
    ``vectors`` when that file has moved) join the vocabulary with their pretrained vectors, as
    the words of dev and test did in training; otherwise every word new to the run would read as
    ``<unk>``. The run's own rows, fine-tuned or not, are kept.
    """
    path = os.path.join(run_dir, "best.pt")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no best checkpoint; is {run_dir} a task run directory?")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not an elmo task checkpoint")
    config = task_config_from_dict(payload["config"], where=path)
    vocab = WordVocab(payload["vocab"])
    embeddings = payload["model"]["features.words.weight"]
    model = build_model(config, embeddings, payload["labels"], payload["bilm_layers"], payload["bilm_dim"])
    model.load_state_dict(payload["model"])
    labels = {name: i for i, name in enumerate(payload["labels"])}
    if sentences is not None:
        vocab = add_pretrained_words(model, config, vocab, sentences, vectors, where=path)
    elif vectors is not None:
        raise ValueError("load_task_model: vectors is only used with sentences")
    return model.eval(), config, vocab, labels


def add_pretrained_words(model: torch.nn.Module, config: TaskConfig, vocab: WordVocab,
                         sentences: Iterable[Sequence[str]], vectors: str | os.PathLike | None = None,
                         where: str = "run") -> WordVocab:
    """The vocabulary extended by the words of ``sentences`` that it lacks and that have a vector
    in the run's vectors file (``vectors``, by default ``config.data.vectors``); their vectors
    are appended to ``model``'s word embedding (:meth:`TokenFeatures.add_words`). A run trained
    without pretrained vectors has none to add. A vectors file that is not there, when there are
    new words to look up, is an error naming ``data.vectors`` and the path."""
    if config.data.vectors is None:
        if vectors is not None:
            raise ValueError(f"{where}: the run was trained without pretrained vectors (data.vectors is not set), "
                             f"so {vectors} cannot give its words vectors")
        return vocab
    new = {w.lower() for s in sentences for w in s} - vocab.index.keys()
    if not new:
        return vocab
    source = os.fspath(vectors) if vectors is not None else config.data.vectors
    if not os.path.isfile(source):
        hint = "" if os.path.isabs(source) else f" (relative to the current directory, {os.getcwd()})"
        raise FileNotFoundError(
            f"{where}: data.vectors: {source}: no such file{hint}. It is needed to give the {len(new)} word(s) "
            f"the run never saw their pretrained vectors instead of <unk>; pass the same vectors file "
            f"(elmo task evaluate --vectors PATH) if it has moved")
    found, dim = load_vectors(source, new)
    words = model.features.words
    if dim != words.embedding_dim:
        raise ValueError(f"{where}: data.vectors: {source} has {dim}-dimensional vectors, but the run's word "
                         f"embedding has {words.embedding_dim}: not the file the run was trained with")
    if not found:
        return vocab
    extended = vocab.extended(found)
    model.features.add_words(torch.from_numpy(np.stack([found[w] for w in extended.words[len(vocab):]])))
    return extended


def unknown_tokens(sentences: Iterable[Sequence[str]], vocab: WordVocab) -> tuple[int, int]:
    """``(tokens that read as <unk>, all tokens)`` of ``sentences`` under ``vocab``."""
    ids = [vocab.id(w) for s in sentences for w in s]
    return sum(i == UNK for i in ids), len(ids)


def evaluate_task(run_dir: str | os.PathLike, path: str, split: str | None = None, *, kind: str | None = None,
                  vectors: str | os.PathLike | None = None, predictions: str | os.PathLike | None = None,
                  progress: bool = True) -> dict:
    """Score a run's best model on a data file, read as dataset ``kind`` (by default the run's
    own; e.g. ``kind="snli"`` scores a SICK model on SNLI). Gold labels the model never saw are
    an error, not a silent miss, except for SRL and for tagging, where a role or tag absent from
    training is a real part of some test sets (CoNLL-2000's test set has ``I-LST``, its training
    set not): they count as missed and ``unseen_labels`` lists them, unless more than half of the
    file's tags are unknown to the model, which is an error (the wrong data or model). Words
    of the data that the run never saw get their vectors from the run's vectors file (``vectors``
    where it has moved; see :func:`add_pretrained_words`); the result counts them
    (``words_added``) and the tokens that still read as ``<unk>``. A reading-comprehension run
    also writes the official prediction file (question id -> answer text) to ``predictions``
    (default: ``RUN/predictions-<data file name>.json``), named in the result's ``predictions``."""
    model, config, vocab, labels = load_task_model(run_dir)
    kind = kind or config.data.kind
    examples = read_dataset(kind, path, split)
    for task, record in (("coref", CorefDocument), ("qa", SquadQuestion)):
        if examples and isinstance(examples[0], record) != (config.task == task):
            raise ValueError(f"{path}: data of kind {kind!r} cannot be scored by the {config.task} model in {run_dir}")
    gold_labels = label_set(examples)
    unknown = gold_labels - labels.keys()
    # A role or tag that training never saw can be part of the test data (SRL's rare roles,
    # CoNLL-2000's I-LST): it counts as missed, as the span metrics and accuracy count it. Where
    # most of the file's tags are unknown, or for a class of a classification, it means the
    # wrong data or model.
    tolerated = config.task == "srl" or (config.task == "tagging" and len(unknown) * 2 <= len(gold_labels))
    if unknown and not tolerated:
        raise ValueError(f"{path}: label(s) {', '.join(sorted(unknown))} are not among those the model "
                         f"in {run_dir} was trained on ({', '.join(labels)})")
    sentences = sentences_of(examples)
    trained_words = len(vocab)
    vocab = add_pretrained_words(model, config, vocab, sentences, vectors,
                                 where=os.path.join(os.fspath(run_dir), "best.pt"))
    embedder = load_bilm_source(config)
    layers = None
    if embedder is not None:
        layers = load_or_compute(embedder, sentences, config.cache_dir, f"{config.data.kind}-eval",
                                 progress=progress)
    details: dict = {}
    value = evaluate_split(config, model, LoadedSplit(examples, layers), vocab, labels, details)
    n_unknown, n_tokens = unknown_tokens(sentences, vocab)
    metric = "gap_f1" if examples and isinstance(examples[0], GapExample) else config.metric
    result = {"run": os.fspath(run_dir), "data": path, "split": split, "kind": kind,
              "metric": metric, "score": value, "examples": len(examples),
              "words_added": len(vocab) - trained_words, "tokens": n_tokens, "unknown_tokens": n_unknown}
    answers = details.pop("predictions", None)
    if answers is not None:  # reading comprehension: the official prediction file, question id -> answer
        if predictions is None:
            stem = os.path.basename(os.path.normpath(path)).removesuffix(".gz").removesuffix(".json")
            predictions = os.path.join(run_dir, f"predictions-{stem}.json")
        atomic_write_text(predictions, json.dumps(answers, ensure_ascii=False) + "\n")
        result["predictions"] = os.fspath(predictions)
    if details:
        result["details"] = details
    if unknown:
        result["unseen_labels"] = sorted(unknown)
    return result


__all__ = ["add_pretrained_words", "build_model", "class_scores", "evaluate_task", "load_splits", "load_task_model", "make_batch",
           "score", "train_task", "unknown_tokens"]
