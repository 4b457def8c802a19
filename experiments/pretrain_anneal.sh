#!/usr/bin/env bash
# Anneal the continued default-model run (issue 17): Adagrad at 0.2 had flattened near 124 on the
# curve's measure, and two steps down in learning rate, each from fresh accumulators, took it to
# the bar. Both stages train on the same Wikipedia shards and vocabulary as
# experiments/pretrain_continue.sh; low priority, bf16 autocast, THREADS=N threads (default 1).
#   bash experiments/pretrain_anneal.sh /work/data/pretrain/C/checkpoints/step-000020500.pt /work/data
# START is the checkpoint of the lr-0.2 run to anneal (the shipped model started from C's step
# 20,500: 28.48M training tokens counting the packaged model's 15.36M).
#   stage 1: lr 0.05, seed 4, 1,000 steps (640k tokens): anneal/lr005
#   stage 2: lr 0.02, seed 5, from stage 1's last checkpoint, up to 5M tokens: anneal/lr002
# Resumable: re-running continues whichever stage is unfinished. Stage 2 is meant to be stopped
# (kill it) once its held-out evaluations stop improving; package its newest checkpoint with
#   bash experiments/ship_default_model.sh DATA/pretrain/anneal/lr002 DATA docs/pretraining/anneal-lr005/curve.csv 29120000
set -euo pipefail
START=${1:?give the lr-0.2 checkpoint to anneal}
DATA=${2:-/work/data}
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
COMMON=(--train "$DATA/wiki/train/*.txt" --heldout "$DATA/wiki-heldout/train/*.txt" --eval-every 500
        --eval-targets 50000 --checkpoint-every 500 --log-every 100 --bf16 --no-progress)
resume() { [ -d "$1/checkpoints" ] && echo --resume || true; }

STAGE1=$DATA/pretrain/anneal/lr005
# keep-checkpoints 3: the last one (step 1,000) is stage 2's start, and must outlive a resume.
nice -n 19 elmo finetune "$START" --output "$STAGE1" --max-tokens 640000 --learning-rate 0.05 --seed 4 \
  --keep-checkpoints 3 "${COMMON[@]}" $(resume "$STAGE1")

STAGE2=$DATA/pretrain/anneal/lr002
exec nice -n 19 elmo finetune "$STAGE1/checkpoints/step-000001000.pt" --output "$STAGE2" --max-tokens 5000000 \
  --learning-rate 0.02 --seed 5 --keep-checkpoints 2 "${COMMON[@]}" $(resume "$STAGE2")
