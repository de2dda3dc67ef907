"""Caffe2's databases and model files: CreateDB, TensorProtosDBInput, Save and Load.

Two database types, as Caffe2 named them:

* ``minidb``: one file of records, each ``int32 key length, int32 value length, key, value``
  (native byte order; little-endian here), Caffe2's own simple format for model files.
* ``lmdb``: an LMDB environment (a folder), through the ``lmdb`` package (``asyncnet[caffe2]``);
  records are read in key order.

A record of a data set is a serialized ``TensorProtos`` (one TensorProto per output of
TensorProtosDBInput). A record of a model file is a serialized ``BlobProto``: a tensor under key
``<blob>#%<chunk>`` (large tensors are cut in chunks of ``chunk_size`` values, each with its
segment), a string blob as type ``std::string``. See :mod:`asyncnet.ops._tensorproto`.

    >>> import os, tempfile, numpy as np, asyncnet as an
    >>> path = os.path.join(tempfile.mkdtemp(), "model.minidb")
    >>> ws = an.Workspace(); ws.feed("w", np.arange(4.0).reshape(2, 2))
    >>> save = an.Net("save"); save.Save(["w"], [], db=path, db_type="minidb"); ws.run_net_once(save)
    >>> ws.remove("w")
    >>> load = an.Net("load"); _ = load.Load([], ["w"], db=path, db_type="minidb"); ws.run_net_once(load)
    >>> ws.fetch("w")
    array([[0., 1.],
           [2., 3.]])
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from asyncnet._atomicio import atomic_write
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp

__all__ = ["CHUNK_SEPARATOR", "DBReader", "open_db", "read_minidb", "register_blob_type", "write_db"]

CHUNK_SEPARATOR = "#%"
DB_TYPES = ("minidb", "lmdb")
DEFAULT_CHUNK_SIZE = 1_000_000  # Caffe2's caffe2_tensor_chunk_size
_HEADER = struct.Struct("<ii")


# -- databases ---------------------------------------------------------------------------------


def _check_type(db_type: str) -> None:
    if db_type not in DB_TYPES:
        raise ValueError(f"db_type {db_type!r} is not supported; expected one of {list(DB_TYPES)}")


def read_minidb(path: str) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) records of a minidb file, in file order."""
    with open(path, "rb") as f:
        while True:
            head = f.read(_HEADER.size)
            if not head:
                return
            if len(head) < _HEADER.size:
                raise ValueError(f"{path}: truncated minidb record header")
            klen, vlen = _HEADER.unpack(head)
            if klen <= 0 or vlen < 0:
                raise ValueError(f"{path}: corrupt minidb record (key length {klen}, value length {vlen})")
            key, value = f.read(klen), f.read(vlen)
            if len(key) < klen or len(value) < vlen:
                raise ValueError(f"{path}: truncated minidb record")
            yield key, value


def _lmdb() -> Any:
    try:
        import lmdb
    except ImportError:
        raise ValueError("db_type 'lmdb' needs the lmdb package (pip install 'asyncnet[caffe2]')") from None
    return lmdb


def _read_lmdb(path: str) -> list[tuple[bytes, bytes]]:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no LMDB folder at {path}")
    env = _lmdb().open(path, readonly=True, lock=False, readahead=False, subdir=True)
    try:
        with env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
    finally:
        env.close()


def open_db(path: str, db_type: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) record of a database, in its order (minidb: file order; lmdb: key order)."""
    _check_type(db_type)
    if db_type == "minidb":
        return list(read_minidb(path))
    return _read_lmdb(path)


def write_db(path: str, db_type: str, records: list[tuple[bytes, bytes]]) -> None:
    """Write a new database holding ``records`` (a minidb file replaced atomically; an LMDB folder)."""
    _check_type(db_type)
    if db_type == "minidb":

        def write(f: Any) -> None:
            for key, value in records:
                f.write(_HEADER.pack(len(key), len(value)))
                f.write(key)
                f.write(value)

        atomic_write(path, write)
        return
    lmdb = _lmdb()
    os.makedirs(path, exist_ok=True)
    size = sum(len(k) + len(v) + 64 for k, v in records)
    env = lmdb.open(path, map_size=max(1 << 20, 4 * size), subdir=True)
    try:
        with env.begin(write=True) as txn:
            for key, value in records:
                txn.put(key, value)
    finally:
        env.close()


class DBReader:
    """An open database a net reads records from, one after another, starting again at the end
    (Caffe2's DBReader); ``num_shards``/``shard_id`` keep every num_shards-th record."""

    def __init__(self, path: str, db_type: str, num_shards: int = 1, shard_id: int = 0):
        if num_shards < 1 or not 0 <= shard_id < num_shards:
            raise ValueError(f"expected 0 <= shard_id < num_shards, got shard_id={shard_id}, num_shards={num_shards}")
        self.path, self.db_type = path, db_type
        self._records = open_db(path, db_type)[shard_id::num_shards]
        if not self._records:
            raise ValueError(f"database {path} ({db_type}) holds no records")
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    def read(self) -> tuple[bytes, bytes]:
        """The next (key, value), wrapping around after the last record."""
        with self._lock:
            rec = self._records[self._next]
            self._next = (self._next + 1) % len(self._records)
            return rec

    def read_batch(self, n: int) -> list[tuple[bytes, bytes]]:
        with self._lock:
            out = []
            for _ in range(n):
                out.append(self._records[self._next])
                self._next = (self._next + 1) % len(self._records)
            return out

    def __repr__(self) -> str:
        return f"DBReader({self.path!r}, {self.db_type!r}, records={len(self._records)})"


# -- CreateDB and TensorProtosDBInput ----------------------------------------------------------------


@register_op(
    "CreateDB",
    inputs=0,
    outputs=1,
    args=[
        Arg("db", str, Arg.REQUIRED, "database path (a minidb file or an LMDB folder)"),
        Arg("db_type", str, Arg.REQUIRED, "minidb or lmdb", choices=DB_TYPES),
        Arg("num_shards", int, 1, "read every num_shards-th record..."),
        Arg("shard_id", int, 0, "...starting at this one"),
    ],
    outputs_doc=("db_reader",),
    doc="Open a database for reading (Caffe2's CreateDB).",
)
def create_db(ctx: Any) -> DBReader:
    a = ctx.args
    return DBReader(a["db"], a["db_type"], a["num_shards"], a["shard_id"])


@register_op(
    "TensorProtosDBInput",
    inputs=1,
    outputs=(1, None),
    args=[Arg("batch_size", int, 0, "records per batch, stacked on a new first axis (0: one record, unbatched)")],
    inputs_doc=("db_reader (from CreateDB)",),
    outputs_doc=("one blob per TensorProto of a record",),
    doc="Read the next batch of TensorProtos records: output i stacks the i-th tensor of each record.",
)
def tensor_protos_db_input(ctx: Any, reader: Any) -> Any:
    if not isinstance(reader, DBReader):
        raise TypeError(f"input 0 must be a DBReader from CreateDB, got {type(reader).__name__}")
    n_out, batch = len(ctx.op.outputs), ctx.args["batch_size"]
    if batch < 0:
        raise ValueError(f"expected batch_size >= 0, got {batch}")
    records = reader.read_batch(max(batch, 1))
    columns: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for key, value in records:
        tensors = tp.decode_tensor_protos(value)
        if len(tensors) != n_out:
            raise ValueError(
                f"record {key!r} of {reader.path} holds {len(tensors)} tensors; the op has {n_out} outputs"
            )
        for col, t in zip(columns, tensors):
            col.append(t)
    outs = []
    for i, col in enumerate(columns):
        if batch == 0:
            outs.append(col[0])
            continue
        shapes = {c.shape for c in col}
        if len(shapes) != 1:
            raise ValueError(f"output {i}: records of one batch have different shapes {sorted(shapes)}")
        outs.append(np.stack(col))
    return outs[0] if n_out == 1 else tuple(outs)


register_no_gradient("CreateDB", "TensorProtosDBInput")


# -- Save and Load ----------------------------------------------------------------------------------


#: Blobs that are neither tensors nor strings: Save writes one with the encoder registered for
#: its Python type (or its own ``blob_proto(name) -> bytes`` method), and Load rebuilds it with
#: the decoder registered for the BlobProto type its record names (:func:`register_blob_type`).
_BLOB_TYPES: dict[str, Any] = {}
_ENCODERS: dict[type, Any] = {}


def register_blob_type(type_name: str, decode: Any, python_type: type | None = None, encode: Any = None) -> None:
    """Load rebuilds blobs of BlobProto type ``type_name`` with ``decode(fields)`` (the fields
    of :func:`asyncnet.ops._tensorproto.decode_blob`); with ``python_type``, Save writes values
    of that type as ``encode(name, value) -> bytes`` (a serialized BlobProto)."""
    _BLOB_TYPES[type_name] = decode
    if python_type is not None:
        _ENCODERS[python_type] = encode


def _encoder(value: Any) -> Any:
    encode = _ENCODERS.get(type(value))
    if encode is None and hasattr(value, "blob_proto"):
        return lambda name, v: v.blob_proto(name)
    return encode


def _host(name: str, value: Any) -> Any:
    if isinstance(value, (str, bytes, np.ndarray)) or _encoder(value) is not None:
        return value
    if type(value).__module__.startswith("torch"):
        from asyncnet.tensor.namespace import to_numpy

        return to_numpy(value)
    raise TypeError(f"blob {name!r} holds a {type(value).__name__}; Save writes tensors and strings")


def blob_records(name: str, value: Any, chunk_size: int = DEFAULT_CHUNK_SIZE) -> list[tuple[bytes, bytes]]:
    """The database records of one blob, as Caffe2's serializers cut them."""
    value = _host(name, value)
    encode = _encoder(value)
    if encode is not None:
        return [(name.encode("utf-8"), encode(name, value))]
    if isinstance(value, (str, bytes)):
        content = value.encode("utf-8") if isinstance(value, str) else value
        out = bytearray()
        for num, data in ((1, name.encode("utf-8")), (2, b"std::string"), (4, content)):
            tp._put_bytes(out, num, data)
        return [(name.encode("utf-8"), bytes(out))]
    flat = np.ascontiguousarray(value).reshape(-1)
    size = chunk_size if chunk_size > 0 else flat.size + 1
    records = []
    for begin in range(0, max(flat.size, 1), size):
        end = min(begin + size, flat.size)
        chunk = flat[begin:end]
        blob = _chunk_blob(name, value.shape, chunk, (begin, end))
        records.append((f"{name}{CHUNK_SEPARATOR}{begin // size}".encode(), blob))
    return records


def _chunk_blob(name: str, shape: tuple[int, ...], chunk: np.ndarray, segment: tuple[int, int]) -> bytes:
    out = bytearray()
    tp._put_bytes(out, 1, name.encode("utf-8"))
    tp._put_bytes(out, 2, b"Tensor")
    tp._put_bytes(out, 3, tp.encode_tensor(chunk, name=name, segment=segment, dims=shape))
    return bytes(out)


def _save_names(ctx: Any) -> list[str]:
    overrides, strip = ctx.args["blob_name_overrides"], ctx.args["strip_prefix"]
    if overrides:
        if strip:
            raise ValueError("strip_prefix and blob_name_overrides are mutually exclusive (as in Caffe2)")
        if len(overrides) != len(ctx.op.inputs):
            raise ValueError(f"blob_name_overrides has {len(overrides)} names for {len(ctx.op.inputs)} inputs")
        names = list(overrides)
    else:
        names = [n[len(strip) :] if strip and n.startswith(strip) else n for n in ctx.op.inputs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"blob(s) {dup} would be saved twice (Caffe2: duplicated feature)")
    return names


@register_op(
    "Save",
    inputs=(1, None),
    outputs=0,
    args=[
        Arg("db", str, Arg.REQUIRED, "the file (minidb) or folder (lmdb) to write"),
        Arg("db_type", str, Arg.REQUIRED, "minidb or lmdb", choices=DB_TYPES),
        Arg("absolute_path", (bool, int), 0, "Caffe2's flag: db is used as given either way here"),
        Arg("strip_prefix", str, "", "removed from the start of each blob name"),
        Arg("blob_name_overrides", list, [], "names to save the inputs under", item_type=str),
        Arg("chunk_size", int, DEFAULT_CHUNK_SIZE, "values per record of a large tensor (<= 0: one record)"),
    ],
    inputs_doc=("blobs to save",),
    doc="Write the input blobs to a new database (Caffe2's model-file format).",
)
def save(ctx: Any, *blobs: Any) -> None:
    names = _save_names(ctx)
    records: list[tuple[bytes, bytes]] = []
    for name, value in zip(names, blobs):
        records += blob_records(name, value, ctx.args["chunk_size"])
    write_db(ctx.args["db"], ctx.args["db_type"], records)


def _blob_name(key: bytes, strip: str, add: str) -> str:
    name = key.decode("utf-8", "replace").split(CHUNK_SEPARATOR, 1)[0]
    if strip:
        at = name.find(strip)
        if at >= 0:
            name = name[at + len(strip) :]
    return add + name


class _Assembly:
    """A tensor rebuilt from its chunks."""

    def __init__(self) -> None:
        self.value: Any = None
        self.filled = 0
        self.total = -1

    def add(self, blob: dict[str, Any], key: bytes) -> None:
        decode = _BLOB_TYPES.get(blob["type"])
        if decode is not None:
            self.value, self.total, self.filled = decode(blob), 1, 1
            return
        if blob["type"] == "std::string" or blob["tensor"] is None:
            self.value, self.total, self.filled = blob["content"] or b"", 1, 1
            return
        f = blob["tensor"]
        if f["segment"] is None:
            self.value = tp.tensor_from_fields(f)
            self.total = self.filled = max(self.value.size, 1)
            return
        begin, end = f["segment"]
        shape = tuple(f["dims"])
        flat = tp.tensor_from_fields(f)
        if self.value is None:
            self.value = np.empty(shape, dtype=flat.dtype)
            self.total = max(self.value.size, 1)
        if end - begin != flat.size or end > self.value.size:
            raise ValueError(f"record {key!r}: segment [{begin}, {end}) does not fit a tensor of shape {list(shape)}")
        self.value.reshape(-1)[begin:end] = flat
        self.filled += max(end - begin, 1 if self.value.size == 0 else 0)

    def complete(self) -> bool:
        return self.value is not None and self.filled >= self.total


def _validate_load(op: Any) -> None:
    if op.args.get("load_all") and op.args.get("source_blob_names"):
        raise ValueError("load_all=1 takes no source_blob_names")


@register_op(
    "Load",
    inputs=(0, 1),
    outputs=(0, None),
    validate=_validate_load,
    args=[
        Arg("db", str, "", "the database to read (or give a DBReader as input 0)"),
        Arg("dbs", list, [], "several databases to read", item_type=str),
        Arg("db_type", str, "", "minidb or lmdb"),
        Arg("absolute_path", (bool, int), 0, "Caffe2's flag: db is used as given either way here"),
        Arg("add_prefix", str, "", "prepended to each name read"),
        Arg("strip_prefix", str, "", "removed from each name read"),
        Arg("source_blob_names", list, [], "the names in the database of the outputs", item_type=str),
        Arg("keep_device", (bool, int), 0, "Caffe2's flag; blobs load to the host here"),
        Arg("load_all", (bool, int), 0, "load every blob of the database (into the outputs, which must name them all)"),
        Arg("allow_incomplete", (bool, int), 0, "do not fail when an output is not in the database"),
    ],
    inputs_doc=("db_reader (optional)",),
    outputs_doc=("the blobs to load",),
    doc="Read blobs from a database written by Save (Caffe2's model-file format).",
)
def load(ctx: Any, *reader: Any) -> Any:
    a = ctx.args
    if a["load_all"] and not ctx.op.outputs:
        raise ValueError("load_all=1 is not supported by asyncnet's Load; name the blobs to load as outputs")
    outs = list(ctx.op.outputs)
    wanted = [a["add_prefix"] + s for s in a["source_blob_names"]] if a["source_blob_names"] else outs
    if len(wanted) != len(outs):
        raise ValueError(f"source_blob_names has {len(wanted)} names for {len(outs)} outputs")
    index = {n: i for i, n in enumerate(wanted)}
    found: dict[int, _Assembly] = {}
    others: set[str] = set()
    for key, value in _load_records(a, reader):
        name = _blob_name(key, a["strip_prefix"], a["add_prefix"])
        i = index.get(name)
        if i is not None:
            found.setdefault(i, _Assembly()).add(tp.decode_blob(value), key)
        else:
            others.add(name)
    if a["load_all"] and others:  # every blob is loaded, into the outputs: they must name them all
        raise ValueError(f"load_all=1 loads every blob into the outputs; the database also holds {sorted(others)}")
    missing = [wanted[i] for i in range(len(outs)) if i not in found or not found[i].complete()]
    if missing and not a["allow_incomplete"]:
        raise ValueError(f"blob(s) {missing} not found (or incomplete) in {a['db'] or a['dbs'] or 'the DB reader'}")
    values = [found[i].value if i in found else _kept(ctx.output(i)) for i in range(len(outs))]
    if not outs:
        return None
    return values[0] if len(outs) == 1 else tuple(values)


def _kept(value: Any) -> Any:
    """A blob ``allow_incomplete`` leaves as it was (an empty float32 array when it did not exist)."""
    return np.empty((0,), np.float32) if value is None else value


def _load_records(a: dict[str, Any], reader: tuple[Any, ...]) -> list[tuple[bytes, bytes]]:
    if reader:
        if not isinstance(reader[0], DBReader):
            raise TypeError(f"input 0 must be a DBReader from CreateDB, got {type(reader[0]).__name__}")
        return list(reader[0]._records)
    paths = list(a["dbs"]) or ([a["db"]] if a["db"] else [])
    if not paths:
        raise ValueError("Load needs db (or dbs), or a DBReader input")
    records: list[tuple[bytes, bytes]] = []
    seen: dict[bytes, str] = {}
    for p in paths:
        for key, value in open_db(p, a["db_type"]):
            if key in seen:
                raise ValueError(f"record {key!r} is in more than one database ({seen[key]!r} and {p!r})")
            seen[key] = p
            records.append((key, value))
    return records


register_no_gradient("Save", "Load")
