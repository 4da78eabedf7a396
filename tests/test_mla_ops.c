/* tests/test_mla_ops.c: the CPU references of multi-head latent attention
 * (kernels/cpu/ops.h: the cache point, the expansion into K and V, vLLM's
 * fp8_ds_mla round trip, attention with its own v head size) and of
 * grouped top-k routing, against values worked out by hand or composed from
 * the references they are made of. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "core/hist_rule.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/bf16.h"
#include "tests/test_util.h"

/* 8 experts in 4 groups of 2. Sigmoid scores chosen by their two best's sum:
 * group scores 1.5 (0), 1.1 (1), 1.7 (2), 0.3 (3) with the choice values
 * below; the two best groups (2, then 0) are open, so expert 3 (0.9, the
 * second best value) is never chosen. */
static void moe_route_grouped_chooses_in_the_best_groups_only(void)
{
    /* choice = sigmoid(logit) + bias; logits with bias 0 give the choice */
    const float want_choice[8] = {0.8f, 0.7f, 0.2f, 0.9f, 0.95f, 0.75f, 0.1f, 0.2f};
    float logits[8], bias[8] = {0};
    for (int i = 0; i < 8; i++)
        logits[i] = logf(want_choice[i] / (1.0f - want_choice[i]));
    int32_t e[3];
    float w[3];
    kvcal_moe_route_cfg c = {8, 3, 1, bias, 4, 2, 0, 1, 2.5f};
    kvcal_moe_route_grouped_ref(e, w, logits, 1, &c);
    CU_ASSERT(e[0] == 4 && e[1] == 0 && e[2] == 5);
    const double s = kvcal_sigmoid_ref(logits[4]) + kvcal_sigmoid_ref(logits[0]) +
                     kvcal_sigmoid_ref(logits[5]);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 2.5 * kvcal_sigmoid_ref(logits[4]) / s, 1e-6);
    /* one open group: the best group alone (2: experts 4, 5) */
    c.topk_groups = 1, c.top_k = 2;
    kvcal_moe_route_grouped_ref(e, w, logits, 1, &c);
    CU_ASSERT(e[0] == 4 && e[1] == 5);
    /* a bias moves the choice, not the weight */
    bias[3] = 0.5f;
    c.topk_groups = 2;
    kvcal_moe_route_grouped_ref(e, w, logits, 1, &c);
    CU_ASSERT(e[0] == 3 && e[1] == 4); /* group 1 now scores 1.6: it opens */
    CU_ASSERT_DOUBLE_EQUAL(
        w[0] / w[1], kvcal_sigmoid_ref(logits[3]) / kvcal_sigmoid_ref(logits[4]), 1e-6);
}

/* Softmax scoring with group_max (DeepSeek-V2's group_limited_greedy): a
 * group scores its best probability; the weights are the probabilities
 * over every expert, times the scale, not renormalized; one group is the
 * plain softmax top-k. */
static void moe_route_grouped_softmax_scores_groups_by_their_best(void)
{
    const float z[6] = {2.0f, 1.9f, 1.8f, 0.0f, 2.1f, -1.0f}; /* 3 groups of 2 */
    int32_t e[2];
    float w[2];
    const kvcal_moe_route_cfg c = {6, 2, 0, NULL, 3, 1, 1, 0, 1.5f};
    kvcal_moe_route_grouped_ref(e, w, z, 1, &c);
    CU_ASSERT(e[0] == 4 && e[1] == 5); /* group 2 (2.1) alone: 1.9 and 1.8 closed */
    double sum = 0.0;
    for (int i = 0; i < 6; i++)
        sum += exp(z[i] - 2.1);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 1.5 / sum, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 1.5 * exp(-3.1) / sum, 1e-6);
    int32_t e1[2], e2[2];
    float w1[2], w2[2];
    const kvcal_moe_route_cfg one = {6, 2, 0, NULL, 1, 1, 0, 1, 1.0f};
    kvcal_moe_route_grouped_ref(e1, w1, z, 1, &one);
    kvcal_moe_route_ref(e2, w2, z, 1, 6, 2, 1);
    CU_ASSERT_EQUAL(memcmp(e1, e2, sizeof e1), 0);
    CU_ASSERT_EQUAL(memcmp(w1, w2, sizeof w1), 0);
}

/* ERNIE 4.5's routing: the top-k chosen by softmax probability plus the
 * choice bias (which moves expert 3 past 0 and 1 here), weighted by the
 * probabilities alone, renormalized over the chosen. */
static void moe_route_softmax_with_a_choice_bias_weighs_by_probability(void)
{
    const float z[4] = {1.0f, 0.9f, 0.0f, 0.2f};
    const float bias[4] = {0.0f, 0.0f, 0.0f, 0.5f};
    int32_t e[2];
    float w[2];
    const kvcal_moe_route_cfg c = {4, 2, 0, bias, 1, 1, 0, 1, 1.0f};
    kvcal_moe_route_grouped_ref(e, w, z, 1, &c);
    CU_ASSERT(e[0] == 3 && e[1] == 0);
    const double p0 = exp(1.0), p3 = exp(0.2);
    CU_ASSERT_DOUBLE_EQUAL(w[0], p3 / (p0 + p3), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], p0 / (p0 + p3), 1e-6);
}

/* The cache point: the latent normalized (kvcal_rmsnorm_ref), the entry's
 * RoPE part and each query head's last channels rotated in interleaved
 * pairs (kvcal_rope_scaled_ref), the query's other channels and padding
 * untouched, the entry folded into K's and V's statistics alike. */
static void mla_latent_ref_is_norm_rope_and_the_entry_observed_twice(void)
{
    enum { T = 5, H = 3, QK = 12, L = 10, R = 6, E = L + R };
    float entry[T * E], q[T * H * QK], e0[T * E], q0[T * H * QK], w[L], inv[R / 2];
    for (int i = 0; i < T * E; i++)
        e0[i] = entry[i] = sinf(0.7f * i) * 2.0f;
    for (int i = 0; i < T * H * QK; i++)
        q0[i] = q[i] = cosf(0.3f * i);
    for (int i = 0; i < L; i++)
        w[i] = 0.5f + 0.1f * i;
    for (int i = 0; i < R / 2; i++)
        inv[i] = powf(10000.0f, -2.0f * i / R);
    const int32_t pos[T] = {0, 3, -1, 7, 2};
    float am[2][E] = {{0}}, bm[2] = {0};
    uint64_t hist[2][KVCAL_HIST_BINS] = {{0}};
    kvcal_kv_observer obs = {{am[0], am[1]}, {hist[0], hist[1]}, {&bm[0], &bm[1]}, NULL};
    kvcal_mla_latent_ref(entry, E, q, H * QK, pos, T, H, QK, L, R, w, 1e-6f, inv, 1.2f,
                         &obs);
    for (int t = 0; t < T; t++) {
        float want[E], wq[H * QK];
        memcpy(want, e0 + t * E, sizeof want);
        memcpy(wq, q0 + t * H * QK, sizeof wq);
        if (pos[t] >= 0) {
            kvcal_rmsnorm_ref(want, want, w, 1, L, 1e-6f);
            kvcal_rope_scaled_ref(want + L, pos + t, inv, 1, 1, R, R, 1, 1.2f);
            for (int h = 0; h < H; h++)
                kvcal_rope_scaled_ref(wq + h * QK + QK - R, pos + t, inv, 1, 1, R, R, 1,
                                      1.2f);
        }
        CU_ASSERT_EQUAL(memcmp(entry + t * E, want, sizeof want), 0);
        CU_ASSERT_EQUAL(memcmp(q + t * H * QK, wq, sizeof wq), 0);
    }
    uint64_t counted = 0;
    for (int kv = 0; kv < 2; kv++) {
        float m = 0.0f;
        for (int c = 0; c < E; c++) {
            float want = 0.0f;
            for (int t = 0; t < T; t++)
                if (pos[t] >= 0)
                    want = fmaxf(want, fabsf(entry[t * E + c]));
            CU_ASSERT_EQUAL(am[kv][c], want);
            m = fmaxf(m, want);
        }
        CU_ASSERT_EQUAL(bm[kv], m);
        for (int b = 0; b < KVCAL_HIST_BINS; b++)
            counted += hist[kv][b];
    }
    CU_ASSERT_EQUAL(counted, 2 * 4 * E); /* 4 valid tokens, K and V */
    /* no query: the entry alone */
    memcpy(q, q0, sizeof q);
    kvcal_mla_latent_ref(entry, E, NULL, 0, pos, T, H, QK, L, R, w, 1e-6f, inv, 1.2f,
                         NULL);
    CU_ASSERT_EQUAL(memcmp(q, q0, sizeof q), 0);
}

/* K = [kv_b_proj's no-RoPE part, the entry's RoPE part shared by every
 * head], V = [kv_b_proj's V part, zeros up to v_stride]. */
static void mla_expand_ref_lays_out_k_and_padded_v(void)
{
    enum { T = 2, H = 3, NOPE = 4, V = 3, VS = 6, L = 5, R = 2 };
    float kvb[T * H * (NOPE + V)], entry[T * (L + R)], k[T * H * (NOPE + R)],
        v[T * H * VS];
    for (int i = 0; i < T * H * (NOPE + V); i++)
        kvb[i] = (float)i;
    for (int i = 0; i < T * (L + R); i++)
        entry[i] = 100.0f + (float)i;
    kvcal_mla_expand_ref(k, v, VS, kvb, entry, L + R, T, H, NOPE, V, L, R);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *src = kvb + (t * H + h) * (NOPE + V);
            const float *kh = k + (t * H + h) * (NOPE + R), *vh = v + (t * H + h) * VS;
            for (int c = 0; c < NOPE; c++)
                CU_ASSERT_EQUAL(kh[c], src[c]);
            for (int c = 0; c < R; c++)
                CU_ASSERT_EQUAL(kh[NOPE + c], entry[t * (L + R) + L + c]);
            for (int c = 0; c < VS; c++)
                CU_ASSERT_EQUAL(vh[c], c < V ? src[NOPE + c] : 0.0f);
        }
}

/* fp8_ds_mla: each tile of 128 latent values under max(absmax / 448,
 * FLT_MIN), the values e4m3 of x / scale times the scale (a tile's largest
 * value exact), a zero tile zero, a shorter last tile its own scale, the
 * RoPE part rounded to bf16. */
static void mla_ds_roundtrip_ref_scales_each_tile_and_keeps_rope_in_bf16(void)
{
    enum { L = 300, R = 4, E = L + R };
    float x[E], out[E];
    for (int c = 0; c < L; c++)
        x[c] = c < 128   ? 0.01f * (float)(c - 64)
               : c < 256 ? 0.0f
                         : 37.0f * sinf((float)c);
    for (int c = L; c < E; c++)
        x[c] = 1.0f + 1e-3f * (float)c; /* off the bf16 grid */
    kvcal_mla_ds_roundtrip_ref(out, E, x, E, 1, L, R);
    const float s0 = fmaxf(0.64f / 448.0f, FLT_MIN);
    for (int c = 0; c < 128; c++)
        CU_ASSERT_EQUAL(out[c], kvcal_fp8_e4m3_round(x[c] / s0) * s0);
    CU_ASSERT_EQUAL(out[0], x[0]);
    for (int c = 128; c < 256; c++)
        CU_ASSERT_EQUAL(out[c], 0.0f);
    float m = 0.0f;
    for (int c = 256; c < L; c++)
        m = fmaxf(m, fabsf(x[c]));
    for (int c = 256; c < L; c++)
        CU_ASSERT_EQUAL(out[c], kvcal_fp8_e4m3_round(x[c] / (m / 448.0f)) * (m / 448.0f));
    for (int c = L; c < E; c++) {
        CU_ASSERT_EQUAL(out[c], kvcal_bf16_round(x[c]));
        CU_ASSERT(out[c] != x[c]);
    }
}

/* Attention with V of its own head size equals, per V channel, attention
 * with V zero-padded to the q/k head size (how the CUDA runner attends). */
static void attention_vdim_equals_attention_of_a_zero_padded_v(void)
{
    enum { T = 9, H = 4, D = 12, DV = 7 };
    float q[T * H * D], k[T * H * D], v[T * H * DV], vp[T * H * D], a[T * H * DV],
        b[T * H * D];
    for (int i = 0; i < T * H * D; i++) {
        q[i] = sinf(0.37f * i);
        k[i] = cosf(0.11f * i);
    }
    memset(vp, 0, sizeof vp);
    for (int i = 0; i < T * H; i++)
        for (int c = 0; c < DV; c++)
            vp[i * D + c] = v[i * DV + c] = sinf(0.05f * (i * DV + c));
    kvcal_attention_vdim_ref(a, q, k, v, T, H, H, D, DV, 0.3f, 0, 0.0f);
    kvcal_attention_ref(b, q, k, vp, T, H, H, D, 0.3f);
    for (int i = 0; i < T * H; i++)
        for (int c = 0; c < D; c++)
            CU_ASSERT_EQUAL(b[i * D + c], c < DV ? a[i * DV + c] : 0.0f);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(moe_route_grouped_chooses_in_the_best_groups_only),
    KVCAL_TEST(moe_route_grouped_softmax_scores_groups_by_their_best),
    KVCAL_TEST(moe_route_softmax_with_a_choice_bias_weighs_by_probability),
    KVCAL_TEST(mla_latent_ref_is_norm_rope_and_the_entry_observed_twice),
    KVCAL_TEST(mla_expand_ref_lays_out_k_and_padded_v),
    KVCAL_TEST(mla_ds_roundtrip_ref_scales_each_tile_and_keeps_rope_in_bf16),
    KVCAL_TEST(attention_vdim_equals_attention_of_a_zero_padded_v),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(mla_ops, KVCAL_NEEDS_NOTHING, tests)
