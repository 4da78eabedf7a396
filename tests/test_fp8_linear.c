/* tests/test_fp8_linear.c: the FP8 linear layer as vLLM serves it
 * (core/fp8_linear.h, kernels/cpu/fp8_ref.c) and the weight quantization a
 * checkpoint's config declares (io/checkpoint/weight_quant.c): each
 * formula against cases worked out by hand from vLLM's kernels, fp16
 * rounding against the compiler's _Float16, the layer against a float64
 * matmul of its dequantized operands, and every config the engines write
 * (and the ones kvcal refuses, each in one line naming the scheme). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp8_linear.h"
#include "io/checkpoint/weight_quant.h"
#include "kernels/cpu/fp8_ref.h"
#include "tests/test_util.h"

static uint32_t lcg_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

/* A float in (-a, a), spread over binades. */
static float random_value(uint64_t *s, float a)
{
    const float u = (float)(lcg_next(s) >> 8) / 16777216.0f;
    const float mag = a * powf(2.0f, -(float)(lcg_next(s) % 12));
    return (lcg_next(s) & 1 ? -1.0f : 1.0f) * u * mag;
}

// --- element formulas -------------------------------------------------------------

/* static: x * (1 / s); per-token: x / max(absmax / 448, 1 / (448 * 512));
 * group: x / (max(absmax, 1e-10) / 448); all clamped to +-448 */
static void fp8_activation_formulas_follow_vllm(void)
{
    CU_ASSERT_EQUAL(kvcal_fp8_quant_mul(1.0f, 1.0f / 0.5f), 0x40); /* 2.0 */
    CU_ASSERT_EQUAL(kvcal_fp8_quant_mul(1000.0f, 1.0f), 0x7e);     /* clamped to 448 */
    CU_ASSERT_EQUAL(kvcal_fp8_quant_mul(-1000.0f, 1.0f), 0xfe);
    CU_ASSERT_EQUAL(kvcal_fp8_quant_mul(NAN, 1.0f), 0x7e);   /* fminf first: NaN -> 448 */
    CU_ASSERT_EQUAL(kvcal_fp8_quant_group(NAN, 1.0f), 0xfe); /* fmaxf first: -448 */
    CU_ASSERT_EQUAL(kvcal_fp8_token_scale(896.0f), 2.0f);
    CU_ASSERT_EQUAL(kvcal_fp8_token_scale(0.0f), 1.0f / (448.0f * 512.0f));
    CU_ASSERT_EQUAL(kvcal_fp8_group_scale(0.0f), 1e-10f / 448.0f);
    CU_ASSERT_EQUAL(kvcal_fp8_group_scale(448.0f), 1.0f);
    float x[4] = {896.0f, 1.0f, -3.0f, 0.0f}, s[1];
    uint8_t q[4];
    kvcal_fp8_quant_act_ref(q, s, x, 1, 4, KVCAL_FP8A_TOKEN, 0, 0.0f);
    CU_ASSERT_EQUAL(s[0], 2.0f);
    CU_ASSERT_EQUAL(q[0], 0x7e); /* 448 */
    CU_ASSERT_EQUAL(q[1], 0x30); /* 0.5 */
    CU_ASSERT_EQUAL(kvcal_fp8_e4m3_to_float(q[2]), -1.5f);
    CU_ASSERT_EQUAL(q[3], 0x00);
}

/* The device's per-token quotient without a division
 * (kvcal_fp8_token_quotient) gives kvcal_fp8_quant_div's byte for every
 * bf16 value x of a row (NaN included: both clamp to 448) and every fifth
 * finite bf16 absmax >= |x| (0 included; a stride prime to the 128
 * mantissas: each mantissa in about 51 binades, every binade), the scale
 * its kvcal_fp8_token_scale: about 2 x 10^8 pairs. */
static void fp8_token_quotient_bytes_equal_the_division_for_bf16_rows(void)
{
    int64_t pairs = 0, differ = 0;
    for (uint32_t a = 0; a < 0x7f80u; a += 5) {
        float absmax, x;
        const uint32_t abits = a << 16;
        memcpy(&absmax, &abits, sizeof absmax);
        const float s = kvcal_fp8_token_scale(absmax), inv = 1.0f / s;
        for (uint32_t h = 0; h < 0x10000u; h++) {
            const uint32_t xbits = h << 16;
            memcpy(&x, &xbits, sizeof x);
            if (!(fabsf(x) <= absmax) && !isnan(x))
                continue;
            const float y = fmaxf(-KVCAL_FP8_E4M3_MAX,
                                  fminf(kvcal_fp8_token_quotient(x, s, inv),
                                        KVCAL_FP8_E4M3_MAX));
            differ += kvcal_fp8_e4m3_from_float(y) != kvcal_fp8_quant_div(x, s);
            pairs++;
        }
    }
    CU_ASSERT(pairs > 200000000);
    CU_ASSERT_EQUAL(differ, 0);
}

/* Groups of 3 columns over 2 rows: scales laid out group-major (row fastest),
 * the last group shorter. */
/* SwiGLU rounded as the CUDA runner rounds it (silu to bf16, then the
 * product to bf16) before the row is quantized: silu(2) = 1.76159 becomes
 * 1.7578125, which sets the row's scale and quantizes to 448. */
static void fp8_swiglu_quant_ref_rounds_to_bf16_before_quantizing(void)
{
    const float gate_up[4] = {2.0f, -30.0f, 1.0f, 3.0f}; /* gate (2), up (2) */
    float act[2], s[1];
    uint8_t q[2];
    kvcal_fp8_swiglu_quant_ref(q, s, act, gate_up, 1, 2, KVCAL_FP8A_TOKEN, 0, 0.0f);
    CU_ASSERT_EQUAL(act[0], 1.7578125f);
    CU_ASSERT(act[1] < 0.0f && act[1] > -1e-10f);
    CU_ASSERT_EQUAL(s[0], kvcal_fp8_token_scale(1.7578125f));
    CU_ASSERT_EQUAL(q[0], 0x7e);        /* 448 */
    CU_ASSERT_EQUAL(q[1] & 0x7f, 0x00); /* below e4m3's smallest step */
}

/* The residual rounded to bf16 after the add (4 + 0.01 stays 4), the row
 * rounded as the CUDA runner's RMSNorm rounds it (3 / sqrt(12.5) =
 * 0.848528 becomes 0.84765625, 4 / sqrt(12.5) 1.1328125) before it is
 * quantized: the second sets the token's scale and becomes 448, the first
 * 335.2, which rounds to 320. */
static void fp8_add_rmsnorm_quant_ref_rounds_the_residual_and_the_row_to_bf16(void)
{
    float residual[2] = {2.0f, 4.0f}, act[2], s[1];
    const float delta[2] = {1.0f, 0.01f}, w[2] = {1.0f, 1.0f};
    uint8_t q[2];
    kvcal_fp8_add_rmsnorm_quant_ref(q, s, act, residual, delta, w, 1, 2, 0.0f,
                                    KVCAL_FP8A_TOKEN, 0, 0.0f);
    CU_ASSERT_EQUAL(residual[0], 3.0f);
    CU_ASSERT_EQUAL(residual[1], 4.0f);
    CU_ASSERT_EQUAL(act[0], 0.84765625f);
    CU_ASSERT_EQUAL(act[1], 1.1328125f);
    CU_ASSERT_EQUAL(s[0], kvcal_fp8_token_scale(1.1328125f));
    CU_ASSERT_EQUAL(q[0], 0x7a); /* 320 */
    CU_ASSERT_EQUAL(q[1], 0x7e); /* 448 */
}

static void fp8_group_scales_are_laid_out_group_major(void)
{
    const float x[2 * 5] = {1, 2, 4, 8, 16, -448, 0, 0, 0, 0.5f};
    uint8_t q[10];
    float s[4];
    kvcal_fp8_quant_act_ref(q, s, x, 2, 5, KVCAL_FP8A_GROUP, 3, 0.0f);
    CU_ASSERT_EQUAL(s[0], 4.0f / 448.0f);   /* row 0, group 0 */
    CU_ASSERT_EQUAL(s[1], 448.0f / 448.0f); /* row 1, group 0 */
    CU_ASSERT_EQUAL(s[2], 16.0f / 448.0f);  /* row 0, group 1 */
    CU_ASSERT_EQUAL(s[3], 0.5f / 448.0f);   /* row 1, group 1 */
    CU_ASSERT_EQUAL(q[2], 0x7e);            /* the group's absmax: 448 */
    CU_ASSERT_EQUAL(q[5], 0xfe);
    CU_ASSERT_EQUAL(q[9], 0x7e);
}

/* kvcal_half_round is IEEE binary16 rounding: the compiler's _Float16 cast
 * on normals, subnormals, ties, overflow. */
static void half_round_is_binary16_rounding(void)
{
    uint64_t seed = 7;
    const float edge[] = {65504.0f,       65519.99f,      65520.0f,      1e9f,
                          6.1035156e-5f,  6.1e-5f,        5.9604645e-8f, 2.9802322e-8f,
                          2.9802326e-8f,  1e-12f,         0.0f,          -0.0f,
                          1.00048828125f, 1.00146484375f, -3.14159f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        CU_ASSERT_EQUAL(kvcal_half_round(edge[i]), (float)(_Float16)edge[i]);
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = lcg_next(&seed);
        float x;
        memcpy(&x, &bits, sizeof x);
        if (isnan(x))
            continue;
        const float want = (float)(_Float16)x, got = kvcal_half_round(x);
        bad += memcmp(&want, &got, sizeof got) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* requantize_with_max_scale: b * s_shard in fp32, to fp16, times 1 / s_max. */
static void requant_follows_vllm_through_fp16(void)
{
    CU_ASSERT_EQUAL(kvcal_fp8_requant(0x38, 1.0f, 2.0f), 0x30); /* 1.0 -> 0.5 */
    CU_ASSERT_EQUAL(kvcal_fp8_requant(0x38, 0.5f, 0.5f), 0x38); /* unchanged */
    /* a tiny scale: 2^-9 * 2^-20 is below fp16's smallest subnormal half:
     * the byte becomes 0, as in vLLM */
    CU_ASSERT_EQUAL(kvcal_fp8_requant(0x01, ldexpf(1.0f, -20), ldexpf(1.0f, -20)), 0x00);
    /* every byte of a shard with the largest scale comes back where fp16
     * holds b * s exactly */
    int changed = 0;
    for (int b = 0; b < 256; b++)
        if ((b & 0x7f) != 0x7f)
            changed += kvcal_fp8_requant((uint8_t)b, 0.01f, 0.01f) != b;
    CU_ASSERT_EQUAL(changed, 0);
}

static void fp8_weight_scale_layout_pads_block_columns_to_four(void)
{
    const kvcal_fp8_linear t = {KVCAL_FP8W_TENSOR, KVCAL_FP8A_STATIC, 0, 0, 0};
    const kvcal_fp8_linear c = {KVCAL_FP8W_CHANNEL, KVCAL_FP8A_TOKEN, 0, 0, 0};
    const kvcal_fp8_linear b = {KVCAL_FP8W_BLOCK, KVCAL_FP8A_GROUP, 128, 128, 128};
    CU_ASSERT_EQUAL(kvcal_fp8_weight_scales(&t, 10, 7), 14);
    CU_ASSERT_EQUAL(kvcal_fp8_weight_scales(&c, 10, 7), 10);
    CU_ASSERT_EQUAL(kvcal_fp8_block_ld(300, 128), 4);
    CU_ASSERT_EQUAL(kvcal_fp8_block_ld(640, 128), 8);
    CU_ASSERT_EQUAL(kvcal_fp8_weight_scales(&b, 300, 640), 3 * 8);
    float grid[3 * 8];
    for (int i = 0; i < 24; i++)
        grid[i] = (float)i;
    CU_ASSERT_EQUAL(kvcal_fp8_weight_scale_at(&b, grid, 129, 300, 640), 8.0f + 2.0f);
}

/* The layer against float64: out = (q_x * s_x) (q_w * s_w)^T + bias, with
 * q_x what kvcal_fp8_quant_act_ref made; 19 rows, odd k and n, every
 * scheme. Tolerance 1e-5 relative to the output's absmax. */
static void fp8_linear_ref_is_the_dequantized_product(void)
{
    enum { R = 19, K = 300, N = 37 };
    const kvcal_fp8_linear schemes[] = {
        {KVCAL_FP8W_TENSOR, KVCAL_FP8A_STATIC, 0, 0, 0},
        {KVCAL_FP8W_TENSOR, KVCAL_FP8A_TOKEN, 0, 0, 0},
        {KVCAL_FP8W_CHANNEL, KVCAL_FP8A_TOKEN, 0, 0, 0},
        {KVCAL_FP8W_CHANNEL, KVCAL_FP8A_NONE, 0, 0, 0},
        {KVCAL_FP8W_BLOCK, KVCAL_FP8A_GROUP, 16, 128, 128},
    };
    uint64_t seed = 11;
    float *x = malloc(sizeof(float) * R * K), *bias = malloc(sizeof(float) * N);
    float *scales = malloc(sizeof(float) * (4 + N) * 16),
          *out = malloc(sizeof(float) * R * N);
    float *scratch = malloc(sizeof(float) * (R * K + N * K)),
          *xs = malloc(sizeof(float) * R * 3);
    uint8_t *wq = malloc(N * K), *xq = malloc(R * K);
    CU_ASSERT_FATAL(x && bias && scales && out && scratch && xs && wq && xq);
    for (int i = 0; i < R * K; i++)
        x[i] = random_value(&seed, 30.0f);
    for (int i = 0; i < N * K; i++)
        wq[i] = (uint8_t)(lcg_next(&seed) & 0xfe); /* even: never a NaN code */
    for (int i = 0; i < N; i++)
        bias[i] = random_value(&seed, 1.0f);
    for (size_t si = 0; si < sizeof schemes / sizeof *schemes; si++) {
        const kvcal_fp8_linear *f = &schemes[si];
        const int64_t ns = kvcal_fp8_weight_scales(f, N, K);
        for (int64_t i = 0; i < ns; i++)
            scales[i] = 1e-3f * (1.0f + (float)(lcg_next(&seed) % 100));
        for (int i = 0; f->w == KVCAL_FP8W_TENSOR && i < N; i++)
            scales[4 + i] = scales[0];
        const float in_scale = 0.07f;
        kvcal_fp8_linear_ref(out, x, wq, scales, in_scale, f, bias, R, K, N, scratch);
        if (f->a != KVCAL_FP8A_NONE)
            kvcal_fp8_quant_act_ref(xq, xs, x, R, K, f->a, f->group, in_scale);
        double worst = 0, top = 0;
        for (int r = 0; r < R; r++)
            for (int n = 0; n < N; n++) {
                double acc = bias[n];
                for (int k = 0; k < K; k++) {
                    const double xv =
                        f->a == KVCAL_FP8A_NONE
                            ? x[r * K + k]
                            : (double)kvcal_fp8_e4m3_to_float(xq[r * K + k]) *
                                  xs[f->a == KVCAL_FP8A_GROUP ? (k / f->group) * R + r
                                                              : r];
                    acc += xv * kvcal_fp8_e4m3_to_float(wq[n * K + k]) *
                           kvcal_fp8_weight_scale_at(f, scales, n, k, K);
                }
                worst = fmax(worst, fabs(out[r * N + n] - acc));
                top = fmax(top, fabs(acc));
            }
        CU_ASSERT(top > 0 && worst <= 1e-5 * top);
    }
    free(x), free(bias), free(scales), free(out), free(scratch), free(xs), free(wq),
        free(xq);
}

// --- configs ------------------------------------------------------------------------

static kvcal_weight_quant_t *parse(const char *json, kvcal_status want)
{
    cJSON *qc = cJSON_Parse(json);
    CU_ASSERT_PTR_NOT_NULL_FATAL(qc);
    kvcal_weight_quant_t *q = NULL;
    CU_ASSERT_EQUAL(kvcal_weight_quant_parse(qc, "config.json", &q), want);
    cJSON_Delete(qc);
    CU_ASSERT((q != NULL) == (want == KVCAL_OK));
    return q;
}

static kvcal_wq_scheme module(const kvcal_weight_quant_t *q, const char *name)
{
    kvcal_wq_scheme s;
    kvcal_weight_quant_module(q, name, &s);
    return s;
}

#define LLAMA_Q "model.layers.3.self_attn.q_proj"
#define LLAMA_DOWN "model.layers.3.mlp.down_proj"

/* llm-compressor's FP8 (per-tensor, static input scales) and FP8_DYNAMIC
 * (per-channel, dynamic per-token) recipes; an ignore regex. */
static void weight_quant_reads_compressed_tensors_fp8(void)
{
    kvcal_weight_quant_t *q = parse(
        "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": "
        "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\", \"dynamic\": "
        "false, \"symmetric\": true}, \"input_activations\": {\"num_bits\": 8, \"type\": "
        "\"float\", \"strategy\": \"tensor\", \"dynamic\": false, \"symmetric\": "
        "true}}}, "
        "\"ignore\": [\"lm_head\", \"re:.*mlp.down_proj$\"]}",
        KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_weight_quant_method(q), KVCAL_WQ_COMPRESSED_TENSORS);
    kvcal_wq_scheme s = module(q, LLAMA_Q);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_TENSOR);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_STATIC);
    CU_ASSERT_EQUAL(s.input_scale, 1);
    CU_ASSERT_STRING_EQUAL(s.scale_name, "weight_scale");
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.w, KVCAL_FP8W_NONE);
    CU_ASSERT_EQUAL(kvcal_weight_quant_requant(q), KVCAL_WQ_REQUANT_ALWAYS);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
              "{\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": "
              "\"float\", \"strategy\": \"channel\"}, \"input_activations\": "
              "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", "
              "\"dynamic\": true}}}}",
              KVCAL_OK);
    s = module(q, LLAMA_DOWN);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_CHANNEL);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_TOKEN);
    CU_ASSERT_EQUAL(s.input_scale, 0);
    kvcal_weight_quant_destroy(q);
}

/* A compressed-tensors block scheme: activations in groups of
 * block_structure[0], as vLLM's CompressedTensorsW8A8Fp8 quantizes them;
 * a group targeting only attention leaves the MLP unquantized. */
static void weight_quant_reads_compressed_tensors_blocks_and_targets(void)
{
    kvcal_weight_quant_t *q = parse(
        "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
        "{\"targets\": [\"re:.*self_attn.*\"], \"weights\": {\"num_bits\": 8, \"type\": "
        "\"float\", \"strategy\": \"block\", \"block_structure\": [128, 64]}, "
        "\"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
        "\"group\", \"group_size\": 128, \"dynamic\": true}}}}",
        KVCAL_OK);
    kvcal_wq_scheme s = module(q, LLAMA_Q);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_BLOCK);
    CU_ASSERT_EQUAL(s.fp8.block_n, 128);
    CU_ASSERT_EQUAL(s.fp8.block_k, 64);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_GROUP);
    CU_ASSERT_EQUAL(s.fp8.group, 128);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.w, KVCAL_FP8W_NONE);
    kvcal_weight_quant_destroy(q);
}

/* The fp8 method: Qwen3-FP8 / DeepSeek-V3 blocks (weight_scale_inv) and
 * per-tensor weights with static or dynamic (per-token) activations;
 * modules_to_not_convert where ignored_layers is empty. */
static void weight_quant_reads_the_fp8_method(void)
{
    kvcal_weight_quant_t *q = parse(
        "{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", \"fmt\": "
        "\"e4m3\", "
        "\"weight_block_size\": [128, 128], \"modules_to_not_convert\": [\"" LLAMA_DOWN
        "\"]}",
        KVCAL_OK);
    kvcal_wq_scheme s = module(q, LLAMA_Q);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_BLOCK);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_GROUP);
    CU_ASSERT_EQUAL(s.fp8.group, 128);
    CU_ASSERT_STRING_EQUAL(s.scale_name, "weight_scale_inv");
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.w, KVCAL_FP8W_NONE);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\"}",
              KVCAL_OK);
    s = module(q, LLAMA_DOWN);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_TENSOR);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_TOKEN);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\"}", KVCAL_OK);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.a, KVCAL_FP8A_STATIC);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).input_scale, 1);
    kvcal_weight_quant_destroy(q);
}

/* ModelOpt in config.json (quant_algo, ignore) and hf_quant_config.json
 * (quantization.quant_algo, exclude_modules with wildcards); FP8 requantizes
 * only where the shards' scales differ. */
static void weight_quant_reads_modelopt(void)
{
    kvcal_weight_quant_t *q = parse(
        "{\"producer\": {\"name\": \"modelopt\"}, \"quantization\": {\"quant_algo\": "
        "\"FP8\", \"kv_cache_quant_algo\": \"FP8\", \"exclude_modules\": [\"lm_head\", "
        "\"model.layers.3.mlp*\"]}}",
        KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_weight_quant_method(q), KVCAL_WQ_MODELOPT);
    CU_ASSERT_EQUAL(kvcal_weight_quant_requant(q), KVCAL_WQ_REQUANT_IF_DIFFERENT);
    CU_ASSERT_EQUAL(module(q, LLAMA_Q).fp8.a, KVCAL_FP8A_STATIC);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.w, KVCAL_FP8W_NONE);
    CU_ASSERT_EQUAL(module(q, "model.layers.4.mlp.down_proj").fp8.w, KVCAL_FP8W_TENSOR);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"modelopt\", \"quant_algo\": \"fp8_pb_wo\"}",
              KVCAL_OK);
    kvcal_wq_scheme s = module(q, LLAMA_Q);
    CU_ASSERT_EQUAL(s.fp8.w, KVCAL_FP8W_BLOCK);
    CU_ASSERT_EQUAL(s.fp8.block_n, 128);
    CU_ASSERT_EQUAL(s.fp8.a, KVCAL_FP8A_GROUP);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"modelopt\", \"quant_algo\": "
              "\"FP8_PER_CHANNEL_PER_TOKEN\", \"ignore\": [\"" LLAMA_Q "\"]}",
              KVCAL_OK);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.w, KVCAL_FP8W_CHANNEL);
    CU_ASSERT_EQUAL(module(q, LLAMA_DOWN).fp8.a, KVCAL_FP8A_TOKEN);
    CU_ASSERT_EQUAL(module(q, LLAMA_Q).fp8.w, KVCAL_FP8W_NONE);
    kvcal_weight_quant_destroy(q);
}

/* A KV-cache-only config, a method kvcal does not read (quark): no weight
 * scheme; the model's dtypes decide (calib/model_fp8.c). */
static void weight_quant_without_weight_scheme_is_none(void)
{
    kvcal_weight_quant_t *q =
        parse("{\"quant_method\": \"compressed-tensors\", \"kv_cache_scheme\": "
              "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\"}}",
              KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_weight_quant_method(q), KVCAL_WQ_NONE);
    CU_ASSERT_EQUAL(module(q, LLAMA_Q).fp8.w, KVCAL_FP8W_NONE);
    kvcal_weight_quant_destroy(q);
    q = parse("{\"quant_method\": \"quark\", \"export\": {\"kv_cache_group\": []}}",
              KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_weight_quant_method(q), KVCAL_WQ_OTHER);
    CU_ASSERT_STRING_EQUAL(kvcal_weight_quant_name(q), "quark");
    kvcal_weight_quant_destroy(q);
}

/* Everything else is one line naming the scheme. */
static void weight_quant_refuses_other_schemes_naming_them(void)
{
    parse("{\"quant_method\": \"awq\", \"bits\": 4}", KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("quant_method \"awq\" is not supported"));
    parse(
        "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"group_0\": "
        "{\"weights\": {\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"group\"}}}}",
        KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("group_0: weights int 4-bit (strategy group) are not "
                                   "supported"));
    parse("{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\"}",
          KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("ModelOpt quant_algo \"NVFP4\" is not supported"));
    parse("{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\", "
          "\"weight_block_size\": [128, 128]}",
          KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("block-wise FP8 with dynamic activations only"));
    parse("{\"quant_method\": \"fp8\"}", KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("activation_scheme is missing"));
    parse("{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
          "\"weight_block_size\": [128]}",
          KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("weight_block_size is not [block_n, block_k]"));
}

/* A field of the wrong type is named, not read as its default (a dynamic
 * "true" as static, a string ignored_layers as none, a config_groups list
 * as no weight scheme). */
static void weight_quant_names_fields_of_the_wrong_type(void)
{
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"quant_method\": 5}", "quantization_config.quant_method is not a string"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": [1]}",
         "quantization_config.config_groups is not an object"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "\"fp8\"}}",
         "quantization_config.config_groups.g is not an object"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": \"fp8\"}}}",
         "quantization_config.config_groups.g.weights is not an object"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": \"8\", \"type\": \"float\", \"strategy\": "
         "\"tensor\"}}}}",
         "config_groups.g.weights.num_bits is not an integer"},
        /* a fraction, and a number no int holds (read as one: undefined) */
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 8.5, \"type\": \"float\", \"strategy\": "
         "\"tensor\"}}}}",
         "config_groups.g.weights.num_bits is not an integer"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 6.7e42, \"type\": \"float\", \"strategy\": "
         "\"tensor\"}}}}",
         "config_groups.g.weights.num_bits is not an integer"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": 1}}}}",
         "config_groups.g.weights.strategy is not a string"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
         "\"tensor\", \"dynamic\": \"true\"}}}}",
         "config_groups.g.weights.dynamic is not true, false or \"local\""},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
         "\"tensor\", \"symmetric\": 1}}}}",
         "config_groups.g.weights.symmetric is not true or false"},
        {"{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
         "{\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
         "\"tensor\"}, \"input_activations\": \"fp8\"}}}",
         "config_groups.g.input_activations is not an object"},
        {"{\"quant_method\": \"fp8\", \"activation_scheme\": 1}",
         "quantization_config.activation_scheme is not a string"},
        {"{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
         "\"ignored_layers\": \"lm_head\"}",
         "quantization_config.ignored_layers is not a list"},
        {"{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
         "\"modules_to_not_convert\": \"lm_head\"}",
         "quantization_config.modules_to_not_convert is not a list"},
        {"{\"quant_method\": \"modelopt\", \"quant_algo\": 8}",
         "quantization_config.quant_algo is not a string"},
        {"{\"quantization\": \"FP8\"}", "\"quantization\" is not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        parse(bad[i].json, KVCAL_ERR_FORMAT);
        CU_ASSERT(kvcal_test_error_has(bad[i].needle));
    }
    /* NVFP4's dynamic "local" is a type compressed-tensors writes: the
     * scheme is refused as such, not as a malformed field */
    parse("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
          "{\"weights\": {\"num_bits\": 4, \"type\": \"float\", \"strategy\": "
          "\"tensor_group\"}, \"input_activations\": {\"num_bits\": 4, \"type\": "
          "\"float\", \"dynamic\": \"local\"}}}}",
          KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("weights float 4-bit"));
}

/* An ignore or targets regex that does not compile is named (re.match
 * raises on it; read here, it would never match: an ignored module read
 * as quantized, a target as untargeted). */
static void weight_quant_names_a_regex_that_does_not_compile(void)
{
    parse("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
          "{\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, \"type\": "
          "\"float\", \"strategy\": \"tensor\"}}}, \"ignore\": [\"lm_head\", "
          "\"re:.*(mlp.down_proj$\"]}",
          KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("quantization_config.ignore entry "
                                   "\"re:.*(mlp.down_proj$\" is not a valid regular "
                                   "expression"));
    parse("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": "
          "{\"targets\": [\"re:.*self_attn.(q|k|v_proj$\"], \"weights\": {\"num_bits\": "
          "8, \"type\": \"float\", \"strategy\": \"tensor\"}}}}",
          KVCAL_ERR_FORMAT);
    CU_ASSERT(kvcal_test_error_has("config_groups.g.targets entry "
                                   "\"re:.*self_attn.(q|k|v_proj$\" is not a valid"));
}

/* The file a config came from, for messages about a config that
 * quantizes no weight; "" without one. */
static void weight_quant_says_where_its_config_came_from(void)
{
    kvcal_weight_quant_t *q = parse(
        "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {}}", KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_weight_quant_method(q), KVCAL_WQ_NONE);
    CU_ASSERT_STRING_EQUAL(kvcal_weight_quant_source(q), "config.json");
    kvcal_weight_quant_destroy(q);
    CU_ASSERT_EQUAL(kvcal_weight_quant_parse(NULL, "config.json", &q), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(kvcal_weight_quant_source(q), "");
    kvcal_weight_quant_destroy(q);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(fp8_activation_formulas_follow_vllm),
    KVCAL_TEST(fp8_token_quotient_bytes_equal_the_division_for_bf16_rows),
    KVCAL_TEST(fp8_swiglu_quant_ref_rounds_to_bf16_before_quantizing),
    KVCAL_TEST(fp8_add_rmsnorm_quant_ref_rounds_the_residual_and_the_row_to_bf16),
    KVCAL_TEST(fp8_group_scales_are_laid_out_group_major),
    KVCAL_TEST(half_round_is_binary16_rounding),
    KVCAL_TEST(requant_follows_vllm_through_fp16),
    KVCAL_TEST(fp8_weight_scale_layout_pads_block_columns_to_four),
    KVCAL_TEST(fp8_linear_ref_is_the_dequantized_product),
    KVCAL_TEST(weight_quant_reads_compressed_tensors_fp8),
    KVCAL_TEST(weight_quant_reads_compressed_tensors_blocks_and_targets),
    KVCAL_TEST(weight_quant_reads_the_fp8_method),
    KVCAL_TEST(weight_quant_reads_modelopt),
    KVCAL_TEST(weight_quant_without_weight_scheme_is_none),
    KVCAL_TEST(weight_quant_refuses_other_schemes_naming_them),
    KVCAL_TEST(weight_quant_names_fields_of_the_wrong_type),
    KVCAL_TEST(weight_quant_names_a_regex_that_does_not_compile),
    KVCAL_TEST(weight_quant_says_where_its_config_came_from),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(fp8_linear, KVCAL_NEEDS_NOTHING, tests)
