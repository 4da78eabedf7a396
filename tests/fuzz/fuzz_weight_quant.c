/* tests/fuzz/fuzz_weight_quant.c: libFuzzer target for the weight
 * quantization reader (a config.json's quantization_config, or a ModelOpt
 * hf_quant_config.json: compressed-tensors, fp8, ModelOpt). Any input must
 * give a scheme set or a one-line error, never a crash or a leak; every
 * module of an accepted set has a scheme kvcal runs, described in one line. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint/weight_quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const modules[] = {"model.layers.0.self_attn.q_proj",
                                      "model.layers.0.self_attn.qkv_proj",
                                      "model.layers.1.mlp.down_proj",
                                      "model.layers.3.mlp.experts.7.gate_proj",
                                      "model.layers.0.self_attn.kv_a_proj_with_mqa",
                                      "lm_head",
                                      "model.layers.0.mlp.gate"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    if (!root)
        return 0;
    /* a config.json holds it under quantization_config; an
       hf_quant_config.json is one itself */
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    kvcal_weight_quant_t *q = NULL;
    kvcal_status st = kvcal_weight_quant_parse(qc ? qc : root, "fuzz.json", &q);
    if (st != KVCAL_OK) {
        const char *msg = kvcal_last_error();
        if (q || !msg[0] || strchr(msg, '\n'))
            abort();
        cJSON_Delete(root);
        return 0;
    }
    if (!q || !kvcal_weight_quant_name(q))
        abort();
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
        kvcal_wq_scheme s;
        kvcal_weight_quant_module(q, modules[i], &s);
        char line[256];
        kvcal_wq_scheme_describe(&s.fp8, line, sizeof line);
        if (strchr(line, '\n') || (s.fp8.w != KVCAL_FP8W_NONE && !s.scale_name))
            abort();
    }
    kvcal_weight_quant_destroy(q);
    cJSON_Delete(root);
    return 0;
}
