// kernels/cuda/kvquant.cu: CUDA online FP8 KV quantization
// (include/kvcal_quant.h). Each kernel matches its CPU reference in
// kernels/cpu/kvquant_ref.c byte for byte: same argument checks, same
// addressing (kernels/cpu/kvquant_ref.h), same fp32 arithmetic (x * (1 /
// scale), scale rule, scaler fold), and an e4m3 rounding that the tests
// compare with core/fp8.h on every fp16 and bf16 input.
//
// Work split: the K and V rows of one (token, head) are handled by a group
// of G lanes (G = next power of two of the row's vector count, at most 32),
// each lane loading 16 bytes per vector of K and of V before it converts
// either. Rows whose input or cache is not aligned for that take a
// one-element path. Large batches of 16-bit K/V with head_dim 64, 128 or
// 256 take a fast kernel instead (4 rows per group, shapes fixed at compile
// time; see kv_quantize_fast_kernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/status.h"
}
#include "kernels/cpu/kvquant_ref.h"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/kvquant.h"
#include "kernels/kv_device_memory.h"

#define CUDA_TRY(call)                                                                   \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            return kvcal_fail(                                                           \
                err_ == cudaErrorMemoryAllocation ? KVCAL_ERR_DEVICE_MEMORY              \
                                                  : KVCAL_ERR_CUDA,                      \
                "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_));   \
    } while (0)

namespace
{

constexpr int kThreads = 256;

// --- element loads and e4m3 stores ----------------------------------------

// Loads VEC consecutive elements of type T at p (aligned to VEC elements) as floats.
template <typename T, int VEC> struct Loader;

template <> struct Loader<float, 4> {
    static __device__ void load(const void *p, float *x)
    {
        float4 v = *reinterpret_cast<const float4 *>(p);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    }
};
template <> struct Loader<__half, 8> {
    static __device__ void load(const void *p, float *x)
    {
        uint4 v = *reinterpret_cast<const uint4 *>(p);
        const __half2 *h = reinterpret_cast<const __half2 *>(&v);
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(h[i]);
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    }
};
template <> struct Loader<__nv_bfloat16, 8> {
    static __device__ void load(const void *p, float *x)
    {
        uint4 v = *reinterpret_cast<const uint4 *>(p);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; i++) {
            x[2 * i] = __uint_as_float(w[i] << 16);
            x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};
template <typename T> struct Loader<T, 1> {
    static __device__ void load(const void *p, float *x)
    {
        x[0] = static_cast<float>(*reinterpret_cast<const T *>(p));
    }
};

// Two floats to two e4m3 bytes (low byte = a): RNE, saturating, NaN -> 0x7f.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b)
{
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

// Stores VEC e4m3 bytes of x * inv at p (aligned to VEC bytes).
template <int VEC>
__device__ __forceinline__ void store_e4m3(uint8_t *p, const float *x, float inv)
{
    if constexpr (VEC == 8) {
        uint2 o;
        o.x = e4m3x2(x[0] * inv, x[1] * inv) | e4m3x2(x[2] * inv, x[3] * inv) << 16;
        o.y = e4m3x2(x[4] * inv, x[5] * inv) | e4m3x2(x[6] * inv, x[7] * inv) << 16;
        *reinterpret_cast<uint2 *>(p) = o;
    } else if constexpr (VEC == 4) {
        *reinterpret_cast<uint32_t *>(p) =
            e4m3x2(x[0] * inv, x[1] * inv) | e4m3x2(x[2] * inv, x[3] * inv) << 16;
    } else {
        *p = (uint8_t)e4m3x2(x[0] * inv, 0.0f);
    }
}

// --- row groups -------------------------------------------------------------

struct Rows {
    const void *src[2];      // (num_tokens, H, head_dim) strided, K and V
    int64_t token_stride[2]; // elements
    int64_t head_stride[2];  // elements
    const int64_t *slots;    // (num_tokens)
    int64_t num_tokens;
    kvcal_kv_geom g;
    int group; // lanes per row, power of two <= 32
    int nvec;  // vectors per row
    kvcal_kv_fastdiv heads_div, bs_div; // by num_kv_heads, block_size
};

// Where a lane's group sits: row = token * H + head, for K and V alike.
struct Lane {
    int64_t t;    // token
    int h;        // head
    int lane;     // lane inside its group
    bool real;    // t < num_tokens: the input row exists
    int64_t slot; // cache slot, valid when active
    bool active;  // a real token with a slot inside the cache
};

// The slot is loaded here but only waited for where it is used, so that the
// input loads (which need only `real`) are in flight at the same time.
__device__ __forceinline__ Lane lane_of(const Rows &r, int64_t row)
{
    Lane l;
    l.lane = threadIdx.x & (r.group - 1);
    if (row <= 0xffffffffLL)
        l.t = (uint32_t)row / (uint32_t)r.g.num_kv_heads;
    else
        l.t = row / r.g.num_kv_heads;
    l.h = (int)(row - l.t * r.g.num_kv_heads);
    l.real = l.t < r.num_tokens;
    l.slot = l.real ? __ldg(r.slots + l.t) : -1;
    l.active = l.slot >= 0 && l.slot < r.g.capacity;
    return l;
}

// Max over the lanes of one group; every lane of the warp must call it.
__device__ __forceinline__ float group_max(float v, int group)
{
    for (int off = group >> 1; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off, group));
    return v;
}

// Vectors per lane that cover head_dim <= 1024 with 32 lanes.
template <int VEC> constexpr int max_vectors()
{
    return KVCAL_KV_MAX_HEAD_DIM / (32 * VEC);
}

// Loads the lane's (at most MAXV) vectors of its K and V rows into x[kv];
// amax[kv] gets their finite absmax. K and V loads are all issued first.
template <typename T, int VEC, int MAXV>
__device__ __forceinline__ void load_rows(const Rows &r, const Lane &l,
                                          float (&x)[2][MAXV][VEC], float (&amax)[2])
{
#pragma unroll
    for (int kv = 0; kv < 2; kv++) {
        const T *src = static_cast<const T *>(r.src[kv]) + l.t * r.token_stride[kv] +
                       (int64_t)l.h * r.head_stride[kv];
#pragma unroll
        for (int i = 0; i < MAXV; i++) {
            int v = l.lane + i * r.group;
            if (l.real && v < r.nvec)
                Loader<T, VEC>::load(src + (int64_t)v * VEC, x[kv][i]);
        }
    }
#pragma unroll
    for (int kv = 0; kv < 2; kv++) {
        amax[kv] = 0.0f;
#pragma unroll
        for (int i = 0; i < MAXV; i++)
            if (l.real && l.lane + i * r.group < r.nvec)
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    amax[kv] = fmaxf(amax[kv], kvcal_kv_finite_abs(x[kv][i][j]));
    }
}

// --- quantize (static, dynamic, scaler step) --------------------------------

struct Quant {
    Rows rows;
    uint8_t *dst[2];     // K and V caches
    float *scale_out[2]; // per (token, head) scales, or NULL
    const float
        *scales[2]; // static per-head scales (index h * scale_step), NULL = dynamic
    int scale_step;
};

template <typename T, int VEC, int MAXV>
__global__ void __launch_bounds__(kThreads) kv_quantize_kernel(Quant q)
{
    const Rows &r = q.rows;
    int64_t row = (int64_t)blockIdx.x * (kThreads / r.group) + threadIdx.x / r.group;
    Lane l = lane_of(r, row);
    float x[2][MAXV][VEC], amax[2];
    load_rows<T, VEC, MAXV>(r, l, x, amax);
    float scale[2];
#pragma unroll
    for (int kv = 0; kv < 2; kv++)
        scale[kv] = q.scales[kv] ? q.scales[kv][l.h * q.scale_step]
                                 : kvcal_scale_from_absmax(group_max(amax[kv], r.group));
    if (!l.active)
        return;
    const int64_t off = kvcal_kv_cache_offset(r.g, l.slot, l.h);
#pragma unroll
    for (int kv = 0; kv < 2; kv++) {
        float inv = 1.0f / scale[kv];
#pragma unroll
        for (int i = 0; i < MAXV; i++) {
            int v = l.lane + i * r.group;
            if (v < r.nvec)
                store_e4m3<VEC>(q.dst[kv] + off + (int64_t)v * VEC, x[kv][i], inv);
        }
        if (q.scale_out[kv] && l.lane == 0)
            q.scale_out[kv][kvcal_kv_scale_index(r.g, l.slot, l.h)] = scale[kv];
    }
}

// --- scaler step: per-head absmax of the batch, folded by the last block ----

__device__ __forceinline__ void atomic_max_nonneg(float *addr, float v)
{
    atomicMax(reinterpret_cast<int *>(addr), __float_as_int(v));
}

// End of a block of a scaler's reduction: adds the block's per-head absmax
// head_max (2, H) and its count of valid tokens (both shared) to the scaler, and
// the last block to finish folds the step into the scales (the reference's
// kvcal_kv_scaler_fold), records which scales grew in s.grown / s.any_grown
// (all 0 for a step without a valid token) and resets the step's sums.
// Every thread of the block calls it.
__device__ void fold_block_end(const kvcal_kv_scaler &s, const float *head_max,
                               const unsigned int *tokens, int H)
{
    __shared__ bool last;
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * H; i += blockDim.x)
        if (head_max[i] > 0.0f)
            atomic_max_nonneg(&s.batch_absmax[i / H][i % H], head_max[i]);
    if (threadIdx.x == 0 && *tokens)
        atomicAdd(reinterpret_cast<unsigned long long *>(s.batch_tokens),
                  (unsigned long long)*tokens);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(s.blocks_done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int64_t steps = __ldcg(reinterpret_cast<const long long *>(s.steps));
    const bool valid = __ldcg(reinterpret_cast<const long long *>(s.batch_tokens)) > 0;
    int grew = 0;
    for (int i = threadIdx.x; i < 2 * H; i += blockDim.x) {
        int k = i / H, h = i - k * H;
        const float before = __ldcg(&s.scale[k][h]);
        if (valid)
            kvcal_kv_scaler_fold((int)s.mode, s.ema_alpha, steps,
                                 __ldcg(&s.batch_absmax[k][h]), &s.state[k][h],
                                 &s.scale[k][h]);
        s.grown[k][h] = s.scale[k][h] != before;
        grew |= s.scale[k][h] != before;
        s.batch_absmax[k][h] = 0.0f;
    }
    grew = __syncthreads_or(grew);
    if (threadIdx.x == 0) {
        *s.any_grown = grew != 0;
        *s.steps = steps + valid;
        *s.batch_tokens = 0;
        *s.blocks_done = 0;
    }
}

struct Fold {
    Rows rows;
    kvcal_kv_scaler scaler; // a copy of the handle: device pointers and mode
    int64_t rows_total;     // num_tokens * H
};

template <typename T, int VEC, int MAXV>
__global__ void __launch_bounds__(kThreads) kv_scaler_fold_kernel(Fold f)
{
    extern __shared__ float head_max[]; // (2, H)
    __shared__ unsigned int tokens;
    const Rows &r = f.rows;
    const int H = r.g.num_kv_heads;
    for (int i = threadIdx.x; i < 2 * H; i += kThreads)
        head_max[i] = 0.0f;
    if (threadIdx.x == 0)
        tokens = 0;
    __syncthreads();
    const int rows_per_block = kThreads / r.group;
    for (int64_t base = (int64_t)blockIdx.x * rows_per_block; base < f.rows_total;
         base += (int64_t)gridDim.x * rows_per_block) {
        Lane l = lane_of(r, base + threadIdx.x / r.group);
        float x[2][MAXV][VEC], amax[2];
        load_rows<T, VEC, MAXV>(r, l, x, amax);
        amax[0] = group_max(amax[0], r.group);
        amax[1] = group_max(amax[1], r.group);
        if (l.active && l.lane == 0) {
            atomic_max_nonneg(&head_max[l.h], amax[0]);
            atomic_max_nonneg(&head_max[H + l.h], amax[1]);
            if (l.h == 0)
                atomicAdd(&tokens, 1u);
        }
    }
    fold_block_end(f.scaler, head_max, &tokens, H);
}

// --- fast path: 16-bit K/V, head_dim 64, 128 or 256, large batches ----------
//
// The generic kernel above spends ~4000 instructions per warp on run-time
// widths, bounds and branches; this one fixes the dtype, head_dim (so one
// 16-byte vector per lane covers a row: D / 8 lanes per row) and the mode at
// compile time, and gives each group of lanes kFastRows consecutive rows
// (row = token * H + head) whose K, V and slot loads are all issued before
// any conversion. Same loads, arithmetic, rounding and addressing as
// kv_quantize_kernel, so the same bytes. Only for batches of at least
// KVCAL_KV_FAST_MIN_TOKENS tokens: for a decode step the 4x fewer groups
// leave the GPU idle (measured 2.2x slower at 256 tokens).
//
// Modes: static scales; dynamic per (token, head) scales (K's and V's
// maxima reduced in one interleaved shuffle loop); and the two passes of a
// scaler step. kFold writes every row with the scaler's current scales
// (none before its first step) while it reduces the batch's per-head absmax,
// and its last block folds the step (fold_block_end); kRewrite then writes
// again, with the grown scales, only the K or V rows of heads whose scale
// grew, and returns at once when none did. A scale that did not grow is the
// one the reference writes with, so both passes together give the
// reference's bytes and recorded scales; once the scales have settled a step
// moves its bytes once.

constexpr int kFastRows = 4;
// 128-thread blocks: at 70-80 registers they pack 7 (bf16) or 6 (f16) per SM
// where 256-thread blocks pack 3 (768 threads).
constexpr int kFastThreads = 128;

enum FastMode { kStatic, kDynamic, kFold, kRewrite };

// Per-block state of the scaler modes, in shared memory.
struct FastShared {
    float *scale;               // (2, H): the scales the block writes with
    unsigned int *grown;        // (2, H): kRewrite: which rows to write again
    float *head_max;            // (2, H): kFold: the block's per-head absmax
    unsigned int *tokens;       // kFold: the block's valid tokens
};

// kFastRows consecutive rows from `first` (rows past the batch are loaded as
// zeros and skipped; every lane of the warp must call it). Work per row is
// what bounds these kernels (the instructions of a warp, not the bytes in
// flight), so the integer divisions are multiplies (kvcal_kv_fastdiv; the
// host keeps rows, slots and in-block offsets below 2^31 for it), offsets
// inside a block are 32-bit, the absmax takes |x| as an operand modifier
// and filters +-Inf only when one was seen, the dynamic scale rule runs
// without an fp32 division (kvcal_kv_scale_from_absmax_dmul), and the
// maxima of the kFastRows rows go through one interleaved shuffle loop.
template <typename T, int D, int MODE>
__device__ __forceinline__ void fast_rows(const Quant &q, uint32_t first,
                                          const FastShared &sh)
{
    constexpr int kLanes = D / 8; // lanes per row
    const Rows &r = q.rows;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)r.g.num_kv_heads;
    const uint32_t rows = (uint32_t)(r.num_tokens * H); // < 2^31 (host check)
    uint4 w[2][kFastRows];
    int64_t slot[kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        const uint32_t row = first + i;
        w[0][i] = w[1][i] = make_uint4(0, 0, 0, 0);
        slot[i] = -1;
        if (row < rows) {
            const uint32_t t = kvcal_kv_fastdiv_div(r.heads_div, row), h = row - t * H;
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
                if (MODE != kRewrite || sh.grown[kv * H + h])
                    w[kv][i] = *reinterpret_cast<const uint4 *>(
                        static_cast<const T *>(r.src[kv]) + t * r.token_stride[kv] +
                        h * r.head_stride[kv] + lane * 8);
            slot[i] = __ldg(r.slots + t);
        }
    }
    float scale[2][kFastRows];
    if constexpr (MODE == kDynamic || MODE == kFold) {
        float m[2][kFastRows];
#pragma unroll
        for (int i = 0; i < kFastRows; i++)
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
                m[kv][i] = absmax8<T>(w[kv][i]);
#pragma unroll
        for (int off = kLanes / 2; off > 0; off >>= 1)
#pragma unroll
            for (int i = 0; i < kFastRows; i++)
#pragma unroll
                for (int kv = 0; kv < 2; kv++)
                    m[kv][i] =
                        fmaxf(m[kv][i], __shfl_xor_sync(0xffffffffu, m[kv][i], off, kLanes));
#pragma unroll
        for (int i = 0; i < kFastRows; i++)
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                if constexpr (MODE == kDynamic)
                    scale[kv][i] = kvcal_kv_scale_from_absmax_dmul(m[kv][i]);
                else if (lane == 0 && slot[i] >= 0 && slot[i] < r.g.capacity) {
                    const uint32_t row = first + i;
                    const uint32_t h = row - kvcal_kv_fastdiv_div(r.heads_div, row) * H;
                    atomic_max_nonneg(&sh.head_max[kv * H + h], m[kv][i]);
                    if (kv == 0 && h == 0)
                        atomicAdd(sh.tokens, 1u);
                }
            }
    }
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        if (!(slot[i] >= 0 && slot[i] < r.g.capacity))
            continue;
        const uint32_t row = first + i; // < rows: its slot was loaded
        const uint32_t head = row - kvcal_kv_fastdiv_div(r.heads_div, row) * H;
        if constexpr (MODE == kStatic) {
            scale[0][i] = q.scales[0][head * q.scale_step];
            scale[1][i] = q.scales[1][head * q.scale_step];
        } else if constexpr (MODE != kDynamic) {
            scale[0][i] = sh.scale[head];
            scale[1][i] = sh.scale[H + head];
        }
        const uint32_t s = (uint32_t)slot[i]; // < 2^31 (host check)
        const uint32_t block = kvcal_kv_fastdiv_div(r.bs_div, s);
        const uint32_t off = s - block * (uint32_t)r.g.block_size;
        const uint32_t in_block = r.g.layout == KVCAL_CACHE_NHD
                                      ? off * H + head
                                      : head * (uint32_t)r.g.block_size + off;
        const int64_t at =
            (int64_t)block * r.g.block_stride + (int64_t)(in_block * D + lane * 8);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            if (MODE == kFold && !(scale[kv][i] > 0.0f)) // unset: the rewrite writes
                continue;
            if (MODE == kRewrite && !sh.grown[kv * H + head])
                continue;
            float x[8];
            unpack8<T>(w[kv][i], x);
            store_e4m3<8>(q.dst[kv] + at, x, 1.0f / scale[kv][i]);
            if (q.scale_out[kv] && lane == 0)
                q.scale_out[kv][kvcal_kv_scale_index_at(r.g, block, off, (int)head)] =
                    scale[kv][i];
        }
    }
}

// Static or dynamic: one group of rows per group of lanes.
template <typename T, int D, int MODE>
__global__ void __launch_bounds__(kFastThreads) kv_quantize_fast_kernel(Quant q)
{
    constexpr int kLanes = D / 8;
    const uint32_t first =
        (blockIdx.x * (kFastThreads / kLanes) + threadIdx.x / kLanes) * kFastRows;
    fast_rows<T, D, MODE>(q, first, FastShared{});
}

// A scaler step's passes (kFold, kRewrite): one resident wave of blocks
// striding over the groups of rows. Shared memory: 6 H words.
template <typename T, int D, int MODE>
__global__ void __launch_bounds__(kFastThreads)
    kv_scaler_fast_kernel(Quant q, kvcal_kv_scaler s)
{
    constexpr int kLanes = D / 8;
    extern __shared__ float words[];
    __shared__ unsigned int tokens;
    const int H = q.rows.g.num_kv_heads;
    if (MODE == kRewrite && !*s.any_grown)
        return;
    FastShared sh = {words, reinterpret_cast<unsigned int *>(words + 2 * H),
                     words + 4 * H, &tokens};
    for (int i = threadIdx.x; i < 2 * H; i += kFastThreads) {
        sh.scale[i] = s.scale[i / H][i % H];
        sh.head_max[i] = 0.0f;
        if (MODE == kRewrite)
            sh.grown[i] = s.grown[i / H][i % H];
    }
    if (threadIdx.x == 0)
        tokens = 0;
    __syncthreads();
    const uint32_t rows = (uint32_t)(q.rows.num_tokens * H);
    const uint32_t per_block = (kFastThreads / kLanes) * kFastRows;
    for (uint32_t base = blockIdx.x * per_block; base < rows; base += gridDim.x * per_block)
        fast_rows<T, D, MODE>(q, base + threadIdx.x / kLanes * kFastRows, sh);
    if (MODE == kFold)
        fold_block_end(s, sh.head_max, &tokens, H);
}

// --- dequantize ---------------------------------------------------------------

struct Dequant {
    Rows rows;             // src and strides unused
    const uint8_t *src[2]; // K and V caches
    const float *token_scales[2];
    const float *scales[2];
    int scale_step;
    void *out[2]; // (num_tokens, H, head_dim) contiguous
};

// Two e4m3 bytes (low byte first) to floats, exactly, through fp16.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2 *>(&h));
}

template <typename TOut, int VEC>
__global__ void __launch_bounds__(kThreads) kv_dequantize_kernel(Dequant d)
{
    const Rows &r = d.rows;
    int64_t row = (int64_t)blockIdx.x * (kThreads / r.group) + threadIdx.x / r.group;
    Lane l = lane_of(r, row);
    if (!l.active)
        return;
    float scale[2];
    const int64_t src_off = kvcal_kv_cache_offset(r.g, l.slot, l.h);
    const int64_t out_off = (l.t * r.g.num_kv_heads + l.h) * r.g.head_dim;
#pragma unroll
    for (int kv = 0; kv < 2; kv++)
        scale[kv] = d.token_scales[kv]
                        ? d.token_scales[kv][kvcal_kv_scale_index(r.g, l.slot, l.h)]
                        : d.scales[kv][l.h * d.scale_step];
    for (int v = l.lane; v < r.nvec; v += r.group) {
        uint32_t b[2][VEC >= 4 ? VEC / 4 : 1] = {};
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            if constexpr (VEC == 16) {
                uint4 w = *reinterpret_cast<const uint4 *>(d.src[kv] + src_off + v * VEC);
                b[kv][0] = w.x, b[kv][1] = w.y, b[kv][2] = w.z, b[kv][3] = w.w;
            } else if constexpr (VEC == 8) {
                uint2 w = *reinterpret_cast<const uint2 *>(d.src[kv] + src_off + v * VEC);
                b[kv][0] = w.x, b[kv][1] = w.y;
            } else {
                b[kv][0] = d.src[kv][src_off + v];
            }
        }
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            alignas(16) TOut o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j += 2) {
                float2 f = e4m3x2_to_float2(b[kv][j / 4] >> (8 * (j % 4)));
                o[j] = from_float<TOut>(f.x * scale[kv]);
                if (j + 1 < VEC)
                    o[j + 1] = from_float<TOut>(f.y * scale[kv]);
            }
            TOut *out = static_cast<TOut *>(d.out[kv]) + out_off;
            if constexpr (VEC >= 8) {
                const uint4 *o4 = reinterpret_cast<const uint4 *>(o);
                uint4 *d4 = reinterpret_cast<uint4 *>(out + (int64_t)v * VEC);
#pragma unroll
                for (int j = 0; j < (int)(sizeof(TOut) * VEC / 16); j++)
                    d4[j] = o4[j];
            } else {
                out[v] = o[0];
            }
        }
    }
}

// Fast dequantization for large batches with head_dim 64, 128 or 256 (the
// generic kernel's 16-byte path): D / 16 lanes per row, each converting 16
// values of it, kFastRows consecutive rows per group of lanes, their slot
// loads first, then all their cache and scale loads, then the conversions
// and stores. A lane's 16 values are kChunks pieces of one 16-byte store
// each (2 of 8 values for 16-bit output, 4 of 4 for fp32), piece c of lane
// l at column c * D / kChunks + l * kPiece: so each store instruction of a
// group writes D / kChunks whole columns, whole 32-byte sectors, where one
// 16-byte cache vector per lane made each store cover half of every sector
// (run 7: 83.6% of copy). Same conversion and rounding as
// kv_dequantize_kernel.
template <typename TOut, int D>
__global__ void __launch_bounds__(kFastThreads) kv_dequantize_fast_kernel(Dequant d)
{
    constexpr int kLanes = D / 16;
    constexpr int kPiece = 16 / (int)sizeof(TOut); // values per 16-byte store
    constexpr int kChunks = 16 / kPiece;           // stores per lane and row
    constexpr int kWords = kPiece / 4;             // 32-bit cache words per piece
    const Rows &r = d.rows;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)r.g.num_kv_heads;
    const int64_t rows = r.num_tokens * H; // < 2^32 (host check)
    const int64_t first =
        ((int64_t)blockIdx.x * (kFastThreads / kLanes) + threadIdx.x / kLanes) * kFastRows;
    int64_t slot[kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++)
        slot[i] = first + i < rows ? __ldg(r.slots + (uint32_t)(first + i) / H) : -1;
    uint32_t w[2][kFastRows][kChunks][kWords];
    float scale[2][kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        scale[0][i] = scale[1][i] = 0.0f;
#pragma unroll
        for (int kv = 0; kv < 2; kv++)
#pragma unroll
            for (int c = 0; c < kChunks; c++)
#pragma unroll
                for (int k = 0; k < kWords; k++)
                    w[kv][i][c][k] = 0;
        if (!(slot[i] >= 0 && slot[i] < r.g.capacity))
            continue;
        const uint32_t row = (uint32_t)(first + i);
        const int head = (int)(row - row / H * H);
        int64_t block, off;
        kvcal_kv_slot_split(r.g, slot[i], &block, &off);
        const int64_t at = kvcal_kv_cache_offset_at(r.g, block, off, head) + lane * kPiece;
        const int64_t si = kvcal_kv_scale_index_at(r.g, block, off, head);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                const uint8_t *src = d.src[kv] + at + c * (D / kChunks);
                if constexpr (kWords == 2) {
                    const uint2 v = *reinterpret_cast<const uint2 *>(src);
                    w[kv][i][c][0] = v.x, w[kv][i][c][1] = v.y;
                } else {
                    w[kv][i][c][0] = *reinterpret_cast<const uint32_t *>(src);
                }
            }
            scale[kv][i] = d.token_scales[kv] ? d.token_scales[kv][si]
                                              : d.scales[kv][head * d.scale_step];
        }
    }
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
        if (!(slot[i] >= 0 && slot[i] < r.g.capacity))
            continue;
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                alignas(16) TOut o[kPiece];
#pragma unroll
                for (int j = 0; j < kPiece; j += 2) {
                    float2 f = e4m3x2_to_float2(w[kv][i][c][j / 4] >> (8 * (j % 4)));
                    o[j] = from_float<TOut>(f.x * scale[kv][i]);
                    o[j + 1] = from_float<TOut>(f.y * scale[kv][i]);
                }
                const int64_t out_off = (first + i) * D + c * (D / kChunks) + lane * kPiece;
                *reinterpret_cast<uint4 *>(static_cast<TOut *>(d.out[kv]) + out_off) =
                    *reinterpret_cast<const uint4 *>(o);
            }
        }
    }
}

__global__ void fp8_e4m3_encode_kernel(const float *x, uint8_t *out, int64_t n)
{
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 2;
    if (i + 1 < n) {
        uint32_t two = e4m3x2(x[i], x[i + 1]);
        out[i] = (uint8_t)two;
        out[i + 1] = (uint8_t)(two >> 8);
    } else if (i < n) {
        out[i] = (uint8_t)e4m3x2(x[i], 0.0f);
    }
}

// --- host side ------------------------------------------------------------------

bool aligned(const void *p, int64_t bytes)
{
    return ((uintptr_t)p % (uintptr_t)bytes) == 0;
}

int elem_bytes(kvcal_dtype d)
{
    return d == KVCAL_DTYPE_F32 ? 4 : 2;
}

// Splits each row into vectors of vec elements, one group of lanes per row.
void set_vec(Rows *r, int vec)
{
    r->nvec = r->g.head_dim / vec;
    r->group = 1;
    while (r->group < 32 && r->group < r->nvec)
        r->group <<= 1;
}

// Fills the row description; vec is the vector width the kernels will use:
// 16-byte input vectors when every row of input and cache is aligned for them
// (cache: the caller checks its base pointers).
Rows make_rows(const kvcal_kv_batch *b, kvcal_kv_geom g, bool with_data, int *vec)
{
    Rows r = {};
    r.src[0] = b->k, r.src[1] = b->v;
    r.token_stride[0] = b->k_token_stride, r.token_stride[1] = b->v_token_stride;
    r.head_stride[0] = b->k_head_stride, r.head_stride[1] = b->v_head_stride;
    r.slots = b->slot_mapping;
    r.num_tokens = b->num_tokens;
    r.g = g;
    r.heads_div = kvcal_kv_fastdiv_make((uint32_t)g.num_kv_heads);
    r.bs_div = kvcal_kv_fastdiv_make((uint32_t)g.block_size);
    int v = with_data ? 16 / elem_bytes(b->dtype) : 8;
    bool ok = g.head_dim % v == 0 && g.block_stride % v == 0;
    if (with_data)
        for (int kv = 0; kv < 2; kv++)
            ok = ok && aligned(r.src[kv], 16) && r.token_stride[kv] % v == 0 &&
                 r.head_stride[kv] % v == 0;
    *vec = ok ? v : 1;
    set_vec(&r, *vec);
    return r;
}

// Rows of a quantization: as make_rows, and the one-element path unless the
// caches take vec-byte stores.
Rows quant_rows(const kvcal_kv_batch *b, const kvcal_kv_cache *c, kvcal_kv_geom g,
                int *vec)
{
    Rows r = make_rows(b, g, true, vec);
    if (*vec > 1 && (!aligned(c->k, *vec) || !aligned(c->v, *vec))) {
        *vec = 1;
        set_vec(&r, 1);
    }
    return r;
}

unsigned row_blocks(const Rows &r)
{
    int64_t rows = r.num_tokens * r.g.num_kv_heads;
    int64_t per_block = kThreads / r.group;
    return (unsigned)((rows + per_block - 1) / per_block);
}

// Calls f.run<T, VEC, MAXV>() for the input dtype and vector width; MAXV = 1
// when one vector per lane covers the row (head_dim <= 32 * VEC).
template <typename F>
kvcal_status dispatch(kvcal_dtype dtype, int vec, const Rows &r, const F &f)
{
    bool one = r.nvec <= r.group;
    if (dtype == KVCAL_DTYPE_F32) {
        if (vec == 1)
            return one ? f.template run<float, 1, 1>()
                       : f.template run<float, 1, max_vectors<1>()>();
        return one ? f.template run<float, 4, 1>()
                   : f.template run<float, 4, max_vectors<4>()>();
    }
    if (dtype == KVCAL_DTYPE_F16) {
        if (vec == 1)
            return one ? f.template run<__half, 1, 1>()
                       : f.template run<__half, 1, max_vectors<1>()>();
        return one ? f.template run<__half, 8, 1>()
                   : f.template run<__half, 8, max_vectors<8>()>();
    }
    if (vec == 1)
        return one ? f.template run<__nv_bfloat16, 1, 1>()
                   : f.template run<__nv_bfloat16, 1, max_vectors<1>()>();
    return one ? f.template run<__nv_bfloat16, 8, 1>()
               : f.template run<__nv_bfloat16, 8, max_vectors<8>()>();
}

struct QuantLaunch {
    const Quant &q;
    cudaStream_t stream;
    template <typename T, int VEC, int MAXV> kvcal_status run() const
    {
        unsigned blocks = row_blocks(q.rows);
        if (blocks == 0)
            return KVCAL_OK;
        kv_quantize_kernel<T, VEC, MAXV><<<blocks, kThreads, 0, stream>>>(q);
        CUDA_TRY(cudaGetLastError());
        return KVCAL_OK;
    }
};

// Whether the fast kernels' 32-bit indices hold: rows (num_tokens * H),
// slots (num_blocks * block_size) and one block's bytes below 2^31.
bool fast_indices_fit(const Rows &r)
{
    const int64_t lim = 0x7fffffffLL;
    return r.num_tokens <= lim / r.g.num_kv_heads && r.g.capacity <= lim &&
           (int64_t)r.g.block_size * r.g.num_kv_heads * r.g.head_dim <= lim;
}

// Whether the fast kernel takes this quantization: 16-bit inputs on the
// 16-byte path (vec 8: aligned rows, strides and caches), head_dim 64, 128
// or 256, at least KVCAL_KV_FAST_MIN_TOKENS tokens, 32-bit indices.
bool fast_applies(kvcal_dtype dtype, int vec, const Rows &r)
{
    const int d = r.g.head_dim;
    return dtype != KVCAL_DTYPE_F32 && vec == 8 && (d == 64 || d == 128 || d == 256) &&
           r.num_tokens >= KVCAL_KV_FAST_MIN_TOKENS && fast_indices_fit(r);
}

template <typename T, int D>
kvcal_status launch_fast_d(const Quant &q, bool dynamic, cudaStream_t stream)
{
    const int64_t groups =
        (q.rows.num_tokens * q.rows.g.num_kv_heads + kFastRows - 1) / kFastRows;
    const int64_t per_block = kFastThreads / (D / 8);
    const unsigned blocks = (unsigned)((groups + per_block - 1) / per_block);
    if (dynamic)
        kv_quantize_fast_kernel<T, D, kDynamic><<<blocks, kFastThreads, 0, stream>>>(q);
    else
        kv_quantize_fast_kernel<T, D, kStatic><<<blocks, kFastThreads, 0, stream>>>(q);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

// Blocks of `kernel` (kThreads or kFastThreads wide, `smem` bytes of
// dynamic shared memory) resident at once on the current device, at most
// `needed`, at least 1.
template <typename K>
kvcal_status resident_blocks(K kernel, int threads, size_t smem, int64_t needed,
                             unsigned *out)
{
    int dev = 0, sms = 0, per_sm = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    int64_t cap = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    *out = (unsigned)(needed < cap ? (needed > 0 ? needed : 1) : cap);
    return KVCAL_OK;
}

// A scaler step on the fast kernel: kFold (write with the current scales,
// reduce, fold), then kRewrite (write again what grew; returns at once when
// nothing did). Both have one resident wave of blocks.
template <typename T, int D>
kvcal_status launch_scaler_fast_d(const Quant &q, const kvcal_kv_scaler &s,
                                  cudaStream_t stream)
{
    const int64_t groups =
        (q.rows.num_tokens * q.rows.g.num_kv_heads + kFastRows - 1) / kFastRows;
    const int64_t needed = (groups + kFastThreads / (D / 8) - 1) / (kFastThreads / (D / 8));
    const size_t smem = 6 * (size_t)q.rows.g.num_kv_heads * sizeof(float);
    unsigned blocks;
    kvcal_status st =
        resident_blocks(kv_scaler_fast_kernel<T, D, kFold>, kFastThreads, smem, needed, &blocks);
    if (st != KVCAL_OK)
        return st;
    kv_scaler_fast_kernel<T, D, kFold><<<blocks, kFastThreads, smem, stream>>>(q, s);
    CUDA_TRY(cudaGetLastError());
    if ((st = resident_blocks(kv_scaler_fast_kernel<T, D, kRewrite>, kFastThreads, smem,
                              needed, &blocks)) != KVCAL_OK)
        return st;
    kv_scaler_fast_kernel<T, D, kRewrite><<<blocks, kFastThreads, smem, stream>>>(q, s);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

template <typename T>
kvcal_status launch_scaler_fast_t(const Quant &q, const kvcal_kv_scaler &s,
                                  cudaStream_t stream)
{
    if (q.rows.g.head_dim == 64)
        return launch_scaler_fast_d<T, 64>(q, s, stream);
    if (q.rows.g.head_dim == 128)
        return launch_scaler_fast_d<T, 128>(q, s, stream);
    return launch_scaler_fast_d<T, 256>(q, s, stream);
}

template <typename T> kvcal_status launch_fast_t(const Quant &q, cudaStream_t stream)
{
    const bool dynamic = q.scales[0] == nullptr;
    if (q.rows.g.head_dim == 64)
        return launch_fast_d<T, 64>(q, dynamic, stream);
    if (q.rows.g.head_dim == 128)
        return launch_fast_d<T, 128>(q, dynamic, stream);
    return launch_fast_d<T, 256>(q, dynamic, stream);
}

// Enqueues a quantization (static, dynamic or a scaler's write step) on the
// fast kernel where it applies, the generic one otherwise.
kvcal_status launch_quant(kvcal_dtype dtype, int vec, const Quant &q, cudaStream_t stream)
{
    if (!fast_applies(dtype, vec, q.rows))
        return dispatch(dtype, vec, q.rows, QuantLaunch{q, stream});
    return dtype == KVCAL_DTYPE_BF16 ? launch_fast_t<__nv_bfloat16>(q, stream)
                                     : launch_fast_t<__half>(q, stream);
}

struct FoldLaunch {
    const Fold &f;
    cudaStream_t stream;
    template <typename T, int VEC, int MAXV> kvcal_status run() const
    {
        size_t smem = 2 * (size_t)f.rows.g.num_kv_heads * sizeof(float);
        unsigned blocks;
        kvcal_status st = resident_blocks(kv_scaler_fold_kernel<T, VEC, MAXV>, kThreads,
                                          smem, row_blocks(f.rows), &blocks);
        if (st != KVCAL_OK)
            return st;
        kv_scaler_fold_kernel<T, VEC, MAXV><<<blocks, kThreads, smem, stream>>>(f);
        CUDA_TRY(cudaGetLastError());
        return KVCAL_OK;
    }
};

Quant make_quant(const Rows &rows, const kvcal_kv_cache *c, const float *k_scale,
                 const float *v_scale, int scale_step)
{
    Quant q = {};
    q.rows = rows;
    q.dst[0] = c->k, q.dst[1] = c->v;
    q.scale_out[0] = c->k_scale, q.scale_out[1] = c->v_scale;
    q.scales[0] = k_scale, q.scales[1] = v_scale;
    q.scale_step = scale_step;
    return q;
}

template <typename TOut, int VEC>
kvcal_status launch_dequant_t(const Dequant &d, cudaStream_t stream)
{
    unsigned blocks = row_blocks(d.rows);
    if (blocks == 0)
        return KVCAL_OK;
    kv_dequantize_kernel<TOut, VEC><<<blocks, kThreads, 0, stream>>>(d);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

// Cache bytes per lane of a dequantization: 16, else 8, else one, as
// alignment allows.
int dequant_vec(kvcal_kv_geom g, const kvcal_kv_cache *c, const void *k_out,
                const void *v_out)
{
    int vec = 16;
    while (vec > 1 && !(g.head_dim % vec == 0 && g.block_stride % vec == 0 &&
                        aligned(c->k, vec) && aligned(c->v, vec) && aligned(k_out, 16) &&
                        aligned(v_out, 16)))
        vec = vec == 16 ? 8 : 1;
    return vec;
}

// Whether a dequantization takes the fast kernel: 16 cache bytes per lane
// (vec 16), head_dim 64, 128 or 256, at least KVCAL_KV_FAST_MIN_TOKENS
// tokens, 32-bit indices.
bool dequant_fast_applies(int vec, const Rows &r)
{
    const int d = r.g.head_dim;
    return vec == 16 && (d == 64 || d == 128 || d == 256) &&
           r.num_tokens >= KVCAL_KV_FAST_MIN_TOKENS && fast_indices_fit(r);
}

template <typename TOut, int D>
kvcal_status launch_dequant_fast_d(const Dequant &d, cudaStream_t stream)
{
    const int64_t groups =
        (d.rows.num_tokens * d.rows.g.num_kv_heads + kFastRows - 1) / kFastRows;
    const int64_t per_block = kFastThreads / (D / 16);
    kv_dequantize_fast_kernel<TOut, D>
        <<<(unsigned)((groups + per_block - 1) / per_block), kFastThreads, 0, stream>>>(d);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

// Enqueues a dequantization with 16-bit or fp32 output on the kernel that
// applies.
template <typename TOut>
kvcal_status launch_dequant(int vec, const Dequant &d, cudaStream_t stream)
{
    if (dequant_fast_applies(vec, d.rows)) {
        if (d.rows.g.head_dim == 64)
            return launch_dequant_fast_d<TOut, 64>(d, stream);
        if (d.rows.g.head_dim == 128)
            return launch_dequant_fast_d<TOut, 128>(d, stream);
        return launch_dequant_fast_d<TOut, 256>(d, stream);
    }
    return vec == 16  ? launch_dequant_t<TOut, 16>(d, stream)
           : vec == 8 ? launch_dequant_t<TOut, 8>(d, stream)
                      : launch_dequant_t<TOut, 1>(d, stream);
}

} // namespace

// --- public entry points ---------------------------------------------------------

extern "C" kvcal_status
kvcal_kv_quantize_static_launch(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                                kvcal_granularity granularity, const float *k_scale,
                                const float *v_scale, struct CUstream_st *stream)
{
    static const char fn[] = "kvcal_kv_quantize_static_launch";
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kv_check_args(fn, batch, cache, 1, 0, &g);
    if (st == KVCAL_OK)
        st = kvcal_kv_check_static(fn, granularity, k_scale, v_scale);
    if (st != KVCAL_OK)
        return st;
    int vec;
    Rows rows = quant_rows(batch, cache, g, &vec);
    Quant q =
        make_quant(rows, cache, k_scale, v_scale, granularity == KVCAL_GRANULARITY_HEAD);
    return launch_quant(batch->dtype, vec, q, stream);
}

extern "C" kvcal_status kvcal_kv_quantize_dynamic_launch(const kvcal_kv_batch *batch,
                                                         const kvcal_kv_cache *cache,
                                                         struct CUstream_st *stream)
{
    kvcal_kv_geom g;
    kvcal_status st =
        kvcal_kv_check_args("kvcal_kv_quantize_dynamic_launch", batch, cache, 1, 1, &g);
    if (st != KVCAL_OK)
        return st;
    int vec;
    Rows rows = quant_rows(batch, cache, g, &vec);
    Quant q = make_quant(rows, cache, nullptr, nullptr, 0);
    return launch_quant(batch->dtype, vec, q, stream);
}

extern "C" kvcal_status kvcal_kv_scaler_quantize_launch(kvcal_kv_scaler_t *scaler,
                                                        const kvcal_kv_batch *batch,
                                                        const kvcal_kv_cache *cache,
                                                        struct CUstream_st *stream)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kv_scaler_check("kvcal_kv_scaler_quantize_launch", scaler, 1,
                                            batch, cache, &g);
    if (st != KVCAL_OK || batch->num_tokens == 0)
        return st;
    int vec;
    Rows rows = quant_rows(batch, cache, g, &vec);
    if (fast_applies(batch->dtype, vec, rows)) {
        Quant q = make_quant(rows, cache, nullptr, nullptr, 1);
        return batch->dtype == KVCAL_DTYPE_BF16
                   ? launch_scaler_fast_t<__nv_bfloat16>(q, *scaler, stream)
                   : launch_scaler_fast_t<__half>(q, *scaler, stream);
    }
    Fold f = {};
    f.rows = rows;
    f.scaler = *scaler;
    f.rows_total = batch->num_tokens * g.num_kv_heads;
    if ((st = dispatch(batch->dtype, vec, rows, FoldLaunch{f, stream})) != KVCAL_OK)
        return st;
    Quant q = make_quant(rows, cache, scaler->scale[0], scaler->scale[1], 1);
    return launch_quant(batch->dtype, vec, q, stream);
}

extern "C" kvcal_status
kvcal_kv_dequantize_launch(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                           kvcal_granularity granularity, const float *k_scale,
                           const float *v_scale, void *k_out, void *v_out,
                           kvcal_dtype out_dtype, struct CUstream_st *stream)
{
    kvcal_kv_geom g;
    kvcal_status st =
        kvcal_kv_dequantize_check("kvcal_kv_dequantize_launch", batch, cache, granularity,
                                  k_scale, v_scale, k_out, v_out, out_dtype, &g);
    if (st != KVCAL_OK)
        return st;
    int vec = dequant_vec(g, cache, k_out, v_out), unused;
    Dequant d = {};
    d.rows = make_rows(batch, g, false, &unused);
    set_vec(&d.rows, vec);
    d.src[0] = cache->k, d.src[1] = cache->v;
    d.token_scales[0] = cache->k_scale, d.token_scales[1] = cache->v_scale;
    d.scales[0] = k_scale, d.scales[1] = v_scale;
    d.scale_step = granularity == KVCAL_GRANULARITY_HEAD;
    d.out[0] = k_out, d.out[1] = v_out;
    if (out_dtype == KVCAL_DTYPE_F32)
        return launch_dequant<float>(vec, d, stream);
    if (out_dtype == KVCAL_DTYPE_F16)
        return launch_dequant<__half>(vec, d, stream);
    return launch_dequant<__nv_bfloat16>(vec, d, stream);
}

// --- internal helpers (kernels/cuda/kvquant.h) -------------------------------------

extern "C" int kvcal_kv_fast_path_applies(const kvcal_kv_batch *batch,
                                          const kvcal_kv_cache *cache)
{
    kvcal_kv_geom g;
    if (kvcal_kv_check_args("kvcal_kv_fast_path_applies", batch, cache, 1, 0, &g) !=
        KVCAL_OK)
        return 0;
    int vec;
    Rows rows = quant_rows(batch, cache, g, &vec);
    return fast_applies(batch->dtype, vec, rows);
}

extern "C" int kvcal_kv_dequant_fast_path_applies(const kvcal_kv_batch *batch,
                                                  const kvcal_kv_cache *cache,
                                                  const void *k_out, const void *v_out)
{
    kvcal_kv_geom g;
    if (kvcal_kv_check_args("kvcal_kv_dequant_fast_path_applies", batch, cache, 0, 0,
                            &g) != KVCAL_OK)
        return 0;
    int unused;
    return dequant_fast_applies(dequant_vec(g, cache, k_out, v_out),
                                make_rows(batch, g, false, &unused));
}

extern "C" kvcal_status kvcal_kv_device_alloc(size_t bytes, void **out)
{
    *out = nullptr;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return kvcal_fail(KVCAL_ERR_NO_DEVICE, "no CUDA device: create the object on the "
                                               "host (on_device = 0)");
    }
    void *p = nullptr;
    CUDA_TRY(cudaMalloc(&p, bytes));
    // cudaMemset returns before it is done, and a non-blocking stream would
    // not wait for it: zeroed means done here
    cudaError_t err = cudaMemset(p, 0, bytes);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(0);
    if (err != cudaSuccess) {
        cudaFree(p);
        return kvcal_fail(KVCAL_ERR_CUDA, "zeroing a device object's state: %s",
                          cudaGetErrorString(err));
    }
    *out = p;
    return KVCAL_OK;
}

extern "C" void kvcal_kv_device_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" kvcal_status kvcal_kv_device_read(void *dst, const void *src, size_t bytes,
                                             struct CUstream_st *stream)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_kv_device_write(void *dst, const void *src, size_t bytes,
                                              struct CUstream_st *stream)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_TRY(cudaStreamSynchronize(stream));
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_fp8_e4m3_encode_launch(const float *x, uint8_t *out,
                                                     int64_t n,
                                                     struct CUstream_st *stream)
{
    if ((n > 0 && (!x || !out)) || n < 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_fp8_e4m3_encode_launch: bad arguments");
    int64_t pairs = (n + 1) / 2;
    if (pairs == 0)
        return KVCAL_OK;
    fp8_e4m3_encode_kernel<<<(unsigned)((pairs + kThreads - 1) / kThreads), kThreads, 0,
                             stream>>>(x, out, n);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}
