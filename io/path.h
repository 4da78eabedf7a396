/* io/path.h: the names of files: suffixes, joining, parent directories. */
#ifndef KVCAL_IO_PATH_H
#define KVCAL_IO_PATH_H

#include <stddef.h>

/* 1 when path s ends with suffix (".safetensors"). */
int kvcal_path_has_suffix(const char *s, const char *suffix);

/* "<dir>/<name>" into buf without doubling a slash dir ends with. Returns 0,
 * or -1 when it does not fit in n bytes. */
int kvcal_path_join(char *buf, size_t n, const char *dir, const char *name);
/* The directory part of path (trailing slashes ignored; "." when there is
 * none) into buf, cut to n bytes. */
void kvcal_path_dirname(const char *path, char *buf, size_t n);

#endif
