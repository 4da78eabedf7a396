/* io/scales/scales_kvcal_json.c: kvcal's own scales JSON, the full result every
 * other format is derived from (schema: schemas/kvcal-scales.schema.json).
 *
 *   {"format": "kvcal-kv-scales", "version": 1,
 *    "model": {"architecture", "model_type", "num_layers",
 *              "num_attention_heads", "num_kv_heads", "head_dim"},
 *    "dtype": "float8_e4m3fn", "fp8_max": 448,
 *    "granularity": "tensor" | "head", "kv_shared": false,
 *    "observer": {"name": "minmax", "params": {}},
 *    "provenance": {"dataset", "num_samples", "num_tokens", "seed",
 *                   "tool_version"},
 *    "layers": [{"layer": 0, "k_scale", "v_scale",
 *                "k_scale_per_head": [H], "v_scale_per_head": [H],
 *                "k_absmax": [H], "v_absmax": [H], "k_clip", "v_clip",
 *                "q_scale", "q_scale_per_head": [num_attention_heads],
 *                "latent_absmax", "rope_absmax",
 *                "k_offset_per_head": [H], "v_offset_per_head": [H],
 *                "kv_cache": false}],
 *    "mla": {"kv_lora_rank", "qk_rope_head_dim"}}
 *
 * k_scale / v_scale are the per-tensor scales (max over heads, what an
 * engine with one scale per layer uses); the per-head arrays are the set's
 * values. absmax and clip are present when the set has them; k_clip /
 * v_clip are the estimated fractions of the layer's observed values that
 * clip under their scale, |x| / scale > 464 (what kvcal eval counts); q_scale,
 * the query's scale for FP8 attention (e4m3's, absmax / 448, whatever the
 * cache dtype), is in every layer or none, and so is q_scale_per_head (one
 * per query head, q_scale their max). dtype "int8_asym" (qmax 255: the range
 * over the scale) is int8 with zero points, vllm-ascend's C8 cache: each
 * layer holds k_offset_per_head / v_offset_per_head, integers in [-128,
 * 127] (core/scale_rule.h); no other dtype has offsets. "mla" is there for
 * a multi-head latent attention model (DeepSeek-V2/V3, Kimi K2), whose cache holds one
 * entry per token and layer: num_kv_heads is 1, head_dim kv_lora_rank + qk_rope_head_dim,
 * K and V the entry (one scale, vLLM's k_scale), and each layer adds the absmax of the
 * entry's latent and of its RoPE part. "kv_cache": false marks a layer that
 * caches nothing (a hybrid model's linear-attention layer), whose scales
 * (the floor) no engine reads. Numbers are printed with enough digits that
 * float32 values read back identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
#include "core/status.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"

#define KVJ_REFUSED "kvcal refuses to load or convert the file"
#define KVJ_WRONG_MODEL                                                                  \
    "the scales were made for another model: exported, they would scale the wrong "      \
    "layers/heads"

/* --- reading ------------------------------------------------------------- */

/* Reads an integer member in [lo, hi]; reports and returns -1 otherwise
 * (missing is reported only when required). */
static long long get_int(kvcal_report_t *rep, const cJSON *obj, const char *key,
                         const char *place, long long lo, long long hi, int required)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    char where[96];
    snprintf(where, sizeof where, "%s%s%s", place, place[0] ? "." : "", key);
    if (!n) {
        if (required)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, where,
                             KVJ_REFUSED, "missing");
        return -1;
    }
    if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble) ||
        n->valuedouble < (double)lo || n->valuedouble > (double)hi) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, where, KVJ_REFUSED,
                         "not an integer in [%lld, %lld]", lo, hi);
        return -1;
    }
    return (long long)n->valuedouble;
}

/* Copies a string member into dst; reports a non-string or one too long. */
static void get_str(kvcal_report_t *rep, const cJSON *obj, const char *key,
                    const char *place, char *dst, size_t size)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!n)
        return;
    char where[96];
    snprintf(where, sizeof where, "%s%s%s", place, place[0] ? "." : "", key);
    if (!cJSON_IsString(n) || strlen(n->valuestring) >= size)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, where, KVJ_REFUSED,
                         "not a string of fewer than %zu bytes", size);
    else
        memcpy(dst, n->valuestring, strlen(n->valuestring) + 1);
}

/* Reads an array of H values (scales when is_scale, else absmax >= 0). */
static int get_head_array(kvcal_report_t *rep, const cJSON *layer, const char *key, int l,
                          int heads, int is_scale, kvcal_value_tally *t, float *dst)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(layer, key);
    char place[96];
    snprintf(place, sizeof place, "layers[%d].%s", l, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "%s, expected an array of %d values (one per %s head)",
                         !a                 ? "missing"
                         : cJSON_IsArray(a) ? "wrong length"
                                            : "not an array",
                         heads, key[0] == 'q' ? "query" : "kv");
        return 0;
    }
    int ok = 1, h = 0;
    for (const cJSON *c = a->child; c; c = c->next, h++) {
        snprintf(place, sizeof place, "layers[%d].%s[%d]", l, key, h);
        if (is_scale) {
            ok &= kvcal_report_check_scale_node(rep, KVCAL_FORMAT_KVCAL_JSON, c, place, t,
                                                &dst[h]);
        } else if (!cJSON_IsNumber(c) || !(c->valuedouble >= 0.0) ||
                   c->valuedouble > 3.4028234663852886e38) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED, "absmax must be a finite number >= 0");
            ok = 0;
        } else {
            dst[h] = (float)c->valuedouble;
        }
    }
    return ok;
}

/* The "mla" object: the entry's latent and RoPE sizes into hdr, checked
 * against the file's own head_dim and num_kv_heads and against the model's
 * config (an MLA config without it: a warning, the parts' absmax unknown). */
static void check_mla(const cJSON *root, const kvcal_scales_ctx *ctx, kvcal_report_t *rep,
                      kvcal_scales_t *hdr)
{
    const cJSON *mla = cJSON_GetObjectItemCaseSensitive(root, "mla");
    const kvcal_model_config *m = ctx->model;
    if (!mla) {
        if (m && m->kv_layout == KVCAL_KV_MLA)
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "mla",
                             "the scales load, but the file does not say how the latent "
                             "and the RoPE part of the entry spread",
                             "missing for %s, an MLA model", m->architecture);
        return;
    }
    if (!cJSON_IsObject(mla)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "mla", KVJ_REFUSED,
                         "not an object");
        return;
    }
    const long long L = get_int(rep, mla, "kv_lora_rank", "mla", 1, 65536, 1);
    const long long R = get_int(rep, mla, "qk_rope_head_dim", "mla", 1, 65536, 1);
    if (L < 0 || R < 0)
        return;
    hdr->mla_kv_lora_rank = (int)L;
    hdr->mla_rope_dim = (int)R;
    if (hdr->model.num_kv_heads != 1 ||
        (hdr->model.head_dim && hdr->model.head_dim != L + R))
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "mla", KVJ_REFUSED,
            "an entry of %lld + %lld values, but model.num_kv_heads is %d and "
            "model.head_dim %d (an MLA file has one kv head of the entry)",
            L, R, hdr->model.num_kv_heads, hdr->model.head_dim);
    if (m && (m->kv_layout != KVCAL_KV_MLA || m->kv_lora_rank != L ||
              m->qk_rope_head_dim != R))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, "mla",
                         KVJ_WRONG_MODEL,
                         "kv_lora_rank %lld, qk_rope_head_dim %lld, but config.json has "
                         "%d and %d",
                         L, R, m->kv_lora_rank, m->qk_rope_head_dim);
}

/* Reads an INT8_ASYM layer's offsets of `key` (H integers in [-128, 127]) into
 * dst. */
static void get_offsets(kvcal_report_t *rep, const cJSON *layer, const char *key, int l,
                        int heads, float *dst)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(layer, key);
    char place[96];
    snprintf(place, sizeof place, "layers[%d].%s", l, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != heads) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "%s, expected an array of %d offsets (one per kv head) for "
                         "dtype int8_asym",
                         !a                 ? "missing"
                         : cJSON_IsArray(a) ? "wrong length"
                                            : "not an array",
                         heads);
        return;
    }
    int h = 0;
    for (const cJSON *c = a->child; c; c = c->next, h++) {
        snprintf(place, sizeof place, "layers[%d].%s[%d]", l, key, h);
        if (!cJSON_IsNumber(c) || !kvcal_int8_offset_is_valid((float)c->valuedouble) ||
            c->valuedouble != (float)c->valuedouble)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED,
                             "offset must be an integer in [-128, 127] (the int8 code "
                             "of zero)");
        else
            dst[h] = (float)c->valuedouble;
    }
}

/* Checks the top-level fields and the model; fills s's identity fields.
 * Returns 0 when the layer table cannot be read (sizes unknown). */
static int check_header(const cJSON *root, const kvcal_scales_ctx *ctx,
                        kvcal_report_t *rep, kvcal_scales_t *hdr)
{
    long long version = get_int(rep, root, "version", "", 1, 1000000, 1);
    if (version > KVCAL_SCALES_FORMAT_VERSION)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED, "version",
                         "this kvcal cannot read it; upgrade kvcal",
                         "version %lld is newer than %d", version,
                         KVCAL_SCALES_FORMAT_VERSION);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    const char *dn = cJSON_IsString(dtype) ? dtype->valuestring : "";
    hdr->format = !strcmp(dn, "int8")        ? KVCAL_KV_FORMAT_INT8
                  : !strcmp(dn, "nvfp4")     ? KVCAL_KV_FORMAT_NVFP4
                  : !strcmp(dn, "int8_asym") ? KVCAL_KV_FORMAT_INT8_ASYM
                                             : KVCAL_KV_FORMAT_FP8_E4M3;
    if (hdr->format == KVCAL_KV_FORMAT_FP8_E4M3 && strcmp(dn, "float8_e4m3fn"))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED, "dtype",
                         KVJ_REFUSED,
                         "must be \"float8_e4m3fn\", \"int8\", \"int8_asym\" or "
                         "\"nvfp4\"");
    if (hdr->format == KVCAL_KV_FORMAT_FP8_E4M3) {
        const cJSON *fmax = cJSON_GetObjectItemCaseSensitive(root, "fp8_max");
        if (!cJSON_IsNumber(fmax) || fmax->valuedouble != KVCAL_FP8_E4M3_MAX)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED, "fp8_max",
                             "scales for another fp8 maximum would be off by max/448; "
                             "kvcal refuses the file",
                             "must be 448 (OCP e4m3fn)");
    } else {
        const cJSON *qmax = cJSON_GetObjectItemCaseSensitive(root, "qmax");
        const double want = kvcal_scales_format_qmax(hdr->format);
        if (!cJSON_IsNumber(qmax) || qmax->valuedouble != want)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED, "qmax",
                             "scales for another maximum would be off by max/qmax; kvcal "
                             "refuses the file",
                             "must be %g for dtype %s (%s / scale)", want, dn,
                             hdr->format == KVCAL_KV_FORMAT_INT8_ASYM ? "(max - min)"
                                                                      : "absmax");
    }
    const cJSON *gran = cJSON_GetObjectItemCaseSensitive(root, "granularity");
    if (cJSON_IsString(gran) && !strcmp(gran->valuestring, "tensor"))
        hdr->granularity = KVCAL_GRANULARITY_TENSOR;
    else if (cJSON_IsString(gran) && !strcmp(gran->valuestring, "head"))
        hdr->granularity = KVCAL_GRANULARITY_HEAD;
    else
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "granularity",
                         KVJ_REFUSED, "must be \"tensor\" or \"head\"");
    const cJSON *shared = cJSON_GetObjectItemCaseSensitive(root, "kv_shared");
    if (shared && !cJSON_IsBool(shared))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "kv_shared",
                         KVJ_REFUSED, "not a boolean");
    hdr->kv_shared = cJSON_IsTrue(shared);

    const cJSON *obs = cJSON_GetObjectItemCaseSensitive(root, "observer");
    if (obs && !cJSON_IsObject(obs)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "observer",
                         KVJ_REFUSED, "not an object");
    } else if (obs) {
        get_str(rep, obs, "name", "observer", hdr->provenance.observer,
                sizeof hdr->provenance.observer);
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(obs, "params");
        char *text = cJSON_IsObject(params) ? cJSON_PrintUnformatted(params) : NULL;
        if (params && (!text || strlen(text) >= sizeof hdr->provenance.observer_params))
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "observer.params", KVJ_REFUSED,
                             "not a JSON object of fewer than %zu bytes",
                             sizeof hdr->provenance.observer_params);
        else if (text)
            memcpy(hdr->provenance.observer_params, text, strlen(text) + 1);
        free(text);
    }
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(root, "provenance");
    if (prov && !cJSON_IsObject(prov)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "provenance",
                         KVJ_REFUSED, "not an object");
    } else if (prov) {
        const long long big = 9007199254740992LL; /* 2^53: exact in a JSON number */
        get_str(rep, prov, "dataset", "provenance", hdr->provenance.dataset,
                sizeof hdr->provenance.dataset);
        get_str(rep, prov, "tool_version", "provenance", hdr->provenance.tool_version,
                sizeof hdr->provenance.tool_version);
        long long v;
        if ((v = get_int(rep, prov, "num_samples", "provenance", 0, big, 0)) >= 0)
            hdr->provenance.num_samples = v;
        if ((v = get_int(rep, prov, "num_tokens", "provenance", 0, big, 0)) >= 0)
            hdr->provenance.num_tokens = v;
        if ((v = get_int(rep, prov, "seed", "provenance", 0, big, 0)) >= 0)
            hdr->provenance.seed = v;
    }

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "model",
                         KVJ_REFUSED, model ? "not an object" : "missing");
        return 0;
    }
    kvcal_model_identity *id = &hdr->model;
    get_str(rep, model, "architecture", "model", id->architecture,
            sizeof id->architecture);
    get_str(rep, model, "model_type", "model", id->model_type, sizeof id->model_type);
    long long v;
    if ((v = get_int(rep, model, "num_attention_heads", "model", 0, 65536, 0)) >= 0)
        id->num_attention_heads = (int)v;
    if ((v = get_int(rep, model, "head_dim", "model", 0, 65536, 0)) >= 0)
        id->head_dim = (int)v;
    long long layers = get_int(rep, model, "num_layers", "model", 1, 65536, 1);
    long long heads = get_int(rep, model, "num_kv_heads", "model", 1, 65536, 1);
    if (layers < 0 || heads < 0)
        return 0;
    if (layers * heads > (1LL << 24)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "model",
                         KVJ_REFUSED,
                         "%lld layers x %lld kv heads is more than 2^24 (layer, kv head) "
                         "pairs; no model has that many",
                         layers, heads);
        return 0;
    }
    id->num_layers = (int)layers;
    id->num_kv_heads = (int)heads;
    if (ctx->model) {
        const kvcal_model_config *m = ctx->model;
        if (m->num_layers != layers)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                             "model.num_layers", KVJ_WRONG_MODEL,
                             "%lld but config.json has %d", layers, m->num_layers);
        if (m->kv_layout == KVCAL_KV_MLA && heads != 1)
            kvcal_report_add(
                rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, "model.num_kv_heads",
                "an MLA layer caches one entry per token under one scale: "
                "vLLM's MLAAttention has one kv head (MLAAttentionSpec "
                "num_kv_heads 1) and one k_scale",
                "%lld, but %s caches one latent entry of %d values per token "
                "and layer",
                heads, m->architecture, kvcal_model_config_cache_head_dim(m));
        else if (kvcal_model_config_cache_kv_heads(m) != heads)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                             "model.num_kv_heads", KVJ_WRONG_MODEL,
                             "%lld but config.json has %d", heads, m->num_kv_heads);
        if (id->model_type[0] && m->model_type[0] &&
            strcmp(id->model_type, m->model_type))
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                             "model.model_type", KVJ_WRONG_MODEL,
                             "\"%s\" but config.json says \"%s\"", id->model_type,
                             m->model_type);
    }
    if (hdr->granularity == KVCAL_GRANULARITY_HEAD)
        kvcal_report_check_tp_split(rep, "model.num_kv_heads", (int)heads, ctx->tp);
    check_mla(root, ctx, rep, hdr);
    return 1;
}

/* Reads one layer entry into s (sized). */
static void check_layer(const cJSON *e, int l, kvcal_report_t *rep, kvcal_value_tally *t,
                        kvcal_scales_t *s, int *absmax_layers, int *clip_layers,
                        int *q_layers)
{
    char place[96];
    snprintf(place, sizeof place, "layers[%d]", l);
    if (!cJSON_IsObject(e)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "not an object");
        return;
    }
    long long idx = get_int(rep, e, "layer", place, 0, 65535, 1);
    if (idx >= 0 && idx != l)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "\"layer\" is %lld, expected %d (layers are listed in order)",
                         idx, l);
    int heads = s->num_kv_heads;
    float *kh = s->k_head + (size_t)l * heads, *vh = s->v_head + (size_t)l * heads;
    float kt = 0.0f, vt = 0.0f;
    const char *names[2] = {"k_scale", "v_scale"};
    float *tensor[2] = {&kt, &vt};
    for (int i = 0; i < 2; i++) {
        snprintf(place, sizeof place, "layers[%d].%s", l, names[i]);
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, names[i]);
        if (!n)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED, "missing");
        else
            kvcal_report_check_scale_node(rep, KVCAL_FORMAT_KVCAL_JSON, n, place, NULL,
                                          tensor[i]);
    }
    const cJSON *cache = cJSON_GetObjectItemCaseSensitive(e, "kv_cache");
    snprintf(place, sizeof place, "layers[%d].kv_cache", l);
    if (cache && !cJSON_IsBool(cache))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "must be true or false");
    else if (cJSON_IsFalse(cache) && kvcal_scales_set_uncached(s, l))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_NOMEM, place, KVJ_REFUSED,
                         "%s", kvcal_last_error());
    int has_k = cJSON_HasObjectItem(e, "k_scale_per_head");
    int has_v = cJSON_HasObjectItem(e, "v_scale_per_head");
    if (has_k || has_v || s->granularity == KVCAL_GRANULARITY_HEAD) {
        int ok = get_head_array(rep, e, "k_scale_per_head", l, heads, 1, t, kh);
        ok &= get_head_array(rep, e, "v_scale_per_head", l, heads, 1, t, vh);
        float km = 0.0f, vm = 0.0f;
        for (int h = 0; ok && h < heads; h++) {
            km = kh[h] > km ? kh[h] : km;
            vm = vh[h] > vm ? vh[h] : vm;
        }
        snprintf(place, sizeof place, "layers[%d]", l);
        if (ok && kt > 0.0f && km != kt)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED,
                             "k_scale %.9g is not the max of k_scale_per_head (%.9g)",
                             (double)kt, (double)km);
        if (ok && vt > 0.0f && vm != vt)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED,
                             "v_scale %.9g is not the max of v_scale_per_head (%.9g)",
                             (double)vt, (double)vm);
    } else {
        for (int h = 0; h < heads; h++) {
            kh[h] = kt;
            vh[h] = vt;
        }
        for (int i = 0; i < 2; i++) {
            snprintf(place, sizeof place, "layers[%d].%s", l, names[i]);
            if (*tensor[i] > 0.0f)
                kvcal_report_check_value(rep, KVCAL_FORMAT_KVCAL_JSON, *tensor[i], place,
                                         t);
        }
    }
    if (cJSON_HasObjectItem(e, "k_absmax") || cJSON_HasObjectItem(e, "v_absmax")) {
        (*absmax_layers)++;
        get_head_array(rep, e, "k_absmax", l, heads, 0, NULL,
                       s->k_absmax + (size_t)l * heads);
        get_head_array(rep, e, "v_absmax", l, heads, 0, NULL,
                       s->v_absmax + (size_t)l * heads);
    }
    if (cJSON_HasObjectItem(e, "k_clip") || cJSON_HasObjectItem(e, "v_clip")) {
        (*clip_layers)++;
        const char *cn[2] = {"k_clip", "v_clip"};
        float *dst[2] = {&s->k_clip[l], &s->v_clip[l]};
        for (int i = 0; i < 2; i++) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, cn[i]);
            snprintf(place, sizeof place, "layers[%d].%s", l, cn[i]);
            if (!cJSON_IsNumber(n) || !(n->valuedouble >= 0.0 && n->valuedouble <= 1.0))
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                                 KVJ_REFUSED, "must be a fraction in [0, 1]");
            else
                *dst[i] = (float)n->valuedouble;
        }
    }
    const char *part[2] = {"latent_absmax", "rope_absmax"};
    float *part_dst[2] = {&s->mla_latent_absmax[l], &s->mla_rope_absmax[l]};
    for (int i = 0; s->mla_kv_lora_rank && i < 2; i++) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, part[i]);
        snprintf(place, sizeof place, "layers[%d].%s", l, part[i]);
        if (!cJSON_IsNumber(n) || !(n->valuedouble >= 0.0) ||
            n->valuedouble > 3.4028234663852886e38)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVJ_REFUSED,
                             "%s, expected the absmax (a finite number >= 0) "
                             "of an MLA file's layers",
                             n ? "not a finite number >= 0" : "missing");
        else
            *part_dst[i] = (float)n->valuedouble;
    }
    const size_t off = (size_t)l * heads;
    if (s->k_offset) {
        get_offsets(rep, e, "k_offset_per_head", l, heads, s->k_offset + off);
        get_offsets(rep, e, "v_offset_per_head", l, heads, s->v_offset + off);
    } else if (cJSON_HasObjectItem(e, "k_offset_per_head") ||
               cJSON_HasObjectItem(e, "v_offset_per_head")) {
        snprintf(place, sizeof place, "layers[%d]", l);
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
                         "k_offset_per_head / v_offset_per_head go with dtype "
                         "\"int8_asym\" only");
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(e, "q_scale");
    if (q) {
        (*q_layers)++;
        snprintf(place, sizeof place, "layers[%d].q_scale", l);
        kvcal_report_check_scale_node(rep, KVCAL_FORMAT_KVCAL_JSON, q, place, NULL,
                                      &s->q_scale[l]);
    }
    snprintf(place, sizeof place, "layers[%d].q_scale_per_head", l);
    const int per_head = cJSON_HasObjectItem(e, "q_scale_per_head");
    if (per_head != (s->q_head != NULL) || (per_head && !q)) {
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, KVJ_REFUSED,
            "q_scale_per_head goes with q_scale and model.num_attention_heads "
            "in every layer or in none");
    } else if (per_head) {
        const int Hq = s->num_q_heads;
        float *qh = s->q_head + (size_t)l * Hq, m = 0.0f;
        if (get_head_array(rep, e, "q_scale_per_head", l, Hq, 1, NULL, qh)) {
            for (int h = 0; h < Hq; h++)
                m = qh[h] > m ? qh[h] : m;
            if (m != s->q_scale[l])
                kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                                 KVJ_REFUSED,
                                 "q_scale %.9g is not the max of q_scale_per_head (%.9g)",
                                 (double)s->q_scale[l], (double)m);
        }
    }
}

/* Warns when every layer has K == V although the format holds both. */
static void check_kv_equal(const kvcal_scales_t *s, kvcal_report_t *rep)
{
    size_t n = (size_t)s->num_layers * s->num_kv_heads;
    for (size_t i = 0; i < n; i++)
        if (s->k_head[i] != s->v_head[i])
            return;
    kvcal_report_add(
        rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, "layers",
        "the larger of K and V sets both scales: the other tensor is quantized "
        "more coarsely than needed (typical of a file converted from the legacy "
        "format)",
        "K and V scales are equal in every layer%s",
        s->kv_shared ? " (kv_shared: true)" : "");
}

kvcal_status kvcal_scales_check_kvcal_json(const cJSON *root, const kvcal_scales_ctx *ctx,
                                           kvcal_report_t *rep, kvcal_scales_t **out)
{
    kvcal_report_set_format(rep, KVCAL_FORMAT_KVCAL_JSON);
    if (out)
        *out = NULL;
    kvcal_scales_t hdr;
    memset(&hdr, 0, sizeof hdr);
    if (!cJSON_IsObject(root)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "", KVJ_REFUSED,
                         "top level is not a JSON object");
        return kvcal_report_status(rep);
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, KVCAL_SCALES_FORMAT_NAME))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "format",
                         KVJ_REFUSED, "must be \"" KVCAL_SCALES_FORMAT_NAME "\"");
    if (!check_header(root, ctx, rep, &hdr))
        return kvcal_report_status(rep);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) != hdr.model.num_layers) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "layers",
                         KVJ_REFUSED,
                         "%s, expected an array of model.num_layers (%d) entries",
                         !layers                 ? "missing"
                         : cJSON_IsArray(layers) ? "wrong length"
                                                 : "not an array",
                         hdr.model.num_layers);
        return kvcal_report_status(rep);
    }
    kvcal_scales_t *s = NULL;
    kvcal_status st =
        kvcal_scales_create(hdr.model.num_layers, hdr.model.num_kv_heads, &s);
    if (st)
        return st;
    s->granularity = hdr.granularity;
    s->format = hdr.format;
    if (s->format == KVCAL_KV_FORMAT_INT8_ASYM && (st = kvcal_scales_set_offsets(s, 1))) {
        kvcal_scales_destroy(s);
        return st;
    }
    s->kv_shared = hdr.kv_shared;
    s->mla_kv_lora_rank = hdr.mla_kv_lora_rank;
    s->mla_rope_dim = hdr.mla_rope_dim;
    s->model = hdr.model;
    s->provenance = hdr.provenance;
    /* per query head q scales: the first layer says, the others must agree */
    if (cJSON_HasObjectItem(layers->child, "q_scale_per_head") &&
        hdr.model.num_attention_heads > 0 &&
        (st = kvcal_scales_set_q_heads(s, hdr.model.num_attention_heads))) {
        kvcal_scales_destroy(s);
        return st;
    }
    if (!hdr.provenance.observer_params[0])
        strcpy(s->provenance.observer_params, "{}");
    kvcal_value_tally tally = {0};
    tally.qmax = kvcal_scales_format_qmax(s->format);
    int absmax_layers = 0, clip_layers = 0, q_layers = 0, l = 0;
    for (const cJSON *e = layers->child; e; e = e->next, l++)
        check_layer(e, l, rep, &tally, s, &absmax_layers, &clip_layers, &q_layers);
    if (absmax_layers && absmax_layers != s->num_layers)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "layers",
                         KVJ_REFUSED,
                         "k_absmax/v_absmax in %d of %d layers (all or none)",
                         absmax_layers, s->num_layers);
    if (clip_layers && clip_layers != s->num_layers)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "layers",
                         KVJ_REFUSED, "k_clip/v_clip in %d of %d layers (all or none)",
                         clip_layers, s->num_layers);
    if (q_layers && q_layers != s->num_layers)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "layers",
                         KVJ_REFUSED, "q_scale in %d of %d layers (all or none)",
                         q_layers, s->num_layers);
    s->has_absmax = absmax_layers > 0;
    s->has_clip = clip_layers > 0;
    s->has_q = q_layers > 0;
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_KVCAL_JSON, &tally);
    /* an MLA entry is K and V at once: its scales are equal by design */
    if (kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) == 0 &&
        !s->mla_kv_lora_rank)
        check_kv_equal(s, rep);
    st = kvcal_report_status(rep);
    if (!st && out && kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) == 0) {
        *out = s;
        s = NULL;
    }
    kvcal_scales_destroy(s);
    return st;
}

/* --- writing ------------------------------------------------------------- */

static int add_floats(cJSON *obj, const char *key, const float *v, int n)
{
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber((double)v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            return 0;
        }
    }
    return a != NULL;
}

/* A count in [0, 2^53] as its exact decimal digits (cJSON prints numbers
 * above 10^15 with 15 significant digits). */
static int add_count(cJSON *obj, const char *key, long long v)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    return cJSON_AddRawToObject(obj, key, text) != NULL;
}

/* The "dtype" of a scale set's format. */
static const char *dtype_name(kvcal_kv_format f)
{
    return f == KVCAL_KV_FORMAT_INT8        ? "int8"
           : f == KVCAL_KV_FORMAT_NVFP4     ? "nvfp4"
           : f == KVCAL_KV_FORMAT_INT8_ASYM ? "int8_asym"
                                            : "float8_e4m3fn";
}

static int add_header(cJSON *root, const kvcal_scales_t *s)
{
    const kvcal_model_identity *id = &s->model;
    const kvcal_provenance *p = &s->provenance;
    cJSON *model, *obs, *prov, *params;
    int ok =
        cJSON_AddStringToObject(root, "format", KVCAL_SCALES_FORMAT_NAME) &&
        cJSON_AddNumberToObject(root, "version", KVCAL_SCALES_FORMAT_VERSION) &&
        (model = cJSON_AddObjectToObject(root, "model")) &&
        cJSON_AddStringToObject(model, "architecture", id->architecture) &&
        cJSON_AddStringToObject(model, "model_type", id->model_type) &&
        cJSON_AddNumberToObject(model, "num_layers", s->num_layers) &&
        cJSON_AddNumberToObject(model, "num_attention_heads", id->num_attention_heads) &&
        cJSON_AddNumberToObject(model, "num_kv_heads", s->num_kv_heads) &&
        cJSON_AddNumberToObject(model, "head_dim", id->head_dim) &&
        cJSON_AddStringToObject(root, "dtype", dtype_name(s->format)) &&
        (s->format == KVCAL_KV_FORMAT_FP8_E4M3
             ? cJSON_AddNumberToObject(root, "fp8_max", KVCAL_FP8_E4M3_MAX) != NULL
             : cJSON_AddNumberToObject(root, "qmax",
                                       kvcal_scales_format_qmax(s->format)) != NULL) &&
        cJSON_AddStringToObject(root, "granularity",
                                s->granularity == KVCAL_GRANULARITY_HEAD ? "head"
                                                                         : "tensor") &&
        cJSON_AddBoolToObject(root, "kv_shared", s->kv_shared) &&
        (obs = cJSON_AddObjectToObject(root, "observer")) &&
        cJSON_AddStringToObject(obs, "name", p->observer) &&
        (prov = cJSON_AddObjectToObject(root, "provenance")) &&
        cJSON_AddStringToObject(prov, "dataset", p->dataset) &&
        add_count(prov, "num_samples", p->num_samples) &&
        add_count(prov, "num_tokens", p->num_tokens) &&
        add_count(prov, "seed", p->seed) &&
        cJSON_AddStringToObject(prov, "tool_version", p->tool_version);
    if (!ok)
        return 0;
    params = cJSON_Parse(p->observer_params[0] ? p->observer_params : "{}");
    if (!cJSON_IsObject(params) || !cJSON_AddItemToObject(obs, "params", params)) {
        cJSON_Delete(params);
        return -1;
    }
    return 1;
}

kvcal_status kvcal_scales_write_kvcal_json(const kvcal_scales_t *s, const char *path)
{
    if (!s || !path)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_scales_write_kvcal_json: NULL argument");
    kvcal_status st = kvcal_scales_check_finite(s, path);
    if (st)
        return st;
    if ((s->format == KVCAL_KV_FORMAT_INT8_ASYM) != (s->k_offset != NULL))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: int8 with zero points needs its offsets, and only it has "
                          "them (kvcal_scales_set_offsets); nothing was written",
                          path);
    for (int l = 0; s->has_q && l < s->num_layers; l++)
        if (!kvcal_scale_is_valid(s->q_scale[l]))
            return kvcal_fail(KVCAL_ERR_NONFINITE,
                              "%s: layer %d has no q scale (%g) while another layer has "
                              "one: the format holds q for every layer or none; nothing "
                              "was written (set every layer's, kvcal_scales_set_q)",
                              path, l, (double)s->q_scale[l]);
    const int q_heads = s->has_q && s->q_head ? s->num_q_heads : 0;
    for (size_t i = 0; i < (size_t)s->num_layers * q_heads; i++)
        if (!kvcal_scale_is_valid(s->q_head[i]))
            return kvcal_fail(KVCAL_ERR_NONFINITE,
                              "%s: layer %d query head %d: q scale %g is not finite and "
                              "> 0; nothing was written",
                              path, (int)(i / q_heads), (int)(i % q_heads),
                              (double)s->q_head[i]);
    const long long big = 9007199254740992LL; /* 2^53: exact in a JSON number */
    const kvcal_provenance *p = &s->provenance;
    const long long counts[3] = {p->num_samples, p->num_tokens, p->seed};
    const char *count_names[3] = {"num_samples", "num_tokens", "seed"};
    for (int i = 0; i < 3; i++)
        if (counts[i] < 0 || counts[i] > big)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "%s: provenance %s %lld is outside [0, 2^53], which a JSON "
                              "number holds exactly; nothing was written (use a smaller "
                              "seed)",
                              path, count_names[i], counts[i]);
    cJSON *root = cJSON_CreateObject();
    int hdr = root ? add_header(root, s) : 0;
    if (hdr < 0) {
        cJSON_Delete(root);
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: observer parameters \"%.60s\" are not a "
                          "JSON object; nothing was written",
                          path, s->provenance.observer_params);
    }
    cJSON *layers = hdr ? cJSON_AddArrayToObject(root, "layers") : NULL;
    int ok = layers != NULL, heads = s->num_kv_heads;
    for (int l = 0; ok && l < s->num_layers; l++) {
        cJSON *e = cJSON_CreateObject();
        float k, v;
        kvcal_scales_get_tensor(s, l, &k, &v);
        size_t off = (size_t)l * heads;
        ok = e && cJSON_AddItemToArray(layers, e);
        ok = ok && cJSON_AddNumberToObject(e, "layer", l) &&
             cJSON_AddNumberToObject(e, "k_scale", (double)k) &&
             cJSON_AddNumberToObject(e, "v_scale", (double)v) &&
             add_floats(e, "k_scale_per_head", s->k_head + off, heads) &&
             add_floats(e, "v_scale_per_head", s->v_head + off, heads);
        if (ok && s->has_absmax)
            ok = add_floats(e, "k_absmax", s->k_absmax + off, heads) &&
                 add_floats(e, "v_absmax", s->v_absmax + off, heads);
        if (ok && s->has_clip)
            ok = cJSON_AddNumberToObject(e, "k_clip", (double)s->k_clip[l]) &&
                 cJSON_AddNumberToObject(e, "v_clip", (double)s->v_clip[l]);
        if (ok && s->has_q)
            ok = cJSON_AddNumberToObject(e, "q_scale", (double)s->q_scale[l]) != NULL;
        if (ok && q_heads)
            ok = add_floats(e, "q_scale_per_head", s->q_head + (size_t)l * q_heads,
                            q_heads);
        if (ok && s->mla_kv_lora_rank)
            ok = cJSON_AddNumberToObject(e, "latent_absmax",
                                         (double)s->mla_latent_absmax[l]) &&
                 cJSON_AddNumberToObject(e, "rope_absmax", (double)s->mla_rope_absmax[l]);
        if (ok && s->k_offset)
            ok = add_floats(e, "k_offset_per_head", s->k_offset + off, heads) &&
                 add_floats(e, "v_offset_per_head", s->v_offset + off, heads);
        if (ok && !kvcal_scales_layer_cached(s, l))
            ok = cJSON_AddBoolToObject(e, "kv_cache", 0) != NULL;
    }
    cJSON *mla;
    if (ok && s->mla_kv_lora_rank)
        ok = (mla = cJSON_AddObjectToObject(root, "mla")) &&
             cJSON_AddNumberToObject(mla, "kv_lora_rank", s->mla_kv_lora_rank) &&
             cJSON_AddNumberToObject(mla, "qk_rope_head_dim", s->mla_rope_dim);
    st = ok ? kvcal_json_write(path, root)
            : kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory building the JSON", path);
    cJSON_Delete(root);
    return st;
}
