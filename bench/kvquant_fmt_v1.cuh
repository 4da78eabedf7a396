// bench/kvquant_fmt_v1.cuh: v1 of the format kernels, kept to time
// against: kernels/cuda/kvquant_fmt.cu as it was before its rewrite (commit
// 7906959; measured at 10-33% of the device copy at prefill, bench/NOTES.md
// "Every cache format"). One group of lanes per (token, head) row, K then V
// one after the other, every value through the CPU reference's software
// conversions (kernels/cpu/kvquant_fmt.h, core/kvformat.h). Same bytes as
// the reference (bench/kvquant validates it like every op). Entry point:
// v1::run, for bf16 (its host side cut to what the bench calls; its
// arguments the later versions'). Included by bench/kvquant.cu alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/kvquant_fmt.cuh"

namespace v1
{
#define V1_TRY(call)                                                                     \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            return kvcal_fail(KVCAL_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__,       \
                              #call, cudaGetErrorString(err_));                          \
    } while (0)

constexpr int kThreads = 256;
constexpr int kChunk = 8;                                       // values per chunk
constexpr int kMaxChunks = KVCAL_KV_MAX_HEAD_DIM / kChunk / 32; // per lane

// The kernels' arguments and their making, shared with v2 and v3
// (kernels/cuda/kvquant_fmt.cuh; v1 leaves the fast kernels' fields unused).
using kvfmt::aligned;
using kvfmt::FmtArgs;
using kvfmt::make_args;

// --- element loads and stores ------------------------------------------------

// Values d0 .. d0 + 7 of a row of n (0 past its end).
template <typename T, bool VEC>
__device__ __forceinline__ void load8(const T *row, int d0, int n, float *x)
{
    if constexpr (VEC && sizeof(T) == 2) {
        uint4 w = *reinterpret_cast<const uint4 *>(row + d0);
        const T *e = reinterpret_cast<const T *>(&w);
#pragma unroll
        for (int j = 0; j < kChunk; j++)
            x[j] = to_float<T>(e[j]);
    } else if constexpr (VEC) {
        float4 a = *reinterpret_cast<const float4 *>(row + d0);
        float4 b = *reinterpret_cast<const float4 *>(row + d0 + 4);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
        x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < kChunk; j++)
            x[j] = d0 + j < n ? to_float<T>(row[d0 + j]) : 0.0f;
    }
}

template <typename T, bool VEC>
__device__ __forceinline__ void store8(T *row, int d0, int n, const float *x)
{
    if constexpr (VEC && sizeof(T) == 2) {
        uint4 w;
        T *e = reinterpret_cast<T *>(&w);
#pragma unroll
        for (int j = 0; j < kChunk; j++)
            e[j] = from_float<T>(x[j]);
        *reinterpret_cast<uint4 *>(row + d0) = w;
    } else if constexpr (VEC) {
        *reinterpret_cast<float4 *>(row + d0) = make_float4(x[0], x[1], x[2], x[3]);
        *reinterpret_cast<float4 *>(row + d0 + 4) = make_float4(x[4], x[5], x[6], x[7]);
    } else {
#pragma unroll
        for (int j = 0; j < kChunk; j++)
            if (d0 + j < n)
                row[d0 + j] = from_float<T>(x[j]);
    }
}

__device__ __forceinline__ float group_max(float v, int group)
{
    for (int off = group >> 1; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off, group));
    return v;
}

__device__ __forceinline__ float group_min(float v, int group)
{
    for (int off = group >> 1; off > 0; off >>= 1)
        v = fminf(v, __shfl_xor_sync(0xffffffffu, v, off, group));
    return v;
}

// Where a lane's row sits (row = token * H + head).
struct Where {
    int64_t t, slot, off, si; // token, slot, cache byte offset, scale index
    int64_t block, boff;      // the slot's block and offset in it
    int h, lane;
    bool real, active;
};

__device__ __forceinline__ Where where_of(const FmtArgs &a)
{
    Where w;
    int64_t row = (int64_t)blockIdx.x * (kThreads / a.group) + threadIdx.x / a.group;
    w.lane = threadIdx.x & (a.group - 1);
    w.t = row / a.g.num_kv_heads;
    w.h = (int)(row - w.t * a.g.num_kv_heads);
    w.real = w.t < a.num_tokens;
    w.slot = w.real ? __ldg(a.slots + w.t) : -1;
    w.active = w.slot >= 0 && w.slot < a.g.capacity;
    w.block = w.boff = 0;
    if (w.active)
        kvcal_kv_slot_split(a.g, w.slot, &w.block, &w.boff);
    w.off = w.active ? kvcal_kv_cache_offset_at(a.g, w.block, w.boff, w.h) : 0;
    w.si = w.active ? kvcal_kv_scale_index(a.g, w.slot, w.h) : 0;
    return w;
}

// --- quantization ----------------------------------------------------------------

template <typename T, int FMT, bool VEC>
__global__ void __launch_bounds__(kThreads) fmt_quantize_kernel(FmtArgs a)
{
    const Where w = where_of(a);
    const int hd = a.g.head_dim;
    for (int kv = 0; kv < 2; kv++) {
        float x[kMaxChunks][kChunk];
        const T *src = static_cast<const T *>(a.src[kv]) + (w.real ? w.t * a.ts[kv] : 0) +
                       (int64_t)w.h * a.hs[kv];
#pragma unroll
        for (int i = 0; i < kMaxChunks; i++) {
            int c = w.lane + i * a.group;
            if (i < a.per_lane && w.real && c < a.nchunks)
                load8<T, VEC>(src, c * kChunk, hd, x[i]);
            else
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    x[i][j] = 0.0f;
        }
        kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
        if (FMT != KVCAL_KV_FORMAT_FP8_E5M2) {
            if (a.scales[kv]) {
                int i = w.h * a.step;
                r = kvcal_kvfmt_row_make(a.scales[kv][i],
                                         a.zeros[kv] ? a.zeros[kv][i] : 0.0f);
            } else if (FMT == KVCAL_KV_FORMAT_INT8) {
                float m = 0.0f;
#pragma unroll
                for (int i = 0; i < kMaxChunks; i++)
#pragma unroll
                    for (int j = 0; j < kChunk; j++)
                        m = fmaxf(m, kvcal_kv_finite_abs(x[i][j]));
                r = kvcal_kvfmt_row_make(kvcal_kvfmt_int8_scale(group_max(m, a.group)),
                                         0.0f);
            } else {
                float mn = INFINITY, mx = -INFINITY;
#pragma unroll
                for (int i = 0; i < kMaxChunks; i++)
#pragma unroll
                    for (int j = 0; j < kChunk; j++) {
                        int d = (w.lane + i * a.group) * kChunk + j;
                        float v = x[i][j];
                        if (i < a.per_lane && d < hd &&
                            kvcal_kv_finite_abs(v) == fabsf(v))
                            mn = fminf(mn, v), mx = fmaxf(mx, v);
                    }
                r = kvcal_kvfmt_asym_row(group_min(mn, a.group), group_max(mx, a.group));
            }
            if (w.active && w.lane == 0) {
                if (a.scale_cache[kv])
                    a.scale_cache[kv][w.si] = r.scale;
                if (a.zero_cache[kv])
                    a.zero_cache[kv][w.si] = r.zero;
            }
        }
        uint8_t *dst = a.cache[kv] + w.off;
#pragma unroll
        for (int i = 0; i < kMaxChunks; i++) {
            const int c = w.lane + i * a.group;
            const bool mine = i < a.per_lane && w.active && c < a.nchunks;
            if constexpr (FMT == KVCAL_KV_FORMAT_NVFP4) {
                float m = 0.0f;
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    m = fmaxf(m, kvcal_kv_finite_abs(x[i][j]));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1, a.group));
                if (i >= a.per_lane)
                    continue;
                float dec;
                uint8_t s = kvcal_kvfmt_nvfp4_block(r, m, &dec);
                uint32_t word = 0;
#pragma unroll
                for (int j = 0; j < kChunk; j += 2)
                    word |= (uint32_t)(kvcal_kvfmt_nvfp4_code(dec, x[i][j]) |
                                       kvcal_kvfmt_nvfp4_code(dec, x[i][j + 1]) << 4)
                            << (4 * j);
                if (!mine)
                    continue;
                if (VEC) {
                    *reinterpret_cast<uint32_t *>(dst + c * 4) = word;
                } else {
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        dst[c * 4 + k] = (uint8_t)(word >> (8 * k));
                }
                if ((c & 1) == 0)
                    a.cache[kv][kvcal_kvfmt_nvfp4_scale_at(a.g, w.block, w.boff, w.h,
                                                           c / 2, kv)] = s;
            } else {
                if (!mine)
                    continue;
                uint2 w8 = make_uint2(0u, 0u);
#pragma unroll
                for (int j = 0; j < kChunk; j++) {
                    uint32_t b = kvcal_kvfmt_code(FMT, a.rounding, r, x[i][j]);
                    if (j < 4)
                        w8.x |= b << (8 * j);
                    else
                        w8.y |= b << (8 * (j - 4));
                }
                if (VEC) {
                    *reinterpret_cast<uint2 *>(dst + c * kChunk) = w8;
                } else {
#pragma unroll
                    for (int j = 0; j < kChunk; j++)
                        if (c * kChunk + j < hd)
                            dst[c * kChunk + j] =
                                (uint8_t)((j < 4 ? w8.x : w8.y) >> (8 * (j & 3)));
                }
            }
        }
    }
}

// --- dequantization --------------------------------------------------------------

template <typename TOut, int FMT, bool VEC>
__global__ void __launch_bounds__(kThreads) fmt_dequantize_kernel(FmtArgs a)
{
    const Where w = where_of(a);
    if (!w.active)
        return;
    const int hd = a.g.head_dim;
    for (int kv = 0; kv < 2; kv++) {
        kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
        if (FMT != KVCAL_KV_FORMAT_FP8_E5M2) {
            if (a.scales[kv]) {
                int i = w.h * a.step;
                r = kvcal_kvfmt_row_make(a.scales[kv][i],
                                         a.zeros[kv] ? a.zeros[kv][i] : 0.0f);
            } else {
                r = kvcal_kvfmt_row_make(a.scale_cache[kv][w.si],
                                         a.zero_cache[kv] ? a.zero_cache[kv][w.si]
                                                          : 0.0f);
            }
        }
        const uint8_t *in = a.cache[kv] + w.off;
        TOut *out = static_cast<TOut *>(a.out[kv]) + (w.t * a.g.num_kv_heads + w.h) * hd;
        for (int c = w.lane; c < a.nchunks; c += a.group) {
            float x[kChunk];
            if constexpr (FMT == KVCAL_KV_FORMAT_NVFP4) {
                uint32_t word = 0;
                if (VEC) {
                    word = *reinterpret_cast<const uint32_t *>(in + c * 4);
                } else {
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        word |= (uint32_t)in[c * 4 + k] << (8 * k);
                }
                float dec =
                    kvcal_fp8_e4m3_to_float(a.cache[kv][kvcal_kvfmt_nvfp4_scale_at(
                        a.g, w.block, w.boff, w.h, c / 2, kv)]) *
                    r.scale;
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    x[j] = kvcal_fp4_e2m1_to_float((uint8_t)(word >> (4 * j))) * dec;
            } else {
                uint2 w8 = make_uint2(0u, 0u);
                if (VEC) {
                    w8 = *reinterpret_cast<const uint2 *>(in + c * kChunk);
                } else {
#pragma unroll
                    for (int j = 0; j < kChunk; j++)
                        if (c * kChunk + j < hd)
                            (j < 4 ? w8.x : w8.y) |= (uint32_t)in[c * kChunk + j]
                                                     << (8 * (j & 3));
                }
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    x[j] = kvcal_kvfmt_value(
                        FMT, r, (uint8_t)((j < 4 ? w8.x : w8.y) >> (8 * (j & 3))));
            }
            store8<TOut, VEC>(out, c * kChunk, hd, x);
        }
    }
}

// --- host side ----------------------------------------------------------------------

// 1 when the cache takes the vector stores: 8-byte words (4 for NVFP4) at
// every chunk of every row.
bool cache_aligned(const kvcal_kv_cache *c, kvcal_kv_geom g, int format)
{
    int64_t word = format == KVCAL_KV_FORMAT_NVFP4 ? 4 : 8;
    return g.head_dim % kChunk == 0 && g.row_bytes % word == 0 &&
           g.block_stride % word == 0 && aligned(c->k, word) && aligned(c->v, word);
}

unsigned grid_of(const FmtArgs &a)
{
    int64_t rows = a.num_tokens * a.g.num_kv_heads;
    int64_t per_block = kThreads / a.group;
    return (unsigned)((rows + per_block - 1) / per_block);
}

// v1 as bench/kvquant calls it: bf16 K/V and outputs, rows and caches
// aligned for the 16-byte path (refused otherwise); a quantization when
// k_out is NULL, else a dequantization into k_out / v_out.
template <int FMT> kvcal_status launch(const FmtArgs &a, bool quantize, cudaStream_t s)
{
    if (quantize)
        fmt_quantize_kernel<__nv_bfloat16, FMT, true><<<grid_of(a), kThreads, 0, s>>>(a);
    else
        fmt_dequantize_kernel<__nv_bfloat16, FMT, true>
            <<<grid_of(a), kThreads, 0, s>>>(a);
    V1_TRY(cudaGetLastError());
    return KVCAL_OK;
}

kvcal_status run(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                 const kvcal_kv_qparams *params, void *k_out, void *v_out, cudaStream_t s)
{
    const bool quantize = k_out == nullptr;
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_check("v1", batch, cache, params, quantize, &g);
    if (st != KVCAL_OK || batch->num_tokens == 0)
        return st;
    FmtArgs a = make_args(batch, cache, params, g);
    a.out[0] = k_out, a.out[1] = v_out;
    bool vec = cache_aligned(cache, g, params->format) && aligned(v_out, 16);
    for (int kv = 0; kv < 2; kv++)
        vec = vec &&
              (quantize ? aligned(a.src[kv], 16) && a.ts[kv] % 8 == 0 && a.hs[kv] % 8 == 0
                        : aligned(a.out[kv], 16));
    if (!vec || (quantize && batch->dtype != KVCAL_DTYPE_BF16))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "v1: bf16 and the 16-byte path only");
    switch (params->format) {
    case KVCAL_KV_FORMAT_FP8_E5M2:
        return launch<KVCAL_KV_FORMAT_FP8_E5M2>(a, quantize, s);
    case KVCAL_KV_FORMAT_INT8:
        return launch<KVCAL_KV_FORMAT_INT8>(a, quantize, s);
    case KVCAL_KV_FORMAT_INT8_ASYM:
        return launch<KVCAL_KV_FORMAT_INT8_ASYM>(a, quantize, s);
    default:
        return launch<KVCAL_KV_FORMAT_NVFP4>(a, quantize, s);
    }
}

} // namespace v1
