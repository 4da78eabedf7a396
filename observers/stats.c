/* observers/stats.c: create, fold, batch and merge the K/V statistics of
 * observers/stats.h (the CPU reference of the fused device observer). */
#include "observers/stats.h"

#include <math.h>
#include <stdlib.h>

#include "core/status.h"

static const char *kv_name(int kv)
{
    return kv == KVCAL_K ? "K" : "V";
}

// --- lifetime ----------------------------------------------------------------

/* 8-byte arrays first, then 4-byte ones in pairs (K and V: a multiple of 8
 * bytes), then ema_tensor: every array stays aligned. */
static size_t slab_bytes(int num_layers, int num_kv_heads, int head_dim)
{
    size_t lh = (size_t)num_layers * (size_t)num_kv_heads;
    return 2 * lh * KVCAL_HIST_BINS * sizeof(uint64_t) + 2 * lh * sizeof(double) +
           (size_t)num_layers * sizeof(int64_t) +
           2 * lh * (size_t)head_dim * sizeof(float) + 2 * lh * sizeof(float) +
           2 * (size_t)num_layers * sizeof(double);
}

size_t kvcal_stats_slab_bytes(const kvcal_stats_t *stats)
{
    return slab_bytes(stats->num_layers, stats->num_kv_heads, stats->head_dim);
}

kvcal_status kvcal_stats_create(int num_layers, int num_kv_heads, int head_dim,
                                kvcal_stats_t **out)
{
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_create: out is NULL");
    *out = NULL;
    if (num_layers < 1 || num_layers > 65536 || num_kv_heads < 1 ||
        num_kv_heads > 65536 || head_dim < 1 || head_dim > 65536)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_create: %d layers x %d kv heads x head_dim %d is "
                          "out of range (each must be in [1, 65536])",
                          num_layers, num_kv_heads, head_dim);
    size_t lh = (size_t)num_layers * (size_t)num_kv_heads;
    size_t n_hist = lh * KVCAL_HIST_BINS;
    size_t n_abs = lh * (size_t)head_dim;
    if (lh > ((size_t)1 << 26) || n_abs > ((size_t)1 << 32))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_create: %d layers x %d kv heads x head_dim %d is "
                          "too large for one statistics slab",
                          num_layers, num_kv_heads, head_dim);
    size_t bytes = slab_bytes(num_layers, num_kv_heads, head_dim);
    kvcal_stats_t *s = calloc(1, sizeof *s);
    unsigned char *slab = calloc(1, bytes);
    if (!s || !slab) {
        free(s);
        free(slab);
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "kvcal_stats_create: out of memory allocating %zu bytes of "
                          "statistics",
                          bytes);
    }
    s->num_layers = num_layers;
    s->num_kv_heads = num_kv_heads;
    s->head_dim = head_dim;
    s->num_bins = KVCAL_HIST_BINS;
    s->slab = slab;
    unsigned char *p = slab;
    for (int kv = 0; kv < 2; kv++) {
        s->hist[kv] = (uint64_t *)p;
        p += n_hist * sizeof(uint64_t);
    }
    for (int kv = 0; kv < 2; kv++) {
        s->ema[kv] = (double *)p;
        p += lh * sizeof(double);
    }
    s->tokens = (int64_t *)p;
    p += (size_t)num_layers * sizeof(int64_t);
    for (int kv = 0; kv < 2; kv++) {
        s->absmax[kv] = (float *)p;
        p += n_abs * sizeof(float);
    }
    for (int kv = 0; kv < 2; kv++) {
        s->batch_absmax[kv] = (float *)p;
        p += lh * sizeof(float);
    }
    for (int kv = 0; kv < 2; kv++) {
        s->ema_tensor[kv] = (double *)p;
        p += (size_t)num_layers * sizeof(double);
    }
    *out = s;
    return KVCAL_OK;
}

kvcal_status kvcal_stats_set_experts(kvcal_stats_t *stats, int num_experts)
{
    if (num_experts < 0 || num_experts > 65536)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "kvcal_stats_set_experts: %d experts is out of range [0, 65536]",
            num_experts);
    if (num_experts == stats->num_experts)
        return KVCAL_OK;
    int64_t *counts = NULL;
    if (num_experts && !(counts = calloc((size_t)stats->num_layers * (size_t)num_experts,
                                         sizeof *counts)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_stats_set_experts: out of memory");
    free(stats->expert_tokens);
    stats->expert_tokens = counts;
    stats->num_experts = num_experts;
    return KVCAL_OK;
}

kvcal_status kvcal_stats_set_q_heads(kvcal_stats_t *stats, int num_q_heads)
{
    if (num_q_heads < 0 || num_q_heads > 65536 ||
        (num_q_heads && num_q_heads % stats->num_kv_heads))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "kvcal_stats_set_q_heads: %d query heads: must be in [0, 65536] "
            "and a multiple of the %d kv heads",
            num_q_heads, stats->num_kv_heads);
    if (num_q_heads == stats->num_q_heads)
        return KVCAL_OK;
    float *q = NULL;
    if (num_q_heads &&
        !(q = calloc((size_t)stats->num_layers * (size_t)num_q_heads, sizeof *q)))
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_stats_set_q_heads: out of memory");
    free(stats->q_absmax);
    stats->q_absmax = q;
    stats->num_q_heads = num_q_heads;
    return KVCAL_OK;
}

static size_t channels(const kvcal_stats_t *s)
{
    return (size_t)s->num_layers * (size_t)s->num_kv_heads * (size_t)s->head_dim;
}

kvcal_status kvcal_stats_set_range(kvcal_stats_t *stats, int on)
{
    if (!on || stats->min[0]) {
        if (!on) {
            free(stats->min[0]);
            stats->min[0] = stats->min[1] = stats->max[0] = stats->max[1] = NULL;
        }
        return KVCAL_OK;
    }
    const size_t n = channels(stats);
    float *r = calloc(4 * n, sizeof *r);
    if (!r)
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_stats_set_range: out of memory");
    for (int kv = 0; kv < 2; kv++) {
        stats->min[kv] = r + (size_t)kv * 2 * n;
        stats->max[kv] = stats->min[kv] + n;
    }
    return KVCAL_OK;
}

kvcal_status kvcal_stats_clone(const kvcal_stats_t *src, kvcal_stats_t **out)
{
    kvcal_stats_t *s = NULL;
    kvcal_status st =
        kvcal_stats_create(src->num_layers, src->num_kv_heads, src->head_dim, &s);
    if (!st)
        st = kvcal_stats_set_experts(s, src->num_experts);
    if (!st)
        st = kvcal_stats_set_q_heads(s, src->num_q_heads);
    if (!st)
        st = kvcal_stats_set_range(s, src->min[0] != NULL);
    if (st) {
        kvcal_stats_destroy(s);
        *out = NULL;
        return st;
    }
    const size_t L = (size_t)src->num_layers,
                 n = L * (size_t)src->num_kv_heads * (size_t)src->head_dim;
    memcpy(s->slab, src->slab, kvcal_stats_slab_bytes(src));
    s->batches = src->batches;
    s->batch_start_tokens = src->batch_start_tokens;
    if (src->num_experts)
        memcpy(s->expert_tokens, src->expert_tokens,
               L * (size_t)src->num_experts * sizeof *s->expert_tokens);
    if (src->num_q_heads)
        memcpy(s->q_absmax, src->q_absmax,
               L * (size_t)src->num_q_heads * sizeof *s->q_absmax);
    for (int kv = 0; src->min[0] && kv < 2; kv++) {
        memcpy(s->min[kv], src->min[kv], n * sizeof(float));
        memcpy(s->max[kv], src->max[kv], n * sizeof(float));
    }
    *out = s;
    return KVCAL_OK;
}

void kvcal_stats_destroy(kvcal_stats_t *stats)
{
    if (!stats)
        return;
    free(stats->q_absmax);
    free(stats->min[0]);
    free(stats->expert_tokens);
    free(stats->slab);
    free(stats);
}

void kvcal_stats_reset(kvcal_stats_t *stats)
{
    size_t lh = (size_t)stats->num_layers * (size_t)stats->num_kv_heads;
    for (int kv = 0; kv < 2; kv++) {
        memset(stats->hist[kv], 0, lh * (size_t)stats->num_bins * sizeof(uint64_t));
        memset(stats->ema[kv], 0, lh * sizeof(double));
        memset(stats->absmax[kv], 0, lh * (size_t)stats->head_dim * sizeof(float));
        memset(stats->batch_absmax[kv], 0, lh * sizeof(float));
        memset(stats->ema_tensor[kv], 0, (size_t)stats->num_layers * sizeof(double));
    }
    memset(stats->tokens, 0, (size_t)stats->num_layers * sizeof(int64_t));
    if (stats->expert_tokens)
        memset(stats->expert_tokens, 0,
               (size_t)stats->num_layers * (size_t)stats->num_experts * sizeof(int64_t));
    if (stats->q_absmax)
        memset(stats->q_absmax, 0,
               (size_t)stats->num_layers * (size_t)stats->num_q_heads * sizeof(float));
    if (stats->min[0])
        memset(stats->min[0], 0, 4 * channels(stats) * sizeof(float));
    stats->batches = 0;
    stats->batch_start_tokens = 0;
}

// --- observing ---------------------------------------------------------------

static int token_is_observed(const kvcal_kv_block *blk, int b, int t)
{
    if (blk->valid)
        return blk->valid[(size_t)b * (size_t)blk->seq + (size_t)t] != 0;
    if (blk->lengths)
        return t < blk->lengths[b];
    return 1;
}

static kvcal_status check_block(const kvcal_stats_t *s, int layer, int kv,
                                const kvcal_kv_block *blk)
{
    const int H = s->num_kv_heads, D = s->head_dim;
    for (int b = 0; b < blk->batch; b++) {
        if (!blk->valid && blk->lengths &&
            (blk->lengths[b] < 0 || blk->lengths[b] > blk->seq))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "observe layer %d %s: sample %d has length %d outside "
                              "[0, %d]; pass lengths of the unpadded samples",
                              layer, kv_name(kv), b, blk->lengths[b], blk->seq);
        for (int t = 0; t < blk->seq; t++) {
            if (!token_is_observed(blk, b, t))
                continue;
            const float *row = blk->x + b * blk->sample_stride + t * blk->token_stride;
            for (int h = 0; h < H; h++) {
                const float *p = row + h * blk->head_stride;
                for (int c = 0; c < D; c++) {
                    if (isfinite(p[c]))
                        continue;
                    long long id = blk->sample_ids ? (long long)blk->sample_ids[b] : b;
                    return kvcal_fail(
                        KVCAL_ERR_NONFINITE,
                        "layer %d %s kv head %d: sample %lld token %d channel "
                        "%d is %g; no statistics were taken from this block "
                        "and no scale is written from it (check the model "
                        "weights and the input of that sample)",
                        layer, kv_name(kv), h, id, t, c, (double)p[c]);
                }
            }
        }
    }
    return KVCAL_OK;
}

kvcal_status kvcal_stats_observe_ref(kvcal_stats_t *stats, int layer, int kv,
                                     const kvcal_kv_block *blk)
{
    if (!stats || !blk)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_observe_ref: NULL argument");
    if (layer < 0 || layer >= stats->num_layers || (kv != KVCAL_K && kv != KVCAL_V))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_observe_ref: layer %d kv %d out of range (%d "
                          "layers; kv is KVCAL_K or KVCAL_V)",
                          layer, kv, stats->num_layers);
    if (blk->batch < 0 || blk->seq < 0 || (!blk->x && blk->batch > 0 && blk->seq > 0))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_observe_ref: layer %d %s: block of %d x %d tokens "
                          "with %s data",
                          layer, kv_name(kv), blk->batch, blk->seq,
                          blk->x ? "some" : "no");
    kvcal_status st = check_block(stats, layer, kv, blk);
    if (st)
        return st;

    const int H = stats->num_kv_heads, D = stats->head_dim, B = stats->num_bins;
    float *absmax = stats->absmax[kv] + (size_t)layer * H * D;                  // (H, D)
    uint64_t *hist = stats->hist[kv] + (size_t)layer * H * B;                   // (H, B)
    float *bmax = stats->batch_absmax[kv] + (size_t)layer * H;                  // (H)
    float *lo = stats->min[kv] ? stats->min[kv] + (size_t)layer * H * D : NULL; // (H, D)
    float *hi = stats->max[kv] ? stats->max[kv] + (size_t)layer * H * D : NULL; // (H, D)
    int64_t observed = 0;
    for (int b = 0; b < blk->batch; b++)
        for (int t = 0; t < blk->seq; t++) {
            if (!token_is_observed(blk, b, t))
                continue;
            observed++;
            const float *row = blk->x + b * blk->sample_stride + t * blk->token_stride;
            for (int h = 0; h < H; h++) {
                const float *p = row + h * blk->head_stride;
                float *am = absmax + (size_t)h * D;
                uint64_t *hh = hist + (size_t)h * B;
                float m = bmax[h];
                for (int c = 0; c < D; c++) {
                    float a = fabsf(p[c]);
                    am[c] = a > am[c] ? a : am[c];
                    m = a > m ? a : m;
                    hh[kvcal_hist_bin(a)]++;
                }
                bmax[h] = m;
                for (int c = 0; lo && c < D; c++) {
                    const size_t i = (size_t)h * D + c;
                    lo[i] = p[c] < lo[i] ? p[c] : lo[i];
                    hi[i] = p[c] > hi[i] ? p[c] : hi[i];
                }
            }
        }
    if (kv == KVCAL_K)
        stats->tokens[layer] += observed;
    return KVCAL_OK;
}

kvcal_status kvcal_stats_observe_q_ref(kvcal_stats_t *stats, int layer,
                                       const kvcal_kv_block *blk)
{
    if (!stats || !blk || !stats->q_absmax || layer < 0 || layer >= stats->num_layers ||
        blk->batch < 0 || blk->seq < 0 || (!blk->x && blk->batch > 0 && blk->seq > 0))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_observe_q_ref: layer %d: statistics that observe "
                          "queries (kvcal_stats_set_q_heads) and a block are needed",
                          layer);
    const int H = stats->num_q_heads, D = stats->head_dim;
    float *qa = stats->q_absmax + (size_t)layer * H; // (num_q_heads)
    for (int pass = 0; pass < 2; pass++)             /* checked whole, then folded */
        for (int b = 0; b < blk->batch; b++)
            for (int t = 0; t < blk->seq; t++) {
                if (!token_is_observed(blk, b, t))
                    continue;
                const float *row =
                    blk->x + b * blk->sample_stride + t * blk->token_stride;
                for (int h = 0; h < H; h++) {
                    const float *p = row + h * blk->head_stride;
                    for (int c = 0; c < D; c++) {
                        const float a = fabsf(p[c]);
                        if (pass)
                            qa[h] = a > qa[h] ? a : qa[h];
                        else if (!isfinite(p[c]))
                            return kvcal_fail(
                                KVCAL_ERR_NONFINITE,
                                "layer %d Q head %d: sample %lld token %d channel %d is "
                                "%g; no statistics were taken from this block and no "
                                "scale is written from it (check the model weights and "
                                "the input of that sample)",
                                layer, h,
                                blk->sample_ids ? (long long)blk->sample_ids[b] : b, t, c,
                                (double)p[c]);
                    }
                }
            }
    return KVCAL_OK;
}

float kvcal_stats_q_group_absmax(const kvcal_stats_t *stats, int layer, int h0, int n)
{
    const float *q = stats->q_absmax + (size_t)layer * stats->num_q_heads + h0;
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = q[i] > m ? q[i] : m;
    return m;
}

// --- batches -----------------------------------------------------------------

static int64_t total_tokens(const kvcal_stats_t *s)
{
    int64_t n = 0;
    for (int l = 0; l < s->num_layers; l++)
        n += s->tokens[l];
    return n;
}

void kvcal_stats_begin_batch(kvcal_stats_t *stats)
{
    size_t lh = (size_t)stats->num_layers * (size_t)stats->num_kv_heads;
    for (int kv = 0; kv < 2; kv++)
        memset(stats->batch_absmax[kv], 0, lh * sizeof(float));
    stats->batch_start_tokens = total_tokens(stats);
}

kvcal_status kvcal_stats_fold_batch(kvcal_stats_t *stats,
                                    const float *const batch_absmax[2], double decay)
{
    if (!(decay >= 0.0 && decay < 1.0))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_end_batch: EMA decay %g is outside [0, 1)", decay);
    const int H = stats->num_kv_heads;
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < stats->num_layers; l++) {
            double layer_max = 0.0;
            for (int h = 0; h < H; h++) {
                size_t i = (size_t)l * H + h;
                double x = batch_absmax[kv][i];
                double *e = &stats->ema[kv][i];
                *e = stats->batches == 0 ? x : decay * *e + (1.0 - decay) * x;
                layer_max = x > layer_max ? x : layer_max;
            }
            double *e = &stats->ema_tensor[kv][l];
            *e = stats->batches == 0 ? layer_max : decay * *e + (1.0 - decay) * layer_max;
        }
    stats->batches++;
    return KVCAL_OK;
}

kvcal_status kvcal_stats_end_batch(kvcal_stats_t *stats, double decay)
{
    if (!(decay >= 0.0 && decay < 1.0))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_stats_end_batch: EMA decay %g is outside [0, 1)", decay);
    kvcal_status st = KVCAL_OK;
    if (total_tokens(stats) != stats->batch_start_tokens)
        st = kvcal_stats_fold_batch(stats, (const float *const *)stats->batch_absmax,
                                    decay);
    kvcal_stats_begin_batch(stats);
    return st;
}

// --- merge -------------------------------------------------------------------

kvcal_status kvcal_stats_merge(kvcal_stats_t *dst, const kvcal_stats_t *src)
{
    if (!dst || !src)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_stats_merge: NULL argument");
    if (dst->num_layers != src->num_layers || dst->num_kv_heads != src->num_kv_heads ||
        dst->head_dim != src->head_dim || dst->num_bins != src->num_bins)
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "kvcal_stats_merge: statistics of %d layers x %d kv heads x "
            "head_dim %d (%d bins) cannot merge into %d x %d x %d (%d bins); "
            "they come from different models",
            src->num_layers, src->num_kv_heads, src->head_dim, src->num_bins,
            dst->num_layers, dst->num_kv_heads, dst->head_dim, dst->num_bins);
    if ((src->num_q_heads && src->num_q_heads != dst->num_q_heads) ||
        (src->min[0] && !dst->min[0]))
        return kvcal_fail(
            KVCAL_ERR_MISMATCH,
            "kvcal_stats_merge: statistics of %d query heads%s cannot merge "
            "into statistics of %d%s; observe the same things in both",
            src->num_q_heads, src->min[0] ? " with the signed range" : "",
            dst->num_q_heads, dst->min[0] ? " with the signed range" : "");
    if (src->num_experts && src->num_experts != dst->num_experts)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "kvcal_stats_merge: routing counts of %d experts cannot merge "
                          "into statistics of %d; they come from different models",
                          src->num_experts, dst->num_experts);
    size_t lh = (size_t)dst->num_layers * (size_t)dst->num_kv_heads;
    size_t n_abs = lh * (size_t)dst->head_dim, n_hist = lh * (size_t)dst->num_bins;
    for (int kv = 0; kv < 2; kv++) {
        for (size_t i = 0; i < n_abs; i++)
            if (src->absmax[kv][i] > dst->absmax[kv][i])
                dst->absmax[kv][i] = src->absmax[kv][i];
        for (size_t i = 0; i < n_hist; i++)
            dst->hist[kv][i] += src->hist[kv][i];
        for (size_t i = 0; i < lh; i++) {
            if (src->batch_absmax[kv][i] > dst->batch_absmax[kv][i])
                dst->batch_absmax[kv][i] = src->batch_absmax[kv][i];
            if (src->batches > 0 &&
                (dst->batches == 0 || src->ema[kv][i] > dst->ema[kv][i]))
                dst->ema[kv][i] = src->ema[kv][i];
        }
        for (int l = 0; l < dst->num_layers; l++)
            if (src->batches > 0 &&
                (dst->batches == 0 || src->ema_tensor[kv][l] > dst->ema_tensor[kv][l]))
                dst->ema_tensor[kv][l] = src->ema_tensor[kv][l];
    }
    for (int l = 0; l < dst->num_layers; l++)
        dst->tokens[l] += src->tokens[l];
    for (size_t i = 0; i < (size_t)dst->num_layers * (size_t)src->num_q_heads; i++)
        if (src->q_absmax[i] > dst->q_absmax[i])
            dst->q_absmax[i] = src->q_absmax[i];
    for (size_t i = 0; src->min[0] && i < n_abs; i++)
        for (int kv = 0; kv < 2; kv++) {
            if (src->min[kv][i] < dst->min[kv][i])
                dst->min[kv][i] = src->min[kv][i];
            if (src->max[kv][i] > dst->max[kv][i])
                dst->max[kv][i] = src->max[kv][i];
        }
    for (size_t i = 0; i < (size_t)dst->num_layers * (size_t)src->num_experts; i++)
        dst->expert_tokens[i] += src->expert_tokens[i];
    dst->batches += src->batches;
    dst->batch_start_tokens += src->batch_start_tokens;
    return KVCAL_OK;
}

float kvcal_stats_channels_absmax(const kvcal_stats_t *stats, int layer, int kv, int head,
                                  int first, int count)
{
    const float *a =
        stats->absmax[kv] +
        ((size_t)layer * stats->num_kv_heads + (size_t)head) * stats->head_dim + first;
    float m = 0.0f;
    for (int c = 0; c < count; c++)
        m = a[c] > m ? a[c] : m;
    return m;
}

float kvcal_stats_head_absmax(const kvcal_stats_t *stats, int layer, int kv, int head)
{
    return kvcal_stats_channels_absmax(stats, layer, kv, head, 0, stats->head_dim);
}
