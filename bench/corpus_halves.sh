#!/usr/bin/env bash
# Splits a text corpus at the blank line nearest its middle (documents are
# separated by blank lines, so no document is cut): OUTDIR/calib.txt gets
# the first half, OUTDIR/eval.txt the second. What bench/eval_observers.sh
# and bench/run_gpu_accuracy.sh --prepare calibrate and evaluate on.
#
# usage: bench/corpus_halves.sh CORPUS OUTDIR
set -euo pipefail
corpus=${1:?usage: bench/corpus_halves.sh CORPUS OUTDIR}
out=${2:?outdir}
mkdir -p "$out"
lines=$(wc -l < "$corpus")
cut=$(awk -v h=$((lines / 2)) 'NR >= h && /^[[:space:]]*$/ { print NR; exit }' "$corpus")
[ -n "$cut" ] || { echo "corpus_halves: $corpus has no blank line after its middle: separate its documents with blank lines" >&2; exit 1; }
head -n "$cut" "$corpus" > "$out/calib.txt"
tail -n +"$((cut + 1))" "$corpus" > "$out/eval.txt"
