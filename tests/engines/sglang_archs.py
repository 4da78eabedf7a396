#!/usr/bin/env python3
"""Which sglang architectures read a legacy scales file: the classes of
sglang/srt/models named in an EntryClass whose class, or a base class (by
name, across the folder), defines load_kv_cache_scales. For every other one
load_model_utils.py raises RuntimeError at start when
--quantization-param-path is given with an fp8_e4m3 cache.

usage: sglang_archs.py [MODELS_DIR]  (default: the installed sglang's)
prints {"supports": [...], "lacks": [...]} as JSON.
"""
import ast
import json
import os
import sys


def scan(root):
    classes, entry = {}, set()
    for f in sorted(os.listdir(root)):
        if not f.endswith(".py"):
            continue
        try:
            tree = ast.parse(open(os.path.join(root, f)).read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases]
                has = any(isinstance(n, ast.FunctionDef) and n.name == "load_kv_cache_scales"
                          for n in node.body)
                classes[node.name] = (bases, has)
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                v = node.value
                elts = v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
                entry.update(e.id for e in elts if isinstance(e, ast.Name))

    def has(c, seen=()):
        if c not in classes or c in seen:
            return False
        bases, h = classes[c]
        return h or any(has(b, seen + (c,)) for b in bases)

    return {"supports": sorted(c for c in entry if has(c)),
            "lacks": sorted(c for c in entry if not has(c))}


def installed():
    import importlib.util
    spec = importlib.util.find_spec("sglang")
    return os.path.join(os.path.dirname(spec.origin), "srt", "models")


if __name__ == "__main__":
    print(json.dumps(scan(sys.argv[1] if len(sys.argv) > 1 else installed()), indent=1))
