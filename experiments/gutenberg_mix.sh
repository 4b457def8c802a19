#!/usr/bin/env bash
# Should the default model's training text mix in Gutenberg novels? (experiments/gutenberg_mix.py;
# docs/pretraining.md). Prepares the novels (hard-wrapped, so --wrapped; novels-00000 to train,
# novels-00009 held out), WikiText-2 test and PTB test into DATA, then continues the packaged model
# on each text and scores the two: docs/pretraining/gutenberg-mix.md. One thread, low priority, resumable.
#   bash experiments/gutenberg_mix.sh LM DATA
# LM is the language-model data folder; DATA holds the prepared Wikipedia shards of
# experiments/pretrain_default.sh (wiki/, wiki-heldout/) and gets the rest.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash experiments/gutenberg_mix.sh LM DATA" >&2; exit 2; }
LM=$1
DATA=$2
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
prep() { [ -f "$2/prepare.json" ] || nice -n 19 elmo prepare "$1" --output "$2" --min-tokens 3 --wrapped; }
prep "$LM/gutenberg/novels-00000-of-00010.txt.gz" "$DATA/novels"
prep "$LM/gutenberg/novels-00009-of-00010.txt.gz" "$DATA/novels-heldout"
[ -f "$DATA/wikitext2-test/prepare.json" ] || nice -n 19 elmo prepare "$LM/wikitext-2/test.txt" --output "$DATA/wikitext2-test"
[ -f "$DATA/ptb-test/prepare.json" ] || nice -n 19 elmo prepare "$LM/ptb/ptb.test.txt" --output "$DATA/ptb-test"
# The packaged model's 15.36M training tokens covered the shards in the order its run (seed 0)
# drew, 1, 2, 11, 0, 10, 3 and part of 4: shards 8 and 9 are Wikipedia text it has not seen.
nice -n 19 python experiments/gutenberg_mix.py --wiki "$DATA/wiki/train/shard-0000[89].txt" --novels "$DATA/novels/train/*.txt" \
  --init-from src/elmo/resources/model --work "$DATA/gutenberg-mix" --output docs/pretraining/gutenberg-mix.md \
  --eval wikipedia="$DATA/wiki-heldout/train/*.txt" novels="$DATA/novels-heldout/train/*.txt" \
         wikitext-2="$DATA/wikitext2-test/train/*.txt" ptb="$DATA/ptb-test/train/*.txt"
