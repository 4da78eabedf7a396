// bench/kvquant_fmt_v4.cuh: v4 of NVFP4's fast dequantization into bf16,
// kept to time against: kernels/cuda/kvquant_fmt.cu's fmt_dequantize_fast_kernel
// for NVFP4 into bf16 as it was before the staged kernel (commit 20be60f;
// measured at 84.6-84.9% of the device copy at prefill, bench/NOTES.md
// "v4"): head_dim / 16 lanes a row, 4 rows a group of lanes, all their
// loads (4 bytes of packed values and one scale byte a piece) issued before
// any conversion, each piece of 8 values decoded by its block's byte tables
// (kernels/cuda/kvquant_fmt_nvfp4.h) into one 16-byte store, v3's fp32
// arithmetic for a block of non-finite decode scale. It shares the
// arguments, row parameters and host checks of kernels/cuda/kvquant_fmt.cuh
// with the library, and the same bytes (bench/kvquant validates it like
// every op). Entry point: v4::run, for NVFP4 caches into bf16 outputs the
// fast kernel takes (a prefill). Included by bench/kvquant.cu alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kvquant_fmt.cuh"
#include "kernels/cuda/kvquant_fmt_nvfp4.h"

namespace v4
{
using namespace kvfmt;

constexpr int kFastRows = 4; // rows per group of lanes

// The bf16 values of 8 codes w of a block of scale byte value e under
// global scale g: by the block's byte tables where e x g is finite, else
// by v3's arithmetic (e2m1 bits as an fp32 subnormal x 2^126 x e x g).
__device__ __forceinline__ uint4 piece(uint32_t w, float e, float g)
{
    const float d = e * g;
    if (fabsf(d) < INFINITY) {
        const float2 q[4] = {{0.0f * d, 0.5f * d},
                             {d, 1.5f * d},
                             {2.0f * d, 3.0f * d},
                             {4.0f * d, 6.0f * d}};
        uint32_t p[4], t[4], v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __nv_bfloat162 b = __floats2bfloat162_rn(q[i].x, q[i].y);
            p[i] = *reinterpret_cast<const uint32_t *>(&b);
        }
        kvcal_nvfp4_tables(p, t);
        kvcal_nvfp4_lookup8(t, w, v);
        return make_uint4(v[0], v[1], v[2], v[3]);
    }
    alignas(16) __nv_bfloat16 o[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t q = w >> (4 * j);
        o[j] = __float2bfloat16_rn(__uint_as_float((q & 7u) << 22 | (q & 8u) << 28) *
                                   0x1p126f * d);
    }
    return *reinterpret_cast<const uint4 *>(o);
}

// v4's NVFP4 dequantization of head_dim D into bf16: D / 16 lanes a row,
// 8 values a 16-byte store, piece c of lane l at column c D / 2 + 8 l.
template <int D>
__global__ void __launch_bounds__(kFastThreads) dequantize_nvfp4_kernel(FmtArgs a)
{
    constexpr int kLanes = D / 16, kPiece = 8, kChunks = 2;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)a.g.num_kv_heads;
    const int64_t rows = a.num_tokens * H;
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
    uint32_t b[2][kFastRows][kChunks];
    float scale[2][kFastRows][kChunks], g[2][kFastRows];
#pragma unroll
    for (int i = 0; i < kFastRows; i++) {
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            g[kv][i] = 1.0f;
#pragma unroll
            for (int c = 0; c < kChunks; c++)
                b[kv][i][c] = 0, scale[kv][i][c] = 0.0f;
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
        const int64_t at = base + (int64_t)in_block * (D / 2);
        const int64_t si = kvcal_kv_scale_index_at(a.g, block, off, head);
#pragma unroll
        for (int kv = 0; kv < 2; kv++) {
            g[kv][i] =
                a.scales[kv] ? static_row(a, kv, head).scale : a.scale_cache[kv][si];
#pragma unroll
            for (int c = 0; c < kChunks; c++) {
                const int col = c * (D / kChunks) + lane * kPiece;
                b[kv][i][c] =
                    *reinterpret_cast<const uint32_t *>(a.cache[kv] + at + col / 2);
                scale[kv][i][c] =
                    e4m3_value(a.cache[kv][base + nvfp4_scale_in_block<D>(
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
            for (int c = 0; c < kChunks; c++)
                *reinterpret_cast<uint4 *>(static_cast<__nv_bfloat16 *>(a.out[kv]) +
                                           (first + i) * D + c * (D / kChunks) +
                                           lane * kPiece) =
                    piece(b[kv][i][c], scale[kv][i][c], g[kv][i]);
    }
}

// v4's fast NVFP4 dequantization into bf16 (the bench's), as
// kvcal_kv_dequantize_fmt_launch ran it; KVCAL_ERR_INVALID_ARG for a call
// the fast kernel does not take.
inline kvcal_status run(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                        const kvcal_kv_qparams *params, void *k_out, void *v_out,
                        cudaStream_t s)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_dequantize_check("v4::run", batch, cache, params, k_out,
                                                   v_out, KVCAL_DTYPE_BF16, &g);
    if (st != KVCAL_OK)
        return st;
    FmtArgs a = make_args(batch, cache, params, g);
    a.out[0] = k_out, a.out[1] = v_out;
    if (params->format != KVCAL_KV_FORMAT_NVFP4 || !fast_shape(a, kNvfp4) ||
        !aligned(k_out, 16) || !aligned(v_out, 16))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "v4::run: not an NVFP4 cache the fast kernel takes");
    const int d = g.head_dim;
    if (d == 64)
        dequantize_nvfp4_kernel<64>
            <<<fast_grid(a, 64 / 16, kFastRows), kFastThreads, 0, s>>>(a);
    else if (d == 128)
        dequantize_nvfp4_kernel<128>
            <<<fast_grid(a, 128 / 16, kFastRows), kFastThreads, 0, s>>>(a);
    else
        dequantize_nvfp4_kernel<256>
            <<<fast_grid(a, 256 / 16, kFastRows), kFastThreads, 0, s>>>(a);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? KVCAL_OK
               : kvcal_fail(KVCAL_ERR_CUDA, "v4::run: %s", cudaGetErrorString(e));
}

} // namespace v4
