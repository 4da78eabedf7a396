// bench/moe_ops.cu: times the mixture-of-experts ops of the calibration runner
// (kernels/cuda/moe.cu, moe_wgmma.cu) at Qwen3-30B-A3B's layer shapes, 8 x 2048
// tokens a batch (hidden 2048, 128 experts of 768, top-8), on a random routing:
// the router GEMM, routing, grouping, gather and combine, and the experts' two
// GEMMs in numbered versions, side by side:
//   1  kvcal_moe_gemm_launch (sm_80+ WMMA, rows gathered in the GEMM): gate/up,
//      SwiGLU, down (the runner's path off Hopper)
//   2  kvcal_moe_gemm_sm90_launch (Hopper, TMA + wgmma) on the gathered rows,
//      unfused: gate/up stored, SwiGLU, down
//   3  the same with SwiGLU in the gate/up epilogue and the gate/up's rows
//      gathered in its loads (the runner's path on Hopper; its gate/up is
//      also timed over the rows gathered apart, the runner before, side by
//      side)
//   4  cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx) on the gathered rows,
//      its group sizes already on the host: gate/up, down
//   5  4 with its host round trip each layer (the routing's counts copied to
//      the host, the wait, the pointer arrays uploaded)
//   6  one dense cuBLASLt GEMM of as many rows each (the ceiling; expert 0's
//      weight for every row)
// Before any timing each version is validated: versions 1-3 against a CPU
// reference of 64 routed rows (4 experts, the first and last rows of each), 2
// and 3 against 1 on every routed row, 4 and 5 against 1's gate/up and down, 6
// against the CPU on its first rows; within 2e-2 + 2e-2 |ref| (the reference
// rounds as the runner: gate and up, silu, the product and the outputs to
// bf16). Each time is the median of the repetitions, the L2 flushed before
// each; the experts' GEMMs of every version are timed interleaved (a round of
// one repetition of each, reps rounds), so that the clock's drift under the
// power cap does not favour the versions timed first. Versions 2 and 3 need an sm_90a
// build on a Hopper GPU; elsewhere they are reported as not run. Exits 1 when a
// validation fails (the versions are still timed, the failed ones marked).
//
// usage: moe_ops [reps]     (reps default 20)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <functional>
#include <vector>

extern "C" {
#include "core/status.h"
}
#include "bench/bench_cuda.cuh"
#include "kernels/cuda/ops.h"

#define CHECK_CUBLAS(x)                                                                  \
    do {                                                                                 \
        cublasStatus_t s_ = (x);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x,     \
                    (int)s_);                                                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static const int M = 8 * 2048, D = 2048, E = 128, K = 8, I = 768;
#define ATOL 2e-2f
#define RTOL 2e-2f

static kvcal_bf16 *rand_dev(size_t n, float scale)
{
    static unsigned seed = 7;
    return rand_dev_seeded(n, scale, &seed);
}

static std::vector<float> download(const kvcal_bf16 *d, size_t n)
{
    std::vector<__nv_bfloat16> h(n);
    CHECK_CUDA(
        cudaMemcpy(h.data(), d, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++)
        f[i] = __bfloat162float(h[i]);
    return f;
}

static float bf16_round(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

static bool near(float got, float want)
{
    return fabsf(got - want) <= ATOL + RTOL * fabsf(want);
}

static void row(const char *name, float ms, double flops)
{
    if (flops > 0)
        printf("%-56s %9.3f ms %8.1f TFLOP/s\n", name, ms, flops / (ms * 1e-3) / 1e12);
    else
        printf("%-56s %9.3f ms\n", name, ms);
}

static int invalid[7]; /* a version (0: the setup) failed its validation */

/* One validation line of version v: how many of n values are off the bound. */
static void verdict(int v, const char *what, long long bad, long long n)
{
    printf("validation: %-64s %lld of %lld off%s\n", what, bad, n,
           bad ? " (FAILED)" : "");
    invalid[v] |= bad != 0 || n == 0;
}

// --- the CPU reference of sampled rows ------------------------------------------

/* The routed rows the CPU checks: the first and last 8 of 4 experts. */
struct sample {
    int row, token, expert;
};

struct reference {
    std::vector<sample> rows;
    std::vector<float> act, y; /* (rows, I), (rows, D) as the runner rounds */
};

static reference cpu_reference(const kvcal_moe_plan &plan, const kvcal_bf16 *x,
                               const kvcal_bf16 *w_gu, const kvcal_bf16 *w_down)
{
    reference ref;
    std::vector<int32_t> sorted(plan.capacity), tile_expert(plan.tiles);
    CHECK_CUDA(cudaMemcpy(sorted.data(), plan.sorted, plan.capacity * sizeof(int32_t),
                          cudaMemcpyDeviceToHost)); /* rows of unused tiles: stale */
    CHECK_CUDA(cudaMemcpy(tile_expert.data(), plan.tile_expert,
                          plan.tiles * sizeof(int32_t), cudaMemcpyDeviceToHost));
    const int experts[] = {0, 41, 86, E - 1};
    for (int e : experts) {
        std::vector<int> mine;
        for (int r = 0; r < plan.capacity; r++)
            if (sorted[r] >= 0 && tile_expert[r / KVCAL_MOE_TILE_ROWS] == e)
                mine.push_back(r);
        for (size_t i = 0; i < mine.size(); i++)
            if (i < 8 || i + 8 >= mine.size())
                ref.rows.push_back({mine[i], sorted[mine[i]] / K, e});
    }
    const size_t S = ref.rows.size();
    ref.act.resize(S * I);
    ref.y.resize(S * D);
    for (int e : experts) {
        std::vector<float> gu = download(w_gu + (size_t)e * 2 * I * D, (size_t)2 * I * D),
                           down = download(w_down + (size_t)e * D * I, (size_t)D * I);
        for (size_t s = 0; s < S; s++) {
            if (ref.rows[s].expert != e)
                continue;
            std::vector<float> xr = download(x + (size_t)ref.rows[s].token * D, D);
            float *act = &ref.act[s * I];
            for (int j = 0; j < I; j++) {
                double g = 0.0, u = 0.0;
                for (int c = 0; c < D; c++) {
                    g += (double)xr[c] * gu[(size_t)j * D + c];
                    u += (double)xr[c] * gu[(size_t)(I + j) * D + c];
                }
                const float gb = bf16_round((float)g), ub = bf16_round((float)u);
                act[j] = bf16_round(bf16_round(gb / (1.0f + expf(-gb))) * ub);
            }
            for (int c = 0; c < D; c++) {
                double acc = 0.0;
                for (int j = 0; j < I; j++)
                    acc += (double)act[j] * down[(size_t)c * I + j];
                ref.y[s * D + c] = bf16_round((float)acc);
            }
        }
    }
    return ref;
}

/* Rows of out (capacity, n) at the reference's sampled rows, against want. */
static long long off_reference(const reference &ref, const kvcal_bf16 *out, int n,
                               const std::vector<float> &want)
{
    long long bad = 0;
    for (size_t s = 0; s < ref.rows.size(); s++) {
        std::vector<float> got = download(out + (size_t)ref.rows[s].row * n, n);
        for (int c = 0; c < n; c++)
            bad += !near(got[c], want[s * n + c]);
    }
    return bad;
}

/* Values of a (capacity, n) and b on the routed rows (sorted: those of
 * the used tiles): off the bound into *bad, bit-equal into *same; returns
 * the count compared. */
static long long compare_rows(const std::vector<int32_t> &sorted, const kvcal_bf16 *a,
                              const kvcal_bf16 *b, int n, long long *bad, long long *same)
{
    const std::vector<float> x = download(a, sorted.size() * n),
                             y = download(b, sorted.size() * n);
    long long count = 0;
    *bad = *same = 0;
    for (size_t r = 0; r < sorted.size(); r++)
        for (int c = 0; sorted[r] >= 0 && c < n; c++, count++) {
            const float g = x[r * n + c], w = y[r * n + c];
            *bad += !near(g, w);
            *same += memcmp(&g, &w, sizeof g) == 0;
        }
    return count;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2 || reps < 1) {
        fprintf(stderr, "usage: moe_ops [reps >= 1]\n");
        return 2;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; Qwen3-30B-A3B layer: %d tokens, hidden %d, %d experts of %d, "
           "top-%d\n",
           prop.name, M, D, E, I, K);
    timer t = timer_create(reps);
    kvcal_gemm_t *gemm;
    CHECK_KVCAL(kvcal_gemm_create(32u << 20, &gemm));
    cublasHandle_t blas;
    CHECK_CUBLAS(cublasCreate(&blas));

    const int cap = kvcal_moe_plan_capacity(M * K, E), tiles = cap / KVCAL_MOE_TILE_ROWS;
    kvcal_bf16 *x = rand_dev((size_t)M * D, 1.0f),
               *w_router = rand_dev((size_t)E * D, 0.05f);
    /* weights that keep gate, up, act and the outputs of order 1 (x of
     * order 1), so that the validation's 2e-2 bound is a tight one */
    kvcal_bf16 *w_gu = rand_dev((size_t)E * 2 * I * D, 0.07f),
               *w_down = rand_dev((size_t)E * D * I, 0.15f);
    /* per version: h (capacity, 2I) gate/up, act (capacity, I), y (capacity, D) */
    kvcal_bf16 *logits = rand_dev((size_t)M * E, 1.0f),
               *xs = rand_dev((size_t)cap * D, 1.0f),
               *out = rand_dev((size_t)M * D, 1.0f);
    kvcal_bf16 *h[7], *act[7], *y[7];
    for (int v = 1; v <= 6; v++) {
        h[v] = rand_dev((size_t)cap * 2 * I, 1.0f);
        act[v] = rand_dev((size_t)cap * I, 1.0f);
        y[v] = rand_dev((size_t)cap * D, 1.0f);
    }
    int32_t *experts, *pos;
    float *weights;
    unsigned long long *counts;
    kvcal_moe_plan plan = {nullptr, nullptr, nullptr, cap, tiles, nullptr, nullptr};
    CHECK_CUDA(cudaMalloc(&experts, (size_t)M * K * sizeof *experts));
    CHECK_CUDA(cudaMalloc(&weights, (size_t)M * K * sizeof *weights));
    CHECK_CUDA(cudaMalloc(&pos, (size_t)M * sizeof *pos));
    CHECK_CUDA(cudaMalloc(&counts, (size_t)E * sizeof *counts));
    CHECK_CUDA(cudaMalloc(&plan.sorted, (size_t)cap * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.slot_of, (size_t)M * K * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.tile_expert, (size_t)tiles * sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.used_tiles, sizeof(int32_t)));
    CHECK_CUDA(cudaMalloc(&plan.scratch,
                          (size_t)kvcal_moe_plan_scratch(M * K, E) * sizeof(int32_t)));
    {
        std::vector<int32_t> hp(M);
        for (int i = 0; i < M; i++)
            hp[i] = i % 2048;
        CHECK_CUDA(cudaMemcpy(pos, hp.data(), M * sizeof *pos, cudaMemcpyHostToDevice));
    }
    const double gu_flops = 2.0 * M * K * D * 2.0 * I, down_flops = 2.0 * M * K * I * D;

    // --- the routing, and what each version runs ---
    CHECK_KVCAL(kvcal_gemm_launch(gemm, logits, x, w_router, nullptr, M, D, E, 0));
    CHECK_KVCAL(kvcal_moe_route_launch(experts, weights, logits, pos, M, E, K, 1, 0));
    CHECK_CUDA(cudaMemset(counts, 0, (size_t)E * sizeof *counts));
    CHECK_KVCAL(kvcal_moe_align_launch(&plan, experts, M * K, E, counts, 0));
    CHECK_KVCAL(kvcal_moe_gather_launch(xs, x, &plan, K, D, nullptr, 0));
    std::vector<unsigned long long> hc(E);
    CHECK_CUDA(cudaMemcpy(hc.data(), counts, E * sizeof *counts, cudaMemcpyDeviceToHost));
    int used_tiles = 0;
    CHECK_CUDA(cudaMemcpy(&used_tiles, plan.used_tiles, sizeof used_tiles,
                          cudaMemcpyDeviceToHost));
    std::vector<int32_t> sorted((size_t)used_tiles * KVCAL_MOE_TILE_ROWS);
    CHECK_CUDA(cudaMemcpy(sorted.data(), plan.sorted, sorted.size() * sizeof(int32_t),
                          cudaMemcpyDeviceToHost));
    printf("routing: %llu .. %llu rows an expert; %d of the plan's %d tiles hold rows\n",
           *std::min_element(hc.begin(), hc.end()),
           *std::max_element(hc.begin(), hc.end()), used_tiles, tiles);

    auto v1 = [&](int part) {
        if (part & 1)
            CHECK_KVCAL(kvcal_moe_gemm_launch(h[1], x, K, w_gu, &plan, D, 2 * I, 0));
        if (part & 2)
            CHECK_KVCAL(kvcal_swiglu_launch(act[1], h[1], cap, I, 0));
        if (part & 4)
            CHECK_KVCAL(kvcal_moe_gemm_launch(y[1], act[1], 0, w_down, &plan, I, D, 0));
    };
    /* versions 2 and 3: the gather is timed on its own; a first call that
     * the GPU refuses names why and leaves them out */
    const kvcal_status sm90 = kvcal_moe_gemm_sm90_launch(
        h[2], xs, 0, w_gu, &plan, E, D, 2 * I, KVCAL_MOE_EPI_STORE, NULL, 0);
    if (sm90 != KVCAL_OK && sm90 != KVCAL_ERR_UNSUPPORTED)
        CHECK_KVCAL(sm90);
    char sm90_why[512] = "";
    if (sm90 == KVCAL_ERR_UNSUPPORTED)
        snprintf(sm90_why, sizeof sm90_why, "%s", kvcal_last_error());
    auto v2 = [&](int part) {
        if (part & 1)
            CHECK_KVCAL(kvcal_moe_gemm_sm90_launch(h[2], xs, 0, w_gu, &plan, E, D, 2 * I,
                                                   KVCAL_MOE_EPI_STORE, NULL, 0));
        if (part & 2)
            CHECK_KVCAL(kvcal_swiglu_launch(act[2], h[2], cap, I, 0));
        if (part & 4)
            CHECK_KVCAL(kvcal_moe_gemm_sm90_launch(y[2], act[2], 0, w_down, &plan, E, I,
                                                   D, KVCAL_MOE_EPI_STORE, NULL, 0));
    };
    auto v3 = [&](int part) {
        if (part & 1)
            CHECK_KVCAL(kvcal_moe_gemm_sm90_launch(act[3], x, K, w_gu, &plan, E, D, I,
                                                   KVCAL_MOE_EPI_SWIGLU, NULL, 0));
        if (part & 4)
            CHECK_KVCAL(kvcal_moe_gemm_sm90_launch(y[3], act[3], 0, w_down, &plan, E, I,
                                                   D, KVCAL_MOE_EPI_STORE, NULL, 0));
    };

    // cuBLAS's grouped GEMM: one group a non-empty expert (column-major:
    // out^T (n, rows) = W (n, k) x rows^T)
    std::vector<cublasOperation_t> ta(E, CUBLAS_OP_T), tb(E, CUBLAS_OP_N);
    std::vector<int> gm(E), gn(E), gk(E), lda(E), ldb(E), ldc(E), gsize(E, 1);
    std::vector<float> alpha(E, 1.0f), beta(E, 0.0f);
    std::vector<const void *> ha(E), hb(E);
    std::vector<void *> hcp(E);
    int nonempty = 0;
    auto groups = [&](const kvcal_bf16 *wbase, int kdim, int ndim, const kvcal_bf16 *in,
                      kvcal_bf16 *o) {
        nonempty = 0;
        size_t row0 = 0;
        for (int e = 0; e < E; e++) {
            const int rows = (int)hc[e];
            if (rows) {
                const int g = nonempty++;
                gm[g] = ndim, gn[g] = rows, gk[g] = kdim, lda[g] = kdim, ldb[g] = kdim;
                ldc[g] = ndim;
                ha[g] = wbase + (size_t)e * ndim * kdim;
                hb[g] = in + row0 * kdim;
                hcp[g] = o + row0 * ndim;
            }
            row0 += (rows + KVCAL_MOE_TILE_ROWS - 1) / KVCAL_MOE_TILE_ROWS *
                    KVCAL_MOE_TILE_ROWS;
        }
    };
    const void **da[2], **db[2];
    void **dc[2];
    for (int i = 0; i < 2; i++) {
        CHECK_CUDA(cudaMalloc(&da[i], E * sizeof *da[i]));
        CHECK_CUDA(cudaMalloc(&db[i], E * sizeof *db[i]));
        CHECK_CUDA(cudaMalloc(&dc[i], E * sizeof *dc[i]));
    }
    /* the pointer arrays of gate/up (0) and down (1) */
    auto upload = [&](int i) {
        CHECK_CUDA(cudaMemcpy(da[i], ha.data(), nonempty * sizeof *da[i],
                              cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(db[i], hb.data(), nonempty * sizeof *db[i],
                              cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(dc[i], hcp.data(), nonempty * sizeof *dc[i],
                              cudaMemcpyHostToDevice));
    };
    auto grouped = [&](int i) {
        CHECK_CUBLAS(cublasGemmGroupedBatchedEx(
            blas, ta.data(), tb.data(), gm.data(), gn.data(), gk.data(), alpha.data(),
            da[i], CUDA_R_16BF, lda.data(), db[i], CUDA_R_16BF, ldb.data(), beta.data(),
            dc[i], CUDA_R_16BF, ldc.data(), nonempty, gsize.data(), CUBLAS_COMPUTE_32F));
    };
    /* gate/up (1), down (4): the arrays made once */
    groups(w_gu, D, 2 * I, xs, h[4]);
    upload(0);
    groups(w_down, I, D, act[1], y[4]);
    upload(1);
    auto v4 = [&](int part) {
        if (part & 1) {
            groups(w_gu, D, 2 * I, xs, h[4]);
            grouped(0);
        }
        if (part & 4) {
            groups(w_down, I, D, act[1], y[4]);
            grouped(1);
        }
    };
    auto v5 = [&](int part) {
        CHECK_CUDA(cudaMemcpyAsync(hc.data(), counts, E * sizeof *counts,
                                   cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaStreamSynchronize(0));
        if (part & 1) {
            groups(w_gu, D, 2 * I, xs, h[5]);
            upload(0);
            grouped(0);
        }
        if (part & 4) {
            groups(w_down, I, D, act[1], y[5]);
            upload(1);
            grouped(1);
        }
    };
    auto v6 = [&](int part) {
        if (part & 1)
            CHECK_KVCAL(
                kvcal_gemm_launch(gemm, h[6], xs, w_gu, nullptr, M * K, D, 2 * I, 0));
        if (part & 4)
            CHECK_KVCAL(
                kvcal_gemm_launch(gemm, y[6], act[1], w_down, nullptr, M * K, I, D, 0));
    };

    // --- validation ---
    v1(7);
    if (!*sm90_why) {
        v2(7);
        v3(7);
    }
    v4(5);
    v5(5);
    v6(5);
    CHECK_CUDA(cudaDeviceSynchronize());
    const reference ref = cpu_reference(plan, x, w_gu, w_down);
    double mean_act = 0.0, mean_y = 0.0;
    for (float v : ref.act)
        mean_act += fabs(v) / ref.act.size();
    for (float v : ref.y)
        mean_y += fabs(v) / ref.y.size();
    printf(
        "\nthe CPU reference's mean |act| %.3f, mean |down| %.3f (the bound: 2e-2 + 2e-2 "
        "|ref|)\n",
        mean_act, mean_y);
    /* values far above the bound's 2e-2, or the checks could not fail */
    verdict(0, "the reference's values are of order 1", mean_act < 0.1 || mean_y < 0.1,
            2);
    char what[128];
    for (int v = 1; v <= 3; v++) {
        if (v > 1 && *sm90_why)
            continue;
        snprintf(what, sizeof what, "version %d act, %zu sampled rows, against the CPU",
                 v, ref.rows.size());
        verdict(v, what, off_reference(ref, act[v], I, ref.act),
                (long long)ref.rows.size() * I);
        snprintf(what, sizeof what, "version %d down, %zu sampled rows, against the CPU",
                 v, ref.rows.size());
        verdict(v, what, off_reference(ref, y[v], D, ref.y),
                (long long)ref.rows.size() * D);
    }
    long long bad, same, n;
    for (int v = 2; v <= 3 && !*sm90_why; v++) {
        n = compare_rows(sorted, act[v], act[1], I, &bad, &same);
        snprintf(what, sizeof what, "version %d act against version 1 (%.2f%% bit-equal)",
                 v, 100.0 * same / (n ? n : 1));
        verdict(v, what, bad, n);
        n = compare_rows(sorted, y[v], y[1], D, &bad, &same);
        snprintf(what, sizeof what,
                 "version %d down against version 1 (%.2f%% bit-equal)", v,
                 100.0 * same / (n ? n : 1));
        verdict(v, what, bad, n);
    }
    for (int v = 4; v <= 5; v++) {
        n = compare_rows(sorted, h[v], h[1], 2 * I, &bad, &same);
        snprintf(what, sizeof what,
                 "version %d gate/up against version 1 (%.2f%% bit-equal)", v,
                 100.0 * same / (n ? n : 1));
        verdict(v, what, bad, n);
        n = compare_rows(sorted, y[v], y[1], D, &bad, &same);
        snprintf(what, sizeof what,
                 "version %d down against version 1 (%.2f%% bit-equal)", v,
                 100.0 * same / (n ? n : 1));
        verdict(v, what, bad, n);
    }
    { // version 6: expert 0's products of the first rows of xs and act
        std::vector<float> gu0 = download(w_gu, (size_t)2 * I * D),
                           dn0 = download(w_down, (size_t)D * I);
        const int rows = 4;
        std::vector<float> xr = download(xs, (size_t)rows * D),
                           ar = download(act[1], (size_t)rows * I),
                           hg = download(h[6], (size_t)rows * 2 * I),
                           yg = download(y[6], (size_t)rows * D);
        long long off = 0;
        for (int r = 0; r < rows; r++) {
            for (int j = 0; j < 2 * I; j++) {
                double acc = 0.0;
                for (int c = 0; c < D; c++)
                    acc += (double)xr[(size_t)r * D + c] * gu0[(size_t)j * D + c];
                off += !near(hg[(size_t)r * 2 * I + j], bf16_round((float)acc));
            }
            for (int c = 0; c < D; c++) {
                double acc = 0.0;
                for (int j = 0; j < I; j++)
                    acc += (double)ar[(size_t)r * I + j] * dn0[(size_t)c * I + j];
                off += !near(yg[(size_t)r * D + c], bf16_round((float)acc));
            }
        }
        verdict(6, "version 6 (dense) first 4 rows against the CPU", off,
                (long long)rows * (2 * I + D));
    }

    // --- timings ---
    printf("\n%-56s %12s %16s\n", "op", "median", "");
    const float router = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_gemm_launch(gemm, logits, x, w_router, nullptr, M, D, E, 0));
    });
    row("router GEMM (cuBLASLt)", router, 2.0 * M * D * E);
    const float route = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_moe_route_launch(experts, weights, logits, pos, M, E, K, 1, 0));
    });
    row("route (softmax top-k)", route, 0);
    const float align = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_moe_align_launch(&plan, experts, M * K, E, nullptr, 0));
    });
    row("align (group by expert)", align, 0);
    const float gather =
        time_ms(t, [&] { CHECK_KVCAL(kvcal_moe_gather_launch(xs, x, &plan, K, D, nullptr, 0)); });
    row("gather (rows in the plan's order; versions 2, 4-6)", gather, 0);
    const float combine = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_moe_combine_launch(out, y[1], plan.slot_of, weights, pos, M, K,
                                             D, nullptr, nullptr, nullptr, 0, nullptr,
                                             0));
    });
    row("combine (top-8 weighted sum)", combine, 0);

    static const char *const names[] = {
        "",
        "kvcal sm_80 grouped GEMM (WMMA), SwiGLU apart",
        "kvcal sm_90a grouped GEMM (wgmma), SwiGLU apart",
        "kvcal sm_90a grouped GEMM (wgmma), SwiGLU fused, gathering",
        "cuBLAS grouped GEMM, sizes on the host",
        "cuBLAS grouped GEMM + its host round trip",
        "dense cuBLASLt GEMM of as many rows (ceiling)",
    };
    float gu_ms[7] = {0}, sw_ms[7] = {0}, dn_ms[7] = {0}, all_ms[7] = {0}, apart = 0;
    /* every version's parts (and version 3's gate/up on the rows gathered
     * apart) timed interleaved, each into its slot */
    std::vector<std::function<void()>> runs;
    std::vector<float *> slots;
    for (int v = 1; v <= 6; v++) {
        if ((v == 2 || v == 3) && *sm90_why)
            continue;
        auto run = [&, v](int part) {
            switch (v) {
            case 1:
                v1(part);
                break;
            case 2:
                v2(part);
                break;
            case 3:
                v3(part);
                break;
            case 4:
                v4(part);
                break;
            case 5:
                v5(part);
                break;
            default:
                v6(part);
                break;
            }
        };
        for (int part : {1, 2, 4, 7}) {
            if (part == 2 && v > 2)
                continue;
            runs.push_back([run, part] { run(part); });
            slots.push_back(part == 1   ? &gu_ms[v]
                            : part == 2 ? &sw_ms[v]
                            : part == 4 ? &dn_ms[v]
                                        : &all_ms[v]);
        }
    }
    /* version 3's gate/up over the rows gathered apart (xs, read by TMA) */
    if (!*sm90_why) {
        runs.push_back([&] {
            CHECK_KVCAL(kvcal_moe_gemm_sm90_launch(act[3], xs, 0, w_gu, &plan, E, D, I,
                                                   KVCAL_MOE_EPI_SWIGLU, NULL, 0));
        });
        slots.push_back(&apart);
    }
    const std::vector<float> medians = time_each(t, runs);
    for (size_t i = 0; i < slots.size(); i++)
        *slots[i] = medians[i];

    printf("\nthe experts' GEMMs, by version (%s):\n", prop.name);
    printf("%-3s %-50s %18s %10s %18s %18s\n", "v", "what", "gate/up ms TFLOP/s",
           "SwiGLU ms", "down ms TFLOP/s", "all ms TFLOP/s");
    for (int v = 1; v <= 6; v++) {
        if ((v == 2 || v == 3) && *sm90_why) {
            printf("%-3d %-50s not run: %s\n", v, names[v], sm90_why);
            continue;
        }
        const char *sw = v <= 2 ? "" : v == 3 ? "fused" : "none";
        char swc[16];
        snprintf(swc, sizeof swc, "%.3f", sw_ms[v]);
        printf("%-3d %-50s %9.3f %8.1f %10s %9.3f %8.1f %9.3f %8.1f%s\n", v, names[v],
               gu_ms[v], gu_flops / (gu_ms[v] * 1e-3) / 1e12, *sw ? sw : swc, dn_ms[v],
               down_flops / (dn_ms[v] * 1e-3) / 1e12, all_ms[v],
               (gu_flops + down_flops) / (all_ms[v] * 1e-3) / 1e12,
               invalid[v] ? "  FAILED its validation" : "");
    }
    const int runner = *sm90_why ? 1 : 3;
    printf(
        "\nthe runner's MoE layer on this GPU (version %d): router %.3f + route %.3f + "
        "align %.3f + GEMMs %.3f + combine %.3f = %.3f ms\n",
        runner, router, route, align, all_ms[runner], combine,
        router + route + align + all_ms[runner] + combine);
    if (runner == 3) {
        printf("version 3's gate/up, the rows gathered in its loads: %.3f ms; over the "
               "rows gathered apart: %.3f + gather %.3f = %.3f ms\n",
               gu_ms[3], apart, gather, apart + gather);
        printf(
            "the experts' GEMMs, version 3 against 1: %.2fx as fast (%.3f vs %.3f ms); "
            "against cuBLAS grouped (4, no SwiGLU): %.2fx (%.3f ms)\n",
            all_ms[1] / all_ms[3], all_ms[3], all_ms[1], all_ms[4] / all_ms[3],
            all_ms[4]);
    }
    int failed = 0;
    for (int v = 0; v <= 6; v++)
        failed |= invalid[v];
    if (failed)
        printf(
            "validation FAILED (above): the timings of a failed version are no result\n");
    cublasDestroy(blas);
    kvcal_gemm_destroy(gemm);
    return failed;
}
