#!/usr/bin/env python3
"""kvcal calibrate --device cuda on FP8 checkpoints against a torch model
that serves them as vLLM does (tests/fp8_reference.py, mode "gpu": the
activations quantized as vLLM's kernels do, torch._scaled_mm on the e4m3
operands with per-tensor, row-wise or 1x128 / 128x128 block scales, bf16
out), on this GPU.

For every scheme of fp8_reference.SCHEMES (blocks of 128, so that
cuBLASLt's block-scaled GEMMs run), a random Llama or Qwen3 model of
hidden 512, intermediate 1024, 8 heads, 2 kv heads (head_dim 64), 2 layers
is written under WORK, then 4 samples of 256 tokens run through kvcal
(cuBLASLt's FP8 GEMMs, and KVCAL_FP8_GEMM=dequant: the dequantized bf16
fallback) and through the torch model; per-layer per-kv-head absmax of K
(after RoPE and the q/k norm) and V must agree within 2%.

usage: fp8_vs_torch_gpu.py --kvcal KVCAL [--work DIR] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_reference as ref  # noqa: E402

DIMS = (512, 1024, 8, 2, 512)  # hidden, intermediate, heads, kv heads, vocab
SAMPLES, SEQ, LIMIT = 4, 256, 0.02


def torch_absmax(model, ids):
    """Per layer, per kv head absmax of K (after k_norm and RoPE) and V of the
    model over the samples: hooks recompute K and V as the attention module
    does, with its own projections."""
    layers = model.model.layers
    k_abs = torch.zeros(len(layers), DIMS[3], device="cuda")
    v_abs = torch.zeros_like(k_abs)

    def make_hook(i, attn):
        rope_fn = sys.modules[type(attn).__module__].apply_rotary_pos_emb

        def hook(module, args, kwargs):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            cos, sin = kwargs["position_embeddings"]
            shape = (*hs.shape[:-1], -1, attn.head_dim)
            k = module.k_proj(hs).view(shape)
            v = module.v_proj(hs).view(shape)
            if hasattr(module, "k_norm"):
                k = module.k_norm(k)
            _, k = rope_fn(k.transpose(1, 2), k.transpose(1, 2), cos, sin)
            k_abs[i] = torch.maximum(k_abs[i], k.abs().amax(dim=(0, 2, 3)).float())
            v_abs[i] = torch.maximum(v_abs[i], v.abs().amax(dim=(0, 1, 3)).float())
        return hook

    hooks = [layer.self_attn.register_forward_pre_hook(make_hook(i, layer.self_attn),
                                                      with_kwargs=True)
             for i, layer in enumerate(layers)]
    with torch.inference_mode():
        model(torch.tensor(ids, device="cuda"), use_cache=False)
    for h in hooks:
        h.remove()
    return k_abs.tolist(), v_abs.tolist()


def kvcal_absmax(kvcal, model_dir, data, env):
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", data, "--num-samples",
           str(SAMPLES), "--seq-len", str(SEQ), "--batch", str(SAMPLES), "--device", "cuda",
           "--json", "--quiet", "--out", os.path.join(model_dir, "scales.json")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env))
    if res.returncode:
        raise RuntimeError("kvcal calibrate failed (%d): %s" % (res.returncode,
                                                               res.stderr.strip()))
    out = json.loads(res.stdout)
    return ([layer["k_absmax"] for layer in out["layers"]],
            [layer["v_absmax"] for layer in out["layers"]])


def worst(got, want):
    return max(abs(g - w) / w for gl, wl in zip(got, want) for g, w in zip(gl, wl))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvcal", required=True)
    ap.add_argument("--work")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="kvcal-fp8-")
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, DIMS[4], (SAMPLES, SEQ), generator=gen).tolist()
    data = os.path.join(work, "ids.jsonl")
    os.makedirs(work, exist_ok=True)
    with open(data, "w") as f:
        for row in ids:
            f.write(json.dumps({"input_ids": row}) + "\n")
    results, ok = [], True
    for i, scheme in enumerate(ref.SCHEMES):
        method, kind, act, block, opt = ref.SCHEMES[scheme]
        if block:  # cuBLASLt's block modes are 128 x 128
            ref.SCHEMES[scheme] = (method, kind, act, (128, 128), opt)
        arch = ("llama", "qwen3")[i % 2]
        d = os.path.join(work, scheme)
        ref.make_checkpoint(d, arch, scheme, DIMS, ids[:1])
        model = ref.served_model(d, arch, scheme, DIMS, dtype=torch.bfloat16, mode="gpu",
                                 device="cuda")
        tk, tv = torch_absmax(model, ids)
        del model
        row = {"scheme": scheme, "architecture": arch}
        for path, env in (("fp8_gemm", {}), ("dequant", {"KVCAL_FP8_GEMM": "dequant"})):
            kk, kv = kvcal_absmax(a.kvcal, d, data, env)
            row[path] = max(worst(kk, tk), worst(kv, tv))
            ok &= row[path] <= LIMIT
        results.append(row)
        print("%-24s %-6s kvcal FP8 GEMMs vs torch._scaled_mm: worst rel. diff %.2e; "
              "dequantized fallback: %.2e" % (scheme, arch, row["fp8_gemm"], row["dequant"]),
              flush=True)
    print("FP8 checkpoints, per-head K/V absmax, kvcal --device cuda vs torch FP8 (limit %g): "
          "%s" % (LIMIT, "PASS" if ok else "FAIL"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
