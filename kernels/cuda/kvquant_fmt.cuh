// kernels/cuda/kvquant_fmt.cuh: what the CUDA kernels of the cache formats
// beyond e4m3 (kernels/cuda/kvquant_fmt.cu) share with the earlier fast
// kernel bench/kvquant times beside them (bench/kvquant_fmt_v2.cuh): the
// kernels' arguments, row parameters and NVFP4 block scales, the scale
// addressing, and the host checks that choose a fast kernel. CUDA sources
// only.
#ifndef KVCAL_KERNELS_CUDA_KVQUANT_FMT_CUH
#define KVCAL_KERNELS_CUDA_KVQUANT_FMT_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kvquant.h"

namespace kvfmt
{

constexpr int kChunk = 8;         // values per chunk (generic kernels)
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

// y rounded to an integer (NaN -> 0, saturating at the int32 range).
template <int ROUND> __device__ __forceinline__ int f2i(float y)
{
    return ROUND == kRz ? __float2int_rz(y) : __float2int_rn(y);
}

// The e5m2 bytes of x[0..7] (kvcal_fp8_e5m2_from_float, value 0 in the
// lowest byte): two values an instruction.
__device__ __forceinline__ uint2 e5m2x8(const float *x)
{
    uint32_t p[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        p[i] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]),
                                        __NV_SATFINITE, __NV_E5M2);
    return make_uint2(p[0] | p[1] << 16, p[2] | p[3] << 16);
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

#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000
// The e2m1 nibbles of y[0..7] (value j at bits 4j..4j+3) by the
// conversion of family-specific sm_100 builds and later
// (cvt.rn.satfinite.e2m1x2.f32: kvcal_fp4_e2m1_from_float but for NaN,
// made 0 first when maybe_nan).
__device__ __forceinline__ uint32_t e2m1x8_cvt(const float *y, bool maybe_nan)
{
    uint32_t w = 0;
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
    return w;
}
#endif

// e2m1 nibbles w (value j at bits 4j..4j+3) with those of the NaN y[j]
// made 0, as the reference encodes NaN.
__device__ __forceinline__ uint32_t clear_nan_nibbles(uint32_t w, const float *y)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (y[j] != y[j])
            w &= ~(0xfu << (4 * j));
    return w;
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

// The offset inside a cache block of row t (a slot offset) of head's
// NVFP4 scale region (head_dim D / 16 bytes), in blocks of bs slots of H
// heads, layout NHD when nhd.
template <int D>
__device__ __forceinline__ uint32_t nvfp4_scale_row_in_block(uint32_t bs, uint32_t H,
                                                             bool nhd, uint32_t t,
                                                             uint32_t head)
{
    const uint32_t row = nhd ? t * H + head : head * bs + t;
    return bs * H * (D / 2) + row * (D / KVCAL_KV_NVFP4_BLOCK);
}

// nvfp4_scale_at's offset inside the cache block, in 32-bit arithmetic (a
// block's bytes fit: fast_shape): block scale s of kv at (off, head) in
// blocks of bs slots of H heads, layout NHD when nhd, head_dim D.
template <int D>
__device__ __forceinline__ uint32_t nvfp4_scale_in_block(uint32_t bs, uint32_t H,
                                                         bool nhd, uint32_t off,
                                                         uint32_t head, int s, int kv)
{
    int t, ss;
    kvcal_kvfmt_nvfp4_swizzle((int)bs, D / KVCAL_KV_NVFP4_BLOCK, (int)off, s, kv, &t,
                              &ss);
    return nvfp4_scale_row_in_block<D>(bs, H, nhd, (uint32_t)t, head) + (uint32_t)ss;
}

// --- host side ------------------------------------------------------------------------

inline bool aligned(const void *p, int64_t bytes)
{
    return ((uintptr_t)p % (uintptr_t)bytes) == 0;
}

inline int elem_bytes(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 ? 4 : 2;
}

inline FmtArgs make_args(const kvcal_kv_batch *b, const kvcal_kv_cache *c,
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
inline bool cache_aligned(const FmtArgs &a, int format, int64_t word)
{
    const int64_t chunk = format == kNvfp4 ? 4 : kChunk;
    return a.g.head_dim % kChunk == 0 && a.g.row_bytes % chunk == 0 &&
           a.g.block_stride % word == 0 && aligned(a.cache[0], word) &&
           aligned(a.cache[1], word);
}

// 1 when K and V rows take 16-byte loads.
inline bool input_aligned(const FmtArgs &a, kvcal_dtype dtype)
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
inline bool fast_shape(const FmtArgs &a, int format)
{
    const int d = a.g.head_dim;
    const int64_t lim = 0x7fffffffLL;
    return (d == 64 || d == 128 || d == 256) &&
           a.num_tokens >= KVCAL_KV_FAST_MIN_TOKENS && cache_aligned(a, format, 8) &&
           a.num_tokens <= lim / a.g.num_kv_heads && a.g.capacity <= lim &&
           (int64_t)a.g.block_size * a.g.num_kv_heads * d <= lim;
}

inline bool quantize_fast(const FmtArgs &a, kvcal_dtype dtype, int format)
{
    return dtype != KVCAL_DTYPE_F32 && fast_shape(a, format) && input_aligned(a, dtype);
}

// Blocks of kFastThreads threads for groups of `lanes` lanes taking `rows`
// rows each.
inline unsigned fast_grid(const FmtArgs &a, int lanes, int rows)
{
    const int64_t groups = (a.num_tokens * a.g.num_kv_heads + rows - 1) / rows;
    const int64_t per_block = kFastThreads / lanes;
    return (unsigned)((groups + per_block - 1) / per_block);
}

inline bool is_e4m3(const kvcal_kv_qparams *p)
{
    return p && p->format == KVCAL_KV_FORMAT_FP8_E4M3 && !p->k_zero_cache &&
           !p->v_zero_cache;
}

// The arguments of a quantization (checked), or why not.
inline kvcal_status quantize_args(const char *fn, const kvcal_kv_batch *batch,
                                  const kvcal_kv_cache *cache,
                                  const kvcal_kv_qparams *params, FmtArgs *a)
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

} // namespace kvfmt

#endif
