#!/usr/bin/env bash
# The first run of the default model (docs/pretraining.md): prepare the Wikipedia shards
# (DATA/wiki, DATA/wiki-heldout), build the vocabulary (DATA/vocab-50k.txt), then train (or
# continue training) the 2x512_128 biLM chosen there into DATA/pretrain/B.
#   bash experiments/pretrain_default.sh LM DATA
# LM is the language-model data folder (with wikipedia/train and wikipedia/heldout); DATA gets the
# prepared text and the run. Safe to re-run: finished steps are skipped and training resumes from
# its newest checkpoint.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/pretrain_default.sh LM DATA" >&2; exit 2; }
LM=$1
DATA=$2
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
