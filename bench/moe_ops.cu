// bench/moe_ops.cu: times the mixture-of-experts ops of the calibration runner
// (kernels/cuda/moe.cu) at Qwen3-30B-A3B's layer shapes, 8 x 2048 tokens a
// batch (hidden 2048, 128 experts of 768, top-8), on a random routing:
// routing, grouping, the experts' gate/up and down GEMMs with kvcal's grouped
// GEMM, SwiGLU and the combine; beside them, the same two GEMMs with cuBLAS's
// grouped GEMM (cublasGemmGroupedBatchedEx, whose group sizes live on the
// host: its time is given with and without the copy of the routing's counts
// to the host and the wait that needs) and one dense cuBLAS GEMM of as many
// rows (the ceiling a grouped GEMM approaches). kvcal's grouped GEMM is
// validated against cuBLAS's first (outputs within 2e-2 + 2e-2 |ref|). Each
// time is the median of the repetitions, the L2 flushed before each.
//
// usage: moe_ops [reps]     (reps default 20)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <vector>

extern "C" {
#include "core/status.h"
}
#include "kernels/cuda/ops.h"

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
#define CHECK_CUBLAS(x)                                                                  \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x,      \
                    (int)s_);                                                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

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

static kvcal_bf16 *rand_dev(size_t n, float scale)
{
    static unsigned seed = 7;
    kvcal_bf16 *p;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof *p));
    fill_kernel<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16 *>(p), n, scale, seed++);
    CHECK_CUDA(cudaGetLastError());
    return p;
}

// The rows of x (tokens, k) in the plan's order (zeros where it holds none):
// the contiguous input cuBLAS's grouped GEMM needs.
__global__ void gather_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                              const int32_t *sorted, int top_k, int k)
{
    const int r = blockIdx.x, id = sorted[r];
    for (int c = threadIdx.x; c < k; c += blockDim.x)
        out[(int64_t)r * k + c] = id < 0 ? __float2bfloat16(0.0f) : x[(int64_t)(id / top_k) * k + c];
}

struct timer {
    int reps;
    void *flush;
    size_t flush_bytes;
    cudaEvent_t a, b;
};

template <class F> static float time_ms(timer &t, F f)
{
    f();
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < t.reps; r++) {
        CHECK_CUDA(cudaMemsetAsync(t.flush, r & 0xff, t.flush_bytes));
        CHECK_CUDA(cudaEventRecord(t.a));
        f();
        CHECK_CUDA(cudaEventRecord(t.b));
        CHECK_CUDA(cudaEventSynchronize(t.b));
        float x;
        CHECK_CUDA(cudaEventElapsedTime(&x, t.a, t.b));
        ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static void row(const char *name, float ms, double flops)
{
    printf("%-52s %9.3f ms %8.1f TFLOP/s\n", name, ms, flops / (ms * 1e-3) / 1e12);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) {
        fprintf(stderr, "usage: moe_ops [reps >= 1]\n");
        return 2;
    }
    const int M = 8 * 2048, D = 2048, E = 128, K = 8, I = 768;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; Qwen3-30B-A3B layer: %d tokens, hidden %d, %d experts of %d, "
           "top-%d\n",
           prop.name, M, D, E, I, K);
    timer t = {reps, nullptr, (size_t)256 << 20, nullptr, nullptr};
    CHECK_CUDA(cudaMalloc(&t.flush, t.flush_bytes));
    CHECK_CUDA(cudaEventCreate(&t.a));
    CHECK_CUDA(cudaEventCreate(&t.b));
    kvcal_gemm_t *gemm;
    CHECK_KVCAL(kvcal_gemm_create(32u << 20, &gemm));
    cublasHandle_t blas;
    CHECK_CUBLAS(cublasCreate(&blas));

    const int cap = kvcal_moe_plan_capacity(M * K, E), tiles = cap / KVCAL_MOE_TILE_ROWS;
    kvcal_bf16 *x = rand_dev((size_t)M * D, 1.0f), *w_router = rand_dev((size_t)E * D, 0.05f);
    kvcal_bf16 *w_gu = rand_dev((size_t)E * 2 * I * D, 0.02f),
               *w_down = rand_dev((size_t)E * D * I, 0.02f);
    kvcal_bf16 *logits = rand_dev((size_t)M * E, 1.0f), *h = rand_dev((size_t)cap * 2 * I, 1.0f),
               *act = rand_dev((size_t)cap * I, 1.0f), *y = rand_dev((size_t)cap * D, 1.0f),
               *out = rand_dev((size_t)M * D, 1.0f), *xs = rand_dev((size_t)cap * D, 1.0f),
               *h_ref = rand_dev((size_t)cap * 2 * I, 1.0f);
    int32_t *experts, *pos;
    float *weights;
    unsigned long long *counts;
    kvcal_moe_plan plan = {nullptr, nullptr, nullptr, cap, tiles};
    CHECK_CUDA(cudaMalloc(&experts, (size_t)M * K * sizeof *experts));
    CHECK_CUDA(cudaMalloc(&weights, (size_t)M * K * sizeof *weights));
    CHECK_CUDA(cudaMalloc(&pos, (size_t)M * sizeof *pos));
    CHECK_CUDA(cudaMalloc(&counts, (size_t)E * sizeof *counts));
    CHECK_CUDA(cudaMalloc(&plan.sorted, (size_t)cap * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.slot_of, (size_t)M * K * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.tile_expert, (size_t)tiles * sizeof(int32_t)));
    {
        std::vector<int32_t> hp(M);
        for (int i = 0; i < M; i++)
            hp[i] = i % 2048;
        CHECK_CUDA(cudaMemcpy(pos, hp.data(), M * sizeof *pos, cudaMemcpyHostToDevice));
    }
    const double gu_flops = 2.0 * M * K * D * 2.0 * I, down_flops = 2.0 * M * K * I * D;

    // --- kvcal, stage by stage ---
    CHECK_KVCAL(kvcal_gemm_launch(gemm, logits, x, w_router, nullptr, M, D, E, 0));
    CHECK_KVCAL(kvcal_moe_route_launch(experts, weights, logits, pos, M, E, K, 1, 0));
    CHECK_KVCAL(kvcal_moe_align_launch(&plan, experts, M * K, E, counts, 0));
    printf("\n%-52s %12s %16s\n", "op", "median", "");
    row("router GEMM (cuBLASLt)", time_ms(t, [&] {
            CHECK_KVCAL(kvcal_gemm_launch(gemm, logits, x, w_router, nullptr, M, D, E, 0));
        }), 2.0 * M * D * E);
    row("route (softmax top-k)", time_ms(t, [&] {
            CHECK_KVCAL(kvcal_moe_route_launch(experts, weights, logits, pos, M, E, K, 1, 0));
        }), 0);
    row("align (group by expert)", time_ms(t, [&] {
            CHECK_KVCAL(kvcal_moe_align_launch(&plan, experts, M * K, E, nullptr, 0));
        }), 0);
    const float kv_gu = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_moe_gemm_launch(h, x, K, w_gu, &plan, D, 2 * I, 0));
    });
    row("kvcal grouped GEMM gate/up (gathered rows)", kv_gu, gu_flops);
    row("swiglu (every plan row)", time_ms(t, [&] {
            CHECK_KVCAL(kvcal_swiglu_launch(act, h, cap, I, 0));
        }), 0);
    const float kv_down = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_moe_gemm_launch(y, act, 0, w_down, &plan, I, D, 0));
    });
    row("kvcal grouped GEMM down", kv_down, down_flops);
    row("combine (top-8 weighted sum)", time_ms(t, [&] {
            CHECK_KVCAL(kvcal_moe_combine_launch(out, y, plan.slot_of, weights, pos, M, K, D,
                                                 nullptr, nullptr, nullptr, 0));
        }), 0);

    // --- cuBLAS's grouped GEMM on the same groups ---
    std::vector<unsigned long long> hc(E);
    CHECK_CUDA(cudaMemset(counts, 0, (size_t)E * sizeof *counts));
    CHECK_KVCAL(kvcal_moe_align_launch(&plan, experts, M * K, E, counts, 0));
    CHECK_CUDA(cudaMemcpy(hc.data(), counts, E * sizeof *counts, cudaMemcpyDeviceToHost));
    gather_kernel<<<cap, 256>>>(reinterpret_cast<__nv_bfloat16 *>(xs),
                                reinterpret_cast<const __nv_bfloat16 *>(x), plan.sorted, K, D);
    CHECK_CUDA(cudaGetLastError());
    std::vector<cublasOperation_t> ta(E, CUBLAS_OP_T), tb(E, CUBLAS_OP_N);
    std::vector<int> gm(E), gn(E), gk(E), lda(E), ldb(E), ldc(E), gsize(E, 1);
    std::vector<float> alpha(E, 1.0f), beta(E, 0.0f);
    std::vector<const void *> ha(E), hb(E);
    std::vector<void *> hcp(E);
    int nonempty = 0;
    size_t row0 = 0, min_rows = (size_t)-1, max_rows = 0;
    auto groups = [&](const kvcal_bf16 *wbase, int kdim, int ndim, const kvcal_bf16 *in,
                      kvcal_bf16 *o) {
        nonempty = 0, row0 = 0;
        for (int e = 0; e < E; e++) {
            const int rows = (int)hc[e];
            min_rows = std::min(min_rows, (size_t)rows), max_rows = std::max(max_rows, (size_t)rows);
            if (rows) {
                const int g = nonempty++;
                gm[g] = ndim, gn[g] = rows, gk[g] = kdim, lda[g] = kdim, ldb[g] = kdim, ldc[g] = ndim;
                ha[g] = wbase + (size_t)e * ndim * kdim;
                hb[g] = in + row0 * kdim;
                hcp[g] = o + row0 * ndim;
            }
            row0 += (rows + KVCAL_MOE_TILE_ROWS - 1) / KVCAL_MOE_TILE_ROWS * KVCAL_MOE_TILE_ROWS;
        }
    };
    const void **da, **db;
    void **dc;
    CHECK_CUDA(cudaMalloc(&da, E * sizeof *da));
    CHECK_CUDA(cudaMalloc(&db, E * sizeof *db));
    CHECK_CUDA(cudaMalloc(&dc, E * sizeof *dc));
    auto upload = [&] {
        CHECK_CUDA(cudaMemcpy(da, ha.data(), nonempty * sizeof *da, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(db, hb.data(), nonempty * sizeof *db, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(dc, hcp.data(), nonempty * sizeof *dc, cudaMemcpyHostToDevice));
    };
    auto grouped = [&] {
        CHECK_CUBLAS(cublasGemmGroupedBatchedEx(
            blas, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(), da,
            CUDA_R_16BF, lda.data(), db, CUDA_R_16BF, ldb.data(), beta.data(), dc,
            CUDA_R_16BF, ldc.data(), nonempty, gsize.data(), CUBLAS_COMPUTE_32F));
    };
    groups(w_gu, D, 2 * I, xs, h_ref);
    upload();
    printf("routing: %zu .. %zu rows an expert (%d experts with rows)\n", min_rows, max_rows,
           nonempty);
    grouped();
    CHECK_CUDA(cudaDeviceSynchronize());
    {   // validation: kvcal's gate/up rows against cuBLAS's on the rows the plan holds
        CHECK_KVCAL(kvcal_moe_gemm_launch(h, x, K, w_gu, &plan, D, 2 * I, 0));
        std::vector<int32_t> hs(cap);
        std::vector<__nv_bfloat16> a((size_t)cap * 2 * I), b((size_t)cap * 2 * I);
        CHECK_CUDA(cudaMemcpy(hs.data(), plan.sorted, cap * sizeof(int32_t), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(a.data(), h, a.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(b.data(), h_ref, b.size() * 2, cudaMemcpyDeviceToHost));
        long long bad = 0, n = 0;
        for (int r = 0; r < cap; r++)
            for (int c = 0; hs[r] >= 0 && c < 2 * I; c++, n++) {
                const float g = __bfloat162float(a[(size_t)r * 2 * I + c]),
                            w = __bfloat162float(b[(size_t)r * 2 * I + c]);
                bad += !(fabsf(g - w) <= 2e-2f + 2e-2f * fabsf(w));
            }
        printf("validation: %lld of %lld gate/up outputs off cuBLAS's%s\n", bad, n,
               bad ? " (FAILED)" : "");
        if (bad)
            return 1;
    }
    const float cb_gu = time_ms(t, grouped);
    row("cuBLAS grouped GEMM gate/up (pre-gathered rows)", cb_gu, gu_flops);
    const float cb_gu_host = time_ms(t, [&] {
        CHECK_CUDA(cudaMemcpyAsync(hc.data(), counts, E * sizeof *counts,
                                   cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaStreamSynchronize(0));
        groups(w_gu, D, 2 * I, xs, h_ref);
        upload();
        grouped();
    });
    row("  the same with its host round trip", cb_gu_host, gu_flops);
    groups(w_down, I, D, act, y);
    upload();
    const float cb_down = time_ms(t, grouped);
    row("cuBLAS grouped GEMM down", cb_down, down_flops);
    const float dense = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_gemm_launch(gemm, h_ref, xs, w_gu, nullptr, M * K, D, 2 * I, 0));
    });
    row("dense cuBLASLt GEMM of as many rows (ceiling)", dense, gu_flops);
    printf("\nkvcal / cuBLAS grouped, gate/up + down: %.2fx (%.3f vs %.3f ms)\n",
           (cb_gu + cb_down) / (kv_gu + kv_down), kv_gu + kv_down, cb_gu + cb_down);
    cublasDestroy(blas);
    kvcal_gemm_destroy(gemm);
    return 0;
}
