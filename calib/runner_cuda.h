/* calib/runner_cuda.h: the model runner on a CUDA device.
 *
 * The same forward pass as calib/runner.h (K observed after k_proj (+bias),
 * the per-head k_norm and RoPE; V after v_proj (+bias); the pass stops after
 * the last layer's K and V) in bf16 with fp32 accumulation on the kernels of
 * kernels/cuda: the whole model is uploaded once (fused QKV and gate/up
 * weights), K and V are observed on the device by the RoPE kernel into
 * statistics laid out as kvcal_stats_t, and folded into the caller's stats.
 * A batch is laid out padded, (batch, seq_len) rows with the padding rows
 * neither attended to by valid tokens nor observed. Work runs on one stream
 * of the current device; calls on one runner must come from one thread.
 *
 * An evaluation (kvcal_cuda_eval_*, `kvcal eval --device cuda`) runs the
 * whole model instead: every layer, the final norm and the lm_head, with
 * an optional simulated FP8 cache applied to K and V after RoPE and before
 * attention. Calibration passes are untouched by it. */
#ifndef KVCAL_CALIB_RUNNER_CUDA_H
#define KVCAL_CALIB_RUNNER_CUDA_H

#include <stdint.h>

#include "calib/model.h"
#include "core/device.h"
#include "kernels/cpu/eval_ref.h"
#include "kvcal.h"
#include "observers/stats.h"

typedef struct kvcal_cuda_runner kvcal_cuda_runner_t;

/* Uploads `model` (borrowed for the call only) as bf16 and sizes activations
 * for batches of up to max_batch samples of max_seq_len tokens. Fails with
 * KVCAL_ERR_NO_DEVICE without a CUDA device (or in a build without CUDA),
 * KVCAL_ERR_DEVICE_MEMORY naming the bytes needed and the fix when the
 * device lacks the memory, KVCAL_ERR_UNSUPPORTED as
 * kvcal_cuda_runner_check_model.
 * *out = NULL on failure. */
kvcal_status kvcal_cuda_runner_create(kvcal_model_t *model, int max_batch,
                                      int max_seq_len, kvcal_cuda_runner_t **out);

/* What the CUDA runner cannot run, without touching a device (it is the
 * check kvcal_cuda_runner_create makes once a device is found):
 * KVCAL_ERR_UNSUPPORTED for an odd head_dim or one over 256. */
kvcal_status kvcal_cuda_runner_check_model(const kvcal_model_desc *d);

/* Frees the device memory; NULL is a no-op. */
void kvcal_cuda_runner_destroy(kvcal_cuda_runner_t *r);

/* Runs one batch: ids (batch, seq_len) row-major, sample b's first
 * lengths[b] ids valid. Folds the batch into stats (same shape as the
 * model's K/V): batch_absmax by max and tokens per layer now, as
 * kvcal_stats_observe_ref would (bracket the call with
 * kvcal_stats_begin_batch / kvcal_stats_end_batch); absmax and histograms
 * accumulate on the device until kvcal_cuda_runner_collect. A NaN or Inf in
 * K or V is KVCAL_ERR_NONFINITE naming the layer, K/V, kv head and the
 * batch's samples; an id outside the vocabulary, a sample longer than the
 * model's context or than the runner's max_seq_len, KVCAL_ERR_INVALID_ARG.
 * With stats NULL the batch runs without the observers (what they cost is
 * the difference; kvcal calibrate --time-only) and waits for the device. */
kvcal_status kvcal_cuda_runner_forward(kvcal_cuda_runner_t *r, const int32_t *ids,
                                       const int32_t *lengths, int batch, int seq_len,
                                       const int64_t *sample_ids, kvcal_stats_t *stats);

/* Folds the device absmax (max) and histograms (sum) into stats and clears
 * them on the device. Call once after the last batch (or more often). */
kvcal_status kvcal_cuda_runner_collect(kvcal_cuda_runner_t *r, kvcal_stats_t *stats);

/* --- kernel choice ------------------------------------------------------ */

/* How the MLP's gate/up projection and SwiGLU run (KVCAL_MLP). */
typedef enum kvcal_mlp_mode {
    KVCAL_MLP_AUTO = 0,   /* the fused kernel where it runs and fits, else unfused */
    KVCAL_MLP_FUSED = 1,  /* the fused kernel, or an error */
    KVCAL_MLP_UNFUSED = 2 /* cuBLAS's GEMM, then kvcal_swiglu_launch */
} kvcal_mlp_mode;

/* Whether kvcal's fused gate/up + SwiGLU kernel (kvcal_gemm_swiglu_launch,
 * sm_90a only) runs on a GPU of compute capability major.minor that runs
 * the build's target `code` (kvcal_cuda_code_for_device): capability 9.0
 * running sm_90a code (its SASS, or compute_90a PTX). Pure. */
int kvcal_cuda_mlp_fused_runs(int major, int minor, const char *code);

/* The runner's MLP for a model of intermediate_size I and hidden_size D on
 * that GPU: *fused = 1 when mode is not UNFUSED, the kernel runs there and
 * I is a multiple of 128, D of 8; else 0. mode FUSED where the kernel
 * cannot run is KVCAL_ERR_UNSUPPORTED naming why. Pure: the GPU's
 * capability and code are arguments. */
kvcal_status kvcal_cuda_mlp_choose(int major, int minor, const char *code, int I, int D,
                                   kvcal_mlp_mode mode, int *fused);

/* What the CUDA runner runs on one GPU. */
typedef struct kvcal_cuda_device_plan {
    char name[256];
    int major, minor; /* compute capability */
    char code[32];    /* the build's target it runs, "" for none */
    kvcal_cuda_code_kind code_kind;
    int mlp_fused;            /* the fused MLP kernel runs there (shapes it takes) */
    int cudnn_version;        /* attention through cuDNN: its version; 0 for none */
    char attention_note[256]; /* when 0: why (kvcal_attention_note) */
} kvcal_cuda_device_plan;

/* Fills *plan for GPU `device`. Loads cuDNN as the runner does (a CUDA
 * context on the device; the current device is restored). KVCAL_ERR_NO_DEVICE
 * for a device that does not exist or in a build without CUDA. */
kvcal_status kvcal_cuda_runner_plan_device(int device, kvcal_cuda_device_plan *plan);

/* --- evaluation --------------------------------------------------------- */

/* What an evaluation pass does to K and V before attention. Every mode but
 * EXACT quantizes them to e4m3 into a scratch cache through the library's
 * kvcal_kv_*_launch (the semantics of the CPU references) and dequantizes
 * them back, as an engine with an FP8 cache computes. */
typedef enum kvcal_cuda_kv_sim {
    KVCAL_CUDA_KV_EXACT = 0,      /* bf16 K/V as computed: the baseline */
    KVCAL_CUDA_KV_STATIC = 1,     /* fixed per-head scales per layer */
    KVCAL_CUDA_KV_DYNAMIC = 2,    /* a scale per (token, kv head) */
    KVCAL_CUDA_KV_FIRST_BATCH = 3 /* per-head scales of the first batch's absmax */
} kvcal_cuda_kv_sim;

/* Error sums of one layer over an evaluation: K and V against their FP8
 * round trip (clipped counted with the scale used), and the attention
 * output on the round trip against the attention output on the exact K/V
 * (same q; clipped unused). */
typedef struct kvcal_eval_layer_sums {
    kvcal_error_sums kv[2]; /* [KVCAL_K], [KVCAL_V] */
    kvcal_error_sums att;
} kvcal_eval_layer_sums;

typedef struct kvcal_cuda_eval kvcal_cuda_eval_t;

/* Prepares evaluation passes on r (borrowed: it must outlive the
 * evaluation): uploads the final norm and, unless the embedding is tied,
 * the lm_head of model (borrowed for the call; the model r was made from),
 * and allocates the simulated cache, the error sums and logits for chunks
 * of rows (at most 64 MiB of them, whatever the vocabulary). k_scale and
 * v_scale (layers, kv_heads) host arrays, finite and > 0, are copied for
 * KVCAL_CUDA_KV_STATIC and must be NULL otherwise (KVCAL_ERR_INVALID_ARG
 * naming the layer and head of a bad scale). KVCAL_ERR_DEVICE_MEMORY names
 * the bytes when the device lacks them. Synchronizes the device before it
 * returns. *out = NULL on failure. */
kvcal_status kvcal_cuda_eval_create(kvcal_cuda_runner_t *r, kvcal_model_t *model,
                                    kvcal_cuda_kv_sim sim, const float *k_scale,
                                    const float *v_scale, kvcal_cuda_eval_t **out);

/* Frees the device memory; NULL is a no-op. */
void kvcal_cuda_eval_destroy(kvcal_cuda_eval_t *e);

/* Runs one batch (arguments and checks as kvcal_cuda_runner_forward)
 * through the whole model and adds to *nll the next-token negative
 * log-likelihood (nats) of every token that has a successor in its sample,
 * to *count their number. The error sums of the simulated cache accumulate
 * on the device until kvcal_cuda_eval_collect. Synchronizes the stream. */
kvcal_status kvcal_cuda_eval_forward(kvcal_cuda_eval_t *e, const int32_t *ids,
                                     const int32_t *lengths, int batch, int seq_len,
                                     const int64_t *sample_ids, double *nll,
                                     long long *count);

/* Adds the device error sums into sums (layers) and clears them on the
 * device (all zero for KVCAL_CUDA_KV_EXACT). */
kvcal_status kvcal_cuda_eval_collect(kvcal_cuda_eval_t *e, kvcal_eval_layer_sums *sums);

#endif
