#!/usr/bin/env python3
"""The include graph of the tree: no circle, and no arrow back up.

A module is a file stem (io/dataset/dataset.c and io/dataset/dataset.h are one
module); module A depends on B when a file of A includes a header of B.
Fails (exit 1, one line per finding) when
  - modules depend on each other in a circle (a strongly connected set of
    more than one module), or
  - a layer includes a layer above it. The layers, from the bottom:
    core < kernels < observers < io < calib < cli; include/ is below all;
    tests/ and bench/ may include anything.

Usage: python3 tests/check_includes.py [ROOT]   (default: the repository)
"""
import os
import re
import sys

LAYERS = ["include", "core", "kernels", "observers", "io", "calib", "cli"]
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    return os.path.splitext(path)[0]


def layer_of(path):
    top = path.split("/", 1)[0]
    return LAYERS.index(top) if top in LAYERS else None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    files = []
    for top in LAYERS:
        for d, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.relpath(os.path.join(d, n), root) for n in names
                      if n.endswith(SOURCES)]
    known = set(files)
    edges = {}
    problems = []
    for f in sorted(files):
        with open(os.path.join(root, f), encoding="utf-8") as fp:
            text = fp.read()
        for inc in INCLUDE.findall(text):
            target = inc if inc in known else os.path.join("include", inc)
            if target not in known:
                continue  # a generated header or a system one
            a, b = module_of(f), module_of(target)
            if a != b:
                edges.setdefault(a, set()).add(b)
            la, lb = layer_of(f), layer_of(target)
            if la is not None and lb is not None and lb > la:
                problems.append("%s includes %s: %s is above %s" %
                                (f, inc, LAYERS[lb], LAYERS[la]))
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {m for s in edges.values() for m in s}):
        if v not in index:
            visit(v)
    for comp in sccs:
        problems.append("include circle: " + " <-> ".join(comp))
    for p in problems:
        print("check_includes: " + p)
    modules = len({module_of(f) for f in files})
    if problems:
        print("check_includes: %d finding(s) in %d modules" % (len(problems), modules))
        return 1
    print("check_includes: %d modules, no include circle, no layer includes one above it"
          % modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
