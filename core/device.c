/* core/device.c: the CUDA devices this process can use, and what this
 * build holds for them (see core/device.h). */
#include "core/device.h"

#include <stdio.h>
#include <string.h>

#include "kvcal.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>
#ifndef KVCAL_CUDA_TARGETS
#error "KVCAL_CUDA_TARGETS (the CUDA targets' list) comes from the Makefile"
#endif
#else
#undef KVCAL_CUDA_TARGETS
#define KVCAL_CUDA_TARGETS ""
#endif

int kvcal_cuda_device_count(void)
{
#ifdef KVCAL_WITH_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

const char *kvcal_cuda_build_targets(void)
{
    return KVCAL_CUDA_TARGETS;
}

int kvcal_cuda_build_version(void)
{
#ifdef KVCAL_WITH_CUDA
    return CUDART_VERSION;
#else
    return 0;
#endif
}

int kvcal_cuda_driver_version(void)
{
#ifdef KVCAL_WITH_CUDA
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
#else
    return 0;
#endif
}

// --- which code a GPU runs ------------------------------------------------------

typedef struct target {
    kvcal_cuda_code_kind kind;
    int major, minor;
    char suffix; /* 'a', 'f' or 0 */
} target;

/* Parses one word ("sm_90a", "compute_121"); 0 when it names no target. */
static int parse_target(const char *w, size_t len, target *t)
{
    size_t i;
    if (len > 3 && !strncmp(w, "sm_", 3)) {
        t->kind = KVCAL_CUDA_CODE_SASS;
        i = 3;
    } else if (len > 8 && !strncmp(w, "compute_", 8)) {
        t->kind = KVCAL_CUDA_CODE_PTX;
        i = 8;
    } else {
        return 0;
    }
    int num = 0, digits = 0;
    for (; i < len && w[i] >= '0' && w[i] <= '9' && digits < 4; i++, digits++)
        num = num * 10 + (w[i] - '0');
    t->suffix = i < len && (w[i] == 'a' || w[i] == 'f') ? w[i++] : 0;
    t->major = num / 10;
    t->minor = num % 10;
    return digits >= 2 && i == len;
}

/* Whether the GPU major.minor runs t. */
static int runs(const target *t, int major, int minor)
{
    if (t->suffix == 'a')
        return t->major == major && t->minor == minor;
    if (t->kind == KVCAL_CUDA_CODE_SASS || t->suffix == 'f')
        return t->major == major && t->minor <= minor;
    return t->major < major || (t->major == major && t->minor <= minor);
}

kvcal_cuda_code_kind kvcal_cuda_code_for_device(const char *targets, int major, int minor,
                                                char *code, size_t n)
{
    kvcal_cuda_code_kind best = KVCAL_CUDA_CODE_NONE;
    long best_rank = -1;
    if (n)
        code[0] = '\0';
    for (const char *w = targets ? targets : ""; *w;) {
        const size_t len = strcspn(w, " \t");
        target t;
        if (len && parse_target(w, len, &t) && runs(&t, major, minor)) {
            /* SASS before PTX; then the higher capability, the more specific */
            const long rank = (t.kind == KVCAL_CUDA_CODE_SASS ? 1L << 20 : 0) +
                              (t.major * 10L + t.minor) * 4 +
                              (t.suffix == 'a' ? 2 : t.suffix == 'f');
            if (rank > best_rank) {
                best_rank = rank;
                best = t.kind;
                if (n)
                    snprintf(code, n, "%.*s", (int)len, w);
            }
        }
        w += len;
        w += strspn(w, " \t");
    }
    return best;
}
