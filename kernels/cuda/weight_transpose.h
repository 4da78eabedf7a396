/* kernels/cuda/weight_transpose.h: a weight stored transposed ((in, out),
 * as transformers saves gpt-oss's experts), brought to the device as its
 * bytes lie and laid out there as the runner reads it ((out, in), rows
 * deinterleaved), a band of the stored matrix at a time. The CPU reference
 * is the host conversion the loader otherwise runs (kvcal_tensor_view_to_f32
 * of calib/model.h, then kvcal_bf16_from_float): bit for bit the same,
 * NaNs made quiet as that conversion makes them. */
#ifndef KVCAL_KERNELS_CUDA_WEIGHT_TRANSPOSE_H
#define KVCAL_KERNELS_CUDA_WEIGHT_TRANSPOSE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cuda/bf16.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The logical (rows, cols) weight at dst is held in the checkpoint as the
 * (cols, rows) matrix S; band (bc, bs) is S's block of stored rows c0 ..
 * c0 + bc - 1 and stored columns s0 .. s0 + bs - 1. For each of its values:
 * dst[row(s0 + s) * cols + c0 + c] = band[c * bs + s], row(s) = s, or with
 * half > 0 (rows interleaved: 2 half rows, gate, up, gate, up, ...) s / 2
 * for even s and half + s / 2 for odd s. dst (rows, cols) and band (bc,
 * bs) in device memory; queued on stream. */
kvcal_status kvcal_weight_transpose_launch(kvcal_bf16 *dst, int64_t cols,
                                           const kvcal_bf16 *band, int64_t bc, int64_t bs,
                                           int64_t c0, int64_t s0, int64_t half,
                                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
