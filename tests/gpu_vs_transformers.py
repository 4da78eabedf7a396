#!/usr/bin/env python3
"""kvcal calibrate --device cuda against HF transformers in bf16 on the same GPU.

For each model: the same token samples go through `kvcal calibrate --device
cuda --granularity head` and through the transformers model in bf16 (SDPA) and
in fp32 (TF32 off) on the GPU, with hooks that take each layer's K after
k_norm and RoPE and V after v_proj, exactly as the model computes them (an
MLA model's one cached entry, the normalized latent and the rotated RoPE
part, as K and as V: tests/hf_mla.py). It
prints, per model, the worst and median relative difference of the per-layer
per-kv-head K/V absmax of kvcal from transformers-bf16 and of both bf16 sides
from fp32, and fails when kvcal is further than --rtol from transformers-bf16.

Models: every golden fixture (tests/fixtures/golden/*.json, 4 random samples
of 61 tokens each; gpt-oss's with eager attention, its only path with sinks,
and MXFP4 experts dequantized by transformers' loader; not the FP8
checkpoints, whose oracle is the model vLLM serves, tests/fp8_vs_torch_gpu.py),
directories given with --model, the golden checkpoints with one config value
moved to an edge (--variants DIR: VARIANTS, made in DIR), and SmolLM2-135M-Instruct
from its GGUF file (--gguf, converted by tests/smollm2_to_hf.py; samples of
--seq-len tokens of --corpus).

Usage: python3 tests/gpu_vs_transformers.py --kvcal build/kvcal [--golden
           [--only SUBSTR ...]] [--model DIR ...] [--variants DIR]
           [--gguf FILE --work DIR --corpus TEXT]
Exit: 0 all within --rtol, 1 a model outside it, 2 error.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_decoder import cached_kv, decoder_layers, model_class, text_model  # noqa: E402
from hf_mla import is_mla, mla_entry  # noqa: E402


def hf_absmax(model_dir, samples, dtype, torch, tf):
    """Per-layer per-kv-head absmax of K (post k_norm + RoPE) and V."""
    # SDPA cannot soft-cap attention logits: transformers' sdpa path leaves
    # Gemma 2's attn_logit_softcapping out, so such a model runs eager; nor
    # has it attention sinks: gpt-oss has no sdpa path, it runs eager too
    cfg = tf.AutoConfig.from_pretrained(model_dir)
    capped = getattr(getattr(cfg, "text_config", cfg), "attn_logit_softcapping", None)
    eager = capped or cfg.model_type == "gpt_oss"
    extra = {}
    quant = getattr(cfg, "quantization_config", None) or {}
    if (quant if isinstance(quant, dict) else quant.to_dict()).get("quant_method") == "mxfp4":
        # MXFP4 experts dequantized by transformers' own loader (its kernels
        # path needs packages fetched at run time)
        extra["quantization_config"] = tf.Mxfp4Config(dequantize=True)
    # transformers before 5.25 ignores MiniMax-M2's legacy rotary_dim and
    # rotates every channel of a head; vLLM and transformers 5.25 rotate
    # rotary_dim of them
    rotary_dim, rope = getattr(cfg, "rotary_dim", None), getattr(cfg, "rope_parameters", None)
    if cfg.model_type == "minimax_m2" and rotary_dim and isinstance(rope, dict):
        rope.setdefault("partial_rotary_factor", rotary_dim / cfg.head_dim)
    model = model_class(tf, cfg).from_pretrained(
        model_dir, config=cfg, dtype=dtype, attn_implementation="eager" if eager else "sdpa",
        **extra).cuda()
    model.eval()
    k_abs, v_abs, parts = [], [], []

    def mla_hook(module, args, kwargs):
        entry = mla_entry(module, kwargs, torch).abs()
        k_abs.append(entry.amax().float().cpu().reshape(1))
        v_abs.append(k_abs[-1])
        L = module.kv_lora_rank
        parts.append([entry[..., :L].amax().float().item(),
                      entry[..., L:].amax().float().item()])

    def hook(module, args, kwargs):
        hs = kwargs.get("hidden_states", args[0] if args else None)
        k, v = cached_kv(module, hs, kwargs["position_embeddings"])
        k_abs.append(k.abs().amax(dim=(0, 1, 3)).float().cpu())
        v_abs.append(v.abs().amax(dim=(0, 1, 3)).float().cpu())

    def make_hook(attn):
        return mla_hook if is_mla(attn) else hook

    for layer in decoder_layers(model):  # a hybrid model's attention layers alone
        if hasattr(layer, "self_attn"):
            layer.self_attn.register_forward_pre_hook(make_hook(layer.self_attn),
                                                      with_kwargs=True)
    with torch.no_grad():
        text_model(model)(torch.tensor(samples, device="cuda"), use_cache=False)
    del model
    torch.cuda.empty_cache()
    return torch.stack(k_abs).tolist(), torch.stack(v_abs).tolist(), parts


class CpuOnly(Exception):
    """The CUDA runner refuses the model (it runs on the CPU runner alone)."""


def kvcal_absmax(kvcal, model_dir, samples, work):
    data = os.path.join(work, "ids.jsonl")
    with open(data, "w") as fp:
        for s in samples:
            fp.write(json.dumps({"input_ids": s}) + "\n")
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", data, "--device", "cuda",
           "--num-samples", str(len(samples)), "--seq-len", str(len(samples[0])),
           "--batch", str(len(samples)), "--granularity", "head", "--format", "kvcal",
           "--out", os.path.join(work, "scales.json"), "--json", "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "use --device cpu" in r.stderr:
        raise CpuOnly(r.stderr.strip().splitlines()[-1])
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d: %s" % (" ".join(cmd), r.returncode,
                                                      r.stderr.strip()))
    # a hybrid model's linear-attention layers cache nothing: the others alone
    layers = [l for l in json.loads(r.stdout)["layers"] if l.get("kv_cache", True)]
    # an MLA model's layers: the latent's and the RoPE part's absmax
    parts = [[l["latent_absmax"], l["rope_absmax"]] for l in layers if "latent_absmax" in l]
    return [l["k_absmax"] for l in layers], [l["v_absmax"] for l in layers], parts


def rel_diffs(got, ref):
    return sorted(abs(g - w) / max(abs(w), 1e-30)
                  for gl, wl in zip(got, ref) for g, w in zip(gl, wl))


def compare(name, kvcal, model_dir, samples, rtol, reference, torch, tf):
    with tempfile.TemporaryDirectory() as work:
        kk, kv, kp = kvcal_absmax(kvcal, model_dir, samples, work)
    bk, bv, bp = hf_absmax(model_dir, samples, torch.bfloat16, torch, tf)
    fk, fv, _ = hf_absmax(model_dir, samples, torch.float32, torch, tf)
    row = {"model": name, "tokens": len(samples) * len(samples[0])}
    mla = ""
    if bp:  # MLA: the entry's latent and RoPE parts, each against hf-bf16's
        d = rel_diffs(kp, bp)
        row["kvcal-vs-hf-bf16 latent/rope worst"] = d[-1]
        mla = " | MLA latent/rope parts worst %.2e" % d[-1]
    for label, (gk, gv, rk, rv) in (("kvcal-vs-hf-bf16", (kk, kv, bk, bv)),
                                    ("kvcal-vs-fp32", (kk, kv, fk, fv)),
                                    ("hf-bf16-vs-fp32", (bk, bv, fk, fv))):
        for which, got, ref in (("K", gk, rk), ("V", gv, rv)):
            d = rel_diffs(got, ref)
            row["%s %s worst" % (label, which)] = d[-1]
            row["%s %s median" % (label, which)] = d[len(d) // 2]
    if reference == "fp32":
        worst = max(row["kvcal-vs-fp32 K worst"], row["kvcal-vs-fp32 V worst"])
    else:
        worst = max(row["kvcal-vs-hf-bf16 K worst"], row["kvcal-vs-hf-bf16 V worst"],
                    row.get("kvcal-vs-hf-bf16 latent/rope worst", 0.0))
    print("%-34s %6d tokens | kvcal vs hf-bf16 worst K %.2e V %.2e (median %.1e / %.1e) | "
          "vs fp32 worst: kvcal K %.2e V %.2e, hf-bf16 K %.2e V %.2e%s | %s"
          % (name, row["tokens"], row["kvcal-vs-hf-bf16 K worst"],
             row["kvcal-vs-hf-bf16 V worst"], row["kvcal-vs-hf-bf16 K median"],
             row["kvcal-vs-hf-bf16 V median"], row["kvcal-vs-fp32 K worst"],
             row["kvcal-vs-fp32 V worst"], row["hf-bf16-vs-fp32 K worst"],
             row["hf-bf16-vs-fp32 V worst"], mla,
             "ok" if worst <= rtol else "OUTSIDE %.0e of %s" % (rtol, reference)),
          flush=True)
    return row, worst <= rtol


def golden_models():
    for path in sorted(glob.glob(os.path.join(HERE, "fixtures", "golden", "*.json"))):
        fx = json.load(open(path))
        model_dir = os.path.join(HERE, "..", fx["model"])
        if "scheme" in fx:  # FP8 weights: tests/fp8_vs_torch_gpu.py serves them as vLLM does
            continue
        if os.path.exists(os.path.join(model_dir, "config.json")):
            cfg = json.load(open(os.path.join(model_dir, "config.json")))
            rng = random.Random(fx["name"])
            samples = [[rng.randrange(cfg.get("text_config", cfg)["vocab_size"])
                        for _ in range(61)] for _ in range(4)]
            yield fx["name"], model_dir, samples


# Golden checkpoints with one of their config's values changed to an edge a
# real config may hold (top-k from 1 to every expert, windows from 1 token to
# past the samples' 61, grouped top-k from one group to the fewest experts a
# group the routing takes, Gemma's query scale and soft caps, DeepSeek's
# routed scale): the same weights through other paths of the kernels, held
# to the fp32 model (--reference fp32): at such edges two bf16 models can
# stand 1-2% on either side of it (Gemma 3 with a window of 7: kvcal 1.7e-2
# and transformers bf16 1.0e-2 from fp32, 2.7e-2 apart). Not
# gpt-oss's swiglu_limit / swiglu_alpha: transformers reads them from the
# config since 5.2x, hard-coded 7.0 / 1.702 before, as vLLM's kernel still
# has them (schemas/README.md).
WINDOWS = [{"sliding_window": w} for w in (1, 7, 17, 33, 100)]
VARIANTS = {
    "qwen3_moe_e8_top3_norm_bf16": [{"num_experts_per_tok": k} for k in (1, 2, 8)],
    "qwen2_moe_shared_e6_top2_bf16": [{"num_experts_per_tok": k} for k in (1, 6)],
    "mixtral_e4_top2_swa16_bf16": [{"num_experts_per_tok": k} for k in (1, 4)] + WINDOWS,
    "qwen3_moe_swa16_e8_top2_bf16": [{"num_experts_per_tok": k} for k in (1, 8)] + WINDOWS,
    "qwen2_moe_swa8_maxwin2_e4_top2_bf16": WINDOWS,
    "gpt_oss_sinks_swa8_e8_top3_bf16": [{"num_experts_per_tok": k} for k in (1, 8)] + WINDOWS,
    "glm4_moe_dense1_sigmoid_e8_top3_bf16": [{"num_experts_per_tok": k} for k in (1, 8)]
    + [{"n_group": g, "topk_group": t} for g, t in ((2, 1), (4, 2), (4, 4))],
    "deepseek_v2_mla_grouped_softmax_bf16": [{"num_experts_per_tok": k} for k in (1, 4)]
    + [{"n_group": g, "topk_group": t} for g, t in ((1, 1), (2, 1), (8, 8))],
    "deepseek_v3_mla_qlora_grouped_sigmoid_bf16": [
        {"n_group": g, "topk_group": t} for g, t in ((1, 1), (2, 1), (4, 4))]
    + [{"routed_scaling_factor": v} for v in (0.5, 16.0)],
    "glm4_moe_lite_mla_qlora_sigmoid_bf16": [{"num_experts_per_tok": k} for k in (1, 8)]
    + [{"n_group": g, "topk_group": t} for g, t in ((2, 1), (4, 2))],
    "gemma3_text_swa8_local_global_bf16": WINDOWS
    + [{"query_pre_attn_scalar": v} for v in (1, 256)],
    "gemma2_softcap_swa8_bf16": WINDOWS + [{"query_pre_attn_scalar": v} for v in (1, 256)]
    + [{"attn_logit_softcapping": v, "final_logit_softcapping": v} for v in (1.0, 5.0)],
    "phi3_longrope_partial_swa16_bf16": WINDOWS,
}


def variant_models(work):
    """Each VARIANTS edit as a checkpoint in work (the golden one's files
    linked, its config.json edited), with 4 samples of 61 tokens."""
    for name, edits in VARIANTS.items():
        src = os.path.join(HERE, "fixtures", "golden", name)
        with open(os.path.join(src, "config.json")) as fp:
            cfg = json.load(fp)
        for edit in edits:
            tag = ",".join("%s=%s" % kv for kv in edit.items())
            model_dir = os.path.join(work, "%s__%s" % (name, tag))
            os.makedirs(model_dir, exist_ok=True)
            for f in os.listdir(src):
                if f != "config.json" and not os.path.exists(os.path.join(model_dir, f)):
                    os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(model_dir, f))
            with open(os.path.join(model_dir, "config.json"), "w") as fp:
                json.dump(dict(cfg, **edit), fp, indent=1)
            rng = random.Random(name + tag)
            samples = [[rng.randrange(cfg.get("text_config", cfg)["vocab_size"])
                        for _ in range(61)] for _ in range(4)]
            yield "%s %s" % (name, tag), model_dir, samples


def smollm2_model(gguf_path, work, corpus, seq_len, n):
    from smollm2_to_hf import gguf_to_hf
    from tokenizers import Tokenizer
    hf_dir = os.path.join(work, "hf")
    gguf_to_hf(gguf_path, hf_dir)
    tk = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    with open(corpus, encoding="utf-8") as fp:
        ids = tk.encode(fp.read(400000)).ids
    samples = [ids[i * seq_len:(i + 1) * seq_len] for i in range(n)]
    if len(samples[-1]) != seq_len:
        raise RuntimeError("%s is too short for %d x %d tokens" % (corpus, n, seq_len))
    return "SmolLM2-135M-Instruct", hf_dir, samples


def vocab_size(model_dir):
    """The vocabulary of the checkpoint in model_dir (its text model's)."""
    with open(os.path.join(model_dir, "config.json")) as fp:
        cfg = json.load(fp)
    return cfg.get("text_config", cfg)["vocab_size"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcal", default="build/kvcal")
    ap.add_argument("--golden", action="store_true", help="every golden fixture")
    ap.add_argument("--only", action="append", default=[],
                    help="with --golden or --variants: the fixtures whose name contains "
                         "this (repeatable)")
    ap.add_argument("--model", action="append", default=[], help="HF checkpoint directory")
    ap.add_argument("--variants", metavar="DIR",
                    help="the golden checkpoints with config edits (VARIANTS), made in DIR")
    ap.add_argument("--gguf", help="SmolLM2 GGUF file")
    ap.add_argument("--work", default="build/smollm2", help="where the GGUF is converted")
    ap.add_argument("--corpus", default="../shared/corpora/wikitext2_raw_test_hfjoin.txt")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--rtol", type=float, default=2e-2)
    ap.add_argument("--reference", choices=("bf16", "fp32"), default="bf16",
                    help="what kvcal is held to within --rtol: transformers in bf16 "
                         "(the issue's oracle) or in fp32")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()

    import torch
    import transformers as tf
    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
    if not torch.cuda.is_available():
        print("gpu_vs_transformers: SKIPPED: no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    models = [m for m in golden_models()
              if not args.only or any(o in m[0] for o in args.only)] if args.golden else []
    models += [(os.path.basename(os.path.normpath(d)), d,
                [[random.Random(i).randrange(min(1000, vocab_size(d)))
                  for _ in range(args.seq_len)]
                 for i in range(args.samples)]) for d in args.model]
    if args.variants:
        models += [m for m in variant_models(args.variants)
                   if not args.only or any(o in m[0] for o in args.only)]
    if args.gguf:
        models.append(smollm2_model(args.gguf, args.work, args.corpus, args.seq_len,
                                    args.samples))
    rows, ok = [], True
    skipped = []
    for name, model_dir, samples in models:
        try:
            row, good = compare(name, args.kvcal, model_dir, samples, args.rtol,
                                args.reference, torch, tf)
        except CpuOnly as e:  # not a failure: this build's CUDA runner lacks it
            print("%s: skipped: %s" % (name, e), flush=True)
            skipped.append(name)
            continue
        rows.append(row)
        ok = ok and good
    if args.json:
        with open(args.json, "w") as fp:
            json.dump(rows, fp, indent=1)
    print("gpu_vs_transformers: %s (%d models, limit %.0e of transformers %s; %d skipped, "
          "the CUDA runner refusing them: %s)"
          % ("PASSED" if ok else "FAILED", len(rows), args.rtol, args.reference,
             len(skipped), ", ".join(skipped) or "none"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as e:
        print("gpu_vs_transformers: error: %s" % e)
        sys.exit(2)
