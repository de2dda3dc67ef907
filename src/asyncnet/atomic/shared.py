"""Shared-memory atomics for processes: ``SharedMutex``, ``SharedAtomicInt``, ``SharedAtomicBool``.

Each object is one small POSIX shared-memory segment (``/dev/shm/asyncnet_atomic_*``) holding the
value and a robust, process-shared pthread mutex that guards it. They have the same methods
as the in-process :class:`~asyncnet.atomic.Mutex`, :class:`~asyncnet.atomic.AtomicInt` and
:class:`~asyncnet.atomic.AtomicBool`, plus:

- ``name``: create anonymously (``SharedAtomicInt()``) or by name (``SharedAtomicInt(name="n")``);
  another process opens it with ``SharedAtomicInt.attach("n")``;
- handles pickle (they travel by name), so they can be passed to spawned processes;
- ``close()`` drops this handle's mapping; the *creating* handle owns the name and its
  ``close()`` (or ``with`` block, garbage collection, normal exit) also unlinks it;
  ``unlink()`` removes the name now. Keep the owner open until the children have attached.
  ``with`` on a ``SharedAtomicInt``/``SharedAtomicBool`` closes it at the end; ``with`` on a
  ``SharedMutex`` locks and unlocks it (as for every mutex): use
  ``contextlib.closing(SharedMutex())`` to scope its lifetime.

Crashes: attached handles register nothing, so a child that dies leaves nothing in /dev/shm;
if it died holding a lock, the next locker recovers it (robust mutex). The call that takes
over a ``SharedMutex`` that way (``acquire``, ``with`` or ``locked``) emits
:class:`OwnerDiedWarning`, because the data it guarded may be half-updated; an atomic int or bool is always consistent (one aligned store). If the owner
process itself is killed, multiprocessing's resource tracker unlinks the name once the
process tree has exited.

    >>> from asyncnet.atomic import SharedAtomicInt
    >>> with SharedAtomicInt(40) as n:
    ...     n.fetch_add(2), n.load()
    (40, 42)
"""

from __future__ import annotations

import mmap
import os
import struct
import weakref
from typing import Any, TypeVar

from asyncnet._shm import close_segment, new_segment, open_segment, unlink_segment
from asyncnet.atomic._intmath import as_int, check_bits, check_fits, wrap
from asyncnet.atomic._pshared import OwnerDiedWarning, PSharedMutex

__all__ = ["SharedMutex", "SharedAtomicInt", "SharedAtomicBool", "OwnerDiedWarning", "AtomicSegment"]

PREFIX = "asyncnet_atomic_"  # every segment name starts with this, anonymous ones go on with "<creator pid>_"
SIZE = 128
VALUE_OFFSET = 8
MUTEX_OFFSET = 64
_MAGIC = b"ANAT"
_HEADER = struct.Struct("<4sBB")
KIND_MUTEX, KIND_INT, KIND_BOOL = 1, 2, 3
KIND_NAMES = {KIND_MUTEX: "SharedMutex", KIND_INT: "SharedAtomicInt", KIND_BOOL: "SharedAtomicBool"}


def _finalize(mm: mmap.mmap, name: str | None, pid: int) -> None:
    try:
        mm.close()
    except BufferError:  # still exported (an op in flight at interpreter exit): leave the mapping
        pass
    if name is not None and os.getpid() == pid:  # a forked child never unlinks
        unlink_segment(name, tracked=True)


class AtomicSegment:
    """The segment of one shared primitive: ``create(kind, bits, name)`` or ``attach(name, kind)``.

    Layout (128 bytes): magic ``b"ANAT"`` | kind (1 byte) | bits (1 byte) | 2 spare | value slot
    (8 bytes, offset 8) | ... | robust process-shared mutex (offset 64). The magic is written
    last (:meth:`publish`), so a process attaching by name never sees a half-initialised segment.
    The creating handle owns the name: its ``close()`` (or garbage collection, or normal exit)
    unlinks it, and the resource tracker does if the creator is killed; attached handles
    never unlink on their own, so a child that crashes leaves nothing behind.
    """

    def __init__(self, mm: mmap.mmap, name: str, owner: bool, kind: int, bits: int) -> None:
        self.mm = mm
        self.name = name
        self.owner = owner
        self.kind = kind
        self.bits = bits
        self._finalizer = weakref.finalize(self, _finalize, mm, name if owner else None, os.getpid())

    @classmethod
    def create(cls, kind: int, bits: int, name: str | None = None) -> tuple[AtomicSegment, mmap.mmap]:
        """Create a new segment (random name when ``name`` is None); return it and its map.

        The caller initialises the payload, then calls :meth:`publish`.
        """
        if name is None:
            seg = new_segment(PREFIX, SIZE, track=True)
        else:
            try:
                seg = open_segment(name, create=True, size=SIZE, track=True)
            except FileExistsError:
                raise FileExistsError(f"a shared-memory segment named {name!r} already exists") from None
        return cls(seg.buf, seg.name, True, kind, bits), seg.buf

    def publish(self) -> None:
        """Write the header (last), making the segment visible to ``attach``."""
        self.mm[4:6] = bytes([self.kind, self.bits])
        self.mm[0:4] = _MAGIC

    @classmethod
    def attach(cls, name: str, kind: int) -> AtomicSegment:
        """Map the existing segment ``name``; check it holds a primitive of ``kind``."""
        try:
            seg = open_segment(name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no shared {KIND_NAMES[kind]} named {name!r} (it was never created, or its owner unlinked it)"
            ) from None
        if seg.size < SIZE:
            close_segment(seg)
            raise ValueError(f"shared-memory segment {name!r} is not an asyncnet atomic ({seg.size} bytes)")
        magic, got_kind, bits = _HEADER.unpack_from(seg.buf, 0)
        if magic != _MAGIC or got_kind != kind:
            close_segment(seg)
            found = KIND_NAMES.get(got_kind, "something else") if magic == _MAGIC else "not an asyncnet atomic"
            raise TypeError(f"shared-memory segment {name!r} holds {found}, expected a {KIND_NAMES[kind]}")
        return cls(seg.buf, name, False, kind, bits)

    def close(self) -> None:
        """Unmap (and, for the owner, unlink) now; idempotent."""
        self._finalizer()

    def unlink(self) -> None:
        """Remove the name now (any handle may); mappings stay valid until closed."""
        unlink_segment(self.name, tracked=self.owner)
        if self.owner:  # the finalizer must not unlink (or unregister) a second time
            mm = self.mm
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _finalize, mm, None, 0)


_S = TypeVar("_S", bound="_SharedPrimitive")


class _ClosedLock:
    """Stands in for the mutex of a closed handle: every use raises ``ValueError``."""

    def __init__(self, what: str) -> None:
        self.what = what

    def _fail(self, *args: object) -> bool:
        raise ValueError(f"operation on a closed {self.what}")

    lock = try_lock = unlock = _fail


def _attach(cls: type[_S], name: str) -> _S:
    """Unpickling target: open the primitive by name in the receiving process."""
    return cls.attach(name)


class _SharedPrimitive:
    """Segment lifetime, naming, pickling and context management shared by the three kinds."""

    _KIND = 0
    _WARN_OWNER_DIED = False
    _closed = True  # until _setup succeeds

    def _setup(self, seg: AtomicSegment, init: bool) -> None:
        """Map the views of ``seg``; subclasses add their value view."""
        self._seg = seg
        self._views: list[memoryview] = []
        self._mx: Any = PSharedMutex(
            seg.mm, MUTEX_OFFSET, init=init, label=f"{type(self).__name__} {seg.name!r}", warn=self._WARN_OWNER_DIED
        )
        self._closed = False

    def _create(self, bits: int, name: str | None, initial: int | None) -> None:
        """Create, initialise and publish a new segment owned by this handle."""
        seg, _ = AtomicSegment.create(self._KIND, bits, name)
        self._seg = seg
        try:
            self._setup(seg, init=True)
            if initial is not None:
                self._v[0] = initial
        except BaseException:
            self._release_views()
            seg.close()
            raise
        seg.publish()

    @classmethod
    def attach(cls: type[_S], name: str) -> _S:
        """Open the existing primitive called ``name`` (created by any process)."""
        self = cls.__new__(cls)
        self._setup(AtomicSegment.attach(name, cls._KIND), init=False)
        return self

    @property
    def name(self) -> str:
        """The segment name (without the leading slash); pass it to ``attach``."""
        return self._seg.name

    @property
    def owner(self) -> bool:
        """True for the handle that created the segment (its close() also unlinks it)."""
        return self._seg.owner

    @property
    def closed(self) -> bool:
        return self._closed

    def _release_views(self) -> None:
        mx = getattr(self, "_mx", None)
        self._mx = _ClosedLock(type(self).__name__)
        if isinstance(mx, PSharedMutex):
            mx.detach()
        for v in reversed(getattr(self, "_views", [])):
            v.release()
        self._views = []
        self._closed = True

    def close(self) -> None:
        """Release this handle's mapping (the owner's close also unlinks); idempotent."""
        if not self._closed:
            self._release_views()
            self._seg.close()

    def unlink(self) -> None:
        """Remove the name from the system now; existing handles keep working until closed."""
        self._seg.unlink()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, tuple[Any, str]]:
        if self._closed:
            raise ValueError(f"cannot pickle a closed {type(self).__name__}")
        return (_attach, (type(self), self._seg.name))

    def _view(self, fmt: str, nbytes: int) -> memoryview:
        base = memoryview(self._seg.mm)
        part = base[VALUE_OFFSET : VALUE_OFFSET + nbytes]
        typed = part.cast(fmt)
        self._views += [base, part, typed]
        return typed


class SharedMutex(_SharedPrimitive):
    """A mutex shared between processes (and threads), robust to a holder that dies.

    Unlike ``threading.Lock``, only the thread that acquired it may release it. ``with m:``
    locks it (it does not close it: call ``close()``, or use ``contextlib.closing``).

        >>> m = SharedMutex()
        >>> with m:
        ...     m.locked()
        True
        >>> m.close()
    """

    _KIND = KIND_MUTEX
    _WARN_OWNER_DIED = True

    def __init__(self, *, name: str | None = None) -> None:
        self._create(0, name, None)

    def acquire(self, timeout: float | None = None) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (None: as long as needed)."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        return self._mx.lock(timeout)

    def release(self) -> None:
        """Release the lock (``RuntimeError`` if this thread does not hold it)."""
        self._mx.unlock()

    def locked(self) -> bool:
        """True if any thread of any process holds it (a snapshot)."""
        if self._mx.try_lock():
            self._mx.unlock()
            return False
        return True

    def __enter__(self) -> SharedMutex:
        self._mx.lock(None)
        return self

    def __exit__(self, *exc: object) -> None:
        self._mx.unlock()

    def __repr__(self) -> str:
        return f"<SharedMutex {self._seg.name!r}{' closed' if self.closed else ''}>"


class SharedAtomicInt(_SharedPrimitive):
    """A signed 32- or 64-bit integer in shared memory with atomic operations.

    Same overflow rule as :class:`~asyncnet.atomic.AtomicInt`: arithmetic wraps (two's
    complement), explicitly stored values must fit.

        >>> n = SharedAtomicInt(5, bits=32)
        >>> n.compare_exchange(5, 6), n.exchange(1), n.load()
        ((True, 5), 6, 1)
        >>> n.close()
    """

    _KIND = KIND_INT

    def __init__(self, value: int = 0, bits: int = 64, *, name: str | None = None) -> None:
        check_bits(bits)
        v = check_fits(value, bits, "initial value")
        self._create(bits, name, v)

    def _setup(self, seg: AtomicSegment, init: bool) -> None:
        super()._setup(seg, init)
        self._bits = seg.bits
        self._half = 1 << (seg.bits - 1)
        self._v = self._view("i" if seg.bits == 32 else "q", seg.bits // 8)

    @property
    def bits(self) -> int:
        return self._bits

    def load(self) -> int:
        """Return the current value."""
        mx = self._mx
        mx.lock()
        try:
            return self._v[0]
        finally:
            mx.unlock()

    def store(self, value: int) -> None:
        """Set the value (``OverflowError`` if it does not fit)."""
        v = check_fits(value, self._bits)
        mx = self._mx
        mx.lock()
        try:
            self._v[0] = v
        finally:
            mx.unlock()

    def fetch_add(self, delta: int) -> int:
        """Add ``delta`` (wrapping) and return the previous value."""
        d = delta if type(delta) is int else as_int(delta, "delta")
        half = self._half
        mx, v = self._mx, self._v
        mx.lock()
        try:
            old = v[0]
            new = old + d
            v[0] = new if -half <= new < half else wrap(new, self._bits)
        finally:
            mx.unlock()
        return old

    def add_fetch(self, delta: int) -> int:
        """Add ``delta`` (wrapping) and return the new value."""
        d = delta if type(delta) is int else as_int(delta, "delta")
        half = self._half
        mx, v = self._mx, self._v
        mx.lock()
        try:
            new = v[0] + d
            if not -half <= new < half:
                new = wrap(new, self._bits)
            v[0] = new
        finally:
            mx.unlock()
        return new

    def exchange(self, value: int) -> int:
        """Set the value and return the previous one."""
        new = check_fits(value, self._bits)
        mx, v = self._mx, self._v
        mx.lock()
        try:
            old = v[0]
            v[0] = new
        finally:
            mx.unlock()
        return old

    def compare_exchange(self, expected: int, desired: int) -> tuple[bool, int]:
        """If the value equals ``expected`` set it to ``desired``; return (swapped, old value)."""
        e = as_int(expected, "expected")
        d = check_fits(desired, self._bits, "desired")
        mx, v = self._mx, self._v
        mx.lock()
        try:
            old = v[0]
            if old == e:
                v[0] = d
                return True, old
        finally:
            mx.unlock()
        return False, old

    def __repr__(self) -> str:
        value = "closed" if self.closed else self.load()
        return f"<SharedAtomicInt {self._seg.name!r} bits={self._bits} value={value}>"


class SharedAtomicBool(_SharedPrimitive):
    """A boolean flag in shared memory; ``set_if`` never clears it (a cross-process stop flag).

    >>> stop = SharedAtomicBool()
    >>> stop.set_if(True), stop.test_and_set()
    (True, True)
    >>> stop.close()
    """

    _KIND = KIND_BOOL

    def __init__(self, value: bool = False, *, name: str | None = None) -> None:
        self._create(8, name, 1 if value else 0)

    def _setup(self, seg: AtomicSegment, init: bool) -> None:
        super()._setup(seg, init)
        self._v = self._view("B", 1)

    def load(self) -> bool:
        """Return the current value."""
        mx = self._mx
        mx.lock()
        try:
            return self._v[0] != 0
        finally:
            mx.unlock()

    def store(self, value: bool) -> None:
        """Set the value."""
        b = 1 if value else 0
        mx = self._mx
        mx.lock()
        try:
            self._v[0] = b
        finally:
            mx.unlock()

    def set_if(self, cond: object) -> bool:
        """Set the flag to True if ``cond`` is truthy (never clears it); return the new value."""
        if cond:
            self.store(True)
            return True
        return self.load()

    def test_and_set(self) -> bool:
        """Set the flag to True and return its previous value."""
        mx, v = self._mx, self._v
        mx.lock()
        try:
            old = v[0] != 0
            v[0] = 1
        finally:
            mx.unlock()
        return old

    def __bool__(self) -> bool:
        return self.load()

    def __repr__(self) -> str:
        value = "closed" if self.closed else self.load()
        return f"<SharedAtomicBool {self._seg.name!r} value={value}>"
