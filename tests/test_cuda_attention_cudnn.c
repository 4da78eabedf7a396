/* tests/test_cuda_attention_cudnn.c: kvcal_attention_run (cuDNN's fused flash
 * attention, kvcal's kernel where cuDNN cannot run a shape) beyond its rows
 * in tests/test_backend_ops.c (odd shapes against the CPU reference, which
 * implementation takes which): kvcal's kernel forced by the option, the
 * arguments it refuses as kvcal's kernel does, kvcal_attention_run_qk_v
 * (MLA's q/k heads wider than its v heads, K and V read inside wider heads)
 * against kvcal_attention_vdim_ref, kvcal_attention_run_sinks (gpt-oss's
 * sinks: cuDNN's statistics, then each row's share) against
 * kvcal_attention_sinks_ref, and the CUDA runner on golden models (MLA's
 * among them) with cuDNN against kvcal's own kernel. Where cuDNN is not
 * installed every call takes kvcal's kernel and the tests check that path
 * (the log says so); in a build without CUDA the suite holds no tests,
 * without a device it is reported skipped. */
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
#include "kernels/cuda/attention_cudnn.h"
#include "observers/stats.h"

/* The bounds of kvcal's own kernel (tests/test_backend_ops.c): P is rounded to
 * bf16 for the P V product (2^-9 relative per weight) and the output once
 * more; outputs are averages of values in [-1, 1). */
#define ATT_ATOL 1e-2
#define ATT_RTOL 2e-2

// --- helpers -------------------------------------------------------------------

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

/* Runs kvcal_attention_run on a fused QKV buffer (row stride
 * (heads + 2 kv_heads) hd, output row stride heads * hd + out_pad) and checks
 * every sequence against kvcal_attention_ref and that the output's padding
 * columns stay untouched; returns the implementation that ran. */
static kvcal_attention_impl check_attention(kvcal_attention_t *a, int batch, int seq,
                                            int heads, int kv_heads, int hd, int out_pad)
{
    const int64_t tokens = (int64_t)batch * seq;
    const int64_t stride = (int64_t)(heads + 2 * kv_heads) * hd;
    const int64_t out_stride = (int64_t)heads * hd + out_pad;
    float *qkv = kvcal_test_rand_bf16(&rng_state, tokens * stride, -1.0f, 1.0f);
    kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(qkv, tokens * stride), *d_out = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_out, (size_t)(tokens * out_stride) * 2),
                          cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)(tokens * out_stride) * 2),
                    cudaSuccess);
    kvcal_attention_impl impl = KVCAL_ATTENTION_IMPL_KVCAL;
    const kvcal_status st =
        kvcal_attention_run(a, d_out, out_stride, d_qkv, d_qkv + (int64_t)heads * hd,
                            d_qkv + (int64_t)(heads + kv_heads) * hd, stride, batch, seq,
                            heads, kv_heads, hd, 1.0f / sqrtf((float)hd), 0, &impl);
    if (st)
        fprintf(stderr, "\n%s\n", kvcal_last_error());
    CU_ASSERT_EQUAL(st, KVCAL_OK);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    float *got = kvcal_test_dev_download_bf16(d_out, tokens * out_stride);
    int64_t gap_touched = 0;
    const int64_t bad =
        kvcal_test_attention_far(qkv, got, batch, seq, heads, kv_heads, hd, out_stride,
                                 NULL, ATT_ATOL, ATT_RTOL, &gap_touched);
    printf("(%d x %d, %d/%d heads, hd %d: %s%s) ", batch, seq, heads, kv_heads, hd,
           impl == KVCAL_ATTENTION_IMPL_CUDNN ? "cuDNN" : "kvcal",
           bad ? ", MISMATCH" : "");
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(gap_touched, 0);
    cudaFree(d_qkv);
    cudaFree(d_out);
    free(qkv);
    free(got);
    return impl;
}

// --- the choice of implementation ----------------------------------------------

static void attention_forced_to_kvcal_kernel_by_option(void)
{
    kvcal_attention_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(1, &a), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_attention_cudnn_version(a), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_attention_note(a), "kvcal's kernel asked for"));
    CU_ASSERT_EQUAL(check_attention(a, 2, 300, 8, 2, 128, 8), KVCAL_ATTENTION_IMPL_KVCAL);
    kvcal_attention_destroy(a);
}

/* On a shape cuDNN takes (Llama's), arguments kvcal_attention_launch rejects
 * (a NULL pointer, a scale of 0 or NaN, an output row shorter than heads x
 * head_dim, a negative row stride) are KVCAL_ERR_INVALID_ARG too, and
 * nothing runs on the device. */
static void attention_run_rejects_what_kvcal_kernel_rejects(void)
{
    enum { BATCH = 2, SEQ = 64, HEADS = 8, KV_HEADS = 2, HD = 128 };
    const int64_t stride = (int64_t)(HEADS + 2 * KV_HEADS) * HD, out_stride = HEADS * HD;
    const float scale = 1.0f / sqrtf((float)HD);
    kvcal_attention_t *a = NULL;
    kvcal_bf16 *d_qkv = NULL, *d_out = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(0, &a), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_qkv, (size_t)(BATCH * SEQ * stride) * 2),
                          cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(
        cudaMalloc((void **)&d_out, (size_t)(BATCH * SEQ * out_stride) * 2), cudaSuccess);
    const kvcal_bf16 *k = d_qkv + HEADS * HD, *v = d_qkv + (HEADS + KV_HEADS) * HD;
    const struct {
        kvcal_bf16 *out;
        const kvcal_bf16 *q;
        int64_t out_stride, stride;
        float scale;
    } bad[] = {
        {d_out, NULL, out_stride, stride, scale},
        {NULL, d_qkv, out_stride, stride, scale},
        {d_out, d_qkv, out_stride - 8, stride, scale},
        {d_out, d_qkv, out_stride, -stride, scale},
        {d_out, d_qkv, out_stride, stride, 0.0f},
        {d_out, d_qkv, out_stride, stride, NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(kvcal_attention_run(a, bad[i].out, bad[i].out_stride, bad[i].q, k,
                                            v, bad[i].stride, BATCH, SEQ, HEADS, KV_HEADS,
                                            HD, bad[i].scale, 0, NULL),
                        KVCAL_ERR_INVALID_ARG);
        CU_ASSERT(kvcal_test_error_has("attention"));
    }
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d_qkv);
    cudaFree(d_out);
    kvcal_attention_destroy(a);
}

// --- q/k heads wider than v heads (MLA) ---------------------------------------

/* Where a call's Q, K and V lie: in host buffer `in` (0: the first, 1:
 * the second), from value off of a row of `stride` values, heads `head`
 * values apart. */
typedef struct {
    int in;
    int64_t off, stride, head;
} qkv_place;

/* The two layouts of check_qk_v, for kv heads of v_head values holding V's
 * last vd: QK_APART, q and k in one buffer (rows of (heads + kv_heads) qk)
 * and V in another (as inside kv_b_proj's output); KV_HEADS, q in one
 * buffer and each kv head's [V | K] in the other, heads v_head + qk apart
 * (the runner's MLA heads: V first, then K, kv_b_proj writing both). */
enum { QK_APART, KV_HEADS };

/* kvcal_attention_run_qk_v on batch sequences of seq tokens in `layout`,
 * the output rows heads * vd + 8 long. Where cuDNN ran it, every output
 * within the bounds of kvcal_attention_vdim_ref and the padding untouched;
 * where it did not, nothing written. Returns *taken. */
static int check_qk_v(kvcal_attention_t *a, int layout, int batch, int seq, int heads,
                      int kv_heads, int qk, int vd, int v_head)
{
    const int64_t tokens = (int64_t)batch * seq, out_stride = (int64_t)heads * vd + 8;
    qkv_place q, k, v;
    int64_t row[2];
    if (layout == QK_APART) {
        row[0] = (int64_t)(heads + kv_heads) * qk, row[1] = (int64_t)kv_heads * v_head;
        q = (qkv_place){0, 0, row[0], qk};
        k = (qkv_place){0, (int64_t)heads * qk, row[0], qk};
        v = (qkv_place){1, v_head - vd, row[1], v_head};
    } else {
        const int64_t kv_head = v_head + qk;
        row[0] = (int64_t)heads * qk, row[1] = kv_heads * kv_head;
        q = (qkv_place){0, 0, row[0], qk};
        k = (qkv_place){1, v_head, row[1], kv_head};
        v = (qkv_place){1, v_head - vd, row[1], kv_head};
    }
    const float scale = 1.0f / sqrtf((float)qk);
    float *x[2];
    kvcal_bf16 *d_x[2], *d_out = NULL;
    for (int i = 0; i < 2; i++) {
        x[i] = kvcal_test_rand_bf16(&rng_state, tokens * row[i], -1.0f, 1.0f);
        d_x[i] = kvcal_test_dev_upload_bf16(x[i], tokens * row[i]);
    }
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_out, (size_t)(tokens * out_stride) * 2),
                          cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)(tokens * out_stride) * 2),
                    cudaSuccess);
    int taken = -1;
    const kvcal_status st = kvcal_attention_run_qk_v(
        a, d_out, out_stride, d_x[q.in] + q.off, q.stride, d_x[k.in] + k.off, k.stride,
        k.head, d_x[v.in] + v.off, v.stride, v.head, batch, seq, heads, kv_heads, qk, vd,
        scale, 0, &taken);
    if (st)
        fprintf(stderr, "\n%s\n", kvcal_last_error());
    CU_ASSERT_EQUAL(st, KVCAL_OK);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    float *got = kvcal_test_dev_download_bf16(d_out, tokens * out_stride);
    /* one sequence's q (seq, heads, qk), k (seq, kv_heads, qk), v (seq,
     * kv_heads, vd) and reference (seq, heads, vd) */
    float *qs = malloc((size_t)seq * heads * qk * sizeof *qs),
          *ks = malloc((size_t)seq * kv_heads * qk * sizeof *ks),
          *vs = malloc((size_t)seq * kv_heads * vd * sizeof *vs),
          *ref = malloc((size_t)seq * heads * vd * sizeof *ref);
    CU_ASSERT_FATAL(qs && ks && vs && ref);
    int64_t far = 0, written = 0, gap_touched = 0;
    for (int b = 0; b < batch; b++) {
        for (int t = 0; t < seq; t++) {
            const int64_t r = (int64_t)b * seq + t;
            for (int h = 0; h < heads; h++)
                memcpy(qs + ((int64_t)t * heads + h) * qk,
                       x[q.in] + r * q.stride + q.off + h * q.head,
                       (size_t)qk * sizeof *qs);
            for (int h = 0; h < kv_heads; h++) {
                memcpy(ks + ((int64_t)t * kv_heads + h) * qk,
                       x[k.in] + r * k.stride + k.off + h * k.head,
                       (size_t)qk * sizeof *ks);
                memcpy(vs + ((int64_t)t * kv_heads + h) * vd,
                       x[v.in] + r * v.stride + v.off + h * v.head,
                       (size_t)vd * sizeof *vs);
            }
        }
        kvcal_attention_vdim_ref(ref, qs, ks, vs, seq, heads, kv_heads, qk, vd, scale, 0,
                                 0.0f);
        for (int t = 0; t < seq; t++) {
            const float *g = got + ((int64_t)b * seq + t) * out_stride;
            const float *r = ref + (int64_t)t * heads * vd;
            for (int i = 0; i < heads * vd; i++) {
                far += !(fabs((double)g[i] - (double)r[i]) <=
                         ATT_ATOL + fabs((double)r[i]) * ATT_RTOL);
                written += !isnan(g[i]);
            }
            for (int64_t i = (int64_t)heads * vd; i < out_stride; i++)
                gap_touched += !isnan(g[i]);
        }
    }
    printf("(%s, %d x %d, %d/%d heads, q/k %d, v %d of %d: %s%s) ",
           layout == QK_APART ? "q/k apart" : "[V | K] heads", batch, seq, heads,
           kv_heads, qk, vd, v_head, taken ? "cuDNN" : "not taken",
           taken && far ? ", MISMATCH" : "");
    CU_ASSERT_EQUAL(taken ? far : written, 0);
    CU_ASSERT_EQUAL(gap_touched, 0);
    free(qs);
    free(ks);
    free(vs);
    free(ref);
    free(got);
    for (int i = 0; i < 2; i++) {
        free(x[i]);
        cudaFree(d_x[i]);
    }
    cudaFree(d_out);
    return taken;
}

/* 1 where cuDNN must take the shapes its support matrix lists: cuDNN 9
 * loaded, on a Hopper GPU. */
static int cudnn_must_take(const kvcal_attention_t *a)
{
    int device = 0, major = 0;
    CU_ASSERT_EQUAL(cudaGetDevice(&device), cudaSuccess);
    CU_ASSERT_EQUAL(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        cudaSuccess);
    return kvcal_attention_cudnn_version(a) && major == 9;
}

/* DeepSeek-V2/V3's heads (q/k 192, v 128 read inside kv_b_proj's heads of
 * 256, or beside K in heads of [V | K]), MHA and GQA, sequences off the
 * tiles: on a Hopper GPU with cuDNN 9 loaded cuDNN runs them (its support
 * matrix lists d_qk 192 / d_v 128 there); a V head off 8 is left to the
 * caller; a small MLA shape (the golden V3 model's 48 / 32) checked wherever
 * cuDNN takes it. */
static void attention_qk_v_runs_mla_heads_on_cudnn(void)
{
    kvcal_attention_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(0, &a), KVCAL_OK);
    const int must = cudnn_must_take(a);
    for (int layout = QK_APART; layout <= KV_HEADS; layout++) {
        const int mha = check_qk_v(a, layout, 2, 150, 4, 4, 192, 128, 256);
        if (must && !mha)
            fprintf(stderr, "\n%s\n", kvcal_attention_note(a));
        CU_ASSERT(mha || !must);
        const int gqa = check_qk_v(a, layout, 1, 131, 8, 2, 192, 128, 256);
        if (must && !gqa)
            fprintf(stderr, "\n%s\n", kvcal_attention_note(a));
        CU_ASSERT(gqa || !must);
        check_qk_v(a, layout, 2, 37, 4, 4, 48, 32, 64);
        CU_ASSERT_EQUAL(check_qk_v(a, layout, 2, 37, 4, 4, 40, 20, 44), 0);
    }
    kvcal_attention_destroy(a);
}

/* gpt-oss's sinks on cuDNN (its statistics, then each row's share of the
 * sink): against kvcal_attention_sinks_ref, sinks from well below to above
 * the rows' log sums. Wherever cuDNN takes a call it must match; where it
 * does not (cuDNN absent) nothing may be written, the caller's kernel
 * running it; with cuDNN 9 on a Hopper GPU every call must be taken. Bad
 * arguments refused. */
static void attention_sinks_run_on_cudnn_with_the_sinks_share(void)
{
    kvcal_attention_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(0, &a), KVCAL_OK);
    const int must = cudnn_must_take(a);
    static const struct {
        int batch, seq, heads, kv_heads, hd, out_pad;
    } cases[] = {{2, 150, 8, 2, 64, 8},
                 {1, 300, 4, 4, 128, 0},
                 {3, 17, 6, 1, 64, 0},
                 {1, 200, 4, 1, 256, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int batch = cases[c].batch, seq = cases[c].seq, heads = cases[c].heads,
                  kv_heads = cases[c].kv_heads, hd = cases[c].hd;
        const int64_t tokens = (int64_t)batch * seq;
        const int64_t stride = (int64_t)(heads + 2 * kv_heads) * hd;
        const int64_t out_stride = (int64_t)heads * hd + cases[c].out_pad;
        float *qkv = kvcal_test_rand_bf16(&rng_state, tokens * stride, -1.0f, 1.0f);
        float *sinks = kvcal_test_rand_bf16(&rng_state, heads, -3.0f, 6.0f);
        kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(qkv, tokens * stride);
        kvcal_bf16 *d_sinks = kvcal_test_dev_upload_bf16(sinks, heads);
        kvcal_bf16 *d_out = NULL;
        float *d_lse = NULL;
        CU_ASSERT_EQUAL_FATAL(
            cudaMalloc((void **)&d_out, (size_t)(tokens * out_stride) * 2), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(
            cudaMalloc((void **)&d_lse, (size_t)(tokens * heads) * sizeof(float)),
            cudaSuccess);
        CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)(tokens * out_stride) * 2),
                        cudaSuccess);
        int taken = -1;
        CU_ASSERT_EQUAL(kvcal_attention_run_sinks(
                            a, d_out, out_stride, d_qkv, d_qkv + (int64_t)heads * hd,
                            d_qkv + (int64_t)(heads + kv_heads) * hd, stride, batch, seq,
                            heads, kv_heads, hd, 1.0f / sqrtf((float)hd), d_sinks, d_lse,
                            0, &taken),
                        KVCAL_OK);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        float *got = kvcal_test_dev_download_bf16(d_out, tokens * out_stride);
        int64_t gap = 0, untouched = 0;
        const int64_t far =
            taken ? kvcal_test_attention_far(qkv, got, batch, seq, heads, kv_heads, hd,
                                             out_stride, sinks, ATT_ATOL, ATT_RTOL, &gap)
                  : 0;
        for (int64_t i = 0; !taken && i < tokens * out_stride; i++)
            untouched += isnan(got[i]);
        printf("(%d x %d, %d/%d heads, hd %d: %s%s) ", batch, seq, heads, kv_heads, hd,
               taken ? "cuDNN" : "not taken", far ? ", MISMATCH" : "");
        if (!taken)
            printf("(%s) ", kvcal_attention_note(a));
        CU_ASSERT_EQUAL(far, 0);
        CU_ASSERT_EQUAL(gap, 0);
        CU_ASSERT(taken || untouched == tokens * out_stride);
        if (must)
            CU_ASSERT_EQUAL(taken, 1);
        free(qkv);
        free(sinks);
        free(got);
        cudaFree(d_qkv);
        cudaFree(d_sinks);
        cudaFree(d_out);
        cudaFree(d_lse);
    }
    int taken = -1;
    kvcal_bf16 *p = (kvcal_bf16 *)(uintptr_t)256;
    CU_ASSERT_EQUAL(kvcal_attention_run_sinks(a, p, 64, p, p, p, 64, 1, 8, 1, 1, 64,
                                              0.125f, p, NULL, 0, &taken),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_attention_run_sinks(a, p, 64, p, p, p, 64, 1, 8, 1, 1, 64,
                                              0.125f, NULL, (float *)p, 0, &taken),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(taken, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "sinks"));
    kvcal_attention_destroy(a);
}

/* Before any device work: a V head wider than the q/k heads, q/k heads past
 * 256, a NULL pointer, a scale of 0, an output row shorter than its heads,
 * K's heads closer together than their values. */
static void attention_qk_v_rejects_bad_arguments(void)
{
    kvcal_attention_t *a = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(0, &a), KVCAL_OK);
    kvcal_bf16 *p = (kvcal_bf16 *)256;
    const struct {
        kvcal_bf16 *q;
        int qk, vd;
        float scale;
        int64_t out_stride, k_head;
    } bad[] = {
        {p, 128, 192, 0.1f, 4 * 192, 264},     {p, 264, 128, 0.1f, 4 * 128, 264},
        {NULL, 192, 128, 0.1f, 4 * 128, 264},  {p, 192, 128, 0.0f, 4 * 128, 264},
        {p, 192, 128, 0.1f, 4 * 128 - 8, 264}, {p, 192, 128, 0.1f, 4 * 128, 128},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int taken = -1;
        CU_ASSERT_EQUAL(kvcal_attention_run_qk_v(a, p, bad[i].out_stride, bad[i].q,
                                                 4 * 264, p, 4 * 264, bad[i].k_head, p,
                                                 4 * 256, 256, 1, 16, 4, 4, bad[i].qk,
                                                 bad[i].vd, bad[i].scale, 0, &taken),
                        KVCAL_ERR_INVALID_ARG);
        CU_ASSERT(kvcal_test_error_has("attention"));
        CU_ASSERT_EQUAL(taken, 0);
    }
    kvcal_attention_destroy(a);
}

// --- the CUDA runner: cuDNN against kvcal's kernel -------------------------------

/* Per-layer per-head K/V absmax of one golden model's samples (one batch of
 * 64-token rows) through the CUDA runner; *stats_out is the caller's. */
static void run_golden(const char *name, kvcal_attention_choice attention,
                       kvcal_stats_t **stats_out)
{
    kvcal_backend_options o;
    memset(&o, 0, sizeof o);
    o.attention = attention;
    cJSON_Delete(kvcal_test_cuda_run_golden(name, &o, stats_out, NULL, NULL));
}

/* Both runs round to bf16 at the same places except inside attention, so
 * per-head absmax agree within the CUDA runner's bf16 bound against fp32
 * transformers (tests/test_cuda_backend.c); layer 0's K and V come before any
 * attention and must be equal. */
#define RUNNER_RTOL 3e-2

static void check_runner_cudnn_against_kvcal(const char *name)
{
    kvcal_stats_t *with_cudnn = NULL, *with_kvcal = NULL;
    run_golden(name, KVCAL_ATTENTION_AUTO, &with_cudnn);
    run_golden(name, KVCAL_ATTENTION_OWN, &with_kvcal);
    double worst = 0.0;
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < with_cudnn->num_layers; l++)
            for (int h = 0; h < with_cudnn->num_kv_heads; h++) {
                const double a = kvcal_stats_head_absmax(with_cudnn, l, kv, h);
                const double b = kvcal_stats_head_absmax(with_kvcal, l, kv, h);
                const double rel = fabs(a - b) / fabs(b);
                worst = rel > worst || rel != rel ? rel : worst;
                if (l == 0)
                    CU_ASSERT_EQUAL(a, b);
            }
    printf("(%s: worst rel. difference %.2e) ", name, worst);
    CU_ASSERT(worst <= RUNNER_RTOL);
    kvcal_stats_destroy(with_cudnn);
    kvcal_stats_destroy(with_kvcal);
}

static void cuda_runner_cudnn_and_kvcal_attention_agree_on_golden_models(void)
{
    check_runner_cudnn_against_kvcal("qwen3_gqa_hd80_qknorm_bf16");
    check_runner_cudnn_against_kvcal("llama3_gqa_hd48_bf16");
    check_runner_cudnn_against_kvcal("mistral_mqa_fp16");
    /* MLA: V3's heads (48 / 32) on kvcal_attention_run_qk_v, V2's (40 / 20) V
     * padded to 40 as with kvcal's kernels */
    check_runner_cudnn_against_kvcal("deepseek_v3_mla_qlora_grouped_sigmoid_bf16");
    check_runner_cudnn_against_kvcal("deepseek_v2_mla_grouped_softmax_bf16");
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(attention_forced_to_kvcal_kernel_by_option),
    KVCAL_TEST(attention_run_rejects_what_kvcal_kernel_rejects),
    KVCAL_TEST(attention_qk_v_runs_mla_heads_on_cudnn),
    KVCAL_TEST(attention_qk_v_rejects_bad_arguments),
    KVCAL_TEST(attention_sinks_run_on_cudnn_with_the_sinks_share),
    KVCAL_TEST(cuda_runner_cudnn_and_kvcal_attention_agree_on_golden_models),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(cuda_attention_cudnn, KVCAL_NEEDS_GPU, tests)
