/* calib/runner.h: batched fp32 prefill of a model on the CPU, handing the K
 * and V of every layer to an observer.
 *
 * K is handed over after k_proj (+bias), the per-head k_norm and RoPE; V
 * after v_proj (+bias): exactly what an engine writes into its KV cache.
 * Tokens are packed (no padding is computed or observed): sample b's tokens
 * are rows [start[b], start[b] + lengths[b]) of every activation, at
 * positions 0 .. lengths[b] - 1. Unless hidden states or logits are asked
 * for, a forward pass stops after the last layer's K and V. Activations are
 * sized by the largest batch; weights come one layer at a time from the
 * model. */
#ifndef KVCAL_CALIB_RUNNER_H
#define KVCAL_CALIB_RUNNER_H

#include <stdint.h>

#include "calib/model.h"
#include "kvcal.h"

/* The K and V of one layer for one batch. */
typedef struct kvcal_runner_kv {
    int layer;
    int batch;
    int num_kv_heads;
    int head_dim;
    const float *k;            /* (rows, kv_heads, head_dim), packed */
    const float *v;            /* (rows, kv_heads, head_dim), packed */
    const int32_t *lengths;    /* (batch) valid tokens of each sample */
    const int64_t *start;      /* (batch) first row of each sample */
    const int64_t *sample_ids; /* (batch) dataset index of each sample */
} kvcal_runner_kv;

/* Called once per layer and batch, in layer order, on the calling thread.
 * A non-OK return stops the forward pass and is returned by it. */
typedef kvcal_status (*kvcal_runner_observe_fn)(void *ctx, const kvcal_runner_kv *kv);

/* Called once per layer and batch after q, k and v are computed and before
 * attention (the last layer's only when hidden states or logits are asked
 * for), on the calling thread, with the same ctx as observe. It may rewrite
 * k and v (kv->k, kv->v made writable) in place: what attention then reads,
 * e.g. K/V through a simulated FP8 cache. q: (rows, num_heads, head_dim). A
 * non-OK return stops the forward pass and is returned by it. */
typedef kvcal_status (*kvcal_runner_kv_hook_fn)(void *ctx, const kvcal_runner_kv *kv,
                                                const float *q, int num_heads, float *k,
                                                float *v);

typedef struct kvcal_runner_outputs {
    kvcal_runner_observe_fn observe; /* or NULL */
    void *ctx;
    float *hidden; /* (rows, hidden) after the final norm, or NULL */
    float *logits; /* (rows, vocab), or NULL */
    kvcal_runner_kv_hook_fn kv_hook; /* or NULL */
} kvcal_runner_outputs;

typedef struct kvcal_runner kvcal_runner_t;

/* Creates a runner for `model` (borrowed: it must outlive the runner) that
 * takes up to max_tokens packed tokens per forward pass. Fails when the
 * activations cannot be allocated. *out = NULL on failure. */
kvcal_status kvcal_runner_create(kvcal_model_t *model, int64_t max_tokens,
                                 kvcal_runner_t **out);

/* Frees; NULL is a no-op. */
void kvcal_runner_destroy(kvcal_runner_t *r);

/* Runs one batch: ids (batch, seq_len) row-major, sample b's first
 * lengths[b] ids valid (the rest is padding, never read). sample_ids
 * (batch) name the samples in errors and in the observer (NULL: 0..batch-1).
 * A sample longer than the model's context, an empty batch, more tokens than
 * max_tokens or an id outside the vocabulary is an error naming the sample. */
kvcal_status kvcal_runner_forward(kvcal_runner_t *r, const int32_t *ids,
                                  const int32_t *lengths, int batch, int seq_len,
                                  const int64_t *sample_ids,
                                  const kvcal_runner_outputs *outputs);

/* Checks sample `id` of a batch for either runner: length in 1..seq_len,
 * within the model's context and its sliding window (0: none). `who`
 * ("runner", "cuda runner") starts the message of a length outside 1..seq_len;
 * every message names the sample. */
kvcal_status kvcal_runner_check_sample(const char *who, long long id, int length,
                                       int seq_len, int context, int sliding_window);

#endif
