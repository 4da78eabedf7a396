#!/usr/bin/env python3
"""bench/kvquant_torch.py: the PyTorch equivalents of bench/kvquant's ops,
eager and under torch.compile, timed the same way on the same shapes, so
the CUDA kernels have a baseline measured in the same session.

    python3 bench/kvquant_torch.py [--tokens N] [--decode-tokens N] [--heads H]
                                   [--head-dim D] [--block-size B] [--reps N]

Ops (bf16 K/V (T, H, D) into an e4m3 paged cache (num_blocks, B, H, D)
through a slot mapping; bytes counted as in bench/kvquant.cu):
  static head   x * (1 / scale[h]), clamped to +-448, cast, scattered
  static tensor the same with one scale
  dynamic       scale = max(absmax over D / 448, 1/(448*512)) per (token, head),
                written beside the cache
  dequant       gather by slot, e4m3 * scale -> bf16
Prefill: CUDA events around each call, L2 flushed before each, median of
--reps. Decode: time per call of a CUDA graph of 20 calls, replayed.
The compiled result is checked byte for byte against eager before timing.
"""
import argparse
import statistics
import time

import torch

FP8 = torch.float8_e4m3fn
FLOOR = 1.0 / (448.0 * 512.0)


def scatter(cache, slots, rows):
    """cache.view(-1, H, D)[slots] = rows, through uint8 views (index_copy_
    has no float8 kernel)."""
    H, D = cache.shape[2], cache.shape[3]
    cache.view(torch.uint8).view(-1, H, D).index_copy_(0, slots, rows.view(torch.uint8))


def static_head(k, v, kc, vc, slots, ks, vs):
    kq = (k.float() * (1.0 / ks)[None, :, None]).clamp(-448.0, 448.0).to(FP8)
    vq = (v.float() * (1.0 / vs)[None, :, None]).clamp(-448.0, 448.0).to(FP8)
    scatter(kc, slots, kq)
    scatter(vc, slots, vq)


def static_tensor(k, v, kc, vc, slots, ks, vs):
    kq = (k.float() * (1.0 / ks[0])).clamp(-448.0, 448.0).to(FP8)
    vq = (v.float() * (1.0 / vs[0])).clamp(-448.0, 448.0).to(FP8)
    scatter(kc, slots, kq)
    scatter(vc, slots, vq)


def dynamic(k, v, kc, vc, slots, ksc, vsc):
    H = k.shape[1]
    for x, c, sc in ((k, kc, ksc), (v, vc, vsc)):
        xf = x.float()
        s = (xf.abs().amax(-1) / 448.0).clamp(min=FLOOR)
        q = (xf * (1.0 / s)[..., None]).clamp(-448.0, 448.0).to(FP8)
        scatter(c, slots, q)
        sc.view(-1, H).index_copy_(0, slots, s)


def dequant(kc, vc, slots, ksc, vsc, ko, vo):
    H, D = kc.shape[2], kc.shape[3]
    for c, sc, o in ((kc, ksc, ko), (vc, vsc, vo)):
        q = c.view(torch.uint8).view(-1, H, D).index_select(0, slots).view(FP8).float()
        o.copy_((q * sc.view(-1, H).index_select(0, slots)[..., None]).to(torch.bfloat16))


def make(T, H, D, bs, num_blocks, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    u = torch.rand(2, T, H, D, device="cuda", generator=g) * 2 - 1
    k = (u[0] ** 3 * 6.0).to(torch.bfloat16)
    v = (u[1] ** 3 * 2.0).to(torch.bfloat16)
    perm = torch.randperm(num_blocks, device="cuda", generator=g)
    t = torch.arange(T, device="cuda")
    if T * 4 <= num_blocks:
        slots = perm[:T] * bs + (t * 5) % bs
    else:
        slots = perm[t // bs] * bs + t % bs
    kc = torch.empty(num_blocks, bs, H, D, dtype=FP8, device="cuda")
    vc = torch.empty_like(kc)
    ksc = torch.zeros(num_blocks, bs, H, device="cuda")
    vsc = torch.zeros_like(ksc)
    ks = (1.0 + 0.1 * torch.arange(H, device="cuda")) / 448.0 * 6.0
    vs = torch.full((H,), 2.0 / 448.0, device="cuda")
    ko = torch.empty_like(k)
    vo = torch.empty_like(v)
    return dict(k=k, v=v, kc=kc, vc=vc, ksc=ksc, vsc=vsc, slots=slots, ks=ks, vs=vs, ko=ko, vo=vo)


def op_args(name, p):
    if name == "dynamic":
        return (p["k"], p["v"], p["kc"], p["vc"], p["slots"], p["ksc"], p["vsc"])
    if name == "dequant":
        return (p["kc"], p["vc"], p["slots"], p["ksc"], p["vsc"], p["ko"], p["vo"])
    return (p["k"], p["v"], p["kc"], p["vc"], p["slots"], p["ks"], p["vs"])


def op_bytes(name, p):
    n = p["k"].numel()
    inp, cache, slots = 2 * n * 2, 2 * n, 8 * p["slots"].numel()
    scales = 2 * p["slots"].numel() * p["k"].shape[1] * 4
    if name == "copy":
        return 2 * inp
    if name == "dynamic":
        return inp + cache + slots + scales
    if name == "dequant":
        return cache + scales + inp + slots
    return inp + cache + slots


def outputs(name, p):
    if name == "dequant":
        return [p["ko"].view(torch.int16).clone(), p["vo"].view(torch.int16).clone()]
    out = [p["kc"].view(torch.uint8).clone(), p["vc"].view(torch.uint8).clone()]
    if name == "dynamic":
        out += [p["ksc"].clone(), p["vsc"].clone()]
    return out


def time_events(fn, args, reps, flush):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*args)
        times = []
        for r in range(reps):
            flush.fill_(r & 0xFF)
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def time_graph(fn, args, calls=20, replays=50):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*args)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn(*args)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / (calls * replays))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=262144)
    ap.add_argument("--decode-tokens", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    flush = torch.empty(4 * 64 * 2**20, dtype=torch.uint8, device="cuda")
    fns = {"static head": static_head, "static tensor": static_tensor, "dynamic": dynamic,
           "dequant": dequant}
    blocks = (a.tokens + a.block_size - 1) // a.block_size
    print(f"\n{'case':8} {'op':26} {'MB':>10} {'median_us':>10} {'GB/s':>10} {'graph_us':>9} {'check'}")
    failures = 0
    for case, T in (("prefill", a.tokens), ("decode", a.decode_tokens)):
        decode = case == "decode"
        p = make(T, a.heads, a.head_dim, a.block_size, max(blocks, 4 * T), 1234)
        names = ["static head", "dynamic"] + ([] if decode else ["static tensor", "dequant"])
        copy_dst = torch.empty(2, *p["k"].shape, dtype=torch.bfloat16, device="cuda")

        def copy(k, v, *_):
            copy_dst[0].copy_(k)
            copy_dst[1].copy_(v)

        us = time_events(copy, op_args("copy", p), a.reps, flush)
        gus = time_graph(copy, op_args("copy", p)) if decode else float("nan")
        print(f"{case:8} {'torch copy':26} {op_bytes('copy', p) / 1e6:10.2f} {us:10.2f} "
              f"{op_bytes('copy', p) / us / 1e3:10.1f} {gus:9.2f} -")
        for name in names:
            args = op_args(name, p)
            if name == "dequant":
                dynamic(*op_args("dynamic", p))
            fns[name](*args)
            want = outputs(name, p)
            compiled = torch.compile(fns[name], dynamic=False)
            t0 = time.perf_counter()
            compiled(*args)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            got = outputs(name, p)
            same = all(torch.equal(x, y) for x, y in zip(want, got))
            failures += not same
            for label, fn in (("eager", fns[name]), ("compile", compiled)):
                us = time_events(fn, args, a.reps, flush)
                gus = time_graph(fn, args) if decode else float("nan")
                mb = op_bytes(name, p) / 1e6
                print(f"{case:8} {label + ' ' + name:26} {mb:10.2f} {us:10.2f} "
                      f"{op_bytes(name, p) / us / 1e3:10.1f} {gus:9.2f} "
                      f"{'ok' if same else 'compiled != eager'}"
                      + (f" (compiled in {compile_s:.1f} s)" if label == "compile" else ""))
        del p, copy_dst
        torch.cuda.empty_cache()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
