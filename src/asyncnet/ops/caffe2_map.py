"""Caffe2's map ops: a dictionary blob from int32/int64 keys to int32/int64 values.

``CreateMap`` stores an empty :class:`KeyValueMap` of ``key_dtype`` and ``value_dtype``
(TensorProto.DataType numbers or names; INT32 by default); ``KeyValueToMap`` builds one from a
keys and a values tensor (a repeated key keeps its last value); ``MapToKeyValue`` gives them
back as two tensors. Save and Load keep a map in a database.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("k", np.array([3, 1], np.int64)); ws.feed("v", np.array([7, 5], np.int32))
    >>> net = an.Net("map"); _ = net.KeyValueToMap(["k", "v"], "m"); _ = net.MapToKeyValue("m", ["k2", "v2"])
    >>> ws.run_net_once(net); ws.fetch("k2"), ws.fetch("v2")
    (array([3, 1]), array([7, 5], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops.dbio import register_blob_type
from asyncnet.ops.fill import fill_dtype

__all__ = ["KeyValueMap"]

_TYPES = (np.dtype(np.int32), np.dtype(np.int64))


class KeyValueMap(dict):
    """A dict with the numpy dtypes of its keys and values.

    >>> m = KeyValueMap(np.int64, np.int32); m[4] = 2; m.arrays()
    (array([4]), array([2], dtype=int32))
    """

    def __init__(self, key_dtype: Any, value_dtype: Any) -> None:
        super().__init__()
        self.key_dtype, self.value_dtype = np.dtype(key_dtype), np.dtype(value_dtype)
        for which, dt in (("key", self.key_dtype), ("value", self.value_dtype)):
            if dt not in _TYPES:
                raise ValueError(f"expected a {which} dtype int32 or int64, got {dt}")

    def __repr__(self) -> str:
        return f"KeyValueMap({self.key_dtype}->{self.value_dtype}, {len(self)} entries)"

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) in insertion order."""
        return np.array(list(self.keys()), self.key_dtype), np.array(list(self.values()), self.value_dtype)


def _dtype(name: str, value: Any) -> np.dtype:
    dt = fill_dtype(value)
    if dt not in _TYPES:
        raise ValueError(f"expected {name} INT32 or INT64, got {value!r} ({dt})")
    return dt


@register_op(
    "CreateMap",
    inputs=0,
    outputs=1,
    args=[
        Arg("key_dtype", (int, str), 2, "INT32 (2) or INT64 (10)"),
        Arg("value_dtype", (int, str), 2, "INT32 (2) or INT64 (10)"),
    ],
    outputs_doc=("map",),
    doc="An empty map of key_dtype keys to value_dtype values.",
)
def create_map(ctx: Any) -> KeyValueMap:
    return KeyValueMap(_dtype("key_dtype", ctx.args["key_dtype"]), _dtype("value_dtype", ctx.args["value_dtype"]))


@register_op(
    "KeyValueToMap",
    inputs=2,
    outputs=1,
    inputs_doc=("keys (1-D int32 or int64)", "values (1-D int32 or int64, as many)"),
    outputs_doc=("map",),
    doc="A map of each key to its value (a repeated key keeps its last value).",
)
def key_value_to_map(ctx: Any, keys: Any, values: Any) -> KeyValueMap:
    keys, values = np.asarray(keys), np.asarray(values)
    if keys.ndim != 1 or values.ndim != 1 or len(keys) != len(values):
        raise ValueError(f"expected 1-D keys and values of one length, got shapes {keys.shape} and {values.shape}")
    out = KeyValueMap(keys.dtype, values.dtype)
    out.update(zip(keys.tolist(), values.tolist()))
    return out


@register_op(
    "MapToKeyValue",
    inputs=1,
    outputs=2,
    inputs_doc=("map",),
    outputs_doc=("keys", "values"),
    doc="The keys and the values of a map, in insertion order.",
)
def map_to_key_value(ctx: Any, m: Any) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(m, KeyValueMap):
        raise TypeError(
            f"expected a map (from CreateMap or KeyValueToMap) in input 0 {ctx.op.inputs[0]!r}, got {type(m).__name__}"
        )
    return m.arrays()


register_no_gradient("CreateMap", "KeyValueToMap", "MapToKeyValue")


_MAP_TYPE = "std::unique_ptr<std::unordered_map>"


def _encode(name: str, m: KeyValueMap) -> bytes:
    """A map in a database: a BlobProto whose content is a TensorProtos of its keys, then its values."""
    out = bytearray()
    tp._put_bytes(out, 1, name.encode("utf-8"))
    tp._put_bytes(out, 2, _MAP_TYPE.encode())
    tp._put_bytes(out, 4, tp.encode_tensor_protos(m.arrays()))
    return bytes(out)


def _decode(blob: dict[str, Any]) -> KeyValueMap:
    parts = tp.decode_tensor_protos(blob["content"] or b"")
    if len(parts) != 2 or parts[0].shape != parts[1].shape:
        raise ValueError(f"expected a map record of keys and values of one length, got {[p.shape for p in parts]}")
    out = KeyValueMap(parts[0].dtype, parts[1].dtype)
    out.update(zip(parts[0].tolist(), parts[1].tolist()))
    return out


register_blob_type(_MAP_TYPE, _decode, python_type=KeyValueMap, encode=_encode)
