#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the multi-head latent attention
# (DeepSeek-V2/V3, Kimi K2) checks and benchmark, each log into OUTDIR, a
# summary last; exits 0 when all ran clean. About 6 minutes on an H200 (an
# estimate: the 27-layer bench has not run yet); with KVCAL_MLA_SHORT=1 about
# 1.5 (ops and bench only, 2 layers, 1 batch, one transformers
# configuration).
#   tests  the suites that run MLA on the device: backend_ops (the
#          mla_latent / mla_expand / mla_ds_roundtrip rows, the grouped top-k
#          moe rows, attention at head 192 among the others),
#          cuda_attention_cudnn (MLA's q/k 192 / v 128 heads on cuDNN as they
#          are), cuda_backend and eval_cuda (the DeepSeek golden models
#          against transformers and the CPU backend, fp8-ds-mla among the eval
#          modes; the last MoE layer routing only, with the statistics of a
#          whole one), and on the host mla_ops, mla_cli and runner
#   vs     the cached entry's absmax (and its latent's and RoPE part's) of
#          kvcal --device cuda against transformers bf16 on the DeepSeek golden
#          fixtures (tests/gpu_vs_transformers.py --golden --only deepseek,
#          limit 2e-2)
#   ops    bench/runner_ops mla: each step of an MLA attention block at
#          DeepSeek-V2-Lite's shapes (8 x 2048 tokens), which attention the
#          runner takes (cuDNN's note), the block's sum now and before
#   bench  bench/calibrate_mla.py: kvcal calibrate --device cuda against
#          transformers on DeepSeek-V2-Lite, once for each layer count of
#          $KVCAL_MLA_LAYERS (default "4 27": the morning's comparison, then
#          all of V2-Lite's layers), 8 x 2048 tokens a batch,
#          $KVCAL_MLA_BATCHES (default 2) batches, the transformers
#          configurations $KVCAL_MLA_HF names (IMPL[+compile|+rcompile],...,
#          all or none; default grouped_mm+rcompile, each decoder layer
#          compiled, whose compile time does not grow with the layers, and
#          at 8 layers or fewer grouped_mm+compile too, the fastest measured
#          there); each model is built under $KVCAL_MLA_WORK (default
#          OUTDIR/work, about 1.2 GB a layer: 33 GB at 27) and removed after
#          its run unless KVCAL_MLA_KEEP=1
# KVCAL_MLA_STEPS picks steps (default "tests ops bench"; vs on demand);
# KVCAL_MLA_SHORT=1 makes the defaults "ops bench", 2 layers, 1 batch,
# grouped_mm+compile (the fastest transformers configuration measured).
# usage: bench/run_gpu_mla.sh OUTDIR [BUILD]     (BUILD defaults to build; it
# needs kvcal, kvcal_tests and bench/runner_ops built there)
set -uo pipefail
out=${1:?usage: bench/run_gpu_mla.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

if [ "${KVCAL_MLA_SHORT:-0}" = 1 ]; then
    steps=${KVCAL_MLA_STEPS:-ops bench}
    layer_counts=${KVCAL_MLA_LAYERS:-2} batches=${KVCAL_MLA_BATCHES:-1}
else
    steps=${KVCAL_MLA_STEPS:-tests ops bench}
    layer_counts=${KVCAL_MLA_LAYERS:-4 27} batches=${KVCAL_MLA_BATCHES:-2}
fi
# the transformers configurations of a bench of $1 layers
hf_for() {
    if [ -n "${KVCAL_MLA_HF:-}" ]; then echo "$KVCAL_MLA_HF"
    elif [ "${KVCAL_MLA_SHORT:-0}" = 1 ]; then echo grouped_mm+compile
    elif [ "$1" -le 8 ]; then echo grouped_mm+compile,grouped_mm+rcompile
    else echo grouped_mm+rcompile; fi
}
runs() { [[ " $steps " == *" $1 "* ]]; }

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
"$build/kvcal" --version > "$out/version.txt" 2>&1

t_rc=- v_rc=- o_rc=- b_rc=-
if runs tests; then
    timeout 300 "$build/kvcal_tests" backend_ops cuda_attention_cudnn cuda_backend eval_cuda \
        mla_ops mla_cli runner > "$out/tests.log" 2>&1
    t_rc=$?
    tail -n 4 "$out/tests.log"
fi

if runs vs; then
    timeout 120 python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" --golden \
        --only deepseek --json "$out/vs.json" > "$out/vs.log" 2>&1
    v_rc=$?
    tail -n 3 "$out/vs.log"
fi

if runs ops; then
    timeout 120 "$build/bench/runner_ops" 10 mla > "$out/ops.log" 2>&1
    o_rc=$?
    tail -n 20 "$out/ops.log"
fi

if runs bench; then
    work=${KVCAL_MLA_WORK:-$out/work}
    b_rc=0
    : > "$out/bench.log"
    for layers in $layer_counts; do
        # the checkpoint's writing and loading and the compilation grow with the layers
        timeout $((120 + 8 * layers)) python3 bench/calibrate_mla.py "$build/kvcal" "$work" \
            "$out/bench-$layers" --layers "$layers" --batches "$batches" \
            --transformers "$(hf_for "$layers")" 2>&1 | grep -v Warning | tee -a "$out/bench.log"
        rc=${PIPESTATUS[0]}
        [ "$rc" -eq 0 ] || b_rc=$rc
        [ "${KVCAL_MLA_KEEP:-0}" = 1 ] || rm -rf "$work"
    done
fi

status() { case $1 in -) echo "not run" ;; 0) echo ok ;; *) echo "FAILED ($1)" ;; esac; }
echo
grep -E 'attention' "$out/version.txt" | sed 's/^ */kvcal --version: /'
echo "tests  $(status "$t_rc")   (log: $out/tests.log)"
[ "$t_rc" = - ] || grep -E '^tests: |worst rel. error|q/k 192|MISMATCH|FAILED' "$out/tests.log" |
    head -n 14 | cut -c1-400 | sed 's/^/       /'
echo "vs     $(status "$v_rc")   (log: $out/vs.log)"
[ "$v_rc" = - ] || grep -E '^deepseek|^gpu_vs_transformers' "$out/vs.log" | cut -c1-200 |
    sed 's/^/       /'
echo "ops    $(status "$o_rc")   (log: $out/ops.log)"
[ "$o_rc" = - ] || grep -E '^attention|^MLA block|^mla_expand|^mla_latent|^gemm|^drop|^latent' \
    "$out/ops.log" | cut -c1-300 | sed 's/^/       /'
echo "bench  $(status "$b_rc")   (log: $out/bench.log, figures: $out/bench-LAYERS/mla_bench.json)"
[ "$b_rc" = - ] || grep -E 'tokens/s|kvcal / |MLA (latent|rope) absmax|library floor|layers of Deep|ready in|end to end|warm-up|failed' \
    "$out/bench.log" | grep -v 'sdpa\[name\]' | tail -n 40 | cut -c1-160 | sed 's/^/       /'
for rc in $t_rc $v_rc $o_rc $b_rc; do
    [ "$rc" = - ] || [ "$rc" -eq 0 ] || exit 1
done
