#!/usr/bin/env python3
"""Writes tests/fixtures/fp8/e4m3fn_torch.bin: float32 inputs and the bytes
torch's float32 -> torch.float8_e4m3fn cast gives for them, the oracle of
fp8_matches_torch_e4m3fn_casts in tests/test_fp8.c.

Inputs: the value of every finite code, every midpoint between neighbours and
the floats next to it, values beyond 448 and infinities (torch saturates them
on the CPU, as kvcal does), float subnormals, and random floats of both signs
over 2^-14 .. 2^10. NaN is left out: kvcal writes every NaN as 0x7f, torch
keeps the sign bit.

Layout: uint32 count (little-endian), count float32 inputs, count uint8 codes.
Run from the repository root: python3 tests/make_fp8_fixture.py
"""
import struct

import torch

OUT = "tests/fixtures/fp8/e4m3fn_torch.bin"


def main():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = codes.view(torch.float8_e4m3fn).to(torch.float32)
    finite = values[torch.isfinite(values)]
    pos = torch.sort(finite[finite >= 0]).values.to(torch.float64)
    mids = ((pos[1:] + pos[:-1]) / 2).to(torch.float32)
    up = torch.nextafter(mids, torch.full_like(mids, 1e9))
    down = torch.nextafter(mids, torch.zeros_like(mids))
    special = torch.tensor([448.0, 449.0, 463.99, 464.0, 465.0, 480.0, 1e4, 3e38,
                            float("inf"), 1e-40, 1e-45, 0.0009765625, 0.0009766,
                            0.0], dtype=torch.float32)
    gen = torch.Generator().manual_seed(20240601)
    mant = 1.0 + torch.rand(3000, generator=gen, dtype=torch.float64)
    expo = torch.randint(-14, 10, (3000,), generator=gen).to(torch.float64)
    rand = (mant * torch.pow(2.0, expo)).to(torch.float32)
    base = torch.cat([finite, mids, up, down, special, rand])
    x = torch.cat([base, -base])
    y = x.to(torch.float8_e4m3fn).view(torch.uint8)
    with open(OUT, "wb") as f:
        f.write(struct.pack("<I", x.numel()))
        f.write(x.numpy().astype("<f4").tobytes())
        f.write(y.numpy().tobytes())
    print(f"{OUT}: {x.numel()} values (torch {torch.__version__})")


if __name__ == "__main__":
    main()
