/* tests/test_kvquant_cuda.c: every CUDA entry point of the online FP8 KV
 * quantization against its CPU reference, byte for byte, on odd shapes
 * (tokens 1, 19, 989 and, for the fast kernel of large batches,
 * KVCAL_KV_FAST_MIN_TOKENS + 19; head_dim 64, 72, 80, 96, 128, 256 and 320
 * (more than one vector per lane); 8 and 3 kv heads (row groups that
 * straddle tokens);
 * block_size 16 and 5; both layouts; bf16, f16 and f32 inputs; aligned,
 * padded and misaligned strides)
 * with padding slots, out-of-range slots, saturating, zero, NaN and Inf
 * inputs; and the device e4m3 conversion against core/fp8.h on every fp16
 * and bf16 value plus a dense sweep of fp32 ties. Needs a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8.h"
#include "kvcal.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/kvquant_ref.h"
#include "kernels/cuda/kvquant.h"

#define POISON 0xFF /* e4m3 -NaN: never written by the quantizer */

static uint32_t rng = 2024u;
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
    if (host)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

static void host_copy(void *host, const void *dev, size_t bytes)
{
    cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// --- e4m3 conversion ---------------------------------------------------------

static void device_e4m3_matches_core_fp8_on_all_halves_bf16_and_ties(void)
{
    /* every bf16 and fp16 value, every e4m3 value, the midpoints between
     * consecutive e4m3 values and their fp32 neighbours (the ties), large
     * values, and 4M random fp32 patterns */
    size_t n = 65536 * 2 + 256 * 8 + (1u << 22), k = 0;
    float *x = malloc(n * sizeof(float));
    uint8_t *got = malloc(n), *dev_out = NULL;
    for (uint32_t i = 0; i < 65536; i++) {
        x[k++] = float_of(i << 16);
        uint32_t e = (i >> 10) & 31, m = i & 1023;
        float h = e == 0    ? ldexpf((float)m, -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                            : ldexpf((float)(1024 + m), (int)e - 25);
        x[k++] = (i & 0x8000) ? -h : h;
    }
    for (int c = 0; c < 256; c++) {
        float a = kvcal_fp8_e4m3_to_float((uint8_t)c),
              b = kvcal_fp8_e4m3_to_float((uint8_t)(c + 1));
        float mid =
            (c & 0x7f) == 0x7e || (c & 0x7f) == 0x7f ? a * 1.0357143f : 0.5f * (a + b);
        x[k++] = a;
        x[k++] = mid;
        x[k++] = nextafterf(mid, 0.0f);
        x[k++] = nextafterf(mid, INFINITY);
        x[k++] = nextafterf(mid, -INFINITY);
        x[k++] = -mid;
        x[k++] = a * 2.0f;
        x[k++] = a * 0.5f;
    }
    while (k < n)
        x[k++] = float_of(next_u32());
    float *dx = dev_copy(x, n * sizeof(float));
    dev_out = dev_copy(NULL, n);
    CU_ASSERT_FATAL(dx && dev_out);
    CU_ASSERT_EQUAL_FATAL(kvcal_fp8_e4m3_encode_launch(dx, dev_out, (int64_t)n, NULL),
                          KVCAL_OK);
    host_copy(got, dev_out, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != kvcal_fp8_e4m3_from_float(x[i]) && bad++ < 5)
            printf("\n  e4m3(%a): device 0x%02x, core/fp8.h 0x%02x", (double)x[i], got[i],
                   kvcal_fp8_e4m3_from_float(x[i]));
    CU_ASSERT_EQUAL(bad, 0);
    cudaFree(dx);
    cudaFree(dev_out);
    free(x);
    free(got);
}

// --- one quantization case on both backends -------------------------------------

typedef enum { OP_STATIC_TENSOR, OP_STATIC_HEAD, OP_DYNAMIC } quant_op;

typedef struct qcase {
    int T, H, D, block_size;
    kvcal_cache_layout layout;
    kvcal_dtype dtype;
    int pad; /* extra elements per token (odd: misaligned rows) */
} qcase;

typedef struct side {
    kvcal_kv_batch b;
    kvcal_kv_cache c;
    float *k_scale, *v_scale; /* static scales (H) */
} side;

typedef struct qsetup {
    side host, dev;
    size_t in_bytes, cache_bytes, scale_count;
} qsetup;

static int elem_size(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 ? 4 : 2;
}

/* Random inputs of c's dtype (a few special values in token 0), scattered
 * slots with padding and one out-of-range slot, poisoned caches. */
static void qsetup_make(qsetup *s, qcase c, int with_scales)
{
    memset(s, 0, sizeof *s);
    int64_t ts = (int64_t)c.H * c.D + c.pad;
    int es = elem_size(c.dtype);
    s->in_bytes = (size_t)(c.T * ts) * es;
    uint8_t *k = malloc(s->in_bytes), *v = malloc(s->in_bytes);
    for (size_t i = 0; i < s->in_bytes / es; i++)
        for (int kv = 0; kv < 2; kv++) {
            uint8_t *p = kv ? v : k;
            uint32_t r = next_u32();
            if (c.dtype == KVCAL_DTYPE_F32) { /* |x| in [2^-12, 2^6) */
                uint32_t u = (r & 0x807fffffu) | ((115u + (r >> 23) % 18u) << 23);
                memcpy(p + 4 * i, &u, 4);
            } else if (c.dtype == KVCAL_DTYPE_BF16) {
                uint16_t u = (uint16_t)((r & 0x807fu) | ((115u + (r >> 8) % 18u) << 7));
                memcpy(p + 2 * i, &u, 2);
            } else {
                uint16_t u = (uint16_t)((r & 0x83ffu) | ((3u + (r >> 10) % 18u) << 10));
                memcpy(p + 2 * i, &u, 2);
            }
        }
    /* token 0, head 0: NaN, +Inf, -Inf, huge, -0, 0 */
    if (c.D >= 6) {
        const float sp[6] = {NAN, INFINITY, -INFINITY, 30000.0f, -0.0f, 0.0f};
        for (int d = 0; d < 6; d++) {
            uint32_t u;
            memcpy(&u, &sp[d], 4);
            if (c.dtype == KVCAL_DTYPE_F32)
                memcpy(k + 4 * d, &u, 4);
            else if (c.dtype == KVCAL_DTYPE_BF16) {
                uint16_t h = (uint16_t)(u >> 16);
                memcpy(k + 2 * d, &h, 2);
            } else {
                const uint16_t hs[6] = {0x7e00, 0x7c00, 0xfc00, 0x7530, 0x8000, 0x0000};
                memcpy(k + 2 * d, &hs[d], 2);
            }
        }
    }
    int64_t num_blocks = c.T / c.block_size + 3, cap = num_blocks * c.block_size;
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)c.T);
    for (int t = 0; t < c.T; t++)
        slots[t] = t % 7 == 3 ? -1 : (t * 7919LL + 3) % cap;
    if (c.T > 5)
        slots[5] = cap + 3;
    s->cache_bytes = (size_t)(cap * c.H * c.D);
    s->scale_count = (size_t)(cap * c.H);
    float ks[64], vs[64];
    for (int h = 0; h < c.H; h++)
        ks[h] = 0.002f + 0.02f * h, vs[h] = 0.01f + 0.003f * h;
    kvcal_kv_batch b = {k, v, c.dtype, c.T, ts, c.D, ts, c.D, slots};
    kvcal_kv_cache cc = {0};
    cc.num_blocks = num_blocks, cc.block_size = c.block_size, cc.num_kv_heads = c.H;
    cc.head_dim = c.D, cc.layout = c.layout;
    s->host.b = s->dev.b = b;
    s->host.c = s->dev.c = cc;
    s->host.c.k = malloc(s->cache_bytes);
    s->host.c.v = malloc(s->cache_bytes);
    memset(s->host.c.k, POISON, s->cache_bytes);
    memset(s->host.c.v, POISON, s->cache_bytes);
    s->host.k_scale = malloc(sizeof ks);
    s->host.v_scale = malloc(sizeof vs);
    memcpy(s->host.k_scale, ks, sizeof ks);
    memcpy(s->host.v_scale, vs, sizeof vs);
    if (with_scales) {
        s->host.c.k_scale = malloc(s->scale_count * sizeof(float));
        s->host.c.v_scale = malloc(s->scale_count * sizeof(float));
        for (size_t i = 0; i < s->scale_count; i++)
            s->host.c.k_scale[i] = s->host.c.v_scale[i] = -1.0f;
    }
    s->dev.b.k = dev_copy(k, s->in_bytes);
    s->dev.b.v = dev_copy(v, s->in_bytes);
    s->dev.b.slot_mapping = dev_copy(slots, sizeof(int64_t) * (size_t)c.T);
    s->dev.c.k = dev_copy(s->host.c.k, s->cache_bytes);
    s->dev.c.v = dev_copy(s->host.c.v, s->cache_bytes);
    s->dev.k_scale = dev_copy(ks, sizeof ks);
    s->dev.v_scale = dev_copy(vs, sizeof vs);
    if (with_scales) {
        s->dev.c.k_scale = dev_copy(s->host.c.k_scale, s->scale_count * sizeof(float));
        s->dev.c.v_scale = dev_copy(s->host.c.v_scale, s->scale_count * sizeof(float));
    }
}

static void qsetup_free(qsetup *s)
{
    free((void *)s->host.b.k);
    free((void *)s->host.b.v);
    free((void *)s->host.b.slot_mapping);
    free(s->host.c.k);
    free(s->host.c.v);
    free(s->host.c.k_scale);
    free(s->host.c.v_scale);
    free(s->host.k_scale);
    free(s->host.v_scale);
    cudaFree((void *)s->dev.b.k);
    cudaFree((void *)s->dev.b.v);
    cudaFree((void *)s->dev.b.slot_mapping);
    cudaFree(s->dev.c.k);
    cudaFree(s->dev.c.v);
    cudaFree(s->dev.c.k_scale);
    cudaFree(s->dev.c.v_scale);
    cudaFree(s->dev.k_scale);
    cudaFree(s->dev.v_scale);
}

/* Number of cache bytes and recorded scales where device and host differ. */
static size_t qsetup_diff(const qsetup *s)
{
    size_t bad = 0;
    uint8_t *buf = malloc(s->cache_bytes);
    for (int kv = 0; kv < 2; kv++) {
        host_copy(buf, kv ? s->dev.c.v : s->dev.c.k, s->cache_bytes);
        const uint8_t *want = kv ? s->host.c.v : s->host.c.k;
        for (size_t i = 0; i < s->cache_bytes; i++)
            bad += buf[i] != want[i];
    }
    free(buf);
    if (s->host.c.k_scale) {
        float *f = malloc(s->scale_count * sizeof(float));
        for (int kv = 0; kv < 2; kv++) {
            host_copy(f, kv ? s->dev.c.v_scale : s->dev.c.k_scale,
                      s->scale_count * sizeof(float));
            bad += memcmp(f, kv ? s->host.c.v_scale : s->host.c.k_scale,
                          s->scale_count * sizeof(float)) != 0;
        }
        free(f);
    }
    return bad;
}

static const char *layout_name(kvcal_cache_layout l)
{
    return l == KVCAL_CACHE_NHD ? "NHD" : "HND";
}

static void report(const char *what, qcase c, size_t bad)
{
    if (bad)
        printf("\n  %s T=%d H=%d D=%d bs=%d %s dtype=%d pad=%d: %zu differences", what,
               c.T, c.H, c.D, c.block_size, layout_name(c.layout), (int)c.dtype, c.pad,
               bad);
}

/* Runs op on both backends for one case; returns the differences, plus
 * one when fast >= 0 and kvcal_kv_fast_path_applies differs from it. */
static size_t quant_case(quant_op op, qcase c, int fast)
{
    qsetup s;
    qsetup_make(&s, c, op != OP_STATIC_TENSOR);
    size_t bad = fast >= 0 && kvcal_kv_fast_path_applies(&s.dev.b, &s.dev.c) != fast;
    kvcal_status a, b;
    if (op == OP_DYNAMIC) {
        a = kvcal_kv_quantize_dynamic_ref(&s.host.b, &s.host.c);
        b = kvcal_kv_quantize_dynamic_launch(&s.dev.b, &s.dev.c, NULL);
    } else {
        kvcal_granularity g =
            op == OP_STATIC_HEAD ? KVCAL_GRANULARITY_HEAD : KVCAL_GRANULARITY_TENSOR;
        a = kvcal_kv_quantize_static_ref(&s.host.b, &s.host.c, g, s.host.k_scale,
                                         s.host.v_scale);
        b = kvcal_kv_quantize_static_launch(&s.dev.b, &s.dev.c, g, s.dev.k_scale,
                                            s.dev.v_scale, NULL);
    }
    bad += (a != KVCAL_OK) + (b != KVCAL_OK) + (cudaDeviceSynchronize() != cudaSuccess);
    bad += qsetup_diff(&s);
    qsetup_free(&s);
    return bad;
}

/* Runs op on both backends for every shape; returns the cases that differ. */
static int quant_sweep(quant_op op)
{
    static const int Ts[] = {1, 19, 989}, Ds[] = {72, 80, 96, 128, 320}, bss[] = {16, 5};
    static const kvcal_dtype dts[] = {KVCAL_DTYPE_BF16, KVCAL_DTYPE_F16, KVCAL_DTYPE_F32};
    int failed = 0, n = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int di = 0; di < 5; di++)
            for (int bi = 0; bi < 2; bi++)
                for (int li = 0; li < 2; li++) {
                    qcase c = {Ts[ti],
                               n % 5 == 2 ? 3 : 8,
                               Ds[di],
                               bss[bi],
                               (kvcal_cache_layout)li,
                               dts[n % 3],
                               (n % 4 == 1)   ? 8
                               : (n % 4 == 3) ? 1
                                              : 0};
                    n++;
                    size_t bad = quant_case(op, c, -1);
                    report(op == OP_DYNAMIC ? "dynamic" : "static", c, bad);
                    failed += bad != 0;
                }
    return failed;
}

static void static_tensor_launch_matches_ref_bytes(void)
{
    CU_ASSERT_EQUAL(quant_sweep(OP_STATIC_TENSOR), 0);
}

static void static_head_launch_matches_ref_bytes_and_records_scales(void)
{
    CU_ASSERT_EQUAL(quant_sweep(OP_STATIC_HEAD), 0);
}

static void dynamic_launch_matches_ref_bytes_and_scales(void)
{
    CU_ASSERT_EQUAL(quant_sweep(OP_DYNAMIC), 0);
}

// --- fast kernel (large batches of 16-bit K/V) -----------------------------------

#define FAST_T (KVCAL_KV_FAST_MIN_TOKENS + 19)

/* The fast kernel's shapes (bf16 and f16, head_dim 64 / 128 / 256, both
 * layouts, block_size 16 and 5, 8 and 3 heads, contiguous and padded token
 * strides) on FAST_T tokens, an odd count above the threshold, with
 * qsetup_make's padding and out-of-range slots, saturating values, NaN and
 * +-Inf; each case must reach the fast kernel and match the reference. */
static void fast_kernel_matches_ref_on_large_odd_batches(void)
{
    static const int Ds[] = {64, 128, 256}, bss[] = {16, 5};
    int failed = 0, n = 0;
    for (int op = OP_STATIC_TENSOR; op <= OP_DYNAMIC; op++)
        for (int di = 0; di < 3; di++)
            for (int bi = 0; bi < 2; bi++)
                for (int li = 0; li < 2; li++, n++) {
                    qcase c = {FAST_T,
                               n % 3 == 1 ? 3 : 8,
                               Ds[di],
                               bss[bi],
                               (kvcal_cache_layout)li,
                               (n + op) % 2 ? KVCAL_DTYPE_F16 : KVCAL_DTYPE_BF16,
                               n % 4 == 2 ? 8 : 0};
                    size_t bad = quant_case((quant_op)op, c, 1);
                    report(op == OP_DYNAMIC ? "fast dynamic" : "fast static", c, bad);
                    failed += bad != 0;
                }
    CU_ASSERT_EQUAL(failed, 0);
}

/* Shapes the fast kernel does not take, above the threshold (f32, head_dim
 * 80 and 320, a misaligned stride) and at the threshold minus one, fall
 * back to the generic kernel and still match the reference. */
static void fast_kernel_leaves_other_shapes_to_the_generic_kernel(void)
{
    const qcase cases[5] = {
        {FAST_T, 8, 128, 16, KVCAL_CACHE_NHD, KVCAL_DTYPE_F32, 0},
        {FAST_T, 3, 80, 5, KVCAL_CACHE_HND, KVCAL_DTYPE_BF16, 0},
        {FAST_T, 2, 320, 16, KVCAL_CACHE_NHD, KVCAL_DTYPE_F16, 0},
        {FAST_T, 8, 128, 16, KVCAL_CACHE_HND, KVCAL_DTYPE_BF16, 1},
        {KVCAL_KV_FAST_MIN_TOKENS - 1, 8, 128, 5, KVCAL_CACHE_NHD, KVCAL_DTYPE_BF16, 0},
    };
    int failed = 0;
    for (int i = 0; i < 5; i++) {
        size_t bad = quant_case(i % 2 ? OP_DYNAMIC : OP_STATIC_HEAD, cases[i], 0);
        report("generic above threshold", cases[i], bad);
        failed += bad != 0;
    }
    CU_ASSERT_EQUAL(failed, 0);
}

// --- running scaler ------------------------------------------------------------

/* A prefill of 989 tokens, then decode steps of 19 tokens whose values grow:
 * after every step the device scaler, cache and recorded scales must equal
 * the host ones. */
static void scaler_launch_matches_ref_over_prefill_and_decode(void)
{
    const kvcal_scaler_mode modes[3] = {KVCAL_SCALER_RUNNING_MAX, KVCAL_SCALER_EMA,
                                        KVCAL_SCALER_FIRST_BATCH};
    for (int m = 0; m < 3; m++) {
        qcase c = {989 + 6 * 19,     8, 128, 16, (kvcal_cache_layout)(m == 1),
                   KVCAL_DTYPE_BF16, 0};
        qsetup s;
        qsetup_make(&s, c, 1);
        kvcal_kv_scaler_t *hs = NULL, *ds = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_create(8, modes[m], 0.25f, 0, &hs),
                              KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_kv_scaler_create(8, modes[m], 0.25f, 1, &ds),
                              KVCAL_OK);
        /* scale decode steps up: each step's bf16 exponent + step */
        uint16_t *k = (uint16_t *)s.host.b.k;
        for (int t = 989; t < c.T; t++)
            for (int i = 0; i < 8 * 128; i++) {
                uint16_t u = k[t * 1024 + i];
                if (((u >> 7) & 0xff) < 0xf0)
                    k[t * 1024 + i] = (uint16_t)(u + (((t - 989) / 19 + 1) << 7));
            }
        cudaMemcpy((void *)s.dev.b.k, k, s.in_bytes, cudaMemcpyHostToDevice);
        size_t bad = 0;
        int64_t t0 = 0;
        for (int step = 0; step < 7; step++) {
            int64_t n = step == 0 ? 989 : 19;
            kvcal_kv_batch hb = s.host.b, db = s.dev.b;
            hb.num_tokens = db.num_tokens = n;
            hb.k = k + t0 * 1024, db.k = (const uint16_t *)s.dev.b.k + t0 * 1024;
            hb.v = (const uint16_t *)s.host.b.v + t0 * 1024;
            db.v = (const uint16_t *)s.dev.b.v + t0 * 1024;
            hb.slot_mapping += t0, db.slot_mapping += t0;
            bad += kvcal_kv_scaler_quantize_ref(hs, &hb, &s.host.c) != KVCAL_OK;
            bad += kvcal_kv_scaler_quantize_launch(ds, &db, &s.dev.c, NULL) != KVCAL_OK;
            float hk[8], hv[8], dk[8], dv[8];
            int64_t hn = -1, dn = -2;
            bad += kvcal_kv_scaler_read(hs, NULL, hk, hv, &hn) != KVCAL_OK;
            bad += kvcal_kv_scaler_read(ds, NULL, dk, dv, &dn) != KVCAL_OK;
            bad += hn != dn || hn != step + 1 || memcmp(hk, dk, sizeof hk) ||
                   memcmp(hv, dv, sizeof hv);
            bad += qsetup_diff(&s);
            t0 += n;
        }
        report(m == 0   ? "scaler running max"
               : m == 1 ? "scaler ema"
                        : "scaler first batch",
               c, bad);
        CU_ASSERT_EQUAL(bad, 0);
        kvcal_kv_scaler_destroy(hs);
        kvcal_kv_scaler_destroy(ds);
        qsetup_free(&s);
    }
}

/* One scaler step on shapes the test above does not reach: 3 heads (row
 * groups straddle tokens), head_dim 320 (several vectors per lane), f16 and
 * f32 inputs, a misaligned stride (one-element path), block_size 5, and
 * batches whose write step takes the fast kernel. */
static void scaler_launch_matches_ref_on_odd_shapes(void)
{
    const qcase cases[6] = {
        {989, 3, 128, 16, KVCAL_CACHE_NHD, KVCAL_DTYPE_F16, 0},
        {19, 3, 320, 5, KVCAL_CACHE_HND, KVCAL_DTYPE_BF16, 8},
        {989, 8, 80, 5, KVCAL_CACHE_NHD, KVCAL_DTYPE_F32, 1},
        {1, 3, 96, 16, KVCAL_CACHE_HND, KVCAL_DTYPE_F32, 0},
        /* the write step on the fast kernel */
        {FAST_T, 8, 128, 5, KVCAL_CACHE_HND, KVCAL_DTYPE_F16, 8},
        {FAST_T, 3, 64, 16, KVCAL_CACHE_NHD, KVCAL_DTYPE_BF16, 0},
    };
    int failed = 0;
    for (int i = 0; i < 6; i++) {
        qsetup s;
        qsetup_make(&s, cases[i], 1);
        kvcal_kv_scaler_t *hs = NULL, *ds = NULL;
        size_t bad = (kvcal_kv_scaler_create(cases[i].H, KVCAL_SCALER_RUNNING_MAX, 0.0f,
                                             0, &hs) != KVCAL_OK) +
                     (kvcal_kv_scaler_create(cases[i].H, KVCAL_SCALER_RUNNING_MAX, 0.0f,
                                             1, &ds) != KVCAL_OK);
        if (!bad) {
            float hk[8], hv[8], dk[8], dv[8];
            int64_t hn = -1, dn = -2;
            bad += kvcal_kv_scaler_quantize_ref(hs, &s.host.b, &s.host.c) != KVCAL_OK;
            bad +=
                kvcal_kv_scaler_quantize_launch(ds, &s.dev.b, &s.dev.c, NULL) != KVCAL_OK;
            bad += kvcal_kv_scaler_read(hs, NULL, hk, hv, &hn) != KVCAL_OK;
            bad += kvcal_kv_scaler_read(ds, NULL, dk, dv, &dn) != KVCAL_OK;
            bad += hn != 1 || dn != 1 ||
                   memcmp(hk, dk, sizeof(float) * (size_t)cases[i].H) ||
                   memcmp(hv, dv, sizeof(float) * (size_t)cases[i].H);
            bad += qsetup_diff(&s);
        }
        report("scaler odd shape", cases[i], bad);
        failed += bad != 0;
        kvcal_kv_scaler_destroy(hs);
        kvcal_kv_scaler_destroy(ds);
        qsetup_free(&s);
    }
    CU_ASSERT_EQUAL(failed, 0);
}

/* Sets both backends' caches and recorded scales back to the poison. */
static void qsetup_poison(qsetup *s)
{
    for (int kv = 0; kv < 2; kv++) {
        memset(kv ? s->host.c.v : s->host.c.k, POISON, s->cache_bytes);
        cudaMemset(kv ? s->dev.c.v : s->dev.c.k, POISON, s->cache_bytes);
        float *hs = kv ? s->host.c.v_scale : s->host.c.k_scale;
        for (size_t i = 0; i < s->scale_count; i++)
            hs[i] = -1.0f;
        cudaMemcpy(kv ? s->dev.c.v_scale : s->dev.c.k_scale, hs,
                   s->scale_count * sizeof(float), cudaMemcpyHostToDevice);
    }
}

/* Scaler steps on the fast kernel (FAST_T tokens): the first step (every
 * scale grows from unset), the same batch again (nothing grows: one pass),
 * then the batch with one K value of head 1 raised to 200 (one scale grows
 * in RUNNING_MAX and EMA: the second pass rewrites that head's K rows; none
 * in FIRST_BATCH, which saturates it as the reference does). Caches are
 * poisoned before every step, so each step must write every byte and scale
 * itself; after each, bytes, recorded scales, the scaler's scales and step
 * count and the number of grown scales equal the reference's. */
static void scaler_fast_steps_match_ref_when_scales_grow_and_when_settled(void)
{
    const kvcal_scaler_mode modes[3] = {KVCAL_SCALER_RUNNING_MAX, KVCAL_SCALER_EMA,
                                        KVCAL_SCALER_FIRST_BATCH};
    int failed = 0;
    for (int m = 0; m < 3; m++)
        for (int li = 0; li < 2; li++) {
            qcase c = {FAST_T,
                       m == 2 ? 3 : 8,
                       m == 1 ? 64 : 128,
                       li ? 5 : 16,
                       (kvcal_cache_layout)li,
                       (m + li) % 2 ? KVCAL_DTYPE_F16 : KVCAL_DTYPE_BF16,
                       li ? 8 : 0};
            qsetup s;
            qsetup_make(&s, c, 1);
            kvcal_kv_scaler_t *hs = NULL, *ds = NULL;
            size_t bad = (kvcal_kv_scaler_create(c.H, modes[m], 0.25f, 0, &hs) !=
                          KVCAL_OK) +
                         (kvcal_kv_scaler_create(c.H, modes[m], 0.25f, 1, &ds) !=
                          KVCAL_OK) +
                         (kvcal_kv_fast_path_applies(&s.dev.b, &s.dev.c) != 1);
            const int want_grown[3] = {2 * c.H, 0, m == 2 ? 0 : 1};
            for (int step = 0; step < 3 && !bad; step++) {
                if (step == 2) { /* token 1, head 1, element 2 of K: 200 */
                    size_t at = (size_t)(1 * (c.H * c.D + c.pad) + c.D + 2);
                    uint16_t big = c.dtype == KVCAL_DTYPE_BF16 ? 0x4348 : 0x5a40;
                    memcpy((uint16_t *)s.host.b.k + at, &big, 2);
                    cudaMemcpy((uint16_t *)s.dev.b.k + at, &big, 2,
                               cudaMemcpyHostToDevice);
                }
                qsetup_poison(&s);
                bad += kvcal_kv_scaler_quantize_ref(hs, &s.host.b, &s.host.c) != KVCAL_OK;
                bad += kvcal_kv_scaler_quantize_launch(ds, &s.dev.b, &s.dev.c, NULL) !=
                       KVCAL_OK;
                float hk[8], hv[8], dk[8], dv[8];
                int64_t hn = -1, dn = -2;
                int hg = -1, dg = -2;
                bad += kvcal_kv_scaler_read(hs, NULL, hk, hv, &hn) != KVCAL_OK;
                bad += kvcal_kv_scaler_read(ds, NULL, dk, dv, &dn) != KVCAL_OK;
                bad += kvcal_kv_scaler_grown(hs, NULL, &hg) != KVCAL_OK;
                bad += kvcal_kv_scaler_grown(ds, NULL, &dg) != KVCAL_OK;
                bad += hn != dn || hn != step + 1 || hg != dg || hg != want_grown[step] ||
                       memcmp(hk, dk, sizeof(float) * (size_t)c.H) ||
                       memcmp(hv, dv, sizeof(float) * (size_t)c.H);
                bad += qsetup_diff(&s);
            }
            report(m == 0   ? "fast scaler running max"
                   : m == 1 ? "fast scaler ema"
                            : "fast scaler first batch",
                   c, bad);
            failed += bad != 0;
            kvcal_kv_scaler_destroy(hs);
            kvcal_kv_scaler_destroy(ds);
            qsetup_free(&s);
        }
    CU_ASSERT_EQUAL(failed, 0);
}

// --- dequantization ----------------------------------------------------------------

static int same_value(const void *a, const void *b, size_t i, kvcal_dtype d)
{
    if (d == KVCAL_DTYPE_F32) {
        float x = ((const float *)a)[i], y = ((const float *)b)[i];
        return (isnan(x) && isnan(y)) || memcmp(&x, &y, 4) == 0;
    }
    uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
    uint16_t nan = d == KVCAL_DTYPE_BF16 ? 0x7f80 : 0x7c00;
    return ((x & 0x7fff) > nan && (y & 0x7fff) > nan) || x == y;
}

/* Quantizes case c through the reference (dynamic scales when token_scales,
 * else static per-head ones) into both caches, dequantizes them on the host
 * and on the device into `out` and counts the values that differ, plus one
 * when fast is set and the fast kernel does not take the case. */
static size_t dequantize_mismatches(qcase c, int token_scales, kvcal_dtype out, int fast)
{
    qsetup s;
    qsetup_make(&s, c, token_scales);
    if (token_scales)
        kvcal_kv_quantize_dynamic_ref(&s.host.b, &s.host.c);
    else
        kvcal_kv_quantize_static_ref(&s.host.b, &s.host.c, KVCAL_GRANULARITY_HEAD,
                                     s.host.k_scale, s.host.v_scale);
    cudaMemcpy(s.dev.c.k, s.host.c.k, s.cache_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(s.dev.c.v, s.host.c.v, s.cache_bytes, cudaMemcpyHostToDevice);
    if (token_scales) {
        cudaMemcpy(s.dev.c.k_scale, s.host.c.k_scale, s.scale_count * 4,
                   cudaMemcpyHostToDevice);
        cudaMemcpy(s.dev.c.v_scale, s.host.c.v_scale, s.scale_count * 4,
                   cudaMemcpyHostToDevice);
    }
    const size_t count = (size_t)c.T * c.H * c.D, bytes = count * (size_t)elem_size(out);
    void *hk = malloc(bytes), *hv = malloc(bytes), *gk = malloc(bytes), *gv = malloc(bytes);
    CU_ASSERT_FATAL(hk && hv && gk && gv);
    memset(hk, 0x5a, bytes), memset(hv, 0x5a, bytes);
    void *dk = dev_copy(hk, bytes), *dv = dev_copy(hv, bytes);
    size_t bad = fast && kvcal_kv_dequant_fast_path_applies(&s.dev.b, &s.dev.c, dk, dv) != 1;
    bad += kvcal_kv_dequantize_ref(&s.host.b, &s.host.c, KVCAL_GRANULARITY_HEAD,
                                   s.host.k_scale, s.host.v_scale, hk, hv, out) != KVCAL_OK;
    bad += kvcal_kv_dequantize_launch(&s.dev.b, &s.dev.c, KVCAL_GRANULARITY_HEAD,
                                      s.dev.k_scale, s.dev.v_scale, dk, dv, out,
                                      NULL) != KVCAL_OK;
    host_copy(gk, dk, bytes);
    host_copy(gv, dv, bytes);
    for (size_t i = 0; i < count; i++)
        bad += !same_value(hk, gk, i, out) + !same_value(hv, gv, i, out);
    report(fast ? "fast dequantize" : "dequantize", c, bad);
    cudaFree(dk), cudaFree(dv);
    free(hk), free(hv), free(gk), free(gv);
    qsetup_free(&s);
    return bad;
}

static void dequantize_launch_matches_ref_in_every_out_dtype(void)
{
    static const int Ds[] = {72, 80, 128};
    int failed = 0;
    for (int di = 0; di < 3; di++)
        for (int od = 0; od < 3; od++)
            for (int token_scales = 0; token_scales < 2; token_scales++) {
                qcase c = {989,
                           8,
                           Ds[di],
                           di == 1 ? 5 : 16,
                           (kvcal_cache_layout)(od == 1),
                           KVCAL_DTYPE_BF16,
                           0};
                failed += dequantize_mismatches(c, token_scales, (kvcal_dtype)od, 0) != 0;
            }
    CU_ASSERT_EQUAL(failed, 0);
}

/* The fast dequantization kernel (FAST_T tokens, head_dim 64 / 128 / 256,
 * both layouts, block_size 16 and 5, every out dtype, per (token, head) and
 * static per-head scales, padding and out-of-range slots whose rows stay
 * untouched): every case must reach it and match the reference. */
static void dequantize_fast_kernel_matches_ref_on_large_odd_batches(void)
{
    static const int Ds[] = {64, 128, 256};
    int failed = 0, n = 0;
    for (int di = 0; di < 3; di++)
        for (int od = 0; od < 3; od++, n++) {
            qcase c = {FAST_T,
                       n % 3 == 1 ? 3 : 8,
                       Ds[di],
                       n % 4 == 2 ? 5 : 16,
                       (kvcal_cache_layout)(n % 3 == 0),
                       KVCAL_DTYPE_BF16,
                       0};
            failed += dequantize_mismatches(c, n % 2, (kvcal_dtype)od, 1) != 0;
        }
    CU_ASSERT_EQUAL(failed, 0);
}

static void launches_reject_bad_arguments_with_a_message(void)
{
    qcase c = {19, 8, 128, 16, KVCAL_CACHE_NHD, KVCAL_DTYPE_BF16, 0};
    qsetup s;
    qsetup_make(&s, c, 0);
    CU_ASSERT_EQUAL(kvcal_kv_quantize_dynamic_launch(&s.dev.b, &s.dev.c, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(kvcal_last_error(), "kvcal_kv_quantize_dynamic_launch"));
    CU_ASSERT_EQUAL(kvcal_kv_quantize_static_launch(&s.dev.b, &s.dev.c,
                                                    KVCAL_GRANULARITY_HEAD, NULL,
                                                    s.dev.v_scale, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(qsetup_diff(&s), 0);
    qsetup_free(&s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(device_e4m3_matches_core_fp8_on_all_halves_bf16_and_ties),
    KVCAL_TEST(static_tensor_launch_matches_ref_bytes),
    KVCAL_TEST(static_head_launch_matches_ref_bytes_and_records_scales),
    KVCAL_TEST(dynamic_launch_matches_ref_bytes_and_scales),
    KVCAL_TEST(fast_kernel_matches_ref_on_large_odd_batches),
    KVCAL_TEST(fast_kernel_leaves_other_shapes_to_the_generic_kernel),
    KVCAL_TEST(scaler_launch_matches_ref_over_prefill_and_decode),
    KVCAL_TEST(scaler_launch_matches_ref_on_odd_shapes),
    KVCAL_TEST(scaler_fast_steps_match_ref_when_scales_grow_and_when_settled),
    KVCAL_TEST(dequantize_launch_matches_ref_in_every_out_dtype),
    KVCAL_TEST(dequantize_fast_kernel_matches_ref_on_large_odd_batches),
    KVCAL_TEST(launches_reject_bad_arguments_with_a_message),
    CU_TEST_INFO_NULL,
};
#else
/* Built without CUDA: the suite has nothing to run and reports itself skipped. */
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(kvquant_cuda, KVCAL_NEEDS_GPU, tests)
