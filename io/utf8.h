/* io/utf8.h: well-formed UTF-8 (RFC 3629), for every reader of text. */
#ifndef KVCAL_IO_UTF8_H
#define KVCAL_IO_UTF8_H

#include <stddef.h>

/* Length of the UTF-8 character starting at s[0] (at most n bytes), or 0 when
 * s does not start a well-formed UTF-8 character (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF). */
size_t kvcal_utf8_char_len(const unsigned char *s, size_t n);
/* Offset of the first byte that is not well-formed UTF-8, or n when all are. */
size_t kvcal_utf8_check(const char *s, size_t n);

#endif
