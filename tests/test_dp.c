/* tests/test_dp.c: data-parallel runs (calib/dp.h, cli/cmd_ranks.c). Suite
 * dp: the layout, and the reduction on rank 0 against a run of one process
 * with the ranks simulated in this process. Suite dp_mpi: kvcal calibrate
 * under mpirun -np N (oversubscribed; --allow-run-as-root as root) against
 * the run of one process byte for byte, and failing ranks. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/dp.h"
#include "calib/executor.h"
#include "calib/model.h"
#include "io/checkpoint/safetensors.h"
#include "tests/test_calib_util.h"
#include "tests/test_util.h"

/* Lines of the last command's stderr that start with prefix. */
static int stderr_lines(const char *prefix)
{
    char *e = kvcal_test_kvcal_stderr();
    int n = 0;
    for (const char *p = e; p && *p;) {
        if (!strncmp(p, prefix, strlen(prefix)))
            n++;
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    free(e);
    return n;
}

// --- layout -----------------------------------------------------------------------

/* Every sample in exactly one part, parts in rank order, whole batches,
 * batch counts apart by at most one; a rank may hold none. */
static void dp_layout_splits_whole_batches_in_rank_order(void)
{
    for (int n = 1; n <= 23; n++)
        for (int batch = 1; batch <= 5; batch++)
            for (int ranks = 1; ranks <= 7; ranks++) {
                int next = 0, lo = 1 << 30, hi = 0, batches = 0;
                for (int r = 0; r < ranks; r++) {
                    kvcal_dp_part p = kvcal_dp_layout(n, batch, r, ranks);
                    CU_ASSERT_EQUAL(p.first_sample, next);
                    CU_ASSERT_EQUAL(p.first_sample, p.first_batch * batch);
                    CU_ASSERT_EQUAL(p.total_batches, (n + batch - 1) / batch);
                    CU_ASSERT(p.num_samples <= p.num_batches * batch);
                    CU_ASSERT(p.num_samples > (p.num_batches - 1) * batch);
                    next += p.num_samples;
                    batches += p.num_batches;
                    lo = p.num_batches < lo ? p.num_batches : lo;
                    hi = p.num_batches > hi ? p.num_batches : hi;
                }
                CU_ASSERT_EQUAL(next, n);
                CU_ASSERT_EQUAL(batches, (n + batch - 1) / batch);
                CU_ASSERT(hi - lo <= 1);
            }
}

// --- the reduction, the ranks in one process -----------------------------------------

/* The parts NCCL reduces (max / sum of kvcal_dp_stats_parts) are what
 * kvcal_stats_merge combines: on random statistics, the parts reduced one
 * by one give merge's bytes everywhere but in the moving averages and batch
 * maxima (which the reduction folds itself). */
static void dp_stats_parts_are_what_merge_combines(void)
{
    kvcal_stats_t *a = NULL, *b = NULL, *parts_way = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(3, 2, 5, &a), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(3, 2, 5, &b), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(3, 2, 5, &parts_way), KVCAL_OK);
    const size_t bytes = kvcal_stats_slab_bytes(a);
    uint32_t x = 12345u;
    for (size_t i = 0; i < bytes; i++) {
        x = x * 1664525u + 1013904223u;
        ((unsigned char *)a->slab)[i] = (unsigned char)(x >> 24);
        x = x * 1664525u + 1013904223u;
        ((unsigned char *)b->slab)[i] = (unsigned char)(x >> 24);
    }
    /* absmax and token counts as runs hold them: finite and >= 0, counts
     * far from int64's limit */
    for (size_t i = 0; i < 2 * 3 * 2 * 5; i++) {
        a->absmax[0][i] = (float)((i * 7) % 11);
        b->absmax[0][i] = (float)((i * 5) % 13);
    }
    for (int l = 0; l < 3; l++) {
        a->tokens[l] = 1000 + 17 * l;
        b->tokens[l] = 2000 + 29 * l;
    }
    memcpy(parts_way->slab, a->slab, bytes);
    kvcal_dp_stats_part parts[KVCAL_DP_STATS_PARTS];
    kvcal_dp_stats_parts(a, parts);
    for (int p = 0; p < KVCAL_DP_STATS_PARTS; p++)
        for (size_t i = 0; i < parts[p].count; i++) {
            unsigned char *d = (unsigned char *)parts_way->slab + parts[p].offset;
            const unsigned char *s = (const unsigned char *)b->slab + parts[p].offset;
            if (parts[p].is_max_f32) {
                float *df = (float *)d + i;
                const float sf = ((const float *)s)[i];
                *df = sf > *df ? sf : *df;
            } else {
                ((uint64_t *)d)[i] += ((const uint64_t *)s)[i];
            }
        }
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);
    /* the moving averages and batch maxima apart, byte for byte */
    const size_t lh = 3 * 2;
    for (int kv = 0; kv < 2; kv++) {
        memset(a->ema[kv], 0, lh * sizeof(double));
        memset(parts_way->ema[kv], 0, lh * sizeof(double));
        memset(a->ema_tensor[kv], 0, 3 * sizeof(double));
        memset(parts_way->ema_tensor[kv], 0, 3 * sizeof(double));
        memset(a->batch_absmax[kv], 0, lh * sizeof(float));
        memset(parts_way->batch_absmax[kv], 0, lh * sizeof(float));
    }
    CU_ASSERT(!memcmp(a->slab, parts_way->slab, bytes));
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
    kvcal_stats_destroy(parts_way);
}

/* A group whose ranks live in this process: rank 0's reduce_stats and
 * gather read the other ranks' data directly (a test double of MPI's). */
typedef struct {
    kvcal_dp_group base;
    kvcal_stats_t **stats; /* (ranks) */
    const float **bmax;    /* (ranks) */
} local_group;

static kvcal_status local_reduce(kvcal_dp_group *g, kvcal_stats_t *stats)
{
    local_group *l = (local_group *)g;
    kvcal_stats_t *sum = NULL;
    kvcal_status st =
        kvcal_stats_create(stats->num_layers, stats->num_kv_heads, stats->head_dim, &sum);
    for (int r = 0; !st && r < g->size; r++)
        st = kvcal_stats_merge(sum, l->stats[r]);
    if (!st) /* the whole slab, as MPI's group leaves it */
        memcpy(stats->slab, sum->slab, kvcal_stats_slab_bytes(stats));
    kvcal_stats_destroy(sum);
    return st;
}

static kvcal_status local_gather(kvcal_dp_group *g, const void *send, const size_t *bytes,
                                 void *recv)
{
    local_group *l = (local_group *)g;
    (void)send;
    size_t at = 0;
    for (int r = 0; r < g->size; r++) {
        memcpy((unsigned char *)recv + at, l->bmax[r], bytes[r]);
        at += bytes[r];
    }
    return KVCAL_OK;
}

static const kvcal_dp_group_ops local_ops = {.reduce_stats = local_reduce,
                                             .gather = local_gather};

/* n samples of len tokens over `ranks` ranks in batches of `batch` (the
 * sample pattern of kvcal_test_calibrate), reduced on rank 0 into *out. */
static void calibrate_over_ranks(kvcal_model_t *m, int n, int len, int batch, int ranks,
                                 kvcal_stats_t **out)
{
    const kvcal_model_desc *d = kvcal_model_describe(m);
    const size_t lh = (size_t)d->num_layers * d->num_kv_heads;
    kvcal_stats_t *stats[8] = {0};
    float *bmax[8] = {0};
    kvcal_exec_options opt;
    memset(&opt, 0, sizeof opt);
    CU_ASSERT_FATAL(ranks <= 8);
    for (int r = 0; r < ranks; r++) {
        kvcal_dp_part p = kvcal_dp_layout(n, batch, r, ranks);
        bmax[r] = calloc((size_t)p.num_batches * 2 * lh + 1, sizeof(float));
        CU_ASSERT_EQUAL_FATAL(
            kvcal_test_calibrate_part(m, opt, n, len, batch, &p, bmax[r], &stats[r]),
            KVCAL_OK);
        /* a rank's moving averages are not folded: rank 0 folds them all */
        CU_ASSERT_EQUAL(stats[r]->batches, 0);
    }
    const kvcal_dp_part part0 = kvcal_dp_layout(n, batch, 0, ranks);
    local_group g = {
        {&local_ops, 0, ranks, 0, ranks, "local"}, stats, (const float **)bmax};
    CU_ASSERT_EQUAL(kvcal_dp_reduce_run(&g.base, &part0, bmax[0], stats[0], 0.9),
                    KVCAL_OK);
    *out = stats[0];
    for (int r = 1; r < ranks; r++)
        kvcal_stats_destroy(stats[r]);
    for (int r = 0; r < ranks; r++)
        free(bmax[r]);
}

/* Rank 0's statistics after the reduction are those of one process on the
 * same samples bit for bit (absmax, histograms, tokens, both moving
 * averages, the batch count), for 1 to 4 ranks, more ranks than batches
 * included, on stories260K and a golden model. */
static void dp_reduce_equals_one_process_bit_for_bit(void)
{
    static const char *const models[] = {
        "models/stories260K/stories260K.bin",
        "tests/fixtures/golden/qwen3_gqa_hd80_qknorm_bf16"};
    static const int shapes[][2] = {{7, 2}, {10, 3}, {2, 1}};
    for (size_t mi = 0; mi < 2; mi++) {
        kvcal_model_t *m = NULL;
        CU_ASSERT_EQUAL_FATAL(kvcal_model_open(models[mi], &m), KVCAL_OK);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            kvcal_exec_options o;
            memset(&o, 0, sizeof o);
            kvcal_stats_t *one = NULL;
            CU_ASSERT_EQUAL_FATAL(
                kvcal_test_calibrate(m, o, shapes[i][0], 24, shapes[i][1], &one, NULL),
                KVCAL_OK);
            for (int ranks = 1; ranks <= 4; ranks++) {
                kvcal_stats_t *dp = NULL;
                calibrate_over_ranks(m, shapes[i][0], 24, shapes[i][1], ranks, &dp);
                CU_ASSERT(kvcal_test_stats_equal(one, dp));
                kvcal_stats_destroy(dp);
            }
            kvcal_stats_destroy(one);
        }
        kvcal_model_close(m);
    }
}

/* Merging the ranks' moving averages (kvcal_stats_merge's max) instead of
 * folding their batch maxima in order would not give one process's: the
 * comparison above can fail. */
static void dp_merged_moving_averages_differ_from_one_process(void)
{
    kvcal_model_t *m = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_model_open("models/stories260K/stories260K.bin", &m),
                          KVCAL_OK);
    kvcal_exec_options o;
    memset(&o, 0, sizeof o);
    kvcal_stats_t *one = NULL, *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 8, 24, 2, &one, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 4, 24, 2, &a, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_calibrate(m, o, 4, 24, 2, &b, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);
    CU_ASSERT_FALSE(kvcal_test_stats_equal(one, a));
    kvcal_stats_destroy(one);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
    kvcal_model_close(m);
}

#define MODEL "models/stories260K/stories260K.bin"

/* Ranks from a launcher's environment (RANK, WORLD_SIZE) on the cpu device
 * have nothing to talk through but MPI: one message, from rank 0, says how
 * to start them; nothing is written. */
static void calibrate_refuses_launcher_ranks_without_a_transport(void)
{
    char cmd[2048];
    const char *out = kvcal_test_path("launcher.json");
    snprintf(cmd, sizeof cmd,
             "env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 \"$KVCAL\" calibrate --model " MODEL
             " --num-samples 4 --seq-len 32 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("rank 0 of 2 was started by a launcher's "
                                          "environment"));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("mpirun -np 2"));
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
    snprintf(cmd, sizeof cmd,
             "env RANK=2 WORLD_SIZE=2 \"$KVCAL\" calibrate --model " MODEL " --out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("RANK='2' is not a valid rank"));
    /* a launcher of one rank is one process */
    snprintf(cmd, sizeof cmd,
             "env RANK=0 WORLD_SIZE=1 \"$KVCAL\" calibrate --model " MODEL
             " --num-samples 2 --seq-len 16 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 0);
    CU_ASSERT_EQUAL(access(out, F_OK), 0);
}

/* A build without MPI started by mpirun (Open MPI's variables set) says
 * so, once (rank 0), and writes nothing. Only a build without MPI can run
 * this: in one with it, those variables would start MPI for real. */
static void calibrate_without_mpi_says_so_to_ranks_of_mpirun(void)
{
    if (kvcal_dp_have_mpi())
        return;
    char cmd[2048];
    const char *out = kvcal_test_path("nompi.json");
    snprintf(cmd, sizeof cmd,
             "env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 \"$KVCAL\" calibrate "
             "--model " MODEL " --num-samples 4 --seq-len 32 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("rank 0 of 2 by mpirun, but this kvcal was "
                                          "built without MPI"));
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
    snprintf(cmd, sizeof cmd,
             "env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 \"$KVCAL\" calibrate "
             "--model " MODEL " --num-samples 4 --seq-len 32 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 2);
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 0);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(dp_layout_splits_whole_batches_in_rank_order),
    KVCAL_TEST(dp_stats_parts_are_what_merge_combines),
    KVCAL_TEST(dp_reduce_equals_one_process_bit_for_bit),
    KVCAL_TEST(dp_merged_moving_averages_differ_from_one_process),
    KVCAL_TEST(calibrate_refuses_launcher_ranks_without_a_transport),
    KVCAL_TEST(calibrate_without_mpi_says_so_to_ranks_of_mpirun),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(dp, KVCAL_NEEDS_NOTHING, tests)

// --- under mpirun -------------------------------------------------------------------

/* mpirun with its options for N ranks on this machine's cores. Under
 * AddressSanitizer (make asan) leak checking is off for the ranks: Open MPI
 * leaves what its dlopen'd components allocated, which LeakSanitizer cannot
 * name (so no suppression matches); memory errors are still caught. */
static const char *mpirun(void)
{
    return getuid() == 0 ? "env ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe "
                           "--allow-run-as-root"
                         : "env ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe";
}

/* Whether two trees (files or directories) hold the same bytes. */
static int same_tree(const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' > /dev/null", a, b);
    return system(cmd) == 0;
}

/* A JSONL of n samples of len token ids below vocab (for the golden
 * models, which have no tokenizer). */
static const char *token_dataset(int n, int len, int vocab)
{
    const char *path = kvcal_test_path("tokens.jsonl");
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < n; i++) {
        fputs("{\"input_ids\": [", f);
        for (int t = 0; t < len; t++)
            fprintf(f, "%s%d", t ? ", " : "", (i * 131 + t * 17 + t * t) % vocab);
        fputs("]}\n", f);
    }
    fclose(f);
    return path;
}

/* `run` (calibrate's options but --out and --stats) as one process and
 * under mpirun -np 1, 2 and 3: every output byte for byte the same. */
static void check_ranks_equal_one_process(const char *run, const char *tag)
{
    char cmd[4096], one[600], many[620];
    snprintf(one, sizeof one, "%s", kvcal_test_path(tag));
    snprintf(cmd, sizeof cmd, "\"$KVCAL\" calibrate %s --out '%s' --stats '%s/stats.h5'",
             run, one, one);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(cmd, NULL), 0);
    for (int n = 1; n <= 3; n++) {
        snprintf(many, sizeof many, "%s-np%d", one, n);
        snprintf(cmd, sizeof cmd,
                 "%s -np %d \"$KVCAL\" calibrate %s --out '%s' --stats '%s/stats.h5'",
                 mpirun(), n, run, many, many);
        char *out = NULL;
        CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, &out), 0);
        /* one summary, from rank 0 */
        const char *first = out ? strstr(out, "calibrated ") : NULL;
        CU_ASSERT(first && !strstr(first + 1, "calibrated "));
        if (n > 1)
            CU_ASSERT(out && strstr(out, "data-parallel: "));
        free(out);
        CU_ASSERT(same_tree(one, many));
        if (!same_tree(one, many))
            fprintf(stderr, "\n  %s differs from %s\n", many, one);
    }
}

/* Scales (every format), statistics (the moving averages, histograms,
 * absmax) under mpirun -np 1, 2, 3 equal one process's byte for byte, on
 * stories260K (with more batches than ranks, and fewer), a golden
 * model and a golden mixture of experts. */
static void calibrate_under_mpirun_equals_one_process_byte_for_byte(void)
{
    check_ranks_equal_one_process(
        "--model " MODEL " --num-samples 10 --batch 2 --seq-len 64 "
        "--observer ema:0.9 --granularity head --format all --quiet",
        "stories");
    check_ranks_equal_one_process("--model " MODEL
                                  " --num-samples 4 --batch 2 --seq-len 32 "
                                  "--observer percentile:99.9 --format all --quiet",
                                  "stories-2-batches");
    char run[2048];
    snprintf(run, sizeof run,
             "--model tests/fixtures/golden/qwen3_gqa_hd80_qknorm_bf16 --dataset '%s' "
             "--num-samples 9 --batch 2 --seq-len 24 --observer ema:0.8 --format all "
             "--quiet",
             token_dataset(12, 24, 128));
    check_ranks_equal_one_process(run, "qwen3");
    /* a mixture of experts: the tokens routed to each expert summed over
     * the ranks (the statistics file holds them) */
    snprintf(run, sizeof run,
             "--model tests/fixtures/golden/qwen3_moe_e8_top3_norm_bf16 --dataset '%s' "
             "--num-samples 8 --batch 2 --seq-len 24 --format all --quiet",
             token_dataset(12, 24, 100));
    check_ranks_equal_one_process(run, "qwen3-moe");
}

/* Two ranks run in an MPMD line: rank 0 `calibrate rank0 common`, rank 1
 * `calibrate rank1 common` behind its own prefix (a shell wrapper); each
 * option once in each (a repeated one is refused); returns the exit code. */
static int run_two(const char *common, const char *rank0, const char *rank1_prefix,
                   const char *rank1)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s -np 1 \"$KVCAL\" calibrate %s %s : -np 1 %s \"$KVCAL\" calibrate %s %s",
             mpirun(), rank0, common, rank1_prefix, rank1, common);
    return kvcal_test_run_command(cmd, NULL);
}

/* A bad model shard on rank 1 (a truncated copy), samples that differ
 * there (another seed), an Inf in a weight that rank 1's copy holds (it
 * fails in its forward pass while rank 0 runs): every rank stops, one
 * message names rank 1, nothing is written. */
static void calibrate_under_mpirun_failing_rank_stops_every_rank(void)
{
    char common[2048], extra[1024], cmd[2048];
    const char *out = kvcal_test_path("failed");
    const char *bad = kvcal_test_path("truncated.bin");
    snprintf(cmd, sizeof cmd, "head -c 100000 " MODEL " > '%s'", bad);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(common, sizeof common,
             "--num-samples 8 --batch 2 --seq-len 32 --quiet --format all --out '%s'",
             out);
    /* rank 1's --model is the bad one */
    snprintf(extra, sizeof extra, "--model '%s'", bad);
    CU_ASSERT_EQUAL(run_two(common, "--model " MODEL, "", extra), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("kvcal calibrate: rank 1 of 2: "));
    CU_ASSERT(kvcal_test_kvcal_stderr_has("truncated.bin"));
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);

    /* an output rank 0 cannot write: rank 0 says so once, no rank runs */
    snprintf(cmd, sizeof cmd,
             "%s -np 2 \"$KVCAL\" calibrate --model " MODEL
             " --num-samples 4 --seq-len 32 "
             "--quiet --out '%s/no/such/dir/x.json'",
             mpirun(), kvcal_test_tmpdir());
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("no/such/dir/x.json"));
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);

    CU_ASSERT_EQUAL(run_two(common, "--model " MODEL, "", "--model " MODEL " --seed 7"),
                    1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("rank 1 of 2: its run differs from rank 0's"));
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);

    /* the golden fp32 model with an Inf in layer 1's v_proj, on rank 1 */
    const char *src = "tests/fixtures/golden/llama_mha_linear_tied_fp32";
    const char *inf_dir = kvcal_test_path("inf-model");
    char path[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", inf_dir, src, inf_dir);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", inf_dir);
    size_t len = 0;
    char *buf = kvcal_test_read_file(path, &len);
    kvcal_safetensors_t *st = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_safetensors_parse(buf, len, path, &st), KVCAL_OK);
    const kvcal_tensor_info *t =
        kvcal_safetensors_find(st, "model.layers.1.self_attn.v_proj.weight");
    CU_ASSERT_FATAL(t && t->dtype == KVCAL_DTYPE_F32);
    float inf = INFINITY;
    memcpy(buf + ((const char *)t->data - buf) + 17 * t->shape[1] * sizeof(float), &inf,
           sizeof inf);
    kvcal_safetensors_close(st);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(path, buf, len), 0);
    free(buf);
    char with_data[2300], model[1024];
    snprintf(with_data, sizeof with_data, "--dataset '%s' %s", token_dataset(8, 32, 128),
             common);
    snprintf(model, sizeof model, "--model %s", src);
    snprintf(extra, sizeof extra, "--model '%s'", inf_dir);
    CU_ASSERT_EQUAL(run_two(with_data, model, "", extra), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("rank 1 of 2: layer 1 V kv head 1: sample 4"));
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
}

/* A rank out of memory (its data segment capped below what its batch
 * needs) and a rank killed (its CPU time capped: the kernel kills it in
 * its forward pass): every rank stops, nothing is written; the first says
 * so in one message naming rank 1, mpirun the second. */
static void calibrate_under_mpirun_rank_out_of_memory_or_killed_writes_nothing(void)
{
    char common[2048];
    const char *out = kvcal_test_path("oom.json");
    /* AddressSanitizer's shadow memory does not fit the cap, nor do the CUDA
     * libraries a CUDA build starts with (measured: such a rank exits 127
     * before main); the CPU build runs it */
#if !defined(__SANITIZE_ADDRESS__) && !defined(KVCAL_WITH_CUDA)
    snprintf(common, sizeof common,
             "--model " MODEL
             " --num-samples 128 --batch 64 --seq-len 128 --quiet --out '%s'",
             out);
    CU_ASSERT_EQUAL(
        run_two(common, "", "sh -c 'ulimit -d 36000; exec \"$0\" \"$@\"'", ""), 2);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("kvcal calibrate: rank 1 of 2: "));
    char *err = kvcal_test_kvcal_stderr();
    CU_ASSERT(err && (strstr(err, "cannot allocate") || strstr(err, "out of memory")));
    free(err);
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
#endif

    snprintf(common, sizeof common,
             "--model " MODEL
             " --num-samples 1024 --batch 16 --seq-len 512 --quiet --out "
             "'%s'",
             out);
    CU_ASSERT_NOT_EQUAL(
        run_two(common, "", "sh -c 'ulimit -t 1; exec \"$0\" \"$@\"'", ""), 0);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("rank 1"));
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
}

/* Whether every number of JSON a and b agrees within rtol (and every
 * string, key and count exactly); *identical counts the numbers equal bit
 * for bit, *numbers all of them. */
static int json_close(const cJSON *a, const cJSON *b, double rtol, int *identical,
                      int *numbers)
{
    if (!a || !b || a->type != b->type)
        return 0;
    if (cJSON_IsNumber(a)) {
        (*numbers)++;
        *identical += a->valuedouble == b->valuedouble;
        return fabs(a->valuedouble - b->valuedouble) <= rtol * fabs(a->valuedouble);
    }
    if (cJSON_IsString(a))
        return !strcmp(a->valuestring, b->valuestring);
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
        return 0;
    const cJSON *y = b->child;
    for (const cJSON *x = a->child; x; x = x->next, y = y->next)
        if ((x->string && strcmp(x->string, y->string)) ||
            !json_close(x, y, rtol, identical, numbers))
            return 0;
    return 1;
}

/* first-batch runs on rank 0 alone, which keeps the baseline's
 * distributions of its own samples only: under several ranks its KL
 * divergence, top-1 agreement and per-window KL sums are null. Checks that
 * and drops them from both reports. */
static void drop_first_batch_distributions(cJSON *one, cJSON *many)
{
    static const char *const keys[] = {"kld_mean", "kld_mean_se",    "kld_median",
                                       "kld_p99",  "kld_max",        "top1_agreement",
                                       "top1_agreement_se"};
    cJSON *mode, *found[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        cJSON_ArrayForEach(mode, cJSON_GetObjectItem(i ? many : one, "modes"))
        {
            const cJSON *name = cJSON_GetObjectItem(mode, "mode");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "first-batch"))
                found[i] = mode;
        }
    CU_ASSERT_FATAL(found[0] && found[1]);
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(found[0], keys[k])));
        CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(found[1], keys[k])));
        cJSON_DeleteItemFromObject(found[0], keys[k]);
        cJSON_DeleteItemFromObject(found[1], keys[k]);
    }
    /* and the per-window sums of the KL divergence */
    cJSON *w[2] = {cJSON_GetObjectItem(found[0], "windows"),
                   cJSON_GetObjectItem(found[1], "windows")};
    CU_ASSERT_FATAL(w[0] && w[1]);
    const cJSON *sum;
    cJSON_ArrayForEach(sum, cJSON_GetObjectItem(w[1], "kld_sum")) CU_ASSERT(cJSON_IsNull(sum));
    cJSON_DeleteItemFromObject(w[0], "kld_sum");
    cJSON_DeleteItemFromObject(w[1], "kld_sum");
}

/* kvcal eval under mpirun -np 2 and 3 (every mode; first-batch on rank 0
 * alone) reports what one process reports: the counts exactly, the sums of
 * floats (NLL, squared errors) within 1e-12 relative: the ranks' partial
 * sums are added in another order than one process adds them; the
 * per-token comparisons (KL divergence, top-1, the paired intervals) from
 * every rank's tokens joined on rank 0. Ranks given other --scales are
 * refused before any forward pass. */
static void eval_under_mpirun_equals_one_process_within_rounding(void)
{
    char cmd[8192], run[2048];
    /* run up to its --scales value: each rank names its own scales, once */
    const char *const run_head =
        "eval --model " MODEL " --dataset datasets/calibration_handwritten.txt "
        "--num-samples 10 --batch 2 --seq-len 64 --quiet --json --scales";
    const char *scales = kvcal_test_path("eval-scales.json");
    snprintf(cmd, sizeof cmd,
             "\"$KVCAL\" calibrate --model " MODEL
             " --num-samples 8 --seq-len 64 --quiet "
             "--out '%s'",
             scales);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(cmd, NULL), 0);
    snprintf(run, sizeof run, "%s '%s'", run_head, scales);
    char *one = NULL;
    snprintf(cmd, sizeof cmd, "\"$KVCAL\" %s", run);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(cmd, &one), 0);
    cJSON *a = cJSON_Parse(one);
    for (int n = 2; n <= 3; n++) {
        char *many = NULL;
        snprintf(cmd, sizeof cmd, "%s -np %d \"$KVCAL\" %s", mpirun(), n, run);
        CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, &many), 0);
        cJSON *b = cJSON_Parse(many), *a1 = cJSON_Duplicate(a, 1);
        int identical = 0, numbers = 0;
        CU_ASSERT_FATAL(a1 && b);
        drop_first_batch_distributions(a1, b);
        CU_ASSERT(json_close(a1, b, 1e-12, &identical, &numbers));
        cJSON_Delete(a1);
        CU_ASSERT(numbers > 50);
        cJSON_Delete(b);
        free(many);
    }
    cJSON_Delete(a);
    free(one);
    /* other scales on rank 1: refused before any forward pass */
    const char *other = kvcal_test_path("eval-other.json");
    snprintf(cmd, sizeof cmd,
             "\"$KVCAL\" calibrate --model " MODEL
             " --num-samples 8 --seq-len 64 --seed 3 "
             "--quiet --out '%s'",
             other);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_command(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd, "%s -np 1 \"$KVCAL\" %s : -np 1 \"$KVCAL\" %s '%s'",
             mpirun(), run, run_head, other);
    CU_ASSERT_EQUAL(kvcal_test_run_command(cmd, NULL), 1);
    CU_ASSERT(kvcal_test_kvcal_stderr_has("kvcal eval: rank 1 of 2: its run differs"));
    CU_ASSERT_EQUAL(stderr_lines("kvcal "), 1);
}

static CU_TestInfo mpi_tests[] = {
    KVCAL_TEST(eval_under_mpirun_equals_one_process_within_rounding),
    KVCAL_TEST(calibrate_under_mpirun_equals_one_process_byte_for_byte),
    KVCAL_TEST(calibrate_under_mpirun_failing_rank_stops_every_rank),
    KVCAL_TEST(calibrate_under_mpirun_rank_out_of_memory_or_killed_writes_nothing),
    CU_TEST_INFO_NULL};
KVCAL_SUITE(dp_mpi, KVCAL_NEEDS_MPI, mpi_tests)
