// bench/kvquant.cu: speed of every CUDA entry point of the online FP8 KV
// quantization (include/kvcal_quant.h) against a device-to-device copy
// measured in the same run.
//
//   kvquant [--tokens N] [--decode-tokens N] [--heads H] [--head-dim D]
//           [--block-size B] [--reps N]
//
// Three cases: a prefill of --tokens (default 262144) whose tokens fill
// their blocks in turn; "scatter", the same tokens each written to a block
// of its own (what runs 1 to 5 measured as their prefill: a cache of 4 x
// tokens blocks, 17 GB each for K and V); and a decode step of
// --decode-tokens (default 256), one token per block. bf16 K/V of --heads x
// --head-dim (8 x 128) into a paged cache of --block-size (16) whose blocks
// are handed out in a random order. Each op is validated against its CPU reference (three
// token windows of 2048 tokens of the prefill, all of the decode step: only the cache
// blocks of a window come back to the host) before it is timed. Prefill: CUDA events
// around each call, L2 flushed before each, median of
// --reps. Decode: the bytes are far below what launch latency covers, so the
// figure is the time per call of a CUDA graph of 20 calls replayed (L2 warm,
// as in an engine where the K/V were just produced), plus the event time of
// one call. GB/s counts bytes read + written once (K/V in, cache and scales
// out, slot mapping); the copy counts read + written.
//
// Versions: v1 = one thread per element with the software e4m3 rounding of
// core/fp8.h (static per-head scales), the starting point; the library's
// entry points as an engine calls them (kernels/cuda/kvquant.cu: the fast
// kernel for the prefill, the generic one for the decode step); v3 = the
// bench-only kernel the library's fast kernel grew from (bf16, head_dim 128, NHD only;
// static per-head and dynamic): each group of 16 lanes takes R rows (4, or
// 8 for "v3 8 rows") and issues all of its 16-byte K/V loads before
// converting any.
//
// The scaler (running max, NHD) is timed twice: "steady", a step whose
// batch grows no scale (the same batch again: the state of an engine whose
// scales have settled), and "growth", a step after every running max was
// shrunk to 2.4e-38, so that every scale grows after every row was written
// with the old one (the costliest step; a step that grows some heads
// rewrites only theirs, and a first step writes only once).
//
// The cache formats beyond e4m3 (kvcal_kv_quantize_fmt_launch /
// kvcal_kv_dequantize_fmt_launch, kernels/cuda/kvquant_fmt.cu) as an engine
// calls them, NHD: fp8 e5m2 (a cast), int8 with static per-head scales
// (nearest even), int8 dynamic per (token, head) (vLLM's
// int8_per_token_head, truncating), int8 with static per-head zero points,
// int8 with dynamic zero points (LMDeploy's quant_policy=8), NVFP4 with a
// global scale per K and V, and the dequantization to bf16 ("dequant ...")
// of the e5m2, int8 static, int8 dynamic, int8 dynamic zero-point and NVFP4
// caches;
// validated against kernels/cpu/kvquant_fmt_ref.c the same way. Their bytes
// count each format's cache rows (NVFP4: 9/16 byte a value) and the
// dynamic modes' per (token, head) scales and zero points (the static modes
// record none). In versions, timed with --only-formats alone: "v1 ..." is
// the format kernel before its first rewrite (bench/kvquant_fmt_v1.cuh),
// "v2 ..." the fast quantization before its second (bench/kvquant_fmt_v2.cuh;
// prefill only: a decode step takes the generic kernel, which v3 kept),
// "v3 dequant nvfp4" and "v4 dequant nvfp4" NVFP4's fast dequantization
// before v4 and before the staged kernel (bench/kvquant_fmt_v3.cuh,
// bench/kvquant_fmt_v4.cuh; prefill only), the unnumbered op the library's
// (v3; NVFP4's dequantization into 16 bits v5, staged). --only-formats runs the copy,
// e4m3's static per head and dequantization (for reference) and the format ops, every
// version, prefill and decode only.
//
// "v4x ..." (--only-formats, prefill only): what bounds NVFP4's
// dequantization, its bytes counted for each: the ceilings "v4x memset
// out" (cudaMemsetAsync of the outputs) and "v4x write only" (v4's grid
// and 16-byte stores, of zeros, no load; checked to write zeros), and v4's
// variants of bench/kvquant_fmt_v4x.cuh ("v4x dequant nvfp4" v4 itself,
// rebuilt there), validated like every op. --only-nvfp4 runs the prefill's
// copy, NVFP4's dequantizations (library, v4, v3) and "v4x write only"
// alone.
//
// Also printed: device-to-host copy speed of pageable and pinned memory
// (what validation pays per byte it brings back) and the seconds spent
// validating and timing.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kvcal.h"
extern "C" {
#include "core/fp8.h"
#include "core/status.h"
#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cpu/kvquant_ref.h"
}
#include "bench/kvquant_fmt_v1.cuh"
#include "bench/kvquant_fmt_v2.cuh"
#include "bench/kvquant_fmt_v3.cuh"
#include "bench/kvquant_fmt_v4.cuh"
#include "bench/kvquant_fmt_v4x.cuh"

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
                    cudaGetErrorString(e_));                                             \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)
#define KV_CHECK(x)                                                                      \
    do {                                                                                 \
        kvcal_status s_ = (x);                                                           \
        if (s_ != KVCAL_OK) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
                    kvcal_last_error());                                                 \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)

// --- v1: one thread per element, software rounding ---------------------------

__global__ void v1_static_head_kernel(const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                      const int64_t *slots, uint8_t *kc, uint8_t *vc,
                                      const float *ks, const float *vs, int64_t n, int H,
                                      int D, int block_size)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int64_t t = i / ((int64_t)H * D);
    int h = (int)(i / D % H), d = (int)(i % D);
    int64_t slot = slots[t];
    if (slot < 0)
        return;
    int64_t o =
        ((slot / block_size) * block_size * H + (slot % block_size) * H + h) * D + d;
    kc[o] = kvcal_fp8_e4m3_from_float(__bfloat162float(k[i]) * (1.0f / ks[h]));
    vc[o] = kvcal_fp8_e4m3_from_float(__bfloat162float(v[i]) * (1.0f / vs[h]));
}

// --- v3: four rows per group of 16 lanes --------------------------------------

// 8 bf16 in a 16-byte word -> floats.
__device__ __forceinline__ void v3_unpack(uint4 w, float *x)
{
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __uint_as_float(u[i] << 16);
        x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

// 8 floats times inv -> 8 e4m3 bytes (RNE, saturating, as the library).
__device__ __forceinline__ uint2 v3_pack(const float *x, float inv)
{
    uint32_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i] * inv, x[2 * i + 1] * inv),
                                        __NV_SATFINITE, __NV_E4M3);
    return make_uint2(b[0] | b[1] << 16, b[2] | b[3] << 16);
}

// k, v: (rows, 128) bf16 as 16-byte words, row = token * H + head; caches
// NHD and contiguous, so (slot, head) starts at (slot * H + head) * 128.
template <bool DYNAMIC, int R>
__global__ void __launch_bounds__(256)
    v3_quant_kernel(const uint4 *k, const uint4 *v, const int64_t *slots, uint8_t *kc,
                    uint8_t *vc, const float *ks, const float *vs, float *ksc, float *vsc,
                    int64_t rows, int H, int64_t capacity)
{
    const int lane = threadIdx.x & 15;
    const int64_t first =
        ((int64_t)blockIdx.x * (blockDim.x / 16) + threadIdx.x / 16) * R;
    uint4 kr[R], vr[R];
    int64_t slot[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t row = first + r;
        kr[r] = vr[r] = make_uint4(0, 0, 0, 0);
        slot[r] = -1;
        if (row < rows) {
            kr[r] = k[row * 16 + lane];
            vr[r] = v[row * 16 + lane];
            slot[r] = slots[(uint32_t)row / (uint32_t)H]; // rows < 2^32 here
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        int64_t row = first + r;
        int h = (int)((uint32_t)row % (uint32_t)H);
        float xk[8], xv[8], sk, sv;
        v3_unpack(kr[r], xk);
        v3_unpack(vr[r], xv);
        if (DYNAMIC) {
            float mk = 0.0f, mv = 0.0f;
            for (int j = 0; j < 8; j++) {
                mk = fmaxf(mk, kvcal_kv_finite_abs(xk[j]));
                mv = fmaxf(mv, kvcal_kv_finite_abs(xv[j]));
            }
            for (int off = 8; off > 0; off >>= 1) {
                mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, off, 16));
                mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, off, 16));
            }
            sk = kvcal_scale_from_absmax(mk), sv = kvcal_scale_from_absmax(mv);
        } else {
            sk = ks[h], sv = vs[h];
        }
        if (slot[r] < 0 || slot[r] >= capacity)
            continue;
        int64_t o = (slot[r] * H + h) * 128 + lane * 8;
        *reinterpret_cast<uint2 *>(kc + o) = v3_pack(xk, 1.0f / sk);
        *reinterpret_cast<uint2 *>(vc + o) = v3_pack(xv, 1.0f / sv);
        if (DYNAMIC && lane == 0)
            ksc[slot[r] * H + h] = sk, vsc[slot[r] * H + h] = sv;
    }
}

__global__ void fill_bf16_kernel(__nv_bfloat16 *p, int64_t n, uint32_t seed, float amp)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
        float u = (float)(x >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f; // [-1, 1)
        p[i] = __float2bfloat16_rn(u * u * u * amp);                    // heavy near 0
    }
}

// --- the problem -------------------------------------------------------------------

enum Op {
    COPY,
    V1_STATIC_HEAD,
    STATIC_TENSOR,
    STATIC_HEAD,
    V3_STATIC_HEAD,
    V3R8_STATIC_HEAD,
    STATIC_HEAD_HND,
    DYNAMIC,
    DYNAMIC_HND,
    V3_DYNAMIC,
    SCALER,
    SCALER_GROW,
    DEQUANT,
    FMT_E5M2, // the format ops (library), then the same as v1 (V1_FMT_*), then
              // the quantizations as v2 (V2_FMT_*)
    FMT_INT8_HEAD,
    FMT_INT8_DYNAMIC,
    FMT_ASYM_HEAD,
    FMT_ASYM_DYNAMIC,
    FMT_NVFP4,
    FMT_DEQUANT_E5M2,
    FMT_DEQUANT_INT8_HEAD,
    FMT_DEQUANT_INT8,
    FMT_DEQUANT_ASYM,
    FMT_DEQUANT_NVFP4,
    V1_FMT_E5M2,
    V1_FMT_DEQUANT_NVFP4 = V1_FMT_E5M2 + (FMT_DEQUANT_NVFP4 - FMT_E5M2),
    V2_FMT_E5M2,
    V2_FMT_NVFP4 = V2_FMT_E5M2 + (FMT_NVFP4 - FMT_E5M2),
    V4_FMT_DEQUANT_NVFP4,
    V3_FMT_DEQUANT_NVFP4,
    V4X_MEMSET, // NVFP4's dequantization's ceilings and v4's variants
    V4X_WRITE,  // (V4X_WRITE + v4x::Kind)
    V4X_WRITE_CS,
    V4X_BASE,
    V4X_CS,
    V4X_ROWS8,
    V4X_ROWS8_CS,
    V4X_THREADS256,
    V4X_PERSISTENT,
    V4X_PERSISTENT_CS,
    NUM_OPS
};
constexpr int kFmtOps = V1_FMT_E5M2 - FMT_E5M2, kV2Ops = V2_FMT_E5M2 - FMT_E5M2;
static const char *op_name[NUM_OPS] = {"copy (cudaMemcpy D2D)",
                                       "v1 static head NHD (sw)",
                                       "static tensor NHD",
                                       "static head NHD",
                                       "v3 static head NHD",
                                       "v3 8 rows static head",
                                       "static head HND",
                                       "dynamic token-head NHD",
                                       "dynamic token-head HND",
                                       "v3 dynamic NHD",
                                       "scaler running-max steady",
                                       "scaler running-max growth",
                                       "dequant NHD -> bf16",
                                       "fp8 e5m2 cast NHD",
                                       "int8 static head NHD",
                                       "int8 dynamic token-head",
                                       "int8-asym static head",
                                       "int8-asym dynamic",
                                       "nvfp4 static NHD",
                                       "dequant e5m2",
                                       "dequant int8 head",
                                       "dequant int8 dyn",
                                       "dequant asym dyn",
                                       "dequant nvfp4",
                                       "v1 fp8 e5m2 cast NHD",
                                       "v1 int8 static head NHD",
                                       "v1 int8 dynamic token-head",
                                       "v1 int8-asym static head",
                                       "v1 int8-asym dynamic",
                                       "v1 nvfp4 static NHD",
                                       "v1 dequant e5m2",
                                       "v1 dequant int8 head",
                                       "v1 dequant int8 dyn",
                                       "v1 dequant asym dyn",
                                       "v1 dequant nvfp4",
                                       "v2 fp8 e5m2 cast NHD",
                                       "v2 int8 static head NHD",
                                       "v2 int8 dynamic token-head",
                                       "v2 int8-asym static head",
                                       "v2 int8-asym dynamic",
                                       "v2 nvfp4 static NHD",
                                       "v4 dequant nvfp4",
                                       "v3 dequant nvfp4",
                                       "v4x memset out (ceiling)",
                                       "v4x write only (ceiling)",
                                       "v4x write only .cs",
                                       "v4x dequant nvfp4",
                                       "v4x .cs stores",
                                       "v4x 8 rows",
                                       "v4x 8 rows .cs",
                                       "v4x 256 threads",
                                       "v4x persistent grid",
                                       "v4x persistent grid .cs"};

// The format ops (FMT_*, V1_FMT_*, V2_FMT_*): the library op of a v1 or v2
// op, its format, whether it dequantizes, whether its parameters are per
// (token, head).
static bool is_fmt(Op op)
{
    return op >= FMT_E5M2 && op < NUM_OPS;
}

static bool is_v1(Op op)
{
    return op >= V1_FMT_E5M2 && op <= V1_FMT_DEQUANT_NVFP4;
}

static bool is_v2(Op op)
{
    return op >= V2_FMT_E5M2 && op <= V2_FMT_NVFP4;
}

// NVFP4's dequantization's ceilings (zeros written where it writes, its
// bytes counted) and v4's variants (bench/kvquant_fmt_v4x.cuh).
static bool is_v4x(Op op)
{
    return op >= V4X_MEMSET && op <= V4X_PERSISTENT_CS;
}

static bool writes_zeros(Op op)
{
    return op == V4X_MEMSET || op == V4X_WRITE || op == V4X_WRITE_CS;
}

// NVFP4's dequantization as the library ran it before (v3, v4).
static bool is_kept_nvfp4(Op op)
{
    return op == V3_FMT_DEQUANT_NVFP4 || op == V4_FMT_DEQUANT_NVFP4;
}

static Op fmt_base(Op op)
{
    return is_v1(op)                         ? (Op)(op - kFmtOps)
           : is_v2(op)                       ? (Op)(op - kV2Ops)
           : is_kept_nvfp4(op) || is_v4x(op) ? FMT_DEQUANT_NVFP4
                                             : op;
}

static bool fmt_dequantizes(Op op)
{
    return fmt_base(op) >= FMT_DEQUANT_E5M2;
}

static bool fmt_dynamic(Op op)
{
    Op b = fmt_base(op);
    return b == FMT_INT8_DYNAMIC || b == FMT_ASYM_DYNAMIC || b == FMT_DEQUANT_INT8 ||
           b == FMT_DEQUANT_ASYM;
}

static kvcal_kv_format fmt_of(Op op)
{
    switch (fmt_base(op)) {
    case FMT_E5M2:
    case FMT_DEQUANT_E5M2:
        return KVCAL_KV_FORMAT_FP8_E5M2;
    case FMT_ASYM_HEAD:
    case FMT_ASYM_DYNAMIC:
    case FMT_DEQUANT_ASYM:
        return KVCAL_KV_FORMAT_INT8_ASYM;
    case FMT_NVFP4:
    case FMT_DEQUANT_NVFP4:
        return KVCAL_KV_FORMAT_NVFP4;
    default:
        return KVCAL_KV_FORMAT_INT8;
    }
}

// The (library) op that writes the cache a format dequantization reads.
static Op fmt_writer(Op op)
{
    switch (fmt_base(op)) {
    case FMT_DEQUANT_E5M2:
        return FMT_E5M2;
    case FMT_DEQUANT_INT8_HEAD:
        return FMT_INT8_HEAD;
    case FMT_DEQUANT_INT8:
        return FMT_INT8_DYNAMIC;
    case FMT_DEQUANT_ASYM:
        return FMT_ASYM_DYNAMIC;
    case FMT_DEQUANT_NVFP4:
        return FMT_NVFP4;
    default:
        return op;
    }
}

struct Problem {
    int64_t T;
    int H, D, bs;
    int64_t num_blocks;
    __nv_bfloat16 *k, *v; // (T, H, D)
    int64_t *slots;       // (T)
    std::vector<int64_t> host_slots;
    uint8_t *kc, *vc; // caches
    float *ksc, *vsc; // per (token, head) scale arrays
    float *kst, *vst; // static per-head scales (H)
    std::vector<float> host_kst, host_vst;
    __nv_bfloat16 *ko, *vo; // dequantized (T, H, D)
    float *kzc, *vzc;       // per (token, head) zero points
    float *g;               // NVFP4 global scales, K then V
    float host_g[2];
    float *asym; // static zero-point parameters (4 x H): K / V scales, K / V zeros
    std::vector<float> host_asym;
    void *copy_dst;
    kvcal_kv_scaler_t *scaler;
    size_t in_elems() const { return (size_t)T * H * D; }
    size_t cache_bytes() const { return (size_t)num_blocks * bs * H * D; }
};

static void problem_make(Problem &p, int64_t T, int H, int D, int bs, int64_t num_blocks,
                         bool in_turn, uint32_t seed)
{
    p.T = T, p.H = H, p.D = D, p.bs = bs, p.num_blocks = num_blocks;
    size_t n = p.in_elems();
    CHECK(cudaMalloc(&p.k, n * 2));
    CHECK(cudaMalloc(&p.v, n * 2));
    fill_bf16_kernel<<<1024, 256>>>(p.k, (int64_t)n, seed, 6.0f);
    fill_bf16_kernel<<<1024, 256>>>(p.v, (int64_t)n, seed * 7 + 1, 2.0f);
    CHECK(cudaGetLastError());
    // blocks handed out in a random order; in_turn: tokens fill their blocks
    // in turn (a prefill), else each token goes to a block of its own (a
    // decode step's tokens, one per sequence)
    std::vector<int64_t> perm(num_blocks);
    for (int64_t i = 0; i < num_blocks; i++)
        perm[i] = i;
    uint64_t r = seed;
    for (int64_t i = num_blocks - 1; i > 0; i--) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(perm[i], perm[(int64_t)((r >> 33) % (uint64_t)(i + 1))]);
    }
    p.host_slots.resize(T);
    for (int64_t t = 0; t < T; t++)
        p.host_slots[t] =
            in_turn ? perm[t / bs] * bs + t % bs : perm[t] * bs + (t * 5) % bs;
    CHECK(cudaMalloc(&p.slots, T * sizeof(int64_t)));
    CHECK(cudaMemcpy(p.slots, p.host_slots.data(), T * sizeof(int64_t),
                     cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&p.kc, p.cache_bytes()));
    CHECK(cudaMalloc(&p.vc, p.cache_bytes()));
    size_t ns = (size_t)num_blocks * bs * H * sizeof(float);
    CHECK(cudaMalloc(&p.ksc, ns));
    CHECK(cudaMalloc(&p.vsc, ns));
    p.host_kst.resize(H), p.host_vst.resize(H);
    for (int h = 0; h < H; h++)
        p.host_kst[h] = (1.0f + 0.1f * h) / 448.0f * 6.0f, p.host_vst[h] = 2.0f / 448.0f;
    CHECK(cudaMalloc(&p.kst, H * sizeof(float)));
    CHECK(cudaMalloc(&p.vst, H * sizeof(float)));
    CHECK(
        cudaMemcpy(p.kst, p.host_kst.data(), H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(
        cudaMemcpy(p.vst, p.host_vst.data(), H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&p.ko, n * 2));
    CHECK(cudaMalloc(&p.vo, n * 2));
    CHECK(cudaMalloc(&p.copy_dst, n * 2 * 2));
    CHECK(cudaMalloc(&p.kzc, ns));
    CHECK(cudaMalloc(&p.vzc, ns));
    p.host_g[0] = 6.0f / 2688.0f, p.host_g[1] = 2.0f / 2688.0f;
    CHECK(cudaMalloc(&p.g, 2 * sizeof(float)));
    CHECK(cudaMemcpy(p.g, p.host_g, 2 * sizeof(float), cudaMemcpyHostToDevice));
    p.host_asym.resize(4 * H);
    for (int h = 0; h < H; h++) // K within +-6, V within +-2 (fill_bf16_kernel)
        p.host_asym[h] = 12.0f / 255.0f, p.host_asym[H + h] = 4.0f / 255.0f,
        p.host_asym[2 * H + h] = -6.0f, p.host_asym[3 * H + h] = -2.0f;
    CHECK(cudaMalloc(&p.asym, 4 * H * sizeof(float)));
    CHECK(cudaMemcpy(p.asym, p.host_asym.data(), 4 * H * sizeof(float),
                     cudaMemcpyHostToDevice));
    KV_CHECK(kvcal_kv_scaler_create(H, KVCAL_SCALER_RUNNING_MAX, 0.0f, 1, &p.scaler));
    CHECK(cudaDeviceSynchronize());
}

static void problem_free(Problem &p)
{
    cudaFree(p.k), cudaFree(p.v), cudaFree(p.slots), cudaFree(p.kc), cudaFree(p.vc);
    cudaFree(p.ksc), cudaFree(p.vsc), cudaFree(p.kst), cudaFree(p.vst);
    cudaFree(p.ko), cudaFree(p.vo), cudaFree(p.copy_dst);
    cudaFree(p.kzc), cudaFree(p.vzc), cudaFree(p.g), cudaFree(p.asym);
    kvcal_kv_scaler_destroy(p.scaler);
}

static kvcal_kv_batch batch_of(const Problem &p)
{
    int64_t ts = (int64_t)p.H * p.D;
    return kvcal_kv_batch{p.k, p.v, KVCAL_DTYPE_BF16, p.T, ts, p.D, ts, p.D, p.slots};
}

static kvcal_kv_cache cache_of(const Problem &p, kvcal_cache_layout layout, bool scales)
{
    kvcal_kv_cache c = {};
    c.k = p.kc, c.v = p.vc;
    c.k_scale = scales ? p.ksc : nullptr, c.v_scale = scales ? p.vsc : nullptr;
    c.num_blocks = p.num_blocks, c.block_size = p.bs, c.num_kv_heads = p.H,
    c.head_dim = p.D;
    c.layout = layout;
    return c;
}

// The parameters of format op `op` on the device (host: the host copies
// of the static scales).
static kvcal_kv_qparams qparams_of(const Problem &p, Op op, bool host)
{
    kvcal_kv_qparams q = {};
    const Op b = fmt_base(op);
    q.format = fmt_of(op);
    q.rounding = b == FMT_INT8_DYNAMIC || b == FMT_DEQUANT_INT8
                     ? KVCAL_KV_ROUND_TOWARD_ZERO
                     : KVCAL_KV_ROUND_NEAREST_EVEN;
    q.granularity = KVCAL_GRANULARITY_HEAD;
    const float *asym = host ? p.host_asym.data() : p.asym;
    if (b == FMT_INT8_HEAD || b == FMT_DEQUANT_INT8_HEAD) {
        q.k_scale = host ? p.host_kst.data() : p.kst;
        q.v_scale = host ? p.host_vst.data() : p.vst;
    } else if (b == FMT_ASYM_HEAD) {
        q.k_scale = asym, q.v_scale = asym + p.H;
        q.k_zero = asym + 2 * p.H, q.v_zero = asym + 3 * p.H;
    } else if (q.format == KVCAL_KV_FORMAT_NVFP4) {
        q.granularity = KVCAL_GRANULARITY_TENSOR;
        q.k_scale = host ? &p.host_g[0] : p.g;
        q.v_scale = host ? &p.host_g[1] : p.g + 1;
    } else if (q.format == KVCAL_KV_FORMAT_INT8_ASYM && !host) {
        q.k_zero_cache = p.kzc, q.v_zero_cache = p.vzc;
    }
    return q;
}

// Bytes an op must move: inputs read once, outputs written once.
static double op_bytes(const Problem &p, Op op)
{
    double in = 2.0 * p.in_elems() * 2, cache = 2.0 * p.in_elems(), slots = 8.0 * p.T;
    double scales = 2.0 * p.T * p.H * 4;
    if (is_fmt(op)) {
        kvcal_kv_format f = fmt_of(op);
        double rows = 2.0 * p.T * p.H * kvcal_kv_format_row_bytes(f, p.D);
        double params = !fmt_dynamic(op)                 ? 0.0
                        : f == KVCAL_KV_FORMAT_INT8_ASYM ? 2 * scales
                                                         : scales;
        return in + rows + params + slots;
    }
    switch (op) {
    case COPY:
        return 2 * in;
    case DYNAMIC:
    case DYNAMIC_HND:
    case V3_DYNAMIC:
    case SCALER:
    case SCALER_GROW:
        return in + cache + slots + scales;
    case DEQUANT:
        return cache + scales + in + slots;
    default:
        return in + cache + slots;
    }
}

static void run_op(Problem &p, Op op, cudaStream_t s)
{
    kvcal_kv_batch b = batch_of(p);
    switch (op) {
    case COPY:
        CHECK(cudaMemcpyAsync(p.copy_dst, p.k, p.in_elems() * 2, cudaMemcpyDeviceToDevice,
                              s));
        CHECK(cudaMemcpyAsync((char *)p.copy_dst + p.in_elems() * 2, p.v,
                              p.in_elems() * 2, cudaMemcpyDeviceToDevice, s));
        return;
    case V1_STATIC_HEAD: {
        int64_t n = (int64_t)p.in_elems();
        v1_static_head_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(
            p.k, p.v, p.slots, p.kc, p.vc, p.kst, p.vst, n, p.H, p.D, p.bs);
        CHECK(cudaGetLastError());
        return;
    }
    case V3_STATIC_HEAD:
    case V3R8_STATIC_HEAD:
    case V3_DYNAMIC: {
        const int R = op == V3R8_STATIC_HEAD ? 8 : 4;
        int64_t rows = p.T * p.H, groups = (rows + R - 1) / R;
        unsigned grid = (unsigned)((groups + 15) / 16);
        auto kernel = op == V3_DYNAMIC         ? v3_quant_kernel<true, 4>
                      : op == V3R8_STATIC_HEAD ? v3_quant_kernel<false, 8>
                                               : v3_quant_kernel<false, 4>;
        kernel<<<grid, 256, 0, s>>>((const uint4 *)p.k, (const uint4 *)p.v, p.slots, p.kc,
                                    p.vc, p.kst, p.vst, p.ksc, p.vsc, rows, p.H,
                                    p.num_blocks * p.bs);
        CHECK(cudaGetLastError());
        return;
    }
    case STATIC_TENSOR: {
        kvcal_kv_cache c = cache_of(p, KVCAL_CACHE_NHD, false);
        KV_CHECK(kvcal_kv_quantize_static_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, p.kst,
                                                 p.vst, s));
        return;
    }
    case STATIC_HEAD:
    case STATIC_HEAD_HND: {
        kvcal_kv_cache c =
            cache_of(p, op == STATIC_HEAD ? KVCAL_CACHE_NHD : KVCAL_CACHE_HND, false);
        KV_CHECK(kvcal_kv_quantize_static_launch(&b, &c, KVCAL_GRANULARITY_HEAD, p.kst,
                                                 p.vst, s));
        return;
    }
    case DYNAMIC:
    case DYNAMIC_HND: {
        kvcal_kv_cache c =
            cache_of(p, op == DYNAMIC ? KVCAL_CACHE_NHD : KVCAL_CACHE_HND, true);
        KV_CHECK(kvcal_kv_quantize_dynamic_launch(&b, &c, s));
        return;
    }
    case SCALER:
    case SCALER_GROW: {
        kvcal_kv_cache c = cache_of(p, KVCAL_CACHE_NHD, true);
        KV_CHECK(kvcal_kv_scaler_quantize_launch(p.scaler, &b, &c, s));
        return;
    }
    case DEQUANT: {
        kvcal_kv_cache c = cache_of(p, KVCAL_CACHE_NHD, true);
        KV_CHECK(kvcal_kv_dequantize_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, nullptr,
                                            nullptr, p.ko, p.vo, KVCAL_DTYPE_BF16, s));
        return;
    }
    default: { // the format ops; the static modes record no scale
        kvcal_kv_cache c = cache_of(p, KVCAL_CACHE_NHD, fmt_dynamic(op));
        kvcal_kv_qparams q = qparams_of(p, op, false);
        const bool dq = fmt_dequantizes(op);
        if (is_v1(op))
            KV_CHECK(v1::run(&b, &c, &q, dq ? p.ko : nullptr, dq ? p.vo : nullptr, s));
        else if (is_v2(op))
            KV_CHECK(v2::run(&b, &c, &q, s));
        else if (op == V3_FMT_DEQUANT_NVFP4)
            KV_CHECK(v3::run(&b, &c, &q, p.ko, p.vo, s));
        else if (op == V4_FMT_DEQUANT_NVFP4)
            KV_CHECK(v4::run(&b, &c, &q, p.ko, p.vo, s));
        else if (op == V4X_MEMSET) {
            CHECK(cudaMemsetAsync(p.ko, 0, p.in_elems() * 2, s));
            CHECK(cudaMemsetAsync(p.vo, 0, p.in_elems() * 2, s));
        } else if (is_v4x(op))
            KV_CHECK(v4x::run((v4x::Kind)(op - V4X_WRITE), &b, &c, &q, p.ko, p.vo, s));
        else if (dq)
            KV_CHECK(kvcal_kv_dequantize_fmt_launch(&b, &c, &q, p.ko, p.vo,
                                                    KVCAL_DTYPE_BF16, s));
        else
            KV_CHECK(kvcal_kv_quantize_fmt_launch(&b, &c, &q, s));
        return;
    }
    }
}

// --- validation against the CPU reference -------------------------------------------

template <typename T> static std::vector<T> to_host(const T *d, size_t n)
{
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// The device cache blocks that hold a window's tokens, gathered on the
// device and copied to the host (a few MB, never the whole cache: copying
// 2 x 268 MB of cache and 1 GB of K/V back per op made validation take
// minutes).
struct Mirror {
    std::vector<int64_t> local; // device block -> mirror block, -1 if absent
    std::vector<uint8_t> k, v;  // (blocks, block bytes)
    std::vector<float> ks, vs;  // (blocks, bs * H)
    std::vector<float> kz, vz;  // (blocks, bs * H) zero points (format ops)
    int64_t blocks = 0;
};

// dst[j] = src[list[j]] for blocks of `bytes` bytes.
__global__ void gather_blocks_kernel(const uint8_t *src, const int64_t *list, int64_t n,
                                     size_t bytes, uint8_t *dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i < n * (int64_t)bytes; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[list[i / bytes] * bytes + i % bytes];
}

// Copies blocks `list` (device, n entries) of src to the host vector out.
template <typename T>
static void gather_blocks(const T *src, const int64_t *list, int64_t n, size_t elems,
                          std::vector<T> &out)
{
    out.resize(n * elems);
    uint8_t *d;
    CHECK(cudaMalloc(&d, out.size() * sizeof(T) + 1));
    gather_blocks_kernel<<<1024, 256>>>((const uint8_t *)src, list, n, elems * sizeof(T),
                                        d);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
}

static void mirror_window(const Problem &p, int64_t t0, int64_t n, Mirror &m,
                          int64_t row_bytes)
{
    const size_t bb = (size_t)p.bs * p.H * row_bytes, sb = (size_t)p.bs * p.H;
    m.local.assign(p.num_blocks, -1);
    m.blocks = 0;
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = p.host_slots[t0 + i];
        if (s >= 0 && m.local[s / p.bs] < 0)
            m.local[s / p.bs] = m.blocks++, order.push_back(s / p.bs);
    }
    int64_t *list;
    CHECK(cudaMalloc(&list, (order.size() + 1) * sizeof(int64_t)));
    CHECK(cudaMemcpy(list, order.data(), order.size() * sizeof(int64_t),
                     cudaMemcpyHostToDevice));
    gather_blocks(p.kc, list, m.blocks, bb, m.k);
    gather_blocks(p.vc, list, m.blocks, bb, m.v);
    gather_blocks(p.ksc, list, m.blocks, sb, m.ks);
    gather_blocks(p.vsc, list, m.blocks, sb, m.vs);
    gather_blocks(p.kzc, list, m.blocks, sb, m.kz);
    gather_blocks(p.vzc, list, m.blocks, sb, m.vz);
    CHECK(cudaFree(list));
}

// Checks the device result of op (just run on the whole batch) on tokens
// [t0, t0 + n) against the reference run on a host cache of those tokens.
// Returns the number of differing rows / values.
static size_t validate_window(Problem &p, Op op, int64_t t0, int64_t n,
                              const float *scaler_k, const float *scaler_v)
{
    const int H = p.H, D = p.D;
    const size_t row = (size_t)H * D;
    Mirror m;
    mirror_window(p, t0, n, m, D);
    std::vector<uint16_t> k = to_host((const uint16_t *)p.k + t0 * row, n * row);
    std::vector<uint16_t> v = to_host((const uint16_t *)p.v + t0 * row, n * row);
    // the window's tokens at local slots 0..n-1 of a host cache of the same layout
    kvcal_cache_layout layout =
        op == STATIC_HEAD_HND || op == DYNAMIC_HND ? KVCAL_CACHE_HND : KVCAL_CACHE_NHD;
    int64_t blocks = (n + p.bs - 1) / p.bs;
    std::vector<int64_t> local(n);
    for (int64_t i = 0; i < n; i++)
        local[i] = p.host_slots[t0 + i] < 0 ? -1 : i;
    std::vector<uint8_t> hk(blocks * p.bs * row, 0xff), hv(blocks * p.bs * row, 0xff);
    std::vector<float> hks(blocks * p.bs * H, -1.0f), hvs(blocks * p.bs * H, -1.0f);
    kvcal_kv_batch b = {k.data(),     v.data(), KVCAL_DTYPE_BF16, n, (int64_t)row, D,
                        (int64_t)row, D,        local.data()};
    kvcal_kv_cache c = {hk.data(), hv.data(), hks.data(), hvs.data(), blocks,
                        p.bs,      H,         D,          0,          layout};
    // the mirror as a cache of m.blocks blocks; slot s of the device is
    // slot mslot(s) there
    kvcal_kv_cache g_mirror = {m.k.data(), m.v.data(), m.ks.data(), m.vs.data(), m.blocks,
                               p.bs,       H,          D,           0,           layout};
    kvcal_kv_geom gd, gh;
    KV_CHECK(kvcal_kv_check_args("bench", &b, &g_mirror, 1, 1, &gd));
    KV_CHECK(kvcal_kv_check_args("bench", &b, &c, 1, 1, &gh));
    auto mslot = [&](int64_t s) { return m.local[s / p.bs] * p.bs + s % p.bs; };
    const std::vector<uint8_t> &dk = m.k, &dv = m.v;
    const std::vector<float> &dks = m.ks, &dvs = m.vs;
    size_t bad = 0;
    if (op == DEQUANT) {
        // dequantize the device's cache rows of the window on the host
        for (int64_t i = 0; i < n; i++)
            for (int h = 0; h < H; h++) {
                int64_t s = mslot(p.host_slots[t0 + i]);
                memcpy(&hk[kvcal_kv_cache_offset(gh, i, h)],
                       &dk[kvcal_kv_cache_offset(gd, s, h)], D);
                memcpy(&hv[kvcal_kv_cache_offset(gh, i, h)],
                       &dv[kvcal_kv_cache_offset(gd, s, h)], D);
                hks[kvcal_kv_scale_index(gh, i, h)] = dks[kvcal_kv_scale_index(gd, s, h)];
                hvs[kvcal_kv_scale_index(gh, i, h)] = dvs[kvcal_kv_scale_index(gd, s, h)];
            }
        std::vector<uint16_t> rk(n * row), rv(n * row);
        KV_CHECK(kvcal_kv_dequantize_ref(&b, &c, KVCAL_GRANULARITY_TENSOR, nullptr,
                                         nullptr, rk.data(), rv.data(),
                                         KVCAL_DTYPE_BF16));
        std::vector<uint16_t> ok = to_host((const uint16_t *)p.ko + t0 * row, n * row);
        std::vector<uint16_t> ov = to_host((const uint16_t *)p.vo + t0 * row, n * row);
        for (size_t i = 0; i < n * row; i++)
            bad += (ok[i] != rk[i] &&
                    !((ok[i] & 0x7fff) > 0x7f80 && (rk[i] & 0x7fff) > 0x7f80)) +
                   (ov[i] != rv[i] &&
                    !((ov[i] & 0x7fff) > 0x7f80 && (rv[i] & 0x7fff) > 0x7f80));
        return bad;
    }
    bool token_scales = op == DYNAMIC || op == DYNAMIC_HND || op == V3_DYNAMIC ||
                        op == SCALER || op == SCALER_GROW;
    if (op == DYNAMIC || op == DYNAMIC_HND || op == V3_DYNAMIC)
        KV_CHECK(kvcal_kv_quantize_dynamic_ref(&b, &c));
    else if (op == SCALER || op == SCALER_GROW)
        KV_CHECK(kvcal_kv_quantize_static_ref(&b, &c, KVCAL_GRANULARITY_HEAD, scaler_k,
                                              scaler_v));
    else
        KV_CHECK(kvcal_kv_quantize_static_ref(
            &b, &c,
            op == STATIC_TENSOR ? KVCAL_GRANULARITY_TENSOR : KVCAL_GRANULARITY_HEAD,
            p.host_kst.data(), p.host_vst.data()));
    for (int64_t i = 0; i < n; i++) {
        if (p.host_slots[t0 + i] < 0)
            continue;
        int64_t s = mslot(p.host_slots[t0 + i]);
        for (int h = 0; h < H; h++) {
            bad += memcmp(&hk[kvcal_kv_cache_offset(gh, i, h)],
                          &dk[kvcal_kv_cache_offset(gd, s, h)], D) != 0;
            bad += memcmp(&hv[kvcal_kv_cache_offset(gh, i, h)],
                          &dv[kvcal_kv_cache_offset(gd, s, h)], D) != 0;
            if (token_scales)
                bad += hks[kvcal_kv_scale_index(gh, i, h)] !=
                           dks[kvcal_kv_scale_index(gd, s, h)] ||
                       hvs[kvcal_kv_scale_index(gh, i, h)] !=
                           dvs[kvcal_kv_scale_index(gd, s, h)];
        }
    }
    return bad;
}

// validate_window for a format op: the device's rows (of the format's row
// bytes), per (token, head) scales and zero points, or for a
// dequantization its outputs, against the CPU reference on a host cache of
// the window's tokens.
static size_t validate_fmt_window(Problem &p, Op op, int64_t t0, int64_t n)
{
    const int H = p.H, D = p.D;
    const size_t row = (size_t)H * D;
    const kvcal_kv_format f = fmt_of(op);
    const int64_t rb = kvcal_kv_format_row_bytes(f, D);
    Mirror m;
    mirror_window(p, t0, n, m, rb);
    std::vector<uint16_t> k = to_host((const uint16_t *)p.k + t0 * row, n * row);
    std::vector<uint16_t> v = to_host((const uint16_t *)p.v + t0 * row, n * row);
    int64_t blocks = (n + p.bs - 1) / p.bs;
    std::vector<int64_t> local(n);
    for (int64_t i = 0; i < n; i++)
        local[i] = p.host_slots[t0 + i] < 0 ? -1 : i;
    const size_t ns = blocks * p.bs * H;
    std::vector<uint8_t> hk(blocks * p.bs * H * rb, 0xa5), hv(hk.size(), 0xa5);
    std::vector<float> hks(ns, -1.0f), hvs(ns, -1.0f), hkz(ns, -1.0f), hvz(ns, -1.0f);
    kvcal_kv_batch b = {k.data(),     v.data(), KVCAL_DTYPE_BF16, n, (int64_t)row, D,
                        (int64_t)row, D,        local.data()};
    kvcal_kv_cache c = {hk.data(), hv.data(), hks.data(), hvs.data(), blocks,
                        p.bs,      H,         D,          0,          KVCAL_CACHE_NHD};
    kvcal_kv_cache g_mirror = {m.k.data(), m.v.data(),     m.ks.data(), m.vs.data(),
                               m.blocks,   p.bs,           H,           D,
                               0,          KVCAL_CACHE_NHD};
    kvcal_kv_geom gd, gh;
    kvcal_kv_qparams q = qparams_of(p, op, true);
    const bool dyn = fmt_dynamic(op), zeros = dyn && f == KVCAL_KV_FORMAT_INT8_ASYM;
    if (zeros)
        q.k_zero_cache = hkz.data(), q.v_zero_cache = hvz.data();
    KV_CHECK(kvcal_kvfmt_check("bench", &b, &g_mirror, &q, 1, &gd));
    KV_CHECK(kvcal_kvfmt_check("bench", &b, &c, &q, 1, &gh));
    const int64_t data = gh.row_bytes, nscl = f == KVCAL_KV_FORMAT_NVFP4 ? D / 16 : 0;
    auto mslot = [&](int64_t s) { return m.local[s / p.bs] * p.bs + s % p.bs; };
    // byte offsets of the block scales of (slot, head) in both geometries
    auto scl = [&](kvcal_kv_geom g, int64_t slot, int h, int sc, int kv) {
        int64_t blk, off;
        kvcal_kv_slot_split(g, slot, &blk, &off);
        return kvcal_kvfmt_nvfp4_scale_at(g, blk, off, h, sc, kv);
    };
    size_t bad = 0;
    if (fmt_dequantizes(op)) {
        for (int64_t i = 0; i < n; i++)
            for (int h = 0; h < H; h++) {
                int64_t s = mslot(p.host_slots[t0 + i]);
                memcpy(&hk[kvcal_kv_cache_offset(gh, i, h)],
                       &m.k[kvcal_kv_cache_offset(gd, s, h)], data);
                memcpy(&hv[kvcal_kv_cache_offset(gh, i, h)],
                       &m.v[kvcal_kv_cache_offset(gd, s, h)], data);
                for (int sc = 0; sc < nscl; sc++) {
                    hk[scl(gh, i, h, sc, 0)] = m.k[scl(gd, s, h, sc, 0)];
                    hv[scl(gh, i, h, sc, 1)] = m.v[scl(gd, s, h, sc, 1)];
                }
                hks[kvcal_kv_scale_index(gh, i, h)] =
                    m.ks[kvcal_kv_scale_index(gd, s, h)];
                hvs[kvcal_kv_scale_index(gh, i, h)] =
                    m.vs[kvcal_kv_scale_index(gd, s, h)];
                hkz[kvcal_kv_scale_index(gh, i, h)] =
                    m.kz[kvcal_kv_scale_index(gd, s, h)];
                hvz[kvcal_kv_scale_index(gh, i, h)] =
                    m.vz[kvcal_kv_scale_index(gd, s, h)];
            }
        std::vector<uint16_t> rk(n * row), rv(n * row);
        KV_CHECK(kvcal_kv_dequantize_fmt_ref(&b, &c, &q, rk.data(), rv.data(),
                                             KVCAL_DTYPE_BF16));
        std::vector<uint16_t> ok = to_host((const uint16_t *)p.ko + t0 * row, n * row);
        std::vector<uint16_t> ov = to_host((const uint16_t *)p.vo + t0 * row, n * row);
        for (size_t i = 0; i < n * row; i++)
            bad += (ok[i] != rk[i]) + (ov[i] != rv[i]);
        return bad;
    }
    KV_CHECK(kvcal_kv_quantize_fmt_ref(&b, &c, &q));
    for (int64_t i = 0; i < n; i++) {
        if (p.host_slots[t0 + i] < 0)
            continue;
        int64_t s = mslot(p.host_slots[t0 + i]);
        for (int h = 0; h < H; h++) {
            bad += memcmp(&hk[kvcal_kv_cache_offset(gh, i, h)],
                          &m.k[kvcal_kv_cache_offset(gd, s, h)], data) != 0;
            bad += memcmp(&hv[kvcal_kv_cache_offset(gh, i, h)],
                          &m.v[kvcal_kv_cache_offset(gd, s, h)], data) != 0;
            for (int sc = 0; sc < nscl; sc++)
                bad += (hk[scl(gh, i, h, sc, 0)] != m.k[scl(gd, s, h, sc, 0)]) +
                       (hv[scl(gh, i, h, sc, 1)] != m.v[scl(gd, s, h, sc, 1)]);
            size_t si = kvcal_kv_scale_index(gh, i, h),
                   sd = kvcal_kv_scale_index(gd, s, h);
            if (dyn)
                bad += hks[si] != m.ks[sd] || hvs[si] != m.vs[sd];
            if (zeros)
                bad += hkz[si] != m.kz[sd] || hvz[si] != m.vz[sd];
        }
    }
    return bad;
}

// Per-head finite absmax of bf16 (T, H, D) into out[h] (zeroed by the
// caller): one thread per element, a plain reduction independent of the
// library's, for checking the scaler's scales on the device.
__global__ void head_absmax_kernel(const __nv_bfloat16 *x, int64_t n, int H, int D,
                                   float *out)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float a = kvcal_kv_finite_abs(__bfloat162float(x[i]));
        if (a > 0.0f) // non-negative floats order as their bits
            atomicMax((int *)&out[i / D % H], __float_as_int(a));
    }
}

// Shrinks every running max and scale of the bench's scaler to 2.4e-38
// (bytes 0x01), so that its next step grows every scale after writing
// every row with the old ones: the costliest step (both passes in full).
static void scaler_shrink(Problem &p, cudaStream_t s)
{
    for (int kv = 0; kv < 2; kv++) {
        CHECK(cudaMemsetAsync(p.scaler->scale[kv], 1, p.H * sizeof(float), s));
        CHECK(cudaMemsetAsync(p.scaler->state[kv], 1, p.H * sizeof(float), s));
    }
}

// Runs write-only op `op` once on outputs of 0xff bytes; returns the
// values of three windows of 2,048 tokens of K's and V's outputs (first,
// middle, last) that are not zero.
static size_t validate_zeros(Problem &p, Op op)
{
    CHECK(cudaMemset(p.ko, 0xff, p.in_elems() * 2));
    CHECK(cudaMemset(p.vo, 0xff, p.in_elems() * 2));
    run_op(p, op, 0);
    CHECK(cudaDeviceSynchronize());
    const size_t row = (size_t)p.H * p.D;
    const int64_t w = std::min<int64_t>(p.T, 2048);
    const int64_t starts[3] = {0, (p.T - w) / 2, p.T - w};
    size_t bad = 0;
    for (int i = 0; i < 3; i++)
        for (const __nv_bfloat16 *o : {p.ko, p.vo})
            for (uint16_t x : to_host((const uint16_t *)o + starts[i] * row, w * row))
                bad += x != 0;
    return bad;
}

// Runs op once on fresh caches and checks it; returns the differences.
// The scaler's ops run two steps of the batch from a fresh scaler and check
// the second, written into caches poisoned again: for SCALER a step that
// grows no scale, for SCALER_GROW (scaler_shrink between) one that grows
// every scale.
static size_t validate(Problem &p, Op op)
{
    if (op == COPY)
        return 0;
    if (writes_zeros(op))
        return validate_zeros(p, op);
    CHECK(cudaMemset(p.kc, 0xff, p.cache_bytes()));
    CHECK(cudaMemset(p.vc, 0xff, p.cache_bytes()));
    CHECK(cudaMemset(p.ko, 0xff, p.in_elems() * 2)); // nothing left from the op before
    CHECK(cudaMemset(p.vo, 0xff, p.in_elems() * 2));
    std::vector<float> sk(p.H), sv(p.H);
    const bool scaler = op == SCALER || op == SCALER_GROW;
    if (scaler) { // a fresh scaler: its first step takes the batch's absmax
        kvcal_kv_scaler_destroy(p.scaler);
        KV_CHECK(
            kvcal_kv_scaler_create(p.H, KVCAL_SCALER_RUNNING_MAX, 0.0f, 1, &p.scaler));
    }
    if (op == DEQUANT)
        run_op(p, DYNAMIC, 0);
    if (fmt_writer(op) != op)
        run_op(p, fmt_writer(op), 0);
    run_op(p, op, 0);
    if (scaler) {
        if (op == SCALER_GROW)
            scaler_shrink(p, 0);
        CHECK(cudaMemset(p.kc, 0xff, p.cache_bytes()));
        CHECK(cudaMemset(p.vc, 0xff, p.cache_bytes()));
        CHECK(cudaMemset(p.ksc, 0xff, (size_t)p.num_blocks * p.bs * p.H * sizeof(float)));
        CHECK(cudaMemset(p.vsc, 0xff, (size_t)p.num_blocks * p.bs * p.H * sizeof(float)));
        run_op(p, op, 0);
    }
    CHECK(cudaDeviceSynchronize());
    size_t bad = 0;
    if (scaler) { // the scales must be rule(absmax of the whole batch)
        int64_t steps = 0;
        KV_CHECK(kvcal_kv_scaler_read(p.scaler, 0, sk.data(), sv.data(), &steps));
        float *am;
        CHECK(cudaMalloc(&am, 2 * p.H * sizeof(float)));
        CHECK(cudaMemset(am, 0, 2 * p.H * sizeof(float)));
        head_absmax_kernel<<<1024, 256>>>(p.k, (int64_t)p.in_elems(), p.H, p.D, am);
        head_absmax_kernel<<<1024, 256>>>(p.v, (int64_t)p.in_elems(), p.H, p.D, am + p.H);
        CHECK(cudaGetLastError());
        std::vector<float> a = to_host(am, 2 * p.H);
        CHECK(cudaFree(am));
        for (int h = 0; h < p.H; h++)
            bad += sk[h] != kvcal_scale_from_absmax(a[h]) ||
                   sv[h] != kvcal_scale_from_absmax(a[p.H + h]);
        bad += steps != 2;
    }
    int64_t w = std::min<int64_t>(p.T, 2048);
    int64_t starts[3] = {0, (p.T - w) / 2, p.T - w};
    for (int i = 0; i < (p.T > w ? 3 : 1); i++)
        bad += is_fmt(op) ? validate_fmt_window(p, op, starts[i], w)
                          : validate_window(p, op, starts[i], w, sk.data(), sv.data());
    return bad;
}

// --- timing
// ------------------------------------------------------------------------------

struct Timing {
    double median_us, graph_us;
};

static Timing time_op(Problem &p, Op op, int reps, bool decode, void *flush,
                      size_t flush_bytes)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        run_op(p, op, s);
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
        if (op == SCALER_GROW)
            scaler_shrink(p, s);
        if (!decode)
            CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, s));
        CHECK(cudaEventRecord(a, s));
        run_op(p, op, s);
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float t;
        CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    Timing out = {ms[ms.size() / 2] * 1e3, NAN};
    if (decode) {
        const int calls = 20, replays = 50;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < calls; i++)
            run_op(p, op, s);
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&ge, g, 0));
        CHECK(cudaGraphLaunch(ge, s));
        std::vector<float> gms;
        for (int r = 0; r < 5; r++) {
            CHECK(cudaEventRecord(a, s));
            for (int i = 0; i < replays; i++)
                CHECK(cudaGraphLaunch(ge, s));
            CHECK(cudaEventRecord(b, s));
            CHECK(cudaEventSynchronize(b));
            float t;
            CHECK(cudaEventElapsedTime(&t, a, b));
            gms.push_back(t);
        }
        std::sort(gms.begin(), gms.end());
        out.graph_us = gms[2] * 1e3 / (calls * replays);
        CHECK(cudaGraphExecDestroy(ge));
        CHECK(cudaGraphDestroy(g));
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaStreamDestroy(s));
    return out;
}

static double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GB/s of one device-to-host copy of `bytes` into pageable memory never
// touched before, the same memory again, and pinned memory.
static void print_d2h_speed(size_t bytes)
{
    void *d, *pinned;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemset(d, 1, bytes));
    CHECK(cudaMallocHost(&pinned, bytes));
    std::unique_ptr<uint8_t[]> pageable(new uint8_t[bytes]); // pages not touched yet
    double gbs[3];
    void *dst[3] = {pageable.get(), pageable.get(), pinned};
    for (int i = 0; i < 3; i++) {
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cudaMemcpy(dst[i], d, bytes, cudaMemcpyDeviceToHost));
        gbs[i] = bytes / seconds_since(t0) / 1e9;
    }
    printf("device -> host, %.0f MB: pageable %.2f GB/s (first) %.2f GB/s (again), "
           "pinned %.2f GB/s\n",
           bytes / 1e6, gbs[0], gbs[1], gbs[2]);
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d));
}

int main(int argc, char **argv)
{
    int64_t T = 262144, Td = 256;
    int H = 8, D = 128, bs = 16, reps = 50;
    bool only_formats = false, only_nvfp4 = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--only-formats"))
            only_formats = true;
        else if (!strcmp(a, "--only-nvfp4"))
            only_formats = only_nvfp4 = true;
        else if (i + 1 < argc && !strcmp(a, "--tokens"))
            T = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--decode-tokens"))
            Td = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--heads"))
            H = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--head-dim"))
            D = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--block-size"))
            bs = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(a, "--reps"))
            reps = atoi(argv[++i]);
        else {
            fprintf(
                stderr,
                "usage: %s [--tokens N] [--decode-tokens N] [--heads H] [--head-dim D] "
                "[--block-size B] [--reps N] [--only-formats] [--only-nvfp4]\n",
                argv[0]);
            return 2;
        }
    }
    if (T < 1 || Td < 1 || H < 1 || D < 8 || D % 8 || bs < 1 || reps < 1) {
        fprintf(stderr, "kvquant: need tokens >= 1, heads >= 1, head-dim a multiple of "
                        "8, reps >= 1\n");
        return 2;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize / 1e6);
    print_d2h_speed((size_t)64 << 20);
    double validate_s = 0, time_s = 0;
    size_t flush_bytes = (size_t)4 * prop.l2CacheSize;
    void *flush;
    CHECK(cudaMalloc(&flush, flush_bytes));
    int64_t blocks = (T + bs - 1) / bs;
    struct Case {
        const char *name;
        int64_t T;
        bool decode, in_turn;
    } cases[3] = {{"prefill", T, false, true},
                  {"scatter", T, false, false},
                  {"decode", Td, true, false}};
    double copy_gbs[3] = {0, 0, 0}, copy_graph_us = 0;
    int failures = 0;
    printf("\n%-8s %-26s %10s %10s %10s %9s %7s %s\n", "case", "op", "MB", "median_us",
           "GB/s", "graph_us", "%copy", "check");
    for (int ci = 0; ci < 3; ci++) {
        const bool scatter = !cases[ci].in_turn && !cases[ci].decode;
        if ((only_formats && scatter) || (only_nvfp4 && ci > 0))
            continue;
        Problem p;
        problem_make(p, cases[ci].T, H, D, bs,
                     cases[ci].in_turn ? blocks
                                       : std::max<int64_t>(blocks, 4 * cases[ci].T),
                     cases[ci].in_turn, 1234u + ci);
        for (int o = 0; o < NUM_OPS; o++) {
            Op op = (Op)o;
            const bool bench_kernel = op == V1_STATIC_HEAD || op == V3_STATIC_HEAD ||
                                      op == V3R8_STATIC_HEAD || op == V3_DYNAMIC;
            const bool reference = op == COPY || op == STATIC_HEAD || op == DEQUANT;
            if ((bench_kernel && (ci > 0 || (op != V1_STATIC_HEAD && D != 128))) ||
                (op == SCALER_GROW && cases[ci].decode) ||
                (is_fmt(op) && !kvcal_kv_format_row_bytes(fmt_of(op), D)) ||
                (only_formats && !is_fmt(op) && !reference) ||
                (is_v1(op) && (scatter || !only_formats)) ||
                ((is_v2(op) || is_kept_nvfp4(op) || is_v4x(op)) &&
                 (ci > 0 || !only_formats)) ||
                (is_v4x(op) && D != 64 && D != 128 && D != 256) ||
                (only_nvfp4 && op != COPY && op != FMT_DEQUANT_NVFP4 &&
                 !is_kept_nvfp4(op) && op != V4X_WRITE))
                continue;
            auto t0 = std::chrono::steady_clock::now();
            size_t bad = validate(p, op);
            validate_s += seconds_since(t0);
            failures += bad != 0;
            t0 = std::chrono::steady_clock::now();
            Timing t = time_op(p, op, reps, cases[ci].decode, flush, flush_bytes);
            time_s += seconds_since(t0);
            double mb = op_bytes(p, op) / 1e6;
            double gbs = op_bytes(p, op) / (t.median_us * 1e3);
            if (op == COPY)
                copy_gbs[ci] = gbs, copy_graph_us = t.graph_us;
            double pct = cases[ci].decode ? 100.0 * copy_graph_us / t.graph_us
                                          : 100.0 * gbs / copy_gbs[ci];
            printf("%-8s %-26s %10.2f %10.2f %10.1f %9.2f %6.1f%% %s\n", cases[ci].name,
                   op_name[o], mb, t.median_us, gbs, t.graph_us, pct,
                   bad ? "FAIL" : "ok");
            if (bad)
                printf("         %zu differences against the CPU reference\n", bad);
        }
        problem_free(p);
    }
    printf("\nprefill and scatter %%copy: GB/s over the case's copy's GB/s; decode "
           "%%copy: copy graph_us over the op's graph_us (time per call in a replayed "
           "graph of 20 calls)\n");
    printf("host time: validation %.1f s, timing %.1f s\n", validate_s, time_s);
    cudaFree(flush);
    return failures ? 1 : 0;
}
