"""Caffe2's index ops: a growing dictionary from keys (int32, int64 or strings) to ids 1, 2, ...

``IntIndexCreate``, ``LongIndexCreate`` and ``StringIndexCreate`` store a new :class:`Index`
(at most ``max_elements`` ids, 0 included); ``IndexGet`` maps keys to ids, giving each new key
the next id until the index is frozen (``IndexFreeze``; then a new key gets 0, the id of "not
in the index"); ``IndexLoad`` adds keys in order (``skip_first_entry`` skips the first);
``IndexStore`` gives the keys in id order; ``IndexSize`` the next id (keys + 1). Save and Load
keep an index in a database.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("q", np.array([7, 9, 7], np.int64))
    >>> net = an.Net("index"); _ = net.LongIndexCreate([], "ix", max_elements=10)
    >>> _ = net.IndexGet(["ix", "q"], "ids"); _ = net.IndexSize("ix", "n")
    >>> ws.run_net_once(net); ws.fetch("ids"), ws.fetch("n")
    (array([1, 2, 1]), array(3))
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops.dbio import register_blob_type

__all__ = ["Index"]

_KINDS = {"int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "string": np.dtype(object)}
_LIMIT = 2**31 - 1  # Caffe2's default max_elements: the largest int


class Index:
    """Keys of one kind to consecutive ids from 1 (0: unknown), thread-safe.

    >>> ix = Index("int32", 5); ix.lookup(np.array([4, 2, 4], np.int32)).tolist()
    [1, 2, 1]
    """

    def __init__(self, kind: str, max_elements: int = _LIMIT) -> None:
        if kind not in _KINDS:
            raise ValueError(f"expected an index kind in {sorted(_KINDS)}, got {kind!r}")
        self.kind, self.max_elements = kind, max_elements
        self.frozen = False
        self._ids: dict[Any, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Index({self.kind}, {len(self._ids)} keys{', frozen' if self.frozen else ''})"

    @property
    def size(self) -> int:
        """The next id: the number of keys plus one (id 0)."""
        with self._lock:
            return len(self._ids) + 1

    def _keys(self, keys: Any) -> list[Any]:
        a = np.asarray(keys)
        if a.ndim != 1:
            raise ValueError(f"expected a 1-D tensor of keys, got shape {a.shape}")
        if self.kind == "string":
            if a.dtype.kind not in "OSU":
                raise TypeError(f"expected string keys for a string index, got dtype {a.dtype}")
            return [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in a.tolist()]
        if a.dtype != _KINDS[self.kind]:
            raise TypeError(f"expected {self.kind} keys for this index, got dtype {a.dtype}")
        return a.tolist()

    def _add(self, key: Any) -> int:
        if len(self._ids) + 1 >= self.max_elements:
            raise ValueError(f"the index is full: max_elements={self.max_elements} ids (0 included) are taken")
        self._ids[key] = len(self._ids) + 1
        return self._ids[key]

    def lookup(self, keys: Any) -> np.ndarray:
        """The ids of ``keys`` (int64); a new key gets the next id, or 0 once the index is frozen."""
        keys = self._keys(keys)
        out = np.empty(len(keys), np.int64)
        with self._lock:
            for i, k in enumerate(keys):
                got = self._ids.get(k)
                if got is None:
                    got = 0 if self.frozen else self._add(k)
                out[i] = got
        return out

    def load(self, keys: Any, skip_first: bool = False) -> None:
        """Add ``keys`` in order (each must be new)."""
        keys = self._keys(keys)[1 if skip_first else 0 :]
        with self._lock:
            if self.frozen:
                raise ValueError("cannot load keys into a frozen index")
            for k in keys:
                if k in self._ids:
                    raise ValueError(f"key {k!r} is already in the index (the keys to load must be new and distinct)")
                self._add(k)

    def store(self) -> np.ndarray:
        """The keys in id order."""
        with self._lock:
            keys = list(self._ids)  # dicts keep insertion order: id order
        if self.kind == "string":
            out = np.empty(len(keys), object)
            out[:] = keys
            return out
        return np.array(keys, _KINDS[self.kind])


def _index(ctx: Any, x: Any) -> Index:
    if not isinstance(x, Index):
        raise TypeError(
            f"expected an index (from IntIndexCreate, LongIndexCreate or StringIndexCreate) in input 0 "
            f"{ctx.op.inputs[0]!r}, got {type(x).__name__}"
        )
    return x


_MAX = Arg("max_elements", int, _LIMIT, "the most ids the index holds, 0 included")


def _creator(kind: str) -> Any:
    def create(ctx: Any) -> Index:
        if ctx.args["max_elements"] < 1:
            raise ValueError(f"expected max_elements >= 1, got {ctx.args['max_elements']}")
        return Index(kind, ctx.args["max_elements"])

    return create


for _name, _kind in (("IntIndexCreate", "int32"), ("LongIndexCreate", "int64"), ("StringIndexCreate", "string")):
    register_op(
        _name,
        inputs=0,
        outputs=1,
        args=[_MAX],
        outputs_doc=("handle",),
        doc=f"A new empty index of {_kind} keys.",
    )(_creator(_kind))


@register_op(
    "IndexGet",
    inputs=2,
    outputs=1,
    inputs_doc=("handle", "keys (1-D)"),
    outputs_doc=("ids (int64)",),
    doc="The ids of the keys; a new key gets the next id, or 0 once the index is frozen.",
)
def index_get(ctx: Any, handle: Any, keys: Any) -> np.ndarray:
    return _index(ctx, handle).lookup(keys)


@register_op(
    "IndexLoad",
    inputs=2,
    outputs=1,
    enforce_inplace={0: 0},
    args=[Arg("skip_first_entry", (bool, int), 0, "skip the first key (a stored index's placeholder)")],
    inputs_doc=("handle", "keys (1-D, new and distinct)"),
    outputs_doc=("handle (the same index)",),
    doc="Add the keys in order: they get the next ids.",
)
def index_load(ctx: Any, handle: Any, keys: Any) -> Index:
    ix = _index(ctx, handle)
    ix.load(keys, bool(ctx.args["skip_first_entry"]))
    return ix


@register_op(
    "IndexFreeze",
    inputs=1,
    outputs=1,
    enforce_inplace={0: 0},
    inputs_doc=("handle",),
    outputs_doc=("handle (the same index)",),
    doc="Stop adding keys: IndexGet then gives 0 for a key not in the index.",
)
def index_freeze(ctx: Any, handle: Any) -> Index:
    ix = _index(ctx, handle)
    ix.frozen = True
    return ix


@register_op(
    "IndexStore",
    inputs=1,
    outputs=1,
    inputs_doc=("handle",),
    outputs_doc=("keys (1-D, in id order)",),
    doc="The keys of the index in id order (id 1 first).",
)
def index_store(ctx: Any, handle: Any) -> np.ndarray:
    return _index(ctx, handle).store()


@register_op(
    "IndexSize",
    inputs=1,
    outputs=1,
    inputs_doc=("handle",),
    outputs_doc=("size (int64 scalar)",),
    doc="The next id of the index: its number of keys plus one.",
)
def index_size(ctx: Any, handle: Any) -> np.ndarray:
    return np.array(_index(ctx, handle).size, np.int64)


register_no_gradient(
    "IntIndexCreate", "LongIndexCreate", "StringIndexCreate", "IndexGet", "IndexLoad", "IndexFreeze",
    "IndexStore", "IndexSize",
)  # fmt: skip


_INDEX_TYPE = "std::unique_ptr<caffe2::IndexBase>"


def _encode(name: str, ix: Index) -> bytes:
    """An index in a database: a BlobProto whose tensor holds its keys, the kind, limit and state
    in the tensor's name."""
    state = json.dumps({"kind": ix.kind, "max_elements": ix.max_elements, "frozen": ix.frozen})
    out = bytearray()
    tp._put_bytes(out, 1, name.encode("utf-8"))
    tp._put_bytes(out, 2, _INDEX_TYPE.encode())
    tp._put_bytes(out, 3, tp.encode_tensor(ix.store(), name=state))
    return bytes(out)


def _decode(blob: dict[str, Any]) -> Index:
    fields = blob["tensor"]
    if fields is None:
        raise ValueError(f"index blob {blob['name']!r} holds no keys")
    state = json.loads(fields["name"])
    ix = Index(state["kind"], int(state["max_elements"]))
    ix.load(tp.tensor_from_fields(fields))
    ix.frozen = bool(state["frozen"])
    return ix


register_blob_type(_INDEX_TYPE, _decode, python_type=Index, encode=_encode)
