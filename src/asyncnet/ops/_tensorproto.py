"""Caffe2's TensorProto, TensorProtos and BlobProto on the protobuf wire, without protobuf.

The database and Save/Load operators read and write these three messages; the ops layer does
not depend on the ``caffe2`` package (a higher layer) nor on ``google.protobuf``, so the few
fields they need are coded here by hand from ``caffe2.proto``'s field numbers::

    TensorProto   dims=1 (int64, unpacked), data_type=2, float_data=3 (packed), int32_data=4 (packed),
                  byte_data=5, string_data=6, name=7, double_data=9 (packed), int64_data=10
                  (packed), segment=11 {begin=1, end=2}, raw_data=13
    TensorProtos  protos=1
    BlobProto     name=1, type=2, tensor=3, content=4

Reading accepts packed and unpacked repeated numbers and skips fields it does not know (as
protobuf does); writing emits the canonical encoding (packed numbers, fields in number order).

    >>> import numpy as np
    >>> raw = encode_tensor(np.arange(3, dtype=np.int32))
    >>> decode_tensor(raw)
    array([0, 1, 2], dtype=int32)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "DATA_TYPES",
    "TensorProtoError",
    "decode_blob",
    "decode_tensor",
    "decode_tensor_protos",
    "encode_blob",
    "encode_tensor",
    "encode_tensor_protos",
]

# TensorProto.DataType code -> numpy dtype (BYTE is read as uint8; STRING as an object array of bytes)
DATA_TYPES = {
    1: np.dtype(np.float32),
    2: np.dtype(np.int32),
    3: np.dtype(np.uint8),
    5: np.dtype(np.bool_),
    6: np.dtype(np.uint8),
    7: np.dtype(np.int8),
    8: np.dtype(np.uint16),
    9: np.dtype(np.int16),
    10: np.dtype(np.int64),
    12: np.dtype(np.float16),
    13: np.dtype(np.float64),
}
_CODES = {
    np.dtype(np.float32): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.bool_): 5,
    np.dtype(np.uint8): 6,
    np.dtype(np.int8): 7,
    np.dtype(np.uint16): 8,
    np.dtype(np.int16): 9,
    np.dtype(np.int64): 10,
    np.dtype(np.float16): 12,
    np.dtype(np.float64): 13,
}
_STRING = 4
_INT32_FIELD_TYPES = {2, 5, 6, 7, 8, 9, 12}


class TensorProtoError(ValueError):
    """Bytes that are not the message they should be (truncated, wrong wire type, bad length)."""


# -- the wire ----------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise TensorProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise TensorProtoError("varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints and fixed, bytes for length-delimited."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            value, pos = _varint(buf, pos)
        elif wt == 1:
            if pos + 8 > n:
                raise TensorProtoError("truncated 64-bit field")
            value, pos = buf[pos : pos + 8], pos + 8
        elif wt == 2:
            length, pos = _varint(buf, pos)
            if pos + length > n:
                raise TensorProtoError(f"field {num}: length {length} runs past the end of the message")
            value, pos = buf[pos : pos + length], pos + length
        elif wt == 5:
            if pos + 4 > n:
                raise TensorProtoError("truncated 32-bit field")
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise TensorProtoError(f"field {num}: unsupported wire type {wt}")
        yield num, wt, value


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _put_varint(out: bytearray, v: int) -> None:
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _put_key(out: bytearray, num: int, wt: int) -> None:
    _put_varint(out, num << 3 | wt)


def _put_bytes(out: bytearray, num: int, data: bytes) -> None:
    _put_key(out, num, 2)
    _put_varint(out, len(data))
    out += data


def _packed_varints(values: Any) -> bytes:
    """The varints of ``values`` (ints; negatives as their 64-bit two's complement), back to back."""
    a = np.asarray(values)
    if a.dtype.kind not in "iu" or a.ndim != 1:
        out = bytearray()
        for v in values:
            _put_varint(out, int(v))
        return bytes(out)
    u = a.astype(np.int64).view(np.uint64) if a.dtype.kind == "i" else a.astype(np.uint64)
    length = np.ones(u.size, np.uint8)  # bytes per value
    rest = u >> np.uint64(7)
    groups = [u]
    while rest.any():  # 7-bit groups, low first, while any value has more
        length += rest != 0
        groups.append(rest)
        rest = rest >> np.uint64(7)
    table = np.empty((u.size, len(groups)), np.uint8)  # row i: value i's bytes, then padding
    for k, g in enumerate(groups):
        table[:, k] = (g & np.uint64(0x7F)).astype(np.uint8) | ((length > k + 1).view(np.uint8) << 7)
    return table[np.arange(len(groups), dtype=np.uint8) < length[:, None]].tobytes()


# -- TensorProto -------------------------------------------------------------------------------


def decode_tensor_fields(buf: bytes) -> dict[str, Any]:
    """The fields of one TensorProto as plain Python values."""
    f: dict[str, Any] = {
        "dims": [],
        "data_type": 1,
        "float_data": [],
        "int32_data": [],
        "byte_data": b"",
        "string_data": [],
        "name": "",
        "double_data": [],
        "int64_data": [],
        "segment": None,
        "raw_data": None,
    }
    for num, wt, v in _fields(buf):
        if num == 1:
            f["dims"] += _ints(v, wt)
        elif num == 2 and wt == 0:
            f["data_type"] = v
        elif num == 3:
            f["float_data"].append(np.frombuffer(v, "<f4") if wt in (2, 5) else _bad(3, wt))
        elif num == 4:
            f["int32_data"] += [((x + 2**31) % 2**32) - 2**31 for x in _ints(v, wt)]
        elif num == 5 and wt == 2:
            f["byte_data"] = v
        elif num == 6 and wt == 2:
            f["string_data"].append(bytes(v))
        elif num == 7 and wt == 2:
            f["name"] = v.decode("utf-8", "replace")
        elif num == 9:
            f["double_data"].append(np.frombuffer(v, "<f8") if wt in (1, 2) else _bad(9, wt))
        elif num == 10:
            f["int64_data"] += _ints(v, wt)
        elif num == 11 and wt == 2:
            seg = {n: _signed(x) for n, w, x in _fields(v) if w == 0}
            f["segment"] = (seg.get(1, 0), seg.get(2, 0))
        elif num == 13 and wt == 2:
            f["raw_data"] = v
    return f


def _bad(num: int, wt: int) -> Any:
    raise TensorProtoError(f"field {num}: unexpected wire type {wt}")


def _ints(v: Any, wt: int) -> list[int]:
    if wt == 0:
        return [_signed(v)]
    if wt == 2:
        out, pos = [], 0
        while pos < len(v):
            x, pos = _varint(v, pos)
            out.append(_signed(x))
        return out
    raise TensorProtoError(f"unexpected wire type {wt} for an integer field")


def decode_tensor(buf: bytes) -> np.ndarray:
    """The numpy array one serialized TensorProto holds (strings as an object array of bytes)."""
    f = decode_tensor_fields(bytes(buf))
    return tensor_from_fields(f)


def tensor_from_fields(f: dict[str, Any]) -> np.ndarray:
    dims = tuple(f["dims"])
    code = f["data_type"]
    if code == _STRING:
        out = np.empty(len(f["string_data"]), dtype=object)
        out[:] = f["string_data"]
        return _reshape(out, dims, f)
    if code not in DATA_TYPES:
        raise TensorProtoError(
            f"TensorProto data type {code} is not supported (expected one of {sorted(DATA_TYPES)} or 4, STRING)"
        )
    dtype = DATA_TYPES[code]
    if f["raw_data"] is not None:
        flat = np.frombuffer(f["raw_data"], dtype=dtype.newbyteorder("<")).astype(dtype)
    elif code == 3:
        flat = np.frombuffer(f["byte_data"], dtype=np.uint8).copy()
    elif code == 1:
        flat = np.concatenate(f["float_data"]).astype(np.float32) if f["float_data"] else np.zeros(0, np.float32)
    elif code == 13:
        flat = np.concatenate(f["double_data"]).astype(np.float64) if f["double_data"] else np.zeros(0, np.float64)
    elif code == 10:
        flat = np.asarray(f["int64_data"], dtype=np.int64)
    elif code == 12:
        flat = np.asarray(f["int32_data"], dtype=np.int64).astype(np.uint16).view(np.float16)
    else:
        flat = np.asarray(f["int32_data"], dtype=np.int64).astype(dtype)
    return _reshape(flat, dims, f)


def _reshape(flat: np.ndarray, dims: tuple[int, ...], f: dict[str, Any]) -> np.ndarray:
    if f["segment"] is not None:
        return flat  # one chunk of a larger tensor: the caller places it
    expected = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if flat.size != expected:
        raise TensorProtoError(
            f"TensorProto {f['name']!r}: dims {list(dims)} need {expected} values, found {flat.size}"
        )
    return flat.reshape(dims)


def encode_tensor(array: Any, name: str = "", segment: tuple[int, int] | None = None, dims: Any = None) -> bytes:
    """One serialized TensorProto of ``array`` (typed fields, as Caffe2's serializer writes them);
    ``dims`` (the whole tensor's, for a chunk given with its ``segment``) overrides its shape."""
    a = np.asarray(array)
    out = bytearray()
    for d in a.shape if dims is None else dims:  # dims is not packed in caffe2.proto
        _put_key(out, 1, 0)
        _put_varint(out, d)
    flat = a.ravel()
    if a.dtype.kind in "OSU":
        _put_key(out, 2, 0)
        _put_varint(out, _STRING)
        for v in flat:
            _put_bytes(out, 6, v if isinstance(v, bytes) else str(v).encode("utf-8"))
        return _finish(out, name, segment)
    code = _CODES.get(a.dtype)
    if code is None:
        raise TensorProtoError(
            f"cannot serialize dtype {a.dtype}; expected one of {sorted(str(d) for d in _CODES)} or strings"
        )
    _put_key(out, 2, 0)
    _put_varint(out, code)
    if code == 1 and flat.size:
        _put_bytes(out, 3, flat.astype("<f4").tobytes())
    elif code in _INT32_FIELD_TYPES and flat.size:
        ints = flat.view(np.uint16) if code == 12 else flat
        _put_bytes(out, 4, _packed_varints(ints.astype(np.int64)))
    elif code == 13 and flat.size:
        _put_bytes(out, 9, flat.astype("<f8").tobytes())
    elif code == 10 and flat.size:
        _put_bytes(out, 10, _packed_varints(flat))
    return _finish(out, name, segment)


def _finish(out: bytearray, name: str, segment: tuple[int, int] | None) -> bytes:
    if name:
        _put_bytes(out, 7, name.encode("utf-8"))
    if segment is not None:
        seg = bytearray()
        for num, v in ((1, segment[0]), (2, segment[1])):
            _put_key(seg, num, 0)
            _put_varint(seg, v)
        _put_bytes(out, 11, bytes(seg))
    return bytes(out)


# -- TensorProtos and BlobProto ------------------------------------------------------------------


def decode_tensor_protos(buf: bytes) -> list[np.ndarray]:
    """The arrays of one serialized TensorProtos (a database record of TensorProtosDBInput)."""
    return [decode_tensor(v) for num, wt, v in _fields(bytes(buf)) if num == 1 and wt == 2]


def encode_tensor_protos(arrays: Any) -> bytes:
    """One serialized TensorProtos holding ``arrays`` in order."""
    out = bytearray()
    for a in arrays:
        _put_bytes(out, 1, encode_tensor(a))
    return bytes(out)


def decode_blob(buf: bytes) -> dict[str, Any]:
    """{"name", "type", "tensor" (the TensorProto's fields, or None), "content"} of one BlobProto."""
    d: dict[str, Any] = {"name": "", "type": "", "tensor": None, "content": None}
    for num, wt, v in _fields(bytes(buf)):
        if wt != 2:
            continue
        if num == 1:
            d["name"] = v.decode("utf-8", "replace")
        elif num == 2:
            d["type"] = v.decode("utf-8", "replace")
        elif num == 3:
            d["tensor"] = decode_tensor_fields(v)
        elif num == 4:
            d["content"] = bytes(v)
    return d


def encode_blob(name: str, array: Any, segment: tuple[int, int] | None = None) -> bytes:
    """One serialized BlobProto of type "Tensor" holding ``array`` (Caffe2's Save record)."""
    out = bytearray()
    _put_bytes(out, 1, name.encode("utf-8"))
    _put_bytes(out, 2, b"Tensor")
    _put_bytes(out, 3, encode_tensor(array, name=name, segment=segment))
    return bytes(out)
