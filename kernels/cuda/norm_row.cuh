/* kernels/cuda/norm_row.cuh: a row's residual add and RMSNorm in 16-byte
 * words, as the add + RMSNorm kernels (kernels/cuda/norm.cu) compute them
 * and as the MoE's combine (kernels/cuda/moe.cu) computes the next
 * layer's norm in its epilogue: one block a row of kvcal_norm_threads(dim)
 * threads, thread i the words at columns 8 i + 8 j blockDim.x, its sum of
 * squares in pair order, then block_sum. The same block and order give the
 * same floats in both. Device code only. */
#ifndef KVCAL_KERNELS_CUDA_NORM_ROW_CUH
#define KVCAL_KERNELS_CUDA_NORM_ROW_CUH

#include <cuda_bf16.h>

/* Threads of a row's block: the sum of squares' order depends on it. */
static inline int kvcal_norm_threads(int dim)
{
    return dim >= 2048 ? 256 : 128;
}

/* 8 bf16 values moved as one 16-byte word. */
union bf16x8 {
    uint4 u;
    __nv_bfloat162 h[4];
};

/* The block's sum of v (scratch: a float a warp, not in use elsewhere
 * between this call's barrier and the next). */
static __device__ __forceinline__ float block_sum(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Pass 1 of add + RMSNorm on word xu of row r at column c: the residual
 * += word yu of delta (where has_d), rounded to bf16 and written back;
 * returns the word, ss plus its sum of squares (value pairs in order). */
static __device__ __forceinline__ uint4 add8w(uint4 xu, uint4 yu, bool has_d,
                                              __nv_bfloat16 *r, int c, float *ss)
{
    bf16x8 x;
    x.u = xu;
    if (has_d) {
        bf16x8 y;
        y.u = yu;
        for (int i = 0; i < 4; i++) {
            float2 a = __bfloat1622float2(x.h[i]), b = __bfloat1622float2(y.h[i]);
            x.h[i] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
        }
        *reinterpret_cast<uint4 *>(r + c) = x.u;
    }
    for (int i = 0; i < 4; i++) {
        float2 a = __bfloat1622float2(x.h[i]);
        *ss += a.x * a.x + a.y * a.y;
    }
    return x.u;
}

/* Pass 2: the 8 normalized values of word x of the residual at column c:
 * x * scale rounded to bf16, times the weight g, rounded; with an offset,
 * x * scale * (g + off) rounded once. */
static __device__ __forceinline__ uint4 norm8(uint4 xu, const __nv_bfloat16 *g, int c,
                                              float scale, float off)
{
    bf16x8 x, w;
    x.u = xu;
    w.u = *reinterpret_cast<const uint4 *>(g + c);
    for (int i = 0; i < 4; i++) {
        float2 a = __bfloat1622float2(x.h[i]);
        if (off != 0.0f) { /* x r (w + off) rounded once */
            const float2 b = __bfloat1622float2(w.h[i]);
            x.h[i] = __floats2bfloat162_rn(a.x * scale * (b.x + off),
                                           a.y * scale * (b.y + off));
        } else
            x.h[i] = __hmul2_rn(__floats2bfloat162_rn(a.x * scale, a.y * scale), w.h[i]);
    }
    return x.u;
}

#endif
