/* calib/loader_cuda.c: the cuda backend's weight loader (see loader_cuda.h). */
#include "calib/loader_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calib/task_pool.h"
#include "core/status.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_transpose.h"

/* A staging piece: what one copy moves (bytes, unless the backend's
 * options name another size); PIECES of them rotate. */
#define PIECE_BYTES ((size_t)32 << 20)
#define PIECES 4
/* Values a job converts at most (so a piece splits over the threads). */
#define JOB_VALUES ((size_t)1 << 19)
#define MAX_THREADS 32

#define TRY_CUDA(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            st = kvcal_fail(KVCAL_ERR_CUDA, "weight loader: %s: %s", #call,              \
                            cudaGetErrorString(e_));                                     \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

/* n values of src from its value `first` on at dst_off of a layer (or of
 * a tensor) laid out on the device: out_size 2, converted to bf16;
 * out_size 1, bytes copied (src a U8 view; through map where it is not
 * NULL: FP8 weights, their scales). */
typedef struct {
    size_t dst_off; /* bytes */
    kvcal_tensor_view src;
    int64_t first;
    size_t n;
    size_t out_size;
    const uint8_t *map; /* (256) or NULL */
} job;

/* A bf16 part stored transposed (an (in, out) tensor): its bytes go to
 * the device as they lie, a band at a time, and are transposed there into
 * dst_off (copy_transposed), no host gather per value. */
typedef struct {
    size_t dst_off; /* bytes */
    kvcal_tensor_view src;
} transposed;

/* Jobs in destination order (copy_jobs moves each piece once), the
 * transposed parts, and the host data of a layer's FP8 weights they read. */
typedef struct {
    job *j;
    size_t n, cap;
    transposed *t;
    size_t nt, tcap;
    size_t piece;         /* bytes of a piece: no job crosses a piece's end */
    kvcal_fp8_parts *fp8; /* each copy of every FP8 weight (an expert each) */
    size_t fp8_cap;
    float *scales; /* every FP8 weight's scales and input scale */
    size_t scales_cap;
} job_list;

/* Where a staged piece goes once filled: its bytes to dst (device); a band
 * of a transposed part (copy_transposed) is transposed from there into its
 * place (to) after its copy. */
typedef struct {
    unsigned char *dst;
    size_t bytes;
    kvcal_bf16 *to; /* NULL: no transpose */
    int64_t C, nc, ns, c0, s0, half;
} piece_send;

/* A piece's fill: its jobs into buf, a job a task-pool job. */
typedef struct {
    const job *j;
    unsigned char *buf;
    size_t bytes;
} piece_fill;

/* Pinned pieces that rotate: the host threads (pool) fill up to PIECES - 1
 * of them while the copy stream moves the one filled before; each piece's
 * fill task, its send and its copy's event; the jobs of a band staged in
 * it (copy_transposed builds them per band). The loader thread's seconds
 * waiting for fills and for a piece's last copy, and the bytes sent. */
typedef struct {
    unsigned char *buf[PIECES];
    cudaEvent_t done[PIECES];
    piece_fill fill[PIECES];
    kvcal_task task[PIECES];
    piece_send send[PIECES];
    job_list band_jobs[PIECES];
    kvcal_task_pool_t *pool; /* borrowed */
    size_t bytes;            /* of each */
    int next;                /* the piece staged next */
    int pending;             /* staged, not sent: the `pending` pieces before next */
    double fill_s, wait_s;
    size_t sent;
} pieces;

struct kvcal_cuda_loader {
    kvcal_model_t *model;
    kvcal_cuda_layer_layout lay;
    unsigned char *slots; /* (nslots, lay.bytes) device */
    unsigned char *band;  /* (band_bytes) device: a transposed part's band; or NULL */
    size_t band_bytes;
    int nslots, layers, device;
    size_t piece_bytes;
    cudaStream_t copy;
    kvcal_task_pool_t *pool; /* the threads that fill pieces */
    pieces p;
    cudaEvent_t *ready, *release; /* (nslots) */
    int *slot_layer, *slot_want;  /* (nslots) layer on the device / asked for */
    int *queue;                   /* (layers) layers to load, in order */
    int q_head, q_tail, q_len;
    int loaded; /* layers loaded the first time */
    double t0, t_all;
    kvcal_load_stats stats; /* under mu, after each layer */
    pthread_t thread;
    int running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    kvcal_status error;
    char message[512];
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

// --- jobs: what goes where ---------------------------------------------------

static int push_job(job_list *l, size_t dst_off, const kvcal_tensor_view *src,
                    int64_t first, size_t n, size_t out_size, const uint8_t *map)
{
    while (n) {
        /* a job ends at a piece boundary and at JOB_VALUES */
        size_t room = (l->piece - dst_off % l->piece) / out_size;
        size_t take = n < room ? n : room;
        take = take < JOB_VALUES ? take : JOB_VALUES;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 256;
            job *j = realloc(l->j, cap * sizeof *j);
            if (!j)
                return -1;
            l->j = j, l->cap = cap;
        }
        l->j[l->n++] = (job){dst_off, *src, first, take, out_size, map};
        dst_off += take * out_size;
        first += (int64_t)take;
        n -= take;
    }
    return 0;
}

/* Whether the device transposes part v (a bf16 tensor stored (cols, rows)). */
static int device_transposed(const kvcal_tensor_view *v)
{
    return v->dtype == KVCAL_DTYPE_BF16 && (v->layout & KVCAL_PART_TRANSPOSED) &&
           !(v->layout & KVCAL_PART_MXFP4);
}

static int push_transposed(job_list *l, size_t dst_off, const kvcal_tensor_view *src)
{
    if (l->nt == l->tcap) {
        size_t cap = l->tcap ? 2 * l->tcap : 64;
        transposed *t = realloc(l->t, cap * sizeof *t);
        if (!t)
            return -1;
        l->t = t, l->tcap = cap;
    }
    l->t[l->nt++] = (transposed){dst_off, *src};
    return 0;
}

/* n bytes at p as a view of U8 values. */
static kvcal_tensor_view bytes_view(const void *p, int64_t n)
{
    return (kvcal_tensor_view){
        .data = p, .dtype = KVCAL_DTYPE_U8, .numel = n, .rows = n, .cols = 1};
}

/* The jobs of FP8 weight w of layer l: its bytes (mapped as the engine
 * requantizes them), its scales, its input scale (sc: room for them); a
 * per-expert weight's experts one after another, each with its own scales,
 * one input scale for all (the largest: vLLM's w13_input_scale.max()).
 * parts: room for the weight's copies (their maps outlive the call). */
/* A gate/up weight in the fused kernels' order (kvcal_gemm_swiglu_source_row)
 * at off: runs of 128 rows of D values of elem bytes from [gate; up] (part:
 * two tensors, or n 1: one fused), each through maps[i] where not NULL;
 * the last gate and up runs shorter where I is not a multiple of 128 (the
 * padding is not loaded: what it holds never reaches an output). Nonzero
 * where a job could not be queued. */
static int interleaved_jobs(job_list *out, size_t off, int I, int D,
                            const kvcal_tensor_view *part, int n, size_t elem,
                            const uint8_t *const *maps)
{
    int fail = 0;
    for (int r = 0; r < kvcal_gemm_swiglu_rows(I); r += 128) {
        const int src = kvcal_gemm_swiglu_source_row(r, I);
        const int end = src < I ? I : 2 * I, run = end - src < 128 ? end - src : 128;
        const int i = n == 1 || src < I ? 0 : 1;
        const int64_t row = n == 1 || src < I ? src : src - I;
        fail |= push_job(out, off + (size_t)r * D * elem, &part[i], row * D,
                         (size_t)run * D, elem, maps ? maps[i] : NULL);
    }
    return fail;
}

/* kv_b_proj's bf16 rows at off with each head's [V; no-RoPE] (the
 * layout's kv_b_v_first) from part, which holds them [no-RoPE; V] a head.
 * Nonzero where a job could not be queued. */
static int kv_b_v_first_jobs(job_list *out, size_t off, const kvcal_tensor_view *part,
                             const kvcal_model_desc *d)
{
    const int nope = d->qk_nope_head_dim, vh = d->v_head_dim, kvw = nope + vh;
    const size_t cols = (size_t)d->kv_lora_rank, e = sizeof(kvcal_bf16);
    int fail = 0;
    for (int h = 0; h < d->num_heads; h++) {
        const size_t head = off + (size_t)h * kvw * cols * e;
        const int64_t src = (int64_t)h * kvw * (int64_t)cols;
        fail |= push_job(out, head, part, src + (int64_t)nope * (int64_t)cols, vh * cols,
                         e, NULL);
        fail |= push_job(out, head + vh * cols * e, part, src, nope * cols, e, NULL);
    }
    return fail;
}

/* interleaved_jobs of an FP8 weight's bytes (p: one copy) */
static int fp8_interleaved_jobs(const kvcal_cuda_loader_t *ld, kvcal_weight w,
                                const kvcal_fp8_parts *p, size_t off, job_list *out)
{
    kvcal_tensor_view v[KVCAL_WEIGHT_PARTS_MAX];
    const uint8_t *maps[KVCAL_WEIGHT_PARTS_MAX];
    for (int i = 0; i < p->n; i++) {
        v[i] = bytes_view(p->part[i].data, p->part[i].numel);
        maps[i] = p->mapped ? p->map[i] : NULL;
    }
    return interleaved_jobs(out, off, ld->lay.interleaved[w],
                            kvcal_model_describe(ld->model)->hidden_size, v, p->n, 1, maps);
}

/* The jobs of an FP8 part's bytes at off (map: NULL or the requantization
 * they go through): a part that regroups its tensor's rows (a gated
 * q_proj's halves, Qwen3-Next's projections by key head) in runs of the
 * rows it takes in order (kvcal_tensor_view_row); else the tensor whole.
 * *bytes: what it places. Nonzero where a job could not be queued. */
static int fp8_part_jobs(job_list *out, size_t off, const kvcal_tensor_view *v,
                         const uint8_t *map, size_t *bytes)
{
    const kvcal_tensor_view all = bytes_view(v->data, v->numel);
    if (!v->groups) {
        *bytes = (size_t)v->numel;
        return push_job(out, off, &all, 0, (size_t)v->numel, 1, map);
    }
    int fail = 0;
    for (int64_t r = 0, run; r < v->rows; r += run) {
        const int64_t src = kvcal_tensor_view_row(v, r);
        for (run = 1;
             r + run < v->rows && kvcal_tensor_view_row(v, r + run) == src + run;)
            run++;
        fail |= push_job(out, off + (size_t)(r * v->cols), &all, src * v->cols,
                         (size_t)(run * v->cols), 1, map);
    }
    *bytes = (size_t)(v->rows * v->cols);
    return fail;
}

static kvcal_status fp8_jobs(const kvcal_cuda_loader_t *ld, int l, kvcal_weight w,
                             job_list *out, float *sc, kvcal_fp8_parts *parts)
{
    const kvcal_model_desc *d = kvcal_model_describe(ld->model);
    const int copies = kvcal_model_weight_copies(d, w);
    const size_t count = (size_t)kvcal_model_fp8_scales(d, w), per = count / copies;
    size_t off = ld->lay.off[w];
    float input = 0.0f;
    int fail = 0;
    for (int e = 0; e < copies; e++) {
        kvcal_fp8_parts *p = &parts[e];
        kvcal_status st = kvcal_model_fp8_weight(ld->model, l, w, e, p, sc + e * per);
        if (st)
            return st;
        input = p->input_scale > input ? p->input_scale : input;
        if (ld->lay.interleaved[w]) { /* the fused FP8 kernel's order (one copy) */
            fail |= fp8_interleaved_jobs(ld, w, p, off, out);
            continue;
        }
        for (int i = 0; i < p->n; i++) {
            size_t bytes = 0;
            fail |= fp8_part_jobs(out, off, &p->part[i], p->mapped ? p->map[i] : NULL,
                                  &bytes);
            off += bytes;
        }
    }
    sc[count] = input;
    const kvcal_tensor_view scales = bytes_view(sc, (int64_t)(count * sizeof(float))),
                            in = bytes_view(sc + count, (int64_t)sizeof(float));
    fail |=
        push_job(out, ld->lay.scale_off[w], &scales, 0, (size_t)scales.numel, 1, NULL);
    fail |= push_job(out, ld->lay.input_off[w], &in, 0, (size_t)in.numel, 1, NULL);
    return fail ? kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory") : KVCAL_OK;
}

static int by_dst_off(const void *a, const void *b)
{
    const size_t x = ((const job *)a)->dst_off, y = ((const job *)b)->dst_off;
    return (x > y) - (x < y);
}

/* The jobs of layer l, in destination order (the layout need not place
 * the weights in the order of their enum). */
static kvcal_status layer_jobs(const kvcal_cuda_loader_t *ld, int l, job_list *out)
{
    const kvcal_model_desc *d = kvcal_model_describe(ld->model);
    out->n = out->nt = 0;
    out->piece = ld->piece_bytes;
    /* the host floats of the layer's FP8 weights, their scales and input scale */
    size_t floats = 0, copies = 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        if (ld->lay.fp8[w].w == KVCAL_FP8W_NONE)
            continue;
        floats += (size_t)kvcal_model_fp8_scales(d, w) + 1;
        copies += (size_t)kvcal_model_weight_copies(d, w);
    }
    if (floats > out->scales_cap) {
        float *sc = realloc(out->scales, floats * sizeof(float));
        if (!sc)
            return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
        out->scales = sc, out->scales_cap = floats;
    }
    if (copies > out->fp8_cap) {
        kvcal_fp8_parts *p = realloc(out->fp8, copies * sizeof *p);
        if (!p)
            return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
        out->fp8 = p, out->fp8_cap = copies;
    }
    float *sc = out->scales;
    kvcal_fp8_parts *parts = out->fp8;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        if (!ld->lay.elems[w])
            continue;
        if (ld->lay.fp8[w].w != KVCAL_FP8W_NONE) {
            if (!kvcal_model_layer_has_weight(d, l, w))
                continue;
            kvcal_status st = fp8_jobs(ld, l, w, out, sc, parts);
            if (st)
                return st;
            sc += kvcal_model_fp8_scales(d, w) + 1;
            parts += kvcal_model_weight_copies(d, w);
            continue;
        }
        kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
        int n = 0;
        kvcal_status st = kvcal_model_weight_parts(ld->model, l, w, 0, part, &n);
        if (st)
            return st;
        if (!n) /* a weight of other layers than this one (GLM's dense MLP) */
            continue;
        size_t off = ld->lay.off[w];
        if (w == KVCAL_W_KV_B && ld->lay.kv_b_v_first) {
            if (n != 1) /* every MLA family's is one tensor (calib/arch_deepseek.c) */
                return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                                  "weight loader: kv_b_proj in %d tensors, not one", n);
            if (kv_b_v_first_jobs(out, off, &part[0], d))
                return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
            continue;
        }
        if (ld->lay.interleaved[w]) {
            if (interleaved_jobs(out, off, ld->lay.interleaved[w], d->hidden_size, part,
                                 n, sizeof(kvcal_bf16), NULL))
                return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
            continue;
        }
        /* the experts of a per-expert weight one after another */
        for (int e = 0; e < kvcal_model_weight_copies(d, w); e++) {
            if (e > 0 && (st = kvcal_model_weight_parts(ld->model, l, w, e, part, &n)))
                return st;
            for (int i = 0; i < n; i++) {
                if (ld->band && device_transposed(&part[i])
                        ? push_transposed(out, off, &part[i])
                        : push_job(out, off, &part[i], 0, (size_t)part[i].numel,
                                   sizeof(kvcal_bf16), NULL))
                    return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
                off += (size_t)part[i].numel * sizeof(kvcal_bf16);
            }
        }
    }
    qsort(out->j, out->n, sizeof *out->j, by_dst_off);
    return KVCAL_OK;
}

// --- filling pieces on threads ----------------------------------------------------

/* One job into its piece (the piece's start is the job's piece). */
static void run_job(const job *j, unsigned char *piece, size_t piece_bytes)
{
    if (j->out_size == 1) {
        uint8_t *to = piece + j->dst_off % piece_bytes;
        const uint8_t *from = (const uint8_t *)j->src.data + j->first;
        if (!j->map)
            memcpy(to, from, j->n);
        for (size_t i = 0; j->map && i < j->n; i++)
            to[i] = j->map[from[i]];
        return;
    }
    kvcal_bf16 *dst = (kvcal_bf16 *)(piece + j->dst_off % piece_bytes);
    if (j->src.dtype == KVCAL_DTYPE_BF16 && !j->src.layout) {
        memcpy(dst,
               (const unsigned char *)j->src.data + (size_t)j->first * sizeof(kvcal_bf16),
               j->n * sizeof(kvcal_bf16));
        return;
    }
    /* through float32, as the model's conversion does: the same values (the
     * dtypes were checked when the model was opened: no conversion fails) */
    float buf[4096];
    for (size_t i = 0; i < j->n; i += 4096) {
        const size_t m = j->n - i < 4096 ? j->n - i : 4096;
        kvcal_tensor_view_to_f32(&j->src, j->first + (int64_t)i, (int64_t)m, buf);
        for (size_t k = 0; k < m; k++)
            dst[i + k] = kvcal_bf16_from_float(buf[k]);
    }
}

/* A piece's job i (a task-pool job). */
static void fill_job(void *ctx, size_t i)
{
    const piece_fill *f = ctx;
    run_job(&f->j[i], f->buf, f->bytes);
}

/* Sends the oldest staged piece once its fill is done: its copy, its
 * band's transpose, its event. */
static kvcal_status send_oldest(pieces *p, cudaStream_t stream)
{
    kvcal_status st = KVCAL_OK;
    const int b = (p->next - p->pending + PIECES) % PIECES;
    const double t0 = now_s();
    kvcal_task_wait(p->pool, &p->task[b]);
    p->fill_s += now_s() - t0;
    p->pending--;
    const piece_send *s = &p->send[b];
    TRY_CUDA(
        cudaMemcpyAsync(s->dst, p->buf[b], s->bytes, cudaMemcpyHostToDevice, stream));
    if (s->to &&
        (st = kvcal_weight_transpose_launch(s->to, s->C, (const kvcal_bf16 *)s->dst,
                                            s->nc, s->ns, s->c0, s->s0, s->half, stream)))
        return st;
    TRY_CUDA(cudaEventRecord(p->done[b], stream));
    p->sent += s->bytes;
fail:
    return st;
}

/* Every staged piece sent. */
static kvcal_status send_all(pieces *p, cudaStream_t stream)
{
    kvcal_status st = KVCAL_OK;
    while (!st && p->pending)
        st = send_oldest(p, stream);
    return st;
}

/* The staged pieces dropped once their fills are done (a load that
 * failed: its job lists are about to change). */
static void drop_staged(pieces *p)
{
    for (; p->pending; p->pending--)
        kvcal_task_wait(p->pool, &p->task[(p->next - p->pending + PIECES) % PIECES]);
}

/* The next piece to stage, free: the oldest staged piece sent where
 * PIECES - 1 are staged, and the piece's last copy done. */
static kvcal_status next_piece(pieces *p, cudaStream_t stream, int *b)
{
    kvcal_status st = KVCAL_OK;
    if (p->pending == PIECES - 1 && (st = send_oldest(p, stream)))
        return st;
    *b = p->next;
    const double t0 = now_s();
    TRY_CUDA(cudaEventSynchronize(p->done[*b]));
    p->wait_s += now_s() - t0;
fail:
    return st;
}

/* Piece b (next_piece's) to be filled by its n jobs on the pool's threads,
 * then sent as s says. */
static void stage(pieces *p, int b, const job *j, size_t n, piece_send s)
{
    p->fill[b] = (piece_fill){j, p->buf[b], p->bytes};
    p->task[b] = (kvcal_task){.run = fill_job, .ctx = &p->fill[b], .n = n};
    p->send[b] = s;
    kvcal_task_post(p->pool, &p->task[b]);
    p->next = (b + 1) % PIECES;
    p->pending++;
}

/* Every job through the pieces onto the device at base, on stream (the
 * last pieces may still be staged on return: send_all). */
static kvcal_status copy_jobs(const job_list *jobs, pieces *p, unsigned char *base,
                              cudaStream_t stream)
{
    kvcal_status st = KVCAL_OK;
    const size_t bytes = p->bytes;
    for (size_t i = 0; i < jobs->n;) {
        const size_t piece = jobs->j[i].dst_off / bytes;
        size_t e = i, hi = 0;
        for (; e < jobs->n && jobs->j[e].dst_off / bytes == piece; e++) {
            const size_t end =
                jobs->j[e].dst_off % bytes + jobs->j[e].n * jobs->j[e].out_size;
            hi = end > hi ? end : hi;
        }
        int b;
        if ((st = next_piece(p, stream, &b)))
            return st;
        stage(p, b, jobs->j + i, e - i,
              (piece_send){.dst = base + piece * bytes, .bytes = hi});
        i = e;
    }
    return st;
}

/* Every transposed part of jobs onto the device at base, on stream: bands
 * of its stored (cols, rows) matrix of at most band_bytes, whole stored
 * rows where one fits (one contiguous copy), copied as they lie through the
 * pieces into band (device) and transposed from there
 * (kvcal_weight_transpose_launch). The stream orders each band's copy
 * after the transpose of the one before. */
static kvcal_status copy_transposed(const job_list *jobs, pieces *p, unsigned char *band,
                                    size_t band_bytes, unsigned char *base,
                                    cudaStream_t stream)
{
    kvcal_status st = KVCAL_OK;
    const int64_t room = (int64_t)(band_bytes / sizeof(kvcal_bf16));
    for (size_t i = 0; !st && i < jobs->nt; i++) {
        const transposed *t = &jobs->t[i];
        const int64_t R = t->src.rows, C = t->src.cols; /* stored (C, R) */
        const int64_t bs = R < room ? R : room, bc = room / bs;
        const int64_t half = t->src.layout & KVCAL_PART_INTERLEAVED ? R / 2 : 0;
        const kvcal_tensor_view stored = {.data = t->src.data,
                                          .dtype = KVCAL_DTYPE_BF16,
                                          .numel = R * C,
                                          .rows = C,
                                          .cols = R};
        for (int64_t c0 = 0; !st && c0 < C; c0 += bc)
            for (int64_t s0 = 0; !st && s0 < R; s0 += bs) {
                const int64_t nc = C - c0 < bc ? C - c0 : bc,
                              ns = R - s0 < bs ? R - s0 : bs;
                int b;
                if ((st = next_piece(p, stream, &b)))
                    break;
                job_list *fills = &p->band_jobs[b];
                fills->n = 0;
                fills->piece = p->bytes;
                int fail = 0;
                if (ns == R) /* whole stored rows: one run */
                    fail = push_job(fills, 0, &stored, c0 * R, (size_t)(nc * R),
                                    sizeof(kvcal_bf16), NULL);
                for (int64_t c = 0; ns < R && c < nc; c++)
                    fail |=
                        push_job(fills, (size_t)(c * ns) * sizeof(kvcal_bf16), &stored,
                                 (c0 + c) * R + s0, (size_t)ns, sizeof(kvcal_bf16), NULL);
                if (fail) {
                    st = kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
                    break;
                }
                stage(p, b, fills->j, fills->n,
                      (piece_send){band, (size_t)(nc * ns) * sizeof(kvcal_bf16),
                                   (kvcal_bf16 *)(base + t->dst_off), C, nc, ns, c0, s0,
                                   half});
            }
    }
    return st;
}

/* Waits for the pieces' fills and copies, and frees them. */
static void pieces_free(pieces *p)
{
    for (int i = 0; i < PIECES; i++) {
        if (p->pool && p->task[i].n)
            kvcal_task_wait(p->pool, &p->task[i]);
        if (p->done[i]) {
            cudaEventSynchronize(p->done[i]);
            cudaEventDestroy(p->done[i]);
        }
        cudaFreeHost(p->buf[i]);
        free(p->band_jobs[i].j);
    }
    memset(p, 0, sizeof *p);
}

static kvcal_status pieces_alloc(pieces *p, size_t bytes, kvcal_task_pool_t *pool)
{
    kvcal_status st = KVCAL_OK;
    memset(p, 0, sizeof *p);
    p->bytes = bytes;
    p->pool = pool;
    for (int i = 0; i < PIECES; i++) {
        TRY_CUDA(cudaMallocHost((void **)&p->buf[i], bytes));
        TRY_CUDA(cudaEventCreateWithFlags(&p->done[i], cudaEventDisableTiming));
    }
    return KVCAL_OK;
fail:
    pieces_free(p);
    return st;
}

// --- the background thread -----------------------------------------------------

/* Loads layer l into slot s (after the slot's last reader is done): the
 * transposed parts after the other jobs, whose pieces' copies may cover
 * their places (the gaps between jobs) with the pieces' old bytes. */
static kvcal_status load_layer(kvcal_cuda_loader_t *ld, int l, int s, job_list *jobs)
{
    kvcal_status st = layer_jobs(ld, l, jobs);
    if (st)
        return st;
    TRY_CUDA(cudaStreamWaitEvent(ld->copy, ld->release[s], 0));
    unsigned char *slot = ld->slots + (size_t)s * ld->lay.bytes;
    if ((st = copy_jobs(jobs, &ld->p, slot, ld->copy)) ||
        (st = copy_transposed(jobs, &ld->p, ld->band, ld->band_bytes, slot, ld->copy)) ||
        (st = send_all(&ld->p, ld->copy))) {
        drop_staged(&ld->p);
        return st;
    }
    TRY_CUDA(cudaEventRecord(ld->ready[s], ld->copy));
fail:
    return st;
}

static void *loader_main(void *p)
{
    kvcal_cuda_loader_t *ld = p;
    job_list jobs = {.piece = ld->piece_bytes};
    cudaSetDevice(ld->device);
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->stop && ld->q_len == 0)
            pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->stop)
            break;
        const int l = ld->queue[ld->q_head];
        ld->q_head = (ld->q_head + 1) % ld->layers;
        ld->q_len--;
        const int s = l % ld->nslots;
        pthread_mutex_unlock(&ld->mu);
        kvcal_status st = load_layer(ld, l, s, &jobs);
        pthread_mutex_lock(&ld->mu);
        if (st && !ld->error) {
            ld->error = st;
            snprintf(ld->message, sizeof ld->message, "%s", kvcal_last_error());
        }
        ld->slot_layer[s] = l;
        if (++ld->loaded == ld->layers)
            ld->t_all = now_s() - ld->t0;
        ld->stats = (kvcal_load_stats){ld->t_all, ld->p.fill_s, ld->p.wait_s,
                                       (double)ld->p.sent, ld->loaded};
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    free(jobs.j);
    free(jobs.t);
    free(jobs.scales);
    free(jobs.fp8);
    return NULL;
}

/* Asks for layer l unless its slot holds it or will; under the lock. */
static void want(kvcal_cuda_loader_t *ld, int l)
{
    const int s = l % ld->nslots;
    if (ld->slot_want[s] == l)
        return;
    ld->slot_want[s] = l;
    ld->queue[(ld->q_head + ld->q_len) % ld->layers] = l;
    ld->q_len++;
    pthread_cond_broadcast(&ld->cv);
}

// --- public ---------------------------------------------------------------------

/* The bytes of the largest part of a layer the device transposes, or 0. */
static size_t transposed_bytes(const kvcal_cuda_loader_t *ld)
{
    size_t most = 0;
    for (int l = 0; l < ld->layers; l++)
        for (int w = 0; w < KVCAL_W_COUNT; w++) {
            kvcal_tensor_view part[KVCAL_WEIGHT_PARTS_MAX];
            int n = 0;
            if (!ld->lay.elems[w] || ld->lay.fp8[w].w != KVCAL_FP8W_NONE ||
                ld->lay.interleaved[w] ||
                kvcal_model_weight_parts(ld->model, l, w, 0, part, &n))
                continue;
            for (int i = 0; i < n; i++)
                if (device_transposed(&part[i]) &&
                    (size_t)part[i].numel * sizeof(kvcal_bf16) > most)
                    most = (size_t)part[i].numel * sizeof(kvcal_bf16);
        }
    return most;
}

kvcal_status kvcal_cuda_loader_create(kvcal_model_t *model,
                                      const kvcal_cuda_layer_layout *lay,
                                      unsigned char *slots, int nslots, int threads,
                                      size_t piece_bytes, kvcal_cuda_loader_t **out)
{
    kvcal_status st = KVCAL_OK;
    *out = NULL;
    const int L = kvcal_model_describe(model)->num_layers;
    if (nslots < 1 || nslots > L)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "weight loader: %d slots for %d layers",
                          nslots, L);
    kvcal_cuda_loader_t *ld = calloc(1, sizeof *ld);
    if (!ld)
        return kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of host memory");
    ld->model = model;
    ld->lay = *lay;
    ld->slots = slots;
    ld->nslots = nslots;
    ld->layers = L;
    /* a piece holds whole bf16 values and floats (the FP8 scales) */
    ld->piece_bytes = piece_bytes ? (piece_bytes + 3) / 4 * 4 : PIECE_BYTES;
    ld->t0 = now_s();
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    ld->ready = calloc((size_t)nslots, sizeof *ld->ready);
    ld->release = calloc((size_t)nslots, sizeof *ld->release);
    ld->slot_layer = malloc((size_t)nslots * sizeof *ld->slot_layer);
    ld->slot_want = malloc((size_t)nslots * sizeof *ld->slot_want);
    ld->queue = malloc((size_t)L * sizeof *ld->queue);
    if (!ld->ready || !ld->release || !ld->slot_layer || !ld->slot_want || !ld->queue) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of host memory");
        goto fail;
    }
    for (int i = 0; i < nslots; i++) {
        ld->slot_layer[i] = ld->slot_want[i] = -1;
        TRY_CUDA(cudaEventCreateWithFlags(&ld->ready[i], cudaEventDisableTiming));
        TRY_CUDA(cudaEventCreateWithFlags(&ld->release[i], cudaEventDisableTiming));
    }
    TRY_CUDA(cudaGetDevice(&ld->device));
    TRY_CUDA(cudaStreamCreateWithFlags(&ld->copy, cudaStreamNonBlocking));
    if ((st = kvcal_task_pool_create(threads > MAX_THREADS ? MAX_THREADS : threads,
                                     &ld->pool)) ||
        (st = pieces_alloc(&ld->p, ld->piece_bytes, ld->pool)))
        goto fail;
    /* a band of the largest transposed part, at most a piece */
    ld->band_bytes = transposed_bytes(ld);
    ld->band_bytes = ld->band_bytes < ld->piece_bytes ? ld->band_bytes : ld->piece_bytes;
    if (ld->band_bytes)
        TRY_CUDA(cudaMalloc((void **)&ld->band, ld->band_bytes));
    if (pthread_create(&ld->thread, NULL, loader_main, ld)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: cannot start its thread");
        goto fail;
    }
    ld->running = 1;
    pthread_mutex_lock(&ld->mu);
    for (int l = 0; l < (nslots == L ? L : 1); l++)
        want(ld, l);
    pthread_mutex_unlock(&ld->mu);
    *out = ld;
    return KVCAL_OK;
fail:
    kvcal_cuda_loader_destroy(ld);
    return st;
}

void kvcal_cuda_loader_destroy(kvcal_cuda_loader_t *ld)
{
    if (!ld)
        return;
    if (ld->running) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = 1;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL);
    }
    if (ld->copy)
        cudaStreamSynchronize(ld->copy);
    pieces_free(&ld->p);
    kvcal_task_pool_destroy(ld->pool);
    cudaFree(ld->band);
    for (int i = 0; ld->ready && i < ld->nslots; i++) {
        if (ld->ready[i])
            cudaEventDestroy(ld->ready[i]);
        if (ld->release[i])
            cudaEventDestroy(ld->release[i]);
    }
    if (ld->copy)
        cudaStreamDestroy(ld->copy);
    pthread_mutex_destroy(&ld->mu);
    pthread_cond_destroy(&ld->cv);
    free(ld->ready);
    free(ld->release);
    free(ld->slot_layer);
    free(ld->slot_want);
    free(ld->queue);
    free(ld);
}

kvcal_status kvcal_cuda_loader_use(kvcal_cuda_loader_t *ld, int layer,
                                   cudaStream_t compute, unsigned char **weights)
{
    kvcal_status st = KVCAL_OK;
    const int s = layer % ld->nslots;
    if (layer < 0 || layer >= ld->layers)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "weight loader: layer %d of %d", layer,
                          ld->layers);
    pthread_mutex_lock(&ld->mu);
    /* the work queued so far is the last that reads the slots' other layers,
     * and this slot's old layer where this layer is yet to be loaded into it
     * (the first layer of a chunk after the last, in the same slot) */
    for (int i = 0; ld->nslots < ld->layers && i < ld->nslots; i++)
        if ((i != s || ld->slot_want[s] != layer) &&
            cudaEventRecord(ld->release[i], compute) != cudaSuccess && !ld->error) {
            ld->error = KVCAL_ERR_CUDA;
            snprintf(ld->message, sizeof ld->message,
                     "weight loader: cudaEventRecord of a slot's release failed");
        }
    want(ld, layer);
    while (!ld->error && ld->slot_layer[s] != layer)
        pthread_cond_wait(&ld->cv, &ld->mu);
    /* the next layer loads while this one computes, unless it goes into this
     * layer's slot (the last layer's, where layers % slots is 1): that load
     * waits for this layer's readers, asked for when it is used */
    const int next = (layer + 1) % ld->layers;
    if (!ld->error && ld->nslots < ld->layers && next % ld->nslots != s)
        want(ld, next);
    const kvcal_status err = ld->error;
    pthread_mutex_unlock(&ld->mu);
    if (err)
        return kvcal_fail(err, "%s", ld->message);
    TRY_CUDA(cudaStreamWaitEvent(compute, ld->ready[s], 0));
    *weights = ld->slots + (size_t)s * ld->lay.bytes;
fail:
    return st;
}

kvcal_status kvcal_cuda_loader_upload(kvcal_cuda_loader_t *ld,
                                      const kvcal_tensor_view *src, void *dst,
                                      cudaStream_t stream)
{
    kvcal_status st = KVCAL_OK;
    job_list jobs = {.piece = ld->piece_bytes};
    pieces p;
    if ((st = pieces_alloc(&p, ld->piece_bytes, ld->pool)))
        return st;
    if (push_job(&jobs, 0, src, 0, (size_t)src->numel, sizeof(kvcal_bf16), NULL)) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "weight loader: out of memory");
        goto done;
    }
    if ((st = copy_jobs(&jobs, &p, dst, stream)) || (st = send_all(&p, stream)))
        goto done;
    TRY_CUDA(cudaStreamSynchronize(stream));
fail:
done:
    pieces_free(&p);
    free(jobs.j);
    return st;
}

void kvcal_cuda_loader_stats(kvcal_cuda_loader_t *ld, kvcal_load_stats *out)
{
    pthread_mutex_lock(&ld->mu);
    *out = ld->stats;
    pthread_mutex_unlock(&ld->mu);
}
