#!/usr/bin/env bash
# What only a GPU machine can check (docs/speed.md, "The GPU"); everything lands in OUT:
#   1. the CUDA tests (tests/test_cuda.py and the CUDA branches of the training and embed tests):
#      OUT/tests.txt;
#   2. fine-tuning throughput of the packaged model on the GPU by batch size, bf16 autocast on
#      (the GPU default) and off, to choose the pretraining batch: OUT/sweep.txt;
#   3. whole-process `elmo embed` on the GPU against the CPU, same machine, same text: OUT/embed.txt.
#       bash experiments/gpu_checks.sh TEXT OUT
# TEXT is a tokenized shard (one sentence per line), e.g. the prepared Wikipedia held-out shard
# DATA/wiki-heldout/train/shard-00000.txt. Scratch files (the sweep's runs, the vectors) go to
# WORK=... (default: a new temporary folder), so that OUT keeps only the results.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/gpu_checks.sh TEXT OUT" >&2; exit 2; }
TEXT=$1
OUT=$2
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
lscpu | grep -m1 "Model name" | tee -a "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"

python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_train.py tests/test_hardening.py \
  tests/test_train_errors.py 2>&1 | tail -8 | tee "$OUT/tests.txt"

MODEL=src/elmo/resources/model
head -n 60000 "$TEXT" > "$WORK/sweep-train.txt"
for run in "64 bf16" "256 bf16" "1024 bf16" "1024 no-bf16" "2048 bf16"; do
  set -- $run
  rm -rf "$WORK/sweep-$1-$2"
  timeout 50 elmo finetune $MODEL --train "$WORK/sweep-train.txt" --output "$WORK/sweep-$1-$2" --device cuda \
    --batch-size "$1" --negative-samples 2048 --learning-rate 0.2 --log-every 10 --epochs 50 \
    --checkpoint-every 100000 --no-progress "--$2" > "$WORK/sweep-$1-$2.log" 2>&1
  python3 - "$1" "$2" "$WORK/sweep-$1-$2/metrics.csv" <<'EOF' | tee -a "$OUT/sweep.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[3])))[2:]  # the first rows include start-up
speeds = [float(r["tokens_per_second"]) for r in rows if r["tokens_per_second"]]
print(f"batch {sys.argv[1]:>5} {sys.argv[2]:>8}: {statistics.median(speeds):>9.0f} tokens/s per direction "
      f"(median of {len(speeds)} windows), last loss {rows[-1]['loss']}")
EOF
done

head -n 20000 "$TEXT" > "$WORK/embed-text.txt"
for device in cuda cpu; do
  start=$(date +%s.%N)
  elmo embed "$WORK/embed-text.txt" "$WORK/embed-$device.hdf5" --device "$device" > "$WORK/embed-$device.log" 2>&1 || echo "embed $device failed"
  end=$(date +%s.%N)
  python3 -c "print(f'elmo embed, 20,000 sentences, packaged model, --device $device: {$end - $start:.1f} s whole process')" | tee -a "$OUT/embed.txt"
done
