"""``elmo embed``: one sentence per line in, HDF5 out (the ``allennlp elmo`` layout), or vectors printed."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

from elmo.checks import NonFiniteOutputError, check_count
from elmo.cli.common import add_model_arguments, add_progress_argument, model_and_source_from_args
from elmo.devices import DEFAULT_DEVICE, DEVICES, torchrun_environment
from elmo.fileio import STDIN, chunks, read_lines
from elmo.inference.embed import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, Embedder
from elmo.inference.embed_file import (
    MAX_BYTES_PER_TOKEN,
    MAX_LINE_TOKENS,
    FileEmbedder,
    check_output,
    check_sharding,
)
from elmo.inference.outputs import (
    COMPRESSIONS,
    DEFAULT_COMPRESSION,
    DEFAULT_DTYPE,
    DEFAULT_LAYERS,
    DEFAULT_LAYOUT,
    DTYPES,
    LAYOUTS,
)
from elmo.inference.precision import BFLOAT16_FLAGS, DEFAULT_PRECISION, PRECISIONS, cpu_flags
from elmo.inference.states import DEFAULT_STATE, STATE_MODES
from elmo.threads import affinity_cpus, check_threads, set_threads, threads_help

HELP = ("Embed a file of sentences (one per line, tokens split on whitespace) into HDF5, "
        "or print a summary of the vectors when no output file is given. Resumable (--resume), "
        "shardable (--shard, or under torchrun).")

PREVIEW_VALUES = 4
# Inputs from this size on are told of --precision bfloat16 where the CPU has the instructions:
# 1 MiB is about 7,000 sentences of 23 tokens (150 bytes each), minutes of float32 at the
# original size on a 2-core CPU (docs/speed.md), where bfloat16 saves minutes rather than seconds.
BFLOAT16_HINT_BYTES = 1 << 20
# What the hint says bfloat16 gave, as measured (docs/speed.md, "What bounds bfloat16 on this
# CPU": the latest whole-process run, against the float32 of the same code): the original size's
# speed-up, and the smallest cosine of any token vector to float32's.
BFLOAT16_MEASURED = "ran 1.7x as fast (original size, 2-core AMD EPYC)"
BFLOAT16_MIN_COSINE = "0.99998"
# Sentences embedded together when printing: output starts early and memory stays bounded.
PRINT_CHUNK = 1024


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="text file, one sentence per line (plain or .gz); '-' reads standard input")
    parser.add_argument("output", nargs="?",
                        help="HDF5 file to write (a folder of shards when sharded); without it (or with '-'), "
                             "print each token's vector (first values and norm) to standard output")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output file (and discard an interrupted run's work file)")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run from its work file OUTPUT.partial/ (same input, model "
                             "and options, which is checked); starts afresh when there is none, and does nothing "
                             "when the output is already complete")
    add_model_arguments(parser)
    parser.add_argument("--layers", default=DEFAULT_LAYERS, type=parse_layers, metavar="all|top|average|N",
                        help="all: (layers, tokens, dim) per sentence; top, average or one layer index N (0: the "
                             "token layer; ELMoForManyLangs' output_layer -1 is average): (tokens, dim)")
    parser.add_argument("--layout", default=DEFAULT_LAYOUT, choices=LAYOUTS,
                        help="allennlp: one dataset per line plus sentence_to_index (the allennlp elmo layout); "
                             "packed: one (tokens, layers, dim) array plus offsets, for millions of lines")
    parser.add_argument("--dtype", default=DEFAULT_DTYPE, choices=list(DTYPES),
                        help="stored type of the vectors (float16 halves the file)")
    parser.add_argument("--compression", default=DEFAULT_COMPRESSION, choices=COMPRESSIONS,
                        help="HDF5 compression of the vectors, with byte shuffle (lzf: fast; gzip: smaller)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="sentences per batch")
    parser.add_argument("--state", default=DEFAULT_STATE, choices=STATE_MODES,
                        help="LSTM state policy; 'stateful' reproduces allennlp elmo exactly")
    # None, not DEFAULT_DEVICE: under torchrun the default is each rank's own GPU.
    parser.add_argument("--device", default=None,
                        help=f"torch device: {DEVICES}; under torchrun, the default and 'cuda' mean "
                             f"cuda:LOCAL_RANK where CUDA is available (default: {DEFAULT_DEVICE})")
    parser.add_argument("--precision", default=DEFAULT_PRECISION, choices=list(PRECISIONS),
                        help="matrix products in this precision (bfloat16: fast on CPUs with AVX-512 BF16 or AMX; "
                             "float16: GPUs; int8: CPUs with VNNI or AMX, large models, further from float32 "
                             "than bfloat16); states stay float32")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="on a GPU, replay the LSTM's steps from CUDA graphs for batch shapes that repeat "
                             "(fewer kernel launches; the same vectors to float rounding)")
    parser.add_argument("--vocab-cache", help="token vectors from elmo cache-vocab (other words use the CNN)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="padded tokens per batch (not in stateful mode, where batches are --batch-size lines); "
                             "a longer line runs alone, in windows of this many tokens")
    parser.add_argument("--max-line-tokens", type=int, default=MAX_LINE_TOKENS,
                        help=f"refuse a line of more tokens (or of more than {MAX_BYTES_PER_TOKEN} bytes per token), "
                             "naming it")
    parser.add_argument("--shard", metavar="RANK/WORLD",
                        help="embed only lines n with n %% WORLD == RANK into OUTPUT/shard-RANK-of-WORLD.hdf5 "
                             "(default: torchrun's RANK and WORLD_SIZE when run under torchrun)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help=threads_help() + "; under torchrun, the CPUs are shared among the processes it "
                                              "starts on this machine")
    add_progress_argument(parser, "sentences/s and ETA")


def launcher() -> dict[str, int] | None:
    """torchrun's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, or None outside torchrun
    (:func:`elmo.devices.torchrun_environment`: WORLD_SIZE without RANK is refused, not ignored)."""
    return torchrun_environment()


def parse_shard(text: str) -> tuple[int, int]:
    try:
        rank, world = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard: expected RANK/WORLD (e.g. 0/4), got {text!r}") from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"--shard: rank {rank} of {world}: expected 0 <= RANK < WORLD")
    return rank, world


def placement(args: argparse.Namespace) -> tuple[tuple[int, int], str, int | None, int]:
    """The shard (rank, world), device, thread count and progress-bar row of this process:
    from --shard/--device/--threads, else from torchrun's variables."""
    env = launcher()
    if args.shard is not None:
        shard = parse_shard(args.shard)
    elif env is not None:
        shard = (env["RANK"], env["WORLD_SIZE"])
    else:
        shard = (0, 1)
    local_rank = env["LOCAL_RANK"] if env else 0
    local_world = env["LOCAL_WORLD_SIZE"] if env else 1
    device = args.device
    if env is not None and device in (None, "cuda"):
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else ("cuda" if device else "cpu")
    device = device or DEFAULT_DEVICE
    threads = args.threads
    if threads is None and env is not None and device == "cpu":
        # torchrun sets OMP_NUM_THREADS=1 for every process; the cores are shared instead.
        threads = max(1, affinity_cpus() // max(1, local_world))
    if threads is not None:
        check_threads(threads)
    return shard, device, threads, local_rank


def bfloat16_hint(args: argparse.Namespace, device: str) -> str | None:
    """The one line of the progress output that tells of ``--precision bfloat16``, or None:
    only when float32 was asked for (the default, which stays exact), on a CPU with bfloat16
    instructions (AVX-512 BF16 or AMX), for an input file of at least :data:`BFLOAT16_HINT_BYTES`,
    and when progress is shown (``--progress``, the default)."""
    if args.progress is False or args.precision != "float32" or torch.device(device).type != "cpu" or args.input == STDIN:
        return None
    flags = sorted((cpu_flags() or set()) & BFLOAT16_FLAGS)
    try:
        long_input = os.path.getsize(args.input) >= BFLOAT16_HINT_BYTES
    except OSError:
        return None  # reading it will say what is wrong
    if not flags or not long_input:
        return None
    return (f"elmo embed: this CPU has {'/'.join(flags)}: --precision bfloat16 {BFLOAT16_MEASURED}, every "
            f"token vector within cosine {BFLOAT16_MIN_COSINE} of float32's (docs/speed.md); float32, the default, "
            f"is exact")


def parse_layers(value: str) -> str | int:
    """``--layers``: a named selection, or a layer index (0 the token layer, 1.. the LSTM layers)."""
    if value in ("all", "top", "average"):
        return value
    try:
        index = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected all, top, average or a layer index, got {value!r}") from None
    if index < 0:
        raise argparse.ArgumentTypeError(f"a layer index counts from 0 (the token layer), got {index}; "
                                         f"ELMoForManyLangs' -1 is 'average' here")
    return index


def run(args: argparse.Namespace) -> int:
    # Refused now, naming the option, before the model loads (the same check the Embedder makes).
    check_count(args.batch_size, "--batch-size")
    check_count(args.max_tokens, "--max-tokens")
    check_count(args.max_line_tokens, "--max-line-tokens")
    shard, device, threads, local_rank = placement(args)
    if args.cuda_graphs and not device.startswith("cuda"):
        raise ValueError(f"--cuda-graphs: CUDA graphs need a GPU; pass --device cuda (got --device {device})")
    to_stdout = args.output is None or args.output == STDIN
    if not to_stdout:
        # Fail fast, before the model loads.
        check_sharding(args.input, *shard, args.state)
        if shard[1] == 1:
            check_output(args.input, args.output, args.force or args.resume)
    else:
        if args.force or args.resume:
            raise ValueError(f"{'--force' if args.force else '--resume'}: there is no output file when printing "
                             "to standard output")
        if shard[1] > 1:
            raise ValueError("a sharded run writes files: give an output folder")
    set_threads(threads)
    model, source = model_and_source_from_args(args)
    embedder = Embedder(model, state=args.state, device=device, precision=args.precision,
                        vocab_cache=args.vocab_cache, max_tokens=args.max_tokens, batch_size=args.batch_size,
                        cuda_graphs=args.cuda_graphs, source=source)
    if to_stdout:
        print_vectors(embedder, args.input, args.layers)
        return 0
    hint = bfloat16_hint(args, device)
    if hint is not None:
        print(hint, file=sys.stderr)
    pipeline = FileEmbedder(embedder, layers=args.layers, layout=args.layout, dtype=args.dtype,
                            compression=args.compression, max_line_tokens=args.max_line_tokens,
                            progress=args.progress, progress_position=local_rank)
    report = pipeline.write(args.input, args.output, overwrite=args.force, resume=args.resume, shard=shard)
    print(f"elmo embed: {report}", file=sys.stderr)
    return 0


def print_vectors(embedder: Embedder, input_path: str, layers: str) -> None:
    """Print, per sentence, the array shape and then one line per token: its first values and
    norm. The input is read once, in chunks, so a pipe works and output starts early."""
    number = 0
    for block in chunks(read_lines(input_path), PRINT_CHUNK):
        sentences = [line.split() for line in block]
        try:
            embedded = embedder.embed_sentences(sentences, layers=layers)
        except NonFiniteOutputError as e:  # its row: the sentence's index in the block
            raise e.at(f"{input_path}:{number + e.row + 1}") from None
        for tokens, vectors in zip(sentences, embedded):
            print(f"sentence {number}: {len(tokens)} tokens, array {tuple(vectors.shape)} "
                  f"({'layers, tokens, dim; the top layer below' if vectors.ndim == 3 else 'tokens, dim'})")
            top = vectors[-1] if vectors.ndim == 3 else vectors
            width = max((len(t) for t in tokens), default=0)
            for token, vector in zip(tokens, top):
                values = " ".join(f"{v:+.3f}" for v in vector[:PREVIEW_VALUES])
                print(f"  {token:<{width}}  [{values} ...]  norm {np.linalg.norm(vector):.2f}")
            number += 1
