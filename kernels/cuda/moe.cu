/* kernels/cuda/moe.cu: a mixture of experts on the device, with no host
 * round trip: softmax top-k routing (a warp per token), the grouping of the
 * routed rows by expert into tiles (counted and placed by chunks of the
 * assignments), the experts' grouped GEMM
 * on the tensor cores (a block per tile of one expert; the grid is every
 * tile the routing could fill, unused tiles exit; on Hopper moe_wgmma.cu's
 * instead, over the rows gathered here in the plan's order), and the
 * weighted combine (a block per token, the shared expert's sigmoid gate
 * fused). The CPU
 * references are kvcal_moe_route_ref and the per-expert kvcal_matmul_ref of
 * calib/backend_cpu.c. */
#include <cuda_bf16.h>
#include <mma.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/norm_row.cuh"
#include "kernels/cuda/ops.h"

// --- routing --------------------------------------------------------------------

#define ROUTE_WARPS 4
#define ROUTE_MAX_PER_LANE (KVCAL_MOE_MAX_EXPERTS / 32)

/* The groups open to the top-k (bit g: group g) of a token whose choice
 * values lane + 32 i (i < PL) the lane holds in v
 * (kvcal_moe_route_grouped_ref):
 * each group's score (its best expert's, softmax: by probability, or its two
 * best choice values' sum) by a warp reduction per group, then topk_groups
 * rounds of a warp argmax over the groups, the lower group on a tie. */
template <int SIGMOID, int PL>
static __device__ unsigned long long open_groups(const float v[PL], int lane, int E,
                                                 float m, float sum, int groups,
                                                 int topk_groups, int group_max)
{
    const int S = E / groups;
    float score[KVCAL_MOE_MAX_GROUPS / 32]; /* the lane's groups: lane, lane + 32 */
    for (int g = 0; g < groups; g++) {
        float a = -INFINITY, b = -INFINITY; /* the group's two best, a >= b */
#pragma unroll
        for (int i = 0; i < PL; i++) {
            const int e = lane + 32 * i;
            if (e < E && e / S == g) {
                const float s = SIGMOID ? v[i] : __expf(v[i] - m) / sum;
                b = s > a ? a : fmaxf(b, s);
                a = fmaxf(a, s);
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float oa = __shfl_xor_sync(0xffffffffu, a, o);
            const float ob = __shfl_xor_sync(0xffffffffu, b, o);
            b = fmaxf(fminf(a, oa), fmaxf(b, ob));
            a = fmaxf(a, oa);
        }
        if ((g & 31) == lane)
            score[g >> 5] = group_max || S < 2 ? a : a + b;
    }
    unsigned long long open = 0ull;
    for (int j = 0; j < topk_groups; j++) {
        float best = -INFINITY;
        int best_g = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < KVCAL_MOE_MAX_GROUPS / 32; i++) {
            const int g = lane + 32 * i;
            if (g < groups && !((open >> g) & 1ull) &&
                (best_g == 0x7fffffff || score[i] > best))
                best = score[i], best_g = g;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int og = __shfl_xor_sync(0xffffffffu, best_g, o);
            if (og != 0x7fffffff &&
                (best_g == 0x7fffffff || ob > best || (ob == best && og < best_g)))
                best = ob, best_g = og;
        }
        if (best_g < groups)
            open |= 1ull << best_g;
    }
    return open;
}

/* The order key of expert e's logit x (a bf16 value) in a keyed top-k round:
 * x's bits made unsigned-ordered (-0 as +0, so that the two tie as floats
 * do) in the upper 16 bits, 0xffff - e below (the lower expert wins a tie);
 * 0 for -inf, NaN and experts past E, which the argmax never chooses. */
static __device__ __forceinline__ unsigned route_key(float x, int e, int E)
{
    if (e >= E || !(x > -INFINITY))
        return 0u;
    unsigned b = __float_as_uint(x) >> 16;
    b = b == 0x8000u ? 0u : b;
    return ((b & 0x8000u ? ~b & 0xffffu : b | 0x8000u) << 16) | (0xffffu - (unsigned)e);
}

/* The logit of a key (route_key's inverse, -0 as +0). */
static __device__ __forceinline__ float route_key_logit(unsigned key)
{
    const unsigned k = key >> 16, b = k & 0x8000u ? k & 0x7fffu : ~k & 0xffffu;
    return __uint_as_float(b << 16);
}

/* SIGMOID 0: softmax top-k (with a bias (E): the top-k of the probability
 * + bias, ERNIE 4.5's); 1: the top-k of sigmoid + bias, weighted by the
 * sigmoids (bias (E) or NULL); weights times scale after the
 * renormalization; the
 * choice among the open groups of grouped top-k (groups > 1). A lane holds
 * PL >= E / 32 of the token's choice values (expert lane + 32 i): PL is the
 * smallest power of two that holds E, so that no round of the top-k loops
 * over the experts a model does not have (a lane's missing values added 0
 * to its sum, so the result is the same for every PL that holds E). */
template <int SIGMOID, int PL>
__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    moe_route_kernel(int32_t *__restrict__ experts,            // (tokens, top_k)
                     float *__restrict__ weights,              // (tokens, top_k)
                     const __nv_bfloat16 *__restrict__ logits, // (tokens, E)
                     const __nv_bfloat16 *__restrict__ bias,   // (E) or NULL
                     const int32_t *__restrict__ pos,          // (tokens) or NULL
                     int tokens, int E, int top_k, int renormalize, float scale,
                     int groups, int topk_groups, int group_max)
{
    const int t = blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= tokens)
        return;
    int32_t *e_out = experts + (int64_t)t * top_k;
    float *w_out = weights + (int64_t)t * top_k;
    if (pos && pos[t] < 0) {
        if (lane < top_k)
            e_out[lane] = -1, w_out[lane] = 0.0f;
        return;
    }
    const __nv_bfloat16 *z = logits + (int64_t)t * E;
    float v[PL];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        v[i] = e < E ? __bfloat162float(z[e]) : -INFINITY;
        if (SIGMOID && e < E) /* the choice: sigmoid + bias */
            v[i] =
                1.0f / (1.0f + __expf(-v[i])) + (bias ? __bfloat162float(bias[e]) : 0.0f);
        m = fmaxf(m, v[i]);
    }
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < PL; i++)
        sum += lane + 32 * i < E ? __expf(v[i] - m) : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!SIGMOID && bias) { /* ERNIE 4.5's choice: softmax's probability + bias */
#pragma unroll
        for (int i = 0; i < PL; i++) {
            const int e = lane + 32 * i;
            if (e < E)
                v[i] = __expf(v[i] - m) / sum + __bfloat162float(bias[e]);
        }
    }
    if (groups > 1) {
        const unsigned long long open =
            open_groups<SIGMOID, PL>(v, lane, E, m, sum, groups, topk_groups, group_max);
#pragma unroll
        for (int i = 0; i < PL; i++) {
            const int e = lane + 32 * i;
            if (e < E && !((open >> (e / (E / groups))) & 1ull))
                v[i] = -INFINITY;
        }
    }
    /* top_k rounds of a warp argmax, the lower expert on a tie; lane j keeps
     * the j-th choice. Where the choice is the logit itself (softmax without
     * a bias, one group), a round is one warp max of keys (route_key) */
    int mine = -1;
    float mine_w = 0.0f, chosen_sum = 0.0f;
    if (!SIGMOID && !bias && groups <= 1) {
        unsigned key[PL];
#pragma unroll
        for (int i = 0; i < PL; i++)
            key[i] = route_key(v[i], lane + 32 * i, E);
        for (int j = 0; j < top_k; j++) {
            unsigned best = 0u;
#pragma unroll
            for (int i = 0; i < PL; i++)
                best = max(best, key[i]);
            best = __reduce_max_sync(0xffffffffu, best);
            const int best_e = best ? 0xffff - (int)(best & 0xffffu) : -1;
            const float p = best_e < 0 ? 0.0f : __expf(route_key_logit(best) - m) / sum;
            chosen_sum += p;
            if (lane == j)
                mine = best_e, mine_w = p;
#pragma unroll
            for (int i = 0; i < PL; i++)
                key[i] = key[i] == best ? 0u : key[i];
        }
    } else {
        for (int j = 0; j < top_k; j++) {
            float best = -INFINITY;
            int best_e = 0x7fffffff;
#pragma unroll
            for (int i = 0; i < PL; i++) {
                const int e = lane + 32 * i;
                if (e < E && v[i] > best)
                    best = v[i], best_e = e;
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (ob > best || (ob == best && oe < best_e))
                    best = ob, best_e = oe;
            }
            if (best_e >= E) /* no finite logit left (a NaN input): no expert */
                best_e = -1;
            /* the weight: softmax's probability, or the sigmoid, without the bias */
            const float zb = best_e < 0 ? 0.0f : __bfloat162float(z[best_e]);
            const float p = best_e < 0 ? 0.0f
                            : SIGMOID  ? 1.0f / (1.0f + __expf(-zb))
                                       : __expf(zb - m) / sum;
            chosen_sum += p;
            if (lane == j)
                mine = best_e, mine_w = p;
            if (best_e >= 0 && (best_e & 31) == lane) {
#pragma unroll
                for (int i = 0; i < PL; i++)
                    if (lane + 32 * i == best_e)
                        v[i] = -INFINITY;
            }
        }
    }
    if (lane < top_k) {
        e_out[lane] = mine;
        w_out[lane] =
            (renormalize ? mine_w / (chosen_sum + (SIGMOID ? 1e-20f : 0.0f)) : mine_w) *
            scale;
    }
}

static kvcal_status route_check(const int32_t *experts, const float *weights,
                                const kvcal_bf16 *logits, int tokens, int num_experts,
                                int top_k)
{
    if (!experts || !weights || !logits || tokens < 0 || num_experts < 1 ||
        num_experts > KVCAL_MOE_MAX_EXPERTS || top_k < 1 || top_k > num_experts ||
        top_k > KVCAL_MOE_MAX_TOP_K)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "moe routing: %d tokens, %d experts, top-%d: need buffers, 1 .. "
            "%d experts and a top-k of 1 .. min(experts, %d)",
            tokens, num_experts, top_k, KVCAL_MOE_MAX_EXPERTS, KVCAL_MOE_MAX_TOP_K);
    return KVCAL_OK;
}

/* Queues the routing kernel for E experts: its instantiation with the
 * fewest values a lane that hold E. */
template <int SIGMOID, int PL>
static void route_queue_pl(int32_t *experts, float *weights, const __nv_bfloat16 *z,
                           const __nv_bfloat16 *bias, const int32_t *pos, int tokens,
                           int E, int top_k, int renormalize, float scale, int groups,
                           int topk_groups, int group_max, cudaStream_t stream)
{
    if constexpr (PL < ROUTE_MAX_PER_LANE) {
        if (E > 32 * PL) {
            route_queue_pl<SIGMOID, 2 * PL>(experts, weights, z, bias, pos, tokens, E,
                                            top_k, renormalize, scale, groups,
                                            topk_groups, group_max, stream);
            return;
        }
    }
    moe_route_kernel<SIGMOID, PL>
        <<<(tokens + ROUTE_WARPS - 1) / ROUTE_WARPS, ROUTE_WARPS * 32, 0, stream>>>(
            experts, weights, z, bias, pos, tokens, E, top_k, renormalize, scale, groups,
            topk_groups, group_max);
}

/* The routing of kvcal_moe_route_grouped_launch's contract. */
static kvcal_status route_queue(int sigmoid, int32_t *experts, float *weights,
                                const kvcal_bf16 *logits, const kvcal_bf16 *bias,
                                const int32_t *pos, int tokens, int E, int top_k,
                                int renormalize, float scale, int groups, int topk_groups,
                                int group_max, cudaStream_t stream)
{
    const auto *z = reinterpret_cast<const __nv_bfloat16 *>(logits);
    const auto *b = reinterpret_cast<const __nv_bfloat16 *>(bias);
    if (sigmoid)
        route_queue_pl<1, 1>(experts, weights, z, b, pos, tokens, E, top_k, renormalize,
                             scale, groups, topk_groups, group_max, stream);
    else
        route_queue_pl<0, 1>(experts, weights, z, b, pos, tokens, E, top_k, renormalize,
                             scale, groups, topk_groups, group_max, stream);
    KVCAL_CUDA_CHECK_LAUNCH("moe_route_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status
kvcal_moe_route_sigmoid_launch(int32_t *experts, float *weights, const kvcal_bf16 *logits,
                               const kvcal_bf16 *bias, const int32_t *pos, int tokens,
                               int num_experts, int top_k, int renormalize, float scale,
                               cudaStream_t stream)
{
    kvcal_status st = route_check(experts, weights, logits, tokens, num_experts, top_k);
    if (st || !tokens)
        return st;
    return route_queue(1, experts, weights, logits, bias, pos, tokens, num_experts, top_k,
                       renormalize, scale, 1, 1, 0, stream);
}

extern "C" kvcal_status kvcal_moe_route_launch(int32_t *experts, float *weights,
                                               const kvcal_bf16 *logits,
                                               const int32_t *pos, int tokens,
                                               int num_experts, int top_k,
                                               int renormalize, cudaStream_t stream)
{
    kvcal_status st = route_check(experts, weights, logits, tokens, num_experts, top_k);
    if (st || !tokens)
        return st;
    return route_queue(0, experts, weights, logits, NULL, pos, tokens, num_experts, top_k,
                       renormalize, 1.0f, 1, 1, 0, stream);
}

extern "C" kvcal_status kvcal_moe_route_grouped_launch(int32_t *experts, float *weights,
                                                       const kvcal_bf16 *logits,
                                                       const int32_t *pos, int tokens,
                                                       const kvcal_moe_route_params *p,
                                                       cudaStream_t stream)
{
    kvcal_status st =
        route_check(experts, weights, logits, tokens, p->num_experts, p->top_k);
    if (st || !tokens)
        return st;
    const int G = p->groups;
    if (G < 1 || G > KVCAL_MOE_MAX_GROUPS || p->num_experts % G || p->topk_groups < 1 ||
        p->topk_groups > G || p->top_k > p->topk_groups * (p->num_experts / G))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "moe routing: %d experts in %d groups, %d open, top-%d: the "
            "groups (at most %d) must divide the experts and hold the top-k",
            p->num_experts, G, p->topk_groups, p->top_k, KVCAL_MOE_MAX_GROUPS);
    if (!p->sigmoid && p->bias && G > 1)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "moe routing: softmax with a choice bias in %d groups: one group "
            "only",
            G);
    return route_queue(p->sigmoid, experts, weights, logits, p->bias, pos, tokens,
                       p->num_experts, p->top_k, p->renormalize, p->scale, G,
                       p->topk_groups, p->group_max, stream);
}

// --- grouping by expert --------------------------------------------------------

/* The grouping in two launches: each block of the first counts the
 * assignments of its chunk per expert into the plan's scratch; each block
 * of the second turns the counts into each expert's first row (padded to
 * tiles) and its chunk's first row for each expert, and places its chunk's
 * assignments from there (shared-memory atomics: the order within an
 * expert changes no result, the combine reads each assignment's row by
 * index); its block 0 also writes the tiles' experts, the padding rows,
 * the used tiles and the experts' token counts. Every block of the second
 * sums the counts (blocks x E values, from L2) itself rather than waiting
 * for a launch of one block that would. */
#define ALIGN_THREADS 512
#define ALIGN_CHUNK 4096 /* assignments a block of each launch takes */

static_assert(ALIGN_THREADS >= KVCAL_MOE_MAX_EXPERTS, "a thread an expert");

extern "C" int kvcal_moe_plan_capacity(int assignments, int num_experts)
{
    /* each expert's rows rounded up to a tile */
    const long long rows =
        (long long)assignments + (long long)num_experts * (KVCAL_MOE_TILE_ROWS - 1);
    return (int)((rows + KVCAL_MOE_TILE_ROWS - 1) / KVCAL_MOE_TILE_ROWS *
                 KVCAL_MOE_TILE_ROWS);
}

static int align_blocks(int assignments)
{
    return (assignments + ALIGN_CHUNK - 1) / ALIGN_CHUNK;
}

extern "C" int kvcal_moe_plan_scratch(int assignments, int num_experts)
{
    const int blocks = align_blocks(assignments);
    return (blocks > 0 ? blocks : 1) * num_experts;
}

__global__ void __launch_bounds__(ALIGN_THREADS)
    moe_count_kernel(int32_t *__restrict__ counts,        // (blocks, E)
                     const int32_t *__restrict__ experts, // (assignments)
                     int assignments, int E)
{
    __shared__ int count[KVCAL_MOE_MAX_EXPERTS];
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        count[e] = 0;
    __syncthreads();
    const int end = min((blockIdx.x + 1) * ALIGN_CHUNK, assignments);
    for (int i = blockIdx.x * ALIGN_CHUNK + threadIdx.x; i < end; i += blockDim.x) {
        const int e = experts[i];
        if (e >= 0 && e < E)
            atomicAdd(&count[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        counts[(int64_t)blockIdx.x * E + e] = count[e];
}

/* The exclusive prefix sum of v over the block's ALIGN_THREADS threads (in
 * thread order), and the total in *total; every thread calls it. */
static __device__ __forceinline__ int block_exclusive_scan(int v, int *total)
{
    __shared__ int warp_sum[ALIGN_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    if (lane == 31)
        warp_sum[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < ALIGN_THREADS / 32 ? warp_sum[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o)
                w += y;
        }
        if (lane < ALIGN_THREADS / 32)
            warp_sum[lane] = w; /* inclusive, over warps */
    }
    __syncthreads();
    *total = warp_sum[ALIGN_THREADS / 32 - 1];
    const int before = warp ? warp_sum[warp - 1] : 0;
    __syncthreads(); /* warp_sum is read before any next call writes it */
    return before + x - v;
}

__global__ void __launch_bounds__(ALIGN_THREADS)
    moe_scatter_kernel(int32_t *__restrict__ sorted,        // (capacity)
                       int32_t *__restrict__ slot_of,       // (assignments)
                       int32_t *__restrict__ tile_expert,   // (tiles)
                       int32_t *__restrict__ used_tiles,    // (1) or NULL
                       const int32_t *__restrict__ counts,  // (blocks, E)
                       const int32_t *__restrict__ experts, // (assignments)
                       int assignments, int blocks, int E, int tiles,
                       unsigned long long *__restrict__ expert_tokens) // (E) or NULL
{
    __shared__ int cursor[KVCAL_MOE_MAX_EXPERTS];
    __shared__ int start[KVCAL_MOE_MAX_EXPERTS + 1]; /* first row of each expert */
    const int e = threadIdx.x;
    /* expert e's count in all (c) and in the chunks before this block's */
    int c = 0, before = 0;
    if (e < E) {
#pragma unroll 8
        for (int b = 0; b < blocks; b++) {
            const int n = counts[(int64_t)b * E + e];
            before += b < (int)blockIdx.x ? n : 0;
            c += n;
        }
    }
    const int padded =
        (c + KVCAL_MOE_TILE_ROWS - 1) / KVCAL_MOE_TILE_ROWS * KVCAL_MOE_TILE_ROWS;
    int rows = 0;
    const int first = block_exclusive_scan(e < E ? padded : 0, &rows);
    if (e < E) {
        start[e] = first;
        cursor[e] = first + before;
    }
    if (e == 0)
        start[E] = rows;
    __syncthreads();
    if (blockIdx.x == 0) {
        if (e < E) {
            for (int row = first + c; row < first + padded; row++)
                sorted[row] = -1; /* the padding of the expert's last tile */
            if (expert_tokens)
                expert_tokens[e] += (unsigned long long)c;
        }
        if (used_tiles && e == 0)
            *used_tiles = rows / KVCAL_MOE_TILE_ROWS;
        for (int tile = threadIdx.x; tile < tiles; tile += blockDim.x) {
            /* the expert x whose rows [start[x], start[x + 1]) hold the tile's first */
            const int row = tile * KVCAL_MOE_TILE_ROWS;
            int lo = 0, hi = E;
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (start[mid + 1] <= row)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            tile_expert[tile] = row < start[E] ? lo : -1;
        }
    }
    const int end = min((blockIdx.x + 1) * ALIGN_CHUNK, assignments);
    for (int i = blockIdx.x * ALIGN_CHUNK + threadIdx.x; i < end; i += blockDim.x) {
        const int x = experts[i];
        int r = -1;
        if (x >= 0 && x < E) {
            r = atomicAdd(&cursor[x], 1);
            sorted[r] = i;
        }
        slot_of[i] = r;
    }
}

extern "C" kvcal_status kvcal_moe_align_launch(const kvcal_moe_plan *plan,
                                               const int32_t *experts, int assignments,
                                               int num_experts,
                                               unsigned long long *expert_tokens,
                                               cudaStream_t stream)
{
    if (!plan || !experts || !plan->scratch || assignments < 0 || num_experts < 1 ||
        num_experts > KVCAL_MOE_MAX_EXPERTS ||
        plan->capacity < kvcal_moe_plan_capacity(assignments, num_experts) ||
        plan->tiles * KVCAL_MOE_TILE_ROWS != plan->capacity)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "moe grouping: %d assignments over %d experts into a plan of %d "
            "rows (%d tiles): the plan needs %d rows of whole tiles and its "
            "scratch",
            assignments, num_experts, plan ? plan->capacity : 0, plan ? plan->tiles : 0,
            kvcal_moe_plan_capacity(assignments, num_experts));
    const int blocks = align_blocks(assignments);
    if (blocks > 0) {
        moe_count_kernel<<<blocks, ALIGN_THREADS, 0, stream>>>(plan->scratch, experts,
                                                               assignments, num_experts);
        KVCAL_CUDA_CHECK_LAUNCH("moe_count_kernel");
    }
    /* no assignment: one block still writes the plan (every tile unused) */
    const int scatter_blocks = blocks > 0 ? blocks : 1;
    moe_scatter_kernel<<<scatter_blocks, ALIGN_THREADS, 0, stream>>>(
        plan->sorted, plan->slot_of, plan->tile_expert, plan->used_tiles, plan->scratch,
        experts, assignments, blocks, num_experts, plan->tiles, expert_tokens);
    KVCAL_CUDA_CHECK_LAUNCH("moe_scatter_kernel");
    return KVCAL_OK;
}

// --- the routed rows in the plan's order ---------------------------------------------

#define GATHER_THREADS 256

/* A block per plan tile, a warp per row at a time, 16 bytes a lane; with
 * weights, each row times its assignment's weight rounded to bf16, the
 * products rounded once (a bf16 model's hidden state times its bf16
 * router score: Llama 4's). */
__global__ void __launch_bounds__(GATHER_THREADS)
    moe_gather_kernel(uint4 *__restrict__ xs,                  // (capacity, dim / 8)
                      const uint4 *__restrict__ x,             // (tokens, dim / 8)
                      const int32_t *__restrict__ sorted,      // (capacity)
                      const int32_t *__restrict__ tile_expert, // (tiles)
                      const float *__restrict__ weights,       // (assignments) or NULL
                      int top_k, int vecs)
{
    const int tile = blockIdx.x;
    if (tile_expert[tile] < 0)
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = warp; r < KVCAL_MOE_TILE_ROWS; r += GATHER_THREADS / 32) {
        const int64_t row = (int64_t)tile * KVCAL_MOE_TILE_ROWS + r;
        const int id = sorted[row];
        uint4 *dst = xs + row * vecs;
        const uint4 *src = x + (int64_t)(id < 0 ? 0 : id / top_k) * vecs;
        const float w = weights && id >= 0
                            ? __bfloat162float(__float2bfloat16_rn(weights[id]))
                            : 1.0f;
#pragma unroll 4
        for (int c = lane; c < vecs; c += 32) {
            uint4 v = id >= 0 ? src[c] : make_uint4(0, 0, 0, 0);
            if (weights) {
                __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float2 f = __bfloat1622float2(h[q]);
                    h[q] = __floats2bfloat162_rn(f.x * w, f.y * w);
                }
            }
            dst[c] = v;
        }
    }
}

extern "C" kvcal_status kvcal_moe_gather_launch(kvcal_bf16 *xs, const kvcal_bf16 *x,
                                                const kvcal_moe_plan *plan, int top_k,
                                                int dim, const float *weights,
                                                cudaStream_t stream)
{
    if (!xs || !x || !plan || top_k < 1 || dim < 8 || dim % 8 ||
        ((uintptr_t)xs | (uintptr_t)x) % 16)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "moe gather: top-%d, dim %d: need buffers, 16-byte aligned, and "
            "dim a multiple of 8",
            top_k, dim);
    if (plan->tiles < 1)
        return KVCAL_OK;
    moe_gather_kernel<<<plan->tiles, GATHER_THREADS, 0, stream>>>(
        reinterpret_cast<uint4 *>(xs), reinterpret_cast<const uint4 *>(x), plan->sorted,
        plan->tile_expert, weights, top_k, dim / 8);
    KVCAL_CUDA_CHECK_LAUNCH("moe_gather_kernel");
    return KVCAL_OK;
}

// --- the grouped GEMM -------------------------------------------------------------

/* A block computes a 128 x 128 tile of one expert's rows with 8 warps (each
 * 32 rows x 64 columns: 2 x 4 fragments of 16 x 16), k in steps of 32,
 * double-buffered with cp.async; A rows are gathered from x. */
#define GM 128
#define GN 128
#define GK 32
#define GLD (GK + 8) /* shared row stride (bf16): 80 bytes, off the bank pattern */
#define G_WARPS 8

static_assert(GM == KVCAL_MOE_TILE_ROWS, "a GEMM tile is a plan tile");

__global__ void __launch_bounds__(G_WARPS * 32)
    moe_gemm_kernel(__nv_bfloat16 *__restrict__ out,     // (capacity, n)
                    const __nv_bfloat16 *__restrict__ x, // (tokens or capacity, k)
                    int gather,
                    const __nv_bfloat16 *__restrict__ w, // (E, n, k)
                    const int32_t *__restrict__ sorted,  // (capacity)
                    const int32_t *__restrict__ tile_expert, int k, int n)
{
    using namespace nvcuda;
    __shared__ __align__(128) __nv_bfloat16 sa[2][GM * GLD];
    __shared__ __align__(128) __nv_bfloat16 sb[2][GN * GLD];
    __shared__ int src_row[GM];
    const int tile = blockIdx.y, e = tile_expert[tile];
    if (e < 0)
        return;
    const int m0 = tile * GM, n0 = blockIdx.x * GN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int r = threadIdx.x; r < GM; r += blockDim.x) {
        const int id = sorted[m0 + r];
        src_row[r] = id < 0 ? -1 : gather > 0 ? id / gather : m0 + r;
    }
    __syncthreads();
    const __nv_bfloat16 *we = w + (int64_t)e * n * k;
    /* a stage: 128 rows x 32 columns of A and of B, 16 bytes per copy: 512
     * copies each over 256 threads */
    auto load = [&](int buf, int k0) {
        for (int c = threadIdx.x; c < GM * GK / 8; c += blockDim.x) {
            const int r = c / (GK / 8), col = (c % (GK / 8)) * 8;
            const int src = src_row[r];
            const bool ok = src >= 0 && k0 + col < k;
            cp_async16(&sa[buf][r * GLD + col], ok ? x + (int64_t)src * k + k0 + col : x,
                       ok);
        }
        for (int c = threadIdx.x; c < GN * GK / 8; c += blockDim.x) {
            const int r = c / (GK / 8), col = (c % (GK / 8)) * 8;
            const bool ok = n0 + r < n && k0 + col < k;
            cp_async16(&sb[buf][r * GLD + col],
                       ok ? we + (int64_t)(n0 + r) * k + k0 + col : we, ok);
        }
        cp_async_commit();
    };
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 64; /* the warp's 32 x 64 */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    const int steps = (k + GK - 1) / GK;
    load(0, 0);
    for (int s = 0; s < steps; s++) {
        const int buf = s & 1;
        if (s + 1 < steps) {
            load(buf ^ 1, (s + 1) * GK);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>
                a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>
                b[4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(a[i], &sa[buf][(wm + 16 * i) * GLD + kk], GLD);
#pragma unroll
            for (int j = 0; j < 4; j++)
                wmma::load_matrix_sync(b[j], &sb[buf][(wn + 16 * j) * GLD + kk], GLD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads(); /* every warp done with buf before it is refilled */
    }
    /* through a 16 x 16 staging square per warp (in sa, free now): bf16, rows
     * of the plan that hold an assignment, columns inside n */
    float *st = reinterpret_cast<float *>(&sa[0][0]) + warp * 16 * 16;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int c = lane; c < 16 * 16; c += 32) {
                const int r = wm + 16 * i + c / 16, col = n0 + wn + 16 * j + c % 16;
                if (src_row[r] >= 0 && col < n)
                    out[(int64_t)(m0 + r) * n + col] = __float2bfloat16_rn(st[c]);
            }
            __syncwarp();
        }
}

extern "C" kvcal_status kvcal_moe_gemm_launch(kvcal_bf16 *out, const kvcal_bf16 *x,
                                              int gather, const kvcal_bf16 *w,
                                              const kvcal_moe_plan *plan, int k, int n,
                                              cudaStream_t stream)
{
    if (!out || !x || !w || !plan || k < 8 || n < 8 || k % 8 || n % 8 || gather < 0 ||
        ((uintptr_t)x | (uintptr_t)w) % 16)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "moe grouped GEMM: k %d, n %d: need buffers, k and n multiples of "
            "8 and 16-byte aligned x and w",
            k, n);
    if (plan->tiles < 1)
        return KVCAL_OK;
    if (plan->tiles > 65535)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "moe grouped GEMM: %d tiles exceed the launch grid; use a "
                          "smaller --batch or --seq-len",
                          plan->tiles);
    const dim3 grid((n + GN - 1) / GN, plan->tiles);
    moe_gemm_kernel<<<grid, G_WARPS * 32, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(x), gather,
        reinterpret_cast<const __nv_bfloat16 *>(w), plan->sorted, plan->tile_expert, k,
        n);
    KVCAL_CUDA_CHECK_LAUNCH("moe_gemm_kernel");
    return KVCAL_OK;
}

// --- an expert projection's bias -------------------------------------------------------

#define BIAS_WARPS 8

/* The 8 bf16 values of a 16-byte word plus those of b, each rounded once. */
static __device__ __forceinline__ uint4 add_bf16x8(uint4 y, uint4 b)
{
    __nv_bfloat16 *yv = reinterpret_cast<__nv_bfloat16 *>(&y);
    const __nv_bfloat16 *bv = reinterpret_cast<const __nv_bfloat16 *>(&b);
#pragma unroll
    for (int i = 0; i < 8; i++)
        yv[i] = __float2bfloat16_rn(__bfloat162float(yv[i]) + __bfloat162float(bv[i]));
    return y;
}

/* A separate pass after the grouped GEMM (whose epilogue has no bias): a
 * warp per row, rows of unused tiles and padding rows skipped. VEC: 16-byte
 * words (n a multiple of 8, y and bias 16-byte aligned), else one value a
 * lane at a time. */
template <int VEC>
__global__ void __launch_bounds__(BIAS_WARPS * 32)
    moe_bias_kernel(__nv_bfloat16 *__restrict__ y,           // (capacity, n)
                    const __nv_bfloat16 *__restrict__ bias,  // (E, n)
                    const int32_t *__restrict__ sorted,      // (capacity)
                    const int32_t *__restrict__ tile_expert, // (tiles)
                    int64_t capacity, int n)
{
    const int lane = threadIdx.x % 32;
    for (int64_t r = blockIdx.x * (int64_t)BIAS_WARPS + threadIdx.x / 32; r < capacity;
         r += (int64_t)gridDim.x * BIAS_WARPS) {
        const int e = tile_expert[r / KVCAL_MOE_TILE_ROWS];
        if (e < 0 || sorted[r] < 0)
            continue;
        __nv_bfloat16 *row = y + r * n;
        const __nv_bfloat16 *b = bias + (int64_t)e * n;
        if (VEC) {
            uint4 *rw = reinterpret_cast<uint4 *>(row);
            const uint4 *bw = reinterpret_cast<const uint4 *>(b);
            for (int j = lane; j < n / 8; j += 32)
                rw[j] = add_bf16x8(rw[j], __ldg(bw + j));
        } else {
            for (int j = lane; j < n; j += 32)
                row[j] = __float2bfloat16_rn(__bfloat162float(row[j]) +
                                             __bfloat162float(b[j]));
        }
    }
}

extern "C" kvcal_status kvcal_moe_bias_launch(kvcal_bf16 *y, const kvcal_bf16 *bias,
                                              const kvcal_moe_plan *plan, int n,
                                              cudaStream_t stream)
{
    if (!y || !bias || !plan || n < 1)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "moe bias: n %d: need buffers, a plan and n >= 1", n);
    const int64_t rows = plan->capacity;
    if (rows < 1)
        return KVCAL_OK;
    const int64_t blocks = (rows + BIAS_WARPS - 1) / BIAS_WARPS;
    const unsigned grid = (unsigned)(blocks < (1 << 30) ? blocks : (1 << 30));
    auto *yb = reinterpret_cast<__nv_bfloat16 *>(y);
    const auto *bb = reinterpret_cast<const __nv_bfloat16 *>(bias);
    if (n % 8 == 0 && ((uintptr_t)y | (uintptr_t)bias) % 16 == 0)
        moe_bias_kernel<1><<<grid, BIAS_WARPS * 32, 0, stream>>>(
            yb, bb, plan->sorted, plan->tile_expert, rows, n);
    else
        moe_bias_kernel<0><<<grid, BIAS_WARPS * 32, 0, stream>>>(
            yb, bb, plan->sorted, plan->tile_expert, rows, n);
    KVCAL_CUDA_CHECK_LAUNCH("moe_bias_kernel");
    return KVCAL_OK;
}

// --- the combine ---------------------------------------------------------------------

/* The next layer's RMSNorm of a row of the stream (NORM): its words as
 * add_rmsnorm_kernel<8> reads them (kernels/cuda/norm_row.cuh), the sum of
 * squares of the words this thread holds in ss, normed (dim) written. */
static __device__ __forceinline__ void
combine_norm_row(const __nv_bfloat16 *o, __nv_bfloat16 *normed, const __nv_bfloat16 *w,
                 int dim, float ss, float eps, float *scratch)
{
    const float scale = rsqrtf(block_sum(ss, scratch) / (float)dim + eps);
    for (int c = 8 * threadIdx.x; c < dim; c += 8 * blockDim.x)
        *reinterpret_cast<uint4 *>(normed + c) =
            norm8(*reinterpret_cast<const uint4 *>(o + c), w, c, scale, 0.0f);
}

/* ACCUMULATE: out (the residual stream) += the sum rounded to bf16, the
 * add rounded again, as kvcal_add_rmsnorm_launch adds a delta. NORM (with
 * ACCUMULATE): then normed = the stream's row through the next layer's
 * RMSNorm (norm_w), padding rows too, as kvcal_add_rmsnorm_launch
 * normalizes it. A block of kvcal_norm_threads(dim) threads a token. */
template <bool ACCUMULATE, bool NORM>
__global__ void __launch_bounds__(256)
    moe_combine_kernel(__nv_bfloat16 *__restrict__ out,     // (tokens, dim)
                       const __nv_bfloat16 *__restrict__ y, // (capacity, dim)
                       const int32_t *__restrict__ slot_of, // (tokens, top_k)
                       const float *__restrict__ weights,   // (tokens, top_k)
                       const int32_t *__restrict__ pos,     // (tokens)
                       int top_k, int dim,
                       const __nv_bfloat16 *__restrict__ shared, // (tokens, dim) or NULL
                       const __nv_bfloat16 *__restrict__ x,      // (tokens, dim)
                       const __nv_bfloat16 *__restrict__ gate_w, // (dim)
                       __nv_bfloat16 *__restrict__ normed,       // (tokens, dim)
                       const __nv_bfloat16 *__restrict__ norm_w, // (dim)
                       float eps)
{
    __shared__ float red[32], norm_red[32];
    const int64_t t = blockIdx.x;
    __nv_bfloat16 *o = out + t * dim;
    float ss = 0.0f; /* NORM: the sum of squares of this thread's words */
    if (pos && pos[t] < 0) {
        if (NORM)
            for (int c = 8 * threadIdx.x; c < dim; c += 8 * blockDim.x)
                add8w(*reinterpret_cast<const uint4 *>(o + c), make_uint4(0, 0, 0, 0),
                      false, o, c, &ss);
        else if (!ACCUMULATE)
            for (int c = 8 * threadIdx.x; c < dim; c += 8 * blockDim.x)
                *reinterpret_cast<uint4 *>(o + c) = make_uint4(0, 0, 0, 0);
        if (NORM)
            combine_norm_row(o, normed + t * dim, norm_w, dim, ss, eps, norm_red);
        return;
    }
    float gate = 1.0f; /* no gate: the shared expert added as it is */
    if (shared && gate_w) {
        float d = 0.0f;
        for (int c = threadIdx.x; c < dim; c += blockDim.x)
            d += __bfloat162float(x[t * dim + c]) * __bfloat162float(gate_w[c]);
        for (int s = 16; s > 0; s >>= 1)
            d += __shfl_xor_sync(0xffffffffu, d, s);
        if ((threadIdx.x & 31) == 0)
            red[threadIdx.x >> 5] = d;
        __syncthreads();
        d = 0.0f;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++)
            d += red[i];
        const float logit = __bfloat162float(__float2bfloat16_rn(d));
        gate = __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + __expf(-logit))));
    }
    /* 8 columns a thread: 16-byte loads of the top_k rows */
    for (int c = 8 * threadIdx.x; c < dim; c += 8 * blockDim.x) {
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
        for (int j = 0; j < top_k; j++) {
            const int r = slot_of[t * top_k + j];
            if (r < 0)
                continue;
            const float w = weights ? weights[t * top_k + j] : 1.0f;
            const uint4 v = *reinterpret_cast<const uint4 *>(y + (int64_t)r * dim + c);
            const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 f = __bfloat1622float2(p[q]);
                acc[2 * q] += w * f.x;
                acc[2 * q + 1] += w * f.y;
            }
        }
        if (shared) {
            const uint4 v = *reinterpret_cast<const uint4 *>(shared + t * dim + c);
            const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 f = __bfloat1622float2(p[q]);
                acc[2 * q] = __bfloat162float(__float2bfloat16_rn(acc[2 * q])) +
                             __bfloat162float(__float2bfloat16_rn(gate * f.x));
                acc[2 * q + 1] = __bfloat162float(__float2bfloat16_rn(acc[2 * q + 1])) +
                                 __bfloat162float(__float2bfloat16_rn(gate * f.y));
            }
        }
        uint4 res;
        __nv_bfloat162 *r2 = reinterpret_cast<__nv_bfloat162 *>(&res);
#pragma unroll
        for (int q = 0; q < 4; q++)
            r2[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
        if (ACCUMULATE) {
            const uint4 was = *reinterpret_cast<const uint4 *>(o + c);
            const __nv_bfloat162 *w2 = reinterpret_cast<const __nv_bfloat162 *>(&was);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 a = __bfloat1622float2(w2[q]), b = __bfloat1622float2(r2[q]);
                r2[q] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
            }
        }
        *reinterpret_cast<uint4 *>(o + c) = res;
        if (NORM)
            add8w(res, make_uint4(0, 0, 0, 0), false, o, c, &ss);
    }
    if (NORM)
        combine_norm_row(o, normed + t * dim, norm_w, dim, ss, eps, norm_red);
}

extern "C" kvcal_status
kvcal_moe_combine_launch(kvcal_bf16 *out, const kvcal_bf16 *y, const int32_t *slot_of,
                         const float *weights, const int32_t *pos, int tokens, int top_k,
                         int dim, const kvcal_bf16 *shared, const kvcal_bf16 *x,
                         const kvcal_bf16 *shared_gate, int accumulate,
                         const kvcal_combine_norm *norm, cudaStream_t stream)
{
    if (!out || !y || !slot_of || tokens < 0 || top_k < 1 || dim < 8 || dim % 8 ||
        (shared_gate && !x) || ((uintptr_t)out | (uintptr_t)y | (uintptr_t)shared) % 16 ||
        (norm && (!accumulate || !norm->out || !norm->w || !(norm->eps >= 0.0f) ||
                  ((uintptr_t)norm->out | (uintptr_t)norm->w) % 16)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "moe combine: %d tokens, top-%d, dim %d: need buffers (and x "
                          "with a shared expert's gate), 16-byte aligned, dim a "
                          "multiple of 8, and a norm only onto the stream",
                          tokens, top_k, dim);
    if (!tokens)
        return KVCAL_OK;
    const auto kernel = norm         ? moe_combine_kernel<true, true>
                        : accumulate ? moe_combine_kernel<true, false>
                                     : moe_combine_kernel<false, false>;
    kernel<<<tokens, kvcal_norm_threads(dim), 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(y), slot_of, weights, pos, top_k, dim,
        reinterpret_cast<const __nv_bfloat16 *>(shared),
        reinterpret_cast<const __nv_bfloat16 *>(x),
        reinterpret_cast<const __nv_bfloat16 *>(shared_gate),
        norm ? reinterpret_cast<__nv_bfloat16 *>(norm->out) : nullptr,
        norm ? reinterpret_cast<const __nv_bfloat16 *>(norm->w) : nullptr,
        norm ? norm->eps : 0.0f);
    KVCAL_CUDA_CHECK_LAUNCH("moe_combine_kernel");
    return KVCAL_OK;
}
