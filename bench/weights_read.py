#!/usr/bin/env python3
"""How fast this host can move a checkpoint's bytes toward the GPU: the
ceilings kvcal's CUDA weight loader (calib/loader_cuda.c) works under.

For the safetensors files of a checkpoint folder, in 32 MiB pieces like the
loader's, with T host threads: (1) memcpy from a read-only mmap into a
pinned buffer (what the loader does), (2) pread into a pinned buffer,
(3) pinned buffer -> device with cudaMemcpyAsync (torch's non_blocking
copy). Prints GB/s for each. The files are read once before timing so that
every figure is from the page cache, as a calibration run that follows the
checkpoint's download or a previous run sees it.

    python3 bench/weights_read.py CHECKPOINT_DIR [--threads 1,4,16] [--gb 8]
"""
import argparse
import mmap
import os
import threading
import time

import numpy as np
import torch

PIECE = 32 << 20


def files_of(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".safetensors"))


def pieces(files, limit):
    """(path, offset, bytes) of 32 MiB pieces over the files, limit bytes in all."""
    out, total = [], 0
    for path in files:
        size = os.path.getsize(path)
        for off in range(0, size, PIECE):
            n = min(PIECE, size - off)
            out.append((path, off, n))
            total += n
            if total >= limit:
                return out
    return out


def timed(work, parts, threads):
    """Seconds for threads to run work(i, part) over parts, split in turn."""
    def run(t):
        for i in range(t, len(parts), threads):
            work(t, parts[i])
    ths = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--threads", default="1,4,8,16")
    ap.add_argument("--gb", type=float, default=8.0, help="bytes to move in each measurement")
    a = ap.parse_args()
    files = files_of(a.checkpoint)
    parts = pieces(files, int(a.gb * 1e9))
    total = sum(n for _, _, n in parts)
    threads = [int(t) for t in a.threads.split(",")]
    pin = torch.cuda.is_available()  # pageable buffers without a GPU (a dry run)
    bufs = [torch.empty(PIECE, dtype=torch.uint8, pin_memory=pin) for _ in range(max(threads))]
    views = [b.numpy() for b in bufs]
    fds = {p: os.open(p, os.O_RDONLY) for p in files}
    arrays = {}

    def remap():
        """Fresh maps: each measurement pays the first touch's page faults, as the loader does."""
        arrays.clear()
        for p in files:
            arrays[p] = np.frombuffer(mmap.mmap(fds[p], 0, prot=mmap.PROT_READ), dtype=np.uint8)

    def by_pread(t, part):
        path, off, n = part
        os.preadv(fds[path], [memoryview(views[t])[:n]], off)

    def by_mmap(t, part):
        path, off, n = part
        np.copyto(views[t][:n], arrays[path][off:off + n])

    timed(by_pread, parts, max(threads))  # into the page cache
    print(f"{total / 1e9:.2f} GB of {len(files)} files in {len(parts)} pieces of 32 MiB")
    for t in threads:
        for name, work in (("mmap + memcpy", by_mmap), ("pread", by_pread)):
            remap()
            s = timed(work, parts, t)
            print(f"{name:>14} into pinned, {t:2d} threads: {total / s / 1e9:6.1f} GB/s")
    arrays.clear()
    if not pin:
        return
    dev = torch.empty(PIECE, dtype=torch.uint8, device="cuda")
    for b in bufs[:3]:
        dev.copy_(b, non_blocking=True)
    torch.cuda.synchronize()
    reps = max(1, total // PIECE)
    t0 = time.perf_counter()
    for i in range(reps):
        dev.copy_(bufs[i % 3], non_blocking=True)
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    print(f"{'pinned -> GPU':>14}, one stream:          {reps * PIECE / s / 1e9:6.1f} GB/s")
    for fd in fds.values():
        os.close(fd)


if __name__ == "__main__":
    main()
