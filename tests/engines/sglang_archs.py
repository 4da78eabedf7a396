#!/usr/bin/env python3
"""Which sglang architectures read a legacy scales file: the classes of
sglang/srt/models named in an EntryClass whose class, or a base class (by
name, across the folder), defines load_kv_cache_scales. For every other one
load_model_utils.py raises RuntimeError at start when
--quantization-param-path is given with an fp8_e4m3 cache. Of those that
have it, the ones whose load_kv_cache_scales hands the file to its model
(self.model.load_kv_cache_scales, Llama's) while the model class they build
(self.model = X(...) in __init__, else what _init_model returns) has none
fail at start too (AttributeError: Llama 4's, "broken"), or, where the
hand-over asks getattr first, start with a warning and the scales left at
1.0 ("ignores").

usage: sglang_archs.py [MODELS_DIR]  (default: the installed sglang's)
prints {"supports": [...], "lacks": [...], "broken": [...], "ignores": [...]}
as JSON.
"""
import ast
import json
import os
import sys


def built_model(fn):
    """The class name X of `self.model = X(...)` in function fn, or of the
    X(...) it returns (an _init_model), else None."""
    for n in ast.walk(fn):
        call = None
        if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "model" and
                isinstance(t.value, ast.Name) and t.value.id == "self" for t in n.targets):
            call = n.value
        elif isinstance(n, ast.Return) and fn.name == "_init_model":
            call = n.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            return call.func.id
    return None


def scan(root):
    classes, imports, entry = {}, {}, []  # (module, class), module -> {name: module}
    for f in sorted(os.listdir(root)):
        if not f.endswith(".py"):
            continue
        mod = f[:-3]
        try:
            tree = ast.parse(open(os.path.join(root, f)).read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        imports[mod] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "sglang.srt.models."):
                for a in node.names:
                    imports[mod][a.asname or a.name] = node.module.rsplit(".", 1)[1]
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                         for b in node.bases]
                methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
                classes[(mod, node.name)] = (bases, methods)
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                v = node.value
                elts = v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]
                entry += [(mod, e.id) for e in elts if isinstance(e, ast.Name)]

    def resolve(mod, name):
        """The class `name` means in module mod: its own, the one it imports
        from another module of the folder, else any of that name."""
        if (mod, name) in classes:
            return (mod, name)
        other = imports.get(mod, {}).get(name)
        if other and (other, name) in classes:
            return (other, name)
        return next((k for k in classes if k[1] == name), None)

    def lookup(c, name, seen=()):
        """The method `name` class c resolves to (through its bases), or None."""
        if c is None or c not in classes or c in seen:
            return None
        bases, methods = classes[c]
        if name in methods:
            return methods[name]
        return next((m for m in (lookup(resolve(c[0], b), name, seen + (c,))
                                 for b in bases) if m), None)

    def model_class(c):
        """The class c builds as self.model (its __init__'s, else its _init_model's)."""
        for name in ("__init__", "_init_model"):
            fn = lookup(c, name)
            x = built_model(fn) if fn else None
            if x:
                return resolve(c[0], x)
        return None

    def delegates(fn):
        return any(isinstance(n, ast.Attribute) and n.attr == "load_kv_cache_scales" and
                   isinstance(n.value, ast.Attribute) and n.value.attr == "model"
                   for n in ast.walk(fn))

    def guarded(fn):
        """fn asks getattr / hasattr for the model's load_kv_cache_scales first."""
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and
                   n.func.id in ("getattr", "hasattr") and
                   any(isinstance(a, ast.Constant) and a.value == "load_kv_cache_scales"
                       for a in n.args) for n in ast.walk(fn))

    def kind(c):
        fn = lookup(c, "load_kv_cache_scales")
        if not fn:
            return "lacks"
        m = model_class(c) if delegates(fn) else None
        if m and not lookup(m, "load_kv_cache_scales"):
            return "ignores" if guarded(fn) else "broken"
        return "supports"

    out = {"supports": [], "lacks": [], "broken": [], "ignores": []}
    for c in sorted(set(entry), key=lambda k: k[1]):
        out[kind(c)].append(c[1])
    return out


def entry_modules(root):
    """{architecture: module} of every class an EntryClass of the folder names."""
    out = {}
    for f in sorted(os.listdir(root)):
        if not f.endswith(".py"):
            continue
        try:
            tree = ast.parse(open(os.path.join(root, f)).read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                v = node.value
                for e in v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v]:
                    if isinstance(e, ast.Name):
                        out[e.id] = f[:-3]
    return out


def attention_has_scales(root, module):
    """Whether the RadixAttention a module builds (or, where it builds none,
    the modules of the folder it imports from build) gets quant_config, and
    with it a KV-cache method and its k_scale / v_scale: True, False, or
    None where neither builds one."""
    def calls(mod):
        tree = ast.parse(open(os.path.join(root, mod + ".py")).read())
        found = [any(k.arg == "quant_config" for k in n.keywords) for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and
                 getattr(n.func, "id", getattr(n.func, "attr", "")) == "RadixAttention"]
        imported = sorted({n.module.rsplit(".", 1)[1] for n in tree.body
                           if isinstance(n, ast.ImportFrom) and
                           (n.module or "").startswith("sglang.srt.models.")})
        return found, imported
    found, imported = calls(module)
    if not found:
        for other in imported:
            if os.path.exists(os.path.join(root, other + ".py")):
                found += calls(other)[0]
    return all(found) if found else None


def installed():
    import importlib.util
    spec = importlib.util.find_spec("sglang")
    return os.path.join(os.path.dirname(spec.origin), "srt", "models")


if __name__ == "__main__":
    print(json.dumps(scan(sys.argv[1] if len(sys.argv) > 1 else installed()), indent=1))
