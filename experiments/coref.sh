#!/usr/bin/env bash
# Coreference (issue 14): LitBank baseline and +ELMo, 3 seeds, at the config's own budget
# (8 epochs, patience 3), the two variants side by side on the two cores, one thread each; then
# the table, and the same models scored on GAP. Resumable: re-running skips finished runs.
#   bash experiments/coref.sh /work/runs /work/logs
set -euo pipefail
RUNS=${1:-runs}
LOGS=${2:-logs}
mkdir -p "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
COMMON=(--configs configs/tasks/coref-litbank.toml --runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet)
nice -n 19 python experiments/task_experiments.py main "${COMMON[@]}" --variants baseline \
  --output "$RUNS/coref-baseline.md" > "$LOGS/coref-baseline.log" 2>&1 &
nice -n 19 python experiments/task_experiments.py main "${COMMON[@]}" --variants elmo \
  --output "$RUNS/coref-elmo.md" > "$LOGS/coref-elmo.log" 2>&1 &
wait
nice -n 19 python experiments/task_experiments.py main "${COMMON[@]}" --output docs/tasks/coref.md
nice -n 19 python experiments/task_experiments.py gap "${COMMON[@]}" --output docs/tasks/coref-gap.md
