"""Start-up of ``elmo embed`` for one sentence: the whole process as a user times it, and where
the time goes (imports, weight loading, warm state, first batch).

Random weights of a published size are written to a temporary folder (or ``--options`` and
``--weights`` name real files). Every measurement is a fresh process; the warm-state cache
starts empty, so the first run computes the warm state and the later ones read it. ``import
torch`` alone is measured too: it bounds what any PyTorch ELMo can reach. With
``--allennlp-src`` (an unpacked AllenNLP 0.9.0 wheel; see ``allennlp_embed.py``), AllenNLP's
``ElmoEmbedder`` embeds the same sentence with the same weights in the same rounds, its runs
interleaved with ours.

    python benchmarks/startup.py --size small --runs 5 --allennlp-src "$WORK/allennlp-0.9.0" \
        --output results/benchmarks/startup.json
    python benchmarks/startup.py --quick --output startup.json   # tiny weights, one run each: seconds

``--breakdown OPTIONS WEIGHTS`` is the process that splits the time (``embed_speed.py`` runs it
too, with ``--text`` and ``--embed-output`` to embed a file): it prints the seconds of each part as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SENTENCE = ["The", "cat", "sat", "on", "the", "mat", "."]


def breakdown(options: str, weights: str, text: str | None = None, output: str | None = None,
              batch_size: int | None = None, precision: str | None = None, vocab_cache: str | None = None,
              state: str | None = None) -> dict:
    """Seconds of the parts of an ``elmo embed`` run, in this fresh process: importing what the
    command imports, loading the weights, the warm state, then embedding :data:`SENTENCE`
    (``first_batch``) or, given ``text`` and ``output``, embedding and writing that file."""
    t0 = time.perf_counter()
    import elmo.cli.embed  # noqa: F401
    import elmo.cli.main  # noqa: F401
    from elmo.hub import load_model
    from elmo.inference.embed import Embedder
    from elmo.inference.embed_file import FileEmbedder

    t1 = time.perf_counter()
    model = load_model((options, weights))
    t2 = time.perf_counter()
    embedder = Embedder(model, **{key: value for key, value in (("batch_size", batch_size), ("precision", precision),
                                                                 ("vocab_cache", vocab_cache), ("state", state))
                                  if value is not None})
    embedder.runtime.initial_state(1)
    t3 = time.perf_counter()
    if text is None:
        embedder.embed_sentences([SENTENCE])
    else:
        FileEmbedder(embedder).write(text, output, overwrite=True)
    t4 = time.perf_counter()
    return {"imports": t1 - t0, "weight_loading": t2 - t1, "warm_state": t3 - t2,
            ("first_batch" if text is None else "embedding_and_writing"): t4 - t3}


def breakdown_command(options: str, weights: str, *extra: str) -> list[str]:
    """The command line of a fresh process that runs :func:`breakdown` and prints its JSON."""
    return [sys.executable, os.path.abspath(__file__), "--breakdown", options, weights, *extra]


def run_breakdown(command: list[str], env: dict) -> dict:
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", help="published size for random weights")
    parser.add_argument("--options", help="a real options.json (with --weights) instead of random weights")
    parser.add_argument("--weights")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--allennlp-src", help="an unpacked allennlp 0.9.0 wheel: time its ElmoEmbedder too")
    parser.add_argument("--output", default="results/benchmarks/startup.json")
    parser.add_argument("--quick", action="store_true", help="tiny random weights, one run of each: seconds")
    # internal: one breakdown process (see breakdown()), also run by embed_speed.py
    parser.add_argument("--breakdown", nargs=2, metavar=("OPTIONS", "WEIGHTS"), help=argparse.SUPPRESS)
    parser.add_argument("--text", help=argparse.SUPPRESS)
    parser.add_argument("--embed-output", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    parser.add_argument("--vocab-cache", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.breakdown:
        print(json.dumps(breakdown(*args.breakdown, text=args.text, output=args.embed_output,
                                   batch_size=args.batch_size, precision=args.precision, vocab_cache=args.vocab_cache,
                                   state=args.state)))
        return 0
    from allennlp_embed import allennlp_command
    from common import installed_env, time_process, write_results

    if args.quick:
        args.size, args.runs = "tiny", 1
    work = tempfile.mkdtemp(prefix="elmo-startup-")
    label = args.size if args.options is None else args.options
    if args.options is None:
        import torch

        from elmo import BiLM, save_bilm_tf
        from elmo.model.config import published_config

        torch.manual_seed(0)
        options, weights = save_bilm_tf(BiLM(published_config(args.size)), work)
        args.options, args.weights = str(options), str(weights)
    sentence = os.path.join(work, "one.txt")
    with open(sentence, "w", encoding="utf-8") as f:
        f.write("The cat sat on the mat .\n")
    env = installed_env({**os.environ, "ELMO_CACHE": os.path.join(work, "cache")}, work)  # the cache starts empty
    subprocess.run([sys.executable, "-c", "import elmo.cli.main, elmo.cli.embed"], check=True, env=env)
    embed = [sys.executable, "-m", "elmo.cli.main", "embed", sentence, "--options", args.options,
             "--weights", args.weights]
    first = time_process(embed, env)
    # AllenNLP with the packages of its that are installed here imported, and at its leanest
    # (every package its ELMo code never calls stood in): see allennlp_embed.py.
    allennlp = {}
    if args.allennlp_src:
        runner = allennlp_command(args.allennlp_src, args.options, args.weights, sentence,
                                  os.path.join(work, "allennlp.hdf5"))
        allennlp = {"as installed here": runner, "lean": runner + ["--lean"]}
        time_process(runner, env)  # compiles AllenNLP's bytecode, as its install would have; not counted
    cached, allennlp_runs = [], {name: [] for name in allennlp}
    for _ in range(args.runs):
        cached.append(time_process(embed, env))
        for name, command in allennlp.items():
            allennlp_runs[name].append(time_process(command, env))
    torch_only = [time_process([sys.executable, "-c", "import torch"], env) for _ in range(args.runs)]
    parts = [run_breakdown(breakdown_command(args.options, args.weights), env) for _ in range(args.runs)]
    split = {key: statistics.median(p[key] for p in parts) for key in parts[0]}
    without_bytecode = {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": os.path.join(work, "none")}
    uncompiled = [time_process(embed, without_bytecode) for _ in range(args.runs)]
    result = {"size": label, "quick": args.quick, "bytecode": "cached, as an installed package has it",
              "median_run_seconds_compiling_every_module": statistics.median(uncompiled),
              "first_run_seconds": first, "cached_run_seconds": cached,
              "median_cached_run_seconds": statistics.median(cached),
              "import_torch_seconds": statistics.median(torch_only), "breakdown_seconds": split}
    if allennlp:
        result["allennlp"] = {name: {"run_seconds": runs, "median_run_seconds": statistics.median(runs),
                                     "speedup_over_allennlp": statistics.median(runs) / statistics.median(cached)}
                              for name, runs in allennlp_runs.items()}
    print(f"elmo embed, one sentence ({result['size']}): first run {first:.2f} s (computes the warm state), "
          f"later runs {statistics.median(cached):.2f} s (median of {args.runs})")
    for name, row in result.get("allennlp", {}).items():
        print(f"AllenNLP ElmoEmbedder ({name}), one sentence: {row['median_run_seconds']:.2f} s (median of "
              f"{args.runs}, interleaved): elmo {row['speedup_over_allennlp']:.2f}x as fast")
    print(f"python -c 'import torch' alone: {result['import_torch_seconds']:.2f} s")
    print(f"later runs without cached bytecode (every elmo module compiled): "
          f"{result['median_run_seconds_compiling_every_module']:.2f} s")
    for key, value in split.items():
        print(f"  {key:<15} {value:.3f} s")
    shutil.rmtree(work)
    write_results(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
