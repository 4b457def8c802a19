#!/usr/bin/env bash
# Every table and plot of docs/tasks/ and docs/probes/, with the packaged model, at each config's
# own epoch budget with early stopping (no --epochs cap), 3 seeds everywhere; the small JSON files
# of every run (config, metrics, evaluations; no models) are kept in results/tasks/.
#   bash experiments/all_tables.sh RUNS [LOGS]          # everything: two lanes, then the tables
#   bash experiments/all_tables.sh RUNS [LOGS] status   # where every planned run stands; trains nothing
#   bash experiments/all_tables.sh RUNS [LOGS] save     # copy the finished runs' results into results/tasks now
#   bash experiments/all_tables.sh RUNS [LOGS] lane-a   # one lane only (lane-b: the other)
# RUNS is a folder for the runs, the biLM layer cache and the fine-tuned biLMs (tens of GB); LOGS
# (default RUNS/logs) gets a log per lane and steps.log. Two lanes run side by side, one thread
# each at low priority; each lane's steps run in order. Resumable: re-running skips every finished
# run and evaluation, so it can be stopped at any time.
# Results are saved into the repository once, at the end of the run (and of a lane run alone):
# commit them then, in one commit (results/README.md). A machine that will not last the whole run
# can 'save' before it ends; every start copies the saved runs back into RUNS, so finished runs
# are not trained again. Saved runs carry the hash of the packaged model they were made with
# (results/tasks/model.sha256): a changed packaged model drops the saved +ELMo runs (the baselines
# do not depend on it).
# RUNS must be a folder no other model's runs went to: a finished run is recognised by its
# settings, and the model is named there only as "default". The WSD probe needs WordNet 3.0
# (apt-get install wordnet-base). The data are read from ../shared/data, as the configs name them.
set -euo pipefail
usage() { echo "usage: bash experiments/all_tables.sh RUNS [LOGS] [status|save|lane-a|lane-b]" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "${2:-}" in status|save|lane-a|lane-b) set -- "$1" "$1/logs" "$2" ;; esac
# Exported: the pages' "Produced by" lines show this folder as $RUNS, not this machine's path.
export RUNS=$1
LOGS=${2:-$RUNS/logs}
mkdir -p "$RUNS" "$LOGS"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
E() { nice -n 19 python experiments/task_experiments.py "$@" --runs "$RUNS/experiments" --cache "$RUNS/cache" --quiet; }
FIVE=(configs/tasks/ner-conll2003.toml configs/tasks/ner-wnut17.toml configs/tasks/pos-ewt.toml
      configs/tasks/chunk-conll2000.toml configs/tasks/sst5.toml)
RESULTS=results/tasks
step() { echo "$(date -u +%FT%TZ) $*" >> "$LOGS/steps.log"; }
model_hash() { sha256sum src/elmo/resources/model/weights.hdf5 | cut -d' ' -f1; }
drop_elmo_runs() {  # $1/experiments, made with the model whose hash is in $1/model.sha256
  [ -f "$1/model.sha256" ] && [ "$(cat "$1/model.sha256")" != "$(model_hash)" ] || return 0
  # Runs that used ELMo belong to the old model: drop them (the repository's history keeps the
  # kept ones); the baselines never read the biLM, so they stay.
  echo "$1: made with another packaged model; dropping its +ELMo runs, keeping the baselines" >&2
  grep -l '"enabled": true' -r "$1/experiments" --include=config.json 2>/dev/null | while read -r config; do
    rm -r "$(dirname "$config")"
  done
  model_hash > "$1/model.sha256"
}
restore() {  # finished runs of earlier machines, from the repository
  drop_elmo_runs "$RESULTS"
  [ -f "$RUNS/model.sha256" ] || model_hash > "$RUNS/model.sha256"
  drop_elmo_runs "$RUNS"
  [ -d "$RESULTS/experiments" ] || return 0
  mkdir -p "$RUNS/experiments"
  local config run
  find "$RESULTS/experiments" -path '*/seed-*' -name config.json | while read -r config; do
    run="$RUNS/experiments/$(dirname "${config#"$RESULTS/experiments/"}")"
    # A kept run that is training again here (task_experiments.py trains a run again when a later
    # evaluation needs its model): its old metrics must not come back over the new training.
    [ -f "$run/last.pt" ] && [ ! -f "$run/metrics.json" ] && continue
    mkdir -p "$run"
    cp -n "$(dirname "$config")"/*.json "$run/"
  done
}
save() {  # every finished run's small JSON files into the repository
  [ -d "$RUNS/experiments" ] || return 0
  mkdir -p "$RESULTS"
  model_hash > "$RESULTS/model.sha256"
  local metrics run kept target name
  find "$RUNS/experiments" -path '*/seed-*' -name metrics.json | sort | while read -r metrics; do
    run=$(dirname "$metrics") target="$RESULTS/experiments/${run#"$RUNS/experiments/"}"
    # A run with a test file is kept once its test evaluation is written too (it follows metrics.json).
    [ -f "$run/test-eval.json" ] || grep -q '"test": null' "$run/config.json" || continue
    mkdir -p "$target"
    # Settings, metrics and the evaluations that the tables read (test, SNLI, GAP); no predictions.
    # Two lanes run apart (lane-a, lane-b) may save at once, so a file is copied under this process's
    # own name and renamed into place: two plain copies to one new file can collide ("cp: cannot
    # create regular file: File exists").
    for kept in "$run"/{config,metrics,first-training-metrics}.json "$run"/{*-eval,snli-*,gap-*}.json; do
      [ -f "$kept" ] || continue
      name=$(basename "$kept")
      cp "$kept" "$target/.$name.$BASHPID" && mv -f "$target/.$name.$BASHPID" "$target/$name"
    done
  done
  # Where every planned run stands, for a reader of the repository (each save writes its own
  # temporary file, named by its own process, and renames it into place).
  { echo "# Full-budget tables: where every planned run stands"; echo
    echo "Written by \`bash experiments/all_tables.sh RUNS LOGS save\` at $(date -u +%FT%TZ)."; echo
    status; } > "$RESULTS/STATUS.md.$BASHPID" 2>/dev/null && mv "$RESULTS/STATUS.md.$BASHPID" "$RESULTS/STATUS.md" \
    || rm -f "$RESULTS/STATUS.md.$BASHPID"
}

# The lanes are ordered so that whole tables land early, should the machine stop: first the main
# table (lane A takes SQuAD's +ELMo runs, so that both lanes finish their share of it at about the
# same time), then the short experiments (samples; the probes and the domain experiment), and last
# the long layer and placement tables. No run is in both lanes: two processes never train one run.
ELMO_B=(configs/tasks/ner-conll2003.toml configs/tasks/ner-wnut17.toml configs/tasks/pos-ewt.toml
        configs/tasks/chunk-conll2000.toml configs/tasks/sst5.toml configs/tasks/sick.toml
        configs/tasks/snli-mini.toml configs/tasks/srl-propbank-ewt.toml configs/tasks/coref-litbank.toml)
lane_a() {  # the baselines and SQuAD +ELMo, then sample efficiency, then the layer-weighting variants
  step "A: main baselines"; E main --variants baseline --output "$RUNS/main-baseline.md"
  step "A: main squad +ELMo"; E main --variants elmo --configs configs/tasks/squad.toml --output "$RUNS/main-squad.md"
  step "A: samples"; E samples --output "$RUNS/samples.md"
  step "A: precision"; E precision --variants bfloat16 int8 --output "$RUNS/precision.md"
  step "A: layers"; E layers --configs "${FIVE[@]}" --variants mix-l2-1 top --output "$RUNS/layers-a.md"
  step "A: done"
}
lane_b() {  # the other +ELMo runs, then the probes, the domain experiment and placement
  step "B: main +ELMo"; E main --variants elmo --configs "${ELMO_B[@]}" --output "$RUNS/main-elmo.md"
  # The probes and the domain step write docs and small results only (and the domain runs, which are
  # kept): once done with this packaged model, marked in the repository, a new machine does not redo
  # them (about 30 minutes of this lane). Delete the mark to redo them, as after changing their recipe.
  if [ "$(cat "$RESULTS/probes-domain.sha256" 2>/dev/null)" != "$(model_hash)" ]; then probes_and_domain; fi
  step "B: placement"; E placement --configs "${FIVE[@]}" --variants output both --output "$RUNS/placement-b.md"
  step "B: done"
}
probes_and_domain() {
  step "B: probes"
  nice -n 19 python experiments/probes.py pos --cache "$RUNS/cache" --output docs/probes/pos.md
  nice -n 19 python experiments/probes.py wsd --output docs/probes/wsd.md
  nice -n 19 python experiments/probes.py neighbours --output docs/probes/neighbours.md
  step "B: domain"
  for split in train dev test; do
    [ -f "$RUNS/wnut/$split.txt" ] || E domain-text --split $split --output "$RUNS/wnut/$split.txt"
  done
  # Batch 32: the packaged model's options.json keeps its GPU batch of 2048 x 20, which would make
  # WNUT-17's 62,730 tokens 5 steps in 3 epochs; its own learning rate, 0.02, gives a lower dev
  # perplexity than 0.2 (experiments/domain_finetune_lr.sh: 283.9 against 314.2).
  [ -d "$RUNS/wnut-ft-b32/model" ] || {
    nice -n 19 elmo finetune src/elmo/resources/model --train "$RUNS/wnut/train.txt" --output "$RUNS/wnut-ft-b32" \
      --epochs 3 --batch-size 32 --no-progress $( [ -d "$RUNS/wnut-ft-b32/checkpoints" ] && echo --resume )
    elmo export "$RUNS/wnut-ft-b32" --output "$RUNS/wnut-ft-b32/model"; }
  # The perplexity on WNUT-17's text before and after, as docs/tasks.md reports it: train is the
  # text the biLM was fine-tuned on, dev and test are not.
  for split in train dev test; do
    nice -n 19 elmo evaluate src/elmo/resources/model --data "$RUNS/wnut/$split.txt" \
      --json "$RESULTS/wnut17-$split-perplexity-unadapted.json"
    nice -n 19 elmo evaluate "$RUNS/wnut-ft-b32/model" --data "$RUNS/wnut/$split.txt" \
      --json "$RESULTS/wnut17-$split-perplexity-finetuned.json"
  done
  E domain --finetuned "$RUNS/wnut-ft-b32/model" --output docs/tasks/domain.md
  mkdir -p "$RESULTS" && model_hash > "$RESULTS/probes-domain.sha256"
}
# Everything runs from inside one function, so bash has read the whole file before it starts: an
# edit to this file while it runs changes nothing in the running copy.
everything() {
  restore
  lane_a >> "$LOGS/lane-a.log" 2>&1 &  # appended: a restart keeps the earlier lines
  lane_b >> "$LOGS/lane-b.log" 2>&1 &
  wait
  # Every run is trained by now: the tables below only read them back (and evaluate where needed).
  step "tables"
  E main --output docs/tasks/main.md
  # SICK without early stopping: the test of why +ELMo falls below the baseline there.
  E main --configs experiments/configs/sick-patience-20.toml --output docs/tasks/sick-patience-20.md
  E layers --configs "${FIVE[@]}" --output docs/tasks/layers.md
  E placement --configs "${FIVE[@]}" --output docs/tasks/placement.md
  E samples --output docs/tasks/samples.md
  E precision --output docs/tasks/precision.md  # its float32 column is the main table's CoNLL-2003 +ELMo runs
  E weights --configs "${FIVE[@]}"
  E snli --output docs/tasks/snli.md
  E gap --output docs/tasks/coref-gap.md
  # The two pair tasks: their kept test evaluations hold the confusion that the diagnosis reads.
  for task in snli-mini sick; do E diagnose --configs configs/tasks/$task.toml; done
  # Each task's own page, with its details (SRL's roles, SQuAD's EM, coreference's metrics).
  E main --configs configs/tasks/srl-propbank-ewt.toml --output docs/tasks/srl.md
  E main --configs configs/tasks/coref-litbank.toml --output docs/tasks/coref.md
  E main --configs configs/tasks/squad.toml --output docs/tasks/squad.md
  E main --configs configs/tasks/snli-mini.toml --output docs/tasks/snli-mini.md
  E main --configs configs/tasks/sick.toml --output docs/tasks/sick.md
  step "all done"
  finish
}
finish() {  # the run's results into the repository, once
  save
  echo "Saved the runs' results in $RESULTS/; the tables are in docs/tasks/ and docs/probes/." \
    "Commit them now, in one commit: git add $RESULTS docs/tasks docs/probes && git commit" >&2
}
one_lane() { restore; "$1" >> "$LOGS/$2.log" 2>&1; finish; }
status() {  # every planned training run: done, reused, partly trained or not started (trains nothing)
  E main --status
  E main --configs experiments/configs/sick-patience-20.toml --status
  E layers --configs "${FIVE[@]}" --status
  E placement --configs "${FIVE[@]}" --status
  E samples --status
  E precision --status
  echo; tail -n 4 "$LOGS/steps.log" 2>/dev/null || true
}
case "${3:-}" in
  status) restore; status ;;
  save) save ;;
  lane-a) one_lane lane_a lane-a ;;
  lane-b) one_lane lane_b lane-b ;;
  "") everything ;;
  *) echo "all_tables.sh: unknown step '$3' (status, save, lane-a or lane-b)" >&2; exit 2 ;;
esac; exit
