#!/usr/bin/env bash
# Domain fine-tuning: a Wikipedia-trained biLM, then fine-tuned on Gutenberg novels, both
# evaluated on novels it never saw (novels-00009). Run after train_walkthrough.sh.
#   bash experiments/finetune_gutenberg.sh ../shared/data/lm WORKDIR
set -euo pipefail
LM=${1:-../shared/data/lm}
WORK=${2:-work}
exec > >(tee "$WORK/finetune.log") 2>&1
step() { echo "\$ $*"; local start=$SECONDS; "$@"; echo "[$((SECONDS - start)) s]"; echo; }

step elmo prepare "$LM"/gutenberg/novels-0000[0-3]-of-00010.txt.gz --output "$WORK/novels" --min-tokens 3
step elmo prepare "$LM"/gutenberg/novels-00009-of-00010.txt.gz --output "$WORK/novels-heldout" --min-tokens 3
step elmo evaluate "$WORK/models/tiny" --data "$WORK/novels-heldout/train/*.txt" --max-targets 100000
step elmo finetune "$WORK/models/tiny" --train "$WORK/novels/train/*.txt" --output "$WORK/runs/tiny-novels" \
    --max-tokens 1000000 --log-every 100 --no-progress
step elmo evaluate "$WORK/runs/tiny-novels" --data "$WORK/novels-heldout/train/*.txt" --max-targets 100000
step elmo evaluate "$WORK/runs/tiny-novels" --data "$WORK/wiki4/heldout/*.txt"
