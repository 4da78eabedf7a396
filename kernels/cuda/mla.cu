/* kernels/cuda/mla.cu: multi-head latent attention's kernels (kernels/cuda/mla.h).
 *
 * mla_latent_kernel: a warp per token, 8 warps a block over 32 tokens. Lane l
 * owns the latent's channels l, l + 32, ... (read into registers at once;
 * the RMSNorm's sum of squares a warp reduction) and the RoPE pairs l,
 * l + 32, ... of the entry's RoPE part and of each query head's (8 heads'
 * loads in flight at a time). The block folds what it stored into a shared
 * per-channel max (atomicMax on the float bits, no two lanes of a warp on
 * one channel) and a shared histogram (the lanes of a warp that share a bin
 * add their count with one atomic), and adds them to the layer's statistics
 * once, into K's and V's alike (an MLA layer caches one entry).
 * mla_latent_vec_kernel computes the same values with every access a
 * 16-byte unit (a token's loads in flight together, the per-channel
 * maxima in registers), where the sizes and rows allow it (DeepSeek's,
 * Kimi K2's: a latent of 512 and a RoPE part of 64).
 *
 * mla_expand_kernel: K's (its no-RoPE part from kv_b_proj's output, then
 * the token's shared RoPE part), K's RoPE part alone (rows of the RoPE
 * part, a K head apart) or V's output (padded with zeros to v_stride) as
 * one flat range of units, 16 bytes where sizes allow: each thread reads 4
 * units a block width apart, then writes them (every warp's accesses whole
 * lines, 4 loads a thread in flight; the RoPE part's rows of 64 values,
 * DeepSeek's, are a line each).
 *
 * mla_ds_roundtrip_kernel: a block of 128 threads per row, a thread per
 * channel of a 128-value tile: the tile's absmax by a block reduction, then
 * each value through e4m3 under the tile's scale (core/fp8.h). */
#include <cfloat>
#include <cuda_bf16.h>

#include "core/fp8.h"
#include "core/hist_rule.h"
#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/kv_words.cuh"
#include "kernels/cuda/mla.h"

// --- the cache point ----------------------------------------------------------------

/* The cache point's tiling; LATENT_CPL_*: the latent's channels a lane
 * holds, for kv_lora_rank up to 512 (DeepSeek's) or up to the entry's limit. */
enum {
    LATENT_WARPS = 8,
    LATENT_TOKENS_PER_BLOCK = 32,
    LATENT_Q_HEADS = 8,
    LATENT_CPL_SHORT = 16,
    LATENT_CPL_LONG = KVCAL_MLA_MAX_ENTRY / 32
};

/* Adds one to the block's shared histogram at bin b for each lane where on:
 * the lanes that share a bin add their count with one atomic (a warp's
 * values mostly fall in a few bins: an atomic a lane serialized on them).
 * Every lane of the warp calls it. */
static __device__ __forceinline__ void hist_add(unsigned *shist, int b, bool on)
{
    const unsigned same = __match_any_sync(0xffffffffu, on ? b : -1);
    if (on && (threadIdx.x & 31) == __ffs(same) - 1)
        atomicAdd(&shist[b], (unsigned)__popc(same));
}

/* |x| as bits (|x| >= 0: integer order is float order, and a NaN, whose
 * bits are above +inf's, wins and surfaces), into the warp's histogram and
 * the lane's running max. */
static __device__ __forceinline__ unsigned fold(float x, bool on, unsigned *shist,
                                                unsigned *lane_max)
{
    const float a = fabsf(x);
    const unsigned bits = on ? __float_as_uint(a) : 0u;
    hist_add(shist, kvcal_hist_bin(a), on);
    *lane_max = max(*lane_max, bits);
    return bits;
}

/* RoPE pair j of a row, (a, b) read from it: rotated by cos and sin (the
 * factor's products rounded to bf16, as transformers' tables) in bf16
 * arithmetic, stored, and left in a and b. */
static __device__ __forceinline__ void rotate_store(__nv_bfloat16 *row, int j, float &a,
                                                    float &b, float cs, float sn)
{
    kvcal_rope_pair_bf16(a, b, cs, sn);
    row[2 * j] = __float2bfloat16_rn(a);
    row[2 * j + 1] = __float2bfloat16_rn(b);
}

/* The block's statistics zeroed before its tokens (every thread calls it). */
static __device__ __forceinline__ void zero_block(unsigned *smax, unsigned *shist, int E)
{
    for (int i = threadIdx.x; i < E; i += blockDim.x)
        smax[i] = 0u;
    for (int i = threadIdx.x; i < KVCAL_HIST_BINS; i += blockDim.x)
        shist[i] = 0u;
    __syncthreads();
}

/* The block's statistics (smax, shist, each warp's max in lane_max) added to
 * the layer's, into K's and V's alike (an MLA layer caches one entry). */
static __device__ __forceinline__ void flush_block(const unsigned *smax,
                                                   const unsigned *shist, int E,
                                                   unsigned lane_max,
                                                   const kvcal_kv_observer &obs)
{
    for (int kv = 0; kv < 2; kv++) {
        for (int c = threadIdx.x; c < E; c += blockDim.x)
            if (smax[c])
                atomicMax(reinterpret_cast<unsigned *>(obs.absmax[kv]) + c, smax[c]);
        for (int b = threadIdx.x; b < KVCAL_HIST_BINS; b += blockDim.x)
            if (shist[b])
                atomicAdd(reinterpret_cast<unsigned long long *>(obs.hist[kv]) + b,
                          (unsigned long long)shist[b]);
        if ((threadIdx.x & 31) == 0 && lane_max)
            atomicMax(reinterpret_cast<unsigned *>(obs.batch_absmax[kv]), lane_max);
    }
}

/* CPL >= ceil(kv_lora_rank / 32): the latent's channels a lane owns, held in
 * registers (the row read once, all its loads in flight together). */
template <int CPL>
__global__ void __launch_bounds__(LATENT_WARPS * 32, 4)
    mla_latent_kernel(__nv_bfloat16 *__restrict__ entry, // (tokens, entry_stride)
                      int64_t entry_stride,
                      __nv_bfloat16 *__restrict__ q, // (tokens, q_stride) or NULL
                      int64_t q_stride, const int32_t *__restrict__ pos, int tokens,
                      kvcal_mla_cfg cfg, kvcal_kv_observer obs, int observe)
{
    __shared__ unsigned smax[KVCAL_MLA_MAX_ENTRY];
    __shared__ unsigned shist[KVCAL_HIST_BINS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int L = cfg.kv_lora_rank, R = cfg.rope_dim, E = L + R;
    const auto *w = reinterpret_cast<const __nv_bfloat16 *>(cfg.norm_w);
    if (observe)
        zero_block(smax, shist, E);
    unsigned lane_max = 0u;
    const int t0 = blockIdx.x * LATENT_TOKENS_PER_BLOCK;
    const int t1 = min(tokens, t0 + LATENT_TOKENS_PER_BLOCK);
    for (int t = t0 + warp; t < t1; t += LATENT_WARPS) {
        __nv_bfloat16 *row = entry + (int64_t)t * entry_stride;
        float x[CPL];
#pragma unroll
        for (int i = 0; i < CPL; i++) {
            const int c = lane + 32 * i;
            x[i] = c < L ? __bfloat162float(row[c]) : 0.0f;
        }
        const int p = pos[t];
        if (p < 0)
            continue;
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < CPL; i++)
            if (lane + 32 * i < L)
                ss += x[i] * x[i];
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = rsqrtf(ss / (float)L + cfg.eps);
#pragma unroll
        for (int i = 0; i < CPL; i++) {
            const int c = lane + 32 * i;
            if (32 * i >= L)
                break;
            const bool on = c < L;
            const float y =
                on ? kvcal_rbf(kvcal_rbf(x[i] * r) * __bfloat162float(w[c])) : 0.0f;
            if (on)
                row[c] = __float2bfloat16_rn(y);
            if (observe) {
                const unsigned m = fold(y, on, shist, &lane_max);
                if (on)
                    atomicMax(&smax[c], m);
            }
        }
        __nv_bfloat16 *qrow = q ? q + (int64_t)t * q_stride + cfg.qk_dim - R : nullptr;
        for (int j0 = 0; j0 < R / 2; j0 += 32) {
            const int j = j0 + lane;
            const bool on = j < R / 2;
            const int c = L + 2 * j;
            float sn = 0.0f, cs = 0.0f, a = 0.0f, b = 0.0f;
            if (on) {
                a = __bfloat162float(row[c]);
                b = __bfloat162float(row[c + 1]);
                sincosf((float)p * cfg.inv_freq[j], &sn, &cs);
                sn = kvcal_rbf(sn * cfg.attention_factor);
                cs = kvcal_rbf(cs * cfg.attention_factor);
                rotate_store(row + L, j, a, b, cs, sn);
            }
            if (observe) {
                const unsigned ma = fold(a, on, shist, &lane_max);
                const unsigned mb = fold(b, on, shist, &lane_max);
                if (on) {
                    atomicMax(&smax[c], ma);
                    atomicMax(&smax[c + 1], mb);
                }
            }
            // the query's heads LATENT_Q_HEADS at a time: their loads in flight together
            for (int h0 = 0; qrow && on && h0 < cfg.n_heads; h0 += LATENT_Q_HEADS) {
                float qa[LATENT_Q_HEADS], qb[LATENT_Q_HEADS];
#pragma unroll
                for (int k = 0; k < LATENT_Q_HEADS; k++) {
                    const __nv_bfloat16 *qh = qrow + (int64_t)(h0 + k) * cfg.qk_dim;
                    const bool hk = h0 + k < cfg.n_heads;
                    qa[k] = hk ? __bfloat162float(qh[2 * j]) : 0.0f;
                    qb[k] = hk ? __bfloat162float(qh[2 * j + 1]) : 0.0f;
                }
#pragma unroll
                for (int k = 0; k < LATENT_Q_HEADS; k++)
                    if (h0 + k < cfg.n_heads)
                        rotate_store(qrow + (int64_t)(h0 + k) * cfg.qk_dim, j, qa[k],
                                     qb[k], cs, sn);
            }
        }
    }
    if (!observe)
        return;
    for (int o = 16; o > 0; o >>= 1)
        lane_max = max(lane_max, __shfl_xor_sync(0xffffffffu, lane_max, o));
    __syncthreads();
    flush_block(smax, shist, E, lane_max, obs);
}

// --- the cache point in 16-byte units ------------------------------------------------

/* The 16-byte form's tiling: LATENT_VEC_TOKENS_PER_BLOCK, a block's tokens
 * (8 a warp: each block zeroes and folds its statistics once);
 * LATENT_VEC_Q_UNITS, the query units (8 values of
 * one head's RoPE part) a lane holds at a time; LATENT_VEC_MAX_ROPE, the
 * RoPE parts it takes (a pair a lane for cos and sin, units that divide a
 * warp: 8, 16, 32 or 64 values); LATENT_VEC_UNITS_*: the latent's units a
 * lane holds, for kv_lora_rank up to 512 or up to the entry's limit. */
enum {
    LATENT_VEC_TOKENS_PER_BLOCK = 64,
    LATENT_VEC_Q_UNITS = 4,
    LATENT_VEC_MAX_ROPE = 64,
    LATENT_VEC_UNITS_SHORT = 2,
    LATENT_VEC_UNITS_LONG = KVCAL_MLA_MAX_ENTRY / 256
};

/* Rounds x to bf16 into a 16-byte word and leaves the rounded values in x. */
static __device__ __forceinline__ uint4 pack8(float x[8])
{
    uint32_t u[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
        u[i] = *reinterpret_cast<const uint32_t *>(&h);
    }
    unpack8<__nv_bfloat16>(make_uint4(u[0], u[1], u[2], u[3]), x);
    return make_uint4(u[0], u[1], u[2], u[3]);
}

/* The 4 interleaved RoPE pairs of a unit, rotated by the unit's cos and sin. */
static __device__ __forceinline__ void rotate8(float x[8], const float cs[4],
                                               const float sn[4])
{
#pragma unroll
    for (int m = 0; m < 4; m++)
        kvcal_rope_pair_bf16(x[2 * m], x[2 * m + 1], cs[m], sn[m]);
}

/* |x| of 8 stored values into the lane's running maxima (bits: a NaN wins)
 * and the block's histogram. */
static __device__ __forceinline__ void fold8(const float x[8], unsigned m[8],
                                             unsigned *shist)
{
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float a = fabsf(x[i]);
        m[i] = max(m[i], __float_as_uint(a));
        atomicAdd(&shist[kvcal_hist_bin(a)], 1u);
    }
}

/* The query units v0 + lane + 32 k (k < LATENT_VEC_Q_UNITS) of a token:
 * unit v is head v / ru's RoPE unit v % ru (= lane % ru: ru divides 32). */
static __device__ __forceinline__ __nv_bfloat16 *q_unit(__nv_bfloat16 *qrow, int v,
                                                        int ru, int qk_dim)
{
    return qrow + (int64_t)(v / ru) * qk_dim + 8 * (v % ru);
}

/* A warp a token, as mla_latent_kernel computes it, every access a 16-byte
 * unit: lane l owns the latent's units l, l + 32, ... (LU of them), the
 * entry's RoPE unit l (l < ru), and the query's units l + 32 k; the
 * token's loads (latent, RoPE part, the first LATENT_VEC_Q_UNITS query
 * units a lane) are in flight together. Lane j computes cos and sin of
 * pair j; a unit's 4 pairs take theirs by shuffles. The per-channel maxima
 * stay in the lane's registers (its channels are the same every token)
 * until the block folds them. */
template <int LU>
__global__ void __launch_bounds__(LATENT_WARPS * 32, 2)
    mla_latent_vec_kernel(__nv_bfloat16 *__restrict__ entry, int64_t entry_stride,
                          __nv_bfloat16 *__restrict__ q, int64_t q_stride,
                          const int32_t *__restrict__ pos, int tokens, kvcal_mla_cfg cfg,
                          kvcal_kv_observer obs, int observe)
{
    __shared__ unsigned smax[KVCAL_MLA_MAX_ENTRY];
    __shared__ unsigned shist[KVCAL_HIST_BINS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int L = cfg.kv_lora_rank, R = cfg.rope_dim, E = L + R;
    const int lu = L / 8, ru = R / 8, part = lane % ru;
    const int qu = q ? cfg.n_heads * ru : 0;
    const auto *w = reinterpret_cast<const __nv_bfloat16 *>(cfg.norm_w);
    if (observe)
        zero_block(smax, shist, E);
    float wv[LU][8];
#pragma unroll
    for (int i = 0; i < LU; i++) {
        const int u = lane + 32 * i;
        unpack8<__nv_bfloat16>(u < lu ? *reinterpret_cast<const uint4 *>(w + 8 * u)
                                      : make_uint4(0u, 0u, 0u, 0u),
                               wv[i]);
    }
    const float inv = lane < R / 2 ? cfg.inv_freq[lane] : 0.0f;
    unsigned mx[LU + 1][8] = {};
    const int t0 = blockIdx.x * LATENT_VEC_TOKENS_PER_BLOCK;
    const int t1 = min(tokens, t0 + LATENT_VEC_TOKENS_PER_BLOCK);
    for (int t = t0 + warp; t < t1; t += LATENT_WARPS) {
        __nv_bfloat16 *row = entry + (int64_t)t * entry_stride;
        __nv_bfloat16 *qrow = q ? q + (int64_t)t * q_stride + cfg.qk_dim - R : nullptr;
        uint4 ul[LU], ur = make_uint4(0u, 0u, 0u, 0u), uq[LATENT_VEC_Q_UNITS];
#pragma unroll
        for (int i = 0; i < LU; i++) {
            const int u = lane + 32 * i;
            ul[i] = u < lu ? *reinterpret_cast<const uint4 *>(row + 8 * u)
                           : make_uint4(0u, 0u, 0u, 0u);
        }
        if (lane < ru)
            ur = *reinterpret_cast<const uint4 *>(row + L + 8 * lane);
#pragma unroll
        for (int k = 0; k < LATENT_VEC_Q_UNITS; k++) {
            const int v = lane + 32 * k;
            uq[k] =
                v < qu ? *reinterpret_cast<const uint4 *>(q_unit(qrow, v, ru, cfg.qk_dim))
                       : make_uint4(0u, 0u, 0u, 0u);
        }
        const int p = pos[t];
        if (p < 0)
            continue;
        float x[LU][8], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < LU; i++) {
            unpack8<__nv_bfloat16>(ul[i], x[i]);
#pragma unroll
            for (int c = 0; c < 8; c++)
                ss += x[i][c] * x[i][c];
        }
        for (int o = 16; o > 0; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = rsqrtf(ss / (float)L + cfg.eps);
#pragma unroll
        for (int i = 0; i < LU; i++) {
            const int u = lane + 32 * i;
#pragma unroll
            for (int c = 0; c < 8; c++)
                x[i][c] = kvcal_rbf(x[i][c] * r) * wv[i][c];
            const uint4 out = pack8(x[i]);
            if (u < lu)
                *reinterpret_cast<uint4 *>(row + 8 * u) = out;
        }
        float cs, sn;
        sincosf((float)p * inv, &sn, &cs);
        sn = kvcal_rbf(sn * cfg.attention_factor);
        cs = kvcal_rbf(cs * cfg.attention_factor);
        float c4[4], s4[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            c4[m] = __shfl_sync(0xffffffffu, cs, 4 * part + m);
            s4[m] = __shfl_sync(0xffffffffu, sn, 4 * part + m);
        }
        float e[8];
        unpack8<__nv_bfloat16>(ur, e);
        rotate8(e, c4, s4);
        const uint4 er = pack8(e);
        if (lane < ru)
            *reinterpret_cast<uint4 *>(row + L + 8 * lane) = er;
        for (int v0 = 0; v0 < qu; v0 += 32 * LATENT_VEC_Q_UNITS) {
#pragma unroll
            for (int k = 0; k < LATENT_VEC_Q_UNITS && v0; k++) {
                const int v = v0 + lane + 32 * k;
                uq[k] = v < qu ? *reinterpret_cast<const uint4 *>(
                                     q_unit(qrow, v, ru, cfg.qk_dim))
                               : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int k = 0; k < LATENT_VEC_Q_UNITS; k++) {
                const int v = v0 + lane + 32 * k;
                float f[8];
                unpack8<__nv_bfloat16>(uq[k], f);
                rotate8(f, c4, s4);
                const uint4 out = pack8(f);
                if (v < qu)
                    *reinterpret_cast<uint4 *>(q_unit(qrow, v, ru, cfg.qk_dim)) = out;
            }
        }
        if (!observe)
            continue;
#pragma unroll
        for (int i = 0; i < LU; i++)
            if (lane + 32 * i < lu)
                fold8(x[i], mx[i], shist);
        if (lane < ru)
            fold8(e, mx[LU], shist);
    }
    if (!observe)
        return;
    unsigned lane_max = 0u;
#pragma unroll
    for (int i = 0; i <= LU; i++) {
        const int c0 = i < LU ? 8 * (lane + 32 * i) : L + 8 * lane;
        if (i < LU ? lane + 32 * i < lu : lane < ru)
#pragma unroll
            for (int c = 0; c < 8; c++) {
                lane_max = max(lane_max, mx[i][c]);
                if (mx[i][c])
                    atomicMax(&smax[c0 + c], mx[i][c]);
            }
    }
    for (int o = 16; o > 0; o >>= 1)
        lane_max = max(lane_max, __shfl_xor_sync(0xffffffffu, lane_max, o));
    __syncthreads();
    flush_block(smax, shist, E, lane_max, obs);
}

extern "C" kvcal_status kvcal_mla_latent_launch(kvcal_bf16 *entry, int64_t entry_stride,
                                                kvcal_bf16 *q, int64_t q_stride,
                                                const int32_t *pos, int tokens,
                                                const kvcal_mla_cfg *cfg,
                                                const kvcal_kv_observer *obs,
                                                cudaStream_t stream)
{
    const int E = cfg->kv_lora_rank + cfg->rope_dim;
    if (!entry || !pos || !cfg->norm_w || !cfg->inv_freq || tokens < 0 ||
        cfg->kv_lora_rank < 1 || cfg->rope_dim < 2 || cfg->rope_dim % 2 ||
        E > KVCAL_MLA_MAX_ENTRY || entry_stride < E ||
        (q && (cfg->n_heads < 1 || cfg->qk_dim < cfg->rope_dim ||
               q_stride < (int64_t)cfg->n_heads * cfg->qk_dim)) ||
        !(cfg->attention_factor > 0.0f) || isinf(cfg->attention_factor))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "mla_latent: %d tokens, latent %d + rope %d (stride %lld), %d "
                          "query heads of %d, attention factor %g: need buffers, an even "
                          "rope part, an entry of at most %d values and a factor > 0",
                          tokens, cfg->kv_lora_rank, cfg->rope_dim,
                          (long long)entry_stride, cfg->n_heads, cfg->qk_dim,
                          (double)cfg->attention_factor, KVCAL_MLA_MAX_ENTRY);
    if (!tokens)
        return KVCAL_OK;
    kvcal_kv_observer o = {};
    if (obs)
        o = *obs;
    const int blocks = (tokens + LATENT_TOKENS_PER_BLOCK - 1) / LATENT_TOKENS_PER_BLOCK,
              vec_blocks = (tokens + LATENT_VEC_TOKENS_PER_BLOCK - 1) /
                           LATENT_VEC_TOKENS_PER_BLOCK;
    auto *e = reinterpret_cast<__nv_bfloat16 *>(entry);
    auto *qq = reinterpret_cast<__nv_bfloat16 *>(q);
    const int R = cfg->rope_dim;
    const bool vec = cfg->kv_lora_rank % 8 == 0 && R % 8 == 0 &&
                     R <= LATENT_VEC_MAX_ROPE && 32 % (R / 8) == 0 &&
                     entry_stride % 8 == 0 &&
                     (!q || (q_stride % 8 == 0 && cfg->qk_dim % 8 == 0)) &&
                     ((uintptr_t)entry | (uintptr_t)q | (uintptr_t)cfg->norm_w) % 16 == 0;
    if (vec && cfg->kv_lora_rank <= 256 * LATENT_VEC_UNITS_SHORT)
        mla_latent_vec_kernel<LATENT_VEC_UNITS_SHORT>
            <<<vec_blocks, LATENT_WARPS * 32, 0, stream>>>(
                e, entry_stride, qq, q_stride, pos, tokens, *cfg, o, obs != NULL);
    else if (vec)
        mla_latent_vec_kernel<LATENT_VEC_UNITS_LONG>
            <<<vec_blocks, LATENT_WARPS * 32, 0, stream>>>(
                e, entry_stride, qq, q_stride, pos, tokens, *cfg, o, obs != NULL);
    else if (cfg->kv_lora_rank <= 32 * LATENT_CPL_SHORT)
        mla_latent_kernel<LATENT_CPL_SHORT><<<blocks, LATENT_WARPS * 32, 0, stream>>>(
            e, entry_stride, qq, q_stride, pos, tokens, *cfg, o, obs != NULL);
    else
        mla_latent_kernel<LATENT_CPL_LONG><<<blocks, LATENT_WARPS * 32, 0, stream>>>(
            e, entry_stride, qq, q_stride, pos, tokens, *cfg, o, obs != NULL);
    KVCAL_CUDA_CHECK_LAUNCH("mla_latent_kernel");
    return KVCAL_OK;
}

// --- the expansion into K and V --------------------------------------------------

enum { EXPAND_THREADS = 256, EXPAND_UNITS = 4 };

/* One output of the expansion: per token, n_heads rows of rw units, os
 * units apart in out (os = rw but where another launch writes between the
 * rows); unit r of head h of token t is a[(t * n_heads + h) * as + r] below
 * n0, then b[t * bs + r - n0] below n0 + n1 (the token's shared RoPE part),
 * then zero. units: the units written, tokens * n_heads * rw. */
template <typename T> struct expand_out {
    T *out;
    const T *a, *b;
    int64_t as, bs, units;
    int n0, n1, rw, os, n_heads;
};

/* i / d, in 32 bits where i fits them (small: the same for the whole grid). */
static __device__ __forceinline__ int64_t div_small(int64_t i, int d, bool small)
{
    return small ? (int64_t)((uint32_t)i / (uint32_t)d) : i / d;
}

/* A block copies EXPAND_THREADS * EXPAND_UNITS consecutive units of o:
 * each thread's EXPAND_UNITS, a block width apart, read together, then
 * written (every warp's loads and stores whole lines). Units of T: VEC bf16
 * values each. */
template <typename T>
__global__ void __launch_bounds__(EXPAND_THREADS) mla_expand_kernel(expand_out<T> o)
{
    const int64_t i0 =
        blockIdx.x * (int64_t)(EXPAND_THREADS * EXPAND_UNITS) + threadIdx.x;
    const bool small = o.units + EXPAND_THREADS * EXPAND_UNITS <= (int64_t)UINT32_MAX;
    // token t, head h and unit r of i0, then of each next unit a block width on
    const int64_t row = div_small(i0, o.rw, small);
    int64_t t = div_small(row, o.n_heads, small);
    int h = (int)(row - t * o.n_heads), r = (int)(i0 - row * o.rw);
    const int step_rows = EXPAND_THREADS / o.rw, step_r = EXPAND_THREADS % o.rw;
    const int step_t = step_rows / o.n_heads, step_h = step_rows % o.n_heads;
    T x[EXPAND_UNITS];
    int64_t at[EXPAND_UNITS]; // where each unit goes in o.out
#pragma unroll
    for (int u = 0; u < EXPAND_UNITS; u++) {
        x[u] = T{};
        at[u] = (t * o.n_heads + h) * o.os + r;
        if (i0 + (int64_t)u * EXPAND_THREADS < o.units) {
            if (r < o.n0)
                x[u] = o.a[(t * o.n_heads + h) * o.as + r];
            else if (r < o.n0 + o.n1)
                x[u] = o.b[t * o.bs + r - o.n0];
        }
        r += step_r;
        h += step_h + (r >= o.rw);
        r -= r >= o.rw ? o.rw : 0;
        t += step_t + (h >= o.n_heads);
        h -= h >= o.n_heads ? o.n_heads : 0;
    }
#pragma unroll
    for (int u = 0; u < EXPAND_UNITS; u++)
        if (i0 + (int64_t)u * EXPAND_THREADS < o.units)
            o.out[at[u]] = x[u];
}

/* Queues K's expansion (K's heads k_head values apart), then V's, in units
 * of T (VEC bf16 values each); rope_only: K's RoPE part alone (kvb and v
 * unused), its no-RoPE part left as it is. */
template <typename T, int VEC>
static void expand_launch(kvcal_bf16 *k, int k_head, kvcal_bf16 *v, int v_stride,
                          const kvcal_bf16 *kvb, const kvcal_bf16 *entry,
                          int64_t entry_stride, int tokens, int n_heads, int nope,
                          int v_dim, int kv_lora_rank, int rope_dim, int rope_only,
                          cudaStream_t stream)
{
    const int64_t rows = (int64_t)tokens * n_heads, kvw = (nope + v_dim) / VEC;
    const int qk = (nope + rope_dim) / VEC, per_block = EXPAND_THREADS * EXPAND_UNITS;
    const int k_from = rope_only ? nope / VEC : 0; // K's first unit written
    const T *src = reinterpret_cast<const T *>(kvb);
    const expand_out<T> ko = {reinterpret_cast<T *>(k) + (k ? k_from : 0),
                              src,
                              reinterpret_cast<const T *>(entry) + kv_lora_rank / VEC,
                              kvw,
                              entry_stride / VEC,
                              k ? rows * (qk - k_from) : 0,
                              nope / VEC - k_from,
                              rope_dim / VEC,
                              qk - k_from,
                              k_head / VEC,
                              n_heads};
    const expand_out<T> vo = {reinterpret_cast<T *>(v),
                              v ? src + nope / VEC : nullptr,
                              nullptr,
                              kvw,
                              0,
                              v ? rows * (v_stride / VEC) : 0,
                              v_dim / VEC,
                              0,
                              v_stride / VEC,
                              v_stride / VEC,
                              n_heads};
    for (const expand_out<T> &o : {ko, vo})
        if (o.units)
            mla_expand_kernel<T><<<(unsigned)((o.units + per_block - 1) / per_block),
                                   EXPAND_THREADS, 0, stream>>>(o);
}

/* expand_launch in 16-byte units where every pointer, size and stride
 * allows, else a value a unit (rope_only: v and kvb NULL, v_dim and
 * v_stride 0). */
static kvcal_status expand_queue(kvcal_bf16 *k, int k_head, kvcal_bf16 *v, int v_stride,
                                 const kvcal_bf16 *kvb, const kvcal_bf16 *entry,
                                 int64_t entry_stride, int tokens, int n_heads, int nope,
                                 int v_dim, int kv_lora_rank, int rope_dim, int rope_only,
                                 cudaStream_t stream)
{
    const uintptr_t addr =
        (uintptr_t)k | (uintptr_t)v | (uintptr_t)kvb | (uintptr_t)entry;
    const int vec = addr % 16 == 0 && nope % 8 == 0 && v_dim % 8 == 0 &&
                    v_stride % 8 == 0 && kv_lora_rank % 8 == 0 && rope_dim % 8 == 0 &&
                    entry_stride % 8 == 0 && k_head % 8 == 0;
    if (vec)
        expand_launch<uint4, 8>(k, k_head, v, v_stride, kvb, entry, entry_stride, tokens,
                                n_heads, nope, v_dim, kv_lora_rank, rope_dim, rope_only,
                                stream);
    else
        expand_launch<__nv_bfloat16, 1>(k, k_head, v, v_stride, kvb, entry, entry_stride,
                                        tokens, n_heads, nope, v_dim, kv_lora_rank,
                                        rope_dim, rope_only, stream);
    KVCAL_CUDA_CHECK_LAUNCH("mla_expand_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status
kvcal_mla_expand_launch(kvcal_bf16 *k, kvcal_bf16 *v, int v_stride, const kvcal_bf16 *kvb,
                        const kvcal_bf16 *entry, int64_t entry_stride, int tokens,
                        int n_heads, int nope, int v_dim, int kv_lora_rank, int rope_dim,
                        cudaStream_t stream)
{
    if ((!k && !v) || !kvb || !entry || tokens < 0 || n_heads < 1 || nope < 1 ||
        v_dim < 1 || v_stride < v_dim || kv_lora_rank < 1 || rope_dim < 1 ||
        entry_stride < kv_lora_rank + rope_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "mla_expand: %d tokens, %d heads of nope %d, rope %d, v %d "
                          "(stride %d), latent %d (entry stride %lld): need K's or V's "
                          "buffer or both, the inputs and positive sizes",
                          tokens, n_heads, nope, rope_dim, v_dim, v_stride, kv_lora_rank,
                          (long long)entry_stride);
    if (!tokens)
        return KVCAL_OK;
    return expand_queue(k, nope + rope_dim, v, v_stride, kvb, entry, entry_stride, tokens,
                        n_heads, nope, v_dim, kv_lora_rank, rope_dim, 0, stream);
}

extern "C" kvcal_status
kvcal_mla_expand_rope_launch(kvcal_bf16 *k, int k_head_stride, const kvcal_bf16 *entry,
                             int64_t entry_stride, int tokens, int n_heads, int nope,
                             int kv_lora_rank, int rope_dim, cudaStream_t stream)
{
    if (!k || !entry || tokens < 0 || n_heads < 1 || nope < 1 || kv_lora_rank < 1 ||
        rope_dim < 1 || entry_stride < kv_lora_rank + rope_dim ||
        k_head_stride < nope + rope_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "mla_expand_rope: %d tokens, %d heads of nope %d + rope %d "
                          "(%d apart), latent %d (entry stride %lld): need K's buffer, "
                          "the entry, positive sizes and heads that hold their values",
                          tokens, n_heads, nope, rope_dim, k_head_stride, kv_lora_rank,
                          (long long)entry_stride);
    if (!tokens)
        return KVCAL_OK;
    return expand_queue(k, k_head_stride, NULL, 0, NULL, entry, entry_stride, tokens,
                        n_heads, nope, 0, kv_lora_rank, rope_dim, 1, stream);
}

// --- vLLM's fp8_ds_mla and back ------------------------------------------------------

enum { DS_TILE = 128 };

__global__ void __launch_bounds__(DS_TILE)
    mla_ds_roundtrip_kernel(float *__restrict__ out, int64_t out_stride,
                            const __nv_bfloat16 *__restrict__ x, int64_t x_stride,
                            int kv_lora_rank, int rope_dim)
{
    __shared__ float warp_max[DS_TILE / 32];
    const int64_t r = blockIdx.x;
    const __nv_bfloat16 *xr = x + r * x_stride;
    float *o = out + r * out_stride;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int c0 = 0; c0 < kv_lora_rank; c0 += DS_TILE) {
        const int c = c0 + threadIdx.x;
        const float v = c < kv_lora_rank ? __bfloat162float(xr[c]) : 0.0f;
        float m = fabsf(v);
        for (int s = 16; s > 0; s >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
        if (lane == 0)
            warp_max[warp] = m;
        __syncthreads();
        for (int i = 0; i < DS_TILE / 32; i++)
            m = fmaxf(m, warp_max[i]);
        __syncthreads();
        const float scale = fmaxf(__fdiv_rn(m, 448.0f), FLT_MIN);
        if (c < kv_lora_rank)
            o[c] = kvcal_fp8_e4m3_round(__fdiv_rn(v, scale)) * scale;
    }
    for (int c = kv_lora_rank + threadIdx.x; c < kv_lora_rank + rope_dim; c += DS_TILE)
        o[c] = __bfloat162float(xr[c]);
}

extern "C" kvcal_status kvcal_mla_ds_roundtrip_launch(float *out, int64_t out_stride,
                                                      const kvcal_bf16 *x,
                                                      int64_t x_stride, int rows,
                                                      int kv_lora_rank, int rope_dim,
                                                      cudaStream_t stream)
{
    const int64_t E = (int64_t)kv_lora_rank + rope_dim;
    if (!out || !x || rows < 0 || kv_lora_rank < 1 || rope_dim < 0 || out_stride < E ||
        x_stride < E)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "mla_ds_roundtrip: %d rows of latent %d + rope %d (strides %lld, "
            "%lld): need buffers and strides of at least the entry",
            rows, kv_lora_rank, rope_dim, (long long)out_stride, (long long)x_stride);
    if (!rows)
        return KVCAL_OK;
    mla_ds_roundtrip_kernel<<<rows, DS_TILE, 0, stream>>>(
        out, out_stride, reinterpret_cast<const __nv_bfloat16 *>(x), x_stride,
        kv_lora_rank, rope_dim);
    KVCAL_CUDA_CHECK_LAUNCH("mla_ds_roundtrip_kernel");
    return KVCAL_OK;
}
