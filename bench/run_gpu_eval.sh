#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the eval test suites (the CUDA
# reductions against their references, `kvcal eval --device cuda` against
# --device cpu on stories260K, the golden models and a large-K copy), then
# `kvcal eval` on both devices on the bundled stories260K (calibrated per
# head on the default text, evaluated on another slice of it), writing each
# log into OUTDIR and printing the two tables and a summary last.
#
# usage: bench/run_gpu_eval.sh OUTDIR [BUILD]     (BUILD defaults to build)
# Shared libraries the host lacks may be put in $KVCAL_LIBS (a folder).
set -uo pipefail
out=${1:?usage: bench/run_gpu_eval.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
cd "$(dirname "$0")/.."

. bench/gpu_env.sh

KVCAL_BIN=$build/kvcal timeout 240 "$build/kvcal_tests" eval eval_cuda > "$out/tests.log" 2>&1
t_rc=$?
grep -E '^  (stories|llama|mistral|qwen)' "$out/tests.log"

tmp=$(mktemp -d)
model=models/stories260K/stories260K.bin
run="--num-samples 16 --seq-len 256 --batch 8 --quiet"
"$build/kvcal" calibrate --model $model --granularity head $run --out "$tmp/s.json" > /dev/null
args="--model $model --dataset datasets/default_calibration.txt --seed 7 --scales $tmp/s.json $run"
e_rc=0
for dev in cpu cuda; do
    s0=$(date +%s%N)
    timeout 120 "$build/kvcal" eval $args --device $dev > "$out/eval_$dev.txt" 2>&1 || e_rc=1
    s1=$(date +%s%N)
    timeout 120 "$build/kvcal" eval $args --device $dev --json > "$tmp/$dev.json" 2>/dev/null || e_rc=1
    echo "eval --device $dev (every mode, model load included): $(( (s1 - s0) / 1000000 )) ms" \
        >> "$out/eval_times.txt"
done
for dev in cpu cuda; do sed -n 1,10p "$out/eval_$dev.txt"; done
cat "$out/eval_times.txt"
python3 - "$tmp/cpu.json" "$tmp/cuda.json" <<'PY' | tee "$out/summary.txt"
import json, sys
cpu, cuda = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{'mode':14} {'ppl cpu':>9} {'ppl cuda':>9} {'chg cpu':>8} {'chg cuda':>8} "
      f"{'dSQNR K':>8} {'dSQNR V':>8} {'dclip':>8} {'datt':>8}")
for mc, mg in zip(cpu["modes"], cuda["modes"]):
    row = f"{mc['mode']:14} {mc['perplexity']:9.4f} {mg['perplexity']:9.4f} " \
          f"{100*mc['perplexity_change_rel']:+7.3f}% {100*mg['perplexity_change_rel']:+7.3f}%"
    if "layers" in mc:
        d = lambda k: max(abs((b[k] or 0) - (a[k] or 0)) for a, b in zip(mc["layers"], mg["layers"]))
        row += f" {d('k_sqnr_db'):8.3f} {d('v_sqnr_db'):8.3f} " \
               f"{max(d('k_clipped'), d('v_clipped')):8.1e} {d('attention_rel_error'):8.1e}"
    print(row)
PY
rm -rf "$tmp"
tail -n 4 "$out/tests.log"
echo "tests: $([ $t_rc -eq 0 ] && echo ok || echo "FAILED ($t_rc)"), eval cpu/cuda: $([ $e_rc -eq 0 ] && echo ok || echo FAILED)"
exit $((t_rc || e_rc))
