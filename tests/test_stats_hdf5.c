/* tests/test_stats_hdf5.c: K/V statistics to HDF5 and back
 * (io/stats_hdf5.h): exact round trip, compression, h5dump, atomic writes,
 * and clear errors on files that are not kvcal statistics. */
#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/scales.h"
#include "core/status.h"
#include "io/stats_hdf5.h"
#include "observers/observer.h"
#include "observers/stats.h"
#include "tests/test_util.h"

// --- helpers -----------------------------------------------------------------

/* Statistics of 3 layers x 2 kv heads x head_dim 5 over a few batches of
 * deterministic pseudo-random values; `seed` varies them. */
static kvcal_stats_t *sample_stats(uint64_t seed, int batches)
{
    enum { L = 3, H = 2, D = 5, T = 40 };
    kvcal_stats_t *s = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_create(L, H, D, &s), KVCAL_OK);
    static float x[T * H * D]; // (T, H, D)
    for (int b = 0; b < batches; b++) {
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < T * H * D; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                double u = ((double)(seed >> 11) + 0.5) / 9007199254740992.0;
                x[i] = (float)((u - 0.5) * exp(8.0 * u - 4.0) * (l + 1));
            }
            kvcal_kv_block blk = kvcal_kv_block_dense(x, 1, T - b, H, D, NULL, NULL);
            CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_K, &blk), KVCAL_OK);
            blk.x = x + 3;
            blk.seq = T - b - 1;
            CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, l, KVCAL_V, &blk), KVCAL_OK);
        }
        CU_ASSERT_EQUAL(kvcal_stats_end_batch(s, 0.9), KVCAL_OK);
    }
    return s;
}

static int stats_identical(const kvcal_stats_t *a, const kvcal_stats_t *b)
{
    if (a->num_layers != b->num_layers || a->num_kv_heads != b->num_kv_heads ||
        a->head_dim != b->head_dim || a->num_bins != b->num_bins ||
        a->batches != b->batches || a->batch_start_tokens != b->batch_start_tokens)
        return 0;
    size_t lh = (size_t)a->num_layers * a->num_kv_heads;
    for (int kv = 0; kv < 2; kv++)
        if (memcmp(a->absmax[kv], b->absmax[kv], lh * a->head_dim * sizeof(float)) ||
            memcmp(a->hist[kv], b->hist[kv], lh * a->num_bins * sizeof(uint64_t)) ||
            memcmp(a->ema[kv], b->ema[kv], lh * sizeof(double)) ||
            memcmp(a->batch_absmax[kv], b->batch_absmax[kv], lh * sizeof(float)) ||
            memcmp(a->ema_tensor[kv], b->ema_tensor[kv], a->num_layers * sizeof(double)))
            return 0;
    const size_t nc = lh * a->head_dim;
    if (a->num_q_heads != b->num_q_heads || !a->min[0] != !b->min[0] ||
        (a->num_q_heads &&
         memcmp(a->q_absmax, b->q_absmax,
                (size_t)a->num_layers * a->num_q_heads * sizeof(float))))
        return 0;
    for (int kv = 0; a->min[0] && kv < 2; kv++)
        if (memcmp(a->min[kv], b->min[kv], nc * sizeof(float)) ||
            memcmp(a->max[kv], b->max[kv], nc * sizeof(float)))
            return 0;
    return !memcmp(a->tokens, b->tokens, a->num_layers * sizeof(int64_t)) &&
           a->num_experts == b->num_experts &&
           (!a->num_experts ||
            !memcmp(a->expert_tokens, b->expert_tokens,
                    (size_t)a->num_layers * a->num_experts * sizeof(int64_t)));
}

static void sample_identity(kvcal_model_identity *m, kvcal_provenance *p)
{
    memset(m, 0, sizeof *m);
    memset(p, 0, sizeof *p);
    strcpy(m->architecture, "LlamaForCausalLM");
    strcpy(m->model_type, "llama");
    m->num_layers = 3;
    m->num_attention_heads = 8;
    m->num_kv_heads = 2;
    m->head_dim = 5;
    strcpy(p->observer, "percentile");
    strcpy(p->observer_params, "{\"percentile\": 99.9}");
    strcpy(p->dataset, "datasets/calib.txt (jsonl, 16 samples)");
    strcpy(p->tool_version, KVCAL_VERSION_STRING);
    p->num_samples = 16;
    p->num_tokens = 1234567890123ll;
    p->seed = -7;
}

/* Number of entries in the test directory whose name starts with prefix. */
static int count_files(const char *prefix)
{
    DIR *d = opendir(kvcal_test_tmpdir());
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Opens path read-write and runs `edit` on it (for damaged-file tests). */
static void edit_file(const char *path, void (*edit)(hid_t file))
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    edit(f);
    H5Fclose(f);
}

static void write_i64_attr(hid_t f, const char *name, long long v)
{
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    CU_ASSERT(a >= 0 && H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a);
}

static void set_newer_version(hid_t f)
{
    write_i64_attr(f, "format_version", KVCAL_STATS_FORMAT_VERSION + 1);
}

static void set_other_bins(hid_t f)
{
    write_i64_attr(f, "hist_bins_per_octave", 32);
}

static void put_nan_in_absmax(hid_t f)
{
    hid_t d = H5Dopen2(f, "layers/2/v/absmax", H5P_DEFAULT);
    float v[2 * 5];
    CU_ASSERT(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    v[7] = NAN;
    CU_ASSERT(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
}

static void drop_histogram(hid_t f)
{
    CU_ASSERT(H5Ldelete(f, "layers/1/k/histogram", H5P_DEFAULT) >= 0);
}

static void rename_format(hid_t f)
{
    CU_ASSERT(H5Adelete(f, "format") >= 0);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, 12); /* a fixed-length string, as other tools write */
    hid_t a = H5Acreate2(f, "format", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT(a >= 0 && H5Awrite(a, t, "other-stats") >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

// --- tests -------------------------------------------------------------------

static void stats_hdf5_round_trip_keeps_every_statistic(void)
{
    kvcal_stats_t *s = sample_stats(1, 3), *r = NULL;
    /* an unfinished batch too: batch_absmax must survive */
    float x[2 * 5] = {1, 2, 3, 4, 5, -6, 7, 8, 9, 10};
    kvcal_kv_block blk = kvcal_kv_block_dense(x, 1, 1, 2, 5, NULL, NULL);
    CU_ASSERT_EQUAL(kvcal_stats_observe_ref(s, 0, KVCAL_V, &blk), KVCAL_OK);
    kvcal_model_identity m, m2;
    kvcal_provenance p, p2;
    sample_identity(&m, &p);
    const char *path = kvcal_test_path("round.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, &m, &p), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, &m2, &p2), KVCAL_OK);
    CU_ASSERT_TRUE(stats_identical(s, r));
    CU_ASSERT_STRING_EQUAL(m2.architecture, "LlamaForCausalLM");
    CU_ASSERT_STRING_EQUAL(m2.model_type, "llama");
    CU_ASSERT_EQUAL(m2.num_attention_heads, 8);
    CU_ASSERT_EQUAL(m2.num_layers, 3);
    CU_ASSERT_EQUAL(m2.head_dim, 5);
    CU_ASSERT_STRING_EQUAL(p2.observer, p.observer);
    CU_ASSERT_STRING_EQUAL(p2.observer_params, p.observer_params);
    CU_ASSERT_STRING_EQUAL(p2.dataset, p.dataset);
    CU_ASSERT_STRING_EQUAL(p2.tool_version, KVCAL_VERSION_STRING);
    CU_ASSERT_EQUAL(p2.num_samples, 16);
    CU_ASSERT_EQUAL(p2.num_tokens, 1234567890123ll);
    CU_ASSERT_EQUAL(p2.seed, -7);
    kvcal_stats_destroy(r);

    /* without identity or provenance: empty attributes, same statistics */
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, &p2), KVCAL_OK);
    CU_ASSERT_TRUE(stats_identical(s, r));
    CU_ASSERT_STRING_EQUAL(p2.observer_params, "{}");
    CU_ASSERT_STRING_EQUAL(p2.dataset, "");
    kvcal_stats_destroy(r);
    kvcal_stats_destroy(s);
}

static void stats_hdf5_files_merge_like_the_statistics(void)
{
    kvcal_stats_t *a = sample_stats(10, 2), *b = sample_stats(20, 3), *ra = NULL,
                  *rb = NULL;
    const char *pa = kvcal_test_path("worker0.h5"), *pb = kvcal_test_path("worker1.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(pa, a, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(pb, b, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(pa, &ra, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(pb, &rb, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_merge(a, b), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_merge(ra, rb), KVCAL_OK);
    CU_ASSERT_TRUE(stats_identical(a, ra));
    CU_ASSERT_EQUAL(ra->batches, 5);
    kvcal_observer_config cfg;
    CU_ASSERT_EQUAL(kvcal_observer_parse("mse", &cfg), KVCAL_OK);
    float t1, t2;
    CU_ASSERT_EQUAL(kvcal_stats_threshold(a, &cfg, 2, KVCAL_K, 1, &t1), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_threshold(ra, &cfg, 2, KVCAL_K, 1, &t2), KVCAL_OK);
    CU_ASSERT_EQUAL(t1, t2);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
    kvcal_stats_destroy(ra);
    kvcal_stats_destroy(rb);
}

/* A mixture of experts' routing counts: written per layer, read back,
 * summed by a merge; statistics of another expert count do not merge. */
static void stats_hdf5_keeps_and_merges_tokens_per_expert(void)
{
    kvcal_stats_t *a = sample_stats(3, 2), *b = sample_stats(4, 1), *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_experts(a, 5), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_experts(b, 5), KVCAL_OK);
    for (int i = 0; i < 3 * 5; i++) {
        a->expert_tokens[i] = i == 7 ? 0 : 1000 + i; /* expert 2 of layer 1 cold */
        b->expert_tokens[i] = 3 * i;
    }
    const char *path = kvcal_test_path("experts.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, a, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    CU_ASSERT_TRUE(stats_identical(a, r));
    CU_ASSERT_EQUAL(r->num_experts, 5);
    CU_ASSERT_EQUAL(r->expert_tokens[7], 0);
    CU_ASSERT_EQUAL(kvcal_stats_merge(r, b), KVCAL_OK);
    CU_ASSERT_EQUAL(r->expert_tokens[14], 1014 + 42);
    CU_ASSERT_EQUAL(r->expert_tokens[7], 21);
    CU_ASSERT_EQUAL(kvcal_stats_set_experts(b, 4), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_merge(r, b), KVCAL_ERR_MISMATCH);
    /* a dense model's statistics carry no counts */
    kvcal_stats_t *dense = sample_stats(5, 1), *rd = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, dense, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &rd, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(rd->num_experts, 0);
    CU_ASSERT_PTR_NULL(rd->expert_tokens);
    kvcal_stats_destroy(rd);
    kvcal_stats_destroy(dense);
    kvcal_stats_destroy(r);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
}

/* The queries' absmax and the signed range: written when the statistics
 * keep them, read back bit for bit; a file without them reads without;
 * a min above 0 is refused naming the dataset. */
static void stats_hdf5_round_trips_queries_and_signed_range(void)
{
    kvcal_stats_t *s = sample_stats(6, 1), *r = NULL;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_q_heads(s, 4), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_set_range(s, 1), KVCAL_OK);
    for (int i = 0; i < 3 * 4; i++)
        s->q_absmax[i] = 0.25f * (float)(i + 1);
    for (int i = 0; i < 3 * 2 * 5; i++) {
        s->min[KVCAL_K][i] = -(float)i, s->max[KVCAL_K][i] = (float)i / 3.0f;
        s->min[KVCAL_V][i] = -(float)i / 7.0f, s->max[KVCAL_V][i] = 2.0f * (float)i;
    }
    const char *path = kvcal_test_path("queries.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(r->num_q_heads, 4);
    CU_ASSERT_PTR_NOT_NULL(r->min[0]);
    CU_ASSERT_TRUE(stats_identical(s, r));
    kvcal_stats_destroy(r);
    r = NULL;
    /* a positive min */
    s->min[KVCAL_V][7] = 0.5f;
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_ERR_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(kvcal_last_error(), "layers/0/v/min[7] is 0.5"));
    CU_ASSERT_PTR_NULL(r);
    /* statistics without them: a file without them */
    kvcal_stats_t *plain = sample_stats(6, 1);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, plain, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(r->num_q_heads, 0);
    CU_ASSERT_PTR_NULL(r->q_absmax);
    CU_ASSERT_PTR_NULL(r->min[0]);
    CU_ASSERT_TRUE(stats_identical(plain, r));
    kvcal_stats_destroy(r);
    kvcal_stats_destroy(plain);
    kvcal_stats_destroy(s);
}

static void stats_hdf5_arrays_are_deflate_compressed_chunks(void)
{
    kvcal_stats_t *s = sample_stats(3, 1);
    const char *path = kvcal_test_path("deflate.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    const char *names[] = {"layers/0/k/histogram", "layers/2/v/absmax", "layers/1/v/ema",
                           "hist_bin_edges"};
    for (int i = 0; i < 4; i++) {
        hid_t d = H5Dopen2(f, names[i], H5P_DEFAULT);
        hid_t pl = H5Dget_create_plist(d);
        CU_ASSERT_EQUAL(H5Pget_layout(pl), H5D_CHUNKED);
        int deflate = 0;
        for (int k = 0; k < H5Pget_nfilters(pl); k++) {
            unsigned flags, cd[4];
            size_t ncd = 4;
            deflate |= H5Pget_filter2(pl, (unsigned)k, &flags, &ncd, cd, 0, NULL, NULL) ==
                       H5Z_FILTER_DEFLATE;
        }
        CU_ASSERT_TRUE(deflate);
        H5Pclose(pl);
        H5Dclose(d);
    }
    /* bin edges: 0, the float lower edges, +inf */
    double edges[KVCAL_HIST_BINS + 1];
    hid_t d = H5Dopen2(f, "hist_bin_edges", H5P_DEFAULT);
    CU_ASSERT(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, edges) >= 0);
    H5Dclose(d);
    CU_ASSERT_EQUAL(edges[0], 0.0);
    CU_ASSERT_EQUAL(edges[1], ldexp(1.0, KVCAL_HIST_MIN_EXP));
    CU_ASSERT_EQUAL(edges[20 * 64 + 1], 1.0);
    CU_ASSERT_TRUE(isinf(edges[KVCAL_HIST_BINS]));
    H5Fclose(f);
    struct stat st;
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    /* 6 histograms of 2 x 2562 u64 would take 246 KB uncompressed */
    CU_ASSERT(st.st_size < 60000);
    kvcal_stats_destroy(s);
}

/* A file written before the per-tensor moving average existed reads it as
 * the max of the heads' averages, what kvcal used then. */
static void stats_hdf5_without_ema_tensor_reads_the_max_of_head_emas(void)
{
    kvcal_stats_t *s = sample_stats(5, 3), *r = NULL;
    const char *path = kvcal_test_path("old_ema.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT(H5Ldelete(f, "layers/1/v/ema_tensor", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    double m =
        s->ema[KVCAL_V][2] > s->ema[KVCAL_V][3] ? s->ema[KVCAL_V][2] : s->ema[KVCAL_V][3];
    CU_ASSERT_EQUAL(r->ema_tensor[KVCAL_V][1], m);
    CU_ASSERT_EQUAL(r->ema_tensor[KVCAL_K][1], s->ema_tensor[KVCAL_K][1]);
    CU_ASSERT(s->ema_tensor[KVCAL_V][1] >= m);
    kvcal_stats_destroy(s);
    kvcal_stats_destroy(r);
}

static void stats_hdf5_is_readable_by_h5dump(void)
{
    if (system("command -v h5dump > /dev/null 2>&1") != 0) {
        printf("(h5dump not installed: checked with the HDF5 library only) ");
        return;
    }
    kvcal_stats_t *s = sample_stats(4, 1);
    kvcal_model_identity m;
    kvcal_provenance p;
    sample_identity(&m, &p);
    const char *path = kvcal_test_path("dump.h5"), *out = kvcal_test_path("dump.txt");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, &m, &p), KVCAL_OK);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "h5dump -A -p '%s' > '%s' 2>&1", path, out);
    CU_ASSERT_EQUAL(system(cmd), 0);
    char *text = kvcal_test_read_file(out, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"kvcal-stats\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "GROUP \"layers\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "DATASET \"histogram\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "DEFLATE"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"LlamaForCausalLM\""));
    free(text);
    /* and the data itself: layer 1's K token count */
    snprintf(cmd, sizeof cmd, "h5dump -d /layers/1/k/tokens '%s' > '%s' 2>&1", path, out);
    CU_ASSERT_EQUAL(system(cmd), 0);
    text = kvcal_test_read_file(out, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char want[64];
    snprintf(want, sizeof want, "(0): %lld", (long long)s->tokens[1]);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    free(text);
    kvcal_stats_destroy(s);
}

static void stats_hdf5_write_is_atomic(void)
{
    kvcal_stats_t *a = sample_stats(5, 1), *b = sample_stats(6, 2), *r = NULL;
    const char *path = kvcal_test_path("atomic.h5");
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, a, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, b, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL_FATAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    CU_ASSERT_TRUE(stats_identical(b, r));
    CU_ASSERT_EQUAL(count_files("atomic.h5"), 1); /* no temporary left behind */
    const char *bad = kvcal_test_path("no-such-dir/x.h5");
    CU_ASSERT_EQUAL(kvcal_stats_write_hdf5(bad, a, NULL, NULL), KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("no-such-dir/x.h5"));
    kvcal_stats_destroy(r);
    kvcal_stats_destroy(a);
    kvcal_stats_destroy(b);
}

/* A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail as on a
 * full disk) below the file's size: one line naming the file and the cause,
 * no file and no temporary, no HDF5 object left open; and the next write
 * (no limit) works. */
static void stats_hdf5_write_on_a_full_disk_fails_cleanly_and_leaks_nothing(void)
{
    kvcal_stats_t *s = sample_stats(6, 1), *r = NULL;
    const char *path = kvcal_test_path("full.h5");
    ssize_t open_before = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    struct rlimit old, lim;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    kvcal_status st = kvcal_stats_write_hdf5(path, s, NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CU_ASSERT_EQUAL(st, KVCAL_ERR_IO);
    CU_ASSERT(kvcal_test_error_has("full.h5: writing"));
    CU_ASSERT(kvcal_test_error_has("File too large"));
    CU_ASSERT_EQUAL(count_files("full.h5"), 0);
    CU_ASSERT_EQUAL(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), open_before);
    CU_ASSERT_EQUAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
    CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), KVCAL_OK);
    CU_ASSERT_TRUE(r && stats_identical(s, r));
    CU_ASSERT_EQUAL(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), open_before);
    kvcal_stats_destroy(r);
    kvcal_stats_destroy(s);
}

static void stats_hdf5_read_rejects_other_and_damaged_files(void)
{
    kvcal_stats_t *s = sample_stats(8, 1), *r = (kvcal_stats_t *)1;
    const char *missing = kvcal_test_path("missing.h5");
    CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(missing, &r, NULL, NULL), KVCAL_ERR_IO);
    CU_ASSERT_PTR_NULL(r);
    CU_ASSERT(kvcal_test_error_has("missing.h5"));

    const char *text = kvcal_test_path("text.h5");
    CU_ASSERT_EQUAL(kvcal_test_write_file(text, "{\"not\": \"hdf5\"}\n", 16), 0);
    CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(text, &r, NULL, NULL), KVCAL_ERR_PARSE);
    CU_ASSERT(kvcal_test_error_has("not an HDF5 file"));

    const struct {
        void (*edit)(hid_t);
        kvcal_status want;
        const char *message;
    } cases[] = {
        {set_newer_version, KVCAL_ERR_FORMAT, "format_version 2"},
        {set_other_bins, KVCAL_ERR_FORMAT, "32 per octave"},
        {put_nan_in_absmax, KVCAL_ERR_NONFINITE, "layers/2/v/absmax[7] is nan"},
        {drop_histogram, KVCAL_ERR_FORMAT, "layers/1/k/histogram is missing"},
        {rename_format, KVCAL_ERR_FORMAT, "format is 'other-stats'"},
    };
    const char *path = kvcal_test_path("damaged.h5");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL_FATAL(kvcal_stats_write_hdf5(path, s, NULL, NULL), KVCAL_OK);
        edit_file(path, cases[i].edit);
        r = (kvcal_stats_t *)1;
        CU_ASSERT_EQUAL(kvcal_stats_read_hdf5(path, &r, NULL, NULL), cases[i].want);
        CU_ASSERT_PTR_NULL(r);
        CU_ASSERT(kvcal_test_error_has(cases[i].message));
        CU_ASSERT(kvcal_test_error_has("damaged.h5"));
    }
    kvcal_stats_destroy(s);
}

static CU_TestInfo tests[] = {
    KVCAL_TEST(stats_hdf5_round_trip_keeps_every_statistic),
    KVCAL_TEST(stats_hdf5_files_merge_like_the_statistics),
    KVCAL_TEST(stats_hdf5_keeps_and_merges_tokens_per_expert),
    KVCAL_TEST(stats_hdf5_round_trips_queries_and_signed_range),
    KVCAL_TEST(stats_hdf5_arrays_are_deflate_compressed_chunks),
    KVCAL_TEST(stats_hdf5_without_ema_tensor_reads_the_max_of_head_emas),
    KVCAL_TEST(stats_hdf5_is_readable_by_h5dump),
    KVCAL_TEST(stats_hdf5_write_is_atomic),
    KVCAL_TEST(stats_hdf5_write_on_a_full_disk_fails_cleanly_and_leaks_nothing),
    KVCAL_TEST(stats_hdf5_read_rejects_other_and_damaged_files),
    CU_TEST_INFO_NULL,
};
KVCAL_SUITE(stats_hdf5, KVCAL_NEEDS_NOTHING, tests)
