/* tests/test_build.c: the Makefile's own rules: every target can be built
 * on its own in a fresh BUILD; `make install` gives a pkg-config file that
 * builds an engine's program. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/device.h"
#include "tests/test_util.h"

/* Each target asked for alone in a fresh BUILD (a CPU-only one: the rules
 * are the same and it builds in seconds), its folders made by its own rules,
 * not as a side effect of other targets': the example engine loop and a
 * benchmark sit in subfolders of BUILD that none of their prerequisites
 * makes. */
static void make_builds_example_and_bench_alone_in_a_fresh_build_dir(void)
{
    const char *fresh = kvcal_test_path("fresh-build");
    char args[4096], path[4096];
    snprintf(args, sizeof args,
             "CUDA=0 BUILD='%s' '%s/tests/example_engine_loop' '%s/bench/tokenize'",
             fresh, fresh, fresh);
    CU_ASSERT_EQUAL(kvcal_test_make(args, kvcal_test_path("fresh-build.log")), 0);
    snprintf(path, sizeof path, "%s/tests/example_engine_loop", fresh);
    CU_ASSERT_EQUAL(access(path, X_OK), 0);
    snprintf(path, sizeof path, "%s/bench/tokenize", fresh);
    CU_ASSERT_EQUAL(access(path, X_OK), 0);
}

// --- CUDA targets ---------------------------------------------------------------

/* The targets a plain `make` builds for (the Makefile's CUDA_ARCH, whatever
 * this build was given): machine code for every GPU generation engines are
 * served on, sm_90a (the fused MLP kernel) for Hopper, and PTX that GPUs
 * newer than all of them compile. */
static void make_builds_sass_for_every_served_gpu_by_default(void)
{
    static const struct {
        int major, minor;
        const char *gpu;
    } served[] = {{8, 0, "A100"},       {8, 6, "A10, A40"},      {8, 9, "L4, L40S"},
                  {9, 0, "H100, H200"}, {10, 0, "B200"},         {10, 3, "B300"},
                  {11, 0, "Thor"},      {12, 0, "RTX PRO 6000"}, {12, 1, "DGX Spark"}};
    const char *out = kvcal_test_path("default-targets.txt");
    char cmd[4096], code[32];
    snprintf(
        cmd, sizeof cmd,
        "env -u MAKEFLAGS -u MFLAGS -u CUDA_ARCH make -s --no-print-directory CUDA=1 "
        "--eval 'kvcal-targets: ; @echo $(CUDA_TARGETS)' kvcal-targets > '%s'",
        out);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    char *targets = kvcal_test_read_file(out, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(targets);
    targets[strcspn(targets, "\n")] = '\0';
    for (size_t i = 0; i < sizeof served / sizeof served[0]; i++) {
        const kvcal_cuda_code_kind k = kvcal_cuda_code_for_device(
            targets, served[i].major, served[i].minor, code, sizeof code);
        if (k != KVCAL_CUDA_CODE_SASS)
            fprintf(stderr, "\n  %s (%d.%d): no SASS in \"%s\"", served[i].gpu,
                    served[i].major, served[i].minor, targets);
        CU_ASSERT_EQUAL(k, KVCAL_CUDA_CODE_SASS);
    }
    CU_ASSERT_EQUAL(kvcal_cuda_code_for_device(targets, 9, 0, code, sizeof code),
                    KVCAL_CUDA_CODE_SASS);
    CU_ASSERT_STRING_EQUAL(code, "sm_90a");
    CU_ASSERT_EQUAL(kvcal_cuda_code_for_device(targets, 13, 0, code, sizeof code),
                    KVCAL_CUDA_CODE_PTX);
    free(targets);
}

/* A CUDA_ARCH word that names no target stops make with a line that says
 * how to name them. */
static void make_refuses_a_cuda_arch_that_names_no_target(void)
{
    const char *log = kvcal_test_path("bad-arch.log");
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "env -u MAKEFLAGS -u MFLAGS make -s --no-print-directory CUDA=1 "
        "CUDA_ARCH='-gencode=arch=compute_90a,code=sm_90a' --eval 'kvcal-targets: ;' "
        "kvcal-targets > '%s' 2>&1",
        log);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
    char *text = kvcal_test_read_file(log, NULL);
    CU_ASSERT(text && strstr(text, "list targets as sm_XY (SASS) and compute_XY (PTX)"));
    free(text);
}

// --- make install and pkg-config ------------------------------------------------

#ifdef __SANITIZE_ADDRESS__
#define CONSUMER_FLAGS                                                                   \
    "-fsanitize=address,undefined" /* the installed library's runtime */
#else
#define CONSUMER_FLAGS ""
#endif

static const char scales_json[] =
    "{\"model_type\": \"llama\", \"kv_cache\": {\"dtype\": \"float8_e4m3fn\", "
    "\"scaling_factor\": {\"0\": {\"0\": 0.02, \"1\": 0.03}}}}\n";

/* Runs `sh -c cmd`, its output into the test's out file; returns the exit
 * code and prints the output when it is not 0. */
static int sh(const char *cmd)
{
    char full[8192];
    const char *out = kvcal_test_path("sh.out");
    snprintf(full, sizeof full, "( %s ) > '%s' 2>&1", cmd, out);
    int rc = system(full);
    rc = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (rc != 0) {
        char *text = kvcal_test_read_file(out, NULL);
        fprintf(stderr, "\n  %s: exit %d:\n%s\n", cmd, rc, text ? text : "(no output)");
        free(text);
    }
    return rc;
}

/* Runs the consumer program `prog` on the scales file; 1 when it printed
 * that the file passes. */
static int consumer_passes(const char *prog, const char *scales)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s'", prog, scales);
    if (sh(cmd) != 0)
        return 0;
    char *out = kvcal_test_read_file(kvcal_test_path("sh.out"), NULL);
    const int ok = out && strstr(out, "legacy-json passes");
    if (!ok)
        fprintf(stderr, "\n  %s printed: %s\n", prog, out ? out : "(nothing)");
    free(out);
    return ok;
}

/* `make`, as a user runs it before installing: 1 when it built. */
static int make_all(void)
{
    char args[4096];
    snprintf(args, sizeof args, "BUILD='%s' all", kvcal_test_build_dir());
    return kvcal_test_make(args, kvcal_test_path("all.log")) == 0;
}

/* `make`, then `make install PREFIX=DIR`, then a program built through pkg-config alone
 * (PKG_CONFIG_PATH=DIR/lib/pkgconfig: its Cflags and Libs, the shared
 * library found through an rpath) and run. */
static void make_install_prefix_pc_builds_a_shared_program(void)
{
    const char *prefix = kvcal_test_path("prefix"),
               *scales = kvcal_test_path("scales.json");
    const char *prog = kvcal_test_path("consumer-shared");
    char args[4096], cmd[8192];
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(scales, scales_json, strlen(scales_json)),
                          0);
    CU_ASSERT_FATAL(make_all());
    snprintf(args, sizeof args, "BUILD='%s' PREFIX='%s' install", kvcal_test_build_dir(),
             prefix);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_make(args, kvcal_test_path("install.log")), 0);
    snprintf(cmd, sizeof cmd,
             "export PKG_CONFIG_PATH='%s/lib/pkgconfig' && cc " CONSUMER_FLAGS
             " -o '%s' tests/pkgconfig_consumer.c $(pkg-config --cflags --libs kvcal) "
             "-Wl,-rpath,'%s/lib' && readelf -d '%s' | grep -q 'NEEDED.*libkvcal.so.0'",
             prefix, prog, prefix, prog);
    CU_ASSERT_EQUAL_FATAL(sh(cmd), 0);
    CU_ASSERT(consumer_passes(prog, scales));
}

/* `make`, then `make install DESTDIR=STAGE PREFIX=/opt/kvcal`: the pkg-config file names
 * /opt/kvcal, where the files will be, not the staging folder; moved there
 * (here: --define-variable=prefix=STAGE/opt/kvcal) with the shared library
 * left out, `pkg-config --static` gives what links the archive, and the
 * program runs. */
static void make_install_destdir_pc_names_prefix_and_links_static(void)
{
    const char *stage = kvcal_test_path("stage"),
               *scales = kvcal_test_path("scales.json");
    const char *prog = kvcal_test_path("consumer-static");
    char args[4096], cmd[8192], pc[4096];
    CU_ASSERT_EQUAL_FATAL(kvcal_test_write_file(scales, scales_json, strlen(scales_json)),
                          0);
    CU_ASSERT_FATAL(make_all());
    snprintf(args, sizeof args, "BUILD='%s' DESTDIR='%s' PREFIX=/opt/kvcal install",
             kvcal_test_build_dir(), stage);
    CU_ASSERT_EQUAL_FATAL(kvcal_test_make(args, kvcal_test_path("install-destdir.log")),
                          0);
    snprintf(pc, sizeof pc, "%s/opt/kvcal/lib/pkgconfig/kvcal.pc", stage);
    char *text = kvcal_test_read_file(pc, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT(!strncmp(text, "prefix=/opt/kvcal\n", 18));
    CU_ASSERT_PTR_NULL(strstr(text, stage));
    free(text);
    snprintf(
        cmd, sizeof cmd,
        "rm -f '%s'/opt/kvcal/lib/libkvcal.so* && "
        "export PKG_CONFIG_PATH='%s/opt/kvcal/lib/pkgconfig' && cc " CONSUMER_FLAGS
        " -o '%s' tests/pkgconfig_consumer.c "
        "$(pkg-config --define-variable=prefix='%s/opt/kvcal' --static --cflags --libs "
        "kvcal) && ! readelf -d '%s' | grep -q 'NEEDED.*libkvcal'",
        stage, stage, prog, stage, prog);
    CU_ASSERT_EQUAL_FATAL(sh(cmd), 0);
    CU_ASSERT(consumer_passes(prog, scales));
}

static CU_TestInfo build_tests[] = {
    KVCAL_TEST(make_builds_example_and_bench_alone_in_a_fresh_build_dir),
    KVCAL_TEST(make_builds_sass_for_every_served_gpu_by_default),
    KVCAL_TEST(make_refuses_a_cuda_arch_that_names_no_target), CU_TEST_INFO_NULL};
KVCAL_SUITE(build, KVCAL_NEEDS_SOURCE, build_tests)

static CU_TestInfo install_tests[] = {
    KVCAL_TEST(make_install_prefix_pc_builds_a_shared_program),
    KVCAL_TEST(make_install_destdir_pc_names_prefix_and_links_static), CU_TEST_INFO_NULL};
KVCAL_SUITE(install, KVCAL_NEEDS_SOURCE | KVCAL_NEEDS_PKG_CONFIG, install_tests)
