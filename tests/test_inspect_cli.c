/* tests/test_inspect_cli.c: `kvcal inspect` as a user runs it on a model, a
 * scales file, statistics and token sets the CLI itself wrote, and bad
 * input. The binary is $KVCAL_BIN (set by `make test`), else build/kvcal. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "io/checkpoint/safetensors.h"
#include "tests/test_util.h"

#define MODEL "models/stories260K/stories260K.bin"
#define GOLDEN "tests/fixtures/golden"
#define LLAMA2 "tests/fixtures/llama2-7b"
#define TEXT "datasets/default_calibration.txt"
#define HD48 GOLDEN "/llama3_gqa_hd48_bf16"
#define KV_CONFIGS "tests/fixtures/configs/kv_cache"

/* Runs `kvcal ARGS`; *out / *err (may be NULL) receive stdout and stderr
 * (caller frees). Returns the exit code. */
static int run(const char *args, char **out, char **err)
{
    int rc = kvcal_test_run_kvcal(args, out);
    if (err)
        *err = kvcal_test_kvcal_stderr();
    return rc;
}

/* `kvcal inspect ARGS --json`, which must exit 0; the parsed report. */
static cJSON *inspect_json(const char *args)
{
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "inspect %s --json", args);
    CU_ASSERT_EQUAL(run(cmd, &out, NULL), 0);
    cJSON *root = out ? cJSON_Parse(out) : NULL;
    free(out);
    return root;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long long)sb.st_size;
}

/* A bad PATH: exit code `rc`, nothing on stdout, one line on stderr
 * containing `what`. */
static void check_refused(const char *args, int rc, const char *what)
{
    char *out = NULL, *err = NULL;
    CU_ASSERT_EQUAL(run(args, &out, &err), rc);
    CU_ASSERT_PTR_NOT_NULL(out && err);
    if (out && err) {
        CU_ASSERT_STRING_EQUAL(out, "");
        CU_ASSERT_PTR_NOT_NULL(strstr(err, what));
        CU_ASSERT_PTR_NOT_NULL(strchr(err, '\n'));
        CU_ASSERT_EQUAL(strchr(err, '\n') - err + 1, (long)strlen(err));
    }
    free(out);
    free(err);
}

static void inspect_llama2c_model_reports_shape_kv_bytes_and_tokenizer(void)
{
    cJSON *j = inspect_json(MODEL);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "model");
    CU_ASSERT_STRING_EQUAL(str(j, "source"), "llama2c");
    CU_ASSERT_EQUAL(num(j, "num_layers"), 5);
    CU_ASSERT_EQUAL(num(j, "num_attention_heads"), 8);
    CU_ASSERT_EQUAL(num(j, "num_kv_heads"), 4);
    CU_ASSERT_EQUAL(num(j, "head_dim"), 8);
    /* 2 (K and V) * 5 layers * 4 kv heads * 8 channels * 2 bytes */
    CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_bf16"), 640);
    CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_fp8"), 320);
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "rope_interleaved")));
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "supported")));
    /* the file: a 28-byte header, then fp32 weights and the RoPE table of
     * seq_len x head_dim floats that run.c writes after the final norm */
    CU_ASSERT_EQUAL(num(j, "parameters"), (file_size(MODEL) - 28) / 4 - 512 * 8);
    const cJSON *tok = cJSON_GetObjectItem(j, "tokenizer");
    CU_ASSERT_STRING_EQUAL(str(tok, "kind"), "llama2c");
    CU_ASSERT_EQUAL(num(tok, "vocab_size"), 512);
    CU_ASSERT_STRING_EQUAL(str(j, "kv_scales"), "none");
    cJSON_Delete(j);
}

static void inspect_shows_yarn_factor_original_context_and_attention_factor(void)
{
    cJSON *j = inspect_json(GOLDEN "/qwen2_yarn_bf16");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "rope_type"), "yarn");
    CU_ASSERT_EQUAL(num(j, "rope_factor"), 4);
    CU_ASSERT_EQUAL(num(j, "rope_original_max_position_embeddings"), 16);
    CU_ASSERT_EQUAL(num(j, "rope_attention_factor"), 0.1 * log(4.0) + 1.0);
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "supported")));
    CU_ASSERT_EQUAL(num(j, "query_scaling_from"), 0);
    cJSON_Delete(j);
    /* Ministral 3's yarn (mscale and mscale_all_dim equal: factor 1) and
     * where its queries' scaling starts; MiniMax-M2's rotary_dim */
    j = inspect_json(GOLDEN "/mistral3_ministral3_yarn_bf16");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_EQUAL(num(j, "rope_attention_factor"), 1.0);
    CU_ASSERT_EQUAL(num(j, "query_scaling_from"), 64);
    cJSON_Delete(j);
    j = inspect_json(GOLDEN "/minimax_m2_qknorm_all_rot8_e8_top3_bf16");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_EQUAL(num(j, "rope_rotary_dim"), 8);
    CU_ASSERT_EQUAL(num(j, "rope_theta"), 5000000.0);
    cJSON_Delete(j);
}

/* An FP8 checkpoint: its weights' dtype and how the engine serves them, in
 * the text and the JSON. */
static void inspect_fp8_checkpoint_shows_the_weight_scheme(void)
{
    cJSON *j = inspect_json(GOLDEN "/fp8_llama_modelopt_tensor_static");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "weight_dtype"), "F8_E4M3");
    CU_ASSERT_STRING_EQUAL(
        str(j, "weight_scheme"),
        "modelopt FP8: FP8 e4m3 weights per-tensor, activations static "
        "per-tensor");
    cJSON_Delete(j);
    char *out = NULL;
    CU_ASSERT_EQUAL(
        kvcal_test_run_kvcal("inspect " GOLDEN "/fp8_qwen3_ct_channel_token", &out), 0);
    CU_ASSERT(out && strstr(out, "  weight scheme   compressed-tensors: FP8 e4m3 weights "
                                 "per-channel, activations dynamic per-token\n"));
    free(out);
}

static void inspect_hf_checkpoint_counts_every_weight_and_reads_rope(void)
{
    cJSON *j = inspect_json(GOLDEN "/llama3_gqa_hd48_bf16");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "architecture"), "LlamaForCausalLM");
    CU_ASSERT_STRING_EQUAL(str(j, "weight_dtype"), "BF16");
    CU_ASSERT_STRING_EQUAL(str(j, "rope_type"), "llama3");
    CU_ASSERT_EQUAL(num(j, "rope_theta"), 500000);
    CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(j, "rope_interleaved")));
    CU_ASSERT_EQUAL(num(j, "num_kv_heads"), 3);
    CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_bf16"), 2 * 2 * 3 * 48 * 2);
    /* every tensor is bf16: parameters = (size - 8 - header) / 2 */
    FILE *f = fopen(GOLDEN "/llama3_gqa_hd48_bf16/model.safetensors", "rb");
    uint64_t header = 0;
    CU_ASSERT_FATAL(f && fread(&header, 8, 1, f) == 1);
    fclose(f);
    long long size = file_size(GOLDEN "/llama3_gqa_hd48_bf16/model.safetensors");
    CU_ASSERT_EQUAL(num(j, "parameters"), (double)(size - 8 - (long long)header) / 2);
    cJSON_Delete(j);

    /* the same checkpoint with calibrated scales written into it */
    char args[4096], dir[1024], ids[1024];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("llama3"));
    snprintf(ids, sizeof ids, "%s", kvcal_test_path("ids.jsonl"));
    const char *lines = "{\"input_ids\": [1, 5, 9, 33, 2, 7, 127, 64, 3, 8, 100, 4]}\n"
                        "{\"input_ids\": [1, 6, 10, 34, 3, 8, 126, 65, 4, 9, 101, 5]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, lines, strlen(lines)), 0);
    snprintf(args, sizeof args, "cp -r " GOLDEN "/llama3_gqa_hd48_bf16 '%s'", dir);
    CU_ASSERT_EQUAL_FATAL(system(args), 0);
    snprintf(args, sizeof args,
             "calibrate --model %s --dataset %s --num-samples 2 --seq-len 12 --format "
             "checkpoint --out %s --quiet",
             dir, ids, dir);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    j = inspect_json(dir);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "model");
    CU_ASSERT_STRING_EQUAL(str(j, "kv_scales"),
                           "present (per-tensor, 2 layers x 3 kv heads)");
    CU_ASSERT_EQUAL(num(j, "parameters"), (double)(size - 8 - (long long)header) / 2);
    cJSON_Delete(j);

    j = inspect_json(GOLDEN "/qwen3_gqa_hd80_qknorm_bf16/model.safetensors");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "qk_norm")));
    CU_ASSERT_EQUAL(num(j, "head_dim"), 80);
    cJSON_Delete(j);
}

/* gpt-oss with MXFP4 experts: a blocks tensor holds two values a byte
 * (98304 of this fixture's 166860 parameters), its scales are no
 * parameters; the projections' dtype is the weights'. */
static void inspect_counts_mxfp4_experts_as_their_values(void)
{
    cJSON *j = inspect_json(GOLDEN "/gpt_oss_hd64_swa16_e4_top2_mxfp4");
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "architecture"), "GptOssForCausalLM");
    CU_ASSERT_EQUAL(num(j, "parameters"), 166860);
    CU_ASSERT_STRING_EQUAL(str(j, "weight_dtype"), "BF16");
    CU_ASSERT_EQUAL(num(j, "num_experts"), 4);
    CU_ASSERT_EQUAL(num(j, "sliding_window"), 16);
    CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "kv_layout_known")));
    cJSON_Delete(j);
}

static void inspect_unsupported_model_prints_its_config_and_why(void)
{
    char *out = NULL;
    CU_ASSERT_EQUAL(run("inspect " LLAMA2, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "not supported: "));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "no model.safetensors"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "32 heads, 32 kv heads (MHA 1:1)"));
    /* 2 * 32 layers * 32 kv heads * 128 channels * 2 bytes */
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "524288 bytes/token in bf16, 262144 in fp8"));
    free(out);
}

/* The largest sizes config.json may state (layers, heads, kv heads and
 * head_dim at 65536, hidden at 2^20) and a context near INT_MAX: the KV bytes
 * per token (2 * 2^16 layers * 2^16 kv heads * 2^16 channels * 2 bytes =
 * 2^50, past int) and per sequence (2^50 * 2e9, past int64) print without
 * overflow. */
static void inspect_config_with_huge_sizes_reports_kv_bytes_without_overflow(void)
{
    const char *dir = kvcal_test_path("huge_config");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    char path[600], cmd[700], *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *cfg =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
        "\"num_hidden_layers\": 65536, \"hidden_size\": 1048576, "
        "\"num_attention_heads\": 65536, \"head_dim\": 65536, "
        "\"max_position_embeddings\": 2000000000}";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(cmd, sizeof cmd, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(cmd, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(
        out && strstr(out, "1.12589990684262e+15 bytes/token in bf16, 562949953421312 "
                           "in fp8 (2147483648000000000.0 / 1073741824000000000.0 MiB "
                           "per 2000000000-token sequence)"));
    free(out);
}

static void inspect_legacy_scales_lists_every_layer_as_in_the_file(void)
{
    cJSON *j = inspect_json(LLAMA2 "/kv_cache_scales.json");
    char *text = kvcal_test_read_file(LLAMA2 "/kv_cache_scales.json", NULL);
    cJSON *file = text ? cJSON_Parse(text) : NULL;
    CU_ASSERT_FATAL(j != NULL && file != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "scales");
    CU_ASSERT_STRING_EQUAL(str(j, "format"), "legacy-json");
    CU_ASSERT_EQUAL(num(j, "num_layers"), 32);
    const cJSON *rank0 = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(file, "kv_cache"), "scaling_factor"),
        "0");
    const cJSON *layers = cJSON_GetObjectItem(j, "layers");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), 32);
    for (int l = 0; l < 32; l++) {
        char key[16];
        snprintf(key, sizeof key, "%d", l);
        float want = (float)num(rank0, key);
        CU_ASSERT_EQUAL((float)num(cJSON_GetArrayItem(layers, l), "k_scale"), want);
        CU_ASSERT_EQUAL((float)num(cJSON_GetArrayItem(layers, l), "v_scale"), want);
    }
    cJSON_Delete(file);
    cJSON_Delete(j);
    free(text);
}

/* The statistics of a mixture of experts: each layer's tokens per expert,
 * every valid token counted once for each of its top-k (GLM: a dense first
 * layer, then top-3), in the JSON and in the text's experts lines. */
static void inspect_stats_shows_the_tokens_each_expert_received(void)
{
    char args[2048], *out = NULL;
    const char *ids = kvcal_test_path("moe_ids.jsonl"), *stats = kvcal_test_path("moe.h5");
    FILE *f = fopen(ids, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int doc = 0; doc < 6; doc++) {
        fprintf(f, "{\"input_ids\": [1");
        for (int t = 1; t < 24; t++)
            fprintf(f, ", %d", 2 + (doc * 31 + t * 17) % 120);
        fprintf(f, "]}\n");
    }
    fclose(f);
    snprintf(args, sizeof args,
             "calibrate --model " GOLDEN "/glm4_moe_dense1_sigmoid_e8_top3_bf16 --dataset %s "
             "--num-samples 6 --seq-len 24 --quiet --out %s --stats %s",
             ids, kvcal_test_path("moe_scales.json"), stats);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    cJSON *st = inspect_json(stats);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    const cJSON *layers = cJSON_GetObjectItem(st, "layers");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(layers), 3);
    for (int l = 0; l < 3; l++) {
        const cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(layers, l), "expert_tokens");
        CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(c), 8);
        double sum = 0;
        for (int e = 0; e < 8; e++)
            sum += cJSON_GetArrayItem(c, e)->valuedouble;
        CU_ASSERT_EQUAL(sum, l == 0 ? 0 : 6 * 24 * 3);
    }
    cJSON_Delete(st);
    snprintf(args, sizeof args, "inspect %s", stats);
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "experts (8 a layer)"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "a dense layer (no routing)"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, " cold"));
    free(out);
}

/* A statistics file with bytes flipped past its superblock: one line that
 * says it could not be read, as HDF5 would otherwise add its own lines when
 * the program exits (Debian 12's HDF5 1.10.8: "infinite loop closing
 * library"). */
static void inspect_refuses_a_corrupted_statistics_file_in_one_line(void)
{
    char args[2048], stats[1024], bad[1024];
    snprintf(stats, sizeof stats, "%s", kvcal_test_path("intact.h5"));
    snprintf(bad, sizeof bad, "%s", kvcal_test_path("corrupted.h5"));
    snprintf(args, sizeof args,
             "calibrate --model " MODEL " --num-samples 2 --seq-len 16 --quiet --out %s "
             "--stats %s",
             kvcal_test_path("intact.json"), stats);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    FILE *f = fopen(stats, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 4096 && n < sizeof buf);
    unsigned x = 1;
    for (int i = 0; i < 200; i++) { /* past the superblock's 48 bytes */
        x = x * 1103515245u + 12345u;
        buf[48 + (x >> 8) % (n - 48)] ^= 0xff;
    }
    f = fopen(bad, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(buf, 1, n, f), n);
    fclose(f);
    /* HDF5 itself leaks on such a file: a sanitizer build's leak report
       would be lines of HDF5's, not kvcal's */
    snprintf(args, sizeof args, "ASAN_OPTIONS=detect_leaks=0 \"$KVCAL\" inspect '%s'", bad);
    char *out = NULL, *err = NULL;
    CU_ASSERT_EQUAL(kvcal_test_run_command(args, &out), 1);
    err = kvcal_test_kvcal_stderr();
    CU_ASSERT_FATAL(out && err);
    CU_ASSERT_STRING_EQUAL(out, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "corrupted.h5: could not read"));
    CU_ASSERT_PTR_NOT_NULL(strchr(err, '\n'));
    CU_ASSERT_EQUAL(strchr(err, '\n') - err + 1, (long)strlen(err));
    free(out);
    free(err);
}

static void inspect_stats_absmax_matches_the_scales_of_the_same_run(void)
{
    char args[2048];
    const char *out = kvcal_test_path("calib");
    char stats[1024];
    snprintf(stats, sizeof stats, "%s", kvcal_test_path("stats.h5"));
    snprintf(args, sizeof args,
             "calibrate --model " MODEL
             " --granularity head --format all --num-samples 4 "
             "--seq-len 32 --quiet --out %s --stats %s",
             out, stats);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    cJSON *st = inspect_json(stats);
    snprintf(args, sizeof args, "inspect %s", out);
    check_refused(args, 1,
                  "(it holds kv_cache_scales.json, kvcal_scales.json, checkpoint/: give "
                  "one of them)");
    snprintf(args, sizeof args, "%s/kvcal_scales.json", out);
    cJSON *sc = inspect_json(args);
    snprintf(args, sizeof args, "%s/checkpoint", out);
    cJSON *ck = inspect_json(args);
    CU_ASSERT_FATAL(st && sc && ck);
    CU_ASSERT_STRING_EQUAL(str(st, "kind"), "stats");
    CU_ASSERT_STRING_EQUAL(str(sc, "granularity"), "head");
    CU_ASSERT_STRING_EQUAL(str(ck, "format"), "checkpoint");
    CU_ASSERT_STRING_EQUAL(str(cJSON_GetObjectItem(st, "provenance"), "observer"),
                           "minmax");
    const cJSON *sl = cJSON_GetObjectItem(st, "layers"),
                *cl = cJSON_GetObjectItem(sc, "layers");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(sl), 5);
    for (int l = 0; l < 5; l++) {
        const cJSON *s = cJSON_GetArrayItem(sl, l), *c = cJSON_GetArrayItem(cl, l);
        CU_ASSERT_EQUAL(num(s, "tokens"), 4 * 32);
        /* minmax: the scales' absmax is the statistics' max over heads and
         * channels, exactly */
        CU_ASSERT_EQUAL((float)num(cJSON_GetObjectItem(s, "k"), "absmax"),
                        (float)num(c, "k_absmax"));
        CU_ASSERT_EQUAL((float)num(cJSON_GetObjectItem(s, "v"), "absmax"),
                        (float)num(c, "v_absmax"));
        CU_ASSERT(num(cJSON_GetObjectItem(s, "k"), "top_channel") < 8);
        CU_ASSERT(num(cJSON_GetObjectItem(s, "k"), "top_over_mean") >= 1.0);
        CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(c, "heads")), 4);
    }
    cJSON_Delete(st);
    cJSON_Delete(sc);
    cJSON_Delete(ck);
}

static void inspect_token_sets_count_padding_and_decode_samples(void)
{
    char args[2048], h5[1024], jl[1024], *out = NULL;
    snprintf(h5, sizeof h5, "%s", kvcal_test_path("tokens.h5"));
    snprintf(jl, sizeof jl, "%s", kvcal_test_path("tokens.jsonl"));
    snprintf(args, sizeof args,
             "tokenize --dataset " TEXT " --model " MODEL
             " --no-pack --seq-len 256 -n 5 -q --output %s",
             h5);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    snprintf(args, sizeof args, "%s --decode 2 --model " MODEL, h5);
    cJSON *j = inspect_json(args);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "tokens");
    CU_ASSERT_EQUAL(num(j, "num_samples"), 5);
    CU_ASSERT_EQUAL(num(j, "seq_len"), 256);
    CU_ASSERT_EQUAL(num(j, "num_tokens") + num(j, "padding"), 5 * 256);
    CU_ASSERT(num(j, "padding") > 0);
    CU_ASSERT_STRING_EQUAL(str(j, "tokenizer_kind"), "llama2c");
    /* one document per sample, cut at 256 tokens: each decodes to the start
     * of a document of the dataset */
    char *text = kvcal_test_read_file(TEXT, NULL);
    const cJSON *dec = cJSON_GetObjectItem(j, "decoded");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(dec), 2);
    for (int i = 0; i < cJSON_GetArraySize(dec); i++) {
        const char *d = cJSON_GetArrayItem(dec, i)->valuestring;
        CU_ASSERT(strlen(d) > 100);
        CU_ASSERT_PTR_NOT_NULL(text && strstr(text, d));
    }
    free(text);
    cJSON_Delete(j);

    snprintf(args, sizeof args,
             "tokenize --dataset " TEXT " --model " MODEL
             " --format jsonl -q --output %s",
             jl);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    snprintf(args, sizeof args, "inspect %s", jl);
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "token ids (jsonl)"));
    free(out);
}

static void inspect_bad_input_gives_one_line_and_the_exit_code(void)
{
    char args[2048];
    const char *garbage = kvcal_test_path("garbage.bin");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(garbage, "\x01\x02 not a model\n", 15),
                          0);
    snprintf(args, sizeof args, "inspect %s", garbage);
    check_refused(args, 1, "not a model, scales file, statistics file or token set");
    snprintf(args, sizeof args, "inspect %s", kvcal_test_tmpdir());
    check_refused(args, 1, "without config.json");
    snprintf(args, sizeof args, "inspect %s", kvcal_test_path("missing.json"));
    check_refused(args, 2, "no such file or directory");
    check_refused("inspect tests/malformed/scales/zero_scale.json", 1,
                  "kvcal validate-scales");
    check_refused("inspect", 2, "exactly one PATH");
    snprintf(args, sizeof args, "inspect " MODEL " --tokenizer %s",
             kvcal_test_path("missing.model"));
    check_refused(args, 2, "cannot open tokenizer");
    check_refused("inspect " MODEL " --decode many", 2, "--decode");
    snprintf(args, sizeof args, "inspect %s --decode 1", garbage);
    check_refused(args, 1, "not a model");
}

/* A '/' after a file's name: stat() says ENOTDIR, and the error says so,
 * naming the file (it said "no such file or directory", which the file
 * plainly is not). */
static void inspect_slash_after_a_file_says_not_a_directory(void)
{
    char args[2048], want[1400];
    const char *file = kvcal_test_path("some_file.txt");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(file, "text\n", 5), 0);
    snprintf(args, sizeof args, "inspect %s/", file);
    snprintf(want, sizeof want,
             "%s/: not a directory: %s is a file; remove the trailing '/'\n", file, file);
    check_refused(args, 2, want);
    snprintf(args, sizeof args, "inspect %s/config.json", file);
    snprintf(want, sizeof want, "%s is a file, not a directory; check the path", file);
    check_refused(args, 2, want);
    char *err = kvcal_test_kvcal_stderr();
    CU_ASSERT_PTR_NULL(err ? strstr(err, "no such file") : "no stderr");
    free(err);
}

/* `cmd` through the shell, which must succeed. */
static void sh(const char *fmt, const char *a, const char *b)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
}

/* `kvcal inspect PATH`: exit 1, the model described from its config.json on
 * stdout, one line on stderr containing `what`. */
static void check_broken_model(const char *path, const char *what)
{
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "inspect %s", path);
    CU_ASSERT_EQUAL(run(args, &out, &err), 1);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "invalid: its weights do not load"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "layers          2, hidden 48"));
    CU_ASSERT_PTR_NOT_NULL(err && strstr(err, what));
    CU_ASSERT(err && strchr(err, '\n') &&
              strchr(err, '\n') - err + 1 == (long)strlen(err));
    if (err && !strstr(err, what))
        fprintf(stderr, "\n  %s: %s", path, err);
    free(out);
    free(err);
}

/* A truncated shard, a header that is not JSON and a shard the index names
 * but the directory lacks are broken checkpoints: the config is described,
 * the finding printed, exit 1, whether or not kvcal runs the architecture;
 * an intact checkpoint of an architecture kvcal does not run is valid
 * (exit 0, "not supported"). */
static void inspect_broken_checkpoint_describes_config_and_exits_1(void)
{
    char dir[1024], path[1100], *out = NULL;
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("truncated"));
    sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    sh("head -c 100000 " HD48 "/model.safetensors > %s%s", path, "");
    check_broken_model(dir, "truncated");
    check_broken_model(path, "truncated");
    cJSON *j = NULL;
    snprintf(path, sizeof path, "inspect %s --json", dir);
    CU_ASSERT_EQUAL(run(path, &out, NULL), 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out && (j = cJSON_Parse(out)));
    CU_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(j, "valid")));
    CU_ASSERT_PTR_NOT_NULL(strstr(str(j, "error"), "truncated"));
    CU_ASSERT_EQUAL(num(j, "num_layers"), 2);
    cJSON_Delete(j);
    free(out);

    /* the same weights under an architecture kvcal does not run */
    snprintf(path, sizeof path, "%s/config.json", dir);
    sh("sed -i 's/LlamaForCausalLM/FooForCausalLM/' %s%s", path, "");
    check_broken_model(dir, "truncated");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    sh("cp " HD48 "/model.safetensors %s%s", path, "");
    snprintf(path, sizeof path, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(path, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "not supported: "));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "'FooForCausalLM'"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "0.11M parameters"));
    free(out);

    /* a config that needs a layer the weights do not hold */
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("missing_tensor"));
    sh("mkdir %s && cp " HD48 "/model.safetensors %s", dir, dir);
    sh("sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 3/' " HD48
       "/config.json > %s/config.json%s",
       dir, "");
    char *saved = kvcal_test_read_file(HD48 "/config.json", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(saved && strstr(saved, "\"num_hidden_layers\": 2"));
    free(saved);
    snprintf(path, sizeof path, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(path, &out, NULL), 1);
    CU_ASSERT_PTR_NOT_NULL(kvcal_test_kvcal_stderr_has("model.layers.2."));
    free(out);

    /* FP8 weights: a valid checkpoint calibrate does not run, named by the
     * weights' dtype (config.json says bfloat16) */
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("fp8_weights"));
    sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
    static uint8_t zeros[144 * 48];
    const kvcal_tensor_out fp8[] = {
        {"model.layers.0.input_layernorm.weight", KVCAL_DTYPE_F8_E4M3, 1, {48}, zeros},
        {"model.layers.0.self_attn.k_proj.weight",
         KVCAL_DTYPE_F8_E4M3,
         2,
         {144, 48},
         zeros}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_write(path, fp8, 2, NULL), KVCAL_OK);
    cJSON *f8 = inspect_json(dir);
    CU_ASSERT_FATAL(f8 != NULL);
    CU_ASSERT_STRING_EQUAL(str(f8, "weight_dtype"), "F8_E4M3");
    CU_ASSERT_PTR_NOT_NULL(strstr(str(f8, "refused"), "has dtype F8_E4M3"));
    CU_ASSERT(cJSON_IsTrue(cJSON_GetObjectItem(f8, "valid")));
    cJSON_Delete(f8);

    snprintf(dir, sizeof dir, "%s", kvcal_test_path("bad_header"));
    sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
    sh("cp tests/malformed/safetensors/header_not_json.safetensors "
       "%s/model.safetensors%s",
       dir, "");
    check_broken_model(dir, "model.safetensors");

    snprintf(dir, sizeof dir, "%s", kvcal_test_path("missing_shard"));
    sh("mkdir %s && cp " HD48 "/config.json " HD48 "/model.safetensors %s", dir, dir);
    const char *index = "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\", "
                        "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}";
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, index, strlen(index)), 0);
    check_broken_model(dir, "model-00002-of-00002.safetensors");
}

/* A model.safetensors.index.json that does not parse, has no weight_map
 * object or an empty one is a broken checkpoint (exit 1), as an index
 * naming a missing shard is; before, it was "not supported" and valid
 * (exit 0), as a directory with no weights at all still is. */
static void inspect_damaged_index_is_a_broken_checkpoint(void)
{
    static const char *const index[] = {"{\"weight_map\": {\"model.norm.weight\": \"mod",
                                        "{\"weight_map\": []}", "{\"weight_map\": {}}"};
    static const char *const what[] = {"unterminated string", "no \"weight_map\" object",
                                       "weight_map is empty"};
    char dir[1024], path[1100], name[64];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "damaged_index%d", i);
        snprintf(dir, sizeof dir, "%s", kvcal_test_path(name));
        sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, index[i], strlen(index[i])), 0);
        check_broken_model(dir, what[i]);
    }
    char *out = NULL, args[1200];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("no_weights"));
    sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
    snprintf(args, sizeof args, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "not supported: "));
    free(out);
}

/* --decode with a tokenizer that has no token for an id of the set: exit 1
 * before anything is printed, naming the file, the sample, the position
 * and the tokenizer (before: half a report, an error without the file,
 * exit 2). */
static void inspect_decode_of_ids_outside_the_tokenizer_names_sample_and_position(void)
{
    char args[2048];
    const char *jl = kvcal_test_path("big_ids.jsonl");
    const char *ids = "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 2, 99999]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(jl, ids, strlen(ids)), 0);
    snprintf(args, sizeof args, "inspect %s --decode 2 --model " MODEL, jl);
    check_refused(args, 1,
                  "big_ids.jsonl: sample 1: id 99999 at position 2 is outside the "
                  "vocabulary (512 tokens, ids 0 to 511) of the tokenizer beside " MODEL);
    snprintf(args, sizeof args,
             "inspect %s --decode 2 --tokenizer models/stories260K/tok512.bin", jl);
    check_refused(args, 1, "of models/stories260K/tok512.bin; decode with the tokenizer");
    snprintf(args, sizeof args, "inspect %s --decode 1 --model " MODEL, jl);
    CU_ASSERT_EQUAL(run(args, NULL, NULL), 0); /* sample 1 is not decoded */
}

/* A llama2.c .bin that does not load is an error even when a config.json
 * stands beside it (which is not its description). */
static void inspect_broken_llama2c_beside_a_config_is_an_error(void)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("l2c"));
    sh("mkdir %s && cp " HD48 "/config.json %s", dir, dir);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    sh("head -c 50000 " MODEL " > %s%s", path, "");
    char args[1200];
    snprintf(args, sizeof args, "inspect %s", path);
    check_refused(args, 1, "truncated");
}

/* A llama2.c header whose dim / n_heads is odd (a file of exactly the size
 * it implies) is not llama2.c's: its RoPE pairs a head's channels. Before,
 * it was described and calibrated, rotating 2 of 3 channels a head. */
static void inspect_llama2c_with_an_odd_head_size_is_refused(void)
{
    const int32_t h[7] = {6, 8, 1, 2, 1, 300, 4}; /* head size 3 */
    const int64_t D = 6, F = 8, V = 300, kv = 3, hs = 3;
    const int64_t floats =
        V * D + D + D * D + 2 * kv * D + D * D + D + 3 * F * D + D + 4 * hs;
    size_t len = sizeof h + (size_t)floats * sizeof(float);
    char *bin = calloc(1, len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bin);
    memcpy(bin, h, sizeof h);
    const char *path = kvcal_test_path("odd_head.bin");
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, bin, len), 0);
    free(bin);
    char args[1200];
    snprintf(args, sizeof args, "inspect %s", path);
    check_refused(args, 1,
                  "odd_head.bin: header dim=6 n_heads=2 gives an odd head size 3");
}

/* A model directory <tmp>/<name> whose config.json is `text`, or a copy of
 * the file `copy`, and which holds no weights; its path into dir. */
static void config_dir(const char *name, const char *text, const char *copy, char *dir,
                       size_t n)
{
    char path[1100];
    snprintf(dir, n, "%s", kvcal_test_path(name));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *owned = copy ? kvcal_test_read_file(copy, NULL) : NULL;
    if (copy)
        text = owned;
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, text, strlen(text)), 0);
    free(owned);
}

/* MLA (DeepSeek-V2/V3, Kimi K2) caches one latent entry of kv_lora_rank +
 * qk_rope_head_dim values per token and layer; Qwen3-Next caches K and V in
 * its full-attention layers only (full_attention_interval, or layer_types as
 * transformers 5 writes it). The expected bytes come from the fields
 * transformers derives (tests/make_config_fixtures.py). */
static void inspect_counts_kv_bytes_of_mla_and_hybrid_models(void)
{
    cJSON *expected = NULL;
    char *text = kvcal_test_read_file(KV_CONFIGS "/expected.json", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text && (expected = cJSON_Parse(text)));
    int n = 0;
    for (const cJSON *e = expected->child; e; e = e->next, n++) {
        char file[512], dir[1024];
        snprintf(file, sizeof file, KV_CONFIGS "/%s.json", e->string);
        config_dir(e->string, NULL, file, dir, sizeof dir);
        cJSON *j = inspect_json(dir);
        CU_ASSERT_FATAL(j != NULL);
        int mla = !strcmp(str(e, "kv_layout"), "mla");
        CU_ASSERT_STRING_EQUAL(str(j, "kv_layout"), str(e, "kv_layout"));
        CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_bf16"),
                        num(e, "kv_bytes_per_token_bf16"));
        CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_fp8"),
                        num(e, "kv_bytes_per_token_bf16") / 2);
        CU_ASSERT_EQUAL(num(j, "kv_layers"), num(e, "kv_layers"));
        CU_ASSERT_EQUAL(num(j, "num_layers"), num(e, "num_layers"));
        CU_ASSERT_EQUAL(num(j, "head_dim"), num(e, "head_dim"));
        CU_ASSERT_EQUAL(num(j, "kv_lora_rank"), num(e, "kv_lora_rank"));
        CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "kv_layout_known")));
        CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(j, "supported")));
        CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(j, "valid")));
        if (mla) {
            CU_ASSERT_STRING_EQUAL(str(j, "attention"),
                                   "MLA (kv_lora_rank 512, rope 64)");
            /* calibrate runs MLA, its released block-wise FP8 weights
             * (V3, Kimi K2) too: only the missing weights refuse it */
            CU_ASSERT_PTR_NOT_NULL(strstr(str(j, "refused"), "no model.safetensors"));
            CU_ASSERT_EQUAL(num(j, "rope_rotary_dim"), 64);
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(str(j, "kv_layout_note"), "12 of 48 layers"));
        }
        cJSON_Delete(j);
    }
    CU_ASSERT(n >= 7);
    cJSON_Delete(expected);
    free(text);

    char *out = NULL, args[1200];
    snprintf(args, sizeof args, "inspect %s", kvcal_test_path("deepseek-v3"));
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, "attention       MLA (kv_lora_rank 512, rope "
                                       "64), 128 heads, qk head_dim 192"));
    /* 61 layers * (512 + 64) values * 2 bytes */
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "70272 bytes/token in bf16, 35136 in fp8"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "not supported: "));
    free(out);
}

/* Layer kinds and model types kvcal does not know are said to be unknown,
 * never counted as if they were per-head K and V of every layer. */
static void inspect_says_unknown_for_unknown_layer_kinds_and_families(void)
{
    char dir[1024], args[1200], *out = NULL;
    const char *cfg =
        "{\"architectures\": [\"ZambaForCausalLM\"], \"model_type\": \"zamba9\", "
        "\"num_hidden_layers\": 3, \"hidden_size\": 64, \"num_attention_heads\": "
        "4, "
        "\"layer_types\": [\"full_attention\", \"hybrid\", \"mamba\"]}";
    config_dir("hybrid", cfg, NULL, dir, sizeof dir);
    cJSON *j = inspect_json(dir);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kv_layout"), "unknown");
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(j, "kv_bytes_per_token_bf16")));
    CU_ASSERT_PTR_NOT_NULL(strstr(str(j, "refused"), "layer_types[1] is \"hybrid\""));
    cJSON_Delete(j);
    snprintf(args, sizeof args, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "kv cache        unknown: layer_types[1]"));
    free(out);

    cfg = "{\"architectures\": [\"Cohere2ForCausalLM\"], \"model_type\": "
          "\"cohere2\", "
          "\"num_hidden_layers\": 4, \"hidden_size\": 64, "
          "\"num_attention_heads\": 4, "
          "\"num_key_value_heads\": 2, \"head_dim\": 16, \"layer_types\": "
          "[\"sliding_attention\", \"full_attention\", \"sliding_attention\", "
          "\"full_attention\"]}";
    config_dir("cohere2", cfg, NULL, dir, sizeof dir);
    j = inspect_json(dir);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(j, "kv_layout_known")));
    /* 2 * 4 layers * 2 kv heads * 16 channels * 2 bytes, said to be assumed */
    CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_bf16"), 512);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(str(j, "kv_layout_note"), "2 of the 4 attention layers"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(str(j, "kv_layout_note"), "model_type 'cohere2' is not a family"));
    CU_ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(j, "rope_interleaved")));
    cJSON_Delete(j);
}

/* `calibrate --format checkpoint --out DIR` writes config.json,
 * kv_scales.safetensors and an index that also maps the model's weights to
 * their shard in the model's directory: DIR is a scales file, described as
 * one; so is a directory holding only kv_scales.safetensors. */
static void inspect_checkpoint_dir_of_scales_describes_the_scales(void)
{
    char dir[1024], ids[1024], args[4096], *out = NULL;
    snprintf(dir, sizeof dir, "%s", kvcal_test_path("scales_ck"));
    snprintf(ids, sizeof ids, "%s", kvcal_test_path("ids2.jsonl"));
    const char *lines = "{\"input_ids\": [1, 5, 9, 33, 2, 7, 127, 64, 3, 8, 100, 4]}\n";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(ids, lines, strlen(lines)), 0);
    snprintf(args, sizeof args,
             "calibrate --model " HD48 " --dataset %s --num-samples 1 --seq-len 12 "
             "--granularity head --format checkpoint --out %s --quiet",
             ids, dir);
    CU_ASSERT_EQUAL_FATAL(run(args, NULL, NULL), 0);
    cJSON *j = inspect_json(dir);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "scales");
    CU_ASSERT_STRING_EQUAL(str(j, "format"), "checkpoint");
    CU_ASSERT_STRING_EQUAL(str(j, "granularity"), "head");
    CU_ASSERT_EQUAL(num(j, "num_layers"), 2);
    CU_ASSERT_EQUAL(num(j, "num_kv_heads"), 3);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "layers")), 2);
    /* the model's 21 tensors, mapped to its model.safetensors */
    CU_ASSERT_EQUAL(num(j, "index_tensors_elsewhere"), 21);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "inspect %s", dir);
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out &&
                           strstr(out, ": scales (checkpoint), 2 layers x 3 kv heads"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "maps 21 tensors to model.safetensors"));
    free(out);

    /* its config.json, given itself: the model, with no weights there */
    snprintf(args, sizeof args, "%s/config.json", dir);
    j = inspect_json(args);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "model");
    CU_ASSERT_PTR_NOT_NULL(strstr(str(j, "refused"), "only KV scales"));
    CU_ASSERT_STRING_EQUAL(str(j, "kv_scales"),
                           "present (per-head, 2 layers x 3 kv heads)");
    cJSON_Delete(j);

    char only[1024];
    snprintf(only, sizeof only, "%s", kvcal_test_path("scales_only"));
    snprintf(args, sizeof args, "mkdir %s && cp %s/kv_scales.safetensors %s/", only, dir,
             only);
    CU_ASSERT_EQUAL_FATAL(system(args), 0);
    j = inspect_json(only);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kind"), "scales");
    CU_ASSERT_EQUAL(num(j, "num_layers"), 2);
    cJSON_Delete(j);
}

/* A config file of another name is read itself, not the config.json of its
 * directory; a legacy scales file beside a model is named. */
static void inspect_reads_a_config_file_of_any_name_and_names_scales_beside(void)
{
    char path[1024], args[1200], *out = NULL;
    snprintf(path, sizeof path, "%s", kvcal_test_path("my-config.json"));
    const char *bad =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\"}";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, bad, strlen(bad)), 0);
    snprintf(args, sizeof args, "inspect %s", path);
    check_refused(args, 1, "my-config.json: field \"num_hidden_layers\" is missing");
    sh("cp " HD48 "/config.json %s%s", path, "");
    CU_ASSERT_EQUAL(run(args, &out, NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "layers          2, hidden 48"));
    CU_ASSERT_PTR_NOT_NULL(out && strstr(out, "a config file alone"));
    free(out);

    cJSON *j = inspect_json(LLAMA2);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "kv_scales"),
                           "none in the checkpoint; kv_cache_scales.json beside it "
                           "(per-tensor, 32 layers x 1 kv heads)");
    cJSON_Delete(j);

    /* a shard that does not load and has no config.json beside it */
    snprintf(path, sizeof path, "%s", kvcal_test_path("lone.safetensors"));
    sh("head -c 100000 " HD48 "/model.safetensors > %s%s", path, "");
    snprintf(args, sizeof args, "inspect %s", path);
    check_refused(args, 1, "truncated");
}

/* A multimodal config keeps its language model in text_config: described
 * from there (it is valid, not missing num_hidden_layers). */
static void inspect_multimodal_config_describes_its_text_config(void)
{
    char dir[1024];
    const char *cfg =
        "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], "
        "\"model_type\": "
        "\"gemma3\", \"vision_config\": {\"hidden_size\": 32}, \"text_config\": "
        "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 3, "
        "\"hidden_size\": "
        "64, "
        "\"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": "
        "32, "
        "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
        "\"full_attention\"], \"sliding_window\": 16}}";
    config_dir("multimodal", cfg, NULL, dir, sizeof dir);
    cJSON *j = inspect_json(dir);
    CU_ASSERT_FATAL(j != NULL);
    CU_ASSERT_STRING_EQUAL(str(j, "architecture"), "Gemma3ForConditionalGeneration");
    CU_ASSERT_STRING_EQUAL(str(j, "model_type"), "gemma3_text");
    CU_ASSERT_EQUAL(num(j, "num_layers"), 3);
    /* 2 * 3 layers * 1 kv head * 32 channels * 2 bytes */
    CU_ASSERT_EQUAL(num(j, "kv_bytes_per_token_bf16"), 384);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(str(j, "kv_layout_note"), "2 of the 3 attention layers"));
    cJSON_Delete(j);

    /* a config file with text_config and no architectures is a config, and
     * its errors name the field inside text_config */
    char path[1100], args[1200];
    snprintf(path, sizeof path, "%s", kvcal_test_path("text_only.json"));
    cfg = "{\"model_type\": \"x\", \"text_config\": {\"num_hidden_layers\": 2, "
          "\"hidden_size\": 8, \"num_attention_heads\": 2, \"layer_types\": "
          "[\"full_attention\"]}}";
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, cfg, strlen(cfg)), 0);
    snprintf(args, sizeof args, "inspect %s", path);
    check_refused(args, 1, "field \"text_config.layer_types\" has 1 entries");
}

/* --decode prints token-set samples; on anything else it is a usage error,
 * not silently ignored. */
static void inspect_decode_of_anything_but_a_token_set_is_a_usage_error(void)
{
    check_refused("inspect " LLAMA2 "/kv_cache_scales.json --decode 1 --model " MODEL, 2,
                  "--decode prints samples of a token set");
    check_refused("inspect " MODEL " --decode 1 --model " MODEL, 2, "is a model");
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(inspect_llama2c_model_reports_shape_kv_bytes_and_tokenizer),
    KVCAL_TEST(inspect_hf_checkpoint_counts_every_weight_and_reads_rope),
    KVCAL_TEST(inspect_fp8_checkpoint_shows_the_weight_scheme),
    KVCAL_TEST(inspect_shows_yarn_factor_original_context_and_attention_factor),
    KVCAL_TEST(inspect_counts_mxfp4_experts_as_their_values),
    KVCAL_TEST(inspect_unsupported_model_prints_its_config_and_why),
    KVCAL_TEST(inspect_config_with_huge_sizes_reports_kv_bytes_without_overflow),
    KVCAL_TEST(inspect_legacy_scales_lists_every_layer_as_in_the_file),
    KVCAL_TEST(inspect_refuses_a_corrupted_statistics_file_in_one_line),
    KVCAL_TEST(inspect_stats_absmax_matches_the_scales_of_the_same_run),
    KVCAL_TEST(inspect_stats_shows_the_tokens_each_expert_received),
    KVCAL_TEST(inspect_token_sets_count_padding_and_decode_samples),
    KVCAL_TEST(inspect_bad_input_gives_one_line_and_the_exit_code),
    KVCAL_TEST(inspect_slash_after_a_file_says_not_a_directory),
    KVCAL_TEST(inspect_broken_checkpoint_describes_config_and_exits_1),
    KVCAL_TEST(inspect_broken_llama2c_beside_a_config_is_an_error),
    KVCAL_TEST(inspect_damaged_index_is_a_broken_checkpoint),
    KVCAL_TEST(inspect_llama2c_with_an_odd_head_size_is_refused),
    KVCAL_TEST(inspect_decode_of_ids_outside_the_tokenizer_names_sample_and_position),
    KVCAL_TEST(inspect_counts_kv_bytes_of_mla_and_hybrid_models),
    KVCAL_TEST(inspect_says_unknown_for_unknown_layer_kinds_and_families),
    KVCAL_TEST(inspect_checkpoint_dir_of_scales_describes_the_scales),
    KVCAL_TEST(inspect_reads_a_config_file_of_any_name_and_names_scales_beside),
    KVCAL_TEST(inspect_multimodal_config_describes_its_text_config),
    KVCAL_TEST(inspect_decode_of_anything_but_a_token_set_is_a_usage_error),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(inspect_cli, KVCAL_NEEDS_NOTHING, tests)
