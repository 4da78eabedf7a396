/* kernels/cuda/ops.h: CUDA kernels of the model runner (host launchers).
 *
 * Each op has the stem of its CPU reference in kernels/cpu/ops.h, with
 * _kernel (device) and _launch (host) here. Conventions for every function:
 * - tensors are bf16 (kvcal_bf16) in device memory, row-major, shapes in the
 *   comments; arithmetic is fp32 and each output is rounded once to bf16;
 * - work is queued on `stream` (last argument) and nothing synchronizes: the
 *   caller owns every buffer and keeps it alive until the stream reaches it;
 * - a bad shape gives KVCAL_ERR_INVALID_ARG or KVCAL_ERR_UNSUPPORTED, a
 *   failed launch KVCAL_ERR_CUDA, with kvcal_last_error() naming the op. */
#ifndef KVCAL_KERNELS_CUDA_OPS_H
#define KVCAL_KERNELS_CUDA_OPS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fp8_linear.h"
#include "kernels/cuda/bf16.h"
#include "kernels/kv_observer.h"
#include "kernels/moe_limits.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- norms and elementwise ----------------------------------------------- */

/* Pre-norm with the residual add fused: when delta is non-NULL,
 * residual (rows, dim) += delta (rows, dim) (rounded to bf16, as a bf16
 * model's residual stream is), then out (rows, dim) = residual *
 * rsqrt(mean(residual^2) + eps) * w (dim). delta NULL: a plain RMSNorm of
 * residual, which it leaves as it is, and then out may be residual (an RMSNorm
 * in place); otherwise out may not alias residual or delta. w NULL: no norm,
 * out = residual after the add (a post-norm layer's input, the stream
 * itself). */
kvcal_status kvcal_add_rmsnorm_launch(kvcal_bf16 *out, kvcal_bf16 *residual,
                                      const kvcal_bf16 *delta, const kvcal_bf16 *w,
                                      int rows, int dim, float eps, cudaStream_t stream);

/* kvcal_add_rmsnorm_launch of a model whose norms scale by w + offset (Gemma's,
 * Qwen3-Next's 1 + w): each output x r (w + offset) in fp32, rounded once,
 * as those models compute it (offset 0: kvcal_add_rmsnorm_launch). */
kvcal_status kvcal_add_rmsnorm_offset_launch(kvcal_bf16 *out, kvcal_bf16 *residual,
                                             const kvcal_bf16 *delta, const kvcal_bf16 *w,
                                             float offset, int rows, int dim, float eps,
                                             cudaStream_t stream);

/* The first segs * dim columns of each of x's rows (stride values apart)
 * RMS-normalized in place as segs segments of dim, each times w (dim), as
 * kvcal_add_rmsnorm_launch without a delta: inside the QKV buffer, q/k
 * norms over the whole projection (OLMo 2, MiniMax-M2: one segment) and
 * per-head q/k norms after RoPE (Hunyuan: a segment a head). */
kvcal_status kvcal_rmsnorm_cols_launch(kvcal_bf16 *x, int64_t stride, const kvcal_bf16 *w,
                                       int rows, int segs, int dim, float eps,
                                       cudaStream_t stream);

/* out (rows, n) = silu(gate) * up, gate_up (rows, 2n) holding gate in its first
 * n columns and up in the last n (the output of a fused gate/up GEMM). */
kvcal_status kvcal_swiglu_launch(kvcal_bf16 *out, const kvcal_bf16 *gate_up, int rows,
                                 int n, cudaStream_t stream);

/* out (rows, n) = gelu_tanh(gate) * up (kvcal_geglu_ref), gate_up as
 * kvcal_swiglu_launch's; gelu_tanh rounded to bf16, then the product. */
kvcal_status kvcal_geglu_launch(kvcal_bf16 *out, const kvcal_bf16 *gate_up, int rows,
                                int n, cudaStream_t stream);

/* out (rows, n) = kvcal_swiglu_oai_ref of gate_up's halves (gpt-oss's
 * clamped SwiGLU, gate_up as kvcal_swiglu_launch's): g * sigmoid(alpha g)
 * and up + 1 rounded to bf16, then their product. limit > 0. */
kvcal_status kvcal_swiglu_oai_launch(kvcal_bf16 *out, const kvcal_bf16 *gate_up, int rows,
                                     int n, float alpha, float limit,
                                     cudaStream_t stream);

/* x (n) = cap * tanh(x / cap) in fp32, rounded once, in place: Gemma 2's
 * logits. cap > 0. */
kvcal_status kvcal_softcap_launch(kvcal_bf16 *x, int64_t n, float cap,
                                  cudaStream_t stream);

/* x (rows, cols; rows stride values apart) row t times 1 + scale ln(1 +
 * floor((pos[t] + 1) / floor_scale)) in fp32, rounded once
 * (kvcal_query_temperature_ref: Llama 4's queries in its NoPE layers); rows
 * with pos < 0 (padding) left as they are. */
kvcal_status kvcal_query_temperature_launch(kvcal_bf16 *x, int64_t stride,
                                            const int32_t *pos, int rows, int cols,
                                            float scale, float floor_scale,
                                            cudaStream_t stream);

/* out (n) = x * a + b in fp32, rounded once to bf16 (out may be x): the
 * embedding's scale, an RMSNorm weight's offset. */
kvcal_status kvcal_affine_launch(kvcal_bf16 *out, const kvcal_bf16 *x, int64_t n, float a,
                                 float b, cudaStream_t stream);

/* out (n, dim) = table[ids[i]] (vocab, dim) per row; ids[i] < 0 (padding)
 * gives a zero row. Ids are not range-checked: the caller checks them
 * against the vocabulary on the host. */
kvcal_status kvcal_embed_launch(kvcal_bf16 *out, const kvcal_bf16 *table,
                                const int32_t *ids, int n, int dim, cudaStream_t stream);

/* --- RoPE fused with the K/V observer ---------------------------------- */

/* RoPE configuration. inv_freq is computed on the host (llama3 / linear
 * scaling included) and copied to the device once. */
typedef struct kvcal_rope_cfg {
    const float *inv_freq; /* (rot_dim / 2) device memory */
    int rot_dim;           /* even, 2 .. head_dim: channels that rotate */
    int interleaved;       /* 1: pairs (2i, 2i+1); 0: (i, i + rot_dim/2) */
    const kvcal_bf16
        *q_norm_w; /* (head_dim) per-head RMSNorm of q before RoPE, or NULL */
    const kvcal_bf16 *k_norm_w; /* (head_dim) the same for k, or NULL */
    float norm_eps;
    float attention_factor; /* > 0: multiplies cos and sin (yarn), 1 otherwise */
    /* the norms' weight offset: 0, x r rounded then times w rounded; else
     * (Gemma's, Qwen3-Next's 1 + w) x r (w + offset) rounded once */
    float norm_offset;
} kvcal_rope_cfg;

/* In place on the output of the fused QKV projection, qkv (tokens,
 * token_stride) holding q (n_heads, head_dim) at column 0, k (n_kv_heads,
 * head_dim) after it and v (n_kv_heads, head_dim) after k: optional per-head
 * q/k RMSNorm, then RoPE of q and k at positions pos (tokens), then, when
 * obs is non-NULL, K (as rotated and rounded to bf16: what a cache stores)
 * and V are folded into obs (device memory, kernels/kv_observer.h). Its CPU
 * reference is kvcal_rope_observe_ref (kernels/cpu/ops.h). cos and sin are multiplied by
 * rope->attention_factor (finite and > 0, else KVCAL_ERR_INVALID_ARG).
 * Tokens with pos < 0 are padding: untouched and not observed. head_dim
 * even and <= 256; n_heads a multiple of n_kv_heads, or 0 where the rows
 * hold only k and v (a calibration's last layer, whose queries nothing
 * reads). A NaN in K or V makes the absmax NaN, which the caller checks. */
kvcal_status kvcal_rope_observe_launch(kvcal_bf16 *qkv, int64_t token_stride,
                                       const int32_t *pos, int tokens, int n_heads,
                                       int n_kv_heads, int head_dim,
                                       const kvcal_rope_cfg *rope,
                                       const kvcal_kv_observer *obs, cudaStream_t stream);

/* The same with an explicit kernel, for the tests and bench/runner_ops:
 * 1: portable: any even head_dim; a warp per (token, kv head), lane l owning
 *    rotation pairs l, l + 32, ... (2-byte accesses, sin/cos per lane);
 * 2: vectorised: head_dim and rot_dim multiples of 16, token_stride a
 *    multiple of 8, qkv and the norm weights 16-byte aligned (otherwise
 *    KVCAL_ERR_UNSUPPORTED); a lane owns 16 channels of a row (16-byte loads
 *    and stores), a warp one token for up to 8 kv heads, sin/cos computed once
 *    per (token, pair) in the warp and shared by shuffles.
 * kvcal_rope_observe_launch takes version 2 wherever it applies, else 1. */
#define KVCAL_ROPE_VERSIONS 2
kvcal_status kvcal_rope_observe_launch_version(int version, kvcal_bf16 *qkv,
                                               int64_t token_stride, const int32_t *pos,
                                               int tokens, int n_heads, int n_kv_heads,
                                               int head_dim, const kvcal_rope_cfg *rope,
                                               const kvcal_kv_observer *obs,
                                               cudaStream_t stream);

/* --- GEMM (cuBLASLt) --------------------------------------------------- */

/* A cuBLASLt handle, its workspace and the algorithms chosen per shape. Use
 * from one host thread at a time. The first launch of a shape of 1 GFLOP or
 * more times cuBLASLt's candidate algorithms on the caller's stream (and
 * waits for it once); later launches of the shape are asynchronous. */
typedef struct kvcal_gemm kvcal_gemm_t;

/* workspace_bytes: cuBLASLt scratch (32 MiB is plenty); *out = NULL on failure. */
kvcal_status kvcal_gemm_create(size_t workspace_bytes, kvcal_gemm_t **out);
/* NULL is a no-op. Synchronizes the device first. */
void kvcal_gemm_destroy(kvcal_gemm_t *gemm);

/* out (rows, n) = x (rows, k) @ w^T + bias, w (n, k) as checkpoints store
 * nn.Linear weights, bias (n) or NULL (the bias is added in the GEMM's
 * epilogue). fp32 accumulation. Fused projections are one call on
 * concatenated weights: QKV as w = [Wq; Wk; Wv], gate/up as [Wgate; Wup]. */
kvcal_status kvcal_gemm_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out, const kvcal_bf16 *x,
                               const kvcal_bf16 *w, const kvcal_bf16 *bias, int rows,
                               int k, int n, cudaStream_t stream);

/* out (rows, n) += x (rows, k) @ w^T + bias: kvcal_gemm_launch with the
 * output read back in the epilogue (a residual add), summed in fp32 and
 * rounded to bf16 once. The shape's algorithm is chosen apart from
 * kvcal_gemm_launch's, at its first launch, its candidates timed writing
 * scratch (rows, n), which that launch overwrites (a buffer apart from
 * out; its contents otherwise unused). */
kvcal_status kvcal_gemm_accumulate_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out,
                                          kvcal_bf16 *scratch, const kvcal_bf16 *x,
                                          const kvcal_bf16 *w, const kvcal_bf16 *bias,
                                          int rows, int k, int n, cudaStream_t stream);

/* kvcal_gemm_launch with x's rows ldx >= k values apart (x read in place
 * inside a wider buffer: MLA's latent, the first kv_lora_rank values of
 * each cached entry). */
kvcal_status kvcal_gemm_launch_ld(kvcal_gemm_t *gemm, kvcal_bf16 *out,
                                  const kvcal_bf16 *x, int64_t ldx, const kvcal_bf16 *w,
                                  const kvcal_bf16 *bias, int rows, int k, int n,
                                  cudaStream_t stream);

/* batch GEMMs of one x through cuBLASLt's strided batches, no bias: for
 * b < batch, the (rows, n) block at out + b * out_stride (its rows ldo values
 * apart) = x (rows, k; rows ldx >= k values apart, the same x for every b)
 * @ w_b^T, w_b = w + b * w_stride (n, k) row-major (values; w_stride 0: one
 * weight). The blocks may interleave in out's rows but not overlap:
 * out_stride >= n (unused with one batch) and ldo >= (batch - 1) *
 * out_stride + n; out's values outside them are left as they are. MLA's
 * kv_b_proj a head a batch (a head's rows of the weight, its columns of K
 * or of kv_b_proj's output) reading the latent in place. Planned and tuned
 * as kvcal_gemm_launch (the batches' FLOPs together); the plan tells
 * cuBLASLt's heuristic the alignment every batch's pointer shares, so that
 * it proposes only algorithms that take it. */
kvcal_status kvcal_gemm_batched_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out, int64_t ldo,
                                       int64_t out_stride, const kvcal_bf16 *x,
                                       int64_t ldx, const kvcal_bf16 *w, int64_t w_stride,
                                       int rows, int k, int n, int batch,
                                       cudaStream_t stream);

/* kvcal_gemm_launch with cuBLASLt's candidate algorithm `candidate` of the
 * shape (0 .. *count - 1, in the heuristic's order; -1: the one
 * kvcal_gemm_launch uses), for bench/runner_ops and the tests. The shape is
 * planned and tuned as by kvcal_gemm_launch first. *count and *chosen (each
 * may be NULL) get the number of candidates and the one kvcal_gemm_launch
 * uses (untouched when rows is 0: nothing is planned then). A candidate out
 * of range is KVCAL_ERR_INVALID_ARG. */
kvcal_status kvcal_gemm_launch_candidate(kvcal_gemm_t *gemm, int candidate,
                                         kvcal_bf16 *out, const kvcal_bf16 *x,
                                         const kvcal_bf16 *w, const kvcal_bf16 *bias,
                                         int rows, int k, int n, cudaStream_t stream,
                                         int *count, int *chosen);

/* How cuBLASLt reads an FP8 operand's scales (cublasLtMatmulMatrixScale_t):
 * one fp32 scalar; one per row of the operand as kvcal stores it (a weight's
 * output row, an activation's token: OUTER_VEC_32F); one per 128 columns of
 * a row (VEC128_32F: scale[g * rows + r]); one per 128 x 128 block
 * (BLK128x128_32F, core/fp8_linear.h's block layout). */
typedef enum kvcal_gemm_scale {
    KVCAL_GEMM_SCALE_SCALAR = 0,
    KVCAL_GEMM_SCALE_OUTER_VEC = 1,
    KVCAL_GEMM_SCALE_VEC128 = 2,
    KVCAL_GEMM_SCALE_BLK128x128 = 3
} kvcal_gemm_scale;

/* out (rows, n) bf16 = (xq * sx) (wq * sw)^T + bias through cuBLASLt's FP8
 * GEMM: xq (rows, k) and wq (n, k) e4m3, x_scale / w_scale device fp32
 * scales read as x_mode / w_mode say, bias (n) bf16 or NULL; fp32
 * accumulation, or with fast_accum Hopper's fast accumulation
 * (CUBLASLT_MATMUL_DESC_FAST_ACCUM: the tensor cores' own accumulator, never
 * promoted to fp32; as vLLM's sm_90 CUTLASS kernels of scalar and vector
 * scales). A GPU, shape or pair of modes cuBLASLt has no algorithm for (FP8
 * needs compute capability 8.9; the vector and block modes Hopper) is
 * KVCAL_ERR_UNSUPPORTED, at once on every later call: the caller falls back
 * (kvcal_fp8_linear_launch). */
kvcal_status kvcal_gemm_fp8_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out, const uint8_t *xq,
                                   const float *x_scale, kvcal_gemm_scale x_mode,
                                   const uint8_t *wq, const float *w_scale,
                                   kvcal_gemm_scale w_mode, int fast_accum,
                                   const kvcal_bf16 *bias, int rows, int k, int n,
                                   cudaStream_t stream);

/* kvcal_gemm_fp8_launch with cuBLASLt's candidate `candidate` of the plan
 * (-1: the chosen one, timed at the first launch), for benchmarks;
 * *count and *chosen as kvcal_gemm_launch_candidate's. */
kvcal_status kvcal_gemm_fp8_launch_candidate(
    kvcal_gemm_t *gemm, int candidate, kvcal_bf16 *out, const uint8_t *xq,
    const float *x_scale, kvcal_gemm_scale x_mode, const uint8_t *wq,
    const float *w_scale, kvcal_gemm_scale w_mode, int fast_accum, const kvcal_bf16 *bias,
    int rows, int k, int n, cudaStream_t stream, int *count, int *chosen);

/* Whether cuBLASLt has an algorithm for that FP8 GEMM (planned and kept);
 * where not, kvcal_last_error() says what its heuristic answered. */
int kvcal_gemm_fp8_runs(kvcal_gemm_t *gemm, int rows, int k, int n, int bias,
                        kvcal_gemm_scale x_mode, kvcal_gemm_scale w_mode, int fast_accum);

/* --- FP8 linear layers (kernels/cuda/fp8_linear.cu) ------------------------- */

/* An FP8 weight on the device. */
typedef struct kvcal_fp8_weight {
    const uint8_t *q;         /* (n, k) e4m3 */
    const float *scales;      /* core/fp8_linear.h's layout of f.w */
    const float *input_scale; /* KVCAL_FP8A_STATIC: the one scale; else NULL */
    kvcal_fp8_linear f;
} kvcal_fp8_weight;

/* Device scratch of kvcal_fp8_linear_launch. */
typedef struct kvcal_fp8_scratch {
    uint8_t *xq; /* (rows, k) the quantized activation */
    float *xs;   /* rows * ceil(k / group) (rows outside GROUP) its scales */
    /* the dequantized fallback, bf16 (NULL where the GPU runs every FP8
     * GEMM the caller asks for): the weight (n, k), the activation (rows, k) */
    kvcal_bf16 *wd, *xd;
} kvcal_fp8_scratch;

typedef enum kvcal_fp8_gemm_path {
    KVCAL_FP8_GEMM_AUTO = 0,    /* cuBLASLt's FP8 GEMM where it runs the modes (fp32
                                   accumulation), else the dequantized fallback */
    KVCAL_FP8_GEMM_DEQUANT = 1, /* the fallback always */
    KVCAL_FP8_GEMM_FAST = 2     /* AUTO with fast accumulation where vLLM's sm_90
                                   kernels take it: scalar and outer-vector scales
                                   (block scales promote to fp32 per 128 as in AUTO;
                                   a shape cuBLASLt has no fast algorithm for, fp32) */
} kvcal_fp8_gemm_path;

/* kvcal_fp8_quant_act_ref on the device: x (rows, k) bf16 into xq (rows,
 * k) e4m3 and xs, as kvcal_fp8_quant_act_ref lays them out; input_scale a
 * device pointer (STATIC). Bit for bit the reference's bytes and scales. */
kvcal_status kvcal_fp8_quant_act_launch(uint8_t *xq, float *xs, const kvcal_bf16 *x,
                                        int rows, int k, kvcal_fp8_act_scale mode,
                                        int group, const float *input_scale,
                                        cudaStream_t stream);

/* w (n, k) bf16 = the weight dequantized (e4m3 times its scale, rounded once). */
kvcal_status kvcal_fp8_dequant_weight_launch(kvcal_bf16 *w, const kvcal_fp8_weight *fw,
                                             int n, int k, cudaStream_t stream);

/* x (rows, k) bf16 = xq dequantized with xs (the activation as the FP8 GEMM
 * multiplies it, rounded once to bf16). */
kvcal_status kvcal_fp8_dequant_act_launch(kvcal_bf16 *x, const uint8_t *xq,
                                          const float *xs, int rows, int k,
                                          kvcal_fp8_act_scale mode, int group,
                                          cudaStream_t stream);

/* out (rows, k) bf16 = x quantized as kvcal_fp8_quant_act_launch quantizes
 * it and dequantized as kvcal_fp8_dequant_act_launch dequantizes it, in
 * one pass without the e4m3 bytes (kvcal_fp8_fake_quant_ref's values,
 * rounded once to bf16: the input of an FP8 GEMM run as a bf16 one, the
 * FP8 experts'); out may be x; input_scale a device pointer (STATIC). The
 * shape must pass kvcal_fp8_fake_quant_fits, the rows 16-byte aligned. */
kvcal_status kvcal_fp8_fake_quant_launch(kvcal_bf16 *out, const kvcal_bf16 *x, int rows,
                                         int k, kvcal_fp8_act_scale mode, int group,
                                         const float *input_scale, cudaStream_t stream);

/* Whether kvcal_fp8_fake_quant_launch takes rows of k values in that mode:
 * k a multiple of 8; GROUP groups of a power of two from 8 to 256 dividing
 * k; TOKEN k up to 8192; STATIC. */
int kvcal_fp8_fake_quant_fits(int k, kvcal_fp8_act_scale mode, int group);

/* kvcal_fp8_swiglu_quant_ref on the device: the SwiGLU of gate_up (rows,
 * 2n), as kvcal_swiglu_launch computes it, quantized into xq (rows, n) and
 * xs as kvcal_fp8_quant_act_launch would quantize that output: bit for bit
 * the bytes and scales of the two launches, without the (rows, n) bf16
 * activation between them. n must pass kvcal_fp8_swiglu_quant_fits (a
 * multiple of 8, the row in shared memory); gate_up 16-byte and xq 8-byte
 * aligned; mode not NONE. */
kvcal_status kvcal_fp8_swiglu_quant_launch(uint8_t *xq, float *xs,
                                           const kvcal_bf16 *gate_up, int rows, int n,
                                           kvcal_fp8_act_scale mode, int group,
                                           const float *input_scale, cudaStream_t stream);

/* Whether kvcal_fp8_swiglu_quant_launch takes rows of n outputs. */
int kvcal_fp8_swiglu_quant_fits(int n);

/* kvcal_add_rmsnorm_launch with the quantization above as its epilogue:
 * residual (rows, dim) += delta (NULL: none), rounded to bf16 as that
 * launch writes it, then the row normalized with w (dim) as it computes
 * out, quantized into xq (rows, dim) and xs as kvcal_fp8_quant_act_launch
 * would quantize out: bit for bit the residual, bytes and scales of the
 * two launches, without the (rows, dim) bf16 out between them (for a
 * normalized stream whose only reader is an FP8 projection with quantized
 * activations). The arguments must pass kvcal_fp8_add_rmsnorm_quant_fits;
 * xq 8-byte aligned; mode not NONE. Reference: kvcal_fp8_add_rmsnorm_quant_ref. */
kvcal_status kvcal_fp8_add_rmsnorm_quant_launch(
    uint8_t *xq, float *xs, kvcal_bf16 *residual, const kvcal_bf16 *delta,
    const kvcal_bf16 *w, int rows, int dim, float eps, kvcal_fp8_act_scale mode,
    int group, const float *input_scale, cudaStream_t stream);

/* Whether kvcal_fp8_add_rmsnorm_quant_launch takes these rows: dim a
 * multiple of 8 whose row fits shared memory, residual, delta (may be
 * NULL) and w 16-byte aligned. */
int kvcal_fp8_add_rmsnorm_quant_fits(const kvcal_bf16 *residual, const kvcal_bf16 *delta,
                                     const kvcal_bf16 *w, int dim);

/* out (rows, n) bf16 = the served FP8 linear layer (kvcal_fp8_linear_ref)
 * of x (rows, k) bf16: the activation quantized as w->f.a says (x NULL: s->xq
 * and s->xs hold it quantized already, kvcal_fp8_swiglu_quant_launch's or
 * kvcal_fp8_add_rmsnorm_quant_launch's), then, with
 * path AUTO and quantized activations, cuBLASLt's FP8 GEMM where it runs
 * the scale modes (per-tensor: scalars; per-channel or per-token: outer
 * vectors; 128 x 128 blocks: block scales beside 1 x 128 activation
 * groups); otherwise the fallback: the weight dequantized into s->wd, the
 * activation dequantized into s->xd (left unquantized under
 * KVCAL_FP8A_NONE), a bf16 GEMM. *fp8_gemm (may be NULL) gets 1 where the
 * FP8 GEMM ran. The fallback without s->wd is KVCAL_ERR_UNSUPPORTED. */
kvcal_status kvcal_fp8_linear_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out,
                                     const kvcal_bf16 *x, const kvcal_fp8_weight *w,
                                     const kvcal_bf16 *bias, int rows, int k, int n,
                                     const kvcal_fp8_scratch *s, kvcal_fp8_gemm_path path,
                                     int *fp8_gemm, cudaStream_t stream);

/* Whether kvcal_fp8_linear_launch on `path` takes cuBLASLt's FP8 GEMM for
 * w at rows x k x n with a bias or not on the current GPU (the plan is made
 * and kept; nothing runs): 0 where it would fall back, kvcal_last_error()
 * then saying why. */
int kvcal_fp8_linear_runs(kvcal_gemm_t *gemm, const kvcal_fp8_weight *w,
                          kvcal_fp8_gemm_path path, int bias, int rows, int k, int n);

/* --- gate/up projection + SwiGLU in one GEMM (Hopper) ---------------------- */

/* act (rows, n) = silu(x Wg^T) * (x Wu^T), x (rows, k), fp32 accumulation,
 * gate and up rounded to bf16, then silu(gate), then the product, as
 * kvcal_gemm_launch + kvcal_swiglu_launch round: w_tiled
 * (kvcal_gemm_swiglu_rows(n), k) is the gate/up weight in the order
 * kvcal_gemm_swiglu_interleave writes. k and n multiples of 8, buffers
 * 16-byte aligned (else
 * KVCAL_ERR_INVALID_ARG); a GPU other than compute capability 9.0, or one
 * for which the build holds no sm_90a code (kvcal_cuda_code_for_device), is
 * KVCAL_ERR_UNSUPPORTED. */
kvcal_status kvcal_gemm_swiglu_launch(kvcal_bf16 *act, const kvcal_bf16 *x,
                                      const kvcal_bf16 *w_tiled, int rows, int k, int n,
                                      cudaStream_t stream);

/* The rows of the interleaved weight: 2n, n rounded up to a multiple of 128
 * (the last block padded). */
int kvcal_gemm_swiglu_rows(int n);

/* The weight's interleaved order: row i (0 .. kvcal_gemm_swiglu_rows(n) - 1)
 * is row kvcal_gemm_swiglu_source_row(i, n) of [Wgate; Wup] (2n, k), in
 * blocks of 128: rows 256 b .. 256 b + 127 are gate rows 128 b .. 128 b +
 * 127, the next 128 the up rows of the same; -1 for the last block's
 * padding (gate or up rows past n; what it holds never reaches act). */
int kvcal_gemm_swiglu_source_row(int i, int n);

/* Host memory: dst (kvcal_gemm_swiglu_rows(n), k) = w_gu (2n, k) in that
 * order, the padding zero. */
void kvcal_gemm_swiglu_interleave(kvcal_bf16 *dst, const kvcal_bf16 *w_gu, int k, int n);

/* The FP8 gate/up projection + SwiGLU (kernels/cuda/gemm_swiglu_fp8.cu):
 * act (rows, n) = SwiGLU of the served FP8 GEMM's bf16 gate and up
 * (x_scale (w_scale acc), acc the fp32 sum of xq (rows, k) e4m3 times the
 * weight's e4m3 rows, rounded to bf16), rounded as
 * kvcal_gemm_swiglu_launch rounds, and absmax (rows) the max |act| of each
 * row (zeroed by the launch, then atomicMax). x_scale: x_rows ? a scale a
 * row : one; w_tiled (kvcal_gemm_swiglu_rows(n), k) the weight in
 * kvcal_gemm_swiglu_source_row's order; w_scale: w_rows ? the 2n scales of
 * [gate; up]'s rows (8-byte aligned) : one. k a multiple of 16, n of 8,
 * buffers 16-byte aligned (else KVCAL_ERR_INVALID_ARG); a GPU without the
 * build's sm_90a code KVCAL_ERR_UNSUPPORTED. */
kvcal_status kvcal_gemm_swiglu_fp8_launch(kvcal_bf16 *act, float *absmax, const uint8_t *xq,
                                          const float *x_scale, int x_rows,
                                          const uint8_t *w_tiled, const float *w_scale,
                                          int w_rows, int rows, int k, int n,
                                          cudaStream_t stream);

/* xq (rows, n) e4m3 and xs (rows) = act quantized as
 * kvcal_fp8_quant_act_launch quantizes it, TOKEN with the row absmax
 * kvcal_gemm_swiglu_fp8_launch gave, STATIC with *input_scale (device):
 * the same bytes and scales. n a multiple of 8, act 16-byte and xq 8-byte
 * aligned. */
kvcal_status kvcal_fp8_quant_absmax_launch(uint8_t *xq, float *xs, const kvcal_bf16 *act,
                                           const float *absmax, int rows, int n,
                                           kvcal_fp8_act_scale mode,
                                           const float *input_scale, cudaStream_t stream);

/* --- attention ---------------------------------------------------------- */

/* Causal prefill attention of `batch` sequences of seq_len tokens each on the
 * tensor cores (online softmax, fp32 accumulation):
 * out (batch * seq_len, out_stride) gets, per query head h at column
 * h * head_dim, softmax(q k^T * scale + causal mask) v, where query head h
 * reads kv head h / (n_heads / n_kv_heads) (GQA, MQA). q (batch * seq_len,
 * n_heads, head_dim), k and v (batch * seq_len, n_kv_heads, head_dim) are
 * read with row stride qkv_stride (elements), so they may point into one
 * fused QKV buffer. head_dim 64, 80, 96, 128 and 192 (multi-head latent
 * attention's q/k heads, V padded to them) with 16-byte aligned pointers and
 * strides run on the tensor cores; any other head_dim up to 256 (or
 * misaligned data) on a slow portable kernel, meant for tiny models.
 * With right padding, a sequence's valid tokens never see its padding. */
kvcal_status kvcal_attention_launch(kvcal_bf16 *out, int64_t out_stride,
                                    const kvcal_bf16 *q, const kvcal_bf16 *k,
                                    const kvcal_bf16 *v, int64_t qkv_stride, int batch,
                                    int seq_len, int n_heads, int n_kv_heads,
                                    int head_dim, float scale, cudaStream_t stream);

/* The same with an explicit tensor-core kernel version (other head sizes take
 * the portable kernel whatever the version; head_dim 192 takes version 1's
 * shape with Q re-read from shared memory whatever the version), for the
 * tests and bench/runner_ops:
 * 1: 4 warps x 16 query rows (64 per block), Q fragments in registers;
 * 2: 4 warps x 2 x 16 rows (128 per block), Q re-read from shared memory;
 * 3: 8 warps x 16 rows (128 per block), Q fragments in registers;
 * 4: as 1 with Q re-read from shared memory and registers capped for 4
 *    blocks per multiprocessor.
 * kvcal_attention_launch uses KVCAL_ATTENTION_DEFAULT_VERSION, the fastest
 * measured (bench/NOTES.md). */
#define KVCAL_ATTENTION_VERSIONS 4
#define KVCAL_ATTENTION_DEFAULT_VERSION 4
kvcal_status kvcal_attention_launch_version(int version, kvcal_bf16 *out,
                                            int64_t out_stride, const kvcal_bf16 *q,
                                            const kvcal_bf16 *k, const kvcal_bf16 *v,
                                            int64_t qkv_stride, int batch, int seq_len,
                                            int n_heads, int n_kv_heads, int head_dim,
                                            float scale, cudaStream_t stream);

/* kvcal_attention_launch within a sliding window (query t reads keys
 * t - window + 1 .. t; 0: every key up to t) and with soft-capped scores
 * (softcap > 0: s becomes softcap * tanh(s / softcap); 0: none), as
 * kvcal_attention_window_ref: head_dim 64, 80, 96, 128 and 256 (aligned) on
 * the tensor cores (version 1's shape, Q re-read from shared memory at 256;
 * key tiles below the window skipped), others on the portable kernel. The runner takes it
 * only where a sample is longer than the window or the model soft-caps. */
kvcal_status kvcal_attention_window_launch(kvcal_bf16 *out, int64_t out_stride,
                                           const kvcal_bf16 *q, const kvcal_bf16 *k,
                                           const kvcal_bf16 *v, int64_t qkv_stride,
                                           int batch, int seq_len, int n_heads,
                                           int n_kv_heads, int head_dim, float scale,
                                           int window, float softcap,
                                           cudaStream_t stream);

/* kvcal_attention_window_launch with attention sinks (kvcal_attention_sinks_ref):
 * sinks (n_heads, bf16) or NULL, query head h's logit added to its
 * softmax's denominator (the running max and sum start at it). The same
 * kernels as kvcal_attention_window_launch. */
kvcal_status kvcal_attention_sinks_launch(kvcal_bf16 *out, int64_t out_stride,
                                          const kvcal_bf16 *q, const kvcal_bf16 *k,
                                          const kvcal_bf16 *v, int64_t qkv_stride,
                                          int batch, int seq_len, int n_heads,
                                          int n_kv_heads, int head_dim, float scale,
                                          int window, float softcap,
                                          const kvcal_bf16 *sinks, cudaStream_t stream);

/* out (batch * seq_len rows of out_stride values, n_heads heads of head_dim)
 * attention without sinks, lse (batch, n_heads, seq_len) the log of each
 * row's softmax denominator (cuDNN's statistics): each row and head scaled
 * by 1 / (1 + exp(sinks[h] - lse)), what adding the sink's logit to that
 * denominator makes of it (kvcal_attention_run_sinks). head_dim and
 * out_stride multiples of 8, out 16-byte aligned. */
kvcal_status kvcal_attention_sinks_rescale_launch(kvcal_bf16 *out, int64_t out_stride,
                                                  const float *lse, const kvcal_bf16 *sinks,
                                                  int batch, int seq_len, int n_heads,
                                                  int head_dim, cudaStream_t stream);

/* --- mixture of experts --------------------------------------------------- */

/* The bounds: kernels/moe_limits.h. */

/* kvcal_moe_route_ref on the device, one warp per token: the softmax (fp32)
 * of logits (tokens, num_experts) bf16, the top_k into experts (tokens,
 * top_k) and weights (tokens, top_k) fp32, renormalized when asked. A token
 * with pos < 0 (padding) gets experts -1 and weights 0. num_experts in
 * 1 .. KVCAL_MOE_MAX_EXPERTS, top_k in 1 .. min(num_experts,
 * KVCAL_MOE_MAX_TOP_K). */
kvcal_status kvcal_moe_route_launch(int32_t *experts, float *weights,
                                    const kvcal_bf16 *logits, const int32_t *pos,
                                    int tokens, int num_experts, int top_k,
                                    int renormalize, cudaStream_t stream);

/* kvcal_moe_route_sigmoid_ref on the device: the top_k of sigmoid(logits) +
 * bias (num_experts, bf16, or NULL), weighted by the sigmoids, renormalized
 * (+1e-20) when asked, times scale; padding as kvcal_moe_route_launch. */
kvcal_status kvcal_moe_route_sigmoid_launch(int32_t *experts, float *weights,
                                            const kvcal_bf16 *logits,
                                            const kvcal_bf16 *bias, const int32_t *pos,
                                            int tokens, int num_experts, int top_k,
                                            int renormalize, float scale,
                                            cudaStream_t stream);

/* Grouped top-k routing (kvcal_moe_route_grouped_ref, its kvcal_moe_route_cfg
 * with a bf16 bias): the two launchers above are its forms of one group. */
typedef struct kvcal_moe_route_params {
    int num_experts, top_k;
    int sigmoid;                        /* 0: softmax scoring */
    /* (num_experts) the choice bias, or NULL: added to the sigmoids, or to
     * softmax's probabilities (ERNIE 4.5's; one group) */
    const kvcal_bf16 *bias;
    int groups, topk_groups, group_max; /* groups <= KVCAL_MOE_MAX_GROUPS */
    int renormalize;
    float scale;
} kvcal_moe_route_params;

kvcal_status kvcal_moe_route_grouped_launch(int32_t *experts, float *weights,
                                            const kvcal_bf16 *logits, const int32_t *pos,
                                            int tokens, const kvcal_moe_route_params *p,
                                            cudaStream_t stream);

/* Where the routed rows of one layer go, device memory the caller owns:
 * assignments = tokens * top_k, capacity the rows of every expert padded to
 * KVCAL_MOE_TILE_ROWS (kvcal_moe_plan_capacity), tiles = capacity /
 * KVCAL_MOE_TILE_ROWS. */
typedef struct kvcal_moe_plan {
    /* (capacity) assignment (token * top_k + j) of each row of the used
     * tiles, -1: padding; the other rows are left as they were */
    int32_t *sorted;
    int32_t *slot_of;     /* (assignments) row of each assignment, -1: padding token */
    int32_t *tile_expert; /* (tiles) expert of each tile, -1: unused */
    int capacity, tiles;
    /* (1) the tiles holding rows: tiles 0 .. used_tiles[0] - 1, those of
     * tile_expert >= 0; NULL: not kept (kvcal_moe_gemm_launch needs none) */
    int32_t *used_tiles;
    int32_t *scratch; /* (kvcal_moe_plan_scratch values) the grouping's */
} kvcal_moe_plan;

/* Rows a plan needs for `assignments` assignments over num_experts experts. */
int kvcal_moe_plan_capacity(int assignments, int num_experts);

/* int32 values of the scratch a plan needs for as many. */
int kvcal_moe_plan_scratch(int assignments, int num_experts);

/* Groups the assignments of experts (assignments) (-1: none) by expert into
 * plan, each expert's rows starting at a tile, and writes the count of
 * tiles holding rows into the plan's used_tiles (when kept); expert_tokens
 * (num_experts, device, or NULL) gets each expert's count added. No host
 * round trip: the grouped GEMMs read the plan on the device. */
kvcal_status kvcal_moe_align_launch(const kvcal_moe_plan *plan, const int32_t *experts,
                                    int assignments, int num_experts,
                                    unsigned long long *expert_tokens,
                                    cudaStream_t stream);

/* The grouped GEMM of one layer's experts: for each row r of the plan with
 * sorted[r] >= 0, out (capacity, n) row r = a_row @ w[e]^T, e the expert of
 * r's tile, w (num_experts, n, k) as checkpoints store each expert's
 * nn.Linear weight; a_row is row sorted[r] / gather of x when gather > 0
 * (the tokens' inputs, x (tokens, k)), else row r of x (capacity, k).
 * fp32 accumulation on the tensor cores, each output rounded to bf16; rows
 * with sorted[r] < 0 are not written. k and n multiples of 8, x and w
 * 16-byte aligned. */
kvcal_status kvcal_moe_gemm_launch(kvcal_bf16 *out, const kvcal_bf16 *x, int gather,
                                   const kvcal_bf16 *w, const kvcal_moe_plan *plan, int k,
                                   int n, cudaStream_t stream);

/* y (capacity, n) row r += bias (num_experts, n) row e, e the expert of r's
 * tile, in fp32 rounded once to bf16, for the rows of the plan that hold an
 * assignment (the others are left as they are): an expert projection's
 * bias (gpt-oss's), after kvcal_moe_gemm_launch. */
kvcal_status kvcal_moe_bias_launch(kvcal_bf16 *y, const kvcal_bf16 *bias,
                                   const kvcal_moe_plan *plan, int n,
                                   cudaStream_t stream);

/* xs (capacity, dim) row r = x (tokens, dim) row sorted[r] / top_k for the
 * rows of the plan's used tiles, zeros for their padding rows; the rows of
 * unused tiles are left as they are. With weights (tokens, top_k), each row
 * times its assignment's weight rounded to bf16, the products rounded once
 * (Llama 4's experts weighted on their input); NULL: copied. dim a multiple
 * of 8, xs and x 16-byte aligned. */
kvcal_status kvcal_moe_gather_launch(kvcal_bf16 *xs, const kvcal_bf16 *x,
                                     const kvcal_moe_plan *plan, int top_k, int dim,
                                     const float *weights, cudaStream_t stream);

/* What kvcal_moe_gemm_sm90_launch does with a row's products. */
typedef enum kvcal_moe_epilogue {
    /* out row = the products rounded to bf16; w (num_experts, n, k) */
    KVCAL_MOE_EPI_STORE = 0,
    /* w (num_experts, 2n, k) each expert's [gate; up] as checkpoints store
     * them: out row = silu(gate) * up rounded as kvcal_swiglu_launch rounds
     * kvcal_moe_gemm_launch's gate/up */
    KVCAL_MOE_EPI_SWIGLU = 1,
    /* w as for SWIGLU: out row = gpt-oss's clamped SwiGLU of gate and up
     * (the args' alpha and limit) rounded as kvcal_swiglu_oai_launch */
    KVCAL_MOE_EPI_SWIGLU_OAI = 2,
} kvcal_moe_epilogue;

/* An epilogue's bias and gpt-oss's clamps. */
typedef struct kvcal_moe_epilogue_args {
    /* (num_experts, w's rows an expert) or NULL: row e added to the products
     * of expert e's rows, each product rounded to bf16 first and the sum
     * rounded (kvcal_moe_bias_launch's arithmetic), before the SwiGLU */
    const kvcal_bf16 *bias;
    float alpha, limit; /* KVCAL_MOE_EPI_SWIGLU_OAI's (limit > 0) */
} kvcal_moe_epilogue_args;

/* The grouped GEMM of one layer's experts on Hopper (sm_90a: TMA, wgmma, a
 * persistent grid walking the plan's used tiles, read on the device from
 * the plan's used_tiles, which it needs): for each used tile, of expert e,
 * out (capacity, n) rows = epilogue(its rows @ w[e]^T). gather 0: the rows
 * are x (capacity, k) in the plan's order (the previous GEMM's out);
 * gather > 0: x (tokens, k) holds the tokens' inputs and plan row r is x
 * row sorted[r] / gather (top-k: the routed assignments), zeros for a
 * padding row (sorted[r] < 0), gathered in the GEMM's loads, as
 * kvcal_moe_gemm_launch's gather. Every row of a used tile is written,
 * padding rows too. fp32 accumulation, each product rounded to
 * bf16, then args' bias (args NULL: none; a SWIGLU_OAI needs args). k and n
 * multiples of 8, out, x and w 16-byte aligned, the bias 4-byte aligned
 * (else KVCAL_ERR_INVALID_ARG); a GPU other than compute capability 9.0
 * with the build's sm_90a code is KVCAL_ERR_UNSUPPORTED
 * (kvcal_moe_gemm_launch runs there). */
kvcal_status kvcal_moe_gemm_sm90_launch(kvcal_bf16 *out, const kvcal_bf16 *x, int gather,
                                        const kvcal_bf16 *w, const kvcal_moe_plan *plan,
                                        int num_experts, int k, int n,
                                        kvcal_moe_epilogue epi,
                                        const kvcal_moe_epilogue_args *args,
                                        cudaStream_t stream);

/* out (tokens, dim) = the weighted sum over j of y (capacity, dim) row
 * slot_of[t * top_k + j] times weights (tokens, top_k; NULL: ones, the
 * weights applied on the experts' input), fp32, rounded once
 * to bf16; plus, when shared (tokens, dim) is non-NULL, sigmoid(x (tokens,
 * dim) . shared_gate (dim)) * shared (the gate's logit and sigmoid rounded
 * to bf16 as a bf16 nn.Linear and F.sigmoid give them), or shared itself
 * where shared_gate is NULL. Padding tokens (pos < 0) get zeros. With
 * accumulate, out += that sum instead (the residual stream), bit for bit
 * the combine followed by kvcal_add_rmsnorm_launch's add, padding tokens
 * left as they are. With norm (and accumulate), norm->out (tokens, dim) =
 * the stream after the add through an RMSNorm of weight norm->w (the next
 * layer's), every row, padding too: bit for bit what
 * kvcal_add_rmsnorm_launch(norm->out, out, NULL, norm->w, tokens, dim,
 * norm->eps) writes after the combine. dim a multiple of 8, out, y, shared
 * and norm's buffers 16-byte aligned. */
typedef struct kvcal_combine_norm {
    kvcal_bf16 *out;     /* (tokens, dim) the normalized rows */
    const kvcal_bf16 *w; /* (dim) the norm's weight */
    float eps;
} kvcal_combine_norm;
kvcal_status kvcal_moe_combine_launch(kvcal_bf16 *out, const kvcal_bf16 *y,
                                      const int32_t *slot_of, const float *weights,
                                      const int32_t *pos, int tokens, int top_k, int dim,
                                      const kvcal_bf16 *shared, const kvcal_bf16 *x,
                                      const kvcal_bf16 *shared_gate, int accumulate,
                                      const kvcal_combine_norm *norm,
                                      cudaStream_t stream);

/* --- Qwen3-Next's and Qwen3.5's linear attention (kernels/cuda/gated_delta.cu) -- */

/* A gated delta-net's sizes and weights (kvcal_gated_delta_dims and
 * kvcal_gated_delta_weights of kernels/cpu/gated_delta.h), the weights bf16
 * on the device: conv (2 nk dk + nv dv, taps), a_log and dt_bias (nv),
 * norm (dv). */
typedef struct kvcal_gated_delta_params {
    int nk, dk, nv, dv, taps;
    float eps;
    const kvcal_bf16 *conv, *a_log, *dt_bias, *norm;
} kvcal_gated_delta_params;

/* Whether kvcal_gated_delta_launch takes key heads of dk and value heads
 * of dv on the current device (past the registers' kernel, the state of
 * one head in shared memory). */
int kvcal_gated_delta_fits(int dk, int dv);

/* The bytes of kvcal_gated_delta_launch's work space for rows (batch T)
 * tokens: fp32 q, k, v, beta and decay of every token (0 for sizes < 1). */
size_t kvcal_gated_delta_work_bytes(const kvcal_gated_delta_params *p, int64_t rows);

/* out (batch T, nv dv) = kvcal_gated_delta_ref of each of the batch's
 * samples, the T rows of sample b from row b T on, from a zero state:
 * qkvz (batch T, 2 nk dk + 2 nv dv), ba (batch T, 2 nv); the recurrence's
 * output rounded to bf16 before the gated norm, as the engines' is. Rows
 * past a sample's end are computed as tokens after it (they change none
 * before). work: kvcal_gated_delta_work_bytes(p, batch T) bytes, 8-byte
 * aligned. */
kvcal_status kvcal_gated_delta_launch(kvcal_bf16 *out, float *work,
                                      const kvcal_bf16 *qkvz, const kvcal_bf16 *ba,
                                      const kvcal_gated_delta_params *p, int batch, int T,
                                      cudaStream_t stream);

/* x (n) *= sigmoid(gate (n)) (kvcal_sigmoid_gate_ref): a gated attention's
 * output. */
kvcal_status kvcal_sigmoid_gate_launch(kvcal_bf16 *x, const kvcal_bf16 *gate, int64_t n,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
