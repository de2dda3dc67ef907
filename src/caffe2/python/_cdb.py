"""Caffe2's ``workspace.C.create_db``: key-value databases (minidb, lmdb) opened from Python.

A database opened in ``Mode.write`` (or ``Mode.new``) takes records through transactions
(``put``, then ``commit``, or the transaction's deletion) and is written when it is closed (or
deleted); one opened in ``Mode.read`` hands its records out through cursors. Example::

    >>> import os, tempfile
    >>> from caffe2.python import workspace
    >>> path = os.path.join(tempfile.mkdtemp(), "kv.minidb")
    >>> db = workspace.C.create_db("minidb", path, workspace.C.Mode.write)
    >>> t = db.new_transaction(); t.put(b"k1", b"v1"); t.commit()
    >>> db.close()
    >>> cursor = workspace.C.create_db("minidb", path, workspace.C.Mode.read).new_cursor()
    >>> cursor.key(), cursor.value()
    (b'k1', b'v1')
"""

from __future__ import annotations

import enum
from typing import Any

from asyncnet.ops.dbio import DB_TYPES, open_db, write_db


class Mode(enum.IntEnum):
    """How a database is opened (Caffe2's ``db::Mode``)."""

    read = 0
    write = 1
    new = 2


def _bytes(x: Any) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode("utf-8")


class Cursor:
    """Walks a database's records in order (``valid``, ``key``, ``value``, ``next``, ``seek_to_first``, ``seek``)."""

    def __init__(self, records: list[tuple[bytes, bytes]]):
        self._records = records
        self._pos = 0

    def seek_to_first(self) -> None:
        self._pos = 0

    def seek(self, key: Any) -> None:
        """Move to the first record whose key is not less than ``key``."""
        key = _bytes(key)
        self._pos = next((i for i, (k, _) in enumerate(self._records) if k >= key), len(self._records))

    def supports_seek(self) -> bool:
        return True

    def next(self) -> None:
        self._pos += 1

    def valid(self) -> bool:
        return self._pos < len(self._records)

    def key(self) -> bytes:
        return self._records[self._pos][0]

    def value(self) -> bytes:
        return self._records[self._pos][1]


class Transaction:
    """Puts records into a writable database; they are kept when committed (or on deletion)."""

    def __init__(self, db: DB):
        self._db = db
        self._pending: list[tuple[bytes, bytes]] = []

    def put(self, key: Any, value: Any) -> None:
        self._pending.append((_bytes(key), _bytes(value)))

    def commit(self) -> None:
        self._db._records.extend(self._pending)
        self._pending = []

    def __del__(self) -> None:
        if self._pending:
            self.commit()


class DB:
    """One open database."""

    def __init__(self, db_type: str, path: str, mode: Mode):
        if db_type not in DB_TYPES:
            raise ValueError(f"create_db: db_type must be one of {list(DB_TYPES)}, got {db_type!r}")
        self._type, self._path, self._mode = db_type, path, Mode(mode)
        self._records: list[tuple[bytes, bytes]] = open_db(path, db_type) if self._mode == Mode.read else []
        self._open = True

    def new_transaction(self) -> Transaction:
        if self._mode == Mode.read:
            raise RuntimeError(f"create_db: {self._path} is open for reading; transactions need Mode.write")
        return Transaction(self)

    def new_cursor(self) -> Cursor:
        return Cursor(list(self._records))

    def close(self) -> None:
        if self._open and self._mode != Mode.read:
            write_db(self._path, self._type, self._records)
        self._open = False

    def __del__(self) -> None:
        self.close()


def create_db(db_type: str, path: str, mode: Any) -> DB:
    """Open database ``path`` of type ``db_type`` (minidb or lmdb) in ``mode``."""
    return DB(db_type, path, mode)
