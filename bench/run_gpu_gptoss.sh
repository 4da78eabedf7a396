#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the gpt-oss and Qwen-MoE
# sliding-window checks and the gpt-oss-20b benchmark, each log into OUTDIR,
# a summary last; exits 0 when all ran clean.
#   tests  the suites that run them on the device: backend_ops (the attention
#          rows with sinks, the moe rows with gpt-oss's biases and clamped
#          SwiGLU, swiglu_oai, among the others), cuda_backend (the golden
#          gpt-oss models, one with MXFP4 experts, and the Qwen-MoE ones with
#          use_sliding_window, against transformers, within 2e-2 of its
#          float64 values; the weights through 4 KiB pieces), eval_cuda
#          (eval on the device against the host's on the golden models),
#          cuda_loader (bf16 experts stored (in, out) transposed on the device
#          by the weight loader, bit for bit as the host converts them),
#          moe_bias_cuda (the experts' bias pass, both of its paths); and
#          on the host runner, eval and model_config
#   vs     per-head K/V absmax of kvcal --device cuda against transformers bf16
#          on the GPU on those golden models (gpt-oss with eager attention:
#          transformers has no other path with sinks), limit 2e-2
#          (tests/gpu_vs_transformers.py --golden --only ...)
#   bench  bench/calibrate_moe.py --shape gpt-oss-20b: kvcal calibrate --device
#          cuda (as it runs on the GPU, then with KVCAL_MLP=unfused: on Hopper
#          the sm90 grouped GEMM against kvcal_moe_gemm_launch) against
#          transformers (experts eager and grouped_mm, attention eager and
#          flex, each eager and under torch.compile) on
#          $KVCAL_GPTOSS_LAYERS (default 4) layers of gpt-oss-20b, 8 x 2048
#          tokens a batch, $KVCAL_GPTOSS_BATCHES (default 2) batches (kvcal's
#          rate over its forward phase, its load and warm-up seconds beside
#          it); the model is built under $KVCAL_GPTOSS_WORK
#          (default OUTDIR/work, 1.6 GB a layer; removed afterwards unless
#          KVCAL_GPTOSS_KEEP=1)
#   speed  the bench in one table for the fastest transformers configuration
#          alone: kvcal, transformers with grouped_mm experts and flex
#          attention, eager and under torch.compile, and the library floor;
#          peak memory and per-head K/V absmax against transformers bf16 (its
#          run not compiled) in the table; 4 layers and 4 batches unless
#          KVCAL_GPTOSS_LAYERS / KVCAL_GPTOSS_BATCHES say otherwise (under 5
#          minutes: KVCAL_STEPS=speed)
# KVCAL_STEPS (default "tests vs bench") names the steps to run; "kvcal": the
# bench's kvcal runs alone (no variant, no transformers, no floor), with
# KVCAL_GPTOSS_BATCHES defaulting to 6 there (about a minute with 4 layers)
# usage: bench/run_gpu_gptoss.sh OUTDIR [BUILD]     (BUILD defaults to build; it
# needs kvcal and kvcal_tests built there)
set -uo pipefail
out=${1:?usage: bench/run_gpu_gptoss.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

steps=" ${KVCAL_STEPS:-tests vs bench} "
want() { [[ $steps == *" $1 "* ]]; }
t_rc=0 v_rc=0 b_rc=0

if want tests; then
    timeout 420 "$build/kvcal_tests" backend_ops cuda_backend eval_cuda cuda_loader moe_bias_cuda \
        runner eval model_config > "$out/tests.log" 2>&1
    t_rc=$?
    grep -E "gpt_oss|qwen3_moe_swa|qwen2_moe_swa|sinks|oai|transpose|FAILED" "$out/tests.log" |
        head -n 40
    tail -n 1 "$out/tests.log"
fi

if want vs; then
    timeout 300 python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" --golden \
        --only gpt_oss --only moe_swa --json "$out/vs.json" > "$out/vs.log" 2>&1
    v_rc=$?
    cat "$out/vs.log"
fi

work=${KVCAL_GPTOSS_WORK:-$out/work}
if want bench || want kvcal || want speed; then
    if want bench; then
        args=(--batches "${KVCAL_GPTOSS_BATCHES:-2}" --experts eager grouped_mm
              --kvcal-variant KVCAL_MLP=unfused)
    elif want speed; then
        args=(--batches "${KVCAL_GPTOSS_BATCHES:-4}" --experts grouped_mm
              --attn flex_attention)
    else
        args=(--batches "${KVCAL_GPTOSS_BATCHES:-6}" --experts none)
    fi
    timeout 600 python3 bench/calibrate_moe.py "$build/kvcal" "$work" "$out" \
        --shape gpt-oss-20b --layers "${KVCAL_GPTOSS_LAYERS:-4}" "${args[@]}" 2>&1 |
        tee "$out/bench.log"
    b_rc=${PIPESTATUS[0]}
    [ "${KVCAL_GPTOSS_KEEP:-0}" = 1 ] || rm -rf "$work"
fi

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }
echo
want tests && echo "tests  $(status $t_rc)   (log: $out/tests.log)"
want vs && echo "vs     $(status $v_rc)   (log: $out/vs.log)"
{ want bench || want kvcal || want speed; } &&
    echo "bench  $(status $b_rc)   (log: $out/bench.log, figures: $out/moe_bench_gpt-oss-20b.json)"
# the bench's table again, last
{ want bench || want kvcal || want speed; } && sed -n '/ layers of gpt-oss-20b, /,$p' "$out/bench.log"
[ $t_rc -eq 0 ] && [ $v_rc -eq 0 ] && [ $b_rc -eq 0 ]
