/* io/checkpoint/config_fields.c: typed access to a config.json's fields
 * (see config_fields.h). */
#include "io/checkpoint/config_fields.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

/* The item of `key`, or NULL when absent or null. */
const cJSON *cfg_item(const cfg_obj *o, const char *key)
{
    const cJSON *it = o->obj ? cJSON_GetObjectItemCaseSensitive(o->obj, key) : NULL;
    return cJSON_IsNull(it) ? NULL : it;
}

/* "a string \"32\"", "true", "an object" ... for messages. */
static const char *cfg_describe(const cJSON *it, char *buf, size_t cap)
{
    if (cJSON_IsString(it))
        snprintf(buf, cap, "a string \"%.40s\"", it->valuestring);
    else if (cJSON_IsBool(it))
        snprintf(buf, cap, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it))
        snprintf(buf, cap, "%.17g", it->valuedouble);
    else if (cJSON_IsNull(it))
        snprintf(buf, cap, "null");
    else
        snprintf(buf, cap, "%s", cJSON_IsArray(it) ? "an array" : "an object");
    return buf;
}

kvcal_status cfg_bad(const cfg_obj *o, const char *key, const cJSON *it, const char *want)
{
    char buf[64];
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: field \"%s%s\": expected %s, found %s; fix the value", o->name,
                      o->prefix, key, want, cfg_describe(it, buf, sizeof buf));
}

kvcal_status cfg_missing(const cfg_obj *o, const char *key, const char *why)
{
    return kvcal_fail(
        KVCAL_ERR_FORMAT,
        "%s: field \"%s%s\" is missing%s; add it (see the model's transformers config)",
        o->name, o->prefix, key, why);
}

/* Integer in [min, max] (max INT_MAX: no bound of kvcal's own). Absent:
 * *out untouched, *found = 0 (found may be NULL). */
kvcal_status cfg_int(const cfg_obj *o, const char *key, int min, int max, int *out,
                     int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    char want[96];
    if (max == INT_MAX)
        snprintf(want, sizeof want, "an integer >= %d", min);
    else
        snprintf(want, sizeof want, "an integer in [%d, %d]%s", min, max,
                 cJSON_IsNumber(it) && it->valuedouble > max
                     ? " (kvcal's bound, far above any real model)"
                     : "");
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < min || it->valuedouble > max)
        return cfg_bad(o, key, it, want);
    *out = (int)it->valuedouble;
    return KVCAL_OK;
}

kvcal_status cfg_required_int(const cfg_obj *o, const char *key, int min, int max,
                              int *out)
{
    int found;
    kvcal_status s = cfg_int(o, key, min, max, out, &found);
    if (s == KVCAL_OK && !found)
        return cfg_missing(o, key, "");
    return s;
}

/* Whether v keeps its magnitude as a float, which the model's arithmetic
 * runs in: at most FLT_MAX and, unless 0, at least FLT_MIN (a larger one is
 * infinite there, a smaller one 0 or subnormal: NaN activations). */
static int cfg_float_holds(double v)
{
    return fabs(v) <= FLT_MAX && (v == 0.0 || fabs(v) >= FLT_MIN);
}

#define CFG_FLOAT_RANGE " whose magnitude a float holds (1.2e-38 to 3.4e+38)"

/* Finite number in (lo, hi] that a float holds. Absent: *out untouched. */
kvcal_status cfg_double(const cfg_obj *o, const char *key, double lo, double hi,
                        double *out, int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    const int in_range =
        cJSON_IsNumber(it) && it->valuedouble > lo && it->valuedouble <= hi;
    if (!in_range || !cfg_float_holds(it->valuedouble)) {
        char want[128];
        const char *floats = in_range ? CFG_FLOAT_RANGE : "";
        if (hi < INFINITY)
            snprintf(want, sizeof want, "a number in (%g, %g]%s", lo, hi, floats);
        else
            snprintf(want, sizeof want, "a number > %g%s", lo, floats);
        return cfg_bad(o, key, it, want);
    }
    *out = it->valuedouble;
    return KVCAL_OK;
}

kvcal_status cfg_bool(const cfg_obj *o, const char *key, int *out)
{
    const cJSON *it = cfg_item(o, key);
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsBool(it))
        return cfg_bad(o, key, it, "true or false");
    *out = cJSON_IsTrue(it);
    return KVCAL_OK;
}

/* String shorter than cap. Absent: dst untouched, *found = 0. */
kvcal_status cfg_string(const cfg_obj *o, const char *key, char *dst, size_t cap,
                        int *found)
{
    const cJSON *it = cfg_item(o, key);
    if (found)
        *found = it != NULL;
    if (!it)
        return KVCAL_OK;
    char want[48];
    snprintf(want, sizeof want, "a string of 1 to %zu characters", cap - 1);
    if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= cap)
        return cfg_bad(o, key, it, want);
    memcpy(dst, it->valuestring, strlen(it->valuestring) + 1);
    return KVCAL_OK;
}

/* An object or absent; anything else is an error. */
kvcal_status cfg_object(const cfg_obj *o, const char *key, const cJSON **out)
{
    const cJSON *it = cfg_item(o, key);
    *out = NULL;
    if (it && !cJSON_IsObject(it))
        return cfg_bad(o, key, it, "an object or null");
    *out = it;
    return KVCAL_OK;
}

/* A number of any sign that a float holds. Absent: *out untouched. */
kvcal_status cfg_number(const cfg_obj *o, const char *key, double *out)
{
    const cJSON *it = cfg_item(o, key);
    if (!it)
        return KVCAL_OK;
    if (!cJSON_IsNumber(it) || !cfg_float_holds(it->valuedouble))
        return cfg_bad(o, key, it,
                       cJSON_IsNumber(it) ? "a number" CFG_FLOAT_RANGE " or 0"
                                          : "a number");
    *out = it->valuedouble;
    return KVCAL_OK;
}

int cfg_in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return 1;
    return 0;
}

/* A list of num_layers 0 / 1 flags (Llama 4's no_rope_layers) into bits
 * (bit l set where entry l is 1); absent or empty: *given 0. */
kvcal_status cfg_layer_flags(const cfg_obj *top, const char *key, int num_layers,
                             unsigned char *bits, int *given)
{
    const cJSON *list = cfg_item(top, key), *it;
    *given = 0;
    if (!list || (cJSON_IsArray(list) && !cJSON_GetArraySize(list)))
        return KVCAL_OK;
    if (!cJSON_IsArray(list)) {
        char want[64];
        snprintf(want, sizeof want, "an array of num_hidden_layers (%d) 0 / 1 entries",
                 num_layers);
        return cfg_bad(top, key, list, want);
    }
    if (cJSON_GetArraySize(list) != num_layers)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: field \"%s%s\" has %d entries but num_hidden_layers is "
                          "%d; they must match (fix one)",
                          top->name, top->prefix, key, cJSON_GetArraySize(list),
                          num_layers);
    int i = 0;
    cJSON_ArrayForEach(it, list)
    {
        if (!cJSON_IsNumber(it) || (it->valuedouble != 0 && it->valuedouble != 1)) {
            char at[48];
            snprintf(at, sizeof at, "%s[%d]", key, i);
            return cfg_bad(top, at, it, "0 or 1");
        }
        if (it->valuedouble == 1)
            bits[i / 8] |= (unsigned char)(1u << (i % 8));
        i++;
    }
    *given = 1;
    return KVCAL_OK;
}
