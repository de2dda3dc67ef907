"""Which error a failed group of workers raises: the first root cause, with the others attached.

>>> from asyncnet.errors import SyncAbortedError
>>> err = attach_errors({0: (1, SyncAbortedError("peer failed")), 1: (2, ValueError("bad batch"))})
>>> type(err).__name__, err.worker_id, sorted(err.worker_errors)
('ValueError', 1, [0, 1])
"""

from __future__ import annotations

from asyncnet.errors import SyncAbortedError

__all__ = ["AFTER_ABORT", "attach_errors", "follows_abort"]

AFTER_ABORT = "_asyncnet_after_abort"  # set on an error raised once its group was already aborted


def follows_abort(exc: BaseException) -> bool:
    """True for an error that only reports that a peer failed: a ``SyncAbortedError``, an
    error caused by one (an ``OperatorError`` around it), or one a worker raised after its group
    had been aborted (marked by the runner; a process's error crosses the pipe without its
    ``__cause__``)."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 20:
        if isinstance(e, SyncAbortedError) or getattr(e, AFTER_ABORT, False):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def attach_errors(errors: dict[int, tuple[int, BaseException]]) -> BaseException:
    """Pick the first root-cause error and attach all others to it.

    Root causes come before errors that follow an abort (they only say a peer failed, see
    :func:`follows_abort`), then time order.
    """
    order = sorted(errors.items(), key=lambda kv: (follows_abort(kv[1][1]), kv[1][0]))
    first_id, (_, first) = order[0]
    first.worker_id = first_id  # type: ignore[attr-defined]
    first.worker_errors = {wid: exc for wid, (_, exc) in sorted(errors.items())}  # type: ignore[attr-defined]
    notes = list(getattr(first, "__notes__", []))
    notes.append(f"raised in worker {first_id}")
    for wid, (_, exc) in order[1:]:
        notes.append(f"worker {wid} also failed: {type(exc).__name__}: {exc}")
    first.__notes__ = notes  # type: ignore[attr-defined]
    return first
