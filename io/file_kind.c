/* io/file_kind.c: what a path holds (see file_kind.h). */
#include "io/file_kind.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "io/checkpoint/llama2c.h"
#include "io/checkpoint/safetensors.h"
#include "io/dataset/token_set_info.h"
#include "io/file_read.h"
#include "io/json_file.h"
#include "io/path.h"
#include "io/scales/scales_io.h"

int kvcal_is_scale_tensor_name(const char *name)
{
    static const char *const suffixes[] = {
        "k_scale",      "v_scale",        "q_scale",        "kv_scale",
        "output_scale", "k_global_scale", "v_global_scale", "kv_cache_scaling_factor"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (kvcal_path_has_suffix(name, suffixes[i]))
            return 1;
    return 0;
}

static void census_file(const char *path, const char *base, kvcal_shard_census *c)
{
    kvcal_safetensors_t *f = NULL;
    c->files++;
    kvcal_status st = kvcal_safetensors_open(path, &f);
    if (st && !strcmp(base, KVCAL_CHECKPOINT_SHARD)) {
        c->scales_unreadable = 1;
        return;
    }
    if (st) {
        if (!c->unreadable++) {
            c->status = st;
            snprintf(c->finding, sizeof c->finding, "%s", kvcal_last_error());
        }
        return;
    }
    for (int i = 0; i < kvcal_safetensors_count(f); i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(f, i);
        if (kvcal_is_scale_tensor_name(t->name))
            c->scale_tensors++;
        else
            c->params += t->numel;
    }
    kvcal_safetensors_close(f);
}

static void census_index(const char *dir, kvcal_shard_census *c)
{
    char p[4096];
    cJSON *index = NULL;
    struct stat sb;
    snprintf(p, sizeof p, "%s/" KVCAL_CHECKPOINT_INDEX, dir);
    if (stat(p, &sb) != 0 || kvcal_json_load(p, &index) != KVCAL_OK)
        return;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    for (const cJSON *e = cJSON_IsObject(map) ? map->child : NULL; e; e = e->next) {
        c->index_tensors++;
        c->index_scales += kvcal_is_scale_tensor_name(e->string);
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/'))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->valuestring);
        if (stat(p, &sb) == 0)
            continue;
        if (!c->index_elsewhere++)
            snprintf(c->elsewhere, sizeof c->elsewhere, "%s", e->valuestring);
        else if (strcmp(c->elsewhere, e->valuestring))
            c->elsewhere_several = 1;
    }
    cJSON_Delete(index);
}

void kvcal_shard_census_take(const char *path, kvcal_shard_census *c)
{
    struct stat sb;
    memset(c, 0, sizeof *c);
    if (stat(path, &sb) != 0)
        return;
    if (!S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(path, '/');
        census_file(path, slash ? slash + 1 : path, c);
        return;
    }
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[4096];
        if (!kvcal_path_has_suffix(e->d_name, ".safetensors") ||
            (size_t)snprintf(p, sizeof p, "%s/%s", path, e->d_name) >= sizeof p)
            continue;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            census_file(p, e->d_name, c);
    }
    if (d)
        closedir(d);
    census_index(path, c);
}

int kvcal_shard_census_scales_only(const kvcal_shard_census *c)
{
    if (c->index_tensors && c->index_scales == c->index_tensors)
        return 1;
    return c->files && !c->unreadable && !c->params &&
           (c->scale_tensors || c->scales_unreadable);
}

/* 1 when the first line of the file at `path` contains `needle`. */
static int first_line_has(const char *path, const char *needle)
{
    char line[65536] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int found = fgets(line, sizeof line, f) && strstr(line, needle);
    fclose(f);
    return found;
}

/* What of `calibrate --format all`'s outputs the directory holds, as
 * advice ("it holds kvcal_scales.json, checkpoint/: give one of them"),
 * into out; "" when none. */
static void list_outputs(const char *dir, char *out, size_t n)
{
    static const char *const names[][2] = {
        {"kv_cache_scales.json", "kv_cache_scales.json"},
        {"kvcal_scales.json", "kvcal_scales.json"},
        {"checkpoint/config.json", "checkpoint/"}};
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof *names && at < n; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%.4096s/%s", dir, names[i][0]);
        if (stat(p, &sb) == 0)
            at += (size_t)snprintf(out + at, n - at, "%s%s", at ? ", " : "it holds ",
                                   names[i][1]);
    }
    if (at && at < n)
        snprintf(out + at, n - at, ": give one of them");
}

/* The error of a path that stat() refused with err, naming the real cause:
 * for ENOTDIR, the first part of the path that is a file. */
static kvcal_status stat_fail(const char *path, int err)
{
    if (err == ENOENT)
        return kvcal_fail(KVCAL_ERR_IO, "%s: no such file or directory; check the path",
                          path);
    if (err != ENOTDIR)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot open: %s; check the path", path,
                          strerror(err));
    char part[4096];
    const size_t n = strlen(path);
    for (size_t i = 1; i < n && i < sizeof part; i++) {
        struct stat sb;
        if (path[i] != '/' || path[i - 1] == '/')
            continue;
        memcpy(part, path, i);
        part[i] = '\0';
        if (stat(part, &sb) != 0 || S_ISDIR(sb.st_mode))
            continue;
        if (strspn(path + i, "/") == n - i)
            return kvcal_fail(KVCAL_ERR_IO,
                              "%s: not a directory: %s is a file; remove the trailing "
                              "'/'",
                              path, part);
        return kvcal_fail(KVCAL_ERR_IO,
                          "%s: not a directory: %s is a file, not a directory; check "
                          "the path",
                          path, part);
    }
    return kvcal_fail(KVCAL_ERR_IO,
                      "%s: not a directory (a part of the path is a "
                      "file); check the path",
                      path);
}

kvcal_status kvcal_file_kind_detect(const char *path, kvcal_file_kind *kind)
{
    struct stat sb;
    kvcal_shard_census census;
    if (stat(path, &sb) != 0)
        return stat_fail(path, errno);
    kvcal_status checked = kvcal_file_check_input(path, "input", 1);
    if (checked)
        return checked;
    if (S_ISDIR(sb.st_mode) && kvcal_scales_is_trtllm_dir(path)) {
        *kind = KVCAL_FILE_SCALES;
        return KVCAL_OK;
    }
    if (S_ISDIR(sb.st_mode)) {
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", path);
        kvcal_shard_census_take(path, &census);
        if (stat(cfg, &sb) != 0 && census.files &&
            kvcal_shard_census_scales_only(&census)) {
            *kind = KVCAL_FILE_SCALES;
            return KVCAL_OK;
        }
        if (stat(cfg, &sb) != 0) {
            char inside[256] = "";
            list_outputs(path, inside, sizeof inside);
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: a directory without config.json: not a model or "
                "scales checkpoint (%s)",
                path, inside[0] ? inside : "give the checkpoint directory or a file");
        }
        *kind = kvcal_shard_census_scales_only(&census) ? KVCAL_FILE_SCALES
                                                        : KVCAL_FILE_MODEL;
        return KVCAL_OK;
    }
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return kvcal_fail(KVCAL_ERR_IO, "%s: cannot be read", path);
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got == 8 && !memcmp(head, "\x89HDF\r\n\x1a\n", 8)) {
        kvcal_token_set_info info;
        kvcal_status st = kvcal_token_set_info_read(path, &info);
        *kind = info.has_input_ids ? KVCAL_FILE_TOKENS_HDF5 : KVCAL_FILE_STATS;
        return st;
    }
    if (kvcal_path_has_suffix(path, ".safetensors")) {
        char cfg[4096];
        kvcal_shard_census_take(path, &census);
        kvcal_path_dirname(path, cfg, sizeof cfg);
        strncat(cfg, "/config.json", sizeof cfg - strlen(cfg) - 1);
        if (census.unreadable && stat(cfg, &sb) != 0)
            return kvcal_fail(census.status, "%s", census.finding);
        *kind = kvcal_shard_census_scales_only(&census) ? KVCAL_FILE_SCALES
                                                        : KVCAL_FILE_MODEL;
        return KVCAL_OK;
    }
    size_t lead = 0;
    while (lead < got && strchr(" \t\r\n", head[lead]))
        lead++;
    int is_json = lead < got && head[lead] == '{';
    if (is_json && (kvcal_path_has_suffix(path, ".jsonl") ||
                    kvcal_path_has_suffix(path, ".ndjson"))) {
        if (!first_line_has(path, "\"input_ids\""))
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "%s: JSONL without \"input_ids\" on its first line: a text "
                              "dataset, not a token set (make one with kvcal tokenize "
                              "--format jsonl)",
                              path);
        *kind = KVCAL_FILE_TOKENS_JSONL;
        return KVCAL_OK;
    }
    if (is_json) {
        cJSON *root = NULL;
        *kind = KVCAL_FILE_SCALES; /* the validator names what is wrong with other JSON */
        if (kvcal_json_load(path, &root) == KVCAL_OK &&
            (cJSON_HasObjectItem(root, "architectures") ||
             cJSON_HasObjectItem(root, "num_hidden_layers") ||
             cJSON_HasObjectItem(root, "text_config"))) {
            *kind = KVCAL_FILE_MODEL;
        }
        cJSON_Delete(root);
        return KVCAL_OK;
    }
    if (kvcal_llama2c_probe(path)) {
        *kind = KVCAL_FILE_MODEL;
        return KVCAL_OK;
    }
    return kvcal_fail(KVCAL_ERR_FORMAT,
                      "%s: not a model, scales file, statistics file or token set "
                      "(expected a checkpoint directory, .safetensors, llama2.c .bin, "
                      "JSON, JSONL or HDF5 written by kvcal)",
                      path);
}
