"""Intra-op threads kept within the cores: executor workers x BLAS (and torch) threads <= cores.

Every executor worker thread calls into BLAS, and by default each BLAS call runs one thread per
core. With W workers that is W x cores threads on ``cores`` cores, and OpenBLAS's spinning
threads then collapse throughput (measured here: a 2-thread sync run of a 1024-wide MLP fell
from 4,820 to 109 samples/s). So the process keeps a budget:

* every live worker pool *claims* its size in workers (:func:`claim_threads`); the intra-op
  thread count is ``max(1, process_cores() // workers)``;
* an explicit request (a net's ``intra_op_threads``, ``asyncnet train --threads N``) is a claim
  with a thread count; it wins over the computed one (the smallest, when several are live); a
  claim may also set a ceiling (``at_most``) for the computed count (the trainers' share);
* torch's intra-op pool gets one thread unless a count is asked for explicitly: its OpenMP
  threads spin, and beside the executor's threads that collapses throughput (measured);
* the count never rises above what the process had before the first claim, so a user's
  ``OPENBLAS_NUM_THREADS=1`` stays an upper bound; when the last claim goes the original
  settings come back;
* ``process_cores()`` is the cores this process may use: its CPU affinity, divided by
  torchrun's ``LOCAL_WORLD_SIZE`` when it is one of several ranks on a host, or what
  :func:`set_process_cores` said (the trainers' worker processes say ``cores // workers``).

BLAS and OpenMP libraries are driven through threadpoolctl (BLAS only: torch's OpenMP is
torch's business); torch's intra-op pool through ``torch.set_num_threads``, when torch is
imported. Nothing imports torch. Example::

    >>> claim = claim_threads(workers=process_cores())     # as many workers as cores
    >>> intra_op_threads()
    1
    >>> claim.release()
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = [
    "ThreadClaim",
    "claim_threads",
    "follow_torch_threads",
    "intra_op_threads",
    "process_cores",
    "set_process_cores",
]

_lock = threading.Lock()
_claims: dict[int, tuple[int, int | None, int | None]] = {}  # id -> (workers, explicit threads, at most)
_next_id = 0
_original: dict[str, Any] | None = None  # settings before the first claim, restored after the last
_applied: int | None = None
_state: tuple[int, bool, bool] | None = None  # what _set last applied: (count, explicit, torch seen)
_cores_override: int | None = None
# torch keeps its intra-op count per thread (OpenMP), read once when a thread first calls into
# torch: each change made here is numbered, so a long-lived worker thread can take it up
_torch_change = 0
_torch_count: int | None = None
_follower = threading.local()


class ThreadClaim:
    """A live claim on the thread budget; :meth:`release` (idempotent) gives it back."""

    __slots__ = ("_id",)

    def __init__(self, claim_id: int):
        self._id: int | None = claim_id

    def release(self) -> None:
        with _lock:
            if self._id is None:
                return
            _claims.pop(self._id, None)
            self._id = None
            _apply_locked()

    def __enter__(self) -> ThreadClaim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def process_cores() -> int:
    """The cores this process may use (see the module docstring)."""
    if _cores_override is not None:
        return _cores_override
    cores = _affinity()
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 1:
        cores = max(1, cores // int(local))
    return cores


def set_process_cores(n: int | None) -> None:
    """Say this process may use ``n`` cores (None: back to the default); re-applies the budget.

    >>> set_process_cores(1); process_cores()
    1
    >>> set_process_cores(None)
    """
    global _cores_override
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"expected a positive number of cores or None, got {n!r}")
    with _lock:
        _cores_override = n
        _apply_locked()


def claim_threads(workers: int = 0, threads: int | None = None, at_most: int | None = None) -> ThreadClaim:
    """Claim ``workers`` executor threads, an explicit intra-op ``threads`` count, and/or a
    ceiling ``at_most`` that the computed count (never an explicit one) stays under."""
    global _next_id
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"expected a non-negative number of workers, got {workers!r}")
    for name, v in (("intra-op thread count", threads), ("ceiling", at_most)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"expected a positive {name} or None, got {v!r}")
    with _lock:
        _next_id += 1
        _claims[_next_id] = (workers, threads, at_most)
        _apply_locked()
        return ThreadClaim(_next_id)


def torch_loaded() -> None:
    """Apply the live claims to torch's intra-op pool: call after importing torch lazily (a kernel
    that chose torch's implementation), so its threads stay within the budget from the first call.

    >>> torch_loaded()  # no claim live, or torch not imported: nothing to do
    """
    with _lock:
        if _claims and _original is not None and _original["torch"] is None:
            _state_reset()
            _apply_locked()


def _state_reset() -> None:
    global _state
    _state = None


def intra_op_threads() -> int | None:
    """The intra-op thread count the budget set now (None: no claim is live, library defaults)."""
    return _applied


def _explicit_locked() -> int | None:
    explicit = [t for _, t, _ in _claims.values() if t is not None]
    return min(explicit) if explicit else None


def _computed_locked(cap: int | None) -> int:
    workers = sum(w for w, _, _ in _claims.values())
    limits = [m for _, _, m in _claims.values() if m is not None]
    return max(1, min([process_cores() // max(1, workers), *limits, *([cap] if cap else [])]))


def _apply_locked() -> None:
    global _original, _applied, _state
    if not _claims:
        if _original is not None:
            _set(_original["blas"], _original["torch"])
            _original = None
        _applied = _state = None
        return
    if _original is None:
        _original = {"blas": _blas_threads(), "torch": None}
    if _original["torch"] is None:  # torch may be imported after the first claim
        _original["torch"] = _torch_threads()
    explicit = _explicit_locked()
    n = explicit if explicit is not None else _computed_locked(_original["blas"])
    # torch's OpenMP threads spin, and beside the executor's own threads that collapses
    # throughput (measured: a 64-128-10 MLP on torch tensors 670 samples/s with 2 torch threads,
    # 21,566 with 1; a 1024-wide one 3,217 vs 4,209): one torch thread unless asked for more.
    key = (n, explicit is not None, _original["torch"] is not None)
    if key != _state:
        _set(n, n if explicit is not None else 1)
        _state = key
    _applied = n


def _controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    return ThreadpoolController()  # rescans: libraries loaded since the last call are seen


def _blas_threads() -> int | None:
    c = _controller()
    if c is None:
        return None
    counts = [lib.num_threads for lib in c.select(user_api="blas").lib_controllers]
    return max(counts) if counts else None


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None and hasattr(torch, "get_num_threads") else None


def _set(blas: int | None, torch_threads: int | None) -> None:
    c = _controller()
    if c is not None and blas is not None:
        for lib in c.select(user_api="blas").lib_controllers:
            # threadpoolctl lets only the first thread that sets a pthreads OpenBLAS pool set it
            # again (others "silently do nothing"); our own lock serializes every change here,
            # so take the control for this call and hand it back.
            release = getattr(type(lib), "clear_controlling_thread", None)
            if release is not None:
                release(force=True)
            lib.set_num_threads(blas)
            if release is not None:
                release(force=True)
    torch = sys.modules.get("torch")
    if torch is not None and torch_threads is not None and hasattr(torch, "set_num_threads"):
        global _torch_change, _torch_count
        torch.set_num_threads(torch_threads)
        _torch_count, _torch_change = torch_threads, _torch_change + 1


def follow_torch_threads() -> None:
    """In a long-lived worker thread, before it runs ops: take up torch's intra-op thread count as
    this module last set it. torch reads the count into each thread once, when the thread first
    calls into torch, so a worker that used torch before a claim changed the count would keep
    the old one (two workers each running torch kernels on two OpenMP threads, on two cores).
    A read and a compare when nothing changed.

    >>> follow_torch_threads()  # nothing set since this thread last looked: nothing to do
    """
    change = _torch_change
    if getattr(_follower, "change", 0) == change:
        return
    _follower.change = change
    torch = sys.modules.get("torch")
    if torch is not None and _torch_count is not None:
        torch.set_num_threads(_torch_count)
