/* kernels/cuda/bf16_round.cuh: where the CUDA runner rounds to bf16.
 *
 * The runner rounds at the points where transformers' bf16 modules and
 * vLLM's kernels round, so that the K and V it observes are those an engine
 * computes and caches: RMSNorm rounds x * rsqrt(mean(x^2) + eps) before the
 * weight multiplies it; SwiGLU rounds silu(gate) before up multiplies it;
 * RoPE uses cos and sin rounded to bf16 and rounds each product and the sum
 * (x * cos - y * sin). Every other step computes in fp32 and rounds once. */
#ifndef KVCAL_KERNELS_CUDA_BF16_ROUND_CUH
#define KVCAL_KERNELS_CUDA_BF16_ROUND_CUH

#include <cuda_bf16.h>

/* silu(g) = g / (1 + e^-g) with the fast exp and division. */
static __device__ __forceinline__ float kvcal_silu(float g)
{
    return __fdividef(g, 1.0f + __expf(-g));
}

/* SwiGLU of two (gate, up) pairs of bf16 values as the runner rounds it:
 * silu(gate) rounded, times up, rounded. */
static __device__ __forceinline__ __nv_bfloat162 kvcal_swiglu2_bf16(__nv_bfloat162 gate,
                                                                    __nv_bfloat162 up)
{
    const float2 g = __bfloat1622float2(gate);
    return __hmul2_rn(__floats2bfloat162_rn(kvcal_silu(g.x), kvcal_silu(g.y)), up);
}

/* x rounded to the nearest bf16 (ties to even), as a float. */
static __device__ __forceinline__ float kvcal_rbf(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

/* gpt-oss's clamped SwiGLU (kvcal_swiglu_oai_ref) of one bf16 gate and
 * up, as bf16 arithmetic rounds it: g * sigmoid(alpha g) rounded, up + 1
 * rounded, their product (to be rounded by the caller; the clamps are
 * exact), with the fast exp and division as kvcal_silu: a gate far below
 * 0 (no lower clamp) makes the denominator infinite, the glu 0. */
static __device__ __forceinline__ float kvcal_swiglu_oai(float gate, float up,
                                                         float alpha, float limit)
{
    const float g = fminf(gate, limit), u = fminf(fmaxf(up, -limit), limit);
    const float glu = kvcal_rbf(__fdividef(g, 1.0f + __expf(-alpha * g)));
    return kvcal_rbf(u + 1.0f) * glu;
}

/* One RoPE pair as bf16 arithmetic computes it: (a c - b s, b c + a s) with
 * c, s already rounded to bf16. */
static __device__ __forceinline__ void kvcal_rope_pair_bf16(float &a, float &b, float c,
                                                            float s)
{
    const float ra = kvcal_rbf(kvcal_rbf(a * c) - kvcal_rbf(b * s));
    const float rb = kvcal_rbf(kvcal_rbf(b * c) + kvcal_rbf(a * s));
    a = ra;
    b = rb;
}

/* Two RoPE pairs at once in bf16x2 arithmetic (each product, difference and
 * sum one correctly rounded bf16 operation, as above): a = (a0, a1) and
 * b = (b0, b1) rotated by (c, s) lanes 0 and 1. The _rn forms: PTX may fuse
 * a plain bf16x2 mul and add into one fma, which rounds once. */
static __device__ __forceinline__ void kvcal_rope_pairs2_bf16x2(__nv_bfloat162 &a,
                                                                __nv_bfloat162 &b,
                                                                __nv_bfloat162 c,
                                                                __nv_bfloat162 s)
{
    const __nv_bfloat162 ra = __hsub2_rn(__hmul2_rn(a, c), __hmul2_rn(b, s));
    const __nv_bfloat162 rb = __hadd2_rn(__hmul2_rn(b, c), __hmul2_rn(a, s));
    a = ra;
    b = rb;
}

#endif
