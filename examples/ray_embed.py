"""Embed a text file with Ray Data and write the vectors as Parquet.

    pip install -e ".[ray]"
    python examples/ray_embed.py INPUT.txt OUTPUT_DIR [--model default] [--layers top] \
        [--concurrency 2] [--num-gpus 0] [--batch-size 256] [--address auto]

INPUT is one sentence per line (tokens split on whitespace; plain, or anything Ray's read_text
reads, several files or a folder included). OUTPUT_DIR gets Parquet files with the columns
``line`` (the 0-based line number), ``text``, ``n_tokens`` and ``embeddings`` (one array per line:
``(tokens, dim)`` for top/average, ``(layers, tokens, dim)`` for all; read them back with
``ray.data.read_parquet(OUTPUT_DIR)``). Without --address, a local Ray cluster on this machine is
started; with one, the job runs on that cluster (a multi-node cluster reads and writes paths that
every node sees, such as s3:// or a shared disk). One actor per --concurrency loads the model
once; with --num-gpus 1, each actor takes a GPU.
"""

from __future__ import annotations

import argparse

import ray

from elmo.integrations.ray import RayEmbedder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", nargs="+", help="text file(s), one sentence per line")
    parser.add_argument("output", help="folder for the Parquet files")
    parser.add_argument("--model", default="default", help="model name or path (any source elmo.hub.load_model takes)")
    parser.add_argument("--layers", default="top", choices=["top", "average", "all"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--concurrency", type=int, default=1, help="actors, each with its own copy of the model")
    parser.add_argument("--num-gpus", type=float, default=0, help="GPUs per actor (0: run on CPUs)")
    parser.add_argument("--num-cpus", type=float, default=1, help="CPUs (torch threads) per actor")
    parser.add_argument("--batch-size", type=int, default=256, help="lines per Ray batch")
    parser.add_argument("--address", help="a running Ray cluster (default: start a local one)")
    args = parser.parse_args(argv)

    ray.init(address=args.address, ignore_reinit_error=True)
    # Keep empty lines, so that row n is line n, and keep the file's order.
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    lines = ray.data.read_text(args.input, drop_empty_lines=False)
    n = lines.count()
    # Numbered and materialized (the text only, spilled to disk when large) before the actors
    # start: actors that hold every CPU would otherwise leave none for the reading tasks, and Ray
    # Data would wait for ever.
    numbered = lines.zip(ray.data.range(n).rename_columns({"id": "line"})).materialize()
    vectors = numbered.map_batches(
        RayEmbedder, fn_constructor_kwargs={"model": args.model, "layers": args.layers, "dtype": args.dtype},
        concurrency=args.concurrency, num_gpus=args.num_gpus, num_cpus=args.num_cpus, batch_size=args.batch_size)
    # Writing is I/O: it takes no CPU from the actors (and needs none to start).
    vectors.write_parquet(args.output, ray_remote_args={"num_cpus": 0})
    print(f"wrote the vectors of {n} lines to {args.output}")


if __name__ == "__main__":
    main()
