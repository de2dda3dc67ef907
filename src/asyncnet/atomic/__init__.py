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

from asyncnet.atomic.local import AtomicBool, AtomicInt, Mutex
from asyncnet.atomic.shared import OwnerDiedWarning, SharedAtomicBool, SharedAtomicInt, SharedMutex

__all__ = [
    "Mutex",
    "AtomicInt",
    "AtomicBool",
    "SharedMutex",
    "SharedAtomicInt",
    "SharedAtomicBool",
    "OwnerDiedWarning",
]
