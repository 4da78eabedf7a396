/* kernels/cuda/rope_observe.cu: per-head q/k RMSNorm + RoPE of q and k, fused
 * with the K/V observer, in one pass over the fused QKV projection output.
 *
 * Grid (token chunks, kv heads). A block owns one kv head g for a chunk of
 * tokens: it rotates the q heads of g's group and k head g, and observes k
 * and v head g. A warp handles one token at a time; lane l owns the rotation
 * pairs l, l + 32, ... of a head, so each lane keeps the running |x| max of
 * its channels in registers. The |x| histogram is built in shared memory and
 * added to the global counts once per block; absmax reaches global memory by
 * atomicMax on the float bits (|x| >= 0, so integer order is float order, and
 * a NaN, whose bits are above +inf's, wins and surfaces). */
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"
#include "observers/stats.h"

enum {
    ROPE_WARPS = 8,
    ROPE_TOKENS_PER_BLOCK = 128,
    ROPE_MAX_HEAD_DIM = 256,
    ROPE_ROWS_IN_FLIGHT = 4
};

static_assert(sizeof(uint64_t) == sizeof(unsigned long long), "histogram counters");

/* Channels of rotation pair j of a head: the two elements that rotate
 * together (or, past rot_dim, two neighbours passed through). */
static __device__ __forceinline__ int2 pair_channels(int j, int rot_dim, int interleaved)
{
    const int half = rot_dim / 2;
    if (interleaved || j >= half)
        return j < half
                   ? make_int2(2 * j, 2 * j + 1)
                   : make_int2(rot_dim + 2 * (j - half), rot_dim + 2 * (j - half) + 1);
    return make_int2(j, j + half);
}

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The lane's channels of one head row (its pairs' two channels each). */
template <int P>
static __device__ __forceinline__ void load_row(const __nv_bfloat16 *row, int lane,
                                                int pairs, int rot_dim, int interleaved,
                                                float x[2 * P])
{
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int j = lane + 32 * i;
        x[2 * i] = x[2 * i + 1] = 0.0f;
        if (j < pairs) {
            const int2 c = pair_channels(j, rot_dim, interleaved);
            x[2 * i] = __bfloat162float(row[c.x]);
            x[2 * i + 1] = __bfloat162float(row[c.y]);
        }
    }
}

/* Optional RMSNorm and the rotation of a loaded row, stored back in place;
 * x[] becomes the stored (bf16-rounded) values, for the observer. */
template <int P>
static __device__ __forceinline__ void
rotate_row(__nv_bfloat16 *row, int lane, int pairs, int head_dim, int rot_dim,
           int interleaved, const float *cs, const float *sn, const __nv_bfloat16 *norm_w,
           float eps, float x[2 * P])
{
    float r = 1.0f;
    if (norm_w) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 2 * P; i++)
            ss += x[i] * x[i];
        r = rsqrtf(warp_sum(ss) / (float)head_dim + eps);
    }
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int j = lane + 32 * i;
        if (j < pairs) {
            const int2 c = pair_channels(j, rot_dim, interleaved);
            float a = x[2 * i], b = x[2 * i + 1];
            if (norm_w) {
                a *= r * __bfloat162float(norm_w[c.x]);
                b *= r * __bfloat162float(norm_w[c.y]);
            }
            if (2 * j < rot_dim) {
                const float ra = a * cs[i] - b * sn[i];
                const float rb = b * cs[i] + a * sn[i];
                a = ra;
                b = rb;
            }
            const __nv_bfloat16 ha = __float2bfloat16_rn(a), hb = __float2bfloat16_rn(b);
            row[c.x] = ha;
            row[c.y] = hb;
            x[2 * i] = __bfloat162float(ha);
            x[2 * i + 1] = __bfloat162float(hb);
        }
    }
}

/* Folds one row into the lane's running max (float bits: |x| >= 0, and a NaN
 * wins) and the block's shared histogram. */
template <int P>
static __device__ __forceinline__ void
observe_row(const float v[2 * P], unsigned m[2 * P], unsigned *shist, int lane, int pairs)
{
#pragma unroll
    for (int i = 0; i < P; i++) {
        if (lane + 32 * i < pairs) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float a = fabsf(v[2 * i + e]);
                m[2 * i + e] = max(m[2 * i + e], __float_as_uint(a));
                atomicAdd(&shist[kvcal_hist_bin(a)], 1u);
            }
        }
    }
}

template <int P>
__global__ void __launch_bounds__(ROPE_WARPS * 32)
    rope_observe_kernel(__nv_bfloat16 *__restrict__ qkv, // (tokens, token_stride)
                        int64_t token_stride,
                        const int32_t *__restrict__ pos, // (tokens)
                        int tokens, int n_heads, int n_kv_heads, int head_dim,
                        kvcal_rope_cfg rope, kvcal_kv_observer obs, int observe)
{
    __shared__ unsigned shist[2][KVCAL_HIST_BINS];
    __shared__ unsigned smax[2][ROPE_MAX_HEAD_DIM];
    const int g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int pairs = head_dim / 2, group = n_heads / n_kv_heads;
    const auto *qn = reinterpret_cast<const __nv_bfloat16 *>(rope.q_norm_w);
    const auto *kn = reinterpret_cast<const __nv_bfloat16 *>(rope.k_norm_w);
    if (observe) {
        for (int i = threadIdx.x; i < 2 * KVCAL_HIST_BINS; i += blockDim.x)
            (&shist[0][0])[i] = 0u;
        for (int i = threadIdx.x; i < 2 * ROPE_MAX_HEAD_DIM; i += blockDim.x)
            (&smax[0][0])[i] = 0u;
        __syncthreads();
    }
    unsigned kmax[2 * P], vmax[2 * P];
#pragma unroll
    for (int i = 0; i < 2 * P; i++)
        kmax[i] = vmax[i] = 0u;

    const int t0 = blockIdx.x * ROPE_TOKENS_PER_BLOCK;
    const int t1 = min(tokens, t0 + ROPE_TOKENS_PER_BLOCK);
    for (int t = t0 + warp; t < t1; t += ROPE_WARPS) {
        const int p = pos[t];
        if (p < 0)
            continue;
        float cs[P], sn[P];
#pragma unroll
        for (int i = 0; i < P; i++) {
            const int j = lane + 32 * i;
            cs[i] = 1.0f;
            sn[i] = 0.0f;
            if (j < pairs && 2 * j < rope.rot_dim)
                sincosf((float)p * rope.inv_freq[j], &sn[i], &cs[i]);
        }
        __nv_bfloat16 *base = qkv + (int64_t)t * token_stride;
        // v (observed only), loaded first so that it is in flight with q and k
        float vals[2 * P];
        const __nv_bfloat16 *vrow = base + (int64_t)(n_heads + n_kv_heads + g) * head_dim;
#pragma unroll
        for (int i = 0; i < P; i++) {
            const int j = lane + 32 * i;
            vals[2 * i] = vals[2 * i + 1] = 0.0f;
            if (observe && j < pairs) {
                vals[2 * i] = __bfloat162float(vrow[2 * j]);
                vals[2 * i + 1] = __bfloat162float(vrow[2 * j + 1]);
            }
        }
        // rows of this token: the group's q heads, then k; ROWS loaded before any is
        // stored
        const int rows = group + 1;
        for (int r0 = 0; r0 < rows; r0 += ROPE_ROWS_IN_FLIGHT) {
            float x[ROPE_ROWS_IN_FLIGHT][2 * P];
#pragma unroll
            for (int rr = 0; rr < ROPE_ROWS_IN_FLIGHT; rr++) {
                const int r = r0 + rr;
                const int head = r < group ? g * group + r : n_heads + g;
                if (r < rows)
                    load_row<P>(base + (int64_t)head * head_dim, lane, pairs,
                                rope.rot_dim, rope.interleaved, x[rr]);
            }
#pragma unroll
            for (int rr = 0; rr < ROPE_ROWS_IN_FLIGHT; rr++) {
                const int r = r0 + rr;
                const int head = r < group ? g * group + r : n_heads + g;
                if (r >= rows)
                    break;
                rotate_row<P>(base + (int64_t)head * head_dim, lane, pairs, head_dim,
                              rope.rot_dim, rope.interleaved, cs, sn, r < group ? qn : kn,
                              rope.norm_eps, x[rr]);
                if (r == group && observe)
                    observe_row<P>(x[rr], kmax, shist[KVCAL_K], lane, pairs);
            }
        }
        if (observe)
            observe_row<P>(vals, vmax, shist[KVCAL_V], lane, pairs);
    }
    if (!observe)
        return;

        // --- fold the block's statistics into the layer's ---
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int j = lane + 32 * i;
        if (j < pairs) {
            const int2 c = pair_channels(j, rope.rot_dim, rope.interleaved);
            atomicMax(&smax[KVCAL_K][c.x], kmax[2 * i]);
            atomicMax(&smax[KVCAL_K][c.y], kmax[2 * i + 1]);
            atomicMax(&smax[KVCAL_V][2 * j], vmax[2 * i]);
            atomicMax(&smax[KVCAL_V][2 * j + 1], vmax[2 * i + 1]);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * KVCAL_HIST_BINS; i += blockDim.x) {
        const int kv = i / KVCAL_HIST_BINS, b = i - kv * KVCAL_HIST_BINS;
        const unsigned n = shist[kv][b];
        if (n)
            atomicAdd(reinterpret_cast<unsigned long long *>(obs.hist[kv]) +
                          (int64_t)g * KVCAL_HIST_BINS + b,
                      (unsigned long long)n);
    }
    for (int i = threadIdx.x; i < 2 * head_dim; i += blockDim.x) {
        const int kv = i / head_dim, c = i - kv * head_dim;
        const unsigned m = smax[kv][c];
        if (m)
            atomicMax(reinterpret_cast<unsigned *>(obs.absmax[kv]) +
                          (int64_t)g * head_dim + c,
                      m);
    }
    if (warp < 2) {
        unsigned m = 0u;
        for (int c = lane; c < head_dim; c += 32)
            m = max(m, smax[warp][c]);
        for (int o = 16; o > 0; o >>= 1)
            m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0 && m)
            atomicMax(reinterpret_cast<unsigned *>(obs.batch_absmax[warp]) + g, m);
    }
}

extern "C" kvcal_status
kvcal_rope_observe_launch(kvcal_bf16 *qkv, int64_t token_stride, const int32_t *pos,
                          int tokens, int n_heads, int n_kv_heads, int head_dim,
                          const kvcal_rope_cfg *rope, const kvcal_kv_observer *obs,
                          cudaStream_t stream)
{
    if (!qkv || !pos || !rope || !rope->inv_freq || tokens < 0 || n_kv_heads <= 0 ||
        n_heads <= 0 || n_heads % n_kv_heads != 0 ||
        token_stride < (int64_t)(n_heads + 2 * n_kv_heads) * head_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: %d heads, %d kv heads, token stride %lld: need "
                          "buffers, n_heads a multiple of n_kv_heads and a stride that "
                          "holds q, k and v",
                          n_heads, n_kv_heads, (long long)token_stride);
    if (head_dim <= 0 || head_dim % 2 || head_dim > ROPE_MAX_HEAD_DIM)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "rope_observe: head_dim %d: the CUDA backend supports even "
                          "head_dim up to %d",
                          head_dim, ROPE_MAX_HEAD_DIM);
    if (rope->rot_dim < 2 || rope->rot_dim % 2 || rope->rot_dim > head_dim)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "rope_observe: rot_dim %d: must be even and in [2, head_dim %d]",
            rope->rot_dim, head_dim);
    if (obs && (!obs->absmax[0] || !obs->absmax[1] || !obs->hist[0] || !obs->hist[1] ||
                !obs->batch_absmax[0] || !obs->batch_absmax[1]))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: observer with a NULL array: set all six or pass "
                          "no observer");
    if (tokens == 0)
        return KVCAL_OK;
    kvcal_kv_observer o;
    memset(&o, 0, sizeof o);
    if (obs)
        o = *obs;
    const dim3 grid((tokens + ROPE_TOKENS_PER_BLOCK - 1) / ROPE_TOKENS_PER_BLOCK,
                    n_kv_heads);
    auto *x = reinterpret_cast<__nv_bfloat16 *>(qkv);
    const int pairs = head_dim / 2;
    if (pairs <= 32)
        rope_observe_kernel<1><<<grid, ROPE_WARPS * 32, 0, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    else if (pairs <= 64)
        rope_observe_kernel<2><<<grid, ROPE_WARPS * 32, 0, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    else
        rope_observe_kernel<4><<<grid, ROPE_WARPS * 32, 0, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    KVCAL_CUDA_CHECK_LAUNCH("rope_observe_kernel");
    return KVCAL_OK;
}
