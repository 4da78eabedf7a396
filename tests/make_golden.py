#!/usr/bin/env python3
"""Golden K/V fixtures for tests/test_runner.c.

Two independent oracles of what an engine caches (K after k_proj, k_norm and
RoPE; V after v_proj):

1. Hugging Face transformers (torch, CPU, fp32): tiny random-weight models of
   every supported architecture, built from transformers' own config classes
   with odd sizes (head_dim 48 and 80, and the common 64, 3 kv heads, GQA /
   MQA / MHA, llama3, linear and yarn rope scaling, tied and untied
   embeddings, bf16 / fp16 / fp32 saved weights, config.json in the
   transformers 5 layout and in the older one). The yarn model's original context (16) is shorter than the samples,
   and its attention factor (0.1 ln 4 + 1) scales the cached K.
   Mixture-of-experts models (Qwen3-MoE, Qwen2-MoE with its sigmoid-gated
   shared expert, Mixtral with a sliding window of 16, shorter than the
   samples; Qwen3-MoE and Qwen2-MoE with use_sliding_window, each as
   transformers applies it) have several experts, top-k > 1 and both norm_topk_prob
   settings; their reference runs in float64 (transformers' routers take
   the softmax in float32 whatever the model's dtype, as they do in
   serving). Their checkpoints hold one tensor per expert, the layout of
   the released checkpoints (save_pretrained's original format). Phi-3 with
   fused q/k/v and gate/up, partial rotary, longrope (long factors) and a
   sliding window; Gemma 3 with its local and global layers; Gemma 2 with
   soft caps small enough to bend the scores; GLM-4.5 with a dense first
   layer and sigmoid routing (its router bias, a buffer, randomized too);
   DeepSeek-V2 (no query LoRA, grouped softmax routing) and V3 (query LoRA,
   grouped sigmoid routing, rope_interleave) with multi-head latent
   attention and yarn's mscale, and GLM-4.7-Flash (V3's layers in its own
   layer plan): all in float64 too. For the MLA models K and
   V are the one entry an engine caches per token (the normalized latent,
   then the rotated RoPE part: tests/hf_mla.py), and the fixture adds its
   latent's and RoPE part's absmax per layer and their bf16_spread (how far
   bf16 servings of the checkpoint lie from those float64 values). gpt-oss
   (attention sinks, a window shorter than the samples, biases, the router's
   bias, the clamped SwiGLU past its limit, yarn) in float64, one of them with its experts
   stored as MXFP4 blocks and scales (random weights quantized by the OCP MX
   rules, checked against transformers' own decoder; the reference runs on
   transformers' dequantizing MXFP4 loader). The Qwen-MoE sliding-window and
   gpt-oss shapes were chosen where transformers in bf16 stays within 1% of
   the float64 values (the CUDA runner's tests allow 2%).
   Each checkpoint is saved under tests/fixtures/golden/<name>/ and a fixed
   token batch is run through the model loaded back from disk; hooks on each
   attention module recompute K exactly as the module does (k_proj -> view ->
   k_norm -> apply_rotary_pos_emb with the module's own cos/sin) and V.
2. stories260K (llama2.c format, the bundled model): a float64 numpy
   re-implementation of llama2.c's run.c forward pass, one token at a time
   with its KV cache.

Stored per fixture: the token samples, per-layer per-kv-head absmax of K and
V over all samples, a few raw K/V rows and a few logits.

Usage: python3 tests/make_golden.py [NAME...]   (from the repository root;
needs torch, transformers, safetensors, numpy; NAMEs limit it to those
fixtures)
       python3 tests/make_golden.py --spread NAME...   (bf16_spread written
into the existing fixtures, their checkpoints as they are)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

from hf_decoder import cached_kv, decoder_layers, from_config, model_class, text_model
from hf_mla import is_mla, mla_entry

OUT = os.path.join("tests", "fixtures", "golden")
VOCAB = 128
LENGTHS = [37, 23]


def token_samples(vocab, lengths, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=n).tolist() for n in lengths]


def write_fixture(name, fixture):
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print("wrote", path)


def summarize(ks, vs, samples, logits):
    """ks, vs: per sample, arrays (layers, tokens, kv_heads, head_dim)."""
    k_abs = np.max([np.abs(k).max(axis=(1, 3)) for k in ks], axis=0)
    v_abs = np.max([np.abs(v).max(axis=(1, 3)) for v in vs], axis=0)
    raw = []
    for s, layer, tok in [(0, 0, 5), (0, len(ks[0]) - 1, len(samples[0]) - 1),
                          (1, len(ks[0]) - 1, 0), (1, 0, len(samples[1]) - 1)]:
        raw.append({"sample": s, "layer": layer, "token": tok,
                    "k": ks[s][layer, tok].reshape(-1).astype(float).tolist(),
                    "v": vs[s][layer, tok].reshape(-1).astype(float).tolist()})
    tok = len(samples[0]) - 1
    return {
        "samples": samples,
        "k_absmax": k_abs.astype(float).tolist(),
        "v_absmax": v_abs.astype(float).tolist(),
        "raw": raw,
        "logits": {"sample": 0, "token": tok,
                   "values": logits[tok, :16].astype(float).tolist()},
    }


# --- stories260K: numpy run.c ------------------------------------------------

def llama2c_reference(path, samples):
    with open(path, "rb") as f:
        buf = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("7i", buf[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    w = np.frombuffer(buf, dtype=np.float32, offset=28).astype(np.float64)
    hs = dim // n_heads
    kv_dim = n_kv * hs
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = w[off:off + n].reshape(shape)
        off += n
        return a

    emb = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    take(seq_len * hs // 2)  # freq_cis_real, freq_cis_imag (unused)
    take(seq_len * hs // 2)
    wcls = emb if shared else take(vocab, dim)

    def rmsnorm(x, g):
        return g * (x / np.sqrt(np.mean(x * x) + 1e-5))

    def rope(vec, pos, n):
        out = vec.copy()
        for i in range(0, n, 2):
            freq = 1.0 / 10000.0 ** ((i % hs) / hs)
            c, s = np.cos(pos * freq), np.sin(pos * freq)
            out[i] = vec[i] * c - vec[i + 1] * s
            out[i + 1] = vec[i] * s + vec[i + 1] * c
        return out

    ks, vs, last_logits = [], [], None
    for sample in samples:
        T = len(sample)
        kc = np.zeros((n_layers, T, kv_dim))
        vc = np.zeros((n_layers, T, kv_dim))
        logits_all = np.zeros((T, vocab))
        for pos, tok in enumerate(sample):
            x = emb[tok].copy()
            for l in range(n_layers):
                xb = rmsnorm(x, rms_att[l])
                q = rope(wq[l] @ xb, pos, dim)
                kc[l, pos] = rope(wk[l] @ xb, pos, kv_dim)
                vc[l, pos] = wv[l] @ xb
                att = np.zeros(dim)
                for h in range(n_heads):
                    g = h // (n_heads // n_kv)
                    qh = q[h * hs:(h + 1) * hs]
                    sc = kc[l, :pos + 1, g * hs:(g + 1) * hs] @ qh / np.sqrt(hs)
                    p = np.exp(sc - sc.max())
                    p /= p.sum()
                    att[h * hs:(h + 1) * hs] = p @ vc[l, :pos + 1, g * hs:(g + 1) * hs]
                x = x + wo[l] @ att
                xb = rmsnorm(x, rms_ffn[l])
                h1 = w1[l] @ xb
                x = x + w2[l] @ (h1 / (1.0 + np.exp(-h1)) * (w3[l] @ xb))
            logits_all[pos] = wcls @ rmsnorm(x, rms_final)
        ks.append(kc.reshape(n_layers, T, n_kv, hs))
        vs.append(vc.reshape(n_layers, T, n_kv, hs))
        if last_logits is None:
            last_logits = logits_all
    return ks, vs, last_logits


def make_stories260k():
    path = os.path.join("models", "stories260K", "stories260K.bin")
    samples = token_samples(512, [41, 17], 260)
    samples[0][0] = 1  # BOS, as llama2.c starts a text
    ks, vs, logits = llama2c_reference(path, samples)
    fx = {"name": "stories260K", "model": path, "oracle": "numpy float64 run.c"}
    fx.update(summarize(ks, vs, samples, logits))
    write_fixture("stories260K", fx)


# --- Hugging Face models -----------------------------------------------------

def hf_configs():
    import transformers as tf

    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5)
    llama3_scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    return [
        ("llama3_gqa_hd48_bf16", tf.LlamaConfig(
            hidden_size=48, intermediate_size=64, num_attention_heads=6,
            num_key_value_heads=3, head_dim=48, tie_word_embeddings=False,
            rope_theta=500000.0, rope_scaling=llama3_scaling,
            **common), "bfloat16", "new"),
        ("llama_mha_linear_tied_fp32", tf.LlamaConfig(
            hidden_size=64, intermediate_size=64, num_attention_heads=4,
            num_key_value_heads=4, tie_word_embeddings=True, rope_theta=10000.0,
            rope_scaling={"rope_type": "linear", "factor": 2.0}, **common),
            "float32", "old"),
        ("mistral_mqa_fp16", tf.MistralConfig(
            hidden_size=64, intermediate_size=80, num_attention_heads=4,
            num_key_value_heads=1, tie_word_embeddings=False, sliding_window=4096,
            **common), "float16", "new"),
        ("qwen2_gqa_bias_bf16", tf.Qwen2Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0,
            **common), "bfloat16", "old"),
        ("qwen3_gqa_hd80_qknorm_bf16", tf.Qwen3Config(
            hidden_size=32, intermediate_size=48, num_attention_heads=4,
            num_key_value_heads=2, head_dim=80, tie_word_embeddings=True,
            **common), "bfloat16", "new"),
        # head_dim 128, the served models' (Llama-3, Qwen3, Mistral): cuDNN's
        # attention and the vectorised RoPE at their head size
        ("qwen3_hd128_qknorm_bf16", tf.Qwen3Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=2,
            num_key_value_heads=1, head_dim=128, tie_word_embeddings=True,
            **common), "bfloat16", "new"),
        # intermediate_size a multiple of 128: the CUDA runner's fused
        # gate/up + SwiGLU kernel (KVCAL_MLP=fused) takes it, 2 weight blocks
        ("llama_gqa_mlp256_bf16", tf.LlamaConfig(
            hidden_size=64, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0,
            **common), "bfloat16", "new"),
        # head_dim 64 (SmolLM2's and most small models'), llama3 scaling
        ("llama3_gqa_hd64_bf16", tf.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, tie_word_embeddings=False,
            rope_theta=500000.0, rope_scaling=llama3_scaling,
            **common), "bfloat16", "new"),
        ("qwen2_yarn_bf16", tf.Qwen2Config(
            hidden_size=64, intermediate_size=64, num_attention_heads=2,
            num_key_value_heads=1, tie_word_embeddings=True,
            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 16},
            **dict(common, max_position_embeddings=64)), "bfloat16", "old"),
    ] + moe_configs(tf, common) + gpt_oss_configs(tf, common) + [
        # Phi-3.5 style: q/k/v and gate/up fused in the checkpoint, a quarter
        # of each head rotating (partial_rotary_factor 0.5 of head_dim 16),
        # longrope whose original context (20) both samples exceed, so that
        # transformers takes the long factors, as vLLM does at its default
        # max_model_len; a sliding window of 16
        ("phi3_longrope_partial_swa16_bf16", tf.Phi3Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=False, pad_token_id=0,
            sliding_window=16, original_max_position_embeddings=20,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5,
                             "short_factor": [1.0, 1.3, 2.1, 3.7],
                             "long_factor": [1.2, 2.5, 5.0, 11.0]},
            **common), "bfloat16", "new", "float64"),
        # Gemma 3 text: (1 + w) norms before and after attention and MLP, q/k
        # norm, query_pre_attn_scalar 24 (not head_dim 32), two sliding
        # layers of window 8 (local RoPE base 10000) around a global one
        # (base 1e6, linear x2), GELU-tanh MLP, embedding x sqrt(64), tied
        ("gemma3_text_swa8_local_global_bf16", tf.Gemma3TextConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24,
            sliding_window=8, layer_types=["sliding_attention", "full_attention",
                                           "sliding_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default",
                                                   "rope_theta": 10000.0}},
            tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            **dict(common, num_hidden_layers=3)), "bfloat16", "new", "float64"),
        # Gemma 2: alternating sliding (window 8) and global layers, scores
        # soft-capped at 1.5 and logits at 2.0 (small, so that the caps bend
        # these tiny models' values), (1 + w) sandwich norms, no q/k norm
        ("gemma2_softcap_swa8_bf16", tf.Gemma2Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=12,
            sliding_window=8, attn_logit_softcapping=1.5, final_logit_softcapping=2.0,
            tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            **dict(common, num_hidden_layers=3)), "bfloat16", "new", "float64"),
        # GLM-4.5 style: a leading dense layer before two MoE ones, sigmoid
        # routing with e_score_correction_bias, top-3 of 8 renormalized and
        # scaled by 2.5, an ungated shared expert, partial rotary (0.5),
        # q/k/v biases and q/k norm
        ("glm4_moe_dense1_sigmoid_e8_top3_bf16", tf.Glm4MoeConfig(
            hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
            n_group=1, topk_group=1, attention_bias=True, use_qk_norm=True,
            partial_rotary_factor=0.5, tie_word_embeddings=False,
            **dict(common, num_hidden_layers=3)), "bfloat16", "new", "float64"),
        # Seed-OSS: Llama's layers with q/k/v biases (attention_bias) and
        # o_proj's (attention_out_bias) apart
        ("seed_oss_qkv_o_bias_bf16", tf.SeedOssConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, attention_bias=True,
            attention_out_bias=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0},
            **common), "bfloat16", "new", "float64"),
        # SmolLM3: Llama's layers, layer 2 of 4 without RoPE
        # (no_rope_layer_interval 3), tied embeddings
        ("smollm3_nope3_tied_bf16", tf.SmolLM3Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, no_rope_layer_interval=3, tie_word_embeddings=True,
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 2000000.0},
            **dict(common, num_hidden_layers=4)), "bfloat16", "new", "float64"),
        # OLMo 2: post-norm layers, the q/k norms over the whole projection
        ("olmo2_postnorm_qknorm_all_bf16", tf.Olmo2Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=False, pad_token_id=0,
            bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            **common), "bfloat16", "new", "float64"),
        # Olmo 3: OLMo 2's layers, layers 0-2 sliding (window 8) with the
        # default RoPE, layer 3 full with yarn x4 of 16 positions (the legacy
        # rope_scaling, which stretches the full-attention layers alone)
        ("olmo3_swa8_yarn_full_bf16", tf.Olmo3Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, sliding_window=8, tie_word_embeddings=False,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, rope_theta=500000.0,
            rope_scaling={"rope_type": "yarn", "factor": 4.0,
                          "original_max_position_embeddings": 16},
            **dict(common, num_hidden_layers=4)), "bfloat16", "new", "float64"),
        # Hunyuan-A13B's layers: q/k norms after RoPE, the NTK-alpha RoPE
        # (dynamic with alpha 1000), softmax top-2 of 4 renormalized with an
        # ungated shared MLP in every layer; and the dense model's (the same
        # attention and RoPE, tied embeddings)
        ("hunyuan_moe_qknorm_after_rope_alpha_bf16", tf.HunYuanMoEV1Config(
            hidden_size=64, intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_experts=4, moe_topk=2,
            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0,
                             "rope_theta": 10000.0},
            **common), "bfloat16", "new", "float64"),
        ("hunyuan_dense_qknorm_after_rope_bf16", tf.HunYuanDenseV1Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0,
                             "rope_theta": 10000.0},
            **common), "bfloat16", "new", "float64"),
        # IBM Granite 3.x: Llama's layers with the four multipliers (the
        # embedding x12, q k^T x 1/16 instead of 1/4, each block's output
        # x0.22 before its residual add, the logits / 8), q/k/v/o biases;
        # and GraniteMoe (the experts in two stacked tensors, softmax over
        # the top-2 logits of 4), tied embeddings
        ("granite_multipliers_bias_bf16", tf.GraniteConfig(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, attention_bias=True, embedding_multiplier=12.0,
            attention_multiplier=0.0625, residual_multiplier=0.22, logits_scaling=8.0,
            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0},
            **common), "bfloat16", "new", "float64"),
        ("granitemoe_multipliers_e4_top2_bf16", tf.GraniteMoeConfig(
            hidden_size=64, intermediate_size=32, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
            embedding_multiplier=12.0, attention_multiplier=0.0625,
            residual_multiplier=0.22, logits_scaling=6.0, tie_word_embeddings=True,
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **common), "bfloat16", "new", "float64"),
        # EXAONE 4: post-norm layers (the attention and the MLP on the stream
        # itself, their outputs normalized), per-head q/k norm; layers 0 and
        # 2 slide (window 8) with RoPE, 1 and 3 attend to every key without
        # RoPE (sliding_window_pattern 2)
        ("exaone4_postnorm_swa8_nope_bf16", tf.Exaone4Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, sliding_window=8, sliding_window_pattern=2,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **dict(common, num_hidden_layers=4)), "bfloat16", "new", "float64"),
        # GLM-4-0414: q/k/v biases, RoPE on interleaved pairs of half of each
        # head, the attention's and the MLP's outputs normalized before their
        # residual adds, gate and up in one tensor
        ("glm4_sandwich_partial_pairs_bf16", tf.Glm4Config(
            hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, attention_bias=True, pad_token_id=0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5},
            tie_word_embeddings=False, **common), "bfloat16", "new", "float64"),
    ] + mla_configs(tf, common) + wrapper_configs(tf, common) + hybrid_configs(tf, common)


def wrapper_configs(tf, common):
    """Multimodal models run on text by their language model: Gemma 3 and
    Mistral 3 saved as released (language_model.model.layers, the head tied
    by the wrapper's own field), Qwen3-VL as transformers 4.52 and later save
    (model.language_model.layers, lm_head apart) with its 3-axis RoPE
    interleaved; tiny vision towers beside them, which kvcal never reads."""
    text = {k: v for k, v in common.items() if k != "vocab_size"}
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2)
    # the Qwen models' shared pieces: their special tokens at the top of the
    # vocabulary, Qwen3-VL's vision tower and RoPE sections, Qwen2's text
    qwen_tokens = dict(image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
                       vision_start_token_id=VOCAB - 3, tie_word_embeddings=False)
    qwen3_vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                        out_hidden_size=64, deepstack_visual_indexes=[0])
    qwen3_rope = {"rope_type": "default", "mrope_section": [2, 3, 3],
                  "mrope_interleaved": True}
    qwen2_text = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=VOCAB,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                       "mrope_section": [2, 3, 3]}, **text)
    return [
        ("gemma3_mm_swa8_local_global_bf16", tf.Gemma3Config(
            text_config=dict(
                hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24,
                sliding_window=8, layer_types=["sliding_attention", "full_attention",
                                               "sliding_attention"],
                rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                    "rope_theta": 1000000.0},
                                 "sliding_attention": {"rope_type": "default",
                                                       "rope_theta": 10000.0}},
                pad_token_id=0, bos_token_id=1, eos_token_id=2, vocab_size=VOCAB,
                **dict(text, num_hidden_layers=3)),
            vision_config=dict(vision, image_size=28, patch_size=14),
            mm_tokens_per_image=4, image_token_index=VOCAB - 1, boi_token_index=VOCAB - 2,
            eoi_token_index=VOCAB - 3, tie_word_embeddings=True),
         "bfloat16", "new", "float64"),
        ("mistral3_mm_gqa_bf16", tf.Mistral3Config(
            text_config=dict(
                model_type="mistral", hidden_size=64, intermediate_size=96,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                rope_theta=1000000000.0, vocab_size=VOCAB, tie_word_embeddings=False,
                **text),
            vision_config=dict(vision, model_type="pixtral", image_size=28,
                               patch_size=14, head_dim=16),
            image_token_index=VOCAB - 1, tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        # Ministral 3 (its released wrapper): yarn with mscale and
        # mscale_all_dim, and llama_4_scaling_beta, whose scaling of the
        # queries starts past original_max_position_embeddings (64, above the
        # samples: transformers' queries as they are)
        ("mistral3_ministral3_yarn_bf16", tf.Mistral3Config(
            text_config=dict(
                model_type="ministral3", hidden_size=64, intermediate_size=96,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                vocab_size=VOCAB, tie_word_embeddings=False,
                rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0,
                                 "factor": 4.0, "original_max_position_embeddings": 64,
                                 "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                 "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1},
                **text),
            vision_config=dict(vision, model_type="pixtral", image_size=28,
                               patch_size=14, head_dim=16),
            image_token_index=VOCAB - 1, tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        # Llama 4 as released (language_model.model.layers): no q/k norm,
        # no temperature tuning (Maverick's), top-1 of 4 in every layer, layer
        # 1 without RoPE, the others in chunks of 16; Scout's llama3 RoPE
        # (low_freq_factor = high_freq_factor: no smoothed band)
        ("llama4_mm_top1_chunk16_bf16", tf.Llama4Config(
            text_config=dict(
                hidden_size=64, intermediate_size=32, intermediate_size_mlp=48,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=1,
                no_rope_layer_interval=2, attention_chunk_size=16, use_qk_norm=False,
                attn_temperature_tuning=False, vocab_size=VOCAB,
                tie_word_embeddings=False,
                rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                 "factor": 16.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8},
                **dict(text, num_hidden_layers=3)),
            vision_config=dict(vision, image_size=28, patch_size=14, vision_output_dim=64,
                               projector_input_dim=64, projector_output_dim=64,
                               pixel_shuffle_ratio=0.5),
            image_token_index=VOCAB - 1, boi_token_index=VOCAB - 2,
            eoi_token_index=VOCAB - 3, tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        # GLM-4.1V / GLM-4.6V-Flash: GLM-4's dense layers, RoPE in three
        # sections (equal on text) on interleaved pairs of half of each head
        ("glm4v_mm_mrope_pairs_bf16", tf.Glm4vConfig(
            text_config=dict(
                hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, attention_bias=True, vocab_size=VOCAB,
                pad_token_id=0, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]},
                **text),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                               out_hidden_size=64, image_size=28, patch_size=14),
            image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
            image_start_token_id=VOCAB - 3, image_end_token_id=VOCAB - 4,
            video_start_token_id=VOCAB - 5, video_end_token_id=VOCAB - 6,
            tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        # GLM-4.5V / 4.6V: GLM-4.5's layers (a dense first layer, sigmoid
        # top-3 of 8 with the correction bias, a shared expert, q/k/v
        # biases by the class default, half of each head rotated) with RoPE
        # in three sections, equal on text; saved as transformers 5.25 saves
        # it (model.language_model.layers)
        ("glm4v_moe_mm_mrope_e8_top3_bf16", tf.Glm4vMoeConfig(
            text_config=dict(
                hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                num_attention_heads=4, num_key_value_heads=2, n_routed_experts=8,
                num_experts_per_tok=3, n_shared_experts=1, routed_scaling_factor=2.5,
                norm_topk_prob=True, first_k_dense_replace=1, n_group=1, topk_group=1,
                vocab_size=VOCAB, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1]},
                **dict(text, num_hidden_layers=3)),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                               out_hidden_size=64, image_size=28, patch_size=14),
            image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
            image_start_token_id=VOCAB - 3, image_end_token_id=VOCAB - 4,
            video_start_token_id=VOCAB - 5, video_end_token_id=VOCAB - 6,
            tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        ("qwen3_vl_mrope_qknorm_bf16", tf.Qwen3VLConfig(
            text_config=dict(
                hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=VOCAB,
                rope_parameters=dict(qwen3_rope, rope_theta=5000000.0), **text),
            vision_config=qwen3_vision, **qwen_tokens),
         "bfloat16", "new", "float64"),
        # Qwen3-VL-MoE: Qwen3-MoE's layers (8 experts of 48, top-3 always
        # renormalized; layer 0 dense by mlp_only_layers) with each layer's
        # experts in two tensors, written as released (to_released_experts)
        ("qwen3_vl_moe_stacked_e8_top3_bf16", tf.Qwen3VLMoeConfig(
            text_config=dict(
                hidden_size=64, intermediate_size=96, moe_intermediate_size=48,
                num_experts=8, num_experts_per_tok=3, mlp_only_layers=[0],
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                vocab_size=VOCAB, rope_parameters=dict(qwen3_rope, rope_theta=5000000.0),
                **dict(text, num_hidden_layers=3)),
            vision_config=qwen3_vision, **qwen_tokens),
         "bfloat16", "new", "float64"),
        # Qwen2.5-VL and Qwen2-VL as released: their configs flat (the
        # language model's fields beside vision_config, model_type qwen2_5_vl
        # / qwen2_vl, rope_scaling {"type": "mrope"}) and their layers under
        # model. (to_flat_config); Qwen2's q/k/v biases
        ("qwen2_5_vl_flat_mrope_bias_bf16", tf.Qwen2_5_VLConfig(
            text_config=qwen2_text,
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                               out_hidden_size=64, fullatt_block_indexes=[0]),
            **qwen_tokens),
         "bfloat16", "old", "float64"),
        ("qwen2_vl_flat_mrope_bias_bf16", tf.Qwen2VLConfig(
            text_config=qwen2_text,
            vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2),
            **qwen_tokens),
         "bfloat16", "old", "float64"),
    ]


def hybrid_configs(tf, common):
    """Qwen3-Next and Qwen3.5: gated delta-net (linear attention) layers,
    which cache nothing, among gated attention layers with q/k norm and RoPE
    on a quarter of each head; delta-nets of 2 key heads serving 4 value
    heads (value head != key head size), a linear layer last in two of them;
    float64 (transformers runs the delta rule in fp32 whatever the model's
    dtype). The fixtures' kv_layers name the layers that cache."""
    text = {k: v for k, v in common.items() if k != "num_hidden_layers"}
    lin = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
               linear_value_head_dim=24, linear_conv_kernel_dim=4,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32,
               rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                "partial_rotary_factor": 0.25},
               tie_word_embeddings=False, num_hidden_layers=4)
    L, F = "linear_attention", "full_attention"
    moe = dict(moe_intermediate_size=32, shared_expert_intermediate_size=40,
               num_experts=8, num_experts_per_tok=3)
    return [
        # Qwen3.5 dense: in_proj_qkv / z / b / a apart
        ("qwen3_5_text_gdn_hybrid_bf16", tf.Qwen3_5TextConfig(
            hidden_size=48, intermediate_size=64, layer_types=[L, F, L, F],
            architectures=["Qwen3_5ForCausalLM"], **dict(lin, **text)),
         "bfloat16", "new", "float64"),
        # Qwen3-Next: in_proj_qkvz and in_proj_ba fused, grouped by key head;
        # experts (top-3 of 8 renormalized) beside the gated shared expert,
        # layer 2 dense by mlp_only_layers, a linear layer last
        ("qwen3_next_gdn_moe_e8_top3_bf16", tf.Qwen3NextConfig(
            hidden_size=48, intermediate_size=64, norm_topk_prob=True,
            mlp_only_layers=[2], layer_types=[L, F, L, L],
            architectures=["Qwen3NextForCausalLM"], **dict(lin, **moe, **text)),
         "bfloat16", "new", "float64"),
        # the dense Qwen3.5's language model in its multimodal wrapper, as
        # released (model.language_model.layers), a linear layer first
        ("qwen3_5_mm_gdn_hybrid_bf16", tf.Qwen3_5Config(
            text_config=dict(hidden_size=48, intermediate_size=64, layer_types=[L, F, F, L],
                             **dict(lin, **{k: v for k, v in text.items()
                                            if k != "vocab_size"}),
                             vocab_size=VOCAB),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                               out_hidden_size=48),
            image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
            vision_start_token_id=VOCAB - 3, tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
        # Qwen3.5-MoE's language model in its multimodal wrapper, as released
        # (model.language_model.layers), a linear layer last
        ("qwen3_5_moe_mm_gdn_e8_top3_bf16", tf.Qwen3_5MoeConfig(
            text_config=dict(hidden_size=48, layer_types=[F, L, F, L],
                             **dict(lin, **moe, **{k: v for k, v in text.items()
                                                   if k != "vocab_size"}),
                             vocab_size=VOCAB),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                               out_hidden_size=48),
            image_token_id=VOCAB - 1, video_token_id=VOCAB - 2,
            vision_start_token_id=VOCAB - 3, tie_word_embeddings=False),
         "bfloat16", "new", "float64"),
    ]


def mla_configs(tf, common):
    """DeepSeek-V2 and V3 with multi-head latent attention: a dense first
    layer, then grouped routing; yarn (factor 4 over an original context of
    16, shorter than the samples) with mscale and mscale_all_dim, so that
    both the cached RoPE part and the softmax scale move; every head size
    different from the others. GLM-4.7-Flash, DeepSeek-V3.2 and GLM-5 take
    the same sizes (mla)."""
    mla = dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
               num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32,
               qk_rope_head_dim=16, tie_word_embeddings=False)
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}
    return [
        # V2-Lite style: q_proj (no query LoRA), softmax top-3 of 8 in 4
        # groups (group_limited_greedy, the 2 groups of the best experts
        # open), not renormalized, x1.5; mscale 0.707 = mscale_all_dim
        ("deepseek_v2_mla_grouped_softmax_bf16", tf.DeepseekV2Config(
            **mla, q_lora_rank=None, qk_nope_head_dim=24, v_head_dim=20,
            n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
            first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=4,
            topk_group=2, routed_scaling_factor=1.5, norm_topk_prob=False,
            rope_parameters=dict(yarn, mscale=0.707, mscale_all_dim=0.707),
            **dict(common, num_hidden_layers=3, rms_norm_eps=1e-6)),
            "bfloat16", "new", "float64"),
        # V3 / R1 / Kimi K2 style: the query's LoRA, sigmoid top-2 of 8 chosen
        # with e_score_correction_bias among the 2 best of 4 groups,
        # renormalized, x2.5; mscale 1.0 = mscale_all_dim (the cached RoPE
        # part unscaled, the softmax scale times mscale^2)
        ("deepseek_v3_mla_qlora_grouped_sigmoid_bf16", tf.DeepseekV3Config(
            **mla, q_lora_rank=48, qk_nope_head_dim=32, v_head_dim=32,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2,
            first_k_dense_replace=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
            norm_topk_prob=True, rope_interleave=True,
            rope_parameters=dict(yarn, mscale=1.0, mscale_all_dim=1.0),
            **dict(common, num_hidden_layers=3, rms_norm_eps=1e-6)),
            "bfloat16", "new", "float64"),
        # GLM-4.7-Flash style (Glm4MoeLiteConfig: V3's attention and experts):
        # the query's LoRA, value heads wider than the keys' no-RoPE part (as
        # its 256 against 192), sigmoid top-3 of 8 in one group, renormalized,
        # x1.8, one shared expert; two dense layers by mlp_layer_types, which
        # first_k_dense_replace (the engines' rule) repeats; plain RoPE with
        # its base of 1e6, no yarn
        ("glm4_moe_lite_mla_qlora_sigmoid_bf16", tf.Glm4MoeLiteConfig(
            **mla, q_lora_rank=48, qk_nope_head_dim=24, v_head_dim=40,
            n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
            n_group=1, topk_group=1, routed_scaling_factor=1.8, norm_topk_prob=True,
            mlp_layer_types=["dense", "dense", "sparse", "sparse"],
            first_k_dense_replace=2,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **dict(common, num_hidden_layers=4)),
            "bfloat16", "new", "float64"),
        # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): V3's layers and an
        # indexer keeping index_topk = 64 keys a query, more than the samples
        # hold (37 and 23 tokens here, 61 in tests/gpu_vs_transformers.py):
        # every key attends, as kvcal runs them. V3.2 as the V3 model above
        # (yarn, grouped sigmoid routing); GLM-5 with GLM's heads (values
        # wider than the keys' no-RoPE part), one group, x2.5, plain RoPE
        ("deepseek_v32_dsa_topk64_grouped_sigmoid_bf16", tf.DeepseekV32Config(
            **mla, q_lora_rank=48, qk_nope_head_dim=32, v_head_dim=32,
            n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=2,
            first_k_dense_replace=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
            norm_topk_prob=True, index_topk=64, index_head_dim=32, index_n_heads=4,
            rope_parameters=dict(yarn, mscale=1.0, mscale_all_dim=1.0),
            **dict(common, num_hidden_layers=3, rms_norm_eps=1e-6)),
            "bfloat16", "new", "float64"),
        ("glm_moe_dsa_topk64_sigmoid_bf16", tf.GlmMoeDsaConfig(
            **mla, q_lora_rank=48, qk_nope_head_dim=24, v_head_dim=40,
            n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
            first_k_dense_replace=2, n_group=1, topk_group=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, index_topk=64, index_head_dim=32, index_n_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            **dict(common, num_hidden_layers=4)),
            "bfloat16", "new", "float64"),
    ]


def moe_configs(tf, common):
    """Mixture-of-experts models; the reference runs in float64 (see the
    module's doc). Each entry: name, config, saved dtype, config style,
    reference dtype."""
    return [
        # softmax top-3 of 8, renormalized; q/k norm; head_dim 32
        ("qwen3_moe_e8_top3_norm_bf16", tf.Qwen3MoeConfig(
            hidden_size=48, intermediate_size=64, moe_intermediate_size=40,
            num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            tie_word_embeddings=False, **common), "bfloat16", "new", "float64"),
        # dense layers among the MoE ones: mlp_only_layers [0] and
        # decoder_sparse_step 2 (layers 0 and 2 dense, 1 and 3 MoE)
        ("qwen3_moe_dense_layers_e4_top2_bf16", tf.Qwen3MoeConfig(
            hidden_size=48, intermediate_size=56, moe_intermediate_size=40,
            num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
            mlp_only_layers=[0], decoder_sparse_step=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
            **dict(common, num_hidden_layers=4)), "bfloat16", "new", "float64"),
        # top-2 of 6 not renormalized, a shared expert behind a sigmoid gate,
        # q/k/v biases
        ("qwen2_moe_shared_e6_top2_bf16", tf.Qwen2MoeConfig(
            hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, num_experts=6,
            num_experts_per_tok=2, norm_topk_prob=False, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=True, **common),
            "bfloat16", "old", "float64"),
        # Qwen2-MoE's dense layers (mlp_only_layers [0]): a SwiGLU MLP
        # without the shared expert, which the MoE layers keep
        ("qwen2_moe_shared_dense_layers_e4_top2_bf16", tf.Qwen2MoeConfig(
            hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, num_experts=4, num_experts_per_tok=2,
            mlp_only_layers=[0], num_attention_heads=4, num_key_value_heads=2,
            tie_word_embeddings=True, **common), "bfloat16", "new", "float64"),
        # use_sliding_window: Qwen3-MoE's window (16) on every layer
        ("qwen3_moe_swa16_e8_top2_bf16", tf.Qwen3MoeConfig(
            hidden_size=48, intermediate_size=64, moe_intermediate_size=40,
            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
            use_sliding_window=True, sliding_window=16, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, **common),
            "bfloat16", "new", "float64"),
        # use_sliding_window: Qwen2-MoE's window (8) on the even layers below
        # max_window_layers (2): layer 0 of 3; MQA
        ("qwen2_moe_swa8_maxwin2_e4_top2_bf16", tf.Qwen2MoeConfig(
            hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, num_experts=4, num_experts_per_tok=2,
            use_sliding_window=True, sliding_window=8, max_window_layers=2,
            num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
            **dict(common, num_hidden_layers=3)), "bfloat16", "new", "float64"),
        # top-2 of 4 (always renormalized), sliding window 16 < the samples
        ("mixtral_e4_top2_swa16_bf16", tf.MixtralConfig(
            hidden_size=64, intermediate_size=48, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=16, num_attention_heads=4,
            num_key_value_heads=1, tie_word_embeddings=False, **common),
            "bfloat16", "new", "float64"),
        # MiniMax-M2: q/k norms over the whole projection, partial RoPE as
        # rotary_dim (8 of 16), sigmoid top-3 of 8 chosen with the correction
        # bias, renormalized; its config as released (to_released_minimax)
        ("minimax_m2_qknorm_all_rot8_e8_top3_bf16", tf.MiniMaxM2Config(
            hidden_size=64, intermediate_size=32, num_local_experts=8,
            num_experts_per_tok=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, rotary_dim=8, tie_word_embeddings=False,
            **dict(common, num_hidden_layers=3)), "bfloat16", "released", "float64"),
        # ERNIE 4.5 MoE: RoPE on interleaved pairs, a dense first layer
        # (moe_layer_start_index 1), then top-3 of 8 by softmax probability
        # plus the correction bias, weighted by the probabilities
        # renormalized, two shared experts; tied embeddings
        ("ernie45_moe_softmax_bias_e8_top3_bf16", tf.Ernie4_5_MoeConfig(
            hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_attention_heads=4, num_key_value_heads=2, moe_num_experts=8, moe_k=3,
            moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_end_index=2,
            moe_layer_interval=1, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            **dict(common, num_hidden_layers=3)), "bfloat16", "new", "float64"),
        # Llama 4 (Scout's features): RoPE on pairs with llama3 scaling and
        # the weightless q/k norm in layers 0, 1 and 3, which attend within
        # chunks of 8 tokens; layer 2 without RoPE, attending to every key,
        # its queries scaled by the temperature tuning from position 7 on
        # (floor_scale 8); a MoE every other layer (top-2 of 4, the sigmoids
        # weighing the experts' inputs, a shared expert), dense MLPs between
        ("llama4_nope_chunk8_temp_e4_top2_bf16", tf.Llama4TextConfig(
            hidden_size=64, intermediate_size=32, intermediate_size_mlp=48,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_local_experts=4, num_experts_per_tok=2, interleave_moe_layer_step=2,
            no_rope_layer_interval=3, attention_chunk_size=8, floor_scale=8,
            attn_scale=0.1, use_qk_norm=True, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                             "factor": 4.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 16},
            **dict(common, num_hidden_layers=4)), "bfloat16", "new", "float64"),
    ]


def gpt_oss_configs(tf, common):
    """gpt-oss: attention sinks, sliding windows shorter than the samples in
    the even layers of layer_types, q/k/v/o biases, yarn not truncated, a
    router with a bias, each expert's gate/up interleaved, transposed and
    biased, the clamped SwiGLU; one checkpoint with its experts in MXFP4
    (its name ends in _mxfp4: tests/make_golden.py quantizes the experts,
    stores their blocks and scales, and computes the reference on the
    dequantized weights). Reference in float64."""
    yarn = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}
    return [
        # head_dim 16 (the CUDA runner's portable attention), window 8, top-3
        # of 8, yarn not truncated as the released models'
        ("gpt_oss_sinks_swa8_e8_top3_bf16", tf.GptOssConfig(
            hidden_size=64, intermediate_size=32, num_local_experts=8,
            num_experts_per_tok=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, sliding_window=8, rope_parameters=dict(yarn, truncate=False),
            tie_word_embeddings=False, **common), "bfloat16", "new", "float64"),
        # head_dim 64 (gpt-oss's, the CUDA runner's tensor cores), window 16,
        # top-2 of 4, yarn truncated, MXFP4 experts
        ("gpt_oss_hd64_swa16_e4_top2_mxfp4", tf.GptOssConfig(
            hidden_size=64, intermediate_size=64, num_local_experts=4,
            num_experts_per_tok=2, num_attention_heads=2, num_key_value_heads=1,
            head_dim=64, sliding_window=16, rope_parameters=dict(yarn, truncate=True),
            tie_word_embeddings=False, **common), "bfloat16", "new", "float64"),
    ]


# --- MXFP4 (the OCP Microscaling FP4 of the released gpt-oss checkpoints) ----

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def mxfp4_quantize(w):
    """w (..., rows, cols) float -> blocks (..., rows, cols / 32, 16) uint8 and
    scales (..., rows, cols / 32) uint8 by the OCP MX rules: per 32 values the
    shared exponent floor(log2(amax)) - 2 (e2m1's largest exponent), each value
    divided by 2^exponent rounded to the nearest e2m1 value, ties to the even
    code, saturating at 6; value 2i in a byte's low nibble."""
    w = np.asarray(w, dtype=np.float64)
    *lead, rows, cols = w.shape
    g = w.reshape(*lead, rows, cols // 32, 32)
    amax = np.abs(g).max(axis=-1)
    exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127)
    exp = np.clip(exp, -127, 127)
    v = g / np.exp2(exp)[..., None]
    mag = np.minimum(np.abs(v), 6.0)
    grid = np.array(E2M1)
    dist = np.abs(mag[..., None] - grid)
    best = dist.min(axis=-1, keepdims=True)
    # the nearest, on a tie the even code (mantissa bit 0)
    code = np.argmin(np.where(dist == best, np.arange(8) % 2, 2), axis=-1)
    code = code + 8 * ((v < 0) & (code > 0))
    code = code.reshape(*lead, rows, cols // 32, 16, 2).astype(np.uint8)
    blocks = code[..., 0] | (code[..., 1] << 4)
    return blocks.astype(np.uint8), (exp + 127).astype(np.uint8)


def mxfp4_dequantize(blocks, scales):
    """The values of blocks and scales, (..., rows, cols), float64."""
    lut = np.array(E2M1 + [-x for x in E2M1])
    b = blocks.astype(np.int64)
    vals = np.stack([lut[b & 15], lut[b >> 4]], axis=-1).reshape(*b.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(*b.shape[:-2], -1)


def to_mxfp4(model, d, torch):
    """The experts of model (in place) become their MXFP4 round trip; the
    checkpoint saved in d gets them as <name>_blocks / <name>_scales (out, in),
    its config quant_method mxfp4. Checked against transformers' own
    decoder (convert_moe_packed_tensors)."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
                out_in = p.detach().double().transpose(1, 2).numpy()  # (E, out, in)
                blocks, scales = mxfp4_quantize(out_in)
                deq = mxfp4_dequantize(blocks, scales)
                theirs = convert_moe_packed_tensors(torch.from_numpy(blocks),
                                                    torch.from_numpy(scales), dtype=torch.float32)
                assert np.array_equal(theirs.double().numpy(), deq.transpose(0, 2, 1)), name
                p.copy_(torch.from_numpy(deq.transpose(0, 2, 1)))
                packed[name] = (blocks, scales)
    model.save_pretrained(d, safe_serialization=True)
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    for name, (blocks, scales) in packed.items():
        assert tensors[name].double().numpy().tobytes() == np.ascontiguousarray(
            mxfp4_dequantize(blocks, scales).transpose(0, 2, 1)).tobytes(), name
        del tensors[name]
        tensors[name + "_blocks"] = torch.from_numpy(np.ascontiguousarray(blocks))
        tensors[name + "_scales"] = torch.from_numpy(np.ascontiguousarray(scales))
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


def randomize(model, torch):
    """Weights with enough spread that every term matters (norm weights,
    biases and k_norm not left at 1 / 0); routers' logits far enough apart
    that bf16 rounding rarely changes a token's experts."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, b in model.named_buffers():  # GLM's router bias is a buffer
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("e_score_correction_bias"):  # ERNIE's is a parameter
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith((".mlp.gate.weight", ".mlp.router.weight",
                                ".feed_forward.router.weight")):  # ERNIE's: mlp.gate.weight
                p.copy_(1.0 * torch.randn(p.shape, generator=g))
            elif name.endswith("self_attn.sinks"):  # near the scores: some heads sink more
                p.copy_(1.0 + 1.5 * torch.randn(p.shape, generator=g))
            elif name.endswith("experts.gate_up_proj"):  # past the SwiGLU's clamp at times
                p.copy_(0.6 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def without_layer_types(cfg_path):
    """Drops layer_types from a sparse-attention config.json, as the released
    DeepSeek-V3.2 and GLM-5 files have none: transformers 5.25 saves every
    layer as "indexed_attention", a kind older releases refuse."""
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("layer_types", None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def to_old_style(cfg_path):
    """Rewrites a transformers 5 config.json (rope_parameters) the way
    transformers 4.x wrote it (top-level rope_theta, rope_scaling)."""
    with open(cfg_path) as f:
        cfg = json.load(f)
    rp = cfg.pop("rope_parameters", None)
    if rp is not None:
        rp = dict(rp)
        cfg["rope_theta"] = rp.pop("rope_theta", 10000.0)
        if rp.get("rope_type", "default") != "default":
            rp["type"] = rp["rope_type"]
            cfg["rope_scaling"] = rp
        else:
            cfg["rope_scaling"] = None
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


def to_released_minimax(cfg_path):
    """Rewrites a transformers 5 MiniMax-M2 config.json as MiniMax's released
    ones are: top-level rope_theta, partial RoPE as rotary_dim alone, and the
    fields its own modeling file reads (scoring_func, use_routing_bias,
    qk_norm_type, attn_type_list, the multi-token-prediction modules)."""
    to_old_style(cfg_path)
    with open(cfg_path) as fp:
        cfg = json.load(fp)
    cfg.pop("rope_scaling", None)
    cfg.update(scoring_func="sigmoid", use_routing_bias=True, use_qk_norm=True,
               qk_norm_type="per_layer", attn_type_list=[1] * cfg["num_hidden_layers"],
               shared_intermediate_size=0, num_mtp_modules=3, mtp_transformer_layers=1,
               use_mtp=True)
    with open(cfg_path, "w") as fp:
        json.dump(cfg, fp, indent=2, sort_keys=True)


def to_flat_config(cfg_path):
    """Rewrites a transformers 5 Qwen2(.5)-VL config.json as Qwen's released
    ones are: the language model's fields at the top level, its rope
    parameters as rope_theta and rope_scaling {"type": "mrope",
    "mrope_section": ...}."""
    with open(cfg_path) as fp:
        cfg = json.load(fp)
    text = cfg.pop("text_config")
    rope = text.pop("rope_parameters")
    for key in ("model_type", "architectures", "dtype", "transformers_version"):
        text.pop(key, None)
    cfg.update(text)
    cfg["rope_theta"] = rope["rope_theta"]
    cfg["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
    with open(cfg_path, "w") as fp:
        json.dump(cfg, fp, indent=2, sort_keys=True)


def to_released_experts(d):
    """Qwen3-VL-MoE's fused experts as its released checkpoints and vLLM
    (is_fused_checkpoint_transposed) hold them: gate_up_proj (experts,
    hidden, 2 inter), down_proj (experts, inter, hidden); transformers 5.25
    saves its parameters' (experts, out, in) and reads both."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    t = load_file(path)
    save_file({k: v.transpose(1, 2).contiguous()
               if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")) else v
               for k, v in t.items()}, path, metadata={"format": "pt"})


def capture_kv(model, torch):
    """Hooks every attention module; returns the list it appends (K, V) to
    (an MLA module's entry as both)."""
    seen = []
    layers = decoder_layers(model)

    def mla_hook(module, args, kwargs):
        entry = mla_entry(module, kwargs, torch)[0].unsqueeze(1)
        e = entry.detach().numpy().copy()
        seen.append((e, e))

    def hook(module, args, kwargs):
        hs = kwargs.get("hidden_states", args[0] if args else None)
        k, v = cached_kv(module, hs, kwargs["position_embeddings"])
        seen.append((k[0].detach().numpy().copy(), v[0].detach().numpy().copy()))

    def make_hook(attn):
        return mla_hook if is_mla(attn) else hook

    for layer in layers:  # a hybrid model's linear-attention layers cache nothing
        if hasattr(layer, "self_attn"):
            layer.self_attn.register_forward_pre_hook(make_hook(layer.self_attn),
                                                      with_kwargs=True)
    return seen


def kv_layer_indices(model):
    """The layers that cache K and V (those with self_attn)."""
    return [i for i, layer in enumerate(decoder_layers(model)) if hasattr(layer, "self_attn")]


# Fixtures (beside the MLA ones) whose bf16 servings flip a router's
# choice against the float64 reference, so that a layer's absmax moves by
# percents in transformers' own bf16 run: they carry bf16_spread. Llama 4's
# top-2 of 4 every other layer: transformers bf16 lies 6.9e-2 from float64
# in its last layer's V.
BF16_SPREAD = {"llama4_nope_chunk8_temp_e4_top2_bf16"}


def bf16_spread(d, samples, fx, torch, tf):
    """Per cached layer, the worst relative distance of bf16 servings of
    the checkpoint d (eager transformers as saved, then with its embedding
    rows perturbed three times by 2^-8: fp8_reference.perturb_embeddings)
    from fx's float64 values: of an MLA entry's latent and RoPE-part absmax
    (it bounds the entry's absmax too, the larger of the two parts'), else
    of each kv head's K and V absmax: how far bf16 arithmetic alone moves
    them (a bf16 rounding that flips a router's choice moves the later
    layers' absmax by percents)."""
    import fp8_reference
    mla = "latent_absmax" in fx
    if mla:  # (layers, 2)
        want = np.array([fx["latent_absmax"], fx["rope_absmax"]]).T
    else:  # (layers, 2 kv heads)
        want = np.concatenate([np.array(fx["k_absmax"]), np.array(fx["v_absmax"])], axis=1)
    gen = torch.Generator().manual_seed(0)
    worst = np.zeros(len(want))
    cfg = tf.AutoConfig.from_pretrained(d)
    for draw in range(4):
        model = model_class(tf, cfg).from_pretrained(
            d, dtype=torch.bfloat16, attn_implementation="eager",
            experts_implementation="eager").eval()
        if draw:
            fp8_reference.perturb_embeddings(model, gen)
        seen = []

        def mla_hook(module, args, kwargs):
            e = mla_entry(module, kwargs, torch).abs().double()
            L = module.kv_lora_rank
            seen.append([e[..., :L].max().item(), e[..., L:].max().item()])

        def hook(module, args, kwargs):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            k, v = cached_kv(module, hs, kwargs["position_embeddings"])
            seen.append(torch.cat([k.abs().amax(dim=(0, 1, 3)),
                                   v.abs().amax(dim=(0, 1, 3))]).double().tolist())

        for layer in decoder_layers(model):
            if hasattr(layer, "self_attn"):
                layer.self_attn.register_forward_pre_hook(mla_hook if mla else hook,
                                                          with_kwargs=True)
        got = np.zeros_like(want)
        with torch.no_grad():
            for s in samples:
                seen.clear()
                text_model(model)(torch.tensor([s]), use_cache=False)
                got = np.maximum(got, np.array(seen))
        worst = np.maximum(worst, (np.abs(got - want) / want).max(axis=1))
    return worst.tolist()


def add_bf16_spread(name, torch, tf):
    """Writes bf16_spread into the existing fixture `name` (its checkpoint
    and samples as they are: no model is made again)."""
    path = os.path.join(OUT, name + ".json")
    fx = json.load(open(path))
    fx["bf16_spread"] = bf16_spread(fx["model"], fx["samples"], fx, torch, tf)
    write_fixture(name, fx)


def make_hf(name, cfg, dtype, style, torch, tf, ref_dtype="float32"):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    torch.manual_seed(0)
    model = from_config(tf, cfg, dtype=torch.float32)
    randomize(model, torch)
    if name.endswith("_mxfp4"):
        to_mxfp4(model.to(getattr(torch, dtype)), d, torch)
    else:
        model.to(getattr(torch, dtype)).save_pretrained(d, safe_serialization=True)
    for extra in os.listdir(d):
        if extra not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, extra))
    if cfg.model_type == "qwen3_vl_moe":
        to_released_experts(d)
    if style == "released" and cfg.model_type == "minimax_m2":
        to_released_minimax(os.path.join(d, "config.json"))
    elif style == "old" and cfg.model_type in ("qwen2_vl", "qwen2_5_vl"):
        to_flat_config(os.path.join(d, "config.json"))
    elif style == "old":
        to_old_style(os.path.join(d, "config.json"))
    if cfg.model_type in ("deepseek_v32", "glm_moe_dsa"):
        without_layer_types(os.path.join(d, "config.json"))
    # eager experts: the loop over experts of the modeling file (the grouped
    # implementations take no float64)
    moe = {"experts_implementation": "eager"} if ref_dtype == "float64" else {}
    if name.endswith("_mxfp4"):  # transformers' own MXFP4 loader, dequantizing
        moe["quantization_config"] = tf.Mxfp4Config(dequantize=True)
    ref = model_class(tf, cfg).from_pretrained(d, dtype=getattr(torch, ref_dtype),
                                               attn_implementation="eager", **moe)
    ref.eval()
    seen = capture_kv(ref, torch)
    samples = token_samples(VOCAB, LENGTHS, sum(map(ord, name)))
    ks, vs, logits0 = [], [], None
    with torch.no_grad():
        for s in samples:
            seen.clear()
            out = ref(torch.tensor([s]), use_cache=False)
            ks.append(np.stack([k for k, _ in seen]))
            vs.append(np.stack([v for _, v in seen]))
            if logits0 is None:
                logits0 = out.logits[0].numpy()
    fx = {"name": name, "model": d, "oracle": "transformers %s, torch %s, %s CPU" % (
        tf.__version__, torch.__version__, {"float32": "fp32"}.get(ref_dtype, ref_dtype)), "architecture": cfg.architectures[0]
        if cfg.architectures else type(ref).__name__, "saved_dtype": dtype,
        "config_style": style}
    fx.update(summarize(ks, vs, samples, logits0))
    kv_layers = kv_layer_indices(ref)
    if len(kv_layers) < len(decoder_layers(ref)):  # a hybrid model
        fx["kv_layers"] = kv_layers
        for r in fx["raw"]:
            r["layer"] = kv_layers[r["layer"]]
    if getattr(cfg, "kv_lora_rank", None):  # MLA: DeepSeek-V2 / V3, GLM-4.7-Flash
        L = cfg.kv_lora_rank
        fx["latent_absmax"] = np.max([np.abs(k[..., :L]).max(axis=(1, 2, 3))
                                      for k in ks], axis=0).astype(float).tolist()
        fx["rope_absmax"] = np.max([np.abs(k[..., L:]).max(axis=(1, 2, 3))
                                    for k in ks], axis=0).astype(float).tolist()
    if getattr(cfg, "kv_lora_rank", None) or name in BF16_SPREAD:
        fx["bf16_spread"] = bf16_spread(d, samples, fx, torch, tf)
    write_fixture(name, fx)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print("  checkpoint %s: %d bytes" % (d, size))


def main():
    if sys.argv[1:2] == ["--spread"]:  # bf16_spread into existing fixtures
        import torch
        import transformers as tf
        torch.set_num_threads(2)
        for name in sys.argv[2:]:
            add_bf16_spread(name, torch, tf)
        return
    wanted = set(sys.argv[1:])
    os.makedirs(OUT, exist_ok=True)
    if not wanted or "stories260K" in wanted:
        make_stories260k()
    import torch
    import transformers as tf
    torch.set_num_threads(2)
    for name, cfg, dtype, style, *ref in hf_configs():
        if not wanted or name in wanted:
            make_hf(name, cfg, dtype, style, torch, tf, *ref)


if __name__ == "__main__":
    main()
