"""One exception hierarchy for the whole package.

Every error asyncnet raises on purpose derives from :class:`AsyncNetError`, so callers can
catch the whole family in one clause::

    >>> import asyncnet as an
    >>> try:
    ...     an.Workspace().fetch("missing")
    ... except an.AsyncNetError as e:
    ...     print(type(e).__name__)
    BlobNotFoundError

Messages say what was expected, what was found, and where.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = [
    "AsyncNetError",
    "NetDefinitionError",
    "OperatorError",
    "BlobNotFoundError",
    "ExecutionError",
    "NetBusyError",
    "SyncError",
    "SyncMismatchError",
    "SyncTimeoutError",
    "SyncAbortedError",
    "CheckpointError",
    "DeviceError",
    "TrainConfigError",
    "TrainingDivergedError",
    "near_names",
]


def near_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Return up to ``n`` names from ``candidates`` that look like ``name`` (for suggestions)."""
    pool = list(candidates)
    import difflib  # only when a name is not found

    found = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    if len(found) < n:
        lowered = name.lower()
        found += [c for c in pool if c not in found and lowered and lowered in c.lower()][: n - len(found)]
    return found


def _suggestion(name: str, candidates: Iterable[str]) -> str:
    near = near_names(name, candidates)
    return f" Did you mean {', '.join(repr(x) for x in near)}?" if near else ""


class AsyncNetError(Exception):
    """Base class of every error raised by asyncnet."""


class NetDefinitionError(AsyncNetError, ValueError):
    """A net, operator, argument or JSON document is malformed.

    Raised when a definition is loaded or a net is created, never halfway through a run.
    ``path`` names the bad field (for example ``ops[3].args.axis``) when it is known.
    """

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class OperatorError(AsyncNetError, RuntimeError):
    """An operator failed while running.

    Carries the op index, type, name and inputs; the original exception is chained as
    ``__cause__`` by the executor (``raise OperatorError(...) from exc``). It is also a
    ``RuntimeError``, what Caffe2's Python raises for a failing operator (its tests'
    ``assertRaises(RuntimeError)``).
    """

    def __init__(
        self,
        message: str,
        *,
        op_index: int | None = None,
        op_type: str | None = None,
        op_name: str | None = None,
        inputs: Sequence[str] = (),
        net_name: str | None = None,
    ):
        self.op_index = op_index
        self.op_type = op_type
        self.op_name = op_name
        self.inputs = list(inputs)
        self.net_name = net_name
        self.reason = message
        where = []
        if net_name:
            where.append(f"net {net_name!r}")
        if op_index is not None:
            where.append(f"op #{op_index}")
        if op_type:
            where.append(op_type + (f" {op_name!r}" if op_name else ""))
        if self.inputs:
            where.append(f"inputs {self.inputs}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class BlobNotFoundError(AsyncNetError, KeyError):
    """A blob name is not in the workspace; the message suggests near names."""

    def __init__(self, name: str, candidates: Iterable[str] = ()):
        self.name = name
        self.message = f"blob {name!r} not found in the workspace.{_suggestion(name, candidates)}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class ExecutionError(AsyncNetError):
    """A net or plan could not run (misuse of the executor rather than a failing op)."""


class NetBusyError(ExecutionError):
    """A second concurrent run of the same net instance was refused."""


class CheckpointError(AsyncNetError, ValueError):
    """A checkpoint file is missing, unreadable, or does not match the model."""


class DeviceError(AsyncNetError, ValueError):
    """A device that is malformed or absent here (``cuda`` without CUDA), or data on the wrong one."""


class TrainConfigError(AsyncNetError, ValueError):
    """A training configuration is invalid, alone or for its data set; raised before any step."""


class TrainingDivergedError(AsyncNetError, ArithmeticError):
    """The training loss stopped being a finite number; the message names the step and the
    setting to change."""


class SyncError(AsyncNetError):
    """Base class of gradient-synchronization failures."""


class SyncMismatchError(SyncError):
    """Workers passed gradients of different shapes or dtypes in the same round."""


class SyncTimeoutError(SyncError, TimeoutError):
    """Some workers did not arrive within the timeout; ``missing`` lists their ids."""

    def __init__(self, message: str, missing: Sequence[int] = ()):
        self.missing = list(missing)
        super().__init__(message)


class SyncAbortedError(SyncError):
    """The round was aborted because a peer failed or the group was shut down."""
