"""A small POSIX shared-memory segment holding one shared primitive, and who cleans it up.

Layout (128 bytes): magic ``b"ANAT"`` | kind (1 byte) | bits (1 byte) | 2 spare | value slot
(8 bytes, offset 8) | ... | robust process-shared mutex (offset 64). The magic is written
last, so a process attaching by name never sees a half-initialised segment.

Lifetime rules (what makes "nothing left in /dev/shm" hold):

- The creating handle *owns* the name. ``unlink()`` (or leaving its ``with`` block, or its
  garbage collection, or normal interpreter exit through a ``weakref.finalize``) removes it.
- The creator also registers the name with multiprocessing's resource tracker (through
  :mod:`asyncnet._tracker`, which survives the tracker being killed), so if the
  creating process is killed the tracker unlinks it when the process tree is gone.
- Handles that *attach* (by name or by unpickling in a child) never register and never
  unlink on their own: a child that crashes leaves nothing behind, and the owner's later
  ``unlink`` is the single cleanup.

This module uses ``_posixshmem`` (the C helper behind ``multiprocessing.shared_memory``)
directly, because ``SharedMemory`` on Python < 3.13 registers attaching processes with the
resource tracker too, which unlinks a segment still in use when such a process exits.
"""

from __future__ import annotations

import mmap
import os
import secrets
import struct
import weakref

from asyncnet import _tracker

try:
    import _posixshmem
except ImportError:  # pragma: no cover - not a POSIX system: fail when a segment is made, not on import
    _posixshmem = None

__all__ = ["Segment", "KIND_MUTEX", "KIND_INT", "KIND_BOOL", "PREFIX"]

PREFIX = "asyncnet_atomic_"  # every segment name starts with this (tests filter /dev/shm on it);
# anonymous ones go on with "<creator pid>_", which ``asyncnet clean`` reads
SIZE = 128
VALUE_OFFSET = 8
MUTEX_OFFSET = 64
_MAGIC = b"ANAT"
_HEADER = struct.Struct("<4sBB")
KIND_MUTEX, KIND_INT, KIND_BOOL = 1, 2, 3
KIND_NAMES = {KIND_MUTEX: "SharedMutex", KIND_INT: "SharedAtomicInt", KIND_BOOL: "SharedAtomicBool"}


def _require_posix() -> None:
    if _posixshmem is None:  # pragma: no cover
        raise OSError("asyncnet shared atomics need POSIX shared memory (Linux)")


def _unlink_name(tracked_name: str) -> None:
    """Remove ``/name`` from the system and from the resource tracker; ignore if gone."""
    try:
        _posixshmem.shm_unlink(tracked_name)
    except FileNotFoundError:
        pass
    _tracker.unregister(tracked_name)


def _finalize(mm: mmap.mmap, tracked_name: str | None, pid: int) -> None:
    try:
        mm.close()
    except BufferError:  # still exported (an op in flight at interpreter exit): leave the mapping
        pass
    if tracked_name is not None and os.getpid() == pid:  # a forked child never unlinks
        _unlink_name(tracked_name)


class Segment:
    """One mapped shared-memory segment: ``create(kind, bits, name)`` or ``attach(name, kind)``."""

    def __init__(self, mm: mmap.mmap, name: str, owner: bool, kind: int, bits: int) -> None:
        self.mm = mm
        self.name = name
        self.owner = owner
        self.kind = kind
        self.bits = bits
        tracked = "/" + name if owner else None
        self._finalizer = weakref.finalize(self, _finalize, mm, tracked, os.getpid())

    @classmethod
    def create(cls, kind: int, bits: int, name: str | None = None) -> tuple[Segment, mmap.mmap]:
        """Create a new segment (random name when ``name`` is None); return it and its map.

        The caller initialises the payload, then calls :meth:`publish`.
        """
        _require_posix()
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR
        for _ in range(100):
            nm = name if name is not None else f"{PREFIX}{os.getpid()}_{secrets.token_hex(8)}"
            try:
                fd = _posixshmem.shm_open("/" + nm, flags, mode=0o600)
                break
            except FileExistsError:
                if name is not None:
                    raise FileExistsError(f"a shared-memory segment named {name!r} already exists") from None
        else:  # pragma: no cover - 100 collisions of 64 random bits
            raise FileExistsError("could not find a free shared-memory name")
        try:
            _tracker.register("/" + nm)
            os.ftruncate(fd, SIZE)
            mm = mmap.mmap(fd, SIZE)
        except BaseException:
            _unlink_name("/" + nm)
            raise
        finally:
            os.close(fd)
        return cls(mm, nm, True, kind, bits), mm

    def publish(self) -> None:
        """Write the header (last), making the segment visible to ``attach``."""
        self.mm[4:6] = bytes([self.kind, self.bits])
        self.mm[0:4] = _MAGIC

    @classmethod
    def attach(cls, name: str, kind: int) -> Segment:
        """Map the existing segment ``name``; check it holds a primitive of ``kind``."""
        _require_posix()
        try:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no shared {KIND_NAMES[kind]} named {name!r} (it was never created, or its owner unlinked it)"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if size < SIZE:
                raise ValueError(f"shared-memory segment {name!r} is not an asyncnet atomic ({size} bytes)")
            mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        magic, got_kind, bits = _HEADER.unpack_from(mm, 0)
        if magic != _MAGIC or got_kind != kind:
            mm.close()
            found = KIND_NAMES.get(got_kind, "something else") if magic == _MAGIC else "not an asyncnet atomic"
            raise TypeError(f"shared-memory segment {name!r} holds {found}, expected a {KIND_NAMES[kind]}")
        return cls(mm, name, False, kind, bits)

    def close(self) -> None:
        """Unmap (and, for the owner, unlink) now; idempotent."""
        self._finalizer()

    def unlink(self) -> None:
        """Remove the name now (any handle may); mappings stay valid until closed."""
        tracked = "/" + self.name
        try:
            _posixshmem.shm_unlink(tracked)
        except FileNotFoundError:
            pass
        if self.owner:
            _tracker.unregister(tracked)
            # the finalizer must not unlink (or unregister) a second time
            mm = self.mm
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _finalize, mm, None, 0)
