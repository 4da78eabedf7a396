/* calib/loader_cuda.h: the cuda backend's weight loader. A layer's weights
 * go from the mapped checkpoint to the device as the backend lays them out
 * (bf16; QKV and gate/up fused, gate/up interleaved for the fused MLP
 * kernel; an FP8 weight's e4m3 bytes, requantized as the engine serves
 * them, beside its scales): host threads fill pinned staging pieces (a copy
 * where the checkpoint is bf16 or FP8, a conversion where it is f16 or
 * f32), a copy stream
 * moves them into a device slot, and the compute stream waits for a layer's
 * copy only when it uses the layer. A background thread loads ahead of the
 * compute: with a slot per layer every layer once, in order, from the
 * start; with fewer slots (a model larger than the device) the next layer
 * while the current one computes, into the slot the layer before the
 * current one has given back. Compiled only in builds with CUDA. */
#ifndef KVCAL_CALIB_LOADER_CUDA_H
#define KVCAL_CALIB_LOADER_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "calib/backend.h"
#include "calib/model.h"
#include "kvcal.h"

/* Where a layer's logical weights lie in its device slot. */
typedef struct kvcal_cuda_layer_layout {
    size_t off[KVCAL_W_COUNT]; /* bytes from the slot's start */
    size_t
        elems[KVCAL_W_COUNT]; /* bf16 values, or e4m3 bytes of an FP8 weight; 0: absent */
    /* an FP8 weight (fp8[w].w not KVCAL_FP8W_NONE), as the model serves it
     * (kvcal_model_fp8_weight): its e4m3 bytes at off[w], its scales
     * (core/fp8_linear.h's layout) at scale_off[w], its static input scale
     * (one float, 0 for dynamic activations) at input_off[w] */
    kvcal_fp8_linear fp8[KVCAL_W_COUNT];
    size_t scale_off[KVCAL_W_COUNT], input_off[KVCAL_W_COUNT];
    size_t bytes; /* the slot */
    /* a [gate; up] weight's intermediate size where its rows are in
     * kvcal_gemm_swiglu's order (the fused gate/up + SwiGLU kernel's, the
     * last block padded), 0 where it is as the checkpoint stores it */
    int interleaved[KVCAL_W_COUNT];
    /* 1: MLA's bf16 kv_b_proj with each head's rows as [V's; the no-RoPE
     * part's] (one batched GEMM a head writes [V | K's no-RoPE part]); 0:
     * as the checkpoint stores them ([no-RoPE; V] a head) */
    int kv_b_v_first;
} kvcal_cuda_layer_layout;

typedef struct kvcal_cuda_loader kvcal_cuda_loader_t;

/* A loader of model's layers into nslots device slots of lay->bytes each
 * at slots (device memory, borrowed), with `threads` host threads and
 * staging pieces of piece_bytes (0: 32 MiB). With nslots == layers every
 * layer is loaded at once, in the background. *out = NULL on failure. */
kvcal_status kvcal_cuda_loader_create(kvcal_model_t *model,
                                      const kvcal_cuda_layer_layout *lay,
                                      unsigned char *slots, int nslots, int threads,
                                      size_t piece_bytes, kvcal_cuda_loader_t **out);

/* Stops the background thread (after the load in flight) and frees; NULL
 * is a no-op. */
void kvcal_cuda_loader_destroy(kvcal_cuda_loader_t *ld);

/* Layer l's weights for work queued on `compute` from now on: *weights is
 * its slot, and compute waits for its copy. Work queued on compute before
 * this call is the last to read the layer used before (its slot may be
 * refilled once that work is done). Starts loading the next layer where
 * the slots do not hold every layer. */
kvcal_status kvcal_cuda_loader_use(kvcal_cuda_loader_t *ld, int layer,
                                   cudaStream_t compute, unsigned char **weights);

/* Copies view src as bf16 into dst (device memory) through the loader's
 * host threads and pinned pieces of its own, on stream (waited for): the
 * embedding table and the classifier, loaded once. */
kvcal_status kvcal_cuda_loader_upload(kvcal_cuda_loader_t *ld,
                                      const kvcal_tensor_view *src, void *dst,
                                      cudaStream_t stream);

/* The loader's costs so far (calib/backend.h's kvcal_load_stats; the
 * background thread updates them after each layer). */
void kvcal_cuda_loader_stats(kvcal_cuda_loader_t *ld, kvcal_load_stats *out);

#endif
