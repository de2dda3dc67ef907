"""Atomic primitives for threads (``local``) and processes (``shared``).

``Mutex``, ``AtomicInt`` and ``AtomicBool`` live in one process and are guarded by a
``threading.Lock``; ``SharedMutex``, ``SharedAtomicInt`` and ``SharedAtomicBool`` live in
POSIX shared memory, are guarded by a robust process-shared mutex, and pickle into spawned
processes. Neither kind relies on the GIL for atomicity. This package imports nothing from
``asyncnet.core``.

    >>> from asyncnet.atomic import AtomicInt
    >>> AtomicInt(1).add_fetch(1)
    2
"""

from typing import Any

from asyncnet.atomic.local import AtomicBool, AtomicInt, Mutex

_SHARED = ("SharedMutex", "SharedAtomicInt", "SharedAtomicBool", "OwnerDiedWarning")


def __getattr__(name: str) -> Any:
    """The shared-memory primitives load on first use (ctypes, POSIX shared memory)."""
    if name not in _SHARED:
        raise AttributeError(f"module 'asyncnet.atomic' has no attribute {name!r}")
    from asyncnet.atomic import shared

    value = getattr(shared, name)
    globals()[name] = value
    return value


__all__ = [
    "Mutex",
    "AtomicInt",
    "AtomicBool",
    "SharedMutex",
    "SharedAtomicInt",
    "SharedAtomicBool",
    "OwnerDiedWarning",
]
