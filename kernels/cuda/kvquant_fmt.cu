// kernels/cuda/kvquant_fmt.cu: CUDA online quantization into the cache
// formats beyond e4m3 (include/kvcal_quant.h, kvcal_kv_format): fp8 e5m2,
// int8, int8 with zero points, NVFP4, with static or dynamic per (token,
// head) parameters, and their dequantization. Each kernel matches the CPU
// reference (kernels/cpu/kvquant_fmt_ref.c) byte for byte: the same checks
// and addressing (kernels/cpu/kvquant_ref.h, kvquant_fmt.h), and the same
// values computed the GPU's way where that is cheaper and equal:
// - e5m2, and NVFP4's e4m3 block scales, by the conversion instructions
//   (cvt.rn.satfinite.{e5m2,e4m3}x2.f32: nearest even, saturating, NaN ->
//   0x7f, as core/kvformat.h and core/fp8.h);
// - int8 codes by a rounding to int32 and a saturating pack to bytes
//   (cvt.pack.sat, fused with the rounding into F2IP: two values an
//   instruction; NaN -> 0): kvcal_int_code, which clamps before rounding
//   (the same for integer bounds);
// - e2m1 by cvt.rn.satfinite.e2m1x2.f32 where the target has it
//   (family-specific sm_100 builds and later), else by fp32 arithmetic that
//   rounds to the e2m1 grid scaled by 2^-6 (kvcal_fp4_e2m1_r6) and the e4m3
//   conversion, which then yields the code shifted by 2; a NaN is made 0, as
//   the reference does;
// - the dynamic scales' divisions by 127 and 255 as double products
//   (kvcal_kvfmt_int8_scale_dmul, kvcal_kvfmt_asym_row_dmul);
// - decoding: e5m2 bytes as the high bytes of fp16 values, e2m1 bits as an
//   fp32 subnormal times 2^126 (both exact).
// The tests compare every kernel with the reference and each conversion on
// every 16-bit input (tests/test_kvquant_fmt_cuda.c,
// kvcal_kvfmt_encode_launch).
//
// Two kernels each way. The fast ones take large batches of 16-bit K/V
// with head_dim 64, 128 or 256 (a prefill). The fast quantization (v3 in
// bench/NOTES.md) gives each row head_dim / 32 lanes, lane l holding chunks
// l + j head_dim / 32 (j < 4) of 8 values of K and of V, all loaded before
// any conversion; format, rounding and static / dynamic parameters are
// fixed at compile time; NVFP4's even lanes quantize K's blocks and odd
// lanes V's, after exchanging half-blocks. The fast dequantization converts
// 16 values a lane, 4 rows a group, and writes whole 32-byte sectors;
// NVFP4's into 16 bits (caches aligned to 16 bytes) stages a block's
// packed values and scale rows in shared memory by asynchronous copies,
// then decodes them tile after tile (v5 in bench/NOTES.md). The
// generic kernels take the rest (decode steps, f32, other head_dim,
// misaligned strides): one group of G lanes per row (G = the next power of
// two of the row's chunks of 8 values, at most 32), each lane holding up to
// 4 chunks of K and of V, both loaded before either is converted.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <type_traits>

extern "C" {
#include "core/status.h"
}
#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/kvquant.h"
#include "kernels/cuda/kvquant_fmt.cuh"
#include "kernels/cuda/kvquant_fmt.h"
#include "kernels/cuda/kvquant_fmt_nvfp4.h"

#define CUDA_TRY(call)                                                                   \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            return kvcal_fail(KVCAL_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__,       \
                              #call, cudaGetErrorString(err_));                          \
    } while (0)

namespace
{

using namespace kvfmt;

constexpr int kThreads = 256;
constexpr int kMaxChunks = KVCAL_KV_MAX_HEAD_DIM / kChunk / 32; // per lane
constexpr int kFastRows = 4; // rows per group of lanes (fast dequantization)

// --- element loads and stores ------------------------------------------------

// Values d0 .. d0 + 7 of a row of n (0 past its end); vec: 16-byte loads.
template <typename T>
__device__ __forceinline__ void load8(const T *row, int d0, int n, bool vec, float *x)
{
    if (vec) {
        if constexpr (sizeof(T) == 2) {
            unpack8<T>(*reinterpret_cast<const uint4 *>(row + d0), x);
        } else {
            float4 a = *reinterpret_cast<const float4 *>(row + d0);
            float4 b = *reinterpret_cast<const float4 *>(row + d0 + 4);
            x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
            x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < kChunk; j++)
        x[j] = d0 + j < n ? to_float<T>(row[d0 + j]) : 0.0f;
}

// N values x as TOut at p: in 16-byte stores when vec (p aligned to 16),
// else one element at a time, the first n.
template <typename TOut, int N>
__device__ __forceinline__ void store_n(TOut *p, const float *x, bool vec, int n)
{
    alignas(16) TOut o[N];
#pragma unroll
    for (int j = 0; j < N; j++)
        o[j] = from_float<TOut>(x[j]);
    if (vec) {
#pragma unroll
        for (int k = 0; k < (int)(N * sizeof(TOut) / 16); k++)
            reinterpret_cast<uint4 *>(p)[k] = reinterpret_cast<const uint4 *>(o)[k];
    } else {
#pragma unroll
        for (int j = 0; j < N; j++)
            if (j < n)
                p[j] = o[j];
    }
}

// --- codes ------------------------------------------------------------------------

// Four codes of an int8 format of y[0..3], y[0] in the lowest byte: each
// rounded by ROUND to an integer and saturated to [-128, 127] (U8 false:
// INT8) or [0, 255] (INT8_ASYM), NaN -> 0.
template <bool U8, int ROUND> __device__ __forceinline__ uint32_t int8x4(const float *y)
{
    const int a = f2i<ROUND>(y[0]), b = f2i<ROUND>(y[1]), c = f2i<ROUND>(y[2]),
              d = f2i<ROUND>(y[3]);
#if __CUDA_ARCH__ >= 720
    uint32_t hi, w; // cvt.pack.sat d, a, b, c: a in byte 1, b in byte 0, c above
    if constexpr (U8) {
        asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, 0;" : "=r"(hi) : "r"(d), "r"(c));
        asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, %3;"
            : "=r"(w)
            : "r"(b), "r"(a), "r"(hi));
    } else {
        asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, 0;" : "=r"(hi) : "r"(d), "r"(c));
        asm("cvt.pack.sat.s8.s32.b32 %0, %1, %2, %3;"
            : "=r"(w)
            : "r"(b), "r"(a), "r"(hi));
    }
    return w;
#else
    const int lo = U8 ? 0 : -128, top = U8 ? 255 : 127;
    const int q[4] = {min(max(a, lo), top), min(max(b, lo), top), min(max(c, lo), top),
                      min(max(d, lo), top)};
    return __byte_perm(__byte_perm(q[0], q[1], 0x0040), __byte_perm(q[2], q[3], 0x0040),
                       0x5410);
#endif
}

// The bytes of 8 values in an 8-bit format (FP8_E5M2, INT8, INT8_ASYM) of
// row parameters r: kvcal_kvfmt_code of each, value 0 in the lowest byte.
template <int FMT, int ROUND>
__device__ __forceinline__ uint2 codes8(const float *x, kvcal_kvfmt_row r)
{
    if constexpr (FMT == kE5m2) {
        return e5m2x8(x);
    } else {
        float y[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            y[j] = FMT == kInt8 ? x[j] * r.inv : (x[j] - r.zero) * r.inv;
        return make_uint2(int8x4<FMT == kAsym, ROUND>(y),
                          int8x4<FMT == kAsym, ROUND>(y + 4));
    }
}

// prmt.b32 (default mode: a selector nibble with bit 3 set fills its byte
// with the sign of the byte it picks).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// The sign masks e2m1x8 takes for 4 values (byte j 0xff when value j's sign
// bit is set, else 0): of the 16-bit values of words u0 (values 0, 1) and u1
// (2, 3), or of 4 floats.
__device__ __forceinline__ uint32_t signs4(uint32_t u0, uint32_t u1)
{
    return prmt(u0, u1, 0xfdb9);
}

__device__ __forceinline__ uint32_t signs4(const float *y)
{
    return prmt(prmt(__float_as_uint(y[0]), __float_as_uint(y[1]), 0xfbfb),
                prmt(__float_as_uint(y[2]), __float_as_uint(y[3]), 0xfbfb), 0x5410);
}

#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000
constexpr float kE2m1Scale = 1.0f; // e2m1x8 takes y: the hardware converts it
#else
constexpr float kE2m1Scale = 0x1p16f; // e2m1x8 takes y x 2^16 (kvcal_fp4_e2m1_r6)
#endif

// The e2m1 nibbles of y[0..7] (value j at bits 4j..4j+3), given as ys =
// y x kE2m1Scale: kvcal_fp4_e2m1_from_float of each. s0, s1: the sign masks
// (signs4) of values 0-3 and 4-7, which carry the signs of y wherever y is
// not NaN. maybe_nan: some y may be NaN (its nibble made 0).
__device__ __forceinline__ uint32_t e2m1x8(const float *ys, uint32_t s0, uint32_t s1,
                                           bool maybe_nan)
{
    uint32_t w = 0;
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000
    w = e2m1x8_cvt(ys, maybe_nan);
    (void)s0, (void)s1;
#else
    const uint32_t s[2] = {s0, s1};
    uint32_t t[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float *q = ys + 4 * h;
        const uint32_t lo = __nv_cvt_float2_to_fp8x2(
            make_float2(kvcal_fp4_e2m1_r6(q[0]), kvcal_fp4_e2m1_r6(q[1])), __NV_SATFINITE,
            __NV_E4M3);
        const uint32_t hi = __nv_cvt_float2_to_fp8x2(
            make_float2(kvcal_fp4_e2m1_r6(q[2]), kvcal_fp4_e2m1_r6(q[3])), __NV_SATFINITE,
            __NV_E4M3);
        // byte j: value j's magnitude code at bits 2-4, its sign at bit 5;
        // x 68 (x 4 + x 64, no carries) puts the nibbles of values 0 and 1 in
        // byte 1, of values 2 and 3 in byte 3
        t[h] = ((lo | hi << 16) | (s[h] & 0x20202020u)) * 68u;
    }
    w = __byte_perm(t[0], t[1], 0x7531);
    if (maybe_nan)
        w = clear_nan_nibbles(w, ys);
#endif
    return w;
}

// The nibbles of 8 values x of a block of decode-scale reciprocal inv_d.
__device__ __forceinline__ uint32_t nvfp4_codes8(const float *x, float inv_d,
                                                 bool maybe_nan)
{
    float ys[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        ys[j] = (x[j] * inv_d) * kE2m1Scale; // exact (a power of two), or beyond 6
    // y is NaN where x is, where x is +-Inf and inv_d 0, and where x is 0
    // and inv_d +Inf (a subnormal global scale)
    return e2m1x8(ys, signs4(ys), signs4(ys + 4), maybe_nan);
}

// --- values -------------------------------------------------------------------------

// N values of N bytes (b[0] holds values 0-3) of an 8-bit format of row
// parameters r: kvcal_kvfmt_value of each.
template <int FMT, int N>
__device__ __forceinline__ void values_n(const uint32_t *b, kvcal_kvfmt_row r, float *x)
{
    if constexpr (FMT == kE5m2) { // an e5m2 byte is the high byte of an fp16
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const uint32_t h2 = __byte_perm(b[i / 2], 0, i % 2 ? 0x3424 : 0x1404);
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h2));
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
        uint32_t nan = 0; // a byte with (b & 0x7f) > 0x7c gets its bit 7 set
#pragma unroll
        for (int i = 0; i < N / 4; i++)
            nan |= (b[i] & 0x7f7f7f7fu) + 0x03030303u;
        if (nan & 0x80808080u) // NaN as the reference decodes it
#pragma unroll
            for (int j = 0; j < N; j++) {
                const uint32_t q = b[j / 4] >> (8 * (j % 4)) & 0xffu;
                if ((q & 0x7fu) > 0x7cu)
                    x[j] = __uint_as_float((q & 0x80u) << 24 | 0x7fc00000u);
            }
    } else {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const uint32_t q = b[j / 4] >> (8 * (j % 4)) & 0xffu;
            x[j] = FMT == kInt8 ? (float)(int8_t)q * r.scale
                                : fmaf((float)q, r.scale, r.zero);
        }
    }
}

// N values as TOut of N e2m1 nibbles w (value j at bits 4j..4j+3) of a
// block of scale byte value e (e4m3_value) under global scale g:
// kvcal_fp4_e2m1_to_float(q) * (e * g). The nibble's magnitude bits at fp32
// bits 22..24 and its sign at 31 are the value times 2^-126. A NaN scale
// byte (a block of zeros under a subnormal g: 0 x Inf) makes the
// reference's products that byte's NaN (the host's fp32 arithmetic returns
// its NaN operand), the GPU's the canonical NaN 0x7fffffff: f32 outputs take
// e itself; f16 and bf16 round every NaN to 0x7fff alike.
template <typename TOut, int N>
__device__ __forceinline__ void nvfp4_values_n(uint32_t w, float e, float g, float *x)
{
    const float d = e * g;
#pragma unroll
    for (int j = 0; j < N; j++) {
        const uint32_t q = w >> (4 * j);
        x[j] = __uint_as_float((q & 7u) << 22 | (q & 8u) << 28) * 0x1p126f * d;
    }
    if constexpr (std::is_same<TOut, float>::value)
        if (e != e)
#pragma unroll
            for (int j = 0; j < N; j++)
                x[j] = e;
}

// Two floats rounded to 16-bit TOut (bf16 or f16) in one word, a in the
// low half: one cvt.rn.{bf16x2,f16x2}.f32, as from_float on each.
template <typename TOut> __device__ __forceinline__ uint32_t pack2(float a, float b)
{
    if constexpr (std::is_same<TOut, __nv_bfloat16>::value) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<const uint32_t *>(&p);
    } else {
        const __half2 p = __floats2half2_rn(a, b);
        return *reinterpret_cast<const uint32_t *>(&p);
    }
}

// 8 e2m1 nibbles w (value j at bits 4j..4j+3) of a block of decode scale d
// as 16-bit TOut into *o (value 0 lowest), by the block's byte tables
// (kernels/cuda/kvquant_fmt_nvfp4.h): the 8 products e2m1(m) x d as
// nvfp4_values_n computes them, rounded two an instruction, then 4 prmt a
// word. false (nothing written) where d is not finite: a product may be
// NaN there (0 x Inf, or d NaN), whose sign the tables cannot flip.
template <typename TOut>
__device__ __forceinline__ bool nvfp4_lookup8(uint32_t w, float d, uint4 *o)
{
    if (!(fabsf(d) < INFINITY))
        return false;
    const uint32_t p[4] = {pack2<TOut>(0.0f * d, 0.5f * d), pack2<TOut>(d, 1.5f * d),
                           pack2<TOut>(2.0f * d, 3.0f * d),
                           pack2<TOut>(4.0f * d, 6.0f * d)};
    uint32_t t[4], v[4];
    kvcal_nvfp4_tables(p, t);
    kvcal_nvfp4_lookup8(t, w, v);
    *o = make_uint4(v[0], v[1], v[2], v[3]);
    return true;
}

// --- row parameters -------------------------------------------------------------------

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

// The parameters of a dequantized row: static, or kept beside the cache.
template <int FMT>
__device__ __forceinline__ kvcal_kvfmt_row dequant_row(const FmtArgs &a, int kv, int h,
                                                       int64_t si)
{
    if (FMT == kE5m2)
        return kvcal_kvfmt_row{1.0f, 0.0f, 1.0f};
    if (a.scales[kv])
        return static_row(a, kv, h);
    return kvcal_kvfmt_row_make(a.scale_cache[kv][si],
                                a.zero_cache[kv] ? a.zero_cache[kv][si] : 0.0f);
}

// --- generic kernels ------------------------------------------------------------------

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
    w.t = row <= 0x7fffffffLL ? kvcal_kv_fastdiv_div(a.heads_div, (uint32_t)row)
                              : row / a.g.num_kv_heads;
    w.h = (int)(row - w.t * a.g.num_kv_heads);
    w.real = w.t < a.num_tokens;
    w.slot = w.real ? __ldg(a.slots + w.t) : -1;
    w.active = w.slot >= 0 && w.slot < a.g.capacity;
    w.block = w.boff = 0;
    if (w.active)
        kvcal_kv_slot_split(a.g, w.slot, &w.block, &w.boff);
    w.off = w.active ? kvcal_kv_cache_offset_at(a.g, w.block, w.boff, w.h) : 0;
    w.si = w.active ? kvcal_kv_scale_index_at(a.g, w.block, w.boff, w.h) : 0;
    return w;
}

// Stores the lane's chunks of one row: 8-bit codes, or NVFP4 nibbles and
// block scales (block amax shared with lane ^ 1: every lane calls it).
template <int FMT, int ROUND, int MAXC>
__device__ __forceinline__ void store_row(const FmtArgs &a, const Where &w, int kv,
                                          const float (&x)[MAXC][kChunk],
                                          kvcal_kvfmt_row r)
{
    uint8_t *dst = a.cache[kv] + w.off;
#pragma unroll
    for (int i = 0; i < MAXC; i++) {
        const int c = w.lane + i * a.group;
        const bool mine = w.active && c < a.nchunks;
        if constexpr (FMT == kNvfp4) {
            float m = 0.0f;
#pragma unroll
            for (int j = 0; j < kChunk; j++)
                m = fmaxf(m, kvcal_kv_finite_abs(x[i][j]));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1, a.group));
            uint8_t s;
            const uint32_t word = nvfp4_codes8(x[i], nvfp4_block(r, m, &s), true);
            if (!mine)
                continue;
            if (a.vec) {
                *reinterpret_cast<uint32_t *>(dst + c * 4) = word;
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++)
                    dst[c * 4 + k] = (uint8_t)(word >> (8 * k));
            }
            if ((c & 1) == 0)
                a.cache[kv][kvcal_kvfmt_nvfp4_scale_at(a.g, w.block, w.boff, w.h, c / 2,
                                                       kv)] = s;
        } else {
            if (!mine)
                continue;
            const uint2 b = codes8<FMT, ROUND>(x[i], r);
            if (a.vec) {
                *reinterpret_cast<uint2 *>(dst + c * kChunk) = b;
            } else {
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    if (c * kChunk + j < a.g.head_dim)
                        dst[c * kChunk + j] =
                            (uint8_t)((j < 4 ? b.x : b.y) >> (8 * (j & 3)));
            }
        }
    }
}

template <typename T, int FMT, int MAXC>
__global__ void __launch_bounds__(kThreads) fmt_quantize_kernel(FmtArgs a)
{
    const Where w = where_of(a);
    const int hd = a.g.head_dim;
    float x[2][MAXC][kChunk];
#pragma unroll
    for (int kv = 0; kv < 2; kv++) {
        const T *src = static_cast<const T *>(a.src[kv]) + (w.real ? w.t * a.ts[kv] : 0) +
                       (int64_t)w.h * a.hs[kv];
#pragma unroll
        for (int i = 0; i < MAXC; i++) {
            const int c = w.lane + i * a.group;
            if (w.real && c < a.nchunks)
                load8<T>(src, c * kChunk, hd, a.vec, x[kv][i]);
            else
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    x[kv][i][j] = 0.0f;
        }
    }
    kvcal_kvfmt_row r[2] = {{1.0f, 0.0f, 1.0f}, {1.0f, 0.0f, 1.0f}};
    if (FMT != kE5m2 && a.scales[0]) {
        r[0] = static_row(a, 0, w.h), r[1] = static_row(a, 1, w.h);
    } else if (FMT == kInt8) {
        float m[2] = {0.0f, 0.0f};
#pragma unroll
        for (int kv = 0; kv < 2; kv++)
#pragma unroll
            for (int i = 0; i < MAXC; i++)
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    m[kv] = fmaxf(m[kv], kvcal_kv_finite_abs(x[kv][i][j]));
        for (int kv = 0; kv < 2; kv++)
            r[kv] = kvcal_kvfmt_row_make(
                kvcal_kvfmt_int8_scale_dmul(group_max(m[kv], a.group)), 0.0f);
    } else if (FMT == kAsym) {
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            float mn = INFINITY, mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < MAXC; i++)
#pragma unroll
                for (int j = 0; j < kChunk; j++) {
                    const int d = (w.lane + i * a.group) * kChunk + j;
                    const float v = x[kv][i][j];
                    if (d < hd && kvcal_kv_finite_abs(v) == fabsf(v))
                        mn = fminf(mn, v), mx = fmaxf(mx, v);
                }
            r[kv] =
                kvcal_kvfmt_asym_row_dmul(group_min(mn, a.group), group_max(mx, a.group));
        }
    }
#pragma unroll
    for (int kv = 0; kv < 2; kv++) {
        if (FMT != kE5m2 && w.active && w.lane == 0)
            record(a, kv, w.si, r[kv]);
        if (a.rounding == kRz)
            store_row<FMT, kRz, MAXC>(a, w, kv, x[kv], r[kv]);
        else
            store_row<FMT, kRne, MAXC>(a, w, kv, x[kv], r[kv]);
    }
}

template <typename TOut, int FMT>
__global__ void __launch_bounds__(kThreads) fmt_dequantize_kernel(FmtArgs a)
{
    const Where w = where_of(a);
    if (!w.active)
        return;
    const int hd = a.g.head_dim;
    const kvcal_kvfmt_row r[2] = {dequant_row<FMT>(a, 0, w.h, w.si),
                                  dequant_row<FMT>(a, 1, w.h, w.si)};
    for (int c = w.lane; c < a.nchunks; c += a.group) {
        uint32_t b[2][2] = {{0, 0}, {0, 0}};
        float e[2] = {0.0f, 0.0f}; // NVFP4: the block's scale byte value
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            const uint8_t *in = a.cache[kv] + w.off;
            if constexpr (FMT == kNvfp4) {
                if (a.vec) {
                    b[kv][0] = *reinterpret_cast<const uint32_t *>(in + c * 4);
                } else {
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        b[kv][0] |= (uint32_t)in[c * 4 + k] << (8 * k);
                }
                e[kv] = e4m3_value(a.cache[kv][kvcal_kvfmt_nvfp4_scale_at(
                    a.g, w.block, w.boff, w.h, c / 2, kv)]);
            } else if (a.vec) {
                const uint2 u = *reinterpret_cast<const uint2 *>(in + c * kChunk);
                b[kv][0] = u.x, b[kv][1] = u.y;
            } else {
#pragma unroll
                for (int j = 0; j < kChunk; j++)
                    if (c * kChunk + j < hd)
                        b[kv][j / 4] |= (uint32_t)in[c * kChunk + j] << (8 * (j & 3));
            }
        }
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            float x[kChunk];
            if constexpr (FMT == kNvfp4)
                nvfp4_values_n<TOut, kChunk>(b[kv][0], e[kv], r[kv].scale, x);
            else
                values_n<FMT, kChunk>(b[kv], r[kv], x);
            TOut *out =
                static_cast<TOut *>(a.out[kv]) + (w.t * a.g.num_kv_heads + w.h) * hd;
            store_n<TOut, kChunk>(out + c * kChunk, x, a.vec, hd - c * kChunk);
        }
    }
}
// --- fast kernels ---------------------------------------------------------------------

template <typename T> constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;

// The 16-bit pattern of +Inf in T (bf16 or f16): magnitudes at or above it
// are not finite.
template <typename T> constexpr uint32_t kInf16 = kBf16<T> ? 0x7f80u : 0x7c00u;

// Two values of T in a word (bf16x2 or half2).
template <typename T>
using Pair = typename std::conditional<kBf16<T>, __nv_bfloat162, __half2>::type;

// The value of T whose bits are the low 16 of h.
template <typename T> __device__ __forceinline__ float value16(uint32_t h)
{
    if constexpr (kBf16<T>)
        return __uint_as_float(h << 16);
    else
        return __half2float(__ushort_as_half((unsigned short)h));
}

// The bits of x rounded to T (exact for a value of T or an infinity).
template <typename T> __device__ __forceinline__ uint32_t bits16(float x)
{
    if constexpr (kBf16<T>)
        return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    else
        return __half_as_ushort(__float2half_rn(x));
}

// Pairwise min and max of two words of T pairs; NaN dropped (the other
// value kept), as fminf and fmaxf.
template <typename T> __device__ __forceinline__ uint32_t pmin(uint32_t a, uint32_t b)
{
    const Pair<T> m = __hmin2(*reinterpret_cast<const Pair<T> *>(&a),
                              *reinterpret_cast<const Pair<T> *>(&b));
    return *reinterpret_cast<const uint32_t *>(&m);
}

template <typename T> __device__ __forceinline__ uint32_t pmax(uint32_t a, uint32_t b)
{
    const Pair<T> m = __hmax2(*reinterpret_cast<const Pair<T> *>(&a),
                              *reinterpret_cast<const Pair<T> *>(&b));
    return *reinterpret_cast<const uint32_t *>(&m);
}

// The 4 N words (16-bit pairs) of N 16-byte words.
template <int N> __device__ __forceinline__ void words(const uint4 *w, uint32_t *u)
{
#pragma unroll
    for (int c = 0; c < N; c++) {
        u[4 * c] = w[c].x;
        u[4 * c + 1] = w[c].y;
        u[4 * c + 2] = w[c].z;
        u[4 * c + 3] = w[c].w;
    }
}

// The largest magnitude of the 8 N values of w as a 16-bit pattern of T
// (non-negative bf16 and f16 values order as their bits): >= kInf16 when
// one of them is NaN or +-Inf, unless FINITE, which drops those
// (kvcal_kv_finite_abs: the finite absmax, 0 when none).
template <typename T, bool FINITE, int N>
__device__ __forceinline__ uint32_t mag16(const uint4 *w)
{
    uint32_t u[4 * N];
    words<N>(w, u);
    if constexpr (FINITE) {
        uint32_t m = 0;
#pragma unroll
        for (int i = 0; i < 8 * N; i++) {
            const uint32_t v = u[i / 2] >> (16 * (i % 2)) & 0x7fffu;
            m = v < kInf16<T> ? max(m, v) : m;
        }
        return m;
    } else {
        constexpr uint32_t k = 0x7fff7fffu; // 16-bit maxima, three words an instruction
        uint32_t m = u[0] & k;
#pragma unroll
        for (int i = 1; i + 1 < 4 * N; i += 2)
            m = __vmaxu2(__vmaxu2(m, u[i] & k), u[i + 1] & k);
        m = __vmaxu2(m, u[4 * N - 1] & k);
        return max(m & 0xffffu, m >> 16);
    }
}

// The finite min (*mn) and max (*mx) of the 8 N values of w as 16-bit
// patterns of T (+Inf / -Inf when none is finite): pairwise min / max
// seeded with the identities (NaN dropped), the finite values alone
// (finite_min_max8) when an infinity came out.
template <typename T, int N>
__device__ __forceinline__ void min_max16(const uint4 *w, uint32_t *mn, uint32_t *mx)
{
    uint32_t u[4 * N];
    words<N>(w, u);
    constexpr uint32_t inf = kInf16<T> * 0x10001u, ninf = inf | 0x80008000u;
    uint32_t lo = inf, hi = ninf;
#pragma unroll
    for (int i = 0; i < 4 * N; i += 2) {
        lo = pmin<T>(pmin<T>(lo, u[i]), u[i + 1]);
        hi = pmax<T>(pmax<T>(hi, u[i]), u[i + 1]);
    }
    lo = pmin<T>(lo, lo >> 16) & 0xffffu, hi = pmax<T>(hi, hi >> 16) & 0xffffu;
    // an infinity among them: the finite values alone
    if (lo == (kInf16<T> | 0x8000u) || hi == kInf16<T>) {
        float l = INFINITY, h = -INFINITY;
#pragma unroll
        for (int c = 0; c < N; c++) {
            float x[8], l1, h1;
            unpack8<T>(w[c], x);
            finite_min_max8(x, &l1, &h1);
            l = fminf(l, l1), h = fmaxf(h, h1);
        }
        lo = bits16<T>(l), hi = bits16<T>(h);
    }
    *mn = lo, *mx = hi;
}

// Where the fast quantization takes its parameters from: static ones
// loaded with each row (int8 formats, NVFP4 per head), computed from each
// row (the dynamic int8 formats), or NVFP4's one global scale per tensor,
// whose 128 reciprocal decode scales (one a block scale byte, for K and
// for V) each block of threads computes once, while its loads are in
// flight.
constexpr int kPerRow = 0, kDynamic = 1, kPerTensor = 2;

// Chunks of 8 values a lane, of K and of V (fast quantization).
constexpr int kQuantChunks = 4;

// Quantization of one row into FMT (rounding ROUND, parameters PAR) of
// 16-bit K/V with head_dim D (v3, bench/NOTES.md). D / 32 lanes a row: lane
// l holds chunks l + j D / 32 (j < 4, 8 values each) of the row's K and V,
// loaded, with the slot and static parameters, before any conversion; then
// every lane takes part in the row's shuffles (int8: the absmax of K and V
// as one word of two 16-bit maxima; int8-asym: their min and max as two
// words; NVFP4: the exchange of half-blocks), and the row is converted and
// stored. NVFP4: even lanes quantize K, odd lanes V, each loading its own
// tensor first, so that after one exchange with lane l ^ 1 a lane holds
// both halves of blocks l / 2 + j D / 64 of its tensor. Rows past the batch
// load zeros and are skipped. 32-bit offsets inside a cache block (the
// host checks they fit).
template <typename T, int D, int FMT, int ROUND, int PAR>
__global__ void __launch_bounds__(kFastThreads) fmt_quantize_fast_kernel(FmtArgs a)
{
    constexpr int kL = D / (8 * kQuantChunks); // lanes a row
    constexpr int kRowBytes = FMT == kNvfp4 ? D / 2 : D;
    constexpr int kS = D / KVCAL_KV_NVFP4_BLOCK; // NVFP4 block scales a row
    constexpr bool kRowParams = FMT != kE5m2 && PAR == kPerRow;
    constexpr bool kTable = FMT == kNvfp4 && PAR == kPerTensor;
    static_assert(kFastThreads == 128, "one thread a block scale byte of the table");
    __shared__ float inv_tab[kTable ? 2 : 1][kTable ? 128 : 1];
    const int lane = threadIdx.x & (kL - 1);
    const int own = FMT == kNvfp4 ? lane & 1 : 0; // NVFP4: the lane's tensor
    const uint32_t H = (uint32_t)a.g.num_kv_heads;
    const uint32_t row = blockIdx.x * (kFastThreads / kL) + threadIdx.x / kL;
    uint4 w[2][kQuantChunks]; // tensor (lane order: own first), chunk
    int64_t slot = -1;
    uint32_t head = 0;
    float ps[2] = {1.0f, 1.0f}, pz[2] = {0.0f, 0.0f}; // static scales and zero points
#pragma unroll
    for (int s = 0; s < 2; s++)
#pragma unroll
        for (int c = 0; c < kQuantChunks; c++)
            w[s][c] = make_uint4(0, 0, 0, 0);
    if (row < (uint32_t)(a.num_tokens * H)) {
        const uint32_t t = kvcal_kv_fastdiv_div(a.heads_div, row);
        head = row - t * H;
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const int kv = s ^ own;
            const T *p = static_cast<const T *>(a.src[kv]) + t * a.ts[kv] +
                         head * a.hs[kv] + lane * 8;
#pragma unroll
            for (int c = 0; c < kQuantChunks; c++)
                w[s][c] = *reinterpret_cast<const uint4 *>(p + c * (8 * kL));
        }
        slot = __ldg(a.slots + t);
        if constexpr (kRowParams)
#pragma unroll
            for (int s = 0; s < (FMT == kNvfp4 ? 1 : 2); s++) {
                const int kv = s ^ own, idx = (int)head * a.step;
                ps[s] = __ldg(a.scales[kv] + idx);
                if constexpr (FMT == kAsym)
                    pz[s] = __ldg(a.zeros[kv] + idx);
            }
    }
    kvcal_kvfmt_row rg = {1.0f, 0.0f, 1.0f}; // NVFP4 per tensor: the lane's global scale
    if constexpr (kTable) {
        const uint32_t q = threadIdx.x; // K's and V's entries of byte q
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            const float d = e4m3_value(q) * __ldg(a.scales[kv]);
            inv_tab[kv][q] = d > 0.0f ? 1.0f / d : 0.0f;
        }
        rg = kvcal_kvfmt_row_make(__ldg(a.scales[own]), 0.0f);
        __syncthreads();
    }
    // int8 dynamic: red[0] = the row's finite absmax of K (low half) and V
    // (high half); int8-asym dynamic: red[0] their finite min, red[1] their
    // finite max (16-bit patterns of T)
    uint32_t red[2] = {0, 0};
    if constexpr (FMT == kInt8 && PAR == kDynamic) {
        uint32_t mk = mag16<T, false, kQuantChunks>(w[0]),
                 mv = mag16<T, false, kQuantChunks>(w[1]);
        if (max(mk, mv) >= kInf16<T>) { // a NaN or an infinity: drop them
            mk = mag16<T, true, kQuantChunks>(w[0]);
            mv = mag16<T, true, kQuantChunks>(w[1]);
        }
        red[0] = mk | mv << 16;
#pragma unroll
        for (int off = kL / 2; off > 0; off >>= 1)
            red[0] = __vmaxu2(red[0], __shfl_xor_sync(0xffffffffu, red[0], off, kL));
    } else if constexpr (FMT == kAsym && PAR == kDynamic) {
        uint32_t lk, hk, lv, hv;
        min_max16<T, kQuantChunks>(w[0], &lk, &hk);
        min_max16<T, kQuantChunks>(w[1], &lv, &hv);
        red[0] = lk | lv << 16, red[1] = hk | hv << 16;
#pragma unroll
        for (int off = kL / 2; off > 0; off >>= 1) {
            red[0] = pmin<T>(red[0], __shfl_xor_sync(0xffffffffu, red[0], off, kL));
            red[1] = pmax<T>(red[1], __shfl_xor_sync(0xffffffffu, red[1], off, kL));
        }
    } else if constexpr (FMT == kNvfp4) { // the other tensor's chunks to lane ^ 1
#pragma unroll
        for (int c = 0; c < kQuantChunks; c++) {
            uint4 &o = w[1][c];
            o.x = __shfl_xor_sync(0xffffffffu, o.x, 1);
            o.y = __shfl_xor_sync(0xffffffffu, o.y, 1);
            o.z = __shfl_xor_sync(0xffffffffu, o.z, 1);
            o.w = __shfl_xor_sync(0xffffffffu, o.w, 1);
        }
    }
    if (!(slot >= 0 && slot < a.g.capacity))
        return;
    const uint32_t s = (uint32_t)slot; // < 2^31 (host check)
    const uint32_t bs = (uint32_t)a.g.block_size;
    const uint32_t block = kvcal_kv_fastdiv_div(a.bs_div, s);
    const uint32_t off = s - block * bs;
    const bool nhd = a.g.layout == KVCAL_CACHE_NHD;
    const uint32_t in_block = nhd ? off * H + head : head * bs + off;
    const int64_t base = (int64_t)block * a.g.block_stride;
    const int64_t at = base + (int64_t)(in_block * kRowBytes);
    // the index of (slot, head) in the per (token, head) arrays
    const int64_t si =
        nhd ? (int64_t)s * H + head : ((int64_t)block * H + head) * bs + off;
    if constexpr (FMT == kNvfp4) {
        const kvcal_kvfmt_row r = kTable ? rg : kvcal_kvfmt_row_make(ps[0], 0.0f);
        if (lane < 2) // lane 0 records K's global scale, lane 1 V's
            record(a, own, si, r);
        uint8_t *cache = a.cache[own];
        // the lane's block scales, of blocks b0 + c D / 64, lie at sc0 + c
        // dsc in the cache block (K's a row apart; V's swizzled a row of the
        // scale region apart: linear in c either way)
        const int b0 = lane / 2;
        int sc[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int tk, sk, tv, sv; // K's place and V's, chosen without a branch
            kvcal_kvfmt_nvfp4_swizzle((int)bs, kS, (int)off, b0 + k * (kL / 2), 0, &tk,
                                      &sk);
            kvcal_kvfmt_nvfp4_swizzle((int)bs, kS, (int)off, b0 + k * (kL / 2), 1, &tv,
                                      &sv);
            const uint32_t st = own ? tv : tk, ss = own ? sv : sk;
            sc[k] = (int)((nhd ? st * H + head : head * bs + st) * kS + ss);
        }
        const int64_t sc0 = base + (int64_t)(bs * H * (D / 2) + sc[0]);
        const int dsc = sc[1] - sc[0];
#pragma unroll
        for (int c = 0; c < kQuantChunks; c++) {
            const uint4 q[2] = {w[0][c], w[1][c]}; // own chunk, lane ^ 1's
            const int b = b0 + c * (kL / 2);       // the block
            uint32_t m16 = mag16<T, false, 2>(q);
            const bool nonfinite = m16 >= kInf16<T>;
            if (nonfinite)
                m16 = mag16<T, true, 2>(q);
            uint8_t sb;
            float inv_d;
            if constexpr (kTable) {
                sb = e4m3((value16<T>(m16) * (1.0f / KVCAL_FP4_E2M1_MAX)) * r.inv);
                inv_d = inv_tab[own][sb];
            } else {
                inv_d = nvfp4_block(r, value16<T>(m16), &sb);
            }
            // x * (inv_d x kE2m1Scale) is e2m1x8's input while that product
            // is finite (kvcal_fp4_e2m1_r6); NaN products (x NaN, x +-Inf with
            // inv_d 0) and larger inv_d (x 0 with inv_d +Inf among them) take
            // the division's way
            const float inv_s = inv_d * kE2m1Scale;
            const bool slow = nonfinite || !(inv_d < 0x1p112f);
            uint32_t code[2];
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float x[8], ys[8];
                unpack8<T>(q[k], x);
                if (!slow) {
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        ys[j] = x[j] * inv_s;
                    code[k] =
                        e2m1x8(ys, signs4(q[k].x, q[k].y), signs4(q[k].z, q[k].w), false);
                } else {
                    code[k] = nvfp4_codes8(x, inv_d, true);
                }
            }
            // even lanes hold the block's first half, odd lanes its second
            *reinterpret_cast<uint2 *>(cache + at + b * 8) =
                own ? make_uint2(code[1], code[0]) : make_uint2(code[0], code[1]);
            cache[sc0 + c * dsc] = sb;
        }
    } else {
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            kvcal_kvfmt_row r = {1.0f, 0.0f, 1.0f};
            if constexpr (FMT == kInt8 && PAR == kDynamic)
                r = kvcal_kvfmt_row_make(kvcal_kvfmt_int8_scale_dmul(
                                             value16<T>(red[0] >> (16 * kv) & 0xffffu)),
                                         0.0f);
            else if constexpr (FMT == kAsym && PAR == kDynamic)
                r = kvcal_kvfmt_asym_row_dmul(value16<T>(red[0] >> (16 * kv) & 0xffffu),
                                              value16<T>(red[1] >> (16 * kv) & 0xffffu));
            else if constexpr (kRowParams)
                r = kvcal_kvfmt_row_make(ps[kv], pz[kv]);
#pragma unroll
            for (int c = 0; c < kQuantChunks; c++) {
                float x[8];
                unpack8<T>(w[kv][c], x);
                *reinterpret_cast<uint2 *>(a.cache[kv] + at + (c * kL + lane) * 8) =
                    codes8<FMT, ROUND>(x, r);
            }
            // lane 0 records K's parameters, lane 1 V's, static ones too (as
            // the reference, where the caches keep them)
            if (FMT != kE5m2 && lane == kv)
                record(a, kv, si, r);
        }
    }
}

// Loads N bytes (1 <= N <= 8, a power of two) at p, aligned to N, into
// words b[0..1], the first byte lowest.
template <int N> __device__ __forceinline__ void load_bytes(const uint8_t *p, uint32_t *b)
{
    if constexpr (N == 8) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        b[0] = u.x, b[1] = u.y;
    } else if constexpr (N == 4) {
        b[0] = *reinterpret_cast<const uint32_t *>(p);
    } else {
        b[0] = *reinterpret_cast<const uint16_t *>(p);
    }
}

// Fast dequantization of FMT into TOut, head_dim D: D / 16 lanes per row,
// each converting 16 values of it as kChunks pieces of one 16-byte store,
// piece c of lane l at column c * D / kChunks + l * kPiece (each store
// instruction of a group writes whole 32-byte sectors, as e4m3's
// kv_dequantize_fast_kernel); kFastRows rows per group of lanes, their slot
// loads first, then all their cache and parameter loads, then the
// conversions and stores.
template <typename TOut, int D, int FMT>
__global__ void __launch_bounds__(kFastThreads) fmt_dequantize_fast_kernel(FmtArgs a)
{
    constexpr int kLanes = D / 16;
    constexpr int kPiece = 16 / (int)sizeof(TOut); // values per 16-byte store
    constexpr int kChunks = 16 / kPiece;           // stores per lane and row
    constexpr int kBytes = FMT == kNvfp4 ? kPiece / 2 : kPiece; // cache bytes a piece
    constexpr int kRowBytes = FMT == kNvfp4 ? D / 2 : D;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)a.g.num_kv_heads;
    const int64_t rows = a.num_tokens * H; // < 2^31 (host check)
    const int64_t first =
        ((int64_t)blockIdx.x * (kFastThreads / kLanes) + threadIdx.x / kLanes) *
        kFastRows;
    int64_t slot[kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++)
        slot[i] = first + i < rows
                      ? __ldg(a.slots +
                              kvcal_kv_fastdiv_div(a.heads_div, (uint32_t)(first + i)))
                      : -1;
    uint32_t b[2][kFastRows][kChunks][2];
    float scale[2][kFastRows][kChunks]; // NVFP4: the piece's block scale byte value
    kvcal_kvfmt_row r[2][kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            r[kv][i] = kvcal_kvfmt_row{1.0f, 0.0f, 1.0f};
#pragma unroll
            for (int c = 0; c < kChunks; c++)
                b[kv][i][c][0] = b[kv][i][c][1] = 0, scale[kv][i][c] = 0.0f;
        }
        if (!(slot[i] >= 0 && slot[i] < a.g.capacity))
            continue;
        const uint32_t row = (uint32_t)(first + i);
        const int head = (int)(row - kvcal_kv_fastdiv_div(a.heads_div, row) * H);
        const uint32_t s = (uint32_t)slot[i];
        const uint32_t block = kvcal_kv_fastdiv_div(a.bs_div, s);
        const uint32_t off = s - block * (uint32_t)a.g.block_size;
        const uint32_t in_block = a.g.layout == KVCAL_CACHE_NHD
                                      ? off * H + head
                                      : head * (uint32_t)a.g.block_size + off;
        const int64_t base = (int64_t)block * a.g.block_stride;
        const int64_t at = base + (int64_t)in_block * kRowBytes;
        const int64_t si = kvcal_kv_scale_index_at(a.g, block, off, head);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            r[kv][i] = dequant_row<FMT>(a, kv, head, si);
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                const int col = c * (D / kChunks) + lane * kPiece;
                load_bytes<kBytes>(a.cache[kv] + at + col * kBytes / kPiece, b[kv][i][c]);
                if constexpr (FMT == kNvfp4)
                    scale[kv][i][c] = e4m3_value(
                        a.cache[kv][base + nvfp4_scale_in_block<D>(
                                               (uint32_t)a.g.block_size, H,
                                               a.g.layout == KVCAL_CACHE_NHD, off,
                                               (uint32_t)head, col / 16, kv)]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        if (!(slot[i] >= 0 && slot[i] < a.g.capacity))
            continue;
#pragma unroll
        for (int kv = 0; kv < 2; kv++)
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                TOut *out = static_cast<TOut *>(a.out[kv]) + (first + i) * D +
                            c * (D / kChunks) + lane * kPiece;
                if constexpr (FMT == kNvfp4 && sizeof(TOut) == 2) {
                    uint4 o;
                    if (nvfp4_lookup8<TOut>(b[kv][i][c][0],
                                            scale[kv][i][c] * r[kv][i].scale, &o)) {
                        *reinterpret_cast<uint4 *>(out) = o;
                        continue;
                    }
                }
                float x[kPiece];
                if constexpr (FMT == kNvfp4)
                    nvfp4_values_n<TOut, kPiece>(b[kv][i][c][0], scale[kv][i][c],
                                                 r[kv][i].scale, x);
                else
                    values_n<FMT, kPiece>(b[kv][i][c], r[kv][i], x);
                store_n<TOut, kPiece>(out, x, true, kPiece);
            }
    }
}

// --- NVFP4's staged dequantization (v5 in bench/NOTES.md) -----------------------------

constexpr int kStageTiles = 4; // tiles a block, all staged at its start

// 4 or 8 bytes global -> shared, through L1 (V's scale rows are read by the
// 4 slots of their group).
template <int N> __device__ __forceinline__ void cp_async_ca(void *dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "n"(N));
}

// Waits until at most n of this thread's groups of copies are pending.
__device__ __forceinline__ void cp_async_wait_n(int n)
{
    if (n >= 3)
        cp_async_wait<3>();
    else if (n == 2)
        cp_async_wait<2>();
    else if (n == 1)
        cp_async_wait<1>();
    else
        cp_async_wait<0>();
}

// A block's shared memory, head_dim D: kRows rows in kStageTiles tiles of
// kTileRows (1,024 16-byte stores a tile), the packed values of K and V,
// K's scale row and V's 4 scale rows (the slot's swizzle group; row 0 alone
// when V is not swizzled) of each row, and where each row sits.
template <int D> struct StagedTile {
    static constexpr int kS = D / KVCAL_KV_NVFP4_BLOCK; // scale bytes a row
    static constexpr int kTileRows = 4096 / D;
    static constexpr int kRows = kTileRows * kStageTiles;
    static constexpr int kUnit = kS < 8 ? kS : 8; // bytes a scale copy
    alignas(16) uint8_t data[2][kRows][D / 2];
    alignas(16) uint8_t ks[kRows][kS];
    alignas(16) uint8_t vs[kRows][4][kS];
    int64_t base[kRows]; // the cache block's offset, -1: a row not written
    uint32_t at[kRows], kso[kRows], vso[kRows]; // offsets in the cache block
    uint32_t o3[kRows];                         // V swizzled: slot offset & 3
    float g[2][kRows];                          // K's and V's global scales
};

// NVFP4 into 16-bit TOut, head_dim D (caches and block stride aligned to
// 16 bytes): each block stages the packed values and block scales of its
// kRows rows into shared memory with asynchronous copies issued at once, a
// group a tile, the packed values as 16-byte chunks of whole rows; then
// decodes tile after tile as its group lands (the byte tables, v3's
// arithmetic for a non-finite decode scale), 16 bytes a lane, the lanes of
// a warp storing 512 contiguous bytes.
template <typename TOut, int D>
__global__ void __launch_bounds__(kFastThreads) nvfp4_dequantize_staged_kernel(FmtArgs a)
{
    using T = StagedTile<D>;
    constexpr int kS = T::kS, kTileRows = T::kTileRows, kRows = T::kRows;
    constexpr int kChunks = D / 32; // 16-byte chunks of a row's packed values
    constexpr int kRowPieces = D / 8;
    __shared__ T sm;
    const int tid = threadIdx.x;
    const uint32_t H = (uint32_t)a.g.num_kv_heads, bs = (uint32_t)a.g.block_size;
    const bool nhd = a.g.layout == KVCAL_CACHE_NHD, swz = bs % 4 == 0;
    const int nv = swz ? 4 : 1; // V's scale rows a row
    const uint32_t vstep = nhd ? H * kS : kS;
    const int64_t rows = a.num_tokens * H; // < 2^31 (host check)
    const int64_t first = (int64_t)blockIdx.x * kRows;
    for (int r = tid; r < kRows; r += kFastThreads) {
        const int64_t row = first + r;
        const int64_t slot =
            row < rows ? __ldg(a.slots + kvcal_kv_fastdiv_div(a.heads_div, (uint32_t)row))
                       : -1;
        sm.base[r] = -1;
        if (!(slot >= 0 && slot < a.g.capacity))
            continue;
        const uint32_t head =
            (uint32_t)row - kvcal_kv_fastdiv_div(a.heads_div, (uint32_t)row) * H;
        const uint32_t block = kvcal_kv_fastdiv_div(a.bs_div, (uint32_t)slot);
        const uint32_t off = (uint32_t)slot - block * bs;
        sm.base[r] = (int64_t)block * a.g.block_stride;
        sm.at[r] = (nhd ? off * H + head : head * bs + off) * (D / 2);
        sm.kso[r] = nvfp4_scale_row_in_block<D>(bs, H, nhd, off, head);
        sm.vso[r] = nvfp4_scale_row_in_block<D>(bs, H, nhd, swz ? off & ~3u : off, head);
        sm.o3[r] = swz ? off & 3u : 0u;
        const int64_t si = kvcal_kv_scale_index_at(a.g, block, off, (int)head);
#pragma unroll
        for (int kv = 0; kv < 2; kv++)
            sm.g[kv][r] = dequant_row<kNvfp4>(a, kv, (int)head, si).scale;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kStageTiles; k++) {
        const int r0 = k * kTileRows;
        for (int i = tid; i < 2 * kTileRows * kChunks; i += kFastThreads) {
            const int c = i % kChunks, r = r0 + i / kChunks % kTileRows,
                      kv = i / (kChunks * kTileRows);
            if (sm.base[r] >= 0)
                cp_async16(&sm.data[kv][r][c * 16],
                           a.cache[kv] + sm.base[r] + sm.at[r] + c * 16, true);
        }
        constexpr int kUnits = kS / T::kUnit; // copies a scale row
        for (int i = tid; i < 5 * kTileRows * kUnits; i += kFastThreads) {
            const int u = i % kUnits, j = i / kUnits / kTileRows,
                      r = r0 + i / kUnits % kTileRows; // j 0: K's row, 1-4: V's
            if (sm.base[r] < 0 || j > nv)
                continue;
            const uint8_t *src =
                j == 0 ? a.cache[0] + sm.base[r] + sm.kso[r]
                       : a.cache[1] + sm.base[r] + sm.vso[r] + (uint32_t)(j - 1) * vstep;
            uint8_t *dst = j == 0 ? sm.ks[r] : sm.vs[r][j - 1];
            cp_async_ca<T::kUnit>(dst + u * T::kUnit, src + u * T::kUnit);
        }
        cp_async_commit();
    }
#pragma unroll 1
    for (int k = 0; k < kStageTiles; k++) {
        cp_async_wait_n(kStageTiles - 1 - k);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < 8; j++) { // 512 stores a tensor a tile
            const int kv = j / 4, u = (j % 4) * kFastThreads + tid;
            const int r = k * kTileRows + u / kRowPieces, p = u % kRowPieces;
            if (sm.base[r] < 0)
                continue;
            const uint32_t w =
                *reinterpret_cast<const uint32_t *>(&sm.data[kv][r][p * 4]);
            int t = 0, ss = p / 2;
            if (kv)
                kvcal_kvfmt_nvfp4_swizzle((int)bs, kS, (int)sm.o3[r], p / 2, 1, &t, &ss);
            const float e = e4m3_value(kv ? sm.vs[r][t][ss] : sm.ks[r][ss]);
            TOut *out = static_cast<TOut *>(a.out[kv]) + (first + r) * D + p * 8;
            uint4 o;
            if (nvfp4_lookup8<TOut>(w, e * sm.g[kv][r], &o)) {
                *reinterpret_cast<uint4 *>(out) = o;
            } else {
                float x[8];
                nvfp4_values_n<TOut, 8>(w, e, sm.g[kv][r], x);
                store_n<TOut, 8>(out, x, true, 8);
            }
        }
    }
}

// One thread a value: what the kernels store for x[i] under unit
// parameters (kvcal_kvfmt_encode_launch).
__global__ void fmt_encode_kernel(int format, int rounding, const float *x, uint8_t *out,
                                  int64_t n)
{
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n)
        return;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
        v[j] = i + j < n ? x[i + j] : 0.0f;
    const kvcal_kvfmt_row unit = {1.0f, 0.0f, 1.0f};
    uint2 b = make_uint2(0, 0);
    if (format == kNvfp4) {
        const uint32_t w = nvfp4_codes8(v, 1.0f, true);
        b.x = __byte_perm(w & 0x0f0f0f0fu, w >> 4 & 0x0f0f0f0fu, 0x5140);
        b.y = __byte_perm(w & 0x0f0f0f0fu, w >> 4 & 0x0f0f0f0fu, 0x7362);
    } else if (format == kE5m2) {
        b = codes8<kE5m2, kRne>(v, unit);
    } else if (format == kInt8) {
        b = rounding == kRz ? codes8<kInt8, kRz>(v, unit) : codes8<kInt8, kRne>(v, unit);
    } else {
        b = rounding == kRz ? codes8<kAsym, kRz>(v, unit) : codes8<kAsym, kRne>(v, unit);
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (i + j < n)
            out[i + j] = (uint8_t)((j < 4 ? b.x : b.y) >> (8 * (j & 3)));
}
// --- host side ------------------------------------------------------------------------

bool dequantize_fast(const FmtArgs &a, int format)
{
    return fast_shape(a, format) && aligned(a.out[0], 16) && aligned(a.out[1], 16);
}

unsigned grid_of(const FmtArgs &a)
{
    int64_t rows = a.num_tokens * a.g.num_kv_heads;
    int64_t per_block = kThreads / a.group;
    return (unsigned)((rows + per_block - 1) / per_block);
}

// Calls f.run<T, FMT>() for the element type T of `dtype` (the inputs of a
// quantization, the outputs of a dequantization) and the format.
template <typename T, typename F> kvcal_status by_format(int format, const F &f)
{
    switch (format) {
    case kE5m2:
        return f.template run<T, kE5m2>();
    case kInt8:
        return f.template run<T, kInt8>();
    case kAsym:
        return f.template run<T, kAsym>();
    default:
        return f.template run<T, kNvfp4>();
    }
}

template <typename F> kvcal_status dispatch(kvcal_dtype dtype, int format, const F &f)
{
    switch (dtype) {
    case KVCAL_DTYPE_F32:
        return by_format<float>(format, f);
    case KVCAL_DTYPE_F16:
        return by_format<__half>(format, f);
    default:
        return by_format<__nv_bfloat16>(format, f);
    }
}

struct QuantLaunch {
    const FmtArgs &a;
    bool fast;
    cudaStream_t s;

    template <typename T, int FMT, int ROUND, int PAR> void fast_d() const
    {
        const int d = a.g.head_dim;
        if (d == 64)
            fmt_quantize_fast_kernel<T, 64, FMT, ROUND, PAR>
                <<<fast_grid(a, 64 / 32, 1), kFastThreads, 0, s>>>(a);
        else if (d == 128)
            fmt_quantize_fast_kernel<T, 128, FMT, ROUND, PAR>
                <<<fast_grid(a, 128 / 32, 1), kFastThreads, 0, s>>>(a);
        else
            fmt_quantize_fast_kernel<T, 256, FMT, ROUND, PAR>
                <<<fast_grid(a, 256 / 32, 1), kFastThreads, 0, s>>>(a);
    }

    template <typename T, int FMT> kvcal_status run() const
    {
        if constexpr (sizeof(T) == 2) {
            if (fast) {
                if constexpr (FMT == kInt8 || FMT == kAsym) {
                    const bool dyn = !a.scales[0];
                    if (a.rounding == kRz)
                        dyn ? fast_d<T, FMT, kRz, kDynamic>()
                            : fast_d<T, FMT, kRz, kPerRow>();
                    else
                        dyn ? fast_d<T, FMT, kRne, kDynamic>()
                            : fast_d<T, FMT, kRne, kPerRow>();
                } else if constexpr (FMT == kNvfp4) {
                    a.step ? fast_d<T, FMT, kRne, kPerRow>()
                           : fast_d<T, FMT, kRne, kPerTensor>();
                } else {
                    fast_d<T, FMT, kRne, kPerRow>();
                }
                CUDA_TRY(cudaGetLastError());
                return KVCAL_OK;
            }
        }
        if (a.per_lane > 1)
            fmt_quantize_kernel<T, FMT, kMaxChunks><<<grid_of(a), kThreads, 0, s>>>(a);
        else
            fmt_quantize_kernel<T, FMT, 1><<<grid_of(a), kThreads, 0, s>>>(a);
        CUDA_TRY(cudaGetLastError());
        return KVCAL_OK;
    }
};

// Whether a fast NVFP4 dequantization takes the staged kernel: its 16-byte
// copies need the caches and the block stride aligned to 16 bytes.
bool dequantize_staged(const FmtArgs &a, int format)
{
    return format == kNvfp4 && aligned(a.cache[0], 16) && aligned(a.cache[1], 16) &&
           a.g.block_stride % 16 == 0;
}

// Launches the staged kernel of head_dim D, its shared memory preferred
// over L1 so that 8 blocks fit an SM.
template <typename TOut, int D> void launch_staged(const FmtArgs &a, cudaStream_t s)
{
    static const cudaError_t pref = cudaFuncSetAttribute(
        nvfp4_dequantize_staged_kernel<TOut, D>,
        cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    (void)pref; // a hint: the kernel runs without it
    const int64_t rows = a.num_tokens * a.g.num_kv_heads;
    const int64_t per_block = StagedTile<D>::kRows;
    nvfp4_dequantize_staged_kernel<TOut, D>
        <<<(unsigned)((rows + per_block - 1) / per_block), kFastThreads, 0, s>>>(a);
}

struct DequantLaunch {
    const FmtArgs &a;
    bool fast, staged;
    cudaStream_t s;

    template <typename TOut, int FMT> kvcal_status run() const
    {
        const int d = a.g.head_dim;
        if constexpr (FMT == kNvfp4 && sizeof(TOut) == 2) {
            if (fast && staged) {
                if (d == 64)
                    launch_staged<TOut, 64>(a, s);
                else if (d == 128)
                    launch_staged<TOut, 128>(a, s);
                else
                    launch_staged<TOut, 256>(a, s);
                CUDA_TRY(cudaGetLastError());
                return KVCAL_OK;
            }
        }
        if (!fast)
            fmt_dequantize_kernel<TOut, FMT><<<grid_of(a), kThreads, 0, s>>>(a);
        else if (d == 64)
            fmt_dequantize_fast_kernel<TOut, 64, FMT>
                <<<fast_grid(a, 64 / 16, kFastRows), kFastThreads, 0, s>>>(a);
        else if (d == 128)
            fmt_dequantize_fast_kernel<TOut, 128, FMT>
                <<<fast_grid(a, 128 / 16, kFastRows), kFastThreads, 0, s>>>(a);
        else
            fmt_dequantize_fast_kernel<TOut, 256, FMT>
                <<<fast_grid(a, 256 / 16, kFastRows), kFastThreads, 0, s>>>(a);
        CUDA_TRY(cudaGetLastError());
        return KVCAL_OK;
    }
};

// The arguments of a dequantization (checked), or why not.
kvcal_status dequantize_args(const char *fn, const kvcal_kv_batch *batch,
                             const kvcal_kv_cache *cache, const kvcal_kv_qparams *params,
                             void *k_out, void *v_out, kvcal_dtype out_dtype, FmtArgs *a)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_dequantize_check(fn, batch, cache, params, k_out, v_out,
                                                   out_dtype, &g);
    if (st != KVCAL_OK)
        return st;
    *a = make_args(batch, cache, params, g);
    a->out[0] = k_out, a->out[1] = v_out;
    a->vec = cache_aligned(*a, params->format, params->format == kNvfp4 ? 4 : 8) &&
             aligned(k_out, 16) && aligned(v_out, 16);
    return KVCAL_OK;
}

} // namespace

extern "C" kvcal_status kvcal_kv_quantize_fmt_launch(const kvcal_kv_batch *batch,
                                                     const kvcal_kv_cache *cache,
                                                     const kvcal_kv_qparams *params,
                                                     struct CUstream_st *stream)
{
    if (is_e4m3(params))
        return params->k_scale || params->v_scale
                   ? kvcal_kv_quantize_static_launch(batch, cache, params->granularity,
                                                     params->k_scale, params->v_scale,
                                                     stream)
                   : kvcal_kv_quantize_dynamic_launch(batch, cache, stream);
    FmtArgs a;
    kvcal_status st =
        quantize_args("kvcal_kv_quantize_fmt_launch", batch, cache, params, &a);
    if (st != KVCAL_OK || batch->num_tokens == 0)
        return st;
    return dispatch(
        batch->dtype, params->format,
        QuantLaunch{a, quantize_fast(a, batch->dtype, params->format), stream});
}

extern "C" kvcal_status
kvcal_kv_dequantize_fmt_launch(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                               const kvcal_kv_qparams *params, void *k_out, void *v_out,
                               kvcal_dtype out_dtype, struct CUstream_st *stream)
{
    if (is_e4m3(params)) {
        kvcal_kv_cache c = *cache;
        if (params->k_scale)
            c.k_scale = c.v_scale = NULL;
        return kvcal_kv_dequantize_launch(batch, &c, params->granularity, params->k_scale,
                                          params->v_scale, k_out, v_out, out_dtype,
                                          stream);
    }
    FmtArgs a;
    kvcal_status st = dequantize_args("kvcal_kv_dequantize_fmt_launch", batch, cache,
                                      params, k_out, v_out, out_dtype, &a);
    if (st != KVCAL_OK || batch->num_tokens == 0)
        return st;
    return dispatch(out_dtype, params->format,
                    DequantLaunch{a, dequantize_fast(a, params->format),
                                  dequantize_staged(a, params->format), stream});
}

// --- internal helpers (kernels/cuda/kvquant_fmt.h) -------------------------------------

extern "C" kvcal_status kvcal_kvfmt_encode_launch(kvcal_kv_format format,
                                                  kvcal_kv_rounding rounding,
                                                  const float *x, uint8_t *out, int64_t n,
                                                  struct CUstream_st *stream)
{
    if (n < 0 || (n > 0 && (!x || !out)) || format < KVCAL_KV_FORMAT_FP8_E5M2 ||
        format > KVCAL_KV_FORMAT_NVFP4)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_kvfmt_encode_launch: bad arguments");
    const int64_t threads = (n + 7) / 8;
    if (threads == 0)
        return KVCAL_OK;
    fmt_encode_kernel<<<(unsigned)((threads + kThreads - 1) / kThreads), kThreads, 0,
                        stream>>>((int)format, (int)rounding, x, out, n);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

extern "C" int kvcal_kv_quantize_fmt_fast_applies(const kvcal_kv_batch *batch,
                                                  const kvcal_kv_cache *cache,
                                                  const kvcal_kv_qparams *params)
{
    FmtArgs a;
    return !is_e4m3(params) &&
           quantize_args("kvcal_kv_quantize_fmt_fast_applies", batch, cache, params,
                         &a) == KVCAL_OK &&
           quantize_fast(a, batch->dtype, params->format);
}

extern "C" int kvcal_kv_dequantize_fmt_fast_applies(const kvcal_kv_batch *batch,
                                                    const kvcal_kv_cache *cache,
                                                    const kvcal_kv_qparams *params,
                                                    const void *k_out, const void *v_out)
{
    FmtArgs a;
    return !is_e4m3(params) &&
           dequantize_args("kvcal_kv_dequantize_fmt_fast_applies", batch, cache, params,
                           (void *)k_out, (void *)v_out, KVCAL_DTYPE_F32,
                           &a) == KVCAL_OK &&
           dequantize_fast(a, params->format);
}

extern "C" int kvcal_kv_dequantize_fmt_staged_applies(const kvcal_kv_batch *batch,
                                                      const kvcal_kv_cache *cache,
                                                      const kvcal_kv_qparams *params,
                                                      const void *k_out,
                                                      const void *v_out,
                                                      kvcal_dtype out_dtype)
{
    FmtArgs a;
    return out_dtype != KVCAL_DTYPE_F32 && !is_e4m3(params) &&
           dequantize_args("kvcal_kv_dequantize_fmt_staged_applies", batch, cache, params,
                           (void *)k_out, (void *)v_out, out_dtype, &a) == KVCAL_OK &&
           dequantize_fast(a, params->format) && dequantize_staged(a, params->format);
}
