/* tests/test_calib_util.h: a calibration through the executor on a fixed
 * pattern of samples, and the comparison of two runs' statistics, shared by
 * the suites that run one model several ways (tests/test_runner.c on the
 * cpu backend, tests/test_cuda_backend.c on the cuda one). */
#ifndef KVCAL_TESTS_TEST_CALIB_UTIL_H
#define KVCAL_TESTS_TEST_CALIB_UTIL_H

#include "calib/dp.h"
#include "calib/executor.h"
#include "calib/model.h"
#include "observers/stats.h"

/* Calibrates n samples of len tokens (ids from a fixed pattern below the
 * vocabulary; the last sample shorter) in batches of `batch` on the
 * executor opt describes (its max_batch and max_seq_len set here) into
 * *stats (counting each expert's tokens for a mixture of experts; caller destroys; NULL
 * when the executor could not be created). Returns kvcal_exec_create's status, the run's
 * on success; *resident (or NULL) gets kvcal_exec_layers_resident. */
kvcal_status kvcal_test_calibrate(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                  int len, int batch, kvcal_stats_t **stats,
                                  int *resident);

/* kvcal_test_calibrate, the statistics also observing the queries (q) and
 * the signed range (range) where asked. */
kvcal_status kvcal_test_calibrate_observing(kvcal_model_t *m, kvcal_exec_options opt,
                                            int n, int len, int batch, int q, int range,
                                            kvcal_stats_t **stats);

/* kvcal_test_calibrate's samples, but only part's (a rank of a
 * data-parallel run, calib/dp.h): their per-batch absmax into bmax
 * (part->num_batches, 2, layers, kv_heads), the moving averages not folded.
 * *stats as there. */
kvcal_status kvcal_test_calibrate_part(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                       int len, int batch, const kvcal_dp_part *part,
                                       float *bmax, kvcal_stats_t **stats);

/* kvcal_test_calibrate, and into moe_ops what the run gave the backend:
 * [0] MoE ops whole, [1] routing only (kvcal_exec_moe_ops, the warm-up's
 * left out). */
kvcal_status kvcal_test_calibrate_moe_ops(kvcal_model_t *m, kvcal_exec_options opt, int n,
                                          int len, int batch, kvcal_stats_t **stats,
                                          long long moe_ops[2]);

/* On every MoE golden model (each family: Qwen3-MoE, Qwen2-MoE's shared
 * expert, Mixtral, GLM-4-MoE, gpt-oss, DeepSeek-V2 / V3), a calibration on
 * `device` gives the statistics of one whose last layer runs whole
 * (kvcal_exec_options.whole_last_layer), the last layer's routing counts
 * included, bit for bit, while its last layer's MoE op of each batch only
 * routed: no expert ran there. CUnit asserts. */
void kvcal_test_last_moe_layer_routes_only(kvcal_device_kind device);

/* On the Qwen3-MoE golden model on `device`, a calibration with the op
 * profile (kvcal_exec_options.profile) gives the statistics of one without,
 * bit for bit, and its profile counts each op once a layer and batch where
 * the op ran (the last layer's up to its cache point, and its router), the
 * steps the cuda backend marks inside the MoE op likewise, and the gaps
 * between the layer-batches. CUnit asserts. */
void kvcal_test_op_profile(kvcal_device_kind device);

/* Writes to `out` a copy of the llama2.c model at `model` with k_proj x
 * factor and q_proj / factor (what tests/make_large_k_copy.py writes):
 * attention unchanged in exact arithmetic, K `factor` times larger.
 * Returns 0 on success. */
int kvcal_test_large_k_copy(const char *model, const char *out, float factor);

/* Every statistic of a and b (absmax, histograms, tokens, the per-head and
 * per-layer moving averages, the batch count, the routing counts) bit for
 * bit. */
int kvcal_test_stats_equal(const kvcal_stats_t *a, const kvcal_stats_t *b);

/* The golden FP8 checkpoints of every scheme kvcal reads
 * (tests/make_fp8_checkpoints.py), KVCAL_TEST_FP8_FIXTURES of them: the
 * cpu backend holds them to their float64 reference, the cuda one to its
 * bf16 bounds. */
#define KVCAL_TEST_FP8_FIXTURES 17
extern const char *const kvcal_test_fp8_fixtures[KVCAL_TEST_FP8_FIXTURES];

/* The FP8 checkpoints of hybrid models (tests/make_fp8_checkpoints.py's
 * HYBRID_FIXTURES), their projections' rows regrouped as kvcal reads them. */
#define KVCAL_TEST_FP8_HYBRID_FIXTURES 3
extern const char *const kvcal_test_fp8_hybrid_fixtures[KVCAL_TEST_FP8_HYBRID_FIXTURES];

#endif
