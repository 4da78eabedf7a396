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
// - int8 codes by one F2I (NaN -> 0, saturating) and an integer clamp:
//   kvcal_int_code, which clamps before rounding (the same for integer
//   bounds);
// - e2m1 by cvt.rn.satfinite.e2m1x2.f32 where the target has it
//   (family-specific sm_100 builds and later), else by fp32 adds
//   (kvcal_fp4_e2m1_mag22); a NaN is made 0 first, as the reference does;
// - the dynamic scales' divisions by 127 and 255 as double products
//   (kvcal_kvfmt_int8_scale_dmul, kvcal_kvfmt_asym_row_dmul);
// - decoding: e5m2 bytes as the high bytes of fp16 values, e2m1 bits as an
//   fp32 subnormal times 2^126 (both exact).
// The tests compare every kernel with the reference and each conversion on
// every 16-bit input (tests/test_kvquant_fmt_cuda.c,
// kvcal_kvfmt_encode_launch).
//
// Two kernels each way. The fast one takes large batches of 16-bit K/V
// with head_dim 64, 128 or 256 (a prefill), shaped as e4m3's
// (kernels/cuda/kvquant.cu): head_dim / 8 lanes per (token, head) row, 4
// consecutive rows per group of lanes, whose K, V and slot loads are all
// issued before any conversion, format and rounding fixed at compile time;
// its dequantization converts 16 values a lane and writes whole 32-byte
// sectors. The generic one takes the rest (decode steps, f32, other
// head_dim, misaligned strides): one group of G lanes per row (G = the next
// power of two of the row's chunks of 8 values, at most 32), each lane
// holding up to 4 chunks of K and of V, both loaded before either is
// converted.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/status.h"
}
#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/kvquant.h"
#include "kernels/cuda/kvquant_fmt.h"

#define CUDA_TRY(call)                                                                   \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            return kvcal_fail(KVCAL_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__,       \
                              #call, cudaGetErrorString(err_));                          \
    } while (0)

namespace
{

constexpr int kThreads = 256;
constexpr int kChunk = 8;                                       // values per chunk
constexpr int kMaxChunks = KVCAL_KV_MAX_HEAD_DIM / kChunk / 32; // per lane
constexpr int kFastRows = 4;      // rows per group of lanes (fast kernels)
constexpr int kFastThreads = 128; // as e4m3's fast kernels
constexpr int kRne = KVCAL_KV_ROUND_NEAREST_EVEN, kRz = KVCAL_KV_ROUND_TOWARD_ZERO;
constexpr int kE5m2 = KVCAL_KV_FORMAT_FP8_E5M2, kInt8 = KVCAL_KV_FORMAT_INT8,
              kAsym = KVCAL_KV_FORMAT_INT8_ASYM, kNvfp4 = KVCAL_KV_FORMAT_NVFP4;

struct FmtArgs {
    const void *src[2];   // (num_tokens, H, head_dim) strided, K and V
    int64_t ts[2], hs[2]; // token and head strides, elements
    const int64_t *slots; // (num_tokens)
    int64_t num_tokens;
    kvcal_kv_geom g;
    kvcal_kv_fastdiv heads_div, bs_div; // by num_kv_heads, block_size
    uint8_t *cache[2];                  // K and V caches
    float *scale_cache[2];              // per (token, head) scales, or NULL
    float *zero_cache[2];               // per (token, head) zero points, or NULL
    const float *scales[2];             // static scales (index h * step), NULL = dynamic
    const float *zeros[2];              // static zero points
    int step;
    int rounding;
    int group, nchunks, per_lane; // generic kernels
    bool vec;                     // generic kernels: 16-byte inputs / outputs
    void *out[2];                 // (num_tokens, H, head_dim) contiguous (dequantization)
};

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

// y rounded to an integer (NaN -> 0, saturating at the int32 range).
template <int ROUND> __device__ __forceinline__ int f2i(float y)
{
    return ROUND == kRz ? __float2int_rz(y) : __float2int_rn(y);
}

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
        uint32_t p[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            p[i] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]),
                                            __NV_SATFINITE, __NV_E5M2);
        return make_uint2(p[0] | p[1] << 16, p[2] | p[3] << 16);
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
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float a = y[2 * i], b = y[2 * i + 1];
        if (maybe_nan)
            a = a == a ? a : 0.0f, b = b == b ? b : 0.0f;
        unsigned short two;
        asm("{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %2, %1; mov.b16 %0, {t, 0}; }"
            : "=h"(two)
            : "f"(a), "f"(b));
        w |= (uint32_t)two << (8 * i);
    }
#else
#pragma unroll
    for (int j = 0; j < 8; j++)
        w |= (kvcal_fp4_e2m1_mag22(y[j]) >> 22 | (__float_as_uint(y[j]) >> 28 & 8u))
             << (4 * j);
    if (maybe_nan)
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (y[j] != y[j])
                w &= ~(0xfu << (4 * j));
#endif
    return w;
}

// e4m3 byte of x (>= 0 here): kvcal_fp8_e4m3_from_float.
__device__ __forceinline__ uint8_t e4m3(float x)
{
    return (uint8_t)__nv_cvt_float2_to_fp8x2(make_float2(x, 0.0f), __NV_SATFINITE,
                                             __NV_E4M3);
}

// The value of e4m3 byte q: kvcal_fp8_e4m3_to_float(q), exactly (through
// fp16; NaN as the reference decodes it).
__device__ __forceinline__ float e4m3_value(uint32_t q)
{
    const __half h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
    return (q & 0x7fu) == 0x7fu ? __uint_as_float((q & 0x80u) << 24 | 0x7fc00000u)
                                : __half2float(h);
}

// NVFP4 block of finite absmax amax under global scale r.scale: its e4m3
// scale byte (*s) and the reciprocal of its decode scale (0 when that is
// 0), as kvcal_kvfmt_nvfp4_block and kvcal_kvfmt_nvfp4_code.
__device__ __forceinline__ float nvfp4_block(kvcal_kvfmt_row r, float amax, uint8_t *s)
{
    *s = e4m3((amax * (1.0f / KVCAL_FP4_E2M1_MAX)) * r.inv);
    const float d = e4m3_value(*s) * r.scale;
    return d > 0.0f ? 1.0f / d : 0.0f;
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

// N values of N e2m1 nibbles w (value j at bits 4j..4j+3) of a block of
// decode scale d: kvcal_fp4_e2m1_to_float(q) * d. The nibble's magnitude
// bits at fp32 bits 22..24 and its sign at 31 are the value times 2^-126.
template <int N>
__device__ __forceinline__ void nvfp4_values_n(uint32_t w, float d, float *x)
{
#pragma unroll
    for (int j = 0; j < N; j++) {
        const uint32_t q = w >> (4 * j);
        x[j] = __uint_as_float((q & 7u) << 22 | (q & 8u) << 28) * 0x1p126f * d;
    }
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

// The static parameters of head h's rows of kv.
__device__ __forceinline__ kvcal_kvfmt_row static_row(const FmtArgs &a, int kv, int h)
{
    const int i = h * a.step;
    return kvcal_kvfmt_row_make(a.scales[kv][i], a.zeros[kv] ? a.zeros[kv][i] : 0.0f);
}

// The finite min (*mn) and max (*mx) of 8 values (+Inf / -Inf when none).
// fminf and fmaxf drop NaN; an infinity is dropped only when one was seen.
__device__ __forceinline__ void finite_min_max8(const float *x, float *mn, float *mx)
{
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; j++)
        lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    if (lo == -INFINITY || hi == INFINITY) {
        lo = INFINITY, hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (kvcal_kv_finite_abs(x[j]) == fabsf(x[j]))
                lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    }
    *mn = lo, *mx = hi;
}

// Records the parameters of a written row when the caches keep them.
__device__ __forceinline__ void record(const FmtArgs &a, int kv, int64_t si,
                                       kvcal_kvfmt_row r)
{
    if (a.scale_cache[kv])
        a.scale_cache[kv][si] = r.scale;
    if (a.zero_cache[kv])
        a.zero_cache[kv][si] = r.zero;
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

// The NVFP4 scale byte offset of (block, off, head), block scale s of kv,
// in a geometry g of head_dim D (a constant here: its divisions are shifts).
template <int D>
__device__ __forceinline__ int64_t nvfp4_scale_at(kvcal_kv_geom g, int64_t block,
                                                  int64_t off, int head, int s, int kv)
{
    g.head_dim = D;
    g.row_bytes = D / 2;
    return kvcal_kvfmt_nvfp4_scale_at(g, block, off, head, s, kv);
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
        float dec[2] = {0.0f, 0.0f};
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
                dec[kv] = e4m3_value(a.cache[kv][kvcal_kvfmt_nvfp4_scale_at(
                              a.g, w.block, w.boff, w.h, c / 2, kv)]) *
                          r[kv].scale;
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
                nvfp4_values_n<kChunk>(b[kv][0], dec[kv], x);
            else
                values_n<FMT, kChunk>(b[kv], r[kv], x);
            TOut *out =
                static_cast<TOut *>(a.out[kv]) + (w.t * a.g.num_kv_heads + w.h) * hd;
            store_n<TOut, kChunk>(out + c * kChunk, x, a.vec, hd - c * kChunk);
        }
    }
}

// --- fast kernels ---------------------------------------------------------------------

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
    float scale[2][kFastRows][kChunks]; // NVFP4: the piece's block decode scale
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
        const int64_t at =
            (int64_t)block * a.g.block_stride + (int64_t)in_block * kRowBytes;
        const int64_t si = kvcal_kv_scale_index_at(a.g, block, off, head);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            r[kv][i] = dequant_row<FMT>(a, kv, head, si);
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                const int col = c * (D / kChunks) + lane * kPiece;
                load_bytes<kBytes>(a.cache[kv] + at + col * kBytes / kPiece, b[kv][i][c]);
                if constexpr (FMT == kNvfp4)
                    scale[kv][i][c] = e4m3_value(a.cache[kv][nvfp4_scale_at<D>(
                        a.g, block, off, head, col / 16, kv)]);
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
                float x[kPiece];
                if constexpr (FMT == kNvfp4)
                    nvfp4_values_n<kPiece>(b[kv][i][c][0],
                                           scale[kv][i][c] * r[kv][i].scale, x);
                else
                    values_n<FMT, kPiece>(b[kv][i][c], r[kv][i], x);
                store_n<TOut, kPiece>(static_cast<TOut *>(a.out[kv]) + (first + i) * D +
                                          c * (D / kChunks) + lane * kPiece,
                                      x, true, kPiece);
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

bool aligned(const void *p, int64_t bytes)
{
    return ((uintptr_t)p % (uintptr_t)bytes) == 0;
}

int elem_bytes(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 ? 4 : 2;
}

FmtArgs make_args(const kvcal_kv_batch *b, const kvcal_kv_cache *c,
                  const kvcal_kv_qparams *p, kvcal_kv_geom g)
{
    FmtArgs a = {};
    a.src[0] = b->k, a.src[1] = b->v;
    a.ts[0] = b->k_token_stride, a.ts[1] = b->v_token_stride;
    a.hs[0] = b->k_head_stride, a.hs[1] = b->v_head_stride;
    a.slots = b->slot_mapping;
    a.num_tokens = b->num_tokens;
    a.g = g;
    a.heads_div = kvcal_kv_fastdiv_make((uint32_t)g.num_kv_heads);
    a.bs_div = kvcal_kv_fastdiv_make((uint32_t)g.block_size);
    a.cache[0] = c->k, a.cache[1] = c->v;
    a.scale_cache[0] = c->k_scale, a.scale_cache[1] = c->v_scale;
    a.zero_cache[0] = p->k_zero_cache, a.zero_cache[1] = p->v_zero_cache;
    a.scales[0] = p->k_scale, a.scales[1] = p->v_scale;
    a.zeros[0] = p->k_zero, a.zeros[1] = p->v_zero;
    a.step = p->granularity == KVCAL_GRANULARITY_HEAD;
    a.rounding = (int)p->rounding;
    a.nchunks = (g.head_dim + kChunk - 1) / kChunk;
    a.group = 1;
    while (a.group < 32 && a.group < a.nchunks)
        a.group <<= 1;
    a.per_lane = (a.nchunks + a.group - 1) / a.group;
    return a;
}

// 1 when the caches take word stores: `word` bytes at every chunk (8 bytes,
// NVFP4's 4) of every row.
bool cache_aligned(const FmtArgs &a, int format, int64_t word)
{
    const int64_t chunk = format == kNvfp4 ? 4 : kChunk;
    return a.g.head_dim % kChunk == 0 && a.g.row_bytes % chunk == 0 &&
           a.g.block_stride % word == 0 && aligned(a.cache[0], word) &&
           aligned(a.cache[1], word);
}

// 1 when K and V rows take 16-byte loads.
bool input_aligned(const FmtArgs &a, kvcal_dtype dtype)
{
    const int64_t v = 16 / elem_bytes(dtype);
    bool ok = true;
    for (int kv = 0; kv < 2; kv++)
        ok = ok && aligned(a.src[kv], 16) && a.ts[kv] % v == 0 && a.hs[kv] % v == 0;
    return ok;
}

// Whether the fast kernels take a call: head_dim 64, 128 or 256, a batch
// of at least KVCAL_KV_FAST_MIN_TOKENS tokens, caches aligned to 8 bytes,
// 32-bit rows, slots and block offsets.
bool fast_shape(const FmtArgs &a, int format)
{
    const int d = a.g.head_dim;
    const int64_t lim = 0x7fffffffLL;
    return (d == 64 || d == 128 || d == 256) &&
           a.num_tokens >= KVCAL_KV_FAST_MIN_TOKENS && cache_aligned(a, format, 8) &&
           a.num_tokens <= lim / a.g.num_kv_heads && a.g.capacity <= lim &&
           (int64_t)a.g.block_size * a.g.num_kv_heads * d <= lim;
}

bool quantize_fast(const FmtArgs &a, kvcal_dtype dtype, int format)
{
    return dtype != KVCAL_DTYPE_F32 && fast_shape(a, format) && input_aligned(a, dtype);
}

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

// Blocks of the fast kernels: one group of kFastRows rows per D / lanes_per
// of kFastThreads threads.
unsigned fast_grid(const FmtArgs &a, int lanes)
{
    const int64_t groups = (a.num_tokens * a.g.num_kv_heads + kFastRows - 1) / kFastRows;
    const int64_t per_block = kFastThreads / lanes;
    return (unsigned)((groups + per_block - 1) / per_block);
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

    template <typename T, int FMT, int ROUND> void fast_d() const
    {
        const int d = a.g.head_dim;
        if (d == 64)
            fmt_quantize_fast_kernel<T, 64, FMT, ROUND>
                <<<fast_grid(a, 64 / 8), kFastThreads, 0, s>>>(a);
        else if (d == 128)
            fmt_quantize_fast_kernel<T, 128, FMT, ROUND>
                <<<fast_grid(a, 128 / 8), kFastThreads, 0, s>>>(a);
        else
            fmt_quantize_fast_kernel<T, 256, FMT, ROUND>
                <<<fast_grid(a, 256 / 8), kFastThreads, 0, s>>>(a);
    }

    template <typename T, int FMT> kvcal_status run() const
    {
        if constexpr (sizeof(T) == 2) {
            if (fast) {
                if ((FMT == kInt8 || FMT == kAsym) && a.rounding == kRz)
                    fast_d<T, FMT, (FMT == kInt8 || FMT == kAsym) ? kRz : kRne>();
                else
                    fast_d<T, FMT, kRne>();
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

struct DequantLaunch {
    const FmtArgs &a;
    bool fast;
    cudaStream_t s;

    template <typename TOut, int FMT> kvcal_status run() const
    {
        const int d = a.g.head_dim;
        if (!fast)
            fmt_dequantize_kernel<TOut, FMT><<<grid_of(a), kThreads, 0, s>>>(a);
        else if (d == 64)
            fmt_dequantize_fast_kernel<TOut, 64, FMT>
                <<<fast_grid(a, 64 / 16), kFastThreads, 0, s>>>(a);
        else if (d == 128)
            fmt_dequantize_fast_kernel<TOut, 128, FMT>
                <<<fast_grid(a, 128 / 16), kFastThreads, 0, s>>>(a);
        else
            fmt_dequantize_fast_kernel<TOut, 256, FMT>
                <<<fast_grid(a, 256 / 16), kFastThreads, 0, s>>>(a);
        CUDA_TRY(cudaGetLastError());
        return KVCAL_OK;
    }
};

bool is_e4m3(const kvcal_kv_qparams *p)
{
    return p && p->format == KVCAL_KV_FORMAT_FP8_E4M3 && !p->k_zero_cache &&
           !p->v_zero_cache;
}

// The arguments of a quantization (checked), or why not.
kvcal_status quantize_args(const char *fn, const kvcal_kv_batch *batch,
                           const kvcal_kv_cache *cache, const kvcal_kv_qparams *params,
                           FmtArgs *a)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_check(fn, batch, cache, params, 1, &g);
    if (st != KVCAL_OK)
        return st;
    *a = make_args(batch, cache, params, g);
    a->vec = cache_aligned(*a, params->format, params->format == kNvfp4 ? 4 : 8) &&
             input_aligned(*a, batch->dtype);
    return KVCAL_OK;
}

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
                    DequantLaunch{a, dequantize_fast(a, params->format), stream});
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
