/* io/file_kind.h: what a path holds (a model, a scales file, statistics, a
 * token set), decided from its content, and what the safetensors of a
 * directory hold. `kvcal inspect` describes what this finds. */
#ifndef KVCAL_IO_FILE_KIND_H
#define KVCAL_IO_FILE_KIND_H

#include "kvcal.h"

typedef enum kvcal_file_kind {
    KVCAL_FILE_MODEL,
    KVCAL_FILE_SCALES,
    KVCAL_FILE_STATS,
    KVCAL_FILE_TOKENS_HDF5,
    KVCAL_FILE_TOKENS_JSONL
} kvcal_file_kind;

/* Decides what `path` holds into *kind: a checkpoint directory or
 * .safetensors beside a config.json, a config.json or llama2.c .bin (a
 * model); a directory or shard of k_scale / v_scale tensors alone, or a
 * JSON file of another kind (scales: the validator names what is wrong with
 * it); HDF5 of kvcal's statistics or token set; JSONL of input_ids. A path
 * that is none of them is an error naming what it is not (for a directory
 * of `calibrate --format all` outputs, which of them to give). */
kvcal_status kvcal_file_kind_detect(const char *path, kvcal_file_kind *kind);

/* 1 when a tensor name ends in k_scale or v_scale. */
int kvcal_is_scale_tensor_name(const char *name);

/* What the safetensors of a directory (or one file) hold, file by file, and
 * what its model.safetensors.index.json maps: the tensors of shards that are
 * not there. */
typedef struct kvcal_shard_census {
    int files;             /* .safetensors files present */
    int unreadable;        /* of them, files that do not open, kv_scales.safetensors
                              aside; finding: the first one's error */
    int scales_unreadable; /* kv_scales.safetensors is there and does not open */
    kvcal_status status;
    char finding[1024];
    int scale_tensors;     /* k_scale / v_scale tensors */
    long long params;      /* elements of every other tensor */
    int index_tensors;     /* weight_map entries, 0 without an index */
    int index_scales;      /* of them, k_scale / v_scale names */
    int index_elsewhere;   /* of them, mapped to a shard that is not in the directory */
    char elsewhere[256];   /* the first such shard */
    int elsewhere_several; /* they are in more than one shard */
} kvcal_shard_census;

/* The census of `path`: a directory (every *.safetensors in it and its
 * index) or one .safetensors file. */
void kvcal_shard_census_take(const char *path, kvcal_shard_census *c);

/* Holds KV scales and no model weights: its index maps only k_scale /
 * v_scale names, or the shards there hold only those (kvcal's own
 * `calibrate --format checkpoint` output, whose index also maps the
 * model's weights to shards that stay in the model's directory). */
int kvcal_shard_census_scales_only(const kvcal_shard_census *c);

#endif
