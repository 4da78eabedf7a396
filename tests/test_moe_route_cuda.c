/* tests/test_moe_route_cuda.c: the experts' routing of ERNIE 4.5 on the
 * device (kvcal_moe_route_grouped_launch with softmax scoring and a choice
 * bias: the top-k of each expert's probability plus its bias, weighted by
 * the probabilities alone) against kvcal_moe_route_grouped_ref on random
 * bf16 logits: the same experts where the k-th and the next choice lie
 * apart (ties within the device's fast exp are left out, at most 2% of
 * the tokens), weights within 1e-5 relative; padding tokens get no expert;
 * grouped top-k with such a bias is refused. The MoE rows of
 * tests/test_backend_ops.c check the other routings inside the whole op.
 * In a build without CUDA the suite holds no tests; without a device it is
 * reported skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

/* The value the k-th choice of token t was made by (probability + bias),
 * and the best one left after the top-k, from the reference's logits. */
static void choice_gap(const float *z, const float *bias, int E, int K, double *kth,
                       double *next)
{
    double m = -INFINITY, sum = 0.0, v[512];
    for (int e = 0; e < E; e++)
        m = fmax(m, z[e]);
    for (int e = 0; e < E; e++)
        sum += exp(z[e] - m);
    for (int e = 0; e < E; e++)
        v[e] = exp(z[e] - m) / sum + bias[e];
    for (int j = 0; j <= K; j++) {
        int best = 0;
        for (int e = 1; e < E; e++)
            best = v[e] > v[best] ? e : best;
        if (j == K - 1)
            *kth = v[best];
        if (j == K)
            *next = v[best];
        v[best] = -INFINITY;
    }
}

static void check_route(int T, int E, int K, int renormalize, float scale, uint64_t seed)
{
    float *z = malloc((size_t)T * E * sizeof *z),
          *bias = malloc((size_t)E * sizeof *bias);
    kvcal_bf16 *hz = malloc((size_t)T * E * sizeof *hz),
               *hb = malloc((size_t)E * sizeof *hb);
    int32_t *pos = malloc((size_t)T * sizeof *pos),
            *want_e = malloc((size_t)T * K * sizeof *want_e),
            *got_e = malloc((size_t)T * K * sizeof *got_e);
    float *want_w = malloc((size_t)T * K * sizeof *want_w),
          *got_w = malloc((size_t)T * K * sizeof *got_w);
    CU_ASSERT_FATAL(z && bias && hz && hb && pos && want_e && got_e && want_w && got_w);
    uint64_t rng = seed;
    for (int64_t i = 0; i < (int64_t)T * E + E; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        /* logits in [-4, 4), the bias in [-0.05, 0.05): it moves choices */
        const float u = (float)((rng >> 40) % 100000) / 100000.0f;
        const kvcal_bf16 b = kvcal_bf16_from_float(i < (int64_t)T * E ? 8.0f * u - 4.0f
                                                                      : 0.1f * u - 0.05f);
        if (i < (int64_t)T * E)
            hz[i] = b, z[i] = kvcal_bf16_to_float(b);
        else
            hb[i - (int64_t)T * E] = b, bias[i - (int64_t)T * E] = kvcal_bf16_to_float(b);
    }
    for (int t = 0; t < T; t++)
        pos[t] = t % 11 == 5 ? -1 : t;
    const kvcal_moe_route_cfg cfg = {E, K, 0, bias, 1, 1, 0, renormalize, scale};
    kvcal_moe_route_grouped_ref(want_e, want_w, z, T, &cfg);

    kvcal_bf16 *d_z = NULL, *d_b = NULL;
    int32_t *d_pos = NULL, *d_e = NULL;
    float *d_w = NULL;
    CU_ASSERT_FATAL(
        cudaMalloc((void **)&d_z, (size_t)T * E * sizeof *d_z) == cudaSuccess &&
        cudaMalloc((void **)&d_b, (size_t)E * sizeof *d_b) == cudaSuccess &&
        cudaMalloc((void **)&d_pos, (size_t)T * sizeof *d_pos) == cudaSuccess &&
        cudaMalloc((void **)&d_e, (size_t)T * K * sizeof *d_e) == cudaSuccess &&
        cudaMalloc((void **)&d_w, (size_t)T * K * sizeof *d_w) == cudaSuccess);
    cudaMemcpy(d_z, hz, (size_t)T * E * sizeof *hz, cudaMemcpyHostToDevice);
    cudaMemcpy(d_b, hb, (size_t)E * sizeof *hb, cudaMemcpyHostToDevice);
    cudaMemcpy(d_pos, pos, (size_t)T * sizeof *pos, cudaMemcpyHostToDevice);
    const kvcal_moe_route_params p = {E, K, 0, d_b, 1, 1, 0, renormalize, scale};
    CU_ASSERT_EQUAL_FATAL(kvcal_moe_route_grouped_launch(d_e, d_w, d_z, d_pos, T, &p, 0),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(got_e, d_e, (size_t)T * K * sizeof *got_e, cudaMemcpyDeviceToHost);
    cudaMemcpy(got_w, d_w, (size_t)T * K * sizeof *got_w, cudaMemcpyDeviceToHost);

    int ties = 0, off_e = 0, off_w = 0, padding = 0;
    for (int t = 0; t < T; t++) {
        if (pos[t] < 0) {
            for (int j = 0; j < K; j++)
                padding += got_e[t * K + j] != -1 || got_w[t * K + j] != 0.0f;
            continue;
        }
        double kth = 0.0, next = 0.0;
        choice_gap(z + (int64_t)t * E, bias, E, K, &kth, &next);
        if (kth - next < 1e-5) {
            ties++;
            continue;
        }
        for (int j = 0; j < K; j++) {
            const int32_t e = want_e[t * K + j];
            int at = -1; /* the device's order may differ where two values tie */
            for (int i = 0; i < K; i++)
                at = got_e[t * K + i] == e ? i : at;
            off_e += at < 0;
            if (at >= 0)
                off_w += !(fabsf(got_w[t * K + at] - want_w[t * K + j]) <=
                           1e-5f * fabsf(want_w[t * K + j]) + 1e-7f);
        }
    }
    if (off_e || off_w || padding || ties > T / 50)
        fprintf(stderr,
                "\nE %d top-%d: %d experts and %d weights off, %d padding values set, %d "
                "ties of %d tokens\n",
                E, K, off_e, off_w, padding, ties, T);
    CU_ASSERT_EQUAL(off_e, 0);
    CU_ASSERT_EQUAL(off_w, 0);
    CU_ASSERT_EQUAL(padding, 0);
    CU_ASSERT(ties <= T / 50);
    cudaFree(d_z), cudaFree(d_b), cudaFree(d_pos), cudaFree(d_e), cudaFree(d_w);
    free(z), free(bias), free(hz), free(hb), free(pos);
    free(want_e), free(got_e), free(want_w), free(got_w);
}

/* The golden model's 8 experts, top-3 renormalized; ERNIE-4.5-21B-A3B's 64,
 * top-6; 160 (more values a lane than 32 experts hold), top-8, unrenormalized
 * and scaled. */
static void moe_route_softmax_with_choice_bias_matches_the_reference(void)
{
    check_route(997, 8, 3, 1, 1.0f, 0x9e3779b97f4a7c15ull);
    check_route(997, 64, 6, 1, 1.0f, 0xd1b54a32d192ed03ull);
    check_route(513, 160, 8, 0, 2.5f, 0x2545f4914f6cdd1dull);
}

static void moe_route_refuses_softmax_with_choice_bias_in_groups(void)
{
    const kvcal_moe_route_params p = {8, 2, 0, (const kvcal_bf16 *)16, 4, 2, 0, 1, 1.0f};
    int32_t *e = NULL;
    float *w = NULL;
    kvcal_bf16 *z = NULL;
    CU_ASSERT_FATAL(cudaMalloc((void **)&e, 64) == cudaSuccess &&
                    cudaMalloc((void **)&w, 64) == cudaSuccess &&
                    cudaMalloc((void **)&z, 64) == cudaSuccess);
    CU_ASSERT_EQUAL(kvcal_moe_route_grouped_launch(e, w, z, NULL, 1, &p, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("one group only"));
    cudaFree(e), cudaFree(w), cudaFree(z);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(moe_route_softmax_with_choice_bias_matches_the_reference),
    KVCAL_TEST(moe_route_refuses_softmax_with_choice_bias_in_groups),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(moe_route_cuda, KVCAL_NEEDS_GPU, tests)
