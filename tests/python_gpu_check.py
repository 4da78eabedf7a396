#!/usr/bin/env python3
"""The Python package on a GPU host: every CUDA path against torch references,
byte for byte; the CPU and CUDA paths against each other (the cache formats
beyond e4m3 too: quantize_fmt / dequantize_fmt, both kernels); the device
calibrator against the host one; the vLLM drop-in in a short decode loop of
paged attention in torch (eager and captured in a CUDA graph); and what one
Python call costs at decode size against the C call (bench/launch_overhead).

Run from the repository root, with libkvcal.so of a CUDA build (nothing is
compiled here) and a Python with torch (CUDA):
    LD_LIBRARY_PATH=<folders of the libraries the host lacks> \
        python3 tests/python_gpu_check.py --build build [--json OUT.json] [--only-formats]
Exit: 0 everything equal, 1 a mismatch, 2 no GPU or no library.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the CUDA build folder (libkvcal.so)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--calls", type=int, default=20000, help="calls per timing loop")
    ap.add_argument("--only-formats", action="store_true",
                    help="only the cache formats beyond e4m3 (quantize_fmt, dequantize_fmt)")
    args = ap.parse_args()
    lib = os.path.abspath(os.path.join(args.build, "libkvcal.so"))
    if not os.path.exists(lib):
        print("python_gpu_check: no %s: build kvcal with CUDA first" % lib)
        return 2
    os.environ["KVCAL_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import kvcal
    if not torch.cuda.is_available() or kvcal.cuda_device_count() == 0:
        print("python_gpu_check: SKIPPED: no CUDA device (torch %s, kvcal sees %d)"
              % (torch.cuda.is_available(), kvcal.cuda_device_count()))
        return 2
    checks, results = Checks(), {"device": torch.cuda.get_device_name(0),
                                 "torch": torch.__version__, "kvcal": kvcal.version()}
    run_format_checks(torch, kvcal, checks)
    if not args.only_formats:
        run_byte_checks(torch, kvcal, checks)
        run_calibrator_checks(torch, kvcal, checks)
        run_decode_loop(torch, kvcal, checks, results)
        run_timing(torch, kvcal, args, results)
    results["checks_passed"], results["checks_failed"] = checks.passed, checks.failed
    results["failures"] = checks.failures
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print("python_gpu_check: %d passed, %d failed" % (checks.passed, checks.failed))
    return 1 if checks.failed else 0


class Checks:
    def __init__(self):
        self.passed, self.failed, self.failures = 0, 0, []

    def equal(self, name, got, want):
        ok = got.shape == want.shape and bool((got == want).all())
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            n = int((got != want).sum()) if got.shape == want.shape else -1
            self.failures.append("%s: %s differ" % (name, n if n >= 0 else "shapes"))
            print("MISMATCH %s (%d elements differ)" % (name, n))
        return ok

    def true(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append("%s %s" % (name, detail))
            print("FAILED %s %s" % (name, detail))


# --- references (kvcal's arithmetic, include/kvcal_quant.h) ---------------------

def ref_quantize(torch, x, scale):
    inv = torch.tensor(1.0, device=x.device) / scale.float()
    q = (x.float() * inv).clamp(-448.0, 448.0)
    return q.to(torch.float8_e4m3fn).view(torch.uint8)


def scale_of(torch, absmax):
    """kvcal_scale_from_absmax: absmax / 448 rounded as IEEE division. The
    divisor is a tensor on absmax's device: torch divides a CUDA tensor by a
    Python number as a multiplication by its reciprocal, which differs from
    the quotient in the last bit for some values."""
    q = absmax / torch.tensor(448.0, device=absmax.device)
    return torch.clamp_min(q, floor(torch, absmax.device))


def floor(torch, device):
    return torch.tensor(1.0, device=device) / torch.tensor(448.0 * 512.0, device=device)


def ref_dynamic_scale(torch, x):
    a = x.float().abs()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    return scale_of(torch, a.amax(-1))


def rand_kv(torch, T, H, D, dtype, seed, device="cuda", spread=3.0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(T, H, D, generator=g) * torch.exp(torch.randn(T, H, 1, generator=g) * spread)
    return x.clamp(-3e4, 3e4).to(dtype).to(device)


def make_cache(torch, nb, bs, H, D, layout, device="cuda"):
    if layout == "interleaved":
        kv = torch.full((nb, 2, bs, H, D), 0xFF, dtype=torch.uint8, device=device)
        return kv[:, 0], kv[:, 1]
    if layout == "HND":
        k = torch.full((nb, H, bs, D), 0xFF, dtype=torch.uint8, device=device)
        v = torch.full((nb, H, bs, D), 0xFF, dtype=torch.uint8, device=device)
        return k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    return (torch.full((nb, bs, H, D), 0xFF, dtype=torch.uint8, device=device),
            torch.full((nb, bs, H, D), 0xFF, dtype=torch.uint8, device=device))


def gather(cache, slots):
    nb, bs = cache.shape[0], cache.shape[1]
    return cache.contiguous().reshape(nb * bs, *cache.shape[2:])[slots]


# --- bytes ----------------------------------------------------------------------

SHAPES = [(1, 8, 128, 16), (19, 3, 72, 5), (256, 8, 128, 16), (989, 2, 64, 16),
          (5000, 8, 128, 16), (4115, 4, 256, 16)]  # tokens, kv heads, head_dim, block


def run_byte_checks(torch, kvcal, checks):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for (T, H, D, bs) in SHAPES:
            nb = (T + bs - 1) // bs + 3
            for layout in ("NHD", "HND", "interleaved"):
                tag = "%s T%d H%d D%d %s" % (str(dtype)[6:], T, H, D, layout)
                k, v = rand_kv(torch, T, H, D, dtype, T + H), rand_kv(torch, T, H, D, dtype, T + D)
                slots = torch.randperm(nb * bs)[:T].to(torch.int64).cuda()
                if T > 3:
                    slots[3] = -1
                valid = slots >= 0
                for per_head in (False, True):
                    kc, vc = make_cache(torch, nb, bs, H, D, layout)
                    ks = (k.float().abs().amax((0, 2)) / 300.0) if per_head else \
                        (k.float().abs().amax() / 300.0).reshape(1)
                    vs = (v.float().abs().amax((0, 2)) / 500.0) if per_head else \
                        (v.float().abs().amax() / 500.0).reshape(1)
                    kvcal.quantize_static(k, v, kc, vc, slots, ks.contiguous(), vs.contiguous())
                    sh = (H, 1) if per_head else (1,)
                    torch.cuda.synchronize()
                    checks.equal("static %s head=%d K" % (tag, per_head),
                                 gather(kc, slots[valid]), ref_quantize(torch, k[valid], ks.reshape(sh)))
                    checks.equal("static %s head=%d V" % (tag, per_head),
                                 gather(vc, slots[valid]), ref_quantize(torch, v[valid], vs.reshape(sh)))
                    # the CPU path on the same inputs writes the same bytes
                    kcc, vcc = make_cache(torch, nb, bs, H, D, layout, "cpu")
                    kvcal.quantize_static(k.cpu(), v.cpu(), kcc, vcc, slots.cpu(), ks.cpu().contiguous(),
                                          vs.cpu().contiguous())
                    checks.equal("static %s head=%d cpu==cuda" % (tag, per_head),
                                 kcc.contiguous(), kc.contiguous().cpu())
                if layout == "interleaved":
                    continue
                kc, vc = make_cache(torch, nb, bs, H, D, layout)
                shape = (nb, bs, H) if layout == "NHD" else (nb, H, bs)
                ksc = torch.zeros(shape, device="cuda")
                vsc = torch.zeros(shape, device="cuda")
                kvcal.quantize_dynamic(k, v, kc, vc, slots, ksc, vsc)
                torch.cuda.synchronize()
                sk, sv = ref_dynamic_scale(torch, k[valid]), ref_dynamic_scale(torch, v[valid])
                flat = ksc.reshape(nb * bs, H) if layout == "NHD" else ksc.permute(0, 2, 1).reshape(nb * bs, H)
                checks.equal("dynamic %s scales" % tag, flat[slots[valid]], sk)
                checks.equal("dynamic %s K" % tag, gather(kc, slots[valid]), ref_quantize(torch, k[valid], sk[..., None]))
                checks.equal("dynamic %s V" % tag, gather(vc, slots[valid]), ref_quantize(torch, v[valid], sv[..., None]))
                ok, _ = kvcal.dequantize(kc, vc, slots[valid].contiguous(), H, D,
                                         k_scale_cache=ksc, v_scale_cache=vsc, out_dtype="float32")
                want = gather(kc, slots[valid]).view(torch.float8_e4m3fn).float() * sk[..., None]
                torch.cuda.synchronize()
                checks.equal("dequantize %s" % tag, ok, want)
    # the running scaler over a prefill and decode steps
    for mode in ("running_max", "first_batch"):
        H, D, bs, nb = 8, 128, 16, 64
        sc = kvcal.Scaler(H, mode, device="cuda")
        kc, vc = make_cache(torch, nb, bs, H, D, "NHD")
        ksc, vsc = torch.zeros(nb, bs, H, device="cuda"), torch.zeros(nb, bs, H, device="cuda")
        run = None
        pos = 0
        for step, T in enumerate((300, 1, 7, 1, 64)):
            k = rand_kv(torch, T, H, D, torch.bfloat16, 900 + step, spread=1.0)
            v = rand_kv(torch, T, H, D, torch.bfloat16, 950 + step, spread=1.0)
            slots = torch.arange(pos, pos + T, dtype=torch.int64, device="cuda")
            pos += T
            sc.quantize(k, v, kc, vc, slots, ksc, vsc)
            am = k.float().abs().amax((0, 2))
            run = am if run is None else (torch.maximum(run, am) if mode == "running_max" else run)
            want = scale_of(torch, run)
            got, _, steps = sc.read()
            checks.equal("scaler %s step %d scales" % (mode, step),
                         torch.tensor(got, device="cuda"), want)
            checks.equal("scaler %s step %d K" % (mode, step), gather(kc, slots),
                         ref_quantize(torch, k, want[:, None]))


# --- the cache formats beyond e4m3: CUDA bytes equal to the CPU path's -------------

# (kv_cache_dtype, mode, rounding): mode "static" (per head), "tensor" or "dynamic"
FORMAT_MODES = [("fp8_e5m2", "cast", "nearest_even"), ("int8", "static", "nearest_even"),
                ("int8", "tensor", "toward_zero"), ("int8", "dynamic", "toward_zero"),
                ("int8", "dynamic", "nearest_even"), ("int8_asym", "static", "nearest_even"),
                ("int8_asym", "dynamic", "nearest_even"), ("int8_asym", "dynamic", "toward_zero"),
                ("nvfp4", "static", "nearest_even"), ("nvfp4", "tensor", "nearest_even")]
# tokens, kv heads, head_dim, block: the generic kernels, then the fast ones
FORMAT_SHAPES = [(19, 3, 64, 5), (301, 2, 48, 16), (4100, 4, 128, 16), (4099, 2, 256, 5)]


def bits(torch, t):
    """A tensor's bytes, to compare NaN payloads too."""
    return t.contiguous().view(torch.uint8)


def run_format_checks(torch, kvcal, checks):
    for fmt, mode, rounding in FORMAT_MODES:
        for (T, H, D, bs) in FORMAT_SHAPES:
            if fmt == "nvfp4" and D % 16:
                continue
            tag = "%s %s %s T%d H%d D%d bs%d" % (fmt, mode, rounding, T, H, D, bs)
            nb = (T + bs - 1) // bs + 3
            R = kvcal.format_row_bytes(fmt, D)
            k = rand_kv(torch, T, H, D, torch.bfloat16, T + 7, "cpu")
            v = rand_kv(torch, T, H, D, torch.bfloat16, T + 8, "cpu")
            k[1, 0, 3], v[2, H - 1, 0], k[3, 0, :] = float("nan"), float("-inf"), 0.0
            slots = torch.randperm(nb * bs)[:T].to(torch.int64)
            slots[3] = -1
            kw = {"rounding": rounding}
            per_head = mode == "static"
            amax_k = k.float().abs().nan_to_num(0, 0, 0).amax((0, 2)) + 1e-3
            amax_v = v.float().abs().nan_to_num(0, 0, 0).amax((0, 2)) + 1e-3
            if not per_head:
                amax_k, amax_v = amax_k.amax().reshape(1), amax_v.amax().reshape(1)
            if fmt == "int8" and mode != "dynamic":
                kw.update(k_scale=amax_k / 127, v_scale=amax_v / 127)
            elif fmt == "int8_asym" and mode != "dynamic":
                kw.update(k_scale=2 * amax_k / 255, v_scale=2 * amax_v / 255, k_zero=-amax_k,
                          v_zero=-amax_v)
            elif fmt == "nvfp4":
                kw.update(k_scale=amax_k / (6 * 448), v_scale=amax_v / (6 * 448))
            runs = {}
            for dev in ("cpu", "cuda"):
                kc = torch.full((nb, bs, H, R), 0xA5, dtype=torch.uint8, device=dev)
                vc = torch.full((nb, bs, H, R), 0xA5, dtype=torch.uint8, device=dev)
                sc = [torch.full((nb, bs, H), -1.0, device=dev) for _ in range(4)]
                args = {key: (val.to(dev) if hasattr(val, "to") else val) for key, val in kw.items()}
                if mode == "dynamic":
                    args.update(k_scale_cache=sc[0], v_scale_cache=sc[1])
                    if fmt == "int8_asym":
                        args.update(k_zero_cache=sc[2], v_zero_cache=sc[3])
                kvcal.quantize_fmt(k.to(dev), v.to(dev), kc, vc, slots.to(dev), fmt, **args)
                valid = slots[slots >= 0].to(dev)
                deq = {key: val for key, val in args.items() if key != "rounding"}
                outs = [kvcal.dequantize_fmt(kc, vc, valid, H, D, fmt, out_dtype=o, **deq)
                        for o in ("bfloat16", "float32")]
                if dev == "cuda":
                    torch.cuda.synchronize()
                runs[dev] = [kc, vc] + sc + [t for pair in outs for t in pair]
            names = ["K cache", "V cache", "K scales", "V scales", "K zeros", "V zeros",
                     "K bf16", "V bf16", "K f32", "V f32"]
            for name, a, b in zip(names, runs["cpu"], runs["cuda"]):
                checks.equal("format %s %s cpu==cuda" % (tag, name), bits(torch, b.cpu()),
                             bits(torch, a))


# --- calibration ------------------------------------------------------------------

def run_calibrator_checks(torch, kvcal, checks):
    L, H, D = 4, 8, 128
    for observer in ("minmax", "ema:0.9", "percentile:99.99", "mse"):
        dev = kvcal.Calibrator(L, H, D, observer, device="cuda")
        host = kvcal.Calibrator(L, H, D, observer, device="cpu")
        amax = torch.zeros(L, H, device="cuda")
        for step in range(5):
            T = 512 if step == 0 else 33
            for l in range(L):
                k = rand_kv(torch, T, H, D, torch.bfloat16, 40 * step + l)
                v = rand_kv(torch, T, H, D, torch.bfloat16, 40 * step + l + 7)
                slots = torch.arange(T, dtype=torch.int64, device="cuda")
                slots[::9] = -1
                dev.observe(l, k, v, slots)
                host.observe(l, k.cpu(), v.cpu(), slots.cpu())
                amax[l] = torch.maximum(amax[l], k[slots >= 0].float().abs().amax((0, 2)))
            dev.end_step()
            host.end_step()
        checks.true("calibrator %s device bytes == host bytes" % observer,
                    dev.to_bytes() == host.to_bytes())
        s = dev.to_scales("head")
        got = torch.tensor(s.k_scales(), device="cuda")
        if observer == "minmax":
            checks.equal("calibrator minmax scales == torch absmax / 448", got,
                         scale_of(torch, amax))
        back = kvcal.Calibrator.from_bytes(dev.to_bytes(), device="cuda")
        checks.true("calibrator %s bytes round trip on the device" % observer,
                    back.to_bytes() == host.to_bytes())


# --- a decode loop on the drop-in -------------------------------------------------

def paged_attention(torch, q, kc, vc, block_table, n, ks, vs):
    """One sequence's decode attention over its n cached tokens, reading the
    FP8 cache as vLLM's FlashAttention does: e4m3 * scale."""
    bs = kc.shape[1]
    blocks = block_table[: (n + bs - 1) // bs]
    k = kc[blocks].reshape(-1, *kc.shape[2:])[:n].view(torch.float8_e4m3fn).float() * ks
    v = vc[blocks].reshape(-1, *vc.shape[2:])[:n].view(torch.float8_e4m3fn).float() * vs
    H = k.shape[1]
    qh = q.float().reshape(H, -1, q.shape[-1])  # (kv heads, q per kv, D)
    att = torch.einsum("hgd,thd->hgt", qh, k) / q.shape[-1] ** 0.5
    return torch.einsum("hgt,thd->hgd", att.softmax(-1), v).reshape(-1, q.shape[-1])


def run_decode_loop(torch, kvcal, checks, results):
    """8 sequences, a prefill of random lengths and 32 decode steps; K/V written
    by kvcal.reshape_and_cache_flash (vLLM's interleaved layout, per-tensor
    scales from the device calibrator fed the prefill); each step's paged
    attention over the cache equals attention over the torch-quantized K/V,
    its distance from attention over the bf16 K/V (what an FP8 cache costs on
    this random data) is reported, and every token's cache bytes equal the
    reference quantization."""
    H, G, D, bs, seqs, steps = 8, 4, 128, 16, 8, 32
    nb = seqs * 16
    torch.manual_seed(0)
    kc, vc = make_cache(torch, nb, bs, H, D, "interleaved")
    perm = torch.randperm(nb).tolist()
    tables = [torch.tensor(perm[i * 16:(i + 1) * 16], device="cuda") for i in range(seqs)]
    lens = [int(x) for x in torch.randint(20, 120, (seqs,))]
    hist_k = [[] for _ in range(seqs)]
    hist_v = [[] for _ in range(seqs)]
    cal = kvcal.Calibrator(1, H, D, "minmax", device="cuda")
    ks = vs = None
    worst = worst_ref = 0.0

    def slot(s, p):
        return int(tables[s][p // bs]) * bs + p % bs

    for step in range(steps + 1):
        rows = [(s, p) for s in range(seqs)
                for p in (range(lens[s]) if step == 0 else [lens[s] + step - 1])]
        T = len(rows)
        k = rand_kv(torch, T + 5, H, D, torch.bfloat16, 7000 + step, spread=0.3)  # padded rows
        v = rand_kv(torch, T + 5, H, D, torch.bfloat16, 8000 + step, spread=0.3)
        sl = torch.tensor([slot(s, p) for s, p in rows], dtype=torch.int64, device="cuda")
        if step == 0:
            cal.observe(0, k[:T], v[:T])
            sc = cal.to_scales("tensor")
            kt, vt = sc.get_tensor(0)
            ks = torch.tensor([kt], device="cuda")
            vs = torch.tensor([vt], device="cuda")
        kvcal.reshape_and_cache_flash(k, v, kc, vc, sl, "fp8", ks, vs)
        for i, (s, _) in enumerate(rows):
            hist_k[s].append(k[i])
            hist_v[s].append(v[i])
        if step == 0:
            continue
        for s in range(seqs):
            n = lens[s] + step
            q = rand_kv(torch, 1, H * G, D, torch.bfloat16, 9000 + step * 10 + s, spread=0.0)[0]
            out = paged_attention(torch, q, kc, vc, tables[s], n, ks, vs)
            kk, vv = torch.stack(hist_k[s]).float(), torch.stack(hist_v[s]).float()
            qh = q.float().reshape(H, G, D)

            def attend(kx, vx):
                att = torch.einsum("hgd,thd->hgt", qh, kx) / D ** 0.5
                return torch.einsum("hgt,thd->hgd", att.softmax(-1), vx).reshape(-1, D)
            ref = attend(kk, vv)
            fp8 = attend(ref_quantize(torch, kk, ks).view(torch.float8_e4m3fn).float() * ks,
                         ref_quantize(torch, vv, vs).view(torch.float8_e4m3fn).float() * vs)
            worst = max(worst, float((out - ref).norm() / ref.norm()))
            worst_ref = max(worst_ref, float((out - fp8).abs().max()))
    for s in range(seqs):
        n = len(hist_k[s])
        sl = torch.tensor([slot(s, p) for p in range(n)], dtype=torch.int64, device="cuda")
        checks.equal("decode loop seq %d cache K" % s, gather(kc, sl),
                     ref_quantize(torch, torch.stack(hist_k[s]), ks))
    checks.true("decode loop attention == attention over torch-quantized K/V",
                worst_ref < 1e-5, "(max |diff| %.3g)" % worst_ref)
    checks.true("decode loop attention error vs bf16 K/V < 0.15", worst < 0.15, "(%.4f)" % worst)
    results["decode_loop_attention_rel_error_vs_bf16"] = worst

    # the same write captured in a CUDA graph and replayed
    T = 256
    k = rand_kv(torch, T, H, D, torch.bfloat16, 1)
    v = rand_kv(torch, T, H, D, torch.bfloat16, 2)
    sl = torch.randperm(nb * bs)[:T].to(torch.int64).cuda()
    kc2, vc2 = make_cache(torch, nb, bs, H, D, "interleaved")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kvcal.reshape_and_cache_flash(k, v, kc2, vc2, sl, "fp8", ks, vs)  # warm-up
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        kvcal.reshape_and_cache_flash(k, v, kc2, vc2, sl, "fp8", ks, vs)
    k.mul_(0.5)
    g.replay()
    torch.cuda.synchronize()
    checks.equal("drop-in captured in a CUDA graph", gather(kc2, sl), ref_quantize(torch, k, ks))


# --- timing -------------------------------------------------------------------------

def run_timing(torch, kvcal, args, results):
    """Host microseconds per call at decode size (256 tokens x 8 x 128 bf16,
    16-token blocks): the Python drop-in, the Python static quantize with a
    float scale, the bare ctypes call of the same C function with its structs
    built once, and bench/launch_overhead (the C call from C)."""
    import ctypes
    from kvcal import _lib
    T, H, D, bs, nb = 256, 8, 128, 16, 64
    k = rand_kv(torch, T, H, D, torch.bfloat16, 11)
    v = rand_kv(torch, T, H, D, torch.bfloat16, 12)
    kc, vc = make_cache(torch, nb, bs, H, D, "NHD")
    sl = torch.randperm(nb * bs)[:T].to(torch.int64).cuda()
    ks = torch.tensor([0.01], device="cuda")
    n = args.calls

    def host_us(fn):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) / n * 1e6

    b = _lib.KvBatch(k.data_ptr(), v.data_ptr(), _lib.DTYPE_BF16, T, H * D, D, H * D, D,
                     sl.data_ptr())
    c = _lib.KvCache(kc.data_ptr(), vc.data_ptr(), None, None, nb, bs, H, D, 0, _lib.CACHE_NHD)
    stream = torch.cuda.current_stream().cuda_stream
    fn = _lib.lib.kvcal_kv_quantize_static_launch
    bp, cp, kp = ctypes.byref(b), ctypes.byref(c), ks.data_ptr()
    results["py_drop_in_us"] = host_us(
        lambda: kvcal.reshape_and_cache_flash(k, v, kc, vc, sl, "fp8", ks, ks))
    results["py_quantize_static_float_scale_us"] = host_us(
        lambda: kvcal.quantize_static(k, v, kc, vc, sl, 0.01, 0.01))
    results["ctypes_bare_call_us"] = host_us(lambda: fn(bp, cp, 0, kp, kp, stream))
    # the same op in torch eager (what an engine without the kernel does)
    flat_k = kc.view(nb * bs, H, D)
    results["torch_eager_equivalent_us"] = host_us(
        lambda: flat_k.index_copy_(0, sl, ref_quantize(torch, k, ks)))
    exe = os.path.join(args.build, "bench", "launch_overhead")
    if os.path.exists(exe):
        out = subprocess.run([exe, str(n)], capture_output=True, text=True, timeout=120)
        for tok in out.stdout.split():
            if "=" in tok:
                key, val = tok.split("=")
                results[key] = float(val)
        if "c_call_us" in results:
            results["py_minus_c_us"] = results["py_drop_in_us"] - results["c_call_us"]
    else:
        results["c_call_us"] = "not measured: %s missing (make bench)" % exe
    # GPU time per call, from CUDA events over a replayed graph of 100 calls
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kvcal.reshape_and_cache_flash(k, v, kc, vc, sl, "fp8", ks, ks)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(100):
            kvcal.reshape_and_cache_flash(k, v, kc, vc, sl, "fp8", ks, ks)
    g.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    results["gpu_us_per_call_in_graph"] = e0.elapsed_time(e1) * 1e3 / 2000


if __name__ == "__main__":
    sys.exit(main())
