/* tests/test_calib_util.c: see tests/test_calib_util.h. */
#include "tests/test_calib_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

kvcal_status kvcal_test_calibrate(kvcal_model_t *m, kvcal_exec_options opt, int n, int len,
                                  int batch, kvcal_stats_t **stats, int *resident)
{
    const kvcal_model_desc *d = kvcal_model_describe(m);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * len);
    int32_t *lengths = malloc(sizeof(int32_t) * (size_t)n);
    kvcal_exec_t *x = NULL;
    kvcal_status st = KVCAL_ERR_NOMEM;
    *stats = NULL;
    if (!ids || !lengths)
        goto done;
    for (int i = 0; i < n * len; i++)
        ids[i] = (i * 37 + i / len * 11 + 5) % d->vocab_size;
    for (int i = 0; i < n; i++)
        lengths[i] = i == n - 1 ? len / 2 + 1 : len;
    opt.backend.max_batch = batch;
    opt.backend.max_seq_len = len;
    if ((st = kvcal_exec_create(m, &opt, &x)))
        goto done;
    if (resident)
        *resident = kvcal_exec_layers_resident(x);
    if ((st = kvcal_stats_create(d->num_layers, d->num_kv_heads, d->head_dim, stats)) ||
        (st = kvcal_stats_set_experts(*stats, d->num_experts)))
        goto done;
    const kvcal_exec_samples s = {.ids = ids, .lengths = lengths, .num_samples = n,
                                  .seq_len = len, .batch = batch};
    st = kvcal_exec_calibrate(x, &s, *stats, 0.9);
done:
    kvcal_exec_destroy(x);
    free(ids);
    free(lengths);
    return st;
}

int kvcal_test_stats_equal(const kvcal_stats_t *a, const kvcal_stats_t *b)
{
    return a->batches == b->batches && a->batch_start_tokens == b->batch_start_tokens &&
           kvcal_stats_slab_bytes(a) == kvcal_stats_slab_bytes(b) &&
           !memcmp(a->slab, b->slab, kvcal_stats_slab_bytes(a)) &&
           a->num_experts == b->num_experts &&
           (!a->num_experts ||
            !memcmp(a->expert_tokens, b->expert_tokens,
                    (size_t)a->num_layers * a->num_experts * sizeof(int64_t)));
}
