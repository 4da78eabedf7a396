#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the mixture-of-experts checks
# and benchmark, the steps named in $KVCAL_STEPS (default "tests ops bench",
# about 5 minutes on an H200), each log into OUTDIR, a summary last; exits 0
# when all ran clean. The Hopper kernel's test rows run first and alone:
# should they run past 120 s (a hang), the other steps are left out.
#   tests  the suites that run the MoE kernels and models on the device:
#          backend_ops (the moe rows on kvcal_moe_gemm_launch, with the
#          other ops' rows), backend_ops_mbarrier (the moe rows on the
#          Hopper kernel, skipped on another GPU, with the fused MLP's and
#          cuDNN's rows), cuda_backend (the golden MoE models against
#          transformers with the experts' GEMMs both ways, the routing
#          counts against the CPU's), runner and stats_hdf5 on the host;
#          then the moe rows' diagnostics (moe_diagnostics below): per row
#          on the Hopper kernel (gpt-oss's rows included) its act and down
#          against the WMMA path's (bit for bit), and where any are, the act
#          values that differ from the reference's, the outputs past atol +
#          |ref| rtol (within or past the act terms) and the first failing
#          values with their plan tile and output tile
#   ops    bench/moe_ops: the MoE ops stage by stage at Qwen3-30B-A3B's
#          shapes and the experts' GEMMs in six versions (kvcal sm_80, kvcal
#          sm_90a unfused and fused, cuBLAS grouped with and without its
#          host round trip, a dense GEMM of as many rows), each validated
#          against the CPU and version 1 before it is timed
#   bench  bench/calibrate_moe.py: kvcal calibrate --device cuda (as it runs,
#          and with KVCAL_MLP=unfused: the experts' GEMMs of other GPUs)
#          against transformers (each experts implementation, eager and
#          compiled) on $KVCAL_MOE_LAYERS (default 4) layers of
#          Qwen3-30B-A3B (0: as many as the disk holds), 8 x 2048 tokens a
#          batch, $KVCAL_MOE_BATCHES (default 2) batches; transformers'
#          experts implementations $KVCAL_MOE_EXPERTS (default: each) in the
#          modes $KVCAL_MOE_MODES (default plain,compile; rcompile: each
#          layer compiled apart), kvcal's variants $KVCAL_MOE_VARIANTS
#          (default KVCAL_MLP=unfused; none: no variant), within
#          $KVCAL_MOE_TIMEOUT seconds (default 420); the model is built under
#          $KVCAL_MOE_WORK (default OUTDIR/work, about 1.2 GB a layer;
#          removed afterwards unless KVCAL_MOE_KEEP=1)
#   vs     per-head K/V absmax of kvcal --device cuda against transformers
#          bf16 on every golden fixture, the MoE ones included
#          (tests/gpu_vs_transformers.py --golden, limit 2e-2)
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

hung=0 # the Hopper kernel's test ran past its time: the steps after it are left
# The moe rows' lines of a test log (tests/test_backend_ops.c, moe_check):
# the comparisons with the WMMA path, the values printed for a failure, and
# the per-row counts where a count of differing or failing values is not 0.
moe_diagnostics() {
    grep -E '^    moe/' "$1" | awk '/WMMA path:|: token |[1-9][0-9]* off its bound|[1-9][0-9]* outputs past|[1-9][0-9]* past it with/' |
        cut -c1-600 | head -n 60
}
want() { [ $hung -eq 0 ] && [[ " ${KVCAL_STEPS:-tests ops bench} " == *" $1 "* ]]; }
t_rc=skipped o_rc=skipped b_rc=skipped v_rc=skipped

if want tests; then
    # the Hopper kernel's rows first, alone: were it to hang, the timeout
    # says so within two minutes and the steps that would hang too are left
    timeout 120 "$build/kvcal_tests" backend_ops_mbarrier > "$out/tests.log" 2>&1
    t_rc=$?
    [ $t_rc -eq 124 ] && hung=1
    if [ $hung -eq 0 ]; then
        timeout 240 "$build/kvcal_tests" backend_ops cuda_backend runner stats_hdf5 \
            >> "$out/tests.log" 2>&1
        rc=$?
        [ $t_rc -eq 0 ] && t_rc=$rc
    fi
    grep -E '^tests: ' "$out/tests.log"
    moe_diagnostics "$out/tests.log"
fi
[ $hung -eq 1 ] && echo "backend_ops_mbarrier ran past its 120 s (a hang?): the other steps are not run"

if want ops; then
    timeout 180 "$build/bench/moe_ops" 20 > "$out/ops.log" 2>&1
    o_rc=$?
    tail -n 2 "$out/ops.log"
fi

if want bench; then
    work=${KVCAL_MOE_WORK:-$out/work}
    args=(--layers "${KVCAL_MOE_LAYERS:-4}" --batches "${KVCAL_MOE_BATCHES:-2}"
          --modes "${KVCAL_MOE_MODES:-plain,compile}")
    [ -n "${KVCAL_MOE_EXPERTS:-}" ] && args+=(--experts $KVCAL_MOE_EXPERTS)
    for v in ${KVCAL_MOE_VARIANTS:-KVCAL_MLP=unfused}; do
        [ "$v" = none ] || args+=(--kvcal-variant "$v")
    done
    timeout "${KVCAL_MOE_TIMEOUT:-420}" python3 bench/calibrate_moe.py "$build/kvcal" "$work" \
        "$out" "${args[@]}" 2>&1 | tee "$out/bench.log"
    b_rc=${PIPESTATUS[0]}
    [ "${KVCAL_MOE_KEEP:-0}" = 1 ] || rm -rf "$work"
fi

if want vs; then
    python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" --golden \
        --json "$out/vs.json" > "$out/vs.log" 2>&1
    v_rc=$?
    tail -n 1 "$out/vs.log"
fi

status() { [ "$1" = skipped ] && echo skipped || { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }; }
echo
echo "=== summary ($(head -n 2 "$out/gpu.txt" | tail -n 1 | cut -d, -f1)) ==="
echo "tests  $(status $t_rc)   (log: $out/tests.log)"
if [ "$t_rc" != skipped ]; then
    grep -E '^tests: ' "$out/tests.log"
    grep -oE 'SKIPPED suite.*|skipped: .*' "$out/tests.log" | cut -c1-160 | sort | uniq -c |
        head -n 5
    echo "moe rows, where a count is not 0 (every Hopper row bit-equal to the WMMA path unless listed):"
    moe_diagnostics "$out/tests.log" | grep -v ': 0 and 0 of' | head -n 24
    grep -A6 -E '\.\.\.FAILED' "$out/tests.log" | head -n 30
fi
echo "ops    $(status $o_rc)   (log: $out/ops.log)"
if [ "$o_rc" != skipped ]; then
    grep -E '^validation' "$out/ops.log"
    sed -n '/^the experts. GEMMs, by version/,$p' "$out/ops.log"
    grep -E '^(router|route|align|gather|combine)' "$out/ops.log"
fi
echo "bench  $(status $b_rc)   (log: $out/bench.log, figures: $out/moe_bench.json)"
[ "$b_rc" != skipped ] && sed -n '/^[0-9]* layers of Qwen3/,$p' "$out/bench.log" | grep -v '^wrote'
echo "vs     $(status $v_rc)   (log: $out/vs.log)"
ok() { [ "$1" = skipped ] || [ "$1" -eq 0 ]; }
ok $t_rc && ok $o_rc && ok $b_rc && ok $v_rc
