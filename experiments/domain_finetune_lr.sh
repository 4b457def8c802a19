#!/usr/bin/env bash
# Issue 17, domain fine-tuning: which learning rate to fine-tune the packaged biLM with on WNUT-17's
# training sentences, chosen by perplexity on WNUT-17 dev text (no task labels are read). Batch 32
# x 20 tokens, 3 epochs (the recipe of the first packaged model, whose options.json had batch 32):
# the packaged model's own options.json keeps the GPU batch of 2048 x 20, which makes these
# 62,730 tokens 5 optimizer steps. Resumable; one thread, low priority.
#   bash experiments/domain_finetune_lr.sh /work/runs/tables-v2 /work/runs/domain-lr
set -euo pipefail
TABLES=${1:?the all_tables.sh runs folder, which holds wnut/train.txt and wnut/dev.txt}
OUT=${2:?where the fine-tuned models go}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for lr in 0.02 0.2; do  # 0.02: the rate the packaged model was last trained at; 0.2: its first
  run="$OUT/ft-b32-lr$lr"
  [ -d "$run/model" ] || {
    nice -n 19 elmo finetune src/elmo/resources/model --train "$TABLES/wnut/train.txt" --output "$run" --epochs 3 \
      --batch-size 32 --learning-rate "$lr" --no-progress $( [ -d "$run/checkpoints" ] && echo --resume )
    elmo export "$run" --output "$run/model"; }
  nice -n 19 elmo evaluate "$run/model" --data "$TABLES/wnut/dev.txt" --json "$run/dev-perplexity.json" | grep average
done
