/* io/checkpoint/safetensors.h: safetensors files (read by mmap, write atomically) and
 * Hugging Face checkpoints made of one or more of them.
 *
 * Every offset, shape and dtype in a header is checked against the file size
 * before any tensor is exposed; a bad file gives KVCAL_ERR_PARSE/FORMAT and a
 * one-line message naming the file and the tensor. */
#ifndef KVCAL_IO_SAFETENSORS_H
#define KVCAL_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kvcal.h"

#define KVCAL_MAX_DIMS 8

/* Element types: kvcal_dtype of include/kvcal_quant.h (F32 ... U64). */

/* Largest header the reader accepts, as the reference implementation. */
#define KVCAL_SAFETENSORS_MAX_HEADER 100000000u

/* "BF16" etc.; NULL for an unknown value. */
const char *kvcal_dtype_name(kvcal_dtype dtype);
/* Parses a safetensors dtype string; returns 0 and sets *out, or -1. */
int kvcal_dtype_parse(const char *name, kvcal_dtype *out);
/* Bytes per element; 0 for an unknown value. */
size_t kvcal_dtype_size(kvcal_dtype dtype);

/* One tensor of an open file. data points into the mapping and may be
 * unaligned (read it with memcpy or kvcal_tensor_to_f32). */
typedef struct kvcal_tensor_info {
    const char *name;
    kvcal_dtype dtype;
    int ndim;
    int64_t shape[KVCAL_MAX_DIMS];
    int64_t numel;
    const void *data;
    size_t nbytes;
} kvcal_tensor_info;

/* The shape of t as "[2, 3]" (for messages), cut to cap bytes. */
void kvcal_tensor_shape_str(const kvcal_tensor_info *t, char *buf, size_t cap);

/* --- one file ------------------------------------------------------------ */

typedef struct kvcal_safetensors kvcal_safetensors_t;

/* Maps `path` read-only and parses its header. The header must follow the
 * reference implementation's rules: length <= KVCAL_SAFETENSORS_MAX_HEADER,
 * a JSON object, known dtypes, data_offsets that tile the data section
 * exactly (no gap, no overlap, nothing after the last tensor), sizes equal to
 * numel x dtype size, `__metadata__` a map of strings. *out = NULL on
 * failure. */
kvcal_status kvcal_safetensors_open(const char *path, kvcal_safetensors_t **out);

/* Parses a whole safetensors image held in memory (used by the fuzzer and by
 * open). `buf` must outlive the result; `name` is used in messages. */
kvcal_status kvcal_safetensors_parse(const void *buf, size_t len, const char *name,
                                     kvcal_safetensors_t **out);

/* Unmaps and frees; NULL is a no-op. Tensor infos die with it. */
void kvcal_safetensors_close(kvcal_safetensors_t *st);

int kvcal_safetensors_count(const kvcal_safetensors_t *st);
const kvcal_tensor_info *kvcal_safetensors_at(const kvcal_safetensors_t *st, int i);
/* NULL when absent. */
const kvcal_tensor_info *kvcal_safetensors_find(const kvcal_safetensors_t *st,
                                                const char *name);
/* The "__metadata__" object as JSON text, or NULL when absent. */
const char *kvcal_safetensors_metadata(const kvcal_safetensors_t *st);

/* Converts any floating dtype (F32, F16, BF16, F8_E4M3, F8_E5M2, F64) to
 * float32. dst holds t->numel floats. Other dtypes: KVCAL_ERR_UNSUPPORTED. */
kvcal_status kvcal_tensor_to_f32(const kvcal_tensor_info *t, float *dst);

/* A tensor to write. data holds numel * kvcal_dtype_size(dtype) bytes. */
typedef struct kvcal_tensor_out {
    const char *name;
    kvcal_dtype dtype;
    int ndim;
    int64_t shape[KVCAL_MAX_DIMS];
    const void *data;
} kvcal_tensor_out;

/* Writes a safetensors file atomically (temp file + rename), tensors in the
 * given order, compact header padded with spaces to a multiple of 8 bytes
 * as the reference writer does. metadata_json is a JSON object of string
 * values or NULL. Names must be unique and not "__metadata__". */
kvcal_status kvcal_safetensors_write(const char *path, const kvcal_tensor_out *tensors,
                                     int count, const char *metadata_json);

/* --- a checkpoint directory (model.safetensors or sharded with
 *     model.safetensors.index.json) --------------------------------------- */

typedef struct kvcal_checkpoint kvcal_checkpoint_t;

/* Opens every shard of the checkpoint in `dir` (or a single .safetensors
 * file path). Shards are mapped, not read. In a directory:
 * model.safetensors.index.json (every distinct shard of its weight_map
 * opened once; each mapped tensor must be in its shard), else
 * model.safetensors, else the only *.safetensors file. A tensor name held
 * by two shards is an error. *out = NULL on failure. */
kvcal_status kvcal_checkpoint_open(const char *dir, kvcal_checkpoint_t **out);
/* NULL is a no-op. */
void kvcal_checkpoint_close(kvcal_checkpoint_t *ck);

/* NULL when absent. */
const kvcal_tensor_info *kvcal_checkpoint_find(const kvcal_checkpoint_t *ck,
                                               const char *name);
/* Tensors of all shards: shards in file-name order, each in header order. */
int kvcal_checkpoint_count(const kvcal_checkpoint_t *ck);
const kvcal_tensor_info *kvcal_checkpoint_at(const kvcal_checkpoint_t *ck, int i);
/* Path of the shard holding tensor i (owned by ck). */
const char *kvcal_checkpoint_shard_of(const kvcal_checkpoint_t *ck, int i);

#endif
