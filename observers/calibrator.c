/* observers/calibrator.c: the public calibrator (include/kvcal_calibrate.h):
 * observers/stats.h's statistics fed with an engine's K and V, on the host
 * (kvcal_stats_observe_ref) or on the device (kernels/cuda/kv_observe.h,
 * the same slab layout), turned into scales by observers/observer.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/cpu/kvquant_ref.h"
#include "kernels/cuda/kv_observe.h"
#include "kernels/kv_device_memory.h"
#include "observers/observer.h"
#include "observers/stats.h"

#define CAL_FORMAT_NAME "kvcal-calibrator"
#define CAL_FORMAT_VERSION 1
#define CAL_CHUNK_TOKENS 256 /* tokens a host observation converts at once */

struct kvcal_calibrator {
    kvcal_stats_t *stats; /* host statistics; for a device one, the copy last read */
    kvcal_kv_observe_aux *aux; /* host: batches and error kept here too */
    kvcal_observer_config cfg;
    int on_device;
    void *dev;                 /* device: the slab, then the aux */
    kvcal_kv_stats_device d;   /* pointers into dev */
};

static const char *kv_name(int kv)
{
    return kv == KVCAL_K ? "K" : "V";
}

// --- lifetime ----------------------------------------------------------------

/* d's pointers at the offsets of stats' arrays in its slab, based at dev. */
static void point_device(kvcal_calibrator_t *c)
{
    const kvcal_stats_t *s = c->stats;
    unsigned char *base = c->dev, *slab = s->slab;
#define AT(p) ((void *)(base + ((unsigned char *)(p) - slab)))
    for (int kv = 0; kv < 2; kv++) {
        c->d.absmax[kv] = AT(s->absmax[kv]);
        c->d.hist[kv] = AT(s->hist[kv]);
        c->d.batch_absmax[kv] = AT(s->batch_absmax[kv]);
        c->d.ema[kv] = AT(s->ema[kv]);
        c->d.ema_tensor[kv] = AT(s->ema_tensor[kv]);
    }
    c->d.tokens = AT(s->tokens);
#undef AT
    c->d.aux = (kvcal_kv_observe_aux *)(base + kvcal_stats_slab_bytes(s));
    c->d.num_layers = s->num_layers;
    c->d.num_kv_heads = s->num_kv_heads;
    c->d.head_dim = s->head_dim;
}

static kvcal_status create_config(int num_layers, int num_kv_heads, int head_dim,
                                  const kvcal_observer_config *cfg, int on_device,
                                  kvcal_calibrator_t **out)
{
    *out = NULL;
    if (num_kv_heads < 1 || num_kv_heads > KVCAL_KV_MAX_HEADS || head_dim < 1 ||
        head_dim > KVCAL_KV_MAX_HEAD_DIM || num_layers < 1 || num_layers > 65536)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_calibrator_create: %d layers x %d kv heads x head_dim "
                          "%d: layers must be in [1, 65536], kv heads and head_dim in "
                          "[1, %d]",
                          num_layers, num_kv_heads, head_dim, KVCAL_KV_MAX_HEADS);
    kvcal_calibrator_t *c = calloc(1, sizeof *c);
    if (!c)
        return kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_calibrator_create: out of memory");
    c->cfg = *cfg;
    c->on_device = on_device != 0;
    kvcal_status st = kvcal_stats_create(num_layers, num_kv_heads, head_dim, &c->stats);
    if (!st && !(c->aux = calloc(1, sizeof *c->aux)))
        st = kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_calibrator_create: out of memory");
    if (!st && c->on_device) {
        st = kvcal_kv_device_alloc(kvcal_stats_slab_bytes(c->stats) + sizeof *c->aux,
                                   &c->dev);
        if (st)
            kvcal_fail_context(st, "kvcal_calibrator_create: ");
        else
            point_device(c);
    }
    if (st)
        goto fail;
    *out = c;
    return KVCAL_OK;
fail:
    kvcal_calibrator_destroy(c);
    return st;
}

kvcal_status kvcal_calibrator_create(int num_layers, int num_kv_heads, int head_dim,
                                     const char *observer, int on_device,
                                     kvcal_calibrator_t **out)
{
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_create: out is NULL");
    *out = NULL;
    kvcal_observer_config cfg = kvcal_observer_default();
    kvcal_status st = kvcal_observer_parse(observer ? observer : "minmax", &cfg);
    if (st)
        return kvcal_fail_context(st, "kvcal_calibrator_create: ");
    return create_config(num_layers, num_kv_heads, head_dim, &cfg, on_device, out);
}

void kvcal_calibrator_destroy(kvcal_calibrator_t *cal)
{
    if (!cal)
        return;
    kvcal_kv_device_free(cal->dev);
    kvcal_stats_destroy(cal->stats);
    free(cal->aux);
    free(cal);
}

/* The host copy brought up to date with the device (no-op for a host one). */
static kvcal_status sync_host(const kvcal_calibrator_t *cal, struct CUstream_st *stream)
{
    if (!cal->on_device)
        return KVCAL_OK;
    kvcal_stats_t *s = cal->stats;
    kvcal_status st = kvcal_kv_device_read(s->slab, cal->dev, kvcal_stats_slab_bytes(s),
                                           stream);
    if (!st)
        st = kvcal_kv_device_read(cal->aux, cal->d.aux, sizeof *cal->aux, stream);
    if (st)
        return st;
    s->batches = cal->aux->batches;
    s->batch_start_tokens = cal->aux->batch_start_tokens;
    return KVCAL_OK;
}

/* The device brought up to date with the host copy (no-op for a host one). */
static kvcal_status sync_device(kvcal_calibrator_t *cal, struct CUstream_st *stream)
{
    if (!cal->on_device)
        return KVCAL_OK;
    kvcal_stats_t *s = cal->stats;
    cal->aux->batches = s->batches;
    cal->aux->batch_start_tokens = s->batch_start_tokens;
    kvcal_status st = kvcal_kv_device_write(cal->dev, s->slab, kvcal_stats_slab_bytes(s),
                                            stream);
    return st ? st : kvcal_kv_device_write(cal->d.aux, cal->aux, sizeof *cal->aux, stream);
}

/* KVCAL_ERR_NONFINITE naming the first non-finite value, when one was seen. */
static kvcal_status check_poisoned(const char *fn, const kvcal_calibrator_t *cal)
{
    const kvcal_kv_observe_error *e = &cal->aux->err;
    if (!e->flag)
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_NONFINITE,
                      "%s: layer %d %s kv head %d: token %lld channel %d was %g, the first "
                      "non-finite value this calibrator observed; no scale is given from "
                      "it (check the model and the requests of that step)",
                      fn, e->layer, kv_name(e->kv), e->head, (long long)e->token,
                      e->channel, (double)e->value);
}

// --- observing ---------------------------------------------------------------

static kvcal_status check_observe(const char *fn, const kvcal_calibrator_t *cal,
                                  int on_device, int layer, const kvcal_kv_batch *b)
{
    if (!cal || !b)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: calibrator or batch is NULL", fn);
    if (cal->on_device != on_device)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: the calibrator lives on the %s: use "
                          "kvcal_calibrator_observe_%s",
                          fn, cal->on_device ? "device" : "host",
                          cal->on_device ? "launch" : "ref");
    const kvcal_stats_t *s = cal->stats;
    if (layer < 0 || layer >= s->num_layers)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: layer %d out of range (%d layers)",
                          fn, layer, s->num_layers);
    if (b->dtype != KVCAL_DTYPE_F32 && b->dtype != KVCAL_DTYPE_F16 &&
        b->dtype != KVCAL_DTYPE_BF16)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: batch.dtype %d is not F32, F16 or BF16",
                          fn, (int)b->dtype);
    if (b->num_tokens < 0 || (b->num_tokens > 0 && (!b->k || !b->v)))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: batch of %lld tokens with K %s and V %s", fn,
                          (long long)b->num_tokens, b->k ? "set" : "NULL",
                          b->v ? "set" : "NULL");
    const int64_t row = s->num_kv_heads - 1, D = s->head_dim;
    if (b->k_head_stride < D || b->v_head_stride < D ||
        b->k_token_stride < row * b->k_head_stride + D ||
        b->v_token_stride < row * b->v_head_stride + D)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: batch strides (K %lld/%lld, V %lld/%lld elements per "
                          "token/head) overlap rows of %d heads x %d: strides are in "
                          "elements",
                          fn, (long long)b->k_token_stride, (long long)b->k_head_stride,
                          (long long)b->v_token_stride, (long long)b->v_head_stride,
                          s->num_kv_heads, s->head_dim);
    return KVCAL_OK;
}

static int token_observed(const kvcal_kv_batch *b, int64_t t)
{
    return !b->slot_mapping || b->slot_mapping[t] >= 0;
}

/* The first non-finite value among the observed K and V of b, recorded. */
static kvcal_status find_nonfinite(kvcal_calibrator_t *cal, int layer,
                                   const kvcal_kv_batch *b)
{
    const int H = cal->stats->num_kv_heads, D = cal->stats->head_dim;
    const void *src[2] = {b->k, b->v};
    const int64_t ts[2] = {b->k_token_stride, b->v_token_stride};
    const int64_t hs[2] = {b->k_head_stride, b->v_head_stride};
    for (int64_t t = 0; t < b->num_tokens; t++) {
        if (!token_observed(b, t))
            continue;
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < H; h++)
                for (int c = 0; c < D; c++) {
                    float x = kvcal_kv_load_elem(src[kv], b->dtype, t * ts[kv] + h * hs[kv] + c);
                    if (isfinite(x))
                        continue;
                    kvcal_kv_observe_error *e = &cal->aux->err;
                    if (!e->flag)
                        *e = (kvcal_kv_observe_error){1, layer, kv, h, t, c, x};
                    return kvcal_fail(
                        KVCAL_ERR_NONFINITE,
                        "kvcal_calibrator_observe_ref: layer %d %s kv head %d: token "
                        "%lld channel %d is %g; nothing of this batch was observed and "
                        "the calibrator gives no scale from now on (check the model and "
                        "the requests of that step)",
                        layer, kv_name(kv), h, (long long)t, c, (double)x);
                }
    }
    return KVCAL_OK;
}

kvcal_status kvcal_calibrator_observe_ref(kvcal_calibrator_t *cal, int layer,
                                          const kvcal_kv_batch *batch)
{
    kvcal_status st = check_observe("kvcal_calibrator_observe_ref", cal, 0, layer, batch);
    if (!st)
        st = find_nonfinite(cal, layer, batch);
    if (st || batch->num_tokens == 0)
        return st;
    const int H = cal->stats->num_kv_heads, D = cal->stats->head_dim;
    const int64_t chunk = batch->num_tokens < CAL_CHUNK_TOKENS ? batch->num_tokens
                                                              : CAL_CHUNK_TOKENS;
    float *x = malloc((size_t)chunk * H * D * sizeof *x); // (chunk, H, D)
    uint8_t *valid = malloc((size_t)chunk);                // (chunk)
    if (!x || !valid) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "kvcal_calibrator_observe_ref: out of memory");
        goto fail;
    }
    const void *src[2] = {batch->k, batch->v};
    const int64_t ts[2] = {batch->k_token_stride, batch->v_token_stride};
    const int64_t hs[2] = {batch->k_head_stride, batch->v_head_stride};
    for (int64_t t0 = 0; t0 < batch->num_tokens; t0 += chunk) {
        int n = (int)(batch->num_tokens - t0 < chunk ? batch->num_tokens - t0 : chunk);
        for (int t = 0; t < n; t++)
            valid[t] = (uint8_t)token_observed(batch, t0 + t);
        for (int kv = 0; kv < 2; kv++) {
            for (int t = 0; t < n; t++)
                for (int h = 0; h < H; h++)
                    for (int c = 0; c < D; c++)
                        x[((size_t)t * H + h) * D + c] = kvcal_kv_load_elem(
                            src[kv], batch->dtype, (t0 + t) * ts[kv] + h * hs[kv] + c);
            kvcal_kv_block blk = kvcal_kv_block_dense(x, 1, n, H, D, NULL, NULL);
            blk.valid = valid;
            if ((st = kvcal_stats_observe_ref(cal->stats, layer, kv, &blk)))
                goto fail;
        }
    }
fail:
    free(x);
    free(valid);
    return st;
}

kvcal_status kvcal_calibrator_observe_launch(kvcal_calibrator_t *cal, int layer,
                                             const kvcal_kv_batch *batch,
                                             struct CUstream_st *stream)
{
    kvcal_status st =
        check_observe("kvcal_calibrator_observe_launch", cal, 1, layer, batch);
    if (st || batch->num_tokens == 0)
        return st;
    return kvcal_kv_observe_launch(batch, layer, &cal->d, stream);
}

kvcal_status kvcal_calibrator_end_step(kvcal_calibrator_t *cal, struct CUstream_st *stream)
{
    if (!cal)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_end_step: NULL calibrator");
    if (cal->on_device)
        return kvcal_kv_observe_end_batch_launch(&cal->d, cal->cfg.ema_decay, stream);
    return kvcal_stats_end_batch(cal->stats, cal->cfg.ema_decay);
}

// --- merging and reading -----------------------------------------------------

static int same_config(const kvcal_observer_config *a, const kvcal_observer_config *b)
{
    return a->kind == b->kind && a->ema_decay == b->ema_decay &&
           a->percentile == b->percentile;
}

kvcal_status kvcal_calibrator_merge(kvcal_calibrator_t *dst, const kvcal_calibrator_t *src,
                                    struct CUstream_st *stream)
{
    if (!dst || !src)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_merge: NULL calibrator");
    if (!same_config(&dst->cfg, &src->cfg))
        return kvcal_fail(KVCAL_ERR_MISMATCH,
                          "kvcal_calibrator_merge: the calibrators use different observers "
                          "(%s and %s, or other parameters): create both with one",
                          kvcal_observer_name(dst->cfg.kind),
                          kvcal_observer_name(src->cfg.kind));
    kvcal_status st = sync_host(dst, stream);
    if (!st && src != dst)
        st = sync_host(src, stream);
    if (!st)
        st = kvcal_stats_merge(dst->stats, src->stats);
    if (st)
        return kvcal_fail_context(st, "kvcal_calibrator_merge: ");
    if (!dst->aux->err.flag && src->aux->err.flag)
        dst->aux->err = src->aux->err;
    return sync_device(dst, stream);
}

kvcal_status kvcal_calibrator_tokens(const kvcal_calibrator_t *cal,
                                     struct CUstream_st *stream, int64_t *tokens,
                                     int64_t *steps)
{
    if (!cal)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_tokens: NULL calibrator");
    kvcal_status st = sync_host(cal, stream);
    if (st)
        return st;
    if (tokens)
        memcpy(tokens, cal->stats->tokens, (size_t)cal->stats->num_layers * sizeof *tokens);
    if (steps)
        *steps = cal->stats->batches;
    return KVCAL_OK;
}

kvcal_status kvcal_calibrator_to_scales(const kvcal_calibrator_t *cal,
                                        kvcal_granularity granularity,
                                        struct CUstream_st *stream, kvcal_scales_t **out)
{
    if (!cal || !out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_to_scales: NULL argument");
    *out = NULL;
    kvcal_status st = sync_host(cal, stream);
    if (!st)
        st = check_poisoned("kvcal_calibrator_to_scales", cal);
    if (st)
        return st;
    const kvcal_stats_t *s = cal->stats;
    for (int l = 0; l < s->num_layers; l++)
        if (s->tokens[l] == 0)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "kvcal_calibrator_to_scales: layer %d observed no token: "
                              "feed every layer's K and V (kvcal_calibrator_observe_*) "
                              "before asking for scales",
                              l);
    kvcal_scales_t *scales = NULL;
    if ((st = kvcal_scales_create(s->num_layers, s->num_kv_heads, &scales)))
        return st;
    st = kvcal_stats_to_scales(s, &cal->cfg, granularity, scales, NULL, NULL);
    if (st) {
        kvcal_scales_destroy(scales);
        return kvcal_fail_context(st, "kvcal_calibrator_to_scales: ");
    }
    scales->model.head_dim = s->head_dim;
    *out = scales;
    return KVCAL_OK;
}

// --- bytes -------------------------------------------------------------------

/* The header of the serialized state, then the statistics' slab. */
typedef struct cal_header {
    char format[16];        /* "kvcal-calibrator" (no NUL) */
    uint32_t version;       /* CAL_FORMAT_VERSION */
    uint32_t header_bytes;  /* sizeof(cal_header) */
    int32_t num_layers;
    int32_t num_kv_heads;
    int32_t head_dim;
    int32_t num_bins;
    int32_t observer;       /* kvcal_observer_kind */
    int32_t reserved;
    double ema_decay;
    double percentile;
    int64_t batches;
    int64_t batch_start_tokens;
    uint64_t slab_bytes;
} cal_header;

static int little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

kvcal_status kvcal_calibrator_serialize(const kvcal_calibrator_t *cal,
                                        struct CUstream_st *stream, void *buf,
                                        size_t buf_size, size_t *size)
{
    if (!cal || !size)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_serialize: NULL argument");
    const kvcal_stats_t *s = cal->stats;
    const size_t slab = kvcal_stats_slab_bytes(s), need = sizeof(cal_header) + slab;
    *size = need;
    if (!buf)
        return KVCAL_OK;
    if (buf_size < need)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "kvcal_calibrator_serialize: buffer of %zu bytes, the state needs "
                          "%zu: pass buf = NULL first to learn the size",
                          buf_size, need);
    if (!little_endian())
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "kvcal_calibrator_serialize: the format is little-endian and "
                          "this host is not");
    kvcal_status st = sync_host(cal, stream);
    if (!st)
        st = check_poisoned("kvcal_calibrator_serialize", cal);
    if (st)
        return st;
    cal_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.format, CAL_FORMAT_NAME, sizeof h.format);
    h.version = CAL_FORMAT_VERSION;
    h.header_bytes = sizeof h;
    h.num_layers = s->num_layers;
    h.num_kv_heads = s->num_kv_heads;
    h.head_dim = s->head_dim;
    h.num_bins = s->num_bins;
    h.observer = (int32_t)cal->cfg.kind;
    h.ema_decay = cal->cfg.ema_decay;
    h.percentile = cal->cfg.percentile;
    h.batches = s->batches;
    h.batch_start_tokens = s->batch_start_tokens;
    h.slab_bytes = slab;
    memcpy(buf, &h, sizeof h);
    memcpy((unsigned char *)buf + sizeof h, s->slab, slab);
    return KVCAL_OK;
}

/* The statistics read back hold what observation can produce: finite
 * absmax and moving averages >= 0, token counts >= 0 and, per (layer, K/V,
 * head), head_dim values binned for every token counted. */
static kvcal_status check_state(const kvcal_stats_t *s)
{
    const int L = s->num_layers, H = s->num_kv_heads, D = s->head_dim;
    for (int l = 0; l < L; l++) {
        if (s->tokens[l] < 0)
            return kvcal_fail(KVCAL_ERR_FORMAT,
                              "kvcal_calibrator_deserialize: layer %d: token count %lld "
                              "is negative",
                              l, (long long)s->tokens[l]);
        for (int kv = 0; kv < 2; kv++) {
            if (!(s->ema_tensor[kv][l] >= 0.0 && isfinite(s->ema_tensor[kv][l])))
                return kvcal_fail(KVCAL_ERR_FORMAT,
                                  "kvcal_calibrator_deserialize: layer %d %s: moving "
                                  "average %g is not a finite number >= 0",
                                  l, kv_name(kv), s->ema_tensor[kv][l]);
            for (int h = 0; h < H; h++) {
                size_t i = (size_t)l * H + h;
                uint64_t n = 0;
                for (int b = 0; b < s->num_bins; b++)
                    n += s->hist[kv][i * s->num_bins + b];
                const float *a = s->absmax[kv] + i * D;
                int bad = !(s->ema[kv][i] >= 0.0 && isfinite(s->ema[kv][i])) ||
                          !(s->batch_absmax[kv][i] >= 0.0f && isfinite(s->batch_absmax[kv][i]));
                for (int c = 0; c < D; c++)
                    bad |= !(a[c] >= 0.0f && isfinite(a[c]));
                if (bad)
                    return kvcal_fail(KVCAL_ERR_FORMAT,
                                      "kvcal_calibrator_deserialize: layer %d %s kv head "
                                      "%d: an absmax or moving average is not a finite "
                                      "number >= 0",
                                      l, kv_name(kv), h);
                if (n != (uint64_t)s->tokens[l] * (uint64_t)D)
                    return kvcal_fail(KVCAL_ERR_FORMAT,
                                      "kvcal_calibrator_deserialize: layer %d %s kv head "
                                      "%d: the histogram counts %llu values, not %lld "
                                      "tokens x head_dim %d: the bytes are damaged",
                                      l, kv_name(kv), h, (unsigned long long)n,
                                      (long long)s->tokens[l], D);
            }
        }
    }
    return KVCAL_OK;
}

kvcal_status kvcal_calibrator_deserialize(const void *buf, size_t size, int on_device,
                                          kvcal_calibrator_t **out)
{
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "kvcal_calibrator_deserialize: out is NULL");
    *out = NULL;
    cal_header h;
    if (!buf || size < sizeof h)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "kvcal_calibrator_deserialize: %zu bytes, fewer than the %zu of "
                          "the header: not a calibrator's state",
                          buf ? size : 0, sizeof h);
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.format, CAL_FORMAT_NAME, sizeof h.format))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "kvcal_calibrator_deserialize: no \"" CAL_FORMAT_NAME
                          "\" at the start: not bytes of kvcal_calibrator_serialize");
    if (h.version != CAL_FORMAT_VERSION || h.header_bytes != sizeof h)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "kvcal_calibrator_deserialize: version %u (header of %u bytes); "
                          "this library reads version %d: use the kvcal that wrote it",
                          h.version, h.header_bytes, CAL_FORMAT_VERSION);
    if (!little_endian())
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "kvcal_calibrator_deserialize: the format is little-endian and "
                          "this host is not");
    if (h.num_bins != KVCAL_HIST_BINS)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "kvcal_calibrator_deserialize: num_bins %d, expected %d",
                          h.num_bins, KVCAL_HIST_BINS);
    kvcal_observer_config cfg = kvcal_observer_default();
    cfg.kind = (kvcal_observer_kind)h.observer;
    cfg.ema_decay = h.ema_decay;
    cfg.percentile = h.percentile;
    if (h.observer < KVCAL_OBSERVER_MINMAX || h.observer > KVCAL_OBSERVER_MSE ||
        !(h.ema_decay >= 0.0 && h.ema_decay < 1.0) ||
        !(h.percentile > 0.0 && h.percentile <= 100.0) || h.batches < 0 ||
        h.batch_start_tokens < 0)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "kvcal_calibrator_deserialize: observer %d (decay %g, "
                          "percentile %g), %lld steps: out of range",
                          h.observer, h.ema_decay, h.percentile, (long long)h.batches);
    kvcal_calibrator_t *c = NULL;
    kvcal_status st =
        create_config(h.num_layers, h.num_kv_heads, h.head_dim, &cfg, on_device, &c);
    if (st)
        return kvcal_fail_context(st, "kvcal_calibrator_deserialize: ");
    kvcal_stats_t *s = c->stats;
    const size_t slab = kvcal_stats_slab_bytes(s);
    if (h.slab_bytes != slab || size != sizeof h + slab) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "kvcal_calibrator_deserialize: %zu bytes for %d layers x %d kv "
                        "heads x head_dim %d, which need %zu: the bytes are truncated or "
                        "damaged",
                        size, h.num_layers, h.num_kv_heads, h.head_dim, sizeof h + slab);
        goto fail;
    }
    memcpy(s->slab, (const unsigned char *)buf + sizeof h, slab);
    s->batches = h.batches;
    s->batch_start_tokens = h.batch_start_tokens;
    if ((st = check_state(s)) || (st = sync_device(c, NULL)))
        goto fail;
    *out = c;
    return KVCAL_OK;
fail:
    kvcal_calibrator_destroy(c);
    return st;
}
