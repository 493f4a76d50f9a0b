#!/usr/bin/env bash
# The README's quality table: train the small preset on the embedded Bible EN-DE for a fixed
# budget, then sacreBLEU BLEU and chrF on the held-out books for greedy decoding vs beam 4
# (alpha 0.6), on the last checkpoint and on the average of the last checkpoints (Vaswani et al.,
# 2017, §6.1). Each evaluation prints one JSON line.
#   STEPS=600 LAST=5 LIMIT= bench/quality.sh     (LIMIT: only the first N test verses; empty: all)
set -euo pipefail
KT=${KT:-.venv/bin/keras-transformer}
DIR=${DIR:-runs/quality}
STEPS=${STEPS:-600}
LAST=${LAST:-5}
LIMIT=${LIMIT:-}

"$KT" train --data bible-en-de --preset small --model-dir "$DIR" --max-steps "$STEPS" --steps-per-epoch 50 \
  --batch-tokens 2048 --warmup-steps 400 --learning-rate-scale 2
"$KT" average --model-dir "$DIR" --last "$LAST"
for checkpoint in latest averaged; do
  "$KT" evaluate --model-dir "$DIR" --checkpoint "$checkpoint" --beam-size 1 --alpha 0 --show 0 ${LIMIT:+--limit "$LIMIT"}
  "$KT" evaluate --model-dir "$DIR" --checkpoint "$checkpoint" --beam-size 4 --alpha 0.6 --show 0 ${LIMIT:+--limit "$LIMIT"}
done
