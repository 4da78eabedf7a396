/* io/checkpoint/mxfp4.c: MXFP4 tensors (see mxfp4.h). */
#include "io/checkpoint/mxfp4.h"

#include <math.h>

#include "core/kvformat.h"

void kvcal_mxfp4_to_f32(const uint8_t *blocks, const uint8_t *scales, int64_t first,
                        int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = first + i;
        const uint8_t pair = blocks[v / 2];
        const float e2m1 = kvcal_fp4_e2m1_to_float(v % 2 ? pair >> 4 : pair & 15u);
        out[i] = ldexpf(e2m1, (int)scales[v / KVCAL_MXFP4_BLOCK] - 127);
    }
}
