/* kernels/mla_limits.h: what the multi-head latent attention kernels take at
 * most, for the kernels (kernels/cuda/mla.h) and for the checks made before a
 * device is touched (calib/backend_rules.c). */
#ifndef KVCAL_KERNELS_MLA_LIMITS_H
#define KVCAL_KERNELS_MLA_LIMITS_H

/* The cached entry's values (kv_lora_rank + qk_rope_head_dim): DeepSeek's 576. */
#define KVCAL_MLA_MAX_ENTRY 1024

#endif
