#!/bin/sh
# bench/run_gpu_formats_kernels.sh OUTDIR: the speed and the bytes of the
# kernels of the cache formats beyond e4m3 (kernels/cuda/kvquant_fmt.cu) on
# a GPU host, from the repository root, with binaries built beforehand in
# $BUILD (default build, a CUDA build with libkvcal.so; nothing is compiled
# here), in about 3-5 minutes (at most 7.5, the steps' time limits):
#   1. the suites kvquant_fmt_cuda (every format, mode, rounding and layout
#      of both kernels, generic and fast, against the CPU reference byte for
#      byte; random cache bytes dequantized; each device conversion on every
#      bf16 and f16 value), kvquant_fmt (the CPU reference and the device
#      formulas) and kvquant_cuda (e4m3's kernels, which share
#      kernels/cuda/kv_words.cuh with them);
#   2. bench/kvquant --only-formats: each format op in its versions, v1 (the
#      kernels before their first rewrite, bench/kvquant_fmt_v1.cuh), v2 (the
#      fast quantization before its second, bench/kvquant_fmt_v2.cuh; prefill
#      only), v3 of NVFP4's dequantization (bench/kvquant_fmt_v3.cuh; prefill
#      only) and the library (v3; NVFP4's dequantization v4, byte tables),
#      beside the device copy and e4m3's kernels
#      of the same run, prefill (262,144 tokens x 8 kv heads x 128, bf16) and
#      decode (256 tokens), each op validated against the CPU reference first
#      (check "ok");
#   3. tests/python_gpu_check.py --only-formats: quantize_fmt /
#      dequantize_fmt of the Python package on CUDA tensors, bytes equal to
#      the CPU path's (generic and fast kernels).
# Pass: tests "0 failed", every bench check "ok", the Python check "0
# failed"; the target (bench/NOTES.md "Every cache format", "v3"): every v3
# prefill row >= 85% of the copy, decode rows launch-bound (graph_us close
# to the copy's). Full logs go to OUTDIR; a summary is printed last.
set -u
out=${1:?usage: bench/run_gpu_formats_kernels.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
timeout 180 env KVCAL_BIN="$build/kvcal" "$build/kvcal_tests" kvquant_fmt_cuda kvquant_fmt \
    kvquant_cuda > "$out/tests.log" 2>&1
tests_rc=$?
timeout 150 "$build/bench/kvquant" --only-formats > "$out/bench.log" 2>&1
bench_rc=$?
PYTHONUNBUFFERED=1 timeout 120 python3 tests/python_gpu_check.py --build "$build" \
    --only-formats --json "$out/python.json" > "$out/python.log" 2>&1
python_rc=$?
echo "== gpu"; cat "$out/gpu.txt"
echo "== tests (rc $tests_rc)"
grep -E "Test:.*(FAILED|passed)|cases\)|differ|conversion|misses|takes|^tests:" "$out/tests.log" |
    grep -v "^$" | tail -n 30
echo "== python check (rc $python_rc)"
grep -E "MISMATCH|FAILED|SKIPPED|passed, .* failed" "$out/python.log" | tail -n 12
echo "== bench/kvquant --only-formats (rc $bench_rc)"
grep -E "^device|^case " "$out/bench.log"
grep -E "^(prefill|decode) " "$out/bench.log"
grep -E "FAIL|differences|host time" "$out/bench.log"
# the library, v3, v2 and v1 of each format op side by side: prefill % of copy, decode us a call
echo "== summary: prefill % of the copy (target >= 85), decode graph us a call (copy's in the first row);"
echo "   lib the library (v3; NVFP4's dequantization v4); v3 kept for NVFP4's dequantization alone;"
echo "   v2 '-' where v3 kept v2's kernel (dequantization, decode steps)"
awk '
/^(prefill|decode) / {
    c = substr($0, 1, 7); sub(/ +$/, "", c)
    op = substr($0, 10, 26); sub(/ +$/, "", op)
    n = split(substr($0, 37), f, " ")
    val = c == "prefill" ? f[n - 1] : f[n - 2]
    if (op ~ /^v1 /) { v1[c, substr(op, 4)] = val; next }
    if (op ~ /^v2 /) { v2[c, substr(op, 4)] = val; next }
    if (op ~ /^v3 /) { v3[c, substr(op, 4)] = val; next }
    rows[++nrows] = c; ops[nrows] = op; vals[nrows] = val; checks[nrows] = f[n]
}
END {
    for (i = 1; i <= nrows; i++) {
        c = rows[i]; op = ops[i]
        if (op ~ /^copy/ || op == "static head NHD" || op == "dequant NHD -> bf16") {
            printf "%-8s %-26s %9s   (reference: the copy, e4m3)\n", c, op, vals[i]
            continue
        }
        verdict = ""
        if (c == "prefill") { x = vals[i]; sub(/%/, "", x); verdict = x + 0 >= 85 ? "meets 85%" : "BELOW 85%" }
        printf "%-8s %-26s lib %9s  v3 %9s  v2 %9s  v1 %9s  %s %s\n", c, op, vals[i],
               ((c, op) in v3) ? v3[c, op] : "-",
               ((c, op) in v2) ? v2[c, op] : "-", ((c, op) in v1) ? v1[c, op] : "-",
               checks[i], verdict
    }
}' "$out/bench.log"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $python_rc -eq 0 ]
