#!/usr/bin/env bash
# One lease of a GPU machine, through the device tool, spent on pretraining (issue 17): three calls
# back to back (the machine stays only while calls follow each other within its idle time).
#   bash experiments/gpu_session.sh start .gpu/lm-data.tar.xz "0.2:880 0.05:150 0.02:180" 560
#   bash experiments/gpu_session.sh wait 590
#   bash experiments/gpu_session.sh finish 400
# 'start' unpacks the prepared shards (made here with
#   tar -C /work/data -cf - wiki/train wiki-heldout/train wikitext2-test ptb-test | xz -T2 -9 > .gpu/lm-data.tar.xz),
# measures batch prefetching (benchmarks/train_prefetch.py), starts experiments/gpu_pretrain.sh in
# its own process session so that it outlives the call, and runs the CUDA tests beside it. 'wait'
# watches it and sends back an export of its newest checkpoint, in case the machine is lost;
# 'finish' waits for its end and sends back the model, metrics and evaluations. Each step stops
# after the given seconds. Results land in $OUT: weights.hdf5, softmax_weights.hdf5 and small.tar.
set -uo pipefail
STEP=$1
HOME_DIR=/tmp/elmo-session  # the code the background job runs: the call's checkout is replaced by the next call
RESULT=/tmp/gpu-result
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT" /tmp/bin
printf '#!/bin/sh\nexec python3 -m elmo.cli.main "$@"\n' > /tmp/bin/elmo && chmod +x /tmp/bin/elmo
export PATH=/tmp/bin:$PATH PYTHONPATH=$HOME_DIR/src PYTHONUNBUFFERED=1
begin=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - begin) )); }

send_back() {  # $1: a run directory or exported model
  local model=$1
  if [ -d "$model/checkpoints" ]; then
    rm -rf /tmp/insurance && elmo export "$model" --output /tmp/insurance --dtype float16 > /dev/null 2>&1 || return
    model=/tmp/insurance
  fi
  cp "$model/weights.hdf5" "$model/softmax_weights.hdf5" "$OUT/" 2>/dev/null
  cp "$model/options.json" "$RESULT/" 2>/dev/null
  tar -C /tmp --exclude gpu-result/model -cf "$OUT/small.tar" gpu-result 2>/dev/null
}

watch_until() {  # $1: seconds from the step's start
  while [ ! -f "$RESULT/done" ] && [ "$(left "$1")" -gt 0 ]; do sleep 5; done
  tail -n 4 "$RESULT/train.log"
}

case "$STEP" in
  start)
    ARCHIVE=$2 PHASES=$3 LIMIT=${4:-560}
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    rm -rf "$HOME_DIR" "$RESULT" && mkdir -p "$HOME_DIR" "$RESULT" /tmp/lm
    cp -r src experiments benchmarks tests pyproject.toml "$HOME_DIR/"
    xz -dc "$ARCHIVE" | tar -C /tmp/lm -xf -
    cd "$HOME_DIR" || exit 1
    python3 benchmarks/train_prefetch.py src/elmo/resources/model --train "/tmp/lm/wiki/train/shard-00000.txt" \
      --device cuda --batch-size 2048 --steps 20 --warmup 5 --output "$RESULT/train_prefetch-h100.json" \
      2>&1 | tee "$RESULT/prefetch.txt"
    PREFETCH=2
    python3 -c "import json,sys; sys.exit(json.load(open('$RESULT/train_prefetch-h100.json'))['speedup'] < 1)" \
      || PREFETCH=0
    PREFETCH=$PREFETCH setsid nohup bash experiments/gpu_pretrain.sh /tmp/lm "$RESULT" "$PHASES" \
      > "$RESULT/job.out" 2>&1 < /dev/null &
    echo "pretraining started with --prefetch $PREFETCH"
    cd - > /dev/null || exit 1  # the tests want the whole checkout
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_train.py 2>&1 \
      | tail -n 15 > "$RESULT/tests.txt"
    cat "$RESULT/tests.txt"
    watch_until "$LIMIT"
    send_back "$(ls -d /tmp/gpu-pretrain-runs/phase-* | sort | tail -n 1)" ;;
  wait)
    [ -d "$RESULT" ] || { echo "no job on this machine: it is a fresh one"; exit 1; }
    watch_until "${2:-590}"
    [ -f "$RESULT/done" ] && send_back "$RESULT/model" || send_back "$(ls -d /tmp/gpu-pretrain-runs/phase-* | sort | tail -n 1)" ;;
  finish)
    [ -d "$RESULT" ] || { echo "no job on this machine: it is a fresh one"; exit 1; }
    watch_until "${2:-400}"
    if [ -f "$RESULT/done" ]; then send_back "$RESULT/model"; cat "$RESULT/evaluations.txt"
    else echo "not done"; send_back "$(ls -d /tmp/gpu-pretrain-runs/phase-* | sort | tail -n 1)"; fi ;;
  *) echo "gpu_session.sh: start, wait or finish" >&2; exit 2 ;;
esac
