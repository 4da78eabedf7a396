// kernels/cuda/kv_words.cuh: K/V elements as the quantization kernels
// (kernels/cuda/kvquant.cu, kvquant_fmt.cu) read and write them: one
// element to and from fp32 (nearest even), and 16-byte words of eight
// 16-bit values (bf16 or f16) to floats, with their finite absmax. Device
// code only.
#ifndef KVCAL_KERNELS_CUDA_KV_WORDS_CUH
#define KVCAL_KERNELS_CUDA_KV_WORDS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cpu/kvquant_ref.h"

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ float to_float<__half>(__half v)
{
    return __half2float(v);
}
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v)
{
    return __uint_as_float((uint32_t)__bfloat16_as_ushort(v) << 16);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __half from_float<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

// Loads 8 16-bit values of a 16-byte word as floats (as Loader<T, 8>).
template <typename T> __device__ __forceinline__ void unpack8(uint4 w, float *x)
{
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            x[2 * i] = __uint_as_float(u[i] << 16);
            x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else {
            float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&u[i]));
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    }
}

// Finite absmax of the 8 16-bit values of a 16-byte word (0 for NaN and
// +-Inf, as kvcal_kv_finite_abs), and through *nonfinite (when given)
// whether one of them is NaN or +-Inf. The non-finite values are dropped
// only when one was seen: bf16 on the bits (|x| orders as its bits; a NaN
// or Inf makes the maximum >= 0x7f80), f16 through fmaxf, which drops NaN
// (an f16 NaN is seen on its bits: exponent 0x1f, as an Inf).
template <typename T>
__device__ __forceinline__ float absmax8(uint4 w, bool *nonfinite = nullptr)
{
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        uint32_t hi = 0, lo = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            hi = max(hi, u[i] & 0x7fff0000u);
            lo = max(lo, u[i] & 0x7fffu);
        }
        uint32_t m = max(hi, lo << 16);
        if (nonfinite)
            *nonfinite = m >= 0x7f800000u;
        if (m >= 0x7f800000u) {
            m = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t a = u[i] & 0x7fff0000u, b = (u[i] & 0x7fffu) << 16;
                m = max(m, a < 0x7f800000u ? a : 0u);
                m = max(m, b < 0x7f800000u ? b : 0u);
            }
        }
        return __uint_as_float(m);
    } else {
        float x[8], m = 0.0f;
        unpack8<T>(w, x);
#pragma unroll
        for (int j = 0; j < 8; j++) // fmaxf drops NaN
            m = fmaxf(m, fabsf(x[j]));
        if (nonfinite) { // exponent 0x1f in either half of a word: bit 15 after the add
            uint32_t e = 0;
#pragma unroll
            for (int i = 0; i < 4; i++)
                e |= (u[i] & 0x7c007c00u) + 0x04000400u;
            *nonfinite = (e & 0x80008000u) != 0;
        }
        if (m > 3.4028234663852886e38f) { // an Inf: drop it too
            m = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++)
                m = fmaxf(m, kvcal_kv_finite_abs(x[j]));
        }
        return m;
    }
}

#endif
