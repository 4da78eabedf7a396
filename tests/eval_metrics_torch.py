#!/usr/bin/env python3
"""The metrics of `kvcal eval` computed independently with torch (float64),
for tests/test_eval_torch.c: reads DIR/input.json (rows, vocab, windows) and
the raw little-endian arrays beside it (base.f32 and run.f32: (rows, vocab)
logits of the baseline and of a mode; target.i32: (rows) next tokens;
lengths.i32: (windows) window lengths, window w predicting lengths[w] - 1 of
the rows in order), prints JSON: per row nll, nll_base, kld, top; and the
statistics of calib/eval_stats.h.

usage: eval_metrics_torch.py DIR
"""
import json
import os
import sys

import numpy as np
import torch


def main():
    d = sys.argv[1]
    meta = json.load(open(os.path.join(d, "input.json")))
    rows, vocab = meta["rows"], meta["vocab"]

    def raw(name, dtype):
        return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=dtype).copy())

    base = raw("base.f32", np.float32).double().reshape(rows, vocab)
    run = raw("run.f32", np.float32).double().reshape(rows, vocab)
    target = raw("target.i32", np.int32).long()
    lengths = raw("lengths.i32", np.int32).long()

    lp = torch.log_softmax(base, dim=-1)
    lq = torch.log_softmax(run, dim=-1)
    kld = torch.nn.functional.kl_div(lq, lp, log_target=True, reduction="none").sum(-1)
    top = (torch.argmax(base, dim=-1) == torch.argmax(run, dim=-1)).double()
    nll = -lq.gather(1, target[:, None])[:, 0]
    nll_base = -lp.gather(1, target[:, None])[:, 0]
    diff = nll - nll_base
    n = diff.numel()
    ln_ratio = diff.mean()
    se = diff.std(unbiased=True) / n ** 0.5
    # windows as the draws: the variance of the ratio of window sums
    counts = [int(l) - 1 for l in lengths if int(l) > 1]
    sums = torch.stack([c.sum() for c in torch.split(diff, counts)])
    cnt = torch.tensor(counts, dtype=torch.float64)
    w = len(counts)
    se_window = torch.sqrt(((sums - cnt * ln_ratio) ** 2).sum() * w / (w - 1)) / n
    out = {
        "nll": nll.tolist(),
        "nll_base": nll_base.tolist(),
        "kld": kld.tolist(),
        "top": top.tolist(),
        "ln_ratio": ln_ratio.item(),
        "ln_ratio_se": se.item(),
        "ln_ratio_se_window": se_window.item(),
        "kld_mean": kld.mean().item(),
        "kld_se": (kld.std(unbiased=True) / n ** 0.5).item(),
        "kld_median": torch.quantile(kld, 0.5).item(),
        "kld_p99": torch.quantile(kld, 0.99).item(),
        "kld_max": kld.max().item(),
        "top1": top.mean().item(),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
