"""Caffe2's ``caffe2.python.cached_reader``: a reader whose data is kept in a file.

``build_cache(path)`` gives a step that, when ``path`` does not exist, reads the original
reader to the end into an in-memory dataset and saves its columns to ``path``; the reader then
reads the dataset loaded from ``path`` (and never the original reader again).
"""

from __future__ import annotations

import os
from typing import Any

from caffe2.python import core
from caffe2.python.dataio import Reader
from caffe2.python.dataset import Dataset
from caffe2.python.pipeline import pipe
from caffe2.python.task import Cluster, TaskGroup

__all__ = ["CachedReader"]

_COPY_THREADS = 16
_READ_BATCH = 100


class CachedReader(Reader):
    """Reads ``reader``'s data from a cache file (a ``db_type`` database of its columns)."""

    def __init__(self, reader: Reader, db_type: str = "leveldb", name: str = "cached_reader"):
        super().__init__(reader.schema())
        self.original_reader, self.db_type, self.name = reader, db_type, name
        self.cache_path: str | None = None
        self.ds_reader: Reader | None = None
        self.ds = Dataset(self.schema(), name)
        self.field_names = self.schema().field_names()

    def _db(self) -> dict[str, Any]:
        return {"db": self.cache_path, "db_type": self.db_type, "absolute_path": True}

    def _columns(self) -> list[Any]:
        return self.ds.content().field_blobs()

    def _create_columns(self, net: Any) -> None:
        with core.NameScope(self.name):
            self.ds.init_empty(net)

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        """Load the cached columns into the dataset and open a reader of it."""
        if not self.cache_path:
            raise AssertionError("build_cache must be called first")
        self._create_columns(init_net)
        init_net.Load([], self._columns(), source_blob_names=self.field_names, **self._db())
        self.ds_reader = self.ds.reader(init_net, batch_size=_READ_BATCH)

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        if self.ds_reader is None:
            raise AssertionError("setup must be called first")
        return self.ds_reader.read(read_net)

    def has_cache(self) -> bool:
        return bool(self.cache_path) and os.path.exists(self.cache_path)

    def build_cache(self, cache_path: str, overwrite: bool = False) -> Any:
        """A step filling the cache at ``cache_path`` (an empty step when it exists already)."""
        if overwrite or not self.has_cache():
            self.cache_path = cache_path
        if not overwrite and self.has_cache():
            return core.execution_step("build_step", [])
        fill = core.Net("init")
        self._create_columns(fill)
        with Cluster(), core.NameScope(self.name), TaskGroup() as group:
            pipe(self.original_reader, self.ds.writer(), num_threads=_COPY_THREADS)
            copy = group.to_task().get_step()
        save = core.Net("save")
        save.Save(self._columns(), [], blob_name_overrides=self.field_names, **self._db())
        return core.execution_step("build_cache", [fill, copy, save])
