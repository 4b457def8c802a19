#!/usr/bin/env bash
# Entailment (issue 17): ESIM with the paper's output placement, baseline and +ELMo, 3 seeds, at the
# configs' own budget (20 epochs, patience 4): SNLI in miniature (trained on SNLI dev minus a fixed
# 10%, scored on SNLI test) and SICK. One thread, low priority, one lane; resumable: re-running
# skips finished runs. Test scores come from elmo task evaluate on the test files. Then the diagnosis
# of each (experiments/task_experiments.py diagnose).
#   bash experiments/nli.sh /work/runs /work/logs
set -euo pipefail
RUNS=${1:-runs}
LOGS=${2:-logs}
mkdir -p "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
COMMON=(--runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet)
nice -n 19 python experiments/task_experiments.py main "${COMMON[@]}" --configs configs/tasks/snli-mini.toml \
  --output docs/tasks/snli-mini.md > "$LOGS/snli-mini.log" 2>&1
nice -n 19 python experiments/task_experiments.py main "${COMMON[@]}" --configs configs/tasks/sick.toml \
  --output docs/tasks/sick.md > "$LOGS/sick.log" 2>&1
# Learning curves, per-class errors and layer weights of both (docs/tasks/*-diagnosis.md, *-curves.png).
for task in snli-mini sick; do
  nice -n 19 python experiments/task_experiments.py diagnose "${COMMON[@]}" --configs configs/tasks/$task.toml \
    >> "$LOGS/nli-diagnose.log" 2>&1
done
