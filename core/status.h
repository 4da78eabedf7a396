/* core/status.h: status codes and the last-error message every module uses.
 *
 * Library functions return a kvcal_status and, on failure, record one line of
 * detail (file, place, fix) in a thread-local buffer read by
 * kvcal_last_error(). Nothing in the library prints or exits. */
#ifndef KVCAL_CORE_STATUS_H
#define KVCAL_CORE_STATUS_H

#include "kvcal.h"

/* Records a printf-style detail message for the calling thread and returns
 * `status` unchanged, so call sites read: return kvcal_fail(KVCAL_ERR_PARSE,
 * "%s: line %d: ...", path, line); */
kvcal_status kvcal_fail(kvcal_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the current detail message with a context string ("while
 * reading X: "), keeping the original detail. Returns `status`. */
kvcal_status kvcal_fail_context(kvcal_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the calling thread's detail message. */
void kvcal_clear_error(void);

#endif
