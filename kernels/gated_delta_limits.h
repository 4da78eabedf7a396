/* kernels/gated_delta_limits.h: what the gated delta-net kernel
 * (kernels/cuda/gated_delta.cu) takes at most, for the checks made before a
 * device is touched (calib/backend_rules.c). */
#ifndef KVCAL_KERNELS_GATED_DELTA_LIMITS_H
#define KVCAL_KERNELS_GATED_DELTA_LIMITS_H

/* A head's state (key head dim x value head dim) in one block's shared
 * memory, fp32: 128 KiB (the released models: 128 x 128). A GPU with less
 * shared memory a block is refused at launch (kvcal_gated_delta_fits). */
#define KVCAL_GATED_DELTA_MAX_STATE 32768
/* A thread per value of a key or value head. */
#define KVCAL_GATED_DELTA_MAX_HEAD 1024

#endif
