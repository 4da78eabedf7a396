#!/bin/sh
# bench/run_gpu_asym.sh OUTDIR: int8 with zero points (eval --modes
# int8-asym-static) and the query's scale per kv-head group (fp8-attention)
# on a GPU host, from the repository root, with binaries built beforehand in
# $BUILD (default build; nothing is compiled here):
#   1. the suites eval_cuda (its
#      eval_cuda_matches_cpu_on_int8_asym_static_and_per_head_q runs
#      int8-asym-static, int8-static-head and fp8-attention of an int8_asym
#      set with per-head q scales on both devices, within the bounds stated
#      in tests/test_eval_cuda.c), kvquant_fmt_cuda (the static INT8_ASYM
#      kernels byte for byte against the CPU reference), int8_asym,
#      int8_asym_cli and eval_formats;
#   2. kvcal calibrate --kv-dtype int8_asym --q-scale of stories260K, then
#      kvcal eval --modes int8-static-head,int8-asym-static,fp8-attention on
#      --device cpu and --device cuda, side by side (pass: every mode finite
#      on both devices, each mode's perplexity change within 3 points of
#      the cpu's and int8-asym-static's min K SQNR within 0.5 dB, the
#      bounds of the test above).
# Full logs go to OUTDIR; a summary is printed last.
set -u
out=${1:?usage: bench/run_gpu_asym.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/gpu.txt" 2>&1
timeout 300 env KVCAL_BIN="$build/kvcal" "$build/kvcal_tests" \
    eval_cuda kvquant_fmt_cuda int8_asym int8_asym_cli eval_formats \
    > "$out/tests.log" 2>&1
tests_rc=$?
model=models/stories260K/stories260K.bin data=datasets/default_calibration.txt
run_rc=0
timeout 60 "$build/kvcal" calibrate --model $model --dataset $data --num-samples 16 \
    --seq-len 128 --granularity head --kv-dtype int8_asym --q-scale --quiet \
    --out "$out/asym.json" > "$out/calibrate.log" 2>&1 || run_rc=1
for dev in cpu cuda; do
    timeout 120 "$build/kvcal" eval --model $model --dataset $data --seed 7 \
        --num-samples 16 --seq-len 128 --scales "$out/asym.json" --device $dev \
        --modes int8-static-head,int8-asym-static,fp8-attention --json \
        > "$out/eval_$dev.json" 2> "$out/eval_$dev.err" || run_rc=1
done
python3 - "$out" > "$out/compare.txt" 2>&1 <<'PY'
import json, math, sys
out = sys.argv[1]
try:
    cpu = {m["mode"]: m for m in json.load(open(f"{out}/eval_cpu.json"))["modes"]}
    gpu = {m["mode"]: m for m in json.load(open(f"{out}/eval_cuda.json"))["modes"]}
except Exception as e:
    print(f"FAIL: {e}")
    sys.exit(1)
bad = 0
print(f"{'mode':18} {'change cpu':>11} {'change cuda':>11} {'min K SQNR cpu':>15} {'cuda':>6}")
for name in ("int8-static-head", "int8-asym-static", "fp8-attention"):
    c, g = cpu.get(name), gpu.get(name)
    if not c or not g:
        print(f"{name}: FAIL (missing)"); bad += 1; continue
    kc = min(l["k_sqnr_db"] for l in c["layers"])
    kg = min(l["k_sqnr_db"] for l in g["layers"])
    dc, dg = c["perplexity_change_rel"], g["perplexity_change_rel"]
    ok = math.isfinite(dg) and abs(dg - dc) <= 0.03 + 0.2 * abs(dc) and abs(kg - kc) <= 0.5
    bad += not ok
    print(f"{name:18} {100 * dc:+10.3f}% {100 * dg:+10.3f}% {kc:12.2f} dB {kg:6.2f}  {'ok' if ok else 'FAIL'}")
sys.exit(1 if bad else 0)
PY
cmp_rc=$?
echo "== gpu"; cat "$out/gpu.txt"
echo "== tests (rc $tests_rc)"; grep -E "FAILED|^tests:|SKIPPED|int8 asym|int8_asym" "$out/tests.log"
echo "== eval cpu vs cuda of an int8_asym set with per-head q (runs rc $run_rc, compare rc $cmp_rc)"
grep -h "the query in e4m3" "$out/eval_cuda.err"
cat "$out/compare.txt"
[ $tests_rc -eq 0 ] && [ $run_rc -eq 0 ] && [ $cmp_rc -eq 0 ] &&
    echo "run_gpu_asym: PASS" || echo "run_gpu_asym: FAIL (see $out)"
