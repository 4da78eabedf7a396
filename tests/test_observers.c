/* tests/test_observers.c: K/V statistics (observers/stats.h) and observers
 * (observers/observer.h): hand-computed cases for every observer, the
 * padding / NaN / zero-head rules, merge, and percentile / mse accuracy
 * against exact computations on the raw data. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "core/scale_rule.h"
#include "core/scales.h"
#include "core/status.h"
#include "observers/observer.h"
#include "observers/stats.h"
#include "tests/test_util.h"

// --- helpers -----------------------------------------------------------------

typedef struct rng {
    uint64_t s;
} rng;

static double rng_uniform(rng *r) /* (0, 1) */
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(r->s >> 11) + 0.5) / 9007199254740992.0;
}

static double rng_normal(rng *r)
{
    return sqrt(-2.0 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r));
}

enum { DIST_NORMAL, DIST_UNIFORM, DIST_LAPLACE, DIST_LOGNORMAL, DIST_COUNT };

static float rng_draw(rng *r, int dist)
{
    switch (dist) {
    case DIST_NORMAL:
        return (float)rng_normal(r);
    case DIST_UNIFORM:
        return (float)(8.0 * rng_uniform(r) - 4.0);
    case DIST_LAPLACE: {
        double u = rng_uniform(r) - 0.5;
        return (float)(u < 0 ? log(1 + 2 * u) : -log(1 - 2 * u));
    }
    default:
        return (float)exp(1.5 * rng_normal(r)) * (rng_uniform(r) < 0.5 ? -1.0f : 1.0f);
    }
}

static kvcal_stats_t *make_stats(int layers, int heads, int dim)
{
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL(kvcal_stats_create(layers, heads, dim, &s), KVCAL_OK);
    return s;
}

/* Observes x (tokens, heads, dim) as one unpadded sample into K and V. */
static void observe_dense(kvcal_stats_t *s, int layer, const float *x, int tokens)
{
    kvcal_kv_block blk =
        kvcal_kv_block_dense(x, 1, tokens, s->num_kv_heads, s->head_dim, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, layer, KVCAL_K, &blk), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, layer, KVCAL_V, &blk), KVCAL_OK);
}

static int stats_equal_order_independent(const kvcal_stats_t *a, const kvcal_stats_t *b)
{
    size_t lh = (size_t)a->num_layers * a->num_kv_heads;
    for (int kv = 0; kv < 2; kv++) {
        if (memcmp(a->absmax[kv], b->absmax[kv], lh * a->head_dim * sizeof(float)) ||
            memcmp(a->hist[kv], b->hist[kv], lh * a->num_bins * sizeof(uint64_t)))
            return 0;
    }
    return !memcmp(a->tokens, b->tokens, a->num_layers * sizeof(int64_t));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy's default ("linear") percentile of sorted values a (n). */
static double exact_percentile(const float *a, size_t n, double p)
{
    double pos = p / 100.0 * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n)
        return a[n - 1];
    return a[i] + (pos - (double)i) * (a[i + 1] - a[i]);
}

static double raw_fp8_error(const float *a, size_t n, float t)
{
    float s = kvcal_scale_from_absmax(t);
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)(kvcal_fp8_e4m3_round(a[i] / s) * s);
        e += d * d;
    }
    return e;
}

typedef struct warnings {
    int count;
    char last[256];
} warnings;

static void collect_warning(void *ctx, const char *msg)
{
    warnings *w = ctx;
    w->count++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

// --- lifetime and histogram bins ----------------------------------------------

static void stats_create_rejects_bad_sizes_and_destroy_null_is_noop(void)
{
    kvcal_stats_t *s = (kvcal_stats_t *)1;
    CU_ASSERT_EQUAL(kvcal_stats_create(0, 4, 8, &s), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(kvcal_stats_create(2, 4, 0, &s), KVCAL_ERR_INVALID_ARG);
    kvcal_stats_destroy(NULL);
    s = make_stats(3, 2, 5);
    CU_ASSERT_EQUAL(s->num_bins, KVCAL_HIST_BINS);
    CU_ASSERT_EQUAL(s->tokens[2], 0);
    CU_ASSERT_EQUAL(s->hist[KVCAL_V][3 * 2 * KVCAL_HIST_BINS - 1], 0);
    /* the slab holds the arrays in the documented order, back to back */
    const char *slab = s->slab;
    CU_ASSERT_PTR_EQUAL(s->hist[KVCAL_K], slab);
    CU_ASSERT_PTR_EQUAL(s->hist[KVCAL_V], s->hist[KVCAL_K] + 6 * KVCAL_HIST_BINS);
    CU_ASSERT_PTR_EQUAL(s->ema[KVCAL_K],
                        (const void *)(s->hist[KVCAL_V] + 6 * KVCAL_HIST_BINS));
    CU_ASSERT_PTR_EQUAL(s->tokens, (const void *)(s->ema[KVCAL_V] + 6));
    CU_ASSERT_PTR_EQUAL(s->absmax[KVCAL_K], (const void *)(s->tokens + 3));
    CU_ASSERT_PTR_EQUAL(s->batch_absmax[KVCAL_K], s->absmax[KVCAL_V] + 30);
    CU_ASSERT_PTR_EQUAL(s->ema_tensor[KVCAL_K],
                        (const void *)(s->batch_absmax[KVCAL_V] + 6));
    CU_ASSERT_PTR_EQUAL(slab + kvcal_stats_slab_bytes(s),
                        (const void *)(s->ema_tensor[KVCAL_V] + 3));
    kvcal_stats_destroy(s);
}

static void hist_bins_are_64_per_octave_from_2_pow_minus_20(void)
{
    CU_ASSERT_EQUAL(kvcal_hist_bin(0.0f), 0);
    CU_ASSERT_EQUAL(kvcal_hist_bin(-0.0f), 0);
    CU_ASSERT_EQUAL(kvcal_hist_bin(ldexpf(1.0f, -21)), 0);
    CU_ASSERT_EQUAL(kvcal_hist_bin(ldexpf(1.0f, -20)), 1);
    CU_ASSERT_EQUAL(kvcal_hist_bin(ldexpf(1.0f, -19)), 65);
    CU_ASSERT_EQUAL(kvcal_hist_bin(1.0f), 20 * 64 + 1);
    CU_ASSERT_EQUAL(kvcal_hist_bin(1.0f + 1.0f / 64), 20 * 64 + 2);
    CU_ASSERT_EQUAL(kvcal_hist_bin(-1.0f), 20 * 64 + 1);
    CU_ASSERT_EQUAL(kvcal_hist_bin(ldexpf(1.0f, 20)), KVCAL_HIST_BINS - 1);
    CU_ASSERT_EQUAL(kvcal_hist_bin(3e38f), KVCAL_HIST_BINS - 1);
    CU_ASSERT_EQUAL(kvcal_hist_bin_lower(1), ldexpf(1.0f, -20));
    CU_ASSERT_EQUAL(kvcal_hist_bin_lower(20 * 64 + 1), 1.0f);
    CU_ASSERT_EQUAL(kvcal_hist_bin_lower(20 * 64 + 33), 1.5f);
    int bad = 0;
    for (int b = 1; b < KVCAL_HIST_BINS; b++) {
        float lo = kvcal_hist_bin_lower(b);
        bad += kvcal_hist_bin(lo) != b;
        bad += kvcal_hist_bin(nextafterf(lo, 0.0f)) != b - 1;
        if (b > 1) /* bins are at most 1/64 of their lower edge wide */
            bad += lo - kvcal_hist_bin_lower(b - 1) > kvcal_hist_bin_lower(b - 1) / 64;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

// --- observing ----------------------------------------------------------------

static void observer_update_folds_absmax_histogram_and_tokens(void)
{
    kvcal_stats_t *s = make_stats(2, 2, 3);
    /* (batch 2, seq 2, heads 2, dim 3) */
    const float x[24] = {1,  -2,    0.5f, -4, 0,   0,  /* b0 t0 */
                         3,  0.25f, -1,   0,  0,   8,  /* b0 t1 */
                         -1, 1,     1,    2,  2,   -2, /* b1 t0 */
                         0,  0,     0,    0,  -16, 0}; /* b1 t1 */
    kvcal_kv_block blk = kvcal_kv_block_dense(x, 2, 2, 2, 3, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, 1, KVCAL_V, &blk), KVCAL_OK);
    const float want_h0[3] = {3, 2, 1}, want_h1[3] = {4, 16, 8};
    const float *am = s->absmax[KVCAL_V] + 1 * 2 * 3;
    CU_ASSERT_EQUAL(memcmp(am, want_h0, sizeof want_h0), 0);
    CU_ASSERT_EQUAL(memcmp(am + 3, want_h1, sizeof want_h1), 0);
    CU_ASSERT_EQUAL(s->batch_absmax[KVCAL_V][2], 3.0f);
    CU_ASSERT_EQUAL(s->batch_absmax[KVCAL_V][3], 16.0f);
    const uint64_t *h0 = s->hist[KVCAL_V] + (size_t)2 * KVCAL_HIST_BINS;
    const uint64_t *h1 = h0 + KVCAL_HIST_BINS;
    CU_ASSERT_EQUAL(h0[kvcal_hist_bin(1.0f)], 5);
    CU_ASSERT_EQUAL(h0[0], 3);
    CU_ASSERT_EQUAL(h0[kvcal_hist_bin(0.25f)], 1);
    CU_ASSERT_EQUAL(h1[0], 6);
    CU_ASSERT_EQUAL(h1[kvcal_hist_bin(2.0f)], 3);
    CU_ASSERT_EQUAL(h1[kvcal_hist_bin(16.0f)], 1);
    /* V does not count tokens; K does */
    CU_ASSERT_EQUAL(s->tokens[1], 0);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, 1, KVCAL_K, &blk), KVCAL_OK);
    CU_ASSERT_EQUAL(s->tokens[1], 4);
    CU_ASSERT_EQUAL(s->tokens[0], 0);
    CU_ASSERT_EQUAL(kvcal_stats_head_absmax(s, 1, KVCAL_K, 1), 16.0f);
    CU_ASSERT_EQUAL(kvcal_stats_head_absmax(s, 0, KVCAL_K, 1), 0.0f);
    kvcal_stats_destroy(s);
}

static void observer_update_ignores_padding(void)
{
    kvcal_stats_t *a = make_stats(1, 2, 4), *b = make_stats(1, 2, 4),
                  *c = make_stats(1, 2, 4);
    enum { SEQ = 5, W = 2 * 4 };
    float x[3 * SEQ * W]; /* (batch 3, seq 5, heads 2, dim 4) */
    rng r = {7};
    for (int i = 0; i < 3 * SEQ * W; i++)
        x[i] = rng_draw(&r, DIST_NORMAL);
    const int32_t lengths[3] = {5, 2, 0};
    for (int bb = 0; bb < 3; bb++) /* padding holds garbage, NaN included */
        for (int t = lengths[bb]; t < SEQ; t++)
            for (int i = 0; i < W; i++)
                x[(bb * SEQ + t) * W + i] = (t + i) % 2 ? NAN : 1e30f;
    kvcal_kv_block blk = kvcal_kv_block_dense(x, 3, SEQ, 2, 4, lengths, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(a, 0, KVCAL_K, &blk), KVCAL_OK);
    CU_ASSERT_EQUAL(a->tokens[0], 7);

    /* the same tokens unpadded give the same statistics */
    kvcal_kv_block s0 = kvcal_kv_block_dense(x, 1, 5, 2, 4, NULL, NULL);
    kvcal_kv_block s1 = kvcal_kv_block_dense(x + SEQ * W, 1, 2, 2, 4, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(b, 0, KVCAL_K, &s0), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(b, 0, KVCAL_K, &s1), KVCAL_OK);
    CU_ASSERT_TRUE(stats_equal_order_independent(a, b));

    /* a validity mask (here: left padding of sample 1) works the same way */
    float y[2 * SEQ * W];
    memcpy(y, x, SEQ * W * sizeof(float));
    for (int i = 0; i < SEQ * W; i++)
        y[SEQ * W + i] = NAN;
    memcpy(y + (SEQ + 3) * W, x + SEQ * W, 2 * W * sizeof(float));
    const uint8_t valid[2 * SEQ] = {1, 1, 1, 1, 1, 0, 0, 0, 1, 1};
    kvcal_kv_block mb = kvcal_kv_block_dense(y, 2, SEQ, 2, 4, NULL, NULL);
    mb.valid = valid;
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(c, 0, KVCAL_K, &mb), KVCAL_OK);
    CU_ASSERT_TRUE(stats_equal_order_independent(a, c));

    const int32_t too_long[1] = {6};
    kvcal_kv_block bad = kvcal_kv_block_dense(x, 1, SEQ, 2, 4, too_long, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(c, 0, KVCAL_K, &bad), KVCAL_ERR_INVALID_ARG);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
    kvcal_stats_destroy(c);
}

static void observer_update_reads_strided_fused_qkv_rows(void)
{
    /* rows of a fused (tokens, q 4 heads | k 2 heads | v 2 heads, dim 3) buffer */
    enum { T = 6, D = 3, ROW = 8 * D };
    float qkv[T * ROW], k[T * 2 * D];
    rng r = {11};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < ROW; i++) {
            qkv[t * ROW + i] = rng_draw(&r, DIST_LAPLACE);
            if (i >= 4 * D && i < 6 * D)
                k[t * 2 * D + i - 4 * D] = qkv[t * ROW + i];
        }
    kvcal_stats_t *a = make_stats(1, 2, D), *b = make_stats(1, 2, D);
    kvcal_kv_block fused = {.x = qkv + 4 * D,
                            .batch = 1,
                            .seq = T,
                            .sample_stride = T * ROW,
                            .token_stride = ROW,
                            .head_stride = D};
    kvcal_kv_block dense = kvcal_kv_block_dense(k, 1, T, 2, D, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(a, 0, KVCAL_K, &fused), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(b, 0, KVCAL_K, &dense), KVCAL_OK);
    CU_ASSERT_TRUE(stats_equal_order_independent(a, b));
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
}

static void observer_update_rejects_nan_naming_layer_head_sample(void)
{
    kvcal_stats_t *s = make_stats(4, 2, 3);
    float x[2 * 3 * 2 * 3]; /* (batch 2, seq 3, heads 2, dim 3) */
    for (int i = 0; i < 36; i++)
        x[i] = 1.0f + (float)i;
    x[((1 * 3 + 2) * 2 + 1) * 3 + 2] = NAN; /* sample 1, token 2, head 1, channel 2 */
    const int64_t ids[2] = {40, 17};
    kvcal_kv_block blk = kvcal_kv_block_dense(x, 2, 3, 2, 3, NULL, ids);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, 3, KVCAL_V, &blk), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 3 V kv head 1: sample 17 token 2 channel 2"));
    /* nothing of the block was folded, though its first values were fine */
    CU_ASSERT_EQUAL(kvcal_stats_head_absmax(s, 3, KVCAL_V, 0), 0.0f);
    CU_ASSERT_EQUAL(
        s->hist[KVCAL_V][(size_t)(3 * 2) * KVCAL_HIST_BINS + kvcal_hist_bin(1.0f)], 0);
    CU_ASSERT_EQUAL(s->batch_absmax[KVCAL_V][6], 0.0f);

    x[((1 * 3 + 2) * 2 + 1) * 3 + 2] = 5.0f;
    x[0] = -INFINITY;
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, 0, KVCAL_K, &blk), KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("layer 0 K kv head 0: sample 40 token 0 channel 0"));
    CU_ASSERT_EQUAL(s->tokens[0], 0);
    kvcal_stats_destroy(s);
}

// --- batches and observers ----------------------------------------------------

static void ema_takes_first_batch_then_decays_and_skips_empty_batches(void)
{
    kvcal_stats_t *s = make_stats(1, 1, 2);
    const float b1[2] = {2.0f, -1.0f}, b2[2] = {0.5f, -4.0f}, b3[2] = {1.0f, 0.0f};
    kvcal_stats_begin_batch(s);
    observe_dense(s, 0, b1, 1);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.5), KVCAL_OK);
    CU_ASSERT_EQUAL(s->ema[KVCAL_K][0], 2.0);
    CU_ASSERT_EQUAL(s->batch_absmax[KVCAL_K][0], 0.0f);
    observe_dense(s, 0, b2, 1);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.5), KVCAL_OK);
    CU_ASSERT_EQUAL(s->ema[KVCAL_K][0], 3.0);                 /* 0.5 * 2 + 0.5 * 4 */
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.5), KVCAL_OK); /* empty */
    CU_ASSERT_EQUAL(s->batches, 2);
    observe_dense(s, 0, b3, 1);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.75), KVCAL_OK);
    CU_ASSERT_EQUAL(s->ema[KVCAL_V][0], 2.5); /* 0.75 * 3 + 0.25 * 1 */
    CU_ASSERT_EQUAL(s->batches, 3);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 1.0), KVCAL_ERR_INVALID_ARG);

    kvcal_observer_config cfg;
    CU_ASSERT_EQUAL(kvcal_observer_parse("ema:0.75", &cfg), KVCAL_OK);
    float t = 0;
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t), KVCAL_OK);
    CU_ASSERT_EQUAL(t, 2.5f);
    kvcal_stats_reset(s);
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t),
                    KVCAL_ERR_INVALID_ARG);
    kvcal_stats_destroy(s);
}

/* Per tensor, ema averages the layer's per-batch max over all heads: with
 * the largest head changing from batch to batch that is larger than the
 * max of the heads' own averages. */
static void ema_per_tensor_averages_the_layers_batch_max(void)
{
    kvcal_stats_t *s = make_stats(1, 2, 1);
    const float b1[2] = {4.0f, 1.0f}, b2[2] = {-1.0f, -4.0f}; /* (token, head) */
    observe_dense(s, 0, b1, 1);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.5), KVCAL_OK);
    observe_dense(s, 0, b2, 1);
    CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.5), KVCAL_OK);
    CU_ASSERT_EQUAL(s->ema[KVCAL_K][0], 2.5); /* 0.5 * 4 + 0.5 * 1 */
    CU_ASSERT_EQUAL(s->ema[KVCAL_K][1], 2.5);
    CU_ASSERT_EQUAL(s->ema_tensor[KVCAL_K][0], 4.0);
    CU_ASSERT_EQUAL(s->ema_tensor[KVCAL_V][0], 4.0);

    kvcal_observer_config cfg;
    CU_ASSERT_EQUAL(kvcal_observer_parse("ema:0.5", &cfg), KVCAL_OK);
    kvcal_scales_t *sc = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(1, 2, &sc), KVCAL_OK);
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_TENSOR, sc, NULL, NULL),
        KVCAL_OK);
    CU_ASSERT_EQUAL(sc->k_head[0], kvcal_scale_from_absmax(4.0f));
    CU_ASSERT_EQUAL(sc->v_head[1], kvcal_scale_from_absmax(4.0f));
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, sc, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(sc->k_head[0], kvcal_scale_from_absmax(2.5f));

    /* merged into empty statistics, it is kept; reset clears it */
    kvcal_stats_t *e = make_stats(1, 2, 1);
    CU_ASSERT_EQUAL(kvcal_stats_merge(e, s), KVCAL_OK);
    CU_ASSERT_EQUAL(e->ema_tensor[KVCAL_K][0], 4.0);
    kvcal_stats_reset(s);
    CU_ASSERT_EQUAL(s->ema_tensor[KVCAL_K][0], 0.0);
    kvcal_scales_destroy(sc);
    kvcal_stats_destroy(e);
    kvcal_stats_destroy(s);
}

static void observer_parse_accepts_each_kind_and_names_the_choices(void)
{
    kvcal_observer_config c;
    CU_ASSERT_EQUAL(kvcal_observer_parse("minmax", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kind, KVCAL_OBSERVER_MINMAX);
    CU_ASSERT_EQUAL(kvcal_observer_parse("ema", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kind, KVCAL_OBSERVER_EMA);
    CU_ASSERT_EQUAL(c.ema_decay, KVCAL_OBSERVER_EMA_DECAY_DEFAULT);
    CU_ASSERT_EQUAL(kvcal_observer_parse("ema:0.9", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.ema_decay, 0.9);
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:99.99", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kind, KVCAL_OBSERVER_PERCENTILE);
    CU_ASSERT_EQUAL(c.percentile, 99.99);
    CU_ASSERT_EQUAL(kvcal_observer_parse("mse", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(c.kind, KVCAL_OBSERVER_MSE);
    char buf[64];
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:99.9", &c), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_observer_params_json(&c, buf, sizeof buf), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(buf, "{\"percentile\": 99.9}");
    CU_ASSERT_EQUAL(kvcal_observer_params_json(&c, buf, 8), KVCAL_ERR_INVALID_ARG);

    const char *bad[] = {"",
                         "max",
                         "minmax:1",
                         "mse:2",
                         "ema:1",
                         "ema:-0.1",
                         "ema:x",
                         "percentile",
                         "percentile:0",
                         "percentile:101",
                         "percentile:99.9x",
                         "percentile:nan",
                         "EMA"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c.kind = KVCAL_OBSERVER_MSE;
        CU_ASSERT_EQUAL(kvcal_observer_parse(bad[i], &c), KVCAL_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(c.kind, KVCAL_OBSERVER_MSE);
        CU_ASSERT(kvcal_test_error_has(bad[i]));
    }
    CU_ASSERT(kvcal_test_error_has("minmax"));
}

static void minmax_scales_per_head_and_per_tensor(void)
{
    kvcal_stats_t *s = make_stats(2, 3, 2);
    /* layer 0: K heads absmax 448, 224, 1; V heads 1, 2, 4 */
    const float x[2 * 3 * 2] = {448, -3, 0, -224, 1, 0,  /* t0: K rows */
                                0,   0,  1, 0,    0, 0}; /* t1 */
    const float v[2 * 3 * 2] = {1, 0, 0, 2, 0, -4, 0, 0, 0, 0, 0, 0};
    kvcal_kv_block kb = kvcal_kv_block_dense(x, 1, 2, 3, 2, NULL, NULL);
    kvcal_kv_block vb = kvcal_kv_block_dense(v, 1, 2, 3, 2, NULL, NULL);
    for (int l = 0; l < 2; l++) {
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_K, &kb), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_V, &vb), KVCAL_OK);
    }
    kvcal_scales_t *sc = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 3, &sc), KVCAL_OK);
    kvcal_observer_config cfg = kvcal_observer_default();
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, sc, NULL, NULL), KVCAL_OK);
    float k, vv;
    kvcal_scales_get_head(sc, 1, 0, &k, &vv);
    CU_ASSERT_EQUAL(k, 1.0f);
    CU_ASSERT_EQUAL(vv, kvcal_scale_from_absmax(1.0f));
    kvcal_scales_get_head(sc, 1, 1, &k, &vv);
    CU_ASSERT_EQUAL(k, 0.5f);
    CU_ASSERT_EQUAL(vv, kvcal_scale_from_absmax(2.0f));
    kvcal_scales_get_head(sc, 0, 2, &k, &vv);
    CU_ASSERT_EQUAL(k, kvcal_scale_from_absmax(1.0f));
    CU_ASSERT_EQUAL(vv, kvcal_scale_from_absmax(4.0f));
    CU_ASSERT_EQUAL(sc->k_absmax[kvcal_scales_index(sc, 0, 1)], 224.0f);
    CU_ASSERT_EQUAL(sc->k_clip[0], 0.0f);
    CU_ASSERT_EQUAL(sc->granularity, KVCAL_GRANULARITY_HEAD);
    CU_ASSERT_STRING_EQUAL(sc->provenance.observer, "minmax");
    CU_ASSERT_STRING_EQUAL(sc->provenance.observer_params, "{}");
    CU_ASSERT_EQUAL(sc->provenance.num_tokens, 2);
    CU_ASSERT_EQUAL(sc->has_absmax, 1);

    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_TENSOR, sc, NULL, NULL),
        KVCAL_OK);
    for (int h = 0; h < 3; h++) {
        kvcal_scales_get_head(sc, 0, h, &k, &vv);
        CU_ASSERT_EQUAL(k, 1.0f);
        CU_ASSERT_EQUAL(vv, kvcal_scale_from_absmax(4.0f));
    }
    CU_ASSERT_EQUAL(sc->granularity, KVCAL_GRANULARITY_TENSOR);

    kvcal_scales_t *wrong = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 4, &wrong), KVCAL_OK);
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, wrong, NULL, NULL),
        KVCAL_ERR_MISMATCH);
    kvcal_scales_destroy(wrong);
    kvcal_scales_destroy(sc);
    kvcal_stats_destroy(s);
}

static void zero_head_gets_floor_scale_and_warning(void)
{
    kvcal_stats_t *s = make_stats(2, 2, 2);
    const float x[2 * 2] = {0.0f, 0.0f, 3.0f, -1.0f}; /* head 0 all zero */
    observe_dense(s, 0, x, 1);
    observe_dense(s, 1, x, 1);
    kvcal_scales_t *sc = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &sc), KVCAL_OK);
    kvcal_observer_config cfg;
    const char *kinds[] = {"minmax", "percentile:99", "mse"};
    for (int i = 0; i < 3; i++) {
        warnings w = {0, ""};
        CU_ASSERT_EQUAL(kvcal_observer_parse(kinds[i], &cfg), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, sc,
                                              collect_warning, &w),
                        KVCAL_OK);
        CU_ASSERT_EQUAL(w.count, 4); /* 2 layers x K and V */
        CU_ASSERT_PTR_NOT_NULL(
            strstr(w.last, "layer 1 V kv head 0 never saw a non-zero"));
        CU_ASSERT_PTR_NOT_NULL(strstr(w.last, "floor"));
        CU_ASSERT_EQUAL(sc->k_head[kvcal_scales_index(sc, 1, 0)], KVCAL_SCALE_FLOOR);
        CU_ASSERT_TRUE(sc->k_head[kvcal_scales_index(sc, 1, 1)] > KVCAL_SCALE_FLOOR);
        CU_ASSERT_EQUAL(kvcal_scales_check_finite(sc, "t"), KVCAL_OK);
    }
    /* per tensor the zero head shares the layer's scale, still with a warning */
    warnings w = {0, ""};
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_TENSOR, sc, collect_warning, &w),
        KVCAL_OK);
    CU_ASSERT_EQUAL(w.count, 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.last, "shares the layer's scale"));
    /* a layer nothing was observed in: every head floor, no crash without warn */
    kvcal_stats_t *empty = make_stats(2, 2, 2);
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(empty, &cfg, KVCAL_GRANULARITY_HEAD, sc, NULL, NULL),
        KVCAL_OK);
    CU_ASSERT_EQUAL(sc->v_head[kvcal_scales_index(sc, 1, 1)], KVCAL_SCALE_FLOOR);
    CU_ASSERT_EQUAL(sc->v_clip[1], 0.0f);
    kvcal_stats_destroy(empty);
    kvcal_scales_destroy(sc);
    kvcal_stats_destroy(s);
}

static void percentile_interpolates_inside_the_bin(void)
{
    /* 50 values of 1.0 and 50 of 3.0 in one head of dim 1 */
    kvcal_stats_t *s = make_stats(1, 1, 1);
    float x[100];
    for (int i = 0; i < 100; i++)
        x[i] = i % 2 ? 1.0f : -3.0f;
    observe_dense(s, 0, x, 100);
    kvcal_observer_config cfg;
    float t;
    /* rank 25 of 100 lies halfway into the 50 counts of bin [1, 1 + 1/64) */
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:25", &cfg), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t), KVCAL_OK);
    CU_ASSERT_EQUAL(t, 1.0f + 0.5f / 64);
    /* 3.0 is a bin's lower edge and the absmax: that bin is [3, 3] */
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:75", &cfg), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t), KVCAL_OK);
    CU_ASSERT_EQUAL(t, 3.0f);
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:100", &cfg), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_V, 0, &t), KVCAL_OK);
    CU_ASSERT_EQUAL(t, 3.0f);
    /* values clip above 464 * scale: a bound halfway into the 1.0 bin
     * ((1 + 0.5/64) / 464, rounded to float: atol 1e-5) leaves 25 of its
     * values and all 3.0 above; 2^-8 (bound 1.8125) the 3.0 only; 2^-7
     * (3.625) none; 2^-9 (0.90625) all */
    KVCAL_ASSERT_CLOSE(
        kvcal_stats_clip_fraction(s, 0, KVCAL_K, 0, (1.0f + 0.5f / 64) / 464.0f), 0.75,
        1e-5, 0.0);
    CU_ASSERT_EQUAL(kvcal_stats_clip_fraction(s, 0, KVCAL_K, 0, 0x1p-8f), 0.5);
    CU_ASSERT_EQUAL(kvcal_stats_clip_fraction(s, 0, KVCAL_K, 0, 0x1p-7f), 0.0);
    CU_ASSERT_EQUAL(kvcal_stats_clip_fraction(s, 0, KVCAL_K, 0, 0x1p-9f), 1.0);
    kvcal_stats_destroy(s);
}

/* k_clip / v_clip count what kvcal eval counts: values that saturate when
 * quantized, |x| / scale > 464 (kvcal_value_clips), not every |x| above
 * 448 * scale. Here 5 of 100 values lie between the two bounds (and no bin
 * straddles either), so the estimate equals eval's exact count. */
static void clip_estimate_counts_values_past_464_times_scale_as_eval_does(void)
{
    kvcal_stats_t *s = make_stats(1, 1, 1);
    float x[100];
    for (int i = 0; i < 100; i++)
        x[i] = i < 90 ? 1.0f : i < 95 ? 1.03125f : 2.0f;
    observe_dense(s, 0, x, 100);
    kvcal_scales_t *sc = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(1, 1, &sc), KVCAL_OK);
    kvcal_observer_config cfg;
    CU_ASSERT_EQUAL(kvcal_observer_parse("percentile:90", &cfg), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, sc, NULL, NULL), KVCAL_OK);
    const float scale = sc->k_head[0];
    int at_448 = 0, clips = 0;
    for (int i = 0; i < 100; i++) {
        at_448 += x[i] > 448.0f * scale;
        clips += kvcal_value_clips(x[i], scale);
    }
    CU_ASSERT_EQUAL(at_448, 10);
    CU_ASSERT_EQUAL(clips, 5);
    CU_ASSERT_EQUAL(sc->k_clip[0], 0.05f);
    CU_ASSERT_EQUAL(sc->v_clip[0], 0.05f);
    CU_ASSERT_EQUAL(kvcal_stats_clip_fraction(s, 0, KVCAL_K, 0, scale), 0.05);
    kvcal_scales_destroy(sc);
    kvcal_stats_destroy(s);
}

static void percentile_within_1pct_of_exact_sort(void)
{
    enum { N = 200000, D = 8 };
    float *x = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float));
    CU_ASSERT_FATAL(x && a);
    const double ps[] = {50, 90, 99, 99.9, 99.99};
    double worst = 0.0;
    for (int dist = 0; dist < DIST_COUNT; dist++) {
        rng r = {100 + (uint64_t)dist};
        for (int i = 0; i < N; i++) {
            x[i] = rng_draw(&r, dist);
            a[i] = fabsf(x[i]);
        }
        qsort(a, N, sizeof(float), cmp_float);
        kvcal_stats_t *s = make_stats(1, 1, D);
        observe_dense(s, 0, x, N / D);
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
            kvcal_observer_config cfg = kvcal_observer_default();
            cfg.kind = KVCAL_OBSERVER_PERCENTILE;
            cfg.percentile = ps[i];
            float t;
            CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t), KVCAL_OK);
            double want = exact_percentile(a, N, ps[i]);
            double rel = fabs(t - want) / want;
            worst = rel > worst ? rel : worst;
            KVCAL_ASSERT_CLOSE(t, want, 0.0, 0.01);
        }
        kvcal_stats_destroy(s);
    }
    printf("(worst rel. error %.2e) ", worst);
    free(x);
    free(a);
}

/* Per tensor, percentile and mse read the layer's values as one tensor:
 * the threshold of 2 heads equals that of 1 head holding all their values
 * (not the max of the heads' thresholds, 100 for head 1's 99th percentile
 * here, where the tensor's 99th lies among the 1.0s). */
static void tensor_percentile_and_mse_use_the_whole_layers_histogram(void)
{
    enum { T = 1000 };
    float x[2 * T]; // (T, 2 heads, dim 1)
    for (int t = 0; t < T; t++) {
        x[2 * t] = 1.0f;
        x[2 * t + 1] = t < 20 ? -100.0f : 1.0f;
    }
    kvcal_stats_t *two = make_stats(1, 2, 1), *one = make_stats(1, 1, 1);
    observe_dense(two, 0, x, T);
    observe_dense(one, 0, x, 2 * T);
    const char *kinds[] = {"percentile:99", "mse"};
    for (int i = 0; i < 2; i++) {
        kvcal_observer_config cfg;
        CU_ASSERT_EQUAL_FATAL(kvcal_observer_parse(kinds[i], &cfg), KVCAL_OK);
        float t1;
        CU_ASSERT_EQUAL_FATAL(kvcal_stats_threshold(one, &cfg, 0, KVCAL_K, 0, &t1),
                              KVCAL_OK);
        kvcal_scales_t *sc = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(1, 2, &sc), KVCAL_OK);
        CU_ASSERT_EQUAL(
            kvcal_stats_to_scales(two, &cfg, KVCAL_GRANULARITY_TENSOR, sc, NULL, NULL),
            KVCAL_OK);
        CU_ASSERT_EQUAL(sc->k_head[0], kvcal_scale_from_absmax(t1));
        CU_ASSERT_EQUAL(sc->k_head[1], kvcal_scale_from_absmax(t1));
        CU_ASSERT_EQUAL(sc->v_head[0], kvcal_scale_from_absmax(t1));
        CU_ASSERT_EQUAL(sc->k_absmax[1], 100.0f);
        kvcal_scales_destroy(sc);
    }
    kvcal_stats_destroy(two);
    kvcal_stats_destroy(one);
}

static void mse_threshold_of_identical_values_is_that_value(void)
{
    kvcal_stats_t *s = make_stats(1, 1, 4);
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = i % 3 ? 2.0f : -2.0f;
    observe_dense(s, 0, x, 16);
    kvcal_observer_config cfg;
    CU_ASSERT_EQUAL(kvcal_observer_parse("mse", &cfg), KVCAL_OK);
    float t;
    CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_V, 0, &t), KVCAL_OK);
    CU_ASSERT_EQUAL(t, 2.0f);
    kvcal_stats_destroy(s);
}

static void mse_error_within_1pct_of_best_threshold_on_raw_data(void)
{
    enum { N = 40000, D = 4, GRID = 400 };
    float *x = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float));
    CU_ASSERT_FATAL(x && a);
    double worst = 0.0;
    for (int dist = 0; dist < DIST_COUNT; dist++) {
        rng r = {200 + (uint64_t)dist};
        for (int i = 0; i < N; i++) {
            x[i] = rng_draw(&r, dist);
            a[i] = fabsf(x[i]);
        }
        qsort(a, N, sizeof(float), cmp_float);
        kvcal_stats_t *s = make_stats(1, 1, D);
        observe_dense(s, 0, x, N / D);
        kvcal_observer_config cfg;
        CU_ASSERT_EQUAL(kvcal_observer_parse("mse", &cfg), KVCAL_OK);
        float t;
        CU_ASSERT_EQUAL(kvcal_stats_threshold(s, &cfg, 0, KVCAL_K, 0, &t), KVCAL_OK);
        double lo = exact_percentile(a, N, 50), hi = a[N - 1];
        CU_ASSERT(t >= lo * 0.99 && t <= hi);
        double best = INFINITY;
        for (int g = 0; g <= GRID; g++) {
            double e = raw_fp8_error(a, N, (float)(lo * pow(hi / lo, (double)g / GRID)));
            best = e < best ? e : best;
        }
        double got = raw_fp8_error(a, N, t);
        worst = got / best - 1 > worst ? got / best - 1 : worst;
        KVCAL_ASSERT_CLOSE(got, best, 0.0, 0.01);
        if (dist == DIST_UNIFORM) /* a flat top: clipping below absmax pays */
            CU_ASSERT(t < hi && got < raw_fp8_error(a, N, (float)hi) * 0.99);
        kvcal_stats_destroy(s);
    }
    printf("(worst excess error %.2e) ", worst);
    free(x);
    free(a);
}

// --- merge --------------------------------------------------------------------

/* Observes `tokens` tokens (layers 3, heads 2, dim 5) split over `workers`
 * stats in contiguous chunks of `chunk` tokens a batch, then merges them
 * left to right (right_fold = 0) or right to left. */
static kvcal_stats_t *observe_split(const float *x, int tokens, int workers, int chunk,
                                    int right_fold)
{
    enum { L = 3, H = 2, D = 5 };
    kvcal_stats_t *w[8] = {NULL};
    for (int i = 0; i < workers; i++)
        w[i] = make_stats(L, H, D);
    int per = (tokens + workers - 1) / workers;
    for (int i = 0; i < workers; i++) {
        int start = i * per, end = start + per < tokens ? start + per : tokens;
        for (int t = start; t < end; t += chunk) {
            int n = end - t < chunk ? end - t : chunk;
            for (int l = 0; l < L; l++) {
                kvcal_kv_block blk = kvcal_kv_block_dense(
                    x + ((size_t)l * tokens + t) * H * D, 1, n, H, D, NULL, NULL);
                CU_ASSERT_EQUAL(kvcal_stats_observe_ref(w[i], l, KVCAL_K, &blk),
                                KVCAL_OK);
                CU_ASSERT_EQUAL(kvcal_stats_observe_ref(w[i], l, KVCAL_V, &blk),
                                KVCAL_OK);
            }
            CU_ASSERT_EQUAL(kvcal_stats_end_batch(w[i], 0.9), KVCAL_OK);
        }
    }
    if (right_fold) {
        for (int i = workers - 2; i >= 0; i--) {
            CU_ASSERT_EQUAL(kvcal_stats_merge(w[i], w[i + 1]), KVCAL_OK);
            kvcal_stats_destroy(w[i + 1]);
        }
    } else {
        for (int i = 1; i < workers; i++) {
            CU_ASSERT_EQUAL(kvcal_stats_merge(w[0], w[i]), KVCAL_OK);
            kvcal_stats_destroy(w[i]);
        }
    }
    return w[0];
}

static void merge_over_1_2_7_workers_gives_identical_statistics(void)
{
    enum { T = 301, L = 3, H = 2, D = 5 };
    float *x = malloc((size_t)L * T * H * D * sizeof(float)); /* (L, T, H, D) */
    CU_ASSERT_FATAL(x != NULL);
    rng r = {5};
    for (int i = 0; i < L * T * H * D; i++)
        x[i] = rng_draw(&r, i % DIST_COUNT);
    kvcal_stats_t *one = observe_split(x, T, 1, T, 0);
    CU_ASSERT_EQUAL(one->batches, 1);
    const char *kinds[] = {"minmax", "percentile:99", "mse"};
    const int workers[] = {2, 7, 7, 2};
    const int chunks[] = {50, 13, 1000, 7};
    for (int c = 0; c < 4; c++) {
        kvcal_stats_t *m = observe_split(x, T, workers[c], chunks[c], c % 2);
        CU_ASSERT_TRUE(stats_equal_order_independent(one, m));
        for (int k = 0; k < 3; k++) {
            kvcal_observer_config cfg;
            CU_ASSERT_EQUAL(kvcal_observer_parse(kinds[k], &cfg), KVCAL_OK);
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++) {
                    float t1, t2;
                    kvcal_stats_threshold(one, &cfg, l, KVCAL_V, h, &t1);
                    kvcal_stats_threshold(m, &cfg, l, KVCAL_V, h, &t2);
                    CU_ASSERT_EQUAL(t1, t2);
                }
        }
        kvcal_stats_destroy(m);
    }
    kvcal_stats_t *other = make_stats(3, 2, 4);
    CU_ASSERT_EQUAL(kvcal_stats_merge(one, other), KVCAL_ERR_MISMATCH);
    kvcal_stats_destroy(other);
    kvcal_stats_destroy(one);
    free(x);
}

static void merge_sums_batches_and_keeps_max_ema(void)
{
    kvcal_stats_t *a = make_stats(1, 1, 1), *b = make_stats(1, 1, 1),
                  *e = make_stats(1, 1, 1);
    const float one = 1.0f, four = -4.0f;
    observe_dense(a, 0, &one, 1);
    kvcal_stats_end_batch(a, 0.9);
    observe_dense(b, 0, &four, 1);
    kvcal_stats_end_batch(b, 0.9);
    observe_dense(b, 0, &one, 1);
    kvcal_stats_end_batch(b, 0.9);
    CU_ASSERT_EQUAL(kvcal_stats_merge(e, a), KVCAL_OK); /* into empty: a's ema */
    CU_ASSERT_EQUAL(e->ema[KVCAL_K][0], 1.0);
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);
    CU_ASSERT_EQUAL(a->batches, 3);
    CU_ASSERT_EQUAL(a->tokens[0], 3);
    KVCAL_ASSERT_CLOSE(a->ema[KVCAL_K][0], 0.9 * 4 + 0.1 * 1, 1e-12, 0);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
    kvcal_stats_destroy(e);
}

static void to_scales_is_deterministic(void)
{
    enum { T = 97, H = 3, D = 7 };
    float x[T * H * D];
    rng r = {9};
    for (int i = 0; i < T * H * D; i++)
        x[i] = rng_draw(&r, DIST_LOGNORMAL);
    const char *kinds[] = {"minmax", "ema", "percentile:99.9", "mse"};
    for (int k = 0; k < 4; k++) {
        kvcal_scales_t *sc[2] = {NULL, NULL};
        for (int rep = 0; rep < 2; rep++) {
            kvcal_stats_t *s = make_stats(2, H, D);
            observe_dense(s, 0, x, T);
            observe_dense(s, 1, x + 11, T - 2);
            kvcal_stats_end_batch(s, 0.99);
            kvcal_observer_config cfg;
            CU_ASSERT_EQUAL(kvcal_observer_parse(kinds[k], &cfg), KVCAL_OK);
            CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, H, &sc[rep]), KVCAL_OK);
            CU_ASSERT_EQUAL(kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD,
                                                  sc[rep], NULL, NULL),
                            KVCAL_OK);
            CU_ASSERT_EQUAL(kvcal_scales_check_finite(sc[rep], "t"), KVCAL_OK);
            kvcal_stats_destroy(s);
        }
        size_t n = (size_t)(4 * 2 * H + 2 * 2) * sizeof(float);
        CU_ASSERT_EQUAL(memcmp(sc[0]->slab, sc[1]->slab, n), 0);
        CU_ASSERT_STRING_EQUAL(sc[0]->provenance.observer_params,
                               sc[1]->provenance.observer_params);
        kvcal_scales_destroy(sc[0]);
        kvcal_scales_destroy(sc[1]);
    }
}

// --- queries and the signed range ----------------------------------------------

/* Q of 2 layers x 4 query heads (2 kv heads) x head_dim 3: q_absmax is the
 * max |q| per query head, padding skipped; a NaN is refused whole and named;
 * q_scale is the layer's max / 448 and q_scale_per_head each head's. */
static void stats_observe_q_keeps_max_abs_per_query_head_and_refuses_nan(void)
{
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(2, 2, 3, &s), KVCAL_OK);
    kvcal_kv_block blk;
    float q[2 * 4 * 3]; /* (2 tokens, 4 heads, 3) */
    for (int i = 0; i < 24; i++)
        q[i] = (float)((i % 5) - 2) * (i < 12 ? 1.0f : 100.0f);
    blk = kvcal_kv_block_dense(q, 1, 2, 4, 3, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_q_ref(s, 0, &blk), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_stats_set_q_heads(s, 3), KVCAL_ERR_INVALID_ARG); /* not 2k */
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_q_heads(s, 4), KVCAL_OK);
    const int32_t one[1] = {1}; /* the second token is padding */
    blk.lengths = one;
    CU_ASSERT_EQUAL(kvcal_stats_observe_q_ref(s, 1, &blk), KVCAL_OK);
    /* token 0: values (i % 5) - 2 for i 0..11, heads of 3 */
    const float want[4] = {2.0f, 2.0f, 1.0f, 2.0f};
    for (int h = 0; h < 4; h++) {
        CU_ASSERT_EQUAL(s->q_absmax[4 + h], want[h]);
        CU_ASSERT_EQUAL(s->q_absmax[h], 0.0f); /* layer 0 untouched */
    }
    blk.lengths = NULL;
    CU_ASSERT_EQUAL(kvcal_stats_observe_q_ref(s, 1, &blk), KVCAL_OK);
    CU_ASSERT_EQUAL(s->q_absmax[4 + 3], 100.0f); /* token 1 head 3: i 21..23 */
    CU_ASSERT_EQUAL(s->q_absmax[4 + 0], 200.0f);
    CU_ASSERT_EQUAL(kvcal_stats_q_group_absmax(s, 1, 2, 2), 200.0f); /* kv head 1 */
    CU_ASSERT_EQUAL(kvcal_stats_q_group_absmax(s, 1, 3, 1), 100.0f);
    q[13] = NAN;
    CU_ASSERT_EQUAL(kvcal_stats_observe_q_ref(s, 0, &blk), KVCAL_ERR_NONFINITE);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(),
                                  "layer 0 Q head 0: sample 0 token 1 "
                                  "channel 1 is nan"));
    CU_ASSERT_EQUAL(s->q_absmax[0], 0.0f); /* nothing folded */

    kvcal_scales_t *sc = NULL;
    const kvcal_observer_config cfg = kvcal_observer_default();
    CU_ASSERT_EQUAL_FATAL(kvcal_scales_create(2, 2, &sc), KVCAL_OK);
    CU_ASSERT_EQUAL(
        kvcal_stats_to_scales(s, &cfg, KVCAL_GRANULARITY_HEAD, sc, NULL, NULL), KVCAL_OK);
    CU_ASSERT_TRUE(sc->has_q);
    CU_ASSERT_EQUAL(sc->num_q_heads, 4);
    CU_ASSERT_EQUAL(sc->q_scale[1], kvcal_scale_from_absmax(200.0f));
    CU_ASSERT_EQUAL(sc->q_head[4 + 0], kvcal_scale_from_absmax(s->q_absmax[4]));
    CU_ASSERT_EQUAL(sc->q_scale[0], kvcal_scale_from_absmax(0.0f)); /* the floor */
    kvcal_scales_destroy(sc);
    kvcal_stats_destroy(s);
}

/* The signed range per channel starts at 0 on both sides, follows min and
 * max, merges by min and max and refuses statistics that keep none. */
static void stats_signed_range_holds_zero_and_merges_by_min_and_max(void)
{
    kvcal_stats_t *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(1, 1, 3, &a), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(1, 1, 3, &b), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(a, 1), KVCAL_OK);
    const float x[2 * 3] = {1.0f, -2.0f, 3.0f, 4.0f, -5.0f, 0.5f};
    kvcal_kv_block blk = kvcal_kv_block_dense(x, 1, 2, 1, 3, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(a, 0, KVCAL_K, &blk), KVCAL_OK);
    const float lo[3] = {0.0f, -5.0f, 0.0f}, hi[3] = {4.0f, 0.0f, 3.0f};
    for (int c = 0; c < 3; c++) {
        CU_ASSERT_EQUAL(a->min[KVCAL_K][c], lo[c]);
        CU_ASSERT_EQUAL(a->max[KVCAL_K][c], hi[c]);
        CU_ASSERT_EQUAL(a->min[KVCAL_V][c], 0.0f);
    }
    CU_ASSERT_EQUAL(kvcal_stats_merge(b, a), KVCAL_ERR_MISMATCH); /* b keeps no range */
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);           /* a does: kept */
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(b, 1), KVCAL_OK);
    const float y[3] = {-7.0f, 9.0f, -1.0f};
    blk = kvcal_kv_block_dense(y, 1, 1, 1, 3, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(b, 0, KVCAL_K, &blk), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);
    CU_ASSERT_EQUAL(a->min[KVCAL_K][0], -7.0f);
    CU_ASSERT_EQUAL(a->max[KVCAL_K][1], 9.0f);
    CU_ASSERT_EQUAL(a->min[KVCAL_K][2], -1.0f);
    CU_ASSERT_EQUAL(a->max[KVCAL_K][2], 3.0f);
    kvcal_stats_reset(a);
    CU_ASSERT_EQUAL(a->min[KVCAL_K][0], 0.0f);
    CU_ASSERT_EQUAL(kvcal_stats_set_range(a, 0), KVCAL_OK);
    CU_ASSERT_PTR_NULL(a->min[0]);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
}

/* A clone holds every statistic of its source, routing counts, query and
 * range statistics included, and keeps them when the source changes. */
static void stats_clone_copies_everything_and_stays_apart(void)
{
    kvcal_stats_t *s = NULL, *c = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(3, 2, 4, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_experts(s, 5), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_q_heads(s, 4), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(s, 1), KVCAL_OK);
    const size_t slab = kvcal_stats_slab_bytes(s), n = 3 * 2 * 4;
    for (size_t i = 0; i < slab; i++)
        ((unsigned char *)s->slab)[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < 3 * 5; i++)
        s->expert_tokens[i] = (int64_t)(i + 11);
    for (size_t i = 0; i < 3 * 4; i++)
        s->q_absmax[i] = 0.5f * (float)i;
    for (size_t i = 0; i < n; i++)
        s->min[0][i] = -(float)i, s->max[1][i] = (float)i + 0.25f;
    s->batches = 9;
    s->batch_start_tokens = 77;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_clone(s, &c), KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(c->slab, s->slab, slab), 0);
    CU_ASSERT_EQUAL(c->num_experts, 5);
    CU_ASSERT_EQUAL(memcmp(c->expert_tokens, s->expert_tokens, 3 * 5 * sizeof(int64_t)),
                    0);
    CU_ASSERT_EQUAL(c->num_q_heads, 4);
    CU_ASSERT_EQUAL(memcmp(c->q_absmax, s->q_absmax, 3 * 4 * sizeof(float)), 0);
    for (int kv = 0; kv < 2; kv++) {
        CU_ASSERT_EQUAL(memcmp(c->min[kv], s->min[kv], n * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(c->max[kv], s->max[kv], n * sizeof(float)), 0);
    }
    CU_ASSERT_EQUAL(c->batches, 9);
    CU_ASSERT_EQUAL(c->batch_start_tokens, 77);
    s->absmax[KVCAL_K][0] = 1e9f, s->expert_tokens[0] = -1, s->q_absmax[0] = -1.0f;
    s->max[0][0] = -1.0f;
    CU_ASSERT_NOT_EQUAL(c->absmax[KVCAL_K][0], 1e9f);
    CU_ASSERT_EQUAL(c->expert_tokens[0], 11);
    CU_ASSERT_EQUAL(c->q_absmax[0], 0.0f);
    CU_ASSERT_NOT_EQUAL(c->max[0][0], -1.0f);
    kvcal_stats_destroy(c);
    kvcal_stats_destroy(s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(stats_create_rejects_bad_sizes_and_destroy_null_is_noop),
    KVCAL_TEST(stats_clone_copies_everything_and_stays_apart),
    KVCAL_TEST(hist_bins_are_64_per_octave_from_2_pow_minus_20),
    KVCAL_TEST(observer_update_folds_absmax_histogram_and_tokens),
    KVCAL_TEST(observer_update_ignores_padding),
    KVCAL_TEST(observer_update_reads_strided_fused_qkv_rows),
    KVCAL_TEST(observer_update_rejects_nan_naming_layer_head_sample),
    KVCAL_TEST(ema_takes_first_batch_then_decays_and_skips_empty_batches),
    KVCAL_TEST(ema_per_tensor_averages_the_layers_batch_max),
    KVCAL_TEST(observer_parse_accepts_each_kind_and_names_the_choices),
    KVCAL_TEST(minmax_scales_per_head_and_per_tensor),
    KVCAL_TEST(zero_head_gets_floor_scale_and_warning),
    KVCAL_TEST(percentile_interpolates_inside_the_bin),
    KVCAL_TEST(clip_estimate_counts_values_past_464_times_scale_as_eval_does),
    KVCAL_TEST(percentile_within_1pct_of_exact_sort),
    KVCAL_TEST(tensor_percentile_and_mse_use_the_whole_layers_histogram),
    KVCAL_TEST(mse_threshold_of_identical_values_is_that_value),
    KVCAL_TEST(mse_error_within_1pct_of_best_threshold_on_raw_data),
    KVCAL_TEST(merge_over_1_2_7_workers_gives_identical_statistics),
    KVCAL_TEST(merge_sums_batches_and_keeps_max_ema),
    KVCAL_TEST(to_scales_is_deterministic),
    KVCAL_TEST(stats_observe_q_keeps_max_abs_per_query_head_and_refuses_nan),
    KVCAL_TEST(stats_signed_range_holds_zero_and_merges_by_min_and_max),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(observers, KVCAL_NEEDS_NOTHING, tests)
