/* tests/test_cuda_backend.c: the cuda backend through the executor
 * (calib/executor.h): the per-layer per-head K/V absmax of the bf16 runner
 * against transformers' on the golden models, the weights staged through
 * small pieces, the MLP both ways, a calibration without statistics, and
 * the weights streamed under a memory cap. Each kernel against its CPU reference is
 * a row of tests/test_backend_ops.c. In a build without CUDA the suite holds
 * no tests; without a device it is reported skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/test_cuda_util.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>

#include "calib/executor.h"
#include "observers/stats.h"
#include "tests/test_calib_util.h"

// --- the CUDA runner ------------------------------------------------------------

/* Per-layer per-head K/V absmax of the bf16 CUDA runner against the golden
 * values of transformers in fp32 (tests/make_golden.py): bf16 weights and
 * activations through two layers. */
#define RUNNER_RTOL 3e-2
/* The mixtures of experts: transformers in bf16 is within 0.7% of their
 * float64 golden values (routers whose choices bf16 rounding leaves alone),
 * the bound for kvcal is 2%. */
#define MOE_RUNNER_RTOL 2e-2
/* A fixture's bf16_spread: per layer, how far bf16 servings of its
 * checkpoint lie from the float64 reference (tests/make_fp8_checkpoints.py:
 * six of an FP8 checkpoint, e4m3 decisions flipped by bf16 roundings;
 * tests/make_golden.py: four of an MLA model, the entry's latent and RoPE
 * part, or of a model whose bf16 routing flips, each kv head's K and V:
 * Llama 4's top-2 every other layer); the runner may lie up to this many
 * times that far. */
#define BF16_SPREAD_MARGIN 1.5

static void check_runner_golden_within(const char *name, const kvcal_backend_options *opt,
                                       double rtol)
{
    kvcal_stats_t *stats = NULL;
    float *bmax = NULL;
    int64_t rows = 0;
    cJSON *root = kvcal_test_cuda_run_golden(name, opt, &stats, &bmax, &rows);
    const int lh = stats->num_layers * stats->num_kv_heads;
    const cJSON *spread = cJSON_GetObjectItem(root, "bf16_spread");
    /* a hybrid model's fixture lists the layers that cache (kv_layers), the
     * others observe nothing */
    const cJSON *kv_layers = cJSON_GetObjectItem(root, "kv_layers");
    double worst = 0.0;
    for (int kv = 0; kv < 2; kv++) {
        cJSON *want = cJSON_GetObjectItem(root, kv ? "v_absmax" : "k_absmax");
        for (int l = 0, at = 0; l < stats->num_layers; l++, at++) {
            if (kv_layers && (at >= cJSON_GetArraySize(kv_layers) ||
                              cJSON_GetArrayItem(kv_layers, at)->valueint != l)) {
                CU_ASSERT_EQUAL(stats->tokens[l], 0);
                at--;
                continue;
            }
            CU_ASSERT_EQUAL(stats->tokens[l], rows);
            const double bound =
                spread ? fmax(rtol, BF16_SPREAD_MARGIN *
                                        cJSON_GetArrayItem(spread, at)->valuedouble)
                       : rtol;
            for (int h = 0; h < stats->num_kv_heads; h++) {
                const double w =
                    cJSON_GetArrayItem(cJSON_GetArrayItem(want, at), h)->valuedouble;
                const double got = kvcal_stats_head_absmax(stats, l, kv, h);
                const double rel = fabs(got - w) / fabs(w);
                worst = rel > worst || rel != rel ? rel : worst;
                CU_ASSERT(rel <= bound);
                /* the one batch's batch_absmax is the absmax */
                CU_ASSERT_EQUAL(bmax[kv * lh + l * stats->num_kv_heads + h], (float)got);
            }
        }
    }
    printf("(%s: worst rel. error %.2e) ", name, worst);
    free(bmax);
    kvcal_stats_destroy(stats);
    cJSON_Delete(root);
}

static void check_runner_golden_with(const char *name, const kvcal_backend_options *opt)
{
    check_runner_golden_within(name, opt, RUNNER_RTOL);
}

static void check_runner_golden(const char *name)
{
    check_runner_golden_with(name, NULL);
}

static void cuda_runner_matches_transformers_on_golden_models(void)
{
    check_runner_golden("llama3_gqa_hd48_bf16");
    check_runner_golden("llama_mha_linear_tied_fp32");
    check_runner_golden("mistral_mqa_fp16");
    check_runner_golden("qwen2_gqa_bias_bf16");
    check_runner_golden("qwen3_gqa_hd80_qknorm_bf16");
    check_runner_golden("qwen3_hd128_qknorm_bf16");
    check_runner_golden("qwen2_yarn_bf16");
    check_runner_golden("llama_gqa_mlp256_bf16");
    check_runner_golden("llama3_gqa_hd64_bf16");
    check_runner_golden("phi3_longrope_partial_swa16_bf16");
    check_runner_golden("gemma3_text_swa8_local_global_bf16");
    check_runner_golden("gemma2_softcap_swa8_bf16");
    check_runner_golden("gemma3_mm_swa8_local_global_bf16");
    check_runner_golden("mistral3_mm_gqa_bf16");
    check_runner_golden("qwen3_vl_mrope_qknorm_bf16");
    check_runner_golden("qwen2_5_vl_flat_mrope_bias_bf16");
    check_runner_golden("qwen2_vl_flat_mrope_bias_bf16");
    check_runner_golden("glm4_sandwich_partial_pairs_bf16");
    check_runner_golden("glm4v_mm_mrope_pairs_bf16");
    check_runner_golden("seed_oss_qkv_o_bias_bf16");
    check_runner_golden("smollm3_nope3_tied_bf16");
    /* post-norm layers: EXAONE 4 (per-head q/k norms, NoPE full layers
     * beside sliding ones), OLMo 2 and Olmo 3 (q/k norms over the whole
     * projection; Olmo 3's sliding layers with RoPE of their own) */
    check_runner_golden("exaone4_postnorm_swa8_nope_bf16");
    check_runner_golden("olmo2_postnorm_qknorm_all_bf16");
    check_runner_golden("olmo3_swa8_yarn_full_bf16");
    /* Granite's multipliers: each block's output x0.22 before its add */
    check_runner_golden("granite_multipliers_bias_bf16");
    /* Hunyuan: the q/k norms after RoPE */
    check_runner_golden("hunyuan_dense_qknorm_after_rope_bf16");
}

/* Hybrid models: gated delta-net layers (which cache nothing) among gated
 * attention layers, Qwen3.5 dense, Qwen3-Next (experts, a gated shared
 * expert, a dense layer, a linear layer last) and the language models of
 * Qwen3.5's and Qwen3.5-MoE's multimodal wrappers, against transformers
 * (float64); the MoE bound where experts route (their FP8 checkpoints:
 * cuda_runner_serves_fp8_checkpoints_as_vllm_does). */
static void cuda_runner_matches_transformers_on_hybrid_golden_models(void)
{
    check_runner_golden("qwen3_5_text_gdn_hybrid_bf16");
    check_runner_golden("qwen3_5_mm_gdn_hybrid_bf16");
    check_runner_golden_within("qwen3_next_gdn_moe_e8_top3_bf16", NULL, MOE_RUNNER_RTOL);
    check_runner_golden_within("qwen3_5_moe_mm_gdn_e8_top3_bf16", NULL, MOE_RUNNER_RTOL);
}

/* The mixtures of experts (routing, the grouped GEMMs and the shared expert
 * on the device), Mixtral's sliding window of 16 over samples of 37 and 23
 * tokens, Qwen-MoE's use_sliding_window, gpt-oss (sinks on the portable
 * attention kernel, head_dim 16, and on the tensor cores, 64; the experts'
 * biases and clamped SwiGLU; MXFP4 experts dequantized to bf16 at load),
 * MiniMax-M2 (q/k norms over the whole projection, sigmoid routing with
 * a choice bias, partial RoPE), Granite MoE (its multipliers), ERNIE 4.5
 * (softmax routing with a choice bias), Hunyuan (q/k norms after RoPE),
 * Llama 4 (chunks shorter than the samples, NoPE layers with the queries'
 * temperature, the weightless q/k norm after RoPE, experts weighted on
 * their input), against transformers (float64); every valid token routed
 * to top-k experts of every layer. The experts' GEMMs both ways: as the
 * backend takes them (on a Hopper GPU the sm_90a kernel, with SwiGLU fused
 * but for gpt-oss) and with KVCAL_MLP_UNFUSED (kvcal_moe_gemm_launch, then
 * SwiGLU). */
static void cuda_runner_matches_transformers_on_moe_golden_models(void)
{
    static const char *const names[] = {"qwen3_moe_e8_top3_norm_bf16",
                                        "qwen2_moe_shared_e6_top2_bf16",
                                        "mixtral_e4_top2_swa16_bf16",
                                        "glm4_moe_dense1_sigmoid_e8_top3_bf16",
                                        "qwen3_moe_dense_layers_e4_top2_bf16",
                                        "qwen3_moe_swa16_e8_top2_bf16",
                                        "qwen2_moe_swa8_maxwin2_e4_top2_bf16",
                                        "gpt_oss_sinks_swa8_e8_top3_bf16",
                                        "gpt_oss_hd64_swa16_e4_top2_mxfp4",
                                        "qwen3_vl_moe_stacked_e8_top3_bf16",
                                        "glm4v_moe_mm_mrope_e8_top3_bf16",
                                        "minimax_m2_qknorm_all_rot8_e8_top3_bf16",
                                        "granitemoe_multipliers_e4_top2_bf16",
                                        "ernie45_moe_softmax_bias_e8_top3_bf16",
                                        "hunyuan_moe_qknorm_after_rope_alpha_bf16",
                                        "llama4_nope_chunk8_temp_e4_top2_bf16",
                                        "llama4_mm_top1_chunk16_bf16"};
    static const int top_k[] = {3, 2, 2, 3, 2, 2, 2, 3, 2, 3, 3, 3, 2, 3, 2, 2, 1};
    /* Bit l: layer l has a dense MLP (GLM's first; the Qwen model's
     * mlp_only_layers [0] and decoder_sparse_step 2 make 0 and 2 dense;
     * Qwen3-VL-MoE's mlp_only_layers [0]; GLM-4.5V's first; ERNIE's first;
     * the first Llama 4's moe_layers [1, 3] make 0 and 2 dense). */
    static const unsigned dense[] = {0,  0,  0, 1u, 1u | 4u, 0, 0,       0, 0,
                                     1u, 1u, 0, 0,  1u,      0, 1u | 4u, 0};
    _Static_assert(sizeof top_k / sizeof *top_k == sizeof names / sizeof *names &&
                       sizeof dense / sizeof *dense == sizeof names / sizeof *names,
                   "a top-k and dense layers for each model");
    kvcal_backend_options unfused;
    memset(&unfused, 0, sizeof unfused);
    unfused.mlp = KVCAL_MLP_UNFUSED;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        check_runner_golden_within(names[i], NULL, MOE_RUNNER_RTOL);
        check_runner_golden_within(names[i], &unfused, MOE_RUNNER_RTOL);
        kvcal_stats_t *stats = NULL;
        int64_t rows = 0;
        cJSON *root = kvcal_test_cuda_run_golden(names[i], NULL, &stats, NULL, &rows);
        CU_ASSERT_FATAL(stats->num_experts > 0);
        for (int l = 0; l < stats->num_layers; l++) {
            int64_t sum = 0;
            for (int e = 0; e < stats->num_experts; e++)
                sum += stats->expert_tokens[(size_t)l * stats->num_experts + e];
            CU_ASSERT_EQUAL(sum, (dense[i] >> l) & 1u ? 0 : rows * top_k[i]);
        }
        kvcal_stats_destroy(stats);
        cJSON_Delete(root);
    }
}

/* DeepSeek-V2, V3 and V3.2, GLM-4.7-Flash and GLM-5 (multi-head latent
 * attention, the sparse one within index_topk: the
 * entry's latent and RoPE part, each within the MoE bound of transformers'
 * float64 absmax or BF16_SPREAD_MARGIN times the layer's bf16_spread,
 * whichever is larger; grouped top-k; dense leading layers): every valid
 * token of the MoE layers routed to top-k experts. The spread is what bf16 does, not
 * kvcal: where kvcal's entry lies furthest from float64 (the V2 model's layer-2 latent),
 * transformers' own bf16 run lies as far (the figures: bench/NOTES.md, the
 * MLA section). */
static void cuda_runner_matches_transformers_on_mla_golden_models(void)
{
    static const char *const names[] = {"deepseek_v2_mla_grouped_softmax_bf16",
                                        "deepseek_v3_mla_qlora_grouped_sigmoid_bf16",
                                        "glm4_moe_lite_mla_qlora_sigmoid_bf16",
                                        "deepseek_v32_dsa_topk64_grouped_sigmoid_bf16",
                                        "glm_moe_dsa_topk64_sigmoid_bf16"};
    static const int top_k[] = {3, 2, 3, 2, 3}, dense[] = {1, 1, 2, 1, 2};
    for (int i = 0; i < 5; i++) {
        check_runner_golden_within(names[i], NULL, MOE_RUNNER_RTOL);
        kvcal_stats_t *stats = NULL;
        int64_t rows = 0;
        cJSON *root = kvcal_test_cuda_run_golden(names[i], NULL, &stats, NULL, &rows);
        const cJSON *parts[2] = {cJSON_GetObjectItem(root, "latent_absmax"),
                                 cJSON_GetObjectItem(root, "rope_absmax")};
        const cJSON *spread = cJSON_GetObjectItem(root, "bf16_spread");
        CU_ASSERT_PTR_NOT_NULL_FATAL(spread);
        const int L = stats->head_dim - 16; /* both: a RoPE part of 16 */
        double worst = 0.0;
        for (int l = 0; l < stats->num_layers; l++) {
            const double got[2] = {
                kvcal_stats_channels_absmax(stats, l, KVCAL_K, 0, 0, L),
                kvcal_stats_channels_absmax(stats, l, KVCAL_K, 0, L, 16)};
            const double bound =
                fmax(MOE_RUNNER_RTOL,
                     BF16_SPREAD_MARGIN * cJSON_GetArrayItem(spread, l)->valuedouble);
            for (int j = 0; j < 2; j++) {
                const double w = cJSON_GetArrayItem(parts[j], l)->valuedouble;
                const double rel = fabs(got[j] - w) / fabs(w);
                worst = rel > worst || rel != rel ? rel : worst;
                CU_ASSERT(rel <= bound);
            }
            int64_t sum = 0;
            for (int e = 0; e < stats->num_experts; e++)
                sum += stats->expert_tokens[(size_t)l * stats->num_experts + e];
            CU_ASSERT_EQUAL(sum, l < dense[i] ? 0 : rows * top_k[i]);
        }
        printf("(%s latent / RoPE part: worst rel. error %.2e) ", names[i], worst);
        kvcal_stats_destroy(stats);
        cJSON_Delete(root);
    }
}

/* The routing counts of a calibration on the device and on the host: the
 * same sums, each expert's within a few tokens (bf16 against fp32 router
 * logits may swap a close pair of experts). */
static void cuda_runner_counts_tokens_per_expert_like_the_cpu(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16", &m),
        KVCAL_OK);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    kvcal_stats_t *s[2] = {NULL, NULL};
    for (int dev = 0; dev < 2; dev++) {
        o.device = dev ? KVCAL_DEVICE_CUDA : KVCAL_DEVICE_CPU;
        CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 6, 40, 3, &s[dev], NULL),
                              KVCAL_OK);
    }
    const int E = s[0]->num_experts;
    CU_ASSERT_EQUAL_FATAL(s[1]->num_experts, E);
    for (int l = 0; l < s[0]->num_layers; l++) {
        int64_t sum[2] = {0, 0}, far = 0;
        for (int e = 0; e < E; e++) {
            const int64_t a = s[0]->expert_tokens[l * E + e],
                          b = s[1]->expert_tokens[l * E + e];
            sum[0] += a, sum[1] += b;
            far += llabs(a - b) > 2 + a / 20;
        }
        CU_ASSERT_EQUAL(sum[0], sum[1]);
        CU_ASSERT_EQUAL(sum[0], (int64_t)(5 * 40 + 21) * 3);
        CU_ASSERT_EQUAL(far, 0);
    }
    kvcal_stats_destroy(s[0]);
    kvcal_stats_destroy(s[1]);
    kvcal_model_close(m);
}

/* The same on the device: the routing-only last layer gives the statistics
 * of the whole one, bit for bit, counts included. */
static void cuda_last_moe_layer_routes_only_with_the_counts_of_a_whole_run(void)
{
    kvcal_test_last_moe_layer_routes_only(KVCAL_DEVICE_CUDA);
}

/* The op profile on the device (events): each op and each step of the MoE
 * op counted once a layer and batch where it ran; nothing observed changes. */
static void cuda_profile_times_each_op_and_moe_step_and_changes_nothing(void)
{
    kvcal_test_op_profile(KVCAL_DEVICE_CUDA);
}

/* The weights staged through pieces far smaller than a layer (4 KiB): a
 * piece holds parts of several weights and a weight spans many pieces, as
 * on a model of billions of parameters with the loader's 32 MiB pieces.
 * Every golden model gives the statistics of the default pieces, bit for
 * bit, and transformers' values. */
static void cuda_runner_loads_weights_through_small_pieces(void)
{
    static const char *const names[] = {
        "llama3_gqa_hd48_bf16", "llama_mha_linear_tied_fp32", "mistral_mqa_fp16",
        "qwen2_gqa_bias_bf16", "qwen3_gqa_hd80_qknorm_bf16", "qwen2_yarn_bf16",
        "llama_gqa_mlp256_bf16", "llama3_gqa_hd64_bf16",
        /* experts stacked in one tensor, transposed, interleaved, MXFP4 */
        "gpt_oss_sinks_swa8_e8_top3_bf16", "gpt_oss_hd64_swa16_e4_top2_mxfp4"};
    kvcal_backend_options small;
    memset(&small, 0, sizeof small);
    small.load_piece_bytes = 4096;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        kvcal_stats_t *want = NULL, *got = NULL;
        cJSON_Delete(kvcal_test_cuda_run_golden(names[i], NULL, &want, NULL, NULL));
        cJSON_Delete(kvcal_test_cuda_run_golden(names[i], &small, &got, NULL, NULL));
        const size_t lh = (size_t)want->num_layers * want->num_kv_heads;
        for (int kv = 0; kv < 2; kv++) {
            CU_ASSERT_EQUAL(memcmp(want->absmax[kv], got->absmax[kv],
                                   lh * want->head_dim * sizeof(float)),
                            0);
            CU_ASSERT_EQUAL(memcmp(want->hist[kv], got->hist[kv],
                                   lh * want->num_bins * sizeof(uint64_t)),
                            0);
        }
        kvcal_stats_destroy(want);
        kvcal_stats_destroy(got);
        check_runner_golden_with(names[i], &small);
    }
}

/* The model whose intermediate_size (256) the fused gate/up + SwiGLU kernel
 * takes, its MLP both ways: KVCAL_MLP_UNFUSED (cuBLAS's GEMM, then SwiGLU)
 * and KVCAL_MLP_FUSED (the kernel, which the backend takes by itself on a
 * Hopper GPU), refused where it does not apply. */
static void cuda_runner_mlp_both_ways_matches_transformers(void)
{
    kvcal_model_t *model = NULL;
    kvcal_backend *be = NULL;
    kvcal_backend_options o;
    memset(&o, 0, sizeof o);
    o.max_batch = 1, o.max_seq_len = 16;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/llama_gqa_mlp256_bf16", &model),
        KVCAL_OK);
    o.mlp = KVCAL_MLP_UNFUSED;
    check_runner_golden_with("llama_gqa_mlp256_bf16", &o);
    o.mlp = KVCAL_MLP_FUSED;
    const kvcal_status st = kvcal_backend_cuda_create(model, &o, &be);
    if (be)
        be->ops->destroy(be);
    if (st == KVCAL_ERR_UNSUPPORTED) {
        CU_ASSERT(kvcal_test_error_has("needs a Hopper GPU"));
        printf("fused: skipped, not a Hopper GPU ");
    } else {
        CU_ASSERT_EQUAL(st, KVCAL_OK);
        if (st == KVCAL_OK)
            check_runner_golden_with("llama_gqa_mlp256_bf16", &o);
    }
    kvcal_model_close(model);
}

/* A calibration with no statistics (kvcal calibrate --time-only) leaves the
 * device statistics untouched: a later calibration into zeroed statistics
 * counts its own batch alone. */
static void cuda_runner_forward_without_stats_observes_nothing(void)
{
    kvcal_model_t *model = NULL;
    kvcal_exec_t *x = NULL;
    kvcal_stats_t *stats = NULL, *once = NULL;
    int32_t ids[2 * 40], lengths[2] = {40, 33};
    for (int i = 0; i < 2 * 40; i++)
        ids[i] = (i * 7 + 3) % 100;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/llama3_gqa_hd48_bf16", &model), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(model);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &stats),
        KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &once), KVCAL_OK);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CUDA;
    o.backend.max_batch = 2, o.backend.max_seq_len = 40;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(model, &o, &x), KVCAL_OK);
    const kvcal_exec_samples s = {
        .ids = ids, .lengths = lengths, .num_samples = 2, .seq_len = 40, .batch = 2};
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, stats, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, NULL, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &s, once, 0.0), KVCAL_OK);
    CU_ASSERT_EQUAL(once->tokens[d->num_layers - 1], 73);
    CU_ASSERT(kvcal_stats_head_absmax(once, d->num_layers - 1, KVCAL_K, 0) > 0.0f);
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    for (int kv = 0; kv < 2; kv++) {
        CU_ASSERT_EQUAL(
            memcmp(once->absmax[kv], stats->absmax[kv], lh * d->head_dim * sizeof(float)),
            0);
        CU_ASSERT_EQUAL(memcmp(once->hist[kv], stats->hist[kv],
                               lh * stats->num_bins * sizeof(uint64_t)),
                        0);
    }
    kvcal_exec_destroy(x);
    kvcal_stats_destroy(stats);
    kvcal_stats_destroy(once);
    kvcal_model_close(model);
}

/* Under the smallest --max-device-memory the cuda backend accepts for the
 * model at path (found by bisection; three layers or more), two of its
 * layers are on the device at a time, each batch runs alone, and the statistics equal the
 * run with every layer resident bit for bit; a byte less is refused with the bytes needed
 * and the option that lowers them. */
static void check_streaming_under_a_memory_cap(const char *path)
{
    enum { N = 9, LEN = 48, BATCH = 2 };
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &m), KVCAL_OK);
    const int L = kvcal_model_describe(m)->num_layers;
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CUDA;
    kvcal_stats_t *all = NULL, *capped = NULL;
    int resident = 0;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, N, LEN, BATCH, &all, &resident),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(resident, L);
    size_t lo = 0, hi = (size_t)1 << 30; /* refused at lo, accepted at hi */
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        kvcal_model_t *probe = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &probe), KVCAL_OK);
        kvcal_exec_t *x = NULL;
        o.backend.max_batch = BATCH, o.backend.max_seq_len = LEN;
        o.backend.max_device_memory = mid;
        const kvcal_status st = kvcal_exec_create(probe, &o, &x);
        CU_ASSERT(st == KVCAL_OK || st == KVCAL_ERR_DEVICE_MEMORY);
        *(st ? &lo : &hi) = mid;
        kvcal_exec_destroy(x);
        kvcal_model_close(probe);
    }
    o.backend.max_device_memory = hi;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, N, LEN, BATCH, &capped, &resident),
                          KVCAL_OK);
    printf("(smallest cap %zu bytes, %d of %d layers resident) ", hi, resident, L);
    CU_ASSERT_EQUAL(resident, 2);
    CU_ASSERT(kvcal_test_stats_equal(all, capped));
    kvcal_stats_destroy(capped);
    o.backend.max_device_memory = lo;
    CU_ASSERT_EQUAL(kvcal_test_calibrate(m, o, N, LEN, BATCH, &capped, NULL),
                    KVCAL_ERR_DEVICE_MEMORY);
    CU_ASSERT_PTR_NULL(capped);
    CU_ASSERT(kvcal_test_error_has("needs at least"));
    CU_ASSERT(kvcal_test_error_has("MiB"));
    CU_ASSERT(kvcal_test_error_has("a larger --max-device-memory"));
    kvcal_stats_destroy(all);
    kvcal_model_close(m);
}

/* stories260K (bf16 on the device), and an FP8 model whose layers hold e4m3
 * bytes beside their scales */
static void cuda_runner_streams_weights_under_a_memory_cap(void)
{
    check_streaming_under_a_memory_cap("models/stories260K/stories260K.bin");
    check_streaming_under_a_memory_cap(
        "tests/fixtures/golden/fp8_llama_fp8_tensor_dynamic");
}

/* Every FP8 scheme (tests/make_fp8_checkpoints.py; the mixtures of
 * experts' FP8 experts too) against the served model in float64 (vLLM's
 * semantics, tests/fp8_reference.py): through cuBLASLt's FP8 GEMMs where
 * they run the scheme, through the dequantized fallback
 * (fp8_dequant), with fast accumulation (fp8_fast_accum: at the fixtures'
 * k <= 1024 fewer than 32 truncations of 2^-13), and staged through 4 KiB
 * pieces (the statistics of the default pieces bit for bit). Within the
 * bf16 runner's bound, or from the second layer on within the fixture's
 * bf16 spread: activations in bf16 quantize to other bytes here and there
 * than the float64 reference's. */
static void cuda_runner_serves_fp8_checkpoints_as_vllm_does(void)
{
    kvcal_backend_options fallback, fast, small;
    memset(&fallback, 0, sizeof fallback);
    memset(&fast, 0, sizeof fast);
    memset(&small, 0, sizeof small);
    fallback.fp8_dequant = 1;
    fast.fp8_fast_accum = 1;
    small.load_piece_bytes = 4096;
    for (size_t i = 0; i < KVCAL_TEST_FP8_FIXTURES; i++) {
        const char *name = kvcal_test_fp8_fixtures[i];
        check_runner_golden(name);
        check_runner_golden_with(name, &fallback);
        check_runner_golden_with(name, &fast);
        kvcal_stats_t *want = NULL, *got = NULL;
        cJSON_Delete(kvcal_test_cuda_run_golden(name, NULL, &want, NULL, NULL));
        cJSON_Delete(kvcal_test_cuda_run_golden(name, &small, &got, NULL, NULL));
        CU_ASSERT(kvcal_test_stats_equal(want, got));
        kvcal_stats_destroy(want);
        kvcal_stats_destroy(got);
    }
    /* the hybrid models' FP8 weights whose rows kvcal regroups (the loader
     * copies them through the grouping) */
    for (size_t i = 0; i < KVCAL_TEST_FP8_HYBRID_FIXTURES; i++) {
        check_runner_golden(kvcal_test_fp8_hybrid_fixtures[i]);
        check_runner_golden_with(kvcal_test_fp8_hybrid_fixtures[i], &fallback);
    }
    /* Llama 4's experts weighted on their input, then quantized per token */
    check_runner_golden("fp8_llama4_ct_channel_token");
    check_runner_golden_with("fp8_llama4_ct_channel_token", &fallback);
    /* MiniMax-M2's 128 x 128 blocks, Granite's per-channel weights with
     * per-token activations (its multipliers) */
    static const char *const more[] = {"fp8_minimax_m2_fp8_block",
                                       "fp8_granite_ct_channel_token"};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        check_runner_golden(more[i]);
        check_runner_golden_with(more[i], &fallback);
    }
}

/* The FP8 weights the runner serves as dequantized bf16 GEMMs are named,
 * with the reason: every projection when the fallback is asked for; none on
 * compute capability 9.0 for per-tensor weights with per-token activations
 * (cuBLASLt's FP8 GEMM runs them there); none on the cpu backend, the
 * reference; FP8 experts always. */
static void cuda_runner_names_the_fp8_weights_it_runs_dequantized(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/fp8_llama_fp8_tensor_dynamic", &m),
        KVCAL_OK);
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.backend.max_batch = 2;
    o.backend.max_seq_len = 32;
    for (int run = 0; run < 3; run++) {
        kvcal_exec_t *x = NULL;
        o.device = run == 2 ? KVCAL_DEVICE_CPU : KVCAL_DEVICE_CUDA;
        o.backend.fp8_dequant = run == 1;
        CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
        const char *f = kvcal_exec_fp8_fallback(x);
        if (run == 1) {
            CU_ASSERT_PTR_NOT_NULL(strstr(f, "self_attn.q_proj, self_attn.o_proj"));
            CU_ASSERT_PTR_NOT_NULL(strstr(f, "mlp.down_proj"));
            CU_ASSERT_PTR_NOT_NULL(strstr(f, "asked for"));
        } else if (run == 2 || (major == 9 && minor == 0)) {
            CU_ASSERT_STRING_EQUAL(f, "");
        }
        if (f[0])
            printf("\n    %s: %s", run == 1 ? "fallback asked for" : "default", f);
        kvcal_exec_destroy(x);
    }
    kvcal_model_close(m);
    /* FP8 experts: always, kvcal's grouped GEMMs being bf16 */
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/fp8_qwen3_moe_fp8_block", &m), KVCAL_OK);
    kvcal_exec_t *x = NULL;
    o.device = KVCAL_DEVICE_CUDA;
    o.backend.fp8_dequant = 0;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
    const char *f = kvcal_exec_fp8_fallback(x);
    CU_ASSERT_PTR_NOT_NULL(strstr(f, "mlp.experts.*.gate_proj"));
    CU_ASSERT_PTR_NOT_NULL(strstr(f, "mlp.experts.*.down_proj"));
    printf("\n    FP8 experts: %s", f);
    kvcal_exec_destroy(x);
    kvcal_model_close(m);
}

/* The loader's counts (kvcal_exec_load_stats): every layer of a model that
 * fits loaded once, in pieces of 4 KiB, the layers' bytes (at least their
 * bf16 weights') sent and the host's seconds counted; zeros on the cpu
 * backend, which reads weights as it computes. */
static void cuda_runner_counts_the_weights_it_loads(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/llama3_gqa_hd64_bf16", &m), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    const double weights =
        (double)d->num_layers * 2 *
        ((double)d->hidden_size * d->head_dim * (2 * d->num_heads + 2 * d->num_kv_heads) +
         3.0 * d->hidden_size * d->intermediate_size);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.backend.max_batch = 2;
    o.backend.max_seq_len = 32;
    o.backend.load_piece_bytes = 4096;
    for (int run = 0; run < 2; run++) {
        kvcal_exec_t *x = NULL;
        o.device = run ? KVCAL_DEVICE_CPU : KVCAL_DEVICE_CUDA;
        CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
        kvcal_load_stats ls;
        /* the layers load in the background: up to 10 s */
        for (int tries = 0; tries < 10000; tries++) {
            kvcal_exec_load_stats(x, &ls);
            if (run || ls.layers_loaded == d->num_layers)
                break;
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        if (run) {
            CU_ASSERT(ls.bytes == 0 && ls.layers_loaded == 0 && ls.all_seconds == 0 &&
                      ls.fill_seconds == 0 && ls.copy_wait_seconds == 0);
        } else {
            CU_ASSERT_EQUAL(ls.layers_loaded, d->num_layers);
            CU_ASSERT(ls.bytes >= weights);
            CU_ASSERT(ls.all_seconds > 0 && ls.fill_seconds > 0);
            CU_ASSERT(ls.copy_wait_seconds >= 0 &&
                      ls.copy_wait_seconds <= ls.all_seconds);
            printf("\n    %d layers, %.0f bytes (bf16 weights %.0f) in %.4f s: waiting "
                   "for fills %.4f s, for copies %.4f s",
                   ls.layers_loaded, ls.bytes, weights, ls.all_seconds, ls.fill_seconds,
                   ls.copy_wait_seconds);
        }
        kvcal_exec_destroy(x);
    }
    kvcal_model_close(m);
}

/* The queries' max |q| per head and the signed range per channel, observed
 * on the device (Q in the fused RoPE kernel, the range by its own kernel)
 * against the cpu backend on the same samples: bf16 activations against
 * fp32 ones, so within 3% of the CPU's value plus 1% of the layer's largest
 * (the K/V absmax of the two backends agree as closely: see the golden
 * comparisons above); the last layer's queries included. */
static void cuda_runner_observes_queries_and_signed_range_like_the_cpu(void)
{
    static const char *const names[] = {"qwen3_gqa_hd80_qknorm_bf16",
                                        "llama3_gqa_hd64_bf16", "mistral_mqa_fp16"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char dir[128];
        snprintf(dir, sizeof dir, "tests/fixtures/golden/%s", names[i]);
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
        const kvcal_model_desc *d = kvcal_model_describe(m);
        kvcal_exec_options o;
        memset(&o, 0, sizeof o);
        kvcal_stats_t *s[2] = {NULL, NULL};
        for (int dev = 0; dev < 2; dev++) {
            o.device = dev ? KVCAL_DEVICE_CUDA : KVCAL_DEVICE_CPU;
            CU_ASSERT_EQUAL_FATAL(
                kvcal_test_calibrate_observing(m, o, 5, 40, 2, 1, 1, &s[dev]), KVCAL_OK);
        }
        int64_t far = 0, zero = 0, n = 0;
        for (int l = 0; l < d->num_layers; l++) {
            const size_t q0 = (size_t)l * d->num_heads;
            const float top = kvcal_stats_q_group_absmax(s[0], l, 0, d->num_heads);
            for (int h = 0; h < d->num_heads; h++, n++) {
                const float a = s[0]->q_absmax[q0 + h], b = s[1]->q_absmax[q0 + h];
                far += !(fabsf(a - b) <= 0.03f * a + 0.01f * top);
                zero += b == 0.0f;
            }
            const size_t c0 = (size_t)l * d->num_kv_heads * d->head_dim;
            for (int kv = 0; kv < 2; kv++) {
                float lt = 0.0f;
                for (int c = 0; c < d->num_kv_heads * d->head_dim; c++)
                    lt = fmaxf(lt, fmaxf(-s[0]->min[kv][c0 + c], s[0]->max[kv][c0 + c]));
                for (int c = 0; c < d->num_kv_heads * d->head_dim; c++, n += 2) {
                    const float *lo[2] = {s[0]->min[kv], s[1]->min[kv]},
                                *hi[2] = {s[0]->max[kv], s[1]->max[kv]};
                    far += !(fabsf(lo[0][c0 + c] - lo[1][c0 + c]) <=
                             -0.03f * lo[0][c0 + c] + 0.01f * lt);
                    far += !(fabsf(hi[0][c0 + c] - hi[1][c0 + c]) <=
                             0.03f * hi[0][c0 + c] + 0.01f * lt);
                }
            }
        }
        if (far || zero)
            fprintf(stderr, "\n%s: %lld of %lld values off, %lld query heads zero\n",
                    names[i], (long long)far, (long long)n, (long long)zero);
        CU_ASSERT_EQUAL(far, 0);
        CU_ASSERT_EQUAL(zero, 0);
        kvcal_stats_destroy(s[0]);
        kvcal_stats_destroy(s[1]);
        kvcal_model_close(m);
    }
}

/* The largest relative difference of two runs' per-head K/V absmax. */
static double absmax_differ(const kvcal_stats_t *a, const kvcal_stats_t *b)
{
    double worst = 0.0;
    for (int l = 0; l < a->num_layers; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < a->num_kv_heads; h++) {
                const double x = kvcal_stats_head_absmax(a, l, kv, h),
                             y = kvcal_stats_head_absmax(b, l, kv, h);
                const double rel = x == y ? 0.0 : fabs(x - y) / fabs(x);
                worst = rel > worst || rel != rel ? rel : worst;
            }
    return worst;
}

/* Each block's output added to the residual stream where it is made (a
 * bf16 projection's GEMM, the MoE's combine) and, with
 * KVCAL_RESIDUAL=unfused, by the next add + RMSNorm: both within the
 * golden bound of transformers; models where no block adds its own
 * (post-norms: Gemma 2, GLM-4; Granite's residual multiplier) the same bit
 * for bit both ways; where a projection adds it, one rounding fewer, a
 * difference of bf16's size. */
static void cuda_runner_adds_each_block_to_the_residual_either_way(void)
{
    static const struct {
        const char *name;
        double rtol; /* the golden bound */
        int folds;   /* 0: no block adds its own output, the runs bit-equal */
    } models[] = {
        {"llama3_gqa_hd48_bf16", RUNNER_RTOL, 1},
        {"gpt_oss_sinks_swa8_e8_top3_bf16", MOE_RUNNER_RTOL, 1},
        {"qwen2_moe_shared_e6_top2_bf16", MOE_RUNNER_RTOL, 1},
        {"deepseek_v2_mla_grouped_softmax_bf16", MOE_RUNNER_RTOL, 1},
        {"gemma2_softcap_swa8_bf16", RUNNER_RTOL, 0},
        {"glm4_sandwich_partial_pairs_bf16", RUNNER_RTOL, 0},
        {"granite_multipliers_bias_bf16", RUNNER_RTOL, 0},
    };
    kvcal_backend_options unfused;
    memset(&unfused, 0, sizeof unfused);
    unfused.residual_unfused = 1;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        kvcal_stats_t *s[2] = {NULL, NULL};
        for (int way = 0; way < 2; way++) {
            if (strncmp(models[i].name, "deepseek", 8))
                check_runner_golden_within(models[i].name, way ? &unfused : NULL,
                                           models[i].rtol);
            cJSON_Delete(kvcal_test_cuda_run_golden(models[i].name, way ? &unfused : NULL,
                                                    &s[way], NULL, NULL));
        }
        const double differ = absmax_differ(s[0], s[1]);
        printf("(%s: fused against unfused %.2e) ", models[i].name, differ);
        CU_ASSERT(models[i].folds ? differ <= 2e-2 : differ == 0.0);
        kvcal_stats_destroy(s[0]);
        kvcal_stats_destroy(s[1]);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cuda_runner_matches_transformers_on_golden_models),
    KVCAL_TEST(cuda_runner_adds_each_block_to_the_residual_either_way),
    KVCAL_TEST(cuda_runner_observes_queries_and_signed_range_like_the_cpu),
    KVCAL_TEST(cuda_runner_loads_weights_through_small_pieces),
    KVCAL_TEST(cuda_runner_matches_transformers_on_moe_golden_models),
    KVCAL_TEST(cuda_runner_matches_transformers_on_mla_golden_models),
    KVCAL_TEST(cuda_runner_counts_tokens_per_expert_like_the_cpu),
    KVCAL_TEST(cuda_last_moe_layer_routes_only_with_the_counts_of_a_whole_run),
    KVCAL_TEST(cuda_profile_times_each_op_and_moe_step_and_changes_nothing),
    KVCAL_TEST(cuda_runner_mlp_both_ways_matches_transformers),
    KVCAL_TEST(cuda_runner_forward_without_stats_observes_nothing),
    KVCAL_TEST(cuda_runner_streams_weights_under_a_memory_cap),
    KVCAL_TEST(cuda_runner_matches_transformers_on_hybrid_golden_models),
    KVCAL_TEST(cuda_runner_serves_fp8_checkpoints_as_vllm_does),
    KVCAL_TEST(cuda_runner_names_the_fp8_weights_it_runs_dequantized),
    KVCAL_TEST(cuda_runner_counts_the_weights_it_loads),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(cuda_backend, KVCAL_NEEDS_GPU, tests)
