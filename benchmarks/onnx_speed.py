"""The ONNX export (``elmo export --format onnx``, docs/onnx.md) against ``elmo embed``: parity of
every layer, and the speed of whole processes (issue 62, item 2).

For each ``--sizes`` entry (``default``: the packaged model; a preset name such as ``original``:
random weights of that size, seed 0), the model is exported with the warm state (``elmo embed``'s
default) and saved in the bilm-tf layout for ``elmo embed --model``. Then:

* parity: the ``--sentences`` sentences of ``--text`` plus an empty one, one of one token, one of
  200 tokens and one of non-ASCII tokens, through onnxruntime (batches of 32 of similar length)
  and through :class:`elmo.Embedder` (float32, warm): the largest absolute difference per layer;
* speed: whole processes on the same sentences (start-up, loading, writing the HDF5 file
  included), in turns, ``--repeats`` times each after one untimed run: ``elmo embed TEXT OUT``
  and ``python examples/onnx_embed.py MODEL.onnx TEXT OUT`` (numpy, onnxruntime and h5py only:
  no PyTorch); median seconds, sentences per second, peak memory; and the largest difference
  between the two files.

    python benchmarks/onnx_speed.py --text "$DATA/wikitext-2/test.txt" --split-sentences --sentences 300 \
        --sizes default original --repeats 2 --output results/benchmarks/onnx_speed.json

``--quick``: the tiny preset, 8 generated sentences, one round: the code, in seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import REPO, installed_env, quick_sentences, random_model, write_results  # noqa: E402
from embed_speed import load_sentences  # noqa: E402

CLIENT = os.path.join(REPO, "examples", "onnx_embed.py")
SPECIAL = [[], ["One"], [f"w{i}" for i in range(200)], ["Zürich", "naïve", "日本語の文", "emoji🙂", "x" * 60]]


def read_text(path: str, n: int, split: bool) -> list[list[str]]:
    """The first ``n`` sentences of ``path``: its non-empty lines, or with ``split`` the pieces of
    them that end in a ``.`` token."""
    if not split:
        return load_sentences(path, n)
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            sentence = []
            for token in line.split():
                sentence.append(token)
                if token == "." and len(out) < n:
                    out.append(sentence)
                    sentence = []
            if sentence and len(out) < n:
                out.append(sentence)
            if len(out) >= n:
                return out
    raise SystemExit(f"{path}: only {len(out)} sentences, {n} wanted")


def load(size: str):
    """``(model, description)`` for a ``--sizes`` entry."""
    if size == "default":
        from elmo import load_model

        return load_model("default"), "packaged model"
    return random_model(size), f"random weights, preset {size}"


def parity(model, graph_path: str, sentences: list[list[str]]) -> dict:
    """Largest absolute difference per layer between onnxruntime and the Embedder (warm)."""
    import numpy as np
    import onnxruntime as ort

    from elmo import Embedder
    from elmo.inference.onnx_export import onnx_char_ids

    want = Embedder(model, state="warm").embed_sentences(sentences)
    session = ort.InferenceSession(graph_path, providers=["CPUExecutionProvider"])
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    worst = np.zeros(model.n_layers + 1)
    for start in range(0, len(order), 32):
        rows = order[start:start + 32]
        layers, _ = session.run(None, {"char_ids": onnx_char_ids([sentences[i] for i in rows])})
        for row, i in enumerate(rows):
            n = len(sentences[i])
            assert not layers[row, :, n:].any()
            if n:
                worst = np.maximum(worst, np.abs(layers[row, :, :n] - want[i]).max(axis=(1, 2)))
    return {"sentences": len(sentences), "max_abs_diff_per_layer": [float(x) for x in worst],
            "max_abs_diff": float(worst.max())}


def run_process(command: list[str], env: dict) -> dict:
    """One whole process through common.py's launcher: wall ``seconds``, ``cpu_seconds`` (user +
    system, which other jobs on the machine sway less) and ``peak_mb``."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common.py"),
                           *command], capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"returncode": done.returncode}
    if result["returncode"] != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result['returncode']}):\n{done.stderr}")
    return result


def file_difference(a: str, b: str) -> float:
    import h5py
    import numpy as np

    worst = 0.0
    with h5py.File(a, "r") as x, h5py.File(b, "r") as y:
        keys = [k for k in x if k.isdigit()]
        assert keys and sorted(keys) == sorted(k for k in y if k.isdigit())
        for k in keys:
            worst = max(worst, float(np.abs(x[k][...] - y[k][...]).max()) if x[k].size else 0.0)
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", help="tokenized sentences, one per line (needed unless --quick)")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--split-sentences", action="store_true",
                        help="cut --text's lines into sentences after each ' . ' token (wikitext's lines are "
                             "paragraphs)")
    parser.add_argument("--sizes", nargs="+", default=["default", "original"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="results/benchmarks/onnx_speed.json")
    parser.add_argument("--quick", action="store_true", help="the tiny preset on 8 sentences, one round")
    args = parser.parse_args()
    import onnxruntime

    from elmo import save_bilm_tf
    from elmo.inference.onnx_export import export_onnx

    if args.quick:
        args.sizes, args.repeats, args.sentences = ["tiny"], 1, 8
    elif not args.text:
        parser.error("--text is needed (or --quick)")
    results = []
    with tempfile.TemporaryDirectory(prefix="onnx-speed-") as work:
        env = installed_env(dict(os.environ), work)
        text = os.path.join(work, "sentences.txt")
        if args.quick:
            quick_sentences(text, args.sentences)
        else:
            with open(text, "w", encoding="utf-8") as f:
                f.writelines(" ".join(s) + "\n" for s in read_text(args.text, args.sentences, args.split_sentences))
        with open(text, encoding="utf-8") as f:
            sentences = [line.split() for line in f]
        for size in args.sizes:
            model, what = load(size)
            folder = os.path.join(work, size)
            os.makedirs(folder)
            save_bilm_tf(model, folder)
            graph = os.path.join(work, f"{size}.onnx")
            export_onnx(model, graph, state="warm")
            row = {"size": size, "model": what, "parameters": sum(p.numel() for p in model.parameters()),
                   "onnx_bytes": os.path.getsize(graph),
                   "parity": parity(model, graph, sentences + SPECIAL)}
            del model
            commands = {
                "elmo embed": [sys.executable, "-m", "elmo.cli.main", "embed", text, os.path.join(work, "elmo.hdf5"),
                               "--model", folder, "--force"],
                "onnxruntime": [sys.executable, CLIENT, graph, text, os.path.join(work, "onnx.hdf5")],
            }
            runs = {name: [] for name in commands}
            for name, command in commands.items():  # untimed: the warm state is computed and cached
                run_process(command, env)
            for _ in range(args.repeats):
                for name, command in commands.items():
                    runs[name].append(run_process(command, env))
            row["whole_process"] = {}
            for name, done in runs.items():
                seconds = statistics.median(r["seconds"] for r in done)
                row["whole_process"][name] = {
                    "seconds": seconds, "all_seconds": [r["seconds"] for r in done],
                    "cpu_seconds": statistics.median(r["cpu_seconds"] for r in done),
                    "sentences_per_s": len(sentences) / seconds, "peak_mb": max(r["peak_mb"] for r in done)}
            row["files_max_abs_diff"] = file_difference(os.path.join(work, "elmo.hdf5"), os.path.join(work, "onnx.hdf5"))
            results.append(row)
    print(f"{'size':8} {'params':>11} {'onnx MB':>8} {'max |diff|':>10} | {'elmo embed':>22} | {'onnxruntime':>22}")
    print(f"{'':8} {'':>11} {'':>8} {'':>10} | {'wall s':>6} {'cpu s':>6} {'peak MB':>8} | {'wall s':>6} "
          f"{'cpu s':>6} {'peak MB':>8}")
    for row in results:
        cells = " | ".join(f"{w['seconds']:>6.1f} {w['cpu_seconds']:>6.1f} {w['peak_mb']:>8.0f}"
                           for w in (row["whole_process"]["elmo embed"], row["whole_process"]["onnxruntime"]))
        print(f"{row['size']:8} {row['parameters']:>11,} {row['onnx_bytes'] / 2**20:>8.1f} "
              f"{row['parity']['max_abs_diff']:>10.2e} | {cells}")
    write_results(args.output, {"command": " ".join(sys.argv), "sentences": args.sentences,
                                "tokens": sum(map(len, sentences)), "onnxruntime": onnxruntime.__version__,
                                "load_average": os.getloadavg(), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
