/* tests/test_kvquant_fmt.c: CPU reference of the cache formats beyond e4m3
 * (include/kvcal_quant.h, kvcal_kv_format): the element conversions
 * (core/kvformat.h) against hand-computed values and against a
 * nearest-value search in double, int8 rounding as the engines round, the
 * per (token, head) parameters of vLLM's int8_per_token_head and LMDeploy's
 * quant_policy=8, the NVFP4 row layout, round trips in both layouts,
 * padding, and bad arguments. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kvformat.h"
#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kvquant_fmt_nvfp4.h"
#include "kvcal.h"
#include "tests/test_util.h"

#define POISON 0xA5

static uint32_t rng = 777u;
static float rnd(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static float float_of_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// --- element conversions ---------------------------------------------------------

/* The code of the representable value nearest x (ties to the even code),
 * searched over the finite codes of a format in double; codes[i] values. */
static int nearest_code(double x, const double *vals, const int *codes, int n)
{
    int best = 0;
    double bd = INFINITY;
    for (int i = 0; i < n; i++) {
        double d = fabs(vals[i] - x);
        if (d < bd || (d == bd && (codes[i] & 1) == 0 && (codes[best] & 1)))
            bd = d, best = i;
    }
    return codes[best];
}

static void e5m2_converts_hand_values_and_matches_a_nearest_search(void)
{
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(1.0f), 0x3c);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(-1.0f), 0xbc);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(1.125f), 0x3c); /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(1.375f), 0x3e); /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(57344.0f), 0x7b);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(1e30f), 0x7b); /* saturates */
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(-INFINITY), 0xfb);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(NAN), 0x7f);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(-0.0f), 0x80);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(0x1p-16f), 0x01); /* smallest subnormal */
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(0x1p-17f), 0x00); /* tie -> 0 */
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(0x1.8p-16f), 0x02);
    CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(0x1p-14f), 0x04); /* smallest normal */
    CU_ASSERT_DOUBLE_EQUAL(kvcal_fp8_e5m2_to_float(0x7b), 57344.0, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(kvcal_fp8_e5m2_to_float(0x03), 3.0 * 0x1p-16, 0.0);
    CU_ASSERT(isinf(kvcal_fp8_e5m2_to_float(0x7c)));
    CU_ASSERT(isnan(kvcal_fp8_e5m2_to_float(0x7d)));
    /* every finite code decodes and re-encodes to itself */
    double vals[256];
    int codes[256], n = 0;
    for (int c = 0; c < 256; c++) {
        float v = kvcal_fp8_e5m2_to_float((uint8_t)c);
        if (!isfinite(v))
            continue;
        CU_ASSERT_EQUAL(kvcal_fp8_e5m2_from_float(v), c);
        vals[n] = v, codes[n++] = c;
    }
    CU_ASSERT_EQUAL(n, 248);
    /* every bf16 value within range against the nearest-value search */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = float_of_bits(h << 16);
        if (!isfinite(x) || fabsf(x) >= 57344.0f || x == 0.0f)
            continue;
        /* compared as values: the search cannot tell -0 from +0 */
        bad += kvcal_fp8_e5m2_to_float(kvcal_fp8_e5m2_from_float(x)) !=
               kvcal_fp8_e5m2_to_float((uint8_t)nearest_code(x, vals, codes, n));
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void e2m1_rounds_to_nearest_even_and_saturates_at_6(void)
{
    const float x[] = {0.0f, 0.25f, 0.2501f, 0.75f, 1.25f, 1.2501f,  1.75f, 2.5f,
                       3.5f, 5.0f,  5.0001f, 6.0f,  7.0f,  INFINITY, -0.3f, -6.5f};
    const uint8_t want[] = {0, 0, 1, 2, 2, 3, 4, 4, 6, 6, 7, 7, 7, 7, 0x9, 0xf};
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        CU_ASSERT_EQUAL(kvcal_fp4_e2m1_from_float(x[i]), want[i]);
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_from_float(NAN), 0);
    const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    double vals[16];
    int codes[16];
    for (int c = 0; c < 16; c++) {
        CU_ASSERT_DOUBLE_EQUAL(kvcal_fp4_e2m1_to_float((uint8_t)c),
                               (c & 8) ? -mags[c & 7] : mags[c & 7], 0.0);
        vals[c] = kvcal_fp4_e2m1_to_float((uint8_t)c), codes[c] = c;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = float_of_bits(h << 16);
        if (!isfinite(v) || fabsf(v) > 6.0f || v == 0.0f)
            continue;
        int got = kvcal_fp4_e2m1_from_float(v), want_c = nearest_code(v, vals, codes, 16);
        /* -0 and +0 are the same value: the search may pick either */
        bad += got != want_c && !(vals[got] == 0.0 && vals[want_c] == 0.0);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Floats to try a device formula on: every bf16 value, 4 ulps around every
 * float that is a bf16 value, and random bit patterns (NaN excluded); f gets
 * each, returns the number of disagreements. */
static int on_many_floats(int (*f)(float))
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++)
        for (int d = -4; d <= 4; d++) {
            float x = float_of_bits((h << 16) + (uint32_t)d);
            if (!isnan(x))
                bad += f(x);
        }
    for (int i = 0; i < 1 << 20; i++) {
        rng = rng * 1664525u + 1013904223u;
        float x = float_of_bits(rng);
        if (!isnan(x))
            bad += f(x);
    }
    return bad;
}

static int e2m1_mag22_differs(float x)
{
    uint32_t m = kvcal_fp4_e2m1_mag22(x);
    return (m & 0x3fffffu) != 0 || (m >> 22) != (kvcal_fp4_e2m1_from_float(x) & 7u);
}

static int e2m1_r6_differs(float x)
{
    const uint8_t b = kvcal_fp8_e4m3_from_float(kvcal_fp4_e2m1_r6(x * 0x1p16f));
    return (b & ~0x1cu) != 0 || (b >> 2) != (kvcal_fp4_e2m1_from_float(x) & 7u);
}

/* The fast kernel's e2m1 input for value x of a block of reciprocal decode
 * scale inv (x * (inv x 2^16), one rounding) against the reference's
 * (x * inv, rounded, then e2m1): every bf16 x under inverse scales of every
 * binade below 2^112 (two significands each) and 0, NaN products left out
 * (the kernel takes the reference's way for them); the sign from x, as the
 * kernel takes it. Returns the disagreements. */
static int e2m1_of_scaled_products_differ(void)
{
    int bad = 0;
    for (int k = 0; k < 2 * 239 + 1; k++) {
        const float inv =
            k == 2 * 239
                ? 0.0f
                : float_of_bits((uint32_t)(k / 2) << 23 | (k % 2 ? 0x5a5a5au : 0u));
        for (uint32_t h = 0; h < 65536; h++) {
            const float x = float_of_bits(h << 16), y = x * inv;
            if (isnan(y))
                continue;
            const uint8_t b =
                kvcal_fp8_e4m3_from_float(kvcal_fp4_e2m1_r6(x * (inv * 0x1p16f)));
            bad +=
                (uint8_t)((b >> 2 & 7u) | (h >> 12 & 8u)) != kvcal_fp4_e2m1_from_float(y);
        }
    }
    return bad;
}

static int dmul_scales_differ(float x)
{
    float a = fabsf(x), b = -a;
    if (!(a <= 3.4028234663852886e38f))
        return 0;
    kvcal_kvfmt_row r = kvcal_kvfmt_asym_row(b, a), rd = kvcal_kvfmt_asym_row_dmul(b, a);
    return memcmp(&r, &rd, sizeof r) != 0 ||
           kvcal_kvfmt_int8_scale(a) != kvcal_kvfmt_int8_scale_dmul(a) ||
           kvcal_kvfmt_int8_scale(a / 3.0f) != kvcal_kvfmt_int8_scale_dmul(a / 3.0f);
}

/* What the CUDA kernels compute instead of a division or a branchy e2m1
 * (kernels/cpu/kvquant_fmt.h): the same bits as the reference's formula. */
static void device_formulas_equal_the_reference_arithmetic(void)
{
    CU_ASSERT_EQUAL(on_many_floats(e2m1_mag22_differs), 0);
    CU_ASSERT_EQUAL(on_many_floats(e2m1_r6_differs), 0);
    CU_ASSERT_EQUAL(e2m1_of_scaled_products_differ(), 0);
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_r6(0.75f * 0x1p16f), 1.0f * 0x1p-6f); /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_r6(5.0f * 0x1p16f), 4.0f * 0x1p-6f);  /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_r6(-INFINITY), 6.0f * 0x1p-6f);
    CU_ASSERT_EQUAL(on_many_floats(dmul_scales_differ), 0);
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_mag22(0.75f), 2u << 22); /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_mag22(5.0f), 6u << 22);  /* tie -> even */
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_mag22(-INFINITY), 7u << 22);
    CU_ASSERT_EQUAL(kvcal_fp4_e2m1_mag22(0.5f), 1u << 22); /* the subnormal */
    kvcal_kvfmt_row flat = kvcal_kvfmt_asym_row_dmul(INFINITY, -INFINITY);
    CU_ASSERT(flat.scale == 0.0f && flat.zero == 0.0f && flat.inv == 0.0f);
}

/* The 16-bit value (bf16 or f16, as the reference stores it) of x. */
static uint32_t bits16(kvcal_dtype dtype, float x)
{
    uint16_t h;
    kvcal_kv_store_elem(&h, dtype, 0, x);
    return h;
}

/* The differences of the fast NVFP4 dequantization's byte tables
 * (kernels/cuda/kvquant_fmt_nvfp4.h) from the reference's values
 * (kvcal_fp4_e2m1_to_float(q) x (e4m3 value x global scale), rounded to
 * fp32, then to `dtype`) for every scale byte under global scale g, every
 * code in every place of a word of 8 (each byte value in each byte, the
 * others random); blocks whose decode scale is not finite, which the
 * kernel leaves to the arithmetic, are counted in *left. *compared: the
 * values compared. */
static size_t nvfp4_tables_differ(kvcal_dtype dtype, float g, size_t *compared,
                                  size_t *left)
{
    size_t bad = 0;
    for (int s = 0; s < 256; s++) {
        const float d = kvcal_fp8_e4m3_to_float((uint8_t)s) * g;
        if (!(fabsf(d) < INFINITY)) {
            ++*left;
            continue;
        }
        uint32_t ref[16], p[4], t[4];
        for (int q = 0; q < 16; q++)
            ref[q] = bits16(dtype, kvcal_fp4_e2m1_to_float((uint8_t)q) * d);
        for (int i = 0; i < 4; i++)
            p[i] = ref[2 * i] | ref[2 * i + 1] << 16;
        kvcal_nvfp4_tables(p, t);
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++) {
                rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
                const uint32_t w = (rng & ~(0xffu << (8 * k))) | b << (8 * k);
                uint32_t o[4];
                kvcal_nvfp4_lookup8(t, w, o);
                for (int j = 0; j < 8; j++) {
                    const uint32_t got = o[j / 2] >> (16 * (j % 2)) & 0xffffu;
                    bad += got != ref[w >> (4 * j) & 0xfu];
                    ++*compared;
                }
            }
    }
    return bad;
}

/* The fast dequantization's byte tables decode every e2m1 code of a block
 * of any e4m3 scale byte as the reference, into bf16 and f16, under global
 * scales of every kind: vLLM-like, tiny and subnormal (products subnormal
 * or 0), large (6 x d overflows), zero and negative; every block it keeps
 * for the arithmetic has a decode scale that is NaN or infinite. */
static void nvfp4_byte_tables_decode_every_code_as_the_reference(void)
{
    const float gs[] = {1.0f,      0.3f / 2688.0f, 3.0f / 2688.0f, 0x1p-126f, 1e-44f,
                        0x1p-149f, 3e35f,          1e38f,          0.0f,      -0.5f};
    const kvcal_dtype dts[2] = {KVCAL_DTYPE_BF16, KVCAL_DTYPE_F16};
    size_t bad = 0, compared = 0, left = 0;
    for (int o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
            bad += nvfp4_tables_differ(dts[o], gs[i], &compared, &left);
    CU_ASSERT_EQUAL(bad, 0);
    /* per dtype: the 2 NaN bytes under each scale, and under 1e38 the 114
     * bytes of magnitude 3.5 to 448 (0x46-0x7e and 0xc6-0xfe: 3.5e38
     * overflows) */
    CU_ASSERT_EQUAL(left, 2 * (2 * 10 + 114));
    CU_ASSERT_EQUAL(compared, (size_t)(2 * 10 * 256 - left) * 4 * 256 * 8);
}

static void int_code_rounds_as_the_engines_round(void)
{
    const int rne = KVCAL_INT_ROUND_NEAREST_EVEN, rz = KVCAL_INT_ROUND_TOWARD_ZERO;
    CU_ASSERT_EQUAL(kvcal_int_code(2.5f, rne, -128, 127), 2);
    CU_ASSERT_EQUAL(kvcal_int_code(3.5f, rne, -128, 127), 4);
    CU_ASSERT_EQUAL(kvcal_int_code(-2.5f, rne, -128, 127), -2);
    CU_ASSERT_EQUAL(kvcal_int_code(2.9f, rz, -128, 127), 2);
    CU_ASSERT_EQUAL(kvcal_int_code(-2.9f, rz, -128, 127), -2);
    CU_ASSERT_EQUAL(kvcal_int_code(127.9f, rz, -128, 127), 127);
    CU_ASSERT_EQUAL(kvcal_int_code(1e9f, rne, -128, 127), 127);
    CU_ASSERT_EQUAL(kvcal_int_code(-1e9f, rne, -128, 127), -128);
    CU_ASSERT_EQUAL(kvcal_int_code(-INFINITY, rz, 0, 255), 0);
    CU_ASSERT_EQUAL(kvcal_int_code(255.5f, rne, 0, 255), 255);
    CU_ASSERT_EQUAL(kvcal_int_code(NAN, rne, -128, 127), 0);
}

// --- a small cache ------------------------------------------------------------------

typedef struct cache_fix {
    kvcal_kv_batch b;
    kvcal_kv_cache c;
    float *k, *v;   /* (T, H, D) */
    int64_t *slots; /* (T) */
    float *kz, *vz; /* per (token, head) zero points */
    size_t bytes, nscale;
} cache_fix;

static void fix_make(cache_fix *f, int T, int H, int D, int64_t blocks, int bs,
                     kvcal_cache_layout layout, kvcal_kv_format format)
{
    memset(f, 0, sizeof *f);
    f->k = malloc(sizeof(float) * (size_t)T * H * D);
    f->v = malloc(sizeof(float) * (size_t)T * H * D);
    f->slots = malloc(sizeof(int64_t) * (size_t)T);
    for (int64_t i = 0; i < (int64_t)T * H * D; i++)
        f->k[i] = rnd() * 3.0f + 0.5f, f->v[i] = rnd() * 0.7f;
    for (int t = 0; t < T; t++)
        f->slots[t] = (t * 7919LL + 5) % (blocks * bs);
    f->b = (kvcal_kv_batch){f->k,           f->v, KVCAL_DTYPE_F32, T, (int64_t)H * D, D,
                            (int64_t)H * D, D,    f->slots};
    f->bytes = (size_t)(blocks * bs * H * kvcal_kv_format_row_bytes(format, D));
    f->nscale = (size_t)(blocks * bs * H);
    f->c.k = malloc(f->bytes), f->c.v = malloc(f->bytes);
    memset(f->c.k, POISON, f->bytes), memset(f->c.v, POISON, f->bytes);
    f->c.k_scale = malloc(sizeof(float) * f->nscale);
    f->c.v_scale = malloc(sizeof(float) * f->nscale);
    f->kz = malloc(sizeof(float) * f->nscale), f->vz = malloc(sizeof(float) * f->nscale);
    for (size_t i = 0; i < f->nscale; i++)
        f->c.k_scale[i] = f->c.v_scale[i] = f->kz[i] = f->vz[i] = -7.0f;
    f->c.num_blocks = blocks, f->c.block_size = bs, f->c.num_kv_heads = H;
    f->c.head_dim = D, f->c.layout = layout;
}

static void fix_free(cache_fix *f)
{
    free(f->k), free(f->v), free(f->slots), free(f->c.k), free(f->c.v);
    free(f->c.k_scale), free(f->c.v_scale), free(f->kz), free(f->vz);
}

/* Row (slot, h) of a cache, written out independently of the library. */
static const uint8_t *row_of(const kvcal_kv_cache *c, const uint8_t *base, int64_t slot,
                             int h, int64_t row_bytes)
{
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    int64_t stride = (int64_t)c->block_size * c->num_kv_heads * row_bytes;
    int64_t r = c->layout == KVCAL_CACHE_NHD ? off * c->num_kv_heads + h
                                             : (int64_t)h * c->block_size + off;
    return base + blk * stride + r * row_bytes;
}

static size_t sidx(const kvcal_kv_cache *c, int64_t slot, int h)
{
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    return c->layout == KVCAL_CACHE_NHD
               ? (size_t)((blk * c->block_size + off) * c->num_kv_heads + h)
               : (size_t)((blk * c->num_kv_heads + h) * c->block_size + off);
}

// --- int8 --------------------------------------------------------------------------

static void int8_dynamic_is_vllms_int8_per_token_head(void)
{
    cache_fix f;
    const int T = 19, H = 3, D = 40;
    fix_make(&f, T, H, D, 6, 4, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_INT8);
    f.k[5] = 1e6f; /* one row with a large value */
    for (int d = 0; d < D; d++)
        f.v[(2 * H + 1) * D + d] = 0.0f; /* an all-zero row: the 1e-6 floor */
    f.slots[3] = -1;
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_INT8,
                          KVCAL_KV_ROUND_TOWARD_ZERO,
                          KVCAL_GRANULARITY_TENSOR,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        if (f.slots[t] < 0)
            continue;
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < H; h++) {
                const float *x = (kv ? f.v : f.k) + ((size_t)t * H + h) * D;
                float a = 0.0f;
                for (int d = 0; d < D; d++)
                    a = fmaxf(a, fabsf(x[d]));
                float s = fmaxf(a / 127.0f, 1e-6f), inv = 1.0f / s;
                bad += (kv ? f.c.v_scale : f.c.k_scale)[sidx(&f.c, f.slots[t], h)] != s;
                const int8_t *q =
                    (const int8_t *)row_of(&f.c, kv ? f.c.v : f.c.k, f.slots[t], h, D);
                for (int d = 0; d < D; d++) {
                    float y = fminf(fmaxf(x[d] * inv, -128.0f), 127.0f);
                    bad += q[d] != (int8_t)truncf(y);
                }
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the zero row: scale 1e-6, bytes 0 */
    CU_ASSERT_EQUAL(f.c.v_scale[sidx(&f.c, f.slots[2], 1)], 1e-6f);
    /* padding wrote nothing: slot 3 would have held token 3, no other maps to it */
    const int64_t pad_slot = (3 * 7919LL + 5) % 24;
    for (int h = 0; h < H; h++) {
        const uint8_t *q = row_of(&f.c, f.c.k, pad_slot, h, D);
        for (int d = 0; d < D; d++)
            CU_ASSERT_EQUAL(q[d], POISON);
        CU_ASSERT_EQUAL(f.c.k_scale[sidx(&f.c, pad_slot, h)], -7.0f);
    }
    fix_free(&f);
}

static void int8_static_per_head_rounds_to_nearest_even_and_saturates(void)
{
    cache_fix f;
    const int H = 2, D = 8;
    fix_make(&f, 1, H, D, 1, 2, KVCAL_CACHE_HND, KVCAL_KV_FORMAT_INT8);
    const float k0[8] = {0.25f, 0.75f, -0.25f, 31.75f, 100.0f, -100.0f, NAN, -0.1f};
    memcpy(f.k, k0, sizeof k0);
    f.slots[0] = 1;
    const float ks[2] = {0.5f, 1.0f}, vs[2] = {0.01f, 0.02f};
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_INT8,
                          KVCAL_KV_ROUND_NEAREST_EVEN,
                          KVCAL_GRANULARITY_HEAD,
                          ks,
                          vs,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    const int8_t *q = (const int8_t *)row_of(&f.c, f.c.k, 1, 0, D);
    /* x / 0.5: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, 63.5 -> 64, 200 -> 127, -200 -> -128 */
    const int8_t want[8] = {0, 2, 0, 64, 127, -128, 0, 0};
    CU_ASSERT_EQUAL(memcmp(q, want, 8), 0);
    CU_ASSERT_EQUAL(f.c.k_scale[sidx(&f.c, 1, 1)], 1.0f); /* recorded per head */
    /* a non-finite or zero static scale is refused before any write */
    cache_fix g;
    fix_make(&g, 1, H, D, 1, 2, KVCAL_CACHE_HND, KVCAL_KV_FORMAT_INT8);
    const float bad_k[2] = {0.5f, 0.0f};
    p.k_scale = bad_k;
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&g.b, &g.c, &p), KVCAL_ERR_NONFINITE);
    for (size_t i = 0; i < g.bytes; i++)
        CU_ASSERT_EQUAL_FATAL(g.c.k[i], POISON);
    /* and by the dequantization, before any output is written */
    float out[2][H * D];
    memset(out, 0, sizeof out);
    CU_ASSERT_EQUAL(
        kvcal_kv_dequantize_fmt_ref(&f.b, &f.c, &p, out[0], out[1], KVCAL_DTYPE_F32),
        KVCAL_ERR_NONFINITE);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "k_scale[1] = 0"));
    for (int i = 0; i < H * D; i++)
        CU_ASSERT_EQUAL_FATAL(out[0][i], 0.0f);
    fix_free(&f), fix_free(&g);
}

static void int8_asym_dynamic_is_lmdeploys_min_max_per_token_head(void)
{
    cache_fix f;
    const int T = 7, H = 2, D = 24;
    fix_make(&f, T, H, D, 2, 8, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_INT8_ASYM);
    for (int d = 0; d < D; d++)
        f.k[(1 * H + 1) * D + d] = 0.375f; /* a constant row */
    f.v[0] = NAN;                          /* ignored by min / max, stored as code 0 */
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_INT8_ASYM,
                          KVCAL_KV_ROUND_NEAREST_EVEN,
                          KVCAL_GRANULARITY_TENSOR,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          f.kz,
                          f.vz};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < H; h++) {
                const float *x = (kv ? f.v : f.k) + ((size_t)t * H + h) * D;
                float mn = INFINITY, mx = -INFINITY;
                for (int d = 0; d < D; d++)
                    if (isfinite(x[d]))
                        mn = fminf(mn, x[d]), mx = fmaxf(mx, x[d]);
                float s = (mx - mn) / 255.0f, inv = s > 0 ? 1.0f / s : 0.0f;
                size_t si = sidx(&f.c, f.slots[t], h);
                bad += (kv ? f.c.v_scale : f.c.k_scale)[si] != s;
                bad += (kv ? f.vz : f.kz)[si] != mn;
                const uint8_t *q = row_of(&f.c, kv ? f.c.v : f.c.k, f.slots[t], h, D);
                for (int d = 0; d < D; d++) {
                    float y = (x[d] - mn) * inv;
                    int want = isnan(y) ? 0 : (int)rintf(fminf(fmaxf(y, 0.0f), 255.0f));
                    bad += q[d] != want;
                }
            }
    CU_ASSERT_EQUAL(bad, 0);
    /* the constant row: scale 0, every code 0, dequantized exactly */
    float *out_k = malloc(sizeof(float) * T * H * D),
          *out_v = malloc(sizeof(float) * T * H * D);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_dequantize_fmt_ref(&f.b, &f.c, &p, out_k, out_v, KVCAL_DTYPE_F32),
        KVCAL_OK);
    for (int d = 0; d < D; d++)
        CU_ASSERT_EQUAL(out_k[(1 * H + 1) * D + d], 0.375f);
    /* elsewhere within half a step (plus the fp32 rounding of the product) */
    double worst = 0.0;
    for (int i = 0; i < T * H * D; i++) {
        if (!isfinite(f.v[i]))
            continue;
        float s = f.c.v_scale[sidx(&f.c, f.slots[i / (H * D)], (i / D) % H)];
        worst = fmax(worst, fabs(out_v[i] - f.v[i]) / (s * 0.5));
    }
    CU_ASSERT(worst <= 1.0 + 1e-3);
    free(out_k), free(out_v), fix_free(&f);
}

// --- fp8 e5m2 ------------------------------------------------------------------------

static void e5m2_cache_is_a_cast_and_dequantizes_exactly(void)
{
    cache_fix f;
    const int T = 5, H = 2, D = 16;
    fix_make(&f, T, H, D, 3, 2, KVCAL_CACHE_HND, KVCAL_KV_FORMAT_FP8_E5M2);
    f.k[0] = 1e6f;
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_FP8_E5M2,
                          0,
                          KVCAL_GRANULARITY_TENSOR,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    float *ok = malloc(sizeof(float) * T * H * D),
          *ov = malloc(sizeof(float) * T * H * D);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_dequantize_fmt_ref(&f.b, &f.c, &p, ok, ov, KVCAL_DTYPE_F32), KVCAL_OK);
    int bad = 0;
    for (int i = 0; i < T * H * D; i++) {
        const uint8_t *q = row_of(&f.c, f.c.k, f.slots[i / (H * D)], (i / D) % H, D);
        bad += q[i % D] != kvcal_fp8_e5m2_from_float(f.k[i]);
        bad += ok[i] != kvcal_fp8_e5m2_to_float(kvcal_fp8_e5m2_from_float(f.k[i]));
        bad += fabsf(ov[i] - f.v[i]) > fabsf(f.v[i]) * 0.125f + 0x1p-17f;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(ok[0], 57344.0f);       /* saturated */
    CU_ASSERT_EQUAL(f.c.k_scale[0], -7.0f); /* a cast records no scale */
    free(ok), free(ov), fix_free(&f);
}

// --- NVFP4 ---------------------------------------------------------------------------

static void nvfp4_row_packs_pairs_low_nibble_first_then_block_scales(void)
{
    CU_ASSERT_EQUAL(kvcal_kv_format_row_bytes(KVCAL_KV_FORMAT_NVFP4, 128), 72);
    CU_ASSERT_EQUAL(kvcal_kv_format_row_bytes(KVCAL_KV_FORMAT_NVFP4, 24), 0);
    cache_fix f;
    const int D = 32;
    fix_make(&f, 1, 1, D, 1, 1, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_NVFP4);
    f.slots[0] = 0;
    /* block 0: amax 6 under g = 0.5 -> block scale e4m3(6 / 6 / 0.5) = 2
     * (0x40), decode scale 1: the values are their own e2m1 codes */
    const float b0[16] = {0,     0.5f, 1,     1.5f, 2,  3,  4,  6,
                          -0.5f, -1,   -1.5f, -2,   -3, -4, -6, 0.7f};
    /* block 1: amax 1.5 -> scale e4m3(0.5) = 0x30, decode 0.25: x / 0.25 */
    const float b1[16] = {1.5f, -1.5f, 0.25f, 0.125f, 0.3f, 0, 0, 0,
                          0,    0,     0,     0,      0,    0, 0, 1.0f};
    memcpy(f.k, b0, sizeof b0), memcpy(f.k + 16, b1, sizeof b1);
    const float g = 0.5f;
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_NVFP4,
                          0,
                          KVCAL_GRANULARITY_TENSOR,
                          &g,
                          &g,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    const uint8_t want[18] = {
        0x10, 0x32, 0x54, 0x76, 0xa9, 0xcb, 0xed, 0x1f,
        /* 1.5/0.25 = 6 -> 7, -6 -> 0xf; 1 -> 2, 0.5 -> 1; 1.2 -> 2, 0 */
        0xf7, 0x12, 0x02, 0x00, 0x00, 0x00, 0x00, 0x60, 0x40, 0x30};
    CU_ASSERT_EQUAL(memcmp(f.c.k, want, sizeof want), 0);
    float ok[32], ov[32];
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_dequantize_fmt_ref(&f.b, &f.c, &p, ok, ov, KVCAL_DTYPE_F32), KVCAL_OK);
    for (int d = 0; d < 15; d++)
        CU_ASSERT_EQUAL(ok[d], b0[d]);
    CU_ASSERT_EQUAL(ok[15], 0.5f);   /* 0.7 -> 0.5 */
    CU_ASSERT_EQUAL(ok[16], 1.5f);   /* 6 * 0.25 */
    CU_ASSERT_EQUAL(ok[19], 0.125f); /* 0.5 * 0.25 */
    CU_ASSERT_EQUAL(ok[31], 1.0f);   /* 4 * 0.25 */
    fix_free(&f);
}

static void nvfp4_round_trip_stays_within_a_block_step_in_hnd_blocks(void)
{
    cache_fix f;
    const int T = 21, H = 3, D = 48;
    fix_make(&f, T, H, D, 4, 8, KVCAL_CACHE_HND, KVCAL_KV_FORMAT_NVFP4);
    f.slots[4] = -1;
    const float gk[3] = {3.6f / 2688.0f, 3.5f / 2688.0f, 3.4f / 2688.0f};
    const float gv[3] = {0.7f / 2688.0f, 0.7f / 2688.0f, 0.7f / 2688.0f};
    kvcal_kv_qparams p = {
        KVCAL_KV_FORMAT_NVFP4, 0, KVCAL_GRANULARITY_HEAD, gk, gv, NULL, NULL, NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    float *ok = malloc(sizeof(float) * T * H * D),
          *ov = malloc(sizeof(float) * T * H * D);
    for (int i = 0; i < T * H * D; i++)
        ok[i] = ov[i] = -99.0f;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_kv_dequantize_fmt_ref(&f.b, &f.c, &p, ok, ov, KVCAL_DTYPE_F32), KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int b = 0; b < D / 16; b++) {
                const float *x = f.k + ((size_t)t * H + h) * D + b * 16;
                const float *y = ok + ((size_t)t * H + h) * D + b * 16;
                if (f.slots[t] < 0) {
                    bad += y[0] != -99.0f;
                    continue;
                }
                float a = 0.0f;
                for (int j = 0; j < 16; j++)
                    a = fmaxf(a, fabsf(x[j]));
                /* the largest e2m1 gap (4 to 6) is a third of amax; the
                 * block scale's e4m3 rounding adds 1/16 of it */
                for (int j = 0; j < 16; j++)
                    bad += fabsf(y[j] - x[j]) > a / 6.0f * (1.0f + 0.0625f) + 1e-6f;
            }
    CU_ASSERT_EQUAL(bad, 0);
    free(ok), free(ov), fix_free(&f);
}

static void nvfp4_scales_follow_vllms_page_layout_with_v_swizzled(void)
{
    /* NHD, 2 blocks of 4 slots, 2 heads, head_dim 64 (4 block scales): a
     * block is 4 x 2 x 32 data bytes, then 4 x 2 x 4 scale bytes */
    kvcal_kv_cache c = {(uint8_t *)1,   (uint8_t *)1, NULL, NULL, 2, 4, 2, 64, 0,
                        KVCAL_CACHE_NHD};
    const int64_t blk = 4 * 2 * 36, data = 4 * 2 * 32;
    /* slot 5 = block 1, offset 1; head 1; scale 2 */
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 0, 5, 1, 2),
                    blk + data + (1 * 2 + 1) * 4 + 2);
    /* V: t' = 1 / 4 * 4 + 2 / 1 = 2, s' = 2 % 1 * 4 + 1 % 4 = 1 */
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 1, 5, 1, 2),
                    blk + data + (2 * 2 + 1) * 4 + 1);
    c.layout = KVCAL_CACHE_HND;
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 0, 5, 1, 2),
                    blk + data + (1 * 4 + 1) * 4 + 2);
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 1, 5, 1, 2),
                    blk + data + (1 * 4 + 2) * 4 + 1);
    /* no swizzle where vLLM's cannot be (block_size 5, or head_dim / 16 = 3) */
    c.block_size = 5;
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 1, 6, 1, 2),
                    5 * 2 * 36 + 5 * 2 * 32 + (1 * 5 + 1) * 4 + 2);
    c.block_size = 4, c.head_dim = 48;
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 1, 5, 1, 2),
                    4 * 2 * 27 + 4 * 2 * 24 + (1 * 4 + 1) * 3 + 2);
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 1, 8, 0, 0), -1); /* past the cache */
    CU_ASSERT_EQUAL(kvcal_kv_nvfp4_scale_offset(&c, 2, 1, 0, 0), -1);
    /* the quantizer writes each block scale there: 8 tokens filling both
     * blocks of an NHD cache, V's block scales of known amax */
    cache_fix f;
    const int T = 8, H = 2, D = 64;
    fix_make(&f, T, H, D, 2, 4, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_NVFP4);
    for (int t = 0; t < T; t++)
        f.slots[t] = t;
    for (int i = 0; i < T * H * D; i++)
        f.v[i] =
            (float)(1 + i / 16 % 13) * ((i % 16) == 5 ? 1.0f : 0.25f); /* block amax */
    const float g = 1.0f / 448.0f;
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_NVFP4,
                          0,
                          KVCAL_GRANULARITY_TENSOR,
                          &g,
                          &g,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &p), KVCAL_OK);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int b = 0; b < D / 16; b++) {
                float amax = (float)(1 + ((t * H + h) * D + b * 16) / 16 % 13);
                uint8_t want = kvcal_fp8_e4m3_from_float((amax * (1.0f / 6.0f)) * 448.0f);
                bad += f.c.v[kvcal_kv_nvfp4_scale_offset(&f.c, 1, t, h, b)] != want;
            }
    CU_ASSERT_EQUAL(bad, 0);
    fix_free(&f);
}

// --- e4m3 through the format entry points, and refusals
// ---------------------------------

/* What the fast quantization takes from the NVFP4 layout: the block
 * scales of a lane's blocks b0 + c D / 64 (c < 4; lanes of D / 32 a row,
 * two a block) lie evenly spaced in the cache block, K's (consecutive
 * bytes of a row) and V's (swizzled: the same byte of consecutive rows)
 * alike, for head_dim 64, 128 and 256, swizzled block sizes and others,
 * both layouts. */
static int scale_place(int layout, int bs, int H, int S, int off, int head, int b, int kv)
{
    int t, ss;
    kvcal_kvfmt_nvfp4_swizzle(bs, S, off, b, kv, &t, &ss);
    return (layout == KVCAL_CACHE_NHD ? t * H + head : head * bs + t) * S + ss;
}

static void nvfp4_scale_places_of_a_lanes_blocks_are_evenly_spaced(void)
{
    const int dims[3] = {64, 128, 256}, sizes[3] = {16, 5, 8}, H = 3;
    int bad = 0;
    for (int i = 0; i < 3 * 3 * 2 * 2; i++) {
        const int D = dims[i % 3], bs = sizes[i / 3 % 3], layout = i / 9 % 2, kv = i / 18;
        for (int off = 0; off < bs; off++)
            for (int head = 0; head < H; head++)
                for (int b0 = 0; b0 < D / 64; b0++) {
                    int p[4];
                    for (int c = 0; c < 4; c++)
                        p[c] = scale_place(layout, bs, H, D / 16, off, head,
                                           b0 + c * D / 64, kv);
                    bad += p[2] - p[1] != p[1] - p[0] || p[3] - p[2] != p[1] - p[0];
                }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void fmt_e4m3_is_the_static_and_dynamic_entry_points(void)
{
    cache_fix a, b;
    fix_make(&a, 9, 2, 16, 3, 4, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_FP8_E4M3);
    fix_make(&b, 9, 2, 16, 3, 4, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_FP8_E4M3);
    memcpy(b.k, a.k, sizeof(float) * 9 * 2 * 16),
        memcpy(b.v, a.v, sizeof(float) * 9 * 2 * 16);
    kvcal_kv_qparams p = {KVCAL_KV_FORMAT_FP8_E4M3,
                          0,
                          KVCAL_GRANULARITY_TENSOR,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_fmt_ref(&a.b, &a.c, &p), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_kv_quantize_dynamic_ref(&b.b, &b.c), KVCAL_OK);
    CU_ASSERT_EQUAL(memcmp(a.c.k, b.c.k, a.bytes), 0);
    CU_ASSERT_EQUAL(memcmp(a.c.v_scale, b.c.v_scale, sizeof(float) * a.nscale), 0);
    fix_free(&a), fix_free(&b);
}

static void fmt_rejects_parameters_the_format_does_not_take(void)
{
    cache_fix f;
    fix_make(&f, 2, 1, 24, 1, 4, KVCAL_CACHE_NHD, KVCAL_KV_FORMAT_INT8);
    const float one = 1.0f, zero = 0.0f, nan = NAN;
    kvcal_kv_qparams e5 = {
        KVCAL_KV_FORMAT_FP8_E5M2, 0, 0, &one, &one, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams nv_dyn = {
        KVCAL_KV_FORMAT_NVFP4, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams nv_24 = {
        KVCAL_KV_FORMAT_NVFP4, 0, 0, &one, &one, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams asym_nozero = {
        KVCAL_KV_FORMAT_INT8_ASYM, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams asym_static = {
        KVCAL_KV_FORMAT_INT8_ASYM, 0, 0, &one, &one, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams int8_zero = {
        KVCAL_KV_FORMAT_INT8, 0, 0, &one, &one, &zero, &zero, NULL, NULL};
    kvcal_kv_qparams int8_half = {
        KVCAL_KV_FORMAT_INT8, 0, 0, &one, NULL, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams int8_nan = {
        KVCAL_KV_FORMAT_INT8, 0, 0, &one, &nan, NULL, NULL, NULL, NULL};
    kvcal_kv_qparams bad_round = {
        KVCAL_KV_FORMAT_INT8, 7, 0, &one, &one, NULL, NULL, NULL, NULL};
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &e5), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &nv_dyn),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &nv_24), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &asym_nozero),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &asym_static),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &int8_zero),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &int8_half),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &int8_nan),
                    KVCAL_ERR_NONFINITE);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, &bad_round),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_fmt_ref(&f.b, &f.c, NULL), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(strstr(kvcal_last_error(), "params") != NULL);
    for (size_t i = 0; i < f.bytes; i++)
        CU_ASSERT_EQUAL_FATAL(f.c.k[i], POISON);
    fix_free(&f);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(e5m2_converts_hand_values_and_matches_a_nearest_search),
    KVCAL_TEST(e2m1_rounds_to_nearest_even_and_saturates_at_6),
    KVCAL_TEST(device_formulas_equal_the_reference_arithmetic),
    KVCAL_TEST(nvfp4_byte_tables_decode_every_code_as_the_reference),
    KVCAL_TEST(int_code_rounds_as_the_engines_round),
    KVCAL_TEST(int8_dynamic_is_vllms_int8_per_token_head),
    KVCAL_TEST(int8_static_per_head_rounds_to_nearest_even_and_saturates),
    KVCAL_TEST(int8_asym_dynamic_is_lmdeploys_min_max_per_token_head),
    KVCAL_TEST(e5m2_cache_is_a_cast_and_dequantizes_exactly),
    KVCAL_TEST(nvfp4_row_packs_pairs_low_nibble_first_then_block_scales),
    KVCAL_TEST(nvfp4_round_trip_stays_within_a_block_step_in_hnd_blocks),
    KVCAL_TEST(nvfp4_scales_follow_vllms_page_layout_with_v_swizzled),
    KVCAL_TEST(nvfp4_scale_places_of_a_lanes_blocks_are_evenly_spaced),
    KVCAL_TEST(fmt_e4m3_is_the_static_and_dynamic_entry_points),
    KVCAL_TEST(fmt_rejects_parameters_the_format_does_not_take),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(kvquant_fmt, KVCAL_NEEDS_NOTHING, tests)
