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
 * halves of its 64 outputs and the epilogue computes act.
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
#include <cuda.h> /* CUtensorMap and its enums; the encoder is fetched at run time */
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "core/device.h"
#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 384;
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

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                     smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

/* Arrives on the barrier at the same shared-memory offset in CTA `rank` of
 * the cluster, with the default (CTA-scope) release: what it orders is this
 * warpgroup's finished wgmma reads of the stage, before the peer's TMA
 * refills it. A cluster-scope release here stalled the arriving thread, and
 * with it its warpgroup's next wgmma, at every k block (a third slower). */
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *bar, uint32_t rank)
{
    asm volatile("{\n"
                 ".reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
                 "}\n" ::"r"(smem_addr(bar)),
                 "r"(rank)
                 : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* Every thread of every CTA of the cluster; orders shared-memory writes
 * (barrier initialization) before what the other CTAs do next. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

/* Waits until the barrier's phase of parity `parity` has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}

/* box (c0, c1) of the tensor map into shared memory at dst, completing on bar */
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map,
                                            uint64_t *bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0),
                 "r"(c1)
                 : "memory");
}

/* box (c0, c1) of the tensor map into dst of the cluster's CTAs in `mask`,
 * each completing on its own barrier at bar's offset */
__device__ __forceinline__ void tma_load_2d_multicast(void *dst, const CUtensorMap *map,
                                                      uint64_t *bar, int c0, int c1,
                                                      uint16_t mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(
                     smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0),
                 "r"(c1), "h"(mask)
                 : "memory");
}

/* box (c0, c1) of the tensor map from shared memory at src; completes in
 * this thread's bulk group */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src, int c0,
                                             int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], "
                 "[%1];" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

/* Waits until this thread's committed TMA stores have read their source. */
__device__ __forceinline__ void tma_store_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Barrier `id` (1 ..) among `threads` threads. */
__device__ __forceinline__ void named_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* wgmma descriptor of a K-major tile in shared memory, rows of 64 bf16 (128
 * bytes) with the 128-byte swizzle: 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t smem_desc(const void *p)
{
    const uint64_t addr = smem_addr(p);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits until at most n committed wgmma groups of this warpgroup are pending. */
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator accesses across wgmma fences. */
__device__ __forceinline__ void fence_operands(float (&d)[128])
{
#pragma unroll
    for (int i = 0; i < 128; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 x 256, fp32, the wgmma accumulator fragment) = A (64 x 16) B^T
 * (256 x 16) + (accumulate ? d : 0), A and B K-major in shared memory behind
 * their descriptors. Asynchronous: see wgmma_commit / wgmma_wait. */
static __device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a,
                                                        uint64_t desc_b, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
          "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
          "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),
          "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
          "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
          "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
          "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* f(std::integral_constant<int, c>) for c in [C, END), a run-time value. */
template <int C, int END, class F> __device__ __forceinline__ void at_constant(int c, F &&f)
{
    if constexpr (C + 1 < END) {
        if (c != C) {
            at_constant<C + 1, END>(c, f);
            return;
        }
    }
    f(std::integral_constant<int, C>{});
}

/* Tile t's row block (of a cluster: row-block group) m and weight block nb,
 * walking `group_m` row blocks at a time. */
__device__ __forceinline__ void tile_coords(int t, int num_m, int num_n, int group_m, int &m,
                                            int &nb)
{
    const int group = t / (group_m * num_n), first_m = group * group_m;
    const int gm = min(num_m - first_m, group_m);
    const int r = t - group * group_m * num_n;
    m = first_m + r % gm;
    nb = r / gm;
}

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
    extern __shared__ unsigned char smem_raw[];
    unsigned char *smem =
        reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                          ~(uintptr_t)1023);
    unsigned char *out_stage = smem + STAGES * STAGE_BYTES; /* 2 x (64 x 128) bf16 */
    uint64_t *full = reinterpret_cast<uint64_t *>(out_stage + 2 * OUT_BYTES);
    uint64_t *empty = full + STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int num_mg = (rows + CL * BM - 1) / (CL * BM), num_n = n / (BN / 2),
              num_k = (k + BK - 1) / BK;
    const int tiles = num_mg * num_n; /* a cluster's, CL row blocks each */
    const int rank = (int)cluster_rank(), cluster = blockIdx.x / CL,
              clusters = gridDim.x / CL;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);       /* the producer's expect_tx */
            mbar_init(&empty[s], 2 * CL); /* each consumer warpgroup of the cluster */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            int s = 0, phase = 0;
            for (int t = cluster; t < tiles; t += clusters) {
                int mg, nb;
                tile_coords(t, num_mg, num_n, GROUP_M / CL, mg, nb);
                const int m = mg * CL + rank;
                for (int kb = 0; kb < num_k; kb++) {
                    mbar_wait(&empty[s], phase ^ 1); /* free in every CTA it goes to */
                    mbar_expect_tx(&full[s], STAGE_BYTES);
                    unsigned char *st = smem + s * STAGE_BYTES;
                    tma_load_2d(st, &map_x, &full[s], kb * BK, m * BM);
                    tma_load_2d_multicast(st + A_BYTES + rank * (B_BYTES / CL), &map_w,
                                          &full[s], kb * BK, nb * BN + rank * (BN / CL),
                                          (1u << CL) - 1);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
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
        /* A finished tile's gate and up, rounded to bf16 (gate[2 j + h], up[2 j
         * + h]: row 16 warp + lane / 4 + 8 h, columns 8 j + 2 (lane % 4) + {0,
         * 1} of this warpgroup's 64 x 128 act block), waiting for their
         * epilogue. */
        __nv_bfloat162 gate[32], up[32];
        /* Epilogue part c of EPI_PARTS: the 16 / EPI_PARTS groups of 8 columns
         * from j = c x 16 / EPI_PARTS on. act goes into shared memory as two
         * 64 x 64 boxes with the 128-byte swizzle (16-byte chunk q of row r at
         * chunk q ^ (r % 8)); the last part writes them out by one TMA store
         * each, which clips rows past the end. */
        auto epilogue_part_at = [&](auto part, int tile) {
            constexpr int c = decltype(part)::value;
            if (c == 0) {
                if (tid == 0)
                    tma_store_wait_read(); /* the previous tile's stores have read it */
                named_barrier(1 + half, 128);
            }
            /* row 16 warp + lane / 4 + 8 h, 16-byte chunk (j % 8) ^ (lane / 4)
             * of box j / 8: the chunk's bits (4-6) flipped by j % 8 in the
             * address of chunk lane / 4; the base goes through an opaque move
             * so that the 32 addresses are not all kept live across the loop */
            uint32_t base = smem_addr(out) + (warp * 16 + lane / 4) * 128 +
                            ((lane / 4) << 4) + (lane % 4) * 4;
            asm volatile("mov.b32 %0, %0;" : "+r"(base));
#pragma unroll
            for (int jj = 0; jj < 16 / EPI_PARTS; jj++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int j = c * (16 / EPI_PARTS) + jj;
                    const uint32_t addr =
                        (base ^ ((j % 8) << 4)) + (j / 8) * (OUT_BYTES / 2) + h * 8 * 128;
                    const __nv_bfloat162 v =
                        kvcal_swiglu2_bf16(gate[2 * j + h], up[2 * j + h]);
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr),
                                 "r"(*reinterpret_cast<const uint32_t *>(&v))
                                 : "memory");
                }
            if (c == EPI_PARTS - 1) {
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                named_barrier(1 + half, 128);
                if (tid == 0) {
                    int mg, nb;
                    tile_coords(tile, num_mg, num_n, GROUP_M / CL, mg, nb);
                    const int row0 = (mg * CL + rank) * BM + half * (BM / 2),
                              col0 = nb * (BN / 2);
                    tma_store_2d(&map_act, out, col0, row0);
                    tma_store_2d(&map_act, out + OUT_BYTES / 2, col0 + 64, row0);
                    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                }
            }
        };
        /* part c of the registers must be named at compile time: a run-time
         * index would move gate and up to local memory */
        auto epilogue_part = [&](int c, int tile) {
            at_constant<0, EPI_PARTS>(c, [&](auto part) { epilogue_part_at(part, tile); });
        };
        int s = 0, phase = 0;
        float d[128];
        for (int t = cluster; t < tiles; t += clusters) {
            int prev = 0;
            for (int kb = 0; kb < num_k; kb++) {
                mbar_wait(&full[s], phase);
                const unsigned char *a = smem + s * STAGE_BYTES + half * (BM / 2) * BK * 2;
                const unsigned char *b = smem + s * STAGE_BYTES + A_BYTES;
                wgmma_fence();
                fence_operands(d);
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++) /* 16 columns = 32 bytes of a row */
                    wgmma_m64n256k16(d, smem_desc(a + kk * 32), smem_desc(b + kk * 32),
                                     kb > 0 || kk > 0);
                wgmma_commit();
                fence_operands(d);
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
            /* d[4 j + 2 h + e] is row 16 warp + lane / 4 + 8 h, column 8 j + 2
             * (lane % 4) + e of this warpgroup's 64 x 256 block; columns j < 16
             * are gate, j + 16 the up of the same outputs */
#pragma unroll
            for (int j = 0; j < 16; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    gate[2 * j + h] =
                        __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                    up[2 * j + h] = __floats2bfloat162_rn(d[4 * (j + 16) + 2 * h],
                                                          d[4 * (j + 16) + 2 * h + 1]);
                }
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

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *,
                                    const cuuint32_t *, const cuuint32_t *,
                                    CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* A 2D bf16 tensor map over (outer, inner) row-major at ptr, boxes of
 * (box_outer, 64) with the 128-byte swizzle; reads past the end are zeros. */
kvcal_status make_map(encode_tiled_fn encode, CUtensorMap *map, const void *ptr,
                      int64_t outer, int64_t inner, int box_outer, const char *what)
{
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)inner * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_outer}, elem_strides[2] = {1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                              const_cast<void *>(ptr), dims, strides, box, elem_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return kvcal_fail(KVCAL_ERR_CUDA,
                          "gemm_swiglu: cuTensorMapEncodeTiled for %s (%lld x %lld) "
                          "failed with CUresult %d",
                          what, (long long)outer, (long long)inner, (int)r);
    return KVCAL_OK;
}

} // namespace

extern "C" int kvcal_gemm_swiglu_source_row(int i, int n)
{
    const int half = BN / 2, b = i / BN, j = i % BN;
    return j < half ? b * half + j : n + b * half + (j - half);
}

extern "C" void kvcal_gemm_swiglu_interleave(kvcal_bf16 *dst, const kvcal_bf16 *w_gu, int k,
                                             int n)
{
    for (int i = 0; i < 2 * n; i++)
        memcpy(dst + (size_t)i * k, w_gu + (size_t)kvcal_gemm_swiglu_source_row(i, n) * k,
               (size_t)k * sizeof *dst);
}

extern "C" kvcal_status kvcal_gemm_swiglu_launch(kvcal_bf16 *act, const kvcal_bf16 *x,
                                                 const kvcal_bf16 *w_tiled, int rows, int k,
                                                 int n, cudaStream_t stream)
{
    if (!act || !x || !w_tiled || rows < 0 || k <= 0 || k % 8 || n <= 0 || n % (BN / 2) ||
        ((uintptr_t)x | (uintptr_t)w_tiled | (uintptr_t)act) % 16)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm_swiglu: rows %d, k %d, n %d: need 16-byte aligned buffers, "
                          "rows >= 0, k a multiple of 8 and n of %d",
                          rows, k, n, BN / 2);
    if (rows == 0)
        return KVCAL_OK;
    int device = 0, major = 0, minor = 0, sms = 0;
    KVCAL_CUDA_TRY(cudaGetDevice(&device));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (major != 9)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gemm_swiglu: needs a Hopper GPU (compute capability 9.x), this "
                          "one is %d.x",
                          major);
    char code[32];
    kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), major, minor, code, sizeof code);
    if (minor != 0 || (strcmp(code, "sm_90a") && strcmp(code, "compute_90a")))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gemm_swiglu: needs sm_90a code on this GPU (compute capability "
                          "%d.%d), where this build runs %s; rebuild with sm_90a in CUDA_ARCH",
                          major, minor, *code ? code : "none of its code");
    static encode_tiled_fn encode = NULL;
    if (!encode) {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult found;
        KVCAL_CUDA_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                        cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !fn)
            return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                              "gemm_swiglu: the driver has no cuTensorMapEncodeTiled");
        encode = (encode_tiled_fn)fn;
    }
    CUtensorMap map_x, map_w, map_act;
    kvcal_status st = make_map(encode, &map_x, x, rows, k, BM, "x");
    if (st == KVCAL_OK)
        st = make_map(encode, &map_w, w_tiled, 2 * (int64_t)n, k, BN / CL, "the weight");
    if (st == KVCAL_OK)
        st = make_map(encode, &map_act, act, rows, n, BM / 2, "act");
    if (st != KVCAL_OK)
        return st;
    KVCAL_CUDA_TRY(cudaFuncSetAttribute(gemm_swiglu_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)SMEM_BYTES));
    const int tiles = (rows + CL * BM - 1) / (CL * BM) * (n / (BN / 2));
    int clusters_max = sms / CL;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3(clusters_max * CL);
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = SMEM_BYTES;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CL;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    /* a persistent grid must be resident at once: not every multiprocessor
     * can take part in a cluster (the GPCs' sizes) */
    KVCAL_CUDA_TRY(cudaOccupancyMaxActiveClusters(&clusters_max, gemm_swiglu_kernel, &cfg));
    if (clusters_max < 1)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gemm_swiglu: no cluster of %d CTAs fits this GPU", CL);
    cfg.gridDim = dim3((tiles < clusters_max ? tiles : clusters_max) * CL);
    KVCAL_CUDA_TRY(
        cudaLaunchKernelEx(&cfg, gemm_swiglu_kernel, map_x, map_w, map_act, rows, k, n));
    KVCAL_CUDA_CHECK_LAUNCH("gemm_swiglu_kernel");
    return KVCAL_OK;
}
