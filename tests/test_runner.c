/* tests/test_runner.c: the executor on the cpu backend against golden K/V made by
 * tests/make_golden.py: Hugging Face transformers on tiny random models of
 * every supported architecture, and a float64 numpy run.c on stories260K.
 * Tolerance: |got - want| <= atol + |want| * 1e-4. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/executor.h"
#include "calib/model.h"
#include "core/fp8_linear.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

#define RTOL 1e-4
#define MAX_SAMPLES 4

/* Everything the executor handed to the tap, kept whole. */
typedef struct {
    int layers, heads, head_dim;
    int64_t rows;
    float *k; // (layers, rows, heads, head_dim)
    float *v; // (layers, rows, heads, head_dim)
    int64_t start[MAX_SAMPLES];
    int calls;
} captured;

static kvcal_status capture(void *ctx, int layer, const kvcal_rows *rows, const float *q,
                            const float *k, const float *v)
{
    (void)q;
    captured *c = ctx;
    CU_ASSERT_EQUAL(rows->n, c->rows);
    int64_t n = c->rows * c->heads * c->head_dim;
    memcpy(c->k + layer * n, k, sizeof(float) * (size_t)n);
    memcpy(c->v + layer * n, v, sizeof(float) * (size_t)n);
    for (int b = 0; b < rows->batch && b < MAX_SAMPLES; b++)
        c->start[b] = rows->start[b];
    c->calls++;
    return KVCAL_OK;
}

/* A cpu executor for batches of up to batch x seq tokens; *x: caller's. */
static void cpu_executor(kvcal_model_t *m, int batch, int seq, kvcal_exec_t **x)
{
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CPU;
    o.backend.max_batch = batch;
    o.backend.max_seq_len = seq;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, x), KVCAL_OK);
}

typedef struct {
    cJSON *root;
    kvcal_model_t *model;
    int batch, seq;
    int32_t ids[MAX_SAMPLES * 64];
    int32_t lengths[MAX_SAMPLES];
    int64_t rows;
} fixture;

static int fixture_open(fixture *f, const char *name, const char *dir)
{
    char path[256];
    memset(f, 0, sizeof *f);
    snprintf(path, sizeof path, "tests/fixtures/golden/%s.json", name);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &f->root), KVCAL_OK);
    const char *model = dir ? dir : cJSON_GetObjectItem(f->root, "model")->valuestring;
    kvcal_status st = kvcal_model_open(model, &f->model);
    if (st)
        fprintf(stderr, "\n%s: %s\n", name, kvcal_last_error());
    CU_ASSERT_EQUAL_FATAL(st, KVCAL_OK);
    cJSON *samples = cJSON_GetObjectItem(f->root, "samples"), *s;
    f->seq = 64;
    cJSON_ArrayForEach(s, samples)
    {
        int t = 0;
        cJSON *id;
        cJSON_ArrayForEach(id, s) f->ids[f->batch * f->seq + t++] = id->valueint;
        f->lengths[f->batch++] = t;
        f->rows += t;
    }
    return 0;
}

static void fixture_close(fixture *f)
{
    kvcal_model_close(f->model);
    cJSON_Delete(f->root);
}

/* Runs the fixture's batch through the executor, tapping every layer. */
static void run_capture(fixture *f, captured *c, float *logits)
{
    const kvcal_model_desc *d = kvcal_model_describe(f->model);
    kvcal_exec_t *x = NULL;
    memset(c, 0, sizeof *c);
    c->layers = d->num_layers;
    c->heads = d->num_kv_heads;
    c->head_dim = d->head_dim;
    c->rows = f->rows;
    size_t n =
        (size_t)c->layers * (size_t)f->rows * (size_t)c->heads * (size_t)c->head_dim;
    c->k = calloc(n, sizeof(float));
    c->v = calloc(n, sizeof(float));
    CU_ASSERT_FATAL(c->k && c->v);
    cpu_executor(f->model, f->batch, f->seq, &x);
    const kvcal_batch b = {f->ids, f->lengths, NULL, f->batch, f->seq};
    kvcal_status st = kvcal_exec_forward(x, &b, capture, c, logits);
    if (st)
        fprintf(stderr, "\n%s\n", kvcal_last_error());
    CU_ASSERT_EQUAL(st, KVCAL_OK);
    CU_ASSERT_EQUAL(c->calls, c->layers - d->linear_layers);
    kvcal_exec_destroy(x);
}

static void captured_free(captured *c)
{
    free(c->k);
    free(c->v);
}

static const float *row_of(const captured *c, const float *base, int layer, int64_t row)
{
    return base + ((int64_t)layer * c->rows + row) * c->heads * c->head_dim;
}

static const char *edited_checkpoint(const char *src, const char *edits);
static void layer_windows(const char *dir, int *windows, int n);

/* Checks per-layer per-head absmax, raw rows and logits of the model in
 * dir (NULL: the fixture's own) against fixture `name`; prints the worst
 * relative error of the absmax. */
static void check_model_against_golden(const char *name, const char *dir)
{
    fixture f;
    captured c;
    fixture_open(&f, name, dir);
    const kvcal_model_desc *d = kvcal_model_describe(f.model);
    float *logits = malloc(sizeof(float) * (size_t)f.rows * (size_t)d->vocab_size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(logits);
    run_capture(&f, &c, logits);
    int bad = 0;
    double worst = 0.0;
    /* a hybrid model's fixture lists the layers that cache (kv_layers) */
    cJSON *kv_layers = cJSON_GetObjectItem(f.root, "kv_layers");
    const int cached = kv_layers ? cJSON_GetArraySize(kv_layers) : c.layers;
    CU_ASSERT_EQUAL(cached, c.layers - d->linear_layers);
    for (int kv = 0; kv < 2; kv++) {
        cJSON *want = cJSON_GetObjectItem(f.root, kv ? "v_absmax" : "k_absmax");
        CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(want), cached);
        for (int at = 0; at < cached; at++) {
            const int l = kv_layers ? cJSON_GetArrayItem(kv_layers, at)->valueint : at;
            CU_ASSERT_FATAL(l >= 0 && l < c.layers && kvcal_model_layer_caches(d, l));
            cJSON *wl = cJSON_GetArrayItem(want, at);
            CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(wl), c.heads);
            for (int h = 0; h < c.heads; h++) {
                float got = 0.0f;
                for (int64_t t = 0; t < c.rows; t++)
                    for (int i = 0; i < c.head_dim; i++) {
                        float x =
                            fabsf(row_of(&c, kv ? c.v : c.k, l, t)[h * c.head_dim + i]);
                        got = x > got ? x : got;
                    }
                double w = cJSON_GetArrayItem(wl, h)->valuedouble;
                worst = fmax(worst, fabs(got - w) / fabs(w));
                if (fabs(got - w) > 1e-7 + fabs(w) * RTOL) {
                    fprintf(stderr,
                            "\n%s: %c absmax layer %d head %d: got %.7g want %.7g", name,
                            kv ? 'V' : 'K', l, h, got, w);
                    bad++;
                }
            }
        }
    }
    cJSON *raw, *item;
    raw = cJSON_GetObjectItem(f.root, "raw");
    cJSON_ArrayForEach(item, raw)
    {
        int s = cJSON_GetObjectItem(item, "sample")->valueint;
        int l = cJSON_GetObjectItem(item, "layer")->valueint;
        int t = cJSON_GetObjectItem(item, "token")->valueint;
        for (int kv = 0; kv < 2; kv++) {
            cJSON *want = cJSON_GetObjectItem(item, kv ? "v" : "k");
            const float *got = row_of(&c, kv ? c.v : c.k, l, c.start[s] + t);
            double scale = 0;
            for (int i = 0; i < cJSON_GetArraySize(want); i++)
                scale = fmax(scale, fabs(cJSON_GetArrayItem(want, i)->valuedouble));
            CU_ASSERT_EQUAL(cJSON_GetArraySize(want), c.heads * c.head_dim);
            for (int i = 0; i < cJSON_GetArraySize(want); i++) {
                double w = cJSON_GetArrayItem(want, i)->valuedouble;
                if (fabs(got[i] - w) > scale * RTOL + fabs(w) * RTOL) {
                    fprintf(stderr,
                            "\n%s: raw %c sample %d layer %d token %d [%d]: got %.7g "
                            "want %.7g",
                            name, kv ? 'V' : 'K', s, l, t, i, got[i], w);
                    bad++;
                }
            }
        }
    }
    cJSON *lg = cJSON_GetObjectItem(f.root, "logits");
    int ls = cJSON_GetObjectItem(lg, "sample")->valueint;
    int lt = cJSON_GetObjectItem(lg, "token")->valueint;
    cJSON *vals = cJSON_GetObjectItem(lg, "values");
    const float *got = logits + (c.start[ls] + lt) * d->vocab_size;
    for (int i = 0; i < cJSON_GetArraySize(vals); i++) {
        double w = cJSON_GetArrayItem(vals, i)->valuedouble;
        if (fabs(got[i] - w) > 1e-4 + fabs(w) * RTOL) {
            fprintf(stderr, "\n%s: logit %d: got %.7g want %.7g", name, i, got[i], w);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    printf("(%s: worst absmax rel. error %.2e) ", name, worst);
    free(logits);
    captured_free(&c);
    fixture_close(&f);
}

static void check_against_golden(const char *name)
{
    check_model_against_golden(name, NULL);
}

static void runner_matches_numpy_run_c_on_stories260k(void)
{
    check_against_golden("stories260K");
}

static void runner_matches_transformers_llama3_gqa_head_dim_48_bf16(void)
{
    check_against_golden("llama3_gqa_hd48_bf16");
}

static void runner_matches_transformers_llama_mha_linear_rope_tied_fp32_old_config(void)
{
    check_against_golden("llama_mha_linear_tied_fp32");
}

static void runner_matches_transformers_mistral_mqa_fp16(void)
{
    check_against_golden("mistral_mqa_fp16");
}

static void runner_matches_transformers_qwen2_bias_old_config(void)
{
    check_against_golden("qwen2_gqa_bias_bf16");
}

static void runner_matches_transformers_qwen3_qk_norm_head_dim_80(void)
{
    check_against_golden("qwen3_gqa_hd80_qknorm_bf16");
}

/* head_dim 128, the served models' head size. */
static void runner_matches_transformers_qwen3_qk_norm_head_dim_128(void)
{
    check_against_golden("qwen3_hd128_qknorm_bf16");
}

/* The model the CUDA runner's fused gate/up + SwiGLU kernel takes
 * (intermediate_size 256: two 128-row weight blocks). */
static void runner_matches_transformers_llama_mlp_256(void)
{
    check_against_golden("llama_gqa_mlp256_bf16");
}

/* head_dim 64 (SmolLM2's and most small models'), llama3 RoPE scaling. */
static void runner_matches_transformers_llama3_head_dim_64(void)
{
    check_against_golden("llama3_gqa_hd64_bf16");
}

/* Positions past the original context of 16; K includes yarn's attention
 * factor (0.1 ln 4 + 1), as transformers' cos/sin do. */
static void runner_matches_transformers_qwen2_yarn_rope_old_config(void)
{
    check_against_golden("qwen2_yarn_bf16");
}

/* Softmax top-3 of 8 experts, renormalized (norm_topk_prob), q/k norm; the
 * reference in float64. */
static void runner_matches_transformers_qwen3_moe_top3_of_8_renormalized(void)
{
    check_against_golden("qwen3_moe_e8_top3_norm_bf16");
}

/* Top-2 of 6 not renormalized, the shared expert behind its sigmoid gate,
 * q/k/v biases; a dense first layer (mlp_only_layers), which holds no
 * shared expert. */
static void runner_matches_transformers_qwen2_moe_shared_expert_sigmoid_gate(void)
{
    check_against_golden("qwen2_moe_shared_e6_top2_bf16");
    check_against_golden("qwen2_moe_shared_dense_layers_e4_top2_bf16");
}

/* Top-2 of 4, a sliding window of 16 over samples of 37 and 23 tokens. */
static void runner_matches_transformers_mixtral_top2_sliding_window_16(void)
{
    check_against_golden("mixtral_e4_top2_swa16_bf16");
}

/* MiniMax-M2: the q/k norms over the whole projection (every head's
 * channels at once), partial RoPE as its released config gives it
 * (rotary_dim 8 of 16, rope_theta at the top), sigmoid top-3 of 8 chosen
 * with e_score_correction_bias and renormalized; then the config as
 * transformers 5 writes it (rope_parameters with partial_rotary_factor). */
#define MINIMAX_M2 "minimax_m2_qknorm_all_rot8_e8_top3_bf16"
static void runner_matches_transformers_minimax_m2_whole_projection_qk_norm(void)
{
    check_against_golden(MINIMAX_M2);
    check_model_against_golden(
        MINIMAX_M2,
        edited_checkpoint(MINIMAX_M2, "{\"rope_theta\": 1.0, \"rope_parameters\": "
                                      "{\"rope_type\": \"default\", \"rope_theta\": "
                                      "5000000.0, \"partial_rotary_factor\": 0.5}}"));
}

/* Llama 4 (Scout's features): RoPE on pairs, llama3-scaled, then the
 * weightless q/k norm, within chunks of 8 tokens, in layers 0, 1 and 3;
 * layer 2 without RoPE over every key, its queries temperature-scaled from
 * position 7 on; top-2 of 4 experts every other layer, their sigmoids on
 * the experts' inputs, a shared expert; dense MLPs of their own size in
 * between. Then as released (Maverick's features, in the multimodal
 * wrapper under language_model.): no q/k norm nor temperature, top-1 in
 * every layer, chunks of 16. */
/* GLM-4.5V / 4.6V's language model: GLM-4.5's layers (a dense first layer,
 * sigmoid top-3 with the correction bias, a shared expert, q/k/v biases
 * from the class default) under model.language_model., RoPE in three
 * sections that text positions make one. */
static void runner_matches_transformers_glm4v_moe_language_model(void)
{
    check_against_golden("glm4v_moe_mm_mrope_e8_top3_bf16");
}

/* GLM-4-0414: q/k/v biases, RoPE on interleaved pairs of half of each
 * head, the attention's and the MLP's outputs normalized before their
 * residual adds, gate and up in one tensor; then its config as GLM-4-0414
 * is released (transformers 4's top-level rope_theta and
 * partial_rotary_factor, rms_norm_eps stated); and GLM-4.1V / 4.6V-Flash's
 * language model under model.language_model. */
#define GLM4 "glm4_sandwich_partial_pairs_bf16"
static void runner_matches_transformers_glm4_dense_and_its_vision_wrapper(void)
{
    check_against_golden(GLM4);
    check_model_against_golden(
        GLM4,
        edited_checkpoint(GLM4, "{\"rope_parameters\": null, \"rope_theta\": 10000.0, "
                                "\"partial_rotary_factor\": 0.5}"));
    check_against_golden("glm4v_mm_mrope_pairs_bf16");
}

/* ERNIE 4.5 MoE: RoPE on interleaved pairs, a dense first layer, then
 * top-3 of 8 by softmax probability plus the correction bias ((1, experts)
 * as released), weighted by the probabilities renormalized, two shared
 * experts, tied embeddings. */
#define ERNIE45 "ernie45_moe_softmax_bias_e8_top3_bf16"
static void runner_matches_transformers_ernie45_moe_softmax_choice_bias(void)
{
    check_against_golden(ERNIE45);
}

/* EXAONE 4: post-norm layers (the attention and the MLP on the residual
 * stream itself, their outputs normalized before the adds), per-head q/k
 * norm, layers 0 and 2 sliding (window 8) with RoPE, 1 and 3 over every
 * key without RoPE. */
#define EXAONE4 "exaone4_postnorm_swa8_nope_bf16"
static void runner_matches_transformers_exaone4_post_norm_nope_layers(void)
{
    check_against_golden(EXAONE4);
}

/* Seed-OSS: Llama's layers with q/k/v biases and o_proj's by their own
 * fields. */
static void runner_matches_transformers_seed_oss_biases(void)
{
    check_against_golden("seed_oss_qkv_o_bias_bf16");
}

/* SmolLM3: Llama's layers, every third without RoPE (no_rope_layer_interval
 * 3 of 4 layers: layer 2), tied embeddings. */
static void runner_matches_transformers_smollm3_nope_layers(void)
{
    check_against_golden("smollm3_nope3_tied_bf16");
}

/* OLMo 2 and Olmo 3: post-norm layers, the q/k norms over the whole
 * projection; Olmo 3's three sliding layers (window 8) with the default
 * RoPE and its full layer with yarn x4 (its legacy rope_scaling stretches
 * the full layers alone); then Olmo 3 as transformers 4 wrote it (the
 * top-level rope_theta and rope_scaling). */
#define OLMO3 "olmo3_swa8_yarn_full_bf16"
static void runner_matches_transformers_olmo_post_norm_whole_qk_norm(void)
{
    check_against_golden("olmo2_postnorm_qknorm_all_bf16");
    check_against_golden(OLMO3);
    check_model_against_golden(
        OLMO3, edited_checkpoint(OLMO3, "{\"rope_parameters\": null, \"rope_theta\": "
                                        "500000.0, \"rope_scaling\": {\"rope_type\": "
                                        "\"yarn\", \"factor\": 4.0, "
                                        "\"original_max_position_embeddings\": 16}}"));
}

/* Hunyuan-A13B's layers (q/k norms after RoPE, the NTK-alpha RoPE of its
 * "dynamic" rope with alpha 1000, softmax top-2 of 4 renormalized beside an
 * ungated shared MLP) and the dense model's (the same attention and
 * RoPE, tied embeddings). */
static void runner_matches_transformers_hunyuan_qk_norm_after_rope(void)
{
    check_against_golden("hunyuan_moe_qknorm_after_rope_alpha_bf16");
    check_against_golden("hunyuan_dense_qknorm_after_rope_bf16");
}

/* IBM Granite's four multipliers (the embedding x12, q k^T x 1/16, each
 * block's output x0.22 before its residual add, the logits / 8) with
 * q/k/v/o biases, and GraniteMoe's (its experts in two stacked tensors,
 * softmax over the top-2 logits of 4; tied embeddings, logits / 6); each
 * multiplier moved to 1 in turn is caught by the golden's logits or K/V. */
static void runner_matches_transformers_granite_multipliers(void)
{
    check_against_golden("granite_multipliers_bias_bf16");
    check_against_golden("granitemoe_multipliers_e4_top2_bf16");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/granitemoe_multipliers_e4_top2_bf16", &m),
        KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(d->num_experts, 4);
    CU_ASSERT_EQUAL(d->experts_per_tok, 2);
    CU_ASSERT_DOUBLE_EQUAL(d->residual_scale, 0.22f, 0.0);
    kvcal_model_close(m);
}

#define LLAMA4 "llama4_nope_chunk8_temp_e4_top2_bf16"
static void runner_matches_transformers_llama4_nope_chunked_layers(void)
{
    check_against_golden(LLAMA4);
    check_against_golden("llama4_mm_top1_chunk16_bf16");
}

/* Phi-3: q/k/v and gate/up fused in the checkpoint, partial rotary (8 of 16
 * channels), longrope with the long factors and their attention factor,
 * a sliding window of 16. */
static void runner_matches_transformers_phi3_longrope_partial_rotary_window(void)
{
    check_against_golden("phi3_longrope_partial_swa16_bf16");
}

/* Gemma 3 text: (1 + w) sandwich norms, q/k norm, query_pre_attn_scalar,
 * sliding layers of window 8 with their own RoPE base around a global layer
 * with linear-scaled RoPE, GELU-tanh MLP, the embedding scaled by
 * sqrt(hidden). */
static void runner_matches_transformers_gemma3_local_global_layers(void)
{
    check_against_golden("gemma3_text_swa8_local_global_bf16");
    /* the older config.json: sliding_window_pattern 2 and no layer_types
     * make the same sliding, global, sliding layers */
    check_model_against_golden(
        "gemma3_text_swa8_local_global_bf16",
        edited_checkpoint("gemma3_text_swa8_local_global_bf16",
                          "{\"layer_types\": null, \"sliding_window_pattern\": 2}"));
}

/* Multimodal models run on text by their language model: Gemma 3 and
 * Mistral 3 with their layers under language_model.model. (as released;
 * Gemma's head tied, Mistral's language_model.lm_head), Qwen3-VL under
 * model.language_model. (as transformers 4.52 and later save it; lm_head
 * apart) with its 3-axis RoPE, whose axes agree on text. */
static void runner_matches_transformers_multimodal_language_models(void)
{
    check_against_golden("gemma3_mm_swa8_local_global_bf16");
    check_against_golden("mistral3_mm_gqa_bf16");
    check_against_golden("qwen3_vl_mrope_qknorm_bf16");
    /* Qwen2.5-VL as released: its config flat, rope_scaling "mrope", its
     * layers under model. and its visual tower under visual. */
    check_against_golden("qwen2_5_vl_flat_mrope_bias_bf16");
    check_against_golden("qwen2_vl_flat_mrope_bias_bf16");
    /* Qwen3-VL-MoE: each layer's experts in two tensors, (experts, hidden,
     * 2 inter) and (experts, inter, hidden), as released */
    check_against_golden("qwen3_vl_moe_stacked_e8_top3_bf16");
}

/* Hybrid models: gated delta-net layers, which cache nothing, among gated
 * attention layers (q/k norm, RoPE on a quarter of each head): Qwen3.5
 * dense (its delta-net's input projections apart), Qwen3-Next (fused and
 * grouped by key head; experts, a gated shared expert and a dense layer;
 * a linear layer last) and the language models of Qwen3.5's and
 * Qwen3.5-MoE's multimodal wrappers. */
static void runner_matches_transformers_hybrid_linear_attention_models(void)
{
    check_against_golden("qwen3_5_text_gdn_hybrid_bf16");
    check_against_golden("qwen3_next_gdn_moe_e8_top3_bf16");
    check_against_golden("qwen3_5_moe_mm_gdn_e8_top3_bf16");
    check_against_golden("qwen3_5_mm_gdn_hybrid_bf16");
    /* Qwen3-Next's full_attention_interval stands for layer_types: every
     * second layer attends */
    check_model_against_golden(
        "qwen3_5_text_gdn_hybrid_bf16",
        edited_checkpoint("qwen3_5_text_gdn_hybrid_bf16",
                          "{\"layer_types\": null, \"full_attention_interval\": 2}"));
}

/* Gemma 2: alternating sliding and global layers, attention scores and
 * logits soft-capped, the (1 + w) sandwich norms, no q/k norm. */
static void runner_matches_transformers_gemma2_soft_caps(void)
{
    check_against_golden("gemma2_softcap_swa8_bf16");
}

/* Qwen3-MoE with mlp_only_layers [0] and decoder_sparse_step 2: layer 0 a
 * dense MLP, layer 1 a mixture, layer 2 dense again (3 is no multiple of 2),
 * layer 3 a mixture. */
static void runner_matches_transformers_qwen3_moe_with_dense_layers(void)
{
    check_against_golden("qwen3_moe_dense_layers_e4_top2_bf16");
}

/* GLM-4.5: a dense first layer, then sigmoid routing chosen with its score
 * correction bias, top-3 of 8 renormalized and x2.5, an ungated shared
 * expert, partial rotary, q/k/v biases, q/k norm. */
static void runner_matches_transformers_glm4_moe_dense_then_sigmoid_routing(void)
{
    check_against_golden("glm4_moe_dense1_sigmoid_e8_top3_bf16");
}

/* gpt-oss: sinks in every head's softmax, a window of 8 in layer 0 (the
 * samples are 37 and 23 tokens), q/k/v/o biases, yarn not truncated,
 * the router's bias, top-3 of 8, the experts' interleaved, transposed,
 * biased gate/up and the clamped SwiGLU. */
static void runner_matches_transformers_gpt_oss_sinks_windows_clamped_experts(void)
{
    check_against_golden("gpt_oss_sinks_swa8_e8_top3_bf16");
}

/* gpt-oss with its experts stored as MXFP4 blocks and scales (the released
 * checkpoints' layout): transformers' reference ran on the dequantized
 * weights (its own MXFP4 loader); head_dim 64, yarn truncated. */
static void runner_matches_transformers_gpt_oss_mxfp4_experts(void)
{
    check_against_golden("gpt_oss_hd64_swa16_e4_top2_mxfp4");
}

/* use_sliding_window as transformers applies it: Qwen3-MoE's window (16)
 * on every layer, whatever layer_types says (its config has none; one added
 * changes nothing); Qwen2-MoE's on its layer_types' sliding layers, which
 * without layer_types are the even layers below max_window_layers (layer 0
 * of 3 below 2; layers 0 and 2 below 3). */
static void runner_matches_transformers_qwen_moe_sliding_windows(void)
{
    int w[3];
    check_against_golden("qwen3_moe_swa16_e8_top2_bf16");
    check_model_against_golden(
        "qwen3_moe_swa16_e8_top2_bf16",
        edited_checkpoint("qwen3_moe_swa16_e8_top2_bf16",
                          "{\"layer_types\": [\"full_attention\", \"full_attention\"]}"));
    check_against_golden("qwen2_moe_swa8_maxwin2_e4_top2_bf16");
    check_model_against_golden("qwen2_moe_swa8_maxwin2_e4_top2_bf16",
                               edited_checkpoint("qwen2_moe_swa8_maxwin2_e4_top2_bf16",
                                                 "{\"layer_types\": null}"));
    layer_windows(edited_checkpoint("qwen2_moe_swa8_maxwin2_e4_top2_bf16",
                                    "{\"layer_types\": null, \"max_window_layers\": 3}"),
                  w, 3);
    CU_ASSERT(w[0] == 8 && w[1] == 0 && w[2] == 8);
    layer_windows(
        edited_checkpoint("qwen2_moe_swa8_maxwin2_e4_top2_bf16",
                          "{\"layer_types\": null, \"use_sliding_window\": false}"),
        w, 3);
    CU_ASSERT(w[0] == 0 && w[1] == 0 && w[2] == 0);
}

/* DeepSeek-V2 (V2-Lite style): MLA without the query's LoRA (the cached
 * entry, latent then rotated RoPE part, checked as one kv head of 48), yarn
 * with mscale on the RoPE part and the softmax scale, a dense first layer,
 * softmax routing limited to the 2 best of 4 groups, not renormalized. */
/* Calibration on the fixture's samples: the absmax of the latent and of
 * the RoPE part of each layer's entry (the kvcal JSON's mla section), from
 * the statistics' channels, against transformers' entry. */
static void check_mla_parts_against_golden(const char *name)
{
    fixture f;
    fixture_open(&f, name, NULL);
    const kvcal_model_desc *d = kvcal_model_describe(f.model);
    CU_ASSERT_FATAL(d->mla && d->num_kv_heads == 1 &&
                    d->head_dim == d->kv_lora_rank + d->qk_rope_head_dim);
    kvcal_exec_t *x = NULL;
    kvcal_stats_t *s = NULL;
    cpu_executor(f.model, f.batch, f.seq, &x);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &s), KVCAL_OK);
    const kvcal_exec_samples smp = {.ids = f.ids,
                                    .lengths = f.lengths,
                                    .num_samples = f.batch,
                                    .seq_len = f.seq,
                                    .batch = f.batch};
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_calibrate(x, &smp, s, 0.9), KVCAL_OK);
    const cJSON *lat = cJSON_GetObjectItem(f.root, "latent_absmax");
    const cJSON *rope = cJSON_GetObjectItem(f.root, "rope_absmax");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(lat), d->num_layers);
    for (int l = 0; l < d->num_layers; l++) {
        const double want[2] = {cJSON_GetArrayItem(lat, l)->valuedouble,
                                cJSON_GetArrayItem(rope, l)->valuedouble};
        const double got[2] = {
            kvcal_stats_channels_absmax(s, l, KVCAL_K, 0, 0, d->kv_lora_rank),
            kvcal_stats_channels_absmax(s, l, KVCAL_K, 0, d->kv_lora_rank,
                                        d->qk_rope_head_dim)};
        for (int i = 0; i < 2; i++) {
            if (fabs(got[i] - want[i]) > fabs(want[i]) * RTOL)
                fprintf(stderr, "\n%s: layer %d %s absmax: got %.7g want %.7g", name, l,
                        i ? "RoPE part" : "latent", got[i], want[i]);
            CU_ASSERT(fabs(got[i] - want[i]) <= fabs(want[i]) * RTOL);
        }
        /* V of the statistics is the same entry */
        CU_ASSERT_EQUAL(kvcal_stats_head_absmax(s, l, KVCAL_V, 0),
                        kvcal_stats_head_absmax(s, l, KVCAL_K, 0));
    }
    kvcal_stats_destroy(s);
    kvcal_exec_destroy(x);
    fixture_close(&f);
}

static void runner_matches_transformers_deepseek_v2_mla_group_limited_softmax(void)
{
    check_against_golden("deepseek_v2_mla_grouped_softmax_bf16");
    check_mla_parts_against_golden("deepseek_v2_mla_grouped_softmax_bf16");
}

/* DeepSeek-V3 / R1 / Kimi K2 style: the query's LoRA with its norm,
 * interleaved RoPE pairs, sigmoid routing with its correction bias among
 * the 2 best of 4 groups (each group's top-2 sum), renormalized x2.5, two
 * shared experts. */
static void runner_matches_transformers_deepseek_v3_mla_qlora_grouped_sigmoid(void)
{
    check_against_golden("deepseek_v3_mla_qlora_grouped_sigmoid_bf16");
    check_mla_parts_against_golden("deepseek_v3_mla_qlora_grouped_sigmoid_bf16");
}

/* GLM-4.7-Flash style (Glm4MoeLiteForCausalLM): DeepSeek-V3's layers, value
 * heads wider than the keys' no-RoPE part, one group, one shared expert, two
 * dense layers by mlp_layer_types, plain RoPE with a base of 1e6. */
static void runner_matches_transformers_glm4_moe_lite(void)
{
    check_against_golden("glm4_moe_lite_mla_qlora_sigmoid_bf16");
    check_mla_parts_against_golden("glm4_moe_lite_mla_qlora_sigmoid_bf16");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/glm4_moe_lite_mla_qlora_sigmoid_bf16",
                         &m),
        KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT(d->mla && d->moe_sigmoid && d->dense_layers == 2);
    CU_ASSERT(d->layer_dense[0] && d->layer_dense[1] && !d->layer_dense[2] &&
              !d->layer_dense[3]);
    CU_ASSERT_DOUBLE_EQUAL(d->routed_scale, 1.8, 1e-6);
    kvcal_model_close(m);
}

/* A sample of 65 tokens is refused by model m's cpu runner itself, with an
 * error holding `needle`. */
static void expect_65_tokens_refused(kvcal_model_t *m, const char *needle)
{
    kvcal_exec_t *x = NULL;
    cpu_executor(m, 1, 65, &x);
    int ids[65];
    for (int t = 0; t < 65; t++)
        ids[t] = 1 + t;
    const int lengths[1] = {65};
    const kvcal_exec_samples smp = {
        .ids = ids, .lengths = lengths, .num_samples = 1, .seq_len = 65, .batch = 1};
    kvcal_stats_t *s = NULL;
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &s), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_exec_calibrate(x, &smp, s, 0.9), KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has(needle));
    kvcal_stats_destroy(s);
    kvcal_exec_destroy(x);
}

/* DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5) on samples within
 * index_topk: transformers' models with their indexers (every key kept) as
 * kvcal runs them, dense and without the indexers' weights. A sample longer
 * than index_topk is refused, by the runner itself too. */
static void runner_matches_transformers_deepseek_sparse_attention_within_top_k(void)
{
    static const char *const names[] = {"deepseek_v32_dsa_topk64_grouped_sigmoid_bf16",
                                        "glm_moe_dsa_topk64_sigmoid_bf16"};
    for (int i = 0; i < 2; i++) {
        check_against_golden(names[i]);
        check_mla_parts_against_golden(names[i]);
        char path[256];
        snprintf(path, sizeof path, "tests/fixtures/golden/%s", names[i]);
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &m), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_model_describe(m)->sparse_topk, 64);
        expect_65_tokens_refused(m, "sample 0 has 65 tokens, more than the 64 keys");
        kvcal_model_close(m);
    }
}

/* Ministral 3 (Mistral3ForConditionalGeneration over a ministral3 language
 * model): yarn with mscale and mscale_all_dim, against transformers; a
 * sample past original_max_position_embeddings (64), where transformers
 * scales the queries (llama_4_scaling_beta) and vLLM's config.json loader
 * does not, is refused by the runner. */
static void runner_matches_transformers_ministral3_within_its_original_context(void)
{
    check_against_golden("mistral3_ministral3_yarn_bf16");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/mistral3_ministral3_yarn_bf16", &m),
        KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(d->query_scaling_from, 64);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(d), KVCAL_OK);
    expect_65_tokens_refused(m, "from position 64 on the model scales its queries");
    kvcal_model_close(m);
}

/* Calibration counts the tokens routed to each expert of every layer, the
 * last one included: each valid token once per chosen expert (padding
 * never), whatever the batches. */
static void calibrate_counts_tokens_per_expert_in_every_layer(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16", &m),
        KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = KVCAL_DEVICE_CPU;
    kvcal_stats_t *s[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 5, 24, i ? 2 : 5, &s[i], NULL),
                              KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(s[0]->num_experts, 8);
    for (int l = 0; l < d->num_layers; l++) {
        int64_t sum = 0, used = 0;
        for (int e = 0; e < 8; e++) {
            sum += s[0]->expert_tokens[l * 8 + e];
            used += s[0]->expert_tokens[l * 8 + e] > 0;
        }
        CU_ASSERT_EQUAL(sum, (int64_t)(4 * 24 + 13) * 3);
        CU_ASSERT_EQUAL(s[0]->tokens[l], 4 * 24 + 13);
        CU_ASSERT(used > 3);
    }
    CU_ASSERT(!memcmp(s[0]->expert_tokens, s[1]->expert_tokens,
                      sizeof(int64_t) * 8 * (size_t)d->num_layers));
    kvcal_stats_destroy(s[0]);
    kvcal_stats_destroy(s[1]);
    kvcal_model_close(m);
}

/* A calibration's last MoE layer routes only (its counts) on the CPU: the
 * statistics of the whole layer's run, no expert run there. */
static void calibrate_last_moe_layer_routes_only_with_the_counts_of_a_whole_run(void)
{
    kvcal_test_last_moe_layer_routes_only(KVCAL_DEVICE_CPU);
}

/* The op profile counts each op it times and changes nothing observed. */
static void calibrate_profile_times_each_op_and_changes_nothing(void)
{
    kvcal_test_op_profile(KVCAL_DEVICE_CPU);
}

/* Every query the attention reads, after q_norm and RoPE. */
typedef struct {
    int heads, head_dim;
    float *q_absmax; // (layers, heads)
} query_tap;

static kvcal_status tap_queries(void *ctx, int layer, const kvcal_rows *rows,
                                const float *q, const float *k, const float *v)
{
    (void)k, (void)v;
    query_tap *t = ctx;
    for (int64_t r = 0; r < rows->n; r++)
        for (int h = 0; h < t->heads; h++)
            for (int c = 0; c < t->head_dim; c++) {
                const float a = fabsf(q[(r * t->heads + h) * t->head_dim + c]);
                float *m = &t->q_absmax[layer * t->heads + h];
                *m = a > *m ? a : *m;
            }
    return KVCAL_OK;
}

/* calibrate's q_absmax is the max |q| of the queries the attention reads
 * (the forward's tap, q_norm and RoPE applied), the last layer's too, and
 * the signed range brackets every K and V the tap saw. */
static void calibrate_observes_the_queries_the_attention_reads_and_the_signed_range(void)
{
    fixture f;
    captured c;
    fixture_open(&f, "qwen3_gqa_hd80_qknorm_bf16", NULL);
    const kvcal_model_desc *d = kvcal_model_describe(f.model);
    run_capture(&f, &c, NULL);
    query_tap qt = {d->num_heads, d->head_dim,
                    calloc((size_t)d->num_layers * d->num_heads, sizeof(float))};
    CU_ASSERT_FATAL(qt.q_absmax != NULL);
    kvcal_exec_t *x = NULL;
    cpu_executor(f.model, f.batch, f.seq, &x);
    const kvcal_batch b = {f.ids, f.lengths, NULL, f.batch, f.seq};
    CU_ASSERT_EQUAL(kvcal_exec_forward(x, &b, tap_queries, &qt, NULL), KVCAL_OK);
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, &s), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_q_heads(s, d->num_heads), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(s, 1), KVCAL_OK);
    kvcal_exec_samples smp = {.ids = f.ids,
                              .lengths = f.lengths,
                              .num_samples = f.batch,
                              .seq_len = f.seq,
                              .batch = f.batch};
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_calibrate(x, &smp, s, 0.9), KVCAL_OK);
    int64_t q_off = 0, outside = 0, q_zero = 0;
    for (int i = 0; i < d->num_layers * d->num_heads; i++) {
        q_off += s->q_absmax[i] != qt.q_absmax[i];
        q_zero += qt.q_absmax[i] == 0.0f;
    }
    for (int l = 0; l < d->num_layers; l++)
        for (int64_t r = 0; r < c.rows; r++)
            for (int i = 0; i < d->num_kv_heads * d->head_dim; i++) {
                const size_t at = (size_t)l * d->num_kv_heads * d->head_dim + i;
                const float kk = row_of(&c, c.k, l, r)[i], vv = row_of(&c, c.v, l, r)[i];
                outside += kk < s->min[KVCAL_K][at] || kk > s->max[KVCAL_K][at] ||
                           vv < s->min[KVCAL_V][at] || vv > s->max[KVCAL_V][at];
            }
    CU_ASSERT_EQUAL(q_off, 0);
    CU_ASSERT_EQUAL(q_zero, 0);
    CU_ASSERT_EQUAL(outside, 0);
    /* and the range is reached: some channel's min is a K value seen */
    int reached = 0;
    for (int64_t r = 0; r < c.rows && !reached; r++)
        reached = row_of(&c, c.k, 0, r)[0] == s->min[KVCAL_K][0] ||
                  row_of(&c, c.k, 0, r)[0] == s->max[KVCAL_K][0];
    CU_ASSERT_TRUE(reached);
    kvcal_stats_destroy(s);
    kvcal_exec_destroy(x);
    free(qt.q_absmax);
    captured_free(&c);
    fixture_close(&f);
}

/* A sample's K/V are bit-identical whether it ran alone or in a batch. */
static void runner_kv_does_not_depend_on_batch_neighbours(void)
{
    fixture f;
    captured all, one;
    fixture_open(&f, "qwen2_gqa_bias_bf16", NULL);
    run_capture(&f, &all, NULL);
    f.batch = 1;
    memcpy(f.ids, f.ids + f.seq, sizeof(int32_t) * (size_t)f.seq);
    f.lengths[0] = f.lengths[1];
    f.rows = f.lengths[0];
    run_capture(&f, &one, NULL);
    size_t row = (size_t)all.heads * (size_t)all.head_dim;
    for (int l = 0; l < all.layers; l++) {
        CU_ASSERT_EQUAL(memcmp(row_of(&all, all.k, l, all.start[1]),
                               row_of(&one, one.k, l, 0),
                               sizeof(float) * row * (size_t)f.rows),
                        0);
        CU_ASSERT_EQUAL(memcmp(row_of(&all, all.v, l, all.start[1]),
                               row_of(&one, one.v, l, 0),
                               sizeof(float) * row * (size_t)f.rows),
                        0);
    }
    captured_free(&all);
    captured_free(&one);
    fixture_close(&f);
}

static void runner_rejects_sequence_longer_than_context_and_bad_ids(void)
{
    kvcal_model_t *m = NULL;
    kvcal_exec_t *x = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("models/stories260K/stories260K.bin", &m),
                          KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(d->max_seq_len, 512);
    int seq = d->max_seq_len + 1;
    int32_t *ids = calloc((size_t)seq, sizeof(int32_t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    cpu_executor(m, 1, seq, &x);
    int64_t sample = 7;
    const kvcal_batch too_long = {ids, &seq, &sample, 1, seq};
    CU_ASSERT_EQUAL(kvcal_exec_forward(x, &too_long, NULL, NULL, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("sample 7 has 513 tokens"));
    int len = 4;
    ids[2] = 512;
    const kvcal_batch bad_id = {ids, &len, NULL, 1, seq};
    CU_ASSERT_EQUAL(kvcal_exec_forward(x, &bad_id, NULL, NULL, NULL),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("token id 512"));
    free(ids);
    kvcal_exec_destroy(x);
    kvcal_model_close(m);
}

// --- model errors -----------------------------------------------------------

/* Copies a golden checkpoint into the test's temp dir with config.json
 * edited: every key of the JSON object `edits` replaces the config's.
 * Returns the directory. */
static const char *edited_checkpoint(const char *src, const char *edits)
{
    static char dir[512];
    static int serial;
    char cmd[2048], path[600];
    snprintf(dir, sizeof dir, "%s/%s-%d", kvcal_test_tmpdir(), src, serial++);
    snprintf(cmd, sizeof cmd, "cp -r 'tests/fixtures/golden/%s' '%s'", src, dir);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg = NULL, *patch = cJSON_Parse(edits), *item;
    CU_ASSERT_PTR_NOT_NULL_FATAL(patch);
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &cfg), KVCAL_OK);
    cJSON_ArrayForEach(item, patch)
    {
        cJSON_DeleteItemFromObject(cfg, item->string);
        cJSON_AddItemToObject(cfg, item->string, cJSON_Duplicate(item, 1));
    }
    CU_ASSERT_EQUAL_FATAL(kvcal_json_write(path, cfg), KVCAL_OK);
    cJSON_Delete(cfg);
    cJSON_Delete(patch);
    return dir;
}

static void expect_open_error(const char *dir, kvcal_status want, const char *needle)
{
    kvcal_model_t *m = (kvcal_model_t *)1;
    CU_ASSERT_EQUAL(kvcal_model_open(dir, &m), want);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT(kvcal_test_error_has(needle));
}

static void model_open_names_unsupported_architecture(void)
{
    expect_open_error(edited_checkpoint("mistral_mqa_fp16",
                                        "{\"architectures\": [\"GPT2LMHeadModel\"]}"),
                      KVCAL_ERR_UNSUPPORTED, "GPT2LMHeadModel");
}

/* The list of what kvcal runs names the mixture-of-experts families too. */
static void model_open_lists_the_supported_architectures(void)
{
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16",
                          "{\"architectures\": [\"FalconForCausalLM\"], "
                          "\"model_type\": \"falcon\"}"),
        KVCAL_ERR_UNSUPPORTED,
        "kvcal runs LlamaForCausalLM, MistralForCausalLM, Ministral3ForCausalLM, "
        "Qwen2ForCausalLM, "
        "Qwen3ForCausalLM, SeedOssForCausalLM, SmolLM3ForCausalLM, GraniteForCausalLM, "
        "Qwen2MoeForCausalLM, "
        "Qwen3MoeForCausalLM, "
        "MixtralForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, "
        "Gemma3ForCausalLM, Glm4MoeForCausalLM, DeepseekV2ForCausalLM, "
        "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, DeepseekV32ForCausalLM, "
        "GlmMoeDsaForCausalLM, GptOssForCausalLM, Qwen3NextForCausalLM, "
        "Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, MiniMaxM2ForCausalLM, "
        "Llama4ForCausalLM, Glm4ForCausalLM, Ernie4_5_MoeForCausalLM, "
        "Exaone4ForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, "
        "HunYuanMoEV1ForCausalLM, HunYuanDenseV1ForCausalLM, "
        "GraniteMoeForCausalLM, "
        "Gemma3ForConditionalGeneration, "
        "Mistral3ForConditionalGeneration, Qwen3VLForConditionalGeneration, "
        "Qwen3VLMoeForConditionalGeneration, Qwen2_5_VLForConditionalGeneration, "
        "Qwen2VLForConditionalGeneration, Qwen3_5ForConditionalGeneration, "
        "Qwen3_5MoeForConditionalGeneration, Llama4ForConditionalGeneration, "
        "Glm4vForConditionalGeneration and Glm4vMoeForConditionalGeneration");
}

/* A wrapper whose text_config is another language model than the one kvcal
 * runs for it, and a checkpoint without the wrapper's language model: one
 * line each, naming what is wrong. */
static void model_open_names_what_a_multimodal_checkpoint_lacks(void)
{
    expect_open_error(
        edited_checkpoint("mistral3_mm_gqa_bf16",
                          "{\"text_config\": {\"model_type\": \"mistral4\", "
                          "\"num_hidden_layers\": 2, \"hidden_size\": 64, "
                          "\"num_attention_heads\": 4}}"),
        KVCAL_ERR_UNSUPPORTED,
        "Mistral3ForConditionalGeneration's text_config.model_type is 'mistral4'; "
        "kvcal runs its language model when it is 'mistral' (MistralForCausalLM) or "
        "'ministral3' (Ministral3ForCausalLM)");
    /* a causal LM's checkpoint under a wrapper's config */
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16",
                          "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], "
                          "\"model_type\": \"mistral3\", \"num_hidden_layers\": null, "
                          "\"text_config\": {\"model_type\": \"mistral\", "
                          "\"num_hidden_layers\": 2, \"hidden_size\": 64, "
                          "\"intermediate_size\": 80, \"num_attention_heads\": 4, "
                          "\"num_key_value_heads\": 1, \"vocab_size\": 128}, "
                          "\"vision_config\": {}}"),
        KVCAL_ERR_FORMAT,
        "holds neither model.language_model.embed_tokens.weight nor "
        "language_model.model.embed_tokens.weight");
    /* Qwen3-VL-MoE reads float weights alone, but a quantization config
     * of a KV-cache scheme alone (kvcal's checkpoint scales merged into
     * the model) opens */
    static const char kv_only[] =
        "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
        "\"format\": \"dense\", \"config_groups\": {}, \"ignore\": [], "
        "\"kv_cache_scheme\": {\"num_bits\": 8, \"type\": \"float\", "
        "\"strategy\": \"tensor\", \"symmetric\": true, \"dynamic\": false}}}";
    const char *const float_only[] = {"qwen3_vl_moe_stacked_e8_top3_bf16",
                                      "qwen3_next_gdn_moe_e8_top3_bf16"};
    for (size_t i = 0; i < 2; i++) {
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL(kvcal_model_open(edited_checkpoint(float_only[i], kv_only), &m),
                        KVCAL_OK);
        kvcal_model_close(m);
    }
    /* a wrapper's language model's fields at the top level */
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16",
                          "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], "
                          "\"model_type\": \"mistral3\"}"),
        KVCAL_ERR_UNSUPPORTED,
        "Mistral3ForConditionalGeneration with its language model's fields at the top "
        "level, not in text_config");
}

/* Hybrid linear-attention models (Qwen3-Next), an MLA config of a family
 * without MLA, a DeepSeek config without MLA's sizes, and the architectures
 * kvcal names as not supported yet: one line saying what is missing. */
static void model_open_says_what_mla_and_hybrid_models_lack(void)
{
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16",
                          "{\"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64}"),
        KVCAL_ERR_UNSUPPORTED,
        "MistralForCausalLM with MLA attention (kv_lora_rank 512, rope 64) is "
        "not supported: kvcal runs MLA for DeepseekV2ForCausalLM, "
        "DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM, DeepseekV32ForCausalLM and "
        "GlmMoeDsaForCausalLM");
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16",
                          "{\"architectures\": [\"DeepseekV3ForCausalLM\"], "
                          "\"model_type\": \"deepseek_v3\", "
                          "\"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64}"),
        KVCAL_ERR_FORMAT,
        "DeepseekV3ForCausalLM needs kv_lora_rank, qk_rope_head_dim, "
        "qk_nope_head_dim and v_head_dim");
    expect_open_error(
        edited_checkpoint(
            "mistral_mqa_fp16",
            "{\"layer_types\": [\"linear_attention\", \"full_attention\"]}"),
        KVCAL_ERR_UNSUPPORTED,
        "MistralForCausalLM is a hybrid model (1 of 2 layers attend and cache "
        "K and V, the others are linear_attention), which is not supported "
        "yet");
    /* no layer that caches: nothing to calibrate */
    expect_open_error(edited_checkpoint("qwen3_5_text_gdn_hybrid_bf16",
                                        "{\"layer_types\": [\"linear_attention\", "
                                        "\"linear_attention\", \"linear_attention\", "
                                        "\"linear_attention\"]}"),
                      KVCAL_ERR_FORMAT,
                      "every layer of this Qwen3_5ForCausalLM is linear_attention: no "
                      "layer caches K and V");
    /* a hybrid family's architecture under a model_type without the
     * delta-net's sizes */
    expect_open_error(edited_checkpoint("qwen3_next_gdn_moe_e8_top3_bf16",
                                        "{\"model_type\": \"qwen2_moe\"}"),
                      KVCAL_ERR_FORMAT,
                      "Qwen3NextForCausalLM's linear-attention layers need "
                      "linear_num_key_heads");
    /* the families that run linear attention run no other kind of layer */
    expect_open_error(
        edited_checkpoint("qwen3_5_text_gdn_hybrid_bf16",
                          "{\"layer_types\": [\"linear_attention\", \"full_attention\", "
                          "\"mamba\", \"full_attention\"]}"),
        KVCAL_ERR_UNSUPPORTED,
        "Qwen3_5ForCausalLM is a hybrid model (2 of 4 layers attend and cache K and V, "
        "the others are linear_attention, mamba), which is not supported yet");
    /* DeepSeek-V4 and Kimi K2.5's multimodal model: what kvcal lacks, not
     * the list of what it runs */
    static const struct {
        const char *architecture, *model_type, *lacks;
    } not_yet[] = {
        {"DeepseekV4ForCausalLM", "deepseek_v4",
         "DeepseekV4ForCausalLM is not supported yet: kvcal lacks DeepSeek-V4's "
         "attention"},
        {"Kimi_K25ForConditionalGeneration", "kimi_k25",
         "Kimi_K25ForConditionalGeneration is not supported yet: kvcal lacks the "
         "released experts' INT4 weights"},
        {"KimiK25ForConditionalGeneration", "kimi_k25",
         "KimiK25ForConditionalGeneration is not supported yet: kvcal lacks the "
         "released experts' INT4 weights"},
    };
    for (size_t i = 0; i < sizeof not_yet / sizeof not_yet[0]; i++) {
        char edit[256];
        snprintf(edit, sizeof edit,
                 "{\"architectures\": [\"%s\"], \"model_type\": \"%s\"}",
                 not_yet[i].architecture, not_yet[i].model_type);
        expect_open_error(edited_checkpoint("mistral_mqa_fp16", edit),
                          KVCAL_ERR_UNSUPPORTED, not_yet[i].lacks);
    }
}

/* The window of layer l of the model in dir, and its count of layers. */
static void layer_windows(const char *dir, int *windows, int n)
{
    kvcal_model_t *m = NULL;
    kvcal_status st = kvcal_model_open(dir, &m);
    if (st)
        fprintf(stderr, "\n%s\n", kvcal_last_error());
    CU_ASSERT_EQUAL_FATAL(st, KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL_FATAL(d->num_layers, n);
    for (int l = 0; l < n; l++)
        windows[l] = d->layer_window[l];
    kvcal_model_close(m);
}

/* Qwen2's use_sliding_window slides only the layers from max_window_layers
 * on (transformers' layer_types when config.json lists none; a list it has
 * decides): none of them, or a layer_types list of full layers, leaves the
 * golden values as they are; otherwise each layer gets the window its kind
 * says (the mix of both kinds is Gemma 3's golden test). */
static void model_open_gives_each_layer_the_window_of_its_kind(void)
{
    int w[2];
    check_model_against_golden(
        "qwen2_gqa_bias_bf16",
        edited_checkpoint("qwen2_gqa_bias_bf16",
                          "{\"use_sliding_window\": true, "
                          "\"sliding_window\": 8, \"layer_types\": null, "
                          "\"max_window_layers\": 2}"));
    check_model_against_golden(
        "qwen2_gqa_bias_bf16",
        edited_checkpoint("qwen2_gqa_bias_bf16",
                          "{\"use_sliding_window\": true, "
                          "\"sliding_window\": 8, "
                          "\"max_window_layers\": 0, \"layer_types\": "
                          "[\"full_attention\", \"full_attention\"]}"));
    layer_windows(
        edited_checkpoint("qwen2_gqa_bias_bf16",
                          "{\"use_sliding_window\": true, \"layer_types\": null, "
                          "\"sliding_window\": 8, \"max_window_layers\": 1}"),
        w, 2);
    CU_ASSERT(w[0] == 0 && w[1] == 8);
    layer_windows(edited_checkpoint("mistral_mqa_fp16",
                                    "{\"sliding_window\": 8, \"layer_types\": "
                                    "[\"sliding_attention\", \"full_attention\"]}"),
                  w, 2);
    CU_ASSERT(w[0] == 8 && w[1] == 0);
    layer_windows(edited_checkpoint("mistral_mqa_fp16", "{\"sliding_window\": 8}"), w, 2);
    CU_ASSERT(w[0] == 8 && w[1] == 8);
}

/* The warm-up's layers (calib/executor.c): each kind once, from layer 0. */
static void model_next_layer_kind_finds_each_kind_once(void)
{
    static const struct {
        const char *name;
        int kinds[3]; /* from layer 0, then -1s */
    } cases[] = {
        {"llama3_gqa_hd48_bf16", {0, -1, -1}},
        {"deepseek_v2_mla_grouped_softmax_bf16", {0, 1, -1}}, /* dense, then MoE */
        {"qwen3_moe_dense_layers_e4_top2_bf16", {0, 1, -1}},  /* 0, 2 dense; 1, 3 MoE */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/golden/%s", cases[i].name);
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
        const kvcal_model_desc *d = kvcal_model_describe(m);
        int got[3] = {0, -1, -1}, n = 1;
        for (int l = kvcal_model_next_layer_kind(d, 0); l >= 0 && n < 3;
             l = kvcal_model_next_layer_kind(d, l))
            got[n++] = l;
        for (int k = 0; k < 3; k++)
            CU_ASSERT_EQUAL(got[k], cases[i].kinds[k]);
        kvcal_model_close(m);
    }
}

/* A mixture of experts: each expert's tensors are checked by name, and so
 * are the dense MLP's of a layer mlp_only_layers names (an index past the
 * model is refused). */
static void model_open_names_missing_expert_and_dense_mlp_tensors(void)
{
    expect_open_error(edited_checkpoint("qwen3_moe_e8_top3_norm_bf16",
                                        "{\"moe_intermediate_size\": 41}"),
                      KVCAL_ERR_FORMAT,
                      "tensor model.layers.0.mlp.experts.0.gate_proj.weight has shape "
                      "[40, 48], config.json implies [41, 48]");
    expect_open_error(
        edited_checkpoint("mixtral_e4_top2_swa16_bf16", "{\"num_local_experts\": 5}"),
        KVCAL_ERR_FORMAT,
        "tensor model.layers.0.block_sparse_moe.gate.weight has shape [4, 64], "
        "config.json implies [5, 64]");
    expect_open_error(
        edited_checkpoint("qwen3_moe_e8_top3_norm_bf16", "{\"mlp_only_layers\": [1]}"),
        KVCAL_ERR_FORMAT, "tensor model.layers.1.mlp.gate_proj.weight is missing");
    expect_open_error(
        edited_checkpoint("qwen3_moe_e8_top3_norm_bf16", "{\"mlp_only_layers\": [2]}"),
        KVCAL_ERR_FORMAT,
        "mlp_only_layers[0]\": expected a layer index in [0, 2), found 2; fix the value");
    expect_open_error(edited_checkpoint("qwen2_moe_shared_e6_top2_bf16",
                                        "{\"num_experts_per_tok\": 7}"),
                      KVCAL_ERR_FORMAT, "num_experts_per_tok in 1..num_experts");
    /* GLM's (and DeepSeek-V3's) group score sums a group's two best experts:
       a group of one is refused, as the engines fail on it */
    expect_open_error(edited_checkpoint("glm4_moe_dense1_sigmoid_e8_top3_bf16",
                                        "{\"n_group\": 8, \"topk_group\": 8}"),
                      KVCAL_ERR_FORMAT,
                      "with n_group 8: each group holds 1 expert, but a group's score "
                      "here is the sum of its two best experts");
}

/* A bad entry of a config's list is named by its index (a layer kind kvcal
 * does not know too, where it would otherwise run as full attention), and an
 * MLA model's rotated part by its own field. */
static void model_open_names_the_bad_entry_of_a_config_list(void)
{
    expect_open_error(edited_checkpoint("phi3_longrope_partial_swa16_bf16",
                                        "{\"rope_parameters\": {\"rope_type\": "
                                        "\"longrope\", \"partial_rotary_factor\": 0.5, "
                                        "\"original_max_position_embeddings\": 20, "
                                        "\"short_factor\": [1, 1, 1, 1], "
                                        "\"long_factor\": [1.2, 2.5, null, 11]}}"),
                      KVCAL_ERR_FORMAT,
                      "rope_parameters.long_factor[2]\": expected a number > 0 that a "
                      "float holds, found null; fix the value");
    expect_open_error(edited_checkpoint("phi3_longrope_partial_swa16_bf16",
                                        "{\"rope_parameters\": {\"rope_type\": "
                                        "\"longrope\", \"partial_rotary_factor\": 0.5, "
                                        "\"original_max_position_embeddings\": 20, "
                                        "\"short_factor\": [1, 1, 1, 1], "
                                        "\"long_factor\": [1.2, 2.5, 5, 1e39]}}"),
                      KVCAL_ERR_FORMAT,
                      "rope_parameters.long_factor[3]\": expected a number > 0 that a "
                      "float holds, found 9.99");
    expect_open_error(edited_checkpoint("qwen3_moe_e8_top3_norm_bf16",
                                        "{\"mlp_only_layers\": [0, \"1\"]}"),
                      KVCAL_ERR_FORMAT,
                      "mlp_only_layers[1]\": expected a layer index in [0, 2), found a "
                      "string \"1\"");
    expect_open_error(edited_checkpoint("deepseek_v3_mla_qlora_grouped_sigmoid_bf16",
                                        "{\"qk_rope_head_dim\": 3}"),
                      KVCAL_ERR_FORMAT,
                      "qk_rope_head_dim 3: the rotated part of an MLA head must be a "
                      "positive even number");
    expect_open_error(
        edited_checkpoint("glm4_moe_lite_mla_qlora_sigmoid_bf16",
                          "{\"rope_parameters\": {\"rope_type\": \"default\", "
                          "\"rope_theta\": 1e6, \"partial_rotary_factor\": 0.5}}"),
        KVCAL_ERR_UNSUPPORTED,
        "Glm4MoeLiteForCausalLM with partial_rotary_factor 0.5 is not "
        "supported");
    expect_open_error(edited_checkpoint("glm4_moe_lite_mla_qlora_sigmoid_bf16",
                                        "{\"first_k_dense_replace\": 1}"),
                      KVCAL_ERR_UNSUPPORTED,
                      "layer 1 is dense in transformers' plan (mlp_layer_types) but "
                      "sparse in vLLM's and sglang's (first_k_dense_replace 1)");
    expect_open_error(
        edited_checkpoint("gpt_oss_sinks_swa8_e8_top3_bf16",
                          "{\"layer_types\": [\"sliding_attention\", "
                          "\"global_attention\"]}"),
        KVCAL_ERR_UNSUPPORTED,
        "layer_types[1] is 'global_attention', a kind of layer kvcal does "
        "not know; it runs full_attention and sliding_attention layers (fix");
    expect_open_error(
        edited_checkpoint("qwen3_next_gdn_moe_e8_top3_bf16",
                          "{\"layer_types\": [\"linear_attention\", "
                          "\"full_attention\", \"linear_attention\", "
                          "\"global_attention\"]}"),
        KVCAL_ERR_UNSUPPORTED,
        "layer_types[3] is 'global_attention', a kind of layer kvcal does "
        "not know; it runs full_attention and sliding_attention layers, and "
        "linear_attention ones between them in this family (fix");
}

/* An MLA softmax scale that yarn's mscale_all_dim makes larger than a float
 * holds (each field a float holds alone) is refused naming the field, where
 * the attention would otherwise turn to NaN. */
static void model_open_refuses_an_mla_softmax_scale_a_float_does_not_hold(void)
{
    expect_open_error(
        edited_checkpoint(
            "glm4_moe_lite_mla_qlora_sigmoid_bf16",
            "{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
            "\"original_max_position_embeddings\": 64, \"mscale\": 1, "
            "\"mscale_all_dim\": 1e38, \"rope_theta\": 1e6}}"),
        KVCAL_ERR_FORMAT,
        "Glm4MoeLiteForCausalLM's softmax scale, (qk_nope_head_dim + qk_rope_head_dim)"
        "^-0.5 times yarn's mscale(factor, mscale_all_dim)^2, is 3.03865e+73, which a "
        "float does not hold as a number > 0; fix rope_parameters.mscale_all_dim");
}

/* gpt-oss's SwiGLU values from the config are run, and a calibration that
 * runs values other than the ones vLLM's experts kernel has fixed (7 and
 * 1.702) says so; the released values say nothing. */
static void calibrate_notes_gpt_oss_swiglu_values_vllm_does_not_read(void)
{
    char ids[1024], args[4096];
    snprintf(ids, sizeof ids, "%s", kvcal_test_path("swiglu_ids.jsonl"));
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_ids(ids, 2, 16, 128, 7), 0);
    const char *dirs[2] = {"tests/fixtures/golden/gpt_oss_sinks_swa8_e8_top3_bf16", NULL};
    char edited[600];
    snprintf(
        edited, sizeof edited, "%s",
        edited_checkpoint("gpt_oss_sinks_swa8_e8_top3_bf16", "{\"swiglu_limit\": 5}"));
    dirs[1] = edited;
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args,
                 "calibrate --model %s --dataset %s --num-samples 2 --seq-len 16 "
                 "--batch 2 --out %s",
                 dirs[i], ids, kvcal_test_path("swiglu_scales.json"));
        CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
        char *err = kvcal_test_kvcal_stderr();
        CU_ASSERT_PTR_NOT_NULL_FATAL(err);
        const char *note =
            strstr(err, "kvcal calibrate: note: config.json's swiglu_limit");
        CU_ASSERT(i ? note != NULL : note == NULL);
        if (i)
            CU_ASSERT(kvcal_test_kvcal_stderr_has(
                "swiglu_limit 5 and swiglu_alpha 1.702 are what kvcal runs"));
        free(err);
    }
}

/* gpt-oss's experts: a shape off the config names the tensor as stored
 * ((in, out) in bf16; the MXFP4 blocks' scales, (out, in / 32)), and a
 * quantization other than MXFP4 experts is refused naming it. */
static void model_open_names_the_gpt_oss_expert_tensor_off_the_config(void)
{
    expect_open_error(
        edited_checkpoint("gpt_oss_sinks_swa8_e8_top3_bf16",
                          "{\"intermediate_size\": 40}"),
        KVCAL_ERR_FORMAT,
        "tensor model.layers.0.mlp.experts.gate_up_proj has shape [8, 64, 64], "
        "config.json implies [8, 64, 80]");
    expect_open_error(edited_checkpoint("gpt_oss_hd64_swa16_e4_top2_mxfp4",
                                        "{\"intermediate_size\": 96}"),
                      KVCAL_ERR_FORMAT,
                      "tensor model.layers.0.mlp.experts.gate_up_proj_scales has shape "
                      "[4, 128, 2], config.json implies [4, 192, 2]");
    expect_open_error(edited_checkpoint("gpt_oss_hd64_swa16_e4_top2_mxfp4",
                                        "{\"quantization_config\": {\"quant_method\": "
                                        "\"fp8\"}}"),
                      KVCAL_ERR_UNSUPPORTED,
                      "quantized with quant_method 'fp8' is not supported");
}

static void model_open_names_missing_tensor(void)
{
    expect_open_error(edited_checkpoint("mistral_mqa_fp16", "{\"num_hidden_layers\": 3}"),
                      KVCAL_ERR_FORMAT,
                      "model.layers.2.input_layernorm.weight is missing");
}

static void model_open_names_tensor_with_wrong_shape(void)
{
    expect_open_error(
        edited_checkpoint("mistral_mqa_fp16", "{\"intermediate_size\": 81}"),
        KVCAL_ERR_FORMAT, "model.layers.0.mlp.gate_proj.weight has shape [80, 64]");
}

static void model_open_refuses_a_bias_the_config_does_not_declare(void)
{
    expect_open_error(edited_checkpoint("qwen2_gqa_bias_bf16",
                                        "{\"architectures\": [\"LlamaForCausalLM\"], "
                                        "\"model_type\": \"llama\"}"),
                      KVCAL_ERR_UNSUPPORTED,
                      "model.layers.0.self_attn.q_proj.bias is in the");
}

static void model_open_names_yarn_factor_below_one(void)
{
    expect_open_error(
        edited_checkpoint("qwen2_yarn_bf16",
                          "{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 0.5}}"),
        KVCAL_ERR_FORMAT, "field \"rope_scaling.factor\" is 0.5");
}

/* MiniMax-M2's routing fields that transformers' class ignores while vLLM
 * follows them, and a rotary_dim no head holds, are named; the CUDA runner
 * takes the model. */
static void model_open_names_minimax_m2_fields_the_engines_read_apart(void)
{
    expect_open_error(edited_checkpoint(MINIMAX_M2, "{\"scoring_func\": \"softmax\"}"),
                      KVCAL_ERR_UNSUPPORTED, "field \"scoring_func\" is \"softmax\"");
    expect_open_error(edited_checkpoint(MINIMAX_M2, "{\"use_routing_bias\": false}"),
                      KVCAL_ERR_UNSUPPORTED, "field \"use_routing_bias\" is false");
    expect_open_error(edited_checkpoint(MINIMAX_M2, "{\"rotary_dim\": 7}"),
                      KVCAL_ERR_FORMAT, "field \"rotary_dim\" is 7");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("tests/fixtures/golden/" MINIMAX_M2, &m),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_model_describe(m)->rot_dim, 8);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(kvcal_model_describe(m)), KVCAL_OK);
    kvcal_model_close(m);
}

/* Llama 4 with attention_bias, which vLLM and sglang build without, is
 * refused, as a checkpoint holding biases its config does not state; the
 * CUDA runner takes its bf16 checkpoints and its FP8 ones (experts
 * weighted on their input, then quantized: test_cuda_backend.c). */
static void model_open_names_llama4_fields_the_engines_read_apart(void)
{
    expect_open_error(edited_checkpoint(LLAMA4, "{\"attention_bias\": true}"),
                      KVCAL_ERR_UNSUPPORTED, "with attention_bias true");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("tests/fixtures/golden/" LLAMA4, &m),
                          KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(kvcal_model_layer_rope(d, 2), 0);
    CU_ASSERT_EQUAL(kvcal_model_layer_chunk(d, 2), 0);
    CU_ASSERT_EQUAL(kvcal_model_layer_chunk(d, 3), 8);
    CU_ASSERT_EQUAL(d->layer_dense[0] + d->layer_dense[2], 2);
    CU_ASSERT_EQUAL(d->layer_dense[1] + d->layer_dense[3], 0);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(d), KVCAL_OK);
    kvcal_model_close(m);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/fp8_llama4_ct_channel_token", &m),
        KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(kvcal_model_describe(m)), KVCAL_OK);
    kvcal_model_close(m);
    /* FP8 experts in the stacked tensors (ModelOpt's) are not read; those
     * with a tensor per expert are (fp8_llama4_ct_channel_token) */
    expect_open_error("tests/fixtures/golden/fp8_llama4_stacked_experts",
                      KVCAL_ERR_UNSUPPORTED,
                      "feed_forward.experts.down_proj is F8_E4M3, quant_method modelopt) "
                      "is not supported yet; kvcal reads its bf16 checkpoint and its FP8 "
                      "ones with a tensor per expert");
}

/* EXAONE 4's NoPE layers are its full-attention ones where others slide,
 * none where none slides; a string sliding_window_pattern without
 * layer_types (transformers derives none from it) is refused; the CUDA
 * runner takes the model. */
static void model_open_reads_exaone4_layer_kinds(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("tests/fixtures/golden/" EXAONE4, &m),
                          KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    for (int l = 0; l < 4; l++) {
        CU_ASSERT_EQUAL(kvcal_model_layer_rope(d, l), l % 2 == 0);
        CU_ASSERT_EQUAL(d->layer_window[l], l % 2 == 0 ? 8 : 0);
    }
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(d), KVCAL_OK);
    kvcal_model_close(m);
    const char *dir = edited_checkpoint(
        EXAONE4, "{\"layer_types\": [\"full_attention\", \"full_attention\", "
                 "\"full_attention\", \"full_attention\"]}");
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
    for (int l = 0; l < 4; l++)
        CU_ASSERT_EQUAL(kvcal_model_layer_rope(kvcal_model_describe(m), l), 1);
    kvcal_model_close(m);
    expect_open_error(edited_checkpoint(EXAONE4, "{\"layer_types\": null, "
                                                 "\"sliding_window_pattern\": \"LLLG\"}"),
                      KVCAL_ERR_FORMAT, "\"layer_types\" is missing");
}

/* ERNIE 4.5's fields transformers and vLLM default or read apart are
 * refused; the CUDA runner takes the model. */
static void model_open_names_ernie45_fields_the_engines_read_apart(void)
{
    expect_open_error(edited_checkpoint(ERNIE45, "{\"moe_layer_start_index\": null}"),
                      KVCAL_ERR_FORMAT, "\"moe_layer_start_index\" is missing");
    expect_open_error(edited_checkpoint(ERNIE45, "{\"use_bias\": true}"),
                      KVCAL_ERR_UNSUPPORTED, "\"use_bias\" is true");
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("tests/fixtures/golden/" ERNIE45, &m),
                          KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(kvcal_model_describe(m)), KVCAL_OK);
    kvcal_model_close(m);
}

/* The cuda backend takes yarn (its kernels read the host's inv_freq and
 * scale cos and sin by the attention factor): the check made before any
 * device work passes, so this runs without a GPU; tests/test_cuda_backend.c
 * runs the model against transformers on one. */
static void cuda_runner_accepts_yarn_rope(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("tests/fixtures/golden/qwen2_yarn_bf16", &m),
                          KVCAL_OK);
    CU_ASSERT(kvcal_model_describe(m)->rope_attention_factor > 1.0f);
    CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(kvcal_model_describe(m)), KVCAL_OK);
    kvcal_model_close(m);
}

static void model_open_rejects_truncated_llama2c_file(void)
{
    size_t len = 0;
    char *buf = kvcal_test_read_file("models/stories260K/stories260K.bin", &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    const char *path = kvcal_test_path("truncated.bin");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, buf, len - 4), 0);
    expect_open_error(path, KVCAL_ERR_FORMAT, "truncated");
    free(buf);
}

/* A vocab_size of INT32_MIN (negated for the shared-classifier flag) is a
 * header that is not llama2.c's, not a negation that overflows. */
static void model_open_rejects_llama2c_header_with_int_min_vocab(void)
{
    const int32_t h[7] = {64, 172, 5, 8, 4, INT32_MIN, 512};
    const char *path = kvcal_test_path("int_min_vocab.bin");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, h, sizeof h), 0);
    expect_open_error(path, KVCAL_ERR_FORMAT, "not a model");
}

// --- chunks: layer by layer or batch by batch ---------------------------------

/* Calibrates on the cpu backend with chunks of up to `chunk` batches (0:
 * all) into *stats (caller destroys). */
static void calibrate_chunked(kvcal_model_t *m, int n, int len, int batch, int chunk,
                              kvcal_stats_t **stats)
{
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.max_chunk_batches = chunk;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, n, len, batch, stats, NULL),
                          KVCAL_OK);
}

/* Every statistic (absmax, histograms, tokens, the per-head and per-layer
 * moving averages, the batch count, the routing counts) of a run layer by
 * layer equals the run batch by batch, and a run in chunks of two batches,
 * on stories260K and golden models (dense, MoE, a sliding window), for
 * several batch counts (the last batch short). */
static void runner_layer_by_layer_equals_batch_by_batch(void)
{
    static const char *const models[] = {
        "models/stories260K/stories260K.bin",
        "tests/fixtures/golden/qwen3_gqa_hd80_qknorm_bf16",
        "tests/fixtures/golden/qwen2_moe_shared_e6_top2_bf16",
        "tests/fixtures/golden/mixtral_e4_top2_swa16_bf16"};
    static const int shapes[][2] = {{1, 1}, {7, 2}, {10, 3}};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(models[mi], &m), KVCAL_OK);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            kvcal_stats_t *by_batch = NULL, *by_layer = NULL, *by_two = NULL;
            calibrate_chunked(m, shapes[i][0], 24, shapes[i][1], 1, &by_batch);
            calibrate_chunked(m, shapes[i][0], 24, shapes[i][1], 0, &by_layer);
            calibrate_chunked(m, shapes[i][0], 24, shapes[i][1], 2, &by_two);
            CU_ASSERT(by_batch->batches ==
                      (shapes[i][0] + shapes[i][1] - 1) / shapes[i][1]);
            CU_ASSERT(kvcal_test_stats_equal(by_batch, by_layer));
            CU_ASSERT(kvcal_test_stats_equal(by_batch, by_two));
            kvcal_stats_destroy(by_batch);
            kvcal_stats_destroy(by_layer);
            kvcal_stats_destroy(by_two);
        }
        kvcal_model_close(m);
    }
}

/* An evaluation of model `path` in chunks of one batch and of every batch:
 * the same per-token results (NLL, and against the baseline the KL
 * divergence and top-1 agreement) and error sums of its simulated cache,
 * for the dynamic and first-batch modes. */
static void eval_chunks_agree(const char *path)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &m), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    enum { N = 7, LEN = 20, BATCH = 2, TOK = N * LEN };
    int32_t ids[N * LEN], lengths[N];
    for (int i = 0; i < N * LEN; i++)
        ids[i] = (i * 13 + 7) % d->vocab_size;
    for (int i = 0; i < N; i++)
        lengths[i] = LEN - i;
    static const kvcal_kv_sim_mode modes[] = {KVCAL_KV_SIM_DYNAMIC,
                                              KVCAL_KV_SIM_FIRST_BATCH};
    static float nll[2][3][TOK], kld[2][2][TOK], top[2][2][TOK];
    kvcal_eval_layer_sums *sums[2][2];
    const kvcal_exec_samples s = {
        .ids = ids, .lengths = lengths, .num_samples = N, .seq_len = LEN, .batch = BATCH};
    const int64_t count = kvcal_exec_predicted_tokens(&s);
    CU_ASSERT_EQUAL_FATAL(count, N * (LEN - 1) - N * (N - 1) / 2);
    for (int c = 0; c < 2; c++) {
        kvcal_exec_options o;
        memset(&o, 0, sizeof o);
        o.backend.max_batch = BATCH;
        o.backend.max_seq_len = LEN;
        o.max_chunk_batches = c ? 0 : 1;
        kvcal_exec_t *x = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
        const kvcal_kv_sim_config exact = {.mode = KVCAL_KV_SIM_EXACT};
        const kvcal_eval_tokens keep = {nll[c][0], 1, NULL, NULL};
        CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &exact, &keep, NULL), KVCAL_OK);
        for (int mi = 0; mi < 2; mi++) {
            sums[c][mi] = calloc((size_t)d->num_layers, sizeof *sums[c][mi]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(sums[c][mi]);
            const kvcal_kv_sim_config cfg = {.mode = modes[mi]};
            const kvcal_eval_tokens cmp = {nll[c][mi + 1], 0, kld[c][mi], top[c][mi]};
            CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &cfg, &cmp, sums[c][mi]), KVCAL_OK);
        }
        kvcal_exec_destroy(x);
    }
    const size_t bytes = (size_t)count * sizeof(float);
    CU_ASSERT(!memcmp(nll[0], nll[1], sizeof nll[0]));
    CU_ASSERT(!memcmp(kld[0], kld[1], sizeof kld[0]));
    CU_ASSERT(!memcmp(top[0], top[1], sizeof top[0]));
    for (int mi = 0; mi < 2; mi++) {
        CU_ASSERT(!memcmp(sums[0][mi], sums[1][mi],
                          (size_t)d->num_layers * sizeof *sums[0][mi]));
        /* an FP8 cache moves the distributions a little, not the NLL's order */
        double mean = 0.0, agree = 0.0;
        for (int64_t i = 0; i < count; i++)
            mean += kld[0][mi][i], agree += top[0][mi][i];
        CU_ASSERT(mean / count > 0.0 && mean / count < 0.05);
        CU_ASSERT(agree / count > 0.8);
        CU_ASSERT(memcmp(nll[0][0], nll[0][mi + 1], bytes) != 0);
        free(sums[0][mi]);
        free(sums[1][mi]);
    }
    kvcal_model_close(m);
}

/* Comparing needs the baseline's distributions of the same samples: none
 * kept, or kept for other samples, is an error that says so; a layer mask
 * simulates only the layers it names. */
static void eval_compare_without_a_reference_of_the_same_tokens_fails(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("models/stories260K/stories260K.bin", &m),
                          KVCAL_OK);
    enum { N = 2, LEN = 9 };
    int32_t ids[N * LEN], lengths[N] = {LEN, LEN - 3};
    for (int i = 0; i < N * LEN; i++)
        ids[i] = (i * 5 + 1) % 512;
    float nll[N * LEN], kld[N * LEN], top[N * LEN];
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.backend.max_batch = N;
    o.backend.max_seq_len = LEN;
    kvcal_exec_t *x = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_exec_create(m, &o, &x), KVCAL_OK);
    kvcal_exec_samples s = {
        .ids = ids, .lengths = lengths, .num_samples = N, .seq_len = LEN, .batch = N};
    const kvcal_kv_sim_config dyn = {.mode = KVCAL_KV_SIM_DYNAMIC};
    const kvcal_kv_sim_config exact = {.mode = KVCAL_KV_SIM_EXACT};
    const kvcal_eval_tokens cmp = {nll, 0, kld, top}, keep = {nll, 1, NULL, NULL};
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &dyn, &cmp, NULL), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("keep the baseline"));
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &exact, &keep, NULL), KVCAL_OK);
    float base[N * LEN];
    memcpy(base, nll, sizeof base);
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &dyn, &cmp, NULL), KVCAL_OK);
    /* a simulation of no layer is the baseline: the same NLL bit for bit, a
     * KL divergence of exactly 0, the same top token everywhere, no sums */
    const unsigned char none[5] = {0, 0, 0, 0, 0};
    const kvcal_kv_sim_config dyn_none = {.mode = KVCAL_KV_SIM_DYNAMIC, .layers = none};
    kvcal_eval_layer_sums sums[5];
    memset(sums, 0, sizeof sums);
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &dyn_none, &cmp, sums), KVCAL_OK);
    int differ[3] = {0, 0, 0};
    for (int i = 0; i < 13; i++)
        differ[0] += nll[i] != base[i], differ[1] += kld[i] != 0.0f,
            differ[2] += top[i] != 1.0f;
    CU_ASSERT(!differ[0] && !differ[1] && !differ[2]);
    if (differ[0] || differ[1] || differ[2])
        printf("\n  nll %d, kld %d, top %d of 13 tokens differ", differ[0], differ[1],
               differ[2]);
    CU_ASSERT_EQUAL(sums[2].kv[0].n + sums[2].att.n, 0);
    /* one layer simulated: its sums alone, and the distributions move */
    const unsigned char third[5] = {0, 0, 1, 0, 0};
    const kvcal_kv_sim_config dyn_third = {.mode = KVCAL_KV_SIM_DYNAMIC, .layers = third};
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &dyn_third, &cmp, sums), KVCAL_OK);
    CU_ASSERT(sums[2].kv[0].n > 0 && sums[2].att.n > 0);
    CU_ASSERT_EQUAL(sums[1].kv[0].n + sums[3].att.n, 0);
    double moved = 0.0;
    for (int i = 0; i < 13; i++)
        moved += kld[i];
    CU_ASSERT(moved > 0.0);
    s.num_samples = 1;
    CU_ASSERT_EQUAL(kvcal_exec_eval(x, &s, &dyn, &cmp, NULL), KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("reference of 13"));
    kvcal_exec_destroy(x);
    kvcal_model_close(m);
}

/* An evaluation's perplexity sums and its simulated cache's error sums do
 * not depend on the chunks either (first-batch scales included), on
 * stories260K, a mixture of experts and a sliding window shorter than the
 * samples. */
static void eval_layer_by_layer_equals_batch_by_batch(void)
{
    static const char *const models[] = {
        "models/stories260K/stories260K.bin",
        "tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16",
        "tests/fixtures/golden/mixtral_e4_top2_swa16_bf16"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        eval_chunks_agree(models[k]);
}

// --- FP8 checkpoints -----------------------------------------------------------

/* Every FP8 scheme kvcal reads (tests/make_fp8_checkpoints.py: compressed-
 * tensors, the fp8 method, ModelOpt; per-tensor, per-channel and block
 * weights; static, per-token and per-group activations) against the served
 * model in float64: vLLM's requantized shards, its activation
 * quantization, the dequantized operands multiplied. */
static void runner_matches_vllm_fp8_semantics_on_every_scheme(void)
{
    for (size_t i = 0; i < KVCAL_TEST_FP8_FIXTURES; i++)
        check_against_golden(kvcal_test_fp8_fixtures[i]);
}

/* Qwen3-Next's and Qwen3.5-MoE's FP8 checkpoints: the projections kvcal
 * regroups (the gated q_proj's query and gate halves, Qwen3-Next's
 * in_proj_qkvz by key head) dequantized through the grouping, block-wise
 * and per channel; per tensor, the gated q_proj's gate requantized with
 * k_proj and v_proj to their largest scale, Qwen3.5's in_proj_qkv and
 * in_proj_z so too, as vLLM serves them. The CUDA runner takes them (its
 * loader copies the FP8 rows through the grouping: test_cuda_backend.c). */
static void runner_matches_vllm_fp8_semantics_on_hybrid_models(void)
{
    for (size_t i = 0; i < KVCAL_TEST_FP8_HYBRID_FIXTURES; i++) {
        check_against_golden(kvcal_test_fp8_hybrid_fixtures[i]);
        kvcal_model_t *m = NULL;
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/golden/%s",
                 kvcal_test_fp8_hybrid_fixtures[i]);
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_backend_cuda_check_model(kvcal_model_describe(m)),
                        KVCAL_OK);
        kvcal_model_close(m);
    }
}

/* MiniMax-M2's released FP8 format: the fp8 method's blocks, q/k/v fused
 * (the query's whole blocks first), the experts' w1 / w3 / w2, the router
 * and its correction bias in modules_to_not_convert. */
/* Llama 4 as llm-compressor writes its FP8 checkpoints (an MLP per
 * expert, per-channel weights, per-token activations): the experts' inputs
 * scaled by their router scores and then quantized, as vLLM's fused MoE
 * with apply_router_weight_on_input; the dense layers' and the shared
 * expert's MLPs FP8 too. */
static void runner_matches_vllm_fp8_semantics_on_llama4_named_experts(void)
{
    check_against_golden("fp8_llama4_ct_channel_token");
}

static void runner_matches_vllm_fp8_semantics_on_minimax_m2(void)
{
    check_against_golden("fp8_minimax_m2_fp8_block");
}

/* IBM Granite's dense layers (its four multipliers) as llm-compressor's
 * FP8_DYNAMIC writes them: per-channel weights, per-token activations. */
static void runner_matches_vllm_fp8_semantics_on_granite(void)
{
    check_against_golden("fp8_granite_ct_channel_token");
}

/* The scheme of each logical weight, as the config and the ignore list say. */
static void model_open_describes_fp8_schemes(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/fp8_qwen3_fp8_block", &m), KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_QKV].w, KVCAL_FP8W_BLOCK);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_QKV].block_n, 64);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_DOWN].a, KVCAL_FP8A_GROUP);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_DOWN].group, 64);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_ATTN_NORM].w, KVCAL_FP8W_NONE);
    CU_ASSERT_STRING_EQUAL(d->weight_dtype, "F8_E4M3");
    CU_ASSERT_STRING_EQUAL(d->weight_scheme, "fp8: FP8 e4m3 weights block 64x64, "
                                             "activations dynamic per-token group of 64");
    kvcal_model_close(m);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/fp8_llama_ct_tensor_static", &m),
        KVCAL_OK);
    d = kvcal_model_describe(m);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_QKV].a, KVCAL_FP8A_STATIC);
    CU_ASSERT_EQUAL(d->fp8[KVCAL_W_DOWN].w,
                    KVCAL_FP8W_NONE); /* ignore "re:...down_proj$" */
    CU_ASSERT_STRING_EQUAL(d->weight_scheme,
                           "compressed-tensors: FP8 e4m3 weights per-tensor, activations "
                           "static per-tensor; unquantized: mlp.down_proj");
    kvcal_model_close(m);
}

/* q, k and v of a compressed-tensors per-tensor layer served at the largest
 * of their scales: the loaded weight is e4m3(kvcal_fp8_requant(b, s, max))
 * times max, and the static input scale the largest of the three. */
static void model_serves_fused_per_tensor_shards_at_their_largest_scale(void)
{
    const char *dir = "tests/fixtures/golden/fp8_llama_ct_tensor_static";
    kvcal_model_t *m = NULL;
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(
        kvcal_safetensors_open("tests/fixtures/golden/fp8_llama_ct_tensor_static/"
                               "model.safetensors",
                               &st),
        KVCAL_OK);
    const kvcal_model_desc *d = kvcal_model_describe(m);
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
    float s[3], in[3], smax = 0, inmax = 0;
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.1.self_attn.%s.weight_scale", proj[i]);
        CU_ASSERT_EQUAL_FATAL(
            kvcal_tensor_to_f32(kvcal_safetensors_find(st, name), &s[i]), KVCAL_OK);
        snprintf(name, sizeof name, "model.layers.1.self_attn.%s.input_scale", proj[i]);
        CU_ASSERT_EQUAL_FATAL(
            kvcal_tensor_to_f32(kvcal_safetensors_find(st, name), &in[i]), KVCAL_OK);
        smax = s[i] > smax ? s[i] : smax;
        inmax = in[i] > inmax ? in[i] : inmax;
    }
    CU_ASSERT(s[0] != s[1] && s[1] != s[2]); /* the fixture's shards differ */
    kvcal_layer_weights w;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_load_layer(m, 1, &w), KVCAL_OK);
    CU_ASSERT_EQUAL(w.input_scale[KVCAL_W_QKV], inmax);
    int64_t bad = 0, moved = 0, row = 0;
    for (int i = 0; i < 3; i++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.1.self_attn.%s.weight", proj[i]);
        const kvcal_tensor_info *t = kvcal_safetensors_find(st, name);
        for (int64_t j = 0; j < t->numel; j++) {
            const uint8_t b = ((const uint8_t *)t->data)[j];
            const uint8_t served = kvcal_fp8_requant(b, s[i], smax);
            moved += served != b;
            bad += w.w[KVCAL_W_QKV][row + j] != kvcal_fp8_e4m3_to_float(served) * smax;
        }
        row += t->numel;
    }
    CU_ASSERT_EQUAL(row, (int64_t)(d->num_heads + 2 * d->num_kv_heads) * d->head_dim *
                             d->hidden_size);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(moved > 0);
    kvcal_safetensors_close(st);
    kvcal_model_close(m);
}

#define FP8_CT_CONFIG(strategy, extra)                                                   \
    "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "              \
    "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": "         \
    "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"" strategy "\"" extra "}, "  \
    "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "       \
    "\"token\", \"dynamic\": true}}}}}"

/* Checkpoints that do not match their config, and FP8 weights kvcal does
 * not run: one line naming the tensor. */
static void model_open_names_fp8_tensors_its_config_does_not_explain(void)
{
    expect_open_error(
        edited_checkpoint("fp8_qwen3_fp8_block", "{\"quantization_config\": null}"),
        KVCAL_ERR_UNSUPPORTED,
        "model.layers.0.self_attn.q_proj.weight has dtype F8_E4M3 but config.json has "
        "no quantization_config");
    expect_open_error(
        edited_checkpoint("fp8_qwen3_fp8_block",
                          "{\"quantization_config\": {\"quant_method\": "
                          "\"fp8\", \"activation_scheme\": \"dynamic\", "
                          "\"weight_block_size\": [64, 64], "
                          "\"ignored_layers\": "
                          "[\"model.layers.1.mlp.up_proj\"]}}"),
        KVCAL_ERR_FORMAT,
        "model.layers.1.mlp.up_proj.weight has dtype F8_E4M3 but the fp8 config "
        "leaves model.layers.1.mlp.up_proj unquantized");
    expect_open_error(
        edited_checkpoint("fp8_qwen3_fp8_block",
                          FP8_CT_CONFIG("block", ", \"block_structure\": [64, 64]")),
        KVCAL_ERR_FORMAT, "model.layers.0.self_attn.q_proj.weight_scale is missing");
    expect_open_error(
        edited_checkpoint("fp8_qwen3_ct_channel_token", FP8_CT_CONFIG("tensor", "")),
        KVCAL_ERR_FORMAT,
        "scale tensor model.layers.0.self_attn.q_proj.weight_scale has shape "
        "[128, 1]; expected one value");
    expect_open_error(
        edited_checkpoint("llama3_gqa_hd64_bf16",
                          "{\"quantization_config\": {\"quant_method\": "
                          "\"fp8\", \"activation_scheme\": \"dynamic\"}}"),
        KVCAL_ERR_FORMAT,
        "the fp8 config quantizes model.layers.0.self_attn.q_proj (FP8 e4m3 "
        "weights per-tensor, activations dynamic per-token) but tensor "
        "model.layers.0.self_attn.q_proj.weight is BF16");
    expect_open_error(edited_checkpoint("fp8_llama_fp8_tensor_dynamic",
                                        "{\"quantization_config\": {\"quant_method\": "
                                        "\"quark\"}}"),
                      KVCAL_ERR_UNSUPPORTED,
                      "has dtype F8_E4M3 under quant_method \"quark\"");
    expect_open_error(
        "tests/fixtures/golden/fp8_qwen3_moe_experts", KVCAL_ERR_UNSUPPORTED,
        "model.layers.0.mlp.experts.0.gate_proj is an expert's FP8 weight "
        "per tensor with dynamic activations, whose inputs vLLM's fused MoE "
        "quantizes with one scale over each whole batch");
    /* DeepSeek's q_a_proj and kv_a_proj_with_mqa, which vLLM fuses */
    expect_open_error(
        "tests/fixtures/golden/fp8_deepseek_v3_half_fused", KVCAL_ERR_UNSUPPORTED,
        "model.layers.0.self_attn.q_a_proj.weight is FP8 e4m3 weights "
        "per-channel, activations dynamic per-token but "
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight is unquantized");
    expect_open_error(
        "tests/fixtures/golden/fp8_deepseek_v3_q_lora_96", KVCAL_ERR_FORMAT,
        "model.layers.0.self_attn.q_a_proj.weight has 96 rows, not a "
        "multiple of the block size 64: vLLM refuses to fuse it block-wise");
    /* a hybrid model's FP8 weight read through a grouping of rows that are
     * not whole blocks; Qwen3-VL-MoE, which reads float weights alone */
    expect_open_error(
        "tests/fixtures/golden/fp8_qwen3_next_ba_blocks", KVCAL_ERR_UNSUPPORTED,
        "model.layers.0.linear_attn.in_proj_ba.weight holds its heads' rows "
        "in runs of 2, not whole blocks of 64 rows");
    expect_open_error(
        edited_checkpoint(
            "fp8_qwen3_moe_fp8_block",
            "{\"architectures\": [\"Qwen3VLMoeForConditionalGeneration\"], "
            "\"model_type\": \"qwen3_vl_moe\", \"num_hidden_layers\": null, "
            "\"text_config\": {\"model_type\": \"qwen3_vl_moe_text\", "
            "\"num_hidden_layers\": 2, \"hidden_size\": 128, \"intermediate_size\": 64, "
            "\"moe_intermediate_size\": 64, \"num_experts\": 4, "
            "\"num_experts_per_tok\": 2, \"num_attention_heads\": 2, "
            "\"num_key_value_heads\": 1, \"head_dim\": 64, \"vocab_size\": 128}, "
            "\"vision_config\": {}}"),
        KVCAL_ERR_UNSUPPORTED, "Qwen3VLMoeForConditionalGeneration with FP8 weights (");
}

/* A ModelOpt hf_quant_config.json without its "quantization" object, and
 * a quantization_config that declares no weight scheme beside FP8
 * tensors: named as such, not as a checkpoint without any config. */
static void model_open_names_a_quantization_config_that_declares_no_weights(void)
{
    const char *dir = edited_checkpoint("fp8_llama_modelopt_tensor_static", "{}");
    char path[600];
    snprintf(path, sizeof path, "%s/hf_quant_config.json", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"producer\": {\"name\": \"modelopt\"}}\n", f);
    fclose(f);
    expect_open_error(dir, KVCAL_ERR_FORMAT,
                      "hf_quant_config.json: no \"quantization\" object");
    expect_open_error(
        edited_checkpoint("fp8_qwen3_fp8_block",
                          "{\"quantization_config\": {\"quant_method\": "
                          "\"compressed-tensors\", \"config_groups\": {}}}"),
        KVCAL_ERR_UNSUPPORTED,
        "model.layers.0.self_attn.q_proj.weight has dtype F8_E4M3 but the "
        "quantization config in ");
    CU_ASSERT(kvcal_test_error_has("config.json declares no weight quantization"));
}

/* dir's model.safetensors with value `index` of the F32 tensor `name` set
 * to x. */
static void set_f32_value(const char *dir, const char *name, int64_t index, float x)
{
    char path[600], tmp[620];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_open(path, &st), KVCAL_OK);
    const int n = kvcal_safetensors_count(st);
    kvcal_tensor_out *out = calloc((size_t)n, sizeof *out);
    float *edited = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    for (int i = 0; i < n; i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
        out[i].name = t->name;
        out[i].dtype = t->dtype;
        out[i].ndim = t->ndim;
        memcpy(out[i].shape, t->shape, sizeof t->shape);
        out[i].data = t->data;
        if (strcmp(t->name, name))
            continue;
        CU_ASSERT_EQUAL_FATAL(t->dtype, KVCAL_DTYPE_F32);
        CU_ASSERT_FATAL(index < t->numel);
        CU_ASSERT_PTR_NOT_NULL_FATAL(edited = malloc(t->nbytes));
        memcpy(edited, t->data, t->nbytes);
        edited[index] = x;
        out[i].data = edited;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(edited);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(tmp, out, n, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(rename(tmp, path), 0);
    kvcal_safetensors_close(st);
    free(edited);
    free(out);
}

/* A weight scale that is finite but makes an e4m3 weight infinite (448 x
 * 3e38) is named when the layer loads, not found later as a NaN in some
 * layer's K or V. */
static void model_names_a_weight_scale_an_e4m3_value_overflows(void)
{
    const char *dir = edited_checkpoint("fp8_qwen3_fp8_block", "{}");
    set_f32_value(dir, "model.layers.1.self_attn.k_proj.weight_scale_inv", 1, 3e38f);
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open(dir, &m), KVCAL_OK);
    kvcal_layer_weights w;
    CU_ASSERT_EQUAL(kvcal_model_load_layer(m, 0, &w), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_model_load_layer(m, 1, &w), KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has(
        "scale tensor model.layers.1.self_attn.k_proj.weight_scale_inv holds 3e+38 at "
        "index 1; scales must be finite, > 0 and at most"));
    kvcal_model_close(m);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(runner_matches_numpy_run_c_on_stories260k),
    KVCAL_TEST(runner_matches_transformers_hybrid_linear_attention_models),
    KVCAL_TEST(runner_matches_transformers_llama3_gqa_head_dim_48_bf16),
    KVCAL_TEST(runner_matches_transformers_llama_mha_linear_rope_tied_fp32_old_config),
    KVCAL_TEST(runner_matches_transformers_mistral_mqa_fp16),
    KVCAL_TEST(runner_matches_transformers_qwen2_bias_old_config),
    KVCAL_TEST(runner_matches_transformers_qwen3_qk_norm_head_dim_80),
    KVCAL_TEST(runner_matches_transformers_qwen3_qk_norm_head_dim_128),
    KVCAL_TEST(runner_matches_transformers_llama_mlp_256),
    KVCAL_TEST(runner_matches_transformers_llama3_head_dim_64),
    KVCAL_TEST(runner_matches_transformers_qwen2_yarn_rope_old_config),
    KVCAL_TEST(runner_matches_transformers_qwen3_moe_top3_of_8_renormalized),
    KVCAL_TEST(runner_matches_transformers_qwen2_moe_shared_expert_sigmoid_gate),
    KVCAL_TEST(runner_matches_transformers_mixtral_top2_sliding_window_16),
    KVCAL_TEST(runner_matches_transformers_minimax_m2_whole_projection_qk_norm),
    KVCAL_TEST(runner_matches_transformers_llama4_nope_chunked_layers),
    KVCAL_TEST(runner_matches_transformers_glm4v_moe_language_model),
    KVCAL_TEST(runner_matches_transformers_glm4_dense_and_its_vision_wrapper),
    KVCAL_TEST(runner_matches_transformers_ernie45_moe_softmax_choice_bias),
    KVCAL_TEST(runner_matches_transformers_exaone4_post_norm_nope_layers),
    KVCAL_TEST(runner_matches_transformers_seed_oss_biases),
    KVCAL_TEST(runner_matches_transformers_smollm3_nope_layers),
    KVCAL_TEST(runner_matches_transformers_olmo_post_norm_whole_qk_norm),
    KVCAL_TEST(runner_matches_transformers_hunyuan_qk_norm_after_rope),
    KVCAL_TEST(runner_matches_transformers_granite_multipliers),
    KVCAL_TEST(runner_matches_transformers_phi3_longrope_partial_rotary_window),
    KVCAL_TEST(runner_matches_transformers_gemma3_local_global_layers),
    KVCAL_TEST(runner_matches_transformers_gemma2_soft_caps),
    KVCAL_TEST(runner_matches_transformers_multimodal_language_models),
    KVCAL_TEST(model_open_names_what_a_multimodal_checkpoint_lacks),
    KVCAL_TEST(runner_matches_transformers_qwen3_moe_with_dense_layers),
    KVCAL_TEST(runner_matches_transformers_glm4_moe_dense_then_sigmoid_routing),
    KVCAL_TEST(runner_matches_transformers_gpt_oss_sinks_windows_clamped_experts),
    KVCAL_TEST(runner_matches_transformers_gpt_oss_mxfp4_experts),
    KVCAL_TEST(runner_matches_transformers_qwen_moe_sliding_windows),
    KVCAL_TEST(runner_matches_transformers_deepseek_v2_mla_group_limited_softmax),
    KVCAL_TEST(runner_matches_transformers_deepseek_v3_mla_qlora_grouped_sigmoid),
    KVCAL_TEST(runner_matches_transformers_glm4_moe_lite),
    KVCAL_TEST(runner_matches_transformers_deepseek_sparse_attention_within_top_k),
    KVCAL_TEST(runner_matches_transformers_ministral3_within_its_original_context),
    KVCAL_TEST(calibrate_counts_tokens_per_expert_in_every_layer),
    KVCAL_TEST(calibrate_last_moe_layer_routes_only_with_the_counts_of_a_whole_run),
    KVCAL_TEST(calibrate_profile_times_each_op_and_changes_nothing),
    KVCAL_TEST(calibrate_observes_the_queries_the_attention_reads_and_the_signed_range),
    KVCAL_TEST(runner_kv_does_not_depend_on_batch_neighbours),
    KVCAL_TEST(runner_layer_by_layer_equals_batch_by_batch),
    KVCAL_TEST(eval_layer_by_layer_equals_batch_by_batch),
    KVCAL_TEST(eval_compare_without_a_reference_of_the_same_tokens_fails),
    KVCAL_TEST(runner_rejects_sequence_longer_than_context_and_bad_ids),
    KVCAL_TEST(model_open_names_unsupported_architecture),
    KVCAL_TEST(model_open_lists_the_supported_architectures),
    KVCAL_TEST(model_open_says_what_mla_and_hybrid_models_lack),
    KVCAL_TEST(model_open_names_missing_expert_and_dense_mlp_tensors),
    KVCAL_TEST(model_open_names_the_bad_entry_of_a_config_list),
    KVCAL_TEST(model_open_refuses_an_mla_softmax_scale_a_float_does_not_hold),
    KVCAL_TEST(calibrate_notes_gpt_oss_swiglu_values_vllm_does_not_read),
    KVCAL_TEST(model_open_gives_each_layer_the_window_of_its_kind),
    KVCAL_TEST(model_open_names_the_gpt_oss_expert_tensor_off_the_config),
    KVCAL_TEST(model_next_layer_kind_finds_each_kind_once),
    KVCAL_TEST(model_open_names_missing_tensor),
    KVCAL_TEST(model_open_names_tensor_with_wrong_shape),
    KVCAL_TEST(model_open_refuses_a_bias_the_config_does_not_declare),
    KVCAL_TEST(model_open_names_yarn_factor_below_one),
    KVCAL_TEST(cuda_runner_accepts_yarn_rope),
    KVCAL_TEST(model_open_names_minimax_m2_fields_the_engines_read_apart),
    KVCAL_TEST(model_open_names_llama4_fields_the_engines_read_apart),
    KVCAL_TEST(model_open_names_ernie45_fields_the_engines_read_apart),
    KVCAL_TEST(model_open_reads_exaone4_layer_kinds),
    KVCAL_TEST(model_open_rejects_truncated_llama2c_file),
    KVCAL_TEST(model_open_rejects_llama2c_header_with_int_min_vocab),
    KVCAL_TEST(runner_matches_vllm_fp8_semantics_on_every_scheme),
    KVCAL_TEST(runner_matches_vllm_fp8_semantics_on_hybrid_models),
    KVCAL_TEST(runner_matches_vllm_fp8_semantics_on_minimax_m2),
    KVCAL_TEST(runner_matches_vllm_fp8_semantics_on_llama4_named_experts),
    KVCAL_TEST(runner_matches_vllm_fp8_semantics_on_granite),
    KVCAL_TEST(model_open_describes_fp8_schemes),
    KVCAL_TEST(model_serves_fused_per_tensor_shards_at_their_largest_scale),
    KVCAL_TEST(model_open_names_fp8_tensors_its_config_does_not_explain),
    KVCAL_TEST(model_open_names_a_quantization_config_that_declares_no_weights),
    KVCAL_TEST(model_names_a_weight_scale_an_e4m3_value_overflows),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(runner, KVCAL_NEEDS_NOTHING, tests)
