#!/usr/bin/env bash
# Domain fine-tuning (docs/tasks.md): does fine-tuning the biLM on the very sentences the tagger trains on
# hurt? WNUT-17's tagger is trained on the first half of its training sentences
# (experiments/configs/wnut17-first-half.toml) with three biLMs: the packaged one, the packaged one
# fine-tuned on the other half's text (like dev and test, text the tagger never trains on), and
# the packaged one fine-tuned on this half's text (the sentences the tagger trains on). Fine-tuning
# as in all_tables.sh: 3 epochs, batch 32, the model's own learning rate. 3 seeds each; resumable.
# Writes docs/tasks/domain-half-ft-{second,first}-half.md; the biLMs and runs go to RUNS.
#   bash experiments/domain_half_split.sh TABLES RUNS
# TABLES is the runs folder of experiments/all_tables.sh (its domain step wrote wnut/train.txt there).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/domain_half_split.sh TABLES RUNS" >&2; exit 2; }
TABLES=$1
# Exported: the pages' "Produced by" lines show this folder as $RUNS, not this machine's path.
export RUNS=$2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
CONFIG=experiments/configs/wnut17-first-half.toml
# The tagger's half, as its config keeps it (the first this many sentences, in file order).
HALF=$(python -c "from elmo.tasks.config import load_task_config as c; print(c('$CONFIG').data.train_examples)")
mkdir -p "$RUNS/text"
head -n "$HALF" "$TABLES/wnut/train.txt" > "$RUNS/text/first-half.txt"
tail -n +"$((HALF + 1))" "$TABLES/wnut/train.txt" > "$RUNS/text/second-half.txt"
for half in second first; do
  run="$RUNS/ft-$half-half"
  [ -d "$run/model" ] || {
    nice -n 19 elmo finetune src/elmo/resources/model --train "$RUNS/text/$half-half.txt" --output "$run" --epochs 3 \
      --batch-size 32 --no-progress $( [ -d "$run/checkpoints" ] && echo --resume )
    elmo export "$run" --output "$run/model"; }
  for split in first-half second-half; do
    nice -n 19 elmo evaluate "$run/model" --data "$RUNS/text/$split.txt" --json "$run/perplexity-$split.json" | grep average
  done
  # One runs folder per fine-tuned biLM (the domain experiment's "fine-tuned" folder names no model);
  # the unadapted runs of the second are the first's, copied.
  runs="$RUNS/runs-ft-$half-half"
  [ "$half" = second ] || { mkdir -p "$runs/domain/wnut17-first-half"
    cp -rn "$RUNS/runs-ft-second-half/domain/wnut17-first-half/unadapted" "$runs/domain/wnut17-first-half/"; }
  nice -n 19 python experiments/task_experiments.py domain --configs "$CONFIG" --finetuned "$run/model" \
    --runs "$runs" --cache "$RUNS/cache" --quiet --output "docs/tasks/domain-half-ft-$half-half.md"
done
