#!/usr/bin/env python3
"""FP8 fixtures for tests/test_runner.c and tests/test_cuda_backend.c: tiny
Llama, Qwen3, mixture-of-experts and DeepSeek (MLA) checkpoints of every
FP8 scheme kvcal reads
(tests/fp8_reference.py: compressed-tensors per-tensor with static input
scales and an ignored down_proj, per-channel with dynamic per-token
activations and bf16 scales, blocks with activation groups; the fp8
method's blocks (weight_scale_inv) and per-tensor weights with dynamic
activations; ModelOpt FP8 in hf_quant_config.json and FP8_PB_WO), each with
the K/V absmax, raw rows and logits of the served model: vLLM's FP8 linear
semantics (requantized fused shards, the activations quantized as its
kernels do) with the dequantized operands multiplied in float64
(transformers' modules around them, CPU). Saved as the golden fixtures are
(tests/make_golden.py): tests/fixtures/golden/<name>/ and <name>.json.

An activation within float32's rounding error of an e4m3 tie quantizes to
either neighbour, by a whole e4m3 step (6-12%), in kvcal's fp32 runner and
in a float64 reference alike, and moves the outputs of its token by 1e-3
and more: the samples are drawn until the reference run in float32 is
within 1e-5 of the float64 one on every per-head absmax and raw K/V row the
test compares, and the logits compared are those of a token whose float32
logits are within 1e-5 too.

bf16 activations, as the CUDA runner keeps them, take other e4m3 decisions
than float64 ones here and there, and from the second layer on they move
the per-head absmax by a few percent: each fixture records as bf16_spread,
per layer, the worst relative distance from its float64 absmax of six bf16
servings (the FP8 GEMM's exact products and the dequantized bf16 GEMM, each
as is and with the embedding rows rounded again after a perturbation below
bf16's epsilon), the spread tests/test_cuda_backend.c allows beside its
bound.

Also writes fp8_qwen3_moe_experts, a mixture of experts whose experts are
FP8 per tensor with dynamic activations, two DeepSeek-V3 models whose
q_a_proj and kv_a_proj_with_mqa vLLM cannot fuse, and a Qwen3-Next whose
in_proj_ba is FP8 in blocks its rows do not fill
(fp8_qwen3_next_ba_blocks) and a Llama 4 whose experts are FP8 in their
stacked tensors (fp8_llama4_stacked_experts), which kvcal refuses (no
reference values).

Usage: python3 tests/make_fp8_checkpoints.py [NAME...]   (from the
repository root; needs torch, transformers, safetensors, numpy)
"""
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_reference as ref  # noqa: E402
import make_golden as golden  # noqa: E402

# the fixtures drawn until no activation the reference quantizes lies
# within 3e-7 (relative) of an e4m3 tie it is not exactly on: kvcal's fp32
# activations, computed in another order than the float64 reference's
# rounded to float32, may round such a one the other way (Llama 4's did at
# 1.5e-7, in its shared expert's input); the fixtures made before this
# check keep their draws
TIE_CHECKED = {"fp8_llama4_ct_channel_token", "fp8_granite_ct_channel_token"}

# (hidden, intermediate, heads, kv heads, vocab); head_dim 64: Q 128, KV 64
SMALL = (128, 256, 2, 1, golden.VOCAB)
FIXTURES = [
    ("fp8_llama_ct_tensor_static", "llama", "ct_tensor_static", SMALL),
    ("fp8_qwen3_ct_channel_token", "qwen3", "ct_channel_token", SMALL),
    ("fp8_qwen3_ct_block_group", "qwen3", "ct_block_group", SMALL),
    ("fp8_qwen3_fp8_block", "qwen3", "fp8_block", SMALL),
    # three layers: the CUDA backend's streaming test holds two at a time
    ("fp8_llama_fp8_tensor_dynamic", "llama", "fp8_tensor_dynamic", SMALL + (3,)),
    ("fp8_llama_modelopt_tensor_static", "llama", "modelopt_tensor_static", SMALL),
    # ModelOpt's blocks are 128 x 128: two kv heads (KV 128)
    ("fp8_llama_modelopt_pb_wo", "llama", "modelopt_pb_wo", (128, 256, 2, 2, golden.VOCAB)),
    # mixtures of experts (4 experts of intermediate 64, top 2): Qwen3-FP8's
    # blocks, llm-compressor's FP8_DYNAMIC, and per-tensor static weights
    # of a Qwen2-MoE with its shared expert FP8 too
    ("fp8_qwen3_moe_fp8_block", "qwen3_moe", "fp8_block", (128, 64, 2, 1, golden.VOCAB)),
    ("fp8_qwen3_moe_ct_channel_token", "qwen3_moe", "ct_channel_token",
     (128, 64, 2, 1, golden.VOCAB)),
    ("fp8_qwen2_moe_ct_tensor_static", "qwen2_moe", "ct_tensor_static_moe",
     (128, 64, 2, 1, golden.VOCAB)),
    # GLM-4.5's layers (a dense first layer, sigmoid routing, a shared
    # expert) in compressed-tensors blocks; Mixtral's w1 / w3 / w2 experts
    # in ModelOpt's per-tensor FP8
    ("fp8_glm4_moe_ct_block_group", "glm4_moe", "ct_block_group", (128, 64, 2, 1, golden.VOCAB)),
    ("fp8_mixtral_modelopt_tensor_static", "mixtral", "modelopt_tensor_static",
     (128, 64, 2, 1, golden.VOCAB)),
    # multi-head latent attention: DeepSeek-V3 / R1 / Kimi K2's released
    # format (the fp8 method's blocks, every projection, kv_b_proj and the
    # experts among them); per-tensor static V3 weights, whose q_a_proj and
    # kv_a_proj_with_mqa vLLM serves fused at their larger scale; a V2-Lite
    # style model per channel with per-token activations
    ("fp8_deepseek_v3_fp8_block", "deepseek_v3", "fp8_block", (128, 64, 2, 2, golden.VOCAB)),
    ("fp8_deepseek_v3_ct_tensor_static", "deepseek_v3", "ct_tensor_static_moe",
     (128, 64, 2, 2, golden.VOCAB)),
    ("fp8_deepseek_v2_ct_channel_token", "deepseek_v2", "ct_channel_token",
     (128, 64, 2, 2, golden.VOCAB)),
    # GLM-4.7-Flash's layers (V3's) in the fp8 method's blocks; DeepSeek-V3.2
    # so too, its indexer (bf16 here) keeping 64 keys, every key of a sample
    ("fp8_glm4_moe_lite_fp8_block", "glm4_moe_lite", "fp8_block",
     (128, 64, 2, 2, golden.VOCAB)),
    ("fp8_deepseek_v32_fp8_block", "deepseek_v32", "fp8_block",
     (128, 64, 2, 2, golden.VOCAB)),
]
# MiniMax-M2's released format (the fp8 method's blocks; gate and
# e_score_correction_bias in modules_to_not_convert), on the cpu runner
# alone (tests/test_runner.c: the CUDA runner refuses the model)
CPU_FIXTURES = [
    ("fp8_minimax_m2_fp8_block", "minimax_m2", "fp8_block", (128, 64, 2, 1, golden.VOCAB)),
    # IBM Granite's dense layers (its four multipliers) per channel with
    # per-token activations, as llm-compressor's FP8_DYNAMIC writes them
    ("fp8_granite_ct_channel_token", "granite", "ct_channel_token", SMALL),
    # Llama 4 as llm-compressor's FP8_DYNAMIC writes it (Scout's and
    # Maverick's FP8 releases): an MLP per expert, per-channel weights,
    # per-token activations; the experts' inputs times their router scores
    # before they are quantized (vLLM's apply_router_weight_on_input)
    ("fp8_llama4_ct_channel_token", "llama4", "ct_channel_token",
     (128, 64, 2, 1, golden.VOCAB, 4)),
]
# hybrid models (tests/test_runner.c alone: the CUDA runner refuses their FP8
# checkpoints), four layers, a delta-net's before each attention layer:
# Qwen3-Next-FP8's and Qwen3.5-FP8's format (the fp8 method's blocks, the b
# / a projections, conv1d and the routers in bf16), llm-compressor's
# FP8_DYNAMIC of Qwen3.5-MoE (per channel, per token), per-tensor weights
# with static input scales (the attention's gated q_proj, k_proj and v_proj
# served at their largest scale, Qwen3.5's in_proj_qkv and in_proj_z so too)
HYBRID_FIXTURES = [
    ("fp8_qwen3_next_fp8_block", "qwen3_next", "fp8_block", (128, 64, 2, 1, golden.VOCAB, 4)),
    ("fp8_qwen3_5_moe_ct_channel_token", "qwen3_5_moe", "ct_channel_token",
     (128, 64, 2, 1, golden.VOCAB, 4)),
    ("fp8_qwen3_5_moe_ct_tensor_static", "qwen3_5_moe", "ct_tensor_static_moe",
     (128, 64, 2, 1, golden.VOCAB, 4)),
]


def reference_run(model, samples):
    """K and V of every layer (per sample: layers, tokens, kv heads, head_dim)
    and the logits of sample 0."""
    seen = golden.capture_kv(model, torch)
    ks, vs, logits0 = [], [], None
    with torch.no_grad():
        for s in samples:
            seen.clear()
            out = model(torch.tensor([s]), use_cache=False)
            ks.append(np.stack([k.astype(np.float64) for k, _ in seen]))
            vs.append(np.stack([v.astype(np.float64) for _, v in seen]))
            if logits0 is None:
                logits0 = out.logits[0].double().numpy()
    return ks, vs, logits0


def absmax(per_sample):
    """Per layer, per kv head absmax of K or V of a reference run."""
    return np.max([np.abs(x).max(axis=(1, 3)) for x in per_sample], axis=0)


def conditioning(ref64, ref32):
    """How far the float32 run of the reference is from its float64 run:
    the worst relative difference of the per-head absmax, and per token of
    sample 0 the largest difference of its logits (an e4m3 rounding
    decision within float32's error of a tie moves them)."""
    ks64, vs64, l64 = ref64
    ks32, vs32, l32 = ref32
    worst = max(ref.worst_rel(absmax(ks32), absmax(ks64)),
                ref.worst_rel(absmax(vs32), absmax(vs64)))
    return worst, np.abs(l64 - l32).max(axis=1)


def bf16_spread(d, arch, scheme, dims, samples, ref64):
    """Per layer, the worst relative distance of the per-head K/V absmax of
    bf16 servings of checkpoint d (fp8_reference: modes "exact" and "cpu",
    each as is and twice perturbed) from the float64 reference run ref64."""
    want_k, want_v = absmax(ref64[0]), absmax(ref64[1])
    gen = torch.Generator().manual_seed(0)
    worst = np.zeros(len(want_k))
    for mode in ("exact", "cpu"):
        for draw in range(3):
            model = ref.served_model(d, arch, scheme, dims, dtype=torch.bfloat16, mode=mode)
            if draw:
                ref.perturb_embeddings(model, gen)
            k, v = ref.kv_absmax(model, samples)
            for got, want in ((k, want_k), (v, want_v)):
                worst = np.maximum(worst, (np.abs(got - want) / want).max(axis=1))
    return worst.tolist()


def make_fixture(name, arch, scheme, dims):
    """The checkpoint, and the reference of the first token samples whose
    float32 run is within 1e-5 of the float64 one on every per-head absmax
    (no e4m3 rounding decision sits within float32's error of a tie there:
    kvcal's fp32 CPU runner takes the reference's decisions), the logits of
    the last token of sample 0 whose float32 logits are within 1e-5 too."""
    d = os.path.join(golden.OUT, name)
    for attempt in range(20):
        shutil.rmtree(d, ignore_errors=True)
        samples = golden.token_samples(dims[4], golden.LENGTHS,
                                       sum(map(ord, name)) + 1000 * attempt)
        ref.make_checkpoint(d, arch, scheme, dims, samples)
        if arch == "deepseek_v32":  # as the released file: no layer_types
            golden.without_layer_types(os.path.join(d, "config.json"))
        model = ref.served_model(d, arch, scheme, dims, dtype=torch.float64)
        ref.TIE_DISTANCES = []
        ref64 = reference_run(model, samples)
        tie = min(ref.TIE_DISTANCES)
        ref.TIE_DISTANCES = None
        ref32 = reference_run(ref.served_model(d, arch, scheme, dims, dtype=torch.float32),
                              samples)
        worst, per_token = conditioning(ref64, ref32)
        raw64 = golden.summarize(*ref64[:2], samples, ref64[2])["raw"]
        raw32 = golden.summarize(*ref32[:2], samples, ref32[2])["raw"]
        for r64, r32 in zip(raw64, raw32):  # the raw rows the test compares
            for key in ("k", "v"):
                a, b = np.array(r64[key]), np.array(r32[key])
                worst = max(worst, float(np.abs(a - b).max() / np.abs(a).max()))
        stable = [t for t in range(len(samples[0])) if per_token[t] < 1e-5]
        if worst < 1e-5 and stable and (tie > 3e-7 or name not in TIE_CHECKED):
            break
    else:
        sys.exit("%s: no samples within 20 draws whose reference is well-conditioned" % name)
    ks, vs, logits0 = ref64
    fx = {"name": name, "model": d, "scheme": scheme, "architecture": arch,
          "oracle": "vLLM's FP8 linear semantics (tests/fp8_reference.py), dequantized "
                    "operands in float64; transformers %s, torch %s, CPU; samples draw %d "
                    "(float32 run within %.1e of it)" % (
                        __import__("transformers").__version__, torch.__version__,
                        attempt, worst)}
    fx.update(golden.summarize(ks, vs, samples, logits0))
    kv_layers = golden.kv_layer_indices(model)
    if len(kv_layers) < len(model.model.layers):  # a hybrid model
        fx["kv_layers"] = kv_layers
        for r in fx["raw"]:
            r["layer"] = kv_layers[r["layer"]]
    tok = stable[-1]
    fx["logits"] = {"sample": 0, "token": tok, "values": logits0[tok, :16].tolist()}
    fx["bf16_spread"] = bf16_spread(d, arch, scheme, dims, samples, ref64)
    golden.write_fixture(name, fx)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print("  checkpoint %s: %d bytes; samples draw %d, float32 within %.1e, nearest e4m3 "
          "tie %.1e, logits of token %d, bf16 spread %.1e" % (
              d, size, attempt, worst, tie, tok, max(fx["bf16_spread"])))


def make_refused(name, cfg, scheme, kind, quantized, block=None, ignore=None):
    """A tiny mixture of experts (config cfg, random weights) that kvcal
    refuses: the weights `quantized` picks FP8 (weights of `kind`, in
    blocks of `block`, under `scheme`'s config, whose ignore list `ignore`
    replaces), the rest bf16."""
    import json
    import safetensors.torch as st
    import transformers as tf
    d = os.path.join(golden.OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(d, safe_serialization=True)
    path = os.path.join(d, "model.safetensors")
    t = st.load_file(path)
    for tn in list(t):
        if quantized(tn):
            wq, s = ref.quantize_weight(t[tn].float(), kind, block)
            t[tn] = wq
            t[tn[:-len(".weight")] + (".weight_scale_inv" if block else ".weight_scale")] = s
        else:
            t[tn] = t[tn].to(torch.bfloat16)
    st.save_file(t, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = ref.quant_config(scheme)
    if ignore is not None:
        c["quantization_config"]["ignore"] = ignore
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    for extra in os.listdir(d):
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))
    print("wrote", d)


def make_moe_refusal():
    """fp8_qwen3_moe_experts: a Qwen3-MoE whose experts' weights are FP8 per
    tensor with dynamic activations (the fp8 method)."""
    import transformers as tf
    small = dict(hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                 num_experts_per_tok=1, num_attention_heads=2, num_key_value_heads=1,
                 vocab_size=golden.VOCAB, num_hidden_layers=1, max_position_embeddings=64)
    make_refused("fp8_qwen3_moe_experts",
                 tf.Qwen3MoeConfig(num_experts=2, head_dim=16, **small),
                 "fp8_tensor_dynamic", "tensor",
                 lambda tn: tn.endswith("_proj.weight"))  # attention and experts


def make_llama4_stacked_refusal():
    """fp8_llama4_stacked_experts: a Llama 4 whose experts are FP8 in the two
    stacked tensors of each layer, one scale per tensor, as ModelOpt writes
    them (its attention and shared expert bf16), which kvcal does not read."""
    import json
    import safetensors.torch as st
    import transformers as tf
    d = os.path.join(golden.OUT, "fp8_llama4_stacked_experts")
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(0)
    cfg = tf.Llama4TextConfig(hidden_size=32, intermediate_size=16, intermediate_size_mlp=32,
                              num_local_experts=2, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=16, vocab_size=golden.VOCAB,
                              num_hidden_layers=1, max_position_embeddings=64)
    tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(
        d, safe_serialization=True)
    path = os.path.join(d, "model.safetensors")
    t = {k: v.to(torch.bfloat16) for k, v in st.load_file(path).items()}
    for tn in [k for k in t if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        wq, s = ref.quantize_weight(t[tn].float(), "tensor")
        t[tn], t[tn + "_weight_scale"] = wq, s.reshape(())
    st.save_file(t, path, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8",
                                "ignore": ["lm_head", "*self_attn*", "*shared_expert*",
                                           "*router*"]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    for extra in os.listdir(d):
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))
    print("wrote", d)


def make_deepseek_refusals():
    """Two DeepSeek-V3 checkpoints vLLM refuses to fuse q_a_proj and
    kv_a_proj_with_mqa of: fp8_deepseek_v3_half_fused (q_a_proj FP8 per
    channel, kv_a_proj_with_mqa left bf16 by the ignore list: "some but not
    all shards" quantized) and fp8_deepseek_v3_q_lora_96 (blocks of 64 and
    a q_lora_rank of 96, not whole blocks of rows)."""
    import transformers as tf

    def v3(q_lora):
        return tf.DeepseekV3Config(
            hidden_size=64, intermediate_size=64, moe_intermediate_size=64,
            num_attention_heads=2, num_key_value_heads=2, q_lora_rank=q_lora, kv_lora_rank=64,
            qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=2,
            num_experts_per_tok=1, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
            topk_group=1, vocab_size=golden.VOCAB, num_hidden_layers=1,
            max_position_embeddings=64)

    make_refused("fp8_deepseek_v3_half_fused", v3(64), "ct_channel_token", "channel",
                 lambda tn: tn.endswith("_proj.weight") and "kv_a_proj" not in tn,
                 ignore=["lm_head", "re:.*kv_a_proj_with_mqa$"])
    make_refused("fp8_deepseek_v3_q_lora_96", v3(96), "fp8_block", "block",
                 lambda tn: tn.endswith(("_proj.weight", "_mqa.weight")), block=(64, 64))


def make_hybrid_refusal():
    """fp8_qwen3_next_ba_blocks: a Qwen3-Next whose in_proj_ba, too, is FP8
    in the fp8 method's 64 x 64 blocks: its rows grouped by key head in runs
    of 2 (a key head's value heads' b, then their a), not whole blocks (vLLM
    refuses to serve it so: validate_fp8_block_shape)."""
    import transformers as tf
    cfg = tf.Qwen3NextConfig(
        hidden_size=64, intermediate_size=64, moe_intermediate_size=64,
        shared_expert_intermediate_size=64, num_experts=2, num_experts_per_tok=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=64,
        linear_value_head_dim=64, layer_types=["linear_attention", "full_attention"],
        vocab_size=golden.VOCAB, num_hidden_layers=2, max_position_embeddings=64)
    make_refused("fp8_qwen3_next_ba_blocks", cfg, "fp8_block", "block",
                 lambda tn: tn.endswith(("_proj.weight", "_qkvz.weight", "_ba.weight")),
                 block=(64, 64))


def main():
    wanted = set(sys.argv[1:])
    torch.set_num_threads(2)
    for name, arch, scheme, dims in FIXTURES + HYBRID_FIXTURES + CPU_FIXTURES:
        if not wanted or name in wanted:
            make_fixture(name, arch, scheme, dims)
    if not wanted or "fp8_qwen3_moe_experts" in wanted:
        make_moe_refusal()
    if not wanted or wanted & {"fp8_deepseek_v3_half_fused", "fp8_deepseek_v3_q_lora_96"}:
        make_deepseek_refusals()
    if not wanted or "fp8_qwen3_next_ba_blocks" in wanted:
        make_hybrid_refusal()
    if not wanted or "fp8_llama4_stacked_experts" in wanted:
        make_llama4_stacked_refusal()


if __name__ == "__main__":
    main()
