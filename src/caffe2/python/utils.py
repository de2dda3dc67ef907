"""Caffe2's ``caffe2.python.utils``: arguments and tensors to and from protobuf.

>>> from caffe2.python import utils
>>> utils.MakeArgument("kernel", 3)
name: "kernel"
i: 3
<BLANKLINE>
>>> utils.Caffe2TensorToNumpyArray(utils.NumpyArrayToCaffe2Tensor(np.arange(4, dtype=np.int64).reshape(2, 2)))
array([[0, 1],
       [2, 3]])
"""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np
from google.protobuf.message import Message

from caffe2.proto import caffe2_pb2

__all__ = [
    "ITERATION_MUTEX_NAME",
    "OPTIMIZER_ITERATION_NAME",
    "ArgsToDict",
    "BuildUniqueMutexIter",
    "Caffe2TensorToNumpyArray",
    "CaffeBlobToNumpyArray",
    "DebugMode",
    "debug",
    "EnumClassKeyVals",
    "GetContentFromProto",
    "MakeArgument",
    "NumpyArrayToCaffe2Tensor",
    "raiseIfNotEqual",
]

_DT = caffe2_pb2.TensorProto
# numpy dtype -> (TensorProto data type, the TensorProto field holding it)
_NP_TO_C2 = {
    np.dtype(np.float32): (_DT.FLOAT, "float_data"),
    np.dtype(np.float64): (_DT.DOUBLE, "double_data"),
    np.dtype(np.int32): (_DT.INT32, "int32_data"),
    np.dtype(np.int64): (_DT.INT64, "int64_data"),
    np.dtype(np.bool_): (_DT.BOOL, "int32_data"),
    np.dtype(np.uint8): (_DT.UINT8, "int32_data"),
    np.dtype(np.int8): (_DT.INT8, "int32_data"),
    np.dtype(np.uint16): (_DT.UINT16, "int32_data"),
    np.dtype(np.int16): (_DT.INT16, "int32_data"),
    np.dtype(np.float16): (_DT.FLOAT16, "int32_data"),
}
_C2_TO_NP = {code: dt for dt, (code, _) in _NP_TO_C2.items()}
_C2_TO_NP[_DT.BYTE] = np.dtype(np.uint8)


def caffe2_dtype_to_numpy(code: int) -> np.dtype:
    """The numpy dtype of a ``TensorProto.DataType`` code (``core.DataType.INT32`` -> int32)."""
    if code not in _C2_TO_NP:
        raise TypeError(f"Caffe2 data type {code} has no numpy equivalent here")
    return _C2_TO_NP[code]


def MakeArgument(key: str, value: Any) -> Any:
    """A ``caffe2_pb2.Argument`` for ``value``, typed as Caffe2 types it (bools as ints; a list
    must be all floats, all ints or all strings)."""
    arg = caffe2_pb2.Argument(name=key)
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        arg.floats.extend(value.ravel().tolist())
        return arg
    if isinstance(value, np.ndarray):
        value = value.ravel().tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    iterable = isinstance(value, collections.abc.Iterable) and not isinstance(value, (str, bytes))
    if type(value) is float:
        arg.f = value
    elif type(value) in (int, bool):
        arg.i = int(value)
    elif isinstance(value, bytes):
        arg.s = value
    elif isinstance(value, str):
        arg.s = value.encode("utf-8")
    elif isinstance(value, caffe2_pb2.NetDef):
        arg.n.CopyFrom(value)
    elif isinstance(value, Message):
        arg.s = value.SerializeToString()
    elif iterable:
        _fill_iterable(arg, key, list(value))
    else:
        raise ValueError(f"Unknown argument type: key={key} value={value!r}, value type={type(value)}")
    return arg


def _fill_iterable(arg: Any, key: str, items: list[Any]) -> None:
    items = [v.item() if isinstance(v, np.generic) else v for v in items]
    if all(type(v) is float for v in items):
        arg.floats.extend(items)
    elif all(type(v) in (int, bool) for v in items):
        arg.ints.extend(int(v) for v in items)
    elif all(isinstance(v, (str, bytes)) for v in items):
        arg.strings.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
    elif all(isinstance(v, caffe2_pb2.NetDef) for v in items):
        arg.nets.extend(items)
    elif all(isinstance(v, Message) for v in items):
        arg.strings.extend(v.SerializeToString() for v in items)
    else:
        raise ValueError(
            f"Unknown iterable argument type: key={key} value={items!r}, "
            f"value types={sorted({type(v).__name__ for v in items})}"
        )


def ArgsToDict(args: Any) -> dict[str, Any]:
    """{name: value} of a list of ``caffe2_pb2.Argument`` (the one field set in each)."""
    out: dict[str, Any] = {}
    for arg in args:
        for fname in ("f", "i", "s", "n", "t"):
            if arg.HasField(fname):
                out[arg.name] = getattr(arg, fname)
                break
        else:
            for fname in ("floats", "ints", "strings", "nets", "tensors"):
                if len(getattr(arg, fname)):
                    out[arg.name] = list(getattr(arg, fname))
                    break
            else:
                out[arg.name] = []
    return out


def NumpyArrayToCaffe2Tensor(arr: np.ndarray, name: str | None = None) -> Any:
    """A ``caffe2_pb2.TensorProto`` holding ``arr`` in the field Caffe2 uses for its dtype."""
    arr = np.asarray(arr)
    tensor = caffe2_pb2.TensorProto()
    tensor.dims.extend(arr.shape)
    if name:
        tensor.name = name
    if arr.dtype.kind in "OSU":
        tensor.data_type = _DT.STRING
        tensor.string_data.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in arr.ravel())
        return tensor
    try:
        code, fname = _NP_TO_C2[arr.dtype]
    except KeyError:
        raise TypeError(
            f"Don't know how to convert a numpy array of dtype {arr.dtype} to a Caffe2 TensorProto; "
            f"expected one of {sorted(str(d) for d in _NP_TO_C2)} or strings"
        ) from None
    tensor.data_type = code
    flat = arr.ravel()
    if arr.dtype == np.float16:
        flat = flat.view(np.uint16)
    if fname == "int32_data":
        flat = flat.astype(np.int32)
    getattr(tensor, fname).extend(flat.tolist())
    return tensor


def Caffe2TensorToNumpyArray(tensor: Any) -> np.ndarray:
    """The numpy array a ``caffe2_pb2.TensorProto`` holds (typed or raw storage)."""
    dims = tuple(tensor.dims)
    code = tensor.data_type
    if code == _DT.STRING:
        return np.array(list(tensor.string_data), dtype=object).reshape(dims)
    if code not in _C2_TO_NP:
        name = _DT.DataType.Name(code) if code in _DT.DataType.values() else str(code)
        raise TypeError(f"TensorProto {tensor.name!r}: data type {name} has no numpy equivalent here")
    dtype = _C2_TO_NP[code]
    if tensor.HasField("raw_data"):
        return np.frombuffer(tensor.raw_data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(dims)
    if code == _DT.BYTE:
        return np.frombuffer(tensor.byte_data, dtype=np.uint8).reshape(dims).copy()
    field = {_DT.FLOAT: "float_data", _DT.DOUBLE: "double_data", _DT.INT64: "int64_data"}.get(code, "int32_data")
    data = np.array(getattr(tensor, field), dtype=np.uint16 if code == _DT.FLOAT16 else None)
    if code == _DT.FLOAT16:
        return data.view(np.float16).reshape(dims)
    return data.astype(dtype).reshape(dims)


def CaffeBlobToNumpyArray(blob: Any) -> np.ndarray:
    """A numpy array from a Caffe (1) BlobProto-like message with ``shape.dim`` or ``num/channels/height/width``."""
    if blob.HasField("shape"):
        return np.asarray(blob.data, dtype=np.float32).reshape(tuple(blob.shape.dim))
    return np.asarray(blob.data, dtype=np.float32).reshape(blob.num, blob.channels, blob.height, blob.width)


def GetContentFromProto(obj: Any, function_map: dict[Any, Any]) -> Any:
    """Apply the function of ``function_map`` keyed by the message type of ``obj``."""
    for cls, fn in function_map.items():
        if type(obj) is cls:
            return fn(obj)
    raise TypeError(f"no function for {type(obj).__name__}")


def GetContentFromProtoString(s: bytes, function_map: dict[Any, Any]) -> Any:
    """Parse ``s`` as each message type of ``function_map`` in turn; apply the first that parses."""
    for cls, fn in function_map.items():
        try:
            obj = cls()
            obj.ParseFromString(s)
            return fn(obj)
        except Exception:  # noqa: BLE001 - try the next message type, as Caffe2 does
            continue
    raise ValueError("the string parses as none of the given message types")


class DebugMode:
    """Run a function; on an exception print the traceback and, on an interactive terminal, open
    pdb post-mortem (Caffe2's ``DebugMode``); then re-raise."""

    @classmethod
    def run(cls, func: Any, *args: Any, **kwargs: Any) -> Any:
        import pdb
        import sys
        import traceback

        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except Exception:
            traceback.print_exc()
            if sys.stdin is not None and sys.stdin.isatty():
                pdb.post_mortem(sys.exc_info()[2])
            raise


def debug(f: Any) -> Any:
    """Decorate ``f`` with :class:`DebugMode`'s behaviour (Caffe2's ``utils.debug``)."""
    import functools

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return DebugMode.run(f, *args, **kwargs)

    return wrapper


def raiseIfNotEqual(a: Any, b: Any, msg: str) -> None:
    """Raise ``Exception(msg)`` with both values when ``a != b``."""
    if a != b:
        raise Exception(f"{msg}. {a} != {b}")


OPTIMIZER_ITERATION_NAME = "optimizer_iteration"
ITERATION_MUTEX_NAME = "iteration_mutex"


def BuildUniqueMutexIter(init_net: Any, net: Any, iter: Any = None, iter_mutex: Any = None, iter_val: int = 0) -> Any:
    """The mutex-guarded iteration counter (``optimizer_iteration``), made once: an int64 [1]
    ConstantFill and a CreateMutex in ``init_net``, an AtomicIter in ``net``; returns the counter."""
    from caffe2.python import core

    iter = iter if iter is not None else OPTIMIZER_ITERATION_NAME
    iter_mutex = iter_mutex if iter_mutex is not None else ITERATION_MUTEX_NAME
    if init_net.BlobIsDefined(iter):
        return init_net.GetBlobRef(iter)
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        iteration = init_net.ConstantFill([], iter, shape=[1], value=iter_val, dtype=core.DataType.INT64)
        mutex = init_net.CreateMutex([], [iter_mutex])
        net.AtomicIter([mutex, iteration], [iteration])
    return iteration


def EnumClassKeyVals(cls: type) -> dict[str, Any]:
    """{name: value} of the public, non-callable class attributes of ``cls``."""
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") and not callable(v)}
