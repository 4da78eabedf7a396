/* kernels/cuda/eval.cu: the reductions of `kvcal eval`: next-token NLL of
 * bf16 logits rows and the error sums of a tensor against its FP8 round
 * trip (see eval.h). */
#include <cuda_bf16.h>

#include "core/fp8.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/eval.h"

#define EVAL_THREADS 256

// --- helpers -----------------------------------------------------------------

/* Reduces v over the block with op, in a fixed order; every thread gets the
 * result. scratch holds 32 values; blockDim.x a multiple of 32. */
template <typename T, typename Op>
static __device__ __forceinline__ T block_reduce(T v, T *scratch, Op op)
{
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        v = op(v, scratch[w]);
    __syncthreads();
    return v;
}

struct op_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct op_add {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};

// --- next-token NLL ----------------------------------------------------------

/* One block per row: max, then the sum of exp(z - max), in fp32. */
__global__ void
token_nll_kernel(float *__restrict__ nll,                  // (rows)
                 const __nv_bfloat16 *__restrict__ logits, // (rows, vocab)
                 const int32_t *__restrict__ target,       // (rows)
                 int vocab)
{
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x;
    const int t = target[row];
    if (t < 0) {
        if (threadIdx.x == 0)
            nll[row] = 0.0f;
        return;
    }
    const __nv_bfloat16 *z = logits + row * vocab;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        m = fmaxf(m, __bfloat162float(z[i]));
    m = block_reduce(m, scratch, op_max());
    float sum = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        sum += expf(__bfloat162float(z[i]) - m);
    sum = block_reduce(sum, scratch, op_add());
    if (threadIdx.x == 0)
        nll[row] = m + logf(sum) - __bfloat162float(z[t]);
}

kvcal_status kvcal_token_nll_launch(float *nll, const kvcal_bf16 *logits,
                                    const int32_t *target, int rows, int vocab,
                                    cudaStream_t stream)
{
    if (rows < 0 || vocab <= 0 || (rows > 0 && (!nll || !logits || !target)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "token_nll: %d rows x vocab %d: need rows >= 0, vocab >= 1 "
                          "and non-NULL nll, logits and target",
                          rows, vocab);
    if (rows == 0)
        return KVCAL_OK;
    token_nll_kernel<<<rows, EVAL_THREADS, 0, stream>>>(
        nll, reinterpret_cast<const __nv_bfloat16 *>(logits), target, vocab);
    KVCAL_CUDA_CHECK_LAUNCH("token_nll_kernel");
    return KVCAL_OK;
}

// --- the baseline's distributions, and a run's against them ----------------------

/* One block per kept row: the row copied, its logsumexp in fp32. */
__global__ void
token_keep_kernel(__nv_bfloat16 *__restrict__ ref,          // (kept, vocab)
                  float *__restrict__ ref_lse,              // (kept)
                  const __nv_bfloat16 *__restrict__ logits, // (rows, vocab)
                  const int64_t *__restrict__ keep,         // (rows)
                  int vocab)
{
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x, k = keep[row];
    if (k < 0)
        return;
    const __nv_bfloat16 *z = logits + row * vocab;
    __nv_bfloat16 *out = ref + k * vocab;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        out[i] = z[i];
        m = fmaxf(m, __bfloat162float(z[i]));
    }
    m = block_reduce(m, scratch, op_max());
    float sum = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        sum += expf(__bfloat162float(z[i]) - m);
    sum = block_reduce(sum, scratch, op_add());
    if (threadIdx.x == 0)
        ref_lse[k] = m + logf(sum);
}

/* The first index of the block's largest value: (v, i) pairs reduced, ties
 * to the lower index; every thread gets it. */
static __device__ __forceinline__ int block_first_max(float v, int i, float *vs, int *is)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi < i))
            v = ov, i = oi;
    }
    if ((threadIdx.x & 31) == 0)
        vs[threadIdx.x >> 5] = v, is[threadIdx.x >> 5] = i;
    __syncthreads();
    v = vs[0], i = is[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (vs[w] > v || (vs[w] == v && is[w] < i))
            v = vs[w], i = is[w];
    __syncthreads();
    return i;
}

/* One block per row: the run's max and logsumexp, both rows' first
 * largest token, then sum p (log p - log q) over the vocabulary. */
__global__ void
token_kld_kernel(float *__restrict__ kld,                  // (rows)
                 float *__restrict__ top,                  // (rows)
                 const __nv_bfloat16 *__restrict__ logits, // (rows, vocab)
                 const __nv_bfloat16 *__restrict__ ref,    // (kept, vocab)
                 const float *__restrict__ ref_lse,        // (kept)
                 const int64_t *__restrict__ keep,         // (rows)
                 int vocab)
{
    __shared__ float scratch[32];
    __shared__ int iscratch[32];
    const int64_t row = blockIdx.x, k = keep[row];
    if (k < 0) {
        if (threadIdx.x == 0)
            kld[row] = top[row] = 0.0f;
        return;
    }
    const __nv_bfloat16 *z = logits + row * vocab, *b = ref + k * vocab;
    float mz = -INFINITY, mb = -INFINITY;
    int iz = vocab, ib = vocab;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float zi = __bfloat162float(z[i]), bi = __bfloat162float(b[i]);
        if (zi > mz)
            mz = zi, iz = i;
        if (bi > mb)
            mb = bi, ib = i;
    }
    const float m = block_reduce(mz, scratch, op_max());
    iz = block_first_max(mz, iz, scratch, iscratch);
    ib = block_first_max(mb, ib, scratch, iscratch);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        sum += expf(__bfloat162float(z[i]) - m);
    sum = block_reduce(sum, scratch, op_add());
    const float lse = m + logf(sum), lse_b = ref_lse[k];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float lp = __bfloat162float(b[i]) - lse_b;
        acc += expf(lp) * (lp - (__bfloat162float(z[i]) - lse));
    }
    acc = block_reduce(acc, scratch, op_add());
    if (threadIdx.x == 0) {
        kld[row] = acc;
        top[row] = iz == ib ? 1.0f : 0.0f;
    }
}

static kvcal_status check_head_args(const char *op, const void *a, const void *b,
                                    const void *c, const void *d, int rows, int vocab)
{
    if (rows < 0 || vocab <= 0 || (rows > 0 && (!a || !b || !c || !d)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: %d rows x vocab %d: need rows >= 0, vocab >= 1 and "
                          "non-NULL buffers",
                          op, rows, vocab);
    return KVCAL_OK;
}

kvcal_status kvcal_token_keep_launch(kvcal_bf16 *ref, float *ref_lse,
                                     const kvcal_bf16 *logits, const int64_t *keep,
                                     int rows, int vocab, cudaStream_t stream)
{
    kvcal_status st =
        check_head_args("token_keep", ref, ref_lse, logits, keep, rows, vocab);
    if (st || rows == 0)
        return st;
    token_keep_kernel<<<rows, EVAL_THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(ref), ref_lse,
        reinterpret_cast<const __nv_bfloat16 *>(logits), keep, vocab);
    KVCAL_CUDA_CHECK_LAUNCH("token_keep_kernel");
    return KVCAL_OK;
}

kvcal_status kvcal_token_kld_launch(float *kld, float *top, const kvcal_bf16 *logits,
                                    const kvcal_bf16 *ref, const float *ref_lse,
                                    const int64_t *keep, int rows, int vocab,
                                    cudaStream_t stream)
{
    kvcal_status st = check_head_args("token_kld", kld, top, logits, ref, rows, vocab);
    if (!st)
        st = check_head_args("token_kld", ref_lse, keep, logits, ref, rows, vocab);
    if (st || rows == 0)
        return st;
    token_kld_kernel<<<rows, EVAL_THREADS, 0, stream>>>(
        kld, top, reinterpret_cast<const __nv_bfloat16 *>(logits),
        reinterpret_cast<const __nv_bfloat16 *>(ref), ref_lse, keep, vocab);
    KVCAL_CUDA_CHECK_LAUNCH("token_kld_kernel");
    return KVCAL_OK;
}

// --- error sums --------------------------------------------------------------

static __device__ __forceinline__ float load(const float *p, int64_t i)
{
    return p[i];
}
static __device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i)
{
    return __bfloat162float(p[i]);
}

/* Blocks stride over rows, threads over a row's columns; each block adds
 * its partial sums to *sums once. */
template <typename Y>
__global__ void error_sums_kernel(kvcal_error_sums *__restrict__ sums,
                                  const __nv_bfloat16 *x, // (rows, cols) stride x_stride
                                  int64_t x_stride,
                                  const Y *__restrict__ y, // (rows, cols) stride y_stride
                                  int64_t y_stride,
                                  const float *__restrict__ scale, // (rows, cols / group)
                                  int group,
                                  const int32_t *__restrict__ pos, // (rows) or NULL
                                  int rows, int cols,
                                  __nv_bfloat16 *store) // (rows, cols) stride x_stride
{
    __shared__ double dscratch[32];
    __shared__ unsigned long long uscratch[32];
    const int groups = scale ? cols / group : 0;
    double x2 = 0.0, e2 = 0.0;
    unsigned long long clipped = 0, n = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        if (pos && pos[r] < 0)
            continue;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const float xv = __bfloat162float(x[r * x_stride + c]);
            const float yv = load(y, r * y_stride + c);
            const double e = (double)yv - xv;
            x2 += (double)xv * xv;
            e2 += e * e;
            if (scale)
                clipped +=
                    fabsf(xv) * (1.0f / scale[r * groups + c / group]) > KVCAL_CLIP_RATIO;
            if (store)
                store[r * x_stride + c] = __float2bfloat16_rn(yv);
        }
        n += (unsigned long long)cols;
    }
    x2 = block_reduce(x2, dscratch, op_add());
    e2 = block_reduce(e2, dscratch, op_add());
    clipped = block_reduce(clipped, uscratch, op_add());
    if (threadIdx.x == 0 && n) {
        atomicAdd(&sums->x2, x2);
        atomicAdd(&sums->e2, e2);
        atomicAdd(&sums->clipped, clipped);
        atomicAdd(&sums->n, n);
    }
}

kvcal_status kvcal_error_sums_launch(kvcal_error_sums *sums, const kvcal_bf16 *x,
                                     int64_t x_stride, const void *y, int64_t y_stride,
                                     kvcal_dtype y_dtype, const float *scale, int group,
                                     const int32_t *pos, int rows, int cols,
                                     kvcal_bf16 *store, cudaStream_t stream)
{
    if (rows < 0 || cols <= 0 || x_stride < cols || y_stride < cols ||
        (scale && (group <= 0 || cols % group)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "error_sums: %d rows x %d columns, strides %lld / %lld, group "
                          "%d: strides must be >= columns and the group divide them",
                          rows, cols, (long long)x_stride, (long long)y_stride, group);
    if (rows > 0 && (!sums || !x || !y))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "error_sums: %d rows: sums, x or y is NULL: pass all three",
                          rows);
    if (y_dtype != KVCAL_DTYPE_F32 && y_dtype != KVCAL_DTYPE_BF16)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "error_sums: y dtype %d: expected F32 or BF16", (int)y_dtype);
    if (rows == 0)
        return KVCAL_OK;
    const int blocks = rows < 1024 ? rows : 1024;
    const __nv_bfloat16 *xb = reinterpret_cast<const __nv_bfloat16 *>(x);
    __nv_bfloat16 *sb = reinterpret_cast<__nv_bfloat16 *>(store);
    if (y_dtype == KVCAL_DTYPE_F32)
        error_sums_kernel<<<blocks, EVAL_THREADS, 0, stream>>>(
            sums, xb, x_stride, static_cast<const float *>(y), y_stride, scale, group,
            pos, rows, cols, sb);
    else
        error_sums_kernel<<<blocks, EVAL_THREADS, 0, stream>>>(
            sums, xb, x_stride, static_cast<const __nv_bfloat16 *>(y), y_stride, scale,
            group, pos, rows, cols, sb);
    KVCAL_CUDA_CHECK_LAUNCH("error_sums_kernel");
    return KVCAL_OK;
}

__global__ void fp8_roundtrip_kernel(__nv_bfloat16 *x, int64_t stride, int rows, int cols,
                                     float scale)
{
    const float inv = 1.0f / scale;
    const int64_t n = (int64_t)rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 *p = x + (i / cols) * stride + i % cols;
        const float v = __bfloat162float(*p);
        *p = __float2bfloat16_rn(
            kvcal_fp8_e4m3_to_float(kvcal_fp8_e4m3_from_float(v * inv)) * scale);
    }
}

kvcal_status kvcal_fp8_roundtrip_launch(kvcal_bf16 *x, int64_t stride, int rows, int cols,
                                        float scale, cudaStream_t stream)
{
    if (rows < 0 || cols <= 0 || stride < cols || !(scale > 0.0f && isfinite(scale)) ||
        (rows > 0 && !x))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_roundtrip: %d rows x %d columns, stride %lld, scale %g: need "
            "stride >= columns, a buffer and a finite scale > 0",
            rows, cols, (long long)stride, (double)scale);
    if (rows == 0)
        return KVCAL_OK;
    const int64_t n = (int64_t)rows * cols;
    const int blocks = (int)(n / EVAL_THREADS + 1 < 4096 ? n / EVAL_THREADS + 1 : 4096);
    fp8_roundtrip_kernel<<<blocks, EVAL_THREADS, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16 *>(x), stride, rows, cols, scale);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_roundtrip_kernel");
    return KVCAL_OK;
}
