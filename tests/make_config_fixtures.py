#!/usr/bin/env python3
"""Writes the config.json fixtures of tests/test_model_config.c.

tests/fixtures/configs/<name>.json      the file as published (transformers 4.x style:
                                         top-level rope_theta / rope_scaling)
tests/fixtures/configs/<name>.v5.json   the same config saved by transformers 5
                                         (rope_parameters)
tests/fixtures/configs/expected.json    the fields transformers itself derives
                                         (head_dim, kv heads, rope, window), the oracle
tests/fixtures/configs/kv_cache/<name>.json (and .v5.json where transformers has the
                                         class) configs whose KV cache is not 2 x layers x
                                         kv_heads x head_dim: MLA (DeepSeek-V2/V3, Kimi
                                         K2, GLM-4.7-Flash), hybrid linear attention
                                         (Qwen3-Next)
tests/fixtures/configs/kv_cache/expected.json  what each caches per token, from the
                                         fields transformers derives (layer_types,
                                         head_dim, kv_lora_rank); tests/test_inspect_cli.c
tests/malformed/config/*.json           broken configs; tests/test_model_config.c
                                         names the error each must give

Run from the repository root: python3 tests/make_config_fixtures.py
"""
import json
import os

import transformers
from transformers import CONFIG_MAPPING

OUT = "tests/fixtures/configs"
BAD = "tests/malformed/config"

PUBLISHED = {
    "llama2-7b": {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000},
    "llama3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256},
    "llama3.1-8b-fp8kv": {
        "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "torch_dtype": "bfloat16", "vocab_size": 128256,
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": "float-quantized",
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                "dynamic": False, "symmetric": True},
            "config_groups": {}, "ignore": ["lm_head"]}},
    "mistral-7b-v0.1": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.34.0.dev0", "use_cache": True, "vocab_size": 32000},
    "mistral-7b-v0.3": {
        "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.42.0.dev0", "use_cache": True, "vocab_size": 32768},
    "qwen2-7b": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584,
        "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
        "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 152064},
    "qwen2.5-1.5b-yarn": {
        "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 1536,
        "intermediate_size": 8960, "max_position_embeddings": 32768, "max_window_layers": 21,
        "model_type": "qwen2", "num_attention_heads": 12, "num_hidden_layers": 28,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
        "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "use_sliding_window": False, "vocab_size": 151936},
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936},
}


# Published configs whose cache is not per-head K and V in every layer (the
# fields of the files as published; auto_map and MoE routing details left out).
KV_CACHE = {
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
        "bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": 3,
        "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048, "n_group": 8, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "tie_word_embeddings": False,
        "topk_group": 4, "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
        "v_head_dim": 128, "vocab_size": 129280},
    "kimi-k2": {
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
        "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
        "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
        "kv_lora_rank": 512, "max_position_embeddings": 131072, "model_type": "kimi_k2",
        "moe_intermediate_size": 2048, "n_group": 1, "n_routed_experts": 384,
        "n_shared_experts": 1, "num_attention_heads": 64, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "type": "yarn"},
        "rope_theta": 50000.0, "tie_word_embeddings": False, "topk_group": 1,
        "torch_dtype": "bfloat16", "transformers_version": "4.48.3", "v_head_dim": 128,
        "vocab_size": 163840},
    "deepseek-v2-lite": {
        "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
        "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
        "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
        "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
        "num_key_value_heads": 16, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                         "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                         "type": "yarn"},
        "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.33.1", "v_head_dim": 128, "vocab_size": 102400},
    "glm-4.7-flash": {
        "architectures": ["Glm4MoeLiteForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "dtype": "bfloat16", "eos_token_id": [154820, 154827, 154829],
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
        "intermediate_size": 10240, "kv_lora_rank": 512, "max_position_embeddings": 202752,
        "model_type": "glm4_moe_lite", "moe_intermediate_size": 1536, "n_group": 1,
        "n_routed_experts": 64, "n_shared_experts": 1, "norm_topk_prob": True,
        "num_attention_heads": 20, "num_experts_per_tok": 4, "num_hidden_layers": 47,
        "num_key_value_heads": 20, "num_nextn_predict_layers": 1, "pad_token_id": 154820,
        "partial_rotary_factor": 1.0, "q_lora_rank": 768, "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 1000000, "routed_scaling_factor": 1.8, "tie_word_embeddings": False,
        "topk_group": 1, "topk_method": "noaux_tc", "v_head_dim": 256, "vocab_size": 154880},
    "qwen3-next-80b-a3b": {
        "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
        "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256,
        "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128,
        "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next",
        "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
        "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
        "num_key_value_heads": 2, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 10000000, "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.57.0.dev0", "use_cache": True, "vocab_size": 151936},
}

# layer_types kinds that cache K/V per token (transformers' names, legacy
# "attention" included) and, for an MLA model, its latent.
KV_KINDS = ("full_attention", "sliding_attention", "chunked_attention", "attention")


def kv_cache_expected(c):
    n = c.num_hidden_layers
    kinds = getattr(c, "layer_types", None) or ["full_attention"] * n
    kv_layers = sum(k in KV_KINDS for k in kinds)
    if getattr(c, "kv_lora_rank", None):
        values = kv_layers * (c.kv_lora_rank + c.qk_rope_head_dim)
        layout = "mla"
    else:
        values = 2 * kv_layers * c.num_key_value_heads * c.head_dim
        layout = "per_head"
    return {
        "model_type": c.model_type, "num_layers": n, "kv_layout": layout,
        "kv_layers": kv_layers, "num_kv_heads": c.num_key_value_heads,
        "head_dim": c.head_dim, "kv_lora_rank": getattr(c, "kv_lora_rank", None) or 0,
        "qk_rope_head_dim": getattr(c, "qk_rope_head_dim", None) or 0,
        "kv_bytes_per_token_bf16": 2 * values,
    }


def write_kv_cache():
    out = os.path.join(OUT, "kv_cache")
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, d in KV_CACHE.items():
        dump(os.path.join(out, name + ".json"), d)
        # kimi_k2 has no transformers class: its architecture is DeepSeek-V3's
        model_type = "deepseek_v3" if d["model_type"] == "kimi_k2" else d["model_type"]
        c = CONFIG_MAPPING[model_type].from_dict(dict(d))
        e = kv_cache_expected(c)
        e["model_type"] = d["model_type"]
        expected[name] = e
        if model_type == d["model_type"]:
            v5 = json.loads(c.to_json_string())
            for legacy in ("rope_theta", "rope_scaling"):
                v5.pop(legacy, None)
            v5["transformers_version"] = transformers.__version__
            dump(os.path.join(out, name + ".v5.json"), v5)
            expected[name + ".v5"] = e
    dump(os.path.join(out, "expected.json"), expected)


def expected_fields(c):
    rp = c.rope_parameters or {}
    return {
        "model_type": c.model_type,
        "num_layers": c.num_hidden_layers,
        "hidden_size": c.hidden_size,
        "num_attention_heads": c.num_attention_heads,
        "num_kv_heads": c.num_key_value_heads,
        "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "vocab_size": c.vocab_size,
        "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": rp["rope_theta"],
        "rope_type": rp.get("rope_type", "default"),
        "rope_factor": rp.get("factor", 1.0),
        "rope_low_freq_factor": rp.get("low_freq_factor", 0.0),
        "rope_high_freq_factor": rp.get("high_freq_factor", 0.0),
        "rope_original_max_position": rp.get("original_max_position_embeddings", 0),
        "sliding_window": getattr(c, "sliding_window", None) or 0,
        "tie_word_embeddings": int(c.tie_word_embeddings),
    }


def dump(path, obj):
    with open(path, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_malformed():
    good = dict(PUBLISHED["llama3.1-8b"])

    def variant(**changes):
        d = json.loads(json.dumps(good))
        for k, v in changes.items():
            if v is ...:
                del d[k]
            else:
                d[k] = v
        return json.dumps(d, indent=2) + "\n"

    deep = "1"
    for _ in range(100):
        deep = '{"a": ' + deep + "}"
    files = {
        "empty.json": "",
        "not_json.json": "model_type: llama\nnum_hidden_layers: 32\n",
        "array_top.json": "[" + variant() + "]\n",
        "truncated.json": variant()[:200],
        "binary_garbage.json": bytes(range(256)) * 4,
        "missing_model_type.json": variant(model_type=...),
        "missing_num_hidden_layers.json": variant(num_hidden_layers=...),
        "layers_string.json": variant(num_hidden_layers="32"),
        "layers_too_big.json": variant(num_hidden_layers=3000000000),
        "layers_overflow.json": variant().replace('"num_hidden_layers": 32', '"num_hidden_layers": 1e400'),
        "heads_zero.json": variant(num_attention_heads=0),
        "kv_heads_negative.json": variant(num_key_value_heads=-8),
        "heads_not_multiple.json": variant(num_key_value_heads=5),
        "head_dim_fraction.json": variant(head_dim=64.5),
        "hidden_not_divisible.json": variant(hidden_size=4100),
        "model_type_number.json": variant(model_type=7),
        "rope_scaling_no_type.json": variant(rope_scaling={"factor": 8.0}),
        "llama3_no_low_freq_factor.json": variant(rope_scaling={
            "factor": 8.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
        "rope_theta_negative.json": variant(rope_theta=-1.0),
        "rope_scaling_string.json": variant(rope_scaling="llama3"),
        "attention_bias_string.json": variant(attention_bias="false"),
        "quantization_config_list.json": variant(quantization_config=[]),
        "duplicate_key.json": variant().replace('"num_hidden_layers": 32',
                                                '"num_hidden_layers": 32,\n  "num_hidden_layers": 16'),
        "nan_literal.json": variant().replace('"rope_theta": 500000.0', '"rope_theta": NaN'),
        "deep_nesting.json": variant().replace('"pretraining_tp": 1', '"pretraining_tp": ' + deep),
        "trailing_garbage.json": variant() + "}\n",
    }
    for name, text in files.items():
        data = text if isinstance(text, bytes) else text.encode()
        with open(os.path.join(BAD, name), "wb") as f:
            f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(BAD, exist_ok=True)
    expected = {}
    for name, d in PUBLISHED.items():
        dump(os.path.join(OUT, name + ".json"), d)
        c = CONFIG_MAPPING[d["model_type"]].from_dict(dict(d))
        v5 = json.loads(c.to_json_string())
        for legacy in ("rope_theta", "rope_scaling"):
            v5.pop(legacy, None)
        v5["transformers_version"] = transformers.__version__
        dump(os.path.join(OUT, name + ".v5.json"), v5)
        expected[name] = expected_fields(c)
    dump(os.path.join(OUT, "expected.json"), expected)
    write_kv_cache()
    write_malformed()


if __name__ == "__main__":
    main()
