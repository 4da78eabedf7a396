#!/usr/bin/env bash
# What an FP8 KV cache costs on a model, with and without calibration: splits
# a corpus at the blank line nearest its middle, calibrates per head on the
# first half, evaluates every mode of `kvcal eval` on the second half, then
# does the same for a copy of the model with k_proj x $FACTOR and q_proj /
# $FACTOR (tests/make_large_k_copy.py: attention unchanged, K larger, where
# unit scales clip; 100 by default: a power of two would only move every
# exponent, the same codes under calibrated scales). Writes calib.txt,
# eval.txt, the scales and the tables (<name>.eval.txt) into OUTDIR; prints
# the tables.
#
# usage: bench/eval_evidence.sh MODEL CORPUS OUTDIR [kvcal options...]
#   (e.g. --device cuda, --tokenizer FILE); $SAMPLES (64) and $SEQ_LEN (256)
#   set the samples of both halves, $FACTOR the large-K copy's factor (100),
#   $KVCAL the binary (build/kvcal), $EVAL_MODES eval's --modes (e.g. all:
#   every cache format; default eval's own default), $PYTHON the Python with
#   numpy and safetensors (python3).
set -euo pipefail
model=${1:?usage: bench/eval_evidence.sh MODEL CORPUS OUTDIR [kvcal options...]}
corpus=${2:?corpus}
out=${3:?outdir}
shift 3
kvcal=${KVCAL:-build/kvcal}
samples=${SAMPLES:-64}
seq_len=${SEQ_LEN:-256}
python=${PYTHON:-python3}
modes=()
[ -n "${EVAL_MODES:-}" ] && modes=(--modes "$EVAL_MODES")
factor=${FACTOR:-100}
mkdir -p "$out"

lines=$(wc -l < "$corpus")
cut=$(awk -v h=$((lines / 2)) 'NR >= h && /^[[:space:]]*$/ { print NR; exit }' "$corpus")
head -n "$cut" "$corpus" > "$out/calib.txt"
tail -n +"$((cut + 1))" "$corpus" > "$out/eval.txt"

name=$(basename "${model%.bin}")
"$python" "$(dirname "$0")/../tests/make_large_k_copy.py" --factor "$factor" "$model" \
    "$out/${name}_k${factor}$([ -d "$model" ] || echo .bin)" > /dev/null
for m in "$model" "$out/${name}_k${factor}$([ -d "$model" ] || echo .bin)"; do
    n=$(basename "${m%.bin}")
    common=(--model "$m" --num-samples "$samples" --seq-len "$seq_len" "$@")
    "$kvcal" calibrate "${common[@]}" --dataset "$out/calib.txt" --granularity head \
        --out "$out/$n.scales.json" --quiet > /dev/null
    "$kvcal" eval "${common[@]}" --dataset "$out/eval.txt" --scales "$out/$n.scales.json" \
        "${modes[@]}" > "$out/$n.eval.txt"
    sed -n '1,/^recommendation/p' "$out/$n.eval.txt"
    echo
done
