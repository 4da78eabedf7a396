/* kernels/cuda/moe_wgmma.cu: the experts' grouped GEMM on Hopper, the
 * sm_90a counterpart of moe.cu's kvcal_moe_gemm_launch, with no host round
 * trip: every tile's expert comes from the plan on the device.
 *
 * The rows are the plan's (kvcal_moe_align_launch): each expert's rows
 * contiguous and padded to 128-row tiles. One persistent CTA of 3
 * warpgroups per SM walks the (plan tile, weight block) pairs of the tiles
 * the routing filled (a prefix of the plan, its length on the device);
 * warpgroup 0 loads 128 x 64 tiles of the rows and two 128 x 64 tiles of
 * the tile's expert's weight (one TMA tensor map over the stacked weights,
 * num_experts x rows by k) into a ring of stages; warpgroups 1 and 2 each
 * multiply 64 of the rows by the 256 weight rows with wgmma m64n256k16
 * (hopper.cuh, the pieces of gemm_swiglu.cu's kernel, here without
 * clusters: adjacent tiles may belong to different experts). Rows already
 * in the plan's order (the down projection's: the gate/up's outputs) come
 * by TMA too; the tokens' inputs (the gate/up's) are gathered in the
 * loads: warpgroup 0's 128 threads copy the tile's rows (the tokens of
 * the plan's sorted[] entries, zeros for padding) from the tokens' rows
 * with cp.async, 16 bytes of 8 rows a thread a k block, into the places the
 * TMA's 128-byte swizzle would give them, and the stage's barrier waits
 * for those copies beside the weight's TMA bytes: no pass that writes the
 * gathered rows out and reads them back.
 *
 * The epilogue (a template choice) overlaps the next tile's first k
 * blocks, as gemm_swiglu.cu's does: SWIGLU takes the 128 gate rows and the
 * 128 up rows of the same outputs (the checkpoint's [gate; up] order: no
 * interleaved copy of the weight) and stores silu(gate) * up rounded as
 * kvcal_swiglu_launch; STORE rounds the 256 outputs to bf16, staged and
 * stored in two halves of 128 columns. gpt-oss's experts: a bias is added
 * to the rounded products as soon as a tile's products are rounded
 * (add_bias), and SWIGLU_OAI stores the clamped SwiGLU in the epilogue as
 * SWIGLU stores its own, with the arithmetic of kvcal_moe_bias_launch and
 * kvcal_swiglu_oai_launch: no pass over the outputs of their own. Weight
 * rows past an expert's read the next expert's (or zeros past the end) into
 * outputs that the stores clip. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/ops.h"

namespace
{

constexpr int BM = KVCAL_SM90_BM, BN = KVCAL_SM90_BN, BK = KVCAL_SM90_BK, STAGES = 4,
              THREADS = 384;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2,
              STAGE_BYTES = A_BYTES + B_BYTES;
/* shared memory: the stages (1024-byte aligned for the 128-byte swizzle), each
 * consumer warpgroup's 64 x 128 outputs staged for TMA stores, the barriers */
constexpr int OUT_BYTES = (BM / 2) * 128 * 2;
constexpr size_t SMEM_BYTES =
    1024 + (size_t)STAGES * STAGE_BYTES + 2 * OUT_BYTES + 2 * STAGES * 8;

static_assert(BM == KVCAL_MOE_TILE_ROWS, "a GEMM tile is a plan tile");

/* The gated epilogues: a tile's weight rows are gate and up rows. */
constexpr bool gated(int epi)
{
    return epi == KVCAL_MOE_EPI_SWIGLU || epi == KVCAL_MOE_EPI_SWIGLU_OAI;
}

/* Output columns of a tile. */
constexpr int tile_n(int epi)
{
    return gated(epi) ? BN / 2 : BN;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int GROUP_M = 16; /* plan tiles walked together (the tile order) */
/* arrivals a stage's full barrier waits for: the producer's expect_tx, and
 * when the rows are gathered, each producer thread's cp.async arrival */
constexpr int full_arrivals(bool gather)
{
    return gather ? 1 + 128 : 1;
}
constexpr int GATHER_ROWS = BM / 16; /* rows of a tile a producer thread copies */
/* a tile's epilogue, spread over the next one's first k blocks */
constexpr int EPI_PARTS = 8;

/* a + b of two bf16 pairs, in fp32 rounded once (kvcal_moe_bias_launch's sum) */
__device__ __forceinline__ __nv_bfloat162 add_rounded(__nv_bfloat162 a, __nv_bfloat162 b)
{
    const float2 x = __bfloat1622float2(a), y = __bfloat1622float2(b);
    return __floats2bfloat162_rn(x.x + y.x, x.y + y.y);
}

/* Tile t's rounded products r (round_accumulators) with their bias added
 * where the tensor cores wait rather than in the epilogue spread over the
 * next tile's k blocks, whose registers the bias's loads would spill: bias
 * (NULL: none) row tile_expert[m] added to each product of an output column
 * (kvcal_moe_bias_launch's sum; gate's and up's for SWIGLU). A thread's
 * pair (j, h) holds columns j * 8 + (lane % 4) * 2 and one more. */
template <bool SWIGLU>
__device__ __forceinline__ void add_bias(__nv_bfloat162 (&r)[64], int t, int tiles,
                                         int num_n, const int32_t *tile_expert,
                                         const __nv_bfloat16 *bias, int n, int lane)
{
    constexpr int TILE_N = SWIGLU ? BN / 2 : BN, GROUPS = TILE_N / 8;
    if (bias) {
        int m, nb;
        kvcal_sm90::tile_coords(t, tiles, num_n, GROUP_M, m, nb);
        const __nv_bfloat16 *row =
            bias + (int64_t)tile_expert[m] * (SWIGLU ? 2 * n : n) + nb * TILE_N;
        const int cols_left = n - nb * TILE_N;
#pragma unroll
        for (int j = 0; j < GROUPS; j++) {
            const int col = j * 8 + (lane % 4) * 2;
            if (col >= cols_left) /* past n: clipped by the stores */
                continue;
            const auto *pair = reinterpret_cast<const __nv_bfloat162 *>(row + col);
            const __nv_bfloat162 b = __ldg(pair);
#pragma unroll
            for (int h = 0; h < 2; h++)
                r[2 * j + h] = add_rounded(r[2 * j + h], b);
            if constexpr (SWIGLU) {
                const __nv_bfloat162 bu = __ldg(pair + n / 2);
#pragma unroll
                for (int h = 0; h < 2; h++)
                    r[32 + 2 * j + h] = add_rounded(r[32 + 2 * j + h], bu);
            }
        }
    }
}

/* gpt-oss's clamped SwiGLU of two (gate, up) pairs, rounded to bf16 as
 * kvcal_swiglu_oai_launch rounds it. */
__device__ __forceinline__ __nv_bfloat162 swiglu_oai2(__nv_bfloat162 gate,
                                                      __nv_bfloat162 up, float alpha,
                                                      float limit)
{
    const float2 g = __bfloat1622float2(gate), u = __bfloat1622float2(up);
    return __floats2bfloat162_rn(kvcal_swiglu_oai(g.x, u.x, alpha, limit),
                                 kvcal_swiglu_oai(g.y, u.y, alpha, limit));
}

#endif

/* out (capacity, n) row r = epilogue(x row r @ w[e]^T) for the rows of the
 * plan's used tiles (the first *used_tiles), tile m's expert e =
 * tile_expert[m]; x row r: without GATHER, row r of x (capacity, k) through
 * map_x (boxes of BM rows); with GATHER, row sorted[r] / gather of tokens
 * (tokens, k) (zeros where sorted[r] < 0). map_w over w (num_experts *
 * w_rows, k) (boxes of BN / 2 rows; w_rows 2n for the SwiGLUs, n for
 * STORE), map_out over out (boxes of BM / 2 rows); bias (num_experts,
 * w_rows) or NULL. */
template <int EPI, bool GATHER>
__global__ void __launch_bounds__(THREADS, 1)
    moe_wgmma_kernel(const __grid_constant__ CUtensorMap map_x,
                     const __grid_constant__ CUtensorMap map_w,
                     const __grid_constant__ CUtensorMap map_out,
                     const __nv_bfloat16 *__restrict__ tokens,
                     const int32_t *__restrict__ sorted, int gather,
                     const int32_t *__restrict__ tile_expert,
                     const int32_t *__restrict__ used_tiles, int k, int n,
                     const __nv_bfloat16 *__restrict__ bias, float alpha, float limit)
{
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace kvcal_sm90;
    constexpr bool SWIGLU = gated(EPI), OAI = EPI == KVCAL_MOE_EPI_SWIGLU_OAI;
    constexpr int TILE_N = tile_n(EPI);
    /* a thread's 8-column groups of a tile's outputs, and an epilogue part's */
    constexpr int GROUPS = TILE_N / 8, PART_GROUPS = GROUPS / EPI_PARTS;
    static_assert(PART_GROUPS * EPI_PARTS == GROUPS && 16 % PART_GROUPS == 0,
                  "a part lies within one staged half of 128 columns");
    extern __shared__ unsigned char smem_raw[];
    const smem_layout sm = carve_smem(smem_raw, STAGES, STAGE_BYTES, OUT_BYTES);
    unsigned char *smem = sm.stages, *out_stage = sm.out_stage;
    uint64_t *full = sm.full, *empty = sm.empty;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int tiles = *used_tiles;
    const int num_n = (n + TILE_N - 1) / TILE_N, num_k = (k + BK - 1) / BK;
    const int total = tiles * num_n;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], full_arrivals(GATHER));
            mbar_init(&empty[s], 2); /* each consumer warpgroup */
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        /* thread 0 loads the weight's halves (and the rows, by TMA); when
         * the rows are gathered, thread tid copies 16-byte chunk tid % 8 of
         * rows tid / 8 + 16 i (i < GATHER_ROWS) of each tile: a warp's copy
         * reads four whole 128-byte lines of four rows */
        if (GATHER || tid == 0) {
            const int w_rows = SWIGLU ? 2 * n : n;
            int s = 0, phase = 0;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                int m, nb;
                tile_coords(t, tiles, num_n, GROUP_M, m, nb);
                const int e = tile_expert[m];
                /* the weight tile's halves: gate rows and the up rows of the
                 * same outputs, or 256 consecutive output rows */
                const int w0 = e * w_rows + nb * TILE_N,
                          w1 = SWIGLU ? w0 + n : w0 + BN / 2;
                /* the token rows of the thread's rows of the tile: where each
                 * begins in 16-byte units, and which hold a token (bit i set)
                 * rather than padding; 32-bit offsets and a mask rather than
                 * 64-bit addresses, so that the producer's 40 registers hold
                 * them without spilling (the launch checks the range) */
                uint32_t off[GATHER_ROWS];
                unsigned rows_in = 0u;
#pragma unroll
                for (int i = 0; i < GATHER_ROWS; i++) {
                    const int id = GATHER ? sorted[m * BM + tid / 8 + 16 * i] : -1;
                    off[i] = id < 0 ? 0u : (uint32_t)(id / gather) * (uint32_t)(k / 8);
                    rows_in |= (id >= 0 ? 1u : 0u) << i;
                }
                for (int kb = 0; kb < num_k; kb++) {
                    mbar_wait(&empty[s], phase ^ 1);
                    unsigned char *st = smem + s * STAGE_BYTES;
                    if (tid == 0) {
                        mbar_expect_tx(&full[s], GATHER ? B_BYTES : STAGE_BYTES);
                        if constexpr (!GATHER)
                            tma_load_2d(st, &map_x, &full[s], kb * BK, m * BM);
                        tma_load_2d(st + A_BYTES, &map_w, &full[s], kb * BK, w0);
                        tma_load_2d(st + A_BYTES + B_BYTES / 2, &map_w, &full[s], kb * BK,
                                    w1);
                    }
                    if constexpr (GATHER) {
                        /* chunk c of a row's 128 bytes goes where the
                         * 128-byte swizzle puts it: chunk c ^ (row % 8),
                         * and row % 8 is (tid / 8) % 8 for each of them */
                        const int c = tid % 8;
                        const bool in_k = kb * BK + c * 8 < k;
                        const uint4 *src = reinterpret_cast<const uint4 *>(tokens) +
                                           (in_k ? kb * (BK / 8) + c : 0);
                        const uint32_t at = (uint32_t)((c ^ (tid / 8 % 8)) << 4);
#pragma unroll
                        for (int i = 0; i < GATHER_ROWS; i++) {
                            const int row = tid / 8 + 16 * i;
                            cp_async16(st + row * (BK * 2) + at, src + off[i],
                                       in_k && (rows_in >> i & 1u));
                        }
                        cp_async_mbar_arrive(&full[s]);
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
            if constexpr (GATHER)
                cp_async_wait<0>(); /* no copy outlives its thread */
        }
    } else {
        /* consumers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127 */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int half = consumer_half(wg), warp = tid / 32, lane = tid % 32;
        unsigned char *out = out_stage + half * OUT_BYTES;
        /* A finished tile rounded to bf16 (round_accumulators), its bias
         * added, waiting for its epilogue: output group j (8 columns) is r[2 j
         * + h]; for SWIGLU and SWIGLU_OAI (j < 16) the gate, its up in r[32 +
         * 2 j + h]. */
        __nv_bfloat162 r[64];
        /* Epilogue part c of EPI_PARTS: groups c x PART_GROUPS on, staged
         * (stage_addr) in the half of 128 columns they belong to; the part
         * that begins a half first waits until the staging's previous stores
         * have read it, the part that ends one stores its two 64-column boxes
         * (the columns past n clipped, boxes wholly past it left out). */
        auto epilogue_part_at = [&](auto part, int tile) {
            constexpr int c = decltype(part)::value, j0 = c * PART_GROUPS;
            if constexpr (j0 % 16 == 0) {
                if (tid == 0)
                    tma_store_wait_read();
                named_barrier(1 + half, 128);
            }
            const uint32_t base = stage_base(out, warp, lane);
#pragma unroll
            for (int jj = 0; jj < PART_GROUPS; jj++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int j = j0 + jj;
                    const uint32_t addr = stage_addr(base, j % 16, h);
                    if constexpr (OAI)
                        st_shared_pair(addr, swiglu_oai2(r[2 * j + h], r[32 + 2 * j + h],
                                                         alpha, limit));
                    else if constexpr (SWIGLU)
                        st_shared_pair(
                            addr, kvcal_swiglu2_bf16(r[2 * j + h], r[32 + 2 * j + h]));
                    else
                        st_shared_pair(addr, r[2 * j + h]);
                }
            if constexpr ((j0 + PART_GROUPS) % 16 == 0) {
                fence_proxy_async();
                named_barrier(1 + half, 128);
                if (tid == 0) {
                    int m, nb;
                    tile_coords(tile, tiles, num_n, GROUP_M, m, nb);
                    const int row0 = m * BM + half * (BM / 2),
                              col0 = nb * TILE_N + j0 / 16 * 128;
                    if (col0 < n)
                        tma_store_2d(&map_out, out, col0, row0);
                    if (col0 + 64 < n)
                        tma_store_2d(&map_out, out + OUT_BYTES / 2, col0 + 64, row0);
                    tma_store_commit();
                }
            }
        };
        /* part c of the registers must be named at compile time: a run-time
         * index would move r to local memory */
        auto epilogue_part = [&](int c, int tile) {
            at_constant<0, EPI_PARTS>(c,
                                      [&](auto part) { epilogue_part_at(part, tile); });
        };
        int s = 0, phase = 0;
        int prev = -1; /* the tile computed last, whose epilogue is still to run */
        float d[128];
        for (int t = blockIdx.x; t < total; t += gridDim.x) {
            int held = 0; /* the stage of the previous k block */
            for (int kb = 0; kb < num_k; kb++) {
                mbar_wait(&full[s], phase);
                if constexpr (GATHER) /* the cp.async rows, to wgmma's async proxy */
                    fence_proxy_async();
                wgmma_k_block(d, smem + s * STAGE_BYTES + half * (BM / 2) * BK * 2,
                              smem + s * STAGE_BYTES + A_BYTES, kb == 0);
                /* the previous tile's epilogue runs while the tensor cores
                 * work on this tile's first k blocks */
                if (prev >= 0 && kb < EPI_PARTS)
                    epilogue_part(kb, prev);
                wgmma_wait<1>(); /* the previous k block's products are done */
                if (tid == 0 && kb > 0)
                    mbar_arrive(&empty[held]);
                held = s;
                if (++s == STAGES) {
                    s = 0;
                    phase ^= 1;
                }
            }
            for (int c = num_k; prev >= 0 && c < EPI_PARTS; c++) /* k shorter than that */
                epilogue_part(c, prev);
            wgmma_wait<0>();
            fence_operands(d);
            if (tid == 0)
                mbar_arrive(&empty[held]);
            round_accumulators(r, d);
            add_bias<SWIGLU>(r, t, tiles, num_n, tile_expert, bias, n, lane);
            prev = t;
        }
        for (int c = 0; prev >= 0 && c < EPI_PARTS; c++) /* the last tile's */
            epilogue_part(c, prev);
        if (tid == 0)
            tma_store_wait_read(); /* shared memory stays until the last stores read it */
    }
#elif defined(__CUDA_ARCH__)
    /* built for another architecture than sm_90a: fail, never skip the product */
    __trap();
#endif
}

template <int EPI, bool GATHER>
kvcal_status launch_as(const CUtensorMap &map_x, const CUtensorMap &map_w,
                       const CUtensorMap &map_out, const kvcal_bf16 *x, int gather,
                       const kvcal_moe_plan *plan, int k, int n,
                       const kvcal_moe_epilogue_args &args, int sms, cudaStream_t stream)
{
    KVCAL_CUDA_TRY(cudaFuncSetAttribute(moe_wgmma_kernel<EPI, GATHER>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)SMEM_BYTES));
    /* (the tiles' count fits an int: out has capacity x n bf16 values) */
    const int total = plan->tiles * ((n + tile_n(EPI) - 1) / tile_n(EPI));
    const int grid = total < sms ? total : sms;
    moe_wgmma_kernel<EPI, GATHER><<<grid, THREADS, SMEM_BYTES, stream>>>(
        map_x, map_w, map_out, reinterpret_cast<const __nv_bfloat16 *>(x), plan->sorted,
        gather, plan->tile_expert, plan->used_tiles, k, n,
        reinterpret_cast<const __nv_bfloat16 *>(args.bias), args.alpha, args.limit);
    KVCAL_CUDA_CHECK_LAUNCH("moe_wgmma_kernel");
    return KVCAL_OK;
}

template <int EPI>
kvcal_status launch(const CUtensorMap &map_x, const CUtensorMap &map_w,
                    const CUtensorMap &map_out, const kvcal_bf16 *x, int gather,
                    const kvcal_moe_plan *plan, int k, int n,
                    const kvcal_moe_epilogue_args &args, int sms, cudaStream_t stream)
{
    return gather > 0 ? launch_as<EPI, true>(map_x, map_w, map_out, x, gather, plan, k, n,
                                             args, sms, stream)
                      : launch_as<EPI, false>(map_x, map_w, map_out, x, gather, plan, k,
                                              n, args, sms, stream);
}

} // namespace

extern "C" kvcal_status
kvcal_moe_gemm_sm90_launch(kvcal_bf16 *out, const kvcal_bf16 *x, int gather,
                           const kvcal_bf16 *w, const kvcal_moe_plan *plan,
                           int num_experts, int k, int n, kvcal_moe_epilogue epi,
                           const kvcal_moe_epilogue_args *args, cudaStream_t stream)
{
    static const char who[] = "moe grouped GEMM (sm_90a)";
    const kvcal_moe_epilogue_args none = {NULL, 0.0f, 0.0f}, a = args ? *args : none;
    const int is_gated = gated(epi), oai = epi == KVCAL_MOE_EPI_SWIGLU_OAI;
    if (!out || !x || !w || !plan || !plan->used_tiles || num_experts < 1 || k < 8 ||
        gather < 0 || (gather > 0 && !plan->sorted) || n < 8 || k % 8 || n % 8 ||
        (gather > 0 &&
         (int64_t)plan->capacity / gather * (k / 8) > (int64_t)UINT32_MAX) ||
        (!is_gated && epi != KVCAL_MOE_EPI_STORE) ||
        ((uintptr_t)out | (uintptr_t)x | (uintptr_t)w) % 16 || (uintptr_t)a.bias % 4 ||
        (oai && !(a.limit > 0.0f && isfinite(a.alpha))))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "%s: k %d, n %d, %d experts, gather %d, epilogue %d: need buffers (the "
            "plan's used_tiles too, and its sorted to gather), k and n multiples of 8, "
            "gather >= 0 (the gathered rows within 64 GiB), 16-byte aligned out, x and "
            "w, a 4-byte aligned bias, a known "
            "epilogue (gpt-oss's with a finite alpha and a limit > 0)",
            who, k, n, num_experts, gather, (int)epi);
    if (plan->tiles < 1)
        return KVCAL_OK;
    int sms = 0;
    kvcal_status st = kvcal_sm90_check(who, &sms);
    CUtensorMap map_x, map_w, map_out;
    memset(&map_x, 0, sizeof map_x); /* not read when the rows are gathered */
    if (st == KVCAL_OK && gather == 0)
        st = kvcal_sm90_tensor_map(&map_x, x, plan->capacity, k, BM, who, "the rows");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_w, w,
                                   (int64_t)num_experts * (is_gated ? 2 * n : n), k,
                                   BN / 2, who, "the experts' weight");
    if (st == KVCAL_OK)
        st = kvcal_sm90_tensor_map(&map_out, out, plan->capacity, n, BM / 2, who, "out");
    if (st != KVCAL_OK)
        return st;
    switch (epi) {
    case KVCAL_MOE_EPI_SWIGLU:
        return launch<KVCAL_MOE_EPI_SWIGLU>(map_x, map_w, map_out, x, gather, plan, k, n,
                                            a, sms, stream);
    case KVCAL_MOE_EPI_SWIGLU_OAI:
        return launch<KVCAL_MOE_EPI_SWIGLU_OAI>(map_x, map_w, map_out, x, gather, plan, k,
                                                n, a, sms, stream);
    default:
        return launch<KVCAL_MOE_EPI_STORE>(map_x, map_w, map_out, x, gather, plan, k, n,
                                           a, sms, stream);
    }
}
