"""The workspace: a thread-safe store of named blobs, and the nets created against it.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("x", np.arange(3.0))
    >>> net = an.Net("double")
    >>> _ = net.Scale("x", "y", scale=2.0)
    >>> ws.run_net_once(net)
    >>> ws.fetch("y")
    array([0., 2., 4.])

Blobs hold numpy arrays, torch tensors or opaque objects (mutexes, atomics, gradient syncs).
Executors read and write the blob dict directly: single dict reads and writes are atomic in
CPython, with or without the GIL, so the hot path takes no workspace lock; the lock guards
the operations that look at more than one entry (listing, reset, net creation).
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.core.netbase import NetBase, RunHandle, net_class
from asyncnet.core.operator import build_operators
from asyncnet.errors import BlobNotFoundError, ExecutionError, NetDefinitionError, near_names

if TYPE_CHECKING:
    from asyncnet.core.net import Net

__all__ = ["Workspace"]


def _as_def(net: Net | NetDef) -> NetDef:
    if isinstance(net, NetDef):
        return net
    snapshot = getattr(net, "snapshot", None)
    if snapshot is None:
        raise TypeError(f"expected a Net or NetDef, got {type(net).__name__}")
    return snapshot()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a net is built: its passes over the millions of new (acyclic)
    objects of a large net cost as much as the building itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Workspace:
    """Named blobs plus the nets that run against them. Safe to share between threads."""

    def __init__(self) -> None:
        self._blobs: dict[str, Any] = {}
        self._nets: dict[str, NetBase] = {}
        self._lock = threading.RLock()

    # -- blobs ---------------------------------------------------------------------------
    def feed(self, name: str, value: Any, device: str | None = None, library: str | None = None) -> None:
        """Store ``value`` under ``name``. Lists and Python scalars become numpy arrays;
        arrays, tensors and other objects are stored as they are (not copied). ``device``
        (``"cpu"``, ``"cuda:1"``) and ``library`` (``"numpy"``, ``"torch"``) place it first, see
        :func:`asyncnet.tensor.place` (on the CPU a change of library shares memory; a move copies)::

            >>> import numpy as np, asyncnet as an
            >>> ws = an.Workspace(); ws.feed("x", np.ones(2), device="cpu", library="torch")
            >>> type(ws.fetch("x")).__module__, ws.fetch("x", host=True)
            ('torch', array([1., 1.]))
        """
        if type(value) is np.ndarray and device is None and library is None and type(name) is str and name:
            self._blobs[name] = value  # the common case first: a trainer feeds two arrays every step
            return
        if not isinstance(name, str) or not name:
            raise TypeError(f"blob name must be a non-empty string, got {name!r}")
        if isinstance(value, (list, tuple, int, float, bool, np.generic)):
            value = np.asarray(value)
        if device is not None or library is not None:
            from asyncnet.tensor.namespace import device_of
            from asyncnet.tensor.place import place

            value = place(value, device if device is not None else device_of(value), library)
        self._blobs[name] = value

    def fetch(self, name: str, copy: bool = False, host: bool = False) -> Any:
        """The value of blob ``name`` as stored (a copy of an array or tensor when ``copy``; with
        ``host`` a numpy array on the host, a new one for a torch tensor); unknown names raise
        :class:`~asyncnet.BlobNotFoundError` suggesting near names."""
        try:
            value = self._blobs[name]
        except KeyError:
            raise BlobNotFoundError(name, list(self._blobs)) from None
        if isinstance(value, np.ndarray):
            return value.copy() if copy else value
        if (copy or host) and "torch" in sys.modules:
            from asyncnet.tensor.namespace import is_torch, to_numpy

            if is_torch(value):
                return to_numpy(value) if host else value.clone()
        return value

    def has(self, name: str) -> bool:
        """Whether blob ``name`` exists."""
        return name in self._blobs

    def blobs(self) -> list[str]:
        """Sorted names of every blob."""
        with self._lock:
            return sorted(self._blobs)

    def remove(self, name: str) -> None:
        """Delete blob ``name`` (raises :class:`~asyncnet.BlobNotFoundError` if absent)."""
        try:
            del self._blobs[name]
        except KeyError:
            raise BlobNotFoundError(name, list(self._blobs)) from None

    def reset(self) -> None:
        """Remove every blob and close every net."""
        with self._lock:
            for net in self._nets.values():
                net.close()
            self._nets.clear()
            self._blobs.clear()

    def __contains__(self, name: object) -> bool:
        return name in self._blobs

    def __iter__(self) -> Iterator[str]:
        return iter(self.blobs())

    def __len__(self) -> int:
        """The number of blobs (as ``len(workspace.blobs)`` in Caffe2)."""
        return len(self._blobs)

    def __bool__(self) -> bool:
        return True  # a workspace is an object, not a container: an empty one is not false

    @property
    def blob_dict(self) -> dict[str, Any]:
        """The live blob dict executors run against (advanced use)."""
        return self._blobs

    # -- nets ------------------------------------------------------------------------------
    def instantiate(self, net: Net | NetDef) -> NetBase:
        """Validate ``net`` (once: each op against its schema) and build an executor instance
        for it, without registering it."""
        with _gc_paused():
            net_def = _as_def(net)
            cls = net_class(net_def.type)
            return cls(net_def, build_operators(net_def, self._blobs), self._blobs)

    def create_net(self, net: Net | NetDef, overwrite: bool = False) -> NetBase:
        """Validate and instantiate ``net`` under its name; every op is checked against its
        schema here, so a bad net fails now with :class:`~asyncnet.NetDefinitionError`."""
        instance = self.instantiate(net)
        with self._lock:
            old = self._nets.get(instance.name)
            if old is not None and not overwrite:
                instance.close()
                raise NetDefinitionError(
                    f"a net named {instance.name!r} already exists; pass overwrite=True to replace it", "name"
                )
            self._nets[instance.name] = instance
        if old is not None:
            old.close()
        return instance

    def net(self, name: str) -> NetBase:
        """The created net called ``name``."""
        try:
            return self._nets[name]
        except KeyError:
            near = near_names(name, self._nets)
            hint = f" Did you mean {', '.join(repr(n) for n in near)}?" if near else ""
            raise ExecutionError(f"no net named {name!r} was created in this workspace.{hint}") from None

    def nets(self) -> list[str]:
        """Sorted names of the created nets, including those a plan created (Caffe2's ``Nets()``)."""
        with self._lock:
            return sorted(self._nets)

    def run_net(self, name: str, num_iter: int = 1, timeout: float | None = None) -> None:
        """Run created net ``name`` ``num_iter`` times; the first failure is raised.

        ``timeout`` bounds all the iterations together (TimeoutError when it expires)."""
        if isinstance(num_iter, bool) or not isinstance(num_iter, int) or num_iter < 0:
            raise ValueError(f"num_iter must be a non-negative int, got {num_iter!r}")
        instance = self.net(name)
        if timeout is None:
            for _ in range(num_iter):
                instance.run()
            return
        deadline = time.monotonic() + timeout
        for i in range(num_iter):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"net {name!r}: {i} of {num_iter} iterations done when the {timeout:g} s timeout expired"
                )
            instance.run(left)

    def run_net_async(self, name: str) -> RunHandle:
        """Start one run of created net ``name``; returns a handle with ``wait(timeout)``, ``done()``, ``cancel()``."""
        return self.net(name).run_async()

    def run_net_once(self, net: Net | NetDef, timeout: float | None = None) -> None:
        """Instantiate ``net``, run it once and discard the instance."""
        instance = self.instantiate(net)
        try:
            instance.run(timeout)
        finally:
            instance.close()

    def run_operator_once(self, op: OperatorDef) -> None:
        """Run a single :class:`OperatorDef` against the workspace."""
        self.run_net_once(NetDef(op.name or op.type, ops=[op]))

    def run_plan(self, plan: Any, timeout: float | None = None) -> None:
        """Run an execution :class:`~asyncnet.Plan`, or a bare :class:`~asyncnet.ExecutionStep`
        (as Caffe2's RunPlan does), against this workspace. The nets the plan creates stay
        in the workspace under their names (see :meth:`nets`)."""
        if not callable(getattr(plan, "run", None)):
            raise TypeError(f"expected a Plan or an ExecutionStep, got {type(plan).__name__}")
        plan.run(self, timeout=timeout)

    def run_plan_async(self, plan: Any, timeout: float | None = None) -> Any:
        """Start a Plan (or a bare ExecutionStep) on a thread of its own (Caffe2's
        ``RunPlanInBackground``); returns a :class:`~asyncnet.exec.plan.PlanHandle` with
        ``wait(timeout)``, ``done()``, ``cancel()``, ``is_done()``, ``is_succeeded()``."""
        if not callable(getattr(plan, "run_async", None)):
            raise TypeError(f"expected a Plan or an ExecutionStep, got {type(plan).__name__}")
        return plan.run_async(self, timeout=timeout)

    def close(self) -> None:
        """Close every net (their executor pools); blobs stay."""
        with self._lock:
            for net in self._nets.values():
                net.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
