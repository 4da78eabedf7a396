#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: runs the CUDA test suite, the
# same suite under compute-sanitizer (memcheck; racecheck and synccheck on
# the kernels with shared memory), the op benchmark and the comparison with
# torch SDPA; writes each log into OUTDIR and prints a summary table last.
#
# usage: bench/run_gpu_cuda.sh OUTDIR [BUILD]     (BUILD defaults to build)
# Shared libraries the host lacks may be put in $KVCAL_LIBS (a folder).
set -uo pipefail
out=${1:?usage: bench/run_gpu_cuda.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
cd "$(dirname "$0")/.."

if [ -n "${KVCAL_LIBS:-}" ]; then
    export LD_LIBRARY_PATH="$KVCAL_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
if ldd "$build/kvcal_tests" | grep -q 'not found'; then
    # the CUDA libraries PyTorch ships, when the toolkit's are not installed
    py_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null)
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$py_libs"
fi
ldd "$build/kvcal_tests" | grep 'not found' && echo "missing libraries (see above)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
    | tee "$out/gpu.txt"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }

timeout 120 "$build/kvcal_tests" cuda_ops > "$out/tests.log" 2>&1
t_rc=$?
tail -n 4 "$out/tests.log"

timeout 120 "$build/bench/runner_ops" > "$out/bench.txt" 2>&1
b_rc=$?
PYTHONUNBUFFERED=1 timeout 150 python3 tests/cuda_attention_vs_torch.py "$build/libkvcal.so" \
    > "$out/torch.txt" 2>&1
p_rc=$?

san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 90 "$san" --tool memcheck --leak-check full --error-exitcode 9 \
    "$build/kvcal_tests" cuda_ops > "$out/memcheck.log" 2>&1
m_rc=$?
tail -n 3 "$out/memcheck.log"
timeout 90 "$san" --tool racecheck --racecheck-report all --error-exitcode 9 \
    "$build/kvcal_tests" cuda_ops > "$out/racecheck.log" 2>&1
r_rc=$?
tail -n 3 "$out/racecheck.log"
timeout 90 "$san" --tool synccheck --error-exitcode 9 \
    "$build/kvcal_tests" cuda_ops > "$out/synccheck.log" 2>&1
s_rc=$?
tail -n 3 "$out/synccheck.log"

echo
echo "=== summary ==="
printf '%-34s %s\n' "tests (cuda_ops)" "$(status $t_rc): $(grep '^tests:' "$out/tests.log")"
printf '%-34s %s\n' "compute-sanitizer memcheck" "$(status $m_rc): $(grep -h 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
printf '%-34s %s\n' "compute-sanitizer racecheck" "$(status $r_rc): $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' "$out/racecheck.log" | tail -1)"
printf '%-34s %s\n' "compute-sanitizer synccheck" "$(status $s_rc): $(grep -h 'ERROR SUMMARY' "$out/synccheck.log" | tail -1)"
printf '%-34s %s\n' "bench/runner_ops" "$(status $b_rc)"
cat "$out/bench.txt"
printf '%-34s %s\n' "torch SDPA comparison" "$(status $p_rc)"
cat "$out/torch.txt"
[ $t_rc -eq 0 ] && [ $m_rc -eq 0 ] && [ $r_rc -eq 0 ] && [ $s_rc -eq 0 ] && [ $b_rc -eq 0 ] && [ $p_rc -eq 0 ]
