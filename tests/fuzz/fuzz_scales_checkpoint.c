/* tests/fuzz/fuzz_scales_checkpoint.c: libFuzzer target for the checkpoint
 * scales reader (validate-scales and convert on a .safetensors file of
 * k_scale / v_scale tensors in the names of compressed-tensors, ModelOpt,
 * Quark or the single kv_scale, MLA's included), without a model and
 * against a small Llama's config, at tp 0 / 1 / 2. Any file must give
 * findings or a scale set, never a crash or a leak; every finding is one
 * line, every accepted set holds only finite positive scales. Run from the
 * source tree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint/model_config.h"
#include "io/scales/scales_io.h"
#include "tests/fuzz/fuzz_scales_checks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], path[128];

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kvcal_model_config model;
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/kvcal-fuzz-ckpt-XXXXXX");
        if (!mkdtemp(dir) || atexit(cleanup) ||
            kvcal_model_config_load("tests/fixtures/golden/llama3_gqa_hd64_bf16", &model))
            abort();
        snprintf(path, sizeof path, "%s/kv_scales.safetensors", dir);
    }
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f))
        abort();
    for (int m = 0; m < 2; m++)
        for (int tp = 0; tp < 3; tp++) {
            kvcal_scales_ctx ctx = {"fuzz.safetensors", m ? &model : NULL, tp};
            kvcal_report_t *rep = NULL;
            kvcal_scales_t *s = NULL;
            if (kvcal_report_create(&rep))
                abort();
            kvcal_scales_check_checkpoint(path, &ctx, rep, &s);
            fuzz_check_scales_result(rep, s);
            kvcal_scales_destroy(s);
            kvcal_report_destroy(rep);
        }
    return 0;
}
