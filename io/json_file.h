/* io/json_file.h: read and write JSON files with cJSON, strictly.
 *
 * Reading rejects what cJSON alone accepts silently: duplicate object keys,
 * nesting deeper than KVCAL_JSON_MAX_DEPTH, trailing garbage, NaN/Infinity
 * literals, and files larger than KVCAL_JSON_MAX_BYTES; a syntax error names
 * path:line:column. Writing refuses non-finite numbers (cJSON would print
 * them as null) and is atomic. */
#ifndef KVCAL_IO_JSON_FILE_H
#define KVCAL_IO_JSON_FILE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "kvcal.h"

#define KVCAL_JSON_MAX_DEPTH 64
#define KVCAL_JSON_MAX_BYTES (64u << 20)

/* Parses `len` bytes of `text`; `name` (a path) is used in messages.
 * *out (caller frees with cJSON_Delete) is NULL on failure. */
kvcal_status kvcal_json_parse(const char *text, size_t len, const char *name,
                              cJSON **out);

/* Reads and parses the file at `path`. */
kvcal_status kvcal_json_load(const char *path, cJSON **out);

/* Prints `root` (formatted) and writes it atomically; refuses NaN/Inf
 * anywhere in the tree, naming the key path. */
kvcal_status kvcal_json_write(const char *path, const cJSON *root);

#endif
