#!/usr/bin/env bash
# Which observer and which cache mode to deploy, with the noise said: splits
# a corpus at the blank line nearest its middle, calibrates per head on the
# first half with each observer, evaluates on the second half (the same
# samples for every run) the static modes of each observer's scales and,
# once, the modes that need no scales (unit, dynamic, first-batch), each
# against the unquantized baseline: perplexity change with its 95% interval,
# mean and 99th-percentile KL divergence, top-1 agreement, the verdict.
# Writes the halves, the scales, every `kvcal eval --json` and summary.md
# into OUTDIR; prints the summary.
#
# usage: bench/eval_observers.sh MODEL CORPUS OUTDIR [kvcal options...]
#   (e.g. --device cuda, --tokenizer FILE). Environment: $SAMPLES (16) and
#   $SEQ_LEN (256) for both halves, $OBSERVERS (the list below), $KVCAL the
#   binary (build/kvcal), $KEEP (set: keep the runs OUTDIR already holds).
set -euo pipefail
model=${1:?usage: bench/eval_observers.sh MODEL CORPUS OUTDIR [kvcal options...]}
corpus=${2:?corpus}
out=${3:?outdir}
shift 3
kvcal=${KVCAL:-build/kvcal}
samples=${SAMPLES:-16}
seq_len=${SEQ_LEN:-256}
observers=${OBSERVERS:-minmax percentile:99.99 percentile:99.9 mse attention}
mkdir -p "$out"

lines=$(wc -l < "$corpus")
cut=$(awk -v h=$((lines / 2)) 'NR >= h && /^[[:space:]]*$/ { print NR; exit }' "$corpus")
head -n "$cut" "$corpus" > "$out/calib.txt"
tail -n +"$((cut + 1))" "$corpus" > "$out/eval.txt"

common=(--model "$model" --num-samples "$samples" --seq-len "$seq_len" "$@")
start=$(date +%s)
for obs in $observers; do
    tag=${obs//[:.]/_}
    [ -n "${KEEP:-}" ] && [ -s "$out/$tag.eval.json" ] && continue
    "$kvcal" calibrate "${common[@]}" --dataset "$out/calib.txt" --granularity head \
        --observer "$obs" --out "$out/$tag.scales.json" --quiet > /dev/null
    "$kvcal" eval "${common[@]}" --dataset "$out/eval.txt" --scales "$out/$tag.scales.json" \
        --modes static-tensor,static-head --json --quiet > "$out/$tag.eval.json"
done
[ -n "${KEEP:-}" ] && [ -s "$out/no-scales.eval.json" ] ||
    "$kvcal" eval "${common[@]}" --dataset "$out/eval.txt" --modes unit,dynamic,first-batch \
        --json --quiet > "$out/no-scales.eval.json"
seconds=$(($(date +%s) - start))

python3 - "$out" "$seconds" "$observers" <<'EOF' | tee "$out/summary.md"
import json, math, sys
out, seconds, observers = sys.argv[1], sys.argv[2], sys.argv[3].split()
runs = [(o, f"{out}/{o.replace(':', '_').replace('.', '_')}.eval.json") for o in observers]
runs.append(("-", f"{out}/no-scales.eval.json"))
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
        verdict = (f"within noise (~{t} tokens)" if m["within_noise"]
                   else f"beyond noise (~{t} tokens)")
        cl = m.get("costliest_layer", {})
        print(f"| {obs} | {m['mode']} | {100 * m['perplexity_change_rel']:+.2f}% "
              f"[{100 * lo:+.2f}, {100 * hi:+.2f}] | {m['kld_mean']:.5f} ± {1.96 * m['kld_mean_se']:.5f} "
              f"| {m['kld_p99']:.4f} | {100 * m['top1_agreement']:.2f}% | {verdict} "
              f"| {cl.get('layer', '-')} ({cl.get('weaker', '-')}) |")

# paired over the windows (the same samples in every run): each observer's
# static modes against the first observer's, and against dynamic scales
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
ref_obs, ref = runs[0][0], modes(runs[0][1])
dyn = modes(runs[-1][1]).get("dynamic")
print(f"\nPaired over the windows: KLD mean and ln(PPL) of each file against "
      f"{ref_obs}'s same mode{' and against dynamic scales' if dyn else ''} "
      f"(difference [95% interval]; within noise when it holds 0)\n")
print("| observer | mode | KLD - " + ref_obs + " | ln PPL - " + ref_obs +
      (" | KLD - dynamic | ln PPL - dynamic |" if dyn else " |"))
print("|---|---|---|---|" + ("---|---|" if dyn else ""))
def cell(mean, half, scale=1.0, digits=5):
    tag = "" if abs(mean) > half else " (noise)"
    return f"{scale * mean:+.{digits}f} [{scale * (mean - half):+.{digits}f}, {scale * (mean + half):+.{digits}f}]{tag}"
for obs, path in runs[:-1]:
    ms = modes(path)
    for name in ("static-tensor", "static-head"):
        m = ms[name]
        row = f"| {obs} | {name} | "
        row += cell(*paired(m, ref[name], "kld_sum")) + " | "
        row += cell(*paired(m, ref[name], "nll_sum"), digits=4) + " |"
        if dyn:
            row += " " + cell(*paired(m, dyn, "kld_sum")) + " | "
            row += cell(*paired(m, dyn, "nll_sum"), digits=4) + " |"
        print(row)
EOF
