#!/usr/bin/env bash
# Continue the default model's pretraining on one GPU (issue 17), within one device-tool call:
# the packaged model, the prepared Wikipedia shards and vocabulary of experiments/pretrain_default.sh,
# Adagrad at 0.2 for SECONDS_A, then at 0.02 (fresh accumulators, as the CPU recipe annealed) for
# SECONDS_B (0: no second phase; LR_A and SEED_A change the first phase). Each phase checkpoints often, so the time limit (a SIGTERM) loses little; the second
# phase starts from the first one's newest checkpoint. Writes the float16 export and both
# phases' metrics under $OUT.
#   tar -C DATA/wiki -cf - train | xz -T2 -6 > .gpu/wiki-train.tar.xz    # on this machine
#   bash experiments/gpu_pretrain.sh .gpu/wiki-train.tar.xz 540 0          # on the GPU machine
# Batch 2048 x 20: throughput on an H100 grows almost linearly with the batch (64: 7.9k, 256: 21.8k,
# 1024: 61k tokens/s per direction; experiments/gpu_checks.sh), so the GPU wants wide batches.
set -uo pipefail
ARCHIVE=$1
SECONDS_A=${2:-690}
SECONDS_B=${3:-170}
OUT=${OUT:-/tmp/gpu-pretrain}
RUNS=/tmp/gpu-pretrain-runs
mkdir -p "$OUT" /tmp/wiki "$RUNS"
export PYTHONUNBUFFERED=1
xz -dc "$ARCHIVE" | tar -C /tmp/wiki -xf -
COMMON=(--train "/tmp/wiki/train/*.txt" --device cuda --batch-size 2048 --negative-samples 2048
        --epochs 20 --keep-checkpoints 2 --log-every 10 --no-bf16 --no-progress)
timeout -s TERM "$SECONDS_A" elmo finetune src/elmo/resources/model "${COMMON[@]}" --output "$RUNS/A" \
  --learning-rate "${LR_A:-0.2}" --seed "${SEED_A:-5}" --checkpoint-every 40 > "$OUT/train.log" 2>&1
LAST=A
if [ "$SECONDS_B" -gt 0 ]; then
  timeout -s TERM "$SECONDS_B" elmo finetune "$RUNS/A" "${COMMON[@]}" --output "$RUNS/B" \
    --learning-rate 0.02 --seed 6 --checkpoint-every 20 >> "$OUT/train.log" 2>&1
  cp "$RUNS/B/metrics.csv" "$OUT/B-metrics.csv"
  LAST=B
fi
cp "$RUNS/A/metrics.csv" "$OUT/A-metrics.csv"
elmo export "$RUNS/$LAST" --output "$OUT/model" --dtype float16
rm -f "$OUT/model/vocab.txt"  # the packaged vocabulary, unchanged
tail -n 3 "$OUT"/*-metrics.csv
