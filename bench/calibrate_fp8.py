#!/usr/bin/env python3
"""FP8 checkpoints on a GPU: kvcal calibrate --device cuda on a Llama-3-8B-
shaped model with per-tensor FP8 weights and dynamic per-token activations
(the fp8 method's "dynamic" scheme), against kvcal on the same model in bf16
and against a torch model that serves the FP8 checkpoint as vLLM does
(tests/fp8_reference.py: torch._scaled_mm with row-wise scales, vLLM's
per-token quantization and requantized q/k/v and gate/up shards), eager and
under torch.compile, on the same tokens (8 samples x 2048 a batch); then a
Llama-3-70B-width model (hidden 8192, intermediate 28672, 64 heads, 8 kv
heads) of as many layers as the disk holds, FP8 weights resident.

usage: calibrate_fp8.py KVCAL WORKDIR [--layers N] [--batches B] [--rounds R]
                        [--big-layers N] [--big-batches B] [--skip-torch]
                        [--kvcal-profile] [--kvcal-variant NAME=KVCAL ...]
                        [--floor-only]

Prints per round and as medians: tokens/s of kvcal FP8 (fp32 accumulation,
the default), kvcal FP8 with fast accumulation (KVCAL_FP8_GEMM=fast, as
vLLM's sm_90 kernels), kvcal bf16, torch FP8 eager and compiled, kvcal
FP8's ratios (targets: >= 1.6x kvcal bf16, >= 1.5x the faster torch FP8),
kvcal FP8's model TFLOP/s against the FP8 ceiling measured in the same run
(a 16384 x 8192 x 8192 cuBLASLt FP8 GEMM through torch._scaled_mm,
per-tensor scales), the FP8 library floor (the layer's four GEMMs as
torch._scaled_mm with row-wise scales + the fastest SDPA, in bursts and
the same calls back to back at the GPU's power cap), the median (at most
2%: the exit status) and worst relative difference of kvcal's per-head
K/V absmax from the torch FP8 model's and from kvcal's fast accumulation,
peak device memory; for the 70B-width model: layers, weights on the device, tokens/s, tokens/s x
layers (the rate of one layer) and peak device memory. The checkpoints are
written under WORKDIR and removed as the run goes (the 8B ones before the
70B one is written). --big-layers 0 derives the layer count from the free
disk (less 8 GiB); -1 skips the 70B run; --layers 0 skips the 8B-shaped
comparison (the 70B-width run alone). --skip-torch leaves out the torch
FP8 model (its build, the compile, its rows and the comparison with it):
with --rounds 1 --big-layers -1, kvcal FP8 against kvcal bf16 in about a
minute and a half. --kvcal-profile runs kvcal FP8 and bf16 once more each
with `--profile` and prints where their device time went (not in their
tokens/s). --kvcal-variant NAME=KVCAL (repeatable) times another kvcal
binary's FP8 run in every round beside the others (a build before a
change: same checkpoint, same tokens, the rounds interleaved).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import calibrate_llama8b as b8  # noqa: E402
import fp8_reference as ref  # noqa: E402
from calibrate_moe import print_profile  # noqa: E402

SCHEME = "fp8_tensor_dynamic"
SEQ, BATCH = b8.SEQ, b8.BATCH
MEDIAN_LIMIT = 0.02  # per-head K/V absmax, kvcal FP8 vs torch FP8
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def save_fp8(model, out, qc):
    """The FP8 checkpoint of a bf16 transformers model: every projection
    quantized per tensor (absmax / 448), the rest bf16, one shard a few
    layers, an index; returns the FP8 tensors (on the GPU) by name."""
    import safetensors.torch as st
    os.makedirs(out, exist_ok=True)
    fp8, shard, index, n = {}, {}, {}, 0

    def flush():
        nonlocal shard, n
        if shard:
            name = "model-%05d.safetensors" % n
            st.save_file({k: v.contiguous().cpu() for k, v in shard.items()},
                         os.path.join(out, name), metadata={"format": "pt"})
            index.update({k: name for k in shard})
            shard, n = {}, n + 1

    for name, p in model.state_dict().items():
        if name.split(".")[-2] in PROJ:
            wq, s = ref.quantize_weight(p, "tensor")
            module = name[:-len(".weight")]
            shard[name], shard[module + ".weight_scale"] = wq, s
            fp8[name], fp8[module + ".weight_scale"] = wq, s
        else:
            shard[name] = p
        if sum(v.numel() * v.element_size() for v in shard.values()) > 2 << 30:
            flush()
    flush()
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    cfg = model.config.to_dict()
    cfg["quantization_config"] = qc
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return fp8


def fp8_ceiling():
    """TFLOP/s of a 16384 x 8192 x 8192 FP8 GEMM (cuBLASLt through
    torch._scaled_mm, per-tensor scales, bf16 out)."""
    m, k, n = 16384, 8192, 8192
    a = torch.randn(m, k, device="cuda").to(ref.FP8)
    b = torch.randn(n, k, device="cuda").to(ref.FP8).t()
    one = torch.ones((), device="cuda")
    ms = b8.bench_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                              out_dtype=torch.bfloat16), reps=20)
    return 2.0 * m * k * n / (ms * 1e-3) / 1e12


def fp8_floor(layers):
    """The library floor of `layers` Llama-3-8B layers served in FP8 at 8 x
    2048 tokens (b8.floor_of: bursts and sustained): the four GEMMs as
    torch._scaled_mm on e4m3 operands with row-wise scales (per token, per
    output channel; fp32 accumulation, bf16 out) and the fastest SDPA; no
    quantization pass. Returns (tokens/s in bursts, sustained)."""
    m, d, ff, qkv = BATCH * SEQ, 4096, 14336, (32 + 16) * 128

    def gemm(name, k, n):
        a = torch.randn(m, k, device="cuda").to(ref.FP8)
        b = torch.randn(n, k, device="cuda").to(ref.FP8).t()
        sa = torch.rand(m, 1, device="cuda") + 0.5
        sb = torch.rand(1, n, device="cuda") + 0.5

        def fn():
            torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return (name, b8.bench_ms(fn), fn)
    steps = [gemm(name, k, n) for name, k, n in
             (("qkv", d, qkv), ("o", d, d), ("gate/up", d, 2 * ff), ("down", ff, d))]
    q = torch.randn(BATCH, 32, SEQ, 128, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(BATCH, 8, SEQ, 128, device="cuda", dtype=torch.bfloat16).repeat_interleave(4, dim=1)
    steps.append(b8.sdpa_step("SDPA", q, kv, kv))
    return b8.floor_of(steps, layers, m, {"qkv": 16 / 48})[:2]


def write_big(out, layers, qc):
    """A Llama-3-70B-width FP8 checkpoint of `layers` layers: random bf16
    weights made on the GPU, quantized per tensor, written a layer a shard."""
    import safetensors.torch as st
    from transformers import LlamaConfig
    cfg = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=layers,
                      num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    os.makedirs(out, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = {"self_attn.q_proj": (8192, 8192), "self_attn.k_proj": (1024, 8192),
              "self_attn.v_proj": (1024, 8192), "self_attn.o_proj": (8192, 8192),
              "mlp.gate_proj": (28672, 8192), "mlp.up_proj": (28672, 8192),
              "mlp.down_proj": (8192, 28672)}
    index = {}

    def rnd(*shape):
        return (0.02 * torch.randn(*shape, device="cuda", generator=g)).to(torch.bfloat16)

    def save(t, name):
        st.save_file({k: v.contiguous().cpu() for k, v in t.items()}, os.path.join(out, name),
                     metadata={"format": "pt"})
        index.update({k: name for k in t})

    save({"model.embed_tokens.weight": rnd(128256, 8192), "lm_head.weight": rnd(128256, 8192),
          "model.norm.weight": torch.ones(8192, dtype=torch.bfloat16, device="cuda")},
         "model-head.safetensors")
    for l in range(layers):
        t = {}
        for mod, shape in shapes.items():
            wq, s = ref.quantize_weight(rnd(*shape), "tensor")
            t["model.layers.%d.%s.weight" % (l, mod)] = wq
            t["model.layers.%d.%s.weight_scale" % (l, mod)] = s
        for norm in ("input_layernorm", "post_attention_layernorm"):
            t["model.layers.%d.%s.weight" % (l, norm)] = torch.ones(8192, dtype=torch.bfloat16,
                                                                    device="cuda")
        save(t, "model-%05d.safetensors" % l)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    c = cfg.to_dict()
    c["architectures"] = ["LlamaForCausalLM"]
    c["torch_dtype"] = "bfloat16"
    c["quantization_config"] = qc
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def llama8b_run(a, qc, data):
    """The Llama-3-8B-shaped comparison; the median relative difference of
    kvcal FP8's per-head K/V absmax from the torch FP8 model's (0 without
    torch)."""
    bf16_dir, fp8_dir = (os.path.join(a.workdir, d) for d in ("bf16", "fp8"))
    t0 = time.time()
    cfg = b8.llama8b_config(a.layers)
    model = b8.llama8b_model(cfg)
    model.save_pretrained(bf16_dir)
    fp8 = save_fp8(model, fp8_dir, qc)
    b8.flush_to_disk("the bf16 and FP8 checkpoints")
    samples = a.batches * BATCH
    ids = write_tokens(data, samples)
    print("Llama-3-8B shapes, %d layers: bf16 and FP8 checkpoints and %d x %d tokens ready in "
          "%.0f s" % (a.layers, samples, SEQ, time.time() - t0), flush=True)
    body = None
    if a.skip_torch:
        del model
    else:
        body = model.model
        ref.serve_layers(model, fp8, SCHEME, "llama", mode="gpu")  # the torch FP8 reference
    del fp8
    torch.cuda.empty_cache()
    hkv, hd = cfg.num_key_value_heads, cfg.head_dim
    stats = {(i, kind): torch.zeros(hkv, device="cuda") for i in range(a.layers)
             for kind in ("k", "v")}
    pos = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(BATCH, SEQ)

    def hook(layer, kind, cos, sin):
        buf = stats[(layer, kind)]

        def fn(mod, inp, out):
            x = out.view(BATCH, SEQ, hkv, hd).transpose(1, 2)
            if kind == "k":
                x = x * cos + b8.rotate_half(x) * sin
            buf.copy_(torch.maximum(buf, x.abs().amax(dim=(0, 2, 3)).float()))
        return fn

    if body is not None:
        cos, sin = body.rotary_emb(torch.empty(1, device="cuda", dtype=torch.bfloat16), pos)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for i, layer in enumerate(body.layers):
            layer.self_attn.k_proj.register_forward_hook(hook(i, "k", cos, sin))
            layer.self_attn.v_proj.register_forward_hook(hook(i, "v", cos, sin))
    batches = [ids[j * BATCH:(j + 1) * BATCH].cuda() for j in range(a.batches)]

    def timed(fn, warmup):
        with torch.inference_mode():
            for x in batches[:warmup]:
                fn(input_ids=x, use_cache=False)
            torch.cuda.synchronize()
            for buf in stats.values():
                buf.zero_()
            torch.cuda.reset_peak_memory_stats()
            t = time.time()
            for x in batches:
                fn(input_ids=x, use_cache=False)
            torch.cuda.synchronize()
            return samples * SEQ / (time.time() - t)

    def absmax_diffs(res, want):
        """Sorted relative differences of kvcal's per-head K/V absmax from want's."""
        return sorted(abs(got - w) / w for li, layer in enumerate(res["layers"])
                      for kind in ("k", "v")
                      for got, w in zip(layer[kind + "_absmax"], want[(li, kind)]))

    rounds, peak = [], {}
    compiled = None
    fast_env = dict(os.environ, KVCAL_FP8_GEMM="fast")
    for r in range(a.rounds):
        res, peak["fp8"] = b8.run_kvcal(a.kvcal, fp8_dir, data, samples,
                                        os.path.join(a.workdir, "fp8_scales.json"))
        fast, peak["fast"] = b8.run_kvcal(a.kvcal, fp8_dir, data, samples,
                                          os.path.join(a.workdir, "fast_scales.json"), fast_env)
        bf, peak["bf16"] = b8.run_kvcal(a.kvcal, bf16_dir, data, samples,
                                        os.path.join(a.workdir, "bf16_scales.json"))
        other = [b8.run_kvcal(path, fp8_dir, data, samples,
                              os.path.join(a.workdir, "variant_scales.json"))[0]
                 ["tokens_per_second"] for _, path in a.variants]
        eager = comp = float("nan")
        if body is not None:
            eager = timed(body, 1)
            torch_absmax = {k: v.tolist() for k, v in stats.items()}
            if compiled is None:
                t1 = time.time()
                compiled = torch.compile(body)
                timed(compiled, 2)
                print("torch.compile of the FP8 model: %.0f s" % (time.time() - t1),
                      flush=True)
            comp = timed(compiled, 0)
        rounds.append((res["tokens_per_second"], fast["tokens_per_second"],
                       bf["tokens_per_second"], eager, comp, *other))
        print("round %d: kvcal FP8 %.0f, kvcal FP8 fast accumulation %.0f, kvcal bf16 %.0f, "
              "torch FP8 eager %.0f, compiled %.0f tokens/s" % ((r + 1,) + rounds[-1][:5])
              + "".join(", %s FP8 %.0f" % (name, tps)
                        for (name, _), tps in zip(a.variants, other)), flush=True)
    if a.kvcal_profile:
        for name, model_dir in (("FP8", fp8_dir), ("bf16", bf16_dir)):
            print("kvcal %s, --profile:" % name, flush=True)
            print_profile(b8.run_kvcal(a.kvcal, model_dir, data, samples,
                                       os.path.join(a.workdir, "profile_scales.json"),
                                       extra=["--profile"])[0])
    median = 0.0
    if body is not None:
        diffs = absmax_diffs(res, torch_absmax)
        median = diffs[len(diffs) // 2]
    fast_diffs = absmax_diffs(fast, {(li, kind): layer[kind + "_absmax"]
                                     for li, layer in enumerate(res["layers"])
                                     for kind in ("k", "v")})
    del body, compiled
    if not a.skip_torch:
        del model
    torch.cuda.empty_cache()
    ceiling = fp8_ceiling()
    floor, floor_held = fp8_floor(a.layers)
    k8, kf, kb, te, tc, *kv = (statistics.median(x) for x in zip(*rounds))
    flops = a.layers * (2 * 4096 * (6144 + 4096 + 3 * 14336) + 4 * 4096 * (SEQ + 1) / 2)
    print("\nLlama-3-8B shapes, %d layers, %d batches of %d x %d tokens, medians of %d rounds"
          % (a.layers, a.batches, BATCH, SEQ, a.rounds))
    print("%-50s %10s %9s" % ("", "tokens/s", "FP8 x"))
    rows = [("kvcal calibrate --device cuda, FP8 weights", k8),
            ("kvcal, FP8 weights, fast accumulation", kf),
            ("kvcal calibrate --device cuda, bf16 weights", kb)]
    rows += [("kvcal %s, FP8 weights" % name, tps) for (name, _), tps in zip(a.variants, kv)]
    if not a.skip_torch:
        rows += [("torch FP8 (_scaled_mm) eager + hooks", te),
                 ("torch FP8 (_scaled_mm) compiled + hooks", tc)]
    rows += [("library floor (_scaled_mm row-wise + SDPA), bursts", floor),
             ("library floor, the same calls sustained", floor_held)]
    for name, tps in rows:
        print("%-50s %10.0f %9.3f" % (name, tps, k8 / tps))
    for name, tps in (("kvcal FP8", k8), ("kvcal FP8 fast accumulation", kf)):
        print("%s: %.0f TFLOP/s (model FLOPs, causal attention halved) = %.1f%% of the FP8 "
              "GEMM ceiling measured here, %.0f TFLOP/s" % (name, tps * flops / 1e12,
                                                           100 * tps * flops / 1e12 / ceiling,
                                                           ceiling))
    print("targets: kvcal FP8 >= 1.6x kvcal bf16 (%.3f; fast accumulation %.3f)"
          % (k8 / kb, kf / kb) + ("" if a.skip_torch else
                                  ", >= 1.5x the faster torch FP8 (%.3f; fast accumulation "
                                  "%.3f; 1.5x torch is %.2f of the sustained floor)"
                                  % (k8 / max(te, tc), kf / max(te, tc),
                                     1.5 * max(te, tc) / floor_held)))
    if not a.skip_torch:
        print("per-head K/V absmax, kvcal FP8 vs torch FP8 eager: median rel. diff %.2e (limit "
              "%g), worst %.2e (bf16 roundings flip e4m3 decisions; "
              "tests/fp8_vs_torch_gpu.py bounds it)" % (median, MEDIAN_LIMIT, diffs[-1]))
    print("per-head K/V absmax, kvcal FP8 fast accumulation vs fp32 accumulation: median rel. "
          "diff %.2e, worst %.2e" % (fast_diffs[len(fast_diffs) // 2], fast_diffs[-1]))
    print("peak device memory: kvcal FP8 %.1f GiB (fast accumulation %.1f), kvcal bf16 %.1f GiB"
          % (peak["fp8"] / 2**30, peak["fast"] / 2**30, peak["bf16"] / 2**30), flush=True)
    print("FP8 weights kvcal ran as dequantized bf16 GEMMs: %s"
          % (res.get("fp8_fallback") or "none"), flush=True)
    shutil.rmtree(bf16_dir)
    shutil.rmtree(fp8_dir)
    return median


def write_tokens(data, samples):
    """samples x SEQ random token ids of Llama 3's vocabulary into data."""
    vocab = b8.llama8b_config(1).vocab_size
    ids = torch.randint(0, vocab, (samples, SEQ), generator=torch.Generator().manual_seed(1))
    with open(data, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--big-layers", type=int, default=0)
    ap.add_argument("--big-batches", type=int, default=2)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--kvcal-profile", action="store_true",
                    help="run kvcal FP8 and bf16 once more with --profile and print where "
                    "their time went")
    ap.add_argument("--kvcal-variant", action="append", default=[], metavar="NAME=KVCAL",
                    help="another kvcal binary whose FP8 run is timed in every round")
    ap.add_argument("--floor-only", action="store_true",
                    help="print the FP8 library floor of --layers layers and stop")
    a = ap.parse_args()
    if a.floor_only:
        held = fp8_floor(a.layers)[1]
        print("Llama-3-8B FP8, %d layers: library floor sustained %.0f tokens/s"
              % (a.layers, held))
        return 0
    a.variants = []
    for v in a.kvcal_variant:
        name, _, path = v.partition("=")
        if not name or not path:
            ap.error("--kvcal-variant %s: want NAME=KVCAL" % v)
        a.variants.append((name, path))
    os.makedirs(a.workdir, exist_ok=True)
    qc = ref.quant_config(SCHEME)
    data = os.path.join(a.workdir, "tokens.jsonl")
    if a.layers > 0:
        median = llama8b_run(a, qc, data)
    else:
        write_tokens(data, a.big_batches * BATCH)
        median = 0.0

    if a.big_layers < 0:
        return 0 if median <= MEDIAN_LIMIT else 1
    per_layer = 8192 * (8192 + 2048 + 8192) + 3 * 8192 * 28672
    layers = a.big_layers
    if layers == 0:
        free = shutil.disk_usage(a.workdir).free - (8 << 30) - 2 * 128256 * 8192 * 2
        layers = max(1, min(80, int(free // per_layer)))
    big = os.path.join(a.workdir, "big")
    t0 = time.time()
    write_big(big, layers, qc)
    b8.flush_to_disk("the 70B-width checkpoint")
    torch.cuda.empty_cache()
    big_samples = a.big_batches * BATCH
    print("\nLlama-3-70B width, %d layers (%.1f GiB of FP8 weights): checkpoint written in "
          "%.0f s" % (layers, layers * per_layer / 2**30, time.time() - t0), flush=True)
    res, peak_big = b8.run_kvcal(a.kvcal, big, data, big_samples,
                                 os.path.join(a.workdir, "big_scales.json"))
    tps = res["tokens_per_second"]
    print("kvcal calibrate --device cuda, %d batches of %d x %d tokens: %.0f tokens/s, "
          "%.0f tokens/s x layers (one layer's rate); peak device memory %.1f GiB; layers "
          "resident: %s" % (a.big_batches, BATCH, SEQ, tps, tps * layers, peak_big / 2**30,
                            res.get("layers_resident", "?")), flush=True)
    ph = res.get("phases", {})
    print("phases: load %.1f s, forward %.1f s (forward overlaps the load: %.1f GiB / forward s"
          " = %.1f GiB/s); FP8 weights run as dequantized bf16 GEMMs: %s"
          % (ph.get("load_seconds", 0), ph.get("forward_seconds", 0), layers * per_layer / 2**30,
             layers * per_layer / 2**30 / max(ph.get("forward_seconds", 0), 1e-9),
             res.get("fp8_fallback") or "none"), flush=True)
    w = res.get("weights_load", {})
    if w.get("bytes"):
        print("kvcal's loader: %.2f GB, every layer on its way %.2f s after the start; "
              "waiting for host threads' fills %.2f s, for copies %.2f s"
              % (w["bytes"] / 1e9, w["all_layers_seconds"], w["fill_seconds"],
                 w["copy_wait_seconds"]), flush=True)
    shutil.rmtree(big)
    return 0 if median <= MEDIAN_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
