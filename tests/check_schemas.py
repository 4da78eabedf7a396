#!/usr/bin/env python3
"""Checks the JSON Schemas in schemas/ against the files they describe.

Run from the repository root (needs the jsonschema package):
    python3 tests/check_schemas.py
Valid examples must pass; the malformed corpus rows whose error a schema can
express (see SCHEMA_CATCHES) must fail. Exit 1 on any mismatch.
"""
import json
import sys

import jsonschema

LEGACY = "schemas/legacy-kv-cache-scales.schema.json"
KVCAL = "schemas/kvcal-scales.schema.json"
VALID = {
    "tests/fixtures/llama2-7b/kv_cache_scales.json": LEGACY,
    "tests/fuzz/seeds/scales_json/kvcal_tiny_head.json": KVCAL,
    "tests/fuzz/seeds/scales_json/kvcal_tiny_int8_asym.json": KVCAL,
}
SCHEMA_CATCHES = {
    "rank_key_rank0.json": LEGACY, "layer_key_text.json": LEGACY,
    "dtype_e5m2.json": LEGACY, "dtype_missing.json": LEGACY,
    "model_type_missing.json": LEGACY, "model_type_number.json": LEGACY,
    "negative_scale.json": LEGACY, "zero_scale.json": LEGACY,
    "string_scale_numeric.json": LEGACY, "bool_scale.json": LEGACY,
    "null_scale.json": LEGACY, "kv_cache_array.json": LEGACY,
    "no_ranks.json": LEGACY, "float32_overflow_1e39.json": LEGACY,
    "kvcal_newer_version.json": KVCAL, "kvcal_fp8_max_240.json": KVCAL,
    "kvcal_granularity_channel.json": KVCAL, "kvcal_format_name_wrong.json": KVCAL,
    "kvcal_absmax_partial.json": KVCAL,
    "kvcal_int8_asym_offset_missing.json": KVCAL, "kvcal_int8_asym_offset_out_of_range.json": KVCAL,
    "kvcal_int8_asym_offset_fraction.json": KVCAL, "kvcal_int8_asym_qmax_127.json": KVCAL,
    "kvcal_int8_asym_zero_scale.json": KVCAL, "kvcal_offsets_on_int8.json": KVCAL,
}


def errors(path, schema_path):
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    with open(path) as f:
        doc = json.load(f)
    return list(jsonschema.Draft202012Validator(schema).iter_errors(doc))


def main():
    bad = 0
    for path, schema in VALID.items():
        e = errors(path, schema)
        if e:
            print(f"FAIL {path}: {e[0].message}")
            bad += 1
    for name, schema in SCHEMA_CATCHES.items():
        if not errors("tests/malformed/scales/" + name, schema):
            print(f"FAIL {name}: the schema accepts it")
            bad += 1
    print(f"{len(VALID) + len(SCHEMA_CATCHES) - bad} ok, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
