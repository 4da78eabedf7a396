/* calib/backend_eval_cuda.c: the cuda backend's side of eval (calib/backend.h):
 * the model's head (the final norm, lm_head, each token's NLL and the KL
 * divergence to the baseline's distributions) and the simulated FP8 cache
 * (K and V round-tripped through it, the errors summed per layer). Compiled
 * only in builds with CUDA. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "calib/cuda_backend.h"

#define LOGITS_BYTES ((size_t)64 << 20)

/* cudaMalloc of `count` buffers of bytes[i] (0: none) in one slab *slab,
 * after checking the device (and the budget) has room for them (`what`
 * names them in the message); *slab_bytes gets the slab's size. */
static kvcal_status alloc_buffers(cuda_backend *r, void **slab, size_t *slab_bytes,
                                  void **buf, const size_t *bytes, int count,
                                  const char *what)
{
    kvcal_status st = KVCAL_OK;
    size_t need = 0, free_b = 0, total_b = 0;
    for (int i = 0; i < count; i++)
        need += round_up(bytes[i]);
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    char t1[32], t2[32];
    if (need > room(r, free_b))
        return kvcal_fail(
            KVCAL_ERR_DEVICE_MEMORY,
            "--device cuda: %s need %s beyond the model and its activations "
            "but %s are left%s; use a smaller --batch or --seq-len%s",
            what, size_text(t1, need), size_text(t2, room(r, free_b)),
            r->budget ? " under --max-device-memory" : " on the device",
            r->budget ? ", or a larger --max-device-memory" : "");
    TRY(alloc_slab(slab, need, what));
    r->allocated += need;
    *slab_bytes = need;
    unsigned char *p = *slab;
    for (int i = 0; i < count; i++)
        buf[i] = bytes[i] ? carve(&p, bytes[i]) : NULL;
    return KVCAL_OK;
fail:
    return st;
}

// --- the head -------------------------------------------------------------------

kvcal_status kvcal_cuda_head_prepare(kvcal_backend *be)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const kvcal_model_desc *d = be->desc;
    if (r->head_slab)
        return KVCAL_OK;
    kvcal_tensor_view embed, norm, cls;
    kvcal_model_head_views(r->model, &embed, &norm, &cls);
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    const size_t rows = LOGITS_BYTES / ((size_t)r->V * sizeof(kvcal_bf16));
    r->chunk = (int)(rows < 1 ? 1 : rows > N ? N : rows);
    const size_t bytes[] = {(size_t)r->D * sizeof(kvcal_bf16),
                            d->tied_embeddings ? 0
                                               : (size_t)r->V * r->D * sizeof(kvcal_bf16),
                            (size_t)r->chunk * r->V * sizeof(kvcal_bf16),
                            N * sizeof(int32_t),
                            N * sizeof(float),
                            N * sizeof(int64_t),
                            N * sizeof(float),
                            N * sizeof(float)};
    void *buf[8];
    TRY(alloc_buffers(r, &r->head_slab, &r->head_bytes, buf, bytes, 8,
                      "the final norm, the classifier and "
                      "the logits"));
    r->final_norm = buf[0];
    r->lm_head = d->tied_embeddings ? r->embed : buf[1];
    r->logits = buf[2];
    r->target = buf[3];
    r->nll = buf[4];
    r->keep = buf[5];
    r->kld = buf[6], r->top = buf[7];
    TRY(kvcal_cuda_loader_upload(r->loader, &norm, r->final_norm, r->stream));
    if (!d->tied_embeddings)
        TRY(kvcal_cuda_loader_upload(r->loader, &cls, buf[1], r->stream));
    return KVCAL_OK;
fail:
    cudaFree(r->head_slab);
    r->head_slab = NULL;
    return st;
}

void kvcal_cuda_ref_release(cuda_backend *r)
{
    if (r->stream)
        cudaStreamSynchronize(r->stream);
    cudaFree(r->ref_slab);
    r->ref_slab = NULL;
    r->allocated -= r->ref_bytes;
    r->ref_bytes = 0;
}

kvcal_status kvcal_cuda_head_reference(kvcal_backend *be, int64_t rows)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    kvcal_cuda_ref_release(r);
    if (rows <= 0)
        return KVCAL_OK;
    const size_t bytes[] = {(size_t)rows * r->V * sizeof(kvcal_bf16),
                            (size_t)rows * sizeof(float)};
    void *buf[2];
    TRY(alloc_buffers(r, &r->ref_slab, &r->ref_bytes, buf, bytes, 2,
                      "the baseline's next-token distributions"));
    r->ref = buf[0];
    r->ref_lse = buf[1];
fail:
    return st;
}

kvcal_status kvcal_cuda_head_nll(kvcal_backend *be, const int32_t *target, float *nll,
                                 float *logits, const kvcal_head_ref *ref)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    cudaStream_t s = r->stream;
    const int n = r->batch * r->seq_len;
    if (logits)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "cuda runner: logits are not handed to the host");
    TRY_CUDA(cudaMemcpyAsync(r->target, target, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    if (ref)
        TRY_CUDA(cudaMemcpyAsync(r->keep, ref->row, (size_t)n * sizeof(int64_t),
                                 cudaMemcpyHostToDevice, s));
    kvcal_bf16 *delta = NULL;
    TRY(kvcal_cuda_take_delta(r, &delta));
    TRY(kvcal_add_rmsnorm_offset_launch(r->xn, r->resid, delta, r->final_norm,
                                        be->desc->norm_offset, n, r->D, r->eps, s));
    for (int r0 = 0; r0 < n; r0 += r->chunk) {
        const int rows = n - r0 < r->chunk ? n - r0 : r->chunk;
        TRY(kvcal_gemm_launch(r->gemm, r->logits, r->xn + (size_t)r0 * r->D, r->lm_head,
                              NULL, rows, r->D, r->V, s));
        if (be->desc->logit_divisor != 1.0f) /* Granite's logits_scaling */
            TRY(kvcal_affine_launch(r->logits, r->logits, (int64_t)rows * r->V,
                                    1.0f / be->desc->logit_divisor, 0.0f, s));
        if (be->desc->logit_softcap > 0.0f)
            TRY(kvcal_softcap_launch(r->logits, (int64_t)rows * r->V,
                                     be->desc->logit_softcap, s));
        TRY(kvcal_token_nll_launch(r->nll + r0, r->logits, r->target + r0, rows, r->V,
                                   s));
        if (ref && ref->keep)
            TRY(kvcal_token_keep_launch(r->ref, r->ref_lse, r->logits, r->keep + r0, rows,
                                        r->V, s));
        else if (ref)
            TRY(kvcal_token_kld_launch(r->kld + r0, r->top + r0, r->logits, r->ref,
                                       r->ref_lse, r->keep + r0, rows, r->V, s));
    }
    TRY_CUDA(cudaMemcpyAsync(nll, r->nll, (size_t)n * sizeof(float),
                             cudaMemcpyDeviceToHost, s));
    if (ref && !ref->keep) {
        TRY_CUDA(cudaMemcpyAsync(ref->kld, r->kld, (size_t)n * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
        TRY_CUDA(cudaMemcpyAsync(ref->top, r->top, (size_t)n * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
    }
    TRY_CUDA(cudaStreamSynchronize(s));
    return KVCAL_OK;
fail:
    return st;
}

// --- the simulated cache ----------------------------------------------------------

void kvcal_cuda_sim_release(kvcal_backend *be)
{
    cuda_backend *r = cu(be);
    if (r->stream)
        cudaStreamSynchronize(r->stream);
    cudaFree(r->sim_slab);
    r->sim_slab = NULL;
    r->allocated -= r->sim_bytes;
    r->sim_bytes = 0;
}

kvcal_status kvcal_cuda_sim_prepare(kvcal_backend *be, size_t floats, float **space,
                                    kvcal_kv_io *io)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    kvcal_cuda_sim_release(be);
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    const size_t KV = N * r->HKV * r->hd;
    const size_t bytes[] = {N * (size_t)att_cols(r) * sizeof(kvcal_bf16),
                            KV,
                            KV,
                            N * r->HKV * sizeof(float),
                            N * r->HKV * sizeof(float),
                            KV * sizeof(float),
                            KV * sizeof(float),
                            floats * sizeof(float),
                            (size_t)r->L * sizeof(kvcal_eval_layer_sums),
                            N * r->HKV * sizeof(float),
                            N * r->HKV * sizeof(float)};
    enum { NBUF = sizeof bytes / sizeof bytes[0] };
    void *buf[NBUF];
    TRY(alloc_buffers(r, &r->sim_slab, &r->sim_bytes, buf, bytes, NBUF,
                      "the simulated FP8 cache's buffers"));
    r->att0 = buf[0];
    r->cache[0] = buf[1], r->cache[1] = buf[2];
    r->cache_scale[0] = buf[3], r->cache_scale[1] = buf[4];
    r->deq[0] = buf[5], r->deq[1] = buf[6];
    *space = buf[7];
    r->sums = buf[8];
    r->cache_zero[0] = buf[9], r->cache_zero[1] = buf[10];
    TRY_CUDA(cudaMemsetAsync(r->sums, 0, bytes[8], r->stream));
    memset(io, 0, sizeof *io);
    io->device = 1;
    io->stream = r->stream;
    return KVCAL_OK;
fail:
    kvcal_cuda_sim_release(be);
    return st;
}

kvcal_status kvcal_cuda_sim_upload(kvcal_backend *be, float *dst, const float *src,
                                   size_t n)
{
    kvcal_status st = KVCAL_OK;
    TRY_CUDA(cudaMemcpyAsync(dst, src, n * sizeof *src, cudaMemcpyHostToDevice,
                             cu(be)->stream));
    TRY_CUDA(cudaStreamSynchronize(cu(be)->stream));
fail:
    return st;
}

/* K and V in the QKV buffer; an MLA layer's entry for both. */
static void kv_of(cuda_backend *r, kvcal_bf16 **k, kvcal_bf16 **v)
{
    if (r->base.desc->mla) {
        *k = *v = r->latent;
        return;
    }
    *k = r->qkv + r->H * r->hd;
    *v = *k + r->HKV * r->hd;
}

/* Their row stride. */
static int64_t kv_stride(const cuda_backend *r)
{
    return r->base.desc->mla ? r->hd : r->qkv_n;
}

kvcal_status kvcal_cuda_sim_view(kvcal_backend *be, kvcal_kv_io *io)
{
    cuda_backend *r = cu(be);
    const int n = r->batch * r->seq_len;
    kvcal_bf16 *k, *v;
    kv_of(r, &k, &v);
    io->batch = (kvcal_kv_batch){
        k, v, KVCAL_DTYPE_BF16, n, kv_stride(r), r->hd, kv_stride(r), r->hd, r->row};
    io->cache = (kvcal_kv_cache){
        r->cache[0], r->cache[1], r->cache_scale[0], r->cache_scale[1], n, 1, r->HKV,
        r->hd,       0,           KVCAL_CACHE_NHD};
    io->zero[0] = r->cache_zero[0], io->zero[1] = r->cache_zero[1];
    io->device = 1;
    io->stream = r->stream;
    return KVCAL_OK;
}

kvcal_status kvcal_cuda_sim_roundtrip(kvcal_backend *be, int layer,
                                      const kvcal_kv_qparams *q)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const int n = r->batch * r->seq_len, kv_cols = r->HKV * r->hd;
    kvcal_kv_io io;
    kvcal_bf16 *kv[2];
    kv_of(r, &kv[0], &kv[1]);
    kvcal_cuda_sim_view(be, &io);
    if (q)
        TRY(kvcal_kv_dequantize_fmt_launch(&io.batch, &io.cache, q, r->deq[0], r->deq[1],
                                           KVCAL_DTYPE_F32, r->stream));
    else
        TRY(kvcal_kv_dequantize_launch(&io.batch, &io.cache, KVCAL_GRANULARITY_TENSOR,
                                       NULL, NULL, r->deq[0], r->deq[1], KVCAL_DTYPE_F32,
                                       r->stream));
    /* V first: where K and V are one buffer (MLA's entry) V's pass stores
       nothing, so that K's reads the values before the round trip */
    for (int i = 1; i >= 0; i--)
        TRY(kvcal_error_sums_launch(
            &r->sums[layer].kv[i], kv[i], kv_stride(r), r->deq[i], kv_cols,
            KVCAL_DTYPE_F32, q ? NULL : r->cache_scale[i], r->hd, r->pos, n, kv_cols,
            i && kv[0] == kv[1] ? NULL : kv[i], r->stream));
fail:
    return st;
}

kvcal_status kvcal_cuda_sim_ds_mla(kvcal_backend *be, int layer)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const int n = r->batch * r->seq_len;
    TRY(kvcal_mla_ds_roundtrip_launch(r->deq[0], r->hd, r->latent, r->hd, n, r->kvr,
                                      r->rope, r->stream));
    for (int i = 1; i >= 0; i--)
        TRY(kvcal_error_sums_launch(&r->sums[layer].kv[i], r->latent, r->hd, r->deq[0],
                                    r->hd, KVCAL_DTYPE_F32, NULL, r->hd, r->pos, n, r->hd,
                                    i ? NULL : r->latent, r->stream));
fail:
    return st;
}

kvcal_status kvcal_cuda_sim_q_roundtrip(kvcal_backend *be, const float *scale)
{
    cuda_backend *r = cu(be);
    const int group = r->H / r->HKV * r->hd; /* a kv-head group's query columns */
    kvcal_status st = KVCAL_OK;
    for (int g = 0; !st && g < r->HKV; g++)
        st =
            kvcal_fp8_roundtrip_launch(r->qkv + (size_t)g * group, r->qkv_n,
                                       r->batch * r->seq_len, group, scale[g], r->stream);
    return st;
}

kvcal_status kvcal_cuda_sim_attention_error(kvcal_backend *be, const kvcal_op *op,
                                            int layer)
{
    cuda_backend *r = cu(be);
    const int q_cols = att_cols(r);
    return kvcal_error_sums_launch(&r->sums[layer].att, r->att0, q_cols, act(r, op->out),
                                   q_cols, KVCAL_DTYPE_BF16, NULL, 0, r->pos,
                                   r->batch * r->seq_len, q_cols, NULL, r->stream);
}

kvcal_status kvcal_cuda_sim_collect(kvcal_backend *be, kvcal_eval_layer_sums *sums)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const size_t bytes = (size_t)r->L * sizeof *sums;
    kvcal_eval_layer_sums *h = malloc(bytes);
    if (!h)
        return kvcal_fail(KVCAL_ERR_NOMEM, "cuda eval: out of host memory");
    TRY_CUDA(cudaMemcpyAsync(h, r->sums, bytes, cudaMemcpyDeviceToHost, r->stream));
    TRY_CUDA(cudaMemsetAsync(r->sums, 0, bytes, r->stream));
    TRY_CUDA(cudaStreamSynchronize(r->stream));
    for (int l = 0; l < r->L; l++)
        for (int i = 0; i < 3; i++) {
            kvcal_error_sums *dst = i < 2 ? &sums[l].kv[i] : &sums[l].att;
            const kvcal_error_sums *src = i < 2 ? &h[l].kv[i] : &h[l].att;
            dst->x2 += src->x2;
            dst->e2 += src->e2;
            dst->clipped += src->clipped;
            dst->n += src->n;
        }
fail:
    free(h);
    return st;
}
