#!/usr/bin/env bash
# On a GPU host: builds of kvcal against each other, end to end. Makes a
# random-weight model of SHAPE's layers (moe: Qwen3-30B-A3B, by
# bench/calibrate_moe.py; mla: DeepSeek-V2-Lite, by bench/calibrate_mla.py;
# $KVCAL_AB_LAYERS layers, default 8, and $KVCAL_AB_BATCHES batches of 8 x
# 2048 tokens, default 32), then runs `kvcal calibrate --device cuda
# --granularity head` of each build on it, ROUNDS rounds, the builds
# alternated within a round (so that the GPU's clocks under its power cap
# treat them alike), and prints each run's tokens/s, each build's best, its
# ratio to the first build's, and whether its scales equal the first
# build's (the worst relative difference of any scale where they do not).
# Each run's JSON and stderr go to OUTDIR/SHAPE/BUILD-NAME/; the model is
# made under $KVCAL_AB_WORK (default OUTDIR/work) and removed afterwards
# unless KVCAL_AB_KEEP=1. Exits non-zero when a run failed.
# usage: bench/run_gpu_ab.sh OUTDIR moe|mla ROUNDS BUILD...   (each BUILD a
# folder holding a kvcal binary; the first is the baseline, e.g. main's)
set -uo pipefail
usage="usage: bench/run_gpu_ab.sh OUTDIR moe|mla ROUNDS BUILD..."
[ $# -ge 4 ] || { echo "$usage (name at least one build folder)" >&2; exit 2; }
out=$1 shape=$2 rounds=$3
shift 3
case $shape in
moe) maker=bench/calibrate_moe.py compare=(--experts none) ;;
mla) maker=bench/calibrate_mla.py compare=(--transformers none) ;;
*) echo "run_gpu_ab.sh: shape $shape: use moe or mla" >&2; exit 2 ;;
esac
builds=()
for b in "$@"; do
    [ -x "$b/kvcal" ] || { echo "run_gpu_ab.sh: $b/kvcal: not an executable; build it first" >&2; exit 2; }
    builds+=("$(cd "$b" && pwd)")
done
mkdir -p "$out/$shape"
out=$(cd "$out" && pwd)
work=${KVCAL_AB_WORK:-$out/work}
cd "$(dirname "$0")/.."
build=${builds[0]}
. bench/gpu_env.sh

# the model and its tokens, made by the shape's bench (kvcal's one run there
# doubles as the first build's warm-up)
python3 "$maker" "${builds[0]}/kvcal" "$work/$shape" "$out/$shape/make" \
    --layers "${KVCAL_AB_LAYERS:-8}" --batches "${KVCAL_AB_BATCHES:-32}" "${compare[@]}" \
    > "$out/$shape/make.log" 2>&1 || { tail -5 "$out/$shape/make.log"; exit 1; }
model=$(dirname "$(ls "$work/$shape"/*/config.json | head -1)")
data=$(ls "$work/$shape"/tokens-*.jsonl | head -1)
samples=$(wc -l < "$data")

failed=0
name() { # a build's folder name, its index first (two builds may share a name)
    echo "$1-$(basename "${builds[$1]}")"
}
for r in $(seq "$rounds"); do
    for i in "${!builds[@]}"; do
        d="$out/$shape/$(name "$i")"
        mkdir -p "$d"
        if "${builds[$i]}/kvcal" calibrate --model "$model" --dataset "$data" \
            --num-samples "$samples" --seq-len 2048 --batch 8 --device cuda \
            --granularity head --json --quiet --out "$d/scales.json" \
            --stats "$work/stats-$i.h5" > "$d/run$r.json" 2> "$d/run$r.err"; then
            echo "$shape round $r $(name "$i"): $(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["tokens_per_second"]))' "$d/run$r.json") tokens/s"
        else
            echo "$shape round $r $(name "$i"): failed: $(tail -1 "$d/run$r.err")"
            failed=1
        fi
    done
done

dirs=()
for i in "${!builds[@]}"; do dirs+=("$out/$shape/$(name "$i")"); done
python3 - "$rounds" "${dirs[@]}" <<'PY'
import json, os, sys

rounds, dirs = int(sys.argv[1]), sys.argv[2:]


def best(d):
    rates = []
    for r in range(1, rounds + 1):
        try:
            rates.append(json.load(open(f"{d}/run{r}.json"))["tokens_per_second"])
        except (OSError, ValueError, KeyError):
            pass
    return max(rates) if rates else None


def scalars(x, path=""):
    """Every number of a scales file, by its place in it."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from scalars(v, f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from scalars(v, f"{path}/{i}")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, float(x)


def scales(d):
    try:
        return dict(scalars(json.load(open(f"{d}/scales.json"))))
    except (OSError, ValueError):
        return None


base, base_scales = best(dirs[0]), scales(dirs[0])
for d in dirs:
    b, s = best(d), scales(d)
    ratio = f"{b / base:.4f}x the first" if b and base else "no ratio"
    if s is None or base_scales is None:
        same = "no scales to compare"
    elif s == base_scales:
        same = "scales equal the first build's"
    else:
        def rel(k, v):  # a number the other file lacks differs without bound
            if k not in s:
                return float("inf")
            return abs(s[k] - v) / abs(v) if v else abs(s[k])
        worst = max((rel(k, v) for k, v in base_scales.items()), default=0.0)
        worst = float("inf") if set(s) - set(base_scales) else worst
        same = f"scales differ from the first build's: worst relative difference {worst:.3e}"
    best_text = f"{b:,.0f}" if b else "none"
    print(f"{os.path.basename(d)}: best {best_text} tokens/s, {ratio}; {same}")
PY
[ "${KVCAL_AB_KEEP:-0}" = 1 ] || rm -rf "$work/$shape" "$work"/stats-*.h5
exit $failed
