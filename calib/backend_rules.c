/* calib/backend_rules.c: what every backend checks and decides the same way
 * (calib/backend.h): a sample's length, what the cuda backend runs, its MLP. */
#include "calib/backend.h"

#include <string.h>

#include "core/status.h"
#include "kernels/gated_delta_limits.h"
#include "kernels/mla_limits.h"
#include "kernels/moe_limits.h"

int kvcal_cuda_mlp_fused_runs(int major, int minor, const char *code)
{
    return major == 9 && minor == 0 && code &&
           (!strcmp(code, "sm_90a") || !strcmp(code, "compute_90a"));
}

int kvcal_cuda_mlp_fits(int I, int D)
{
    return I % 8 == 0 && D % 8 == 0;
}

kvcal_status kvcal_cuda_mlp_choose(int major, int minor, const char *code, int I, int D,
                                   kvcal_mlp_choice mode, int *fused)
{
    const int runs = kvcal_cuda_mlp_fused_runs(major, minor, code),
              fits = kvcal_cuda_mlp_fits(I, D);
    *fused = 0;
    if (mode == KVCAL_MLP_FUSED && !(runs && fits))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "KVCAL_MLP=fused needs a Hopper GPU (compute capability 9.0) running this "
            "build's sm_90a code, intermediate_size and hidden_size multiples of 8 "
            "(this GPU: %d.%d, running %s; this model: %d and %d); unset KVCAL_MLP",
            major, minor, code && *code ? code : "no code of this build", I, D);
    *fused = mode != KVCAL_MLP_UNFUSED && runs && fits;
    return KVCAL_OK;
}

int kvcal_cuda_fp8_activations(int major, int minor)
{
    return major * 10 + minor >= 89;
}

const char *kvcal_cuda_fp8_plan(int major, int minor)
{
    if (major == 9 && minor == 0)
        return "cuBLASLt FP8 GEMMs of every scheme (per-tensor, per-channel and "
               "per-token "
               "scales, 128 x 128 blocks beside 1 x 128 activation groups), the "
               "activations "
               "quantized as vLLM does";
    if (kvcal_cuda_fp8_activations(major, minor))
        return "cuBLASLt FP8 GEMMs where it runs the scales (per-tensor), the others on "
               "dequantized bf16 weights times activations quantized and dequantized as "
               "vLLM does";
    return "dequantized bf16 weights, activations left unquantized (no FP8 tensor cores "
           "before compute capability 8.9: vLLM serves FP8 checkpoints there as W8A16, "
           "Marlin)";
}

kvcal_status kvcal_backend_cuda_check_model(const kvcal_model_desc *d)
{
    if (d->linear_layers &&
        ((long long)d->lin_k_head_dim * d->lin_v_head_dim > KVCAL_GATED_DELTA_MAX_STATE ||
         d->lin_k_head_dim > KVCAL_GATED_DELTA_MAX_HEAD ||
         d->lin_v_head_dim > KVCAL_GATED_DELTA_MAX_HEAD))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "--device cuda: %s's linear attention with key heads of %d and "
                          "value heads of %d: the CUDA runner takes heads of up to %d "
                          "values and a head's state (their product) of up to %d; use "
                          "--device cpu",
                          d->architecture, d->lin_k_head_dim, d->lin_v_head_dim,
                          KVCAL_GATED_DELTA_MAX_HEAD, KVCAL_GATED_DELTA_MAX_STATE);
    if (d->moe_softmax_bias && d->moe_groups > 1)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "--device cuda: %s's softmax routing with a choice bias in %d groups: the "
            "CUDA runner takes it in one group; use --device cpu",
            d->architecture, d->moe_groups);
    if (d->mla && (d->head_dim > KVCAL_MLA_MAX_ENTRY || d->qk_nope_head_dim % 2 ||
                   d->qk_nope_head_dim + d->qk_rope_head_dim > 256))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "--device cuda: %s with kv_lora_rank %d, qk_nope_head_dim %d and "
            "qk_rope_head_dim %d: the CUDA runner takes an entry of up to %d "
            "values and an even q/k head of up to 256; use --device cpu",
            d->architecture, d->kv_lora_rank, d->qk_nope_head_dim, d->qk_rope_head_dim,
            KVCAL_MLA_MAX_ENTRY);
    if (!d->mla && (d->head_dim > 256 || d->head_dim % 2))
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "--device cuda: head_dim %d: the CUDA runner supports even head_dim "
            "up to 256; use --device cpu",
            d->head_dim);
    if (d->num_experts > 0 &&
        (d->num_experts > KVCAL_MOE_MAX_EXPERTS || d->experts_per_tok > KVCAL_MOE_MAX_TOP_K ||
         d->hidden_size % 8 || d->moe_intermediate_size % 8))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "--device cuda: %s with %d experts, top-%d, hidden_size %d and "
                          "moe_intermediate_size %d: the CUDA runner takes up to %d "
                          "experts, a top-k up to %d and sizes that are multiples of 8; "
                          "use --device cpu",
                          d->architecture, d->num_experts, d->experts_per_tok,
                          d->hidden_size, d->moe_intermediate_size, KVCAL_MOE_MAX_EXPERTS,
                          KVCAL_MOE_MAX_TOP_K);
    return KVCAL_OK;
}

kvcal_status kvcal_backend_check_sample(const char *who, long long id, int length,
                                        int seq_len, int context,
                                        const kvcal_model_desc *d)
{
    const int sparse_topk = d->sparse_topk, from = d->query_scaling_from;
    if (length < 1 || length > seq_len)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "%s: sample %lld has %d tokens, expected 1..%d", who, id,
                          length, seq_len);
    if (length > context)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "sample %lld has %d tokens, more than the model's context of "
                          "%d (max_position_embeddings); use --seq-len %d or less",
                          id, length, context, context);
    if (sparse_topk > 0 && length > sparse_topk)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "sample %lld has %d tokens, more than the %d keys the model's "
                          "sparse attention keeps a query (index_topk); kvcal runs no "
                          "indexer, so only samples within them attend as the model "
                          "does: use --seq-len %d or less",
                          id, length, sparse_topk, sparse_topk);
    if (from > 0 && length > from)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "sample %lld has %d tokens: from position %d on the model scales "
            "its queries (llama_4_scaling_beta), as transformers and vLLM's "
            "loader of Mistral's own params.json do and vLLM's loader of "
            "config.json does not: their K and V differ from there on; use "
            "--seq-len %d or less",
            id, length, from, from);
    return KVCAL_OK;
}
