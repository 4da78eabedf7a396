// bench/kvquant_fmt_v3.cuh: v3 of NVFP4's fast dequantization into bf16,
// kept to time against: kernels/cuda/kvquant_fmt.cu's fmt_dequantize_fast_kernel
// for NVFP4 as it was before v4 (commit 9982a72; measured at 84.9-85.0% of
// the device copy at prefill, bench/NOTES.md "v3" and "v4"): head_dim / 16
// lanes a row, 4 rows a group of lanes, each value decoded by fp32
// arithmetic (the e2m1 bits as an fp32 subnormal times 2^126, times the
// block's decode scale), the block scale bytes addressed by
// kvcal_kvfmt_nvfp4_scale_at. It shares the arguments, row parameters and
// host checks of kernels/cuda/kvquant_fmt.cuh with the library, and the
// same bytes (bench/kvquant validates it like every op). Entry point:
// v3::run, for NVFP4 caches into bf16 outputs the fast kernel takes (a
// prefill). Included by bench/kvquant.cu alone.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kvquant_fmt.cuh"

namespace v3
{
using namespace kvfmt;

constexpr int kFastRows = 4; // rows per group of lanes

// v3's NVFP4 dequantization of head_dim D into bf16: D / 16 lanes a row,
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
        const int64_t at =
            (int64_t)block * a.g.block_stride + (int64_t)in_block * (D / 2);
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
                scale[kv][i][c] = e4m3_value(
                    a.cache[kv][nvfp4_scale_at<D>(a.g, block, off, head, col / 16, kv)]);
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
                const float d = scale[kv][i][c] * g[kv][i];
                alignas(16) __nv_bfloat16 o[kPiece];
#pragma unroll
                for (int j = 0; j < kPiece; j++) {
                    const uint32_t q = b[kv][i][c] >> (4 * j);
                    o[j] = __float2bfloat16_rn(
                        __uint_as_float((q & 7u) << 22 | (q & 8u) << 28) * 0x1p126f * d);
                }
                *reinterpret_cast<uint4 *>(static_cast<__nv_bfloat16 *>(a.out[kv]) +
                                           (first + i) * D + c * (D / kChunks) +
                                           lane * kPiece) =
                    *reinterpret_cast<const uint4 *>(o);
            }
    }
}

// v3's fast NVFP4 dequantization into bf16 (the bench's), as
// kvcal_kv_dequantize_fmt_launch ran it; KVCAL_ERR_INVALID_ARG for a call
// the fast kernel does not take.
inline kvcal_status run(const kvcal_kv_batch *batch, const kvcal_kv_cache *cache,
                        const kvcal_kv_qparams *params, void *k_out, void *v_out,
                        cudaStream_t s)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_dequantize_check("v3::run", batch, cache, params, k_out,
                                                   v_out, KVCAL_DTYPE_BF16, &g);
    if (st != KVCAL_OK)
        return st;
    FmtArgs a = make_args(batch, cache, params, g);
    a.out[0] = k_out, a.out[1] = v_out;
    if (params->format != KVCAL_KV_FORMAT_NVFP4 || !fast_shape(a, kNvfp4) ||
        !aligned(k_out, 16) || !aligned(v_out, 16))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "v3::run: not an NVFP4 cache the fast kernel takes");
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
               : kvcal_fail(KVCAL_ERR_CUDA, "v3::run: %s", cudaGetErrorString(e));
}

} // namespace v3
