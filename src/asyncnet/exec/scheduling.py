"""The asynchronous scheduling executor (net types "async_scheduling", "dag", "async_dag").

Policy
------
The net's ops form a dependency graph (:mod:`asyncnet.exec.graph`: blob hazards plus control
inputs, reduced) whose linear runs are grouped into *chains*. A chain is the unit of
scheduling: one thread runs it from its first op to its last with no scheduler in between, so
a chain of small ops costs barely more than the simple executor.

A run starts every root chain (no parents). When a chain ends, each child whose parents have
all ended becomes *ready*. The thread that ended the chain keeps one ready child and runs it
next (a continuation: no queue, no wake-up), and hands the others to the pool of their device
through a per-run ready queue, except *cheap* ones: a chain whose last run took less than
:data:`HANDOFF_MIN` seconds is kept too and run by this thread after the others. Waking another
thread costs tens of microseconds of latency, and two threads running Python bounce the GIL
at every kernel call that releases it; a branch of a few small ops (an Accuracy beside the
backward pass) ran about twice as slow handed off as run in line. A chain not yet measured
counts as costly, so the first run hands everything out. Roots follow the same rule: only
costly roots get pool tokens beyond the one a run needs when the caller does not help.

Where the measured work off the critical path is too small to pay for any of this, ``net.run()``
runs the whole net in line on the caller's thread, in op order, as the simple executor does:
:mod:`asyncnet.exec.inline` decides it per net, from the chains' costs and a timed trial.

A worker woken by a pool token drains the ready queue until it is empty, continuing through
children the same way. ``net.run()`` without a timeout lets the caller's thread take part
beside the ``num_workers`` pool threads (Caffe2's caller only waits): it takes root chains
itself instead of sleeping, and until the outcome is known it takes every chain queued later
(a hand-out wakes it), so it never idles while a chain waits in a queue for a busy pool
thread. Costly roots get pool tokens for all but the one the caller takes, up to the pool's size.

When an op raises, the run *stops*: chains not yet started are skipped (walked, not run, so
the bookkeeping still reaches its end), running ops finish (they see ``ctx.cancelled()``,
Caffe2's ``OperatorBase::Cancel``, and a blocking op returns early), and the error that happened
first in time is what ``wait`` raises. ``cancel()`` stops a run the same way. ``wait`` returns
as soon as the outcome is known: it then gives running ops a short grace period to end, but
an op that never ends cannot make it hang. The net is busy (refuses another run with
:class:`~asyncnet.NetBusyError`) until its last running op ended.

State
-----
Static, computed once when the net is created and never changed afterwards::

    chain_ops       list[list[Operator]]  each chain's ops, in order
    chain_children  list[list[int]]       chains waiting on each chain
    num_parents     list[int]             how many chains each chain waits on
    roots           list[int]             chains with no parents, in op order
    chain_pool      list[int]             index into ``pools`` of each chain's device pool
    pools           list[WorkerPool]      one leased pool per device key

Learned across runs (plain list writes, atomic under the GIL; a stale value costs only speed)::

    chain_last      list[float]           seconds the chain's last complete run took (inf: unknown)
    chain_cost      list[float]           the smaller of its last two (a preempted run is no sign)
    runs            int                   runs started; costs are measured in runs 1, 2 and every
                                          MEASURE_EVERY-th (two clock reads per chain otherwise saved)

Per run (a :class:`_Run`, reset by copying ``num_parents``)::

    waiting  list[int]          parents not yet ended, per chain; ready at 0
    ready    list[deque[int]]   per pool: chains ready to start that no thread took yet
    left     int                chains not yet ended or skipped; the run ends at 0
    stop     bool               set by the first error or cancel(); unstarted chains skip
    errors   list[(t, exc)]     failures with their ``perf_counter`` time
    lock     Lock               guards waiting, left, errors (held for a few list writes)
    decided  Event              the outcome is known: ended, first error, or cancel
    ended    Event              left reached 0: no op of this run is running
    callbacks list | None       (handle, fn) done-callbacks still to call; None once called
    wake     Event | None       set by every hand-out and by the outcome: wakes the helping caller
                                (None when the caller does not help)

Example::

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("x", np.ones(3))
    >>> net = an.Net("n", type="async_scheduling", num_workers=2)
    >>> a = net.Scale("x", "a", scale=2.0); b = net.Scale("x", "b", scale=3.0)
    >>> _ = net.Add([a, b], "y")
    >>> _ = ws.create_net(net)
    >>> h = ws.run_net_async("n"); h.wait(timeout=10)
    >>> ws.fetch("y")
    array([5., 5., 5.])
    >>> ws.close()
"""

from __future__ import annotations

import _signal  # signal's C module: signal.signal and getsignal convert to enums, 10x slower per run
import signal
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from asyncnet.core.defs import NetDef
from asyncnet.core.netbase import NetBase, call_done_callbacks, in_done_callback, register_net_type
from asyncnet.core.operator import Operator
from asyncnet.errors import ExecutionError, NetDefinitionError
from asyncnet.exec.graph import build_graph
from asyncnet.exec.inline import InlinePolicy, critical_path
from asyncnet.exec.pools import PoolLease, acquire_pool, activity, check_device, claim_net_threads, device_key
from asyncnet.exec.simple import shadow_of
from asyncnet.tensor import parallel
from asyncnet.tensor.route import route_operators
from asyncnet.tensor.streams import RunStreams, StreamBook
from asyncnet.tensor.threads import ThreadClaim

__all__ = ["AsyncSchedulingNet", "AsyncRunHandle", "SETTLE_GRACE", "HANDOFF_MIN"]

HANDOFF_MIN = 100e-6  # seconds: chains that ran faster are not worth waking another thread for
MEASURE_EVERY = 8  # runs: chain costs are measured in the first two runs and every 8th after
HELP_POLL = 1.0  # seconds: the helping caller re-checks the run this often (a hand-out or the outcome wakes it sooner)
SETTLE_GRACE = 1.0  # seconds wait() gives running ops to end after a failure or cancel
CLOSE_TIMEOUT = 10.0  # seconds close() waits for the running ops of a cancelled run and its pool threads

_perf = time.perf_counter
_STOP_SIGNALS = (int(signal.SIGINT), int(signal.SIGTERM))


class _Run:
    """The mutable state of one run (see the module docstring)."""

    __slots__ = (
        "net",
        "waiting",
        "ready",
        "left",
        "stop",
        "cancelled",
        "errors",
        "lock",
        "decided",
        "ended",
        "callbacks",
        "record",
        "measure",
        "gpu",
        "wake",
        "blobs",
        "shadow",
    )

    def __init__(self, net: AsyncSchedulingNet, caller_helps: bool = False):
        self.net = net
        self.waiting = net.num_parents.copy()
        self.ready: list[deque[int]] = [deque() for _ in net.pools]
        self.left = len(net.chain_ops)
        self.stop = False
        self.cancelled = False
        self.errors: list[tuple[float, BaseException]] = []
        self.lock = threading.Lock()
        self.decided = threading.Event()
        self.ended = threading.Event()
        self.callbacks: list[tuple[Any, Callable[[Any], object]]] | None = []
        self.record = net.recorder
        net.runs += 1
        # chain costs: sampled, and measured in every run while the in-line policy decides
        self.measure = net.runs <= 2 or net.runs % MEASURE_EVERY == 0 or net.policy.mode != "parallel"
        self.gpu = RunStreams() if net.streams is not None else None  # CUDA events of this run
        self.wake = threading.Event() if caller_helps else None  # a hand-out or the outcome wakes the helping caller
        self.blobs = net.blobs  # what the ops read and write: the workspace's blobs, or their shadow's arrays
        self.shadow: tuple[Any, ...] | None = None  # (arrays, kinds, back, armed cells, arrays as they began)


# -- the state machine, one step per function ------------------------------------------------


def start_run(net: AsyncSchedulingNet, caller_helps: bool) -> _Run:
    """Claim the net, reset the per-run state and queue the root chains."""
    if net.closed:
        raise ExecutionError(f"net {net.name!r} is closed")
    net._claim()
    run = net._current = _Run(net, caller_helps)
    if run.left == 0:
        end_run(run)
        return run
    if net._shadow is not None and run.gpu is None and run.record is None:
        take_shadow(run)
    for c in net.roots:
        run.ready[net.chain_pool[c]].append(c)
    helper = 1 if caller_helps else 0  # a helping caller runs one root of the first pool itself
    cost = net.chain_cost
    try:
        for p, q in enumerate(run.ready):
            if q:
                costly = sum(1 for c in q if cost[c] >= HANDOFF_MIN)  # cheap roots: one thread drains them
                for _ in range(min(len(q), net.pools[p].size + helper, max(costly, 1)) - helper):
                    net.pools[p].submit(drain, (run, p))
                helper = 0
    except ExecutionError as exc:  # a pool shut down (net closing, interpreter exit): fail the run
        fail(run, exc)  # and walk what no worker will take, so the run ends and frees the net
        for p, q in enumerate(run.ready):
            for c in _take_all(q):
                execute(run, c, p)
    return run


def take_shadow(run: _Run) -> None:
    """Run on numpy views of the net's torch CPU tensors (:mod:`asyncnet.tensor.shadow`): made
    once here, with the sync ops armed as an in-line run arms them; :func:`end_run` stores the
    written blobs back. A run whose inputs allow no shadow keeps the workspace's blobs."""
    shadow = run.net._shadow
    got = shadow.views(run.net.blobs)
    if got is None or shadow.plan(got[1]) is None:
        return
    arrays, kinds, back = got
    run.shadow = (arrays, kinds, back, shadow.arm(kinds, back), dict(arrays))
    run.blobs = arrays


def write_back(run: _Run) -> None:
    """Store what a run on the shadow wrote (all of it, or what the ops that ran wrote), disarm."""
    arrays, kinds, back, armed, before = run.shadow  # type: ignore[misc]
    run.shadow = None
    shadow, blobs = run.net._shadow, run.net.blobs
    try:
        if run.stop:
            shadow.write_back_changed(blobs, arrays, kinds, back, before)
        else:
            shadow.write_back(blobs, arrays, kinds, back)
    finally:
        for cell in armed:
            cell[0] = None


def drain(token: tuple[_Run, int]) -> None:
    """A pool worker's entry: take chains from this run's ready queue until it is empty."""
    run, p = token
    q = run.ready[p]
    previous = parallel.enter(run.net.offers[p])  # while it runs ops, an idle worker may take half a big product
    try:
        while True:
            try:
                c = q.popleft()
            except IndexError:
                return
            execute(run, c, p)
    except BaseException as exc:  # noqa: BLE001 - a bug here must not kill the worker or hang wait()
        fail(run, exc)
    finally:
        parallel.leave(previous)


def help_run(run: _Run) -> None:
    """The caller's thread takes ready chains from every queue until the outcome is known and
    no chain is queued; in between it sleeps until a hand-out (or the outcome) wakes it."""
    wake = run.wake
    assert wake is not None  # start_run(caller_helps=True) made it
    while True:
        wake.clear()  # before looking: a chain queued after the look sets it again
        took = False
        for p, q in enumerate(run.ready):
            if not q:
                continue
            previous = parallel.enter(run.net.offers[p])  # busy while it runs ops (not while it sleeps)
            try:
                while True:
                    try:
                        c = q.popleft()
                    except IndexError:
                        break
                    execute(run, c, p)
                    took = True
            finally:
                parallel.leave(previous)
        if took:
            continue
        if run.decided.is_set():
            return
        wake.wait(HELP_POLL)


def execute(run: _Run, c: int, p: int) -> None:
    """Run chain ``c``, then the ready children this thread keeps, until none is left.

    The op running is written to this thread's :class:`~asyncnet.exec.pools.Activity`, so a
    thread stuck in an op can be reported by name when its pool is shut down.
    """
    net = run.net
    chain_ops, blobs = net.chain_ops, run.blobs
    cost, last = net.chain_cost, net.chain_last
    act = activity()
    todo = [c]
    while todo:
        c = todo.pop()
        if not run.stop:
            start = _perf() if run.measure else 0.0
            try:
                if run.gpu is not None and net.chain_cuda[c] is not None:
                    run_on_stream(run, c, act)
                elif run.record is None:
                    for op in chain_ops[c]:
                        if run.stop:
                            break
                        act.op = op
                        op.run(blobs)
                else:
                    run_recorded(run, chain_ops[c], blobs, act)
                if run.measure and not run.stop:  # a chain cut short says nothing about its cost
                    took = _perf() - start
                    cost[c] = min(took, last[c])  # one slow run (preempted) does not make it costly
                    last[c] = took
            except BaseException as exc:  # noqa: BLE001 - recorded, raised by wait()
                fail(run, exc)
            act.op = None
        newly = complete(run, c)
        if newly:
            if run.stop:
                todo.extend(newly)  # skipped chains are walked here, never queued
            else:
                todo.extend(hand_out(run, newly, p))


def run_recorded(run: _Run, ops: Sequence[Operator], blobs: MutableMapping[str, Any], act: Any) -> None:
    """The chain loop with a timing record per op (profiling on)."""
    record = run.record
    for op in ops:
        if run.stop:
            break
        act.op = op
        start = _perf()
        try:
            op.run(blobs)
        finally:
            record(op, start, _perf())  # type: ignore[misc]


def run_on_stream(run: _Run, c: int, act: Any) -> None:
    """Chain ``c`` of a cuda device: on this thread's stream of that device, after the events of
    parents that ran on other streams, then its own event (see :mod:`asyncnet.tensor.streams`)."""
    net = run.net
    book, device = net.streams, net.chain_cuda[c]
    stream = book.begin(run.gpu, device, net.graph.chain_parents[c])
    with book.context(device, stream):
        if run.record is None:
            for op in net.chain_ops[c]:
                if run.stop:
                    break
                act.op = op
                op.run(net.blobs)
        else:
            run_recorded(run, net.chain_ops[c], net.blobs, act)
    book.end(run.gpu, c, stream)


def sync_streams(run: _Run) -> None:
    """The run's last chain ended: wait for the GPU work it queued (a failure becomes the run's error)."""
    try:
        StreamBook.synchronize(run.gpu)
    except BaseException as exc:  # noqa: BLE001 - raised by wait()
        with run.lock:
            run.errors.append((_perf(), exc))
            run.stop = True


def complete(run: _Run, c: int) -> list[int] | None:
    """Chain ``c`` ended (or was skipped): count down its children; end the run at the last chain."""
    children = run.net.chain_children[c]
    newly = None
    with run.lock:
        if children:
            waiting = run.waiting
            for k in children:
                n = waiting[k] - 1
                waiting[k] = n
                if n == 0:
                    if newly is None:
                        newly = [k]
                    else:
                        newly.append(k)
        run.left -= 1
        last = run.left == 0
    if last:
        end_run(run)
    return newly


def hand_out(run: _Run, newly: list[int], p: int) -> list[int]:
    """Keep one ready chain (preferring this thread's pool) and the cheap ones of this pool;
    queue the rest with pool tokens.

    Returns the chains this thread runs next, the last one first: the kept one, the cheap
    ones, and any a closed pool refused.
    """
    pools = run.net.chain_pool
    keep = next((k for k in newly if pools[k] == p), newly[0])
    mine = [keep]
    if len(newly) > 1:
        cost = run.net.chain_cost
        counts: dict[int, int] = {}
        for k in newly:
            if k == keep:
                continue
            if pools[k] == p and cost[k] < HANDOFF_MIN:
                mine.append(k)
            else:
                run.ready[pools[k]].append(k)
                counts[pools[k]] = counts.get(pools[k], 0) + 1
        for q, n in counts.items():
            pool = run.net.pools[q]
            try:
                for _ in range(min(n, pool.size)):
                    pool.submit(drain, (run, q))
            except ExecutionError:  # the net is being closed: run them here rather than lose them
                mine.extend(_take_all(run.ready[q]))
        if counts and run.wake is not None:
            run.wake.set()
    return mine


def _take_all(q: deque[int]) -> list[int]:
    out = []
    while True:
        try:
            out.append(q.popleft())
        except IndexError:
            return out


def fail(run: _Run, exc: BaseException) -> None:
    """Record a failure; the first one stops the run."""
    t = _perf()
    with run.lock:
        run.errors.append((t, exc))
        run.stop = True
    run.net.cancel_flag.set()  # running ops that check ctx.cancelled() wind down
    decide(run)


def cancel_run(run: _Run) -> bool:
    """Stop a run in flight; False when it had already ended or stopped."""
    with run.lock:
        if run.left == 0 or run.stop:
            return False
        run.stop = True
        run.cancelled = True
    run.net.cancel_flag.set()
    decide(run)
    return True


def end_run(run: _Run) -> None:
    """The last chain ended: free the net for its next run, then wake the waiters."""
    net = run.net
    if run.gpu is not None and run.gpu.used:
        sync_streams(run)
    if run.shadow is not None:
        try:
            write_back(run)
        except BaseException as exc:  # noqa: BLE001 - raised by wait(); the net must still be freed
            run.errors.append((_perf(), exc))
    if net._current is run:
        net._current = None  # no net <-> run cycle outlives the run
    net._release()
    run.ended.set()
    decide(run)


def decide(run: _Run) -> None:
    """The outcome is known: wake the waiters, then call the done-callbacks, each once."""
    run.decided.set()
    if run.wake is not None:
        run.wake.set()
    with run.lock:
        callbacks, run.callbacks = run.callbacks, None
    for handle, fn in callbacks or ():
        call_done_callbacks(handle, (fn,))


def outcome(run: _Run) -> BaseException | None:
    """The error ``wait`` raises: the first failure in time, else a cancellation, else None."""
    if run.errors:
        with run.lock:
            return min(run.errors, key=lambda e: e[0])[1]
    if run.cancelled:
        return ExecutionError(f"the run of net {run.net.name!r} was cancelled")
    return None


def wait_run(run: _Run, timeout: float | None) -> None:
    """Block until the outcome is known (or ``timeout``), give stragglers a grace, raise."""
    deadline = None if timeout is None else _perf() + timeout
    if not run.decided.wait(timeout):
        raise TimeoutError(f"net {run.net.name!r} did not finish within {timeout} s")
    if not run.ended.is_set() and not in_done_callback():  # a callback may run on a thread the run still needs
        grace = SETTLE_GRACE if deadline is None else max(0.0, min(SETTLE_GRACE, deadline - _perf()))
        run.ended.wait(grace)
    err = outcome(run)
    if err is not None:
        raise err


def run_inline(net: AsyncSchedulingNet) -> None:
    """Run every op in op order on this thread, as the simple executor does (see
    :mod:`asyncnet.exec.inline`); ``net.cancel()`` stops it between ops. The thread counts as
    a busy core for :mod:`asyncnet.tensor.parallel` only while splitting is on."""
    if net.closed:
        raise ExecutionError(f"net {net.name!r} is closed")
    net._claim()
    net.runs += 1
    net._inline_cancelled = False
    net._inline_running = True
    split = parallel.ENABLED
    previous = parallel.enter(net._inline_offer) if split else None
    try:
        blobs = net.blobs
        if net._shadow is not None and net._shadow.run_ops(blobs, net._stop_inline):
            return
        for op in net.operators:
            if net._inline_cancelled:
                raise ExecutionError(f"the run of net {net.name!r} was cancelled")
            op.run(blobs)
    finally:
        if split:
            parallel.leave(previous)
        net._inline_running = False
        net._release()


def run_helped(net: AsyncSchedulingNet) -> None:
    """One parallel run with the caller's thread taking chains too, until it ended."""
    with _DeferredStop() as stop:
        run = stop.run = start_run(net, caller_helps=True)
        if stop.pending is not None:
            cancel_run(run)
        help_run(run)
        wait_run(run, None)


def slack(net: AsyncSchedulingNet) -> float | None:
    """The measured work off the critical path (seconds), or None while a chain's cost is unknown."""
    cost = net.chain_cost
    if any(c == float("inf") for c in cost):
        return None
    return sum(cost) - critical_path(cost, net.chain_children)


class _DeferredStop:
    """While the caller's thread helps a run on the main thread, a SIGINT or SIGTERM handler
    that raises (Ctrl-C's ``KeyboardInterrupt``) must not raise in the middle of the run's
    bookkeeping: a chain taken but not completed would keep the run from ever ending. The
    handler is called when the signal comes; its exception is held, the run is cancelled (from
    a short-lived thread: the signal may have interrupted this thread while it held the run's
    lock), and the exception is raised once the run has ended. A handler that returns leaves
    the run alone. Elsewhere than on the main thread this does nothing."""

    __slots__ = ("canceller", "pending", "previous", "run")

    def __init__(self) -> None:
        self.run: _Run | None = None
        self.pending: BaseException | None = None
        self.previous: dict[int, Callable[[int, Any], Any]] = {}
        self.canceller: threading.Thread | None = None

    def __enter__(self) -> _DeferredStop:
        if threading.current_thread() is threading.main_thread():
            for sig in _STOP_SIGNALS:
                handler = _signal.getsignal(sig)
                if callable(handler):
                    self.previous[sig] = handler
                    _signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        try:
            self.previous[signum](signum, frame)
        except BaseException as exc:  # noqa: BLE001 - raised by __exit__, once the run ended
            if self.pending is None:
                self.pending = exc
                if self.run is not None:
                    self.canceller = threading.Thread(target=cancel_run, args=(self.run,), name="asyncnet-cancel")
                    self.canceller.start()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            _signal.signal(sig, handler)
        if self.canceller is not None:
            self.canceller.join()
        if self.pending is not None:
            raise self.pending


# -- the public objects ------------------------------------------------------------------------


class AsyncRunHandle:
    """A run in flight: ``wait(timeout)``, ``done()``, ``cancel()``, ``join(timeout)``, and the
    :class:`concurrent.futures.Future` words ``result(timeout)``, ``exception()``,
    ``add_done_callback(fn)``."""

    __slots__ = ("_run",)

    def __init__(self, run: _Run):
        self._run = run

    def wait(self, timeout: float | None = None) -> None:
        """Return when the run ended; raise its first error, or TimeoutError after ``timeout`` s."""
        wait_run(self._run, timeout)

    def result(self, timeout: float | None = None) -> None:
        """As :meth:`wait`: None when the run succeeded (its outputs are blobs), else its error."""
        wait_run(self._run, timeout)

    def done(self) -> bool:
        """Whether the outcome is known (``wait`` would not block)."""
        return self._run.decided.is_set()

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(handle)`` once, when the outcome is known (success, first error or cancel),
        on the thread that decided it; at once, on this thread, if it already is. An exception
        raised by ``fn`` is logged (logger ``asyncnet.core.netbase``), never raised."""
        run = self._run
        with run.lock:
            if run.callbacks is not None:
                run.callbacks.append((self, fn))
                return
        call_done_callbacks(self, (fn,))

    def cancel(self) -> bool:
        """Skip every chain not started yet; running ops finish. True if the run was stopped."""
        return cancel_run(self._run)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until no op of this run is running (even after a failure); True when so."""
        return self._run.ended.wait(timeout)

    def exception(self) -> BaseException | None:
        """The error ``wait`` would raise, once done."""
        return outcome(self._run) if self.done() else None

    def __repr__(self) -> str:
        state = "running" if not self.done() else "failed" if self.exception() is not None else "done"
        return f"<AsyncRunHandle net={self._run.net.name!r} {state}>"


class AsyncSchedulingNet(NetBase):
    """Runs a net's chains on per-device worker pools (see the module docstring)."""

    def __init__(self, net_def: NetDef, operators: Sequence[Operator], blobs: MutableMapping[str, Any]):
        super().__init__(net_def, operators, blobs)
        ops = self.operators
        route_operators(ops)  # each op on the library that runs it faster (torch CPU tensors)
        self._shadow = shadow_of(ops)  # runs on torch CPU tensors: numpy views once per run
        _check_placements(ops)
        keys = [device_key(op.device) for op in ops]
        graph = build_graph([(op.inputs, op.outputs, op.definition.control_inputs) for op in ops], keys)
        self.graph = graph
        self.chain_ops: list[list[Operator]] = [[ops[i] for i in ch] for ch in graph.chains]
        self.chain_children: list[list[int]] = graph.chain_children
        self.num_parents: list[int] = [len(ps) for ps in graph.chain_parents]
        self.chain_cost: list[float] = [float("inf")] * len(graph.chains)
        self.chain_last: list[float] = [float("inf")] * len(graph.chains)
        self.runs = 0
        self.roots: list[int] = graph.roots()
        self.closed = False
        self._current: _Run | None = None
        self._leases: list[PoolLease] = []
        pool_index: dict[Any, int] = {}
        try:
            for ch in graph.chains:
                key = keys[ch[0]]
                if key not in pool_index:
                    pool_index[key] = len(self._leases)
                    self._leases.append(acquire_pool(ops[ch[0]].device, net_def.num_workers, net_def.own_pool))
        except BaseException:
            _release_all(self._leases)
            raise
        self.chain_pool: list[int] = [pool_index[keys[ch[0]]] for ch in graph.chains]
        self.pools = [lease.pool for lease in self._leases]
        # where an op of a chain of pool p may offer half its work: an idle worker of p (CPU pools)
        self.offers: list[parallel.Offer | None] = [
            self.pools[i].offer if key[0] == "cpu" else None for key, i in pool_index.items()
        ]
        self.chain_cuda, self.streams = cuda_chains(self.chain_ops)
        self.policy = InlinePolicy(len(self.chain_ops))
        self._inline_running = False
        self._inline_cancelled = False  # set by cancel() while an in-line run is in flight
        self._inline_offer = next((o for o in self.offers if o is not None), None)
        self._thread_claim = claim_net_threads(net_def, caller_helps=True)  # run() runs chains on the caller too
        self._finalizer = weakref.finalize(self, _release_all, self._leases, claim=self._thread_claim)

    def run_async(self) -> AsyncRunHandle:
        """Start a run and return at once (NetBusyError if this instance is already running)."""
        return AsyncRunHandle(start_run(self, caller_helps=False))

    def run(self, timeout: float | None = None) -> None:
        """Run once and wait. Without a timeout the caller's thread runs chains too. When the
        timeout expires the run is cancelled (chains not started are skipped, running ops
        finish) and TimeoutError is raised: the caller holds no handle to stop it later."""
        if timeout is not None:
            run = start_run(self, caller_helps=False)
            try:
                wait_run(run, timeout)
            except TimeoutError as e:
                if cancel_run(run):
                    raise TimeoutError(f"{e}; the run was cancelled (ops not started are skipped)") from None
                wait_run(run, 1.0)  # it ended or failed just as the time ran out: report that outcome
            return
        policy = self.policy
        inline = self.streams is None and self.recorder is None and policy.pick(self._slack)
        start = _perf()
        try:
            if inline:
                run_inline(self)
            else:
                run_helped(self)
        except BaseException:
            policy.note(inline, None)
            raise
        policy.note(inline, _perf() - start)

    def _slack(self) -> float | None:
        return slack(self)

    def _stop_inline(self) -> None:
        """Before each op of an in-line run: raise when the run was cancelled."""
        if self._inline_cancelled:
            raise ExecutionError(f"the run of net {self.name!r} was cancelled")

    def cancel(self) -> bool:
        """Cancel the run in flight, if any (as its handle's ``cancel()``); True if one was stopped."""
        run = self._current
        if run is None and self._inline_running:
            self._inline_cancelled = True  # the in-line run checks it before each op
            self.cancel_flag.set()  # and its running op sees ctx.cancelled()
            return True
        return run is not None and cancel_run(run)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Cancel a run in flight, then give back the pools (the last net using a shared pool
        joins its threads), within ``timeout`` s in total (plus up to 1 s for the joins when the
        run used it all). Ops still running then are reported with a RuntimeWarning naming
        them and left behind (see :mod:`asyncnet.exec.pools`)."""
        self.closed = True
        deadline = _perf() + timeout
        run = self._current
        stuck = False
        if run is not None and not run.ended.is_set():
            cancel_run(run)
            if not run.ended.wait(timeout):
                stuck = True
                warnings.warn(
                    f"asyncnet: net {self.name!r} closed with op(s) still running after {timeout:g} s; "
                    f"left behind: {'; '.join(self._running()) or 'unknown'}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self._current = None
        if self._finalizer.detach() is not None:
            _release_all(self._leases, max(1.0, deadline - _perf()), warn=not stuck, claim=self._thread_claim)

    def _running(self) -> list[str]:
        """The ops of this net pool threads are running now, described."""
        mine = {id(op) for op in self.operators}
        seen = {id(a): a for pool in self.pools for a in pool.running()}
        return [a.describe() for a in seen.values() if a.op is not None and id(a.op) in mine]

    @property
    def num_chains(self) -> int:
        return len(self.chain_ops)


def cuda_chains(chain_ops: Sequence[Sequence[Operator]]) -> tuple[list[int | None], StreamBook | None]:
    """Each chain's CUDA device index (None on the CPU), and the stream book when any is on CUDA."""
    devices = [ops[0].device.device_id if ops[0].device.device_type == "cuda" else None for ops in chain_ops]
    return devices, (StreamBook(stream_backend()) if any(d is not None for d in devices) else None)


def stream_backend() -> Any:
    """The streams' backend: None (torch.cuda), or a stand-in set in ``asyncnet.tensor.streams.BACKEND``."""
    from asyncnet.tensor import streams

    return streams.BACKEND


def _check_placements(ops: Sequence[Operator]) -> None:
    """Every device a cross-device AsyncNetBarrier places an input on must exist."""
    for op in ops:
        if op.type == "AsyncNetBarrier" and op.ctx.args.get("cross_device") == 1:
            from asyncnet.ops.barrier import barrier_devices

            for dev in barrier_devices(op.definition, op.device)[0]:
                try:
                    check_device(dev)
                except NetDefinitionError as e:
                    raise NetDefinitionError(
                        f"{e} (AsyncNetBarrier cross_device=1 places input i on device i)", f"ops[{op.index}]"
                    ) from None


def _release_all(
    leases: list[PoolLease], timeout: float = CLOSE_TIMEOUT, warn: bool = True, claim: ThreadClaim | None = None
) -> None:
    if claim is not None:
        claim.release()
    deadline = _perf() + timeout
    for lease in leases:
        lease.release(max(0.5, deadline - _perf()), warn)  # a floor: just-stopped threads need a moment


register_net_type(("async_scheduling", "dag", "async_dag"), AsyncSchedulingNet)
