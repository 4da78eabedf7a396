/* calib/backend_cuda.c: the cuda backend (calib/backend.h): bf16 storage,
 * fp32 accumulation, on the kernels of kernels/cuda. The whole model is
 * uploaded once (fused QKV and gate/up weights); a batch is laid out padded,
 * (batch, seq_len) rows with the padding rows neither attended to by valid
 * tokens nor observed; K and V are observed on the device by the RoPE
 * kernel into statistics laid out as kvcal_stats_t's. Work runs on one
 * stream of the current device. Its creation, the device memory planned
 * and carved: calib/backend_create_cuda.c. Compiled only in builds with
 * CUDA. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>

#include "calib/cuda_backend.h"

static kvcal_bf16 *tensor(const cuda_backend *r, kvcal_weight w)
{
    if (w == KVCAL_W_NONE || !r->lay.elems[w])
        return NULL;
    return (kvcal_bf16 *)(r->layer_weights + r->lay.off[w]);
}

/* The offset norm weight w's model adds to it (Gemma's and Qwen3-Next's
 * 1 + w, applied in the norm kernels' fp32 arithmetic), else 0. */
static float norm_offset(const cuda_backend *r, kvcal_weight w)
{
    return w != KVCAL_W_NONE && r->base.desc->arch->weights[w].norm
               ? r->base.desc->norm_offset
               : 0.0f;
}

/* FP8 weight w of the layer in use, its rows from `row` on (a slice of
 * whole blocks). */
static kvcal_fp8_weight fp8_weight(const cuda_backend *r, kvcal_weight w, long long row)
{
    const kvcal_fp8_linear *f = &r->lay.fp8[w];
    long long rows, cols;
    kvcal_model_weight_shape(r->base.desc, w, &rows, &cols);
    const float *sc = (const float *)(r->layer_weights + r->lay.scale_off[w]);
    /* a per-tensor weight's scales are the scale then the same per row: a
     * slice's start holds it too */
    const long long skip = f->w == KVCAL_FP8W_BLOCK
                               ? row / f->block_n * kvcal_fp8_block_ld(cols, f->block_k)
                               : row;
    kvcal_fp8_weight fw = {r->layer_weights + r->lay.off[w] + (size_t)(row * cols),
                           sc + skip,
                           f->a == KVCAL_FP8A_STATIC
                               ? (const float *)(r->layer_weights + r->lay.input_off[w])
                               : NULL,
                           *f};
    if (r->w8a16)
        fw.f.a = KVCAL_FP8A_NONE;
    return fw;
}

/* out (rows, n) = x (rows, k) @ weight w^T + bias, w's rows from `row` on:
 * cuBLAS's bf16 GEMM, or the FP8 layer as the engine serves it. */
static kvcal_status project(cuda_backend *r, kvcal_bf16 *out, const kvcal_bf16 *x,
                            kvcal_weight w, long long row, const kvcal_bf16 *bias,
                            int rows, int k, int n)
{
    if (r->lay.fp8[w].w == KVCAL_FP8W_NONE)
        return kvcal_gemm_launch(r->gemm, out, x, tensor(r, w) + row * k, bias, rows, k,
                                 n, r->stream);
    const kvcal_fp8_weight fw = fp8_weight(r, w, row);
    return kvcal_fp8_linear_launch(r->gemm, out, x, &fw, bias, rows, k, n, &r->fp8s,
                                   r->fp8_path, NULL, r->stream);
}

// --- batches ------------------------------------------------------------------

size_t kvcal_cuda_slot_device_bytes(const cuda_backend *r)
{
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    return 2 * round_up(N * r->D * sizeof(kvcal_bf16)) + round_up(N * sizeof(int32_t)) +
           round_up(N * sizeof(int64_t)) +
           round_up(2 * (size_t)r->L * r->HKV * sizeof(float));
}

static size_t slot_host_bytes(const cuda_backend *r)
{
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    return N * (2 * sizeof(int32_t) + sizeof(int64_t)) +
           (size_t)r->max_batch * sizeof(int64_t);
}

static void free_slots(cuda_backend *r)
{
    if (r->stream)
        cudaStreamSynchronize(r->stream);
    cudaFree(r->slot_slab);
    cudaFreeHost(r->slot_host);
    free(r->slot);
    r->slot = NULL, r->slot_slab = r->slot_host = NULL;
    r->nslots = 0;
}

/* Room beside what is allocated: the device's free memory less a margin for
 * cuBLAS's and cuDNN's own allocations. */
static kvcal_status max_slots(kvcal_backend *be, int want, int *n)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    size_t free_b = 0, total_b = 0;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    /* the slots held now are given back first */
    free_b += r->nslots * kvcal_cuda_slot_device_bytes(r);
    const size_t one = kvcal_cuda_slot_device_bytes(r), left = room(r, free_b);
    char t1[32], t2[32];
    if (left < one)
        return kvcal_fail(
            KVCAL_ERR_DEVICE_MEMORY,
            "--device cuda: the activations of one batch need %s but %s are "
            "left%s beside the model; use a smaller --batch or --seq-len%s",
            size_text(t1, one), size_text(t2, left),
            r->budget ? " under --max-device-memory" : " on the device",
            r->budget ? ", or a larger --max-device-memory" : "");
    const size_t fit = left / one;
    *n = want < 1 ? 1 : (size_t)want > fit ? (int)fit : want;
    return KVCAL_OK;
fail:
    return st;
}

static kvcal_status slots(kvcal_backend *be, int n)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const size_t N = (size_t)r->max_batch * (size_t)r->max_seq_len;
    free_slots(r);
    if (n == 0)
        return KVCAL_OK;
    if (!(r->slot = calloc((size_t)n, sizeof *r->slot))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: out of host memory");
        goto fail;
    }
    TRY(alloc_slab(&r->slot_slab, (size_t)n * kvcal_cuda_slot_device_bytes(r),
                   "the activations of the chunk's batches"));
    TRY_CUDA(cudaMallocHost(&r->slot_host, (size_t)n * slot_host_bytes(r)));
    TRY_CUDA(cudaMemsetAsync(r->slot_slab, 0, (size_t)n * kvcal_cuda_slot_device_bytes(r),
                             r->stream));
    r->nslots = n;
    unsigned char *d = r->slot_slab, *h = r->slot_host;
    for (int i = 0; i < n; i++) {
        cuda_slot *sl = &r->slot[i];
        sl->resid = carve(&d, N * r->D * sizeof(kvcal_bf16));
        sl->delta = carve(&d, N * r->D * sizeof(kvcal_bf16));
        sl->pos = carve(&d, N * sizeof(int32_t));
        sl->row = carve(&d, N * sizeof(int64_t));
        sl->bmax = carve(&d, 2 * (size_t)r->L * r->HKV * sizeof(float));
        sl->host_row = (int64_t *)h, h += N * sizeof(int64_t);
        sl->start = (int64_t *)h, h += (size_t)r->max_batch * sizeof(int64_t);
        sl->host_ids = (int32_t *)h, h += N * sizeof(int32_t);
        sl->host_pos = (int32_t *)h, h += N * sizeof(int32_t);
    }
    return KVCAL_OK;
fail:
    free_slots(r);
    return st;
}

static kvcal_status select_batch(kvcal_backend *be, int slot)
{
    cuda_backend *r = cu(be);
    if (slot < 0 || slot >= r->nslots)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda runner: slot %d of %d", slot,
                          r->nslots);
    cuda_slot *sl = &r->slot[slot];
    r->cur = sl;
    r->resid = sl->resid, r->delta = sl->delta, r->pos = sl->pos, r->row = sl->row;
    r->bmax = sl->bmax, r->batch = sl->batch, r->seq_len = sl->seq_len;
    r->valid = sl->valid, r->names = sl->names;
    return KVCAL_OK;
}

static kvcal_status begin_batch(kvcal_backend *be, int slot, const kvcal_batch *b,
                                kvcal_rows *rows)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const int batch = b->batch, seq_len = b->seq_len;
    if (batch <= 0 || seq_len <= 0 || batch > r->max_batch || seq_len > r->max_seq_len)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "cuda runner: batch %d x %d tokens: the runner was made for up to "
            "%d x %d",
            batch, seq_len, r->max_batch, r->max_seq_len);
    if (slot < 0 || slot >= r->nslots)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda runner: slot %d of %d", slot,
                          r->nslots);
    cuda_slot *sl = &r->slot[slot];
    sl->names = b->sample_ids ? b->sample_ids : r->default_names;
    sl->valid = 0;
    for (int s = 0; s < batch; s++) {
        const long long name = (long long)sl->names[s];
        TRY(kvcal_backend_check_sample("cuda runner", name, b->lengths[s], seq_len,
                                       r->ctx, r->base.desc));
        for (int t = 0; t < seq_len; t++) {
            const int64_t i = (int64_t)s * seq_len + t;
            const int id = b->ids[i];
            if (t < b->lengths[s] && (id < 0 || id >= r->V))
                return kvcal_fail(
                    KVCAL_ERR_INVALID_ARG,
                    "sample %lld token %d: id %d is outside the vocabulary of "
                    "%d",
                    name, t, id, r->V);
            sl->host_ids[i] = t < b->lengths[s] ? id : -1;
            sl->host_pos[i] = t < b->lengths[s] ? t : -1;
            sl->host_row[i] = t < b->lengths[s] ? i : -1;
        }
        sl->start[s] = (int64_t)s * seq_len;
        sl->valid += b->lengths[s];
    }
    sl->batch = batch;
    sl->seq_len = seq_len;
    sl->delta_added = 0;
    sl->norm_ahead = 0;
    TRY(select_batch(be, slot));
    const int n = batch * seq_len;
    cudaStream_t s = r->stream;
    TRY_CUDA(cudaMemcpyAsync(r->ids, sl->host_ids, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    TRY_CUDA(cudaMemcpyAsync(sl->pos, sl->host_pos, (size_t)n * sizeof(int32_t),
                             cudaMemcpyHostToDevice, s));
    TRY_CUDA(cudaMemcpyAsync(sl->row, sl->host_row, (size_t)n * sizeof(int64_t),
                             cudaMemcpyHostToDevice, s));
    TRY(kvcal_embed_launch(sl->resid, r->embed, r->ids, n, r->D, s));
    if (be->desc->embed_scale != 1.0f) /* as a bf16 model: times the scale in bf16 */
        TRY(kvcal_affine_launch(sl->resid, sl->resid, (int64_t)n * r->D,
                                kvcal_bf16_round(be->desc->embed_scale), 0.0f, s));
    *rows = (kvcal_rows){n, sl->start, b->lengths, sl->names, batch};
    return KVCAL_OK;
fail:
    return st;
}

static kvcal_status use_layer(kvcal_backend *be, int layer)
{
    cuda_backend *r = cu(be);
    r->layer = layer;
    r->fp8_ready = KVCAL_W_NONE;
    return kvcal_cuda_loader_use(r->loader, layer, r->stream, &r->layer_weights);
}

static kvcal_weight fp8_sole_reader(const cuda_backend *r, const kvcal_op *op, int fits);

/* Where the normalized stream's one reader is an FP8 projection with
 * quantized activations, the norm quantizes it for that projection
 * (kvcal_fp8_add_rmsnorm_quant_launch) and writes no bf16 output. */
static kvcal_status add_rmsnorm(kvcal_backend *be, const kvcal_op *op, int first)
{
    cuda_backend *r = cu(be);
    kvcal_bf16 *delta = NULL;
    const kvcal_bf16 *w = tensor(r, op->w);
    const int n = r->batch * r->seq_len;
    if (r->cur->norm_ahead == 1) { /* the combine before wrote its rows */
        r->cur->norm_ahead = 2;
        r->cur->delta_added = 0;
        return KVCAL_OK;
    }
    r->cur->norm_ahead = 0;
    kvcal_status st = first ? KVCAL_OK : kvcal_cuda_take_delta(r, &delta);
    if (st)
        return st;
    const float off = norm_offset(r, op->w);
    const kvcal_weight reader = fp8_sole_reader(
        r, op, off == 0.0f && kvcal_fp8_add_rmsnorm_quant_fits(r->resid, delta, w, r->D));
    if (reader == KVCAL_W_NONE)
        return kvcal_add_rmsnorm_offset_launch(act(r, op->out), r->resid, delta, w, off,
                                               n, r->D, r->eps, r->stream);
    const kvcal_fp8_weight fw = fp8_weight(r, reader, 0);
    st = kvcal_fp8_add_rmsnorm_quant_launch(r->fp8s.xq, r->fp8s.xs, r->resid, delta, w, n,
                                            r->D, r->eps, fw.f.a, fw.f.group,
                                            fw.input_scale, r->stream);
    r->fp8_ready = st ? KVCAL_W_NONE : reader;
    return st;
}

/* A QKV projection: all of it, or with need_q 0 (nothing reads the
 * queries of a calibration's last layer) only the K and V rows of the
 * weight, into the QKV buffer as (n, 2 HKV hd) rows; where the K/V rows of
 * the weight (or bias) are not aligned as cuBLASLt's algorithms want (256
 * bytes), the whole QKV. x: the input, NULL where the op before
 * quantized it (kvcal_fp8_linear_launch). */
static kvcal_status project_qkv(cuda_backend *r, const kvcal_op *op, const kvcal_bf16 *x,
                                int need_q)
{
    const int n = r->batch * r->seq_len, q_cols = r->H * r->hd;
    const kvcal_fp8_linear *f = &r->lay.fp8[op->w];
    const kvcal_bf16 *b = tensor(r, op->b), *kv_b = b ? b + q_cols : NULL;
    const unsigned char *kv_w =
        f->w != KVCAL_FP8W_NONE
            ? fp8_weight(r, op->w, q_cols).q
            : (const unsigned char *)(tensor(r, op->w) + (size_t)q_cols * r->D);
    const float *kv_s =
        f->w != KVCAL_FP8W_NONE ? fp8_weight(r, op->w, q_cols).scales : NULL;
    const int kv_only = !need_q && ((uintptr_t)kv_w | (uintptr_t)kv_b) % 256 == 0 &&
                        (uintptr_t)kv_s % 16 == 0 &&
                        (f->w != KVCAL_FP8W_BLOCK || q_cols % f->block_n == 0);
    r->qkv_heads = kv_only ? 0 : r->H;
    r->qkv_width = (r->qkv_heads + 2 * r->HKV) * r->hd;
    return project(r, r->qkv, x, op->w, kv_only ? q_cols : 0, kv_only ? kv_b : b, n, r->D,
                   r->qkv_width);
}

/* The input of op's projection: NULL where the op before quantized it
 * for op's weight (fp8_sole_reader), which is then used up. */
static const kvcal_bf16 *fp8_input(cuda_backend *r, const kvcal_op *op)
{
    const kvcal_bf16 *x = r->fp8_ready == op->w ? NULL : act(r, op->in);
    r->fp8_ready = KVCAL_W_NONE;
    return x;
}

/* Whether op, which writes the pending delta, adds it to the residual
 * stream itself (in its epilogue): unless KVCAL_RESIDUAL=unfused, where
 * the model scales no delta (Granite's residual_multiplier) and the next
 * op that reads or writes the delta, in this layer or the next, is an add
 * + RMSNorm that reads it (no post-norm between: Gemma's, GLM-4's);
 * after the last layer the head's add + RMSNorm (eval) reads it. */
static int fold_residual(const cuda_backend *r, const kvcal_op *op)
{
    const kvcal_model_desc *d = r->base.desc;
    if (!r->fold_residual || op->out != KVCAL_ACT_DELTA || d->residual_scale != 1.0f)
        return 0;
    for (int l = r->layer; l < d->num_layers; l++) {
        int n = 0;
        const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n);
        for (int j = l == r->layer ? (int)(op - ops) + 1 : 0; j < n; j++) {
            const kvcal_op *o = &ops[j];
            if (!kvcal_model_op_runs(d, l, o) ||
                (o->in != KVCAL_ACT_DELTA && o->out != KVCAL_ACT_DELTA))
                continue;
            return o->kind == KVCAL_OP_ADD_RMSNORM && o->in == KVCAL_ACT_DELTA;
        }
    }
    return 1;
}

/* The weight of the next layer's first op, an add + RMSNorm, where the
 * MoE's combine that adds its output to the stream (fold_residual) is to
 * apply it too (kvcal_combine_norm), into the slot's delta buffer, which
 * the fold leaves unused: a plain RMSNorm (no offset) whose weight the
 * backend holds (norm_ahead_w), and whose rows the ops of that layer that
 * read them read before any op writes the delta buffer (where they then
 * live; a folded projection's GEMM may use it as scratch). NULL
 * otherwise. */
static const kvcal_bf16 *norm_ahead(const cuda_backend *r)
{
    const kvcal_model_desc *d = r->base.desc;
    const int l = r->layer + 1;
    if (!r->norm_ahead_w || l >= d->num_layers)
        return NULL;
    const kvcal_op *first = kvcal_cuda_input_norm(d, l);
    if (!first || norm_offset(r, first->w) != 0.0f)
        return NULL;
    int n = 0, delta_written = 0;
    const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n);
    for (int j = (int)(first - ops) + 1; j < n; j++) {
        const kvcal_op *o = &ops[j];
        if (!kvcal_model_op_runs(d, l, o))
            continue;
        if (o->in == KVCAL_ACT_NORM && delta_written)
            return NULL;
        if (o->out == KVCAL_ACT_NORM)
            break;
        delta_written |= o->out == KVCAL_ACT_DELTA;
    }
    return r->norm_ahead_w + (size_t)l * r->D;
}

static kvcal_status linear(kvcal_backend *be, const kvcal_op *op, int need_q)
{
    cuda_backend *r = cu(be);
    const kvcal_bf16 *x = fp8_input(r, op);
    if (op->out == KVCAL_ACT_QKV)
        return project_qkv(r, op, x, need_q);
    long long rows, cols;
    kvcal_model_weight_shape(be->desc, op->w, &rows, &cols);
    const int n = r->batch * r->seq_len;
    if (r->lay.fp8[op->w].w == KVCAL_FP8W_NONE && fold_residual(r, op)) {
        /* resid += x w^T + b, rounded once (delta, unwritten now, the
           scratch of the shape's first launch) */
        const kvcal_status st = kvcal_gemm_accumulate_launch(
            r->gemm, r->resid, r->delta, x, tensor(r, op->w), tensor(r, op->b), n,
            (int)cols, (int)rows, r->stream);
        r->cur->delta_added = st == KVCAL_OK;
        return st;
    }
    return project(r, act(r, op->out), x, op->w, 0, tensor(r, op->b), n, (int)cols,
                   (int)rows);
}

/* The FP8 weight of the one op of the layer that reads op's output, where
 * op's kernel can quantize that activation for it (`fits`: in SwiGLU's or
 * add + RMSNorm's epilogue, the row of outputs in shared memory): a linear
 * op, or the gate/up projection of a SwiGLU or GeGLU op, with quantized
 * activations, which is the next op that runs after op (nothing between
 * them reuses the quantized activation's scratch). The readers are the
 * ops after op (the layer's ops taken as a cycle) up to the next one that
 * writes op's output again. KVCAL_W_NONE where another op reads the output
 * too, or the reader is no such projection. */
static kvcal_weight fp8_sole_reader(const cuda_backend *r, const kvcal_op *op, int fits)
{
    int n = 0;
    const kvcal_op *ops = kvcal_model_layer_ops(r->base.desc, r->layer, &n);
    const int at = (int)(op - ops);
    kvcal_weight w = KVCAL_W_NONE;
    int readers = 0, first = 1;
    for (int j = 1; j < n && at >= 0 && at < n; j++) {
        const kvcal_op *o = &ops[(at + j) % n];
        if (!kvcal_model_op_runs(r->base.desc, r->layer, o))
            continue;
        if (o->in == op->out) {
            readers++;
            w = first && (o->kind == KVCAL_OP_LINEAR || o->kind == KVCAL_OP_SWIGLU ||
                          o->kind == KVCAL_OP_GEGLU)
                    ? o->w
                    : KVCAL_W_NONE;
        }
        first = 0;
        if (o->out == op->out)
            break;
    }
    if (readers != 1 || w == KVCAL_W_NONE || r->lay.fp8[w].w == KVCAL_FP8W_NONE ||
        fp8_weight(r, w, 0).f.a == KVCAL_FP8A_NONE || !r->fp8s.xq || !fits)
        return KVCAL_W_NONE;
    return w;
}

/* The observer of layer l's statistics (K and V; an MLA layer's entry is
 * folded into both), and its tokens counted. */
static kvcal_kv_observer observer_of(cuda_backend *r, int l)
{
    kvcal_kv_observer obs = {0};
    for (int kv = 0; kv < 2; kv++) {
        obs.absmax[kv] = r->absmax[kv] + (size_t)l * r->HKV * r->hd;
        obs.hist[kv] = r->hist[kv] + (size_t)l * r->HKV * KVCAL_HIST_BINS;
        obs.batch_absmax[kv] = r->bmax + ((size_t)kv * r->L + l) * r->HKV;
    }
    if (r->stats)
        r->stats->tokens[l] += r->valid;
    return obs;
}

/* The q/k norms of weights qw and kw (NULL: none) in place in the QKV
 * buffer (the queries' where the projection wrote them), apart from RoPE:
 * over the whole projection (whole: OLMo 2, MiniMax-M2), or per head
 * (Hunyuan's and Llama 4's, after RoPE). */
static kvcal_status norm_qk_apart(cuda_backend *r, const kvcal_bf16 *qw,
                                  const kvcal_bf16 *kw, int whole)
{
    const int n = r->batch * r->seq_len;
    kvcal_status st = KVCAL_OK;
    if (qw && r->qkv_heads)
        st = kvcal_rmsnorm_cols_launch(
            r->qkv, r->qkv_width, qw, n, whole ? 1 : r->qkv_heads,
            whole ? r->qkv_heads * r->hd : r->hd, r->eps, r->stream);
    if (!st && kw)
        st = kvcal_rmsnorm_cols_launch(r->qkv + (size_t)r->qkv_heads * r->hd,
                                       r->qkv_width, kw, n, whole ? 1 : r->HKV,
                                       whole ? r->HKV * r->hd : r->hd, r->eps, r->stream);
    return st;
}

static kvcal_status qk_norm_rope(kvcal_backend *be, const kvcal_op *op, int need_q,
                                 int observe)
{
    (void)need_q; /* project_qkv left the queries out or not */
    cuda_backend *r = cu(be);
    const int sliding = r->inv_freq_sliding && be->desc->layer_window[r->layer] > 0;
    /* a layer without RoPE (SmolLM3's NoPE layers) turns by angle 0: cos 1
     * and sin 0 give each value back exactly */
    const kvcal_model_desc *d = be->desc;
    const int rope_on = kvcal_model_layer_rope(d, r->layer), n = r->batch * r->seq_len;
    /* q/k norms over the whole projection (every head's channels at once)
       run first; norms after RoPE (Hunyuan's, and Llama 4's without a
       weight in its RoPE layers) between the rotation and a second pass
       that turns by angle 0 to observe; the rotation normalizes nothing
       then. A layer without RoPE scales its queries by the model's
       temperature (Llama 4's) before they are observed. */
    const int whole = d->qk_norm_whole,
              after_rope = d->qk_norm_after_rope || d->qk_l2_norm;
    const int after = rope_on && after_rope;
    kvcal_status st =
        whole ? norm_qk_apart(r, tensor(r, op->w), tensor(r, op->b), 1) : KVCAL_OK;
    if (!st && !rope_on && d->attn_temp_scale != 0.0f && r->qkv_heads)
        st = kvcal_query_temperature_launch(r->qkv, r->qkv_width, r->pos, n,
                                            r->qkv_heads * r->hd, d->attn_temp_scale,
                                            d->attn_temp_floor, r->stream);
    if (st)
        return st;
    const int apart = whole || after_rope;
    const kvcal_rope_cfg rope = {
        !rope_on  ? r->inv_freq_zero
        : sliding ? r->inv_freq_sliding
                  : r->inv_freq,
        r->rot_dim, r->interleaved, apart ? NULL : tensor(r, op->w),
        apart ? NULL : tensor(r, op->b), r->eps,
        /* the sliding layers' own RoPE: unscaled
           (kvcal_model_layer_rope_factor) */
        sliding || !rope_on ? 1.0f : r->attention_factor, norm_offset(r, op->w)};
    kvcal_kv_observer obs = {0};
    if (observe >= 0 && r->stats)
        obs = observer_of(r, observe);
    const int l = observe;
    const int q = observe >= 0 && r->stats && r->stats->q_absmax && r->qkv_heads == r->H;
    obs.q_absmax = q ? r->q_absmax + (size_t)l * r->H : NULL;
    const kvcal_kv_observer *o = observe >= 0 && r->stats ? &obs : NULL;
    if (after) {
        const kvcal_rope_cfg still = {
            r->inv_freq_zero, r->rot_dim, r->interleaved, NULL, NULL, r->eps, 1.0f, 0.0f};
        st = kvcal_rope_observe_launch(r->qkv, r->qkv_width, r->pos, n, r->qkv_heads,
                                       r->HKV, r->hd, &rope, NULL, r->stream);
        if (!st)
            st = d->qk_l2_norm ? norm_qk_apart(r, r->norm_ones, r->norm_ones, 0)
                               : norm_qk_apart(r, tensor(r, op->w), tensor(r, op->b), 0);
        if (!st)
            st = kvcal_rope_observe_launch(r->qkv, r->qkv_width, r->pos, n, r->qkv_heads,
                                           r->HKV, r->hd, &still, o, r->stream);
    } else
        st = kvcal_rope_observe_launch(r->qkv, r->qkv_width, r->pos, n, r->qkv_heads,
                                       r->HKV, r->hd, &rope, o, r->stream);
    if (st || observe < 0 || !r->stats || !r->stats->min[0])
        return st;
    /* the signed range, asked for: K as rotated and V, read again */
    const size_t lc = (size_t)r->L * r->HKV * r->hd, at = (size_t)l * r->HKV * r->hd;
    const kvcal_bf16 *k = r->qkv + (size_t)r->qkv_heads * r->hd, *v = k + r->HKV * r->hd;
    const kvcal_kv_batch b = {k,
                              v,
                              KVCAL_DTYPE_BF16,
                              r->batch * r->seq_len,
                              r->qkv_width,
                              r->hd,
                              r->qkv_width,
                              r->hd,
                              r->row};
    const kvcal_kv_range range = {{r->range + at, r->range + 2 * lc + at},
                                  {r->range + lc + at, r->range + 3 * lc + at}};
    return kvcal_kv_range_launch(&b, r->hd, r->HKV, &range, r->stream);
}

// --- the op profile ---------------------------------------------------------------

static kvcal_status profile_mark(kvcal_backend *be, const char *label)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    if (r->marks == r->marks_cap) {
        const int cap = r->marks_cap ? 2 * r->marks_cap : 256;
        cudaEvent_t *ev = realloc(r->mark_ev, (size_t)cap * sizeof *ev);
        if (ev)
            r->mark_ev = ev;
        const char **l = realloc(r->mark_label, (size_t)cap * sizeof *l);
        if (l)
            r->mark_label = l;
        if (!ev || !l)
            return kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: out of host memory");
        for (; r->marks_cap < cap; r->marks_cap++)
            TRY_CUDA(cudaEventCreate(&r->mark_ev[r->marks_cap]));
    }
    TRY_CUDA(cudaEventRecord(r->mark_ev[r->marks], r->stream));
    r->mark_label[r->marks++] = label;
fail:
    return st;
}

static kvcal_status profile_take(kvcal_backend *be,
                                 void (*add)(void *ctx, const char *label, double ms),
                                 void *ctx)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    if (r->marks)
        TRY_CUDA(cudaEventSynchronize(r->mark_ev[r->marks - 1]));
    for (int i = 0; i + 1 < r->marks; i++) {
        float ms = 0.0f;
        if (!r->mark_label[i])
            continue;
        TRY_CUDA(cudaEventElapsedTime(&ms, r->mark_ev[i], r->mark_ev[i + 1]));
        add(ctx, r->mark_label[i], ms);
    }
fail:
    r->marks = 0;
    return st;
}

/* Marks the start of a step inside an op when the run is profiled. */
static kvcal_status step(cuda_backend *r, const char *label)
{
    return r->base.profile ? profile_mark(&r->base, label) : KVCAL_OK;
}

/* Causal attention into out of q, k, v (rows of stride `stride`, kv_heads
 * heads of hd) of `batch` sequences of seq_len rows each, within the
 * model's sliding window where a sequence can be longer, with the heads'
 * sinks (gpt-oss) where non-NULL. */
static kvcal_status attend_seqs(cuda_backend *r, kvcal_bf16 *out, int64_t out_stride,
                                const kvcal_bf16 *q, const kvcal_bf16 *k,
                                const kvcal_bf16 *v, int64_t stride, int kv_heads, int hd,
                                const kvcal_bf16 *sinks, int batch, int seq_len)
{
    const int window = r->base.desc->layer_window[r->layer];
    const float scale = r->base.desc->attn_scale, softcap = r->base.desc->attn_softcap;
    const int windowed = window > 0 && seq_len > window;
    if (sinks && !windowed && !(softcap > 0.0f)) { /* cuDNN, then the sinks' share */
        int taken = 0;
        kvcal_status st = kvcal_attention_run_sinks(
            r->attn, out, out_stride, q, k, v, stride, batch, seq_len, r->H, kv_heads, hd,
            scale, sinks, r->lse, r->stream, &taken);
        if (st || taken)
            return st;
    }
    if (windowed || softcap > 0.0f || sinks)
        return kvcal_attention_sinks_launch(out, out_stride, q, k, v, stride, batch,
                                            seq_len, r->H, kv_heads, hd, scale, window,
                                            softcap, sinks, r->stream);
    return kvcal_attention_run(r->attn, out, out_stride, q, k, v, stride, batch, seq_len,
                               r->H, kv_heads, hd, scale, r->stream, NULL);
}

/* The batch's causal attention into out (N, att_cols) (attend_seqs); in a
 * layer that attends within chunks (Llama 4's RoPE layers) where a sample
 * is longer than a chunk, each chunk of each sample as a sequence of its
 * own: a sample's whole chunks as one batch of them, its last part apart. */
static kvcal_status attend_qkv(cuda_backend *r, kvcal_bf16 *out, int64_t out_stride,
                               const kvcal_bf16 *q, const kvcal_bf16 *k,
                               const kvcal_bf16 *v, int64_t stride, int kv_heads, int hd,
                               const kvcal_bf16 *sinks)
{
    const int window = r->base.desc->layer_window[r->layer];
    const int chunk = kvcal_model_layer_chunk(r->base.desc, r->layer);
    kvcal_status st =
        step(r, window > 0 && r->seq_len > window ? "attention, sliding window"
                : chunk > 0 && r->seq_len > chunk ? "attention, chunked"
                                                  : "attention, full");
    if (st || !(chunk > 0 && r->seq_len > chunk))
        return st ? st
                  : attend_seqs(r, out, out_stride, q, k, v, stride, kv_heads, hd, sinks,
                                r->batch, r->seq_len);
    const int whole = r->seq_len / chunk, rest = r->seq_len % chunk;
    for (int b = 0; !st && b < r->batch; b++)
        for (int part = 0; !st && part < 2; part++) {
            const int64_t row =
                (int64_t)b * r->seq_len + (part ? (int64_t)whole * chunk : 0);
            if (part ? rest : whole)
                st = attend_seqs(r, out + row * out_stride, out_stride, q + row * stride,
                                 k + row * stride, v + row * stride, stride, kv_heads, hd,
                                 sinks, part ? 1 : whole, part ? rest : chunk);
        }
    return st;
}

/* The attention into out (N, att_cols): of the fused QKV buffer (with op's
 * sinks where it has them), or MLA's decompressed heads: on cuDNN as they
 * are (q heads of mq; K and V read inside kvb, or K of mk), else with V
 * padded to the q/k head size, so that one head size runs on kvcal's
 * kernels, the padding's columns then dropped. */
static kvcal_status attend(cuda_backend *r, const kvcal_op *op, kvcal_bf16 *out)
{
    kvcal_status st = KVCAL_OK;
    const int q_cols = r->H * r->hd, n = r->batch * r->seq_len;
    if (!r->base.desc->mla)
        return attend_qkv(r, out, q_cols, r->qkv, r->qkv + q_cols,
                          r->qkv + q_cols + r->HKV * r->hd, r->qkv_n, r->HKV, r->hd,
                          tensor(r, op->w));
    const size_t e = sizeof(kvcal_bf16);
    const int64_t qk_stride = (int64_t)r->H * r->qkd;
    /* where K and V lie: kvb's heads of [V | K], or K in mk and V after each
     * head's no-RoPE part in kvb */
    const int v_first = r->lay.kv_b_v_first;
    const int kv_head = v_first ? r->vh + r->qkd : r->nope + r->vh;
    const int64_t kv_stride = (int64_t)r->H * kv_head;
    const kvcal_bf16 *k = v_first ? r->kvb + r->vh : r->mk,
                     *v = v_first ? r->kvb : r->kvb + r->nope;
    const int window = r->base.desc->layer_window[r->layer];
    int taken = 0;
    if ((window <= 0 || r->seq_len <= window) && !(r->base.desc->attn_softcap > 0.0f))
        TRY(kvcal_attention_run_qk_v(r->attn, out, (int64_t)r->H * r->vh, r->mq,
                                     qk_stride, k, v_first ? kv_stride : qk_stride,
                                     v_first ? kv_head : r->qkd, v, kv_stride, kv_head,
                                     r->batch, r->seq_len, r->H, r->H, r->qkd, r->vh,
                                     r->base.desc->attn_scale, r->stream, &taken));
    if (taken)
        return KVCAL_OK;
    if (v_first) { /* K and V as kvcal's kernels take them: mk, mv padded with zeros */
        TRY_CUDA(cudaMemcpy2DAsync(r->mk, r->qkd * e, k, kv_head * e, r->qkd * e,
                                   (size_t)n * r->H, cudaMemcpyDeviceToDevice,
                                   r->stream));
        TRY_CUDA(cudaMemcpy2DAsync(r->mv, r->qkd * e, v, kv_head * e, r->vh * e,
                                   (size_t)n * r->H, cudaMemcpyDeviceToDevice,
                                   r->stream));
        if (r->qkd > r->vh)
            TRY_CUDA(cudaMemset2DAsync(r->mv + r->vh, r->qkd * e, 0,
                                       (size_t)(r->qkd - r->vh) * e, (size_t)n * r->H,
                                       r->stream));
    } else {
        TRY(kvcal_mla_expand_launch(NULL, r->mv, r->qkd, r->kvb, r->latent, r->hd, n,
                                    r->H, r->nope, r->vh, r->kvr, r->rope, r->stream));
    }
    TRY(attend_qkv(r, r->att_pad, qk_stride, r->mq, r->mk, r->mv, qk_stride, r->H, r->qkd,
                   NULL));
    TRY_CUDA(cudaMemcpy2DAsync(out, r->vh * e, r->att_pad, r->qkd * e, r->vh * e,
                               (size_t)n * r->H, cudaMemcpyDeviceToDevice, r->stream));
fail:
    return st;
}

static kvcal_status attention(kvcal_backend *be, const kvcal_op *op)
{
    return attend(cu(be), op, act(cu(be), op->out));
}

/* In place where op's out is its in (kvcal_add_rmsnorm_launch with no
 * delta leaves its input as it is). */
static kvcal_status rmsnorm(kvcal_backend *be, const kvcal_op *op)
{
    cuda_backend *r = cu(be);
    long long dim, cols; /* hidden, or the query's LoRA rank (MLA) */
    kvcal_model_weight_shape(be->desc, op->w, &dim, &cols);
    return kvcal_add_rmsnorm_offset_launch(
        act(r, op->out), act(r, op->in), NULL, tensor(r, op->w), norm_offset(r, op->w),
        r->batch * r->seq_len, (int)dim, r->eps, r->stream);
}

/* cuBLAS's gate/up GEMM, then GeGLU (the fused kernel is SwiGLU's alone). */
static kvcal_status geglu(kvcal_backend *be, const kvcal_op *op)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const int n = r->batch * r->seq_len;
    TRY(project(r, r->gu, fp8_input(r, op), op->w, 0, NULL, n, r->D, 2 * r->I));
    return kvcal_geglu_launch(act(r, op->out), r->gu, n, r->I, r->stream);
fail:
    return st;
}

/* An FP8 gate/up + SwiGLU in one Hopper kernel (kvcal_gemm_swiglu_fp8_launch:
 * the served FP8 GEMM's values, fp32 accumulation), the input quantized
 * first unless the op before did; where the output's one reader is an FP8
 * projection with quantized activations, act is quantized for it from the
 * rows' absmax the kernel gave. */
static kvcal_status swiglu_fp8(cuda_backend *r, const kvcal_op *op)
{
    kvcal_status st = KVCAL_OK;
    const int n = r->batch * r->seq_len;
    const kvcal_fp8_weight gw = fp8_weight(r, op->w, 0);
    const kvcal_bf16 *x = fp8_input(r, op);
    if (x)
        TRY(kvcal_fp8_quant_act_launch(r->fp8s.xq, r->fp8s.xs, x, n, r->D, gw.f.a, 0,
                                       gw.input_scale, r->stream));
    const int token = gw.f.a == KVCAL_FP8A_TOKEN;
    kvcal_bf16 *out = act(r, op->out);
    TRY(kvcal_gemm_swiglu_fp8_launch(out, r->fp8_absmax, r->fp8s.xq,
                                     token ? r->fp8s.xs : gw.input_scale, token, gw.q,
                                     gw.scales, gw.f.w == KVCAL_FP8W_CHANNEL, n, r->D,
                                     r->I, r->stream));
    const kvcal_weight down = fp8_sole_reader(r, op, 1);
    if (down == KVCAL_W_NONE)
        return KVCAL_OK;
    const kvcal_fp8_weight fw = fp8_weight(r, down, 0);
    if (fw.f.a == KVCAL_FP8A_TOKEN || fw.f.a == KVCAL_FP8A_STATIC)
        TRY(kvcal_fp8_quant_absmax_launch(r->fp8s.xq, r->fp8s.xs, out, r->fp8_absmax, n,
                                          r->I, fw.f.a, fw.input_scale, r->stream));
    else
        TRY(kvcal_fp8_quant_act_launch(r->fp8s.xq, r->fp8s.xs, out, n, r->I, fw.f.a,
                                       fw.f.group, fw.input_scale, r->stream));
    r->fp8_ready = down;
fail:
    return st;
}

static kvcal_status swiglu(kvcal_backend *be, const kvcal_op *op)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    const int n = r->batch * r->seq_len;
    if (r->mlp_fp8_fused)
        return swiglu_fp8(r, op);
    if (r->mlp_fused)
        return kvcal_gemm_swiglu_launch(act(r, op->out), act(r, op->in), tensor(r, op->w),
                                        n, r->D, r->I, r->stream);
    TRY(project(r, r->gu, fp8_input(r, op), op->w, 0, NULL, n, r->D, 2 * r->I));
    const kvcal_weight down = fp8_sole_reader(r, op, kvcal_fp8_swiglu_quant_fits(r->I));
    if (down == KVCAL_W_NONE)
        return kvcal_swiglu_launch(act(r, op->out), r->gu, n, r->I, r->stream);
    const kvcal_fp8_weight fw = fp8_weight(r, down, 0);
    TRY(kvcal_fp8_swiglu_quant_launch(r->fp8s.xq, r->fp8s.xs, r->gu, n, r->I, fw.f.a,
                                      fw.f.group, fw.input_scale, r->stream));
    r->fp8_ready = down;
    return KVCAL_OK;
fail:
    return st;
}

/* Router GEMM (with its bias for softmax routing), routing and grouping on
 * the device, the experts' grouped GEMMs (on Hopper the rows gathered in the
 * gate/up's loads, gate/up with SwiGLU fused, down; elsewhere gate/up, SwiGLU,
 * down; gpt-oss's biases and clamped SwiGLU as separate kernels after plain
 * GEMMs on either; FP8 experts dequantized, their inputs quantized as
 * served: calib/backend_moe_fp8_cuda.c), the shared expert (on Hopper its
 * gate/up and SwiGLU in the dense MLP's fused kernel where bf16, its down on
 * cuBLAS; elsewhere cuBLAS, or FP8 as the dense projections), the weighted
 * combine: no host round trip.
 * route_only: up to the grouping (the counts) alone. */
static kvcal_status moe(kvcal_backend *be, const kvcal_op *op, int observe,
                        int route_only)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    cudaStream_t s = r->stream;
    const int n = r->batch * r->seq_len;
    const kvcal_bf16 *x = act(r, op->in);
    kvcal_moe_plan plan = r->plan;
    plan.capacity = kvcal_moe_plan_capacity(n * r->K, r->E);
    plan.tiles = plan.capacity / KVCAL_MOE_TILE_ROWS;
    unsigned long long *counts = observe >= 0 && r->stats && r->stats->num_experts == r->E
                                     ? r->expert_tokens + (size_t)observe * r->E
                                     : NULL;
    const kvcal_model_desc *d = be->desc;
    /* the router's bias: in the logits for softmax routing (gpt-oss), in
     * the choice for sigmoid routing and ERNIE's softmax */
    const int choice_bias = d->moe_sigmoid || d->moe_softmax_bias;
    TRY(kvcal_gemm_launch(r->gemm, r->router, x, tensor(r, op->w),
                          choice_bias ? NULL : tensor(r, op->b), n, r->D, r->E, s));
    const kvcal_moe_route_params route = {r->E,
                                          r->K,
                                          d->moe_sigmoid,
                                          choice_bias ? tensor(r, op->b) : NULL,
                                          d->moe_groups,
                                          d->moe_topk_groups,
                                          d->moe_group_max,
                                          d->norm_topk_prob,
                                          d->routed_scale};
    TRY(kvcal_moe_route_grouped_launch(r->route_e, r->route_w, r->router, r->pos, n,
                                       &route, s));
    TRY(kvcal_moe_align_launch(&plan, r->route_e, n * r->K, r->E, counts, s));
    if (route_only)
        return KVCAL_OK;
    const kvcal_bf16 *b_gu = tensor(r, KVCAL_W_EXPERT_GATE_UP_BIAS),
                     *b_down = tensor(r, KVCAL_W_EXPERT_DOWN_BIAS);
    const kvcal_bf16 *w_gu = tensor(r, KVCAL_W_EXPERT_GATE_UP),
                     *w_down = tensor(r, KVCAL_W_EXPERT_DOWN), *x_gu = x;
    if (r->moe_wd) { /* FP8 experts: bf16 copies, inputs quantized as served */
        TRY(step(r, "moe FP8 dequantize"));
        TRY(kvcal_cuda_moe_fp8_weights(r));
        w_gu = r->moe_w[0] ? r->moe_w[0] : w_gu;
        w_down = r->moe_w[1] ? r->moe_w[1] : w_down;
        if (kvcal_cuda_moe_fp8_quantizes(r, KVCAL_W_EXPERT_GATE_UP) &&
            !d->moe_input_weighted) {
            TRY(step(r, "moe FP8 gate_up input"));
            TRY(kvcal_cuda_moe_fp8_input(r, KVCAL_W_EXPERT_GATE_UP, r->moe_xd, x, n,
                                         r->D));
            x_gu = r->moe_xd;
        }
    }
    const int quant_down = kvcal_cuda_moe_fp8_quantizes(r, KVCAL_W_EXPERT_DOWN);
    /* the gate/up's rows: gathered from the tokens' by its GEMM, or, where
       the routing weight scales an expert's input (Llama 4's), gathered
       and weighted apart into moe_y (free until the down GEMM writes it),
       the combine then weighting nothing; FP8 experts' rows quantized
       after their weighting, as vLLM's fused MoE with
       apply_router_weight_on_input quantizes them */
    int gather = r->K;
    if (d->moe_input_weighted) {
        TRY(step(r, "moe weighted gather"));
        TRY(kvcal_moe_gather_launch(r->moe_y, x_gu, &plan, r->K, r->D, r->route_w, s));
        x_gu = r->moe_y;
        gather = 0;
        if (r->moe_wd && kvcal_cuda_moe_fp8_quantizes(r, KVCAL_W_EXPERT_GATE_UP)) {
            TRY(step(r, "moe FP8 gate_up input"));
            TRY(kvcal_cuda_moe_fp8_input(r, KVCAL_W_EXPERT_GATE_UP, r->moe_y, r->moe_y,
                                         plan.capacity, r->D));
        }
    }
    if (r->moe_sm90) {
        /* Hopper: the bias (gpt-oss's) and the SwiGLU in the GEMMs' epilogues */
        const kvcal_moe_epilogue_args gu = {b_gu, d->swiglu_alpha, d->swiglu_limit},
                                      down = {b_down, 0.0f, 0.0f};
        TRY(step(r, "moe experts gate_up"));
        TRY(kvcal_moe_gemm_sm90_launch(
            r->moe_act, x_gu, gather, w_gu, &plan, r->E, r->D, r->MI,
            d->swiglu_limit > 0.0f ? KVCAL_MOE_EPI_SWIGLU_OAI : KVCAL_MOE_EPI_SWIGLU, &gu,
            s));
        if (quant_down) {
            TRY(step(r, "moe FP8 down input"));
            TRY(kvcal_cuda_moe_fp8_input(r, KVCAL_W_EXPERT_DOWN, r->moe_act, r->moe_act,
                                         plan.capacity, r->MI));
        }
        TRY(step(r, "moe experts down"));
        TRY(kvcal_moe_gemm_sm90_launch(r->moe_y, r->moe_act, 0, w_down, &plan, r->E,
                                       r->MI, r->D, KVCAL_MOE_EPI_STORE, &down, s));
    } else {
        TRY(step(r, "moe experts gate_up"));
        TRY(kvcal_moe_gemm_launch(r->moe_gu, x_gu, gather, w_gu, &plan, r->D, 2 * r->MI,
                                  s));
        if (b_gu)
            TRY(kvcal_moe_bias_launch(r->moe_gu, b_gu, &plan, 2 * r->MI, s));
        if (d->swiglu_limit > 0.0f)
            TRY(kvcal_swiglu_oai_launch(r->moe_act, r->moe_gu, plan.capacity, r->MI,
                                        d->swiglu_alpha, d->swiglu_limit, s));
        else
            TRY(kvcal_swiglu_launch(r->moe_act, r->moe_gu, plan.capacity, r->MI, s));
        if (quant_down) {
            TRY(step(r, "moe FP8 down input"));
            TRY(kvcal_cuda_moe_fp8_input(r, KVCAL_W_EXPERT_DOWN, r->moe_act, r->moe_act,
                                         plan.capacity, r->MI));
        }
        TRY(step(r, "moe experts down"));
        TRY(kvcal_moe_gemm_launch(r->moe_y, r->moe_act, 0, w_down, &plan, r->MI, r->D,
                                  s));
        if (b_down)
            TRY(kvcal_moe_bias_launch(r->moe_y, b_down, &plan, r->D, s));
    }
    if (r->SI) {
        TRY(step(r, "moe shared expert"));
        if (r->shared_fused)
            TRY(kvcal_gemm_swiglu_launch(
                r->shared_act, x, tensor(r, KVCAL_W_SHARED_GATE_UP), n, r->D, r->SI, s));
        else {
            TRY(project(r, r->shared_gu, x, KVCAL_W_SHARED_GATE_UP, 0, NULL, n, r->D,
                        2 * r->SI));
            TRY(kvcal_swiglu_launch(r->shared_act, r->shared_gu, n, r->SI, s));
        }
        TRY(project(r, r->shared_y, r->shared_act, KVCAL_W_SHARED_DOWN, 0, NULL, n, r->SI,
                    r->D));
    }
    TRY(step(r, "moe combine"));
    /* into the residual stream where the next add + RMSNorm would add it */
    const int fold = fold_residual(r, op);
    /* and the next layer's add + RMSNorm into delta, which it leaves unused */
    const kvcal_bf16 *next_w = fold ? norm_ahead(r) : NULL;
    const kvcal_combine_norm next = {r->delta, next_w, r->eps};
    TRY(kvcal_moe_combine_launch(fold ? r->resid : act(r, op->out), r->moe_y,
                                 plan.slot_of, d->moe_input_weighted ? NULL : r->route_w,
                                 r->pos, n, r->K, r->D, r->SI ? r->shared_y : NULL, x,
                                 r->SI ? tensor(r, KVCAL_W_SHARED_GATE) : NULL, fold,
                                 next_w ? &next : NULL, s));
    r->cur->delta_added = fold;
    r->cur->norm_ahead = next_w != NULL;
    return KVCAL_OK;
fail:
    return st;
}

// --- multi-head latent attention ----------------------------------------------------

static kvcal_status mla_latent(kvcal_backend *be, const kvcal_op *op, int need_q,
                               int observe)
{
    cuda_backend *r = cu(be);
    const kvcal_mla_cfg cfg = {r->H,
                               r->qkd,
                               r->kvr,
                               r->rope,
                               tensor(r, op->w),
                               r->eps,
                               r->inv_freq,
                               r->attention_factor};
    kvcal_kv_observer obs;
    if (observe >= 0 && r->stats)
        obs = observer_of(r, observe);
    return kvcal_mla_latent_launch(
        act(r, op->out), r->hd, need_q ? r->mq : NULL, (int64_t)r->H * r->qkd, r->pos,
        r->batch * r->seq_len, &cfg, observe >= 0 && r->stats ? &obs : NULL, r->stream);
}

/* K and V of every head from the entry (what the cache gives back). A bf16
 * kv_b_proj whose rows are a head's [V; no-RoPE] (lay.kv_b_v_first) reads
 * the latent in place (the entry's first kvr values) as one batched GEMM,
 * a head a batch, into kvb's heads of [V | K's no-RoPE part | K's RoPE
 * part], the entry's RoPE part then copied into each head's K. Otherwise
 * kv_b_proj whole into kvb (N, H, nope + vh) (an FP8 one quantizing a
 * contiguous copy of the latent, in mv until attend needs that), then K
 * expanded from it; V stays inside kvb until attend pads it, where it
 * must. */
static kvcal_status expand(cuda_backend *r)
{
    kvcal_status st = KVCAL_OK;
    const int n = r->batch * r->seq_len, kvw = r->nope + r->vh, kvb_n = r->H * kvw;
    const size_t e = sizeof(kvcal_bf16);
    const kvcal_bf16 *w = tensor(r, KVCAL_W_KV_B); /* (H * kvw, kvr) */
    if (r->lay.kv_b_v_first) {
        const int head = r->vh + r->qkd;
        TRY(kvcal_gemm_batched_launch(r->gemm, r->kvb, (int64_t)r->H * head, head,
                                      r->latent, r->hd, w, (int64_t)kvw * r->kvr, n,
                                      r->kvr, kvw, r->H, r->stream));
        return kvcal_mla_expand_rope_launch(r->kvb + r->vh, head, r->latent, r->hd, n,
                                            r->H, r->nope, r->kvr, r->rope, r->stream);
    }
    if (r->lay.fp8[KVCAL_W_KV_B].w == KVCAL_FP8W_NONE) {
        TRY(kvcal_gemm_launch_ld(r->gemm, r->kvb, r->latent, r->hd, w, NULL, n, r->kvr,
                                 kvb_n, r->stream));
    } else {
        TRY_CUDA(cudaMemcpy2DAsync(r->mv, r->kvr * e, r->latent, r->hd * e, r->kvr * e,
                                   (size_t)n, cudaMemcpyDeviceToDevice, r->stream));
        TRY(project(r, r->kvb, r->mv, KVCAL_W_KV_B, 0, NULL, n, r->kvr, kvb_n));
    }
    TRY(kvcal_mla_expand_launch(r->mk, NULL, r->qkd, r->kvb, r->latent, r->hd, n, r->H,
                                r->nope, r->vh, r->kvr, r->rope, r->stream));
fail:
    return st;
}

static kvcal_status mla_expand(kvcal_backend *be, const kvcal_op *op)
{
    (void)op; /* its weight is KVCAL_W_KV_B */
    return expand(cu(be));
}

/* The attention's output times sigmoid of its gate (Qwen3-Next's, Qwen3.5's). */
static kvcal_status sigmoid_gate(kvcal_backend *be, const kvcal_op *op)
{
    cuda_backend *r = cu(be);
    return kvcal_sigmoid_gate_launch(act(r, op->out), act(r, op->in),
                                     (int64_t)r->batch * r->seq_len * r->H * r->hd,
                                     r->stream);
}

/* The gated delta-net of each sample of the batch, from a zero state. */
static kvcal_status gated_delta(kvcal_backend *be, const kvcal_op *op)
{
    cuda_backend *r = cu(be);
    const kvcal_model_desc *d = be->desc;
    const kvcal_gated_delta_params p = {d->lin_k_heads,
                                        d->lin_k_head_dim,
                                        d->lin_v_heads,
                                        d->lin_v_head_dim,
                                        d->lin_conv,
                                        d->norm_eps,
                                        tensor(r, op->w),
                                        tensor(r, KVCAL_W_LIN_A_LOG),
                                        tensor(r, KVCAL_W_LIN_DT_BIAS),
                                        tensor(r, KVCAL_W_LIN_NORM)};
    return kvcal_gated_delta_launch(act(r, op->out), r->lin_work, act(r, op->in),
                                    r->lin_ba, &p, r->batch, r->seq_len, r->stream);
}

/* (MLA: K and V expanded from the exact entry first) */
static kvcal_status sim_attend_exact(kvcal_backend *be, const kvcal_op *op)
{
    kvcal_status st = be->desc->mla ? expand(cu(be)) : KVCAL_OK;
    return st ? st : attend(cu(be), op, cu(be)->att0);
}

// --- observing ------------------------------------------------------------------

static kvcal_status observe_into(kvcal_backend *be, kvcal_stats_t *stats)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    r->stats = stats;
    TRY_CUDA(cudaMemsetAsync(r->absmax[0], 0, r->stats_bytes, r->stream));
    if (stats && !r->device_view)
        TRY(kvcal_stats_create(r->L, r->HKV, r->hd, &r->device_view));
    if (stats) {
        TRY(kvcal_stats_set_experts(r->device_view,
                                    stats->num_experts == r->E ? r->E : 0));
        TRY(kvcal_stats_set_q_heads(r->device_view, stats->q_absmax ? r->H : 0));
        TRY(kvcal_stats_set_range(r->device_view, stats->min[0] != NULL));
    }
    return KVCAL_OK;
fail:
    return st;
}

static kvcal_status batch_absmax(kvcal_backend *be, int slot, float *k, float *v)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    cudaStream_t s = r->stream;
    const size_t LH = (size_t)r->L * r->HKV;
    if (slot < 0 || slot >= r->nslots)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "cuda runner: slot %d of %d", slot,
                          r->nslots);
    const cuda_slot *sl = &r->slot[slot];
    TRY_CUDA(cudaMemcpyAsync(r->host_bmax, sl->bmax, 2 * LH * sizeof(float),
                             cudaMemcpyDeviceToHost, s));
    TRY_CUDA(cudaMemsetAsync(sl->bmax, 0, 2 * LH * sizeof(float), s));
    TRY_CUDA(cudaStreamSynchronize(s));
    for (int kv = 0; kv < 2; kv++)
        for (size_t i = 0; i < LH; i++) {
            const float m = r->host_bmax[kv * LH + i];
            if (!isfinite(m))
                return kvcal_fail(
                    KVCAL_ERR_NONFINITE,
                    "layer %d %c kv head %d: %s in the batch of samples %lld..%lld "
                    "(--device cpu names the token)",
                    (int)(i / r->HKV), kv ? 'V' : 'K', (int)(i % r->HKV),
                    isnan(m) ? "NaN" : "Inf", (long long)sl->names[0],
                    (long long)sl->names[sl->batch - 1]);
            (kv ? v : k)[i] = m;
        }
    return KVCAL_OK;
fail:
    return st;
}

static kvcal_status sync_device(kvcal_backend *be)
{
    kvcal_status st = KVCAL_OK;
    TRY_CUDA(cudaStreamSynchronize(cu(be)->stream));
fail:
    return st;
}

static kvcal_status collect(kvcal_backend *be)
{
    kvcal_status st = KVCAL_OK;
    cuda_backend *r = cu(be);
    kvcal_stats_t *v = r->device_view;
    const size_t n_am = (size_t)r->L * r->HKV * r->hd;
    const size_t n_h = (size_t)r->L * r->HKV * KVCAL_HIST_BINS;
    kvcal_stats_reset(v);
    for (int kv = 0; kv < 2; kv++) {
        TRY_CUDA(cudaMemcpyAsync(v->absmax[kv], r->absmax[kv], n_am * sizeof(float),
                                 cudaMemcpyDeviceToHost, r->stream));
        TRY_CUDA(cudaMemcpyAsync(v->hist[kv], r->hist[kv], n_h * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, r->stream));
    }
    if (v->num_experts) /* the device's unsigned counts, int64 on the host */
        TRY_CUDA(cudaMemcpyAsync(v->expert_tokens, r->expert_tokens,
                                 (size_t)r->L * r->E * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, r->stream));
    if (v->q_absmax)
        TRY_CUDA(cudaMemcpyAsync(v->q_absmax, r->q_absmax,
                                 (size_t)r->L * r->H * sizeof(float),
                                 cudaMemcpyDeviceToHost, r->stream));
    const size_t lc = (size_t)r->L * r->HKV * r->hd;
    for (int kv = 0; v->min[0] && kv < 2; kv++) {
        TRY_CUDA(cudaMemcpyAsync(v->max[kv], r->range + 2 * kv * lc, lc * sizeof(float),
                                 cudaMemcpyDeviceToHost, r->stream));
        TRY_CUDA(cudaMemcpyAsync(v->min[kv], r->range + (2 * kv + 1) * lc,
                                 lc * sizeof(float), cudaMemcpyDeviceToHost, r->stream));
    }
    TRY_CUDA(cudaMemsetAsync(r->absmax[0], 0, r->stats_bytes, r->stream));
    TRY_CUDA(cudaStreamSynchronize(r->stream));
    for (size_t i = 0; v->min[0] && i < lc; i++) /* the device keeps max(-x, 0) */
        v->min[0][i] = -v->min[0][i], v->min[1][i] = -v->min[1][i];
    return kvcal_stats_merge(r->stats, v);
fail:
    return st;
}

static kvcal_status read_qkv(kvcal_backend *be, const float **q, const float **k,
                             const float **v)
{
    (void)be, (void)q, (void)k, (void)v;
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                      "cuda runner: Q, K and V are not handed to the host (a tap runs on "
                      "the cpu backend)");
}

// --- lifetime ---------------------------------------------------------------------

static void destroy(kvcal_backend *be)
{
    cuda_backend *r = cu(be);
    if (!r)
        return;
    for (int i = 0; i < r->marks_cap; i++)
        cudaEventDestroy(r->mark_ev[i]);
    free(r->mark_ev);
    free(r->mark_label);
    kvcal_cuda_sim_release(be);
    kvcal_cuda_ref_release(r);
    kvcal_cuda_loader_destroy(r->loader);
    kvcal_gemm_destroy(r->gemm);
    kvcal_attention_destroy(r->attn);
    cudaFree(r->slab);
    cudaFree(r->head_slab);
    free_slots(r);
    cudaFreeHost(r->host_bmax);
    if (r->stream)
        cudaStreamDestroy(r->stream);
    kvcal_stats_destroy(r->device_view);
    free(r->default_names);
    free(r);
}

static void load_stats(kvcal_backend *be, kvcal_load_stats *out)
{
    kvcal_cuda_loader_stats(cu(be)->loader, out);
}

const kvcal_backend_ops kvcal_cuda_ops = {
    .name = "cuda",
    .warm_up = 1,
    .destroy = destroy,
    .load_stats = load_stats,
    .slots = slots,
    .max_slots = max_slots,
    .begin_batch = begin_batch,
    .select_batch = select_batch,
    .use_layer = use_layer,
    .add_rmsnorm = add_rmsnorm,
    .linear = linear,
    .qk_norm_rope = qk_norm_rope,
    .attention = attention,
    .swiglu = swiglu,
    .moe = moe,
    .rmsnorm = rmsnorm,
    .geglu = geglu,
    .mla_latent = mla_latent,
    .mla_expand = mla_expand,
    .sigmoid_gate = sigmoid_gate,
    .gated_delta = gated_delta,
    .profile_mark = profile_mark,
    .profile_take = profile_take,
    .observe_into = observe_into,
    .batch_absmax = batch_absmax,
    .sync = sync_device,
    .collect = collect,
    .read_qkv = read_qkv,
    .head_prepare = kvcal_cuda_head_prepare,
    .head_nll = kvcal_cuda_head_nll,
    .head_reference = kvcal_cuda_head_reference,
    .sim_prepare = kvcal_cuda_sim_prepare,
    .sim_view = kvcal_cuda_sim_view,
    .sim_upload = kvcal_cuda_sim_upload,
    .sim_attend_exact = sim_attend_exact,
    .sim_roundtrip = kvcal_cuda_sim_roundtrip,
    .sim_ds_mla = kvcal_cuda_sim_ds_mla,
    .sim_q_roundtrip = kvcal_cuda_sim_q_roundtrip,
    .sim_attention_error = kvcal_cuda_sim_attention_error,
    .sim_collect = kvcal_cuda_sim_collect,
    .sim_release = kvcal_cuda_sim_release,
};
