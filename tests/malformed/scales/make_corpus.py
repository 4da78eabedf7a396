#!/usr/bin/env python3
"""Writes the scales corpus of engine rules and its expected-verdict table.

Run from the repository root: python3 tests/malformed/scales/make_corpus.py
Each case is a file (legacy or kvcal JSON) or a checkpoint directory
(ck_*: config.json + kv_scales.safetensors) in this folder; expected.tsv
lists, per case, whether it is checked against the tiny model
(tiny/config.json), the tp size (0: not given), the verdict (error: invalid,
the first error line contains the text; warning: valid, refused by
--strict, some warning line contains the text) and the text. tests/
test_scales_malformed.c checks every row (and that every case has a row);
schemas/README.md names the case behind each engine rule.
"""
import json
import os
import random
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, KV_HEADS = 2, 4


def legacy(**over):
    d = {"model_type": "llama",
         "kv_cache": {"dtype": "float8_e4m3fn",
                      "scaling_factor": {"0": {str(l): 0.0125 * (l + 1) for l in range(LAYERS)}}}}
    for k, v in over.items():
        d[k] = v
    return d


def kvcal(**over):
    layers = []
    for l in range(LAYERS):
        k = [0.01 * (h + 1) + 0.001 * l for h in range(KV_HEADS)]
        v = [0.02 * (h + 1) + 0.001 * l for h in range(KV_HEADS)]
        layers.append({"layer": l, "k_scale": max(k), "v_scale": max(v),
                       "k_scale_per_head": k, "v_scale_per_head": v})
    d = {"format": "kvcal-kv-scales", "version": 1,
         "model": {"architecture": "LlamaForCausalLM", "model_type": "llama",
                   "num_layers": LAYERS, "num_attention_heads": 8,
                   "num_kv_heads": KV_HEADS, "head_dim": 8},
         "dtype": "float8_e4m3fn", "fp8_max": 448, "granularity": "head", "kv_shared": False,
         "observer": {"name": "minmax", "params": {}},
         "provenance": {"dataset": "x", "num_samples": 1, "num_tokens": 8, "seed": 0,
                        "tool_version": "0.1.0"},
         "layers": layers}
    d.update(over)
    return d


def sf(d):
    return d["kv_cache"]["scaling_factor"]


def text(d):
    return json.dumps(d, indent=1).encode()


class Directory(dict):
    """A case that is a directory: {member file: bytes}."""


cases = []  # (name, bytes or Directory, model, tp, verdict, expected)


def add(name, data, expected, model=True, tp=0, verdict="error"):
    cases.append((name, data if isinstance(data, (bytes, Directory)) else text(data), model, tp,
                  verdict, expected))


def warn(name, data, expected, model=True, tp=0):
    add(name, data, expected, model, tp, verdict="warning")


base = text(legacy())
add("empty.json", b"", "the file is empty")
add("truncated.json", base[: len(base) // 2], "not JSON at line")
add("binary_garbage.json", bytes(random.Random(7).randrange(256) for _ in range(300)), "not JSON")
add("nul_byte.json", base[:20] + b"\0" + base[20:], "not JSON")
add("trailing_garbage.json", base + b"}", "not JSON at line")
add("nan_literal.json", base.replace(b"0.0125", b"NaN"), "NaN/Infinity literal")
add("infinity_literal.json", base.replace(b"0.0125", b"-Infinity"), "NaN/Infinity literal")
add("huge_number_1e400.json", base.replace(b"0.0125", b"1e400"), "out of the range of a double")
add("float32_overflow_1e39.json", base.replace(b"0.0125", b"1e39"), "exceeds the float32 range")
add("float32_underflow_1e-50.json", base.replace(b"0.0125", b"1e-50"), "is below the float32 range")
add("float32_subnormal_1e-40.json", base.replace(b"0.0125", b"1e-40"), "is below the float32 range")
add("deep_nesting.json", b"[" * 200 + b"]" * 200, "not JSON at line")
add("duplicate_layer_key.json", base.replace(b'"1": 0.025', b'"0": 0.025'), "duplicate key")
add("invalid_utf8.json", base.replace(b'"llama"', b'"ll\xffma"'), "not JSON at line")
add("top_level_array.json", b"[1, 2]", "neither a legacy scales file")
add("unrelated_object.json", text({"hello": 1}), "neither a legacy scales file")

d = legacy(); sf(d)["rank0"] = sf(d).pop("0")
add("rank_key_rank0.json", d, 'rank key "rank0" is not an integer')
d = legacy(); sf(d)["rank\n0"] = sf(d).pop("0")
add("rank_key_control_char.json", d, 'rank key "rank?0" is not an integer')
d = legacy(); sf(d)["00"] = sf(d).pop("0")
warn("rank_key_leading_zero.json", d, "reads it as rank 0")
d = legacy(); sf(d)["-1"] = sf(d).pop("0")
add("rank_key_negative.json", d, "rank -1 but only 1 ranks")
d = legacy(); sf(d)["0"]["layer_1"] = sf(d)["0"].pop("1")
add("layer_key_text.json", d, 'layer key "layer_1"')
for name, key in [("layer_key_leading_zero", "01"), ("layer_key_plus", "+1"),
                  ("layer_key_space", " 1"), ("layer_key_zero_fraction", "1.0"),
                  ("layer_key_nbsp", "\u00a01")]:
    d = legacy(); sf(d)["0"][key] = sf(d)["0"].pop("1")
    warn(name + ".json", d, "reads it as layer 1")
d = legacy(); sf(d)["0"] = {str(l): 0.01 for l in range(11)}; sf(d)["0"]["1_0"] = sf(d)["0"].pop("10")
warn("layer_key_underscore.json", d, "reads it as layer 10", model=False)
for name, key in [("layer_key_double_underscore", "1__0"), ("layer_key_fraction", "1.5"),
                  ("layer_key_hex", "0x1"), ("layer_key_exponent", "1e0")]:
    d = legacy(); sf(d)["0"][key] = sf(d)["0"].pop("1")
    add(name + ".json", d, f'layer key "{key}" is not an integer')
d = legacy(); sf(d)["0"]["01"] = 0.5
warn("layer_keys_same_int.json", d, 'layer keys "1" and "01" both read as layer 1')
d = legacy(); sf(d)["0"]["5"] = sf(d)["0"].pop("1"); sf(d)["1"] = {"0": 0.01, "1": 0.02}
add("rank_count_right_layer_missing.json", d, "sglang's rank 0 rejects the file", tp=2)
d = legacy(extra=1)
warn("unknown_top_key.json", d, 'unknown key "extra": sglang ignores it')
d = legacy(); del sf(d)["0"]["1"]
add("missing_layer.json", d, "rank 0 lacks 1 of 2 layers (first: layer 1)")
d = legacy(); sf(d)["0"]["2"] = 0.05
add("extra_layer.json", d, "1 layer(s) beyond the model's num_hidden_layers 2")
d = legacy(); sf(d)["1"] = dict(sf(d)["0"])
add("two_ranks_tp1.json", d, "2 ranks but tp 1", tp=1)
d = legacy(); sf(d)["2"] = dict(sf(d)["0"])
add("rank_gap.json", d, "rank 2 but only 2 ranks", tp=2)
d = legacy(); sf(d)["1"] = dict(sf(d)["0"]); sf(d)["2"] = dict(sf(d)["0"])
add("tp3_heads4.json", d, "4 kv heads cannot be split over tp 3", tp=3)
d = legacy(); d["kv_cache"]["dtype"] = "float8_e5m2"
add("dtype_e5m2.json", d, '"float8_e5m2", but sglang accepts only')
d = legacy(); del d["kv_cache"]["dtype"]
add("dtype_missing.json", d, "kv_cache.dtype: missing")
d = legacy(); d["kv_cache"]["dtype"] = 8
add("dtype_number.json", d, "kv_cache.dtype: not a string")
d = legacy(model_type="mistral")
add("model_type_mismatch.json", d, '"mistral" but config.json says "llama"')
d = legacy(); del d["model_type"]
add("model_type_missing.json", d, "model_type: missing")
d = legacy(model_type=None)
add("model_type_null.json", d, 'null but config.json says "llama"')
d = legacy(model_type=7)
add("model_type_number.json", d, "model_type: not a string")
d = legacy(); sf(d)["0"]["0"] = -0.5
add("negative_scale.json", d, "scale -0.5 is negative")
d = legacy(); sf(d)["0"]["0"] = 0
add("zero_scale.json", d, "scale is 0")
d = legacy(); sf(d)["0"]["0"] = "0.05"
add("string_scale_numeric.json", d, 'scale is the string "0.05"')
d = legacy(); sf(d)["0"]["0"] = "abc"
add("string_scale_text.json", d, 'scale is the string "abc"')
d = legacy(); sf(d)["0"]["0"] = True
add("bool_scale.json", d, "scale is a boolean")
d = legacy(); sf(d)["0"]["0"] = None
add("null_scale.json", d, "scale is null")
d = legacy(); sf(d)["0"]["0"] = [0.1]
add("array_scale.json", d, "scale is an array")
d = legacy(); d["kv_cache"] = [1]
add("kv_cache_array.json", d, "kv_cache: not an object")
d = legacy(); del d["kv_cache"]["scaling_factor"]
add("scaling_factor_missing.json", d, "kv_cache.scaling_factor: missing")
d = legacy(); d["kv_cache"]["scaling_factor"] = [0.1]
add("scaling_factor_array.json", d, "kv_cache.scaling_factor: not an object")
d = legacy(); d["kv_cache"]["scaling_factor"] = {}
add("no_ranks.json", d, "no ranks")
d = legacy(); sf(d)["0"] = 0.5
add("rank_not_object.json", d, "not an object of layer scales")
d = legacy(); d["kv_cache"]["scaling_factor"] = {str(r): {} for r in range(5000)}
add("too_many_ranks.json", json.dumps(d).encode(), "5000 ranks (more than 4096)")
d = legacy(); sf(d)["0"] = {}
add("no_layers_without_model.json", d, "no layer has an integer key", model=False)

d = kvcal(); d["layers"][1]["k_scale_per_head"] = d["layers"][1]["k_scale_per_head"][:3]
add("kvcal_per_head_wrong_length.json", d, "layers[1].k_scale_per_head: wrong length")
d = kvcal(version=2)
add("kvcal_newer_version.json", d, "version 2 is newer than 1")
d = kvcal(fp8_max=240)
add("kvcal_fp8_max_240.json", d, "fp8_max: must be 448")
d = kvcal(granularity="channel")
add("kvcal_granularity_channel.json", d, 'granularity: must be "tensor" or "head"')
d = kvcal(); d["layers"].pop()
add("kvcal_missing_layer.json", d, "layers: wrong length")
d = kvcal(); d["layers"][0]["k_scale"] = 0.5
add("kvcal_tensor_not_max.json", d, "k_scale 0.5 is not the max of k_scale_per_head")
d = kvcal(); d["model"]["num_layers"] = 3; d["layers"].append(dict(d["layers"][1], layer=2))
add("kvcal_layers_mismatch_model.json", d, "model.num_layers: 3 but config.json has 2")
d = kvcal()
add("kvcal_heads_tp3.json", d, "4 kv heads cannot be split over tp 3", tp=3)
d = kvcal(); d["model"]["num_layers"] = 65536; d["model"]["num_kv_heads"] = 65536
add("kvcal_2_pow_32_heads.json", d, "more than 2^24 (layer, kv head) pairs", model=False)
d = kvcal(); d["layers"][0]["v_scale_per_head"][2] = float("nan")
add("kvcal_nan_in_array.json", json.dumps(d).encode(), "NaN/Infinity literal")
d = kvcal(); d["layers"][1]["layer"] = 5
add("kvcal_layer_index_wrong.json", d, '"layer" is 5, expected 1')
d = kvcal(); d["layers"][0]["k_absmax"] = [1.0] * KV_HEADS
add("kvcal_absmax_partial.json", d, "layers[0].v_absmax: missing")
d = kvcal(); d["format"] = "kvcal-kv-scale"
add("kvcal_format_name_wrong.json", d, 'format: must be "kvcal-kv-scales"')

# --- checkpoints: config.json + kv_scales.safetensors (tiny: 2 layers, 4 kv heads) ---


def safetensors(tensors):
    """tensors: {name: (shape, [float32 values])} -> bytes of a .safetensors file."""
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def ct(strategy="tensor", **over):
    q = {"quant_method": "compressed-tensors", "format": "dense", "config_groups": {}, "ignore": [],
         "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": strategy,
                             "dynamic": False, "symmetric": True}}
    if strategy == "attn_head":
        q.update(total_num_kv_heads=KV_HEADS, total_num_heads=8)
    q.update(over)
    return q


def scales(per_head=False, drop=(), extra=None, k=None, v=None):
    """Layer scales of the tiny model: names -> (shape, values)."""
    t = {}
    for l in range(LAYERS):
        for kind, base, fixed in (("k", 0.01, k), ("v", 0.02, v)):
            vals = [base * (h + 1) + 0.001 * l for h in range(KV_HEADS)] if per_head else [base + 0.001 * l]
            if fixed is not None:
                vals = [fixed] * len(vals)
            t[f"model.layers.{l}.self_attn.{kind}_scale"] = ([KV_HEADS, 1, 1] if per_head else [1], vals)
    for name in drop:
        del t[name]
    t.update(extra or {})
    return t


def checkpoint(quant, tensors):
    tiny = json.load(open(os.path.join(HERE, "tiny", "config.json")))
    if quant is not None:
        tiny["quantization_config"] = quant
    return Directory({"config.json": text(tiny), "kv_scales.safetensors": safetensors(tensors)})


K0, V0 = "model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"
add("ck_no_quantization_config", checkpoint(None, scales()),
    "vLLM refuses to load the model: with no quantization method", model=False)
add("ck_quant_method_missing", checkpoint({"kv_cache_scheme": ct()["kv_cache_scheme"]}, scales()),
    "has no quant_method", model=False)
for method in ("awq", "gptq", "gptq_marlin", "awq_marlin"):
    add(f"ck_quant_method_{method}", checkpoint({"quant_method": method, "bits": 4, "group_size": 128}, scales()),
        f'"{method}" carries no KV-cache scales: vLLM gives the attention layers no KV-cache method',
        model=False)
warn("ck_ct_no_scheme_tensor", checkpoint(dict(ct(), kv_cache_scheme=None), scales()),
     "vLLM (compressed-tensors) then reads one scale per layer", model=False)
add("ck_ct_no_scheme_head", checkpoint({k: v for k, v in ct().items() if k != "kv_cache_scheme"}, scales(per_head=True)),
    "AssertionError: Attempted to load weight of 4 values into parameter ([1])", model=False)
add("ck_ct_tensor_strategy_head", checkpoint(ct(), scales(per_head=True)),
    'per-head-shaped but kv_cache_scheme.strategy is "tensor"', model=False)
warn("ck_ct_head_strategy_tensor_tp1", checkpoint(ct("attn_head"), scales()),
     "vLLM broadcasts it over the heads at tp 1 and fails to load the model at tp > 1", model=False, tp=1)
add("ck_ct_head_strategy_tensor_tp2", checkpoint(ct("attn_head"), scales()),
    "vLLM fails to load the model at tp > 1", model=False, tp=2)
q = ct("attn_head"); del q["total_num_kv_heads"]; del q["config_groups"]
add("ck_ct_head_no_total_kv_heads", checkpoint(q, scales(per_head=True)),
    "quantization_config.total_num_kv_heads: missing for strategy attn_head", model=False)
q = ct(); q["kv_cache_scheme"]["type"] = "int"
add("ck_ct_scheme_int", checkpoint(q, scales()), "vLLM refuses to start (NotImplementedError)", model=False)
add("ck_ct_zero_scale", checkpoint(ct(), scales(extra={K0: ([1], [0.0])})),
    "scale is 0: vLLM (compressed-tensors) loads it unchecked", model=False)
add("ck_ct_negative_scale", checkpoint(ct(), scales(extra={K0: ([1], [-0.5])})),
    "scale -0.5 is negative: vLLM (compressed-tensors) loads it unchecked", model=False)
add("ck_ct_k_scale_missing", checkpoint(ct(), scales(drop=[K0])),
    "k_scale missing: vLLM (compressed-tensors) keeps K at scale 1.0", model=False)
add("ck_ct_v_scale_missing", checkpoint(ct(), scales(drop=[V0])),
    "v_scale missing: vLLM (compressed-tensors) keeps V at scale 1.0", model=False)
add("ck_ct_single_kv_scale", checkpoint(ct(), scales(drop=[K0, V0], extra={"model.layers.0.self_attn.kv_scale": ([1], [0.03])})),
    "reads it as k_scale only: V keeps scale 1.0", model=False)
add("ck_ct_layer_beyond_model", checkpoint(ct(), scales(extra={"model.layers.2.self_attn.k_scale": ([1], [0.01])})),
    "vLLM refuses to load the model (ValueError: There is no module or parameter named", model=False)
FP8 = {"quant_method": "fp8", "activation_scheme": "static"}
add("ck_fp8_per_head", checkpoint(FP8, scales(per_head=True)),
    "ValueError: KV-cache scale expects a scalar weight", model=False)
add("ck_fp8_k_scale_missing", checkpoint(FP8, scales(drop=[K0])),
    "k_scale missing: vLLM fails an assertion while loading the model", model=False)
add("ck_fp8_v_scale_missing", checkpoint(FP8, scales(drop=[V0])),
    "v_scale missing: vLLM uses k_scale for both K and V", model=False)
warn("ck_fp8_single_kv_scale", checkpoint(FP8, {f"model.layers.{l}.self_attn.kv_scale": ([1], [0.03 + 0.01 * l]) for l in range(LAYERS)}),
     "k_scale equals v_scale in every layer", model=False)
add("ck_fp8_zero_k_scale", checkpoint(FP8, scales(extra={K0: ([1], [0.0])})),
    "scale is 0: vLLM fails an assertion while loading the model", model=False)
add("ck_fp8_zero_v_scale", checkpoint(FP8, scales(extra={V0: ([1], [0.0])})),
    "scale is 0: vLLM ignores it and uses k_scale for both K and V", model=False)
add("ck_fp8_negative_pair", checkpoint(FP8, scales(extra={K0: ([1], [-0.5]), V0: ([1], [-0.5])})),
    "vLLM takes negative k_scale and v_scale for 'not in the checkpoint' and uses 1.0", model=False)
MODELOPT = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}


def modelopt_names(tensors):
    """compressed-tensors names -> ModelOpt's k_proj.k_scale / v_proj.v_scale."""
    return {n.replace("self_attn.k_scale", "self_attn.k_proj.k_scale")
            .replace("self_attn.v_scale", "self_attn.v_proj.v_scale"): x for n, x in tensors.items()}


def hf_quant_config(algo, kv_algo="FP8"):
    """ModelOpt 0.29's hf_quant_config.json (config.json without quantization_config)."""
    d = checkpoint(None, modelopt_names(scales()))
    d["hf_quant_config.json"] = text({"producer": {"name": "modelopt", "version": "0.29.0"},
                                      "quantization": {"quant_algo": algo, "kv_cache_quant_algo": kv_algo,
                                                       "exclude_modules": ["lm_head"]}})
    return d


warn("ck_modelopt_tensor", checkpoint({"quant_method": "modelopt", "quant_algo": "FP8"}, modelopt_names(scales())),
     "quantization_config.kv_cache_quant_algo: missing or null, not FP8: vLLM loads the scales but", model=False)
warn("ck_modelopt_fp8_cast", checkpoint(MODELOPT, modelopt_names(scales(k=1.0, v=1.0))),
     "every K/V scale is exactly 1.0 (ModelOpt fp8_cast)", model=False)
warn("ck_modelopt_clamp", checkpoint(MODELOPT, modelopt_names(scales(extra={K0: ([1], [1.25]), V0: ([1], [1.5])}, k=1.0, v=1.0))),
     "are exactly 1.0 and none is below it (ModelOpt's clamp to >= 1.0)", model=False)
warn("ck_modelopt_hf_quant_config_kv_none", hf_quant_config("FP8", None),
     "quantization.kv_cache_quant_algo: missing or null, not FP8", model=False)
add("ck_modelopt_hf_quant_config_algo_null", hf_quant_config(None),
    "vLLM refuses to load the model: with no quantization method", model=False)
add("ck_modelopt_hf_quant_config_algo_unknown", hf_quant_config("W4A16_AWQ"),
    "vLLM refuses to start (ValueError: Unknown ModelOpt quant algo)", model=False)
QUARK_KV = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True,
            "ch_axis": None, "group_size": None, "round_method": "half_even", "scale_type": "float",
            "observer_cls": "PerTensorMinMaxObserver"}


def quark(kv=QUARK_KV, group=("*k_proj", "*v_proj"), export=True):
    layer = {g: {"input_tensors": None, "weight": None, "output_tensors": dict(kv) if kv else None,
                 "bias": None, "target_device": None} for g in group}
    q = {"quant_method": "quark", "global_quant_config": {"input_tensors": None, "weight": None,
                                                           "output_tensors": None, "bias": None},
         "layer_quant_config": layer, "layer_type_quant_config": {}, "exclude": ["lm_head"]}
    if export:
        q["export"] = {"kv_cache_group": list(group), "pack_method": "reorder", "weight_format": "real_quantized"}
    return q


def quark_names(tensors):
    return {n.replace("self_attn.k_scale", "self_attn.k_proj.output_scale")
            .replace("self_attn.v_scale", "self_attn.v_proj.output_scale"): x for n, x in tensors.items()}


add("ck_quark_no_export", checkpoint(quark(export=False), quark_names(scales())),
    "quantization_config.export.kv_cache_group: missing", model=False)
add("ck_quark_kv_int8", checkpoint(quark(kv=dict(QUARK_KV, dtype="int8")), quark_names(scales())),
    "vLLM refuses to start (NotImplementedError in QuarkKVCacheMethod", model=False)
q = quark(); q["export"]["kv_cache_group"] = []
warn("ck_quark_kv_cache_group_empty", checkpoint(q, quark_names(scales())),
     "the model declares no quantized KV cache", model=False)


def trtllm(kv_algo="FP8", world=1, ranks=1, layers=LAYERS, shape=(1,), extra=None):
    cfg = {"architecture": "LlamaForCausalLM", "dtype": "bfloat16", "num_hidden_layers": LAYERS,
           "num_attention_heads": 8, "num_key_value_heads": KV_HEADS, "hidden_size": 64,
           "quantization": {"quant_algo": None, "kv_cache_quant_algo": kv_algo},
           "mapping": {"world_size": world, "tp_size": world, "pp_size": 1}}
    d = Directory({"config.json": text(cfg)})
    for r in range(ranks):
        t = {f"transformer.layers.{l}.attention.kv_cache_scaling_factor":
             (list(shape), [0.02 + 0.001 * l] * (shape[0] if shape else 1)) for l in range(layers)}
        t.update(extra or {})
        d[f"rank{r}.safetensors"] = safetensors(t)
    return d


add("ck_trt_kv_algo_null", trtllm(kv_algo=None),
    "quantization.kv_cache_quant_algo: missing or null, expected \"FP8\"", model=False)
add("ck_trt_rank_missing", trtllm(world=2, ranks=1),
    "rank1.safetensors: missing: mapping.world_size is 2", model=False)
add("ck_trt_layer_missing", trtllm(layers=1),
    "rank0.safetensors: transformer.layers.1.attention.kv_cache_scaling_factor: missing", model=False)
add("ck_trt_factor_shape", trtllm(shape=(2,)),
    "TensorRT-LLM declares it a float32 Parameter of shape (1,)", model=False)
add("ck_ct_output_scale_names", checkpoint(ct(), {n.replace("self_attn.k_scale", "self_attn.k_proj.output_scale").replace("self_attn.v_scale", "self_attn.v_proj.output_scale"): x for n, x in scales().items()}),
    "vLLM refuses to load the model (ValueError: There is no module or parameter named '...qkv_proj.output_scale')", model=False)


# --- int8 with zero points (dtype int8_asym) in the kvcal format -------------


def kvcal_asym(**over):
    d = kvcal(dtype="int8_asym", qmax=255)
    del d["fp8_max"]
    for e in d["layers"]:
        e["k_offset_per_head"] = [-20 + 10 * h for h in range(KV_HEADS)]
        e["v_offset_per_head"] = [3 * h for h in range(KV_HEADS)]
    d.update(over)
    return d


d = kvcal_asym(); del d["layers"][1]["v_offset_per_head"]
add("kvcal_int8_asym_offset_missing.json", d, "layers[1].v_offset_per_head: missing, expected an array of 4 offsets")
d = kvcal_asym(); d["layers"][0]["k_offset_per_head"][2] = 200
add("kvcal_int8_asym_offset_out_of_range.json", d, "layers[0].k_offset_per_head[2]: offset must be an integer in [-128, 127]")
d = kvcal_asym(); d["layers"][1]["v_offset_per_head"][0] = 1.5
add("kvcal_int8_asym_offset_fraction.json", d, "layers[1].v_offset_per_head[0]: offset must be an integer in [-128, 127]")
d = kvcal_asym(qmax=127)
add("kvcal_int8_asym_qmax_127.json", d, "qmax: must be 255 for dtype int8_asym")
d = kvcal_asym(); d["layers"][0]["k_scale_per_head"][0] = 0
add("kvcal_int8_asym_zero_scale.json", d, "layers[0].k_scale_per_head[0]: scale is 0")
d = kvcal(dtype="int8", qmax=127); del d["fp8_max"]; d["layers"][0]["k_offset_per_head"] = [0] * KV_HEADS
d["layers"][0]["v_offset_per_head"] = [0] * KV_HEADS
add("kvcal_offsets_on_int8.json", d, 'go with dtype "int8_asym" only')

# --- vllm-ascend C8: quant_model_description.json + kv_scales.safetensors ----
# (config.json of tiny: 2 layers, 4 kv heads, head_dim 8: 32 channels)

C8 = ("k_proj.kv_cache_scale", "k_proj.kv_cache_offset", "v_proj.kv_cache_scale",
      "v_proj.kv_cache_offset")


def ascend(drop=(), extra=None, desc_drop=(), model_weights=None, offset=0.0):
    """A C8 directory of the tiny model: per-channel scales (each head's value
    over its 8 channels) and offsets, the description listing them."""
    t, desc = {}, {"model_quant_type": "FLOAT", "kv_cache_type": "C8", "kv_quant_type": "C8"}
    for l in range(LAYERS):
        for suffix in C8:
            name = f"model.layers.{l}.self_attn.{suffix}"
            per_head = [offset if "offset" in suffix else 0.01 * (h + 1) + 0.002 * l
                        for h in range(KV_HEADS)]
            t[name] = ([KV_HEADS * 8], [v for v in per_head for _ in range(8)])
            desc[name] = "C8"
    for name in drop:
        del t[name]
    t.update(extra or {})
    for name in desc_drop:
        del desc[name]
    files = {"config.json": open(os.path.join(HERE, "tiny", "config.json"), "rb").read(),
             "quant_model_description.json": text(desc),
             "kv_scales.safetensors": safetensors(t)}
    if model_weights:
        files["model.safetensors"] = safetensors(model_weights)
    return Directory(files)


A0 = "model.layers.0.self_attn."
add("ck_ascend_offset_missing", ascend(drop=["model.layers.1.self_attn.v_proj.kv_cache_offset"]),
    "v_proj.kv_cache_offset: missing (in 1 of 2 layers): vllm-ascend keeps the offset at 0", model=False)
add("ck_ascend_offset_out_of_range", ascend(extra={A0 + "k_proj.kv_cache_offset": ([1], [200.0])}),
    "offset 200 is not an integer in [-128, 127]", model=False)
add("ck_ascend_scale_nan", ascend(extra={A0 + "v_proj.kv_cache_scale": ([1], [float("nan")])}),
    "scale NaN is not finite: vllm-ascend quantizes with its reciprocal", model=False)
add("ck_ascend_scale_zero", ascend(extra={A0 + "k_proj.kv_cache_scale": ([1], [0.0])}),
    "scale is 0: vllm-ascend quantizes with its reciprocal", model=False)
add("ck_ascend_shape_per_head", ascend(extra={A0 + "k_proj.kv_cache_scale": ([KV_HEADS], [0.01] * KV_HEADS)}),
    "4 values, expected 1 or 4 kv heads x 8 head_dim = 32", model=False)
add("ck_ascend_kv_cache_type_missing", ascend(desc_drop=["kv_cache_type"]),
    'kv_cache_type: missing, expected "C8": vllm-ascend gives no layer the C8 method', model=False)
add("ck_ascend_layer_not_described", ascend(desc_drop=["model.layers.1.self_attn.k_proj.kv_cache_scale"]),
    "does not list model.layers.1.self_attn.k_proj.kv_cache_scale", model=False)
add("ck_ascend_linear_not_listed",
    ascend(model_weights={A0 + "q_proj.weight": ([2, 2], [1.0, 0.0, 0.0, 1.0])}),
    "does not list model.layers.0.self_attn.q_proj.weight (1 linear weights missing): vllm-ascend fails to load the model",
    model=False)
warn("ck_ascend_nonzero_offset", ascend(offset=5.0),
     "non-zero kv_cache_offset: vllm-ascend 0.23.0.post1 stores x / scale + offset but dequantizes decode", model=False)

if __name__ == "__main__":
    for f in os.listdir(HERE):
        if f.endswith(".json"):
            os.remove(os.path.join(HERE, f))
        elif f.startswith("ck_"):
            shutil.rmtree(os.path.join(HERE, f))
    with open(os.path.join(HERE, "expected.tsv"), "w") as t:
        t.write("# file\tmodel\ttp\tverdict\texpected substring of the first error "
                "(verdict error) or of a warning (verdict warning)\n")
        for name, data, model, tp, verdict, expected in cases:
            if isinstance(data, Directory):
                os.mkdir(os.path.join(HERE, name))
                for member, content in data.items():
                    with open(os.path.join(HERE, name, member), "wb") as f:
                        f.write(content)
            else:
                with open(os.path.join(HERE, name), "wb") as f:
                    f.write(data)
            t.write(f"{name}\t{'tiny' if model else '-'}\t{tp}\t{verdict}\t{expected}\n")
    print(f"{len(cases)} cases")
