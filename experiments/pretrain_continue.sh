#!/usr/bin/env bash
# Continue the default model's pretraining (issue 17) from the packaged model, on the same
# Wikipedia shards, vocabulary and recipe as experiments/pretrain_default.sh (whose own run
# directory and optimizer state did not survive a change of machine):
#   bash experiments/pretrain_continue.sh ../shared/data/lm /work/data
# Low priority, one thread (THREADS=2 for both cores of an otherwise idle machine), bf16 autocast
# (1.60x the float32 tokens/s at the same loss on this CPU: benchmarks/results/train_bf16.json),
# resumable: re-running it continues from the newest checkpoint.
set -euo pipefail
LM=${1:-../shared/data/lm}
DATA=${2:-/work/data}
mkdir -p "$DATA"
[ -f "$DATA/wiki/prepare.json" ] || elmo prepare "$LM"/wikipedia/train/*.txt.gz --output "$DATA/wiki" --min-tokens 3
[ -f "$DATA/wiki-heldout/prepare.json" ] || elmo prepare "$LM"/wikipedia/heldout/*.txt.gz --output "$DATA/wiki-heldout" --min-tokens 3
RESUME=()
[ -d "$DATA/pretrain/C/checkpoints" ] && RESUME=(--resume)
export OMP_NUM_THREADS=${THREADS:-1} MKL_NUM_THREADS=${THREADS:-1}
exec nice -n 19 elmo finetune src/elmo/resources/model --train "$DATA/wiki/train/*.txt" \
  --output "$DATA/pretrain/C" --epochs 2 --batch-size 32 --negative-samples 2048 --learning-rate 0.2 --seed 3 \
  --heldout "$DATA/wiki-heldout/train/*.txt" --eval-every 2000 --eval-targets 50000 \
  --checkpoint-every 500 --keep-checkpoints 2 --log-every 100 --bf16 --no-progress "${RESUME[@]}"
