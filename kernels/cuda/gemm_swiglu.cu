/* kernels/cuda/gemm_swiglu.cu: the MLP's gate/up projection and SwiGLU in
 * one Hopper GEMM, so that the (rows, 2n) gate/up product never reaches
 * memory: act (rows, n) = silu(x Wg^T) * (x Wu^T), rounded as the runner's
 * SwiGLU rounds (bf16_round.cuh).
 *
 * Warp-specialized and persistent: one CTA of 3 warpgroups per SM walks the
 * output tiles; warpgroup 0 loads 128 x 64 tiles of x and 256 x 64 tiles of
 * the weight into a ring of STAGES shared-memory stages with TMA (128-byte
 * swizzle, mbarrier transaction counts); warpgroups 1 and 2 each multiply 64
 * of the tile's 128 rows by its 256 weight rows with wgmma m64n256k16, fp32
 * accumulators in registers. The weight is interleaved in blocks of 128 rows
 * (kvcal_gemm_swiglu_interleave): a tile's 256 weight rows are 128 gate
 * rows and the 128 up rows of the same outputs, so every thread holds both
 * halves of its 64 outputs and the epilogue computes act. Where n is not a
 * multiple of 128 the last block is padded to 128 gate and 128 up rows
 * (kvcal_gemm_swiglu_rows): each output column reads its own gate and up
 * rows alone, so the padding's columns, whatever the padding holds, are
 * computed and then dropped by the TMA store, which clips columns past n.
 *
 * Pairs of CTAs (2-CTA clusters) take adjacent row blocks of the same weight
 * block: each loads half of the weight tile and TMA multicasts it into both,
 * halving the weight's traffic from L2, and a stage is refilled once the
 * consumers of both CTAs have freed it. A consumer frees a stage when the
 * next k block's products are issued (wgmma.wait_group 1). The epilogue
 * overlaps the next tile: a finished tile's gate and up are rounded to bf16
 * into registers (64 a thread, beside the 128 accumulators), and SwiGLU
 * (two MUFU operations an output) runs in EPI_PARTS parts, one after each of
 * the next tile's first k blocks is issued, while the tensor cores compute
 * it; each warpgroup's 64 x 128 outputs are staged in shared memory and
 * written with TMA stores, which run on behind. Tiles are walked in groups
 * of GROUP_M row blocks (all weight blocks of a group before the next), so
 * that the CTAs in flight share x and weight tiles in L2.
 *
 * Against cuBLAS's gate/up GEMM + kvcal_swiglu_launch at the Llama-3-8B
 * shapes on an H200: 0.4% faster end to end with the epilogue after the
 * tile's products, 1.0% more with it overlapping the next tile's, and the
 * (rows, 2n) buffer gone (bench/NOTES.md, runner versions 10, 11, 14 and
 * 17; the other variants measured there are in the history). For
 * sm_90a only (wgmma, setmaxnreg, clusters): on another GPU, or on a Hopper
 * for which the build holds no sm_90a code, the launch reports
 * KVCAL_ERR_UNSUPPORTED; the kernel compiled for any other architecture is
 * a trap that is never launched. */
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"

namespace {

constexpr int BM = KVCAL_SM90_BM, BN = KVCAL_SM90_BN, BK = KVCAL_SM90_BK, STAGES = 4,
              THREADS = 384;
constexpr int CL = 2; /* CTAs per cluster */
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
/* shared memory: the stages (1024-byte aligned for the 128-byte swizzle), each
 * consumer warpgroup's 64 x 128 outputs staged for a TMA store, the barriers */
constexpr int OUT_BYTES = (BM / 2) * (BN / 2) * 2;
constexpr size_t SMEM_BYTES =
    1024 + (size_t)STAGES * STAGE_BYTES + 2 * OUT_BYTES + 2 * STAGES * 8;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int GROUP_M = 16;  /* row blocks walked together (the tile order) */
constexpr int EPI_PARTS = 8; /* a tile's epilogue, spread over the next one's first k blocks */

#endif

/* act (rows, n); map_x over x (rows, k), map_w over the interleaved weight
 * (2n, k) (boxes of BN / CL rows), map_act over act (rows, n) (boxes of
 * BM / 2 rows). */
__global__ void __launch_bounds__(THREADS, 1)
    gemm_swiglu_kernel(const __grid_constant__ CUtensorMap map_x,
                       const __grid_constant__ CUtensorMap map_w,
                       const __grid_constant__ CUtensorMap map_act, int rows, int k, int n)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace kvcal_sm90;
    extern __shared__ unsigned char smem_raw[];
    const smem_layout sm = carve_smem(smem_raw, STAGES, STAGE_BYTES, OUT_BYTES);
    unsigned char *smem = sm.stages, *out_stage = sm.out_stage;
    uint64_t *full = sm.full, *empty = sm.empty;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int num_mg = (rows + CL * BM - 1) / (CL * BM),
              num_n = (n + BN / 2 - 1) / (BN / 2), num_k = (k + BK - 1) / BK;
    const int tiles = num_mg * num_n; /* a cluster's, CL row blocks each */
    const int rank = (int)cluster_rank(), cluster = blockIdx.x / CL,
              clusters = gridDim.x / CL;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);       /* the producer's expect_tx */
            mbar_init(&empty[s], 2 * CL); /* each consumer warpgroup of the cluster */
        }
        mbar_init_fence();
    }
    cluster_sync();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0)
            produce_cluster_tiles<STAGES, CL>(sm, &map_x, &map_w, STAGE_BYTES, A_BYTES, BK,
                                              cluster, clusters, tiles, num_mg, num_n,
                                              GROUP_M / CL, num_k);
    } else {
        /* consumers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127 */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int half = wg - 1, warp = tid / 32, lane = tid % 32;
        unsigned char *out = out_stage + half * OUT_BYTES;
        /* stage s is free again in this CTA's ring and in the peer's, whose
         * producer multicasts into it */
        auto release = [&](int stage) {
            for (int r = 0; r < CL; r++)
                mbar_arrive_cluster(&empty[stage], r);
        };
        /* A finished tile rounded to bf16 (round_accumulators), waiting for
         * its epilogue: gate in r[2 j + h], the up of the same outputs in
         * r[32 + 2 j + h] (j < 16: columns 8 j .. 8 j + 7 of this
         * warpgroup's 64 x 128 act block). */
        __nv_bfloat162 r[64];
        /* Epilogue part c of EPI_PARTS: the 16 / EPI_PARTS groups of 8 columns
         * from j = c x 16 / EPI_PARTS on, staged in shared memory
         * (stage_addr); the last part writes the two boxes out by one TMA
         * store each, which clips rows past the end. */
        auto epilogue_part_at = [&](auto part, int tile) {
            constexpr int c = decltype(part)::value;
            if (c == 0) {
                if (tid == 0)
                    tma_store_wait_read(); /* the previous tile's stores have read it */
                named_barrier(1 + half, 128);
            }
            const uint32_t base = stage_base(out, warp, lane);
#pragma unroll
            for (int jj = 0; jj < 16 / EPI_PARTS; jj++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int j = c * (16 / EPI_PARTS) + jj;
                    const uint32_t addr = stage_addr(base, j, h);
                    st_shared_pair(addr,
                                   kvcal_swiglu2_bf16(r[2 * j + h], r[32 + 2 * j + h]));
                }
            if (c == EPI_PARTS - 1) {
                fence_proxy_async();
                named_barrier(1 + half, 128);
                if (tid == 0) {
                    int mg, nb;
                    tile_coords(tile, num_mg, num_n, GROUP_M / CL, mg, nb);
                    const int row0 = (mg * CL + rank) * BM + half * (BM / 2),
                              col0 = nb * (BN / 2);
                    tma_store_2d(&map_act, out, col0, row0);
                    if (col0 + 64 < n) /* else a last block of n % 128 <= 64 columns */
                        tma_store_2d(&map_act, out + OUT_BYTES / 2, col0 + 64, row0);
                    tma_store_commit();
                }
            }
        };
        /* part c of the registers must be named at compile time: a run-time
         * index would move r to local memory */
        auto epilogue_part = [&](int c, int tile) {
            at_constant<0, EPI_PARTS>(c, [&](auto part) { epilogue_part_at(part, tile); });
        };
        int s = 0, phase = 0;
        float d[128];
        for (int t = cluster; t < tiles; t += clusters) {
            int prev = 0;
            for (int kb = 0; kb < num_k; kb++) {
                mbar_wait(&full[s], phase);
                wgmma_k_block(d, smem + s * STAGE_BYTES + half * (BM / 2) * BK * 2,
                              smem + s * STAGE_BYTES + A_BYTES, kb == 0);
                /* the previous tile's epilogue runs while the tensor cores
                 * work on this tile's first k blocks */
                if (t > cluster && kb < EPI_PARTS)
                    epilogue_part(kb, t - clusters);
                wgmma_wait<1>(); /* the previous k block's products are done */
                if (tid == 0 && kb > 0)
                    release(prev);
                prev = s;
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            for (int c = num_k; t > cluster && c < EPI_PARTS; c++) /* k shorter than that */
                epilogue_part(c, t - clusters);
            wgmma_wait<0>();
            fence_operands(d);
            if (tid == 0)
                release(prev);
            round_accumulators(r, d);
        }
        const int last = cluster + (tiles - 1 - cluster) / clusters * clusters;
        for (int c = 0; cluster < tiles && c < EPI_PARTS; c++) /* the last tile's */
            epilogue_part(c, last);
        if (tid == 0)
            tma_store_wait_read(); /* shared memory stays until the last stores read it */
    }
    cluster_sync(); /* no CTA leaves while its peer may still write to it */
#elif defined(__CUDA_ARCH__)
    __trap(); /* built for another architecture than sm_90a: fail, never skip the product */
#endif
}

} // namespace

extern "C" int kvcal_gemm_swiglu_rows(int n)
{
    return 2 * ((n + BN / 2 - 1) / (BN / 2) * (BN / 2));
}

extern "C" int kvcal_gemm_swiglu_source_row(int i, int n)
{
    const int half = BN / 2, b = i / BN, j = i % BN, c = b * half + j % half;
    if (c >= n) /* the last block's padding */
        return -1;
    return j < half ? c : n + c;
}

extern "C" void kvcal_gemm_swiglu_interleave(kvcal_bf16 *dst, const kvcal_bf16 *w_gu, int k,
                                             int n)
{
    for (int i = 0; i < kvcal_gemm_swiglu_rows(n); i++) {
        const int src = kvcal_gemm_swiglu_source_row(i, n);
        if (src < 0)
            memset(dst + (size_t)i * k, 0, (size_t)k * sizeof *dst);
        else
            memcpy(dst + (size_t)i * k, w_gu + (size_t)src * k, (size_t)k * sizeof *dst);
    }
}

extern "C" kvcal_status kvcal_gemm_swiglu_launch(kvcal_bf16 *act, const kvcal_bf16 *x,
                                                 const kvcal_bf16 *w_tiled, int rows, int k,
                                                 int n, cudaStream_t stream)
{
    if (!act || !x || !w_tiled || rows < 0 || k <= 0 || k % 8 || n <= 0 || n % 8 ||
        ((uintptr_t)x | (uintptr_t)w_tiled | (uintptr_t)act) % 16)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm_swiglu: rows %d, k %d, n %d: need 16-byte aligned buffers, "
                          "rows >= 0, k and n multiples of 8",
                          rows, k, n);
    if (rows == 0)
        return KVCAL_OK;
    int sms = 0;
    kvcal_status st = kvcal_sm90_check("gemm_swiglu", &sms);
    CUtensorMap map_x, map_w, map_act;
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_x, x, rows, k, BM, "gemm_swiglu", "x");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_w, w_tiled, kvcal_gemm_swiglu_rows(n), k, BN / CL,
                                   "gemm_swiglu", "the weight");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_act, act, rows, n, BM / 2, "gemm_swiglu", "act");
    if (st != KVCAL_OK)
        return st;
    const int tiles = (rows + CL * BM - 1) / (CL * BM) * (kvcal_gemm_swiglu_rows(n) / BN);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[1];
    st = kvcal_sm90_cluster_config((const void *)gemm_swiglu_kernel, CL, THREADS,
                                   SMEM_BYTES, tiles, sms, stream, &cfg, attr,
                                   "gemm_swiglu");
    if (st != KVCAL_OK)
        return st;
    KVCAL_CUDA_TRY(
        cudaLaunchKernelEx(&cfg, gemm_swiglu_kernel, map_x, map_w, map_act, rows, k, n));
    KVCAL_CUDA_CHECK_LAUNCH("gemm_swiglu_kernel");
    return KVCAL_OK;
}
