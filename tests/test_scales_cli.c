/* tests/test_scales_cli.c: `kvcal validate-scales` and `kvcal convert` as a
 * user runs them: exit codes, one-line findings, JSON output, outputs that
 * never appear on failure (through kvcal_test_run_kvcal). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json_file.h"
#include "io/scales/sglang_loaders.h"
#include "tests/test_util.h"

#define LLAMA2 "tests/fixtures/llama2-7b"
#define CORPUS "tests/malformed/scales"

static void cli_validate_fixture_exits_0_at_tp1_and_1_at_tp2(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales " LLAMA2
                                         "/kv_cache_scales.json --model " LLAMA2
                                         " --tp 1",
                                         &out),
                    0);
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "legacy-json: valid (0 errors, 0 warnings)"));
    free(out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales " LLAMA2
                                         "/kv_cache_scales.json --model " LLAMA2
                                         " --tp 2",
                                         &out),
                    1);
    CU_ASSERT_PTR_NOT_NULL(
        out &&
        strstr(out, LLAMA2 "/kv_cache_scales.json: kv_cache.scaling_factor: 1 rank but "
                           "tp 2: sglang rejects the file and uses scale 1.0 for "
                           "every layer; it is for tp 1 (--tp 1); to serve at tp 2, "
                           "rewrite it (kvcal convert FILE --to legacy --tp 2)\n"));
    free(out);
}

static void cli_validate_json_lists_the_findings(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales " CORPUS
                                         "/zero_scale.json --model " CORPUS
                                         "/tiny --json",
                                         &out),
                    1);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    CU_ASSERT_FATAL(root != NULL);
    CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(root, "valid")));
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(root, "format")->valuestring,
                           "legacy-json");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(root, "errors")->valuedouble, 1);
    cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "findings"), 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(f, "severity")->valuestring, "error");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(f, "place")->valuestring,
                           "kv_cache.scaling_factor.0.0");
    cJSON_Delete(root);
}

static void cli_validate_strict_fails_on_warnings_and_usage_errors_exit_2(void)
{
    const char *text =
        "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": "
        "\"float8_e4m3fn\", \"scaling_factor\": {\"0\": {\"0\": 1.0, \"1\": "
        "0.01}}}}";
    const char *p = kvcal_test_path("cli_unit.json");
    kvcal_test_write_file(p, text, strlen(text));
    char args[1024];
    snprintf(args, sizeof args, "validate-scales %s --model " CORPUS "/tiny", p);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    snprintf(args, sizeof args, "validate-scales %s --model " CORPUS "/tiny --strict", p);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales", NULL), 2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales " LLAMA2
                                         "/kv_cache_scales.json --tp zero",
                                         NULL),
                    2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales no/such/file.json", NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("no/such/file.json: cannot open"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("validate-scales --help", NULL), 0);
}

static void cli_convert_legacy_to_kvcal_to_legacy_keeps_values(void)
{
    char args[1024], *a = NULL, *b = NULL;
    const char *k = kvcal_test_path("cli_k.json");
    snprintf(args, sizeof args,
             "convert " LLAMA2 "/kv_cache_scales.json --to kvcal --model " LLAMA2
             " --out %s",
             k);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    const char *l = kvcal_test_path("cli_l.json");
    snprintf(args, sizeof args, "convert %s --to legacy --out %s", k, l);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    cJSON *x = NULL, *y = NULL;
    a = kvcal_test_read_file(LLAMA2 "/kv_cache_scales.json", NULL);
    b = kvcal_test_read_file(l, NULL);
    x = cJSON_Parse(a);
    y = cJSON_Parse(b);
    cJSON *sx = cJSON_GetObjectItem(cJSON_GetObjectItem(x, "kv_cache"), "scaling_factor");
    cJSON *sy = cJSON_GetObjectItem(cJSON_GetObjectItem(y, "kv_cache"), "scaling_factor");
    CU_ASSERT_FATAL(sx && sy);
    cJSON *rx = cJSON_GetObjectItem(sx, "0"), *ry = cJSON_GetObjectItem(sy, "0");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rx), 32);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(ry), 32);
    for (cJSON *e = rx ? rx->child : NULL; e; e = e->next) {
        cJSON *o = cJSON_GetObjectItem(ry, e->string);
        CU_ASSERT(o && (float)o->valuedouble == (float)e->valuedouble);
    }
    cJSON_Delete(x);
    cJSON_Delete(y);
    free(a);
    free(b);
}

static void cli_convert_reports_losses_and_refuses_bad_input(void)
{
    char args[1024];
    const char *k = kvcal_test_path("cli_head.json");
    snprintf(args, sizeof args,
             "convert " CORPUS "/kvcal_heads_tp3.json --to kvcal --out %s", k);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    const char *l = kvcal_test_path("cli_head_legacy.json");
    snprintf(args, sizeof args, "convert %s --to legacy --tp 2 --out %s", k, l);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("lost: separate K and V scales"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("lost: per-head scales"));

    struct stat st;
    const char *z = kvcal_test_path("cli_zero.json");
    snprintf(args, sizeof args, "convert " CORPUS "/zero_scale.json --to kvcal --out %s",
             z);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT_NOT_EQUAL(stat(z, &st), 0);
    snprintf(args, sizeof args,
             "convert " LLAMA2 "/kv_cache_scales.json --to checkpoint --out %s", z);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal("convert " LLAMA2
                                         "/kv_cache_scales.json --to onnx --out x",
                                         NULL),
                    2);
}

/* A set the target cannot hold is refused naming the formats that can and
 * the options of both commands that choose them: convert's is --to (the
 * message said "--format ascend", calibrate's option, to a convert user). */
static void cli_convert_refusal_names_the_option_of_each_command(void)
{
    const char *text =
        "{\"format\": \"kvcal-kv-scales\", \"version\": 1, \"model\": "
        "{\"architecture\": \"LlamaForCausalLM\", \"model_type\": \"llama\", "
        "\"num_layers\": 2, \"num_attention_heads\": 8, \"num_kv_heads\": 4, "
        "\"head_dim\": 8}, \"dtype\": \"int8\", \"qmax\": 127, \"granularity\": "
        "\"tensor\", \"kv_shared\": false, \"observer\": {\"name\": \"minmax\", "
        "\"params\": {}}, \"provenance\": {\"dataset\": \"x\", \"num_samples\": 1, "
        "\"num_tokens\": 8, \"seed\": 0, \"tool_version\": \"0.1.0\"}, \"layers\": "
        "[{\"layer\": 0, \"k_scale\": 0.04, \"v_scale\": 0.08}, {\"layer\": 1, "
        "\"k_scale\": 0.041, \"v_scale\": 0.081}]}";
    const char *in = kvcal_test_path("cli_int8.json");
    const char *out = kvcal_test_path("cli_int8_legacy.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(in, text, strlen(text)), 0);
    char args[1024];
    snprintf(args, sizeof args, "convert %s --to kvcal --out %s", in, out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0); /* a valid int8 set */
    CU_ASSERT_EQUAL(remove(out), 0);
    snprintf(args, sizeof args, "convert %s --to legacy --out %s", in, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("int8 scales"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "write the kvcal format, ascend (vllm-ascend's C8) or checkpoint "
        "(compressed-tensors) with calibrate --format or convert --to\n"));
    char *err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NULL(err ? strstr(err, "--format ascend") : "no stderr");
    free(err);
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(out, &st), 0);
}

/* An output directory whose parent does not exist: one line naming the
 * path, the missing parent and the fix (it said "cannot create the
 * directory: No such file or directory"); nothing is created. */
static void cli_convert_into_a_missing_parent_names_it_and_the_fix(void)
{
    char args[2048], out[700], parent[600];
    snprintf(parent, sizeof parent, "%s/cli_nodir", kvcal_test_tmpdir());
    snprintf(out, sizeof out, "%s/x", parent);
    snprintf(args, sizeof args,
             "convert " LLAMA2 "/kv_cache_scales.json --to trtllm --out %s", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    char want[2048];
    snprintf(want, sizeof want,
             "%s: cannot create the directory: its parent directory %s does not exist; "
             "create it first or choose another output path\n",
             out, parent);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(want));
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(parent, &st), 0);
    snprintf(out, sizeof out, "%s/x.json", parent);
    snprintf(args, sizeof args,
             "convert " LLAMA2 "/kv_cache_scales.json --to kvcal --out %s", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("does not exist; create it first or choose "
                                          "another output path"));
    CU_ASSERT_NOT_EQUAL(stat(parent, &st), 0);
}

/* The rank count of the legacy file at `path` (its scaling_factor keys), -1
 * when it cannot be read. */
static int legacy_ranks(const char *path)
{
    cJSON *root = NULL;
    if (kvcal_json_load(path, &root))
        return -1;
    const cJSON *sf =
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "kv_cache"), "scaling_factor");
    const int n = cJSON_IsObject(sf) ? cJSON_GetArraySize(sf) : -1;
    cJSON_Delete(root);
    return n;
}

/* Without --tp a legacy or trtllm output keeps the tp its input was
 * written for, as --help says ("default: the file's"): a 2-rank legacy
 * file became a 1-rank one, which sglang at tp 2 rejects (scale 1.0 for
 * every layer), and a trtllm checkpoint of 2 ranks one of 1. */
static void cli_convert_keeps_the_rank_count_of_a_legacy_or_trtllm_input(void)
{
    char *text = kvcal_test_read_file(LLAMA2 "/kv_cache_scales.json", NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    cJSON *sf =
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "kv_cache"), "scaling_factor");
    cJSON_AddItemToObject(sf, "1", cJSON_Duplicate(cJSON_GetObjectItem(sf, "0"), 1));
    char *two = cJSON_Print(root);
    cJSON_Delete(root);
    const char *in = kvcal_test_path("cli_tp2_in.json");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(in, two, strlen(two)), 0);
    free(two);
    char args[2048], path[700];
    const char *out = kvcal_test_path("cli_tp2_out.json");
    snprintf(args, sizeof args, "convert %s --to legacy --model " LLAMA2 " --out %s", in,
             out);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("2 ranks)"));
    CU_ASSERT_EQUAL(legacy_ranks(out), 2);
    snprintf(args, sizeof args, "validate-scales %s --model " LLAMA2 " --tp 2", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    const char *trt = kvcal_test_path("cli_tp2_trt");
    snprintf(args, sizeof args, "convert %s --to trtllm --out %s", in, trt);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/rank1.safetensors", trt);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    const char *back = kvcal_test_path("cli_tp2_back.json");
    snprintf(args, sizeof args, "convert %s --to legacy --out %s", trt, back);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT_EQUAL(legacy_ranks(back), 2);
}

/* The loss notes say what the output loses, only once it is written: at
 * tp 4 each rank of 4 kv heads holds one, so no per-head scale is lost;
 * at tp 1 the max is over the 4 heads (it said "the all kv heads"); a
 * conversion that fails (an unquantized model for modelopt) writes no
 * "lost:" line. */
static void cli_convert_reports_only_the_losses_of_what_it_wrote(void)
{
    char args[2048], *err = NULL;
    const char *out = kvcal_test_path("cli_loss_tp4.json");
    snprintf(args, sizeof args,
             "convert " CORPUS "/kvcal_heads_tp3.json --to legacy --tp 4 --out %s", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("lost: separate K and V scales"));
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT(err && !strstr(err, "lost: per-head"));
    free(err);
    out = kvcal_test_path("cli_loss_tp1.json");
    snprintf(args, sizeof args,
             "convert " CORPUS "/kvcal_heads_tp3.json --to legacy --tp 1 --out %s", out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 0);
    CU_ASSERT(
        kvcal_test_kvcal_stderr_has("max over the 4 kv heads each rank holds at tp 1"));
    const char *dir = kvcal_test_path("cli_loss_modelopt");
    snprintf(args, sizeof args,
             "convert " CORPUS "/kvcal_heads_tp3.json --to modelopt --model " CORPUS
             "/tiny --out %s",
             dir);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("the model is not quantized"));
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT(err && !strstr(err, "lost:"));
    free(err);
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(dir, &st), 0);
}

/* An AWQ model gets no KV-cache method in vLLM, which skips k_scale /
 * v_scale: convert refuses to add them (exit 1) and writes nothing. */
static void cli_convert_refuses_a_model_whose_vllm_loader_skips_scales(void)
{
    char dir[600], path[700], args[2048];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("cli_awq_model"));
    mkdir(dir, 0755);
    const char *config =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 4, \"vocab_size\": 512, \"quantization_config\": "
        "{\"quant_method\": \"awq\", \"bits\": 4, \"group_size\": 128}}";
    snprintf(path, sizeof path, "%s/config.json", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, config, strlen(config)), 0);
    const char *out = kvcal_test_path("cli_awq_out");
    snprintf(args, sizeof args,
             "convert " CORPUS
             "/kvcal_heads_tp3.json --to checkpoint --model %s --out %s",
             dir, out);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has(
        "quantization_config.quant_method is \"awq\": vLLM gives its attention layers "
        "no KV-cache method"));
    struct stat st;
    snprintf(path, sizeof path, "%s/kv_scales.safetensors", out);
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);
    snprintf(args, sizeof args, "validate-scales " CORPUS "/ck_quant_method_awq");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, NULL), 1);
}

/* ERNIE 4.5's checkpoint scales under its attention's own names
 * (self_attn.attn.k_scale), the only ones sglang's loader of it takes
 * (vLLM's takes any); compressed-tensors' self_attn.k_scale are valid for
 * vLLM, with a warning that sglang does not load the model. */
static void cli_checkpoint_names_ernie45_scales_as_both_engines_load_them(void)
{
    const char *golden = "ernie45_moe_softmax_bias_e8_top3_bf16";
    const char *ck = kvcal_test_golden_checkpoint_scales(golden);
    char path[800], args[2048], *text = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", ck);
    cJSON *index = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_json_load(path, &index), KVCAL_OK);
    const cJSON *map = cJSON_GetObjectItem(index, "weight_map");
    CU_ASSERT_PTR_NOT_NULL(
        cJSON_GetObjectItem(map, "model.layers.2.self_attn.attn.k_scale"));
    CU_ASSERT_PTR_NOT_NULL(
        cJSON_GetObjectItem(map, "model.layers.2.self_attn.attn.v_scale"));
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(map, "model.layers.2.self_attn.k_scale"));
    cJSON_Delete(index);
    snprintf(args, sizeof args, "validate-scales '%s'", ck);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text && strstr(text, "valid (0 errors, 0 warnings)"));
    free(text);
    kvcal_test_rename_scales(ck, ".attn.", ".");
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text &&
              strstr(text, "Ernie4_5_MoeForCausalLM.load_weights looks the name up"));
    free(text);
}

/* validate-scales' output on checkpoint ck of golden model `name`: 1 when
 * it exits 0 and holds `needle` (NULL: says nothing of sglang). */
static int validate_says(const char *ck, const char *name, const char *needle)
{
    char args[1024], *text = NULL;
    snprintf(args, sizeof args, "validate-scales '%s'", ck);
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    const int ok =
        text && (needle ? strstr(text, needle) != NULL : strstr(text, "sglang") == NULL);
    if (!ok)
        fprintf(stderr, "%s: %s\n", name, text ? text : "(no output)");
    free(text);
    return ok;
}

/* validate-scales' output on the checkpoint scales kvcal writes for
 * golden model `name`, renamed from `from` to `to` first when from is not
 * NULL: 1 when it holds `needle` (NULL: says nothing of sglang). */
static int says_of_sglang(const char *name, const char *from, const char *to,
                          const char *needle)
{
    const char *ck = kvcal_test_golden_checkpoint_scales(name);
    if (from)
        kvcal_test_rename_scales(ck, from, to);
    return validate_says(ck, name, needle);
}

/* The same with K's names' `k_from` and V's `v_from` renamed `to`. */
static int says_of_sglang_kv(const char *name, const char *k_from, const char *v_from,
                             const char *to, const char *needle)
{
    const char *ck = kvcal_test_golden_checkpoint_scales(name);
    kvcal_test_rename_scales_or(ck, k_from, to, v_from, to);
    return validate_says(ck, name, needle);
}

/* What sglang 0.5.23's loader of each architecture does with a
 * checkpoint's K/V scale names (io/scales/sglang_loaders.c; make
 * test-engines runs sglang's own loaders): kvcal writes the name both
 * engines load, and validate-scales names the ones sglang skips (Qwen2's
 * loader has no kv-scale remapping), fails on (Granite's looks every name
 * up) or cannot hold at all (Qwen3's attention has no scale: every name
 * skipped; its legacy JSON loads). */
static void cli_checkpoint_scale_names_as_sglang_loads_them(void)
{
    CU_ASSERT(says_of_sglang("qwen2_gqa_bias_bf16", NULL, NULL, NULL));
    CU_ASSERT(
        says_of_sglang("qwen2_gqa_bias_bf16", ".attn.", ".",
                       "a self_attn name of Qwen2ForCausalLM: sglang 0.5.23 skips it: "
                       "Qwen2ForCausalLM.load_weights holds no parameter of that name"));
    CU_ASSERT(says_of_sglang("llama3_gqa_hd48_bf16", NULL, NULL, NULL));
    CU_ASSERT(says_of_sglang("llama3_gqa_hd48_bf16", "self_attn.", "self_attn.attn.",
                             "For sglang name K and V self_attn.k_scale / v_scale"));
    CU_ASSERT(says_of_sglang("granite_multipliers_bias_bf16", ".attn.", ".",
                             "sglang 0.5.23 does not load the model: "
                             "GraniteForCausalLM.load_weights looks the name up"));
    CU_ASSERT(says_of_sglang("qwen3_gqa_hd80_qknorm_bf16", NULL, NULL,
                             "Qwen3ForCausalLM's scales in sglang: sglang 0.5.23 skips "
                             "every K/V scale of this architecture: its Qwen3Attention "
                             "builds the RadixAttention without quant_config"));
    CU_ASSERT(says_of_sglang("qwen3_gqa_hd80_qknorm_bf16", NULL, NULL,
                             "sglang reads this model's scales from a legacy JSON"));
    CU_ASSERT(says_of_sglang("qwen3_moe_e8_top3_norm_bf16", NULL, NULL,
                             "its Qwen3MoeAttention builds the RadixAttention"));
    /* calibrate's note on the checkpoint it writes says so too */
    char args[2048], *text = NULL;
    snprintf(args, sizeof args,
             "calibrate --model tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16 "
             "--dataset '%s' --num-samples 2 --seq-len 24 --format checkpoint --out '%s'",
             kvcal_test_golden_ids(), kvcal_test_path("sglang_note_ck"));
    CU_ASSERT_EQUAL(kvcal_test_run_kvcal(args, &text), 0);
    CU_ASSERT(text && strstr(text, "sglang 0.5.23's class of this model holds no scale"));
    free(text);
    /* every name form, for K, V and Q */
    CU_ASSERT_EQUAL(kvcal_sglang_checkpoint_scale("MixtralForCausalLM", "v_scale", NULL),
                    KVCAL_SGLANG_SKIPS);
    CU_ASSERT_EQUAL(
        kvcal_sglang_checkpoint_scale("MixtralForCausalLM", "attn.q_scale", NULL),
        KVCAL_SGLANG_LOADS);
    CU_ASSERT_EQUAL(
        kvcal_sglang_checkpoint_scale("MixtralForCausalLM", "v_proj.v_scale", NULL),
        KVCAL_SGLANG_FAILS);
    CU_ASSERT_EQUAL(
        kvcal_sglang_checkpoint_scale("LlamaForCausalLM", "v_proj.output_scale", NULL),
        KVCAL_SGLANG_LOADS);
    CU_ASSERT_EQUAL(kvcal_sglang_checkpoint_scale("LlamaForCausalLM", "kv_scale", NULL),
                    KVCAL_SGLANG_UNKNOWN);
    CU_ASSERT_EQUAL(kvcal_sglang_checkpoint_scale("Olmo3ForCausalLM", "k_scale", NULL),
                    KVCAL_SGLANG_UNKNOWN);
    CU_ASSERT_STRING_EQUAL(kvcal_sglang_k_name("Qwen3NextForCausalLM"), "k_proj.k_scale");
    CU_ASSERT_STRING_EQUAL(kvcal_sglang_k_name("Qwen3ForCausalLM"), "k_scale");
}

/* The qkqkv_proj spelling of a fused-QKV model's K/V scale names, which
 * vLLM 0.32.0 loads as the attention's (base_config.py
 * get_cache_scale_mapper, weight_utils.py maybe_remap_kv_scale_name), is
 * read, and validate-scales names what sglang 0.5.23's loader of each
 * architecture does with it (io/scales/sglang_loaders.c; make test-engines
 * runs them): LlamaForCausalLM.load_weights' maybe_remap_kv_scale_name
 * makes it qkqkv_proj.attn.k_scale and skips it; Gemma 2's stacked mapping
 * renames its v_proj (qkqkqkv_proj: KeyError); HunYuan's loader, which
 * splits a ".qkv_proj" tensor (AssertionError), leaves ".qkqkv_proj" to
 * an attention without scales; Qwen3-Next's asserts a scale it holds no
 * parameter for is 1.0, under either fused name. */
static void cli_qkqkv_proj_names_as_sglang_loads_them(void)
{
    CU_ASSERT(says_of_sglang_kv("llama3_gqa_hd48_bf16", "self_attn.", "self_attn.",
                                "self_attn.qkqkv_proj.",
                                "a self_attn name of LlamaForCausalLM: sglang 0.5.23 "
                                "skips it: LlamaForCausalLM.load_weights finds no "
                                "parameter for it (maybe_remap_kv_scale_name's "
                                "qkqkv_proj.attn.k_scale"));
    CU_ASSERT(says_of_sglang_kv("gemma2_softcap_swa8_bf16", "self_attn.", "self_attn.",
                                "self_attn.qkqkv_proj.",
                                "sglang 0.5.23 does not load the model: "
                                "Gemma2ForCausalLM.load_weights renames qkqkv_proj (its "
                                "stacked q/k/v mapping's v_proj: qkqkqkv_proj)"));
    CU_ASSERT(says_of_sglang_kv("hunyuan_dense_qknorm_after_rope_bf16", "self_attn.",
                                "self_attn.", "self_attn.qkqkv_proj.",
                                "HunYuanDenseV1ForCausalLM's scales in sglang: sglang "
                                "0.5.23 skips every K/V scale of this architecture: its "
                                "HunYuanAttention builds the RadixAttention"));
    CU_ASSERT(says_of_sglang_kv("hunyuan_dense_qknorm_after_rope_bf16", "self_attn.",
                                "self_attn.", "self_attn.qkv_proj.",
                                "HunYuanMoEV1ForCausalLM.load_weights splits a qkv_proj "
                                "tensor"));
    for (int fused = 0; fused < 2; fused++)
        CU_ASSERT(says_of_sglang_kv("qwen3_next_gdn_moe_e8_top3_bf16", "k_proj.",
                                    "v_proj.", fused ? "qkqkv_proj." : "qkv_proj.",
                                    "sglang 0.5.23 does not load the model: "
                                    "Qwen3NextForCausalLM.load_weights drops "
                                    "\".self_attn\", finds no parameter and asserts"));
    /* K, V and Q alike, per architecture */
    static const struct {
        const char *arch;
        kvcal_sglang_outcome qkv, qkqkv;
    } rows[] = {
        {"Phi3ForCausalLM", KVCAL_SGLANG_SKIPS, KVCAL_SGLANG_SKIPS},
        {"Qwen2_5_VLForConditionalGeneration", KVCAL_SGLANG_SKIPS, KVCAL_SGLANG_SKIPS},
        {"MixtralForCausalLM", KVCAL_SGLANG_FAILS, KVCAL_SGLANG_FAILS},
        {"Ernie4_5_MoeForCausalLM", KVCAL_SGLANG_FAILS, KVCAL_SGLANG_FAILS},
        {"Qwen3NextForCausalLM", KVCAL_SGLANG_FAILS, KVCAL_SGLANG_FAILS},
        {"HunYuanMoEV1ForCausalLM", KVCAL_SGLANG_FAILS, KVCAL_SGLANG_NO_SCALES},
        {"Qwen3MoeForCausalLM", KVCAL_SGLANG_NO_SCALES, KVCAL_SGLANG_NO_SCALES},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        CU_ASSERT_EQUAL(
            kvcal_sglang_checkpoint_scale(rows[i].arch, "qkv_proj.v_scale", NULL),
            rows[i].qkv);
        CU_ASSERT_EQUAL(
            kvcal_sglang_checkpoint_scale(rows[i].arch, "qkqkv_proj.k_scale", NULL),
            rows[i].qkqkv);
        CU_ASSERT_EQUAL(
            kvcal_sglang_checkpoint_scale(rows[i].arch, "qkqkv_proj.q_scale", NULL),
            rows[i].qkqkv);
    }
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(cli_validate_fixture_exits_0_at_tp1_and_1_at_tp2),
    KVCAL_TEST(cli_validate_json_lists_the_findings),
    KVCAL_TEST(cli_validate_strict_fails_on_warnings_and_usage_errors_exit_2),
    KVCAL_TEST(cli_convert_legacy_to_kvcal_to_legacy_keeps_values),
    KVCAL_TEST(cli_convert_reports_losses_and_refuses_bad_input),
    KVCAL_TEST(cli_convert_refusal_names_the_option_of_each_command),
    KVCAL_TEST(cli_convert_into_a_missing_parent_names_it_and_the_fix),
    KVCAL_TEST(cli_convert_keeps_the_rank_count_of_a_legacy_or_trtllm_input),
    KVCAL_TEST(cli_convert_reports_only_the_losses_of_what_it_wrote),
    KVCAL_TEST(cli_convert_refuses_a_model_whose_vllm_loader_skips_scales),
    KVCAL_TEST(cli_checkpoint_names_ernie45_scales_as_both_engines_load_them),
    KVCAL_TEST(cli_checkpoint_scale_names_as_sglang_loads_them),
    KVCAL_TEST(cli_qkqkv_proj_names_as_sglang_loads_them),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(scales_cli, KVCAL_NEEDS_NOTHING, tests)
