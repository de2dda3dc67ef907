"""Caffe2's ``caffe2.python.text_file_reader``: a Reader of the tab-separated rows of a file.

>>> import os, tempfile
>>> import numpy as np
>>> from caffe2.python import core, schema, workspace
>>> from caffe2.python.text_file_reader import TextFileReader
>>> path = os.path.join(tempfile.mkdtemp(), "rows.tsv")
>>> _ = open(path, "w").write("x\\t1\\ny\\t2\\n")
>>> init, read = core.Net("tfr_init"), core.Net("tfr_read")
>>> rec = schema.Struct(("name", schema.Scalar(str)), ("n", schema.Scalar(np.int32)))
>>> reader = TextFileReader(init, path, rec, batch_size=2)
>>> stop, batch = reader.read_record(read)
>>> workspace.RunNetOnce(init) and workspace.RunNetOnce(read)
True
>>> schema.FetchRecord(batch).n.get().tolist()
[1, 2]
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core
from caffe2.python.dataio import Reader
from caffe2.python.schema import Scalar, Struct, data_type_for_dtype

__all__ = ["TextFileReader"]


class TextFileReader(Reader):
    """Reads ``batch_size`` rows at a time, ``num_passes`` times over the file; ``schema`` is a
    Struct of scalars, one per tab-separated column."""

    def __init__(self, init_net: Any, filename: str, schema: Struct, num_passes: int = 1, batch_size: int = 1):
        if not isinstance(schema, Struct):
            raise AssertionError("Schema must be a schema.Struct")
        if not all(isinstance(child, Scalar) for _, child in schema.get_children()):
            raise AssertionError("Only scalar fields are supported in TextFileReader.")
        super().__init__(schema)
        codes = [data_type_for_dtype(t) for t in schema.field_types()]
        self._handle = init_net.CreateTextFileReader([], filename=filename, num_passes=num_passes, field_types=codes)
        self._rows_per_read = batch_size

    def read(self, net: Any) -> tuple[Any, list[Any]]:
        """Add the read of the next batch to ``net``; it stops once a read finds no row."""
        count = len(self.schema().field_names())
        out = net.TextFileReaderRead([self._handle], count, batch_size=self._rows_per_read)
        columns = [out] if isinstance(out, core.BlobReference) else list(out)
        empty = net.IsEmpty([columns[0]], core.ScopedBlobReference(net.NextName("should_stop")))
        return empty, columns
