/* kernels/cuda/eval.h: the reductions of `kvcal eval` on the device (host
 * launchers); the CPU references of the same stems are in
 * kernels/cpu/eval_ref.h. The conventions of kernels/cuda/ops.h apply:
 * device pointers, work queued on `stream`, nothing synchronizes, a bad
 * shape or a NULL buffer is KVCAL_ERR_INVALID_ARG (checked before any device
 * work) and a failed launch KVCAL_ERR_CUDA. */
#ifndef KVCAL_KERNELS_CUDA_EVAL_H
#define KVCAL_KERNELS_CUDA_EVAL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cpu/eval_ref.h"
#include "kernels/cuda/bf16.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nll (rows) = logsumexp(logits[r]) - logits[r][target[r]] of bf16 logits
 * (rows, vocab) in fp32; 0 where target[r] < 0. One block per row reads the
 * row twice (max, then the sum of exponentials), so memory is the logits
 * alone: callers bound it by computing the logits in chunks of rows. */
kvcal_status kvcal_token_nll_launch(float *nll, const kvcal_bf16 *logits,
                                    const int32_t *target, int rows, int vocab,
                                    cudaStream_t stream);

/* kvcal_token_keep_ref on the device, for bf16 logits (rows, vocab): ref
 * (kept rows, vocab) receives the rows as they are (bf16: nothing lost),
 * ref_lse their logsumexp in fp32; keep (rows) int64 on the device. */
kvcal_status kvcal_token_keep_launch(kvcal_bf16 *ref, float *ref_lse,
                                     const kvcal_bf16 *logits, const int64_t *keep,
                                     int rows, int vocab, cudaStream_t stream);

/* kvcal_token_kld_ref on the device: bf16 logits (rows, vocab) against the
 * rows kvcal_token_keep_launch kept; one block a row, sums in fp32 (the
 * reference's are double: the same within 5e-5 + 1e-3 relative, the
 * top-1 agreement exactly). */
kvcal_status kvcal_token_kld_launch(float *kld, float *top, const kvcal_bf16 *logits,
                                    const kvcal_bf16 *ref, const float *ref_lse,
                                    const int64_t *keep, int rows, int vocab,
                                    cudaStream_t stream);

/* Adds into *sums (device memory) what kvcal_error_sums_ref adds, for bf16
 * x (rows, cols; row stride x_stride) against y (rows, cols; row stride
 * y_stride) of y_dtype KVCAL_DTYPE_F32 or KVCAL_DTYPE_BF16; scale, group
 * and pos as there. When store is non-NULL, (rows, cols) with row stride
 * x_stride, it then receives y rounded to bf16 on the counted rows (store
 * may be x: each value is read before it is written). The sums are added
 * with atomics in an unspecified order: x2 and e2 match the reference
 * within rounding, clipped and n exactly. */
kvcal_status kvcal_error_sums_launch(kvcal_error_sums *sums, const kvcal_bf16 *x,
                                     int64_t x_stride, const void *y, int64_t y_stride,
                                     kvcal_dtype y_dtype, const float *scale, int group,
                                     const int32_t *pos, int rows, int cols,
                                     kvcal_bf16 *store, cudaStream_t stream);

/* kvcal_fp8_roundtrip_ref on bf16 x (rows, cols; row stride stride), in
 * place, the result rounded to bf16 (to nearest even). scale finite, > 0. */
kvcal_status kvcal_fp8_roundtrip_launch(kvcal_bf16 *x, int64_t stride, int rows, int cols,
                                        float scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
