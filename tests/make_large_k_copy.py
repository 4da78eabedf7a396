#!/usr/bin/env python3
"""Copies a model with K made `factor` times larger (k_proj weight and bias
x factor) and q_proj / factor, so q.k, attention and perplexity are unchanged
in exact arithmetic while K's absmax grows: the large-K regime some real
models have (e.g. Qwen2-style k bias), where scale 1.0 overflows e4m3 and
calibration matters. Used for the `kvcal eval` evidence in bench/NOTES.md.

usage: tests/make_large_k_copy.py MODEL OUT [--factor 64]
  MODEL: a llama2.c .bin file, or a Hugging Face checkpoint directory
         (config.json + model.safetensors; tokenizer files are copied)
  OUT:   the .bin file / directory to write
Needs numpy (and safetensors for Hugging Face checkpoints)."""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np


def copy_llama2c(src, dst, factor):
    raw = open(src, "rb").read()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("7i", raw[:28])
    w = np.frombuffer(raw, dtype=np.float32, offset=28).copy()
    head_size = dim // heads
    off = abs(vocab) * dim + layers * dim  # token_embedding, rms_att
    nq = layers * heads * head_size * dim
    nk = layers * kv_heads * head_size * dim
    w[off:off + nq] /= factor
    w[off + nq:off + nq + nk] *= factor
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(raw[:28])
        f.write(w.tobytes())
    tok = os.path.join(os.path.dirname(src), "tok512.bin")
    if os.path.exists(tok):
        shutil.copy(tok, os.path.join(os.path.dirname(os.path.abspath(dst)), "tok512.bin"))


def copy_hf(src, dst, factor):
    from safetensors.numpy import load_file, save_file

    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isfile(path) and not name.endswith(".safetensors") \
                and name != "model.safetensors.index.json":
            shutil.copy(path, os.path.join(dst, name))
    shards = sorted(n for n in os.listdir(src) if n.endswith(".safetensors"))
    if not shards:
        sys.exit(f"{src}: no .safetensors file")
    if os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        shutil.copy(os.path.join(src, "model.safetensors.index.json"), dst)
    for shard in shards:
        tensors = load_file(os.path.join(src, shard))
        for name, t in tensors.items():
            if ".self_attn.k_proj." in name:
                tensors[name] = (t.astype(np.float32) * factor).astype(t.dtype)
            elif ".self_attn.q_proj." in name:
                tensors[name] = (t.astype(np.float32) / factor).astype(t.dtype)
        save_file(tensors, os.path.join(dst, shard))
    cfg = json.load(open(os.path.join(src, "config.json")))
    if cfg.get("model_type") == "qwen3":
        print("note: qwen3 normalizes k per head (k_norm): scaling k_proj does not "
              "scale K", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--factor", type=float, default=64.0)
    a = ap.parse_args()
    if os.path.isdir(a.model):
        copy_hf(a.model, a.out, a.factor)
    else:
        copy_llama2c(a.model, a.out, a.factor)
    print(f"wrote {a.out} (K x {a.factor:g}, q / {a.factor:g})")


if __name__ == "__main__":
    main()
