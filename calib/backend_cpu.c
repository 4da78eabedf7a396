/* calib/backend_cpu.c: the cpu backend: fp32 on the CPU reference ops
 * (kernels/cpu), tokens packed (sample b's rows follow sample b-1's, no
 * padding computed), weights converted one layer at a time by the model,
 * once for every chunk of batches the executor runs through a layer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/backend.h"
#include "core/status.h"
#include "kernels/cpu/eval_ref.h"
#include "kernels/cpu/fp8_ref.h"
#include "kernels/cpu/gated_delta.h"
#include "kernels/cpu/ops.h"

/* A batch's own activations, kept while its chunk runs layer by layer. */
typedef struct {
    float *x;               // (N, hidden) residual stream
    float *delta;           // (N, hidden) the pending residual add
    int32_t *pos;           // (N)
    int64_t *start;         /* (max_batch) */
    float *bmax;            /* (2, layers, kv_heads) the batch's per-head absmax */
    const int32_t *lengths; /* the batch's, borrowed */
    const int64_t *names;   /* the batch's, borrowed or default_names */
    int batch;
    int64_t n; /* rows of the batch */
    void *mem;
} cpu_slot;

/* Activations the slots of a chunk may hold together (the first slot is
 * always made). */
#define SLOTS_BYTES ((size_t)2 << 30)

typedef struct {
    kvcal_backend base;
    kvcal_model_t *model;
    int64_t max_tokens;
    int max_batch;
    kvcal_layer_weights w; /* the layer in use */
    int layer;
    cpu_slot *slot; /* (nslots) */
    int nslots;
    /* the current slot's, see cpu_slot */
    float *x, *delta;
    int32_t *pos;
    int64_t *start;
    const int32_t *lengths;
    const int64_t *names;
    int batch;
    int64_t n;
    float *bmax;
    /* scratch every batch shares */
    float *norm; // (N, hidden)
    float *q;    // (N, heads, head_dim): the attention's, kvcal_model_attention_dims
    float *k;    // (N, kv_heads, head_dim)
    float *v;    // (N, kv_heads, v_head_dim)
    float *att;  // (N, heads, v_head_dim)
    float *gate; // (N, inter) gate, then the MLP's activation; inter the largest
    float *up;   // (N, inter)  of the MLP's, an expert's and the shared expert's
    /* the mixture of experts' (NULL for a dense model) */
    float *logits;    // (N, experts) the router's
    float *route_w;   // (N, top_k) weights of the chosen experts
    int32_t *route_e; // (N, top_k) the chosen experts
    int32_t *rows;    // (N) tokens routed to one expert
    float *rows_w;    // (N) their weights
    float *xs;        // (N, hidden) their inputs
    float *ys;        // (N, hidden) the expert's outputs
    /* multi-head latent attention's (NULL elsewhere) */
    float *qa;     // (N, q_lora_rank) the query's LoRA
    float *latent; // (N, kv_lora_rank + qk_rope) the cached entry
    float *lat;    // (N, kv_lora_rank) its latent, contiguous for kv_b_proj
    float *kvb;    // (N, heads, qk_nope + v_head) the latent through kv_b_proj
    /* a hybrid model's (NULL elsewhere) */
    float *attn_gate; // (N, q) the attention output's gate
    float *lin_qkvz;  // (N, 2 lin_k + 2 lin_v) a gated delta-net's q, k, v, z
    float *lin_ba;    // (N, 2 lin_v_heads) its b and a
    float *lin_out;   // (N, lin_v) its output
    float *lin_space; // kvcal_gated_delta_scratch of the longest sample
    /* (N, the widest FP8 weight's in) an FP8 weight's input as the engine
     * quantizes it; NULL without FP8 activations */
    float *xq;
    void *slab;
    int64_t *default_names; /* (max_batch) 0 .. batch-1 */
    kvcal_stats_t *stats;   /* observe_into */
    /* the simulated cache (sim_prepare) */
    void *sim_slab;
    uint8_t *cache[2];           /* (N, kv_heads, head_dim) e4m3 */
    float *cache_scale[2];       /* (N, kv_heads) */
    float *cache_zero[2];        /* (N, kv_heads) */
    float *deq[2];               /* (N, kv_heads, head_dim) */
    float *att0;                 /* (N, heads, head_dim) on the exact K/V */
    int64_t *slots;              /* (N) 0 .. N-1 */
    kvcal_eval_layer_sums *sums; /* (layers) */
    float *space;                /* the simulation's own floats */
    float *head_logits;          /* (N, vocab), head_prepare */
    float *ref;                  /* (ref_rows, vocab) the kept distributions */
    float *ref_lse;              /* (ref_rows) */
    int64_t ref_rows;
    /* the op profile's marks since the last take: host clock, label */
    double *mark_ms;
    const char **mark_label;
    int marks, marks_cap;
} cpu_backend;

static cpu_backend *cpu(kvcal_backend *be)
{
    return (cpu_backend *)be;
}

static float *act(cpu_backend *c, kvcal_act a)
{
    switch (a) {
    case KVCAL_ACT_NORM:
        return c->norm;
    case KVCAL_ACT_DELTA:
        return c->delta;
    case KVCAL_ACT_ATT:
        return c->att;
    case KVCAL_ACT_MLP:
        return c->gate;
    case KVCAL_ACT_Q_A:
        return c->qa;
    case KVCAL_ACT_Q:
        return c->q;
    case KVCAL_ACT_LATENT:
        return c->latent;
    case KVCAL_ACT_GATE:
        return c->attn_gate;
    case KVCAL_ACT_LIN_QKVZ:
        return c->lin_qkvz;
    case KVCAL_ACT_LIN_BA:
        return c->lin_ba;
    case KVCAL_ACT_LIN_OUT:
        return c->lin_out;
    default:
        return NULL;
    }
}

/* What the cache holds: K and V (an MLA layer's one entry for both). */
static void cached_kv(const cpu_backend *c, float **k, float **v)
{
    *k = c->base.desc->mla ? c->latent : c->k;
    *v = c->base.desc->mla ? c->latent : c->v;
}

static const float *weight(const cpu_backend *c, kvcal_weight w)
{
    return w == KVCAL_W_NONE ? NULL : c->w.w[w];
}

// --- a batch ------------------------------------------------------------------

static size_t slot_bytes(const cpu_backend *c)
{
    const kvcal_model_desc *d = c->base.desc;
    const size_t N = (size_t)c->max_tokens, lh = (size_t)d->num_layers * d->num_kv_heads;
    return 2 * N * d->hidden_size * sizeof(float) + N * sizeof(int32_t) +
           (size_t)c->max_batch * sizeof(int64_t) + 2 * lh * sizeof(float);
}

static void free_slots(cpu_backend *c)
{
    for (int i = 0; i < c->nslots; i++)
        free(c->slot[i].mem);
    free(c->slot);
    c->slot = NULL;
    c->nslots = 0;
}

static kvcal_status max_slots(kvcal_backend *be, int want, int *n)
{
    const size_t fit = SLOTS_BYTES / slot_bytes(cpu(be));
    *n = want < 1 ? 1 : (size_t)want > fit ? (fit < 1 ? 1 : (int)fit) : want;
    return KVCAL_OK;
}

static kvcal_status slots(kvcal_backend *be, int n)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const size_t N = (size_t)c->max_tokens, lh = (size_t)d->num_layers * d->num_kv_heads;
    free_slots(c);
    if (n == 0)
        return KVCAL_OK;
    if (!(c->slot = calloc((size_t)n, sizeof *c->slot)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "runner: out of memory");
    c->nslots = n;
    for (int i = 0; i < n; i++) {
        cpu_slot *s = &c->slot[i];
        /* 8-byte members first */
        unsigned char *p = s->mem = calloc(1, slot_bytes(c));
        if (!p) {
            free_slots(c);
            return kvcal_fail(KVCAL_ERR_NOMEM,
                              "runner: cannot allocate %.0f MB of activations for %d "
                              "batches; use a smaller --batch or --seq-len",
                              (double)slot_bytes(c) * n / 1048576.0, n);
        }
        s->start = (int64_t *)p, p += (size_t)c->max_batch * sizeof(int64_t);
        s->x = (float *)p, p += N * d->hidden_size * sizeof(float);
        s->delta = (float *)p, p += N * d->hidden_size * sizeof(float);
        s->bmax = (float *)p, p += 2 * lh * sizeof(float);
        s->pos = (int32_t *)p;
    }
    return KVCAL_OK;
}

static kvcal_status select_batch(kvcal_backend *be, int slot)
{
    cpu_backend *c = cpu(be);
    if (slot < 0 || slot >= c->nslots)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: slot %d of %d", slot,
                          c->nslots);
    const cpu_slot *s = &c->slot[slot];
    c->x = s->x, c->delta = s->delta, c->pos = s->pos, c->start = s->start;
    c->lengths = s->lengths, c->names = s->names, c->batch = s->batch, c->n = s->n;
    c->bmax = s->bmax;
    return KVCAL_OK;
}

static kvcal_status begin_batch(kvcal_backend *be, int slot, const kvcal_batch *b,
                                kvcal_rows *rows)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    if (b->batch <= 0 || b->seq_len <= 0 || b->batch > c->max_batch)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: batch of %d x %d samples",
                          b->batch, b->seq_len);
    kvcal_status st = select_batch(be, slot);
    if (st)
        return st;
    int64_t n = 0;
    c->names = b->sample_ids ? b->sample_ids : c->default_names;
    for (int i = 0; i < b->batch; i++) {
        st = kvcal_backend_check_sample("runner", (long long)c->names[i], b->lengths[i],
                                        b->seq_len, d->max_seq_len, d);
        if (st)
            return st;
        c->start[i] = n;
        n += b->lengths[i];
    }
    if (n > c->max_tokens)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "runner: batch of %lld tokens exceeds the runner's %lld",
                          (long long)n, (long long)c->max_tokens);
    for (int i = 0; i < b->batch; i++) {
        const int32_t *row = b->ids + (int64_t)i * b->seq_len;
        float *x = c->x + c->start[i] * d->hidden_size;
        st = kvcal_model_embed(c->model, row, b->lengths[i], x);
        if (st)
            return kvcal_fail_context(st, "sample %lld: ", (long long)c->names[i]);
        for (int64_t j = 0;
             d->embed_scale != 1.0f && j < (int64_t)b->lengths[i] * d->hidden_size; j++)
            x[j] *= d->embed_scale;
        for (int t = 0; t < b->lengths[i]; t++)
            c->pos[c->start[i] + t] = t;
    }
    cpu_slot *sl = &c->slot[slot];
    sl->lengths = c->lengths = b->lengths;
    sl->names = c->names;
    sl->batch = c->batch = b->batch;
    sl->n = c->n = n;
    *rows = (kvcal_rows){n, c->start, b->lengths, c->names, b->batch};
    return KVCAL_OK;
}

static kvcal_status use_layer(kvcal_backend *be, int layer)
{
    cpu_backend *c = cpu(be);
    c->layer = layer;
    return kvcal_model_load_layer(c->model, layer, &c->w);
}

/* The residual stream += delta (n rows), the block's output scaled first
 * where the model scales it (Granite's residual_multiplier). */
static void add_delta(cpu_backend *c, float *delta)
{
    const kvcal_model_desc *d = c->base.desc;
    const int64_t n = c->n * d->hidden_size;
    for (int64_t i = 0; d->residual_scale != 1.0f && i < n; i++)
        delta[i] *= d->residual_scale;
    kvcal_add_ref(c->x, delta, n);
}

static kvcal_status add_rmsnorm(kvcal_backend *be, const kvcal_op *op, int first)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    if (!first)
        add_delta(c, act(c, op->in));
    if (op->w == KVCAL_W_NONE) /* a post-norm layer's input: the stream itself */
        memcpy(act(c, op->out), c->x, sizeof(float) * (size_t)(c->n * d->hidden_size));
    else
        kvcal_rmsnorm_ref(act(c, op->out), c->x, weight(c, op->w), (int)c->n,
                          d->hidden_size, d->norm_eps);
    return KVCAL_OK;
}

/* The input x (n, cols) of weight w as its GEMM multiplies it: x itself,
 * or, for an FP8 weight with quantized activations, x quantized and
 * dequantized as the engine does (into c->xq). */
static const float *gemm_input(cpu_backend *c, kvcal_weight w, const float *x, int64_t n,
                               int cols)
{
    const kvcal_fp8_linear *f = &c->base.desc->fp8[w];
    if (f->w == KVCAL_FP8W_NONE || f->a == KVCAL_FP8A_NONE)
        return x;
    kvcal_fp8_fake_quant_ref(c->xq, x, n, cols, f->a, f->group, c->w.input_scale[w]);
    return c->xq;
}

static kvcal_status linear(kvcal_backend *be, const kvcal_op *op, int need_q)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const float *w = weight(c, op->w), *b = weight(c, op->b);
    long long rows, cols;
    kvcal_model_weight_shape(d, op->w, &rows, &cols);
    const float *x = gemm_input(c, op->w, act(c, op->in), c->n, (int)cols);
    if (op->out != KVCAL_ACT_QKV) {
        kvcal_matmul_ref(act(c, op->out), x, w, b, (int)c->n, (int)cols, (int)rows);
        return KVCAL_OK;
    }
    /* q, k and v into their own buffers, from the row blocks of [Wq; Wk; Wv] */
    const int64_t Q = (int64_t)d->num_heads * d->head_dim;
    const int64_t KV = (int64_t)d->num_kv_heads * d->head_dim;
    if (need_q)
        kvcal_matmul_ref(c->q, x, w, b, (int)c->n, (int)cols, (int)Q);
    kvcal_matmul_ref(c->k, x, w + Q * cols, b ? b + Q : NULL, (int)c->n, (int)cols,
                     (int)KV);
    kvcal_matmul_ref(c->v, x, w + (Q + KV) * cols, b ? b + Q + KV : NULL, (int)c->n,
                     (int)cols, (int)KV);
    return KVCAL_OK;
}

/* The norm (when present: per head, or over all heads at once), RoPE and
 * the weightless norm after it (Llama 4's) of q or k of layer l, in place;
 * a layer without RoPE (Llama 4's and EXAONE 4's NoPE layers) neither
 * rotates nor takes the weightless norm, its queries (is_q) scaled by the
 * model's temperature instead. */
static void norm_rope(const kvcal_model_desc *d, int l, float *x, const float *norm,
                      int heads, const int32_t *pos, int64_t n, int is_q)
{
    if (norm && d->qk_norm_whole)
        kvcal_rmsnorm_ref(x, x, norm, (int)n, heads * d->head_dim, d->norm_eps);
    else if (norm && !d->qk_norm_after_rope)
        kvcal_rmsnorm_ref(x, x, norm, (int)n * heads, d->head_dim, d->norm_eps);
    if (!kvcal_model_layer_rope(d, l)) {
        if (is_q && d->attn_temp_scale != 0.0f)
            kvcal_query_temperature_ref(x, pos, n, heads * d->head_dim,
                                        d->attn_temp_scale, d->attn_temp_floor);
        return;
    }
    kvcal_rope_scaled_ref(x, pos, kvcal_model_layer_inv_freq(d, l), (int)n, heads,
                          d->head_dim, d->rot_dim, d->rope_interleaved,
                          kvcal_model_layer_rope_factor(d, l));
    if (d->qk_l2_norm || (norm && d->qk_norm_after_rope)) /* Llama 4's, Hunyuan's */
        kvcal_rmsnorm_ref(x, x, d->qk_l2_norm ? NULL : norm, (int)n * heads, d->head_dim,
                          d->norm_eps);
}

/* Folds K and V (and Q, when the statistics observe it) of every sample
 * into the statistics of `layer`. */
static kvcal_status observe(cpu_backend *c, int layer)
{
    const kvcal_model_desc *d = c->base.desc;
    const int64_t row = (int64_t)d->num_kv_heads * d->head_dim;
    const int64_t q_row = (int64_t)d->num_heads * d->head_dim;
    for (int b = 0; c->stats->q_absmax && !d->mla && b < c->batch; b++) {
        kvcal_kv_block blk =
            kvcal_kv_block_dense(c->q + c->start[b] * q_row, 1, c->lengths[b],
                                 d->num_heads, d->head_dim, NULL, &c->names[b]);
        kvcal_status st = kvcal_stats_observe_q_ref(c->stats, layer, &blk);
        if (st)
            return st;
    }
    float *cached[2];
    cached_kv(c, &cached[0], &cached[1]);
    for (int b = 0; b < c->batch; b++)
        for (int which = KVCAL_K; which <= KVCAL_V; which++) {
            const float *x = cached[which] + c->start[b] * row;
            kvcal_kv_block blk = kvcal_kv_block_dense(
                x, 1, c->lengths[b], d->num_kv_heads, d->head_dim, NULL, &c->names[b]);
            kvcal_status st = kvcal_stats_observe_ref(c->stats, layer, which, &blk);
            if (st)
                return st;
        }
    /* the batch's own absmax of the layer, into its slot */
    const size_t H = (size_t)d->num_kv_heads, lh = (size_t)d->num_layers * H;
    for (int kv = 0; kv < 2; kv++) {
        float *cur = c->stats->batch_absmax[kv] + (size_t)layer * H;
        memcpy(c->bmax + kv * lh + (size_t)layer * H, cur, H * sizeof(float));
        memset(cur, 0, H * sizeof(float));
    }
    return KVCAL_OK;
}

static kvcal_status qk_norm_rope(kvcal_backend *be, const kvcal_op *op, int need_q,
                                 int observe_layer)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    if (need_q)
        norm_rope(d, c->layer, c->q, weight(c, op->w), d->num_heads, c->pos, c->n, 1);
    norm_rope(d, c->layer, c->k, weight(c, op->b), d->num_kv_heads, c->pos, c->n, 0);
    return observe_layer >= 0 && c->stats ? observe(c, observe_layer) : KVCAL_OK;
}

/* Causal attention of each sample's q, k, v into out (rows, heads,
 * head_dim), with op's sinks where it has them; in a chunked layer (Llama
 * 4's) each chunk of a sample attends as a sequence of its own. */
static void attend(cpu_backend *c, const kvcal_op *op, float *out)
{
    const kvcal_model_desc *d = c->base.desc;
    const int H = d->num_heads, chunk = kvcal_model_layer_chunk(d, c->layer);
    int HKV, hd, vd;
    kvcal_model_attention_dims(d, &HKV, &hd, &vd);
    for (int b = 0; b < c->batch; b++)
        for (int at = 0; at < c->lengths[b]; at += chunk ? chunk : c->lengths[b]) {
            const int64_t s = c->start[b] + at;
            const int len =
                chunk && c->lengths[b] - at > chunk ? chunk : c->lengths[b] - at;
            if (op->w != KVCAL_W_NONE) /* sinks (gpt-oss): head_dim == v_dim */
                kvcal_attention_sinks_ref(
                    out + s * H * hd, c->q + s * H * hd, c->k + s * HKV * hd,
                    c->v + s * HKV * hd, len, H, HKV, hd, d->attn_scale,
                    d->layer_window[c->layer], d->attn_softcap, weight(c, op->w));
            else
                kvcal_attention_vdim_ref(out + s * H * vd, c->q + s * H * hd,
                                         c->k + s * HKV * hd, c->v + s * HKV * vd, len, H,
                                         HKV, hd, vd, d->attn_scale,
                                         d->layer_window[c->layer], d->attn_softcap);
        }
}

static kvcal_status attention(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    attend(c, op, act(c, op->out));
    return KVCAL_OK;
}

/* over the weight's length: hidden, or the query's LoRA rank (MLA) */
static kvcal_status rmsnorm(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    long long dim, cols;
    kvcal_model_weight_shape(d, op->w, &dim, &cols);
    kvcal_rmsnorm_ref(act(c, op->out), act(c, op->in), weight(c, op->w), (int)c->n,
                      (int)dim, d->norm_eps);
    return KVCAL_OK;
}

static kvcal_status geglu(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int D = d->hidden_size, I = d->intermediate_size;
    const float *w = weight(c, op->w), *x = gemm_input(c, op->w, act(c, op->in), c->n, D);
    kvcal_matmul_ref(c->gate, x, w, NULL, (int)c->n, D, I);
    kvcal_matmul_ref(c->up, x, w + (int64_t)I * D, NULL, (int)c->n, D, I);
    kvcal_geglu_ref(act(c, op->out), c->gate, c->up, c->n * I);
    return KVCAL_OK;
}

static kvcal_status swiglu(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int D = d->hidden_size, I = d->intermediate_size;
    const float *w = weight(c, op->w), *x = gemm_input(c, op->w, act(c, op->in), c->n, D);
    kvcal_matmul_ref(c->gate, x, w, NULL, (int)c->n, D, I);
    kvcal_matmul_ref(c->up, x, w + (int64_t)I * D, NULL, (int)c->n, D, I);
    kvcal_swiglu_ref(act(c, op->out), c->gate, c->up, c->n * I);
    return KVCAL_OK;
}

/* out (n, D) = act(x Wgate^T + bgate, x Wup^T + bup) Wdown^T + bdown of n
 * rows x (n, D), w_gu [Wgate; Wup] (2 I, D), b_gu [bgate; bup] (2 I) or
 * NULL, w_down (D, I), b_down (D) or NULL, act the model's SwiGLU (clamped
 * where it has a limit): one expert, or the shared one; the GEMMs' inputs
 * quantized as the FP8 weights gu and down ask (gemm_input). */
static void mlp(cpu_backend *c, float *out, const float *x, int64_t n, kvcal_weight gu,
                const float *w_gu, const float *b_gu, kvcal_weight down,
                const float *w_down, const float *b_down, int I)
{
    const kvcal_model_desc *d = c->base.desc;
    const int D = d->hidden_size;
    x = gemm_input(c, gu, x, n, D);
    kvcal_matmul_ref(c->gate, x, w_gu, b_gu, (int)n, D, I);
    kvcal_matmul_ref(c->up, x, w_gu + (int64_t)I * D, b_gu ? b_gu + I : NULL, (int)n, D,
                     I);
    if (d->swiglu_limit > 0.0f)
        kvcal_swiglu_oai_ref(c->gate, c->gate, c->up, n * I, d->swiglu_alpha,
                             d->swiglu_limit);
    else
        kvcal_swiglu_ref(c->gate, c->gate, c->up, n * I);
    kvcal_matmul_ref(out, gemm_input(c, down, c->gate, n, I), w_down, b_down, (int)n, I,
                     D);
}

static kvcal_status moe(kvcal_backend *be, const kvcal_op *op, int observe_layer,
                        int route_only)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int D = d->hidden_size, E = d->num_experts, K = d->experts_per_tok;
    const int I = d->moe_intermediate_size, S = d->shared_intermediate_size;
    const int64_t n = c->n;
    const float *x = act(c, op->in);
    float *out = act(c, op->out);
    /* the router's bias: in the logits for softmax routing (gpt-oss), in the
     * choice for sigmoid routing and ERNIE's softmax */
    const int choice_bias = d->moe_sigmoid || d->moe_softmax_bias;
    kvcal_matmul_ref(c->logits, x, weight(c, op->w),
                     choice_bias ? NULL : weight(c, op->b), (int)n, D, E);
    const kvcal_moe_route_cfg route = {E,
                                       K,
                                       d->moe_sigmoid,
                                       choice_bias ? weight(c, op->b) : NULL,
                                       d->moe_groups,
                                       d->moe_topk_groups,
                                       d->moe_group_max,
                                       d->norm_topk_prob,
                                       d->routed_scale};
    kvcal_moe_route_grouped_ref(c->route_e, c->route_w, c->logits, n, &route);
    int64_t *counts = observe_layer >= 0 && c->stats && c->stats->num_experts == E
                          ? c->stats->expert_tokens + (int64_t)observe_layer * E
                          : NULL;
    if (route_only) {
        for (int64_t i = 0; counts && i < n * K; i++)
            counts[c->route_e[i]]++;
        return KVCAL_OK;
    }
    memset(out, 0, sizeof(float) * (size_t)(n * D));
    const float *gu = weight(c, KVCAL_W_EXPERT_GATE_UP),
                *down = weight(c, KVCAL_W_EXPERT_DOWN);
    const float *b_gu = weight(c, KVCAL_W_EXPERT_GATE_UP_BIAS),
                *b_down = weight(c, KVCAL_W_EXPERT_DOWN_BIAS);
    /* expert by expert, in order (transformers' sum order) */
    for (int e = 0; e < E; e++) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; t++)
            for (int j = 0; j < K; j++)
                if (c->route_e[t * K + j] == e) {
                    c->rows[m] = (int32_t)t;
                    c->rows_w[m] = c->route_w[t * K + j];
                    memcpy(c->xs + m * D, x + t * D, sizeof(float) * (size_t)D);
                    /* Llama 4's: the weight on the expert's input */
                    for (int i = 0; d->moe_input_weighted && i < D; i++)
                        c->xs[m * D + i] *= c->rows_w[m];
                    if (d->moe_input_weighted)
                        c->rows_w[m] = 1.0f;
                    m++;
                }
        if (counts)
            counts[e] += m;
        if (!m)
            continue;
        mlp(c, c->ys, c->xs, m, KVCAL_W_EXPERT_GATE_UP, gu + (int64_t)e * 2 * I * D,
            b_gu ? b_gu + (int64_t)e * 2 * I : NULL, KVCAL_W_EXPERT_DOWN,
            down + (int64_t)e * D * I, b_down ? b_down + (int64_t)e * D : NULL, I);
        for (int64_t r = 0; r < m; r++)
            for (int i = 0; i < D; i++)
                out[(int64_t)c->rows[r] * D + i] += c->rows_w[r] * c->ys[r * D + i];
    }
    if (!S)
        return KVCAL_OK;
    const float *gate = weight(c, KVCAL_W_SHARED_GATE); /* NULL: no gate */
    mlp(c, c->ys, x, n, KVCAL_W_SHARED_GATE_UP, weight(c, KVCAL_W_SHARED_GATE_UP), NULL,
        KVCAL_W_SHARED_DOWN, weight(c, KVCAL_W_SHARED_DOWN), NULL, S);
    if (gate)
        kvcal_matmul_ref(c->rows_w, x, gate, NULL, (int)n, D, 1);
    for (int64_t t = 0; t < n; t++) {
        const float g = gate ? kvcal_sigmoid_ref(c->rows_w[t]) : 1.0f;
        for (int i = 0; i < D; i++)
            out[t * D + i] += g * c->ys[t * D + i];
    }
    return KVCAL_OK;
}

// --- multi-head latent attention --------------------------------------------------

static kvcal_status mla_latent(kvcal_backend *be, const kvcal_op *op, int need_q,
                               int observe_layer)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int R = d->qk_rope_head_dim, qk = d->qk_nope_head_dim + R;
    kvcal_mla_latent_ref(act(c, op->out), d->head_dim, need_q ? c->q : NULL,
                         (int64_t)d->num_heads * qk, c->pos, (int)c->n, d->num_heads, qk,
                         d->kv_lora_rank, R, weight(c, op->w), d->norm_eps,
                         kvcal_model_layer_inv_freq(d, c->layer),
                         d->rope_attention_factor, NULL);
    return observe_layer >= 0 && c->stats ? observe(c, observe_layer) : KVCAL_OK;
}

/* K and V of every head from the latent entry (what the cache gives back):
 * kv_b_proj on the latent as a linear layer (an FP8 one quantizes it as
 * vLLM's MLA prefill does, kv_b_proj(kv_c_normed)). */
static void expand(cpu_backend *c)
{
    const kvcal_model_desc *d = c->base.desc;
    const int L = d->kv_lora_rank, H = d->num_heads, nope = d->qk_nope_head_dim;
    for (int64_t t = 0; t < c->n; t++)
        memcpy(c->lat + t * L, c->latent + t * d->head_dim, sizeof(float) * (size_t)L);
    kvcal_matmul_ref(c->kvb, gemm_input(c, KVCAL_W_KV_B, c->lat, c->n, L),
                     weight(c, KVCAL_W_KV_B), NULL, (int)c->n, L,
                     H * (nope + d->v_head_dim));
    kvcal_mla_expand_ref(c->k, c->v, d->v_head_dim, c->kvb, c->latent, d->head_dim,
                         (int)c->n, H, nope, d->v_head_dim, L, d->qk_rope_head_dim);
}

static kvcal_status mla_expand(kvcal_backend *be, const kvcal_op *op)
{
    (void)op; /* its weight is KVCAL_W_KV_B */
    expand(cpu(be));
    return KVCAL_OK;
}

static kvcal_status sigmoid_gate(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    kvcal_sigmoid_gate_ref(act(c, op->out), act(c, op->in),
                           c->n * kvcal_model_dim(be->desc, KVCAL_DIM_Q));
    return KVCAL_OK;
}

/* The gated delta-net of each sample, from a zero state. */
static kvcal_status gated_delta(kvcal_backend *be, const kvcal_op *op)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const kvcal_gated_delta_dims dims = {d->lin_k_heads, d->lin_k_head_dim,
                                         d->lin_v_heads, d->lin_v_head_dim,
                                         d->lin_conv,    d->norm_eps};
    const kvcal_gated_delta_weights w = {weight(c, op->w), weight(c, KVCAL_W_LIN_A_LOG),
                                         weight(c, KVCAL_W_LIN_DT_BIAS),
                                         weight(c, KVCAL_W_LIN_NORM)};
    const int64_t in = kvcal_model_dim(d, KVCAL_DIM_LIN_QKVZ),
                  out = kvcal_model_dim(d, KVCAL_DIM_LIN_V), ba = 2LL * d->lin_v_heads;
    for (int b = 0; b < c->batch; b++) {
        const int64_t s = c->start[b];
        kvcal_gated_delta_ref(act(c, op->out) + s * out, act(c, op->in) + s * in,
                              c->lin_ba + s * ba, c->lengths[b], &dims, &w, c->lin_space);
    }
    return KVCAL_OK;
}

// --- observing ------------------------------------------------------------------

static kvcal_status observe_into(kvcal_backend *be, kvcal_stats_t *stats)
{
    cpu(be)->stats = stats;
    return KVCAL_OK;
}

static kvcal_status nothing(kvcal_backend *be)
{
    (void)be;
    return KVCAL_OK;
}

static kvcal_status batch_absmax(kvcal_backend *be, int slot, float *k, float *v)
{
    cpu_backend *c = cpu(be);
    const size_t lh = (size_t)be->desc->num_layers * be->desc->num_kv_heads;
    if (slot < 0 || slot >= c->nslots)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: slot %d of %d", slot,
                          c->nslots);
    float *b = c->slot[slot].bmax;
    memcpy(k, b, lh * sizeof(float));
    memcpy(v, b + lh, lh * sizeof(float));
    memset(b, 0, 2 * lh * sizeof(float));
    return KVCAL_OK;
}

static kvcal_status read_qkv(kvcal_backend *be, const float **q, const float **k,
                             const float **v)
{
    float *ck, *cv;
    cached_kv(cpu(be), &ck, &cv);
    *q = cpu(be)->q;
    *k = ck;
    *v = cv;
    return KVCAL_OK;
}

// --- the head -------------------------------------------------------------------

static kvcal_status head_prepare(kvcal_backend *be)
{
    cpu_backend *c = cpu(be);
    const float *norm, *cls;
    const double bytes = (double)c->max_tokens * be->desc->vocab_size * sizeof(float);
    if (!c->head_logits &&
        !(c->head_logits = bytes < 1e15 ? malloc((size_t)bytes) : NULL))
        return kvcal_fail(
            KVCAL_ERR_NOMEM,
            "eval: cannot allocate %.0f MB of logits; use a smaller --batch",
            bytes / 1048576.0);
    return kvcal_model_load_head(c->model, &norm, &cls);
}

static kvcal_status head_reference(kvcal_backend *be, int64_t rows)
{
    cpu_backend *c = cpu(be);
    free(c->ref);
    free(c->ref_lse);
    c->ref = c->ref_lse = NULL;
    c->ref_rows = 0;
    if (rows <= 0)
        return KVCAL_OK;
    const double bytes = (double)rows * be->desc->vocab_size * sizeof(float);
    c->ref = bytes < 1e15 ? malloc((size_t)bytes) : NULL;
    c->ref_lse = malloc((size_t)rows * sizeof *c->ref_lse);
    if (!c->ref || !c->ref_lse) {
        head_reference(be, 0);
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "eval: cannot allocate %.0f MB for the baseline's next-token "
                          "distributions of %lld tokens; use fewer --num-samples or a "
                          "shorter --seq-len",
                          bytes / 1048576.0, (long long)rows);
    }
    c->ref_rows = rows;
    return KVCAL_OK;
}

static kvcal_status head_nll(kvcal_backend *be, const int32_t *target, float *nll,
                             float *logits, const kvcal_head_ref *ref)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int D = d->hidden_size;
    const float *norm, *cls;
    kvcal_status st = kvcal_model_load_head(c->model, &norm, &cls);
    if (st)
        return st;
    float *out = logits ? logits : c->head_logits;
    add_delta(c, c->delta);
    kvcal_rmsnorm_ref(c->norm, c->x, norm, (int)c->n, D, d->norm_eps);
    kvcal_matmul_ref(out, c->norm, cls, NULL, (int)c->n, D, d->vocab_size);
    for (int64_t i = 0; d->logit_divisor != 1.0f && i < c->n * d->vocab_size; i++)
        out[i] /= d->logit_divisor;
    for (int64_t i = 0; d->logit_softcap > 0.0f && i < c->n * d->vocab_size; i++)
        out[i] = d->logit_softcap * tanhf(out[i] / d->logit_softcap);
    kvcal_token_nll_ref(nll, out, target, c->n, d->vocab_size);
    if (ref && ref->keep)
        kvcal_token_keep_ref(c->ref, c->ref_lse, out, ref->row, c->n, d->vocab_size);
    else if (ref)
        kvcal_token_kld_ref(ref->kld, ref->top, out, c->ref, c->ref_lse, ref->row, c->n,
                            d->vocab_size);
    return KVCAL_OK;
}

// --- the simulated cache ----------------------------------------------------------

static void sim_release(kvcal_backend *be)
{
    cpu_backend *c = cpu(be);
    free(c->sim_slab);
    c->sim_slab = NULL;
}

static kvcal_status sim_prepare(kvcal_backend *be, size_t floats, float **space,
                                kvcal_kv_io *io)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const size_t N = (size_t)c->max_tokens, KV = N * d->num_kv_heads * d->head_dim;
    int akv, aqk, av;
    kvcal_model_attention_dims(d, &akv, &aqk, &av);
    const size_t att = N * (size_t)d->num_heads * av;
    const size_t bytes =
        2 * KV + 4 * N * d->num_kv_heads * sizeof(float) + 2 * KV * sizeof(float) +
        att * sizeof(float) + N * sizeof(int64_t) +
        d->num_layers * sizeof(kvcal_eval_layer_sums) + floats * sizeof(float) + 64;
    sim_release(be);
    if (!(c->sim_slab = calloc(1, bytes)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of memory for %lld tokens a batch",
                          (long long)N);
    /* 8-byte members first, then floats, then bytes */
    unsigned char *p = c->sim_slab;
    c->slots = (int64_t *)p, p += N * sizeof(int64_t);
    c->sums = (kvcal_eval_layer_sums *)p,
    p += d->num_layers * sizeof(kvcal_eval_layer_sums);
    for (int i = 0; i < 2; i++) {
        c->cache_scale[i] = (float *)p, p += N * d->num_kv_heads * sizeof(float);
        c->cache_zero[i] = (float *)p, p += N * d->num_kv_heads * sizeof(float);
        c->deq[i] = (float *)p, p += KV * sizeof(float);
    }
    c->att0 = (float *)p, p += att * sizeof(float);
    c->space = floats ? (float *)p : NULL, p += floats * sizeof(float);
    c->cache[0] = p, p += KV;
    c->cache[1] = p;
    for (size_t t = 0; t < N; t++)
        c->slots[t] = (int64_t)t;
    *space = c->space;
    memset(io, 0, sizeof *io);
    return KVCAL_OK;
}

static kvcal_status sim_upload(kvcal_backend *be, float *dst, const float *src, size_t n)
{
    (void)be;
    memcpy(dst, src, n * sizeof *src);
    return KVCAL_OK;
}

static kvcal_status sim_view(kvcal_backend *be, kvcal_kv_io *io)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int H = d->num_kv_heads, D = d->head_dim;
    const int64_t row = (int64_t)H * D;
    float *k, *v;
    cached_kv(c, &k, &v);
    io->batch = (kvcal_kv_batch){k, v, KVCAL_DTYPE_F32, c->n, row, D, row, D, c->slots};
    io->cache = (kvcal_kv_cache){
        c->cache[0], c->cache[1], c->cache_scale[0], c->cache_scale[1], c->n, 1, H,
        D,           0,           KVCAL_CACHE_NHD};
    io->zero[0] = c->cache_zero[0], io->zero[1] = c->cache_zero[1];
    io->device = 0;
    io->stream = NULL;
    return KVCAL_OK;
}

/* (MLA: K and V expanded from the exact entry first) */
static kvcal_status sim_attend_exact(kvcal_backend *be, const kvcal_op *op)
{
    if (be->desc->mla)
        expand(cpu(be));
    attend(cpu(be), op, cpu(be)->att0);
    return KVCAL_OK;
}

static kvcal_status sim_roundtrip(kvcal_backend *be, int layer, const kvcal_kv_qparams *q)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int D = d->head_dim;
    const int64_t row = (int64_t)d->num_kv_heads * D;
    kvcal_kv_io io;
    sim_view(be, &io);
    kvcal_status st =
        q ? kvcal_kv_dequantize_fmt_ref(&io.batch, &io.cache, q, c->deq[0], c->deq[1],
                                        KVCAL_DTYPE_F32)
          : kvcal_kv_dequantize_ref(&io.batch, &io.cache, KVCAL_GRANULARITY_TENSOR, NULL,
                                    NULL, c->deq[0], c->deq[1], KVCAL_DTYPE_F32);
    if (st)
        return st;
    float *kv[2];
    cached_kv(c, &kv[0], &kv[1]);
    /* every sum before any store: K and V may be one buffer (MLA's entry) */
    for (int i = 0; i < 2; i++)
        kvcal_error_sums_ref(&c->sums[layer].kv[i], kv[i], row, c->deq[i], row,
                             q ? NULL : c->cache_scale[i], D, NULL, c->n, (int)row);
    for (int i = 0; i < 2; i++)
        memcpy(kv[i], c->deq[i], sizeof(float) * (size_t)(c->n * row));
    return KVCAL_OK;
}

static kvcal_status sim_ds_mla(kvcal_backend *be, int layer)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    const int E = d->head_dim;
    kvcal_mla_ds_roundtrip_ref(c->deq[0], E, c->latent, E, c->n, d->kv_lora_rank,
                               d->qk_rope_head_dim);
    for (int i = 0; i < 2; i++)
        kvcal_error_sums_ref(&c->sums[layer].kv[i], c->latent, E, c->deq[0], E, NULL, E,
                             NULL, c->n, E);
    memcpy(c->latent, c->deq[0], sizeof(float) * (size_t)(c->n * E));
    return KVCAL_OK;
}

static kvcal_status sim_q_roundtrip(kvcal_backend *be, const float *scale)
{
    cpu_backend *c = cpu(be);
    const kvcal_model_desc *d = be->desc;
    int akv, aqk, av;
    kvcal_model_attention_dims(d, &akv, &aqk, &av);
    const int cols = d->num_heads * aqk, group = cols / d->num_kv_heads;
    for (int g = 0; g < d->num_kv_heads; g++)
        kvcal_fp8_roundtrip_ref(c->q + (size_t)g * group, cols, c->n, group, scale[g]);
    return KVCAL_OK;
}

static kvcal_status sim_attention_error(kvcal_backend *be, const kvcal_op *op, int layer)
{
    cpu_backend *c = cpu(be);
    int akv, aqk, av;
    kvcal_model_attention_dims(be->desc, &akv, &aqk, &av);
    const int cols = be->desc->num_heads * av;
    kvcal_error_sums_ref(&c->sums[layer].att, c->att0, cols, act(c, op->out), cols, NULL,
                         0, NULL, c->n, cols);
    return KVCAL_OK;
}

static kvcal_status sim_collect(kvcal_backend *be, kvcal_eval_layer_sums *sums)
{
    cpu_backend *c = cpu(be);
    for (int l = 0; l < be->desc->num_layers; l++)
        for (int i = 0; i < 3; i++) {
            kvcal_error_sums *dst = i < 2 ? &sums[l].kv[i] : &sums[l].att;
            const kvcal_error_sums *src = i < 2 ? &c->sums[l].kv[i] : &c->sums[l].att;
            dst->x2 += src->x2;
            dst->e2 += src->e2;
            dst->clipped += src->clipped;
            dst->n += src->n;
        }
    memset(c->sums, 0, sizeof(kvcal_eval_layer_sums) * (size_t)be->desc->num_layers);
    return KVCAL_OK;
}

// --- the op profile ---------------------------------------------------------------

static kvcal_status profile_mark(kvcal_backend *be, const char *label)
{
    cpu_backend *c = cpu(be);
    if (c->marks == c->marks_cap) {
        const int cap = c->marks_cap ? 2 * c->marks_cap : 64;
        double *t = realloc(c->mark_ms, (size_t)cap * sizeof *t);
        if (t)
            c->mark_ms = t;
        const char **l = realloc(c->mark_label, (size_t)cap * sizeof *l);
        if (l)
            c->mark_label = l;
        if (!t || !l)
            return kvcal_fail(KVCAL_ERR_NOMEM, "cpu runner: out of host memory");
        c->marks_cap = cap;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->mark_ms[c->marks] = 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
    c->mark_label[c->marks++] = label;
    return KVCAL_OK;
}

static kvcal_status profile_take(kvcal_backend *be,
                                 void (*add)(void *ctx, const char *label, double ms),
                                 void *ctx)
{
    cpu_backend *c = cpu(be);
    for (int i = 0; i + 1 < c->marks; i++)
        if (c->mark_label[i])
            add(ctx, c->mark_label[i], c->mark_ms[i + 1] - c->mark_ms[i]);
    c->marks = 0;
    return KVCAL_OK;
}

// --- lifetime ---------------------------------------------------------------------

static void destroy(kvcal_backend *be)
{
    cpu_backend *c = cpu(be);
    if (!c)
        return;
    sim_release(be);
    free_slots(c);
    free(c->slab);
    free(c->default_names);
    free(c->head_logits);
    head_reference(be, 0);
    free(c->mark_ms);
    free(c->mark_label);
    free(c);
}

static const kvcal_backend_ops cpu_ops = {
    .name = "cpu",
    .warm_up = 0,
    .destroy = destroy,
    .slots = slots,
    .max_slots = max_slots,
    .begin_batch = begin_batch,
    .select_batch = select_batch,
    .use_layer = use_layer,
    .add_rmsnorm = add_rmsnorm,
    .linear = linear,
    .qk_norm_rope = qk_norm_rope,
    .attention = attention,
    .swiglu = swiglu,
    .moe = moe,
    .rmsnorm = rmsnorm,
    .geglu = geglu,
    .mla_latent = mla_latent,
    .mla_expand = mla_expand,
    .sigmoid_gate = sigmoid_gate,
    .gated_delta = gated_delta,
    .profile_mark = profile_mark,
    .profile_take = profile_take,
    .observe_into = observe_into,
    .batch_absmax = batch_absmax,
    .sync = nothing,
    .collect = nothing,
    .read_qkv = read_qkv,
    .head_prepare = head_prepare,
    .head_nll = head_nll,
    .head_reference = head_reference,
    .sim_prepare = sim_prepare,
    .sim_view = sim_view,
    .sim_upload = sim_upload,
    .sim_attend_exact = sim_attend_exact,
    .sim_roundtrip = sim_roundtrip,
    .sim_ds_mla = sim_ds_mla,
    .sim_q_roundtrip = sim_q_roundtrip,
    .sim_attention_error = sim_attention_error,
    .sim_collect = sim_collect,
    .sim_release = sim_release,
};

kvcal_status kvcal_backend_cpu_create(kvcal_model_t *model,
                                      const kvcal_backend_options *opt,
                                      kvcal_backend **out)
{
    *out = NULL;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    const int64_t max_tokens = (int64_t)opt->max_batch * opt->max_seq_len;
    if (opt->max_batch <= 0 || opt->max_seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: max_tokens %lld must be > 0",
                          (long long)max_tokens);
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return kvcal_fail(KVCAL_ERR_NOMEM, "runner: out of memory");
    c->base.ops = &cpu_ops;
    c->base.desc = d;
    c->base.layers_resident = d->num_layers;
    c->model = model;
    c->max_tokens = max_tokens;
    c->max_batch = opt->max_batch;
    int akv, aqk, av;
    kvcal_model_attention_dims(d, &akv, &aqk, &av);
    int64_t D = d->hidden_size, Q = (int64_t)d->num_heads * aqk,
            A = (int64_t)d->num_heads * av;
    int64_t KV = (int64_t)akv * aqk, VV = (int64_t)akv * av, I = d->intermediate_size;
    I = I > d->moe_intermediate_size ? I : d->moe_intermediate_size;
    I = I > d->shared_intermediate_size ? I : d->shared_intermediate_size;
    const int64_t E = d->num_experts, K = d->experts_per_tok;
    /* the mixture of experts': logits, routes, the rows of one expert */
    const int64_t moe_floats = E ? E + 2 * K + 2 + 2 * D : 0;
    int64_t fp8_cols = 0; /* the widest input an FP8 weight quantizes */
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        long long rows, cols;
        kvcal_model_weight_shape(d, w, &rows, &cols);
        if (d->fp8[w].w != KVCAL_FP8W_NONE && d->fp8[w].a != KVCAL_FP8A_NONE)
            fp8_cols = cols > fp8_cols ? cols : fp8_cols;
    }
    /* MLA's: the query's LoRA, the entry, its latent, kv_b_proj's output */
    const int64_t mla_floats =
        d->mla ? d->q_lora_rank + d->head_dim + d->kv_lora_rank +
                     (int64_t)d->num_heads * (d->qk_nope_head_dim + d->v_head_dim)
               : 0;
    /* a hybrid model's: the gate, a gated delta-net's projections and output */
    const kvcal_gated_delta_dims gdn = {d->lin_k_heads, d->lin_k_head_dim,
                                        d->lin_v_heads, d->lin_v_head_dim,
                                        d->lin_conv,    d->norm_eps};
    const int64_t lin_floats = d->linear_layers ? kvcal_model_dim(d, KVCAL_DIM_LIN_QKVZ) +
                                                      2LL * d->lin_v_heads +
                                                      kvcal_model_dim(d, KVCAL_DIM_LIN_V)
                                                : 0;
    const int64_t lin_space =
        d->linear_layers ? kvcal_gated_delta_scratch(&gdn, opt->max_seq_len) : 0;
    int64_t per_token = D + Q + KV + VV + A + 2 * I + moe_floats + mla_floats + fp8_cols +
                        (d->attn_gate ? Q : 0) + lin_floats;
    double bytes =
        ((double)per_token * (double)max_tokens + (double)lin_space) * sizeof(float);
    c->slab = bytes < 1e15 ? malloc((size_t)bytes) : NULL;
    c->default_names = malloc(sizeof(int64_t) * (size_t)opt->max_batch);
    if (!c->slab || !c->default_names) {
        destroy(&c->base);
        return kvcal_fail(
            KVCAL_ERR_NOMEM,
            "runner: cannot allocate %.0f MB of activations for %lld tokens; "
            "use a smaller --batch or --seq-len",
            bytes / 1048576.0, (long long)max_tokens);
    }
    for (int i = 0; i < opt->max_batch; i++)
        c->default_names[i] = i;
    float *p = c->slab;
    int64_t N = max_tokens;
    c->norm = p, p += N * D;
    c->q = p, p += N * Q;
    c->k = p, p += N * KV;
    c->v = p, p += N * VV;
    c->att = p, p += N * A;
    c->gate = p, p += N * I;
    c->up = p, p += N * I;
    c->xq = fp8_cols ? p : NULL, p += N * fp8_cols;
    if (E) {
        c->logits = p, p += N * E;
        c->route_w = p, p += N * K;
        c->route_e = (int32_t *)p, p += N * K;
        c->rows = (int32_t *)p, p += N;
        c->rows_w = p, p += N;
        c->xs = p, p += N * D;
        c->ys = p, p += N * D;
    }
    if (d->attn_gate)
        c->attn_gate = p, p += N * Q;
    if (d->linear_layers) {
        c->lin_qkvz = p, p += N * kvcal_model_dim(d, KVCAL_DIM_LIN_QKVZ);
        c->lin_ba = p, p += N * 2 * d->lin_v_heads;
        c->lin_out = p, p += N * kvcal_model_dim(d, KVCAL_DIM_LIN_V);
        c->lin_space = p, p += lin_space;
    }
    if (d->mla) {
        c->qa = p, p += N * d->q_lora_rank;
        c->latent = p, p += N * d->head_dim;
        c->lat = p, p += N * d->kv_lora_rank;
        c->kvb = p;
    }
    *out = &c->base;
    return KVCAL_OK;
}
