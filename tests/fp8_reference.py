"""FP8 checkpoints and their served forward pass, in torch: the oracle of
kvcal's FP8 weights (tests/make_fp8_checkpoints.py writes the fixtures with
it on the CPU; tests/fp8_vs_torch_gpu.py runs it on a GPU with
torch._scaled_mm).

make_checkpoint() builds a tiny Llama, Qwen3, mixture-of-experts (Llama 4's
among them), DeepSeek or hybrid (Qwen3-Next, Qwen3.5-MoE) model with
transformers' own config
classes (random weights),
quantizes its projections with the scheme's rules (a weight's scale is
its absmax / 448 over the tensor, the output row or the block; static input scales from the unquantized model's
activations) and saves the checkpoint as the scheme's writer lays it out:
compressed-tensors (weight_scale, input_scale, config_groups, ignore), the
fp8 method (weight_scale_inv of 2-D blocks, weight_block_size), ModelOpt
(hf_quant_config.json, exclude_modules; FP8_PB_WO's 4-D block scales).

served_model() rebuilds the model from the saved checkpoint with every
projection an FP8Linear that computes what vLLM serves
(schemas/README.md, "FP8 weights"): fused shards' per-tensor scales
requantized to their largest (through fp16), static input scales the
largest of the shards', activations quantized per tensor (x times
1 / scale), per token (x / max(absmax / 448, 1 / (448 * 512))) or per
group of 128 (x / (max(absmax, 1e-10) / 448)), clamped to +-448 and
rounded to e4m3; then either ("cpu") the dequantized operands multiplied in
the model's dtype (float64 for the fixtures; in bf16 the dequantized bf16
GEMM of kvcal's fallback), ("exact") multiplied in float64 and rounded to
the model's dtype (what an FP8 GEMM computes, on any device), or ("gpu")
torch._scaled_mm on the e4m3 operands with the scales of the scheme (per
tensor, row-wise, 1x128 by 128x128 blocks), fp32 accumulation, bf16 out.

perturb_embeddings() rounds a bf16 model's embedding rows again after a
relative perturbation below bf16's epsilon: another realization of the
bf16 roundings before each quantization, whose flipped e4m3 decisions
measure how far two bf16 servings of one FP8 checkpoint may lie apart.
"""
import json
import os

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
MIN_TOKEN_SCALE = 1.0 / (448.0 * 512.0)
GROUP_EPS = 1e-10

# --- quantization rules ---------------------------------------------------------


def to_fp8(y):
    """fp32 -> e4m3 after the kernels' clamp to +-448."""
    return torch.clamp(y, -FP8_MAX, FP8_MAX).to(FP8)


def quant_static(x, scale):
    """vLLM's static_scaled_fp8_quant: x times the fp32 reciprocal of scale."""
    inv = torch.ones((), dtype=torch.float32, device=x.device) / scale.float()
    return to_fp8(x.float() * inv), scale.float().reshape(1, 1).expand(x.shape[0], 1)


def quant_token(x):
    """vLLM's dynamic_per_token_scaled_fp8_quant: x / max(absmax / 448, floor)."""
    xf = x.float()
    s = torch.clamp(xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX, min=MIN_TOKEN_SCALE)
    return to_fp8(xf / s), s


def quant_group(x, group):
    """vLLM's per_token_group_quant_fp8: each group x / (max(absmax, 1e-10) / 448);
    scales (rows, groups)."""
    xf = x.float()
    rows, k = xf.shape
    g = xf.reshape(rows, k // group, group)
    s = torch.clamp(g.abs().amax(dim=-1, keepdim=True), min=GROUP_EPS) / FP8_MAX
    return to_fp8(g / s).reshape(rows, k), s.reshape(rows, k // group)


# the e4m3 values and the midpoints between them, where rounding ties
_GRID = torch.arange(-1792, 1793, dtype=torch.float32).div(4).to(FP8).float().unique()
_MIDS = ((_GRID[1:] + _GRID[:-1]) / 2).double()


def tie_distance(y):
    """The smallest relative distance of the nonzero values y (scaled
    activations, float32) from an e4m3 rounding tie that they are not
    exactly on (an exact tie is the same in every runner that computes its
    operands exactly: ratios of bf16 values in the first layer); inf when
    none."""
    y = y.double().flatten()
    y = y[(y != 0) & (y.abs() < FP8_MAX)]
    if not y.numel():
        return float("inf")
    mids = _MIDS.to(y.device)
    i = torch.searchsorted(mids, y).clamp(1, len(mids) - 1)
    d = torch.minimum((y - mids[i - 1]).abs(), (y - mids[i]).abs()) / y.abs()
    d = d[d > 0]
    return d.min().item() if d.numel() else float("inf")


# when a list, every FP8Linear appends the tie_distance of the activations
# it quantizes (make_fp8_checkpoints.py's conditioning)
TIE_DISTANCES = None


def requant(wq, s_shard, s_max):
    """vLLM's requantize_with_max_scale of one shard: dequantized to fp16 (the
    product in fp32, rounded once), quantized with s_max as activations are."""
    dq = (wq.float() * s_shard.float()).half()
    return quant_static(dq, s_max)[0]


def weight_scales(w, kind, block=None):
    """The scheme's scale of weight w (out, in) in fp32: absmax / 448 of the
    tensor ([1]), of each row ([out, 1]) or of each block ([ob, ib])."""
    a = w.abs().float()
    if kind == "tensor":
        return (a.max() / FP8_MAX).reshape(1)
    if kind == "channel":
        return a.amax(dim=1, keepdim=True) / FP8_MAX
    bn, bk = block
    out, inp = w.shape
    ob, ib = -(-out // bn), -(-inp // bk)
    pad = torch.zeros(ob * bn, ib * bk, dtype=a.dtype)
    pad[:out, :inp] = a
    return pad.reshape(ob, bn, ib, bk).amax(dim=(1, 3)) / FP8_MAX


def expand_scales(s, kind, shape, block=None):
    """A weight scale broadcast to every element of shape (out, in)."""
    if kind == "tensor":
        return s.reshape(1, 1).expand(shape)
    if kind == "channel":
        return s.reshape(-1, 1).expand(shape)
    bn, bk = block
    return s.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:shape[0], :shape[1]]


def quantize_weight(w, kind, block=None, scale_dtype=torch.float32):
    """(e4m3 weight, its scale as stored): the weight divided by the stored
    (possibly bf16-rounded) scale."""
    s = weight_scales(w, kind, block).to(scale_dtype)
    return to_fp8(w.float() / expand_scales(s.float(), kind, w.shape, block)), s


# --- the served layer --------------------------------------------------------------


class FP8Linear(torch.nn.Module):
    """One projection as vLLM serves it. wq (out, in) e4m3 (requantized),
    scale the weight's (tensor [1], channel [out, 1], block [ob, ib]), act
    "static" (with input_scale), "token", "group" or None (weight-only)."""

    def __init__(self, wq, scale, kind, act, input_scale=None, block=None, group=None,
                 bias=None, mode="cpu"):
        super().__init__()
        self.wq, self.scale, self.kind, self.act = wq, scale.float(), kind, act
        self.input_scale, self.block, self.group, self.bias = input_scale, block, group, bias
        self.mode = mode

    def quantize(self, x):
        if self.act == "static":
            return quant_static(x, self.input_scale)
        if self.act == "token":
            return quant_token(x)
        return quant_group(x, self.group)

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.mode == "gpu":
            out = self.served_gpu(x2)
        elif self.mode == "exact":
            out = self.served_cpu(x2.double()).to(x.dtype)
        else:
            out = self.served_cpu(x2)
        return out.reshape(*shape[:-1], -1)

    def served_cpu(self, x):
        """The dequantized operands multiplied in x's dtype."""
        dt = x.dtype
        w = self.wq.to(dt) * expand_scales(self.scale.to(dt), self.kind, self.wq.shape,
                                           self.block)
        if self.act is None:
            xd = x
        else:
            xq, s = self.quantize(x)
            if TIE_DISTANCES is not None:
                xs = x.float() if self.act != "group" else x.float().reshape(
                    x.shape[0], -1, self.group)
                y = xs / (s.float() if self.act != "group" else s.float().unsqueeze(-1))
                TIE_DISTANCES.append(tie_distance(y))
            if self.act == "group":
                s = s.repeat_interleave(self.group, 1)
            xd = xq.to(dt) * s.to(dt)
        out = xd @ w.t()
        return out if self.bias is None else out + self.bias.to(dt)

    def served_gpu(self, x):
        """torch._scaled_mm on the e4m3 operands (bf16 out), as vLLM's CUTLASS /
        cuBLASLt FP8 GEMMs compute it; weight-only FP8 as bf16 (Marlin)."""
        if self.act is None:
            return self.served_cpu(x)
        m = x.shape[0]  # an expert's rows: padded with zero rows to whole tiles of
        if m % 128:     # 128 (cuBLASLt's block-scaled GEMM refuses others), cut off after
            x = torch.cat([x, x.new_zeros(128 - m % 128, x.shape[1])])
        xq, s = self.quantize(x)
        b = self.wq.t()
        n = self.wq.shape[0]
        if self.kind == "block":
            a_scale = s.t().contiguous().t()          # (M, K/128), stride (1, M)
            b_scale = self.scale.t()                  # its .t(): (N/128, K/128) row-major
            if n % self.block[0]:  # a partial last block (DeepSeek's kv_a_proj_with_mqa):
                rows = self.scale.shape[0] * self.block[0]  # zero rows, cut off after
                w = torch.zeros(rows, self.wq.shape[1], dtype=self.wq.dtype,
                                device=self.wq.device)
                w[:n] = self.wq
                b = w.t()
        elif self.kind == "tensor" and self.act == "static":
            a_scale, b_scale = s[:1, :1].reshape(()), self.scale.reshape(())
        else:
            a_scale = s.reshape(-1, 1).contiguous()
            b_scale = expand_scales(self.scale, self.kind, (self.wq.shape[0], 1)).reshape(1, -1)
            b_scale = b_scale.float().contiguous()
        out = torch._scaled_mm(xq, b, scale_a=a_scale, scale_b=b_scale, out_dtype=torch.bfloat16)
        out = (out[0] if isinstance(out, tuple) else out)[:m, :n]
        return out if self.bias is None else out + self.bias


# --- schemes --------------------------------------------------------------------

# name: (architecture, method, weight kind, activation, block, options)
SCHEMES = {
    # llm-compressor FP8: per-tensor weights, static input scales; down_proj
    # left in bf16 by an ignore regex
    "ct_tensor_static": ("compressed-tensors", "tensor", "static", None,
                         {"ignore": ["lm_head", "re:.*mlp.down_proj$"]}),
    # llm-compressor FP8_DYNAMIC: per-channel weights (bf16 scales), per-token
    "ct_channel_token": ("compressed-tensors", "channel", "token", None,
                         {"scale_dtype": torch.bfloat16}),
    # compressed-tensors block strategy, activations in groups
    "ct_block_group": ("compressed-tensors", "block", "group", (64, 64), {}),
    # Qwen3-FP8 / DeepSeek-V3: the fp8 method, weight_block_size, weight_scale_inv
    "fp8_block": ("fp8", "block", "group", (64, 64), {}),
    # the fp8 method per tensor, dynamic activations (per token under CUTLASS)
    "fp8_tensor_dynamic": ("fp8", "tensor", "token", None, {}),
    # ModelOpt FP8 in hf_quant_config.json: per-tensor, static
    "modelopt_tensor_static": ("modelopt", "tensor", "static", None, {"legacy": True}),
    # ModelOpt FP8_PB_WO: 128 x 128 blocks, 4-D scales
    "modelopt_pb_wo": ("modelopt", "block", "group", (128, 128), {}),
    # llm-compressor FP8 of a mixture of experts: per-tensor, static input
    # scales (one per expert), the routers ignored
    "ct_tensor_static_moe": ("compressed-tensors", "tensor", "static", None,
                             {"ignore": ["lm_head", "re:.*mlp\\.gate$",
                                         "re:.*shared_expert_gate$"]}),
}

# the projections a scheme quantizes (Mixtral's experts' w1, w3, w2 too;
# the delta-net's input and output projections, not its b / a projections,
# which Qwen's FP8 checkpoints keep in bf16: HYBRID_BF16)
PROJ = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1",
        "w2", "w3", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
        "in_proj_qkvz", "in_proj_qkv", "in_proj_z", "out_proj"}
# the hybrid models' projections Qwen's FP8 checkpoints list in
# modules_to_not_convert (with the routers, conv1d and the norms)
HYBRID_BF16 = ("in_proj_ba", "in_proj_b", "in_proj_a")


def ignored(scheme, module):
    import re
    for p in SCHEMES[scheme][4].get("ignore", []):
        if module == p or (p.startswith("re:") and re.match(p[3:], module)):
            return True
    return False


def quant_config(scheme, not_converted=()):
    """The config the scheme's writer stores (not_converted: modules a
    hybrid model leaves in bf16, by their full names)."""
    method, kind, act, block, opt = SCHEMES[scheme]
    if method == "compressed-tensors":
        w = {"num_bits": 8, "type": "float", "strategy": kind, "dynamic": False,
             "symmetric": True}
        if block:
            w["block_structure"] = list(block)
        a = {"num_bits": 8, "type": "float", "symmetric": True,
             "dynamic": act != "static",
             "strategy": {"static": "tensor", "token": "token", "group": "group"}[act]}
        if act == "group":
            a["group_size"] = block[1]
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": w,
                                              "input_activations": a}},
                "ignore": opt.get("ignore", ["lm_head"]) + list(not_converted)}
    if method == "fp8":
        c = {"quant_method": "fp8", "fmt": "e4m3",
             "activation_scheme": "static" if act == "static" else "dynamic"}
        if block:
            c["weight_block_size"] = list(block)
        if not_converted:
            c["modules_to_not_convert"] = ["lm_head"] + list(not_converted)
        return c
    algo = {"tensor": "FP8", "channel": "FP8_PER_CHANNEL_PER_TOKEN", "block": "FP8_PB_WO"}[kind]
    if opt.get("legacy"):
        return {"producer": {"name": "modelopt", "version": "0.29.0"},
                "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None,
                                 "exclude_modules": ["lm_head"]}}
    return {"quant_method": "modelopt", "quant_algo": algo, "ignore": ["lm_head"]}


def tiny_config(arch, hidden, inter, heads, kv_heads, vocab, layers=2):
    """Llama, Qwen3, or a mixture of experts: Qwen3-MoE (4 experts, top 2,
    normalized) or Qwen2-MoE (4 experts, top 2, a gated shared expert),
    inter each expert's intermediate size; DeepSeek-V2 / V3
    (deepseek_config)."""
    import transformers as tf
    common = dict(hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, head_dim=64, vocab_size=vocab,
                  num_hidden_layers=layers, max_position_embeddings=256, rms_norm_eps=1e-5,
                  tie_word_embeddings=False)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=inter)
    if arch == "llama":
        return tf.LlamaConfig(rope_theta=500000.0, **common)
    if arch == "qwen3_moe":
        return tf.Qwen3MoeConfig(norm_topk_prob=True, **moe, **common)
    if arch == "qwen2_moe":
        return tf.Qwen2MoeConfig(shared_expert_intermediate_size=inter, **moe, **common)
    if arch == "mixtral":
        return tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **common)
    if arch == "granite":  # Llama's layers with the four multipliers
        return tf.GraniteConfig(embedding_multiplier=12.0, attention_multiplier=0.015625,
                                residual_multiplier=0.22, logits_scaling=8.0,
                                rope_theta=10000000.0, **common)
    if arch == "minimax_m2":  # q/k norms over the whole projection, half the head rotated
        return tf.MiniMaxM2Config(num_local_experts=4, num_experts_per_tok=2, rotary_dim=32,
                                  **common)
    if arch == "llama4":  # layers 1, 3 MoE (top-1 on the input, a shared expert),
        # 2 without RoPE (queries' temperature from position 15), the others
        # in chunks of 16 after the weightless q/k norm
        return tf.Llama4TextConfig(num_local_experts=4, num_experts_per_tok=1,
                                   intermediate_size_mlp=inter, interleave_moe_layer_step=2,
                                   no_rope_layer_interval=3, attention_chunk_size=16,
                                   floor_scale=16, use_qk_norm=True, **common)
    if arch == "glm4_moe":  # a dense first layer, sigmoid routing, a shared expert
        return tf.Glm4MoeConfig(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                moe_intermediate_size=inter, first_k_dense_replace=1,
                                n_group=1, topk_group=1, norm_topk_prob=True, **common)
    if arch.startswith("deepseek") or arch == "glm4_moe_lite":  # deepseek_v32 too
        return deepseek_config(tf, arch, hidden, inter, heads, vocab, layers)
    if arch in ("qwen3_next", "qwen3_5_moe"):
        return hybrid_config(tf, arch, moe, common, layers)
    return tf.Qwen3Config(**common)


def hybrid_config(tf, arch, moe, common, layers):
    """Qwen3-Next or Qwen3.5-MoE (the text model): delta-net layers before
    attention layers, alternating; the delta-net's heads of 64 (one key head,
    two value heads) and attention's heads of 64, so that every run of rows a
    regrouped projection holds (a head's query and gate halves of q_proj,
    Qwen3-Next's in_proj_qkvz grouped by key head) is whole blocks of 64; a
    shared expert beside the experts."""
    lin = dict(linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=64,
               linear_value_head_dim=64, linear_conv_kernel_dim=4,
               layer_types=["linear_attention", "full_attention"] * (layers // 2),
               shared_expert_intermediate_size=moe["moe_intermediate_size"],
               rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                "partial_rotary_factor": 0.25})
    cls = tf.Qwen3NextConfig if arch == "qwen3_next" else tf.Qwen3_5MoeTextConfig
    return cls(norm_topk_prob=True, **lin, **moe, **common)


def deepseek_config(tf, arch, hidden, inter, heads, vocab, layers):
    """DeepSeek-V3 (the query's LoRA, which vLLM fuses with
    kv_a_proj_with_mqa; sigmoid routing), GLM-4.7-Flash (V3's layers, value
    heads of 64 against a no-RoPE part of 32, as its 256 against 192, x1.8)
    or V2 (q_proj; softmax): multi-head latent attention whose every input is
    whole groups of 64 (q_lora_rank, kv_lora_rank 128; o_proj's 2 x 32 or
    2 x 64), kv_a_proj_with_mqa's 160 rows a partial last block; a dense
    first layer, then 4 experts of intermediate inter, top 2, a shared
    expert."""
    common = dict(hidden_size=hidden, intermediate_size=2 * inter, moe_intermediate_size=inter,
                  num_attention_heads=heads, num_key_value_heads=heads, kv_lora_rank=128,
                  qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4,
                  num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                  vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    if arch == "glm4_moe_lite":
        return tf.Glm4MoeLiteConfig(q_lora_rank=128, n_group=1, topk_group=1,
                                    routed_scaling_factor=1.8, norm_topk_prob=True,
                                    **dict(common, v_head_dim=64))
    if arch == "deepseek_v32":  # its indexer keeps 64 keys: every one here
        return tf.DeepseekV32Config(q_lora_rank=128, n_group=1, topk_group=1,
                                    routed_scaling_factor=2.5, norm_topk_prob=True,
                                    index_topk=64, index_head_dim=64, index_n_heads=2,
                                    **common)
    if arch == "deepseek_v3":
        return tf.DeepseekV3Config(q_lora_rank=128, n_group=1, topk_group=1,
                                   routed_scaling_factor=2.5, norm_topk_prob=True,
                                   rope_interleave=True, **common)
    return tf.DeepseekV2Config(q_lora_rank=None, topk_method="greedy", n_group=1, topk_group=1,
                               routed_scaling_factor=1.0, norm_topk_prob=False, **common)


# the checkpoint's names of an expert's weights: (the experts' module under
# a layer, gate, up, down); Mixtral's router is block_sparse_moe.gate there
EXPERTS = {"mixtral": ("block_sparse_moe.experts", "w1", "w3", "w2"),
           "minimax_m2": ("block_sparse_moe.experts", "w1", "w3", "w2"),
           # llm-compressor's (SequentialLlama4TextMoe: an MLP per expert)
           "llama4": ("feed_forward.experts", "gate_proj", "up_proj", "down_proj")}
# where transformers keeps a layer's experts module (Llama 4: its own,
# forward of every expert's routed inputs)
EXPERTS_MODULE = {"llama4": "feed_forward.experts"}
EXPERTS_DEFAULT = ("mlp.experts", "gate_proj", "up_proj", "down_proj")
# the router's names (MiniMax-M2's: its gate and e_score_correction_bias)
ROUTER = {"mixtral": (".mlp.gate.", ".block_sparse_moe.gate."),
          "minimax_m2": (".mlp.", ".block_sparse_moe.")}
# what a released checkpoint's modules_to_not_convert lists beside lm_head
NOT_CONVERTED = {"minimax_m2": ["gate", "e_score_correction_bias"]}


def per_expert(state, arch):
    """A state dict with transformers' stacked experts (mlp.experts'
    gate_up_proj (E, 2 I, D), down_proj (E, D, I)) as a checkpoint of arch
    names them (EXPERTS: mlp.experts.<e>.gate_proj.weight, ...)."""
    where, gate, up, down = EXPERTS.get(arch, EXPERTS_DEFAULT)
    out = {}
    for name, p in state.items():
        if arch == "llama4" and name.endswith("experts.gate_up_proj"):
            # Llama 4's (in, out): (E, D, 2 I), gate's columns then up's
            pre, inter = name[:-len("gate_up_proj")], p.shape[2] // 2
            for e in range(p.shape[0]):
                out["%s%d.%s.weight" % (pre, e, gate)] = p[e, :, :inter].t()
                out["%s%d.%s.weight" % (pre, e, up)] = p[e, :, inter:].t()
        elif arch == "llama4" and name.endswith("experts.down_proj"):
            pre = name[:-len("down_proj")]
            for e in range(p.shape[0]):
                out["%s%d.%s.weight" % (pre, e, down)] = p[e].t()
        elif name.endswith("mlp.experts.gate_up_proj"):
            pre, inter = name[:-len("mlp.experts.gate_up_proj")] + where, p.shape[1] // 2
            for e in range(p.shape[0]):
                out["%s.%d.%s.weight" % (pre, e, gate)] = p[e, :inter]
                out["%s.%d.%s.weight" % (pre, e, up)] = p[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):
            pre = name[:-len("mlp.experts.down_proj")] + where
            for e in range(p.shape[0]):
                out["%s.%d.%s.weight" % (pre, e, down)] = p[e]
        else:
            model_name, ckpt_name = ROUTER.get(arch, ("", ""))
            out[name.replace(model_name, ckpt_name) if model_name else name] = p
    return out


def randomize(model, gen):
    """Projections of different spreads (so that q, k and v get different
    scales and vLLM's requantization changes bytes), norms off 1."""
    spread = {"q_proj": 0.12, "k_proj": 0.2, "v_proj": 0.07, "o_proj": 0.1,
              "gate_proj": 0.15, "up_proj": 0.09, "down_proj": 0.11}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                proj = name.split(".")[-2]
                p.copy_(spread.get(proj, 0.15) * torch.randn(p.shape, generator=gen))


def input_absmax(model, samples, arch):
    """Per projection module (as arch's checkpoint names it), the absmax of
    its input over the samples (fp32)."""
    seen = {}
    where, names = EXPERTS.get(arch, EXPERTS_DEFAULT)[0], EXPERTS.get(arch, EXPERTS_DEFAULT)[1:]

    def hook(name):
        def fn(mod, args):
            a = args[0].detach().abs().max().item()
            seen[name] = max(seen.get(name, 0.0), a)
        return fn

    def experts_hook(name):
        name = name[:-len("mlp.experts")] + where

        def fn(mod, args):
            x, top_k_index = args[0], args[1]
            for e in range(mod.num_experts):
                rows = (top_k_index == e).any(dim=-1)
                if not rows.any():
                    continue
                xe = x[rows]
                gate, up = (xe @ mod.gate_up_proj[e].t()).chunk(2, dim=-1)
                mid = mod.act_fn(gate) * up
                for proj, a in zip(names, (xe, xe, mid)):
                    key = "%s.%d.%s" % (name, e, proj)
                    seen[key] = max(seen.get(key, 0.0), a.detach().abs().max().item())
        return fn

    hs = [m.register_forward_pre_hook(hook(n)) for n, m in model.named_modules()
          if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    hs += [m.register_forward_pre_hook(experts_hook(n)) for n, m in model.named_modules()
           if n.endswith("mlp.experts")]
    with torch.no_grad():
        for s in samples:
            model(torch.tensor([s]), use_cache=False)
    for h in hs:
        h.remove()
    return seen


def make_checkpoint(out, arch, scheme, dims, samples, seed=0):
    """Writes the FP8 checkpoint of `scheme` for a random `arch` model of
    dims (hidden, inter, heads, kv_heads, vocab) into directory out."""
    import safetensors.torch as st
    import transformers as tf
    method, kind, act, block, opt = SCHEMES[scheme]
    cfg = tiny_config(arch, *dims)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    randomize(model, gen)
    model = model.to(torch.bfloat16).float()  # the bf16 weights a model is served from
    amax = input_absmax(model, samples, arch) if act == "static" else {}
    gate, down = EXPERTS.get(arch, EXPERTS_DEFAULT)[1], EXPERTS.get(arch, EXPERTS_DEFAULT)[3]
    tensors, not_converted = {}, []
    for name, p in per_expert(model.state_dict(), arch).items():
        parts = name.split(".")
        module = name[:-len(".weight")]
        if parts[-2] in HYBRID_BF16 and parts[-1] == "weight":
            not_converted.append(module)
        if parts[-2] in PROJ and parts[-1] == "weight" and not ignored(scheme, module):
            sdt = opt.get("scale_dtype", torch.float32)
            wq, s = quantize_weight(p, kind, block, sdt)
            tensors[name] = wq
            if kind == "block" and method == "modelopt":
                s = s.reshape(s.shape[0], 1, s.shape[1], 1)
            if kind == "tensor" and method == "modelopt":
                s = s.reshape(())
            if kind == "channel" and method == "modelopt":
                s = s.reshape(-1)
            tensors[module + (".weight_scale_inv" if method == "fp8" and block
                              else ".weight_scale")] = s.contiguous()
            if act == "static":  # a little clipping: 0.9 x the observed absmax
                seen = amax[module]
                if ".experts." in module and parts[-2] != down:
                    # an expert's gate and up share one input scale (vLLM
                    # loads both into w13_input_scale[e]); from the expert's
                    # routed rows, so that the experts' scales differ
                    seen = amax[module.rsplit(".", 1)[0] + "." + gate]
                tensors[module + ".input_scale"] = torch.tensor(
                    [0.9 * seen / FP8_MAX], dtype=torch.float32).reshape(
                    () if method == "modelopt" else (1,))
        else:
            tensors[name] = p.to(torch.bfloat16)
    os.makedirs(out, exist_ok=True)
    st.save_file({k: v.contiguous() for k, v in tensors.items()},
                 os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    c = cfg.to_dict()
    c["architectures"] = [type(model).__name__]
    c["torch_dtype"] = "bfloat16"
    qc = quant_config(scheme, not_converted + NOT_CONVERTED.get(arch, []))
    if opt.get("legacy"):
        with open(os.path.join(out, "hf_quant_config.json"), "w") as f:
            json.dump(qc, f, indent=2)
    else:
        c["quantization_config"] = qc
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


# the FP8 projections of a layer: (parent module, shards fused in vLLM; a
# shard the checkpoint lacks is left out: DeepSeek's q_proj alone, its
# kv_a_proj_with_mqa alone without the query's LoRA)
GROUPS = [("self_attn", ("q_proj", "k_proj", "v_proj")), ("self_attn", ("o_proj",)),
          ("self_attn", ("q_a_proj", "kv_a_proj_with_mqa")), ("self_attn", ("q_b_proj",)),
          ("self_attn", ("kv_b_proj",)),
          ("mlp", ("gate_proj", "up_proj")), ("mlp", ("down_proj",)),
          # Llama 4's dense MLP and shared expert
          ("feed_forward", ("gate_proj", "up_proj")), ("feed_forward", ("down_proj",)),
          ("feed_forward.shared_expert", ("gate_proj", "up_proj")),
          ("feed_forward.shared_expert", ("down_proj",)),
          ("mlp.shared_expert", ("gate_proj", "up_proj")),
          ("mlp.shared_expert", ("down_proj",)),
          ("mlp.shared_experts", ("gate_proj", "up_proj")),
          ("mlp.shared_experts", ("down_proj",)),
          # the delta-net's: Qwen3-Next's in_proj_qkvz, Qwen3.5's in_proj_qkv
          # and in_proj_z (vLLM's in_proj_qkvz), out_proj
          ("linear_attn", ("in_proj_qkvz",)), ("linear_attn", ("in_proj_qkv", "in_proj_z")),
          ("linear_attn", ("out_proj",))]


def served_shards(t, mods, scheme, requant_always=None):
    """The weights and scales vLLM serves for the fused shards `mods`
    (module names) of checkpoint tensors t, and their static input scale:
    per-tensor shards requantized to their largest scale (always, or for
    ModelOpt where they differ; requant_always overrides), the largest of
    the shards' input scales."""
    method, kind, act, block, opt = SCHEMES[scheme]
    sname = ".weight_scale_inv" if method == "fp8" and block else ".weight_scale"
    scales = [t[m + sname].float() for m in mods]
    wqs = [t[m + ".weight"] for m in mods]
    if kind == "tensor":
        scales = [s.reshape(1) for s in scales]
        smax = torch.stack(scales).max().reshape(1)
        differ = any(bool((s != scales[0]).any()) for s in scales)
        always = method != "modelopt" if requant_always is None else requant_always
        if always or differ:
            wqs = [requant(w, s, smax) for w, s in zip(wqs, scales)]
        scales = [smax] * len(scales)
    elif kind == "block":
        scales = [s.reshape(s.shape[0], s.shape[2]) if s.dim() == 4 else s for s in scales]
    in_s = None
    if act == "static":
        in_s = torch.stack([t[m + ".input_scale"].float().reshape(()) for m in mods]).max()
    return wqs, scales, in_s


class FP8Experts(torch.nn.Module):
    """transformers' experts module (forward(hidden_states, top_k_index,
    top_k_weights), its expert loop and sum order) with each expert's
    projections FP8Linear: lins[e] = (gate, up, down)."""

    def __init__(self, lins, act_fn):
        super().__init__()
        self.lins, self.act_fn, self.num_experts = lins, act_fn, len(lins)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e, (gate, up, down) in enumerate(self.lins):
            token_idx, top_k_pos = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            x = hidden_states[token_idx]
            y = down(self.act_fn(gate(x)) * up(x))
            y = y * top_k_weights[token_idx, top_k_pos, None]
            out.index_add_(0, token_idx, y.to(out.dtype))
        return out


class FP8Llama4Experts(torch.nn.Module):
    """Llama 4's experts module (forward of the routed inputs of every
    expert, (experts x tokens, hidden), each row already times its router
    score and zero for a token the expert was not chosen for) with each
    expert's projections FP8Linear: lins[e] = (gate, up, down). An expert
    computes the rows of its tokens alone (vLLM's fused MoE); the others
    stay zero."""

    def __init__(self, lins, act_fn):
        super().__init__()
        self.lins, self.act_fn, self.num_experts = lins, act_fn, len(lins)

    def forward(self, hidden_states):
        x = hidden_states.view(self.num_experts, -1, hidden_states.shape[-1])
        out = torch.zeros_like(x)
        for e, (gate, up, down) in enumerate(self.lins):
            rows = x[e].abs().amax(dim=-1) > 0
            if rows.any():
                xe = x[e][rows]
                out[e][rows] = down(self.act_fn(gate(xe)) * up(xe)).to(out.dtype)
        return out.view(-1, hidden_states.shape[-1])


def serve_experts(layer, t, pre, scheme, mode, arch):
    """layer.mlp.experts as vLLM's fused MoE serves FP8 experts
    (process_fp8_weight_tensor_strategy_moe, process_fp8_input_tensor_strategy_moe):
    each expert's gate and up requantized to their largest per-tensor scale
    (always), its down as stored; one static input scale for every
    expert's gate/up and one for every down, the largest of the experts'."""
    method, kind, act, block, opt = SCHEMES[scheme]
    where, gate, up, down_name = EXPERTS.get(arch, EXPERTS_DEFAULT)
    module = EXPERTS_MODULE.get(arch, "mlp.experts")
    experts = layer.get_submodule(module)
    served = []
    for e in range(experts.num_experts):
        m = "%s%s.%d." % (pre, where, e)
        gu = served_shards(t, [m + gate, m + up], scheme, requant_always=True)
        down = served_shards(t, [m + down_name], scheme, requant_always=False)
        served.append((gu, down))
    in_gu = in_down = None
    if act == "static":
        in_gu = torch.stack([gu[2] for gu, _ in served]).max()
        in_down = torch.stack([down[2] for _, down in served]).max()
    group = block[1] if block else None
    lins = []
    for (gu, down) in served:
        lins.append(tuple(FP8Linear(w, s, kind, act, in_s, block, group, mode=mode)
                          for w, s, in_s in ((gu[0][0], gu[1][0], in_gu),
                                             (gu[0][1], gu[1][1], in_gu),
                                             (down[0][0], down[1][0], in_down))))
    owner, attr = module.rsplit(".", 1)
    setattr(layer.get_submodule(owner), attr,
            (FP8Llama4Experts if arch == "llama4" else FP8Experts)(lins, experts.act_fn))


def serve_layers(model, t, scheme, arch, mode="cpu"):
    """Replaces every FP8 projection of transformers model `model` (its
    layers under model.model.layers) by the FP8Linear vLLM serves from the
    checkpoint tensors t (name -> tensor, on the model's device): fused
    shards' per-tensor scales requantized to their largest (always, but for
    ModelOpt where they are equal), static input scales the largest of the
    shards'; FP8 experts as serve_experts serves them."""
    method, kind, act, block, opt = SCHEMES[scheme]
    for i, layer in enumerate(model.model.layers):
        pre = "model.layers.%d." % i
        for parent, group in GROUPS:
            group = [p for p in group if pre + "%s.%s.weight" % (parent, p) in t]
            mods = [pre + "%s.%s" % (parent, p) for p in group]
            if not mods or t[mods[0] + ".weight"].dtype != FP8:
                continue
            owner = layer.get_submodule(parent)
            wqs, scales, in_s = served_shards(t, mods, scheme)
            for p, w, s in zip(group, wqs, scales):
                bias = getattr(owner, p).bias
                setattr(owner, p,
                        FP8Linear(w, s, kind, act, in_s, block, block[1] if block else None,
                                  bias=None if bias is None else bias.detach(), mode=mode))
        where, gate = EXPERTS.get(arch, EXPERTS_DEFAULT)[:2]
        first = "%s%s.0.%s.weight" % (pre, where, gate)
        if first in t and t[first].dtype == FP8:
            serve_experts(layer, t, pre, scheme, mode, arch)
    return model


def served_model(ckpt, arch, scheme, dims, dtype=torch.float64, mode="cpu",
                 device="cpu"):
    """The model of checkpoint ckpt (written by make_checkpoint) with its
    projections served as vLLM serves them (serve_layers)."""
    import safetensors.torch as st
    import transformers as tf
    cfg = tiny_config(arch, *dims)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32,
                                                attn_implementation="eager")
    t = {k: v.to(device) for k, v in
         st.load_file(os.path.join(ckpt, "model.safetensors")).items()}
    ckpt_name, model_name = ROUTER.get(arch, ("", ""))[::-1]
    dense = {k.replace(ckpt_name, model_name) if ckpt_name else k: v.float()
             for k, v in t.items() if v.dtype != FP8 and "scale" not in k}
    model.load_state_dict(dense, strict=False)
    model = model.to(device=device, dtype=dtype).eval()
    return serve_layers(model, t, scheme, arch, mode)


def kv_absmax(model, samples):
    """Per layer, per kv head absmax of K (after the k norm and RoPE) and V
    (MLA: of the cached entry, K and V alike, one head)
    of `model` over the token samples (lists of ids, one forward each), as
    float64 arrays: hooks recompute K and V as the attention modules do,
    with their own projections, in the model's dtype and device."""
    from hf_decoder import cached_kv
    from hf_mla import is_mla, mla_entry
    # a hybrid model's linear-attention layers cache nothing
    layers = [layer for layer in model.model.layers if hasattr(layer, "self_attn")]
    dev = model.model.embed_tokens.weight.device
    heads = 1 if is_mla(layers[0].self_attn) else model.config.num_key_value_heads
    k_abs = torch.zeros(len(layers), heads, dtype=torch.float64, device=dev)
    v_abs = torch.zeros_like(k_abs)

    def mla_hook(i):
        def hook(module, args, kwargs):  # the entry, as its one kv head
            e = mla_entry(module, kwargs, torch).abs().amax().double()
            k_abs[i] = torch.maximum(k_abs[i], e)
            v_abs[i] = torch.maximum(v_abs[i], e)
        return hook

    def make_hook(i, attn):
        if is_mla(attn):
            return mla_hook(i)

        def hook(module, args, kwargs):
            hs = kwargs.get("hidden_states", args[0] if args else None)
            k, v = cached_kv(module, hs, kwargs["position_embeddings"])
            k_abs[i] = torch.maximum(k_abs[i], k.abs().amax(dim=(0, 1, 3)).double())
            v_abs[i] = torch.maximum(v_abs[i], v.abs().amax(dim=(0, 1, 3)).double())
        return hook

    hooks = [layer.self_attn.register_forward_pre_hook(make_hook(i, layer.self_attn),
                                                      with_kwargs=True)
             for i, layer in enumerate(layers)]
    with torch.inference_mode():
        for s in samples:
            model(torch.tensor([s], device=dev), use_cache=False)
    for h in hooks:
        h.remove()
    return k_abs.cpu().numpy(), v_abs.cpu().numpy()


def worst_rel(got, want):
    """The largest relative difference of two arrays of absmax."""
    return float((abs(got - want) / want).max())


def perturb_embeddings(model, gen, rel=2.0 ** -8):
    """Multiplies the embedding rows of `model` by 1 + u rel (u uniform in
    [-1, 1], from generator gen) and rounds them back to the model's dtype."""
    emb = model.model.embed_tokens.weight
    u = torch.rand(emb.shape, generator=gen, dtype=torch.float64).to(emb.device) * 2 - 1
    with torch.no_grad():
        emb.copy_((emb.double() * (1 + rel * u)).to(emb.dtype))
    return model
