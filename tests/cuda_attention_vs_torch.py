#!/usr/bin/env python3
"""Checks kvcal's CUDA causal attention against torch SDPA on a GPU and times
both, with the same inputs, the same CUDA events and the same stream.

usage: cuda_attention_vs_torch.py path/to/libkvcal.so

For each shape: the relative error ||out - ref|| / ||ref|| of kvcal and of
torch's flash SDPA against an fp32 reference (SDPA's math backend on upcast
inputs), then the median time and TFLOP/s of kvcal and of every SDPA backend
that accepts the shape (flash, cuDNN, memory-efficient). Last, the library
floor of one Llama-3-8B layer at 8 x 2048 tokens: torch (cuBLAS) GEMMs of
the fused shapes plus the fastest SDPA. Exit 1 if kvcal's error exceeds
2e-2 (bf16 inputs and outputs) or is more than 2x flash's.
"""
import ctypes
import math
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # batch, seq_len, heads, kv_heads, head_dim
    (8, 2048, 32, 8, 128),
    (1, 4096, 32, 8, 128),
    (4, 1027, 28, 4, 128),
    (4, 2048, 32, 32, 80),
    (8, 2048, 9, 3, 64),
    (2, 1999, 16, 2, 96),
]


def bench(fn, reps=20):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def rel_err(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


def main():
    warnings.filterwarnings("ignore")  # SDPA explains every backend it skips
    lib = ctypes.CDLL(sys.argv[1])
    f = lib.kvcal_attention_launch
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p]
    lib.kvcal_last_error.restype = ctypes.c_char_p
    torch.manual_seed(0)
    failed = False
    print(f"{'shape (B,T,H,Hkv,hd)':26} {'err kvcal':>9} {'err flash':>9} {'kvcal ms':>9} "
          f"{'TF/s':>6} {'flash ms':>9} {'TF/s':>6} {'cudnn ms':>9} {'TF/s':>6} "
          f"{'effic ms':>9} {'TF/s':>6}")
    best_sdpa_8b = None
    for (B, T, H, HKV, HD) in SHAPES:
        stride = (H + 2 * HKV) * HD
        qkv = torch.randn(B * T, stride, device="cuda", dtype=torch.bfloat16)
        out = torch.full((B * T, H * HD), float("nan"), device="cuda", dtype=torch.bfloat16)
        scale = 1.0 / math.sqrt(HD)
        stream = torch.cuda.current_stream().cuda_stream

        def run_kvcal():
            st = f(out.data_ptr(), H * HD, qkv.data_ptr(), qkv.data_ptr() + 2 * H * HD,
                   qkv.data_ptr() + 2 * (H + HKV) * HD, stride, B, T, H, HKV, HD, scale, stream)
            if st != 0:
                raise RuntimeError(lib.kvcal_last_error().decode())

        # (B, H, T, D) views of the fused buffer, as a model's transpose gives them
        x = qkv.view(B, T, H + 2 * HKV, HD)
        q = x[:, :, :H].transpose(1, 2)
        k = x[:, :, H:H + HKV].transpose(1, 2)
        v = x[:, :, H + HKV:].transpose(1, 2)

        def sdpa(backend):
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                          enable_gqa=HKV != H)
            return run

        run_kvcal()
        torch.cuda.synchronize()
        mine = out.view(B, T, H, HD).transpose(1, 2)
        with sdpa_kernel(SDPBackend.MATH):
            rep = H // HKV
            ref = F.scaled_dot_product_attention(
                q.float(), k.float().repeat_interleave(rep, 1), v.float().repeat_interleave(rep, 1),
                is_causal=True, scale=scale)
        err = rel_err(mine, ref)
        flops = 4.0 * B * H * HD * T * (T + 1) / 2
        row = [f"{str((B, T, H, HKV, HD)):26}", f"{err:9.2e}"]
        times = {}
        flash_err = float("nan")
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("effic", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                o = sdpa(be)()
                if name == "flash":
                    flash_err = rel_err(o, ref)
                times[name] = bench(sdpa(be))
            except RuntimeError:
                times[name] = None
        del ref
        row.append(f"{flash_err:9.2e}")
        t_k = bench(run_kvcal)
        row += [f"{t_k:9.3f}", f"{flops / t_k / 1e9:6.0f}"]
        for name in ("flash", "cudnn", "effic"):
            t = times[name]
            row += [f"{t:9.3f}", f"{flops / t / 1e9:6.0f}"] if t else [f"{'-':>9}", f"{'-':>6}"]
        print(" ".join(row), flush=True)
        if not (err <= 2e-2) or not (err <= 2 * flash_err or math.isnan(flash_err)):
            print(f"FAIL: kvcal attention error {err:.3e} (flash {flash_err:.3e})")
            failed = True
        if (B, T, H, HKV, HD) == SHAPES[0]:
            best_sdpa_8b = min(t for t in times.values() if t)
            kvcal_8b = t_k
        del qkv, out, x, q, k, v, mine

    # --- library floor of one Llama-3-8B layer, 8 x 2048 tokens ---
    M, D, FF, QKV = 8 * 2048, 4096, 14336, (32 + 16) * 128
    gemm_ms = 0.0
    for (k, n) in ((D, QKV), (D, D), (D, 2 * FF), (FF, D)):
        a = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        t = bench(lambda: torch.matmul(a, w.t()))
        print(f"torch matmul {M}x{k}x{n}: {t:.3f} ms, {2 * M * k * n / t / 1e9:.0f} TFLOP/s")
        gemm_ms += t
        del a, w
    floor = gemm_ms + best_sdpa_8b
    print(f"library floor per layer: GEMMs {gemm_ms:.3f} ms + best SDPA {best_sdpa_8b:.3f} ms = "
          f"{floor:.3f} ms -> {M / (32 * floor * 1e-3):.0f} tokens/s (32 layers); "
          f"kvcal attention {kvcal_8b:.3f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
