/* core/device.h: what this build's CUDA code holds, and which of it a GPU
 * runs. Pure but for kvcal_cuda_driver_version: no device is touched. */
#ifndef KVCAL_CORE_DEVICE_H
#define KVCAL_CORE_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA targets the build compiled its kernels for, as the Makefile's
 * CUDA_ARCH names them, space-separated: "sm_XY" machine code (SASS) for
 * compute capability X.Y, "compute_XY" PTX; a suffix "a" marks code for
 * that capability alone (sm_90a), "f" for its family. "" in a build
 * without CUDA. */
const char *kvcal_cuda_build_targets(void);

/* The CUDA runtime version the build was compiled against (13000 for
 * 13.0); 0 in a build without CUDA. */
int kvcal_cuda_build_version(void);

/* The CUDA version the installed driver supports (12080 for 12.8); 0 in a
 * build without CUDA or where no driver is installed. */
int kvcal_cuda_driver_version(void);

/* What a GPU runs of a build's code. */
typedef enum kvcal_cuda_code_kind {
    KVCAL_CUDA_CODE_NONE = 0, /* nothing: kernels fail to launch there */
    KVCAL_CUDA_CODE_SASS = 1, /* machine code compiled for it */
    KVCAL_CUDA_CODE_PTX = 2   /* PTX that the driver compiles when it loads it */
} kvcal_cuda_code_kind;

/* Which of `targets` (a list as kvcal_cuda_build_targets gives) the CUDA
 * driver runs on a GPU of compute capability major.minor, by the driver's
 * rule: the SASS of the same major version with the highest minor not above
 * the GPU's (an "a" target only on its own capability; the most specific
 * first where two share one), else the PTX of the highest capability not
 * above the GPU's ("a" on its own capability alone, "f" within its major).
 * The target's name is copied into code (n bytes; "" when none runs).
 * Words of the list that name no target are ignored. */
kvcal_cuda_code_kind kvcal_cuda_code_for_device(const char *targets, int major, int minor,
                                                char *code, size_t n);

#ifdef __cplusplus
}
#endif

#endif
