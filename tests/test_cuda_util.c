/* tests/test_cuda_util.c: see tests/test_cuda_util.h. */
#include "tests/test_cuda_util.h"

#ifdef KVCAL_WITH_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "calib/executor.h"
#include "io/json_file.h"
#include "kernels/cpu/ops.h"

float *kvcal_test_rand_bf16(uint64_t *rng, int64_t n, float lo, float hi)
{
    float *x = malloc((size_t)n * sizeof *x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    for (int64_t i = 0; i < n; i++) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        x[i] =
            kvcal_bf16_round(lo + (hi - lo) * (float)((*rng >> 40) * (1.0 / 16777216.0)));
    }
    return x;
}

kvcal_bf16 *kvcal_test_dev_upload_bf16(const float *x, int64_t n)
{
    kvcal_bf16 *h = malloc((size_t)n * sizeof *h), *d = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    for (int64_t i = 0; i < n; i++)
        h[i] = kvcal_bf16_from_float(x[i]);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d, (size_t)n * sizeof *d), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpy(d, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice),
                    cudaSuccess);
    free(h);
    return d;
}

float *kvcal_test_dev_download_bf16(const kvcal_bf16 *d, int64_t n)
{
    kvcal_bf16 *h = malloc((size_t)n * sizeof *h);
    float *x = malloc((size_t)n * sizeof *x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_EQUAL(cudaMemcpy(h, d, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost),
                    cudaSuccess);
    for (int64_t i = 0; i < n; i++)
        x[i] = kvcal_bf16_to_float(h[i]);
    free(h);
    return x;
}

int64_t kvcal_test_attention_far(const float *qkv, const float *out, int batch, int seq,
                                 int heads, int kv_heads, int hd, int64_t out_stride,
                                 const float *sinks, double atol, double rtol,
                                 int64_t *gap_touched)
{
    const int64_t stride = (int64_t)(heads + 2 * kv_heads) * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = malloc((size_t)seq * heads * hd * sizeof *q);     /* (seq, heads, hd) */
    float *k = malloc((size_t)seq * kv_heads * hd * sizeof *k);  /* (seq, kv_heads, hd) */
    float *v = malloc((size_t)seq * kv_heads * hd * sizeof *v);  /* (seq, kv_heads, hd) */
    float *ref = malloc((size_t)seq * heads * hd * sizeof *ref); /* (seq, heads, hd) */
    CU_ASSERT_FATAL(q && k && v && ref);
    int64_t far = 0;
    *gap_touched = 0;
    for (int b = 0; b < batch; b++) {
        for (int t = 0; t < seq; t++) {
            const float *row = qkv + ((int64_t)b * seq + t) * stride;
            memcpy(q + (int64_t)t * heads * hd, row, (size_t)heads * hd * sizeof *q);
            memcpy(k + (int64_t)t * kv_heads * hd, row + (int64_t)heads * hd,
                   (size_t)kv_heads * hd * sizeof *k);
            memcpy(v + (int64_t)t * kv_heads * hd, row + (int64_t)(heads + kv_heads) * hd,
                   (size_t)kv_heads * hd * sizeof *v);
        }
        if (sinks)
            kvcal_attention_sinks_ref(ref, q, k, v, seq, heads, kv_heads, hd, scale, 0, 0.0f,
                                      sinks);
        else
            kvcal_attention_ref(ref, q, k, v, seq, heads, kv_heads, hd, scale);
        for (int t = 0; t < seq; t++) {
            const float *g = out + ((int64_t)b * seq + t) * out_stride;
            const float *r = ref + (int64_t)t * heads * hd;
            for (int i = 0; i < heads * hd; i++)
                far += !(fabs((double)g[i] - (double)r[i]) <=
                         atol + fabs((double)r[i]) * rtol);
            for (int64_t i = (int64_t)heads * hd; i < out_stride; i++)
                *gap_touched += !isnan(g[i]);
        }
    }
    free(q);
    free(k);
    free(v);
    free(ref);
    return far;
}

cJSON *kvcal_test_cuda_run_golden(const char *name, const kvcal_backend_options *opt,
                                  kvcal_stats_t **stats, float **batch_absmax,
                                  int64_t *rows)
{
    char path[256];
    cJSON *root = NULL, *sample;
    kvcal_model_t *model = NULL;
    kvcal_exec_t *x = NULL;
    int32_t ids[4 * 64] = {0}, lengths[4];
    int batch = 0;
    int64_t valid = 0;
    snprintf(path, sizeof path, "tests/fixtures/golden/%s.json", name);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &root), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open(cJSON_GetObjectItem(root, "model")->valuestring, &model),
        KVCAL_OK);
    cJSON_ArrayForEach(sample, cJSON_GetObjectItem(root, "samples"))
    {
        int t = 0;
        cJSON *id;
        CU_ASSERT_FATAL(batch < 4 && cJSON_GetArraySize(sample) <= 64);
        cJSON_ArrayForEach(id, sample) ids[batch * 64 + t++] = id->valueint;
        lengths[batch++] = t;
        valid += t;
    }
    const kvcal_model_desc *d = kvcal_model_describe(model);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, stats), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_experts(*stats, d->num_experts), KVCAL_OK);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    if (opt)
        o.backend = *opt;
    o.device = KVCAL_DEVICE_CUDA;
    o.backend.max_batch = batch;
    o.backend.max_seq_len = 64;
    kvcal_status st = kvcal_exec_create(model, &o, &x);
    if (st)
        fprintf(stderr, "\n%s: %s\n", name, kvcal_last_error());
    CU_ASSERT_EQUAL_FATAL(st, KVCAL_OK);
    const kvcal_exec_samples s = {.ids = ids, .lengths = lengths, .num_samples = batch,
                                  .seq_len = 64, .batch = batch};
    st = kvcal_exec_calibrate(x, &s, *stats, 0.0);
    if (st)
        fprintf(stderr, "\n%s: %s\n", name, kvcal_last_error());
    CU_ASSERT_EQUAL(st, KVCAL_OK);
    if (batch_absmax) {
        const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
        *batch_absmax = malloc(2 * lh * sizeof **batch_absmax);
        CU_ASSERT_PTR_NOT_NULL_FATAL(*batch_absmax);
        for (size_t i = 0; i < lh; i++) {
            (*batch_absmax)[i] = (float)(*stats)->ema[KVCAL_K][i];
            (*batch_absmax)[lh + i] = (float)(*stats)->ema[KVCAL_V][i];
        }
    }
    if (rows)
        *rows = valid;
    kvcal_exec_destroy(x);
    kvcal_model_close(model);
    return root;
}
#endif
