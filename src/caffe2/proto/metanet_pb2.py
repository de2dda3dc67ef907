"""Caffe2's ``metanet.proto`` (MetaNetDef: the nets and blob lists of an exported predictor),
built at import time in the same descriptor pool as :mod:`caffe2.proto.caffe2_pb2`.

    >>> from caffe2.proto import metanet_pb2
    >>> m = metanet_pb2.MetaNetDef()
    >>> _ = m.nets.add(key="predict").value.op.add(type="Relu")
    >>> metanet_pb2.MetaNetDef.FromString(m.SerializeToString()).nets[0].value.op[0].type
    'Relu'
"""

from __future__ import annotations

from typing import Any

from caffe2.proto import caffe2_pb2

_MESSAGES = [
    (
        "ModelInfo",
        [
            ("optional", "string", "project", 1, {}),
            ("optional", "string", "modelClass", 2, {}),
            ("optional", "string", "version", 3, {}),
            ("optional", "string", "predictorType", 4, {"default": "SINGLE_PREDICTOR"}),
            ("optional", "string", "modelId", 5, {}),
        ],
    ),
    ("BlobsMap", [("required", "string", "key", 1, {}), ("repeated", "string", "value", 2, {})]),
    ("NetsMap", [("required", "string", "key", 1, {}), ("required", ".caffe2.NetDef", "value", 2, {})]),
    ("PlansMap", [("required", "string", "key", 1, {}), ("required", ".caffe2.PlanDef", "value", 2, {})]),
    ("StringMap", [("required", "string", "key", 1, {}), ("required", "string", "value", 2, {})]),
    (
        "MetaNetDef",
        [
            ("repeated", ".caffe2.BlobsMap", "blobs", 1, {}),
            ("repeated", ".caffe2.NetsMap", "nets", 2, {}),
            ("optional", ".caffe2.ModelInfo", "modelInfo", 3, {}),
            ("repeated", ".caffe2.PlansMap", "plans", 4, {}),
            ("repeated", ".caffe2.StringMap", "applicationSpecificInfo", 5, {}),
            ("repeated", "string", "blobsOrder", 6, {}),
            ("repeated", "string", "preLoadBlobs", 7, {}),
        ],
    ),
]


DESCRIPTOR, _CLASSES = caffe2_pb2.add_proto_file(
    "caffe2/proto/metanet.proto", _MESSAGES, ("caffe2/proto/caffe2.proto",)
)

ModelInfo: Any
BlobsMap: Any
NetsMap: Any
PlansMap: Any
StringMap: Any
MetaNetDef: Any

globals().update(_CLASSES)

__all__ = [name for name, _ in _MESSAGES] + ["DESCRIPTOR"]
