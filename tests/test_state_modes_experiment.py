"""experiments/state_modes.py: its sentence scoring agrees with elmo.training.evaluate, and its in-context
perplexity really reads the context."""

import math

import pytest
import torch
from conftest import ALLENNLP, load_experiment

from elmo.model.network import BACKWARD, FORWARD
from elmo.model.vocab import Vocabulary
from elmo.model.weights import load_bilm_tf
from elmo.training.evaluate import evaluate
from elmo.lm.model import LanguageModel
from elmo.lm.softmax import Softmax

WORDS = "the cat sat on a mat and dog ran far away".split()


@pytest.fixture(scope="module")
def state_modes():
    return load_experiment("state_modes")


@pytest.fixture(scope="module")
def lm():
    bilm = load_bilm_tf(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", *WORDS[:-2]])  # "far" and "away" are out of vocabulary
    model = LanguageModel(bilm.config, len(vocab))
    model.bilm = bilm
    torch.manual_seed(3)
    model.softmax = Softmax(len(vocab), bilm.config.lstm.projection_dim)
    with torch.no_grad():
        model.softmax.weight.normal_(0, 0.5)
    return model.eval(), vocab


def test_a_sentence_from_zero_scores_as_elmo_evaluate_scores_it(state_modes, lm, tmp_path):
    model, vocab = lm
    sentence = "the dog ran far away on a mat".split()
    path = tmp_path / "one.txt"
    path.write_text(" ".join(sentence) + "\n")
    expected = evaluate(model, vocab, [str(path)], batch_size=1, unroll_steps=50)
    for direction, name in ((FORWARD, "forward"), (BACKWARD, "backward")):
        nll, n, _ = state_modes.read_sentence(model, vocab, sentence, direction, model.bilm.zero_state(1))
        assert n == len(sentence) + 1
        assert math.exp(nll / n) == pytest.approx(expected[f"{name}_perplexity"], rel=1e-5)


def test_in_context_reads_the_context_and_empty_context_is_a_reset(state_modes, lm):
    model, vocab = lm
    tests = [["the", "cat", "sat", "on", "a", "mat"], ["a", "dog", "ran", "far", "away"]]
    empty = state_modes.perplexities(model, vocab, tests, [[[]], [[]]])
    assert empty["in context"] == pytest.approx(empty["reset"], rel=1e-9)
    assert empty["warm"] != pytest.approx(empty["reset"], rel=1e-6)
    context = [[["the", "dog", "sat"], ["a", "cat", "ran", "away"]]] * 2
    read = state_modes.perplexities(model, vocab, tests, context)
    assert read["reset"] == empty["reset"]
    assert read["in context"] != pytest.approx(read["reset"], rel=1e-6)
