/* kernels/cuda/gated_delta.cu: the linear attention of Qwen3-Next's and
 * Qwen3.5's linear-attention layers (a gated delta-net) in its recurrent
 * form, and the sigmoid gate of their attention layers' output; the
 * arithmetic of kernels/cpu/gated_delta.c's references in fp32, but for the
 * recurrence's output o, rounded to bf16 before the gated norm as
 * transformers and vLLM hand it to theirs.
 *
 * The recurrence: a sample's tokens in order, the state S (dk x dv, fp32)
 * of a value head held a column a thread. Key heads up to 128 and value
 * heads up to 256 (the released models: 128 and 128) take their inputs
 * (the causal convolution, SiLU, q and k normalized, beta and the decay)
 * from a kernel over every token at once, into fp32 work space, and run
 * the recurrence a warp per 32 columns, the column in registers, each
 * warp its own copy of q and k (no block barrier a token), each token's
 * inputs loaded a token ahead. Larger heads run a block per value head,
 * the state in shared memory, the inputs computed in it. The gated RMSNorm
 * over a value head's columns is a kernel of its own, after. */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

static __device__ __forceinline__ float sigmoid_f(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

static __device__ __forceinline__ float silu_f(float x)
{
    return x * sigmoid_f(x);
}

/* torch's softplus (beta 1, threshold 20) */
static __device__ __forceinline__ float softplus_f(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

static __device__ __forceinline__ float warp_sum(float a)
{
    for (int o = 16; o > 0; o >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, o);
    return a;
}

static __device__ __forceinline__ float ld(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}

/* --- the inputs of the recurrence, every token at once --------------------------- */

/* The warp kernel's convolution window (the released models': 4 taps). */
#define GDN_WINDOW 4
/* Its warps a block at most (value heads of up to 256): the registers of a
 * state's column of 128 leave room for 256 threads an SM partition. */
#define GDN_WARP_MAX_WARPS 8

/* Tap i of GDN_WINDOW (padded on the left) of channel c's convolution. */
static __device__ __forceinline__ float tap_w(const __nv_bfloat16 *__restrict__ conv,
                                              int64_t c, int taps, int i)
{
    const int tap = i - (GDN_WINDOW - taps);
    return tap >= 0 ? ld(conv + c * taps + tap) : 0.0f;
}

/* The causal convolution of channel c at row r (position t of its
 * sample; rows `row` elements apart) and SiLU: the newest tap first, then
 * the oldest on, taps before the sample's first token zero. */
static __device__ __forceinline__ float
conv_silu_window(const __nv_bfloat16 *__restrict__ xr, int64_t row, int t, int64_t c,
                 const __nv_bfloat16 *__restrict__ conv, int taps)
{
    float acc = tap_w(conv, c, taps, GDN_WINDOW - 1) * ld(xr + c);
#pragma unroll
    for (int i = 0; i < GDN_WINDOW - 1; i++) {
        const int back = GDN_WINDOW - 1 - i;
        acc += tap_w(conv, c, taps, i) * (t >= back ? ld(xr - back * row + c) : 0.0f);
    }
    return silu_f(acc);
}

/* A warp per (row, key head), lane l channels l + 32 m (< dk) of q and k:
 * q and k convolved, SiLU'd and L2-normalized (eps 1e-6), q times dk^-0.5,
 * into qk (rows, 2 nk dk: q's heads, then k's); the v columns of the value
 * heads over this key head convolved and SiLU'd into v (rows, nv dv); each
 * of those heads' beta = sigmoid(b) and decay = exp(-exp(a_log) softplus(a
 * + dt_bias)) into bd (rows, nv). The warp kernel's own arithmetic before
 * this kernel took it over, in the same order. */
template <int DK>
__global__ void __launch_bounds__(256)
    gated_delta_inputs_kernel(float *__restrict__ qk, float *__restrict__ v,
                              float2 *__restrict__ bd,
                              const __nv_bfloat16 *__restrict__ qkvz, // (rows, C + nv dv)
                              const __nv_bfloat16 *__restrict__ ba,   // (rows, 2 nv)
                              const __nv_bfloat16 *__restrict__ conv, // (C, taps)
                              const __nv_bfloat16 *__restrict__ a_log,
                              const __nv_bfloat16 *__restrict__ dt_bias, int64_t rows,
                              int T, int nk, int dk, int nv, int dv, int taps)
{
    constexpr int M = DK / 32;
    const int64_t w = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= rows * nk)
        return;
    const int lane = threadIdx.x & 31, hk = (int)(w % nk), group = nv / nk;
    const int64_t r = w / nk;
    const int t = (int)(r % T);
    const int64_t KD = (int64_t)nk * dk, VD = (int64_t)nv * dv, row = 2 * KD + 2 * VD;
    const __nv_bfloat16 *xr = qkvz + r * row;
    float q[M], k[M], sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int c = lane + 32 * m;
        q[m] = c < dk ? conv_silu_window(xr, row, t, hk * dk + c, conv, taps) : 0.0f;
        k[m] = c < dk ? conv_silu_window(xr, row, t, KD + hk * dk + c, conv, taps) : 0.0f;
        sq += q[m] * q[m];
        sk += k[m] * k[m];
    }
    const float q_scale = 1.0f / sqrtf((float)dk);
    const float iq = q_scale / sqrtf(warp_sum(sq) + 1e-6f),
                ik = 1.0f / sqrtf(warp_sum(sk) + 1e-6f);
    float *qo = qk + r * 2 * KD + hk * dk;
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int c = lane + 32 * m;
        if (c < dk) {
            qo[c] = q[m] * iq;
            qo[KD + c] = k[m] * ik;
        }
    }
    for (int i = lane; i < group * dv; i += 32) {
        const int64_t c = (int64_t)hk * group * dv + i;
        v[r * VD + c] = conv_silu_window(xr, row, t, 2 * KD + c, conv, taps);
    }
    if (lane < group) {
        const int h = hk * group + lane;
        const float A = expf(ld(a_log + h)), dt = ld(dt_bias + h);
        const float beta = sigmoid_f(ld(ba + r * 2 * nv + h));
        const float decay = expf(-A * softplus_f(ld(ba + r * 2 * nv + nv + h) + dt));
        bd[r * nv + h] = make_float2(beta, decay);
    }
}

/* --- a warp per 32 columns, the state in registers ---------------------------- */

/* A token's inputs of one lane: q and k of channels lane + 32 m of the key
 * head, v of its column, the value head's beta and decay. Nothing reads
 * them before the next token's turn: the loads stay in flight under this
 * token's update. */
template <int M> struct gdn_inputs {
    float q[M], k[M], v;
    float2 bd;
};

/* Block (b, h) of batch x nv, warp w its columns 32 w .. 32 w + 31 (those
 * < dv), lane l channels l + 32 m (< dk) of q and k; the inputs
 * gated_delta_inputs_kernel's. Shared memory: each warp's q and k, two
 * tokens' (2 x 2 DK). */
template <int DK>
__global__ void __launch_bounds__(GDN_WARP_MAX_WARPS * 32)
    gated_delta_warp_kernel(__nv_bfloat16 *__restrict__ out, // (B T, nv dv)
                            const float *__restrict__ qk,    // (B T, 2 nk dk)
                            const float *__restrict__ vin,   // (B T, nv dv)
                            const float2 *__restrict__ bd,   // (B T, nv)
                            int T, int nk, int dk, int nv, int dv)
{
    constexpr int M = DK / 32;
    extern __shared__ float smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *buf = smem + warp * 4 * DK; /* [token & 1][q, k][DK] */
    const int b = blockIdx.x / nv, h = blockIdx.x % nv, hk = h / (nv / nk);
    const int j = warp * 32 + lane; /* this lane's column */
    const int64_t KD = (int64_t)nk * dk, VD = (int64_t)nv * dv;
    const float *qr = qk + (int64_t)b * T * 2 * KD + hk * dk;
    const float *vr = vin + (int64_t)b * T * VD + (int64_t)h * dv + j;
    const float2 *bdr = bd + (int64_t)b * T * nv + h;
    __nv_bfloat16 *y = out + (int64_t)b * T * VD + (int64_t)h * dv + j;
    const bool col = j < dv;

    auto load = [&](int t, gdn_inputs<M> &in) {
        const float *r = qr + (int64_t)t * 2 * KD;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int c = lane + 32 * m;
            in.q[m] = c < dk ? r[c] : 0.0f;
            in.k[m] = c < dk ? r[KD + c] : 0.0f;
        }
        in.v = col ? vr[(int64_t)t * VD] : 0.0f;
        in.bd = bdr[(int64_t)t * nv];
    };
    float s[DK];
#pragma unroll
    for (int i = 0; i < DK; i++)
        s[i] = 0.0f;
    gdn_inputs<M> next;
    if (T > 0)
        load(0, next);
    for (int t = 0; t < T; t++) {
        const gdn_inputs<M> in = next;
        if (t + 1 < T)
            load(t + 1, next); /* in flight under this token's update */
        float *qs = buf + (t & 1) * 2 * DK, *ks = qs + DK;
#pragma unroll
        for (int m = 0; m < M; m++) {
            qs[lane + 32 * m] = in.q[m];
            ks[lane + 32 * m] = in.k[m];
        }
        const float v = in.v, beta = in.bd.x, decay = in.bd.y;
        __syncwarp(); /* this token's q and k; the other buffer's last reads are done */
        /* S decays; kv_mem = S^T k; S += k delta^T, delta = beta (v - kv_mem);
           o = S^T q */
        const float4 *k4 = reinterpret_cast<const float4 *>(ks),
                     *q4 = reinterpret_cast<const float4 *>(qs);
        float4 mem = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int i = 0; i < DK / 4; i++) {
            const float4 kk = k4[i];
            mem.x += s[4 * i] * kk.x;
            mem.y += s[4 * i + 1] * kk.y;
            mem.z += s[4 * i + 2] * kk.z;
            mem.w += s[4 * i + 3] * kk.w;
        }
        const float delta = (v - decay * ((mem.x + mem.y) + (mem.z + mem.w))) * beta;
        __syncwarp(); /* k read again below rather than held in registers */
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int i = 0; i < DK / 4; i++) {
            const float4 kk = k4[i], qq = q4[i];
            s[4 * i] = fmaf(s[4 * i], decay, kk.x * delta);
            s[4 * i + 1] = fmaf(s[4 * i + 1], decay, kk.y * delta);
            s[4 * i + 2] = fmaf(s[4 * i + 2], decay, kk.z * delta);
            s[4 * i + 3] = fmaf(s[4 * i + 3], decay, kk.w * delta);
            o.x += s[4 * i] * qq.x;
            o.y += s[4 * i + 1] * qq.y;
            o.z += s[4 * i + 2] * qq.z;
            o.w += s[4 * i + 3] * qq.w;
        }
        if (col)
            y[(int64_t)t * VD] = __float2bfloat16_rn((o.x + o.y) + (o.z + o.w));
    }
}

/* --- a block per value head, the state in shared memory ------------------------ */

/* The sums of a and b over the block (blockDim.x a multiple of 32, at most
 * 1024); scratch: 64 floats. Every thread gets both. */
static __device__ __forceinline__ float2 block_sum2(float a, float b, float *scratch)
{
    a = warp_sum(a);
    b = warp_sum(b);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    if (lane == 0) {
        scratch[warp] = a;
        scratch[32 + warp] = b;
    }
    __syncthreads();
    a = warp_sum(lane < warps ? scratch[lane] : 0.0f);
    b = warp_sum(lane < warps ? scratch[32 + lane] : 0.0f);
    __syncthreads(); /* scratch is free again */
    return make_float2(a, b);
}

/* The causal depthwise convolution and SiLU of channel c at token t of a
 * sample whose rows start at x (row stride `row`): taps before the
 * sample's first token are zero. */
static __device__ __forceinline__ float conv_silu(const __nv_bfloat16 *__restrict__ x,
                                                  int64_t row, int t, int c,
                                                  const __nv_bfloat16 *__restrict__ w,
                                                  int taps)
{
    float acc = 0.0f;
    for (int j = 0; j < taps; j++) {
        const int src = t - (taps - 1) + j;
        if (src >= 0)
            acc += ld(w + (int64_t)c * taps + j) * ld(x + src * row + c);
    }
    return silu_f(acc);
}

/* Block (b, h), thread j column j of the state and channel j of q and k.
 * Shared memory: the token's q and k (dk each), the scratch (64), S (dk x
 * dv). */
__global__ void __launch_bounds__(1024) gated_delta_smem_kernel(
    __nv_bfloat16 *__restrict__ out, const __nv_bfloat16 *__restrict__ qkvz,
    const __nv_bfloat16 *__restrict__ ba, const __nv_bfloat16 *__restrict__ conv,
    const __nv_bfloat16 *__restrict__ a_log, const __nv_bfloat16 *__restrict__ dt_bias,
    int T, int nk, int dk, int nv, int dv, int taps)
{
    extern __shared__ float smem[];
    float *qs = smem, *ks = qs + dk, *scratch = ks + dk, *S = scratch + 64;
    const int b = blockIdx.x / nv, h = blockIdx.x % nv, hk = h / (nv / nk);
    const int j = threadIdx.x;
    const int64_t KD = (int64_t)nk * dk, VD = (int64_t)nv * dv, C = 2 * KD + VD;
    const int64_t row = C + VD;
    const __nv_bfloat16 *x = qkvz + (int64_t)b * T * row;
    const __nv_bfloat16 *bap = ba + (int64_t)b * T * 2 * nv;
    __nv_bfloat16 *y = out + (int64_t)b * T * VD + (int64_t)h * dv;
    const float A = expf(ld(a_log + h)), dt = ld(dt_bias + h);
    const float q_scale = 1.0f / sqrtf((float)dk);
    for (int i = 0; j < dv && i < dk; i++)
        S[(size_t)i * dv + j] = 0.0f;
    for (int t = 0; t < T; t++) {
        float q = 0.0f, k = 0.0f, v = 0.0f;
        if (j < dk) {
            q = conv_silu(x, row, t, (int)(hk * dk + j), conv, taps);
            k = conv_silu(x, row, t, (int)(KD + hk * dk + j), conv, taps);
        }
        if (j < dv)
            v = conv_silu(x, row, t, (int)(2 * KD + (int64_t)h * dv + j), conv, taps);
        /* q and k L2-normalized (eps 1e-6), q times dk^-0.5; the sums also
           order the reads of qs and ks of the token before */
        const float2 sq = block_sum2(q * q, k * k, scratch);
        if (j < dk) {
            qs[j] = q / sqrtf(sq.x + 1e-6f) * q_scale;
            ks[j] = k / sqrtf(sq.y + 1e-6f);
        }
        const float beta = sigmoid_f(ld(bap + (int64_t)t * 2 * nv + h));
        const float decay =
            expf(-A * softplus_f(ld(bap + (int64_t)t * 2 * nv + nv + h) + dt));
        __syncthreads();
        if (j < dv) {
            float mem = 0.0f, o = 0.0f;
            for (int i = 0; i < dk; i++) {
                const float sv = S[(size_t)i * dv + j] * decay;
                S[(size_t)i * dv + j] = sv;
                mem += sv * ks[i];
            }
            const float delta = (v - mem) * beta;
            for (int i = 0; i < dk; i++) {
                const float sv = S[(size_t)i * dv + j] + ks[i] * delta;
                S[(size_t)i * dv + j] = sv;
                o += sv * qs[i];
            }
            y[(int64_t)t * VD + j] = __float2bfloat16_rn(o);
        }
    }
}

/* --- the gated RMSNorm ---------------------------------------------------------- */

/* y = rmsnorm(o) * norm * silu(z) in place, a warp per (token, value head):
 * o (n, nv dv) the recurrence's output, z the rows' last nv dv columns of
 * qkvz (n, C + nv dv). */
__global__ void gated_norm_kernel(__nv_bfloat16 *__restrict__ y,
                                  const __nv_bfloat16 *__restrict__ qkvz,
                                  const __nv_bfloat16 *__restrict__ norm, int64_t rows,
                                  int nv, int dv, int64_t C, float eps)
{
    const int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    const int64_t t = r / nv, h = r % nv, VD = (int64_t)nv * dv;
    __nv_bfloat16 *o = y + t * VD + h * dv;
    const __nv_bfloat16 *z = qkvz + t * (C + VD) + C + h * dv;
    float ss = 0.0f;
    for (int c = lane; c < dv; c += 32)
        ss += ld(o + c) * ld(o + c);
    const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)dv + eps);
    for (int c = lane; c < dv; c += 32)
        o[c] = __float2bfloat16_rn(ld(o + c) * inv * ld(norm + c) * silu_f(ld(z + c)));
}

/* --- launch ----------------------------------------------------------------------- */

/* The key head size the warp kernel takes key heads of dk and value heads
 * of dv with (0: none, the state in shared memory). */
static int gated_delta_dk(int dk, int dv)
{
    return dv > GDN_WARP_MAX_WARPS * 32 ? 0
           : dk <= 32                   ? 32
           : dk <= 64                   ? 64
           : dk <= 128                  ? 128
                                        : 0;
}

/* Shared memory of the kernel gated_delta_dk chose (DK 0: the block's). */
static size_t gated_delta_smem(int DK, int dk, int dv)
{
    if (DK)
        return sizeof(float) * (size_t)(dv + 31) / 32 * 4 * DK;
    return sizeof(float) * (2 * (size_t)dk + 64 + (size_t)dk * dv);
}

/* The shared memory a block may opt in to on the current device. */
static size_t smem_optin(void)
{
    int device = 0, max_optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device) != cudaSuccess)
        max_optin = 48 << 10;
    return (size_t)max_optin;
}

/* The kernel for key heads of dk, value heads of dv and taps taps: its DK
 * (0: the state in shared memory). */
static int gated_delta_kernel_dk(int dk, int dv, int taps)
{
    return taps <= GDN_WINDOW ? gated_delta_dk(dk, dv) : 0;
}

extern "C" int kvcal_gated_delta_fits(int dk, int dv)
{
    return dk >= 1 && dv >= 1 && dk <= 1024 && dv <= 1024 &&
           gated_delta_smem(gated_delta_dk(dk, dv), dk, dv) <= smem_optin() &&
           gated_delta_smem(0, dk, dv) <= smem_optin();
}

extern "C" size_t kvcal_gated_delta_work_bytes(const kvcal_gated_delta_params *p,
                                               int64_t rows)
{
    const int64_t per_row = 2LL * p->nk * p->dk + (int64_t)p->nv * p->dv + 2LL * p->nv;
    /* one float more: bd starts 8-byte aligned */
    return rows > 0 && p->nk > 0 && p->dk > 0 && p->nv > 0 && p->dv > 0
               ? ((size_t)rows * (size_t)per_row + 1) * sizeof(float)
               : 0;
}

/* The inputs kernel, then the recurrence's warps: work holds qk (rows, 2
 * nk dk), v (rows, nv dv), then bd (rows, nv) from the next even float. */
template <int DK>
static void launch_warps(unsigned blocks, size_t smem, cudaStream_t stream,
                         __nv_bfloat16 *o, float *work, const __nv_bfloat16 *x,
                         const __nv_bfloat16 *bap, const kvcal_gated_delta_params *p,
                         int batch, int T)
{
    const int64_t rows = (int64_t)batch * T;
    float *qk = work, *v = qk + rows * 2 * p->nk * p->dk;
    const int64_t end = rows * (2LL * p->nk * p->dk + (int64_t)p->nv * p->dv);
    float2 *bd = reinterpret_cast<float2 *>(work + end + (end & 1));
    const int64_t warps = rows * p->nk;
    gated_delta_inputs_kernel<DK><<<(unsigned)((warps + 7) / 8), 256, 0, stream>>>(
        qk, v, bd, x, bap, reinterpret_cast<const __nv_bfloat16 *>(p->conv),
        reinterpret_cast<const __nv_bfloat16 *>(p->a_log),
        reinterpret_cast<const __nv_bfloat16 *>(p->dt_bias), rows, T, p->nk, p->dk, p->nv,
        p->dv, p->taps);
    gated_delta_warp_kernel<DK><<<blocks, (p->dv + 31) / 32 * 32, smem, stream>>>(
        o, qk, v, bd, T, p->nk, p->dk, p->nv, p->dv);
}

extern "C" kvcal_status kvcal_gated_delta_launch(kvcal_bf16 *out, float *work,
                                                 const kvcal_bf16 *qkvz,
                                                 const kvcal_bf16 *ba,
                                                 const kvcal_gated_delta_params *p,
                                                 int batch, int T, cudaStream_t stream)
{
    if (!out || !work || !qkvz || !ba || !p || !p->conv || !p->a_log || !p->dt_bias ||
        !p->norm || batch < 0 || T < 0 || p->nk < 1 || p->nv < 1 || p->nv % p->nk ||
        p->taps < 1 || !(p->eps >= 0.0f))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gated_delta: batch %d, T %d, %d key heads, %d value heads, %d "
                          "taps: need buffers, work space and weights, batch and T >= 0, "
                          "heads >= 1 (the value heads a multiple of the key heads), "
                          "taps >= 1",
                          batch, T, p->nk, p->nv, p->taps);
    const int DK = gated_delta_kernel_dk(p->dk, p->dv, p->taps);
    const size_t smem = gated_delta_smem(DK, p->dk, p->dv);
    if (!kvcal_gated_delta_fits(p->dk, p->dv))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gated_delta: key head %d x value head %d: the state (%zu "
                          "bytes) does not fit one block's shared memory",
                          p->dk, p->dv, gated_delta_smem(0, p->dk, p->dv));
    if (batch == 0 || T == 0)
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *x = reinterpret_cast<const __nv_bfloat16 *>(qkvz);
    auto *bap = reinterpret_cast<const __nv_bfloat16 *>(ba);
    const unsigned blocks = (unsigned)batch * (unsigned)p->nv;
    switch (DK) {
    case 32:
        launch_warps<32>(blocks, smem, stream, o, work, x, bap, p, batch, T);
        break;
    case 64:
        launch_warps<64>(blocks, smem, stream, o, work, x, bap, p, batch, T);
        break;
    case 128:
        launch_warps<128>(blocks, smem, stream, o, work, x, bap, p, batch, T);
        break;
    default: {
        const int wide = p->dk > p->dv ? p->dk : p->dv, threads = (wide + 31) / 32 * 32;
        if (smem > (48 << 10) &&
            cudaFuncSetAttribute(gated_delta_smem_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) != cudaSuccess)
            return kvcal_fail(KVCAL_ERR_CUDA,
                              "gated_delta: %zu bytes of shared memory refused", smem);
        gated_delta_smem_kernel<<<blocks, threads, smem, stream>>>(
            o, x, bap, reinterpret_cast<const __nv_bfloat16 *>(p->conv),
            reinterpret_cast<const __nv_bfloat16 *>(p->a_log),
            reinterpret_cast<const __nv_bfloat16 *>(p->dt_bias), T, p->nk, p->dk, p->nv,
            p->dv, p->taps);
    }
    }
    KVCAL_CUDA_CHECK_LAUNCH("gated_delta_kernel");
    const int64_t rows = (int64_t)batch * T * p->nv;
    const int64_t C = 2LL * p->nk * p->dk + (int64_t)p->nv * p->dv;
    gated_norm_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(
        o, x, reinterpret_cast<const __nv_bfloat16 *>(p->norm), rows, p->nv, p->dv, C,
        p->eps);
    KVCAL_CUDA_CHECK_LAUNCH("gated_norm_kernel");
    return KVCAL_OK;
}

__global__ void sigmoid_gate_kernel(__nv_bfloat16 *__restrict__ x,
                                    const __nv_bfloat16 *__restrict__ gate, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) *
                                   sigmoid_f(__bfloat162float(gate[i])));
}

extern "C" kvcal_status kvcal_sigmoid_gate_launch(kvcal_bf16 *x, const kvcal_bf16 *gate,
                                                  int64_t n, cudaStream_t stream)
{
    if (!x || !gate || n < 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "sigmoid_gate: n %lld: need buffers and n >= 0", (long long)n);
    if (n == 0)
        return KVCAL_OK;
    const int64_t blocks = (n + 255) / 256;
    sigmoid_gate_kernel<<<(unsigned)(blocks > 132 * 32 ? 132 * 32 : blocks), 256, 0,
                          stream>>>(reinterpret_cast<__nv_bfloat16 *>(x),
                                    reinterpret_cast<const __nv_bfloat16 *>(gate), n);
    KVCAL_CUDA_CHECK_LAUNCH("sigmoid_gate_kernel");
    return KVCAL_OK;
}
