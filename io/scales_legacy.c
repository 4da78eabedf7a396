/* io/scales_legacy.c: the legacy KV-cache scales JSON read by sglang
 * (--quantization-param-path) and by vLLM before 2025:
 *
 *   {"model_type": "llama",
 *    "kv_cache": {"dtype": "float8_e4m3fn",
 *                 "scaling_factor": {"<tp rank>": {"<layer>": scale}}}}
 *
 * One scale per layer and rank, shared by K and V: max(k, v) over the kv
 * heads the rank holds. Rank r of tp holds heads [r*H/tp, (r+1)*H/tp); when
 * H < tp the heads are replicated and rank r holds head r*H/tp (vLLM
 * QKVParallelLinear). The rules the engines apply are listed in
 * io/scales_validate.h; every one is checked here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/json_file.h"
#include "io/scales_io.h"

#define LEGACY_DTYPE "float8_e4m3fn"
/* Layer indices accepted when no model says how many layers there are. */
#define LEGACY_MAX_LAYERS 65536

/* First kv head held by rank r of tp, and how many. */
static void rank_heads(int num_kv_heads, int tp, int r, int *first, int *count)
{
    if (num_kv_heads >= tp) {
        *first = r * (num_kv_heads / tp);
        *count = num_kv_heads / tp;
    } else {
        *first = r * num_kv_heads / tp;
        *count = 1;
    }
}

/* Reports a rank or layer key that is not a plain decimal integer. */
static void report_bad_key(kvcal_report_t *rep, const char *place, const char *what,
                           const char *key)
{
    char *end = NULL;
    long v = strtol(key, &end, 10);
    int python_int = end != key && *end == '\0';
    char consequence[200];
    if (python_int)
        snprintf(consequence, sizeof consequence,
                 "vLLM/sglang read it as %ld, other readers reject it; write \"%ld\"", v,
                 v);
    else
        snprintf(consequence, sizeof consequence, "%s", KVCAL_LEGACY_REJECTED);
    kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place, consequence,
                     "%s key \"%.40s\" is not a plain decimal integer", what, key);
}

static void check_model_type(const cJSON *root, const kvcal_scales_ctx *ctx,
                             kvcal_report_t *rep)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *want =
        ctx->model && ctx->model->model_type[0] ? ctx->model->model_type : NULL;
    if (!mt) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "model_type",
                         KVCAL_LEGACY_REJECTED,
                         "missing (the schema requires the key, null "
                         "allowed)");
    } else if (cJSON_IsNull(mt)) {
        if (want)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, "model_type",
                             KVCAL_LEGACY_REJECTED, "null but config.json says \"%s\"",
                             want);
    } else if (!cJSON_IsString(mt)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "model_type",
                         KVCAL_LEGACY_REJECTED, "not a string");
    } else if (want && strcmp(mt->valuestring, want)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, "model_type",
                         KVCAL_LEGACY_REJECTED, "\"%.64s\" but config.json says \"%s\"",
                         mt->valuestring, want);
    }
}

static void check_unknown_keys(const cJSON *obj, const char *place,
                               const char *const *known, kvcal_report_t *rep)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        int ok = 0;
        for (const char *const *k = known; *k; k++)
            ok |= !strcmp(c->string, *k);
        if (!ok)
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
                             "vLLM/sglang ignore it", "unknown key \"%.40s\"", c->string);
    }
}

/* The layer table of one rank: values[l] and present[l] for l < num_layers;
 * reports bad keys, values, extra and missing layers. */
static void check_rank_layers(const cJSON *layers, int r, int num_layers,
                              int known_layers, kvcal_report_t *rep, kvcal_value_tally *t,
                              float *values, unsigned char *present)
{
    char place[128];
    int extra = 0, first_extra = -1;
    for (const cJSON *c = layers->child; c; c = c->next) {
        snprintf(place, sizeof place, "kv_cache.scaling_factor.%d", r);
        long l = kvcal_parse_index_key(c->string);
        if (l < 0) {
            report_bad_key(rep, place, "layer", c->string);
            continue;
        }
        if (l >= num_layers) {
            if (extra++ == 0)
                first_extra = (int)l;
            continue;
        }
        snprintf(place, sizeof place, "kv_cache.scaling_factor.%d.%ld", r, l);
        float v;
        if (kvcal_report_check_scale_node(rep, KVCAL_FORMAT_LEGACY_JSON, c, place, t, &v))
            values[l] = v;
        present[l] = 1;
    }
    snprintf(place, sizeof place, "kv_cache.scaling_factor.%d", r);
    if (extra)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                         KVCAL_LEGACY_REJECTED,
                         "%d layer(s) beyond the %s %d (first: %d)", extra,
                         known_layers ? "model's num_hidden_layers" : "layer limit",
                         num_layers, first_extra);
    int missing = 0, first_missing = -1;
    for (int l = 0; l < num_layers; l++)
        if (!present[l] && missing++ == 0)
            first_missing = l;
    if (missing)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                         KVCAL_LEGACY_REJECTED,
                         "rank %d lacks %d of %d layers (first: layer %d)", r, missing,
                         num_layers, first_missing);
}

/* Layers the file describes when no model is given: 1 + the largest valid
 * layer index of any rank (capped). */
static int count_file_layers(const cJSON *sf)
{
    long n = 0;
    for (const cJSON *rank = sf->child; rank; rank = rank->next)
        if (cJSON_IsObject(rank))
            for (const cJSON *c = rank->child; c; c = c->next) {
                long l = kvcal_parse_index_key(c->string);
                if (l >= 0 && l < LEGACY_MAX_LAYERS && l + 1 > n)
                    n = l + 1;
            }
    return (int)n;
}

/* Builds the scale set from the checked table (values[r * L + l]). */
static kvcal_status build_scales(const float *values, int num_ranks, int num_layers,
                                 const kvcal_scales_ctx *ctx, const char *model_type,
                                 kvcal_scales_t **out)
{
    int heads = ctx->model ? ctx->model->num_kv_heads : num_ranks;
    kvcal_scales_t *s = NULL;
    kvcal_status st = kvcal_scales_create(num_layers, heads, &s);
    if (st)
        return st;
    for (int r = 0; r < num_ranks; r++) {
        int first, count;
        rank_heads(heads, num_ranks, r, &first, &count);
        for (int l = 0; l < num_layers; l++)
            for (int h = first; h < first + count; h++) {
                int i = kvcal_scales_index(s, l, h);
                float v = values[(size_t)r * num_layers + l];
                s->k_head[i] = v > s->k_head[i] ? v : s->k_head[i];
                s->v_head[i] = s->k_head[i];
            }
    }
    s->granularity = num_ranks == 1 ? KVCAL_GRANULARITY_TENSOR : KVCAL_GRANULARITY_HEAD;
    s->kv_shared = 1;
    if (ctx->model) {
        snprintf(s->model.architecture, sizeof s->model.architecture, "%s",
                 ctx->model->architecture);
        s->model.num_attention_heads = ctx->model->num_attention_heads;
        s->model.head_dim = ctx->model->head_dim;
    }
    snprintf(s->model.model_type, sizeof s->model.model_type, "%s",
             ctx->model   ? ctx->model->model_type
             : model_type ? model_type
                          : "");
    *out = s;
    return KVCAL_OK;
}

kvcal_status kvcal_scales_check_legacy(const cJSON *root, const kvcal_scales_ctx *ctx,
                                       kvcal_report_t *rep, kvcal_scales_t **out)
{
    static const char *const top_keys[] = {"model_type", "kv_cache", NULL};
    static const char *const kv_keys[] = {"dtype", "scaling_factor", NULL};
    kvcal_report_set_format(rep, KVCAL_FORMAT_LEGACY_JSON);
    if (out)
        *out = NULL;
    if (!cJSON_IsObject(root)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "",
                         KVCAL_LEGACY_REJECTED, "top level is not a JSON object");
        return KVCAL_OK;
    }
    check_model_type(root, ctx, rep);
    check_unknown_keys(root, "", top_keys, rep);
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "kv_cache");
    if (!cJSON_IsObject(kv)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "kv_cache",
                         KVCAL_LEGACY_REJECTED, kv ? "not an object" : "missing");
        return kvcal_report_status(rep);
    }
    check_unknown_keys(kv, "kv_cache", kv_keys, rep);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(kv, "dtype");
    if (!cJSON_IsString(dtype))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, "kv_cache.dtype",
                         KVCAL_LEGACY_REJECTED, dtype ? "not a string" : "missing");
    else if (strcmp(dtype->valuestring, LEGACY_DTYPE))
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                         "kv_cache.dtype", KVCAL_LEGACY_REJECTED,
                         "\"%.40s\", but the engines accept only \"" LEGACY_DTYPE "\"",
                         dtype->valuestring);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(kv, "scaling_factor");
    if (!cJSON_IsObject(sf)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         sf ? "not an object" : "missing");
        return kvcal_report_status(rep);
    }

    int num_ranks = cJSON_GetArraySize(sf);
    if (num_ranks == 0) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED, "no ranks");
        return kvcal_report_status(rep);
    }
    if (ctx->tp > 0 && num_ranks != ctx->tp)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         "%d rank%s but tp %d", num_ranks, num_ranks == 1 ? "" : "s",
                         ctx->tp);
    if (ctx->model)
        kvcal_report_check_tp_split(rep, "kv_cache.scaling_factor",
                                    ctx->model->num_kv_heads, num_ranks);
    if (num_ranks > KVCAL_TP_MAX) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         "%d ranks (more than %d)", num_ranks, KVCAL_TP_MAX);
        return kvcal_report_status(rep);
    }
    int known_layers = ctx->model != NULL;
    int num_layers = known_layers ? ctx->model->num_layers : count_file_layers(sf);
    if (num_layers <= 0)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         "no layer has an integer key");

    kvcal_status st = KVCAL_OK;
    kvcal_value_tally tally = {0};
    size_t cells = (size_t)num_ranks * (size_t)(num_layers > 0 ? num_layers : 1);
    float *values = calloc(cells, sizeof *values);
    unsigned char *present = calloc((size_t)(num_layers > 0 ? num_layers : 1), 1);
    unsigned char *rank_seen = calloc((size_t)num_ranks, 1);
    if (!values || !present || !rank_seen) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory for %d ranks x %d layers",
                        ctx->name, num_ranks, num_layers);
        goto fail;
    }
    for (const cJSON *rank = sf->child; rank; rank = rank->next) {
        long r = kvcal_parse_index_key(rank->string);
        if (r < 0) {
            report_bad_key(rep, "kv_cache.scaling_factor", "rank", rank->string);
            continue;
        }
        if (r >= num_ranks) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                             "rank %ld but only %d ranks (ranks must be 0..%d)", r,
                             num_ranks, num_ranks - 1);
            continue;
        }
        rank_seen[r] = 1;
        if (!cJSON_IsObject(rank)) {
            char place[64];
            snprintf(place, sizeof place, "kv_cache.scaling_factor.%ld", r);
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVCAL_LEGACY_REJECTED, "not an object of layer scales");
            continue;
        }
        memset(present, 0, (size_t)(num_layers > 0 ? num_layers : 1));
        check_rank_layers(rank, (int)r, num_layers, known_layers, rep, &tally,
                          values + (size_t)r * num_layers, present);
    }
    for (int r = 0; r < num_ranks; r++)
        if (!rank_seen[r])
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                             "rank %d missing", r);
    kvcal_report_flush_tally(rep, KVCAL_FORMAT_LEGACY_JSON, &tally);
    st = kvcal_report_status(rep);
    if (!st && out && kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR) == 0) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        st = build_scales(values, num_ranks, num_layers, ctx,
                          cJSON_IsString(mt) ? mt->valuestring : NULL, out);
    }
fail:
    free(values);
    free(present);
    free(rank_seen);
    return st;
}

/* --- writer ------------------------------------------------------------- */

kvcal_status kvcal_scales_write_legacy(const kvcal_scales_t *s, const char *path, int tp)
{
    if (!s || !path || tp < 1 || tp > KVCAL_TP_MAX)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: legacy writer needs scales and tp in [1, %d] "
                          "(got tp %d)",
                          path ? path : "(null)", KVCAL_TP_MAX, tp);
    int heads = s->num_kv_heads;
    if (!((heads >= tp && heads % tp == 0) || (heads < tp && tp % heads == 0)))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "%s: %d kv heads cannot be split over tp %d; "
                          "pass the tp size the model is served with",
                          path, heads, tp);
    kvcal_status st = kvcal_scales_check_finite(s, path);
    if (st)
        return st;
    cJSON *root = cJSON_CreateObject();
    cJSON *kv = cJSON_AddObjectToObject(root, "kv_cache");
    cJSON *sf = kv ? cJSON_AddObjectToObject(kv, "scaling_factor") : NULL;
    int ok =
        root && sf && cJSON_AddStringToObject(kv, "dtype", LEGACY_DTYPE) &&
        (s->model.model_type[0]
             ? cJSON_AddStringToObject(root, "model_type", s->model.model_type) != NULL
             : cJSON_AddNullToObject(root, "model_type") != NULL);
    for (int r = 0; ok && r < tp; r++) {
        char key[16];
        snprintf(key, sizeof key, "%d", r);
        cJSON *layers = cJSON_AddObjectToObject(sf, key);
        int first, count;
        rank_heads(heads, tp, r, &first, &count);
        for (int l = 0; layers && l < s->num_layers; l++) {
            float v = 0.0f;
            for (int h = first; h < first + count; h++) {
                int i = kvcal_scales_index(s, l, h);
                v = s->k_head[i] > v ? s->k_head[i] : v;
                v = s->v_head[i] > v ? s->v_head[i] : v;
            }
            snprintf(key, sizeof key, "%d", l);
            ok = cJSON_AddNumberToObject(layers, key, (double)v) != NULL;
            if (!ok)
                break;
        }
        ok = ok && layers;
    }
    st = ok ? kvcal_json_write(path, root)
            : kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory building the JSON", path);
    cJSON_Delete(root);
    return st;
}
