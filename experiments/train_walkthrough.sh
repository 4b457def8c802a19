#!/usr/bin/env bash
# From raw Wikipedia text to a trained, evaluated, exported tiny biLM, as docs/training.md shows:
# WORKDIR gets the prepared data, the run (runs/tiny), its export (models/tiny) and the vectors of
# examples/sentences.txt. Every step's output goes to WORKDIR/walkthrough.log, with its wall time.
#   bash experiments/train_walkthrough.sh LM WORKDIR
# LM is the language-model data folder (with wikipedia/train/wiki.train-000NN-of-00024.txt.gz).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/train_walkthrough.sh LM WORKDIR" >&2; exit 2; }
LM=$1
WORK=$2
mkdir -p "$WORK"
exec > >(tee "$WORK/walkthrough.log") 2>&1
step() { echo "\$ $*"; local start=$SECONDS; "$@"; echo "[$((SECONDS - start)) s]"; echo; }

step elmo prepare "$LM"/wikipedia/train/wiki.train-0000[0-3]-of-00024.txt.gz --output "$WORK/wiki4" \
    --heldout-fraction 0.02 --min-tokens 3
step elmo vocab "$WORK/wiki4/train/*.txt" --output "$WORK/wiki4/vocab.txt" --max-size 30000
step elmo train --train "$WORK/wiki4/train/*.txt" --vocab "$WORK/wiki4/vocab.txt" --config tiny \
    --output "$WORK/runs/tiny" --max-tokens 1500000 --heldout "$WORK/wiki4/heldout/*.txt" --eval-every 500 \
    --eval-targets 20000 --log-every 100 --no-progress
step elmo evaluate "$WORK/runs/tiny" --data "$WORK/wiki4/heldout/*.txt"
step elmo export "$WORK/runs/tiny" --output "$WORK/models/tiny"
step elmo embed examples/sentences.txt "$WORK/sentences.hdf5" --options "$WORK/models/tiny/options.json" \
    --weights "$WORK/models/tiny/weights.hdf5"
