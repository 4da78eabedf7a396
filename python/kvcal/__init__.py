"""kvcal: FP8 (e4m3) KV-cache scales and online quantization for Python
engines, and the other cache formats engines offer (fp8_e5m2, int8, int8 with
zero points, NVFP4: quantize_fmt, dequantize_fmt) -- a thin ctypes binding over
libkvcal (include/kvcal.h).

Arrays are torch tensors or anything with ``__dlpack__``,
``__cuda_array_interface__`` or numpy's ``__array_interface__``; CPU arrays
run the library's CPU reference (``*_ref``), CUDA arrays its kernels
(``*_launch``) on the current stream (torch's when torch is imported, or
``stream=``). Shapes, dtypes, devices and strides are checked first, as are
sizes and indices (integers that fit a C int), names, and the arrays a call
writes (not read-only, sharing no memory with another argument); a bad one is
a ``ValueError`` / ``TypeError`` naming the argument; a failure of the library
is a ``KvcalError`` carrying its one-line message.

Layouts, as include/kvcal_quant.h states them:
  key, value        (num_tokens, num_kv_heads, head_dim), head_dim contiguous
  key_cache, ...    (num_blocks, block_size, num_kv_heads, head_dim), uint8 or
                    float8_e4m3fn: vLLM's shape, NHD or (by its strides) HND;
                    layout="HND" takes (num_blocks, num_kv_heads, block_size,
                    head_dim); a 3-D (num_slots, num_kv_heads, head_dim) cache is
                    sglang's (one token a block)
  slot_mapping      (num_tokens) int64; a negative slot is padding
  k_scale_cache ... (num_blocks, block_size, num_kv_heads) float32 (NHD) or
                    (num_blocks, num_kv_heads, block_size) (HND), contiguous
"""
import ctypes
import math
import operator
import sys

from . import _lib
from ._lib import KvcalError
from ._tensor import (BF16, F8, F8E5M2, F16, F32, I8, I64, ITEMSIZE, KVCAL_DTYPE, U8,
                      Array, as_array, current_stream)

__all__ = [
    "KvcalError", "version", "library_path", "cuda_device_count",
    "quantize_static", "quantize_dynamic", "dequantize", "Scaler",
    "KV_CACHE_DTYPES", "format_row_bytes", "quantize_fmt", "dequantize_fmt",
    "nvfp4_scale_offset",
    "reshape_and_cache_flash", "set_kv_buffer", "sglang_set_kv_buffer",
    "Scales", "Report", "load", "validate", "convert", "Calibrator",
]

__version__ = "0.1.0"
library_path = _lib.path


def version():
    """libkvcal's version string ("0.1.0")."""
    return _lib.lib.kvcal_version().decode()


def cuda_device_count():
    """CUDA devices the library sees (0 for a build without CUDA)."""
    return _lib.lib.kvcal_cuda_device_count()


# --- argument checks -----------------------------------------------------------

_CACHE_DTYPES = (U8, F8)
_DEVICES = {"cpu": 0, "cuda": 1}
_SCALE_ONE = {}  # (value, device index) -> a one-element device tensor
_INT_MAX = 2 ** 31 - 1  # a C int: what a shape or count passed as one must fit


def _int(name, x, lo=-_INT_MAX - 1, hi=_INT_MAX):
    """x as a Python int in [lo, hi] (a C int by default: ctypes would wrap a
    larger one around silently); integral floats pass, others are refused."""
    try:
        i = operator.index(x)
    except TypeError:
        if not (isinstance(x, float) and x.is_integer()):
            raise TypeError("%s: %r is not an integer" % (name, x)) from None
        i = int(x)
    if not lo <= i <= hi:
        raise ValueError("%s: %d out of [%d, %d]" % (name, i, lo, hi))
    return i


def _float(name, x):
    """x (a real number, or a one-value tensor / numpy scalar) as a Python float."""
    if isinstance(x, (str, bytes)) or not hasattr(x, "__float__"):
        raise TypeError("%s: %r is not a number" % (name, x))
    return float(x)


def _choice(name, x, table, expected=None):
    """table[x] for a string x, else a ValueError listing what table takes."""
    if isinstance(x, str) and x in table:
        return table[x]
    raise ValueError("%s: %r, expected %s" % (name, x, expected or "one of " + ", ".join(
        repr(k) for k in table)))


def _layout(layout):
    if not (layout is None or (isinstance(layout, str) and layout in ("NHD", "HND"))):
        raise ValueError("layout: %r, expected 'NHD' or 'HND'" % (layout,))


def _extent(a):
    """[lo, hi) bytes a's elements span, or None for an empty array."""
    lo = hi = 0
    for size, stride in zip(a.shape, a.strides):
        if size == 0:
            return None
        if stride < 0:
            lo += (size - 1) * stride
        else:
            hi += (size - 1) * stride
    item = ITEMSIZE.get(a.dtype, 1)
    return a.ptr + lo * item, a.ptr + (hi + 1) * item


def _dense(a, e):
    return e[1] - e[0] == a.numel() * ITEMSIZE.get(a.dtype, 1)


def _arrays(*xs):
    return [x for x in xs if isinstance(x, Array)]


def _no_aliasing(outputs, inputs):
    """Refuses an output that is read-only, or shares memory with another
    output or an input: the call would write over what it reads (or one
    output over another) and return wrong values without an error. Memory
    is shared for certain where two spans meet and the arrays start at one
    address or both fill their spans (interleaved views of one buffer, as
    vLLM's K and V caches, pass)."""
    spans = [(x, _extent(x)) for x in outputs + inputs]
    for i, (o, eo) in enumerate(spans[:len(outputs)]):
        if o.readonly:
            raise ValueError("%s: a read-only array; kvcal writes into it: pass a writable "
                             "one" % o.name)
        if eo is None:
            continue
        for x, ex in spans[i + 1:]:
            if (ex is None or ex[1] <= eo[0] or eo[1] <= ex[0]
                    or not (o.ptr == x.ptr or (_dense(o, eo) and _dense(x, ex)))):
                continue
            raise ValueError("%s and %s share memory: kvcal writes %s, so pass separate "
                             "arrays" % (o.name, x.name, o.name))


def _same_device(arrays):
    a0 = arrays[0]
    for a in arrays[1:]:
        if a.device != a0.device or (a.device == "cuda" and a.device_index != a0.device_index):
            raise ValueError("%s is on %s and %s on %s: every array of one call lives "
                             "on one device" % (a0.name, a0.where(), a.name, a.where()))
    return a0.device == "cuda"


def _kv(key, value, stream, rows=None):
    k, v = as_array("key", key, stream), as_array("value", value, stream)
    for a in (k, v):
        s = a.shape
        if len(s) != 3:
            raise ValueError("%s: shape %s, expected (num_tokens, num_kv_heads, head_dim)"
                             % (a.name, s))
        if a.dtype not in KVCAL_DTYPE:
            raise TypeError("%s: dtype %s, expected float32, float16 or bfloat16"
                            % (a.name, a.dtype))
        if s[1] < 1 or s[2] < 1 or s[1] > _INT_MAX or s[2] > _INT_MAX:
            raise ValueError("%s: shape %s: num_kv_heads and head_dim must be in [1, %d]"
                             % (a.name, s, _INT_MAX))
        if a.strides[2] != 1 and s[2] > 1:
            raise ValueError("%s: strides %s: head_dim must be contiguous (stride 1)"
                             % (a.name, a.strides))
        T, H, D = s
        ts = a.strides[0] if T > 1 else H * D
        hs = a.strides[1] if H > 1 else D
        if hs < D or ts < (H - 1) * hs + D:
            raise ValueError("%s: strides %s: kvcal reads a token's heads in order, each "
                             "after the last (stride(1) >= head_dim, stride(0) >= "
                             "(num_kv_heads - 1) * stride(1) + head_dim; not expanded, "
                             "transposed or reversed): pass %s.contiguous()"
                             % (a.name, a.strides, a.name))
    if v.dtype != k.dtype:
        raise TypeError("value: dtype %s, key is %s: pass both in one dtype" % (v.dtype, k.dtype))
    if v.shape != k.shape:
        raise ValueError("value: shape %s, key is %s: they must match" % (v.shape, k.shape))
    if rows is not None and k.shape[0] < rows:
        raise ValueError("key: %d tokens, slot_mapping has %d: key and value need a row "
                         "for every slot" % (k.shape[0], rows))
    return k, v


def _slots(slot_mapping, stream, num_tokens):
    s = as_array("slot_mapping", slot_mapping, stream)
    if s.dtype != I64 or len(s.shape) != 1:
        raise TypeError("slot_mapping: %s of shape %s, expected int64 of shape (num_tokens,)"
                        % (s.dtype, s.shape))
    if num_tokens is not None and s.shape[0] != num_tokens:
        raise ValueError("slot_mapping: %d slots for %d tokens" % (s.shape[0], num_tokens))
    if s.shape[0] > 1 and s.strides[0] != 1:
        raise ValueError("slot_mapping: stride %d: must be contiguous" % s.strides[0])
    return s


def _cache(key_cache, value_cache, H, D, layout, stream, dtypes=_CACHE_DTYPES,
           what="the FP8 cache", row=None):
    """A KvCache of the two caches (and the arrays to keep alive); dtypes: the
    element types `what` takes; row: the bytes of one (slot, head), head_dim
    when None."""
    _layout(layout)
    kc, vc = as_array("key_cache", key_cache, stream), as_array("value_cache", value_cache, stream)
    for a in (kc, vc):
        if a.dtype not in dtypes:
            raise TypeError("%s: dtype %s, expected %s (%s)"
                            % (a.name, a.dtype, " or ".join(dtypes), what))
    geo = _cache_geometry(kc, H, D, layout, row)
    if (vc.shape, vc.strides) != (kc.shape, kc.strides):
        g = _cache_geometry(vc, H, D, layout, row)
        if g != geo:
            raise ValueError("value_cache: shape %s strides %s, key_cache is %s %s: the two "
                             "caches must have one geometry"
                             % (vc.shape, vc.strides, kc.shape, kc.strides))
    return _lib.KvCache(kc.ptr, vc.ptr, None, None, *geo), kc, vc


def _cache_geometry(a, H, D, layout, row=None):
    s, st = a.shape, a.strides
    R = D if row is None else row  # the last dimension: bytes of a (slot, head)
    if len(s) == 3:  # sglang: (num_slots, H, D), one token a block
        if s[1:] != (H, R) or (H > 1 and st[1] != R) or (R > 1 and st[2] != 1):
            raise ValueError("%s: shape %s strides %s, expected (num_slots, %d, %d) with "
                             "contiguous rows" % (a.name, s, st, H, R))
        if s[0] < 1:
            raise ValueError("%s: shape %s holds no slot: a cache needs num_slots >= 1"
                             % (a.name, s))
        if s[0] > 1 and st[0] < H * R:
            raise ValueError("%s: strides %s: slots overlap (stride(0) %d < the %d bytes of "
                             "a slot; an expanded view?): pass a cache whose slots are "
                             "separate memory" % (a.name, st, st[0], H * R))
        return (s[0], 1, H, D, st[0] if s[0] > 1 else H * R, _lib.CACHE_NHD)
    if len(s) != 4:
        raise ValueError("%s: shape %s, expected (num_blocks, block_size, num_kv_heads, "
                         "head_dim)" % (a.name, s))
    if layout in (None, "NHD"):
        nb, bs, h, d = s
        sb, sp, sh, sd = st
    elif layout == "HND":
        nb, h, bs, d = s
        sb, sh, sp, sd = st
    else:
        _layout(layout)
    if row is None and (h, d) != (H, D):
        raise ValueError("%s: shape %s holds %d kv heads x head_dim %d, key has %d x %d"
                         % (a.name, s, h, d, H, D))
    if (h, d) != (H, R):
        raise ValueError("%s: shape %s holds %d kv heads x %d bytes; head_dim %d takes %d "
                         "bytes a row in this format, for %d kv heads" % (a.name, s, h, d, D, R, H))
    if nb < 1 or bs < 1:
        raise ValueError("%s: shape %s holds no slot: a cache needs num_blocks >= 1 and "
                         "block_size >= 1" % (a.name, s))
    if bs > _INT_MAX:
        raise ValueError("%s: shape %s: block_size %d does not fit a C int" % (a.name, s, bs))
    ok_d = d == 1 or sd == 1
    if ok_d and (h == 1 or sh == d) and (bs == 1 or sp == h * d):
        lay = _lib.CACHE_NHD
    elif ok_d and (bs == 1 or sp == d) and (h == 1 or sh == bs * d):
        lay = _lib.CACHE_HND
    else:
        raise ValueError("%s: strides %s: a block must be NHD (block_size, heads, head_dim) "
                         "or HND (heads, block_size, head_dim) contiguous" % (a.name, st))
    block = bs * h * d
    if nb > 1 and sb < block:
        raise ValueError("%s: strides %s: blocks overlap (stride(0) %d < the %d bytes of a "
                         "block; an expanded view?): pass a cache whose blocks are separate "
                         "memory" % (a.name, st, sb, block))
    return (nb, bs, h, D, sb if nb > 1 else block, lay)


def _scale_cache(name, obj, cache, stream):
    a = as_array(name, obj, stream)
    if cache.layout == _lib.CACHE_NHD:
        want = (cache.num_blocks, cache.block_size, cache.num_kv_heads)
    else:
        want = (cache.num_blocks, cache.num_kv_heads, cache.block_size)
    if a.dtype != F32 or tuple(a.shape) != want:
        raise ValueError("%s: %s of shape %s, expected float32 of shape %s"
                         % (name, a.dtype, a.shape, want))
    if not _contiguous(a):
        raise ValueError("%s: strides %s: must be contiguous" % (name, a.strides))
    return a


def _contiguous(a):
    n = 1
    for size, stride in zip(reversed(a.shape), reversed(a.strides)):
        if size > 1 and stride != n:
            return False
        n *= size
    return True


def _batch(k, v, slots, num_tokens):
    T, H, D = k.shape
    ks, vs = k.strides, v.strides
    return _lib.KvBatch(k.ptr, v.ptr, KVCAL_DTYPE[k.dtype], num_tokens,
                        ks[0] if T > 1 else H * D, ks[1] if H > 1 else D,
                        vs[0] if T > 1 else H * D, vs[1] if H > 1 else D,
                        slots.ptr if slots is not None else None)


def _static_scale(name, x, H, on_cuda, device_index, stream, check=None):
    """(pointer, granularity, keep) of a static scale: a float, or an array of
    1 or num_kv_heads float32 on the call's device. check: "scale" (finite and
    > 0) or "zero" (finite) refuses a bad float here (dequantizations, whose
    device kernels cannot look at the values)."""
    if isinstance(x, (int, float)):
        x = float(x)
        if check and not (math.isfinite(x) and (check == "zero" or x > 0)):
            raise ValueError("%s: %r: a %s must be finite%s" % (
                name, x, check, " and > 0" if check == "scale" else ""))
        if on_cuda:
            import torch
            key = (x, device_index)
            t = _SCALE_ONE.get(key)
            if t is None:
                t = torch.tensor([x], dtype=torch.float32, device="cuda:%d" % device_index)
                _SCALE_ONE[key] = t
            return t.data_ptr(), _lib.GRANULARITY_TENSOR, t
        buf = (ctypes.c_float * 1)(x)
        return ctypes.addressof(buf), _lib.GRANULARITY_TENSOR, buf
    a = as_array(name, x, stream)
    n = a.numel()
    if a.dtype != F32 or n not in (1, H):
        raise ValueError("%s: %s of %d values, expected float32 with 1 (per tensor) or %d "
                         "(per kv head)" % (name, a.dtype, n, H))
    if n > 1 and not _contiguous(a):
        raise ValueError("%s: strides %s: must be contiguous" % (name, a.strides))
    if (a.device == "cuda") != on_cuda or (on_cuda and a.device_index != device_index):
        raise ValueError("%s is on %s; the call runs on %s" % (
            name, a.where(), "cuda:%d" % device_index if on_cuda else "cpu"))
    gran = _lib.GRANULARITY_TENSOR if n == 1 else _lib.GRANULARITY_HEAD
    return a.ptr, gran, a


# --- online quantization -------------------------------------------------------

def quantize_static(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
                    k_scale_cache=None, v_scale_cache=None, layout=None, stream=None):
    """Writes e4m3(key * (1 / k_scale)) (and value) into the caches at
    slot_mapping's slots. k_scale / v_scale: a float, or float32 arrays of 1 or
    num_kv_heads values (per head) on the call's device. The scale caches, when
    given, receive the scale of every written (token, head)."""
    s = _slots(slot_mapping, stream, None)
    k, v = _kv(key, value, stream, rows=s.shape[0])
    H, D = k.shape[1], k.shape[2]
    cache, kc, vc = _cache(key_cache, value_cache, H, D, layout, stream)
    keep = [k, v, s, kc, vc]
    arrays = [k, v, s, kc, vc]
    if k_scale_cache is not None or v_scale_cache is not None:
        ksc = _scale_cache("k_scale_cache", k_scale_cache, cache, stream)
        vsc = _scale_cache("v_scale_cache", v_scale_cache, cache, stream)
        cache.k_scale, cache.v_scale = ksc.ptr, vsc.ptr
        arrays += [ksc, vsc]
    on_cuda = _same_device(arrays)
    kp, kg, kk = _static_scale("k_scale", k_scale, H, on_cuda, k.device_index, stream)
    vp, vg, vk = _static_scale("v_scale", v_scale, H, on_cuda, k.device_index, stream)
    if kg != vg:
        raise ValueError("k_scale and v_scale: one per tensor and one per head; pass both "
                         "alike")
    keep += [kk, vk]
    _no_aliasing(arrays[3:], arrays[:3] + _arrays(kk, vk))
    b = _batch(k, v, s, s.shape[0])
    if on_cuda:
        st = _lib.lib.kvcal_kv_quantize_static_launch(
            ctypes.byref(b), ctypes.byref(cache), kg, kp, vp,
            current_stream(arrays, stream))
    else:
        st = _lib.lib.kvcal_kv_quantize_static_ref(ctypes.byref(b), ctypes.byref(cache),
                                                   kg, kp, vp)
    _lib.check(st, "quantize_static")


def quantize_dynamic(key, value, key_cache, value_cache, slot_mapping, k_scale_cache,
                     v_scale_cache, layout=None, stream=None):
    """Quantizes with one scale per (token, head), max(absmax / 448, 1/(448*512))
    of that row's finite values, written to the scale caches (vLLM's
    fp8_per_token_head layout)."""
    s = _slots(slot_mapping, stream, None)
    k, v = _kv(key, value, stream, rows=s.shape[0])
    cache, kc, vc = _cache(key_cache, value_cache, k.shape[1], k.shape[2], layout, stream)
    ksc = _scale_cache("k_scale_cache", k_scale_cache, cache, stream)
    vsc = _scale_cache("v_scale_cache", v_scale_cache, cache, stream)
    cache.k_scale, cache.v_scale = ksc.ptr, vsc.ptr
    arrays = [k, v, s, kc, vc, ksc, vsc]
    _no_aliasing(arrays[3:], arrays[:3])
    b = _batch(k, v, s, s.shape[0])
    if _same_device(arrays):
        st = _lib.lib.kvcal_kv_quantize_dynamic_launch(ctypes.byref(b), ctypes.byref(cache),
                                                       current_stream(arrays, stream))
    else:
        st = _lib.lib.kvcal_kv_quantize_dynamic_ref(ctypes.byref(b), ctypes.byref(cache))
    _lib.check(st, "quantize_dynamic")


_OUT_DTYPES = {F32: _lib.DTYPE_F32, F16: _lib.DTYPE_F16, BF16: _lib.DTYPE_BF16}


# out_dtype names (torch's too) -> the torch dtype's name
_OUT_DTYPE_NAMES = {"float32": F32, "float": F32, "float16": F16, "half": F16,
                    "bfloat16": BF16}


def _out_dtype(out_dtype):
    """The torch dtype name of out_dtype: a name, a torch dtype or a numpy dtype."""
    name = out_dtype
    if not isinstance(name, str):
        if type(out_dtype).__module__.startswith("torch"):
            name = str(out_dtype).replace("torch.", "")
        elif "numpy" in sys.modules:
            try:
                name = sys.modules["numpy"].dtype(out_dtype).name
            except TypeError:
                pass
    if not isinstance(name, str) or name not in _OUT_DTYPE_NAMES:
        raise ValueError("out_dtype: %r, expected 'float32', 'float16' or 'bfloat16' (or "
                         "that torch dtype)" % (out_dtype,))
    return _OUT_DTYPE_NAMES[name]


def _outputs(out_key, out_value, out_dtype, shape, on_cuda, device_index, stream):
    """The outputs of a dequantization, allocated with torch when not given
    (zeros: the rows of skipped slots are not written): (out_key, out_value,
    their Arrays)."""
    tdt = _out_dtype(out_dtype)
    if (out_key is None) != (out_value is None):
        raise ValueError("out_key, out_value: %s given alone: pass both, or neither to have "
                         "them allocated" % ("out_key" if out_value is None else "out_value"))
    if out_key is None:
        import torch
        dev = "cuda:%d" % device_index if on_cuda else "cpu"
        out_key = torch.zeros(shape, dtype=getattr(torch, tdt), device=dev)
        out_value = torch.zeros(shape, dtype=getattr(torch, tdt), device=dev)
    ok_, ov = as_array("out_key", out_key, stream), as_array("out_value", out_value, stream)
    for a in (ok_, ov):
        if a.dtype not in _OUT_DTYPES or tuple(a.shape) != shape or not _contiguous(a):
            raise ValueError("%s: %s %s strides %s, expected a contiguous float32, float16 or "
                             "bfloat16 array of shape %s" % (a.name, a.dtype, a.shape, a.strides,
                                                             shape))
    if ov.dtype != ok_.dtype:
        raise TypeError("out_value: dtype %s, out_key is %s" % (ov.dtype, ok_.dtype))
    return out_key, out_value, ok_, ov


def dequantize(key_cache, value_cache, slot_mapping, num_kv_heads, head_dim, k_scale=None,
               v_scale=None, k_scale_cache=None, v_scale_cache=None, out_key=None,
               out_value=None, out_dtype="float32", layout=None, stream=None):
    """The cached values of slot_mapping's slots as real numbers: returns
    (out_key, out_value), (num_tokens, num_kv_heads, head_dim) contiguous of
    out_dtype (allocated with torch when not given, zero where a slot is
    skipped; a given out_key / out_value keeps those rows). Scales come from
    the scale caches when given, else from the static k_scale / v_scale."""
    num_kv_heads = _int("num_kv_heads", num_kv_heads, 1)
    head_dim = _int("head_dim", head_dim, 1)
    s = _slots(slot_mapping, stream, None)
    cache, kc, vc = _cache(key_cache, value_cache, num_kv_heads, head_dim, layout, stream)
    arrays = [s, kc, vc]
    if k_scale_cache is not None or v_scale_cache is not None:
        ksc = _scale_cache("k_scale_cache", k_scale_cache, cache, stream)
        vsc = _scale_cache("v_scale_cache", v_scale_cache, cache, stream)
        cache.k_scale, cache.v_scale = ksc.ptr, vsc.ptr
        arrays += [ksc, vsc]
    on_cuda = _same_device(arrays)
    T = s.shape[0]
    out_key, out_value, ok_, ov = _outputs(out_key, out_value, out_dtype, (T, num_kv_heads, head_dim),
                                           on_cuda, kc.device_index, stream)
    arrays += [ok_, ov]
    _same_device(arrays)
    kp = vp = None
    gran = _lib.GRANULARITY_TENSOR
    keep = []
    if not cache.k_scale:
        if k_scale is None or v_scale is None:
            raise ValueError("k_scale, v_scale: pass the static scales or the scale caches")
        kp, gran, kk = _static_scale("k_scale", k_scale, num_kv_heads, on_cuda, kc.device_index,
                                     stream, "scale")
        vp, vg, vk = _static_scale("v_scale", v_scale, num_kv_heads, on_cuda, kc.device_index,
                                   stream, "scale")
        if vg != gran:
            raise ValueError("k_scale and v_scale: one per tensor and one per head; pass both "
                             "alike")
        keep += [kk, vk]
    _no_aliasing([ok_, ov], arrays[:-2] + _arrays(*keep))
    b = _lib.KvBatch()
    b.num_tokens = T
    b.slot_mapping = s.ptr
    b.dtype = _lib.DTYPE_F32
    if on_cuda:
        st = _lib.lib.kvcal_kv_dequantize_launch(
            ctypes.byref(b), ctypes.byref(cache), gran, kp, vp, ok_.ptr, ov.ptr,
            _OUT_DTYPES[ok_.dtype], current_stream(arrays, stream))
    else:
        st = _lib.lib.kvcal_kv_dequantize_ref(ctypes.byref(b), ctypes.byref(cache), gran,
                                              kp, vp, ok_.ptr, ov.ptr, _OUT_DTYPES[ok_.dtype])
    _lib.check(st, "dequantize")
    return out_key, out_value


class Scaler:
    """Running per-head K and V scales an engine updates every step
    (include/kvcal_quant.h, kvcal_kv_scaler_t). mode: "running_max", "ema"
    (ema_alpha in (0, 1]) or "first_batch"; device: "cpu" or "cuda" (the
    current CUDA device)."""

    _MODES = {"running_max": 0, "ema": 1, "first_batch": 2}

    def __init__(self, num_kv_heads, mode="running_max", ema_alpha=0.1, device="cpu"):
        self._h = ctypes.c_void_p()
        m = _choice("mode", mode, self._MODES)
        _choice("device", device, _DEVICES, "'cpu' or 'cuda'")
        self.num_kv_heads, self.device = _int("num_kv_heads", num_kv_heads), device
        _lib.check(_lib.lib.kvcal_kv_scaler_create(self.num_kv_heads, m,
                                                   _float("ema_alpha", ema_alpha),
                                                   device == "cuda",
                                                   ctypes.byref(self._h)), "Scaler")

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            _lib.lib.kvcal_kv_scaler_destroy(h)
            self._h = None

    def quantize(self, key, value, key_cache, value_cache, slot_mapping, k_scale_cache=None,
                 v_scale_cache=None, layout=None, stream=None):
        """One step: folds the batch's per-head absmax in, then quantizes it with the
        updated scales, recording them in the scale caches (required but for
        "first_batch")."""
        s = _slots(slot_mapping, stream, None)
        k, v = _kv(key, value, stream, rows=s.shape[0])
        cache, kc, vc = _cache(key_cache, value_cache, k.shape[1], k.shape[2], layout, stream)
        arrays = [k, v, s, kc, vc]
        if k_scale_cache is not None or v_scale_cache is not None:
            ksc = _scale_cache("k_scale_cache", k_scale_cache, cache, stream)
            vsc = _scale_cache("v_scale_cache", v_scale_cache, cache, stream)
            cache.k_scale, cache.v_scale = ksc.ptr, vsc.ptr
            arrays += [ksc, vsc]
        on_cuda = _same_device(arrays)
        if on_cuda != (self.device == "cuda"):
            raise ValueError("key is on %s, the scaler on %s" % (k.where(), self.device))
        _no_aliasing(arrays[3:], arrays[:3])
        b = _batch(k, v, s, s.shape[0])
        if on_cuda:
            st = _lib.lib.kvcal_kv_scaler_quantize_launch(self._h, ctypes.byref(b),
                                                          ctypes.byref(cache),
                                                          current_stream(arrays, stream))
        else:
            st = _lib.lib.kvcal_kv_scaler_quantize_ref(self._h, ctypes.byref(b),
                                                       ctypes.byref(cache))
        _lib.check(st, "Scaler.quantize")

    def read(self, stream=None):
        """(k_scales, v_scales, steps): the current per-head scales as lists (0 until
        the first valid step) and the steps folded in; synchronizes for a device
        scaler."""
        H = self.num_kv_heads
        k, v, n = (ctypes.c_float * H)(), (ctypes.c_float * H)(), ctypes.c_int64()
        st = 0 if self.device == "cpu" else current_stream(None, stream)
        _lib.check(_lib.lib.kvcal_kv_scaler_read(self._h, st or None, k, v, ctypes.byref(n)),
                   "Scaler.read")
        return list(k), list(v), n.value


# --- the cache formats beyond e4m3 ---------------------------------------------

# kv_cache_dtype -> kvcal_kv_format (include/kvcal_quant.h)
KV_CACHE_DTYPES = {"fp8_e4m3": _lib.KV_FP8_E4M3, "fp8_e5m2": _lib.KV_FP8_E5M2,
                   "int8": _lib.KV_INT8, "int8_asym": _lib.KV_INT8_ASYM, "nvfp4": _lib.KV_NVFP4}
_ROUNDINGS = {"nearest_even": _lib.ROUND_NEAREST_EVEN, "toward_zero": _lib.ROUND_TOWARD_ZERO}
# the element types a cache of each format may have
_FMT_CACHE_DTYPES = {_lib.KV_FP8_E4M3: (U8, F8), _lib.KV_FP8_E5M2: (U8, F8E5M2),
                     _lib.KV_INT8: (I8, U8), _lib.KV_INT8_ASYM: (U8, I8), _lib.KV_NVFP4: (U8,)}


def _kv_format(kv_cache_dtype):
    if isinstance(kv_cache_dtype, str) and kv_cache_dtype in KV_CACHE_DTYPES:
        return KV_CACHE_DTYPES[kv_cache_dtype]
    raise ValueError("kv_cache_dtype: %r, expected one of %s"
                     % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPES)))


def format_row_bytes(kv_cache_dtype, head_dim):
    """Bytes one (slot, kv head) of head_dim values takes in a cache of
    kv_cache_dtype: head_dim for the 8-bit formats, head_dim / 2 + head_dim / 16
    for "nvfp4" (its e2m1 pairs, then its e4m3 block scales): the last
    dimension of such a cache. 0 for an NVFP4 head_dim that is not a multiple
    of 16."""
    return _lib.lib.kvcal_kv_format_row_bytes(_kv_format(kv_cache_dtype),
                                              _int("head_dim", head_dim, 1))


def _fmt_params(kv_cache_dtype, rounding, key_cache, value_cache, H, D, layout, stream,
                arrays, static, caches, check=None):
    """The KvCache and KvQParams of a format call, every argument checked:
    static = (k_scale, v_scale, k_zero, v_zero), caches = (k_scale_cache,
    v_scale_cache, k_zero_cache, v_zero_cache); arrays: the call's other
    arrays; check: refuse bad static floats here (see _static_scale). Returns
    (cache, params, arrays, keep, on_cuda)."""
    f = _kv_format(kv_cache_dtype)
    rnd = _choice("rounding", rounding, _ROUNDINGS, "'nearest_even' or 'toward_zero'")
    row = _lib.lib.kvcal_kv_format_row_bytes(f, D)
    if row == 0:
        raise ValueError("head_dim: %d: %s needs a multiple of 16" % (D, kv_cache_dtype))
    cache, kc, vc = _cache(key_cache, value_cache, H, D, layout, stream, _FMT_CACHE_DTYPES[f],
                           "a %s cache" % kv_cache_dtype, row)
    arrays = arrays + [kc, vc]
    q = _lib.KvQParams(f, rnd, _lib.GRANULARITY_TENSOR)
    names = ("k_scale_cache", "v_scale_cache", "k_zero_cache", "v_zero_cache")
    for i in (0, 2):
        if caches[i] is not None or caches[i + 1] is not None:
            a, b = (_scale_cache(names[j], caches[j], cache, stream) for j in (i, i + 1))
            if i == 0:
                cache.k_scale, cache.v_scale = a.ptr, b.ptr
            else:
                q.k_zero_cache, q.v_zero_cache = a.ptr, b.ptr
            arrays += [a, b]
    on_cuda = _same_device(arrays)
    keep = list(arrays)
    names = ("k_scale", "v_scale", "k_zero", "v_zero")
    for i in (0, 2):
        if (static[i] is None) != (static[i + 1] is None):
            raise ValueError("%s, %s: pass both or neither" % names[i:i + 2])
        if static[i] is None:
            continue
        (kp, kg, kk), (vp, vg, vk) = (_static_scale(names[j], static[j], H, on_cuda,
                                                    arrays[0].device_index, stream,
                                                    check and ("zero" if i else "scale"))
                                      for j in (i, i + 1))
        if kg != vg or (i == 2 and static[0] is not None and kg != q.granularity):
            raise ValueError("%s: one per tensor and one per head; pass %s alike"
                             % (", ".join(names[:i + 2]), "all" if i else "both"))
        if i == 0:
            q.k_scale, q.v_scale, q.granularity = kp, vp, kg
        else:
            q.k_zero, q.v_zero = kp, vp
        keep += [kk, vk]
    statics = _arrays(*keep[len(arrays):])
    if check:  # a dequantization: the outputs come later
        return cache, q, arrays, keep, on_cuda
    _no_aliasing(arrays[3:], arrays[:3] + statics)
    return cache, q, arrays, keep, on_cuda


def quantize_fmt(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale=None,
                 v_scale=None, k_zero=None, v_zero=None, k_scale_cache=None, v_scale_cache=None,
                 k_zero_cache=None, v_zero_cache=None, rounding="nearest_even", layout=None,
                 stream=None):
    """Writes key and value into caches of kv_cache_dtype at slot_mapping's
    slots (include/kvcal_quant.h, kvcal_kv_format):
      "fp8_e5m2"   the e5m2 byte of each value, saturating (a cast: no scale);
      "int8"       clamp(R(x * (1 / scale)), -128, 127);
      "int8_asym"  clamp(R((x - zero) * (1 / scale)), 0, 255), stored unsigned;
      "nvfp4"      e2m1 pairs, then e4m3 block scales of 16 values, under the
                   global scale k_scale / v_scale (vLLM's nvfp4 page layout);
      "fp8_e4m3"   as quantize_static / quantize_dynamic.
    k_scale / v_scale (and for "int8_asym" k_zero / v_zero): floats or
    float32 arrays of 1 or num_kv_heads values on the call's device: static.
    None: dynamic, computed per (token, head) from each row (int8:
    max(absmax / 127, 1e-6), vLLM's int8_per_token_head; int8_asym: min and
    (max - min) / 255, LMDeploy's quant_policy=8) and written to
    k_scale_cache / v_scale_cache and, for "int8_asym", k_zero_cache /
    v_zero_cache: float32 arrays of quantize_dynamic's scale-cache shape.
    rounding: "nearest_even" or "toward_zero" (the int8 formats; vLLM's
    int8_per_token_head truncates). Caches: (num_blocks, block_size,
    num_kv_heads, format_row_bytes(kv_cache_dtype, head_dim)), uint8 (int8 or
    float8_e5m2 where the format is one), NHD or by its strides HND, or
    layout="HND" for (num_blocks, num_kv_heads, block_size, ...)."""
    s = _slots(slot_mapping, stream, None)
    k, v = _kv(key, value, stream, rows=s.shape[0])
    cache, q, arrays, keep, on_cuda = _fmt_params(
        kv_cache_dtype, rounding, key_cache, value_cache, k.shape[1], k.shape[2], layout, stream,
        [k, v, s], (k_scale, v_scale, k_zero, v_zero),
        (k_scale_cache, v_scale_cache, k_zero_cache, v_zero_cache))
    b = _batch(k, v, s, s.shape[0])
    if on_cuda:
        st = _lib.lib.kvcal_kv_quantize_fmt_launch(ctypes.byref(b), ctypes.byref(cache),
                                                   ctypes.byref(q), current_stream(arrays, stream))
    else:
        st = _lib.lib.kvcal_kv_quantize_fmt_ref(ctypes.byref(b), ctypes.byref(cache), ctypes.byref(q))
    _lib.check(st, "quantize_fmt")


def dequantize_fmt(key_cache, value_cache, slot_mapping, num_kv_heads, head_dim, kv_cache_dtype,
                   k_scale=None, v_scale=None, k_zero=None, v_zero=None, k_scale_cache=None,
                   v_scale_cache=None, k_zero_cache=None, v_zero_cache=None, out_key=None,
                   out_value=None, out_dtype="float32", layout=None, stream=None):
    """The cached values of slot_mapping's slots in a cache of kv_cache_dtype
    as real numbers: returns (out_key, out_value), (num_tokens, num_kv_heads,
    head_dim) contiguous of out_dtype (allocated with torch when not given).
    The parameters are the static ones when given, else those beside the
    cache (k_scale_cache ... as quantize_fmt wrote them)."""
    H, D = _int("num_kv_heads", num_kv_heads, 1), _int("head_dim", head_dim, 1)
    if (_kv_format(kv_cache_dtype) != _lib.KV_FP8_E5M2 and k_scale is None and v_scale is None
            and k_scale_cache is None and v_scale_cache is None):
        raise ValueError("k_scale, v_scale: pass the static scales or the scale caches")
    s = _slots(slot_mapping, stream, None)
    cache, q, arrays, keep, on_cuda = _fmt_params(
        kv_cache_dtype, "nearest_even", key_cache, value_cache, H, D, layout, stream, [s],
        (k_scale, v_scale, k_zero, v_zero),
        (k_scale_cache, v_scale_cache, k_zero_cache, v_zero_cache), check=True)
    T = s.shape[0]
    out_key, out_value, ok_, ov = _outputs(out_key, out_value, out_dtype, (T, H, D), on_cuda,
                                           arrays[0].device_index, stream)
    _no_aliasing([ok_, ov], _arrays(*keep))
    arrays += [ok_, ov]
    _same_device(arrays)
    b = _lib.KvBatch()
    b.num_tokens, b.slot_mapping, b.dtype = T, s.ptr, _lib.DTYPE_F32
    if on_cuda:
        st = _lib.lib.kvcal_kv_dequantize_fmt_launch(
            ctypes.byref(b), ctypes.byref(cache), ctypes.byref(q), ok_.ptr, ov.ptr,
            _OUT_DTYPES[ok_.dtype], current_stream(arrays, stream))
    else:
        st = _lib.lib.kvcal_kv_dequantize_fmt_ref(ctypes.byref(b), ctypes.byref(cache),
                                                  ctypes.byref(q), ok_.ptr, ov.ptr,
                                                  _OUT_DTYPES[ok_.dtype])
    _lib.check(st, "dequantize_fmt")
    return out_key, out_value


def nvfp4_scale_offset(key_cache, value_cache, kv, slot, head, block_scale, num_kv_heads,
                       head_dim, layout=None):
    """Where an NVFP4 cache keeps a block's e4m3 scale: the byte offset, from
    the start of K's (kv 0) or V's (kv 1) cache of this geometry, of block
    scale block_scale (of head_dim / 16) of (slot, head); V's are swizzled as
    vLLM writes them (include/kvcal_quant.h, kvcal_kv_nvfp4_scale_offset)."""
    H, D = _int("num_kv_heads", num_kv_heads, 1), _int("head_dim", head_dim, 1)
    kv, head = _int("kv", kv), _int("head", head)
    block_scale = _int("block_scale", block_scale)
    slot = _int("slot", slot, -2 ** 63, 2 ** 63 - 1)
    row = format_row_bytes("nvfp4", D)
    if row == 0:
        raise ValueError("head_dim: %d: nvfp4 needs a multiple of 16" % D)
    cache, _, _ = _cache(key_cache, value_cache, H, D, layout, None, (U8,), "an nvfp4 cache", row)
    off = _lib.lib.kvcal_kv_nvfp4_scale_offset(ctypes.byref(cache), kv, slot, head, block_scale)
    if off < 0:
        raise ValueError("kv %d, slot %d, head %d, block_scale %d: outside the cache (kv 0 or 1, "
                         "slot < %d, head < %d, block_scale < %d)"
                         % (kv, slot, head, block_scale, cache.num_blocks * cache.block_size,
                            H, D // 16))
    return off


# --- engine drop-ins -----------------------------------------------------------

def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping,
                            kv_cache_dtype, k_scale, v_scale):
    """vLLM's ``torch.ops._C_cache_ops.reshape_and_cache_flash`` for an FP8
    cache, same signature: key / value (num_tokens, num_heads, head_size) --
    possibly more rows than slot_mapping, which is what counts, as in vLLM --
    into key_cache / value_cache (num_blocks, block_size, num_heads, head_size)
    (NHD or, by its strides, HND; K and V interleaved in one allocation are
    fine), kv_cache_dtype "fp8" or "fp8_e4m3", k_scale / v_scale float32
    tensors of 1 or num_heads values. kvcal's arithmetic: x * (1 / scale) in
    fp32, round to nearest even, saturating at 448."""
    if kv_cache_dtype not in ("fp8", "fp8_e4m3"):
        raise ValueError("kv_cache_dtype: %r: kvcal writes e4m3 caches only ('fp8', "
                         "'fp8_e4m3'); keep vLLM's own op for the others" % (kv_cache_dtype,))
    quantize_static(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)


def set_kv_buffer(k_buffer, v_buffer, loc, cache_k, cache_v, k_scale=None, v_scale=None,
                  stream=None):
    """The write sglang's ``MHATokenToKVPool.set_kv_buffer`` does for an FP8
    pool, on one layer's buffers: k_buffer[loc] = e4m3(cache_k / k_scale) (and
    V). k_buffer / v_buffer: (num_slots, head_num, head_dim) uint8 or
    float8_e4m3fn; loc: int64 slots; k_scale / v_scale: floats or float32
    arrays (None: 1.0, as sglang). kvcal rounds once from fp32 and saturates at
    448, where sglang's own path divides in the input dtype and casts."""
    quantize_static(cache_k, cache_v, k_buffer, v_buffer, loc,
                    1.0 if k_scale is None else k_scale, 1.0 if v_scale is None else v_scale,
                    stream=stream)


def sglang_set_kv_buffer(pool, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None,
                         layer_id_override=None):
    """A replacement for sglang's ``MHATokenToKVPool.set_kv_buffer`` method
    (same signature: ``MHATokenToKVPool.set_kv_buffer = kvcal.sglang_set_kv_buffer``)
    for a pool whose dtype is float8_e4m3fn."""
    layer_id = layer.layer_id if layer_id_override is None else layer_id_override
    i = layer_id - getattr(pool, "start_layer", 0)
    if "float8_e4m3fn" not in str(getattr(pool, "dtype", "")):
        raise ValueError("pool.dtype %s: kvcal writes e4m3 pools only" % (pool.dtype,))
    set_kv_buffer(pool.k_buffer[i], pool.v_buffer[i], loc, cache_k, cache_v, k_scale, v_scale)


# --- scale sets and files ------------------------------------------------------

_FORMATS = {"legacy": _lib.FORMAT_LEGACY_JSON, "legacy-json": _lib.FORMAT_LEGACY_JSON,
            "kvcal": _lib.FORMAT_KVCAL_JSON, "kvcal-json": _lib.FORMAT_KVCAL_JSON,
            "checkpoint": _lib.FORMAT_CHECKPOINT, "modelopt": _lib.FORMAT_MODELOPT,
            "quark": _lib.FORMAT_QUARK, "kv-scale": _lib.FORMAT_KV_SCALE,
            "trtllm": _lib.FORMAT_TRTLLM, "ascend": _lib.FORMAT_ASCEND}
_GRANULARITY = {"tensor": _lib.GRANULARITY_TENSOR, "head": _lib.GRANULARITY_HEAD}


def _format(fmt):
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    raise ValueError("format: %r, expected one of %s" % (fmt, sorted(_FORMATS)))


def _granularity(g):
    return _choice("granularity", g, _GRANULARITY, "'tensor' or 'head'")


def _tp(tp):
    return _int("tp", tp, 0)


def _path(name, path, optional=False):
    """path (str, bytes or os.PathLike) encoded for the library."""
    if path is None:
        if optional:
            return None
        raise TypeError("%s: None, expected a path (str, bytes or os.PathLike)" % name)
    try:
        return _lib.encode(path)
    except TypeError:
        raise TypeError("%s: %r is not a path (str, bytes or os.PathLike)"
                        % (name, path)) from None


class Scales:
    """A set of K/V scales per layer and kv head (kvcal_scales_t). Create an
    empty one to fill (every scale unset until set), or ``kvcal.load`` a file."""

    def __init__(self, num_layers, num_kv_heads, _handle=None):
        self._h = ctypes.c_void_p()
        if _handle is not None:
            self._h = _handle
        else:
            _lib.check(_lib.lib.kvcal_scales_create(_int("num_layers", num_layers),
                                                    _int("num_kv_heads", num_kv_heads),
                                                    ctypes.byref(self._h)), "Scales")

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            _lib.lib.kvcal_scales_destroy(h)
            self._h = None

    @property
    def num_layers(self):
        return _lib.lib.kvcal_scales_num_layers(self._h)

    @property
    def num_kv_heads(self):
        return _lib.lib.kvcal_scales_num_kv_heads(self._h)

    @property
    def granularity(self):
        return "head" if _lib.lib.kvcal_scales_granularity(self._h) else "tensor"

    @granularity.setter
    def granularity(self, g):
        _lib.check(_lib.lib.kvcal_scales_set_granularity(self._h, _granularity(g)),
                   "Scales.granularity")

    def get_head(self, layer, head):
        k, v = ctypes.c_float(), ctypes.c_float()
        _lib.check(_lib.lib.kvcal_scales_get_head(self._h, _int("layer", layer),
                                                  _int("head", head), ctypes.byref(k),
                                                  ctypes.byref(v)), "Scales.get_head")
        return k.value, v.value

    def get_tensor(self, layer):
        k, v = ctypes.c_float(), ctypes.c_float()
        _lib.check(_lib.lib.kvcal_scales_get_tensor(self._h, _int("layer", layer),
                                                    ctypes.byref(k), ctypes.byref(v)),
                   "Scales.get_tensor")
        return k.value, v.value

    def get_q(self, layer):
        q = ctypes.c_float()
        _lib.check(_lib.lib.kvcal_scales_get_q(self._h, _int("layer", layer), ctypes.byref(q)),
                   "Scales.get_q")
        return q.value

    def k_scales(self):
        """Per-head K scales, a list per layer."""
        return [[self.get_head(l, h)[0] for h in range(self.num_kv_heads)]
                for l in range(self.num_layers)]

    def v_scales(self):
        return [[self.get_head(l, h)[1] for h in range(self.num_kv_heads)]
                for l in range(self.num_layers)]

    def set_head(self, layer, head, k_scale, v_scale):
        _lib.check(_lib.lib.kvcal_scales_set_head(self._h, _int("layer", layer),
                                                  _int("head", head),
                                                  _float("k_scale", k_scale),
                                                  _float("v_scale", v_scale)),
                   "Scales.set_head")

    def set_layer(self, layer, k_scale, v_scale):
        _lib.check(_lib.lib.kvcal_scales_set_layer(self._h, _int("layer", layer),
                                                   _float("k_scale", k_scale),
                                                   _float("v_scale", v_scale)),
                   "Scales.set_layer")

    def set_layer_heads(self, layer, k_scale=None, v_scale=None):
        """Per-head scales of one layer: sequences (or CPU arrays) of num_kv_heads
        floats; None keeps that tensor's."""
        H = self.num_kv_heads

        def arr(name, x):
            if x is None:
                return None
            if isinstance(x, (str, bytes)):
                raise TypeError("%s: %r, expected %d floats" % (name, x, H))
            try:
                vals = [_float(name, t) for t in (x.tolist() if hasattr(x, "tolist") else x)]
            except TypeError:
                raise TypeError("%s: expected a sequence or 1-D array of %d floats (one per kv "
                                "head), got %s" % (name, H, type(x).__name__)) from None
            if len(vals) != H:
                raise ValueError("%s: %d values for %d kv heads" % (name, len(vals), H))
            return (ctypes.c_float * H)(*vals)
        _lib.check(_lib.lib.kvcal_scales_set_layer_heads(self._h, _int("layer", layer),
                                                         arr("k_scale", k_scale),
                                                         arr("v_scale", v_scale)),
                   "Scales.set_layer_heads")

    def set_q(self, layer, q_scale):
        _lib.check(_lib.lib.kvcal_scales_set_q(self._h, _int("layer", layer),
                                               _float("q_scale", q_scale)), "Scales.set_q")

    def set_model(self, architecture=None, model_type=None, num_attention_heads=0, head_dim=0):
        _lib.check(_lib.lib.kvcal_scales_set_model(
            self._h, _path("architecture", architecture, True),
            _path("model_type", model_type, True),
            _int("num_attention_heads", num_attention_heads, 0),
            _int("head_dim", head_dim, 0)), "Scales.set_model")

    def write(self, path, format="kvcal", model_dir=None, tp=1):
        """Writes the set atomically: format "legacy" (sglang), "kvcal",
        "checkpoint", "modelopt", "quark", "kv-scale" (directories; model_dir
        holds the model's config.json) or "trtllm" (a directory of tp ranks):
        kvcal convert --help says what each holds."""
        _lib.check(_lib.lib.kvcal_scales_write(self._h, _format(format), _path("path", path),
                                               _path("model_dir", model_dir, True), _tp(tp)),
                   "Scales.write")


def load(path, model_dir=None, tp=1):
    """Loads any scales file or checkpoint kvcal reads (format detected)."""
    h = ctypes.c_void_p()
    _lib.check(_lib.lib.kvcal_scales_load(_path("path", path), _path("model_dir", model_dir, True),
                                          _tp(tp), ctypes.byref(h)), "load")
    return Scales(0, 0, _handle=h)


class Report:
    """What validate() found: format (a name), findings (a list of
    (severity, place, message, consequence) tuples, severity "error" or
    "warning"), and passes(strict)."""

    def __init__(self, fmt, findings, passes, passes_strict):
        self.format, self.findings = fmt, findings
        self._passes = (passes, passes_strict)

    def passes(self, strict=False):
        return self._passes[1 if strict else 0]

    def __repr__(self):
        return "Report(%s, %d findings, passes=%s)" % (self.format, len(self.findings),
                                                      self._passes[0])


def validate(path, model_dir=None, tp=0):
    """Validates a scales file against the model (config.json in model_dir) and
    tensor-parallel size tp, as `kvcal validate-scales` does."""
    h = ctypes.c_void_p()
    _lib.check(_lib.lib.kvcal_scales_validate_file(_path("path", path),
                                                   _path("model_dir", model_dir, True),
                                                   _tp(tp), ctypes.byref(h)), "validate")
    try:
        out = []
        for i in range(_lib.lib.kvcal_report_count(h)):
            f = _lib.Finding()
            _lib.check(_lib.lib.kvcal_report_get(h, i, ctypes.byref(f)), "validate")
            out.append(("error" if f.severity == 0 else "warning",
                        f.place.decode(), f.message.decode(), f.consequence.decode()))
        fmt = _lib.lib.kvcal_format_name(_lib.lib.kvcal_report_format(h)).decode()
        return Report(fmt, out, bool(_lib.lib.kvcal_report_passes(h, 0)),
                      bool(_lib.lib.kvcal_report_passes(h, 1)))
    finally:
        _lib.lib.kvcal_report_destroy(h)


def convert(src, dst, to, model_dir=None, tp=1):
    """Reads src (any format) and writes it as `to` at dst: `kvcal convert`."""
    _format(to)
    _path("dst", dst)
    load(src, model_dir, tp).write(dst, to, model_dir, tp)


# --- in-engine calibration -----------------------------------------------------

class Calibrator:
    """Statistics of the K and V an engine's own forward passes write
    (include/kvcal_calibrate.h): observe() each layer's new K and V, end_step()
    after each forward pass (for the "ema" observer), merge() or
    to_bytes() / from_bytes() across processes, to_scales() or write() at the end.
    observer: "minmax", "ema[:D]", "percentile:P", "mse"; device "cpu" or
    "cuda" (the current CUDA device)."""

    def __init__(self, num_layers, num_kv_heads, head_dim, observer="minmax", device="cpu",
                 _handle=None):
        self._h = ctypes.c_void_p()
        _choice("device", device, _DEVICES, "'cpu' or 'cuda'")
        if observer is not None and not isinstance(observer, str):
            raise TypeError("observer: %r, expected a string: 'minmax', 'ema[:D]', "
                            "'percentile:P' or 'mse'" % (observer,))
        self.num_layers = _int("num_layers", num_layers)
        self.num_kv_heads = _int("num_kv_heads", num_kv_heads)
        self.head_dim = _int("head_dim", head_dim)
        self.device = device
        if _handle is not None:
            self._h = _handle
        else:
            _lib.check(_lib.lib.kvcal_calibrator_create(self.num_layers, self.num_kv_heads,
                                                        self.head_dim, _lib.encode(observer),
                                                        device == "cuda",
                                                        ctypes.byref(self._h)), "Calibrator")

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            _lib.lib.kvcal_calibrator_destroy(h)
            self._h = None

    def _stream(self, stream):
        if self.device == "cpu":
            return None
        return current_stream(None, stream) or None

    def observe(self, layer, key, value, slot_mapping=None, stream=None):
        """Folds one layer's new K and V (num_tokens, num_kv_heads, head_dim) in;
        slot_mapping (optional, int64): negative slots are padding, not observed."""
        k, v = _kv(key, value, stream)
        if k.shape[1:] != (self.num_kv_heads, self.head_dim):
            raise ValueError("key: shape %s, the calibrator holds %d kv heads x head_dim %d"
                             % (k.shape, self.num_kv_heads, self.head_dim))
        arrays = [k, v]
        s = None
        if slot_mapping is not None:
            s = _slots(slot_mapping, stream, k.shape[0])
            arrays.append(s)
        on_cuda = _same_device(arrays)
        if on_cuda != (self.device == "cuda"):
            raise ValueError("key is on %s, the calibrator on %s" % (k.where(), self.device))
        b = _batch(k, v, s, k.shape[0])
        layer = _int("layer", layer)
        if on_cuda:
            st = _lib.lib.kvcal_calibrator_observe_launch(self._h, layer, ctypes.byref(b),
                                                          current_stream(arrays, stream))
        else:
            st = _lib.lib.kvcal_calibrator_observe_ref(self._h, layer, ctypes.byref(b))
        _lib.check(st, "Calibrator.observe")

    def end_step(self, stream=None):
        _lib.check(_lib.lib.kvcal_calibrator_end_step(self._h, self._stream(stream)),
                   "Calibrator.end_step")

    def merge(self, other, stream=None):
        """Folds another calibrator (same sizes and observer) into this one."""
        if not isinstance(other, Calibrator):
            raise TypeError("other: %s, expected a Calibrator" % type(other).__name__)
        if other is self or other._h.value == self._h.value:
            raise ValueError("other: this calibrator itself: merging it into itself would "
                             "count its statistics twice; pass another one")
        _lib.check(_lib.lib.kvcal_calibrator_merge(self._h, other._h, self._stream(stream)),
                   "Calibrator.merge")

    def tokens(self, stream=None):
        """(tokens observed per layer, steps ended)."""
        t, n = (ctypes.c_int64 * self.num_layers)(), ctypes.c_int64()
        _lib.check(_lib.lib.kvcal_calibrator_tokens(self._h, self._stream(stream), t,
                                                    ctypes.byref(n)), "Calibrator.tokens")
        return list(t), n.value

    def to_bytes(self, stream=None):
        """The state as bytes (format "kvcal-calibrator" v1), for another process's
        from_bytes() and merge()."""
        n = ctypes.c_size_t()
        s = self._stream(stream)
        _lib.check(_lib.lib.kvcal_calibrator_serialize(self._h, s, None, 0, ctypes.byref(n)),
                   "Calibrator.to_bytes")
        buf = ctypes.create_string_buffer(n.value)
        _lib.check(_lib.lib.kvcal_calibrator_serialize(self._h, s, buf, n.value,
                                                       ctypes.byref(n)), "Calibrator.to_bytes")
        return buf.raw[:n.value]

    @classmethod
    def from_bytes(cls, data, device="cpu"):
        _choice("device", device, _DEVICES, "'cpu' or 'cuda'")
        try:
            data = bytes(memoryview(data))
        except TypeError:
            raise TypeError("data: %s, expected the bytes of Calibrator.to_bytes()"
                            % type(data).__name__) from None
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.kvcal_calibrator_deserialize(data, len(data), device == "cuda",
                                                         ctypes.byref(h)),
                   "Calibrator.from_bytes")
        import struct
        L, H, D = struct.unpack_from("<iii", data, 24)
        return cls(L, H, D, device=device, _handle=h)

    def to_scales(self, granularity="tensor", stream=None):
        """A Scales of the observer's thresholds at granularity "tensor" or "head"."""
        h = ctypes.c_void_p()
        _lib.check(_lib.lib.kvcal_calibrator_to_scales(self._h, _granularity(granularity),
                                                       self._stream(stream), ctypes.byref(h)),
                   "Calibrator.to_scales")
        return Scales(0, 0, _handle=h)

    def write(self, path, format="kvcal", granularity="tensor", model_dir=None, tp=1,
              model_type=None, architecture=None):
        """to_scales() then Scales.write(); model_type / architecture recorded first
        (the legacy format needs config.json's model_type)."""
        s = self.to_scales(granularity)
        if model_type or architecture:
            s.set_model(architecture, model_type)
        s.write(path, format, model_dir, tp)
        return s
