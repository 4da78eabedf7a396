/* kernels/cuda/fp8_quant_row.cuh: the per-row FP8 activation quantization
 * that the row kernels run as their last step (kvcal_fp8_quant_act_launch's,
 * SwiGLU's and add + RMSNorm's in kernels/cuda/fp8_linear.cu and
 * kernels/cuda/norm.cu): a row of bf16 values quantized per token, per
 * group or statically, each element by core/fp8_linear.h's formula, so that
 * the bytes and scales of the three kernels equal each other and the CPU
 * reference's.
 *
 * Per token and static, the row is held in registers: tpr threads a row,
 * thread t holding 8 values (one 16-byte word) at each column
 * (t + j * tpr) * 8, j < CH. The absmax is a warp-shuffle max and one step
 * across the row's warps (a max: any order gives the same value); each
 * value is divided by the scale (per token: kvcal_fp8_token_quotient, the
 * division's bytes without a division) or multiplied by its reciprocal
 * (static) and clamped exactly as kvcal_fp8_quant_div /
 * kvcal_fp8_quant_mul do, then converted two values an instruction by
 * cvt.rn.satfinite.e4m3x2.f32. The clamp leaves a finite value in
 * [-448, 448] (a NaN becomes a bound), which that instruction rounds to
 * nearest even exactly as kvcal_fp8_e4m3_from_float (core/fp8.h). Per
 * group, the row goes through shared memory (kvcal_fp8_quant_groups). */
#ifndef KVCAL_KERNELS_CUDA_FP8_QUANT_ROW_CUH
#define KVCAL_KERNELS_CUDA_FP8_QUANT_ROW_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "core/fp8_linear.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_util.h"

static __device__ __forceinline__ float kvcal_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The max of v over the tpr threads of a row (tpr a power of two from 32
 * on, rows of the block at multiples of tpr threads); part: a float for
 * each warp of the block in shared memory, written before its one barrier
 * and read after it (a block that loops over rows alternates two). Every
 * thread of the block calls it. */
static __device__ float kvcal_row_max(float v, int tpr, float *part)
{
    v = kvcal_warp_max(v);
    if (tpr == 32)
        return v;
    const int warp = threadIdx.x >> 5, first = warp & ~((tpr >> 5) - 1);
    if ((threadIdx.x & 31) == 0)
        part[warp] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < tpr >> 5; w++)
        v = fmaxf(v, part[first + w]);
    return v;
}

/* m and the absolute values of the 8 bf16 values of word x. */
static __device__ __forceinline__ float kvcal_bf16x8_absmax(uint4 x, float m)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&x);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]);
        m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
    return m;
}

/* The e4m3 bytes of the 8 bf16 values of word x (value 0 in the lowest
 * byte): TOKEN x / s (kvcal_fp8_token_quotient; with DIVIDE the division
 * itself, for a scale that is not finite), STATIC x * inv, clamped as
 * core/fp8_linear.h clamps. */
template <kvcal_fp8_act_scale MODE, bool DIVIDE>
static __device__ __forceinline__ uint2 kvcal_fp8_quant8(uint4 x, float s, float inv)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&x);
    uint32_t p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]);
        float a = f.x * inv, b = f.y * inv;
        if (MODE == KVCAL_FP8A_TOKEN) {
            a = DIVIDE ? f.x / s : kvcal_fp8_token_quotient(f.x, s, inv);
            b = DIVIDE ? f.y / s : kvcal_fp8_token_quotient(f.y, s, inv);
        }
        p[i] = __nv_cvt_float2_to_fp8x2(
            make_float2(fmaxf(-KVCAL_FP8_E4M3_MAX, fminf(a, KVCAL_FP8_E4M3_MAX)),
                        fmaxf(-KVCAL_FP8_E4M3_MAX, fminf(b, KVCAL_FP8_E4M3_MAX))),
            __NV_SATFINITE, __NV_E4M3);
    }
    return make_uint2(p[0] | p[1] << 16, p[2] | p[3] << 16);
}

/* A row of n values (TOKEN or STATIC) held as the file's head lays it out,
 * v[j] valid where its column is below n, m their absmax: its bytes into
 * qr (8-byte aligned) and its scale into *xs (unless xs is NULL: a row
 * past the end, n 0). Every thread of the block calls it. */
template <kvcal_fp8_act_scale MODE, int CH>
static __device__ void kvcal_fp8_quant_regs(const uint4 (&v)[CH], int t, int tpr, int n,
                                            float m, uint8_t *qr, float *xs,
                                            const float *input_scale, float *part)
{
    const float s = MODE == KVCAL_FP8A_TOKEN
                        ? kvcal_fp8_token_scale(kvcal_row_max(m, tpr, part))
                        : *input_scale;
    const float inv = 1.0f / s;
    if (MODE == KVCAL_FP8A_TOKEN && !isfinite(s)) { /* a row holding an infinity */
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < n)
                *reinterpret_cast<uint2 *>(qr + c) =
                    kvcal_fp8_quant8<MODE, true>(v[j], s, inv);
        }
    } else {
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < n)
                *reinterpret_cast<uint2 *>(qr + c) =
                    kvcal_fp8_quant8<MODE, false>(v[j], s, inv);
        }
    }
    if (t == 0 && xs)
        *xs = s;
}

/* Row r of rows, act (n) bf16 in shared memory written by the block:
 * quantized per group of `group` columns into qr (n) e4m3 and xs as
 * kvcal_fp8_quant_act_launch lays the scales out (xs[g * rows + r]), a
 * warp a group. Every thread of the block calls it. */
static __device__ void kvcal_fp8_quant_groups(const __nv_bfloat16 *act, int n,
                                              uint8_t *qr, float *xs, int64_t r, int rows,
                                              int group)
{
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int c0 = warp * group; c0 < n; c0 += warps * group) {
        const int c1 = c0 + group < n ? c0 + group : n;
        float gm = 0.0f;
        for (int c = c0 + lane; c < c1; c += 32)
            gm = fmaxf(gm, fabsf(__bfloat162float(act[c])));
        const float s = kvcal_fp8_group_scale(kvcal_warp_max(gm));
        for (int c = c0 + lane; c < c1; c += 32)
            qr[c] = kvcal_fp8_quant_group(__bfloat162float(act[c]), s);
        if (lane == 0)
            xs[(int64_t)(c0 / group) * rows + r] = s;
    }
}

/* --- rows staged ahead through shared memory ---------------------------------
 *
 * The row kernels (TOKEN and STATIC, rows of up to 16,384 values) run
 * persistent blocks: block b takes row groups g = b + i * gridDim.x (a
 * group: the rows one pass of the block holds, each thread the words of
 * the layout above in up to NSRC source rows), and while it computes group
 * i, the copies of groups i + 1 .. i + S are in flight (cp.async into S
 * slots of shared memory), so that the loads of the next rows run under
 * the arithmetic, the row max's barrier and the stores of this one. Each
 * thread copies and reads only its own words: no barrier guards a slot,
 * only the order of its own reads against its wait and its next copies
 * (cp_async.cuh's asm statements do not fence the compiler: these do).
 * S 0: no staging, the words loaded from global memory when taken, a
 * block a group.
 *
 * src(g, p) sets p[s] to source row s of group g for this thread (NULL:
 * none) and returns the row's length for it (0: a row past the end). */
template <int CH, int NSRC, typename Src>
static __device__ __forceinline__ void kvcal_stage_issue(uint4 *slot, int g, int groups,
                                                         int t, int tpr, Src src)
{
    const __nv_bfloat16 *p[NSRC];
    const int n = g < groups ? src(g, p) : 0;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c = (t + j * tpr) * 8;
#pragma unroll
        for (int s = 0; s < NSRC; s++)
            if (c < n && p[s])
                cp_async16(slot + (j * NSRC + s) * blockDim.x + threadIdx.x, p[s] + c,
                           true);
    }
    cp_async_commit();
}

/* Uint4 words of a slot (the dynamic shared memory of a kernel: S of them). */
template <int CH, int NSRC> static __host__ __device__ int kvcal_stage_words(int threads)
{
    return CH * NSRC * threads;
}

/* Before the first group: the copies of groups 0 .. S - 1 of this block. */
template <int S, int CH, int NSRC, typename Src>
static __device__ __forceinline__ void kvcal_stage_start(uint4 *stage, int groups, int t,
                                                         int tpr, Src src)
{
#pragma unroll
    for (int i = 0; i < S; i++)
        kvcal_stage_issue<CH, NSRC>(stage + i * kvcal_stage_words<CH, NSRC>(blockDim.x),
                                    blockIdx.x + i * gridDim.x, groups, t, tpr, src);
}

/* Group i's slot of the block (its copies landed) and the sources of group
 * i + S, whose copies go into that slot word by word as group i's words
 * are taken (kvcal_stage_word), so that they leave during group i's
 * arithmetic, not after it. */
template <int NSRC> struct kvcal_stage_group {
    uint4 *slot;
    const __nv_bfloat16 *next[NSRC];
    int n_next; /* the next group's row length for this thread: at most
                 * this group's (rows past the end follow rows past it) */
};

template <int S, int CH, int NSRC, typename Src>
static __device__ __forceinline__ kvcal_stage_group<NSRC>
kvcal_stage_slot(uint4 *stage, int i, int groups, Src src)
{
    kvcal_stage_group<NSRC> q;
    q.slot = stage;
    q.n_next = 0;
    if constexpr (S > 0) {
        const int g = blockIdx.x + (i + S) * gridDim.x;
        q.n_next = g < groups ? src(g, q.next) : 0;
        cp_async_wait<S - 1>();
        asm volatile("" ::: "memory"); /* the slot's reads stay after the wait */
        q.slot += i % S * kvcal_stage_words<CH, NSRC>(blockDim.x);
    }
    return q;
}

/* This thread's word j of source s (column c of its row) from group i's
 * slot, then the copy of the next group's word into its place; S 0: the
 * word at p, from global memory. */
template <int S, int NSRC>
static __device__ __forceinline__ uint4 kvcal_stage_word(const kvcal_stage_group<NSRC> &q,
                                                         int j, int s, int c,
                                                         const __nv_bfloat16 *p)
{
    if constexpr (S == 0)
        return *reinterpret_cast<const uint4 *>(p);
    uint4 *w = q.slot + (j * NSRC + s) * blockDim.x + threadIdx.x;
    const uint4 v = *w;
    asm volatile("" ::: "memory"); /* the read stays before the copy over it */
    if (c < q.n_next && q.next[s])
        cp_async16(w, q.next[s] + c, true);
    return v;
}

/* After group i's last word: the next group's copies, one group. */
template <int S> static __device__ __forceinline__ void kvcal_stage_done()
{
    if constexpr (S > 0)
        cp_async_commit();
}

/* body(g, i) for each group g = blockIdx.x + i * gridDim.x of the block
 * (S 0: the block's one group). */
template <int S, typename Body>
static __device__ __forceinline__ void kvcal_stage_loop(int groups, Body body)
{
    if constexpr (S == 0)
        body((int)blockIdx.x, 0);
    else
        for (int g = blockIdx.x, i = 0; g < groups; g += gridDim.x, i++)
            body(g, i);
}

/* The grid of a kernel whose blocks loop over `groups` row groups: with
 * staging (smem > 0 bytes of slots) one wave of resident blocks, at most
 * `groups`; without, a block a group. */
template <typename K>
static kvcal_status kvcal_stage_grid(K kernel, int threads, size_t smem, int groups,
                                     unsigned *grid)
{
    *grid = (unsigned)groups;
    if (smem == 0)
        return KVCAL_OK;
    int dev = 0, sms = 0, per_sm = 0;
    if (smem > 48 * 1024)
        KVCAL_CUDA_TRY(cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    KVCAL_CUDA_TRY(cudaGetDevice(&dev));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KVCAL_CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    const int64_t wave = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    if (wave < groups)
        *grid = (unsigned)wave;
    return KVCAL_OK;
}

#endif
