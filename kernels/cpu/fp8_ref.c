/* kernels/cpu/fp8_ref.c: CPU reference of the FP8 linear layer's ops (see
 * fp8_ref.h). */
#include "kernels/cpu/fp8_ref.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/bf16.h"

/* One row's absmax over cols [c0, c1). */
static float row_absmax(const float *x, int c0, int c1)
{
    float m = 0.0f;
    for (int c = c0; c < c1; c++)
        m = fmaxf(m, fabsf(x[c]));
    return m;
}

void kvcal_fp8_quant_act_ref(uint8_t *q, float *scales, const float *x, int64_t rows,
                             int cols, kvcal_fp8_act_scale mode, int group,
                             float static_scale)
{
    const float inv = 1.0f / static_scale;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        uint8_t *qr = q + r * cols;
        if (mode == KVCAL_FP8A_STATIC) {
            scales[r] = static_scale;
            for (int c = 0; c < cols; c++)
                qr[c] = kvcal_fp8_quant_mul(xr[c], inv);
        } else if (mode == KVCAL_FP8A_TOKEN) {
            const float s = kvcal_fp8_token_scale(row_absmax(xr, 0, cols));
            scales[r] = s;
            for (int c = 0; c < cols; c++)
                qr[c] = kvcal_fp8_quant_div(xr[c], s);
        } else {
            for (int c0 = 0, g = 0; c0 < cols; c0 += group, g++) {
                const int c1 = c0 + group < cols ? c0 + group : cols;
                const float s = kvcal_fp8_group_scale(row_absmax(xr, c0, c1));
                scales[(int64_t)g * rows + r] = s;
                for (int c = c0; c < c1; c++)
                    qr[c] = kvcal_fp8_quant_group(xr[c], s);
            }
        }
    }
}

void kvcal_fp8_swiglu_quant_ref(uint8_t *q, float *scales, float *act,
                                const float *gate_up, int64_t rows, int n,
                                kvcal_fp8_act_scale mode, int group, float static_scale)
{
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < n; c++) {
            const float g = gate_up[r * 2 * n + c], u = gate_up[r * 2 * n + n + c];
            act[r * n + c] =
                kvcal_bf16_round(kvcal_bf16_round(g / (1.0f + expf(-g))) * u);
        }
    kvcal_fp8_quant_act_ref(q, scales, act, rows, n, mode, group, static_scale);
}

void kvcal_fp8_add_rmsnorm_quant_ref(uint8_t *q, float *scales, float *act,
                                     float *residual, const float *delta, const float *w,
                                     int64_t rows, int dim, float eps,
                                     kvcal_fp8_act_scale mode, int group,
                                     float static_scale)
{
    for (int64_t r = 0; r < rows; r++) {
        float *x = residual + r * dim;
        double ss = 0.0;
        for (int c = 0; c < dim; c++) {
            if (delta)
                x[c] = kvcal_bf16_round(x[c] + delta[r * dim + c]);
            ss += (double)x[c] * x[c];
        }
        const float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int c = 0; c < dim; c++)
            act[r * dim + c] = kvcal_bf16_round(kvcal_bf16_round(x[c] * inv) * w[c]);
    }
    kvcal_fp8_quant_act_ref(q, scales, act, rows, dim, mode, group, static_scale);
}

void kvcal_fp8_fake_quant_ref(float *out, const float *x, int64_t rows, int cols,
                              kvcal_fp8_act_scale mode, int group, float static_scale)
{
    const float inv = 1.0f / static_scale;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        if (mode == KVCAL_FP8A_NONE) {
            memmove(o, xr, sizeof(float) * (size_t)cols);
        } else if (mode == KVCAL_FP8A_STATIC) {
            for (int c = 0; c < cols; c++)
                o[c] = kvcal_fp8_e4m3_to_float(kvcal_fp8_quant_mul(xr[c], inv)) *
                       static_scale;
        } else if (mode == KVCAL_FP8A_TOKEN) {
            const float s = kvcal_fp8_token_scale(row_absmax(xr, 0, cols));
            for (int c = 0; c < cols; c++)
                o[c] = kvcal_fp8_e4m3_to_float(kvcal_fp8_quant_div(xr[c], s)) * s;
        } else {
            for (int c0 = 0; c0 < cols; c0 += group) {
                const int c1 = c0 + group < cols ? c0 + group : cols;
                const float s = kvcal_fp8_group_scale(row_absmax(xr, c0, c1));
                for (int c = c0; c < c1; c++)
                    o[c] = kvcal_fp8_e4m3_to_float(kvcal_fp8_quant_group(xr[c], s)) * s;
            }
        }
    }
}

void kvcal_fp8_dequant_weight_ref(float *w, const uint8_t *q, const float *scales,
                                  const kvcal_fp8_linear *f, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            w[r * cols + c] = kvcal_fp8_e4m3_to_float(q[r * cols + c]) *
                              kvcal_fp8_weight_scale_at(f, scales, r, c, cols);
}

void kvcal_fp8_linear_ref(float *out, const float *x, const uint8_t *wq,
                          const float *w_scales, float input_scale,
                          const kvcal_fp8_linear *f, const float *bias, int rows, int k,
                          int n, float *scratch)
{
    float *xd = scratch, *wd = scratch + (int64_t)rows * k;
    kvcal_fp8_fake_quant_ref(xd, x, rows, k, f->a, f->group, input_scale);
    kvcal_fp8_dequant_weight_ref(wd, wq, w_scales, f, n, k);
    kvcal_matmul_ref(out, xd, wd, bias, rows, k, n);
}
