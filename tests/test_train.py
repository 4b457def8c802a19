"""Training: data streams, losses, resume after SIGKILL, data-parallel equivalence, export,
evaluation and fine-tuning, on the tiny corpus of the original's test suite."""

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import FIXTURES

from elmo.hub import load_language_model
from elmo.hub.checkpoints import load_train_checkpoint
from elmo.model.chars import batch_to_char_ids
from elmo.model.network import FORWARD
from elmo.model.vocab import Vocabulary
from elmo.model.weights import load_bilm_tf
from elmo.model.weights import WeightsError
from elmo.training.data import (
    LMBatcher,
    PrefetchingBatcher,
    SentenceStream,
    count_tokens,
)
from elmo.training.evaluate import evaluate
from elmo.training.recipe import (
    CPU_MAX_BATCH,
    FINETUNE_MIN_BATCH,
    FINETUNE_UPDATES,
    TrainSettings,
    finetune_batch_size,
)
from elmo.lm.softmax import Softmax, expected_count, log_uniform_sample
from elmo.training.train import train

CORPUS = FIXTURES / "bilm-tf" / "train" / "data.txt"
VOCAB = FIXTURES / "bilm-tf" / "train" / "vocab.txt"
CLI = [sys.executable, "-m", "elmo.cli.main"]
ROOT = FIXTURES.parent.parent


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


def _three_shards(tmp_path):
    shards = []
    for k in range(3):
        shards.append(tmp_path / f"s{k}.txt")
        shards[-1].write_text("\n".join(f"w{k} x{i} y{i % 3} z" for i in range(7)) + "\n")
    return [str(s) for s in shards], Vocabulary(["<S>", "</S>", "<UNK>", "z"])


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetching_batcher_hands_out_the_same_batches_and_states(tmp_path, depth):
    paths, vocab = _three_shards(tmp_path)
    plain = LMBatcher(SentenceStream(paths, seed=3), vocab, 3, 5)
    ahead = PrefetchingBatcher(LMBatcher(SentenceStream(paths, seed=3), vocab, 3, 5), depth=depth)
    assert ahead.state_dict() == plain.state_dict()
    for _ in range(30):  # across shard and pass boundaries, with the thread batches ahead
        x, y = plain.next_batch(), ahead.next_batch()
        for key in x:
            assert torch.equal(x[key], y[key]), key
        # The state of the last batch handed out, not of the last one the thread built.
        assert ahead.state_dict() == plain.state_dict()
    resumed = PrefetchingBatcher(LMBatcher(SentenceStream(paths, seed=3), vocab, 3, 5), depth=depth)
    resumed.load_state_dict(ahead.state_dict())
    for _ in range(10):
        x, y = plain.next_batch(), resumed.next_batch()
        for key in x:
            assert torch.equal(x[key], y[key]), key
    ahead.close()
    resumed.close()
    with pytest.raises(RuntimeError, match="closed"):
        ahead.next_batch()


def test_prefetching_batcher_ends_with_a_finite_stream(tmp_path):
    paths, vocab = _three_shards(tmp_path)
    plain = LMBatcher(SentenceStream(paths, shuffle=False), vocab, 2, 4)
    ahead = PrefetchingBatcher(LMBatcher(SentenceStream(paths, shuffle=False), vocab, 2, 4))
    n = 0
    while (x := plain.next_batch()) is not None:
        y = ahead.next_batch()
        assert all(torch.equal(x[key], y[key]) for key in x)
        n += 1
    assert n > 5 and ahead.next_batch() is None and ahead.next_batch() is None
    assert not ahead._thread.is_alive()


def test_prefetching_batcher_raises_the_threads_error_naming_the_file(tmp_path):
    paths, vocab = _three_shards(tmp_path)
    os.remove(paths[1])  # gone after the run was set up
    ahead = PrefetchingBatcher(LMBatcher(SentenceStream(paths, shuffle=False), vocab, 2, 4))
    with pytest.raises(OSError, match="s1.txt"):
        while ahead.next_batch() is not None:
            pass
    assert not ahead._thread.is_alive()
    started = PrefetchingBatcher(LMBatcher(SentenceStream(paths[:1], shuffle=False), vocab, 2, 4))
    started.next_batch()
    with pytest.raises(RuntimeError, match="before its first batch"):
        started.load_state_dict(started.state_dict())
    started.close()
    with pytest.raises(ValueError, match="at least 1"):
        PrefetchingBatcher(LMBatcher(SentenceStream(paths[:1]), vocab, 2, 4), depth=0)


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
    torch.manual_seed(0)
    vocab_size, n_samples, seed = 6, 3, 3
    softmax = Softmax(vocab_size, 4)
    with torch.no_grad():
        softmax.bias.normal_()
    hidden, targets = torch.randn(7, 4), torch.tensor([0, 1, 2, 3, 4, 5, 0])
    loss = softmax.sampled_loss(hidden, targets, n_samples, generator=torch.Generator().manual_seed(seed))
    # The sampler by hand, from the same generator: inverse-CDF draws of the log-uniform
    # distribution until n_samples distinct ids are seen (here within the first round of draws).
    u = torch.rand(2 * n_samples, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    draws = (torch.exp(u * math.log(vocab_size + 1.0)).floor().long() - 1).clamp(0, vocab_size - 1).tolist()
    sampled, tries = [], 0
    for draw in draws:
        tries += 1
        if draw not in sampled:
            sampled.append(draw)
        if len(sampled) == n_samples:
            break
    assert sampled == [0, 3, 2] and tries == 6  # repeated draws count as tries
    # Corrected logit: h.w_k + b_k - log(expected count of k in `tries` draws).
    weight, bias, h = softmax.weight.detach().double(), softmax.bias.detach().double(), hidden.double()

    def corrected(row, k):
        p = math.log((k + 2) / (k + 1)) / math.log(vocab_size + 1.0)
        return float(h[row] @ weight[k] + bias[k]) - math.log(1.0 - (1.0 - p) ** tries)

    expected = []
    for row, target in enumerate(targets.tolist()):
        # A negative equal to the row's target (an accidental hit) takes no part at all.
        negatives = [corrected(row, k) for k in sampled if k != target]
        logits = torch.tensor([corrected(row, target), *negatives], dtype=torch.float64)
        expected.append(-float(torch.log_softmax(logits, dim=0)[0]))
    hits = [t in sampled for t in targets.tolist()]
    assert any(hits) and not all(hits)  # rows with and without a hit
    torch.testing.assert_close(loss.double(), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-6)


def test_sampled_losses_gradients_with_accidental_hits_match_float64():
    """With accidental hits masked, the gradients of the hidden states, the softmax weight and
    its bias (both directions, rows with and without a hit, the weight's rows gathered in one
    index) are those of the same loss written plainly in float64."""
    torch.manual_seed(4)
    softmax = Softmax(400, 8)
    with torch.no_grad():
        softmax.bias.normal_()
    hidden = [torch.randn(30, 8, requires_grad=True) for _ in range(2)]
    targets = [torch.randint(0, 40, (30,)) for _ in range(2)]  # frequent ids: many hits
    samples = [log_uniform_sample(400, 60, "cpu", torch.Generator().manual_seed(7 + d)) for d in range(2)]
    sum(loss.sum() for loss in softmax.sampled_losses(hidden, targets, samples)).backward()
    weight = softmax.weight.detach().double().requires_grad_()
    bias = softmax.bias.detach().double().requires_grad_()
    plain_hidden = [h.detach().double().requires_grad_() for h in hidden]
    total, hits_seen = 0.0, []
    for h, wanted, (sampled, sampled_count, tries) in zip(plain_hidden, targets, samples):
        true = (h * weight[wanted]).sum(-1) + bias[wanted] - torch.log(expected_count(wanted, 400, tries).double())
        logits = h @ weight[sampled].t() + bias[sampled] - torch.log(sampled_count.double())
        hits = wanted.unsqueeze(1) == sampled.unsqueeze(0)
        hits_seen.append(hits.any(1))
        logits = logits.masked_fill(hits, -torch.inf)
        total = total + (torch.logaddexp(true, torch.logsumexp(logits, dim=1)) - true).sum()
    total.backward()
    assert all(seen.any() and not seen.all() for seen in hits_seen)
    for got, want in [*zip(hidden, plain_hidden), (softmax.weight, weight), (softmax.bias, bias)]:
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-5, atol=1e-6)


def test_sampled_loss_under_bfloat16_autocast_keeps_float32_logits():
    """Under autocast the product is bf16 but the bias, the correction and the loss stay float32:
    the loss is as close to the float32 one as a bf16 product allows (the same product added in
    bf16 would round every logit once more, by up to 2^-8 of it)."""
    torch.manual_seed(1)
    softmax = Softmax(300, 16)
    with torch.no_grad():
        softmax.bias.normal_(0.0, 4.0)
    hidden, targets = torch.randn(40, 16), torch.randint(0, 300, (40,))
    exact = softmax.sampled_loss(hidden, targets, 50, generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = softmax.sampled_loss(hidden, targets, 50, generator=torch.Generator().manual_seed(2))
    assert mixed.dtype == torch.float32
    # What rounding only the product (h and w to bf16) gives, computed by hand in float64.
    w, b = softmax.weight.detach(), softmax.bias.detach()
    sample = log_uniform_sample(300, 50, "cpu", torch.Generator().manual_seed(2))
    product = (hidden.bfloat16() @ w[sample[0]].bfloat16().t()).double()
    sampled = product + (b[sample[0]] - torch.log(sample[1])).double()
    hits = targets.unsqueeze(1) == sample[0].unsqueeze(0)
    sampled = sampled.masked_fill(hits, -torch.inf)
    true = (hidden.double() * w[targets].double()).sum(-1) + (b[targets] - torch.log(
        expected_count(targets, 300, sample[2]))).double()
    expected = torch.logaddexp(true, torch.logsumexp(sampled, dim=1)) - true
    torch.testing.assert_close(mixed.double(), expected, rtol=0, atol=2e-3)
    assert (mixed - exact).abs().max() > 0  # the product really ran in bf16


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


def test_training_with_prefetch_equals_training_without_and_resumes_exactly(tmp_path):
    """The prefetching thread is batches ahead at every checkpoint: resuming from one must
    still continue the data exactly where the unprefetched run is."""
    train(tiny_settings(tmp_path / "plain", prefetch=0))
    train(tiny_settings(tmp_path / "ahead", prefetch=2))
    train(tiny_settings(tmp_path / "split", prefetch=3, max_tokens=4 * 10 * 7))  # stops mid-run, at step 7
    train(tiny_settings(tmp_path / "split", prefetch=3, resume=True))
    plain = final_parameters(tmp_path / "plain")
    for run in ("ahead", "split"):
        other = final_parameters(tmp_path / run)
        for key in plain:
            assert torch.equal(plain[key], other[key]), (run, key)
    with pytest.raises(ValueError, match="--prefetch"):
        train(tiny_settings(tmp_path / "bad", prefetch=-1))


@pytest.mark.slow  # several processes: CI runs it in its slow pass
def test_deterministic_option_sets_the_process_up_before_training(tmp_path):
    """--deterministic turns on PyTorch's deterministic algorithms and cuBLAS's fixed workspace
    (checked in a fresh process: both are process-wide); the run trains as usual."""
    code = ("import os, sys, torch\n"
            "from elmo.cli.main import main\n"
            "code = main(sys.argv[1:])\n"
            "print(code, torch.are_deterministic_algorithms_enabled(), os.environ.get('CUBLAS_WORKSPACE_CONFIG'))\n")
    args = ["train", "--train", str(CORPUS), "--vocab", str(VOCAB), "--config", "tiny", "--batch-size", "4",
            "--unroll-steps", "10", "--max-tokens", "400", "--no-progress", "--output", str(tmp_path / "run")]
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    plain = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split()[-3:] == ["0", "False", "None"]
    args[-1] = str(tmp_path / "det")
    det = subprocess.run([sys.executable, "-c", code, *args, "--deterministic"], env=env, capture_output=True,
                         text=True)
    assert det.returncode == 0, det.stderr
    assert det.stdout.split()[-3:] == ["0", "True", ":4096:8"]
    assert (tmp_path / "det" / "checkpoints").is_dir()


def test_existing_run_needs_resume(tmp_path):
    train(tiny_settings(tmp_path / "run", max_tokens=40 * 5))
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny_settings(tmp_path / "run"))


@pytest.mark.slow  # 30 s: CI runs it in its slow pass
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


def _metric_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _tensorboard_steps(run_dir) -> dict[str, list[int]]:
    """Each scalar tag's steps as TensorBoard reads the event files (purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_resume_continues_elapsed_time_and_logs_every_step_once(tmp_path):
    run = tmp_path / "run"
    train(tiny_settings(run, max_tokens=4 * 10 * 20, log_every=5, checkpoint_every=10))
    # As if killed after logging steps 15 and 20 but before saving the checkpoint of step 20.
    (run / "checkpoints" / "step-000000020.pt").unlink()
    resumed_from = load_train_checkpoint(run / "checkpoints" / "step-000000010.pt")
    assert resumed_from["elapsed_seconds"] > 0
    # TensorBoard reads event files in the order of their names, which begin with the second they
    # were opened in and end with a counter of this process (".9" sorts after ".10"): a real resume
    # is a later process, seconds later; here the same process resumes, so let a second pass.
    time.sleep(1.1)
    train(tiny_settings(run, max_tokens=4 * 10 * 20, log_every=5, checkpoint_every=10, resume=True))

    rows = _metric_rows(run)
    assert [int(r["step"]) for r in rows] == [5, 10, 15, 20]
    elapsed = [float(r["elapsed_seconds"]) for r in rows]
    # The clock goes on from the checkpoint's training time instead of starting again at 0.
    assert elapsed == sorted(elapsed) and elapsed[2] > resumed_from["elapsed_seconds"], elapsed
    steps = _tensorboard_steps(run)
    assert steps and all(s == [5, 10, 15, 20] for s in steps.values()), steps  # none lost, none twice
    assert load_train_checkpoint(run / "checkpoints" / "step-000000020.pt")["elapsed_seconds"] > elapsed[-1] - 1e-6


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path):
    whole = tmp_path / "whole"
    train(tiny_settings(whole, max_tokens=4 * 10 * 10))
    damaged = tmp_path / "damaged"
    shutil.copytree(whole, damaged)
    newest = damaged / "checkpoints" / "step-000000010.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # the disk filled mid-write
    with pytest.warns(UserWarning, match=r"step-000000010\.pt: not a readable training checkpoint.*falling back"):
        model, _ = load_language_model(damaged)  # export and evaluate fall back too
    with pytest.warns(UserWarning, match=r"step-000000010\.pt"):
        train(tiny_settings(damaged, max_tokens=4 * 10 * 10, resume=True))
    assert (damaged / "checkpoints" / "step-000000010.pt.damaged").exists()  # kept aside, no longer "newest"
    a, b = final_parameters(whole), final_parameters(damaged)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [int(r["step"]) for r in _metric_rows(damaged)] == [5, 10]


def test_no_readable_checkpoint_is_an_error_naming_the_folder(tmp_path):
    run = tmp_path / "run"
    train(tiny_settings(run, max_tokens=4 * 10 * 10))
    for path in (run / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"")
    folder = str(run / "checkpoints")
    with pytest.warns(UserWarning), pytest.raises(WeightsError, match=f"{folder}: no readable checkpoint among 2"):
        train(tiny_settings(run, max_tokens=4 * 10 * 10, resume=True))
    result = subprocess.run([*CLI, "export", str(run), "--output", str(tmp_path / "out")], capture_output=True,
                            text=True)
    assert result.returncode == 2 and f"elmo export: error: {folder}: no readable checkpoint" in result.stderr


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
    assert sorted(os.listdir(out)) == [".elmo-owner", "options.json", "softmax_weights.hdf5", "vocab.txt",
                                       "weights.hdf5"]
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
    # The run says which checkpoint of the earlier run it started from, and where that run was.
    started = json.loads((tmp_path / "ft" / "train_settings.json").read_text())["init_checkpoint"]
    newest = sorted((trained_run / "checkpoints").iterdir())[-1]
    assert started["path"] == str(newest.resolve()) and (started["step"], started["tokens"]) == (40, 1600)
    assert started["elapsed_seconds"] > 0
    after = evaluate(tuned, tuned_vocab, [str(domain)])["average_perplexity"]
    assert after < 0.7 * before


def test_finetune_warns_when_the_inherited_batch_leaves_a_handful_of_steps(trained_run, tmp_path, capsys):
    """A model's options.json keeps its pretraining batch (2048 rows for the packaged model), so a
    small in-domain corpus makes a few huge steps unless --batch-size is given: say so."""
    domain = tmp_path / "domain.txt"
    domain.write_text("the cat sat on the mat .\n" * 20)  # 160 tokens with the end markers: 4 steps of the run's 4 x 10
    common = dict(train=[str(domain)], vocab=None, config=None, init_from=str(trained_run), unroll_steps=10,
                  epochs=1.0, checkpoint_every=100, log_every=100, progress=False, seed=1)
    train(TrainSettings(output=str(tmp_path / "inherited"), **common))
    warning = capsys.readouterr().err
    assert "warning: 160 training tokens make 4 optimizer step(s) of 4 x 10 tokens" in warning
    assert f"the batch size of {trained_run}'s options.json" in warning and "--batch-size" in warning
    # A batch size given on purpose is the user's choice: no warning.
    train(TrainSettings(output=str(tmp_path / "chosen"), batch_size=2, **common))
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("tokens, unroll, pretraining, device, batch", [
    (713_264, 20, 2048, "cpu", 32),         # a novel on a CPU: at most 32 rows there (1,115 updates)
    (713_264, 20, 2048, "cuda", 64),        # the same on a GPU: the largest power of two giving 500 updates
    (10_000_000, 20, 2048, "cuda", 512),
    (10_000_000, 20, 128, "cuda", 128),     # never above the model's pretraining batch
    (66_124, 20, 2048, "cpu", 16),          # too few tokens for 500 updates: the smallest batch
    (160, 10, 4, "cpu", 4),                 # ... unless the pretraining batch is smaller still
])
def test_the_finetuning_batch_rule(tokens, unroll, pretraining, device, batch):
    got, why = finetune_batch_size(tokens, unroll, pretraining, device)
    assert got == batch, why
    assert got <= pretraining and (got >= FINETUNE_MIN_BATCH or got == pretraining)
    if got not in (pretraining, FINETUNE_MIN_BATCH, CPU_MAX_BATCH):  # the rule's own choice: enough updates, not twice
        assert FINETUNE_UPDATES <= tokens / (unroll * got) < 2 * FINETUNE_UPDATES


def test_finetune_without_a_batch_size_takes_the_rule_and_says_so(trained_run, tmp_path, capsys, monkeypatch):
    """A 2048-row pretraining batch (the packaged model's) no longer makes a small fine-tune a few
    huge steps: the rule picks the batch, the run records it, and a given --batch-size wins."""
    monkeypatch.setattr("elmo.training.recipe.FINETUNE_UPDATES", 5)  # the test corpus is small
    domain = tmp_path / "domain.txt"
    domain.write_text("the cat sat on the mat .\n" * 200)  # 1,600 tokens with the end markers
    big = tmp_path / "big-batch"
    shutil.copytree(trained_run, big)
    payload_path = sorted((big / "checkpoints").iterdir())[-1]
    payload = torch.load(payload_path, weights_only=True)
    payload["config"]["batch_size"] = 2048  # as if pretrained on a GPU
    torch.save(payload, payload_path)
    common = dict(train=[str(domain)], vocab=None, config=None, init_from=str(big), unroll_steps=10,
                  epochs=1.0, checkpoint_every=100, log_every=100, progress=False, seed=1)
    train(TrainSettings(output=str(tmp_path / "rule"), **common))
    err = capsys.readouterr().err
    # 1,600 tokens / (10 x 5 updates) = 32 rows, at most 32 on a CPU: 5 updates.
    assert "fine-tuning with batch 32 x 10 tokens: 5 updates" in err and "pretrained with batch 2048" in err, err
    assert json.loads((tmp_path / "rule" / "options.json").read_text())["batch_size"] == 32
    train(TrainSettings(output=str(tmp_path / "chosen"), batch_size=8, **common))
    assert "fine-tuning with batch" not in capsys.readouterr().err
    assert json.loads((tmp_path / "chosen" / "options.json").read_text())["batch_size"] == 8


# ------------------------------------------------------------------ python train.py (bilm-tf's way)
def _root_train(cwd, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True)


def test_root_train_script_trains_with_the_readme_layout(tmp_path):
    (tmp_path / "data" / "train").mkdir(parents=True)
    shutil.copy(CORPUS, tmp_path / "data" / "train" / "data.txt")
    shutil.copy(VOCAB, tmp_path / "vocab.txt")
    # Any elmo train option passes through.
    result = _root_train(tmp_path, "--batch-size", "4", "--unroll-steps", "10", "--max-tokens", "200", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "runs" / "train" / "checkpoints" / "step-000000005.pt").exists()
    # bilm-tf's flag names, from anywhere.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _root_train(elsewhere, "--train_prefix", str(tmp_path / "data" / "train" / "*.txt"), "--vocab_file",
                         str(VOCAB), "--save_dir", str(tmp_path / "bilm"), "--batch-size", "4", "--unroll-steps", "10",
                         "--max-tokens", "80", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "bilm" / "checkpoints" / "step-000000002.pt").exists()


def test_root_train_script_says_what_to_run_first(tmp_path):
    result = _root_train(tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "no training data at data/train/*.txt" in result.stderr and "elmo prepare" in result.stderr
    (tmp_path / "data" / "train").mkdir(parents=True)
    shutil.copy(CORPUS, tmp_path / "data" / "train" / "data.txt")
    result = _root_train(tmp_path, "--gpus", "0")
    assert result.returncode == 2 and "no vocabulary at vocab.txt" in result.stderr and "elmo vocab" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_root_train_script_passes_gpus_on(tmp_path):
    (tmp_path / "data" / "train").mkdir(parents=True)
    shutil.copy(CORPUS, tmp_path / "data" / "train" / "data.txt")
    shutil.copy(VOCAB, tmp_path / "vocab.txt")
    result = _root_train(tmp_path, "--gpus", "0", "--batch-size", "4", "--unroll-steps", "10", "--max-tokens", "200",
                         "--no-progress")
    if torch.cuda.is_available():  # python train.py --gpus 0, as the paper's authors ran it
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "runs" / "train" / "checkpoints" / "step-000000005.pt").exists()
    else:
        assert result.returncode == 2 and "error: --gpus 0: CUDA is not available" in result.stderr, result.stderr
        assert not (tmp_path / "runs").exists()


def test_bf16_autocast_on_the_cpu_is_a_choice_and_trains(tmp_path):
    """--bf16 turns autocast on where the default leaves it off (the CPU); the run trains to the
    float32 run's loss within bfloat16's precision, along a measurably different path."""
    import argparse

    from elmo.cli.train import add_parser, settings_from

    parser = argparse.ArgumentParser()
    add_parser(parser)
    base = ["--vocab", str(VOCAB), "--train", str(CORPUS), "--output", str(tmp_path / "x")]
    assert settings_from(parser.parse_args(base)).bf16 is None
    assert settings_from(parser.parse_args([*base, "--bf16"])).bf16 is True
    assert settings_from(parser.parse_args([*base, "--no-bf16"])).bf16 is False

    runs = {}
    for bf16 in (False, True):
        # One metrics window over the whole run: a 5-step window's mean is too noisy to compare.
        metrics = train(tiny_settings(tmp_path / f"bf16-{bf16}", bf16=bf16, log_every=20))
        runs[bf16] = (metrics["loss"], final_parameters(tmp_path / f"bf16-{bf16}"))
    (loss32, params32), (loss16, params16) = runs[False], runs[True]
    assert math.isfinite(loss16) and abs(loss16 - loss32) < 0.03
    assert any(not torch.equal(params32[k], params16[k]) for k in params32)


def test_the_softmax_is_made_where_it_will_train():
    """LanguageModel(softmax_device=...) makes and initialises the softmax there (the trainer
    passes its device: the original vocabulary's took 93 s on 2 CPU cores before a GPU run
    moved it); on the CPU the numbers are the ones made without it."""
    from elmo.model.config import preset_config
    from elmo.lm.model import LanguageModel

    config = preset_config("tiny")
    torch.manual_seed(5)
    before = LanguageModel(config, 300)
    torch.manual_seed(5)
    on_cpu = LanguageModel(config, 300, softmax_device="cpu")
    for (name, a), (_, b) in zip(before.state_dict().items(), on_cpu.state_dict().items()):
        assert torch.equal(a, b), name
    meta = LanguageModel(config, 300, softmax_device="meta")
    assert meta.softmax.weight.is_meta and meta.softmax.bias.is_meta
    assert not any(p.is_meta for p in meta.bilm.parameters())
