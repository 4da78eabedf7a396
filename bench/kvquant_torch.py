#!/usr/bin/env python3
"""bench/kvquant_torch.py: the PyTorch equivalents of bench/kvquant's ops,
eager and under torch.compile, timed the same way on the same shapes, so
the CUDA kernels have a baseline measured in the same session.

    python3 bench/kvquant_torch.py [--tokens N] [--decode-tokens N] [--heads H]
                                   [--head-dim D] [--block-size B] [--reps N]
                                   [--device cuda|cpu]

Ops (bf16 K/V (T, H, D) into an e4m3 paged cache (num_blocks, B, H, D)
through a slot mapping: the prefill's tokens fill their blocks in turn, the
decode step's each go to a block of their own, as in bench/kvquant.cu; bytes counted as in bench/kvquant.cu, i.e. what the
op must move, whatever the implementation moves):
  static head   x * (1 / scale[h]), clamped to +-448, cast, scattered
  static tensor the same with one scale
  dynamic       scale = max(absmax over D / 448, 1/(448*512)) per (token,
                head), x * (1 / scale), written beside the cache
  dequant       gather by slot, e4m3 * scale -> bf16

What is compiled. "compile": the quantization (upcast, absmax, scale,
multiply, clamp, cast to e4m3: one function returning the e4m3 rows and
their scales) under torch.compile(dynamic=False); the scatter into the paged
cache stays an eager index_copy_ through int64 views, as a PyTorch user
writes it (index_copy_ and index_put_ have no float8 kernel). dequant is
compiled whole (gather, multiply, cast). "compile whole" (prefill, static
head only): the quantization and the scatter in one compiled function, the
form that was timed before, kept to show what it costs.

Eager parity. Inductor lowers an fp32 division in Triton to the approximate
div.full.f32 unless TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING=1 (then div_rn,
the correctly rounded division eager CUDA uses); and in some versions it
lowers reciprocal (what `1.0 / t` becomes) to a division by an integer
constant that this setting does not reach. So the script sets it, and every
reciprocal is written ones_like(t) / t, a division of two fp32 tensors.
Every compiled result is checked byte for byte against eager before timing.

Prefill: CUDA events around each call, L2 flushed before each, median of
--reps. Decode: time per call of a CUDA graph of 20 calls, replayed.
--device cpu runs only the eager/compiled byte comparison (no timing), for
checking this script on a machine without a GPU.
"""
import os

os.environ.setdefault("TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

FP8 = torch.float8_e4m3fn
FLOOR = 1.0 / (448.0 * 512.0)


def recip(t):
    """1 / t, correctly rounded in eager and compiled code (see above)."""
    return torch.ones_like(t) / t


def scatter(cache, slots, rows):
    """cache.view(-1, H, D)[slots] = rows, through int64 views: index_copy_
    has no float8 kernel, and 8-byte elements move a row in 8x fewer
    elements than bytes would (head_dim a multiple of 8)."""
    H, D = cache.shape[2], cache.shape[3]
    cache.view(torch.int64).view(-1, H, D // 8).index_copy_(0, slots, rows.view(torch.int64))


def quant_static(k, v, ks, vs):
    """e4m3 rows of K and V with per-head scales ks, vs (H)."""
    kq = (k.float() * recip(ks)[None, :, None]).clamp(-448.0, 448.0).to(FP8)
    vq = (v.float() * recip(vs)[None, :, None]).clamp(-448.0, 448.0).to(FP8)
    return kq, vq


def quant_static_tensor(k, v, ks, vs):
    """e4m3 rows of K and V with one scale each (ks[0], vs[0])."""
    kq = (k.float() * recip(ks[:1])).clamp(-448.0, 448.0).to(FP8)
    vq = (v.float() * recip(vs[:1])).clamp(-448.0, 448.0).to(FP8)
    return kq, vq


def quant_dynamic(k, v):
    """e4m3 rows of K and V and their per (token, head) scales (T, H)."""
    out = []
    for x in (k, v):
        xf = x.float()
        s = (xf.abs().amax(-1) / 448.0).clamp(min=FLOOR)
        out += [(xf * recip(s)[..., None]).clamp(-448.0, 448.0).to(FP8), s]
    return out


def make_static_op(quant):
    def op(k, v, kc, vc, slots, ks, vs):
        kq, vq = quant(k, v, ks, vs)
        scatter(kc, slots, kq)
        scatter(vc, slots, vq)

    return op


def make_dynamic_op(quant):
    def op(k, v, kc, vc, slots, ksc, vsc):
        kq, ks, vq, vs = quant(k, v)
        H = k.shape[1]
        scatter(kc, slots, kq)
        scatter(vc, slots, vq)
        ksc.view(-1, H).index_copy_(0, slots, ks)
        vsc.view(-1, H).index_copy_(0, slots, vs)

    return op


def dequant(kc, vc, slots, ksc, vsc, ko, vo):
    H, D = kc.shape[2], kc.shape[3]
    for c, sc, o in ((kc, ksc, ko), (vc, vsc, vo)):
        q = c.view(torch.uint8).view(-1, H, D).index_select(0, slots).view(FP8).float()
        o.copy_((q * sc.view(-1, H).index_select(0, slots)[..., None]).to(torch.bfloat16))


def make(T, H, D, bs, num_blocks, in_turn, seed, device):
    """in_turn: the tokens fill their blocks in turn (a prefill); else each
    token goes to a block of its own (a decode step); blocks in random order."""
    g = torch.Generator(device=device).manual_seed(seed)
    u = torch.rand(2, T, H, D, device=device, generator=g) * 2 - 1
    k = (u[0] ** 3 * 6.0).to(torch.bfloat16)
    v = (u[1] ** 3 * 2.0).to(torch.bfloat16)
    perm = torch.randperm(num_blocks, device=device, generator=g)
    t = torch.arange(T, device=device)
    if in_turn:
        slots = perm[t // bs] * bs + t % bs
    else:
        slots = perm[:T] * bs + (t * 5) % bs
    kc = torch.zeros(num_blocks, bs, H, D, dtype=FP8, device=device)
    vc = torch.zeros_like(kc)
    ksc = torch.zeros(num_blocks, bs, H, device=device)
    vsc = torch.zeros_like(ksc)
    ks = (1.0 + 0.1 * torch.arange(H, device=device)) / 448.0 * 6.0
    vs = torch.full((H,), 2.0 / 448.0, device=device)
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


def reset(name, p):
    """Clears what op `name` writes, so that a run must write it again."""
    if name == "dequant":
        p["ko"].zero_(), p["vo"].zero_()
    else:
        p["kc"].view(torch.uint8).zero_(), p["vc"].view(torch.uint8).zero_()
        p["ksc"].zero_(), p["vsc"].zero_()


def variants(name, whole):
    """(label, function) pairs of op `name`: eager, then compiled."""
    if name == "dequant":
        return [("eager", dequant), ("compile", torch.compile(dequant, dynamic=False))]
    if name == "dynamic":
        return [("eager", make_dynamic_op(quant_dynamic)),
                ("compile", make_dynamic_op(torch.compile(quant_dynamic, dynamic=False)))]
    quant = quant_static if name == "static head" else quant_static_tensor
    out = [("eager", make_static_op(quant)),
           ("compile", make_static_op(torch.compile(quant, dynamic=False)))]
    if whole:
        out.append(("compile whole", torch.compile(make_static_op(quant), dynamic=False)))
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


def print_profile(fn, args, top=6):
    """The CUDA kernels of one call of fn, by device time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    rows.sort(key=lambda e: -e.device_time_total)
    for e in rows[:top]:
        print(f"         {e.device_time_total:10.1f} us x{e.count:<3} {e.key[:90]}")


def check_division(device):
    """Whether compiled 1.0 / t and ones_like(t) / t give eager's bytes on
    2^20 random fp32 values: the cause of compiled quantization bytes that
    differ from eager, measured where it matters."""
    t = torch.rand(1 << 20, device=device, generator=torch.Generator(device).manual_seed(7))
    t = t * 100 + 1e-3
    for label, fn in (("1.0 / t", lambda x: 1.0 / x), ("ones_like(t) / t", recip)):
        differ = int((torch.compile(fn, dynamic=False)(t) != fn(t)).sum())
        print(f"compiled {label}: {differ} of {t.numel()} values differ from eager")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=262144)
    ap.add_argument("--decode-tokens", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    timed = a.device == "cuda"
    name_of = torch.cuda.get_device_name() if timed else "cpu (no timing)"
    print(f"device: {name_of}, torch {torch.__version__}, "
          f"TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING="
          f"{os.environ['TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING']}")
    check_division(a.device)
    flush = torch.empty(4 * 64 * 2**20 if timed else 1, dtype=torch.uint8, device=a.device)
    blocks = (a.tokens + a.block_size - 1) // a.block_size
    print(f"\n{'case':8} {'op':26} {'MB':>10} {'median_us':>10} {'GB/s':>10} {'graph_us':>9} {'check'}")
    failures = 0
    for case, T in (("prefill", a.tokens), ("decode", a.decode_tokens)):
        decode = case == "decode"
        p = make(T, a.heads, a.head_dim, a.block_size, max(blocks, 4 * T) if decode else blocks,
                 not decode, 1234, a.device)
        names = ["static head", "dynamic"] + ([] if decode else ["static tensor", "dequant"])
        copy_dst = torch.empty(2, *p["k"].shape, dtype=torch.bfloat16, device=a.device)

        def copy(k, v, *_):
            copy_dst[0].copy_(k)
            copy_dst[1].copy_(v)

        if timed:
            us = time_events(copy, op_args("copy", p), a.reps, flush)
            gus = time_graph(copy, op_args("copy", p)) if decode else float("nan")
            print(f"{case:8} {'torch copy':26} {op_bytes('copy', p) / 1e6:10.2f} {us:10.2f} "
                  f"{op_bytes('copy', p) / us / 1e3:10.1f} {gus:9.2f} -")
        for name in names:
            args = op_args(name, p)
            if name == "dequant":
                make_dynamic_op(quant_dynamic)(*op_args("dynamic", p))
            want = None
            for label, fn in variants(name, whole=name == "static head" and not decode):
                reset(name, p)
                t0 = time.perf_counter()
                fn(*args)
                if timed:
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                got = outputs(name, p)
                if want is None:
                    want = got
                same = all(torch.equal(x, y) for x, y in zip(want, got))
                failures += not same
                mb = op_bytes(name, p) / 1e6
                check = "ok" if same else "compiled != eager"
                if label != "eager":
                    check += f" (first call {first_s:.1f} s)"
                if not timed:
                    print(f"{case:8} {label + ' ' + name:26} {mb:10.2f} {'-':>10} {'-':>10} "
                          f"{'-':>9} {check}")
                    continue
                us = time_events(fn, args, a.reps, flush)
                gus = time_graph(fn, args) if decode else float("nan")
                print(f"{case:8} {label + ' ' + name:26} {mb:10.2f} {us:10.2f} "
                      f"{op_bytes(name, p) / us / 1e3:10.1f} {gus:9.2f} {check}")
                if label == "compile whole":
                    print_profile(fn, args)
        del p, copy_dst
        if timed:
            torch.cuda.empty_cache()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
