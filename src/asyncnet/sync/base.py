"""The ``GradientSync`` protocol and its trivial implementation, ``LocalGradientSync``.

A gradient sync is one worker's handle on a group of data-parallel workers.
``sync_gradients(grads)`` blocks until every worker of the group made the same call, then
replaces ``grads`` in place with the mean over the workers. ``grads`` is a float numpy array, a
CPU torch tensor, or a list of them, treated as one flat bucket.

    >>> import numpy as np
    >>> g = np.array([1.0, 2.0])
    >>> LocalGradientSync().sync_gradients(g)
    >>> g
    array([1., 2.])
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from asyncnet.sync._bucket import as_list, is_torch_tensor

__all__ = ["GradientSync", "LocalGradientSync", "SyncWork", "DoneWork", "start_sync"]


@runtime_checkable
class GradientSync(Protocol):
    """What every backend provides (local, threaded, processes, torch.distributed)."""

    @property
    def is_distributed(self) -> bool:
        """True when more than one worker takes part."""
        ...

    @property
    def num_workers(self) -> int:
        """How many workers the group has."""
        ...

    @property
    def worker_id(self) -> int:
        """This worker's id (rank), ``0 <= worker_id < num_workers``."""
        ...

    def sync_gradients(self, grads: Any) -> None:
        """Replace ``grads`` in place with their mean over all workers."""
        ...

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        """Overwrite ``tensors`` in place on every worker with worker ``root``'s values."""
        ...

    def barrier(self) -> None:
        """Return once every worker of the group called ``barrier``."""
        ...

    def all_reduce_mean(self, values: Any) -> None:
        """Replace ``values`` (float64 figures such as an epoch's loss sum and sample count) in
        place with their mean over all workers: the same round as :meth:`sync_gradients`,
        named for figures rather than gradients."""
        ...


class LocalGradientSync:
    """The identity sync of a single worker: changes nothing and allocates nothing."""

    __slots__ = ()

    @property
    def is_distributed(self) -> bool:
        return False

    @property
    def num_workers(self) -> int:
        return 1

    @property
    def worker_id(self) -> int:
        return 0

    def sync_gradients(self, grads: Any) -> None:
        """The mean over one worker is the gradient itself: only the argument is checked."""
        for i, g in enumerate(as_list(grads)):
            if not (hasattr(g, "dtype") and hasattr(g, "shape")) and not is_torch_tensor(g):
                raise TypeError(f"gradient {i}: expected a numpy array or torch tensor, got {type(g).__name__}")
            floating = g.is_floating_point() if is_torch_tensor(g) else np.dtype(g.dtype).kind == "f"
            if not floating:  # as every other backend: an integer "gradient" is a caller's bug
                raise TypeError(f"gradient {i}: expected a floating-point dtype, got {g.dtype}")

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        if root != 0:
            raise ValueError(f"root must be 0 for a single worker, got {root}")

    def barrier(self) -> None:
        """A single worker waits for nobody."""

    def all_reduce_mean(self, values: Any) -> None:
        """The mean over one worker is ``values`` itself."""
        self.sync_gradients(values)

    def __repr__(self) -> str:
        return "LocalGradientSync()"


class SyncWork(Protocol):
    """A gradient sync in flight (torch's ``Work``): ``wait(timeout)`` returns once the
    gradients hold the mean, or raises (TimeoutError when ``timeout`` s passed first)."""

    def wait(self, timeout: float | None = None) -> None: ...

    def done(self) -> bool: ...


class DoneWork:
    """The work of a sync that already ended: the backends whose ``sync_gradients`` blocks."""

    __slots__ = ()

    def wait(self, timeout: float | None = None) -> None:
        return None

    def done(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "DoneWork()"


def start_sync(sync: GradientSync, grads: Any) -> SyncWork:
    """Start replacing ``grads`` with their mean over the workers and return its work handle.

    A backend with a ``start_sync_gradients`` method (torch.distributed: ``async_op=True``)
    returns while the reduction runs; any other runs ``sync_gradients`` now and returns a
    :class:`DoneWork`. Until ``wait`` returns, ``grads`` must be neither read nor written.

    >>> g = np.ones(2)
    >>> start_sync(LocalGradientSync(), g).wait(timeout=1.0)
    """
    start = getattr(sync, "start_sync_gradients", None)
    if start is not None:
        return start(grads)
    sync.sync_gradients(grads)
    return DoneWork()
