/* core/status.c: status strings and the thread-local last-error message. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[2048];

const char *kvcal_status_str(kvcal_status status)
{
    switch (status) {
    case KVCAL_OK: return "ok";
    case KVCAL_ERR_INVALID_ARG: return "invalid argument";
    case KVCAL_ERR_IO: return "I/O error";
    case KVCAL_ERR_PARSE: return "parse error";
    case KVCAL_ERR_FORMAT: return "invalid format";
    case KVCAL_ERR_MISMATCH: return "does not match the model";
    case KVCAL_ERR_NONFINITE: return "non-finite value";
    case KVCAL_ERR_NOMEM: return "out of memory";
    case KVCAL_ERR_UNSUPPORTED: return "unsupported";
    case KVCAL_ERR_NO_DEVICE: return "no CUDA device";
    case KVCAL_ERR_DEVICE_MEMORY: return "out of device memory";
    case KVCAL_ERR_CUDA: return "CUDA error";
    case KVCAL_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

const char *kvcal_last_error(void)
{
    return last_error;
}

void kvcal_clear_error(void)
{
    last_error[0] = '\0';
}

/* Keeps the message on one line: control characters that came in with
 * names from a file ("a\nb" as a JSON key) become '?'. */
static void keep_one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

kvcal_status kvcal_fail(kvcal_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    keep_one_line(last_error);
    return status;
}

kvcal_status kvcal_fail_context(kvcal_status status, const char *fmt, ...)
{
    char prefix[512];
    char old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof last_error)
        n = sizeof last_error - 1;
    memcpy(last_error, prefix, n);
    size_t room = sizeof last_error - 1 - n;
    size_t m = strnlen(old, room);
    memcpy(last_error + n, old, m);
    last_error[n + m] = '\0';
    keep_one_line(last_error);
    return status;
}
