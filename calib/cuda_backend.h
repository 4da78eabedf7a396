/* calib/cuda_backend.h: the cuda backend's state and the device slabs it
 * is carved from, private to the backend's files: calib/backend_cuda.c
 * (the batches, the layer ops, kvcal_cuda_ops), calib/backend_create_cuda.c
 * (its creation: the device plan, the weights' layout, the slab),
 * calib/backend_eval_cuda.c (eval's head and simulated cache, which
 * kvcal_cuda_ops points to) and calib/backend_moe_fp8_cuda.c (the FP8
 * experts). Compiled only in builds with CUDA. */
#ifndef KVCAL_CALIB_CUDA_BACKEND_H
#define KVCAL_CALIB_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <stdio.h>

#include "calib/backend.h"
#include "calib/loader_cuda.h"
#include "core/status.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/eval.h"
#include "kernels/cuda/kv_observe.h"
#include "kernels/cuda/mla.h"
#include "kernels/cuda/ops.h"

#define TRY(call)                                                                        \
    do {                                                                                 \
        if ((st = (call)) != KVCAL_OK)                                                   \
            goto fail;                                                                   \
    } while (0)
#define TRY_CUDA(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            st = kvcal_fail(e_ == cudaErrorMemoryAllocation ? KVCAL_ERR_DEVICE_MEMORY    \
                                                            : KVCAL_ERR_CUDA,            \
                            "cuda runner: %s: %s", #call, cudaGetErrorString(e_));       \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

/* A batch's own activations, kept while its chunk runs layer by layer. */
typedef struct {
    kvcal_bf16 *resid, *delta;    /* (N, D) residual stream, the pending add */
    int32_t *pos;                 /* (N) position, -1 for padding */
    int64_t *row;                 /* (N) row index, -1 for padding (cache slots) */
    float *bmax;                  /* (2, L, HKV) the batch's per-head absmax */
    int32_t *host_ids, *host_pos; /* pinned (N) */
    int64_t *host_row;            /* pinned (N) */
    int64_t *start;               /* (max_batch) b * seq_len */
    const int64_t *names;         /* the batch's sample ids */
    int batch, seq_len;
    int64_t valid; /* tokens */
    /* 1: the op that made the pending delta added it to resid itself
       (fold_residual), so the next add + RMSNorm norms resid alone */
    int delta_added;
    /* 1: the MoE's combine normed resid for the next layer's first op into
       delta (norm_ahead), so that add + RMSNorm does nothing; 2: done,
       delta holds the normalized rows (act's KVCAL_ACT_NORM) until the next
       add + RMSNorm */
    int norm_ahead;
} cuda_slot;

typedef struct {
    kvcal_backend base;
    kvcal_model_t *model;
    int L, D, H, HKV, hd, I, V, qkv_n, rot_dim, interleaved, ctx;
    int mlp_fused; /* gate/up + SwiGLU in one kernel, the weight interleaved */
    /* 0: every block's output goes through delta (KVCAL_RESIDUAL=unfused) */
    int fold_residual;
    /* (L, D) each layer's first add + RMSNorm's weight, which the MoE's
       combine of the layer before applies (norm_ahead), or NULL */
    kvcal_bf16 *norm_ahead_w;
    /* an FP8 gate/up + SwiGLU in one kernel (kvcal_gemm_swiglu_fp8_launch),
     * the weight interleaved; fp8_absmax: each row's absmax of its act */
    int mlp_fp8_fused;
    float *fp8_absmax;
    int w8a16;     /* FP8 weights without FP8 activations (no FP8 tensor cores) */
    kvcal_fp8_gemm_path fp8_path;
    kvcal_fp8_scratch fp8s;      /* the FP8 projections' activations (and fallback) */
    kvcal_weight fp8_ready;      /* the FP8 weight whose activation fp8s holds quantized
                                    already (SwiGLU's epilogue), else KVCAL_W_NONE */
    float eps, attention_factor; /* RMSNorm epsilon; RoPE cos/sin factor (yarn) */
    int max_batch, max_seq_len;
    cudaStream_t stream;
    kvcal_gemm_t *gemm;
    kvcal_attention_t *attn; /* cuDNN's fused attention, or kvcal's kernel */
    kvcal_cuda_layer_layout lay;
    kvcal_cuda_loader_t *loader;
    unsigned char *layer_weights;  /* the layer in use (a loader slot) */
    int weight_slots;              /* layers on the device at once */
    size_t budget;                 /* --max-device-memory, 0: the free memory */
    size_t allocated;              /* device bytes of the slabs below but the slots' */
    void *slab;                    /* every device buffer below */
    unsigned char *weights;        /* (L, lay.bytes) */
    kvcal_bf16 *embed;             /* (V, D) */
    kvcal_bf16 *xn;                /* (N, D) scratch every batch shares: */
    kvcal_bf16 *qkv;               /* (N, qkv_n) */
    kvcal_bf16 *att;               /* (N, H * hd) */
    float *lse; /* (max_batch, H, max_seq_len) the attention's softmax statistics
                   (cuDNN's, with gpt-oss's sinks); NULL without sinks */
    kvcal_bf16 *gu;                /* (N, 2 I); NULL with mlp_fused */
    kvcal_bf16 *act;               /* (N, I) */
    int32_t *ids;                  /* (N) */
    float *inv_freq;               /* (rot_dim / 2) */
    float *inv_freq_sliding;       /* (rot_dim / 2) the sliding layers', or NULL */
    float *inv_freq_zero; /* (rot_dim / 2) zeros: layers without RoPE, the observing
                             pass after norms that follow RoPE; or NULL */
    kvcal_bf16 *norm_ones;         /* (hd) ones: a weightless q/k norm's, or NULL */
    float *absmax[2];              /* (L, HKV, hd) */
    uint64_t *hist[2];             /* (L, HKV, bins) */
    float *q_absmax;               /* (L, H) max |q| per query head */
    float *range;                  /* (2, 2, L, HKV, hd) K's max(x, 0), max(-x, 0),
                                      then V's (kvcal_kv_range) */
    size_t stats_bytes;            /* of absmax[0] .. range */
    float *host_bmax;              /* pinned (2, L, HKV) */
    /* the chunk's batches */
    cuda_slot *slot; /* (nslots) */
    int nslots;
    void *slot_slab, *slot_host; /* their device and pinned memory */
    /* the current slot, and its fields, see cuda_slot */
    cuda_slot *cur;
    kvcal_bf16 *resid, *delta;
    int32_t *pos;
    int64_t *row;
    float *bmax;
    int batch, seq_len, layer;
    int64_t valid;
    const int64_t *names;
    int64_t *default_names;   /* (max_batch) */
    int qkv_heads, qkv_width; /* what the last QKV projection wrote */
    /* a mixture of experts (KVCAL_OP_MOE), NULL / 0 for a dense model */
    int E, K, MI, SI; /* experts, top-k, expert's and shared expert's inter */
    int moe_sm90;     /* the experts' GEMMs on kvcal_moe_gemm_sm90_launch, SwiGLU fused */
    int shared_fused; /* the shared expert's gate/up + SwiGLU in kvcal_gemm_swiglu_launch */
    kvcal_bf16 *router;     /* (N, E) the router's logits */
    int32_t *route_e;       /* (N, K) chosen experts */
    float *route_w;         /* (N, K) their weights */
    kvcal_moe_plan plan;    /* the routed rows grouped by expert */
    kvcal_bf16 *moe_gu;     /* (capacity, 2 MI); NULL with moe_sm90 (but gpt-oss's) */
    kvcal_bf16 *moe_act;    /* (capacity, MI) */
    kvcal_bf16 *moe_y;      /* (capacity, D) the experts' outputs */
    kvcal_bf16 *shared_gu;  /* (N, 2 SI); NULL with shared_fused */
    kvcal_bf16 *shared_act; /* (N, SI) */
    kvcal_bf16 *shared_y;   /* (N, D) */
    /* FP8 experts (calib/backend_moe_fp8_cuda.c; NULL / 0 elsewhere) */
    kvcal_bf16 *moe_wd;   /* the layer's FP8 experts dequantized, gate/up then down */
    kvcal_bf16 *moe_w[2]; /* in it: gate/up (E, 2 MI, D), down (E, D, MI); NULL: bf16 */
    int moe_w_layer;      /* the layer moe_wd holds, -1: none */
    uint8_t *moe_xq;      /* a grouped GEMM's input quantized (NULL: one pass) */
    float *moe_xs;        /* its scales */
    kvcal_bf16 *moe_xd;   /* (N, D) the gate/up's input dequantized */
    unsigned long long *expert_tokens; /* (L, E) in the statistics' device region */
    /* multi-head latent attention (desc->mla; NULL / 0 elsewhere): HKV is 1
     * and hd the entry's size, the attention's heads are decompressed */
    int kvr, rope, nope, vh, qkd; /* kv_lora_rank, qk_rope, qk_nope, v_head, q/k head */
    kvcal_bf16 *qa;               /* (N, q_lora_rank) the query's LoRA */
    kvcal_bf16 *mq;               /* (N, H, qkd) the query */
    kvcal_bf16 *latent;           /* (N, hd) the cached entry: latent, RoPE part */
    kvcal_bf16 *kvb;              /* (N, H, nope + vh) the latent through kv_b_proj;
                                   * where lay.kv_b_v_first, (N, H, vh + qkd):
                                   * each head's V, then its K */
    kvcal_bf16 *mk;               /* (N, H, qkd) the attention's K (from kvb) */
    /* kvcal's kernels' (one head size, where cuDNN does not run the heads as
     * they are): V padded with zeros, the output before V's padding goes */
    kvcal_bf16 *mv, *att_pad; /* (N, H, qkd) each */
    /* gated attention and gated delta-net layers (desc->attn_gate,
     * desc->linear_layers; NULL elsewhere) */
    kvcal_bf16 *gate;     /* (N, H * hd) the attention output's gate */
    kvcal_bf16 *lin_qkvz; /* (N, 2 lin_k + 2 lin_v) the delta-net's q, k, v, z */
    kvcal_bf16 *lin_ba;   /* (N, 2 lin_v_heads) its b and a */
    kvcal_bf16 *lin_out;  /* (N, lin_v) its output */
    float *lin_work;      /* its kernels' work space (kvcal_gated_delta_work_bytes) */
    /* observing */
    kvcal_stats_t *stats;       /* observe_into */
    kvcal_stats_t *device_view; /* host copy of the device statistics */
    /* the head (head_prepare) */
    void *head_slab;
    size_t head_bytes;
    kvcal_bf16 *final_norm;    /* (D) */
    const kvcal_bf16 *lm_head; /* (V, D): own copy or the tied embed */
    kvcal_bf16 *logits;        /* (chunk, V) */
    int32_t *target;           /* (N) */
    float *nll;                /* (N) */
    int64_t *keep;             /* (N) reference row of each row (kvcal_head_ref) */
    float *kld, *top;          /* (N) */
    int chunk;                 /* logits rows per lm_head GEMM */
    /* the baseline's distributions (head_reference) */
    void *ref_slab;
    size_t ref_bytes;
    kvcal_bf16 *ref; /* (ref_rows, V) */
    float *ref_lse;  /* (ref_rows) */
    /* the simulated cache (sim_prepare) */
    void *sim_slab;
    size_t sim_bytes;
    kvcal_bf16 *att0;            /* (N, H * hd) attention on the exact K/V */
    uint8_t *cache[2];           /* (N, HKV, hd) e4m3, one block per token */
    float *cache_scale[2];       /* (N, HKV) */
    float *cache_zero[2];        /* (N, HKV) */
    float *deq[2];               /* (N, HKV, hd) */
    kvcal_eval_layer_sums *sums; /* (L) */
    /* the op profile's marks since the last take: events on the stream,
     * labels */
    cudaEvent_t *mark_ev;
    const char **mark_label;
    int marks, marks_cap;
} cuda_backend;

/* --- FP8 experts (calib/backend_moe_fp8_cuda.c) ----------------------------- */

/* Device bytes of the FP8 experts' scratch at N rows and `capacity` routed
 * rows (0 each without FP8 experts): the dequantized experts (moe_wd), the
 * quantized input (moe_xq) and its scales (moe_xs) where the one-pass
 * kernel does not take a shape, the gate/up's dequantized input (moe_xd). */
void kvcal_cuda_moe_fp8_bytes(const cuda_backend *r, size_t N, size_t capacity,
                              size_t bytes[4]);

/* Dequantizes the FP8 experts of the layer in use into moe_wd (moe_w),
 * unless it holds them already. */
kvcal_status kvcal_cuda_moe_fp8_weights(cuda_backend *r);

/* Whether per-expert weight w's grouped GEMM reads a quantized input. */
int kvcal_cuda_moe_fp8_quantizes(const cuda_backend *r, kvcal_weight w);

/* out (rows, k) = x quantized as the engine quantizes the input of FP8
 * expert weight w (kvcal_cuda_moe_fp8_quantizes) and dequantized into
 * bf16; out may be x. */
kvcal_status kvcal_cuda_moe_fp8_input(cuda_backend *r, kvcal_weight w, kvcal_bf16 *out,
                                      const kvcal_bf16 *x, int rows, int k);

/* The backend's operations (calib/backend_cuda.c). */
extern const kvcal_backend_ops kvcal_cuda_ops;

/* Device and pinned bytes of one batch slot. */
size_t kvcal_cuda_slot_device_bytes(const cuda_backend *r);

static inline cuda_backend *cu(kvcal_backend *be)
{
    return (cuda_backend *)be;
}

/* *delta: the pending delta (the batch's rows, D) for the add to the
 * residual stream, times the model's residual_multiplier (Granite's) in
 * place, rounded to bf16 as the model's product is; NULL where the op that
 * made it added it to the stream already (cuda_slot's delta_added, then
 * cleared). */
static inline kvcal_status kvcal_cuda_take_delta(cuda_backend *r, kvcal_bf16 **delta)
{
    const float m = r->base.desc->residual_scale;
    *delta = r->cur->delta_added ? NULL : r->delta;
    r->cur->delta_added = 0;
    return m == 1.0f || !*delta
               ? KVCAL_OK
               : kvcal_affine_launch(*delta, *delta,
                                     (int64_t)r->batch * r->seq_len * r->D, m, 0.0f,
                                     r->stream);
}

/* The first op of layer l where it is an add + RMSNorm of the delta (a
 * pre-norm layer's input norm), else NULL. */
static inline const kvcal_op *kvcal_cuda_input_norm(const kvcal_model_desc *d, int l)
{
    int n = 0;
    const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n);
    for (int j = 0; j < n; j++)
        if (kvcal_model_op_runs(d, l, &ops[j]))
            return ops[j].kind == KVCAL_OP_ADD_RMSNORM && ops[j].in == KVCAL_ACT_DELTA &&
                           ops[j].out == KVCAL_ACT_NORM && ops[j].w != KVCAL_W_NONE
                       ? &ops[j]
                       : NULL;
    return NULL;
}

static inline kvcal_bf16 *act(cuda_backend *r, kvcal_act a)
{
    switch (a) {
    case KVCAL_ACT_NORM:
        return r->cur && r->cur->norm_ahead == 2 ? r->delta : r->xn;
    case KVCAL_ACT_DELTA:
        return r->delta;
    case KVCAL_ACT_QKV:
        return r->qkv;
    case KVCAL_ACT_ATT:
        return r->att;
    case KVCAL_ACT_MLP:
        return r->act;
    case KVCAL_ACT_Q_A:
        return r->qa;
    case KVCAL_ACT_Q:
        return r->mq;
    case KVCAL_ACT_LATENT:
        return r->latent;
    case KVCAL_ACT_GATE:
        return r->gate;
    case KVCAL_ACT_LIN_QKVZ:
        return r->lin_qkvz;
    case KVCAL_ACT_LIN_BA:
        return r->lin_ba;
    case KVCAL_ACT_LIN_OUT:
        return r->lin_out;
    default:
        return NULL;
    }
}

/* Columns of the attention's output (H heads of the v head size). */
static inline int att_cols(const cuda_backend *r)
{
    return r->H * (r->base.desc->mla ? r->vh : r->hd);
}

// --- device slabs -----------------------------------------------------------------

#define ALIGN 256u

static inline size_t round_up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* cudaMalloc of one of the slabs (`what` it holds); out of memory names the
 * bytes and the fix. */
static inline kvcal_status alloc_slab(void **p, size_t bytes, const char *what)
{
    const cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaSuccess)
        return KVCAL_OK;
    *p = NULL;
    cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
        return kvcal_fail(KVCAL_ERR_DEVICE_MEMORY,
                          "--device cuda: %s need %.2f GiB (%zu bytes), which cudaMalloc "
                          "could not get; use a smaller --batch or --seq-len",
                          what, (double)bytes / 1073741824.0, bytes);
    return kvcal_fail(KVCAL_ERR_CUDA, "cuda runner: cudaMalloc of %zu bytes for %s: %s",
                      bytes, what, cudaGetErrorString(err));
}

/* Hands out ALIGN-aligned pieces of the slab in order. */
static inline void *carve(unsigned char **p, size_t bytes)
{
    void *x = *p;
    *p += round_up(bytes);
    return x;
}

#define DEVICE_MARGIN ((size_t)512 << 20)

/* Device bytes the backend may still take: the device's free memory less a
 * margin, and under --max-device-memory what it leaves. free_b: the free
 * memory to count from. */
static inline size_t room(const cuda_backend *r, size_t free_b)
{
    size_t left = free_b > DEVICE_MARGIN ? free_b - DEVICE_MARGIN : 0;
    if (r->budget) {
        const size_t capped = r->budget > r->allocated ? r->budget - r->allocated : 0;
        left = capped < left ? capped : left;
    }
    return left;
}

/* bytes for a message: "1.25 GiB" from a GiB up, else "3.4 MiB" (buf of
 * at least 32). */
static inline const char *size_text(char *buf, size_t bytes)
{
    if (bytes >= ((size_t)1 << 30))
        snprintf(buf, 32, "%.2f GiB", (double)bytes / 1073741824.0);
    else
        snprintf(buf, 32, "%.1f MiB", (double)bytes / 1048576.0);
    return buf;
}

// --- calib/backend_eval_cuda.c (cuda_ops' head_* and sim_*) ---------------------------

kvcal_status kvcal_cuda_head_prepare(kvcal_backend *be);
void kvcal_cuda_ref_release(cuda_backend *r);
kvcal_status kvcal_cuda_head_reference(kvcal_backend *be, int64_t rows);
kvcal_status kvcal_cuda_head_nll(kvcal_backend *be, const int32_t *target, float *nll,
                                 float *logits, const kvcal_head_ref *ref);
void kvcal_cuda_sim_release(kvcal_backend *be);
kvcal_status kvcal_cuda_sim_prepare(kvcal_backend *be, size_t floats, float **space,
                                    kvcal_kv_io *io);
kvcal_status kvcal_cuda_sim_upload(kvcal_backend *be, float *dst, const float *src,
                                   size_t n);
kvcal_status kvcal_cuda_sim_view(kvcal_backend *be, kvcal_kv_io *io);
kvcal_status kvcal_cuda_sim_roundtrip(kvcal_backend *be, int layer,
                                      const kvcal_kv_qparams *q);
kvcal_status kvcal_cuda_sim_ds_mla(kvcal_backend *be, int layer);
kvcal_status kvcal_cuda_sim_q_roundtrip(kvcal_backend *be, const float *scale);
kvcal_status kvcal_cuda_sim_attention_error(kvcal_backend *be, const kvcal_op *op,
                                            int layer);
kvcal_status kvcal_cuda_sim_collect(kvcal_backend *be, kvcal_eval_layer_sums *sums);

#endif
