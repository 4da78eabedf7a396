#!/usr/bin/env python3
"""Data-parallel calibration on the GPUs of one host: whole processes of
`kvcal calibrate --device cuda` as N ranks (one a GPU, started by
torchrun's launcher: RANK, WORLD_SIZE, LOCAL_RANK; NCCL between them), on
a Llama-3-8B-shaped random-weight model (bench/time_to_scales.py's) and
--samples-per-rank x 2048 random token ids a rank.

usage: dp_scaling.py KVCAL WORKDIR [--gpus 1 2 ...] [--samples-per-rank 64]
                     [--layers 32] [--rounds 2]

First, on the bundled stories260K (32 samples of 256 tokens, batches of 4),
each N against one GPU, outputs byte for byte: the NCCL path's check.
Then for every N of --gpus it runs N ranks on N x samples-per-rank samples
(batches of 8), R rounds, and prints the whole-process seconds, kvcal's
phases (load, forward until the slowest rank is done, reduce, write) and
the forward tokens/s, then the speed-up of each N over one GPU (the
target: >= 1.9x on 2). One GPU also runs the largest N's samples, and
every N's scales and statistics files are compared with that run byte for
byte (they must be identical: a batch runs whole on one rank, and the
statistics meet on rank 0 by the merge rule, the moving averages folded in
the run's batch order). Before every run the checkpoint is read once, so
that every run starts from the same page cache. Results also go to
WORKDIR/dp_scaling.json.
"""
import argparse
import filecmp
import json
import os
import socket
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from time_to_scales import make_model, timed_process, warm_page_cache  # noqa: E402

SEQ, BATCH = 2048, 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(kvcal, model_dir, tokens, samples, ranks, out):
    """One calibration of `samples` samples over `ranks` GPUs; returns
    (seconds, kvcal's --json summary or {}, exit status)."""
    cmd = [kvcal, "calibrate", "--model", model_dir, "--dataset", tokens, "--num-samples",
           str(samples), "--seq-len", str(SEQ), "--batch", str(BATCH), "--device", "cuda",
           "--granularity", "head", "--observer", "ema:0.9", "--json", "--quiet",
           "--save-every", "0", "--out", out + ".json", "--stats", out + ".h5"]
    if ranks > 1:
        os.environ["NCCL_COMM_ID"] = f"127.0.0.1:{free_port()}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
               "--nproc-per-node", str(ranks)] + cmd
    seconds, text, anon, _, rc = timed_process(cmd)
    res = {}
    if rc == 0:
        start = text.find("{")
        res = json.loads(text[start:]) if start >= 0 else {}
    ph = res.get("phases", {})
    print(f"  {ranks} GPU(s), {samples} x {SEQ}: {seconds:.2f} s whole process (load "
          f"{ph.get('load_seconds', 0):.2f} s, forward {ph.get('forward_seconds', 0):.2f} s at "
          f"{res.get('tokens_per_second', 0):.0f} tokens/s, reduce "
          f"{ph.get('reduce_seconds', 0):.3f} s, write {ph.get('write_seconds', 0):.3f} s; "
          f"ranks {res.get('ranks')}), rank 0 host memory {anon:.2f} GiB", flush=True)
    return seconds, res, rc


def quick_check(kvcal, workdir, gpus):
    """stories260K over each N of gpus against one GPU; True when every
    N's scales and statistics equal one GPU's byte for byte."""
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                         "stories260K", "stories260K.bin")
    same = True
    for n in sorted(set(gpus) | {1}):
        out = os.path.join(workdir, f"stories-gpus{n}")
        cmd = [kvcal, "calibrate", "--model", model, "--num-samples", "32", "--seq-len",
               "256", "--batch", "4", "--device", "cuda", "--observer", "ema:0.9",
               "--granularity", "head", "--quiet", "--out", out + ".json", "--stats",
               out + ".h5"]
        if n > 1:
            os.environ["NCCL_COMM_ID"] = f"127.0.0.1:{free_port()}"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--no-python",
                   "--standalone", "--nproc-per-node", str(n)] + cmd
        _, _, _, _, rc = timed_process(cmd)
        ref = os.path.join(workdir, "stories-gpus1")
        equal = rc == 0 and all(filecmp.cmp(ref + e, out + e, shallow=False)
                                for e in (".json", ".h5"))
        print(f"  stories260K on {n} GPU(s): exit {rc}, outputs "
              f"{'identical to' if equal else 'DIFFER from'} one GPU's", flush=True)
        same &= equal
    return same


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvcal")
    ap.add_argument("workdir")
    ap.add_argument("--gpus", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--samples-per-rank", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    kvcal = os.path.abspath(a.kvcal)
    os.makedirs(a.workdir, exist_ok=True)
    counts = sorted({n * a.samples_per_rank for n in a.gpus} | {max(a.gpus) * a.samples_per_rank})
    model_dir = os.path.join(a.workdir, "model")
    if not os.path.isdir(model_dir):
        make_model(a.workdir, a.layers, counts)
    ok = quick_check(kvcal, a.workdir, a.gpus)
    results = {}
    for n in sorted(set(a.gpus)):
        samples = n * a.samples_per_rank
        tokens = os.path.join(a.workdir, f"tokens{samples}.jsonl")
        rows = []
        for r in range(a.rounds):
            warm_page_cache(model_dir)
            seconds, res, rc = run(kvcal, model_dir, tokens, samples, n,
                                   os.path.join(a.workdir, f"gpus{n}"))
            ok &= rc == 0
            rows.append({"seconds": seconds, "summary": res, "rc": rc})
        results[n] = rows
    # the identity check: one GPU on the largest run's samples
    big = max(a.gpus) * a.samples_per_rank
    warm_page_cache(model_dir)
    ref = os.path.join(a.workdir, "reference")
    run(kvcal, model_dir, os.path.join(a.workdir, f"tokens{big}.jsonl"), big, 1, ref)
    identical = {}
    for n in sorted(set(a.gpus)):
        if n * a.samples_per_rank == big:
            out = os.path.join(a.workdir, f"gpus{n}")
            identical[n] = all(filecmp.cmp(ref + ext, out + ext, shallow=False)
                               for ext in (".json", ".h5"))
            ok &= identical[n]

    def rate(n):
        return statistics.median(r["summary"].get("tokens_per_second", 0) for r in results[n])

    print("\n| GPUs | samples x 2048 | whole process s (median) | forward tokens/s (median) "
          "| speed-up over 1 GPU | outputs = 1 GPU's |")
    print("|---|---|---|---|---|---|")
    base = rate(min(a.gpus)) if min(a.gpus) == 1 else 0
    for n in sorted(set(a.gpus)):
        whole = statistics.median(r["seconds"] for r in results[n])
        print(f"| {n} | {n * a.samples_per_rank} | {whole:.2f} | {rate(n):.0f} | "
              f"{rate(n) / base if base else float('nan'):.2f}x | "
              f"{identical.get(n, '-')} |")
    with open(os.path.join(a.workdir, "dp_scaling.json"), "w") as f:
        json.dump({"results": results, "identical": identical}, f, indent=1)
    if 2 in results and base:
        print(f"\n2 GPUs: {rate(2) / base:.2f}x one GPU's forward tokens/s (target >= 1.9x)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
