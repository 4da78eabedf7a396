#!/usr/bin/env python3
"""Calibration speed of multi-head latent attention on a GPU: kvcal calibrate
--device cuda against transformers on a DeepSeek-V2-Lite-shaped (or, with
--shape glm-4.7-flash, GLM-4.7-Flash-shaped) random-weight model and the same
tokens (8 samples x 2048 tokens a batch), in one run.

usage: calibrate_mla.py KVCAL WORKDIR OUT [--shape deepseek-v2-lite|glm-4.7-flash]
                        [--layers N] [--batches B]
                        [--transformers all|none|CONFIG,...] [--kvcal-profile]
                        [--kvcal-repeats N] [--fp8 block] [--floor-only]

--fp8 block (with --transformers none): the same random model saved as
DeepSeek-V3 is released (the fp8 method: every projection, kv_b_proj and
the experts among them, in e4m3 128 x 128 blocks with weight_scale_inv,
dynamic activations; the routers, norms, embedding and lm_head bf16, and
the dense first layer's MLP, whose 10944 rows vLLM cannot fuse in blocks
of 128), kvcal alone on it.

DeepSeek-V2-Lite's layers (hidden 2048, 16 heads, no query LoRA, kv_lora_rank
512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, yarn x40 of
4096 positions with mscale 0.707 = mscale_all_dim; the first layer dense of
10944, then 64 routed experts of 1408, top-6 by softmax, 2 shared experts)
built with transformers' own DeepseekV2Config, `--layers` of its 27 (about
1.2 GB a layer in bf16); or GLM-4.7-Flash's (hidden 2048, 20 heads, query
LoRA 768, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 192,
v_head_dim 256, RoPE base 1e6; the first layer dense of 10240, then 64 routed
experts of 1536, top-4 by sigmoid with a correction bias, x1.8, one shared
expert) with Glm4MoeLiteConfig, `--layers` of its 47 (about 1.25 GB a
layer); random bf16 weights saved with save_pretrained (one tensor per
expert, as the released checkpoints), B x 8 random 2048-token samples as
JSONL token ids. Then, on the same tokens:

- `KVCAL calibrate --device cuda --stats`: its tokens/s, peak device memory
  (sampled), the per-layer absmax of the cached entry's latent and RoPE part
  (its forward phase overlaps the weights' load: calibrate_moe.py says
  when that bounds it);
- the transformers model body (no lm_head) in bf16 with SDPA and a hook on
  every attention module that recomputes the entry an engine caches
  (tests/hf_mla.py: kv_a_layernorm's latent, the rotated RoPE part) and keeps
  its two parts' absmax, with each experts implementation the installed
  transformers offers (eager, batched_mm, grouped_mm), eager, under
  torch.compile of the whole body (+compile) and with each decoder layer
  compiled apart (+rcompile: regional compilation, the layers of one kind
  share their compiled code, so that its compile time does not grow with the
  layers as the whole body's does); one that fails is reported and skipped.
  `--transformers` names the configurations to run (IMPL, IMPL+compile or
  IMPL+rcompile, comma-separated, e.g. grouped_mm+compile, the fastest
  measured at 2 and 4 layers; none: kvcal and the floor alone); all by
  default;
- the floor of the library calls: one MoE layer's GEMMs (q, kv_a, kv_b, o,
  router, the shared experts; GLM-4.7-Flash's q_a and q_b in place of q) and
  the routed experts' as torch's grouped GEMM on a balanced routing, plus the
  fastest SDPA backend that takes the shape's query / key and value heads
  (192 and 128; 256 and 256), for every layer but the last (kv_a and the
  router there); in bursts and sustained, as calibrate_moe.py's.
  --floor-only prints the floor alone.

Writes OUT/mla_bench.json (every figure) and prints a table: tokens/s and
tokens/s per layer of each, kvcal's ratio to the fastest transformers
configuration, peak memory, and the worst relative difference of kvcal's
latent and RoPE-part absmax from transformers bf16's (eager experts, or the
first configuration run).
"""
import argparse
import json
import os
import sys
import time

from collections import namedtuple

import torch
import transformers
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
from hf_mla import mla_entry  # noqa: E402
from calibrate_llama8b import flush_to_disk, floor_of, gemm_step, sdpa_step  # noqa: E402
# kvcal's run (per-head granularity: one head, the entry), its peak memory and
# the GEMM timer, at the same 8 x 2048-token batches
from calibrate_moe import (BATCH, SEQ, TARGET, Deadline, against_target,  # noqa: E402
                           grouped_steps, print_load, print_profile, run_kvcal,
                           run_kvcal_median, save_fp8_block, timed_run)

# A model's sizes: hidden, heads, query LoRA (None: q_proj), kv_lora_rank,
# RoPE part, no-RoPE part and value head; routed experts, top-k, their
# width, shared experts, the dense layer's width, vocabulary.
Shape = namedtuple("Shape", "title D H QL L R NOPE VD E TOPK MI SHARED DENSE_I VOCAB")
SHAPES = {
    "deepseek-v2-lite": Shape("DeepSeek-V2-Lite", 2048, 16, None, 512, 64, 128, 128,
                              64, 6, 1408, 2, 10944, 102400),
    "glm-4.7-flash": Shape("GLM-4.7-Flash", 2048, 20, 768, 512, 64, 192, 256,
                           64, 4, 1536, 1, 10240, 154880),
}


def model_config(name, s, layers):
    """transformers' own config of the shape."""
    common = dict(
        hidden_size=s.D, intermediate_size=s.DENSE_I, moe_intermediate_size=s.MI,
        num_hidden_layers=layers, num_attention_heads=s.H, num_key_value_heads=s.H,
        q_lora_rank=s.QL, kv_lora_rank=s.L, qk_rope_head_dim=s.R, qk_nope_head_dim=s.NOPE,
        v_head_dim=s.VD, n_routed_experts=s.E, num_experts_per_tok=s.TOPK,
        n_shared_experts=s.SHARED, first_k_dense_replace=1, n_group=1, topk_group=1,
        vocab_size=s.VOCAB, tie_word_embeddings=False)
    if name == "glm-4.7-flash":
        return transformers.Glm4MoeLiteConfig(
            routed_scaling_factor=1.8, norm_topk_prob=True, max_position_embeddings=202752,
            rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            **common)
    return transformers.DeepseekV2Config(
        topk_method="greedy", routed_scaling_factor=1.0, norm_topk_prob=False,
        max_position_embeddings=163840, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707},
        **common)


def make_model(workdir, name, layers, fp8=False):
    """The checkpoint (saved once; fp8: as save_fp8_block saves it)."""
    s = SHAPES[name]
    model_dir = os.path.join(workdir, f"{name}-{layers}l{'-fp8' if fp8 else ''}")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        cfg = model_config(name, s, layers)
        torch.manual_seed(0)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg).eval()
        torch.set_default_dtype(torch.float32)
        with torch.no_grad():  # routers that choose: N(0, 1) logits over the experts
            for layer in model.model.layers[1:]:
                layer.mlp.gate.weight.normal_(0.0, 1.0 / s.D ** 0.5)
                bias = getattr(layer.mlp.gate, "e_score_correction_bias", None)
                if bias is not None:  # the choice's correction, as trained ones have
                    bias.normal_(0.0, 0.1)
        if fp8:
            save_fp8_block(model, model_dir, not_convert=[
                f"model.layers.0.mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")])
        else:
            model.save_pretrained(model_dir)
        del model
        torch.cuda.empty_cache()
    return model_dir


def library_floor(s, layers):
    """The library floor of `layers` MoE layers of shape s at 8 x 2048 tokens
    (floor_of): (tokens/s in bursts, sustained, ms a layer in bursts,
    sustained, whether the experts' grouped GEMMs ran)."""
    m = BATCH * SEQ
    qk = s.NOPE + s.R
    query = ([("q_a", s.D, s.QL), ("q_b", s.QL, s.H * qk)] if s.QL
             else [("q", s.D, s.H * qk)])
    steps = [gemm_step(name, m, k, n) for name, k, n in query +
             [("kv_a", s.D, s.L + s.R), ("kv_b", s.L, s.H * (s.NOPE + s.VD)),
              ("o", s.H * s.VD, s.D), ("router", s.D, s.E),
              ("shared gate/up", s.D, 2 * s.SHARED * s.MI),
              ("shared down", s.SHARED * s.MI, s.D)]]
    experts = grouped_steps(m, s.D, s.E, s.TOPK, s.MI)
    q = torch.randn(BATCH, s.H, SEQ, qk, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(BATCH, s.H, SEQ, qk, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(BATCH, s.H, SEQ, s.VD, device="cuda", dtype=torch.bfloat16)
    steps += experts + [sdpa_step("SDPA", q, k, v)]
    # a calibration's last layer: kv_a (the latent and the RoPE part), the router
    return floor_of(steps, layers, m, {"kv_a": 1.0, "router": 1.0}) + (bool(experts),)


IMPLS = ("eager", "batched_mm", "grouped_mm")
# how a configuration runs the body: as it is, torch.compile of the whole body,
# each decoder layer compiled in place (undone before the next); an
# implementation's modes run in the order --transformers names them
MODES = ("", "compile", "rcompile")
MODE_NAMES = {"": "", "compile": " + torch.compile",
              "rcompile": " + torch.compile of each layer"}


def configurations(spec):
    """[(experts implementation, mode)] that --transformers names."""
    if spec == "all":
        return [(impl, m) for impl in IMPLS for m in MODES[:2]]
    if spec == "none":
        return []
    out = []
    for name in spec.split(","):
        impl, _, mode = name.strip().partition("+")
        if impl not in IMPLS or mode not in MODES:
            sys.exit(f"--transformers {spec}: '{name}' is none of {', '.join(IMPLS)} "
                     "(each alone, +compile or +rcompile); or say all or none")
        out.append((impl, mode))
    return out


def transformers_runs(model_dir, s, layers, batches, wanted):
    """{name: (tokens/s, peak bytes, [[latent, rope] absmax per layer])} of
    the configurations wanted ([(experts implementation, mode)])."""
    results = {}
    for impl in (i for i in IMPLS if any(w[0] == i for w in wanted)):
        try:
            t = time.time()
            model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.bfloat16, attn_implementation="sdpa",
                experts_implementation=impl, device_map="cuda").eval()
            print(f"transformers {impl}: loaded in {time.time() - t:.1f} s", flush=True)
        except Exception as e:  # an implementation this transformers lacks
            print(f"transformers {transformers.__version__}: experts_implementation={impl}: "
                  f"{type(e).__name__}: {str(e)[:300]}")
            continue
        body = model.model
        stats = torch.zeros(layers, 2, device="cuda")

        def hook(i):
            def fn(module, args, kwargs):
                entry = mla_entry(module, kwargs, torch).abs()
                part = torch.stack([entry[..., :s.L].amax(), entry[..., s.L:].amax()]).float()
                stats[i].copy_(torch.maximum(stats[i], part))
            return fn

        for i, layer in enumerate(body.layers):
            layer.self_attn.register_forward_pre_hook(hook(i), with_kwargs=True)
        for mode in (m for i, m in wanted if i == impl):  # in the order asked
            name = f"{impl}{MODE_NAMES[mode]}"
            if Deadline.skips(name):
                continue
            t = timed_run(body, mode, name, batches, stats.zero_)
            if t is None:
                continue
            results[name] = (len(batches) * BATCH * SEQ / t, torch.cuda.max_memory_allocated(),
                             stats.tolist())
            print(f"transformers {name}: {results[name][0]:.0f} tokens/s", flush=True)
        del model, body
        torch.cuda.empty_cache()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="deepseek-v2-lite")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--transformers", default="all",
                    help="all, none, or IMPL[+compile|+rcompile],... (IMPL: eager, "
                         "batched_mm, grouped_mm)")
    ap.add_argument("--kvcal-repeats", type=int, default=1,
                    help="run kvcal this many times and keep the median run")
    ap.add_argument("--kvcal-profile", action="store_true",
                    help="run kvcal once more with --profile and print where its time went")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which transformers' configurations stop (0: none)")
    ap.add_argument("--fp8", choices=["block"],
                    help="the checkpoint in FP8 as DeepSeek-V3 is released (kvcal alone)")
    ap.add_argument("--floor-only", action="store_true",
                    help="print the library floor of --layers layers and stop: no "
                    "checkpoint, no kvcal, no transformers")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    if a.fp8 and a.shape != "deepseek-v2-lite":
        sys.exit("--fp8 block: only with --shape deepseek-v2-lite")
    if a.fp8 and a.transformers != "none":
        sys.exit("--fp8 block: give --transformers none (transformers is not timed on FP8 "
                 "weights here)")
    if a.kvcal_repeats < 1:
        sys.exit(f"--kvcal-repeats {a.kvcal_repeats}: give 1 or more")
    Deadline.start(a.deadline)
    wanted = configurations(a.transformers)
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    if a.floor_only:
        held = library_floor(s, a.layers)[1]
        print(f"{s.title}, {a.layers} layers: library floor sustained {held:.0f} tokens/s")
        return
    t = time.time()
    model_dir = make_model(a.workdir, a.shape, a.layers, fp8=bool(a.fp8))
    flush_to_disk("the checkpoint")
    print(f"checkpoint of {a.layers} layers ready in {time.time() - t:.1f} s", flush=True)
    samples = a.batches * BATCH
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, s.VOCAB, (samples, SEQ), generator=g)
    data = os.path.join(a.workdir, f"tokens-{samples}.jsonl")
    with open(data, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    t = time.time()
    res, kv_peak, kv_rates = run_kvcal_median(a.kvcal, model_dir, data, samples, a.out,
                                              a.kvcal_repeats)
    print(f"kvcal's {a.kvcal_repeats} run(s): {time.time() - t:.1f} s end to end", flush=True)
    kvcal_tps = res["tokens_per_second"]
    ph = res.get("phases", {})
    print(f"kvcal calibrate --device cuda: {kvcal_tps:.0f} tokens/s (forward "
          f"{ph.get('forward_seconds', float('nan')):.3f} s, of which progress saves "
          f"{ph.get('progress_save_seconds', float('nan')):.3f} s; load and warm-up "
          f"{ph.get('load_seconds', float('nan')):.3f} s)", flush=True)
    load_rate = print_load(res, model_dir)
    if a.kvcal_profile:
        pdir = os.path.join(a.out, "profile")
        os.makedirs(pdir, exist_ok=True)
        print_profile(run_kvcal(a.kvcal, model_dir, data, samples, pdir, extra=["--profile"])[0])
    batches = [ids[b * BATCH:(b + 1) * BATCH].cuda() for b in range(a.batches)]
    # the floor first: its figures stay should a compilation run past the caller's time
    floor = library_floor(s, a.layers)
    hf = transformers_runs(model_dir, s, a.layers, batches, wanted)
    Deadline.stop()

    worst = {}
    ref_name = "eager" if "eager" in hf else next(iter(hf), None)
    if ref_name:
        ref = hf[ref_name][2]
        for j, part in enumerate(("latent", "rope")):
            worst[part] = max(abs(layer[part + "_absmax"] - r[j]) / r[j]
                              for layer, r in zip(res["layers"], ref) if r[j] > 0)
    fastest = max(hf.items(), key=lambda kv: kv[1][0]) if hf else None
    table = [("kvcal calibrate --device cuda", kvcal_tps, kv_peak)] + \
        [(f"transformers {name}", v[0], v[1]) for name, v in hf.items()] + \
        [("library floor (grouped GEMM + SDPA), bursts" if floor[4] else
          "library floor (no grouped GEMM: dense GEMMs + SDPA only), bursts", floor[0], 0),
         ("library floor, the same calls sustained", floor[1], 0)]
    print(f"\n{a.layers} layers of {s.title}, {samples} x {SEQ} tokens, "
          f"batches of {BATCH} x {SEQ}")
    print(f"{'':48s} {'tokens/s':>10s} {'per layer':>11s} {'peak GiB':>9s}")
    for name, tps, peak in table:
        print(f"{name:48s} {tps:10.0f} {tps * a.layers:11.0f} "
              f"{peak / 2 ** 30 if peak else float('nan'):9.2f}")
    if fastest:
        print(f"kvcal / fastest transformers ({fastest[0]}): "
              f"{against_target(kvcal_tps / fastest[1][0])}; "
              f"kvcal / floor: {kvcal_tps / floor[0]:.2f} in bursts, "
              f"{kvcal_tps / floor[1]:.2f} sustained; {TARGET}x transformers / the sustained "
              f"floor: {TARGET * fastest[1][0] / floor[1]:.2f}")
    else:
        print(f"kvcal / floor: {kvcal_tps / floor[0]:.2f} in bursts, "
              f"{kvcal_tps / floor[1]:.2f} sustained (no transformers run)")
    for part, w in worst.items():
        print(f"MLA {part} absmax, kvcal vs transformers bf16 ({ref_name}): "
              f"worst rel. diff {w:.2e}")
    with open(os.path.join(a.out, "mla_bench.json"), "w") as f:
        json.dump({"shape": a.shape, "layers": a.layers, "samples": samples, "seq_len": SEQ,
                   "batch": BATCH,
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "device": torch.cuda.get_device_name(),
                   "kvcal": {"tokens_per_second": kvcal_tps, "peak_bytes": kv_peak,
                             "runs_tokens_per_second": kv_rates,
                             "checkpoint_bytes_per_forward_second": load_rate,
                             "phases": res.get("phases"),
                             "latent_rope_absmax": [[l.get("latent_absmax"),
                                                     l.get("rope_absmax")]
                                                    for l in res["layers"]]},
                   "transformers_runs": {k: {"tokens_per_second": v[0], "peak_bytes": v[1],
                                             "latent_rope_absmax": v[2]}
                                         for k, v in hf.items()},
                   "floor": {"tokens_per_second": floor[0],
                             "sustained_tokens_per_second": floor[1], "layer_ms": floor[2],
                             "sustained_layer_ms": floor[3], "grouped_gemm": floor[4]},
                   "absmax_reference": ref_name, "absmax_worst_rel_diff": worst},
                  f, indent=1)
    print(f"wrote {os.path.join(a.out, 'mla_bench.json')}")


if __name__ == "__main__":
    main()
