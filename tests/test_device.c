/* tests/test_device.c: which of the build's CUDA code a GPU runs, the
 * kernels the CUDA runner chooses from it, and what `kvcal --version` says;
 * no GPU needed (the choices are pure functions of the GPU's compute
 * capability and the build's targets). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/backends.h"
#include "core/device.h"
#include "tests/test_util.h"

/* The target list `make` builds by default (the Makefile's CUDA_ARCH). */
#define FAT "sm_80 sm_86 sm_89 sm_90a sm_100 sm_103 sm_110 sm_120 sm_121 compute_121"

/* kvcal_cuda_code_for_device(targets, major, minor) is kind and code. */
static int runs(const char *targets, int major, int minor, kvcal_cuda_code_kind kind,
                const char *code)
{
    char got[32];
    const kvcal_cuda_code_kind k =
        kvcal_cuda_code_for_device(targets, major, minor, got, sizeof got);
    const int ok = k == kind && !strcmp(got, code);
    if (!ok)
        fprintf(stderr, "\n  \"%s\" on %d.%d: kind %d \"%s\", want %d \"%s\"", targets,
                major, minor, (int)k, got, (int)kind, code);
    return ok;
}

/* SASS runs within its major version on GPUs of the same or a higher
 * minor, the highest such first; an "a" target on its own capability
 * alone; PTX on every GPU of the same or a higher capability, but only
 * where no SASS runs. */
static void cuda_code_for_device_follows_the_drivers_rule(void)
{
    CU_ASSERT(runs(FAT, 8, 0, KVCAL_CUDA_CODE_SASS, "sm_80"));
    CU_ASSERT(runs(FAT, 8, 6, KVCAL_CUDA_CODE_SASS, "sm_86"));
    CU_ASSERT(runs(FAT, 8, 7, KVCAL_CUDA_CODE_SASS, "sm_86"));
    CU_ASSERT(runs(FAT, 8, 9, KVCAL_CUDA_CODE_SASS, "sm_89"));
    CU_ASSERT(runs(FAT, 9, 0, KVCAL_CUDA_CODE_SASS, "sm_90a"));
    CU_ASSERT(runs(FAT, 10, 0, KVCAL_CUDA_CODE_SASS, "sm_100"));
    CU_ASSERT(runs(FAT, 10, 3, KVCAL_CUDA_CODE_SASS, "sm_103"));
    CU_ASSERT(runs(FAT, 11, 0, KVCAL_CUDA_CODE_SASS, "sm_110"));
    CU_ASSERT(runs(FAT, 12, 0, KVCAL_CUDA_CODE_SASS, "sm_120"));
    CU_ASSERT(runs(FAT, 12, 1, KVCAL_CUDA_CODE_SASS, "sm_121"));
    CU_ASSERT(runs(FAT, 13, 0, KVCAL_CUDA_CODE_PTX, "compute_121"));
    CU_ASSERT(runs(FAT, 7, 5, KVCAL_CUDA_CODE_NONE, ""));
    /* the build before the fat binary: Hopper alone */
    const char *hopper = "sm_90a compute_90a";
    CU_ASSERT(runs(hopper, 9, 0, KVCAL_CUDA_CODE_SASS, "sm_90a"));
    CU_ASSERT(runs(hopper, 8, 0, KVCAL_CUDA_CODE_NONE, ""));
    CU_ASSERT(runs(hopper, 10, 0, KVCAL_CUDA_CODE_NONE, ""));
    CU_ASSERT(runs(hopper, 12, 0, KVCAL_CUDA_CODE_NONE, ""));
    CU_ASSERT(runs("compute_90a", 9, 0, KVCAL_CUDA_CODE_PTX, "compute_90a"));
    CU_ASSERT(runs("sm_80 compute_80", 9, 0, KVCAL_CUDA_CODE_PTX, "compute_80"));
    CU_ASSERT(runs("sm_80 compute_80", 8, 9, KVCAL_CUDA_CODE_SASS, "sm_80"));
    CU_ASSERT(runs("sm_90 sm_90a", 9, 0, KVCAL_CUDA_CODE_SASS, "sm_90a"));
    CU_ASSERT(runs("sm_100f sm_100a", 10, 3, KVCAL_CUDA_CODE_SASS, "sm_100f"));
    CU_ASSERT(runs("compute_100f", 12, 0, KVCAL_CUDA_CODE_NONE, ""));
    CU_ASSERT(runs("compute_100f", 10, 3, KVCAL_CUDA_CODE_PTX, "compute_100f"));
    CU_ASSERT(runs("  sm_86\tbogus sm_ sm_8 compute_x sm_80b  ", 8, 6,
                   KVCAL_CUDA_CODE_SASS, "sm_86"));
    CU_ASSERT(runs("", 9, 0, KVCAL_CUDA_CODE_NONE, ""));
}

/* The fused gate/up + SwiGLU kernel only where the GPU is 9.0 and runs
 * sm_90a code, the model's widths fit and KVCAL_MLP does not say unfused;
 * KVCAL_MLP=fused elsewhere is an error naming the GPU and its code. */
static void cuda_mlp_fuses_only_on_9_0_running_sm90a_code(void)
{
    int fused = -1;
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "sm_90a", 14336, 4096, KVCAL_MLP_AUTO, &fused),
        KVCAL_OK);
    CU_ASSERT_EQUAL(fused, 1);
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "compute_90a", 256, 64, KVCAL_MLP_FUSED, &fused),
        KVCAL_OK);
    CU_ASSERT_EQUAL(fused, 1);
    /* DeepSeek-V2-Lite's dense MLP: 10944 = 85 x 128 + 64, the last block padded */
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "sm_90a", 10944, 2048, KVCAL_MLP_AUTO, &fused),
        KVCAL_OK);
    CU_ASSERT_EQUAL(fused, 1);
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "sm_90a", 14336, 4096, KVCAL_MLP_UNFUSED, &fused),
        KVCAL_OK);
    CU_ASSERT_EQUAL(fused, 0);
    static const struct {
        int major, minor;
        const char *code;
        int I, D;
    } unfused[] = {{8, 0, "sm_80", 14336, 4096},   {8, 6, "sm_86", 14336, 4096},
                   {8, 9, "sm_89", 14336, 4096},   {10, 0, "sm_100", 14336, 4096},
                   {12, 0, "sm_120", 14336, 4096}, {9, 0, "compute_80", 14336, 4096},
                   {9, 0, "sm_90", 14336, 4096},   {9, 0, "", 14336, 4096},
                   {9, 0, "sm_90a", 172, 64},      {9, 0, "sm_90a", 256, 60},
                   {13, 0, "compute_121", 256, 64}};
    for (size_t i = 0; i < sizeof unfused / sizeof unfused[0]; i++) {
        fused = -1;
        CU_ASSERT_EQUAL(kvcal_cuda_mlp_choose(unfused[i].major, unfused[i].minor,
                                              unfused[i].code, unfused[i].I, unfused[i].D,
                                              KVCAL_MLP_AUTO, &fused),
                        KVCAL_OK);
        CU_ASSERT_EQUAL(fused, 0);
    }
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(8, 6, "sm_86", 256, 64, KVCAL_MLP_FUSED, &fused),
        KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("needs a Hopper GPU"));
    CU_ASSERT(kvcal_test_error_has("8.6, running sm_86"));
    CU_ASSERT_EQUAL(fused, 0);
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "compute_80", 256, 64, KVCAL_MLP_FUSED, &fused),
        KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("9.0, running compute_80"));
    CU_ASSERT_EQUAL(kvcal_cuda_mlp_choose(9, 0, "", 256, 64, KVCAL_MLP_FUSED, &fused),
                    KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("running no code of this build"));
    CU_ASSERT_EQUAL(
        kvcal_cuda_mlp_choose(9, 0, "sm_90a", 172, 64, KVCAL_MLP_FUSED, &fused),
        KVCAL_ERR_UNSUPPORTED);
    CU_ASSERT(kvcal_test_error_has("this model: 172 and 64"));
}

/* What the build says it holds: a list of targets in a CUDA build, of
 * which the GPUs engines serve on run SASS; nothing without CUDA. */
static void cuda_build_targets_describe_this_build(void)
{
    const char *t = kvcal_cuda_build_targets();
#ifdef KVCAL_WITH_CUDA
    char code[32];
    CU_ASSERT(t[0] != '\0');
    CU_ASSERT(kvcal_cuda_build_version() >= 12000);
    for (const char *w = t; *w; w += strcspn(w, " "), w += strspn(w, " ")) {
        const int len = (int)strcspn(w, " ");
        CU_ASSERT(!strncmp(w, "sm_", 3) || !strncmp(w, "compute_", 8));
        if (!strncmp(w, "sm_", 3)) {
            const int cap = atoi(w + 3);
            CU_ASSERT_EQUAL(
                kvcal_cuda_code_for_device(t, cap / 10, cap % 10, code, sizeof code),
                KVCAL_CUDA_CODE_SASS);
            CU_ASSERT(!strncmp(code, w, (size_t)len));
        }
    }
#else
    CU_ASSERT_STRING_EQUAL(t, "");
    CU_ASSERT_EQUAL(kvcal_cuda_build_version(), 0);
    CU_ASSERT_EQUAL(kvcal_cuda_driver_version(), 0);
#endif
}

/* kvcal --version: the version first, then what the build holds (the CUDA
 * it was built with, its SASS and PTX targets) and, per GPU present, its
 * name, capability, the code it runs and the kernels chosen there. */
static void version_says_what_the_build_holds(void)
{
    char *out = NULL, want[512];
    CU_ASSERT_EQUAL_FATAL(kvcal_test_run_kvcal("--version", &out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    snprintf(want, sizeof want, "kvcal %s\n", kvcal_version());
    CU_ASSERT(!strncmp(out, want, strlen(want)));
#ifdef KVCAL_WITH_CUDA
    const int v = kvcal_cuda_build_version();
    snprintf(want, sizeof want, "CUDA: built with %d.%d; SASS ", v / 1000, v % 1000 / 10);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    const char *t = kvcal_cuda_build_targets();
    for (const char *w = t; *w; w += strcspn(w, " "), w += strspn(w, " ")) {
        snprintf(want, sizeof want, "%.*s", (int)strcspn(w, " "), w);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "; PTX "));
    const int n = kvcal_cuda_device_count();
    if (n == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "devices: none visible\n"));
    for (int i = 0; i < n; i++) {
        kvcal_cuda_device_plan p;
        CU_ASSERT_EQUAL_FATAL(kvcal_cuda_plan_device(i, &p), KVCAL_OK);
        snprintf(want, sizeof want, "device %d: %s, compute capability %d.%d, ", i,
                 p.name, p.major, p.minor);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
        if (p.code_kind != KVCAL_CUDA_CODE_NONE) {
            snprintf(want, sizeof want, "runs %s ", p.code);
            CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
            CU_ASSERT_PTR_NOT_NULL(strstr(out, p.mlp_fused
                                                   ? "  MLP: kvcal's fused"
                                                   : "  MLP: cuBLAS GEMM + SwiGLU"));
            CU_ASSERT_PTR_NOT_NULL(strstr(out, p.mlp_fused
                                                   ? "  experts (MoE): kvcal's sm_90a"
                                                   : "  experts (MoE): kvcal's sm_80"));
            CU_ASSERT_PTR_NOT_NULL(strstr(out, "  attention: "));
        }
    }
#else
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "CUDA: none (a CPU-only build)\n"));
#endif
    free(out);
}

static CU_TestInfo tests[] = {KVCAL_TEST(cuda_code_for_device_follows_the_drivers_rule),
                              KVCAL_TEST(cuda_mlp_fuses_only_on_9_0_running_sm90a_code),
                              KVCAL_TEST(cuda_build_targets_describe_this_build),
                              KVCAL_TEST(version_says_what_the_build_holds),
                              CU_TEST_INFO_NULL};
KVCAL_SUITE(device, KVCAL_NEEDS_NOTHING, tests)
