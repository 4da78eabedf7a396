"""The entry an MLA engine caches, recomputed from a transformers DeepSeek-V2 /
V3 attention module (for tests/make_golden.py and tests/gpu_vs_transformers.py).

Per token: kv_a_proj_with_mqa's latent through kv_a_layernorm, then its RoPE
part rotated as the module rotates it (V2: apply_rotary_emb on complex pairs;
V3: apply_rotary_pos_emb_interleave, or apply_rotary_pos_emb when the config's
rope_interleave is false; DeepSeek-V3.2's and GLM-5's, whose configs have no
such field, always interleaved), laid out as vLLM and sglang cache it: rotation
pairs (2i, 2i + 1) in place (V3's interleaved function returns the even
channels then the odd ones; the pairs are put back)."""
import sys


def is_mla(attn):
    return hasattr(attn, "kv_a_proj_with_mqa")


def mla_entry(module, kwargs, torch):
    """(batch, tokens, kv_lora_rank + qk_rope_head_dim) of the module's input."""
    hs = kwargs["hidden_states"]
    fns = sys.modules[type(module).__module__]
    L, R = module.kv_lora_rank, module.qk_rope_head_dim
    latent, k_rot = torch.split(module.kv_a_proj_with_mqa(hs), [L, R], dim=-1)
    latent = module.kv_a_layernorm(latent)
    k_rot = k_rot.unsqueeze(1)  # (batch, 1, tokens, R): the module's view
    emb = kwargs["position_embeddings"]
    if hasattr(fns, "apply_rotary_emb"):  # V2: freqs_cis, complex
        _, k_rot = fns.apply_rotary_emb(k_rot, k_rot, emb.to(k_rot.device))
    elif getattr(module.config, "rope_interleave", True):  # V3.2, GLM-5: always
        _, k_rot = fns.apply_rotary_pos_emb_interleave(k_rot, k_rot, *emb)
        k_rot = torch.stack(torch.split(k_rot, R // 2, dim=-1), dim=-1).flatten(-2)
    else:
        _, k_rot = fns.apply_rotary_pos_emb(k_rot, k_rot, *emb)
    return torch.cat([latent, k_rot[:, 0]], dim=-1)
