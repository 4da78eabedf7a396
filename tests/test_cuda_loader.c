/* tests/test_cuda_loader.c: the cuda backend's weight loader
 * (calib/loader_cuda.h) against the host conversion it stands for
 * (kvcal_tensor_view_to_f32, then kvcal_bf16_from_float): bf16 weights
 * stored transposed (transformers' (in, out) experts of gpt-oss, gate and
 * up interleaved) go to the device as they lie and are transposed there
 * (kvcal_weight_transpose_launch); the result must equal the host's bit for
 * bit, NaNs made quiet as the host makes them, on bands off every tile and
 * through pieces smaller than a stored row; MLA's kv_b_proj with each
 * head's V rows first. In a build without CUDA the
 * suite holds no tests; without a device it is reported skipped. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "calib/arch.h"
#include "calib/loader_cuda.h"
#include "calib/model.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/weight_transpose.h"

// --- the kernel, band by band -------------------------------------------------------

/* The host's logical (rows, cols) weight of a transposed view, as bf16. */
static kvcal_bf16 *host_converted(const kvcal_tensor_view *v)
{
    float *f = malloc((size_t)v->numel * sizeof *f);
    kvcal_bf16 *out = malloc((size_t)v->numel * sizeof *out);
    CU_ASSERT_FATAL(f && out);
    CU_ASSERT_EQUAL_FATAL(kvcal_tensor_view_to_f32(v, 0, v->numel, f), KVCAL_OK);
    for (int64_t i = 0; i < v->numel; i++)
        out[i] = kvcal_bf16_from_float(f[i]);
    free(f);
    return out;
}

/* Stored (C, R) random bf16 values with a signalling NaN, a quiet one with
 * a payload and both infinities among them, transposed on the device in
 * bands of (bc, bs) (each copied from the host as the loader copies it),
 * against the host conversion. */
static void check_bands(int64_t C, int64_t R, int interleaved, int64_t bc, int64_t bs)
{
    const int64_t n = C * R;
    kvcal_bf16 *stored = malloc((size_t)n * sizeof *stored),
               *band = malloc((size_t)(bc * bs) * sizeof *band),
               *got = malloc((size_t)n * sizeof *got);
    CU_ASSERT_FATAL(stored && band && got);
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(C * 131 + R);
    for (int64_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        stored[i] = (kvcal_bf16)(rng >> 48);
    }
    stored[0] = 0x7f81u;     /* a signalling NaN: quieted */
    stored[n / 3] = 0xffc5u; /* a quiet NaN with a payload: kept */
    stored[n / 2] = 0x7f80u; /* +inf */
    stored[n - 1] = 0xff80u; /* -inf */
    const kvcal_tensor_view v = {.data = stored,
                                 .dtype = KVCAL_DTYPE_BF16,
                                 .numel = n,
                                 .layout = KVCAL_PART_TRANSPOSED |
                                           (interleaved ? KVCAL_PART_INTERLEAVED : 0),
                                 .rows = R,
                                 .cols = C};
    kvcal_bf16 *want = host_converted(&v);
    kvcal_bf16 *d_dst = NULL, *d_band = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_dst, (size_t)n * sizeof *d_dst),
                          cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(
        cudaMalloc((void **)&d_band, (size_t)(bc * bs) * sizeof *d_band), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemset(d_dst, 0xff, (size_t)n * sizeof *d_dst), cudaSuccess);
    for (int64_t c0 = 0; c0 < C; c0 += bc)
        for (int64_t s0 = 0; s0 < R; s0 += bs) {
            const int64_t nc = C - c0 < bc ? C - c0 : bc, ns = R - s0 < bs ? R - s0 : bs;
            for (int64_t c = 0; c < nc; c++)
                memcpy(band + c * ns, stored + (c0 + c) * R + s0,
                       (size_t)ns * sizeof *band);
            CU_ASSERT_EQUAL(cudaMemcpy(d_band, band, (size_t)(nc * ns) * sizeof *band,
                                       cudaMemcpyHostToDevice),
                            cudaSuccess);
            CU_ASSERT_EQUAL(kvcal_weight_transpose_launch(d_dst, C, d_band, nc, ns, c0,
                                                          s0, interleaved ? R / 2 : 0, 0),
                            KVCAL_OK);
        }
    CU_ASSERT_EQUAL(
        cudaMemcpy(got, d_dst, (size_t)n * sizeof *got, cudaMemcpyDeviceToHost),
        cudaSuccess);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++)
        off += got[i] != want[i];
    if (off)
        fprintf(stderr, "\n(%lld, %lld)%s in bands of (%lld, %lld): %lld values off\n",
                (long long)C, (long long)R, interleaved ? " interleaved" : "",
                (long long)bc, (long long)bs, (long long)off);
    CU_ASSERT_EQUAL(off, 0);
    cudaFree(d_dst);
    cudaFree(d_band);
    free(want);
    free(stored);
    free(band);
    free(got);
}

static void weight_transpose_matches_host_conversion_on_bands_off_the_tile(void)
{
    check_bands(37, 98, 1, 37, 98);  /* one band, interleaved rows */
    check_bands(37, 98, 1, 5, 19);   /* bands cut inside stored rows */
    check_bands(64, 64, 1, 7, 64);   /* whole stored rows, 7 at a time */
    check_bands(989, 45, 0, 33, 45); /* not interleaved, tails of both tiles */
    check_bands(1, 19, 0, 1, 19);    /* one stored row */
    check_bands(19, 1, 0, 19, 1);    /* a column */
}

// --- the loader -----------------------------------------------------------------

#define ALIGN 256

/* Every weight of model d one after another, 256-byte aligned, none FP8,
 * gate/up as the model holds it. */
static void plain_layout(const kvcal_model_desc *d, kvcal_cuda_layer_layout *lay)
{
    memset(lay, 0, sizeof *lay);
    size_t off = 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        long long rows, cols;
        kvcal_model_weight_shape(d, w, &rows, &cols);
        lay->off[w] = off;
        lay->elems[w] = (size_t)rows * (size_t)(cols ? cols : 1);
        off += (lay->elems[w] * sizeof(kvcal_bf16) + ALIGN - 1) / ALIGN * ALIGN;
    }
    lay->bytes = off;
}

/* MLA's kv_b_proj w (heads of [no-RoPE; V] rows) with each head's rows as
 * [V; no-RoPE], in place. */
static void kv_b_v_first(const kvcal_model_desc *d, kvcal_bf16 *w)
{
    const size_t cols = (size_t)d->kv_lora_rank,
                 nope = (size_t)d->qk_nope_head_dim * cols,
                 vh = (size_t)d->v_head_dim * cols;
    kvcal_bf16 *head = malloc((nope + vh) * sizeof *head);
    CU_ASSERT_FATAL(head != NULL);
    for (int h = 0; h < d->num_heads; h++) {
        kvcal_bf16 *at = w + (size_t)h * (nope + vh);
        memcpy(head, at + nope, vh * sizeof *head);
        memcpy(head + vh, at, nope * sizeof *head);
        memcpy(at, head, (nope + vh) * sizeof *head);
    }
    free(head);
}

/* The layout's slot of layer l as the host conversion fills it (the bytes
 * no weight holds left as they are in slot). */
static void host_slot(const kvcal_model_t *m, const kvcal_cuda_layer_layout *lay, int l,
                      unsigned char *slot)
{
    const kvcal_model_desc *d = kvcal_model_describe(m);
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        size_t off = lay->off[w];
        for (int e = 0; lay->elems[w] && e < kvcal_model_weight_copies(d, w); e++) {
            kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
            int n = 0;
            CU_ASSERT_EQUAL_FATAL(kvcal_model_weight_parts(m, l, w, e, part, &n),
                                  KVCAL_OK);
            for (int i = 0; i < n; i++) {
                kvcal_bf16 *v = host_converted(&part[i]);
                if (w == KVCAL_W_KV_B && lay->kv_b_v_first)
                    kv_b_v_first(d, v);
                memcpy(slot + off, v, (size_t)part[i].numel * sizeof *v);
                off += (size_t)part[i].numel * sizeof *v;
                free(v);
            }
        }
    }
}

/* Golden model `name`'s layers through a loader with pieces of
 * piece_bytes (kv_b_v_first: the layout's), each slot against the host
 * conversion, byte for byte where a weight lies. Returns the transposed
 * parts' values compared. */
static int64_t check_loader(const char *name, size_t piece_bytes, int kv_b_v_first)
{
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/golden/%s", name);
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &m), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    kvcal_cuda_layer_layout lay;
    plain_layout(d, &lay);
    lay.kv_b_v_first = kv_b_v_first;
    const int L = d->num_layers;
    unsigned char *slots = NULL, *got = malloc(lay.bytes), *want = malloc(lay.bytes);
    CU_ASSERT_FATAL(got && want);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&slots, (size_t)L * lay.bytes),
                          cudaSuccess);
    kvcal_cuda_loader_t *ld = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_cuda_loader_create(m, &lay, slots, L, 3, piece_bytes, &ld), KVCAL_OK);
    int64_t transposed = 0;
    for (int l = 0; l < L; l++) {
        unsigned char *w = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_cuda_loader_use(ld, l, 0, &w), KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(cudaMemcpy(got, w, lay.bytes, cudaMemcpyDeviceToHost),
                              cudaSuccess);
        memcpy(want, got, lay.bytes);
        host_slot(m, &lay, l, want);
        int64_t off = 0;
        for (size_t i = 0; i < lay.bytes; i++)
            off += got[i] != want[i];
        if (off)
            fprintf(stderr, "\n%s, pieces of %zu bytes: layer %d: %lld bytes off\n", name,
                    piece_bytes, l, (long long)off);
        CU_ASSERT_EQUAL(off, 0);
        for (int wi = 0; wi < KVCAL_W_COUNT; wi++) {
            kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
            int n = 0;
            if (lay.elems[wi] && !kvcal_model_weight_parts(m, l, wi, 0, part, &n))
                for (int i = 0; i < n; i++)
                    if (part[i].layout & KVCAL_PART_TRANSPOSED)
                        transposed += part[i].numel * kvcal_model_weight_copies(d, wi);
        }
    }
    kvcal_cuda_loader_destroy(ld);
    cudaFree(slots);
    free(got);
    free(want);
    kvcal_model_close(m);
    return transposed;
}

static void cuda_loader_transposes_gpt_oss_experts_as_the_host_converts_them(void)
{
    /* pieces: the default, 7 stored gate/up rows and a bit, less than one
     * stored row (bands inside rows) */
    const size_t pieces[] = {0, 1000, 100};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++)
        CU_ASSERT(check_loader("gpt_oss_sinks_swa8_e8_top3_bf16", pieces[i], 0) > 0);
}

/* MLA's kv_b_proj with each head's V rows first (the CUDA runner's one
 * batched GEMM a head), through pieces off its heads' rows. */
static void cuda_loader_puts_kv_b_heads_v_first(void)
{
    const size_t pieces[] = {0, 1000, 100};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++)
        check_loader("deepseek_v2_mla_grouped_softmax_bf16", pieces[i], 1);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(weight_transpose_matches_host_conversion_on_bands_off_the_tile),
    KVCAL_TEST(cuda_loader_transposes_gpt_oss_experts_as_the_host_converts_them),
    KVCAL_TEST(cuda_loader_puts_kv_b_heads_v_first),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(cuda_loader, KVCAL_NEEDS_GPU, tests)
