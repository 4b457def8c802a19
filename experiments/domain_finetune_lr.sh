#!/usr/bin/env bash
# Domain fine-tuning (docs/tasks.md): which learning rate to fine-tune the packaged biLM with on WNUT-17's
# training sentences, chosen by perplexity on WNUT-17 dev text (no task labels are read). Writes
# OUT/ft-b32-lr{0.02,0.2}/ (the fine-tuned biLM, model/, and dev-perplexity.json). Batch 32
# x 20 tokens, 3 epochs (the recipe of the first packaged model, whose options.json had batch 32):
# the packaged model's own options.json keeps the GPU batch of 2048 x 20, which makes these
# 62,730 tokens 5 optimizer steps. Resumable; one thread, low priority.
#   bash experiments/domain_finetune_lr.sh TABLES OUT
# TABLES is the runs folder of experiments/all_tables.sh, whose domain step wrote wnut/train.txt and
# wnut/dev.txt there; OUT is where the fine-tuned models go.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/domain_finetune_lr.sh TABLES OUT" >&2; exit 2; }
TABLES=$1
OUT=$2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for lr in 0.02 0.2; do  # 0.02: the rate the packaged model was last trained at; 0.2: its first
  run="$OUT/ft-b32-lr$lr"
  [ -d "$run/model" ] || {
    nice -n 19 elmo finetune src/elmo/resources/model --train "$TABLES/wnut/train.txt" --output "$run" --epochs 3 \
      --batch-size 32 --learning-rate "$lr" --no-progress $( [ -d "$run/checkpoints" ] && echo --resume )
    elmo export "$run" --output "$run/model"; }
  nice -n 19 elmo evaluate "$run/model" --data "$TABLES/wnut/dev.txt" --json "$run/dev-perplexity.json" | grep average
done
