"""The ``allennlp`` section: ``elmo embed`` against AllenNLP 0.9's ``ElmoEmbedder`` on the same
device, the same weights (the original size) and sentences, whole process and in-process (its
code from ``benchmarks/gpu_lease_prepare.py``).

    PYTHONPATH=src python benchmarks/gpu/allennlp.py --device cpu --quick --out allennlp.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # run alone: benchmarks/ on the path in this folder's place (there `gpu` is a
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # package; here gpu/common.py would hide common.py)

from gpu.common import (BENCHMARKS, ROOT, SUITE, Deadline, Device, Recorder, generate_sentences, packaged_words,
                        run_alone, run_group, run_row_process, write_corpus)

# Where benchmarks/gpu_lease_prepare.py unpacks AllenNLP 0.9's code (carried to the lease).
ALLENNLP_SRC = ROOT / ".lease" / "allennlp-0.9.0"


ALLENNLP_SENTENCES = 1_000  # on the GPU, original size: ~24,000 tokens (AllenNLP's whole process was never timed there)
ALLENNLP_PRIOR_S = 20.0  # a whole-process run's seconds until one is measured (start-up, 374 MB of weights)


def allennlp_source() -> Path:
    """AllenNLP 0.9's unpacked code: ``ELMO_ALLENNLP_SRC``, else :data:`ALLENNLP_SRC`."""
    return Path(os.environ.get("ELMO_ALLENNLP_SRC") or ALLENNLP_SRC)


def section_allennlp(rec: Recorder, args) -> None:
    """``elmo embed --device cuda`` against AllenNLP 0.9's own ``ElmoEmbedder`` with
    ``cuda_device=0``, on the same GPU, the same weights (random, generated at the original size
    and written in the original layout, which both read) and the same generated sentences:
    whole process (``elmo embed`` and ``benchmarks/allennlp_embed.py``, every layer to HDF5,
    batches of 64), then in-process (each tool's embedder built and warmed up, then timed on the
    sentences, arrays back on the host), and the largest difference between the two tools'
    arrays. The ratios are goal figures. With ``--quick`` (or on a CPU) the same code runs on the
    test fixture's small model on the CPU: the code, not the figures. Without AllenNLP's code
    (``benchmarks/gpu_lease_prepare.py`` puts it in the tree) every row is not measured."""
    import numpy as np

    device, deadline = Device(args.device), Deadline(args.ends_at)
    source = allennlp_source()
    if not (source / "allennlp" / "modules" / "elmo.py").is_file():
        rec.not_measured({"what": "AllenNLP's ElmoEmbedder"},
                         f"AllenNLP 0.9's code is not in the tree ({source.name} missing): run python3 "
                         "benchmarks/gpu_lease_prepare.py before the lease and carry .lease/allennlp-0.9.0")
        return
    work = Path(args.work)
    small = args.quick or not device.cuda
    if small:
        folder = ROOT / "tests" / "fixtures" / "allennlp-elmo"
        options, weights = folder / "options.json", folder / "lm_weights.hdf5"
    else:
        import torch

        from elmo import BiLM
        from elmo.model.config import published_config
        from elmo.model.weights import save_bilm_tf

        options, weights = work / "allennlp-original" / "options.json", work / "allennlp-original" / "weights.hdf5"
        if not weights.exists():
            torch.manual_seed(0)
            save_bilm_tf(BiLM(published_config("original")).eval(), options.parent)
    n = 40 if small else ALLENNLP_SENTENCES
    sentences = generate_sentences(n, seed=5, words=packaged_words())
    text = work / f"allennlp-{n}.txt"
    write_corpus(text, sentences)
    tokens = sum(map(len, sentences))
    rec.set("setting", {"size": "fixture (small)" if small else "original", "sentences": n, "tokens": tokens,
                        "batch_size": 64, "device": args.device, "allennlp": "0.9.0"})
    cuda = ["--cuda-device", "0"] if device.cuda else ["--cuda-device", "-1"]
    runs = {"elmo": [sys.executable, "-m", "elmo.cli.main", "embed", str(text), str(work / "elmo.hdf5"), "--device",
                     args.device, "--batch-size", "64", "--force", "--options", str(options), "--weights", str(weights)],
            "allennlp": [sys.executable, str(BENCHMARKS / "allennlp_embed.py"), "--allennlp-src", str(source), str(options),
                         str(weights), str(text), str(work / "allennlp.hdf5"), "--batch-size", "64", *cuda]}
    seconds: dict[str, float] = {}
    estimate = 10.0 if small else ALLENNLP_PRIOR_S
    for name, command in runs.items():
        key = {"run": f"{name}, whole process", "command": " ".join(command[1:]).replace(str(work), "WORK")}
        if not deadline.fits(estimate):
            rec.not_measured(key, deadline.why_not(estimate))
            continue
        done = run_group(command, max(1.0, deadline.left()))
        if done.timed_out:
            rec.not_measured(key, f"no time: still running after {done.seconds:.0f} s")
            continue
        if done.returncode != 0:
            rec.add("whole_process", {**key, "exit_code": done.returncode, "stderr": done.stderr[-2000:]})
            rec.fail(f"allennlp: {name}: exit code {done.returncode}: {done.stderr[-500:]}")
            continue
        seconds[name] = done.seconds
        estimate = max(estimate, done.seconds)
        rec.add("whole_process", {**key, "exit_code": 0, "seconds": round(done.seconds, 2),
                                  "tokens_per_s": round(tokens / done.seconds, 1)})
    figures = {}
    if "elmo" in seconds:
        figures["elmo"] = round(tokens / seconds["elmo"], 1)
    if len(seconds) == 2:
        figures["ratio"] = round(seconds["allennlp"] / seconds["elmo"], 2)
    rec.set("figures", figures)
    # In-process, in a fresh interpreter (AllenNLP's imports stay out of this one).
    command = [sys.executable, str(SUITE), "--allennlp-in-process", str(text), "--device", args.device,
               "--work", str(work), "--options", str(options), "--weights", str(weights)]
    done = run_row_process(rec, deadline, {"run": "in-process"}, command, 2 * estimate, "allennlp in-process")
    if done is None:
        return
    found = json.loads(done.stdout.strip().splitlines()[-1])
    rec.set("in_process", found)
    # On the CPU both run float32 exactly: they must agree. On a GPU both run cuDNN's convolutions
    # in TF32 (PyTorch's default), differently grouped: the difference is recorded, not judged.
    if small and found["max_abs_diff_elmo_stateful_vs_allennlp"] > 1e-4:
        rec.fail(f"allennlp: the two tools' arrays differ by {found['max_abs_diff_elmo_stateful_vs_allennlp']:.3g}: "
                 "not the same computation")
    figures["ratio_in_process"] = round(found["allennlp_s"] / found["elmo_s"], 2)
    rec.set("figures", figures)
    del np


def allennlp_in_process(text: str, device: str, options: str, weights: str) -> dict:
    """Seconds of each tool's embedder over the sentences of ``text`` in this process, each built
    and warmed up first (on the first 64 sentences), arrays back on the host, elmo in its default
    state mode (what ``elmo embed`` runs); and, as the comparison's check, the largest difference
    between fresh embedders of the two on the first 128 sentences, elmo's ``state="stateful"``
    (AllenNLP's: the state carried from batch to batch of consecutive sentences)."""
    import numpy as np
    import torch

    from allennlp_embed import import_allennlp
    from elmo import Embedder
    from elmo.model.weights import load_bilm_tf

    dev = Device(device)
    lines = Path(text).read_text(encoding="utf-8").splitlines()
    sentences = [line.split() for line in lines if line.strip()]
    embedder = Embedder(load_bilm_tf(options, weights).eval(), device=device, batch_size=64)
    embedder.embed_sentences(sentences[:64], layers="all")
    dev.sync()
    start = time.perf_counter()
    ours = embedder.embed_sentences(sentences, layers="all")
    dev.sync()
    elmo_s = time.perf_counter() - start
    ElmoEmbedder = import_allennlp(str(allennlp_source()))
    theirs_embedder = ElmoEmbedder(options_file=options, weight_file=weights, cuda_device=0 if dev.cuda else -1)
    list(theirs_embedder.embed_sentences(sentences[:64], batch_size=64))
    dev.sync()
    start = time.perf_counter()
    theirs = list(theirs_embedder.embed_sentences(sentences, batch_size=64))
    dev.sync()
    allennlp_s = time.perf_counter() - start
    del ours, theirs
    check = sentences[:128]
    ours = Embedder(load_bilm_tf(options, weights).eval(), device=device, batch_size=64,
                    state="stateful").embed_sentences(check, layers="all")
    theirs = list(ElmoEmbedder(options_file=options, weight_file=weights,
                               cuda_device=0 if dev.cuda else -1).embed_sentences(check, batch_size=64))
    diff = max(float(np.abs(np.asarray(a, dtype=np.float32) - np.asarray(b, dtype=np.float32)).max())
               for a, b in zip(ours, theirs))
    del torch
    return {"elmo_s": round(elmo_s, 3), "allennlp_s": round(allennlp_s, 3), "sentences": len(sentences),
            "tokens": sum(map(len, sentences)), "max_abs_diff_elmo_stateful_vs_allennlp": diff}


# This module's sections by name: the driver's child runs them from here, run_alone by --section.
RUNS = {"allennlp": section_allennlp}

if __name__ == "__main__":
    sys.exit(run_alone(RUNS))
