/* cli/cmd_inspect.c: `kvcal inspect PATH` -- says what a model, scales
 * file, statistics file or token set holds, detected from its content. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd_common.h"
#include "cli/command.h"
#include "calib/model.h"
#include "core/status.h"
#include "io/dataset/dataset.h"
#include "io/file_kind.h"
#include "io/json_file.h"
#include "io/checkpoint/llama2c.h"
#include "io/checkpoint/model_config.h"
#include "io/path.h"
#include "io/checkpoint/safetensors.h"
#include "io/scales/scales_io.h"
#include "io/stats_hdf5.h"
#include "io/dataset/token_set_info.h"
#include "io/tokenizer/tokenizer.h"


typedef struct inspect_opts {
    const char *tokenizer; /* --tokenizer FILE or NULL */
    const char *model;     /* --model DIR or NULL */
    int decode;            /* samples to decode */
    int json;
    int heatmap;  /* print a scales file's layer x head map in blocks */
    cJSON *out;   /* the JSON report (filled in text mode too, never printed) */
    int complete; /* out holds a whole report, printed with --json even on exit 1 */
} inspect_opts;

static void inspect_usage(FILE *f)
{
    fprintf(
        f, "usage: kvcal inspect PATH [--tokenizer FILE] [--model DIR] [--decode N] "
           "[--heatmap] [--json]\n\n"
           "Says what PATH holds, detected from its content:\n"
           "  a model (checkpoint directory with config.json, a .safetensors beside its\n"
           "  config.json, a config file, a llama2.c .bin): shape, RoPE, dtype,\n"
           "  parameters, KV-cache bytes per token in bf16 and fp8 (per-head K/V, an\n"
           "  MLA latent, or the attention layers of a hybrid), its tokenizer, KV\n"
           "  scales it holds; a checkpoint whose weights do not load is described\n"
           "  from its config.json and exits 1;\n"
           "  a scales file (legacy JSON, kvcal JSON, checkpoint directory / shard,\n"
           "  calibrate --format checkpoint's directory): per-layer K/V scales (per\n"
           "  head with --json or per-head granularity) and, on a terminal, a map\n"
           "  of the K and V scales by layer and kv head in Unicode blocks;\n"
           "  a statistics file (calibrate --stats): per-layer K/V absmax and the\n"
           "  channel with the largest one;\n"
           "  a token set (tokenize output, HDF5 or JSONL of input_ids): samples,\n"
           "  lengths, padding.\n\n"
           "  --tokenizer FILE  tokenizer for --decode (or of a model, instead of the\n"
           "                    one found beside it)\n"
           "  --model DIR       model whose tokenizer --decode uses\n"
           "  --decode N        print the first N samples of a token set as text\n"
           "  --heatmap         print a scales file's map even when stdout is not a\n"
           "                    terminal\n"
           "  --json            print a JSON report on stdout\n\n"
           "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

// --- models ------------------------------------------------------------------

/* What the report adds to config.json: from the opened model, or from
 * config.json alone when the runner refuses the model. */
typedef struct model_extra {
    const char *source, *dtype;
    const char *refused; /* why calibrate refuses the model; NULL when it runs it */
    const char *invalid; /* why the checkpoint is broken (exit 1); NULL when not */
    const char *weights; /* why no weights were counted; "" when they were */
    const char *scheme;  /* FP8 weights: how the engine serves them; "" for none */
    int rot_dim, rot_of; /* RoPE rotates rot_dim of rot_of channels */
    int interleaved;     /* 1 pairs (2i, 2i+1), 0 rotate-half, -1 not stated */
    long long params;    /* 0 when no weights were counted */
} model_extra;

/* A llama2.c model's shape in config.json terms. */
static void config_from_desc(kvcal_model_config *c, const kvcal_model_desc *d)
{
    memset(c, 0, sizeof *c);
    snprintf(c->architecture, sizeof c->architecture, "%s", d->architecture);
    snprintf(c->model_type, sizeof c->model_type, "%s", d->model_type);
    snprintf(c->rope_type_name, sizeof c->rope_type_name, "default");
    c->num_layers = d->num_layers;
    c->hidden_size = d->hidden_size;
    c->intermediate_size = d->intermediate_size;
    c->num_attention_heads = d->num_heads;
    c->num_kv_heads = d->num_kv_heads;
    c->head_dim = d->head_dim;
    c->vocab_size = d->vocab_size;
    c->max_position_embeddings = d->max_seq_len;
    c->rope_theta = KVCAL_LLAMA2C_ROPE_THETA;
    c->rope_attention_factor = 1.0;
    c->tie_word_embeddings = d->tied_embeddings;
    c->kv_layout = KVCAL_KV_PER_HEAD;
    c->kv_layers = d->num_layers;
    c->kv_layout_known = 1;
}

/* Weights of a llama2.c model, counted from its shape. */
static long long llama2c_params(const kvcal_model_config *c)
{
    long long H = c->hidden_size, q = (long long)c->num_attention_heads * c->head_dim;
    long long kv = (long long)c->num_kv_heads * c->head_dim;
    long long layer = 2 * H + 2 * q * H + 2 * kv * H + 3 * H * c->intermediate_size;
    return (long long)c->vocab_size * H * (c->tie_word_embeddings ? 1 : 2) +
           c->num_layers * layer + H;
}

static const char *yes_no(int b)
{
    return b ? "yes" : "no";
}

/* "MLA (kv_lora_rank 512, rope 64)", "MLA (kv_lora_rank 512, rope 64,
 * sparse: 2048 keys a query)", "GQA 4:1", "MHA 1:1", "MQA 8:1". */
static void attention_kind(const kvcal_model_config *c, char *out, size_t n)
{
    int H = c->num_attention_heads, KV = c->num_kv_heads;
    if (c->kv_layout == KVCAL_KV_MLA && c->index_topk)
        snprintf(out, n, "MLA (kv_lora_rank %d, rope %d, sparse: %d keys a query)",
                 c->kv_lora_rank, c->qk_rope_head_dim, c->index_topk);
    else if (c->kv_layout == KVCAL_KV_MLA)
        snprintf(out, n, "MLA (kv_lora_rank %d, rope %d)", c->kv_lora_rank,
                 c->qk_rope_head_dim);
    else
        snprintf(out, n, "%s %d:1", KV == H ? "MHA" : KV == 1 ? "MQA" : "GQA", H / KV);
}

/* What the KV bytes per token count, when more than "K and V of every
 * layer" needs saying; "" otherwise. */
static void kv_layout_text(const kvcal_model_config *c, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    if (c->kv_layout == KVCAL_KV_UNKNOWN) {
        snprintf(out, n,
                 "unknown: layer_types[%d] is \"%s\", a kind of layer whose cache kvcal "
                 "does not know",
                 c->unknown_layer, c->unknown_layer_type);
        return;
    }
    if (c->kv_layout == KVCAL_KV_MLA)
        at += (size_t)snprintf(out + at, n - at,
                               "one latent entry per token per layer (%d + %d values), "
                               "no per-head K/V",
                               c->kv_lora_rank, c->qk_rope_head_dim);
    if (c->kv_layers != c->num_layers && at < n)
        at += (size_t)snprintf(out + at, n - at,
                               "%s%s in %d of %d layers; the other %d (%s) cache "
                               "nothing per token",
                               at ? "; " : "",
                               c->kv_layout == KVCAL_KV_MLA ? "the latent" : "K and V",
                               c->kv_layers, c->num_layers, c->num_layers - c->kv_layers,
                               c->no_kv_layer_types);
    if (c->sliding_layers && at < n)
        at += (size_t)snprintf(out + at, n - at,
                               "%s%d of the %d attention layers use a sliding window",
                               at ? "; " : "", c->sliding_layers, c->kv_layers);
    if (c->index_head_dim && at < n)
        at +=
            (size_t)snprintf(out + at, n - at,
                             "%sthe sparse-attention indexer's keys (index_head_dim %d) "
                             "not counted",
                             at ? "; " : "", c->index_head_dim);
    if (!c->kv_layout_known && at < n)
        snprintf(out + at, n - at,
                 "%sassumed from the fields: model_type '%s' is not a family whose "
                 "cache kvcal knows",
                 at ? "; " : "", c->model_type);
}

static void print_model(const char *path, const kvcal_model_config *c,
                        const model_extra *x, const kvcal_tokenizer_t *tok,
                        const char *tok_note, const char *scales_note, inspect_opts *o)
{
    double kv_bf16 = 2.0 * (double)kvcal_model_config_kv_values_per_token(c);
    const char *rope = c->rope_type_name[0] ? c->rope_type_name : "default";
    const char *layout = c->kv_layout == KVCAL_KV_MLA        ? "mla"
                         : c->kv_layout == KVCAL_KV_PER_HEAD ? "per_head"
                                                             : "unknown";
    double factor = c->rope_type == KVCAL_ROPE_DEFAULT ? 0.0 : c->rope_factor;
    char attn[96], how[512];
    attention_kind(c, attn, sizeof attn);
    kv_layout_text(c, how, sizeof how);
    const struct {
        const char *key;
        double v;
    } num[] = {{"num_layers", c->num_layers},
               {"hidden_size", c->hidden_size},
               {"intermediate_size", c->intermediate_size},
               {"num_attention_heads", c->num_attention_heads},
               {"num_kv_heads", c->num_kv_heads},
               {"head_dim", c->head_dim},
               {"vocab_size", c->vocab_size},
               {"max_position_embeddings", c->max_position_embeddings},
               {"sliding_window", c->sliding_window},
               {"rope_theta", c->rope_theta},
               {"rope_factor", factor},
               {"rope_original_max_position_embeddings", c->rope_original_max_position},
               {"rope_attention_factor", c->rope_attention_factor},
               {"rope_rotary_dim", x->rot_dim},
               {"query_scaling_from", c->query_scaling_from},
               {"nope_layers", c->nope_layers},
               {"attention_chunk_size", c->attention_chunk_size},
               {"parameters", (double)x->params},
               {"kv_lora_rank", c->kv_lora_rank},
               {"qk_rope_head_dim", c->qk_rope_head_dim},
               {"kv_layers", c->kv_layers},
               {"num_experts", c->num_experts},
               {"num_experts_per_tok", c->num_experts_per_tok},
               {"moe_intermediate_size", c->moe_intermediate_size},
               {"shared_expert_intermediate_size", c->shared_expert_intermediate_size}};
    const struct {
        const char *key;
        int v;
    } flag[] = {{"supported", !x->refused && !x->invalid},
                {"valid", !x->invalid},
                {"tied_embeddings", c->tie_word_embeddings},
                {"qkv_bias", c->attention_bias},
                {"qk_norm", c->qk_norm},
                {"norm_topk_prob", c->norm_topk_prob},
                {"kv_layout_known", c->kv_layout_known}};
    const char *str[][2] = {{"kind", "model"},
                            {"source", x->source},
                            {"architecture", c->architecture},
                            {"model_type", c->model_type},
                            {"attention", attn},
                            {"kv_layout", layout},
                            {"kv_layout_note", how},
                            {"rope_type", rope},
                            {"weight_dtype", x->dtype},
                            {"weight_scheme", x->scheme ? x->scheme : ""},
                            {"refused", x->refused ? x->refused : ""},
                            {"error", x->invalid ? x->invalid : ""},
                            {"kv_scales", scales_note}};
    cJSON *j = o->out, *t = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof str / sizeof *str; i++)
        cJSON_AddStringToObject(j, str[i][0], str[i][1]);
    for (size_t i = 0; i < sizeof num / sizeof *num; i++)
        cJSON_AddNumberToObject(j, num[i].key, num[i].v);
    for (size_t i = 0; i < sizeof flag / sizeof *flag; i++)
        cJSON_AddBoolToObject(j, flag[i].key, flag[i].v);
    if (x->interleaved < 0)
        cJSON_AddNullToObject(j, "rope_interleaved");
    else
        cJSON_AddBoolToObject(j, "rope_interleaved", x->interleaved);
    if (c->kv_layout == KVCAL_KV_UNKNOWN) {
        cJSON_AddNullToObject(j, "kv_bytes_per_token_bf16");
        cJSON_AddNullToObject(j, "kv_bytes_per_token_fp8");
    } else {
        cJSON_AddNumberToObject(j, "kv_bytes_per_token_bf16", kv_bf16);
        cJSON_AddNumberToObject(j, "kv_bytes_per_token_fp8", kv_bf16 / 2);
    }
    if (tok) {
        cJSON_AddStringToObject(t, "kind", kvcal_tokenizer_kind(tok));
        cJSON_AddNumberToObject(t, "vocab_size", kvcal_tokenizer_vocab_size(tok));
        cJSON_AddNumberToObject(t, "bos", kvcal_tokenizer_bos(tok));
        cJSON_AddNumberToObject(t, "eos", kvcal_tokenizer_eos(tok));
    } else {
        cJSON_AddStringToObject(t, "error", tok_note);
    }
    cJSON_AddItemToObject(j, "tokenizer", t);
    o->complete = 1;
    if (o->json)
        return;
    printf("%s: model (%s)%s%s\n", path, x->source,
           x->invalid   ? ", invalid: its weights do not load (the error follows)"
           : x->refused ? ", not supported: "
                        : "",
           !x->invalid && x->refused ? x->refused : "");
    printf("  architecture    %s (model_type %s)\n", c->architecture, c->model_type);
    printf("  layers          %d, hidden %d, intermediate %d, vocab %d, context %d\n",
           c->num_layers, c->hidden_size, c->intermediate_size, c->vocab_size,
           c->max_position_embeddings);
    if (c->kv_layout == KVCAL_KV_MLA) {
        printf("  attention       %s, %d heads", attn, c->num_attention_heads);
        if (c->qk_nope_head_dim)
            printf(", qk head_dim %d (nope %d + rope %d)",
                   c->qk_nope_head_dim + c->qk_rope_head_dim, c->qk_nope_head_dim,
                   c->qk_rope_head_dim);
        if (c->v_head_dim)
            printf(", v head_dim %d", c->v_head_dim);
    } else {
        printf("  attention       %d heads, %d kv heads (%s), head_dim %d",
               c->num_attention_heads, c->num_kv_heads, attn, c->head_dim);
    }
    if (c->sliding_window)
        printf(", sliding window %d", c->sliding_window);
    if (c->attention_chunk_size) /* Llama 4 */
        printf(", chunks of %d tokens in the layers with RoPE", c->attention_chunk_size);
    if (c->nope_layers) {
        printf(", %d layer%s without RoPE", c->nope_layers,
               c->nope_layers == 1 ? "" : "s");
        if (c->attn_temperature_scale != 0.0)
            printf(" (queries x (1 + %g ln(1 + floor((pos + 1) / %g))))",
                   c->attn_temperature_scale, c->attn_temperature_floor);
    }
    if (c->linear_num_key_heads) /* Qwen3-Next, Qwen3.5 */
        printf(
            ", output gated\n  linear attn     gated delta-net: %d key heads of %d, %d "
            "value heads of %d, convolution of %d",
            c->linear_num_key_heads, c->linear_key_head_dim, c->linear_num_value_heads,
            c->linear_value_head_dim, c->linear_conv_kernel_dim);
    if (c->num_experts) {
        printf("\n  experts         %d of %d channels, %s top-%d%s", c->num_experts,
               c->moe_intermediate_size, c->moe_sigmoid ? "sigmoid" : "softmax",
               c->num_experts_per_tok, c->norm_topk_prob ? " renormalized" : "");
        if (c->moe_groups > 1)
            printf(" in %d groups (the best %d open)", c->moe_groups, c->moe_topk_groups);
        if (c->routed_scaling_factor != 1.0 && c->routed_scaling_factor > 0)
            printf(" x%g", c->routed_scaling_factor);
        if (c->shared_expert_intermediate_size)
            printf(", shared expert of %d channels", c->shared_expert_intermediate_size);
        if (c->dense_layers)
            printf(", %d dense layer%s", c->dense_layers, c->dense_layers == 1 ? "" : "s");
    }
    printf("\n  rope            theta %g, %s", c->rope_theta, rope);
    if (factor > 0)
        printf(" x%g", factor);
    if (c->rope_type == KVCAL_ROPE_YARN)
        printf(" of %d positions, attention factor %.6g", c->rope_original_max_position,
               c->rope_attention_factor);
    if (c->query_scaling_from)
        printf(", queries scaled from position %d (llama_4_scaling_beta %g: samples "
               "stop before it)",
               c->query_scaling_from, c->rope_llama4_beta);
    printf(", %s, %d of %d channels\n",
           x->interleaved > 0    ? "interleaved pairs"
           : x->interleaved == 0 ? "rotate-half"
                                 : "pairing not stated",
           x->rot_dim, x->rot_of);
    printf("  weights         %s, ", x->dtype);
    if (x->params)
        printf("%.2fM parameters, ", (double)x->params / 1e6);
    else
        printf("%s, ", x->weights);
    printf("tied embeddings %s, qkv bias %s, qk norm %s\n",
           yes_no(c->tie_word_embeddings), yes_no(c->attention_bias), yes_no(c->qk_norm));
    if (x->scheme && *x->scheme)
        printf("  weight scheme   %s\n", x->scheme);
    if (c->kv_layout == KVCAL_KV_UNKNOWN)
        printf("  kv cache        %s\n", how);
    else
        printf(
            "  kv cache        %.15g bytes/token in bf16, %.15g in fp8 (%.1f / %.1f MiB "
            "per %d-token sequence)\n",
            kv_bf16, kv_bf16 / 2, kv_bf16 * c->max_position_embeddings / (1 << 20),
            kv_bf16 * c->max_position_embeddings / (2 << 20), c->max_position_embeddings);
    if (c->kv_layout != KVCAL_KV_UNKNOWN && how[0])
        printf("                  %s\n", how);
    if (tok) {
        int vocab = kvcal_tokenizer_vocab_size(tok);
        char bos[16] = "none", eos[16] = "none";
        if (kvcal_tokenizer_bos(tok) >= 0)
            snprintf(bos, sizeof bos, "%d", (int)kvcal_tokenizer_bos(tok));
        if (kvcal_tokenizer_eos(tok) >= 0)
            snprintf(eos, sizeof eos, "%d", (int)kvcal_tokenizer_eos(tok));
        printf("  tokenizer       %s, vocab %d, BOS %s, EOS %s%s\n",
               kvcal_tokenizer_kind(tok), vocab, bos, eos,
               vocab > c->vocab_size ? " (more ids than the model's vocab)" : "");
    } else
        printf("  tokenizer       none: %s\n", tok_note);
    printf("  kv scales       %s\n", scales_note);
}

/* The weights of a Hugging Face model at `path` (its directory or one
 * .safetensors file): counted into x->params (x->dtype: the dtype holding
 * most of them), or why they were not (no weights there, only KV scales
 * there: x->weights, x->refused) or why the checkpoint is broken
 * (x->invalid); *m is the opened model when the runner accepts it. refused /
 * invalid receive the messages. */
static void hf_weights(const char *path, model_extra *x, char *refused, char *invalid,
                       size_t n, kvcal_model_t **m)
{
    kvcal_shard_census census;
    kvcal_checkpoint_t *ck = NULL;
    struct stat sb;
    kvcal_shard_census_take(path, &census);
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    /* an index that is there names weights, even one that does not parse */
    char index[4200];
    snprintf(index, sizeof index, "%.4096s/model.safetensors.index.json", path);
    int has_index = is_dir && stat(index, &sb) == 0;
    if (is_dir && kvcal_shard_census_scales_only(&census)) {
        x->weights = "none here (the directory holds KV scales only)";
        snprintf(refused, n,
                 "%s: no model weights here, only KV scales; calibrate runs the model's "
                 "own checkpoint directory",
                 path);
        x->refused = refused;
        return;
    }
    if (!census.files && !census.index_tensors && !has_index) {
        x->weights = "no weights found";
    } else if (kvcal_checkpoint_open(path, &ck) != KVCAL_OK) {
        x->weights = "not readable";
        snprintf(invalid, n, "%s", kvcal_last_error());
        x->invalid = invalid;
        return;
    }
    long long by_dtype[16] = {0}; /* elements per kvcal_dtype */
    int most = 0;
    for (int i = 0; ck && i < kvcal_checkpoint_count(ck); i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(ck, i);
        const size_t len = strlen(t->name);
        const int packed = t->dtype == KVCAL_DTYPE_U8 && len > 7;
        if (kvcal_is_scale_tensor_name(t->name) ||
            (packed && !strcmp(t->name + len - 7, "_scales")))
            continue;
        /* MXFP4: two values a byte */
        if (packed && !strcmp(t->name + len - 7, "_blocks")) {
            x->params += 2 * t->numel;
            continue;
        }
        x->params += t->numel;
        if ((unsigned)t->dtype < 16 && (by_dtype[t->dtype] += t->numel) > by_dtype[most])
            most = t->dtype;
    }
    if (x->params)
        x->dtype = kvcal_dtype_name((kvcal_dtype)most);
    kvcal_checkpoint_close(ck);
    kvcal_status st = kvcal_model_open(path, m);
    if (st == KVCAL_OK)
        return;
    const int no_weights = !census.files && !has_index;
    snprintf(st == KVCAL_ERR_UNSUPPORTED || no_weights ? refused : invalid, n, "%s",
             kvcal_last_error());
    if (st == KVCAL_ERR_UNSUPPORTED || no_weights)
        x->refused = refused;
    else
        x->invalid = invalid;
}

/* The note on a scales file beside a model whose checkpoint holds none:
 * the legacy JSON or kvcal JSON under the names calibrate gives them. */
static void scales_beside(const char *dir, char *note, size_t n)
{
    static const char *const names[] = {"kv_cache_scales.json", "kvcal_scales.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[4200];
        struct stat sb;
        kvcal_scales_t *s = NULL;
        snprintf(p, sizeof p, "%.4096s/%s", dir, names[i]);
        if (stat(p, &sb) != 0)
            continue;
        if (kvcal_scales_load(p, NULL, 0, &s) == KVCAL_OK)
            snprintf(note, n,
                     "none in the checkpoint; %s beside it (per-%s, %d layers x %d "
                     "kv heads)",
                     names[i],
                     s->granularity == KVCAL_GRANULARITY_HEAD ? "head" : "tensor",
                     s->num_layers, s->num_kv_heads);
        else
            snprintf(note, n, "none in the checkpoint; %s beside it does not load: %s",
                     names[i], kvcal_last_error());
        kvcal_scales_destroy(s);
        return;
    }
}

/* Why calibrate refuses a model whose layer kinds kvcal does not know, into
 * buf; NULL for other models. */
static const char *layout_refusal(const char *path, const kvcal_model_config *c,
                                  char *buf, size_t n)
{
    if (c->kv_layout == KVCAL_KV_UNKNOWN)
        snprintf(
            buf, n,
            "%s: layer_types[%d] is \"%s\", a kind of layer kvcal calibrate does not "
            "know",
            path, c->unknown_layer, c->unknown_layer_type);
    else
        return NULL;
    return buf;
}

/* Describes a model: a checkpoint directory, a .safetensors beside its
 * config.json, a config.json (or any config file, described alone), or a
 * llama2.c .bin. A checkpoint whose weights do not load is described from
 * its config.json, and its error ends in exit 1. */
static int inspect_model(const char *path, inspect_opts *o)
{
    kvcal_model_t *m = NULL;
    kvcal_tokenizer_t *tok = NULL;
    kvcal_scales_t *s = NULL;
    kvcal_model_config cfg;
    model_extra x = {.source = "hf", .weights = ""};
    char refused[4608] = "", invalid[4608] = "", why[4608], dir[4096],
         note[1200] = "none", tok_note[1200] = "";
    struct stat sb;
    kvcal_status st;
    int is_file = stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
    int is_json = is_file && kvcal_path_has_suffix(path, ".json");
    int alone = is_json && strcmp(path, "config.json") &&
                !kvcal_path_has_suffix(path, "/config.json");
    snprintf(dir, sizeof dir, "%s", path);
    if (is_file)
        kvcal_path_dirname(path, dir, sizeof dir);
    if (is_file && !is_json && !kvcal_path_has_suffix(path, ".safetensors")) {
        if ((st = kvcal_model_open(path, &m)))
            goto fail;
        const kvcal_model_desc *d = kvcal_model_describe(m);
        config_from_desc(&cfg, d);
        x.params = llama2c_params(&cfg);
    } else {
        if ((st = kvcal_model_config_load(is_json ? path : dir, &cfg)))
            goto fail;
        if (alone) {
            x.weights = "not looked for (a config file alone)";
            snprintf(refused, sizeof refused,
                     "%s: a config file alone; calibrate runs a checkpoint directory "
                     "(config.json + safetensors)",
                     path);
            x.refused = refused;
            snprintf(note, sizeof note, "not looked for (a config file alone)");
        } else {
            hf_weights(is_json ? dir : path, &x, refused, invalid, sizeof refused, &m);
        }
        if (!alone && kvcal_scales_load(dir, NULL, 0, &s) == KVCAL_OK)
            snprintf(note, sizeof note, "present (per-%s, %d layers x %d kv heads)",
                     s->granularity == KVCAL_GRANULARITY_HEAD ? "head" : "tensor",
                     s->num_layers, s->num_kv_heads);
        else if (!alone && cfg.has_kv_cache_scheme)
            snprintf(note, sizeof note,
                     "kv_cache_scheme set but the scales do not load: %s",
                     kvcal_last_error());
        else if (!alone)
            scales_beside(dir, note, sizeof note);
        if (layout_refusal(path, &cfg, why, sizeof why))
            x.refused = why;
    }
    const kvcal_model_desc *d = m ? kvcal_model_describe(m) : NULL;
    x.source = d ? d->source : "hf";
    if (d) {
        x.dtype = d->weight_dtype;
        x.scheme = d->weight_scheme;
    } else if (!x.dtype)
        x.dtype = cfg.torch_dtype[0] ? cfg.torch_dtype : "unknown";
    x.rot_of = cfg.head_dim;
    x.rot_dim = (int)(cfg.head_dim * cfg.partial_rotary_factor) & ~1;
    if (cfg.kv_layout == KVCAL_KV_MLA) {
        x.rot_dim = cfg.qk_rope_head_dim;
        x.rot_of = cfg.qk_rope_head_dim + cfg.qk_nope_head_dim;
    }
    x.interleaved = d                          ? d->rope_interleaved
                    : cfg.kv_layout == KVCAL_KV_MLA ? 1 /* vLLM's DeepSeek rotary */
                    : cfg.rope_interleave >= 0 ? cfg.rope_interleave
                    : cfg.kv_layout_known && cfg.kv_layout == KVCAL_KV_PER_HEAD ? 0
                                                                                : -1;
    if (d)
        x.rot_dim = d->rot_dim;
    if (alone && !o->tokenizer)
        snprintf(tok_note, sizeof tok_note, "not looked for (a config file alone)");
    else if ((st = kvcal_tokenizer_find(path, o->tokenizer, &tok)) && o->tokenizer)
        goto fail;
    else if (st)
        snprintf(tok_note, sizeof tok_note, "%s", kvcal_last_error());
    print_model(path, &cfg, &x, tok, tok_note, note, o);
    fflush(stdout);
    if (x.invalid)
        fprintf(stderr, "kvcal inspect: %s\n", x.invalid);
    kvcal_scales_destroy(s);
    kvcal_tokenizer_destroy(tok);
    kvcal_model_close(m);
    return x.invalid ? KVCAL_EXIT_INVALID : KVCAL_EXIT_OK;
fail:
    fprintf(stderr, "kvcal inspect: %s\n", kvcal_last_error());
    kvcal_scales_destroy(s);
    kvcal_tokenizer_destroy(tok);
    kvcal_model_close(m);
    return kvcal_cmd_file_exit_code(st);
}

// --- scales ------------------------------------------------------------------

static float max_over_heads(const kvcal_scales_t *s, const float *a, int layer)
{
    float m = 0.0f;
    for (int h = 0; h < s->num_kv_heads; h++)
        if (a[kvcal_scales_index(s, layer, h)] > m)
            m = a[kvcal_scales_index(s, layer, h)];
    return m;
}

static void add_provenance(cJSON *j, const kvcal_model_identity *id,
                           const kvcal_provenance *p)
{
    cJSON *m = cJSON_AddObjectToObject(j, "model"),
          *q = cJSON_AddObjectToObject(j, "provenance");
    cJSON_AddStringToObject(m, "architecture", id->architecture);
    cJSON_AddStringToObject(m, "model_type", id->model_type);
    cJSON_AddStringToObject(q, "observer", p->observer);
    cJSON_AddStringToObject(q, "observer_params", p->observer_params);
    cJSON_AddStringToObject(q, "dataset", p->dataset);
    cJSON_AddNumberToObject(q, "num_samples", (double)p->num_samples);
    cJSON_AddNumberToObject(q, "num_tokens", (double)p->num_tokens);
    cJSON_AddNumberToObject(q, "seed", (double)p->seed);
    cJSON_AddStringToObject(q, "tool_version", p->tool_version);
}

static void print_provenance(const kvcal_model_identity *id, const kvcal_provenance *p)
{
    if (id->architecture[0] || id->model_type[0])
        printf("  model           %s%smodel_type %s\n", id->architecture,
               id->architecture[0] ? ", " : "", id->model_type[0] ? id->model_type : "?");
    if (p->observer[0])
        printf("  provenance      observer %s %s, dataset %s, %lld samples, %lld tokens, "
               "seed %lld, %s\n",
               p->observer, p->observer_params, p->dataset[0] ? p->dataset : "?",
               p->num_samples, p->num_tokens, p->seed, p->tool_version);
}

/* The columns of the terminal on stdout (80 when it does not say). */
static int terminal_width(void)
{
    struct winsize ws;
    return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20 ? ws.ws_col : 80;
}

/* a (layers, kv heads) as a map: a column a layer, a row a kv head, each
 * value one of eight blocks from the smallest (▁) to the largest (█);
 * layers wrap to the terminal's width, numbered every five. */
static void print_heatmap(const char *what, const kvcal_scales_t *s, const float *a)
{
    static const char *const blocks[8] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    const int L = s->num_layers, H = s->num_kv_heads;
    float lo = a[0], hi = a[0];
    for (int i = 1; i < L * H; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    printf("  %s by layer (columns) and kv head (rows): ▁ %.4g .. █ %.4g\n", what, lo,
           hi);
    const int width = terminal_width() < 1000 ? terminal_width() : 1000;
    const int per_line = width - 12 > 10 ? (width - 12) / 10 * 10 : 10;
    for (int c0 = 0; c0 < L; c0 += per_line) {
        int n = L - c0 < per_line ? L - c0 : per_line;
        char ruler[1024];
        memset(ruler, ' ', sizeof ruler);
        int end = 0;
        for (int c = 0; c < n; c++)
            if ((c0 + c) % 5 == 0) {
                char num[16];
                int k = snprintf(num, sizeof num, "%d", c0 + c);
                memcpy(ruler + c, num, (size_t)k);
                end = c + k;
            }
        ruler[end] = '\0';
        printf("  layer     %s\n", ruler);
        for (int h = 0; h < H; h++) {
            printf("  head %-4d ", h);
            for (int c = c0; c < c0 + n; c++) {
                float v = a[kvcal_scales_index(s, c, h)];
                int b = hi > lo ? (int)((v - lo) / (hi - lo) * 7.0f + 0.5f) : 3;
                fputs(blocks[b < 0 ? 0 : b > 7 ? 7 : b], stdout);
            }
            printf("\n");
        }
    }
}

static int inspect_scales(const char *path, inspect_opts *o)
{
    kvcal_report_t *rep = NULL;
    kvcal_scales_t *s = NULL;
    kvcal_format fmt = KVCAL_FORMAT_UNKNOWN;
    if (kvcal_scales_validate_file(path, NULL, 0, &rep) == KVCAL_OK)
        fmt = kvcal_report_format(rep);
    kvcal_report_destroy(rep);
    kvcal_status st = kvcal_scales_load(path, NULL, 0, &s);
    if (st) {
        fprintf(stderr,
                "kvcal inspect: %s (run `kvcal validate-scales %s` for every finding)\n",
                kvcal_last_error(), path);
        return kvcal_cmd_file_exit_code(st);
    }
    int per_head = s->granularity == KVCAL_GRANULARITY_HEAD;
    kvcal_shard_census census;
    kvcal_shard_census_take(path, &census);
    cJSON *j = o->out, *layers;
    cJSON_AddStringToObject(j, "kind", "scales");
    cJSON_AddNumberToObject(j, "index_tensors_elsewhere", census.index_elsewhere);
    cJSON_AddStringToObject(j, "format", kvcal_format_name(fmt));
    cJSON_AddNumberToObject(j, "num_layers", s->num_layers);
    cJSON_AddNumberToObject(j, "num_kv_heads", s->num_kv_heads);
    cJSON_AddStringToObject(j, "granularity", per_head ? "head" : "tensor");
    const char *dtype = s->format == KVCAL_KV_FORMAT_INT8        ? "int8"
                        : s->format == KVCAL_KV_FORMAT_NVFP4     ? "nvfp4"
                        : s->format == KVCAL_KV_FORMAT_INT8_ASYM ? "int8_asym"
                                                                 : "float8_e4m3fn";
    cJSON_AddStringToObject(j, "dtype", dtype);
    cJSON_AddBoolToObject(j, "kv_shared", s->kv_shared);
    add_provenance(j, &s->model, &s->provenance);
    layers = cJSON_AddArrayToObject(j, "layers");
    if (!o->json) {
        printf("%s: scales (%s), %d layers x %d kv heads, per-%s%s%s%s\n", path,
               kvcal_format_name(fmt), s->num_layers, s->num_kv_heads,
               per_head ? "head" : "tensor",
               s->kv_shared ? ", one value for K and V" : "",
               s->format != KVCAL_KV_FORMAT_FP8_E4M3 ? ", for a cache of " : "",
               s->format != KVCAL_KV_FORMAT_FP8_E4M3 ? dtype : "");
        print_provenance(&s->model, &s->provenance);
        if (census.index_elsewhere)
            printf(
                "  weights         none here: its index maps %d tensors to %s%s, which "
                "%s not in this directory (the model's own)\n",
                census.index_elsewhere, census.elsewhere,
                census.elsewhere_several ? " and other shards" : "",
                census.elsewhere_several ? "are" : "is");
        printf("  layer%s     k_scale     v_scale%s\n", per_head ? "  head" : "",
               s->has_absmax ? "    k_absmax    v_absmax" : "");
    }
    for (int l = 0; l < s->num_layers; l++) {
        float k, v;
        kvcal_scales_get_tensor(s, l, &k, &v);
        cJSON *e = cJSON_CreateObject(), *heads = cJSON_CreateArray();
        cJSON_AddItemToArray(layers, e);
        cJSON_AddNumberToObject(e, "layer", l);
        if (!kvcal_scales_layer_cached(s, l)) { /* a hybrid model's linear attention */
            cJSON_AddBoolToObject(e, "kv_cache", 0);
            cJSON_Delete(heads);
            if (!o->json)
                printf("  %5d  linear attention: no K/V cache, no scales\n", l);
            continue;
        }
        cJSON_AddNumberToObject(e, "k_scale", k);
        cJSON_AddNumberToObject(e, "v_scale", v);
        if (s->has_absmax) {
            cJSON_AddNumberToObject(e, "k_absmax", max_over_heads(s, s->k_absmax, l));
            cJSON_AddNumberToObject(e, "v_absmax", max_over_heads(s, s->v_absmax, l));
        }
        cJSON_AddItemToObject(e, "heads", heads);
        for (int h = 0; h < s->num_kv_heads; h++) {
            int i = kvcal_scales_index(s, l, h);
            cJSON *x = cJSON_CreateObject();
            cJSON_AddItemToArray(heads, x);
            cJSON_AddNumberToObject(x, "k_scale", s->k_head[i]);
            cJSON_AddNumberToObject(x, "v_scale", s->v_head[i]);
            if (s->has_absmax) {
                cJSON_AddNumberToObject(x, "k_absmax", s->k_absmax[i]);
                cJSON_AddNumberToObject(x, "v_absmax", s->v_absmax[i]);
            }
            if (!o->json && per_head)
                printf("  %5d  %4d  %10.6g  %10.6g", l, h, s->k_head[i], s->v_head[i]);
            if (!o->json && per_head && s->has_absmax)
                printf("  %10.6g  %10.6g", s->k_absmax[i], s->v_absmax[i]);
            if (!o->json && per_head)
                printf("\n");
        }
        if (!o->json && !per_head) {
            printf("  %5d  %10.6g  %10.6g", l, k, v);
            if (s->has_absmax)
                printf("  %10.6g  %10.6g", max_over_heads(s, s->k_absmax, l),
                       max_over_heads(s, s->v_absmax, l));
            printf("\n");
        }
    }
    if (!o->json && o->heatmap) {
        print_heatmap("K scale", s, s->k_head);
        print_heatmap("V scale", s, s->v_head);
    }
    kvcal_scales_destroy(s);
    return KVCAL_EXIT_OK;
}

// --- statistics --------------------------------------------------------------

static int inspect_stats(const char *path, inspect_opts *o)
{
    kvcal_stats_t *s = NULL;
    kvcal_model_identity id;
    kvcal_provenance prov;
    kvcal_status st = kvcal_stats_read_hdf5(path, &s, &id, &prov);
    if (st) {
        fprintf(stderr, "kvcal inspect: %s\n", kvcal_last_error());
        return kvcal_cmd_file_exit_code(st);
    }
    cJSON *j = o->out, *layers;
    cJSON_AddStringToObject(j, "kind", "stats");
    cJSON_AddNumberToObject(j, "num_layers", s->num_layers);
    cJSON_AddNumberToObject(j, "num_kv_heads", s->num_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", s->head_dim);
    cJSON_AddNumberToObject(j, "batches", (double)s->batches);
    add_provenance(j, &id, &prov);
    layers = cJSON_AddArrayToObject(j, "layers");
    if (!o->json) {
        printf("%s: statistics (%s), %d layers x %d kv heads x %d channels, %lld "
               "batches\n",
               path, KVCAL_STATS_FORMAT_NAME, s->num_layers, s->num_kv_heads, s->head_dim,
               (long long)s->batches);
        print_provenance(&id, &prov);
        printf("  layer    tokens");
        for (int kv = 0; kv < 2; kv++)
            printf("  %10s  %-8s  %6s", kv == KVCAL_K ? "K absmax" : "V absmax",
                   "head/ch", "x mean");
        printf("\n");
    }
    int per_layer = s->num_kv_heads * s->head_dim;
    for (int l = 0; l < s->num_layers; l++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(layers, e);
        cJSON_AddNumberToObject(e, "layer", l);
        cJSON_AddNumberToObject(e, "tokens", (double)s->tokens[l]);
        if (!o->json)
            printf("  %5d  %8lld", l, (long long)s->tokens[l]);
        for (int kv = 0; kv < 2; kv++) {
            const float *a = s->absmax[kv] + (size_t)l * per_layer; /* (H, head_dim) */
            int top = 0;
            double sum = 0.0;
            for (int i = 0; i < per_layer; i++) {
                sum += a[i];
                if (a[i] > a[top])
                    top = i;
            }
            double ratio = sum > 0 ? a[top] / (sum / per_layer) : 0.0;
            cJSON *x = cJSON_AddObjectToObject(e, kv == KVCAL_K ? "k" : "v");
            cJSON_AddNumberToObject(x, "absmax", a[top]);
            cJSON_AddNumberToObject(x, "top_head", top / s->head_dim);
            cJSON_AddNumberToObject(x, "top_channel", top % s->head_dim);
            cJSON_AddNumberToObject(x, "top_over_mean", ratio);
            if (!o->json)
                printf("  %10.5g  %4d/%-3d  %6.2f", a[top], top / s->head_dim,
                       top % s->head_dim, ratio);
        }
        if (!o->json)
            printf("\n");
    }
    /* a mixture of experts' routing: the experts the calibration left cold */
    if (s->num_experts && !o->json)
        printf("  experts (%d a layer): tokens routed, the fewest and the most, and the "
               "experts no token reached\n",
               s->num_experts);
    for (int l = 0; s->num_experts && l < s->num_layers; l++) {
        const int64_t *c = s->expert_tokens + (size_t)l * s->num_experts;
        int lo = 0, hi = 0, cold = 0;
        for (int e = 0; e < s->num_experts; e++) {
            lo = c[e] < c[lo] ? e : lo;
            hi = c[e] > c[hi] ? e : hi;
            cold += c[e] == 0;
        }
        cJSON *counts = cJSON_CreateArray();
        for (int e = 0; e < s->num_experts; e++)
            cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)c[e]));
        cJSON_AddItemToObject(cJSON_GetArrayItem(layers, l), "expert_tokens", counts);
        if (!o->json && c[hi] > 0)
            printf("  %5d  fewest %lld (expert %d), most %lld (expert %d), %d cold\n", l,
                   (long long)c[lo], lo, (long long)c[hi], hi, cold);
        else if (!o->json)
            printf("  %5d  a dense layer (no routing)\n", l);
    }
    kvcal_stats_destroy(s);
    return KVCAL_EXIT_OK;
}

// --- token sets --------------------------------------------------------------

/* KVCAL_ERR_FORMAT naming the sample and position of the first id of the
 * first n samples that tok (--tokenizer, else the one beside --model) has
 * no token for; checked before anything is printed. */
static kvcal_status check_decodable(const char *path, const kvcal_documents *docs, int n,
                                    const kvcal_tokenizer_t *tok, const inspect_opts *o)
{
    const int vocab = kvcal_tokenizer_vocab_size(tok);
    for (int i = 0; i < n && i < docs->num_docs; i++)
        for (size_t k = 0; k < docs->lengths[i]; k++)
            if (docs->ids[i][k] < 0 || docs->ids[i][k] >= vocab)
                return kvcal_fail(
                    KVCAL_ERR_FORMAT,
                    "%s: sample %d: id %d at position %zu is outside the vocabulary "
                    "(%d tokens, ids 0 to %d) of %s%s; decode with the tokenizer the "
                    "ids were made with (--tokenizer or --model)",
                    path, i, (int)docs->ids[i][k], k, vocab, vocab - 1,
                    o->tokenizer ? "" : "the tokenizer beside ",
                    o->tokenizer ? o->tokenizer : o->model);
    return KVCAL_OK;
}

static int inspect_tokens(const char *path, int hdf5, inspect_opts *o)
{
    kvcal_token_set_info info = {.pack = -1};
    kvcal_documents *docs = NULL;
    kvcal_tokenizer_t *tok = NULL;
    kvcal_status st = KVCAL_OK;
    if ((hdf5 && (st = kvcal_token_set_info_read(path, &info))) ||
        (st = kvcal_dataset_tokenize_documents(path, NULL, NULL, NULL, &docs)) ||
        (o->decode && (st = kvcal_tokenizer_find(o->model, o->tokenizer, &tok))) ||
        (o->decode && (st = check_decodable(path, docs, o->decode, tok, o))))
        goto fail;
    long long tokens = 0, shortest = docs->num_docs ? (long long)docs->lengths[0] : 0,
              longest = 0;
    for (int i = 0; i < docs->num_docs; i++) {
        long long n = (long long)docs->lengths[i];
        tokens += n;
        shortest = n < shortest ? n : shortest;
        longest = n > longest ? n : longest;
    }
    long long samples = hdf5 ? info.num_samples : docs->num_docs;
    long long padding = hdf5 ? info.num_samples * info.seq_len - tokens : 0;
    cJSON *j = o->out, *dec;
    cJSON_AddStringToObject(j, "kind", "tokens");
    cJSON_AddStringToObject(j, "format", hdf5 ? "hdf5" : "jsonl");
    cJSON_AddNumberToObject(j, "num_samples", (double)samples);
    cJSON_AddNumberToObject(j, "seq_len", (double)(hdf5 ? info.seq_len : longest));
    cJSON_AddNumberToObject(j, "num_tokens", (double)tokens);
    cJSON_AddNumberToObject(j, "padding", (double)padding);
    cJSON_AddNumberToObject(j, "min_length", (double)shortest);
    cJSON_AddNumberToObject(j, "max_length", (double)longest);
    if (hdf5) {
        cJSON_AddStringToObject(j, "source", info.source);
        cJSON_AddStringToObject(j, "tokenizer", info.tokenizer);
        cJSON_AddStringToObject(j, "tokenizer_kind", info.tokenizer_kind);
        cJSON_AddNumberToObject(j, "seed", (double)info.seed);
        cJSON_AddBoolToObject(j, "pack", info.pack == 1);
    }
    dec = cJSON_AddArrayToObject(j, "decoded");
    if (!o->json) {
        if (hdf5)
            printf("%s: token set (hdf5 %s v%lld), %lld samples x %lld tokens, %lld "
                   "tokens, %lld padding (%.1f%%)\n  source          %s\n  tokenizer  "
                   "     %s (%s), seed %lld, %s\n",
                   path, info.format[0] ? info.format : "without format attribute",
                   info.format_version, samples, info.seq_len, tokens, padding,
                   samples ? 100.0 * (double)padding / (double)(samples * info.seq_len)
                           : 0.0,
                   info.source, info.tokenizer, info.tokenizer_kind, info.seed,
                   info.pack == 1 ? "packed" : "one document per sample");
        else
            printf("%s: token ids (jsonl), %lld documents, %lld tokens\n", path, samples,
                   tokens);
        printf("  lengths         %lld .. %lld tokens\n", shortest, longest);
    }
    for (int i = 0; i < o->decode && i < docs->num_docs; i++) {
        char *text = NULL;
        if ((st = kvcal_tokenizer_decode(tok, docs->ids[i], docs->lengths[i], &text)))
            goto fail;
        cJSON_AddItemToArray(dec, cJSON_CreateString(text));
        if (!o->json)
            printf("--- sample %d (%zu tokens)\n%s\n", i, docs->lengths[i], text);
        free(text);
    }
    kvcal_documents_destroy(docs);
    kvcal_tokenizer_destroy(tok);
    return KVCAL_EXIT_OK;
fail:
    fprintf(stderr, "kvcal inspect: %s\n", kvcal_last_error());
    kvcal_documents_destroy(docs);
    kvcal_tokenizer_destroy(tok);
    return kvcal_cmd_file_exit_code(st);
}

KVCAL_COMMAND(inspect, "inspect", "describe a model, scales, statistics or token set");

int kvcal_cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'},
        {"model", required_argument, NULL, 'm'},
        {"decode", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"heatmap", no_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    inspect_opts o = {0};
    o.heatmap = isatty(STDOUT_FILENO);
    int c;
    kvcal_cmd_seen_options seen = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":t:m:d:jh", opts, NULL)) != -1) {
        if (kvcal_cmd_mark_option("inspect", opts, c, optarg, &seen))
            return KVCAL_EXIT_USAGE;
        switch (c) {
        case 't':
            if (kvcal_cmd_parse_path("inspect", "--tokenizer", optarg, &o.tokenizer))
                return KVCAL_EXIT_USAGE;
            break;
        case 'm':
            if (kvcal_cmd_parse_path("inspect", "--model", optarg, &o.model))
                return KVCAL_EXIT_USAGE;
            break;
        case 'd':
            if (kvcal_cmd_parse_int("inspect", "--decode", optarg, 0, 1000000, &o.decode))
                return KVCAL_EXIT_USAGE;
            break;
        case 'j':
            o.json = 1;
            break;
        case 'H':
            o.heatmap = 1;
            break;
        case 'h':
            inspect_usage(stdout);
            return KVCAL_EXIT_OK;
        case ':':
            fprintf(stderr, "kvcal inspect: %s needs a value (see --help)\n",
                    argv[optind - 1]);
            return KVCAL_EXIT_USAGE;
        default:
            fprintf(stderr, "kvcal inspect: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return KVCAL_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "kvcal inspect: expected exactly one PATH (see --help)\n");
        return KVCAL_EXIT_USAGE;
    }
    const char *path;
    if (kvcal_cmd_parse_path("inspect", "PATH", argv[optind], &path))
        return KVCAL_EXIT_USAGE;
    kvcal_file_kind kind = KVCAL_FILE_MODEL;
    kvcal_status st = kvcal_file_kind_detect(path, &kind);
    if (st) {
        fprintf(stderr, "kvcal inspect: %s\n", kvcal_last_error());
        return kvcal_cmd_file_exit_code(st);
    }
    if (o.decode && kind != KVCAL_FILE_TOKENS_HDF5 && kind != KVCAL_FILE_TOKENS_JSONL) {
        fprintf(stderr,
                "kvcal inspect: --decode prints samples of a token set, and %s is a %s; "
                "drop --decode\n",
                path,
                kind == KVCAL_FILE_MODEL    ? "model"
                : kind == KVCAL_FILE_SCALES ? "scales file"
                                            : "statistics file");
        return KVCAL_EXIT_USAGE;
    }
    if (o.decode && !o.tokenizer && !o.model) {
        fprintf(stderr,
                "kvcal inspect: --decode needs --tokenizer FILE or --model DIR\n");
        return KVCAL_EXIT_USAGE;
    }
    if (!(o.out = cJSON_CreateObject())) {
        fprintf(stderr, "kvcal inspect: out of memory\n");
        return KVCAL_EXIT_USAGE;
    }
    cJSON_AddStringToObject(o.out, "path", path);
    int rc = kind == KVCAL_FILE_MODEL    ? inspect_model(path, &o)
             : kind == KVCAL_FILE_SCALES ? inspect_scales(path, &o)
             : kind == KVCAL_FILE_STATS
                 ? inspect_stats(path, &o)
                 : inspect_tokens(path, kind == KVCAL_FILE_TOKENS_HDF5, &o);
    if ((!rc || o.complete) && o.json) {
        char *text = cJSON_Print(o.out);
        if (!text) {
            fprintf(stderr, "kvcal inspect: out of memory\n");
            rc = KVCAL_EXIT_USAGE;
        } else {
            printf("%s\n", text);
            free(text);
        }
    }
    cJSON_Delete(o.out);
    return rc;
}
