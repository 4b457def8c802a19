#!/usr/bin/env bash
# Package a pretraining run's newest checkpoint as the default model (docs/pretraining.md), and
# measure what its model card reports. Writes src/elmo/resources/model/ (float16 storage, with its
# warm state), the curve (results/pretraining/curve.csv, forecast.json; the figure
# docs/pretraining/curve.png), the evaluations of the packaged files on WikiText-2 test, PTB test
# and the Wikipedia held-out set (results/pretraining/*-eval.json) and the float16 deviation
# (results/pretraining/float16.txt).
#   bash experiments/ship_default_model.sh RUN DATA [CONTINUES [CONTINUES_AT]]
# RUN is the training run; DATA holds the prepared sets (experiments/pretrain_default.sh writes
# wiki-heldout/; wikitext2-test/ and ptb-test/ are `elmo prepare` of WikiText-2 and PTB test). A run
# that continued an earlier one is drawn after that run's curve, CONTINUES (its curve.csv); one that
# branched off before that curve's last evaluation also gives the total training tokens of its
# branch point, CONTINUES_AT (experiments/pretrain_curve.py --continues, --continues-at). The CPU
# model was packaged with
#   bash experiments/ship_default_model.sh DATA/pretrain/anneal/lr002 DATA results/pretraining/anneal-lr005/curve.csv 29120000
set -euo pipefail
[ $# -ge 2 ] && [ $# -le 4 ] || {
  echo "usage: bash experiments/ship_default_model.sh RUN DATA [CONTINUES [CONTINUES_AT]]" >&2; exit 2; }
RUN=$1
DATA=$2
CONTINUES=()
[ -n "${3:-}" ] && CONTINUES=(--continues "$3")
[ -n "${4:-}" ] && CONTINUES+=(--continues-at "$4")
MODEL=src/elmo/resources/model
OUT=results/pretraining
mkdir -p "$OUT"
# The package's model folder also holds MODEL_CARD.md, and elmo export replaces only a folder it
# made holding nothing else: export beside it, then copy the model's four files in.
EXPORTED=$(mktemp -d)/model
elmo export "$RUN" --output "$EXPORTED" --dtype float16
cp "$EXPORTED"/{options.json,weights.hdf5,softmax_weights.hdf5,vocab.txt} "$MODEL"/
python experiments/write_warm_state.py "$MODEL"  # the first embed skips the warm-up run
python experiments/pretrain_curve.py "$RUN" "${CONTINUES[@]}" --output "$OUT" --figure docs/pretraining/curve.png
for set in wikitext2-test ptb-test wiki-heldout; do
  elmo evaluate "$MODEL" --data "$DATA/$set/train/*.txt" --json "$OUT/$set-eval.json" 2>/dev/null
done
python experiments/float16_deviation.py "$RUN" --text "$DATA/wiki-heldout/train/shard-00000.txt" \
  --sentences 300 | tee "$OUT/float16.txt"
du -b "$MODEL"/* | tee "$OUT/package-size.txt"
