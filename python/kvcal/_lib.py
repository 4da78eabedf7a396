"""The C library, found and declared once: libkvcal.so through ctypes.

Where it is looked for, in order (the first that loads wins):
  1. the path in $KVCAL_LIBRARY;
  2. libkvcal.so next to this package (a copy placed there);
  3. the libdir of `pkg-config kvcal` (after `make install`);
  4. the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig).
"""
import ctypes
import os
import subprocess

# --- enums and structs of include/kvcal_quant.h ---------------------------

OK = 0
ERR_NONFINITE = 6
STATUS_NAMES = {
    0: "ok", 1: "invalid argument", 2: "I/O error", 3: "parse error",
    4: "format error", 5: "mismatch", 6: "non-finite value", 7: "out of memory",
    8: "unsupported", 9: "no device", 10: "device memory", 11: "CUDA error",
}

DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_F8_E4M3 = 0, 1, 2, 3
DTYPE_I32, DTYPE_I64, DTYPE_U8, DTYPE_I8 = 4, 5, 7, 8
CACHE_NHD, CACHE_HND = 0, 1
GRANULARITY_TENSOR, GRANULARITY_HEAD = 0, 1
FORMAT_LEGACY_JSON, FORMAT_KVCAL_JSON, FORMAT_CHECKPOINT = 1, 2, 3
FORMAT_MODELOPT, FORMAT_QUARK, FORMAT_KV_SCALE, FORMAT_TRTLLM = 4, 5, 6, 7
# kvcal_kv_format, kvcal_kv_rounding
KV_FP8_E4M3, KV_FP8_E5M2, KV_INT8, KV_INT8_ASYM, KV_NVFP4 = 0, 1, 2, 3, 4
ROUND_NEAREST_EVEN, ROUND_TOWARD_ZERO = 0, 1


class KvBatch(ctypes.Structure):
    _fields_ = [
        ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("dtype", ctypes.c_int),
        ("num_tokens", ctypes.c_int64),
        ("k_token_stride", ctypes.c_int64), ("k_head_stride", ctypes.c_int64),
        ("v_token_stride", ctypes.c_int64), ("v_head_stride", ctypes.c_int64),
        ("slot_mapping", ctypes.c_void_p),
    ]


class KvCache(ctypes.Structure):
    _fields_ = [
        ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
        ("num_blocks", ctypes.c_int64), ("block_size", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("block_stride", ctypes.c_int64), ("layout", ctypes.c_int),
    ]


class KvQParams(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_int), ("rounding", ctypes.c_int), ("granularity", ctypes.c_int),
        ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
        ("k_zero", ctypes.c_void_p), ("v_zero", ctypes.c_void_p),
        ("k_zero_cache", ctypes.c_void_p), ("v_zero_cache", ctypes.c_void_p),
    ]


class Finding(ctypes.Structure):
    _fields_ = [("severity", ctypes.c_int), ("place", ctypes.c_char_p),
                ("message", ctypes.c_char_p), ("consequence", ctypes.c_char_p)]


def _candidates():
    env = os.environ.get("KVCAL_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libkvcal.so")
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "kvcal"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if libdir:
            yield os.path.join(libdir, "libkvcal.so")
    except (OSError, subprocess.SubprocessError):
        pass
    yield "libkvcal.so.0"
    yield "libkvcal.so"


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "kvcal: libkvcal.so not found; tried " + "; ".join(tried) +
        ". Build it (make) and set KVCAL_LIBRARY=/path/to/libkvcal.so, or `make install` "
        "it where pkg-config finds kvcal.pc")


lib, path = _load()

_P = ctypes.c_void_p
_I = ctypes.c_int
_S = ctypes.c_char_p
_F = ctypes.c_float
_PP = ctypes.POINTER(ctypes.c_void_p)
_PF = ctypes.POINTER(ctypes.c_float)
_PI64 = ctypes.POINTER(ctypes.c_int64)
_PSZ = ctypes.POINTER(ctypes.c_size_t)
_PB = ctypes.POINTER(KvBatch)
_PC = ctypes.POINTER(KvCache)
_PQ = ctypes.POINTER(KvQParams)
_I64 = ctypes.c_int64

_SIGNATURES = {
    "kvcal_status_str": (_S, [_I]),
    "kvcal_last_error": (_S, []),
    "kvcal_version": (_S, []),
    "kvcal_cuda_device_count": (_I, []),
    # scales
    "kvcal_scales_create": (_I, [_I, _I, _PP]),
    "kvcal_scales_destroy": (None, [_P]),
    "kvcal_scales_num_layers": (_I, [_P]),
    "kvcal_scales_num_kv_heads": (_I, [_P]),
    "kvcal_scales_granularity": (_I, [_P]),
    "kvcal_scales_get_head": (_I, [_P, _I, _I, _PF, _PF]),
    "kvcal_scales_get_tensor": (_I, [_P, _I, _PF, _PF]),
    "kvcal_scales_set_head": (_I, [_P, _I, _I, _F, _F]),
    "kvcal_scales_set_layer": (_I, [_P, _I, _F, _F]),
    "kvcal_scales_set_layer_heads": (_I, [_P, _I, _PF, _PF]),
    "kvcal_scales_set_q": (_I, [_P, _I, _F]),
    "kvcal_scales_get_q": (_I, [_P, _I, _PF]),
    "kvcal_scales_set_granularity": (_I, [_P, _I]),
    "kvcal_scales_set_model": (_I, [_P, _S, _S, _I, _I]),
    "kvcal_scales_load": (_I, [_S, _S, _I, _PP]),
    "kvcal_scales_write": (_I, [_P, _I, _S, _S, _I]),
    "kvcal_format_name": (_S, [_I]),
    "kvcal_scales_validate_file": (_I, [_S, _S, _I, _PP]),
    "kvcal_report_destroy": (None, [_P]),
    "kvcal_report_format": (_I, [_P]),
    "kvcal_report_count": (_I, [_P]),
    "kvcal_report_get": (_I, [_P, _I, ctypes.POINTER(Finding)]),
    "kvcal_report_passes": (_I, [_P, _I]),
    # online quantization
    "kvcal_kv_quantize_static_ref": (_I, [_PB, _PC, _I, _P, _P]),
    "kvcal_kv_quantize_static_launch": (_I, [_PB, _PC, _I, _P, _P, _P]),
    "kvcal_kv_quantize_dynamic_ref": (_I, [_PB, _PC]),
    "kvcal_kv_quantize_dynamic_launch": (_I, [_PB, _PC, _P]),
    "kvcal_kv_scaler_create": (_I, [_I, _I, _F, _I, _PP]),
    "kvcal_kv_scaler_destroy": (None, [_P]),
    "kvcal_kv_scaler_quantize_ref": (_I, [_P, _PB, _PC]),
    "kvcal_kv_scaler_quantize_launch": (_I, [_P, _PB, _PC, _P]),
    "kvcal_kv_scaler_scales": (_I, [_P, _PP, _PP]),
    "kvcal_kv_scaler_read": (_I, [_P, _P, _PF, _PF, _PI64]),
    "kvcal_kv_dequantize_ref": (_I, [_PB, _PC, _I, _P, _P, _P, _P, _I]),
    "kvcal_kv_dequantize_launch": (_I, [_PB, _PC, _I, _P, _P, _P, _P, _I, _P]),
    # the cache formats beyond e4m3
    "kvcal_kv_format_row_bytes": (_I64, [_I, _I]),
    "kvcal_kv_nvfp4_scale_offset": (_I64, [_PC, _I, _I64, _I, _I]),
    "kvcal_kv_quantize_fmt_ref": (_I, [_PB, _PC, _PQ]),
    "kvcal_kv_quantize_fmt_launch": (_I, [_PB, _PC, _PQ, _P]),
    "kvcal_kv_dequantize_fmt_ref": (_I, [_PB, _PC, _PQ, _P, _P, _I]),
    "kvcal_kv_dequantize_fmt_launch": (_I, [_PB, _PC, _PQ, _P, _P, _I, _P]),
    # in-engine calibration
    "kvcal_calibrator_create": (_I, [_I, _I, _I, _S, _I, _PP]),
    "kvcal_calibrator_destroy": (None, [_P]),
    "kvcal_calibrator_observe_ref": (_I, [_P, _I, _PB]),
    "kvcal_calibrator_observe_launch": (_I, [_P, _I, _PB, _P]),
    "kvcal_calibrator_end_step": (_I, [_P, _P]),
    "kvcal_calibrator_merge": (_I, [_P, _P, _P]),
    "kvcal_calibrator_serialize": (_I, [_P, _P, _P, ctypes.c_size_t, _PSZ]),
    "kvcal_calibrator_deserialize": (_I, [_P, ctypes.c_size_t, _I, _PP]),
    "kvcal_calibrator_tokens": (_I, [_P, _P, _PI64, _PI64]),
    "kvcal_calibrator_to_scales": (_I, [_P, _I, _P, _PP]),
}

for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


class KvcalError(RuntimeError):
    """A libkvcal call failed: `status` is its kvcal_status, the message
    kvcal_last_error()'s line (what, where, the fix)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def check(status, what=""):
    """Raises KvcalError for a non-zero status, with the library's message."""
    if status != OK:
        detail = (lib.kvcal_last_error() or b"").decode("utf-8", "replace")
        name = STATUS_NAMES.get(status, "status %d" % status)
        raise KvcalError(status, "%s%s: %s" % (what + ": " if what else "", name, detail))


def encode(s):
    return None if s is None else os.fsencode(s)
