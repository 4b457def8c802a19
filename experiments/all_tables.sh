#!/usr/bin/env bash
# Issue 17: every table in docs/tasks/ and docs/probes/ regenerated with the packaged model, at each
# config's own epoch budget with early stopping (no --epochs cap), 3 seeds everywhere. Two lanes
# side by side, one thread each at low priority; each lane's steps run in order. Resumable:
# re-running skips every finished run and evaluation, so it can be stopped at any time.
#   bash experiments/all_tables.sh /work/runs/tables-v2 /work/logs/tables-v2
#   bash experiments/all_tables.sh /work/runs/tables-v2 /work/logs/tables-v2 status   # where it stands
# RUNS must be a folder no other model's runs went to: a finished run is recognised by its
# settings, and the model is named there only as "default". The WSD probe needs WordNet 3.0
# (apt-get install wordnet-base).
set -euo pipefail
RUNS=${1:?give a fresh runs folder}
LOGS=${2:-$RUNS/logs}
mkdir -p "$RUNS" "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
E() { nice -n 19 python experiments/task_experiments.py "$@" --runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet; }
FIVE=(configs/tasks/ner-conll2003.toml configs/tasks/ner-wnut17.toml configs/tasks/pos-ewt.toml
      configs/tasks/chunk-conll2000.toml configs/tasks/sst5.toml)
step() { echo "$(date -u +%FT%TZ) $*" >> "$LOGS/steps.log"; }

lane_a() {  # the baselines, then the layer-weighting variants
  step "A: main baselines"; E main --variants baseline --output "$RUNS/main-baseline.md"
  step "A: layers"; E layers --configs "${FIVE[@]}" --variants mix-l2-1 top average --output "$RUNS/layers-a.md"
  step "A: samples"; E samples --output "$RUNS/samples.md"
  step "A: done"
}
lane_b() {  # the +ELMo runs, then placement, the probes and the domain experiment
  step "B: main +ELMo"; E main --variants elmo --output "$RUNS/main-elmo.md"
  step "B: placement"; E placement --configs "${FIVE[@]}" --variants output both --output "$RUNS/placement-b.md"
  step "B: probes"
  nice -n 19 python experiments/probes.py pos --cache "$RUNS/cache" --output docs/probes/pos.md
  nice -n 19 python experiments/probes.py wsd --output docs/probes/wsd.md
  nice -n 19 python experiments/probes.py neighbours --output docs/probes/neighbours.md
  step "B: domain"
  [ -f "$RUNS/wnut/train.txt" ] || E domain-text --output "$RUNS/wnut/train.txt"
  [ -d "$RUNS/wnut-ft/model" ] || {
    nice -n 19 elmo finetune src/elmo/resources/model --train "$RUNS/wnut/train.txt" --output "$RUNS/wnut-ft" \
      --epochs 3 --no-progress $( [ -d "$RUNS/wnut-ft/checkpoints" ] && echo --resume )
    elmo export "$RUNS/wnut-ft" --output "$RUNS/wnut-ft/model"; }
  E domain --finetuned "$RUNS/wnut-ft/model" --output docs/tasks/domain.md
  step "B: done"
}
# Everything runs from inside one function, so bash has read the whole file before it starts: an
# edit to this file while it runs changes nothing in the running copy.
everything() {
  lane_a >> "$LOGS/lane-a.log" 2>&1 &  # appended: a restart keeps the earlier lines
  lane_b >> "$LOGS/lane-b.log" 2>&1 &
  wait
  # Every run is trained by now: the tables below only read them back (and evaluate where needed).
  step "tables"
  E main --output docs/tasks/main.md
  E layers --configs "${FIVE[@]}" --output docs/tasks/layers.md
  E placement --configs "${FIVE[@]}" --output docs/tasks/placement.md
  E samples --output docs/tasks/samples.md
  E weights --configs "${FIVE[@]}"
  E snli --output docs/tasks/snli.md
  E gap --output docs/tasks/coref-gap.md
  for task in snli-mini sick sst5; do E diagnose --configs configs/tasks/$task.toml; done
  step "all done"
}
status() {  # every planned training run: done, reused, partly trained or not started (trains nothing)
  E main --status
  E layers --configs "${FIVE[@]}" --status
  E placement --configs "${FIVE[@]}" --status
  E samples --status
  echo; tail -n 4 "$LOGS/steps.log"
}
if [ "${3:-}" = status ]; then status; else everything; fi; exit
