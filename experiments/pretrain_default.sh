#!/usr/bin/env bash
# Pretraining of the default model (issue 5): prepare the Wikipedia shards, build the vocabulary,
# then train (or continue training) the 2x512_128 biLM chosen in docs/pretraining.md.
#   bash experiments/pretrain_default.sh ../shared/data/lm /work/data
# Safe to re-run: finished steps are skipped and training resumes from its newest checkpoint.
set -euo pipefail
LM=${1:-../shared/data/lm}
DATA=${2:-/work/data}
mkdir -p "$DATA"
[ -f "$DATA/wiki/prepare.json" ] || elmo prepare "$LM"/wikipedia/train/*.txt.gz --output "$DATA/wiki" --min-tokens 3
[ -f "$DATA/wiki-heldout/prepare.json" ] || elmo prepare "$LM"/wikipedia/heldout/*.txt.gz --output "$DATA/wiki-heldout" --min-tokens 3
[ -f "$DATA/vocab-50k.txt" ] || elmo vocab "$DATA/wiki/train/*.txt" --output "$DATA/vocab-50k.txt" --max-size 50000
RESUME=()
[ -d "$DATA/pretrain/B/checkpoints" ] && RESUME=(--resume)
exec nice -n 19 elmo train --train "$DATA/wiki/train/*.txt" --vocab "$DATA/vocab-50k.txt" \
  --config configs/pretrain-wiki-512x128.json --output "$DATA/pretrain/B" --epochs 3 \
  --heldout "$DATA/wiki-heldout/train/*.txt" --eval-every 2000 --eval-targets 50000 \
  --checkpoint-every 500 --keep-checkpoints 2 --log-every 100 --no-progress "${RESUME[@]}"
