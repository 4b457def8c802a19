#!/usr/bin/env bash
# SQuAD (issue 15): baseline, +ELMo at input and output (the main table's +ELMo), and each
# placement alone, one seed, at the config's budget (the first 10,000 training questions, 3
# epochs), scored on all 10,570 dev questions. Two lanes, one thread each, to run side by side
# (or one after the other), then the tables. Resumable: re-running skips finished runs.
#   bash experiments/squad.sh a /work/runs /work/logs   # baseline, ELMo at the input only, at the output only
#   bash experiments/squad.sh b /work/runs /work/logs   # ELMo at input and output
#   bash experiments/squad.sh tables /work/runs          # docs/tasks/squad.md, squad-placement.md
set -euo pipefail
LANE=$1
RUNS=${2:-runs}
LOGS=${3:-logs}
mkdir -p "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
E=(nice -n 19 python experiments/task_experiments.py)
COMMON=(--configs configs/tasks/squad.toml --seeds 1 --runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet)
case "$LANE" in
  a) "${E[@]}" main "${COMMON[@]}" --variants baseline --output "$RUNS/squad-a.md" > "$LOGS/squad-a.log" 2>&1
     "${E[@]}" placement "${COMMON[@]}" --variants input output --output "$RUNS/squad-a2.md" >> "$LOGS/squad-a.log" 2>&1 ;;
  b) "${E[@]}" main "${COMMON[@]}" --variants elmo --output "$RUNS/squad-b.md" > "$LOGS/squad-b.log" 2>&1 ;;
  tables) "${E[@]}" main "${COMMON[@]}" --output docs/tasks/squad.md
          "${E[@]}" placement "${COMMON[@]}" --output docs/tasks/squad-placement.md ;;
  *) echo "usage: $0 a|b|tables [RUNS] [LOGS]" >&2; exit 2 ;;
esac
