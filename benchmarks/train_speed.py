"""Training throughput of the biLM per preset: tokens/s, peak memory and model FLOPs utilisation.

Each preset runs in a fresh process (so peak memory is its own): a few warm-up steps, then timed
steps of the real training loop (both directions, sampled or full softmax, optimizer step).
Tokens are counted per direction, as ``--max-tokens`` counts them. MFU is achieved model FLOP/s
(3x the forward FLOPs, for forward + backward) over this machine's measured float32 matmul peak.

    python benchmarks/train_speed.py --train 'DATA/wiki/train/*.txt' --vocab DATA/vocab.txt \
        --output results/benchmarks/train_speed.json
    python benchmarks/train_speed.py --quick --output train_speed.json   # seconds, no data needed

``--quick``: the tiny preset, one warm-up and two timed steps on the built-in warm-up text with the
packaged model's vocabulary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (  # noqa: E402
    lstm_flops,
    matmul_peak_flops,
    peak_rss_bytes,
    quick_sentences,
    token_encoder_flops,
    write_results,
)


def measure(preset: str, train: str, vocab: str, steps: int, warmup: int, device: str) -> dict:
    import torch

    from elmo.training.train import Trainer, TrainSettings

    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(TrainSettings(train=[train], vocab=vocab, output=output, config=preset,
                                        max_tokens=10 ** 12, progress=False, device=device))
        for _ in range(warmup):
            trainer.train_step()
        if device != "cpu":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            trainer.train_step()
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    config = trainer.config
    tokens_per_second = steps * trainer.tokens_per_step / seconds
    negatives = config.training["n_negative_samples_batch"]
    samples = 0 if negatives >= len(trainer.vocab) else negatives  # as many as the words: the full softmax
    softmax_width = (samples + 1) if samples else len(trainer.vocab)
    # Per token of one direction: the encoder runs on both directions' inputs, each direction has
    # its LSTM stack and its softmax.
    forward = 2 * token_encoder_flops(config) + 2 * lstm_flops(config) + 2 * 2 * config.lstm.projection_dim * softmax_width
    achieved = 3 * forward * tokens_per_second
    peak = matmul_peak_flops(device=device)
    memory = torch.cuda.max_memory_allocated() if device != "cpu" else peak_rss_bytes()
    return {"preset": preset, "batch_size": trainer.batch_size, "unroll_steps": trainer.unroll_steps,
            "vocab_size": len(trainer.vocab), "softmax": f"sampled ({samples})" if samples else "full",
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "steps_timed": steps, "seconds": seconds, "tokens_per_second": tokens_per_second,
            "peak_memory_bytes": memory, "model_flops_per_token": 3 * forward,
            "achieved_flops": achieved, "matmul_peak_flops": peak, "mfu": achieved / peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", help="one tokenized training shard (needed unless --quick)")
    parser.add_argument("--vocab", help="its vocabulary (needed unless --quick)")
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", default="results/benchmarks/train_speed.json")
    parser.add_argument("--quick", action="store_true", help="the tiny preset, 1 + 2 steps, no data needed")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one preset, print JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.train, args.vocab, args.steps, args.warmup, args.device)))
        return 0
    with tempfile.TemporaryDirectory(prefix="elmo-train-speed-") as work:
        if args.quick:
            from elmo.hub.pretrained import packaged_model_dir

            args.presets, args.steps, args.warmup = ["tiny"], 2, 1
            args.train = args.train or quick_sentences(os.path.join(work, "train.txt"), 300)
            args.vocab = args.vocab or str(packaged_model_dir() / "vocab.txt")
        if not (args.train and args.vocab):
            parser.error("--train and --vocab are needed (or --quick)")
        results = presets(args)
    print(f"{'preset':8} {'params':>10} {'softmax':>15} {'tokens/s':>10} {'peak MB':>9} {'GFLOP/tok':>10} {'MFU':>7}")
    for r in results:
        print(f"{r['preset']:8} {r['parameters']:>10,} {r['softmax']:>15} {r['tokens_per_second']:>10.0f} "
              f"{r['peak_memory_bytes'] / 2**20:>9.0f} {r['model_flops_per_token'] / 1e9:>10.3f} {100 * r['mfu']:>6.1f}%")
    print(f"matmul peak {results[0]['matmul_peak_flops'] / 1e9:.1f} GFLOP/s float32")
    write_results(args.output, {"quick": args.quick, "results": results})
    return 0


def presets(args) -> list[dict]:
    """Each preset measured in a fresh process of its own."""
    results = []
    for preset in args.presets:
        out = subprocess.run([sys.executable, __file__, "--one", preset, "--train", args.train, "--vocab", args.vocab,
                              "--steps", str(args.steps), "--warmup", str(args.warmup), "--device", args.device],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"preset {preset} failed ({out.returncode}):\n{out.stderr[-3000:]}")
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


if __name__ == "__main__":
    sys.exit(main())
