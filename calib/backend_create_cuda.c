/* calib/backend_create_cuda.c: the cuda backend's creation
 * (kvcal_backend_cuda_create): the model checked against the device, the
 * GEMM, attention and MLP paths chosen, the layer weights' layout on the
 * device, the buffers sized to the device's memory and carved from one
 * slab, the weights' loader started; and the device plan the CLI prints
 * (kvcal_backend_cuda_plan_device). Compiled only in builds with CUDA. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/cuda_backend.h"

/* The slab order of the logical weights: the order the layer's weights
 * were laid out in before they were data, kept so the device layout (and
 * the alignment of each weight) does not move. */
static const kvcal_weight slab_order[] = {KVCAL_W_QKV,
                                          KVCAL_W_QKV_BIAS,
                                          KVCAL_W_O,
                                          KVCAL_W_O_BIAS,
                                          KVCAL_W_GATE_UP,
                                          KVCAL_W_DOWN,
                                          KVCAL_W_ATTN_NORM,
                                          KVCAL_W_FFN_NORM,
                                          KVCAL_W_Q_NORM,
                                          KVCAL_W_K_NORM,
                                          KVCAL_W_ROUTER,
                                          KVCAL_W_EXPERT_GATE_UP,
                                          KVCAL_W_EXPERT_DOWN,
                                          KVCAL_W_SHARED_GATE_UP,
                                          KVCAL_W_SHARED_DOWN,
                                          KVCAL_W_SHARED_GATE,
                                          KVCAL_W_POST_ATTN_NORM,
                                          KVCAL_W_POST_FFN_NORM,
                                          KVCAL_W_ROUTER_BIAS,
                                          KVCAL_W_Q_A,
                                          KVCAL_W_Q_A_NORM,
                                          KVCAL_W_Q_B,
                                          KVCAL_W_Q_PROJ,
                                          KVCAL_W_KV_A,
                                          KVCAL_W_KV_A_NORM,
                                          KVCAL_W_KV_B,
                                          KVCAL_W_ATTN_SINKS,
                                          KVCAL_W_EXPERT_GATE_UP_BIAS,
                                          KVCAL_W_EXPERT_DOWN_BIAS,
                                          KVCAL_W_ATTN_GATE,
                                          KVCAL_W_LIN_QKVZ,
                                          KVCAL_W_LIN_BA,
                                          KVCAL_W_LIN_CONV,
                                          KVCAL_W_LIN_A_LOG,
                                          KVCAL_W_LIN_DT_BIAS,
                                          KVCAL_W_LIN_NORM,
                                          KVCAL_W_LIN_OUT};
/* every weight once: one left out would have no place on the device (its
 * tensor NULL), and the zeros of a shorter list would lay out the first
 * weight again */
_Static_assert(sizeof slab_order / sizeof *slab_order == KVCAL_W_COUNT,
               "slab_order names every kvcal_weight");

/* mlp_fused, shared_fused: the MLP's, the shared expert's gate/up in the
 * fused kernel's order */
static void layout_layer(kvcal_cuda_layer_layout *lay, const kvcal_model_desc *d,
                         int mlp_fused, int shared_fused)
{
    size_t off = 0;
    memset(lay->interleaved, 0, sizeof lay->interleaved);
    lay->interleaved[KVCAL_W_GATE_UP] = mlp_fused ? d->intermediate_size : 0;
    lay->interleaved[KVCAL_W_SHARED_GATE_UP] =
        shared_fused ? d->shared_intermediate_size : 0;
    for (int j = 0; j < KVCAL_W_COUNT; j++) {
        const kvcal_weight i = slab_order[j];
        long long rows, cols;
        kvcal_model_weight_shape(d, i, &rows, &cols);
        lay->off[i] = off;
        if (lay->interleaved[i]) /* its last block padded */
            rows = kvcal_gemm_swiglu_rows(lay->interleaved[i]);
        lay->elems[i] = (size_t)rows * (size_t)(cols ? cols : 1);
        lay->fp8[i] = d->fp8[i];
        if (d->fp8[i].w == KVCAL_FP8W_NONE) {
            off += round_up(lay->elems[i] * sizeof(kvcal_bf16));
            continue;
        }
        off += round_up(lay->elems[i]);
        lay->scale_off[i] = off;
        off += round_up(sizeof(float) * (size_t)kvcal_model_fp8_scales(d, i));
        lay->input_off[i] = off;
        off += round_up(sizeof(float));
    }
    lay->bytes = off;
    /* a bf16 kv_b_proj as one batched GEMM a head (calib/backend_cuda.c
     * expand) where each head's rows are 16 bytes apart, what Hopper's
     * tensor memory access takes (the buffers and weights are 256-byte
     * aligned): sizes of multiples of 8 values. cuBLASLt, told the
     * alignment, would run less aligned heads on other algorithms; there
     * one GEMM and the expansion stay (DeepSeek-V2's golden model: heads of
     * 24 + 20 values). */
    lay->kv_b_v_first = d->mla && d->fp8[KVCAL_W_KV_B].w == KVCAL_FP8W_NONE &&
                        d->qk_nope_head_dim % 8 == 0 && d->v_head_dim % 8 == 0 &&
                        d->qk_rope_head_dim % 8 == 0 && d->kv_lora_rank % 8 == 0;
}

/* Adds weight w to the base's fp8_fallback list: its first tensor's name
 * without ".weight". */
static void note_fp8_fallback(cuda_backend *r, int w)
{
    char *list = r->base.fp8_fallback;
    const size_t used = strlen(list), cap = sizeof r->base.fp8_fallback;
    const char *name = r->base.desc->arch->weights[w].parts[0].name;
    const char *dot = strstr(name, ".weight"), *e = strstr(name, "%d");
    const int len = dot ? (int)(dot - name) : (int)strlen(name);
    if (used + 1 < cap && e && e < name + len) /* an expert's: mlp.experts.*.gate_proj */
        snprintf(list + used, cap - used, "%s%.*s*%.*s", used ? ", " : "",
                 (int)(e - name), name, len - (int)(e - name) - 2, e + 2);
    else if (used + 1 < cap)
        snprintf(list + used, cap - used, "%s%.*s", used ? ", " : "", len, name);
}

/* Device bytes of the FP8 projections' scratch at N rows (0 each for a
 * model without FP8 weights): the quantized activation, its scales, and the
 * dequantized fallback's weight and activation where some FP8 GEMM of the
 * model does not run on this GPU (or the fallback is asked for); the
 * weights with quantized activations that take the fallback, and the first
 * one's reason, into the base's fp8_fallback. */
static kvcal_status fp8_scratch_bytes(cuda_backend *r, size_t N, size_t bytes[4])
{
    const kvcal_model_desc *d = r->base.desc;
    size_t k_max = 0, groups = 0, wd = 0;
    int fallback = 0;
    char why[256] = "";
    memset(bytes, 0, 4 * sizeof *bytes);
    r->base.fp8_fallback[0] = '\0';
    for (int w = 0; w < KVCAL_W_COUNT; w++) {
        const kvcal_fp8_linear *f = &d->fp8[w];
        long long rows, cols;
        kvcal_model_weight_shape(d, w, &rows, &cols);
        if (f->w == KVCAL_FP8W_NONE || !rows)
            continue;
        if (d->arch->weights[w].per_expert) { /* backend_moe_fp8_cuda.c's scratch */
            if (f->a != KVCAL_FP8A_NONE && !r->w8a16) {
                if (!why[0])
                    snprintf(why, sizeof why,
                             "kvcal's grouped GEMMs of the experts are bf16");
                note_fp8_fallback(r, w);
            }
            continue;
        }
        /* the shapes it runs at: the whole weight, and QKV's K/V rows alone */
        kvcal_fp8_weight fw = {NULL, NULL, NULL, *f};
        fw.f.a = r->w8a16 ? KVCAL_FP8A_NONE : f->a;
        const int bias = w == KVCAL_W_QKV && kvcal_model_has_weight(d, KVCAL_W_QKV_BIAS);
        const long long kv = 2LL * r->HKV * r->hd;
        const int runs =
            kvcal_fp8_linear_runs(r->gemm, &fw, r->fp8_path, bias, (int)N, (int)cols,
                                  (int)rows) &&
            (w != KVCAL_W_QKV || kvcal_fp8_linear_runs(r->gemm, &fw, r->fp8_path, bias,
                                                       (int)N, (int)cols, (int)kv));
        /* weight-only FP8 (the checkpoint's, or W8A16 before FP8 tensor
         * cores) is served as dequantized bf16 products by the engines too */
        if (!runs && fw.f.a != KVCAL_FP8A_NONE) {
            if (!why[0])
                snprintf(why, sizeof why, "%s", kvcal_last_error());
            note_fp8_fallback(r, w);
        }
        kvcal_clear_error();
        fallback |= !runs;
        k_max = (size_t)cols > k_max ? (size_t)cols : k_max;
        const size_t g =
            f->a == KVCAL_FP8A_GROUP ? ((size_t)cols + f->group - 1) / f->group : 1;
        groups = g > groups ? g : groups;
        wd = !runs && (size_t)(rows * cols) > wd ? (size_t)(rows * cols) : wd;
    }
    if (r->base.fp8_fallback[0]) {
        const size_t used = strlen(r->base.fp8_fallback),
                     cap = sizeof r->base.fp8_fallback;
        snprintf(r->base.fp8_fallback + used, cap - used, " (%s)", why);
    }
    if (!k_max)
        return KVCAL_OK;
    if (!r->w8a16) {
        bytes[0] = N * k_max;
        bytes[1] = N * groups * sizeof(float);
    }
    bytes[2] = wd * sizeof(kvcal_bf16);
    bytes[3] = fallback && !r->w8a16 ? N * k_max * sizeof(kvcal_bf16) : 0;
    return KVCAL_OK;
}

/* The MLP's gate/up projection and SwiGLU: in one Hopper kernel
 * (kvcal_gemm_swiglu_launch, which also leaves out the (N, 2 I) gate/up
 * buffer) where kvcal_cuda_mlp_choose takes it for this GPU and the code the
 * build holds for it; otherwise, or with KVCAL_MLP_UNFUSED, cuBLAS's GEMM
 * then kvcal_swiglu_launch. KVCAL_MLP_FUSED insists on the kernel. The
 * experts' likewise: the Hopper grouped GEMM with SwiGLU fused
 * (kvcal_moe_gemm_sm90_launch, no (capacity, 2 MI) buffer; gpt-oss's biases
 * and clamped SwiGLU in its epilogue too) where the same
 * kernels run, unless KVCAL_MLP_UNFUSED; else kvcal_moe_gemm_launch. */
static kvcal_status choose_mlp(cuda_backend *r, kvcal_mlp_choice mlp, int major,
                               int minor)
{
    char code[32];
    kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), major, minor, code,
                               sizeof code);
    r->moe_sm90 = r->E > 0 && mlp != KVCAL_MLP_UNFUSED &&
                  kvcal_cuda_mlp_fused_runs(major, minor, code);
    return kvcal_cuda_mlp_choose(major, minor, code, r->I, r->D, mlp, &r->mlp_fused);
}

/* Whether the MoE's combine may apply the next layer's input norm
 * (calib/backend_cuda.c's norm_ahead, which decides each layer): a mixture
 * of experts whose combine adds its output to the stream (fold_residual:
 * no residual multiplier), 16-byte rows, bf16 weights throughout, plain
 * RMSNorms (no offset), and a layer after the first that starts with one. */
static int norms_ahead(const cuda_backend *r)
{
    const kvcal_model_desc *d = r->base.desc;
    if (!r->fold_residual || !r->E || d->residual_scale != 1.0f || r->D % 8 ||
        d->norm_offset != 0.0f)
        return 0;
    for (int w = 0; w < KVCAL_W_COUNT; w++)
        if (d->fp8[w].w != KVCAL_FP8W_NONE)
            return 0;
    for (int l = 1; l < d->num_layers; l++)
        if (kvcal_cuda_input_norm(d, l))
            return 1;
    return 0;
}

/* Each layer's input norm weight (kvcal_cuda_input_norm) into norm_ahead_w, loaded
 * once beside the layers (whose weights may not all be on the device). */
static kvcal_status upload_norms_ahead(cuda_backend *r)
{
    const kvcal_model_desc *d = r->base.desc;
    for (int l = 1; l < d->num_layers; l++) {
        const kvcal_op *op = kvcal_cuda_input_norm(d, l);
        kvcal_tensor_view parts[KVCAL_WEIGHT_PARTS_MAX];
        int n = 0;
        if (!op)
            continue;
        kvcal_status st = kvcal_model_weight_parts(r->model, l, op->w, 0, parts, &n);
        if (!st && n != 1)
            st = kvcal_fail(KVCAL_ERR_INVALID_ARG,
                            "cuda runner: layer %d's input norm is %d tensors", l, n);
        if (!st)
            st = kvcal_cuda_loader_upload(r->loader, &parts[0],
                                          r->norm_ahead_w + (size_t)l * r->D, r->stream);
        if (st)
            return st;
    }
    return KVCAL_OK;
}

kvcal_status kvcal_backend_cuda_create(kvcal_model_t *model,
                                       const kvcal_backend_options *opt,
                                       kvcal_backend **out)
{
    const int max_batch = opt->max_batch, max_seq_len = opt->max_seq_len;
    kvcal_status st = KVCAL_OK;
    *out = NULL;
    if (kvcal_cuda_device_count() == 0)
        return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                          "--device cuda: no CUDA device is visible to this process; use "
                          "--device cpu");
    const kvcal_model_desc *d = kvcal_model_describe(model);
    if (max_batch <= 0 || max_seq_len <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "cuda runner: batch %d x seq_len %d: both must be > 0",
                          max_batch, max_seq_len);
    if ((st = kvcal_backend_cuda_check_model(d)) != KVCAL_OK)
        return st;
    cuda_backend *r = calloc(1, sizeof *r);
    if (!r)
        return kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: out of host memory");
    r->base.ops = &kvcal_cuda_ops;
    r->base.desc = d;
    r->model = model;
    r->L = d->num_layers;
    r->D = d->hidden_size;
    r->H = d->num_heads;
    r->HKV = d->num_kv_heads;
    r->hd = d->head_dim;
    r->I = d->intermediate_size;
    r->V = d->vocab_size;
    r->qkv_n = d->mla ? 0 : (r->H + 2 * r->HKV) * r->hd;
    r->kvr = d->kv_lora_rank;
    r->rope = d->qk_rope_head_dim;
    r->nope = d->qk_nope_head_dim;
    r->vh = d->v_head_dim;
    r->qkd = r->nope + r->rope;
    r->rot_dim = d->rot_dim;
    r->interleaved = d->rope_interleaved;
    r->attention_factor = d->rope_attention_factor;
    r->ctx = d->max_seq_len;
    r->eps = d->norm_eps;
    r->max_batch = max_batch;
    r->max_seq_len = max_seq_len;
    r->E = d->num_experts;
    r->K = d->experts_per_tok;
    r->MI = d->moe_intermediate_size;
    r->SI = d->shared_intermediate_size;
    /* the dense MLP's buffers only where the family has one */
    if (!kvcal_model_has_weight(d, KVCAL_W_GATE_UP))
        r->I = 0;
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
            cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
            cudaSuccess)
        major = minor = 0;
    TRY(choose_mlp(r, opt->mlp, major, minor));
    r->w8a16 = !kvcal_cuda_fp8_activations(major, minor);
    r->fp8_ready = KVCAL_W_NONE;
    r->fold_residual = !opt->residual_unfused;
    r->fp8_path = opt->fp8_dequant      ? KVCAL_FP8_GEMM_DEQUANT
                  : opt->fp8_fast_accum ? KVCAL_FP8_GEMM_FAST
                                        : KVCAL_FP8_GEMM_AUTO;
    int has_swiglu = 0, has_other = 0; /* the fused kernel is SwiGLU's alone */
    for (int l = 0; l < d->num_layers; l++) {
        int n_ops = 0;
        const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n_ops);
        for (int i = 0; i < n_ops; i++) {
            has_swiglu |= ops[i].kind == KVCAL_OP_SWIGLU;
            has_other |= ops[i].kind == KVCAL_OP_GEGLU;
        }
    }
    /* the fused kernel reads a bf16 gate/up weight; an FP8 one its FP8
     * counterpart, with fp32 accumulation (cuBLASLt's fast accumulation is
     * vLLM's, kept where asked for) */
    const kvcal_fp8_linear *gu8 = &d->fp8[KVCAL_W_GATE_UP];
    r->mlp_fp8_fused = r->mlp_fused && has_swiglu && !has_other &&
                       (gu8->w == KVCAL_FP8W_TENSOR || gu8->w == KVCAL_FP8W_CHANNEL) &&
                       (gu8->a == KVCAL_FP8A_TOKEN || gu8->a == KVCAL_FP8A_STATIC) &&
                       !r->w8a16 && r->fp8_path == KVCAL_FP8_GEMM_AUTO && r->D % 16 == 0;
    r->mlp_fused &= has_swiglu && !has_other && gu8->w == KVCAL_FP8W_NONE;
    /* the shared expert (a SwiGLU MLP) in it where the experts' GEMMs run
     * on the same kind of kernel */
    r->shared_fused = r->moe_sm90 && r->SI > 0 && kvcal_cuda_mlp_fits(r->SI, r->D) &&
                      d->fp8[KVCAL_W_SHARED_GATE_UP].w == KVCAL_FP8W_NONE;
    layout_layer(&r->lay, d, r->mlp_fused || r->mlp_fp8_fused, r->shared_fused);
    if (!(r->default_names = malloc(sizeof(int64_t) * (size_t)max_batch))) {
        st = kvcal_fail(KVCAL_ERR_NOMEM, "cuda runner: out of host memory");
        goto fail;
    }
    for (int i = 0; i < max_batch; i++)
        r->default_names[i] = i;

    const size_t N = (size_t)max_batch * (size_t)max_seq_len, e = sizeof(kvcal_bf16);
    const size_t LH = (size_t)r->L * (size_t)r->HKV;
    /* the scratch every batch shares; each batch of a chunk has a slot */
    const size_t cap = r->E ? (size_t)kvcal_moe_plan_capacity((int)(N * r->K), r->E) : 0;
    const size_t NK = N * (size_t)r->K;
    const size_t moe_acts =
        !r->E ? 0
              : round_up(N * r->E * e) + round_up(NK * sizeof(int32_t)) +
                    round_up(NK * sizeof(float)) + round_up(cap * sizeof(int32_t)) +
                    round_up(NK * sizeof(int32_t)) +
                    round_up(cap / KVCAL_MOE_TILE_ROWS * sizeof(int32_t)) +
                    round_up(sizeof(int32_t)) +
                    round_up((size_t)kvcal_moe_plan_scratch((int)NK, r->E) *
                             sizeof(int32_t)) +
                    (r->moe_sm90 ? 0 : round_up(cap * 2 * r->MI * e)) +
                    round_up(cap * r->MI * e) + round_up(cap * r->D * e) +
                    (r->shared_fused ? 0 : round_up(N * 2 * r->SI * e)) +
                    round_up(N * r->SI * e) + round_up(N * r->D * e);
    const size_t workspace = (size_t)32 << 20;
    TRY_CUDA(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    TRY(kvcal_gemm_create(workspace, &r->gemm));
    size_t fp8_bytes[4];
    TRY(fp8_scratch_bytes(r, N, fp8_bytes));
    size_t moe8[4];
    kvcal_cuda_moe_fp8_bytes(r, N, cap, moe8);
    const size_t fp8_acts = round_up(fp8_bytes[0]) + round_up(fp8_bytes[1]) +
                            round_up(fp8_bytes[2]) + round_up(fp8_bytes[3]) +
                            round_up(moe8[0]) + round_up(moe8[1]) + round_up(moe8[2]) +
                            round_up(moe8[3]);
    /* MLA's: the query's LoRA, the query, the entry, kv_b_proj's output
     * (with K's RoPE part where it holds K), K, V and the attention's padded
     * output */
    const size_t HQ = (size_t)r->H * r->qkd,
                 KVB = (size_t)r->H *
                       (r->nope + r->vh + (r->lay.kv_b_v_first ? r->rope : 0));
    /* V, or an FP8 kv_b_proj's contiguous latent before it */
    const size_t MV = HQ > (size_t)r->kvr ? HQ : (size_t)r->kvr;
    const size_t mla_acts = !d->mla ? 0
                                    : round_up(N * d->q_lora_rank * e) +
                                          round_up(N * HQ * e) + round_up(N * r->hd * e) +
                                          round_up(N * KVB * e) +
                                          2 * round_up(N * HQ * e) + round_up(N * MV * e);
    /* the attention output's gate; the delta-net's inputs and output */
    const size_t lin_qkvz = (size_t)kvcal_model_dim(d, KVCAL_DIM_LIN_QKVZ),
                 lin_v = (size_t)kvcal_model_dim(d, KVCAL_DIM_LIN_V),
                 lin_ba = 2 * (size_t)d->lin_v_heads;
    kvcal_gated_delta_params lin_dims = {0};
    lin_dims.nk = d->lin_k_heads, lin_dims.dk = d->lin_k_head_dim;
    lin_dims.nv = d->lin_v_heads, lin_dims.dv = d->lin_v_head_dim;
    const size_t lin_work =
        d->linear_layers ? kvcal_gated_delta_work_bytes(&lin_dims, (int64_t)N) : 0;
    const size_t hybrid_acts =
        (d->attn_gate ? round_up(N * r->H * r->hd * e) : 0) +
        (d->linear_layers ? round_up(N * lin_qkvz * e) + round_up(N * lin_ba * e) +
                                round_up(N * lin_v * e) + round_up(lin_work)
                          : 0);
    /* the attention's softmax statistics where cuDNN runs it with sinks */
    const size_t lse =
        r->lay.elems[KVCAL_W_ATTN_SINKS] ? N * (size_t)r->H * sizeof(float) : 0;
    const size_t acts =
        fp8_acts + round_up(N * r->D * e) + round_up(N * r->qkv_n * e) +
        round_up(N * (size_t)att_cols(r) * e) + mla_acts + hybrid_acts + round_up(lse) +
        (r->mlp_fused || r->mlp_fp8_fused ? 0 : round_up(N * 2 * r->I * e)) +
        (r->mlp_fp8_fused ? round_up(N * sizeof(float)) : 0) + round_up(N * r->I * e) +
        round_up(N * sizeof(int32_t)) + moe_acts;
    const size_t stats =
        2 * (round_up(LH * r->hd * sizeof(float)) +
             round_up(LH * KVCAL_HIST_BINS * sizeof(uint64_t))) +
        round_up((size_t)r->L * r->E * sizeof(uint64_t)) +
        round_up((size_t)r->L * r->H * sizeof(float)) +
        round_up(4 * LH * r->hd * sizeof(float)) +
        /* inv_freq, the sliding layers' and the zeros of the NoPE layers */
        3 * round_up((size_t)(r->rot_dim / 2) * sizeof(float)) +
        /* ones: the weight of Llama 4's weightless q/k norm */
        (d->qk_l2_norm ? round_up((size_t)r->hd * e) : 0);
    const size_t embed = round_up((size_t)r->V * r->D * e);
    const int ahead = norms_ahead(r);
    const size_t ahead_bytes = ahead ? round_up((size_t)r->L * r->D * e) : 0;
    const size_t fixed = embed + acts + stats + ahead_bytes + workspace;
    size_t free_b = 0, total_b = 0;
    TRY_CUDA(cudaMemGetInfo(&free_b, &total_b));
    r->budget = opt->max_device_memory;
    /* every layer on the device when it fits beside one batch, else two at a
     * time, each loaded while the one before computes */
    const size_t left = room(r, free_b), one = kvcal_cuda_slot_device_bytes(r);
    r->weight_slots = fixed + (size_t)r->L * r->lay.bytes + one <= left ? r->L
                      : r->L < 2                                        ? r->L
                                                                        : 2;
    r->base.layers_resident = r->weight_slots;
    const size_t need = fixed + (size_t)r->weight_slots * r->lay.bytes;
    if (need + one > left) {
        char t[5][32];
        st = kvcal_fail(
            KVCAL_ERR_DEVICE_MEMORY,
            "--device cuda: needs at least %s (%d layer%s of weights %s, embedding %s, "
            "activations %s for %d x %d tokens) but %s are left%s; use a smaller --batch "
            "or --seq-len%s",
            size_text(t[0], need + one), r->weight_slots, r->weight_slots == 1 ? "" : "s",
            size_text(t[1], (size_t)r->weight_slots * r->lay.bytes),
            size_text(t[2], embed), size_text(t[3], acts + one), max_batch, max_seq_len,
            size_text(t[4], left),
            r->budget ? " under --max-device-memory" : " on the device",
            r->budget ? ", or a larger --max-device-memory" : "");
        goto fail;
    }
    TRY(kvcal_attention_create(opt->attention == KVCAL_ATTENTION_OWN, &r->attn));
    TRY(alloc_slab(&r->slab, need - workspace, "the model and its activations"));
    r->allocated = need;
    TRY_CUDA(cudaMallocHost((void **)&r->host_bmax, 2 * LH * sizeof(float)));
    unsigned char *p = r->slab;
    unsigned char *weights = carve(&p, (size_t)r->weight_slots * r->lay.bytes);
    r->embed = carve(&p, (size_t)r->V * r->D * e);
    r->xn = carve(&p, N * r->D * e);
    r->qkv = carve(&p, N * r->qkv_n * e);
    r->att = carve(&p, N * (size_t)att_cols(r) * e);
    r->lse = lse ? carve(&p, lse) : NULL;
    if (d->mla) {
        r->qa = carve(&p, N * d->q_lora_rank * e);
        r->mq = carve(&p, N * HQ * e);
        r->latent = carve(&p, N * r->hd * e);
        r->kvb = carve(&p, N * KVB * e);
        r->mk = carve(&p, N * HQ * e);
        r->mv = carve(&p, N * MV * e);
        r->att_pad = carve(&p, N * HQ * e);
    }
    if (d->attn_gate)
        r->gate = carve(&p, N * r->H * r->hd * e);
    if (d->linear_layers) {
        r->lin_qkvz = carve(&p, N * lin_qkvz * e);
        r->lin_ba = carve(&p, N * lin_ba * e);
        r->lin_out = carve(&p, N * lin_v * e);
        r->lin_work = carve(&p, lin_work);
    }
    r->gu = r->mlp_fused || r->mlp_fp8_fused ? NULL : carve(&p, N * 2 * r->I * e);
    r->fp8_absmax = r->mlp_fp8_fused ? carve(&p, N * sizeof(float)) : NULL;
    r->act = carve(&p, N * r->I * e);
    r->ids = carve(&p, N * sizeof(int32_t));
    r->fp8s.xq = fp8_bytes[0] ? carve(&p, fp8_bytes[0]) : NULL;
    r->fp8s.xs = fp8_bytes[1] ? carve(&p, fp8_bytes[1]) : NULL;
    r->fp8s.wd = fp8_bytes[2] ? carve(&p, fp8_bytes[2]) : NULL;
    r->fp8s.xd = fp8_bytes[3] ? carve(&p, fp8_bytes[3]) : NULL;
    r->moe_wd = moe8[0] ? carve(&p, moe8[0]) : NULL;
    r->moe_xq = moe8[1] ? carve(&p, moe8[1]) : NULL;
    r->moe_xs = moe8[2] ? carve(&p, moe8[2]) : NULL;
    r->moe_xd = moe8[3] ? carve(&p, moe8[3]) : NULL;
    r->moe_w_layer = -1;
    if (r->E) {
        r->router = carve(&p, N * r->E * e);
        r->route_e = carve(&p, NK * sizeof(int32_t));
        r->route_w = carve(&p, NK * sizeof(float));
        r->plan.sorted = carve(&p, cap * sizeof(int32_t));
        r->plan.slot_of = carve(&p, NK * sizeof(int32_t));
        r->plan.tile_expert = carve(&p, cap / KVCAL_MOE_TILE_ROWS * sizeof(int32_t));
        r->plan.used_tiles = carve(&p, sizeof(int32_t));
        r->plan.scratch =
            carve(&p, (size_t)kvcal_moe_plan_scratch((int)NK, r->E) * sizeof(int32_t));
        r->moe_gu = r->moe_sm90 ? NULL : carve(&p, cap * 2 * r->MI * e);
        r->moe_act = carve(&p, cap * r->MI * e);
        r->moe_y = carve(&p, cap * r->D * e);
        r->shared_gu = r->shared_fused ? NULL : carve(&p, N * 2 * r->SI * e);
        r->shared_act = carve(&p, N * r->SI * e);
        r->shared_y = carve(&p, N * r->D * e);
    }
    for (int kv = 0; kv < 2; kv++) {
        r->absmax[kv] = carve(&p, LH * r->hd * sizeof(float));
        r->hist[kv] = carve(&p, LH * KVCAL_HIST_BINS * sizeof(uint64_t));
    }
    r->expert_tokens = carve(&p, (size_t)r->L * r->E * sizeof(uint64_t));
    r->q_absmax = carve(&p, (size_t)r->L * r->H * sizeof(float));
    r->range = carve(&p, 4 * LH * r->hd * sizeof(float));
    r->inv_freq = carve(&p, (size_t)(r->rot_dim / 2) * sizeof(float));
    if (d->inv_freq_sliding)
        r->inv_freq_sliding = carve(&p, (size_t)(r->rot_dim / 2) * sizeof(float));
    if (d->layer_nope || d->qk_norm_after_rope)
        r->inv_freq_zero = carve(&p, (size_t)(r->rot_dim / 2) * sizeof(float));
    r->norm_ones = d->qk_l2_norm ? carve(&p, (size_t)r->hd * e) : NULL;
    r->norm_ahead_w = ahead ? carve(&p, (size_t)r->L * r->D * e) : NULL;
    r->stats_bytes =
        (size_t)((unsigned char *)r->inv_freq - (unsigned char *)r->absmax[0]);
    TRY_CUDA(cudaMemsetAsync(r->absmax[0], 0, stats, r->stream));
    if (r->norm_ones) /* 0 x 0 + 1 on the zeroed values */
        TRY(kvcal_affine_launch(r->norm_ones, r->norm_ones, r->hd, 0.0f, 1.0f,
                                r->stream));
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    TRY(kvcal_cuda_loader_create(model, &r->lay, weights, r->weight_slots,
                                 opt->load_threads > 0 ? opt->load_threads
                                 : cores > 0           ? (int)cores
                                                       : 1,
                                 opt->load_piece_bytes, &r->loader));
    kvcal_tensor_view embed_view, norm_view, cls_view;
    kvcal_model_head_views(model, &embed_view, &norm_view, &cls_view);
    TRY(kvcal_cuda_loader_upload(r->loader, &embed_view, r->embed, r->stream));
    if (ahead)
        TRY(upload_norms_ahead(r));
    TRY_CUDA(cudaMemcpyAsync(r->inv_freq, d->inv_freq,
                             (size_t)(r->rot_dim / 2) * sizeof(float),
                             cudaMemcpyHostToDevice, r->stream));
    if (r->inv_freq_sliding)
        TRY_CUDA(cudaMemcpyAsync(r->inv_freq_sliding, d->inv_freq_sliding,
                                 (size_t)(r->rot_dim / 2) * sizeof(float),
                                 cudaMemcpyHostToDevice, r->stream));
    if (r->inv_freq_zero)
        TRY_CUDA(cudaMemsetAsync(r->inv_freq_zero, 0,
                                 (size_t)(r->rot_dim / 2) * sizeof(float), r->stream));
    *out = &r->base;
    return KVCAL_OK;
fail:
    kvcal_cuda_ops.destroy(&r->base);
    return st;
}

kvcal_status kvcal_backend_cuda_plan_device(int device, kvcal_cuda_device_plan *plan)
{
    kvcal_status st = KVCAL_OK;
    kvcal_attention_t *attn = NULL;
    struct cudaDeviceProp prop;
    int previous = 0;
    memset(plan, 0, sizeof *plan);
    if (device < 0 || device >= kvcal_cuda_device_count())
        return kvcal_fail(KVCAL_ERR_NO_DEVICE,
                          "CUDA device %d: no such device (%d visible)", device,
                          kvcal_cuda_device_count());
    TRY_CUDA(cudaGetDevice(&previous));
    TRY_CUDA(cudaGetDeviceProperties(&prop, device));
    snprintf(plan->name, sizeof plan->name, "%s", prop.name);
    plan->major = prop.major;
    plan->minor = prop.minor;
    plan->code_kind =
        kvcal_cuda_code_for_device(kvcal_cuda_build_targets(), prop.major, prop.minor,
                                   plan->code, sizeof plan->code);
    plan->mlp_fused = kvcal_cuda_mlp_fused_runs(prop.major, prop.minor, plan->code);
    TRY_CUDA(cudaSetDevice(device));
    st = kvcal_attention_create(0, &attn);
    if (st == KVCAL_OK) {
        plan->cudnn_version = kvcal_attention_cudnn_version(attn);
        snprintf(plan->attention_note, sizeof plan->attention_note, "%s",
                 kvcal_attention_note(attn));
    }
    kvcal_attention_destroy(attn);
    cudaSetDevice(previous);
    return st;
fail:
    return st;
}
