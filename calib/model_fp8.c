/* calib/model_fp8.c: the FP8 weights of a Hugging Face checkpoint, for
 * calib/model.c (calib/model_fp8.h): which logical weights the config
 * quantizes (io/checkpoint/weight_quant.h), every FP8 tensor's scales checked
 * when the model opens, and each FP8 weight as the engine serves it (vLLM's
 * requantization of fused per-tensor shards included). The rules and their
 * vLLM sources: schemas/README.md, "FP8 weights". */
#include "calib/model_fp8.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/checkpoint/weight_quant.h"

struct kvcal_model_fp8 {
    kvcal_weight_quant_t *wq;
    char path[4096];
    kvcal_wq_scheme scheme[KVCAL_W_COUNT]; /* of each FP8 logical weight */
};

static int is_float_dtype(kvcal_dtype t)
{
    return t == KVCAL_DTYPE_F32 || t == KVCAL_DTYPE_F16 || t == KVCAL_DTYPE_BF16;
}

/* The module of a weight tensor: its name without ".weight". */
static void module_of(char *module, size_t n, const char *tensor)
{
    snprintf(module, n, "%s", tensor);
    size_t len = strlen(module);
    if (len > 7 && !strcmp(module + len - 7, ".weight"))
        module[len - 7] = '\0';
}

/* Whether w is the weight of a dense linear op (a projection, an MLP, MLA's
 * kv_b_proj on the latent) in some layer of d. */
static int dense_weight(const kvcal_model_desc *d, kvcal_weight w)
{
    for (int l = 0; l < d->num_layers; l++) {
        int n = 0;
        const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n);
        for (int i = 0; i < n; i++)
            if (ops[i].w == w &&
                (ops[i].kind == KVCAL_OP_LINEAR || ops[i].kind == KVCAL_OP_SWIGLU ||
                 ops[i].kind == KVCAL_OP_GEGLU || ops[i].kind == KVCAL_OP_MLA_EXPAND))
                return 1;
    }
    return 0;
}

/* Whether w runs FP8 weights: a dense linear op's, the experts' or the
 * shared expert's MLP. */
static int served_weight(const kvcal_model_desc *d, kvcal_weight w)
{
    return dense_weight(d, w) || w == KVCAL_W_EXPERT_GATE_UP ||
           w == KVCAL_W_EXPERT_DOWN || w == KVCAL_W_SHARED_GATE_UP ||
           w == KVCAL_W_SHARED_DOWN;
}

/* A checkpoint tensor holding several of vLLM's shards (Phi-3's qkv_proj,
 * gate_up_proj): one scale for all, which vLLM does not requantize. */
static int fused_on_disk(const kvcal_weight_part *p)
{
    return p->rows == KVCAL_DIM_QKV || p->rows == KVCAL_DIM_2INTER;
}

/* Checks the scale tensor `name` of an FP8 part of rows x cols: present,
 * floating, shaped as the scheme's granularity. */
static kvcal_status check_scale(const kvcal_checkpoint_t *ck, const char *path,
                                const char *name, const kvcal_fp8_linear *f, int64_t rows,
                                int64_t cols, int input)
{
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
    char got[96], want[96];
    if (!t)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: tensor %s is missing: the FP8 weight beside it needs its "
                          "%s scale; is the checkpoint complete?",
                          path, name, input ? "input" : "weight");
    if (!is_float_dtype(t->dtype))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: scale tensor %s has dtype %s; expected F32, "
                          "BF16 or F16",
                          path, name, kvcal_dtype_name(t->dtype));
    const int64_t nb =
        f->w == KVCAL_FP8W_BLOCK ? (rows + f->block_n - 1) / f->block_n : 0;
    const int64_t kb =
        f->w == KVCAL_FP8W_BLOCK ? (cols + f->block_k - 1) / f->block_k : 0;
    int ok;
    if (input || f->w == KVCAL_FP8W_TENSOR) {
        ok = t->numel == 1;
        snprintf(want, sizeof want, "one value ([] or [1])");
    } else if (f->w == KVCAL_FP8W_CHANNEL) {
        ok = t->numel == rows && (t->ndim == 1 || (t->ndim == 2 && t->shape[1] == 1));
        snprintf(want, sizeof want, "[%lld, 1] (one per output row)", (long long)rows);
    } else {
        ok = (t->ndim == 2 && t->shape[0] == nb && t->shape[1] == kb) ||
             (t->ndim == 4 && t->shape[0] == nb && t->shape[1] == 1 &&
              t->shape[2] == kb && t->shape[3] == 1);
        snprintf(want, sizeof want, "[%lld, %lld] (blocks of %dx%d)", (long long)nb,
                 (long long)kb, f->block_n, f->block_k);
    }
    if (!ok) {
        kvcal_tensor_shape_str(t, got, sizeof got);
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: scale tensor %s has shape %s; expected %s", path, name,
                          got, want);
    }
    return KVCAL_OK;
}

static int same_scheme(const kvcal_fp8_linear *a, const kvcal_fp8_linear *b)
{
    return a->w == b->w && a->a == b->a && a->block_n == b->block_n &&
           a->block_k == b->block_k && a->group == b->group;
}

/* Checks part `name` (rows x cols) of weight w in some layer against the
 * config; records the scheme of w in f->scheme[w] (*seen: one recorded). */
static kvcal_status check_part(kvcal_model_fp8_t *f, const kvcal_checkpoint_t *ck,
                               kvcal_model_desc *d, kvcal_weight w, const char *name,
                               int64_t rows, int64_t cols, int *seen)
{
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
    if (!t) /* model.c names the missing tensor */
        return KVCAL_OK;
    char module[300], text[160];
    module_of(module, sizeof module, name);
    kvcal_wq_scheme s;
    memset(&s, 0, sizeof s);
    /* routers and the delta-net's convolution stay unquantized in vLLM's
     * models (their layers take no quant config) */
    const int never =
        w == KVCAL_W_ROUTER || w == KVCAL_W_SHARED_GATE || w == KVCAL_W_LIN_CONV;
    if (!never)
        kvcal_weight_quant_module(f->wq, module, &s);
    const int fp8 = t->dtype == KVCAL_DTYPE_F8_E4M3,
              quantized = s.fp8.w != KVCAL_FP8W_NONE;
    const char *method = kvcal_weight_quant_name(f->wq);
    if (fp8 && !quantized) {
        if (kvcal_weight_quant_method(f->wq) == KVCAL_WQ_NONE &&
            kvcal_weight_quant_source(f->wq)[0])
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: tensor %s has dtype F8_E4M3 but the quantization config in %s "
                "declares no weight quantization (no config group, quant_algo or "
                "weight scheme; a KV-cache scheme alone) saying how its scales are "
                "read; fix the config",
                f->path, name, kvcal_weight_quant_source(f->wq));
        if (kvcal_weight_quant_method(f->wq) == KVCAL_WQ_NONE)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: tensor %s has dtype F8_E4M3 but config.json has no "
                "quantization_config (nor an hf_quant_config.json beside it) "
                "saying how its scales are read",
                f->path, name);
        if (kvcal_weight_quant_method(f->wq) == KVCAL_WQ_OTHER)
            return kvcal_fail(
                KVCAL_ERR_UNSUPPORTED,
                "%s: tensor %s has dtype F8_E4M3 under quant_method \"%s\": kvcal reads "
                "FP8 weights of compressed-tensors, fp8 and modelopt checkpoints",
                f->path, name, method);
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "%s: tensor %s has dtype F8_E4M3 but the %s config leaves %s unquantized "
            "(%s); the checkpoint does not match its config",
            f->path, name, method, module,
            w == KVCAL_W_LIN_CONV
                ? "a delta-net's convolution, which vLLM never quantizes"
            : never ? "a router, which vLLM never quantizes"
                    : "its ignore list, or no config group targets it");
    }
    if (!quantized)
        return KVCAL_OK;
    kvcal_wq_scheme_describe(&s.fp8, text, sizeof text);
    if (!fp8)
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "%s: the %s config quantizes %s (%s) but tensor %s is %s; the "
                          "checkpoint does not match its config",
                          f->path, method, module, text, name,
                          kvcal_dtype_name(t->dtype));
    if (!served_weight(d, w))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: tensor %s is an FP8 weight outside the projections, MLPs "
            "and experts of the %s family's layers, which kvcal does not run "
            "in FP8",
            f->path, name, d->arch->family);
    if (d->arch->weights[w].per_expert && s.fp8.w == KVCAL_FP8W_TENSOR &&
        s.fp8.a != KVCAL_FP8A_STATIC && s.fp8.a != KVCAL_FP8A_NONE)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %s is an expert's FP8 weight per tensor with dynamic activations, "
            "whose inputs vLLM's fused MoE quantizes with one scale over each whole "
            "batch (the engine's batching, no rule a calibration can follow); use the "
            "model's bf16 weights, or an FP8 checkpoint with static input scales, "
            "per-channel or block-wise weights",
            f->path, module);
    if (*seen && !same_scheme(&d->fp8[w], &s.fp8)) {
        char before[160];
        kvcal_wq_scheme_describe(&d->fp8[w], before, sizeof before);
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "%s: %s is %s but the same weight of another layer or part is %s; "
            "kvcal runs one scheme a weight",
            f->path, module, text, before);
    }
    d->fp8[w] = s.fp8;
    f->scheme[w] = s;
    *seen = 1;
    char scale[320];
    snprintf(scale, sizeof scale, "%s.%s", module, s.scale_name);
    kvcal_status st = check_scale(ck, f->path, scale, &s.fp8, rows, cols, 0);
    if (!st && s.input_scale) {
        snprintf(scale, sizeof scale, "%s.input_scale", module);
        st = check_scale(ck, f->path, scale, &s.fp8, rows, cols, 1);
    }
    return st;
}

/* d->weight_scheme: "<method>: <the first FP8 weight's scheme>", "(others
 * differ)" where another FP8 weight's does, and the dense projections left
 * unquantized ("; unquantized: mlp.down_proj"). */
static void describe_scheme(const kvcal_model_fp8_t *f, kvcal_model_desc *d)
{
    char text[160], plain[128] = "";
    const kvcal_fp8_linear *first = NULL;
    int mixed = 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        if (d->fp8[w].w != KVCAL_FP8W_NONE) {
            mixed |= first && !same_scheme(first, &d->fp8[w]);
            first = first ? first : &d->fp8[w];
            continue;
        }
        const kvcal_weight_part *p = d->arch->weights[w].parts;
        if (!kvcal_model_has_weight(d, w) || !served_weight(d, w))
            continue;
        for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++) {
            char module[96], *e;
            module_of(module, sizeof module, p[i].name);
            if ((e = strstr(module, "%d"))) /* an expert's: mlp.experts.*.gate_proj */
                memmove(e + 1, e + 2, strlen(e + 2) + 1), *e = '*';
            const size_t at = strlen(plain);
            snprintf(plain + at, sizeof plain - at, "%s%s", plain[0] ? ", " : "", module);
        }
    }
    kvcal_wq_scheme_describe(first, text, sizeof text);
    snprintf(d->weight_scheme, sizeof d->weight_scheme, "%s: %s%s%s%s",
             kvcal_weight_quant_name(f->wq), text, mixed ? " (others differ)" : "",
             plain[0] ? "; unquantized: " : "", plain);
}

/* The weights vLLM fuses into one layer (kvcal_weight_spec.fused): one
 * scheme, all FP8 or none; block-wise, every shard but the last whole
 * blocks of rows (validate_fp8_block_shape). */
static kvcal_status check_fused(const kvcal_model_fp8_t *f, const kvcal_model_desc *d)
{
    const kvcal_arch *a = d->arch;
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        if (!a->weights[w].fused || !kvcal_model_has_weight(d, w))
            continue;
        for (int v = w + 1; v < KVCAL_W_COUNT; v++) {
            if (a->weights[v].fused != a->weights[w].fused ||
                !kvcal_model_has_weight(d, v))
                continue;
            int l = 0;
            while (l < d->num_layers - 1 && !kvcal_model_layer_has_weight(d, l, w))
                l++;
            char nw[256], nv[256], tw[160], tv[160];
            kvcal_model_tensor_name(nw, sizeof nw, d, l, a->weights[w].parts[0].name, 0);
            kvcal_model_tensor_name(nv, sizeof nv, d, l, a->weights[v].parts[0].name, 0);
            kvcal_wq_scheme_describe(&d->fp8[w], tw, sizeof tw);
            kvcal_wq_scheme_describe(&d->fp8[v], tv, sizeof tv);
            if (!same_scheme(&d->fp8[w], &d->fp8[v]))
                return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                                  "%s: %s is %s but %s is %s; vLLM serves the two as "
                                  "one fused layer of one scheme (it refuses some but "
                                  "not all shards quantized): quantize both alike",
                                  f->path, nw, d->fp8[w].w ? tw : "unquantized", nv,
                                  d->fp8[v].w ? tv : "unquantized");
            long long rows, cols;
            kvcal_model_weight_shape(d, w, &rows, &cols);
            if (d->fp8[w].w == KVCAL_FP8W_BLOCK && rows % d->fp8[w].block_n)
                return kvcal_fail(
                    KVCAL_ERR_FORMAT,
                    "%s: %s has %lld rows, not a multiple of the block size "
                    "%d: vLLM refuses to fuse it block-wise with %s",
                    f->path, nw, rows, d->fp8[w].block_n, nv);
        }
    }
    return KVCAL_OK;
}

/* The view of a part (its rows x cols of the model) in a tensor of `numel`
 * values at data: the rows of a regrouped part (the heads' halves of a
 * gated q_proj, Qwen3-Next's projections grouped by key head) taken through
 * its grouping. */
static kvcal_tensor_view part_view(const kvcal_model_desc *d,
                                   const kvcal_weight_part *part, const void *data,
                                   kvcal_dtype dtype, int64_t numel, int64_t cols)
{
    kvcal_tensor_view v = {.data = data, .dtype = dtype, .numel = numel, .cols = cols};
    v.rows = kvcal_model_dim(d, part->rows);
    kvcal_model_part_groups(d, part->layout, &v);
    return v;
}

/* A block-wise FP8 part read through a grouping (part_view): its runs of
 * rows whole blocks, so that every block of the part's rows is a block of
 * its tensor's (vLLM's validate_fp8_block_shape asks as much of the shards
 * it fuses). */
static kvcal_status check_regrouped_blocks(const kvcal_model_fp8_t *f,
                                           const kvcal_model_desc *d, kvcal_weight w,
                                           int i)
{
    const kvcal_weight_part *part = &d->arch->weights[w].parts[i];
    const kvcal_tensor_view v = part_view(d, part, NULL, KVCAL_DTYPE_F8_E4M3, 0, 0);
    const int bn = d->fp8[w].block_n;
    if (d->fp8[w].w != KVCAL_FP8W_BLOCK || !v.groups)
        return KVCAL_OK;
    int64_t run = v.first % bn ? v.first : 0;
    for (int s = 0; !run && s < v.segs; s++)
        run = v.seg[s] % bn ? v.seg[s] : 0;
    char name[256];
    kvcal_model_tensor_name(name, sizeof name, d, 0, part->name, 0);
    return !run ? KVCAL_OK
                : kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                             "%s: %s holds its heads' rows in runs of %lld, not whole "
                             "blocks of %d rows: kvcal reads a regrouped weight's FP8 "
                             "blocks whole (as vLLM fuses block-wise shards)",
                             f->path, name, (long long)run, bn);
}

kvcal_status kvcal_model_fp8_open(const kvcal_checkpoint_t *ck, const char *dir,
                                  const char *path, kvcal_model_desc *d,
                                  kvcal_model_fp8_t **out)
{
    *out = NULL;
    kvcal_model_fp8_t *f = calloc(1, sizeof *f);
    if (!f)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    kvcal_status st = kvcal_weight_quant_load(dir, &f->wq);
    const kvcal_arch *a = d->arch;
    char name[256];
    int any = 0;
    for (int w = 0; !st && w < KVCAL_W_COUNT; w++) {
        const kvcal_weight_part *p = a->weights[w].parts;
        if (!kvcal_model_has_weight(d, w) || a->weights[w].norm ||
            p[0].cols == KVCAL_DIM_NONE)
            continue;
        int seen = 0;
        for (int l = 0; !st && l < d->num_layers; l++)
            for (int e = 0; !st && kvcal_model_layer_has_weight(d, l, w) &&
                            e < kvcal_model_weight_copies(d, w);
                 e++)
                for (int i = 0; !st && i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++) {
                    kvcal_model_tensor_name(name, sizeof name, d, l, p[i].name, e);
                    st = check_part(f, ck, d, w, name,
                                    kvcal_model_part_stored_rows(
                                        p[i].layout, kvcal_model_dim(d, p[i].rows)),
                                    kvcal_model_dim(d, p[i].cols), &seen);
                }
        for (int i = 0; !st && seen && i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++)
            st = check_regrouped_blocks(f, d, w, i);
        /* vLLM's validate_fp8_block_shape: a fused weight's shards are
         * whole blocks of rows; an expert's rows too (kvcal stacks the
         * experts' block scales) */
        for (int i = 0; !st && seen && d->fp8[w].w == KVCAL_FP8W_BLOCK &&
                        (p[1].name || a->weights[w].per_expert) &&
                        i < KVCAL_WEIGHT_PARTS_MAX && p[i].name;
             i++)
            if (kvcal_model_dim(d, p[i].rows) % d->fp8[w].block_n) {
                kvcal_model_tensor_name(name, sizeof name, d, 0, p[i].name, 0);
                st = kvcal_fail(
                    KVCAL_ERR_FORMAT,
                    "%s: %s has %lld rows, not a multiple of the block size %d: %s", path,
                    name, kvcal_model_dim(d, p[i].rows), d->fp8[w].block_n,
                    a->weights[w].per_expert
                        ? "kvcal runs an expert's blocks only in whole blocks of rows"
                        : "vLLM refuses to fuse it block-wise");
            }
        any |= seen;
    }
    if (!st)
        st = check_fused(f, d);
    if (st) {
        kvcal_model_fp8_close(f);
        return st;
    }
    if (any)
        describe_scheme(f, d);
    *out = f;
    return KVCAL_OK;
}

void kvcal_model_fp8_close(kvcal_model_fp8_t *f)
{
    if (!f)
        return;
    kvcal_weight_quant_destroy(f->wq);
    free(f);
}

/* n values of the scale tensor `name` into dst, each finite, > 0 and small
 * enough that an e4m3 value times it stays finite (a larger one makes the
 * weight infinite and the model's output NaN, far from the tensor that
 * caused it). */
static kvcal_status read_scale(const kvcal_checkpoint_t *ck, const char *path,
                               const char *name, float *dst, int64_t n)
{
    const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
    if (!t || t->numel != n)
        return kvcal_fail(KVCAL_ERR_FORMAT, "%s: scale tensor %s is missing or misshapen",
                          path, name);
    kvcal_status st = kvcal_tensor_to_f32(t, dst);
    if (st)
        return kvcal_fail_context(st, "%s: %s: ", path, name);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]) || !(dst[i] > 0.0f) ||
            !isfinite(dst[i] * KVCAL_FP8_E4M3_MAX))
            return kvcal_fail(
                KVCAL_ERR_FORMAT,
                "%s: scale tensor %s holds %g at index %lld; scales must be "
                "finite, > 0 and at most %g (the e4m3 maximum %g times it overflows "
                "a float)",
                path, name, (double)dst[i], (long long)i,
                (double)(FLT_MAX / KVCAL_FP8_E4M3_MAX), (double)KVCAL_FP8_E4M3_MAX);
    return KVCAL_OK;
}

/* The scales of the weights vLLM fuses with w in one layer
 * (kvcal_weight_spec.fused), every part's: per tensor, *smax and *differ
 * (from w's first scale s0) take theirs in; a static input scale, *input
 * the largest. */
static kvcal_status fused_scales(const kvcal_model_fp8_t *f, const kvcal_checkpoint_t *ck,
                                 const kvcal_model_desc *d, int layer, kvcal_weight w,
                                 float s0, float *smax, int *differ, float *input)
{
    const kvcal_arch *a = d->arch;
    kvcal_status st = KVCAL_OK;
    for (int v = 0; !st && a->weights[w].fused && v < KVCAL_W_COUNT; v++) {
        if (v == (int)w || a->weights[v].fused != a->weights[w].fused ||
            !kvcal_model_layer_has_weight(d, layer, v))
            continue;
        const kvcal_weight_part *part = a->weights[v].parts;
        for (int j = 0; !st && j < KVCAL_WEIGHT_PARTS_MAX && part[j].name; j++) {
            char name[256], module[256], scale[320];
            kvcal_model_tensor_name(name, sizeof name, d, layer, part[j].name, 0);
            module_of(module, sizeof module, name);
            float x;
            if (d->fp8[w].w == KVCAL_FP8W_TENSOR) {
                snprintf(scale, sizeof scale, "%s.%s", module, f->scheme[v].scale_name);
                if (!(st = read_scale(ck, f->path, scale, &x, 1))) {
                    *smax = x > *smax ? x : *smax;
                    *differ |= x != s0;
                }
            }
            if (!st && f->scheme[w].input_scale) {
                snprintf(scale, sizeof scale, "%s.input_scale", module);
                if (!(st = read_scale(ck, f->path, scale, &x, 1)))
                    *input = x > *input ? x : *input;
            }
        }
    }
    return st;
}

kvcal_status kvcal_model_fp8_get(const kvcal_model_fp8_t *f, const kvcal_checkpoint_t *ck,
                                 const kvcal_model_desc *d, int layer, kvcal_weight w,
                                 int expert, kvcal_fp8_parts *p, float *scales)
{
    const kvcal_fp8_linear *q = &d->fp8[w];
    const kvcal_wq_scheme *s = &f->scheme[w];
    const kvcal_weight_part *part = d->arch->weights[w].parts;
    long long rows, cols;
    kvcal_model_weight_shape(d, w, &rows, &cols);
    rows /= kvcal_model_weight_copies(d, w); /* an expert's */
    memset(p, 0, sizeof *p);
    if (q->w == KVCAL_FP8W_NONE)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "%s: weight %d is not FP8", f->path,
                          (int)w);
    char name[256], module[256], scale[320];
    float ws[KVCAL_WEIGHT_PARTS_MAX], smax = 0.0f, *grid = NULL;
    const int64_t ld =
        q->w == KVCAL_FP8W_BLOCK ? kvcal_fp8_block_ld(cols, q->block_k) : 0;
    const int64_t kb =
        q->w == KVCAL_FP8W_BLOCK ? (cols + q->block_k - 1) / q->block_k : 0;
    int64_t row = 0;
    kvcal_status st = KVCAL_OK;
    if (q->w == KVCAL_FP8W_BLOCK)
        memset(scales, 0, sizeof(float) * (size_t)kvcal_fp8_weight_scales(q, rows, cols));
    for (int j = 0; !st && j < KVCAL_WEIGHT_PARTS_MAX && part[j].name; j++) {
        kvcal_model_tensor_name(name, sizeof name, d, layer, part[j].name, expert);
        const kvcal_tensor_info *t = kvcal_checkpoint_find(ck, name);
        kvcal_tensor_view *v = &p->part[p->n++];
        *v = part_view(d, &part[j], t->data, t->dtype, t->numel, cols);
        module_of(module, sizeof module, name);
        snprintf(scale, sizeof scale, "%s.%s", module, s->scale_name);
        if (q->w == KVCAL_FP8W_TENSOR) {
            st = read_scale(ck, f->path, scale, &ws[j], 1);
            smax = j == 0 || ws[j] > smax ? ws[j] : smax;
        } else {
            /* the scales of the tensor's rows (a row's, or a block's of bn
             * rows), then the part's runs of bn rows, each a run of the
             * tensor's (check_regrouped_blocks) */
            const int64_t bn = q->w == KVCAL_FP8W_BLOCK ? q->block_n : 1,
                          per = q->w == KVCAL_FP8W_BLOCK ? kb : 1,
                          nb = (t->numel / cols + bn - 1) / bn;
            free(grid);
            if (!(grid = malloc(sizeof(float) * (size_t)(nb * per))))
                st = kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", f->path);
            else
                st = read_scale(ck, f->path, scale, grid, nb * per);
            for (int64_t b = 0; !st && b < (v->rows + bn - 1) / bn; b++) {
                const float *src = grid + kvcal_tensor_view_row(v, b * bn) / bn * per;
                if (q->w == KVCAL_FP8W_CHANNEL)
                    scales[row + b] = *src;
                else
                    memcpy(scales + (row / bn + b) * ld, src, sizeof(float) * (size_t)kb);
            }
        }
        if (!st && s->input_scale) {
            float in;
            snprintf(scale, sizeof scale, "%s.input_scale", module);
            st = read_scale(ck, f->path, scale, &in, 1);
            p->input_scale = j == 0 || in > p->input_scale ? in : p->input_scale;
        }
        row += v->rows;
    }
    free(grid);
    int differ = 0;
    if (!st)
        st = fused_scales(f, ck, d, layer, w, q->w == KVCAL_FP8W_TENSOR ? ws[0] : 0.0f,
                          &smax, &differ, &p->input_scale);
    if (st || q->w != KVCAL_FP8W_TENSOR)
        return st;
    /* one scale for the fused weight: vLLM requantizes the shards to the
     * largest (compressed-tensors and fp8: unless the checkpoint fused
     * them itself; ModelOpt: where the shards' scales differ) */
    for (int j = 1; j < p->n; j++)
        differ |= ws[j] != ws[0];
    /* the experts' gate/up always, their down never
     * (process_fp8_weight_tensor_strategy_moe) */
    p->mapped = d->arch->weights[w].per_expert ? p->n > 1
                : kvcal_weight_quant_requant(f->wq) == KVCAL_WQ_REQUANT_ALWAYS
                    ? !fused_on_disk(&part[0])
                    : differ;
    for (int j = 0; p->mapped && j < p->n; j++)
        for (int b = 0; b < 256; b++)
            p->map[j][b] = kvcal_fp8_requant((uint8_t)b, ws[j], smax);
    scales[0] = smax;
    scales[1] = scales[2] = scales[3] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        scales[4 + r] = smax;
    return KVCAL_OK;
}

kvcal_status kvcal_model_fp8_dequantize(const kvcal_model_fp8_t *f,
                                        const kvcal_checkpoint_t *ck,
                                        const kvcal_model_desc *d, int layer,
                                        kvcal_weight w, float *out, float *scratch,
                                        float *input_scale)
{
    long long rows, cols;
    kvcal_model_weight_shape(d, w, &rows, &cols);
    const int copies = kvcal_model_weight_copies(d, w);
    const kvcal_fp8_linear *q = &d->fp8[w];
    *input_scale = 0.0f;
    /* the experts one after another, each with its own scales; one input
     * scale for all, the largest (vLLM's w13_input_scale.max()) */
    for (int e = 0; e < copies; e++) {
        kvcal_fp8_parts p;
        kvcal_status st = kvcal_model_fp8_get(f, ck, d, layer, w, e, &p, scratch);
        if (st)
            return st;
        int64_t r0 = 0;
        for (int j = 0; j < p.n; j++) {
            float lut[256];
            for (int b = 0; b < 256; b++)
                lut[b] = kvcal_fp8_e4m3_to_float(p.mapped ? p.map[j][b] : (uint8_t)b);
            const kvcal_tensor_view *v = &p.part[j];
            const int64_t r1 = r0 + v->rows;
            /* a scale per run of columns: the row's, or its block's */
            const int64_t run = q->w == KVCAL_FP8W_BLOCK ? q->block_k : cols;
            for (int64_t r = r0; r < r1; r++) {
                const uint8_t *src =
                    (const uint8_t *)v->data + kvcal_tensor_view_row(v, r - r0) * cols;
                for (int64_t c0 = 0; c0 < cols; c0 += run) {
                    const float sc = kvcal_fp8_weight_scale_at(q, scratch, r, c0, cols);
                    const int64_t c1 = c0 + run < cols ? c0 + run : cols;
                    for (int64_t c = c0; c < c1; c++)
                        out[r * cols + c] = lut[src[c]] * sc;
                }
            }
            r0 = r1;
        }
        out += rows / copies * cols;
        *input_scale = p.input_scale > *input_scale ? p.input_scale : *input_scale;
    }
    return KVCAL_OK;
}
