#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the accuracy evidence of
# `kvcal eval` at a scale the CPU cannot reach. First the suites that check
# it on the device (the token_kld rows of backend_ops against the CPU
# references; eval_cuda: --device cuda against --device cpu, KL divergence
# and top-1 included; eval, runner and attn_search), then
# bench/eval_observers.sh with --device cuda on
#   - SmolLM2-135M-Instruct on WikiText-2, 64 x 1024 tokens each half
#     (65k evaluated tokens), and on its large-K copy (K x 100);
#   - stories260K on TinyStories, 128 x 256 (33k evaluated tokens);
# every observer (minmax, percentile:99.99, percentile:99.9, mse,
# attention, attention:16) and mode, each with the perplexity change and its
# 95% interval, KL divergence and top-1 agreement. Writes everything under
# OUTDIR (tests.log, <model>/summary.md, every eval JSON) and prints the
# summaries.
#
# usage: bench/run_gpu_accuracy.sh OUTDIR [BUILD]     (BUILD defaults to build)
# Environment: KVCAL_GGUF (SmolLM2-135M-Instruct.Q4_1.gguf, converted with
# tests/smollm2_to_hf.py; or KVCAL_SMOLLM2, a converted checkpoint folder),
# KVCAL_WIKITEXT and KVCAL_TINYSTORIES (the corpora; default ../shared/corpora/
# or build/corpora/),
# KVCAL_STEPS (default "tests smollm2 smollm2_k100 stories": a subset runs a
# part), KVCAL_LIBS as for the other GPU scripts.
set -uo pipefail
out=${1:?usage: bench/run_gpu_accuracy.sh OUTDIR [BUILD]}
build=${2:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

. bench/gpu_env.sh

steps=${KVCAL_STEPS:-tests smollm2 smollm2_k100 stories}
# the corpora: given, else ../shared/corpora, else build/corpora (a copy
# carried to the host); stories260K falls back on the bundled default text
corpus() {
    for f in "$@"; do [ -f "$f" ] && { echo "$f"; return; }; done
}
wikitext=$(corpus "${KVCAL_WIKITEXT:-}" ../shared/corpora/wikitext2_raw_test_hfjoin.txt \
    build/corpora/wikitext2_raw_test_hfjoin.txt)
tinystories=$(corpus "${KVCAL_TINYSTORIES:-}" ../shared/corpora/tinystories_val.txt \
    build/corpora/tinystories_val.txt datasets/default_calibration.txt)
export KVCAL=$build/kvcal
rc=0
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

if has tests; then
    KVCAL_BIN=$build/kvcal timeout 400 "$build/kvcal_tests" backend_ops eval eval_cuda \
        runner attn_search > "$out/tests.log" 2>&1 || rc=1
    grep -E '^  (stories|llama|mistral|qwen)|token_kld|tests:' "$out/tests.log"
fi

smollm2=${KVCAL_SMOLLM2:-}
if { has smollm2 || has smollm2_k100; } && [ -z "$smollm2" ]; then
    if [ -z "${KVCAL_GGUF:-}" ]; then
        echo "smollm2: SKIPPED: set KVCAL_GGUF (or KVCAL_SMOLLM2)"
    else
        smollm2=$out/smollm2-hf
        python3 -c "import sys; sys.path.insert(0, 'tests'); from smollm2_to_hf import gguf_to_hf; gguf_to_hf(sys.argv[1], sys.argv[2])" \
            "$KVCAL_GGUF" "$smollm2" > "$out/convert.log" 2>&1 || { rc=1; smollm2=; }
    fi
fi
if { has smollm2 || has smollm2_k100; } && [ -z "$wikitext" ]; then
    echo "smollm2: SKIPPED: no WikiText-2 (set KVCAL_WIKITEXT)"
    smollm2=
fi
if has smollm2 && [ -n "$smollm2" ]; then
    SAMPLES=64 SEQ_LEN=1024 bench/eval_observers.sh "$smollm2" "$wikitext" \
        "$out/smollm2" --device cuda > "$out/smollm2.log" 2>&1 || rc=1
    cat "$out/smollm2/summary.md" 2>/dev/null || tail -5 "$out/smollm2.log"
fi
if has smollm2_k100 && [ -n "$smollm2" ]; then
    python3 tests/make_large_k_copy.py --factor 100 "$smollm2" "$out/smollm2-k100-hf" \
        > /dev/null && SAMPLES=64 SEQ_LEN=1024 bench/eval_observers.sh \
        "$out/smollm2-k100-hf" "$wikitext" "$out/smollm2_k100" --device cuda \
        > "$out/smollm2_k100.log" 2>&1 || rc=1
    cat "$out/smollm2_k100/summary.md" 2>/dev/null || tail -5 "$out/smollm2_k100.log"
fi
if has stories; then
    OBSERVERS="minmax percentile:99.99 percentile:99.9 mse attention attention:16" \
        SAMPLES=128 SEQ_LEN=256 bench/eval_observers.sh models/stories260K/stories260K.bin \
        "$tinystories" "$out/stories" --device cuda > "$out/stories.log" 2>&1 || rc=1
    cat "$out/stories/summary.md" 2>/dev/null || tail -5 "$out/stories.log"
fi
echo "accuracy: $([ $rc -eq 0 ] && echo ok || echo FAILED)"
exit $rc
