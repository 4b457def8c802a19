"""Training: data streams, losses, resume after SIGKILL, data-parallel equivalence, export,
evaluation and fine-tuning, on the tiny corpus of the original's test suite."""

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import FIXTURES
from elmo import load_bilm_tf
from elmo.bilm import FORWARD
from elmo.chars import batch_to_char_ids
from elmo.data import LMBatcher, SentenceStream, count_tokens
from elmo.evaluate import evaluate
from elmo.lm import load_language_model, load_train_checkpoint
from elmo.softmax import Softmax, expected_count, log_uniform_sample
from elmo.train import TrainSettings, train
from elmo.vocab import Vocabulary

CORPUS = FIXTURES / "bilm-tf" / "train" / "data.txt"
VOCAB = FIXTURES / "bilm-tf" / "train" / "vocab.txt"
CLI = [sys.executable, "-m", "elmo.cli.main"]


def tiny_settings(output, **kw) -> TrainSettings:
    values = dict(train=[str(CORPUS)], vocab=str(VOCAB), output=str(output), config="tiny", batch_size=4,
                  unroll_steps=10, max_tokens=4 * 10 * 20, checkpoint_every=5, log_every=5, progress=False, seed=1)
    values.update(kw)
    return TrainSettings(**values)


def final_parameters(run_dir):
    return load_train_checkpoint(sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1])["model"]


# ------------------------------------------------------------------------------------- data
def test_count_tokens_counts_words_plus_end_marker(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_text("a b c\n\nd e\n")
    assert count_tokens([str(shard)]) == (2, 3 + 1 + 2 + 1)


def test_stream_windows_continue_sentences(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_text("a b c\nd e\n")
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b", "c", "d", "e"])
    stream = SentenceStream([str(shard)], shuffle=False)
    batcher = LMBatcher(stream, vocab, batch_size=1, unroll_steps=3)
    first, second = batcher.next_batch(), batcher.next_batch()
    words = vocab.words
    # Stream: <S> a b c </S> | <S> d e </S>; every pair (input, next) once, "</S> -> <S>" never.
    assert [words[i] for i in first["targets"][0].tolist()] == ["a", "b", "c"]
    assert [words[i] for i in second["targets"][0].tolist()] == ["</S>", "d", "e"]
    expected_inputs, _ = batch_to_char_ids([["c", "<S>", "d"]])
    assert torch.equal(second["char_ids"], expected_inputs)
    assert second["sentence_ids"][0].tolist() == [0, 1, 1]
    third = batcher.next_batch()
    assert third["mask"][0].tolist() == [True, False, False]  # finite stream ran dry
    assert batcher.next_batch() is None


def test_backward_stream_reads_reversed(tmp_path):
    shard = tmp_path / "s.txt"
    shard.write_text("a b c\n")
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b", "c"])
    batcher = LMBatcher(SentenceStream([str(shard)], shuffle=False, reverse=True), vocab, 1, 4)
    assert [vocab.words[i] for i in batcher.next_batch()["targets"][0].tolist()] == ["c", "b", "a", "<S>"]


def test_batcher_state_dict_resumes_exactly(tmp_path):
    shards = []
    for k in range(3):
        shards.append(tmp_path / f"s{k}.txt")
        shards[-1].write_text("\n".join(f"w{k} x{i} y{i % 3} z" for i in range(7)) + "\n")
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "z"])
    make = lambda: LMBatcher(SentenceStream([str(s) for s in shards], seed=3), vocab, 3, 5)  # noqa: E731
    a = make()
    for _ in range(4):
        a.next_batch()
    b = make()
    b.load_state_dict(a.state_dict())
    for _ in range(30):  # across shard and pass boundaries
        x, y = a.next_batch(), b.next_batch()
        for key in x:
            assert torch.equal(x[key], y[key])


def test_rows_slice_matches_the_global_batch():
    vocab = Vocabulary.from_file(VOCAB)
    whole = LMBatcher(SentenceStream([str(CORPUS)], seed=0), vocab, 4, 6).next_batch()
    half = LMBatcher(SentenceStream([str(CORPUS)], seed=0), vocab, 4, 6, rows=slice(2, 4)).next_batch()
    assert torch.equal(half["char_ids"], whole["char_ids"][2:4])
    assert torch.equal(half["targets"], whole["targets"][2:4])


# ----------------------------------------------------------------------------------- softmax
def test_log_uniform_sample_is_distinct_and_corrected():
    g = torch.Generator().manual_seed(0)
    ids, counts, tries = log_uniform_sample(5000, 300, "cpu", g)
    assert len(set(ids.tolist())) == 300 and tries >= 300
    assert ids.min() >= 0 and ids.max() < 5000
    torch.testing.assert_close(counts, expected_count(ids, 5000, tries))
    # Frequent (low) ids are drawn far more often than rare ones.
    assert (ids < 100).float().mean() > 0.2


def test_sampled_loss_masks_accidental_hits():
    softmax = Softmax(3, 4)
    hidden, targets = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    # With every word sampled, each row's own target among the negatives must be masked out:
    # the result is finite and equals a softmax over the corrected logits without duplicates.
    loss = softmax.sampled_loss(hidden, targets, n_samples=3, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(loss).all() and (loss > 0).all()


# ---------------------------------------------------------------------------------- training
def test_training_lowers_the_loss(tmp_path):
    result = train(tiny_settings(tmp_path / "run", max_tokens=4 * 10 * 60, log_every=20, checkpoint_every=60))
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    first_loss = float(rows[1].split(",")[2])
    assert result["step"] == 60 and result["loss"] < first_loss - 0.5
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    options = (tmp_path / "run" / "options.json").read_text()
    assert '"n_train_tokens": 139' in options  # counted from the data, never hand-set


def test_existing_run_needs_resume(tmp_path):
    train(tiny_settings(tmp_path / "run", max_tokens=40 * 5))
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny_settings(tmp_path / "run"))


def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path):
    args = ["train", "--train", str(CORPUS), "--vocab", str(VOCAB), "--config", "tiny", "--batch-size", "4",
            "--unroll-steps", "10", "--max-tokens", str(4 * 10 * 400), "--checkpoint-every", "20",
            "--log-every", "20", "--seed", "1", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*CLI, *args, "--output", str(tmp_path / "whole")], check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    process = subprocess.Popen([*CLI, *args, "--output", str(killed)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "checkpoints" / "step-000000060.pt").exists():
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = sorted((killed / "checkpoints").glob("step-*.pt"))
    assert saved and saved[-1].name != "step-000000400.pt", "the run finished before it could be killed"
    subprocess.run([*CLI, *args, "--output", str(killed), "--resume"], check=True, env=env, capture_output=True)

    whole, resumed = final_parameters(tmp_path / "whole"), final_parameters(killed)
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key
    metrics = (killed / "metrics.csv").read_text().splitlines()
    steps = [int(r.split(",")[0]) for r in metrics[1:]]
    assert steps == sorted(set(steps)) and steps[-1] == 400  # no step logged twice


def _ddp_worker(rank, world, port, output, result_queue):
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.set_num_threads(1)
    train(tiny_settings(output, dropout=0.0, n_negative_samples=0, max_tokens=4 * 10 * 3, checkpoint_every=3))


def test_two_processes_with_half_batch_equal_one_with_whole(tmp_path):
    import torch.multiprocessing as mp

    from elmo.cli.train import _free_port
    torch.set_num_threads(1)
    train(tiny_settings(tmp_path / "one", dropout=0.0, n_negative_samples=0, max_tokens=4 * 10 * 3, checkpoint_every=3))
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path / "two"), None), nprocs=2, join=True)
    one, two = final_parameters(tmp_path / "one"), final_parameters(tmp_path / "two")
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=0, atol=1e-5, msg=key)
    moved = load_train_checkpoint(sorted((tmp_path / "one" / "checkpoints").glob("*.pt"))[-1])
    assert moved["step"] == 3


# -------------------------------------------------------------------------- export, evaluate
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("trained") / "run"
    train(tiny_settings(run, max_tokens=4 * 10 * 40, checkpoint_every=40))
    return run


def test_export_loads_with_the_weights_loader_and_embeds(trained_run, tmp_path):
    out = tmp_path / "exported"
    subprocess.run([*CLI, "export", str(trained_run), "--output", str(out)], check=True, capture_output=True)
    assert sorted(os.listdir(out)) == ["options.json", "softmax_weights.hdf5", "vocab.txt", "weights.hdf5"]
    bilm = load_bilm_tf(out / "options.json", out / "weights.hdf5")
    model, _ = load_language_model(trained_run)
    for key, value in model.bilm.state_dict().items():
        assert torch.equal(bilm.state_dict()[key], value), key
    sentences = tmp_path / "s.txt"
    sentences.write_text("neural language models .\n")
    subprocess.run([*CLI, "embed", str(sentences), str(tmp_path / "e.hdf5"), "--options", str(out / "options.json"),
                    "--weights", str(out / "weights.hdf5")], check=True, capture_output=True)
    exported, vocab = load_language_model(out)
    a = evaluate(exported, vocab, [str(CORPUS)])
    b = evaluate(model, vocab, [str(CORPUS)])
    assert a["average_perplexity"] == pytest.approx(b["average_perplexity"], rel=1e-6)


def test_evaluate_matches_a_direct_computation(trained_run, tmp_path):
    model, vocab = load_language_model(trained_run)
    shard = tmp_path / "one.txt"
    shard.write_text("neural networks use words .\n")
    result = evaluate(model, vocab, [str(shard)], batch_size=1, per_sentence=True)
    words = "neural networks use words .".split()
    with torch.no_grad():
        inputs = ["<S>", *words]
        ids, mask = batch_to_char_ids([inputs])
        tokens = model.bilm.token_encoder(ids)
        outputs, _ = model.bilm.run_stack(FORWARD, tokens, mask, model.bilm.zero_state(1))
        log_probs = model.softmax.log_probs(outputs[-1][0])
        targets = vocab.encode([*words, "</S>"])
        forward_logprob = float(log_probs[torch.arange(len(targets)), torch.tensor(targets)].sum())
    assert result["forward_perplexity"] == pytest.approx(math.exp(-forward_logprob / 6), rel=1e-5)
    (index, fwd, bwd, count), = result["sentences"]
    assert (index, count) == (0, 6) and fwd == pytest.approx(forward_logprob, rel=1e-5)
    assert result["backward_perplexity"] == pytest.approx(math.exp(-bwd / 6), rel=1e-5)


def test_unigram_perplexity_of_uniform_data(trained_run, tmp_path):
    model, vocab = load_language_model(trained_run)
    shard = tmp_path / "u.txt"
    shard.write_text("of the\n")  # targets: of, the, </S> -> uniform over 3 types
    assert evaluate(model, vocab, [str(shard)])["unigram_perplexity"] == pytest.approx(3.0)


def test_finetune_keeps_vocabulary_and_lowers_in_domain_perplexity(trained_run, tmp_path):
    domain = tmp_path / "domain.txt"
    domain.write_text("the cat sat on the mat .\nthe dog sat on the log .\n" * 20)
    model, vocab = load_language_model(trained_run)
    before = evaluate(model, vocab, [str(domain)])["average_perplexity"]
    subprocess.run([*CLI, "finetune", str(trained_run), "--train", str(domain), "--output", str(tmp_path / "ft"),
                    "--batch-size", "4", "--unroll-steps", "10", "--max-tokens", "1600", "--no-progress"],
                   check=True, capture_output=True)
    tuned, tuned_vocab = load_language_model(tmp_path / "ft")
    assert tuned_vocab.words == vocab.words
    after = evaluate(tuned, tuned_vocab, [str(domain)])["average_perplexity"]
    assert after < 0.7 * before
