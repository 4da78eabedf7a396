"""Bad arguments to the kvcal package on the CPU path: each is refused with
one line naming the argument (never a crash, an out-of-bounds access or a
silently wrong result), and the good neighbours of each bad case still pass.
Run: python -m unittest discover python/tests (KVCAL_LIBRARY names the
libkvcal.so to test)."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import kvcal

T, H, D = 5, 2, 16


def kv(T=T, H=H, D=D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, H, D, generator=g).to(dtype), torch.randn(T, H, D, generator=g).to(dtype)


def cache(nb=4, bs=4, H=H, R=D, dtype=torch.uint8):
    return torch.zeros(nb, bs, H, R, dtype=dtype), torch.zeros(nb, bs, H, R, dtype=dtype)


def scale_cache(nb=4, bs=4, H=H):
    return torch.zeros(nb, bs, H), torch.zeros(nb, bs, H)


def slots(n=T):
    return torch.arange(n, dtype=torch.int64)


class Interface:
    """An object with only numpy's __array_interface__, of any shape over a
    small buffer: what an oversized array looks like to the package."""

    def __init__(self, shape, typestr, buf):
        self.buf = buf
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "version": 3,
                                    "data": (buf.__array_interface__["data"][0], False),
                                    "strides": None}


class Caches(unittest.TestCase):
    def test_an_expanded_cache_is_refused_not_written_out_of_bounds(self):
        # block stride 0 reached the library as "contiguous": 4 blocks written
        # into the memory of one (a segfault); run apart so a crash is a failure
        code = ("import torch, kvcal\n"
                "k = torch.randn(5, 2, 16)\n"
                "kc = torch.zeros(1, 4, 2, 16, dtype=torch.uint8).expand(1000, 4, 2, 16)\n"
                "s = torch.tensor([0, 1000, 2000, 3000, 3999])\n"
                "for c in (kc, kc[:, 0]):\n"
                "    try:\n"
                "        kvcal.quantize_static(k, k, c, c.clone() if c.dim() == 3 else c, s[:5], 0.1, 0.1)\n"
                "    except ValueError as e:\n"
                "        print(e)\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=os.environ, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 2, p.stdout)
        self.assertRegex(lines[0], r"key_cache: strides \(0, 32, 16, 1\): blocks overlap")
        self.assertRegex(lines[1], r"key_cache: strides \(0, 16, 1\): slots overlap")

    def test_a_negative_block_stride_is_refused_by_name(self):
        kc = np.zeros((4, 4, H, D), np.uint8)[::-1]
        k, v = kv()
        with self.assertRaisesRegex(ValueError, r"key_cache: strides \(-128, .*blocks overlap"):
            kvcal.quantize_static(k, v, kc, kc.copy()[::-1], slots(), 0.1, 0.1)

    def test_an_empty_cache_is_refused_by_name(self):
        k, v = kv()
        for nb, bs in ((0, 4), (4, 0)):
            kc, vc = cache(nb, bs)
            with self.assertRaisesRegex(ValueError, "key_cache: shape .* holds no slot"):
                kvcal.quantize_static(k, v, kc, vc, slots(), 0.1, 0.1)

    def test_one_array_as_both_caches_is_refused(self):
        k, v = kv()
        kc, _ = cache()
        with self.assertRaisesRegex(ValueError, "key_cache and value_cache share memory"):
            kvcal.quantize_static(k, v, kc, kc, slots(), 0.1, 0.2)
        kc, vc = cache()
        ks, _ = scale_cache()
        with self.assertRaisesRegex(ValueError, "k_scale_cache and v_scale_cache share memory"):
            kvcal.quantize_dynamic(k, v, kc, vc, slots(), ks, ks)
        with self.assertRaisesRegex(ValueError, "k_scale_cache and k_zero_cache share memory"):
            ks, vs = scale_cache()
            kvcal.quantize_fmt(k, v, kc, vc, slots(), "int8_asym", k_scale_cache=ks,
                               v_scale_cache=vs, k_zero_cache=ks, v_zero_cache=vs)

    def test_interleaved_k_and_v_of_one_allocation_still_pass(self):
        k, v = kv()
        buf = torch.zeros(4, 2, 4, H, D, dtype=torch.uint8)
        kvcal.quantize_static(k, v, buf[:, 0], buf[:, 1], slots(), 0.1, 0.2)
        kc, vc = cache()
        kvcal.quantize_static(k, v, kc, vc, slots(), 0.1, 0.2)
        self.assertTrue(torch.equal(buf[:, 0], kc) and torch.equal(buf[:, 1], vc))

    def test_a_read_only_numpy_cache_is_refused_and_a_read_only_input_taken(self):
        k, v = kv()
        kc = np.zeros((4, 4, H, D), np.uint8)
        kc.setflags(write=False)
        with self.assertRaisesRegex(ValueError, "key_cache: a read-only array"):
            kvcal.quantize_static(k, v, kc, np.zeros_like(kc), slots(), 0.1, 0.1)
        kn = k.numpy().copy()
        kn.setflags(write=False)
        kc, vc = cache()
        kvcal.quantize_static(kn, v, kc, vc, slots(), 0.1, 0.1)
        kc2, vc2 = cache()
        kvcal.quantize_static(k, v, kc2, vc2, slots(), 0.1, 0.1)
        self.assertTrue(torch.equal(kc, kc2))

    def test_layout_is_checked_for_a_3d_cache_too(self):
        k, v = kv()
        kc = torch.zeros(16, H, D, dtype=torch.uint8)
        with self.assertRaisesRegex(ValueError, "layout: 'nhd', expected 'NHD' or 'HND'"):
            kvcal.quantize_static(k, v, kc, kc.clone(), slots(), 0.1, 0.1, layout="nhd")

    def test_a_block_size_beyond_a_c_int_is_refused_not_wrapped(self):
        k, v = kv(T=1, H=1)
        buf = np.zeros(64, np.uint8)
        big = Interface((1, 2 ** 32 + 1, 1, D), "|u1", buf)
        with self.assertRaisesRegex(ValueError, "key_cache: shape .*: block_size 4294967297"):
            kvcal.quantize_static(k, v, big, Interface((1, 2 ** 32 + 1, 1, D), "|u1", buf),
                                  torch.tensor([3]), 0.1, 0.1)


class Inputs(unittest.TestCase):
    def test_a_head_dim_beyond_a_c_int_is_refused_not_wrapped(self):
        buf = np.ones(64, np.float32)
        k = Interface((1, 1, 2 ** 32 + 16), "<f4", buf)
        c = Interface((1, 1, 1, 2 ** 32 + 16), "|u1", np.zeros(64, np.uint8))
        with self.assertRaisesRegex(ValueError, "key: shape .*num_kv_heads and head_dim"):
            kvcal.quantize_static(k, k, c, c, torch.tensor([0]), 0.1, 0.1)

    def test_key_rows_out_of_order_are_refused_by_name(self):
        k, v = kv()
        kc, vc = cache()
        for bad in (k.transpose(0, 1).contiguous().transpose(0, 1), k[:1].expand(T, H, D)):
            with self.assertRaisesRegex(ValueError, r"key: strides .*pass key.contiguous\(\)"):
                kvcal.quantize_static(bad, v, kc, vc, slots(), 0.1, 0.1)

    def test_a_sparse_tensor_is_refused_by_name(self):
        k, v = kv()
        kc, vc = cache()
        with self.assertRaisesRegex(TypeError, "key: a torch.sparse_coo tensor"):
            kvcal.quantize_static(k.to_sparse(), v, kc, vc, slots(), 0.1, 0.1)

    def test_numpy_dtypes_are_named(self):
        k, v = kv()
        kc, vc = cache()
        for arr, name in ((np.zeros((T, H, D)), "float64"), (np.zeros((T, H, D), bool), "bool"),
                          (np.zeros((T, H, D), ">f4"), "big-endian")):
            with self.assertRaisesRegex(TypeError, "key: dtype %s" % name):
                kvcal.quantize_static(arr, v, kc, vc, slots(), 0.1, 0.1)

    def test_a_non_contiguous_static_scale_is_refused(self):
        # a (2, 2) view of a (2, 4) tensor was read as its first 4 values
        k, v = kv(H=4)
        kc, vc = cache(H=4)
        s = torch.tensor([[0.1, 0.2, 9.0, 9.0], [0.3, 0.4, 9.0, 9.0]])[:, :2]
        with self.assertRaisesRegex(ValueError, r"k_scale: strides \(4, 1\): must be contiguous"):
            kvcal.quantize_static(k, v, kc, vc, slots(), s, s.contiguous())
        kvcal.quantize_static(k, v, kc, vc, slots(), s.contiguous(), s.contiguous())


class Dequantize(unittest.TestCase):
    def setUp(self):
        self.k, self.v = kv()
        self.kc, self.vc = cache()
        kvcal.quantize_static(self.k, self.v, self.kc, self.vc, slots(), 0.1, 0.2)

    def test_bad_static_scales_are_refused(self):
        for ks in (float("nan"), 0.0, -1.0, float("inf")):
            with self.assertRaisesRegex(ValueError, "k_scale: .*: a scale must be finite and > 0"):
                kvcal.dequantize(self.kc, self.vc, slots(), H, D, ks, 0.2)
        with self.assertRaisesRegex(kvcal.KvcalError, r"v_scale\[1\] = nan"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, D, torch.tensor([0.1, 0.1]),
                             torch.tensor([0.2, float("nan")]))
        kc, vc = cache(dtype=torch.uint8)
        kvcal.quantize_fmt(self.k, self.v, kc, vc, slots(), "int8_asym", 0.05, 0.05, 0.0, 0.0)
        with self.assertRaisesRegex(ValueError, "k_zero: inf: a zero must be finite"):
            kvcal.dequantize_fmt(kc, vc, slots(), H, D, "int8_asym", 0.05, 0.05, float("inf"), 0.0)
        with self.assertRaisesRegex(kvcal.KvcalError, r"k_zero\[0\] = nan"):
            kvcal.dequantize_fmt(kc, vc, slots(), H, D, "int8_asym", 0.05, 0.05,
                                 torch.tensor([float("nan")]), torch.tensor([0.0]))

    def test_per_head_and_per_tensor_scales_mixed_are_refused(self):
        # v_scale's one value was read as num_kv_heads values
        with self.assertRaisesRegex(ValueError, "k_scale and v_scale: one per tensor and one per head"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, D, torch.tensor([0.1, 0.1]), 0.2)

    def test_outputs_given_alone_aliased_or_read_only_are_refused(self):
        o = torch.zeros(T, H, D)
        with self.assertRaisesRegex(ValueError, "out_key, out_value: out_key given alone"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, D, 0.1, 0.2, out_key=o)
        with self.assertRaisesRegex(ValueError, "out_key and out_value share memory"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, D, 0.1, 0.2, out_key=o, out_value=o)
        with self.assertRaisesRegex(ValueError, "out_key and out_value share memory"):
            kvcal.dequantize_fmt(self.kc, self.vc, slots(), H, D, "fp8_e4m3", 0.1, 0.2,
                                 out_key=o, out_value=o)
        ro = np.zeros((T, H, D), np.float32)
        ro.setflags(write=False)
        with self.assertRaisesRegex(ValueError, "out_key: a read-only array"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, D, 0.1, 0.2, out_key=ro,
                             out_value=np.zeros_like(ro))

    def test_out_dtype_is_checked_by_name(self):
        for bad in ("float64", "foo", None, ["float32"]):
            with self.assertRaisesRegex(ValueError, "out_dtype: .*, expected 'float32', 'float16' "
                                                    "or 'bfloat16'"):
                kvcal.dequantize(self.kc, self.vc, slots(), H, D, 0.1, 0.2, out_dtype=bad)
        for good, want in (("half", torch.float16), (torch.bfloat16, torch.bfloat16),
                           (np.float16, torch.float16)):
            ok, _ = kvcal.dequantize(self.kc, self.vc, slots(), H, D, 0.1, 0.2, out_dtype=good)
            self.assertEqual(ok.dtype, want)

    def test_allocated_outputs_are_zero_where_a_slot_is_skipped(self):
        s = torch.tensor([0, 99, -1, 2, 3])
        for _ in range(20):
            junk = torch.full((T, H, D), float("nan"))
            del junk
            ok, ov = kvcal.dequantize(self.kc, self.vc, s, H, D, 0.1, 0.2)
            self.assertEqual(ok[1:3].abs().sum().item(), 0.0)
            self.assertEqual(ov[1:3].abs().sum().item(), 0.0)

    def test_sizes_are_integers(self):
        with self.assertRaisesRegex(TypeError, "num_kv_heads: None is not an integer"):
            kvcal.dequantize(self.kc, self.vc, slots(), None, D, 0.1, 0.2)
        with self.assertRaisesRegex(TypeError, "num_kv_heads: 2.5 is not an integer"):
            kvcal.dequantize_fmt(self.kc, self.vc, slots(), 2.5, D, "fp8_e4m3", 0.1, 0.2)
        with self.assertRaisesRegex(ValueError, "head_dim: -16 out of"):
            kvcal.dequantize(self.kc, self.vc, slots(), H, -16, 0.1, 0.2)

    def test_a_format_dequantization_without_parameters_is_named(self):
        kc, vc = cache(dtype=torch.int8)
        with self.assertRaisesRegex(ValueError, "k_scale, v_scale: pass the static scales or the "
                                                "scale caches"):
            kvcal.dequantize_fmt(kc, vc, slots(), H, D, "int8")


class Integers(unittest.TestCase):
    """ctypes wraps a Python int around into a C int without a word: each
    count or index beyond one is refused, as is a non-integer."""

    def test_counts_and_indices_beyond_a_c_int_are_refused(self):
        with self.assertRaisesRegex(ValueError, "num_kv_heads: 4294967298 out of"):
            kvcal.Scaler(2 ** 32 + 2)
        with self.assertRaisesRegex(ValueError, "num_layers: 4294967298 out of"):
            kvcal.Scales(2 ** 32 + 2, 2)
        with self.assertRaisesRegex(ValueError, "head_dim: 4294967312 out of"):
            kvcal.format_row_bytes("nvfp4", 2 ** 32 + 16)
        s = kvcal.Scales(2, H)
        s.set_layer(0, 0.1, 0.2)
        with self.assertRaisesRegex(ValueError, "layer: 4294967296 out of"):
            s.get_head(2 ** 32, 0)
        with self.assertRaisesRegex(ValueError, "layer: 4294967296 out of"):
            s.set_head(2 ** 32, 1, 0.5, 0.5)
        c = kvcal.Calibrator(2, H, D)
        k, v = kv()
        with self.assertRaisesRegex(ValueError, "layer: 4294967296 out of"):
            c.observe(2 ** 32, k, v)
        self.assertEqual(c.tokens(), ([0, 0], 0))
        R = kvcal.format_row_bytes("nvfp4", 32)
        kc, vc = cache(H=H, R=R)
        with self.assertRaisesRegex(ValueError, "head: 4294967297 out of"):
            kvcal.nvfp4_scale_offset(kc, vc, 0, 0, 2 ** 32 + 1, 0, H, 32)

    def test_non_integers_are_refused_by_name(self):
        with self.assertRaisesRegex(TypeError, "num_layers: 2.5 is not an integer"):
            kvcal.Scales(2.5, 2)
        with self.assertRaisesRegex(TypeError, "num_layers: 2.5 is not an integer"):
            kvcal.Calibrator(2.5, H, D)
        with self.assertRaisesRegex(TypeError, "head_dim: 16.5 is not an integer"):
            kvcal.format_row_bytes("nvfp4", 16.5)
        with self.assertRaisesRegex(ValueError, "head_dim: -5 out of"):
            kvcal.format_row_bytes("int8", -5)
        with self.assertRaisesRegex(TypeError, "layer: 0.5 is not an integer"):
            kvcal.Scales(2, H).get_head(0.5, 0)
        with self.assertRaisesRegex(TypeError, "kv: 0.5 is not an integer"):
            kc, vc = cache(R=kvcal.format_row_bytes("nvfp4", 32))
            kvcal.nvfp4_scale_offset(kc, vc, 0.5, 0, 0, 0, H, 32)
        with self.assertRaisesRegex(TypeError, "k_scale: '0.1' is not a number"):
            kvcal.Scales(2, H).set_layer(0, "0.1", 0.2)
        with self.assertRaisesRegex(ValueError, "tp: -1 out of"):
            kvcal.load("x.json", tp=-1)
        self.assertEqual(kvcal.Scales(2.0, np.int64(2)).num_layers, 2)


class Objects(unittest.TestCase):
    def test_names_and_choices_of_the_wrong_type_are_named(self):
        k, v = kv()
        kc, vc = cache(dtype=torch.int8)
        with self.assertRaisesRegex(ValueError, r"kv_cache_dtype: \['int8'\], expected"):
            kvcal.quantize_fmt(k, v, kc, vc, slots(), ["int8"], 0.05, 0.05)
        with self.assertRaisesRegex(ValueError, r"rounding: \['toward_zero'\], expected"):
            kvcal.quantize_fmt(k, v, kc, vc, slots(), "int8", 0.05, 0.05, rounding=["toward_zero"])
        with self.assertRaisesRegex(ValueError, r"mode: \['ema'\], expected"):
            kvcal.Scaler(H, ["ema"])
        with self.assertRaisesRegex(ValueError, r"granularity: \['head'\], expected"):
            kvcal.Scales(2, H).granularity = ["head"]
        with self.assertRaisesRegex(ValueError, r"format: \['kvcal'\], expected"):
            kvcal.Scales(2, H).write("x.json", ["kvcal"])
        with self.assertRaisesRegex(TypeError, "observer: 5, expected a string"):
            kvcal.Calibrator(2, H, D, observer=5)

    def test_paths_are_checked_by_name(self):
        s = kvcal.Scales(1, H)
        s.set_layer(0, 0.1, 0.1)
        with self.assertRaisesRegex(TypeError, "path: None, expected a path"):
            s.write(None)
        with self.assertRaisesRegex(TypeError, "path: 5 is not a path"):
            s.write(5)
        with self.assertRaisesRegex(TypeError, "path: None, expected a path"):
            kvcal.load(None)
        with tempfile.TemporaryDirectory() as d:
            s.write(os.path.join(d, "s.json"))
            self.assertAlmostEqual(kvcal.load(os.path.join(d, "s.json")).get_tensor(0)[0], 0.1)

    def test_a_calibrator_merges_others_only(self):
        c = kvcal.Calibrator(2, H, D)
        k, v = kv()
        c.observe(0, k, v)
        with self.assertRaisesRegex(ValueError, "other: this calibrator itself"):
            c.merge(c)
        self.assertEqual(c.tokens(), ([T, 0], 0))
        with self.assertRaisesRegex(TypeError, "other: NoneType, expected a Calibrator"):
            c.merge(None)
        with self.assertRaisesRegex(TypeError, "data: NoneType, expected the bytes"):
            kvcal.Calibrator.from_bytes(None)
        d = kvcal.Calibrator.from_bytes(bytearray(c.to_bytes()))
        c.merge(d)
        self.assertEqual(c.tokens(), ([2 * T, 0], 0))


if __name__ == "__main__":
    unittest.main()
