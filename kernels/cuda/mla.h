/* kernels/cuda/mla.h: multi-head latent attention on the device (DeepSeek-V2
 * / V3, Kimi K2): the cache point (the latent's RMSNorm and the RoPE of the
 * entry's and the query's RoPE parts, fused with the observer of the entry
 * an engine caches), the expansion of the latent into every head's K and V
 * for the attention kernels (or of the RoPE part alone, where kv_b_proj
 * writes the rest in place), and vLLM's fp8_ds_mla cache of the entry and
 * back (eval). The CPU references of the same stems are in
 * kernels/cpu/ops.h; the conventions of kernels/cuda/ops.h apply (bf16
 * tensors in device memory, work queued on `stream`, a bad shape is
 * KVCAL_ERR_INVALID_ARG before any device work, a failed launch
 * KVCAL_ERR_CUDA). */
#ifndef KVCAL_KERNELS_CUDA_MLA_H
#define KVCAL_KERNELS_CUDA_MLA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cuda/bf16.h"
#include "kernels/kv_observer.h"
#include "kernels/mla_limits.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cache point's shapes and weights. */
typedef struct kvcal_mla_cfg {
    int n_heads, qk_dim;        /* the query: n_heads heads of qk_dim */
    int kv_lora_rank, rope_dim; /* the entry: the latent, then the RoPE part */
    const kvcal_bf16 *norm_w;   /* (kv_lora_rank) kv_a_layernorm's weight */
    float eps;
    const float *inv_freq;  /* (rope_dim / 2) device memory */
    float attention_factor; /* > 0: multiplies cos and sin (yarn) */
} kvcal_mla_cfg;

/* kvcal_mla_latent_ref on the device, in place on entry (tokens,
 * entry_stride) and, when q is non-NULL, q (tokens, q_stride), rounding to
 * bf16 where transformers' bf16 modules round (kernels/cuda/bf16_round.cuh:
 * the norm's x * rsqrt and its product with the weight; cos and sin times
 * the factor, each product and the sum of a rotation); then, when obs is
 * non-NULL, the stored entry (one head of kv_lora_rank + rope_dim values)
 * folded into obs's K and V alike (device memory, kernels/kv_observer.h).
 * Tokens with pos < 0 are padding: untouched, not observed. rope_dim even,
 * kv_lora_rank >= 1, their sum <= KVCAL_MLA_MAX_ENTRY, rope_dim <= qk_dim. */
kvcal_status kvcal_mla_latent_launch(kvcal_bf16 *entry, int64_t entry_stride,
                                     kvcal_bf16 *q, int64_t q_stride, const int32_t *pos,
                                     int tokens, const kvcal_mla_cfg *cfg,
                                     const kvcal_kv_observer *obs, cudaStream_t stream);

/* kvcal_mla_expand_ref on the device (every token, padding included: the
 * attention never reads padding rows for a valid token): k (tokens, n_heads,
 * nope + rope_dim) and v (tokens, n_heads, v_stride) from kvb (tokens,
 * n_heads, nope + v_dim) and the entry's RoPE part; one of k and v may be
 * NULL, which leaves it out (an attention that reads V inside kvb needs K
 * alone). 16-byte copies where every size is a multiple of 8 and the
 * pointers 16-byte aligned. */
kvcal_status kvcal_mla_expand_launch(kvcal_bf16 *k, kvcal_bf16 *v, int v_stride,
                                     const kvcal_bf16 *kvb, const kvcal_bf16 *entry,
                                     int64_t entry_stride, int tokens, int n_heads,
                                     int nope, int v_dim, int kv_lora_rank, int rope_dim,
                                     cudaStream_t stream);

/* K's RoPE part alone: in k (tokens, n_heads heads of nope + rope_dim
 * values, k_head_stride apart: rows of n_heads * k_head_stride), each
 * head's last rope_dim values = the token's entry values kv_lora_rank ..
 * kv_lora_rank + rope_dim (entry (tokens, entry_stride)); the first nope
 * of each head are left as they are (where kv_b_proj wrote them:
 * kvcal_gemm_batched_launch). kvcal_mla_expand_launch's K where those hold
 * kv_b_proj's no-RoPE part; the same kernel and choice of 16-byte copies
 * (sizes and k_head_stride multiples of 8, k and entry 16-byte aligned). */
kvcal_status kvcal_mla_expand_rope_launch(kvcal_bf16 *k, int k_head_stride,
                                          const kvcal_bf16 *entry, int64_t entry_stride,
                                          int tokens, int n_heads, int nope,
                                          int kv_lora_rank, int rope_dim,
                                          cudaStream_t stream);

/* kvcal_mla_ds_roundtrip_ref on the device: out (rows, out_stride) fp32
 * from x (rows, x_stride) bf16, one block a row (the tile scale divides, as
 * vLLM's concat_and_cache_ds_mla_kernel: the result equals the reference's
 * bit for bit). */
kvcal_status kvcal_mla_ds_roundtrip_launch(float *out, int64_t out_stride,
                                           const kvcal_bf16 *x, int64_t x_stride,
                                           int rows, int kv_lora_rank, int rope_dim,
                                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
