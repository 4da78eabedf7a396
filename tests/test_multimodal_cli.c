/* tests/test_multimodal_cli.c: multimodal models calibrated on text, as a
 * user runs kvcal on them: the checkpoint scales are named as the model's
 * own weights name its language model's layers (language_model.model. as
 * Gemma 3 and Mistral 3 were released, model.language_model. as
 * transformers 4.52 and later save Qwen3-VL), and validate-scales refuses
 * a name vLLM's loader would not find (tests/engines/run.py checks the same
 * files against vLLM's own loaders). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "tests/test_util.h"

#define GOLDEN "tests/fixtures/golden/"
#define SMALL "--num-samples 2 --seq-len 24 --quiet"

/* Whether every tensor of dir's kv_scales.safetensors is named
 * <prefix>layers.<i>.self_attn.<k_scale|v_scale>, and there are some. */
static int scales_named(const char *dir, const char *prefix)
{
    char path[700];
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", dir);
    kvcal_safetensors_t *st = NULL;
    if (kvcal_safetensors_open(path, &st) != KVCAL_OK)
        return 0;
    int ok = kvcal_safetensors_count(st) > 0;
    for (int i = 0; i < kvcal_safetensors_count(st); i++) {
        const char *n = kvcal_safetensors_at(st, i)->name;
        const size_t len = strlen(prefix);
        ok &= !strncmp(n, prefix, len) && !strncmp(n + len, "layers.", 7) &&
              strstr(n, ".self_attn.") != NULL;
        if (!ok)
            fprintf(stderr, "\n%s: %s is not under %s", dir, n, prefix);
    }
    kvcal_safetensors_close(st);
    return ok;
}

/* validate-scales of dir: its exit code, and whether its stderr and
 * stdout hold needle (NULL: nothing asked). */
static int validate(const char *dir, const char *needle)
{
    char args[800], *out = NULL;
    snprintf(args, sizeof args, "validate-scales '%s'", dir);
    int rc = kvcal_test_run_kvcal(args, &out);
    if (needle && !(out && strstr(out, needle)) && !kvcal_test_kvcal_stderr_has(needle))
        rc = -2;
    free(out);
    return rc;
}

static void calibrate_names_the_scales_as_the_checkpoint_names_its_layers(void)
{
    static const struct {
        const char *model, *prefix;
    } cases[] = {
        {"gemma3_mm_swa8_local_global_bf16", "language_model.model."},
        {"mistral3_mm_gqa_bf16", "language_model.model."},
        {"qwen3_vl_mrope_qknorm_bf16", "model.language_model."},
        {"qwen2_5_vl_flat_mrope_bias_bf16", "model."},
        {"qwen2_vl_flat_mrope_bias_bf16", "model."},
        {"qwen3_vl_moe_stacked_e8_top3_bf16", "model.language_model."},
        {"llama4_mm_top1_chunk16_bf16", "language_model.model."},
        {"glm4v_moe_mm_mrope_e8_top3_bf16", "model.language_model."},
        {"mistral_mqa_fp16", "model."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *out = kvcal_test_golden_checkpoint_scales(cases[i].model);
        CU_ASSERT(scales_named(out, cases[i].prefix));
        CU_ASSERT_EQUAL(validate(out, "valid (0 errors"), 0);
    }
}

/* vLLM maps both wrapped layouts of Gemma 3, Mistral 3 and Qwen2.5-VL to
 * its language_model.model, a causal LM's model. for Mistral 3,
 * Qwen2.5-VL and Llama 4 alone (Llama 4's not transformers'
 * model.language_model.), and finds no module for a wrapped name in a
 * causal LM. */
static void validate_scales_refuses_a_layout_vllm_does_not_map(void)
{
    const char *out =
        kvcal_test_golden_checkpoint_scales("gemma3_mm_swa8_local_global_bf16");
    kvcal_test_rename_scales(out, "language_model.model.", "model.language_model.");
    CU_ASSERT_EQUAL(validate(out, "valid (0 errors"), 0);
    kvcal_test_rename_scales(out, "model.language_model.", "model.");
    CU_ASSERT_EQUAL(validate(out, "a causal LM's name, but the model keeps its language "
                                  "model in a multimodal one"),
                    1);
    out = kvcal_test_golden_checkpoint_scales("mistral3_mm_gqa_bf16");
    kvcal_test_rename_scales(out, "language_model.model.", "model.");
    CU_ASSERT_EQUAL(validate(out, "valid (0 errors"), 0);
    /* Qwen2.5-VL released flat, its layers under model.: a wrapped name
     * loads too */
    out = kvcal_test_golden_checkpoint_scales("qwen2_5_vl_flat_mrope_bias_bf16");
    kvcal_test_rename_scales(out, "model.", "model.language_model.");
    CU_ASSERT_EQUAL(validate(out, "valid (0 errors"), 0);
    /* Llama 4's loader maps a causal LM's model. to language_model.model.
     * itself, and no other name: transformers' own layout fails to load */
    out = kvcal_test_golden_checkpoint_scales("llama4_mm_top1_chunk16_bf16");
    kvcal_test_rename_scales(out, "language_model.model.", "model.");
    CU_ASSERT_EQUAL(validate(out, "valid (0 errors"), 0);
    kvcal_test_rename_scales(out, "model.", "model.language_model.");
    CU_ASSERT_EQUAL(validate(out, "which this model's vLLM loader does not map"), 1);
    out = kvcal_test_golden_checkpoint_scales("mistral_mqa_fp16");
    kvcal_test_rename_scales(out, "model.", "language_model.model.");
    CU_ASSERT_EQUAL(validate(out, "a multimodal model's name, but the model is a causal "
                                  "LM"),
                    1);
}

/* vllm-ascend's C8 names are model.layers.<i>: a multimodal model's are
 * refused in one line, nothing written. */
static void ascend_scales_of_a_multimodal_model_are_refused(void)
{
    char args[2048], out[600];
    snprintf(out, sizeof out, "%s", kvcal_test_path("mm-ascend"));
    snprintf(args, sizeof args,
             "calibrate --model " GOLDEN
             "gemma3_mm_swa8_local_global_bf16 --dataset '%s' " SMALL
             " --kv-dtype int8 --format ascend --out '%s'",
             kvcal_test_golden_ids(), out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("keeps its language model in a multimodal model"));
    FILE *f = fopen(out, "r");
    CU_ASSERT_PTR_NULL(f);
    if (f)
        fclose(f);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(calibrate_names_the_scales_as_the_checkpoint_names_its_layers),
    KVCAL_TEST(validate_scales_refuses_a_layout_vllm_does_not_map),
    KVCAL_TEST(ascend_scales_of_a_multimodal_model_are_refused),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(multimodal_cli, KVCAL_NEEDS_NOTHING, tests)
