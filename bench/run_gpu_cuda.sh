#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: runs every test suite, kvcal
# calibrate --device cpu against --device cuda on the bundled model, the op
# benchmark, the comparison with torch SDPA, calibration of a
# Llama-3-8B-shaped model against transformers (bench/calibrate_llama8b.py),
# per-head K/V absmax against transformers bf16 (tests/gpu_vs_transformers.py:
# the golden fixtures, and SmolLM2-135M from the GGUF file named by
# $KVCAL_GGUF) and the suites under compute-sanitizer (memcheck, racecheck,
# synccheck); writes each log into OUTDIR and prints a summary table last.
#
# usage: bench/run_gpu_cuda.sh OUTDIR [BUILD]     (BUILD defaults to build)
# Shared libraries the host lacks may be put in $KVCAL_LIBS (a folder);
# $KVCAL_SUITES names the test suites to run (default: every suite).
# KVCAL_SKIP_8B=1, KVCAL_SKIP_SDPA=1 and KVCAL_SKIP_SANITIZER=1 leave out the
# Llama-3-8B run, the torch SDPA comparison and compute-sanitizer;
# KVCAL_DEADLINE (seconds since the epoch) ends the Llama-3-8B run 10 s
# before it, so that the summary still prints.
set -uo pipefail
out=${1:?usage: bench/run_gpu_cuda.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
cd "$(dirname "$0")/.."

if [ -n "${KVCAL_LIBS:-}" ]; then
    # only those the host lacks, so that Python keeps the host's own
    missing=$(mktemp -d)
    for f in "$KVCAL_LIBS"/*; do
        ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " || ln -s "$(readlink -f "$f")" "$missing/"
    done
    export LD_LIBRARY_PATH="$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
if ldd "$build/kvcal_tests" | grep -q 'not found'; then
    # the CUDA libraries PyTorch ships, when the toolkit's are not installed
    py_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")})))' 2>/dev/null)
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$py_libs"
fi
if ! ldconfig -p | grep -q 'libcudnn.so.9 '; then
    # cuDNN for the runner's attention (opened at run time: PyTorch's, and NVRTC for its
    # run-time compiled engines); without it the runner takes kvcal's attention kernel
    cudnn_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for n in ("libcudnn.so.9", "libnvrtc.so*") for p in glob.glob(d + "/**/" + n, recursive=True)})))' 2>/dev/null)
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_libs"
fi
ldd "$build/kvcal_tests" | grep 'not found' && echo "missing libraries (see above)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
    | tee "$out/gpu.txt"

status() { [ "$1" -eq 0 ] && echo ok || echo "FAILED ($1)"; }

timeout 300 "$build/kvcal_tests" ${KVCAL_SUITES:-} > "$out/tests.log" 2>&1
t_rc=$?
tail -n 4 "$out/tests.log"

# end to end: kvcal calibrate on the bundled stories260K, --device cpu against cuda
tmp=$(mktemp -d)
args="--model models/stories260K/stories260K.bin --num-samples 16 --seq-len 256 --batch 8 --quiet --json"
{
    timeout 120 "$build/kvcal" calibrate $args --device cpu --out "$tmp/cpu.json" > "$tmp/cpu.out" &&
    timeout 120 "$build/kvcal" calibrate $args --device cuda --out "$tmp/cuda.json" > "$tmp/cuda.out" &&
    python3 - "$tmp/cpu.out" "$tmp/cuda.out" <<'PY'
import json, sys
cpu, cuda = (json.load(open(p)) for p in sys.argv[1:3])
worst = max(abs(b - a) / a for lc, lg in zip(cpu["layers"], cuda["layers"])
            for key in ("k_absmax", "v_absmax") for a, b in zip(lc[key], lg[key]))
print(f"stories260K, 16 x 256 tokens: per-head K/V absmax cuda vs cpu worst rel. diff {worst:.2e}; "
      f"cpu {cpu['tokens_per_second']:.0f} tokens/s, cuda {cuda['tokens_per_second']:.0f} tokens/s")
sys.exit(0 if worst <= 3e-2 else 1)
PY
} > "$out/e2e.txt" 2>&1
e_rc=$?
rm -rf "$tmp"

timeout 120 "$build/bench/runner_ops" > "$out/bench.txt" 2>&1
b_rc=$?
p_rc=0
if [ -z "${KVCAL_SKIP_SDPA:-}" ]; then
    PYTHONUNBUFFERED=1 timeout 150 python3 tests/cuda_attention_vs_torch.py "$build/libkvcal.so" \
        > "$out/torch.txt" 2>&1
    p_rc=$?
fi

# per-head K/V absmax against transformers in bf16 on this GPU: every golden
# fixture, and SmolLM2-135M when its GGUF file is given in $KVCAL_GGUF
g_rc=0
gguf_args=()
[ -n "${KVCAL_GGUF:-}" ] && gguf_args=(--gguf "$KVCAL_GGUF" --work "$(mktemp -d)")
PYTHONUNBUFFERED=1 timeout 300 python3 tests/gpu_vs_transformers.py --kvcal "$build/kvcal" \
    --golden "${gguf_args[@]}" --json "$out/vs_transformers.json" > "$out/vs_transformers.txt" 2>&1
g_rc=$?

# end to end at Llama-3-8B shapes against transformers (KVCAL_SKIP_8B=1 skips it)
l_rc=0
if [ -z "${KVCAL_SKIP_8B:-}" ]; then
    work=$(mktemp -d)
    limit=330
    [ -n "${KVCAL_DEADLINE:-}" ] && limit=$((KVCAL_DEADLINE - $(date +%s) - 10))
    PYTHONUNBUFFERED=1 timeout "$limit" python3 bench/calibrate_llama8b.py "$build/kvcal" "$work" \
        > "$out/llama8b.txt" 2>&1
    l_rc=$?
    rm -rf "$work"
fi

# compute-sanitizer: memcheck and synccheck over every suite; racecheck over
# the suites of kvcal's own kernels ($KVCAL_RACECHECK_SUITES): cuBLAS's
# Hopper GEMMs synchronize through mbarriers that racecheck does not model
# and show false hazards (bench/NOTES.md)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
: > "$out/sanitizer.log"
san_rc=()
tools=("memcheck --leak-check full" "racecheck --racecheck-report all" "synccheck")
[ -n "${KVCAL_SKIP_SANITIZER:-}" ] && tools=() && san_rc=(skipped skipped skipped)
for tool in "${tools[@]}"; do
    suites=""
    [ "${tool%% *}" = racecheck ] && suites=${KVCAL_RACECHECK_SUITES:-"cuda_ops kvquant_cuda"}
    timeout 240 "$san" --tool $tool --error-exitcode 9 "$build/kvcal_tests" $suites \
        >> "$out/sanitizer.log" 2>&1
    san_rc+=($?)
done
grep -h 'SUMMARY' "$out/sanitizer.log"

echo
echo "=== summary ==="
printf '%-34s %s\n' "tests (every suite)" "$(status $t_rc): $(grep '^tests:' "$out/tests.log")"
grep -h 'worst rel' "$out/tests.log" | sed 's/^ *//'
printf '%-34s %s\n' "calibrate cpu vs cuda" "$(status $e_rc)"
cat "$out/e2e.txt"
for i in 0 1 2; do
    name=("memcheck" "racecheck" "synccheck")
    rc=${san_rc[$i]}
    [ "$rc" = skipped ] || rc=$(status "$rc")
    printf '%-34s %s\n' "compute-sanitizer ${name[$i]}" "$rc"
done
grep -h 'SUMMARY' "$out/sanitizer.log"
printf '%-34s %s\n' "K/V absmax vs transformers bf16" "$(status $g_rc)"
cat "$out/vs_transformers.txt"
printf '%-34s %s\n' "bench/runner_ops" "$(status $b_rc)"
cat "$out/bench.txt"
if [ -z "${KVCAL_SKIP_SDPA:-}" ]; then
    printf '%-34s %s\n' "torch SDPA comparison" "$(status $p_rc)"
    grep -v 'Warning\|return F.scaled' "$out/torch.txt"
fi
if [ -z "${KVCAL_SKIP_8B:-}" ]; then
    printf '%-34s %s\n' "calibrate, Llama-3-8B shapes" "$(status $l_rc)"
    grep -v 'Warning\|warn(\|it/s\]' "$out/llama8b.txt" | tail -n 24
fi
[ $t_rc -eq 0 ] && [ $e_rc -eq 0 ] && [ $g_rc -eq 0 ] && [[ "${san_rc[*]}" =~ ^(0 0 0|skipped skipped skipped)$ ]] &&
    [ $b_rc -eq 0 ] &&
    [ $p_rc -eq 0 ] && [ $l_rc -eq 0 ]
