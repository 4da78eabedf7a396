#!/bin/sh
# bench/run_gpu_quant.sh OUTDIR: on a GPU host, from the repository root, runs
# with binaries built beforehand in $BUILD (default build; nothing is
# compiled here):
#   1. every test suite of the project (build/kvcal_tests, KVCAL_BIN set to
#      the kvcal binary; set KVCAL_SHARED for the suites that need ../shared),
#   2. the example engine decode loop (CPU and CUDA, bytes compared),
#   3. bench/kvquant (every CUDA entry point and candidate vs a device copy,
#      the cache formats beyond e4m3 among them),
#   4. bench/kvquant_torch.py (eager and torch.compile equivalents; the
#      code inductor generates goes to OUTDIR/torch_output_code.txt).
# KVCAL_SUITES (names of test suites, space separated) limits step 1 to
# them; KVCAL_TORCH=0 skips step 4.
# Shared libraries the host lacks may be put in $KVCAL_LIBS (a folder); they
# are used by kvcal's binaries only, never by python3. Full logs go to OUTDIR;
# a summary table is printed last.
set -u
out=${1:?usage: bench/run_gpu_quant.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
libs=${KVCAL_LIBS:+$KVCAL_LIBS:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if LD_LIBRARY_PATH="$libs" ldd "$build/kvcal_tests" | grep -q 'not found'; then
    # the CUDA libraries PyTorch ships, when the toolkit's are not installed
    py=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null)
    libs="$libs:$py"
fi
LD_LIBRARY_PATH="$libs" ldd "$build/kvcal_tests" "$build/bench/kvquant" | grep 'not found'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "$out/gpu.txt" 2>&1
stamp() { echo "$1 $(date +%s)" >> "$out/stages.txt"; }
stamp start
# shellcheck disable=SC2086 # KVCAL_SUITES is a list of words
timeout 90 env LD_LIBRARY_PATH="$libs" KVCAL_BIN="$build/kvcal" "$build/kvcal_tests" \
    ${KVCAL_SUITES:-} > "$out/tests.log" 2>&1
tests_rc=$?
stamp tests
timeout 20 env LD_LIBRARY_PATH="$libs" "$build/tests/example_engine_loop" > "$out/example.log" 2>&1
example_rc=$?
stamp example
timeout 180 env LD_LIBRARY_PATH="$libs" "$build/bench/kvquant" > "$out/bench.log" 2>&1
bench_rc=$?
stamp bench
torch_rc=0
if [ "${KVCAL_TORCH:-1}" != 0 ]; then
    PYTHONUNBUFFERED=1 TORCH_LOGS=output_code TORCH_LOGS_OUT="$out/torch_output_code.txt" \
        timeout 240 python3 bench/kvquant_torch.py --reps 20 > "$out/torch.log" 2>&1
    torch_rc=$?
else
    echo "skipped (KVCAL_TORCH=0)" > "$out/torch.log"
fi
stamp torch
echo "== gpu"; cat "$out/gpu.txt"; cat "$out/stages.txt"
echo "== tests (rc $tests_rc)"
grep -E "FAILED|differences|SKIPPED|^tests:" "$out/tests.log" | head -30
echo "== example (rc $example_rc)"; tail -n 6 "$out/example.log"
echo "== torch (rc $torch_rc)"; grep -v '^[WIV][0-9]' "$out/torch.log" | tail -n 28
echo "== bench/kvquant (rc $bench_rc)"; tail -n 42 "$out/bench.log"
# summary: prefill GB/s and % of the copy measured by bench/kvquant
echo "== summary (prefill and scatter, % of bench/kvquant's copy of the case)"
awk '
FNR == 1 { file++ }
substr($0, 1, 8) == "prefill " || substr($0, 1, 8) == "scatter " {
    c = substr($0, 1, 7); sub(/ +$/, "", c)
    op = substr($0, 10, 26); sub(/ +$/, "", op)
    n = split(substr($0, 37), f, " ")
    if (file == 1 && f[n] ~ /^(ok|FAIL)$/) {
        if (op ~ /^copy/) copy[c] = f[3]
        printf "%-7s %-34s %9s GB/s %7s %s\n", c, "kvcal " op, f[3], f[5], f[6]
    } else if (file == 2 && op ~ /^(eager|compile) /) {
        printf "%-7s %-34s %9s GB/s %6.1f%%\n", c, "torch " op, f[3],
               copy[c] ? 100 * f[3] / copy[c] : 0
    }
}' "$out/bench.log" "$out/torch.log"
[ $tests_rc -eq 0 ] && [ $example_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $torch_rc -eq 0 ]
