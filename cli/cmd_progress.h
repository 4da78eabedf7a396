/* cli/cmd_progress.h: the progress line of calibrate, eval and tokenize
 * on stderr. On a terminal one line rewritten in place (carriage return);
 * elsewhere (a batch job's log, CI, kubectl logs) a plain line every
 * interval_s seconds and one at the end, with no carriage return or escape
 * sequence; nothing with --quiet. Part of the kvcal program, not of the
 * library. */
#ifndef KVCAL_CALIB_CMD_PROGRESS_H
#define KVCAL_CALIB_CMD_PROGRESS_H

/* Seconds between two plain lines unless KVCAL_PROGRESS_INTERVAL says. */
#define KVCAL_PROGRESS_INTERVAL_S 10.0

typedef enum {
    KVCAL_PROGRESS_OFF,      /* --quiet */
    KVCAL_PROGRESS_TERMINAL, /* stderr is a terminal: one line, rewritten */
    KVCAL_PROGRESS_LINES     /* anything else: plain lines */
} kvcal_progress_mode;

typedef struct kvcal_cmd_progress {
    kvcal_progress_mode mode;
    double interval_s; /* least seconds between two lines */
    double t0, last;   /* start, last line (kvcal_cmd_now_s) */
    int shown;         /* a terminal line is on screen, not yet ended */
    char line[256];    /* the last line printed */
} kvcal_cmd_progress;

/* Starts the clock and picks the mode: off with quiet, terminal when stderr
 * is one (a line at most every tty_interval_s seconds), else plain lines
 * every $KVCAL_PROGRESS_INTERVAL seconds (a number >= 0; default
 * KVCAL_PROGRESS_INTERVAL_S). A caller (a test) may set interval_s after. */
void kvcal_cmd_progress_start(kvcal_cmd_progress *p, int quiet, double tty_interval_s);
/* Prints the line fmt, ... ("calibrate: 4/32 samples ...", no newline) when
 * one is due, and when final (the last state of a run) unless that very
 * line was the last one printed. Returns 1 when it printed. */
int kvcal_cmd_progress_update(kvcal_cmd_progress *p, int final, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends a terminal line with a newline (before the summary or an error). */
void kvcal_cmd_progress_end(kvcal_cmd_progress *p);
/* Seconds since kvcal_cmd_progress_start. */
double kvcal_cmd_progress_elapsed(const kvcal_cmd_progress *p);

#endif
