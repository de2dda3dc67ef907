"""Caffe2's text file reader operators: rows of tab-separated fields, read in batches.

CreateTextFileReader opens a reader of ``filename`` for ``num_passes`` passes, with one
TensorProto.DataType code per column (``field_types``: 4 for strings, which come out as bytes);
each TextFileReaderRead gives the next ``batch_size`` rows as one tensor per column (fewer rows
at the end, none once every pass is read). Reads are safe across threads.

    >>> import os, tempfile, asyncnet as an
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.tsv")
    >>> _ = open(path, "w").write("a\\t1.5\\nb\\t2.5\\n")
    >>> ws = an.Workspace()
    >>> net = an.Net("text")
    >>> _ = net.CreateTextFileReader([], "r", filename=path, field_types=[4, 1])
    >>> _ = net.TextFileReaderRead("r", ["names", "values"], batch_size=5)
    >>> ws.run_net_once(net); ws.fetch("names").tolist(), ws.fetch("values").tolist()
    ([b'a', b'b'], [1.5, 2.5])
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops.logic import CAFFE2_DTYPES

__all__ = ["TextFileReader"]

_STRING = 4


class TextFileReader:
    """The rows of a tab-separated file, ``num_passes`` times over, handed out in order."""

    def __init__(self, filename: str, num_passes: int, field_types: list[int]):
        for code in field_types:
            if code != _STRING and code not in CAFFE2_DTYPES:
                raise ValueError(f"field type {code} is not a TensorProto.DataType code of a tensor or a string")
        if num_passes < 1:
            raise ValueError(f"num_passes must be at least 1, got {num_passes}")
        self.filename, self.passes_left, self.types = filename, num_passes, list(field_types)
        self._file: Any = None
        self._lock = threading.Lock()

    def _next_line(self) -> str | None:
        while self.passes_left > 0:
            if self._file is None:
                self._file = open(self.filename, encoding="utf-8")
            line = self._file.readline()
            if line:
                return line.rstrip("\n")
            self._file.close()
            self._file = None
            self.passes_left -= 1
        return None

    def __del__(self) -> None:
        if self._file is not None:
            self._file.close()

    def read(self, rows: int) -> list[list[str]]:
        """The next ``rows`` rows (fewer at the end), each a list of its fields."""
        out = []
        with self._lock:
            while len(out) < rows:
                line = self._next_line()
                if line is None:
                    break
                fields = line.split("\t")
                if len(fields) != len(self.types):
                    raise ValueError(f"{self.filename}: expected {len(self.types)} fields, got {len(fields)}: {line!r}")
                out.append(fields)
        return out

    def column(self, rows: list[list[str]], j: int) -> np.ndarray:
        values = [r[j] for r in rows]
        if self.types[j] == _STRING:
            col = np.empty(len(values), dtype=object)
            col[:] = [v.encode("utf-8") for v in values]
            return col
        return np.array(values, dtype=CAFFE2_DTYPES[self.types[j]])


@register_op(
    "CreateTextFileReader",
    inputs=0,
    outputs=1,
    args=[
        Arg("filename", str, Arg.REQUIRED, "the file to read"),
        Arg("num_passes", int, 1, "times to read the file"),
        Arg("field_types", list, [], "a TensorProto.DataType code per column (4: string)", item_type=int),
    ],
    outputs_doc=("the reader",),
    doc="Caffe2's CreateTextFileReader: a reader of the tab-separated rows of a file.",
)
def create_text_file_reader(ctx: Any) -> TextFileReader:
    a = ctx.args
    return TextFileReader(a["filename"], a["num_passes"], a["field_types"])


@register_op(
    "TextFileReaderRead",
    inputs=1,
    outputs=(1, None),
    args=[Arg("batch_size", int, 1, "rows to read")],
    inputs_doc=("the reader",),
    outputs_doc=("one tensor per column",),
    doc="Caffe2's TextFileReaderRead: the next batch_size rows, one tensor per column (empty at the end).",
)
def text_file_reader_read(ctx: Any, reader: Any) -> Any:
    if not isinstance(reader, TextFileReader):
        raise TypeError(f"expected a text file reader (CreateTextFileReader) in input 0, got {type(reader).__name__}")
    if len(ctx.op.outputs) != len(reader.types):
        raise ValueError(f"expected {len(reader.types)} outputs (one per column), got {len(ctx.op.outputs)}")
    rows = reader.read(ctx.args["batch_size"])
    cols = [reader.column(rows, j) for j in range(len(reader.types))]
    return cols[0] if len(cols) == 1 else tuple(cols)


register_no_gradient("CreateTextFileReader", "TextFileReaderRead")
