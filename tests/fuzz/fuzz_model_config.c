/* tests/fuzz/fuzz_model_config.c: libFuzzer target for the config.json
 * reader (strict JSON parse, both config layouts, rope scaling including
 * yarn's derived values, the experts', MLA's and layer_types' fields). Any
 * input must give KVCAL_OK or a one-line error, never a crash or a leak; an
 * accepted config holds sizes inside the KVCAL_CONFIG_MAX_* bounds, heads
 * that divide, finite rope values and positive longrope factors, a top-k
 * wherever there are experts and no more cache layers than layers. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/checkpoint/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int in_range(int v, int max)
{
    return v >= 1 && v <= max;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so ASan sees reads past the end of the text. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    kvcal_model_config c;
    kvcal_status st = kvcal_model_config_parse(buf, size, "config.json", &c);
    if (st != KVCAL_OK) {
        const char *msg = kvcal_last_error();
        if (!*msg || strchr(msg, '\n'))
            abort();
    } else if (!in_range(c.num_layers, KVCAL_CONFIG_MAX_LAYERS) ||
               !in_range(c.num_attention_heads, KVCAL_CONFIG_MAX_HEADS) ||
               !in_range(c.num_kv_heads, KVCAL_CONFIG_MAX_HEADS) ||
               !in_range(c.head_dim, KVCAL_CONFIG_MAX_HEAD_DIM) ||
               !in_range(c.hidden_size, KVCAL_CONFIG_MAX_HIDDEN) ||
               c.num_attention_heads % c.num_kv_heads || !isfinite(c.rope_theta) ||
               !isfinite(c.rope_factor) || !isfinite(c.rope_attention_factor) ||
               !isfinite(c.rms_norm_eps)) {
        abort();
    } else if (c.num_experts < 0 || c.num_experts > KVCAL_CONFIG_MAX_HEADS ||
               (c.num_experts &&
                !in_range(c.num_experts_per_tok, KVCAL_CONFIG_MAX_HEADS)) ||
               c.kv_layers < 0 || c.kv_layers > c.num_layers || c.sliding_layers < 0 ||
               c.sliding_layers > c.kv_layers || c.rope_ext_factors < 0 ||
               c.rope_ext_factors > KVCAL_ROPE_EXT_MAX ||
               !(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1) ||
               !isfinite(c.routed_scaling_factor) ||
               kvcal_model_config_kv_values_per_token(&c) < 0) {
        abort();
    } else {
        for (int i = 0; i < c.rope_ext_factors; i++)
            if (!(c.rope_ext_factor[i] > 0) || !isfinite(c.rope_ext_factor[i]))
                abort();
    }
    free(buf);
    return 0;
}
