/* calib/kv_sim.c: the simulated KV cache (see kv_sim.h). */
#include "calib/kv_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

struct kvcal_kv_sim {
    kvcal_backend *be;
    kvcal_kv_sim_mode mode;
    kvcal_kv_format format;
    kvcal_kv_rounding rounding;
    int layers, kv_heads;
    float *scales[2];            /* (layers, kv_heads) static scales, backend memory */
    float *zeros[2];             /* (layers, kv_heads) INT8_ASYM zero points, or NULL */
    float *q_scale;              /* (layers, kv_heads) host copy of the query's scales,
                                    or NULL */
    kvcal_kv_scaler_t **scalers; /* (layers) first-batch scalers */
    unsigned char *mask;         /* (layers) simulated or exact; NULL: all simulated */
};

/* The e4m3 scale (absmax / 448) of (layer, head)'s K (kv 0) or V of a set
 * of any format. */
static float e4m3_scale_of(const kvcal_scales_t *s, int l, int h, int kv)
{
    if (s->format == KVCAL_KV_FORMAT_INT8_ASYM)
        return (float)((double)kvcal_scales_head_range_absmax(s, l, h, kv) /
                       KVCAL_FP8_E4M3_MAX);
    const float x = (kv ? s->v_head : s->k_head)[kvcal_scales_index(s, l, h)];
    const double to_e4m3 =
        (double)kvcal_scales_format_qmax(s->format) / KVCAL_FP8_E4M3_MAX;
    return to_e4m3 == 1.0 ? x : (float)(x * to_e4m3);
}

void kvcal_kv_sim_static_scales(const kvcal_scales_t *scales, kvcal_kv_scales_kind kind,
                                int layers, int kv_heads, float *k_scale, float *v_scale)
{
    for (int l = 0; l < layers; l++) {
        float k = 1.0f, v = 1.0f;
        for (int h = 0; kind == KVCAL_KV_SCALES_TENSOR && h < kv_heads; h++) {
            const float hk = e4m3_scale_of(scales, l, h, 0),
                        hv = e4m3_scale_of(scales, l, h, 1);
            k = h == 0 || hk > k ? hk : k;
            v = h == 0 || hv > v ? hv : v;
        }
        for (int h = 0; h < kv_heads; h++) {
            const int i = l * kv_heads + h;
            const int head = kind == KVCAL_KV_SCALES_HEAD;
            k_scale[i] = head ? e4m3_scale_of(scales, l, h, 0) : k;
            v_scale[i] = head ? e4m3_scale_of(scales, l, h, 1) : v;
        }
    }
}

const kvcal_kv_sim_cache_mode kvcal_kv_sim_cache_modes[KVCAL_KV_SIM_CACHE_MODES] = {
    {"fp8-e5m2", "e5m2 cast, no scale (vLLM's and sglang's fp8_e5m2)", KVCAL_KV_SIM_CAST,
     KVCAL_KV_SCALES_UNIT, KVCAL_KV_FORMAT_FP8_E5M2, KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"int8-static-tensor",
     "int8, one K and one V scale per layer (absmax / 127) from --scales",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_TENSOR, KVCAL_KV_FORMAT_INT8,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"int8-static-head", "int8, per-head K and V scales (absmax / 127) from --scales",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_HEAD, KVCAL_KV_FORMAT_INT8,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"int8-dynamic", "int8, a scale per token and kv head (vLLM's int8_per_token_head)",
     KVCAL_KV_SIM_DYNAMIC, KVCAL_KV_SCALES_UNIT, KVCAL_KV_FORMAT_INT8,
     KVCAL_KV_ROUND_TOWARD_ZERO, 0},
    {"int8-asym-dynamic",
     "uint8 with a zero point per token and kv head (LMDeploy's quant_policy=8)",
     KVCAL_KV_SIM_DYNAMIC, KVCAL_KV_SCALES_UNIT, KVCAL_KV_FORMAT_INT8_ASYM,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"int8-asym-static",
     "int8 with zero points, a scale and an offset per kv head from --scales "
     "(calibrate --kv-dtype int8_asym; vllm-ascend's C8)",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_HEAD, KVCAL_KV_FORMAT_INT8_ASYM,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"nvfp4-static-tensor",
     "NVFP4, one global K and V scale per layer (amax / (6 * 448)) from --scales",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_TENSOR, KVCAL_KV_FORMAT_NVFP4,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"nvfp4-static-head", "NVFP4, a global scale per kv head from --scales",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_HEAD, KVCAL_KV_FORMAT_NVFP4,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0},
    {"fp8-attention",
     "static-tensor e4m3 K/V and the query in e4m3 under q_scale (per kv-head group "
     "where the set has per-head ones; 1.0 without one, as vLLM), as FlashAttention 3 "
     "computes",
     KVCAL_KV_SIM_STATIC, KVCAL_KV_SCALES_TENSOR, KVCAL_KV_FORMAT_FP8_E4M3,
     KVCAL_KV_ROUND_NEAREST_EVEN, 1},
    {"fp8-ds-mla",
     "MLA models: vLLM's fp8_ds_mla, the latent in e4m3 under a dynamic scale per 128 "
     "values, the RoPE part in bf16 (FlashMLA's sparse backend)",
     KVCAL_KV_SIM_DS_MLA, KVCAL_KV_SCALES_UNIT, KVCAL_KV_FORMAT_FP8_E4M3,
     KVCAL_KV_ROUND_NEAREST_EVEN, 0}};

kvcal_kv_sim_config kvcal_kv_sim_cache_mode_config(const kvcal_kv_sim_cache_mode *m,
                                                   const kvcal_scales_t *scales,
                                                   int layers, int kv_heads,
                                                   float *scratch,
                                                   kvcal_kv_sim_q_source *q_source)
{
    const size_t LH = (size_t)layers * kv_heads;
    float *ks = scratch, *vs = ks + LH, *kz = vs + LH, *vz = kz + LH, *qs = vz + LH;
    kvcal_kv_sim_config c = {
        .mode = m->mode, .format = m->format, .rounding = m->rounding};
    if (m->mode == KVCAL_KV_SIM_STATIC && m->format == KVCAL_KV_FORMAT_INT8_ASYM) {
        /* the set's own scales; offset o is the int8 code of 0, so the
         * library's uint8 code 0 stands for -(o + 128) * scale */
        for (size_t i = 0; i < LH; i++) {
            ks[i] = scales->k_head[i], vs[i] = scales->v_head[i];
            kz[i] = -(scales->k_offset[i] + 128.0f) * ks[i];
            vz[i] = -(scales->v_offset[i] + 128.0f) * vs[i];
        }
        c.k_scale = ks, c.v_scale = vs, c.k_zero = kz, c.v_zero = vz;
    } else if (m->mode == KVCAL_KV_SIM_STATIC) {
        kvcal_kv_sim_static_scales(scales, m->kind, layers, kv_heads, ks, vs);
        c.k_scale = ks, c.v_scale = vs;
    }
    kvcal_kv_sim_q_source src = !m->fp8_query    ? KVCAL_KV_SIM_Q_NONE
                                : scales->q_head ? KVCAL_KV_SIM_Q_PER_HEAD
                                : scales->has_q  ? KVCAL_KV_SIM_Q_PER_LAYER
                                                 : KVCAL_KV_SIM_Q_UNIT;
    const int G = scales->num_q_heads / kv_heads; /* query heads per kv head */
    for (int l = 0; src != KVCAL_KV_SIM_Q_NONE && l < layers; l++)
        for (int g = 0; g < kv_heads; g++) {
            float q = src == KVCAL_KV_SIM_Q_UNIT ? 1.0f : scales->q_scale[l];
            for (int j = 0; src == KVCAL_KV_SIM_Q_PER_HEAD && j < G; j++) {
                const float h =
                    scales->q_head[(size_t)l * scales->num_q_heads + g * G + j];
                q = j == 0 || h > q ? h : q;
            }
            qs[(size_t)l * kv_heads + g] = q;
            c.q_scale = qs;
        }
    if (q_source)
        *q_source = src;
    return c;
}

double kvcal_kv_sim_bytes_per_token(const kvcal_model_desc *d,
                                    const kvcal_kv_sim_config *cfg)
{
    const double copies = d->mla ? 1.0 : 2.0; /* K and V, or MLA's one entry */
    const int layers = d->num_layers - d->linear_layers; /* those that cache */
    const double values = copies * layers * d->num_kv_heads * d->head_dim;
    const double rows = copies * layers * d->num_kv_heads;
    if (cfg->mode == KVCAL_KV_SIM_EXACT)
        return 2.0 * values;
    if (cfg->mode == KVCAL_KV_SIM_DS_MLA)
        return (double)layers * (d->kv_lora_rank + 4.0 * ((d->kv_lora_rank + 127) / 128) +
                                 2.0 * d->qk_rope_head_dim);
    double b = (double)kvcal_kv_format_row_bytes(cfg->format, d->head_dim) * rows;
    if (cfg->mode == KVCAL_KV_SIM_DYNAMIC)
        b += rows * sizeof(float) * (cfg->format == KVCAL_KV_FORMAT_INT8_ASYM ? 2 : 1);
    return b;
}

/* The format's static scale of an e4m3 scale s (absmax / 448). */
static float format_scale(kvcal_kv_format f, float s)
{
    return (float)((double)s * KVCAL_FP8_E4M3_MAX / kvcal_scales_format_qmax(f));
}

kvcal_status kvcal_kv_sim_create(kvcal_backend *be, const kvcal_kv_sim_config *cfg,
                                 kvcal_kv_sim_t **out)
{
    *out = NULL;
    const kvcal_model_desc *d = be->desc;
    const int L = d->num_layers, H = d->num_kv_heads,
              stat = cfg->mode == KVCAL_KV_SIM_STATIC;
    if (cfg->mode < KVCAL_KV_SIM_STATIC || cfg->mode > KVCAL_KV_SIM_DS_MLA)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "eval: unknown cache mode %d",
                          (int)cfg->mode);
    if ((cfg->mode == KVCAL_KV_SIM_DS_MLA && !d->mla) || (d->mla && cfg->q_scale))
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "eval: %s",
                          d->mla ? "an MLA model's query in FP8 is vLLM's "
                                   "absorbed query (q_nope W_UK, q_pe), which "
                                   "kvcal does not compute"
                                 : "fp8-ds-mla is the cache of MLA models "
                                   "(DeepSeek-V2/V3, Kimi K2)");
    const int e4m3 = cfg->format == KVCAL_KV_FORMAT_FP8_E4M3;
    if ((cfg->mode == KVCAL_KV_SIM_CAST) != (cfg->format == KVCAL_KV_FORMAT_FP8_E5M2) ||
        (cfg->mode == KVCAL_KV_SIM_FIRST_BATCH && !e4m3) ||
        (cfg->format == KVCAL_KV_FORMAT_NVFP4 && !stat) ||
        kvcal_kv_format_row_bytes(cfg->format, d->head_dim) == 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "eval: cache mode %d does not apply to format %d (head_dim %d)",
                          (int)cfg->mode, (int)cfg->format, d->head_dim);
    if (stat ? !(cfg->k_scale && cfg->v_scale) : cfg->k_scale || cfg->v_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "eval: mode %d, k_scale %s, v_scale %s: the static mode "
                          "takes both, the other modes neither",
                          (int)cfg->mode, cfg->k_scale ? "set" : "NULL",
                          cfg->v_scale ? "set" : "NULL");
    for (int i = 0; stat && i < L * H; i++)
        if (!(isfinite(cfg->k_scale[i]) && cfg->k_scale[i] > 0.0f &&
              isfinite(cfg->v_scale[i]) && cfg->v_scale[i] > 0.0f))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "eval: layer %d kv head %d: scales K %g, V %g: static "
                              "scales must be finite and > 0",
                              i / H, i % H, (double)cfg->k_scale[i],
                              (double)cfg->v_scale[i]);
    if (cfg->q_scale && !e4m3)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "eval: a query in FP8 goes with an e4m3 "
                                                 "cache");
    for (int i = 0; cfg->q_scale && i < L * H; i++)
        if (!(isfinite(cfg->q_scale[i]) && cfg->q_scale[i] > 0.0f))
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "eval: layer %d kv-head group %d: q_scale %g: must be "
                              "finite and > 0",
                              i / H, i % H, (double)cfg->q_scale[i]);
    const int zeros = cfg->format == KVCAL_KV_FORMAT_INT8_ASYM && stat;
    if (zeros ? !(cfg->k_zero && cfg->v_zero) : cfg->k_zero || cfg->v_zero)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "eval: static int8 with zero points takes k_zero and v_zero, "
                          "the other modes neither");
    for (int i = 0; zeros && i < L * H; i++)
        if (!(isfinite(cfg->k_zero[i]) && isfinite(cfg->v_zero[i])))
            return kvcal_fail(
                KVCAL_ERR_INVALID_ARG,
                "eval: layer %d kv head %d: zero points K %g, V %g: must be "
                "finite",
                i / H, i % H, (double)cfg->k_zero[i], (double)cfg->v_zero[i]);
    kvcal_kv_sim_t *s = calloc(1, sizeof *s);
    if (!s)
        return kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
    s->be = be, s->mode = cfg->mode, s->layers = L, s->kv_heads = H;
    s->format = cfg->format, s->rounding = cfg->rounding;
    const size_t LH = (size_t)L * H;
    float *space = NULL;
    kvcal_kv_io io;
    kvcal_status st =
        be->ops->sim_prepare(be, stat ? (zeros ? 4 : 2) * LH : 0, &space, &io);
    if (st)
        goto fail;
    if (cfg->q_scale) {
        if (!(s->q_scale = malloc(LH * sizeof *s->q_scale))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        memcpy(s->q_scale, cfg->q_scale, LH * sizeof *s->q_scale);
    }
    if (stat) {
        float *conv = malloc(4 * LH * sizeof *conv);
        if (!conv) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        /* an MLA entry is cached once, under k_scale */
        const float *vs = d->mla ? cfg->k_scale : cfg->v_scale;
        for (size_t i = 0; i < LH; i++) {
            conv[i] =
                zeros ? cfg->k_scale[i] : format_scale(cfg->format, cfg->k_scale[i]);
            conv[LH + i] = zeros ? vs[i] : format_scale(cfg->format, vs[i]);
            if (zeros)
                conv[2 * LH + i] = cfg->k_zero[i], conv[3 * LH + i] = cfg->v_zero[i];
        }
        for (int i = 0; !st && i < (zeros ? 4 : 2); i++) {
            float *dst = space + (size_t)i * LH;
            if (i < 2)
                s->scales[i] = dst;
            else
                s->zeros[i - 2] = dst;
            st = be->ops->sim_upload(be, dst, conv + (size_t)i * LH, LH);
        }
        free(conv);
        if (st)
            goto fail;
    }
    if (cfg->layers) {
        if (!(s->mask = malloc((size_t)L))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        memcpy(s->mask, cfg->layers, (size_t)L);
    }
    if (cfg->mode == KVCAL_KV_SIM_FIRST_BATCH) {
        if (!(s->scalers = calloc((size_t)L, sizeof *s->scalers))) {
            st = kvcal_fail(KVCAL_ERR_NOMEM, "eval: out of host memory");
            goto fail;
        }
        for (int l = 0; l < L; l++)
            if ((st = kvcal_kv_scaler_create(H, KVCAL_SCALER_FIRST_BATCH, 0.0f, io.device,
                                             &s->scalers[l])))
                goto fail;
    }
    *out = s;
    return KVCAL_OK;
fail:
    kvcal_kv_sim_destroy(s);
    return st;
}

void kvcal_kv_sim_destroy(kvcal_kv_sim_t *s)
{
    if (!s)
        return;
    if (s->scalers)
        for (int l = 0; l < s->layers; l++)
            kvcal_kv_scaler_destroy(s->scalers[l]);
    free(s->scalers);
    free(s->q_scale);
    free(s->mask);
    s->be->ops->sim_release(s->be);
    free(s);
}

/* The library's parameters of a format other than e4m3 at layer l. */
static kvcal_kv_qparams qparams_of(const kvcal_kv_sim_t *s, int l, const kvcal_kv_io *io)
{
    kvcal_kv_qparams q = {s->format, s->rounding, KVCAL_GRANULARITY_HEAD,
                          NULL,      NULL,        NULL,
                          NULL,      NULL,        NULL};
    if (s->mode == KVCAL_KV_SIM_STATIC) {
        q.k_scale = s->scales[0] + (size_t)l * s->kv_heads;
        q.v_scale = s->scales[1] + (size_t)l * s->kv_heads;
        if (s->zeros[0]) {
            q.k_zero = s->zeros[0] + (size_t)l * s->kv_heads;
            q.v_zero = s->zeros[1] + (size_t)l * s->kv_heads;
        }
    } else if (s->format == KVCAL_KV_FORMAT_INT8_ASYM) {
        q.k_zero_cache = io->zero[0], q.v_zero_cache = io->zero[1];
    }
    return q;
}

/* K and V of the batch into the scratch cache under the mode's scales. */
static kvcal_status quantize(kvcal_kv_sim_t *s, int l, const kvcal_kv_io *io)
{
    const kvcal_kv_batch *b = &io->batch;
    const kvcal_kv_cache *c = &io->cache;
    if (s->format != KVCAL_KV_FORMAT_FP8_E4M3) {
        kvcal_kv_qparams q = qparams_of(s, l, io);
        return io->device ? kvcal_kv_quantize_fmt_launch(b, c, &q, io->stream)
                          : kvcal_kv_quantize_fmt_ref(b, c, &q);
    }
    switch (s->mode) {
    case KVCAL_KV_SIM_STATIC: {
        const float *ks = s->scales[0] + (size_t)l * s->kv_heads;
        const float *vs = s->scales[1] + (size_t)l * s->kv_heads;
        return io->device
                   ? kvcal_kv_quantize_static_launch(b, c, KVCAL_GRANULARITY_HEAD, ks, vs,
                                                     io->stream)
                   : kvcal_kv_quantize_static_ref(b, c, KVCAL_GRANULARITY_HEAD, ks, vs);
    }
    case KVCAL_KV_SIM_DYNAMIC:
        return io->device ? kvcal_kv_quantize_dynamic_launch(b, c, io->stream)
                          : kvcal_kv_quantize_dynamic_ref(b, c);
    default:
        return io->device
                   ? kvcal_kv_scaler_quantize_launch(s->scalers[l], b, c, io->stream)
                   : kvcal_kv_scaler_quantize_ref(s->scalers[l], b, c);
    }
}

kvcal_status kvcal_kv_sim_cache_point(kvcal_kv_sim_t *s, int layer, const kvcal_op *attn)
{
    kvcal_backend *be = s->be;
    kvcal_kv_io io;
    if (s->mask && !s->mask[layer])
        return KVCAL_OK;
    if (!attn)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "layer %d: a cache point in a layer without an attention op",
                          layer);
    kvcal_status st = be->ops->sim_attend_exact(be, attn);
    if (!st && s->mode == KVCAL_KV_SIM_DS_MLA) {
        st = be->ops->sim_ds_mla(be, layer);
        return st ? kvcal_fail_context(st, "layer %d: ", layer) : KVCAL_OK;
    }
    if (!st)
        st = be->ops->sim_view(be, &io);
    if (!st)
        st = quantize(s, layer, &io);
    if (!st) {
        kvcal_kv_qparams q = qparams_of(s, layer, &io);
        st = be->ops->sim_roundtrip(be, layer,
                                    s->format != KVCAL_KV_FORMAT_FP8_E4M3 ? &q : NULL);
    }
    if (!st && s->q_scale)
        st = be->ops->sim_q_roundtrip(be, s->q_scale + (size_t)layer * s->kv_heads);
    return st ? kvcal_fail_context(st, "layer %d: ", layer) : KVCAL_OK;
}

kvcal_status kvcal_kv_sim_after_attention(kvcal_kv_sim_t *s, int layer,
                                          const kvcal_op *op)
{
    if (s->mask && !s->mask[layer])
        return KVCAL_OK;
    return s->be->ops->sim_attention_error(s->be, op, layer);
}

kvcal_status kvcal_kv_sim_collect(kvcal_kv_sim_t *s, kvcal_eval_layer_sums *sums)
{
    return s->be->ops->sim_collect(s->be, sums);
}
