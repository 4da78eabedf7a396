#!/bin/sh
# bench/run_gpu_formats.sh OUTDIR: the cache formats beyond e4m3 on a GPU
# host, from the repository root, with binaries built beforehand in $BUILD
# (default build; nothing is compiled here):
#   1. the suites kvquant_fmt_cuda (every CUDA entry point of the formats
#      against the CPU reference, byte for byte), kvquant_cuda, eval_cuda,
#      kvquant_fmt, eval_formats and kv_dtype_cli;
#   2. bench/kvquant --only-formats (the formats, v1 and v2, beside the
#      device copy; pass: every check "ok", and the prefill %copy of each
#      format row, the target >= 85%);
#   3. kvcal eval --modes all on the CPU and on the GPU for stories260K and
#      a head_dim-48 golden model (NVFP4 included), their tables side by side
#      (pass: every mode finite on both devices; the bf16 runner moves each
#      change by at most a few points, as tests/test_eval_cuda.c allows).
# Full logs go to OUTDIR; a summary is printed last. $KVCAL_LIBS as in
# bench/run_gpu_quant.sh.
set -u
out=${1:?usage: bench/run_gpu_formats.sh OUTDIR}
build=${BUILD:-build}
mkdir -p "$out"
libs=${KVCAL_LIBS:+$KVCAL_LIBS:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if LD_LIBRARY_PATH="$libs" ldd "$build/kvcal_tests" | grep -q 'not found'; then
    py=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null)
    libs="$libs:$py"
fi
run() { env LD_LIBRARY_PATH="$libs" "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv > "$out/gpu.txt" 2>&1
timeout 240 env LD_LIBRARY_PATH="$libs" KVCAL_BIN="$build/kvcal" "$build/kvcal_tests" \
    kvquant_fmt_cuda kvquant_cuda eval_cuda kvquant_fmt eval_formats kv_dtype_cli \
    > "$out/tests.log" 2>&1
tests_rc=$?
timeout 240 env LD_LIBRARY_PATH="$libs" "$build/bench/kvquant" --only-formats > "$out/bench.log" 2>&1
bench_rc=$?
# a token set for the golden model (vocabulary 128)
python3 - "$out/hd48_ids.jsonl" <<'EOF'
import json, random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    for _ in range(16):
        f.write(json.dumps({"input_ids": [random.randrange(128) for _ in range(64)]}) + "\n")
EOF
eval_rc=0
for m in stories tiny; do
    if [ $m = stories ]; then
        model=models/stories260K/stories260K.bin data=datasets/calibration_handwritten.txt
        opts="--num-samples 16 --seq-len 128"
    else
        model=tests/fixtures/golden/llama3_gqa_hd48_bf16 data="$out/hd48_ids.jsonl"
        opts="--num-samples 16 --seq-len 64"
    fi
    # shellcheck disable=SC2086 # opts is a list of words
    run "$build/kvcal" calibrate --model "$model" --dataset "$data" $opts --granularity head \
        --out "$out/$m.scales.json" --quiet > /dev/null || eval_rc=1
    for dev in cpu cuda; do
        # shellcheck disable=SC2086
        timeout 300 env LD_LIBRARY_PATH="$libs" "$build/kvcal" eval --model "$model" \
            --dataset "$data" $opts --scales "$out/$m.scales.json" --modes all \
            --device $dev --quiet > "$out/$m.$dev.txt" 2>&1 || eval_rc=1
    done
done
echo "== gpu"; cat "$out/gpu.txt"
echo "== tests (rc $tests_rc)"
grep -E "FAILED|differ|SKIPPED|^tests:|cases\)" "$out/tests.log" | head -30
echo "== bench/kvquant (rc $bench_rc): the formats and the copies"
grep -E "^(case|prefill|scatter|decode) +(copy|(v1 )?(fp8 e5m2|int8|nvfp4|dequant))" \
    "$out/bench.log"
grep -E "FAIL|differences" "$out/bench.log" | head
echo "== eval (rc $eval_rc), cpu then cuda"
for m in stories tiny; do
    for dev in cpu cuda; do
        echo "-- $m $dev"
        sed -n '/^mode/,/^recommendation/p' "$out/$m.$dev.txt"
    done
done
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $eval_rc -eq 0 ]
