#!/usr/bin/env bash
# Domain fine-tuning, as docs/training.md shows it: the walkthrough's Wikipedia-trained tiny biLM,
# fine-tuned on Gutenberg novels, both evaluated on novels it never saw (novels-00009). Run after
# experiments/train_walkthrough.sh with the same WORKDIR; every step's output, with its wall time,
# goes to WORKDIR/finetune.log.
#   bash experiments/finetune_gutenberg.sh LM WORKDIR
# LM is the language-model data folder (with gutenberg/novels-0000N-of-00010.txt.gz).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/finetune_gutenberg.sh LM WORKDIR" >&2; exit 2; }
LM=$1
WORK=$2
exec > >(tee "$WORK/finetune.log") 2>&1
step() { echo "\$ $*"; local start=$SECONDS; "$@"; echo "[$((SECONDS - start)) s]"; echo; }

step elmo prepare "$LM"/gutenberg/novels-0000[0-3]-of-00010.txt.gz --output "$WORK/novels" --min-tokens 3
step elmo prepare "$LM"/gutenberg/novels-00009-of-00010.txt.gz --output "$WORK/novels-heldout" --min-tokens 3
step elmo evaluate "$WORK/models/tiny" --data "$WORK/novels-heldout/train/*.txt" --max-targets 100000
step elmo finetune "$WORK/models/tiny" --train "$WORK/novels/train/*.txt" --output "$WORK/runs/tiny-novels" \
    --max-tokens 1000000 --log-every 100 --no-progress
step elmo evaluate "$WORK/runs/tiny-novels" --data "$WORK/novels-heldout/train/*.txt" --max-targets 100000
step elmo evaluate "$WORK/runs/tiny-novels" --data "$WORK/wiki4/heldout/*.txt"
