"""The embedding sections: ``embed`` (tokens/s per path, eager, CUDA graphs and plain, and
precision, with a per-stage breakdown) and ``embed_process`` (whole-process ``elmo embed``, eager
and with CUDA graphs, and an in-process breakdown: imports, loading, embedding without and with HDF5).

    PYTHONPATH=src python benchmarks/gpu/embed.py --device cpu --quick --out embed.json
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import (ROOT, SUITE, Deadline, Device, OutOfTime, Recorder, count_kernels, fixture_model,
                        generate_sentences, packaged_words, run_alone, run_group, run_row_process, write_corpus)


EMBED_ROW_PRIOR_S = 8.0  # a row's seconds until one is measured: 3-6 s on the H200 (model, warm-up, passes)


def embed_sizes(quick: bool) -> list[dict]:
    from elmo.model.config import published_config

    if quick:
        return [{"size": "fixture", "model": "fixture", "sentences": 24, "plain_sentences": 6}]
    return [{"size": "packaged", "model": "packaged", "sentences": 1200, "plain_sentences": 200},
            {"size": "original", "model": published_config("original"), "sentences": 600, "plain_sentences": 100}]


def embed_variants() -> list[tuple[str, str, str | None]]:
    """(path, precision, what it needs) of the embed section, default first; the plain path
    (the specification, slow) last."""
    return [("eager", "float32", None), ("eager", "bfloat16", None), ("graphs", "float32", "cuda"),
            ("graphs", "bfloat16", "cuda"), ("plain", "float32", None)]


def embed_model(spec):
    import torch

    from elmo import BiLM

    if spec == "fixture":
        return fixture_model("allennlp")
    if spec == "packaged":
        from elmo.hub import load_model

        return load_model()
    torch.manual_seed(0)
    return BiLM(spec).eval()  # random weights of a published size


def section_embed(rec: Recorder, args) -> None:
    device, deadline = Device(args.device), Deadline(args.ends_at)
    words = packaged_words()
    slowest = EMBED_ROW_PRIOR_S if not args.quick else 2.0
    for spec in embed_sizes(args.quick):
        model = None
        warm = generate_sentences(max(8, spec["sentences"] // 8), seed=3, words=words)
        sentences = generate_sentences(spec["sentences"], seed=2, words=words)
        for path, precision, needs in embed_variants():
            chosen = sentences[:spec["plain_sentences"]] if path == "plain" else sentences
            key = {"size": spec["size"], "path": path, "precision": precision, "sentences": len(chosen),
                   "tokens": sum(map(len, chosen))}
            why = device.why_not(needs)
            if why is None and not deadline.fits(slowest):
                why = deadline.why_not(slowest)
            if why is not None:
                rec.not_measured(key, why)
                continue
            row, start = dict(key), time.monotonic()
            try:
                with deadline.stop_at():
                    model = model or embed_model(spec["model"])
                    row.update(time_embedding(model, path, precision, chosen, warm, device))
            except OutOfTime as stopped:
                rec.not_measured(key, f"no time: {stopped}")
                return
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
                row["traceback"] = traceback.format_exc()[-1500:]
                rec.fail(f"embed: {key}: {row['error']}")
            row["seconds_in_all"] = round(time.monotonic() - start, 1)
            slowest = max(slowest, row["seconds_in_all"])
            rec.add("rows", row)
            device.release()


def time_embedding(model, path: str, precision: str, sentences, warm, device: Device) -> dict:
    """Tokens/s of ``Embedder.embed_sentences`` (batch 64) after a warm-up on other sentences, then
    one instrumented pass for the per-stage breakdown (stages synchronised, so slower). ``model``
    is not changed (the runtime copies it to the device; the plain path runs a copy)."""
    import copy

    from elmo import Embedder

    if path == "plain":
        model = copy.deepcopy(model)
        model.fast = False
    embedder = Embedder(model, device=device.name, precision=precision, batch_size=64,
                        **({"cuda_graphs": True} if path == "graphs" else {}))  # (older checkouts lack the option)
    embedder.embed_sentences(warm)
    if path == "graphs":
        # A graph is captured per row bucket on its second sighting: a second warm-up pass over
        # other sentences captures the timed pass's batches of 64 (a capture is not a step's
        # cost), and the timed pass still meets its own words as a first pass does.
        embedder.embed_sentences(warm)
    device.sync()
    device.reset_peak_memory()
    start = time.perf_counter()
    embedder.embed_sentences(sentences)
    device.sync()
    seconds = time.perf_counter() - start
    memory = device.peak_memory_bytes()
    try:
        stages = embedding_stages(embedder, sentences, device)
    except AttributeError as error:  # an older checkout's runtime (--before-src) lacks the stages' hooks
        stages = {"unavailable": f"{type(error).__name__}: {error}"}
    batch = sorted(sentences, key=len)[len(sentences) // 2:][:64]  # 64 sentences of about the median length
    kernels = count_kernels(device, lambda: embedder.embed_batch(batch))
    tokens = sum(map(len, sentences))
    result = {"ran_in": embedder.runtime.precision, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
              "sentences_per_s": round(len(sentences) / seconds, 1), "peak_memory_gib": round(memory / 2 ** 30, 3),
              "stages_s": stages, "kernels_per_batch_of_64": kernels}
    graphs = getattr(embedder.runtime, "graphs", None)  # (older checkouts have no CUDA graphs)
    if graphs is not None:
        result.update(graph_captures=graphs.captures, graph_replays=graphs.replays, graphs_disabled=graphs.disabled)
    return result


def embedding_stages(embedder, sentences, device: Device) -> dict:
    """Seconds per stage of embedding ``sentences`` with a fresh runtime of the same settings
    (a cold token memo, as a first pass meets it), each stage synchronised, through the
    runtime's public steps only: building the character ids on the host, the runtime's
    :meth:`~elmo.inference.runtime.Runtime.step` (initial state, token encoder, LSTM and the
    rest of the forward: the runtime exposes no finer stages), the copy to the host, and
    writing the arrays to HDF5 as ``elmo embed`` does."""
    import h5py
    import numpy as np
    import torch

    from elmo import Embedder
    from elmo.inference.embed import select_layers
    from elmo.model.chars import batch_to_char_ids

    old = embedder.runtime
    runtime = Embedder(old.model, device=device.name, precision=old.precision, batch_size=embedder.batch_size,
                       **({"cuda_graphs": True} if old.graphs is not None else {})).runtime
    stages = dict.fromkeys(["host", "step", "to_host", "hdf5"], 0.0)
    arrays = []
    with torch.inference_mode():
        for indices in embedder.batches(sentences, embedder.batch_size):
            rows = [sentences[i] for i in indices]
            start = time.perf_counter()
            ids, mask = batch_to_char_ids(rows)
            stages["host"] += time.perf_counter() - start
            device.sync()
            start = time.perf_counter()
            out = runtime.step(ids, mask, words=rows)
            device.sync()
            stages["step"] += time.perf_counter() - start
            start = time.perf_counter()
            layers = out.layers.float().cpu().numpy()
            arrays += [select_layers(layers[i, :, :len(r)], "all") for i, r in enumerate(rows)]
            stages["to_host"] += time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        with h5py.File(Path(folder) / "out.hdf5", "w") as f:
            for index, array in enumerate(arrays):
                f.create_dataset(str(index), data=array.astype(np.float32))
        stages["hdf5"] = time.perf_counter() - start
    return {k: round(v, 4) for k, v in stages.items()}


# ======================================================================= whole-process embed
EMBED_PROCESS_PRIOR_S = 15.0  # one whole-process run of 4,000 sentences on the H200, until one is measured


def section_embed_process(rec: Recorder, args) -> None:
    """Whole-process ``elmo embed`` of generated sentences with the packaged model (eager, then
    CUDA graphs), and one in-process breakdown of the eager run (about 1.5 runs), each only if
    its estimate fits what is left."""
    device, deadline = Device(args.device), Deadline(args.ends_at)
    work = Path(args.work)
    n = 100 if args.quick else 4_000
    text = work / f"embed-{n}.txt"
    sentences = generate_sentences(n, seed=4, words=packaged_words())
    write_corpus(text, sentences)
    tokens = sum(map(len, sentences))
    rec.set("input", {"sentences": n, "tokens": tokens})
    model = ["--options", str(ROOT / "tests/fixtures/allennlp-elmo/options.json"), "--weights",
             str(ROOT / "tests/fixtures/allennlp-elmo/lm_weights.hdf5")] if args.quick else []
    estimate = EMBED_PROCESS_PRIOR_S if not args.quick else 10.0
    for name, extra, needs in (("eager", [], None), ("graphs", ["--cuda-graphs"], "cuda")):
        out = work / f"embed-{name}.hdf5"
        command = [sys.executable, "-m", "elmo.cli.main", "embed", str(text), str(out), "--device", args.device,
                   "--batch-size", "64", "--force", *model, *extra]
        key = {"run": name, "command": " ".join(["elmo", *command[3:]]).replace(str(work), "WORK")}
        why = device.why_not(needs) or (None if deadline.fits(estimate) else deadline.why_not(estimate))
        if why is not None:
            rec.not_measured(key, why)
            continue
        start = time.monotonic()
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured(key, f"no time: still running after {time.monotonic() - start:.0f} s")
            continue
        seconds = time.monotonic() - start
        estimate = max(estimate if name != "eager" else 0.0, seconds)
        row = {**key, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
               "exit_code": done.returncode}
        if done.returncode != 0:
            row["stderr"] = done.stderr[-2000:]
            rec.fail(f"embed_process: {name}: exit code {done.returncode}")
        elif out.exists():
            row["output_gib"] = round(out.stat().st_size / 2 ** 30, 3)
            out.unlink()
        rec.add("whole_process", row)
    # In-process: where the time goes, in a fresh interpreter like the command's.
    command = [sys.executable, str(SUITE), "--embed-breakdown", str(text), "--device", args.device,
               "--work", str(work)] + (["--quick"] if args.quick else [])
    done = run_row_process(rec, deadline, {"run": "breakdown"}, command, 1.5 * estimate, "breakdown")
    if done is None:
        return
    rec.set("breakdown_s", json.loads(done.stdout.strip().splitlines()[-1]))


def embed_breakdown(text: str, device: str, work: str, quick: bool) -> dict:
    """Seconds of each part of what ``elmo embed TEXT OUT.hdf5`` does, in this fresh process."""
    start = time.perf_counter()
    import torch  # noqa: F401

    from elmo import Embedder
    from elmo.hub import load_model
    from elmo.inference.embed import as_sentences
    dev = Device(device)
    times = {"imports": time.perf_counter() - start}
    start = time.perf_counter()
    model = fixture_model("allennlp") if quick else load_model()
    times["load_model"] = time.perf_counter() - start
    start = time.perf_counter()
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    dev.sync()
    times["runtime_and_warm_state"] = time.perf_counter() - start
    lines = Path(text).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines[:1000]))  # what the process's first batches pay once
    dev.sync()
    times["first_1000_sentences_warm_up"] = time.perf_counter() - start
    # Fresh runtimes (cold token memos) for the two timed runs, so that they differ by the output only.
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    start = time.perf_counter()
    embedder.embed_sentences(as_sentences(lines))
    dev.sync()
    times["embed_without_output"] = time.perf_counter() - start
    embedder = Embedder(model, device=device, batch_size=64)
    embedder.embed_sentences([["warm", "up"]])
    dev.sync()
    start = time.perf_counter()
    embedder.embed_file(text, Path(work) / "breakdown.hdf5", overwrite=True)
    times["embed_file_with_hdf5"] = time.perf_counter() - start
    times["hdf5_share"] = times["embed_file_with_hdf5"] - times["embed_without_output"]
    with contextlib.suppress(OSError):
        os.remove(Path(work) / "breakdown.hdf5")
    return {k: round(v, 3) for k, v in times.items()}


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"embed": section_embed, "embed_process": section_embed_process}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
