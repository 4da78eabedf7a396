#!/usr/bin/env bash
# Which observer and which cache to deploy, with the noise said: calibrates
# per head on one half of a corpus with each observer, evaluates on the
# other half (the same samples for every run) the static modes of each
# observer's scales in every cache dtype ($DTYPES: e4m3's static-tensor /
# static-head, int8-static-*, nvfp4-static-*) and, once, the modes that
# need no scales (unit, dynamic, first-batch, int8-dynamic), each against
# the unquantized baseline: perplexity change with its 95% interval, mean
# and 99th-percentile KL divergence, top-1 agreement, the verdict; then,
# paired over the windows, each file against the first observer's same mode
# and against the dynamic mode of its dtype.
#
# Each observer's e4m3 scales file is evaluated in every dtype's static
# modes (eval turns it into int8's and NVFP4's scales): minmax's and
# percentile's thresholds do not depend on the cache, mse's is the e4m3
# round trip's optimum. The attention observer searches for the round trip
# of the cache it calibrates for, so it also calibrates one file per other
# dtype (--kv-dtype), evaluated in that dtype's modes: the rows
# "attention/int8" and "attention/nvfp4" beside "attention" (searched for
# e4m3) say what searching for the dtype buys.
#
# CORPUS is a text file, split at the blank line nearest its middle
# (bench/corpus_halves.sh; the first half calibrates), or a folder holding
# calib.h5 and eval.h5, two token sets of at least SAMPLES x SEQ_LEN
# (kvcal tokenize; what bench/run_gpu_accuracy.sh --prepare writes).
# Writes the halves, the scales, every `kvcal eval --json` and summary.md
# into OUTDIR; prints the summary.
#
# usage: bench/eval_observers.sh MODEL CORPUS OUTDIR [kvcal options...]
#   (e.g. --device cuda, --tokenizer FILE). Environment: $SAMPLES (16) and
#   $SEQ_LEN (256) for both halves, $OBSERVERS (the list below), $DTYPES
#   (fp8_e4m3 int8 nvfp4; nvfp4 is left out for a head_dim that is not a
#   multiple of 16), $KVCAL the binary (build/kvcal), $KEEP (set: keep the
#   runs OUTDIR already holds).
set -euo pipefail
model=${1:?usage: bench/eval_observers.sh MODEL CORPUS OUTDIR [kvcal options...]}
corpus=${2:?corpus}
out=${3:?outdir}
shift 3
kvcal=${KVCAL:-build/kvcal}
samples=${SAMPLES:-16}
seq_len=${SEQ_LEN:-256}
observers=${OBSERVERS:-minmax percentile:99.99 percentile:99.9 mse attention}
dtypes=${DTYPES:-fp8_e4m3 int8 nvfp4}
mkdir -p "$out"

if [ -d "$corpus" ]; then
    calib=$corpus/calib.h5
    eval=$corpus/eval.h5
else
    "$(dirname "$0")/corpus_halves.sh" "$corpus" "$out"
    calib=$out/calib.txt
    eval=$out/eval.txt
fi

head_dim=$("$kvcal" inspect "$model" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["head_dim"])')
if [ $((head_dim % 16)) -ne 0 ] && [[ " $dtypes " == *" nvfp4 "* ]]; then
    echo "eval_observers: head_dim $head_dim is not a multiple of 16: no NVFP4 cache" >&2
    dtypes=${dtypes//nvfp4/}
fi
# the static modes of a dtype
static_modes() {
    case $1 in
    fp8_e4m3) echo static-tensor,static-head ;;
    int8) echo int8-static-tensor,int8-static-head ;;
    nvfp4) echo nvfp4-static-tensor,nvfp4-static-head ;;
    esac
}

common=(--model "$model" --num-samples "$samples" --seq-len "$seq_len" "$@")
# one scales file and its eval: TAG OBSERVER KV_DTYPE MODES
run() {
    [ -n "${KEEP:-}" ] && [ -s "$out/$1.eval.json" ] && return
    "$kvcal" calibrate "${common[@]}" --dataset "$calib" --granularity head \
        --observer "$2" --kv-dtype "$3" --out "$out/$1.scales.json" --quiet > /dev/null
    "$kvcal" eval "${common[@]}" --dataset "$eval" --scales "$out/$1.scales.json" \
        --modes "$4" --json --quiet > "$out/$1.eval.json"
}
start=$(date +%s)
runs=()
all_static=$(for dt in $dtypes; do static_modes "$dt"; done | paste -sd, -)
for obs in $observers; do
    tag=${obs//[:.]/_}
    run "$tag" "$obs" fp8_e4m3 "$all_static"
    runs+=("$obs $tag")
    [[ $obs == attention* ]] || continue
    for dt in $dtypes; do
        [ "$dt" = fp8_e4m3 ] && continue
        run "${tag}_$dt" "$obs" "$dt" "$(static_modes "$dt")"
        runs+=("$obs/$dt ${tag}_$dt")
    done
done
none=unit,dynamic,first-batch
[[ " $dtypes " == *" int8 "* ]] && none=$none,int8-dynamic
[ -n "${KEEP:-}" ] && [ -s "$out/no-scales.eval.json" ] ||
    "$kvcal" eval "${common[@]}" --dataset "$eval" --modes "$none" \
        --json --quiet > "$out/no-scales.eval.json"
runs+=("- no-scales")
seconds=$(($(date +%s) - start))

python3 - "$out" "$seconds" "${runs[@]}" <<'EOF' | tee "$out/summary.md"
import json, math, sys
out, seconds = sys.argv[1], sys.argv[2]
runs = [run.split() for run in sys.argv[3:]]  # "observer tag"
runs = [(obs, f"{out}/{tag}.eval.json") for obs, tag in runs]
first = json.load(open(runs[0][1]))
print(f"{first['architecture']} on {first['dataset']} ({first['device']}, "
      f"{first['baseline_dtype']} baseline): {first['num_samples']} samples, "
      f"{first['predicted_tokens']} predicted tokens in {first['windows']} windows; "
      f"baseline perplexity {first['modes'][0]['perplexity']:.4f}; {seconds} s\n")
print("| observer | mode | ppl change [95% CI] | KLD mean ± 95% | KLD p99 | top-1 | verdict "
      "| costliest layer |")
print("|---|---|---|---|---|---|---|---|")
for obs, path in runs:
    j = json.load(open(path))
    for m in j["modes"][1:]:
        lo, hi = m["perplexity_change_rel_ci95"]
        t = m["tokens_to_resolve"]
        t = "-" if t is None else f"{t:.3g}"
        verdict = ("no interval (too few tokens)" if m["within_noise"] is None
                   else f"within noise (~{t} tokens)" if m["within_noise"]
                   else f"beyond noise (~{t} tokens)")
        ci = "n/a" if lo is None or hi is None else f"{100 * lo:+.2f}, {100 * hi:+.2f}"
        cl = m.get("costliest_layer", {})
        print(f"| {obs} | {m['mode']} | {100 * m['perplexity_change_rel']:+.2f}% "
              f"[{ci}] | {m['kld_mean']:.5f} ± {1.96 * m['kld_mean_se']:.5f} "
              f"| {m['kld_p99']:.4f} | {100 * m['top1_agreement']:.2f}% | {verdict} "
              f"| {cl.get('layer', '-')} ({cl.get('weaker', '-')}) |")

# paired over the windows (the same samples in every run): each observer's
# static modes against the first observer's, and against the dynamic mode
# of their dtype
T975 = [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
        2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
        2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423]
def t975(df):
    if df <= 30:
        return T975[df - 1]
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)
def paired(a, b, key):
    n = a["windows"]["tokens"]
    d = [x - y for x, y in zip(a["windows"][key], b["windows"][key])]
    N, W = sum(n), len(n)
    mean = sum(d) / N
    se = math.sqrt(sum((dw - nw * mean) ** 2 for dw, nw in zip(d, n)) * W / (W - 1)) / N
    return mean, t975(W - 1) * se
def modes(path):
    return {m["mode"]: m for m in json.load(open(path))["modes"]}
ref_obs = runs[0][0]
ref = {}
for obs, path in runs[:-1]:
    if obs == ref_obs:
        ref.update(modes(path))
dyn = modes(runs[-1][1])
DYNAMIC = {"static": "dynamic", "int8": "int8-dynamic"}
print(f"\nPaired over the windows: KLD mean and ln(PPL) of each file against "
      f"{ref_obs}'s same mode and against the dynamic mode of its dtype "
      f"(difference [95% interval]; within noise when it holds 0)\n")
print(f"| observer | mode | KLD - {ref_obs} | ln PPL - {ref_obs} | KLD - dynamic "
      "| ln PPL - dynamic |")
print("|---|---|---|---|---|---|")
def cell(mean, half, digits=5):
    tag = "" if abs(mean) > half else " (noise)"
    return f"{mean:+.{digits}f} [{mean - half:+.{digits}f}, {mean + half:+.{digits}f}]{tag}"
for obs, path in runs[:-1]:
    for name, m in modes(path).items():
        if name == "baseline":
            continue
        row = f"| {obs} | {name} | "
        row += ("0 | 0 | " if obs == ref_obs else
                cell(*paired(m, ref[name], "kld_sum")) + " | " +
                cell(*paired(m, ref[name], "nll_sum"), digits=4) + " | ")
        d = dyn.get(DYNAMIC.get(name.split("-")[0], ""))
        row += (cell(*paired(m, d, "kld_sum")) + " | " +
                cell(*paired(m, d, "nll_sum"), digits=4) + " |") if d else "- | - |"
        print(row)

# what searching for the dtype buys: each attention/DTYPE file against the
# same observer's e4m3-searched file in the same mode
searched = [(obs, path) for obs, path in runs[:-1] if "/" in obs]
if searched:
    print("\nPaired over the windows: the attention observer searched for the "
          "cache's dtype against the same observer searched for e4m3, same mode\n")
    print("| observer | mode | KLD - e4m3-searched | ln PPL - e4m3-searched |")
    print("|---|---|---|---|")
    files = dict(runs[:-1])
    for obs, path in searched:
        base = modes(files[obs.split("/")[0]])
        for name, m in modes(path).items():
            if name != "baseline":
                print(f"| {obs} | {name} | {cell(*paired(m, base[name], 'kld_sum'))} | "
                      f"{cell(*paired(m, base[name], 'nll_sum'), digits=4)} |")
EOF
