// bench/kvquant_fmt_v4x.cuh: variants of v4, NVFP4's fast dequantization
// into bf16 (kernels/cuda/kvquant_fmt.cu, fmt_dequantize_fast_kernel), to
// find what bounds it (bench/NOTES.md, "NVFP4's dequantization, v4"): one
// kernel template whose parameters are the rows a group of lanes takes, the
// threads a block, streaming stores (st.global.cs) for the output, a grid
// of at most as many blocks as fit on the device at once looping over the
// tiles of rows (persistent), and write-only (the same grid and 16-byte
// stores of zeros, no load: the ceiling of the stores alone). Base
// parameters (4 rows, 128 threads, plain stores, one block a tile) are the
// library's v4. The decoding is the library's: the byte tables of
// kernels/cuda/kvquant_fmt_nvfp4.h for a finite decode scale, v3's fp32
// arithmetic otherwise. It shares the arguments, row parameters and host
// checks of kernels/cuda/kvquant_fmt.cuh; bench/kvquant validates every
// decoding variant against the reference like every op, and checks the
// write-only ones wrote zeros. Entry point: v4x::run. Included by
// bench/kvquant.cu alone.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cpu/kvquant_fmt.h"
#include "kernels/cuda/kvquant_fmt.cuh"
#include "kernels/cuda/kvquant_fmt_nvfp4.h"

namespace v4x
{
using namespace kvfmt;

// The variants, in bench/kvquant's order of its v4x ops.
enum Kind {
    kWrite,        // write-only, the library's grid and stores
    kWriteCs,      // write-only, streaming stores
    kBase,         // v4 as the library runs it
    kCs,           // streaming stores
    kRows8,        // 8 rows a group of lanes (twice the loads in flight)
    kRows8Cs,      // both
    kThreads256,   // 256 threads a block
    kPersistent,   // a grid of the blocks resident at once, looping over tiles
    kPersistentCs, // both
};

// 8 e2m1 nibbles w (value j at bits 4j..4j+3) of a block of decode scale d
// as bf16 (value 0 lowest): the byte tables where d is finite, else the
// product of the nibble's bits as an fp32 subnormal, 2^126 and d (v3's).
__device__ __forceinline__ uint4 decode8(uint32_t w, float d)
{
    uint32_t v[4];
    if (fabsf(d) < INFINITY) {
        const __nv_bfloat162 p[4] = {__floats2bfloat162_rn(0.0f * d, 0.5f * d),
                                     __floats2bfloat162_rn(d, 1.5f * d),
                                     __floats2bfloat162_rn(2.0f * d, 3.0f * d),
                                     __floats2bfloat162_rn(4.0f * d, 6.0f * d)};
        uint32_t t[4];
        kvcal_nvfp4_tables(reinterpret_cast<const uint32_t *>(p), t);
        kvcal_nvfp4_lookup8(t, w, v);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float x[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint32_t q = w >> (8 * i + 4 * j);
                x[j] = __uint_as_float((q & 7u) << 22 | (q & 8u) << 28) * 0x1p126f * d;
            }
            const __nv_bfloat162 h = __floats2bfloat162_rn(x[0], x[1]);
            v[i] = *reinterpret_cast<const uint32_t *>(&h);
        }
    }
    return make_uint4(v[0], v[1], v[2], v[3]);
}

// v4's kernel for head_dim D into bf16: D / 16 lanes a row, ROWS rows a
// group of lanes, THREADS threads a block; a block takes tiles blockIdx.x,
// + gridDim.x, ... of THREADS / (D / 16) groups. Piece c of lane l at
// column c D / 2 + 8 l, one 16-byte store (st.global.cs when CS). WRITE:
// no load, zeros stored where the kernel stores. 4 rows: 1,024 threads an
// SM at most 64 registers each, as the library's (its loop over tiles
// would take 72); 8 rows: the registers they need.
template <int D, int ROWS, int THREADS, bool CS, bool WRITE>
__global__ void __launch_bounds__(THREADS, ROWS == 4 ? 1024 / THREADS : 1)
    dequantize_kernel(FmtArgs a, unsigned tiles)
{
    constexpr int kLanes = D / 16, kPiece = 8, kChunks = 2;
    const int lane = threadIdx.x & (kLanes - 1);
    const uint32_t H = (uint32_t)a.g.num_kv_heads;
    const int64_t rows = a.num_tokens * H; // < 2^31 (host check)
    for (unsigned tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int64_t first =
            ((int64_t)tile * (THREADS / kLanes) + threadIdx.x / kLanes) * ROWS;
        int64_t slot[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; i++)
            slot[i] = first + i >= rows ? -1
                      : WRITE           ? 0
                                        : __ldg(a.slots + kvcal_kv_fastdiv_div(
                                                              a.heads_div, (uint32_t)(first + i)));
        uint32_t b[2][ROWS][kChunks];
        float d[2][ROWS][kChunks]; // the pieces' decode scales
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
#pragma unroll
                for (int c = 0; c < kChunks; c++)
                    b[kv][i][c] = 0, d[kv][i][c] = 0.0f;
            if (WRITE || !(slot[i] >= 0 && slot[i] < a.g.capacity))
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
                const float g =
                    a.scales[kv] ? static_row(a, kv, head).scale : a.scale_cache[kv][si];
#pragma unroll
                for (int c = 0; c < kChunks; c++) {
                    const int col = c * (D / kChunks) + lane * kPiece;
                    b[kv][i][c] =
                        *reinterpret_cast<const uint32_t *>(a.cache[kv] + at + col / 2);
                    d[kv][i][c] =
                        e4m3_value(
                            a.cache[kv][base + nvfp4_scale_in_block<D>(
                                                   (uint32_t)a.g.block_size, H,
                                                   a.g.layout == KVCAL_CACHE_NHD, off,
                                                   (uint32_t)head, col / 16, kv)]) *
                        g;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < ROWS; i++) {
            if (!(slot[i] >= 0 && slot[i] < a.g.capacity))
                continue;
#pragma unroll
            for (int kv = 0; kv < 2; kv++)
#pragma unroll
                for (int c = 0; c < kChunks; c++) {
                    uint4 *out = reinterpret_cast<uint4 *>(
                        static_cast<__nv_bfloat16 *>(a.out[kv]) + (first + i) * D +
                        c * (D / kChunks) + lane * kPiece);
                    const uint4 o = WRITE ? make_uint4(0, 0, 0, 0)
                                          : decode8(b[kv][i][c], d[kv][i][c]);
                    if constexpr (CS)
                        __stcs(out, o);
                    else
                        *out = o;
                }
        }
    }
}

// Launches one variant for head_dim D: one block a tile, or (persistent)
// as many blocks as the device holds at once, each looping over tiles.
template <int D, int ROWS, int THREADS, bool CS, bool WRITE>
void launch(const FmtArgs &a, bool persistent, cudaStream_t s)
{
    const int64_t groups = (a.num_tokens * a.g.num_kv_heads + ROWS - 1) / ROWS;
    const int64_t per_block = THREADS / (D / 16);
    const unsigned tiles = (unsigned)((groups + per_block - 1) / per_block);
    auto kernel = dequantize_kernel<D, ROWS, THREADS, CS, WRITE>;
    static unsigned resident = 0; // blocks the device holds at once (asked once)
    if (persistent && !resident) {
        int dev = 0, sms = 0, per_sm = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, 0);
        resident = (unsigned)std::max(1, sms * per_sm);
    }
    kernel<<<persistent ? std::min(tiles, resident) : tiles, THREADS, 0, s>>>(a, tiles);
}

template <int ROWS, int THREADS, bool CS, bool WRITE>
void launch_d(const FmtArgs &a, bool persistent, cudaStream_t s)
{
    if (a.g.head_dim == 64)
        launch<64, ROWS, THREADS, CS, WRITE>(a, persistent, s);
    else if (a.g.head_dim == 128)
        launch<128, ROWS, THREADS, CS, WRITE>(a, persistent, s);
    else
        launch<256, ROWS, THREADS, CS, WRITE>(a, persistent, s);
}

// Variant `kind` of the fast NVFP4 dequantization into bf16 (the bench's);
// KVCAL_ERR_INVALID_ARG for a call the fast kernel does not take.
inline kvcal_status run(Kind kind, const kvcal_kv_batch *batch,
                        const kvcal_kv_cache *cache, const kvcal_kv_qparams *params,
                        void *k_out, void *v_out, cudaStream_t s)
{
    kvcal_kv_geom g;
    kvcal_status st = kvcal_kvfmt_dequantize_check("v4x::run", batch, cache, params,
                                                   k_out, v_out, KVCAL_DTYPE_BF16, &g);
    if (st != KVCAL_OK)
        return st;
    FmtArgs a = make_args(batch, cache, params, g);
    a.out[0] = k_out, a.out[1] = v_out;
    if (params->format != KVCAL_KV_FORMAT_NVFP4 || !fast_shape(a, kNvfp4) ||
        !aligned(k_out, 16) || !aligned(v_out, 16))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "v4x::run: not an NVFP4 cache the fast kernel takes");
    switch (kind) {
    case kWrite:
        launch_d<4, kFastThreads, false, true>(a, false, s);
        break;
    case kWriteCs:
        launch_d<4, kFastThreads, true, true>(a, false, s);
        break;
    case kBase:
        launch_d<4, kFastThreads, false, false>(a, false, s);
        break;
    case kCs:
        launch_d<4, kFastThreads, true, false>(a, false, s);
        break;
    case kRows8:
        launch_d<8, kFastThreads, false, false>(a, false, s);
        break;
    case kRows8Cs:
        launch_d<8, kFastThreads, true, false>(a, false, s);
        break;
    case kThreads256:
        launch_d<4, 256, false, false>(a, false, s);
        break;
    case kPersistent:
        launch_d<4, kFastThreads, false, false>(a, true, s);
        break;
    case kPersistentCs:
        launch_d<4, kFastThreads, true, false>(a, true, s);
        break;
    }
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess
               ? KVCAL_OK
               : kvcal_fail(KVCAL_ERR_CUDA, "v4x::run: %s", cudaGetErrorString(e));
}

} // namespace v4x
