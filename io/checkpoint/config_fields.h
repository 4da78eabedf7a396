/* io/checkpoint/config_fields.h: typed access to the fields of a parsed
 * config.json object, each with the transformers meaning of an absent or
 * null field (absent: the output untouched) and a one-line error naming
 * the file, the field's path and the value expected (io/checkpoint/
 * model_config.c and model_config_families.c read a config with them). */
#ifndef KVCAL_IO_CONFIG_FIELDS_H
#define KVCAL_IO_CONFIG_FIELDS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kvcal.h"

/* One object being read: its items and the prefix of its fields in messages
 * ("" at the top, "rope_scaling." below), and the file's name. */
typedef struct cfg_obj {
    const cJSON *obj;
    const char *prefix;
    const char *name;
} cfg_obj;

/* The item of `key`, or NULL when absent or null. */
const cJSON *cfg_item(const cfg_obj *o, const char *key);

/* KVCAL_ERR_FORMAT: field `key` holds `it`, where `want` was expected. */
kvcal_status cfg_bad(const cfg_obj *o, const char *key, const cJSON *it,
                     const char *want);

/* KVCAL_ERR_FORMAT: field `key` is missing (`why` appended to the message). */
kvcal_status cfg_missing(const cfg_obj *o, const char *key, const char *why);

/* An integer in [min, max]; found (may be NULL): whether the field is there. */
kvcal_status cfg_int(const cfg_obj *o, const char *key, int min, int max, int *out,
                     int *found);

/* cfg_int of a field that must be there. */
kvcal_status cfg_required_int(const cfg_obj *o, const char *key, int min, int max,
                              int *out);

/* A finite number in (lo, hi] whose magnitude a float holds (0, or
 * FLT_MIN to FLT_MAX: the model's arithmetic runs in float). */
kvcal_status cfg_double(const cfg_obj *o, const char *key, double lo, double hi,
                        double *out, int *found);

/* Any finite number whose magnitude a float holds (as cfg_double). */
kvcal_status cfg_number(const cfg_obj *o, const char *key, double *out);

/* true or false. */
kvcal_status cfg_bool(const cfg_obj *o, const char *key, int *out);

/* A string shorter than cap. */
kvcal_status cfg_string(const cfg_obj *o, const char *key, char *dst, size_t cap,
                        int *found);

/* An object (*out), or absent / null (*out NULL). */
kvcal_status cfg_object(const cfg_obj *o, const char *key, const cJSON **out);

/* A list of num_layers 0 / 1 flags into bits (bit l set where entry l is
 * 1); absent or empty: *given 0. */
kvcal_status cfg_layer_flags(const cfg_obj *top, const char *key, int num_layers,
                             unsigned char *bits, int *given);

/* Whether s is one of the n strings of list. */
int cfg_in_list(const char *s, const char *const *list, size_t n);

#endif
