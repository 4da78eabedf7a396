#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the mixture-of-experts checks
# and benchmark, each log into OUTDIR, a summary last; exits 0 when all ran
# clean.
#   tests  the suites that run the MoE kernels and models on the device
#          (backend_ops: the moe rows and the windowed attention rows among
#          the others; cuda_backend: the golden MoE models against
#          transformers and the routing counts against the CPU's; runner and
#          stats_hdf5 on the host)
#   ops    bench/moe_ops: the MoE kernels stage by stage at Qwen3-30B-A3B's
#          shapes, kvcal's grouped GEMM validated against and timed beside
#          cuBLAS's grouped GEMM and a dense GEMM of as many rows
#   vs     per-head K/V absmax of kvcal --device cuda against transformers bf16
#          on every golden fixture, the MoE ones included
#          (tests/gpu_vs_transformers.py --golden, limit 2e-2)
#   bench  bench/calibrate_moe.py: kvcal calibrate --device cuda against
#          transformers (each experts implementation, eager and compiled) on
#          $KVCAL_MOE_LAYERS (default 8) layers of Qwen3-30B-A3B, 8 x 2048
#          tokens a batch, $KVCAL_MOE_BATCHES (default 4) batches; the model is
#          built under $KVCAL_MOE_WORK (default OUTDIR/work, about 1.2 GB a
#          layer; removed afterwards unless KVCAL_MOE_KEEP=1)
# usage: bench/run_gpu_moe.sh OUTDIR [BUILD]     (BUILD defaults to build; it
# needs kvcal, kvcal_tests and bench/moe_ops built there)
set -uo pipefail
out=${1:?usage: bench/run_gpu_moe.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

timeout 600 "$build/kvcal_tests" backend_ops cuda_backend runner stats_hdf5 > "$out/tests.log" 2>&1
t_rc=$?
tail -n 4 "$out/tests.log"

timeout 300 "$build/bench/moe_ops" 20 > "$out/ops.log" 2>&1
o_rc=$?
tail -n 1 "$out/ops.log"

python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" --golden \
    --json "$out/vs.json" > "$out/vs.log" 2>&1
v_rc=$?
tail -n 1 "$out/vs.log"

work=${KVCAL_MOE_WORK:-$out/work}
python3 bench/calibrate_moe.py "$build/kvcal" "$work" "$out" \
    --layers "${KVCAL_MOE_LAYERS:-8}" --batches "${KVCAL_MOE_BATCHES:-4}" 2>&1 | tee "$out/bench.log"
b_rc=${PIPESTATUS[0]}
[ "${KVCAL_MOE_KEEP:-0}" = 1 ] || rm -rf "$work"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }
echo
echo "tests  $(status $t_rc)   (log: $out/tests.log)"
echo "ops    $(status $o_rc)   (log: $out/ops.log)"
echo "vs     $(status $v_rc)   (log: $out/vs.log)"
echo "bench  $(status $b_rc)   (log: $out/bench.log, figures: $out/moe_bench.json)"
[ $t_rc -eq 0 ] && [ $o_rc -eq 0 ] && [ $v_rc -eq 0 ] && [ $b_rc -eq 0 ]
