/* kernels/cuda/rope_observe.cu: per-head q/k RMSNorm + RoPE of q and k, fused
 * with the K/V observer, in one pass over the fused QKV projection output.
 * Two kernels (kvcal_rope_observe_launch_version in ops.h):
 *
 * Version 1, portable (any even head_dim up to 256). Grid (token chunks, kv
 * heads). A block owns one kv head g for a chunk of tokens: it rotates the q
 * heads of g's group and k head g, and observes k and v head g. A warp
 * handles one token at a time; lane l owns the rotation pairs l, l + 32, ...
 * of a head, so each lane keeps the running |x| max of its channels in
 * registers.
 *
 * Version 2, vectorised (head_dim and rot_dim multiples of 16). A lane owns a
 * slot of 16 channels of a head row (8 rotation pairs: channels 8s..8s+7 and
 * their partners half + 8s.., or 16s..16s+15 when pairs are adjacent or past
 * rot_dim), moved by two 16-byte loads and stores. A warp handles one token
 * for R = 32 / SP kv heads (SP = head_dim / 16 rounded up to a power of two
 * lanes per head row): each lane group rotates its kv head's q heads and k
 * head and observes its k and v heads. sin/cos of a (token, pair) are
 * computed once per warp, by one of the R lanes that share the pair, and
 * handed to the others by shuffles. A block has 8 warps, or 16 where the
 * grid has no more blocks than the GPU has SMs (VEC_WARPS_WIDE). The block's
 * histogram holds two 16-bit counts per word (a block sees at most 128
 * tokens x 256 channels of a head, < 65536), so 8 kv heads fit in shared
 * memory.
 *
 * Where the observer has q_absmax, both also keep each query head's max |q|
 * (as rotated and stored): a lane's max of its values of the row, one
 * shared atomicMax per lane and row, one global atomicMax per query head and
 * block. It reads no byte the rotation does not already hold in registers.
 *
 * Both build the |x| histogram in shared memory and add it to the global
 * counts once per block; absmax reaches global memory by atomicMax on the
 * float bits (|x| >= 0, so integer order is float order, and a NaN, whose
 * bits are above +inf's, wins and surfaces). The norm and the rotation
 * round to bf16 where transformers and vLLM round (kernels/cuda/bf16_round.cuh);
 * cos and sin are multiplied by the attention factor (yarn) before they are
 * rounded, as transformers scales its cos/sin tables. */
#include <cuda_bf16.h>

#include "core/hist_rule.h"
#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

// cos and sin of position p at frequency inv_freq, times the attention factor
// (yarn; 1 otherwise), rounded to bf16 as transformers' cos/sin tables are.
static __device__ __forceinline__ void rope_cos_sin(int p, float inv_freq, float factor,
                                                    float *cs, float *sn)
{
    sincosf((float)p * inv_freq, sn, cs);
    *sn = kvcal_rbf(*sn * factor);
    *cs = kvcal_rbf(*cs * factor);
}

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

/* A value x of a row whose RMS scale is r, times its norm weight w: x r
 * rounded to bf16, then times w rounded (Llama's arithmetic); with an
 * offset (Gemma's and Qwen3-Next's 1 + w), x r (w + off) in fp32 rounded
 * once, as those models' norms compute it. */
static __device__ __forceinline__ float norm_value(float x, float r, float w, float off)
{
    return off != 0.0f ? kvcal_rbf(x * r * (w + off)) : kvcal_rbf(kvcal_rbf(x * r) * w);
}

/* Optional RMSNorm and the rotation of a loaded row, stored back in place;
 * x[] becomes the stored (bf16-rounded) values, for the observer. */
template <int P>
static __device__ __forceinline__ void
rotate_row(__nv_bfloat16 *row, int lane, int pairs, int head_dim, int rot_dim,
           int interleaved, const float *cs, const float *sn, const __nv_bfloat16 *norm_w,
           float eps, float off, float x[2 * P])
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
                a = norm_value(a, r, __bfloat162float(norm_w[c.x]), off);
                b = norm_value(b, r, __bfloat162float(norm_w[c.y]), off);
            }
            if (2 * j < rot_dim)
                kvcal_rope_pair_bf16(a, b, cs[i], sn[i]);
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
    extern __shared__ unsigned sq[]; // (group) the block's max |q| bits, obs.q_absmax set
    const bool observe_q = observe && obs.q_absmax;
    const int g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int pairs = head_dim / 2, group = n_heads / n_kv_heads;
    const auto *qn = reinterpret_cast<const __nv_bfloat16 *>(rope.q_norm_w);
    const auto *kn = reinterpret_cast<const __nv_bfloat16 *>(rope.k_norm_w);
    if (observe) {
        for (int i = threadIdx.x; i < 2 * KVCAL_HIST_BINS; i += blockDim.x)
            (&shist[0][0])[i] = 0u;
        for (int i = threadIdx.x; i < 2 * ROPE_MAX_HEAD_DIM; i += blockDim.x)
            (&smax[0][0])[i] = 0u;
        for (int i = threadIdx.x; observe_q && i < group; i += blockDim.x)
            sq[i] = 0u;
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
            if (j < pairs && 2 * j < rope.rot_dim) {
                rope_cos_sin(p, rope.inv_freq[j], rope.attention_factor, &cs[i], &sn[i]);
            }
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
                              rope.norm_eps, rope.norm_offset, x[rr]);
                if (r == group && observe)
                    observe_row<P>(x[rr], kmax, shist[KVCAL_K], lane, pairs);
                if (r < group && observe_q) {
                    unsigned m = 0u; /* the lane's unused pairs hold 0 */
#pragma unroll
                    for (int i = 0; i < 2 * P; i++)
                        m = max(m, __float_as_uint(x[rr][i]) & 0x7fffffffu);
                    atomicMax(&sq[r], m);
                }
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
    for (int i = threadIdx.x; observe_q && i < group; i += blockDim.x)
        if (sq[i])
            atomicMax(reinterpret_cast<unsigned *>(obs.q_absmax) + (int64_t)g * group + i,
                      sq[i]);
}

// --- version 2: 16-byte accesses, sin/cos shared across the kv heads of a warp ---

/* A block's warps: 8, two blocks an SM, where the grid has more blocks
 * than the GPU has SMs; 16, one block an SM, where it has no more (a model
 * of few kv heads: one grid row holds them all), so that an SM keeps twice
 * the rows in flight without more blocks, each of which zeroes and flushes
 * its histograms. A block takes up to VEC_TOKENS_PER_BLOCK tokens: fewer
 * where that spreads the tokens over every SM (vec_tiling). */
enum {
    VEC_WARPS = 8,
    VEC_WARPS_WIDE = 16,
    VEC_TOKENS_PER_BLOCK = 128,
    VEC_MAX_GROUPS = 8,
    VEC_Q_ROWS = 4,
    HIST_WORDS = KVCAL_HIST_BINS / 2
};

static_assert(KVCAL_HIST_BINS % 2 == 0, "two 16-bit histogram counts per word");
static_assert(VEC_TOKENS_PER_BLOCK * ROPE_MAX_HEAD_DIM < 65536,
              "a block's count of one bin of one head fits in 16 bits");

/* 16 bf16 channels: two 16-byte chunks. */
struct vec16 {
    uint4 lo, hi;
};

static __device__ __forceinline__ vec16 load16(const __nv_bfloat16 *a,
                                               const __nv_bfloat16 *b)
{
    return {*reinterpret_cast<const uint4 *>(a), *reinterpret_cast<const uint4 *>(b)};
}

/* The 16 channels as bf16x2 words: w[i] holds channels 2i and 2i + 1. */
static __device__ __forceinline__ void words16(const vec16 &v, unsigned w[8])
{
    w[0] = v.lo.x, w[1] = v.lo.y, w[2] = v.lo.z, w[3] = v.lo.w;
    w[4] = v.hi.x, w[5] = v.hi.y, w[6] = v.hi.z, w[7] = v.hi.w;
}

static __device__ __forceinline__ void unpack_words(const unsigned w[8], float x[16])
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

static __device__ __forceinline__ void unpack16(const vec16 &v, float x[16])
{
    unsigned w[8];
    words16(v, w);
    unpack_words(w, x);
}

/* Stores the 16 channels' words, 0..7 at a and 8..15 at b. */
static __device__ __forceinline__ void store_words(__nv_bfloat16 *a, __nv_bfloat16 *b,
                                                   const unsigned w[8], bool active)
{
    if (active) {
        *reinterpret_cast<uint4 *>(a) = make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4 *>(b) = make_uint4(w[4], w[5], w[6], w[7]);
    }
}

static __device__ __forceinline__ __nv_bfloat162 bf2(unsigned w)
{
    return *reinterpret_cast<const __nv_bfloat162 *>(&w);
}

static __device__ __forceinline__ unsigned bits2(__nv_bfloat162 h)
{
    return *reinterpret_cast<const unsigned *>(&h);
}

/* Optional RMSNorm over the head row (its SP lanes; weights norm_w (head_dim)
 * in global memory or NULL) and the rotation of the lane's 8 pairs:
 * (channel k, k + 8) or, interleaved, (2k, 2k + 1); on the channels' bf16x2
 * words (words16), in place. The norm's x r is rounded to bf16, then its
 * product with the weight, two bf16 values, is one bf16x2 multiply (exact
 * in fp32, so rounded once: norm_value's arithmetic); the (1 + w) norms
 * take norm_value. The rotation by the pairs' cos and sin, (c2, s2)[j] for
 * pairs 2j and 2j + 1, in bf16x2 arithmetic. */
template <int SP>
static __device__ __forceinline__ void
rotate16(unsigned w[8], const __nv_bfloat162 c2[4], const __nv_bfloat162 s2[4],
         bool rotated, int interleaved, const __nv_bfloat16 *norm_w, int c0, int c1,
         bool active, int head_dim, float eps, float off)
{
    if (norm_w) {
        float x[16], ss = 0.0f;
        unpack_words(w, x);
#pragma unroll
        for (int i = 0; i < 16; i++)
            ss += x[i] * x[i];
#pragma unroll
        for (int o = SP / 2; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = rsqrtf(ss / (float)head_dim + eps);
        unsigned nw[8];
        words16(active ? load16(norm_w + c0, norm_w + c1) : vec16{}, nw);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (off != 0.0f) {
                const float2 f = __bfloat1622float2(bf2(nw[i]));
                w[i] =
                    bits2(__floats2bfloat162_rn(norm_value(x[2 * i], r, f.x, off),
                                                norm_value(x[2 * i + 1], r, f.y, off)));
            } else {
                w[i] = bits2(__hmul2_rn(
                    __floats2bfloat162_rn(x[2 * i] * r, x[2 * i + 1] * r), bf2(nw[i])));
            }
        }
    }
    if (!rotated)
        return;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (interleaved) { // pairs (4j, 4j + 1), (4j + 2, 4j + 3): words 2j, 2j + 1
            __nv_bfloat162 a = bf2(__byte_perm(w[2 * j], w[2 * j + 1], 0x5410)),
                           b = bf2(__byte_perm(w[2 * j], w[2 * j + 1], 0x7632));
            kvcal_rope_pairs2_bf16x2(a, b, c2[j], s2[j]);
            w[2 * j] = __byte_perm(bits2(a), bits2(b), 0x5410);
            w[2 * j + 1] = __byte_perm(bits2(a), bits2(b), 0x7632);
        } else { // pairs (2j, 2j + 8), (2j + 1, 2j + 9): words j, j + 4
            __nv_bfloat162 a = bf2(w[j]), b = bf2(w[j + 4]);
            kvcal_rope_pairs2_bf16x2(a, b, c2[j], s2[j]);
            w[j] = bits2(a);
            w[j + 4] = bits2(b);
        }
    }
}

/* Folds 16 bf16 values (as floats) into the lane's running max m (|x| as
 * bf16 bits, two per word: the order of non-negative bf16 is that of their
 * bits, and a NaN wins) and the block's 16-bit-pair histogram of one head. */
static __device__ __forceinline__ void observe16(const float x[16], unsigned m[8],
                                                 unsigned *hist_words)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned lo = __float_as_uint(x[2 * i]) >> 16;
        const unsigned hi = __float_as_uint(x[2 * i + 1]) & 0xffff0000u;
        m[i] = __vmaxu2(m[i], (lo | hi) & 0x7fff7fffu);
    }
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int b = kvcal_hist_bin(fabsf(x[i]));
        atomicAdd(&hist_words[b >> 1], 1u << ((b & 1) << 4));
    }
}

/* Element i (0..15) of a packed running max, as float bits. */
static __device__ __forceinline__ unsigned max_bits(const unsigned m[8], int i)
{
    return i & 1 ? m[i >> 1] & 0xffff0000u : m[i >> 1] << 16;
}

template <int SP, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 16 / WARPS)
    rope_observe_vec_kernel(__nv_bfloat16 *__restrict__ qkv, // (tokens, token_stride)
                            int64_t token_stride,
                            const int32_t *__restrict__ pos, // (tokens)
                            int tokens, int n_heads, int n_kv_heads, int head_dim,
                            int groups, int block_tokens, kvcal_rope_cfg rope,
                            kvcal_kv_observer obs, int observe)
{
    constexpr int R = 32 / SP;          // lane groups of a warp, one kv head each
    constexpr int NI = (8 + R - 1) / R; // sin/cos a lane computes per token
    extern __shared__ unsigned vec_smem[];
    unsigned *shist = vec_smem;                          // (2, groups, HIST_WORDS)
    unsigned *smax = vec_smem + 2 * groups * HIST_WORDS; // (2, groups, head_dim)
    unsigned *sq = smax + 2 * groups * head_dim;         // (groups, group) max |q| bits
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r = lane / SP, s = lane % SP;
    const int g = blockIdx.y * groups + r, group = n_heads / n_kv_heads;
    const bool observe_q = observe && obs.q_absmax;
    const int half = rope.rot_dim / 2;
    const bool active = s < head_dim / 16 && r < groups && g < n_kv_heads;
    const bool rotated = s < rope.rot_dim / 16;
    // the lane's two chunks of 8 channels in a q or k row, and in a v row
    const int c0 = rotated && !rope.interleaved ? 8 * s : 16 * s;
    const int c1 = rotated && !rope.interleaved ? half + 8 * s : 16 * s + 8;
    if (observe) {
        for (int i = threadIdx.x;
             i < 2 * groups * (HIST_WORDS + head_dim) + (observe_q ? groups * group : 0);
             i += blockDim.x)
            vec_smem[i] = 0u;
        __syncthreads();
    }
    // pairs 8s + k this lane computes sin/cos for: k = r, r + R, ...
    float inv[NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int k = r + R * i;
        inv[i] = rotated && k < 8 ? rope.inv_freq[8 * s + k] : 0.0f;
    }
    const __nv_bfloat16 *qn = reinterpret_cast<const __nv_bfloat16 *>(rope.q_norm_w);
    const __nv_bfloat16 *kn = reinterpret_cast<const __nv_bfloat16 *>(rope.k_norm_w);
    unsigned kmax[8], vmax[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        kmax[i] = vmax[i] = 0u;
    unsigned *khist = shist + (KVCAL_K * groups + r) * HIST_WORDS;
    unsigned *vhist = shist + (KVCAL_V * groups + r) * HIST_WORDS;

    const int t0 = blockIdx.x * block_tokens;
    const int t1 = min(tokens, t0 + block_tokens);
    for (int t = t0 + warp; t < t1; t += WARPS) {
        const int p = pos[t];
        if (p < 0)
            continue;
        __nv_bfloat16 *base = qkv + (int64_t)t * token_stride;
        __nv_bfloat16 *krow = base + (int64_t)(n_heads + g) * head_dim;
        const __nv_bfloat16 *vrow = base + (int64_t)(n_heads + n_kv_heads + g) * head_dim;
        const vec16 kx = active ? load16(krow + c0, krow + c1) : vec16{};
        const vec16 vx =
            active && observe ? load16(vrow + 16 * s, vrow + 16 * s + 8) : vec16{};
        float mc[NI], ms[NI], cs[8], sn[8];
#pragma unroll
        for (int i = 0; i < NI; i++) {
            rope_cos_sin(p, inv[i], rope.attention_factor, &mc[i], &ms[i]);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int src = (k % R) * SP + s;
            cs[k] = __shfl_sync(0xffffffffu, mc[k / R], src);
            sn[k] = __shfl_sync(0xffffffffu, ms[k / R], src);
        }
        __nv_bfloat162 c2[4], s2[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            c2[j] = __floats2bfloat162_rn(cs[2 * j], cs[2 * j + 1]);
            s2[j] = __floats2bfloat162_rn(sn[2 * j], sn[2 * j + 1]);
        }
        for (int q0 = 0; q0 == 0 || q0 < group; q0 += VEC_Q_ROWS) { // k at q0 0
            vec16 qx[VEC_Q_ROWS];
#pragma unroll
            for (int i = 0; i < VEC_Q_ROWS; i++) {
                const __nv_bfloat16 *row =
                    base + (int64_t)(g * group + q0 + i) * head_dim;
                qx[i] = active && q0 + i < group ? load16(row + c0, row + c1) : vec16{};
            }
            if (q0 == 0) {
                unsigned w[8];
                words16(kx, w);
                rotate16<SP>(w, c2, s2, rotated, rope.interleaved, kn, c0, c1, active,
                             head_dim, rope.norm_eps, rope.norm_offset);
                store_words(krow + c0, krow + c1, w, active);
                if (observe && active) {
                    float x[16];
                    unpack_words(w, x);
                    observe16(x, kmax, khist);
                    unpack16(vx, x);
                    observe16(x, vmax, vhist);
                }
            }
#pragma unroll
            for (int i = 0; i < VEC_Q_ROWS; i++) {
                if (q0 + i >= group)
                    break;
                __nv_bfloat16 *row = base + (int64_t)(g * group + q0 + i) * head_dim;
                unsigned w[8];
                words16(qx[i], w);
                rotate16<SP>(w, c2, s2, rotated, rope.interleaved, qn, c0, c1, active,
                             head_dim, rope.norm_eps, rope.norm_offset);
                store_words(row + c0, row + c1, w, active);
                if (observe_q && active) { // max |q| as float bits
                    unsigned m = 0u;
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        m = max(m, max((w[k] << 16) & 0x7fffffffu, w[k] & 0x7fff0000u));
                    atomicMax(&sq[r * group + q0 + i], m);
                }
            }
        }
    }
    if (!observe)
        return;

    // --- fold the block's statistics into the layer's ---
    if (active)
#pragma unroll
        for (int i = 0; i < 16; i++) {
            atomicMax(
                &smax[(KVCAL_K * groups + r) * head_dim + (i < 8 ? c0 + i : c1 + i - 8)],
                max_bits(kmax, i));
            atomicMax(&smax[(KVCAL_V * groups + r) * head_dim + 16 * s + i],
                      max_bits(vmax, i));
        }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * groups * HIST_WORDS; i += blockDim.x) {
        const int kv = i / (groups * HIST_WORDS), rest = i - kv * groups * HIST_WORDS;
        const int gg = blockIdx.y * groups + rest / HIST_WORDS, w = rest % HIST_WORDS;
        const unsigned n = shist[i];
        unsigned long long *h = reinterpret_cast<unsigned long long *>(obs.hist[kv]) +
                                (int64_t)gg * KVCAL_HIST_BINS + 2 * w;
        if (n & 0xffffu)
            atomicAdd(h, (unsigned long long)(n & 0xffffu));
        if (n >> 16)
            atomicAdd(h + 1, (unsigned long long)(n >> 16));
    }
    for (int i = threadIdx.x; i < 2 * groups * head_dim; i += blockDim.x) {
        const int kv = i / (groups * head_dim), rest = i - kv * groups * head_dim;
        const int gg = blockIdx.y * groups + rest / head_dim, c = rest % head_dim;
        const unsigned m = smax[i];
        if (m && gg < n_kv_heads)
            atomicMax(reinterpret_cast<unsigned *>(obs.absmax[kv]) +
                          (int64_t)gg * head_dim + c,
                      m);
    }
    for (int i = warp; i < 2 * groups; i += WARPS) {
        const int kv = i / groups, gg = blockIdx.y * groups + i % groups;
        unsigned m = 0u;
        for (int c = lane; c < head_dim; c += 32)
            m = max(m, smax[i * head_dim + c]);
        for (int o = 16; o > 0; o >>= 1)
            m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0 && m && gg < n_kv_heads)
            atomicMax(reinterpret_cast<unsigned *>(obs.batch_absmax[kv]) + gg, m);
    }
    for (int i = threadIdx.x; observe_q && i < groups * group; i += blockDim.x) {
        const int gg = blockIdx.y * groups + i / group;
        if (sq[i] && gg < n_kv_heads)
            atomicMax(reinterpret_cast<unsigned *>(obs.q_absmax) + (int64_t)gg * group +
                          i % group,
                      sq[i]);
    }
}

/* Whether version 2 takes this shape and these pointers. */
static bool vec_supported(const kvcal_bf16 *qkv, int64_t token_stride, int head_dim,
                          const kvcal_rope_cfg *rope)
{
    const auto aligned = [](const void *p) { return (uintptr_t)p % 16 == 0; };
    return head_dim % 16 == 0 && rope->rot_dim % 16 == 0 && token_stride % 8 == 0 &&
           aligned(qkv) && aligned(rope->q_norm_w) && aligned(rope->k_norm_w);
}

/* The tokens a block takes (*block_tokens) over `rows` grid rows of kv heads
 * on `sms` SMs, and whether the blocks are wide (one an SM): where the
 * tokens fit one wide block an SM (two narrow ones) at up to
 * VEC_TOKENS_PER_BLOCK a block, each block takes an equal share, at least a
 * token a warp, so that every SM gets a block (at 16,384 tokens and 132
 * SMs, 125 a block: 132 blocks where 128 of 128 tokens left 4 SMs idle);
 * else VEC_TOKENS_PER_BLOCK, narrow. */
static bool vec_tiling(int tokens, int rows, int sms, int *block_tokens)
{
    for (int per_sm = 1; per_sm <= 2; per_sm++) {
        const int blocks = per_sm * sms / rows; /* a grid row's share */
        if (blocks > 0 && tokens <= (long long)VEC_TOKENS_PER_BLOCK * blocks) {
            const int warps = per_sm == 1 ? VEC_WARPS_WIDE : VEC_WARPS;
            *block_tokens = max((tokens + blocks - 1) / blocks, warps);
            *block_tokens = min(*block_tokens, (int)VEC_TOKENS_PER_BLOCK);
            return per_sm == 1;
        }
    }
    *block_tokens = VEC_TOKENS_PER_BLOCK;
    return false;
}

template <int SP, int WARPS>
static kvcal_status
queue_vec(dim3 grid, int block_tokens, size_t smem, __nv_bfloat16 *qkv,
          int64_t token_stride, const int32_t *pos, int tokens, int n_heads,
          int n_kv_heads, int head_dim, int groups, const kvcal_rope_cfg *rope,
          const kvcal_kv_observer &obs, bool observe, cudaStream_t stream)
{
    KVCAL_CUDA_TRY(cudaFuncSetAttribute(rope_observe_vec_kernel<SP, WARPS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    rope_observe_vec_kernel<SP, WARPS><<<grid, WARPS * 32, smem, stream>>>(
        qkv, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, groups,
        block_tokens, *rope, obs, observe);
    KVCAL_CUDA_CHECK_LAUNCH("rope_observe_vec_kernel");
    return KVCAL_OK;
}

template <int SP>
static kvcal_status
launch_vec(__nv_bfloat16 *qkv, int64_t token_stride, const int32_t *pos, int tokens,
           int n_heads, int n_kv_heads, int head_dim, const kvcal_rope_cfg *rope,
           const kvcal_kv_observer &obs, bool observe, cudaStream_t stream)
{
    const int groups = min(min(32 / SP, (int)VEC_MAX_GROUPS), n_kv_heads);
    const size_t q_words =
        observe && obs.q_absmax ? (size_t)groups * (n_heads / n_kv_heads) : 0;
    const size_t smem =
        observe
            ? (2 * (size_t)groups * (HIST_WORDS + head_dim) + q_words) * sizeof(unsigned)
            : 0;
    const int rows = (n_kv_heads + groups - 1) / groups;
    int dev = 0, sms = 0;
    KVCAL_CUDA_TRY(cudaGetDevice(&dev));
    KVCAL_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int block_tokens = 0;
    const bool wide = vec_tiling(tokens, rows, sms, &block_tokens);
    const dim3 grid((tokens + block_tokens - 1) / block_tokens, rows);
    if (wide)
        return queue_vec<SP, VEC_WARPS_WIDE>(grid, block_tokens, smem, qkv, token_stride,
                                             pos, tokens, n_heads, n_kv_heads, head_dim,
                                             groups, rope, obs, observe, stream);
    return queue_vec<SP, VEC_WARPS>(grid, block_tokens, smem, qkv, token_stride, pos,
                                    tokens, n_heads, n_kv_heads, head_dim, groups, rope,
                                    obs, observe, stream);
}

extern "C" kvcal_status kvcal_rope_observe_launch_version(
    int version, kvcal_bf16 *qkv, int64_t token_stride, const int32_t *pos, int tokens,
    int n_heads, int n_kv_heads, int head_dim, const kvcal_rope_cfg *rope,
    const kvcal_kv_observer *obs, cudaStream_t stream)
{
    if (version < 1 || version > KVCAL_ROPE_VERSIONS)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: version %d: versions are 1 .. %d", version,
                          KVCAL_ROPE_VERSIONS);
    if (!qkv || !pos || !rope || !rope->inv_freq || tokens < 0 || n_kv_heads <= 0 ||
        n_heads < 0 || n_heads % n_kv_heads != 0 ||
        token_stride < (int64_t)(n_heads + 2 * n_kv_heads) * head_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: %d heads, %d kv heads, token stride %lld: need "
                          "buffers, n_heads a multiple of n_kv_heads (0: K and V only) "
                          "and a stride that holds q, k and v",
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
    if (!(rope->attention_factor > 0.0f && rope->attention_factor < INFINITY))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: attention factor %g: must be finite and > 0 "
                          "(1 without yarn)",
                          (double)rope->attention_factor);
    if (obs && (!obs->absmax[0] || !obs->absmax[1] || !obs->hist[0] || !obs->hist[1] ||
                !obs->batch_absmax[0] || !obs->batch_absmax[1]))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "rope_observe: observer with a NULL array: set all six or pass "
                          "no observer");
    if (version == 2 && !vec_supported(qkv, token_stride, head_dim, rope))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "rope_observe version 2: head_dim %d, rot_dim %d, token stride "
                          "%lld: needs multiples of 16, 16 and 8 and 16-byte aligned "
                          "buffers; use version 1",
                          head_dim, rope->rot_dim, (long long)token_stride);
    if (tokens == 0)
        return KVCAL_OK;
    kvcal_kv_observer o;
    memset(&o, 0, sizeof o);
    if (obs)
        o = *obs;
    auto *x = reinterpret_cast<__nv_bfloat16 *>(qkv);
    if (version == 2) {
        const int slots = head_dim / 16;
        if (slots <= 1)
            return launch_vec<1>(x, token_stride, pos, tokens, n_heads, n_kv_heads,
                                 head_dim, rope, o, obs != NULL, stream);
        if (slots <= 2)
            return launch_vec<2>(x, token_stride, pos, tokens, n_heads, n_kv_heads,
                                 head_dim, rope, o, obs != NULL, stream);
        if (slots <= 4)
            return launch_vec<4>(x, token_stride, pos, tokens, n_heads, n_kv_heads,
                                 head_dim, rope, o, obs != NULL, stream);
        if (slots <= 8)
            return launch_vec<8>(x, token_stride, pos, tokens, n_heads, n_kv_heads,
                                 head_dim, rope, o, obs != NULL, stream);
        return launch_vec<16>(x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim,
                              rope, o, obs != NULL, stream);
    }
    const dim3 grid((tokens + ROPE_TOKENS_PER_BLOCK - 1) / ROPE_TOKENS_PER_BLOCK,
                    n_kv_heads);
    const int pairs = head_dim / 2;
    const size_t q_smem =
        obs && obs->q_absmax ? (size_t)(n_heads / n_kv_heads) * sizeof(unsigned) : 0;
    if (pairs <= 32)
        rope_observe_kernel<1><<<grid, ROPE_WARPS * 32, q_smem, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    else if (pairs <= 64)
        rope_observe_kernel<2><<<grid, ROPE_WARPS * 32, q_smem, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    else
        rope_observe_kernel<4><<<grid, ROPE_WARPS * 32, q_smem, stream>>>(
            x, token_stride, pos, tokens, n_heads, n_kv_heads, head_dim, *rope, o,
            obs != NULL);
    KVCAL_CUDA_CHECK_LAUNCH("rope_observe_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status
kvcal_rope_observe_launch(kvcal_bf16 *qkv, int64_t token_stride, const int32_t *pos,
                          int tokens, int n_heads, int n_kv_heads, int head_dim,
                          const kvcal_rope_cfg *rope, const kvcal_kv_observer *obs,
                          cudaStream_t stream)
{
    const int version = rope && vec_supported(qkv, token_stride, head_dim, rope) ? 2 : 1;
    return kvcal_rope_observe_launch_version(version, qkv, token_stride, pos, tokens,
                                             n_heads, n_kv_heads, head_dim, rope, obs,
                                             stream);
}
