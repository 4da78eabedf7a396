/* tests/fuzz/fuzz_scales_checks.h: what every scales reader's fuzz target
 * holds its result to: each finding one line; an accepted set only finite
 * positive scales, and no set beside an error. Aborts otherwise. */
#ifndef KVCAL_TESTS_FUZZ_SCALES_CHECKS_H
#define KVCAL_TESTS_FUZZ_SCALES_CHECKS_H

#include <stdlib.h>
#include <string.h>

#include "core/scale_rule.h"
#include "io/scales/scales_io.h"

static inline void fuzz_check_scales_result(const kvcal_report_t *rep,
                                            const kvcal_scales_t *s)
{
    for (int i = 0; i < kvcal_report_count(rep); i++) {
        kvcal_finding f;
        if (kvcal_report_get(rep, i, &f) != KVCAL_OK || strchr(f.message, '\n') ||
            strchr(f.place, '\n'))
            abort();
    }
    if (!s)
        return;
    if (kvcal_report_count_severity(rep, KVCAL_SEVERITY_ERROR))
        abort();
    for (int i = 0; i < s->num_layers * s->num_kv_heads; i++)
        if (!kvcal_scale_is_valid(s->k_head[i]) || !kvcal_scale_is_valid(s->v_head[i]))
            abort();
}

#endif
