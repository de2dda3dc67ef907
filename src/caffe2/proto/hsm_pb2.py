"""Caffe2's ``hsm.proto``: the tree of a hierarchical softmax (NodeProto, TreeProto) and the
root-to-word paths built from it (HierarchyProto, PathProto, PathNodeProto), in the same
descriptor pool as :mod:`caffe2.proto.caffe2_pb2`.

    >>> from caffe2.proto import hsm_pb2
    >>> t = hsm_pb2.TreeProto(); t.root_node.word_ids.extend([3, 4])
    >>> list(hsm_pb2.TreeProto.FromString(t.SerializeToString()).root_node.word_ids)
    [3, 4]
"""

from __future__ import annotations

from typing import Any

from caffe2.proto import caffe2_pb2

_MESSAGES = [
    (
        "NodeProto",
        [
            ("repeated", ".caffe2.NodeProto", "children", 1, {}),
            ("repeated", "int32", "word_ids", 2, {}),
            ("optional", "int32", "offset", 3, {}),
            ("optional", "string", "name", 4, {}),
            ("repeated", "float", "scores", 5, {}),
        ],
    ),
    ("TreeProto", [("optional", ".caffe2.NodeProto", "root_node", 1, {})]),
    (
        "HierarchyProto",
        [("optional", "int32", "size", 1, {}), ("repeated", ".caffe2.PathProto", "paths", 2, {})],
    ),
    (
        "PathProto",
        [("optional", "int32", "word_id", 1, {}), ("repeated", ".caffe2.PathNodeProto", "path_nodes", 2, {})],
    ),
    (
        "PathNodeProto",
        [
            ("optional", "int32", "index", 1, {}),
            ("optional", "int32", "length", 2, {}),
            ("optional", "int32", "target", 3, {}),
        ],
    ),
]


DESCRIPTOR, _CLASSES = caffe2_pb2.add_proto_file("caffe2/proto/hsm.proto", _MESSAGES, ())

NodeProto: Any
TreeProto: Any
HierarchyProto: Any
PathProto: Any
PathNodeProto: Any

globals().update(_CLASSES)

__all__ = [name for name, _ in _MESSAGES] + ["DESCRIPTOR"]
