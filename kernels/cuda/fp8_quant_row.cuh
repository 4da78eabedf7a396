/* kernels/cuda/fp8_quant_row.cuh: the per-row FP8 activation quantization
 * that a row-per-block kernel runs as its epilogue (SwiGLU's and add +
 * RMSNorm's in kernels/cuda/fp8_linear.cu and kernels/cuda/norm.cu): the
 * row, already rounded to bf16 in shared memory, quantized per token, per
 * group or statically, each element through core/fp8_linear.h, so that the
 * bytes and scales equal kvcal_fp8_quant_act_launch's on the same row. */
#ifndef KVCAL_KERNELS_CUDA_FP8_QUANT_ROW_CUH
#define KVCAL_KERNELS_CUDA_FP8_QUANT_ROW_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "core/fp8_linear.h"

static __device__ __forceinline__ float kvcal_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The block's max of v (every thread gets it); blockDim.x a multiple of 32. */
static __device__ float kvcal_block_max(float v)
{
    __shared__ float part[32];
    __shared__ float total;
    v = kvcal_warp_max(v);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = kvcal_warp_max(threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f);
        if (threadIdx.x == 0)
            total = v;
    }
    __syncthreads();
    return total;
}

/* Row r of rows, act (n) bf16 in shared memory, each thread having written
 * the 8 values at columns threadIdx.x * 8 + j * blockDim.x * 8 (n a multiple
 * of 8) and m their absmax: into qr (n) e4m3 (8-byte aligned) and xs as
 * kvcal_fp8_quant_act_launch lays the scales out (GROUP: xs[g * rows + r]).
 * Every thread of the block calls it. */
template <kvcal_fp8_act_scale MODE>
static __device__ void kvcal_fp8_quant_row(const __nv_bfloat16 *act, int n, float m,
                                           uint8_t *qr, float *xs, int64_t r, int rows,
                                           int group, const float *input_scale)
{
    if (MODE == KVCAL_FP8A_GROUP) {
        __syncthreads();
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31,
                  warps = blockDim.x >> 5;
        for (int c0 = warp * group; c0 < n; c0 += warps * group) {
            const int c1 = c0 + group < n ? c0 + group : n;
            float gm = 0.0f;
            for (int c = c0 + lane; c < c1; c += 32)
                gm = fmaxf(gm, fabsf(__bfloat162float(act[c])));
            const float s = kvcal_fp8_group_scale(kvcal_warp_max(gm));
            for (int c = c0 + lane; c < c1; c += 32)
                qr[c] = kvcal_fp8_quant_group(__bfloat162float(act[c]), s);
            if (lane == 0)
                xs[(int64_t)(c0 / group) * rows + r] = s;
        }
        return;
    }
    /* each thread quantizes the values it wrote */
    const float s = MODE == KVCAL_FP8A_TOKEN ? kvcal_fp8_token_scale(kvcal_block_max(m))
                                             : *input_scale;
    const float inv = 1.0f / s;
    for (int c = threadIdx.x * 8; c < n; c += blockDim.x * 8) {
        uint8_t q[8];
        for (int i = 0; i < 8; i++) {
            const float v = __bfloat162float(act[c + i]);
            q[i] = MODE == KVCAL_FP8A_TOKEN ? kvcal_fp8_quant_div(v, s)
                                            : kvcal_fp8_quant_mul(v, inv);
        }
        *reinterpret_cast<uint2 *>(qr + c) = *reinterpret_cast<const uint2 *>(q);
    }
    if (threadIdx.x == 0)
        xs[r] = s;
}

#endif
