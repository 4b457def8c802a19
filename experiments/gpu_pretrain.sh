#!/usr/bin/env bash
# Continue the default model's pretraining on one GPU (docs/pretraining.md), as phases of
# `elmo finetune`, each from the one before (the first from the packaged model), each with fresh
# Adagrad at its own learning rate for its own number of seconds (a SIGTERM ends it; it checkpoints
# every 20 steps, so little is lost). Then the last phase's export (float16) is evaluated on the GPU
# on held-out Wikipedia, WikiText-2 test and PTB test, and the packaged model on WikiText-2 test as
# a check that the GPU's evaluation gives the CPU's numbers.
#   bash experiments/gpu_pretrain.sh DATA RESULT [PHASES]
# DATA holds the prepared shards: wiki/train, wiki-heldout/train, wikitext2-test/train and
# ptb-test/train (experiments/pretrain_default.sh and `elmo prepare`). PHASES is "RATE:SECONDS ..."
# (default "0.2:880 0.05:150 0.02:180"). Writes RESULT/model, RESULT/phase-N-metrics.csv,
# RESULT/new-*.json, RESULT/evaluations.txt and RESULT/train.log; a file RESULT/done marks the end.
# The phases' run directories go to RESULT/runs (RUNS=... puts them elsewhere). PREFETCH (default 2)
# is --prefetch; DEVICE and BATCH (cuda, 2048) are for trying the script out on the CPU. Batch
# 2048 x 20: throughput on an H100 grows with the batch (64: 7.9k, 256: 21.8k, 1024: 61k tokens/s
# per direction; docs/gpu.md), so the GPU wants wide batches.
set -uo pipefail
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: bash experiments/gpu_pretrain.sh DATA RESULT [PHASES]" >&2; exit 2; }
DATA=$1
RESULT=$2
PHASES=${3:-"0.2:880 0.05:150 0.02:180"}
RUNS=${RUNS:-$RESULT/runs}
mkdir -p "$RESULT" "$RUNS"
export PYTHONUNBUFFERED=1
HELDOUT="$DATA/wiki-heldout/train/*.txt"
COMMON=(--train "$DATA/wiki/train/*.txt" --device "${DEVICE:-cuda}" --batch-size "${BATCH:-2048}" --negative-samples 2048
        --epochs 20 --keep-checkpoints 2 --log-every 10 --checkpoint-every 20 --no-bf16 --no-progress --prefetch "${PREFETCH:-2}"
        --heldout "$HELDOUT" --eval-every 150 --eval-targets 200000)
FROM=src/elmo/resources/model
n=0
for phase in $PHASES; do
  n=$((n + 1))
  rate=${phase%%:*}
  seconds=${phase##*:}
  echo "$(date -u +%T) phase $n: learning rate $rate for $seconds s from $FROM" | tee -a "$RESULT/train.log"
  timeout -s TERM "$seconds" elmo finetune "$FROM" "${COMMON[@]}" --output "$RUNS/phase-$n" \
    --learning-rate "$rate" --seed $((4 + n)) >> "$RESULT/train.log" 2>&1
  cp "$RUNS/phase-$n/metrics.csv" "$RESULT/phase-$n-metrics.csv"
  FROM=$RUNS/phase-$n
done
rm -rf "$RESULT/model"
elmo export "$FROM" --output "$RESULT/model" --dtype float16 >> "$RESULT/train.log" 2>&1
{
  for data in wiki-heldout wikitext2-test ptb-test; do
    echo "new model, $data:"
    elmo evaluate "$RESULT/model" --data "$DATA/$data/train/*.txt" --device "${DEVICE:-cuda}" --json "$RESULT/new-$data.json"
  done
  echo "packaged model, wikitext2-test (docs/pretraining.md has its CPU figure, 237.4):"
  elmo evaluate src/elmo/resources/model --data "$DATA/wikitext2-test/train/*.txt" --device "${DEVICE:-cuda}" \
    --json "$RESULT/packaged-wikitext2-test.json"
} > "$RESULT/evaluations.txt" 2>&1
touch "$RESULT/done"
