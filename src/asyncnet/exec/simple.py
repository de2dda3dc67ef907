"""The sequential executor (net type "simple"): ops in order, on the caller's thread.

The first failing op stops the run and raises its :class:`~asyncnet.OperatorError`; blobs
written by earlier ops stay. ``run_async`` runs to the end before it returns and hands back a
handle that is already done, so code written against the async API works with either type.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from asyncnet.core.defs import NetDef
from asyncnet.core.netbase import NetBase, call_done_callbacks, register_net_type
from asyncnet.core.operator import Operator
from asyncnet.errors import NetBusyError
from asyncnet.exec.pools import claim_net_threads
from asyncnet.tensor.route import is_routed, route_operators, shadow_cell
from asyncnet.tensor.shadow import Shadow

__all__ = ["SimpleNet", "DoneHandle", "shadow_of"]


class DoneHandle:
    """The handle of a run that has already ended; ``wait`` and ``result`` re-raise its error, if any.

    >>> h = DoneHandle()
    >>> h.add_done_callback(lambda handle: print("done:", handle.done()))
    done: True
    """

    __slots__ = ("_error",)

    def __init__(self, error: BaseException | None = None):
        self._error = error

    def wait(self, timeout: float | None = None) -> None:
        if self._error is not None:
            raise self._error

    def result(self, timeout: float | None = None) -> None:
        """As :meth:`wait` (a run has no value: its outputs are blobs)."""
        self.wait(timeout)

    def done(self) -> bool:
        return True

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(self)`` now (the run has ended); an exception in it is logged, not raised."""
        call_done_callbacks(self, (fn,))

    def cancel(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        """The error ``wait`` raises, or None."""
        return self._error

    def __repr__(self) -> str:
        return f"<DoneHandle {'failed' if self._error is not None else 'ok'}>"


class SimpleNet(NetBase):
    """Runs ops one after another on the calling thread (with the net's ``intra_op_threads``,
    when it sets them, claimed on the thread budget until :meth:`close`)."""

    def __init__(self, net_def: NetDef, operators: Sequence[Operator], blobs: MutableMapping[str, Any]):
        super().__init__(net_def, operators, blobs)
        route_operators(self.operators)  # each op on the library that runs it faster (torch CPU tensors)
        self._shadow = shadow_of(self.operators)
        claim = claim_net_threads(net_def)
        self._finalizer = None if claim is None else weakref.finalize(self, claim.release)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def run(self, timeout: float | None = None) -> None:
        self._claim()
        try:
            if self.recorder is None:
                blobs = self.blobs
                if self._shadow is not None and self._shadow.run_ops(blobs):
                    return
                for op in self.operators:
                    op.run(blobs)
            else:
                self._run_recorded()
        finally:
            self._release()

    def _run_recorded(self) -> None:
        blobs, record = self.blobs, self.recorder
        for op in self.operators:
            start = time.perf_counter()
            try:
                op.run(blobs)
            finally:
                record(op, start, time.perf_counter())  # type: ignore[misc]

    def run_async(self) -> DoneHandle:
        try:
            self.run()
        except NetBusyError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the caller through wait()
            return DoneHandle(exc)
        return DoneHandle()


def shadow_of(operators: Sequence[Operator]) -> Shadow | None:
    """The :class:`~asyncnet.tensor.shadow.Shadow` of a net whose ops are all routed or sync ops
    (:data:`~asyncnet.tensor.route.SYNC_OPS`; runs on torch CPU tensors then take numpy views
    once per run), else None."""
    if not operators or not all(is_routed(op.fn) or shadow_cell(op.fn) is not None for op in operators):
        return None
    from asyncnet.exec.specialize import external_inputs

    return Shadow(operators, external_inputs(operators))


register_net_type(("simple",), SimpleNet)
