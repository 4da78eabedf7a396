"""The cache formats beyond e4m3 through the Python package (quantize_fmt,
dequantize_fmt, format_row_bytes, nvfp4_scale_offset) on the CPU path, against
torch implementations of each format's rules written here (include/kvcal_quant.h,
kvcal_kv_format): the e5m2 cast, int8 static and dynamic (vLLM's
int8_per_token_head) in both roundings, int8 with zero points static and dynamic
(LMDeploy's quant_policy=8), NVFP4 in vLLM's page layout (V's scales swizzled),
their dequantization, and the arguments' errors. Run with the other tests:
python -m unittest discover python/tests."""
import unittest
from fractions import Fraction

import numpy as np
import torch

import kvcal

F32 = torch.float32


def t32(x):
    return torch.tensor(x, dtype=F32)


def finite_or(x, fill):
    return torch.where(torch.isfinite(x), x, torch.full_like(x, fill))


def rand_kv(T, H, D, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, D, generator=g) * torch.exp(torch.randn(T, H, 1, generator=g) * 2.0)
    x = x.clamp(-3e4, 3e4)
    x[1, 0, :] = 0.0        # a row of zeros: the floor / flat parameters
    x[2, 0, 3] = float("inf")
    x[2, 0, 5] = float("nan")
    x[3, H - 1, :D // 2] = -0.0
    return x.to(dtype)


def paged(T, H, R, bs, nb, layout, dtype=torch.uint8):
    """Caches of R bytes a (slot, head) filled with 0xA5, NHD or HND by strides."""
    if layout == "HND":
        return tuple(torch.full((nb, H, bs, R), 0xA5, dtype=torch.uint8).view(dtype).permute(0, 2, 1, 3)
                     for _ in range(2))
    return tuple(torch.full((nb, bs, H, R), 0xA5, dtype=torch.uint8).view(dtype) for _ in range(2))


def rows_of(cache, slots):
    """(T, H, R) bytes of the caches' rows at slots (NHD view)."""
    nb, bs = cache.shape[0], cache.shape[1]
    return cache.contiguous().reshape(nb * bs, *cache.shape[2:])[slots].view(torch.uint8)


def per_row(x, scales, H):
    """scales of 1 or H values broadcast over (T, H, 1)."""
    return scales.reshape(1, -1, 1) if scales.numel() == H else scales.reshape(1, 1, 1)


# --- the formats' rules ----------------------------------------------------------

def ref_e5m2(x):
    xf = x.float()
    q = xf.clamp(-57344.0, 57344.0).to(torch.float8_e5m2).view(torch.uint8)
    return torch.where(torch.isnan(xf), torch.full_like(q, 0x7F), q)


def ref_int(y, rounding, lo, hi):
    r = torch.round(y) if rounding == "nearest_even" else torch.trunc(y)
    return torch.where(torch.isnan(y), torch.zeros_like(r), r.clamp(lo, hi)).to(torch.int64)


def ref_int8(x, scale, rounding):
    """(codes as uint8, scale) of x (T, H, D) under scale (T or 1, H or 1, 1)."""
    y = x.float() * (t32(1.0) / scale)
    return ref_int(y, rounding, -128, 127).to(torch.int8).view(torch.uint8)


def ref_int8_dynamic_scale(x):
    a = finite_or(x.float().abs(), 0.0).amax(-1, keepdim=True)
    return torch.clamp_min(a / t32(127.0), t32(1e-6))


def ref_asym(x, scale, zero, rounding):
    inv = torch.where(scale > 0, t32(1.0) / scale, torch.zeros_like(scale))
    return ref_int((x.float() - zero) * inv, rounding, 0, 255).to(torch.uint8)


def ref_asym_dynamic(x):
    xf = x.float()
    mn = finite_or(xf, float("inf")).amin(-1, keepdim=True)
    mx = finite_or(xf, float("-inf")).amax(-1, keepdim=True)
    none = mn > mx
    mn, mx = torch.where(none, 0.0, mn), torch.where(none, 0.0, mx)
    return (mx - mn) / t32(255.0), mn


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def ref_e2m1(y):
    """e2m1 codes of y: the nearest of the 8 magnitudes to min(|y|, 6), ties to the
    even code, the sign bit of y in bit 3, NaN -> 0."""
    a = torch.clamp(y.abs(), max=6.0).double()
    grid = torch.tensor(E2M1, dtype=torch.float64)
    d = (a.unsqueeze(-1) - grid).abs()
    best = d.min(-1, keepdim=True).values
    ties = d == best
    # among the nearest, the even code (the smaller when both are even: never)
    even = ties & (torch.arange(8) % 2 == 0)
    code = torch.where(even.any(-1), even.int().argmax(-1), ties.int().argmax(-1))
    code = code + 8 * torch.signbit(y).long()
    return torch.where(torch.isnan(y), torch.zeros_like(code), code)


def ref_nvfp4(x, g):
    """(data bytes (T, H, D/2), scale bytes (T, H, D/16)) of x under global scale g
    (broadcastable (1, H or 1, 1))."""
    T, H, D = x.shape
    xb = x.float().reshape(T, H, D // 16, 16)
    amax = finite_or(xb.abs(), 0.0).amax(-1)
    gb = g.reshape(1, -1, 1)
    sf = (amax * (t32(1.0) / t32(6.0))) * (t32(1.0) / gb)
    s = sf.clamp(max=448.0).to(torch.float8_e4m3fn)
    d = s.float() * gb
    inv_d = torch.where(d > 0, t32(1.0) / d, torch.zeros_like(d))
    codes = ref_e2m1(xb * inv_d.unsqueeze(-1)).reshape(T, H, D)
    data = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8)
    return data, s.view(torch.uint8)


def nvfp4_scale_at(kv, slot, head, s, H, D, bs, nhd=True):
    """The byte of block scale s of (slot, head) in a cache block's flat bytes
    (blocks contiguous), as include/kvcal_quant.h states vLLM's layout."""
    S, R = D // 16, D // 2 + D // 16
    block, t = divmod(slot, bs)
    ss = s
    if kv == 1 and bs % 4 == 0 and S % 4 == 0:
        sg = S // 4
        t, ss = t // 4 * 4 + s // sg, s % sg * 4 + t % 4
    row = t * H + head if nhd else head * bs + t
    return block * bs * H * R + bs * H * (D // 2) + row * S + ss


def fma32(q, s, z):
    """fmaf(q, s, z) element by element, exactly: the exact sum rounded once to fp32."""
    out = []
    for qi, si, zi in zip(q.reshape(-1).tolist(), s.reshape(-1).tolist(), z.reshape(-1).tolist()):
        exact = Fraction(qi) * Fraction(si) + Fraction(zi)
        f = np.float32(float(exact))
        cands = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
        best = min(cands, key=lambda c: (abs(Fraction(float(c)) - exact),
                                         int(np.array(c).view(np.uint32)) & 1))
        out.append(float(best))
    return torch.tensor(out, dtype=F32).reshape(q.shape)


def same(a, b):
    """Equal values, NaN equal to NaN."""
    return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


# --- tests -------------------------------------------------------------------------

T, H, D, BS, NB = 13, 3, 32, 4, 6


def slots_of(T, nb, bs, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randperm(nb * bs, generator=g)[:T].to(torch.int64)
    s[4] = -1  # padding
    return s


class E5m2(unittest.TestCase):
    def test_cast_bytes_and_values_equal_torch_float8_e5m2(self):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for layout in ("NHD", "HND"):
                with self.subTest(dtype=dtype, layout=layout):
                    k, v = rand_kv(T, H, D, dtype, 1), rand_kv(T, H, D, dtype, 2) * 1e4
                    slots = slots_of(T, NB, BS)
                    kc, vc = paged(T, H, D, BS, NB, layout)
                    kvcal.quantize_fmt(k, v, kc, vc, slots, "fp8_e5m2")
                    ok = slots >= 0
                    self.assertTrue(torch.equal(rows_of(kc, slots[ok]), ref_e5m2(k[ok])))
                    self.assertTrue(torch.equal(rows_of(vc, slots[ok]), ref_e5m2(v[ok])))
                    ko, vo = kvcal.dequantize_fmt(kc, vc, slots[ok].contiguous(), H, D, "fp8_e5m2")
                    want = rows_of(kc, slots[ok]).view(torch.float8_e5m2).float()
                    self.assertTrue(same(ko, want))

    def test_nan_is_0x7f_and_large_values_saturate_at_57344(self):
        x = torch.tensor([[[float("nan"), float("inf"), -1e6, 57344.0, 61440.0, 1.0]]])
        kc, vc = paged(1, 1, 6, 1, 1, "NHD")
        kvcal.quantize_fmt(x, x, kc, vc, torch.zeros(1, dtype=torch.int64), "fp8_e5m2")
        self.assertEqual(kc.reshape(-1).tolist(), [0x7F, 0x7B, 0xFB, 0x7B, 0x7B, 0x3C])


class Int8(unittest.TestCase):
    def test_static_per_tensor_and_per_head_in_both_roundings(self):
        for rounding in ("nearest_even", "toward_zero"):
            for per_head in (False, True):
                with self.subTest(rounding=rounding, per_head=per_head):
                    k, v = rand_kv(T, H, D, torch.bfloat16, 3), rand_kv(T, H, D, torch.float16, 4)
                    v = v.to(torch.bfloat16)
                    slots = slots_of(T, NB, BS, 1)
                    ks = torch.tensor([0.01, 0.2, 0.03]) if per_head else torch.tensor([0.05])
                    vs = torch.tensor([0.5, 0.02, 0.07]) if per_head else torch.tensor([0.04])
                    kc, vc = paged(T, H, D, BS, NB, "HND", torch.int8)
                    kvcal.quantize_fmt(k, v, kc, vc, slots, "int8", ks, vs, rounding=rounding)
                    ok = slots >= 0
                    self.assertTrue(torch.equal(rows_of(kc, slots[ok]),
                                                ref_int8(k[ok], per_row(k, ks, H), rounding)))
                    self.assertTrue(torch.equal(rows_of(vc, slots[ok]),
                                                ref_int8(v[ok], per_row(v, vs, H), rounding)))
                    ko, _ = kvcal.dequantize_fmt(kc, vc, slots[ok].contiguous(), H, D, "int8", ks, vs,
                                                 out_dtype="bfloat16")
                    want = rows_of(kc, slots[ok]).view(torch.int8).float() * per_row(k, ks, H)
                    self.assertTrue(same(ko, want.to(torch.bfloat16)))

    def test_dynamic_is_vllms_int8_per_token_head(self):
        k, v = rand_kv(T, H, D, torch.bfloat16, 5).float(), rand_kv(T, H, D, torch.float32, 6)
        slots = slots_of(T, NB, BS, 2)
        kc, vc = paged(T, H, D, BS, NB, "NHD", torch.int8)
        ksc, vsc = torch.zeros(NB, BS, H), torch.zeros(NB, BS, H)
        kvcal.quantize_fmt(k, v, kc, vc, slots, "int8", k_scale_cache=ksc, v_scale_cache=vsc,
                           rounding="toward_zero")
        ok = slots >= 0
        sk, sv = ref_int8_dynamic_scale(k[ok]), ref_int8_dynamic_scale(v[ok])
        self.assertTrue(torch.equal(ksc.reshape(-1, H)[slots[ok]], sk[..., 0]))
        self.assertTrue(torch.equal(vsc.reshape(-1, H)[slots[ok]], sv[..., 0]))
        self.assertTrue(torch.equal(rows_of(kc, slots[ok]), ref_int8(k[ok], sk, "toward_zero")))
        self.assertTrue(torch.equal(rows_of(vc, slots[ok]), ref_int8(v[ok], sv, "toward_zero")))
        self.assertEqual(float(sk[1, 0, 0]), float(t32(1e-6)))  # the zero row: the floor
        ko, vo = kvcal.dequantize_fmt(kc, vc, slots[ok].contiguous(), H, D, "int8",
                                      k_scale_cache=ksc, v_scale_cache=vsc)
        self.assertTrue(same(vo, rows_of(vc, slots[ok]).view(torch.int8).float() * sv))


class Int8Asym(unittest.TestCase):
    def test_static_zero_points_per_head(self):
        k, v = rand_kv(T, H, D, torch.bfloat16, 7), rand_kv(T, H, D, torch.bfloat16, 8)
        slots = slots_of(T, NB, BS, 3)
        ks, vs = torch.tensor([0.02, 0.05, 0.1]), torch.tensor([0.01, 0.01, 0.3])
        kz, vz = torch.tensor([-2.0, -0.5, 0.25]), torch.tensor([-1.0, -3.0, 0.0])
        kc, vc = paged(T, H, D, BS, NB, "NHD")
        kvcal.quantize_fmt(k, v, kc, vc, slots, "int8_asym", ks, vs, kz, vz)
        ok = slots >= 0
        want = ref_asym(k[ok], per_row(k, ks, H), per_row(k, kz, H), "nearest_even")
        self.assertTrue(torch.equal(rows_of(kc, slots[ok]), want))
        ko, _ = kvcal.dequantize_fmt(kc, vc, slots[ok][:3].contiguous(), H, D, "int8_asym", ks, vs,
                                     kz, vz)
        q = rows_of(kc, slots[ok][:3]).float()
        self.assertTrue(same(ko, fma32(q, per_row(q, ks, H).expand_as(q),
                                       per_row(q, kz, H).expand_as(q))))

    def test_dynamic_is_lmdeploys_min_max_per_token_head(self):
        for rounding in ("nearest_even", "toward_zero"):
            with self.subTest(rounding=rounding):
                k, v = rand_kv(T, H, D, torch.float16, 9), rand_kv(T, H, D, torch.float16, 10)
                slots = slots_of(T, NB, BS, 4)
                kc, vc = paged(T, H, D, BS, NB, "HND")
                sc = [torch.full((NB, H, BS), -1.0) for _ in range(4)]
                kvcal.quantize_fmt(k, v, kc, vc, slots, "int8_asym", k_scale_cache=sc[0],
                                   v_scale_cache=sc[1], k_zero_cache=sc[2], v_zero_cache=sc[3],
                                   rounding=rounding)
                ok = slots >= 0
                for x, c, s_, z_ in ((k, kc, sc[0], sc[2]), (v, vc, sc[1], sc[3])):
                    scale, zero = ref_asym_dynamic(x[ok])
                    flat = s_.permute(0, 2, 1).reshape(-1, H)[slots[ok]]
                    self.assertTrue(torch.equal(flat, scale[..., 0]))
                    self.assertTrue(torch.equal(z_.permute(0, 2, 1).reshape(-1, H)[slots[ok]],
                                                zero[..., 0]))
                    self.assertTrue(torch.equal(rows_of(c, slots[ok]),
                                                ref_asym(x[ok], scale, zero, rounding)))
                self.assertEqual(float(sc[0].permute(0, 2, 1).reshape(-1, H)[slots[1], 0]), 0.0)
                ko, _ = kvcal.dequantize_fmt(kc, vc, slots[ok][:2].contiguous(), H, D, "int8_asym",
                                             k_scale_cache=sc[0], v_scale_cache=sc[1],
                                             k_zero_cache=sc[2], v_zero_cache=sc[3])
                scale, zero = ref_asym_dynamic(k[ok][:2])
                q = rows_of(kc, slots[ok][:2]).float()
                self.assertTrue(same(ko, fma32(q, scale.expand_as(q), zero.expand_as(q))))


class Nvfp4(unittest.TestCase):
    def check(self, D, bs, layout, per_head):
        H_, T_ = 2, 11
        nb = (T_ + bs - 1) // bs + 2
        R = kvcal.format_row_bytes("nvfp4", D)
        self.assertEqual(R, D // 2 + D // 16)
        k, v = rand_kv(T_, H_, D, torch.bfloat16, 11), rand_kv(T_, H_, D, torch.bfloat16, 12)
        slots = slots_of(T_, nb, bs, 5)
        kg = torch.tensor([3.0 / 2688, 40.0 / 2688]) if per_head else torch.tensor([9.0 / 2688])
        vg = torch.tensor([0.5 / 2688, 1.0 / 2688]) if per_head else torch.tensor([1.0 / 2688])
        kc, vc = paged(T_, H_, R, bs, nb, layout)
        kvcal.quantize_fmt(k, v, kc, vc, slots, "nvfp4", kg, vg, layout=None)
        nhd = layout == "NHD"
        for kv, (x, c, g) in enumerate(((k, kc, kg), (v, vc, vg))):
            data, scales = ref_nvfp4(x, g)
            want = torch.full((nb * bs * H_ * R,), 0xA5, dtype=torch.uint8)
            for t in range(T_):
                s = int(slots[t])
                if s < 0:
                    continue
                block, off = divmod(s, bs)
                for h in range(H_):
                    row = off * H_ + h if nhd else h * bs + off
                    at = block * bs * H_ * R + row * (D // 2)
                    want[at:at + D // 2] = data[t, h]
                    for b in range(D // 16):
                        want[nvfp4_scale_at(kv, s, h, b, H_, D, bs, nhd)] = scales[t, h, b]
                        if kv == 1:
                            self.assertEqual(kvcal.nvfp4_scale_offset(kc, vc, 1, s, h, b, H_, D),
                                             nvfp4_scale_at(1, s, h, b, H_, D, bs, nhd))
            flat = c.permute(0, 2, 1, 3) if not nhd else c
            self.assertTrue(torch.equal(flat.contiguous().reshape(-1), want), "kv %d" % kv)
        ok = slots >= 0
        ko, vo = kvcal.dequantize_fmt(kc, vc, slots[ok].contiguous(), H_, D, "nvfp4", kg, vg)
        data, scales = ref_nvfp4(v[ok], vg)
        codes = torch.stack((data & 15, data >> 4), -1).reshape(-1, H_, D).long()
        mag = torch.tensor(E2M1)[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
        dec = scales.view(torch.float8_e4m3fn).float() * vg.reshape(1, -1, 1)
        self.assertTrue(same(vo, mag * dec.repeat_interleave(16, -1)))

    def test_bytes_and_block_scales_in_vllms_page_layout(self):
        self.check(64, 4, "NHD", False)   # V's scales swizzled: block_size and D / 16 multiples of 4
        self.check(64, 5, "NHD", True)    # not swizzled: block_size 5
        self.check(32, 4, "HND", True)    # not swizzled: D / 16 = 2

    def test_e2m1_rounds_to_nearest_even_and_saturates(self):
        x = torch.tensor([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 7.0, -0.1, float("nan"),
                          float("-inf"), -0.0, 0.0, 1.0])
        self.assertEqual(ref_e2m1(x).tolist(), [0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 0, 15, 8, 0, 2])
        k = x.reshape(1, 1, 16)
        kc, vc = paged(1, 1, 9, 1, 1, "NHD")
        # the block's decode scale is e4m3((7 / 6) / g) * g = g: the codes of x / g
        g = torch.tensor([7.0 / 6.0])
        kvcal.quantize_fmt(k, k, kc, vc, torch.zeros(1, dtype=torch.int64), "nvfp4", g, g)
        data, scales = ref_nvfp4(k, g)
        self.assertTrue(torch.equal(kc.reshape(-1), torch.cat((data.reshape(-1), scales.reshape(-1)))))


class Errors(unittest.TestCase):
    def setUp(self):
        self.k = rand_kv(5, 2, 16, torch.bfloat16, 20)
        self.kc, self.vc = paged(5, 2, 16, 2, 3, "NHD")
        self.s = torch.arange(5, dtype=torch.int64)

    def test_arguments_are_checked_and_named(self):
        k, kc, vc, s = self.k, self.kc, self.vc, self.s
        with self.assertRaisesRegex(ValueError, "kv_cache_dtype: 'int4'"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int4")
        with self.assertRaisesRegex(ValueError, "rounding: 'up'"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8", 1.0, 1.0, rounding="up")
        with self.assertRaisesRegex(ValueError, "key_cache: shape .* holds 2 kv heads x 16 bytes; "
                                                "head_dim 16 takes 9 bytes"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "nvfp4", 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, "head_dim: 8: nvfp4 needs a multiple of 16"):
            kvcal.quantize_fmt(k[..., :8], k[..., :8], kc[..., :8], vc[..., :8], s, "nvfp4", 1.0, 1.0)
        with self.assertRaisesRegex(TypeError, "key_cache: dtype int8, expected uint8 or "
                                               "float8_e5m2 \\(a fp8_e5m2 cache\\)"):
            kvcal.quantize_fmt(k, k, kc.view(torch.int8), vc, s, "fp8_e5m2")
        with self.assertRaisesRegex(ValueError, "k_scale, v_scale: pass both or neither"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8", k_scale=1.0)
        with self.assertRaisesRegex(ValueError, "k_scale, v_scale, k_zero, v_zero: one per tensor"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8_asym", 1.0, 1.0, torch.zeros(2), torch.zeros(2))
        with self.assertRaisesRegex(ValueError, "k_zero_cache: float32 of shape \\(3, 2\\)"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8_asym", k_scale_cache=torch.zeros(3, 2, 2),
                               v_scale_cache=torch.zeros(3, 2, 2), k_zero_cache=torch.zeros(3, 2),
                               v_zero_cache=torch.zeros(3, 2))
        with self.assertRaisesRegex(ValueError, "kv 1, slot 6, head 0, block_scale 0: outside"):
            c9 = paged(5, 2, 9, 2, 3, "NHD")
            kvcal.nvfp4_scale_offset(c9[0], c9[1], 1, 6, 0, 0, 2, 16)

    def test_the_library_names_what_a_format_takes(self):
        k, kc, vc, s = self.k, self.kc, self.vc, self.s
        with self.assertRaisesRegex(kvcal.KvcalError, "FP8_E5M2 is a cast: pass no scale"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "fp8_e5m2", 1.0, 1.0)
        with self.assertRaisesRegex(kvcal.KvcalError, "k_zero_cache / v_zero_cache: pass both"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8_asym", k_scale_cache=torch.zeros(3, 2, 2),
                               v_scale_cache=torch.zeros(3, 2, 2))
        with self.assertRaisesRegex(kvcal.KvcalError, "NVFP4 needs its global scales"):
            c9 = paged(5, 2, 9, 2, 3, "NHD")
            kvcal.quantize_fmt(k, k, c9[0], c9[1], s, "nvfp4")
        with self.assertRaisesRegex(kvcal.KvcalError, "k_scale\\[0\\] = 0: must be finite and > 0"):
            kvcal.quantize_fmt(k, k, kc, vc, s, "int8", 0.0, 1.0)

    def test_fp8_e4m3_goes_to_the_e4m3_entry_points(self):
        k, s = self.k, self.s
        kc, vc = paged(5, 2, 16, 2, 3, "NHD")
        kvcal.quantize_fmt(k, k, kc, vc, s, "fp8_e4m3", 0.01, 0.01)
        kc2, vc2 = paged(5, 2, 16, 2, 3, "NHD")
        kvcal.quantize_static(k, k, kc2, vc2, s, 0.01, 0.01)
        self.assertTrue(torch.equal(kc, kc2))


if __name__ == "__main__":
    unittest.main()
