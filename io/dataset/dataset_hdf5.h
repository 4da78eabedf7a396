/* io/dataset/dataset_hdf5.h: the reader of HDF5 token sets (not installed). */
#ifndef KVCAL_IO_DATASET_DATASET_HDF5_H
#define KVCAL_IO_DATASET_DATASET_HDF5_H

#include "io/dataset/doclist.h"
#include "kvcal.h"

/* The rows of the HDF5 token set at path as id documents (each row cut at
 * its length), appended to l. */
kvcal_status kvcal_dataset_read_hdf5(const char *path, kvcal_doclist *l);

#endif
