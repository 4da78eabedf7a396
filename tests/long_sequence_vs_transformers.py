#!/usr/bin/env python3
"""kvcal's per-head K/V absmax at long sequences against transformers in
float64 and in bf16, with the causes of bf16's distance taken apart.

Two tiny random-weight models that keep the features of the released ones
that long positions exercise, built with transformers' own config classes
and saved in bf16 (as bench/calibrate_moe.py and bench/calibrate_mla.py
save theirs):
- gpt-oss: 4 layers, hidden 128, 4 query / 2 kv heads of 64, attention
  sinks, a 128-token window on every other layer (layer_types), 8 experts
  top-2, the router drawn so its logits are N(0, 1), and gpt-oss-20b's yarn
  (factor 32 over 4096 positions, beta_fast 32, beta_slow 1, not truncated);
- gpt-oss-e32: the same with gpt-oss-20b's 32 experts top-4, hidden 720,
  16 query / 4 kv heads (where bf16 flips routers' choices);
- deepseek-v2: 4 layers (the first dense), hidden 128, 4 heads, kv_lora_rank
  64, qk_rope_head_dim 64, 8 routed experts top-2 and a shared one, and
  DeepSeek-V2-Lite's yarn (factor 40 over 4096 positions, mscale 0.707 =
  mscale_all_dim).
--samples random samples of --seq-len (2048) token ids go through:
  (a) kvcal calibrate --device D --granularity head (its JSON);
  (b) transformers in float64 from the saved checkpoint (dtype=float64 at
      load: the RoPE tables are computed in float64, not cast), eager
      attention and experts;
  (c) transformers in bf16 on D (eager attention, grouped_mm experts where
      they run, else eager), as saved, then (c-rope32) with the RoPE tables
      and products in float32 (gpt-oss: rotary_emb and apply_rotary_pos_emb
      patched; DeepSeek-V2 already rotates in float32) and (c-routed) with
      every router's choice forced to (b)'s (the scores recomputed from
      bf16's logits over (b)'s experts).
Hooks on each attention module recompute K exactly as the module does (after
RoPE) and V (tests/gpu_vs_transformers.py; an MLA module's cached entry, the
latent and the RoPE part: tests/hf_mla.py). Prints, per model, the worst
relative difference of the per-layer per-kv-head absmax (K, V; MLA latent and
RoPE part) of each pair and where it lies, the share of tokens whose experts
bf16 chose differently from float64 per layer, and fails (exit 1) when kvcal
is further than --rtol from float64.

Usage: python3 tests/long_sequence_vs_transformers.py [--kvcal build-cpu/kvcal]
           [--device cpu|cuda] [--work DIR] [--models gpt-oss deepseek-v2]
           [--seq-len 2048] [--samples 2] [--rtol 1e-2]
Exit: 0 kvcal within --rtol of float64, 1 outside it, 2 error.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_mla import mla_entry  # noqa: E402

VOCAB = 1000


# a decoder layer's router (None: a dense layer) by model_type
ROUTERS = {"gpt_oss": lambda layer: layer.mlp.router,
           "deepseek_v2": lambda layer: getattr(layer.mlp, "gate", None)}


def configs(tf):
    """name -> the tiny model's config."""
    gpt_oss = tf.GptOssConfig(
        hidden_size=128, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 2,
        vocab_size=VOCAB, max_position_embeddings=131072, rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False})
    deepseek = tf.DeepseekV2Config(
        hidden_size=128, intermediate_size=192, moe_intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=64,
        qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
        topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=1.0,
        norm_topk_prob=False, vocab_size=VOCAB, max_position_embeddings=163840,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707})
    # gpt-oss-20b's expert count and top-k (32, top-4) on a wider layer (720;
    # 16 query / 4 kv heads of 64): where bf16 flips a router's choice
    wide = tf.GptOssConfig(**dict(gpt_oss.to_dict(), hidden_size=720, intermediate_size=720,
                                  num_attention_heads=16, num_key_value_heads=4,
                                  num_local_experts=32, num_experts_per_tok=4))
    return {"gpt-oss": gpt_oss, "deepseek-v2": deepseek, "gpt-oss-e32": wide}


def make_model(name, work, torch, tf):
    """The bf16 checkpoint (saved once)."""
    d = os.path.join(work, name)
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    cfg = configs(tf)[name]
    router = ROUTERS[cfg.model_type]
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # routers that choose: N(0, 1) logits over the experts
        for layer in model.model.layers:
            r = router(layer)
            if r is not None and hasattr(r, "weight"):
                r.weight.normal_(0.0, 1.0 / cfg.hidden_size ** 0.5)
                if getattr(r, "bias", None) is not None:
                    r.bias.zero_()
    model.to(torch.bfloat16).save_pretrained(d)
    return d


def kvcal_absmax(kvcal, model_dir, ids, device):
    """{(layer, part): [per-head absmax]}: parts k, v (MLA: latent, rope)."""
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "ids.jsonl")
        with open(data, "w") as fp:
            for s in ids:
                fp.write(json.dumps({"input_ids": s}) + "\n")
        cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", data, "--device", device,
               "--num-samples", str(len(ids)), "--seq-len", str(len(ids[0])), "--batch", "1",
               "--granularity", "head", "--format", "kvcal",
               "--out", os.path.join(work, "scales.json"), "--json", "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (" ".join(cmd), r.returncode,
                                                      r.stderr.strip()))
    out = {}
    for li, layer in enumerate(json.loads(r.stdout)["layers"]):
        if "latent_absmax" in layer:
            out[(li, "latent")] = [layer["latent_absmax"]]
            out[(li, "rope")] = [layer["rope_absmax"]]
        else:
            out[(li, "k")] = layer["k_absmax"]
            out[(li, "v")] = layer["v_absmax"]
    return out


def rope_in_float32(model, torch):
    """gpt-oss: cos/sin kept in float32 and the rotation done in float32,
    the result cast back to the model's dtype (what the attention takes)."""
    mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
    rotary = model.model.rotary_emb
    orig_forward = rotary.forward
    rotary.forward = lambda x, position_ids: orig_forward(x.float(), position_ids)
    orig_apply = mod.apply_rotary_pos_emb

    def apply(q, k, cos, sin, unsqueeze_dim=1):
        qe, ke = orig_apply(q.float(), k.float(), cos.float(), sin.float(), unsqueeze_dim)
        return qe.to(q.dtype), ke.to(k.dtype)

    mod.apply_rotary_pos_emb = apply
    return lambda: setattr(mod, "apply_rotary_pos_emb", orig_apply)


def hf_absmax(model_dir, ids, dtype, device, torch, tf, variant="", routes=None):
    """({(layer, part): [per-head absmax]}, [per sample, per layer: router
    indices]) of transformers in dtype on device. variant: rope32 (gpt-oss'
    RoPE in float32) or routed (every router forced to routes' choices)."""
    model = None
    for impl in (["eager"] if dtype == torch.float64 else ["grouped_mm", "eager"]):
        try:
            model = tf.AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=dtype, attn_implementation="eager",
                experts_implementation=impl).to(device).eval()
            with torch.no_grad():  # grouped_mm may load and not run on this device
                model.model(torch.tensor([ids[0][:8]], device=device), use_cache=False)
            break
        except Exception as e:  # an experts implementation this device lacks
            print("  transformers %s experts_implementation=%s: %s: %s; next"
                  % (dtype, impl, type(e).__name__, str(e)[:120]), flush=True)
            model = None
    if model is None:
        raise RuntimeError("no experts implementation of transformers ran")
    router_of = ROUTERS[model.config.model_type]
    gpt_oss = model.config.model_type == "gpt_oss"
    restore = rope_in_float32(model, torch) if variant == "rope32" else (lambda: None)
    stats, chosen, cur = {}, [], {}

    def keep(li, part, x):
        x = x.abs().amax(dim=0).double().cpu()
        stats[(li, part)] = torch.maximum(stats.get((li, part), x), x)

    def attn_hook(li):
        def fn(module, args, kwargs):
            hs = kwargs["hidden_states"]
            if hasattr(module, "kv_a_proj_with_mqa"):
                entry = mla_entry(module, kwargs, torch)[0]  # (tokens, latent + rope)
                L = module.kv_lora_rank
                keep(li, "latent", entry[:, :L].abs().amax(dim=1, keepdim=True))
                keep(li, "rope", entry[:, L:].abs().amax(dim=1, keepdim=True))
                return
            rope_fn = sys.modules[type(module).__module__].apply_rotary_pos_emb
            cos, sin = kwargs["position_embeddings"]
            shape = (*hs.shape[:-1], -1, module.head_dim)
            k = module.k_proj(hs).view(shape).transpose(1, 2)
            _, k = rope_fn(k, k, cos, sin)
            keep(li, "k", k[0].abs().amax(dim=2).T)  # (tokens, kv heads)
            keep(li, "v", module.v_proj(hs).view(shape)[0].abs().amax(dim=2))
        return fn

    def router_hook(li):
        def fn(module, args, out):
            logits, scores, idx = out
            if variant == "routed":
                idx = routes[cur["sample"]][li].to(idx.device)
                if gpt_oss:  # softmax over the chosen experts' logits
                    scores = torch.softmax(logits.gather(1, idx), dim=1, dtype=logits.dtype)
                else:  # softmax over all experts, the chosen ones' scores
                    scores = logits.float().softmax(dim=-1).gather(1, idx) * \
                        module.routed_scaling_factor
                out = (logits, scores.to(out[1].dtype), idx)
            chosen[-1][li] = out[2].sort(dim=1).values.cpu()
            return out
        return fn

    for li, layer in enumerate(model.model.layers):
        layer.self_attn.register_forward_pre_hook(attn_hook(li), with_kwargs=True)
        r = router_of(layer)
        if r is not None:
            r.register_forward_hook(router_hook(li))
    with torch.no_grad():
        for si, s in enumerate(ids):
            cur["sample"] = si
            chosen.append({})
            model.model(torch.tensor([s], device=device), use_cache=False)
    restore()
    del model
    return {k: v.tolist() for k, v in stats.items()}, chosen


def worst(got, ref):
    """(worst relative difference, (layer, part, head)) of got from ref."""
    best = (0.0, None)
    for key, heads in ref.items():
        for h, (g, r) in enumerate(zip(got[key], heads)):
            d = abs(g - r) / max(abs(r), 1e-30)
            if d > best[0]:
                best = (d, (key[0], key[1], h))
    return best


def per_layer(got, ref, layers):
    return ["%.1e" % max(abs(g - r) / max(abs(r), 1e-30) for (li, _), heads in ref.items()
                         if li == l for g, r in zip(got[(li, _)], heads))
            for l in range(layers)]


def flips(a, b):
    """Per layer, the share of tokens whose chosen experts differ."""
    out = {}
    for sa, sb in zip(a, b):
        for li in sa:
            n, d = out.get(li, (0, 0))
            out[li] = (n + int((sa[li] != sb[li]).any(dim=1).sum()), d + sa[li].shape[0])
    return {li: n / d for li, (n, d) in sorted(out.items())}


def check(name, model_dir, args, torch, tf):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (args.samples, args.seq_len), generator=g).tolist()
    cfg = tf.AutoConfig.from_pretrained(model_dir)
    layers = cfg.num_hidden_layers
    print("%s: %d x %d tokens, checkpoint %s" % (name, args.samples, args.seq_len, model_dir),
          flush=True)
    runs = {"a kvcal": (kvcal_absmax(args.kvcal, model_dir, ids, args.device), None)}
    runs["b hf-f64"] = hf_absmax(model_dir, ids, torch.float64, args.f64_device, torch, tf)
    runs["c hf-bf16"] = hf_absmax(model_dir, ids, torch.bfloat16, args.device, torch, tf)
    if cfg.model_type == "gpt_oss":
        runs["c hf-bf16 rope32"] = hf_absmax(model_dir, ids, torch.bfloat16, args.device,
                                             torch, tf, "rope32")
    runs["c hf-bf16 routed"] = hf_absmax(model_dir, ids, torch.bfloat16, args.device,
                                         torch, tf, "routed", runs["b hf-f64"][1])
    rows = {}
    for got, ref in (("a kvcal", "b hf-f64"), ("c hf-bf16", "b hf-f64"),
                     ("a kvcal", "c hf-bf16"), ("c hf-bf16 rope32", "b hf-f64"),
                     ("c hf-bf16 routed", "b hf-f64")):
        if got in runs:
            d, where = worst(runs[got][0], runs[ref][0])
            rows["%s vs %s" % (got, ref)] = d
            print("  %-34s worst %.2e at layer %d %s head %d; per layer %s"
                  % ("%s vs %s" % (got[2:], ref[2:]), d, *where,
                     " ".join(per_layer(runs[got][0], runs[ref][0], layers))), flush=True)
    f = flips(runs["c hf-bf16"][1], runs["b hf-f64"][1])
    print("  tokens routed differently by bf16 than by float64, per MoE layer: %s"
          % ", ".join("layer %d %.2f%%" % (li, 100 * s) for li, s in f.items()))
    rows["routing flips"] = f
    forced = flips(runs["c hf-bf16 routed"][1], runs["b hf-f64"][1])
    print("  ... with the routing forced to float64's: %s"
          % ", ".join("layer %d %.2f%%" % (li, 100 * s) for li, s in forced.items()))
    ok = rows["a kvcal vs b hf-f64"] <= args.rtol
    print("  kvcal vs float64: %s (limit %.0e)" % ("ok" if ok else "OUTSIDE", args.rtol))
    return rows, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcal", default="build-cpu/kvcal")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="kvcal's and transformers bf16's device (float64 runs on the cpu)")
    ap.add_argument("--f64-device", default="cpu", choices=("cpu", "cuda"),
                    help="transformers float64's device")
    ap.add_argument("--work", default="build-cpu/long_sequence")
    ap.add_argument("--models", nargs="+", default=["gpt-oss", "deepseek-v2"],
                    choices=("gpt-oss", "deepseek-v2", "gpt-oss-e32", "none"),
                    help="the tiny models to build and check (none: only --model-dir)")
    ap.add_argument("--model-dir", action="append", default=[],
                    help="a saved gpt-oss or DeepSeek-V2 checkpoint to check too (e.g. "
                    "bench/calibrate_moe.py's or calibrate_mla.py's)")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    import torch
    import transformers as tf
    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    if "cuda" in (args.device, args.f64_device) and not torch.cuda.is_available():
        print("long_sequence_vs_transformers: SKIPPED: no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    print("torch %s, transformers %s, kvcal and bf16 on %s"
          % (torch.__version__, tf.__version__, args.device), flush=True)
    os.makedirs(args.work, exist_ok=True)
    results, ok = {}, True
    models = [(n, make_model(n, args.work, torch, tf)) for n in args.models if n != "none"]
    models += [(os.path.basename(os.path.normpath(d)), d) for d in args.model_dir]
    for name, model_dir in models:
        results[name], good = check(name, model_dir, args, torch, tf)
        ok = ok and good
    if args.json:
        with open(args.json, "w") as fp:
            json.dump(results, fp, indent=1, default=str)
    print("long_sequence_vs_transformers: %s" % ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as e:
        print("long_sequence_vs_transformers: error: %s" % e)
        sys.exit(2)
