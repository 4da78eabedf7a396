/* io/checkpoint/lm_prefix.c: where a checkpoint keeps its language model
 * (io/checkpoint/lm_prefix.h). */
#include "io/checkpoint/lm_prefix.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/status.h"
#include "io/checkpoint/safetensors.h"
#include "io/json_file.h"

static const char *const prefixes[KVCAL_LM_PREFIXES] = {"model.", "model.language_model.",
                                                        "language_model.model."};

const char *kvcal_lm_prefix(int i)
{
    return i >= 0 && i < KVCAL_LM_PREFIXES ? prefixes[i] : prefixes[0];
}

int kvcal_lm_prefix_of(const char *name)
{
    static const char layers[] = "layers.";
    for (int i = 0; i < KVCAL_LM_PREFIXES; i++) {
        const size_t n = strlen(prefixes[i]);
        if (!strncmp(name, prefixes[i], n) &&
            !strncmp(name + n, layers, sizeof layers - 1))
            return i;
    }
    return -1;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int kvcal_lm_prefix_of_model_dir(const char *model_dir, int otherwise)
{
    char p[4096];
    int found = -1;
    if ((size_t)snprintf(p, sizeof p, "%s/model.safetensors.index.json", model_dir) <
            sizeof p &&
        is_file(p)) {
        cJSON *index = NULL;
        if (kvcal_json_load(p, &index) == KVCAL_OK) {
            const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
            for (const cJSON *at = cJSON_IsObject(map) ? map->child : NULL;
                 at && found < 0; at = at->next)
                found = kvcal_lm_prefix_of(at->string);
        }
        cJSON_Delete(index);
    } else if ((size_t)snprintf(p, sizeof p, "%s/model.safetensors", model_dir) <
                   sizeof p &&
               is_file(p)) {
        kvcal_safetensors_t *st = NULL;
        if (kvcal_safetensors_open(p, &st) == KVCAL_OK)
            for (int i = 0; i < kvcal_safetensors_count(st) && found < 0; i++)
                found = kvcal_lm_prefix_of(kvcal_safetensors_at(st, i)->name);
        kvcal_safetensors_close(st);
    }
    kvcal_clear_error();
    return found >= 0 ? found : otherwise;
}
