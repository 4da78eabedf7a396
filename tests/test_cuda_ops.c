/* tests/test_cuda_ops.c: every CUDA kernel against its CPU reference
 * (kernels/cpu/ops.h) on odd shapes: batch 1 and 19, lengths that are not a
 * multiple of any tile, head_dim 80, GQA and MQA. Inputs are random bf16
 * values; the references run in fp32 on the same values. Sums and products
 * get |got - ref| <= atol + |ref| * rtol with the bounds stated per test; the
 * observer, order-independent, must match exactly. In a build without CUDA
 * the suite holds no tests; without a device it is reported skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_cuda_util.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cjson/cJSON.h>

#include "calib/executor.h"
#include "io/json_file.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "observers/stats.h"

// --- helpers -------------------------------------------------------------------

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&p, bytes), cudaSuccess);
    return p;
}

/* Counts elements outside atol + |ref| * rtol (NaN counts as outside). */
static int64_t count_far(const float *got, const float *ref, int64_t n, double atol,
                         double rtol)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - (double)ref[i]) <=
              atol + fabs((double)ref[i]) * rtol))
            bad++;
    return bad;
}

static void sync_ok(void)
{
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
}

// --- residual add + RMSNorm ------------------------------------------------------

/* bf16 output against the fp32 reference: two roundings (2^-9 relative each:
 * x * rsqrt, then times the weight) plus float reordering in the sum of
 * squares. */
#define NORM_ATOL 1e-3
#define NORM_RTOL 8e-3

static void check_add_rmsnorm(int rows, int dim, int with_delta)
{
    const int64_t n = (int64_t)rows * dim;
    float *res = kvcal_test_rand_bf16(&rng_state, n, -2.0f, 2.0f),
          *delta = kvcal_test_rand_bf16(&rng_state, n, -1.0f, 1.0f);
    float *w = kvcal_test_rand_bf16(&rng_state, dim, 0.5f, 1.5f),
          *ref = malloc((size_t)n * sizeof *ref);
    float *sum = malloc((size_t)n * sizeof *sum);
    kvcal_bf16 *d_res = kvcal_test_dev_upload_bf16(res, n),
               *d_delta = kvcal_test_dev_upload_bf16(delta, n);
    kvcal_bf16 *d_w = kvcal_test_dev_upload_bf16(w, dim),
               *d_out = dev_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        sum[i] = with_delta ? kvcal_bf16_round(res[i] + delta[i]) : res[i];
    kvcal_rmsnorm_ref(ref, sum, w, rows, dim, 1e-5f);

    CU_ASSERT_EQUAL(kvcal_add_rmsnorm_launch(d_out, d_res, with_delta ? d_delta : NULL,
                                             d_w, rows, dim, 1e-5f, 0),
                    KVCAL_OK);
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n),
          *got_res = kvcal_test_dev_download_bf16(d_res, n);
    CU_ASSERT_EQUAL(count_far(got, ref, n, NORM_ATOL, NORM_RTOL), 0);
    CU_ASSERT_EQUAL(memcmp(got_res, sum, (size_t)n * sizeof *sum), 0);
    /* and bf16 arithmetic's result (transformers' RMSNorm) bit for bit but
     * where the two scales straddle a rounding boundary (at most 1%) */
    int64_t same = 0;
    for (int r = 0; r < rows; r++) {
        const float *x = sum + (int64_t)r * dim;
        double ss = 0.0;
        for (int c = 0; c < dim; c++)
            ss += (double)x[c] * x[c];
        const float inv = 1.0f / sqrtf((float)(ss / dim) + 1e-5f);
        for (int c = 0; c < dim; c++)
            same += got[(int64_t)r * dim + c] ==
                    kvcal_bf16_round(kvcal_bf16_round(x[c] * inv) * w[c]);
    }
    CU_ASSERT(same >= n - n / 100);
    free(got);
    free(got_res);
    cudaFree(d_res);
    cudaFree(d_delta);
    cudaFree(d_w);
    cudaFree(d_out);
    free(res);
    free(delta);
    free(w);
    free(ref);
    free(sum);
}

static void add_rmsnorm_matches_reference_and_updates_residual_exactly(void)
{
    check_add_rmsnorm(19, 200, 1); /* 16-byte path */
    check_add_rmsnorm(1, 90, 1);   /* dim not a multiple of 8: scalar path */
    check_add_rmsnorm(19, 4096, 0);
}

// --- SwiGLU ----------------------------------------------------------------------

/* Two bf16 roundings (silu(gate), then times up) against fp32. */
#define SWIGLU_ATOL 1e-3
#define SWIGLU_RTOL 8e-3

static void check_swiglu(int rows, int n)
{
    const int64_t total = (int64_t)rows * n;
    float *gu = kvcal_test_rand_bf16(&rng_state, 2 * total, -4.0f, 4.0f);
    float *gate = malloc((size_t)total * sizeof *gate),
          *up = malloc((size_t)total * sizeof *up);
    float *ref = malloc((size_t)total * sizeof *ref);
    for (int r = 0; r < rows; r++) {
        memcpy(gate + (int64_t)r * n, gu + (int64_t)r * 2 * n, (size_t)n * sizeof *gu);
        memcpy(up + (int64_t)r * n, gu + (int64_t)r * 2 * n + n, (size_t)n * sizeof *gu);
    }
    kvcal_swiglu_ref(ref, gate, up, total);
    kvcal_bf16 *d_gu = kvcal_test_dev_upload_bf16(gu, 2 * total),
               *d_out = dev_alloc((size_t)total * 2);
    CU_ASSERT_EQUAL(kvcal_swiglu_launch(d_out, d_gu, rows, n, 0), KVCAL_OK);
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, total);
    CU_ASSERT_EQUAL(count_far(got, ref, total, SWIGLU_ATOL, SWIGLU_RTOL), 0);
    /* and bf16 arithmetic's result (silu rounded, then the product) bit for
     * bit but where the device's fast exp and division and the host's
     * straddle a rounding boundary (<= 1%) */
    int64_t same = 0;
    for (int64_t i = 0; i < total; i++)
        same +=
            got[i] ==
            kvcal_bf16_round(kvcal_bf16_round(gate[i] / (1.0f + expf(-gate[i]))) * up[i]);
    CU_ASSERT(same >= total - total / 100);
    free(got);
    cudaFree(d_gu);
    cudaFree(d_out);
    free(gu);
    free(gate);
    free(up);
    free(ref);
}

static void swiglu_matches_reference_on_odd_widths(void)
{
    check_swiglu(19, 136);
    check_swiglu(1, 37);
}

// --- GEMM ------------------------------------------------------------------------

/* Inputs in [-1, 1): |ref| up to ~sqrt(k)/3; fp32 accumulation in another
 * order plus one bf16 rounding of the output. */
#define GEMM_ATOL 2e-2
#define GEMM_RTOL 8e-3

/* candidate -1: the algorithm kvcal_gemm_launch uses; returns the shape's
 * number of candidates */
static int check_gemm(kvcal_gemm_t *g, int rows, int k, int n, int with_bias,
                      int candidate)
{
    int count = 0;
    float *x = kvcal_test_rand_bf16(&rng_state, (int64_t)rows * k, -1.0f, 1.0f);
    float *w = kvcal_test_rand_bf16(&rng_state, (int64_t)n * k, -1.0f, 1.0f);
    float *bias = kvcal_test_rand_bf16(&rng_state, n, -1.0f, 1.0f);
    float *ref = malloc((size_t)rows * n * sizeof *ref);
    kvcal_matmul_ref(ref, x, w, with_bias ? bias : NULL, rows, k, n);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(x, (int64_t)rows * k);
    kvcal_bf16 *d_w = kvcal_test_dev_upload_bf16(w, (int64_t)n * k);
    kvcal_bf16 *d_b = kvcal_test_dev_upload_bf16(bias, n);
    kvcal_bf16 *d_out = dev_alloc((size_t)rows * n * 2);
    CU_ASSERT_EQUAL(kvcal_gemm_launch_candidate(g, candidate, d_out, d_x, d_w,
                                                with_bias ? d_b : NULL, rows, k, n, 0,
                                                &count, NULL),
                    KVCAL_OK);
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, (int64_t)rows * n);
    CU_ASSERT_EQUAL(count_far(got, ref, (int64_t)rows * n, GEMM_ATOL, GEMM_RTOL), 0);
    free(got);
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_out);
    free(x);
    free(w);
    free(bias);
    free(ref);
    return count;
}

static void gemm_matches_reference_with_bias_epilogue(void)
{
    kvcal_gemm_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &g), KVCAL_OK);
    check_gemm(g, 19, 136, 200, 1, -1);
    check_gemm(g, 1, 64, 40, 0, -1);
    check_gemm(g, 300, 80, 24, 1, -1);
    check_gemm(g, 19, 136, 200, 1, -1); /* the cached plan again */
    kvcal_gemm_destroy(g);
    kvcal_gemm_destroy(NULL);
}

/* Over 1 GFLOP the first launch times cuBLASLt's candidates, then the
 * fastest computes the same product. */
static void gemm_over_1_gflop_matches_reference_after_tuning(void)
{
    kvcal_gemm_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &g), KVCAL_OK);
    check_gemm(g, 1024, 1024, 520, 1, -1);
    check_gemm(g, 1024, 1024, 520, 1, -1);
    kvcal_gemm_destroy(g);
}

/* Every algorithm cuBLASLt proposes for a tuned shape (what
 * bench/runner_ops times one by one) computes the product; a candidate out
 * of range is refused before any launch. */
static void gemm_every_candidate_matches_reference(void)
{
    kvcal_gemm_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &g), KVCAL_OK);
    const int count = check_gemm(g, 1024, 1024, 520, 1, -1);
    CU_ASSERT(count >= 1);
    for (int c = 0; c < count; c++)
        check_gemm(g, 1024, 1024, 520, 1, c);
    kvcal_bf16 *p = (kvcal_bf16 *)16;
    CU_ASSERT_EQUAL(
        kvcal_gemm_launch_candidate(g, count, p, p, p, p, 1024, 1024, 520, 0, NULL, NULL),
        KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("candidate"));
    kvcal_gemm_destroy(g);
}

// --- gate/up GEMM + SwiGLU in one kernel ------------------------------------------

/* The unfused path's roundings (gate and up to bf16, silu(gate), the
 * product); the sums differ from the fp32 reference's in order only. */
#define GEMM_SWIGLU_ATOL 2e-2
#define GEMM_SWIGLU_RTOL 2e-2

/* Runs the fused kernel on x (rows, k), [Wgate; Wup] (2n, k) and checks it
 * against the host reference and, value for value, against the unfused
 * path (kvcal_gemm_launch, then kvcal_swiglu_launch). Returns 0 when the
 * GPU is not a Hopper (the kernel refuses it), 1 when it ran. */
static int check_gemm_swiglu(kvcal_gemm_t *g, int rows, int k, int n)
{
    const int64_t nx = (int64_t)rows * k, nw = 2 * (int64_t)n * k, na = (int64_t)rows * n;
    float *x = kvcal_test_rand_bf16(&rng_state, nx, -1.0f, 1.0f);
    float *w = kvcal_test_rand_bf16(&rng_state, nw, -1.0f, 1.0f);
    float *gu = malloc((size_t)rows * 2 * n * sizeof *gu);
    float *ref = malloc((size_t)na * sizeof *ref);
    kvcal_bf16 *w_host = malloc((size_t)nw * sizeof *w_host),
               *w_tiled = malloc((size_t)nw * sizeof *w_tiled);
    kvcal_matmul_ref(gu, x, w, NULL, rows, k, 2 * n);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < n; c++) {
            const float gate = kvcal_bf16_round(gu[(int64_t)r * 2 * n + c]),
                        up = kvcal_bf16_round(gu[(int64_t)r * 2 * n + n + c]);
            ref[(int64_t)r * n + c] = gate / (1.0f + expf(-gate)) * up;
        }
    for (int64_t i = 0; i < nw; i++)
        w_host[i] = kvcal_bf16_from_float(w[i]);
    kvcal_gemm_swiglu_interleave(w_tiled, w_host, k, n);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(x, nx), *d_w = dev_alloc((size_t)nw * 2),
               *d_wt = dev_alloc((size_t)nw * 2), *d_gu = dev_alloc((size_t)rows * 4 * n),
               *d_act = dev_alloc((size_t)na * 2), *d_unfused = dev_alloc((size_t)na * 2);
    CU_ASSERT_EQUAL(cudaMemcpy(d_w, w_host, (size_t)nw * 2, cudaMemcpyHostToDevice),
                    cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpy(d_wt, w_tiled, (size_t)nw * 2, cudaMemcpyHostToDevice),
                    cudaSuccess);
    const kvcal_status st = kvcal_gemm_swiglu_launch(d_act, d_x, d_wt, rows, k, n, 0);
    if (st != KVCAL_ERR_UNSUPPORTED)
        CU_ASSERT_EQUAL(st, KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_gemm_launch(g, d_gu, d_x, d_w, NULL, rows, k, 2 * n, 0),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_swiglu_launch(d_unfused, d_gu, rows, n, 0), KVCAL_OK);
    sync_ok();
    if (st == KVCAL_OK) {
        float *got = kvcal_test_dev_download_bf16(d_act, na),
              *unfused = kvcal_test_dev_download_bf16(d_unfused, na);
        CU_ASSERT_EQUAL(count_far(got, ref, na, GEMM_SWIGLU_ATOL, GEMM_SWIGLU_RTOL), 0);
        /* the same roundings as the unfused path: equal but where the two
         * summation orders straddle a bf16 rounding boundary */
        int64_t same = 0;
        for (int64_t i = 0; i < na; i++)
            same += got[i] == unfused[i];
        CU_ASSERT(same >= na - na / 50);
        free(got);
        free(unfused);
    }
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_wt);
    cudaFree(d_gu);
    cudaFree(d_act);
    cudaFree(d_unfused);
    free(x);
    free(w);
    free(gu);
    free(ref);
    free(w_host);
    free(w_tiled);
    return st == KVCAL_OK;
}

/* One row and one weight block (one 2-CTA cluster, one CTA without rows);
 * k off the 64-wide K tile (the tail read as zeros); rows off the 128-row
 * tile and an odd number of row blocks (a cluster's second CTA past the
 * end); more tiles than clusters in two row groups (the persistent walk),
 * with fewer k blocks than a tile's epilogue has parts and with more (a
 * tile's epilogue runs during the next tile's first k blocks). */
static void gemm_swiglu_matches_unfused_path_on_odd_shapes(void)
{
    kvcal_gemm_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &g), KVCAL_OK);
    if (!check_gemm_swiglu(g, 1, 64, 128)) {
        printf("skipped: not a Hopper GPU ");
        kvcal_gemm_destroy(g);
        return;
    }
    check_gemm_swiglu(g, 19, 200, 256);
    check_gemm_swiglu(g, 300, 520, 384);
    check_gemm_swiglu(g, 2100, 256, 1280);
    check_gemm_swiglu(g, 2100, 584, 1024);
    kvcal_gemm_destroy(g);
}

static void gemm_swiglu_refuses_widths_off_128_and_unaligned_k(void)
{
    kvcal_bf16 *p = (kvcal_bf16 *)256;
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 4, 64, 100, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("n of 128"));
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 4, 60, 128, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 0, 64, 128, 0), KVCAL_OK);
}

// --- attention -------------------------------------------------------------------

/* P is rounded to bf16 for the P V product (2^-9 relative per weight) and
 * the output once more; outputs are averages of values in [-1, 1). */
#define ATT_ATOL 1e-2
#define ATT_RTOL 2e-2

/* Runs kernel `version` (0: kvcal_attention_launch's default) on a fused QKV
 * buffer and compares every sequence with the CPU reference. */
static void check_attention_version(int version, int batch, int seq, int heads,
                                    int kv_heads, int hd)
{
    const int64_t tokens = (int64_t)batch * seq;
    const int64_t stride = (int64_t)(heads + 2 * kv_heads) * hd;
    const int64_t out_stride =
        (int64_t)heads * hd + 8; /* a gap the kernel must not touch */
    const float scale = 1.0f / sqrtf((float)hd);
    float *qkv = kvcal_test_rand_bf16(&rng_state, tokens * stride, -1.0f, 1.0f);
    kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(qkv, tokens * stride);
    kvcal_bf16 *d_out = dev_alloc((size_t)tokens * out_stride * 2);
    const kvcal_bf16 *d_k = d_qkv + (int64_t)heads * hd;
    const kvcal_bf16 *d_v = d_qkv + (int64_t)(heads + kv_heads) * hd;
    CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)tokens * out_stride * 2),
                    cudaSuccess);
    const kvcal_status st =
        version == 0 ? kvcal_attention_launch(d_out, out_stride, d_qkv, d_k, d_v, stride,
                                              batch, seq, heads, kv_heads, hd, scale, 0)
                     : kvcal_attention_launch_version(version, d_out, out_stride, d_qkv,
                                                      d_k, d_v, stride, batch, seq, heads,
                                                      kv_heads, hd, scale, 0);
    CU_ASSERT_EQUAL(st, KVCAL_OK);
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, tokens * out_stride);
    int64_t gap_touched = 0;
    const int64_t bad =
        kvcal_test_attention_far(qkv, got, batch, seq, heads, kv_heads, hd, out_stride,
                                 ATT_ATOL, ATT_RTOL, &gap_touched);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(gap_touched, 0);
    free(got);
    cudaFree(d_qkv);
    cudaFree(d_out);
    free(qkv);
}

/* Every kernel version, and the default entry point. */
static void check_attention(int batch, int seq, int heads, int kv_heads, int hd)
{
    for (int version = 0; version <= KVCAL_ATTENTION_VERSIONS; version++)
        check_attention_version(version, batch, seq, heads, kv_heads, hd);
}

static void attention_matches_reference_gqa_head_dim_80_odd_lengths(void)
{
    check_attention(2, 19, 4, 2, 80);
    check_attention(1, 131, 8, 2, 80);
    check_attention(2, 300, 2, 1, 80);
}

static void attention_matches_reference_mqa_and_every_head_dim(void)
{
    check_attention(1, 130, 3, 1, 64);
    check_attention(3, 65, 4, 4, 96);
    check_attention(1, 77, 2, 1, 128);
    check_attention(19, 1, 2, 2, 64);
}

static void attention_portable_path_matches_reference_on_small_head_dims(void)
{
    check_attention_version(0, 2, 37, 4, 2, 16);
    check_attention_version(0, 1, 70, 6, 3, 48);
    check_attention_version(0, 3, 9, 2, 1, 8);
    check_attention_version(0, 1, 33, 2, 2, 72);
}

static void attention_rejects_head_dim_over_256(void)
{
    CU_ASSERT_EQUAL(kvcal_attention_launch((kvcal_bf16 *)16, 6 * 264, (kvcal_bf16 *)16,
                                           (kvcal_bf16 *)16, (kvcal_bf16 *)16, 6 * 264, 1,
                                           4, 2, 2, 264, 0.1f, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("head_dim 264"));
}

// --- RoPE + observer -------------------------------------------------------------

/* The reference norm and rotation are fp32 (sin/cos in double); the kernel
 * rounds as bf16 arithmetic does (kernels/cuda/bf16_round.cuh): the norm
 * twice, sin/cos, each product and the sum. Each of those roundings moves a
 * term by at most 2^-9 of its operand, so a rotated element may differ from
 * the reference by (|a| + |b|) * ROPE_TERM_RTOL beyond atol + |ref| * rtol,
 * (a, b) its pair before the rotation. */
#define ROPE_ATOL 4e-3
#define ROPE_RTOL 8e-3
#define ROPE_TERM_RTOL (1.0 / 128)

/* Counts rotated rows (n values) outside the bound above; pre holds the
 * rows before the rotation, in the reference's layout. */
static int64_t count_far_rotated(const float *got, const float *ref, const float *pre,
                                 int64_t rows, int hd, int rot_dim, int interleaved)
{
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < hd; c++) {
            const int64_t i = r * hd + c;
            double pair = 0.0;
            if (c < rot_dim) {
                const int half = rot_dim / 2;
                const int mate = interleaved ? c ^ 1 : (c < half ? c + half : c - half);
                pair = fabs((double)pre[i]) + fabs((double)pre[r * hd + mate]);
            }
            if (!(fabs((double)got[i] - (double)ref[i]) <=
                  ROPE_ATOL + fabs((double)ref[i]) * ROPE_RTOL + pair * ROPE_TERM_RTOL))
                bad++;
        }
    return bad;
}

typedef struct rope_case {
    int tokens, heads, kv_heads, hd, rot_dim, interleaved, qk_norm;
    float attention_factor; /* 1, or yarn's (0.1 ln(factor) + 1) */
} rope_case;

/* yarn's attention factor for a context extended 4x */
#define YARN_FACTOR_4 1.1386294f

/* One head row as transformers computes it in bf16 (what the kernel is meant
 * to reproduce): RMSNorm (x * rsqrt rounded, times the weight, rounded),
 * cos/sin times the attention factor rounded, each product and the sum
 * rounded. */
static void rope_row_bf16_arithmetic(float *row, const float *norm_w, int hd, int rot_dim,
                                     int interleaved, int pos, const float *inv_freq,
                                     float eps, float attention_factor)
{
    if (norm_w) {
        float ss = 0.0f;
        for (int c = 0; c < hd; c++)
            ss += row[c] * row[c];
        const float r = 1.0f / sqrtf(ss / (float)hd + eps);
        for (int c = 0; c < hd; c++)
            row[c] = kvcal_bf16_round(kvcal_bf16_round(row[c] * r) * norm_w[c]);
    }
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        const float angle = (float)pos * inv_freq[i];
        const float cs = kvcal_bf16_round((float)cos((double)angle) * attention_factor);
        const float sn = kvcal_bf16_round((float)sin((double)angle) * attention_factor);
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = row[a], x1 = row[b];
        row[a] = kvcal_bf16_round(kvcal_bf16_round(x0 * cs) - kvcal_bf16_round(x1 * sn));
        row[b] = kvcal_bf16_round(kvcal_bf16_round(x1 * cs) + kvcal_bf16_round(x0 * sn));
    }
}

/* version 0: kvcal_rope_observe_launch's own choice */
static void check_rope_observe_version(rope_case c, int version)
{
    const int64_t stride = (int64_t)(c.heads + 2 * c.kv_heads) * c.hd;
    const int64_t n = (int64_t)c.tokens * stride;
    const int bins = KVCAL_HIST_BINS;
    float *qkv = kvcal_test_rand_bf16(&rng_state, n, -3.0f, 3.0f);
    float *qn = kvcal_test_rand_bf16(&rng_state, c.hd, 0.5f, 1.5f),
          *kn = kvcal_test_rand_bf16(&rng_state, c.hd, 0.5f, 1.5f);
    int32_t *pos = malloc((size_t)c.tokens * sizeof *pos);
    float *inv_freq = malloc((size_t)(c.rot_dim / 2) * sizeof *inv_freq);
    for (int t = 0; t < c.tokens; t++)
        pos[t] = t % 7 == 3 ? -1 : 5 * t + 1; /* every 7th token is padding */
    for (int i = 0; i < c.rot_dim / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)c.rot_dim);

    /* Host statistics of 2 layers, pre-filled by observing a random block, so
     * folding (max, +) is checked; the device observes into a copy of them
     * at layer 1's slice. */
    kvcal_stats_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(2, c.kv_heads, c.hd, &st), KVCAL_OK);
    float *pre =
        kvcal_test_rand_bf16(&rng_state, (int64_t)5 * c.kv_heads * c.hd, -2.0f, 2.0f);
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kv_block blk =
            kvcal_kv_block_dense(pre, 1, 5, c.kv_heads, c.hd, NULL, NULL);
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, 1, kv, &blk), KVCAL_OK);
    }
    const int64_t am_n = (int64_t)c.kv_heads * c.hd, h_n = (int64_t)c.kv_heads * bins;
    kvcal_kv_observer obs;
    for (int kv = 0; kv < 2; kv++) {
        obs.absmax[kv] = dev_alloc((size_t)am_n * sizeof(float));
        obs.hist[kv] = dev_alloc((size_t)h_n * sizeof(uint64_t));
        obs.batch_absmax[kv] = dev_alloc((size_t)c.kv_heads * sizeof(float));
        cudaMemcpy(obs.absmax[kv], st->absmax[kv] + am_n, (size_t)am_n * sizeof(float),
                   cudaMemcpyHostToDevice);
        cudaMemcpy(obs.hist[kv], st->hist[kv] + h_n, (size_t)h_n * sizeof(uint64_t),
                   cudaMemcpyHostToDevice);
        cudaMemcpy(obs.batch_absmax[kv], st->batch_absmax[kv] + c.kv_heads,
                   (size_t)c.kv_heads * sizeof(float), cudaMemcpyHostToDevice);
    }
    kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(qkv, n),
               *d_qn = kvcal_test_dev_upload_bf16(qn, c.hd);
    kvcal_bf16 *d_kn = kvcal_test_dev_upload_bf16(kn, c.hd);
    int32_t *d_pos = dev_alloc((size_t)c.tokens * sizeof *pos);
    float *d_inv = dev_alloc((size_t)(c.rot_dim / 2) * sizeof *inv_freq);
    cudaMemcpy(d_pos, pos, (size_t)c.tokens * sizeof *pos, cudaMemcpyHostToDevice);
    cudaMemcpy(d_inv, inv_freq, (size_t)(c.rot_dim / 2) * sizeof *inv_freq,
               cudaMemcpyHostToDevice);
    kvcal_rope_cfg rope = {d_inv,
                           c.rot_dim,
                           c.interleaved,
                           c.qk_norm ? d_qn : NULL,
                           c.qk_norm ? d_kn : NULL,
                           1e-6f,
                           c.attention_factor};
    CU_ASSERT_EQUAL(
        version
            ? kvcal_rope_observe_launch_version(version, d_qkv, stride, d_pos, c.tokens,
                                                c.heads, c.kv_heads, c.hd, &rope, &obs, 0)
            : kvcal_rope_observe_launch(d_qkv, stride, d_pos, c.tokens, c.heads,
                                        c.kv_heads, c.hd, &rope, &obs, 0),
        KVCAL_OK);
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_qkv, n);

    /* q and k against norm + rope references, head by head */
    const int qk_heads = c.heads + c.kv_heads;
    float *ref = malloc((size_t)c.tokens * qk_heads * c.hd * sizeof *ref);
    for (int t = 0; t < c.tokens; t++)
        memcpy(ref + (int64_t)t * qk_heads * c.hd, qkv + t * stride,
               (size_t)qk_heads * c.hd * sizeof *ref);
    if (c.qk_norm)
        for (int t = 0; t < c.tokens; t++)
            for (int h = 0; h < qk_heads; h++) {
                float *row = ref + ((int64_t)t * qk_heads + h) * c.hd;
                kvcal_rmsnorm_ref(row, row, h < c.heads ? qn : kn, 1, c.hd, 1e-6f);
            }
    float *unrotated = malloc((size_t)c.tokens * qk_heads * c.hd * sizeof *unrotated);
    memcpy(unrotated, ref, (size_t)c.tokens * qk_heads * c.hd * sizeof *unrotated);
    kvcal_rope_scaled_ref(ref, pos, inv_freq, c.tokens, qk_heads, c.hd, c.rot_dim,
                          c.interleaved, c.attention_factor);
    int64_t bad = 0, padding_changed = 0;
    for (int t = 0; t < c.tokens; t++) {
        const float *g = got + t * stride;
        if (pos[t] < 0)
            padding_changed +=
                memcmp(g, qkv + t * stride, (size_t)stride * sizeof *g) != 0;
        else
            bad += count_far_rotated(g, ref + (int64_t)t * qk_heads * c.hd,
                                     unrotated + (int64_t)t * qk_heads * c.hd, qk_heads,
                                     c.hd, c.rot_dim, c.interleaved);
        bad += pos[t] >= 0 && memcmp(g + (int64_t)qk_heads * c.hd,
                                     qkv + t * stride + (int64_t)qk_heads * c.hd,
                                     (size_t)c.kv_heads * c.hd * sizeof *g) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(padding_changed, 0);

    /* and it is bf16 arithmetic's result, bit for bit, but where the device's
     * sin/cos or norm scale and the host's fall on two sides of a rounding
     * boundary (rare: at most 1% of the values) */
    int64_t same = 0, compared = 0;
    float *row = malloc((size_t)c.hd * sizeof *row);
    for (int t = 0; t < c.tokens; t++)
        for (int h = 0; pos[t] >= 0 && h < qk_heads; h++) {
            memcpy(row, qkv + t * stride + (int64_t)h * c.hd, (size_t)c.hd * sizeof *row);
            rope_row_bf16_arithmetic(row,
                                     !c.qk_norm    ? NULL
                                     : h < c.heads ? qn
                                                   : kn,
                                     c.hd, c.rot_dim, c.interleaved, pos[t], inv_freq,
                                     1e-6f, c.attention_factor);
            const float *g = got + t * stride + (int64_t)h * c.hd;
            for (int i = 0; i < c.hd; i++)
                same += g[i] == row[i];
            compared += c.hd;
        }
    CU_ASSERT(same >= compared - compared / 100);
    free(row);

    /* the device observer equals kvcal_stats_observe_ref on what was stored:
     * K rotated and rounded to bf16, V, padding skipped */
    uint8_t *valid = malloc((size_t)c.tokens);
    for (int t = 0; t < c.tokens; t++)
        valid[t] = pos[t] >= 0;
    float *am = malloc((size_t)am_n * sizeof *am), bam[64];
    uint64_t *hist = malloc((size_t)h_n * sizeof *hist);
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kv_block blk = {got + (int64_t)(c.heads + kv * c.kv_heads) * c.hd,
                              1,
                              c.tokens,
                              (int64_t)c.tokens * stride,
                              stride,
                              c.hd,
                              NULL,
                              valid,
                              NULL};
        CU_ASSERT_EQUAL(kvcal_stats_observe_ref(st, 1, kv, &blk), KVCAL_OK);
        cudaMemcpy(am, obs.absmax[kv], (size_t)am_n * sizeof *am, cudaMemcpyDeviceToHost);
        cudaMemcpy(hist, obs.hist[kv], (size_t)h_n * sizeof *hist,
                   cudaMemcpyDeviceToHost);
        cudaMemcpy(bam, obs.batch_absmax[kv], (size_t)c.kv_heads * sizeof(float),
                   cudaMemcpyDeviceToHost);
        CU_ASSERT_EQUAL(memcmp(am, st->absmax[kv] + am_n, (size_t)am_n * sizeof *am), 0);
        CU_ASSERT_EQUAL(memcmp(hist, st->hist[kv] + h_n, (size_t)h_n * sizeof *hist), 0);
        CU_ASSERT_EQUAL(memcmp(bam, st->batch_absmax[kv] + c.kv_heads,
                               (size_t)c.kv_heads * sizeof(float)),
                        0);
    }
    kvcal_stats_destroy(st);
    free(valid);
    free(pre);
    for (int kv = 0; kv < 2; kv++) {
        cudaFree(obs.absmax[kv]);
        cudaFree(obs.hist[kv]);
        cudaFree(obs.batch_absmax[kv]);
    }
    free(am);
    free(hist);
    free(ref);
    free(unrotated);
    free(got);
    cudaFree(d_qkv);
    cudaFree(d_qn);
    cudaFree(d_kn);
    cudaFree(d_pos);
    cudaFree(d_inv);
    free(qkv);
    free(qn);
    free(kn);
    free(pos);
    free(inv_freq);
}

/* Every kernel version that takes the shape (version 2: head_dim and rot_dim
 * multiples of 16), and the default choice. */
static void check_rope_observe(rope_case c)
{
    check_rope_observe_version(c, 0);
    for (int v = 1; v <= KVCAL_ROPE_VERSIONS; v++)
        if (v == 1 || (c.hd % 16 == 0 && c.rot_dim % 16 == 0))
            check_rope_observe_version(c, v);
}

static void rope_observe_rotate_half_gqa_head_dim_80_matches_reference(void)
{
    check_rope_observe((rope_case){19, 4, 2, 80, 80, 0, 0, 1.0f});
}

static void rope_observe_interleaved_partial_with_qk_norm_matches_reference(void)
{
    check_rope_observe((rope_case){19, 6, 3, 64, 32, 1, 1, 1.0f});
}

static void rope_observe_spans_blocks_mqa_and_wide_heads(void)
{
    check_rope_observe((rope_case){300, 8, 1, 160, 64, 0, 1, 1.0f});
    check_rope_observe((rope_case){1, 2, 2, 128, 128, 1, 0, 1.0f});
    /* version 2 takes 4 kv heads a block: 6 leave the second block half empty */
    check_rope_observe((rope_case){259, 12, 6, 128, 128, 0, 1, 1.0f});
    check_rope_observe((rope_case){7, 2, 1, 256, 128, 1, 1, 1.0f});
}

/* no q heads: rows of k and v alone (the runner's last layer), both kernels */
static void rope_observe_k_and_v_only_rows(void)
{
    check_rope_observe((rope_case){131, 0, 8, 128, 128, 0, 0, 1.0f});
    check_rope_observe((rope_case){37, 0, 3, 64, 32, 1, 1, 1.0f});
    check_rope_observe((rope_case){19, 0, 2, 40, 40, 0, 1, YARN_FACTOR_4});
}

static void rope_observe_head_dim_off_16_takes_the_portable_kernel(void)
{
    check_rope_observe((rope_case){37, 6, 2, 40, 40, 0, 1, 1.0f});
    check_rope_observe((rope_case){37, 4, 4, 96, 24, 1, 0, 1.0f});
}

/* yarn: cos and sin times the attention factor, rounded, in both kernels
 * (version 2 at head_dim 128, version 1 at 40) */
static void rope_observe_yarn_attention_factor_scales_cos_and_sin(void)
{
    check_rope_observe((rope_case){131, 4, 2, 128, 128, 0, 1, YARN_FACTOR_4});
    check_rope_observe((rope_case){37, 6, 2, 40, 24, 1, 0, YARN_FACTOR_4});
}

static void rope_observe_refuses_attention_factor_not_positive_finite(void)
{
    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        kvcal_rope_cfg rope = {(const float *)16, 64, 0, NULL, NULL, 0.0f, bad[i]};
        CU_ASSERT_EQUAL(kvcal_rope_observe_launch((kvcal_bf16 *)16, 3 * 64,
                                                  (const int32_t *)16, 4, 1, 1, 64, &rope,
                                                  NULL, 0),
                        KVCAL_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "attention factor"));
    }
}

static void rope_observe_version_2_refuses_head_dim_off_16(void)
{
    kvcal_rope_cfg rope = {(const float *)16, 40, 0, NULL, NULL, 0.0f, 1.0f};
    CU_ASSERT_EQUAL(kvcal_rope_observe_launch_version(2, (kvcal_bf16 *)16, 3 * 40,
                                                      (const int32_t *)16, 4, 1, 1, 40,
                                                      &rope, NULL, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "head_dim 40"));
}

static void rope_observe_absmax_surfaces_nan(void)
{
    const int hd = 64, stride = 3 * hd, bins = KVCAL_HIST_BINS;
    float *qkv = kvcal_test_rand_bf16(&rng_state, 4 * stride, -1.0f, 1.0f);
    qkv[2 * stride + 2 * hd + 5] = NAN; /* token 2, v channel 5 */
    int32_t pos[4] = {0, 1, 2, 3};
    float inv[32];
    for (int i = 0; i < 32; i++)
        inv[i] = 1.0f / (float)(i + 1);
    kvcal_kv_observer obs;
    for (int kv = 0; kv < 2; kv++) {
        obs.absmax[kv] = dev_alloc(hd * sizeof(float));
        obs.hist[kv] = dev_alloc(bins * sizeof(uint64_t));
        obs.batch_absmax[kv] = dev_alloc(sizeof(float));
    }
    int32_t *d_pos = dev_alloc(sizeof pos);
    float *d_inv = dev_alloc(sizeof inv);
    cudaMemcpy(d_pos, pos, sizeof pos, cudaMemcpyHostToDevice);
    cudaMemcpy(d_inv, inv, sizeof inv, cudaMemcpyHostToDevice);
    kvcal_rope_cfg rope = {d_inv, hd, 0, NULL, NULL, 0.0f, 1.0f};
    kvcal_bf16 *d_qkv = NULL;
    for (int version = 1; version <= KVCAL_ROPE_VERSIONS; version++) {
        for (int kv = 0; kv < 2; kv++) {
            cudaMemset(obs.absmax[kv], 0, hd * sizeof(float));
            cudaMemset(obs.hist[kv], 0, bins * sizeof(uint64_t));
            cudaMemset(obs.batch_absmax[kv], 0, sizeof(float));
        }
        cudaFree(d_qkv);
        d_qkv = kvcal_test_dev_upload_bf16(qkv, 4 * stride);
        CU_ASSERT_EQUAL(kvcal_rope_observe_launch_version(version, d_qkv, stride, d_pos,
                                                          4, 1, 1, hd, &rope, &obs, 0),
                        KVCAL_OK);
        sync_ok();
        float am[64], bam;
        cudaMemcpy(am, obs.absmax[KVCAL_V], sizeof am, cudaMemcpyDeviceToHost);
        cudaMemcpy(&bam, obs.batch_absmax[KVCAL_V], sizeof bam, cudaMemcpyDeviceToHost);
        CU_ASSERT_TRUE(isnan(am[5]));
        CU_ASSERT_FALSE(isnan(am[4]));
        CU_ASSERT_TRUE(isnan(bam));
    }
    for (int kv = 0; kv < 2; kv++) {
        cudaFree(obs.absmax[kv]);
        cudaFree(obs.hist[kv]);
        cudaFree(obs.batch_absmax[kv]);
    }
    cudaFree(d_qkv);
    cudaFree(d_pos);
    cudaFree(d_inv);
    free(qkv);
}

// --- the CUDA runner ------------------------------------------------------------

/* Per-layer per-head K/V absmax of the bf16 CUDA runner against the golden
 * values of transformers in fp32 (tests/make_golden.py): bf16 weights and
 * activations through two layers. */
#define RUNNER_RTOL 3e-2

static void check_runner_golden_with(const char *name, const kvcal_backend_options *opt)
{
    kvcal_stats_t *stats = NULL;
    float *bmax = NULL;
    int64_t rows = 0;
    cJSON *root = kvcal_test_cuda_run_golden(name, opt, &stats, &bmax, &rows);
    const int lh = stats->num_layers * stats->num_kv_heads;
    double worst = 0.0;
    for (int kv = 0; kv < 2; kv++) {
        cJSON *want = cJSON_GetObjectItem(root, kv ? "v_absmax" : "k_absmax");
        for (int l = 0; l < stats->num_layers; l++) {
            CU_ASSERT_EQUAL(stats->tokens[l], rows);
            for (int h = 0; h < stats->num_kv_heads; h++) {
                const double w =
                    cJSON_GetArrayItem(cJSON_GetArrayItem(want, l), h)->valuedouble;
                const double got = kvcal_stats_head_absmax(stats, l, kv, h);
                const double rel = fabs(got - w) / fabs(w);
                worst = rel > worst || rel != rel ? rel : worst;
                /* the one batch's batch_absmax is the absmax */
                CU_ASSERT_EQUAL(bmax[kv * lh + l * stats->num_kv_heads + h], (float)got);
            }
        }
    }
    printf("(%s: worst rel. error %.2e) ", name, worst);
    CU_ASSERT(worst <= RUNNER_RTOL);
    free(bmax);
    kvcal_stats_destroy(stats);
    cJSON_Delete(root);
}

static void check_runner_golden(const char *name)
{
    check_runner_golden_with(name, NULL);
}

static void cuda_runner_matches_transformers_on_golden_models(void)
{
    check_runner_golden("llama3_gqa_hd48_bf16");
    check_runner_golden("llama_mha_linear_tied_fp32");
    check_runner_golden("mistral_mqa_fp16");
    check_runner_golden("qwen2_gqa_bias_bf16");
    check_runner_golden("qwen3_gqa_hd80_qknorm_bf16");
    check_runner_golden("qwen2_yarn_bf16");
    check_runner_golden("llama_gqa_mlp256_bf16");
    check_runner_golden("llama3_gqa_hd64_bf16");
}

/* The model whose intermediate_size (256) the fused gate/up + SwiGLU kernel
 * takes, its MLP both ways: KVCAL_MLP_UNFUSED (cuBLAS's GEMM, then SwiGLU)
 * and KVCAL_MLP_FUSED (the kernel, which the backend takes by itself on a
 * Hopper GPU), refused where it does not apply. */
static void cuda_runner_mlp_both_ways_matches_transformers(void)
{
    kvcal_model_t *model = NULL;
    kvcal_backend *be = NULL;
    kvcal_backend_options o;
    memset(&o, 0, sizeof o);
    o.max_batch = 1, o.max_seq_len = 16;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/llama_gqa_mlp256_bf16", &model),
        KVCAL_OK);
    o.mlp = KVCAL_MLP_UNFUSED;
    check_runner_golden_with("llama_gqa_mlp256_bf16", &o);
    o.mlp = KVCAL_MLP_FUSED;
    const kvcal_status st = kvcal_backend_cuda_create(model, &o, &be);
    if (be)
        be->ops->destroy(be);
    if (st == KVCAL_ERR_UNSUPPORTED) {
        CU_ASSERT(kvcal_test_error_has("needs a Hopper GPU"));
        printf("fused: skipped, not a Hopper GPU ");
    } else {
        CU_ASSERT_EQUAL(st, KVCAL_OK);
        if (st == KVCAL_OK)
            check_runner_golden_with("llama_gqa_mlp256_bf16", &o);
    }
    kvcal_model_close(model);
}

/* A calibration with no statistics (kvcal calibrate --time-only) leaves the
 * device statistics untouched: a later calibration into zeroed statistics
 * counts its own batch alone. */
static void cuda_runner_forward_without_stats_observes_nothing(void)
{
    kvcal_model_t *model = NULL;
    kvcal_exec_t *x = NULL;
    kvcal_stats_t *stats = NULL, *once = NULL;
    int32_t ids[2 * 40], lengths[2] = {40, 33};
    for (int i = 0; i < 2 * 40; i++)
        ids[i] = (i * 7 + 3) % 100;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/llama3_gqa_hd48_bf16", &model), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(model);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &stats),
        KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &once), KVCAL_OK);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CUDA;
    o.backend.max_batch = 2, o.backend.max_seq_len = 40;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(model, &o, &x), KVCAL_OK);
    const kvcal_exec_samples s = {ids, lengths, 2, 40, 2, NULL, NULL};
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, stats, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, NULL, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, once, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(once->tokens[d->num_layers - 1], 73);
    CU_ASSERT(kvcal_stats_head_absmax(once, d->num_layers - 1, KVCAL_K, 0) > 0.0f);
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    for (int kv = 0; kv < 2; kv++) {
        CU_ASSERT_EQUAL(memcmp(once->absmax[kv], stats->absmax[kv],
                               lh * d->head_dim * sizeof(float)),
                        0);
        CU_ASSERT_EQUAL(memcmp(once->hist[kv], stats->hist[kv],
                               lh * stats->num_bins * sizeof(uint64_t)),
                        0);
    }
    kvcal_exec_destroy(x);
    kvcal_stats_destroy(stats);
    kvcal_stats_destroy(once);
    kvcal_model_close(model);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(add_rmsnorm_matches_reference_and_updates_residual_exactly),
    KVCAL_TEST(swiglu_matches_reference_on_odd_widths),
    KVCAL_TEST(gemm_matches_reference_with_bias_epilogue),
    KVCAL_TEST(attention_matches_reference_gqa_head_dim_80_odd_lengths),
    KVCAL_TEST(attention_matches_reference_mqa_and_every_head_dim),
    KVCAL_TEST(attention_portable_path_matches_reference_on_small_head_dims),
    KVCAL_TEST(attention_rejects_head_dim_over_256),
    KVCAL_TEST(rope_observe_rotate_half_gqa_head_dim_80_matches_reference),
    KVCAL_TEST(rope_observe_interleaved_partial_with_qk_norm_matches_reference),
    KVCAL_TEST(rope_observe_spans_blocks_mqa_and_wide_heads),
    KVCAL_TEST(rope_observe_head_dim_off_16_takes_the_portable_kernel),
    KVCAL_TEST(rope_observe_k_and_v_only_rows),
    KVCAL_TEST(rope_observe_yarn_attention_factor_scales_cos_and_sin),
    KVCAL_TEST(rope_observe_refuses_attention_factor_not_positive_finite),
    KVCAL_TEST(rope_observe_version_2_refuses_head_dim_off_16),
    KVCAL_TEST(rope_observe_absmax_surfaces_nan),
    KVCAL_TEST(cuda_runner_matches_transformers_on_golden_models),
    KVCAL_TEST(cuda_runner_mlp_both_ways_matches_transformers),
    KVCAL_TEST(cuda_runner_forward_without_stats_observes_nothing),
    CU_TEST_INFO_NULL,
};
/* A suite of its own: the tuned GEMM may run cuBLAS kernels that synchronize
 * through mbarriers, which compute-sanitizer's racecheck does not model (it
 * reports hazards inside them), so bench/run_gpu_cuda.sh race-checks
 * cuda_ops alone and memchecks both. */
static CU_TestInfo tuning_tests[] = {
    KVCAL_TEST(gemm_over_1_gflop_matches_reference_after_tuning),
    KVCAL_TEST(gemm_every_candidate_matches_reference),
    CU_TEST_INFO_NULL,
};
/* A suite of its own for the same reason: the fused kernel's TMA loads and
 * wgmma products synchronize through mbarriers. */
static CU_TestInfo fused_tests[] = {
    KVCAL_TEST(gemm_swiglu_matches_unfused_path_on_odd_shapes),
    KVCAL_TEST(gemm_swiglu_refuses_widths_off_128_and_unaligned_k),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
static CU_TestInfo tuning_tests[] = {CU_TEST_INFO_NULL};
static CU_TestInfo fused_tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(cuda_ops, KVCAL_NEEDS_GPU, tests)
KVCAL_SUITE(cuda_gemm_tuning, KVCAL_NEEDS_GPU, tuning_tests)
KVCAL_SUITE(cuda_gemm_fused, KVCAL_NEEDS_GPU, fused_tests)
