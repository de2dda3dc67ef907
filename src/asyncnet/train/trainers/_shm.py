"""Named float arrays in one POSIX shared-memory segment, for Hogwild across processes.

The parent creates the segment (and owns its name: ``close()`` unlinks it); spawned workers
attach by name with :meth:`SharedArrays.attach`, which maps the segment without registering it
with multiprocessing's resource tracker (on Python < 3.13 ``SharedMemory`` would, and the
tracker would unlink a segment still in use when a worker exits).

    >>> import numpy as np
    >>> with SharedArrays.create({"w": np.ones((2, 3), np.float32)}) as sa:
    ...     other = SharedArrays.attach(sa.spec)
    ...     other["w"][0, 0] = 5.0
    ...     float(sa["w"][0, 0])
    5.0
"""

from __future__ import annotations

import mmap
import os
import secrets
from typing import Any

import _posixshmem
import numpy as np

from asyncnet import _tracker

__all__ = ["SharedArrays"]

PREFIX = "asyncnet_hw_"
_ALIGN = 64

Spec = tuple[str, tuple[tuple[str, str, tuple[int, ...], int], ...], int]


class SharedArrays:
    """A dict-like set of numpy arrays living in one shared segment."""

    def __init__(self, mm: mmap.mmap, spec: Spec, owner: bool):
        self._mm = mm
        self.spec = spec
        self.owner = owner
        self.arrays: dict[str, np.ndarray] = {
            key: np.ndarray(shape, np.dtype(dtype), buffer=mm, offset=off) for key, dtype, shape, off in spec[1]
        }

    @classmethod
    def create(cls, values: dict[str, np.ndarray]) -> "SharedArrays":
        """A new segment holding copies of ``values``."""
        layout, size = [], 0
        for key, v in values.items():
            v = np.asarray(v)
            layout.append((key, v.dtype.str, tuple(v.shape), size))
            size += -(-max(v.nbytes, 1) // _ALIGN) * _ALIGN
        name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(8)}"  # the creator's pid: see asyncnet clean
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            _tracker.register("/" + name)  # cleanup if we are killed
            os.ftruncate(fd, max(size, _ALIGN))
            mm = mmap.mmap(fd, max(size, _ALIGN))
        except BaseException:
            _posixshmem.shm_unlink("/" + name)
            _tracker.unregister("/" + name)
            raise
        finally:
            os.close(fd)
        out = cls(mm, (name, tuple(layout), max(size, _ALIGN)), owner=True)
        for key, v in values.items():
            out.arrays[key][...] = v
        return out

    @classmethod
    def attach(cls, spec: Spec) -> "SharedArrays":
        """Map an existing segment described by ``spec`` (from the creator's ``.spec``)."""
        name, _, size = spec
        fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(mm, spec, owner=False)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        """Drop the arrays and the mapping; the owner also unlinks the name. Idempotent."""
        self.arrays = {}
        mm, self._mm = self._mm, None
        if mm is None:
            return
        try:
            mm.close()
        except BufferError:  # a view is still alive somewhere: the mapping goes with it
            pass
        if self.owner:
            try:
                _posixshmem.shm_unlink("/" + self.spec[0])
            except FileNotFoundError:
                pass
            _tracker.unregister("/" + self.spec[0])

    def __enter__(self) -> "SharedArrays":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
