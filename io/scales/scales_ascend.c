/* io/scales/scales_ascend.c: int8 KV-cache scales and offsets as vllm-ascend's
 * C8 cache reads them from a ModelSlim checkpoint (schemas/README.md, "The
 * query's scale ... and the loaders of the other cache dtypes", gives the
 * rules and their source).
 *
 * What ModelSlim writes and vllm-ascend 0.23.0.post1 reads:
 * - quant_model_description.json in the model directory (its presence makes
 *   vllm-ascend pick its "ascend" quantization method,
 *   quantization/utils.py detect_quantization_method) with "kv_cache_type":
 *   "C8"; every layer whose description names
 *   model.layers.<i>.self_attn.k_proj.kv_cache_scale gets the C8 attention
 *   method (modelslim_config.py _add_kvcache_quant_metadata,
 *   get_quant_method); every linear layer's "<prefix>.weight" must be listed
 *   ("FLOAT" for an unquantized one: is_layer_skipped_ascend and
 *   get_linear_quant_type index it, a KeyError otherwise).
 * - tensors model.layers.<i>.self_attn.{k,v}_proj.kv_cache_{scale,offset}
 *   (renamed to attn.{k,v}_cache_{scale,offset} by get_cache_scale), one
 *   value or num_kv_heads x head_dim (per channel, ModelSlim's only shape:
 *   msmodelslim/processor/quant/attention.py), squeezed and cast to the
 *   model dtype (methods/kv_c8.py _c8_kv_scale_weight_loader); a missing one
 *   keeps its start value, scale 1, offset 0 (create_weights).
 * - attention_v1.py: K and V are stored as clamp(round(x / scale + offset),
 *   -128, 127) (_quantize_kv_to_int8); decode and paged prefill dequantize
 *   with the scale alone (_forward_c8_decode, _dequant_paged_kv_to_dense:
 *   "Scale-only dequant"), only the unpaged prefill subtracts the offset.
 * Written here: f32 tensors (vllm-ascend casts them to the model dtype; the
 * offsets are integers, exact in bf16), one value per layer for per-tensor
 * sets, each head's value repeated over its head_dim channels for per-head
 * sets; a symmetric int8 set (absmax / 127) gets offsets 0. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/scale_rule.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/checkpoint/lm_prefix.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"
#include "io/path.h"
#include "io/scales/scales_io.h"

#define ASC_LOAD_FAILS "vllm-ascend fails to load the model"
#define ASC_MAX_LAYERS 65536

/* Tensor name suffixes after "model.layers.<i>.self_attn.", by kind. */
enum { ASC_K_SCALE, ASC_K_OFFSET, ASC_V_SCALE, ASC_V_OFFSET, ASC_KINDS };
static const char *const asc_suffix[ASC_KINDS] = {
    "k_proj.kv_cache_scale", "k_proj.kv_cache_offset", "v_proj.kv_cache_scale",
    "v_proj.kv_cache_offset"};

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The layer of a C8 tensor name and its kind, or -1. */
static long parse_name(const char *name, int *kind)
{
    const char *suffix;
    int layout = -1;
    long layer = kvcal_scales_parse_attn_name(name, &suffix, &layout);
    if (layer < 0 || layout != KVCAL_LM_CAUSAL) /* vllm-ascend's C8 names */
        return -1;
    for (int k = 0; layer >= 0 && k < ASC_KINDS; k++)
        if (!strcmp(suffix, asc_suffix[k])) {
            *kind = k;
            return layer;
        }
    return -1;
}

int kvcal_scales_is_ascend_dir(const char *dir)
{
    char p[4096];
    return !kvcal_path_join(p, sizeof p, dir, KVCAL_ASCEND_DESCRIPTION) && is_file(p);
}

/* A linear layer's weight the description must list: a matrix ".weight"
 * that is not the embedding or lm_head (vLLM's VocabParallelEmbedding and
 * ParallelLMHead, which the description may leave out). */
static int is_linear_weight(const kvcal_tensor_info *t)
{
    size_t n = strlen(t->name);
    return t->ndim == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") &&
           !strstr(t->name, "embed_tokens") && !strstr(t->name, "lm_head");
}

/* Values of an offset or scale tensor as floats (float or integer dtypes). */
static kvcal_status read_values(const kvcal_tensor_info *t, float *dst)
{
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case KVCAL_DTYPE_I8:
        for (int64_t i = 0; i < t->numel; i++)
            dst[i] = (float)(signed char)p[i];
        return KVCAL_OK;
    case KVCAL_DTYPE_I32:
        for (int64_t i = 0; i < t->numel; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            dst[i] = (float)v;
        }
        return KVCAL_OK;
    default:
        return kvcal_tensor_to_f32(t, dst);
    }
}

// --- reading ------------------------------------------------------------------

/* Checks one tensor of layer l and kind k: its shape (1 or heads x head_dim
 * values), its values (scales finite and > 0, offsets integers in [-128,
 * 127]; a non-zero offset a warning); fills vals (heads x head_dim, a single
 * value repeated) and returns 1 when they may be used. */
static int check_tensor(const kvcal_tensor_info *t, int k, int heads, int head_dim,
                        kvcal_report_t *rep, kvcal_value_tally *tally, float *vals,
                        int *nonzero_offset)
{
    const int64_t per_channel = (int64_t)heads * head_dim;
    if (t->numel != 1 && t->numel != per_channel) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                         "vllm-ascend fails at the first forward (RuntimeError: it "
                         "views the tensor as (kv_heads, head_dim))",
                         "%lld values, expected 1 or %d kv heads x %d head_dim = %lld",
                         (long long)t->numel, heads, head_dim, (long long)per_channel);
        return 0;
    }
    float *raw = malloc((size_t)t->numel * sizeof *raw);
    if (!raw || read_values(t, raw) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                         ASC_LOAD_FAILS, "%s",
                         raw ? kvcal_last_error() : "out of memory");
        free(raw);
        return 0;
    }
    const int offset = k == ASC_K_OFFSET || k == ASC_V_OFFSET;
    int ok = 1;
    for (int64_t i = 0; ok && i < t->numel; i++) {
        if (!offset) {
            ok = kvcal_report_check_value_as(
                rep, KVCAL_FORMAT_ASCEND,
                "vllm-ascend quantizes with its reciprocal: the layer's cache becomes "
                "Inf/NaN or 0",
                raw[i], t->name, i ? NULL : tally);
        } else if (!kvcal_int8_offset_is_valid(raw[i])) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, t->name,
                             "vllm-ascend adds it to x / scale before clamping to [-128, "
                             "127]: the cached values are shifted or saturate",
                             "offset %g is not an integer in [-128, 127]",
                             (double)raw[i]);
            ok = 0;
        } else {
            *nonzero_offset |= raw[i] != 0.0f;
        }
    }
    for (int64_t i = 0; ok && i < per_channel; i++)
        vals[i] = raw[t->numel == 1 ? 0 : i];
    free(raw);
    return ok;
}

/* The tensors' values (layers, kind, heads x head_dim) into one set: per
 * tensor when every tensor held one value, per head when each head's
 * channels agree (a per-channel file, ModelSlim's, holds more than kvcal
 * keeps: KVCAL_ERR_UNSUPPORTED). */
static kvcal_status build_set(const float *vals, int layers, int heads, int head_dim,
                              int all_single, int any_offset, const kvcal_scales_ctx *ctx,
                              kvcal_scales_t **out)
{
    kvcal_scales_t *s = NULL;
    kvcal_status st = kvcal_scales_create(layers, heads, &s);
    if (!st && any_offset)
        st = kvcal_scales_set_offsets(s, 1);
    if (st)
        goto fail;
    s->format = any_offset ? KVCAL_KV_FORMAT_INT8_ASYM : KVCAL_KV_FORMAT_INT8;
    s->granularity = all_single ? KVCAL_GRANULARITY_TENSOR : KVCAL_GRANULARITY_HEAD;
    const size_t row = (size_t)heads * head_dim;
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < ASC_KINDS; k++) {
            const float *v = vals + ((size_t)l * ASC_KINDS + k) * row;
            float *dst = k == ASC_K_SCALE    ? s->k_head
                         : k == ASC_V_SCALE  ? s->v_head
                         : k == ASC_K_OFFSET ? s->k_offset
                                             : s->v_offset;
            for (int h = 0; dst && h < heads; h++) {
                for (int c = 1; c < head_dim; c++)
                    if (v[(size_t)h * head_dim + c] != v[(size_t)h * head_dim]) {
                        st = kvcal_fail(
                            KVCAL_ERR_UNSUPPORTED,
                            "%s: model.layers.%d.self_attn.%s: per-channel values that "
                            "differ within kv head %d: kvcal keeps one scale and offset "
                            "per kv head; validate-scales checks such a file, convert "
                            "and eval cannot take it",
                            ctx->name, l, asc_suffix[k], h);
                        goto fail;
                    }
                dst[kvcal_scales_index(s, l, h)] = v[(size_t)h * head_dim];
            }
        }
    if (ctx->model) {
        const kvcal_model_config *m = ctx->model;
        kvcal_scales_set_model(s, m->architecture, m->model_type, m->num_attention_heads,
                               m->head_dim);
    }
    *out = s;
    return KVCAL_OK;
fail:
    kvcal_scales_destroy(s);
    return st;
}

/* The description's checks: a JSON object, kv_cache_type C8, every layer's
 * C8 tensors listed, every linear weight of the checkpoint listed. */
static void check_description(const cJSON *desc, const kvcal_checkpoint_t *model,
                              int layers, kvcal_report_t *rep)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(desc, "kv_cache_type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "C8"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         KVCAL_ASCEND_DESCRIPTION ".kv_cache_type",
                         "vllm-ascend gives no layer the C8 method: the cache stays in "
                         "the model dtype and the scales are never used",
                         "%s, expected \"C8\"", type ? "not \"C8\"" : "missing");
    char name[160];
    for (int l = 0; l < layers; l++) {
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", l,
                 asc_suffix[ASC_K_SCALE]);
        if (!cJSON_HasObjectItem(desc, name)) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             KVCAL_ASCEND_DESCRIPTION,
                             "vllm-ascend gives the layer no C8 method and fails to load "
                             "its scale tensors",
                             "does not list %s", name);
            break;
        }
    }
    int missing = 0;
    const char *first = NULL;
    for (int i = 0; model && i < kvcal_checkpoint_count(model); i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(model, i);
        if (is_linear_weight(t) && !cJSON_HasObjectItem(desc, t->name) && !missing++)
            first = t->name;
    }
    if (missing)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         KVCAL_ASCEND_DESCRIPTION,
                         ASC_LOAD_FAILS " (KeyError in is_layer_skipped_ascend: every "
                                        "linear layer's weight must be listed, \"FLOAT\" "
                                        "when unquantized)",
                         "does not list %s (%d linear weights missing)", first, missing);
}

kvcal_status kvcal_scales_check_ascend(const char *dir, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out)
{
    kvcal_report_set_format(rep, KVCAL_FORMAT_ASCEND);
    if (out)
        *out = NULL;
    char p[4096];
    kvcal_model_config own;
    kvcal_scales_ctx c = *ctx;
    cJSON *desc = NULL;
    kvcal_checkpoint_t *model = NULL, *ck = NULL;
    const kvcal_tensor_info *(*tensors)[ASC_KINDS] = NULL;
    float *vals = NULL;
    kvcal_status st = KVCAL_OK;
    if (kvcal_path_join(p, sizeof p, dir, KVCAL_ASCEND_DESCRIPTION) ||
        kvcal_json_load(p, &desc) != KVCAL_OK || !cJSON_IsObject(desc)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE,
                         KVCAL_ASCEND_DESCRIPTION, ASC_LOAD_FAILS, "%s",
                         desc ? "not a JSON object" : kvcal_last_error());
        goto done;
    }
    if (!c.model && !kvcal_path_join(p, sizeof p, dir, "config.json") && is_file(p)) {
        if (kvcal_model_config_load(p, &own) != KVCAL_OK) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "config.json",
                             ASC_LOAD_FAILS, "%s", kvcal_last_error());
            goto done;
        }
        c.model = &own;
    }
    if (!c.model || c.model->head_dim < 1) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "config.json",
                         "kvcal cannot tell the per-channel layout (kv heads x "
                         "head_dim) vllm-ascend reads",
                         "not found beside the scales; pass --model DIR");
        goto done;
    }
    const int layers = c.model->num_layers, heads = c.model->num_kv_heads,
              hd = c.model->head_dim;
    /* the scales: kvcal's shard when the directory has one, else the
     * checkpoint (ModelSlim's quant_model_weights) */
    const int own_shard =
        !kvcal_path_join(p, sizeof p, dir, KVCAL_CHECKPOINT_SHARD) && is_file(p);
    if (kvcal_checkpoint_open(own_shard ? p : dir, &ck) != KVCAL_OK) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_PARSE, "", ASC_LOAD_FAILS,
                         "%s", kvcal_last_error());
        goto done;
    }
    if (!own_shard)
        model = ck;
    else if (kvcal_checkpoint_open(dir, &model) != KVCAL_OK)
        model = NULL; /* the scales alone, beside no weights: nothing to list */
    check_description(desc, model, layers, rep);
    tensors = calloc((size_t)layers, sizeof *tensors);
    const size_t row = (size_t)heads * hd;
    vals = malloc((size_t)layers * ASC_KINDS * row * sizeof *vals);
    if (!tensors || !vals) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (int i = 0; i < kvcal_checkpoint_count(ck); i++) {
        const kvcal_tensor_info *t = kvcal_checkpoint_at(ck, i);
        int k;
        long l = parse_name(t->name, &k);
        if (l < 0)
            continue;
        if (l >= layers)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, t->name,
                             ASC_LOAD_FAILS, "layer %ld beyond the model's %d layers", l,
                             layers);
        else
            tensors[l][k] = t;
    }
    kvcal_value_tally tally = {0};
    tally.qmax = 127.0;
    int all_single = 1, any_offset = 0, missing[ASC_KINDS] = {0},
        first_missing[ASC_KINDS] = {0};
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < ASC_KINDS; k++) {
            const kvcal_tensor_info *t = tensors[l][k];
            if (!t && !missing[k]++)
                first_missing[k] = l;
            if (!t)
                continue;
            all_single &= t->numel == 1;
            check_tensor(t, k, heads, hd, rep, &tally,
                         vals + ((size_t)l * ASC_KINDS + k) * row, &any_offset);
        }
    for (int k = 0; k < ASC_KINDS; k++) {
        if (!missing[k])
            continue;
        char name[160];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", first_missing[k],
                 asc_suffix[k]);
        const int offset = k == ASC_K_OFFSET || k == ASC_V_OFFSET;
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, name,
                         offset ? "vllm-ascend keeps the offset at 0 (kv_c8.py "
                                  "create_weights) and quantizes with the scale alone"
                                : "vllm-ascend keeps the scale at 1.0 (kv_c8.py "
                                  "create_weights): the cache rounds K or V to integers",
                         "missing (in %d of %d layers)", missing[k], layers);
    }
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_ASCEND, &tally);
    if (!all_single)
        kvcal_report_check_tp_split(rep, "config.json num_key_value_heads", heads, c.tp);
    if (any_offset)
        kvcal_report_add(
            rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "",
            "vllm-ascend 0.23.0.post1 stores x / scale + offset but dequantizes decode "
            "and paged prefill with the scale alone (attention_v1.py "
            "_forward_c8_decode): every cached value reads back shifted by offset x "
            "scale",
            "non-zero kv_cache_offset");
    if (out && kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) == 0)
        st = build_set(vals, layers, heads, hd, all_single, any_offset, &c, out);
done:
    free(tensors);
    free(vals);
    if (model != ck)
        kvcal_checkpoint_close(model);
    kvcal_checkpoint_close(ck);
    cJSON_Delete(desc);
    return st ? st : kvcal_report_status(rep);
}

// --- writing ------------------------------------------------------------------

int kvcal_scales_ascend_files(const char **names, int max)
{
    const char *all[3] = {KVCAL_CHECKPOINT_SHARD, KVCAL_CHECKPOINT_INDEX,
                          KVCAL_ASCEND_DESCRIPTION};
    int n = 0;
    for (int i = 0; i < 3 && n < max; i++)
        names[n++] = all[i];
    return n;
}

/* The index: the model's own with the scale tensors added, or a new one
 * listing every tensor of the model's checkpoint under its shard. */
static kvcal_status build_index(const char *model_dir, const kvcal_checkpoint_t *model,
                                const kvcal_tensor_out *tensors, int count, cJSON **out)
{
    char p[4096];
    cJSON *index = NULL;
    kvcal_status st = KVCAL_OK;
    if (!kvcal_path_join(p, sizeof p, model_dir, KVCAL_CHECKPOINT_INDEX) && is_file(p)) {
        if ((st = kvcal_json_load(p, &index)))
            return st;
    } else {
        index = cJSON_CreateObject();
        cJSON *map = index ? cJSON_AddObjectToObject(index, "weight_map") : NULL;
        for (int i = 0; map && i < kvcal_checkpoint_count(model); i++) {
            const char *shard = kvcal_checkpoint_shard_of(model, i);
            const char *slash = strrchr(shard, '/');
            if (!cJSON_AddStringToObject(map, kvcal_checkpoint_at(model, i)->name,
                                         slash ? slash + 1 : shard))
                map = NULL;
        }
        if (!map)
            st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the index");
    }
    cJSON *map = st ? NULL : cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!st && !cJSON_IsObject(map))
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s/%s: weight_map is not an object; fix the index first",
                        model_dir, KVCAL_CHECKPOINT_INDEX);
    for (int i = 0; !st && i < count; i++) {
        cJSON *v = cJSON_CreateString(KVCAL_CHECKPOINT_SHARD);
        if (!v || (cJSON_HasObjectItem(map, tensors[i].name)
                       ? !cJSON_ReplaceItemInObjectCaseSensitive(map, tensors[i].name, v)
                       : !cJSON_AddItemToObject(map, tensors[i].name, v)))
            st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the index");
    }
    if (st) {
        cJSON_Delete(index);
        return st;
    }
    *out = index;
    return KVCAL_OK;
}

/* The description: the model's own (a ModelSlim-quantized model), or every
 * weight of its checkpoint as "FLOAT"; then kv_cache_type C8 and the scale
 * tensors. */
static kvcal_status build_description(const char *model_dir,
                                      const kvcal_checkpoint_t *model,
                                      const kvcal_tensor_out *tensors, int count,
                                      cJSON **out)
{
    char p[4096];
    cJSON *desc = NULL;
    kvcal_status st = KVCAL_OK;
    if (!kvcal_path_join(p, sizeof p, model_dir, KVCAL_ASCEND_DESCRIPTION) &&
        is_file(p)) {
        if ((st = kvcal_json_load(p, &desc)))
            return st;
        if (!cJSON_IsObject(desc)) {
            cJSON_Delete(desc);
            return kvcal_fail(KVCAL_ERR_FORMAT, "%s: not a JSON object; fix it first", p);
        }
    } else {
        desc = cJSON_CreateObject();
        int ok = desc && cJSON_AddStringToObject(desc, "model_quant_type", "FLOAT");
        for (int i = 0; ok && i < kvcal_checkpoint_count(model); i++) {
            const char *name = kvcal_checkpoint_at(model, i)->name;
            size_t n = strlen(name);
            if (n > 7 && !strcmp(name + n - 7, ".weight"))
                ok = cJSON_AddStringToObject(desc, name, "FLOAT") != NULL;
        }
        if (!ok) {
            cJSON_Delete(desc);
            return kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the description");
        }
    }
    const char *keys[2] = {"kv_cache_type", "kv_quant_type"};
    for (int i = 0; !st && i < 2 + count; i++) {
        const char *key = i < 2 ? keys[i] : tensors[i - 2].name;
        cJSON *v = cJSON_CreateString("C8");
        if (!v || (cJSON_HasObjectItem(desc, key)
                       ? !cJSON_ReplaceItemInObjectCaseSensitive(desc, key, v)
                       : !cJSON_AddItemToObject(desc, key, v)))
            st = kvcal_fail(KVCAL_ERR_NOMEM, "out of memory building the description");
    }
    if (st) {
        cJSON_Delete(desc);
        return st;
    }
    *out = desc;
    return KVCAL_OK;
}

/* What the model must be for vllm-ascend to read C8 scales: a Hugging Face
 * checkpoint (the description lists its weights), served through ModelSlim's
 * config (no other quant_method), holding no C8 tensors of its own beside
 * kvcal's shard, of the set's shape. */
static kvcal_status check_model(const kvcal_scales_t *s, const char *dir,
                                const char *model_dir, const kvcal_model_config *mc,
                                const kvcal_checkpoint_t *model)
{
    char p[4096];
    cJSON *config = NULL;
    if (kvcal_path_join(p, sizeof p, model_dir, "config.json") ||
        kvcal_json_load(p, &config))
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot read config.json", model_dir);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    char name[64] = "";
    if (cJSON_IsString(method))
        snprintf(name, sizeof name, "%s", method->valuestring);
    cJSON_Delete(config);
    if (name[0])
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: config.json says quant_method \"%s\": vLLM serves the model "
            "through that method and vllm-ascend never reads "
            "ModelSlim's C8 scales; use a ModelSlim-quantized or an "
            "unquantized model",
            model_dir, name);
    if (mc->num_layers != s->num_layers || mc->num_kv_heads != s->num_kv_heads ||
        mc->head_dim < 1)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "%s: the scales have %d layers x %d kv heads but "
                          "%s/config.json has %d x %d (head_dim %d); pass the model the "
                          "scales were made for",
                          dir, s->num_layers, s->num_kv_heads, model_dir, mc->num_layers,
                          mc->num_kv_heads, mc->head_dim);
    for (int i = 0; i < kvcal_checkpoint_count(model); i++) {
        int k;
        const char *shard = kvcal_checkpoint_shard_of(model, i);
        const char *base = strrchr(shard, '/');
        if (parse_name(kvcal_checkpoint_at(model, i)->name, &k) >= 0 &&
            strcmp(base ? base + 1 : shard, KVCAL_CHECKPOINT_SHARD))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: %s is already stored in %s; vLLM would load it "
                              "besides the new " KVCAL_CHECKPOINT_SHARD
                              " (the last one read wins): remove the old C8 scales first",
                              model_dir, kvcal_checkpoint_at(model, i)->name, shard);
    }
    return KVCAL_OK;
}

kvcal_status kvcal_scales_write_ascend(const kvcal_scales_t *s, const char *dir,
                                       const char *model_dir, int allow_offsets)
{
    if (!s || !dir || !model_dir)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "ascend export needs the model directory (its weights are "
                          "listed in quant_model_description.json)");
    if (s->format != KVCAL_KV_FORMAT_INT8 && s->format != KVCAL_KV_FORMAT_INT8_ASYM)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: vllm-ascend's C8 cache is int8: calibrate with --kv-dtype "
                          "int8 (offsets 0) or int8_asym",
                          dir);
    const size_t n_heads = (size_t)s->num_layers * s->num_kv_heads;
    for (size_t i = 0; s->k_offset && !allow_offsets && i < 2 * n_heads; i++)
        if (s->k_offset[i] != 0.0f)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: layer %d kv head %d: %s offset %g: vllm-ascend 0.23.0.post1 "
                "dequantizes decode with the scale alone, so every cached value would "
                "read back shifted by offset x scale (schemas/README.md); write "
                "--kv-dtype int8 (offsets 0), or pass --force-offsets to write them",
                dir, (int)(i % n_heads) / s->num_kv_heads,
                (int)(i % n_heads) % s->num_kv_heads, i < n_heads ? "K" : "V",
                (double)s->k_offset[i]);
    kvcal_status st = kvcal_scales_check_finite(s, dir);
    if (st)
        return st;
    kvcal_model_config mc;
    kvcal_checkpoint_t *model = NULL;
    if ((st = kvcal_model_config_load(model_dir, &mc)))
        return st;
    if (kvcal_scales_uncached_layers(s))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %s caches nothing in %d of its layers (linear attention), "
            "and kvcal writes vllm-ascend's C8 scales for every layer; "
            "write the kvcal or checkpoint format with " KVCAL_FORMAT_OPTIONS,
            dir, mc.architecture, kvcal_scales_uncached_layers(s));
    if (mc.multimodal)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s keeps its language model in a multimodal model, and "
                          "kvcal writes vllm-ascend's C8 scales for causal LMs alone "
                          "(model.layers.<i>); write the kvcal or checkpoint format "
                          "with " KVCAL_FORMAT_OPTIONS,
                          dir, mc.architecture);
    if (kvcal_checkpoint_open(model_dir, &model))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "%s: %s: vllm-ascend serves Hugging Face checkpoints and the "
                          "description must list the model's weights: pass the "
                          "checkpoint's directory",
                          dir, kvcal_last_error());
    if ((st = check_model(s, dir, model_dir, &mc, model))) {
        kvcal_checkpoint_close(model);
        return st;
    }
    if ((st = kvcal_atomic_mkdir(dir))) {
        kvcal_checkpoint_close(model);
        return st;
    }
    /* one value a layer per tensor (symmetric: the max over heads, as every
     * per-tensor format), unless the heads' offsets or scales differ */
    int per_head = s->granularity == KVCAL_GRANULARITY_HEAD;
    for (size_t i = 0; s->k_offset && !per_head && i < n_heads; i++) {
        const size_t h0 = i - i % (size_t)s->num_kv_heads;
        per_head = s->k_head[i] != s->k_head[h0] || s->v_head[i] != s->v_head[h0] ||
                   s->k_offset[i] != s->k_offset[h0] || s->v_offset[i] != s->v_offset[h0];
    }
    const int hd = mc.head_dim;
    const int64_t numel = per_head ? (int64_t)s->num_kv_heads * hd : 1;
    const int n = ASC_KINDS * s->num_layers;
    char *names = malloc((size_t)n * 96), p[4096];
    float *data = malloc(sizeof(float) * (size_t)n * numel);
    kvcal_tensor_out *tensors = calloc((size_t)n, sizeof *tensors);
    cJSON *index = NULL, *desc = NULL;
    if (!names || !data || !tensors) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (int l = 0; l < s->num_layers; l++)
        for (int k = 0; k < ASC_KINDS; k++) {
            const int t = l * ASC_KINDS + k;
            const float *src = k == ASC_K_SCALE    ? s->k_head
                               : k == ASC_V_SCALE  ? s->v_head
                               : k == ASC_K_OFFSET ? s->k_offset
                                                   : s->v_offset;
            float *d = data + (size_t)t * numel, kmax, vmax;
            kvcal_scales_get_tensor(s, l, &kmax, &vmax);
            for (int64_t c = 0; c < numel; c++)
                d[c] = !src ? 0.0f
                       : per_head || s->k_offset
                           ? src[kvcal_scales_index(s, l, (int)(c / hd))]
                       : k == ASC_K_SCALE ? kmax
                                          : vmax;
            snprintf(names + (size_t)t * 96, 96, "model.layers.%d.self_attn.%s", l,
                     asc_suffix[k]);
            tensors[t] = (kvcal_tensor_out){
                names + (size_t)t * 96, KVCAL_DTYPE_F32, 1, {numel}, d};
        }
    if ((st = build_index(model_dir, model, tensors, n, &index)) ||
        (st = build_description(model_dir, model, tensors, n, &desc)))
        goto done;
    char meta[128];
    snprintf(meta, sizeof meta, "{\"format\": \"pt\", \"producer\": \"kvcal %s\"}",
             KVCAL_VERSION_STRING);
    if ((st = kvcal_path_join(p, sizeof p, dir, KVCAL_CHECKPOINT_SHARD)
                  ? kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: path too long", dir)
                  : kvcal_safetensors_write(p, tensors, n, meta)))
        goto done;
    kvcal_path_join(p, sizeof p, dir, KVCAL_CHECKPOINT_INDEX);
    if ((st = kvcal_json_write(p, index)))
        goto done;
    kvcal_path_join(p, sizeof p, dir, KVCAL_ASCEND_DESCRIPTION);
    st = kvcal_json_write(p, desc);
done:
    free(names);
    free(data);
    free(tensors);
    cJSON_Delete(index);
    cJSON_Delete(desc);
    kvcal_checkpoint_close(model);
    return st;
}
