#!/usr/bin/env python3
"""Writes tests/fixtures/int8_asym/c8_torch.bin: the oracle of
int8_asym_params_and_round_trip_match_modelslim_and_vllm_ascend in
tests/test_int8_asym.c.

Per case, a signed range [lo, hi] and, computed in torch float32 as the
engines' sources state them (written from the formulas, not their code):
- ModelSlim's asymmetric signed-int8 parameters
  (msmodelslim/ir/api/impl/int_quantization.py, calculate_int_qparam): the
  range widened to hold 0, scale = max(hi / 255 - lo / 255, eps of float32),
  offset = round(-lo / scale) (half to even) - 128;
- vllm-ascend's C8 store and its unpaged-prefill read
  (vllm_ascend/attention/attention_v1.py, _quantize_kv_to_int8 and
  _forward_c8_fused_infer_attention): q = clamp(round(x * (1 / scale) +
  offset), -128, 127), x' = (q - offset) * scale, on 64 values spread over
  1.25 times the range (so some clamp).
The cases: hand-picked ranges (one side empty, all zero, a range not
holding 0, a tiny one under the floor), ranges whose -lo / scale falls on
an exact half (round half to even decides), and random ranges.

Layout (little-endian): uint32 cases; per case float32 lo, hi, scale,
offset, then 64 float32 x and 64 float32 x'.
Run from the repository root: python3 tests/make_int8_asym_fixture.py
"""
import os
import random
import struct

import torch

OUT = "tests/fixtures/int8_asym/c8_torch.bin"
VALUES = 64


def params(lo, hi):
    lo = torch.minimum(torch.tensor(lo, dtype=torch.float32), torch.tensor(0.0))
    hi = torch.maximum(torch.tensor(hi, dtype=torch.float32), torch.tensor(0.0))
    eps = torch.tensor(torch.finfo(torch.float32).eps)
    scale = torch.maximum(hi / 255 - lo / 255, eps)
    offset = torch.round(-lo / scale) - 128
    return scale, offset


def store_and_read(x, scale, offset):
    inv = 1.0 / scale
    q = torch.clamp(torch.round(x * inv + offset), -128, 127)
    return (q - offset) * scale


def half_way_cases(count):
    """Ranges whose -lo / scale is an exact half in float32."""
    found = []
    for e in range(-6, 4):
        for k in range(1, 254):
            lo = -(k + 0.5) * 2.0 ** e
            hi = (254.5 - k) * 2.0 ** e
            s, _ = params(lo, hi)
            t = float(-torch.tensor(lo, dtype=torch.float32) / s)
            if t - int(t) == 0.5:
                found.append((lo, hi))
                if len(found) == count:
                    return found
    return found


def main():
    rng = random.Random(23)
    cases = [(-1.0, 3.0), (-2.55, 0.0), (0.0, 0.0), (1.0, 2.0), (-3.0, -1.0),
             (-0.3, 0.2), (-5e-8, 5e-8), (-22.3, 15.6), (-1e-3, 40.0)]
    cases += half_way_cases(6)
    for _ in range(40):
        a = rng.uniform(-30.0, 5.0) * 10.0 ** rng.randint(-3, 1)
        b = rng.uniform(-5.0, 30.0) * 10.0 ** rng.randint(-3, 1)
        cases.append((min(a, b), max(a, b)))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(struct.pack("<I", len(cases)))
        for lo, hi in cases:
            scale, offset = params(lo, hi)
            span = max(hi - lo, 1e-6) * 1.25
            mid = (hi + lo) / 2
            x = torch.tensor([mid - span / 2 + span * i / (VALUES - 1) for i in range(VALUES)],
                             dtype=torch.float32)
            y = store_and_read(x, scale, offset)
            f.write(struct.pack("<4f", lo, hi, float(scale), float(offset)))
            f.write(x.numpy().astype("<f4").tobytes())
            f.write(y.numpy().astype("<f4").tobytes())
    print(f"{len(cases)} cases into {OUT}")


if __name__ == "__main__":
    main()
