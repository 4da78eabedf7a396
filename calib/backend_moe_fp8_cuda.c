/* calib/backend_moe_fp8_cuda.c: the cuda backend's FP8 experts
 * (desc->fp8[KVCAL_W_EXPERT_GATE_UP] and [KVCAL_W_EXPERT_DOWN]). kvcal's
 * grouped GEMMs are bf16: the experts of the layer in use are dequantized
 * once into bf16 (e4m3 times its scale, rounded once), and the input of
 * each grouped GEMM is quantized and dequantized as the engine's fused MoE
 * quantizes it (core/fp8_linear.h's rules: the static input scale, per
 * token, per group; in one pass, kvcal_fp8_fake_quant_launch, where its
 * shapes allow), so that each product is the engine's FP8 product within
 * bf16's rounding of its two operands. The rules and their vLLM
 * sources: schemas/README.md, "FP8 weights". */
#include <string.h>

#include "calib/cuda_backend.h"

/* Expert e of per-expert FP8 weight w of the layer in use. */
static kvcal_fp8_weight expert_weight(const cuda_backend *r, kvcal_weight w, int e)
{
    const kvcal_model_desc *d = r->base.desc;
    long long rows, cols;
    kvcal_model_weight_shape(d, w, &rows, &cols);
    rows /= r->E;
    const int64_t per = kvcal_model_fp8_scales(d, w) / r->E;
    const unsigned char *at = r->layer_weights;
    kvcal_fp8_weight fw = {at + r->lay.off[w] + (size_t)(e * rows * cols),
                           (const float *)(at + r->lay.scale_off[w]) + e * per,
                           r->lay.fp8[w].a == KVCAL_FP8A_STATIC
                               ? (const float *)(at + r->lay.input_off[w])
                               : NULL,
                           r->lay.fp8[w]};
    if (r->w8a16) /* served weight-only (kvcal_cuda_fp8_activations) */
        fw.f.a = KVCAL_FP8A_NONE;
    return fw;
}

/* Floats of the scales of `rows` activations of k columns quantized as w's
 * inputs are. */
static size_t act_scales(const kvcal_fp8_linear *f, size_t rows, int k)
{
    return rows * (f->a == KVCAL_FP8A_GROUP ? ((size_t)k + f->group - 1) / f->group : 1);
}

int kvcal_cuda_moe_fp8_quantizes(const cuda_backend *r, kvcal_weight w)
{
    const kvcal_fp8_linear *f = &r->base.desc->fp8[w];
    return f->w != KVCAL_FP8W_NONE && f->a != KVCAL_FP8A_NONE && !r->w8a16;
}

void kvcal_cuda_moe_fp8_bytes(const cuda_backend *r, size_t N, size_t capacity,
                              size_t bytes[4])
{
    const kvcal_model_desc *d = r->base.desc;
    const kvcal_fp8_linear *gu = &d->fp8[KVCAL_W_EXPERT_GATE_UP],
                           *down = &d->fp8[KVCAL_W_EXPERT_DOWN];
    memset(bytes, 0, 4 * sizeof *bytes);
    for (int i = 0; i < 2; i++) {
        const kvcal_weight w = i ? KVCAL_W_EXPERT_DOWN : KVCAL_W_EXPERT_GATE_UP;
        long long rows, cols;
        kvcal_model_weight_shape(d, w, &rows, &cols);
        if (d->fp8[w].w != KVCAL_FP8W_NONE)
            bytes[0] += (size_t)rows * (size_t)cols * sizeof(kvcal_bf16);
    }
    const int quant_gu = kvcal_cuda_moe_fp8_quantizes(r, KVCAL_W_EXPERT_GATE_UP),
              quant_down = kvcal_cuda_moe_fp8_quantizes(r, KVCAL_W_EXPERT_DOWN);
    /* the quantized bytes only where the one-pass kernel does not run; the
       gate/up's input the tokens' (N rows, quantized into bytes[3]) or,
       weighted on their input (Llama 4's), the experts' rows, quantized in
       place */
    const int weighted = d->moe_input_weighted;
    const size_t gu_rows = weighted ? capacity : N;
    const int bytes_gu = quant_gu && !kvcal_fp8_fake_quant_fits(r->D, gu->a, gu->group),
              bytes_down =
                  quant_down && !kvcal_fp8_fake_quant_fits(r->MI, down->a, down->group);
    const size_t in = bytes_gu ? gu_rows * (size_t)r->D : 0,
                 mid = bytes_down ? capacity * (size_t)r->MI : 0;
    bytes[1] = in > mid ? in : mid;
    const size_t s_in = bytes_gu ? act_scales(gu, gu_rows, r->D) : 0,
                 s_mid = bytes_down ? act_scales(down, capacity, r->MI) : 0;
    bytes[2] = (s_in > s_mid ? s_in : s_mid) * sizeof(float);
    bytes[3] = quant_gu && !weighted ? N * (size_t)r->D * sizeof(kvcal_bf16) : 0;
}

kvcal_status kvcal_cuda_moe_fp8_weights(cuda_backend *r)
{
    kvcal_status st = KVCAL_OK;
    if (r->moe_w_layer == r->layer)
        return KVCAL_OK;
    const kvcal_model_desc *d = r->base.desc;
    kvcal_bf16 *out = r->moe_wd;
    for (int i = 0; i < 2; i++) {
        const kvcal_weight w = i ? KVCAL_W_EXPERT_DOWN : KVCAL_W_EXPERT_GATE_UP;
        long long rows, cols;
        kvcal_model_weight_shape(d, w, &rows, &cols);
        if (d->fp8[w].w == KVCAL_FP8W_NONE)
            continue;
        rows /= r->E;
        r->moe_w[i] = out;
        for (int e = 0; e < r->E; e++, out += rows * cols) {
            const kvcal_fp8_weight fw = expert_weight(r, w, e);
            TRY(kvcal_fp8_dequant_weight_launch(out, &fw, (int)rows, (int)cols,
                                                r->stream));
        }
    }
    r->moe_w_layer = r->layer;
fail:
    return st;
}

kvcal_status kvcal_cuda_moe_fp8_input(cuda_backend *r, kvcal_weight w, kvcal_bf16 *out,
                                      const kvcal_bf16 *x, int rows, int k)
{
    const kvcal_fp8_weight fw = expert_weight(r, w, 0);
    if (kvcal_fp8_fake_quant_fits(k, fw.f.a, fw.f.group))
        return kvcal_fp8_fake_quant_launch(out, x, rows, k, fw.f.a, fw.f.group,
                                           fw.input_scale, r->stream);
    kvcal_status st = kvcal_fp8_quant_act_launch(r->moe_xq, r->moe_xs, x, rows, k, fw.f.a,
                                                 fw.f.group, fw.input_scale, r->stream);
    return st ? st
              : kvcal_fp8_dequant_act_launch(out, r->moe_xq, r->moe_xs, rows, k, fw.f.a,
                                             fw.f.group, r->stream);
}
