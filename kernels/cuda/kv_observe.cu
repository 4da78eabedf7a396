// kernels/cuda/kv_observe.cu: an engine's K and V folded into device
// statistics (kernels/cuda/kv_observe.h), bit for bit what
// kvcal_stats_observe_ref and kvcal_stats_end_batch compute on the host.
//
// Work split: one block per (token chunk, kv head, K/V). A block bins its
// values into a shared histogram and a shared per-channel max (|x| as
// unsigned bits: non-negative floats order as their bits), then adds them
// to the device statistics with one atomic per non-empty bin and channel.
// absmax and histograms are order-independent, so the result is exact
// whatever the order the blocks run in.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

extern "C" {
#include "core/status.h"
}
#include "core/hist_rule.h"
#include "kernels/cuda/kv_observe.h"

#define CUDA_TRY(call)                                                                   \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess)                                                         \
            return kvcal_fail(KVCAL_ERR_CUDA, "%s:%d: %s: %s", __FILE__, __LINE__,       \
                              #call, cudaGetErrorString(err_));                          \
    } while (0)

namespace
{

constexpr int kThreads = 256;
constexpr int kElemsPerBlock = 8192; // values of one head a block bins

struct Observe {
    const void *src[2];      // (num_tokens, H, head_dim) strided, K and V
    int64_t token_stride[2]; // elements
    int64_t head_stride[2];
    const int64_t *slots; // (num_tokens) or NULL
    int64_t num_tokens;
    int tokens_per_block;
    int layer;
    kvcal_kv_stats_device s;
};

__device__ __forceinline__ float to_float(float x)
{
    return x;
}
__device__ __forceinline__ float to_float(__half x)
{
    return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) kv_observe_kernel(Observe o)
{
    extern __shared__ unsigned smem[];
    unsigned *hist = smem;                   // (KVCAL_HIST_BINS)
    unsigned *cmax = smem + KVCAL_HIST_BINS; // (head_dim) bits of max |x|
    __shared__ unsigned tokens;
    const int kv = blockIdx.y & 1, h = blockIdx.y >> 1;
    const int D = o.s.head_dim, H = o.s.num_kv_heads;
    for (int i = threadIdx.x; i < KVCAL_HIST_BINS; i += kThreads)
        hist[i] = 0;
    for (int i = threadIdx.x; i < D; i += kThreads)
        cmax[i] = 0;
    if (threadIdx.x == 0)
        tokens = 0;
    __syncthreads();
    const int64_t t0 = (int64_t)blockIdx.x * o.tokens_per_block;
    const int64_t rest = o.num_tokens - t0;
    const int nt = rest < o.tokens_per_block ? (int)rest : o.tokens_per_block;
    const T *x = static_cast<const T *>(o.src[kv]) + h * o.head_stride[kv];
    const bool count = kv == KVCAL_K && h == 0;
    for (int e = threadIdx.x; e < nt * D; e += kThreads) {
        const int64_t t = t0 + e / D;
        const int c = e % D;
        if (o.slots && o.slots[t] < 0)
            continue;
        const float v = to_float(x[t * o.token_stride[kv] + c]);
        const float a = fabsf(v);
        if (!(a <= 3.4028234663852886e38f)) {
            kvcal_kv_observe_error *err = &o.s.aux->err;
            if (atomicCAS(reinterpret_cast<int *>(&err->flag), 0, 1) == 0) {
                err->layer = o.layer;
                err->kv = kv;
                err->head = h;
                err->token = t;
                err->channel = c;
                err->value = v;
            }
            continue;
        }
        atomicMax(&cmax[c], __float_as_uint(a));
        atomicAdd(&hist[kvcal_hist_bin(a)], 1u);
        if (count && c == 0)
            atomicAdd(&tokens, 1u);
    }
    __syncthreads();
    const size_t lh = (size_t)o.layer * H + h;
    unsigned long long *gh =
        reinterpret_cast<unsigned long long *>(o.s.hist[kv] + lh * KVCAL_HIST_BINS);
    for (int i = threadIdx.x; i < KVCAL_HIST_BINS; i += kThreads)
        if (hist[i])
            atomicAdd(&gh[i], (unsigned long long)hist[i]);
    unsigned *ga = reinterpret_cast<unsigned *>(o.s.absmax[kv] + lh * D);
    unsigned *gb = reinterpret_cast<unsigned *>(o.s.batch_absmax[kv] + lh);
    for (int i = threadIdx.x; i < D; i += kThreads)
        if (cmax[i]) {
            atomicMax(&ga[i], cmax[i]);
            atomicMax(gb, cmax[i]);
        }
    if (threadIdx.x == 0 && tokens)
        atomicAdd(reinterpret_cast<unsigned long long *>(o.s.tokens + o.layer),
                  (unsigned long long)tokens);
}

// One block: kvcal_stats_end_batch. The products and sums are rounded one
// by one (no fused multiply-add), as the host computes them.
__global__ void __launch_bounds__(kThreads)
    kv_observe_end_batch_kernel(kvcal_kv_stats_device s, double decay)
{
    __shared__ long long total;
    const int L = s.num_layers, H = s.num_kv_heads;
    if (threadIdx.x == 0) {
        long long n = 0;
        for (int l = 0; l < L; l++)
            n += s.tokens[l];
        total = n;
    }
    __syncthreads();
    const bool empty = total == s.aux->batch_start_tokens;
    const long long batches = s.aux->batches;
    const double keep = 1.0 - decay;
    for (int i = threadIdx.x; !empty && i < 2 * L; i += kThreads) {
        const int kv = i / L, l = i % L;
        double layer_max = 0.0;
        for (int h = 0; h < H; h++) {
            const size_t j = (size_t)l * H + h;
            const double x = s.batch_absmax[kv][j];
            double *e = &s.ema[kv][j];
            *e = batches == 0 ? x : __dadd_rn(__dmul_rn(decay, *e), __dmul_rn(keep, x));
            layer_max = x > layer_max ? x : layer_max;
        }
        double *e = &s.ema_tensor[kv][l];
        *e = batches == 0 ? layer_max
                          : __dadd_rn(__dmul_rn(decay, *e), __dmul_rn(keep, layer_max));
    }
    __syncthreads();
    for (size_t i = threadIdx.x; i < (size_t)L * H; i += kThreads) {
        s.batch_absmax[0][i] = 0.0f;
        s.batch_absmax[1][i] = 0.0f;
    }
    if (threadIdx.x == 0) {
        if (!empty)
            s.aux->batches = batches + 1;
        s.aux->batch_start_tokens = total;
    }
}

// The signed range: one block per (token chunk, kv head, K/V), as
// kv_observe_kernel; a channel's max(x, 0) and max(-x, 0) as float bits
// (non-negative: integer order is float order) by atomicMax in shared, then
// global memory. Non-finite values are left to kv_observe_kernel / the fused
// observer, which report them.
template <typename T>
__global__ void __launch_bounds__(kThreads) kv_range_kernel(Observe o, kvcal_kv_range r)
{
    extern __shared__ unsigned srange[]; // (2, head_dim): max(x, 0), max(-x, 0)
    const int kv = blockIdx.y & 1, h = blockIdx.y >> 1;
    const int D = o.s.head_dim;
    for (int i = threadIdx.x; i < 2 * D; i += kThreads)
        srange[i] = 0;
    __syncthreads();
    const int64_t t0 = (int64_t)blockIdx.x * o.tokens_per_block;
    const int64_t rest = o.num_tokens - t0;
    const int nt = rest < o.tokens_per_block ? (int)rest : o.tokens_per_block;
    const T *x = static_cast<const T *>(o.src[kv]) + h * o.head_stride[kv];
    for (int e = threadIdx.x; e < nt * D; e += kThreads) {
        const int64_t t = t0 + e / D;
        const int c = e % D;
        if (o.slots && o.slots[t] < 0)
            continue;
        const float v = to_float(x[t * o.token_stride[kv] + c]);
        if (v > 0.0f && v <= 3.4028234663852886e38f)
            atomicMax(&srange[c], __float_as_uint(v));
        else if (v < 0.0f && v >= -3.4028234663852886e38f)
            atomicMax(&srange[D + c], __float_as_uint(-v));
    }
    __syncthreads();
    unsigned *hi = reinterpret_cast<unsigned *>(r.max[kv]) + (size_t)h * D;
    unsigned *lo = reinterpret_cast<unsigned *>(r.neg_min[kv]) + (size_t)h * D;
    for (int i = threadIdx.x; i < D; i += kThreads) {
        if (srange[i])
            atomicMax(&hi[i], srange[i]);
        if (srange[D + i])
            atomicMax(&lo[i], srange[D + i]);
    }
}

template <typename T> kvcal_status launch(const Observe &o, cudaStream_t stream)
{
    const int64_t blocks = (o.num_tokens + o.tokens_per_block - 1) / o.tokens_per_block;
    if (blocks == 0)
        return KVCAL_OK;
    if (blocks > 0x7fffffffLL)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_calibrator_observe_launch: %lld tokens is more than one "
                          "launch covers: observe them in parts",
                          (long long)o.num_tokens);
    const dim3 grid((unsigned)blocks, 2u * (unsigned)o.s.num_kv_heads);
    const size_t smem = (KVCAL_HIST_BINS + (size_t)o.s.head_dim) * sizeof(unsigned);
    kv_observe_kernel<T><<<grid, kThreads, smem, stream>>>(o);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

} // namespace

extern "C" kvcal_status kvcal_kv_observe_launch(const kvcal_kv_batch *batch, int layer,
                                                const kvcal_kv_stats_device *s,
                                                struct CUstream_st *stream)
{
    Observe o;
    o.src[0] = batch->k;
    o.src[1] = batch->v;
    o.token_stride[0] = batch->k_token_stride;
    o.token_stride[1] = batch->v_token_stride;
    o.head_stride[0] = batch->k_head_stride;
    o.head_stride[1] = batch->v_head_stride;
    o.slots = batch->slot_mapping;
    o.num_tokens = batch->num_tokens;
    o.tokens_per_block =
        kElemsPerBlock / s->head_dim > 0 ? kElemsPerBlock / s->head_dim : 1;
    o.layer = layer;
    o.s = *s;
    switch (batch->dtype) {
    case KVCAL_DTYPE_F16:
        return launch<__half>(o, stream);
    case KVCAL_DTYPE_BF16:
        return launch<__nv_bfloat16>(o, stream);
    default:
        return launch<float>(o, stream);
    }
}

extern "C" kvcal_status kvcal_kv_range_launch(const kvcal_kv_batch *batch, int head_dim,
                                              int num_kv_heads, const kvcal_kv_range *r,
                                              struct CUstream_st *stream)
{
    Observe o;
    memset(&o, 0, sizeof o);
    o.src[0] = batch->k;
    o.src[1] = batch->v;
    o.token_stride[0] = batch->k_token_stride;
    o.token_stride[1] = batch->v_token_stride;
    o.head_stride[0] = batch->k_head_stride;
    o.head_stride[1] = batch->v_head_stride;
    o.slots = batch->slot_mapping;
    o.num_tokens = batch->num_tokens;
    o.tokens_per_block = kElemsPerBlock / head_dim > 0 ? kElemsPerBlock / head_dim : 1;
    o.s.head_dim = head_dim;
    o.s.num_kv_heads = num_kv_heads;
    const int64_t blocks = (o.num_tokens + o.tokens_per_block - 1) / o.tokens_per_block;
    if (blocks == 0)
        return KVCAL_OK;
    if (blocks > 0x7fffffffLL)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_kv_range_launch: %lld tokens is more than one launch "
                          "covers: observe them in parts",
                          (long long)o.num_tokens);
    const dim3 grid((unsigned)blocks, 2u * (unsigned)num_kv_heads);
    const size_t smem = 2 * (size_t)head_dim * sizeof(unsigned);
    switch (batch->dtype) {
    case KVCAL_DTYPE_F16:
        kv_range_kernel<__half><<<grid, kThreads, smem, stream>>>(o, *r);
        break;
    case KVCAL_DTYPE_BF16:
        kv_range_kernel<__nv_bfloat16><<<grid, kThreads, smem, stream>>>(o, *r);
        break;
    default:
        kv_range_kernel<float><<<grid, kThreads, smem, stream>>>(o, *r);
    }
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_kv_observe_end_batch_launch(const kvcal_kv_stats_device *s,
                                                          double decay,
                                                          struct CUstream_st *stream)
{
    kv_observe_end_batch_kernel<<<1, kThreads, 0, stream>>>(*s, decay);
    CUDA_TRY(cudaGetLastError());
    return KVCAL_OK;
}
