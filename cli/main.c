/* cli/main.c: the kvcal command-line front end; dispatches subcommands. */
#include <stdio.h>
#include <string.h>

#include "kvcal.h"
#include "cli/command.h"
#include "calib/backends.h"
#include "core/device.h"
#include "io/hdf5_util.h"

#undef KVCAL_COMMAND
#define KVCAL_COMMAND(id, name, summary) int kvcal_cmd_##id(int argc, char **argv);
#include "commands.gen.h"
#undef KVCAL_COMMAND

struct command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

#define KVCAL_COMMAND(id, name, summary) {name, summary, kvcal_cmd_##id},
static const struct command commands[] = {
#include "commands.gen.h"
    {NULL, NULL, NULL},
};
#undef KVCAL_COMMAND

static void usage(FILE *f)
{
    fprintf(f, "usage: kvcal <command> [options]   (kvcal <command> --help)\n\n"
               "FP8 (e4m3) KV-cache scale calibration and checking.\n\ncommands:\n");
    for (const struct command *c = commands; c->name; c++)
        fprintf(f, "  %-16s %s\n", c->name, c->summary);
    fprintf(
        f, "\n  --version        print the version, the CUDA code the build holds and "
           "what runs on each GPU\n"
           "\nEach option of a command is given at most once (a second is refused).\n"
           "\nexit codes: 0 ok, 1 invalid input or failed check, 2 usage or I/O error\n");
}

/* The words of the build's target list that start with prefix ("sm_": SASS,
 * "compute_": PTX), space-separated, or "none". */
static void print_targets(const char *prefix)
{
    const char *sep = "";
    for (const char *w = kvcal_cuda_build_targets(); *w;) {
        const size_t len = strcspn(w, " ");
        if (!strncmp(w, prefix, strlen(prefix))) {
            printf("%s%.*s", sep, (int)len, w);
            sep = " ";
        }
        w += len + strspn(w + len, " ");
    }
    printf("%s", *sep ? "" : "none");
}

/* kvcal --version: the version, what the build holds for CUDA GPUs and, for
 * each GPU present, what runs there. */
static int print_version(void)
{
    printf("kvcal %s\n", kvcal_version());
    const int built = kvcal_cuda_build_version(), driver = kvcal_cuda_driver_version();
    if (!built) {
        printf("CUDA: none (a CPU-only build)\n");
        return KVCAL_EXIT_OK;
    }
    printf("CUDA: built with %d.%d; SASS ", built / 1000, built % 1000 / 10);
    print_targets("sm_");
    printf("; PTX ");
    print_targets("compute_");
    if (driver)
        printf("\ndriver: CUDA %d.%d\n", driver / 1000, driver % 1000 / 10);
    else
        printf("\ndriver: none\n");
    const int n = kvcal_cuda_device_count();
    if (n == 0)
        printf("devices: none visible\n");
    for (int i = 0; i < n; i++) {
        kvcal_cuda_device_plan p;
        if (kvcal_cuda_plan_device(i, &p) != KVCAL_OK) {
            printf("device %d: %s\n", i, kvcal_last_error());
            continue;
        }
        printf("device %d: %s, compute capability %d.%d, ", i, p.name, p.major, p.minor);
        if (p.code_kind == KVCAL_CUDA_CODE_NONE) {
            printf(
                "for which this build holds no code: rebuild with sm_%d%d in CUDA_ARCH\n",
                p.major, p.minor);
            continue;
        }
        printf("runs %s %s\n", p.code,
               p.code_kind == KVCAL_CUDA_CODE_SASS
                   ? "SASS"
                   : "PTX (compiled by the driver at load)");
        if (p.mlp_fused)
            printf(
                "  MLP: kvcal's fused gate/up + SwiGLU kernel where intermediate_size "
                "and hidden_size are multiples of 8 (FP8 weights: its FP8 twin, fp32 "
                "accumulation, for per-tensor or per-channel weight scales with per-token "
                "or static activations), cuBLAS GEMM + SwiGLU otherwise\n");
        else
            printf("  MLP: cuBLAS GEMM + SwiGLU (the fused kernel needs sm_90a code on a "
                   "compute capability 9.0 GPU)\n");
        printf("  experts (MoE): %s\n",
               p.mlp_fused ? "kvcal's sm_90a grouped GEMM (TMA + wgmma), SwiGLU fused"
                           : "kvcal's sm_80 grouped GEMM (WMMA) + SwiGLU");
        printf("  FP8 weights: %s\n", kvcal_cuda_fp8_plan(p.major, p.minor));
        if (p.cudnn_version)
            printf(
                "  attention: cuDNN %d.%d.%d fused flash attention where cuDNN takes the "
                "shape, kvcal's kernel otherwise\n",
                p.cudnn_version / 10000, p.cudnn_version % 10000 / 100,
                p.cudnn_version % 100);
        else
            printf("  attention: kvcal's kernel (%s)\n", p.attention_note);
    }
    return KVCAL_EXIT_OK;
}

int main(int argc, char **argv)
{
    kvcal_h5_quiet_process(); /* every HDF5 failure is reported in one line */
    if (argc < 2) {
        usage(stderr);
        return KVCAL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version"))
        return print_version();
    for (const struct command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name))
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "kvcal: unknown command '%s' (try 'kvcal --help')\n", argv[1]);
    return KVCAL_EXIT_USAGE;
}
