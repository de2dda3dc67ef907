"""Caffe2's ``caffe2.python.schema``: typed, nested records stored column by column.

A record is a tree of fields. Its leaves are :class:`Scalar` fields, each one tensor (a column);
:class:`Struct` names its children, :class:`List` adds a ``lengths`` column to its values and
:func:`Map` is a list of ``(keys, values)`` structs. Columns are named by joining the path with
``:``; a leaf may hold a blob (a ``BlobReference`` or a numpy array)::

    >>> import numpy as np
    >>> from caffe2.python import schema
    >>> rec = schema.Struct(("id", np.int64), ("tags", schema.List(np.int32)))
    >>> rec.field_names()
    ['id', 'tags:lengths', 'tags:values']
    >>> data = schema.from_blob_list(rec, [[7, 8], [2, 0], [5, 6]])
    >>> data["tags:values"].get().tolist(), data.tags.lengths.get().tolist()
    ([5, 6], [2, 0])
"""

from __future__ import annotations

import logging
from collections import OrderedDict, namedtuple
from io import StringIO
from typing import Any

import numpy as np

from caffe2.python import core, workspace
from caffe2.python._np_aliases import restore_numpy_aliases
from caffe2.python.core import BlobReference

__all__ = [
    "FIELD_SEPARATOR",
    "ConstRecord",
    "FeatureSpec",
    "FeedRecord",
    "FetchRecord",
    "Field",
    "InitEmptyRecord",
    "List",
    "Map",
    "Metadata",
    "NamedTuple",
    "NewRecord",
    "RawTuple",
    "Scalar",
    "Struct",
    "Tuple",
    "as_record",
    "attach_metadata_to_scalars",
    "data_type_for_dtype",
    "equal_schemas",
    "from_blob_list",
    "from_column_list",
    "from_dtype",
    "is_schema_subset",
    "schema_check",
]

restore_numpy_aliases()

_log = logging.getLogger(__name__)

FIELD_SEPARATOR = ":"

FeatureSpec = namedtuple(
    "FeatureSpec",
    ["feature_type", "feature_names", "feature_ids", "feature_is_request_only", "desired_hash_size"],
    defaults=(None,) * 5,
)


class Metadata(namedtuple("Metadata", ["categorical_limit", "expected_value", "feature_specs"], defaults=(None,) * 3)):
    """Extra facts about a scalar: ``categorical_limit`` (one more than the largest id of an
    integer field), ``expected_value`` (a typical value, e.g. of a list's lengths) and
    ``feature_specs`` (a :data:`FeatureSpec`)."""

    __slots__ = ()


def _join(prefix: str, suffix: str) -> str:
    return FIELD_SEPARATOR.join(part for part in (prefix, suffix) if part)


def _as_field(value: Any, keep_blobs: bool = True) -> Field:
    """A field for ``value``: a copy of a field, a Scalar of a type, or a Scalar holding a blob."""
    if isinstance(value, Field):
        return value.clone(keep_blobs=keep_blobs)
    if isinstance(value, (type, np.dtype)):
        return Scalar(dtype=value)
    return Scalar(blob=value)


class Field:
    """A node of a record; subclasses list their named children in ``_named_children``."""

    def __init__(self) -> None:
        self._parent: Field | None = None
        self._slot = 0

    def _named_children(self) -> list[tuple[str, Field]]:
        raise NotImplementedError("Field is an abstract class.")

    def _adopt(self) -> None:
        for slot, (_, child) in enumerate(self._named_children()):
            child._parent, child._slot = self, slot

    def all_scalars(self) -> list[Scalar]:
        """The leaves, in column order."""
        return [leaf for _, child in self._named_children() for leaf in child.all_scalars()]

    def field_names(self) -> list[str]:
        """The column names, e.g. ``['a', 'b:lengths', 'b:values']``."""
        return [_join(name, sub) for name, child in self._named_children() for sub in child.field_names()]

    def field_types(self) -> list[np.dtype]:
        """The numpy dtype of each column."""
        return [s.dtype for s in self.all_scalars()]

    def field_metadata(self) -> list[Metadata | None]:
        """The :class:`Metadata` (or None) of each column."""
        return [s.metadata for s in self.all_scalars()]

    def field_blobs(self) -> list[Any]:
        """The blob of each column (every column must have one)."""
        return [s.get() for s in self.all_scalars()]

    def has_blobs(self) -> bool:
        """Whether every column has a blob."""
        return all(s.has_blobs() for s in self.all_scalars())

    def clone(self, keep_blobs: bool = True) -> Field:
        raise NotImplementedError("Field is an abstract class.")

    def clone_schema(self) -> Field:
        """A copy of this field without blobs."""
        return self.clone(keep_blobs=False)

    def _first_column(self) -> int:
        if self._parent is None:
            return 0
        siblings = self._parent._named_children()[: self._slot]
        return self._parent._first_column() + sum(len(c.field_names()) for _, c in siblings)

    def slice(self) -> slice:
        """The range of this field's columns among its root record's columns.

        >>> rec = Struct(("a", Scalar()), ("b", Struct(("x", Scalar()), ("y", Scalar()))))
        >>> ["da", "dbx", "dby"][rec.b.slice()]
        ['dbx', 'dby']
        """
        start = self._first_column()
        return slice(start, start + len(self.field_names()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Field):
            return NotImplemented
        return (self.field_names(), self.field_types(), self.field_metadata()) == (
            other.field_names(),
            other.field_types(),
            other.field_metadata(),
        )

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = object.__hash__

    def _describe(self, depth: int, out: StringIO) -> None:
        raise NotImplementedError("Field is an abstract class.")

    def __repr__(self) -> str:
        out = StringIO()
        self._describe(0, out)
        return out.getvalue()


class Scalar(Field):
    """A leaf: one tensor of ``dtype``; ``(dtype, shape)`` gives each row a fixed inner shape.

    >>> Scalar((np.float32, 3)).field_types()
    [dtype(('<f4', (3,)))]
    >>> Scalar(np.int32, blob=[1, 2]).get()
    array([1, 2], dtype=int32)
    """

    def __init__(self, dtype: Any = None, blob: Any = None, metadata: Metadata | None = None):
        super().__init__()
        self._meta: Metadata | None = None
        self.set(dtype, blob, metadata, unsafe=True)

    def _named_children(self) -> list[tuple[str, Field]]:
        return []

    def all_scalars(self) -> list[Scalar]:
        return [self]

    def field_names(self) -> list[str]:
        return [""]

    def field_type(self) -> np.dtype:
        return self.dtype

    def has_blobs(self) -> bool:
        return self._value is not None

    def clone(self, keep_blobs: bool = True) -> Scalar:
        return Scalar(self._declared_type, self._value if keep_blobs else None, self._meta)

    def get(self) -> Any:
        """The blob of this column."""
        if self._value is None:
            raise AssertionError("Value is not set for this field.")
        return self._value

    __call__ = get

    @property
    def metadata(self) -> Metadata | None:
        return self._meta

    def set_metadata(self, value: Metadata) -> None:
        if not isinstance(value, Metadata):
            raise AssertionError(f"metadata must be Metadata, got {type(value)}")
        self._meta = value
        self._check_metadata()

    def _check_metadata(self) -> None:
        limit = self._meta.categorical_limit if self._meta is not None else None
        if limit is not None and not np.issubdtype(self.dtype.base, np.integer):
            raise AssertionError(f"`categorical_limit` can be specified only in integral fields but got {self.dtype}")

    def set_value(self, blob: Any, throw_on_type_mismatch: bool = False, unsafe: bool = False) -> None:
        """Replace the blob, keeping the declared type (checked when ``throw_on_type_mismatch``)."""
        if throw_on_type_mismatch and self.dtype.base != np.void:
            if not isinstance(blob, np.ndarray) or blob.dtype.base != self.dtype.base:
                found = blob.dtype.base if isinstance(blob, np.ndarray) else type(blob).__name__
                raise AssertionError(f"Expected {self.dtype.base}, got {found}")
        self.set(dtype=self._declared_type, blob=blob, unsafe=unsafe)

    def set(self, dtype: Any = None, blob: Any = None, metadata: Metadata | None = None, unsafe: bool = False) -> None:
        """Set the type and/or the blob. A value that is not a ``BlobReference`` becomes a numpy
        array of ``dtype`` (whose inner shape then follows the array's)."""
        if not unsafe:
            _log.warning("Scalar should be considered immutable; call set() with unsafe=True on new scalars.")
        if isinstance(blob, (str, bytes)):
            raise ValueError(
                "Passing str blob to Scalar.set() is ambiguous: pass np.array(blob) or BlobReference(blob)"
            )
        self._declared_type = dtype
        declared = None if dtype is None else np.dtype(dtype)
        if not (blob is None or isinstance(blob, BlobReference)):
            blob, declared = _array_for(blob, declared)
        resolved = np.dtype(np.void) if declared is None else declared
        if resolved.fields:
            raise AssertionError("Cannot create Scalar with a structured dtype. Use from_dtype instead.")
        self.dtype = resolved
        self._value = blob
        if metadata:
            self.set_metadata(metadata)
        self._check_metadata()

    def set_type(self, dtype: Any) -> None:
        self._declared_type = dtype
        self.dtype = np.dtype(np.void if dtype is None else dtype)
        self._check_metadata()

    def id(self) -> int:
        """This column's position among its root record's columns."""
        return self._first_column()

    def _describe(self, depth: int, out: StringIO) -> None:
        out.write("  " * depth + f"Scalar({self.dtype!r}, {self._value!r}, {self._meta!r})\n")


def _array_for(value: Any, declared: np.dtype | None) -> tuple[np.ndarray, np.dtype | None]:
    """``value`` as an array of ``declared`` (its rows shaped as the type says) and the type,
    whose inner shape is the array's."""
    given_array = isinstance(value, np.ndarray)
    if declared is None or declared.base == np.void:
        if not given_array:
            raise AssertionError(f"Invalid blob type: {type(value)}")
        array = value
    else:
        array = np.array(value, dtype=declared.base)
        if array.size == 0 and not given_array:
            array = array.reshape((0, *declared.shape))
    if array.ndim == 0 and not given_array:
        array = array.reshape(1)
    if array.ndim > 1 and declared is not None and declared.base != np.void:
        declared = np.dtype((declared.base, array.shape[1:]))
    return array, declared


class List(Field):
    """A variable-length list per row: a ``lengths`` column (int32) and the ``values`` field.

    >>> List(np.float32).field_names()
    ['lengths', 'values']
    """

    def __init__(self, values: Any, lengths_blob: Any = None):
        super().__init__()
        if isinstance(lengths_blob, Field):
            if not isinstance(lengths_blob, Scalar):
                raise AssertionError(f"List lengths must be a Scalar, got {type(lengths_blob).__name__}")
            self.lengths = _as_field(lengths_blob)
        else:
            self.lengths = Scalar(np.int32, lengths_blob)
        self._items = _as_field(values)
        self._adopt()

    def _named_children(self) -> list[tuple[str, Field]]:
        return [("lengths", self.lengths), ("values", self._items)]

    def clone(self, keep_blobs: bool = True) -> List:
        return List(_as_field(self._items, keep_blobs), _as_field(self.lengths, keep_blobs))

    def __getattr__(self, item: str) -> Any:
        if item.startswith("_"):
            raise AttributeError(item)
        items = self.__dict__.get("_items")
        if isinstance(items, Struct):
            return getattr(items, item)
        if item in ("value", "items") and items is not None:
            return items
        raise AttributeError(f"Field not found in list: {item}.")

    def __getitem__(self, item: str) -> Field:
        head, _, rest = item.partition(FIELD_SEPARATOR)
        if head == "lengths" and not rest:
            return self.lengths
        if head == "values":
            return self._items[rest] if rest else self._items
        raise KeyError(f"Field not found in list: {item}.")

    def _describe(self, depth: int, out: StringIO) -> None:
        pad = "  " * depth
        out.write(f"{pad}List(\n{pad}  lengths=\n")
        self.lengths._describe(depth + 2, out)
        out.write(f"{pad}  _items=\n")
        self._items._describe(depth + 2, out)
        out.write(f"{pad})\n")


def _nest(path: str, field: Field) -> tuple[str, Field]:
    """``('a:b:c', f)`` as ``('a', Struct(('b', Struct(('c', f)))))``."""
    head, _, rest = path.partition(FIELD_SEPARATOR)
    return head, (Struct((rest, field)) if rest else field)


class Struct(Field):
    """Named fields sharing one domain. A name ``'a:b'`` nests ``b`` in a struct ``a``; structs
    given under one name are merged.

    >>> Struct(("a", Scalar()), ("b:c", Scalar()), ("b", Struct(("d", Scalar())))).field_names()
    ['a', 'b:c', 'b:d']
    """

    def __init__(self, *fields: tuple[str, Any]):
        super().__init__()
        children: OrderedDict[str, Field] = OrderedDict()
        for entry in fields:
            if len(entry) != 2:
                raise AssertionError(f"A struct field is a (name, field) pair, got {entry!r}")
            name, value = entry
            if not name:
                raise AssertionError("Field names cannot be empty")
            if name == "lengths":
                raise AssertionError("Struct cannot contain a field named `lengths`.")
            name, field = _nest(name, _as_field(value))
            if name not in children:
                children[name] = field
            elif isinstance(field, Struct) and isinstance(children[name], Struct):
                children[name] = children[name] + field
            else:
                raise ValueError(f"Duplicate field name: {name}")
        self.fields = children
        self._adopt()
        self._sealed = True

    def _named_children(self) -> list[tuple[str, Field]]:
        return list(self.__dict__["fields"].items())

    def get_children(self) -> list[tuple[str, Field]]:
        return self._named_children()

    def clone(self, keep_blobs: bool = True) -> Struct:
        return Struct(*[(name, _as_field(f, keep_blobs)) for name, f in self._named_children()])

    def _lookup(self, path: str) -> Field | None:
        head, _, rest = path.partition(FIELD_SEPARATOR)
        child = self.__dict__["fields"].get(head)
        if child is None or not rest:
            return child
        try:
            return child[rest]
        except (KeyError, TypeError):
            return None

    def __contains__(self, item: str) -> bool:
        return self._lookup(item) is not None

    def __len__(self) -> int:
        return len(self.__dict__["fields"])

    def __iter__(self) -> Any:
        return iter(self.fields.values())

    def __getitem__(self, item: Any) -> Field:
        """A child by position, a field by (nested) name, or a Struct of several of them."""
        if isinstance(item, (list, tuple)):
            names = list(self.fields)
            return Struct(*[(names[k] if isinstance(k, int) else k, self[k]) for k in item])
        if isinstance(item, int):
            return list(self.fields.values())[item]
        found = self._lookup(item)
        if found is None:
            raise KeyError(f'field "{item}" not found')
        return found

    def get(self, item: str, default_value: Any) -> Any:
        """The child ``item``, or ``default_value``."""
        return getattr(self, item, default_value)

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        try:
            return self.__dict__["fields"][item]
        except KeyError:
            raise AttributeError(item) from None

    def __setattr__(self, key: str, value: Any) -> None:
        if self.__dict__.get("_sealed") and not key.startswith("_"):
            raise TypeError("Struct.__setattr__() is disabled after __init__()")
        object.__setattr__(self, key, value)

    def __add__(self, other: Any) -> Struct:
        """The union of two structs, merging structs found under one name."""
        if not isinstance(other, Struct):
            return NotImplemented
        merged = OrderedDict(self._named_children())
        for name, field in other._named_children():
            merged[name] = merged[name] + field if name in merged else field
        return Struct(*merged.items())

    def __sub__(self, other: Any) -> Struct:
        """This struct without the fields of ``other`` (recursively; emptied structs go too)."""
        if not isinstance(other, Struct):
            return NotImplemented
        kept = OrderedDict(self._named_children())
        for name, field in other._named_children():
            if name not in kept:
                continue
            mine = kept.pop(name)
            if type(mine) is not type(field):
                raise TypeError(
                    f"Field {name} is a {type(mine).__name__} on the left and a {type(field).__name__} on the right"
                )
            if isinstance(mine, Struct):
                rest = mine - field
                if rest.fields:
                    kept[name] = rest
        order = [n for n, _ in self._named_children() if n in kept]
        return Struct(*[(n, kept[n]) for n in order])

    def _describe(self, depth: int, out: StringIO) -> None:
        pad = "  " * depth
        out.write(f"{pad}Struct( \n")
        for name, field in self._named_children():
            out.write(f"{pad}  {name}=\n")
            field._describe(depth + 2, out)
        out.write(f"{pad}) \n")


def Map(keys: Any, values: Any, keys_name: str = "keys", values_name: str = "values", lengths_blob: Any = None) -> List:
    """A list of ``(keys, values)`` structs.

    >>> Map(np.int32, np.float32).field_names()
    ['lengths', 'values:keys', 'values:values']
    """
    return List(Struct((keys_name, keys), (values_name, values)), lengths_blob=lengths_blob)


def NamedTuple(name_prefix: str, *fields: Any) -> Struct:
    """A struct whose fields are named ``{name_prefix}_0``, ``{name_prefix}_1``, ..."""
    return Struct(*[(f"{name_prefix}_{i}", f) for i, f in enumerate(fields)])


def Tuple(*fields: Any) -> Struct:
    """A struct of ``field_0``, ``field_1``, ...

    >>> Tuple(np.int32, np.float32).field_names()
    ['field_0', 'field_1']
    """
    return NamedTuple("field", *fields)


def RawTuple(num_fields: int, name_prefix: str = "field") -> Struct:
    """A tuple of ``num_fields`` untyped scalars."""
    if not isinstance(num_fields, int) or num_fields < 0:
        raise AssertionError(f"num_fields must be a non-negative int, got {num_fields!r}")
    untyped = [np.void for _ in range(num_fields)]
    return NamedTuple(name_prefix, *untyped)


def from_dtype(dtype: Any, _outer_shape: tuple[int, ...] = ()) -> Field:
    """The schema of a numpy dtype: a Scalar, or a Struct of a structured dtype's fields."""
    outer = tuple(_outer_shape)
    inner = dtype.shape if isinstance(dtype, np.dtype) else ()
    base = dtype.base if isinstance(dtype, np.dtype) else dtype
    shape = outer + inner
    dtype = np.dtype((base, shape)) if shape or not isinstance(dtype, np.dtype) else dtype
    if dtype.fields is None:
        return Scalar(dtype)
    parts = []
    for name in dtype.names:
        sub = dtype.fields[name][0]
        parts.append((name, from_dtype(sub, _outer_shape=shape)))
    return Struct(*parts)


class _Column:
    """A node of the tree :func:`from_column_list` builds from column names."""

    def __init__(self) -> None:
        self.children: OrderedDict[str, _Column] = OrderedDict()
        self.leaf: Scalar | None = None

    def field(self) -> Field:
        if self.leaf is not None:
            return self.leaf
        kids = self.children
        if set(kids) == {"lengths", "values"}:
            return List(kids["values"].field(), lengths_blob=kids["lengths"].field())
        if set(kids) == {"lengths", "keys", "values"}:
            return Map(kids["keys"].field(), kids["values"].field(), lengths_blob=kids["lengths"].field())
        return Struct(*[(name, node.field()) for name, node in kids.items()])


def from_column_list(
    col_names: list[str], col_types: Any = None, col_blobs: Any = None, col_metadata: Any = None
) -> Field:
    """The record whose columns are ``col_names`` (in any order), with optional types, blobs
    and metadata per column.

    >>> from_column_list(["b:lengths", "a", "b:values"]).field_names()
    ['b:lengths', 'b:values', 'a']
    """
    n = len(col_names)
    columns = {"col_types": col_types, "col_blobs": col_blobs, "col_metadata": col_metadata}
    for key, values in columns.items():
        if values is not None and len(values) != n:
            raise AssertionError(f"col_names and {key} must have the same length.")
    types, blobs, metas = ([None] * n if v is None else v for v in columns.values())
    root = _Column()
    for name, dtype, blob, meta in zip(col_names, types, blobs, metas):
        node = root
        for part in name.split(FIELD_SEPARATOR):
            node = node.children.setdefault(part, _Column())
        node.leaf = Scalar(dtype=dtype, blob=blob, metadata=meta)
    return root.field()


def from_blob_list(schema: Field, values: Any, throw_on_type_mismatch: bool = False) -> Field:
    """A copy of ``schema`` whose columns hold ``values`` (one per column)."""
    if not isinstance(schema, Field):
        raise AssertionError("Argument `schema` must be a Field.")
    values = [values] if isinstance(values, BlobReference) else values
    copy = schema.clone_schema()
    leaves = copy.all_scalars()
    if len(leaves) != len(values):
        raise AssertionError(f"Values must have {len(leaves)} elements, got {len(values)}.")
    for leaf, value in zip(leaves, values):
        leaf.set_value(value, throw_on_type_mismatch, unsafe=True)
    return copy


def as_record(value: Any) -> Field:
    """A field for ``value``: a Field as is, a dict or ``(name, value)`` pairs as a Struct, other
    lists as a Tuple, anything else as a Scalar."""
    if isinstance(value, Field):
        return value
    if isinstance(value, dict):
        return Struct(*[(k, as_record(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        pairs = all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) for f in value)
        if pairs and value:
            return Struct(*[(name, as_record(item)) for name, item in value])
        return Tuple(*map(as_record, value))
    return _as_field(value)


def _references(record: Field) -> list[BlobReference]:
    if not isinstance(record, Field):
        raise AssertionError(f"Expected a schema.Field, got {type(record).__name__}")
    blobs = record.field_blobs()
    for blob in blobs:
        if not isinstance(blob, BlobReference):
            raise AssertionError(f"Expected a record of BlobReferences, found {type(blob).__name__}")
    return blobs


def FetchRecord(blob_record: Field, ws: Any = None, throw_on_type_mismatch: bool = False) -> Field:
    """The record with each blob replaced by its value (from ``ws`` or the current workspace)."""
    values = [workspace.FetchBlob(str(b)) if ws is None else ws.blobs[str(b)].fetch() for b in _references(blob_record)]
    return from_blob_list(blob_record, values, throw_on_type_mismatch)


def FeedRecord(blob_record: Field, arrays: Any, ws: Any = None) -> None:
    """Feed ``arrays`` (a list, or a record of arrays) into the blobs of ``blob_record``."""
    blobs = _references(blob_record)
    arrays = arrays.field_blobs() if isinstance(arrays, Field) else arrays
    if len(arrays) != len(blobs):
        raise AssertionError(f"Values must contain exactly {len(blobs)} ndarrays, got {len(arrays)}.")
    for blob, array in zip(blobs, arrays):
        if ws is None:
            workspace.FeedBlob(str(blob), array)
        else:
            ws.create_blob(str(blob))
            ws.blobs[str(blob)].feed(array)


def NewRecord(net: Any, schema: Field) -> Field:
    """A copy of ``schema`` holding a new blob of ``net`` per column (scoped by the column name)."""
    if isinstance(schema, Scalar):
        record = schema.clone()
        record.set_value(blob=net.NextScopedBlob("unnamed_scalar"), unsafe=True)
        return record
    if not isinstance(schema, Field):
        raise AssertionError("Record must be a schema.Field instance.")
    return from_blob_list(schema, [net.NextScopedBlob(prefix=name) for name in schema.field_names()])


def ConstRecord(net: Any, array_record: Field) -> Field:
    """A record of blobs that ``net`` fills with the arrays of ``array_record``."""
    record = NewRecord(net, array_record)
    for target, values in zip(record.field_blobs(), array_record.field_blobs()):
        net.Const(values, target)
    return record


def InitEmptyRecord(net: Any, schema_or_record: Field, enforce_types: bool = False) -> Field:
    """A record (new blobs unless it has some) that ``net`` fills with empty tensors of each
    column's type; an untyped column gets an empty float tensor unless ``enforce_types``."""
    record = schema_or_record if schema_or_record.has_blobs() else NewRecord(net, schema_or_record)
    for dtype, blob in zip(record.field_types(), record.field_blobs()):
        try:
            code = data_type_for_dtype(dtype)
        except TypeError:
            if not enforce_types:
                net.ConstantFill([], blob, shape=[0])
                continue
            raise
        if code == core.DataType.STRING:
            net.GivenTensorStringFill([], blob, shape=[0, *dtype.shape], values=[])
        else:
            net.ConstantFill([], blob, shape=[0, *dtype.shape], dtype=code)
    return record


def _data_type_table() -> list[tuple[Any, int]]:
    codes = core.DataType
    return [
        (np.dtype(str), codes.STRING),
        (np.dtype(object), codes.STRING),
        (np.dtype(np.float16), codes.FLOAT16),
        (np.dtype(np.float32), codes.FLOAT),
        (np.dtype(np.float64), codes.DOUBLE),
        (np.dtype(bool), codes.BOOL),
        (np.dtype(np.int8), codes.INT8),
        (np.dtype(np.int16), codes.INT16),
        (np.dtype(np.int32), codes.INT32),
        (np.dtype(np.int64), codes.INT64),
        (np.dtype(np.uint8), codes.UINT8),
        (np.dtype(np.uint16), codes.UINT16),
    ]


def data_type_for_dtype(dtype: np.dtype) -> int:
    """Caffe2's ``DataType`` code of a column type (TypeError for an unknown one)."""
    base = np.dtype(dtype).base
    for candidate, code in _data_type_table():
        if base == candidate:
            return code
    raise TypeError(f"Unknown dtype: {base}")


def is_schema_subset(schema: Field, original_schema: Field) -> bool:
    """Whether every column name of ``schema`` is one of ``original_schema``'s."""
    return set(schema.field_names()) <= set(original_schema.field_names())


def equal_schemas(
    schema: Field,
    original_schema: Field,
    check_field_names: bool = True,
    check_field_types: bool = True,
    check_field_metas: bool = False,
) -> bool:
    """Whether two records have the same column names, types and (optionally) metadata."""
    if not isinstance(schema, Field) or not isinstance(original_schema, Field):
        raise AssertionError("equal_schemas compares two schema.Field instances")
    checks = [
        (check_field_names, Field.field_names),
        (check_field_types, Field.field_types),
        (check_field_metas, Field.field_metadata),
    ]
    return all(f(schema) == f(original_schema) for wanted, f in checks if wanted)


def schema_check(schema: Any, previous: Field | None = None) -> Field:
    """``as_record(schema)``, checked equal to ``previous`` when given."""
    record = as_record(schema)
    if previous is not None and not equal_schemas(schema, previous):
        raise AssertionError(f"Schema mismatch: {schema} vs {previous}")
    return record


def attach_metadata_to_scalars(field: Field, metadata: Metadata) -> None:
    """Set ``metadata`` on every column of ``field``."""
    for leaf in field.all_scalars():
        leaf.set_metadata(metadata)
