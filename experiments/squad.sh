#!/usr/bin/env bash
# SQuAD (issue 15): the baseline and +ELMo at the input and output (as the paper ran SQuAD), one
# seed, at the config's budget (the first 10,000 training questions, 3 epochs), scored on all
# 10,570 dev questions. The lanes run side by side (one thread each) or one after the other,
# then the table. Resumable: re-running skips finished runs.
#   bash experiments/squad.sh a /work/runs /work/logs           # baseline
#   bash experiments/squad.sh b /work/runs /work/logs           # +ELMo at input and output
#   bash experiments/squad.sh tables /work/runs                  # docs/tasks/squad.md
#   bash experiments/squad.sh placements /work/runs /work/logs  # ELMo at the input only, at the output only
#                                                                # (about 50 CPU-minutes each; not run yet)
set -euo pipefail
LANE=$1
RUNS=${2:-runs}
LOGS=${3:-logs}
mkdir -p "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
E=(nice -n 19 python experiments/task_experiments.py)
COMMON=(--configs configs/tasks/squad.toml --seeds 1 --runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet)
case "$LANE" in
  a) "${E[@]}" main "${COMMON[@]}" --variants baseline --output "$RUNS/squad-a.md" > "$LOGS/squad-a.log" 2>&1 ;;
  b) "${E[@]}" main "${COMMON[@]}" --variants elmo --output "$RUNS/squad-b.md" > "$LOGS/squad-b.log" 2>&1 ;;
  tables) "${E[@]}" main "${COMMON[@]}" --output docs/tasks/squad.md ;;
  placements) "${E[@]}" placement "${COMMON[@]}" --output docs/tasks/squad-placement.md > "$LOGS/squad-placement.log" 2>&1 ;;
  *) echo "usage: $0 a|b|tables|placements [RUNS] [LOGS]" >&2; exit 2 ;;
esac
