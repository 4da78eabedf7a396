#!/usr/bin/env python3
"""Time to scales on a GPU: whole processes, from start to exit, of
`kvcal calibrate --device cuda` and of the script a PyTorch user writes
(from_pretrained onto the GPU, hooks on k_proj / v_proj, forward, the
absmax written as JSON), on a Llama-3-8B-shaped random-weight model saved
with save_pretrained in 5 GB shards and the same token ids.

usage: time_to_scales.py KVCAL WORKDIR [--layers N] [--samples N ...]
                         [--stream-samples N] [--cap SIZE] [--rounds R]

For each --samples count (8 and 64 by default, x 2048 tokens, batches of
8) it times kvcal and the transformers script in turn, R rounds, and
prints every time and the medians; then at --stream-samples (256) kvcal
with every layer on the device and under --max-device-memory CAP (default
a quarter of the model's weights), their forward tokens/s, the ratio, and
whether their scales files are byte-identical. Before every run the
checkpoint's files are read once, so that every contender starts from the
same page cache (the whole checkpoint cached). For every process it
reports the peak resident host memory, its own (anonymous: heap, pinned
buffers) apart from the checkpoint's pages that it mapped (file-backed,
the page cache's), sampled every 20 ms from /proc, and kvcal's phases
(load, forward, write) from its --json summary.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

SEQ, BATCH = 2048, 8

# The PyTorch user's script, run as its own process: argv model_dir tokens out.
HF_SCRIPT = r'''
import json, sys, time
t0 = time.time()
import torch
from transformers import AutoModelForCausalLM
model_dir, tokens, out = sys.argv[1:4]
t1 = time.time()
try:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                 device_map="cuda")
    how = "device_map=cuda"
except (ImportError, ValueError) as e:  # device_map wants accelerate where it is absent
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda()
    how = "from_pretrained then .cuda() (" + type(e).__name__ + ")"
model.eval()
torch.cuda.synchronize()
t2 = time.time()
cfg = model.config
hkv, hd = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
absmax = {}
def hook(name):
    def fn(mod, inp, outp):
        m = outp.view(-1, hkv, hd).abs().amax(dim=(0, 2)).float()
        absmax[name] = torch.maximum(absmax[name], m) if name in absmax else m
    return fn
for i, layer in enumerate(model.model.layers):
    layer.self_attn.k_proj.register_forward_hook(hook(f"{i}.k"))
    layer.self_attn.v_proj.register_forward_hook(hook(f"{i}.v"))
ids = torch.tensor([json.loads(l)["input_ids"] for l in open(tokens)])
with torch.inference_mode():
    for b in range(0, len(ids), 8):
        model.model(input_ids=ids[b:b + 8].cuda())
torch.cuda.synchronize()
t3 = time.time()
json.dump({k: v.tolist() for k, v in absmax.items()}, open(out, "w"))
print(json.dumps({"import": t1 - t0, "from_pretrained": t2 - t1, "forward": t3 - t2,
                  "tokens_per_second": ids.numel() / (t3 - t2), "load": how}))
'''


def make_model(workdir, layers, counts):
    """The checkpoint (5 GB shards) and a JSONL of `count` 2048-token rows
    for each count, made in a child process so that this one holds no GPU
    memory."""
    code = (
        "import sys, json, torch\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from calibrate_llama8b import llama8b_config, llama8b_model\n"
        "cfg = llama8b_config(int(sys.argv[3]))\n"
        "llama8b_model(cfg).save_pretrained(sys.argv[2] + '/model', max_shard_size='5GB')\n"
        "for n in map(int, sys.argv[4:]):\n"
        "    g = torch.Generator().manual_seed(1)\n"
        "    ids = torch.randint(0, cfg.vocab_size, (n, 2048), generator=g)\n"
        "    with open(f'{sys.argv[2]}/tokens{n}.jsonl', 'w') as f:\n"
        "        for row in ids.tolist():\n"
        "            f.write(json.dumps({'input_ids': row}) + '\\n')\n")
    subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__)),
                    workdir, str(layers)] + [str(n) for n in counts], check=True)


def warm_page_cache(model_dir):
    """Reads every file of the checkpoint once; returns their bytes."""
    total = 0
    for name in sorted(os.listdir(model_dir)):
        with open(os.path.join(model_dir, name), "rb") as f:
            while True:
                chunk = f.read(1 << 24)
                if not chunk:
                    break
                total += len(chunk)
    return total


def rss_kib(pid):
    """RssAnon and RssFile of a process in KiB (0, 0 once it is gone)."""
    anon = file = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("RssFile:"):
                    file = int(line.split()[1])
    except OSError:
        pass
    return anon, file


def timed_process(cmd):
    """Runs cmd; returns (seconds from spawn to exit, stdout, peak anonymous
    and file-backed resident GiB, exit status)."""
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            anon, file = rss_kib(p.pid)
            peak[0], peak[1] = max(peak[0], anon), max(peak[1], file)
            time.sleep(0.02)

    s = threading.Thread(target=sample)
    s.start()
    out, err = p.communicate()
    seconds = time.time() - t
    done.set()
    s.join()
    if p.returncode != 0:
        print(f"{cmd[0]} failed ({p.returncode}): {err.strip()[-2000:]}", flush=True)
    return seconds, out, peak[0] / 2**20, peak[1] / 2**20, p.returncode


def run_kvcal(kvcal, model_dir, tokens, n, out, extra=()):
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", tokens, "--num-samples",
           str(n), "--seq-len", str(SEQ), "--batch", str(BATCH), "--device", "cuda",
           "--granularity", "head", "--json", "--quiet", "--save-every", "0",
           "--out", out, *extra]
    seconds, out_text, anon, file, rc = timed_process(cmd)
    res = json.loads(out_text) if rc == 0 else {}
    ph = res.get("phases", {})
    print(f"  kvcal {n} x {SEQ}{' ' + ' '.join(extra) if extra else ''}: {seconds:.2f} s "
          f"whole process (load {ph.get('load_seconds', 0):.2f} s, forward "
          f"{ph.get('forward_seconds', 0):.2f} s at {res.get('tokens_per_second', 0):.0f} "
          f"tokens/s, write {ph.get('write_seconds', 0):.3f} s; layers resident "
          f"{res.get('layers_resident')}), peak host memory {anon:.2f} GiB own + "
          f"{file:.2f} GiB of mapped checkpoint", flush=True)
    return seconds, res, rc


def run_hf(model_dir, tokens, n, out):
    seconds, out_text, anon, file, rc = timed_process(
        [sys.executable, "-c", HF_SCRIPT, model_dir, tokens, out])
    res = json.loads(out_text.strip().splitlines()[-1]) if rc == 0 else {}
    print(f"  transformers {n} x {SEQ}: {seconds:.2f} s whole process (import "
          f"{res.get('import', 0):.2f} s, from_pretrained {res.get('from_pretrained', 0):.2f} s "
          f"[{res.get('load')}], forward {res.get('forward', 0):.2f} s at "
          f"{res.get('tokens_per_second', 0):.0f} tokens/s), peak host memory {anon:.2f} GiB "
          f"own + {file:.2f} GiB mapped", flush=True)
    return seconds, rc


def parse_size(text):
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units \
        else int(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--samples", type=int, nargs="*", default=[8, 64])
    ap.add_argument("--stream-samples", type=int, default=256)
    ap.add_argument("--cap", help="--max-device-memory of the streamed run "
                    "(default: a quarter of the weights)")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    model_dir = os.path.join(a.workdir, "model")
    t0 = time.time()
    counts = sorted(set(a.samples + ([a.stream_samples] if a.stream_samples else [])))
    make_model(a.workdir, a.layers, counts)
    weights = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
                  if f.endswith(".safetensors"))
    shards = sum(f.endswith(".safetensors") for f in os.listdir(model_dir))
    print(f"model: {a.layers} layers, {weights / 2**30:.2f} GiB of bf16 weights in {shards} "
          f"shards, and tokens for {counts} samples, ready in {time.time() - t0:.0f} s",
          flush=True)
    fail = 0
    tokens = lambda n: os.path.join(a.workdir, f"tokens{n}.jsonl")  # noqa: E731
    times = {}
    for r in range(a.rounds):
        for n in a.samples:
            print(f"round {r + 1}, {n} samples (page cache: "
                  f"{warm_page_cache(model_dir) / 2**30:.1f} GiB read before each run)",
                  flush=True)
            k, _, rc = run_kvcal(a.kvcal, model_dir, tokens(n), n,
                                 os.path.join(a.workdir, f"kvcal{n}.json"))
            warm_page_cache(model_dir)
            h, rc2 = run_hf(model_dir, tokens(n), n, os.path.join(a.workdir, f"hf{n}.json"))
            fail |= rc | rc2
            times.setdefault(n, ([], []))
            times[n][0].append(k)
            times[n][1].append(h)
    for n, (k, h) in times.items():
        mk, mh = statistics.median(k), statistics.median(h)
        print(f"{n} x {SEQ}: kvcal {mk:.2f} s, transformers {mh:.2f} s (medians of "
              f"{len(k)}): kvcal {mh / mk:.2f}x faster to its scales")
    if a.stream_samples:
        n = a.stream_samples
        cap = parse_size(a.cap) if a.cap else weights // 4
        warm_page_cache(model_dir)
        _, whole, rc = run_kvcal(a.kvcal, model_dir, tokens(n), n,
                                 os.path.join(a.workdir, "resident.json"))
        warm_page_cache(model_dir)
        _, capped, rc2 = run_kvcal(a.kvcal, model_dir, tokens(n), n,
                                   os.path.join(a.workdir, "capped.json"),
                                   ("--max-device-memory", str(cap)))
        fail |= rc | rc2
        if not rc and not rc2:
            same = open(os.path.join(a.workdir, "resident.json"), "rb").read() == \
                open(os.path.join(a.workdir, "capped.json"), "rb").read()
            ratio = capped["tokens_per_second"] / whole["tokens_per_second"]
            print(f"{n} x {SEQ} under --max-device-memory {cap / 2**30:.2f} GiB (a quarter "
                  f"of the weights: {cap * 4 / weights:.2f}): {ratio * 100:.1f}% of the "
                  f"tokens/s with every layer on the device; scales byte-identical: "
                  f"{'yes' if same else 'NO'}")
            fail |= not same
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
