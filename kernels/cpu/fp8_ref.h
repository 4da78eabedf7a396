/* kernels/cpu/fp8_ref.h: CPU reference of the ops of a served FP8 linear
 * layer (core/fp8_linear.h): the engine's activation quantization, the
 * weight's dequantization and the layer itself. Pointers and sizes only;
 * row-major; the oracles of kernels/cuda/fp8_linear.cu (same stems). */
#ifndef KVCAL_KERNELS_CPU_FP8_REF_H
#define KVCAL_KERNELS_CPU_FP8_REF_H

#include <stdint.h>

#include "core/fp8_linear.h"

/* Quantizes x (rows, cols) as the engine does under mode (not NONE) into q
 * (rows, cols) e4m3 bytes and the scales it used: STATIC with
 * static_scale, scales[r] = static_scale (r < rows); TOKEN scales[r], the
 * row's; GROUP scales[g * rows + r] for the g-th group of `group` columns
 * (cuBLASLt's VEC128 layout: row fastest), ceil(cols / group) of them. */
void kvcal_fp8_quant_act_ref(uint8_t *q, float *scales, const float *x, int64_t rows,
                             int cols, kvcal_fp8_act_scale mode, int group,
                             float static_scale);

/* SwiGLU with the quantization above as its epilogue: act (rows, n) =
 * silu(gate) rounded to bf16, times up, rounded to bf16 (the CUDA runner's
 * arithmetic), gate and up the two halves of each row of gate_up (rows,
 * 2n); then act quantized into q and scales as kvcal_fp8_quant_act_ref
 * does. act is scratch the caller owns (rows * n floats). */
void kvcal_fp8_swiglu_quant_ref(uint8_t *q, float *scales, float *act,
                                const float *gate_up, int64_t rows, int n,
                                kvcal_fp8_act_scale mode, int group, float static_scale);

/* add + RMSNorm with the quantization above as its epilogue: residual
 * (rows, dim) += delta (NULL: none), each sum rounded to bf16 (the CUDA
 * runner's residual stream); act (rows, dim) = residual * rsqrt(mean of
 * squares + eps) rounded to bf16, times w (dim), rounded to bf16 (the CUDA
 * runner's arithmetic); then act quantized into q and scales as
 * kvcal_fp8_quant_act_ref does. act is scratch the caller owns. */
void kvcal_fp8_add_rmsnorm_quant_ref(uint8_t *q, float *scales, float *act,
                                     float *residual, const float *delta, const float *w,
                                     int64_t rows, int dim, float eps,
                                     kvcal_fp8_act_scale mode, int group,
                                     float static_scale);

/* out (rows, cols) = x quantized as above and dequantized (q * scale, in
 * fp32): what the FP8 GEMM multiplies. mode NONE copies x. out may be x. */
void kvcal_fp8_fake_quant_ref(float *out, const float *x, int64_t rows, int cols,
                              kvcal_fp8_act_scale mode, int group, float static_scale);

/* w (rows, cols) fp32 = e4m3 q (rows, cols) times its scale in the layout
 * of core/fp8_linear.h (scales, granularity f->w). */
void kvcal_fp8_dequant_weight_ref(float *w, const uint8_t *q, const float *scales,
                                  const kvcal_fp8_linear *f, int64_t rows, int64_t cols);

/* out (rows, n) = the served FP8 linear layer of x (rows, k): x quantized
 * as f->a says (static input_scale), times the dequantized weight wq (n, k)
 * with scales w_scales, plus bias (n) or NULL; fp32 accumulation. scratch
 * holds rows * k + n * k floats. */
void kvcal_fp8_linear_ref(float *out, const float *x, const uint8_t *wq,
                          const float *w_scales, float input_scale,
                          const kvcal_fp8_linear *f, const float *bias, int rows, int k,
                          int n, float *scratch);

#endif
