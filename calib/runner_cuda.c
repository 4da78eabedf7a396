/* calib/runner_cuda.c: the model runner on a CUDA device (see runner_cuda.h). */
#include "calib/runner_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

kvcal_status kvcal_cuda_runner_check_model(const kvcal_model_desc *d)
{
    if (d->head_dim > 256 || d->head_dim % 2)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "--device cuda: head_dim %d: the CUDA runner supports even head_dim "
            "up to 256; use --device cpu",
            d->head_dim);
    return KVCAL_OK;
}

int kvcal_cuda_mlp_fused_runs(int major, int minor, const char *code)
{
    return major == 9 && minor == 0 && code &&
           (!strcmp(code, "sm_90a") || !strcmp(code, "compute_90a"));
}

kvcal_status kvcal_cuda_mlp_choose(int major, int minor, const char *code, int I, int D,
                                   kvcal_mlp_mode mode, int *fused)
{
    const int runs = kvcal_cuda_mlp_fused_runs(major, minor, code),
              fits = I % 128 == 0 && D % 8 == 0;
    *fused = 0;
    if (mode == KVCAL_MLP_FUSED && !(runs && fits))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "KVCAL_MLP=fused needs a Hopper GPU (compute capability 9.0) running this "
            "build's sm_90a code, intermediate_size a multiple of 128 and hidden_size "
            "of 8 (this GPU: %d.%d, running %s; this model: %d and %d); unset KVCAL_MLP",
            major, minor, code && *code ? code : "no code of this build", I, D);
    *fused = mode != KVCAL_MLP_UNFUSED && runs && fits;
    return KVCAL_OK;
}

#ifdef KVCAL_WITH_CUDA

#include <cuda_runtime_api.h>

#include "calib/runner.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/eval.h"
#include "kernels/cuda/ops.h"

#define ALIGN 256u

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

/* Byte offsets of one layer's tensors inside its region of the weight slab
 * (and of the host staging buffer it is converted into); 0 size = absent. */
enum {
    T_WQKV,
    T_BQKV,
    T_WO,
    T_BO,
    T_WGU,
    T_WDOWN,
    T_ANORM,
    T_FNORM,
    T_QNORM,
    T_KNORM,
    T_COUNT
};

typedef struct {
    size_t off[T_COUNT];
    size_t elems[T_COUNT];
    size_t bytes; /* the whole layer, ALIGN-padded */
} layer_layout;

struct kvcal_cuda_runner {
    int L, D, H, HKV, hd, I, V, qkv_n, rot_dim, interleaved, ctx, window;
    int mlp_fused; /* gate/up + SwiGLU in one kernel, the weight interleaved */
    float eps, attention_factor; /* RMSNorm epsilon; RoPE cos/sin factor (yarn) */
    int max_batch, max_seq_len;
    cudaStream_t stream;
    kvcal_gemm_t *gemm;
    kvcal_attention_t *attn; /* cuDNN's fused attention, or kvcal's kernel */
    layer_layout lay;
    void *slab;                     /* every device buffer below */
    unsigned char *weights;         /* (L, lay.bytes) */
    kvcal_bf16 *embed;              /* (V, D) */
    kvcal_bf16 *resid, *xn, *delta; /* (N, D) */
    kvcal_bf16 *qkv;                /* (N, qkv_n) */
    kvcal_bf16 *att;                /* (N, H * hd) */
    kvcal_bf16 *gu;                 /* (N, 2 I); NULL with mlp_fused */
    kvcal_bf16 *act;                /* (N, I) */
    int32_t *ids, *pos;             /* (N) */
    float *inv_freq;                /* (rot_dim / 2) */
    float *absmax[2];               /* (L, HKV, hd) */
    uint64_t *hist[2];              /* (L, HKV, bins) */
    float *batch_absmax[2];         /* (L, HKV) */
    int32_t *host_ids, *host_pos;   /* pinned (N) */
    float *host_bmax;               /* pinned (2, L, HKV) */
};

static size_t round_up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static void layout_layer(layer_layout *lay, const kvcal_model_desc *d)
{
    const size_t D = (size_t)d->hidden_size, I = (size_t)d->intermediate_size;
    const size_t hd = (size_t)d->head_dim, q = (size_t)d->num_heads * hd;
    const size_t qkv = q + 2 * (size_t)d->num_kv_heads * hd;
    const size_t elems[T_COUNT] = {qkv * D,
                                   d->qkv_bias ? qkv : 0,
                                   D * q,
                                   d->o_bias ? D : 0,
                                   2 * I * D,
                                   D * I,
                                   D,
                                   D,
                                   d->qk_norm ? hd : 0,
                                   d->qk_norm ? hd : 0};
    size_t off = 0;
    for (int i = 0; i < T_COUNT; i++) {
        lay->off[i] = off;
        lay->elems[i] = elems[i];
        off += round_up(elems[i] * sizeof(kvcal_bf16));
    }
    lay->bytes = off;
}

static void to_bf16(kvcal_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = kvcal_bf16_from_float(src[i]);
}

/* Converts layer weights into a staging buffer laid out as lay; with
 * mlp_fused the gate/up weight in kvcal_gemm_swiglu_launch's interleaved
 * order. */
static void stage_layer(unsigned char *stage, const layer_layout *lay,
                        const kvcal_layer_weights *w, const kvcal_model_desc *d,
                        int mlp_fused)
{
    const size_t D = (size_t)d->hidden_size, I = (size_t)d->intermediate_size;
    const size_t hd = (size_t)d->head_dim, q = (size_t)d->num_heads * hd;
    const size_t kv = (size_t)d->num_kv_heads * hd;
    kvcal_bf16 *wqkv = (kvcal_bf16 *)(stage + lay->off[T_WQKV]);
    to_bf16(wqkv, w->wq, q * D);
    to_bf16(wqkv + q * D, w->wk, kv * D);
    to_bf16(wqkv + (q + kv) * D, w->wv, kv * D);
    if (lay->elems[T_BQKV]) {
        kvcal_bf16 *b = (kvcal_bf16 *)(stage + lay->off[T_BQKV]);
        to_bf16(b, w->bq, q);
        to_bf16(b + q, w->bk, kv);
        to_bf16(b + q + kv, w->bv, kv);
    }
    to_bf16((kvcal_bf16 *)(stage + lay->off[T_WO]), w->wo, D * q);
    if (lay->elems[T_BO])
        to_bf16((kvcal_bf16 *)(stage + lay->off[T_BO]), w->bo, D);
    kvcal_bf16 *gu = (kvcal_bf16 *)(stage + lay->off[T_WGU]);
    if (mlp_fused) {
        for (size_t i = 0; i < 2 * I; i++) {
            const size_t src = (size_t)kvcal_gemm_swiglu_source_row((int)i, (int)I);
            to_bf16(gu + i * D, src < I ? w->w_gate + src * D : w->w_up + (src - I) * D,
                    D);
        }
    } else {
        to_bf16(gu, w->w_gate, I * D);
        to_bf16(gu + I * D, w->w_up, I * D);
    }
    to_bf16((kvcal_bf16 *)(stage + lay->off[T_WDOWN]), w->w_down, D * I);
    to_bf16((kvcal_bf16 *)(stage + lay->off[T_ANORM]), w->attn_norm, D);
    to_bf16((kvcal_bf16 *)(stage + lay->off[T_FNORM]), w->ffn_norm, D);
    if (lay->elems[T_QNORM]) {
        to_bf16((kvcal_bf16 *)(stage + lay->off[T_QNORM]), w->q_norm, hd);
        to_bf16((kvcal_bf16 *)(stage + lay->off[T_KNORM]), w->k_norm, hd);
    }
}

static kvcal_bf16 *tensor(const kvcal_cuda_runner_t *r, int layer, int t)
{
    if (!r->lay.elems[t])
        return NULL;
    return (kvcal_bf16 *)(r->weights + (size_t)layer * r->lay.bytes + r->lay.off[t]);
}

/* cudaMalloc of one of the slabs (`what` it holds); out of memory names the
 * bytes and the fix. */
static kvcal_status alloc_slab(void **p, size_t bytes, const char *what)
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
static void *carve(unsigned char **p, size_t bytes)
{
    void *x = *p;
    *p += round_up(bytes);
    return x;
}

/* Uploads every layer through two pinned staging buffers, converting one
 * layer while the previous one is copied; then the embedding table. */
static kvcal_status upload_model(kvcal_cuda_runner_t *r, kvcal_model_t *model)
{
    kvcal_status st = KVCAL_OK;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    unsigned char *stage[2] = {NULL, NULL};
    cudaEvent_t done[2] = {NULL, NULL};
    float *rows = NULL;
    int32_t *ids = NULL;
    const size_t stage_bytes =
        r->lay.bytes > ((size_t)8 << 20) ? r->lay.bytes : (size_t)8 << 20;
    TRY_CUDA(cudaMallocHost((void **)&stage[0], stage_bytes));
    TRY_CUDA(cudaMallocHost((void **)&stage[1], stage_bytes));
    TRY_CUDA(cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming));
    TRY_CUDA(cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming));
    for (int l = 0; l < r->L; l++) {
        kvcal_layer_weights w;
        TRY(kvcal_model_load_layer(model, l, &w));
        TRY_CUDA(cudaEventSynchronize(done[l & 1]));
        stage_layer(stage[l & 1], &r->lay, &w, d, r->mlp_fused);
        TRY_CUDA(cudaMemcpyAsync(r->weights + (size_t)l * r->lay.bytes, stage[l & 1],
                                 r->lay.bytes, cudaMemcpyHostToDevice, r->stream));
        TRY_CUDA(cudaEventRecord(done[l & 1], r->stream));
    }
    const int chunk = (int)(stage_bytes / ((size_t)r->D * sizeof(kvcal_bf16)));
    rows = malloc((size_t)chunk * (size_t)r->D * sizeof *rows);
    ids = malloc((size_t)chunk * sizeof *ids);
    if (!rows || !ids) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "cuda runner: no host memory to stage the embedding");
        goto fail;
    }
    for (int v0 = 0, i = 0; v0 < r->V; v0 += chunk, i++) {
        const int n = r->V - v0 < chunk ? r->V - v0 : chunk;
        for (int j = 0; j < n; j++)
            ids[j] = v0 + j;
        TRY(kvcal_model_embed(model, ids, n, rows));
        TRY_CUDA(cudaEventSynchronize(done[i & 1]));
        to_bf16((kvcal_bf16 *)stage[i & 1], rows, (size_t)n * (size_t)r->D);
        TRY_CUDA(cudaMemcpyAsync(r->embed + (size_t)v0 * r->D, stage[i & 1],
                                 (size_t)n * r->D * sizeof(kvcal_bf16),
                                 cudaMemcpyHostToDevice, r->stream));
        TRY_CUDA(cudaEventRecord(done[i & 1], r->stream));
    }
    TRY_CUDA(cudaMemcpyAsync(r->inv_freq, d->inv_freq,
                             (size_t)(r->rot_dim / 2) * sizeof(float),
                             cudaMemcpyHostToDevice, r->stream));
    TRY_CUDA(cudaStreamSynchronize(r->stream));
fail:
    free(rows);
    free(ids);
    for (int i = 0; i < 2; i++) {
        if (done[i])
            cudaEventDestroy(done[i]);
        cudaFreeHost(stage[i]);
    }
    return st;
}

/* An evaluation's device state (see kvcal_cuda_eval_create). */
struct kvcal_cuda_eval {
    kvcal_cuda_runner_t *r;
    kvcal_cuda_kv_sim sim;
    int chunk;                   /* logits rows per lm_head GEMM */
    void *slab;                  /* every device buffer below */
    kvcal_bf16 *final_norm;      /* (D) */
    const kvcal_bf16 *lm_head;   /* (V, D): own copy or the tied r->embed */
    kvcal_bf16 *logits;          /* (chunk, V) */
    kvcal_bf16 *att0;            /* (N, H * hd) attention on the exact K/V */
    uint8_t *cache[2];           /* (N, HKV, hd) e4m3, one block per token */
    float *cache_scale[2];       /* (N, HKV) scale used per (token, head) */
    float *deq[2];               /* (N, HKV, hd) dequantized */
    float *scales[2];            /* (L, HKV) static scales */
    int64_t *slots;              /* (N) row index, -1 for padding */
    int32_t *target;             /* (N) next token id, -1 where none */
    float *nll;                  /* (N) */
    kvcal_eval_layer_sums *sums; /* (L) */
    kvcal_kv_scaler_t **scalers; /* (L) host array of device scalers */
    int64_t *host_slots;         /* pinned (N); target and nll follow */
    int32_t *host_target;        /* pinned (N) */
    float *host_nll;             /* pinned (N) */
};

/* Causal attention of the fused QKV buffer into out (N, H * hd). */
static kvcal_status attend(kvcal_cuda_runner_t *r, kvcal_bf16 *out, int batch,
                           int seq_len)
{
    const int q_cols = r->H * r->hd;
    return kvcal_attention_run(r->attn, out, q_cols, r->qkv, r->qkv + q_cols,
                               r->qkv + q_cols + r->HKV * r->hd, r->qkv_n, batch, seq_len,
                               r->H, r->HKV, r->hd, 1.0f / sqrtf((float)r->hd), r->stream,
                               NULL);
}

/* The simulated FP8 cache of layer l: attention on the exact K/V into
 * e->att0, then K and V quantized to e4m3 and dequantized, their error
 * folded into the layer's sums, and the round trip written over K and V in
 * the QKV buffer (what the layer's attention then reads). */
static kvcal_status simulate_fp8_kv(kvcal_cuda_runner_t *r, kvcal_cuda_eval_t *e, int l,
                                    int batch, int seq_len)
{
    kvcal_status st = KVCAL_OK;
    const int n = batch * seq_len, kv_cols = r->HKV * r->hd;
    kvcal_bf16 *kv[2] = {r->qkv + r->H * r->hd, r->qkv + r->H * r->hd + kv_cols};
    TRY(attend(r, e->att0, batch, seq_len));
    const kvcal_kv_batch b = {kv[0],    kv[1], KVCAL_DTYPE_BF16, n, r->qkv_n, r->hd,
                              r->qkv_n, r->hd, e->slots};
    const kvcal_kv_cache c = {
        e->cache[0], e->cache[1], e->cache_scale[0], e->cache_scale[1], n, 1, r->HKV,
        r->hd,       0,           KVCAL_CACHE_NHD};
    if (e->sim == KVCAL_CUDA_KV_STATIC)
        TRY(kvcal_kv_quantize_static_launch(
            &b, &c, KVCAL_GRANULARITY_HEAD, e->scales[0] + (size_t)l * r->HKV,
            e->scales[1] + (size_t)l * r->HKV, r->stream));
    else if (e->sim == KVCAL_CUDA_KV_DYNAMIC)
        TRY(kvcal_kv_quantize_dynamic_launch(&b, &c, r->stream));
    else
        TRY(kvcal_kv_scaler_quantize_launch(e->scalers[l], &b, &c, r->stream));
    TRY(kvcal_kv_dequantize_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, NULL, NULL,
                                   e->deq[0], e->deq[1], KVCAL_DTYPE_F32, r->stream));
    for (int i = 0; i < 2; i++)
        TRY(kvcal_error_sums_launch(&e->sums[l].kv[i], kv[i], r->qkv_n, e->deq[i],
                                    kv_cols, KVCAL_DTYPE_F32, e->cache_scale[i], r->hd,
                                    r->pos, n, kv_cols, kv[i], r->stream));
    return KVCAL_OK;
fail:
    return kvcal_fail_context(st, "layer %d: ", l);
}

/* The MLP's gate/up projection and SwiGLU: in one Hopper kernel
 * (kvcal_gemm_swiglu_launch, which also leaves out the (N, 2 I) gate/up
 * buffer) where kvcal_cuda_mlp_choose takes it for this GPU and the code the
 * build holds for it; otherwise, or with KVCAL_MLP=unfused, cuBLAS's GEMM
 * then kvcal_swiglu_launch. KVCAL_MLP=fused insists on the kernel. */
static kvcal_status choose_mlp(kvcal_cuda_runner_t *r)
{
    const char *mlp = getenv("KVCAL_MLP");
    kvcal_mlp_mode mode = KVCAL_MLP_AUTO;
    if (mlp && !strcmp(mlp, "fused"))
        mode = KVCAL_MLP_FUSED;
    else if (mlp && !strcmp(mlp, "unfused"))
        mode = KVCAL_MLP_UNFUSED;
    else if (mlp && *mlp)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "KVCAL_MLP=%s: use fused or unfused (or leave it unset)", mlp);
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
            cudaSuccess)
        major = minor = 0;
    char code[32];
    kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), major, minor, code,
                               sizeof code);
    return kvcal_cuda_mlp_choose(major, minor, code, r->I, r->D, mode, &r->mlp_fused);
}

/* The last layer of a calibration pass: nothing reads its queries, so only
 * the K and V rows of the fused QKV weight are multiplied, into the QKV
 * buffer as (n, 2 HKV hd) rows, then K is normed and rotated and both are
 * observed. Where the K/V rows of the weight (or bias) are not aligned as
 * cuBLASLt's algorithms want (256 bytes), the whole QKV is projected. */
static kvcal_status project_observe_kv(kvcal_cuda_runner_t *r, int l, int n,
                                       const kvcal_rope_cfg *rope,
                                       const kvcal_kv_observer *obs)
{
    kvcal_status st = KVCAL_OK;
    const int q_cols = r->H * r->hd;
    const kvcal_bf16 *w = tensor(r, l, T_WQKV), *b = tensor(r, l, T_BQKV);
    const kvcal_bf16 *kv_w = w + (size_t)q_cols * r->D, *kv_b = b ? b + q_cols : NULL;
    const int kv_only = ((uintptr_t)kv_w | (uintptr_t)kv_b) % 256 == 0;
    const int heads = kv_only ? 0 : r->H, width = (heads + 2 * r->HKV) * r->hd;
    TRY(kvcal_gemm_launch(r->gemm, r->qkv, r->xn, kv_only ? kv_w : w, kv_only ? kv_b : b,
                          n, r->D, width, r->stream));
    return kvcal_rope_observe_launch(r->qkv, width, r->pos, n, heads, r->HKV, r->hd, rope,
                                     obs, r->stream);
fail:
    return st;
}

/* Queues one forward pass over the padded ids and positions in host_ids and
 * host_pos: embedding, then every layer up to the last one's K and V, which
 * the RoPE kernel observes into the device statistics (unless observe is
 * 0). With an evaluation e: every layer, nothing observed, K and V through
 * e's simulated cache; the last layer's output is left in delta. */
static kvcal_status run_layers(kvcal_cuda_runner_t *r, int batch, int seq_len,
                               kvcal_cuda_eval_t *e, int observe)
{
    kvcal_status st = KVCAL_OK;
    const int n = batch * seq_len, q_cols = r->H * r->hd;
    cudaStream_t s = r->stream;
    TRY_CUDA(cudaMemcpyAsync(r->ids, r->host_ids, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    TRY_CUDA(cudaMemcpyAsync(r->pos, r->host_pos, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    TRY(kvcal_embed_launch(r->resid, r->embed, r->ids, n, r->D, s));
    for (int l = 0; l < r->L; l++) {
        const kvcal_rope_cfg rope = {
            r->inv_freq,           r->rot_dim, r->interleaved,     tensor(r, l, T_QNORM),
            tensor(r, l, T_KNORM), r->eps,     r->attention_factor};
        kvcal_kv_observer obs;
        for (int kv = 0; kv < 2; kv++) {
            obs.absmax[kv] = r->absmax[kv] + (size_t)l * r->HKV * r->hd;
            obs.hist[kv] = r->hist[kv] + (size_t)l * r->HKV * KVCAL_HIST_BINS;
            obs.batch_absmax[kv] = r->batch_absmax[kv] + (size_t)l * r->HKV;
        }
        TRY(kvcal_add_rmsnorm_launch(r->xn, r->resid, l ? r->delta : NULL,
                                     tensor(r, l, T_ANORM), n, r->D, r->eps, s));
        if (!e && l == r->L - 1) {
            TRY(project_observe_kv(r, l, n, &rope, observe ? &obs : NULL));
            break;
        }
        TRY(kvcal_gemm_launch(r->gemm, r->qkv, r->xn, tensor(r, l, T_WQKV),
                              tensor(r, l, T_BQKV), n, r->D, r->qkv_n, s));
        TRY(kvcal_rope_observe_launch(r->qkv, r->qkv_n, r->pos, n, r->H, r->HKV, r->hd,
                                      &rope, observe ? &obs : NULL, s));
        const int sim = e && e->sim != KVCAL_CUDA_KV_EXACT;
        if (sim)
            TRY(simulate_fp8_kv(r, e, l, batch, seq_len));
        TRY(attend(r, r->att, batch, seq_len));
        if (sim)
            TRY(kvcal_error_sums_launch(&e->sums[l].att, e->att0, q_cols, r->att, q_cols,
                                        KVCAL_DTYPE_BF16, NULL, 0, r->pos, n, q_cols,
                                        NULL, s));
        TRY(kvcal_gemm_launch(r->gemm, r->delta, r->att, tensor(r, l, T_WO),
                              tensor(r, l, T_BO), n, q_cols, r->D, s));
        TRY(kvcal_add_rmsnorm_launch(r->xn, r->resid, r->delta, tensor(r, l, T_FNORM), n,
                                     r->D, r->eps, s));
        if (r->mlp_fused) {
            TRY(kvcal_gemm_swiglu_launch(r->act, r->xn, tensor(r, l, T_WGU), n, r->D,
                                         r->I, s));
        } else {
            TRY(kvcal_gemm_launch(r->gemm, r->gu, r->xn, tensor(r, l, T_WGU), NULL, n,
                                  r->D, 2 * r->I, s));
            TRY(kvcal_swiglu_launch(r->act, r->gu, n, r->I, s));
        }
        TRY(kvcal_gemm_launch(r->gemm, r->delta, r->act, tensor(r, l, T_WDOWN), NULL, n,
                              r->I, r->D, s));
    }
    return KVCAL_OK;
fail:
    return st;
}

kvcal_status kvcal_cuda_runner_create(kvcal_model_t *model, int max_batch,
                                      int max_seq_len, kvcal_cuda_runner_t **out)
{
    kvcal_status st = KVCAL_OK;
    *out = NULL;
    if (kvcal_cuda_device_count() == 0)
        return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                          "--device cuda: no CUDA device is visible to this process; use "
                          "--device cpu");
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (max_batch <= 0 || max_seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "cuda runner: batch %d x seq_len %d: both must be > 0",
                          max_batch, max_seq_len);
    if ((st = kvcal_cuda_runner_check_model(d)) != KVCAL_OK)
        return st;
    kvcal_cuda_runner_t *r = calloc(1, sizeof *r);
    if (!r)
        return kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: out of host memory");
    r->L = d->num_layers;
    r->D = d->hidden_size;
    r->H = d->num_heads;
    r->HKV = d->num_kv_heads;
    r->hd = d->head_dim;
    r->I = d->intermediate_size;
    r->V = d->vocab_size;
    r->qkv_n = (r->H + 2 * r->HKV) * r->hd;
    r->rot_dim = d->rot_dim;
    r->interleaved = d->rope_interleaved;
    r->attention_factor = d->rope_attention_factor;
    r->ctx = d->max_seq_len;
    r->window = d->sliding_window;
    r->eps = d->norm_eps;
    r->max_batch = max_batch;
    r->max_seq_len = max_seq_len;
    layout_layer(&r->lay, d);
    TRY(choose_mlp(r));

    const size_t N = (size_t)max_batch * (size_t)max_seq_len, e = sizeof(kvcal_bf16);
    const size_t LH = (size_t)r->L * (size_t)r->HKV;
    const size_t weights =
        (size_t)r->L * r->lay.bytes + round_up((size_t)r->V * r->D * e);
    const size_t acts = 3 * round_up(N * r->D * e) + round_up(N * r->qkv_n * e) +
                        round_up(N * (size_t)r->H * r->hd * e) +
                        (r->mlp_fused ? 0 : round_up(N * 2 * r->I * e)) +
                        round_up(N * r->I * e) + 2 * round_up(N * sizeof(int32_t));
    const size_t stats = 2 * (round_up(LH * r->hd * sizeof(float)) +
                              round_up(LH * KVCAL_HIST_BINS * sizeof(uint64_t)) +
                              round_up(LH * sizeof(float))) +
                         round_up((size_t)(r->rot_dim / 2) * sizeof(float));
    const size_t workspace = (size_t)32 << 20;
    const size_t need = weights + acts + stats;
    size_t free_b = 0, total_b = 0;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need + workspace > free_b) {
        st = kvcal_fail(
            KVCAL_ERR_DEVICE_MEMORY,
            "--device cuda: needs %.2f GiB (weights %.2f GiB, activations %.2f GiB "
            "for %d x %d tokens) but the device has %.2f GiB free; use a smaller "
            "--batch or --seq-len",
            (double)(need + workspace) / 1073741824.0, (double)weights / 1073741824.0,
            (double)acts / 1073741824.0, max_batch, max_seq_len,
            (double)free_b / 1073741824.0);
        goto fail;
    }
    TRY_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    TRY(kvcal_gemm_create(workspace, &r->gemm));
    TRY(kvcal_attention_create(&r->attn));
    TRY(alloc_slab(&r->slab, need, "the model and its activations"));
    TRY_CUDA(cudaMallocHost((void **)&r->host_ids, N * sizeof(int32_t)));
    TRY_CUDA(cudaMallocHost((void **)&r->host_pos, N * sizeof(int32_t)));
    TRY_CUDA(cudaMallocHost((void **)&r->host_bmax, 2 * LH * sizeof(float)));
    unsigned char *p = r->slab;
    r->weights = carve(&p, (size_t)r->L * r->lay.bytes);
    r->embed = carve(&p, (size_t)r->V * r->D * e);
    r->resid = carve(&p, N * r->D * e);
    r->xn = carve(&p, N * r->D * e);
    r->delta = carve(&p, N * r->D * e);
    r->qkv = carve(&p, N * r->qkv_n * e);
    r->att = carve(&p, N * (size_t)r->H * r->hd * e);
    r->gu = r->mlp_fused ? NULL : carve(&p, N * 2 * r->I * e);
    r->act = carve(&p, N * r->I * e);
    r->ids = carve(&p, N * sizeof(int32_t));
    r->pos = carve(&p, N * sizeof(int32_t));
    for (int kv = 0; kv < 2; kv++) {
        r->absmax[kv] = carve(&p, LH * r->hd * sizeof(float));
        r->hist[kv] = carve(&p, LH * KVCAL_HIST_BINS * sizeof(uint64_t));
        r->batch_absmax[kv] = carve(&p, LH * sizeof(float));
    }
    r->inv_freq = carve(&p, (size_t)(r->rot_dim / 2) * sizeof(float));
    TRY_CUDA(cudaMemsetAsync(r->absmax[0], 0, stats, r->stream));
    TRY(upload_model(r, model));
    // one pass at the largest shape: module loading and GEMM algorithm choice
    // happen here, not in the first batch; what it observed is cleared
    for (size_t i = 0; i < N; i++) {
        r->host_ids[i] = 0;
        r->host_pos[i] = (int32_t)(i % (size_t)max_seq_len);
    }
    TRY(run_layers(r, max_batch, max_seq_len, NULL, 1));
    TRY_CUDA(cudaMemsetAsync(
        r->absmax[0], 0,
        (size_t)((unsigned char *)r->inv_freq - (unsigned char *)r->absmax[0]),
        r->stream));
    TRY_CUDA(cudaStreamSynchronize(r->stream));
    *out = r;
    return KVCAL_OK;
fail:
    kvcal_cuda_runner_destroy(r);
    return st;
}

void kvcal_cuda_runner_destroy(kvcal_cuda_runner_t *r)
{
    if (!r)
        return;
    if (r->stream)
        cudaStreamSynchronize(r->stream);
    kvcal_gemm_destroy(r->gemm);
    kvcal_attention_destroy(r->attn);
    cudaFree(r->slab);
    cudaFreeHost(r->host_ids);
    cudaFreeHost(r->host_pos);
    cudaFreeHost(r->host_bmax);
    if (r->stream)
        cudaStreamDestroy(r->stream);
    free(r);
}

/* Checks the batch and writes its padded ids and positions (-1 = padding). */
static kvcal_status pack_batch(kvcal_cuda_runner_t *r, const int32_t *ids,
                               const int32_t *lengths, int batch, int seq_len,
                               const int64_t *sample_ids, int64_t *valid)
{
    if (batch <= 0 || seq_len <= 0 || batch > r->max_batch || seq_len > r->max_seq_len)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "cuda runner: batch %d x %d tokens: the runner was made for up to "
            "%d x %d",
            batch, seq_len, r->max_batch, r->max_seq_len);
    *valid = 0;
    for (int b = 0; b < batch; b++) {
        const long long name = sample_ids ? (long long)sample_ids[b] : b;
        kvcal_status st = kvcal_runner_check_sample("cuda runner", name, lengths[b],
                                                    seq_len, r->ctx, r->window);
        if (st)
            return st;
        for (int t = 0; t < seq_len; t++) {
            const int64_t i = (int64_t)b * seq_len + t;
            const int id = ids[i];
            if (t < lengths[b] && (id < 0 || id >= r->V))
                return kvcal_fail(
                    KVCAL_ERR_INVALID_ARG,
                    "sample %lld token %d: id %d is outside the vocabulary of "
                    "%d",
                    name, t, id, r->V);
            r->host_ids[i] = t < lengths[b] ? id : -1;
            r->host_pos[i] = t < lengths[b] ? t : -1;
        }
        *valid += lengths[b];
    }
    return KVCAL_OK;
}

kvcal_status kvcal_cuda_runner_forward(kvcal_cuda_runner_t *r, const int32_t *ids,
                                       const int32_t *lengths, int batch, int seq_len,
                                       const int64_t *sample_ids, kvcal_stats_t *stats)
{
    kvcal_status st = KVCAL_OK;
    int64_t valid = 0;
    if (!r || !ids || !lengths)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda runner: NULL argument");
    if (stats && (stats->num_layers != r->L || stats->num_kv_heads != r->HKV ||
                  stats->head_dim != r->hd))
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "cuda runner: statistics of %d layers x %d kv heads x %d channels "
            "for a model of %d x %d x %d",
            stats->num_layers, stats->num_kv_heads, stats->head_dim, r->L, r->HKV, r->hd);
    TRY(pack_batch(r, ids, lengths, batch, seq_len, sample_ids, &valid));
    const size_t LH = (size_t)r->L * r->HKV;
    cudaStream_t s = r->stream;
    TRY(run_layers(r, batch, seq_len, NULL, stats != NULL));
    if (!stats) {
        TRY_CUDA(cudaStreamSynchronize(s));
        return KVCAL_OK;
    }
    for (int kv = 0; kv < 2; kv++) {
        TRY_CUDA(cudaMemcpyAsync(r->host_bmax + kv * LH, r->batch_absmax[kv],
                                 LH * sizeof(float), cudaMemcpyDeviceToHost, s));
        TRY_CUDA(cudaMemsetAsync(r->batch_absmax[kv], 0, LH * sizeof(float), s));
    }
    TRY_CUDA(cudaStreamSynchronize(s));
    for (int kv = 0; kv < 2; kv++)
        for (size_t i = 0; i < LH; i++) {
            const float m = r->host_bmax[kv * LH + i];
            if (!isfinite(m)) {
                st = kvcal_fail(
                    KVCAL_ERR_NONFINITE,
                    "layer %d %c kv head %d: %s in the batch of samples %lld..%lld "
                    "(--device cpu names the token)",
                    (int)(i / r->HKV), kv ? 'V' : 'K', (int)(i % r->HKV),
                    isnan(m) ? "NaN" : "Inf", sample_ids ? (long long)sample_ids[0] : 0LL,
                    sample_ids ? (long long)sample_ids[batch - 1] : (long long)batch - 1);
                goto fail;
            }
            float *dst = &stats->batch_absmax[kv][i];
            *dst = m > *dst ? m : *dst;
        }
    for (int l = 0; l < r->L; l++)
        stats->tokens[l] += valid;
    return KVCAL_OK;
fail:
    return st;
}

kvcal_status kvcal_cuda_runner_collect(kvcal_cuda_runner_t *r, kvcal_stats_t *stats)
{
    kvcal_status st = KVCAL_OK;
    if (!r || !stats)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda runner: NULL argument");
    if (stats->num_layers != r->L || stats->num_kv_heads != r->HKV ||
        stats->head_dim != r->hd || stats->num_bins != KVCAL_HIST_BINS)
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "cuda runner: statistics of %d layers x %d kv heads x %d channels "
            "for a model of %d x %d x %d",
            stats->num_layers, stats->num_kv_heads, stats->head_dim, r->L, r->HKV, r->hd);
    const size_t n_am = (size_t)r->L * r->HKV * r->hd;
    const size_t n_h = (size_t)r->L * r->HKV * KVCAL_HIST_BINS;
    float *am = malloc(n_am * sizeof *am);
    uint64_t *h = malloc(n_h * sizeof *h);
    if (!am || !h) {
        st =
            kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: no host memory for the statistics");
        goto fail;
    }
    for (int kv = 0; kv < 2; kv++) {
        TRY_CUDA(cudaMemcpyAsync(am, r->absmax[kv], n_am * sizeof *am,
                                 cudaMemcpyDeviceToHost, r->stream));
        TRY_CUDA(cudaMemcpyAsync(h, r->hist[kv], n_h * sizeof *h, cudaMemcpyDeviceToHost,
                                 r->stream));
        TRY_CUDA(cudaMemsetAsync(r->absmax[kv], 0, n_am * sizeof *am, r->stream));
        TRY_CUDA(cudaMemsetAsync(r->hist[kv], 0, n_h * sizeof *h, r->stream));
        TRY_CUDA(cudaStreamSynchronize(r->stream));
        for (size_t i = 0; i < n_am; i++)
            stats->absmax[kv][i] =
                am[i] > stats->absmax[kv][i] ? am[i] : stats->absmax[kv][i];
        for (size_t i = 0; i < n_h; i++)
            stats->hist[kv][i] += h[i];
    }
fail:
    free(am);
    free(h);
    return st;
}

// --- evaluation ----------------------------------------------------------------

#define LOGITS_BYTES ((size_t)64 << 20)

/* Converts n fp32 host values to bf16 into device memory dst, through a
 * bounded host buffer. */
static kvcal_status upload_bf16(kvcal_bf16 *dst, const float *src, size_t n)
{
    kvcal_status st = KVCAL_OK;
    const size_t step = (size_t)4 << 20;
    kvcal_bf16 *buf = malloc((n < step ? n : step) * sizeof *buf);
    if (!buf)
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "cuda runner: no host memory to stage weights");
    for (size_t i = 0; i < n; i += step) {
        const size_t m = n - i < step ? n - i : step;
        to_bf16(buf, src + i, m);
        TRY_CUDA(cudaMemcpy(dst + i, buf, m * sizeof *buf, cudaMemcpyHostToDevice));
    }
fail:
    free(buf);
    return st;
}

kvcal_status kvcal_cuda_eval_create(kvcal_cuda_runner_t *r, kvcal_model_t *model,
                                    kvcal_cuda_kv_sim sim, const float *k_scale,
                                    const float *v_scale, kvcal_cuda_eval_t **out)
{
    kvcal_status st = KVCAL_OK;
    *out = NULL;
    if (!r || !model || sim < KVCAL_CUDA_KV_EXACT || sim > KVCAL_CUDA_KV_FIRST_BATCH)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "cuda eval: NULL runner or model, or an unknown mode %d",
                          (int)sim);
    if (sim == KVCAL_CUDA_KV_STATIC ? !(k_scale && v_scale) : k_scale || v_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "cuda eval: mode %d, k_scale %s, v_scale %s: the static mode "
                          "takes both, the other modes neither",
                          (int)sim, k_scale ? "set" : "NULL", v_scale ? "set" : "NULL");
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (d->num_layers != r->L || d->hidden_size != r->D || d->vocab_size != r->V)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "cuda eval: the model is not the one the runner was made from");
    for (int i = 0; sim == KVCAL_CUDA_KV_STATIC && i < r->L * r->HKV; i++)
        if (!(isfinite(k_scale[i]) && k_scale[i] > 0.0f && isfinite(v_scale[i]) &&
              v_scale[i] > 0.0f))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "cuda eval: layer %d kv head %d: scales K %g, V %g: static "
                              "scales must be finite and > 0",
                              i / r->HKV, i % r->HKV, (double)k_scale[i],
                              (double)v_scale[i]);
    const float *norm = NULL, *cls = NULL;
    if ((st = kvcal_model_load_head(model, &norm, &cls)))
        return st;
    kvcal_cuda_eval_t *e = calloc(1, sizeof *e);
    if (!e)
        return kvcal_fail(KVCAL_ERR_NOMEM, "cuda eval: out of host memory");
    e->r = r;
    e->sim = sim;
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    const size_t LH = (size_t)r->L * r->HKV, KV = N * r->HKV * r->hd;
    const size_t rows = LOGITS_BYTES / ((size_t)r->V * sizeof(kvcal_bf16));
    e->chunk = (int)(rows < 1 ? 1 : rows > N ? N : rows);
    const int cache = sim != KVCAL_CUDA_KV_EXACT;
    const size_t bytes[] = {(size_t)r->D * sizeof(kvcal_bf16),
                            d->tied_embeddings ? 0
                                               : (size_t)r->V * r->D * sizeof(kvcal_bf16),
                            (size_t)e->chunk * r->V * sizeof(kvcal_bf16),
                            cache ? N * (size_t)r->H * r->hd * sizeof(kvcal_bf16) : 0,
                            cache ? KV : 0,
                            cache ? KV : 0,
                            cache ? N * r->HKV * sizeof(float) : 0,
                            cache ? N * r->HKV * sizeof(float) : 0,
                            cache ? KV * sizeof(float) : 0,
                            cache ? KV * sizeof(float) : 0,
                            sim == KVCAL_CUDA_KV_STATIC ? LH * sizeof(float) : 0,
                            sim == KVCAL_CUDA_KV_STATIC ? LH * sizeof(float) : 0,
                            N * sizeof(int64_t),
                            N * sizeof(int32_t),
                            N * sizeof(float),
                            (size_t)r->L * sizeof(kvcal_eval_layer_sums)};
    enum { NBUF = sizeof bytes / sizeof bytes[0] };
    size_t need = 0;
    for (int i = 0; i < NBUF; i++)
        need += round_up(bytes[i]);
    size_t free_b = 0, total_b = 0;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need > free_b) {
        st = kvcal_fail(KVCAL_ERR_DEVICE_MEMORY,
                        "--device cuda: eval needs %.2f GiB beyond the model and its "
                        "activations but the device has %.2f GiB free; use a smaller "
                        "--batch or --seq-len",
                        (double)need / 1073741824.0, (double)free_b / 1073741824.0);
        goto fail;
    }
    TRY(alloc_slab(&e->slab, need, "the evaluation's buffers"));
    unsigned char *p = e->slab;
    void *buf[NBUF];
    for (int i = 0; i < NBUF; i++)
        buf[i] = bytes[i] ? carve(&p, bytes[i]) : NULL;
    e->final_norm = buf[0];
    e->lm_head = d->tied_embeddings ? r->embed : buf[1];
    e->logits = buf[2];
    e->att0 = buf[3];
    e->cache[0] = buf[4], e->cache[1] = buf[5];
    e->cache_scale[0] = buf[6], e->cache_scale[1] = buf[7];
    e->deq[0] = buf[8], e->deq[1] = buf[9];
    e->scales[0] = buf[10], e->scales[1] = buf[11];
    e->slots = buf[12];
    e->target = buf[13];
    e->nll = buf[14];
    e->sums = buf[15];
    TRY_CUDA(cudaMallocHost((void **)&e->host_slots,
                            N * (sizeof(int64_t) + sizeof(int32_t) + sizeof(float))));
    e->host_target = (int32_t *)(e->host_slots + N);
    e->host_nll = (float *)(e->host_target + N);
    TRY_CUDA(cudaMemset(e->sums, 0, bytes[15]));
    TRY(upload_bf16(e->final_norm, norm, (size_t)r->D));
    if (!d->tied_embeddings)
        TRY(upload_bf16(buf[1], cls, (size_t)r->V * r->D));
    if (sim == KVCAL_CUDA_KV_STATIC) {
        TRY_CUDA(cudaMemcpy(e->scales[0], k_scale, LH * sizeof(float),
                            cudaMemcpyHostToDevice));
        TRY_CUDA(cudaMemcpy(e->scales[1], v_scale, LH * sizeof(float),
                            cudaMemcpyHostToDevice));
    }
    if (sim == KVCAL_CUDA_KV_FIRST_BATCH) {
        if (!(e->scalers = calloc((size_t)r->L, sizeof *e->scalers))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "cuda eval: out of host memory");
            goto fail;
        }
        for (int l = 0; l < r->L; l++)
            TRY(kvcal_kv_scaler_create(r->HKV, KVCAL_SCALER_FIRST_BATCH, 0.0f, 1,
                                       &e->scalers[l]));
    }
    // the memset and copies above ran on the default stream, which r's
    // non-blocking stream does not wait for
    TRY_CUDA(cudaDeviceSynchronize());
    *out = e;
    return KVCAL_OK;
fail:
    kvcal_cuda_eval_destroy(e);
    return st;
}

void kvcal_cuda_eval_destroy(kvcal_cuda_eval_t *e)
{
    if (!e)
        return;
    cudaStreamSynchronize(e->r->stream);
    if (e->scalers)
        for (int l = 0; l < e->r->L; l++)
            kvcal_kv_scaler_destroy(e->scalers[l]);
    free(e->scalers);
    cudaFree(e->slab);
    cudaFreeHost(e->host_slots);
    free(e);
}

kvcal_status kvcal_cuda_eval_forward(kvcal_cuda_eval_t *e, const int32_t *ids,
                                     const int32_t *lengths, int batch, int seq_len,
                                     const int64_t *sample_ids, double *nll,
                                     long long *count)
{
    kvcal_status st = KVCAL_OK;
    int64_t valid = 0;
    if (!e || !ids || !lengths || !nll || !count)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda eval: NULL argument");
    kvcal_cuda_runner_t *r = e->r;
    cudaStream_t s = r->stream;
    TRY(pack_batch(r, ids, lengths, batch, seq_len, sample_ids, &valid));
    const int n = batch * seq_len;
    for (int i = 0; i < n; i++) {
        const int t = i % seq_len, len = lengths[i / seq_len];
        e->host_slots[i] = t < len ? i : -1;
        e->host_target[i] = t + 1 < len ? ids[i + 1] : -1;
    }
    TRY_CUDA(cudaMemcpyAsync(e->slots, e->host_slots, (size_t)n * sizeof(int64_t),
                             cudaMemcpyHostToDevice, s));
    TRY_CUDA(cudaMemcpyAsync(e->target, e->host_target, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    TRY(run_layers(r, batch, seq_len, e, 0));
    TRY(kvcal_add_rmsnorm_launch(r->xn, r->resid, r->delta, e->final_norm, n, r->D,
                                 r->eps, s));
    for (int r0 = 0; r0 < n; r0 += e->chunk) {
        const int rows = n - r0 < e->chunk ? n - r0 : e->chunk;
        TRY(kvcal_gemm_launch(r->gemm, e->logits, r->xn + (size_t)r0 * r->D, e->lm_head,
                              NULL, rows, r->D, r->V, s));
        TRY(kvcal_token_nll_launch(e->nll + r0, e->logits, e->target + r0, rows, r->V,
                                   s));
    }
    TRY_CUDA(cudaMemcpyAsync(e->host_nll, e->nll, (size_t)n * sizeof(float),
                             cudaMemcpyDeviceToHost, s));
    TRY_CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        if (e->host_target[i] >= 0) {
            *nll += e->host_nll[i];
            (*count)++;
        }
    return KVCAL_OK;
fail:
    return st;
}

kvcal_status kvcal_cuda_eval_collect(kvcal_cuda_eval_t *e, kvcal_eval_layer_sums *sums)
{
    kvcal_status st = KVCAL_OK;
    if (!e || !sums)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda eval: NULL argument");
    const int L = e->r->L;
    const size_t bytes = (size_t)L * sizeof *sums;
    kvcal_eval_layer_sums *h = malloc(bytes);
    if (!h)
        return kvcal_fail(KVCAL_ERR_NOMEM, "cuda eval: out of host memory");
    TRY_CUDA(cudaMemcpyAsync(h, e->sums, bytes, cudaMemcpyDeviceToHost, e->r->stream));
    TRY_CUDA(cudaMemsetAsync(e->sums, 0, bytes, e->r->stream));
    TRY_CUDA(cudaStreamSynchronize(e->r->stream));
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 3; i++) {
            kvcal_error_sums *dst = i < 2 ? &sums[l].kv[i] : &sums[l].att;
            const kvcal_error_sums *src = i < 2 ? &h[l].kv[i] : &h[l].att;
            dst->x2 += src->x2;
            dst->e2 += src->e2;
            dst->clipped += src->clipped;
            dst->n += src->n;
        }
fail:
    free(h);
    return st;
}

kvcal_status kvcal_cuda_runner_plan_device(int device, kvcal_cuda_device_plan *plan)
{
    kvcal_status st = KVCAL_OK;
    kvcal_attention_t *attn = NULL;
    struct cudaDeviceProp prop;
    int previous = 0;
    memset(plan, 0, sizeof *plan);
    if (device < 0 || device >= kvcal_cuda_device_count())
        return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                          "CUDA device %d: no such device (%d visible)", device,
                          kvcal_cuda_device_count());
    TRY_CUDA(cudaGetDevice(&previous));
    TRY_CUDA(cudaGetDeviceProperties(&prop, device));
    snprintf(plan->name, sizeof plan->name, "%s", prop.name);
    plan->major = prop.major;
    plan->minor = prop.minor;
    plan->code_kind =
        kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), prop.major, prop.minor,
                                   plan->code, sizeof plan->code);
    plan->mlp_fused = kvcal_cuda_mlp_fused_runs(prop.major, prop.minor, plan->code);
    TRY_CUDA(cudaSetDevice(device));
    st = kvcal_attention_create(&attn);
    if (st == KVCAL_OK) {
        plan->cudnn_version = kvcal_attention_cudnn_version(attn);
        snprintf(plan->attention_note, sizeof plan->attention_note, "%s",
                 kvcal_attention_note(attn));
    }
    kvcal_attention_destroy(attn);
    cudaSetDevice(previous);
    return st;
fail:
    return st;
}

#else

kvcal_status kvcal_cuda_runner_create(kvcal_model_t *model, int max_batch,
                                      int max_seq_len, kvcal_cuda_runner_t **out)
{
    (void)model;
    (void)max_batch;
    (void)max_seq_len;
    *out = NULL;
    return kvcal_fail(
        KVCAL_ERR_NO_DEVICE,
        "--device cuda: this kvcal was built without CUDA (rebuild where nvcc "
        "is installed); use --device cpu");
}

void kvcal_cuda_runner_destroy(kvcal_cuda_runner_t *r)
{
    (void)r;
}

kvcal_status kvcal_cuda_runner_forward(kvcal_cuda_runner_t *r, const int32_t *ids,
                                       const int32_t *lengths, int batch, int seq_len,
                                       const int64_t *sample_ids, kvcal_stats_t *stats)
{
    (void)r, (void)ids, (void)lengths, (void)batch, (void)seq_len, (void)sample_ids,
        (void)stats;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA");
}

kvcal_status kvcal_cuda_runner_collect(kvcal_cuda_runner_t *r, kvcal_stats_t *stats)
{
    (void)r, (void)stats;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA");
}

kvcal_status kvcal_cuda_eval_create(kvcal_cuda_runner_t *r, kvcal_model_t *model,
                                    kvcal_cuda_kv_sim sim, const float *k_scale,
                                    const float *v_scale, kvcal_cuda_eval_t **out)
{
    (void)r, (void)model, (void)sim, (void)k_scale, (void)v_scale;
    *out = NULL;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA");
}

void kvcal_cuda_eval_destroy(kvcal_cuda_eval_t *e)
{
    (void)e;
}

kvcal_status kvcal_cuda_eval_forward(kvcal_cuda_eval_t *e, const int32_t *ids,
                                     const int32_t *lengths, int batch, int seq_len,
                                     const int64_t *sample_ids, double *nll,
                                     long long *count)
{
    (void)e, (void)ids, (void)lengths, (void)batch, (void)seq_len, (void)sample_ids,
        (void)nll, (void)count;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA");
}

kvcal_status kvcal_cuda_eval_collect(kvcal_cuda_eval_t *e, kvcal_eval_layer_sums *sums)
{
    (void)e, (void)sums;
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "--device cuda: this kvcal was built without CUDA");
}

kvcal_status kvcal_cuda_runner_plan_device(int device, kvcal_cuda_device_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                      "CUDA device %d: this kvcal was built without CUDA", device);
}

#endif
