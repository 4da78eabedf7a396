#!/usr/bin/env python3
"""kvcal on a multimodal model's checkpoint layout against the same language
model saved as a causal LM, at Qwen3-VL-30B-A3B's shapes, in one run.

usage: multimodal_layout.py KVCAL WORKDIR OUT [--layers N] [--batches B]
                             [--kvcal-repeats N]

Qwen3-VL-30B-A3B's language model is Qwen3-30B-A3B's layers (hidden 2048, 32
query / 4 kv heads of 128, q/k norm, 128 experts of 768, top-8,
renormalized). bench/calibrate_moe.py's random checkpoint of those layers
(one tensor per expert, under model.layers) is written again as
Qwen3VLMoeForConditionalGeneration is released: its layers under
model.language_model.layers, each layer's experts in two tensors,
gate_up_proj (experts, hidden, 2 x 768; gate's columns then up's) and
down_proj (experts, 768, hidden), the config's text_config beside a
vision_config (no vision weights: kvcal reads none). Then, on the same
random tokens (B x 8 samples of 2048), `KVCAL calibrate --device cuda` on
each: tokens/s (the median of --kvcal-repeats runs), load seconds, peak
device memory, and whether the two runs' per-head K/V absmax are equal (the
same weights: they must be, bit for bit).
"""
import argparse
import json
import os
import sys
import time

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibrate_moe as cm  # noqa: E402


def to_vl_moe(src, dst, layers):
    """src (a Qwen3-MoE checkpoint) written as Qwen3-VL-MoE's released one
    into dst, a shard a layer."""
    if os.path.exists(os.path.join(dst, "config.json")):
        return dst
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    idx = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(idx):
        index = json.load(open(idx))["weight_map"]
    else:
        with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
            index = {n: "model.safetensors" for n in f.keys()}
    E = cfg.get("num_experts") or cfg["num_local_experts"]
    weight_map = {}
    handles = {f: safe_open(os.path.join(src, f), "pt") for f in set(index.values())}

    def get(name):
        return handles[index[name]].get_tensor(name)

    for l in range(-1, layers):
        prefix = "model.layers.%d." % l if l >= 0 else None
        names = [n for n in index if (n.startswith(prefix) if prefix else
                                      not n.startswith("model.layers."))]
        out = {}
        for n in names:
            if ".mlp.experts." in n:
                continue
            new = n.replace("model.", "model.language_model.", 1) if n.startswith("model.") else n
            out[new] = get(n)
        if prefix:
            p = prefix + "mlp.experts.%d.%s.weight"
            gate = torch.stack([get(p % (e, "gate_proj")) for e in range(E)])  # (E, I, H)
            up = torch.stack([get(p % (e, "up_proj")) for e in range(E)])
            down = torch.stack([get(p % (e, "down_proj")) for e in range(E)])  # (E, H, I)
            lp = "model.language_model.layers.%d.mlp.experts." % l
            out[lp + "gate_up_proj"] = torch.cat([gate, up], 1).transpose(1, 2).contiguous()
            out[lp + "down_proj"] = down.transpose(1, 2).contiguous()
        shard = "model-%s.safetensors" % ("top" if l < 0 else "%05d" % l)
        save_file(out, os.path.join(dst, shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in out})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(dst, "model.safetensors.index.json"), "w"))
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type",
                                                      "rope_theta", "rope_scaling",
                                                      "rope_parameters", "dtype",
                                                      "torch_dtype", "transformers_version")}
    # the same RoPE as src's (the bench's rope_theta), in Qwen3-VL's 3 sections
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 1e6))
    text.update(model_type="qwen3_vl_moe_text",
                rope_parameters={"rope_type": "default", "rope_theta": theta,
                                 "mrope_section": [24, 20, 20], "mrope_interleaved": True})
    json.dump({"architectures": ["Qwen3VLMoeForConditionalGeneration"],
               "model_type": "qwen3_vl_moe", "tie_word_embeddings": False,
               "text_config": text, "dtype": "bfloat16",
               "vision_config": {"depth": 27, "hidden_size": 1152, "model_type": "qwen3_vl_moe",
                                 "out_hidden_size": 2048}},
              open(os.path.join(dst, "config.json"), "w"), indent=1)
    return dst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--kvcal-repeats", type=int, default=3)
    a = ap.parse_args()
    cm.S = cm.SHAPES["qwen3-30b-a3b"]
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    t = time.time()
    causal = cm.make_model(a.workdir, "qwen3-30b-a3b", a.layers)
    print(f"Qwen3-MoE checkpoint of {a.layers} layers in {time.time() - t:.1f} s", flush=True)
    t = time.time()
    vl = to_vl_moe(causal, causal + "-vl", a.layers)
    cm.flush_to_disk("the checkpoints")
    print(f"written as Qwen3-VL-MoE in {time.time() - t:.1f} s", flush=True)
    samples = a.batches * cm.BATCH
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, cm.S["vocab"], (samples, cm.SEQ), generator=g)
    data = os.path.join(a.workdir, f"tokens-{samples}.jsonl")
    with open(data, "w") as f:
        for row in ids.tolist():
            f.write(json.dumps({"input_ids": row}) + "\n")
    rows = {}
    for name, model_dir in (("Qwen3MoeForCausalLM (per-expert tensors)", causal),
                            ("Qwen3VLMoeForConditionalGeneration (stacked experts)", vl)):
        out = os.path.join(a.out, os.path.basename(model_dir))
        os.makedirs(out, exist_ok=True)
        res, peak, rates = cm.run_kvcal_median(a.kvcal, model_dir, data, samples, out,
                                               a.kvcal_repeats)
        rows[name] = (res, peak, rates)
        print(f"{name}: {res['tokens_per_second']:.0f} tokens/s ({cm.phase_text(res)}), "
              f"peak {peak / 2**30:.2f} GiB", flush=True)
    (r1, _, _), (r2, _, _) = rows.values()
    same = all(l1[k] == l2[k] for l1, l2 in zip(r1["layers"], r2["layers"])
               for k in ("k_absmax", "v_absmax"))
    print("\n| %d layers, %d x %d tokens | kvcal tokens/s (runs) | load s | peak GiB |"
          % (a.layers, samples, cm.SEQ))
    print("|---|---|---|---|")
    for name, (res, peak, rates) in rows.items():
        print("| %s | %.0f (%s) | %s | %.2f |" % (
            name, res["tokens_per_second"], " / ".join("%.0f" % r for r in rates),
            "%.2f" % res.get("phases", {}).get("load_seconds", float("nan")), peak / 2**30))
    print("per-head K/V absmax of the two runs %s" % ("equal" if same else "DIFFER"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
