/* calib/main.c: the kvcal command-line front end; dispatches subcommands. */
#include <stdio.h>
#include <string.h>

#include "kvcal.h"
#include "calib/command.h"

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
    fprintf(f, "\n  --version        print the version\n"
               "\nexit codes: 0 ok, 1 invalid input or failed check, 2 usage or I/O error\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return KVCAL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return KVCAL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kvcal %s\n", kvcal_version());
        return KVCAL_EXIT_OK;
    }
    for (const struct command *c = commands; c->name; c++)
        if (!strcmp(argv[1], c->name))
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "kvcal: unknown command '%s' (try 'kvcal --help')\n", argv[1]);
    return KVCAL_EXIT_USAGE;
}
