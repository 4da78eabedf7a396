/* io/scales/scales_legacy.c: the legacy KV-cache scales JSON read by sglang
 * (--quantization-param-path; vLLM 0.4.1 to 0.6.6.post1 read it too, and
 * vLLM 0.7.0 removed the reader):
 *
 *   {"model_type": "llama",
 *    "kv_cache": {"dtype": "float8_e4m3fn",
 *                 "scaling_factor": {"<tp rank>": {"<layer>": scale}}}}
 *
 * One scale per layer and rank, shared by K and V: max(k, v) over the kv
 * heads the rank holds. Rank r of tp holds heads [r*H/tp, (r+1)*H/tp); when
 * H < tp the heads are replicated and rank r holds head r*H/tp (vLLM
 * QKVParallelLinear).
 *
 * What sglang 0.5.23 does with it (python/sglang/srt/model_loader/
 * weight_utils.py: kv_cache_scales_loader and the pydantic models
 * QuantParamSchema / KVCacheQuantSchema; each rank's loader reads the whole
 * file; any exception is logged and that rank keeps scale 1.0 for every
 * layer):
 * - json.load, then pydantic 2 in lax mode: rank and layer keys are read as
 *   Python ints (kvcal_parse_pydantic_int_key: "07", "+7", " 7", "7.0",
 *   "1_0" are integers, "rank0" is not), and of two keys that read as the
 *   same int the later one stays;
 * - dtype must be "float8_e4m3fn"; the model_type key is required (null
 *   allowed) and must equal the model's; there must be as many distinct
 *   ranks as tp, 0..tp-1 all present, and in every rank as many distinct
 *   layers as num_hidden_layers; the rank being loaded must hold every layer
 *   0..L-1, so a rank whose count is right but that lacks a layer fails on
 *   that rank alone;
 * - values are floats in lax mode ("0.05" and true pass; NaN, Infinity and
 *   1e400 come through json.load) with no range check; unknown keys are
 *   ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "io/scales/sglang_loaders.h"

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

static void check_architecture(const kvcal_scales_ctx *ctx, kvcal_report_t *rep)
{
    if (!ctx->model || !ctx->model->architecture[0])
        return;
    const char *arch = ctx->model->architecture;
    const kvcal_sglang_legacy how = kvcal_sglang_legacy_of(arch);
    if (how == KVCAL_SGLANG_LEGACY_READS)
        return;
    if (how != KVCAL_SGLANG_LEGACY_REFUSES) {
        kvcal_report_add(
            rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
            "config.json: architectures",
            how == KVCAL_SGLANG_LEGACY_FAILS
                ? "sglang 0.5.23 fails to start with --quantization-param-path "
                  "(AttributeError: its class hands the file to its model, "
                  "whose class has no load_kv_cache_scales)"
                : "sglang 0.5.23 starts with a warning that its model does "
                  "not support loading scaling factors, and every scale "
                  "stays 1.0",
            "%.80s reads no legacy scales file in sglang", arch);
        return;
    }
    /* where sglang's attention holds no scale, a checkpoint's are no way either */
    const int none =
        kvcal_sglang_checkpoint_scale(arch, "k_scale", NULL) == KVCAL_SGLANG_NO_SCALES;
    kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_UNSUPPORTED,
                     "config.json: architectures",
                     "sglang 0.5.23 refuses to start with --quantization-param-path and "
                     "an fp8_e4m3 cache (RuntimeError: the model does not support "
                     "loading scaling factors: its class has no load_kv_cache_scales)",
                     none ? "%.80s reads no legacy scales file in sglang (nor a "
                            "checkpoint's: its attention holds no k_scale / v_scale; "
                            "vLLM loads a checkpoint's)"
                          : "%.80s reads no legacy scales file in sglang (a checkpoint's "
                            "k_scale / v_scale: kvcal convert --to checkpoint)",
                     arch);
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
                             "sglang ignores it (the schema drops unknown keys)",
                             "unknown key \"%.40s\"", c->string);
    }
}

/* --- integer keys ----------------------------------------------------------- */

/* A rank or layer key the schema reads as an int. */
typedef struct int_key {
    long value;
    int order; /* position in the file */
    const cJSON *node;
} int_key;

static int compare_keys(const void *a, const void *b)
{
    const int_key *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->order - y->order;
}

/* Reads the keys of obj as sglang does: errors for keys that are not
 * integers, warnings for integers not spelled in plain decimal and for keys
 * that read as the same int. *out (caller frees) holds the accepted keys
 * sorted by value, the later of equal ones last; *count how many. */
static kvcal_status read_int_keys(const cJSON *obj, const char *place, const char *what,
                                  kvcal_report_t *rep, int_key **out, int *count)
{
    int n = cJSON_GetArraySize(obj), k = 0, order = 0;
    int_key *keys = calloc((size_t)(n > 0 ? n : 1), sizeof *keys);
    *out = keys;
    *count = 0;
    if (!keys)
        return kvcal_fail(KVCAL_ERR_NOMEM, "out of memory for %d %s keys", n, what);
    for (const cJSON *c = obj->child; c; c = c->next, order++) {
        long v = 0;
        kvcal_int_key kind = kvcal_parse_pydantic_int_key(c->string, &v);
        if (kind == KVCAL_INT_KEY_REJECTED) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVCAL_LEGACY_REJECTED, "%s key \"%.40s\" is not an integer",
                             what, c->string);
            continue;
        }
        if (kind == KVCAL_INT_KEY_NORMALIZED) {
            char consequence[160];
            snprintf(consequence, sizeof consequence,
                     "sglang (pydantic, lax mode) reads it as %s %ld; write \"%ld\"",
                     what, v, v);
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place, consequence,
                             "%s key \"%.40s\" is not a plain decimal integer", what,
                             c->string);
        }
        keys[k++] = (int_key){v, order, c};
    }
    qsort(keys, (size_t)k, sizeof *keys, compare_keys);
    for (int i = 1; i < k; i++)
        if (keys[i].value == keys[i - 1].value)
            kvcal_report_add(rep, KVCAL_SEVERITY_WARNING, KVCAL_OK, place,
                             "sglang keeps the later one; write each key once",
                             "%s keys \"%.40s\" and \"%.40s\" both read as %s %ld", what,
                             keys[i - 1].node->string, keys[i].node->string, what,
                             keys[i].value);
    *count = k;
    return KVCAL_OK;
}

/* The layer table of one rank (place: "kv_cache.scaling_factor.<key>").
 * Every key and value is checked; when `values` is not NULL (the rank the
 * schema keeps for index r) the layer count and coverage are checked too
 * and the scales stored in values[l] (0 where invalid) and present[l]. */
static kvcal_status check_rank_layers(const cJSON *layers, const char *place, int r,
                                      int num_layers, int known_layers,
                                      kvcal_report_t *rep, float *values,
                                      unsigned char *present)
{
    int_key *keys = NULL;
    int n = 0;
    kvcal_status st = read_int_keys(layers, place, "layer", rep, &keys, &n);
    if (st)
        goto fail;
    int inside = 0, extra = 0;
    long first_extra = 0;
    for (int i = 0; i < n; i++) {
        long l = keys[i].value;
        int last = i + 1 == n || keys[i + 1].value != l;
        char at[200];
        snprintf(at, sizeof at, "%s.%.40s", place, keys[i].node->string);
        float v = 0.0f;
        int ok = kvcal_report_check_scale_node(rep, KVCAL_FORMAT_LEGACY_JSON,
                                               keys[i].node, at, NULL, &v);
        if (!last)
            continue;
        if (l < 0 || l >= num_layers) {
            if (extra++ == 0)
                first_extra = l;
            continue;
        }
        inside++;
        if (values) {
            values[l] = ok ? v : 0.0f;
            present[l] = 1;
        }
    }
    if (!values)
        goto fail;
    int missing = num_layers - inside, first_missing = -1;
    for (int l = 0; l < num_layers && first_missing < 0; l++)
        if (!present[l])
            first_missing = l;
    char rank_only[160];
    snprintf(rank_only, sizeof rank_only,
             "sglang's rank %d rejects the file and uses scale 1.0 for every layer "
             "(the other ranks load it)",
             r);
    const char *consequence =
        inside + extra == num_layers ? rank_only : KVCAL_LEGACY_REJECTED;
    if (extra)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                         consequence, "%d layer(s) beyond the %s %d (first: %ld)", extra,
                         known_layers ? "model's num_hidden_layers" : "layer limit",
                         num_layers, first_extra);
    if (missing)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH, place,
                         consequence, "rank %d lacks %d of %d layers (first: layer %d)",
                         r, missing, num_layers, first_missing);
fail:
    free(keys);
    return st;
}

/* Layers the file describes when no model is given: 1 + the largest layer
 * index of any rank (capped). */
static int count_file_layers(const cJSON *sf)
{
    long n = 0;
    for (const cJSON *rank = sf->child; rank; rank = rank->next)
        if (cJSON_IsObject(rank))
            for (const cJSON *c = rank->child; c; c = c->next) {
                long l = 0;
                if (kvcal_parse_pydantic_int_key(c->string, &l) && l >= 0 &&
                    l < LEGACY_MAX_LAYERS && l + 1 > n)
                    n = l + 1;
            }
    return (int)n;
}

/* Builds the scale set from the checked table (values[r * L + l]). */
static kvcal_status build_scales(const float *values, int num_ranks, int num_layers,
                                 const kvcal_scales_ctx *ctx, const char *model_type,
                                 kvcal_scales_t **out)
{
    int heads = ctx->model ? kvcal_model_config_cache_kv_heads(ctx->model) : num_ranks;
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
        s->model.head_dim = kvcal_model_config_cache_head_dim(ctx->model);
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
    check_architecture(ctx, rep);
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
                         "\"%.40s\", but sglang accepts only \"" LEGACY_DTYPE "\"",
                         dtype->valuestring);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(kv, "scaling_factor");
    if (!cJSON_IsObject(sf)) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         sf ? "not an object" : "missing");
        return kvcal_report_status(rep);
    }

    int raw_ranks = cJSON_GetArraySize(sf);
    if (raw_ranks == 0) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED, "no ranks");
        return kvcal_report_status(rep);
    }
    if (raw_ranks > KVCAL_TP_MAX) {
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         "%d ranks (more than %d)", raw_ranks, KVCAL_TP_MAX);
        return kvcal_report_status(rep);
    }
    kvcal_value_tally tally = {0};
    float *values = NULL;
    unsigned char *present = NULL, *rank_seen = NULL;
    int_key *ranks = NULL;
    int num_keys = 0;
    kvcal_status st =
        read_int_keys(sf, "kv_cache.scaling_factor", "rank", rep, &ranks, &num_keys);
    if (st)
        goto fail;
    int num_ranks = 0;
    for (int i = 0; i < num_keys; i++)
        num_ranks += i == 0 || ranks[i].value != ranks[i - 1].value;
    if (num_ranks == 0)
        goto fail;
    if (ctx->tp > 0 && num_ranks != ctx->tp) {
        char why[256];
        snprintf(why, sizeof why,
                 KVCAL_LEGACY_REJECTED "; it is for tp %d (--tp %d); to serve at tp %d, "
                                       "rewrite it (kvcal convert FILE --to legacy --tp "
                                       "%d)",
                 num_ranks, num_ranks, ctx->tp, ctx->tp);
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_MISMATCH,
                         "kv_cache.scaling_factor", why, "%d rank%s but tp %d", num_ranks,
                         num_ranks == 1 ? "" : "s", ctx->tp);
    }
    if (ctx->model)
        kvcal_report_check_tp_split(rep, "kv_cache.scaling_factor",
                                    kvcal_model_config_cache_kv_heads(ctx->model),
                                    num_ranks);
    int known_layers = ctx->model != NULL;
    int num_layers = known_layers ? ctx->model->num_layers : count_file_layers(sf);
    if (num_layers <= 0)
        kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                         "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                         "no layer has an integer key");
    size_t layers1 = (size_t)(num_layers > 0 ? num_layers : 1);
    values = calloc((size_t)num_ranks * layers1, sizeof *values);
    present = calloc(layers1, 1);
    rank_seen = calloc((size_t)num_ranks, 1);
    if (!values || !present || !rank_seen) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory for %d ranks x %d layers",
                        ctx->name, num_ranks, num_layers);
        goto fail;
    }
    for (int i = 0; i < num_keys && !st; i++) {
        long r = ranks[i].value;
        int last = i + 1 == num_keys || ranks[i + 1].value != r;
        int inside = r >= 0 && r < num_ranks;
        if (last && !inside)
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT,
                             "kv_cache.scaling_factor", KVCAL_LEGACY_REJECTED,
                             "rank %ld but only %d ranks (ranks must be 0..%d)", r,
                             num_ranks, num_ranks - 1);
        char place[128];
        snprintf(place, sizeof place, "kv_cache.scaling_factor.%.40s",
                 ranks[i].node->string);
        if (!cJSON_IsObject(ranks[i].node)) {
            kvcal_report_add(rep, KVCAL_SEVERITY_ERROR, KVCAL_ERR_FORMAT, place,
                             KVCAL_LEGACY_REJECTED, "not an object of layer scales");
            continue;
        }
        int keep = last && inside && num_layers > 0;
        if (keep) {
            rank_seen[r] = 1;
            memset(present, 0, layers1);
        }
        st = check_rank_layers(ranks[i].node, place, (int)r,
                               num_layers > 0 ? num_layers : 0, known_layers, rep,
                               keep ? values + (size_t)r * layers1 : NULL, present);
        for (int l = 0; keep && l < num_layers; l++) {
            float v = values[(size_t)r * layers1 + l];
            char at[160];
            snprintf(at, sizeof at, "%s.%d", place, l);
            if (v > 0.0f)
                kvcal_report_check_value(rep, KVCAL_FORMAT_LEGACY_JSON, v, at, &tally);
        }
    }
    if (st)
        goto fail;
    for (int r = 0; r < num_ranks; r++)
        if (!rank_seen[r] && num_layers > 0)
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
    free(ranks);
    free(values);
    free(present);
    free(rank_seen);
    return st ? st : kvcal_report_status(rep);
}

kvcal_status kvcal_scales_spread_legacy_ranks(const char *path, int layers, int kv_heads,
                                              kvcal_scales_t **s)
{
    const kvcal_scales_t *in = *s;
    const int R = in->num_kv_heads, H = kv_heads, L = in->num_layers;
    if (R == H || L != layers || !in->kv_shared || H < 1)
        return KVCAL_OK;
    if (H % R && R % H)
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "%s: kv_cache.scaling_factor: %d tp ranks, but the model's %d "
                          "kv heads cannot be split over %d ranks; calibrate this model "
                          "and write the legacy file for the tp it is served with",
                          path, R, H, R);
    kvcal_scales_t *out = NULL;
    kvcal_status st = kvcal_scales_create(L, H, &out);
    if (st)
        return st;
    for (int r = 0; r < R; r++) {
        int first, count;
        rank_heads(H, R, r, &first, &count);
        for (int l = 0; l < L; l++)
            for (int h = first; h < first + count; h++) {
                const int i = kvcal_scales_index(out, l, h);
                const float v = in->k_head[kvcal_scales_index(in, l, r)];
                out->k_head[i] = out->v_head[i] = v > out->k_head[i] ? v : out->k_head[i];
            }
    }
    out->granularity = in->granularity;
    out->format = in->format;
    out->kv_shared = 1;
    out->model = in->model;
    out->model.num_kv_heads = H;
    out->provenance = in->provenance;
    kvcal_scales_destroy(*s);
    *s = out;
    return KVCAL_OK;
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
