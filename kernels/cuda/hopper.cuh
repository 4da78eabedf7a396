/* kernels/cuda/hopper.cuh: the pieces of kvcal's Hopper GEMMs (sm_90a:
 * TMA, mbarriers, wgmma, clusters), shared by the fused gate/up + SwiGLU
 * kernel (gemm_swiglu.cu) and the experts' grouped GEMM (moe_wgmma.cu).
 *
 * Both kernels are warp-specialized and persistent: a producer thread
 * loads 128 x 64 tiles of the activations and 256 x 64 tiles of the
 * weight with TMA (128-byte swizzle) into a ring of stages behind
 * mbarriers; two consumer warpgroups each multiply 64 of the 128 rows by
 * the 256 weight rows with wgmma m64n256k16 (fp32 accumulators in
 * registers) and stage their outputs in shared memory for TMA stores.
 *
 * Device code exists for sm_90a alone (the guard below); the host side
 * (hopper.cu) checks that the GPU runs it and encodes the tensor maps. */
#ifndef KVCAL_KERNELS_CUDA_HOPPER_CUH
#define KVCAL_KERNELS_CUDA_HOPPER_CUH

#include <cuda.h> /* CUtensorMap and its enums; the encoder is fetched at run time */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

extern "C" {
#include "core/status.h"
}

/* The tile every Hopper GEMM of kvcal computes: BM activation rows by BN
 * weight rows, k in blocks of BK (64 bf16 = one 128-byte swizzled row). */
#define KVCAL_SM90_BM 128
#define KVCAL_SM90_BN 256
#define KVCAL_SM90_BK 64

/* Whether this GPU runs the build's sm_90a code: compute capability 9.0 and
 * the build holding sm_90a SASS or compute_90a PTX
 * (kvcal_cuda_code_for_device). KVCAL_ERR_UNSUPPORTED otherwise, the
 * message starting with `who`; *sms gets the multiprocessor count. */
kvcal_status kvcal_sm90_check(const char *who, int *sms);

/* A 2D bf16 tensor map over (outer, inner) row-major at ptr (16-byte
 * aligned, inner a multiple of 8), boxes of (box_outer, 64) with the
 * 128-byte swizzle; reads past the end are zeros, stores past it are
 * dropped. A failure names `who` and `what`. */
kvcal_status kvcal_sm90_tensor_map(CUtensorMap *map, const void *ptr, int64_t outer,
                                   int64_t inner, int box_outer, const char *who,
                                   const char *what);

/* kvcal_sm90_tensor_map over e4m3 bytes (the FP8 GEMMs): boxes of
 * (box_outer, 128), inner a multiple of 16. */
kvcal_status kvcal_sm90_tensor_map_e4m3(CUtensorMap *map, const void *ptr, int64_t outer,
                                        int64_t inner, int box_outer, const char *who,
                                        const char *what);

/* The launch configuration of a persistent GEMM kernel in clusters of
 * `cluster` CTAs (gemm_swiglu.cu's, gemm_swiglu_fp8.cu's): *cfg and *attr
 * (the caller's, alive until its cudaLaunchKernelEx) for `threads` threads
 * and `smem` bytes of dynamic shared memory (the kernel's limit raised to
 * them) on stream, the grid as many clusters as are resident at once (a
 * persistent grid must be: not every multiprocessor can take part in a
 * cluster, the GPCs' sizes), at most `tiles`; sms the multiprocessors.
 * KVCAL_ERR_UNSUPPORTED, the message starting with `who`, where no cluster
 * fits. */
kvcal_status kvcal_sm90_cluster_config(const void *kernel, int cluster, int threads,
                                       size_t smem, int tiles, int sms,
                                       cudaStream_t stream, cudaLaunchConfig_t *cfg,
                                       cudaLaunchAttribute *attr, const char *who);

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace kvcal_sm90
{

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(count));
}

/* After barrier initialization, before any other thread or TMA uses them. */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
        "r"(bytes)
        : "memory");
}

/* Arrives on a barrier of this CTA (the default release, CTA scope). */
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar))
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

/* Arrives on bar once every cp.async this thread has issued so far has
 * landed (.noinc: the barrier's arrival count includes this arrival). */
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar)
{
    asm volatile(
        "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
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
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
        "bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
        "h"(mask)
        : "memory");
}

/* box (c0, c1) of the tensor map from shared memory at src; completes in
 * this thread's bulk group */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, const void *src,
                                             int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], "
                 "[%1];" ::"l"(reinterpret_cast<uint64_t>(map)),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

__device__ __forceinline__ void tma_store_commit()
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Waits until this thread's committed TMA stores have read their source. */
__device__ __forceinline__ void tma_store_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Makes this thread's shared-memory writes visible to TMA (the async proxy). */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Barrier `id` (1 ..) among `threads` threads. */
__device__ __forceinline__ void named_barrier(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* A consumer warpgroup's half of a tile's rows (warpgroup wg 1: 0, 2: 1),
 * through a warp vote: the compiler knows a vote's result to be the same
 * across the warp, and not threadIdx's arithmetic, so that the stages' and
 * the wgmma descriptors' addresses made from the half stay on the uniform
 * datapath (none moved over by R2UR in the k loop). */
__device__ __forceinline__ int consumer_half(int wg)
{
    return __all_sync(0xffffffffu, wg == 2) ? 1 : 0;
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
template <int N> __device__ __forceinline__ void fence_operands(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 x 256, fp32, the wgmma accumulator fragment) = A (64 x 16) B^T
 * (256 x 16) + (accumulate ? d : 0), A and B K-major in shared memory behind
 * their descriptors. Asynchronous: see wgmma_commit / wgmma_wait. */
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a,
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
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, "
        "%110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "
        "%125, %126, %127}, "
        "%128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
          "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),
          "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]),
          "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* d (64 x 128, fp32) = A (64 x 32 e4m3) B^T (128 x 32 e4m3) + (accumulate ?
 * d : 0), A and B K-major in shared memory behind their descriptors (rows
 * of 128 bytes, as smem_desc), the k step 32 bytes as the bf16 one's.
 * Asynchronous as wgmma_m64n256k16. */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
        "%63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

/* One k block of a consumer warpgroup, queued on the tensor cores: d +=
 * its 64 rows of A (64 x 64 at a) times the 256 rows of B (256 x 64 at b),
 * both K-major with the 128-byte swizzle, d first cleared when `first`.
 * Committed as one wgmma group. */
__device__ __forceinline__ void wgmma_k_block(float (&d)[128], const unsigned char *a,
                                              const unsigned char *b, bool first)
{
    wgmma_fence();
    fence_operands(d);
#pragma unroll
    for (int kk = 0; kk < KVCAL_SM90_BK / 16; kk++) /* 16 columns = 32 bytes of a row */
        wgmma_m64n256k16(d, smem_desc(a + kk * 32), smem_desc(b + kk * 32),
                         !first || kk > 0);
    wgmma_commit();
    fence_operands(d);
}

/* A finished accumulator fragment rounded to bf16 pairs: r[2 j + h] holds
 * row 16 warp + lane / 4 + 8 h, columns 8 j + 2 (lane % 4) + {0, 1} of the
 * warpgroup's 64 x 256 block (d[4 j + 2 h + e] is column 8 j + 2 (lane % 4)
 * + e of that row). */
__device__ __forceinline__ void round_accumulators(__nv_bfloat162 (&r)[64],
                                                   const float (&d)[128])
{
#pragma unroll
    for (int j = 0; j < 32; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            r[2 * j + h] = __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
}

/* The staging of a warpgroup's 64 x 128 outputs for two TMA stores: two
 * 64 x 64 boxes (out, out + 8 KiB, 1024-byte aligned) with the 128-byte
 * swizzle (16-byte chunk q of row r at chunk q ^ (r % 8)). A thread writes
 * row 16 warp + lane / 4 + 8 h, columns 8 jj + 2 (lane % 4) + {0, 1}
 * (jj < 16): the chunk (jj % 8) ^ (lane / 4) of box jj / 8 (stage_addr). The base
 * address goes through an opaque move so that the compiler does not keep
 * all the swizzled addresses live across a loop (they spilled). */
__device__ __forceinline__ uint32_t stage_base(const void *out, int warp, int lane)
{
    uint32_t base = smem_addr(out) + (warp * 16 + lane / 4) * 128 + ((lane / 4) << 4) +
                    (lane % 4) * 4;
    asm volatile("mov.b32 %0, %0;" : "+r"(base));
    return base;
}

/* The address of the pair (jj, h) in the staging at base (stage_base). */
__device__ __forceinline__ uint32_t stage_addr(uint32_t base, int jj, int h)
{
    return (base ^ ((jj % 8) << 4)) + (jj / 8) * (64 * 64 * 2) + h * 8 * 128;
}

__device__ __forceinline__ void st_shared_pair(uint32_t addr, __nv_bfloat162 v)
{
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr),
                 "r"(*reinterpret_cast<const uint32_t *>(&v))
                 : "memory");
}

/* f(std::integral_constant<int, c>) for c in [C, END), a run-time value. */
template <int C, int END, class F>
__device__ __forceinline__ void at_constant(int c, F &&f)
{
    if constexpr (C + 1 < END) {
        if (c != C) {
            at_constant<C + 1, END>(c, f);
            return;
        }
    }
    f(std::integral_constant<int, C>{});
}

/* Tile t's row block m and weight block nb, walking `group_m` row blocks
 * at a time (every weight block of a group before the next group), so that
 * the tiles in flight share row and weight tiles in L2. */
__device__ __forceinline__ void tile_coords(int t, int num_m, int num_n, int group_m,
                                            int &m, int &nb)
{
    const int group = t / (group_m * num_n), first_m = group * group_m;
    const int gm = min(num_m - first_m, group_m);
    const int r = t - group * group_m * num_n;
    m = first_m + r % gm;
    nb = r / gm;
}

/* The shared memory of kvcal's Hopper GEMMs, from the kernel's dynamic
 * shared memory: the ring of stages (1024-byte aligned for the 128-byte
 * swizzle), the two consumer warpgroups' output staging (out_bytes each),
 * then the stages' full and empty barriers. */
struct smem_layout {
    unsigned char *stages, *out_stage;
    uint64_t *full, *empty;
};

__device__ __forceinline__ smem_layout carve_smem(unsigned char *raw, int stages,
                                                  int stage_bytes, int out_bytes)
{
    smem_layout l;
    l.stages = reinterpret_cast<unsigned char *>(
        (reinterpret_cast<uintptr_t>(raw) + 1023) & ~(uintptr_t)1023);
    l.out_stage = l.stages + stages * stage_bytes;
    l.full = reinterpret_cast<uint64_t *>(l.out_stage + 2 * out_bytes);
    l.empty = l.full + stages;
    return l;
}

/* The producer thread of a GEMM in 2-CTA clusters (gemm_swiglu.cu's,
 * gemm_fp8_sm90.cu's): for each of the cluster's tiles (the cluster's
 * first, then every `stride`-th; tile_coords' order, group_m cluster row
 * blocks), every k block of num_k: this CTA's BM activation rows by TMA
 * and its half of the BN weight rows multicast into both CTAs, once both
 * have freed the stage. kbox: the values of a k block (its 128 bytes). */
template <int STAGES, int CL>
__device__ __forceinline__ void
produce_cluster_tiles(const smem_layout &sm, const CUtensorMap *map_x,
                      const CUtensorMap *map_w, int stage_bytes, int a_bytes, int kbox,
                      int first, int stride, int tiles, int num_mg, int num_n,
                      int group_m, int num_k)
{
    const int rank = (int)cluster_rank(), b_half = (stage_bytes - a_bytes) / CL;
    int s = 0, phase = 0;
    for (int t = first; t < tiles; t += stride) {
        int mg, nb;
        tile_coords(t, num_mg, num_n, group_m, mg, nb);
        const int m = mg * CL + rank;
        for (int kb = 0; kb < num_k; kb++) {
            mbar_wait(&sm.empty[s], phase ^ 1); /* free in every CTA it goes to */
            mbar_expect_tx(&sm.full[s], stage_bytes);
            unsigned char *st = sm.stages + s * stage_bytes;
            tma_load_2d(st, map_x, &sm.full[s], kb * kbox, m * KVCAL_SM90_BM);
            tma_load_2d_multicast(
                st + a_bytes + rank * b_half, map_w, &sm.full[s], kb * kbox,
                nb * KVCAL_SM90_BN + rank * (KVCAL_SM90_BN / CL), (1u << CL) - 1);
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
    }
}

} // namespace kvcal_sm90

#endif

#endif
