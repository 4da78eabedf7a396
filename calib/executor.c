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
    int chunk_cap;        /* batches a chunk may hold (0: as many as fit) */
    int whole_last_layer; /* kvcal_exec_options' */
    int chunk;            /* slots the backend holds now */
    int64_t *names;       /* (chunk, max_batch) sample ids of each slot's batch */
    kvcal_batch *batches; /* (chunk) */
    kvcal_rows *rows;     /* (chunk) */
    float *bmax;          /* (2, layers, kv_heads) one batch's per-head absmax */
    int32_t *target;      /* (max_batch * max_seq_len) next token of each row, -1: none */
    float *nll;           /* (max_batch * max_seq_len) */
    float *kld, *top;     /* (max_batch * max_seq_len) */
    int64_t *ref_row; /* (max_batch * max_seq_len) reference row of each row, -1: none */
    int64_t ref_rows; /* rows of the kept reference (0: none) */
    long long moe_ops[2];   /* MoE ops run: [0] whole, [1] routing only */
    kvcal_op_profile *prof; /* kvcal_exec_options' profile, or NULL */
};

/* What one pass does with K and V, and how far it runs. */
typedef struct {
    int observe;           /* fold K/V into the backend's statistics */
    int observe_q;         /* and Q (the statistics have q_absmax): every
                              layer's queries are computed, the last's too */
    kvcal_kv_sim_t *sim;   /* or NULL */
    kvcal_exec_tap_fn tap; /* or NULL */
    void *tap_ctx;
    int whole; /* every layer whole (then the head, where the pass has one) */
    /* the last layer's routing counts too: past its cache point it runs up
       to its MoE op (where it has one), and that op routes only */
    int route_last;
} pass;

/* 1 when one of the first n ops writes the pending residual add. */
static int makes_delta(const kvcal_op *ops, int n)
{
    for (int i = 0; i < n; i++)
        if (ops[i].out == KVCAL_ACT_DELTA)
            return 1;
    return 0;
}

/* The attention op of the n ops (the one whose exact attention a simulated
 * cache keeps: its sinks and the layer's window), or NULL. */
static const kvcal_op *attention_op(const kvcal_op *ops, int n)
{
    for (int i = 0; i < n; i++)
        if (ops[i].kind == KVCAL_OP_ATTENTION)
            return &ops[i];
    return NULL;
}

/* 1 when layer l's ops (n of them) have a MoE op that runs there. */
static int has_moe(const kvcal_model_desc *d, int l, const kvcal_op *ops, int n)
{
    for (int i = 0; i < n; i++)
        if (ops[i].kind == KVCAL_OP_MOE && kvcal_model_op_runs(d, l, &ops[i]))
            return 1;
    return 0;
}

/* Layer l's ops on the batch in slot (see pass). A calibration's last layer
 * stops at its cache point, or, for its routing counts, runs on to its MoE
 * op and routes only: the experts' output feeds nothing. */
static kvcal_status run_layer(kvcal_exec_t *x, int l, int slot, const pass *p)
{
    kvcal_backend *be = x->be;
    const kvcal_backend_ops *ops = be->ops;
    int n_ops = 0;
    const kvcal_op *layer = kvcal_model_layer_ops(x->desc, l, &n_ops);
    const int end = l == x->desc->num_layers - 1 && !p->whole;
    const int route = end && p->route_last && has_moe(x->desc, l, layer, n_ops);
    const int last = end && !route; /* stops at the cache point */
    const int need_q = !last || p->observe_q;
    kvcal_status st = ops->select_batch(be, slot);
    for (int i = 0; !st && i < n_ops; i++) {
        const kvcal_op *op = &layer[i];
        /* the layer's conditional ops, and a calibration's last layer
           computes no query */
        if (!kvcal_model_op_runs(x->desc, l, op) ||
            (last && (op->out == KVCAL_ACT_Q || op->out == KVCAL_ACT_Q_A)))
            continue;
        if (x->prof && (st = ops->profile_mark(be, kvcal_op_profile_label(x->prof, op))))
            break;
        switch (op->kind) {
        case KVCAL_OP_ADD_RMSNORM:
            /* no delta before the first op that makes one: the residual
             * stream is the embedding */
            st = ops->add_rmsnorm(be, op, l == 0 && !makes_delta(layer, i));
            break;
        case KVCAL_OP_LINEAR:
            st = ops->linear(be, op, need_q);
            break;
        case KVCAL_OP_QK_NORM_ROPE:
            st = ops->qk_norm_rope(be, op, need_q, op->kv_cache && p->observe ? l : -1);
            break;
        case KVCAL_OP_ATTENTION:
            st = ops->attention(be, op);
            if (!st && p->sim)
                st = kvcal_kv_sim_after_attention(p->sim, l, op);
            break;
        case KVCAL_OP_SWIGLU:
            st = ops->swiglu(be, op);
            break;
        case KVCAL_OP_MOE:
            st = ops->moe(be, op, p->observe ? l : -1, route);
            x->moe_ops[route]++;
            if (route)
                return st;
            break;
        case KVCAL_OP_RMSNORM:
            st = ops->rmsnorm(be, op);
            break;
        case KVCAL_OP_GEGLU:
            st = ops->geglu(be, op);
            break;
        case KVCAL_OP_MLA_LATENT:
            st = ops->mla_latent(be, op, !last, op->kv_cache && p->observe ? l : -1);
            break;
        case KVCAL_OP_MLA_EXPAND:
            st = ops->mla_expand(be, op);
            break;
        case KVCAL_OP_SIGMOID_GATE:
            st = ops->sigmoid_gate(be, op);
            break;
        case KVCAL_OP_GATED_DELTA:
            st = ops->gated_delta(be, op);
            break;
        }
        if (st || !op->kv_cache)
            continue;
        if (p->tap) {
            const float *q = NULL, *k = NULL, *v = NULL;
            if (!(st = ops->read_qkv(be, &q, &k, &v)))
                st = p->tap(p->tap_ctx, l, &x->rows[slot], q, k, v);
        }
        if (!st && p->sim)
            st = kvcal_kv_sim_cache_point(p->sim, l, attention_op(layer, n_ops));
        if (last)
            return st;
    }
    return st;
}

static long long batch_tokens(const kvcal_batch *b)
{
    long long t = 0;
    for (int i = 0; i < b->batch; i++)
        t += b->lengths[i];
    return t;
}

/* The n batches of a chunk (already in x->batches) through every layer,
 * layer by layer: each layer's weights are made current once and run over
 * every batch of the chunk before the next layer's. After each layer,
 * progress (when the run has a callback) counts the chunk's tokens that
 * far: prog's samples and tokens of the chunks before. */
static kvcal_status run_chunk(kvcal_exec_t *x, int n, const pass *p,
                              const kvcal_exec_samples *s, kvcal_exec_progress *prog)
{
    kvcal_backend *be = x->be;
    const int L = x->desc->num_layers;
    kvcal_status st = KVCAL_OK;
    long long chunk_tokens = 0;
    for (int i = 0; !st && i < n; i++) {
        st = be->ops->begin_batch(be, i, &x->batches[i], &x->rows[i]);
        chunk_tokens += batch_tokens(&x->batches[i]);
    }
    const double before = prog ? prog->tokens_done : 0.0;
    for (int l = 0; !st && l < L; l++) {
        st = be->ops->use_layer(be, l);
        for (int i = 0; !st && i < n; i++) {
            st = run_layer(x, l, i, p);
            if (!st && x->prof) /* the layer's last op ends here */
                st = be->ops->profile_mark(be, KVCAL_OP_PROFILE_GAPS);
        }
        if (!st && prog && s->progress) {
            prog->layer = l + 1;
            prog->tokens_done = before + (double)chunk_tokens * (l + 1) / L;
            s->progress(s->progress_ctx, prog);
        }
    }
    /* the chunk's marks, once its work is done: the device is not stopped
       between layers to read them */
    if (!st && x->prof && !(st = be->ops->sync(be)))
        st = be->ops->profile_take(be, kvcal_op_profile_add, x->prof);
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

/* The reference row of each row of the batch whose first sample is
 * sample b0: the token's place in sample and token order (first: the
 * predicted tokens of the samples before b0). */
static void fill_ref_rows(const kvcal_exec_t *x, const kvcal_batch *b,
                          const kvcal_rows *rows, int64_t first)
{
    for (int64_t i = 0; i < rows->n; i++)
        x->ref_row[i] = -1;
    for (int s = 0; s < b->batch; s++)
        for (int t = 0; t + 1 < b->lengths[s]; t++)
            x->ref_row[rows->start[s] + t] = first++;
}

/* The batch's per-token results into tok from token `first` on, in sample
 * and token order; returns the number of tokens. */
static int64_t add_tokens(const kvcal_exec_t *x, const kvcal_batch *b,
                          const kvcal_rows *rows, const kvcal_eval_tokens *tok,
                          int64_t first)
{
    int64_t i = first;
    for (int s = 0; s < b->batch; s++)
        for (int t = 0; t + 1 < b->lengths[s]; t++, i++) {
            const int64_t r = rows->start[s] + t;
            tok->nll[i] = x->nll[r];
            if (tok->kld)
                tok->kld[i] = x->kld[r], tok->top[i] = x->top[r];
        }
    return i - first;
}

int64_t kvcal_exec_predicted_tokens(const kvcal_exec_samples *s)
{
    int64_t n = 0;
    for (int i = 0; i < s->num_samples; i++)
        n += s->lengths[i] > 1 ? s->lengths[i] - 1 : 0;
    return n;
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

/* Slot i's batch: up to s->batch samples from sample b0. */
static void batch_at(kvcal_exec_t *x, int i, const kvcal_exec_samples *s, int b0)
{
    const int n = s->num_samples - b0 < s->batch ? s->num_samples - b0 : s->batch;
    int64_t *names = x->names + (size_t)i * x->max_batch;
    for (int j = 0; j < n; j++)
        names[j] = s->first_name + b0 + j;
    x->batches[i] = (kvcal_batch){s->ids + (int64_t)b0 * s->seq_len, s->lengths + b0,
                                  names, n, s->seq_len};
}

/* Gives the executor room for chunks of up to `want` batches (fewer when
 * the backend has room for fewer, or the executor's cap says so); *n the
 * chunk size. */
static kvcal_status size_chunks(kvcal_exec_t *x, int want, int *n)
{
    if (x->chunk_cap > 0 && want > x->chunk_cap)
        want = x->chunk_cap;
    kvcal_status st = x->be->ops->max_slots(x->be, want, n);
    if (st || *n == x->chunk)
        return st;
    kvcal_batch *b = realloc(x->batches, (size_t)*n * sizeof *b);
    if (b)
        x->batches = b;
    kvcal_rows *r = b ? realloc(x->rows, (size_t)*n * sizeof *r) : NULL;
    if (r)
        x->rows = r;
    int64_t *names =
        r ? realloc(x->names, (size_t)*n * x->max_batch * sizeof *names) : NULL;
    if (names)
        x->names = names;
    if (!names)
        return kvcal_fail(KVCAL_ERR_NOMEM, "executor: out of host memory for %d batches",
                          *n);
    if ((st = x->be->ops->slots(x->be, *n)))
        return st;
    x->chunk = *n;
    return KVCAL_OK;
}

static int num_batches(const kvcal_exec_samples *s)
{
    return (s->num_samples + s->batch - 1) / s->batch;
}

static kvcal_exec_progress progress_start(const kvcal_exec_t *x,
                                          const kvcal_exec_samples *s)
{
    kvcal_exec_progress p;
    memset(&p, 0, sizeof p);
    p.samples_total = s->num_samples;
    p.samples_done = s->first_sample;
    p.layers = x->desc->num_layers;
    for (int i = 0; i < s->num_samples; i++) {
        p.tokens_total += s->lengths[i];
        if (i < s->first_sample)
            p.tokens_whole += s->lengths[i];
    }
    p.tokens_done = (double)p.tokens_whole;
    return p;
}

/* After a chunk of n batches: its samples and tokens are done. */
static void progress_chunk_done(const kvcal_exec_t *x, int n, const kvcal_exec_samples *s,
                                kvcal_exec_progress *p)
{
    for (int i = 0; i < n; i++) {
        p->samples_done += x->batches[i].batch;
        p->tokens_whole += batch_tokens(&x->batches[i]);
    }
    p->tokens_done = (double)p->tokens_whole;
    p->layer = 0;
    if (s->progress)
        s->progress(s->progress_ctx, p);
}

kvcal_status kvcal_exec_calibrate(kvcal_exec_t *x, const kvcal_exec_samples *s,
                                  kvcal_stats_t *stats, double ema_decay)
{
    kvcal_backend *be = x->be;
    const kvcal_model_desc *d = x->desc;
    int chunk = 0;
    kvcal_status st = check_samples(x, s);
    if (st)
        return st;
    if (stats &&
        (stats->num_layers != d->num_layers || stats->num_kv_heads != d->num_kv_heads ||
         stats->head_dim != d->head_dim))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "executor: statistics of %d layers x %d kv heads x %d channels "
                          "for a model of %d x %d x %d",
                          stats->num_layers, stats->num_kv_heads, stats->head_dim,
                          d->num_layers, d->num_kv_heads, d->head_dim);
    if (stats && !(ema_decay >= 0.0 && ema_decay < 1.0))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_end_batch: EMA decay %g is outside [0, 1)",
                          ema_decay);
    if (s->first_sample < 0 || s->first_sample > s->num_samples ||
        s->first_sample % s->batch)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "executor: a run resumed at sample %d of %d in batches of %d",
                          s->first_sample, s->num_samples, s->batch);
    int want = num_batches(s);
    if (s->chunk_samples > 0 && want > (s->chunk_samples + s->batch - 1) / s->batch)
        want = (s->chunk_samples + s->batch - 1) / s->batch;
    if ((st = size_chunks(x, want, &chunk)) || (st = be->ops->observe_into(be, stats)))
        return st;
    /* routing counts need every layer's router: the last layer's too */
    const int counts = stats && stats->num_experts > 0;
    const pass p = {stats != NULL, stats && stats->q_absmax,      NULL,  NULL,
                    NULL,          counts && x->whole_last_layer, counts};
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    const float *const bmax[2] = {x->bmax, x->bmax + lh};
    kvcal_exec_progress prog = progress_start(x, s);
    for (int b0 = s->first_sample; !st && b0 < s->num_samples; b0 += chunk * s->batch) {
        int n = 0;
        for (; n < chunk && b0 + n * s->batch < s->num_samples; n++)
            batch_at(x, n, s, b0 + n * s->batch);
        st = run_chunk(x, n, &p, s, &prog);
        if (!st)
            st = be->ops->sync(be);
        for (int i = 0; !st && stats && i < n; i++) {
            float *k = s->batch_absmax
                           ? s->batch_absmax +
                                 (size_t)((b0 - s->first_sample) / s->batch + i) * 2 * lh
                           : x->bmax;
            if (!(st = be->ops->batch_absmax(be, i, k, k + lh)) && !s->batch_absmax)
                st = kvcal_stats_fold_batch(stats, bmax, ema_decay);
        }
        if (!st)
            progress_chunk_done(x, n, s, &prog);
        const int done =
            b0 + n * s->batch < s->num_samples ? b0 + n * s->batch : s->num_samples;
        if (!st && stats && s->chunk_done && done < s->num_samples) {
            kvcal_stats_begin_batch(stats);
            if (!(st = be->ops->collect(be)))
                st = s->chunk_done(s->chunk_ctx, stats, done);
        }
        if (!st && s->stop && *s->stop && done < s->num_samples)
            st = kvcal_fail(KVCAL_ERR_INTERRUPTED, "interrupted after %d of %d samples",
                            done, s->num_samples);
    }
    if (stats)
        kvcal_stats_begin_batch(stats);
    if (!st && stats)
        st = be->ops->collect(be);
    const kvcal_status done = be->ops->observe_into(be, NULL);
    return st ? st : done;
}

kvcal_status kvcal_exec_eval(kvcal_exec_t *x, const kvcal_exec_samples *s,
                             const kvcal_kv_sim_config *cfg, const kvcal_eval_tokens *tok,
                             kvcal_eval_layer_sums *sums)
{
    kvcal_backend *be = x->be;
    kvcal_kv_sim_t *sim = NULL;
    int chunk = 0;
    kvcal_status st = check_samples(x, s);
    if (st)
        return st;
    const int64_t predicted = kvcal_exec_predicted_tokens(s);
    if (tok->kld && (!tok->top || tok->keep || x->ref_rows != predicted))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "executor: comparing %lld predicted tokens with a reference of "
                          "%lld: keep the baseline's of the same samples first (kld and "
                          "top both set, keep 0)",
                          (long long)predicted, (long long)x->ref_rows);
    st = be->ops->head_prepare(be);
    /* the simulation's scratch first, the chunk's slots in the room left */
    if (!st && x->chunk) {
        st = be->ops->slots(be, 0);
        x->chunk = 0;
    }
    if (!st && tok->keep) {
        x->ref_rows = 0;
        if (!(st = be->ops->head_reference(be, predicted)))
            x->ref_rows = predicted;
    }
    if (!st && cfg->mode != KVCAL_KV_SIM_EXACT)
        st = kvcal_kv_sim_create(be, cfg, &sim);
    if (!st)
        st = size_chunks(x, num_batches(s), &chunk);
    const pass p = {0, 0, sim, NULL, NULL, 1, 0};
    kvcal_exec_progress prog = progress_start(x, s);
    int64_t done = 0;
    for (int b0 = 0; !st && b0 < s->num_samples; b0 += chunk * s->batch) {
        int n = 0;
        for (; n < chunk && b0 + n * s->batch < s->num_samples; n++)
            batch_at(x, n, s, b0 + n * s->batch);
        st = run_chunk(x, n, &p, s, &prog);
        for (int i = 0; !st && i < n; i++) {
            const kvcal_batch *b = &x->batches[i];
            const kvcal_head_ref ref = {x->ref_row, tok->keep, x->kld, x->top};
            if (!(st = be->ops->select_batch(be, i))) {
                fill_targets(x, b, &x->rows[i]);
                fill_ref_rows(x, b, &x->rows[i], done);
                st = be->ops->head_nll(be, x->target, x->nll, NULL,
                                       tok->keep || tok->kld ? &ref : NULL);
            }
            if (!st)
                done += add_tokens(x, b, &x->rows[i], tok, done);
        }
        if (!st)
            progress_chunk_done(x, n, s, &prog);
    }
    if (st && tok->keep) {
        be->ops->head_reference(be, 0);
        x->ref_rows = 0;
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
    const pass p = {0, 0, NULL, tap, ctx, logits != NULL || tap != NULL, 0};
    int chunk = 0;
    kvcal_status st = logits ? x->be->ops->head_prepare(x->be) : KVCAL_OK;
    if (!st)
        st = size_chunks(x, 1, &chunk);
    if (!st) {
        x->batches[0] = *b;
        st = run_chunk(x, 1, &p, NULL, NULL);
    }
    if (!st && logits) {
        fill_targets(x, b, &x->rows[0]);
        st = x->be->ops->head_nll(x->be, x->target, x->nll, logits, NULL);
    }
    return st;
}

/* The first layer of each kind (kvcal_model_next_layer_kind: a model's
 * dense and MoE layers) of one batch of the largest shape, observed into
 * scratch statistics that are then dropped: what a backend sets up on
 * first use (module loading, the GEMM algorithms of every shape a layer
 * has, the attention plan) happens here, while the loader brings the other
 * layers, and not in the first batch's forward pass. */
static kvcal_status warm_up(kvcal_exec_t *x)
{
    kvcal_backend *be = x->be;
    const kvcal_model_desc *d = x->desc;
    const int len = x->max_seq_len < d->max_seq_len ? x->max_seq_len : d->max_seq_len;
    const size_t n = (size_t)x->max_batch * (size_t)x->max_seq_len;
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    int32_t *ids = calloc(n + (size_t)x->max_batch, sizeof *ids);
    kvcal_stats_t *stats = NULL;
    int chunk = 0;
    kvcal_status st =
        ids ? kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &stats)
            : kvcal_fail(KVCAL_ERR_NOMEM, "executor: out of host memory");
    if (!st)
        st = size_chunks(x, 1, &chunk);
    if (!st)
        st = be->ops->observe_into(be, stats);
    if (!st) {
        int32_t *lengths = ids + n;
        for (int i = 0; i < x->max_batch; i++)
            lengths[i] = len;
        const pass p = {1, 0, NULL, NULL, NULL, 1, 0};
        x->batches[0] = (kvcal_batch){ids, lengths, NULL, x->max_batch, x->max_seq_len};
        st = be->ops->begin_batch(be, 0, &x->batches[0], &x->rows[0]);
        for (int l = 0; !st && l >= 0; l = kvcal_model_next_layer_kind(d, l)) {
            st = be->ops->use_layer(be, l);
            if (!st)
                st = run_layer(x, l, 0, &p);
        }
        if (!st)
            st = be->ops->batch_absmax(be, 0, x->bmax, x->bmax + lh);
    }
    const kvcal_status done = be->ops->observe_into(be, NULL);
    kvcal_stats_destroy(stats);
    free(ids);
    return st ? st : done;
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
    x->chunk_cap = opt->max_chunk_batches;
    x->whole_last_layer = opt->whole_last_layer;
    const size_t n = (size_t)bo->max_batch * (size_t)bo->max_seq_len;
    const size_t lh = (size_t)x->desc->num_layers * (size_t)x->desc->num_kv_heads;
    kvcal_status st = KVCAL_OK;
    x->target = malloc(n * sizeof *x->target);
    x->nll = malloc(n * sizeof *x->nll);
    x->kld = malloc(n * sizeof *x->kld);
    x->top = malloc(n * sizeof *x->top);
    x->ref_row = malloc(n * sizeof *x->ref_row);
    x->bmax = malloc(2 * lh * sizeof *x->bmax);
    if (!x->target || !x->nll || !x->kld || !x->top || !x->ref_row || !x->bmax) {
        st = kvcal_fail(KVCAL_ERR_NOMEM,
                        "executor: no host memory for batches of %d x %d tokens",
                        bo->max_batch, bo->max_seq_len);
        goto fail;
    }
    st = kvcal_backend_create(opt->device, model, bo, &x->be);
    if (!st && x->be->ops->warm_up)
        st = warm_up(x);
    if (!st && opt->profile) { /* after the warm-up: what it sets up is not counted */
        if (!x->be->ops->profile_mark)
            st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                            "executor: the %s backend has no op profile",
                            x->be->ops->name);
        else if (!(x->prof = kvcal_op_profile_create()))
            st = kvcal_fail(KVCAL_ERR_NOMEM, "executor: out of host memory");
        x->be->profile = x->prof != NULL;
    }
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
    free(x->batches);
    free(x->rows);
    free(x->bmax);
    free(x->target);
    free(x->nll);
    free(x->kld);
    free(x->top);
    free(x->ref_row);
    kvcal_op_profile_destroy(x->prof);
    free(x);
}

int kvcal_exec_layers_resident(const kvcal_exec_t *x)
{
    return x->be->layers_resident;
}

const char *kvcal_exec_fp8_fallback(const kvcal_exec_t *x)
{
    return x->be->fp8_fallback;
}

void kvcal_exec_load_stats(const kvcal_exec_t *x, kvcal_load_stats *out)
{
    memset(out, 0, sizeof *out);
    if (x->be->ops->load_stats)
        x->be->ops->load_stats(x->be, out);
}

void kvcal_exec_moe_ops(const kvcal_exec_t *x, long long *whole, long long *routed)
{
    *whole = x->moe_ops[0];
    *routed = x->moe_ops[1];
}

int kvcal_exec_op_profile(const kvcal_exec_t *x, const kvcal_op_time **out)
{
    *out = NULL;
    return x->prof ? kvcal_op_profile_times(x->prof, out) : 0;
}
