/* kvcal_base.h: what every header of libkvcal's API shares: the version,
 * the export macro, status codes and the last error, the scale granularity.
 * Included by kvcal.h and kvcal_quant.h; the conventions stated in kvcal.h
 * apply. */
#ifndef KVCAL_BASE_H
#define KVCAL_BASE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions libkvcal exports; the library is built with every
 * other symbol hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define KVCAL_API __attribute__((visibility("default")))
#else
#define KVCAL_API
#endif

#define KVCAL_VERSION_MAJOR 0
#define KVCAL_VERSION_MINOR 1
#define KVCAL_VERSION_PATCH 0
#define KVCAL_VERSION_STRING "0.1.0"

/* --- status ------------------------------------------------------------ */

/* Values only ever grow at the end. */
typedef enum kvcal_status {
    KVCAL_OK = 0,
    KVCAL_ERR_INVALID_ARG = 1,    /* a caller passed a bad argument */
    KVCAL_ERR_IO = 2,             /* a file could not be opened, read or written */
    KVCAL_ERR_PARSE = 3,          /* not JSON / not safetensors / truncated */
    KVCAL_ERR_FORMAT = 4,         /* parsed, but breaks the format's rules */
    KVCAL_ERR_MISMATCH = 5,       /* valid, but does not fit the model / TP size */
    KVCAL_ERR_NONFINITE = 6,      /* NaN or Inf where a finite value is needed */
    KVCAL_ERR_NOMEM = 7,          /* host allocation failed */
    KVCAL_ERR_UNSUPPORTED = 8,    /* architecture, dtype or option not supported */
    KVCAL_ERR_NO_DEVICE = 9,      /* no CUDA device, or built without CUDA */
    KVCAL_ERR_DEVICE_MEMORY = 10, /* cudaMalloc failed */
    KVCAL_ERR_CUDA = 11,          /* any other CUDA / cuBLAS failure */
    KVCAL_ERR_INTERRUPTED = 12    /* stopped on request (a signal) */
} kvcal_status;

/* Static string naming the status ("parse error"); never NULL. */
KVCAL_API const char *kvcal_status_str(kvcal_status status);

/* One-line detail of the calling thread's last failure ("" if none). */
KVCAL_API const char *kvcal_last_error(void);

/* "0.1.0" */
KVCAL_API const char *kvcal_version(void);

/* Number of usable CUDA devices; 0 when built without CUDA or when none. */
KVCAL_API int kvcal_cuda_device_count(void);

/* Granularity of a scale set. Values reach disk only as strings. */
typedef enum kvcal_granularity {
    KVCAL_GRANULARITY_TENSOR = 0, /* one K and one V scale per layer */
    KVCAL_GRANULARITY_HEAD = 1    /* one K and one V scale per layer and kv head */
} kvcal_granularity;

#ifdef __cplusplus
}
#endif

#endif
