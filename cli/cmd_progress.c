/* cli/cmd_progress.c: the progress line (see the header). It defines no
 * command of its own. */
#include "cli/cmd_progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_common.h"

void kvcal_cmd_progress_start(kvcal_cmd_progress *p, int quiet, double tty_interval_s)
{
    memset(p, 0, sizeof *p);
    p->t0 = p->last = kvcal_cmd_now_s();
    if (quiet) {
        p->mode = KVCAL_PROGRESS_OFF;
    } else if (isatty(STDERR_FILENO)) {
        p->mode = KVCAL_PROGRESS_TERMINAL;
        p->interval_s = tty_interval_s;
    } else {
        p->mode = KVCAL_PROGRESS_LINES;
        p->interval_s = KVCAL_PROGRESS_INTERVAL_S;
        const char *env = getenv("KVCAL_PROGRESS_INTERVAL");
        char *end;
        double v = env ? strtod(env, &end) : -1.0;
        if (env && end != env && !*end && v >= 0.0)
            p->interval_s = v;
    }
}

int kvcal_cmd_progress_update(kvcal_cmd_progress *p, int final, const char *fmt, ...)
{
    if (p->mode == KVCAL_PROGRESS_OFF)
        return 0;
    double now = kvcal_cmd_now_s();
    if (!final && now - p->last < p->interval_s)
        return 0;
    char line[sizeof p->line];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (final && !strcmp(line, p->line))
        return 0;
    p->last = now;
    memcpy(p->line, line, sizeof line);
    if (p->mode == KVCAL_PROGRESS_TERMINAL) {
        fprintf(stderr, "\r%s   ", line);
        p->shown = 1;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
    return 1;
}

void kvcal_cmd_progress_end(kvcal_cmd_progress *p)
{
    if (p->shown)
        fputc('\n', stderr);
    p->shown = 0;
}

double kvcal_cmd_progress_elapsed(const kvcal_cmd_progress *p)
{
    return kvcal_cmd_now_s() - p->t0;
}
