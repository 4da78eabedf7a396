/* calib/model_desc.c: the questions a model's description answers alone
 * (calib/model_desc.h). */
#include "calib/model_desc.h"

#include <stdio.h>
#include <string.h>

#include "core/status.h"
#include "kernels/moe_limits.h"

void kvcal_model_top_name(char *out, size_t n, const kvcal_model_desc *d,
                          const char *name)
{
    static const char model[] = "model.";
    if (d->lm_prefix[0] && !strncmp(name, model, sizeof model - 1))
        snprintf(out, n, "%s%s", d->lm_prefix, name + sizeof model - 1);
    else
        snprintf(out, n, "%s%s", d->head_prefix, name);
}

void kvcal_model_tensor_name(char *out, size_t n, const kvcal_model_desc *d, int layer,
                             const char *suffix, int expert)
{
    char layer_name[64];
    snprintf(layer_name, sizeof layer_name, d->arch->layer_prefix, layer);
    kvcal_model_top_name(out, n, d, layer_name);
    const size_t len = strlen(out);
    if (strstr(suffix, "%d"))
        snprintf(out + len, n - len, suffix, expert);
    else
        snprintf(out + len, n - len, "%s", suffix);
}

// --- the weights of a family ---------------------------------------------

long long kvcal_model_dim(const kvcal_model_desc *d, kvcal_dim dim)
{
    switch (dim) {
    case KVCAL_DIM_HIDDEN:
        return d->hidden_size;
    case KVCAL_DIM_Q:
        return (long long)d->num_heads * d->head_dim;
    case KVCAL_DIM_KV:
        return (long long)d->num_kv_heads * d->head_dim;
    case KVCAL_DIM_INTER:
        return d->intermediate_size;
    case KVCAL_DIM_HEAD:
        return d->head_dim;
    case KVCAL_DIM_EXPERTS:
        return d->num_experts;
    case KVCAL_DIM_MOE_INTER:
        return d->moe_intermediate_size;
    case KVCAL_DIM_SHARED_INTER:
        return d->shared_intermediate_size;
    case KVCAL_DIM_ONE:
        return 1;
    case KVCAL_DIM_QKV:
        return (long long)(d->num_heads + 2 * d->num_kv_heads) * d->head_dim;
    case KVCAL_DIM_2INTER:
        return 2LL * d->intermediate_size;
    case KVCAL_DIM_Q_LORA:
        return d->q_lora_rank;
    case KVCAL_DIM_KV_LORA:
        return d->kv_lora_rank;
    case KVCAL_DIM_KV_A:
        return (long long)d->kv_lora_rank + d->qk_rope_head_dim;
    case KVCAL_DIM_MLA_Q:
        return (long long)d->num_heads * (d->qk_nope_head_dim + d->qk_rope_head_dim);
    case KVCAL_DIM_KV_B:
        return (long long)d->num_heads * (d->qk_nope_head_dim + d->v_head_dim);
    case KVCAL_DIM_MLA_O:
        return (long long)d->num_heads * d->v_head_dim;
    case KVCAL_DIM_HEADS:
        return d->num_heads;
    case KVCAL_DIM_2MOE_INTER:
        return 2LL * d->moe_intermediate_size;
    case KVCAL_DIM_LIN_QKV:
        return 2LL * d->lin_k_heads * d->lin_k_head_dim +
               (long long)d->lin_v_heads * d->lin_v_head_dim;
    case KVCAL_DIM_LIN_QKVZ:
        return 2LL * d->lin_k_heads * d->lin_k_head_dim +
               2LL * d->lin_v_heads * d->lin_v_head_dim;
    case KVCAL_DIM_LIN_V:
        return (long long)d->lin_v_heads * d->lin_v_head_dim;
    case KVCAL_DIM_LIN_2HEADS:
        return 2LL * d->lin_v_heads;
    case KVCAL_DIM_LIN_HEADS:
        return d->lin_v_heads;
    case KVCAL_DIM_LIN_V_HEAD:
        return d->lin_v_head_dim;
    case KVCAL_DIM_LIN_CONV:
        return d->lin_conv;
    default:
        return 0;
    }
}

/* Whether condition `when` holds in some layer of model d. */
static int holds(const kvcal_model_desc *d, kvcal_when when)
{
    switch (when) {
    case KVCAL_WHEN_QKV_BIAS:
        return d->qkv_bias;
    case KVCAL_WHEN_O_BIAS:
        return d->o_bias;
    case KVCAL_WHEN_QK_NORM:
        return d->qk_norm;
    case KVCAL_WHEN_SHARED_EXPERT:
        return d->shared_intermediate_size > 0;
    case KVCAL_WHEN_DENSE_LAYERS:
        return d->dense_layers > 0;
    case KVCAL_WHEN_MOE_LAYERS:
        return d->dense_layers < d->num_layers;
    case KVCAL_WHEN_Q_LORA:
        return d->q_lora_rank > 0;
    case KVCAL_WHEN_NO_Q_LORA:
        return d->q_lora_rank == 0;
    case KVCAL_WHEN_ATTENTION_LAYERS:
        return d->linear_layers < d->num_layers;
    case KVCAL_WHEN_LINEAR_LAYERS:
        return d->linear_layers > 0;
    default:
        return 1;
    }
}

/* Whether condition `when` holds in layer l of model d. */
static int holds_in_layer(const kvcal_model_desc *d, int layer, kvcal_when when)
{
    if (!holds(d, when))
        return 0;
    switch (when) {
    case KVCAL_WHEN_DENSE_LAYERS:
        return d->layer_dense[layer];
    case KVCAL_WHEN_MOE_LAYERS:
    case KVCAL_WHEN_SHARED_EXPERT:
        return !d->layer_dense[layer];
    case KVCAL_WHEN_ATTENTION_LAYERS:
        return !d->layer_linear[layer];
    case KVCAL_WHEN_LINEAR_LAYERS:
        return d->layer_linear[layer];
    default:
        return 1;
    }
}

int kvcal_model_has_weight(const kvcal_model_desc *d, kvcal_weight w)
{
    const kvcal_arch *a = d->arch;
    if (w < 0 || w >= KVCAL_W_COUNT || !a->weights[w].parts[0].name)
        return 0;
    return holds(d, a->weights[w].when);
}

int kvcal_model_layer_has_weight(const kvcal_model_desc *d, int layer, kvcal_weight w)
{
    return kvcal_model_has_weight(d, w) &&
           holds_in_layer(d, layer, d->arch->weights[w].when);
}

int kvcal_model_op_runs(const kvcal_model_desc *d, int layer, const kvcal_op *op)
{
    return op->w == KVCAL_W_NONE || op->kind == KVCAL_OP_QK_NORM_ROPE ||
           kvcal_model_layer_has_weight(d, layer, op->w);
}

kvcal_status kvcal_model_check_routed_experts(const kvcal_model_desc *d,
                                              const char *architecture)
{
    const int E = d->num_experts, G = d->moe_groups, TG = d->moe_topk_groups;
    if (E < 1 || d->experts_per_tok < 1 || d->experts_per_tok > E ||
        d->moe_intermediate_size < 1 || d->shared_intermediate_size < 1)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s needs n_routed_experts >= 1, num_experts_per_tok "
            "in 1..n_routed_experts, moe_intermediate_size and "
            "n_shared_experts >= 1 (found %d, %d, %d, shared expert %d); fix "
            "the config",
            architecture, E, d->experts_per_tok, d->moe_intermediate_size,
            d->shared_intermediate_size);
    if (E % G || TG > G || d->experts_per_tok > TG * (E / G))
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s with n_group %d, topk_group %d: n_group must "
            "divide n_routed_experts (%d), topk_group be at most n_group and "
            "the %d chosen experts fit in topk_group groups; fix the config",
            architecture, G, TG, E, d->experts_per_tok);
    if (!d->moe_group_max && E / G < 2)
        return kvcal_fail(
            KVCAL_ERR_FORMAT,
            "config.json: %s with n_group %d: each group holds %d expert, but "
            "a group's score here is the sum of its two best experts "
            "(transformers' router and vLLM's grouped_topk take the top 2 "
            "of each group and fail on fewer); fix n_group",
            architecture, G, E / G);
    if (G > 1 && (G > KVCAL_MOE_MAX_GROUPS || E > KVCAL_MOE_MAX_EXPERTS))
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "config.json: %s with %d experts in %d groups: kvcal's grouped "
                          "routing takes up to %d experts in up to %d groups",
                          architecture, E, G, KVCAL_MOE_MAX_EXPERTS,
                          KVCAL_MOE_MAX_GROUPS);
    return KVCAL_OK;
}

void kvcal_model_attention_dims(const kvcal_model_desc *d, int *kv_heads, int *qk_dim,
                                int *v_dim)
{
    *kv_heads = d->mla ? d->num_heads : d->num_kv_heads;
    *qk_dim = d->mla ? d->qk_nope_head_dim + d->qk_rope_head_dim : d->head_dim;
    *v_dim = d->mla ? d->v_head_dim : d->head_dim;
}

int kvcal_model_layer_caches(const kvcal_model_desc *d, int layer)
{
    return !d->layer_linear || !d->layer_linear[layer];
}

const kvcal_op *kvcal_model_layer_ops(const kvcal_model_desc *d, int layer, int *n)
{
    const kvcal_arch *a = d->arch;
    if (a->linear_layer && d->layer_linear && d->layer_linear[layer]) {
        *n = a->linear_layer_ops;
        return a->linear_layer;
    }
    const int dense = a->dense_layer && d->layer_dense && d->layer_dense[layer];
    *n = dense ? a->dense_layer_ops : a->layer_ops;
    return dense ? a->dense_layer : a->layer;
}

int kvcal_model_next_layer_kind(const kvcal_model_desc *d, int layer)
{
    for (int l = layer + 1; l < d->num_layers; l++) {
        int n = 0, seen = 0;
        const kvcal_op *ops = kvcal_model_layer_ops(d, l, &n);
        for (int p = 0; p <= layer && !seen; p++)
            seen = kvcal_model_layer_ops(d, p, &n) == ops;
        if (!seen)
            return l;
    }
    return -1;
}

const float *kvcal_model_layer_inv_freq(const kvcal_model_desc *d, int layer)
{
    return d->inv_freq_sliding && d->layer_window[layer] > 0 ? d->inv_freq_sliding
                                                             : d->inv_freq;
}

float kvcal_model_layer_rope_factor(const kvcal_model_desc *d, int layer)
{
    return kvcal_model_layer_inv_freq(d, layer) == d->inv_freq_sliding &&
                   d->inv_freq_sliding
               ? 1.0f
               : d->rope_attention_factor;
}

int kvcal_model_layer_rope(const kvcal_model_desc *d, int layer)
{
    return !d->layer_nope || !d->layer_nope[layer];
}

int kvcal_model_layer_chunk(const kvcal_model_desc *d, int layer)
{
    return kvcal_model_layer_rope(d, layer) ? d->attention_chunk : 0;
}

int kvcal_model_weight_copies(const kvcal_model_desc *d, kvcal_weight w)
{
    if (!kvcal_model_has_weight(d, w))
        return 0;
    return d->arch->weights[w].per_expert ? d->num_experts : 1;
}

int64_t kvcal_model_fp8_scales(const kvcal_model_desc *d, kvcal_weight w)
{
    long long rows, cols;
    kvcal_model_weight_shape(d, w, &rows, &cols);
    const int copies = kvcal_model_weight_copies(d, w);
    return copies ? copies * kvcal_fp8_weight_scales(&d->fp8[w], rows / copies, cols) : 0;
}

void kvcal_model_weight_shape(const kvcal_model_desc *d, kvcal_weight w, long long *rows,
                              long long *cols)
{
    const kvcal_arch *a = d->arch;
    *rows = *cols = 0;
    if (!kvcal_model_has_weight(d, w))
        return;
    const kvcal_weight_part *p = a->weights[w].parts;
    for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++)
        *rows += kvcal_model_dim(d, p[i].rows);
    *rows *= kvcal_model_weight_copies(d, w);
    *cols = kvcal_model_dim(d, p[0].cols);
}

void kvcal_model_part_groups(const kvcal_model_desc *d, unsigned layout,
                             kvcal_tensor_view *v)
{
    v->groups = v->segs = 0;
    v->first = 0;
    if (layout & (KVCAL_PART_HEAD_FIRST | KVCAL_PART_HEAD_SECOND)) {
        v->groups = d->num_heads, v->segs = 2;
        v->seg[0] = v->seg[1] = d->head_dim;
        v->first =
            layout & KVCAL_PART_HEAD_SECOND ? (int64_t)d->num_heads * d->head_dim : 0;
    } else if (layout & KVCAL_PART_GDN_GROUPED) {
        /* per key head: q, k (a head each), then its value heads' v and z,
         * or (2 rows a value head: in_proj_ba) their b and a */
        const int64_t r = d->lin_v_heads / d->lin_k_heads;
        const int ba = v->rows == 2LL * d->lin_v_heads;
        v->groups = d->lin_k_heads;
        v->segs = ba ? 2 : 4;
        v->seg[0] = ba ? r : d->lin_k_head_dim;
        v->seg[1] = ba ? r : d->lin_k_head_dim;
        v->seg[2] = v->seg[3] = r * d->lin_v_head_dim;
    }
}

int64_t kvcal_model_part_stored_rows(unsigned layout, int64_t rows)
{
    return layout & (KVCAL_PART_HEAD_FIRST | KVCAL_PART_HEAD_SECOND) ? 2 * rows : rows;
}

int64_t kvcal_tensor_view_row(const kvcal_tensor_view *v, int64_t r)
{
    if (!v->groups)
        return r;
    int64_t at = r + v->first, group_rows = 0, before = 0;
    for (int s = 0; s < v->segs; s++)
        group_rows += v->seg[s];
    for (int s = 0; s < v->segs; s++) {
        const int64_t all = v->seg[s] * v->groups;
        if (at < all)
            return at / v->seg[s] * group_rows + before + at % v->seg[s];
        at -= all;
        before += v->seg[s];
    }
    return r; /* past the tensor: not reached for a checked part */
}
