/* kernels/cuda/norm.cu: fused residual add + RMSNorm (and with the FP8
 * activation quantization as its epilogue), SwiGLU and the embedding
 * gather. All are memory-bound: one pass over their inputs with
 * 16-byte accesses where the row length allows, fp32 arithmetic, rounded to
 * bf16 where transformers and vLLM round (kernels/cuda/bf16_round.cuh). */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/fp8_quant_row.cuh"
#include "kernels/cuda/norm_row.cuh"
#include "kernels/cuda/ops.h"

// --- residual add + RMSNorm --------------------------------------------------

/* add8w on the words of row r and delta d (or NULL) at column c. */
static __device__ __forceinline__ uint4 add8(__nv_bfloat16 *r, const __nv_bfloat16 *d,
                                             int c, float *ss)
{
    const uint4 y = d ? *reinterpret_cast<const uint4 *>(d + c) : make_uint4(0, 0, 0, 0);
    return add8w(*reinterpret_cast<const uint4 *>(r + c), y, d != nullptr, r, c, ss);
}

/* Pass 1 of a row, 16-byte accesses (dim % 8 == 0): add8 on the words at
 * columns threadIdx.x * 8 + j * blockDim.x * 8; this thread's sum. */
static __device__ __forceinline__ float add_sumsq8(__nv_bfloat16 *r,
                                                   const __nv_bfloat16 *d, int dim)
{
    float ss = 0.0f;
    for (int c = threadIdx.x * 8; c < dim; c += blockDim.x * 8)
        add8(r, d, c, &ss);
    return ss;
}

/* One block per normalized row of dim values: segs of them side by side
 * in each row of the buffers, rows `stride` values apart. VEC 8: dim and
 * stride multiples of 8, 16-byte accesses; VEC 1: any. w NULL: no norm, out
 * the residual after the add. */
template <int VEC>
__global__ void
add_rmsnorm_kernel(__nv_bfloat16 *__restrict__ out,         // (rows, stride)
                   __nv_bfloat16 *__restrict__ residual,    // (rows, stride)
                   const __nv_bfloat16 *__restrict__ delta, // (rows, stride) or NULL
                   const __nv_bfloat16 *__restrict__ w,     // (dim) or NULL
                   int dim, int segs, int64_t stride, float eps, float off)
{
    __shared__ float scratch[32];
    const int64_t at =
        (int64_t)(blockIdx.x / segs) * stride + (int64_t)(blockIdx.x % segs) * dim;
    __nv_bfloat16 *r = residual + at;
    const __nv_bfloat16 *d = delta ? delta + at : nullptr;
    __nv_bfloat16 *o = out + at;
    float ss = 0.0f;
    if (VEC == 8) {
        ss = add_sumsq8(r, d, dim);
    } else {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) {
            float x = __bfloat162float(r[c]);
            if (d) {
                __nv_bfloat16 s = __float2bfloat16_rn(x + __bfloat162float(d[c]));
                r[c] = s;
                x = __bfloat162float(s);
            }
            ss += x * x;
        }
    }
    if (!w) {            /* a post-norm layer's input: the stream itself */
        __syncthreads(); /* the words other threads added */
        if (o != r)
            for (int c = threadIdx.x; c < dim; c += blockDim.x)
                o[c] = r[c];
        return;
    }
    const float scale = rsqrtf(block_sum(ss, scratch) / (float)dim + eps);
    if (VEC == 8) {
        for (int c = threadIdx.x * 8; c < dim; c += blockDim.x * 8)
            *reinterpret_cast<uint4 *>(o + c) =
                norm8(*reinterpret_cast<const uint4 *>(r + c), w, c, scale, off);
    } else {
        for (int c = threadIdx.x; c < dim; c += blockDim.x)
            o[c] = off != 0.0f
                       ? __float2bfloat16_rn(__bfloat162float(r[c]) * scale *
                                             (__bfloat162float(w[c]) + off))
                       : __hmul_rn(__float2bfloat16_rn(__bfloat162float(r[c]) * scale),
                                   w[c]);
    }
}

static int aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

static kvcal_status add_rmsnorm_rows(kvcal_bf16 *out, kvcal_bf16 *residual,
                                     const kvcal_bf16 *delta, const kvcal_bf16 *w,
                                     int rows, int dim, int segs, int64_t stride,
                                     float eps, float off, cudaStream_t stream)
{
    if (rows == 0 || (!w && !delta && out == residual))
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *r = reinterpret_cast<__nv_bfloat16 *>(residual);
    auto *d = reinterpret_cast<const __nv_bfloat16 *>(delta);
    auto *g = reinterpret_cast<const __nv_bfloat16 *>(w);
    const int vec = dim % 8 == 0 && stride % 8 == 0 && aligned16(out) &&
                    aligned16(residual) && (!delta || aligned16(delta)) &&
                    (!w || aligned16(w));
    const int threads = kvcal_norm_threads(dim);
    const unsigned blocks = (unsigned)((int64_t)rows * segs);
    if (vec)
        add_rmsnorm_kernel<8>
            <<<blocks, threads, 0, stream>>>(o, r, d, g, dim, segs, stride, eps, off);
    else
        add_rmsnorm_kernel<1>
            <<<blocks, threads, 0, stream>>>(o, r, d, g, dim, segs, stride, eps, off);
    KVCAL_CUDA_CHECK_LAUNCH("add_rmsnorm_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_add_rmsnorm_launch(kvcal_bf16 *out, kvcal_bf16 *residual,
                                                 const kvcal_bf16 *delta,
                                                 const kvcal_bf16 *w, int rows, int dim,
                                                 float eps, cudaStream_t stream)
{
    if (!out || !residual || rows < 0 || dim <= 0 || !(eps >= 0.0f))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "add_rmsnorm: rows %d, dim %d, eps %g: need buffers, rows >= 0, "
            "dim > 0, eps >= 0",
            rows, dim, (double)eps);
    return add_rmsnorm_rows(out, residual, delta, w, rows, dim, 1, dim, eps, 0.0f,
                            stream);
}

extern "C" kvcal_status kvcal_add_rmsnorm_offset_launch(
    kvcal_bf16 *out, kvcal_bf16 *residual, const kvcal_bf16 *delta, const kvcal_bf16 *w,
    float offset, int rows, int dim, float eps, cudaStream_t stream)
{
    if (!out || !residual || rows < 0 || dim <= 0 || !(eps >= 0.0f) || !isfinite(offset))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "add_rmsnorm: rows %d, dim %d, eps %g, offset %g: need buffers, rows >= 0, "
            "dim > 0, eps >= 0, a finite offset",
            rows, dim, (double)eps, (double)offset);
    return add_rmsnorm_rows(out, residual, delta, w, rows, dim, 1, dim, eps, offset,
                            stream);
}

extern "C" kvcal_status kvcal_rmsnorm_cols_launch(kvcal_bf16 *x, int64_t stride,
                                                  const kvcal_bf16 *w, int rows, int segs,
                                                  int dim, float eps, cudaStream_t stream)
{
    if (!x || !w || rows < 0 || segs < 1 || dim <= 0 || stride < (int64_t)segs * dim ||
        !(eps >= 0.0f))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "rmsnorm_cols: rows %d, %d segments of %d, stride %lld, eps %g: "
            "need buffers, rows >= 0, segments >= 1 of dim > 0 within the "
            "stride, eps >= 0",
            rows, segs, dim, (long long)stride, (double)eps);
    return add_rmsnorm_rows(x, x, NULL, w, rows, dim, segs, stride, eps, 0.0f, stream);
}

// --- residual add + RMSNorm with the FP8 quantization as its epilogue ----------

/* A row a block pass of kvcal_norm_threads(dim) threads: add_rmsnorm_kernel<8>'s
 * arithmetic (the same passes, each thread the same words in the same
 * order), the row held in registers between them (CH words a thread, as
 * kernels/cuda/fp8_quant_row.cuh lays a row out) and quantized as
 * kvcal_fp8_quant_act_launch would quantize out (GROUP: through shared
 * memory, a block a row). S rows of the residual and delta staged ahead. */
template <kvcal_fp8_act_scale MODE, int CH, int S>
__global__ void
add_rmsnorm_quant_kernel(uint8_t *__restrict__ xq,                // (rows, dim)
                         float *__restrict__ xs,                  // scales
                         __nv_bfloat16 *__restrict__ residual,    // (rows, dim)
                         const __nv_bfloat16 *__restrict__ delta, // or NULL
                         const __nv_bfloat16 *__restrict__ w,     // (dim)
                         int rows, int dim, float eps, int group,
                         const float *input_scale)
{
    extern __shared__ uint4 smem[]; // S slots, or GROUP: (dim) the row's bf16
    __shared__ float scratch[2][32], part[2][32];
    __nv_bfloat16 *act = reinterpret_cast<__nv_bfloat16 *>(smem);
    const int t = threadIdx.x, tpr = blockDim.x;
    auto src = [=](int row, const __nv_bfloat16 **p) {
        p[0] = residual + (int64_t)row * dim;
        p[1] = delta ? delta + (int64_t)row * dim : nullptr;
        return dim;
    };
    kvcal_stage_start<S, CH, 2>(smem, rows, t, tpr, src);
    kvcal_stage_loop<S>(rows, [&](int row, int i) {
        const auto slot = kvcal_stage_slot<S, CH, 2>(smem, i, rows, src);
        __nv_bfloat16 *r = residual + (int64_t)row * dim;
        const __nv_bfloat16 *d = delta ? delta + (int64_t)row * dim : nullptr;
        uint4 v[CH];
        float ss = 0.0f, m = 0.0f;
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < dim)
                v[j] = add8w(kvcal_stage_word<S, 2>(slot, j, 0, c, r + c),
                             d ? kvcal_stage_word<S, 2>(slot, j, 1, c, d + c)
                               : make_uint4(0, 0, 0, 0),
                             d != nullptr, r, c, &ss);
        }
        kvcal_stage_done<S>();
        const float scale = rsqrtf(block_sum(ss, scratch[i & 1]) / (float)dim + eps);
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < dim) {
                v[j] = norm8(v[j], w, c, scale, 0.0f);
                m = kvcal_bf16x8_absmax(v[j], m);
                if (MODE == KVCAL_FP8A_GROUP)
                    *reinterpret_cast<uint4 *>(act + c) = v[j];
            }
        }
        if (MODE == KVCAL_FP8A_GROUP)
            kvcal_fp8_quant_groups(act, dim, xq + (int64_t)row * dim, xs, row, rows,
                                   group);
        else
            kvcal_fp8_quant_regs<MODE, CH>(v, t, tpr, dim, m, xq + (int64_t)row * dim,
                                           xs + row, input_scale, part[i & 1]);
    });
}

/* Shared memory of add_rmsnorm_quant_kernel per group: the row, at most the
 * default 48 KiB a block (hidden sizes up to 24,576, 12 words a thread). */
enum { NORM_QUANT_SMEM_MAX = 48 * 1024 };

extern "C" int kvcal_fp8_add_rmsnorm_quant_fits(const kvcal_bf16 *residual,
                                                const kvcal_bf16 *delta,
                                                const kvcal_bf16 *w, int dim)
{
    return dim > 0 && dim % 8 == 0 &&
           (size_t)dim * sizeof(__nv_bfloat16) <= NORM_QUANT_SMEM_MAX && residual && w &&
           aligned16(residual) && (!delta || aligned16(delta)) && aligned16(w);
}

/* Words a thread of add_rmsnorm_quant_kernel holds: up to 2 or 4 (rows
 * staged NORM_STAGES ahead, per token and static), else up to 12 (256
 * threads: dim up to 24,576; a block a row). */
enum { NORM_STAGES = 2 };

template <kvcal_fp8_act_scale MODE, int CH, int S>
static kvcal_status add_rmsnorm_quant_ch(uint8_t *xq, float *xs, kvcal_bf16 *residual,
                                         const kvcal_bf16 *delta, const kvcal_bf16 *w,
                                         int rows, int dim, float eps, int group,
                                         const float *input_scale, cudaStream_t stream)
{
    const int block = kvcal_norm_threads(dim);
    const size_t stage = (size_t)S * kvcal_stage_words<CH, 2>(block) * sizeof(uint4);
    const size_t smem =
        MODE == KVCAL_FP8A_GROUP ? (size_t)dim * sizeof(__nv_bfloat16) : stage;
    unsigned grid;
    kvcal_status st = kvcal_stage_grid(add_rmsnorm_quant_kernel<MODE, CH, S>, block,
                                       stage, rows, &grid);
    if (st)
        return st;
    add_rmsnorm_quant_kernel<MODE, CH, S><<<grid, block, smem, stream>>>(
        xq, xs, reinterpret_cast<__nv_bfloat16 *>(residual),
        reinterpret_cast<const __nv_bfloat16 *>(delta),
        reinterpret_cast<const __nv_bfloat16 *>(w), rows, dim, eps, group, input_scale);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_add_rmsnorm_quant_kernel");
    return KVCAL_OK;
}

template <kvcal_fp8_act_scale MODE>
static kvcal_status add_rmsnorm_quant(uint8_t *xq, float *xs, kvcal_bf16 *residual,
                                      const kvcal_bf16 *delta, const kvcal_bf16 *w,
                                      int rows, int dim, float eps, int group,
                                      const float *input_scale, cudaStream_t stream)
{
    constexpr int S = MODE == KVCAL_FP8A_GROUP ? 0 : NORM_STAGES;
    if (dim <= 2 * 8 * kvcal_norm_threads(dim))
        return add_rmsnorm_quant_ch<MODE, 2, S>(xq, xs, residual, delta, w, rows, dim,
                                                eps, group, input_scale, stream);
    if (dim <= 4 * 8 * kvcal_norm_threads(dim))
        return add_rmsnorm_quant_ch<MODE, 4, S>(xq, xs, residual, delta, w, rows, dim,
                                                eps, group, input_scale, stream);
    return add_rmsnorm_quant_ch<MODE, 12, 0>(xq, xs, residual, delta, w, rows, dim, eps,
                                             group, input_scale, stream);
}

extern "C" kvcal_status kvcal_fp8_add_rmsnorm_quant_launch(
    uint8_t *xq, float *xs, kvcal_bf16 *residual, const kvcal_bf16 *delta,
    const kvcal_bf16 *w, int rows, int dim, float eps, kvcal_fp8_act_scale mode,
    int group, const float *input_scale, cudaStream_t stream)
{
    if (rows < 0 || !xq || !xs || !(eps >= 0.0f) || (uintptr_t)xq % 8 ||
        !kvcal_fp8_add_rmsnorm_quant_fits(residual, delta, w, dim) ||
        (mode == KVCAL_FP8A_GROUP && group <= 0) ||
        (mode == KVCAL_FP8A_STATIC && !input_scale) || mode == KVCAL_FP8A_NONE)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_add_rmsnorm_quant: rows %d, dim %d, eps %g, mode %d, group "
            "%d: need buffers (residual, delta and w 16-byte, xq 8-byte "
            "aligned), a dim that kvcal_fp8_add_rmsnorm_quant_fits, eps >= "
            "0, a mode and its scale",
            rows, dim, (double)eps, (int)mode, group);
    if (rows == 0)
        return KVCAL_OK;
    if (mode == KVCAL_FP8A_GROUP)
        return add_rmsnorm_quant<KVCAL_FP8A_GROUP>(xq, xs, residual, delta, w, rows, dim,
                                                   eps, group, NULL, stream);
    if (mode == KVCAL_FP8A_TOKEN)
        return add_rmsnorm_quant<KVCAL_FP8A_TOKEN>(xq, xs, residual, delta, w, rows, dim,
                                                   eps, 0, NULL, stream);
    return add_rmsnorm_quant<KVCAL_FP8A_STATIC>(xq, xs, residual, delta, w, rows, dim,
                                                eps, 0, input_scale, stream);
}

// --- SwiGLU ------------------------------------------------------------------

/* transformers' gelu_pytorch_tanh */
static __device__ __forceinline__ float gelu_tanh(float g)
{
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

/* GeGLU: act(gate) rounded to bf16 (as a bf16 model's activation gives it),
 * times up, rounded. */
__global__ void geglu_kernel(__nv_bfloat16 *__restrict__ out,           // (rows, n)
                             const __nv_bfloat16 *__restrict__ gate_up, // (rows, 2n)
                             int64_t rows, int n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / n;
        const int c = (int)(i - row * n);
        const __nv_bfloat16 *gp = gate_up + row * 2 * n + c;
        out[i] = __hmul_rn(__float2bfloat16_rn(gelu_tanh(__bfloat162float(*gp))), gp[n]);
    }
}

/* out (n) = x * a + b in fp32, rounded once: the embedding's scale, a norm
 * weight's offset. */
__global__ void affine_kernel(__nv_bfloat16 *__restrict__ out, const __nv_bfloat16 *x,
                              int64_t n, float a, float b)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * a + b);
}

/* x (rows, cols of stride) row t times 1 + scale ln(1 + floor((pos[t] + 1)
 * / floor_scale)) in fp32, rounded once; rows with pos < 0 left as they are. */
__global__ void query_temperature_kernel(__nv_bfloat16 *__restrict__ x, int64_t stride,
                                         const int32_t *__restrict__ pos, int rows,
                                         int cols, float scale, float floor_scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
         i < (int64_t)rows * cols; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / cols;
        if (pos[t] < 0)
            continue;
        const float f =
            log1pf(floorf(((float)pos[t] + 1.0f) / floor_scale)) * scale + 1.0f;
        __nv_bfloat16 *v = x + t * stride + (i - t * cols);
        *v = __float2bfloat16_rn(__bfloat162float(*v) * f);
    }
}

static unsigned grid_of(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return (unsigned)(blocks > 132 * 32 ? 132 * 32 : blocks < 1 ? 1 : blocks);
}

extern "C" kvcal_status kvcal_geglu_launch(kvcal_bf16 *out, const kvcal_bf16 *gate_up,
                                           int rows, int n, cudaStream_t stream)
{
    if (!out || !gate_up || rows < 0 || n <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "geglu: rows %d, n %d: need buffers, rows >= 0, n > 0", rows,
                          n);
    if (rows == 0)
        return KVCAL_OK;
    geglu_kernel<<<grid_of((int64_t)rows * n, 256), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(gate_up), rows, n);
    KVCAL_CUDA_CHECK_LAUNCH("geglu_kernel");
    return KVCAL_OK;
}

__global__ void softcap_kernel(__nv_bfloat16 *__restrict__ x, int64_t n, float cap)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(cap * tanhf(__bfloat162float(x[i]) / cap));
}

extern "C" kvcal_status kvcal_softcap_launch(kvcal_bf16 *x, int64_t n, float cap,
                                             cudaStream_t stream)
{
    if (!x || n < 0 || !(cap > 0.0f) || !isfinite(cap))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "softcap: n %lld, cap %g: need a buffer, n >= 0 and a finite cap > 0",
            (long long)n, (double)cap);
    if (n == 0)
        return KVCAL_OK;
    softcap_kernel<<<grid_of(n, 256), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(x), n, cap);
    KVCAL_CUDA_CHECK_LAUNCH("softcap_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_affine_launch(kvcal_bf16 *out, const kvcal_bf16 *x,
                                            int64_t n, float a, float b,
                                            cudaStream_t stream)
{
    if (!out || !x || n < 0 || !isfinite(a) || !isfinite(b))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "affine: n %lld, a %g, b %g: need buffers, n >= 0, finite a and b",
            (long long)n, (double)a, (double)b);
    if (n == 0)
        return KVCAL_OK;
    affine_kernel<<<grid_of(n, 256), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(x), n, a, b);
    KVCAL_CUDA_CHECK_LAUNCH("affine_kernel");
    return KVCAL_OK;
}

/* VEC 8: n % 8 == 0; grid-stride over rows * n / VEC groups. */
template <int VEC>
__global__ void swiglu_kernel(__nv_bfloat16 *__restrict__ out,           // (rows, n)
                              const __nv_bfloat16 *__restrict__ gate_up, // (rows, 2n)
                              int64_t rows, int n)
{
    const int64_t groups = rows * (n / VEC);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < groups;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / (n / VEC);
        const int c = (int)(i - row * (n / VEC)) * VEC;
        const __nv_bfloat16 *gp = gate_up + row * 2 * n + c;
        __nv_bfloat16 *op = out + row * n + c;
        if (VEC == 8) {
            bf16x8 g, u;
            g.u = *reinterpret_cast<const uint4 *>(gp);
            u.u = *reinterpret_cast<const uint4 *>(gp + n);
            for (int k = 0; k < 4; k++)
                g.h[k] = kvcal_swiglu2_bf16(g.h[k], u.h[k]);
            *reinterpret_cast<uint4 *>(op) = g.u;
        } else {
            *op =
                __hmul_rn(__float2bfloat16_rn(kvcal_silu(__bfloat162float(*gp))), gp[n]);
        }
    }
}

extern "C" kvcal_status kvcal_swiglu_launch(kvcal_bf16 *out, const kvcal_bf16 *gate_up,
                                            int rows, int n, cudaStream_t stream)
{
    if (!out || !gate_up || rows < 0 || n <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "swiglu: rows %d, n %d: need buffers, rows >= 0, n > 0", rows,
                          n);
    if (rows == 0)
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *gu = reinterpret_cast<const __nv_bfloat16 *>(gate_up);
    const int vec = n % 8 == 0 && aligned16(out) && aligned16(gate_up);
    const int64_t groups = (int64_t)rows * (vec ? n / 8 : n);
    const int threads = 256;
    int64_t blocks = (groups + threads - 1) / threads;
    if (blocks > 132 * 32)
        blocks = 132 * 32;
    if (vec)
        swiglu_kernel<8><<<(unsigned)blocks, threads, 0, stream>>>(o, gu, rows, n);
    else
        swiglu_kernel<1><<<(unsigned)blocks, threads, 0, stream>>>(o, gu, rows, n);
    KVCAL_CUDA_CHECK_LAUNCH("swiglu_kernel");
    return KVCAL_OK;
}

/* gpt-oss's clamped SwiGLU of each row's halves (kvcal_swiglu_oai). */
__global__ void swiglu_oai_kernel(__nv_bfloat16 *__restrict__ out,           // (rows, n)
                                  const __nv_bfloat16 *__restrict__ gate_up, // (rows, 2n)
                                  int64_t rows, int n, float alpha, float limit)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / n;
        const int c = (int)(i - row * n);
        const __nv_bfloat16 *gp = gate_up + row * 2 * n + c;
        out[i] = __float2bfloat16_rn(kvcal_swiglu_oai(
            __bfloat162float(gp[0]), __bfloat162float(gp[n]), alpha, limit));
    }
}

extern "C" kvcal_status kvcal_swiglu_oai_launch(kvcal_bf16 *out,
                                                const kvcal_bf16 *gate_up, int rows,
                                                int n, float alpha, float limit,
                                                cudaStream_t stream)
{
    if (!out || !gate_up || rows < 0 || n <= 0 || !isfinite(alpha) || !(limit > 0.0f))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "swiglu_oai: rows %d, n %d, alpha %g, limit %g: need buffers, rows "
            ">= 0, n > 0, a finite alpha and a limit > 0",
            rows, n, (double)alpha, (double)limit);
    if (rows == 0)
        return KVCAL_OK;
    swiglu_oai_kernel<<<grid_of((int64_t)rows * n, 256), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(out),
        reinterpret_cast<const __nv_bfloat16 *>(gate_up), rows, n, alpha, limit);
    KVCAL_CUDA_CHECK_LAUNCH("swiglu_oai_kernel");
    return KVCAL_OK;
}

// --- embedding gather ----------------------------------------------------------

/* One block per row; VEC 8: dim % 8 == 0 and aligned rows. */
template <int VEC>
__global__ void embed_kernel(__nv_bfloat16 *__restrict__ out,         // (n, dim)
                             const __nv_bfloat16 *__restrict__ table, // (vocab, dim)
                             const int32_t *__restrict__ ids,         // (n)
                             int dim)
{
    const int64_t row = blockIdx.x;
    const int id = ids[row];
    __nv_bfloat16 *o = out + row * dim;
    const __nv_bfloat16 *src = table + (int64_t)(id < 0 ? 0 : id) * dim;
    for (int c = threadIdx.x * VEC; c < dim; c += blockDim.x * VEC) {
        if (VEC == 8)
            *reinterpret_cast<uint4 *>(o + c) =
                id < 0 ? make_uint4(0, 0, 0, 0)
                       : *reinterpret_cast<const uint4 *>(src + c);
        else
            o[c] = id < 0 ? __float2bfloat16_rn(0.0f) : src[c];
    }
}

extern "C" kvcal_status kvcal_embed_launch(kvcal_bf16 *out, const kvcal_bf16 *table,
                                           const int32_t *ids, int n, int dim,
                                           cudaStream_t stream)
{
    if (!out || !table || !ids || n < 0 || dim <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "embed: n %d, dim %d: need buffers, n >= 0 and dim > 0", n,
                          dim);
    if (n == 0)
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *t = reinterpret_cast<const __nv_bfloat16 *>(table);
    if (dim % 8 == 0 && aligned16(out) && aligned16(table))
        embed_kernel<8><<<n, 128, 0, stream>>>(o, t, ids, dim);
    else
        embed_kernel<1><<<n, 128, 0, stream>>>(o, t, ids, dim);
    KVCAL_CUDA_CHECK_LAUNCH("embed_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_query_temperature_launch(kvcal_bf16 *x, int64_t stride,
                                                       const int32_t *pos, int rows,
                                                       int cols, float scale,
                                                       float floor_scale,
                                                       cudaStream_t stream)
{
    if (!x || !pos || rows < 0 || cols < 1 || stride < cols || !isfinite(scale) ||
        !(floor_scale > 0.0f))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "query_temperature: rows %d, cols %d, stride %lld, scale %g, "
                          "floor %g: need buffers, rows >= 0, 1 <= cols <= stride, a "
                          "finite scale and a floor > 0",
                          rows, cols, (long long)stride, (double)scale,
                          (double)floor_scale);
    if (rows == 0)
        return KVCAL_OK;
    query_temperature_kernel<<<grid_of((int64_t)rows * cols, 256), 256, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(x), stride, pos, rows, cols, scale,
        floor_scale);
    KVCAL_CUDA_CHECK_LAUNCH("query_temperature_kernel");
    return KVCAL_OK;
}
