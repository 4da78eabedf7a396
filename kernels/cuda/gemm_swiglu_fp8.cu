/* kernels/cuda/gemm_swiglu_fp8.cu: the FP8 MLP's gate/up projection and
 * SwiGLU in one Hopper GEMM, then the down projection's input quantization
 * in one pass: the FP8 counterpart of gemm_swiglu.cu, for a checkpoint
 * whose gate/up weight is e4m3 with a per-tensor or per-channel scale and
 * whose activations are e4m3 with a per-token or static scale.
 *
 * Served as vLLM serves it, the gate/up projection is an FP8 GEMM whose
 * fp32 sums are scaled (x's scale times the weight's) and rounded to bf16,
 * SwiGLU then rounds as the runner's (bf16_round.cuh), and the down
 * projection quantizes that (rows, n) activation per token or statically
 * (core/fp8_linear.h). kvcal_gemm_swiglu_fp8_launch computes the same
 * values without the (rows, 2n) gate/up product: act (rows, n) bf16 and
 * each row's absmax (atomicMax over the tiles of the row);
 * kvcal_fp8_quant_absmax_launch then quantizes act with the scale of that
 * absmax, element by element as kvcal_fp8_quant_act_launch would (the
 * bytes of fp8_quant_row.cuh). Against cuBLASLt's gate/up and
 * kvcal_fp8_swiglu_quant_launch this writes (rows, n) bf16 and reads it
 * back instead of (rows, 2n).
 *
 * The GEMM is gemm_swiglu.cu's (warp-specialized, persistent, 2-CTA
 * clusters multicasting the weight tile, the weight interleaved in blocks
 * of 128 gate and 128 up rows) with k blocks of 128 e4m3 values (a 128-byte
 * swizzled row, as a bf16 block of 64) and wgmma m64n128k32 e4m3. The sums
 * accumulate in fp32: the tensor cores' own accumulation (13 mantissa bits)
 * runs over one k block at a time, into a temporary that is then added to
 * the fp32 accumulators (the promotion every 128 of CUTLASS's and
 * cuBLASLt's FP8 kernels without fast accumulation). A consumer warpgroup
 * holds its 64 x 128 gate and up accumulators (128 registers) and one
 * 64 x 128 temporary, so each k block runs as two halves, gate then up,
 * each waited for and added before the next is issued; the two consumer
 * warpgroups' halves interleave on the tensor cores. The first k block of
 * a tile needs no temporary: it is issued into the accumulators directly,
 * and the previous tile's epilogue (kept rounded to bf16 in the registers
 * the temporary frees) runs while the tensor cores compute it.
 *
 * For sm_90a only, as gemm_swiglu.cu; elsewhere the launch reports
 * KVCAL_ERR_UNSUPPORTED and the caller takes cuBLASLt's path. */
#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/fp8_quant_row.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"

namespace
{

constexpr int BM = KVCAL_SM90_BM, BN = KVCAL_SM90_BN, BKB = 128, STAGES = 4,
              THREADS = 384;
constexpr int CL = 2; /* CTAs per cluster */
constexpr int A_BYTES = BM * BKB, B_BYTES = BN * BKB, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int HALF_B = (BN / 2) * BKB; /* the up rows' offset in a weight tile */
constexpr int OUT_BYTES = (BM / 2) * (BN / 2) * 2;
constexpr size_t SMEM_BYTES =
    1024 + (size_t)STAGES * STAGE_BYTES + 2 * OUT_BYTES + 2 * STAGES * 8;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int GROUP_M = 16; /* row blocks walked together (the tile order) */

/* The four wgmma of one half (gate: b, up: b + HALF_B) of a k block into d,
 * d first cleared; committed as one group. */
__device__ __forceinline__ void half_block(float (&d)[64], const unsigned char *a,
                                           const unsigned char *b)
{
    using namespace kvcal_sm90;
#pragma unroll
    for (int kk = 0; kk < BKB / 32; kk++)
        wgmma_m64n128k32_e4m3(d, smem_desc(a + kk * 32), smem_desc(b + kk * 32), kk > 0);
}

#endif

/* act (rows, n) and absmax (rows, zeroed before); map_x over xq (rows, k)
 * e4m3, map_w over the interleaved weight (2n padded, k) e4m3 (boxes of BN
 * / CL rows), map_act over act (boxes of BM / 2 rows); x_scale: a scale a
 * row (x_rows) or one; w_scale: the weight's scale a row of [gate; up]
 * (W_ROWS) or one. */
template <bool W_ROWS>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_swiglu_fp8_kernel(const __grid_constant__ CUtensorMap map_x,
                           const __grid_constant__ CUtensorMap map_w,
                           const __grid_constant__ CUtensorMap map_act, float *absmax,
                           const float *x_scale, int x_rows, const float *w_scale,
                           int rows, int k, int n)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace kvcal_sm90;
    extern __shared__ unsigned char smem_raw[];
    const smem_layout sm = carve_smem(smem_raw, STAGES, STAGE_BYTES, OUT_BYTES);
    unsigned char *smem = sm.stages, *out_stage = sm.out_stage;
    uint64_t *full = sm.full, *empty = sm.empty;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int num_mg = (rows + CL * BM - 1) / (CL * BM),
              num_n = (n + BN / 2 - 1) / (BN / 2), num_k = (k + BKB - 1) / BKB;
    const int tiles = num_mg * num_n; /* a cluster's, CL row blocks each */
    const int rank = (int)cluster_rank(), cluster = blockIdx.x / CL,
              clusters = gridDim.x / CL;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2 * CL);
        }
        mbar_init_fence();
    }
    cluster_sync();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0)
            produce_cluster_tiles<STAGES, CL>(sm, &map_x, &map_w, STAGE_BYTES, A_BYTES,
                                              BKB, cluster, clusters, tiles, num_mg,
                                              num_n, GROUP_M / CL, num_k);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int half = wg - 1, warp = tid / 32, lane = tid % 32;
        unsigned char *out = out_stage + half * OUT_BYTES;
        auto release = [&](int stage) {
            for (int r = 0; r < CL; r++)
                mbar_arrive_cluster(&empty[stage], r);
        };
        /* this thread's first row of tile t (the second 8 below) */
        auto first_row = [&](int t, int &col0) {
            int mg, nb;
            tile_coords(t, num_mg, num_n, GROUP_M / CL, mg, nb);
            col0 = nb * (BN / 2);
            return (mg * CL + rank) * BM + half * (BM / 2) + 16 * warp + lane / 4;
        };
        /* A finished tile's gate (r[2 j + h]) and up (r[32 + 2 j + h]) of
         * row 8 h, columns 8 j + 2 (lane % 4) + {0, 1} (round_accumulators'
         * order), scaled and rounded to bf16 as the served GEMM's output. */
        __nv_bfloat162 r[64];
        float g[64], u[64];
        auto round_tile = [&](int t) {
            int col0;
            const int row = first_row(t, col0);
            float sx[2];
#pragma unroll
            for (int h = 0; h < 2; h++)
                sx[h] = x_rows ? (row + 8 * h < rows ? x_scale[row + 8 * h] : 0.0f)
                               : x_scale[0];
            const float w0 = W_ROWS ? 0.0f : w_scale[0];
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int c = col0 + 8 * j + 2 * (lane % 4);
                /* columns past n (the padding's, whatever its bytes) get scale 0:
                 * act 0 there (or NaN, which fmaxf skips), out of the absmax */
                float2 wg2 = make_float2(0.0f, 0.0f), wu2 = wg2;
                if (c < n) {
                    wg2 = W_ROWS ? *reinterpret_cast<const float2 *>(w_scale + c)
                                 : make_float2(w0, w0);
                    wu2 = W_ROWS ? *reinterpret_cast<const float2 *>(w_scale + n + c)
                                 : make_float2(w0, w0);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int i = 4 * j + 2 * h;
                    r[2 * j + h] = __floats2bfloat162_rn(sx[h] * (wg2.x * g[i]),
                                                         sx[h] * (wg2.y * g[i + 1]));
                    r[32 + 2 * j + h] = __floats2bfloat162_rn(sx[h] * (wu2.x * u[i]),
                                                              sx[h] * (wu2.y * u[i + 1]));
                }
            }
        };
        /* SwiGLU of a rounded tile, staged for two TMA stores (which clip
         * rows and columns past the end), and each row's absmax into absmax */
        auto epilogue = [&](int t) {
            if (tid == 0)
                tma_store_wait_read(); /* the previous tile's stores have read it */
            named_barrier(1 + half, 128);
            const uint32_t base = stage_base(out, warp, lane);
            float m[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 16; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const __nv_bfloat162 a =
                        kvcal_swiglu2_bf16(r[2 * j + h], r[32 + 2 * j + h]);
                    st_shared_pair(stage_addr(base, j, h), a);
                    const float2 f = __bfloat1622float2(a);
                    m[h] = fmaxf(m[h], fmaxf(fabsf(f.x), fabsf(f.y)));
                }
            fence_proxy_async();
            named_barrier(1 + half, 128);
            int col0;
            const int row = first_row(t, col0);
            if (tid == 0) {
                const int row0 = row - lane / 4; /* lane 0 of warp 0 */
                tma_store_2d(&map_act, out, col0, row0);
                if (col0 + 64 < n)
                    tma_store_2d(&map_act, out + OUT_BYTES / 2, col0 + 64, row0);
                tma_store_commit();
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
                m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
                if (lane % 4 == 0 && row + 8 * h < rows) /* non-negative: as integers */
                    atomicMax(reinterpret_cast<unsigned int *>(absmax) + row + 8 * h,
                              __float_as_uint(m[h]));
            }
        };
        int s = 0, phase = 0;
        auto next_stage = [&] {
            if (tid == 0)
                release(s);
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        };
        for (int t = cluster; t < tiles; t += clusters) {
            /* k block 0 straight into the accumulators, under the previous
             * tile's epilogue (peeled, so that r is dead in the loop below) */
            mbar_wait(&full[s], phase);
            const unsigned char *a = smem + s * STAGE_BYTES + half * (BM / 2) * BKB;
            const unsigned char *b = smem + s * STAGE_BYTES + A_BYTES;
            wgmma_fence();
            fence_operands(g);
            fence_operands(u);
            half_block(g, a, b);
            half_block(u, a, b + HALF_B);
            wgmma_commit();
            fence_operands(g);
            fence_operands(u);
            if (t > cluster)
                epilogue(t - clusters);
            wgmma_wait<0>();
            fence_operands(g);
            fence_operands(u);
            next_stage();
            /* the other k blocks: each half into the temporary, then added */
            for (int kb = 1; kb < num_k; kb++) {
                mbar_wait(&full[s], phase);
                a = smem + s * STAGE_BYTES + half * (BM / 2) * BKB;
                b = smem + s * STAGE_BYTES + A_BYTES;
                float d[64];
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    wgmma_fence();
                    fence_operands(d);
                    half_block(d, a, b + p * HALF_B);
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_operands(d);
                    float(&acc)[64] = p ? u : g;
#pragma unroll
                    for (int i = 0; i < 64; i++)
                        acc[i] += d[i];
                }
                next_stage();
            }
            round_tile(t);
        }
        if (cluster < tiles)
            epilogue(cluster + (tiles - 1 - cluster) / clusters * clusters);
        if (tid == 0)
            tma_store_wait_read();
    }
    cluster_sync();
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}

/* xq (rows, n) and xs (rows) from act and its rows' absmax: TOKEN the
 * scale of the absmax, STATIC input_scale; a block a row at a time. */
template <kvcal_fp8_act_scale MODE>
__global__ void quant_absmax_kernel(uint8_t *xq, float *xs, const kvcal_bf16 *act,
                                    const float *absmax, const float *input_scale,
                                    int rows, int n)
{
    const int words = n / 8;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float s =
            MODE == KVCAL_FP8A_TOKEN ? kvcal_fp8_token_scale(absmax[row]) : *input_scale;
        const float inv = 1.0f / s;
        const uint4 *src = reinterpret_cast<const uint4 *>(act + (size_t)row * n);
        uint2 *dst = reinterpret_cast<uint2 *>(xq + (size_t)row * n);
        if (MODE == KVCAL_FP8A_TOKEN && !isfinite(s)) { /* a row holding an infinity */
            for (int w = threadIdx.x; w < words; w += blockDim.x)
                dst[w] = kvcal_fp8_quant8<MODE, true>(src[w], s, inv);
        } else {
#pragma unroll 4
            for (int w = threadIdx.x; w < words; w += blockDim.x)
                dst[w] = kvcal_fp8_quant8<MODE, false>(src[w], s, inv);
        }
        if (threadIdx.x == 0)
            xs[row] = s;
    }
}

} // namespace

extern "C" kvcal_status
kvcal_gemm_swiglu_fp8_launch(kvcal_bf16 *act, float *absmax, const uint8_t *xq,
                             const float *x_scale, int x_rows, const uint8_t *w_tiled,
                             const float *w_scale, int w_rows, int rows, int k, int n,
                             cudaStream_t stream)
{
    if (!act || !absmax || !xq || !x_scale || !w_tiled || !w_scale || rows < 0 ||
        k <= 0 || k % 16 || n <= 0 || n % 8 ||
        ((uintptr_t)xq | (uintptr_t)w_tiled | (uintptr_t)act) % 16 ||
        (uintptr_t)w_scale % 8)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "gemm_swiglu_fp8: rows %d, k %d, n %d: need 16-byte aligned "
            "buffers, 8-byte aligned weight scales, rows >= 0, k a multiple "
            "of 16 and n of 8",
            rows, k, n);
    if (rows == 0)
        return KVCAL_OK;
    int sms = 0;
    kvcal_status st = kvcal_sm90_check("gemm_swiglu_fp8", &sms);
    CUtensorMap map_x, map_w, map_act;
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map_e4m3(&map_x, xq, rows, k, BM, "gemm_swiglu_fp8", "x");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map_e4m3(&map_w, w_tiled, kvcal_gemm_swiglu_rows(n), k,
                                        BN / CL, "gemm_swiglu_fp8", "the weight");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_act, act, rows, n, BM / 2, "gemm_swiglu_fp8",
                                   "act");
    if (st != KVCAL_OK)
        return st;
    auto kernel = w_rows ? gemm_swiglu_fp8_kernel<true> : gemm_swiglu_fp8_kernel<false>;
    const int tiles = (rows + CL * BM - 1) / (CL * BM) * (kvcal_gemm_swiglu_rows(n) / BN);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    st = kvcal_sm90_cluster_config((const void *)kernel, CL, THREADS, SMEM_BYTES, tiles,
                                   sms, stream, &cfg, attr, "gemm_swiglu_fp8");
    if (st != KVCAL_OK)
        return st;
    KVCAL_CUDA_TRY(cudaMemsetAsync(absmax, 0, (size_t)rows * sizeof(float), stream));
    KVCAL_CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, map_x, map_w, map_act, absmax,
                                      x_scale, x_rows, w_scale, rows, k, n));
    KVCAL_CUDA_CHECK_LAUNCH("gemm_swiglu_fp8_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_fp8_quant_absmax_launch(
    uint8_t *xq, float *xs, const kvcal_bf16 *act, const float *absmax, int rows, int n,
    kvcal_fp8_act_scale mode, const float *input_scale, cudaStream_t stream)
{
    if (!xq || !xs || !act || rows < 0 || n <= 0 || n % 8 || (uintptr_t)act % 16 ||
        (uintptr_t)xq % 8 || (mode == KVCAL_FP8A_TOKEN && !absmax) ||
        (mode == KVCAL_FP8A_STATIC && !input_scale) ||
        (mode != KVCAL_FP8A_TOKEN && mode != KVCAL_FP8A_STATIC))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_quant_absmax: rows %d, n %d, mode %d: need per-token (with "
            "the absmax) or static (with the input scale) scales, n a "
            "multiple of 8, act 16-byte and xq 8-byte aligned",
            rows, n, (int)mode);
    if (rows == 0)
        return KVCAL_OK;
    int device = 0, sms = 0;
    KVCAL_CUDA_TRY(cudaGetDevice(&device));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int blocks = rows < sms * 8 ? rows : sms * 8;
    if (mode == KVCAL_FP8A_TOKEN)
        quant_absmax_kernel<KVCAL_FP8A_TOKEN>
            <<<blocks, 256, 0, stream>>>(xq, xs, act, absmax, input_scale, rows, n);
    else
        quant_absmax_kernel<KVCAL_FP8A_STATIC>
            <<<blocks, 256, 0, stream>>>(xq, xs, act, absmax, input_scale, rows, n);
    KVCAL_CUDA_CHECK_LAUNCH("quant_absmax_kernel");
    return KVCAL_OK;
}
