/* io/path.h: the names of files: suffixes and parent directories. */
#ifndef KVCAL_IO_PATH_H
#define KVCAL_IO_PATH_H

#include <stddef.h>

/* 1 when path s ends with suffix (".safetensors"). */
int kvcal_path_has_suffix(const char *s, const char *suffix);

/* The directory holding path ("." for a bare name) into out (n bytes). */
void kvcal_path_parent(const char *path, char *out, size_t n);

#endif
