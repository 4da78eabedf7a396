/* tests/test_kvquant.c: CPU reference of the online FP8 KV quantization
 * (include/kvcal_quant.h): addressing in both layouts, scale selection,
 * saturation, NaN / Inf / zero inputs, padding, input dtypes and strides,
 * dequantization error, and the running scaler's modes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "core/scale_rule.h"
#include "kernels/cpu/kvquant_ref.h"
#include "kernels/cuda/kvquant.h"
#include "kvcal.h"
#include "tests/test_util.h"

#define POISON 0xFF /* -NaN in e4m3: the quantizer never writes it */

// --- fixtures --------------------------------------------------------------

typedef struct fixture {
    kvcal_kv_batch b;
    kvcal_kv_cache c;
    float *k, *v; /* (T, H, D) f32 inputs, contiguous */
    int64_t *slots;
    size_t cache_bytes; /* bytes of each of c.k / c.v */
} fixture;

static uint32_t rng_state = 12345u;
static float rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

/* T tokens of H x D f32 values (uniform * amp), slot t -> slot_of(t), a
 * poisoned cache of num_blocks x block_size, per (token, head) arrays when
 * with_scales. */
static void fixture_make(fixture *f, int T, int H, int D, int64_t num_blocks,
                         int block_size, kvcal_cache_layout layout, int with_scales,
                         float amp)
{
    memset(f, 0, sizeof *f);
    f->k = malloc(sizeof(float) * (size_t)(T ? T : 1) * H * D);
    f->v = malloc(sizeof(float) * (size_t)(T ? T : 1) * H * D);
    f->slots = malloc(sizeof(int64_t) * (size_t)(T ? T : 1));
    for (int64_t i = 0; i < (int64_t)T * H * D; i++) {
        f->k[i] = rnd() * amp;
        f->v[i] = rnd() * amp * 0.5f;
    }
    int64_t cap = num_blocks * block_size;
    for (int t = 0; t < T; t++) /* a scattered, injective mapping */
        f->slots[t] = (int64_t)((t * 7919LL + 3) % cap);
    f->b = (kvcal_kv_batch){f->k,           f->v, KVCAL_DTYPE_F32, T, (int64_t)H * D, D,
                            (int64_t)H * D, D,    f->slots};
    f->cache_bytes = (size_t)(num_blocks * block_size * H * D);
    f->c.k = malloc(f->cache_bytes);
    f->c.v = malloc(f->cache_bytes);
    memset(f->c.k, POISON, f->cache_bytes);
    memset(f->c.v, POISON, f->cache_bytes);
    if (with_scales) {
        size_t n = (size_t)(num_blocks * block_size * H);
        f->c.k_scale = malloc(n * sizeof(float));
        f->c.v_scale = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            f->c.k_scale[i] = f->c.v_scale[i] = -1.0f;
    }
    f->c.num_blocks = num_blocks;
    f->c.block_size = block_size;
    f->c.num_kv_heads = H;
    f->c.head_dim = D;
    f->c.layout = layout;
}

static void fixture_free(fixture *f)
{
    free(f->k);
    free(f->v);
    free(f->slots);
    free(f->c.k);
    free(f->c.v);
    free(f->c.k_scale);
    free(f->c.v_scale);
}

/* Byte offset of (slot, h, d), written out independently of the library. */
static size_t offset_of(const kvcal_kv_cache *c, int64_t slot, int h, int d)
{
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    int64_t stride = c->block_stride
                         ? c->block_stride
                         : (int64_t)c->block_size * c->num_kv_heads * c->head_dim;
    if (c->layout == KVCAL_CACHE_NHD)
        return (size_t)(blk * stride + (off * c->num_kv_heads + h) * c->head_dim + d);
    return (size_t)(blk * stride + ((int64_t)h * c->block_size + off) * c->head_dim + d);
}

static size_t scale_index_of(const kvcal_kv_cache *c, int64_t slot, int h)
{
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    if (c->layout == KVCAL_CACHE_NHD)
        return (size_t)((blk * c->block_size + off) * c->num_kv_heads + h);
    return (size_t)((blk * c->num_kv_heads + h) * c->block_size + off);
}

/* Counts cache bytes that are not POISON. */
static size_t written_bytes(const uint8_t *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += p[i] != POISON;
    return w;
}

static uint16_t bf16_of(float x) /* RNE, finite inputs */
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float float_of_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// --- static scales -----------------------------------------------------------

static void static_quantize_writes_rne_saturated_bytes_at_slots(void)
{
    fixture f;
    fixture_make(&f, 3, 2, 8, 3, 4, KVCAL_CACHE_NHD, 0, 1.0f);
    const float special[8] = {1.0f,  1000.0f, -1000.0f, NAN,
                              -0.0f, 0.0f,    INFINITY, 0.53125f};
    memcpy(f.k, special, sizeof special); /* token 0, head 0 */
    f.slots[0] = 5, f.slots[1] = -1, f.slots[2] = 10;
    float ks = 0.5f, vs = 0.25f;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&f.b, &f.c, KVCAL_GRANULARITY_TENSOR, &ks, &vs),
        KVCAL_OK);
    const uint8_t want[8] = {0x40, 0x7e, 0xfe, 0x7f,
                             0x80, 0x00, 0x7e, 0x38}; /* 1.0625: tie to even */
    for (int d = 0; d < 8; d++)
        CU_ASSERT_EQUAL(f.c.k[offset_of(&f.c, 5, 0, d)], want[d]);
    for (int t = 0; t < 3; t += 2)
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 8; d++) {
                float xk = f.k[(t * 2 + h) * 8 + d], xv = f.v[(t * 2 + h) * 8 + d];
                CU_ASSERT_EQUAL(f.c.k[offset_of(&f.c, f.slots[t], h, d)],
                                kvcal_fp8_e4m3_from_float(xk * (1.0f / ks)));
                CU_ASSERT_EQUAL(f.c.v[offset_of(&f.c, f.slots[t], h, d)],
                                kvcal_fp8_e4m3_from_float(xv * (1.0f / vs)));
            }
    CU_ASSERT_EQUAL(written_bytes(f.c.k, f.cache_bytes),
                    2 * 2 * 8); /* padding token skipped */
    CU_ASSERT_EQUAL(written_bytes(f.c.v, f.cache_bytes), 2 * 2 * 8);
    fixture_free(&f);
}

static void static_quantize_per_head_hnd_with_block_stride(void)
{
    fixture f;
    fixture_make(&f, 19, 3, 72, 6, 5, KVCAL_CACHE_HND, 0, 3.0f);
    int64_t block_bytes = 5 * 3 * 72;
    free(f.c.k);
    free(f.c.v);
    f.c.block_stride = block_bytes + 40; /* padded blocks */
    f.cache_bytes = (size_t)(6 * f.c.block_stride);
    f.c.k = malloc(f.cache_bytes);
    f.c.v = malloc(f.cache_bytes);
    memset(f.c.k, POISON, f.cache_bytes);
    memset(f.c.v, POISON, f.cache_bytes);
    float ks[3] = {0.01f, 0.002f, 0.5f}, vs[3] = {0.003f, 0.004f, 0.005f};
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs),
        KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < 19; t++)
        for (int h = 0; h < 3; h++)
            for (int d = 0; d < 72; d++) {
                size_t i = ((size_t)t * 3 + h) * 72 + d;
                bad += f.c.k[offset_of(&f.c, f.slots[t], h, d)] !=
                       kvcal_fp8_e4m3_from_float(f.k[i] * (1.0f / ks[h]));
                bad += f.c.v[offset_of(&f.c, f.slots[t], h, d)] !=
                       kvcal_fp8_e4m3_from_float(f.v[i] * (1.0f / vs[h]));
            }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(written_bytes(f.c.k, f.cache_bytes), 19 * 3 * 72);
    fixture_free(&f);
}

static void static_quantize_rejects_bad_scales_and_writes_nothing(void)
{
    fixture f;
    fixture_make(&f, 4, 2, 8, 2, 4, KVCAL_CACHE_NHD, 0, 1.0f);
    float good[2] = {1.0f, 1.0f}, bad[3][2] = {{1.0f, 0.0f}, {NAN, 1.0f}, {1.0f, -2.0f}};
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(kvcal_kv_quantize_static_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD,
                                                     good, bad[i]),
                        KVCAL_ERR_NONFINITE);
        CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "v_scale["));
    }
    CU_ASSERT_EQUAL(
        written_bytes(f.c.k, f.cache_bytes) + written_bytes(f.c.v, f.cache_bytes), 0);
    fixture_free(&f);
}

static void quantize_skips_padding_and_out_of_range_slots(void)
{
    fixture f;
    fixture_make(&f, 4, 2, 16, 2, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    f.slots[0] = -1, f.slots[1] = 32, f.slots[2] = 1000, f.slots[3] = 31;
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&f.b, &f.c), KVCAL_OK);
    CU_ASSERT_EQUAL(written_bytes(f.c.k, f.cache_bytes), 2 * 16);
    CU_ASSERT_NOT_EQUAL(f.c.k[offset_of(&f.c, 31, 1, 15)], POISON);
    float ones = 1.0f;
    memset(f.c.v, POISON, f.cache_bytes);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&f.b, &f.c, KVCAL_GRANULARITY_TENSOR, &ones, &ones),
        KVCAL_OK);
    CU_ASSERT_EQUAL(written_bytes(f.c.v, f.cache_bytes), 2 * 16);
    fixture_free(&f);
}

// --- input dtypes and strides -------------------------------------------------

static void bf16_strided_input_matches_f32_contiguous(void)
{
    fixture a;
    fixture_make(&a, 989, 4, 80, 100, 16, KVCAL_CACHE_NHD, 1, 20.0f);
    /* the same values in bf16, laid out like a fused QKV tensor: per token
     * 12 heads of 80 (4 K heads at head offset 4, then 4 V heads) */
    int64_t ts = 12 * 80;
    uint16_t *qkv = malloc(sizeof(uint16_t) * (size_t)(989 * ts));
    for (int64_t t = 0; t < 989; t++)
        for (int64_t i = 0; i < 4 * 80; i++) {
            a.k[t * 320 + i] = float_of_bf16(bf16_of(a.k[t * 320 + i]));
            a.v[t * 320 + i] = float_of_bf16(bf16_of(a.v[t * 320 + i]));
            qkv[t * ts + 4 * 80 + i] = bf16_of(a.k[t * 320 + i]);
            qkv[t * ts + 8 * 80 + i] = bf16_of(a.v[t * 320 + i]);
        }
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&a.b, &a.c), KVCAL_OK);
    uint8_t *k0 = malloc(a.cache_bytes), *v0 = malloc(a.cache_bytes);
    memcpy(k0, a.c.k, a.cache_bytes);
    memcpy(v0, a.c.v, a.cache_bytes);
    memset(a.c.k, POISON, a.cache_bytes);
    memset(a.c.v, POISON, a.cache_bytes);
    kvcal_kv_batch b = {qkv + 4 * 80, qkv + 8 * 80, KVCAL_DTYPE_BF16, 989, ts, 80,
                        ts,           80,           a.slots};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&b, &a.c), KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(k0, a.c.k, a.cache_bytes), 0);
    CU_ASSERT_EQUAL(memcmp(v0, a.c.v, a.cache_bytes), 0);
    free(k0);
    free(v0);
    free(qkv);
    fixture_free(&a);
}

/* Every fp16 bit pattern as input: the cache must hold what the f32 values
 * (decoded here independently by ldexp) give. */
static void f16_input_decodes_every_half_exactly(void)
{
    enum { D = 128, T = 65536 / D };
    fixture a;
    fixture_make(&a, T, 1, D, T / 16, 16, KVCAL_CACHE_NHD, 0, 1.0f);
    uint16_t *h = malloc(sizeof(uint16_t) * 65536);
    for (int i = 0; i < 65536; i++) {
        h[i] = (uint16_t)i;
        int e = (i >> 10) & 31, m = i & 1023;
        float x = e == 0    ? ldexpf((float)m, -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                            : ldexpf((float)(1024 + m), e - 25);
        a.k[i] = a.v[i] = (i & 0x8000) ? -x : x;
    }
    float s = 1.0f / 64.0f;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&a.b, &a.c, KVCAL_GRANULARITY_TENSOR, &s, &s),
        KVCAL_OK);
    uint8_t *k0 = malloc(a.cache_bytes);
    memcpy(k0, a.c.k, a.cache_bytes);
    kvcal_kv_batch b = a.b;
    b.k = b.v = h;
    b.dtype = KVCAL_DTYPE_F16;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&b, &a.c, KVCAL_GRANULARITY_TENSOR, &s, &s),
        KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(k0, a.c.k, a.cache_bytes), 0);
    free(k0);
    free(h);
    fixture_free(&a);
}

// --- dynamic per (token, head) --------------------------------------------------

static void dynamic_quantize_records_absmax_scale_per_token_head(void)
{
    for (int layout = 0; layout < 2; layout++) {
        fixture f;
        fixture_make(&f, 19, 4, 96, 8, 5, (kvcal_cache_layout)layout, 1, 7.0f);
        CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&f.b, &f.c), KVCAL_OK);
        int bad = 0;
        for (int t = 0; t < 19; t++)
            for (int h = 0; h < 4; h++) {
                const float *x = f.k + ((size_t)t * 4 + h) * 96;
                float amax = 0.0f;
                int arg = 0;
                for (int d = 0; d < 96; d++)
                    if (fabsf(x[d]) > amax)
                        amax = fabsf(x[d]), arg = d;
                float s = f.c.k_scale[scale_index_of(&f.c, f.slots[t], h)];
                bad += s != amax / 448.0f;
                uint8_t q = f.c.k[offset_of(&f.c, f.slots[t], h, arg)];
                bad += (q & 0x7f) != 0x7e; /* the largest value maps to +-448 */
                for (int d = 0; d < 96; d++)
                    bad += f.c.k[offset_of(&f.c, f.slots[t], h, d)] !=
                           kvcal_fp8_e4m3_from_float(x[d] * (1.0f / s));
            }
        CU_ASSERT_EQUAL(bad, 0);
        fixture_free(&f);
    }
}

static void dynamic_quantize_zero_row_gets_floor_scale_and_zero_bytes(void)
{
    fixture f;
    fixture_make(&f, 1, 2, 8, 1, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    memset(f.k, 0, sizeof(float) * 16);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&f.b, &f.c), KVCAL_OK);
    CU_ASSERT_EQUAL(f.c.k_scale[scale_index_of(&f.c, f.slots[0], 1)], KVCAL_SCALE_FLOOR);
    for (int d = 0; d < 8; d++)
        CU_ASSERT_EQUAL(f.c.k[offset_of(&f.c, f.slots[0], 1, d)], 0);
    fixture_free(&f);
}

static void dynamic_quantize_ignores_nan_and_inf_for_the_scale(void)
{
    fixture f;
    fixture_make(&f, 1, 1, 8, 1, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    const float x[8] = {NAN, INFINITY, -INFINITY, 2.0f, -1.0f, 0.5f, -NAN, 0.0f};
    memcpy(f.k, x, sizeof x);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&f.b, &f.c), KVCAL_OK);
    CU_ASSERT_EQUAL(f.c.k_scale[scale_index_of(&f.c, f.slots[0], 0)], 2.0f / 448.0f);
    const uint8_t want[8] = {0x7f, 0x7e, 0xfe, 0x7e, 0xf6, 0x6e, 0x7f, 0x00};
    for (int d = 0; d < 8; d++)
        CU_ASSERT_EQUAL(f.c.k[offset_of(&f.c, f.slots[0], 0, d)], want[d]);
    fixture_free(&f);
}

// --- dequantization ---------------------------------------------------------------

static void dequantize_round_trip_error_within_half_ulp(void)
{
    fixture f;
    fixture_make(&f, 19, 8, 128, 4, 5, KVCAL_CACHE_NHD, 1, 30.0f);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&f.b, &f.c), KVCAL_OK);
    float *ko = malloc(sizeof(float) * 19 * 8 * 128),
          *vo = malloc(sizeof(float) * 19 * 8 * 128);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_TENSOR,
                                                  NULL, NULL, ko, vo, KVCAL_DTYPE_F32),
                          KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < 19; t++)
        for (int h = 0; h < 8; h++) {
            float s = f.c.k_scale[scale_index_of(&f.c, f.slots[t], h)];
            for (int d = 0; d < 128; d++) {
                size_t i = ((size_t)t * 8 + h) * 128 + d;
                /* e4m3: relative half ulp 2^-4 (normals), 2^-10 absolute
                 * (subnormals), in units of the scale; 1e-6 for fp32 products */
                double tol = (ldexp(fabs(f.k[i]), -4) + ldexp(s, -10)) * (1 + 1e-6);
                bad += fabs((double)ko[i] - f.k[i]) > tol;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
    free(ko);
    free(vo);
    fixture_free(&f);
}

static void dequantize_rejects_bad_static_scales_and_writes_nothing(void)
{
    fixture f;
    fixture_make(&f, 4, 2, 8, 2, 4, KVCAL_CACHE_NHD, 0, 1.0f);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_static_ref(&f.b, &f.c,
                                                       KVCAL_GRANULARITY_TENSOR,
                                                       &(float){1.0f}, &(float){1.0f}),
                          KVCAL_OK);
    float out[2][4 * 2 * 8], good[2] = {1.0f, 1.0f};
    float bad[3][2] = {{1.0f, 0.0f}, {NAN, 1.0f}, {1.0f, INFINITY}};
    memset(out, 0, sizeof out);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, good,
                                                bad[i], out[0], out[1], KVCAL_DTYPE_F32),
                        KVCAL_ERR_NONFINITE);
        CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "v_scale["));
    }
    int written = 0;
    for (int kv = 0; kv < 2; kv++)
        for (int i = 0; i < 4 * 2 * 8; i++)
            written += out[kv][i] != 0.0f;
    CU_ASSERT_EQUAL(written, 0);
    fixture_free(&f);
}

static void dequantize_bf16_and_f16_outputs_round_the_f32_values(void)
{
    fixture f;
    fixture_make(&f, 7, 2, 16, 2, 16, KVCAL_CACHE_HND, 0, 4.0f);
    float ks[2] = {0.01f, 0.02f}, vs[2] = {0.03f, 0.04f};
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_quantize_static_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs),
        KVCAL_OK);
    enum { N = 7 * 2 * 16 };
    float k32[N], v32[N];
    uint16_t kb[N], vb[N];
    kvcal_status a = kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs,
                                             k32, v32, KVCAL_DTYPE_F32);
    kvcal_status b = kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs,
                                             kb, vb, KVCAL_DTYPE_BF16);
    CU_ASSERT_FATAL(a == KVCAL_OK && b == KVCAL_OK);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += kb[i] != bf16_of(k32[i]) || vb[i] != bf16_of(v32[i]);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs,
                                            kb, vb, KVCAL_DTYPE_F16),
                    KVCAL_OK);
    for (int i = 0; i < N; i++) { /* |x| < 2^5: a normal half, 10 mantissa bits */
        double h = ldexp((double)(1024 + (kb[i] & 1023)), ((kb[i] >> 10) & 31) - 25);
        if (((kb[i] >> 10) & 31) == 0)
            h = ldexp((double)(kb[i] & 1023), -24);
        h = (kb[i] & 0x8000) ? -h : h;
        bad += fabs(h - k32[i]) > ldexp(fabs(k32[i]), -11) + ldexp(1.0, -25);
    }
    CU_ASSERT_EQUAL(bad, 0);
    fixture_free(&f);
}

// --- running scaler -----------------------------------------------------------------

/* Runs `steps` decode steps of one token each, the step's values scaled by
 * amp[i]; after each, checks the scales never shrank, and at the end that
 * every token dequantizes to exactly what it did right after its step. */
static void scaler_run(kvcal_scaler_mode mode, const float *amp, int steps,
                       float *k_final)
{
    enum { H = 2, D = 96 };
    kvcal_kv_scaler_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_create(H, mode, 0.5f, 0, &s), KVCAL_OK);
    fixture f;
    fixture_make(&f, steps, H, D, 4, 5, KVCAL_CACHE_NHD, 1, 1.0f);
    float *at_write = malloc(sizeof(float) * (size_t)steps * H * D);
    float *now = malloc(sizeof(float) * (size_t)steps * H * D);
    float *vo = malloc(sizeof(float) * (size_t)steps * H * D);
    float prev[H] = {0};
    int shrank = 0;
    for (int i = 0; i < steps; i++) {
        kvcal_kv_batch b = f.b;
        b.k = f.k + (size_t)i * H * D;
        b.v = f.v + (size_t)i * H * D;
        b.num_tokens = 1;
        b.slot_mapping = f.slots + i;
        for (int j = 0; j < H * D; j++)
            f.k[(size_t)i * H * D + j] *= amp[i];
        CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_quantize_ref(s, &b, &f.c), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(
            kvcal_kv_dequantize_ref(&b, &f.c, KVCAL_GRANULARITY_TENSOR, NULL, NULL,
                                    at_write + (size_t)i * H * D, vo, KVCAL_DTYPE_F32),
            KVCAL_OK);
        float ks[H];
        int64_t n = 0;
        CU_ASSERT_EQUAL(kvcal_kv_scaler_read(s, NULL, ks, NULL, &n), KVCAL_OK);
        CU_ASSERT_EQUAL(n, i + 1);
        for (int h = 0; h < H; h++) {
            shrank += ks[h] < prev[h];
            prev[h] = ks[h];
        }
    }
    CU_ASSERT_EQUAL(shrank, 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_TENSOR, NULL,
                                            NULL, now, vo, KVCAL_DTYPE_F32),
                    KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(now, at_write, sizeof(float) * (size_t)steps * H * D), 0);
    memcpy(k_final, prev, sizeof prev);
    free(at_write);
    free(now);
    free(vo);
    fixture_free(&f);
    kvcal_kv_scaler_destroy(s);
}

static void scaler_running_max_grows_and_stored_values_stay_exact(void)
{
    const float amp[6] = {1.0f, 0.5f, 8.0f, 2.0f, 40.0f, 1.0f};
    float k[2];
    scaler_run(KVCAL_SCALER_RUNNING_MAX, amp, 6, k);
    CU_ASSERT(k[0] > 30.0f / 448.0f && k[0] <= 40.0f / 448.0f);
}

static void scaler_ema_follows_the_average_but_never_shrinks(void)
{
    const float amp[4] = {4.0f, 8.0f, 0.25f, 0.25f};
    float k[2];
    scaler_run(KVCAL_SCALER_EMA, amp, 4, k);
    /* uniform values: step absmax ~ amp; ema 4, 6, ~3.1, ~1.7 -> stays at ~6 */
    CU_ASSERT(k[0] > 5.0f / 448.0f && k[0] < 6.0f / 448.0f);
}

static void scaler_first_batch_fixes_scales_and_saturates_later_values(void)
{
    enum { H = 2, D = 8 };
    kvcal_kv_scaler_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_scaler_create(H, KVCAL_SCALER_FIRST_BATCH, 0.0f, 0, &s), KVCAL_OK);
    fixture f;
    fixture_make(&f, 2, H, D, 1, 16, KVCAL_CACHE_NHD, 0, 1.0f); /* no per-token arrays */
    for (int i = 0; i < H * D; i++)
        f.k[i] = f.v[i] = (i % 2 ? 1.0f : -0.5f), f.k[H * D + i] = f.v[H * D + i] = 10.0f;
    kvcal_kv_batch b = f.b;
    b.num_tokens = 1;
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_quantize_ref(s, &b, &f.c), KVCAL_OK);
    b.k = f.k + H * D, b.v = f.v + H * D, b.slot_mapping = f.slots + 1;
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_quantize_ref(s, &b, &f.c), KVCAL_OK);
    const float *ks, *vs;
    CU_ASSERT_EQUAL(kvcal_kv_scaler_scales(s, &ks, &vs), KVCAL_OK);
    CU_ASSERT_EQUAL(ks[0], 1.0f / 448.0f);
    CU_ASSERT_EQUAL(vs[1], 1.0f / 448.0f);
    CU_ASSERT_EQUAL(f.c.k[offset_of(&f.c, f.slots[1], 1, 3)], 0x7e); /* 10 clips to 1 */
    float ko[H * D * 2], vo[H * D * 2];
    CU_ASSERT_EQUAL(kvcal_kv_dequantize_ref(&f.b, &f.c, KVCAL_GRANULARITY_HEAD, ks, vs,
                                            ko, vo, KVCAL_DTYPE_F32),
                    KVCAL_OK);
    KVCAL_ASSERT_CLOSE(ko[1], 1.0, 0.0, 1e-6); /* 448 * fp32(1/448) */
    KVCAL_ASSERT_CLOSE(ko[0], -0.5, 0.0, 1e-6);
    fixture_free(&f);
    kvcal_kv_scaler_destroy(s);
}

static void scaler_step_of_only_padding_changes_nothing(void)
{
    kvcal_kv_scaler_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_scaler_create(2, KVCAL_SCALER_FIRST_BATCH, 0.0f, 0, &s), KVCAL_OK);
    fixture f;
    fixture_make(&f, 2, 2, 8, 1, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    f.slots[0] = f.slots[1] = -1;
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_quantize_ref(s, &f.b, &f.c), KVCAL_OK);
    float k[2] = {9, 9};
    int64_t n = -1;
    CU_ASSERT_EQUAL(kvcal_kv_scaler_read(s, NULL, k, NULL, &n), KVCAL_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(k[0], 0.0f);
    CU_ASSERT_EQUAL(written_bytes(f.c.k, f.cache_bytes), 0);
    fixture_free(&f);
    kvcal_kv_scaler_destroy(s);
}

/* kvcal_kv_scaler_grown counts the scales the last step grew: all 2 H on the
 * first step, none for values within the running max or a step of only
 * padding, one when one head's K exceeds it (what the CUDA path's second
 * pass rewrites). */
static void scaler_reports_which_scales_its_last_step_grew(void)
{
    enum { H = 2, D = 16 };
    kvcal_kv_scaler_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_scaler_create(H, KVCAL_SCALER_RUNNING_MAX, 0.0f, 0, &s), KVCAL_OK);
    fixture f;
    fixture_make(&f, 3, H, D, 1, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    for (int i = 0; i < H * D; i++) {
        f.k[H * D + i] = f.k[i] * 0.5f, f.v[H * D + i] = f.v[i] * 0.5f;
        f.k[2 * H * D + i] = f.k[i], f.v[2 * H * D + i] = f.v[i];
    }
    f.k[2 * H * D + D + 3] = 9.0f; /* token 2, head 1: above every K so far */
    const int want[4] = {2 * H, 0, 1, 0};
    for (int step = 0; step < 4; step++) {
        kvcal_kv_batch b = f.b;
        b.num_tokens = 1;
        b.k = f.k + (size_t)(step % 3) * H * D, b.v = f.v + (size_t)(step % 3) * H * D;
        b.slot_mapping = f.slots + step % 3;
        if (step == 3) /* a step of only padding */
            f.slots[0] = -1, b.slot_mapping = f.slots;
        CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_quantize_ref(s, &b, &f.c), KVCAL_OK);
        int grown = -1;
        CU_ASSERT_EQUAL(kvcal_kv_scaler_grown(s, NULL, &grown), KVCAL_OK);
        CU_ASSERT_EQUAL(grown, want[step]);
    }
    fixture_free(&f);
    kvcal_kv_scaler_destroy(s);
}

/* The CUDA fast kernels' division by a multiply (kernels/cpu/kvquant_ref.h)
 * equals n / d for every divisor up to 4096 and some up to 2^31 - 1, on
 * the edges n = 0, d - 1, d, d + 1, 2^31 - 1 and 2000 random n < 2^31. */
static void fastdiv_matches_integer_division_below_2_pow_31(void)
{
    const uint32_t big[4] = {65535u, 1000003u, 0x40000001u, 0x7fffffffu};
    uint32_t r = 99u;
    long bad = 0;
    for (uint32_t i = 1; i <= 4096 + 4; i++) {
        uint32_t d = i <= 4096 ? i : big[i - 4097];
        kvcal_kv_fastdiv f = kvcal_kv_fastdiv_make(d);
        const uint32_t edge[5] = {0u, d - 1u, d, d + 1u, 0x7fffffffu};
        for (int j = 0; j < 2005; j++) {
            uint32_t n;
            if (j < 5) {
                n = edge[j];
            } else {
                r = r * 1664525u + 1013904223u;
                n = r >> 1;
            }
            if (n <= 0x7fffffffu)
                bad += kvcal_kv_fastdiv_div(f, n) != n / d;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The CUDA fast kernels index rows (tokens x kv heads), slots and the bytes
 * of one cache block in 32 bits: a batch or cache with 2^31 or more of any
 * of them takes the generic kernel, and a token count whose rows overflow
 * 64 bits does not wrap into the fast path. kvcal_kv_fast_path_applies and
 * kvcal_kv_dequant_fast_path_applies read no data (the pointers here are
 * aligned addresses never dereferenced), so no device is needed; in a build
 * without CUDA no shape takes the fast path. */
static void fast_path_needs_rows_slots_and_block_bytes_below_2_pow_31(void)
{
    enum { H = 8, D = 128, BS = 16 };
#ifdef KVCAL_WITH_CUDA
    const int fast = 1;
#else
    const int fast = 0;
#endif
    const int64_t lim = 0x7fffffffLL;
    void *out = (void *)(uintptr_t)0x60000;
    kvcal_kv_batch b = {.k = (const void *)(uintptr_t)0x10000,
                        .v = (const void *)(uintptr_t)0x20000,
                        .dtype = KVCAL_DTYPE_BF16,
                        .num_tokens = KVCAL_KV_FAST_MIN_TOKENS,
                        .k_token_stride = H * D,
                        .k_head_stride = D,
                        .v_token_stride = H * D,
                        .v_head_stride = D,
                        .slot_mapping = (const int64_t *)(uintptr_t)0x30000};
    kvcal_kv_cache c = {.k = (uint8_t *)(uintptr_t)0x40000,
                        .v = (uint8_t *)(uintptr_t)0x50000,
                        .num_blocks = 1024,
                        .block_size = BS,
                        .num_kv_heads = H,
                        .head_dim = D,
                        .layout = KVCAL_CACHE_NHD};
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), fast);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), fast);
    b.num_tokens = lim / H; /* rows 2^31 - 8 */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), fast);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), fast);
    b.num_tokens = lim / H + 1; /* rows 2^31 */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), 0);
    b.num_tokens = INT64_MAX / 4; /* rows 2^64 - 8, -8 once wrapped */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), 0);
    b.num_tokens = KVCAL_KV_FAST_MIN_TOKENS;
    c.num_blocks = lim / BS; /* slots 2^31 - 16 */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), fast);
    c.num_blocks = lim / BS + 1; /* slots 2^31 */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), 0);
    c.num_blocks = 1;
    c.block_size = (1 << 21) - 1; /* a block of 2^31 - 1024 bytes */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), fast);
    c.block_size = 1 << 21; /* a block of 2^31 bytes */
    CU_ASSERT_EQUAL(kvcal_kv_fast_path_applies(&b, &c), 0);
    CU_ASSERT_EQUAL(kvcal_kv_dequant_fast_path_applies(&b, &c, out, out), 0);
}

/* The fast kernels' scale rule without an fp32 division gives
 * kvcal_scale_from_absmax's bits on every 97th non-negative finite float
 * (the whole range was checked once) and on 0, the floor's edge and
 * FLT_MAX. */
static void scale_rule_without_division_matches_the_rule(void)
{
    long bad = 0;
    for (uint32_t u = 0; u <= 0x7f7fffffu; u += 97u) {
        float x;
        memcpy(&x, &u, 4);
        float a = kvcal_scale_from_absmax(x), b = kvcal_kv_scale_from_absmax_dmul(x);
        bad += memcmp(&a, &b, 4) != 0;
    }
    const float edge[4] = {0.0f, 1.0f / 512.0f, 448.0f / 448.0f, 3.4028234663852886e38f};
    for (int i = 0; i < 4; i++)
        bad += kvcal_scale_from_absmax(edge[i]) != kvcal_kv_scale_from_absmax_dmul(edge[i]);
    CU_ASSERT_EQUAL(bad, 0);
}

static void scaler_rejects_missing_scale_arrays_and_wrong_place(void)
{
    kvcal_kv_scaler_t *s = (kvcal_kv_scaler_t *)1;
    CU_ASSERT_EQUAL(kvcal_kv_scaler_create(0, KVCAL_SCALER_RUNNING_MAX, 0.0f, 0, &s),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_EQUAL(kvcal_kv_scaler_create(2, KVCAL_SCALER_EMA, 0.0f, 0, &s),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_scaler_create(2, KVCAL_SCALER_RUNNING_MAX, 0.0f, 0, &s), KVCAL_OK);
    fixture f;
    fixture_make(&f, 2, 2, 8, 1, 16, KVCAL_CACHE_NHD, 0, 1.0f);
    CU_ASSERT_EQUAL(kvcal_kv_scaler_quantize_ref(s, &f.b, &f.c), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "k_scale"));
    CU_ASSERT_NOT_EQUAL(kvcal_kv_scaler_quantize_launch(s, &f.b, &f.c, NULL), KVCAL_OK);
    fixture_free(&f);
    kvcal_kv_scaler_destroy(s);
    kvcal_kv_scaler_destroy(NULL);
    if (kvcal_cuda_device_count() == 0) {
        CU_ASSERT_EQUAL(kvcal_kv_scaler_create(2, KVCAL_SCALER_RUNNING_MAX, 0.0f, 1, &s),
                        KVCAL_ERR_NO_DEVICE);
        CU_ASSERT_PTR_NULL(s);
    }
}

// --- argument checks -----------------------------------------------------------------

static void quantize_rejects_bad_shapes_and_strides(void)
{
    fixture f;
    fixture_make(&f, 2, 2, 8, 1, 16, KVCAL_CACHE_NHD, 1, 1.0f);
    float one = 1.0f;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(NULL, &f.c), KVCAL_ERR_INVALID_ARG);
    kvcal_kv_cache c = f.c;
    c.head_dim = 0;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(&f.b, &c), KVCAL_ERR_INVALID_ARG);
    c.head_dim = 2000;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(&f.b, &c), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "head_dim 2000"));
    c = f.c;
    c.block_stride = 5;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(&f.b, &c), KVCAL_ERR_INVALID_ARG);
    kvcal_kv_batch b = f.b;
    b.k_token_stride = 8; /* heads of one token would overlap the next token */
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(&b, &f.c), KVCAL_ERR_INVALID_ARG);
    b = f.b;
    b.slot_mapping = NULL;
    CU_ASSERT_EQUAL(
        kvcal_kv_quantize_static_ref(&b, &f.c, KVCAL_GRANULARITY_TENSOR, &one, &one),
        KVCAL_ERR_INVALID_ARG);
    c = f.c;
    c.k_scale = NULL;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_ref(&f.b, &c), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(written_bytes(f.c.k, f.cache_bytes), 0);
    fixture_free(&f);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(static_quantize_writes_rne_saturated_bytes_at_slots),
    KVCAL_TEST(static_quantize_per_head_hnd_with_block_stride),
    KVCAL_TEST(static_quantize_rejects_bad_scales_and_writes_nothing),
    KVCAL_TEST(quantize_skips_padding_and_out_of_range_slots),
    KVCAL_TEST(bf16_strided_input_matches_f32_contiguous),
    KVCAL_TEST(f16_input_decodes_every_half_exactly),
    KVCAL_TEST(dynamic_quantize_records_absmax_scale_per_token_head),
    KVCAL_TEST(dynamic_quantize_zero_row_gets_floor_scale_and_zero_bytes),
    KVCAL_TEST(dynamic_quantize_ignores_nan_and_inf_for_the_scale),
    KVCAL_TEST(dequantize_round_trip_error_within_half_ulp),
    KVCAL_TEST(dequantize_rejects_bad_static_scales_and_writes_nothing),
    KVCAL_TEST(dequantize_bf16_and_f16_outputs_round_the_f32_values),
    KVCAL_TEST(scaler_running_max_grows_and_stored_values_stay_exact),
    KVCAL_TEST(scaler_ema_follows_the_average_but_never_shrinks),
    KVCAL_TEST(scaler_first_batch_fixes_scales_and_saturates_later_values),
    KVCAL_TEST(scaler_step_of_only_padding_changes_nothing),
    KVCAL_TEST(scaler_reports_which_scales_its_last_step_grew),
    KVCAL_TEST(scaler_rejects_missing_scale_arrays_and_wrong_place),
    KVCAL_TEST(quantize_rejects_bad_shapes_and_strides),
    KVCAL_TEST(fastdiv_matches_integer_division_below_2_pow_31),
    KVCAL_TEST(fast_path_needs_rows_slots_and_block_bytes_below_2_pow_31),
    KVCAL_TEST(scale_rule_without_division_matches_the_rule),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(kvquant, KVCAL_NEEDS_NOTHING, tests)
