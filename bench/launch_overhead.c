// bench/launch_overhead.c: what one call of the online quantization costs
// the host at decode size, from C: kvcal_kv_quantize_static_launch of 256
// tokens x 8 kv heads x 128 (bf16) into a paged e4m3 cache of 16-token
// blocks, called N times back to back without synchronizing (host time per
// call: argument checks and the launch), then once per synchronization (the
// round trip). tests/python_gpu_check.py sets the Python binding's call
// against these figures.
//
// Usage: build/bench/launch_overhead [calls]   (default 20000)
// Prints one line: c_call_us=<host us per call> c_sync_us=<us per call+sync>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kvcal.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

int main(int argc, char **argv)
{
    const int calls = argc > 1 ? atoi(argv[1]) : 20000;
    const int T = 256, H = 8, D = 128, bs = 16, nb = 64;
    if (kvcal_cuda_device_count() == 0) {
        printf("launch_overhead: SKIPPED: no CUDA device\n");
        return 0;
    }
    void *k, *v, *kc, *vc, *scale;
    int64_t *slots;
    int64_t host_slots[256];
    for (int t = 0; t < T; t++)
        host_slots[t] = (int64_t)((t * 37) % (nb * bs));
    const float one = 0.01f;
    if (cudaMalloc(&k, (size_t)T * H * D * 2) || cudaMalloc(&v, (size_t)T * H * D * 2) ||
        cudaMalloc(&kc, (size_t)nb * bs * H * D) || cudaMalloc(&vc, (size_t)nb * bs * H * D) ||
        cudaMalloc(&scale, 4) || cudaMalloc((void **)&slots, sizeof host_slots) ||
        cudaMemcpy(slots, host_slots, sizeof host_slots, cudaMemcpyHostToDevice) ||
        cudaMemcpy(scale, &one, 4, cudaMemcpyHostToDevice) || cudaMemset(k, 0, (size_t)T * H * D * 2) ||
        cudaMemset(v, 0, (size_t)T * H * D * 2)) {
        fprintf(stderr, "launch_overhead: device allocation failed\n");
        return 2;
    }
    kvcal_kv_batch b = {k, v, KVCAL_DTYPE_BF16, T, H * D, D, H * D, D, slots};
    kvcal_kv_cache c = {kc, vc, NULL, NULL, nb, bs, H, D, 0, KVCAL_CACHE_NHD};
    for (int i = 0; i < 100; i++)
        kvcal_kv_quantize_static_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, scale, scale, NULL);
    cudaDeviceSynchronize();
    double t0 = now_us();
    for (int i = 0; i < calls; i++)
        if (kvcal_kv_quantize_static_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, scale, scale,
                                            NULL)) {
            fprintf(stderr, "launch_overhead: %s\n", kvcal_last_error());
            return 1;
        }
    double t1 = now_us();
    cudaDeviceSynchronize();
    const int synced = calls / 10 > 0 ? calls / 10 : 1;
    double t2 = now_us();
    for (int i = 0; i < synced; i++) {
        kvcal_kv_quantize_static_launch(&b, &c, KVCAL_GRANULARITY_TENSOR, scale, scale, NULL);
        cudaDeviceSynchronize();
    }
    double t3 = now_us();
    printf("c_call_us=%.3f c_sync_us=%.3f\n", (t1 - t0) / calls, (t3 - t2) / synced);
    cudaFree(k), cudaFree(v), cudaFree(kc), cudaFree(vc), cudaFree(scale), cudaFree(slots);
    return 0;
}
#else
int main(void)
{
    printf("launch_overhead: SKIPPED: built without CUDA\n");
    return 0;
}
#endif
