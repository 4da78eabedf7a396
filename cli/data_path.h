/* cli/data_path.h: where the files kvcal ships (the default calibration
 * text) are found, whether kvcal runs from its build tree or installed. */
#ifndef KVCAL_CALIB_DATA_PATH_H
#define KVCAL_CALIB_DATA_PATH_H

#include <stddef.h>

#include "kvcal.h"

/* Finds `rel` (e.g. "datasets/default_calibration.txt") in, in order:
 * $KVCAL_DATA_DIR, <exe dir>/../share/kvcal (installed), <exe dir>/.. and
 * <exe dir>/../.. (build trees), then the current directory. Writes the
 * first existing path into out (n bytes). The error lists where it looked
 * and suggests --dataset. */
kvcal_status kvcal_data_file_find(const char *rel, char *out, size_t n);

#endif
