/* kvcal_calibrate.h: in-engine calibration (included by kvcal.h, or after
 * kvcal_quant.h; the conventions stated in kvcal.h apply).
 *
 * An engine feeds a calibrator the K and V its own forward passes write
 * into the cache (warm-up batches or live traffic), layer by layer; merges
 * calibrators of several calls, devices or processes (through bytes it
 * sends as it likes); and turns the result into a scale set that
 * kvcal_scales_write() writes in any format. The statistics are kvcal
 * calibrate's (per channel absmax, histograms of |x| on log-spaced bins,
 * token counts, the moving average of each step's absmax), so the scales
 * equal the ones `kvcal calibrate` computes from the same K and V.
 *
 * Non-finite values: DESIGN.md's rule, no scale is ever written from a NaN
 * or Inf. The first such value a calibrator sees is recorded (layer, K/V,
 * head, token, channel) and from then on kvcal_calibrator_to_scales() and
 * kvcal_calibrator_serialize() return KVCAL_ERR_NONFINITE naming it. A host
 * observation also returns it at once and folds nothing of that batch; a
 * device observation cannot know before the kernel ran, so it returns OK,
 * may have folded the batch's finite values, and the error surfaces at the
 * next read. */
#ifndef KVCAL_CALIBRATE_H
#define KVCAL_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal_base.h"
#include "kvcal_quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvcal_scales kvcal_scales_t; /* kvcal.h */

/* Statistics of the K and V of num_layers x num_kv_heads x head_dim. Opaque;
 * lives on the host (for the _ref observation) or on the current CUDA
 * device (for the _launch one). */
typedef struct kvcal_calibrator kvcal_calibrator_t;

/* Creates an empty calibrator. observer names the rule that turns the
 * statistics into scales, as `kvcal calibrate --observer` takes it:
 * "minmax" (NULL means it), "ema" or "ema:D" (D in [0, 1), default 0.99:
 * the moving average of each step's absmax), "percentile:P" (0 < P <= 100),
 * "mse". Each count in [1, 65536] (num_kv_heads and head_dim at most 1024,
 * the cache's limits). on_device = 1 keeps the statistics on the current
 * CUDA device (KVCAL_ERR_NO_DEVICE without one), 0 on the host. */
KVCAL_API kvcal_status kvcal_calibrator_create(int num_layers, int num_kv_heads,
                                               int head_dim, const char *observer,
                                               int on_device, kvcal_calibrator_t **out);
KVCAL_API void kvcal_calibrator_destroy(kvcal_calibrator_t *cal);

/* Folds one layer's new K and V rows into the statistics: batch is the
 * kvcal_kv_batch an engine passes to the quantization (K and V of dtype F32,
 * F16 or BF16, strided; head_dim and num_kv_heads the calibrator's).
 * batch->slot_mapping may be NULL (every token is observed); a negative
 * slot is padding and is not observed, whatever its value otherwise.
 * Tokens are counted once per layer (K's). The _ref takes host pointers and
 * a host calibrator; the _launch device pointers and a device calibrator,
 * enqueued on `stream` (no host synchronization: it can be captured in a
 * CUDA graph). Not thread-safe on one calibrator. */
KVCAL_API kvcal_status kvcal_calibrator_observe_ref(kvcal_calibrator_t *cal, int layer,
                                                    const kvcal_kv_batch *batch);
KVCAL_API kvcal_status kvcal_calibrator_observe_launch(kvcal_calibrator_t *cal,
                                                       int layer,
                                                       const kvcal_kv_batch *batch,
                                                       struct CUstream_st *stream);

/* Ends one step (one forward pass over every layer): folds the step's
 * per-head absmax into the moving average the "ema" observer reads. A step
 * that observed no token changes nothing. The other observers do not need
 * it. For a device calibrator, one kernel on `stream`. */
KVCAL_API kvcal_status kvcal_calibrator_end_step(kvcal_calibrator_t *cal,
                                                 struct CUstream_st *stream);

/* Folds src into dst (same sizes and observer, else KVCAL_ERR_MISMATCH;
 * either on the host or the device): absmax by max, histograms, tokens and
 * steps by sum -- exact, so the scales of minmax, percentile and mse do not
 * depend on how the traffic was split. The moving average cannot be merged
 * exactly: dst keeps the element-wise max of the two. Synchronizes `stream`
 * for a device calibrator. */
KVCAL_API kvcal_status kvcal_calibrator_merge(kvcal_calibrator_t *dst,
                                              const kvcal_calibrator_t *src,
                                              struct CUstream_st *stream);

/* The calibrator's state as bytes another process reads back with
 * kvcal_calibrator_deserialize (format "kvcal-calibrator", version 1:
 * sizes, observer, then the statistics in little-endian order). *size is
 * set to the number of bytes the state needs; with buf == NULL nothing else
 * is done, otherwise buf_size must be at least that (else
 * KVCAL_ERR_INVALID_ARG) and buf receives them. Synchronizes `stream` for a
 * device calibrator. */
KVCAL_API kvcal_status kvcal_calibrator_serialize(const kvcal_calibrator_t *cal,
                                                  struct CUstream_st *stream, void *buf,
                                                  size_t buf_size, size_t *size);

/* A new calibrator (host or device, as on_device) holding the state of
 * `size` bytes from kvcal_calibrator_serialize. Truncated, foreign or
 * inconsistent bytes are KVCAL_ERR_FORMAT naming the field. */
KVCAL_API kvcal_status kvcal_calibrator_deserialize(const void *buf, size_t size,
                                                    int on_device,
                                                    kvcal_calibrator_t **out);

/* Tokens observed per layer, (num_layers) int64 (may be NULL), and steps
 * ended (may be NULL). Synchronizes `stream` for a device calibrator. */
KVCAL_API kvcal_status kvcal_calibrator_tokens(const kvcal_calibrator_t *cal,
                                               struct CUstream_st *stream,
                                               int64_t *tokens, int64_t *steps);

/* A new scale set (caller destroys) of the calibrator's observer at
 * `granularity`: per-head (or per-layer) K and V scales, the observed absmax
 * per head, the estimated clipped fraction per layer, the observer and its
 * parameters and the tokens seen (provenance). A head that never saw a
 * non-zero value gets the floor scale 1/(448*512). The "ema" observer needs
 * at least one ended step. Synchronizes `stream` for a device calibrator.
 * Write it with kvcal_scales_write (after kvcal_scales_set_model for the
 * legacy format's model_type). */
KVCAL_API kvcal_status kvcal_calibrator_to_scales(const kvcal_calibrator_t *cal,
                                                  kvcal_granularity granularity,
                                                  struct CUstream_st *stream,
                                                  kvcal_scales_t **out);

#ifdef __cplusplus
}
#endif

#endif
