/* tests/test_moe_bias_cuda.c: an expert projection's bias on the device
 * (kvcal_moe_bias_launch) on plans built by hand, against the bf16
 * arithmetic it stands for (y + b in fp32, rounded once): both of its
 * paths, 16-byte words (n a multiple of 8, aligned buffers) and one value
 * a lane (an odd n, a buffer off 16 bytes), rows of unused tiles and
 * padding rows left as they were. The gpt-oss rows of tests/test_backend_ops.c
 * check it inside the whole MoE op. In a build without CUDA the suite holds
 * no tests; without a device it is reported skipped. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/ops.h"

#define TILES 3

/* A plan of TILES tiles: tile 0 expert 2, tile 1 unused, tile 2 expert 0;
 * every 5th row padding. y (capacity, n) starting `shift` values into its
 * buffer, bias (3, n) likewise. */
static void check_bias(int n, int shift)
{
    const int cap = TILES * KVCAL_MOE_TILE_ROWS, E = 3;
    const int32_t tile_expert[TILES] = {2, -1, 0};
    int32_t *sorted = malloc((size_t)cap * sizeof *sorted);
    kvcal_bf16 *y = malloc((size_t)cap * n * sizeof *y),
               *want = malloc((size_t)cap * n * sizeof *y),
               *got = malloc((size_t)cap * n * sizeof *y),
               *bias = malloc((size_t)E * n * sizeof *bias);
    CU_ASSERT_FATAL(sorted && y && want && got && bias);
    uint64_t rng = 0x2545f4914f6cdd1dull + (uint64_t)n;
    for (int64_t i = 0; i < (int64_t)cap * n + E * n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        const float v = (float)((rng >> 40) % 20001) / 1000.0f - 10.0f;
        if (i < (int64_t)cap * n)
            y[i] = kvcal_bf16_from_float(v);
        else
            bias[i - (int64_t)cap * n] = kvcal_bf16_from_float(v);
    }
    for (int r = 0; r < cap; r++)
        sorted[r] = r % 5 == 4 ? -1 : r;
    for (int r = 0; r < cap; r++) {
        const int e = tile_expert[r / KVCAL_MOE_TILE_ROWS];
        for (int j = 0; j < n; j++) {
            const int64_t i = (int64_t)r * n + j;
            want[i] = e < 0 || sorted[r] < 0
                          ? y[i]
                          : kvcal_bf16_from_float(kvcal_bf16_to_float(y[i]) +
                                                  kvcal_bf16_to_float(bias[e * n + j]));
        }
    }
    kvcal_bf16 *d_y = NULL, *d_b = NULL;
    int32_t *d_sorted = NULL, *d_tiles = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_y, ((size_t)cap * n + shift) * 2),
                          cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_b, ((size_t)E * n + shift) * 2),
                          cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_sorted, (size_t)cap * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_tiles, sizeof tile_expert), cudaSuccess);
    cudaMemcpy(d_y + shift, y, (size_t)cap * n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(d_b + shift, bias, (size_t)E * n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(d_sorted, sorted, (size_t)cap * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_tiles, tile_expert, sizeof tile_expert, cudaMemcpyHostToDevice);
    const kvcal_moe_plan plan = {
        .sorted = d_sorted, .tile_expert = d_tiles, .capacity = cap, .tiles = TILES};
    CU_ASSERT_EQUAL(kvcal_moe_bias_launch(d_y + shift, d_b + shift, &plan, n, 0),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(
        cudaMemcpy(got, d_y + shift, (size_t)cap * n * 2, cudaMemcpyDeviceToHost),
        cudaSuccess);
    int64_t off = 0;
    for (int64_t i = 0; i < (int64_t)cap * n; i++)
        off += got[i] != want[i];
    if (off)
        fprintf(stderr, "\nmoe bias n %d shift %d: %lld of %lld values off\n", n, shift,
                (long long)off, (long long)cap * n);
    CU_ASSERT_EQUAL(off, 0);
    cudaFree(d_y);
    cudaFree(d_b);
    cudaFree(d_sorted);
    cudaFree(d_tiles);
    free(sorted);
    free(y);
    free(want);
    free(got);
    free(bias);
}

static void moe_bias_adds_each_rows_expert_bias_rounded_once(void)
{
    check_bias(5760, 0); /* gpt-oss-20b's gate/up: 16-byte words */
    check_bias(64, 0);
    check_bias(37, 0); /* odd: a value a lane */
    check_bias(64, 1); /* buffers off 16 bytes: a value a lane */
    check_bias(1, 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(moe_bias_adds_each_rows_expert_bias_rounded_once),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(moe_bias_cuda, KVCAL_NEEDS_GPU, tests)
