/* calib/op_profile.c: op times summed by label (see op_profile.h). */
#include "calib/op_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kvcal_op_profile {
    kvcal_op_time t[KVCAL_OP_PROFILE_LABELS];
    int n;
};

/* Short names of the weights an op names (calib/arch.h), for its label. */
static const char *const weight_names[KVCAL_W_COUNT] = {
    [KVCAL_W_ATTN_NORM] = "attn_norm",
    [KVCAL_W_QKV] = "qkv",
    [KVCAL_W_O] = "o",
    [KVCAL_W_Q_NORM] = "q_norm",
    [KVCAL_W_FFN_NORM] = "ffn_norm",
    [KVCAL_W_GATE_UP] = "gate_up",
    [KVCAL_W_DOWN] = "down",
    [KVCAL_W_POST_ATTN_NORM] = "post_attn_norm",
    [KVCAL_W_POST_FFN_NORM] = "post_ffn_norm",
    [KVCAL_W_Q_A] = "q_a",
    [KVCAL_W_Q_B] = "q_b",
    [KVCAL_W_Q_PROJ] = "q_proj",
    [KVCAL_W_KV_A] = "kv_a",
    [KVCAL_W_KV_B] = "kv_b",
    [KVCAL_W_ATTN_SINKS] = "sinks",
    [KVCAL_W_ATTN_GATE] = "attn_gate",
    [KVCAL_W_LIN_QKVZ] = "in_proj_qkvz",
    [KVCAL_W_LIN_BA] = "in_proj_ba",
    [KVCAL_W_LIN_OUT] = "lin_out_proj",
};

static const char *const kind_names[] = {
    [KVCAL_OP_ADD_RMSNORM] = "add_rmsnorm",
    [KVCAL_OP_LINEAR] = "linear",
    [KVCAL_OP_QK_NORM_ROPE] = "qk_norm_rope",
    [KVCAL_OP_ATTENTION] = "attention",
    [KVCAL_OP_SWIGLU] = "swiglu",
    [KVCAL_OP_MOE] = "moe",
    [KVCAL_OP_RMSNORM] = "rmsnorm",
    [KVCAL_OP_GEGLU] = "geglu",
    [KVCAL_OP_MLA_LATENT] = "mla_latent",
    [KVCAL_OP_MLA_EXPAND] = "mla_expand",
    [KVCAL_OP_SIGMOID_GATE] = "sigmoid_gate",
    [KVCAL_OP_GATED_DELTA] = "gated_delta",
};

kvcal_op_profile *kvcal_op_profile_create(void)
{
    return calloc(1, sizeof(kvcal_op_profile));
}

void kvcal_op_profile_destroy(kvcal_op_profile *p)
{
    free(p);
}

/* label's entry, made when new; past the table's room, "other"'s. */
static kvcal_op_time *entry(kvcal_op_profile *p, const char *label)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->t[i].label, label))
            return &p->t[i];
    if (p->n == KVCAL_OP_PROFILE_LABELS - 1 && strcmp(label, "other"))
        return entry(p, "other");
    kvcal_op_time *t = &p->t[p->n++];
    *t = (kvcal_op_time){.ms = 0.0, .calls = 0};
    snprintf(t->label, sizeof t->label, "%s", label);
    return t;
}

const char *kvcal_op_profile_label(kvcal_op_profile *p, const kvcal_op *op)
{
    char label[KVCAL_OP_LABEL_MAX];
    const char *kind = (size_t)op->kind < sizeof kind_names / sizeof kind_names[0]
                           ? kind_names[op->kind]
                           : NULL;
    const char *w = op->kind != KVCAL_OP_MOE && op->w >= 0 && op->w < KVCAL_W_COUNT
                        ? weight_names[op->w]
                        : NULL;
    snprintf(label, sizeof label, "%s%s%s", kind ? kind : "op", w ? " " : "", w ? w : "");
    return entry(p, label)->label;
}

void kvcal_op_profile_add(void *ctx, const char *label, double ms)
{
    kvcal_op_time *t = entry(ctx, label);
    t->ms += ms;
    t->calls++;
}

int kvcal_op_profile_times(const kvcal_op_profile *p, const kvcal_op_time **out)
{
    *out = p->t;
    return p->n;
}
