#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: cuDNN's fused attention in the
# runner against kvcal's kernel. Runs the attention, CUDA and calibrate test
# suites, bench/runner_ops (every attention version and cuDNN on the same
# input) and, unless KVCAL_SKIP_8B=1, kvcal calibrate on a Llama-3-8B-shaped
# model with cuDNN and with KVCAL_ATTENTION=kvcal (bench/calibrate_llama8b.py
# --attention-only); writes each log into OUTDIR and prints a summary last.
#
# usage: bench/run_gpu_attn.sh OUTDIR [BUILD]     (BUILD defaults to build)
# Shared libraries the host lacks may be put in $KVCAL_LIBS (a folder).
# $KVCAL_SUITES names the test suites (default: cuda_attention_cudnn
# backend_ops_mbarrier backend_ops cuda_backend calibrate; the table's
# attention rows through cuDNN are in backend_ops_mbarrier); KVCAL_MEMCHECK=1
# also runs cuda_attention_cudnn and backend_ops_mbarrier under
# compute-sanitizer's memcheck.
# libcudnn.so.9 is looked up where the dynamic linker finds it, then in the
# Python nvidia packages (PyTorch's cuDNN), whose folder (with NVRTC's, which
# cuDNN's run-time compiled engines load) joins LD_LIBRARY_PATH.
set -uo pipefail
out=${1:?usage: bench/run_gpu_attn.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
cd "$(dirname "$0")/.."

. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }

# cuDNN's own account of what it refused goes to cudnn.log
export CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG="$out/cudnn.log"
timeout 240 "$build/kvcal_tests" ${KVCAL_SUITES:-cuda_attention_cudnn backend_ops_mbarrier backend_ops cuda_backend calibrate} \
    > "$out/tests.log" 2>&1
t_rc=$?
m_rc=0
if [ -n "${KVCAL_MEMCHECK:-}" ]; then
    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    timeout 150 "$san" --tool memcheck --error-exitcode 9 "$build/kvcal_tests" \
        cuda_attention_cudnn backend_ops_mbarrier > "$out/memcheck.log" 2>&1
    m_rc=$?
fi
timeout 120 "$build/bench/runner_ops" > "$out/bench.txt" 2>&1
b_rc=$?
unset CUDNN_LOGERR_DBG CUDNN_LOGDEST_DBG

l_rc=0
if [ -z "${KVCAL_SKIP_8B:-}" ]; then
    work=$(mktemp -d)
    PYTHONUNBUFFERED=1 timeout "${KVCAL_8B_LIMIT:-240}" python3 bench/calibrate_llama8b.py \
        "$build/kvcal" "$work" --attention-only > "$out/llama8b.txt" 2>&1
    l_rc=$?
    rm -rf "$work"
fi

echo
echo "=== summary ==="
printf '%-34s %s\n' "tests" "$(status $t_rc): $(grep '^tests:' "$out/tests.log")"
grep -o '([^()]*\(cuDNN\|kvcal\|worst\)[^()]*)' "$out/tests.log" | head -n 24
grep -h 'FAIL\|Assert\|MISMATCH' "$out/tests.log" | head -n 20
if [ -n "${KVCAL_MEMCHECK:-}" ]; then
    printf '%-34s %s\n' "memcheck cuDNN suites" "$(status $m_rc)"
    grep -h 'ERROR SUMMARY\|^tests:' "$out/memcheck.log"
fi
printf '%-34s %s\n' "bench/runner_ops" "$(status $b_rc)"
cat "$out/bench.txt"
if [ -z "${KVCAL_SKIP_8B:-}" ]; then
    printf '%-34s %s\n' "calibrate, Llama-3-8B shapes" "$(status $l_rc)"
    grep -v 'Warning\|warn(\|it/s\]' "$out/llama8b.txt" | tail -n 8
fi
printf 'cuDNN error log: %s lines\n' "$(wc -l < "$out/cudnn.log" 2>/dev/null || echo 0)"
[ $t_rc -eq 0 ] && [ $m_rc -eq 0 ] && [ $b_rc -eq 0 ] && [ $l_rc -eq 0 ]
