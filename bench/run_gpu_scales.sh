#!/bin/sh
# bench/run_gpu_scales.sh OUTDIR: the queries' observation (calibrate
# --q-scale) and the signed range (--signed-range) on a GPU host, from the
# repository root, with binaries built beforehand in $BUILD (default build;
# nothing is compiled here):
#   1. the suites backend_ops (its rope_observe rows compare the fused
#      kernels' per-head max |q| with the CPU reference's fold of the Q they
#      stored, bit for bit, both kernel versions), cuda_backend (its
#      cuda_runner_observes_queries_and_signed_range_like_the_cpu compares
#      q_absmax and the signed range of cuda and cpu calibrations of three
#      golden models) and cpu_ops, observers, stats_hdf5, q_scale_cli;
#   2. bench/runner_ops rope_observe: each kernel version without observing,
#      with the K/V observer, and with the K/V observer and Q (the cost of
#      --q-scale in the kernel; the runner's default is "+ observe");
#   3. kvcal calibrate --q-scale --granularity head of stories260K and of a
#      head_dim-80 q_norm golden model on --device cpu and --device cuda,
#      their q_scale (per layer) and q_scale_per_head compared (pass: every
#      value within 3% of the cpu's, as the test above allows).
# Full logs go to OUTDIR; a summary is printed last.
set -u
out=${1:?usage: bench/run_gpu_scales.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
. bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/gpu.txt" 2>&1
timeout 300 env KVCAL_BIN="$build/kvcal" "$build/kvcal_tests" \
    backend_ops cuda_backend cpu_ops observers stats_hdf5 q_scale_cli \
    > "$out/tests.log" 2>&1
tests_rc=$?
timeout 120 "$build/bench/runner_ops" rope_observe > "$out/runner_ops.log" 2>&1
bench_rc=$?
python3 - "$out/hd80_ids.jsonl" <<'PY'
import json, random, sys
random.seed(11)
with open(sys.argv[1], "w") as f:
    for _ in range(16):
        f.write(json.dumps({"input_ids": [random.randrange(128) for _ in range(64)]}) + "\n")
PY
cal_rc=0
for m in stories qwen3; do
    if [ $m = stories ]; then
        model=models/stories260K/stories260K.bin data=datasets/calibration_handwritten.txt
        opts="--num-samples 16 --seq-len 128"
    else
        model=tests/fixtures/golden/qwen3_gqa_hd80_qknorm_bf16 data="$out/hd80_ids.jsonl"
        opts="--num-samples 16 --seq-len 64"
    fi
    for dev in cpu cuda; do
        # shellcheck disable=SC2086 # opts is a list of words
        timeout 120 "$build/kvcal" calibrate --model "$model" --dataset "$data" $opts \
            --granularity head --q-scale --signed-range --stats "$out/$m.$dev.h5" \
            --device $dev --out "$out/$m.$dev.json" --quiet > "$out/$m.$dev.log" 2>&1 ||
            cal_rc=1
    done
done
python3 - "$out" > "$out/compare.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
bad = 0
for m in ("stories", "qwen3"):
    try:
        a = json.load(open(f"{out}/{m}.cpu.json"))["layers"]
        b = json.load(open(f"{out}/{m}.cuda.json"))["layers"]
    except Exception as e:
        print(f"{m}: FAIL ({e})"); bad += 1; continue
    worst, n = 0.0, 0
    for la, lb in zip(a, b):
        pairs = [(la["q_scale"], lb["q_scale"])] + list(zip(la["q_scale_per_head"], lb["q_scale_per_head"]))
        for x, y in pairs:
            worst = max(worst, abs(x - y) / x); n += 1
    ok = worst <= 0.03 and len(a) == len(b)
    bad += not ok
    print(f"{m}: {'ok' if ok else 'FAIL'}: {n} q scales, worst rel. diff cuda vs cpu {worst:.2e} (bound 3e-2)")
sys.exit(1 if bad else 0)
PY
cmp_rc=$?
echo "== gpu"; cat "$out/gpu.txt"
echo "== tests (rc $tests_rc)"; grep -E "FAILED|^tests:|SKIPPED" "$out/tests.log"
echo "== bench/runner_ops rope_observe (rc $bench_rc): ms of each version, alone / + observe / + observe Q"
grep -E "^rope_observe" "$out/runner_ops.log"
echo "== calibrate --q-scale cpu vs cuda (calibrate rc $cal_rc, compare rc $cmp_rc)"
cat "$out/compare.txt"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $cal_rc -eq 0 ] && [ $cmp_rc -eq 0 ] &&
    echo "run_gpu_scales: PASS" || echo "run_gpu_scales: FAIL (see $out)"
