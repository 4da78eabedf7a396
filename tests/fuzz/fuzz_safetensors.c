/* tests/fuzz/fuzz_safetensors.c: libFuzzer target for the safetensors header
 * parser and the dtype conversions. Any input must give KVCAL_OK or a
 * one-line error, never a crash, a leak or an out-of-bounds read; every
 * tensor of an accepted image must lie inside it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so ASan sees reads past the end of the image. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    kvcal_safetensors_t *st = NULL;
    kvcal_status s = kvcal_safetensors_parse(buf, size, "fuzz", &st);
    if (s != KVCAL_OK) {
        const char *msg = kvcal_last_error();
        if (!msg[0] || strchr(msg, '\n'))
            abort();
    }
    for (int i = 0; i < kvcal_safetensors_count(st); i++) {
        const kvcal_tensor_info *t = kvcal_safetensors_at(st, i);
        const uint8_t *p = t->data;
        if (p < buf || p + t->nbytes > buf + size ||
            kvcal_safetensors_find(st, t->name) != t)
            abort();
        if (t->numel > 4096)
            continue;
        float *out = malloc((size_t)t->numel * sizeof *out + 1);
        if (out && kvcal_tensor_to_f32(t, out) == KVCAL_OK) {
            volatile float sink = 0.0f;
            for (int64_t k = 0; k < t->numel; k++)
                sink += out[k];
            (void)sink;
        }
        free(out);
    }
    (void)kvcal_safetensors_metadata(st);
    kvcal_safetensors_close(st);
    free(buf);
    return 0;
}
