#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: FP8 checkpoints, checked and
# timed in one go (the first run took 6.5 minutes on one H200 with
# KVCAL_FP8_BIG_LAYERS=16; the fast-accumulation runs and the extra servings
# add about a minute; steps capped at 5, 4 and 8 minutes), each log into
# OUTDIR, a summary last; exits 0 when every step ran clean.
#   tests  the suites that run FP8 weights: backend_ops (its fp8_quant_act rows
#          against kvcal_fp8_quant_act_ref bit for bit, its fp8_linear rows,
#          cuBLASLt's FP8 GEMMs (fp32 and fast accumulation) and the
#          dequantized fallback, against kvcal_fp8_linear_ref, each row's
#          path and worst error printed; on an H200 every scheme but
#          weight-only and 64 x 64 blocks must take the FP8 GEMM, else
#          cuBLASLt's answer is printed; its fp8_swiglu_quant rows, SwiGLU
#          with the quantization as its epilogue, bit for bit the unfused
#          pair), cuda_backend (every FP8 fixture three ways (FP8 GEMMs,
#          fallback, fast accumulation) against the served model in float64
#          (3%, or 1.5 times the fixture's bf16 spread in that layer), staged
#          through small pieces, streamed two layers at a time), eval_cuda
#          (eval of two FP8 fixtures on both
#          devices within the bf16 bounds or 1.5 times the spread of five
#          other bf16 servings on the device, beside the bf16 models),
#          fp8_linear and runner on the host
#   torch  tests/fp8_vs_torch_gpu.py: per-head K/V absmax of kvcal calibrate
#          --device cuda (FP8 GEMMs, KVCAL_FP8_GEMM=fast and =dequant) against
#          a torch model serving the same checkpoint with torch._scaled_mm,
#          every scheme (128 x 128 blocks), per layer within 2% or 1.5 times
#          the spread of 6 other torch bf16 servings in that layer
#   bench  bench/calibrate_fp8.py: Llama-3-8B shapes, per-tensor FP8 weights and
#          dynamic per-token activations: kvcal FP8 (fp32 and fast
#          accumulation) vs kvcal bf16 vs torch FP8 (eager, compiled)
#          tokens/s, TFLOP/s against the FP8 GEMM ceiling measured in the same
#          run; then a Llama-3-70B-width model of as many layers as the disk
#          holds ($KVCAL_FP8_BIG_LAYERS to fix the count, -1 to skip), FP8
#          weights resident: tokens/s per layer and peak memory. The
#          checkpoints go under $KVCAL_FP8_WORK (default OUTDIR/work), removed
#          as the run goes.
# KVCAL_FP8_SHORT=1: the bench alone, without torch, one round, no 70B-width
# model (kvcal FP8, FP8 with fast accumulation and bf16 tokens/s on the 8B
# shapes: about a minute and a half).
# KVCAL_FP8_STEPS=1: where the FP8 layer's time goes, and the targets, in
# one call of about 5 minutes: bench/runner_ops fp8 (each step of a
# Llama-3-8B FP8 layer at 16,384 rows: the four FP8 GEMMs with per-token
# and with static activation scales, fp32 and fast accumulation, every
# cuBLASLt candidate of each; the activation quantizations; add + RMSNorm
# and SwiGLU, unfused and with the quantization as their epilogue; RoPE +
# observe, the attention; their sum against the layer run 32 times back to
# back; the FP8 GEMM ceiling), then the bench with torch (eager and
# compiled), one round, no 70B-width model; no tests.
# usage: bench/run_gpu_fp8.sh OUTDIR [BUILD]     (BUILD defaults to build; it
# needs kvcal and kvcal_tests built there, and bench/runner_ops for
# KVCAL_FP8_STEPS)
set -uo pipefail
out=${1:?usage: bench/run_gpu_fp8.sh OUTDIR [BUILD]}
build=${2:-build}
short=${KVCAL_FP8_SHORT:-0}
steps=${KVCAL_FP8_STEPS:-0}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
"$build/kvcal" --version | grep -i "device\|FP8" | tee -a "$out/gpu.txt"

t_rc=0 v_rc=0 s_rc=0
bench_args=(--big-layers "${KVCAL_FP8_BIG_LAYERS:-0}")
if [ "$steps" = 1 ]; then
    timeout 150 "$build/bench/runner_ops" 10 fp8 > "$out/steps.log" 2>&1
    s_rc=$?
    bench_args=(--rounds 1 --big-layers -1)
elif [ "$short" = 1 ]; then
    bench_args=(--skip-torch --rounds 1 --big-layers -1)
else
    KVCAL_BIN=$build/kvcal timeout 300 "$build/kvcal_tests" backend_ops cuda_backend eval_cuda \
        fp8_linear runner > "$out/tests.log" 2>&1
    t_rc=$?
    tail -n 4 "$out/tests.log"

    PYTHONUNBUFFERED=1 timeout 240 python3 tests/fp8_vs_torch_gpu.py --kvcal "$build/kvcal" \
        --work "$out/work-torch" --json "$out/vs_torch.json" > "$out/vs_torch.log" 2>&1
    v_rc=$?
    rm -rf "$out/work-torch"
    tail -n 1 "$out/vs_torch.log"
fi

work=${KVCAL_FP8_WORK:-$out/work}
PYTHONUNBUFFERED=1 timeout $([ "$steps" = 1 ] && echo 330 || echo 480) python3 bench/calibrate_fp8.py "$build/kvcal" "$work" \
    "${bench_args[@]}" 2>&1 | tee "$out/bench.log"
b_rc=${PIPESTATUS[0]}
rm -rf "$work"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }
echo
echo "=== summary ==="
if [ "$steps" = 1 ]; then
    echo "steps  $(status $s_rc)   (log: $out/steps.log; bench/runner_ops 10 fp8)"
    sed -n '/^FP8 Llama-3-8B layer/,$p' "$out/steps.log" | grep -v '^  [0-9]* cuBLASLt candidates'
    echo "cuBLASLt candidates of each FP8 GEMM (ms; * the tuned choice):"
    grep -B1 '^  [0-9]* cuBLASLt candidates' "$out/steps.log" | grep -v '^--'
elif [ "$short" != 1 ]; then
    echo "tests  $(status $t_rc)   (log: $out/tests.log)"
    grep -E '^tests:|FAILED' "$out/tests.log"
    echo "FP8 GEMM rows (path taken, worst error against its bound):"
    grep -E '^ +fp8_linear/' "$out/tests.log"
    echo "FP8 fixtures against the float64 oracle (FP8 GEMMs, the dequantized fallback, fast accumulation):"
    grep -oE '\(fp8_[a-z0-9_]+: worst rel\. error [0-9.e+-]+\)' "$out/tests.log"
    grep -E 'fp8_[a-z0-9_]+: baseline ppl cpu|fp8_[a-z0-9_]+ [a-z-]+ +change cpu' "$out/tests.log"
    echo "torch  $(status $v_rc)   (log: $out/vs_torch.log)"
    grep -v 'Warning\|warn(' "$out/vs_torch.log" | tail -n 8
fi
echo "bench  $(status $b_rc)   (log: $out/bench.log)"
grep -A 14 '^Llama-3-8B shapes, .* medians' "$out/bench.log"
grep -A 2 '^Llama-3-70B width' "$out/bench.log"
[ $t_rc -eq 0 ] && [ $v_rc -eq 0 ] && [ $s_rc -eq 0 ] && [ $b_rc -eq 0 ]
