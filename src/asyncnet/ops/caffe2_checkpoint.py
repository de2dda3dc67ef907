"""Operators Caffe2's checkpointing uses: the names of a workspace's blobs, and whether a
database exists. Counters (CreateCounter) are saved and loaded as Caffe2 saved them (a
``std::unique_ptr<Counter<int64_t>>`` BlobProto holding the count as a one-element tensor).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("w", np.zeros(2))
    >>> net = an.Net("names")
    >>> _ = net.GetAllBlobNames([], "names")
    >>> _ = net.DBExists([], "there", db_name="/no/such/db", db_type="minidb")
    >>> ws.run_net_once(net)
    >>> ws.fetch("names").tolist(), bool(ws.fetch("there"))
    ([b'names', b'w'], False)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from asyncnet.atomic.local import AtomicInt
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops.dbio import register_blob_type

__all__: list[str] = []


@register_op(
    "GetAllBlobNames",
    inputs=0,
    outputs=1,
    args=[Arg("include_shared", (bool, int), True, "Caffe2's flag (a child workspace's blobs are all its own here)")],
    outputs_doc=("the sorted names of the workspace's blobs (a 1-D tensor of bytes), this op's output included",),
    doc="Caffe2's GetAllBlobNames: the names of every blob of the workspace.",
)
def get_all_blob_names(ctx: Any) -> np.ndarray:
    names = sorted({*(str(k) for k, v in ctx._blobs.items() if v is not None), *ctx.op.outputs})
    out = np.empty(len(names), dtype=object)
    out[:] = [n.encode() for n in names]
    return out


@register_op(
    "DBExists",
    inputs=0,
    outputs=1,
    args=[
        Arg("db_name", str, Arg.REQUIRED, "the database path"),
        Arg("db_type", str, "", "its type (minidb: a file; lmdb: a folder)"),
        Arg("absolute_path", (bool, int), 0, "Caffe2's flag: the path is used as given either way here"),
    ],
    outputs_doc=("0-d bool: whether the database exists",),
    doc="Caffe2's DBExists: whether a database exists at db_name.",
)
def db_exists(ctx: Any) -> np.ndarray:
    return np.array(os.path.exists(ctx.args["db_name"]), dtype=bool)


register_no_gradient("GetAllBlobNames", "DBExists")

_COUNTER_TYPE = "std::unique_ptr<Counter<int64_t>>"


def _encode_counter(name: str, counter: AtomicInt) -> bytes:
    out = bytearray()
    tp._put_bytes(out, 1, name.encode("utf-8"))
    tp._put_bytes(out, 2, _COUNTER_TYPE.encode())
    tp._put_bytes(out, 3, tp.encode_tensor(np.array([counter.load()], np.int64), name=name))
    return bytes(out)


def _decode_counter(blob: dict[str, Any]) -> AtomicInt:
    if blob["tensor"] is None:
        raise ValueError(f"counter blob {blob['name']!r} holds no count")
    count = tp.tensor_from_fields(blob["tensor"]).reshape(-1)
    if count.size != 1:
        raise ValueError(f"counter blob {blob['name']!r} holds {count.size} values, expected 1")
    return AtomicInt(int(count[0]), bits=64)


register_blob_type(_COUNTER_TYPE, _decode_counter, python_type=AtomicInt, encode=_encode_counter)
