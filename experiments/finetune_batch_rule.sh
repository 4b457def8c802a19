#!/usr/bin/env bash
# The fine-tuning batch rule (issue 36; docs/training.md, section 6), measured as a new user meets
# it: the packaged model fine-tuned on 90% of one domain text (a hash of each document, here a
# chapter, decides) and evaluated on the other 10%: before fine-tuning, with the model's
# pretraining batch (2,048 x 20, the default before the rule) and with the rule's default (no
# --batch-size). Each run reads the same MAX_TOKENS tokens per direction (default 409,600: ten
# updates of the pretraining batch, as in the issue; MAX_TOKENS= for one epoch). Writes
# OUT/text/ (the prepared text), OUT/{pretraining-batch,rule}/ (the runs), OUT/*.json (held-out
# perplexities) and OUT/finetune_batch_rule.log (every command with its wall time). Low priority,
# one thread; resumable (finished steps are skipped).
#   bash experiments/finetune_batch_rule.sh DATA OUT
# DATA is one raw domain text, plain or .gz, hard-wrapped as Project Gutenberg's (the docs used
# ../shared/data/lm/gutenberg/novels-00002-of-00010.txt.gz); OUT is where everything goes.
# MODEL= picks another model to fine-tune (default: the packaged one), RUNS= a subset of the runs.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/finetune_batch_rule.sh DATA OUT" >&2; exit 2; }
DATA=$1
OUT=$2
MODEL=${MODEL:-default}
MAX_TOKENS=${MAX_TOKENS-409600}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/finetune_batch_rule.log") 2>&1
step() { echo "\$ $*"; local start=$SECONDS; nice -n 19 "$@"; echo "[$((SECONDS - start)) s]"; echo; }

[ -f "$OUT/text/prepare.json" ] || step elmo prepare "$DATA" --output "$OUT/text" --heldout-fraction 0.1 --wrapped
HELDOUT="$OUT/text/heldout/*.txt"
[ -f "$OUT/before.json" ] || step elmo evaluate "$MODEL" --data "$HELDOUT" --json "$OUT/before.json" --no-progress
for name in ${RUNS:-pretraining-batch rule}; do
  run="$OUT/$name"
  batch=(); [ "$name" = pretraining-batch ] && batch=(--batch-size 2048)
  if [ ! -f "$run/done" ]; then
    resume=(); [ -d "$run/checkpoints" ] && resume=(--resume)
    length=(); [ -n "$MAX_TOKENS" ] && length=(--max-tokens "$MAX_TOKENS")
    step elmo finetune "$MODEL" --train "$OUT/text/train/*.txt" --output "$run" "${batch[@]}" "${resume[@]}" \
      "${length[@]}" --log-every 10 --no-progress
    touch "$run/done"
  fi
  [ -f "$OUT/$name.json" ] || step elmo evaluate "$run" --data "$HELDOUT" --json "$OUT/$name.json" --no-progress
done
