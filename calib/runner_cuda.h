/* calib/runner_cuda.h: the model runner on a CUDA device.
 *
 * The same forward pass as calib/runner.h (K observed after k_proj (+bias),
 * the per-head k_norm and RoPE; V after v_proj (+bias); the pass stops after
 * the last layer's K and V) in bf16 with fp32 accumulation on the kernels of
 * kernels/cuda: the whole model is uploaded once (fused QKV and gate/up
 * weights), K and V are observed on the device by the RoPE kernel into
 * statistics laid out as kvcal_stats_t, and folded into the caller's stats.
 * A batch is laid out padded, (batch, seq_len) rows with the padding rows
 * neither attended to by valid tokens nor observed. Work runs on one stream
 * of the current device; calls on one runner must come from one thread. */
#ifndef KVCAL_CALIB_RUNNER_CUDA_H
#define KVCAL_CALIB_RUNNER_CUDA_H

#include <stdint.h>

#include "calib/model.h"
#include "kvcal.h"
#include "observers/stats.h"

typedef struct kvcal_cuda_runner kvcal_cuda_runner_t;

/* Uploads `model` (borrowed for the call only) as bf16 and sizes activations
 * for batches of up to max_batch samples of max_seq_len tokens. Fails with
 * KVCAL_ERR_NO_DEVICE without a CUDA device (or in a build without CUDA),
 * KVCAL_ERR_DEVICE_MEMORY naming the bytes needed and the fix when the
 * device lacks the memory, KVCAL_ERR_UNSUPPORTED for a head_dim over 256.
 * *out = NULL on failure. */
kvcal_status kvcal_cuda_runner_create(kvcal_model_t *model, int max_batch,
                                      int max_seq_len, kvcal_cuda_runner_t **out);

/* Frees the device memory; NULL is a no-op. */
void kvcal_cuda_runner_destroy(kvcal_cuda_runner_t *r);

/* Runs one batch: ids (batch, seq_len) row-major, sample b's first
 * lengths[b] ids valid. Folds the batch into stats (same shape as the
 * model's K/V): batch_absmax by max and tokens per layer now, as
 * kvcal_stats_observe_ref would (bracket the call with
 * kvcal_stats_begin_batch / kvcal_stats_end_batch); absmax and histograms
 * accumulate on the device until kvcal_cuda_runner_collect. A NaN or Inf in
 * K or V is KVCAL_ERR_NONFINITE naming the layer, K/V, kv head and the
 * batch's samples; an id outside the vocabulary, a sample longer than the
 * model's context or than the runner's max_seq_len, KVCAL_ERR_INVALID_ARG. */
kvcal_status kvcal_cuda_runner_forward(kvcal_cuda_runner_t *r, const int32_t *ids,
                                       const int32_t *lengths, int batch, int seq_len,
                                       const int64_t *sample_ids, kvcal_stats_t *stats);

/* Folds the device absmax (max) and histograms (sum) into stats and clears
 * them on the device. Call once after the last batch (or more often). */
kvcal_status kvcal_cuda_runner_collect(kvcal_cuda_runner_t *r, kvcal_stats_t *stats);

#endif
