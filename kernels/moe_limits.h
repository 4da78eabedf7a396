/* kernels/moe_limits.h: what the mixture-of-experts kernels take at most,
 * for the kernels (kernels/cuda/ops.h) and for the checks made before a
 * device is touched (calib/backend_rules.c). */
#ifndef KVCAL_KERNELS_MOE_LIMITS_H
#define KVCAL_KERNELS_MOE_LIMITS_H

#define KVCAL_MOE_MAX_EXPERTS 512
#define KVCAL_MOE_MAX_TOP_K 32
/* Expert groups of grouped top-k routing (DeepSeek-V3: 8). */
#define KVCAL_MOE_MAX_GROUPS 64
/* Rows of a grouped GEMM tile: each expert's rows are padded to a multiple. */
#define KVCAL_MOE_TILE_ROWS 128

#endif
