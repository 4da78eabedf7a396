#!/usr/bin/env python3
"""Writes the safetensors inputs of tests/test_safetensors.c and the fuzzer.

tests/malformed/safetensors/*.safetensors  broken files; the reference
    implementation (the `safetensors` package) must reject each one, except
    those listed in OURS_ONLY (limits of kvcal, not of the format)
tests/fuzz/seeds/safetensors/*.safetensors  tiny valid files (fuzzer seeds)
tests/fixtures/safetensors/dtypes.safetensors  written by safetensors.torch:
    every F8_E4M3 / F8_E5M2 code, a spread of F16 / BF16 codes with specials,
    F64 and F32 values, each beside its float32 value as torch computes it
    ("<dtype>.f32"); the C test converts and compares, and rewrites the file
    byte for byte.

Run from the repository root: python3 tests/make_malformed_safetensors.py
"""
import json
import os
import random
import struct

import safetensors
import torch
from safetensors.torch import save, save_file

BAD = "tests/malformed/safetensors"
SEEDS = "tests/fuzz/seeds/safetensors"
FIX = "tests/fixtures/safetensors"

OURS_ONLY = {"too_many_dims.safetensors"}


def image(header, data=b"", pad=True, length=None):
    """A safetensors image from a header (dict, or raw str/bytes) and data."""
    h = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    h = h.encode() if isinstance(h, str) else h
    if pad:
        h += b" " * (-len(h) % 8)
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def f32(*vals):
    return struct.pack("<%df" % len(vals), *vals)


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def malformed():
    rng = random.Random(20240601)
    valid = image({"a": t("F32", [2, 2], 0, 16), "b": t("F16", [2], 16, 20)}, f32(1, 2, 3, 4) + b"\x00<\x00<")
    deep = "1"
    for _ in range(80):
        deep = "[" + deep + "]"
    return {
        "empty.safetensors": b"",
        "seven_bytes.safetensors": b"\x10\x00\x00\x00\x00\x00\x00",
        "header_length_1gb.safetensors": struct.pack("<Q", 1 << 30) + b'{"a":{}}' + b"\x00" * 64,
        "header_length_past_end.safetensors": image({}, length=1000),
        "header_length_zero.safetensors": struct.pack("<Q", 0) + b"\x00" * 16,
        "header_not_json.safetensors": image("hello, world"),
        "header_json_array.safetensors": image("[1, 2, 3]"),
        "header_deep_nesting.safetensors": image('{"a": ' + deep + "}"),
        "header_nan_shape.safetensors": image('{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}', f32(0)),
        "dtype_q4.safetensors": image({"w": t("Q4", [4], 0, 4)}, b"\x00" * 4),
        "dtype_missing.safetensors": image({"w": {"shape": [1], "data_offsets": [0, 4]}}, f32(0)),
        "entry_not_object.safetensors": image({"w": 5}),
        "negative_shape.safetensors": image({"w": t("F32", [-1, 4], 0, 16)}, f32(0, 0, 0, 0)),
        "shape_overflow.safetensors": image({"w": t("F32", [1 << 40, 1 << 40], 0, 16)}, f32(0, 0, 0, 0)),
        "too_many_dims.safetensors": image({"w": t("F32", [1] * 9, 0, 4)}, f32(0)),
        "offsets_past_end.safetensors": image({"w": t("F32", [250], 0, 1000)}, f32(0, 0, 0, 0)),
        "offsets_reversed.safetensors": image({"w": t("F32", [4], 16, 0)}, f32(0, 0, 0, 0)),
        "offsets_fractional.safetensors": image({"w": t("F32", [1], 0.5, 4)}, f32(0)),
        "size_mismatch.safetensors": image({"w": t("F32", [2, 2], 0, 12)}, f32(0, 0, 0)),
        "duplicate_tensor_name.safetensors": image(
            '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            '"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(0, 0)),
        "overlapping_tensors.safetensors": image({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, f32(0, 0, 0)),
        "gap_between_tensors.safetensors": image({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 12, 20)},
                                                 f32(0, 0, 0, 0, 0)),
        "bytes_after_last_tensor.safetensors": image({"a": t("F32", [2], 0, 8)}, f32(0, 0, 0)),
        "metadata_not_strings.safetensors": image({"__metadata__": {"format": 1}, "a": t("F32", [1], 0, 4)}, f32(0)),
        "truncated_data.safetensors": valid[:-3],
        "binary_garbage.safetensors": bytes(rng.randrange(256) for _ in range(512)),
    }


def rejected_by_reference(data):
    try:
        safetensors.deserialize(data)
    except Exception:  # the reference raises SafetensorError (or a JSON error)
        return True
    return False


def seeds():
    return {
        "empty_header.safetensors": save({}),
        "scalar_f32.safetensors": save({"s": torch.tensor(0.25)}),
        "kv_scales.safetensors": save({
            "model.layers.0.self_attn.k_scale": torch.tensor([0.0125]),
            "model.layers.0.self_attn.v_scale": torch.tensor([0.03125]),
        }, metadata={"format": "pt"}),
        "mixed.safetensors": save({
            "bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
            "f16": torch.tensor([1.0, -2.0, 65504.0], dtype=torch.float16),
            "e4m3": torch.tensor([448.0, -0.5], dtype=torch.float8_e4m3fn),
            "e5m2": torch.tensor([1.0, 57344.0], dtype=torch.float8_e5m2),
            "i64": torch.tensor([1, 2], dtype=torch.int64),
            "empty": torch.zeros(0, 4),
        }),
    }


def dtypes_fixture():
    codes16 = sorted(set(range(0, 65536, 37)) | {0x0000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0x3F80, 0x7BFF,
                                                 0x7C00, 0x7C01, 0x7E00, 0x7F7F, 0x7F80, 0x8000, 0x8001,
                                                 0xFC00, 0xFF80, 0xFFFF})
    bits16 = torch.tensor(codes16, dtype=torch.int32).to(torch.int16)
    codes8 = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    f64 = torch.tensor([0.0, -0.0, 1.0, 1e-300, 1e300, -1e300, 3.4028234663852886e38, 0.1, float("inf"),
                        float("nan")], dtype=torch.float64)
    t = {
        "f16": bits16.clone().view(torch.float16),
        "bf16": bits16.view(torch.bfloat16),
        "e4m3": codes8.clone().view(torch.float8_e4m3fn),
        "e5m2": codes8.view(torch.float8_e5m2),
        "f64": f64,
        "f32": torch.tensor([1.5, -0.0, 3.4e38, 1e-45]),
        "i32": torch.tensor([7, -7], dtype=torch.int32),
    }
    for name in ("f16", "bf16", "e4m3", "e5m2", "f64"):
        t[name + ".f32"] = t[name].float()
    save_file(t, os.path.join(FIX, "dtypes.safetensors"), metadata={"format": "pt", "note": "dtype oracle"})


def main():
    for d in (BAD, SEEDS, FIX):
        os.makedirs(d, exist_ok=True)
    for name, data in malformed().items():
        with open(os.path.join(BAD, name), "wb") as f:
            f.write(data)
        if name not in OURS_ONLY and not rejected_by_reference(data):
            raise SystemExit(f"{name}: the reference implementation accepts it; fix the generator")
    for name, data in seeds().items():
        with open(os.path.join(SEEDS, name), "wb") as f:
            f.write(data)
        safetensors.deserialize(data)
    dtypes_fixture()


if __name__ == "__main__":
    main()
