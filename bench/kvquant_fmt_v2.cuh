// bench/kvquant_fmt_v2.cuh: v2 of the format kernels' fast quantization,
// kept to time against: kernels/cuda/kvquant_fmt.cu's fast quantization as
// it was before v3 (commit 44d2dbf; measured at 72.6-97.7% of the device
// copy at prefill, bench/NOTES.md "v3"): 16 lanes a row of head_dim 128
// (head_dim / 8), 4 rows a group of lanes, 8 values of K and of V a lane,
// int8 codes by F2I and an integer clamp, e2m1 by the fp32 arithmetic of
// kvcal_fp4_e2m1_mag22, each lane of a pair computing its NVFP4 block's
// scale. It shares the arguments, row parameters and host checks of
// kernels/cuda/kvquant_fmt.cuh with v3, and the same bytes (bench/kvquant
// validates it like every op). Entry point: v2::run, for 16-bit K/V of
// batches the fast kernel takes (a prefill; other calls, decode steps
// among them, are refused: v2's generic kernel is v3's). Included by
// bench/kvquant.cu alone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/kvquant_fmt.cuh"

namespace v2
{
using namespace kvfmt;

constexpr int kFastRows = 4; // rows per group of lanes

// Four codes' low bytes, a's lowest.
__device__ __forceinline__ uint32_t pack4(int a, int b, int c, int d)
{
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// The bytes of 8 values in an 8-bit format (FP8_E5M2, INT8, INT8_ASYM) of
// row parameters r: kvcal_kvfmt_code of each, value 0 in the lowest byte.
template <int FMT, int ROUND>
__device__ __forceinline__ uint2 codes8(const float *x, kvcal_kvfmt_row r)
{
    if constexpr (FMT == kE5m2) {
        return e5m2x8(x);
    } else {
        int q[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            q[j] = FMT == kInt8 ? min(max(f2i<ROUND>(x[j] * r.inv), -128), 127)
                                : min(max(f2i<ROUND>((x[j] - r.zero) * r.inv), 0), 255);
        return make_uint2(pack4(q[0], q[1], q[2], q[3]), pack4(q[4], q[5], q[6], q[7]));
    }
}

// The e2m1 nibbles of y[0..7] (value j at bits 4j..4j+3):
// kvcal_fp4_e2m1_from_float of each. maybe_nan: some y may be NaN (made 0).
__device__ __forceinline__ uint32_t e2m1x8(const float *y, bool maybe_nan)
{
    uint32_t w = 0;
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000
    w = e2m1x8_cvt(y, maybe_nan);
#else
#pragma unroll
    for (int j = 0; j < 8; j++)
        w |= (kvcal_fp4_e2m1_mag22(y[j]) >> 22 | (__float_as_uint(y[j]) >> 28 & 8u))
             << (4 * j);
    if (maybe_nan)
        w = clear_nan_nibbles(w, y);
#endif
    return w;
}

// The nibbles of 8 values x of a block of decode-scale reciprocal inv_d.
__device__ __forceinline__ uint32_t nvfp4_codes8(const float *x, float inv_d,
                                                 bool maybe_nan)
{
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        y[j] = x[j] * inv_d;
    // y is NaN where x is, and where x is +-Inf and inv_d 0
    return e2m1x8(y, maybe_nan);
}

// kFastRows rows from row `first` of a quantization into FMT (rounding
// ROUND) of 16-bit K/V with head_dim D: each lane converts 8 values of each
// row (one 16-byte word of K and of V); the loads of every row are issued
// first, the parameters of all rows reduced together, then the stores.
// Rows past the batch load zeros and are skipped; every lane of the warp
// takes part in the shuffles. 32-bit offsets inside a cache block (the
// host checks they fit).
template <typename T, int D, int FMT, int ROUND>
__global__ void __launch_bounds__(kFastThreads) fmt_quantize_fast_kernel(FmtArgs a)
{
    constexpr int kLanes = D / 8;
    constexpr int kRowBytes = FMT == kNvfp4 ? D / 2 : D;
    constexpr int kLaneBytes = kRowBytes / kLanes;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)a.g.num_kv_heads;
    const uint32_t rows = (uint32_t)(a.num_tokens * H);
    const uint32_t first =
        (blockIdx.x * (kFastThreads / kLanes) + threadIdx.x / kLanes) * kFastRows;
    uint4 w[2][kFastRows];
    int64_t slot[kFastRows];
    uint32_t head[kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        const uint32_t row = first + i;
        w[0][i] = w[1][i] = make_uint4(0, 0, 0, 0);
        slot[i] = -1, head[i] = 0;
        if (row < rows) {
            const uint32_t t = kvcal_kv_fastdiv_div(a.heads_div, row);
            head[i] = row - t * H;
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
                w[kv][i] = *reinterpret_cast<const uint4 *>(
                    static_cast<const T *>(a.src[kv]) + t * a.ts[kv] +
                    head[i] * a.hs[kv] + lane * 8);
            slot[i] = __ldg(a.slots + t);
        }
    }
    // What the rows' parameters need of every lane: INT8 dynamic the row's
    // finite absmax, NVFP4 its block's (lanes l and l ^ 1), INT8_ASYM dynamic
    // the row's finite min (m) and max (m2)
    const bool dyn = (FMT == kInt8 || FMT == kAsym) && !a.scales[0];
    float m[2][kFastRows], m2[2][kFastRows];
    bool bad[2][kFastRows]; // NVFP4: a NaN or Inf among the lane's values
    if (FMT == kNvfp4 || (FMT == kInt8 && dyn)) {
#pragma unroll
        for (int i = 0; i < kFastRows; i++)
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
                m[kv][i] = absmax8<T>(w[kv][i], &bad[kv][i]);
#pragma unroll
        for (int off = FMT == kNvfp4 ? 1 : kLanes / 2; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < kFastRows; i++)
#pragma unroll
                for (int kv = 0; kv < 2; kv++)
                    m[kv][i] = fmaxf(m[kv][i],
                                     __shfl_xor_sync(0xffffffffu, m[kv][i], off, kLanes));
    } else if (FMT == kAsym && dyn) {
#pragma unroll
        for (int i = 0; i < kFastRows; i++)
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                float x[8];
                unpack8<T>(w[kv][i], x);
                finite_min_max8(x, &m[kv][i], &m2[kv][i]);
            }
#pragma unroll
        for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < kFastRows; i++)
#pragma unroll
                for (int kv = 0; kv < 2; kv++) {
                    m[kv][i] = fminf(m[kv][i],
                                     __shfl_xor_sync(0xffffffffu, m[kv][i], off, kLanes));
                    m2[kv][i] = fmaxf(
                        m2[kv][i], __shfl_xor_sync(0xffffffffu, m2[kv][i], off, kLanes));
                }
    }
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        if (!(slot[i] >= 0 && slot[i] < a.g.capacity))
            continue;
        const uint32_t s = (uint32_t)slot[i]; // < 2^31 (host check)
        const uint32_t block = kvcal_kv_fastdiv_div(a.bs_div, s);
        const uint32_t off = s - block * (uint32_t)a.g.block_size;
        const uint32_t in_block = a.g.layout == KVCAL_CACHE_NHD
                                      ? off * H + head[i]
                                      : head[i] * (uint32_t)a.g.block_size + off;
        const int64_t at = (int64_t)block * a.g.block_stride +
                           (int64_t)(in_block * kRowBytes + lane * kLaneBytes);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
            if (FMT == kInt8 && dyn)
                r = kvcal_kvfmt_row_make(kvcal_kvfmt_int8_scale_dmul(m[kv][i]), 0.0f);
            else if (FMT == kAsym && dyn)
                r = kvcal_kvfmt_asym_row_dmul(m[kv][i], m2[kv][i]);
            else if (FMT != kE5m2)
                r = static_row(a, kv, (int)head[i]);
            float x[8];
            unpack8<T>(w[kv][i], x);
            if constexpr (FMT == kNvfp4) {
                uint8_t sb;
                const float inv_d = nvfp4_block(r, m[kv][i], &sb);
                *reinterpret_cast<uint32_t *>(a.cache[kv] + at) =
                    nvfp4_codes8(x, inv_d, bad[kv][i]);
                if ((lane & 1) == 0)
                    a.cache[kv][nvfp4_scale_at<D>(a.g, block, off, (int)head[i], lane / 2,
                                                  kv)] = sb;
            } else {
                *reinterpret_cast<uint2 *>(a.cache[kv] + at) = codes8<FMT, ROUND>(x, r);
            }
            if (FMT != kE5m2 && lane == 0)
                record(a, kv, kvcal_kv_scale_index_at(a.g, block, off, (int)head[i]), r);
        }
    }
}

template <typename T, int FMT, int ROUND> void launch(const FmtArgs &a, cudaStream_t s)
{
    const int d = a.g.head_dim;
    if (d == 64)
        fmt_quantize_fast_kernel<T, 64, FMT, ROUND>
            <<<fast_grid(a, 64 / 8, kFastRows), kFastThreads, 0, s>>>(a);
    else if (d == 128)
        fmt_quantize_fast_kernel<T, 128, FMT, ROUND>
            <<<fast_grid(a, 128 / 8, kFastRows), kFastThreads, 0, s>>>(a);
    else
        fmt_quantize_fast_kernel<T, 256, FMT, ROUND>
            <<<fast_grid(a, 256 / 8, kFastRows), kFastThreads, 0, s>>>(a);
}

template <int FMT> void launch_fmt(const FmtArgs &a, cudaStream_t s)
{
    if ((FMT == kInt8 || FMT == kAsym) && a.rounding == kRz)
        launch<__nv_bfloat16, FMT, (FMT == kInt8 || FMT == kAsym) ? kRz : kRne>(a, s);
    else
        launch<__nv_bfloat16, FMT, kRne>(a, s);
}

// v2's fast quantization of a BF16 batch (the bench's), as
// kvcal_kv_quantize_fmt_launch ran it; KVCAL_ERR_INVALID_ARG for a call the
// fast kernel does not take.
inline kvcal_status run(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                        const kvcal_kv_qparams *params, cudaStream_t s)
{
    FmtArgs a;
    kvcal_status st = quantize_args("v2::run", batch, cache, params, &a);
    if (st != KVCAL_OK)
        return st;
    if (batch->dtype != KVCAL_DTYPE_BF16 ||
        !quantize_fast(a, batch->dtype, params->format))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "v2::run: not a bf16 batch the fast kernel takes");
    switch (params->format) {
    case KVCAL_KV_FORMAT_FP8_E5M2:
        launch_fmt<kE5m2>(a, s);
        break;
    case KVCAL_KV_FORMAT_INT8:
        launch_fmt<kInt8>(a, s);
        break;
    case KVCAL_KV_FORMAT_INT8_ASYM:
        launch_fmt<kAsym>(a, s);
        break;
    default:
        launch_fmt<kNvfp4>(a, s);
    }
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? KVCAL_OK
               : kvcal_fail(KVCAL_ERR_CUDA, "v2::run: %s", cudaGetErrorString(e));
}

} // namespace v2
