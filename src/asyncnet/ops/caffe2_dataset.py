"""Caffe2's in-memory dataset operators: a record stored as one tensor per column.

The columns of a record are named as in ``caffe2.python.schema`` (``a``, ``b:lengths``,
``b:values``, ...). A column ``<p>:lengths`` opens a *domain*: the columns named ``<p>:...``
hold, for each row of the lengths column, that many rows. Top-level columns are domain 0, with
one row per record. A *cursor* (CreateTreeCursor) keeps one offset per domain; ReadNextBatch
reads the next records of every column and moves the cursor, under the cursor's lock.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> fields = ["id", "tags:lengths", "tags:values"]
    >>> ws.feed("id", np.array([7, 8])); ws.feed("len", np.array([2, 1], np.int32))
    >>> ws.feed("val", np.array([1, 2, 3]))
    >>> net = an.Net("read")
    >>> _ = net.CreateTreeCursor([], "cursor", fields=fields)
    >>> _ = net.ReadNextBatch(["cursor", "id", "len", "val"], ["b_id", "b_len", "b_val"])
    >>> _ = net.ReadNextBatch(["cursor", "id", "len", "val"], ["b_id", "b_len", "b_val"])
    >>> ws.run_net_once(net); ws.fetch("b_id"), ws.fetch("b_val")
    (array([8]), array([3]))

Also here: ComputeOffset/ReadRandomBatch/SortAndShuffle (reading records in a given order),
CheckDatasetConsistency, Append/AtomicAppend, TrimDataset, PackRecords/UnPackRecords, the
tensor vectors (CreateTensorVector, TensorVectorSize, ConcatTensorVector, CollectTensor) and
LastNWindowCollector.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops import _tensorproto as tp
from asyncnet.ops.dbio import register_blob_type

__all__ = ["RecordLayout", "TensorVector", "TreeCursor"]

_SEP = ":"
_LENGTHS = "lengths"


class RecordLayout:
    """Which domain each column of a record belongs to.

    ``domain[i]`` is 0 for a top-level column, else 1 + the rank (among the lengths columns) of
    the lengths column that counts its rows; ``parent[k]`` is the domain of the k-th lengths
    column, whose values size domain k + 1.

    >>> RecordLayout(["a", "b:lengths", "b:values:lengths", "b:values:values"]).domain
    [0, 0, 1, 2]
    """

    def __init__(self, fields: Sequence[str]):
        self.fields = [str(f) for f in fields]
        parts = [f.split(_SEP) for f in self.fields]
        self.lengths_columns = [i for i, p in enumerate(parts) if p[-1] == _LENGTHS]
        self.domain = [self._domain_of(i, parts) for i in range(len(parts))]
        for i, d in enumerate(self.domain):
            if d and self.lengths_columns[d - 1] > i:
                owner = self.fields[self.lengths_columns[d - 1]]
                raise ValueError(f"field {i} ({self.fields[i]!r}) comes before its lengths field {owner!r}")
        self.parent = [self.domain[c] for c in self.lengths_columns]

    def _domain_of(self, i: int, parts: list[list[str]]) -> int:
        best, best_depth = 0, 1
        for rank, c in enumerate(self.lengths_columns):
            prefix = parts[c][:-1]
            if c != i and len(parts[c]) > best_depth and parts[i][: len(prefix)] == prefix:
                best, best_depth = rank + 1, len(parts[c])
        return best

    @property
    def num_domains(self) -> int:
        return len(self.lengths_columns) + 1

    def check_columns(self, columns: Sequence[Any], where: str) -> None:
        if len(columns) != len(self.fields):
            raise ValueError(f"{where}: expected {len(self.fields)} columns (one per field), got {len(columns)}")
        for i, c in enumerate(columns):
            if not isinstance(c, np.ndarray) or c.ndim == 0:
                found = "a 0-d array" if isinstance(c, np.ndarray) else type(c).__name__
                raise ValueError(f"{where}: column {i} ({self.fields[i]!r}) must be a tensor of rows, got {found}")

    def limits(self, columns: Sequence[np.ndarray]) -> list[int]:
        """The rows of each domain: the fewest rows among its columns."""
        rows = [None] * self.num_domains
        for i, c in enumerate(columns):
            d = self.domain[i]
            rows[d] = len(c) if rows[d] is None else min(rows[d], len(c))
        return [r if r is not None else np.iinfo(np.int64).max for r in rows]

    def step(self, columns: Sequence[np.ndarray], offsets: Sequence[int], records: int) -> list[int]:
        """The rows of each domain that the next ``records`` records (fewer at the end) span."""
        limits = self.limits(columns)
        if offsets[0] > limits[0]:
            raise ValueError(f"the cursor is past the end of the dataset ({offsets[0]} > {limits[0]} records)")
        sizes = [min(limits[0] - offsets[0], records)]
        for k, col in enumerate(self.lengths_columns):
            d = self.parent[k]
            span = int(np.sum(columns[col][offsets[d] : offsets[d] + sizes[d]], dtype=np.int64))
            if offsets[k + 1] + span > limits[k + 1]:
                raise ValueError(
                    f"inconsistent lengths: field {self.fields[col]!r} asks for rows past the end of its domain "
                    f"({offsets[k + 1] + span} > {limits[k + 1]})"
                )
            sizes.append(span)
        return sizes

    def record_offsets(self, columns: Sequence[np.ndarray]) -> np.ndarray:
        """Row r: the offset of each domain where record r starts (the last row: the ends)."""
        n = self.limits(columns)[0]
        out = np.zeros((n + 1, self.num_domains), np.int64)
        for r in range(n):
            out[r + 1] = out[r] + self.step(columns, out[r], 1)
        return out

    def slices(self, columns: Sequence[np.ndarray], offsets: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
        return [np.array(c[offsets[d] : offsets[d] + sizes[d]]) for c, d in zip(columns, self.domain)]


class TreeCursor:
    """A position in a record's columns (one offset per domain), safe to share across threads.

    Save writes it as Caffe2 does (a ``std::unique_ptr<TreeCursor>`` BlobProto: the offsets as
    an int64 tensor, the field names in the content) and Load reads it back."""

    BLOB_TYPE = "std::unique_ptr<TreeCursor>"

    def __init__(self, fields: Sequence[str]):
        self.layout = RecordLayout(fields)
        self.offsets: list[int] | None = None
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.offsets = None

    def blob_proto(self, name: str) -> bytes:
        """This cursor as a serialized BlobProto."""
        out = bytearray()
        tp._put_bytes(out, 1, name.encode("utf-8"))
        tp._put_bytes(out, 2, self.BLOB_TYPE.encode())
        with self.lock:
            offsets = list(self.offsets or [])
        if offsets:
            tp._put_bytes(out, 3, tp.encode_tensor(np.array(offsets, np.int64), name=name))
        tp._put_bytes(out, 4, "".join(f + " " for f in self.layout.fields).encode("utf-8"))
        return bytes(out)

    @classmethod
    def from_blob_fields(cls, blob: dict[str, Any]) -> TreeCursor:
        """The cursor of a BlobProto's fields (see :func:`asyncnet.ops._tensorproto.decode_blob`)."""
        cursor = cls((blob["content"] or b"").decode("utf-8").split())
        if blob["tensor"] is not None:
            cursor.offsets = [int(v) for v in tp.tensor_from_fields(blob["tensor"]).reshape(-1)]
        return cursor


register_blob_type(TreeCursor.BLOB_TYPE, TreeCursor.from_blob_fields)


class TensorVector(list):
    """A growable list of tensors held in one blob (Caffe2's ``std::vector<Tensor>``)."""


def _fields_arg(doc: str = "the record's column names") -> Arg:
    return Arg("fields", list, [], doc, item_type=str)


def _cursor(ctx: Any, x: Any) -> TreeCursor:
    if not isinstance(x, TreeCursor):
        raise TypeError(
            f"expected a TreeCursor (made by CreateTreeCursor) in input 0 {ctx.op.inputs[0]!r}, got {type(x).__name__}"
        )
    return x


def _out(values: Sequence[Any]) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def _same_outputs_as_fields(skip: int) -> Any:
    def check(op: OperatorDef) -> None:
        if len(op.outputs) != len(op.inputs) - skip:
            raise ValueError(f"expected one output per data input ({len(op.inputs) - skip}), got {len(op.outputs)}")

    return check


@register_op(
    "CreateTreeCursor",
    inputs=0,
    outputs=1,
    args=[_fields_arg()],
    outputs_doc=("the cursor",),
    doc="Caffe2's CreateTreeCursor: a cursor at the start of a record whose columns are `fields`.",
)
def create_tree_cursor(ctx: Any) -> TreeCursor:
    return TreeCursor(ctx.args["fields"])


@register_op("ResetCursor", inputs=1, outputs=0, inputs_doc=("the cursor",), doc="Move the cursor back to the start.")
def reset_cursor(ctx: Any, cursor: Any) -> None:
    _cursor(ctx, cursor).reset()


@register_op(
    "GetCursorOffset",
    inputs=1,
    outputs=1,
    inputs_doc=("the cursor",),
    outputs_doc=("the offset of each domain (int32)",),
    doc="Caffe2's GetCursorOffset: the cursor's current offsets.",
)
def get_cursor_offset(ctx: Any, cursor: Any) -> np.ndarray:
    c = _cursor(ctx, cursor)
    with c.lock:
        return np.array(c.offsets or [], np.int32)


@register_op(
    "ReadNextBatch",
    inputs=(1, None),
    outputs=(1, None),
    validate=_same_outputs_as_fields(1),
    args=[
        Arg("batch_size", int, 1, "records to read"),
        Arg("enforce_batch_size", (bool, int), False, "read nothing unless a whole batch is left"),
    ],
    inputs_doc=("the cursor", "the columns of the dataset"),
    outputs_doc=("the columns of the next batch (empty past the end)",),
    doc="Caffe2's ReadNextBatch: the next batch_size records of every column; the cursor moves on.",
)
def read_next_batch(ctx: Any, cursor: Any, *columns: Any) -> Any:
    c = _cursor(ctx, cursor)
    layout = c.layout
    layout.check_columns(columns, "ReadNextBatch")
    n = ctx.args["batch_size"]
    with c.lock:
        start = c.offsets or [0] * layout.num_domains
        sizes = layout.step(columns, start, n)
        c.offsets = [o + s for o, s in zip(start, sizes)]
    if ctx.args["enforce_batch_size"] and sizes[0] < n:
        sizes = [0] * len(sizes)
    return _out(layout.slices(columns, start, sizes))


@register_op(
    "ComputeOffset",
    inputs=(1, None),
    outputs=1,
    inputs_doc=("the cursor", "the columns of the dataset"),
    outputs_doc=("(records + 1, domains) int64: where each record starts in each domain",),
    doc="Caffe2's ComputeOffset: the offsets of every record (for ReadRandomBatch); resets the cursor.",
)
def compute_offset(ctx: Any, cursor: Any, *columns: Any) -> np.ndarray:
    c = _cursor(ctx, cursor)
    c.layout.check_columns(columns, "ComputeOffset")
    table = c.layout.record_offsets(columns)
    with c.lock:
        c.offsets = [0] * c.layout.num_domains
    return table


class _MinStd0:
    """C++'s ``std::minstd_rand0`` (``std::default_random_engine`` of libstdc++), seeded with 1."""

    MOD, MUL = 2**31 - 1, 16807

    def __init__(self) -> None:
        self.state = 1

    def draw(self) -> int:
        self.state = self.state * self.MUL % self.MOD
        return self.state

    def below_or_equal(self, hi: int) -> int:
        """libstdc++'s ``uniform_int_distribution(0, hi)`` on this engine (downscaling)."""
        span = self.MOD - 2  # the engine's max - min
        buckets = hi + 1
        width = span // buckets
        limit = buckets * width
        while True:
            r = self.draw() - 1
            if r < limit:
                return r // width


def _cxx_shuffle(values: list[int]) -> None:
    """``std::shuffle(values, std::default_random_engine())`` as libstdc++ did it (each call
    starts a fresh engine, so the order is the same on every run)."""
    engine = _MinStd0()
    for i in range(1, len(values)):
        j = engine.below_or_equal(i)
        values[i], values[j] = values[j], values[i]


@register_op(
    "SortAndShuffle",
    inputs=(1, None),
    outputs=1,
    args=[
        Arg("sort_by_field_idx", int, 1, "the top-level field whose values order the records (-1: no sort)"),
        Arg("batch_size", int, 1, "records per batch"),
        Arg("shuffle_size", int, 1, "batches per shuffled chunk"),
    ],
    inputs_doc=("the cursor", "the columns of the dataset"),
    outputs_doc=("the record order (int64)",),
    doc="Caffe2's SortAndShuffle: records sorted by a field, shuffled within chunks of batch_size * shuffle_size, "
    "then whole batches shuffled (the same deterministic order as Caffe2's, from a default-seeded engine).",
)
def sort_and_shuffle(ctx: Any, cursor: Any, *columns: Any) -> np.ndarray:
    c = _cursor(ctx, cursor)
    a = ctx.args
    key, batch, shuffle = a["sort_by_field_idx"], a["batch_size"], a["shuffle_size"]
    if not -1 <= key < len(columns):
        raise ValueError(f"sort_by_field_idx {key} is not -1 or a field index below {len(columns)}")
    if batch < 1 or shuffle < 1:
        raise ValueError(f"batch_size and shuffle_size must be positive, got {batch} and {shuffle}")
    size = len(columns[key if key >= 0 else 0])
    order = list(range(size))
    if key >= 0:
        if c.layout.domain[key]:
            raise ValueError(f"can only sort by a top-level field, not {c.layout.fields[key]!r}")
        order = [int(i) for i in np.argsort(columns[key][:size], kind="stable")]
    chunk = batch * min(shuffle, size // batch) if batch * shuffle > size else batch * shuffle
    if chunk > 1:
        for begin in range(0, size, chunk):
            if begin + chunk >= size:
                break
            part = order[begin : begin + chunk]
            _cxx_shuffle(part)
            order[begin : begin + chunk] = part
    batches = list(range(size // batch))
    _cxx_shuffle(batches)
    out = [i for b in batches for i in order[b * batch : (b + 1) * batch]]
    out += order[len(batches) * batch :]
    return np.array(out, np.int64)


@register_op(
    "ReadRandomBatch",
    inputs=(3, None),
    outputs=(1, None),
    validate=_same_outputs_as_fields(3),
    args=[
        Arg("batch_size", int, 1, "records to read"),
        Arg("enforce_batch_size", (bool, int), False, "read nothing unless a whole batch is left"),
        Arg("loop_over", (bool, int), False, "start over after the last record"),
    ],
    inputs_doc=("the cursor", "the record order", "the offsets of ComputeOffset", "the columns of the dataset"),
    outputs_doc=("the columns of the next batch",),
    doc="Caffe2's ReadRandomBatch: the next batch_size records in the given order.",
)
def read_random_batch(ctx: Any, cursor: Any, order: Any, table: Any, *columns: Any) -> Any:
    c = _cursor(ctx, cursor)
    c.layout.check_columns(columns, "ReadRandomBatch")
    a = ctx.args
    n, count = a["batch_size"], len(order)
    with c.lock:
        pos = (c.offsets or [0])[0]
        if a["enforce_batch_size"] and pos + n > count:
            pos = count
        if a["loop_over"] and pos >= count:
            pos = 0
        c.offsets = [pos + n]
    picked = [int(r) for r in np.asarray(order)[pos : pos + n]]
    for r in picked:
        if not 0 <= r < len(table) - 1:
            raise IndexError(f"record {r} is out of the offsets table's {len(table) - 1} records")
    out = []
    for col, d in zip(columns, c.layout.domain):
        parts = [col[table[r, d] : table[r + 1, d]] for r in picked]
        out.append(np.concatenate(parts) if parts else np.array(col[:0]))
    return _out(out)


@register_op(
    "CheckDatasetConsistency",
    inputs=(1, None),
    outputs=0,
    args=[_fields_arg()],
    inputs_doc=("the columns",),
    doc="Caffe2's CheckDatasetConsistency: fails unless the columns form whole records under `fields`.",
)
def check_dataset_consistency(ctx: Any, *columns: Any) -> None:
    layout = RecordLayout(ctx.args["fields"])
    layout.check_columns(columns, "CheckDatasetConsistency")
    rows: list[int | None] = [None] * layout.num_domains
    for i, col in enumerate(columns):
        d = layout.domain[i]
        if rows[d] is not None and rows[d] != len(col):
            raise ValueError(
                f"inconsistent sizes in one domain: field {layout.fields[i]!r} has {len(col)} rows, "
                f"an earlier field of its domain {rows[d]}"
            )
        rows[d] = len(col)
    limits = layout.limits(columns)
    sizes = layout.step(columns, [0] * layout.num_domains, limits[0])
    for d, (used, have) in enumerate(zip(sizes, limits)):
        if rows[d] is not None and used != have:
            raise ValueError(f"domain {d}: the lengths account for {used} rows, the columns have {have}")


def _appendable(a: Any, b: Any, where: str) -> None:
    if not isinstance(b, np.ndarray) or b.ndim < 1:
        raise ValueError(f"{where}: the appended value must be a tensor of rows")
    if a.ndim != b.ndim or a.shape[1:] != b.shape[1:]:
        raise ValueError(f"{where}: cannot append rows of shape {b.shape[1:]} to rows of shape {a.shape[1:]}")
    if a.dtype != b.dtype:
        raise ValueError(f"{where}: cannot append {b.dtype} rows to {a.dtype} rows")


def _is_blank(a: Any) -> bool:
    return a is None or (isinstance(a, np.ndarray) and a.size == 0 and a.ndim > 0 and a.shape[0] == 0)


def _growable(a: np.ndarray, blobs: Any) -> bool:
    """Whether ``a`` may grow in place: it owns a contiguous buffer and no blob of the
    workspace is a view of it (readers of a dataset take copies of its columns)."""
    if not (a.flags.owndata and a.base is None and a.flags.c_contiguous and a.flags.writeable):
        return False
    return a.size == 0 or not any(isinstance(v, np.ndarray) and v.base is a for v in blobs.values())


def _append(a: Any, b: Any, where: str, blobs: Any) -> np.ndarray:
    """``a`` with ``b``'s rows after its own, grown in place when it may be: the blob keeps its
    array object, so workspaces sharing it (a task's concurrent instances) all see the rows."""
    if _is_blank(a):
        b = np.asarray(b)
        if isinstance(a, np.ndarray) and _growable(a, blobs):
            try:
                if a.dtype != b.dtype:
                    a.dtype = b.dtype
                a.resize(b.shape, refcheck=False)
            except (TypeError, ValueError):
                return np.array(b)
            a[...] = b
            return a
        return np.array(b)
    _appendable(a, b, where)
    if not _growable(a, blobs):
        return np.concatenate([a, b])
    n = len(a)
    a.resize((n + len(b), *a.shape[1:]), refcheck=False)
    a[n:] = b
    return a


@register_op(
    "Append",
    inputs=2,
    outputs=1,
    enforce_inplace={0: 0},
    inputs_doc=("A", "B, rows to append"),
    outputs_doc=("A with B's rows after its own",),
    doc="Caffe2's Append: A's rows then B's (same inner shape and type); an empty A becomes B.",
)
def append(ctx: Any, a: Any, b: Any) -> np.ndarray:
    return _append(a, b, "Append", ctx._blobs)


@register_op(
    "AtomicAppend",
    inputs=(3, None),
    outputs=(1, None),
    allow_inplace=lambda i, o: i == o + 1,
    validate=lambda op: _check_atomic_append(op),
    inputs_doc=("a mutex", "the dataset's columns", "the rows to append, one tensor per column"),
    outputs_doc=("the dataset's columns",),
    doc="Caffe2's AtomicAppend: Append on every column under the mutex (all checked before any change).",
)
def atomic_append(ctx: Any, mutex: Any, *values: Any) -> Any:
    k = len(values) // 2
    if not hasattr(mutex, "acquire"):
        raise TypeError(f"expected a mutex (made by CreateMutex) in input 0 {ctx.op.inputs[0]!r}")
    mutex.acquire()
    try:
        for a, b in zip(values[:k], values[k:]):
            if not _is_blank(a):
                _appendable(a, b, "AtomicAppend")
        return _out([_append(a, b, "AtomicAppend", ctx._blobs) for a, b in zip(values[:k], values[k:])])
    finally:
        mutex.release()


def _check_atomic_append(op: OperatorDef) -> None:
    k = len(op.outputs)
    if len(op.inputs) != 1 + 2 * k:
        raise ValueError(f"expected a mutex and 2 x {k} inputs for {k} outputs, got {len(op.inputs)} inputs")


@register_op(
    "TrimDataset",
    inputs=(1, None),
    outputs=(1, None),
    enforce_inplace=lambda i, o: i == o,
    validate=_same_outputs_as_fields(0),
    args=[_fields_arg(), Arg("multiple_of", int, 1, "the kept number of records is a multiple of this")],
    inputs_doc=("the columns",),
    outputs_doc=("the columns, trimmed",),
    doc="Caffe2's TrimDataset: keep the most records that are a multiple of `multiple_of`.",
)
def trim_dataset(ctx: Any, *columns: Any) -> Any:
    m = ctx.args["multiple_of"]
    if m < 1:
        raise ValueError(f"multiple_of must be at least 1, got {m}")
    layout = RecordLayout(ctx.args["fields"])
    layout.check_columns(columns, "TrimDataset")
    total = layout.limits(columns)[0]
    keep = total // m * m
    ends = layout.step(columns, [0] * layout.num_domains, keep)
    return _out([np.array(c[: ends[d]]) for c, d in zip(columns, layout.domain)])


@register_op(
    "PackRecords",
    inputs=(1, None),
    outputs=1,
    args=[_fields_arg()],
    inputs_doc=("the columns",),
    outputs_doc=("a 1-D object tensor: per record, the list of its column slices",),
    doc="Caffe2's PackRecords: one element per record, holding that record's rows of every column.",
)
def pack_records(ctx: Any, *columns: Any) -> np.ndarray:
    layout = RecordLayout(ctx.args["fields"])
    layout.check_columns(columns, "PackRecords")
    table = layout.record_offsets(columns)
    packed = np.empty(len(table) - 1, dtype=object)
    for r in range(len(packed)):
        packed[r] = layout.slices(columns, table[r], table[r + 1] - table[r])
    return packed


@register_op(
    "UnPackRecords",
    inputs=(1, None),
    outputs=(1, None),
    args=[_fields_arg()],
    inputs_doc=("the packed records", "optional: one prototype tensor per column (its inner shape and type)"),
    outputs_doc=("the columns",),
    doc="Caffe2's UnPackRecords: the columns of PackRecords' records, joined.",
)
def unpack_records(ctx: Any, packed: Any, *prototypes: Any) -> Any:
    k = len(ctx.op.outputs)
    if prototypes and len(prototypes) != k:
        raise ValueError(f"expected one prototype per output ({k}), got {len(prototypes)}")
    records = list(np.asarray(packed, dtype=object).reshape(-1))
    if not records and not prototypes:
        raise ValueError("unpacking no records needs prototype inputs to give the columns' shapes")
    columns: list[list[np.ndarray]] = [[np.asarray(p)[:0]] for p in prototypes] or [[] for _ in range(k)]
    for r, rec in enumerate(records):
        if len(rec) != k:
            raise ValueError(f"record {r} has {len(rec)} columns, expected {k}")
        for j, part in enumerate(rec):
            if columns[j] and columns[j][0].shape[1:] != part.shape[1:]:
                raise ValueError(
                    f"record {r} column {j}: rows of shape {part.shape[1:]}, expected {columns[j][0].shape[1:]}"
                )
            columns[j].append(part)
    return _out([np.concatenate(parts) for parts in columns])


@register_op(
    "GivenTensorStringFill",
    inputs=0,
    outputs=1,
    args=[
        Arg("shape", list, [], "the shape", item_type=int),
        Arg("values", list, [], "the strings", item_type=(str, bytes)),
    ],
    outputs_doc=("an object tensor of bytes",),
    doc="Caffe2's GivenTensorStringFill: a tensor of strings (held as bytes, as Caffe2's strings are).",
)
def given_tensor_string_fill(ctx: Any) -> np.ndarray:
    values = [v.encode() if isinstance(v, str) else bytes(v) for v in ctx.args["values"]]
    shape = tuple(ctx.args["shape"])
    if not shape and len(values) != 1:
        shape = (len(values),)
    if int(np.prod(shape)) != len(values):
        raise ValueError(f"{len(values)} values cannot fill shape {list(shape)}")
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return np.array(out.reshape(shape))


@register_op(
    "CreateTensorVector",
    inputs=0,
    outputs=1,
    outputs_doc=("an empty tensor vector",),
    doc="A new, empty tensor vector.",
)
def create_tensor_vector(ctx: Any) -> TensorVector:
    return TensorVector()


def _vector(ctx: Any, x: Any, i: int) -> TensorVector:
    if not isinstance(x, TensorVector):
        raise TypeError(
            f"expected a tensor vector (made by CreateTensorVector) in input {i} {ctx.op.inputs[i]!r}, got {type(x).__name__}"
        )
    return x


@register_op(
    "TensorVectorSize",
    inputs=1,
    outputs=1,
    inputs_doc=("a tensor vector",),
    outputs_doc=("its length (0-d int32)",),
    doc="The number of tensors in a tensor vector.",
)
def tensor_vector_size(ctx: Any, v: Any) -> np.ndarray:
    return np.array(len(_vector(ctx, v, 0)), np.int32)


@register_op(
    "ConcatTensorVector",
    inputs=1,
    outputs=1,
    inputs_doc=("a non-empty tensor vector",),
    outputs_doc=("its tensors joined along axis 0",),
    doc="Caffe2's ConcatTensorVector: the vector's tensors joined along the first axis.",
)
def concat_tensor_vector(ctx: Any, v: Any) -> np.ndarray:
    tensors = _vector(ctx, v, 0)
    if not tensors:
        raise ValueError(f"tensor vector {ctx.op.inputs[0]!r} is empty: nothing to concatenate")
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t.shape[1:] != first.shape[1:] or t.dtype != first.dtype:
            raise ValueError(
                f"tensor {i} ({t.dtype}{list(t.shape)}) does not match tensor 0 ({first.dtype}{list(first.shape)})"
            )
    return np.concatenate(list(tensors))


def _check_collect(op: OperatorDef) -> None:
    if len(op.inputs) != 2 * len(op.outputs):
        raise ValueError(
            f"expected 2 inputs per output (a vector and a tensor), got {len(op.inputs)} for {len(op.outputs)}"
        )
    if op.args.get("num_to_collect", -1) <= 0:
        raise ValueError("num_to_collect must be positive")


_SEEN = "_collect_seen"
_RNG = "_collect_rng"


@register_op(
    "CollectTensor",
    inputs=(2, None),
    outputs=(1, None),
    enforce_inplace=lambda i, o: i == o,
    validate=_check_collect,
    args=[Arg("num_to_collect", int, -1, "the most tensors each vector keeps")],
    inputs_doc=("the tensor vectors", "the tensors to collect, one per vector"),
    outputs_doc=("the tensor vectors",),
    doc="Caffe2's CollectTensor: reservoir sampling of num_to_collect of the tensors seen by this op (the same "
    "position in every vector, or none).",
)
def collect_tensor(ctx: Any, *inputs: Any) -> Any:
    k = len(ctx.op.outputs)
    vectors = [_vector(ctx, v, i) for i, v in enumerate(inputs[:k])]
    cap, seen = ctx.args["num_to_collect"], ctx.args.get(_SEEN, 0)
    if seen < cap:
        slot = seen
    else:
        rng = ctx.args.get(_RNG)
        if rng is None:
            rng = ctx.args[_RNG] = np.random.default_rng(ctx.device.random_seed)
        slot = int(rng.integers(0, seen + 1))
    for vec, tensor in zip(vectors, inputs[k:]):
        copy = np.array(tensor)
        if slot >= cap:
            continue
        if slot >= len(vec):
            vec.append(copy)
        else:
            vec[slot] = copy
    ctx.args[_SEEN] = seen + 1
    return _out(vectors)


@register_op(
    "LastNWindowCollector",
    inputs=(3, 4),
    outputs=(2, 3),
    enforce_inplace={0: 0, 1: 1},
    args=[Arg("num_to_collect", int, Arg.REQUIRED, "rows the window keeps")],
    inputs_doc=("the window", "next: where the next row goes (0-d int32)", "rows to collect", "optional mutex"),
    outputs_doc=("the window", "next", "optional: rows seen (0-d int64)"),
    doc="Caffe2's LastNWindowCollector: a ring buffer of the last num_to_collect rows; it grows until full, "
    "then each new row overwrites the one at `next`.",
)
def last_n_window_collector(ctx: Any, window: Any, nxt: Any, rows: Any, *mutex: Any) -> Any:
    n = ctx.args["num_to_collect"]
    if n <= 0:
        raise ValueError(f"num_to_collect must be positive, got {n}")
    rows = np.asarray(rows)
    if rows.ndim < 1:
        raise ValueError("the collected input must be a tensor of rows")
    lock = mutex[0] if mutex else None
    if lock is not None:
        lock.acquire()
    try:
        buf = rows[:0].copy() if _is_blank(window) or not isinstance(window, np.ndarray) else window.copy()
        pos = int(np.asarray(nxt).reshape(-1)[0]) if np.asarray(nxt).size else 0
        take = rows[-n:] if len(rows) > n else rows
        if len(rows) > n:
            pos = (pos + len(rows) - n) % n
        for row in take:
            if len(buf) < n:
                buf = np.concatenate([buf, row[None]])
            else:
                buf[pos] = row
            pos = (pos + 1) % n
        seen = ctx.args.get(_SEEN, 0) + len(rows)
        ctx.args[_SEEN] = seen
    finally:
        if lock is not None:
            lock.release()
    out = [buf, np.array(pos, np.int32)]
    if len(ctx.op.outputs) == 3:
        out.append(np.array(seen, np.int64))
    return tuple(out)


register_no_gradient(
    "CreateTreeCursor",
    "ResetCursor",
    "GetCursorOffset",
    "ReadNextBatch",
    "ComputeOffset",
    "SortAndShuffle",
    "ReadRandomBatch",
    "CheckDatasetConsistency",
    "Append",
    "AtomicAppend",
    "TrimDataset",
    "PackRecords",
    "UnPackRecords",
    "GivenTensorStringFill",
    "CreateTensorVector",
    "TensorVectorSize",
    "ConcatTensorVector",
    "CollectTensor",
    "LastNWindowCollector",
)
