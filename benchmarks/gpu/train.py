"""The training sections: ``train_original`` and ``train_packaged`` (training tokens/s per
direction, s/step, peak memory, MFU and kernels per step of the real ``Trainer`` step on generated
text, per LSTM path and precision, with each trainer's set-up and the host's share of a step),
``train_process`` (whole-process ``elmo train``) and ``host_step`` (the host's part of a step).

    PYTHONPATH=src python benchmarks/gpu/train.py --section train_packaged --device cpu --quick --out train.json
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from common import encoder_step_flops  # (benchmarks/common.py: the FLOP counts)
from gpu.common import (PROFILE_TOP, Deadline, Device, OutOfTime, Recorder, count_kernels, generate_sentences,
                        measured_peaks, packaged_words, peak_mode, run_alone, run_group, write_corpus, write_vocab)
from gpu.exactness import path_needs, training_path, training_paths

ORIGINAL_VOCAB = 793_471  # the 1B Word Benchmark vocabulary the original model was trained with


def train_flops_per_token(config, n_samples: int, vocab_size: int, encoder_flops_per_token: float) -> float:
    """Model FLOPs of one training token of one direction, forward and backward (forward times 3):
    ``encoder_flops_per_token`` (:func:`encoder_step_flops` of a step over the tokens of one
    direction's batch: the encoder runs once for both directions), both directions' LSTM stacks
    and both softmaxes (sampled: each token's target row and the shared negatives; full: every
    row)."""
    from common import lstm_flops

    width = (n_samples + 1) if n_samples else vocab_size
    forward = encoder_flops_per_token + 2 * lstm_flops(config) + 2 * 2 * config.lstm.projection_dim * width
    return 3.0 * forward


# The planner's estimate of a training step until the section has measured one: seconds per
# step of the default row (fused, bfloat16) at one batch size on the H200
# (results/benchmarks/gpu_suite-h200-2.json), scaled by batch size for the others.
PRIOR_S_PER_STEP = {"train_original": (512, 0.46), "train_packaged": (2048, 0.38), "quick": (4, 0.05)}
# Seconds per step of each path against the default's there (fast 1.1-1.8x; plain never
# measured on a GPU, assumed slow).
PATH_COST = {"fast": 1.8, "plain": 6.0}
COMPILE_S = 20.0  # torch.compile's warm-up of the cells: 14-17 s on the H200
TRAINER_PRIOR_S = 12.0  # a trainer's set-up and the host's share: 4-9 s, then a few batches


def train_sizes(name: str, quick: bool) -> dict:
    """What a training section runs: the config, batch sizes, vocabulary size, negatives, and
    ``steps``: (warm-up, at least, at most, seconds at least) per row."""
    from elmo.hub.pretrained import packaged_model_dir
    from elmo.model.config import BiLMConfig, preset_config, published_config

    if quick:  # the same code on a CPU in seconds: the tiny preset at small batches
        return {"config": preset_config("tiny"), "batches": [4, 2], "vocab": 2000, "negatives": 256,
                "steps": (1, 2, 4, 0.0), "prior": PRIOR_S_PER_STEP["quick"]}
    if name == "train_original":
        # Batch 2,048 first, its bfloat16 rows alone (the goal's figure may need the larger batch;
        # the H200 has the memory: batch 512 peaked at 11 GiB), then batch 512's full plan.
        return {"config": published_config("original"), "batches": [512, 128], "vocab": ORIGINAL_VOCAB,
                "negatives": 8192, "steps": (2, 3, 10, 0.6), "prior": PRIOR_S_PER_STEP[name],
                "larger": [2048]}
    return {"config": BiLMConfig.from_json(packaged_model_dir() / "options.json"), "batches": [2048, 256],
            "vocab": len(packaged_words()) + 3, "negatives": 2048, "steps": (2, 3, 10, 0.6),
            "prior": PRIOR_S_PER_STEP[name]}


def training_plan(paths: list[str], batches: list[int], larger: list[int] = ()) -> list[dict]:
    """The trainers of a training section and their rows, ``[{"batch", "rows": [(path, bf16),
    ...]}]``, most valuable first: at the largest batch, what a GPU user gets by default
    (``paths[0]`` in bfloat16), the window as CUDA graphs, both again in float32, the other fast
    paths, compiled cells last (they compile first); at the smallest batch the default and graphs
    in bfloat16 and the plain path (the specification, slow), which at one batch size only joins
    the first trainer. Each batch of ``larger`` comes before all of them, with the default and
    the window's graphs in bfloat16 alone."""
    default, large, small = paths[0], max(batches), min(batches)
    graphs = [p for p in paths if "graphs" in p]
    others = [p for p in paths if p not in (default, "plain", *graphs) and "compile" not in p]
    compiled = [p for p in paths if "compile" in p]
    first = [(default, True), *[(p, True) for p in graphs], (default, False), *[(p, False) for p in graphs],
             *[(p, True) for p in others], *[(p, False) for p in others], *[(p, True) for p in compiled]]
    plain = [("plain", True), ("plain", False)] if "plain" in paths else []
    plan = [{"batch": b, "rows": [(default, True), *[(p, True) for p in graphs]]} for b in larger]
    plan.append({"batch": large, "rows": first + (plain if small == large else [])})
    if small != large:
        plan.append({"batch": small, "rows": [(default, True), *[(p, True) for p in graphs], *plain]})
    return plan


def estimate_row_s(s_per_step: float, path: str, steps: tuple) -> float:
    """Seconds a training row should take: warm-up and timed steps (:func:`time_training`), the
    profiled and counted steps after them, torch.compile's warm-up where the cells compile."""
    warmup, min_steps, max_steps, min_seconds = steps
    per_step = s_per_step * PATH_COST.get(path.split("+")[0], 1.0)
    timed = min(max_steps, max(min_steps, math.ceil(min_seconds / per_step)))
    return (warmup + timed + 3) * per_step + (COMPILE_S if "compile" in path else 0.0) + 1.0


def default_step_s(measured: list[dict], batch: int, prior: tuple[int, float]) -> float:
    """The planner's seconds per step of the default path at ``batch``: the slowest measured at
    that batch (each row's over its path's cost), else the prior scaled by batch size."""
    seen = [r["s_per_step"] / PATH_COST.get(r["path"].split("+")[0], 1.0) for r in measured
            if r.get("batch") == batch and "s_per_step" in r]
    if seen:
        return max(seen)
    prior_batch, prior_s = prior
    return prior_s * max(batch / prior_batch, 0.25)


def training_data(work: Path, quick: bool) -> tuple[Path, Path]:
    """A generated training text (shared by the training sections) and its folder."""
    folder = work / "train-data"
    corpus = folder / "corpus.txt"
    if not corpus.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_corpus(corpus, generate_sentences(2_000 if quick else 60_000, seed=1, words=packaged_words()))
    return folder, corpus


def section_train(rec: Recorder, args, name: str) -> None:
    """Training throughput of one size (:func:`training_plan`): per trainer (real batcher, the
    device's default prefetching) its set-up and the host's share of a step, then per row
    warm-up steps, timed steps, peak memory, kernels of one step and MFU; a row that would not
    fit what is left of the limit is recorded as not measured."""
    import torch

    from elmo.model.config import BiLMConfig
    from elmo.training.train import Trainer, TrainSettings

    device, deadline = Device(args.device), Deadline(args.ends_at)
    section_start = time.monotonic()
    work = Path(args.work)
    size = train_sizes(name, args.quick)
    config = size["config"]
    folder, corpus = training_data(work, args.quick)
    vocab = folder / f"vocab-{size['vocab']}.txt"
    if not vocab.exists():
        write_vocab(vocab, packaged_words(), size["vocab"])
    peaks = measured_peaks(device, args.quick)
    rec.set("matmul_peak_tflops", {k: round(v / 1e12, 3) for k, v in peaks.items()})
    rec.set("math", {"float32_matmuls": device.float32_matmul_mode(),
                     "cudnn_convolutions_tf32": bool(torch.backends.cudnn.allow_tf32) if device.cuda else None})
    rec.set("model", {"lstm": f"{config.lstm.n_layers}x{config.lstm.dim}_{config.lstm.projection_dim}",
                      "cnn_filters": config.char_cnn.n_filters, "highway": config.char_cnn.n_highway,
                      "vocab": size["vocab"], "negatives": size["negatives"], "unroll_steps": 20})
    training = {"batch_size": max(size["batches"] + size.get("larger", [])), "unroll_steps": 20, "n_negative_samples_batch": size["negatives"],
                "dropout": 0.1, "all_clip_norm_val": 10.0, "optimizer": "adagrad", "learning_rate": 0.2}
    options = folder / f"{name}-options.json"
    BiLMConfig(char_cnn=config.char_cnn, lstm=config.lstm, training=training).to_json(options)
    paths = training_paths()
    plan = training_plan(paths, size["batches"], size.get("larger", []))
    rec.set("plan", [{**t, "rows": [f"{p} {'bfloat16' if bf16 else 'float32'}" for p, bf16 in t["rows"]]}
                     for t in plan])
    measured: list[dict] = []
    trainer_s = TRAINER_PRIOR_S if not args.quick else 3.0
    profiled = False
    for trainer_plan in plan:
        batch = trainer_plan["batch"]
        keys = [{"batch": batch, "path": p, "precision": "bfloat16" if bf16 else "float32"}
                for p, bf16 in trainer_plan["rows"]]
        first = estimate_row_s(default_step_s(measured, batch, size["prior"]), trainer_plan["rows"][0][0],
                               size["steps"])
        if not deadline.fits(trainer_s + first):
            for key in keys:
                rec.not_measured(key, deadline.why_not(trainer_s + first) + " (with the trainer's set-up)")
            continue
        with tempfile.TemporaryDirectory(dir=work) as output:
            built = time.monotonic()
            trainer = Trainer(TrainSettings(train=[str(corpus)], vocab=str(vocab), output=output,
                                            config=str(options), batch_size=batch,
                                            max_tokens=10 ** 12, progress=False, device=args.device,
                                            checkpoint_every=10 ** 9, log_every=10 ** 9))
            setup_s = time.monotonic() - built
            try:
                host = host_preparation(trainer, device)
                rec.add("trainers", {"batch": batch, "options": options.name,
                                     "setup_s": round(setup_s, 1), "host_s": host.pop("seconds"),
                                     "at_s": round(time.monotonic() - section_start, 1)})
                rec.add("host_preparation", {"batch": batch, **host})
                trainer_s = max(trainer_s, setup_s + 2.0)
                flops = train_flops_per_token(config, size["negatives"], size["vocab"],
                                              host["encoder_gflop_per_step"] * 1e9 / trainer.tokens_per_step)
                for key, (path, bf16) in zip(keys, trainer_plan["rows"]):
                    why = device.why_not(path_needs(path))
                    estimate = estimate_row_s(default_step_s(measured, batch, size["prior"]), path, size["steps"])
                    if why is None and not deadline.fits(estimate):
                        why = deadline.why_not(estimate)
                    if why is not None:
                        rec.not_measured(key, why)
                        continue
                    row = {**key, "estimate_s": round(estimate, 1)}
                    start = time.monotonic()
                    try:
                        with deadline.stop_at():  # every bfloat16 row profiled: the goal's host and device time
                            row.update(time_training(trainer, path, bf16, *size["steps"], device, deadline,
                                                     profile=not profiled or bf16))
                        profiled = True
                        tokens = row["tokens_per_s_per_direction"]
                        mode = peak_mode(device, row["precision"])
                        row.update(gflop_per_token=round(flops / 1e9, 4), peak=mode,
                                   achieved_tflops=round(flops * tokens / 1e12, 3),
                                   mfu=round(flops * tokens / peaks[mode], 4))
                    except OutOfTime as stopped:
                        rec.not_measured(key, f"no time: {stopped} (estimated {estimate:.0f} s)")
                        return  # the deadline has passed: nothing else fits
                    except Exception as error:
                        row["error"] = f"{type(error).__name__}: {error}"
                        row["traceback"] = traceback.format_exc()[-1500:]
                        rec.fail(f"{name}: {key}: {row['error']}")
                    row["seconds_in_all"] = round(time.monotonic() - start, 1)
                    row["at_s"] = round(time.monotonic() - section_start, 1)
                    rec.add("rows", row)
                    measured.append(row)
            finally:
                for batcher in trainer.batchers:
                    if hasattr(batcher, "close"):
                        batcher.close()
                del trainer
                device.release()


def time_training(trainer, path: str, bf16: bool, warmup: int, min_steps: int, max_steps: int, min_seconds: float,
                  device: Device, deadline: Deadline, profile: bool = False) -> dict:
    """Warm-up steps, then timed steps (at least ``min_steps`` and ``min_seconds``, at most
    ``max_steps``, and none that would pass the deadline once one ran), peak memory over them,
    and the kernels of one more step (``profile``: with the operators that took the most host
    and device time)."""
    trainer.settings.bf16 = bf16
    # The carried LSTM state takes the precision of the last step: start each setting from zeros.
    trainer.state = trainer.model.bilm.zero_state(trainer.state.batch_size)
    # A step that leaves the losses on the device where the trainer has one (no host sync per step).
    step = getattr(trainer, "train_step_tensors", trainer.train_step)  # (an older checkout's Trainer: train_step alone)
    with training_path(trainer.model, path, trainer):
        start = time.perf_counter()
        for _ in range(warmup):
            step()
        device.sync()
        warmup_seconds = time.perf_counter() - start
        device.reset_peak_memory()
        steps, start = 0, time.perf_counter()
        while steps < max_steps and (steps < min_steps or time.perf_counter() - start < min_seconds):
            if steps and deadline.left() < 4 * (time.perf_counter() - start) / steps:
                break  # leave the time of a counted and a profiled step
            step()
            steps += 1
            if steps == 1:
                device.sync()  # a first step of its own, so that the deadline check above knows a step's cost
        device.sync()
        seconds = time.perf_counter() - start
        memory = device.peak_memory_bytes()
        tokens = trainer.tokens_per_step
        row = {"steps": steps, "seconds": round(seconds, 3), "s_per_step": round(seconds / steps, 4),
               "tokens_per_s_per_direction": round(steps * tokens / seconds, 1),
               "peak_memory_gib": round(memory / 2 ** 30, 3), "warmup_s": round(warmup_seconds, 2)}
        try:  # the row is timed already: a failing count must not lose it
            row["kernels_per_step"] = count_kernels(device, step, PROFILE_TOP if profile else 0)
        except Exception as error:
            row["kernels_per_step"] = {"error": f"{type(error).__name__}: {error}"}
    return row


def step_words(batches: list[dict], encoder):
    """The distinct words of one step's two batches, as the trainer finds them on the host."""
    import torch

    from elmo.kernels.encoder import distinct_words

    return distinct_words(torch.stack([b["char_ids"] for b in batches]), encoder.pad_id,
                          encoder.word_embedding is not None)


def cnn_shapes(words, config) -> tuple[set, set]:
    """The CNN input shapes ``(rows, span)`` of one step's length groups: as a GPU runs them
    (fixed shapes: the length bucket's span, rows on the ladder) and as a CPU does (exact)."""
    from elmo.kernels.encoder import group_shapes

    n_slots = config.char_cnn.max_characters_per_token
    widest = max(width for width, _ in config.char_cnn.filters)
    return tuple({(rows, span) for _, _, rows, span in group_shapes(words, n_slots, widest, fixed)}
                 for fixed in (True, False))


def host_preparation(trainer, device: Device, steps: int = 3) -> dict:
    """Seconds per step of what the trainer's step does on the host before the device works: the
    next batch of each direction (from the trainer's batchers, prefetching as in training) and
    the distinct words of both; the encoder's real FLOPs of those steps (:func:`encoder_step_flops`,
    for MFU) and the CNN shapes they meet. Then building one direction's batch in this thread on
    a batcher of its own over the same text, and pinning it (what the prefetching thread does
    on a GPU)."""
    import torch

    from elmo.training.data import LMBatcher, SentenceStream

    started = time.monotonic()
    encoder = trainer.model.bilm.token_encoder
    config = trainer.model.bilm.config
    for batcher in trainer.batchers:  # the first batch reads the text: not a step's cost
        batcher.next_batch()
    fetch = distinct = flops = 0.0
    fixed, exact = set(), set()
    for _ in range(steps):
        start = time.perf_counter()
        batches = [batcher.next_batch() for batcher in trainer.batchers]
        middle = time.perf_counter()
        words = step_words(batches, encoder)
        fetch, distinct = fetch + middle - start, distinct + time.perf_counter() - middle
        flops += encoder_step_flops(config, words)
        shapes = cnn_shapes(words, config)
        fixed |= shapes[0]
        exact |= shapes[1]
    result = {"next_batch_s": round(fetch / steps, 4), "distinct_words_s": round(distinct / steps, 4),
              "encoder_gflop_per_step": round(flops / steps / 1e9, 6),
              "cnn_shapes_fixed": len(fixed), "cnn_shapes_exact": len(exact), "steps": steps}
    own = LMBatcher(SentenceStream(trainer.paths, seed=12345), trainer.vocab, trainer.batch_size,
                    trainer.unroll_steps)
    own.next_batch()  # the first batch reads the shard
    build = pin = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        batch = own.next_batch()
        middle = time.perf_counter()
        if device.cuda:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        build, pin = build + middle - start, pin + time.perf_counter() - middle
    result.update({"build_one_direction_s": round(build / steps, 4), "pin_one_direction_s": round(pin / steps, 4),
                   "seconds": round(time.monotonic() - started, 1)})
    del torch
    return result


def section_train_process(rec: Recorder, args) -> None:
    """``elmo train`` as a user runs it, whole process: the packaged size on generated text,
    stopped (and recorded as not measured) if it would pass the section's limit."""
    from elmo.hub.pretrained import packaged_model_dir

    deadline = Deadline(args.ends_at)
    work = Path(args.work)
    folder, corpus = training_data(work, args.quick)
    vocab = folder / "vocab-packaged.txt"
    write_vocab(vocab, packaged_words(), len(packaged_words()) + 3)
    batch = 8 if args.quick else 256
    # 40 steps did not end inside 28 s on the H200 (start-up included): 20 now, logged every 5.
    steps = 4 if args.quick else 20
    config = "tiny" if args.quick else str(packaged_model_dir() / "options.json")
    with tempfile.TemporaryDirectory(dir=work) as output:
        command = [sys.executable, "-m", "elmo.cli.main", "train", "--train", str(corpus), "--vocab", str(vocab),
                   "--config", config, "--output", output + "/run", "--batch-size", str(batch), "--max-tokens",
                   str(steps * batch * 20), "--log-every", "5" if not args.quick else "2", "--no-progress",
                   "--device", args.device, "--checkpoint-every", str(10 ** 6)]
        rec.set("command", " ".join(["elmo", *command[3:]]).replace(str(work), "WORK"))
        start = time.monotonic()
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured({"batch": batch, "steps": steps}, f"no time: still running after "
                                                               f"{time.monotonic() - start:.0f} s")
            return
        seconds = time.monotonic() - start
        if done.returncode != 0:
            rec.fail(f"exit code {done.returncode}: {done.stderr[-2000:]}")
            return
        rows = (Path(output) / "run" / "metrics.csv").read_text(encoding="utf-8").splitlines()
        header = rows[0].split(",")
        metrics = [dict(zip(header, r.split(","))) for r in rows[1:]]
        rates = [float(m["tokens_per_second"]) for m in metrics]
        rec.set("result", {"batch": batch, "steps": steps, "whole_process_s": round(seconds, 2),
                           "tokens_per_s_per_direction_logged": [round(r, 1) for r in rates],
                           "median_after_first_window": round(statistics.median(rates[1:] or rates), 1),
                           "first_loss": float(metrics[0]["loss"]), "last_loss": float(metrics[-1]["loss"])})


# ====================================================================== the host of a step
HOST_STEP_BATCHES = (512, 2048)


def section_host_step(rec: Recorder, args, max_steps: int = 200) -> None:
    """The host's part of a training step at the original size, one thread, per batch size of
    :data:`HOST_STEP_BATCHES` (the tiny preset at 8 and 32 with ``--quick``): both directions'
    batches from their :class:`LMBatcher` and the distinct words of the two, timed per step, and
    the distinct CNN input shapes met so far (fixed shapes as a GPU runs them; each new one costs
    cuDNN a plan), for ``max_steps`` steps or the batch size's share of the limit."""
    import torch

    from elmo.model.config import preset_config, published_config
    from elmo.model.network import TokenEncoder
    from elmo.model.vocab import Vocabulary
    from elmo.training.data import LMBatcher, SentenceStream

    torch.set_num_threads(1)
    deadline = Deadline(args.ends_at)
    config = preset_config("tiny") if args.quick else published_config("original")
    encoder = TokenEncoder(config.char_cnn, config.lstm.projection_dim)
    folder, corpus = training_data(Path(args.work), args.quick)
    vocab_file = folder / "vocab-packaged.txt"
    write_vocab(vocab_file, packaged_words(), len(packaged_words()) + 3)
    vocab = Vocabulary.from_file(vocab_file)
    batches = (8, 32) if args.quick else HOST_STEP_BATCHES
    rec.set("setting", {"config": "tiny" if args.quick else "original", "unroll_steps": 20, "threads": 1,
                        "text": "generated", "max_steps": max_steps})
    for index, batch in enumerate(batches):
        share = deadline.left() / (len(batches) - index)
        ends = time.time() + share
        batchers = [LMBatcher(SentenceStream([str(corpus)], seed=d, reverse=bool(d)), vocab, batch, 20) for d in (0, 1)]
        for batcher in batchers:
            batcher.next_batch()  # reading the text is not a step's cost
        build, words_s, distinct, flops = [], [], [], 0.0
        fixed, exact, growth = set(), set(), {}
        while len(build) < max_steps and (not build or time.time() + 2 * (build[-1] + words_s[-1]) < ends):
            start = time.perf_counter()
            step = [batcher.next_batch() for batcher in batchers]
            middle = time.perf_counter()
            words = step_words(step, encoder)
            build.append(middle - start)
            words_s.append(time.perf_counter() - middle)
            distinct.append(len(words.distinct))
            flops += encoder_step_flops(config, words)
            shapes = cnn_shapes(words, config)
            fixed |= shapes[0]
            exact |= shapes[1]
            if len(build) in (1, 10, 50, 100, 200) or len(build) == max_steps:
                growth[len(build)] = len(fixed)
        steps = len(build)
        rec.add("rows", {"batch": batch, "steps": steps, "tokens_per_direction_per_step": batch * 20,
                         "batches_s_per_step": round(statistics.mean(build), 4),
                         "distinct_words_s_per_step": round(statistics.mean(words_s), 4),
                         "host_s_per_step": round(statistics.mean(build) + statistics.mean(words_s), 4),
                         "distinct_words_per_step": round(statistics.mean(distinct)),
                         "encoder_gflop_per_step": round(flops / steps / 1e9, 3),
                         "cnn_shapes_fixed": len(fixed), "cnn_shapes_exact": len(exact),
                         "cnn_shapes_fixed_after_steps": growth})


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"train_original": functools.partial(section_train, name="train_original"),
        "train_packaged": functools.partial(section_train, name="train_packaged"),
        "train_process": section_train_process, "host_step": section_host_step}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
