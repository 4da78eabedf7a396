/* calib/cmd_common.c: helpers shared by the commands (see the header). It
 * defines no command of its own. */
#include "calib/cmd_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "calib/command.h"

int kvcal_cmd_parse_ll(const char *cmd, const char *opt, const char *text, long long lo,
                       long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || end == text || v < lo || v > hi) {
        if (hi >= KVCAL_CMD_INT_MAX)
            fprintf(stderr, "kvcal %s: %s '%s': expected an integer >= %lld\n", cmd, opt,
                    text, lo);
        else
            fprintf(stderr, "kvcal %s: %s '%s': expected an integer in [%lld, %lld]\n",
                    cmd, opt, text, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int kvcal_cmd_parse_int(const char *cmd, const char *opt, const char *text, int lo,
                        int hi, int *out)
{
    long long v;
    if (kvcal_cmd_parse_ll(cmd, opt, text, lo, hi, &v))
        return -1;
    *out = (int)v;
    return 0;
}

int kvcal_cmd_run_exit_code(kvcal_status st)
{
    return st == KVCAL_ERR_IO || st == KVCAL_ERR_NO_DEVICE || st == KVCAL_ERR_NOMEM
               ? KVCAL_EXIT_USAGE
               : KVCAL_EXIT_INVALID;
}

double kvcal_cmd_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
