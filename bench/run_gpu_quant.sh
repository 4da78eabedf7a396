#!/bin/sh
# bench/run_gpu_quant.sh OUTDIR: on a GPU host, from the repository root, runs
# what the online FP8 KV quantization needs a GPU for, with binaries built
# beforehand in $BUILD (default build; nothing is compiled here):
#   1. the CPU and CUDA test suites of the quantization (kvquant, kvquant_cuda),
#   2. the example engine decode loop (CPU and CUDA, bytes compared),
#   3. bench/kvquant (every CUDA entry point vs a device-to-device copy),
#   4. bench/kvquant_torch.py (eager and torch.compile equivalents).
# Full logs go to OUTDIR; the tables are printed last.
set -u
out=${1:?usage: bench/run_gpu_quant.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "$out/gpu.txt" 2>&1
stamp() { echo "$1 $(date +%s)" >> "$out/stages.txt"; }
stamp start
"$build/kvcal_tests" kvquant kvquant_cuda > "$out/tests.log" 2>&1
tests_rc=$?
stamp tests
"$build/tests/example_engine_loop" > "$out/example.log" 2>&1
example_rc=$?
stamp example
"$build/bench/kvquant" > "$out/bench.log" 2>&1
bench_rc=$?
stamp bench
PYTHONUNBUFFERED=1 python3 bench/kvquant_torch.py > "$out/torch.log" 2>&1
torch_rc=$?
stamp torch
echo "== gpu"; cat "$out/gpu.txt"; cat "$out/stages.txt"
echo "== tests (rc $tests_rc)"; grep -E "FAILED|differences|e4m3\(|^tests:" "$out/tests.log" | head -40
echo "== example (rc $example_rc)"; cat "$out/example.log"
echo "== torch (rc $torch_rc)"; tail -n 16 "$out/torch.log"
echo "== bench/kvquant (rc $bench_rc)"; tail -n 22 "$out/bench.log"
[ $tests_rc -eq 0 ] && [ $example_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $torch_rc -eq 0 ]
