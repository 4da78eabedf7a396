"""Where a transformers model keeps its decoder layers, the class that loads
a checkpoint, and the K and V an attention module caches (for
tests/make_golden.py, tests/fp8_reference.py and tests/gpu_vs_transformers.py).

A causal LM keeps its layers in model.model.layers; a multimodal wrapper
(Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration,
Qwen3VLForConditionalGeneration) in model.model.language_model.layers
(Llama4ForConditionalGeneration: model.language_model.model.layers), and
runs its language model alone on text."""

import sys


def text_model(model):
    """The module that runs the decoder layers on token ids: a causal LM's
    model, a multimodal wrapper's language model (Llama4ForConditionalGeneration
    keeps a whole causal LM in model.language_model)."""
    inner = model.model if hasattr(model, "model") else model.language_model.model
    return getattr(inner, "language_model", inner)


def decoder_layers(model):
    return text_model(model).layers


def is_wrapper(cfg):
    """A multimodal config: its language model in text_config."""
    return getattr(cfg, "text_config", None) is not None and \
        getattr(cfg, "vision_config", None) is not None


def model_class(tf, cfg):
    """The class transformers builds cfg's model with: the wrapper's own
    ForConditionalGeneration class (AutoModelForCausalLM maps Gemma 3's
    alone), else AutoModelForCausalLM."""
    if is_wrapper(cfg):
        return getattr(tf, type(cfg).__name__.replace("Config", "ForConditionalGeneration"))
    return tf.AutoModelForCausalLM


def from_config(tf, cfg, **kwargs):
    """A random-weight model of cfg."""
    if is_wrapper(cfg):
        return model_class(tf, cfg)._from_config(cfg, **kwargs)
    return tf.AutoModelForCausalLM.from_config(cfg, **kwargs)


def project_kv(module, hs):
    """K (after the module's k norm, before RoPE) and V of attention module
    `module` on hidden states hs, as (..., kv heads, head_dim): Phi-3's q, k
    and v in one qkv_proj; MiniMax-M2's and OLMo's k_norm over the whole
    projection, before the heads (the others' per head)."""
    shape = (*hs.shape[:-1], -1, module.head_dim)
    if hasattr(module, "qkv_proj"):
        cfg = module.config
        q_cols = cfg.num_attention_heads * module.head_dim
        kv_cols = cfg.num_key_value_heads * module.head_dim
        qkv = module.qkv_proj(hs)
        k, v = qkv[..., q_cols:q_cols + kv_cols], qkv[..., q_cols + kv_cols:]
    else:
        k, v = module.k_proj(hs), module.v_proj(hs)
    whole = type(module).__name__ in ("MiniMaxM2Attention", "Olmo2Attention",
                                      "Olmo3Attention")
    if whole:
        k = module.k_norm(k)
    k, v = k.reshape(shape), v.reshape(shape)
    if hasattr(module, "k_norm") and not whole:
        k = module.k_norm(k)
    return k, v


def llama4_kv(module, hs, freqs_cis):
    """The K and V Llama 4's attention module `module` caches on hidden
    states hs, as (..., kv heads, head_dim): K rotated (transformers'
    complex rotation of pairs) in a layer with RoPE, then normalized
    without a weight where the layer has its qk_norm; V as projected."""
    shape = (*hs.shape[:-1], -1, module.head_dim)
    k, v = module.k_proj(hs).view(shape), module.v_proj(hs).view(shape)
    if module.use_rope:
        rotate = sys.modules[type(module).__module__].apply_rotary_emb
        _, k = rotate(k, k, freqs_cis)
    if hasattr(module, "qk_norm"):
        k = module.qk_norm(k)
    return k, v


def rotates(module):
    """Whether attention module `module` rotates q and k: all but EXAONE 4's
    full-attention layers where other layers slide and SmolLM3's NoPE
    layers."""
    if type(module).__name__ == "Exaone4Attention":
        return module.sliding_window is None or module.is_sliding
    return bool(getattr(module, "use_rope", True))


def cached_kv(module, hs, position_embeddings):
    """The K (after its norm and RoPE) and V attention module `module`
    caches for hidden states hs, as (batch, tokens, kv heads, head_dim):
    Llama 4's through llama4_kv, every other family's (not MLA: hf_mla)
    through project_kv and its modeling file's apply_rotary_pos_emb where
    the module rotates (Hunyuan's key_layernorm after it)."""
    if type(module).__name__ == "Llama4TextAttention":
        return llama4_kv(module, hs, position_embeddings)
    k, v = project_kv(module, hs)
    if rotates(module):
        cos, sin = position_embeddings
        rope = sys.modules[type(module).__module__].apply_rotary_pos_emb
        _, k = rope(k.transpose(1, 2), k.transpose(1, 2), cos, sin)
        k = k.transpose(1, 2)
    if hasattr(module, "key_layernorm"):  # Hunyuan's, after RoPE
        k = module.key_layernorm(k)
    return k, v
