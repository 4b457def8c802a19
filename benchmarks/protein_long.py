"""Long protein sequences through a SeqVec-shaped model: time and peak memory per length.

SeqVec's published options.json (tests/fixtures/seqvec/options.json: 2x4096_512, 2048 filters,
93.6M parameters) gets random weights, written once to a temporary folder as SeqVec ships them
(options.json + weights.hdf5). Each length then runs in a fresh process, as SeqVec's users call it:
``elmo.allennlp.ElmoEmbedder(options, weights).embed_sentence(list(sequence))``. The process
reports its resident memory after loading the model and its peak, so the peak's growth over the
loaded model is what the sequence costs, and the CPU seconds of the call besides its wall time (on
a machine shared with other jobs, the wall time is only an upper bound).

    python benchmarks/protein_long.py --lengths 1000 5000 --output results/benchmarks/protein_long.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import write_results  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONS = os.path.join(ROOT, "tests", "fixtures", "seqvec", "options.json")

RUN = """
import json, resource, sys, time
import numpy as np
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
from elmo.allennlp import ElmoEmbedder
embedder = ElmoEmbedder({options!r}, {weights!r})
loaded = rss()
rng = np.random.default_rng(0)
sequence = "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWYX"), size={length}))
usage = resource.getrusage(resource.RUSAGE_SELF)
start, cpu = time.perf_counter(), usage.ru_utime + usage.ru_stime
vectors = embedder.embed_sentence(list(sequence))
seconds = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu_seconds = usage.ru_utime + usage.ru_stime - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"length": {length}, "seconds": seconds, "cpu_seconds": cpu_seconds, "rss_after_load": loaded, "peak_rss": peak,
                  "output_bytes": vectors.nbytes, "shape": list(vectors.shape), "finite": bool(np.isfinite(vectors).all())}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--output", help="JSON file to write")
    args = parser.parse_args()

    import torch

    from elmo import BiLM, BiLMConfig, save_bilm_tf

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        options, weights = save_bilm_tf(BiLM(BiLMConfig.from_json(OPTIONS)), tmp)
        for length in args.lengths:
            code = RUN.format(options=options, weights=weights, length=length)
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"length {length} failed:\n{done.stderr}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    mb = 2**20
    print(f"{'residues':>8} {'CPU s':>7} {'wall s':>7} {'RSS loaded MB':>14} {'peak RSS MB':>12} {'growth MB':>10} "
          f"{'output MB':>10}")
    for r in rows:
        print(f"{r['length']:>8} {r['cpu_seconds']:>7.1f} {r['seconds']:>7.1f} {r['rss_after_load'] / mb:>14.0f} "
              f"{r['peak_rss'] / mb:>12.0f} "
              f"{(r['peak_rss'] - r['rss_after_load']) / mb:>10.0f} {r['output_bytes'] / mb:>10.1f}")
    if args.output:
        write_results(args.output, {"options": "tests/fixtures/seqvec/options.json (random weights)",
                                    "call": "ElmoEmbedder(options, weights).embed_sentence(list(sequence))",
                                    "runs": rows})


if __name__ == "__main__":
    main()
