"""Protobuf messages to and from bytes (Caffe2's ``predictor.serde``)."""

from __future__ import annotations

from typing import Any

__all__ = ["deserialize_protobuf_struct", "serialize_protobuf_struct"]


def serialize_protobuf_struct(protobuf_struct: Any) -> bytes:
    return protobuf_struct.SerializeToString()


def deserialize_protobuf_struct(serialized_protobuf: bytes, struct_type: Any) -> Any:
    deser = struct_type()
    deser.ParseFromString(serialized_protobuf)
    return deser
