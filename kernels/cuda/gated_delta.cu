/* kernels/cuda/gated_delta.cu: the linear attention of Qwen3-Next's and
 * Qwen3.5's linear-attention layers (a gated delta-net) in its recurrent
 * form, and the sigmoid gate of their attention layers' output; the
 * arithmetic of kernels/cpu/gated_delta.c's references, in fp32, each
 * output rounded once to bf16.
 *
 * One block per (sample, value head) walks the sample's tokens in order:
 * its state S (dk x dv, fp32), thread j holding column j, in registers
 * (key heads up to 128) or in shared memory; the causal convolution of the
 * token's q, k and v channels is computed where they are read (the kernel
 * taps of rows before it, within the sample), a token ahead, so nothing
 * but the state is kept between tokens. */
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

/* The sums of a and b over the block (blockDim.x a multiple of 32, at most
 * 1024); scratch: 64 floats. Every thread gets both. */
static __device__ __forceinline__ float2 block_sum2(float a, float b, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    if (lane == 0) {
        scratch[warp] = a;
        scratch[32 + warp] = b;
    }
    __syncthreads();
    a = lane < warps ? scratch[lane] : 0.0f;
    b = lane < warps ? scratch[32 + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
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
            acc += __bfloat162float(w[(int64_t)c * taps + j]) *
                   __bfloat162float(x[src * row + c]);
    }
    return silu_f(acc);
}

/* Threads of the kernel with the state in registers at most (value heads
 * up to as many values): room for a column of 128 and the rest. */
#define GDN_REG_THREADS 256

/* DK > 0: a key head of up to DK values (the rest zeros), thread j's
 * column of the state in registers; DK 0: any key head, the state in
 * shared memory. Each token's convolution is computed a token ahead, its
 * loads in flight while the state of the token before is updated. */
template <int DK>
__global__ void __launch_bounds__(DK > 0 ? GDN_REG_THREADS : 1024)
    gated_delta_kernel(__nv_bfloat16 *__restrict__ out,           // (B T, nv dv)
                       const __nv_bfloat16 *__restrict__ qkvz,    // (B T, C + nv dv)
                       const __nv_bfloat16 *__restrict__ ba,      // (B T, 2 nv)
                       const __nv_bfloat16 *__restrict__ conv,    // (C, taps)
                       const __nv_bfloat16 *__restrict__ a_log,   // (nv)
                       const __nv_bfloat16 *__restrict__ dt_bias, // (nv)
                       const __nv_bfloat16 *__restrict__ norm,    // (dv)
                       int T, int nk, int dk, int nv, int dv, int taps, float eps)
{
    extern __shared__ float smem[];
    constexpr int QK = DK > 0 ? DK : 1;
    const int width = DK > 0 ? DK : dk; /* q and k as the loops read them */
    float *qs = smem, *ks = qs + width; /* the token's q and k */
    float *scratch = ks + width;        /* 64 */
    float *S = scratch + 64;            /* (dk, dv) where DK is 0 */
    float s[QK];                        /* thread j's column where DK > 0 */
    const int b = blockIdx.x / nv, h = blockIdx.x % nv, hk = h / (nv / nk);
    const int j = threadIdx.x;
    const int64_t KD = (int64_t)nk * dk, VD = (int64_t)nv * dv, C = 2 * KD + VD;
    const int64_t row = C + VD;
    const __nv_bfloat16 *x = qkvz + (int64_t)b * T * row;
    const __nv_bfloat16 *bap = ba + (int64_t)b * T * 2 * nv;
    __nv_bfloat16 *y = out + (int64_t)b * T * VD + (int64_t)h * dv;
    const float A = expf(__bfloat162float(a_log[h])), dt = __bfloat162float(dt_bias[h]);
    const float q_scale = 1.0f / sqrtf((float)dk);
    const float w_norm = j < dv ? __bfloat162float(norm[j]) : 0.0f;
#pragma unroll
    for (int i = 0; i < QK; i++)
        s[i] = 0.0f;
    for (int i = 0; DK == 0 && j < dv && i < dk; i++)
        S[(size_t)i * dv + j] = 0.0f;
    for (int i = j; i < width; i += blockDim.x) /* the padding of q and k stays 0 */
        qs[i] = ks[i] = 0.0f;
    /* the convolution of token t's q, k and v channels of this thread */
    auto convolved = [&](int t, float &q, float &k, float &v) {
        q = k = v = 0.0f;
        if (t >= T)
            return;
        if (j < dk) {
            q = conv_silu(x, row, t, (int)(hk * dk + j), conv, taps);
            k = conv_silu(x, row, t, (int)(KD + hk * dk + j), conv, taps);
        }
        if (j < dv)
            v = conv_silu(x, row, t, (int)(2 * KD + (int64_t)h * dv + j), conv, taps);
    };
    float q, k, v;
    convolved(0, q, k, v);
    for (int t = 0; t < T; t++) {
        /* q and k L2-normalized (eps 1e-6), q times dk^-0.5; the sums also
           order the reads of qs and ks of the token before */
        const float2 sq = block_sum2(q * q, k * k, scratch);
        if (j < dk) {
            qs[j] = q / sqrtf(sq.x + 1e-6f) * q_scale;
            ks[j] = k / sqrtf(sq.y + 1e-6f);
        }
        const float beta = sigmoid_f(__bfloat162float(bap[(int64_t)t * 2 * nv + h]));
        const float decay = expf(
            -A * softplus_f(__bfloat162float(bap[(int64_t)t * 2 * nv + nv + h]) + dt));
        const float vt = v;
        __syncthreads();
        convolved(t + 1, q, k, v); /* in flight under the state's update */
        float o = 0.0f;
        if (j < dv) {
            /* S decays; kv_mem = S^T k; S += k delta^T, delta = beta (v - kv_mem);
               o = S^T q */
            if (DK > 0) {
                float m4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int i = 0; i < QK; i++) {
                    s[i] *= decay;
                    m4[i & 3] += s[i] * ks[i];
                }
                const float delta = (vt - ((m4[0] + m4[1]) + (m4[2] + m4[3]))) * beta;
                float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int i = 0; i < QK; i++) {
                    s[i] += ks[i] * delta;
                    o4[i & 3] += s[i] * qs[i];
                }
                o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
            } else {
                float mem = 0.0f;
                for (int i = 0; i < dk; i++) {
                    const float sv = S[(size_t)i * dv + j] * decay;
                    S[(size_t)i * dv + j] = sv;
                    mem += sv * ks[i];
                }
                const float delta = (vt - mem) * beta;
                for (int i = 0; i < dk; i++) {
                    const float sv = S[(size_t)i * dv + j] + ks[i] * delta;
                    S[(size_t)i * dv + j] = sv;
                    o += sv * qs[i];
                }
            }
        }
        /* the gated RMSNorm: rmsnorm(o) * norm * silu(z) */
        const float ss = block_sum2(o * o, 0.0f, scratch).x;
        if (j < dv) {
            const float z =
                __bfloat162float(x[(int64_t)t * row + C + (int64_t)h * dv + j]);
            const float inv = 1.0f / sqrtf(ss / (float)dv + eps);
            y[(int64_t)t * VD + j] = __float2bfloat16_rn(o * inv * w_norm * silu_f(z));
        }
    }
}

/* The key head size the registers' kernel takes key heads of dk and value
 * heads of dv with (0: none, the state in shared memory). */
static int gated_delta_dk(int dk, int dv)
{
    return dv > GDN_REG_THREADS ? 0 : dk <= 32 ? 32 : dk <= 64 ? 64 : dk <= 128 ? 128 : 0;
}

/* Shared memory of gated_delta_kernel<DK>: q and k, the scratch, the state
 * where DK is 0. */
static size_t gated_delta_smem(int DK, int dk, int dv)
{
    return sizeof(float) * (2 * (size_t)(DK ? DK : dk) + 64 + (DK ? 0 : (size_t)dk * dv));
}

extern "C" int kvcal_gated_delta_fits(int dk, int dv)
{
    int device = 0, max_optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device) != cudaSuccess)
        max_optin = 48 << 10;
    return dk >= 1 && dv >= 1 && dk <= 1024 && dv <= 1024 &&
           gated_delta_smem(gated_delta_dk(dk, dv), dk, dv) <= (size_t)max_optin;
}

extern "C" kvcal_status kvcal_gated_delta_launch(kvcal_bf16 *out, const kvcal_bf16 *qkvz,
                                                 const kvcal_bf16 *ba,
                                                 const kvcal_gated_delta_params *p,
                                                 int batch, int T, cudaStream_t stream)
{
    if (!out || !qkvz || !ba || !p || !p->conv || !p->a_log || !p->dt_bias || !p->norm ||
        batch < 0 || T < 0 || p->nk < 1 || p->nv < 1 || p->nv % p->nk || p->taps < 1 ||
        !(p->eps >= 0.0f))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gated_delta: batch %d, T %d, %d key heads, %d value heads, %d "
                          "taps: need buffers and weights, batch and T >= 0, heads >= 1 "
                          "(the value heads a multiple of the key heads), taps >= 1",
                          batch, T, p->nk, p->nv, p->taps);
    const int DK = gated_delta_dk(p->dk, p->dv);
    const size_t smem = gated_delta_smem(DK, p->dk, p->dv);
    if (!kvcal_gated_delta_fits(p->dk, p->dv))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gated_delta: key head %d x value head %d: the state (%zu "
                          "bytes) does not fit one block's shared memory",
                          p->dk, p->dv, smem);
    if (batch == 0 || T == 0)
        return KVCAL_OK;
    const int wide = p->dk > p->dv ? p->dk : p->dv, threads = (wide + 31) / 32 * 32;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *x = reinterpret_cast<const __nv_bfloat16 *>(qkvz);
    auto *bap = reinterpret_cast<const __nv_bfloat16 *>(ba);
    auto *cw = reinterpret_cast<const __nv_bfloat16 *>(p->conv);
    auto *al = reinterpret_cast<const __nv_bfloat16 *>(p->a_log);
    auto *dtb = reinterpret_cast<const __nv_bfloat16 *>(p->dt_bias);
    auto *nw = reinterpret_cast<const __nv_bfloat16 *>(p->norm);
    const unsigned blocks = (unsigned)batch * (unsigned)p->nv;
    switch (DK) {
    case 32:
        gated_delta_kernel<32><<<blocks, threads, smem, stream>>>(
            o, x, bap, cw, al, dtb, nw, T, p->nk, p->dk, p->nv, p->dv, p->taps, p->eps);
        break;
    case 64:
        gated_delta_kernel<64><<<blocks, threads, smem, stream>>>(
            o, x, bap, cw, al, dtb, nw, T, p->nk, p->dk, p->nv, p->dv, p->taps, p->eps);
        break;
    case 128:
        gated_delta_kernel<128><<<blocks, threads, smem, stream>>>(
            o, x, bap, cw, al, dtb, nw, T, p->nk, p->dk, p->nv, p->dv, p->taps, p->eps);
        break;
    default:
        if (smem > (48 << 10) &&
            cudaFuncSetAttribute(gated_delta_kernel<0>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem) != cudaSuccess)
            return kvcal_fail(KVCAL_ERR_CUDA,
                              "gated_delta: %zu bytes of shared memory refused", smem);
        gated_delta_kernel<0><<<blocks, threads, smem, stream>>>(
            o, x, bap, cw, al, dtb, nw, T, p->nk, p->dk, p->nv, p->dv, p->taps, p->eps);
    }
    KVCAL_CUDA_CHECK_LAUNCH("gated_delta_kernel");
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
