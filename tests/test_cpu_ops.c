/* tests/test_cpu_ops.c: the fp32 CPU reference ops against direct double
 * precision formulas, on odd shapes (1, 19, 989 rows; head_dim 48 and 80;
 * lengths that are not a multiple of any tile). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "observers/stats.h"
#include "tests/test_util.h"

/* Deterministic values in [-1, 1). */
static void fill(float *x, int64_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) / 8388608.0 - 1.0);
    }
}

static float *alloc_filled(int64_t n, uint32_t seed)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    fill(x, n, seed);
    return x;
}

// --- matmul -----------------------------------------------------------------

static void check_matmul(int rows, int k, int n, int with_bias)
{
    float *x = alloc_filled((int64_t)rows * k, 1);         // (rows, k)
    float *w = alloc_filled((int64_t)n * k, 2);            // (n, k)
    float *b = with_bias ? alloc_filled(n, 3) : NULL;      // (n)
    float *out = malloc(sizeof(float) * (size_t)rows * n); // (rows, n)
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    kvcal_matmul_ref(out, x, w, b, rows, k, n);
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < n; j++) {
            double ref = b ? b[j] : 0.0, mag = fabs(ref);
            for (int i = 0; i < k; i++) {
                ref += (double)x[(int64_t)r * k + i] * w[(int64_t)j * k + i];
                mag += fabs((double)x[(int64_t)r * k + i] * w[(int64_t)j * k + i]);
            }
            /* fp32 accumulation: error bounded by k * eps * sum |terms| */
            if (fabs(out[(int64_t)r * n + j] - ref) > 1e-6 + mag * 1e-6 * 4)
                bad++;
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(x);
    free(w);
    free(b);
    free(out);
}

static void matmul_matches_double_reference_on_odd_shapes(void)
{
    check_matmul(1, 7, 5, 0);
    check_matmul(19, 48, 67, 1);
    check_matmul(989, 80, 13, 1);
    check_matmul(70, 131, 130, 0);
}

static void matmul_row_does_not_depend_on_batch_or_threads(void)
{
    int rows = 133, k = 83, n = 71;
    float *x = alloc_filled((int64_t)rows * k, 4);
    float *w = alloc_filled((int64_t)n * k, 5);
    float *b = alloc_filled(n, 6);
    float *all = malloc(sizeof(float) * (size_t)rows * n);
    float *one = malloc(sizeof(float) * (size_t)n);
    float *again = malloc(sizeof(float) * (size_t)rows * n);
    CU_ASSERT_FATAL(all && one && again);
    kvcal_cpu_set_threads(3);
    kvcal_matmul_ref(all, x, w, b, rows, k, n);
    kvcal_cpu_set_threads(1);
    kvcal_matmul_ref(again, x, w, b, rows, k, n);
    kvcal_cpu_set_threads(0);
    CU_ASSERT_EQUAL(memcmp(all, again, sizeof(float) * (size_t)rows * n), 0);
    for (int r = 0; r < rows; r += 17) {
        kvcal_matmul_ref(one, x + (int64_t)r * k, w, b, 1, k, n);
        CU_ASSERT_EQUAL(memcmp(one, all + (int64_t)r * n, sizeof(float) * (size_t)n), 0);
    }
    free(x);
    free(w);
    free(b);
    free(all);
    free(one);
    free(again);
}

// --- rmsnorm, swiglu, add ---------------------------------------------------

static void rmsnorm_matches_double_reference(void)
{
    int rows = 19, dim = 80;
    float *x = alloc_filled((int64_t)rows * dim, 7);
    float *w = alloc_filled(dim, 8);
    float *out = malloc(sizeof(float) * (size_t)rows * dim);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    kvcal_rmsnorm_ref(out, x, w, rows, dim, 1e-5f);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++)
            ss += (double)x[r * dim + i] * x[r * dim + i];
        double inv = 1.0 / sqrt(ss / dim + 1e-5);
        for (int i = 0; i < dim; i++)
            KVCAL_ASSERT_CLOSE(out[r * dim + i], w[i] * x[r * dim + i] * inv, 1e-7, 1e-6);
    }
    /* in place (out == x) is allowed: per-head q/k norm uses it */
    kvcal_rmsnorm_ref(x, x, w, rows, dim, 1e-5f);
    CU_ASSERT_EQUAL(memcmp(x, out, sizeof(float) * (size_t)rows * dim), 0);
    free(x);
    free(w);
    free(out);
}

static void swiglu_and_add_match_formulas(void)
{
    int64_t n = 989;
    float *g = alloc_filled(n, 9), *u = alloc_filled(n, 10), *o = alloc_filled(n, 11);
    for (int64_t i = 0; i < n; i++)
        g[i] *= 12.0f; /* reach the saturated ends of silu */
    kvcal_swiglu_ref(o, g, u, n);
    for (int64_t i = 0; i < n; i++)
        KVCAL_ASSERT_CLOSE(o[i], g[i] / (1.0 + exp(-(double)g[i])) * u[i], 1e-7, 1e-6);
    float *y = alloc_filled(n, 12);
    float before = o[500];
    kvcal_add_ref(o, y, n);
    CU_ASSERT_EQUAL(o[500], before + y[500]);
    free(g);
    free(u);
    free(o);
    free(y);
}

// --- rope -------------------------------------------------------------------

static void rope_check(int interleaved)
{
    int tokens = 19, heads = 3, head_dim = 48, rot_dim = 32;
    int64_t n = (int64_t)tokens * heads * head_dim;
    float *x = alloc_filled(n, 13), *orig = alloc_filled(n, 13);
    float inv_freq[16];
    int32_t pos[19];
    for (int i = 0; i < rot_dim / 2; i++)
        inv_freq[i] = (float)pow(10000.0, -2.0 * i / rot_dim);
    for (int t = 0; t < tokens; t++)
        pos[t] = t * 37 + 1;
    pos[3] = 0;
    kvcal_rope_ref(x, pos, inv_freq, tokens, heads, head_dim, rot_dim, interleaved);
    for (int t = 0; t < tokens; t++)
        for (int h = 0; h < heads; h++) {
            const float *a = orig + ((int64_t)t * heads + h) * head_dim;
            const float *b = x + ((int64_t)t * heads + h) * head_dim;
            for (int i = 0; i < rot_dim / 2; i++) {
                int p = interleaved ? 2 * i : i;
                int q = interleaved ? 2 * i + 1 : i + rot_dim / 2;
                double ang = (double)(float)((float)pos[t] * inv_freq[i]);
                KVCAL_ASSERT_CLOSE(b[p], a[p] * cos(ang) - a[q] * sin(ang), 1e-6, 1e-5);
                KVCAL_ASSERT_CLOSE(b[q], a[q] * cos(ang) + a[p] * sin(ang), 1e-6, 1e-5);
            }
            /* channels past rot_dim are not rotated */
            CU_ASSERT_EQUAL(memcmp(a + rot_dim, b + rot_dim,
                                   sizeof(float) * (size_t)(head_dim - rot_dim)),
                            0);
        }
    /* position 0 is the identity */
    CU_ASSERT_EQUAL(memcmp(x + 3 * heads * head_dim, orig + 3 * heads * head_dim,
                           sizeof(float) * (size_t)(heads * head_dim)),
                    0);
    free(x);
    free(orig);
}

static void rope_rotates_interleaved_pairs(void)
{
    rope_check(1);
}

static void rope_rotates_half_split_pairs_and_only_rot_dim(void)
{
    rope_check(0);
}

/* YaRN's attention factor scales cos and sin: the rotated channels come out
 * multiplied by it, the others untouched; a factor of 1 is kvcal_rope_ref
 * bit for bit. */
static void rope_scaled_multiplies_only_rotated_channels_by_the_factor(void)
{
    int tokens = 7, heads = 2, head_dim = 40, rot_dim = 24;
    int64_t n = (int64_t)tokens * heads * head_dim;
    float *plain = alloc_filled(n, 17), *scaled = alloc_filled(n, 17);
    float *one = alloc_filled(n, 17), *orig = alloc_filled(n, 17);
    float inv_freq[12];
    int32_t pos[7];
    for (int i = 0; i < rot_dim / 2; i++)
        inv_freq[i] = (float)pow(10000.0, -2.0 * i / rot_dim);
    for (int t = 0; t < tokens; t++)
        pos[t] = 5 * t + 3;
    const float factor = 1.1386294f;
    kvcal_rope_ref(plain, pos, inv_freq, tokens, heads, head_dim, rot_dim, 0);
    kvcal_rope_scaled_ref(one, pos, inv_freq, tokens, heads, head_dim, rot_dim, 0, 1.0f);
    kvcal_rope_scaled_ref(scaled, pos, inv_freq, tokens, heads, head_dim, rot_dim, 0,
                          factor);
    CU_ASSERT_EQUAL(memcmp(one, plain, sizeof(float) * (size_t)n), 0);
    for (int64_t r = 0; r < (int64_t)tokens * heads; r++)
        for (int i = 0; i < head_dim; i++) {
            int64_t j = r * head_dim + i;
            if (i < rot_dim) {
                KVCAL_ASSERT_CLOSE(scaled[j], (double)plain[j] * factor, 1e-6, 1e-6);
            } else {
                CU_ASSERT_EQUAL(scaled[j], orig[j]);
            }
        }
    free(plain);
    free(scaled);
    free(one);
    free(orig);
}

// --- rope + observer --------------------------------------------------------

/* kvcal_rope_observe_ref on a fused qkv buffer (19 tokens, every 7th one
 * padding; 3 q heads, 2 kv heads, head_dim 48, 32 rotated channels) is the
 * per-head RMSNorm, kvcal_rope_scaled_ref and kvcal_stats_observe_ref of
 * the rotated K and V, bit for bit, folded into what the observer held;
 * padding is untouched and unobserved. With rot_dim 0 and no norm weights
 * it only observes. */
static void rope_observe_ref_is_norm_rope_then_the_observer(void)
{
    enum { T = 19, H = 3, KVH = 2, D = 48, ROT = 32, STRIDE = (H + 2 * KVH) * D };
    float *qkv = alloc_filled((int64_t)T * STRIDE, 21),
          *want = alloc_filled(T * STRIDE, 21);
    float *qn = alloc_filled(D, 22), *kn = alloc_filled(D, 23);
    float *k = malloc(sizeof(float) * T * KVH * D),
          *v = malloc(sizeof(float) * T * KVH * D);
    float *pre = alloc_filled(5 * KVH * D, 24), inv_freq[ROT / 2];
    int32_t pos[T];
    uint8_t valid[T];
    kvcal_stats_t *st = NULL, *obs_st = NULL;
    CU_ASSERT_FATAL(k && v);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(1, KVH, D, &st), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(1, KVH, D, &obs_st), KVCAL_OK);
    for (int i = 0; i < ROT / 2; i++)
        inv_freq[i] = (float)pow(10000.0, -2.0 * i / ROT);
    for (int t = 0; t < T; t++) {
        pos[t] = t % 7 == 3 ? -1 : 3 * t + 2;
        valid[t] = pos[t] >= 0;
    }
    /* both start from the same statistics, so folding (max, +) is checked */
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kv_block blk = kvcal_kv_block_dense(pre, 1, 5, KVH, D, NULL, NULL);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, 0, kv, &blk), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(obs_st, 0, kv, &blk), KVCAL_OK);
    }
    const kvcal_rope_ref_cfg cfg = {inv_freq, ROT, 0, qn, kn, 1e-6f, 1.1386294f};
    float q_absmax[H] = {0};
    const kvcal_kv_observer obs = {{obs_st->absmax[0], obs_st->absmax[1]},
                                   {obs_st->hist[0], obs_st->hist[1]},
                                   {obs_st->batch_absmax[0], obs_st->batch_absmax[1]},
                                   q_absmax};
    kvcal_rope_observe_ref(qkv, STRIDE, pos, T, H, KVH, D, &cfg, &obs);

    for (int t = 0; t < T; t++) {
        float *row = want + (int64_t)t * STRIDE; // (H + 2 KVH, D)
        if (pos[t] < 0)
            continue;
        for (int h = 0; h < H + KVH; h++)
            kvcal_rmsnorm_ref(row + h * D, row + h * D, h < H ? qn : kn, 1, D, 1e-6f);
        kvcal_rope_scaled_ref(row, pos + t, inv_freq, 1, H + KVH, D, ROT, 0, 1.1386294f);
    }
    CU_ASSERT_EQUAL(memcmp(qkv, want, sizeof(float) * T * STRIDE), 0);
    /* the queries: max |q| of each head over the rotated, valid tokens */
    for (int h = 0; h < H; h++) {
        float m = 0.0f;
        for (int t = 0; t < T; t++)
            for (int c = 0; pos[t] >= 0 && c < D; c++)
                m = fmaxf(m, fabsf(want[(int64_t)t * STRIDE + h * D + c]));
        CU_ASSERT_TRUE(m > 0.0f);
        CU_ASSERT_EQUAL(q_absmax[h], m);
    }
    for (int t = 0; t < T; t++) {
        memcpy(k + t * KVH * D, want + (int64_t)t * STRIDE + H * D,
               sizeof(float) * KVH * D);
        memcpy(v + t * KVH * D, want + (int64_t)t * STRIDE + (H + KVH) * D,
               sizeof(float) * KVH * D);
    }
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kv_block blk = kvcal_kv_block_dense(kv ? v : k, 1, T, KVH, D, NULL, NULL);
        blk.valid = valid;
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, 0, kv, &blk), KVCAL_OK);
        CU_ASSERT_EQUAL(
            memcmp(obs_st->absmax[kv], st->absmax[kv], sizeof(float) * KVH * D), 0);
        CU_ASSERT_EQUAL(memcmp(obs_st->hist[kv], st->hist[kv],
                               sizeof(uint64_t) * KVH * (size_t)st->num_bins),
                        0);
        CU_ASSERT_EQUAL(
            memcmp(obs_st->batch_absmax[kv], st->batch_absmax[kv], sizeof(float) * KVH),
            0);
    }

    /* observing alone: qkv unchanged, the statistics as observed again */
    const kvcal_rope_ref_cfg observe_only = {NULL, 0, 0, NULL, NULL, 0.0f, 1.0f};
    kvcal_rope_observe_ref(qkv, STRIDE, pos, T, H, KVH, D, &observe_only, &obs);
    CU_ASSERT_EQUAL(memcmp(qkv, want, sizeof(float) * T * STRIDE), 0);
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kv_block blk = kvcal_kv_block_dense(kv ? v : k, 1, T, KVH, D, NULL, NULL);
        blk.valid = valid;
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, 0, kv, &blk), KVCAL_OK);
        CU_ASSERT_EQUAL(memcmp(obs_st->hist[kv], st->hist[kv],
                               sizeof(uint64_t) * KVH * (size_t)st->num_bins),
                        0);
    }
    kvcal_stats_destroy(st);
    kvcal_stats_destroy(obs_st);
    free(qkv);
    free(want);
    free(qn);
    free(kn);
    free(k);
    free(v);
    free(pre);
}

/* Rows of k and v alone (no q heads), and a NaN in V: its channel's absmax
 * and its head's batch_absmax become NaN and stay NaN, as the kernels' max
 * on float bits keeps it, and the NaN is counted in the last bin. */
static void rope_observe_ref_absmax_keeps_a_nan(void)
{
    enum { T = 4, KVH = 1, D = 8, STRIDE = 2 * KVH * D };
    float qkv[T * STRIDE], am[2][D] = {{0}}, bam[2] = {0}, inv_freq[D / 2];
    uint64_t hist[2][KVCAL_HIST_BINS] = {{0}};
    const int32_t pos[T] = {0, 1, 2, 3};
    fill(qkv, T * STRIDE, 25);
    for (int i = 0; i < D / 2; i++)
        inv_freq[i] = 1.0f / (float)(i + 1);
    qkv[1 * STRIDE + D + 5] = NAN; /* token 1, v channel 5 */
    qkv[3 * STRIDE + D + 5] = 7.0f;
    const kvcal_rope_ref_cfg cfg = {inv_freq, D, 1, NULL, NULL, 0.0f, 1.0f};
    const kvcal_kv_observer obs = {
        {am[0], am[1]}, {hist[0], hist[1]}, {&bam[0], &bam[1]}, NULL};
    kvcal_rope_observe_ref(qkv, STRIDE, pos, T, 0, KVH, D, &cfg, &obs);
    CU_ASSERT_TRUE(isnan(am[KVCAL_V][5]));
    CU_ASSERT_FALSE(isnan(am[KVCAL_V][4]));
    CU_ASSERT_TRUE(isnan(bam[KVCAL_V]));
    CU_ASSERT_FALSE(isnan(bam[KVCAL_K]));
    CU_ASSERT_EQUAL(hist[KVCAL_V][KVCAL_HIST_BINS - 1], 1);
    uint64_t counted = 0;
    for (int b = 0; b < KVCAL_HIST_BINS; b++)
        counted += hist[KVCAL_K][b];
    CU_ASSERT_EQUAL(counted, T * D);
}

// --- embed ------------------------------------------------------------------

static void embed_ref_gathers_rows_and_zeroes_padding(void)
{
    enum { VOCAB = 7, DIM = 19, N = 5 };
    float *table = alloc_filled(VOCAB * DIM, 26), out[N * DIM];
    const int32_t ids[N] = {6, -1, 0, 6, 3};
    kvcal_embed_ref(out, table, ids, N, DIM);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < DIM; c++)
            CU_ASSERT_EQUAL(out[i * DIM + c],
                            ids[i] < 0 ? 0.0f : table[ids[i] * DIM + c]);
    free(table);
}

// --- attention --------------------------------------------------------------

/* kvcal_attention_sinks_ref (kvcal_attention_ref where sinks is NULL and
 * window 0) against softmax([q k^T * scale, sink]) v in double, the sink's
 * column dropped (transformers' eager_attention_forward of gpt-oss). */
static void check_attention_sinks(int tokens, int n_heads, int n_kv, int d, float amp,
                                  int window, const float *sinks)
{
    int64_t nq = (int64_t)tokens * n_heads * d, nk = (int64_t)tokens * n_kv * d;
    float *q = alloc_filled(nq, 14), *k = alloc_filled(nk, 15), *v = alloc_filled(nk, 16);
    float *out = malloc(sizeof(float) * (size_t)nq);
    double *p = malloc(sizeof(double) * (size_t)tokens);
    CU_ASSERT_FATAL(out && p);
    for (int64_t i = 0; i < nq; i++)
        q[i] *= amp;
    float scale = 1.0f / sqrtf((float)d);
    if (!sinks && !window)
        kvcal_attention_ref(out, q, k, v, tokens, n_heads, n_kv, d, scale);
    else
        kvcal_attention_sinks_ref(out, q, k, v, tokens, n_heads, n_kv, d, scale, window,
                                  0.0f, sinks);
    int bad = 0;
    for (int t = 0; t < tokens; t++)
        for (int h = 0; h < n_heads; h++) {
            int g = h / (n_heads / n_kv);
            const float *qv = q + ((int64_t)t * n_heads + h) * d;
            const int s0 = window > 0 && t >= window ? t - window + 1 : 0;
            double m = sinks ? sinks[h] : -INFINITY, sum = 0;
            for (int s = s0; s <= t; s++) {
                double dot = 0;
                for (int i = 0; i < d; i++)
                    dot += (double)qv[i] * k[((int64_t)s * n_kv + g) * d + i];
                p[s] = dot * scale;
                m = p[s] > m ? p[s] : m;
            }
            if (sinks)
                sum += exp(sinks[h] - m);
            for (int s = s0; s <= t; s++)
                sum += p[s] = exp(p[s] - m);
            for (int i = 0; i < d; i++) {
                double ref = 0;
                for (int s = s0; s <= t; s++)
                    ref += p[s] / sum * v[((int64_t)s * n_kv + g) * d + i];
                float got = out[((int64_t)t * n_heads + h) * d + i];
                if (!isfinite(got) || fabs(got - ref) > 1e-5 + fabs(ref) * 1e-4)
                    bad++;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(q);
    free(k);
    free(v);
    free(out);
    free(p);
}

static void check_attention(int tokens, int n_heads, int n_kv, int d, float amp)
{
    check_attention_sinks(tokens, n_heads, n_kv, d, amp, 0, NULL);
}

static void attention_matches_double_reference_gqa_mqa_mha(void)
{
    check_attention(1, 4, 2, 8, 1.0f);
    check_attention(19, 6, 3, 48, 1.0f); /* GQA, 3 kv heads */
    check_attention(37, 5, 1, 80, 1.0f); /* MQA */
    check_attention(23, 3, 3, 16, 1.0f); /* MHA */
}

static void attention_softmax_is_stable_for_large_scores(void)
{
    check_attention(29, 2, 1, 48, 3000.0f);
}

static void attention_is_causal(void)
{
    int tokens = 11, h = 2, d = 8;
    int64_t n = (int64_t)tokens * h * d;
    float *q = alloc_filled(n, 17), *k = alloc_filled(n, 18), *v = alloc_filled(n, 19);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    CU_ASSERT_FATAL(a && b);
    kvcal_attention_ref(a, q, k, v, tokens, h, h, d, 0.3f);
    for (int64_t i = 6 * h * d; i < n; i++) {
        k[i] += 5.0f;
        v[i] -= 3.0f;
    }
    kvcal_attention_ref(b, q, k, v, tokens, h, h, d, 0.3f);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)(6 * h * d)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)n), 0);
    /* the first token attends only to itself */
    CU_ASSERT_EQUAL(memcmp(a, v, sizeof(float) * (size_t)d), 0);
    free(q);
    free(k);
    free(v);
    free(a);
    free(b);
}

/* A window of w: query t reads keys t - w + 1 .. t. Wider than the
 * sequence it is plain causal attention; keys before the window change
 * nothing; a window of 1 reads a token's own value. */
static void attention_window_reads_the_last_w_keys(void)
{
    int tokens = 13, h = 4, kvh = 2, d = 8, w = 5;
    int64_t nq = (int64_t)tokens * h * d, nk = (int64_t)tokens * kvh * d;
    float *q = alloc_filled(nq, 21), *k = alloc_filled(nk, 22), *v = alloc_filled(nk, 23);
    float *a = malloc(sizeof(float) * (size_t)nq),
          *b = malloc(sizeof(float) * (size_t)nq);
    CU_ASSERT_FATAL(a && b);
    kvcal_attention_ref(a, q, k, v, tokens, h, kvh, d, 0.3f);
    kvcal_attention_window_ref(b, q, k, v, tokens, h, kvh, d, 0.3f, tokens, 0.0f);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)nq), 0);
    kvcal_attention_window_ref(a, q, k, v, tokens, h, kvh, d, 0.3f, w, 0.0f);
    /* the first w queries see every key up to themselves */
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)(w * h * d)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)nq), 0);
    for (int64_t i = 0; i < 3 * kvh * d; i++) { /* keys 0..2: before query 7's window */
        k[i] += 5.0f;
        v[i] -= 3.0f;
    }
    kvcal_attention_window_ref(b, q, k, v, tokens, h, kvh, d, 0.3f, w, 0.0f);
    CU_ASSERT_EQUAL(
        memcmp(a + 7 * h * d, b + 7 * h * d, sizeof(float) * (size_t)(6 * h * d)), 0);
    kvcal_attention_window_ref(a, q, k, v, tokens, h, kvh, d, 0.3f, 1, 0.0f);
    for (int t = 0; t < tokens; t++)
        for (int hh = 0; hh < h; hh++)
            CU_ASSERT_EQUAL(memcmp(a + ((int64_t)t * h + hh) * d,
                                   v + ((int64_t)t * kvh + hh / 2) * d,
                                   sizeof(float) * d),
                            0);
    free(q);
    free(k);
    free(v);
    free(a);
    free(b);
}

/* gpt-oss's sinks: a logit per query head in the softmax's denominator,
 * with and without a window, small and dominant sinks; a sink far below
 * every score changes nothing; a dominant one shrinks the output toward 0. */
static void attention_sinks_add_a_logit_per_head_to_the_denominator(void)
{
    const float sinks[6] = {0.5f, -1.0f, 2.0f, 0.0f, -3.0f, 8.0f};
    check_attention_sinks(1, 4, 2, 8, 1.0f, 0, sinks);
    check_attention_sinks(19, 6, 3, 48, 1.0f, 0, sinks);
    check_attention_sinks(37, 6, 2, 16, 1.0f, 8, sinks);
    check_attention_sinks(29, 2, 1, 48, 300.0f, 5,
                          sinks); /* scores far above the sinks */
    int tokens = 13, h = 2, d = 8;
    int64_t n = (int64_t)tokens * h * d;
    float *q = alloc_filled(n, 31), *k = alloc_filled(n, 32), *v = alloc_filled(n, 33);
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    CU_ASSERT_FATAL(a && b);
    const float low[2] = {-1e30f, -1e30f}, high[2] = {40.0f, 40.0f};
    kvcal_attention_window_ref(a, q, k, v, tokens, h, h, d, 0.3f, 4, 0.0f);
    kvcal_attention_sinks_ref(b, q, k, v, tokens, h, h, d, 0.3f, 4, 0.0f, low);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)n), 0);
    kvcal_attention_sinks_ref(b, q, k, v, tokens, h, h, d, 0.3f, 4, 0.0f, high);
    double big = 0.0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(b[i]));
    CU_ASSERT(big < 1e-15);
    free(q);
    free(k);
    free(v);
    free(a);
    free(b);
}

/* gpt-oss's experts' activation against its formula in double: gate
 * clamped above, up on both sides, at the limit. */
static void swiglu_oai_clamps_gate_above_and_up_on_both_sides(void)
{
    int64_t n = 989;
    float *g = alloc_filled(n, 41), *u = alloc_filled(n, 42), *o = alloc_filled(n, 43);
    int clamped_g = 0, clamped_u = 0;
    for (int64_t i = 0; i < n; i++) {
        g[i] *= 12.0f, u[i] *= 12.0f; /* past +-7 a third of the time */
        clamped_g += g[i] > 7.0f;
        clamped_u += fabsf(u[i]) > 7.0f;
    }
    CU_ASSERT(clamped_g > 50 && clamped_u > 100);
    kvcal_swiglu_oai_ref(o, g, u, n, 1.702f, 7.0f);
    for (int64_t i = 0; i < n; i++) {
        const double gc = fmin(g[i], 7.0), uc = fmin(fmax(u[i], -7.0), 7.0);
        KVCAL_ASSERT_CLOSE(o[i], (uc + 1.0) * gc / (1.0 + exp(-1.702 * gc)), 1e-6, 1e-6);
    }
    free(g);
    free(u);
    free(o);
}

/* Softmax top-k: the largest first, the lower expert on a tie, weights the
 * softmax's probabilities or, renormalized, their share of the top k. */
static void moe_route_takes_top_k_of_the_softmax(void)
{
    const float logits[2 * 5] = {0.5f,  2.0f,  -1.0f, 2.0f, 1.0f, /* a tie: 1 before 3 */
                                 -3.0f, -2.0f, 4.0f,  0.0f, 3.5f};
    int32_t e[2 * 3];
    float w[2 * 3], wn[2 * 3];
    kvcal_moe_route_ref(e, w, logits, 2, 5, 3, 0);
    const int32_t want[6] = {1, 3, 4, 2, 4, 3};
    CU_ASSERT_EQUAL(memcmp(e, want, sizeof want), 0);
    double sum = 0.0;
    for (int i = 0; i < 5; i++)
        sum += exp(logits[i] - 2.0);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 1.0 / sum, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[2], exp(-1.0) / sum, 1e-6);
    CU_ASSERT_EQUAL(w[0], w[1]);
    kvcal_moe_route_ref(e, wn, logits, 2, 5, 3, 1);
    for (int t = 0; t < 2; t++) {
        CU_ASSERT_DOUBLE_EQUAL(wn[3 * t] + wn[3 * t + 1] + wn[3 * t + 2], 1.0, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(wn[3 * t] / wn[3 * t + 2], w[3 * t] / w[3 * t + 2], 1e-5);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(matmul_matches_double_reference_on_odd_shapes),
    KVCAL_TEST(matmul_row_does_not_depend_on_batch_or_threads),
    KVCAL_TEST(rmsnorm_matches_double_reference),
    KVCAL_TEST(swiglu_and_add_match_formulas),
    KVCAL_TEST(rope_rotates_interleaved_pairs),
    KVCAL_TEST(rope_rotates_half_split_pairs_and_only_rot_dim),
    KVCAL_TEST(rope_scaled_multiplies_only_rotated_channels_by_the_factor),
    KVCAL_TEST(rope_observe_ref_is_norm_rope_then_the_observer),
    KVCAL_TEST(rope_observe_ref_absmax_keeps_a_nan),
    KVCAL_TEST(embed_ref_gathers_rows_and_zeroes_padding),
    KVCAL_TEST(attention_matches_double_reference_gqa_mqa_mha),
    KVCAL_TEST(attention_softmax_is_stable_for_large_scores),
    KVCAL_TEST(attention_is_causal),
    KVCAL_TEST(attention_window_reads_the_last_w_keys),
    KVCAL_TEST(moe_route_takes_top_k_of_the_softmax),
    KVCAL_TEST(attention_sinks_add_a_logit_per_head_to_the_denominator),
    KVCAL_TEST(swiglu_oai_clamps_gate_above_and_up_on_both_sides),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(cpu_ops, KVCAL_NEEDS_NOTHING, tests)
