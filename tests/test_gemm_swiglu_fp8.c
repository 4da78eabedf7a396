/* tests/test_gemm_swiglu_fp8.c: the FP8 gate/up projection + SwiGLU on
 * Hopper (kvcal_gemm_swiglu_fp8_launch) and the quantization from its row
 * absmax (kvcal_fp8_quant_absmax_launch), against the CPU reference of the
 * served layer (kvcal_fp8_linear_ref, each output rounded to bf16, then
 * kvcal_fp8_swiglu_quant_ref): act within the bf16 bound and mostly equal
 * (the summation orders differ), each row's absmax exactly the max of the
 * act the kernel wrote, the bytes and scales of the quantization exactly
 * the reference's on that act. Shapes with rows, k and n off the tiles
 * (padded last weight block, k past the last whole block, rows past the
 * last cluster tile), per-tensor and per-channel weight scales, and one
 * large enough that every CTA walks several tiles. A GPU without the
 * build's sm_90a code: the rows are reported skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/fp8_ref.h"
#include "kernels/cuda/ops.h"
#include "tests/test_cuda_util.h"

#define ACT_ATOL 2e-2
#define ACT_RTOL 2e-2

static void *dev_put(const void *h, size_t bytes)
{
    void *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void dev_get(void *h, const void *d, size_t bytes)
{
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* One shape: x (rows, k) quantized per token, [gate; up] (2n, k) random e4m3
 * with a per-tensor (channel 0) or per-row scale. Returns 0 where the GPU
 * does not run the kernel. */
static int check_shape(int rows, int k, int n, int channel)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rows * 131 + k * 7 + n);
    const int64_t nx = (int64_t)rows * k, nw = 2 * (int64_t)n * k, na = (int64_t)rows * n;
    const int tiled = kvcal_gemm_swiglu_rows(n);
    float *x = kvcal_test_rand_bf16(&rng, nx, -1.0f, 1.0f);
    float *wf = kvcal_test_rand_bf16(&rng, nw, -1.0f, 1.0f);
    const kvcal_fp8_linear f = {channel ? KVCAL_FP8W_CHANNEL : KVCAL_FP8W_TENSOR,
                                KVCAL_FP8A_TOKEN, 0, 0, 0};
    const int64_t nsc = kvcal_fp8_weight_scales(&f, 2 * n, k);
    uint8_t *wq = malloc((size_t)nw), *wt = malloc((size_t)tiled * k),
            *xq = malloc((size_t)nx), *q_ref = malloc((size_t)na),
            *q_got = malloc((size_t)na);
    float *wsc = malloc((size_t)nsc * sizeof *wsc), *xs = malloc((size_t)rows * 4),
          *gu = malloc((size_t)rows * 2 * n * sizeof *gu),
          *scratch = malloc((size_t)(nx + nw) * sizeof *scratch),
          *act_ref = malloc((size_t)na * sizeof *act_ref),
          *s_ref = malloc((size_t)rows * 4), *s_got = malloc((size_t)rows * 4),
          *absmax = malloc((size_t)rows * 4);
    CU_ASSERT_FATAL(wq && wt && xq && q_ref && q_got && wsc && xs && gu && scratch &&
                    act_ref && s_ref && s_got && absmax);
    /* the weight: e4m3 bytes of the random values over 0.05 (a row's scale
     * between 0.02 and 0.05 per channel) */
    for (int r = 0; r < 2 * n; r++) {
        const float s = channel ? 0.02f + 0.03f * (float)(r % 7) / 6.0f : 0.03f;
        if (channel)
            wsc[r] = s;
        for (int c = 0; c < k; c++)
            wq[(int64_t)r * k + c] =
                kvcal_fp8_e4m3_from_float(wf[(int64_t)r * k + c] * 8.0f);
    }
    if (!channel)
        for (int64_t i = 0; i < nsc; i++)
            wsc[i] = 0.03f;
    /* the padding rows hold the largest e4m3 values and NaN: what they hold
     * must reach neither act nor the absmax */
    for (int i = 0; i < tiled; i++) {
        const int src = kvcal_gemm_swiglu_source_row(i, n);
        if (src >= 0)
            memcpy(wt + (int64_t)i * k, wq + (int64_t)src * k, (size_t)k);
        else
            for (int c = 0; c < k; c++)
                wt[(int64_t)i * k + c] = c % 5 ? 0x7e : 0x7f;
    }
    kvcal_fp8_quant_act_ref(xq, xs, x, rows, k, KVCAL_FP8A_TOKEN, 0, 0.0f);
    /* the reference: the served GEMM (x quantized as above), rounded to bf16,
     * then SwiGLU and the per-token quantization */
    kvcal_fp8_linear_ref(gu, x, wq, wsc, 0.0f, &f, NULL, rows, k, 2 * n, scratch);
    for (int64_t i = 0; i < (int64_t)rows * 2 * n; i++)
        gu[i] = kvcal_bf16_round(gu[i]);
    kvcal_fp8_swiglu_quant_ref(q_ref, s_ref, act_ref, gu, rows, n, KVCAL_FP8A_TOKEN, 0,
                               0.0f);

    uint8_t *d_xq = dev_put(xq, (size_t)nx), *d_wt = dev_put(wt, (size_t)tiled * k),
            *d_q = NULL;
    float *d_xs = dev_put(xs, (size_t)rows * 4), *d_wsc = dev_put(wsc, (size_t)nsc * 4),
          *d_absmax = NULL, *d_s = NULL, *d_in = NULL;
    kvcal_bf16 *d_act = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_act, (size_t)na * 2), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_absmax, (size_t)rows * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_q, (size_t)na), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_s, (size_t)rows * 4), cudaSuccess);
    const float static_scale = 0.0125f;
    d_in = dev_put(&static_scale, sizeof static_scale);
    int ran = 1;
    const kvcal_status st = kvcal_gemm_swiglu_fp8_launch(
        d_act, d_absmax, d_xq, d_xs, 1, d_wt, d_wsc, channel, rows, k, n, 0);
    if (st == KVCAL_ERR_UNSUPPORTED) {
        printf("skipped: %s ", kvcal_last_error());
        ran = 0;
    } else {
        CU_ASSERT_EQUAL_FATAL(st, KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(cudaDeviceSynchronize(), cudaSuccess);
        float *act = kvcal_test_dev_download_bf16(d_act, na);
        dev_get(absmax, d_absmax, (size_t)rows * 4);
        int64_t far = 0, same = 0, absmax_off = 0;
        for (int r = 0; r < rows; r++) {
            float m = 0.0f;
            for (int c = 0; c < n; c++) {
                const int64_t i = (int64_t)r * n + c;
                far += !(fabs(act[i] - act_ref[i]) <=
                         ACT_ATOL + ACT_RTOL * fabs(act_ref[i]));
                same += act[i] == act_ref[i];
                m = fmaxf(m, fabsf(act[i]));
            }
            absmax_off += m != absmax[r];
        }
        if (far || same < na * 85 / 100 || absmax_off)
            fprintf(stderr,
                    "\ngemm_swiglu_fp8 %d x %d x %d%s: %lld of %lld off the bound, %lld "
                    "equal to the reference, %lld row absmax off\n",
                    rows, k, n, channel ? " per channel" : "", (long long)far,
                    (long long)na, (long long)same, (long long)absmax_off);
        CU_ASSERT_EQUAL(far, 0);
        CU_ASSERT(same >= na * 85 / 100);
        CU_ASSERT_EQUAL(absmax_off, 0);
        /* the quantization of that act, per token and static, bit for bit */
        for (int mode = 0; mode < 2; mode++) {
            const kvcal_fp8_act_scale m = mode ? KVCAL_FP8A_STATIC : KVCAL_FP8A_TOKEN;
            kvcal_fp8_quant_act_ref(q_ref, s_ref, act, rows, n, m, 0, static_scale);
            CU_ASSERT_EQUAL(kvcal_fp8_quant_absmax_launch(d_q, d_s, d_act, d_absmax, rows,
                                                          n, m, d_in, 0),
                            KVCAL_OK);
            dev_get(q_got, d_q, (size_t)na);
            dev_get(s_got, d_s, (size_t)rows * 4);
            int64_t bytes_off = 0, scales_off = 0;
            for (int64_t i = 0; i < na; i++)
                bytes_off += q_got[i] != q_ref[i];
            for (int r = 0; r < rows; r++)
                scales_off += s_got[r] != s_ref[r];
            if (bytes_off || scales_off)
                fprintf(stderr, "\nfp8_quant_absmax %s: %lld bytes, %lld scales off\n",
                        mode ? "static" : "per token", (long long)bytes_off,
                        (long long)scales_off);
            CU_ASSERT_EQUAL(bytes_off, 0);
            CU_ASSERT_EQUAL(scales_off, 0);
        }
        free(act);
    }
    cudaFree(d_xq);
    cudaFree(d_wt);
    cudaFree(d_q);
    cudaFree(d_xs);
    cudaFree(d_wsc);
    cudaFree(d_absmax);
    cudaFree(d_s);
    cudaFree(d_in);
    cudaFree(d_act);
    free(x);
    free(wf);
    free(wq);
    free(wt);
    free(xq);
    free(q_ref);
    free(q_got);
    free(wsc);
    free(xs);
    free(gu);
    free(scratch);
    free(act_ref);
    free(s_ref);
    free(s_got);
    free(absmax);
    return ran;
}

static void gemm_swiglu_fp8_matches_the_served_layer(void)
{
    if (!check_shape(300, 320, 200, 0)) /* every size off its tile */
        return;
    check_shape(1000, 1024, 384, 1); /* per-channel weight scales */
    check_shape(4096, 512, 2048, 0); /* 256 cluster tiles: every CTA loops */
    check_shape(1, 128, 8, 1);       /* one row, one k block, 8 outputs */
}

/* checked before any device work */
static void gemm_swiglu_fp8_refuses_sizes_off_16_and_8(void)
{
    void *p = (void *)256;
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_fp8_launch(p, p, p, p, 1, p, p, 0, 4, 120, 64, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("k a multiple of 16"));
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_fp8_launch(p, p, p, p, 1, p, p, 0, 4, 128, 60, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(
        kvcal_gemm_swiglu_fp8_launch(p, p, p, p, 1, p, (float *)260, 1, 4, 128, 64, 0),
        KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_fp8_launch(p, p, p, p, 1, p, p, 0, 0, 128, 64, 0),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(
        kvcal_fp8_quant_absmax_launch(p, p, p, NULL, 4, 64, KVCAL_FP8A_TOKEN, NULL, 0),
        KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("fp8_quant_absmax"));
    CU_ASSERT_EQUAL(
        kvcal_fp8_quant_absmax_launch(p, p, p, p, 4, 64, KVCAL_FP8A_GROUP, p, 0),
        KVCAL_ERR_INVALID_ARG);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(gemm_swiglu_fp8_matches_the_served_layer),
    KVCAL_TEST(gemm_swiglu_fp8_refuses_sizes_off_16_and_8),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(gemm_swiglu_fp8, KVCAL_NEEDS_GPU, tests)
