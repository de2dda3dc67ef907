"""Caffe2's ``caffe2.python.dataset``: an in-memory dataset of records, one tensor per column.

:class:`Dataset` holds a record of a schema in blobs; its writer appends batches
(``AtomicAppend``), its readers read them back in order (``ReadNextBatch``) or in a given
order (``ReadRandomBatch``)::

    >>> import numpy as np
    >>> from caffe2.python import core, schema, workspace
    >>> from caffe2.python.dataset import Dataset
    >>> rec = schema.Struct(("x", np.int64), ("ys", schema.List(np.float32)))
    >>> data = schema.from_blob_list(rec, [[1, 2], [1, 2], [0.5, 1.5, 2.5]])
    >>> ds = Dataset(rec, name="doc_ds")
    >>> init = core.Net("doc_ds_init")
    >>> ds.init_empty(init)
    >>> batch = schema.NewRecord(init, data)
    >>> schema.FeedRecord(batch, data)
    >>> ds.writer(init_net=init).write_record(init, batch)
    >>> workspace.RunNetOnce(init)
    True
    >>> read_init, read = core.Net("doc_ds_rinit"), core.Net("doc_ds_read")
    >>> stop, fields = ds.reader(read_init, batch_size=2).read_record(read)
    >>> workspace.RunNetOnce(read_init) and workspace.RunNetOnce(read)
    True
    >>> schema.FetchRecord(fields)["ys:values"].get()
    array([0.5, 1.5, 2.5], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe2.python import core, workspace
from caffe2.python.dataio import Reader, Writer
from caffe2.python.schema import Field, InitEmptyRecord, Struct, from_blob_list, from_column_list

__all__ = ["Const", "Dataset", "execution_step_with_progress"]


def _as_list(blobs: Any) -> list[Any]:
    return [blobs] if isinstance(blobs, core.BlobReference) else list(blobs)


class _CursorReader(Reader):
    """A reader of a dataset through a TreeCursor blob; ``options`` are its read op's arguments."""

    def __init__(self, dataset: Dataset, name: str | None, **options: Any):
        super().__init__(dataset.content())
        self.dataset = dataset
        self.name = name or f"{dataset.name}_cursor"
        self.options = options
        self.cursor: Any = None

    @property
    def batch_size(self) -> int:
        return self.options["batch_size"]

    def _cursor_blob(self, init_net: Any) -> Any:
        raise NotImplementedError

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        if self.cursor is not None:
            return
        self.cursor = init_net.CreateTreeCursor([], self._cursor_blob(init_net), fields=self.dataset.fields)

    def reset(self, net: Any) -> None:
        net.ResetCursor([self.cursor], [])

    def _read_with(self, read_net: Any, op_type: str, state: list[Any]) -> tuple[Any, list[Any]]:
        """Add op ``op_type`` reading the next batch (after inputs ``state``); ``(empty, fields)``."""
        columns = self.dataset.content()
        with core.NameScope(read_net.NextName(self.name)):
            op = getattr(read_net, op_type)
            batch = _as_list(op([*state, *columns.field_blobs()], columns.field_names(), **self.options))
            return read_net.IsEmpty([batch[0]]), batch


class _SequentialReader(_CursorReader):
    """Reads a dataset's records in order."""

    def _cursor_blob(self, init_net: Any) -> Any:
        return init_net.NextScopedBlob(self.name)

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        if not self.cursor:
            raise AssertionError("setup not called.")
        return self._read_with(read_net, "ReadNextBatch", [self.cursor])


class _RandomOrderReader(_CursorReader):
    """Reads a dataset's records in the order of an index blob (after :meth:`computeoffset`)."""

    def __init__(self, dataset: Dataset, name: str | None, indices: Any, **options: Any):
        super().__init__(dataset, name, **options)
        self.indices = indices
        self.offsets: Any = None

    def _cursor_blob(self, init_net: Any) -> Any:
        return [self.name]

    def computeoffset(self, net: Any) -> None:
        """Add to ``net`` the ops computing where each record starts (needed before reading)."""
        self.reset(net)
        self.offsets = net.ComputeOffset([self.cursor, *self.dataset.content().field_blobs()], "offsets")

    def sort_and_shuffle(
        self, net: Any, sort_by_field: str | None = None, shuffle_size: int = 1, batch_size: int = 1
    ) -> None:
        """Read in the order of ``sort_by_field``'s values, shuffled by chunks of batches."""
        columns = self.dataset.content()
        names = columns.field_names()
        if sort_by_field and sort_by_field not in names:
            raise AssertionError(f"Must be valid field: {sort_by_field!r} is not one of {names}")
        self.reset(net)
        self.indices = net.SortAndShuffle(
            [self.cursor, *columns.field_blobs()],
            "indices",
            sort_by_field_idx=names.index(sort_by_field) if sort_by_field else -1,
            shuffle_size=shuffle_size,
            batch_size=batch_size,
        )

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        if self.offsets is None:
            raise AssertionError("computeoffset() must be called before reading")
        return self._read_with(read_net, "ReadRandomBatch", [self.cursor, self.indices, self.offsets])


class _AppendingWriter(Writer):
    """Appends batches to a dataset's blobs, under a mutex."""

    def __init__(self, content: Field):
        self._columns = content
        self.mutex: Any = None

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        self.mutex = self.mutex or init_net.CreateMutex([])

    def write(self, writer_net: Any, fields: Any) -> None:
        """Add to ``writer_net`` a consistency check of ``fields`` and their append."""
        if not self.mutex:
            raise AssertionError("setup not called.")
        targets = self._columns.field_blobs()
        if len(targets) != len(fields):
            raise AssertionError(f"Expected {len(targets)} fields, got {len(fields)}.")
        writer_net.CheckDatasetConsistency(fields, [], fields=self._columns.field_names())
        writer_net.AtomicAppend([self.mutex, *targets, *fields], targets)

    def commit(self, finish_net: Any) -> None:
        """Nothing to do for an in-memory dataset."""


def Const(net: Any, value: Any, dtype: Any = None, name: str | None = None) -> core.BlobReference:
    """A new external input of ``net``, fed now with ``np.array(value, dtype)``."""
    if not isinstance(net, core.Net):
        raise AssertionError("net must be a core.Net instance.")
    ref = net.AddExternalInput(net.NextName(prefix=name))
    workspace.FeedBlob(str(ref), np.array(value, dtype=dtype))
    return ref


def execution_step_with_progress(name: str, init_net: Any, substeps: Any, rows_read: Any) -> Any:
    """A step running ``substeps`` concurrently, with a net printing ``rows_read``."""
    report = core.Net("report_net")
    report.Print([rows_read], [])
    return core.execution_step(name, substeps, report_net=report, concurrent_substeps=True, report_interval=5)


def _ready(reader_or_writer: Any, init_net: Any) -> Any:
    if init_net is not None:
        reader_or_writer.setup_ex(init_net, None)
    return reader_or_writer


class Dataset:
    """A record of a schema held in blobs, to append to and read from.

    ``fields`` is a ``schema.Struct`` (with blobs: the dataset uses them) or a list of column
    names. Give it blobs with :meth:`init_empty` (or :meth:`init_from_dataframe`).
    """

    def __init__(self, fields: Any, name: str | None = None):
        if isinstance(fields, list):
            record = from_column_list(fields)
        elif isinstance(fields, Struct):
            record = fields
        else:
            raise AssertionError("fields must be either a Struct or a list of raw field names.")
        self.schema = record
        self.name = name or "dataset"
        self.fields = record.field_names()
        self.field_types = record.field_types()
        self.field_blobs = record.field_blobs() if record.has_blobs() else None

    def trim(self, net: Any, multiple_of: int) -> None:
        """Add to ``net`` the op keeping the most records that are a multiple of ``multiple_of``."""
        columns = self.field_blobs
        net.TrimDataset(columns, columns, fields=self.fields, multiple_of=multiple_of)

    def init_empty(self, init_net: Any) -> None:
        """New blobs that ``init_net`` fills with empty columns."""
        self.field_blobs = InitEmptyRecord(init_net, self.schema.clone_schema()).field_blobs()

    def init_from_dataframe(self, net: Any, dataframe: Any) -> None:
        """Blobs fed now with the columns of a pandas ``dataframe`` (one per field)."""
        if len(dataframe.columns) != len(self.fields):
            raise AssertionError(f"Expected {len(self.fields)} columns, got {len(dataframe.columns)}")
        columns = [dataframe.iloc[:, i].to_numpy().ravel() for i in range(len(self.fields))]
        self.field_blobs = [Const(net, col, name=f) for col, f in zip(columns, self.fields)]

    def get_blobs(self) -> list[Any] | None:
        return self.field_blobs

    def content(self) -> Field:
        """The record of the dataset's blobs."""
        return from_blob_list(self.schema, self.field_blobs)

    def field_names(self) -> list[str]:
        return list(self.fields)

    def _check_initialized(self) -> None:
        if not self.field_blobs:
            raise AssertionError("Dataset not initialized.")

    def reader(
        self,
        init_net: Any = None,
        cursor_name: str | None = None,
        batch_size: int = 1,
        enforce_batch_size: bool = False,
    ) -> Reader:
        """A reader of the records in order, ``batch_size`` at a time (its cursor is made by
        ``init_net`` when given, else by the reader's ``setup_ex``)."""
        self._check_initialized()
        reader = _SequentialReader(self, cursor_name, batch_size=batch_size, enforce_batch_size=enforce_batch_size)
        return _ready(reader, init_net)

    def random_reader(
        self,
        init_net: Any = None,
        indices: Any = None,
        cursor_name: str | None = None,
        batch_size: int = 1,
        loop_over: bool = False,
        enforce_batch_size: bool = False,
    ) -> Any:
        """A reader of the records in the order of ``indices`` (call its ``computeoffset`` and
        optionally ``sort_and_shuffle`` before reading); ``loop_over`` repeats it forever."""
        self._check_initialized()
        reader = _RandomOrderReader(
            self,
            cursor_name,
            indices,
            batch_size=batch_size,
            enforce_batch_size=enforce_batch_size,
            loop_over=loop_over,
        )
        return _ready(reader, init_net)

    def writer(self, init_net: Any = None) -> Writer:
        """A writer appending to the dataset."""
        self._check_initialized()
        return _ready(_AppendingWriter(self.content()), init_net)
