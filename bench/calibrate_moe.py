#!/usr/bin/env python3
"""Calibration speed of a mixture of experts on a GPU: kvcal calibrate --device
cuda against transformers on a random-weight model of a released MoE's shapes
and the same tokens (8 samples x 2048 tokens a batch), in one run.

usage: calibrate_moe.py KVCAL WORKDIR OUT [--shape S] [--layers N] [--batches B]
                         [--experts IMPL ...] [--attn IMPL ...] [--modes M,...]
                         [--kvcal-variant VAR=VALUE ...] [--kvcal-profile]
                         [--kvcal-repeats N] [--fp8 block] [--floor-only]

--fp8 block (with --experts none): the same random model saved as
Qwen3-30B-A3B-FP8 is released (the fp8 method: attention and experts in
e4m3 128 x 128 blocks with weight_scale_inv, dynamic activations; routers,
norms, embedding and lm_head bf16), kvcal alone on it.

--layers 0: as many of the released model's layers as WORKDIR's free disk
holds (less 3 GiB), the checkpoint's size counted on the meta device.

--shape (the table SHAPES below):
- qwen3-30b-a3b (default): Qwen3-30B-A3B's layer (hidden 2048, 32 query / 4 kv
  heads of 128, q/k norm, 128 experts of 768, top-8, norm_topk_prob) built
  with transformers' own Qwen3MoeConfig, `--layers` of its 48 layers (1.2 GB a
  layer in bf16), saved with save_pretrained (one tensor per expert, as the
  released checkpoint);
- gpt-oss-20b: gpt-oss-20b's layer (hidden 2880, 64 query / 8 kv heads of 64,
  q/k/v/o biases, attention sinks, every other layer a 128-token window from
  layer 0, yarn; 32 experts of 2880, top-4, the router's bias, the experts'
  biases and clamped SwiGLU) built with GptOssConfig, `--layers` of its 24
  (1.6 GB a layer in bf16), saved with save_pretrained (bf16 experts, (in,
  out), which kvcal reads transposed; the released checkpoint's MXFP4 is not
  what is timed here). transformers has no SDPA path for gpt-oss (sinks): its
  attention runs eager and as flex attention;
- qwen3-next-80b-a3b: Qwen3-Next-80B-A3B's layers (hidden 2048; three of
  every four a gated delta-net of 16 key / 32 value heads of 128 with a
  4-tap convolution, the fourth gated attention of 16 query / 2 kv heads of
  256 with q/k norm and a quarter of each head rotated; 512 experts of 512,
  top-10, a shared expert of 512 with its sigmoid gate) built with
  Qwen3NextConfig, `--layers` of its 48 (3.3 GB a layer in bf16). K and V
  are those of its attention layers; the delta-nets cache no K/V. torch has
  no gated delta-net kernel (transformers runs its own torch code where the
  flash-linear-attention package is absent, as on a bare host), so no
  library floor is printed for this shape.
Random bf16 weights, the routers' weights drawn so their logits are N(0, 1);
B x 8 random 2048-token samples as JSONL token ids. Then, on the same tokens:

- `KVCAL calibrate --device cuda --stats` (per-head scales), its tokens/s, peak
  device memory (sampled) and the routing counts of its statistics (experts
  that no token reached); again under each `--kvcal-variant` (an environment
  variable set for that run, e.g. KVCAL_MLP=unfused: the experts' GEMMs
  other GPUs run; KVCAL=PATH: another kvcal executable, an earlier build),
  its tokens/s and peak memory (with --kvcal-repeats N the default run is
  made N times and the median kept, every run's rate printed: single runs
  of one build have differed by up to 20%); with --kvcal-profile once more with
  `--profile`, where its device time went op by op (not in its tokens/s).
  kvcal's tokens/s are over
  its forward phase; its load and warm-up seconds are printed beside them.
  The forward phase runs layer by layer over a chunk of batches while the
  next layers' weights load (calib/executor.c), so that with few batches
  and many layers the weights' load bounds it (the rate of reading them is
  printed): at depth, give enough batches that the layers' work bounds it,
  as transformers' rate leaves its load and warm-up out;
- the transformers model body (no lm_head) in bf16 (SDPA, or gpt-oss's eager
  and flex attention; --attn picks) with hooks that collect per-layer per-head absmax of K
  (k_proj and k_norm, then RoPE: what the cache holds) and V, with each
  experts implementation the installed transformers offers (eager,
  batched_mm, grouped_mm), in each mode of --modes (default plain,compile),
  in the order given: plain (eager), compile (torch.compile of the whole
  body), rcompile (each decoder layer compiled apart: at depth the whole
  body's compile time grows with the layers, one layer's does not; undone
  before the next mode); one that fails is reported and skipped;
- the floor of the library calls: one layer's GEMMs (fused QKV, o, router) and
  the experts' as torch's grouped GEMM on a balanced routing, plus the faster
  of cuDNN and flash SDPA (causal over the whole sample; no sinks; where the
  shape has sliding windows, gpt-oss, in turn with torch's compiled
  flex_attention within the window, as its layers alternate), for every
  layer but the last, which a calibration runs to its cache point (the K
  and V columns of the QKV GEMM, the router); each call timed in bursts
  (the GPU's clocks before its power cap), and the layer's calls back to
  back for seconds (at the cap, as a calibration runs: the sustained
  floor). --floor-only prints the floor alone and stops.

Writes OUT/moe_bench.json (moe_bench_SHAPE.json for another shape than the
default; every figure) and prints a table: tokens/s and
tokens/s per layer of each, kvcal's ratio to the fastest transformers
configuration (the issue's target: >= 1.5), peak memory, and the worst
relative difference of each run's per-head K/V absmax from transformers
bf16's (its first run not compiled, the experts eager where that runs; with
only compiled modes, its first compiled run).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, GptOssConfig, Qwen3MoeConfig, Qwen3NextConfig

from calibrate_llama8b import (bench_ms, flush_to_disk, floor_of, gemm_step,  # noqa: E402
                               sdpa_step)

SEQ, BATCH = 2048, 8

# The released models' layer shapes: hidden, heads, kv heads, head_dim,
# experts, top-k, each expert's intermediate size, vocabulary; the
# transformers config of `layers` of them; the router's weight and the K
# projection (whose output is hooked) of a decoder layer; the attention
# implementations transformers runs the model with.
SHAPES = {
    "qwen3-30b-a3b": dict(
        name="Qwen3-30B-A3B", d=2048, h=32, hkv=4, hd=128, e=128, topk=8, mi=768,
        vocab=151936, total_layers=48, attn=("sdpa",),
        config=lambda layers: Qwen3MoeConfig(
            hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
            num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4,
            head_dim=128, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
            vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=False),
        router=lambda layer: layer.mlp.gate, k_out=lambda layer: layer.self_attn.k_norm),
    "gpt-oss-20b": dict(
        name="gpt-oss-20b", d=2880, h=64, hkv=8, hd=64, e=32, topk=4, mi=2880,
        window=128, vocab=201088, total_layers=24, attn=("eager", "flex_attention"),
        config=lambda layers: GptOssConfig(
            hidden_size=2880, intermediate_size=2880, num_hidden_layers=layers,
            num_attention_heads=64, num_key_value_heads=8, head_dim=64,
            num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
            vocab_size=201088, max_position_embeddings=131072, rms_norm_eps=1e-5,
            tie_word_embeddings=False),
        router=lambda layer: layer.mlp.router, k_out=lambda layer: layer.self_attn.k_proj),
    "qwen3-next-80b-a3b": dict(
        name="Qwen3-Next-80B-A3B", d=2048, h=16, hkv=2, hd=256, e=512, topk=10, mi=512,
        vocab=151936, total_layers=48, attn=("sdpa",), hybrid=True,
        config=lambda layers: Qwen3NextConfig(
            hidden_size=2048, intermediate_size=5120, moe_intermediate_size=512,
            shared_expert_intermediate_size=512, num_hidden_layers=layers,
            num_attention_heads=16, num_key_value_heads=2, head_dim=256,
            linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
            linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=512,
            num_experts_per_tok=10, norm_topk_prob=True, vocab_size=151936,
            max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                             "partial_rotary_factor": 0.25},
            layer_types=["full_attention" if i % 4 == 3 else "linear_attention"
                         for i in range(layers)]),
        router=lambda layer: layer.mlp.gate, k_out=lambda layer: layer.self_attn.k_norm),
}
S = SHAPES["qwen3-30b-a3b"]  # the shape of this run (main sets it)
TARGET = 1.5  # the issues': kvcal's tokens/s over the fastest transformers'


def against_target(ratio):
    """kvcal's ratio to the fastest transformers, and whether it meets TARGET."""
    return f"{ratio:.3f}x (target >= {TARGET}x: {'met' if ratio >= TARGET else 'unmet'})"


def device_memory_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def disk_layers(workdir, margin=3 << 30, fp8=False):
    """How many layers of the shape (at most the released model's) a bf16
    checkpoint (fp8: its projections a byte a weight) fits in workdir's
    free disk, less margin."""
    import shutil

    def size(model):
        return sum(p.numel() * (1 if fp8 and "proj" in n else 2)
                   for n, p in model.named_parameters())
    with torch.device("meta"):
        one, two = (size(AutoModelForCausalLM.from_config(S["config"](n))) for n in (1, 2))
    free = shutil.disk_usage(workdir).free - margin - (2 * one - two)
    layers = max(0, min(S["total_layers"], int(free // (two - one))))
    print(f"disk: {shutil.disk_usage(workdir).free / 2**30:.1f} GiB free, {(two - one) / 2**30:.2f} "
          f"GiB a layer, {(2 * one - two) / 2**30:.2f} GiB beside them: {layers} of "
          f"{S['name']}'s {S['total_layers']} layers", flush=True)
    if layers == 0:
        sys.exit(f"{workdir}: not enough free disk for one layer of {S['name']}")
    return layers


def quant_block(w, block=128):
    """w (out, in) as the fp8 method's 128 x 128 blocks: e4m3 weights and a
    float32 weight_scale_inv per block (its absmax / 448); a last block of
    fewer rows where out is not whole blocks (DeepSeek's
    kv_a_proj_with_mqa), whole blocks of columns (the activations' groups)."""
    out, inp = w.shape
    if inp % block:
        sys.exit(f"--fp8 block: a weight of {out} x {inp} is not whole blocks of {block} "
                 "columns")
    rows = -(-out // block) * block
    padded = torch.zeros(rows, inp, dtype=torch.float32, device=w.device)
    padded[:out] = w.float()
    b = padded.reshape(rows // block, block, inp // block, block)
    scale = b.abs().amax(dim=(1, 3)) / 448.0
    q = (b / scale[:, None, :, None].clamp(min=1e-12)).clamp(-448.0, 448.0)
    return q.to(torch.float8_e4m3fn).reshape(rows, inp)[:out], scale.contiguous()


def save_fp8_block(model, model_dir, shard_bytes=4 << 30, not_convert=()):
    """model (Qwen3-MoE, DeepSeek-V2) saved as Qwen3-30B-A3B-FP8 and
    DeepSeek-V3 are released: the fp8 method, every projection (attention,
    experts; but the modules not_convert names) in e4m3 128 x 128 blocks
    with weight_scale_inv, dynamic activations; the routers, norms,
    embedding and lm_head bf16; one tensor per expert; shards and an
    index."""
    import safetensors.torch as st
    os.makedirs(model_dir, exist_ok=True)
    shard, size, weight_map = {}, 0, {}

    def flush():
        nonlocal shard, size
        if shard:
            name = f"model-{len(set(weight_map.values())) + 1:05d}.safetensors"
            st.save_file(shard, os.path.join(model_dir, name), metadata={"format": "pt"})
            weight_map.update({k: name for k in shard})
            shard, size = {}, 0

    def add(name, t):
        nonlocal size
        shard[name] = t.contiguous().cpu()
        size += t.numel() * t.element_size()
        if size >= shard_bytes:
            flush()

    for name, p in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):  # one tensor per expert
            pre, inter = name[:-len("gate_up_proj")], p.shape[1] // 2
            items = [(pre + f"{e}.{proj}.weight", p[e, i * inter:(i + 1) * inter])
                     for e in range(p.shape[0]) for i, proj in enumerate(("gate_proj", "up_proj"))]
        elif name.endswith("mlp.experts.down_proj"):
            items = [(name[:-len("down_proj")] + f"{e}.down_proj.weight", p[e])
                     for e in range(p.shape[0])]
        else:
            items = [(name, p)]
        for tn, w in items:
            if tn.endswith(("_proj.weight", "_mqa.weight")) and \
                    tn[:-len(".weight")] not in not_convert:
                q, scale = quant_block(w)
                add(tn, q)
                add(tn[:-len(".weight")] + ".weight_scale_inv", scale)
            else:
                add(tn, w.to(torch.bfloat16))
    flush()
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    c = model.config.to_dict()
    c["architectures"] = [type(model).__name__]
    c["torch_dtype"] = "bfloat16"
    c["quantization_config"] = {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head"] + list(not_convert) + [
            f"model.layers.{i}.mlp.gate" for i in range(len(model.model.layers))]}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=1)


def make_model(workdir, shape, layers, fp8=False):
    """The checkpoint (saved once; fp8: as save_fp8_block saves it)."""
    model_dir = os.path.join(workdir, f"{shape}-{layers}l{'-fp8' if fp8 else ''}")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        torch.manual_seed(0)
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(S["config"](layers)).eval()
        torch.set_default_dtype(torch.float32)
        with torch.no_grad():  # routers that choose: N(0, 1) logits over the experts
            for layer in model.model.layers:
                router = S["router"](layer)
                router.weight.normal_(0.0, 1.0 / S["d"] ** 0.5)
                if getattr(router, "bias", None) is not None:
                    router.bias.zero_()
        if fp8:
            save_fp8_block(model, model_dir)
        else:
            model.save_pretrained(model_dir)
        del model
        torch.cuda.empty_cache()
    return model_dir


def run_kvcal(kvcal, model_dir, data, samples, out_dir, env=None, extra=()):
    """kvcal's JSON and peak device memory (extra: more calibrate options)."""
    baseline, peak, done = device_memory_used(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], device_memory_used() - baseline)
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", data, "--num-samples",
           str(samples), "--seq-len", str(SEQ), "--batch", str(BATCH), "--device", "cuda",
           "--granularity", "head", "--json",
           "--out", os.path.join(out_dir, "kvcal_scales.json"),
           "--stats", os.path.join(out_dir, "kvcal_stats.h5")]
    cmd += ["--quiet", *extra]
    res = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, **env) if env else None)
    done.set()
    t.join()
    if res.returncode != 0:
        sys.exit(f"kvcal calibrate{' ' + str(env) if env else ''} failed ({res.returncode}): "
                 f"{res.stderr.strip()}")
    return json.loads(res.stdout), peak[0]


def run_kvcal_median(kvcal, model_dir, data, samples, out_dir, repeats):
    """run_kvcal `repeats` times: the run of the median tokens/s (its JSON),
    the largest peak, and every run's tokens/s in order (runs of one build
    on one GPU have differed by up to 20%: bench/NOTES.md)."""
    runs = [run_kvcal(kvcal, model_dir, data, samples, out_dir) for _ in range(repeats)]
    rates = [r["tokens_per_second"] for r, _ in runs]
    median = sorted(runs, key=lambda r: r[0]["tokens_per_second"])[len(runs) // 2][0]
    if repeats > 1:
        print(f"kvcal's {repeats} runs: " + ", ".join(f"{t:.0f}" for t in rates) +
              " tokens/s; the median kept", flush=True)
    return median, max(p for _, p in runs), rates


def checkpoint_bytes(model_dir):
    """The bytes of a checkpoint's safetensors files."""
    return sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
               if f.endswith(".safetensors"))


def phase_text(res):
    """A kvcal JSON's load and forward seconds."""
    ph = res.get("phases", {})
    return (f"load {ph.get('load_seconds', float('nan')):.2f} s, forward "
            f"{ph.get('forward_seconds', float('nan')):.3f} s, of which progress saves "
            f"{ph.get('progress_save_seconds', float('nan')):.3f} s")


def print_load(res, model_dir):
    """What the weights' load did during a kvcal run: the checkpoint's bytes
    over the forward seconds (the rate the load would need to bound the
    forward), and the loader's own counts (calibrate's weights_load); returns
    the first."""
    load_rate = checkpoint_bytes(model_dir) / res["phases"]["forward_seconds"]
    print(f"kvcal's forward phase reads the checkpoint at {load_rate / 1e9:.1f} GB/s, were "
          f"the weights' load to bound it", flush=True)
    w = res.get("weights_load", {})
    if w.get("bytes"):
        gb = w["bytes"] / 1e9
        print(f"kvcal's loader: {gb:.2f} GB, every layer on its way "
              f"{w['all_layers_seconds']:.2f} s after the start; waiting for host threads' "
              f"fills {w['fill_seconds']:.2f} s, for copies {w['copy_wait_seconds']:.2f} s",
              flush=True)
    return load_rate


def print_profile(res, rows=14):
    """calibrate --profile's times (op_profile), the longest first: ms in all,
    per call and share, and the forward phase's seconds beside their sum."""
    ops = sorted(res.get("op_profile", []), key=lambda o: -o["ms"])
    total = sum(o["ms"] for o in ops)
    print(f"kvcal --profile: ops {total / 1e3:.3f} s of device time in a forward phase of "
          f"{res['phases']['forward_seconds']:.3f} s", flush=True)
    for o in ops[:rows]:
        print(f"  {o['op']:<26} {o['ms']:10.1f} ms {o['calls']:6d} calls "
              f"{o['ms'] / o['calls']:8.3f} ms a call {100 * o['ms'] / total:5.1f}%", flush=True)


def routing_counts(path, layers):
    """Per layer, the experts no token reached and the busiest expert's share."""
    try:
        import h5py
    except ImportError:
        return None
    out = []
    with h5py.File(path, "r") as f:
        for li in range(layers):
            c = f[f"layers/{li}/expert_tokens"][()]
            out.append({"cold": int((c == 0).sum()), "max_share": float(c.max() / c.sum())})
    return out


def grouped_steps(m, d, e, topk, mi):
    """The experts' two grouped GEMMs (torch's grouped_mm, the rows split
    evenly over the e experts) as floor steps [(name, ms, fn)]; [] where
    torch has none."""
    grouped = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if grouped is None:
        return []
    rows = m * topk
    offs = torch.arange(1, e + 1, device="cuda", dtype=torch.int32) * (rows // e)
    try:
        xs = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16)
        hs = torch.randn(rows, mi, device="cuda", dtype=torch.bfloat16)
        wgu = torch.randn(e, d, 2 * mi, device="cuda", dtype=torch.bfloat16) * 0.02
        wd = torch.randn(e, mi, d, device="cuda", dtype=torch.bfloat16) * 0.02

        def gate_up():
            grouped(xs, wgu, offs=offs)

        def down():
            grouped(hs, wd, offs=offs)
        return [("experts gate/up", bench_ms(gate_up), gate_up),
                ("experts down", bench_ms(down), down)]
    except (RuntimeError, TypeError) as err:
        print(f"grouped GEMM floor unavailable: {err}")
        return []


def window_step(q, k, v, window):
    """(name, ms, fn) of torch's flex_attention, compiled, causal within the
    last `window` keys, or None where it does not run."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def band(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
        mask = create_block_mask(band, None, None, q.shape[2], k.shape[2], device=q.device)
        flex = torch.compile(flex_attention)

        def fn():
            flex(q, k, v, block_mask=mask)
        return (f"flex_attention, window {window}", bench_ms(fn), fn)
    except Exception as err:  # an older torch, or no compiler: the floor says so
        print(f"sliding-window floor unavailable: {type(err).__name__}: {err}")
        return None


def alternate(full, windowed):
    """One step of a layer whose attention is full and sliding in turn: the
    two steps' calls alternated (ms their mean), or full alone where the
    windowed step did not run."""
    if not full or not windowed:
        return full
    calls = [0]

    def fn():
        (full if calls[0] % 2 == 0 else windowed)[2]()
        calls[0] += 1
    return (f"{full[0]} ({full[1]:.3f}) / {windowed[0]} ({windowed[1]:.3f}) in turn",
            (full[1] + windowed[1]) / 2, fn)


def library_floor(layers):
    """The library floor of `layers` layers at 8 x 2048 tokens (floor_of):
    (tokens/s in bursts, sustained, ms a layer in bursts, sustained, whether
    the experts' grouped GEMMs ran)."""
    D, H, HKV, HD, E, TOPK, MI = (S[k] for k in ("d", "h", "hkv", "hd", "e", "topk", "mi"))
    m = BATCH * SEQ
    steps = [gemm_step(name, m, k, n) for name, k, n in
             (("qkv", D, (H + 2 * HKV) * HD), ("o", H * HD, D), ("router", D, E))]
    experts = grouped_steps(m, D, E, TOPK, MI)
    q = torch.randn(BATCH, H, SEQ, HD, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(BATCH, HKV, SEQ, HD, device="cuda", dtype=torch.bfloat16).repeat_interleave(
        H // HKV, dim=1)
    attn = sdpa_step("SDPA", q, kv, kv)
    if S.get("window"):  # flex_attention's compiled kernel takes no k that is v
        attn = alternate(attn, window_step(q, kv, kv.clone(), S["window"]))
    steps += experts + [attn]
    # a calibration's last layer: its K and V columns of qkv, the router
    return floor_of(steps, layers, m, {"qkv": 2 * HKV / (H + 2 * HKV), "router": 1.0}) + \
        (bool(experts),)


class Deadline:
    """--deadline: SIGALRM that many seconds after the script started stops
    the configuration running (its figures are not kept) and the ones after
    it, so that the table is printed within a caller's time limit."""
    passed = False

    @staticmethod
    def start(seconds):
        def fire(signum, frame):
            Deadline.passed = True
            raise TimeoutError(f"past --deadline {seconds} s")
        if seconds > 0:
            signal.signal(signal.SIGALRM, fire)
            signal.alarm(seconds)

    @staticmethod
    def stop():
        signal.alarm(0)

    @staticmethod
    def skips(name):
        """Whether configuration name is left out: the deadline passed."""
        if Deadline.passed:
            print(f"transformers {name}: not kept (the deadline passed)", flush=True)
        return Deadline.passed


MODES = {"plain": "", "compile": " + torch.compile",
         "rcompile": " + torch.compile of each layer"}


def timed_run(body, mode, name, batches, reset):
    """Seconds of the batches through transformers' model body run as mode
    says (compile: the whole body under torch.compile; rcompile: each
    decoder layer compiled apart, undone by the next mode; else as it is),
    without its KV cache, after a warm-up batch (the compilation) and then
    reset(); None where it fails (reported) or the deadline passed."""
    fn = torch.compile(body) if mode == "compile" else body
    for layer in body.layers:
        if mode == "rcompile":
            layer.compile()
        else:
            layer._compiled_call_impl = None
    try:
        with torch.inference_mode():
            t = time.time()
            fn(input_ids=batches[0], use_cache=False)
            torch.cuda.synchronize()
            print(f"transformers {name}: warm-up {time.time() - t:.1f} s", flush=True)
            reset()
            torch.cuda.reset_peak_memory_stats()
            t = time.time()
            for b in batches:
                fn(input_ids=b, use_cache=False)
            torch.cuda.synchronize()
            t = time.time() - t
    except Exception as e:  # a configuration that does not run is reported
        print(f"transformers {name}: failed: {type(e).__name__}: {str(e)[:300]}")
        return None
    return None if Deadline.skips(name) else t


def transformers_runs(model_dir, layers, batches, experts, attns, modes):
    """{name: (tokens/s, peak bytes, absmax)} of each experts implementation
    with each attention implementation, in each of modes."""
    HKV, HD = S["hkv"], S["hd"]
    results = {}
    for impl, attn in [(i, a) for i in experts for a in attns]:
        try:
            t = time.time()
            model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.bfloat16, attn_implementation=attn,
                experts_implementation=impl, device_map="cuda").eval()
            print(f"transformers {impl}, {attn}: loaded in {time.time() - t:.1f} s", flush=True)
        except Exception as e:  # an implementation this transformers lacks
            print(f"transformers {transformers.__version__}: experts_implementation={impl}, "
                  f"attn_implementation={attn}: {type(e).__name__}: {str(e)[:300]}")
            continue
        body = model.model
        # the layers that cache K and V (a hybrid's attention layers)
        cached = [i for i, layer in enumerate(body.layers) if hasattr(layer, "self_attn")]
        rope_fn = sys.modules[type(body.layers[cached[0]].self_attn).__module__] \
            .apply_rotary_pos_emb
        pos = torch.arange(SEQ, device="cuda").unsqueeze(0).expand(BATCH, SEQ)
        cos, sin = body.rotary_emb(torch.empty(1, device="cuda", dtype=torch.bfloat16), pos)
        stats = {(i, k): torch.zeros(HKV, device="cuda") for i in cached for k in "kv"}

        def hook(layer, kind):
            buf = stats[(layer, kind)]

            def fn(mod, inp, out):
                x = out.view(BATCH, SEQ, HKV, HD)
                if kind == "k":  # the model's own RoPE of k_proj (k_norm): the cache's K
                    x = rope_fn(x.transpose(1, 2), x.transpose(1, 2), cos, sin)[1].transpose(1, 2)
                buf.copy_(torch.maximum(buf, x.abs().amax(dim=(0, 1, 3)).float()))
            return fn

        for i in cached:
            layer = body.layers[i]
            S["k_out"](layer).register_forward_hook(hook(i, "k"))
            layer.self_attn.v_proj.register_forward_hook(hook(i, "v"))
        for mode in modes:
            name = (f"{impl}{'' if len(attns) == 1 else ', ' + attn + ' attention'}"
                    f"{MODES[mode]}")
            if Deadline.skips(name):
                continue
            t = timed_run(body, mode, name, batches,
                          lambda: [buf.zero_() for buf in stats.values()])
            if t is None:
                continue
            results[name] = (len(batches) * BATCH * SEQ / t, torch.cuda.max_memory_allocated(),
                             {k: v.tolist() for k, v in stats.items()})
            print(f"transformers {name}: {results[name][0]:.0f} tokens/s", flush=True)
        del model, body
        torch.cuda.empty_cache()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--experts", nargs="+", default=["eager", "batched_mm", "grouped_mm"],
                    help="transformers' experts implementations to time; none: kvcal "
                    "alone (no transformers run, no library floor)")
    ap.add_argument("--attn", nargs="+", help="its attention implementations (default: "
                    "the shape's: sdpa; gpt-oss eager and flex_attention)")
    ap.add_argument("--modes", default="plain,compile",
                    help="how transformers runs, in this order: plain, compile (the whole "
                    "body), rcompile (each layer apart), comma-separated")
    ap.add_argument("--kvcal-repeats", type=int, default=1,
                    help="run kvcal this many times and keep the median run")
    ap.add_argument("--kvcal-profile", action="store_true",
                    help="run kvcal once more with --profile and print where its time went")
    ap.add_argument("--kvcal-variant", action="append", default=[], metavar="VAR=VALUE")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds after which transformers' configurations stop (0: none)")
    ap.add_argument("--fp8", choices=["block"],
                    help="the checkpoint in FP8 as Qwen3-30B-A3B-FP8 is released "
                    "(qwen3-30b-a3b only; kvcal alone)")
    ap.add_argument("--floor-only", action="store_true",
                    help="print the library floor at the shape (--layers, 0: all of its "
                    "layers) and stop: no checkpoint, no kvcal, no transformers")
    a = ap.parse_args()
    if a.fp8 and (a.shape != "qwen3-30b-a3b" or a.experts != ["none"]):
        sys.exit("--fp8 block: give --shape qwen3-30b-a3b and --experts none "
                 "(transformers is not timed on FP8 weights here)")
    if a.kvcal_repeats < 1:
        sys.exit(f"--kvcal-repeats {a.kvcal_repeats}: give 1 or more")
    Deadline.start(a.deadline)
    if any("=" not in v for v in a.kvcal_variant):
        sys.exit(f"--kvcal-variant: use VAR=VALUE (got {a.kvcal_variant})")
    modes = a.modes.split(",")
    if not modes or any(m not in MODES for m in modes):
        sys.exit(f"--modes {a.modes}: use plain, compile and rcompile, comma-separated")
    global S
    S = SHAPES[a.shape]
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    if a.floor_only and S.get("hybrid"):
        sys.exit(f"--floor-only: no library floor for {S['name']} (torch has no gated "
                 "delta-net kernel)")
    if a.floor_only:
        layers = a.layers or S["total_layers"]
        held = library_floor(layers)[1]
        print(f"{S['name']}, {layers} layers: library floor sustained {held:.0f} tokens/s")
        return
    if a.layers == 0:
        a.layers = disk_layers(a.workdir, fp8=bool(a.fp8))
    t = time.time()
    model_dir = make_model(a.workdir, a.shape, a.layers, fp8=bool(a.fp8))
    flush_to_disk("the checkpoint")
    print(f"checkpoint of {a.layers} layers ready in {time.time() - t:.1f} s", flush=True)
    samples = a.batches * BATCH
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, S["vocab"], (samples, SEQ), generator=g)
    data = os.path.join(a.workdir, f"tokens-{samples}.jsonl")
    with open(data, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    t = time.time()
    res, kv_peak, kv_rates = run_kvcal_median(a.kvcal, model_dir, data, samples, a.out,
                                              a.kvcal_repeats)
    print(f"kvcal's {a.kvcal_repeats} run(s): {time.time() - t:.1f} s end to end", flush=True)
    kvcal_tps = res["tokens_per_second"]
    print(f"kvcal calibrate --device cuda: {kvcal_tps:.0f} tokens/s "
          f"({phase_text(res)})", flush=True)
    load_rate = print_load(res, model_dir)
    counts = routing_counts(os.path.join(a.out, "kvcal_stats.h5"), a.layers)
    if a.kvcal_profile:
        pdir = os.path.join(a.out, "profile")
        os.makedirs(pdir, exist_ok=True)
        pres, _ = run_kvcal(a.kvcal, model_dir, data, samples, pdir, extra=["--profile"])
        print_profile(pres)
    variants = {}
    for v in a.kvcal_variant:
        name, value = v.split("=", 1)
        vdir = os.path.join(a.out, "variant-" + re.sub(r"[^\w.-]", "_", v))
        os.makedirs(vdir, exist_ok=True)
        exe, env = (value, None) if name == "KVCAL" else (a.kvcal, {name: value})
        vres, vpeak = run_kvcal(exe, model_dir, data, samples, vdir, env)
        # the variant's per-head K/V absmax against the default run's
        vdiff = max(abs(g - r) / r for lv, lr in zip(vres["layers"], res["layers"])
                    for kind in ("k_absmax", "v_absmax")
                    for g, r in zip(lv[kind], lr[kind]) if r > 0)
        variants[v] = (vres["tokens_per_second"], vpeak, vdiff)
        print(f"kvcal calibrate --device cuda, {v}: {variants[v][0]:.0f} tokens/s", flush=True)
    alone = a.experts == ["none"]
    batches = [ids[b * BATCH:(b + 1) * BATCH].cuda() for b in range(a.batches)]
    # the floor before transformers: its figures stay should a compilation
    # run past the caller's time
    floor = None if alone or S.get("hybrid") else library_floor(a.layers)
    hf = {} if alone else transformers_runs(model_dir, a.layers, batches, a.experts,
                                             a.attn or S["attn"], modes)
    Deadline.stop()

    # the reference: transformers bf16 not compiled, the experts eager where that
    # ran; without a run not compiled (--modes rcompile), the first compiled one
    plain = [n for n in hf if "compile" not in n]
    ref_name = next((n for n in plain if n.startswith("eager")),
                    plain[0] if plain else next(iter(hf), None))
    ref = hf[ref_name][2] if ref_name else None

    def kvcal_absmax(r):
        return {(li, kind): layer[kind + "_absmax"] for li, layer in enumerate(r["layers"])
                for kind in "kv"}

    def worst_diff(got, kinds="kv"):
        """The worst relative difference of per-head absmax got from ref's."""
        return max(abs(g - r) / r for (li, kind), heads in ref.items() if kind in kinds
                   for g, r in zip(got[(li, kind)], heads) if r > 0)

    worst = {kind: worst_diff(kvcal_absmax(res), kind) for kind in "kv"} if ref else {}
    fastest = max(hf.items(), key=lambda kv: kv[1][0]) if hf else None
    # name, tokens/s, peak bytes (0: not sampled), per-head K/V absmax (None: not
    # of these B batches)
    table = [("kvcal calibrate --device cuda", kvcal_tps, kv_peak, kvcal_absmax(res))] + \
        [(f"kvcal calibrate --device cuda, {v}", tps, peak, None)
         for v, (tps, peak, _) in variants.items()] + \
        [(f"transformers {name}", v[0], v[1], v[2]) for name, v in hf.items()] + \
        ([] if floor is None else
         [("library floor (grouped GEMM + SDPA), bursts" if floor[4] else
           "library floor (no grouped GEMM: dense GEMMs + SDPA only), bursts", floor[0], 0,
           None),
          ("library floor, the same calls sustained", floor[1], 0, None)])
    print(f"\n{a.layers} layers of {S['name']}, {samples} x {SEQ} tokens, "
          f"batches of {BATCH} x {SEQ}; K/V absmax: the worst relative difference of "
          f"a run's per-head absmax from transformers bf16's"
          f"{' (' + ref_name + ')' if ref_name else ' (no transformers run)'}")
    print(f"{'':48s} {'tokens/s':>10s} {'per layer':>11s} {'peak GiB':>9s} {'K/V absmax':>11s}")
    for name, tps, peak, absmax in table:
        diff = f"{worst_diff(absmax):11.2e}" if ref and absmax else f"{'-':>11s}"
        print(f"{name:48s} {tps:10.0f} {tps * a.layers:11.0f} "
              f"{peak / 2 ** 30 if peak else float('nan'):9.2f} {diff}")
    if fastest:
        print(f"kvcal / fastest transformers ({fastest[0]}): "
              f"{against_target(kvcal_tps / fastest[1][0])}" + ("" if floor is None else
                                    f"; kvcal / floor: {kvcal_tps / floor[0]:.2f} in bursts, "
                                    f"{kvcal_tps / floor[1]:.2f} sustained; the target / the "
                                    f"sustained floor: {TARGET * fastest[1][0] / floor[1]:.2f}"))

    for kind, w in worst.items():
        print(f"per-head {kind.upper()} absmax, kvcal vs transformers bf16 ({ref_name}): "
              f"worst rel. diff {w:.2e}")
    for v, (tps, _, diff) in variants.items():
        print(f"kvcal {v}: {tps / kvcal_tps:.2f}x the default run's tokens/s; per-head K/V "
              f"absmax against the default run: worst rel. diff {diff:.2e}")
    if counts:
        print("experts no token reached, per layer: " + ", ".join(str(c["cold"]) for c in counts))
    figures = os.path.join(a.out, "moe_bench.json" if a.shape == "qwen3-30b-a3b"
                           else f"moe_bench_{a.shape}.json")
    with open(figures, "w") as f:
        json.dump({"shape": a.shape, "layers": a.layers, "samples": samples, "seq_len": SEQ,
                   "batch": BATCH,
                   "torch": torch.__version__, "transformers": transformers.__version__,
                   "device": torch.cuda.get_device_name(),
                   "kvcal": {"tokens_per_second": kvcal_tps, "peak_bytes": kv_peak,
                             "runs_tokens_per_second": kv_rates,
                             "checkpoint_bytes_per_forward_second": load_rate,
                             "phases": res.get("phases")},
                   "kvcal_variants": {v: {"tokens_per_second": tps, "peak_bytes": peak,
                                          "absmax_worst_rel_diff_vs_kvcal": diff}
                                      for v, (tps, peak, diff) in variants.items()},
                   "transformers_runs": {k: {"tokens_per_second": v[0], "peak_bytes": v[1]}
                                         for k, v in hf.items()},
                   "floor": None if floor is None else
                   {"tokens_per_second": floor[0], "sustained_tokens_per_second": floor[1],
                    "layer_ms": floor[2], "sustained_layer_ms": floor[3],
                    "grouped_gemm": floor[4]},
                   "absmax_reference": ref_name, "absmax_worst_rel_diff": worst,
                   "routing": counts}, f, indent=1)
    print(f"wrote {figures}")


if __name__ == "__main__":
    main()
