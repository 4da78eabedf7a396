/* tests/test_backend_ops.c: every op of the model runner's backends in one
 * table, in the manner of ggml's tests/test-backend-ops.cpp. A row is {op,
 * shape}; each row runs on every backend present and is compared with its
 * op's CPU reference (kernels/cpu/ops.h, kernels/cpu/eval_ref.h), the oracle.
 * The backend beside the CPU today is CUDA (kernels/cuda/ops.h,
 * kernels/cuda/eval.h): a row runs on each of the op's kernel versions that
 * takes it. Adding a shape is one row; adding an op is its rows and one
 * entry of op_defs. An op's kernel (kvcal_<stem>_launch), rows and
 * benchmark section (bench/runner_ops <stem>) share its stem, and so does
 * its reference where that is one function (kvcal_<stem>_ref; gemm's is
 * kvcal_matmul_ref, gemm_batched's the same a batch at a time, add_rmsnorm's
 * kvcal_add_ref then kvcal_rmsnorm_ref, gemm_swiglu's those of gemm and
 * swiglu, mla_expand_rope's kvcal_mla_expand_ref's K).
 *
 * The shapes are odd (1, 19, 989 rows; head_dim 80 and others off a power
 * of two; lengths off every tile; GQA and MQA) and the inputs random bf16
 * values, which the reference reads as floats. Order-independent results
 * (the observer's absmax and histograms, the residual stream, a gather,
 * counts) must equal the reference's; sums and products must lie within
 * atol + |ref| * rtol, the bounds stated per op below; where a kernel is
 * meant to round as bf16 arithmetic does, its outputs must also equal that
 * arithmetic's bit for bit but for the few (at most 1%, rounded up) that
 * straddle a rounding boundary. Outputs start as bf16 NaN, so a value a
 * kernel leaves unwritten fails. A failed check names the op, the kernel
 * version and the row.
 *
 * Three suites run the table, split by what compute-sanitizer checks
 * (bench/run_gpu_cuda.sh): backend_ops (every tool), backend_ops_tuned (GEMM
 * shapes cuBLASLt's algorithms are timed for, whose cuBLAS kernels
 * racecheck does not model) and backend_ops_mbarrier (cuDNN's attention,
 * the fused gate/up + SwiGLU kernel and the experts' Hopper GEMM, which
 * synchronize through mbarriers: memcheck only). In a build without CUDA
 * the suites hold no tests; without a device they are reported skipped.
 * The online quantization kernels have their own table of layouts
 * (tests/test_kvquant_cuda.c). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_cuda_util.h"
#include "tests/test_util.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/hist_rule.h"
#include "kernels/cpu/eval_ref.h"
#include "kernels/cpu/fp8_ref.h"
#include "kernels/cpu/gated_delta.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/eval.h"
#include "kernels/cuda/mla.h"
#include "kernels/cuda/ops.h"

// --- the table -----------------------------------------------------------------

/* One case. An op reads the fields its comment names; the others stay 0. */
typedef struct op_row {
    const char *op; /* the stem */
    /* add_rmsnorm, swiglu, embed, error_sums: (rows, cols); gemm,
     * gemm_swiglu: x (rows, k); token_nll: rows; rope_observe: tokens */
    int rows, cols;
    int delta;                     /* add_rmsnorm: residual += delta first (0: RMSNorm) */
    int no_weight;                 /* add_rmsnorm: no norm, the residual passed through */
    /* add_rmsnorm, rope_observe: the norms scale by w + norm_offset (Gemma's,
     * Qwen3-Next's 1 + w), rounded once */
    float norm_offset;
    int k, n, bias;                /* gemm: w (n, k), bias (n); gemm_swiglu: w (2n, k) */
    int vocab;                     /* embed, token_nll, token_kld */
    int batch, seq;                /* attention: sequences of seq tokens */
    int heads, kv_heads, head_dim; /* attention, rope_observe; rmsnorm_cols: segments */
    /* attention: output row stride heads * head_dim + out_pad; cudnn 1: cuDNN
     * must run the row where it is loaded, -1: kvcal's kernel must */
    int out_pad, cudnn;
    int rot_dim, interleaved, qk_norm; /* rope_observe */
    int nan_v;                         /* rope_observe: V channel 5 of token 2 is a NaN */
    /* error_sums: row strides of x and y, the scale group, y in fp32 (else bf16);
     * rmsnorm_cols: x's row stride; gemm_batched: x's and out's (0: k, n) */
    int x_stride, y_stride, group, y_f32;
    /* gemm_batched: batch products of x (rows, k) and weights (n, k) w_stride
     * values apart into out's columns from b * out_stride on */
    int out_stride, w_stride;
    float attention_factor; /* rope_observe: yarn's (0: 1) */
    int window;             /* attention: a sliding window (0: none) */
    int softcap;            /* attention: scores soft-capped at this (0: none) */
    /* moe: rows tokens of hidden k, experts of n intermediate channels, top_k
     * (renormalized with renorm), a shared expert's output and gate with
     * shared; a few padding tokens where rows > 2 */
    int experts, top_k, renorm, shared; /* shared 2: a shared expert without gate */
    int sigmoid; /* moe: sigmoid routing with a choice bias, weights x 2.5 */
    int sinks;   /* attention: a sink logit per query head (gpt-oss) */
    /* moe: gpt-oss's experts: biases of gate/up and down, the clamped SwiGLU
     * (alpha 1.702, limit 7) on gate/up values past the limit */
    int oai;
    /* moe: each valid token's first choice planted (moe_planted_expert):
     * experts 0 .. 4 receive 0, 1, 127, 128 and 129 of them, expert 5 the
     * rest (the only choice with top_k 1, so these are the experts' rows) */
    int planted;
    /* moe: logits from {-inf, -1.5, -0, +0, 0.5, 2}, each token with at
     * least top_k finite: ties at every rank, signed zeros (equal as floats),
     * experts no token may take */
    int ties;
    float affine_a, affine_b; /* affine: out = x * a + b over rows values */
    /* moe: grouped top-k (groups > 1): the topk_groups best groups open,
     * scored by their best expert (group_max) or their two best's sum;
     * weights x 1.5 (softmax) or 2.5 (sigmoid) */
    int groups, topk_groups, group_max;
    /* mla_latent: rows tokens of an entry of kv_lora_rank + rot_dim (its
     * rows kv_pad values apart beyond that) and heads query heads of
     * head_dim (none: heads 0); mla_expand: heads heads of K head_dim (no
     * RoPE part head_dim - rot_dim) and V v_dim padded to head_dim;
     * mla_ds_roundtrip: rows entries */
    int kv_lora_rank, v_dim, kv_pad;
    /* fp8_quant_act: (rows, cols) activations quantized as fp8_a says (groups
     * of `group` columns); fp8_linear: x (rows, k) times a weight (n, k)
     * scaled as fp8_w says (blocks block_n x block_k) */
    int fp8_w, fp8_a, block_n, block_k;
    /* gated_delta: batch samples of seq tokens, nk key heads of dk, nv value
     * heads of dv, a convolution of taps; sigmoid_gate: (rows, cols) */
    int nk, dk, nv, dv, taps;
    /* moe: the row's inputs drawn from this state of the generator (0: the
     * state the rows before it left), the same in every suite */
    uint64_t seed;
} op_row;

#define ROW(stem, ...)                                                                   \
    {                                                                                    \
        .op = stem, __VA_ARGS__                                                          \
    }

/* yarn's attention factor for a context extended 4x: 0.1 ln(4) + 1 */
#define YARN_4 1.1386294f

static const op_row rows[] = {
    /* dim a multiple of 8: 16-byte path; else the scalar path; no delta: RMSNorm */
    ROW("add_rmsnorm", .rows = 19, .cols = 200, .delta = 1),
    ROW("add_rmsnorm", .rows = 1, .cols = 90, .delta = 1),
    ROW("add_rmsnorm", .rows = 19, .cols = 4096),
    ROW("add_rmsnorm", .rows = 989, .cols = 136, .delta = 1),
    ROW("add_rmsnorm", .rows = 989, .cols = 90),
    /* the (1 + w) norms: one rounding of x r (w + 1) */
    ROW("add_rmsnorm", .rows = 19, .cols = 200, .delta = 1, .norm_offset = 1.0f),
    ROW("add_rmsnorm", .rows = 37, .cols = 90, .norm_offset = 1.0f),
    /* no weight: the residual after the add passed through (post-norm) */
    ROW("add_rmsnorm", .rows = 19, .cols = 200, .delta = 1, .no_weight = 1),
    ROW("add_rmsnorm", .rows = 37, .cols = 90, .delta = 1, .no_weight = 1),
    /* inside rows of a wider buffer: one segment (q/k norms over the whole
     * projection), a segment a head (q/k norms after RoPE) */
    ROW("rmsnorm_cols", .rows = 19, .cols = 256, .x_stride = 512, .heads = 1),
    ROW("rmsnorm_cols", .rows = 37, .cols = 90, .x_stride = 150, .heads = 1),
    ROW("rmsnorm_cols", .rows = 19, .cols = 128, .x_stride = 1024, .heads = 4),
    ROW("rmsnorm_cols", .rows = 37, .cols = 16, .x_stride = 120, .heads = 6),

    ROW("gemm", .rows = 19, .k = 136, .n = 200, .bias = 1),
    ROW("gemm", .rows = 1, .k = 64, .n = 40),
    ROW("gemm", .rows = 300, .k = 80, .n = 24, .bias = 1),
    ROW("gemm", .rows = 989, .k = 200, .n = 136),
    ROW("gemm", .rows = 19, .k = 136, .n = 200, .bias = 1), /* the cached plan again */
    /* over 1 GFLOP: the first launch times cuBLASLt's candidates */
    ROW("gemm", .rows = 1024, .k = 1024, .n = 520, .bias = 1),
    ROW("gemm", .rows = 1024, .k = 1024, .n = 520, .bias = 1), /* the tuned choice */
    /* batches of one x: x's rows wider than k, out's wider than the
     * batches, the batches' columns out_stride apart (not a multiple of n),
     * the weights apart; odd sizes (2-byte aligned batches); one batch; no
     * rows; MLA's kv_b_proj at DeepSeek-V2-Lite's sizes (K's no-RoPE part:
     * 16 heads of 128 in K's rows of 16 x 192; V: in kv_b_proj's output of
     * 16 x 256), the latent read inside the entry of 576; over 1 GFLOP: the
     * first launch times cuBLASLt's candidates */
    ROW("gemm_batched", .rows = 19, .k = 40, .n = 24, .batch = 3, .x_stride = 56,
        .y_stride = 128, .out_stride = 40, .w_stride = 32 * 40),
    ROW("gemm_batched", .rows = 37, .k = 19, .n = 13, .batch = 5, .x_stride = 23,
        .y_stride = 83, .out_stride = 17, .w_stride = 13 * 19 + 5),
    ROW("gemm_batched", .rows = 19, .k = 64, .n = 40, .batch = 1, .y_stride = 48),
    ROW("gemm_batched", .rows = 0, .k = 64, .n = 32, .batch = 4, .out_stride = 40,
        .y_stride = 160, .w_stride = 64 * 64),
    ROW("gemm_batched", .rows = 300, .k = 512, .n = 128, .batch = 16, .x_stride = 576,
        .y_stride = 3072, .out_stride = 192, .w_stride = 256 * 512),
    ROW("gemm_batched", .rows = 1024, .k = 512, .n = 128, .batch = 16, .x_stride = 576,
        .y_stride = 4096, .out_stride = 256, .w_stride = 256 * 512),

    /* one row and one weight block (one 2-CTA cluster, one CTA without rows);
     * k off the 64-wide K tile (the tail read as zeros); rows off the 128-row
     * tile and an odd number of row blocks (a cluster's second CTA past the
     * end); more tiles than clusters in two row groups (the persistent walk),
     * with fewer k blocks than a tile's epilogue has parts and with more (a
     * tile's epilogue runs during the next tile's first k blocks) */
    ROW("gemm_swiglu", .rows = 1, .k = 64, .n = 128),
    ROW("gemm_swiglu", .rows = 19, .k = 200, .n = 256),
    ROW("gemm_swiglu", .rows = 300, .k = 520, .n = 384),
    ROW("gemm_swiglu", .rows = 2100, .k = 256, .n = 1280),
    ROW("gemm_swiglu", .rows = 2100, .k = 584, .n = 1024),
    /* n off the multiples of 128: the last block padded (DeepSeek-V2-Lite's
       10944 = 85 x 128 + 64), and a last block of 8 columns */
    ROW("gemm_swiglu", .rows = 300, .k = 520, .n = 320),
    ROW("gemm_swiglu", .rows = 300, .k = 128, .n = 10944),
    ROW("gemm_swiglu", .rows = 19, .k = 200, .n = 264),

    /* version 2 takes head_dim and rot_dim multiples of 16 */
    ROW("rope_observe", .rows = 19, .heads = 4, .kv_heads = 2, .head_dim = 80,
        .rot_dim = 80),
    ROW("rope_observe", .rows = 19, .heads = 6, .kv_heads = 3, .head_dim = 64,
        .rot_dim = 32, .interleaved = 1, .qk_norm = 1),
    ROW("rope_observe", .rows = 300, .heads = 8, .kv_heads = 1, .head_dim = 160,
        .rot_dim = 64, .qk_norm = 1),
    ROW("rope_observe", .rows = 1, .heads = 2, .kv_heads = 2, .head_dim = 128,
        .rot_dim = 128, .interleaved = 1),
    /* version 2 takes 4 kv heads a block: 6 leave the second block half empty */
    ROW("rope_observe", .rows = 259, .heads = 12, .kv_heads = 6, .head_dim = 128,
        .rot_dim = 128, .qk_norm = 1),
    ROW("rope_observe", .rows = 7, .heads = 2, .kv_heads = 1, .head_dim = 256,
        .rot_dim = 128, .interleaved = 1, .qk_norm = 1),
    ROW("rope_observe", .rows = 989, .heads = 8, .kv_heads = 2, .head_dim = 128,
        .rot_dim = 128, .qk_norm = 1),
    ROW("rope_observe", .rows = 989, .heads = 4, .kv_heads = 4, .head_dim = 80,
        .rot_dim = 80, .interleaved = 1),
    /* 200 blocks, more than a GPU has SMs: version 2's blocks of 8 warps
     * (the rows above launch no more blocks than SMs: blocks of 16) */
    ROW("rope_observe", .rows = 3200, .heads = 64, .kv_heads = 64, .head_dim = 16,
        .rot_dim = 16, .qk_norm = 1),
    /* Qwen3-30B-A3B's heads (8 q heads a kv head, q/k norms) and gpt-oss's (8
     * kv heads of 64 a block) */
    ROW("rope_observe", .rows = 300, .heads = 32, .kv_heads = 4, .head_dim = 128,
        .rot_dim = 128, .qk_norm = 1),
    ROW("rope_observe", .rows = 259, .heads = 64, .kv_heads = 8, .head_dim = 64,
        .rot_dim = 64),
    /* no q heads: rows of k and v alone (a calibration's last layer) */
    ROW("rope_observe", .rows = 131, .kv_heads = 8, .head_dim = 128, .rot_dim = 128),
    ROW("rope_observe", .rows = 37, .kv_heads = 3, .head_dim = 64, .rot_dim = 32,
        .interleaved = 1, .qk_norm = 1),
    ROW("rope_observe", .rows = 19, .kv_heads = 2, .head_dim = 40, .rot_dim = 40,
        .qk_norm = 1, .attention_factor = YARN_4),
    /* head_dim off 16: version 1 alone */
    ROW("rope_observe", .rows = 37, .heads = 6, .kv_heads = 2, .head_dim = 40,
        .rot_dim = 40, .qk_norm = 1),
    ROW("rope_observe", .rows = 37, .heads = 4, .kv_heads = 4, .head_dim = 96,
        .rot_dim = 24, .interleaved = 1),
    /* yarn: cos and sin times the attention factor, in both versions */
    ROW("rope_observe", .rows = 131, .heads = 4, .kv_heads = 2, .head_dim = 128,
        .rot_dim = 128, .qk_norm = 1, .attention_factor = YARN_4),
    ROW("rope_observe", .rows = 37, .heads = 6, .kv_heads = 2, .head_dim = 40,
        .rot_dim = 24, .interleaved = 1, .attention_factor = YARN_4),
    /* a NaN in V makes its absmax NaN, which the caller checks */
    ROW("rope_observe", .rows = 4, .heads = 1, .kv_heads = 1, .head_dim = 64,
        .rot_dim = 64, .nan_v = 1),
    /* the (1 + w) norms, in both versions: Qwen3-Next's partial rotary */
    ROW("rope_observe", .rows = 131, .heads = 8, .kv_heads = 2, .head_dim = 128,
        .rot_dim = 32, .qk_norm = 1, .norm_offset = 1.0f),
    ROW("rope_observe", .rows = 37, .heads = 4, .kv_heads = 2, .head_dim = 40,
        .rot_dim = 40, .qk_norm = 1, .norm_offset = 1.0f),

    /* Llama's shape (head_dim 128, GQA 4:1): cuDNN must run it where loaded */
    ROW("attention", .batch = 2, .seq = 300, .heads = 8, .kv_heads = 2, .head_dim = 128,
        .out_pad = 8, .cudnn = 1),
    ROW("attention", .batch = 2, .seq = 19, .heads = 4, .kv_heads = 2, .head_dim = 80,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 131, .heads = 8, .kv_heads = 2, .head_dim = 80),
    ROW("attention", .batch = 1, .seq = 131, .heads = 8, .kv_heads = 2, .head_dim = 80,
        .out_pad = 8),
    /* the first shape again: cuDNN's cached plan */
    ROW("attention", .batch = 2, .seq = 300, .heads = 8, .kv_heads = 2, .head_dim = 128,
        .out_pad = 8, .cudnn = 1),
    ROW("attention", .batch = 2, .seq = 300, .heads = 2, .kv_heads = 1, .head_dim = 80,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 130, .heads = 3, .kv_heads = 1, .head_dim = 64,
        .out_pad = 8),
    ROW("attention", .batch = 3, .seq = 65, .heads = 4, .kv_heads = 4, .head_dim = 96,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 77, .heads = 2, .kv_heads = 1, .head_dim = 128,
        .out_pad = 8),
    ROW("attention", .batch = 19, .seq = 1, .heads = 2, .kv_heads = 2, .head_dim = 64,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 989, .heads = 4, .kv_heads = 2, .head_dim = 80,
        .out_pad = 8),
    /* head_dim other than 64, 80, 96, 128: kvcal's portable kernel */
    ROW("attention", .batch = 2, .seq = 37, .heads = 4, .kv_heads = 2, .head_dim = 16,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 70, .heads = 6, .kv_heads = 3, .head_dim = 48,
        .out_pad = 8),
    ROW("attention", .batch = 3, .seq = 9, .heads = 2, .kv_heads = 1, .head_dim = 8,
        .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 33, .heads = 2, .kv_heads = 2, .head_dim = 72,
        .out_pad = 8),
    ROW("attention", .batch = 2, .seq = 41, .heads = 8, .kv_heads = 8, .head_dim = 8,
        .out_pad = 8),
    ROW("attention", .batch = 3, .seq = 37, .heads = 4, .kv_heads = 1, .head_dim = 16,
        .out_pad = 8),
    /* outside cuDNN's reach: head_dim off 8, an output row stride off 8 */
    ROW("attention", .batch = 2, .seq = 37, .heads = 4, .kv_heads = 2, .head_dim = 36,
        .out_pad = 8, .cudnn = -1),
    ROW("attention", .batch = 1, .seq = 70, .heads = 4, .kv_heads = 2, .head_dim = 64,
        .out_pad = 3, .cudnn = -1),

    /* a sliding window shorter than the sequence: the portable kernel (head_dim
     * 16, an output stride off 8), the tensor cores (64, 80, 96, 128, 256; windows
     * below, at and across the 64-key tiles, the first blocks' tiles skipped) */
    ROW("attention", .batch = 2, .seq = 37, .heads = 4, .kv_heads = 1, .head_dim = 16,
        .window = 16),
    ROW("attention", .batch = 1, .seq = 70, .heads = 4, .kv_heads = 2, .head_dim = 64,
        .window = 20, .out_pad = 3),
    ROW("attention", .batch = 2, .seq = 200, .heads = 4, .kv_heads = 2, .head_dim = 64,
        .window = 64),
    ROW("attention", .batch = 1, .seq = 333, .heads = 6, .kv_heads = 2, .head_dim = 96,
        .window = 70),
    ROW("attention", .batch = 1, .seq = 300, .heads = 8, .kv_heads = 2, .head_dim = 128,
        .window = 100),
    ROW("attention", .batch = 3, .seq = 9, .heads = 2, .kv_heads = 2, .head_dim = 80,
        .window = 1),
    /* Gemma 2's soft cap (small, so that it bends these scores), with and
     * without a window */
    ROW("attention", .batch = 2, .seq = 37, .heads = 4, .kv_heads = 2, .head_dim = 32,
        .softcap = 1),
    ROW("attention", .batch = 1, .seq = 70, .heads = 4, .kv_heads = 2, .head_dim = 64,
        .window = 16, .softcap = 2),
    ROW("attention", .batch = 2, .seq = 150, .heads = 4, .kv_heads = 4, .head_dim = 128,
        .softcap = 1),
    ROW("attention", .batch = 1, .seq = 260, .heads = 8, .kv_heads = 2, .head_dim = 80,
        .window = 129, .softcap = 3),
    /* Gemma's head_dim 256: a window with the cap, a cap alone (Gemma 2's 50
     * bends none of these scores; 4 does) */
    ROW("attention", .batch = 1, .seq = 300, .heads = 4, .kv_heads = 2, .head_dim = 256,
        .window = 100, .softcap = 4),
    ROW("attention", .batch = 2, .seq = 90, .heads = 2, .kv_heads = 1, .head_dim = 256,
        .softcap = 4),
    /* gpt-oss's sinks: alone and with a window (its sliding layers: 128
     * keys), on the portable kernel (head_dim 16) and the tensor cores (its
     * head_dim 64, and 128) */
    ROW("attention", .batch = 2, .seq = 37, .heads = 4, .kv_heads = 2, .head_dim = 16,
        .sinks = 1),
    ROW("attention", .batch = 3, .seq = 41, .heads = 6, .kv_heads = 2, .head_dim = 16,
        .window = 8, .sinks = 1),
    ROW("attention", .batch = 1, .seq = 300, .heads = 8, .kv_heads = 1, .head_dim = 64,
        .sinks = 1),
    ROW("attention", .batch = 2, .seq = 333, .heads = 8, .kv_heads = 2, .head_dim = 64,
        .window = 128, .sinks = 1, .out_pad = 8),
    ROW("attention", .batch = 1, .seq = 19, .heads = 4, .kv_heads = 4, .head_dim = 128,
        .window = 8, .sinks = 1),

    /* the mixture of experts: routing, grouping, the grouped GEMMs (tails of
     * the 128 x 128 tiles and of k's 32; on Hopper of the 128 x 256 tiles and
     * of k's 64, inter sizes under a tile, where a tile's gate rows run into
     * its up rows), SwiGLU and the combine */
    ROW("moe", .rows = 1, .k = 64, .n = 32, .experts = 4, .top_k = 2),
    ROW("moe", .rows = 19, .k = 48, .n = 40, .experts = 8, .top_k = 3, .renorm = 1),
    ROW("moe", .rows = 989, .k = 136, .n = 200, .experts = 60, .top_k = 4, .shared = 1),
    ROW("moe", .rows = 300, .k = 512, .n = 256, .experts = 128, .top_k = 8, .renorm = 1),
    ROW("moe", .rows = 37, .k = 64, .n = 48, .experts = 2, .top_k = 2, .shared = 1),
    /* GLM-4.5's routing: sigmoid scores chosen with a bias, an ungated
     * shared expert */
    ROW("moe", .rows = 989, .k = 64, .n = 32, .experts = 160, .top_k = 8, .renorm = 1,
        .shared = 2, .sigmoid = 1),
    ROW("moe", .rows = 19, .k = 48, .n = 40, .experts = 8, .top_k = 3, .sigmoid = 1),
    /* Kimi K2's 384 experts: the routing's widest lanes (16 values each) */
    ROW("moe", .rows = 300, .k = 64, .n = 32, .experts = 384, .top_k = 8, .renorm = 1,
        .sigmoid = 1),
    /* gpt-oss's experts: biases after the grouped GEMMs, the clamped SwiGLU
     * (the last: gate/up over two 128-column tiles, the second cut at 72
     * outputs, down's 136 in one 256-column tile) */
    ROW("moe", .rows = 37, .k = 64, .n = 32, .experts = 8, .top_k = 3, .renorm = 1,
        .oai = 1),
    ROW("moe", .rows = 989, .k = 96, .n = 64, .experts = 32, .top_k = 4, .renorm = 1,
        .oai = 1),
    ROW("moe", .rows = 300, .k = 136, .n = 200, .experts = 16, .top_k = 4, .renorm = 1,
        .oai = 1),
    /* experts receiving 0, 1, 127, 128 and 129 rows (an empty plan tile, a
     * tile of padding but one row, one row short of a tile, a tile, a tile
     * and a row), with and without more choices that are random */
    ROW("moe", .rows = 600, .k = 72, .n = 40, .experts = 6, .top_k = 1, .planted = 1),
    /* ties (Qwen3-30B-A3B's and DeepSeek-V2-Lite's experts and top-k) */
    ROW("moe", .rows = 300, .k = 64, .n = 32, .experts = 128, .top_k = 8, .renorm = 1,
        .ties = 1),
    ROW("moe", .rows = 300, .k = 64, .n = 32, .experts = 64, .top_k = 6, .ties = 1),
    ROW("moe", .rows = 600, .k = 136, .n = 200, .experts = 6, .top_k = 2, .renorm = 1,
        .shared = 1, .planted = 1),
    /* more tiles than a Hopper's multiprocessors in both GEMMs (the
     * persistent walk, a tile's epilogue during the next tile's k blocks),
     * widths off the 128- and 256-wide output tiles; the inputs the first
     * Hopper run drew for it, where token 4065's up value 27 (8.46875109)
     * lies 1.1e-6 above the bf16 midpoint 8.46875: the reference's fp32
     * sum rounds to 8.5, one that truncates each 16-wide k slice's sum (a
     * model of the tensor cores') to 8.4375, act moves from 37 to 36.75
     * and with it 24 of the token's outputs past atol + |ref| rtol, the
     * count that run failed (moe_check's act terms; bench/NOTES.md) */
    ROW("moe", .rows = 4800, .k = 1040, .n = 576, .experts = 4, .top_k = 1,
        .seed = 0x722432ae45bf5d00ull),
    /* grouped top-k: DeepSeek-V2's group_limited_greedy (softmax, a group
     * scored by its best), V3's noaux_tc (sigmoid + bias, a group by its two
     * best), the most groups a token holds (64) */
    ROW("moe", .rows = 989, .k = 64, .n = 32, .experts = 64, .top_k = 6, .shared = 2,
        .groups = 8, .topk_groups = 3, .group_max = 1),
    ROW("moe", .rows = 300, .k = 64, .n = 32, .experts = 256, .top_k = 8, .renorm = 1,
        .shared = 2, .sigmoid = 1, .groups = 8, .topk_groups = 4),
    ROW("moe", .rows = 19, .k = 48, .n = 40, .experts = 8, .top_k = 3, .sigmoid = 1,
        .groups = 4, .topk_groups = 2),
    ROW("moe", .rows = 37, .k = 64, .n = 32, .experts = 128, .top_k = 4, .renorm = 1,
        .sigmoid = 1, .groups = 64, .topk_groups = 5),

    /* multi-head latent attention: DeepSeek-V2-Lite's sizes (512 + 64, 16
     * heads of 192, V 128), the golden models' (32 + 16; V 20: the scalar
     * copies), a latent off 32 and 128 (a short tile), no query; a latent
     * over 512 (the kernel's long form), 40 RoPE pairs (a second round of
     * lanes) and 11 query heads (off the kernel's 8 at a time); the
     * expansion's heads of 300 in bf16 units (a head wider than the
     * kernel's block of 256 threads) */
    ROW("mla_latent", .rows = 989, .kv_lora_rank = 512, .rot_dim = 64, .heads = 16,
        .head_dim = 192, .attention_factor = 1.0f),
    ROW("mla_latent", .rows = 19, .kv_lora_rank = 32, .rot_dim = 16, .heads = 4,
        .head_dim = 40, .kv_pad = 8, .attention_factor = YARN_4),
    ROW("mla_latent", .rows = 70, .kv_lora_rank = 200, .rot_dim = 8, .kv_pad = 3,
        .attention_factor = 1.0f),
    ROW("mla_latent", .rows = 45, .kv_lora_rank = 700, .rot_dim = 80, .heads = 11,
        .head_dim = 96, .kv_pad = 1, .attention_factor = YARN_4),
    ROW("mla_expand", .rows = 19, .kv_lora_rank = 512, .rot_dim = 64, .heads = 16,
        .head_dim = 192, .v_dim = 128),
    ROW("mla_expand", .rows = 37, .kv_lora_rank = 32, .rot_dim = 16, .heads = 4,
        .head_dim = 40, .v_dim = 20),
    ROW("mla_expand", .rows = 5, .kv_lora_rank = 48, .rot_dim = 16, .heads = 3,
        .head_dim = 48, .v_dim = 48),
    ROW("mla_expand", .rows = 3, .kv_lora_rank = 64, .rot_dim = 16, .heads = 2,
        .head_dim = 300, .v_dim = 150),
    /* K's RoPE part alone: DeepSeek-V2-Lite's sizes, the V3 golden model's
     * (16-byte copies), 3 units a row (off the block of 256 threads), an
     * entry stride off 8 and a no-RoPE part off 8 (the scalar copies) */
    ROW("mla_expand_rope", .rows = 989, .kv_lora_rank = 512, .rot_dim = 64, .heads = 16,
        .head_dim = 192, .v_dim = 128),
    ROW("mla_expand_rope", .rows = 37, .kv_lora_rank = 32, .rot_dim = 16, .heads = 4,
        .head_dim = 48, .v_dim = 32),
    ROW("mla_expand_rope", .rows = 45, .kv_lora_rank = 48, .rot_dim = 24, .heads = 5,
        .head_dim = 56, .v_dim = 32),
    ROW("mla_expand_rope", .rows = 19, .kv_lora_rank = 32, .rot_dim = 16, .heads = 4,
        .head_dim = 40, .v_dim = 20, .kv_pad = 3),
    ROW("mla_expand_rope", .rows = 3, .kv_lora_rank = 64, .rot_dim = 16, .heads = 2,
        .head_dim = 300, .v_dim = 150),
    ROW("mla_ds_roundtrip", .rows = 989, .kv_lora_rank = 512, .rot_dim = 64),
    ROW("mla_ds_roundtrip", .rows = 19, .kv_lora_rank = 32, .rot_dim = 16, .kv_pad = 5),
    ROW("mla_ds_roundtrip", .rows = 7, .kv_lora_rank = 200, .rot_dim = 8),
    /* qk head 192 with V zero-padded to it: MLA's attention where cuDNN does not
     * take its heads as they are (kvcal's tensor-core kernel at 192) */
    ROW("attention", .batch = 2, .seq = 150, .heads = 4, .kv_heads = 4, .head_dim = 192),
    ROW("attention", .batch = 1, .seq = 131, .heads = 8, .kv_heads = 2, .head_dim = 192,
        .out_pad = 8),

    ROW("geglu", .rows = 19, .cols = 136),
    ROW("geglu", .rows = 1, .cols = 37),
    ROW("geglu", .rows = 989, .cols = 200),

    /* Gemma's embedding scale (sqrt(hidden) in bf16) and norm offset */
    ROW("affine", .rows = 989 * 64, .affine_a = 8.0f),
    ROW("affine", .rows = 37, .affine_a = 1.0f, .affine_b = 1.0f),
    ROW("affine", .rows = 1, .affine_a = 50.5f, .affine_b = -2.0f),

    /* the golden models' sizes (off a warp); the released models' heads of
     * 128, a key head per two value heads; one token */
    ROW("gated_delta", .batch = 2, .seq = 37, .nk = 2, .dk = 16, .nv = 4, .dv = 24,
        .taps = 4),
    ROW("gated_delta", .batch = 1, .seq = 300, .nk = 1, .dk = 128, .nv = 2, .dv = 128,
        .taps = 4),
    ROW("gated_delta", .batch = 3, .seq = 1, .nk = 1, .dk = 40, .nv = 1, .dv = 8,
        .taps = 2),
    /* value heads over 7 warps of the registers' kernel, a key head inside
     * its 128; past it: a key head, and a convolution past its window of 4
     * taps (the state in shared memory) */
    ROW("gated_delta", .batch = 2, .seq = 70, .nk = 1, .dk = 96, .nv = 2, .dv = 200,
        .taps = 3),
    ROW("gated_delta", .batch = 2, .seq = 50, .nk = 1, .dk = 160, .nv = 2, .dv = 48,
        .taps = 4),
    ROW("gated_delta", .batch = 1, .seq = 40, .nk = 2, .dk = 32, .nv = 2, .dv = 32,
        .taps = 5),
    /* Llama 4's queries in its NoPE layers: a floor of 8 (the factor moves
     * every 8 positions), rows inside a wider buffer */
    ROW("query_temperature", .rows = 300, .cols = 96, .x_stride = 160),
    ROW("sigmoid_gate", .rows = 19, .cols = 200),
    ROW("sigmoid_gate", .rows = 989, .cols = 136),

    ROW("swiglu", .rows = 19, .cols = 136),
    ROW("swiglu", .rows = 1, .cols = 37),
    ROW("swiglu", .rows = 989, .cols = 200),

    /* gate and up past the clamp's limit (7) a third of the time */
    ROW("swiglu_oai", .rows = 19, .cols = 136),
    ROW("swiglu_oai", .rows = 1, .cols = 37),
    ROW("swiglu_oai", .rows = 989, .cols = 200),

    /* dim a multiple of 8: 16-byte copies; else one element a thread */
    ROW("embed", .rows = 19, .cols = 200, .vocab = 50),
    ROW("embed", .rows = 1, .cols = 90, .vocab = 7),
    ROW("embed", .rows = 989, .cols = 136, .vocab = 128),

    ROW("token_nll", .rows = 1, .vocab = 49152),
    ROW("token_nll", .rows = 19, .vocab = 49152),
    ROW("token_nll", .rows = 989, .vocab = 517),
    ROW("token_nll", .rows = 7, .vocab = 1),
    ROW("token_kld", .rows = 1, .vocab = 49152),
    ROW("token_kld", .rows = 19, .vocab = 49152),
    ROW("token_kld", .rows = 989, .vocab = 517),
    ROW("token_kld", .rows = 7, .vocab = 1),

    ROW("error_sums", .rows = 989, .cols = 24, .x_stride = 40, .y_stride = 24, .group = 8,
        .y_f32 = 1),
    ROW("error_sums", .rows = 19, .cols = 80, .x_stride = 96, .y_stride = 80, .group = 80,
        .y_f32 = 1),
    ROW("error_sums", .rows = 1, .cols = 1000, .x_stride = 1000, .y_stride = 1000),
    ROW("error_sums", .rows = 2000, .cols = 36, .x_stride = 36, .y_stride = 40),

    /* 16-byte rows and the scalar path (cols off 8); groups of 128 and of 64
     * with a short last group */
    ROW("fp8_quant_act", .rows = 1, .cols = 4096, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_quant_act", .rows = 19, .cols = 300, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_quant_act", .rows = 989, .cols = 136, .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_quant_act", .rows = 19, .cols = 384, .fp8_a = KVCAL_FP8A_GROUP,
        .group = 128),
    ROW("fp8_quant_act", .rows = 989, .cols = 200, .fp8_a = KVCAL_FP8A_GROUP,
        .group = 64),
    /* rows held in registers: 4 words a thread (several rows a block, the
     * last block short), 16 words a thread (rows past 16,384) */
    ROW("fp8_quant_act", .rows = 37, .cols = 14336, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_quant_act", .rows = 3, .cols = 28672, .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_quant_act", .rows = 3, .cols = 20480, .fp8_a = KVCAL_FP8A_TOKEN),
    /* rows staged ahead by resident blocks that loop: more 4096-value rows
     * than an H200's blocks hold at once (2 a block), the last group short */
    ROW("fp8_quant_act", .rows = 4099, .cols = 4096, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_quant_act", .rows = 4099, .cols = 4096, .fp8_a = KVCAL_FP8A_STATIC),

    /* every scheme of core/fp8_linear.h; blocks of 64: the fallback alone */
    ROW("fp8_linear", .rows = 19, .k = 384, .n = 256, .bias = 1,
        .fp8_w = KVCAL_FP8W_TENSOR, .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_linear", .rows = 1, .k = 4096, .n = 1024, .fp8_w = KVCAL_FP8W_TENSOR,
        .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_linear", .rows = 989, .k = 384, .n = 512, .bias = 1,
        .fp8_w = KVCAL_FP8W_CHANNEL, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_linear", .rows = 19, .k = 384, .n = 256, .fp8_w = KVCAL_FP8W_CHANNEL,
        .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_linear", .rows = 19, .k = 256, .n = 128, .fp8_w = KVCAL_FP8W_CHANNEL,
        .fp8_a = KVCAL_FP8A_NONE),
    ROW("fp8_linear", .rows = 256, .k = 512, .n = 384, .fp8_w = KVCAL_FP8W_BLOCK,
        .fp8_a = KVCAL_FP8A_GROUP, .block_n = 128, .block_k = 128, .group = 128),
    ROW("fp8_linear", .rows = 37, .k = 384, .n = 256, .bias = 1,
        .fp8_w = KVCAL_FP8W_BLOCK, .fp8_a = KVCAL_FP8A_GROUP, .block_n = 128,
        .block_k = 128, .group = 128),
    ROW("fp8_linear", .rows = 256, .k = 512, .n = 1024, .bias = 1,
        .fp8_w = KVCAL_FP8W_TENSOR, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_linear", .rows = 256, .k = 256, .n = 384, .fp8_w = KVCAL_FP8W_CHANNEL,
        .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_linear", .rows = 256, .k = 256, .n = 256, .fp8_w = KVCAL_FP8W_TENSOR,
        .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_linear", .rows = 19, .k = 384, .n = 200, .bias = 1,
        .fp8_w = KVCAL_FP8W_BLOCK, .fp8_a = KVCAL_FP8A_GROUP, .block_n = 64,
        .block_k = 64, .group = 64),

    /* SwiGLU with the quantization as its epilogue: every mode, a short last
     * group, rows of 56 KiB and 78 KiB in shared memory (past the default
     * 48 KiB: Llama-3-70B's 28672 outputs, and more) */
    ROW("fp8_swiglu_quant", .rows = 19, .cols = 384, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_swiglu_quant", .rows = 1, .cols = 4096, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_swiglu_quant", .rows = 989, .cols = 136, .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_swiglu_quant", .rows = 37, .cols = 200, .fp8_a = KVCAL_FP8A_GROUP,
        .group = 64),
    ROW("fp8_swiglu_quant", .rows = 3, .cols = 28672, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_swiglu_quant", .rows = 2, .cols = 40064, .fp8_a = KVCAL_FP8A_GROUP,
        .group = 128),
    /* rows staged ahead by resident blocks that loop: more rows than an
     * H200's blocks hold at once (Llama-3-8B's 14336 outputs, and 4096) */
    ROW("fp8_swiglu_quant", .rows = 601, .cols = 14336, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_swiglu_quant", .rows = 2003, .cols = 4096, .fp8_a = KVCAL_FP8A_STATIC),

    /* add + RMSNorm with the quantization as its epilogue: every mode, with
     * and without the add, 128 and 256 threads a row (dim below and from
     * 2048 on), a short last group, Llama-3-70B's hidden size */
    ROW("fp8_add_rmsnorm_quant", .rows = 19, .cols = 4096, .delta = 1,
        .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_add_rmsnorm_quant", .rows = 1, .cols = 4096, .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_add_rmsnorm_quant", .rows = 989, .cols = 136, .delta = 1,
        .fp8_a = KVCAL_FP8A_STATIC),
    ROW("fp8_add_rmsnorm_quant", .rows = 37, .cols = 384, .delta = 1,
        .fp8_a = KVCAL_FP8A_GROUP, .group = 128),
    ROW("fp8_add_rmsnorm_quant", .rows = 19, .cols = 200, .delta = 1,
        .fp8_a = KVCAL_FP8A_GROUP, .group = 64),
    ROW("fp8_add_rmsnorm_quant", .rows = 3, .cols = 8192, .delta = 1,
        .fp8_a = KVCAL_FP8A_STATIC),
    /* 12 words a thread in registers (past 8,192) */
    ROW("fp8_add_rmsnorm_quant", .rows = 5, .cols = 16384, .delta = 1,
        .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_add_rmsnorm_quant", .rows = 2, .cols = 24576, .fp8_a = KVCAL_FP8A_STATIC),
    /* rows staged ahead by resident blocks that loop (more rows than an
     * H200's blocks hold at once), with and without the add */
    ROW("fp8_add_rmsnorm_quant", .rows = 2003, .cols = 4096, .delta = 1,
        .fp8_a = KVCAL_FP8A_TOKEN),
    ROW("fp8_add_rmsnorm_quant", .rows = 2003, .cols = 4096, .fp8_a = KVCAL_FP8A_STATIC),
};
#define NUM_ROWS (sizeof rows / sizeof rows[0])

// --- running a row -------------------------------------------------------------

/* Which suite runs a kernel version on a row (what compute-sanitizer can
 * check of it), or OP_SKIP where the version does not take the row. */
typedef enum op_class {
    OP_SKIP = -1,
    OP_PLAIN = 0, /* backend_ops */
    OP_TUNED,     /* backend_ops_tuned */
    OP_MBARRIER   /* backend_ops_mbarrier */
} op_class;

/* What one op's rows share on the device, made on first use (a plan one
 * row caches is found by the next) and freed after the last row. */
typedef struct op_ctx {
    kvcal_gemm_t *gemm;
    kvcal_attention_t *attention;
    int skip; /* the device does not run the op: its other rows are skipped */
} op_ctx;

/* An op of the table. A backend added beside CUDA gets its own three
 * fields (versions, class, run). */
typedef struct op_def {
    const char *stem;
    /* Random inputs and the CPU reference's outputs (the oracle), owned by
     * the op until release. */
    void *(*cpu)(const op_row *r);
    void (*release)(void *cpu);
    /* CUDA: the kernel versions (names, NULL-terminated), the suite of each
     * on a row, and the run of one, checked against cpu's outputs. */
    const char *const *cuda_versions;
    op_class (*cuda_class)(const op_row *r, int version);
    void (*cuda_run)(const op_row *r, int version, const void *cpu, op_ctx *ctx);
} op_def;

/* "rope_observe/v2 {rows 19 heads 4 ...}": the row and version running */
static char current[512];

static void describe(const op_row *r, const char *version)
{
    static const struct {
        const char *name;
        size_t offset;
    } fields[] = {
#define FIELD(f) {#f, offsetof(op_row, f)}
        FIELD(rows),        FIELD(cols),       FIELD(delta),        FIELD(k),
        FIELD(n),           FIELD(bias),       FIELD(vocab),        FIELD(batch),
        FIELD(seq),         FIELD(heads),      FIELD(kv_heads),     FIELD(head_dim),
        FIELD(out_pad),     FIELD(cudnn),      FIELD(rot_dim),      FIELD(interleaved),
        FIELD(qk_norm),     FIELD(nan_v),      FIELD(x_stride),     FIELD(y_stride),
        FIELD(group),       FIELD(y_f32),      FIELD(window),       FIELD(softcap),
        FIELD(experts),     FIELD(top_k),      FIELD(renorm),       FIELD(shared),
        FIELD(sigmoid),     FIELD(planted),    FIELD(ties),         FIELD(groups),
        FIELD(topk_groups), FIELD(group_max),  FIELD(kv_lora_rank), FIELD(v_dim),
        FIELD(kv_pad),      FIELD(fp8_w),      FIELD(fp8_a),        FIELD(block_n),
        FIELD(block_k),     FIELD(sinks),      FIELD(oai),          FIELD(no_weight),
        FIELD(nk),          FIELD(dk),         FIELD(nv),           FIELD(dv),
        FIELD(taps),        FIELD(out_stride), FIELD(w_stride),
#undef FIELD
    };
    size_t n = (size_t)snprintf(current, sizeof current, "%s/%s {", r->op, version);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0] && n < sizeof current; i++) {
        int v;
        memcpy(&v, (const char *)r + fields[i].offset, sizeof v);
        if (v)
            n += (size_t)snprintf(current + n, sizeof current - n, " %s %d",
                                  fields[i].name, v);
    }
    if (r->attention_factor != 0.0f && n < sizeof current)
        n += (size_t)snprintf(current + n, sizeof current - n, " attention_factor %g",
                              (double)r->attention_factor);
    if (r->norm_offset != 0.0f && n < sizeof current)
        n += (size_t)snprintf(current + n, sizeof current - n, " norm_offset %g",
                              (double)r->norm_offset);
    if (n < sizeof current)
        snprintf(current + n, sizeof current - n, " }");
}

/* CUnit's assertion with the running row in its message. */
static void row_assert(int ok, const char *what, unsigned line)
{
    char msg[2048];
    if (!ok)
        snprintf(msg, sizeof msg, "%s: %s", current, what);
    CU_assertImplementation(ok ? CU_TRUE : CU_FALSE, line, ok ? what : msg, __FILE__, "",
                            CU_FALSE);
}
#define ROW_ASSERT(cond) row_assert((cond) != 0, #cond, __LINE__)

static void row_ok(kvcal_status st, const char *call, unsigned line)
{
    char what[1024];
    if (st != KVCAL_OK)
        snprintf(what, sizeof what, "%s: %s: %s", call, kvcal_status_str(st),
                 kvcal_last_error());
    row_assert(st == KVCAL_OK, st == KVCAL_OK ? call : what, line);
}
#define ROW_OK(call) row_ok((call), #call, __LINE__)

/* bad of `of` values of `what` failed their check */
static void expect_none(int64_t bad, int64_t of, const char *what, unsigned line)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%lld of %lld %s", (long long)bad, (long long)of, what);
    row_assert(bad == 0, msg, line);
}
#define EXPECT_NONE(bad, of, what) expect_none((bad), (of), (what), __LINE__)

/* all but of / den (rounded up) of `of` values equal a model's */
static void expect_mostly(int64_t same, int64_t of, int64_t den, const char *what,
                          unsigned line)
{
    char msg[256];
    snprintf(msg, sizeof msg, "only %lld of %lld %s (all but 1/%lld of them, rounded up)",
             (long long)same, (long long)of, what, (long long)den);
    row_assert(same >= of - (of + den - 1) / den, msg, line);
}
#define EXPECT_MOSTLY(same, of, den, what)                                               \
    expect_mostly((same), (of), (den), (what), __LINE__)

// --- helpers -------------------------------------------------------------------

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* n random values in [lo, hi), each a bf16 value */
static float *rand_bf16(int64_t n, float lo, float hi)
{
    return kvcal_test_rand_bf16(&rng_state, n, lo, hi);
}

static uint32_t rand_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static float rand_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rand_u32() >> 8) * (1.0 / 16777216.0));
}

static void *host_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    return p;
}

static float *host_copy(const float *x, int64_t n)
{
    float *y = host_alloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    return p;
}

/* n bf16 NaN (0xffff) on the device: an output a kernel leaves unwritten */
static kvcal_bf16 *dev_alloc_nan(int64_t n)
{
    kvcal_bf16 *p = dev_alloc((size_t)n * sizeof *p);
    CU_ASSERT_EQUAL(cudaMemset(p, 0xff, (size_t)n * sizeof *p), cudaSuccess);
    return p;
}

static void *dev_upload(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    CU_ASSERT_EQUAL(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static void dev_download(void *h, const void *d, size_t bytes)
{
    CU_ASSERT_EQUAL(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

static void sync_ok(void)
{
    ROW_ASSERT(cudaDeviceSynchronize() == cudaSuccess);
}

/* Values outside atol + |ref| * rtol (a NaN is outside). */
static int64_t count_far(const float *got, const float *ref, int64_t n, double atol,
                         double rtol)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(fabs((double)got[i] - (double)ref[i]) <=
                 atol + fabs((double)ref[i]) * rtol);
    return bad;
}

/* Values that differ (a NaN equals a NaN). */
static int64_t count_differ(const float *got, const float *want, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += !(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])));
    return bad;
}

/* Values equal bit for bit to a model's. */
static int64_t count_same(const float *got, const float *model, int64_t n)
{
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++)
        same += memcmp(&got[i], &model[i], sizeof got[i]) == 0;
    return same;
}

// --- add_rmsnorm ---------------------------------------------------------------

/* bf16 output against the fp32 reference: two roundings (2^-9 relative each:
 * x * rsqrt, then times the weight) plus float reordering in the sum of
 * squares. The residual stream is exact. */
#define NORM_ATOL 1e-3
#define NORM_RTOL 8e-3
#define NORM_EPS 1e-5f

typedef struct norm_cpu {
    float *res, *delta, *w; /* (rows, cols), (rows, cols), (cols) */
    float *sum;             /* (rows, cols) the residual after the add, rounded to bf16 */
    float *ref;             /* (rows, cols) kvcal_rmsnorm_ref of sum */
} norm_cpu;

static void *add_rmsnorm_cpu(const op_row *r)
{
    const int64_t n = (int64_t)r->rows * r->cols;
    norm_cpu *c = host_alloc(sizeof *c);
    c->res = rand_bf16(n, -2.0f, 2.0f);
    c->delta = rand_bf16(n, -1.0f, 1.0f);
    c->w =
        rand_bf16(r->cols, r->norm_offset ? -0.5f : 0.5f, r->norm_offset ? 0.5f : 1.5f);
    c->sum = host_copy(c->res, n);
    c->ref = host_alloc((size_t)n * sizeof *c->ref);
    if (r->delta) {
        kvcal_add_ref(c->sum, c->delta, n);
        for (int64_t i = 0; i < n; i++)
            c->sum[i] = kvcal_bf16_round(c->sum[i]);
    }
    float *w = host_copy(c->w, r->cols); /* w + norm_offset in fp32 */
    for (int i = 0; i < r->cols; i++)
        w[i] += r->norm_offset;
    kvcal_rmsnorm_ref(c->ref, c->sum, w, r->rows, r->cols, NORM_EPS);
    free(w);
    return c;
}

static void add_rmsnorm_release(void *p)
{
    norm_cpu *c = p;
    free(c->res);
    free(c->delta);
    free(c->w);
    free(c->sum);
    free(c->ref);
    free(c);
}

static void add_rmsnorm_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const norm_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_res = kvcal_test_dev_upload_bf16(c->res, n),
               *d_delta = kvcal_test_dev_upload_bf16(c->delta, n),
               *d_w = kvcal_test_dev_upload_bf16(c->w, r->cols),
               *d_out = dev_alloc_nan(n);
    ROW_OK(kvcal_add_rmsnorm_offset_launch(d_out, d_res, r->delta ? d_delta : NULL,
                                           r->no_weight ? NULL : d_w, r->norm_offset,
                                           r->rows, r->cols, NORM_EPS, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n),
          *got_res = kvcal_test_dev_download_bf16(d_res, n);
    if (r->no_weight) { /* the residual after the add, passed through */
        EXPECT_NONE(count_differ(got, c->sum, n), n, "outputs not the residual's");
        EXPECT_NONE(count_differ(got_res, c->sum, n), n,
                    "residual values not the reference's");
        free(got), free(got_res);
        cudaFree(d_res), cudaFree(d_delta), cudaFree(d_w), cudaFree(d_out);
        return;
    }
    EXPECT_NONE(count_far(got, c->ref, n, NORM_ATOL, NORM_RTOL), n,
                "outputs off the bound");
    EXPECT_NONE(count_differ(got_res, c->sum, n), n,
                "residual values not the reference's");
    /* and bf16 arithmetic's result (transformers' RMSNorm) bit for bit but
     * where the two scales straddle a rounding boundary (at most 1%) */
    float *model = host_alloc((size_t)n * sizeof *model);
    for (int i = 0; i < r->rows; i++) {
        const float *x = c->sum + (int64_t)i * r->cols;
        double ss = 0.0;
        for (int j = 0; j < r->cols; j++)
            ss += (double)x[j] * x[j];
        const float inv = 1.0f / sqrtf((float)(ss / r->cols) + NORM_EPS);
        for (int j = 0; j < r->cols; j++)
            model[(int64_t)i * r->cols + j] =
                r->norm_offset != 0.0f
                    ? kvcal_bf16_round(x[j] * inv * (c->w[j] + r->norm_offset))
                    : kvcal_bf16_round(kvcal_bf16_round(x[j] * inv) * c->w[j]);
    }
    EXPECT_MOSTLY(count_same(got, model, n), n, 100,
                  "outputs equal to bf16 arithmetic's");
    free(model);
    free(got);
    free(got_res);
    cudaFree(d_res);
    cudaFree(d_delta);
    cudaFree(d_w);
    cudaFree(d_out);
}

/* rmsnorm_cols: x (rows, x_stride), the first heads segments of cols
 * values of each row normalized in place: add_rmsnorm's bounds there, the
 * other columns untouched. */
typedef struct rmsnorm_cols_cpu {
    float *x, *w, *ref; /* (rows, x_stride), (cols), (rows, x_stride) */
} rmsnorm_cols_cpu;

static void *rmsnorm_cols_cpu_run(const op_row *r)
{
    const int64_t n = (int64_t)r->rows * r->x_stride;
    rmsnorm_cols_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(n, -2.0f, 2.0f);
    c->w = rand_bf16(r->cols, 0.5f, 1.5f);
    c->ref = host_copy(c->x, n);
    for (int i = 0; i < r->rows; i++)
        kvcal_rmsnorm_ref(c->ref + (int64_t)i * r->x_stride,
                          c->x + (int64_t)i * r->x_stride, c->w, r->heads, r->cols,
                          NORM_EPS);
    return c;
}

static void rmsnorm_cols_release(void *p)
{
    rmsnorm_cols_cpu *c = p;
    free(c->x), free(c->w), free(c->ref);
    free(c);
}

static void rmsnorm_cols_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const rmsnorm_cols_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->x_stride;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, n),
               *d_w = kvcal_test_dev_upload_bf16(c->w, r->cols);
    ROW_OK(kvcal_rmsnorm_cols_launch(d_x, r->x_stride, d_w, r->rows, r->heads, r->cols,
                                     NORM_EPS, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_x, n);
    const int64_t width = (int64_t)r->heads * r->cols;
    int64_t far = 0, moved = 0;
    for (int i = 0; i < r->rows; i++) {
        const int64_t at = (int64_t)i * r->x_stride;
        far += count_far(got + at, c->ref + at, width, NORM_ATOL, NORM_RTOL);
        moved += count_differ(got + at + width, c->x + at + width, r->x_stride - width);
    }
    EXPECT_NONE(far, (int64_t)r->rows * width, "outputs off the bound");
    EXPECT_NONE(moved, n, "values past the normalized columns changed");
    free(got);
    cudaFree(d_x), cudaFree(d_w);
}

static op_class one_plain_version(const op_row *r, int version)
{
    (void)r, (void)version;
    return OP_PLAIN;
}

// --- gemm ----------------------------------------------------------------------

/* Inputs in [-1, 1): |ref| up to ~sqrt(k)/3; fp32 accumulation in another
 * order plus one bf16 rounding of the output. */
#define GEMM_ATOL 2e-2
#define GEMM_RTOL 8e-3
/* kvcal_gemm_launch times cuBLASLt's candidates for shapes of this many
 * FLOPs or more (GEMM_TUNE_FLOPS, kernels/cuda/gemm.cu) */
#define GEMM_TUNED_FLOPS 1e9

typedef struct gemm_cpu {
    float *x, *w, *bias; /* (rows, k), (n, k), (n) */
    float *ref;          /* (rows, n) kvcal_matmul_ref */
} gemm_cpu;

static void *gemm_cpu_run(const op_row *r)
{
    gemm_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16((int64_t)r->rows * r->k, -1.0f, 1.0f);
    c->w = rand_bf16((int64_t)r->n * r->k, -1.0f, 1.0f);
    c->bias = rand_bf16(r->n, -1.0f, 1.0f);
    c->ref = host_alloc((size_t)r->rows * r->n * sizeof *c->ref);
    kvcal_matmul_ref(c->ref, c->x, c->w, r->bias ? c->bias : NULL, r->rows, r->k, r->n);
    return c;
}

static void gemm_release(void *p)
{
    gemm_cpu *c = p;
    free(c->x);
    free(c->w);
    free(c->bias);
    free(c->ref);
    free(c);
}

/* version 0: kvcal_gemm_launch (the algorithm chosen for the shape); 1:
 * every candidate cuBLASLt proposes for a tuned shape, one by one (what
 * bench/runner_ops times); 2: kvcal_gemm_launch_ld on x's rows inside a
 * wider buffer (GEMM_LD_PAD more values a row, NaN: a read of them shows);
 * 3: kvcal_gemm_accumulate_launch twice onto a residual stream (the first
 * launch of a tuned shape times its candidates: none of them may add) */
static const char *const gemm_versions[] = {"launch", "candidates", "strided",
                                            "accumulate", NULL};
#define GEMM_LD_PAD 40

static op_class gemm_class(const op_row *r, int version)
{
    const int tuned = 2.0 * r->rows * (double)r->k * r->n >= GEMM_TUNED_FLOPS;
    if (version == 1)
        return tuned ? OP_TUNED : OP_SKIP;
    return tuned ? OP_TUNED : OP_PLAIN;
}

static void gemm_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    const gemm_cpu *c = p;
    const int64_t n_out = (int64_t)r->rows * r->n;
    if (!ctx->gemm)
        CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &ctx->gemm), KVCAL_OK);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, (int64_t)r->rows * r->k),
               *d_w = kvcal_test_dev_upload_bf16(c->w, (int64_t)r->n * r->k),
               *d_b = kvcal_test_dev_upload_bf16(c->bias, r->n),
               *d_out = dev_alloc_nan(n_out);
    const kvcal_bf16 *bias = r->bias ? d_b : NULL;
    float *got = NULL;
    if (version == 0) {
        ROW_OK(
            kvcal_gemm_launch(ctx->gemm, d_out, d_x, d_w, bias, r->rows, r->k, r->n, 0));
        sync_ok();
        got = kvcal_test_dev_download_bf16(d_out, n_out);
        EXPECT_NONE(count_far(got, c->ref, n_out, GEMM_ATOL, GEMM_RTOL), n_out,
                    "outputs off the bound");
    } else if (version == 3) {
        float *resid = rand_bf16(n_out, -4.0f, 4.0f),
              *want = host_alloc(n_out * sizeof *want);
        kvcal_bf16 *d_resid = kvcal_test_dev_upload_bf16(resid, n_out);
        /* no scratch, or the output as its own: refused */
        ROW_ASSERT(kvcal_gemm_accumulate_launch(ctx->gemm, d_resid, NULL, d_x, d_w, bias,
                                                r->rows, r->k, r->n,
                                                0) == KVCAL_ERR_INVALID_ARG);
        ROW_ASSERT(kvcal_gemm_accumulate_launch(ctx->gemm, d_resid, d_resid, d_x, d_w,
                                                bias, r->rows, r->k, r->n,
                                                0) == KVCAL_ERR_INVALID_ARG);
        ROW_ASSERT(kvcal_test_error_has("scratch"));
        for (int pass = 1; pass <= 2; pass++) {
            ROW_OK(kvcal_gemm_accumulate_launch(ctx->gemm, d_resid, d_out, d_x, d_w, bias,
                                                r->rows, r->k, r->n, 0));
            sync_ok();
            free(got);
            got = kvcal_test_dev_download_bf16(d_resid, n_out);
            for (int64_t i = 0; i < n_out; i++)
                want[i] = resid[i] + (float)pass * c->ref[i];
            EXPECT_NONE(count_far(got, want, n_out, 2 * GEMM_ATOL, GEMM_RTOL), n_out,
                        pass == 1 ? "stream + the product off the bound"
                                  : "stream + twice the product off the bound");
            /* the second pass adds to the first's bf16 sums */
            for (int64_t i = 0; pass == 1 && i < n_out; i++)
                resid[i] = got[i] - c->ref[i];
        }
        free(resid);
        free(want);
        cudaFree(d_resid);
    } else if (version == 2) {
        const int64_t ld = (int64_t)r->k + GEMM_LD_PAD;
        float *wide = host_alloc((size_t)r->rows * ld * sizeof *wide);
        for (int64_t i = 0; i < r->rows; i++)
            for (int64_t j = 0; j < ld; j++)
                wide[i * ld + j] = j < r->k ? c->x[i * r->k + j] : NAN;
        kvcal_bf16 *d_wide = kvcal_test_dev_upload_bf16(wide, (int64_t)r->rows * ld);
        ROW_OK(kvcal_gemm_launch_ld(ctx->gemm, d_out, d_wide, ld, d_w, bias, r->rows,
                                    r->k, r->n, 0));
        sync_ok();
        got = kvcal_test_dev_download_bf16(d_out, n_out);
        EXPECT_NONE(count_far(got, c->ref, n_out, GEMM_ATOL, GEMM_RTOL), n_out,
                    "outputs off the bound");
        /* rows closer than k are refused before any launch */
        ROW_ASSERT(kvcal_gemm_launch_ld(ctx->gemm, d_out, d_wide, r->k - 1, d_w, bias,
                                        r->rows, r->k, r->n, 0) == KVCAL_ERR_INVALID_ARG);
        ROW_ASSERT(kvcal_test_error_has("apart"));
        free(wide);
        cudaFree(d_wide);
    } else {
        int count = 0;
        ROW_OK(kvcal_gemm_launch_candidate(ctx->gemm, -1, d_out, d_x, d_w, bias, r->rows,
                                           r->k, r->n, 0, &count, NULL));
        ROW_ASSERT(count >= 1);
        for (int cand = 0; cand < count; cand++) {
            char what[64];
            CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)n_out * sizeof *d_out),
                            cudaSuccess);
            ROW_OK(kvcal_gemm_launch_candidate(ctx->gemm, cand, d_out, d_x, d_w, bias,
                                               r->rows, r->k, r->n, 0, NULL, NULL));
            sync_ok();
            free(got);
            got = kvcal_test_dev_download_bf16(d_out, n_out);
            snprintf(what, sizeof what, "outputs of candidate %d off the bound", cand);
            EXPECT_NONE(count_far(got, c->ref, n_out, GEMM_ATOL, GEMM_RTOL), n_out, what);
        }
        /* a candidate out of range is refused before any launch */
        ROW_ASSERT(kvcal_gemm_launch_candidate(ctx->gemm, count, d_out, d_x, d_w, bias,
                                               r->rows, r->k, r->n, 0, NULL,
                                               NULL) == KVCAL_ERR_INVALID_ARG);
        ROW_ASSERT(kvcal_test_error_has("candidate"));
    }
    free(got);
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_out);
}

// --- gemm_batched --------------------------------------------------------------

/* gemm's bounds a batch at a time; out's values outside the batches' blocks
 * (the gaps between them, the columns past the last) untouched. x's padding
 * and the weights' gaps are NaN: a read of them shows. */
typedef struct gemm_batched_cpu {
    float *x;   /* (rows, ldx), NaN past k */
    float *w;   /* (batch - 1) * w_stride + n * k values, NaN between the weights */
    float *ref; /* (rows, ldo): kvcal_matmul_ref's blocks, NaN elsewhere */
    int64_t ldx, ldo, x_n, w_n, out_n;
} gemm_batched_cpu;

static void *gemm_batched_cpu_run(const op_row *r)
{
    gemm_batched_cpu *c = host_alloc(sizeof *c);
    const int64_t nk = (int64_t)r->n * r->k;
    const int64_t stored = r->rows ? r->rows : 1; /* rows 0: one NaN row of each */
    c->ldx = r->x_stride ? r->x_stride : r->k;
    c->ldo = r->y_stride ? r->y_stride : r->n;
    c->x_n = stored * c->ldx;
    c->w_n = (int64_t)(r->batch - 1) * r->w_stride + nk;
    c->out_n = stored * c->ldo;
    float *x = rand_bf16((int64_t)r->rows * r->k, -1.0f, 1.0f),
          *w = rand_bf16(r->batch * nk, -1.0f, 1.0f),
          *block = host_alloc((size_t)r->rows * r->n * sizeof *block);
    c->x = host_alloc((size_t)c->x_n * sizeof *c->x);
    for (int64_t i = 0; i < c->x_n; i++)
        c->x[i] = i / c->ldx < r->rows && i % c->ldx < r->k
                      ? x[i / c->ldx * r->k + i % c->ldx]
                      : NAN;
    c->w = host_alloc((size_t)c->w_n * sizeof *c->w);
    c->ref = host_alloc((size_t)c->out_n * sizeof *c->ref);
    for (int64_t i = 0; i < c->w_n; i++)
        c->w[i] = NAN;
    for (int64_t i = 0; i < c->out_n; i++)
        c->ref[i] = NAN;
    for (int b = 0; b < r->batch; b++) {
        memcpy(c->w + (int64_t)b * r->w_stride, w + b * nk, (size_t)nk * sizeof *w);
        kvcal_matmul_ref(block, x, w + b * nk, NULL, r->rows, r->k, r->n);
        for (int64_t i = 0; i < r->rows; i++)
            memcpy(c->ref + i * c->ldo + (int64_t)b * r->out_stride, block + i * r->n,
                   (size_t)r->n * sizeof *block);
    }
    free(x);
    free(w);
    free(block);
    return c;
}

static void gemm_batched_release(void *p)
{
    gemm_batched_cpu *c = p;
    free(c->x);
    free(c->w);
    free(c->ref);
    free(c);
}

static op_class gemm_batched_class(const op_row *r, int version)
{
    (void)version;
    const double flops = 2.0 * r->rows * (double)r->k * r->n * r->batch;
    return flops >= GEMM_TUNED_FLOPS ? OP_TUNED : OP_PLAIN;
}

static void gemm_batched_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version;
    const gemm_batched_cpu *c = p;
    if (!ctx->gemm)
        CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &ctx->gemm), KVCAL_OK);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, c->x_n),
               *d_w = kvcal_test_dev_upload_bf16(c->w, c->w_n),
               *d_out = dev_alloc_nan(c->out_n);
    ROW_OK(kvcal_gemm_batched_launch(ctx->gemm, d_out, c->ldo, r->out_stride, d_x, c->ldx,
                                     d_w, r->w_stride, r->rows, r->k, r->n, r->batch, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, c->out_n);
    int64_t far = 0, written = 0, touched = 0;
    for (int64_t i = 0; i < c->out_n; i++) {
        if (isnan(c->ref[i])) {
            touched += !isnan(got[i]);
            continue;
        }
        written++;
        far += count_far(&got[i], &c->ref[i], 1, GEMM_ATOL, GEMM_RTOL);
    }
    EXPECT_NONE(far, written, "outputs off the bound");
    EXPECT_NONE(touched, c->out_n - written,
                "values outside the batches' blocks written");
    /* x's rows closer than k, batches that overlap in out, an out too narrow
     * for the last batch: refused before any launch */
    ROW_ASSERT(kvcal_gemm_batched_launch(ctx->gemm, d_out, c->ldo, r->out_stride, d_x,
                                         r->k - 1, d_w, r->w_stride, r->rows, r->k, r->n,
                                         r->batch, 0) == KVCAL_ERR_INVALID_ARG);
    ROW_ASSERT(kvcal_test_error_has("gemm_batched"));
    if (r->batch > 1)
        ROW_ASSERT(kvcal_gemm_batched_launch(ctx->gemm, d_out, c->ldo, r->n - 1, d_x,
                                             c->ldx, d_w, r->w_stride, r->rows, r->k,
                                             r->n, r->batch, 0) == KVCAL_ERR_INVALID_ARG);
    ROW_ASSERT(kvcal_gemm_batched_launch(
                   ctx->gemm, d_out, (int64_t)(r->batch - 1) * r->out_stride + r->n - 1,
                   r->out_stride, d_x, c->ldx, d_w, r->w_stride, r->rows, r->k, r->n,
                   r->batch, 0) == KVCAL_ERR_INVALID_ARG);
    free(got);
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_out);
}

// --- gemm_swiglu ---------------------------------------------------------------

/* The unfused path's roundings (gate and up to bf16, silu(gate), the
 * product); the sums differ from the fp32 reference's in order only. */
#define GEMM_SWIGLU_ATOL 2e-2
#define GEMM_SWIGLU_RTOL 2e-2

typedef struct gemm_swiglu_cpu {
    float *x, *w; /* (rows, k), [Wgate; Wup] (2n, k) */
    float *ref;   /* (rows, n) kvcal_swiglu_ref of kvcal_matmul_ref's gate and up,
                     each rounded to bf16 */
} gemm_swiglu_cpu;

static void *gemm_swiglu_cpu_run(const op_row *r)
{
    const int64_t na = (int64_t)r->rows * r->n;
    gemm_swiglu_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16((int64_t)r->rows * r->k, -1.0f, 1.0f);
    c->w = rand_bf16(2 * (int64_t)r->n * r->k, -1.0f, 1.0f);
    c->ref = host_alloc((size_t)na * sizeof *c->ref);
    float *gu = host_alloc((size_t)na * 2 * sizeof *gu); /* (rows, 2n) */
    float *gate = host_alloc((size_t)na * sizeof *gate),
          *up = host_alloc((size_t)na * sizeof *up);
    kvcal_matmul_ref(gu, c->x, c->w, NULL, r->rows, r->k, 2 * r->n);
    for (int i = 0; i < r->rows; i++)
        for (int j = 0; j < r->n; j++) {
            gate[(int64_t)i * r->n + j] = kvcal_bf16_round(gu[(int64_t)i * 2 * r->n + j]);
            up[(int64_t)i * r->n + j] =
                kvcal_bf16_round(gu[(int64_t)i * 2 * r->n + r->n + j]);
        }
    kvcal_swiglu_ref(c->ref, gate, up, na);
    free(gu);
    free(gate);
    free(up);
    return c;
}

static void gemm_swiglu_release(void *p)
{
    gemm_swiglu_cpu *c = p;
    free(c->x);
    free(c->w);
    free(c->ref);
    free(c);
}

static op_class one_mbarrier_version(const op_row *r, int version)
{
    (void)r, (void)version;
    return OP_MBARRIER;
}

/* The fused kernel against the reference and, value for value, against the
 * unfused path (kvcal_gemm_launch, then kvcal_swiglu_launch). A GPU other
 * than a Hopper is refused by the kernel: the op's rows are skipped. */
static void gemm_swiglu_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version;
    const gemm_swiglu_cpu *c = p;
    const int64_t nx = (int64_t)r->rows * r->k, nw = 2 * (int64_t)r->n * r->k,
                  nt = (int64_t)kvcal_gemm_swiglu_rows(r->n) * r->k,
                  na = (int64_t)r->rows * r->n;
    if (!ctx->gemm)
        CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &ctx->gemm), KVCAL_OK);
    kvcal_bf16 *w_host = host_alloc((size_t)nw * sizeof *w_host),
               *w_tiled = host_alloc((size_t)nt * sizeof *w_tiled);
    for (int64_t i = 0; i < nw; i++)
        w_host[i] = kvcal_bf16_from_float(c->w[i]);
    kvcal_gemm_swiglu_interleave(w_tiled, w_host, r->k, r->n);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, nx),
               *d_w = dev_upload(w_host, (size_t)nw * sizeof *w_host),
               *d_wt = dev_upload(w_tiled, (size_t)nt * sizeof *w_tiled),
               *d_gu = dev_alloc_nan(2 * na), *d_act = dev_alloc_nan(na),
               *d_unfused = dev_alloc_nan(na);
    const kvcal_status st =
        kvcal_gemm_swiglu_launch(d_act, d_x, d_wt, r->rows, r->k, r->n, 0);
    if (st == KVCAL_ERR_UNSUPPORTED) {
        printf("skipped: %s ", kvcal_last_error());
        ctx->skip = 1;
    } else {
        ROW_OK(st);
        ROW_OK(kvcal_gemm_launch(ctx->gemm, d_gu, d_x, d_w, NULL, r->rows, r->k, 2 * r->n,
                                 0));
        ROW_OK(kvcal_swiglu_launch(d_unfused, d_gu, r->rows, r->n, 0));
        sync_ok();
        float *got = kvcal_test_dev_download_bf16(d_act, na),
              *unfused = kvcal_test_dev_download_bf16(d_unfused, na);
        EXPECT_NONE(count_far(got, c->ref, na, GEMM_SWIGLU_ATOL, GEMM_SWIGLU_RTOL), na,
                    "outputs off the bound");
        /* the same roundings as the unfused path: equal but where the two
         * summation orders straddle a bf16 rounding boundary */
        EXPECT_MOSTLY(count_same(got, unfused, na), na, 50,
                      "outputs equal to the unfused path's");
        free(got);
        free(unfused);
    }
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_wt);
    cudaFree(d_gu);
    cudaFree(d_act);
    cudaFree(d_unfused);
    free(w_host);
    free(w_tiled);
}

// --- rope_observe --------------------------------------------------------------

/* The reference's norm and rotation are fp32 (sin/cos in double); the kernel
 * rounds as bf16 arithmetic does (kernels/cuda/bf16_round.cuh): the norm
 * twice, sin/cos, each product and the sum. Each of those roundings moves a
 * term by at most 2^-9 of its operand, so a rotated value may differ from
 * the reference by (|a| + |b|) * ROPE_TERM_RTOL beyond atol + |ref| * rtol,
 * (a, b) its pair before the rotation. V is untouched, and the observer's
 * statistics are exact: V's the reference's, K's the reference's fold of
 * the K the kernel stored (rotated and rounded to bf16). */
#define ROPE_ATOL 4e-3
#define ROPE_RTOL 8e-3
#define ROPE_TERM_RTOL (1.0 / 128)
#define ROPE_EPS 1e-6f

/* kvcal_rope_observe_ref's configuration that rotates nothing and observes */
static const kvcal_rope_ref_cfg observe_only = {NULL, 0, 0, NULL, NULL, 0.0f, 1.0f};

/* One layer's observer in host memory. */
typedef struct obs_host {
    kvcal_kv_observer o;
    int kv_heads, head_dim;
} obs_host;

static void obs_alloc(obs_host *h, int kv_heads, int head_dim)
{
    h->kv_heads = kv_heads;
    h->head_dim = head_dim;
    h->o.q_absmax = NULL; /* the queries: where a test sets them */
    for (int kv = 0; kv < 2; kv++) {
        h->o.absmax[kv] = calloc((size_t)kv_heads * head_dim, sizeof(float));
        h->o.hist[kv] = calloc((size_t)kv_heads * KVCAL_HIST_BINS, sizeof(uint64_t));
        h->o.batch_absmax[kv] = calloc((size_t)kv_heads, sizeof(float));
        CU_ASSERT_FATAL(h->o.absmax[kv] && h->o.hist[kv] && h->o.batch_absmax[kv]);
    }
}

static void obs_free(obs_host *h)
{
    for (int kv = 0; kv < 2; kv++) {
        free(h->o.absmax[kv]);
        free(h->o.hist[kv]);
        free(h->o.batch_absmax[kv]);
    }
}

static void obs_copy(obs_host *dst, const obs_host *src)
{
    obs_alloc(dst, src->kv_heads, src->head_dim);
    for (int kv = 0; kv < 2; kv++) {
        memcpy(dst->o.absmax[kv], src->o.absmax[kv],
               (size_t)src->kv_heads * src->head_dim * sizeof(float));
        memcpy(dst->o.hist[kv], src->o.hist[kv],
               (size_t)src->kv_heads * KVCAL_HIST_BINS * sizeof(uint64_t));
        memcpy(dst->o.batch_absmax[kv], src->o.batch_absmax[kv],
               (size_t)src->kv_heads * sizeof(float));
    }
}

/* Values of K's or V's absmax, histograms and batch_absmax that differ (a
 * NaN equals a NaN). */
static int64_t obs_differ(const obs_host *a, const obs_host *b, int kv)
{
    const int64_t am_n = (int64_t)a->kv_heads * a->head_dim,
                  h_n = (int64_t)a->kv_heads * KVCAL_HIST_BINS;
    int64_t bad = count_differ(a->o.absmax[kv], b->o.absmax[kv], am_n) +
                  count_differ(a->o.batch_absmax[kv], b->o.batch_absmax[kv], a->kv_heads);
    for (int64_t i = 0; i < h_n; i++)
        bad += a->o.hist[kv][i] != b->o.hist[kv][i];
    return bad;
}

/* A device copy of h; obs_dev_free frees it. */
static kvcal_kv_observer obs_upload(const obs_host *h)
{
    kvcal_kv_observer d;
    d.q_absmax = NULL; /* the queries: set by the caller */
    for (int kv = 0; kv < 2; kv++) {
        d.absmax[kv] = dev_upload(h->o.absmax[kv],
                                  (size_t)h->kv_heads * h->head_dim * sizeof(float));
        d.hist[kv] = dev_upload(h->o.hist[kv],
                                (size_t)h->kv_heads * KVCAL_HIST_BINS * sizeof(uint64_t));
        d.batch_absmax[kv] =
            dev_upload(h->o.batch_absmax[kv], (size_t)h->kv_heads * sizeof(float));
    }
    return d;
}

/* The device observer d into h (allocated as kv_heads x head_dim). */
static void obs_download(obs_host *h, const kvcal_kv_observer *d)
{
    for (int kv = 0; kv < 2; kv++) {
        dev_download(h->o.absmax[kv], d->absmax[kv],
                     (size_t)h->kv_heads * h->head_dim * sizeof(float));
        dev_download(h->o.hist[kv], d->hist[kv],
                     (size_t)h->kv_heads * KVCAL_HIST_BINS * sizeof(uint64_t));
        dev_download(h->o.batch_absmax[kv], d->batch_absmax[kv],
                     (size_t)h->kv_heads * sizeof(float));
    }
}

static void obs_dev_free(kvcal_kv_observer *d)
{
    for (int kv = 0; kv < 2; kv++) {
        cudaFree(d->absmax[kv]);
        cudaFree(d->hist[kv]);
        cudaFree(d->batch_absmax[kv]);
    }
}

typedef struct rope_cpu {
    float *qkv;      /* (tokens, stride) q, k, v: the input */
    float *qn, *kn;  /* (head_dim) norm weights */
    float *qn_ref, *kn_ref; /* the same plus the row's norm_offset, in fp32 */
    int32_t *pos;    /* (tokens) every 7th token padding (-1) */
    float *inv_freq; /* (rot_dim / 2) */
    float *normed;   /* (tokens, stride) the input after the q/k norms */
    float *ref;      /* (tokens, stride) kvcal_rope_observe_ref of the input */
    obs_host pre;    /* the observer before the op: a random block folded in */
    obs_host after;  /* pre with the reference's K and V folded in */
} rope_cpu;

static int64_t rope_stride(const op_row *r)
{
    return (int64_t)(r->heads + 2 * r->kv_heads) * r->head_dim;
}

static float rope_factor(const op_row *r)
{
    return r->attention_factor != 0.0f ? r->attention_factor : 1.0f;
}

static kvcal_rope_ref_cfg rope_ref_cfg(const op_row *r, const rope_cpu *c)
{
    const kvcal_rope_ref_cfg cfg = {c->inv_freq,
                                    r->rot_dim,
                                    r->interleaved,
                                    r->qk_norm ? c->qn_ref : NULL,
                                    r->qk_norm ? c->kn_ref : NULL,
                                    ROPE_EPS,
                                    rope_factor(r)};
    return cfg;
}

static void *rope_observe_cpu(const op_row *r)
{
    const int hd = r->head_dim, kvh = r->kv_heads;
    const int64_t stride = rope_stride(r), n = (int64_t)r->rows * stride;
    rope_cpu *c = host_alloc(sizeof *c);
    c->qkv = rand_bf16(n, -3.0f, 3.0f);
    c->qn = rand_bf16(hd, r->norm_offset ? -0.5f : 0.5f, r->norm_offset ? 0.5f : 1.5f);
    c->kn = rand_bf16(hd, r->norm_offset ? -0.5f : 0.5f, r->norm_offset ? 0.5f : 1.5f);
    c->qn_ref = host_copy(c->qn, hd);
    c->kn_ref = host_copy(c->kn, hd);
    for (int i = 0; i < hd; i++)
        c->qn_ref[i] += r->norm_offset, c->kn_ref[i] += r->norm_offset;
    c->pos = host_alloc((size_t)r->rows * sizeof *c->pos);
    c->inv_freq = host_alloc((size_t)(r->rot_dim / 2) * sizeof *c->inv_freq);
    for (int t = 0; t < r->rows; t++)
        c->pos[t] = t % 7 == 3 ? -1 : 5 * t + 1;
    for (int i = 0; i < r->rot_dim / 2; i++)
        c->inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)r->rot_dim);
    if (r->nan_v)
        c->qkv[2 * stride + (int64_t)(r->heads + kvh) * hd + 5] = kvcal_bf16_round(NAN);

    /* five tokens of k and v alone, observed first: folding (max, +) is
     * checked, not only writing */
    obs_alloc(&c->pre, kvh, hd);
    const int32_t pre_pos[5] = {0, 1, 2, 3, 4};
    float *pre_kv = rand_bf16(5 * 2 * (int64_t)kvh * hd, -2.0f, 2.0f);
    kvcal_rope_observe_ref(pre_kv, 2 * (int64_t)kvh * hd, pre_pos, 5, 0, kvh, hd,
                           &observe_only, &c->pre.o);
    free(pre_kv);

    const kvcal_rope_ref_cfg cfg = rope_ref_cfg(r, c);
    kvcal_rope_ref_cfg norms_only = cfg;
    norms_only.rot_dim = 0;
    c->normed = host_copy(c->qkv, n);
    kvcal_rope_observe_ref(c->normed, stride, c->pos, r->rows, r->heads, kvh, hd,
                           &norms_only, NULL);
    c->ref = host_copy(c->qkv, n);
    obs_copy(&c->after, &c->pre);
    kvcal_rope_observe_ref(c->ref, stride, c->pos, r->rows, r->heads, kvh, hd, &cfg,
                           &c->after.o);
    return c;
}

static void rope_observe_release(void *p)
{
    rope_cpu *c = p;
    free(c->qkv);
    free(c->qn);
    free(c->kn);
    free(c->qn_ref);
    free(c->kn_ref);
    free(c->pos);
    free(c->inv_freq);
    free(c->normed);
    free(c->ref);
    obs_free(&c->pre);
    obs_free(&c->after);
    free(c);
}

/* version 0: kvcal_rope_observe_launch's own choice */
static const char *const rope_versions[] = {"launch", "v1", "v2", NULL};

static op_class rope_observe_class(const op_row *r, int version)
{
    if (version == 2 && (r->head_dim % 16 || r->rot_dim % 16))
        return OP_SKIP;
    return OP_PLAIN;
}

/* Rotated values of one head row outside the bound above; pre is the row
 * before the rotation. */
static int64_t rope_far(const float *got, const float *ref, const float *pre, int hd,
                        int rot_dim, int interleaved)
{
    int64_t bad = 0;
    for (int c = 0; c < hd; c++) {
        double pair = 0.0;
        if (c < rot_dim) {
            const int half = rot_dim / 2;
            const int mate = interleaved ? c ^ 1 : (c < half ? c + half : c - half);
            pair = fabs((double)pre[c]) + fabs((double)pre[mate]);
        }
        bad += !(fabs((double)got[c] - (double)ref[c]) <=
                 ROPE_ATOL + fabs((double)ref[c]) * ROPE_RTOL + pair * ROPE_TERM_RTOL);
    }
    return bad;
}

/* One head row as transformers computes it in bf16 (what the kernel is meant
 * to reproduce): RMSNorm (x * rsqrt rounded, times the weight, rounded),
 * cos/sin times the attention factor rounded, each product and the sum
 * rounded. */
static void rope_row_bf16_arithmetic(float *row, const float *norm_w, float norm_offset,
                                     int hd, int rot_dim, int interleaved, int pos,
                                     const float *inv_freq, float eps,
                                     float attention_factor)
{
    if (norm_w) {
        float ss = 0.0f;
        for (int c = 0; c < hd; c++)
            ss += row[c] * row[c];
        const float r = 1.0f / sqrtf(ss / (float)hd + eps);
        for (int c = 0; c < hd; c++)
            row[c] = norm_offset != 0.0f
                         ? kvcal_bf16_round(row[c] * r * (norm_w[c] + norm_offset))
                         : kvcal_bf16_round(kvcal_bf16_round(row[c] * r) * norm_w[c]);
    }
    const int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        const float angle = (float)pos * inv_freq[i];
        const float cs = kvcal_bf16_round((float)cos((double)angle) * attention_factor);
        const float sn = kvcal_bf16_round((float)sin((double)angle) * attention_factor);
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = row[a], x1 = row[b];
        row[a] = kvcal_bf16_round(kvcal_bf16_round(x0 * cs) - kvcal_bf16_round(x1 * sn));
        row[b] = kvcal_bf16_round(kvcal_bf16_round(x1 * cs) + kvcal_bf16_round(x0 * sn));
    }
}

static void rope_observe_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)ctx;
    const rope_cpu *c = p;
    const int hd = r->head_dim, kvh = r->kv_heads, qk = r->heads + kvh;
    const int64_t stride = rope_stride(r), n = (int64_t)r->rows * stride;
    kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(c->qkv, n),
               *d_qn = kvcal_test_dev_upload_bf16(c->qn, hd),
               *d_kn = kvcal_test_dev_upload_bf16(c->kn, hd);
    int32_t *d_pos = dev_upload(c->pos, (size_t)r->rows * sizeof *c->pos);
    float *d_inv =
        dev_upload(c->inv_freq, (size_t)(r->rot_dim / 2) * sizeof *c->inv_freq);
    kvcal_kv_observer d_obs = obs_upload(&c->pre);
    /* the queries' max |q| per head too, from 0 */
    float *q_got = host_alloc(((size_t)r->heads + 1) * sizeof *q_got);
    float *q_want = host_alloc(((size_t)r->heads + 1) * sizeof *q_want);
    memset(q_want, 0, ((size_t)r->heads + 1) * sizeof *q_want);
    d_obs.q_absmax =
        r->heads ? dev_upload(q_want, (size_t)r->heads * sizeof *q_want) : NULL;
    const kvcal_rope_cfg cfg = {d_inv,
                                r->rot_dim,
                                r->interleaved,
                                r->qk_norm ? d_qn : NULL,
                                r->qk_norm ? d_kn : NULL,
                                ROPE_EPS,
                                rope_factor(r),
                                r->norm_offset};
    ROW_OK(version
               ? kvcal_rope_observe_launch_version(version, d_qkv, stride, d_pos, r->rows,
                                                   r->heads, kvh, hd, &cfg, &d_obs, 0)
               : kvcal_rope_observe_launch(d_qkv, stride, d_pos, r->rows, r->heads, kvh,
                                           hd, &cfg, &d_obs, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_qkv, n);
    obs_host got_obs;
    obs_alloc(&got_obs, kvh, hd);
    obs_download(&got_obs, &d_obs);
    if (r->heads)
        dev_download(q_got, d_obs.q_absmax, (size_t)r->heads * sizeof *q_got);

    float *model = host_alloc((size_t)hd * sizeof *model);
    int64_t far = 0, v_changed = 0, padding_changed = 0, same = 0, compared = 0,
            valid = 0;
    for (int t = 0; t < r->rows; t++) {
        const float *g = got + t * stride, *in = c->qkv + t * stride;
        if (c->pos[t] < 0) {
            padding_changed += count_differ(g, in, stride) != 0;
            continue;
        }
        valid++;
        for (int h = 0; h < qk; h++) {
            const int64_t o = t * stride + (int64_t)h * hd;
            far += rope_far(got + o, c->ref + o, c->normed + o, hd, r->rot_dim,
                            r->interleaved);
            memcpy(model, c->qkv + o, (size_t)hd * sizeof *model);
            rope_row_bf16_arithmetic(model,
                                     !r->qk_norm    ? NULL
                                     : h < r->heads ? c->qn
                                                    : c->kn,
                                     r->norm_offset, hd, r->rot_dim, r->interleaved,
                                     c->pos[t], c->inv_freq, ROPE_EPS, rope_factor(r));
            same += count_same(got + o, model, hd);
            compared += hd;
        }
        v_changed +=
            count_differ(g + (int64_t)qk * hd, in + (int64_t)qk * hd, (int64_t)kvh * hd);
    }
    EXPECT_NONE(far, compared, "rotated q and k values off the bound");
    EXPECT_NONE(v_changed, valid * kvh * hd, "V values changed");
    EXPECT_NONE(padding_changed, r->rows, "padding tokens changed");
    /* and bf16 arithmetic's result, bit for bit, but where the device's
     * sin/cos or norm scale and the host's fall on two sides of a rounding
     * boundary (rare: at most 1% of the values) */
    EXPECT_MOSTLY(same, compared, 100, "q and k values equal to bf16 arithmetic's");

    obs_host stored;
    obs_copy(&stored, &c->pre);
    stored.o.q_absmax = q_want;
    float *kv = host_copy(got, n);
    kvcal_rope_observe_ref(kv, stride, c->pos, r->rows, r->heads, kvh, hd, &observe_only,
                           &stored.o);
    EXPECT_NONE(count_differ(q_got, q_want, r->heads), r->heads,
                "Q absmax per head not the reference's fold of the Q stored");
    const int64_t obs_n = (int64_t)kvh * (hd + KVCAL_HIST_BINS + 1);
    EXPECT_NONE(obs_differ(&got_obs, &stored, KVCAL_K), obs_n,
                "K statistics not the reference's fold of the K stored");
    EXPECT_NONE(obs_differ(&got_obs, &c->after, KVCAL_V), obs_n,
                "V statistics not the reference's");
    free(kv);
    obs_free(&stored);
    free(model);
    obs_free(&got_obs);
    free(got);
    cudaFree(d_obs.q_absmax);
    free(q_got);
    free(q_want);
    obs_dev_free(&d_obs);
    cudaFree(d_qkv);
    cudaFree(d_qn);
    cudaFree(d_kn);
    cudaFree(d_pos);
    cudaFree(d_inv);
}

// --- attention -----------------------------------------------------------------

/* P is rounded to bf16 for the P V product (2^-9 relative per weight) and
 * the output once more; outputs are averages of values in [-1, 1). The
 * output's padding columns stay as they were. */
#define ATT_ATOL 1e-2
#define ATT_RTOL 2e-2

typedef struct attention_cpu {
    float *qkv;   /* (batch * seq, (heads + 2 kv_heads) head_dim) fused q, k, v */
    float *sinks; /* (heads) or NULL */
    float
        *ref; /* (batch * seq, heads * head_dim) kvcal_attention_sinks_ref per sequence */
} attention_cpu;

static void *attention_cpu_run(const op_row *r)
{
    const int hd = r->head_dim, h = r->heads, kvh = r->kv_heads;
    const int64_t tokens = (int64_t)r->batch * r->seq,
                  stride = (int64_t)(h + 2 * kvh) * hd;
    attention_cpu *c = host_alloc(sizeof *c);
    c->qkv = rand_bf16(tokens * stride, -1.0f, 1.0f);
    /* around the scores' range, so that a sink takes a share from some rows
     * and almost all of it from others */
    c->sinks = r->sinks ? rand_bf16(h, -1.0f, 4.0f) : NULL;
    c->ref = host_alloc((size_t)tokens * h * hd * sizeof *c->ref);
    float *q = host_alloc((size_t)r->seq * h * hd * sizeof *q), /* (seq, heads, hd) */
        *k = host_alloc((size_t)r->seq * kvh * hd * sizeof *k), /* (seq, kv_heads, hd) */
            *v = host_alloc((size_t)r->seq * kvh * hd *
                            sizeof *v); /* (seq, kv_heads, hd) */
    for (int b = 0; b < r->batch; b++) {
        for (int t = 0; t < r->seq; t++) {
            const float *row = c->qkv + ((int64_t)b * r->seq + t) * stride;
            memcpy(q + (int64_t)t * h * hd, row, (size_t)h * hd * sizeof *q);
            memcpy(k + (int64_t)t * kvh * hd, row + (int64_t)h * hd,
                   (size_t)kvh * hd * sizeof *k);
            memcpy(v + (int64_t)t * kvh * hd, row + (int64_t)(h + kvh) * hd,
                   (size_t)kvh * hd * sizeof *v);
        }
        kvcal_attention_sinks_ref(c->ref + (int64_t)b * r->seq * h * hd, q, k, v, r->seq,
                                  h, kvh, hd, 1.0f / sqrtf((float)hd), r->window,
                                  r->softcap, c->sinks);
    }
    free(q);
    free(k);
    free(v);
    return c;
}

static void attention_release(void *p)
{
    attention_cpu *c = p;
    free(c->qkv);
    free(c->sinks);
    free(c->ref);
    free(c);
}

/* version 0: kvcal_attention_launch (KVCAL_ATTENTION_DEFAULT_VERSION); 1..4
 * kvcal_attention_launch_version (the portable kernel for head sizes off the
 * tensor cores', whatever the version); 5: kvcal_attention_run, cuDNN's
 * fused attention where cuDNN runs the shape */
#define ATTENTION_CUDNN (KVCAL_ATTENTION_VERSIONS + 1)
static const char *const attention_versions[] = {"launch", "v1",    "v2", "v3",
                                                 "v4",     "cudnn", NULL};
_Static_assert(KVCAL_ATTENTION_VERSIONS == 4, "one name per attention kernel version");

/* A windowed, capped or sunk row: kvcal_attention_sinks_launch, as version 0. */
static op_class attention_class(const op_row *r, int version)
{
    if (r->window || r->softcap || r->sinks)
        return version == 0 ? OP_PLAIN : OP_SKIP;
    return version == ATTENTION_CUDNN ? OP_MBARRIER : OP_PLAIN;
}

static void attention_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    const attention_cpu *c = p;
    const int hd = r->head_dim, h = r->heads, kvh = r->kv_heads;
    const int64_t tokens = (int64_t)r->batch * r->seq,
                  stride = (int64_t)(h + 2 * kvh) * hd;
    const int64_t out_stride = (int64_t)h * hd + r->out_pad;
    const float scale = 1.0f / sqrtf((float)hd);
    kvcal_bf16 *d_qkv = kvcal_test_dev_upload_bf16(c->qkv, tokens * stride),
               *d_out = dev_alloc_nan(tokens * out_stride),
               *d_sinks = c->sinks ? kvcal_test_dev_upload_bf16(c->sinks, h) : NULL;
    const kvcal_bf16 *d_k = d_qkv + (int64_t)h * hd,
                     *d_v = d_qkv + (int64_t)(h + kvh) * hd;
    kvcal_attention_impl impl = KVCAL_ATTENTION_IMPL_KVCAL;
    if (version == ATTENTION_CUDNN && !ctx->attention) {
        CU_ASSERT_EQUAL_FATAL(kvcal_attention_create(0, &ctx->attention), KVCAL_OK);
        printf("(%s) ", kvcal_attention_note(ctx->attention));
    }
    if (r->window || r->softcap || r->sinks)
        ROW_OK(kvcal_attention_sinks_launch(d_out, out_stride, d_qkv, d_k, d_v, stride,
                                            r->batch, r->seq, h, kvh, hd, scale,
                                            r->window, (float)r->softcap, d_sinks, 0));
    else if (version == 0)
        ROW_OK(kvcal_attention_launch(d_out, out_stride, d_qkv, d_k, d_v, stride,
                                      r->batch, r->seq, h, kvh, hd, scale, 0));
    else if (version == ATTENTION_CUDNN)
        ROW_OK(kvcal_attention_run(ctx->attention, d_out, out_stride, d_qkv, d_k, d_v,
                                   stride, r->batch, r->seq, h, kvh, hd, scale, 0,
                                   &impl));
    else
        ROW_OK(kvcal_attention_launch_version(version, d_out, out_stride, d_qkv, d_k, d_v,
                                              stride, r->batch, r->seq, h, kvh, hd, scale,
                                              0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, tokens * out_stride);
    int64_t far = 0, gap_written = 0;
    for (int64_t t = 0; t < tokens; t++) {
        const float *g = got + t * out_stride;
        far += count_far(g, c->ref + t * h * hd, (int64_t)h * hd, ATT_ATOL, ATT_RTOL);
        for (int64_t i = (int64_t)h * hd; i < out_stride; i++)
            gap_written += !isnan(g[i]);
    }
    EXPECT_NONE(far, tokens * h * hd, "outputs off the bound");
    EXPECT_NONE(gap_written, tokens * r->out_pad, "output padding values written");
    if (version == ATTENTION_CUDNN) {
        printf("(%d x %d, %d/%d heads, hd %d: %s%s) ", r->batch, r->seq, h, kvh, hd,
               impl == KVCAL_ATTENTION_IMPL_CUDNN ? "cuDNN" : "kvcal",
               far || gap_written ? ", MISMATCH" : "");
        if (r->cudnn > 0 && kvcal_attention_cudnn_version(ctx->attention)) {
            if (impl != KVCAL_ATTENTION_IMPL_CUDNN)
                fprintf(stderr, "\n%s\n", kvcal_attention_note(ctx->attention));
            ROW_ASSERT(impl == KVCAL_ATTENTION_IMPL_CUDNN);
        }
        if (r->cudnn < 0)
            ROW_ASSERT(impl == KVCAL_ATTENTION_IMPL_KVCAL);
    }
    free(got);
    cudaFree(d_qkv);
    cudaFree(d_out);
    cudaFree(d_sinks);
}

// --- swiglu --------------------------------------------------------------------

/* Two bf16 roundings (silu(gate), then times up) against fp32. */
#define SWIGLU_ATOL 1e-3
#define SWIGLU_RTOL 8e-3

typedef struct swiglu_cpu {
    float *gate_up;   /* (rows, 2 cols): gate, then up */
    float *gate, *up; /* (rows, cols) each */
    float *ref;       /* (rows, cols) kvcal_swiglu_ref */
} swiglu_cpu;

static void *swiglu_cpu_run(const op_row *r)
{
    const int64_t n = (int64_t)r->rows * r->cols;
    swiglu_cpu *c = host_alloc(sizeof *c);
    c->gate_up = rand_bf16(2 * n, -4.0f, 4.0f);
    c->gate = host_alloc((size_t)n * sizeof *c->gate);
    c->up = host_alloc((size_t)n * sizeof *c->up);
    c->ref = host_alloc((size_t)n * sizeof *c->ref);
    for (int i = 0; i < r->rows; i++) {
        memcpy(c->gate + (int64_t)i * r->cols, c->gate_up + (int64_t)i * 2 * r->cols,
               (size_t)r->cols * sizeof *c->gate);
        memcpy(c->up + (int64_t)i * r->cols,
               c->gate_up + (int64_t)i * 2 * r->cols + r->cols,
               (size_t)r->cols * sizeof *c->up);
    }
    kvcal_swiglu_ref(c->ref, c->gate, c->up, n);
    return c;
}

static void swiglu_release(void *p)
{
    swiglu_cpu *c = p;
    free(c->gate_up);
    free(c->gate);
    free(c->up);
    free(c->ref);
    free(c);
}

static void swiglu_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const swiglu_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_gu = kvcal_test_dev_upload_bf16(c->gate_up, 2 * n),
               *d_out = dev_alloc_nan(n);
    ROW_OK(kvcal_swiglu_launch(d_out, d_gu, r->rows, r->cols, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n);
    EXPECT_NONE(count_far(got, c->ref, n, SWIGLU_ATOL, SWIGLU_RTOL), n,
                "outputs off the bound");
    /* and bf16 arithmetic's result (silu rounded, then the product) bit for
     * bit but where the device's fast exp and division and the host's
     * straddle a rounding boundary (<= 1%) */
    float *model = host_alloc((size_t)n * sizeof *model);
    for (int64_t i = 0; i < n; i++)
        model[i] = kvcal_bf16_round(
            kvcal_bf16_round(c->gate[i] / (1.0f + expf(-c->gate[i]))) * c->up[i]);
    EXPECT_MOSTLY(count_same(got, model, n), n, 100,
                  "outputs equal to bf16 arithmetic's");
    free(model);
    free(got);
    cudaFree(d_gu);
    cudaFree(d_out);
}

// --- swiglu_oai -----------------------------------------------------------------

/* gate and up in [-16, 16) (swiglu's times 4, exact in bf16): past the
 * limit of 7 more than half of the time */
static void *swiglu_oai_cpu_run(const op_row *r)
{
    swiglu_cpu *c = swiglu_cpu_run(r);
    const int64_t n = (int64_t)r->rows * r->cols;
    for (int64_t i = 0; i < 2 * n; i++)
        c->gate_up[i] *= 4.0f;
    for (int64_t i = 0; i < n; i++)
        c->gate[i] *= 4.0f, c->up[i] *= 4.0f;
    kvcal_swiglu_oai_ref(c->ref, c->gate, c->up, n, 1.702f, 7.0f);
    return c;
}

/* Three bf16 roundings (the glu, up + 1, the product) against fp32; and
 * bf16 arithmetic's bit for bit but where the device's fast exp and
 * division and the host's straddle a rounding boundary (<= 1%). */
static void swiglu_oai_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const swiglu_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_gu = kvcal_test_dev_upload_bf16(c->gate_up, 2 * n),
               *d_out = dev_alloc_nan(n);
    ROW_OK(kvcal_swiglu_oai_launch(d_out, d_gu, r->rows, r->cols, 1.702f, 7.0f, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n);
    EXPECT_NONE(count_far(got, c->ref, n, SWIGLU_ATOL, 1.2e-2f), n,
                "outputs off the bound");
    float *model = host_alloc((size_t)n * sizeof *model);
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(c->gate[i], 7.0f), u = fminf(fmaxf(c->up[i], -7.0f), 7.0f);
        model[i] = kvcal_bf16_round(kvcal_bf16_round(u + 1.0f) *
                                    kvcal_bf16_round(g / (1.0f + expf(-1.702f * g))));
    }
    EXPECT_MOSTLY(count_same(got, model, n), n, 100,
                  "outputs equal to bf16 arithmetic's");
    free(model);
    free(got);
    cudaFree(d_gu);
    cudaFree(d_out);
}

// --- geglu, affine --------------------------------------------------------------

static void *geglu_cpu_run(const op_row *r)
{
    swiglu_cpu *c = swiglu_cpu_run(r);
    kvcal_geglu_ref(c->ref, c->gate, c->up, (int64_t)r->rows * r->cols);
    return c;
}

/* Two bf16 roundings as SwiGLU's; and bf16 arithmetic's (gelu rounded, then
 * the product) bit for bit but where tanh straddles a rounding boundary. */
static void geglu_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const swiglu_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_gu = kvcal_test_dev_upload_bf16(c->gate_up, 2 * n),
               *d_out = dev_alloc_nan(n);
    ROW_OK(kvcal_geglu_launch(d_out, d_gu, r->rows, r->cols, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n);
    EXPECT_NONE(count_far(got, c->ref, n, SWIGLU_ATOL, SWIGLU_RTOL), n,
                "outputs off the bound");
    float *model = host_alloc((size_t)n * sizeof *model);
    for (int64_t i = 0; i < n; i++) {
        const float g = c->gate[i];
        const float a =
            0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
        model[i] = kvcal_bf16_round(kvcal_bf16_round(a) * c->up[i]);
    }
    EXPECT_MOSTLY(count_same(got, model, n), n, 100,
                  "outputs equal to bf16 arithmetic's");
    free(model);
    free(got);
    cudaFree(d_gu);
    cudaFree(d_out);
}

/* One fp32 product and sum, rounded once: exact against the same on the host. */
typedef struct affine_cpu {
    float *x, *ref; /* (rows) */
} affine_cpu;

static void *affine_cpu_run(const op_row *r)
{
    affine_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(r->rows, -3.0f, 3.0f);
    c->ref = host_alloc((size_t)r->rows * sizeof *c->ref);
    for (int i = 0; i < r->rows; i++)
        c->ref[i] = kvcal_bf16_round(c->x[i] * r->affine_a + r->affine_b);
    return c;
}

static void affine_release(void *p)
{
    affine_cpu *c = p;
    free(c->x);
    free(c->ref);
    free(c);
}

static void affine_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const affine_cpu *c = p;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, r->rows);
    ROW_OK(kvcal_affine_launch(d_x, d_x, r->rows, r->affine_a, r->affine_b,
                               0)); /* in place */
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_x, r->rows);
    EXPECT_NONE(count_differ(got, c->ref, r->rows), r->rows, "outputs not x * a + b");
    free(got);
    cudaFree(d_x);
}

// --- gated_delta, sigmoid_gate ------------------------------------------------------

/* The recurrence in fp32 as the reference's (the sums in another order),
 * its output rounded to bf16 before the gated norm and the norm's after:
 * 2 x 2^-9 relative, plus the drift of fp32 reorderings carried by the
 * state over the tokens. */
#define GATED_DELTA_ATOL 2e-3
#define GATED_DELTA_RTOL 1.2e-2

typedef struct gated_delta_cpu {
    float *qkvz, *ba, *conv, *a_log, *dt_bias, *norm; /* the inputs, bf16 values */
    float *ref;                                       /* (batch seq, nv dv) */
} gated_delta_cpu;

static void *gated_delta_cpu_run(const op_row *r)
{
    const int64_t C = 2LL * r->nk * r->dk + (int64_t)r->nv * r->dv,
                  row = C + (int64_t)r->nv * r->dv, T = r->seq,
                  VD = (int64_t)r->nv * r->dv;
    gated_delta_cpu *c = host_alloc(sizeof *c);
    c->qkvz = rand_bf16(r->batch * T * row, -2.0f, 2.0f);
    c->ba = rand_bf16(r->batch * T * 2 * r->nv, -3.0f, 3.0f);
    c->conv = rand_bf16(C * r->taps, -0.6f, 0.6f);
    c->a_log = rand_bf16(r->nv, -1.0f, 1.0f);
    c->dt_bias = rand_bf16(r->nv, -1.0f, 1.0f);
    c->norm = rand_bf16(r->dv, 0.5f, 1.5f);
    c->ref = host_alloc((size_t)(r->batch * T * VD) * sizeof *c->ref);
    const kvcal_gated_delta_dims dims = {r->nk, r->dk, r->nv, r->dv, r->taps, NORM_EPS};
    const kvcal_gated_delta_weights w = {c->conv, c->a_log, c->dt_bias, c->norm};
    float *scratch =
        host_alloc((size_t)kvcal_gated_delta_scratch(&dims, T) * sizeof(float));
    for (int b = 0; b < r->batch; b++)
        kvcal_gated_delta_ref(c->ref + b * T * VD, c->qkvz + b * T * row,
                              c->ba + b * T * 2 * r->nv, T, &dims, &w, scratch);
    free(scratch);
    return c;
}

static void gated_delta_release(void *p)
{
    gated_delta_cpu *c = p;
    free(c->qkvz), free(c->ba), free(c->conv), free(c->a_log), free(c->dt_bias);
    free(c->norm), free(c->ref);
    free(c);
}

static void gated_delta_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const gated_delta_cpu *c = p;
    const int64_t C = 2LL * r->nk * r->dk + (int64_t)r->nv * r->dv,
                  row = C + (int64_t)r->nv * r->dv, n = (int64_t)r->batch * r->seq,
                  out = n * r->nv * r->dv;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->qkvz, n * row),
               *d_ba = kvcal_test_dev_upload_bf16(c->ba, n * 2 * r->nv),
               *d_conv = kvcal_test_dev_upload_bf16(c->conv, C * r->taps),
               *d_a = kvcal_test_dev_upload_bf16(c->a_log, r->nv),
               *d_dt = kvcal_test_dev_upload_bf16(c->dt_bias, r->nv),
               *d_norm = kvcal_test_dev_upload_bf16(c->norm, r->dv),
               *d_out = dev_alloc_nan(out);
    ROW_ASSERT(kvcal_gated_delta_fits(r->dk, r->dv));
    const kvcal_gated_delta_params gp = {r->nk,    r->dk,  r->nv, r->dv, r->taps,
                                         NORM_EPS, d_conv, d_a,   d_dt,  d_norm};
    float *d_work = NULL;
    ROW_ASSERT(cudaMalloc((void **)&d_work, kvcal_gated_delta_work_bytes(&gp, n)) ==
               cudaSuccess);
    ROW_OK(kvcal_gated_delta_launch(d_out, d_work, d_x, d_ba, &gp, r->batch, r->seq, 0));
    sync_ok();
    cudaFree(d_work);
    float *got = kvcal_test_dev_download_bf16(d_out, out);
    EXPECT_NONE(count_far(got, c->ref, out, GATED_DELTA_ATOL, GATED_DELTA_RTOL), out,
                "outputs off the bound");
    free(got);
    cudaFree(d_x), cudaFree(d_ba), cudaFree(d_conv), cudaFree(d_a), cudaFree(d_dt);
    cudaFree(d_norm), cudaFree(d_out);
}

/* query_temperature: x (rows, x_stride), positions 0 .. rows - 1 with every
 * 7th a padding row (-1, left as it is); one fp32 product rounded once:
 * the reference rounded to bf16 bit for bit but where log1p straddles a
 * rounding boundary (<= 1%). */
typedef struct query_temperature_cpu {
    float *x, *ref; /* (rows, x_stride) */
    int32_t *pos;   /* (rows) */
} query_temperature_cpu;

static void *query_temperature_cpu_run(const op_row *r)
{
    const int64_t n = (int64_t)r->rows * r->x_stride;
    query_temperature_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(n, -4.0f, 4.0f);
    c->ref = host_copy(c->x, n);
    c->pos = host_alloc((size_t)r->rows * sizeof *c->pos);
    for (int t = 0; t < r->rows; t++) {
        c->pos[t] = t % 7 == 3 ? -1 : t;
        if (c->pos[t] < 0)
            continue;
        float *row = c->ref + (int64_t)t * r->x_stride;
        kvcal_query_temperature_ref(row, &c->pos[t], 1, r->cols, 0.1f, 8.0f);
        for (int i = 0; i < r->cols; i++)
            row[i] = kvcal_bf16_round(row[i]);
    }
    return c;
}

static void query_temperature_release(void *p)
{
    query_temperature_cpu *c = p;
    free(c->x), free(c->ref), free(c->pos);
    free(c);
}

static void query_temperature_cuda(const op_row *r, int version, const void *p,
                                   op_ctx *ctx)
{
    (void)version, (void)ctx;
    const query_temperature_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->x_stride;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, n);
    int32_t *d_pos = dev_upload(c->pos, (size_t)r->rows * sizeof *c->pos);
    ROW_OK(kvcal_query_temperature_launch(d_x, r->x_stride, d_pos, r->rows, r->cols, 0.1f,
                                          8.0f, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_x, n);
    EXPECT_NONE(count_far(got, c->ref, n, 1e-6, 8e-3), n, "outputs off the bound");
    EXPECT_MOSTLY(count_same(got, c->ref, n), n, 100, "outputs equal to the reference's");
    free(got);
    cudaFree(d_x), cudaFree(d_pos);
}

typedef struct sigmoid_gate_cpu {
    float *x, *gate, *ref; /* (rows, cols) */
} sigmoid_gate_cpu;

static void *sigmoid_gate_cpu_run(const op_row *r)
{
    const int64_t n = (int64_t)r->rows * r->cols;
    sigmoid_gate_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(n, -4.0f, 4.0f);
    c->gate = rand_bf16(n, -6.0f, 6.0f);
    c->ref = host_copy(c->x, n);
    kvcal_sigmoid_gate_ref(c->ref, c->gate, n);
    return c;
}

static void sigmoid_gate_release(void *p)
{
    sigmoid_gate_cpu *c = p;
    free(c->x), free(c->gate), free(c->ref);
    free(c);
}

/* One fp32 product, rounded once; and the reference rounded to bf16 bit for
 * bit but where the device's exp straddles a rounding boundary (<= 1%). */
static void sigmoid_gate_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const sigmoid_gate_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, n),
               *d_g = kvcal_test_dev_upload_bf16(c->gate, n);
    ROW_OK(kvcal_sigmoid_gate_launch(d_x, d_g, n, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_x, n);
    EXPECT_NONE(count_far(got, c->ref, n, 1e-6, 4e-3), n, "outputs off the bound");
    float *model = host_alloc((size_t)n * sizeof *model);
    for (int64_t i = 0; i < n; i++)
        model[i] = kvcal_bf16_round(c->ref[i]);
    EXPECT_MOSTLY(count_same(got, model, n), n, 100, "outputs equal to the reference's");
    free(model), free(got);
    cudaFree(d_x), cudaFree(d_g);
}

// --- moe -----------------------------------------------------------------------

/* The routing is exact (the same bf16 logits, the same tie rule: the
 * experts must be the reference's, the weights within fast exp's error).
 * The experts' outputs in two stages, each within atol + |ref| rtol of the
 * reference, which rounds gate, up, silu(gate), act = silu(gate) * up and
 * the down projection to bf16 as the kernels do (gpt-oss's rows: gate/up
 * plus its bias, act the clamped SwiGLU, down plus its bias, each rounded as
 * the kernels round them), its fp32 sums in another order:
 * - act per assignment. A gate or up sum that lies within the two orders'
 *   difference of a bf16 rounding midpoint rounds to the other side, and
 *   act moves by a bf16 step or two (under 2^-6 of it, or little where
 *   silu(gate) is small): within the bound, as gemm_swiglu's.
 * - the combined outputs. The down projection is linear in act: such a
 *   step moves output c of the token by w |d act_i| |down[c][i]|, which
 *   passes atol where the output is near zero once act is 16 or more (a
 *   step of 0.125, weights up to 0.2). So the bound adds these terms, for
 *   the act differences the first stage accepts (one it rejects adds
 *   nothing: a wrong act fails both stages).
 * - gpt-oss's rows: a GEMM output is rounded to bf16 before its bias is
 *   added, and where the bias cancels most of it a one-step flip of that
 *   rounding (a sum within the two orders' difference of a midpoint) is a
 *   large part of the result. The H200 runs of the 989-row gpt-oss row
 *   failed so (the inputs replayed on the CPU): an up sum -2.8828126, 1.2e-7
 *   past a midpoint, rounds to -2.890625 in the reference and to -2.875 on
 *   the device; plus its bias 1.703125, + 1: -0.1875 against -0.171875,
 *   times the clamped gate's 7: act -1.3125 against -1.203125 (atol + |ref|
 *   rtol 0.046). A down sum -22.4375004 rounds to -22.5 against -22.375;
 *   plus its bias -0.083, -22.625 against -22.5, times the weight 0.26: the
 *   token's output moves by 0.033 (atol + |ref| rtol 0.027), act equal. So
 *   there each act bound adds its flip term, the most act moves in the
 *   kernels' arithmetic (moe_oai_act) when the reference's rounded gate, up
 *   or both take a bf16 neighbour (0 where the clamps hold either way), and
 *   each output bound adds the sum over the token's choices of |w| times the
 *   most its y moves when the rounded down output takes a neighbour. Both
 *   are one step of a rounding, not a share of the value: a wrong bias
 *   (values of about 1) or a missing clamp (gate/up values past 7) still
 *   fail.
 * On the Hopper kernel each row also runs the WMMA kernel's path on the same
 * plan: both sum the same 16-wide k slices in the same order on the tensor
 * cores (bit-equal at Qwen3-30B-A3B's shapes, bench/NOTES.md), and on
 * gpt-oss's rows both store gate/up and run the same bias and clamped
 * SwiGLU kernels on them, so their act and down outputs (biases included)
 * must be equal bit for bit. A failure prints its first values, with the
 * plan tile and the output tile they lie in. */
#define MOE_W_RTOL 1e-5
#define MOE_ATOL 2e-2
#define MOE_RTOL 2e-2
#define MOE_SHOW 6 /* values printed per failed check */

/* The kernels' tiles, for the messages: version 0 (moe.cu) 128 x 128, k in
 * steps of 32; version 1 (moe_wgmma.cu) 128 rows x 256 stored outputs (down;
 * gate/up on gpt-oss's rows) or 128 SwiGLU outputs (from 256 gate/up rows),
 * k in blocks of 64. */
#define MOE_SWIGLU_TILE 128
static const int moe_out_tile[] = {128, 256}, moe_k_tile[] = {32, 64};

typedef struct moe_cpu {
    float *x;             /* (rows, k) */
    float *logits;        /* (rows, experts) */
    float *gu, *down;     /* (experts, 2 n, k), (experts, k, n) */
    float *shared;        /* (rows, k) the shared expert's output, or NULL */
    float *gate_w;        /* (k) its gate, or NULL */
    float *bias;          /* (experts) the sigmoid routing's choice bias, or NULL */
    float *b_gu, *b_down; /* (experts, 2 n), (experts, k) gpt-oss's biases, or NULL */
    int32_t *pos;         /* (rows) -1 for padding */
    int32_t *route_e;     /* (rows, top_k) kvcal_moe_route_ref */
    float *route_w;       /* (rows, top_k) */
    int64_t *counts;      /* (experts) assignments of valid tokens */
    float *act;           /* (rows * top_k, n) each assignment's act, 0 for padding */
    float *ref;           /* (rows, k) */
    /* gpt-oss's rows (else NULL): how far act moves where a pre-bias gate or
     * up value rounds to its bf16 neighbour (rows * top_k, n), and the
     * outputs where a pre-bias down value does, summed over the token's
     * choices times their weights (rows, k) */
    float *act_flip, *out_flip;
} moe_cpu;

/* The planted first choice (op_row.planted) of the v-th valid token. */
static int moe_planted_expert(int v)
{
    static const int ends[] = {0, 1, 128, 256, 385}; /* experts 0 .. 4's last + 1 */
    int e = 0;
    while (e < 5 && v >= ends[e])
        e++;
    return e;
}

/* The bf16 value next to bf16 value v, above it (s 1) or below (s -1). */
static float moe_bf16_next(float v, int s)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    if (v == 0.0f)
        b = s > 0 ? 0x00010000u : 0x80010000u;
    else
        b = (v > 0.0f) == (s > 0) ? b + 0x10000u : b - 0x10000u;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* gpt-oss's act from the rounded gate/up GEMM outputs hg, hu and their
 * biases, as the kernels compute it: each bias added and the sum rounded
 * (kvcal_moe_bias_launch), then the clamped SwiGLU (alpha 1.702, limit 7)
 * rounded as kvcal_swiglu_oai_launch */
static float moe_oai_act(float hg, float hu, float bg, float bu)
{
    const float g = fminf(kvcal_bf16_round(hg + bg), 7.0f),
                u = fminf(fmaxf(kvcal_bf16_round(hu + bu), -7.0f), 7.0f);
    return kvcal_bf16_round(kvcal_bf16_round(u + 1.0f) *
                            kvcal_bf16_round(g / (1.0f + expf(-1.702f * g))));
}

/* The most act moves when hg, hu or both round to a bf16 neighbour. */
static float moe_oai_act_flip(float hg, float hu, float bg, float bu)
{
    const float a = moe_oai_act(hg, hu, bg, bu);
    float most = 0.0f;
    for (int sg = -1; sg <= 1; sg++)
        for (int su = -1; su <= 1; su++) {
            const float d = fabsf(moe_oai_act(sg ? moe_bf16_next(hg, sg) : hg,
                                              su ? moe_bf16_next(hu, su) : hu, bg, bu) -
                                  a);
            most = d > most ? d : most;
        }
    return most;
}

/* y (m, k) = down_e(act), act (m, n) = silu(gate_e(x)) * up_e(x) for the
 * m rows of x (m, k), one expert's, with gate, up, the SwiGLU and y
 * rounded to bf16 (the kernels' storage); with b_gu and b_down (gpt-oss's,
 * else NULL) each bias added to a GEMM's rounded output and rounded again,
 * act the clamped SwiGLU instead (moe_oai_act), and flips (m, n + k) gets
 * how far act (n) and y (k) move where a GEMM output before its bias rounds
 * to its bf16 neighbour */
static void moe_expert_ref(float *y, float *act, float *flips, const float *x,
                           const float *gu, const float *b_gu, const float *down,
                           const float *b_down, int m, int k, int n)
{
    float *h = host_alloc((size_t)m * 2 * n * sizeof *h); /* (m, 2n) */
    kvcal_matmul_ref(h, x, gu, NULL, m, k, 2 * n);
    for (int64_t i = 0; i < (int64_t)m * 2 * n; i++)
        h[i] = kvcal_bf16_round(h[i]);
    for (int r = 0; r < m; r++)
        for (int i = 0; i < n; i++) {
            const float g = h[(int64_t)r * 2 * n + i], u = h[(int64_t)r * 2 * n + n + i];
            if (b_gu) {
                act[(int64_t)r * n + i] = moe_oai_act(g, u, b_gu[i], b_gu[n + i]);
                flips[(int64_t)r * (n + k) + i] =
                    moe_oai_act_flip(g, u, b_gu[i], b_gu[n + i]);
            } else {
                act[(int64_t)r * n + i] =
                    kvcal_bf16_round(kvcal_bf16_round(g / (1.0f + expf(-g))) * u);
            }
        }
    kvcal_matmul_ref(y, act, down, NULL, m, n, k);
    for (int r = 0; r < m; r++)
        for (int c = 0; c < k; c++) {
            float *v = &y[(int64_t)r * k + c];
            const float y0 = kvcal_bf16_round(*v);
            if (!b_down) {
                *v = y0;
                continue;
            }
            *v = kvcal_bf16_round(y0 + b_down[c]);
            float most = 0.0f;
            for (int s = -1; s <= 1; s += 2) {
                const float d =
                    fabsf(kvcal_bf16_round(moe_bf16_next(y0, s) + b_down[c]) - *v);
                most = d > most ? d : most;
            }
            flips[(int64_t)r * (n + k) + n + c] = most;
        }
    free(h);
}

static void *moe_cpu_run(const op_row *r)
{
    const int T = r->rows, D = r->k, I = r->n, E = r->experts, K = r->top_k;
    moe_cpu *c = host_alloc(sizeof *c);
    memset(c, 0, sizeof *c);
    if (r->seed)
        rng_state = r->seed;
    c->x = rand_bf16((int64_t)T * D, -1.0f, 1.0f);
    c->logits = rand_bf16((int64_t)T * E, -3.0f, 3.0f);
    /* gpt-oss's rows: gate/up values past the clamp's limit */
    c->gu =
        rand_bf16((int64_t)E * 2 * I * D, r->oai ? -2.0f : -0.2f, r->oai ? 2.0f : 0.2f);
    if (r->oai) {
        c->b_gu = rand_bf16((int64_t)E * 2 * I, -2.0f, 2.0f);
        c->b_down = rand_bf16((int64_t)E * D, -1.0f, 1.0f);
    }
    c->down = rand_bf16((int64_t)E * D * I, -0.2f, 0.2f);
    if (r->shared) {
        c->shared = rand_bf16((int64_t)T * D, -1.0f, 1.0f);
        if (r->shared == 1)
            c->gate_w = rand_bf16(D, -0.3f, 0.3f);
    }
    if (r->sigmoid)
        c->bias = rand_bf16(E, -0.3f, 0.3f);
    c->pos = host_alloc((size_t)T * sizeof *c->pos);
    for (int t = 0, v = 0; t < T; t++) {
        c->pos[t] = T > 2 && t % 7 == 3 ? -1 : t;
        if (r->planted && c->pos[t] >= 0) /* over the others' at most 3 */
            c->logits[(int64_t)t * E + moe_planted_expert(v++)] = 8.0f;
        if (r->ties) { /* -inf only past the first 2 top_k */
            static const float tie[] = {-1.5f, -0.0f, 0.0f, 0.5f, 2.0f};
            float *u = rand_bf16(E, 0.0f, 0.99f);
            for (int i = 0; i < E; i++) {
                const int k = (int)(u[i] * 20.0f);
                c->logits[(int64_t)t * E + i] =
                    i >= 2 * K && k % 4 == 0 ? -INFINITY : tie[k % 5];
            }
            free(u);
        }
    }
    c->route_e = host_alloc((size_t)T * K * sizeof *c->route_e);
    c->route_w = host_alloc((size_t)T * K * sizeof *c->route_w);
    c->counts = host_alloc((size_t)E * sizeof *c->counts);
    memset(c->counts, 0, (size_t)E * sizeof *c->counts);
    c->ref = host_alloc((size_t)T * D * sizeof *c->ref);
    c->act = host_alloc((size_t)T * K * I * sizeof *c->act);
    memset(c->act, 0, (size_t)T * K * I * sizeof *c->act);
    if (r->oai) {
        c->act_flip = host_alloc((size_t)T * K * I * sizeof *c->act_flip);
        c->out_flip = host_alloc((size_t)T * D * sizeof *c->out_flip);
        memset(c->act_flip, 0, (size_t)T * K * I * sizeof *c->act_flip);
        memset(c->out_flip, 0, (size_t)T * D * sizeof *c->out_flip);
    }
    const kvcal_moe_route_cfg grouped = {E,
                                         K,
                                         r->sigmoid,
                                         c->bias,
                                         r->groups,
                                         r->topk_groups,
                                         r->group_max,
                                         r->renorm,
                                         r->sigmoid ? 2.5f : 1.5f};
    if (r->groups)
        kvcal_moe_route_grouped_ref(c->route_e, c->route_w, c->logits, T, &grouped);
    else if (r->sigmoid)
        kvcal_moe_route_sigmoid_ref(c->route_e, c->route_w, c->logits, c->bias, T, E, K,
                                    r->renorm, 2.5f);
    else
        kvcal_moe_route_ref(c->route_e, c->route_w, c->logits, T, E, K, r->renorm);
    /* each expert's rows at once: y (T * K, D) of every valid assignment */
    float *y = host_alloc((size_t)T * K * D * sizeof *y),
          *xe = host_alloc((size_t)T * K * D * sizeof *xe),
          *ye = host_alloc((size_t)T * K * D * sizeof *ye),
          *ae = host_alloc((size_t)T * K * I * sizeof *ae),
          *fe = r->oai ? host_alloc((size_t)T * K * (I + D) * sizeof *fe) : NULL;
    int *of = host_alloc((size_t)T * K * sizeof *of);
    for (int e = 0; e < E; e++) {
        int m = 0;
        for (int i = 0; i < T * K; i++)
            if (c->pos[i / K] >= 0 && c->route_e[i] == e) {
                memcpy(xe + (int64_t)m * D, c->x + (int64_t)(i / K) * D,
                       (size_t)D * sizeof *xe);
                of[m++] = i;
            }
        c->counts[e] = m;
        if (!m)
            continue;
        moe_expert_ref(ye, ae, fe, xe, c->gu + (int64_t)e * 2 * I * D,
                       c->b_gu ? c->b_gu + (int64_t)e * 2 * I : NULL,
                       c->down + (int64_t)e * D * I,
                       c->b_down ? c->b_down + (int64_t)e * D : NULL, m, D, I);
        for (int j = 0; j < m; j++) {
            memcpy(y + (int64_t)of[j] * D, ye + (int64_t)j * D, (size_t)D * sizeof *y);
            memcpy(c->act + (int64_t)of[j] * I, ae + (int64_t)j * I,
                   (size_t)I * sizeof *ae);
            if (!fe)
                continue;
            const float *f = fe + (int64_t)j * (I + D);
            const float w = fabsf(c->route_w[of[j]]);
            memcpy(c->act_flip + (int64_t)of[j] * I, f, (size_t)I * sizeof *f);
            for (int i = 0; i < D; i++)
                c->out_flip[(int64_t)(of[j] / K) * D + i] += w * f[I + i];
        }
    }
    for (int t = 0; t < T; t++) {
        float *o = c->ref + (int64_t)t * D;
        memset(o, 0, (size_t)D * sizeof *o);
        if (c->pos[t] < 0)
            continue;
        for (int j = 0; j < K; j++)
            for (int i = 0; i < D; i++)
                o[i] += c->route_w[t * K + j] * y[((int64_t)t * K + j) * D + i];
        if (!r->shared)
            continue;
        float g = 0.0f;
        for (int i = 0; c->gate_w && i < D; i++)
            g += c->x[(int64_t)t * D + i] * c->gate_w[i];
        g = c->gate_w ? kvcal_bf16_round(kvcal_sigmoid_ref(kvcal_bf16_round(g))) : 1.0f;
        for (int i = 0; i < D; i++)
            o[i] = kvcal_bf16_round(o[i]) +
                   kvcal_bf16_round(g * c->shared[(int64_t)t * D + i]);
    }
    free(y);
    free(xe);
    free(ye);
    free(ae);
    free(fe);
    free(of);
    return c;
}

static void moe_release(void *p)
{
    moe_cpu *c = p;
    free(c->x);
    free(c->logits);
    free(c->gu);
    free(c->down);
    free(c->shared);
    free(c->gate_w);
    free(c->bias);
    free(c->b_gu);
    free(c->b_down);
    free(c->pos);
    free(c->route_e);
    free(c->route_w);
    free(c->counts);
    free(c->act);
    free(c->ref);
    free(c->act_flip);
    free(c->out_flip);
    free(c);
}

/* Whether token t of a grouped sigmoid row is near a tie (in double, gaps
 * below 1e-5) where the device's exp could decide otherwise: at the
 * boundary of the open groups' scores (the sums of each group's two best),
 * or at the top-k boundary among the open groups' experts. */
static int moe_grouped_near_tie(const op_row *r, const moe_cpu *c, int t)
{
    const int E = r->experts, G = r->groups, S = E / G, K = r->top_k;
    double v[KVCAL_MOE_MAX_EXPERTS], score[KVCAL_MOE_MAX_GROUPS];
    int open[KVCAL_MOE_MAX_GROUPS] = {0}, near = 0;
    for (int a = 0; a < E; a++)
        v[a] = 1.0 / (1.0 + exp(-c->logits[(int64_t)t * E + a])) + c->bias[a];
    for (int g = 0; g < G; g++) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (int a = g * S; a < (g + 1) * S; a++)
            if (v[a] > b1)
                b2 = b1, b1 = v[a];
            else if (v[a] > b2)
                b2 = v[a];
        score[g] = S < 2 ? b1 : b1 + b2;
    }
    double prev = INFINITY;
    for (int j = 0; j <= r->topk_groups && j < G; j++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!open[g] && (best < 0 || score[g] > score[best]))
                best = g;
        near |= j > 0 && prev - score[best] < 1e-5;
        prev = score[best];
        open[best] = j < r->topk_groups;
    }
    /* the top_k + 1 best of the open groups' experts, in order */
    prev = INFINITY;
    for (int j = 0; j <= K; j++) {
        int best = -1;
        for (int a = 0; a < E; a++)
            if (open[a / S] && v[a] > -INFINITY && (best < 0 || v[a] > v[best]))
                best = a;
        if (best < 0)
            break;
        near |= j > 0 && prev - v[best] < 1e-5;
        prev = v[best];
        v[best] = -INFINITY;
    }
    return near;
}

/* A path's results on the device: gate/up h (capacity, 2 n) where it
 * stores them (else NULL), act (capacity, n) and the down projections y
 * (capacity, k) of the plan's rows, out (rows, k) combined. */
typedef struct moe_dev_out {
    kvcal_bf16 *h, *act, *y, *out;
} moe_dev_out;

/* What the checks of one row read: the reference, the device's routing
 * (experts, each assignment's plan row), which tokens are left out (near a
 * tie), the path's results on the host and, on the Hopper kernel, the
 * WMMA path's (else NULL). */
typedef struct moe_got {
    const op_row *r;
    int version;
    const moe_cpu *c;
    const int32_t *e, *slot;   /* (rows * top_k) */
    const unsigned char *skip; /* (rows) */
    const float *act, *y, *out;
    const float *wmma_act, *wmma_y, *wmma_out;
} moe_got;

/* Where plan row `row` lies: its tile and that tile's place among its
 * expert's (the last one partial where rows of padding fill it). */
static void moe_where(char *buf, size_t len, const moe_got *g, int row)
{
    const int tile = KVCAL_MOE_TILE_ROWS;
    int start = 0, e = 0;
    if (row < 0) {
        snprintf(buf, len, "no plan row (a padding token)");
        return;
    }
    for (; e < g->r->experts; e++) {
        const int tiles = (int)((g->c->counts[e] + tile - 1) / tile);
        if (row < start + tiles * tile)
            break;
        start += tiles * tile;
    }
    if (e == g->r->experts) {
        snprintf(buf, len, "plan row %d, past the used tiles", row);
        return;
    }
    const int q = (row - start) / tile, of = (int)((g->c->counts[e] + tile - 1) / tile);
    const int used = (int)(g->c->counts[e] - (int64_t)q * tile < tile
                               ? g->c->counts[e] - (int64_t)q * tile
                               : tile);
    snprintf(buf, len,
             "plan row %d: tile %d row %d, expert %d's tile %d of %d (%d rows%s)", row,
             row / tile, row % tile, e, q + 1, of, used, used < tile ? ", partial" : "");
}

/* Column col of n in output tiles `width` wide: "n-tile j of J", partial
 * where n ends inside it. */
static void moe_ntile(char *buf, size_t len, int col, int n, int width)
{
    const int j = col / width, of = (n + width - 1) / width;
    snprintf(buf, len, "n-tile %d of %d%s", j, of,
             j == of - 1 && n % width ? " (partial)" : "");
}

/* The gate/up output tiles act channel q comes from on version v: the
 * fused SwiGLU's tile, or those of gate's column q and up's n + q among the
 * 2 n stored. */
static void moe_gu_tile(char *buf, size_t len, const op_row *r, int v, int q)
{
    char gate[64], up[64];
    if (v == 1 && !r->oai) {
        moe_ntile(gate, sizeof gate, q, r->n, MOE_SWIGLU_TILE);
        snprintf(buf, len, "gate/up %s", gate);
        return;
    }
    moe_ntile(gate, sizeof gate, q, 2 * r->n, moe_out_tile[v]);
    moe_ntile(up, sizeof up, r->n + q, 2 * r->n, moe_out_tile[v]);
    snprintf(buf, len, "gate %s, up %s", gate, up);
}

/* ", WMMA path <value i>" where the WMMA path ran beside the Hopper one */
static void moe_wmma_value(char *buf, size_t len, const float *wmma, int64_t i)
{
    buf[0] = 0;
    if (wmma)
        snprintf(buf, len, ", WMMA path %.6g", (double)wmma[i]);
}

/* act of every checked assignment against the reference's, within atol +
 * |ref| rtol plus, on gpt-oss's rows, its flip term (the head comment);
 * dact (rows * top_k, n) gets |got - ref| where that is within the bound,
 * else 0. Returns the values off the bound, *differ those not equal. */
static int64_t moe_act_check(const moe_got *g, float *dact, int64_t *differ)
{
    const op_row *r = g->r;
    const int T = r->rows, I = r->n, K = r->top_k, v = g->version;
    int64_t far = 0;
    *differ = 0;
    memset(dact, 0, (size_t)T * K * I * sizeof *dact);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K && !g->skip[t] && g->c->pos[t] >= 0; j++) {
            const int i = t * K + j, s = g->slot[i];
            if (s < 0 || g->e[i] != g->c->route_e[i]) /* the routing check fails */
                continue;
            for (int q = 0; q < I; q++) {
                const int64_t o = (int64_t)i * I + q;
                const double got = g->act[(int64_t)s * I + q], want = g->c->act[o],
                             d = fabs(got - want),
                             flip = g->c->act_flip ? g->c->act_flip[o] : 0.0;
                *differ += got != want;
                if (d <= MOE_ATOL + fabs(want) * MOE_RTOL + flip) {
                    dact[(int64_t)i * I + q] = (float)d;
                    continue;
                }
                if (++far > MOE_SHOW)
                    continue;
                char where[160], nt[160], other[48];
                moe_where(where, sizeof where, g, s);
                moe_gu_tile(nt, sizeof nt, r, v, q);
                moe_wmma_value(other, sizeof other, g->wmma_act, (int64_t)s * I + q);
                printf("\n    %s: act off: token %d choice %d channel %d: got %.6g, ref "
                       "%.6g%s; flip term %.4g; %s; %s",
                       current, t, j, q, got, want, other, flip, where, nt);
            }
        }
    return far;
}

/* The combined outputs of the checked tokens against the reference, within
 * atol + |ref| rtol plus the act terms and, on gpt-oss's rows, the flip
 * term (the head comment): *plain gets those past atol + |ref| rtol alone,
 * the first few printed. Returns those past the whole bound. */
static int64_t moe_out_check(const moe_got *g, const float *dact, int64_t *plain)
{
    const op_row *r = g->r;
    const int T = r->rows, D = r->k, I = r->n, K = r->top_k, v = g->version;
    double *terms = host_alloc((size_t)D * sizeof *terms);
    int64_t far = 0;
    *plain = 0;
    for (int t = 0; t < T; t++) {
        if (g->skip[t])
            continue;
        int steps = 0; /* the token's act values that differ from the reference's */
        double most = 0.0;
        memset(terms, 0, (size_t)D * sizeof *terms);
        for (int j = 0; j < K && g->c->pos[t] >= 0; j++) {
            const int i = t * K + j;
            const float *dn = g->c->down + (int64_t)g->c->route_e[i] * D * I;
            for (int q = 0; q < I; q++) {
                const double da = dact[(int64_t)i * I + q];
                if (da == 0.0)
                    continue;
                steps++;
                most = da > most ? da : most;
                for (int col = 0; col < D; col++)
                    terms[col] +=
                        fabs(g->c->route_w[i]) * da * fabs(dn[(int64_t)col * I + q]);
            }
        }
        for (int col = 0; col < D; col++) {
            const int64_t o = (int64_t)t * D + col;
            const double ref = g->c->ref[o], got = g->out[o], d = fabs(got - ref),
                         bound = MOE_ATOL + fabs(ref) * MOE_RTOL,
                         flip = g->c->out_flip ? g->c->out_flip[o] : 0.0;
            const int past_plain = !(d <= bound),
                      past = !(d <= bound + terms[col] + flip);
            *plain += past_plain;
            far += past;
            /* the first few past the bound, and a few within it only by the terms */
            if (!(past ? far <= MOE_SHOW : past_plain && *plain <= 3))
                continue;
            char where[160], nt[64], other[48];
            moe_where(where, sizeof where, g, g->slot[t * K]);
            moe_ntile(nt, sizeof nt, col, D, moe_out_tile[v]);
            moe_wmma_value(other, sizeof other, g->wmma_out, o);
            printf(
                "\n    %s: output %s: token %d column %d: got %.6g, ref %.6g%s; |diff| "
                "%.4g, atol + |ref| rtol %.4g, act terms %.4g (%d act values of the "
                "token differ, by up to %.4g), flip term %.4g; first choice's %s; down "
                "%s",
                current, past ? "off" : "past atol + |ref| rtol, within the other terms",
                t, col, got, ref, other, d, bound, terms[col], steps, most, flip, where,
                nt);
        }
    }
    free(terms);
    return far;
}

/* The Hopper path's act and y of every routed plan row against the WMMA
 * path's, bit for bit (bf16 values held exactly in floats), the first
 * differences printed. */
static void moe_bits_check(const moe_got *g)
{
    const op_row *r = g->r;
    const int T = r->rows, D = r->k, I = r->n, K = r->top_k;
    int64_t routed = 0, act_differ = 0, y_differ = 0;
    for (int i = 0; i < T * K; i++) {
        const int s = g->slot[i];
        if (s < 0)
            continue;
        routed++;
        for (int m = 0; m < 2; m++) {
            const int n = m ? D : I;
            const float *got = m ? g->y : g->act, *model = m ? g->wmma_y : g->wmma_act;
            int64_t *differ = m ? &y_differ : &act_differ;
            for (int q = 0; q < n; q++) {
                const int64_t o = (int64_t)s * n + q;
                if (!memcmp(&got[o], &model[o], sizeof got[o]) || ++*differ > MOE_SHOW)
                    continue;
                char where[160], nt[160];
                moe_where(where, sizeof where, g, s);
                if (m)
                    moe_ntile(nt, sizeof nt, q, n, moe_out_tile[1]);
                else
                    moe_gu_tile(nt, sizeof nt, r, 1, q);
                printf("\n    %s: %s not the WMMA path's: token %d choice %d column %d: "
                       "%.9g against %.9g; %s; %s%s",
                       current, m ? "down" : "act", i / K, i % K, q, (double)got[o],
                       (double)model[o], where, m ? "down " : "", nt);
            }
        }
    }
    EXPECT_NONE(act_differ, routed * I, "act values not the WMMA path's bit for bit");
    EXPECT_NONE(y_differ, routed * D, "down outputs not the WMMA path's bit for bit");
    printf("\n    %s: act and down against the WMMA path: %lld and %lld of %lld and %lld "
           "differ ",
           current, (long long)act_differ, (long long)y_differ, (long long)(routed * I),
           (long long)(routed * D));
}

/* The routing, the counts, the plan's used tiles, act and the combined
 * outputs of a row against the reference; on the Hopper kernel (wmma
 * non-NULL) act and down against the WMMA path's. */
static void moe_check(const op_row *r, int version, const moe_cpu *c, const int32_t *d_e,
                      const float *d_w, const unsigned long long *d_counts,
                      const kvcal_moe_plan *plan, const moe_dev_out *dev,
                      const moe_dev_out *wmma)
{
    const int T = r->rows, D = r->k, I = r->n, E = r->experts, K = r->top_k;
    const int64_t cap = plan->capacity;
    int32_t *e = host_alloc((size_t)T * K * sizeof *e), used_tiles = 0;
    int32_t *slot = host_alloc((size_t)T * K * sizeof *slot);
    float *w = host_alloc((size_t)T * K * sizeof *w);
    unsigned long long *counts = host_alloc((size_t)E * sizeof *counts);
    dev_download(e, d_e, (size_t)T * K * sizeof *e);
    dev_download(slot, plan->slot_of, (size_t)T * K * sizeof *slot);
    dev_download(w, d_w, (size_t)T * K * sizeof *w);
    dev_download(counts, d_counts, (size_t)E * sizeof *counts);
    dev_download(&used_tiles, plan->used_tiles, sizeof used_tiles);
    /* a sigmoid row's choice (sigmoid + bias) may tie at the top-k boundary
     * within the rounding of exp: such tokens are left out of the checks
     * (softmax rows choose on the bf16 logits themselves: no such case) */
    unsigned char *near_tie = host_alloc((size_t)T);
    double *v = host_alloc((size_t)E * sizeof *v);
    int64_t ties = 0;
    for (int t = 0; t < T; t++) {
        near_tie[t] = 0;
        if (r->sigmoid && r->groups) {
            near_tie[t] = moe_grouped_near_tie(r, c, t);
            ties += near_tie[t];
            continue;
        }
        if (!r->sigmoid)
            continue;
        for (int a = 0; a < E; a++)
            v[a] = 1.0 / (1.0 + exp(-c->logits[(int64_t)t * E + a])) + c->bias[a];
        /* the top_k + 1 largest in order, by selection; a gap below 1e-5
         * among them could order them either way */
        for (int j = 0; j <= K && j < E; j++) {
            int best = j;
            for (int a = j + 1; a < E; a++)
                best = v[a] > v[best] ? a : best;
            const double x = v[j];
            v[j] = v[best], v[best] = x;
            near_tie[t] |= j > 0 && v[j - 1] - v[j] < 1e-5;
        }
        ties += near_tie[t];
    }
    free(v);
    int64_t wrong_e = 0, wrong_w = 0, wrong_counts = 0;
    int want_tiles = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K && !near_tie[t]; j++) {
            const int i = t * K + j, pad = c->pos[t] < 0;
            wrong_e += e[i] != (pad ? -1 : c->route_e[i]);
            wrong_w += !(fabs(w[i] - (pad ? 0.0f : c->route_w[i])) <=
                         fabs(c->route_w[i]) * MOE_W_RTOL + 1e-7);
        }
    for (int i = 0; i < E && !ties; i++)
        wrong_counts += (long long)counts[i] != c->counts[i];
    EXPECT_NONE(wrong_e, (int64_t)T * K, "chosen experts not the reference's");
    EXPECT_NONE(wrong_w, (int64_t)T * K, "routing weights off the bound");
    EXPECT_NONE(wrong_counts, E, "experts' token counts not the reference's");
    for (int i = 0; i < E; i++) /* each expert's rows rounded up to whole tiles */
        want_tiles +=
            (int)((c->counts[i] + KVCAL_MOE_TILE_ROWS - 1) / KVCAL_MOE_TILE_ROWS);
    ROW_ASSERT(ties || used_tiles == want_tiles);
    if (r->planted && K == 1) /* the row's experts got the rows it is meant for */
        ROW_ASSERT(c->counts[0] == 0 && c->counts[1] == 1 && c->counts[2] == 127 &&
                   c->counts[3] == 128 && c->counts[4] == 129);
    ROW_ASSERT(ties * 20 <= T); /* the rows are meant to be decided, but for a few */
    float *act = kvcal_test_dev_download_bf16(dev->act, cap * I),
          *out = kvcal_test_dev_download_bf16(dev->out, (int64_t)T * D),
          *dact = host_alloc((size_t)T * K * I * sizeof *dact);
    moe_got g = {r, version, c, e, slot, near_tie, act, NULL, out, NULL, NULL, NULL};
    if (wmma) {
        g.y = kvcal_test_dev_download_bf16(dev->y, cap * D);
        g.wmma_act = kvcal_test_dev_download_bf16(wmma->act, cap * I);
        g.wmma_y = kvcal_test_dev_download_bf16(wmma->y, cap * D);
        g.wmma_out = kvcal_test_dev_download_bf16(wmma->out, (int64_t)T * D);
    }
    int64_t act_differ = 0, plain = 0;
    const int64_t act_far = moe_act_check(&g, dact, &act_differ);
    const int64_t far = moe_out_check(&g, dact, &plain);
    EXPECT_NONE(act_far, (int64_t)T * K * I, "act values off the bound");
    EXPECT_NONE(far, (int64_t)T * D, "outputs off the bound");
    printf("\n    %s: %lld act values differ from the reference's, %lld off its bound; "
           "%lld outputs past atol + |ref| rtol, %lld past it with the act (and flip) "
           "terms; k partial in the last %d-wide k block: gate/up %s, down %s ",
           current, (long long)act_differ, (long long)act_far, (long long)plain,
           (long long)far, moe_k_tile[version], D % moe_k_tile[version] ? "yes" : "no",
           I % moe_k_tile[version] ? "yes" : "no");
    if (wmma)
        moe_bits_check(&g);
    free((void *)g.y);
    free((void *)g.wmma_act);
    free((void *)g.wmma_y);
    free((void *)g.wmma_out);
    free(near_tie);
    free(act);
    free(out);
    free(dact);
    free(e);
    free(slot);
    free(w);
    free(counts);
}

/* Versions: 0 kvcal_moe_gemm_launch (gate/up, SwiGLU, down; gpt-oss's
 * biases and clamped SwiGLU in kernels of their own), 1 the Hopper kernel
 * (the gather, gate/up with SwiGLU, down; gpt-oss's biases and clamped
 * SwiGLU in its epilogues, as the CUDA runner runs them), which other GPUs
 * refuse: its rows are skipped there. Both run the WMMA path; version 1
 * checks its own results and compares them with that path's bit for bit. */
static const char *const moe_versions[] = {"launch", "sm90", NULL};

/* act from a path's stored gate/up h: the SwiGLU, or on gpt-oss's rows the
 * gate/up bias and the clamped SwiGLU (alpha 1.702, limit 7) */
static void moe_act_launch(const op_row *r, const moe_dev_out *o, const kvcal_bf16 *b_gu,
                           const kvcal_moe_plan *plan)
{
    if (!r->oai) {
        ROW_OK(kvcal_swiglu_launch(o->act, o->h, plan->capacity, r->n, 0));
        return;
    }
    ROW_OK(kvcal_moe_bias_launch(o->h, b_gu, plan, 2 * r->n, 0));
    ROW_OK(kvcal_swiglu_oai_launch(o->act, o->h, plan->capacity, r->n, 1.702f, 7.0f, 0));
}

/* The combine onto a residual stream (accumulate): bit for bit the
 * stream plus o's combined out, as kvcal_add_rmsnorm_launch adds it (each
 * sum rounded to bf16); padding tokens' rows left as they were. With the
 * next layer's norm (kvcal_combine_norm): the same stream, and its rows,
 * padding too, bit for bit as kvcal_add_rmsnorm_launch normalizes them. */
static void moe_combine_accumulate_check(const op_row *r, const moe_cpu *c,
                                         const kvcal_moe_plan *plan, const moe_dev_out *o,
                                         const float *d_w, const int32_t *d_pos,
                                         const kvcal_bf16 *d_shared,
                                         const kvcal_bf16 *d_x, const kvcal_bf16 *d_gate)
{
    const int T = r->rows, D = r->k;
    const int64_t n = (int64_t)T * D;
    float *stream = rand_bf16(n, -4.0f, 4.0f), *norm_w = rand_bf16(D, 0.5f, 1.5f);
    kvcal_bf16 *d_stream = kvcal_test_dev_upload_bf16(stream, n),
               *d_stream_n = kvcal_test_dev_upload_bf16(stream, n),
               *d_norm_w = kvcal_test_dev_upload_bf16(norm_w, D), *d_normed, *d_want;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_normed, (size_t)n * sizeof(kvcal_bf16)),
                          cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d_want, (size_t)n * sizeof(kvcal_bf16)),
                          cudaSuccess);
    ROW_OK(kvcal_moe_combine_launch(d_stream, o->y, plan->slot_of, d_w, d_pos, T,
                                    r->top_k, D, d_shared, d_x, d_gate, 1, NULL, 0));
    const kvcal_combine_norm norm = {d_normed, d_norm_w, ROPE_EPS};
    ROW_OK(kvcal_moe_combine_launch(d_stream_n, o->y, plan->slot_of, d_w, d_pos, T,
                                    r->top_k, D, d_shared, d_x, d_gate, 1, &norm, 0));
    ROW_OK(kvcal_add_rmsnorm_launch(d_want, d_stream, NULL, d_norm_w, T, D, ROPE_EPS, 0));
    sync_ok();
    float *sum = kvcal_test_dev_download_bf16(o->out, n),
          *got = kvcal_test_dev_download_bf16(d_stream, n),
          *got_n = kvcal_test_dev_download_bf16(d_stream_n, n),
          *normed = kvcal_test_dev_download_bf16(d_normed, n),
          *want_normed = kvcal_test_dev_download_bf16(d_want, n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) {
        const float want =
            c->pos[i / D] < 0 ? stream[i] : kvcal_bf16_round(stream[i] + sum[i]);
        differ += memcmp(&got[i], &want, sizeof want) != 0;
    }
    EXPECT_NONE(differ, n, "stream values other than the combine's add");
    EXPECT_NONE(count_differ(got_n, got, n), n,
                "stream values with the norm other than without it");
    EXPECT_NONE(count_differ(normed, want_normed, n), n,
                "normalized values other than add + RMSNorm's after the combine");
    free(stream);
    free(norm_w);
    free(sum);
    free(got);
    free(got_n);
    free(normed);
    free(want_normed);
    cudaFree(d_stream);
    cudaFree(d_stream_n);
    cudaFree(d_norm_w);
    cudaFree(d_normed);
    cudaFree(d_want);
}

static op_class moe_class(const op_row *r, int version)
{
    (void)r;
    return version == 1 ? OP_MBARRIER : OP_PLAIN;
}

static void moe_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    const moe_cpu *c = p;
    const int T = r->rows, D = r->k, I = r->n, E = r->experts, K = r->top_k;
    const int cap = kvcal_moe_plan_capacity(T * K, E), hopper = version == 1;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, (int64_t)T * D),
               *d_logits = kvcal_test_dev_upload_bf16(c->logits, (int64_t)T * E),
               *d_gu = kvcal_test_dev_upload_bf16(c->gu, (int64_t)E * 2 * I * D),
               *d_down = kvcal_test_dev_upload_bf16(c->down, (int64_t)E * D * I),
               *d_shared = r->shared
                               ? kvcal_test_dev_upload_bf16(c->shared, (int64_t)T * D)
                               : NULL,
               *d_gate = c->gate_w ? kvcal_test_dev_upload_bf16(c->gate_w, D) : NULL,
               *d_bias = c->bias ? kvcal_test_dev_upload_bf16(c->bias, E) : NULL,
               *d_b_gu = c->b_gu ? kvcal_test_dev_upload_bf16(c->b_gu, (int64_t)E * 2 * I)
                                 : NULL,
               *d_b_down = c->b_down
                               ? kvcal_test_dev_upload_bf16(c->b_down, (int64_t)E * D)
                               : NULL;
    /* the WMMA path's results; the Hopper path's (its y first holds the
     * gathered rows, which the down projection overwrites; its gate/up
     * stored on gpt-oss's rows alone) */
    moe_dev_out wmma = {dev_alloc_nan((int64_t)cap * 2 * I),
                        dev_alloc_nan((int64_t)cap * I), dev_alloc_nan((int64_t)cap * D),
                        dev_alloc_nan((int64_t)T * D)},
                sm90 = {NULL, hopper ? dev_alloc_nan((int64_t)cap * I) : NULL,
                        hopper ? dev_alloc_nan((int64_t)cap * D) : NULL,
                        hopper ? dev_alloc_nan((int64_t)T * D) : NULL};
    int32_t *d_pos = dev_upload(c->pos, (size_t)T * sizeof *c->pos),
            *d_e = dev_alloc((size_t)T * K * sizeof(int32_t));
    float *d_w = dev_alloc((size_t)T * K * sizeof(float));
    unsigned long long *d_counts = dev_alloc((size_t)E * sizeof *d_counts);
    CU_ASSERT_EQUAL(cudaMemset(d_counts, 0, (size_t)E * sizeof *d_counts), cudaSuccess);
    kvcal_moe_plan plan = {
        dev_alloc((size_t)cap * sizeof(int32_t)),
        dev_alloc((size_t)T * K * sizeof(int32_t)),
        dev_alloc((size_t)cap / KVCAL_MOE_TILE_ROWS * sizeof(int32_t)),
        cap,
        cap / KVCAL_MOE_TILE_ROWS,
        dev_alloc(sizeof(int32_t)),
        dev_alloc((size_t)kvcal_moe_plan_scratch(T * K, E) * sizeof(int32_t))};
    const kvcal_moe_route_params grouped = {E,
                                            K,
                                            r->sigmoid,
                                            d_bias,
                                            r->groups,
                                            r->topk_groups,
                                            r->group_max,
                                            r->renorm,
                                            r->sigmoid ? 2.5f : 1.5f};
    if (r->groups)
        ROW_OK(kvcal_moe_route_grouped_launch(d_e, d_w, d_logits, d_pos, T, &grouped, 0));
    else if (r->sigmoid)
        ROW_OK(kvcal_moe_route_sigmoid_launch(d_e, d_w, d_logits, d_bias, d_pos, T, E, K,
                                              r->renorm, 2.5f, 0));
    else
        ROW_OK(kvcal_moe_route_launch(d_e, d_w, d_logits, d_pos, T, E, K, r->renorm, 0));
    ROW_OK(kvcal_moe_align_launch(&plan, d_e, T * K, E, d_counts, 0));
    if (hopper) {
        /* gpt-oss's biases and clamped SwiGLU in the epilogues */
        const kvcal_moe_epilogue_args gu = {d_b_gu, 1.702f, 7.0f},
                                      down = {d_b_down, 0, 0};
        const kvcal_moe_epilogue epi =
            r->oai ? KVCAL_MOE_EPI_SWIGLU_OAI : KVCAL_MOE_EPI_SWIGLU;
        const kvcal_status st = kvcal_moe_gemm_sm90_launch(
            sm90.act, d_x, K, d_gu, &plan, E, D, I, epi, r->oai ? &gu : NULL, 0);
        if (st == KVCAL_ERR_UNSUPPORTED) {
            printf("skipped: %s ", kvcal_last_error());
            ctx->skip = 1;
        } else {
            ROW_OK(st);
            /* the rows gathered apart (kvcal_moe_gather_launch), then read in
             * the plan's order by TMA: the same act, bit for bit */
            kvcal_bf16 *apart = dev_alloc_nan((int64_t)cap * I);
            ROW_OK(kvcal_moe_gather_launch(sm90.y, d_x, &plan, K, D, NULL, 0));
            ROW_OK(kvcal_moe_gemm_sm90_launch(apart, sm90.y, 0, d_gu, &plan, E, D, I, epi,
                                              r->oai ? &gu : NULL, 0));
            sync_ok();
            const size_t bytes = (size_t)cap * I * sizeof(kvcal_bf16);
            void *h_in = host_alloc(bytes), *h_apart = host_alloc(bytes);
            dev_download(h_in, sm90.act, bytes);
            dev_download(h_apart, apart, bytes);
            ROW_ASSERT(memcmp(h_in, h_apart, bytes) == 0);
            free(h_in);
            free(h_apart);
            cudaFree(apart);
            ROW_OK(kvcal_moe_gemm_sm90_launch(sm90.y, sm90.act, 0, d_down, &plan, E, I, D,
                                              KVCAL_MOE_EPI_STORE, r->oai ? &down : NULL,
                                              0));
        }
    }
    if (!ctx->skip) {
        ROW_OK(kvcal_moe_gemm_launch(wmma.h, d_x, K, d_gu, &plan, D, 2 * I, 0));
        moe_act_launch(r, &wmma, d_b_gu, &plan);
        ROW_OK(kvcal_moe_gemm_launch(wmma.y, wmma.act, 0, d_down, &plan, I, D, 0));
        const moe_dev_out *paths[] = {&wmma, hopper ? &sm90 : NULL};
        for (int m = 0; m < 2 && paths[m]; m++) {
            if (r->oai && m == 0)
                ROW_OK(kvcal_moe_bias_launch(paths[m]->y, d_b_down, &plan, D, 0));
            ROW_OK(kvcal_moe_combine_launch(paths[m]->out, paths[m]->y, plan.slot_of, d_w,
                                            d_pos, T, K, D, d_shared, d_x, d_gate, 0,
                                            NULL, 0));
        }
        moe_combine_accumulate_check(r, c, &plan, paths[0], d_w, d_pos, d_shared, d_x,
                                     d_gate);
        sync_ok();
        moe_check(r, version, c, d_e, d_w, d_counts, &plan, hopper ? &sm90 : &wmma,
                  hopper ? &wmma : NULL);
    }
    cudaFree(plan.sorted);
    cudaFree(plan.slot_of);
    cudaFree(plan.tile_expert);
    cudaFree(plan.used_tiles);
    cudaFree(plan.scratch);
    cudaFree(d_counts);
    cudaFree(d_w);
    cudaFree(d_e);
    cudaFree(d_pos);
    for (int m = 0; m < 2; m++) {
        moe_dev_out *o = m ? &sm90 : &wmma;
        cudaFree(o->h);
        cudaFree(o->act);
        cudaFree(o->y);
        cudaFree(o->out);
    }
    cudaFree(d_gate);
    cudaFree(d_bias);
    cudaFree(d_b_gu);
    cudaFree(d_b_down);
    cudaFree(d_shared);
    cudaFree(d_down);
    cudaFree(d_gu);
    cudaFree(d_logits);
    cudaFree(d_x);
}

// --- mla_latent, mla_expand, mla_ds_roundtrip --------------------------------------

/* The cache point: the latent's RMSNorm (x * rsqrt, then the weight, each
 * rounded to bf16) within ROPE_ATOL + |ref| * ROPE_RTOL; the RoPE part and
 * the query's within rope_far's bound; the query's no-RoPE channels and
 * padding tokens untouched; the statistics exact: the reference's fold of
 * the entry stored, into K and into V alike. */
typedef struct mla_latent_cpu {
    float *entry, *q;    /* (rows, entry stride), (rows, heads * head_dim) */
    float *norm_w;       /* (kv_lora_rank) */
    int32_t *pos;        /* every 7th token padding */
    float *inv_freq;     /* (rot_dim / 2) */
    float *ref, *ref_q;  /* kvcal_mla_latent_ref of entry and q */
    obs_host pre, after; /* a random block folded in; then the reference's entries */
} mla_latent_cpu;

static int64_t mla_entry_stride(const op_row *r)
{
    return (int64_t)r->kv_lora_rank + r->rot_dim + r->kv_pad;
}

static void *mla_latent_cpu_run(const op_row *r)
{
    const int L = r->kv_lora_rank, R = r->rot_dim, E = L + R;
    const int64_t es = mla_entry_stride(r), qs = (int64_t)r->heads * r->head_dim;
    mla_latent_cpu *c = host_alloc(sizeof *c);
    c->entry = rand_bf16(r->rows * es, -3.0f, 3.0f);
    c->q = qs ? rand_bf16(r->rows * qs, -3.0f, 3.0f) : NULL;
    c->norm_w = rand_bf16(L, 0.5f, 1.5f);
    c->pos = host_alloc((size_t)r->rows * sizeof *c->pos);
    c->inv_freq = host_alloc((size_t)(R / 2) * sizeof *c->inv_freq);
    for (int t = 0; t < r->rows; t++)
        c->pos[t] = t % 7 == 3 ? -1 : 5 * t + 1;
    for (int i = 0; i < R / 2; i++)
        c->inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)R);
    obs_alloc(&c->pre, 1, E);
    const int32_t pre_pos[5] = {0, 1, 2, 3, 4};
    float *pre_kv = rand_bf16(5 * 2 * (int64_t)E, -2.0f, 2.0f);
    kvcal_rope_observe_ref(pre_kv, 2 * (int64_t)E, pre_pos, 5, 0, 1, E, &observe_only,
                           &c->pre.o);
    free(pre_kv);
    c->ref = host_copy(c->entry, r->rows * es);
    c->ref_q = c->q ? host_copy(c->q, r->rows * qs) : NULL;
    obs_copy(&c->after, &c->pre);
    kvcal_mla_latent_ref(c->ref, es, c->ref_q, qs, c->pos, r->rows, r->heads, r->head_dim,
                         L, R, c->norm_w, ROPE_EPS, c->inv_freq, rope_factor(r),
                         &c->after.o);
    return c;
}

static void mla_latent_release(void *p)
{
    mla_latent_cpu *c = p;
    free(c->entry);
    free(c->q);
    free(c->norm_w);
    free(c->pos);
    free(c->inv_freq);
    free(c->ref);
    free(c->ref_q);
    obs_free(&c->pre);
    obs_free(&c->after);
    free(c);
}

static void mla_latent_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const mla_latent_cpu *c = p;
    const int L = r->kv_lora_rank, R = r->rot_dim, E = L + R, hd = r->head_dim;
    const int64_t es = mla_entry_stride(r), qs = (int64_t)r->heads * hd;
    kvcal_bf16 *d_entry = kvcal_test_dev_upload_bf16(c->entry, r->rows * es),
               *d_q = qs ? kvcal_test_dev_upload_bf16(c->q, r->rows * qs) : NULL,
               *d_w = kvcal_test_dev_upload_bf16(c->norm_w, L);
    int32_t *d_pos = dev_upload(c->pos, (size_t)r->rows * sizeof *c->pos);
    float *d_inv = dev_upload(c->inv_freq, (size_t)(R / 2) * sizeof *c->inv_freq);
    kvcal_kv_observer d_obs = obs_upload(&c->pre);
    const kvcal_mla_cfg cfg = {r->heads, hd, L, R, d_w, ROPE_EPS, d_inv, rope_factor(r)};
    ROW_OK(
        kvcal_mla_latent_launch(d_entry, es, d_q, qs, d_pos, r->rows, &cfg, &d_obs, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_entry, r->rows * es);
    float *got_q = qs ? kvcal_test_dev_download_bf16(d_q, r->rows * qs) : NULL;
    obs_host got_obs;
    obs_alloc(&got_obs, 1, E);
    obs_download(&got_obs, &d_obs);
    int64_t far = 0, q_far = 0, q_nope_changed = 0, padding_changed = 0, compared = 0;
    float *kv = host_alloc((size_t)r->rows * 2 * E * sizeof *kv); /* [entry, entry] */
    for (int t = 0; t < r->rows; t++) {
        const float *g = got + t * es, *in = c->entry + t * es, *ref = c->ref + t * es;
        memcpy(kv + (int64_t)t * 2 * E, g, (size_t)E * sizeof *kv);
        memcpy(kv + (int64_t)t * 2 * E + E, g, (size_t)E * sizeof *kv);
        if (c->pos[t] < 0) {
            padding_changed += count_differ(g, in, es) != 0;
            padding_changed += qs && count_differ(got_q + t * qs, c->q + t * qs, qs) != 0;
            continue;
        }
        far += count_far(g, ref, L, ROPE_ATOL, ROPE_RTOL);
        /* the rotation's input: the entry's RoPE part is not normalized */
        far += rope_far(g + L, ref + L, in + L, R, R, 1);
        padding_changed += count_differ(g + E, in + E, r->kv_pad) != 0;
        compared += E;
        for (int h = 0; h < r->heads; h++) {
            const int64_t o = t * qs + (int64_t)h * hd;
            q_nope_changed += count_differ(got_q + o, c->q + o, hd - R);
            q_far += rope_far(got_q + o + hd - R, c->ref_q + o + hd - R,
                              c->q + o + hd - R, R, R, 1);
        }
    }
    EXPECT_NONE(far, compared, "entry values off the bound");
    EXPECT_NONE(q_far, compared / E * r->heads * R, "rotated query values off the bound");
    EXPECT_NONE(q_nope_changed, compared / E * r->heads * (hd - R),
                "query channels before the RoPE part changed");
    EXPECT_NONE(padding_changed, r->rows, "padding tokens or padding columns changed");
    obs_host stored;
    obs_copy(&stored, &c->pre);
    kvcal_rope_observe_ref(kv, 2 * (int64_t)E, c->pos, r->rows, 0, 1, E, &observe_only,
                           &stored.o);
    const int64_t obs_n = E + KVCAL_HIST_BINS + 1;
    for (int which = 0; which < 2; which++)
        EXPECT_NONE(obs_differ(&got_obs, &stored, which), obs_n,
                    which ? "V statistics not the fold of the entry stored"
                          : "K statistics not the fold of the entry stored");
    obs_free(&stored);
    obs_free(&got_obs);
    free(kv);
    free(got);
    free(got_q);
    obs_dev_free(&d_obs);
    cudaFree(d_entry);
    cudaFree(d_q);
    cudaFree(d_w);
    cudaFree(d_pos);
    cudaFree(d_inv);
}

/* The expansion is copies: exact, V's padding zeros; K alone and V alone
 * (the other NULL) the same values. */
typedef struct mla_expand_cpu {
    float *kvb, *entry; /* (rows, heads, nope + v_dim), (rows, entry stride) */
    float *k, *v;       /* kvcal_mla_expand_ref: (rows, heads, head_dim) each */
} mla_expand_cpu;

static void *mla_expand_cpu_run(const op_row *r)
{
    const int nope = r->head_dim - r->rot_dim, H = r->heads, T = r->rows;
    const int64_t es = mla_entry_stride(r);
    mla_expand_cpu *c = host_alloc(sizeof *c);
    c->kvb = rand_bf16((int64_t)T * H * (nope + r->v_dim), -3.0f, 3.0f);
    c->entry = rand_bf16(T * es, -3.0f, 3.0f);
    c->k = host_alloc((size_t)T * H * r->head_dim * sizeof *c->k);
    c->v = host_alloc((size_t)T * H * r->head_dim * sizeof *c->v);
    kvcal_mla_expand_ref(c->k, c->v, r->head_dim, c->kvb, c->entry, es, T, H, nope,
                         r->v_dim, r->kv_lora_rank, r->rot_dim);
    return c;
}

static void mla_expand_release(void *p)
{
    mla_expand_cpu *c = p;
    free(c->kvb);
    free(c->entry);
    free(c->k);
    free(c->v);
    free(c);
}

static void mla_expand_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const mla_expand_cpu *c = p;
    const int nope = r->head_dim - r->rot_dim, H = r->heads, T = r->rows;
    const int64_t es = mla_entry_stride(r), n = (int64_t)T * H * r->head_dim;
    kvcal_bf16 *d_kvb =
                   kvcal_test_dev_upload_bf16(c->kvb, (int64_t)T * H * (nope + r->v_dim)),
               *d_entry = kvcal_test_dev_upload_bf16(c->entry, T * es);
    for (int which = 0; which < 3; which++) { /* both, K alone, V alone */
        kvcal_bf16 *d_k = which == 2 ? NULL : dev_alloc_nan(n),
                   *d_v = which == 1 ? NULL : dev_alloc_nan(n);
        ROW_OK(kvcal_mla_expand_launch(d_k, d_v, r->head_dim, d_kvb, d_entry, es, T, H,
                                       nope, r->v_dim, r->kv_lora_rank, r->rot_dim, 0));
        sync_ok();
        if (d_k) {
            float *k = kvcal_test_dev_download_bf16(d_k, n);
            EXPECT_NONE(count_differ(k, c->k, n), n, "K values not the reference's");
            free(k);
        }
        if (d_v) {
            float *v = kvcal_test_dev_download_bf16(d_v, n);
            EXPECT_NONE(count_differ(v, c->v, n), n,
                        "V values (and V's zero padding) not the reference's");
            free(v);
        }
        cudaFree(d_k);
        cudaFree(d_v);
    }
    cudaFree(d_kvb);
    cudaFree(d_entry);
}

/* K's RoPE part alone: K starts as the reference's K with its RoPE part
 * NaN (the no-RoPE part: what kv_b_proj wrote, kept as it is); afterwards
 * it must be the reference's K bit for bit (the RoPE part a copy). Packed
 * heads, and heads 16 values wider with K 8 values in (as K lies after V
 * in the runner's [V | K] heads), whose other values must stay NaN. */
static void mla_expand_rope_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const mla_expand_cpu *c = p;
    const int nope = r->head_dim - r->rot_dim, H = r->heads, T = r->rows;
    const int64_t es = mla_entry_stride(r), n = (int64_t)T * H * r->head_dim;
    kvcal_bf16 *d_entry = kvcal_test_dev_upload_bf16(c->entry, T * es);
    for (int wide = 0; wide < 2; wide++) {
        const int kh = r->head_dim + (wide ? 16 : 0), at = wide ? 8 : 0;
        const int64_t m = (int64_t)T * H * kh;
        float *k = malloc((size_t)m * sizeof *k);
        ROW_ASSERT(k != NULL);
        for (int64_t i = 0; i < m; i++) {
            const int64_t head = i / kh, j = i % kh - at;
            k[i] = j >= 0 && j < nope ? c->k[head * r->head_dim + j] : NAN;
        }
        kvcal_bf16 *d_k = kvcal_test_dev_upload_bf16(k, m);
        free(k);
        ROW_OK(kvcal_mla_expand_rope_launch(d_k + at, kh, d_entry, es, T, H, nope,
                                            r->kv_lora_rank, r->rot_dim, 0));
        sync_ok();
        k = kvcal_test_dev_download_bf16(d_k, m);
        int64_t rope_bad = 0, nope_bad = 0, gap_bad = 0;
        for (int64_t i = 0; i < m; i++) {
            const int64_t head = i / kh, j = i % kh - at;
            if (j < 0 || j >= r->head_dim)
                gap_bad += !isnan(k[i]);
            else if (j < nope)
                nope_bad += count_differ(&k[i], &c->k[head * r->head_dim + j], 1);
            else
                rope_bad += count_differ(&k[i], &c->k[head * r->head_dim + j], 1);
        }
        EXPECT_NONE(rope_bad, n / r->head_dim * r->rot_dim,
                    "RoPE part values not the entry's");
        EXPECT_NONE(nope_bad, n / r->head_dim * nope, "no-RoPE part values changed");
        EXPECT_NONE(gap_bad, m - n, "values between the heads written");
        free(k);
        cudaFree(d_k);
    }
    ROW_ASSERT(kvcal_mla_expand_rope_launch(NULL, r->head_dim, d_entry, es, T, H, nope,
                                            r->kv_lora_rank, r->rot_dim,
                                            0) == KVCAL_ERR_INVALID_ARG);
    ROW_ASSERT(kvcal_test_error_has("mla_expand_rope"));
    ROW_ASSERT(kvcal_mla_expand_rope_launch((kvcal_bf16 *)d_entry, r->head_dim - 1,
                                            d_entry, es, T, H, nope, r->kv_lora_rank,
                                            r->rot_dim, 0) == KVCAL_ERR_INVALID_ARG);
    cudaFree(d_entry);
}

/* fp8_ds_mla and back: bit for bit (the tile scale divides as vLLM's
 * kernel). Rows of every magnitude: zeros (the FLT_MIN scale), tiny values,
 * large ones. */
typedef struct mla_ds_cpu {
    float *x;   /* (rows, entry stride) */
    float *ref; /* (rows, entry stride) kvcal_mla_ds_roundtrip_ref */
} mla_ds_cpu;

static void *mla_ds_roundtrip_cpu_run(const op_row *r)
{
    const int64_t es = mla_entry_stride(r), E = r->kv_lora_rank + r->rot_dim;
    mla_ds_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(r->rows * es, -1.0f, 1.0f);
    for (int t = 0; t < r->rows; t++) {
        float *row = c->x + t * es;
        const float mag = t % 4 == 1   ? 0.0f
                          : t % 4 == 2 ? 1e-6f
                          : t % 4 == 3 ? 300.0f
                                       : 1.0f;
        for (int64_t i = 0; i < E; i++)
            row[i] = kvcal_bf16_round(row[i] * mag);
    }
    c->ref = host_alloc((size_t)(r->rows * es) * sizeof *c->ref);
    for (int64_t i = 0; i < r->rows * es; i++)
        c->ref[i] = NAN;
    kvcal_mla_ds_roundtrip_ref(c->ref, es, c->x, es, r->rows, r->kv_lora_rank,
                               r->rot_dim);
    return c;
}

static void mla_ds_roundtrip_release(void *p)
{
    mla_ds_cpu *c = p;
    free(c->x);
    free(c->ref);
    free(c);
}

static void mla_ds_roundtrip_cuda(const op_row *r, int version, const void *p,
                                  op_ctx *ctx)
{
    (void)version, (void)ctx;
    const mla_ds_cpu *c = p;
    const int64_t es = mla_entry_stride(r), E = r->kv_lora_rank + r->rot_dim;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, r->rows * es);
    float *d_out = dev_alloc((size_t)(r->rows * es) * sizeof *d_out);
    CU_ASSERT_EQUAL(cudaMemset(d_out, 0xff, (size_t)(r->rows * es) * sizeof *d_out),
                    cudaSuccess); /* NaN: a value left unwritten fails */
    ROW_OK(kvcal_mla_ds_roundtrip_launch(d_out, es, d_x, es, r->rows, r->kv_lora_rank,
                                         r->rot_dim, 0));
    sync_ok();
    float *got = host_alloc((size_t)(r->rows * es) * sizeof *got);
    dev_download(got, d_out, (size_t)(r->rows * es) * sizeof *got);
    int64_t bad = 0;
    for (int t = 0; t < r->rows; t++)
        bad += count_differ(got + t * es, c->ref + t * es, E);
    EXPECT_NONE(bad, r->rows * E, "values not the reference's");
    free(got);
    cudaFree(d_x);
    cudaFree(d_out);
}

// --- embed ---------------------------------------------------------------------

/* A gather: exact. */
typedef struct embed_cpu {
    float *table; /* (vocab, cols) */
    int32_t *ids; /* (rows) every 5th -1 (padding), the last id among them */
    float *ref;   /* (rows, cols) kvcal_embed_ref */
} embed_cpu;

static void *embed_cpu_run(const op_row *r)
{
    embed_cpu *c = host_alloc(sizeof *c);
    c->table = rand_bf16((int64_t)r->vocab * r->cols, -1.0f, 1.0f);
    c->ids = host_alloc((size_t)r->rows * sizeof *c->ids);
    c->ref = host_alloc((size_t)r->rows * r->cols * sizeof *c->ref);
    for (int i = 0; i < r->rows; i++)
        c->ids[i] = i % 5 == 3 ? -1 : (int32_t)(rand_u32() % (uint32_t)r->vocab);
    c->ids[0] = r->vocab - 1;
    kvcal_embed_ref(c->ref, c->table, c->ids, r->rows, r->cols);
    return c;
}

static void embed_release(void *p)
{
    embed_cpu *c = p;
    free(c->table);
    free(c->ids);
    free(c->ref);
    free(c);
}

static void embed_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const embed_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_table =
                   kvcal_test_dev_upload_bf16(c->table, (int64_t)r->vocab * r->cols),
               *d_out = dev_alloc_nan(n);
    int32_t *d_ids = dev_upload(c->ids, (size_t)r->rows * sizeof *c->ids);
    ROW_OK(kvcal_embed_launch(d_out, d_table, d_ids, r->rows, r->cols, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n);
    EXPECT_NONE(count_differ(got, c->ref, n), n, "outputs not the reference's");
    free(got);
    cudaFree(d_table);
    cudaFree(d_ids);
    cudaFree(d_out);
}

// --- token_nll -----------------------------------------------------------------

/* fp32 sums of up to 49152 exponentials against double; rows without a
 * target are exactly 0. */
#define NLL_ATOL 1e-4
#define NLL_RTOL 1e-5

typedef struct token_nll_cpu {
    float *logits;   /* (rows, vocab) */
    int32_t *target; /* (rows) every 5th -1 (none) */
    float *ref;      /* (rows) kvcal_token_nll_ref */
} token_nll_cpu;

static void *token_nll_cpu_run(const op_row *r)
{
    token_nll_cpu *c = host_alloc(sizeof *c);
    c->logits = rand_bf16((int64_t)r->rows * r->vocab, -12.0f, 12.0f);
    c->target = host_alloc((size_t)r->rows * sizeof *c->target);
    c->ref = host_alloc((size_t)r->rows * sizeof *c->ref);
    for (int i = 0; i < r->rows; i++)
        c->target[i] = i % 5 == 3 ? -1 : (int32_t)(rand_u32() % (uint32_t)r->vocab);
    kvcal_token_nll_ref(c->ref, c->logits, c->target, r->rows, r->vocab);
    return c;
}

static void token_nll_release(void *p)
{
    token_nll_cpu *c = p;
    free(c->logits);
    free(c->target);
    free(c->ref);
    free(c);
}

static void token_nll_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const token_nll_cpu *c = p;
    kvcal_bf16 *d_logits =
        kvcal_test_dev_upload_bf16(c->logits, (int64_t)r->rows * r->vocab);
    int32_t *d_target = dev_upload(c->target, (size_t)r->rows * sizeof *c->target);
    float *d_nll = dev_alloc((size_t)r->rows * sizeof *d_nll);
    float *got = host_alloc((size_t)r->rows * sizeof *got);
    CU_ASSERT_EQUAL(cudaMemset(d_nll, 0xff, (size_t)r->rows * sizeof *d_nll),
                    cudaSuccess);
    ROW_OK(kvcal_token_nll_launch(d_nll, d_logits, d_target, r->rows, r->vocab, NULL));
    dev_download(got, d_nll, (size_t)r->rows * sizeof *got);
    int64_t no_target_not_zero = 0;
    for (int i = 0; i < r->rows; i++)
        no_target_not_zero += c->target[i] < 0 && got[i] != 0.0f;
    EXPECT_NONE(count_far(got, c->ref, r->rows, NLL_ATOL, NLL_RTOL), r->rows,
                "values off the bound");
    EXPECT_NONE(no_target_not_zero, r->rows, "rows without a target not 0");
    free(got);
    cudaFree(d_logits);
    cudaFree(d_target);
    cudaFree(d_nll);
}

// --- token_kld (with token_keep) ------------------------------------------------

/* fp32 sums of p (log p - log q) against double, with both logsumexps in
 * fp32 (~1e-6 each at |lse| ~ 12: an offset of that order): 5e-5 + 1e-3
 * relative; the top-1 agreement exactly; the kept rows bit for bit. */
#define KLD_ATOL 5e-5
#define KLD_RTOL 1e-3

typedef struct token_kld_cpu {
    float *base, *run; /* (rows, vocab) bf16 values: the run a perturbed base */
    int64_t *keep;     /* (rows) a permutation, every 4th -1 (none) */
    float *ref, *lse;  /* kvcal_token_keep_ref of base */
    float *kld, *top;  /* (rows) kvcal_token_kld_ref of run */
} token_kld_cpu;

static void *token_kld_cpu_run(const op_row *r)
{
    token_kld_cpu *c = host_alloc(sizeof *c);
    const int64_t n = (int64_t)r->rows * r->vocab;
    c->base = rand_bf16(n, -12.0f, 12.0f);
    float *noise = rand_bf16(n, -0.3f, 0.3f);
    c->run = host_alloc((size_t)n * sizeof *c->run);
    for (int64_t i = 0; i < n; i++)
        c->run[i] = kvcal_bf16_round(c->base[i] + (i % 3 ? noise[i] : 0.0f));
    free(noise);
    c->keep = host_alloc((size_t)r->rows * sizeof *c->keep);
    for (int i = 0; i < r->rows; i++)
        c->keep[i] = i % 4 == 1 ? -1 : r->rows - 1 - i;
    c->ref = host_alloc((size_t)n * sizeof *c->ref);
    c->lse = host_alloc((size_t)r->rows * sizeof *c->lse);
    c->kld = host_alloc((size_t)r->rows * sizeof *c->kld);
    c->top = host_alloc((size_t)r->rows * sizeof *c->top);
    kvcal_token_keep_ref(c->ref, c->lse, c->base, c->keep, r->rows, r->vocab);
    kvcal_token_kld_ref(c->kld, c->top, c->run, c->ref, c->lse, c->keep, r->rows,
                        r->vocab);
    return c;
}

static void token_kld_release(void *p)
{
    token_kld_cpu *c = p;
    free(c->base);
    free(c->run);
    free(c->keep);
    free(c->ref);
    free(c->lse);
    free(c->kld);
    free(c->top);
    free(c);
}

static void token_kld_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const token_kld_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->vocab;
    kvcal_bf16 *d_base = kvcal_test_dev_upload_bf16(c->base, n);
    kvcal_bf16 *d_run = kvcal_test_dev_upload_bf16(c->run, n);
    int64_t *d_keep = dev_upload(c->keep, (size_t)r->rows * sizeof *c->keep);
    kvcal_bf16 *d_ref = dev_alloc((size_t)n * sizeof *d_ref);
    float *d_lse = dev_alloc((size_t)r->rows * sizeof *d_lse);
    float *d_kld = dev_alloc((size_t)r->rows * sizeof *d_kld);
    float *d_top = dev_alloc((size_t)r->rows * sizeof *d_top);
    float *lse = host_alloc((size_t)r->rows * sizeof *lse);
    float *kld = host_alloc((size_t)r->rows * sizeof *kld);
    float *top = host_alloc((size_t)r->rows * sizeof *top);
    kvcal_bf16 *ref = host_alloc((size_t)n * sizeof *ref);
    kvcal_bf16 *want = host_alloc((size_t)n * sizeof *want);
    CU_ASSERT_EQUAL(cudaMemset(d_ref, 0, (size_t)n * sizeof *d_ref), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemset(d_kld, 0xff, (size_t)r->rows * sizeof *d_kld),
                    cudaSuccess);
    ROW_OK(
        kvcal_token_keep_launch(d_ref, d_lse, d_base, d_keep, r->rows, r->vocab, NULL));
    ROW_OK(kvcal_token_kld_launch(d_kld, d_top, d_run, d_ref, d_lse, d_keep, r->rows,
                                  r->vocab, NULL));
    dev_download(lse, d_lse, (size_t)r->rows * sizeof *lse);
    dev_download(kld, d_kld, (size_t)r->rows * sizeof *kld);
    dev_download(top, d_top, (size_t)r->rows * sizeof *top);
    dev_download(ref, d_ref, (size_t)n * sizeof *ref);
    kvcal_bf16 *d_want = kvcal_test_dev_upload_bf16(c->ref, n);
    dev_download(want, d_want, (size_t)n * sizeof *want);
    int64_t kept_off = 0, lse_off = 0, top_off = 0, kept = 0;
    for (int i = 0; i < r->rows; i++) {
        const int64_t k = c->keep[i];
        if (k < 0)
            continue;
        kept++;
        kept_off += memcmp(ref + k * r->vocab, want + k * r->vocab,
                           (size_t)r->vocab * sizeof *ref) != 0;
        lse_off += fabs(lse[k] - c->lse[k]) > NLL_ATOL + fabs(c->lse[k]) * NLL_RTOL;
    }
    for (int i = 0; i < r->rows; i++)
        top_off += top[i] != c->top[i];
    EXPECT_NONE(kept_off, kept, "kept rows not bit for bit");
    EXPECT_NONE(lse_off, kept, "logsumexp off the bound");
    EXPECT_NONE(count_far(kld, c->kld, r->rows, KLD_ATOL, KLD_RTOL), r->rows,
                "KL divergences off the bound");
    EXPECT_NONE(top_off, r->rows, "top-1 agreements differ");
    free(lse);
    free(kld);
    free(top);
    free(ref);
    free(want);
    cudaFree(d_base);
    cudaFree(d_run);
    cudaFree(d_keep);
    cudaFree(d_ref);
    cudaFree(d_lse);
    cudaFree(d_kld);
    cudaFree(d_top);
    cudaFree(d_want);
}

// --- error_sums ----------------------------------------------------------------

/* x2 and e2: double sums in another order; clipped and n exact; the store
 * exact (y's bf16 bits on the counted rows, x's elsewhere). */
#define SUMS_ATOL 1e-12
#define SUMS_RTOL 1e-12

typedef struct error_sums_cpu {
    float *x;     /* (rows, x_stride) bf16 values */
    float *y;     /* (rows, y_stride) near x, bf16 values */
    float *scale; /* (rows, cols / group) + 1, small enough that part of x clips */
    int32_t *pos; /* (rows) every 7th -1 (padding) */
    kvcal_error_sums ref; /* kvcal_error_sums_ref */
} error_sums_cpu;

static void *error_sums_cpu_run(const op_row *r)
{
    const int64_t nx = (int64_t)r->rows * r->x_stride,
                  ny = (int64_t)r->rows * r->y_stride;
    const int groups = r->group ? r->cols / r->group : 0;
    error_sums_cpu *c = host_alloc(sizeof *c);
    c->x = rand_bf16(nx, -20.0f, 20.0f);
    c->y = rand_bf16(ny, -20.0f, 20.0f);
    c->scale = host_alloc(((size_t)r->rows * groups + 1) * sizeof *c->scale);
    c->pos = host_alloc((size_t)r->rows * sizeof *c->pos);
    for (int64_t i = 0; i < r->rows; i++)
        for (int j = 0; j < r->cols; j++)
            c->y[i * r->y_stride + j] =
                kvcal_bf16_round(c->x[i * r->x_stride + j] * rand_uniform(0.95f, 1.05f));
    for (int64_t i = 0; i < (int64_t)r->rows * groups + 1; i++)
        c->scale[i] = rand_uniform(0.001f, 0.1f);
    for (int i = 0; i < r->rows; i++)
        c->pos[i] = i % 7 == 5 ? -1 : i;
    memset(&c->ref, 0, sizeof c->ref);
    kvcal_error_sums_ref(&c->ref, c->x, r->x_stride, c->y, r->y_stride,
                         r->group ? c->scale : NULL, r->group, c->pos, r->rows, r->cols);
    return c;
}

static void error_sums_release(void *p)
{
    error_sums_cpu *c = p;
    free(c->x);
    free(c->y);
    free(c->scale);
    free(c->pos);
    free(c);
}

static void error_sums_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const error_sums_cpu *c = p;
    const int64_t nx = (int64_t)r->rows * r->x_stride,
                  ny = (int64_t)r->rows * r->y_stride;
    const int groups = r->group ? r->cols / r->group : 0;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, nx),
               *d_store = kvcal_test_dev_upload_bf16(c->x, nx);
    void *d_y = r->y_f32 ? dev_upload(c->y, (size_t)ny * sizeof *c->y)
                         : (void *)kvcal_test_dev_upload_bf16(c->y, ny);
    float *d_scale =
        dev_upload(c->scale, ((size_t)r->rows * groups + 1) * sizeof *c->scale);
    int32_t *d_pos = dev_upload(c->pos, (size_t)r->rows * sizeof *c->pos);
    kvcal_error_sums *d_sums = dev_alloc(sizeof *d_sums), got;
    CU_ASSERT_EQUAL(cudaMemset(d_sums, 0, sizeof *d_sums), cudaSuccess);
    ROW_OK(kvcal_error_sums_launch(d_sums, d_x, r->x_stride, d_y, r->y_stride,
                                   r->y_f32 ? KVCAL_DTYPE_F32 : KVCAL_DTYPE_BF16,
                                   r->group ? d_scale : NULL, r->group, d_pos, r->rows,
                                   r->cols, d_store, NULL));
    dev_download(&got, d_sums, sizeof got);
    float *stored = kvcal_test_dev_download_bf16(d_store, nx);
    ROW_ASSERT(fabs(got.x2 - c->ref.x2) <= SUMS_ATOL + fabs(c->ref.x2) * SUMS_RTOL);
    ROW_ASSERT(fabs(got.e2 - c->ref.e2) <= SUMS_ATOL + fabs(c->ref.e2) * SUMS_RTOL);
    ROW_ASSERT(got.clipped == c->ref.clipped);
    ROW_ASSERT(got.n == c->ref.n);
    if (r->group) /* the row is meant to clip some values and keep others */
        ROW_ASSERT(c->ref.clipped > 0 && c->ref.clipped < c->ref.n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < r->rows; i++)
        for (int64_t j = 0; j < r->x_stride; j++) {
            const int counted = c->pos[i] >= 0 && j < r->cols;
            const float want =
                counted ? c->y[i * r->y_stride + j] : c->x[i * r->x_stride + j];
            wrong += memcmp(&stored[i * r->x_stride + j], &want, sizeof want) != 0;
        }
    EXPECT_NONE(wrong, nx, "stored values not y's on the counted rows and x's elsewhere");
    free(stored);
    cudaFree(d_x);
    cudaFree(d_store);
    cudaFree(d_y);
    cudaFree(d_scale);
    cudaFree(d_pos);
    cudaFree(d_sums);
}

// --- the ops -------------------------------------------------------------------

static const char *const one_version[] = {"launch", NULL};

// --- fp8_quant_act ------------------------------------------------------------------

/* The bytes and scales of kvcal_fp8_quant_act_ref, bit for bit. */
typedef struct fp8_act_cpu {
    float *x;       /* (rows, cols) bf16 values */
    float in_scale; /* STATIC */
    uint8_t *q;     /* (rows, cols) */
    float *s;       /* rows * groups */
    int64_t nscales;
} fp8_act_cpu;

static int64_t fp8_act_scales(const op_row *r, int cols)
{
    return (int64_t)r->rows *
           (r->fp8_a == KVCAL_FP8A_GROUP ? (cols + r->group - 1) / r->group : 1);
}

static void *fp8_quant_act_cpu(const op_row *r)
{
    fp8_act_cpu *c = host_alloc(sizeof *c);
    const int64_t n = (int64_t)r->rows * r->cols;
    c->x = rand_bf16(n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; i += 97) /* a few large values: clamped at 448 (static) */
        c->x[i] *= 64.0f;
    c->in_scale = 0.05f;
    c->nscales = fp8_act_scales(r, r->cols);
    c->q = host_alloc((size_t)n);
    c->s = host_alloc((size_t)c->nscales * sizeof(float));
    kvcal_fp8_quant_act_ref(c->q, c->s, c->x, r->rows, r->cols, r->fp8_a, r->group,
                            c->in_scale);
    return c;
}

static void fp8_quant_act_release(void *p)
{
    fp8_act_cpu *c = p;
    free(c->x), free(c->q), free(c->s), free(c);
}

static void fp8_quant_act_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    (void)version, (void)ctx;
    const fp8_act_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, n);
    uint8_t *d_q = dev_alloc((size_t)n), *q = host_alloc((size_t)n);
    float *d_s = dev_alloc((size_t)c->nscales * sizeof(float)),
          *d_in = dev_upload(&c->in_scale, sizeof(float)),
          *s = host_alloc((size_t)c->nscales * sizeof(float));
    ROW_OK(kvcal_fp8_quant_act_launch(d_q, d_s, d_x, r->rows, r->cols, r->fp8_a, r->group,
                                      d_in, 0));
    sync_ok();
    dev_download(q, d_q, (size_t)n);
    dev_download(s, d_s, (size_t)c->nscales * sizeof(float));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += q[i] != c->q[i];
    EXPECT_NONE(bad, n, "bytes unlike the reference's");
    EXPECT_NONE(count_differ(s, c->s, c->nscales), c->nscales,
                "scales unlike the reference's");
    free(q), free(s);
    cudaFree(d_x), cudaFree(d_q), cudaFree(d_s), cudaFree(d_in);
}

// --- fp8_linear ---------------------------------------------------------------------

/* Weights of |w| <= 1 (e4m3 codes over the whole range times scales near
 * 1 / 448), x in [-1, 1): against kvcal_fp8_linear_ref on the same bf16
 * inputs (the same bytes quantized), the FP8 GEMM differs in the fp32
 * sums' order and one bf16 rounding (gemm's bounds); the fallback rounds
 * each dequantized operand to bf16 too (2^-9 relative each). The bound
 * follows the path the launch reports it took.
 *
 * Hopper's fast accumulation (version "fast") adds each 32-deep step of
 * the k sum into the tensor cores' own accumulator, which keeps 13 mantissa
 * bits and truncates (e8m13: Khattak & Mikaitis, "Accurate Models of NVIDIA
 * Tensor Cores", 2025): a step loses less than 2^-13 of the largest
 * magnitude it adds. Such a GEMM gets, beyond the fp32 bound, FP8_FAST_ULPS
 * times 2^-13 of sum over the steps of max(|partial sum before|, |after|,
 * the step's largest product), the partial sums taken in k's order (a
 * model of 4 units a step; at k = 4096 a simulation of the truncation
 * reaches 0.10 of it). */
#define FP8_GEMM_ATOL 2e-2
#define FP8_GEMM_RTOL 8e-3
#define FP8_DEQUANT_ATOL 5e-2
#define FP8_DEQUANT_RTOL 2e-2
#define FP8_FAST_STEP 32
#define FP8_FAST_ULPS 4.0

typedef struct fp8_linear_cpu {
    kvcal_fp8_linear f;
    float *x, *bias, *scales, *ref; /* (rows, k), (n), the layout's, (rows, n) */
    float *fast;                    /* (rows, n) fast accumulation's allowance */
    uint8_t *w;                     /* (n, k) */
    float in_scale;
    int64_t nscales;
} fp8_linear_cpu;

/* fast (m, n): the fast accumulation's allowance (above) of the products
 * of xd (m, k) and wd (n, k), the dequantized operands. */
static void fp8_fast_allowance(float *fast, const float *xd, const float *wd, int m,
                               int k, int n)
{
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            double sum = 0.0, allow = 0.0;
            for (int c0 = 0; c0 < k; c0 += FP8_FAST_STEP) {
                double top = fabs(sum);
                for (int c = c0; c < c0 + FP8_FAST_STEP && c < k; c++) {
                    const double p =
                        (double)xd[(int64_t)r * k + c] * wd[(int64_t)j * k + c];
                    sum += p;
                    top = fmax(top, fabs(p));
                }
                allow += fmax(top, fabs(sum));
            }
            fast[(int64_t)r * n + j] = (float)(FP8_FAST_ULPS * ldexp(allow, -13));
        }
}

static void *fp8_linear_cpu_run(const op_row *r)
{
    fp8_linear_cpu *c = host_alloc(sizeof *c);
    c->f = (kvcal_fp8_linear){r->fp8_w, r->fp8_a, r->block_n, r->block_k, r->group};
    c->x = rand_bf16((int64_t)r->rows * r->k, -1.0f, 1.0f);
    c->bias = rand_bf16(r->n, -1.0f, 1.0f);
    c->w = host_alloc((size_t)r->n * r->k);
    for (int64_t i = 0; i < (int64_t)r->n * r->k; i++)
        c->w[i] = (uint8_t)(rand_u32() & 0xfe); /* even codes: no NaN */
    c->nscales = kvcal_fp8_weight_scales(&c->f, r->n, r->k);
    c->scales = host_alloc((size_t)c->nscales * sizeof(float));
    for (int64_t i = 0; i < c->nscales; i++)
        c->scales[i] = rand_uniform(0.5f, 1.0f) / 448.0f;
    for (int64_t i = 4; c->f.w == KVCAL_FP8W_TENSOR && i < c->nscales; i++)
        c->scales[i] = c->scales[0];
    c->in_scale = 1.0f / 448.0f;
    c->ref = host_alloc((size_t)r->rows * r->n * sizeof(float));
    float *scratch = host_alloc(((size_t)r->rows + (size_t)r->n) * r->k * sizeof(float));
    kvcal_fp8_linear_ref(c->ref, c->x, c->w, c->scales, c->in_scale, &c->f,
                         r->bias ? c->bias : NULL, r->rows, r->k, r->n, scratch);
    c->fast = host_alloc((size_t)r->rows * r->n * sizeof(float));
    /* the reference left the dequantized operands in scratch */
    fp8_fast_allowance(c->fast, scratch, scratch + (size_t)r->rows * r->k, r->rows, r->k,
                       r->n);
    free(scratch);
    return c;
}

static void fp8_linear_release(void *p)
{
    fp8_linear_cpu *c = p;
    free(c->x), free(c->bias), free(c->scales), free(c->ref), free(c->fast), free(c->w);
    free(c);
}

/* version 0: kvcal_fp8_linear_launch's choice (cuBLASLt's FP8 GEMM wherever
 * it runs the scales: on compute capability 9.0 every scheme of 128 x 128
 * blocks or none); 1: the dequantized fallback; 2: the choice of 0 with
 * fast accumulation on the scalar and outer-vector scales */
static const char *const fp8_linear_versions[] = {"auto", "dequant", "fast", NULL};
static const kvcal_fp8_gemm_path fp8_linear_paths[] = {
    KVCAL_FP8_GEMM_AUTO, KVCAL_FP8_GEMM_DEQUANT, KVCAL_FP8_GEMM_FAST};

static void fp8_linear_cuda(const op_row *r, int version, const void *p, op_ctx *ctx)
{
    const fp8_linear_cpu *c = p;
    const int64_t n_out = (int64_t)r->rows * r->n;
    const size_t groups = (size_t)fp8_act_scales(r, r->k);
    if (!ctx->gemm)
        CU_ASSERT_EQUAL_FATAL(kvcal_gemm_create(32u << 20, &ctx->gemm), KVCAL_OK);
    kvcal_bf16 *d_x = kvcal_test_dev_upload_bf16(c->x, (int64_t)r->rows * r->k),
               *d_b = kvcal_test_dev_upload_bf16(c->bias, r->n),
               *d_out = dev_alloc_nan(n_out);
    kvcal_fp8_weight w = {dev_upload(c->w, (size_t)r->n * r->k),
                          dev_upload(c->scales, (size_t)c->nscales * sizeof(float)),
                          dev_upload(&c->in_scale, sizeof(float)), c->f};
    kvcal_fp8_scratch s = {dev_alloc((size_t)r->rows * r->k),
                           dev_alloc(groups * sizeof(float)),
                           dev_alloc((size_t)r->n * r->k * sizeof(kvcal_bf16)),
                           dev_alloc((size_t)r->rows * r->k * sizeof(kvcal_bf16))};
    int fp8 = -1, major = 0, minor = 0, dev = 0;
    const kvcal_fp8_gemm_path path = fp8_linear_paths[version];
    ROW_OK(kvcal_fp8_linear_launch(ctx->gemm, d_out, d_x, &w, r->bias ? d_b : NULL,
                                   r->rows, r->k, r->n, &s, path, &fp8, 0));
    sync_ok();
    float *got = kvcal_test_dev_download_bf16(d_out, n_out);
    /* fast accumulation where the FP8 GEMM ran it (not on block scales) */
    const int fast = fp8 && path == KVCAL_FP8_GEMM_FAST && c->f.w != KVCAL_FP8W_BLOCK;
    int64_t far = 0;
    double worst = 0.0; /* of |got - ref| over the bound */
    for (int64_t i = 0; i < n_out; i++) {
        const double bound =
            (fp8 ? FP8_GEMM_ATOL + FP8_GEMM_RTOL * fabsf(c->ref[i])
                 : FP8_DEQUANT_ATOL + FP8_DEQUANT_RTOL * fabsf(c->ref[i])) +
            (fast ? c->fast[i] : 0.0f);
        const double e = fabs((double)got[i] - c->ref[i]);
        far += !(e <= bound);
        worst = e / bound > worst ? e / bound : worst;
    }
    printf("\n    %s: %s%s, worst %.2f of the bound", current,
           fp8 ? "FP8 GEMM" : "fallback", fast ? " (fast accumulation)" : "", worst);
    EXPECT_NONE(far, n_out, "outputs off the bound");
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    /* Hopper runs every scheme but weight-only and 64 x 64 blocks in FP8
     * (checked at rows a multiple of 16: cuBLASLt's choice elsewhere); where
     * it does not, cuBLASLt's answer is printed */
    const int hopper_fp8 =
        c->f.a != KVCAL_FP8A_NONE && (c->f.w != KVCAL_FP8W_BLOCK || c->f.block_n == 128);
    if (path == KVCAL_FP8_GEMM_DEQUANT) {
        ROW_ASSERT(fp8 == 0);
    } else if (major == 9 && minor == 0 && r->rows % 16 == 0) {
        if (fp8 != hopper_fp8 &&
            !kvcal_fp8_linear_runs(ctx->gemm, &w, path, r->bias, r->rows, r->k, r->n))
            printf(" (%s)", kvcal_last_error());
        ROW_ASSERT(fp8 == hopper_fp8);
    }
    free(got);
    cudaFree(d_x), cudaFree(d_b), cudaFree(d_out);
    cudaFree((void *)w.q), cudaFree((void *)w.scales), cudaFree((void *)w.input_scale);
    cudaFree(s.xq), cudaFree(s.xs), cudaFree(s.wd), cudaFree(s.xd);
}

// --- fp8_swiglu_quant -------------------------------------------------------------

typedef struct fp8_swiglu_cpu {
    float *gate_up, *act; /* (rows, 2 cols), (rows, cols) */
    uint8_t *q;           /* (rows, cols) kvcal_fp8_swiglu_quant_ref's */
    float *s, in_scale;
    int64_t nscales;
} fp8_swiglu_cpu;

static void *fp8_swiglu_quant_cpu(const op_row *r)
{
    fp8_swiglu_cpu *c = host_alloc(sizeof *c);
    const int64_t n = (int64_t)r->rows * r->cols;
    c->gate_up = rand_bf16(2 * n, -4.0f, 4.0f);
    c->act = host_alloc((size_t)n * sizeof(float));
    c->in_scale = 0.02f; /* SwiGLU of |gate|, |up| < 4 stays below 16: some clip */
    c->nscales = fp8_act_scales(r, r->cols);
    c->q = host_alloc((size_t)n);
    c->s = host_alloc((size_t)c->nscales * sizeof(float));
    kvcal_fp8_swiglu_quant_ref(c->q, c->s, c->act, c->gate_up, r->rows, r->cols, r->fp8_a,
                               r->group, c->in_scale);
    return c;
}

static void fp8_swiglu_quant_release(void *p)
{
    fp8_swiglu_cpu *c = p;
    free(c->gate_up), free(c->act), free(c->q), free(c->s), free(c);
}

/* Bit for bit the bytes and scales of kvcal_swiglu_launch then
 * kvcal_fp8_quant_act_launch; the CPU reference's but where the device's
 * fast exp and division and the host's straddle a bf16 rounding (SwiGLU's
 * bound: at most 1 in 100; a row whose absmax straddles rescales, so the
 * scales are held to all but one). */
static void fp8_swiglu_quant_cuda(const op_row *r, int version, const void *p,
                                  op_ctx *ctx)
{
    (void)version, (void)ctx;
    const fp8_swiglu_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    const size_t sb = (size_t)c->nscales * sizeof(float);
    kvcal_bf16 *d_gu = kvcal_test_dev_upload_bf16(c->gate_up, 2 * n),
               *d_act = dev_alloc_nan(n);
    uint8_t *d_q = dev_alloc((size_t)n), *d_q2 = dev_alloc((size_t)n);
    float *d_s = dev_alloc(sb), *d_s2 = dev_alloc(sb),
          *d_in = dev_upload(&c->in_scale, sizeof(float));
    ROW_OK(kvcal_fp8_swiglu_quant_launch(d_q, d_s, d_gu, r->rows, r->cols, r->fp8_a,
                                         r->group, d_in, 0));
    ROW_OK(kvcal_swiglu_launch(d_act, d_gu, r->rows, r->cols, 0));
    ROW_OK(kvcal_fp8_quant_act_launch(d_q2, d_s2, d_act, r->rows, r->cols, r->fp8_a,
                                      r->group, d_in, 0));
    sync_ok();
    uint8_t *q = host_alloc((size_t)n), *q2 = host_alloc((size_t)n);
    float *s = host_alloc(sb), *s2 = host_alloc(sb);
    dev_download(q, d_q, (size_t)n);
    dev_download(q2, d_q2, (size_t)n);
    dev_download(s, d_s, sb);
    dev_download(s2, d_s2, sb);
    int64_t unlike_pair = 0, like_ref = 0;
    for (int64_t i = 0; i < n; i++) {
        unlike_pair += q[i] != q2[i];
        like_ref += q[i] == c->q[i];
    }
    EXPECT_NONE(unlike_pair, n, "bytes unlike SwiGLU then fp8_quant_act's");
    EXPECT_NONE(count_differ(s, s2, c->nscales), c->nscales,
                "scales unlike SwiGLU then fp8_quant_act's");
    EXPECT_MOSTLY(like_ref, n, 100, "bytes equal to the reference's");
    EXPECT_MOSTLY(c->nscales - count_differ(s, c->s, c->nscales), c->nscales, c->nscales,
                  "scales equal to the reference's");
    free(q), free(q2), free(s), free(s2);
    cudaFree(d_gu), cudaFree(d_act), cudaFree(d_q), cudaFree(d_q2);
    cudaFree(d_s), cudaFree(d_s2), cudaFree(d_in);
}

// --- fp8_add_rmsnorm_quant ---------------------------------------------------------

typedef struct fp8_norm_cpu {
    float *res, *delta, *w; /* (rows, cols), (rows, cols), (cols) */
    float *sum, *act;       /* (rows, cols) the reference's residual and row */
    uint8_t *q;             /* (rows, cols) kvcal_fp8_add_rmsnorm_quant_ref's */
    float *s, in_scale;
    int64_t nscales;
} fp8_norm_cpu;

static void *fp8_add_rmsnorm_quant_cpu(const op_row *r)
{
    fp8_norm_cpu *c = host_alloc(sizeof *c);
    const int64_t n = (int64_t)r->rows * r->cols;
    c->res = rand_bf16(n, -2.0f, 2.0f);
    c->delta = rand_bf16(n, -1.0f, 1.0f);
    c->w = rand_bf16(r->cols, 0.5f, 1.5f);
    c->sum = host_copy(c->res, n);
    c->act = host_alloc((size_t)n * sizeof(float));
    c->in_scale = 0.005f; /* normalized rows reach ~2.6: some clip at 448 * 0.005 */
    c->nscales = fp8_act_scales(r, r->cols);
    c->q = host_alloc((size_t)n);
    c->s = host_alloc((size_t)c->nscales * sizeof(float));
    kvcal_fp8_add_rmsnorm_quant_ref(c->q, c->s, c->act, c->sum,
                                    r->delta ? c->delta : NULL, c->w, r->rows, r->cols,
                                    NORM_EPS, r->fp8_a, r->group, c->in_scale);
    return c;
}

static void fp8_add_rmsnorm_quant_release(void *p)
{
    fp8_norm_cpu *c = p;
    free(c->res), free(c->delta), free(c->w), free(c->sum), free(c->act);
    free(c->q), free(c->s), free(c);
}

/* Bit for bit the residual, bytes and scales of kvcal_add_rmsnorm_launch
 * then kvcal_fp8_quant_act_launch; the residual the CPU reference's
 * exactly, its bytes but where the device's rsqrt and fp32 sum and the
 * host's straddle a bf16 rounding (add_rmsnorm's bound: at most 1 in 100;
 * a row whose absmax straddles rescales, so the scales are held to all but
 * one). */
static void fp8_add_rmsnorm_quant_cuda(const op_row *r, int version, const void *p,
                                       op_ctx *ctx)
{
    (void)version, (void)ctx;
    const fp8_norm_cpu *c = p;
    const int64_t n = (int64_t)r->rows * r->cols;
    const size_t sb = (size_t)c->nscales * sizeof(float);
    kvcal_bf16 *d_res = kvcal_test_dev_upload_bf16(c->res, n),
               *d_res2 = kvcal_test_dev_upload_bf16(c->res, n),
               *d_delta = r->delta ? kvcal_test_dev_upload_bf16(c->delta, n) : NULL,
               *d_w = kvcal_test_dev_upload_bf16(c->w, r->cols),
               *d_out = dev_alloc_nan(n);
    uint8_t *d_q = dev_alloc((size_t)n), *d_q2 = dev_alloc((size_t)n);
    float *d_s = dev_alloc(sb), *d_s2 = dev_alloc(sb),
          *d_in = dev_upload(&c->in_scale, sizeof(float));
    ROW_ASSERT(kvcal_fp8_add_rmsnorm_quant_fits(d_res, d_delta, d_w, r->cols));
    ROW_OK(kvcal_fp8_add_rmsnorm_quant_launch(d_q, d_s, d_res, d_delta, d_w, r->rows,
                                              r->cols, NORM_EPS, r->fp8_a, r->group, d_in,
                                              0));
    ROW_OK(kvcal_add_rmsnorm_launch(d_out, d_res2, d_delta, d_w, r->rows, r->cols,
                                    NORM_EPS, 0));
    ROW_OK(kvcal_fp8_quant_act_launch(d_q2, d_s2, d_out, r->rows, r->cols, r->fp8_a,
                                      r->group, d_in, 0));
    sync_ok();
    uint8_t *q = host_alloc((size_t)n), *q2 = host_alloc((size_t)n);
    float *s = host_alloc(sb), *s2 = host_alloc(sb),
          *res = kvcal_test_dev_download_bf16(d_res, n),
          *res2 = kvcal_test_dev_download_bf16(d_res2, n);
    dev_download(q, d_q, (size_t)n);
    dev_download(q2, d_q2, (size_t)n);
    dev_download(s, d_s, sb);
    dev_download(s2, d_s2, sb);
    int64_t unlike_pair = 0, like_ref = 0;
    for (int64_t i = 0; i < n; i++) {
        unlike_pair += q[i] != q2[i];
        like_ref += q[i] == c->q[i];
    }
    EXPECT_NONE(count_differ(res, res2, n), n, "residual values unlike add_rmsnorm's");
    EXPECT_NONE(count_differ(res, c->sum, n), n, "residual values not the reference's");
    EXPECT_NONE(unlike_pair, n, "bytes unlike add_rmsnorm then fp8_quant_act's");
    EXPECT_NONE(count_differ(s, s2, c->nscales), c->nscales,
                "scales unlike add_rmsnorm then fp8_quant_act's");
    EXPECT_MOSTLY(like_ref, n, 100, "bytes equal to the reference's");
    EXPECT_MOSTLY(c->nscales - count_differ(s, c->s, c->nscales), c->nscales, c->nscales,
                  "scales equal to the reference's");
    free(q), free(q2), free(s), free(s2), free(res), free(res2);
    cudaFree(d_res), cudaFree(d_res2), cudaFree(d_delta), cudaFree(d_w), cudaFree(d_out);
    cudaFree(d_q), cudaFree(d_q2), cudaFree(d_s), cudaFree(d_s2), cudaFree(d_in);
}

static const op_def op_defs[] = {
    {"add_rmsnorm", add_rmsnorm_cpu, add_rmsnorm_release, one_version, one_plain_version,
     add_rmsnorm_cuda},
    {"gemm", gemm_cpu_run, gemm_release, gemm_versions, gemm_class, gemm_cuda},
    {"gemm_batched", gemm_batched_cpu_run, gemm_batched_release, one_version,
     gemm_batched_class, gemm_batched_cuda},
    {"gemm_swiglu", gemm_swiglu_cpu_run, gemm_swiglu_release, one_version,
     one_mbarrier_version, gemm_swiglu_cuda},
    {"rope_observe", rope_observe_cpu, rope_observe_release, rope_versions,
     rope_observe_class, rope_observe_cuda},
    {"attention", attention_cpu_run, attention_release, attention_versions,
     attention_class, attention_cuda},
    {"swiglu", swiglu_cpu_run, swiglu_release, one_version, one_plain_version,
     swiglu_cuda},
    {"moe", moe_cpu_run, moe_release, moe_versions, moe_class, moe_cuda},
    {"mla_latent", mla_latent_cpu_run, mla_latent_release, one_version, one_plain_version,
     mla_latent_cuda},
    {"mla_expand", mla_expand_cpu_run, mla_expand_release, one_version, one_plain_version,
     mla_expand_cuda},
    {"mla_expand_rope", mla_expand_cpu_run, mla_expand_release, one_version,
     one_plain_version, mla_expand_rope_cuda},
    {"mla_ds_roundtrip", mla_ds_roundtrip_cpu_run, mla_ds_roundtrip_release, one_version,
     one_plain_version, mla_ds_roundtrip_cuda},
    {"geglu", geglu_cpu_run, swiglu_release, one_version, one_plain_version, geglu_cuda},
    {"swiglu_oai", swiglu_oai_cpu_run, swiglu_release, one_version, one_plain_version,
     swiglu_oai_cuda},
    {"affine", affine_cpu_run, affine_release, one_version, one_plain_version,
     affine_cuda},
    {"rmsnorm_cols", rmsnorm_cols_cpu_run, rmsnorm_cols_release, one_version,
     one_plain_version, rmsnorm_cols_cuda},
    {"gated_delta", gated_delta_cpu_run, gated_delta_release, one_version,
     one_plain_version, gated_delta_cuda},
    {"query_temperature", query_temperature_cpu_run, query_temperature_release,
     one_version, one_plain_version, query_temperature_cuda},
    {"sigmoid_gate", sigmoid_gate_cpu_run, sigmoid_gate_release, one_version,
     one_plain_version, sigmoid_gate_cuda},
    {"embed", embed_cpu_run, embed_release, one_version, one_plain_version, embed_cuda},
    {"token_nll", token_nll_cpu_run, token_nll_release, one_version, one_plain_version,
     token_nll_cuda},
    {"token_kld", token_kld_cpu_run, token_kld_release, one_version, one_plain_version,
     token_kld_cuda},
    {"error_sums", error_sums_cpu_run, error_sums_release, one_version, one_plain_version,
     error_sums_cuda},
    {"fp8_quant_act", fp8_quant_act_cpu, fp8_quant_act_release, one_version,
     one_plain_version, fp8_quant_act_cuda},
    {"fp8_linear", fp8_linear_cpu_run, fp8_linear_release, fp8_linear_versions,
     one_plain_version, fp8_linear_cuda},
    {"fp8_swiglu_quant", fp8_swiglu_quant_cpu, fp8_swiglu_quant_release, one_version,
     one_plain_version, fp8_swiglu_quant_cuda},
    {"fp8_add_rmsnorm_quant", fp8_add_rmsnorm_quant_cpu, fp8_add_rmsnorm_quant_release,
     one_version, one_plain_version, fp8_add_rmsnorm_quant_cuda},
};

static const op_def *op_find(const char *stem)
{
    for (size_t i = 0; i < sizeof op_defs / sizeof op_defs[0]; i++)
        if (!strcmp(op_defs[i].stem, stem))
            return &op_defs[i];
    return NULL;
}

/* Every row of op `stem`: its inputs and the CPU reference once, then each
 * CUDA kernel version that suite `cls` runs on it. */
static void run_op(const char *stem, op_class cls)
{
    const op_def *d = op_find(stem);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    int ran = 0;
    for (size_t i = 0; i < NUM_ROWS && !ctx.skip; i++) {
        const op_row *r = &rows[i];
        int takes = 0;
        for (int v = 0; !strcmp(r->op, stem) && d->cuda_versions[v]; v++)
            takes |= d->cuda_class(r, v) == cls;
        if (!takes)
            continue;
        void *cpu = d->cpu(r);
        for (int v = 0; d->cuda_versions[v] && !ctx.skip; v++) {
            if (d->cuda_class(r, v) != cls)
                continue;
            describe(r, d->cuda_versions[v]);
            d->cuda_run(r, v, cpu, &ctx);
            ran++;
        }
        d->release(cpu);
    }
    CU_ASSERT(ran > 0 || ctx.skip);
    kvcal_gemm_destroy(ctx.gemm); /* NULL when no row made one: a no-op */
    kvcal_attention_destroy(ctx.attention);
}

// --- the suites ----------------------------------------------------------------

/* Every row names an op of op_defs that some suite runs on it. */
static void every_row_names_an_op_a_suite_runs(void)
{
    for (size_t i = 0; i < NUM_ROWS; i++) {
        const op_def *d = op_find(rows[i].op);
        int runs = 0;
        describe(&rows[i], "-");
        for (int v = 0; d && d->cuda_versions[v]; v++)
            runs |= d->cuda_class(&rows[i], v) != OP_SKIP;
        ROW_ASSERT(d != NULL);
        ROW_ASSERT(runs);
    }
}

static void add_rmsnorm_rows_match_cpu(void)
{
    run_op("add_rmsnorm", OP_PLAIN);
}

static void gemm_rows_match_cpu(void)
{
    run_op("gemm", OP_PLAIN);
}

static void gemm_batched_rows_match_cpu(void)
{
    run_op("gemm_batched", OP_PLAIN);
}

static void rope_observe_rows_match_cpu(void)
{
    run_op("rope_observe", OP_PLAIN);
}

static void attention_rows_match_cpu(void)
{
    run_op("attention", OP_PLAIN);
}

static void swiglu_rows_match_cpu(void)
{
    run_op("swiglu", OP_PLAIN);
}

static void moe_rows_match_cpu(void)
{
    run_op("moe", OP_PLAIN);
}

static void mla_rows_match_cpu(void)
{
    run_op("mla_latent", OP_PLAIN);
    run_op("mla_expand", OP_PLAIN);
    run_op("mla_expand_rope", OP_PLAIN);
    run_op("mla_ds_roundtrip", OP_PLAIN);
}

static void geglu_rows_match_cpu(void)
{
    run_op("geglu", OP_PLAIN);
}

static void swiglu_oai_rows_match_cpu(void)
{
    run_op("swiglu_oai", OP_PLAIN);
}

static void affine_rows_match_cpu(void)
{
    run_op("affine", OP_PLAIN);
}

/* Scales off a 16-byte boundary, of any mode, are refused naming the
 * operand before cuBLASLt is asked; aligned ones pass on to the next check
 * (here the missing context). */
static void fp8_gemm_refuses_scales_off_16_bytes(void)
{
    static float scales[8];
    const float *aligned = (const float *)(((uintptr_t)scales + 15) & ~(uintptr_t)15),
                *off = aligned + 1;
    const uint8_t *q = (const uint8_t *)256;
    kvcal_bf16 *out = (kvcal_bf16 *)256;
    CU_ASSERT_EQUAL(kvcal_gemm_fp8_launch(NULL, out, q, off, KVCAL_GEMM_SCALE_OUTER_VEC,
                                          q, aligned, KVCAL_GEMM_SCALE_SCALAR, 0, NULL,
                                          16, 16, 16, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("the activation's scales"));
    CU_ASSERT(kvcal_test_error_has("16-byte"));
    CU_ASSERT_EQUAL(kvcal_gemm_fp8_launch(NULL, out, q, aligned, KVCAL_GEMM_SCALE_SCALAR,
                                          q, off, KVCAL_GEMM_SCALE_SCALAR, 0, NULL, 16,
                                          16, 16, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("the weight's scales"));
    CU_ASSERT_EQUAL(kvcal_gemm_fp8_launch(NULL, out, q, aligned, KVCAL_GEMM_SCALE_SCALAR,
                                          q, aligned, KVCAL_GEMM_SCALE_BLK128x128, 0,
                                          NULL, 16, 16, 16, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("need a context"));
}

/* The dequantization kernels (the FP8 fallback's and the FP8 experts'):
 * every e4m3 byte but the NaNs times its scale, rounded once to bf16, bit
 * for bit, on the 8-a-thread path (k and the scale runs multiples of 8) and
 * on the one-a-thread path (k 13, or an unaligned output). */
static void fp8_dequant_kernels_match_cpu_bit_for_bit(void)
{
    static const struct {
        kvcal_fp8_linear f;
        int n, k, off;
    } cases[] = {
        {{KVCAL_FP8W_BLOCK, KVCAL_FP8A_GROUP, 128, 128, 128}, 256, 384, 0},
        {{KVCAL_FP8W_CHANNEL, KVCAL_FP8A_TOKEN, 0, 0, 0}, 24, 64, 0},
        {{KVCAL_FP8W_TENSOR, KVCAL_FP8A_STATIC, 0, 0, 0}, 7, 13, 0},
        {{KVCAL_FP8W_BLOCK, KVCAL_FP8A_GROUP, 64, 64, 64}, 64, 128, 1},
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        const kvcal_fp8_linear *f = &cases[t].f;
        const int n = cases[t].n, k = cases[t].k, off = cases[t].off;
        const int64_t count = (int64_t)n * k, ns = kvcal_fp8_weight_scales(f, n, k);
        uint8_t *q = host_alloc((size_t)count);
        float *sc = host_alloc((size_t)ns * sizeof(float));
        kvcal_bf16 *got = host_alloc((size_t)count * sizeof(kvcal_bf16));
        for (int64_t i = 0; i < count; i++)
            q[i] = (uint8_t)(i % 256 == 0x7f || i % 256 == 0xff ? 0 : i % 256);
        for (int64_t i = 0; i < ns; i++)
            sc[i] = rand_uniform(0.25f, 4.0f) / 448.0f;
        for (int64_t i = 4; f->w == KVCAL_FP8W_TENSOR && i < ns; i++)
            sc[i] = sc[0];
        /* the weight */
        uint8_t *dq = dev_upload(q, (size_t)count);
        float *ds = dev_upload(sc, (size_t)ns * sizeof(float));
        kvcal_bf16 *dw = dev_alloc(((size_t)count + 1) * sizeof(kvcal_bf16));
        const kvcal_fp8_weight fw = {dq, ds, NULL, *f};
        CU_ASSERT_EQUAL_FATAL(kvcal_fp8_dequant_weight_launch(dw + off, &fw, n, k, 0),
                              KVCAL_OK);
        dev_download(got, dw + off, (size_t)count * sizeof(kvcal_bf16));
        int64_t bad = 0;
        for (int64_t i = 0; i < count; i++) {
            const float want = kvcal_fp8_e4m3_to_float(q[i]) *
                               kvcal_fp8_weight_scale_at(f, sc, i / k, i % k, k);
            bad += got[i] != kvcal_bf16_from_float(want);
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* the activation: n rows, its scales per row or group as xs lays them */
        const int group = f->a == KVCAL_FP8A_GROUP ? f->group : 0;
        const int64_t nxs = (int64_t)n * (group ? (k + group - 1) / group : 1);
        float *xs = host_alloc((size_t)nxs * sizeof(float));
        for (int64_t i = 0; i < nxs; i++)
            xs[i] = rand_uniform(0.25f, 4.0f) / 448.0f;
        float *dxs = dev_upload(xs, (size_t)nxs * sizeof(float));
        CU_ASSERT_EQUAL_FATAL(
            kvcal_fp8_dequant_act_launch(
                dw + off, dq, dxs, n, k,
                f->a == KVCAL_FP8A_GROUP ? KVCAL_FP8A_GROUP : KVCAL_FP8A_TOKEN, group, 0),
            KVCAL_OK);
        dev_download(got, dw + off, (size_t)count * sizeof(kvcal_bf16));
        bad = 0;
        for (int64_t i = 0; i < count; i++) {
            const int64_t r = i / k, c = i % k;
            const float s = group ? xs[c / group * n + r] : xs[r];
            bad += got[i] != kvcal_bf16_from_float(kvcal_fp8_e4m3_to_float(q[i]) * s);
        }
        CU_ASSERT_EQUAL(bad, 0);
        cudaFree(dq), cudaFree(ds), cudaFree(dw), cudaFree(dxs);
        free(q), free(sc), free(got), free(xs);
    }
}

/* kvcal_fp8_fake_quant_launch (the FP8 experts' inputs): bit for bit the
 * bf16 of kvcal_fp8_fake_quant_ref's values, per group of 128 and 64, per
 * token (a row of 2048, and one of 8192 against its last word), static;
 * in place too; shapes it does not take refused. */
static void fp8_fake_quant_rows_match_cpu_bit_for_bit(void)
{
    static const struct {
        kvcal_fp8_act_scale mode;
        int group, rows, k;
    } cases[] = {
        {KVCAL_FP8A_GROUP, 128, 37, 768}, {KVCAL_FP8A_GROUP, 64, 5, 128},
        {KVCAL_FP8A_TOKEN, 0, 33, 2048},  {KVCAL_FP8A_TOKEN, 0, 3, 8192},
        {KVCAL_FP8A_STATIC, 0, 9, 768},
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        const int m = cases[t].rows, k = cases[t].k;
        const int64_t n = (int64_t)m * k;
        float *xf = rand_bf16(n, -3.0f, 3.0f);
        for (int64_t i = 0; i < n; i += 97) /* some values far out, some near 0 */
            xf[i] = kvcal_bf16_round(i % 2 ? 1e-30f : 200.0f);
        kvcal_bf16 *x = host_alloc((size_t)n * sizeof(kvcal_bf16));
        float *want = host_alloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            x[i] = kvcal_bf16_from_float(xf[i]);
        const float scale = 0.0125f;
        kvcal_fp8_fake_quant_ref(want, xf, m, k, cases[t].mode, cases[t].group, scale);
        kvcal_bf16 *dx = dev_upload(x, (size_t)n * sizeof(kvcal_bf16));
        kvcal_bf16 *dout = dev_alloc((size_t)n * sizeof(kvcal_bf16));
        float *ds = dev_upload(&scale, sizeof scale);
        for (int in_place = 0; in_place < 2; in_place++) {
            kvcal_bf16 *o = in_place ? dx : dout;
            CU_ASSERT_EQUAL_FATAL(kvcal_fp8_fake_quant_launch(o, dx, m, k, cases[t].mode,
                                                              cases[t].group, ds, 0),
                                  KVCAL_OK);
            kvcal_bf16 *got = host_alloc((size_t)n * sizeof(kvcal_bf16));
            dev_download(got, o, (size_t)n * sizeof(kvcal_bf16));
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += got[i] != kvcal_bf16_from_float(want[i]);
            CU_ASSERT_EQUAL(bad, 0);
            free(got);
        }
        cudaFree(dx), cudaFree(dout), cudaFree(ds);
        free(x), free(xf), free(want);
    }
    CU_ASSERT(!kvcal_fp8_fake_quant_fits(768, KVCAL_FP8A_GROUP, 96));
    CU_ASSERT(!kvcal_fp8_fake_quant_fits(8200, KVCAL_FP8A_TOKEN, 0));
    CU_ASSERT_EQUAL(kvcal_fp8_fake_quant_launch((kvcal_bf16 *)256, (kvcal_bf16 *)256, 4,
                                                100, KVCAL_FP8A_GROUP, 128, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("fp8_fake_quant"));
}

/* Shapes the grouped GEMMs and the gather do not take, and plans too small
 * for the assignments or without their scratch, are refused naming the op. */
static void moe_refuses_unaligned_sizes_and_short_plans(void)
{
    kvcal_bf16 *p = (kvcal_bf16 *)256;
    int32_t *i = (int32_t *)256;
    kvcal_moe_plan plan = {i, i, i, KVCAL_MOE_TILE_ROWS, 1, NULL, i};
    CU_ASSERT_EQUAL(kvcal_moe_gemm_launch(p, p, 2, p, &plan, 60, 64, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("multiples of 8"));
    CU_ASSERT_EQUAL(kvcal_moe_align_launch(&plan, i, 200, 4, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("moe grouping"));
    const int cap = kvcal_moe_plan_capacity(200, 4);
    kvcal_moe_plan bare = {i, i, i, cap, cap / KVCAL_MOE_TILE_ROWS, NULL, NULL};
    CU_ASSERT_EQUAL(kvcal_moe_align_launch(&bare, i, 200, 4, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("scratch"));
    CU_ASSERT_EQUAL(kvcal_moe_route_launch(i, (float *)256, p, NULL, 4, 4, 5, 0, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_moe_route_launch(i, (float *)256, p, NULL, 4, 600, 2, 0, 0),
                    KVCAL_ERR_INVALID_ARG);
    /* the Hopper kernel: widths off 8, a plan without its used tiles, an
     * unknown epilogue, a negative gather; the gather and the combine: a
     * width off 8 */
    kvcal_moe_plan kept = plan;
    kept.used_tiles = i;
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &kept, 4, 60, 64,
                                               KVCAL_MOE_EPI_SWIGLU, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("multiples of 8"));
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &plan, 4, 64, 64,
                                               KVCAL_MOE_EPI_STORE, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("used_tiles"));
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &kept, 4, 64, 64,
                                               (kvcal_moe_epilogue)7, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("epilogue 7"));
    const kvcal_moe_epilogue_args no_limit = {NULL, 1.702f, 0.0f},
                                  odd_bias = {(const kvcal_bf16 *)((char *)p + 2), 1.702f,
                                              7.0f};
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &kept, 4, 64, 64,
                                               KVCAL_MOE_EPI_SWIGLU_OAI, &no_limit, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("limit > 0"));
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &kept, 4, 64, 64,
                                               KVCAL_MOE_EPI_SWIGLU_OAI, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 0, p, &kept, 4, 64, 64,
                                               KVCAL_MOE_EPI_SWIGLU_OAI, &odd_bias, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("4-byte aligned bias"));
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, -1, p, &kept, 4, 64, 64,
                                               KVCAL_MOE_EPI_SWIGLU, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("gather -1"));
    /* gathered rows past what 32-bit offsets of 16 bytes reach (64 GiB) */
    kvcal_moe_plan vast = kept;
    vast.capacity = 1 << 30;
    CU_ASSERT_EQUAL(kvcal_moe_gemm_sm90_launch(p, p, 1, p, &vast, 4, 64, 64,
                                               KVCAL_MOE_EPI_SWIGLU, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("within 64 GiB"));
    CU_ASSERT_EQUAL(kvcal_moe_gather_launch(p, p, &kept, 2, 60, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("moe gather"));
    CU_ASSERT_EQUAL(kvcal_moe_combine_launch(p, p, i, (float *)256, NULL, 4, 2, 60, NULL,
                                             NULL, NULL, 0, NULL, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("moe combine"));
    /* the next layer's norm only onto the stream (accumulate) */
    const kvcal_combine_norm norm = {p, p, 1e-6f};
    CU_ASSERT_EQUAL(kvcal_moe_combine_launch(p, p, i, (float *)256, NULL, 4, 2, 64, NULL,
                                             NULL, NULL, 0, &norm, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("a norm only onto the stream"));
    /* grouped: groups that do not divide the experts, too many, too few open
     * for the top-k */
    const int bad[3][4] = {{60, 7, 2, 4}, {256, 128, 4, 8}, {64, 8, 1, 9}};
    for (int j = 0; j < 3; j++) {
        const kvcal_moe_route_params g = {bad[j][0], bad[j][3], 1, p,   bad[j][1],
                                          bad[j][2], 0,         1, 2.5f};
        CU_ASSERT_EQUAL(
            kvcal_moe_route_grouped_launch(i, (float *)256, p, NULL, 4, &g, 0),
            KVCAL_ERR_INVALID_ARG);
        CU_ASSERT(kvcal_test_error_has("must divide the experts"));
    }
}

/* An entry past KVCAL_MLA_MAX_ENTRY (the cache point's shared statistics)
 * and an odd RoPE part are refused before any device work. */
static void mla_latent_refuses_long_entries_and_odd_rope(void)
{
    kvcal_mla_cfg cfg = {16,
                         192,
                         KVCAL_MLA_MAX_ENTRY,
                         64,
                         (const kvcal_bf16 *)256,
                         1e-6f,
                         (const float *)256,
                         1.0f};
    kvcal_bf16 *p = (kvcal_bf16 *)256;
    CU_ASSERT_EQUAL(
        kvcal_mla_latent_launch(p, 2048, NULL, 0, (const int32_t *)256, 4, &cfg, NULL, 0),
        KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("mla_latent"));
    cfg.kv_lora_rank = 512, cfg.rope_dim = 63;
    CU_ASSERT_EQUAL(
        kvcal_mla_latent_launch(p, 2048, NULL, 0, (const int32_t *)256, 4, &cfg, NULL, 0),
        KVCAL_ERR_INVALID_ARG);
}

static void embed_rows_match_cpu(void)
{
    run_op("embed", OP_PLAIN);
}

static void token_nll_rows_match_cpu(void)
{
    run_op("token_nll", OP_PLAIN);
}

static void token_kld_rows_match_cpu(void)
{
    run_op("token_kld", OP_PLAIN);
}

static void error_sums_rows_match_cpu(void)
{
    run_op("error_sums", OP_PLAIN);
}

static void fp8_quant_act_rows_match_cpu(void)
{
    run_op("fp8_quant_act", OP_PLAIN);
}

static void fp8_linear_rows_match_cpu(void)
{
    run_op("fp8_linear", OP_PLAIN);
}

static void fp8_swiglu_quant_rows_match_cpu_and_the_unfused_pair(void)
{
    run_op("fp8_swiglu_quant", OP_PLAIN);
}

static void fp8_add_rmsnorm_quant_rows_match_cpu_and_the_unfused_pair(void)
{
    run_op("fp8_add_rmsnorm_quant", OP_PLAIN);
}

static void gemm_tuned_rows_match_cpu(void)
{
    run_op("gemm", OP_TUNED);
    run_op("gemm_batched", OP_TUNED);
}

static void gemm_swiglu_rows_match_cpu(void)
{
    run_op("gemm_swiglu", OP_MBARRIER);
}

static void attention_cudnn_rows_match_cpu(void)
{
    run_op("attention", OP_MBARRIER);
}

static void moe_sm90_rows_match_cpu(void)
{
    run_op("moe", OP_MBARRIER);
}

// --- what the kernels refuse ---------------------------------------------------

static void attention_refuses_head_dim_over_256(void)
{
    CU_ASSERT_EQUAL(kvcal_attention_launch((kvcal_bf16 *)16, 6 * 264, (kvcal_bf16 *)16,
                                           (kvcal_bf16 *)16, (kvcal_bf16 *)16, 6 * 264, 1,
                                           4, 2, 2, 264, 0.1f, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("head_dim 264"));
}

static void rope_observe_refuses_attention_factor_not_positive_finite(void)
{
    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        kvcal_rope_cfg rope = {(const float *)16, 64, 0, NULL, NULL, 0.0f, bad[i], 0.0f};
        CU_ASSERT_EQUAL(kvcal_rope_observe_launch((kvcal_bf16 *)16, 3 * 64,
                                                  (const int32_t *)16, 4, 1, 1, 64, &rope,
                                                  NULL, 0),
                        KVCAL_ERR_INVALID_ARG);
        CU_ASSERT(kvcal_test_error_has("attention factor"));
    }
}

static void rope_observe_version_2_refuses_head_dim_off_16(void)
{
    kvcal_rope_cfg rope = {(const float *)16, 40, 0, NULL, NULL, 0.0f, 1.0f, 0.0f};
    CU_ASSERT_EQUAL(kvcal_rope_observe_launch_version(2, (kvcal_bf16 *)16, 3 * 40,
                                                      (const int32_t *)16, 4, 1, 1, 40,
                                                      &rope, NULL, 0),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("head_dim 40"));
}

/* checked before any device work */
static void gemm_swiglu_refuses_widths_off_8_and_unaligned_k(void)
{
    kvcal_bf16 *p = (kvcal_bf16 *)256;
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 4, 64, 100, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT(kvcal_test_error_has("k and n multiples of 8"));
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 4, 60, 128, 0),
                    KVCAL_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(kvcal_gemm_swiglu_launch(p, p, p, 0, 64, 128, 0), KVCAL_OK);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(every_row_names_an_op_a_suite_runs),
    KVCAL_TEST(add_rmsnorm_rows_match_cpu),
    KVCAL_TEST(gemm_rows_match_cpu),
    KVCAL_TEST(gemm_batched_rows_match_cpu),
    KVCAL_TEST(rope_observe_rows_match_cpu),
    KVCAL_TEST(attention_rows_match_cpu),
    KVCAL_TEST(swiglu_rows_match_cpu),
    KVCAL_TEST(moe_rows_match_cpu),
    KVCAL_TEST(swiglu_oai_rows_match_cpu),
    KVCAL_TEST(mla_rows_match_cpu),
    KVCAL_TEST(geglu_rows_match_cpu),
    KVCAL_TEST(affine_rows_match_cpu),
    KVCAL_TEST(embed_rows_match_cpu),
    KVCAL_TEST(token_nll_rows_match_cpu),
    KVCAL_TEST(token_kld_rows_match_cpu),
    KVCAL_TEST(error_sums_rows_match_cpu),
    KVCAL_TEST(fp8_quant_act_rows_match_cpu),
    KVCAL_TEST(fp8_linear_rows_match_cpu),
    KVCAL_TEST(fp8_swiglu_quant_rows_match_cpu_and_the_unfused_pair),
    KVCAL_TEST(fp8_add_rmsnorm_quant_rows_match_cpu_and_the_unfused_pair),
    KVCAL_TEST(attention_refuses_head_dim_over_256),
    KVCAL_TEST(rope_observe_refuses_attention_factor_not_positive_finite),
    KVCAL_TEST(rope_observe_version_2_refuses_head_dim_off_16),
    KVCAL_TEST(gemm_swiglu_refuses_widths_off_8_and_unaligned_k),
    KVCAL_TEST(moe_refuses_unaligned_sizes_and_short_plans),
    KVCAL_TEST(fp8_gemm_refuses_scales_off_16_bytes),
    KVCAL_TEST(fp8_dequant_kernels_match_cpu_bit_for_bit),
    KVCAL_TEST(fp8_fake_quant_rows_match_cpu_bit_for_bit),
    KVCAL_TEST(mla_latent_refuses_long_entries_and_odd_rope),
    CU_TEST_INFO_NULL,
};
static CU_TestInfo tuned_tests[] = {
    KVCAL_TEST(gemm_tuned_rows_match_cpu),
    CU_TEST_INFO_NULL,
};
static CU_TestInfo mbarrier_tests[] = {
    KVCAL_TEST(gemm_swiglu_rows_match_cpu),
    KVCAL_TEST(attention_cudnn_rows_match_cpu),
    KVCAL_TEST(moe_sm90_rows_match_cpu),
    CU_TEST_INFO_NULL,
};
#else
static CU_TestInfo tests[] = {CU_TEST_INFO_NULL};
static CU_TestInfo tuned_tests[] = {CU_TEST_INFO_NULL};
static CU_TestInfo mbarrier_tests[] = {CU_TEST_INFO_NULL};
#endif
KVCAL_SUITE(backend_ops, KVCAL_NEEDS_GPU, tests)
KVCAL_SUITE(backend_ops_tuned, KVCAL_NEEDS_GPU, tuned_tests)
KVCAL_SUITE(backend_ops_mbarrier, KVCAL_NEEDS_GPU, mbarrier_tests)
