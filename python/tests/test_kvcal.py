"""The kvcal Python package on the CPU path, with torch CPU tensors: every
operation's bytes against a torch reference of kvcal's arithmetic
(include/kvcal_quant.h: q = e4m3(x * (1 / scale)) in fp32, round to nearest
even, saturating at 448; dynamic scales max(absmax / 448, 1 / (448 * 512))),
the two engine drop-ins, scale files, the calibrator, argument errors, and
objects that are no torch tensor. Run: python -m unittest discover python/tests
(KVCAL_LIBRARY names the libkvcal.so to test)."""
import os
import subprocess
import sys
import tempfile
import unittest

import torch

import kvcal

FLOOR = torch.tensor(1.0) / torch.tensor(448.0 * 512.0)  # fp32, as the library


def ref_quantize(x, scale):
    """(..., D) x quantized with scale (broadcastable fp32): e4m3 bytes."""
    inv = torch.tensor(1.0) / scale.float()
    q = (x.float() * inv).clamp(-448.0, 448.0)
    return q.to(torch.float8_e4m3fn).view(torch.uint8)


def ref_dynamic_scale(x):
    """(T, H, D) -> (T, H) fp32 scales of finite values."""
    a = x.float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return torch.clamp_min(a.amax(-1) / 448.0, FLOOR)


def rand_kv(T, H, D, dtype, seed, spread=4.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, D, generator=g) * torch.exp(torch.randn(T, H, 1, generator=g) * spread)
    return x.clamp(-3e4, 3e4).to(dtype)  # finite in float16 too


def make_cache(num_blocks, block_size, H, D, layout="NHD", interleaved=False):
    """Caches filled with 0xFF (never written by kvcal): NHD, HND through the
    strides of vLLM's NHD shape, or K and V interleaved per block."""
    if interleaved:
        kv = torch.full((num_blocks, 2, block_size, H, D), 0xFF, dtype=torch.uint8)
        return kv[:, 0], kv[:, 1]
    if layout == "HND":
        k = torch.full((num_blocks, H, block_size, D), 0xFF, dtype=torch.uint8)
        v = torch.full((num_blocks, H, block_size, D), 0xFF, dtype=torch.uint8)
        return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    return (torch.full((num_blocks, block_size, H, D), 0xFF, dtype=torch.uint8),
            torch.full((num_blocks, block_size, H, D), 0xFF, dtype=torch.uint8))


def gather(cache, slots):
    """cache rows (num_blocks, block_size, H, D) at slots -> (T, H, D)."""
    nb, bs = cache.shape[0], cache.shape[1]
    flat = cache.reshape(nb * bs, *cache.shape[2:]) if cache.is_contiguous() else \
        cache.contiguous().reshape(nb * bs, *cache.shape[2:])
    return flat[slots]


class QuantizeStatic(unittest.TestCase):
    def check(self, dtype, layout, per_head, interleaved=False, T=19, H=3, D=72, bs=5):
        k, v = rand_kv(T, H, D, dtype, 1), rand_kv(T, H, D, dtype, 2)
        nb = 9
        slots = torch.randperm(nb * bs)[:T].to(torch.int64)
        if T > 4:
            slots[4] = -1  # padding
        kc, vc = make_cache(nb, bs, H, D, layout, interleaved)
        if per_head:
            ks = (k.float().abs().amax((0, 2)) / 300.0).contiguous()
            vs = (v.float().abs().amax((0, 2)) / 500.0).contiguous()
        else:
            ks = (k.float().abs().amax() / 300.0).reshape(1)
            vs = (v.float().abs().amax() / 500.0).reshape(1)
        kvcal.quantize_static(k, v, kc, vc, slots, ks, vs)
        valid = slots >= 0
        shape = (H, 1) if per_head else (1,)
        want_k = ref_quantize(k[valid], ks.reshape(shape))
        want_v = ref_quantize(v[valid], vs.reshape(shape))
        self.assertTrue(torch.equal(gather(kc, slots[valid]), want_k))
        self.assertTrue(torch.equal(gather(vc, slots[valid]), want_v))
        # nothing else of the cache was touched
        untouched = torch.ones(nb * bs, dtype=torch.bool)
        untouched[slots[valid]] = False
        flat = kc.contiguous().reshape(nb * bs, H, D)
        self.assertTrue(bool((flat[untouched] == 0xFF).all()))

    def test_bytes_equal_torch_reference_every_dtype_layout_granularity(self):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for layout in ("NHD", "HND"):
                for per_head in (False, True):
                    with self.subTest(dtype=dtype, layout=layout, per_head=per_head):
                        self.check(dtype, layout, per_head)

    def test_interleaved_kv_blocks_and_odd_shapes(self):
        self.check(torch.bfloat16, "NHD", True, interleaved=True)
        self.check(torch.float16, "NHD", False, T=1, H=1, D=1, bs=1)

    def test_float_scales_and_scale_caches(self):
        k, v = rand_kv(7, 2, 16, torch.bfloat16, 3), rand_kv(7, 2, 16, torch.bfloat16, 4)
        kc, vc = make_cache(4, 2, 2, 16)
        ksc = torch.zeros(4, 2, 2)
        vsc = torch.zeros(4, 2, 2)
        slots = torch.arange(7, dtype=torch.int64)
        kvcal.quantize_static(k, v, kc, vc, slots, 0.05, 0.02, k_scale_cache=ksc,
                              v_scale_cache=vsc)
        self.assertTrue(torch.equal(gather(kc, slots), ref_quantize(k, torch.tensor(0.05))))
        self.assertTrue(bool((ksc.reshape(8, 2)[:7] == torch.tensor(0.05)).all()))
        self.assertTrue(bool((vsc.reshape(8, 2)[:7] == torch.tensor(0.02)).all()))

    def test_nan_is_stored_as_0x7f_and_inf_saturates(self):
        k = torch.tensor([[[float("nan"), float("inf"), -float("inf"), 1e9]]])
        kc, vc = make_cache(1, 1, 1, 4)
        kvcal.quantize_static(k, k, kc, vc, torch.zeros(1, dtype=torch.int64), 1.0, 1.0)
        self.assertEqual(kc.reshape(-1).tolist(), [0x7F, 0x7E, 0xFE, 0x7E])


class Dynamic(unittest.TestCase):
    def test_bytes_and_scales_equal_torch_reference(self):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for layout in ("NHD", "HND"):
                with self.subTest(dtype=dtype, layout=layout):
                    T, H, D, bs, nb = 23, 4, 40, 4, 8
                    k, v = rand_kv(T, H, D, dtype, 5), rand_kv(T, H, D, dtype, 6)
                    k[3, 1] = 0  # a zero row: the floor scale
                    slots = torch.randperm(nb * bs)[:T].to(torch.int64)
                    kc, vc = make_cache(nb, bs, H, D, layout)
                    shape = (nb, bs, H) if layout == "NHD" else (nb, H, bs)
                    ksc, vsc = torch.zeros(shape), torch.zeros(shape)
                    kvcal.quantize_dynamic(k, v, kc, vc, slots, ksc, vsc, layout=None)
                    sk, sv = ref_dynamic_scale(k), ref_dynamic_scale(v)
                    got_sk = ksc.reshape(nb * bs, H) if layout == "NHD" else \
                        ksc.permute(0, 2, 1).reshape(nb * bs, H)
                    self.assertTrue(torch.equal(got_sk[slots], sk))
                    self.assertTrue(torch.equal(gather(kc, slots), ref_quantize(k, sk[..., None])))
                    self.assertTrue(torch.equal(gather(vc, slots), ref_quantize(v, sv[..., None])))


class ScalerAndDequantize(unittest.TestCase):
    def test_running_max_scaler_over_steps_equals_reference(self):
        H, D, bs, nb = 2, 8, 4, 16
        sc = kvcal.Scaler(H, "running_max")
        kc, vc = make_cache(nb, bs, H, D)
        ksc, vsc = torch.zeros(nb, bs, H), torch.zeros(nb, bs, H)
        run_k = torch.zeros(H)
        pos = 0
        for step, T in enumerate((9, 1, 1, 5)):
            k = rand_kv(T, H, D, torch.bfloat16, 10 + step, spread=2.0)
            v = rand_kv(T, H, D, torch.bfloat16, 20 + step, spread=2.0)
            slots = torch.arange(pos, pos + T, dtype=torch.int64)
            pos += T
            sc.quantize(k, v, kc, vc, slots, ksc, vsc)
            run_k = torch.maximum(run_k, k.float().abs().amax((0, 2)))
            want = torch.clamp_min(run_k / 448.0, FLOOR)
            got_k, _, steps = sc.read()
            self.assertEqual(got_k, want.tolist())
            self.assertEqual(steps, step + 1)
            self.assertTrue(torch.equal(gather(kc, slots), ref_quantize(k, want[:, None])))

    def test_dequantize_returns_fp8_value_times_scale(self):
        T, H, D = 6, 2, 8
        k, v = rand_kv(T, H, D, torch.float32, 30), rand_kv(T, H, D, torch.float32, 31)
        kc, vc = make_cache(3, 2, H, D)
        slots = torch.tensor([5, 0, 1, 2, 3, 4], dtype=torch.int64)
        ks, vs = torch.tensor([0.01, 0.02]), torch.tensor([0.03, 0.04])
        kvcal.quantize_static(k, v, kc, vc, slots, ks, vs)
        for out in ("float32", "bfloat16"):
            ok, ov = kvcal.dequantize(kc, vc, slots, H, D, ks, vs, out_dtype=out)
            want = gather(kc, slots).view(torch.float8_e4m3fn).float() * ks[:, None]
            self.assertTrue(torch.equal(ok, want.to(getattr(torch, out))))


class DropIns(unittest.TestCase):
    def test_reshape_and_cache_flash_matches_vllm_semantics(self):
        T, H, D, bs, nb = 12, 8, 64, 16, 4
        k, v = rand_kv(T + 4, H, D, torch.bfloat16, 40), rand_kv(T + 4, H, D, torch.bfloat16, 41)
        kc, vc = make_cache(nb, bs, H, D, interleaved=True)
        slots = torch.randperm(nb * bs)[:T].to(torch.int64)  # padded key, as vLLM V1
        ks, vs = torch.tensor([0.02]), torch.tensor([0.01])
        kvcal.reshape_and_cache_flash(k, v, kc, vc, slots, "fp8", ks, vs)
        self.assertTrue(torch.equal(gather(kc, slots), ref_quantize(k[:T], ks)))
        self.assertTrue(torch.equal(gather(vc, slots), ref_quantize(v[:T], vs)))
        with self.assertRaisesRegex(ValueError, "kv_cache_dtype: 'auto'"):
            kvcal.reshape_and_cache_flash(k, v, kc, vc, slots, "auto", ks, vs)

    def test_set_kv_buffer_writes_sglang_token_layout(self):
        size, H, D, T = 40, 2, 16, 7
        kb = torch.zeros(size + 1, H, D, dtype=torch.uint8)
        vb = torch.zeros(size + 1, H, D, dtype=torch.float8_e4m3fn)
        loc = torch.tensor([3, 9, 1, 30, 31, 2, 40], dtype=torch.int64)
        k, v = rand_kv(T, H, D, torch.bfloat16, 50), rand_kv(T, H, D, torch.bfloat16, 51)
        kvcal.set_kv_buffer(kb, vb, loc, k, v, k_scale=0.03, v_scale=None)
        self.assertTrue(torch.equal(kb[loc], ref_quantize(k, torch.tensor(0.03))))
        self.assertTrue(torch.equal(vb.view(torch.uint8)[loc], ref_quantize(v, torch.tensor(1.0))))

        class Layer:
            layer_id = 3

        class Pool:
            dtype = torch.float8_e4m3fn
            start_layer = 2
            k_buffer = [None, kb]
            v_buffer = [None, vb]
        kb.zero_()
        kvcal.sglang_set_kv_buffer(Pool(), Layer(), loc, k, v, 0.03, 0.05)
        self.assertTrue(torch.equal(kb[loc], ref_quantize(k, torch.tensor(0.03))))

    def test_a_decode_loop_on_the_drop_in_reads_back_what_it_wrote(self):
        """Prefill then 8 decode steps of 3 sequences into a paged cache; the
        dequantized cache equals the reference quantize/dequantize of all K."""
        H, D, bs, nb, seqs = 2, 32, 4, 24, 3
        kc, vc = make_cache(nb, bs, H, D)
        ks, vs = torch.tensor([0.01]), torch.tensor([0.01])
        block_tables = [list(range(i * 8, i * 8 + 8)) for i in range(seqs)]
        lens = [5, 2, 7]
        allk = [[] for _ in range(seqs)]

        def slot(s, p):
            return block_tables[s][p // bs] * bs + p % bs

        for step in range(9):
            rows = [(s, p) for s in range(seqs) for p in (range(lens[s]) if step == 0 else [lens[s] + step - 1])]
            k = rand_kv(len(rows), H, D, torch.bfloat16, 60 + step, spread=1.0)
            sl = torch.tensor([slot(s, p) for s, p in rows], dtype=torch.int64)
            kvcal.reshape_and_cache_flash(k, k, kc, vc, sl, "fp8_e4m3", ks, vs)
            for i, (s, _) in enumerate(rows):
                allk[s].append(k[i])
        for s in range(seqs):
            n = len(allk[s])
            sl = torch.tensor([slot(s, p) for p in range(n)], dtype=torch.int64)
            got, _ = kvcal.dequantize(kc, vc, sl, H, D, ks, vs, out_dtype="float32")
            ref = torch.stack(allk[s])
            want = ref_quantize(ref, ks).view(torch.float8_e4m3fn).float() * ks
            self.assertTrue(torch.equal(got, want))


class Errors(unittest.TestCase):
    def setUp(self):
        self.k = rand_kv(4, 2, 8, torch.bfloat16, 70)
        self.kc, self.vc = make_cache(2, 2, 2, 8)
        self.slots = torch.arange(4, dtype=torch.int64)

    def test_arguments_are_checked_and_named(self):
        k, kc, vc, s = self.k, self.kc, self.vc, self.slots
        with self.assertRaisesRegex(TypeError, "key: dtype int32"):
            kvcal.quantize_static(k.to(torch.int32), k, kc, vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, r"key: shape \(4, 16\)"):
            kvcal.quantize_static(k.reshape(4, 16), k, kc, vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, "key: strides .* head_dim must be contiguous"):
            kvcal.quantize_static(k.transpose(1, 2).contiguous().transpose(1, 2), k, kc, vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(TypeError, "key_cache: dtype bfloat16"):
            kvcal.quantize_static(k, k, kc.to(torch.bfloat16), vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(TypeError, "slot_mapping: int32"):
            kvcal.quantize_static(k, k, kc, vc, s.to(torch.int32), 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, "key: 4 tokens, slot_mapping has 5"):
            kvcal.quantize_static(k, k, kc, vc, torch.arange(5, dtype=torch.int64), 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, "key_cache: shape .* holds 2 kv heads x head_dim 8, key has 2 x 4"):
            kvcal.quantize_static(k[..., :4], k[..., :4], kc, vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(ValueError, "k_scale: float32 of 3 values"):
            kvcal.quantize_static(k, k, kc, vc, s, torch.ones(3), torch.ones(1))
        strided = torch.zeros(2, 2, 8, 2, dtype=torch.uint8).transpose(2, 3)  # head_dim stride 2
        with self.assertRaisesRegex(ValueError, "key_cache: strides"):
            kvcal.quantize_static(k, k, strided, vc, s, 1.0, 1.0)
        with self.assertRaisesRegex(TypeError, "key: list is not an array"):
            kvcal.quantize_static([1.0], k, kc, vc, s, 1.0, 1.0)

    def test_the_library_refuses_a_bad_scale_with_its_message(self):
        with self.assertRaises(kvcal.KvcalError) as cm:
            kvcal.quantize_static(self.k, self.k, self.kc, self.vc, self.slots, 0.0, 1.0)
        self.assertEqual(cm.exception.status, 6)
        self.assertIn("quantize_static: non-finite value", str(cm.exception))


class NotTorch(unittest.TestCase):
    def test_dlpack_and_array_interface_objects(self):
        import numpy as np

        class OnlyDlpack:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, stream=None):
                return self.t.__dlpack__()

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()

        k = rand_kv(5, 2, 8, torch.float32, 80)
        kc, vc = make_cache(3, 2, 2, 8)
        slots = torch.tensor([0, 2, 4, -1, 1], dtype=torch.int64)
        kn = k.numpy()
        kcn, vcn = kc.numpy(), vc.numpy()
        kvcal.quantize_static(OnlyDlpack(k), kn, kcn, OnlyDlpack(vc), slots.numpy(),
                              np.array([0.01], dtype=np.float32), 0.01)
        valid = slots >= 0
        want = ref_quantize(k[valid], torch.tensor(0.01))
        self.assertTrue(torch.equal(gather(kc, slots[valid]), want))
        self.assertTrue(torch.equal(gather(vc, slots[valid]), want))

    def test_import_does_not_import_torch(self):
        code = "import sys, kvcal; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ))
        self.assertEqual(out.stdout.strip(), "False", out.stderr)


class ScalesFiles(unittest.TestCase):
    def test_fill_write_load_validate_convert(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model")
            os.mkdir(model)
            with open(os.path.join(model, "config.json"), "w") as f:
                f.write('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '
                        '"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8, '
                        '"num_key_value_heads": 4, "vocab_size": 512}')
            s = kvcal.Scales(2, 4)
            s.set_layer_heads(0, torch.tensor([0.1, 0.2, 0.3, 0.4]), [0.05] * 4)
            s.set_layer(1, 0.25, 0.125)
            s.set_q(0, 0.5)
            s.set_q(1, 0.75)
            s.set_model("LlamaForCausalLM", "llama", 8, 8)
            with self.assertRaises(kvcal.KvcalError):
                s.set_head(0, 0, float("nan"), 1.0)
            path = os.path.join(d, "s.json")
            s.write(path, "kvcal")
            r = kvcal.load(path, model)
            self.assertEqual(r.k_scales(), s.k_scales())
            self.assertEqual(r.get_q(1), 0.75)
            rep = kvcal.validate(path, model, 1)
            self.assertEqual(rep.format, "kvcal-json")
            self.assertTrue(rep.passes())
            kvcal.convert(path, os.path.join(d, "legacy.json"), "legacy", model, 2)
            rep = kvcal.validate(os.path.join(d, "legacy.json"), model, 4)
            self.assertFalse(rep.passes())
            self.assertTrue(any("tp 4" in f[2] for f in rep.findings), rep.findings)
            s.granularity = "tensor"
            s.write(os.path.join(d, "ck"), "checkpoint", model)
            ck = kvcal.load(os.path.join(d, "ck"))
            self.assertEqual(ck.granularity, "tensor")
            self.assertEqual(ck.get_tensor(0), s.get_tensor(0))
            self.assertEqual(ck.get_tensor(0)[0], torch.tensor(0.4).item())
            with self.assertRaisesRegex(ValueError, "format: 'json'"):
                s.write(path, "json")
            s.write(os.path.join(d, "trt"), "trtllm", None, 2)
            rep = kvcal.validate(os.path.join(d, "trt"), None, 2)
            self.assertEqual(rep.format, "trtllm")
            self.assertTrue(rep.passes())
            k, v = s.get_tensor(1)
            self.assertEqual(kvcal.load(os.path.join(d, "trt"), None, 2).get_tensor(1),
                             (max(k, v),) * 2)
            with self.assertRaisesRegex(kvcal.KvcalError, "write the checkpoint format"):
                s.write(os.path.join(d, "mo"), "modelopt", model)


class Calibration(unittest.TestCase):
    def test_minmax_scales_are_the_torch_absmax_over_448(self):
        L, H, D = 3, 2, 16
        cal = kvcal.Calibrator(L, H, D, "minmax")
        amax_k = torch.zeros(L, H)
        amax_v = torch.zeros(L, H)
        for step in range(4):
            for l in range(L):
                k = rand_kv(6 + step, H, D, torch.bfloat16, 100 + 10 * step + l)
                v = rand_kv(6 + step, H, D, torch.bfloat16, 200 + 10 * step + l)
                slots = torch.arange(6 + step, dtype=torch.int64)
                slots[0] = -1
                cal.observe(l, k, v, slots)
                amax_k[l] = torch.maximum(amax_k[l], k[1:].float().abs().amax((0, 2)))
                amax_v[l] = torch.maximum(amax_v[l], v[1:].float().abs().amax((0, 2)))
            cal.end_step()
        s = cal.to_scales("head")
        for l in range(L):
            for h in range(H):
                self.assertEqual(s.get_head(l, h),
                                 (torch.clamp_min(amax_k[l, h] / 448.0, FLOOR).item(),
                                  torch.clamp_min(amax_v[l, h] / 448.0, FLOOR).item()))
        tokens, steps = cal.tokens()
        self.assertEqual(tokens, [5 + 6 + 7 + 8] * L)
        self.assertEqual(steps, 4)

    def test_processes_merge_through_bytes_and_write_any_format(self):
        L, H, D = 2, 4, 8
        whole = kvcal.Calibrator(L, H, D, "percentile:99.9")
        parts = [kvcal.Calibrator(L, H, D, "percentile:99.9") for _ in range(2)]
        for i in range(6):
            for l in range(L):
                k = rand_kv(10, H, D, torch.float16, 300 + 7 * i + l)
                whole.observe(l, k, k)
                parts[i % 2].observe(l, k, k)
        merged = kvcal.Calibrator.from_bytes(parts[0].to_bytes())
        merged.merge(kvcal.Calibrator.from_bytes(parts[1].to_bytes()))
        self.assertEqual(merged.to_scales("head").k_scales(), whole.to_scales("head").k_scales())
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "legacy.json")
            merged.write(p, "legacy", "tensor", model_type="llama")
            self.assertTrue(kvcal.validate(p).passes())

    def test_nonfinite_is_refused_and_named(self):
        cal = kvcal.Calibrator(1, 1, 4)
        x = torch.zeros(2, 1, 4)
        x[1, 0, 3] = float("nan")
        with self.assertRaisesRegex(kvcal.KvcalError, "layer 0 K kv head 0: token 1 channel 3 is nan"):
            cal.observe(0, x, torch.zeros(2, 1, 4))
        with self.assertRaisesRegex(kvcal.KvcalError, "no scale is given"):
            cal.to_scales()
        with self.assertRaisesRegex(ValueError, "the calibrator holds 1 kv heads x head_dim 4"):
            cal.observe(0, torch.zeros(2, 2, 4), torch.zeros(2, 2, 4))


if __name__ == "__main__":
    unittest.main()
