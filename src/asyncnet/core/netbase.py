"""What every executor provides, and the table from net type names to executor classes.

Executors live in :mod:`asyncnet.exec` and register themselves here with
:func:`register_net_type`, so the core never imports them::

    register_net_type(("simple",), SimpleNet)
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from typing import Any, Protocol

from asyncnet.core.defs import NetDef
from asyncnet.core.operator import Operator
from asyncnet.errors import NetBusyError, NetDefinitionError

__all__ = [
    "NetBase",
    "RunHandle",
    "register_net_type",
    "net_class",
    "call_done_callbacks",
    "in_done_callback",
    "on_net_close",
    "close_operators",
]

_log = logging.getLogger(__name__)
_callback_state = threading.local()


class RunHandle(Protocol):
    """A run in flight, in the vocabulary of :class:`concurrent.futures.Future`.

    ``wait(timeout)`` / ``result(timeout)`` return when the run ended (raising its first error,
    or TimeoutError); ``done()``, ``cancel()``, ``exception()``; ``add_done_callback(fn)`` calls
    ``fn(handle)`` once, when the run is done (at once if it already is)."""

    def wait(self, timeout: float | None = None) -> None: ...
    def result(self, timeout: float | None = None) -> None: ...
    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    def exception(self) -> BaseException | None: ...
    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


def call_done_callbacks(handle: Any, callbacks: Iterable[Callable[[Any], object]]) -> None:
    """Call each ``fn(handle)``; an exception in one is logged (``asyncnet.core.netbase``), not raised.

    As in :mod:`concurrent.futures`, callbacks run on the thread that finished the run (or the
    caller's, when already done): keep them short.
    """
    _callback_state.depth = getattr(_callback_state, "depth", 0) + 1
    try:
        for fn in callbacks:
            try:
                fn(handle)
            except Exception:  # noqa: BLE001 - as concurrent.futures: a callback's error is logged, never raised
                _log.exception("exception calling done-callback %r of %r", fn, handle)
    finally:
        _callback_state.depth -= 1


def in_done_callback() -> bool:
    """Whether this thread is running a done-callback (a ``wait`` there must not wait on its own thread)."""
    return getattr(_callback_state, "depth", 0) > 0


_CLOSERS: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]] = weakref.WeakKeyDictionary()
_CLOSERS_LOCK = threading.Lock()


def on_net_close(ctx: Any, closer: Callable[[], None]) -> None:
    """Call ``closer()`` when the net holding the op of ``ctx`` (its ``OpContext``) is closed,
    for resources an op instance holds (nets it created, say). A closer runs once; one that
    raises is logged and the others still run.

    >>> import asyncnet as an
    >>> ws = an.Workspace(); net = an.Net("n"); _ = net.ConstantFill([], "x", shape=[1])
    >>> instance = ws.create_net(net); on_net_close(instance.operators[0].ctx, lambda: print("closed"))
    >>> ws.close()
    closed
    """
    with _CLOSERS_LOCK:
        _CLOSERS.setdefault(ctx, []).append(closer)


def close_operators(operators: Iterable[Operator]) -> None:
    """Run the closers registered with :func:`on_net_close` for ``operators`` (each once)."""
    for op in operators:
        with _CLOSERS_LOCK:
            closers = _CLOSERS.pop(op.ctx, ())
        for closer in closers:
            try:
                closer()
            except Exception:  # noqa: BLE001 - one failing closer must not keep the others open
                _log.exception("a closer of op %r failed", op)


def _closing_ops(close: Callable[..., Any]) -> Callable[..., Any]:
    """``close`` followed by :func:`close_operators` on the net's operators."""

    @functools.wraps(close)
    def wrapper(self: NetBase, *args: Any, **kwargs: Any) -> Any:
        try:
            return close(self, *args, **kwargs)
        finally:
            close_operators(self.operators)

    wrapper._closes_operators = True  # type: ignore[attr-defined]
    return wrapper


class NetBase:
    """A net instantiated in a workspace: its ops, bound to the workspace's blobs.

    Subclasses implement :meth:`run_async`; :meth:`run` is run-async plus wait. A net refuses a
    second concurrent run of itself with :class:`~asyncnet.NetBusyError`.
    """

    def __init__(self, net_def: NetDef, operators: Sequence[Operator], blobs: MutableMapping[str, Any]):
        self.definition = net_def
        self.name = net_def.name
        self.operators = list(operators)
        self.blobs = blobs
        self._busy = threading.Lock()
        self.recorder: Callable[[Operator, float, float], None] | None = None
        self.cancel_flag = threading.Event()  # what ops see as ctx.cancelled(); cleared by each run
        for op in self.operators:
            op.ctx.cancel_flag = self.cancel_flag

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every executor's ``close`` also closes what its ops hold (see :func:`on_net_close`)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("close")
        if own is not None and not getattr(own, "_closes_operators", False):
            cls.close = _closing_ops(own)  # type: ignore[method-assign]

    def _claim(self) -> None:
        if not self._busy.acquire(blocking=False):
            raise NetBusyError(f"net {self.name!r} is already running; a net instance runs one run at a time")
        if self.cancel_flag.is_set():
            self.cancel_flag.clear()

    def cancel(self) -> bool:
        """Cancel the run in flight (Caffe2's ``NetBase::Cancel``): its ops see
        ``ctx.cancelled()``; True if a run was in flight. The async executor also skips the
        chains not yet started (see :mod:`asyncnet.exec.scheduling`)."""
        if not self._busy.locked():
            return False
        self.cancel_flag.set()
        return True

    def _release(self) -> None:
        self._busy.release()

    def run(self, timeout: float | None = None) -> None:
        """Run every op once and wait for the end; the first failure is raised."""
        self.run_async().wait(timeout)

    def run_async(self) -> RunHandle:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release executor resources (pools owned by this net) and what its ops hold."""
        close_operators(self.operators)


_NET_TYPES: dict[str, type[NetBase]] = {}


def register_net_type(names: Sequence[str], cls: type[NetBase]) -> None:
    """Make net types ``names`` run with executor class ``cls``."""
    for n in names:
        _NET_TYPES[n] = cls


def net_class(net_type: str) -> type[NetBase]:
    """The executor class of ``net_type``; raises :class:`NetDefinitionError` when none is loaded."""
    try:
        return _NET_TYPES[net_type]
    except KeyError:
        raise NetDefinitionError(
            f"no executor is available for net type {net_type!r}; known: {sorted(_NET_TYPES)}", "type"
        ) from None
