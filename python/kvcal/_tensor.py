"""What the binding needs of an array, from torch tensors or anything with
`__cuda_array_interface__`, `__dlpack__` or numpy's `__array_interface__`:
its address, shape, strides (in elements), element type and device.

torch is never imported here: a torch tensor is recognised by its type's
module, and the current CUDA stream is asked of torch only when torch is
already imported (by the caller)."""
import ctypes
import sys

from . import _lib

# element type names -> (kvcal dtype, bytes)
F32, F16, BF16, U8, I8, I32, I64, F8 = ("float32", "float16", "bfloat16", "uint8",
                                        "int8", "int32", "int64", "float8_e4m3fn")
F8E5M2 = "float8_e5m2"
ITEMSIZE = {F32: 4, F16: 2, BF16: 2, U8: 1, I8: 1, I32: 4, I64: 8, F8: 1, F8E5M2: 1}
KVCAL_DTYPE = {F32: _lib.DTYPE_F32, F16: _lib.DTYPE_F16, BF16: _lib.DTYPE_BF16}

_TORCH_DTYPES = {}  # torch.dtype -> name, filled on first use


def _torch_name(dt):
    name = _TORCH_DTYPES.get(dt)
    if name is None:
        name = str(dt).replace("torch.", "")
        _TORCH_DTYPES[dt] = name
    return name


class Array:
    """One argument: ptr (int), shape and strides (tuples, strides in
    elements), dtype (a name above, or another string), device ("cpu" or
    "cuda"), device_index, and `keep`, what must stay alive during the call."""

    __slots__ = ("name", "ptr", "shape", "strides", "dtype", "device", "device_index",
                 "keep", "torch", "readonly")

    def __init__(self):
        self.readonly = False  # known read-only (numpy's writeable flag)

    def __repr__(self):
        return "%s: %s %s on %s" % (self.name, self.dtype, tuple(self.shape), self.where())

    def where(self):
        return "cpu" if self.device == "cpu" else "cuda:%d" % self.device_index

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


# --- DLPack -----------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype = ctypes.c_void_p
_capsule_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]

# (code, bits) -> name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 10 float8_e4m3fn,
# 12 float8_e5m2
_DL_DTYPES = {(2, 32): F32, (2, 16): F16, (4, 16): BF16, (1, 8): U8, (0, 8): I8,
              (0, 32): I32, (0, 64): I64, (10, 8): F8, (12, 8): F8E5M2}
# names of element types kvcal takes nowhere, for the messages
_DL_OTHER = {(2, 64): "float64", (6, 8): "bool", (0, 16): "int16", (1, 16): "uint16",
             (1, 32): "uint32", (1, 64): "uint64", (5, 64): "complex64",
             (5, 128): "complex128"}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


def _from_dlpack(name, obj, stream):
    dev_type = None
    if hasattr(obj, "__dlpack_device__"):
        dev_type, _ = obj.__dlpack_device__()
    if dev_type == _DL_CUDA:
        # the producer makes the data ready on our stream (-1: no sync needed
        # is not asked; 1 is the legacy default stream in the protocol)
        capsule = obj.__dlpack__(stream=stream if stream else 1)
    else:
        capsule = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_ptr(capsule, b"dltensor"))
    a = Array()
    a.name, a.keep, a.torch = name, (obj, capsule), False
    a.shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        a.strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        a.strides = _contiguous(a.shape)
    key = (t.dtype.code, t.dtype.bits)
    a.dtype = _DL_DTYPES.get(key) or _DL_OTHER.get(key) or "dlpack(code %d, bits %d)" % key
    if t.dtype.lanes != 1:
        a.dtype = "dlpack(%d lanes)" % t.dtype.lanes
    a.ptr = (t.data or 0) + t.byte_offset
    dt = t.device.device_type
    a.device = "cuda" if dt in (_DL_CUDA, _DL_CUDA_MANAGED) else "cpu"
    if dt not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED):
        raise TypeError("%s: DLPack device type %d is neither CPU nor CUDA" % (name, dt))
    a.device_index = t.device.device_id
    return a


# --- array interfaces ---------------------------------------------------------

_TYPESTR = {"<f4": F32, "<f2": F16, "|u1": U8, "<u1": U8, "|i1": I8, "<i4": I32,
            "<i8": I64, "<V2": BF16}
_TYPESTR_OTHER = {"<f8": "float64", "|b1": "bool", "<i2": "int16", "<u2": "uint16",
                  "<u4": "uint32", "<u8": "uint64", "|O": "object"}


def _contiguous(shape):
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return tuple(reversed(strides))


def _from_interface(name, obj, iface, device):
    a = Array()
    a.name, a.keep, a.torch = name, obj, False
    a.shape = tuple(iface["shape"])
    ts = iface["typestr"]
    a.dtype = _TYPESTR.get(ts) or _TYPESTR_OTHER.get(ts) or "typestr " + ts
    if ts[:1] == ">" and ts[2:] != "1":
        a.dtype = "big-endian typestr " + ts
    size = ITEMSIZE.get(a.dtype, 1)
    st = iface.get("strides")
    if st is None:
        a.strides = _contiguous(a.shape)
    else:
        if any(s % size for s in st):
            raise ValueError("%s: strides %s bytes are not whole elements of %d bytes"
                             % (name, tuple(st), size))
        a.strides = tuple(s // size for s in st)
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise TypeError("%s: its array interface gives no data pointer (data %r): pass a "
                        "torch tensor or a numpy array" % (name, data))
    a.ptr = data[0] or 0
    a.readonly = bool(data[1])
    a.device = device
    a.device_index = 0
    return a


def as_array(name, obj, stream=None):
    """The Array of obj, argument `name` (for the messages)."""
    t = type(obj)
    if t.__module__.startswith("torch"):
        a = Array()
        a.name, a.keep, a.torch = name, obj, True
        if obj.is_cuda:
            a.device, a.device_index = "cuda", obj.get_device()
        elif obj.is_cpu:
            a.device, a.device_index = "cpu", 0
        else:
            raise TypeError("%s: a tensor on %s; kvcal takes CPU and CUDA tensors"
                            % (name, obj.device))
        if obj.layout is not sys.modules["torch"].strided:
            raise TypeError("%s: a %s tensor; kvcal takes dense (torch.strided) tensors: "
                            "pass %s.to_dense()" % (name, obj.layout, name))
        a.ptr = obj.data_ptr()
        a.shape = tuple(obj.shape)
        a.strides = obj.stride()
        dt = obj.dtype
        a.dtype = _TORCH_DTYPES.get(dt) or _torch_name(dt)
        return a
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        a = _from_interface(name, obj, iface, "cuda")
        try:
            import cupy  # noqa: F401  (device of a cupy array)
            a.device_index = obj.device.id
        except Exception:
            pass
        return a
    iface = getattr(obj, "__array_interface__", None)
    if hasattr(obj, "__dlpack__"):
        try:
            return _from_dlpack(name, obj, stream)
        except BufferError as e:
            # numpy refuses a DLPack export of read-only, non-native-endian or
            # non-numeric arrays; its __array_interface__ tells them apart
            if iface is None:
                raise TypeError("%s: %s refused to export its data through DLPack (%s)"
                                % (name, t.__name__, e)) from None
    if iface is not None:
        return _from_interface(name, obj, iface, "cpu")
    raise TypeError("%s: %s is not an array: pass a torch tensor or an object with "
                    "__dlpack__, __cuda_array_interface__ or __array_interface__"
                    % (name, t.__name__))


def current_stream(arrays, stream):
    """The CUDA stream (an int handle) a call runs on: `stream` when given
    (an int, or anything with .cuda_stream or .ptr), else torch's current
    stream of the arrays' device (the current device without arrays) when
    torch is imported, else 0 (the legacy
    default stream)."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    torch = sys.modules.get("torch")
    if torch is not None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(arrays[0].device_index if arrays else torch.cuda.current_device())
        return torch.cuda.current_stream(arrays[0].device_index if arrays else None).cuda_stream
    return 0
