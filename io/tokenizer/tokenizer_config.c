/* io/tokenizer/tokenizer_config.c: tokenizer_config.json beside a tokenizer
 * file: its BOS / EOS tokens and whether they are added. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "io/json_file.h"
#include "io/tokenizer/tokenizer_kinds.h"

/* {"content": "<s>", ...}: the content string, or NULL. */
static const char *content_of(const cJSON *v)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static const char *config_token(const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsString(v) ? v->valuestring : content_of(v);
}

kvcal_status kvcal_tok_apply_config(kvcal_tokenizer_t *t, const char *path)
{
    char cfg_path[4096];
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    if (snprintf(cfg_path, sizeof cfg_path, "%.*s/tokenizer_config.json", dir_len,
                 slash ? path : ".") >= (int)sizeof cfg_path ||
        access(cfg_path, F_OK) != 0)
        return KVCAL_OK;
    cJSON *cfg = NULL;
    kvcal_status st = kvcal_json_load(cfg_path, &cfg);
    if (st)
        return st;
    int32_t bos = kvcal_tok_id_of(t, config_token(cfg, "bos_token"));
    int32_t eos = kvcal_tok_id_of(t, config_token(cfg, "eos_token"));
    if (bos >= 0)
        t->bos = bos;
    if (eos >= 0)
        t->eos = eos;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
    if (cJSON_IsBool(ab))
        t->add_bos = cJSON_IsTrue(ab);
    if (cJSON_IsBool(ae))
        t->add_eos = cJSON_IsTrue(ae);
    cJSON_Delete(cfg);
    return KVCAL_OK;
}
