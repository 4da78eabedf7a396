#!/usr/bin/env bash
# Builds kvcal at git revision OLD and the working tree (CPU builds), runs
# `kvcal calibrate` (every format, the statistics, several observers and
# granularities) and `kvcal eval --json` with both on stories260K, every
# golden model of tests/fixtures/golden and any further model directory
# given, and compares every output byte for byte. For a change that must
# keep behaviour and outputs as they are (a refactoring).
#
# Usage: tests/compare_builds.sh OLD [MODEL_DIR ...]
# Exit: 0 identical, 1 a difference (listed), 2 a build or run failure.
set -euo pipefail
old_rev=${1:?usage: tests/compare_builds.sh OLD [MODEL_DIR ...]}
shift
top=$(git rev-parse --show-toplevel)
cd "$top"
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcal-compare.XXXXXX")
trap 'git worktree remove --force "$work/old-src" >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

echo "compare: building $old_rev and the working tree (CUDA=0)"
git worktree add --detach --quiet "$work/old-src" "$old_rev"
make -s -C "$work/old-src" CUDA=0 BUILD="$work/old-build" "$work/old-build/kvcal" >/dev/null
make -s CUDA=0 BUILD="$work/new-build" "$work/new-build/kvcal" >/dev/null
old=$work/old-build/kvcal new=$work/new-build/kvcal

# token ids for models that ship no tokenizer: 12 documents of ids < 128
ids=$work/ids.jsonl
for i in $(seq 0 11); do
    printf '{"input_ids": ['
    for t in $(seq 0 $((40 + i * 7))); do
        printf '%s%d' "$([ "$t" = 0 ] || echo ,)" $(((i * 131 + t * 17 + t * t) % 128))
    done
    printf ']}\n'
done > "$ids"

fail=0 runs=0
# run NAME ARGS...: both binaries with ARGS (OUT replaced by each one's
# output directory), then every file they wrote and their stdout compared
run() {
    local name=$1
    shift
    for side in old new; do
        local bin=$old
        [ $side = new ] && bin=$new
        mkdir -p "$work/$side/$name"
        local args=("${@//OUT/$work/$side/$name}")
        if ! "$bin" "${args[@]}" >"$work/$side/$name.stdout" 2>"$work/$side/$name.stderr"; then
            echo "compare: $side: $name failed:" >&2
            cat "$work/$side/$name.stderr" >&2
            exit 2
        fi
        # the paths, and the timings, which differ from run to run
        sed -i -E -e "s#$work/$side/$name#OUT#g" \
            -e 's/[0-9.]+( s|k? tokens\/s)/T\1/g' \
            -e 's/("(seconds|tokens_per_second)":[[:space:]]*)[0-9.e+-]+/\1T/' \
            -e 's/ \(load T s, write T s\)//' \
            -e '/"phases"/,/}/d' -e '/"layers_resident"/d' \
            "$work/$side/$name.stdout"
    done
    runs=$((runs + 1))
    if ! diff -r -q "$work/old/$name" "$work/new/$name" >/dev/null ||
        ! cmp -s "$work/old/$name.stdout" "$work/new/$name.stdout"; then
        echo "compare: DIFFERENT: $name"
        diff -r -q "$work/old/$name" "$work/new/$name" || true
        cmp "$work/old/$name.stdout" "$work/new/$name.stdout" || true
        fail=1
    fi
}

# compare_model NAME MODEL DATASET SEQ: calibrate and eval runs of one model
compare_model() {
    local name=$1 model=$2 data=$3 seq=$4
    local common=(--model "$model" --dataset "$data" --seq-len "$seq" --quiet)
    run "$name-minmax-tensor" calibrate "${common[@]}" --num-samples 6 --batch 4 \
        --format all --out OUT --stats OUT/stats.h5 --json
    run "$name-percentile-head" calibrate "${common[@]}" --num-samples 6 --batch 3 \
        --observer percentile:99.9 --granularity head --format kvcal --out OUT/s.json
    run "$name-ema-mse" calibrate "${common[@]}" --num-samples 5 --batch 2 \
        --observer ema:0.9 --format kvcal --out OUT/s.json
    run "$name-mse-head" calibrate "${common[@]}" --num-samples 5 --batch 5 \
        --observer mse --granularity head --format legacy --tp 1 --out OUT/l.json
    "$new" calibrate "${common[@]}" --num-samples 6 --granularity head --format kvcal \
        --out "$work/$name-scales.json" >/dev/null
    run "$name-eval" eval "${common[@]}" --num-samples 4 --batch 2 \
        --scales "$work/$name-scales.json" --json
}

compare_model stories260K models/stories260K/stories260K.bin \
    datasets/default_calibration.txt 128
for dir in tests/fixtures/golden/*/; do
    name=$(basename "$dir")
    seq=48
    [ "$name" = qwen2_yarn_bf16 ] && seq=40
    compare_model "$name" "$dir" "$ids" $seq
done
for dir in "$@"; do
    compare_model "$(basename "$dir")" "$dir" datasets/default_calibration.txt 256
done

if [ $fail = 0 ]; then
    echo "compare: $runs runs, every output of $old_rev and the working tree identical"
else
    echo "compare: differences found (above)"
fi
exit $fail
