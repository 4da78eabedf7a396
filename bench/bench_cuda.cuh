// bench/bench_cuda.cuh: what the CUDA benchmarks (moe_ops.cu, runner_ops.cu)
// share: the checks that abort a run, random bf16 data made on the device, and
// the timer (CUDA events, the L2 flushed before every repetition, the median
// of the repetitions kept).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda_bf16.h>
#include <functional>
#include <vector>

extern "C" {
#include "core/status.h"
}
#include "kernels/cuda/bf16.h"

#define CHECK_CUDA(x)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
                    cudaGetErrorString(e_));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CHECK_KVCAL(x)                                                                   \
    do {                                                                                 \
        kvcal_status s_ = (x);                                                           \
        if (s_ != KVCAL_OK) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #x,               \
                    kvcal_status_str(s_), kvcal_last_error());                           \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* x[i] uniform in [-scale, scale), a hash of i and seed. */
__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, float scale, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = __float2bfloat16(((float)(h & 0xffffff) / 8388608.0f - 1.0f) * scale);
    }
}

/* n random values on the device (fill_kernel), seed *seed, which then moves
 * on: each buffer of a run its own values, the same ones every run. */
static kvcal_bf16 *rand_dev_seeded(size_t n, float scale, unsigned *seed)
{
    kvcal_bf16 *p;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof *p));
    fill_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16 *>(p), n, scale, (*seed)++);
    CHECK_CUDA(cudaGetLastError());
    return p;
}

struct timer {
    int reps;
    void *flush;
    size_t flush_bytes;
    cudaEvent_t a, b;
};

/* A timer of reps repetitions whose flush overwrites 256 MiB (more than any
 * GPU's L2). */
static timer timer_create(int reps)
{
    timer t = {reps, nullptr, (size_t)256 << 20, nullptr, nullptr};
    CHECK_CUDA(cudaMalloc(&t.flush, t.flush_bytes));
    CHECK_CUDA(cudaEventCreate(&t.a));
    CHECK_CUDA(cudaEventCreate(&t.b));
    return t;
}

/* The median ms of each of fs over the repetitions, each after an L2 flush,
 * the runs interleaved: repetition r of every run before repetition r + 1 of
 * any, so that a drift of the clock (an H200 held at its power cap runs
 * slower as a long timing goes on) falls on all of them alike instead of on
 * those timed last. Each runs once untimed first. */
static std::vector<float> time_each(timer &t,
                                    const std::vector<std::function<void()>> &fs)
{
    for (const auto &f : fs)
        f();
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<std::vector<float>> ms(fs.size());
    for (int r = 0; r < t.reps; r++)
        for (size_t i = 0; i < fs.size(); i++) {
            CHECK_CUDA(cudaMemsetAsync(t.flush, r & 0xff, t.flush_bytes));
            CHECK_CUDA(cudaEventRecord(t.a));
            fs[i]();
            CHECK_CUDA(cudaEventRecord(t.b));
            CHECK_CUDA(cudaEventSynchronize(t.b));
            float x;
            CHECK_CUDA(cudaEventElapsedTime(&x, t.a, t.b));
            ms[i].push_back(x);
        }
    std::vector<float> median;
    for (auto &m : ms) {
        std::sort(m.begin(), m.end());
        median.push_back(m[m.size() / 2]);
    }
    return median;
}

/* The median ms of f over the repetitions (time_each of f alone). */
template <class F> static float time_ms(timer &t, F f)
{
    return time_each(t, {f})[0];
}
