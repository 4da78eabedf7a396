/* io/report/report_html.h: the calibration report, one self-contained HTML
 * file (inline CSS and SVG, no script, no network: a Content-Security-Policy
 * forbids every load) that a browser on any OS reads offline.
 *
 * What it holds, each figure a <figure id="fig-..."> whose data cells are
 * SVG elements of class "cell" with the value in data-value (%.9g: a float
 * reads back identical) and in a <title> (the browser's tooltip):
 *   provenance (model, data, tokens, observer, versions, the input files);
 *   warnings (<li class="warning" data-kind="unit-scale" | "never-seen" |
 *     "clip" | "eval-clip" | "eval-nonfinite">);
 *   with scales: heatmaps per layer x kv head of K and V absmax
 *     (fig-k-absmax, fig-v-absmax; when the scales hold absmax) and of the
 *     scales (fig-k-scale, fig-v-scale), each with a colour legend; the
 *     per-layer K and V absmax with 448 x the written scale marked
 *     (fig-layer-absmax, 2 cells a layer) and the fraction that clips under
 *     it (fig-layer-clip, 2 a layer; from the scales' k_clip / v_clip, else
 *     from the statistics); a table of those numbers (table#layer-table);
 *   with statistics: the per-channel absmax of the three (layer, K or V)
 *     whose largest channel stands furthest above their mean
 *     (fig-channels-k-<layer> / fig-channels-v-<layer>, kv heads x head_dim
 *     cells), and the |x| histogram of one layer with the e4m3 range of
 *     its scale marked (fig-hist-k, fig-hist-v, 8 bins an octave);
 *   with an eval report (`kvcal eval --json`): its table (table#eval-table,
 *     a row a mode), the perplexity change per mode (fig-eval-ppl, a cell a
 *     mode other than baseline with a finite change) and the K and V SQNR
 *     per mode x layer (fig-eval-k-sqnr, fig-eval-v-sqnr). */
#ifndef KVCAL_IO_REPORT_REPORT_HTML_H
#define KVCAL_IO_REPORT_REPORT_HTML_H

#include <cjson/cJSON.h>

#include "core/scales.h"
#include "observers/stats.h"

/* Default of clip_threshold: a layer whose K or V clips more than 0.1% is
 * a warning. */
#define KVCAL_REPORT_CLIP_THRESHOLD 1e-3

/* What the report is made of; every pointer is borrowed for the call. */
typedef struct kvcal_report_html_inputs {
    const kvcal_scales_t *scales; /* NULL: an eval report alone (eval required) */
    const char *scales_path;      /* named in the provenance; NULL: not shown */
    const kvcal_stats_t *stats;   /* NULL: no channel or histogram figures;
                                     its layers and kv heads must be the scales' */
    const char *stats_path;
    const cJSON *eval;     /* the JSON `kvcal eval --json` prints, or NULL */
    const char *eval_path; /* names it in messages and the provenance */
    int hist_layer;        /* layer of the histograms; -1: the layer of
                              the largest K absmax */
    double clip_threshold; /* a layer clipping more (a fraction in
                              [0, 1]) is a warning */
} kvcal_report_html_inputs;

/* Checks the inputs (an eval report of the wrong shape, statistics of
 * another model, a layer out of range: KVCAL_ERR_FORMAT / _MISMATCH /
 * _INVALID_ARG naming the file and the place) and writes the report to
 * path atomically (io/atomic_file: a temporary renamed into place, kept
 * for the batch's commit while a batch is open). Nothing is written when a
 * check fails. */
kvcal_status kvcal_report_html_write(const char *path,
                                     const kvcal_report_html_inputs *in);

#endif
