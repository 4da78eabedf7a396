#!/usr/bin/env python3
"""Writes the malformed scales corpus and its expected-error table.

Run from the repository root: python3 tests/malformed/scales/make_corpus.py
Each case is a file in this folder; expected.tsv lists, per file, whether it
is checked against the tiny model (tiny/config.json), the tp size (0: not
given) and a substring the first error line must contain. tests/
test_scales_malformed.c checks every row (and that every file has a row).
"""
import json
import os
import random

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


cases = []  # (name, bytes, model, tp, expected)


def add(name, data, expected, model=True, tp=0):
    cases.append((name, data if isinstance(data, bytes) else text(data), model, tp, expected))


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
add("rank_key_rank0.json", d, 'rank key "rank0" is not a plain decimal integer')
d = legacy(); sf(d)["rank\n0"] = sf(d).pop("0")
add("rank_key_control_char.json", d, 'rank key "rank?0" is not a plain decimal integer')
d = legacy(); sf(d)["00"] = sf(d).pop("0")
add("rank_key_leading_zero.json", d, "read it as 0")
d = legacy(); sf(d)["-1"] = sf(d).pop("0")
add("rank_key_negative.json", d, "read it as -1")
d = legacy(); sf(d)["0"]["layer_1"] = sf(d)["0"].pop("1")
add("layer_key_text.json", d, 'layer key "layer_1"')
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
add("dtype_e5m2.json", d, '"float8_e5m2", but the engines accept only')
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

if __name__ == "__main__":
    for f in os.listdir(HERE):
        if f.endswith(".json"):
            os.remove(os.path.join(HERE, f))
    with open(os.path.join(HERE, "expected.tsv"), "w") as t:
        t.write("# file\tmodel\ttp\texpected substring of the first error\n")
        for name, data, model, tp, expected in cases:
            with open(os.path.join(HERE, name), "wb") as f:
                f.write(data)
            t.write(f"{name}\t{'tiny' if model else '-'}\t{tp}\t{expected}\n")
    print(f"{len(cases)} cases")
