/* tests/test_calibrator_cuda.c: the device calibrator
 * (kvcal_calibrator_observe_launch, end_step on the device) against the
 * host one fed the same K and V: the serialized statistics (absmax per
 * channel, histograms, tokens, moving averages, steps) are identical byte
 * for byte, on odd shapes (tokens 1, 19, 989 and 5000, over several blocks;
 * head_dim 1, 7, 128, 320 and 1024; 1, 3 and 8 kv heads), bf16, f16 and f32,
 * padded strides and padding slots; a NaN is recorded and refuses scales.
 * Needs a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcal.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

static uint32_t rng = 99u;
static uint32_t next_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    if (host && bytes)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* Random finite bits of dtype: exponents over a wide range, zeros and
 * negative zeros now and then (never NaN or Inf). */
static void fill(void *p, kvcal_dtype dtype, size_t n, int shift)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t r = next_u32();
        if (dtype == KVCAL_DTYPE_F32) {
            uint32_t e = 100u + (r % 40u) + (uint32_t)shift;
            uint32_t u = (r & 0x80000000u) | (e << 23) | (next_u32() & 0x7fffffu);
            if (r % 17u == 0)
                u &= 0x80000000u;
            memcpy((float *)p + i, &u, 4);
        } else if (dtype == KVCAL_DTYPE_BF16) {
            uint32_t e = 100u + (r % 40u) + (uint32_t)shift;
            uint16_t u = (uint16_t)(((r >> 16) & 0x8000u) | (e << 7) | (r & 0x7fu));
            ((uint16_t *)p)[i] = r % 17u == 0 ? (uint16_t)(u & 0x8000u) : u;
        } else {
            uint32_t e = 1u + (r % 29u);
            uint16_t u = (uint16_t)(((r >> 16) & 0x8000u) | (e << 10) | (r & 0x3ffu));
            ((uint16_t *)p)[i] = r % 17u == 0 ? (uint16_t)(u & 0x8000u) : u;
        }
    }
}

static unsigned char *bytes_of(const kvcal_calibrator_t *cal, size_t *n)
{
    *n = 0;
    if (kvcal_calibrator_serialize(cal, NULL, NULL, 0, n))
        return NULL;
    unsigned char *b = malloc(*n);
    if (b && kvcal_calibrator_serialize(cal, NULL, b, *n, n)) {
        free(b);
        return NULL;
    }
    return b;
}

/* Feeds the same steps to a host and a device calibrator; 1 when their
 * bytes are equal. */
static int device_matches_host(kvcal_dtype dtype, int L, int H, int D, int64_t T,
                               int pad, int steps, cudaStream_t stream)
{
    kvcal_calibrator_t *host = NULL, *dev = NULL;
    if (kvcal_calibrator_create(L, H, D, "ema:0.75", 0, &host) ||
        kvcal_calibrator_create(L, H, D, "ema:0.75", 1, &dev))
        return 0;
    const size_t es = dtype == KVCAL_DTYPE_F32 ? 4 : 2;
    const int64_t hs = D + (pad ? 5 : 0), ts = (int64_t)H * hs + (pad ? 3 : 0);
    const size_t n = (size_t)(T * ts);
    void *k = malloc(n * es), *v = malloc(n * es);
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    int ok = k && v && slots;
    for (int s = 0; ok && s < steps; s++)
        for (int l = 0; ok && l < L; l++) {
            fill(k, dtype, n, l + s);
            fill(v, dtype, n, 2 * l);
            for (int64_t t = 0; t < T; t++)
                slots[t] = pad && (t * 7 + s) % 5 == 1 ? -1 - t : t;
            void *dk = dev_copy(k, n * es), *dv = dev_copy(v, n * es);
            int64_t *ds = dev_copy(slots, (size_t)T * sizeof *slots);
            kvcal_kv_batch b = {k, v, dtype, T, ts, hs, ts, hs, pad ? slots : NULL};
            ok = kvcal_calibrator_observe_ref(host, l, &b) == KVCAL_OK;
            b.k = dk, b.v = dv, b.slot_mapping = pad ? ds : NULL;
            ok = ok && kvcal_calibrator_observe_launch(dev, l, &b, stream) == KVCAL_OK;
            cudaStreamSynchronize(stream);
            cudaFree(dk), cudaFree(dv), cudaFree(ds);
            if (l == L - 1 || s % 2) {
                ok = ok && kvcal_calibrator_end_step(host, NULL) == KVCAL_OK;
                ok = ok && kvcal_calibrator_end_step(dev, stream) == KVCAL_OK;
            }
        }
    size_t nh = 0, nd = 0;
    unsigned char *bh = ok ? bytes_of(host, &nh) : NULL;
    unsigned char *bd = ok ? bytes_of(dev, &nd) : NULL;
    ok = bh && bd && nh == nd && !memcmp(bh, bd, nh);
    if (!ok)
        fprintf(stderr, "\n  dtype %d, %d layers x %d heads x %d, %lld tokens, pad %d: "
                        "device statistics differ from the host's (%s)",
                (int)dtype, L, H, D, (long long)T, pad, kvcal_last_error());
    free(bh), free(bd), free(k), free(v), free(slots);
    kvcal_calibrator_destroy(host);
    kvcal_calibrator_destroy(dev);
    return ok;
}

static void device_calibrator_matches_host_bytes_on_odd_shapes(void)
{
    cudaStream_t stream;
    CU_ASSERT_EQUAL_FATAL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                          cudaSuccess);
    const kvcal_dtype dtypes[3] = {KVCAL_DTYPE_BF16, KVCAL_DTYPE_F16, KVCAL_DTYPE_F32};
    const int shapes[][3] = {{1, 1, 1}, {19, 3, 7}, {989, 8, 128}, {5000, 2, 64},
                             {19, 1, 1024}, {33, 3, 320}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int pad = 0; pad < 2; pad++)
                CU_ASSERT_TRUE(device_matches_host(dtypes[d], 2, shapes[s][1],
                                                   shapes[s][2], shapes[s][0], pad, 3,
                                                   stream));
    cudaStreamDestroy(stream);
}

/* Device bytes deserialize on the host and back onto the device; a device
 * and a host calibrator merge; the scales equal the host's. */
static void device_calibrator_bytes_and_merge_cross_the_host(void)
{
    const int L = 2, H = 4, D = 32;
    const int64_t T = 77;
    kvcal_calibrator_t *host = NULL, *dev = NULL, *other = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(L, H, D, "mse", 0, &host), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(L, H, D, "mse", 1, &dev), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(L, H, D, "mse", 0, &other), KVCAL_OK);
    const size_t n = (size_t)T * H * D;
    uint16_t *k = malloc(n * 2), *v = malloc(n * 2);
    for (int part = 0; part < 2; part++)
        for (int l = 0; l < L; l++) {
            fill(k, KVCAL_DTYPE_BF16, n, part);
            fill(v, KVCAL_DTYPE_BF16, n, l);
            kvcal_kv_batch b = {k, v, KVCAL_DTYPE_BF16, T, H * D, D, H * D, D, NULL};
            CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(host, l, &b), KVCAL_OK);
            if (part == 0) {
                CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(other, l, &b), KVCAL_OK);
                continue;
            }
            void *dk = dev_copy(k, n * 2), *dv = dev_copy(v, n * 2);
            b.k = dk, b.v = dv;
            CU_ASSERT_EQUAL(kvcal_calibrator_observe_launch(dev, l, &b, NULL), KVCAL_OK);
            cudaDeviceSynchronize();
            cudaFree(dk), cudaFree(dv);
        }
    CU_ASSERT_EQUAL(kvcal_calibrator_merge(dev, other, NULL), KVCAL_OK);
    size_t nb = 0;
    unsigned char *b = bytes_of(dev, &nb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    kvcal_calibrator_t *back = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_deserialize(b, nb, 1, &back), KVCAL_OK);
    kvcal_scales_t *want = NULL, *got = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_to_scales(host, KVCAL_GRANULARITY_HEAD, NULL, &want),
                          KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_to_scales(back, KVCAL_GRANULARITY_HEAD, NULL, &got),
                          KVCAL_OK);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            float k0, v0, k1, v1;
            kvcal_scales_get_head(want, l, h, &k0, &v0);
            kvcal_scales_get_head(got, l, h, &k1, &v1);
            CU_ASSERT_EQUAL(k0, k1);
            CU_ASSERT_EQUAL(v0, v1);
        }
    kvcal_scales_destroy(want);
    kvcal_scales_destroy(got);
    free(b), free(k), free(v);
    kvcal_calibrator_destroy(back);
    kvcal_calibrator_destroy(host);
    kvcal_calibrator_destroy(dev);
    kvcal_calibrator_destroy(other);
}

static void device_calibrator_records_a_nan_and_gives_no_scale(void)
{
    const int H = 2, D = 8;
    const int64_t T = 5;
    kvcal_calibrator_t *dev = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_calibrator_create(1, H, D, NULL, 1, &dev), KVCAL_OK);
    float x[5 * 2 * 8];
    for (int i = 0; i < T * H * D; i++)
        x[i] = 0.5f;
    x[(3 * H + 1) * D + 6] = NAN;
    void *d = dev_copy(x, sizeof x);
    kvcal_kv_batch b = {d, d, KVCAL_DTYPE_F32, T, H * D, D, H * D, D, NULL};
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_launch(dev, 0, &b, NULL), KVCAL_OK);
    kvcal_scales_t *s = NULL;
    CU_ASSERT_EQUAL(kvcal_calibrator_to_scales(dev, KVCAL_GRANULARITY_TENSOR, NULL, &s),
                    KVCAL_ERR_NONFINITE);
    CU_ASSERT(kvcal_test_error_has("kv head 1: token 3 channel 6 was nan"));
    CU_ASSERT_PTR_NULL(s);
    float hx[8] = {0};
    kvcal_kv_batch hb = {hx, hx, KVCAL_DTYPE_F32, 1, H * D, D, H * D, D, NULL};
    CU_ASSERT_EQUAL(kvcal_calibrator_observe_ref(dev, 0, &hb), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("lives on the device"));
    cudaFree(d);
    kvcal_calibrator_destroy(dev);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(device_calibrator_matches_host_bytes_on_odd_shapes),
    KVCAL_TEST(device_calibrator_bytes_and_merge_cross_the_host),
    KVCAL_TEST(device_calibrator_records_a_nan_and_gives_no_scale),
    CU_TEST_INFO_NULL,
};
#else
/* Built without CUDA: the suite has nothing to run and reports itself skipped. */
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(calibrator_cuda, KVCAL_NEEDS_GPU, tests)
