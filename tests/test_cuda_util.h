/* tests/test_cuda_util.h: helpers shared by the CUDA test suites
 * (tests/test_backend_ops.c, tests/test_cuda_backend.c,
 * tests/test_cuda_attention_cudnn.c): random bf16 inputs, the attention
 * check against kvcal_attention_ref, and a golden model's samples through
 * the cuda backend. Only in a CUDA build; every helper fails the running
 * test (CU_ASSERT) on what it cannot do. */
#ifndef KVCAL_TESTS_TEST_CUDA_UTIL_H
#define KVCAL_TESTS_TEST_CUDA_UTIL_H

#ifdef KVCAL_WITH_CUDA
#include <stdint.h>

#include <cjson/cJSON.h>

#include "calib/backend.h"
#include "kernels/cuda/bf16.h"
#include "observers/stats.h"

/* n random values in [lo, hi), rounded to bf16 so that the CPU reference and
 * the kernel see the same numbers, from the xorshift state *rng (each suite
 * keeps its own). Caller frees. */
float *kvcal_test_rand_bf16(uint64_t *rng, int64_t n, float lo, float hi);

/* A device copy of x (n floats) as bf16; cudaFree it. */
kvcal_bf16 *kvcal_test_dev_upload_bf16(const float *x, int64_t n);

/* n bf16 values of device memory as floats; caller frees. */
float *kvcal_test_dev_download_bf16(const kvcal_bf16 *d, int64_t n);

/* Counts the outputs of a causal attention over a fused QKV buffer that lie
 * outside atol + |ref| * rtol of kvcal_attention_ref (kvcal_attention_sinks_ref
 * with sinks (heads) when not NULL; NaN counts), and in *gap_touched the
 * outputs' padding columns (out_stride past heads * hd) that are not NaN
 * (the caller fills the output with bf16 NaN first). qkv (batch * seq,
 * (heads + 2 kv_heads) hd) as given to the kernel; out (batch * seq,
 * out_stride) what it wrote; scale 1 / sqrt(hd). */
int64_t kvcal_test_attention_far(const float *qkv, const float *out, int batch, int seq,
                                 int heads, int kv_heads, int hd, int64_t out_stride,
                                 const float *sinks, double atol, double rtol,
                                 int64_t *gap_touched);

/* Golden fixture `name` (tests/fixtures/golden/<name>.json): its samples, at
 * most 4 of up to 64 tokens, as one padded batch calibrated through the
 * cuda backend with backend options opt (NULL: the defaults; its sizes are
 * the fixture's) into *stats (caller destroys: one batch, no EMA decay; a
 * mixture of experts' routing counts too).
 * *batch_absmax, when not NULL, gets the batch's per-head absmax (the
 * moving average of its one batch), (2, layers * kv_heads), K then V
 * (caller frees); *rows, when not NULL, the valid tokens. Returns the
 * fixture's JSON (caller deletes). */
cJSON *kvcal_test_cuda_run_golden(const char *name, const kvcal_backend_options *opt,
                                  kvcal_stats_t **stats, float **batch_absmax,
                                  int64_t *rows);

#endif
#endif
