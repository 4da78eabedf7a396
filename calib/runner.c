/* calib/runner.c: batched fp32 prefill on the CPU reference ops. */
#include "calib/runner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/cpu/ops.h"

struct kvcal_runner {
    kvcal_model_t *model;
    int64_t max_tokens;
    float *x;     // (N, hidden) residual stream
    float *xb;    // (N, hidden)
    float *q;     // (N, heads, head_dim)
    float *k;     // (N, kv_heads, head_dim)
    float *v;     // (N, kv_heads, head_dim)
    float *att;   // (N, heads, head_dim)
    float *h1;    // (N, intermediate)
    float *h2;    // (N, intermediate)
    int32_t *pos; // (N)
    void *slab;
};

kvcal_status kvcal_runner_create(kvcal_model_t *model, int64_t max_tokens,
                                 kvcal_runner_t **out)
{
    *out = NULL;
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (max_tokens <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: max_tokens %lld must be > 0",
                          (long long)max_tokens);
    kvcal_runner_t *r = calloc(1, sizeof *r);
    if (!r)
        return kvcal_fail(KVCAL_ERR_NOMEM, "runner: out of memory");
    int64_t D = d->hidden_size, Q = (int64_t)d->num_heads * d->head_dim;
    int64_t KV = (int64_t)d->num_kv_heads * d->head_dim, I = d->intermediate_size;
    int64_t per_token = 2 * D + 2 * Q + 2 * KV + 2 * I + 1;
    double bytes = (double)per_token * (double)max_tokens * sizeof(float);
    r->slab = bytes < 1e15 ? malloc((size_t)bytes) : NULL;
    if (!r->slab) {
        free(r);
        return kvcal_fail(
            KVCAL_ERR_NOMEM,
            "runner: cannot allocate %.0f MB of activations for %lld tokens; "
            "use a smaller --batch or --seq-len",
            bytes / 1048576.0, (long long)max_tokens);
    }
    float *p = r->slab;
    int64_t N = max_tokens;
    r->x = p, p += N * D;
    r->xb = p, p += N * D;
    r->q = p, p += N * Q;
    r->k = p, p += N * KV;
    r->v = p, p += N * KV;
    r->att = p, p += N * Q;
    r->h1 = p, p += N * I;
    r->h2 = p, p += N * I;
    r->pos = (int32_t *)p;
    r->model = model;
    r->max_tokens = max_tokens;
    *out = r;
    return KVCAL_OK;
}

void kvcal_runner_destroy(kvcal_runner_t *r)
{
    if (!r)
        return;
    free(r->slab);
    free(r);
}

/* Projection + optional per-head norm + RoPE of q or k, in place in dst. */
static void project_rope(const kvcal_model_desc *d, float *dst, const float *xb,
                         const float *w, const float *bias, const float *norm, int heads,
                         const int32_t *pos, int64_t n)
{
    kvcal_matmul_ref(dst, xb, w, bias, (int)n, d->hidden_size, heads * d->head_dim);
    if (norm)
        kvcal_rmsnorm_ref(dst, dst, norm, (int)n * heads, d->head_dim, d->norm_eps);
    kvcal_rope_scaled_ref(dst, pos, d->inv_freq, (int)n, heads, d->head_dim, d->rot_dim,
                          d->rope_interleaved, d->rope_attention_factor);
}

/* The rest of a layer after K and V: attention, o_proj, MLP, residuals. */
static kvcal_status finish_layer(kvcal_runner_t *r, const kvcal_layer_weights *w,
                                 const kvcal_runner_kv *kv, const kvcal_runner_outputs *outputs,
                                 const int64_t *start, const int32_t *lengths, int batch,
                                 int64_t n)
{
    const kvcal_model_desc *d = kvcal_model_describe(r->model);
    int D = d->hidden_size, H = d->num_heads, HKV = d->num_kv_heads, hd = d->head_dim;
    int I = d->intermediate_size;
    project_rope(d, r->q, r->xb, w->wq, w->bq, w->q_norm, H, r->pos, n);
    if (outputs && outputs->kv_hook) {
        kvcal_status st = outputs->kv_hook(outputs->ctx, kv, r->q, H, r->k, r->v);
        if (st)
            return st;
    }
    for (int b = 0; b < batch; b++) {
        int64_t s = start[b];
        kvcal_attention_ref(r->att + s * H * hd, r->q + s * H * hd, r->k + s * HKV * hd,
                            r->v + s * HKV * hd, lengths[b], H, HKV, hd,
                            1.0f / sqrtf((float)hd));
    }
    kvcal_matmul_ref(r->xb, r->att, w->wo, w->bo, (int)n, H * hd, D);
    kvcal_add_ref(r->x, r->xb, n * D);
    kvcal_rmsnorm_ref(r->xb, r->x, w->ffn_norm, (int)n, D, d->norm_eps);
    kvcal_matmul_ref(r->h1, r->xb, w->w_gate, NULL, (int)n, D, I);
    kvcal_matmul_ref(r->h2, r->xb, w->w_up, NULL, (int)n, D, I);
    kvcal_swiglu_ref(r->h1, r->h1, r->h2, n * I);
    kvcal_matmul_ref(r->xb, r->h1, w->w_down, NULL, (int)n, I, D);
    kvcal_add_ref(r->x, r->xb, n * D);
    return KVCAL_OK;
}

kvcal_status kvcal_runner_check_sample(const char *who, long long id, int length,
                                       int seq_len, int context, int sliding_window)
{
    if (length < 1 || length > seq_len)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: sample %lld has %d tokens, expected 1..%d", who, id,
                          length, seq_len);
    if (length > context)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "sample %lld has %d tokens, more than the model's context of "
                          "%d (max_position_embeddings); use --seq-len %d or less",
                          id, length, context, context);
    if (sliding_window > 0 && length > sliding_window)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "sample %lld has %d tokens, more than the model's sliding "
                          "window of %d, which the runner does not implement; use "
                          "--seq-len %d or less",
                          id, length, sliding_window, sliding_window);
    return KVCAL_OK;
}

/* Checks the batch and packs its ids into x's rows (embedding) and pos. */
static kvcal_status pack_batch(kvcal_runner_t *r, const int32_t *ids,
                               const int32_t *lengths, int batch, int seq_len,
                               const int64_t *sample_ids, int64_t *start, int64_t *n_out)
{
    const kvcal_model_desc *d = kvcal_model_describe(r->model);
    int64_t n = 0;
    if (batch <= 0 || seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "runner: empty batch (%d x %d)", batch,
                          seq_len);
    for (int b = 0; b < batch; b++) {
        long long id = sample_ids ? (long long)sample_ids[b] : b;
        kvcal_status st = kvcal_runner_check_sample("runner", id, lengths[b], seq_len,
                                                    d->max_seq_len, d->sliding_window);
        if (st)
            return st;
        start[b] = n;
        n += lengths[b];
    }
    if (n > r->max_tokens)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "runner: batch of %lld tokens exceeds the runner's %lld",
                          (long long)n, (long long)r->max_tokens);
    for (int b = 0; b < batch; b++) {
        const int32_t *row = ids + (int64_t)b * seq_len;
        kvcal_status st = kvcal_model_embed(r->model, row, lengths[b],
                                            r->x + start[b] * d->hidden_size);
        if (st)
            return kvcal_fail_context(
                st,
                "sample %lld: ", sample_ids ? (long long)sample_ids[b] : (long long)b);
        for (int t = 0; t < lengths[b]; t++)
            r->pos[start[b] + t] = t;
    }
    *n_out = n;
    return KVCAL_OK;
}

kvcal_status kvcal_runner_forward(kvcal_runner_t *r, const int32_t *ids,
                                  const int32_t *lengths, int batch, int seq_len,
                                  const int64_t *sample_ids,
                                  const kvcal_runner_outputs *outputs)
{
    const kvcal_model_desc *d = kvcal_model_describe(r->model);
    int D = d->hidden_size, HKV = d->num_kv_heads, hd = d->head_dim;
    int full = outputs && (outputs->hidden || outputs->logits);
    int64_t n = 0;
    kvcal_status st = KVCAL_OK;
    int64_t *start = malloc(sizeof(int64_t) * (size_t)(batch > 0 ? batch : 1) * 2);
    if (!start)
        return kvcal_fail(KVCAL_ERR_NOMEM, "runner: out of memory");
    int64_t *names = start + (batch > 0 ? batch : 1);
    if ((st = pack_batch(r, ids, lengths, batch, seq_len, sample_ids, start, &n)))
        goto done;
    for (int b = 0; b < batch; b++)
        names[b] = sample_ids ? sample_ids[b] : b;
    for (int l = 0; l < d->num_layers; l++) {
        kvcal_layer_weights w;
        if ((st = kvcal_model_load_layer(r->model, l, &w)))
            goto done;
        kvcal_rmsnorm_ref(r->xb, r->x, w.attn_norm, (int)n, D, d->norm_eps);
        project_rope(d, r->k, r->xb, w.wk, w.bk, w.k_norm, HKV, r->pos, n);
        kvcal_matmul_ref(r->v, r->xb, w.wv, w.bv, (int)n, D, HKV * hd);
        kvcal_runner_kv kv = {l, batch, HKV, hd, r->k, r->v, lengths, start, names};
        if (outputs && outputs->observe && (st = outputs->observe(outputs->ctx, &kv)))
            goto done;
        if ((l < d->num_layers - 1 || full) &&
            (st = finish_layer(r, &w, &kv, outputs, start, lengths, batch, n)))
            goto done;
    }
    if (full) {
        const float *norm, *cls;
        if ((st = kvcal_model_load_head(r->model, &norm, &cls)))
            goto done;
        kvcal_rmsnorm_ref(r->xb, r->x, norm, (int)n, D, d->norm_eps);
        if (outputs->hidden)
            memcpy(outputs->hidden, r->xb, sizeof(float) * (size_t)(n * D));
        if (outputs->logits)
            kvcal_matmul_ref(outputs->logits, r->xb, cls, NULL, (int)n, D, d->vocab_size);
    }
done:
    free(start);
    return st;
}
