/* tests/test_dp_cuda.c: NCCL's group (calib/dp_cuda.c) on one GPU, a group
 * of one rank: every operation stages through the device and back, so the
 * reduction must leave the statistics' bytes as they were, the gather copy
 * them, min_int and bcast return what they were given; and a whole run's
 * reduction (kvcal_dp_reduce_run) equals one process's. Needs a GPU and
 * NCCL in the build (two ranks need two GPUs: bench/dp_scaling.py). */
#include <stdlib.h>
#include <string.h>

#include "calib/dp.h"
#include "calib/model.h"
#include "core/status.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

/* A group of one rank over this process's GPU; NULL without NCCL. */
static kvcal_dp_group *solo(void)
{
    unsigned char id[KVCAL_DP_NCCL_ID_BYTES];
    kvcal_dp_group *g = NULL;
    if (!kvcal_dp_have_nccl())
        return NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_dp_select_gpu(0, 1), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_dp_nccl_make_id(id), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_dp_nccl_join(0, 1, id, &g), KVCAL_OK);
    return g;
}

static void nccl_group_of_one_rank_round_trips_every_operation(void)
{
    kvcal_dp_group *g = solo();
    if (!g) {
        CU_ASSERT(!kvcal_dp_have_nccl()); /* a CUDA build without NCCL */
        return;
    }
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(3, 2, 7, &s), KVCAL_OK);
    const size_t bytes = kvcal_stats_slab_bytes(s);
    unsigned char *slab = s->slab, *copy = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        slab[i] = (unsigned char)(i * 131 + 7);
    /* absmax finite and non-negative (a float MAX of itself keeps any bits
     * but NaN's) */
    for (size_t i = 0; i < 2 * 3 * 2 * 7; i++)
        s->absmax[0][i] = (float)i * 0.37f;
    memcpy(copy, slab, bytes);
    CU_ASSERT_EQUAL(g->ops->reduce_stats(g, s), KVCAL_OK);
    CU_ASSERT(!memcmp(copy, slab, bytes));
    unsigned char *got = malloc(bytes);
    const size_t each[1] = {bytes};
    CU_ASSERT_EQUAL(g->ops->gather(g, copy, each, got), KVCAL_OK);
    CU_ASSERT(!memcmp(copy, got, bytes));
    int min = 0;
    CU_ASSERT_EQUAL(g->ops->min_int(g, 41, &min), KVCAL_OK);
    CU_ASSERT_EQUAL(min, 41);
    char text[100] = "one rank";
    CU_ASSERT_EQUAL(g->ops->bcast(g, text, sizeof text, 0), KVCAL_OK);
    CU_ASSERT_STRING_EQUAL(text, "one rank");
    int failed = -1;
    CU_ASSERT_EQUAL(kvcal_dp_agree(g, KVCAL_OK, 0, &failed), KVCAL_OK);
    /* one rank a GPU: more ranks on a host than GPUs are refused */
    CU_ASSERT_EQUAL(kvcal_dp_select_gpu(0, 4096), KVCAL_ERR_NO_DEVICE);
    CU_ASSERT(kvcal_test_error_has("4096 ranks on this host but"));
    CU_ASSERT_EQUAL(kvcal_dp_select_gpu(0, 1), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_dp_agree(g, kvcal_fail(KVCAL_ERR_NOMEM, "no room"), 0, &failed),
                    KVCAL_ERR_NOMEM);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(kvcal_test_error_has("rank 0 of 1: no room"));
    free(copy);
    free(got);
    kvcal_stats_destroy(s);
    kvcal_dp_group_destroy(g);
}

/* One rank's run on the cuda backend, its batch maxima kept apart and
 * folded by kvcal_dp_reduce_run over the NCCL group, equals the plain run
 * bit for bit, on stories260K and a golden model. */
static void nccl_group_run_of_one_rank_equals_one_process(void)
{
    static const char *const models[] = {
        "models/stories260K/stories260K.bin",
        "tests/fixtures/golden/qwen3_gqa_hd80_qknorm_bf16"};
    kvcal_dp_group *g = solo();
    if (!g)
        return;
    for (size_t mi = 0; mi < 2; mi++) {
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(models[mi], &m), KVCAL_OK);
        const kvcal_model_desc *d = kvcal_model_describe(m);
        kvcal_exec_options o;
        memset(&o, 0, sizeof o);
        o.device = KVCAL_DEVICE_CUDA;
        kvcal_stats_t *one = NULL, *dp = NULL;
        const kvcal_dp_part p = kvcal_dp_layout(10, 3, 0, 1);
        float *bmax = calloc((size_t)p.num_batches * 2 * d->num_layers * d->num_kv_heads,
                             sizeof(float));
        CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 10, 24, 3, &one, NULL),
                              KVCAL_OK);
        CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate_part(m, o, 10, 24, 3, &p, bmax, &dp),
                              KVCAL_OK);
        CU_ASSERT_EQUAL(kvcal_dp_reduce_run(g, &p, bmax, dp, 0.9), KVCAL_OK);
        CU_ASSERT(kvcal_test_stats_equal(one, dp));
        kvcal_stats_destroy(one);
        kvcal_stats_destroy(dp);
        free(bmax);
        kvcal_model_close(m);
    }
    kvcal_dp_group_destroy(g);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(nccl_group_of_one_rank_round_trips_every_operation),
    KVCAL_TEST(nccl_group_run_of_one_rank_equals_one_process), CU_TEST_INFO_NULL};
KVCAL_SUITE(dp_nccl, KVCAL_NEEDS_GPU, tests)
