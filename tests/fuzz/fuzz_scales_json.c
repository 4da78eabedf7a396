/* tests/fuzz/fuzz_scales_json.c: libFuzzer target for the JSON scales
 * readers (strict JSON parse, then the legacy and kvcal checkers with and
 * without a model, at tp 0 / 1 / 2). Any input must give findings or a
 * scale set, never a crash or a leak; every finding is one line, every
 * accepted set holds only finite positive scales. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_file.h"
#include "io/scales/scales_io.h"
#include "tests/fuzz/fuzz_scales_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tiny_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
    "\"num_attention_heads\": 8, \"num_key_value_heads\": 4}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kvcal_model_config model;
    static int have_model;
    if (!have_model) {
        if (kvcal_model_config_parse(tiny_config, sizeof tiny_config - 1, "tiny", &model))
            abort();
        have_model = 1;
    }
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    cJSON *root = NULL;
    if (kvcal_json_parse(buf, size, "fuzz.json", &root) != KVCAL_OK) {
        const char *msg = kvcal_last_error();
        if (!msg[0] || strchr(msg, '\n'))
            abort();
        free(buf);
        return 0;
    }
    for (int m = 0; m < 2; m++)
        for (int tp = 0; tp < 3; tp++) {
            kvcal_scales_ctx ctx = {"fuzz.json", m ? &model : NULL, tp};
            for (int fmt = 0; fmt < 2; fmt++) {
                kvcal_report_t *rep = NULL;
                kvcal_scales_t *s = NULL;
                if (kvcal_report_create(&rep))
                    abort();
                if (fmt)
                    kvcal_scales_check_kvcal_json(root, &ctx, rep, &s);
                else
                    kvcal_scales_check_legacy(root, &ctx, rep, &s);
                fuzz_check_scales_result(rep, s);
                kvcal_scales_destroy(s);
                kvcal_report_destroy(rep);
            }
        }
    cJSON_Delete(root);
    free(buf);
    return 0;
}
