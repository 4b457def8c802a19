"""The one check of a count and the one of a real number (elmo.checks), and every entry of a
batch size refusing a bad one in the same words: the library (Embedder, AllenNLP's
ElmoEmbedder), elmo embed, elmo train, the AllenNLP command, the server's options and a task
config's fields."""

import math

import numpy as np
import pytest
from conftest import ALLENNLP, FIXTURE_MODEL_ARGS
from test_train import CORPUS, VOCAB

from elmo.allennlp import ElmoEmbedder
from elmo.allennlp.command import main as allennlp_main
from elmo.checks import check_count, check_number
from elmo.cli.main import main
from elmo.inference.embed import Embedder
from elmo.tasks.config import BiLMSource, TrainConfig


def refusal(check, *args, **kwargs) -> str:
    """The message of the ValueError ``check(*args, **kwargs)`` raises."""
    with pytest.raises(ValueError) as e:
        check(*args, **kwargs)
    return str(e.value)


def test_a_count_is_an_integer_of_at_least_the_least():
    assert check_count(1, "n") == 1 and check_count(np.int64(7), "n") == 7
    assert check_count(0, "n", 0) == 0 and check_count(5, "n", 0, 5) == 5
    assert refusal(check_count, 0, "batch_size") == "batch_size: must be at least 1, got 0"
    assert refusal(check_count, -1, "--batch-size") == "--batch-size: must be at least 1, got -1"
    assert refusal(check_count, -1, "--seed", 0) == "--seed: must be at least 0, got -1"
    assert refusal(check_count, 9, "seed", 0, 8) == "seed: must be at least 0 and at most 8, got 9"
    for bad, shown in [(2.5, "2.5"), (True, "True"), ("8", "'8'"), (None, "None")]:
        assert refusal(check_count, bad, "batch_size") == \
            f"batch_size: must be at least 1, got {shown}, which is not an integer"


def test_a_number_is_finite_and_within_its_bounds():
    assert check_number(0.0, "l2") == 0.0 and check_number(3, "rate", 0, above=True) == 3
    assert check_number(0.0, "dropout", 0, below=1) == 0.0
    assert refusal(check_number, -1.0, "--max-wait-ms") == "--max-wait-ms: must be at least 0, got -1"
    assert refusal(check_number, 0.0, "lr", 0, above=True) == "lr: must be above 0, got 0"
    assert refusal(check_number, 1.0, "dropout", 0, below=1) == "dropout: must be at least 0 and below 1, got 1"
    for bad, shown in [(math.nan, "nan"), (math.inf, "inf"), ("0.1", "'0.1'"), (False, "False")]:
        assert refusal(check_number, bad, "lr", 0, above=True) == \
            f"lr: must be above 0, got {shown}, which is not a finite number"


@pytest.fixture(scope="module")
def allennlp_embedder():
    return ElmoEmbedder(ALLENNLP / "options.json", ALLENNLP / "lm_weights.hdf5")


@pytest.mark.parametrize("bad", [0, -1])
def test_every_entry_refuses_a_bad_batch_size_in_the_same_words(bad, tmp_path, capsys, allennlp_model,
                                                                 allennlp_embedder):
    """Each names its own argument, option or field, in the words of check_count, and refuses
    before any work: no output file, no run directory."""
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    out = tmp_path / "out.hdf5"

    # The library: the Embedder and AllenNLP's ElmoEmbedder (both methods that take a batch size).
    wording = refusal(check_count, bad, "batch_size")
    assert refusal(Embedder, allennlp_model, batch_size=bad) == wording
    assert refusal(lambda: list(allennlp_embedder.embed_sentences([["a"]], batch_size=bad))) == wording
    with src.open() as f:
        assert refusal(allennlp_embedder.embed_file, f, str(out), batch_size=bad) == wording

    # The command lines: elmo embed, elmo train, python -m elmo.allennlp elmo.
    wording = refusal(check_count, bad, "--batch-size")
    assert main(["embed", str(src), str(out), *FIXTURE_MODEL_ARGS, "--batch-size", str(bad)]) == 2
    assert capsys.readouterr().err == f"elmo embed: error: {wording}\n"
    run = tmp_path / "run"
    assert main(["train", "--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(run),
                 "--batch-size", str(bad)]) == 2
    assert capsys.readouterr().err == f"elmo train: error: {wording}\n"
    assert allennlp_main(["elmo", str(src), str(out), "--all", "--batch-size", str(bad),
                          "--options-file", str(ALLENNLP / "options.json"),
                          "--weight-file", str(ALLENNLP / "lm_weights.hdf5")]) == 2
    assert capsys.readouterr().err == f"python -m elmo.allennlp elmo: error: {wording}\n"

    # The server: its batch is --max-batch-tokens, refused before the model loads.
    assert main(["serve", *FIXTURE_MODEL_ARGS, "--max-batch-tokens", str(bad)]) == 2
    assert capsys.readouterr().err == f"elmo serve: error: {refusal(check_count, bad, '--max-batch-tokens')}\n"

    # A task config: [train] and [bilm] (from the command line: tests/test_task_training.py).
    assert refusal(TrainConfig, batch_size=bad) == refusal(check_count, bad, "train.batch_size")
    assert refusal(BiLMSource, batch_size=bad) == refusal(check_count, bad, "bilm.batch_size")

    assert not out.exists() and not run.exists()
