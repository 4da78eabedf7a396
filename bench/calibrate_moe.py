#!/usr/bin/env python3
"""Calibration speed of a mixture of experts on a GPU: kvcal calibrate --device
cuda against transformers on a Qwen3-30B-A3B-shaped random-weight model and the
same tokens (8 samples x 2048 tokens a batch), in one run.

usage: calibrate_moe.py KVCAL WORKDIR OUT [--layers N] [--batches B]
                        [--kvcal-variant VAR=VALUE ...]

Qwen3-30B-A3B's layer (hidden 2048, 32 query / 4 kv heads of 128, q/k norm,
128 experts of 768, top-8, norm_topk_prob) built with transformers' own
Qwen3MoeConfig, `--layers` of its 48 layers (as many as the disk holds: 1.2 GB
a layer in bf16), random bf16 weights saved with save_pretrained (one tensor per
expert, as the released checkpoint), B x 8 random 2048-token samples as JSONL
token ids. Then, on the same tokens:

- `KVCAL calibrate --device cuda --stats` (per-head scales), its tokens/s, peak
  device memory (sampled) and the routing counts of its statistics (experts
  that no token reached); again under each `--kvcal-variant` (an environment
  variable set for that run, e.g. KVCAL_MLP=unfused: the experts' GEMMs
  other GPUs run), its tokens/s and peak memory;
- the transformers model body (no lm_head) in bf16 with SDPA and hooks that
  collect per-layer per-head absmax of K (k_norm, then RoPE) and V, with each
  experts implementation the installed transformers offers (eager,
  batched_mm, grouped_mm), eager and under torch.compile; one that fails is
  reported and skipped;
- the floor of the library calls: one layer's GEMMs (fused QKV, o, router) and
  the experts' as torch's grouped GEMM on a balanced routing, plus the faster
  of cuDNN and flash SDPA, times the layers.

Writes OUT/moe_bench.json (every figure) and prints a table: tokens/s and
tokens/s per layer of each, kvcal's ratio to the fastest transformers
configuration (the issue's target: >= 1.5), peak memory, and the worst
relative difference of kvcal's per-head K/V absmax from transformers bf16's
(with the default experts implementation, eager).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import transformers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SEQ, BATCH = 2048, 8
D, H, HKV, HD, E, TOPK, MI, VOCAB = 2048, 32, 4, 128, 128, 8, 768, 151936


def device_memory_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def make_model(workdir, layers):
    """The checkpoint (saved once) and the token samples."""
    model_dir = os.path.join(workdir, f"qwen3moe-{layers}l")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        cfg = Qwen3MoeConfig(hidden_size=D, intermediate_size=6144, moe_intermediate_size=MI,
                             num_hidden_layers=layers, num_attention_heads=H,
                             num_key_value_heads=HKV, head_dim=HD, num_experts=E,
                             num_experts_per_tok=TOPK, norm_topk_prob=True, vocab_size=VOCAB,
                             max_position_embeddings=40960, rope_theta=1000000.0,
                             rms_norm_eps=1e-6, tie_word_embeddings=False)
        torch.manual_seed(0)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = Qwen3MoeForCausalLM(cfg).eval()
        torch.set_default_dtype(torch.float32)
        with torch.no_grad():  # routers that choose: N(0, 1) logits over the experts
            for layer in model.model.layers:
                layer.mlp.gate.weight.normal_(0.0, 1.0 / D ** 0.5)
        model.save_pretrained(model_dir)
        del model
        torch.cuda.empty_cache()
    return model_dir


def run_kvcal(kvcal, model_dir, data, samples, out_dir, env=None):
    baseline, peak, done = device_memory_used(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], device_memory_used() - baseline)
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", data, "--num-samples",
           str(samples), "--seq-len", str(SEQ), "--batch", str(BATCH), "--device", "cuda",
           "--granularity", "head", "--json", "--quiet",
           "--out", os.path.join(out_dir, "kvcal_scales.json"),
           "--stats", os.path.join(out_dir, "kvcal_stats.h5")]
    res = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, **env) if env else None)
    done.set()
    t.join()
    if res.returncode != 0:
        sys.exit(f"kvcal calibrate{' ' + str(env) if env else ''} failed ({res.returncode}): "
                 f"{res.stderr.strip()}")
    return json.loads(res.stdout), peak[0]


def routing_counts(path, layers):
    """Per layer, the experts no token reached and the busiest expert's share."""
    try:
        import h5py
    except ImportError:
        return None
    out = []
    with h5py.File(path, "r") as f:
        for li in range(layers):
            c = f[f"layers/{li}/expert_tokens"][()]
            out.append({"cold": int((c == 0).sum()), "max_share": float(c.max() / c.sum())})
    return out


def bench_ms(fn, reps=10):
    fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def library_floor(layers):
    """tokens/s of `layers` layers of library calls at 8 x 2048 tokens."""
    m = BATCH * SEQ
    gemm_ms = 0.0
    for k, n in ((D, (H + 2 * HKV) * HD), (H * HD, D), (D, E)):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        gemm_ms += bench_ms(lambda: torch.matmul(x, w.t()))
    grouped = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    rows = m * TOPK
    offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * (rows // E)
    moe_ms = None
    if grouped is not None:
        try:
            xs = torch.randn(rows, D, device="cuda", dtype=torch.bfloat16)
            hs = torch.randn(rows, MI, device="cuda", dtype=torch.bfloat16)
            wgu = torch.randn(E, D, 2 * MI, device="cuda", dtype=torch.bfloat16) * 0.02
            wd = torch.randn(E, MI, D, device="cuda", dtype=torch.bfloat16) * 0.02
            moe_ms = bench_ms(lambda: grouped(xs, wgu, offs=offs)) + \
                bench_ms(lambda: grouped(hs, wd, offs=offs))
        except (RuntimeError, TypeError) as e:
            print(f"grouped GEMM floor unavailable: {e}")
    q = torch.randn(BATCH, H, SEQ, HD, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(BATCH, HKV, SEQ, HD, device="cuda", dtype=torch.bfloat16).repeat_interleave(
        H // HKV, dim=1)
    sdpa = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                sdpa[name] = bench_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                    q, kv, kv, is_causal=True))
        except RuntimeError:
            pass
    layer_ms = gemm_ms + (moe_ms or 0.0) + min(sdpa.values())
    print(f"library floor per layer: dense GEMMs {gemm_ms:.3f} ms + experts' grouped GEMMs "
          f"{moe_ms if moe_ms is not None else float('nan'):.3f} ms + SDPA "
          f"{min(sdpa.values()):.3f} ms = {layer_ms:.3f} ms", flush=True)
    return m / (layers * layer_ms * 1e-3), layer_ms, moe_ms is not None


def transformers_runs(model_dir, ids, layers, batches):
    """{name: (tokens/s, peak bytes, absmax)} of every experts implementation,
    eager and compiled."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import rotate_half
    results = {}
    for impl in ("eager", "batched_mm", "grouped_mm"):
        try:
            model = Qwen3MoeForCausalLM.from_pretrained(
                model_dir, dtype=torch.bfloat16, attn_implementation="sdpa",
                experts_implementation=impl).to("cuda").eval()
        except Exception as e:  # an implementation this transformers lacks
            print(f"transformers {transformers.__version__}: experts_implementation={impl}: "
                  f"{type(e).__name__}: {str(e)[:300]}")
            continue
        body = model.model
        pos = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(BATCH, SEQ)
        cos, sin = body.rotary_emb(torch.empty(1, device="cuda", dtype=torch.bfloat16), pos)
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # (B, T, 1, hd)
        stats = {(i, k): torch.zeros(HKV, device="cuda") for i in range(layers) for k in "kv"}

        def hook(layer, kind):
            buf = stats[(layer, kind)]

            def fn(mod, inp, out):
                x = out.view(BATCH, SEQ, HKV, HD)
                if kind == "k":  # k_norm's output, then RoPE: what the cache holds
                    x = x * cos + rotate_half(x) * sin
                buf.copy_(torch.maximum(buf, x.abs().amax(dim=(0, 1, 3)).float()))
            return fn

        for i, layer in enumerate(body.layers):
            layer.self_attn.k_norm.register_forward_hook(hook(i, "k"))
            layer.self_attn.v_proj.register_forward_hook(hook(i, "v"))
        for compiled in (False, True):
            name = f"{impl}{' + torch.compile' if compiled else ''}"
            fn = torch.compile(body) if compiled else body
            try:
                with torch.inference_mode():
                    fn(input_ids=batches[0])  # warm-up (compilation)
                    torch.cuda.synchronize()
                    for buf in stats.values():
                        buf.zero_()
                    torch.cuda.reset_peak_memory_stats()
                    t = time.time()
                    for b in batches:
                        fn(input_ids=b)
                    torch.cuda.synchronize()
                    t = time.time() - t
            except Exception as e:  # a configuration that does not run is reported
                print(f"transformers {name}: failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            results[name] = (len(batches) * BATCH * SEQ / t, torch.cuda.max_memory_allocated(),
                             {k: v.tolist() for k, v in stats.items()})
            print(f"transformers {name}: {results[name][0]:.0f} tokens/s", flush=True)
        del model, body
        torch.cuda.empty_cache()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--kvcal-variant", action="append", default=[], metavar="VAR=VALUE")
    a = ap.parse_args()
    if any("=" not in v for v in a.kvcal_variant):
        sys.exit(f"--kvcal-variant: use VAR=VALUE (got {a.kvcal_variant})")
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    model_dir = make_model(a.workdir, a.layers)
    samples = a.batches * BATCH
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (samples, SEQ), generator=g)
    data = os.path.join(a.workdir, f"tokens-{samples}.jsonl")
    with open(data, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    res, kv_peak = run_kvcal(a.kvcal, model_dir, data, samples, a.out)
    kvcal_tps = res["tokens_per_second"]
    print(f"kvcal calibrate --device cuda: {kvcal_tps:.0f} tokens/s", flush=True)
    counts = routing_counts(os.path.join(a.out, "kvcal_stats.h5"), a.layers)
    variants = {}
    for v in a.kvcal_variant:
        name, value = v.split("=", 1)
        vdir = os.path.join(a.out, f"variant-{name}-{value}")
        os.makedirs(vdir, exist_ok=True)
        vres, vpeak = run_kvcal(a.kvcal, model_dir, data, samples, vdir, {name: value})
        # the variant's per-head K/V absmax against the default run's
        vdiff = max(abs(g - r) / r for lv, lr in zip(vres["layers"], res["layers"])
                    for kind in ("k_absmax", "v_absmax")
                    for g, r in zip(lv[kind], lr[kind]) if r > 0)
        variants[v] = (vres["tokens_per_second"], vpeak, vdiff)
        print(f"kvcal calibrate --device cuda, {v}: {variants[v][0]:.0f} tokens/s", flush=True)
    batches = [ids[b * BATCH:(b + 1) * BATCH].cuda() for b in range(a.batches)]
    hf = transformers_runs(model_dir, ids, a.layers, batches)
    floor_tps, floor_layer_ms, floor_grouped = library_floor(a.layers)

    worst = {}
    if "eager" in hf:
        ref = hf["eager"][2]
        for kind in "kv":
            d = [abs(g - r) / r for li, layer in enumerate(res["layers"])
                 for g, r in zip(layer[kind + "_absmax"], ref[(li, kind)]) if r > 0]
            worst[kind] = max(d)
    fastest = max(hf.items(), key=lambda kv: kv[1][0]) if hf else None
    table = [("kvcal calibrate --device cuda", kvcal_tps, kv_peak)] + \
        [(f"kvcal calibrate --device cuda, {v}", tps, peak)
         for v, (tps, peak, _) in variants.items()] + \
        [(f"transformers {name}", v[0], v[1]) for name, v in hf.items()] + \
        [("library floor (grouped GEMM + SDPA)" if floor_grouped else
          "library floor (no grouped GEMM: dense GEMMs + SDPA only)", floor_tps, 0)]
    print(f"\n{a.layers} layers of Qwen3-30B-A3B, {samples} x {SEQ} tokens, "
          f"batches of {BATCH} x {SEQ}")
    print(f"{'':48s} {'tokens/s':>10s} {'per layer':>11s} {'peak GiB':>9s}")
    for name, tps, peak in table:
        print(f"{name:48s} {tps:10.0f} {tps * a.layers:11.0f} "
              f"{peak / 2 ** 30 if peak else float('nan'):9.2f}")
    if fastest:
        print(f"kvcal / fastest transformers ({fastest[0]}): {kvcal_tps / fastest[1][0]:.2f}x "
              f"(target >= 1.5x); kvcal / floor: {kvcal_tps / floor_tps:.2f}")
    for kind, w in worst.items():
        print(f"per-head {kind.upper()} absmax, kvcal vs transformers bf16 (eager experts): "
              f"worst rel. diff {w:.2e}")
    for v, (tps, _, diff) in variants.items():
        print(f"kvcal {v}: {tps / kvcal_tps:.2f}x the default run's tokens/s; per-head K/V "
              f"absmax against the default run: worst rel. diff {diff:.2e}")
    if counts:
        print("experts no token reached, per layer: " + ", ".join(str(c["cold"]) for c in counts))
    with open(os.path.join(a.out, "moe_bench.json"), "w") as f:
        json.dump({"layers": a.layers, "samples": samples, "seq_len": SEQ, "batch": BATCH,
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "device": torch.cuda.get_device_name(),
                   "kvcal": {"tokens_per_second": kvcal_tps, "peak_bytes": kv_peak,
                             "phases": res.get("phases")},
                   "kvcal_variants": {v: {"tokens_per_second": tps, "peak_bytes": peak,
                                          "absmax_worst_rel_diff_vs_kvcal": diff}
                                      for v, (tps, peak, diff) in variants.items()},
                   "transformers_runs": {k: {"tokens_per_second": v[0], "peak_bytes": v[1]}
                                         for k, v in hf.items()},
                   "floor": {"tokens_per_second": floor_tps, "layer_ms": floor_layer_ms,
                             "grouped_gemm": floor_grouped},
                   "absmax_worst_rel_diff": worst, "routing": counts}, f, indent=1)
    print(f"wrote {os.path.join(a.out, 'moe_bench.json')}")


if __name__ == "__main__":
    main()
