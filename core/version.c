/* core/version.c: library version. */
#include "kvcal.h"

const char *kvcal_version(void)
{
    return KVCAL_VERSION_STRING;
}
