/* calib/backend.h: the contract between the executor (calib/executor.c)
 * and a device. A backend holds a model's weights and one batch's
 * activations (calib/arch.h's kvcal_act) and implements each op of
 * calib/arch.h on them; the executor decides which ops run, in which order,
 * on which layer, and what happens to K and V (observed, simulated in FP8,
 * handed to a tap). Two backends: cpu (fp32 reference ops, tokens packed)
 * and cuda (bf16, fused kernels, a batch padded to (batch, seq_len)).
 *
 * Every function returns kvcal_status with kvcal_last_error() set; a
 * backend's work may be asynchronous (cuda: one stream) until a function
 * that hands results to the host returns. */
#ifndef KVCAL_CALIB_BACKEND_H
#define KVCAL_CALIB_BACKEND_H

#include <stdint.h>

#include "calib/arch.h"
#include "calib/model.h"
#include "core/device.h"
#include "kernels/cpu/eval_ref.h"
#include "kvcal.h"
#include "observers/stats.h"

/* One batch of samples: ids (batch, seq_len) row-major, sample b's first
 * lengths[b] ids valid (the rest is padding, never read); sample_ids
 * (batch) name the samples in errors and statistics (NULL: 0 .. batch-1). */
typedef struct kvcal_batch {
    const int32_t *ids;
    const int32_t *lengths;
    const int64_t *sample_ids;
    int batch;
    int seq_len;
} kvcal_batch;

/* Where a batch's samples lie in the backend's activations: sample b's
 * tokens are rows start[b] .. start[b] + lengths[b] - 1 (packed: rows of
 * one sample follow the previous one's; padded: start[b] = b * seq_len). */
typedef struct kvcal_rows {
    int64_t n;              /* rows of every activation */
    const int64_t *start;   /* (batch) */
    const int32_t *lengths; /* (batch) */
    const int64_t *names;   /* (batch) sample ids */
    int batch;
} kvcal_rows;

/* Error sums of one layer over an evaluation: K and V against their FP8
 * round trip (clipped counted with the scale used), and the attention
 * output on the round trip against the attention output on the exact K/V
 * (same q; clipped unused). */
typedef struct kvcal_eval_layer_sums {
    kvcal_error_sums kv[2]; /* [KVCAL_K], [KVCAL_V] */
    kvcal_error_sums att;
} kvcal_eval_layer_sums;

/* A simulated FP8 cache of one layer, on the backend's device (host memory
 * for cpu): K and V of the batch as the cache-point op left them, slot t =
 * row t (-1 for padding), a scratch cache of one token a block. The
 * library's online quantization (include/kvcal_quant.h) runs on it: the
 * _ref entry points when device is 0, the _launch ones on stream when 1. */
typedef struct kvcal_kv_io {
    kvcal_kv_batch batch;
    kvcal_kv_cache cache;
    float *zero[2]; /* (N, kv_heads) K and V zero points, laid out as cache.k_scale */
    int device;
    struct CUstream_st *stream;
} kvcal_kv_io;

/* What head_nll does with the batch's next-token distributions beside
 * the NLL: row (rows, host) names the reference row of each row (-1: none,
 * as for rows without a target); keep 1 copies the rows there (the
 * baseline), 0 compares with what is there (a mode): kld (rows, host) the
 * KL divergence of the kept distribution to this one, top (rows, host) 1
 * where both put the same token first (kernels/cpu/eval_ref.h). */
typedef struct kvcal_head_ref {
    const int64_t *row;
    int keep;
    float *kld, *top;
} kvcal_head_ref;

typedef struct kvcal_backend kvcal_backend;

/* What loading the layers' weights onto a device has cost the host so far
 * (the cuda backend's loader, calib/loader_cuda.h): the seconds from the
 * backend's start until every layer was on its way the first time (0
 * while some are not), the loader's seconds waiting for the host threads
 * to fill pinned staging pieces, the seconds waiting for a piece's last
 * copy to the device, the
 * bytes sent and the layers loaded (a layer loaded again counts again). */
typedef struct kvcal_load_stats {
    double all_seconds, fill_seconds, copy_wait_seconds;
    double bytes;
    int layers_loaded;
} kvcal_load_stats;

typedef struct kvcal_backend_ops {
    const char *name; /* "cpu", "cuda" */
    int warm_up;      /* the executor runs one batch of the largest shape first */
    void (*destroy)(kvcal_backend *be);
    /* *out: the weights' load so far; NULL where the backend reads weights
     * as it computes (cpu) */
    void (*load_stats)(kvcal_backend *be, kvcal_load_stats *out);

    // --- batches, the ops of calib/arch.h -------------------------------
    /* The executor runs a chunk of batches layer by layer: each batch of
     * the chunk keeps its activations (residual stream, the pending add,
     * positions) in a slot of its own while the ops' scratch is shared.
     * slots: makes room for n slots (n <= max_slots; 0 frees them), dropping
     * what the slots held. max_slots: how many fit beside the model and the scratch
     * (at least 1, or an error naming the bytes one needs). */
    kvcal_status (*slots)(kvcal_backend *be, int n);
    kvcal_status (*max_slots)(kvcal_backend *be, int want, int *n);
    /* Checks the batch (lengths, context, vocabulary: errors name the
     * sample), lays out its rows into *rows (owned by the backend until the
     * slot's next batch) and embeds its tokens into slot's residual stream;
     * the slot becomes the current one. */
    kvcal_status (*begin_batch)(kvcal_backend *be, int slot, const kvcal_batch *b,
                                kvcal_rows *rows);
    /* Makes the batch in slot the one the ops read and write. */
    kvcal_status (*select_batch)(kvcal_backend *be, int slot);
    /* Makes layer l's weights the ones the ops read. */
    kvcal_status (*use_layer)(kvcal_backend *be, int layer);
    /* first: the batch's first op (the residual stream is the embedding) */
    kvcal_status (*add_rmsnorm)(kvcal_backend *be, const kvcal_op *op, int first);
    /* need_q 0: only the K and V columns of a QKV projection are needed
     * (a calibration's last layer); other projections ignore it */
    kvcal_status (*linear)(kvcal_backend *be, const kvcal_op *op, int need_q);
    /* observe: layer whose statistics K and V are folded into as the op
     * leaves them (-1: none); statistics as set by observe_into */
    kvcal_status (*qk_norm_rope)(kvcal_backend *be, const kvcal_op *op, int need_q,
                                 int observe);
    kvcal_status (*attention)(kvcal_backend *be, const kvcal_op *op);
    kvcal_status (*swiglu)(kvcal_backend *be, const kvcal_op *op);
    /* observe: layer whose routing counts (stats->expert_tokens, when the
     * statistics have them) the batch's tokens are added to (-1: none);
     * route_only 1: the router and top-k alone (the counts), no expert nor
     * shared expert run and op's out left as it was */
    kvcal_status (*moe)(kvcal_backend *be, const kvcal_op *op, int observe,
                        int route_only);
    kvcal_status (*rmsnorm)(kvcal_backend *be, const kvcal_op *op);
    kvcal_status (*geglu)(kvcal_backend *be, const kvcal_op *op);
    /* need_q 0: the query is not there (a calibration's last layer) and is
     * not rotated; observe as qk_norm_rope's, the entry folded in as K and
     * as V (an MLA layer caches one entry: one K and one V statistic) */
    kvcal_status (*mla_latent)(kvcal_backend *be, const kvcal_op *op, int need_q,
                               int observe);
    kvcal_status (*mla_expand)(kvcal_backend *be, const kvcal_op *op);
    kvcal_status (*sigmoid_gate)(kvcal_backend *be, const kvcal_op *op);
    /* each sample's tokens from a zero state (a calibration's samples are
     * independent sequences, as an engine's requests) */
    kvcal_status (*gated_delta)(kvcal_backend *be, const kvcal_op *op);

    // --- the op profile (calib/op_profile.h) ------------------------------
    /* Marks a point on the backend's queue (cuda: an event recorded on its
     * stream; cpu: the host's clock): the interval from it to the next
     * mark is label's (a string that outlives the next profile_take; NULL:
     * an interval counted nowhere). */
    kvcal_status (*profile_mark)(kvcal_backend *be, const char *label);
    /* Waits for the marks made since the last take, hands each labelled
     * interval between them (milliseconds) to add, and forgets them. */
    kvcal_status (*profile_take)(kvcal_backend *be,
                                 void (*add)(void *ctx, const char *label, double ms),
                                 void *ctx);

    // --- observing K and V ------------------------------------------------
    /* Statistics the observing ops fold into from now on (NULL: none): the
     * absmax, histograms and token counts of every layer of every batch
     * (on cuda absmax and histograms accumulate on the device and reach
     * stats at collect); each batch's own per-head absmax is kept in its
     * slot for batch_absmax. */
    kvcal_status (*observe_into)(kvcal_backend *be, kvcal_stats_t *stats);
    /* The per-head absmax of the batch in slot, K and V (layers, kv_heads)
     * into host k and v, and the slot's record cleared; a NaN or Inf is
     * KVCAL_ERR_NONFINITE naming layer, K/V, head and samples. Waits for the
     * device. */
    kvcal_status (*batch_absmax)(kvcal_backend *be, int slot, float *k, float *v);
    /* Waits for the device (the work queued so far done). */
    kvcal_status (*sync)(kvcal_backend *be);
    /* After the last batch: what the device accumulated into the
     * statistics (kvcal_stats_merge), the device's copy cleared. */
    kvcal_status (*collect)(kvcal_backend *be);
    /* Host copies of layer l's Q (rows, heads, head_dim), K and V (rows,
     * kv_heads, head_dim) in row order, for the tap of kvcal_exec_forward;
     * cuda: KVCAL_ERR_UNSUPPORTED */
    kvcal_status (*read_qkv)(kvcal_backend *be, const float **q, const float **k,
                             const float **v);

    // --- whole-model runs (eval) ------------------------------------------
    /* Makes the final norm and the classifier resident (once). */
    kvcal_status (*head_prepare)(kvcal_backend *be);
    /* The pending residual add and the final norm over the residual stream,
     * the classifier, and per row
     * the next-token NLL of target (rows; < 0: none) into host nll (rows);
     * logits (rows, vocab) host copy when non-NULL (cpu only); with ref,
     * the rows' distributions kept into the reference or compared with it
     * (kvcal_head_ref). */
    kvcal_status (*head_nll)(kvcal_backend *be, const int32_t *target, float *nll,
                             float *logits, const kvcal_head_ref *ref);
    /* Room for a reference of `rows` next-token distributions (the
     * baseline's, kept by head_nll; what was kept is dropped); 0 frees it.
     * In the backend's own logits (fp32 on cpu, bf16 on cuda: nothing lost)
     * beside their logsumexp. */
    kvcal_status (*head_reference)(kvcal_backend *be, int64_t rows);

    // --- the simulated FP8 cache (calib/kv_sim.c) --------------------------
    /* Allocates the simulation's scratch (cache, exact attention, error
     * sums of every layer, zeroed) and `floats` floats on the device for
     * the simulation's own use (*space); io gets the device and stream. */
    kvcal_status (*sim_prepare)(kvcal_backend *be, size_t floats, float **space,
                                kvcal_kv_io *io);
    /* *io for the current batch's K and V (after its cache-point op). */
    kvcal_status (*sim_view)(kvcal_backend *be, kvcal_kv_io *io);
    /* Copies n host floats to dst (from sim_prepare's space). */
    kvcal_status (*sim_upload)(kvcal_backend *be, float *dst, const float *src, size_t n);
    /* Attention of the exact K and V into the scratch the error of the
     * attention output is measured against (before the round trip), as the
     * layer's attention op (op: its sinks) computes it. */
    kvcal_status (*sim_attend_exact)(kvcal_backend *be, const kvcal_op *op);
    /* Dequantizes the cache over K and V (what attention then reads) and
     * adds K's and V's errors to layer l's sums: an e4m3 cache of the
     * scales beside it (values clipped past 464 x scale counted) when q is
     * NULL, else the cache format q describes (nothing counted as clipped). */
    kvcal_status (*sim_roundtrip)(kvcal_backend *be, int layer,
                                  const kvcal_kv_qparams *q);
    /* An MLA layer's entry (K and V of sim_view, one buffer) through vLLM's
     * fp8_ds_mla cache and back (kvcal_mla_ds_roundtrip_ref), its error
     * added to layer l's K and V sums (nothing counted as clipped). */
    kvcal_status (*sim_ds_mla)(kvcal_backend *be, int layer);
    /* The batch's queries (after RoPE) through e4m3 and back
     * (kvcal_fp8_roundtrip_ref), each kv-head group's query heads under
     * scale[group] (num_kv_heads values, host memory): what attention then
     * reads when it takes its query in FP8, as FlashAttention 3 does with an
     * fp8 cache. */
    kvcal_status (*sim_q_roundtrip)(kvcal_backend *be, const float *scale);
    /* Adds the attention output's error to layer l's sums. */
    kvcal_status (*sim_attention_error)(kvcal_backend *be, const kvcal_op *op, int layer);
    /* Adds every layer's sums into sums (layers) and zeroes them. */
    kvcal_status (*sim_collect)(kvcal_backend *be, kvcal_eval_layer_sums *sums);
    /* Frees the simulation's scratch. */
    void (*sim_release)(kvcal_backend *be);
} kvcal_backend_ops;

/* Every backend's state starts with this. */
struct kvcal_backend {
    const kvcal_backend_ops *ops;
    const kvcal_model_desc *desc; /* the model's, borrowed */
    int layers_resident;          /* layers whose weights are held at once */
    int profile; /* 1: the executor marks its ops (profile_mark); the backend
                    may mark the steps inside them */
    /* FP8 weights the backend runs as dequantized bf16 GEMMs where the
     * engine runs FP8 GEMMs (their checkpoint names, then why: cuBLASLt's
     * answer, or the fallback asked for); "" where every FP8 weight runs
     * as the engine does (the cpu backend, the reference, too) */
    char fp8_fallback[512];
};

/* Backend options; the CLI fills them (from the environment among
 * others): no backend reads the environment. */
typedef enum kvcal_attention_choice {
    KVCAL_ATTENTION_AUTO = 0, /* cuDNN's flash attention where it runs the shape */
    KVCAL_ATTENTION_OWN = 1   /* kvcal's kernel always */
} kvcal_attention_choice;

typedef enum kvcal_mlp_choice {
    KVCAL_MLP_AUTO = 0,   /* the fused gate/up + SwiGLU kernel where it applies */
    KVCAL_MLP_FUSED = 1,  /* insist on it (an error where it does not apply) */
    KVCAL_MLP_UNFUSED = 2 /* cuBLAS's GEMM, then SwiGLU */
} kvcal_mlp_choice;

typedef struct kvcal_backend_options {
    int max_batch, max_seq_len; /* the largest batch (samples x tokens) */
    kvcal_attention_choice attention;
    kvcal_mlp_choice mlp;
    /* cuda: device bytes the backend may take (weights, activations,
     * scratch), 0 for the device's free memory less a margin; a model whose
     * weights do not fit beside one batch runs with two layers on the
     * device at a time. */
    size_t max_device_memory;
    int load_threads; /* host threads that read weights (0: the machine's cores) */
    /* cuda: bytes one staging copy of the weights moves (0: 32 MiB); the
     * tests make it small so that a tiny model's layer spans many */
    size_t load_piece_bytes;
    /* cuda: FP8 weights through the dequantized bf16 fallback even where
     * cuBLASLt runs their FP8 GEMM (a check of the fallback) */
    int fp8_dequant;
    /* cuda: FP8 GEMMs of scalar and outer-vector scales with Hopper's fast
     * accumulation, as vLLM's sm_90 kernels (else fp32 accumulation) */
    int fp8_fast_accum;
    /* cuda: every block's output written apart and added to the residual
     * stream by the next add + RMSNorm, where by default a bf16 projection
     * or the MoE's combine adds it in its epilogue (a check, and a
     * benchmark's baseline) */
    int residual_unfused;
} kvcal_backend_options;

/* The backends themselves (calib/backend_cpu.c, calib/backend_cuda.c, the
 * latter only in builds with CUDA). */
kvcal_status kvcal_backend_cpu_create(kvcal_model_t *model,
                                      const kvcal_backend_options *opt,
                                      kvcal_backend **out);
kvcal_status kvcal_backend_cuda_create(kvcal_model_t *model,
                                       const kvcal_backend_options *opt,
                                       kvcal_backend **out);

/* Whether kvcal's fused gate/up + SwiGLU kernel (kvcal_gemm_swiglu_launch,
 * sm_90a only) runs on a GPU of compute capability major.minor that runs
 * the build's target `code` (kvcal_cuda_code_for_device): capability 9.0
 * running sm_90a code (its SASS, or compute_90a PTX). Pure. */
int kvcal_cuda_mlp_fused_runs(int major, int minor, const char *code);

/* Whether the fused gate/up + SwiGLU kernel takes an MLP of intermediate
 * size I and hidden size D: both multiples of 8. Pure. */
int kvcal_cuda_mlp_fits(int I, int D);

/* The cuda backend's MLP for a model of intermediate_size I and hidden_size
 * D on that GPU: *fused = 1 when mode is not UNFUSED, the kernel runs there
 * and I and D are multiples of 8; else 0. mode FUSED where the kernel
 * cannot run is KVCAL_ERR_UNSUPPORTED naming why. Pure: the GPU's
 * capability and code are arguments. */
kvcal_status kvcal_cuda_mlp_choose(int major, int minor, const char *code, int I, int D,
                                   kvcal_mlp_choice mode, int *fused);

/* Whether the cuda backend quantizes the activations of FP8 weights on a GPU
 * of compute capability major.minor: 8.9 and up (FP8 tensor cores), as vLLM
 * does; before, weight-only FP8 (W8A16). Pure. */
int kvcal_cuda_fp8_activations(int major, int minor);

/* How the cuda backend runs FP8 weights there, in a line. Pure; static
 * storage. */
const char *kvcal_cuda_fp8_plan(int major, int minor);

/* What the cuda backend runs on one GPU. */
typedef struct kvcal_cuda_device_plan {
    char name[256];
    int major, minor; /* compute capability */
    char code[32];    /* the build's target it runs, "" for none */
    kvcal_cuda_code_kind code_kind;
    int mlp_fused;            /* the fused MLP kernel runs there (shapes it takes) */
    int cudnn_version;        /* attention through cuDNN: its version; 0 for none */
    char attention_note[256]; /* when 0: why (kvcal_attention_note) */
} kvcal_cuda_device_plan;

/* kvcal_cuda_plan_device (calib/backends.h) on a build with CUDA. */
kvcal_status kvcal_backend_cuda_plan_device(int device, kvcal_cuda_device_plan *plan);

/* What the cuda backend cannot run, without touching a device:
 * KVCAL_ERR_UNSUPPORTED for an odd head_dim or one over 256, and for a
 * mixture of experts beyond the MoE kernels' bounds (kernels/cuda/ops.h). */
kvcal_status kvcal_backend_cuda_check_model(const kvcal_model_desc *d);

/* Checks sample `id` of a batch of model d for any backend: length in
 * 1..seq_len, within the model's context, for DeepSeek Sparse Attention
 * within the keys a query keeps (d->sparse_topk) and, where the model
 * scales its queries by position (d->query_scaling_from), before that
 * scaling starts. `who` starts the message of a length outside 1..seq_len;
 * every message names the sample. */
kvcal_status kvcal_backend_check_sample(const char *who, long long id, int length,
                                        int seq_len, int context,
                                        const kvcal_model_desc *d);

#endif
