/* kernels/cuda/weight_transpose.cu: a band of a transposed weight into its
 * logical layout (see weight_transpose.h): 32 x 32 tiles through shared
 * memory, read along the band's rows and written along dst's, both
 * coalesced. */
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/weight_transpose.h"

#define TILE 32
#define TILE_ROWS                                                                        \
    8 /* a block's threads: (TILE, TILE_ROWS), TILE / TILE_ROWS values each */

/* The bits of bf16 x through float and back (kvcal_bf16_from_float): a
 * NaN made quiet, every other value as it is. */
static __device__ __forceinline__ uint16_t as_converted(uint16_t x)
{
    return (x & 0x7fffu) > 0x7f80u ? (uint16_t)(x | 0x40u) : x;
}

__global__ void __launch_bounds__(TILE *TILE_ROWS)
    weight_transpose_kernel(uint16_t *__restrict__ dst,        // (rows, cols)
                            const uint16_t *__restrict__ band, // (bc, bs)
                            int64_t cols, int64_t bc, int64_t bs, int64_t c0, int64_t s0,
                            int64_t half)
{
    __shared__ uint16_t tile[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t s_tiles = (bs + TILE - 1) / TILE;
    for (int64_t t = blockIdx.x; t < s_tiles * ((bc + TILE - 1) / TILE); t += gridDim.x) {
        const int64_t cb = t / s_tiles * TILE, sb = t % s_tiles * TILE;
        for (int i = ty; i < TILE; i += TILE_ROWS) {
            const int64_t c = cb + i, s = sb + tx;
            if (c < bc && s < bs)
                tile[i][tx] = band[c * bs + s];
        }
        __syncthreads();
        for (int i = ty; i < TILE; i += TILE_ROWS) {
            const int64_t s = s0 + sb + i, c = cb + tx;
            if (c < bc && sb + i < bs) {
                const int64_t r = !half ? s : (s & 1) ? half + s / 2 : s / 2;
                dst[r * cols + c0 + c] = as_converted(tile[tx][i]);
            }
        }
        __syncthreads();
    }
}

extern "C" kvcal_status kvcal_weight_transpose_launch(kvcal_bf16 *dst, int64_t cols,
                                                      const kvcal_bf16 *band, int64_t bc,
                                                      int64_t bs, int64_t c0, int64_t s0,
                                                      int64_t half, cudaStream_t stream)
{
    if (!dst || !band || bc < 1 || bs < 1 || c0 < 0 || s0 < 0 || c0 + bc > cols)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "weight transpose: band (%lld, %lld) at (%lld, %lld) of a weight "
            "of %lld columns: need buffers and a band inside the weight",
            (long long)bc, (long long)bs, (long long)c0, (long long)s0, (long long)cols);
    const int64_t tiles = ((bc + TILE - 1) / TILE) * ((bs + TILE - 1) / TILE);
    const unsigned blocks = (unsigned)(tiles < 132 * 16 ? tiles : 132 * 16);
    weight_transpose_kernel<<<blocks, dim3(TILE, TILE_ROWS), 0, stream>>>(
        dst, band, cols, bc, bs, c0, s0, half);
    KVCAL_CUDA_CHECK_LAUNCH("weight_transpose_kernel");
    return KVCAL_OK;
}
