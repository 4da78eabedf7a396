/* calib/arch.c: the families kvcal runs, and what every family shares. */
#include "calib/arch.h"

#include <stdio.h>
#include <string.h>

#include "calib/model.h"

extern const kvcal_arch kvcal_arch_llama;

static const kvcal_arch *const families[] = {&kvcal_arch_llama};

#define FAMILIES (sizeof families / sizeof families[0])

const kvcal_arch *kvcal_arch_find(const char *architecture)
{
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++)
            if (!strcmp(*a, architecture))
                return families[f];
    return NULL;
}

void kvcal_arch_list(char *buf, size_t n)
{
    size_t total = 0, i = 0, len = 0;
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++)
            total++;
    buf[0] = '\0';
    for (size_t f = 0; f < FAMILIES; f++)
        for (const char *const *a = families[f]->architectures; *a; a++, i++) {
            const char *sep = i == 0 ? "" : i + 1 == total ? " and " : ", ";
            int w = snprintf(buf + len, n - len, "%s%s", sep, *a);
            if (w < 0 || (size_t)w >= n - len)
                return;
            len += (size_t)w;
        }
}

long long kvcal_arch_dim(const kvcal_model_desc *d, kvcal_dim dim)
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
    default:
        return 0;
    }
}

int kvcal_arch_has(const kvcal_arch *a, const kvcal_model_desc *d, kvcal_weight w)
{
    if (w < 0 || w >= KVCAL_W_COUNT || !a->weights[w].parts[0].name)
        return 0;
    switch (a->weights[w].when) {
    case KVCAL_WHEN_QKV_BIAS:
        return d->qkv_bias;
    case KVCAL_WHEN_O_BIAS:
        return d->o_bias;
    case KVCAL_WHEN_QK_NORM:
        return d->qk_norm;
    default:
        return 1;
    }
}

void kvcal_arch_weight_shape(const kvcal_arch *a, const kvcal_model_desc *d,
                             kvcal_weight w, long long *rows, long long *cols)
{
    *rows = *cols = 0;
    if (!kvcal_arch_has(a, d, w))
        return;
    const kvcal_weight_part *p = a->weights[w].parts;
    for (int i = 0; i < KVCAL_WEIGHT_PARTS_MAX && p[i].name; i++)
        *rows += kvcal_arch_dim(d, p[i].rows);
    *cols = kvcal_arch_dim(d, p[0].cols);
}
