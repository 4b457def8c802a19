#!/usr/bin/env bash
# Package the pretraining run's newest checkpoint as the default model (issue 5), and measure
# what its model card reports:
#   bash experiments/ship_default_model.sh /work/data/pretrain/B /work/data
# A run that continued the packaged model (experiments/pretrain_continue.sh) is drawn after the
# curve it continues:
#   bash experiments/ship_default_model.sh /work/data/pretrain/C /work/data docs/pretraining/curve.csv
# and one that branched off before the earlier curve's last evaluation gives the total training
# tokens of its branch point (experiments/pretrain_curve.py --continues-at):
#   bash experiments/ship_default_model.sh /work/data/pretrain/anneal/lr002 /work/data \
#     docs/pretraining/anneal-lr005/curve.csv 29120000
# Writes src/elmo/resources/model/ (float16 storage) and docs/pretraining/{curve.csv,curve.png,
# forecast.json,*-eval.json,float16.txt}. The evaluations score the packaged (float16) files.
set -euo pipefail
RUN=${1:-/work/data/pretrain/B}
DATA=${2:-/work/data}
CONTINUES=()
[ -n "${3:-}" ] && CONTINUES=(--continues "$3")
[ -n "${4:-}" ] && CONTINUES+=(--continues-at "$4")
MODEL=src/elmo/resources/model
OUT=docs/pretraining
mkdir -p "$OUT"
elmo export "$RUN" --output "$MODEL" --dtype float16
python experiments/write_warm_state.py "$MODEL"  # the first embed skips the warm-up run
python experiments/pretrain_curve.py "$RUN" "${CONTINUES[@]}" --output "$OUT"
for set in wikitext2-test ptb-test wiki-heldout; do
  elmo evaluate "$MODEL" --data "$DATA/$set/train/*.txt" --json "$OUT/$set-eval.json" 2>/dev/null
done
python experiments/float16_deviation.py "$RUN" --text "$DATA/wiki-heldout/train/shard-00000.txt" \
  --sentences 300 | tee "$OUT/float16.txt"
du -b "$MODEL"/* | tee "$OUT/package-size.txt"
