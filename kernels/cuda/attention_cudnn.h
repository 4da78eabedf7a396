/* kernels/cuda/attention_cudnn.h: causal prefill attention through cuDNN's
 * fused flash attention where cuDNN can run the shape, kvcal's own kernel
 * (kvcal_attention_launch, kernels/cuda/ops.h) everywhere else.
 *
 * cuDNN is loaded at run time (libcudnn.so.9 through dlopen: kvcal has no
 * link-time dependency on it). The first call of a shape builds cuDNN's
 * SDPA forward operation graph (Q K^T, scale, causal mask, softmax, P V)
 * through the backend API, asks cuDNN's heuristics for an engine and keeps
 * the execution plan; later calls of the shape only execute it. When cuDNN
 * is absent or not a usable 9.x, when it refuses the shape (head_dim off a
 * multiple of 8, say) or no engine accepts the graph, or when a call's
 * pointers are not 16-byte aligned, the call runs on kvcal's kernel: the
 * result is the same up to bf16 rounding. kvcal_attention_create's
 * own_kernel keeps cuDNN unloaded (the CLI sets it for KVCAL_ATTENTION=kvcal). */
#ifndef KVCAL_KERNELS_CUDA_ATTENTION_CUDNN_H
#define KVCAL_KERNELS_CUDA_ATTENTION_CUDNN_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cuda/bf16.h"
#include "kvcal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN's handle, the plans built per shape (up to 8, the oldest replaced)
 * and one device workspace. Use from one host thread at a time; calls that
 * run on cuDNN share the workspace, so calls on different streams must not
 * overlap on the device (one stream, or streams ordered by events). */
typedef struct kvcal_attention kvcal_attention_t;

/* Which implementation ran a call. */
typedef enum kvcal_attention_impl {
    KVCAL_ATTENTION_IMPL_KVCAL = 0, /* kvcal_attention_launch */
    KVCAL_ATTENTION_IMPL_CUDNN = 1  /* cuDNN's fused flash attention */
} kvcal_attention_impl;

/* Loads cuDNN when it can, unless own_kernel is non-zero (a missing or
 * unusable cuDNN is no error: calls then take kvcal's kernel and
 * kvcal_attention_note says why). Needs a current CUDA device. Fails only
 * for host memory; *out = NULL then. */
kvcal_status kvcal_attention_create(int own_kernel, kvcal_attention_t **out);

/* Frees the plans, the workspace and cuDNN's handle; NULL is a no-op.
 * Synchronizes the device first. */
void kvcal_attention_destroy(kvcal_attention_t *a);

/* cuDNN's version number (91400 for 9.14.0) when it is loaded, else 0. */
int kvcal_attention_cudnn_version(const kvcal_attention_t *a);

/* One line on the last decision: why cuDNN was not loaded, or for the last
 * shape planned which engine cuDNN took or why it refused. Owned by a,
 * valid until its next call. */
const char *kvcal_attention_note(const kvcal_attention_t *a);

/* kvcal_attention_launch's contract (same arguments, same checks, same
 * result up to bf16 rounding) on the implementation chosen for the shape;
 * *impl (when non-NULL) gets that implementation. The first call of a shape
 * on cuDNN builds its plan (host work, and on some engines a run-time
 * compile; with 8 shapes planned already, the oldest plan is dropped after a
 * device synchronization) and may grow the workspace, which synchronizes
 * the device (KVCAL_ERR_DEVICE_MEMORY naming its bytes when it does not
 * fit). A failed cuDNN execution is KVCAL_ERR_CUDA naming
 * KVCAL_ATTENTION=kvcal as the way around. */
kvcal_status kvcal_attention_run(kvcal_attention_t *a, kvcal_bf16 *out, int64_t out_stride,
                                 const kvcal_bf16 *q, const kvcal_bf16 *k,
                                 const kvcal_bf16 *v, int64_t qkv_stride, int batch,
                                 int seq_len, int n_heads, int n_kv_heads, int head_dim,
                                 float scale, cudaStream_t stream,
                                 kvcal_attention_impl *impl);

/* Causal attention whose values are narrower than its queries and keys
 * (multi-head latent attention: q/k heads of 192, v heads of 128), on cuDNN
 * only. q: rows of q_stride values, n_heads heads qk_dim apart; k: rows of
 * k_stride values, n_kv_heads heads of qk_dim values k_head_stride apart;
 * v: rows of v_stride values, n_kv_heads heads of v_dim values
 * v_head_stride apart (K and V read where they lie, e.g. inside one wider
 * per-head buffer); out: rows of out_stride, n_heads heads of v_dim. *taken
 * = 1 when cuDNN ran it; 0 when cuDNN is not loaded, refuses the shape
 * (kvcal_attention_note says why) or a pointer, stride or head size is off
 * 16 bytes: then nothing is queued and the caller runs its own path
 * (kvcal's kernels take one head size: V padded to qk_dim). Bad arguments
 * (v_dim > qk_dim among them) are KVCAL_ERR_INVALID_ARG; the first call of
 * a shape plans it and a cuDNN failure is reported as kvcal_attention_run
 * does. */
kvcal_status kvcal_attention_run_qk_v(kvcal_attention_t *a, kvcal_bf16 *out,
                                      int64_t out_stride, const kvcal_bf16 *q,
                                      int64_t q_stride, const kvcal_bf16 *k,
                                      int64_t k_stride, int64_t k_head_stride,
                                      const kvcal_bf16 *v, int64_t v_stride,
                                      int64_t v_head_stride, int batch, int seq_len,
                                      int n_heads, int n_kv_heads, int qk_dim, int v_dim,
                                      float scale, cudaStream_t stream, int *taken);

/* Causal attention with gpt-oss's sinks (a logit per query head in each
 * softmax's denominator; kvcal_attention_sinks_launch's contract without a
 * window or a soft cap) on cuDNN: its flash attention writes O and the
 * softmax statistics (lse, (batch, n_heads, seq_len) floats: the log of the
 * sum of the exponentials of the row's scaled scores), then
 * kvcal_attention_sinks_rescale_launch scales each row and head of O by
 * 1 / (1 + exp(sink - lse)), the share the sink leaves the keys: the same
 * result up to bf16 rounding. *taken as kvcal_attention_run_qk_v's (0:
 * nothing queued, the caller runs kvcal_attention_sinks_launch); bad
 * arguments are KVCAL_ERR_INVALID_ARG. (Sliding windows stay on kvcal's
 * kernel, which skips the key tiles outside the window: cuDNN's diagonal
 * band took 4x longer at gpt-oss's window of 128, bench/NOTES.md.) */
kvcal_status kvcal_attention_run_sinks(kvcal_attention_t *a, kvcal_bf16 *out,
                                       int64_t out_stride, const kvcal_bf16 *q,
                                       const kvcal_bf16 *k, const kvcal_bf16 *v,
                                       int64_t qkv_stride, int batch, int seq_len,
                                       int n_heads, int n_kv_heads, int head_dim,
                                       float scale, const kvcal_bf16 *sinks, float *lse,
                                       cudaStream_t stream, int *taken);

#ifdef __cplusplus
}
#endif

#endif
