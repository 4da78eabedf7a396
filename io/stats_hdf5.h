/* io/stats_hdf5.h: K/V statistics (observers/stats.h) to and from HDF5, so
 * a calibration can be inspected (h5dump, h5py), merged with another or
 * reduced again with another observer later.
 *
 * Layout (format "kvcal-stats", version 1):
 *   /                        attributes: format, format_version, tool_version,
 *                            num_layers, num_kv_heads, head_dim, num_bins,
 *                            hist_bins_per_octave, hist_min_exp, batches,
 *                            batch_start_tokens, architecture, model_type,
 *                            num_attention_heads, dataset, num_samples,
 *                            num_tokens, seed, observer, observer_params
 *   /hist_bin_edges          f64 (num_bins + 1): bin b holds |x| in
 *                            [edges[b], edges[b + 1]); edges[0] = 0, the
 *                            last edge is +inf
 *   /layers/<i>/k and /v     absmax        f32 (kv_heads, head_dim)
 *                            histogram     u64 (kv_heads, num_bins)
 *                            ema           f64 (kv_heads)
 *                            batch_absmax  f32 (kv_heads)
 *                            tokens        i64 scalar (tokens of layer i)
 *                            ema_tensor    f64 scalar (moving average of the
 *                                          layer's per-batch absmax over all
 *                                          heads; optional: files written
 *                                          before it read as the max of ema)
 *                            min, max      f32 (kv_heads, head_dim) the signed
 *                                          range (min <= 0 <= max), when the
 *                                          root attribute signed_range is 1
 *   /layers/<i>/q            absmax        f32 (num_q_heads) max |q| per query
 *                                          head after RoPE, when the root
 *                                          attribute num_q_heads is set
 * (num_experts, num_q_heads and signed_range are optional root attributes:
 * files without them read as statistics without those parts.)
 * Arrays are chunked and compressed (shuffle + deflate). Strings are
 * variable-length UTF-8. HDF5 1.10 file format (h5dump, h5py with HDF5 >=
 * 1.10). Not thread-safe (neither is serial HDF5). */
#ifndef KVCAL_IO_STATS_HDF5_H
#define KVCAL_IO_STATS_HDF5_H

#include "core/scales.h"
#include "observers/stats.h"

#define KVCAL_STATS_FORMAT_NAME "kvcal-stats"
#define KVCAL_STATS_FORMAT_VERSION 1

/* Writes stats to `path` atomically (a temporary beside it, renamed into
 * place; nothing is left behind on failure). model and prov may be NULL
 * (their attributes are then empty / 0). */
kvcal_status kvcal_stats_write_hdf5(const char *path, const kvcal_stats_t *stats,
                                    const kvcal_model_identity *model,
                                    const kvcal_provenance *prov);

/* Reads a file written by kvcal_stats_write_hdf5 into new statistics
 * (*out, owned by the caller, NULL on failure); model and prov (may be
 * NULL) receive the identity and provenance stored with them. Rejects other
 * formats, newer versions, other histogram layouts, wrong shapes and
 * non-finite or negative values, naming the file and the dataset. */
kvcal_status kvcal_stats_read_hdf5(const char *path, kvcal_stats_t **out,
                                   kvcal_model_identity *model, kvcal_provenance *prov);

#endif
