#!/usr/bin/env python3
"""Writes the config.json fixtures of tests/test_model_config.c.

tests/fixtures/configs/<name>.json      the file as published (transformers 4.x style:
                                         top-level rope_theta / rope_scaling)
tests/fixtures/configs/<name>.v5.json   the same config saved by transformers 5
                                         (rope_parameters)
tests/fixtures/configs/expected.json    the fields transformers itself derives
                                         (head_dim, kv heads, rope, window), the oracle
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
    write_malformed()


if __name__ == "__main__":
    main()
