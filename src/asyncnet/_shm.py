"""POSIX shared-memory segments: the one primitive asyncnet's atomics, process sync and Hogwild use.

``multiprocessing.shared_memory.SharedMemory`` registers every segment it opens with the
resource tracker (before Python 3.13 even when it only attaches), which then warns about
"leaked" segments and unlinks segments still in use by other processes; and its ``__del__``
prints a ``BufferError`` traceback when numpy views still point into it (as they do in a worker
interrupted mid-round). asyncnet opens, maps and unlinks segments with ``_posixshmem`` and
``mmap`` directly instead, and decides who cleans up:

- a segment made with ``track=True`` is registered with the resource tracker (through
  :mod:`asyncnet._tracker`, which survives the tracker being killed), so if its creator is
  killed the tracker unlinks it; :func:`unlink_segment` with ``tracked=True`` unregisters it;
- a segment made with ``track=False`` (the process backend's) is unlinked by name by whoever
  owns the group (its creator, or a worker that sees the creator die);
- attaching never registers and never unlinks.

Names of anonymous segments are ``<prefix><creator pid>_<random hex>``, which ``asyncnet clean``
reads. :class:`SharedArrays` lays named numpy arrays out in one segment.

    >>> seg = open_segment("asyncnet_doc_demo", create=True, size=16)
    >>> seg.size >= 16
    True
    >>> seg.close(); unlink_segment("asyncnet_doc_demo")
    True
"""

from __future__ import annotations

import mmap
import os
from typing import Any

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not a POSIX system: fail when a segment is made
    _posixshmem = None

__all__ = ["Segment", "open_segment", "new_segment", "unlink_segment", "close_segment", "SharedArrays"]


class Segment:
    """A mapped segment: ``name``, ``size`` and ``buf`` (the ``mmap``, a writable buffer)."""

    __slots__ = ("name", "size", "buf")

    def __init__(self, name: str, size: int, buf: mmap.mmap):
        self.name = name
        self.size = size
        self.buf = buf

    def close(self) -> None:
        """Unmap now; while numpy views still point into it, leave the unmapping to them."""
        try:
            self.buf.close()
        except BufferError:
            pass

    def __repr__(self) -> str:
        return f"Segment({self.name!r}, size={self.size})"


def _require_posix() -> None:
    if _posixshmem is None:  # pragma: no cover
        raise OSError("asyncnet's shared memory needs POSIX shared memory (Linux)")


def open_segment(name: str, create: bool = False, size: int = 0, track: bool = False) -> Segment:
    """Create (``create=True``, ``size`` bytes, zeroed; ``FileExistsError`` if the name is taken)
    or attach the segment ``name``; ``track`` registers a created one with the resource tracker."""
    _require_posix()
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
    try:
        if not create:
            return Segment(name, os.fstat(fd).st_size, mmap.mmap(fd, os.fstat(fd).st_size))
        try:
            if track:
                from asyncnet import _tracker  # multiprocessing's resource tracker, loaded when needed

                _tracker.register("/" + name)
            os.ftruncate(fd, size)
            return Segment(name, size, mmap.mmap(fd, size))
        except BaseException:
            unlink_segment(name, tracked=track)
            raise
    finally:
        os.close(fd)


def new_segment(prefix: str, size: int, track: bool = True) -> Segment:
    """Create a segment of ``size`` zeroed bytes under a fresh name ``<prefix><pid>_<random>``.

    >>> seg = new_segment("asyncnet_doc_", 8); seg.name.startswith(f"asyncnet_doc_{os.getpid()}_")
    True
    >>> seg.close(); unlink_segment(seg.name, tracked=True)
    True
    """
    import secrets

    for _ in range(100):
        try:
            return open_segment(f"{prefix}{os.getpid()}_{secrets.token_hex(8)}", create=True, size=size, track=track)
        except FileExistsError:
            continue
    raise FileExistsError("could not find a free shared-memory name")  # pragma: no cover - 100 collisions of 64 bits


def unlink_segment(name: str, tracked: bool = False) -> bool:
    """Remove the segment ``name`` (and, if ``tracked``, its registration); False when it did not exist."""
    if _posixshmem is None:  # pragma: no cover
        return False
    try:
        _posixshmem.shm_unlink("/" + name)
        existed = True
    except FileNotFoundError:
        existed = False
    if tracked:
        from asyncnet import _tracker

        _tracker.unregister("/" + name)
    return existed


def close_segment(seg: Segment | None) -> None:
    """Unmap ``seg`` (None is ignored)."""
    if seg is not None:
        seg.close()


_ALIGN = 64
Spec = tuple[str, tuple[tuple[str, str, tuple[int, ...], int], ...], int]


class SharedArrays:
    """Named numpy arrays living in one shared segment (Hogwild's parameters across processes).

    The creator owns the name (``close()`` unlinks it; the resource tracker does if the creator
    is killed); other processes attach with the creator's ``spec``.

        >>> import numpy as np
        >>> with SharedArrays.create({"w": np.ones((2, 3), np.float32)}) as sa:
        ...     other = SharedArrays.attach(sa.spec)
        ...     other["w"][0, 0] = 5.0
        ...     float(sa["w"][0, 0])
        5.0
    """

    PREFIX = "asyncnet_hw_"

    def __init__(self, seg: Segment, spec: Spec, owner: bool):
        import numpy as np

        self._seg: Segment | None = seg
        self.spec = spec
        self.owner = owner
        self.arrays: dict[str, Any] = {
            key: np.ndarray(shape, np.dtype(dtype), buffer=seg.buf, offset=off) for key, dtype, shape, off in spec[1]
        }

    @classmethod
    def create(cls, values: dict[str, Any]) -> SharedArrays:
        """A new segment holding copies of ``values``."""
        import numpy as np

        layout, size = [], 0
        for key, v in values.items():
            v = np.asarray(v)
            layout.append((key, v.dtype.str, tuple(v.shape), size))
            size += -(-max(v.nbytes, 1) // _ALIGN) * _ALIGN
        size = max(size, _ALIGN)
        seg = new_segment(cls.PREFIX, size, track=True)
        out = cls(seg, (seg.name, tuple(layout), size), owner=True)
        for key, v in values.items():
            out.arrays[key][...] = v
        return out

    @classmethod
    def attach(cls, spec: Spec) -> SharedArrays:
        """Map an existing segment described by ``spec`` (from the creator's ``.spec``)."""
        return cls(open_segment(spec[0]), spec, owner=False)

    def __getitem__(self, key: str) -> Any:
        return self.arrays[key]

    def close(self) -> None:
        """Drop the arrays and the mapping; the owner also unlinks the name. Idempotent."""
        self.arrays = {}
        seg, self._seg = self._seg, None
        if seg is None:
            return
        seg.close()
        if self.owner:
            unlink_segment(self.spec[0], tracked=True)

    def __enter__(self) -> SharedArrays:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
