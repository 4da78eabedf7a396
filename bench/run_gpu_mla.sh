#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the multi-head latent attention
# (DeepSeek-V2/V3, Kimi K2) checks and benchmark, each log into OUTDIR, a
# summary last; exits 0 when all ran clean. About 5 minutes on an H200.
#   tests  the suites that run MLA on the device: backend_ops (the
#          mla_latent / mla_expand / mla_ds_roundtrip rows, the grouped top-k
#          moe rows, attention at head 192 among the others), cuda_backend
#          and eval_cuda (the DeepSeek golden models against transformers and
#          the CPU backend, fp8-ds-mla among the eval modes), and on the host
#          mla_ops, mla_cli and runner
#   vs     the cached entry's absmax (and its latent's and RoPE part's) of
#          kvcal --device cuda against transformers bf16 on the DeepSeek golden
#          fixtures (tests/gpu_vs_transformers.py --golden --only deepseek,
#          limit 2e-2)
#   bench  bench/calibrate_mla.py: kvcal calibrate --device cuda against
#          transformers (each experts implementation, eager and compiled) on
#          $KVCAL_MLA_LAYERS (default 4) layers of DeepSeek-V2-Lite, 8 x 2048
#          tokens a batch, $KVCAL_MLA_BATCHES (default 2) batches; the model is
#          built under $KVCAL_MLA_WORK (default OUTDIR/work, about 1.2 GB a
#          layer; removed afterwards unless KVCAL_MLA_KEEP=1)
# usage: bench/run_gpu_mla.sh OUTDIR [BUILD]     (BUILD defaults to build; it
# needs kvcal and kvcal_tests built there)
set -uo pipefail
out=${1:?usage: bench/run_gpu_mla.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

timeout 300 "$build/kvcal_tests" backend_ops cuda_backend eval_cuda mla_ops mla_cli runner \
    > "$out/tests.log" 2>&1
t_rc=$?
tail -n 4 "$out/tests.log"

timeout 120 python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" --golden \
    --only deepseek --json "$out/vs.json" > "$out/vs.log" 2>&1
v_rc=$?
tail -n 3 "$out/vs.log"

work=${KVCAL_MLA_WORK:-$out/work}
timeout 420 python3 bench/calibrate_mla.py "$build/kvcal" "$work" "$out" \
    --layers "${KVCAL_MLA_LAYERS:-4}" --batches "${KVCAL_MLA_BATCHES:-2}" 2>&1 | tee "$out/bench.log"
b_rc=${PIPESTATUS[0]}
[ "${KVCAL_MLA_KEEP:-0}" = 1 ] || rm -rf "$work"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }
echo
echo "tests  $(status $t_rc)   (log: $out/tests.log)"
grep -E '^tests: |worst rel. error|MISMATCH|FAILED' "$out/tests.log" | head -n 12 | sed 's/^/       /'
echo "vs     $(status $v_rc)   (log: $out/vs.log)"
grep -E '^deepseek|^gpu_vs_transformers' "$out/vs.log" | cut -c1-200 | sed 's/^/       /'
echo "bench  $(status $b_rc)   (log: $out/bench.log, figures: $out/mla_bench.json)"
grep -E 'tokens/s|kvcal / fastest|MLA (latent|rope) absmax' "$out/bench.log" | tail -n 12 | sed 's/^/       /'
[ $t_rc -eq 0 ] && [ $v_rc -eq 0 ] && [ $b_rc -eq 0 ]
