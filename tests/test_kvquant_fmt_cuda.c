/* tests/test_kvquant_fmt_cuda.c: the CUDA kernels of the cache formats
 * beyond e4m3 (kvcal_kv_quantize_fmt_launch, kvcal_kv_dequantize_fmt_launch)
 * against their CPU reference, byte for byte: every format, static (per
 * tensor and per head) and dynamic, both roundings of int8, bf16 / f16 /
 * f32 inputs and outputs, both layouts, tokens 1, 19 and 989 (the generic
 * kernels) and 4099 (the fast ones, head_dim 64, 128 and 256), head_dim 16,
 * 40, 128, 7 and 1024, 1, 2 and 5 kv heads, block_size 16 and 5, a padded
 * block stride, aligned and misaligned strides, padding and out-of-range
 * slots, NaN / Inf / zero / -0 / huge inputs and rows of zeros around an
 * infinity or a NaN, NVFP4 under a subnormal global scale; dequantization
 * of random cache bytes (NVFP4: NaN scale bytes, overflowing products
 * too); each device
 * conversion (the hardware's, or the fp32 arithmetic where it has none) on
 * every bf16 and f16 value and random floats; eval's query round trip on
 * every bf16 value; eval --modes all on the CUDA runner against the CPU's.
 * Needs a GPU. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcal.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/eval_ref.h"
#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/eval.h"
#include "kernels/cuda/kvquant_fmt.h"

#define POISON 0xA5

static uint32_t rng = 4242u;
static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    if (host)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

typedef struct fmt_case {
    kvcal_kv_format format;
    kvcal_kv_rounding rounding;
    int stat; /* static scales (granularity below) */
    kvcal_granularity granularity;
    kvcal_dtype dtype;
    kvcal_cache_layout layout;
    int T, H, D, bs;
    int pad_stride;        /* extra elements per token row (misaligns when odd) */
    int extra_block_bytes; /* block_stride beyond one block */
    int random_cache;      /* dequantize random cache bytes and parameters */
    float v_scale;         /* V's static scales when not 0 */
    int nan_scales;        /* random NVFP4 caches: e4m3 NaN scale bytes too */
} fmt_case;

static int esize(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 ? 4 : 2;
}

/* Runs one case on both devices; returns the number of differing bytes
 * (cache, scales, zero points, dequantized outputs of every dtype). */
static size_t run_case(const fmt_case *c)
{
    const int T = c->T, H = c->H, D = c->D;
    const int64_t row = (int64_t)H * D + c->pad_stride;
    const int64_t rb = kvcal_kv_format_row_bytes(c->format, D);
    const int64_t blocks = (T + c->bs - 1) / c->bs + 2;
    const int64_t bstride = c->bs * H * rb + c->extra_block_bytes;
    const size_t cache_bytes = (size_t)(blocks * bstride),
                 nscale = (size_t)(blocks * c->bs * H);
    const size_t in_bytes = (size_t)(T * row) * esize(c->dtype);
    uint8_t *k = malloc(in_bytes), *v = malloc(in_bytes);
    for (int64_t i = 0; i < T * row; i++) {
        float a = rnd() * 4.0f, b = rnd() * 0.3f - 0.1f;
        if (i % 97 == 3)
            a = NAN;
        if (i % 89 == 5)
            b = -INFINITY;
        if (i % 131 == 7)
            a = 3e5f;
        if (i % 53 == 11) /* a zero among V's values (0 x Inf under a subnormal scale) */
            b = 0.0f;
        const int64_t t = i / row, d = i % row;
        if (t % 7 == 2 && d < D) { /* head 0: zeros around an infinity, -0 around a NaN */
            a = d == 3 ? -INFINITY : 0.0f;
            b = d == 5 ? NAN : -0.0f;
        }
        kvcal_kv_store_elem(k, c->dtype, i, a);
        kvcal_kv_store_elem(v, c->dtype, i, b);
    }
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(T ? T : 1));
    for (int t = 0; t < T; t++)
        slots[t] = t % 11 == 4   ? -1
                   : t % 13 == 6 ? blocks * c->bs + 3
                                 : (t * 31 + 2) % (blocks * c->bs);
    /* injective on the valid slots: a scattered permutation of the first T */
    for (int t = 0; t < T; t++)
        if (slots[t] >= 0 && slots[t] < blocks * c->bs)
            slots[t] = (t * 7 + 3) % T;
    float ks[1024], vs[1024], kz[1024], vz[1024];
    for (int h = 0; h < H; h++) {
        ks[h] = c->format == KVCAL_KV_FORMAT_NVFP4 ? (2.0f + h) / 2688.0f
                                                   : (0.02f + h * 0.01f);
        vs[h] = c->v_scale                           ? c->v_scale
                : c->format == KVCAL_KV_FORMAT_NVFP4 ? 0.3f / 2688.0f
                                                     : 0.003f;
        kz[h] = -2.0f + 0.1f * h, vz[h] = -0.35f;
    }
    const int asym = c->format == KVCAL_KV_FORMAT_INT8_ASYM;
    kvcal_kv_qparams p = {c->format,
                          c->rounding,
                          c->granularity,
                          c->stat ? ks : NULL,
                          c->stat ? vs : NULL,
                          c->stat && asym ? kz : NULL,
                          c->stat && asym ? vz : NULL,
                          NULL,
                          NULL};
    /* host */
    uint8_t *hk = malloc(cache_bytes), *hv = malloc(cache_bytes);
    float *hsc = malloc(4 * 4 * nscale);
    memset(hk, POISON, cache_bytes), memset(hv, POISON, cache_bytes);
    for (size_t i = 0; i < 4 * nscale; i++)
        hsc[i] = -3.0f;
    kvcal_kv_batch b = {k, v, c->dtype, T, row, D, row, D, slots};
    kvcal_kv_cache hc = {hk,    hv, hsc, hsc + nscale, blocks,
                         c->bs, H,  D,   bstride,      c->layout};
    kvcal_kv_qparams hp = p;
    if (asym)
        hp.k_zero_cache = hsc + 2 * nscale, hp.v_zero_cache = hsc + 3 * nscale;
    size_t bad = 0;
    if (c->random_cache) { /* any byte, finite parameters (NVFP4 scales not NaN) */
        for (size_t i = 0; i < cache_bytes; i++) {
            rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
            hk[i] = (uint8_t)rng, hv[i] = (uint8_t)(rng >> 8);
            if (c->format == KVCAL_KV_FORMAT_NVFP4 && !c->nan_scales)
                hk[i] &= 0xf7, hv[i] &= 0xf7; /* never e4m3's NaN 0x7f / 0xff */
        }
        for (size_t i = 0; i < 4 * nscale; i++)
            hsc[i] = i < 2 * nscale ? 0.001f + fabsf(rnd()) : rnd() * 3.0f;
    } else if (kvcal_kv_quantize_fmt_ref(&b, &hc, &hp) != KVCAL_OK) {
        fprintf(stderr, "\n  ref: %s", kvcal_last_error());
        bad++;
    }
    /* device */
    void *dk = dev_copy(k, in_bytes), *dv = dev_copy(v, in_bytes);
    void *dslots = dev_copy(slots, sizeof(int64_t) * (size_t)(T ? T : 1));
    uint8_t *dck = dev_copy(NULL, cache_bytes), *dcv = dev_copy(NULL, cache_bytes);
    float *dsc = dev_copy(NULL, 4 * 4 * nscale);
    float *dks = dev_copy(ks, sizeof ks), *dvs = dev_copy(vs, sizeof vs);
    float *dkz = dev_copy(kz, sizeof kz), *dvz = dev_copy(vz, sizeof vz);
    cudaMemset(dck, POISON, cache_bytes), cudaMemset(dcv, POISON, cache_bytes);
    {
        float *init = malloc(4 * 4 * nscale);
        for (size_t i = 0; i < 4 * nscale; i++)
            init[i] = c->random_cache ? hsc[i] : -3.0f;
        cudaMemcpy(dsc, init, 4 * 4 * nscale, cudaMemcpyHostToDevice);
        free(init);
    }
    if (c->random_cache) {
        cudaMemcpy(dck, hk, cache_bytes, cudaMemcpyHostToDevice);
        cudaMemcpy(dcv, hv, cache_bytes, cudaMemcpyHostToDevice);
    }
    kvcal_kv_batch db = {dk, dv, c->dtype, T, row, D, row, D, dslots};
    kvcal_kv_cache dc = {dck,   dcv, dsc, dsc + nscale, blocks,
                         c->bs, H,   D,   bstride,      c->layout};
    kvcal_kv_qparams dp = p;
    if (c->stat) {
        dp.k_scale = dks, dp.v_scale = dvs;
        if (asym)
            dp.k_zero = dkz, dp.v_zero = dvz;
    }
    if (asym)
        dp.k_zero_cache = dsc + 2 * nscale, dp.v_zero_cache = dsc + 3 * nscale;
    /* the batches of 4096 tokens and more take the fast kernels */
    const int fast = T >= 4096;
    if (!c->random_cache && kvcal_kv_quantize_fmt_fast_applies(&db, &dc, &dp) != fast) {
        fprintf(stderr, "\n  the quantization %s the fast kernel",
                fast ? "misses" : "takes");
        bad++;
    }
    if (!c->random_cache &&
        (kvcal_kv_quantize_fmt_launch(&db, &dc, &dp, NULL) != KVCAL_OK ||
         cudaDeviceSynchronize() != cudaSuccess)) {
        fprintf(stderr, "\n  launch: %s", kvcal_last_error());
        bad++;
    }
    uint8_t *gk = malloc(cache_bytes), *gv = malloc(cache_bytes);
    float *gsc = malloc(4 * 4 * nscale);
    cudaMemcpy(gk, dck, cache_bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(gv, dcv, cache_bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(gsc, dsc, 4 * 4 * nscale, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < cache_bytes; i++)
        bad += (hk[i] != gk[i]) + (hv[i] != gv[i]);
    bad += memcmp(hsc, gsc, 4 * 4 * nscale) != 0;
    /* dequantization into every output dtype */
    const kvcal_dtype outs[3] = {KVCAL_DTYPE_F32, KVCAL_DTYPE_F16, KVCAL_DTYPE_BF16};
    const size_t out_bytes = (size_t)T * H * D * 4 + 16;
    uint8_t *ho = malloc(2 * out_bytes), *go = malloc(2 * out_bytes);
    void *dout = dev_copy(NULL, 2 * out_bytes);
    if (kvcal_kv_dequantize_fmt_fast_applies(&db, &dc, &dp, dout,
                                             (uint8_t *)dout + out_bytes) != fast) {
        fprintf(stderr, "\n  the dequantization %s the fast kernel",
                fast ? "misses" : "takes");
        bad++;
    }
    for (int o = 0; o < 3; o++) {
        /* NVFP4 into 16 bits, caches and block stride 16-byte aligned: staged */
        const int staged = fast && c->format == KVCAL_KV_FORMAT_NVFP4 &&
                           outs[o] != KVCAL_DTYPE_F32 && bstride % 16 == 0;
        if (kvcal_kv_dequantize_fmt_staged_applies(
                &db, &dc, &dp, dout, (uint8_t *)dout + out_bytes, outs[o]) != staged) {
            fprintf(stderr, "\n  the dequantization into dtype %d %s the staged kernel",
                    (int)outs[o], staged ? "misses" : "takes");
            bad++;
        }
        memset(ho, 0x5a, 2 * out_bytes);
        cudaMemset(dout, 0x5a, 2 * out_bytes);
        if (kvcal_kv_dequantize_fmt_ref(&b, &hc, &hp, ho, ho + out_bytes, outs[o]) !=
            KVCAL_OK)
            bad++;
        if (kvcal_kv_dequantize_fmt_launch(&db, &dc, &dp, dout,
                                           (uint8_t *)dout + out_bytes, outs[o],
                                           NULL) != KVCAL_OK ||
            cudaDeviceSynchronize() != cudaSuccess)
            bad++;
        cudaMemcpy(go, dout, 2 * out_bytes, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < 2 * out_bytes; i++)
            bad += ho[i] != go[i];
    }
    if (bad)
        fprintf(
            stderr,
            "\n  format %d static %d gran %d round %d dtype %d layout %d T %d H %d D %d "
            "bs %d pad %d random %d: %zu bytes differ",
            (int)c->format, c->stat, (int)c->granularity, (int)c->rounding, (int)c->dtype,
            (int)c->layout, T, H, D, c->bs, c->pad_stride, c->random_cache, bad);
    cudaFree(dk), cudaFree(dv), cudaFree(dslots), cudaFree(dck), cudaFree(dcv),
        cudaFree(dsc);
    cudaFree(dks), cudaFree(dvs), cudaFree(dkz), cudaFree(dvz), cudaFree(dout);
    free(k), free(v), free(slots), free(hk), free(hv), free(hsc), free(gk), free(gv),
        free(gsc);
    free(ho), free(go);
    return bad;
}

static void fmt_launches_match_the_reference_byte_for_byte(void)
{
    const kvcal_kv_format formats[4] = {KVCAL_KV_FORMAT_FP8_E5M2, KVCAL_KV_FORMAT_INT8,
                                        KVCAL_KV_FORMAT_INT8_ASYM, KVCAL_KV_FORMAT_NVFP4};
    const int shapes[][4] = {{1, 5, 16, 16}, {19, 1, 40, 5},   {989, 5, 128, 16},
                             {19, 5, 7, 5},  {3, 1, 1024, 16}, {19, 5, 48, 16}};
    const kvcal_dtype dtypes[3] = {KVCAL_DTYPE_BF16, KVCAL_DTYPE_F16, KVCAL_DTYPE_F32};
    size_t bad = 0;
    int cases = 0;
    for (int f = 0; f < 4; f++)
        for (int mode = 0; mode < 3; mode++) { /* dynamic, static tensor, static head */
            if ((formats[f] == KVCAL_KV_FORMAT_NVFP4 && mode == 0) ||
                (formats[f] == KVCAL_KV_FORMAT_FP8_E5M2 && mode > 0))
                continue;
            for (int s = 0; s < 6; s++)
                for (int dt = 0; dt < 3; dt++) {
                    if (formats[f] == KVCAL_KV_FORMAT_NVFP4 && shapes[s][2] % 16)
                        continue;
                    fmt_case c = {formats[f],
                                  (f + s + dt) % 2 ? KVCAL_KV_ROUND_TOWARD_ZERO
                                                   : KVCAL_KV_ROUND_NEAREST_EVEN,
                                  mode > 0,
                                  mode == 2 ? KVCAL_GRANULARITY_HEAD
                                            : KVCAL_GRANULARITY_TENSOR,
                                  dtypes[dt],
                                  (s + dt) % 2 ? KVCAL_CACHE_HND : KVCAL_CACHE_NHD,
                                  shapes[s][0],
                                  shapes[s][1],
                                  shapes[s][2],
                                  shapes[s][3],
                                  dt == 1 ? 3 : (s % 3 == 1 ? 8 : 0),
                                  s == 5 ? 64 : 0,
                                  0,
                                  0.0f,
                                  0};
                    bad += run_case(&c);
                    cases++;
                }
        }
    printf("(%d cases) ", cases);
    CU_ASSERT_EQUAL(bad, 0);
}

static const kvcal_kv_format every_format[4] = {
    KVCAL_KV_FORMAT_FP8_E5M2, KVCAL_KV_FORMAT_INT8, KVCAL_KV_FORMAT_INT8_ASYM,
    KVCAL_KV_FORMAT_NVFP4};

/* 4099 tokens of head_dim 64, 128 and 256: the fast kernels (run_case
 * checks that they are taken), every format, mode and rounding, bf16 and
 * f16, both layouts, block_size 16 (V's NVFP4 scales swizzled) and 5 (not),
 * a token stride padded by 8 elements and a padded block stride. */
static void fmt_fast_kernels_match_the_reference_byte_for_byte(void)
{
    const int dims[3] = {64, 128, 256};
    size_t bad = 0;
    int cases = 0;
    for (int f = 0; f < 4; f++)
        for (int mode = 0; mode < 3; mode++) { /* dynamic, static tensor, static head */
            if ((every_format[f] == KVCAL_KV_FORMAT_NVFP4 && mode == 0) ||
                (every_format[f] == KVCAL_KV_FORMAT_FP8_E5M2 && mode > 0))
                continue;
            for (int r = 0; r < 2; r++)
                for (int s = 0; s < 3; s++) {
                    if (r == 1 && (every_format[f] == KVCAL_KV_FORMAT_FP8_E5M2 ||
                                   every_format[f] == KVCAL_KV_FORMAT_NVFP4 || s != mode))
                        continue; /* the other rounding: once a mode */
                    fmt_case c = {
                        every_format[f],
                        r ? KVCAL_KV_ROUND_TOWARD_ZERO : KVCAL_KV_ROUND_NEAREST_EVEN,
                        mode > 0,
                        mode == 2 ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR,
                        (s + mode) % 2 ? KVCAL_DTYPE_F16 : KVCAL_DTYPE_BF16,
                        (s + f) % 2 ? KVCAL_CACHE_HND : KVCAL_CACHE_NHD,
                        4099,
                        2,
                        dims[s],
                        s == 2 ? 5 : 16,
                        s == 1 ? 8 : 0,
                        s == 2 ? 64 : 0,
                        0,
                        0.0f,
                        0};
                    bad += run_case(&c);
                    cases++;
                }
        }
    printf("(%d cases) ", cases);
    CU_ASSERT_EQUAL(bad, 0);
}

/* NVFP4 under a subnormal global scale (V's 1e-44, per tensor and per
 * head), where the decode scales' reciprocals overflow: a block's values
 * saturate, its zeros (0 x Inf) and the blocks of zeros (scale byte NaN,
 * reciprocal 0) encode as the reference encodes them; the fast kernel
 * (4099 tokens) and the generic one (19). */
static void fmt_nvfp4_matches_the_reference_under_a_subnormal_global_scale(void)
{
    size_t bad = 0;
    for (int g = 0; g < 2; g++)
        for (int big = 0; big < 2; big++) {
            fmt_case c = {KVCAL_KV_FORMAT_NVFP4,
                          KVCAL_KV_ROUND_NEAREST_EVEN,
                          1,
                          g ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR,
                          KVCAL_DTYPE_BF16,
                          KVCAL_CACHE_NHD,
                          big ? 4099 : 19,
                          2,
                          128,
                          16,
                          0,
                          0,
                          0,
                          1e-44f,
                          0};
            bad += run_case(&c);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Caches of random bytes (NVFP4: any nibble, every e4m3 scale but NaN) and
 * random parameters, dequantized by both kernels into every dtype: every
 * code of every format decodes as the reference decodes it (e5m2's
 * infinities and NaNs of either sign included). */
static void fmt_dequantize_decodes_every_byte_as_the_reference(void)
{
    size_t bad = 0;
    for (int f = 0; f < 4; f++)
        for (int big = 0; big < 2; big++)
            for (int stat = 0; stat < 2; stat++) {
                if ((every_format[f] == KVCAL_KV_FORMAT_NVFP4 && !stat) ||
                    (every_format[f] == KVCAL_KV_FORMAT_FP8_E5M2 && stat))
                    continue;
                fmt_case c = {every_format[f],
                              KVCAL_KV_ROUND_NEAREST_EVEN,
                              stat,
                              KVCAL_GRANULARITY_HEAD,
                              KVCAL_DTYPE_BF16,
                              big ? KVCAL_CACHE_NHD : KVCAL_CACHE_HND,
                              big ? 4099 : 301,
                              3,
                              big ? 128 : 48,
                              16,
                              0,
                              0,
                              1,
                              0.0f,
                              0};
                bad += run_case(&c);
            }
    CU_ASSERT_EQUAL(bad, 0);
}

/* run_case on random NVFP4 caches with e4m3 NaN scale bytes (0x7f, 0xff)
 * under V's global scale 3e35, in both layouts, of each shape {T, H, D,
 * block_size, extra block bytes}: the differing bytes. */
static size_t run_nvfp4_random(const int (*shapes)[5], int n)
{
    size_t bad = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < n; i++) {
            fmt_case c = {KVCAL_KV_FORMAT_NVFP4,
                          KVCAL_KV_ROUND_NEAREST_EVEN,
                          1,
                          KVCAL_GRANULARITY_HEAD,
                          KVCAL_DTYPE_BF16,
                          l ? KVCAL_CACHE_HND : KVCAL_CACHE_NHD,
                          shapes[i][0],
                          shapes[i][1],
                          shapes[i][2],
                          shapes[i][3],
                          0,
                          shapes[i][4],
                          1,
                          3e35f,
                          1};
            bad += run_case(&c);
        }
    return bad;
}

/* Random NVFP4 caches with e4m3 NaN scale bytes (0x7f, 0xff) and V's
 * global scale 3e35, under which blocks of the larger scale bytes have
 * finite decode scales but products that overflow to +-Inf: the fast
 * dequantization (its byte tables, its arithmetic for the NaN blocks) and
 * the generic one decode them as the reference, both layouts, head_dim 64,
 * 128 and 256. */
static void fmt_nvfp4_dequantize_decodes_nan_scales_and_overflows_as_the_reference(void)
{
    const int shapes[4][5] = {{301, 3, 48, 16, 0},
                              {4099, 3, 64, 16, 0},
                              {4099, 3, 128, 16, 0},
                              {4099, 3, 256, 16, 0}};
    CU_ASSERT_EQUAL(run_nvfp4_random(shapes, 4), 0);
}

/* NVFP4's staged dequantization (16-bit outputs) at the edges of its
 * tiles, random caches as above: rows a multiple of a block's (4096 x 1
 * head of 128) and not (tails of 4133 x 5 heads, 4097 x 2), V's scales
 * swizzled in blocks of 12 slots and not in blocks of 5, padded block
 * strides; and a block stride aligned to 8 bytes alone, which takes the
 * unstaged fast kernel (run_case checks which kernel each call takes). */
static void fmt_nvfp4_staged_dequantize_decodes_tiles_and_tails_as_the_reference(void)
{
    const int shapes[4][5] = {/* T, H, D, bs, extra block bytes */
                              {4096, 1, 128, 16, 0},
                              {4133, 5, 64, 12, 16},
                              {4097, 2, 256, 5, 32},
                              {4099, 3, 128, 16, 8}};
    CU_ASSERT_EQUAL(run_nvfp4_random(shapes, 4), 0);
}

/* The device conversions (kvcal_kvfmt_encode_launch: the instructions of
 * this GPU, or the fp32 arithmetic of GPUs without an e2m1 conversion)
 * against core/kvformat.h on every bf16 and f16 value, the floats beside
 * every bf16 value, and random bit patterns. */
static void fmt_device_conversions_match_the_reference_on_every_16_bit_input(void)
{
    const int64_t n = 3 * 65536 + (1 << 20);
    float *x = malloc(sizeof(float) * (size_t)n);
    uint8_t *got = malloc((size_t)n);
    for (int64_t i = 0; i < 65536; i++) {
        uint32_t u = (uint32_t)i << 16;
        memcpy(&x[i], &u, 4);
        u += 1u + (uint32_t)(i & 1) * 0xfffeu; /* the next float above or below */
        memcpy(&x[65536 + i], &u, 4);
        uint16_t h = (uint16_t)i;
        x[2 * 65536 + i] = kvcal_kv_load_elem(&h, KVCAL_DTYPE_F16, 0);
    }
    for (int64_t i = 3 * 65536; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
        memcpy(&x[i], &rng, 4);
    }
    float *dx = dev_copy(x, sizeof(float) * (size_t)n);
    uint8_t *dout = dev_copy(NULL, (size_t)n);
    int bad[6] = {0};
    for (int k = 0; k < 6; k++) { /* e5m2, int8 x 2 roundings, asym x 2, nvfp4 */
        const kvcal_kv_format f = k == 0  ? KVCAL_KV_FORMAT_FP8_E5M2
                                  : k < 3 ? KVCAL_KV_FORMAT_INT8
                                  : k < 5 ? KVCAL_KV_FORMAT_INT8_ASYM
                                          : KVCAL_KV_FORMAT_NVFP4;
        const int rz = k == 2 || k == 4;
        CU_ASSERT_EQUAL_FATAL(kvcal_kvfmt_encode_launch(f,
                                                        rz ? KVCAL_KV_ROUND_TOWARD_ZERO
                                                           : KVCAL_KV_ROUND_NEAREST_EVEN,
                                                        dx, dout, n, NULL),
                              KVCAL_OK);
        cudaMemcpy(got, dout, (size_t)n, cudaMemcpyDeviceToHost);
        const int r = rz ? KVCAL_INT_ROUND_TOWARD_ZERO : KVCAL_INT_ROUND_NEAREST_EVEN;
        for (int64_t i = 0; i < n; i++) {
            uint8_t want = f == KVCAL_KV_FORMAT_FP8_E5M2 ? kvcal_fp8_e5m2_from_float(x[i])
                           : f == KVCAL_KV_FORMAT_INT8
                               ? (uint8_t)(int8_t)kvcal_int_code(x[i], r, -128.0f, 127.0f)
                           : f == KVCAL_KV_FORMAT_INT8_ASYM
                               ? (uint8_t)kvcal_int_code(x[i], r, 0.0f, 255.0f)
                               : kvcal_fp4_e2m1_from_float(x[i]);
            if (got[i] != want && bad[k]++ < 3)
                fprintf(stderr, "\n  conversion %d of %a: 0x%02x, the reference 0x%02x",
                        k, (double)x[i], got[i], want);
        }
    }
    for (int k = 0; k < 6; k++)
        CU_ASSERT_EQUAL(bad[k], 0);
    CU_ASSERT_EQUAL(kvcal_kvfmt_encode_launch(KVCAL_KV_FORMAT_FP8_E4M3,
                                              KVCAL_KV_ROUND_NEAREST_EVEN, dx, dout, 1,
                                              NULL),
                    KVCAL_ERR_INVALID_ARG);
    cudaFree(dx), cudaFree(dout), free(x), free(got);
}

static void fmt_launch_rejects_what_the_reference_rejects(void)
{
    uint8_t *d = dev_copy(NULL, 64);
    int64_t *slots = dev_copy(NULL, 8);
    kvcal_kv_batch b = {d, d, KVCAL_DTYPE_BF16, 1, 24, 24, 24, 24, slots};
    kvcal_kv_cache c = {d, d, NULL, NULL, 1, 1, 1, 24, 0, KVCAL_CACHE_NHD};
    const float one = 1.0f;
    kvcal_kv_qparams nv = {
        KVCAL_KV_FORMAT_NVFP4, 0, 0, &one, &one, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams dyn = {
        KVCAL_KV_FORMAT_INT8, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_launch(&b, &c, &nv, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_launch(&b, &c, &dyn, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(strstr(kvcal_last_error(), "k_scale") != NULL);
    cudaFree(d), cudaFree(slots);
}

/* eval's query round trip (kvcal_fp8_roundtrip_launch) against the CPU
 * reference on every bf16 value, in rows with a stride. */
static void fp8_roundtrip_launch_matches_the_reference_on_every_bf16(void)
{
    const int rows = 65536 / 64, cols = 64, stride = 80;
    uint16_t *h = malloc(sizeof(uint16_t) * rows * stride);
    float *ref = malloc(sizeof(float) * rows * stride);
    for (int i = 0; i < rows * stride; i++) {
        int r = i / stride, c = i % stride;
        h[i] = (uint16_t)(c < cols ? r * cols + c : 0x3f80);
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&ref[i], &u, 4);
    }
    const float scale = 0.0371f;
    kvcal_fp8_roundtrip_ref(ref, stride, rows, cols, scale);
    uint16_t *d = dev_copy(h, sizeof(uint16_t) * rows * stride);
    CU_ASSERT_EQUAL_FATAL(kvcal_fp8_roundtrip_launch(d, stride, rows, cols, scale, NULL),
                          KVCAL_OK);
    cudaMemcpy(h, d, sizeof(uint16_t) * rows * stride, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < rows * stride; i++) {
        uint16_t want;
        kvcal_kv_store_elem(&want, KVCAL_DTYPE_BF16, 0, ref[i]);
        bad += h[i] != want && !((h[i] & 0x7fff) > 0x7f80 && (want & 0x7fff) > 0x7f80);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(kvcal_fp8_roundtrip_launch(d, 10, 2, 64, scale, NULL),
                    KVCAL_ERR_INVALID_ARG);
    cudaFree(d), free(h), free(ref);
}

/* `kvcal eval ... --modes all --device dev --json` on the golden head_dim-48
 * model (NVFP4 applies); NULL when it failed. */
static cJSON *eval_all(const char *data, const char *scales, const char *dev)
{
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "eval --model tests/fixtures/golden/llama3_gqa_hd48_bf16 --dataset '%s' "
             "--scales '%s' --num-samples 8 --seq-len 64 --batch 4 --quiet --modes all "
             "--device %s --json",
             data, scales, dev);
    int rc = kvcal_test_run_kvcal(args, &out);
    cJSON *root = rc == 0 && out ? cJSON_Parse(out) : NULL;
    free(out);
    return root;
}

/* Every cache mode of eval on the bf16 CUDA runner against the fp32 CPU
 * runner: the same modes and bytes, finite perplexities, each change within
 * the tolerance tests/test_eval_cuda.c gives the e4m3 modes (3 points + 20%). */
static void eval_cuda_runs_every_cache_format_as_the_cpu_does(void)
{
    const char *data = kvcal_test_path("fmt_hd48.jsonl");
    FILE *f = fopen(data, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int s = 0; s < 8; s++) {
        fputs("{\"input_ids\": [", f);
        for (int t = 0; t < 64; t++)
            fprintf(f, "%s%u", t ? ", " : "", (unsigned)(rnd() * 64.0f + 64.0f) % 128u);
        fputs("]}\n", f);
    }
    fclose(f);
    const char *scales = kvcal_test_path("fmt_hd48.json");
    char args[2048];
    snprintf(
        args, sizeof args,
        "calibrate --model tests/fixtures/golden/llama3_gqa_hd48_bf16 --dataset '%s' "
        "--num-samples 8 --seq-len 64 --granularity head --quiet --out '%s'",
        data, scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    cJSON *cpu = eval_all(data, scales, "cpu"), *gpu = eval_all(data, scales, "cuda");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gpu);
    const cJSON *mc = cJSON_GetObjectItem(cpu, "modes"),
                *mg = cJSON_GetObjectItem(gpu, "modes");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(mc), cJSON_GetArraySize(mg));
    CU_ASSERT_EQUAL(cJSON_GetArraySize(mc), 14);
    int bad = 0;
    for (int i = 0; i < cJSON_GetArraySize(mc); i++) {
        const cJSON *a = cJSON_GetArrayItem(mc, i), *b = cJSON_GetArrayItem(mg, i);
        const char *name = cJSON_GetObjectItem(a, "mode")->valuestring;
        double ca = cJSON_GetObjectItem(a, "perplexity_change_rel")->valuedouble;
        double cb = cJSON_GetObjectItem(b, "perplexity_change_rel")->valuedouble;
        int ok = !strcmp(name, cJSON_GetObjectItem(b, "mode")->valuestring) &&
                 cJSON_GetObjectItem(a, "kv_bytes_per_token")->valuedouble ==
                     cJSON_GetObjectItem(b, "kv_bytes_per_token")->valuedouble &&
                 isfinite(cJSON_GetObjectItem(b, "perplexity")->valuedouble) &&
                 fabs(cb - ca) <= 3e-2 + 0.2 * fabs(ca);
        if (!ok)
            fprintf(stderr, "\n  %s: change %+.4f on cpu, %+.4f on cuda", name, ca, cb);
        bad += !ok;
    }
    CU_ASSERT_EQUAL(bad, 0);
    cJSON_Delete(cpu), cJSON_Delete(gpu);
}

#endif

static CU_TestInfo tests[] = {
#ifdef KVCAL_WITH_CUDA
    KVCAL_TEST(fmt_launches_match_the_reference_byte_for_byte),
    KVCAL_TEST(fmt_fast_kernels_match_the_reference_byte_for_byte),
    KVCAL_TEST(fmt_nvfp4_matches_the_reference_under_a_subnormal_global_scale),
    KVCAL_TEST(fmt_dequantize_decodes_every_byte_as_the_reference),
    KVCAL_TEST(fmt_nvfp4_dequantize_decodes_nan_scales_and_overflows_as_the_reference),
    KVCAL_TEST(fmt_nvfp4_staged_dequantize_decodes_tiles_and_tails_as_the_reference),
    KVCAL_TEST(fmt_device_conversions_match_the_reference_on_every_16_bit_input),
    KVCAL_TEST(fmt_launch_rejects_what_the_reference_rejects),
    KVCAL_TEST(fp8_roundtrip_launch_matches_the_reference_on_every_bf16),
    KVCAL_TEST(eval_cuda_runs_every_cache_format_as_the_cpu_does),
#endif
    CU_TEST_INFO_NULL};
KVCAL_SUITE(kvquant_fmt_cuda, KVCAL_NEEDS_GPU, tests)
