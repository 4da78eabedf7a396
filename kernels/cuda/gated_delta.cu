/* kernels/cuda/gated_delta.cu: the linear attention of Qwen3-Next's and
 * Qwen3.5's linear-attention layers (a gated delta-net) in its recurrent
 * form, and the sigmoid gate of their attention layers' output; the
 * arithmetic of kernels/cpu/gated_delta.c's references, in fp32, each
 * output rounded once to bf16.
 *
 * One block per (sample, value head) walks the sample's tokens in order:
 * its state S (dk x dv, fp32) lives in shared memory, thread j holding
 * column j; the causal convolution of the token's q, k and v channels is
 * computed where they are read (the kernel taps of rows before it, within
 * the sample), so nothing but the state is kept between tokens. */
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

__global__ void
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
    float *S = smem;                                /* (dk, dv) */
    float *qs = S + (size_t)dk * dv, *ks = qs + dk; /* the token's q and k */
    float *scratch = ks + dk;                       /* 64 */
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
        /* q and k L2-normalized (eps 1e-6), q times dk^-0.5 */
        const float2 sq = block_sum2(q * q, k * k, scratch);
        if (j < dk) {
            qs[j] = q / sqrtf(sq.x + 1e-6f) * q_scale;
            ks[j] = k / sqrtf(sq.y + 1e-6f);
        }
        const float beta = sigmoid_f(__bfloat162float(bap[(int64_t)t * 2 * nv + h]));
        const float decay = expf(
            -A * softplus_f(__bfloat162float(bap[(int64_t)t * 2 * nv + nv + h]) + dt));
        __syncthreads();
        float o = 0.0f;
        if (j < dv) {
            /* S decays; kv_mem = S^T k; S += k delta^T, delta = beta (v - kv_mem);
               o = S^T q */
            float mem = 0.0f;
            for (int i = 0; i < dk; i++) {
                const float s = S[(size_t)i * dv + j] * decay;
                S[(size_t)i * dv + j] = s;
                mem += s * ks[i];
            }
            const float delta = (v - mem) * beta;
            for (int i = 0; i < dk; i++) {
                const float s = S[(size_t)i * dv + j] + ks[i] * delta;
                S[(size_t)i * dv + j] = s;
                o += s * qs[i];
            }
        }
        /* the gated RMSNorm: rmsnorm(o) * norm * silu(z); the sum also
           orders the reads of qs and ks before the next token writes them */
        const float ss = block_sum2(o * o, 0.0f, scratch).x;
        if (j < dv) {
            const float z =
                __bfloat162float(x[(int64_t)t * row + C + (int64_t)h * dv + j]);
            const float inv = 1.0f / sqrtf(ss / (float)dv + eps);
            y[(int64_t)t * VD + j] = __float2bfloat16_rn(o * inv * w_norm * silu_f(z));
        }
    }
}

/* Shared memory of gated_delta_kernel: the state, q and k, the scratch. */
static size_t gated_delta_smem(int dk, int dv)
{
    return sizeof(float) * ((size_t)dk * dv + 2 * (size_t)dk + 64);
}

extern "C" int kvcal_gated_delta_fits(int dk, int dv)
{
    int device = 0, max_optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device) != cudaSuccess)
        max_optin = 48 << 10;
    return dk >= 1 && dv >= 1 && dk <= 1024 && dv <= 1024 &&
           gated_delta_smem(dk, dv) <= (size_t)max_optin;
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
    if (!kvcal_gated_delta_fits(p->dk, p->dv))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "gated_delta: key head %d x value head %d: the state (%zu "
                          "bytes) does not fit one block's shared memory",
                          p->dk, p->dv, gated_delta_smem(p->dk, p->dv));
    if (batch == 0 || T == 0)
        return KVCAL_OK;
    const int wide = p->dk > p->dv ? p->dk : p->dv, threads = (wide + 31) / 32 * 32;
    const size_t smem = gated_delta_smem(p->dk, p->dv);
    if (smem > (48 << 10) &&
        cudaFuncSetAttribute(gated_delta_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        return kvcal_fail(KVCAL_ERR_CUDA,
                          "gated_delta: %zu bytes of shared memory refused", smem);
    gated_delta_kernel<<<batch * p->nv, threads, smem, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(qkvz),
        reinterpret_cast<const __nv_bfloat16 *>(ba),
        reinterpret_cast<const __nv_bfloat16 *>(p->conv),
        reinterpret_cast<const __nv_bfloat16 *>(p->a_log),
        reinterpret_cast<const __nv_bfloat16 *>(p->dt_bias),
        reinterpret_cast<const __nv_bfloat16 *>(p->norm), T, p->nk, p->dk, p->nv, p->dv,
        p->taps, p->eps);
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
