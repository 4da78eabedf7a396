/* tests/test_calib_util.c: see tests/test_calib_util.h. */
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* All of them: part NULL for the whole run; prof (KVCAL_OP_PROFILE_LABELS)
 * and *n_prof the op profile's times when opt asks for it (or NULL). */
static kvcal_status calibrate(kvcal_model_t *m, kvcal_exec_options opt, int n, int len,
                              int batch, const kvcal_dp_part *part, float *bmax,
                              int extras, kvcal_stats_t **stats, int *resident,
                              long long moe_ops[2], kvcal_op_time *prof, int *n_prof)
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
        (st = kvcal_stats_set_experts(*stats, d->num_experts)) ||
        (st = kvcal_stats_set_q_heads(*stats, extras & 1 ? d->num_heads : 0)) ||
        (st = kvcal_stats_set_range(*stats, extras & 2)))
        goto done;
    kvcal_exec_samples s = {
        .ids = ids, .lengths = lengths, .num_samples = n, .seq_len = len, .batch = batch};
    if (part)
        kvcal_dp_narrow(part, bmax, &s);
    long long before[2] = {0, 0};
    kvcal_exec_moe_ops(x, &before[0], &before[1]);
    if (s.num_samples)
        st = kvcal_exec_calibrate(x, &s, *stats, 0.9);
    if (moe_ops) {
        kvcal_exec_moe_ops(x, &moe_ops[0], &moe_ops[1]);
        moe_ops[0] -= before[0], moe_ops[1] -= before[1];
    }
    if (prof) {
        const kvcal_op_time *t = NULL;
        *n_prof = kvcal_exec_op_profile(x, &t);
        memcpy(prof, t, (size_t)*n_prof * sizeof *t);
    }
done:
    kvcal_exec_destroy(x);
    free(ids);
    free(lengths);
    return st;
}

kvcal_status kvcal_test_calibrate(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                  int len, int batch, kvcal_stats_t **stats,
                                  int *resident)
{
    return calibrate(m, opt, n, len, batch, NULL, NULL, 0, stats, resident, NULL, NULL,
                     NULL);
}

kvcal_status kvcal_test_calibrate_observing(kvcal_model_t *m, kvcal_exec_options opt,
                                            int n, int len, int batch, int q, int range,
                                            kvcal_stats_t **stats)
{
    return calibrate(m, opt, n, len, batch, NULL, NULL, (q ? 1 : 0) | (range ? 2 : 0),
                     stats, NULL, NULL, NULL, NULL);
}

kvcal_status kvcal_test_calibrate_part(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                       int len, int batch, const kvcal_dp_part *part,
                                       float *bmax, kvcal_stats_t **stats)
{
    return calibrate(m, opt, n, len, batch, part, bmax, 0, stats, NULL, NULL, NULL, NULL);
}

kvcal_status kvcal_test_calibrate_moe_ops(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                          int len, int batch, kvcal_stats_t **stats,
                                          long long moe_ops[2])
{
    return calibrate(m, opt, n, len, batch, NULL, NULL, 0, stats, NULL, moe_ops, NULL,
                     NULL);
}

/* The sum of label's times in t (n of them), its calls into *calls; -1 ms
 * when no interval had that label. */
static double op_ms(const kvcal_op_time *t, int n, const char *label, long long *calls)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].label, label)) {
            *calls = t[i].calls;
            return t[i].ms;
        }
    *calls = 0;
    return -1.0;
}

void kvcal_test_op_profile(kvcal_device_kind device)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(
        kvcal_model_open("tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16", &m),
        KVCAL_OK);
    const long long L = kvcal_model_describe(m)->num_layers, B = 3;
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    o.device = device;
    kvcal_stats_t *s[2] = {NULL, NULL};
    kvcal_op_time t[KVCAL_OP_PROFILE_LABELS];
    int n = 0;
    /* 5 samples of up to 24 tokens in batches of 2: 3 batches, unprofiled
     * then profiled */
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 5, 24, 2, &s[0], NULL), KVCAL_OK);
    o.profile = 1;
    CU_ASSERT_EQUAL_FATAL(
        calibrate(m, o, 5, 24, 2, NULL, NULL, 0, &s[1], NULL, NULL, t, &n), KVCAL_OK);
    CU_ASSERT(kvcal_test_stats_equal(s[0], s[1]));
    CU_ASSERT_FATAL(n > 0);
    double all = 0.0;
    for (int i = 0; i < n; i++) {
        CU_ASSERT(t[i].ms >= 0.0 && t[i].calls > 0);
        all += t[i].ms;
        printf("%s%s %.3f ms / %lld", i ? ", " : "(", t[i].label, t[i].ms, t[i].calls);
    }
    printf(") ");
    CU_ASSERT(all > 0.0);
    /* every op on every batch of every layer: the last layer runs up to its
     * MoE op for the routing counts, and that op routes only: the experts'
     * steps run in the layers before it */
    static const struct {
        const char *label;
        int last_layer; /* runs in the last layer too */
        int cuda_only;  /* a step the cuda backend marks inside the MoE op */
    } want[] = {
        {"add_rmsnorm attn_norm", 1, 0},
        {"linear qkv", 1, 0},
        {"qk_norm_rope q_norm", 1, 0},
        {"attention", 1, 0},
        {"linear o", 1, 0},
        {"add_rmsnorm ffn_norm", 1, 0},
        {"moe", 1, 0},
        {"moe experts gate_up", 0, 1},
        {"moe experts down", 0, 1},
        {"moe combine", 0, 1},
    };
    /* and between the L x B layer-batches of the one chunk, L x B - 1 gaps */
    long long gaps = 0;
    CU_ASSERT(op_ms(t, n, KVCAL_OP_PROFILE_GAPS, &gaps) >= 0.0);
    CU_ASSERT_EQUAL(gaps, B * L - 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (want[i].cuda_only && device != KVCAL_DEVICE_CUDA)
            continue;
        long long calls = 0;
        const double ms = op_ms(t, n, want[i].label, &calls);
        CU_ASSERT(ms >= 0.0);
        CU_ASSERT_EQUAL(calls, B * (want[i].last_layer ? L : L - 1));
        if (ms < 0.0 || calls != B * (want[i].last_layer ? L : L - 1))
            printf("\n    %s: %lld calls, %.3f ms\n", want[i].label, calls, ms);
    }
    kvcal_stats_destroy(s[0]);
    kvcal_stats_destroy(s[1]);
    kvcal_model_close(m);
}

void kvcal_test_last_moe_layer_routes_only(kvcal_device_kind device)
{
    static const char *const names[] = {"qwen3_moe_e8_top3_norm_bf16",
                                        "qwen2_moe_shared_e6_top2_bf16",
                                        "mixtral_e4_top2_swa16_bf16",
                                        "glm4_moe_dense1_sigmoid_e8_top3_bf16",
                                        "qwen3_moe_dense_layers_e4_top2_bf16",
                                        "gpt_oss_sinks_swa8_e8_top3_bf16",
                                        "deepseek_v2_mla_grouped_softmax_bf16",
                                        "deepseek_v3_mla_qlora_grouped_sigmoid_bf16",
                                        "glm4_moe_lite_mla_qlora_sigmoid_bf16",
                                        "glm_moe_dsa_topk64_sigmoid_bf16"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/fixtures/golden/%s", names[i]);
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(path, &m), KVCAL_OK);
        const int L = kvcal_model_describe(m)->num_layers;
        kvcal_exec_options o;
        memset(&o, 0, sizeof o);
        o.device = device;
        kvcal_stats_t *s[2] = {NULL, NULL};
        long long ops[2][2]; /* [whole_last_layer][whole, routed] */
        for (int whole = 0; whole < 2; whole++) {
            o.whole_last_layer = whole;
            /* 5 samples of up to 24 tokens in batches of 2: 3 batches */
            CU_ASSERT_EQUAL_FATAL(
                kvcal_test_calibrate_moe_ops(m, o, 5, 24, 2, &s[whole], ops[whole]),
                KVCAL_OK);
        }
        printf("(%s: MoE ops whole %lld + routed %lld, last layer whole %lld + %lld) ",
               names[i], ops[0][0], ops[0][1], ops[1][0], ops[1][1]);
        CU_ASSERT(kvcal_test_stats_equal(s[0], s[1]));
        CU_ASSERT_EQUAL(ops[0][1], 3);
        CU_ASSERT_EQUAL(ops[1][1], 0);
        CU_ASSERT_EQUAL(ops[1][0], ops[0][0] + 3);
        int64_t last = 0;
        for (int e = 0; e < s[0]->num_experts; e++)
            last += s[0]->expert_tokens[(int64_t)(L - 1) * s[0]->num_experts + e];
        CU_ASSERT(last > 0);
        kvcal_stats_destroy(s[0]);
        kvcal_stats_destroy(s[1]);
        kvcal_model_close(m);
    }
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

int kvcal_test_large_k_copy(const char *model, const char *out, float factor)
{
    size_t len = 0;
    char *raw = kvcal_test_read_file(model, &len);
    int32_t h[7];
    if (!raw || len < sizeof h) {
        free(raw);
        return -1;
    }
    memcpy(h, raw, sizeof h);
    const int64_t dim = h[0], layers = h[2], heads = h[3], kv_heads = h[4];
    const int64_t vocab = h[5] < 0 ? -h[5] : h[5], hs = dim / heads;
    float *w = (float *)(raw + sizeof h);
    const int64_t off = vocab * dim + layers * dim, nq = layers * heads * hs * dim;
    const int64_t nk = layers * kv_heads * hs * dim;
    if ((int64_t)sizeof h + (off + nq + nk) * 4 > (int64_t)len) {
        free(raw);
        return -1;
    }
    for (int64_t i = 0; i < nq; i++)
        w[off + i] /= factor;
    for (int64_t i = 0; i < nk; i++)
        w[off + nq + i] *= factor;
    const int rc = kvcal_test_write_file(out, raw, len);
    free(raw);
    return rc;
}

const char *const kvcal_test_fp8_fixtures[KVCAL_TEST_FP8_FIXTURES] = {
    "fp8_llama_ct_tensor_static",       "fp8_qwen3_ct_channel_token",
    "fp8_qwen3_ct_block_group",         "fp8_qwen3_fp8_block",
    "fp8_llama_fp8_tensor_dynamic",     "fp8_llama_modelopt_tensor_static",
    "fp8_llama_modelopt_pb_wo",         "fp8_qwen3_moe_fp8_block",
    "fp8_qwen3_moe_ct_channel_token",   "fp8_qwen2_moe_ct_tensor_static",
    "fp8_glm4_moe_ct_block_group",      "fp8_mixtral_modelopt_tensor_static",
    "fp8_deepseek_v3_fp8_block",        "fp8_deepseek_v3_ct_tensor_static",
    "fp8_deepseek_v2_ct_channel_token", "fp8_glm4_moe_lite_fp8_block",
    "fp8_deepseek_v32_fp8_block"};

const char *const kvcal_test_fp8_hybrid_fixtures[KVCAL_TEST_FP8_HYBRID_FIXTURES] = {
    "fp8_qwen3_next_fp8_block", "fp8_qwen3_5_moe_ct_channel_token",
    "fp8_qwen3_5_moe_ct_tensor_static"};
