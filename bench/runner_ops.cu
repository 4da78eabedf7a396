// bench/runner_ops.cu: times every CUDA op of the calibration runner at
// Llama-3-8B shapes (8 x 2048 tokens a batch, hidden 4096, 32 heads, 8 kv
// heads, head_dim 128, MLP 14336), against the device's measured ceilings
// (a large device-to-device copy, a large bf16 GEMM), and adds one layer up
// into a predicted forward rate. Each op is timed with CUDA events, the L2
// flushed before every repetition, median of the repetitions. Then the
// layer's ops run in the runner's order 32 layers back to back (what the
// runner sustains, at the GPU's power cap): with the MLP unfused (cuBLAS's
// gate/up GEMM, then SwiGLU), without each elementwise pass (what fusing it
// away could gain at most), with gate/up + SwiGLU in one kernel (what the
// runner takes on Hopper), and with each GEMM's every cuBLASLt candidate in
// turn.
//
// usage: runner_ops [reps] [stem ...]     (reps default 20)
// Each op's section is named by its stem (add_rmsnorm, gemm, rope_observe,
// attention, swiglu, gemm_swiglu), the stem of its CPU reference, kernel and
// test rows; naming stems runs their sections alone (after the ceilings),
// naming none runs every section, the layer's sum and the sustained runs.
// The stem mla (named alone, outside the Llama layer) times the steps of a
// multi-head latent attention block at DeepSeek-V2-Lite's shapes, the
// runner's path and the one before it (mla_section). The stem fp8 (named
// alone) times each step of a Llama-3-8B layer served with per-tensor FP8
// weights, against the FP8 GEMM ceiling measured first (fp8_section). The
// stem rope_shapes (named alone) times q/k norm + RoPE + the observer at
// the shapes of the other models the benches calibrate (rope_shapes_section);
// the stem attention_shapes times the attention there, gpt-oss's sinks
// included (attention_shapes_section); the stem gated_delta times the
// linear attention of Qwen3-Next's and Qwen3.5's layers (gated_delta_section).
// Correctness is the test suite's job (tests/test_backend_ops.c); every
// launch's status is checked here and a failure aborts the run (the mla
// section also checks its ways against each other once).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <vector>

extern "C" {
#include "core/status.h"
}
#include "bench/bench_cuda.cuh"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/mla.h"
#include "kernels/cuda/ops.h"
#include "observers/stats.h"

// --- setup ----------------------------------------------------------------------

static kvcal_bf16 *rand_dev(size_t n, float scale)
{
    static unsigned seed = 1;
    return rand_dev_seeded(n, scale, &seed);
}

// An observer of kv_heads heads of `channels` values each, its statistics
// zeroed, the queries not observed (the runner's default).
static kvcal_kv_observer observer_alloc(int kv_heads, int channels)
{
    kvcal_kv_observer obs;
    obs.q_absmax = nullptr;
    const size_t n_max = (size_t)kv_heads * channels,
                 n_hist = (size_t)kv_heads * KVCAL_HIST_BINS;
    for (int kv = 0; kv < 2; kv++) {
        CHECK_CUDA(cudaMalloc(&obs.absmax[kv], n_max * sizeof(float)));
        CHECK_CUDA(cudaMalloc(&obs.hist[kv], n_hist * sizeof(uint64_t)));
        CHECK_CUDA(cudaMalloc(&obs.batch_absmax[kv], kv_heads * sizeof(float)));
        CHECK_CUDA(cudaMemset(obs.absmax[kv], 0, n_max * sizeof(float)));
        CHECK_CUDA(cudaMemset(obs.hist[kv], 0, n_hist * sizeof(uint64_t)));
        CHECK_CUDA(cudaMemset(obs.batch_absmax[kv], 0, kv_heads * sizeof(float)));
    }
    return obs;
}

static void observer_free(kvcal_kv_observer &obs)
{
    for (int kv = 0; kv < 2; kv++) {
        CHECK_CUDA(cudaFree(obs.absmax[kv]));
        CHECK_CUDA(cudaFree(obs.hist[kv]));
        CHECK_CUDA(cudaFree(obs.batch_absmax[kv]));
    }
}

static void row(const char *name, float ms, double flops, double bytes,
                double peak_tflops, double peak_tbs)
{
    const double tf = flops / (ms * 1e-3) / 1e12, tb = bytes / (ms * 1e-3) / 1e12;
    const double floor_ms =
        std::max(flops / (peak_tflops * 1e12), bytes / (peak_tbs * 1e12)) * 1e3;
    printf("%-26s %9.3f %9.3f %6.0f%% %9.1f %7.2f\n", name, ms, floor_ms,
           100.0 * floor_ms / ms, tf, tb);
}

// The ops' stems, in the order their sections run; mla, rope_shapes,
// attention_shapes, gated_delta and fp8 only when named.
static const char *const op_stems[] = {
    "add_rmsnorm", "gemm", "rope_observe", "attention",   "swiglu",
    "gemm_swiglu", "mla",  "fp8",          "rope_shapes", "attention_shapes",
    "gated_delta"};

// Largest |a - b| over the first cols values of each of rows rows of two
// device buffers, rows sa and sb values apart (NaN wins); *beyond (when
// non-NULL) gets the number of values with |a - b| > atol + |a| rtol (a
// NaN counts).
static double max_diff_rows(const kvcal_bf16 *a, int64_t sa, const kvcal_bf16 *b,
                            int64_t sb, int64_t rows, int64_t cols, double atol = 0.0,
                            double rtol = 0.0, int64_t *beyond = nullptr)
{
    std::vector<kvcal_bf16> ha((size_t)((rows - 1) * sa + cols)),
        hb((size_t)((rows - 1) * sb + cols));
    CHECK_CUDA(
        cudaMemcpy(ha.data(), a, ha.size() * sizeof(kvcal_bf16), cudaMemcpyDeviceToHost));
    CHECK_CUDA(
        cudaMemcpy(hb.data(), b, hb.size() * sizeof(kvcal_bf16), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    int64_t far = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            const double x = kvcal_bf16_to_float(ha[r * sa + c]),
                         d = fabs(x - (double)kvcal_bf16_to_float(hb[r * sb + c]));
            worst = d > worst || d != d ? d : worst;
            far += !(d <= atol + fabs(x) * rtol);
        }
    if (beyond)
        *beyond = far;
    return worst;
}

// --- q/k norm + RoPE at other models' shapes (stem rope_shapes) -----------------

// The stem rope_shapes (named alone): q/k norm + RoPE + the observer at the
// shapes of the models the benches calibrate, 8 x 2048 tokens, as the
// runner launches it (kvcal_rope_observe_launch): Llama-3-8B (32 / 8 heads
// of 128), Qwen3-30B-A3B (32 / 4 heads of 128, q/k norm), gpt-oss-20b (64 /
// 8 heads of 64), against the copy ceiling's floor for the bytes.
struct rope_shape {
    const char *name;
    int h, hkv, hd, qk_norm;
};

static void rope_shapes_section(timer &t, double peak_tflops, double peak_tbs)
{
    const rope_shape shapes[] = {{"Llama-3-8B", 32, 8, 128, 0},
                                 {"Qwen3-30B-A3B", 32, 4, 128, 1},
                                 {"gpt-oss-20b", 64, 8, 64, 0}};
    const int M = 8 * 2048;
    int32_t *pos;
    CHECK_CUDA(cudaMalloc(&pos, M * sizeof *pos));
    {
        std::vector<int32_t> hp(M);
        for (int i = 0; i < M; i++)
            hp[i] = i % 2048;
        CHECK_CUDA(cudaMemcpy(pos, hp.data(), M * sizeof *pos, cudaMemcpyHostToDevice));
    }
    printf("\nrope_observe + observe at each model's shape (8 x 2048 tokens)\n");
    for (const rope_shape &sh : shapes) {
        const int qkv_w = (sh.h + 2 * sh.hkv) * sh.hd;
        const size_t n_qkv = (size_t)M * qkv_w;
        kvcal_bf16 *qkv = rand_dev(n_qkv, 4.0f);
        kvcal_bf16 *qn = rand_dev(sh.hd, 1.0f), *kn = rand_dev(sh.hd, 1.0f);
        float *inv_freq;
        CHECK_CUDA(cudaMalloc(&inv_freq, sh.hd / 2 * sizeof *inv_freq));
        std::vector<float> hf(sh.hd / 2);
        for (int i = 0; i < sh.hd / 2; i++)
            hf[i] = powf(1000000.0f, -2.0f * i / sh.hd);
        CHECK_CUDA(cudaMemcpy(inv_freq, hf.data(), hf.size() * sizeof(float),
                              cudaMemcpyHostToDevice));
        const kvcal_rope_cfg rope = {
            inv_freq, sh.hd, 0,   sh.qk_norm ? qn : nullptr, sh.qk_norm ? kn : nullptr,
            1e-6f,    1.0f,  0.0f};
        kvcal_kv_observer obs = observer_alloc(sh.hkv, sh.hd);
        const double bytes = 2.0 * M * ((sh.h + sh.hkv) * sh.hd * 2.0 + sh.hkv * sh.hd);
        const float ms = time_ms(t, [&] {
            CHECK_KVCAL(kvcal_rope_observe_launch(qkv, qkv_w, pos, M, sh.h, sh.hkv, sh.hd,
                                                  &rope, &obs, 0));
        });
        row(sh.name, ms, 0.0, bytes, peak_tflops, peak_tbs);
        observer_free(obs);
        CHECK_CUDA(cudaFree(inv_freq));
        CHECK_CUDA(cudaFree(qn));
        CHECK_CUDA(cudaFree(kn));
        CHECK_CUDA(cudaFree(qkv));
    }
    CHECK_CUDA(cudaFree(pos));
}

// --- the gated delta-net (stem gated_delta) ---------------------------------------

// The stem gated_delta (named alone): a linear-attention layer's recurrence
// (kvcal_gated_delta_launch: convolution, the delta rule, the gated norm)
// over 8 x 2048 tokens at Qwen3-Next-80B-A3B's sizes (16 key heads, 32
// value heads, heads of 128, 4 taps) and Qwen3.5's smaller ones (16 and 16),
// its FLOPs those of the state's update and read (6 dk dv a token and value
// head).
static void gated_delta_section(timer &t, double peak_tflops, double peak_tbs)
{
    struct {
        const char *name;
        int nk, nv;
    } shapes[] = {{"Qwen3-Next-80B-A3B", 16, 32}, {"16 / 16 heads", 16, 16}};
    const int B = 8, T = 2048, dk = 128, dv = 128, taps = 4;
    printf("\ngated delta-net at each model's shape (8 x 2048 tokens)\n");
    for (const auto &sh : shapes) {
        const size_t C = 2 * (size_t)sh.nk * dk + (size_t)sh.nv * dv,
                     width = C + (size_t)sh.nv * dv, n = (size_t)B * T;
        kvcal_bf16 *x = rand_dev(n * width, 2.0f), *ba = rand_dev(n * 2 * sh.nv, 3.0f),
                   *conv = rand_dev(C * taps, 0.5f), *a_log = rand_dev(sh.nv, 1.0f),
                   *dt = rand_dev(sh.nv, 1.0f), *norm = rand_dev(dv, 1.0f),
                   *out = rand_dev(n * sh.nv * dv, 1.0f);
        const kvcal_gated_delta_params p = {sh.nk, dk,   sh.nv, dv, taps,
                                            1e-6f, conv, a_log, dt, norm};
        float *work = nullptr;
        CHECK_CUDA(cudaMalloc(&work, kvcal_gated_delta_work_bytes(&p, (int64_t)n)));
        const float ms = time_ms(t, [&] {
            CHECK_KVCAL(kvcal_gated_delta_launch(out, work, x, ba, &p, B, T, 0));
        });
        CHECK_CUDA(cudaFree(work));
        row(sh.name, ms, 6.0 * n * sh.nv * dk * dv,
            2.0 * n * (width + 2 * sh.nv + sh.nv * dv), peak_tflops, peak_tbs);
        for (kvcal_bf16 *b : {x, ba, conv, a_log, dt, norm, out})
            CHECK_CUDA(cudaFree(b));
    }
}

// --- attention at other models' shapes (stem attention_shapes) -----------------

// The stem attention_shapes (named alone): causal attention over 8 x 2048
// tokens as the runner runs it (the heads read inside the fused QKV buffer)
// at Llama-3-8B's, Qwen3-30B-A3B's and gpt-oss-20b's shapes: on cuDNN
// (kvcal_attention_run), and for gpt-oss with its sinks as its full layers
// run (cuDNN with the softmax statistics, then the rescale), the rescale
// alone, and its sliding layers on kvcal's kernel (window 128).
struct attention_shape {
    const char *name;
    int h, hkv, hd;
};

static void attention_shapes_section(timer &t, double peak_tflops, double peak_tbs)
{
    const attention_shape shapes[] = {{"Llama-3-8B", 32, 8, 128},
                                      {"Qwen3-30B-A3B", 32, 4, 128},
                                      {"gpt-oss-20b", 64, 8, 64}};
    const int B = 8, T = 2048, M = B * T;
    kvcal_attention_t *cudnn;
    CHECK_KVCAL(kvcal_attention_create(0, &cudnn));
    printf("\ncausal attention at each model's shape (8 x 2048 tokens; %s)\n",
           kvcal_attention_note(cudnn));
    for (const attention_shape &sh : shapes) {
        const int qkv_w = (sh.h + 2 * sh.hkv) * sh.hd;
        kvcal_bf16 *qkv = rand_dev((size_t)M * qkv_w, 1.0f);
        kvcal_bf16 *out = rand_dev((size_t)M * sh.h * sh.hd, 1.0f);
        kvcal_bf16 *sinks = rand_dev(sh.h, 2.0f);
        float *lse;
        CHECK_CUDA(cudaMalloc(&lse, (size_t)M * sh.h * sizeof *lse));
        const kvcal_bf16 *q = qkv, *k = qkv + sh.h * sh.hd, *v = k + sh.hkv * sh.hd;
        const float scale = 1.0f / sqrtf((float)sh.hd);
        // causal: half the S x S scores of each head, twice (Q K^T, P V)
        const double flops = 4.0 * B * sh.h * (double)T * T / 2 * sh.hd;
        const double bytes = 2.0 * M * ((sh.h + 2 * sh.hkv) * sh.hd + sh.h * sh.hd);
        char name[64];
        kvcal_attention_impl impl;
        const float ms = time_ms(t, [&] {
            CHECK_KVCAL(kvcal_attention_run(cudnn, out, sh.h * sh.hd, q, k, v, qkv_w, B,
                                            T, sh.h, sh.hkv, sh.hd, scale, 0, &impl));
        });
        snprintf(name, sizeof name, "%s %s", sh.name,
                 impl == KVCAL_ATTENTION_IMPL_CUDNN ? "cuDNN" : "kvcal");
        row(name, ms, flops, bytes, peak_tflops, peak_tbs);
        printf("  %s\n", kvcal_attention_note(cudnn));
        if (sh.hd == 64) {
            int taken = 0;
            const float sinks_ms = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_attention_run_sinks(cudnn, out, sh.h * sh.hd, q, k, v,
                                                      qkv_w, B, T, sh.h, sh.hkv, sh.hd,
                                                      scale, sinks, lse, 0, &taken));
            });
            row(taken ? "  sinks: cuDNN + lse + rescale" : "  sinks: not on cuDNN",
                sinks_ms, flops, bytes, peak_tflops, peak_tbs);
            printf("  %s\n", kvcal_attention_note(cudnn));
            const float rescale_ms = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_attention_sinks_rescale_launch(
                    out, sh.h * sh.hd, lse, sinks, B, T, sh.h, sh.hd, 0));
            });
            row("  sinks: the rescale alone", rescale_ms, 0.0, 4.0 * M * sh.h * sh.hd,
                peak_tflops, peak_tbs);
            const float window_ms = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_attention_sinks_launch(out, sh.h * sh.hd, q, k, v,
                                                         qkv_w, B, T, sh.h, sh.hkv, sh.hd,
                                                         scale, 128, 0.0f, sinks, 0));
            });
            row("  sinks, window 128, kvcal", window_ms,
                4.0 * B * sh.h * T * 128.0 * sh.hd, bytes, peak_tflops, peak_tbs);
        }
        CHECK_CUDA(cudaFree(lse));
        CHECK_CUDA(cudaFree(sinks));
        CHECK_CUDA(cudaFree(out));
        CHECK_CUDA(cudaFree(qkv));
    }
    kvcal_attention_destroy(cudnn);
}

// --- multi-head latent attention (stem mla) -------------------------------------

// One MLA attention block as the runner runs it at DeepSeek-V2-Lite's shapes
// (hidden 2048, 16 heads, no query LoRA, kv_lora_rank 512, RoPE part 64,
// q/k heads of 128 + 64, v heads of 128; 8 x 2048 tokens): q and kv_a
// projections, the cache point (mla_latent, observed, the queries' RoPE),
// K and V from the entry, the attention, o_proj. K and V the runner's way:
// kv_b_proj with each head's rows as [V; no-RoPE] as one batched GEMM
// reading the latent in place, a head a batch, into heads of [V | K's
// no-RoPE part | K's RoPE part], then the entry's RoPE part into K
// (mla_expand_rope); and the ways before: two batched GEMMs (a head's
// no-RoPE part into K's rows, its V into kv_b_proj's output), kv_b_proj
// whole reading the latent in place, then the expansion of K (mla_expand),
// and before that the latent made contiguous first: each step timed. The
// ways' K and V are compared once: K's RoPE part must be identical, and
// K's no-RoPE part and V within the GEMM rows' bound of
// tests/test_backend_ops.c (the GEMMs may round apart where cuBLASLt chose
// other algorithms: the largest difference is printed).
// The attention every way the runner may take it: cuDNN on the heads as
// they are (kvcal_attention_run_qk_v, K and V read inside the [V | K]
// heads; and K apart, V inside kv_b_proj's output, as before) and,
// where cuDNN refuses them, V padded to 192 (the expansion writes it) on
// kvcal_attention_run (cuDNN at 192 if it takes that, else kvcal's
// tensor-core kernel) and the padding dropped; and the portable kernel at
// 192, which the runner took before the tensor-core kernel knew 192 where
// cuDNN refused. Each attention's output is checked against the
// tensor-core kernel's first (2e-2). Prints the block's sum each way (the
// way before: the latent's copy, kv_b_proj whole and the expansion of K,
// and the attention before cuDNN's split).
static void mla_section(timer &t, kvcal_gemm_t *gemm, double peak_tflops, double peak_tbs)
{
    const int B = 8, T = 2048, D = 2048, H = 16, KVR = 512, R = 64, NOPE = 128, VD = 128;
    const int M = B * T, QK = NOPE + R, E = KVR + R, KVW = NOPE + VD, KVH = VD + QK;
    const int64_t HQ = (int64_t)H * QK;
    // yarn x40 with mscale_all_dim 0.707: (0.1 * 0.707 * ln 40 + 1)^2 / sqrt(192)
    const float mscale = 0.1f * 0.707f * logf(40.0f) + 1.0f;
    const float scale = mscale * mscale / sqrtf((float)QK);
    kvcal_bf16 *x = rand_dev((size_t)M * D, 1.0f), *w_q = rand_dev((size_t)HQ * D, 0.02f),
               *w_kva = rand_dev((size_t)E * D, 0.02f),
               *w_kvb = rand_dev((size_t)H * KVW * KVR, 0.05f),
               *w_o = rand_dev((size_t)D * H * VD, 0.02f), *norm_w = rand_dev(KVR, 1.0f);
    kvcal_bf16 *q = rand_dev((size_t)M * HQ, 1.0f),
               *entry = rand_dev((size_t)M * E, 1.0f),
               *lat = rand_dev((size_t)M * KVR, 1.0f),
               *kvb = rand_dev((size_t)M * H * KVW, 1.0f),
               *k = rand_dev((size_t)M * HQ, 1.0f),
               *k_new = rand_dev((size_t)M * HQ, 1.0f),
               *kvb_new = rand_dev((size_t)M * H * KVW, 1.0f),
               *w_kvb_vf = rand_dev((size_t)H * KVW * KVR, 0.05f),
               *kvh = rand_dev((size_t)M * H * KVH, 1.0f),
               *v_pad = rand_dev((size_t)M * HQ, 1.0f),
               *att_pad = rand_dev((size_t)M * HQ, 1.0f),
               *att = rand_dev((size_t)M * H * VD, 1.0f),
               *att_ref = rand_dev((size_t)M * HQ, 1.0f),
               *y = rand_dev((size_t)M * D, 1.0f);
    int32_t *pos;
    float *inv_freq;
    CHECK_CUDA(cudaMalloc(&pos, M * sizeof *pos));
    CHECK_CUDA(cudaMalloc(&inv_freq, R / 2 * sizeof *inv_freq));
    {
        std::vector<int32_t> hp(M);
        std::vector<float> hf(R / 2);
        for (int i = 0; i < M; i++)
            hp[i] = i % T;
        for (int i = 0; i < R / 2; i++)
            hf[i] = powf(10000.0f, -2.0f * i / R);
        CHECK_CUDA(cudaMemcpy(pos, hp.data(), M * sizeof *pos, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(inv_freq, hf.data(), R / 2 * sizeof(float),
                              cudaMemcpyHostToDevice));
    }
    kvcal_kv_observer obs = observer_alloc(1, E);
    // the cached RoPE part's factor: yarn's mscale / mscale_all_dim, 1 at V2-Lite
    const kvcal_mla_cfg cfg = {H, QK, KVR, R, norm_w, 1e-6f, inv_freq, 1.0f};
    const size_t e = sizeof(kvcal_bf16);
    printf("\nmulti-head latent attention, DeepSeek-V2-Lite's shapes (%d x %d tokens)\n",
           B, T);
    auto gemm_ms = [&](const char *name, kvcal_bf16 *out, const kvcal_bf16 *in,
                       const kvcal_bf16 *w, int kk, int n) {
        const float ms = time_ms(t, [&] {
            CHECK_KVCAL(kvcal_gemm_launch(gemm, out, in, w, nullptr, M, kk, n, 0));
        });
        row(name, ms, 2.0 * M * kk * n,
            2.0 * ((double)M * kk + (double)kk * n + (double)M * n), peak_tflops,
            peak_tbs);
        return ms;
    };
    const float q_ms = gemm_ms("gemm q", q, x, w_q, D, (int)HQ);
    const float kva_ms = gemm_ms("gemm kv_a", entry, x, w_kva, D, E);
    const float latent_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_mla_latent_launch(entry, E, q, HQ, pos, M, &cfg, &obs, 0));
    });
    row("mla_latent + observe", latent_ms, 0.0, 2.0 * e * M * (E + (double)H * R),
        peak_tflops, peak_tbs);
    const float copy_ms = time_ms(t, [&] {
        CHECK_CUDA(cudaMemcpy2DAsync(lat, KVR * e, entry, E * e, KVR * e, M,
                                     cudaMemcpyDeviceToDevice, 0));
    });
    row("latent made contiguous", copy_ms, 0.0, 2.0 * e * M * KVR, peak_tflops, peak_tbs);
    const float kvb_ms = gemm_ms("gemm kv_b", kvb, lat, w_kvb, KVR, H * KVW);
    const float kvb_ld_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_gemm_launch_ld(gemm, kvb, entry, E, w_kvb, nullptr, M, KVR,
                                         H * KVW, 0));
    });
    row("gemm kv_b, latent in place", kvb_ld_ms, 2.0 * M * KVR * (double)(H * KVW),
        2.0 * ((double)M * KVR + (double)KVR * H * KVW + (double)M * H * KVW),
        peak_tflops, peak_tbs);
    const float expand_k_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_mla_expand_launch(k, nullptr, QK, kvb, entry, E, M, H, NOPE, VD,
                                            KVR, R, 0));
    });
    row("mla_expand K", expand_k_ms, 0.0, e * M * ((double)H * (NOPE + QK) + R),
        peak_tflops, peak_tbs);
    // the runner's: kv_b_proj a head a batch (the weight's rows of a head's
    // no-RoPE part, then of its V, KVW * KVR values apart), the RoPE part
    const int64_t w_stride = (int64_t)KVW * KVR;
    auto batched = [&](kvcal_bf16 *out, int64_t ldo, int64_t out_stride,
                       const kvcal_bf16 *w, int n) {
        CHECK_KVCAL(kvcal_gemm_batched_launch(gemm, out, ldo, out_stride, entry, E, w,
                                              w_stride, M, KVR, n, H, 0));
    };
    auto batched_row = [&](const char *name, float ms, int n) {
        row(name, ms, 2.0 * M * KVR * (double)(H * n),
            2.0 * ((double)M * KVR + (double)KVR * H * n + (double)M * H * n),
            peak_tflops, peak_tbs);
    };
    const float k_gemm_ms = time_ms(t, [&] { batched(k_new, HQ, QK, w_kvb, NOPE); });
    batched_row("gemm kv_b K, a head a batch", k_gemm_ms, NOPE);
    const float v_gemm_ms = time_ms(t, [&] {
        batched(kvb_new + NOPE, (int64_t)H * KVW, KVW, w_kvb + (int64_t)NOPE * KVR, VD);
    });
    batched_row("gemm kv_b V, a head a batch", v_gemm_ms, VD);
    const float rope_ms = time_ms(t, [&] {
        CHECK_KVCAL(
            kvcal_mla_expand_rope_launch(k_new, QK, entry, E, M, H, NOPE, KVR, R, 0));
    });
    row("mla_expand_rope K", rope_ms, 0.0, e * M * ((double)H * R + R), peak_tflops,
        peak_tbs);
    // the runner's: the weight's rows a head's [V; no-RoPE] (as the loader
    // lays them), one batched GEMM into [V | K] heads, the RoPE part
    CHECK_CUDA(cudaMemcpy2D(w_kvb_vf, (size_t)KVW * KVR * e, w_kvb + (int64_t)NOPE * KVR,
                            (size_t)KVW * KVR * e, (size_t)VD * KVR * e, H,
                            cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy2D(w_kvb_vf + (int64_t)VD * KVR, (size_t)KVW * KVR * e, w_kvb,
                            (size_t)KVW * KVR * e, (size_t)NOPE * KVR * e, H,
                            cudaMemcpyDeviceToDevice));
    const float vk_gemm_ms =
        time_ms(t, [&] { batched(kvh, (int64_t)H * KVH, KVH, w_kvb_vf, KVW); });
    batched_row("gemm kv_b V + K, a head a batch", vk_gemm_ms, KVW);
    const float rope_vk_ms = time_ms(t, [&] {
        CHECK_KVCAL(
            kvcal_mla_expand_rope_launch(kvh + VD, KVH, entry, E, M, H, NOPE, KVR, R, 0));
    });
    row("mla_expand_rope K in [V | K] heads", rope_vk_ms, 0.0,
        e * M * ((double)H * R + R), peak_tflops, peak_tbs);
    const float kv_ms = vk_gemm_ms + rope_vk_ms,
                kv_two_ms = k_gemm_ms + v_gemm_ms + rope_ms,
                kv_before_ms = kvb_ld_ms + expand_k_ms;
    {
        // once, each way from the same entry
        CHECK_KVCAL(kvcal_gemm_launch_ld(gemm, kvb, entry, E, w_kvb, nullptr, M, KVR,
                                         H * KVW, 0));
        CHECK_KVCAL(kvcal_mla_expand_launch(k, nullptr, QK, kvb, entry, E, M, H, NOPE, VD,
                                            KVR, R, 0));
        batched(k_new, HQ, QK, w_kvb, NOPE);
        batched(kvb_new + NOPE, (int64_t)H * KVW, KVW, w_kvb + (int64_t)NOPE * KVR, VD);
        CHECK_KVCAL(
            kvcal_mla_expand_rope_launch(k_new, QK, entry, E, M, H, NOPE, KVR, R, 0));
        batched(kvh, (int64_t)H * KVH, KVH, w_kvb_vf, KVW);
        CHECK_KVCAL(
            kvcal_mla_expand_rope_launch(kvh + VD, KVH, entry, E, M, H, NOPE, KVR, R, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        // against kv_b_proj whole + the expansion: the two GEMMs', then the one's
        const struct {
            const char *way;
            const kvcal_bf16 *k, *v;
            int64_t k_head, v_head;
        } ways[] = {{"two batched GEMMs", k_new, kvb_new + NOPE, QK, KVW},
                    {"one batched GEMM", kvh + VD, kvh, KVH, KVH}};
        for (const auto &w : ways) {
            int64_t k_far = 0, v_far = 0;
            const double k_rope =
                max_diff_rows(k + NOPE, QK, w.k + NOPE, w.k_head, (int64_t)M * H, R);
            const double k_nope = max_diff_rows(k, QK, w.k, w.k_head, (int64_t)M * H,
                                                NOPE, 2e-2, 8e-3, &k_far);
            const double v_diff = max_diff_rows(kvb + NOPE, KVW, w.v, w.v_head,
                                                (int64_t)M * H, VD, 2e-2, 8e-3, &v_far);
            printf("K and V from the entry, %s against kv_b_proj + mla_expand K: largest "
                   "difference: K's no-RoPE part %g, V %g, K's RoPE part %g\n",
                   w.way, k_nope, v_diff, k_rope);
            if (k_rope != 0.0 || k_far || v_far) {
                fprintf(stderr,
                        "mla: %s' K and V differ from kv_b_proj + mla_expand's: K's "
                        "RoPE part by %g (must be 0), %lld of K's no-RoPE values and "
                        "%lld of V's beyond 2e-2 + 8e-3 |x|\n",
                        w.way, k_rope, (long long)k_far, (long long)v_far);
                exit(1);
            }
        }
        printf("K and V from the entry: the runner's %.3f ms (one batched GEMM + the "
               "RoPE part), two batched GEMMs + the RoPE part %.3f ms, kv_b_proj + "
               "mla_expand K %.3f ms\n",
               kv_ms, kv_two_ms, kv_before_ms);
    }
    const float expand_v_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_mla_expand_launch(nullptr, v_pad, QK, kvb, entry, E, M, H, NOPE,
                                            VD, KVR, R, 0));
    });
    row("mla_expand V padded", expand_v_ms, 0.0, e * (double)M * H * (VD + QK),
        peak_tflops, peak_tbs);

    // the attention: the tensor-core kernel at 192 first, the reference of the others
    const double pairs = (double)B * H * T * (T + 1) / 2.0;
    const double pad_flops = 2.0 * pairs * (QK + QK),
                 split_flops = 2.0 * pairs * (QK + VD);
    const double pad_bytes = e * (double)M * HQ * 4.0,
                 split_bytes = e * (double)M * H * (2.0 * QK + 2.0 * VD);
    CHECK_KVCAL(kvcal_attention_launch_version(1, att_ref, HQ, q, k, v_pad, HQ, B, T, H,
                                               H, QK, scale, 0));
    const float tc_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_attention_launch_version(1, att_pad, HQ, q, k, v_pad, HQ, B, T,
                                                   H, H, QK, scale, 0));
    });
    row("attention 192 kvcal tc", tc_ms, pad_flops, pad_bytes, peak_tflops, peak_tbs);
    // an output against the tensor-core kernel's, head by head (M * H rows of VD
    // values; heads head_stride apart in got, QK in the reference)
    auto check = [&](const char *what, const kvcal_bf16 *got, int64_t head_stride) {
        const double d = max_diff_rows(att_ref, QK, got, head_stride, (int64_t)M * H, VD);
        if (!(d <= 2e-2)) {
            fprintf(stderr, "mla: %s differs from the tensor-core kernel by %g\n", what,
                    d);
            exit(1);
        }
    };
    kvcal_attention_t *cudnn;
    CHECK_KVCAL(kvcal_attention_create(0, &cudnn));
    int taken = 0;
    // the runner's: K and V inside the [V | K] heads (kvh: the same K and V)
    auto split = [&] {
        CHECK_KVCAL(kvcal_attention_run_qk_v(cudnn, att, H * VD, q, HQ, kvh + VD,
                                             (int64_t)H * KVH, KVH, kvh, (int64_t)H * KVH,
                                             KVH, B, T, H, H, QK, VD, scale, 0, &taken));
    };
    split();
    printf("attention q/k 192, v 128 (kvcal_attention_run_qk_v): %s\n",
           kvcal_attention_note(cudnn));
    float split_ms = 0.0f;
    if (taken) {
        CHECK_CUDA(cudaDeviceSynchronize());
        check("cuDNN's q/k 192, v 128 in [V | K] heads", att, VD);
        split_ms = time_ms(t, split);
        row("attention cuDNN 192/128, [V | K] heads", split_ms, split_flops, split_bytes,
            peak_tflops, peak_tbs);
        auto apart = [&] {
            CHECK_KVCAL(kvcal_attention_run_qk_v(cudnn, att, H * VD, q, HQ, k, HQ, QK,
                                                 kvb + NOPE, H * KVW, KVW, B, T, H, H, QK,
                                                 VD, scale, 0, &taken));
        };
        apart();
        CHECK_CUDA(cudaDeviceSynchronize());
        check("cuDNN's q/k 192, v 128, K apart", att, VD);
        row("attention cuDNN 192/128, K apart", time_ms(t, apart), split_flops,
            split_bytes, peak_tflops, peak_tbs);
    }
    kvcal_attention_impl impl = KVCAL_ATTENTION_IMPL_KVCAL;
    CHECK_KVCAL(kvcal_attention_run(cudnn, att_pad, HQ, q, k, v_pad, HQ, B, T, H, H, QK,
                                    scale, 0, &impl));
    printf("attention 192, V padded (kvcal_attention_run): %s (%s)\n",
           impl == KVCAL_ATTENTION_IMPL_CUDNN ? "cuDNN" : "kvcal's tensor-core kernel",
           kvcal_attention_note(cudnn));
    CHECK_CUDA(cudaDeviceSynchronize());
    check("kvcal_attention_run at 192", att_pad, QK);
    const float run192_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_attention_run(cudnn, att_pad, HQ, q, k, v_pad, HQ, B, T, H, H,
                                        QK, scale, 0, nullptr));
    });
    row(impl == KVCAL_ATTENTION_IMPL_CUDNN ? "attention cuDNN 192 padded"
                                           : "attention 192 run (tc)",
        run192_ms, pad_flops, pad_bytes, peak_tflops, peak_tbs);
    // the portable kernel (kvcal_attention_window_launch takes it at 192)
    t.reps = std::max(1, t.reps / 4);
    const float simt_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_attention_window_launch(att_pad, HQ, q, k, v_pad, HQ, B, T, H,
                                                  H, QK, scale, 0, 0.0f, 0));
    });
    t.reps *= 4;
    check("the portable kernel", att_pad, QK);
    row("attention 192 portable", simt_ms, pad_flops, pad_bytes, peak_tflops, peak_tbs);
    const float drop_ms = time_ms(t, [&] {
        CHECK_CUDA(cudaMemcpy2DAsync(att, VD * e, att_pad, QK * e, VD * e, (size_t)M * H,
                                     cudaMemcpyDeviceToDevice, 0));
    });
    row("drop V's padding", drop_ms, 0.0, 2.0 * e * M * H * VD, peak_tflops, peak_tbs);
    const float o_ms = gemm_ms("gemm o", y, att, w_o, H * VD, D);

    const float common = q_ms + kva_ms + latent_ms + o_ms;
    const float fallback = expand_v_ms + run192_ms + drop_ms;
    const float before = copy_ms + kvb_ms + expand_k_ms + expand_v_ms +
                         (impl == KVCAL_ATTENTION_IMPL_CUDNN ? run192_ms : simt_ms) +
                         drop_ms;
    printf(
        "MLA block (sum of its ops): the runner %.3f ms (K and V one batched GEMM, %s), "
        "before %.3f ms (the latent made contiguous, kv_b_proj + mla_expand, %s); its "
        "attention %.3f ms of it\n",
        common + kv_ms + (taken ? split_ms : fallback),
        taken ? "cuDNN on q/k 192, v 128" : "V padded to 192 on kvcal_attention_run",
        common + before,
        impl == KVCAL_ATTENTION_IMPL_CUDNN ? "cuDNN at 192, V padded"
                                           : "the portable kernel at 192, V padded",
        taken ? split_ms : fallback);
    kvcal_attention_destroy(cudnn);
    for (kvcal_bf16 *p :
         {x, w_q,   w_kva,   w_kvb,    w_o, norm_w, q,       entry, lat,     kvb,
          k, k_new, kvb_new, w_kvb_vf, kvh, v_pad,  att_pad, att,   att_ref, y})
        CHECK_CUDA(cudaFree(p));
    observer_free(obs);
    CHECK_CUDA(cudaFree(pos));
    CHECK_CUDA(cudaFree(inv_freq));
}

// --- a Llama-3-8B layer with FP8 weights (stem fp8) ----------------------------

// Per-tensor e4m3 weights (scale 0.01: core/fp8_linear.h's layout, the scale
// then once per row) and their activations at 8 x 2048 tokens, every step
// the CUDA runner takes (calib/backend_cuda.c): the four FP8 GEMMs with
// per-token activation scales (outer vectors) and, for comparison, with a
// static activation scale (scalars), each with fp32 and with fast
// accumulation, each GEMM's every cuBLASLt candidate; the activation
// quantizations; add + RMSNorm, unfused and with the quantization as its
// epilogue; SwiGLU then its quantization against the fused kernel; RoPE +
// observe and the attention as the runner takes them. Then the steps
// summed into the runner's layer and that layer run 32 times back to back.
// GEMM rows are TFLOP/s against the FP8 GEMM ceiling (16384 x 8192 x 8192,
// scalar scales, fp32 accumulation, as bench/calibrate_fp8.py measures it).
static void fp8_section(timer &t, kvcal_gemm_t *gemm, double peak_tbs, kvcal_bf16 *xn,
                        kvcal_bf16 *resid, kvcal_bf16 *delta, const kvcal_bf16 *norm_w,
                        kvcal_bf16 *qkv, kvcal_bf16 *att, kvcal_bf16 *gu,
                        const int32_t *pos, const kvcal_rope_cfg *rope,
                        const kvcal_kv_observer *obs)
{
    const int B = 8, T = 2048, D = 4096, H = 32, HKV = 8, HD = 128, F = 14336;
    const int M = B * T, QKV = (H + 2 * HKV) * HD, S = 8192;
    const float in_scale = 0.05f, w_scale = 0.01f;
    // the static activation scale and the weights' scale, each 16-byte aligned
    // as cuBLASLt's FP8 algorithms take them (the runner's scales are)
    float *d_scale;
    CHECK_CUDA(cudaMalloc(&d_scale, 8 * sizeof(float)));
    {
        const float h[8] = {in_scale, 0, 0, 0, w_scale, 0, 0, 0};
        CHECK_CUDA(cudaMemcpy(d_scale, h, sizeof h, cudaMemcpyHostToDevice));
    }
    const float *d_in_scale = d_scale, *d_w_scale = d_scale + 4;
    float *row_scales; // scratch of the static quantization's scales, a row each
    CHECK_CUDA(cudaMalloc(&row_scales, (size_t)std::max(M, 2 * F) * sizeof(float)));
    // an e4m3 copy of a random bf16 tensor (rows, cols), quantized statically
    auto fp8_dev = [&](int rows, int cols, float range, const float *scale) {
        kvcal_bf16 *x = rand_dev((size_t)rows * cols, range);
        uint8_t *q;
        CHECK_CUDA(cudaMalloc(&q, (size_t)rows * cols));
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(q, row_scales, x, rows, cols,
                                               KVCAL_FP8A_STATIC, 0, scale, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaFree(x));
        return q;
    };
    // a per-tensor weight's scales: 4 + n floats, all w_scale
    auto weight_scales = [&](int n) {
        std::vector<float> h((size_t)n + 4, w_scale);
        float *d;
        CHECK_CUDA(cudaMalloc(&d, h.size() * sizeof(float)));
        CHECK_CUDA(
            cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
        return d;
    };
    enum { G_QKV, G_O, G_GATE_UP, G_DOWN, NUM_GEMMS };
    const char *names[NUM_GEMMS] = {"qkv", "o", "gate_up", "down"};
    const int gk[NUM_GEMMS] = {D, D, D, F}, gn[NUM_GEMMS] = {QKV, D, 2 * F, D};
    kvcal_bf16 *gout[NUM_GEMMS] = {qkv, delta, gu, delta};
    uint8_t *wq[NUM_GEMMS];
    float *ws[NUM_GEMMS];
    for (int g = 0; g < NUM_GEMMS; g++) {
        wq[g] = fp8_dev(gn[g], gk[g], 0.02f, d_w_scale);
        ws[g] = weight_scales(gn[g]);
    }
    uint8_t *xq = fp8_dev(M, F, 1.0f, d_in_scale); // (M, F) the activations, e4m3
    float *xs;                                     // (M) their per-token scales
    CHECK_CUDA(cudaMalloc(&xs, M * sizeof(float)));
    CHECK_KVCAL(
        kvcal_fp8_quant_act_launch(xq, xs, xn, M, D, KVCAL_FP8A_TOKEN, 0, nullptr, 0));
    kvcal_bf16 *act = rand_dev((size_t)M * F, 1.0f);
    const size_t e = sizeof(kvcal_bf16);

    // --- the FP8 GEMM ceiling ---
    uint8_t *ca = fp8_dev(2 * S, S, 1.0f, d_in_scale), // (2S, S) x
        *cb = fp8_dev(S, S, 1.0f, d_in_scale);         // (S, S) w
    kvcal_bf16 *cc = rand_dev((size_t)2 * S * S, 1.0f);
    const double ceil_flops = 2.0 * 2 * S * (double)S * S;
    const float ceil_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_gemm_fp8_launch(
            gemm, cc, ca, d_in_scale, KVCAL_GEMM_SCALE_SCALAR, cb, d_w_scale,
            KVCAL_GEMM_SCALE_SCALAR, 0, nullptr, 2 * S, S, S, 0));
    });
    const double peak = ceil_flops / (ceil_ms * 1e-3) / 1e12;
    printf("\nFP8 Llama-3-8B layer, per-tensor weights (%d x %d tokens)\n", B, T);
    printf("FP8 GEMM ceiling, %d x %d x %d, scalar scales, fp32 accumulation: %.3f ms, "
           "%.0f TFLOP/s\n",
           2 * S, S, S, ceil_ms, peak);
    CHECK_CUDA(cudaFree(ca));
    CHECK_CUDA(cudaFree(cb));
    CHECK_CUDA(cudaFree(cc));
    printf("%-34s %9s %9s %7s %9s %7s\n", "step (8 x 2048 tokens)", "ms", "floor ms",
           "of fl", "TFLOP/s", "TB/s");
    auto frow = [&](const char *name, float ms, double flops, double bytes) {
        const double tf = flops / (ms * 1e-3) / 1e12, tb = bytes / (ms * 1e-3) / 1e12;
        const double fl =
            std::max(flops / (peak * 1e12), bytes / (peak_tbs * 1e12)) * 1e3;
        printf("%-34s %9.3f %9.3f %6.0f%% %9.1f %7.2f\n", name, ms, fl, 100.0 * fl / ms,
               tf, tb);
    };

    // --- the GEMMs: per-token (outer vectors) and static (scalars), fp32 and fast ---
    // which: the GEMM; token: per-token activation scales; fast: fast accumulation
    auto run_gemm = [&](int g, bool token, bool fast, int cand, int *count, int *chosen) {
        const kvcal_gemm_scale m =
            token ? KVCAL_GEMM_SCALE_OUTER_VEC : KVCAL_GEMM_SCALE_SCALAR;
        CHECK_KVCAL(kvcal_gemm_fp8_launch_candidate(
            gemm, cand, gout[g], xq, token ? xs : d_in_scale, m, wq[g],
            token ? ws[g] + 4 : ws[g], m, fast, nullptr, M, gk[g], gn[g], 0, count,
            chosen));
    };
    float gemm_ms[NUM_GEMMS][2] = {}; // per token: fp32, fast
    for (int g = 0; g < NUM_GEMMS; g++)
        for (int token = 1; token >= 0; token--)
            for (int fast = 0; fast < 2; fast++) {
                const double k = gk[g], n = gn[g];
                const float ms =
                    time_ms(t, [&] { run_gemm(g, token, fast, -1, nullptr, nullptr); });
                if (token)
                    gemm_ms[g][fast] = ms;
                char name[64];
                snprintf(name, sizeof name, "gemm %s %s%s", names[g],
                         token ? "per-token" : "static", fast ? " fast" : "");
                frow(name, ms, 2.0 * M * k * n, M * k + k * n + 2.0 * M * n);
                int count = 0, chosen = 0;
                run_gemm(g, token, fast, -1, &count, &chosen);
                printf("  %d cuBLASLt candidates, ms (* tuned choice):", count);
                for (int c = 0; c < count; c++) {
                    const float cms = time_ms(
                        t, [&] { run_gemm(g, token, fast, c, nullptr, nullptr); });
                    printf(" %.3f%s", cms, c == chosen ? "*" : "");
                }
                printf("\n");
            }

    // --- the elementwise steps ---
    const float quant_d_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(xq, xs, att, M, D, KVCAL_FP8A_TOKEN, 0,
                                               nullptr, 0));
    });
    frow("fp8_quant_act per-token, k 4096", quant_d_ms, 0.0, 3.0 * M * D);
    const float quant_static_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(xq, xs, att, M, D, KVCAL_FP8A_STATIC, 0,
                                               d_in_scale, 0));
    });
    frow("fp8_quant_act static, k 4096", quant_static_ms, 0.0, 3.0 * M * D);
    const float quant_f_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(xq, xs, act, M, F, KVCAL_FP8A_TOKEN, 0,
                                               nullptr, 0));
    });
    frow("fp8_quant_act per-token, k 14336", quant_f_ms, 0.0, 3.0 * M * F);
    const float norm_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_add_rmsnorm_launch(xn, resid, delta, norm_w, M, D, 1e-5f, 0));
    });
    frow("add_rmsnorm (bf16 out)", norm_ms, 0.0, e * 4.0 * M * D);
    const float norm_quant_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_add_rmsnorm_quant_launch(
            xq, xs, resid, delta, norm_w, M, D, 1e-5f, KVCAL_FP8A_TOKEN, 0, nullptr, 0));
    });
    frow("add_rmsnorm_quant per-token", norm_quant_ms, 0.0, e * 3.0 * M * D + M * D);
    const float norm_static_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_add_rmsnorm_quant_launch(xq, xs, resid, delta, norm_w, M, D,
                                                       1e-5f, KVCAL_FP8A_STATIC, 0,
                                                       d_in_scale, 0));
    });
    frow("add_rmsnorm_quant static", norm_static_ms, 0.0, e * 3.0 * M * D + M * D);
    const float swiglu_ms =
        time_ms(t, [&] { CHECK_KVCAL(kvcal_swiglu_launch(act, gu, M, F, 0)); });
    frow("swiglu (bf16 out)", swiglu_ms, 0.0, e * 3.0 * M * F);
    const float swiglu_quant_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_fp8_swiglu_quant_launch(xq, xs, gu, M, F, KVCAL_FP8A_TOKEN, 0,
                                                  nullptr, 0));
    });
    frow("swiglu_quant per-token", swiglu_quant_ms, 0.0, e * 2.0 * M * F + M * F);

    // --- the fused FP8 gate/up + SwiGLU (kvcal's Hopper kernel), then the
    // quantization from its row absmax; checked against cuBLASLt's gate/up,
    // kvcal_swiglu_launch and kvcal_fp8_quant_act_launch on the same input ---
    const int gu_rows = kvcal_gemm_swiglu_rows(F);
    uint8_t *wt; // the gate/up weight in the fused kernel's order
    CHECK_CUDA(cudaMalloc(&wt, (size_t)gu_rows * D));
    CHECK_CUDA(cudaMemset(wt, 0, (size_t)gu_rows * D));
    for (int i = 0; i < gu_rows; i += 128) {
        const int src = kvcal_gemm_swiglu_source_row(i, F);
        if (src >= 0)
            CHECK_CUDA(cudaMemcpy(wt + (size_t)i * D, wq[G_GATE_UP] + (size_t)src * D,
                                  (size_t)128 * D, cudaMemcpyDeviceToDevice));
    }
    float *absmax, *xs2;
    uint8_t *xq2, *xq3;
    kvcal_bf16 *act2;
    CHECK_CUDA(cudaMalloc(&absmax, M * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&xs2, 2 * M * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&xq2, (size_t)M * F));
    CHECK_CUDA(cudaMalloc(&xq3, (size_t)M * F));
    CHECK_CUDA(cudaMalloc(&act2, (size_t)M * F * e));
    auto fused_gate_up = [&](kvcal_bf16 *out) {
        return kvcal_gemm_swiglu_fp8_launch(out, absmax, xq, xs, 1, wt, ws[G_GATE_UP], 0,
                                            M, D, F, 0);
    };
    const kvcal_status fst = fused_gate_up(act2);
    float fused_ms = 0.0f, quant_absmax_ms = 0.0f;
    if (fst != KVCAL_OK) {
        printf("gemm_swiglu_fp8: %s\n", kvcal_last_error());
    } else {
        // the unfused pair's act, from the same x
        run_gemm(G_GATE_UP, true, false, -1, nullptr, nullptr);
        CHECK_KVCAL(kvcal_swiglu_launch(act, gu, M, F, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint16_t> a1((size_t)M * F), a2((size_t)M * F);
        std::vector<float> am(M);
        CHECK_CUDA(cudaMemcpy(a1.data(), act, a1.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(a2.data(), act2, a2.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(
            cudaMemcpy(am.data(), absmax, M * sizeof(float), cudaMemcpyDeviceToHost));
        auto bf = [](uint16_t b) {
            uint32_t u = (uint32_t)b << 16;
            float f;
            memcpy(&f, &u, 4);
            return f;
        };
        size_t same = 0, absmax_off = 0;
        double worst = 0.0;
        for (int r = 0; r < M; r++) {
            float m = 0.0f;
            for (int c = 0; c < F; c++) {
                const size_t i = (size_t)r * F + c;
                const float x1 = bf(a1[i]), x2 = bf(a2[i]);
                same += a1[i] == a2[i];
                worst = std::max(worst, (double)fabsf(x1 - x2) /
                                            std::max(1e-3, (double)fabsf(x1)));
                m = std::max(m, fabsf(x2));
            }
            absmax_off += m != am[r];
        }
        printf("gemm_swiglu_fp8 against cuBLASLt gate/up + swiglu: %.4f%% of act equal, "
               "worst relative difference %.3e; row absmax off in %zu of %d rows\n",
               100.0 * same / a1.size(), worst, absmax_off, M);
        // the quantization from the absmax against the per-token kernel's
        CHECK_KVCAL(kvcal_fp8_quant_absmax_launch(xq2, xs2, act2, absmax, M, F,
                                                  KVCAL_FP8A_TOKEN, nullptr, 0));
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(xq3, xs2 + M, act2, M, F, KVCAL_FP8A_TOKEN,
                                               0, nullptr, 0));
        CHECK_CUDA(cudaDeviceSynchronize());
        std::vector<uint8_t> q2((size_t)M * F), q3((size_t)M * F);
        std::vector<float> s2(2 * M);
        CHECK_CUDA(cudaMemcpy(q2.data(), xq2, q2.size(), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(q3.data(), xq3, q3.size(), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(s2.data(), xs2, s2.size() * 4, cudaMemcpyDeviceToHost));
        size_t qoff = 0, soff = 0;
        for (size_t i = 0; i < q2.size(); i++)
            qoff += q2[i] != q3[i];
        for (int r = 0; r < M; r++)
            soff += s2[r] != s2[M + r];
        printf(
            "fp8_quant_absmax against fp8_quant_act per-token: %zu bytes and %zu scales "
            "differ\n",
            qoff, soff);
        fused_ms = time_ms(t, [&] { CHECK_KVCAL(fused_gate_up(act2)); });
        frow("gemm_swiglu_fp8 (gate_up + SwiGLU)", fused_ms, 2.0 * M * D * 2.0 * F,
             (double)M * D + 2.0 * F * D + e * (double)M * F);
        quant_absmax_ms = time_ms(t, [&] {
            CHECK_KVCAL(kvcal_fp8_quant_absmax_launch(xq2, xs2, act2, absmax, M, F,
                                                      KVCAL_FP8A_TOKEN, nullptr, 0));
        });
        frow("fp8_quant_absmax per-token, k 14336", quant_absmax_ms, 0.0, 3.0 * M * F);
        printf("gate_up + SwiGLU + quantization: cuBLASLt + swiglu_quant %.3f ms, fused "
               "%.3f ms\n",
               gemm_ms[G_GATE_UP][0] + swiglu_quant_ms, fused_ms + quant_absmax_ms);
    }
    kvcal_kv_observer o = *obs;
    const float rope_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_rope_observe_launch(qkv, QKV, pos, M, H, HKV, HD, rope, &o, 0));
    });
    frow("rope_observe + observe", rope_ms, 0.0,
         e * M * ((H + HKV) * HD * 2.0 + HKV * HD));
    kvcal_attention_t *attn;
    CHECK_KVCAL(kvcal_attention_create(0, &attn));
    auto attend = [&] {
        CHECK_KVCAL(kvcal_attention_run(attn, att, D, qkv, qkv + H * HD,
                                        qkv + (H + HKV) * HD, QKV, B, T, H, HKV, HD,
                                        0.08838834764f, 0, nullptr));
    };
    const float att_ms = time_ms(t, attend);
    frow("attention (the runner's)", att_ms, 4.0 * B * H * HD * (double)T * (T + 1) / 2.0,
         e * M * (2.0 * H + 2.0 * HKV) * HD);

    // --- the layer: the steps summed, then 32 layers back to back ---
    // the runner's FP8 layer: fused norm + quant, qkv, RoPE + observe,
    // attention, the attention's quantization, o, fused norm + quant,
    // gate_up, SwiGLU + quant, down
    auto layer = [&](bool fast, bool fused) {
        CHECK_KVCAL(kvcal_fp8_add_rmsnorm_quant_launch(
            xq, xs, resid, delta, norm_w, M, D, 1e-5f, KVCAL_FP8A_TOKEN, 0, nullptr, 0));
        run_gemm(G_QKV, true, fast, -1, nullptr, nullptr);
        CHECK_KVCAL(kvcal_rope_observe_launch(qkv, QKV, pos, M, H, HKV, HD, rope, &o, 0));
        attend();
        CHECK_KVCAL(kvcal_fp8_quant_act_launch(xq, xs, att, M, D, KVCAL_FP8A_TOKEN, 0,
                                               nullptr, 0));
        run_gemm(G_O, true, fast, -1, nullptr, nullptr);
        CHECK_KVCAL(kvcal_fp8_add_rmsnorm_quant_launch(
            xq, xs, resid, delta, norm_w, M, D, 1e-5f, KVCAL_FP8A_TOKEN, 0, nullptr, 0));
        if (fused) {
            CHECK_KVCAL(fused_gate_up(act2));
            CHECK_KVCAL(kvcal_fp8_quant_absmax_launch(xq, xs, act2, absmax, M, F,
                                                      KVCAL_FP8A_TOKEN, nullptr, 0));
        } else {
            run_gemm(G_GATE_UP, true, fast, -1, nullptr, nullptr);
            CHECK_KVCAL(kvcal_fp8_swiglu_quant_launch(xq, xs, gu, M, F, KVCAL_FP8A_TOKEN,
                                                      0, nullptr, 0));
        }
        run_gemm(G_DOWN, true, fast, -1, nullptr, nullptr);
    };
    const double layer_flops = 2.0 * M * D * ((double)QKV + D + 3.0 * F) +
                               4.0 * B * H * HD * (double)T * (T + 1) / 2.0;
    // variant 2: fp32 accumulation with the fused FP8 gate/up. The 32-layer
    // runs alternate the variants, round by round, so that the clock's drift
    // under the power cap falls on all of them.
    const int variants = fst == KVCAL_OK ? 3 : 2;
    float sustained[3][3];
    for (int v = 0; v < variants; v++) {
        layer(v == 1, v == 2);
        CHECK_CUDA(cudaDeviceSynchronize());
    }
    for (int round = 0; round < 3; round++)
        for (int v = 0; v < variants; v++) {
            float &ms = sustained[v][round];
            CHECK_CUDA(cudaEventRecord(t.a));
            for (int l = 0; l < 32; l++)
                layer(v == 1, v == 2);
            CHECK_CUDA(cudaEventRecord(t.b));
            CHECK_CUDA(cudaEventSynchronize(t.b));
            CHECK_CUDA(cudaEventElapsedTime(&ms, t.a, t.b));
            ms /= 32;
        }
    for (int v = 0; v < variants; v++) {
        const int fast = v == 1, fused = v == 2;
        const float gemms = gemm_ms[G_QKV][fast] + gemm_ms[G_O][fast] +
                            (fused ? fused_ms : gemm_ms[G_GATE_UP][fast]) +
                            gemm_ms[G_DOWN][fast];
        const float sum = gemms + 2 * norm_quant_ms + rope_ms + att_ms + quant_d_ms +
                          (fused ? quant_absmax_ms : swiglu_quant_ms);
        const float *sv = sustained[v];
        printf(
            "\nFP8 layer, %s accumulation%s: sum of steps %.3f ms (GEMMs %.3f, %.0f%% of "
            "the sum; GEMMs at %.0f TFLOP/s, %.0f%% of the ceiling), %.0f TFLOP/s\n",
            fast ? "fast" : "fp32", fused ? ", the fused gate/up" : "", sum, gemms,
            100.0 * gemms / sum,
            2.0 * M * D * ((double)QKV + D + 3.0 * F) / (gemms * 1e-3) / 1e12,
            100.0 * 2.0 * M * D * ((double)QKV + D + 3.0 * F) / (gemms * 1e-3) / 1e12 /
                peak,
            layer_flops / (sum * 1e-3) / 1e12);
        printf(
            "  32 layers back to back, ms per layer, rounds interleaved with the other "
            "variants: %.3f %.3f %.3f (%.0f tokens/s over 32 layers at the best)\n",
            sv[0], sv[1], sv[2], M / (32.0 * std::min({sv[0], sv[1], sv[2]}) * 1e-3));
    }
    kvcal_attention_destroy(attn);
    for (int g = 0; g < NUM_GEMMS; g++) {
        CHECK_CUDA(cudaFree(wq[g]));
        CHECK_CUDA(cudaFree(ws[g]));
    }
    CHECK_CUDA(cudaFree(xq));
    CHECK_CUDA(cudaFree(xs));
    CHECK_CUDA(cudaFree(act));
    CHECK_CUDA(cudaFree(row_scales));
    CHECK_CUDA(cudaFree(d_scale));
    CHECK_CUDA(cudaFree(wt));
    CHECK_CUDA(cudaFree(absmax));
    CHECK_CUDA(cudaFree(xs2));
    CHECK_CUDA(cudaFree(xq2));
    CHECK_CUDA(cudaFree(xq3));
    CHECK_CUDA(cudaFree(act2));
}

int main(int argc, char **argv)
{
    int reps = 20, first_stem = 1;
    if (argc > 1 && argv[1][0] >= '0' && argv[1][0] <= '9') {
        reps = atoi(argv[1]);
        first_stem = 2;
    }
    const char *usage =
        "usage: runner_ops [reps >= 1] [stem ...], stems add_rmsnorm gemm "
        "rope_observe attention swiglu gemm_swiglu mla fp8 rope_shapes "
        "attention_shapes gated_delta\n";
    if (reps < 1) {
        fprintf(stderr, "runner_ops: %s repetitions: need at least 1\n%s", argv[1],
                usage);
        return 2;
    }
    for (int i = first_stem; i < argc; i++) {
        bool known = false;
        for (const char *stem : op_stems)
            known = known || !strcmp(argv[i], stem);
        if (!known) {
            fprintf(stderr, "runner_ops: no op of stem '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    const bool all = first_stem == argc; // no stem named: every section
    auto want = [&](const char *stem) {
        for (int i = first_stem; i < argc; i++)
            if (!strcmp(argv[i], stem))
                return true;
        return all && strcmp(stem, "mla") && strcmp(stem, "fp8") &&
               strcmp(stem, "rope_shapes") && strcmp(stem, "attention_shapes") &&
               strcmp(stem, "gated_delta");
    };
    const int B = 8, T = 2048, D = 4096, H = 32, HKV = 8, HD = 128, F = 14336;
    const int M = B * T, QKV = (H + 2 * HKV) * HD;
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);

    timer t = timer_create(reps);
    kvcal_gemm_t *gemm;
    CHECK_KVCAL(kvcal_gemm_create(32u << 20, &gemm));

    // --- ceilings ---
    const size_t copy_bytes = (size_t)2 << 30;
    void *c0, *c1;
    CHECK_CUDA(cudaMalloc(&c0, copy_bytes));
    CHECK_CUDA(cudaMalloc(&c1, copy_bytes));
    CHECK_CUDA(cudaMemset(c0, 1, copy_bytes));
    const float copy_ms = time_ms(t, [&] {
        CHECK_CUDA(cudaMemcpyAsync(c1, c0, copy_bytes, cudaMemcpyDeviceToDevice));
    });
    CHECK_CUDA(cudaFree(c0));
    CHECK_CUDA(cudaFree(c1));
    const double peak_tbs = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e12;
    const int S = 8192;
    kvcal_bf16 *ga = rand_dev((size_t)S * S, 1.0f), *gb = rand_dev((size_t)S * S, 1.0f);
    kvcal_bf16 *gc = rand_dev((size_t)S * S, 1.0f);
    const float big_ms = time_ms(t, [&] {
        CHECK_KVCAL(kvcal_gemm_launch(gemm, gc, ga, gb, nullptr, S, S, S, 0));
    });
    const double peak_tflops = 2.0 * S * S * (double)S / (big_ms * 1e-3) / 1e12;
    CHECK_CUDA(cudaFree(ga));
    CHECK_CUDA(cudaFree(gb));
    CHECK_CUDA(cudaFree(gc));
    printf("ceilings: copy %.2f TB/s (read + write), bf16 GEMM 8192^3 %.0f TFLOP/s\n\n",
           peak_tbs, peak_tflops);

    // --- one Llama-3-8B layer at 8 x 2048 tokens ---
    kvcal_bf16 *resid = rand_dev((size_t)M * D, 1.0f),
               *delta = rand_dev((size_t)M * D, 1.0f);
    kvcal_bf16 *xn = rand_dev((size_t)M * D, 1.0f), *norm_w = rand_dev(D, 1.0f);
    kvcal_bf16 *w_qkv = rand_dev((size_t)QKV * D, 0.02f);
    kvcal_bf16 *w_o = rand_dev((size_t)D * D, 0.02f);
    kvcal_bf16 *w_gu = rand_dev((size_t)2 * F * D, 0.02f),
               *w_down = rand_dev((size_t)D * F, 0.02f);
    kvcal_bf16 *qkv = rand_dev((size_t)M * QKV, 1.0f),
               *att = rand_dev((size_t)M * D, 1.0f);
    kvcal_bf16 *gu = rand_dev((size_t)M * 2 * F, 1.0f),
               *act = rand_dev((size_t)M * F, 1.0f);
    int32_t *pos;
    float *inv_freq;
    CHECK_CUDA(cudaMalloc(&pos, M * sizeof *pos));
    CHECK_CUDA(cudaMalloc(&inv_freq, HD / 2 * sizeof *inv_freq));
    {
        std::vector<int32_t> hp(M);
        std::vector<float> hf(HD / 2);
        for (int i = 0; i < M; i++)
            hp[i] = i % T;
        for (int i = 0; i < HD / 2; i++)
            hf[i] = powf(500000.0f, -2.0f * i / HD);
        CHECK_CUDA(cudaMemcpy(pos, hp.data(), M * sizeof *pos, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(inv_freq, hf.data(), HD / 2 * sizeof(float),
                              cudaMemcpyHostToDevice));
    }
    kvcal_kv_observer obs = observer_alloc(HKV, HD);
    float *q_absmax; // (H) for the "+ observe Q" rows (calibrate --q-scale)
    CHECK_CUDA(cudaMalloc(&q_absmax, H * sizeof(float)));
    CHECK_CUDA(cudaMemset(q_absmax, 0, H * sizeof(float)));
    const kvcal_rope_cfg rope = {inv_freq, HD, 0, nullptr, nullptr, 0.0f, 1.0f, 0.0f};

    printf("%-26s %9s %9s %7s %9s %7s\n", "op (8 x 2048 tokens)", "ms", "floor ms",
           "of fl", "TFLOP/s", "TB/s");
    // the layer's GEMMs: (out, x, w, k, n) as the runner calls them
    enum { G_QKV, G_O, G_GATE_UP, G_DOWN, NUM_GEMMS };
    kvcal_bf16 *const gemm_out[NUM_GEMMS] = {qkv, delta, gu, delta};
    const kvcal_bf16 *const gemm_x[NUM_GEMMS] = {xn, att, xn, act};
    const kvcal_bf16 *const gemm_w[NUM_GEMMS] = {w_qkv, w_o, w_gu, w_down};
    const int gemm_k[NUM_GEMMS] = {D, D, D, F}, gemm_n[NUM_GEMMS] = {QKV, D, 2 * F, D};
    const char *gemm_names[NUM_GEMMS] = {"qkv", "o", "gate_up", "down"};
    // candidate -1: the tuned choice
    auto run_gemm = [&](int which, int cand, int *count, int *chosen) {
        CHECK_KVCAL(kvcal_gemm_launch_candidate(
            gemm, cand, gemm_out[which], gemm_x[which], gemm_w[which], nullptr, M,
            gemm_k[which], gemm_n[which], 0, count, chosen));
    };
    auto gemm_row = [&](int which) {
        const double k = gemm_k[which], n = gemm_n[which];
        const float ms = time_ms(t, [&] { run_gemm(which, -1, nullptr, nullptr); });
        char name[32];
        snprintf(name, sizeof name, "gemm %s", gemm_names[which]);
        row(name, ms, 2.0 * M * k * n, 2.0 * (M * k + k * n + M * n), peak_tflops,
            peak_tbs);
        // every algorithm cuBLASLt proposed, timed the same way: is the tuned
        // choice (a few runs at the runner's first launch) the fastest here?
        int count = 0, chosen = 0;
        run_gemm(which, -1, &count, &chosen);
        printf("  %d cuBLASLt candidates, ms (* tuned choice):", count);
        for (int c = 0; c < count; c++) {
            const float cms = time_ms(t, [&] { run_gemm(which, c, nullptr, nullptr); });
            printf(" %.3f%s", cms, c == chosen ? "*" : "");
        }
        printf("\n");
        return ms;
    };
    float layer = 0.0f, observer_cost = 0.0f;
    if (want("add_rmsnorm")) {
        const float ms = time_ms(t, [&] {
            CHECK_KVCAL(
                kvcal_add_rmsnorm_launch(xn, resid, delta, norm_w, M, D, 1e-5f, 0));
        });
        row("add_rmsnorm", ms, 0.0, 2.0 * 4 * (double)M * D, peak_tflops, peak_tbs);
        layer += 2 * ms;
    }
    if (want("gemm"))
        layer += gemm_row(G_QKV);
    if (want("rope_observe")) {
        // every kernel version on the same input, its output checked against version
        // 1's first (they differ at most by one bf16 rounding step)
        const double bytes = 2.0 * M * ((H + HKV) * HD * 2.0 + HKV * HD);
        const size_t n_qkv = (size_t)M * QKV;
        kvcal_bf16 *input;
        CHECK_CUDA(cudaMalloc(&input, n_qkv * sizeof *input));
        CHECK_CUDA(
            cudaMemcpy(input, qkv, n_qkv * sizeof *input, cudaMemcpyDeviceToDevice));
        std::vector<kvcal_bf16> ref(n_qkv), got(n_qkv);
        for (int ver = 1; ver <= KVCAL_ROPE_VERSIONS; ver++) {
            CHECK_CUDA(
                cudaMemcpy(qkv, input, n_qkv * sizeof *qkv, cudaMemcpyDeviceToDevice));
            CHECK_KVCAL(kvcal_rope_observe_launch_version(ver, qkv, QKV, pos, M, H, HKV,
                                                          HD, &rope, nullptr, 0));
            CHECK_CUDA(cudaMemcpy(ver == 1 ? ref.data() : got.data(), qkv,
                                  n_qkv * sizeof *qkv, cudaMemcpyDeviceToHost));
            double max_rel = 0.0;
            size_t differ = 0;
            for (size_t i = 0; ver > 1 && i < n_qkv; i++) {
                const double a = kvcal_bf16_to_float(ref[i]),
                             b = kvcal_bf16_to_float(got[i]);
                const double d = fabs(b - a) / (fabs(a) + 1e-3);
                differ += got[i] != ref[i];
                max_rel = d > max_rel || d != d ? d : max_rel;
            }
            if (!(max_rel <= 1e-2)) {
                fprintf(stderr, "rope_observe version %d differs from version 1 by %g\n",
                        ver, max_rel);
                exit(1);
            }
            if (ver > 1)
                printf(
                    "rope_observe v%d vs v1: %zu of %zu values differ (max rel. %.1e)\n",
                    ver, differ, n_qkv, max_rel);
            const float off = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_rope_observe_launch_version(
                    ver, qkv, QKV, pos, M, H, HKV, HD, &rope, nullptr, 0));
            });
            const float on = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_rope_observe_launch_version(ver, qkv, QKV, pos, M, H,
                                                              HKV, HD, &rope, &obs, 0));
            });
            kvcal_kv_observer with_q = obs;
            with_q.q_absmax = q_absmax;
            const float on_q = time_ms(t, [&] {
                CHECK_KVCAL(kvcal_rope_observe_launch_version(
                    ver, qkv, QKV, pos, M, H, HKV, HD, &rope, &with_q, 0));
            });
            char name[64];
            snprintf(name, sizeof name, "rope_observe v%d", ver);
            row(name, off, 0.0, bytes, peak_tflops, peak_tbs);
            snprintf(name, sizeof name, "rope_observe v%d + observe", ver);
            row(name, on, 0.0, bytes, peak_tflops, peak_tbs);
            snprintf(name, sizeof name, "rope_observe v%d + observe Q", ver);
            row(name, on_q, 0.0, bytes, peak_tflops, peak_tbs);
            if (ver == KVCAL_ROPE_VERSIONS) { // the one the runner takes at this shape
                layer += on;
                observer_cost = on - off;
            }
        }
        CHECK_CUDA(cudaFree(input));
    }
    if (want("attention")) {
        // every kernel version and cuDNN's fused attention (what the runner takes
        // where cuDNN is installed), each checked against version 1's output first
        const double flops = 4.0 * B * H * HD * (double)T * (T + 1) / 2.0;
        const double bytes = 2.0 * M * (2.0 * H + 2.0 * HKV) * HD;
        const size_t n_out = (size_t)M * D;
        std::vector<kvcal_bf16> ref(n_out), got(n_out);
        kvcal_attention_t *cudnn;
        CHECK_KVCAL(kvcal_attention_create(0, &cudnn));
        float runner_ms = 0.0f; // the attention the runner takes
        for (int ver = 1; ver <= KVCAL_ATTENTION_VERSIONS + 1; ver++) {
            const bool is_cudnn = ver > KVCAL_ATTENTION_VERSIONS;
            kvcal_attention_impl impl = KVCAL_ATTENTION_IMPL_KVCAL;
            auto run = [&] {
                if (is_cudnn)
                    CHECK_KVCAL(kvcal_attention_run(cudnn, att, D, qkv, qkv + H * HD,
                                                    qkv + (H + HKV) * HD, QKV, B, T, H,
                                                    HKV, HD, 0.08838834764f, 0, &impl));
                else
                    CHECK_KVCAL(kvcal_attention_launch_version(
                        ver, att, D, qkv, qkv + H * HD, qkv + (H + HKV) * HD, QKV, B, T,
                        H, HKV, HD, 0.08838834764f, 0));
            };
            CHECK_CUDA(cudaMemset(att, 0xff, n_out * sizeof(kvcal_bf16)));
            run();
            if (is_cudnn) {
                printf("attention: %s\n", kvcal_attention_note(cudnn));
                if (impl != KVCAL_ATTENTION_IMPL_CUDNN)
                    break;
            }
            CHECK_CUDA(cudaMemcpy(ver == 1 ? ref.data() : got.data(), att,
                                  n_out * sizeof(kvcal_bf16), cudaMemcpyDeviceToHost));
            double max_diff = 0.0;
            for (size_t i = 0; ver > 1 && i < n_out; i++) {
                const double d = fabs((double)kvcal_bf16_to_float(got[i]) -
                                      (double)kvcal_bf16_to_float(ref[i]));
                max_diff = d > max_diff || d != d ? d : max_diff;
            }
            if (!(max_diff <= 2e-2)) {
                fprintf(stderr, "attention %s %d differs from version 1 by %g\n",
                        is_cudnn ? "cuDNN" : "version", ver, max_diff);
                exit(1);
            }
            const float ms = time_ms(t, run);
            char name[64];
            if (is_cudnn)
                snprintf(name, sizeof name, "attention cuDNN (runner)");
            else
                snprintf(name, sizeof name, "attention v%d%s", ver,
                         ver == KVCAL_ATTENTION_DEFAULT_VERSION ? " (default)" : "");
            row(name, ms, flops, bytes, peak_tflops, peak_tbs);
            if (is_cudnn || ver == KVCAL_ATTENTION_DEFAULT_VERSION)
                runner_ms = ms;
        }
        layer += runner_ms;
        kvcal_attention_destroy(cudnn);
    }
    if (want("gemm")) {
        layer += gemm_row(G_O);
        layer += gemm_row(G_GATE_UP);
    }
    if (want("swiglu")) {
        const float ms =
            time_ms(t, [&] { CHECK_KVCAL(kvcal_swiglu_launch(act, gu, M, F, 0)); });
        row("swiglu", ms, 0.0, 2.0 * 3.0 * M * F, peak_tflops, peak_tbs);
        layer += ms;
    }
    // gate_up and SwiGLU in one kernel, what the runner takes on Hopper (the
    // weight's order does not change the timing; the tests check the product)
    if (want("gemm_swiglu")) {
        const float ms = time_ms(
            t, [&] { CHECK_KVCAL(kvcal_gemm_swiglu_launch(act, xn, w_gu, M, D, F, 0)); });
        row("gemm_swiglu (fused)", ms, 2.0 * M * D * 2.0 * F,
            2.0 * ((double)M * D + 2.0 * F * D + (double)M * F), peak_tflops, peak_tbs);
    }
    if (want("gemm"))
        layer += gemm_row(G_DOWN);
    if (want("mla"))
        mla_section(t, gemm, peak_tflops, peak_tbs);
    if (want("rope_shapes"))
        rope_shapes_section(t, peak_tflops, peak_tbs);
    if (want("attention_shapes"))
        attention_shapes_section(t, peak_tflops, peak_tbs);
    if (want("gated_delta"))
        gated_delta_section(t, peak_tflops, peak_tbs);
    if (want("fp8"))
        fp8_section(t, gemm, peak_tbs, xn, resid, delta, norm_w, qkv, att, gu, pos, &rope,
                    &obs);
    if (!all) { // the layer's sum and the sustained runs need every op
        kvcal_gemm_destroy(gemm);
        return 0;
    }
    const double layer_flops = 2.0 * M * D * ((double)QKV + D + 3.0 * F) +
                               4.0 * B * H * HD * (double)T * (T + 1) / 2.0;
    printf(
        "\nlayer (sum of ops): %.3f ms, %.0f TFLOP/s; observer +%.3f ms (%.2f%% of the "
        "layer)\n",
        layer, layer_flops / (layer * 1e-3) / 1e12, observer_cost,
        100.0 * observer_cost / layer);
    printf("predicted 32-layer forward: %.0f tokens/s\n", M / (32.0 * layer * 1e-3));

    // --- the layer's ops in the runner's order, 32 layers back to back ---
    // (one forward's worth, no flush, no gap: what the runner sustains,
    // against the sum of ops timed one at a time above). Under sustained load
    // the GPU runs at its power cap, so this is also where GEMM candidates
    // and the elementwise passes are weighed as the runner meets them.
    kvcal_attention_t *attn;
    CHECK_KVCAL(kvcal_attention_create(0, &attn));
    struct layer_plan {
        int cand[NUM_GEMMS]; // -1: the tuned choice
        bool norms, rope, swiglu;
        bool fused; // gate_up + swiglu in one kernel
    };
    const layer_plan unfused_plan = {{-1, -1, -1, -1}, true, true, true, false};
    auto forward = [&](const layer_plan &lp) {
        for (int l = 0; l < 32; l++) {
            if (lp.norms)
                CHECK_KVCAL(
                    kvcal_add_rmsnorm_launch(xn, resid, delta, norm_w, M, D, 1e-5f, 0));
            run_gemm(G_QKV, lp.cand[G_QKV], nullptr, nullptr);
            if (lp.rope)
                CHECK_KVCAL(kvcal_rope_observe_launch(qkv, QKV, pos, M, H, HKV, HD, &rope,
                                                      &obs, 0));
            CHECK_KVCAL(kvcal_attention_run(attn, att, D, qkv, qkv + H * HD,
                                            qkv + (H + HKV) * HD, QKV, B, T, H, HKV, HD,
                                            0.08838834764f, 0, nullptr));
            run_gemm(G_O, lp.cand[G_O], nullptr, nullptr);
            if (lp.norms)
                CHECK_KVCAL(
                    kvcal_add_rmsnorm_launch(xn, resid, delta, norm_w, M, D, 1e-5f, 0));
            if (lp.fused) {
                CHECK_KVCAL(kvcal_gemm_swiglu_launch(act, xn, w_gu, M, D, F, 0));
            } else {
                run_gemm(G_GATE_UP, lp.cand[G_GATE_UP], nullptr, nullptr);
                if (lp.swiglu)
                    CHECK_KVCAL(kvcal_swiglu_launch(act, gu, M, F, 0));
            }
            run_gemm(G_DOWN, lp.cand[G_DOWN], nullptr, nullptr);
        }
    };
    auto sustained_ms = [&](const layer_plan &lp) {
        float ms;
        CHECK_CUDA(cudaEventRecord(t.a));
        forward(lp);
        CHECK_CUDA(cudaEventRecord(t.b));
        CHECK_CUDA(cudaEventSynchronize(t.b));
        CHECK_CUDA(cudaEventElapsedTime(&ms, t.a, t.b));
        return ms / 32;
    };
    forward(unfused_plan);
    CHECK_CUDA(cudaDeviceSynchronize());
    printf("32 layers back to back (unfused MLP), ms per layer:");
    for (int r = 0; r < 4; r++)
        printf(" %.3f", sustained_ms(unfused_plan));
    printf(" (sum of ops %.3f)\n", layer);

    // what fusing the elementwise passes away could gain at most, sustained
    const struct {
        const char *name;
        layer_plan lp;
    } what_if[] = {
        {"unfused MLP", unfused_plan},
        {"without add_rmsnorm", {{-1, -1, -1, -1}, false, true, true, false}},
        {"without rope + observe", {{-1, -1, -1, -1}, true, false, true, false}},
        {"without swiglu", {{-1, -1, -1, -1}, true, true, false, false}},
        {"GEMMs + attention only", {{-1, -1, -1, -1}, false, false, false, false}},
        {"fused MLP (the runner on Hopper)", {{-1, -1, -1, -1}, true, true, true, true}},
    };
    printf("\nsustained, ms per layer (two passes):\n");
    float what_ms[2][sizeof what_if / sizeof what_if[0]];
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sizeof what_if / sizeof what_if[0]; i++)
            what_ms[pass][i] = sustained_ms(what_if[i].lp);
    for (size_t i = 0; i < sizeof what_if / sizeof what_if[0]; i++)
        printf("  %-33s %.3f %.3f\n", what_if[i].name, what_ms[0][i], what_ms[1][i]);

    // every candidate of each GEMM in the sustained layer (the others at the
    // tuned choice): does the tuner's short timing rank them as the runner
    // meets them?
    printf("\nsustained, one GEMM's candidate forced, ms per layer (two passes; * "
           "tuned):\n");
    for (int which = 0; which < NUM_GEMMS; which++) {
        int count = 0, chosen = 0;
        run_gemm(which, -1, &count, &chosen);
        std::vector<float> ms[2];
        for (int pass = 0; pass < 2; pass++)
            for (int c = 0; c < count; c++) {
                layer_plan lp = unfused_plan;
                lp.cand[which] = c;
                ms[pass].push_back(sustained_ms(lp));
            }
        printf("  %-8s", gemm_names[which]);
        for (int c = 0; c < count; c++)
            printf(" %.3f/%.3f%s", ms[0][c], ms[1][c], c == chosen ? "*" : "");
        printf("\n");
    }
    kvcal_attention_destroy(attn);

    kvcal_gemm_destroy(gemm);
    return 0;
}
