/* kernels/cuda/fp8_linear.cu: FP8 linear layers as an engine serves them
 * (kernels/cuda/ops.h, "FP8 linear layers"): the activation quantization
 * kernels (static per-tensor, dynamic per-token, dynamic per-token group;
 * each element through core/fp8_linear.h, so the bytes and scales equal
 * kvcal_fp8_quant_act_ref's), SwiGLU with that quantization as its
 * epilogue, the dequantization kernels of the fallback, and the dispatch
 * between cuBLASLt's FP8 GEMM and that fallback. */
#include <cuda_bf16.h>

#include "core/fp8_linear.h"
#include "kernels/cuda/bf16_round.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/fp8_quant_row.cuh"
#include "kernels/cuda/ops.h"

enum { ROW_THREADS = 256, VEC = 8 };

/* Up to VEC values of row xr from column c (fewer at the row's end). */
static __device__ __forceinline__ int load_vec(const __nv_bfloat16 *xr, int c, int k,
                                               float *v)
{
    const int n = k - c < VEC ? k - c : VEC;
    for (int i = 0; i < n; i++)
        v[i] = __bfloat162float(xr[c + i]);
    return n;
}

/* Any row (k off 8, unaligned buffers, k past what registers hold): one row a block,
 * STATIC (scale *input_scale, x times its reciprocal) or TOKEN (the row's absmax, x
 * divided by its scale), the row read twice. */
template <bool TOKEN>
__global__ void quant_row_kernel(uint8_t *xq, float *xs, const __nv_bfloat16 *x, int k,
                                 const float *input_scale)
{
    __shared__ float part[ROW_THREADS / 32];
    const int64_t r = blockIdx.x;
    const __nv_bfloat16 *xr = x + r * k;
    uint8_t *qr = xq + r * k;
    float v[VEC], s;
    if (TOKEN) {
        float m = 0.0f;
        for (int c = threadIdx.x * VEC; c < k; c += ROW_THREADS * VEC) {
            const int n = load_vec(xr, c, k, v);
            for (int i = 0; i < n; i++)
                m = fmaxf(m, fabsf(v[i]));
        }
        s = kvcal_fp8_token_scale(kvcal_row_max(m, ROW_THREADS, part));
    } else {
        s = *input_scale;
    }
    const float inv = 1.0f / s;
    for (int c = threadIdx.x * VEC; c < k; c += ROW_THREADS * VEC) {
        const int n = load_vec(xr, c, k, v);
        for (int i = 0; i < n; i++)
            qr[c + i] =
                TOKEN ? kvcal_fp8_quant_div(v[i], s) : kvcal_fp8_quant_mul(v[i], inv);
    }
    if (threadIdx.x == 0)
        xs[r] = s;
}

/* Rows of 16-byte words held in registers (kernels/cuda/fp8_quant_row.cuh):
 * tpr threads a row, CH words a thread, blockDim.x / tpr rows a block (a
 * group), the row read once; S groups staged ahead (S 0: a block a group). */
enum { REG_TPR_MAX = 512 };

template <kvcal_fp8_act_scale MODE, int CH, int S>
__global__ void __launch_bounds__(REG_TPR_MAX)
    quant_rows_kernel(uint8_t *xq, float *xs, const __nv_bfloat16 *x, int rows, int k,
                      int tpr, const float *input_scale)
{
    extern __shared__ uint4 stage[];
    __shared__ float part[2][REG_TPR_MAX / 32];
    const int t = threadIdx.x % tpr, rpb = blockDim.x / tpr;
    const int groups = (rows + rpb - 1) / rpb;
    auto src = [=](int g, const __nv_bfloat16 **p) {
        const int64_t r = (int64_t)g * rpb + threadIdx.x / tpr;
        p[0] = x + r * k;
        return r < rows ? k : 0;
    };
    kvcal_stage_start<S, CH, 1>(stage, groups, t, tpr, src);
    kvcal_stage_loop<S>(groups, [&](int g, int i) {
        const auto slot = kvcal_stage_slot<S, CH, 1>(stage, i, groups, src);
        const int64_t r = (int64_t)g * rpb + threadIdx.x / tpr;
        const int n = r < rows ? k : 0;
        const __nv_bfloat16 *xr = x + r * k;
        uint4 v[CH];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < n) {
                v[j] = kvcal_stage_word<S, 1>(slot, j, 0, c, xr + c);
                m = kvcal_bf16x8_absmax(v[j], m);
            }
        }
        kvcal_stage_done<S>();
        kvcal_fp8_quant_regs<MODE, CH>(v, t, tpr, n, m, xq + r * k,
                                       r < rows ? xs + r : NULL, input_scale,
                                       part[i & 1]);
    });
}

/* Words a thread holds: 4 for rows up to 16,384 values (staged two groups
 * ahead), else 16 (up to 65,536: REG_TPR_MAX threads; not staged). */
enum { CH_SHORT = 4, CH_LONG = 16, QUANT_STAGES = 2 };

static int reg_ch(int n)
{
    return n <= REG_TPR_MAX * CH_SHORT * 8 ? CH_SHORT : CH_LONG;
}

static int held(int n)
{
    return n <= REG_TPR_MAX * CH_LONG * 8;
}

/* Threads a row of n values held reg_ch(n) words a thread: a power of two
 * from `least` on. */
static int reg_tpr(int n, int least)
{
    int t = least;
    while (t < REG_TPR_MAX && (int64_t)t * reg_ch(n) * 8 < n)
        t *= 2;
    return t;
}

template <kvcal_fp8_act_scale MODE, int CH, int S>
static kvcal_status quant_rows_ch(uint8_t *xq, float *xs, const __nv_bfloat16 *x,
                                  int rows, int k, const float *input_scale,
                                  cudaStream_t stream)
{
    const int tpr = reg_tpr(k, 32), block = tpr < 256 ? 256 : tpr, rpb = block / tpr;
    const size_t smem = (size_t)S * kvcal_stage_words<CH, 1>(block) * sizeof(uint4);
    unsigned grid;
    kvcal_status st = kvcal_stage_grid(quant_rows_kernel<MODE, CH, S>, block, smem,
                                       (rows + rpb - 1) / rpb, &grid);
    if (st)
        return st;
    quant_rows_kernel<MODE, CH, S>
        <<<grid, block, smem, stream>>>(xq, xs, x, rows, k, tpr, input_scale);
    return KVCAL_OK;
}

template <kvcal_fp8_act_scale MODE>
static kvcal_status quant_rows(uint8_t *xq, float *xs, const __nv_bfloat16 *x, int rows,
                               int k, const float *input_scale, cudaStream_t stream)
{
    if (reg_ch(k) == CH_SHORT)
        return quant_rows_ch<MODE, CH_SHORT, QUANT_STAGES>(xq, xs, x, rows, k,
                                                           input_scale, stream);
    return quant_rows_ch<MODE, CH_LONG, 0>(xq, xs, x, rows, k, input_scale, stream);
}

/* One warp per (row, group of `group` columns). */
__global__ void quant_group_kernel(uint8_t *xq, float *xs, const __nv_bfloat16 *x,
                                   int rows, int k, int group)
{
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, ng = (k + group - 1) / group;
    if (warp >= (int64_t)rows * ng)
        return;
    const int64_t r = warp / ng;
    const int g = (int)(warp % ng), c0 = g * group, c1 = c0 + group < k ? c0 + group : k;
    const __nv_bfloat16 *xr = x + r * k;
    float m = 0.0f;
    for (int c = c0 + lane; c < c1; c += 32)
        m = fmaxf(m, fabsf(__bfloat162float(xr[c])));
    const float s = kvcal_fp8_group_scale(kvcal_warp_max(m));
    for (int c = c0 + lane; c < c1; c += 32)
        xq[r * k + c] = kvcal_fp8_quant_group(__bfloat162float(xr[c]), s);
    if (lane == 0)
        xs[(int64_t)g * rows + r] = s;
}

extern "C" kvcal_status kvcal_fp8_quant_act_launch(uint8_t *xq, float *xs,
                                                   const kvcal_bf16 *x, int rows, int k,
                                                   kvcal_fp8_act_scale mode, int group,
                                                   const float *input_scale,
                                                   cudaStream_t stream)
{
    if (rows < 0 || k <= 0 || !xq || !xs || !x ||
        (mode == KVCAL_FP8A_GROUP && group <= 0) ||
        (mode == KVCAL_FP8A_STATIC && !input_scale) || mode == KVCAL_FP8A_NONE)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_quant_act: rows %d, k %d, mode %d, group %d: bad arguments", rows, k,
            (int)mode, group);
    if (rows == 0)
        return KVCAL_OK;
    const __nv_bfloat16 *xb = reinterpret_cast<const __nv_bfloat16 *>(x);
    const int vec_ok = k % VEC == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)xq % 8 == 0;
    if (mode == KVCAL_FP8A_GROUP) {
        const int64_t warps = (int64_t)rows * ((k + group - 1) / group);
        quant_group_kernel<<<(unsigned)((warps + 7) / 8), 256, 0, stream>>>(
            xq, xs, xb, rows, k, group);
    } else if (vec_ok && held(k)) {
        const kvcal_status st =
            mode == KVCAL_FP8A_TOKEN
                ? quant_rows<KVCAL_FP8A_TOKEN>(xq, xs, xb, rows, k, NULL, stream)
                : quant_rows<KVCAL_FP8A_STATIC>(xq, xs, xb, rows, k, input_scale, stream);
        if (st)
            return st;
    } else if (mode == KVCAL_FP8A_TOKEN) {
        quant_row_kernel<true><<<rows, ROW_THREADS, 0, stream>>>(xq, xs, xb, k, NULL);
    } else {
        quant_row_kernel<false>
            <<<rows, ROW_THREADS, 0, stream>>>(xq, xs, xb, k, input_scale);
    }
    KVCAL_CUDA_CHECK_LAUNCH("fp8_quant_act_kernel");
    return KVCAL_OK;
}

// --- SwiGLU with the quantization as its epilogue ---------------------------------

/* 8 bf16 values moved as one 16-byte word. */
union bf16x8 {
    uint4 u;
    __nv_bfloat162 h[4];
};

/* A row a block pass of blockDim.x threads (reg_tpr(n, 128), CH words a
 * thread): the row's SwiGLU (silu(gate) rounded to bf16, times up,
 * rounded: kvcal_swiglu_launch's arithmetic) into registers as
 * kernels/cuda/fp8_quant_row.cuh lays a row out, then quantized as
 * quant_rows_kernel / quant_group_kernel quantize a bf16 row (GROUP:
 * through shared memory, a block a row). S rows of gate and up staged
 * ahead. n a multiple of 8, gate_up 16-byte and xq 8-byte aligned. */
template <kvcal_fp8_act_scale MODE, int CH, int S>
__global__ void __launch_bounds__(REG_TPR_MAX)
    swiglu_quant_kernel(uint8_t *xq, float *xs, const __nv_bfloat16 *gate_up, int rows,
                        int n, int group, const float *input_scale)
{
    extern __shared__ uint4 smem[]; // S slots, or GROUP: (n) the row's bf16
    __shared__ float part[2][REG_TPR_MAX / 32];
    __nv_bfloat16 *act = reinterpret_cast<__nv_bfloat16 *>(smem);
    const int t = threadIdx.x, tpr = blockDim.x;
    auto src = [=](int r, const __nv_bfloat16 **p) {
        p[0] = gate_up + (int64_t)r * 2 * n;
        p[1] = p[0] + n;
        return n;
    };
    kvcal_stage_start<S, CH, 2>(smem, rows, t, tpr, src);
    kvcal_stage_loop<S>(rows, [&](int r, int i) {
        const auto slot = kvcal_stage_slot<S, CH, 2>(smem, i, rows, src);
        const __nv_bfloat16 *g = gate_up + (int64_t)r * 2 * n;
        uint8_t *qr = xq + (int64_t)r * n;
        uint4 v[CH];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int c = (t + j * tpr) * 8;
            if (c < n) {
                bf16x8 a, b;
                a.u = kvcal_stage_word<S, 2>(slot, j, 0, c, g + c);
                b.u = kvcal_stage_word<S, 2>(slot, j, 1, c, g + n + c);
                for (int h = 0; h < 4; h++)
                    a.h[h] = kvcal_swiglu2_bf16(a.h[h], b.h[h]);
                v[j] = a.u;
                m = kvcal_bf16x8_absmax(a.u, m);
                if (MODE == KVCAL_FP8A_GROUP)
                    *reinterpret_cast<uint4 *>(act + c) = a.u;
            }
        }
        kvcal_stage_done<S>();
        if (MODE == KVCAL_FP8A_GROUP)
            kvcal_fp8_quant_groups(act, n, qr, xs, r, rows, group);
        else
            kvcal_fp8_quant_regs<MODE, CH>(v, t, tpr, n, m, qr, xs + r, input_scale,
                                           part[i & 1]);
    });
}

/* Shared memory of swiglu_quant_kernel per group: 227 KiB a block on
 * Hopper, at least 99 KiB from compute capability 8.6 on (n up to 50,688,
 * which the registers of a block hold too). Per token and static, rows of
 * up to 16,384 values are staged a row ahead (64 KiB at most). */
enum { SWIGLU_QUANT_SMEM_MAX = 99 * 1024, SWIGLU_STAGES = 1 };

template <kvcal_fp8_act_scale MODE, int CH, int S>
static kvcal_status swiglu_quant_ch(uint8_t *xq, float *xs, const __nv_bfloat16 *gu,
                                    int rows, int n, int group, const float *input_scale,
                                    cudaStream_t stream)
{
    const int block = reg_tpr(n, 128);
    const size_t stage = (size_t)S * kvcal_stage_words<CH, 2>(block) * sizeof(uint4);
    const size_t smem =
        MODE == KVCAL_FP8A_GROUP ? (size_t)n * sizeof(__nv_bfloat16) : stage;
    unsigned grid;
    kvcal_status st =
        kvcal_stage_grid(swiglu_quant_kernel<MODE, CH, S>, block, stage, rows, &grid);
    if (st)
        return st;
    if (!stage && smem > 48 * 1024)
        KVCAL_CUDA_TRY(cudaFuncSetAttribute(swiglu_quant_kernel<MODE, CH, S>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
    swiglu_quant_kernel<MODE, CH, S>
        <<<grid, block, smem, stream>>>(xq, xs, gu, rows, n, group, input_scale);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_swiglu_quant_kernel");
    return KVCAL_OK;
}

template <kvcal_fp8_act_scale MODE>
static kvcal_status swiglu_quant(uint8_t *xq, float *xs, const __nv_bfloat16 *gu,
                                 int rows, int n, int group, const float *input_scale,
                                 cudaStream_t stream)
{
    if (reg_ch(n) == CH_SHORT)
        return swiglu_quant_ch < MODE, CH_SHORT,
               MODE == KVCAL_FP8A_GROUP
                   ? 0
                   : SWIGLU_STAGES > (xq, xs, gu, rows, n, group, input_scale, stream);
    return swiglu_quant_ch<MODE, CH_LONG, 0>(xq, xs, gu, rows, n, group, input_scale,
                                             stream);
}

extern "C" int kvcal_fp8_swiglu_quant_fits(int n)
{
    return n > 0 && n % VEC == 0 &&
           (size_t)n * sizeof(__nv_bfloat16) <= SWIGLU_QUANT_SMEM_MAX;
}

extern "C" kvcal_status kvcal_fp8_swiglu_quant_launch(uint8_t *xq, float *xs,
                                                      const kvcal_bf16 *gate_up, int rows,
                                                      int n, kvcal_fp8_act_scale mode,
                                                      int group, const float *input_scale,
                                                      cudaStream_t stream)
{
    if (rows < 0 || !xq || !xs || !gate_up || !kvcal_fp8_swiglu_quant_fits(n) ||
        (uintptr_t)gate_up % 16 || (uintptr_t)xq % 8 ||
        (mode == KVCAL_FP8A_GROUP && group <= 0) ||
        (mode == KVCAL_FP8A_STATIC && !input_scale) || mode == KVCAL_FP8A_NONE)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_swiglu_quant: rows %d, n %d, mode %d, group %d: need "
            "buffers (gate_up 16-byte, xq 8-byte aligned), n a multiple of 8 "
            "that kvcal_fp8_swiglu_quant_fits, a mode and its scale",
            rows, n, (int)mode, group);
    if (rows == 0)
        return KVCAL_OK;
    const __nv_bfloat16 *gu = reinterpret_cast<const __nv_bfloat16 *>(gate_up);
    if (mode == KVCAL_FP8A_GROUP)
        return swiglu_quant<KVCAL_FP8A_GROUP>(xq, xs, gu, rows, n, group, NULL, stream);
    if (mode == KVCAL_FP8A_TOKEN)
        return swiglu_quant<KVCAL_FP8A_TOKEN>(xq, xs, gu, rows, n, 0, NULL, stream);
    return swiglu_quant<KVCAL_FP8A_STATIC>(xq, xs, gu, rows, n, 0, input_scale, stream);
}

// --- the fallback: dequantized bf16 -----------------------------------------------

__global__ void dequant_weight_kernel(__nv_bfloat16 *w, const uint8_t *q,
                                      const float *scales, kvcal_fp8_linear f, int64_t n,
                                      int k)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * k;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k, c = i % k;
        w[i] = __float2bfloat16_rn(kvcal_fp8_e4m3_to_float(q[i]) *
                                   kvcal_fp8_weight_scale_at(&f, scales, r, c, k));
    }
}

__global__ void dequant_act_kernel(__nv_bfloat16 *x, const uint8_t *q, const float *xs,
                                   int64_t rows, int k, int group)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * k;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k, c = i % k;
        const float s = group > 0 ? xs[c / group * rows + r] : xs[r];
        x[i] = __float2bfloat16_rn(kvcal_fp8_e4m3_to_float(q[i]) * s);
    }
}

/* 8 e4m3 values times s, each product rounded once to bf16 (the e4m3
 * values converted exactly, through fp16, by the hardware). */
static __device__ __forceinline__ uint4 dequant8(uint2 q, float s)
{
    uint4 out;
    __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(&out);
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
            (__nv_fp8x2_storage_t)(w[j / 2] >> (16 * (j % 2))), __NV_E4M3);
        const float2 v = __half22float2(*reinterpret_cast<const __half2 *>(&h));
        o[j] = __floats2bfloat162_rn(v.x * s, v.y * s);
    }
    return out;
}

/* The kernels above 8 values a thread (one 8-byte load, one 16-byte store),
 * where k and the scales' runs of columns are multiples of 8 and the
 * buffers aligned: the same values. */
__global__ void dequant_weight8_kernel(__nv_bfloat16 *w, const uint8_t *q,
                                       const float *scales, kvcal_fp8_linear f, int64_t n,
                                       int k)
{
    const int64_t k8 = k / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * k8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k8, c = (i - r * k8) * 8;
        *reinterpret_cast<uint4 *>(w + i * 8) =
            dequant8(*reinterpret_cast<const uint2 *>(q + i * 8),
                     kvcal_fp8_weight_scale_at(&f, scales, r, c, k));
    }
}

__global__ void dequant_act8_kernel(__nv_bfloat16 *x, const uint8_t *q, const float *xs,
                                    int64_t rows, int k, int group)
{
    const int64_t k8 = k / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * k8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k8, c = (i - r * k8) * 8;
        const float s = group > 0 ? xs[c / group * rows + r] : xs[r];
        *reinterpret_cast<uint4 *>(x + i * 8) =
            dequant8(*reinterpret_cast<const uint2 *>(q + i * 8), s);
    }
}

static unsigned grid_of(int64_t n)
{
    const int64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

/* Whether the 8-a-thread kernels take rows of k values with runs of `run`
 * columns under one scale (0: the whole row) at these buffers. */
static bool by_eight(const void *out, const uint8_t *q, int k, int run)
{
    return k % 8 == 0 && run % 8 == 0 && (uintptr_t)out % 16 == 0 &&
           (uintptr_t)q % 8 == 0;
}

// --- quantized and dequantized in one pass (kvcal_fp8_fake_quant_launch) -----------

/* The e4m3 bytes of the 8 bf16 values of word x in a group of scale s:
 * kvcal_fp8_quant_group's division and clamp, the hardware's rounding. */
static __device__ __forceinline__ uint2 quant8_group(uint4 x, float s)
{
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&x);
    uint32_t p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]);
        p[i] = __nv_cvt_float2_to_fp8x2(
            make_float2(fminf(fmaxf(f.x / s, -KVCAL_FP8_E4M3_MAX), KVCAL_FP8_E4M3_MAX),
                        fminf(fmaxf(f.y / s, -KVCAL_FP8_E4M3_MAX), KVCAL_FP8_E4M3_MAX)),
            __NV_SATFINITE, __NV_E4M3);
    }
    return make_uint2(p[0] | p[1] << 16, p[2] | p[3] << 16);
}

/* GROUP, `lanes` consecutive lanes a group (group / 8, a power of two up
 * to 32), each lane 8 values: the rows' words in one flat run (k a
 * multiple of the group), so that a warp's words are whole groups. */
__global__ void fake_quant_group_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                        int64_t words, int lanes)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
         i - (threadIdx.x & 31) < words; i += stride) {
        const bool ok = i < words;
        const uint4 v =
            ok ? *reinterpret_cast<const uint4 *>(x + i * 8) : make_uint4(0, 0, 0, 0);
        float m = kvcal_bf16x8_absmax(v, 0.0f);
        for (int o = lanes / 2; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float sc = kvcal_fp8_group_scale(m);
        if (ok)
            *reinterpret_cast<uint4 *>(out + i * 8) = dequant8(quant8_group(v, sc), sc);
    }
}

/* TOKEN, a block a row (FAKE_QUANT_THREADS threads, up to FAKE_QUANT_WORDS
 * words of 8 values each): the row's absmax, then x / s (a division, as
 * kvcal_fp8_quant_div). STATIC: x * (1 / s), a thread a word. */
#define FAKE_QUANT_THREADS 128
#define FAKE_QUANT_WORDS 8
__global__ void fake_quant_token_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                        int64_t rows, int k)
{
    __shared__ float part[FAKE_QUANT_THREADS / 32];
    const int k8 = k / 8, t = threadIdx.x;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint4 *xr = reinterpret_cast<const uint4 *>(x + r * k);
        uint4 v[FAKE_QUANT_WORDS];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < FAKE_QUANT_WORDS; j++) {
            const int c = t + j * FAKE_QUANT_THREADS;
            v[j] = c < k8 ? xr[c] : make_uint4(0, 0, 0, 0);
            m = kvcal_bf16x8_absmax(v[j], m);
        }
        m = kvcal_warp_max(m);
        if ((t & 31) == 0)
            part[t >> 5] = m;
        __syncthreads();
        for (int w = 0; w < FAKE_QUANT_THREADS / 32; w++)
            m = fmaxf(m, part[w]);
        __syncthreads(); /* part is written again for the next row */
        const float s = kvcal_fp8_token_scale(m);
        uint4 *o = reinterpret_cast<uint4 *>(out + r * k);
#pragma unroll
        for (int j = 0; j < FAKE_QUANT_WORDS; j++) {
            const int c = t + j * FAKE_QUANT_THREADS;
            if (c < k8)
                o[c] = dequant8(
                    kvcal_fp8_quant8<KVCAL_FP8A_TOKEN, true>(v[j], s, 1.0f / s), s);
        }
    }
}

__global__ void fake_quant_static_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *x,
                                         int64_t words, const float *input_scale)
{
    const float s = *input_scale, inv = 1.0f / s;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += (int64_t)gridDim.x * blockDim.x)
        *reinterpret_cast<uint4 *>(out + i * 8) =
            dequant8(kvcal_fp8_quant8<KVCAL_FP8A_STATIC, false>(
                         *reinterpret_cast<const uint4 *>(x + i * 8), s, inv),
                     s);
}

extern "C" int kvcal_fp8_fake_quant_fits(int k, kvcal_fp8_act_scale mode, int group)
{
    if (k <= 0 || k % 8)
        return 0;
    if (mode == KVCAL_FP8A_GROUP)
        return group >= 8 && group <= 256 && (group & (group - 1)) == 0 && k % group == 0;
    if (mode == KVCAL_FP8A_TOKEN)
        return k <= 8 * FAKE_QUANT_THREADS * FAKE_QUANT_WORDS;
    return mode == KVCAL_FP8A_STATIC;
}

extern "C" kvcal_status kvcal_fp8_fake_quant_launch(kvcal_bf16 *out, const kvcal_bf16 *x,
                                                    int rows, int k,
                                                    kvcal_fp8_act_scale mode, int group,
                                                    const float *input_scale,
                                                    cudaStream_t stream)
{
    if (!out || !x || rows < 0 || !kvcal_fp8_fake_quant_fits(k, mode, group) ||
        (uintptr_t)out % 16 || (uintptr_t)x % 16 ||
        (mode == KVCAL_FP8A_STATIC && !input_scale))
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "fp8_fake_quant: rows %d, k %d, mode %d, group %d: need 16-byte "
            "aligned rows that kvcal_fp8_fake_quant_fits and a mode's scale",
            rows, k, (int)mode, group);
    if (rows == 0)
        return KVCAL_OK;
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(out);
    const __nv_bfloat16 *xb = reinterpret_cast<const __nv_bfloat16 *>(x);
    const int64_t words = (int64_t)rows * k / 8;
    if (mode == KVCAL_FP8A_GROUP)
        fake_quant_group_kernel<<<grid_of(words), 256, 0, stream>>>(o, xb, words,
                                                                    group / 8);
    else if (mode == KVCAL_FP8A_TOKEN)
        fake_quant_token_kernel<<<(unsigned)(rows < 65535 * 16 ? rows : 65535 * 16),
                                  FAKE_QUANT_THREADS, 0, stream>>>(o, xb, rows, k);
    else
        fake_quant_static_kernel<<<grid_of(words), 256, 0, stream>>>(o, xb, words,
                                                                     input_scale);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_fake_quant_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_fp8_dequant_weight_launch(kvcal_bf16 *w,
                                                        const kvcal_fp8_weight *fw, int n,
                                                        int k, cudaStream_t stream)
{
    if (!w || !fw || !fw->q || !fw->scales || n <= 0 || k <= 0 ||
        fw->f.w == KVCAL_FP8W_NONE)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "fp8_dequant_weight: n %d, k %d", n, k);
    if (by_eight(w, fw->q, k, fw->f.w == KVCAL_FP8W_BLOCK ? fw->f.block_k : 0))
        dequant_weight8_kernel<<<grid_of((int64_t)n * k / 8), 256, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(w), fw->q, fw->scales, fw->f, n, k);
    else
        dequant_weight_kernel<<<grid_of((int64_t)n * k), 256, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(w), fw->q, fw->scales, fw->f, n, k);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_dequant_weight_kernel");
    return KVCAL_OK;
}

extern "C" kvcal_status kvcal_fp8_dequant_act_launch(kvcal_bf16 *x, const uint8_t *xq,
                                                     const float *xs, int rows, int k,
                                                     kvcal_fp8_act_scale mode, int group,
                                                     cudaStream_t stream)
{
    if (!x || !xq || !xs || rows < 0 || k <= 0 || mode == KVCAL_FP8A_NONE)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "fp8_dequant_act: rows %d, k %d", rows,
                          k);
    if (rows == 0)
        return KVCAL_OK;
    const int g = mode == KVCAL_FP8A_GROUP ? group : 0;
    if (by_eight(x, xq, k, g))
        dequant_act8_kernel<<<grid_of((int64_t)rows * k / 8), 256, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(x), xq, xs, rows, k, g);
    else
        dequant_act_kernel<<<grid_of((int64_t)rows * k), 256, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(x), xq, xs, rows, k, g);
    KVCAL_CUDA_CHECK_LAUNCH("fp8_dequant_act_kernel");
    return KVCAL_OK;
}

/* out (rows, n) += bias (n), in fp32, rounded once: the bias where
 * cuBLASLt's FP8 GEMM of the scales takes no bias epilogue. */
__global__ void add_bias_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *bias,
                                int64_t rows, int n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] =
            __float2bfloat16_rn(__bfloat162float(out[i]) + __bfloat162float(bias[i % n]));
}

// --- dispatch ------------------------------------------------------------------------

/* cuBLASLt's scale modes and pointers for w's FP8 GEMM on `path`, and
 * whether it accumulates fast (FAST: the scalar and outer-vector modes, as
 * vLLM's sm_90 CUTLASS kernels do; its block-scaled kernels promote per 128
 * as cuBLASLt's); 0 where cuBLASLt has no modes for the pair (weight-only
 * FP8, blocks other than 128 x 128) or the path is DEQUANT. */
static int gemm_modes(const kvcal_fp8_weight *w, const float *xs,
                      kvcal_fp8_gemm_path path, kvcal_gemm_scale *wm, const float **wp,
                      kvcal_gemm_scale *xm, const float **xp, int *fast)
{
    *fast = path == KVCAL_FP8_GEMM_FAST && w->f.w != KVCAL_FP8W_BLOCK;
    if (path == KVCAL_FP8_GEMM_DEQUANT)
        return 0;
    const kvcal_fp8_linear *f = &w->f;
    if (f->a == KVCAL_FP8A_NONE)
        return 0;
    if (f->w == KVCAL_FP8W_TENSOR && f->a == KVCAL_FP8A_STATIC) {
        *wm = *xm = KVCAL_GEMM_SCALE_SCALAR;
        *wp = w->scales, *xp = w->input_scale;
        return 1;
    }
    if ((f->w == KVCAL_FP8W_TENSOR || f->w == KVCAL_FP8W_CHANNEL) &&
        (f->a == KVCAL_FP8A_STATIC || f->a == KVCAL_FP8A_TOKEN)) {
        *wm = *xm = KVCAL_GEMM_SCALE_OUTER_VEC;
        *wp = w->scales + (f->w == KVCAL_FP8W_TENSOR ? 4 : 0), *xp = xs;
        return 1;
    }
    if (f->w == KVCAL_FP8W_BLOCK && f->a == KVCAL_FP8A_GROUP && f->block_n == 128 &&
        f->block_k == 128 && f->group == 128) {
        *wm = KVCAL_GEMM_SCALE_BLK128x128, *xm = KVCAL_GEMM_SCALE_VEC128;
        *wp = w->scales, *xp = xs;
        return 1;
    }
    return 0;
}

extern "C" int kvcal_fp8_linear_runs(kvcal_gemm_t *gemm, const kvcal_fp8_weight *w,
                                     kvcal_fp8_gemm_path path, int bias, int rows, int k,
                                     int n)
{
    kvcal_gemm_scale wm, xm;
    const float *wp, *xp;
    int fast;
    if (!gemm_modes(w, NULL, path, &wm, &wp, &xm, &xp, &fast)) {
        kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                   "fp8_linear: %s: no cuBLASLt FP8 GEMM (weight scales %d, activation "
                   "scales %d, blocks %d x %d)",
                   path == KVCAL_FP8_GEMM_DEQUANT ? "the dequantized path asked for"
                                                  : "scales cuBLASLt takes none of",
                   (int)w->f.w, (int)w->f.a, w->f.block_n, w->f.block_k);
        return 0;
    }
    /* as run_fp8_gemm tries them */
    for (int f = fast; f >= 0; f--)
        if (kvcal_gemm_fp8_runs(gemm, rows, k, n, bias, xm, wm, f) ||
            (bias && kvcal_gemm_fp8_runs(gemm, rows, k, n, 0, xm, wm, f)))
            return 1;
    return 0;
}

/* cuBLASLt's FP8 GEMM of w (modes and scales wm / wp, xm / xp), its bias in
 * the epilogue, else added after it; with `fast`, fast accumulation where
 * cuBLASLt has it for the shape, else fp32 accumulation;
 * KVCAL_ERR_UNSUPPORTED where it runs none of them. */
static kvcal_status run_fp8_gemm(kvcal_gemm_t *gemm, kvcal_bf16 *out, const uint8_t *xq,
                                 const float *xp, kvcal_gemm_scale xm,
                                 const kvcal_fp8_weight *w, const float *wp,
                                 kvcal_gemm_scale wm, int fast, const kvcal_bf16 *bias,
                                 int rows, int k, int n, cudaStream_t stream)
{
    kvcal_status st = KVCAL_ERR_UNSUPPORTED;
    for (int f = fast; f >= 0 && st == KVCAL_ERR_UNSUPPORTED; f--) {
        kvcal_clear_error();
        st = kvcal_gemm_fp8_launch(gemm, out, xq, xp, xm, w->q, wp, wm, f, bias, rows, k,
                                   n, stream);
        if (st != KVCAL_ERR_UNSUPPORTED || !bias)
            continue;
        kvcal_clear_error();
        if ((st = kvcal_gemm_fp8_launch(gemm, out, xq, xp, xm, w->q, wp, wm, f, NULL,
                                        rows, k, n, stream)))
            continue;
        add_bias_kernel<<<grid_of((int64_t)rows * n), 256, 0, stream>>>(
            reinterpret_cast<__nv_bfloat16 *>(out),
            reinterpret_cast<const __nv_bfloat16 *>(bias), rows, n);
        KVCAL_CUDA_CHECK_LAUNCH("fp8_add_bias_kernel");
    }
    return st;
}

extern "C" kvcal_status
kvcal_fp8_linear_launch(kvcal_gemm_t *gemm, kvcal_bf16 *out, const kvcal_bf16 *x,
                        const kvcal_fp8_weight *w, const kvcal_bf16 *bias, int rows,
                        int k, int n, const kvcal_fp8_scratch *s,
                        kvcal_fp8_gemm_path path, int *fp8_gemm, cudaStream_t stream)
{
    kvcal_status st;
    const kvcal_fp8_linear *f = &w->f;
    kvcal_gemm_scale wm, xm;
    const float *wp, *xp;
    int fast;
    if (fp8_gemm)
        *fp8_gemm = 0;
    if (rows == 0)
        return KVCAL_OK;
    if (!x && f->a == KVCAL_FP8A_NONE)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "fp8_linear: rows %d, k %d, n %d: x NULL (already quantized) "
                          "for a weight-only FP8 layer",
                          rows, k, n);
    if (x && f->a != KVCAL_FP8A_NONE &&
        (st = kvcal_fp8_quant_act_launch(s->xq, s->xs, x, rows, k, f->a, f->group,
                                         w->input_scale, stream)))
        return st;
    if (gemm_modes(w, s->xs, path, &wm, &wp, &xm, &xp, &fast)) {
        st = run_fp8_gemm(gemm, out, s->xq, xp, xm, w, wp, wm, fast, bias, rows, k, n,
                          stream);
        if (st != KVCAL_ERR_UNSUPPORTED) {
            if (fp8_gemm)
                *fp8_gemm = st == KVCAL_OK;
            return st;
        }
        kvcal_clear_error();
    }
    if (!s->wd || (f->a != KVCAL_FP8A_NONE && !s->xd))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "fp8_linear: rows %d, k %d, n %d: cuBLASLt runs no FP8 GEMM of these "
            "scales here and no room was made for the dequantized fallback",
            rows, k, n);
    if ((st = kvcal_fp8_dequant_weight_launch(s->wd, w, n, k, stream)))
        return st;
    const kvcal_bf16 *xin = x;
    if (f->a != KVCAL_FP8A_NONE) {
        if ((st = kvcal_fp8_dequant_act_launch(s->xd, s->xq, s->xs, rows, k, f->a,
                                               f->group, stream)))
            return st;
        xin = s->xd;
    }
    return kvcal_gemm_launch(gemm, out, xin, s->wd, bias, rows, k, n, stream);
}
