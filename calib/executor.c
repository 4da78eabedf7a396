/* calib/executor.c: a model's layers over batches on one backend (see
 * executor.h). */
#include "calib/executor.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

struct kvcal_exec {
    kvcal_model_t *model;
    const kvcal_model_desc *desc;
    kvcal_backend *be;
    int max_batch, max_seq_len;
    int64_t *names;  /* (max_batch) sample ids of the batch */
    int32_t *target; /* (max_batch * max_seq_len) next token of each row, -1: none */
    float *nll;      /* (max_batch * max_seq_len) */
};

/* What one pass does with K and V, and how far it runs. */
typedef struct {
    int observe;            /* fold K/V into the backend's statistics */
    kvcal_kv_sim_t *sim;    /* or NULL */
    kvcal_exec_tap_fn tap;  /* or NULL */
    void *tap_ctx;
    int whole;              /* every layer, then the head */
} pass;

/* One batch through the layers (see pass); rows: the batch's layout. */
static kvcal_status run_layers(kvcal_exec_t *x, const kvcal_batch *b, const pass *p,
                               kvcal_rows *rows)
{
    kvcal_backend *be = x->be;
    const kvcal_backend_ops *ops = be->ops;
    const kvcal_arch *a = x->desc->arch;
    const int L = x->desc->num_layers;
    int has_delta = 0;
    kvcal_status st = ops->begin_batch(be, b, rows);
    for (int l = 0; !st && l < L; l++) {
        const int last = l == L - 1 && !p->whole;
        if ((st = ops->use_layer(be, l)))
            break;
        for (int i = 0; !st && i < a->layer_ops; i++) {
            const kvcal_op *op = &a->layer[i];
            switch (op->kind) {
            case KVCAL_OP_ADD_RMSNORM:
                st = ops->add_rmsnorm(be, op, !has_delta);
                break;
            case KVCAL_OP_LINEAR:
                st = ops->linear(be, op, !last);
                break;
            case KVCAL_OP_QK_NORM_ROPE:
                st = ops->qk_norm_rope(be, op, !last, op->kv_cache && p->observe ? l : -1);
                break;
            case KVCAL_OP_ATTENTION:
                st = ops->attention(be, op);
                if (!st && p->sim)
                    st = kvcal_kv_sim_after_attention(p->sim, l, op);
                break;
            case KVCAL_OP_SWIGLU:
                st = ops->swiglu(be, op);
                break;
            }
            has_delta |= op->out == KVCAL_ACT_DELTA;
            if (st || !op->kv_cache)
                continue;
            if (p->tap) {
                const float *k = NULL, *v = NULL;
                if (!(st = ops->read_kv(be, &k, &v)))
                    st = p->tap(p->tap_ctx, l, rows, k, v);
            }
            if (!st && p->sim)
                st = kvcal_kv_sim_cache_point(p->sim, l, op);
            if (last)
                return st;
        }
    }
    return st;
}

/* The next token of every row that has one in its sample, -1 elsewhere. */
static void fill_targets(const kvcal_exec_t *x, const kvcal_batch *b,
                         const kvcal_rows *rows)
{
    for (int64_t i = 0; i < rows->n; i++)
        x->target[i] = -1;
    for (int s = 0; s < b->batch; s++)
        for (int t = 0; t + 1 < b->lengths[s]; t++)
            x->target[rows->start[s] + t] = b->ids[(int64_t)s * b->seq_len + t + 1];
}

/* The batch's next-token NLL, in sample and token order. */
static void add_nll(const kvcal_exec_t *x, const kvcal_batch *b, const kvcal_rows *rows,
                    double *nll, long long *count)
{
    for (int s = 0; s < b->batch; s++)
        for (int t = 0; t + 1 < b->lengths[s]; t++) {
            *nll += x->nll[rows->start[s] + t];
            (*count)++;
        }
}

/* Checks a sample set against the executor's sizes. */
static kvcal_status check_samples(const kvcal_exec_t *x, const kvcal_exec_samples *s)
{
    if (!s->ids || !s->lengths || s->num_samples < 1 || s->batch < 1 ||
        s->batch > x->max_batch || s->seq_len < 1 || s->seq_len > x->max_seq_len)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "executor: %d samples of %d tokens in batches of %d: the "
                          "executor was made for batches of up to %d x %d",
                          s->num_samples, s->seq_len, s->batch, x->max_batch,
                          x->max_seq_len);
    return KVCAL_OK;
}

/* Batch b0 of s (up to s->batch samples from sample b0). */
static kvcal_batch batch_at(const kvcal_exec_t *x, const kvcal_exec_samples *s, int b0)
{
    const int n = s->num_samples - b0 < s->batch ? s->num_samples - b0 : s->batch;
    for (int i = 0; i < n; i++)
        x->names[i] = b0 + i;
    return (kvcal_batch){s->ids + (int64_t)b0 * s->seq_len, s->lengths + b0, x->names, n,
                         s->seq_len};
}

static long long batch_tokens(const kvcal_batch *b)
{
    long long t = 0;
    for (int i = 0; i < b->batch; i++)
        t += b->lengths[i];
    return t;
}

kvcal_status kvcal_exec_calibrate(kvcal_exec_t *x, const kvcal_exec_samples *s,
                                  kvcal_stats_t *stats, double ema_decay)
{
    kvcal_backend *be = x->be;
    const kvcal_model_desc *d = x->desc;
    kvcal_status st = check_samples(x, s);
    if (st)
        return st;
    if (stats && (stats->num_layers != d->num_layers ||
                  stats->num_kv_heads != d->num_kv_heads || stats->head_dim != d->head_dim))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "executor: statistics of %d layers x %d kv heads x %d channels "
                          "for a model of %d x %d x %d",
                          stats->num_layers, stats->num_kv_heads, stats->head_dim,
                          d->num_layers, d->num_kv_heads, d->head_dim);
    if ((st = be->ops->observe_into(be, stats)))
        return st;
    const pass p = {stats != NULL, NULL, NULL, NULL, 0};
    long long tokens = 0;
    for (int b0 = 0; !st && b0 < s->num_samples; b0 += s->batch) {
        const kvcal_batch b = batch_at(x, s, b0);
        kvcal_rows rows;
        if (stats)
            kvcal_stats_begin_batch(stats);
        st = run_layers(x, &b, &p, &rows);
        if (!st)
            st = be->ops->end_batch(be);
        if (!st && stats)
            st = kvcal_stats_end_batch(stats, ema_decay);
        tokens += batch_tokens(&b);
        if (!st && s->progress)
            s->progress(s->progress_ctx, b0 + b.batch, tokens);
    }
    if (!st && stats)
        st = be->ops->collect(be);
    const kvcal_status done = be->ops->observe_into(be, NULL);
    return st ? st : done;
}

kvcal_status kvcal_exec_eval(kvcal_exec_t *x, const kvcal_exec_samples *s,
                             const kvcal_kv_sim_config *cfg, double *nll,
                             long long *count, kvcal_eval_layer_sums *sums)
{
    kvcal_backend *be = x->be;
    kvcal_kv_sim_t *sim = NULL;
    kvcal_status st = check_samples(x, s);
    if (!st)
        st = be->ops->head_prepare(be);
    if (!st && cfg->mode != KVCAL_KV_SIM_EXACT)
        st = kvcal_kv_sim_create(be, cfg, &sim);
    const pass p = {0, sim, NULL, NULL, 1};
    long long tokens = 0;
    for (int b0 = 0; !st && b0 < s->num_samples; b0 += s->batch) {
        const kvcal_batch b = batch_at(x, s, b0);
        kvcal_rows rows;
        st = run_layers(x, &b, &p, &rows);
        if (!st) {
            fill_targets(x, &b, &rows);
            st = be->ops->head_nll(be, x->target, x->nll, NULL);
        }
        if (!st)
            add_nll(x, &b, &rows, nll, count);
        tokens += batch_tokens(&b);
        if (!st && s->progress)
            s->progress(s->progress_ctx, b0 + b.batch, tokens);
    }
    if (!st && sim && sums)
        st = kvcal_kv_sim_collect(sim, sums);
    kvcal_kv_sim_destroy(sim);
    return st;
}

kvcal_status kvcal_exec_forward(kvcal_exec_t *x, const kvcal_batch *b,
                                kvcal_exec_tap_fn tap, void *ctx, float *logits)
{
    if (!b || b->batch < 1 || b->batch > x->max_batch || b->seq_len < 1 ||
        b->seq_len > x->max_seq_len)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "executor: batch %d x %d tokens: the executor was made for up "
                          "to %d x %d",
                          b ? b->batch : 0, b ? b->seq_len : 0, x->max_batch,
                          x->max_seq_len);
    const pass p = {0, NULL, tap, ctx, logits != NULL};
    kvcal_rows rows;
    kvcal_status st = logits ? x->be->ops->head_prepare(x->be) : KVCAL_OK;
    if (!st)
        st = run_layers(x, b, &p, &rows);
    if (!st && logits) {
        fill_targets(x, b, &rows);
        st = x->be->ops->head_nll(x->be, x->target, x->nll, logits);
    }
    return st;
}

/* One calibration batch of the largest shape, observed into scratch
 * statistics that are then dropped: what a backend sets up on first use
 * (module loading, GEMM algorithm choice) happens here. */
static kvcal_status warm_up(kvcal_exec_t *x)
{
    const kvcal_model_desc *d = x->desc;
    int len = x->max_seq_len < d->max_seq_len ? x->max_seq_len : d->max_seq_len;
    if (d->sliding_window > 0 && len > d->sliding_window)
        len = d->sliding_window;
    const size_t n = (size_t)x->max_batch * (size_t)x->max_seq_len;
    int32_t *ids = calloc(n + (size_t)x->max_batch, sizeof *ids);
    kvcal_stats_t *stats = NULL;
    kvcal_status st = ids ? kvcal_stats_create(d->num_layers, d->num_kv_heads,
                                               d->head_dim, &stats)
                          : kvcal_fail(KVCAL_ERR_NOMEM, "executor: out of host memory");
    if (!st) {
        int32_t *lengths = ids + n;
        for (int i = 0; i < x->max_batch; i++)
            lengths[i] = len;
        const kvcal_exec_samples s = {ids,  lengths, x->max_batch, x->max_seq_len,
                                      x->max_batch, NULL, NULL};
        st = kvcal_exec_calibrate(x, &s, stats, 0.0);
    }
    kvcal_stats_destroy(stats);
    free(ids);
    return st;
}

kvcal_status kvcal_exec_create(kvcal_model_t *model, const kvcal_exec_options *opt,
                               kvcal_exec_t **out)
{
    *out = NULL;
    const kvcal_backend_options *bo = &opt->backend;
    if (bo->max_batch <= 0 || bo->max_seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "executor: batch %d x seq_len %d: both must be > 0",
                          bo->max_batch, bo->max_seq_len);
    kvcal_exec_t *x = calloc(1, sizeof *x);
    if (!x)
        return kvcal_fail(KVCAL_ERR_NOMEM, "executor: out of host memory");
    x->model = model;
    x->desc = kvcal_model_describe(model);
    x->max_batch = bo->max_batch;
    x->max_seq_len = bo->max_seq_len;
    const size_t n = (size_t)bo->max_batch * (size_t)bo->max_seq_len;
    kvcal_status st = KVCAL_OK;
    x->names = malloc((size_t)bo->max_batch * sizeof *x->names);
    x->target = malloc(n * sizeof *x->target);
    x->nll = malloc(n * sizeof *x->nll);
    if (!x->names || !x->target || !x->nll) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "executor: no host memory for batches of %d x %d tokens",
                        bo->max_batch, bo->max_seq_len);
        goto fail;
    }
    st = kvcal_backend_create(opt->device, model, bo, &x->be);
    if (!st && x->be->ops->warm_up)
        st = warm_up(x);
    if (st)
        goto fail;
    *out = x;
    return KVCAL_OK;
fail:
    kvcal_exec_destroy(x);
    return st;
}

void kvcal_exec_destroy(kvcal_exec_t *x)
{
    if (!x)
        return;
    if (x->be)
        x->be->ops->destroy(x->be);
    free(x->names);
    free(x->target);
    free(x->nll);
    free(x);
}
