"""In-process atomics: ``Mutex``, ``AtomicInt`` and ``AtomicBool``.

Every operation takes a ``threading.Lock``, so each one is atomic with respect to every
other thread even without the GIL (free-threaded builds): nothing here relies on the GIL
making a read-modify-write atomic. These objects live in one process; they refuse to be
pickled (use :mod:`asyncnet.atomic.shared` to share state between processes).

    >>> from asyncnet.atomic import AtomicInt, Mutex
    >>> counter = AtomicInt(0, bits=32)
    >>> counter.fetch_add(5), counter.load()
    (0, 5)
    >>> with Mutex():
    ...     pass
"""

from __future__ import annotations

import threading
from typing import NoReturn

from asyncnet.atomic._intmath import as_int, check_bits, check_fits, wrap

__all__ = ["Mutex", "AtomicInt", "AtomicBool"]


def _timeout_arg(timeout: float | None) -> float:
    """Map ``acquire``'s timeout to ``threading.Lock.acquire``'s (-1 = wait forever)."""
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
    return timeout


def _refuse_pickle(obj: object) -> NoReturn:
    name = type(obj).__name__
    raise TypeError(
        f"{name} is an in-process object and cannot be pickled; "
        f"use asyncnet.atomic.Shared{name} to share it between processes"
    )


class Mutex:
    """A non-reentrant mutual-exclusion lock (the blob ``CreateMutex`` makes).

    ``acquire(timeout=None)`` returns True when the lock was taken, False on timeout
    (``timeout=0`` only tries). Any thread may ``release`` it, as with ``threading.Lock``.

        >>> m = Mutex()
        >>> m.acquire(timeout=1.0), m.locked()
        (True, True)
        >>> m.release()
    """

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, timeout: float | None = None) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (None: wait as long as needed)."""
        return self._lock.acquire(True, _timeout_arg(timeout))

    def release(self) -> None:
        """Release the lock; ``RuntimeError`` if it is not held."""
        try:
            self._lock.release()
        except RuntimeError:
            raise RuntimeError("Mutex.release(): the mutex is not locked") from None

    def locked(self) -> bool:
        """True if some thread holds the lock (a snapshot: it may change at once)."""
        return self._lock.locked()

    def __enter__(self) -> Mutex:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def __reduce__(self) -> NoReturn:
        _refuse_pickle(self)

    def __repr__(self) -> str:
        return f"<Mutex {'locked' if self.locked() else 'unlocked'}>"


class AtomicInt:
    """A signed 32- or 64-bit integer with atomic read-modify-write operations.

    Overflow rule: ``fetch_add``/``add_fetch`` wrap around in two's complement, like C++
    ``std::atomic``; values stored explicitly (initial value, ``store``, ``exchange``,
    ``compare_exchange``'s ``desired``) must fit in ``bits`` bits, else ``OverflowError``.

        >>> a = AtomicInt(2**31 - 1, bits=32)
        >>> a.add_fetch(1)
        -2147483648
        >>> a.compare_exchange(-2147483648, 7)
        (True, -2147483648)
    """

    __slots__ = ("_lock", "_value", "_bits", "_half", "__weakref__")

    def __init__(self, value: int = 0, bits: int = 64) -> None:
        self._bits = check_bits(bits)
        self._half = 1 << (bits - 1)
        self._value = check_fits(value, bits, "initial value")
        self._lock = threading.Lock()

    @property
    def bits(self) -> int:
        """Width of the integer: 32 or 64."""
        return self._bits

    def load(self) -> int:
        """Return the current value."""
        with self._lock:
            return self._value

    def store(self, value: int) -> None:
        """Set the value (``OverflowError`` if it does not fit)."""
        v = check_fits(value, self._bits)
        with self._lock:
            self._value = v

    def fetch_add(self, delta: int) -> int:
        """Add ``delta`` (wrapping) and return the value from before the addition."""
        d = delta if type(delta) is int else as_int(delta, "delta")
        half = self._half
        with self._lock:
            old = self._value
            new = old + d
            self._value = new if -half <= new < half else wrap(new, self._bits)
        return old

    def add_fetch(self, delta: int) -> int:
        """Add ``delta`` (wrapping) and return the new value."""
        d = delta if type(delta) is int else as_int(delta, "delta")
        half = self._half
        with self._lock:
            new = self._value + d
            if not -half <= new < half:
                new = wrap(new, self._bits)
            self._value = new
        return new

    def exchange(self, value: int) -> int:
        """Set the value and return the previous one."""
        v = check_fits(value, self._bits)
        with self._lock:
            old, self._value = self._value, v
        return old

    def compare_exchange(self, expected: int, desired: int) -> tuple[bool, int]:
        """If the value equals ``expected`` set it to ``desired``; return (swapped, old value)."""
        e = as_int(expected, "expected")
        d = check_fits(desired, self._bits, "desired")
        with self._lock:
            old = self._value
            if old == e:
                self._value = d
                return True, old
        return False, old

    def __reduce__(self) -> NoReturn:
        _refuse_pickle(self)

    def __repr__(self) -> str:
        return f"AtomicInt({self.load()}, bits={self._bits})"


class AtomicBool:
    """A boolean flag with atomic operations (the blob ``CreateAtomicBool`` makes).

    ``set_if(cond)`` sets the flag when ``cond`` is true and never clears it: the stop-flag
    pattern of Caffe2's ``ConditionalSetAtomicBool``.

        >>> stop = AtomicBool()
        >>> stop.set_if(False), stop.test_and_set(), stop.load()
        (False, False, True)
    """

    __slots__ = ("_lock", "_value", "__weakref__")

    def __init__(self, value: bool = False) -> None:
        self._value = bool(value)
        self._lock = threading.Lock()

    def load(self) -> bool:
        """Return the current value."""
        with self._lock:
            return self._value

    def store(self, value: bool) -> None:
        """Set the value."""
        v = bool(value)
        with self._lock:
            self._value = v

    def set_if(self, cond: object) -> bool:
        """Set the flag to True if ``cond`` is truthy (never clears it); return the new value."""
        if cond:
            with self._lock:
                self._value = True
            return True
        return self.load()

    def test_and_set(self) -> bool:
        """Set the flag to True and return its previous value."""
        with self._lock:
            old, self._value = self._value, True
        return old

    def __bool__(self) -> bool:
        return self.load()

    def __reduce__(self) -> NoReturn:
        _refuse_pickle(self)

    def __repr__(self) -> str:
        return f"AtomicBool({self.load()})"
