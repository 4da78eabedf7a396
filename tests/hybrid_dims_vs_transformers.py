#!/usr/bin/env python3
"""kvcal's cpu runner against transformers (fp32, CPU) on hybrid models at
the served models' own layer sizes, where the golden fixtures
(tests/make_golden.py) use tiny ones: Qwen3.5-9B's (hidden 4096, 16 heads
of 256 and 4 kv heads, delta-nets of 16 key heads and 32 value heads of
128, MLP 12288) and Qwen3-Next-80B-A3B's attention and delta-net (hidden
2048, 2 kv heads, in_proj_qkvz fused in 16 key-head groups; 8 experts of
512 instead of 512, to fit a small host), two layers each (a linear one,
then an attention one), random weights saved in bf16. Prints each model's
worst per-head K and V absmax distance relative to the largest; exits 1
past --rtol.

Usage: python3 tests/hybrid_dims_vs_transformers.py [--kvcal build-cpu/kvcal]
       [--work DIR] [--rtol 1e-5]   (from the repository root; needs torch,
transformers, safetensors, numpy; about a minute and 4 GB)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402

LIN = dict(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
           linear_value_head_dim=128, linear_conv_kernel_dim=4, head_dim=256,
           num_attention_heads=16, num_hidden_layers=2, vocab_size=1024,
           layer_types=["linear_attention", "full_attention"], max_position_embeddings=4096,
           rms_norm_eps=1e-6, tie_word_embeddings=False,
           rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                            "partial_rotary_factor": 0.25})


def configs(tf):
    return [
        ("qwen3_5_9b_layers", tf.Qwen3_5TextConfig(
            hidden_size=4096, intermediate_size=12288, num_key_value_heads=4,
            architectures=["Qwen3_5ForCausalLM"], **LIN)),
        ("qwen3_next_80b_a3b_layers", tf.Qwen3NextConfig(
            hidden_size=2048, intermediate_size=5120, moe_intermediate_size=512,
            shared_expert_intermediate_size=512, num_experts=8, num_experts_per_tok=4,
            norm_topk_prob=True, num_key_value_heads=2,
            architectures=["Qwen3NextForCausalLM"], **LIN)),
    ]


def check(name, cfg, kvcal, work, torch, tf):
    d = os.path.join(work, name)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    make_golden.randomize(model, torch)
    with torch.no_grad():  # projections over sqrt(fan-in): activations stay of order 1
        for n, p in model.named_parameters():
            if n.endswith("weight") and p.dim() == 2 and "embed" not in n:
                p.mul_(1.0 / p.shape[1] ** 0.5)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    ref = tf.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    seen = make_golden.capture_kv(ref, torch)
    rng = np.random.default_rng(3)
    samples = [rng.integers(1, cfg.vocab_size, size=96).tolist() for _ in range(2)]
    ks, vs = [], []
    with torch.no_grad():
        for s in samples:
            seen.clear()
            ref(torch.tensor([s]), use_cache=False)
            ks.append(np.stack([k for k, _ in seen]))
            vs.append(np.stack([v for _, v in seen]))
    want = [np.max([np.abs(x).max(axis=(1, 3)) for x in xs], axis=0) for xs in (ks, vs)]
    ids = os.path.join(work, name + ".jsonl")
    with open(ids, "w") as f:
        f.write("".join(json.dumps({"input_ids": s}) + "\n" for s in samples))
    r = subprocess.run([kvcal, "calibrate", "--model", d, "--dataset", ids, "--num-samples",
                        "2", "--seq-len", "96", "--granularity", "head", "--format", "kvcal",
                        "--out", os.path.join(work, name + "_scales.json"), "--json",
                        "--quiet"], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip())
    layers = [l for l in json.loads(r.stdout)["layers"] if l.get("kv_cache", True)]
    got = [np.array([l[k] for l in layers]) for k in ("k_absmax", "v_absmax")]
    return [float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(got, want)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcal", default="build-cpu/kvcal")
    ap.add_argument("--work")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()
    import torch
    import transformers as tf
    torch.set_num_threads(2)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in configs(tf):
            k, v = check(name, cfg, os.path.abspath(a.kvcal), a.work or tmp, torch, tf)
            ok &= max(k, v) <= a.rtol
            print("%-28s K %.2e V %.2e (worst per-head absmax distance / largest) %s"
                  % (name, k, v, "ok" if max(k, v) <= a.rtol else "OUTSIDE %g" % a.rtol))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
