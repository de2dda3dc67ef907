"""``run_parallel_workers``: run one function per worker, structured like a Trio nursery; and the
supervisor of worker processes behind its ``backend="processes"``.

    >>> import numpy as np
    >>> def work(sync):
    ...     g = np.full(3, float(sync.worker_id))
    ...     sync.sync_gradients(g)
    ...     return float(g[0])
    >>> run_parallel_workers(4, work, timeout=10)
    [1.5, 1.5, 1.5, 1.5]

Rules:

- ``fn(sync)`` runs once per worker, each with its own handle; results come back in worker order.
- When a worker raises (or, with processes, dies), the group is aborted: its peers' pending and
  future ``sync_gradients`` calls raise ``SyncAbortedError`` instead of waiting.
- Every worker is joined before the call returns or raises; nothing is left running and, with
  processes, no shared-memory segment is left behind. A worker process still running ``2 x
  timeout`` seconds (5 s without a timeout) after the first failure is stuck outside any sync
  call, where the abort cannot reach it: it is terminated. A thread cannot be: a worker thread
  stuck in user code delays the return until it finishes.
- On failure the *first* error is raised: the earliest root cause, that is the earliest error
  that does not merely follow an abort (a ``SyncAbortedError``, an error caused by one, or one
  raised once the group was already aborted only report that a peer failed), if any. Every worker's error is attached to it:
  ``err.worker_errors`` is a dict ``{worker_id: exception}``, ``err.worker_id`` is the id of the
  worker that raised it, and a note per other failed worker is added to ``err.__notes__``
  (shown in tracebacks on Python 3.11+).
- ``backend="processes"`` spawns processes: ``fn`` must be picklable (a module-level function
  or a ``functools.partial`` of one, not a lambda or a closure), and so must its results and
  errors (they travel by value: torch tensors arrive whole). Its handles are
  :class:`~asyncnet.sync.process.ProcessGradientSync`. The workers die with the calling
  process, however it dies, and take the group's shared memory with them; they ignore Ctrl-C
  (the caller gets the ``KeyboardInterrupt``, aborts the group and joins them). Timeouts count
  from the moment every worker has started.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from multiprocessing import resource_tracker
from multiprocessing.connection import wait as mp_wait
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

from asyncnet.cleanup import release_segments_of
from asyncnet.errors import SyncAbortedError, SyncError
from asyncnet.sync._failures import AFTER_ABORT, attach_errors
from asyncnet.sync.process import ProcessGradientSync, WorkerDiedError, _Group
from asyncnet.sync.threaded import ThreadedGradientSync

__all__ = ["run_parallel_workers", "run_process_workers", "FN_DIR_PREFIX"]

T = TypeVar("T")
_BACKENDS = ("threads", "processes")
FN_DIR_PREFIX = "asyncnet_fn_"  # + "<creator pid>_": the runner's payload folders in the temp dir


def run_parallel_workers(
    n: int,
    fn: Callable[[Any], T],
    backend: str = "threads",
    timeout: float | None = None,
) -> list[T]:
    """Run ``fn(sync)`` on ``n`` workers and return their results in worker order.

    ``backend`` is ``"threads"`` (one thread per worker, :class:`ThreadedGradientSync`) or
    ``"processes"`` (one spawned process per worker, shared memory); ``timeout`` is the
    per-round wait for peers in seconds (None: no limit). See the module doc for failures.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if backend == "processes":
        return run_process_workers(n, fn, timeout)
    return _run_threads(n, fn, timeout)


def _run_threads(n: int, fn: Callable[[Any], T], timeout: float | None) -> list[T]:
    syncs = ThreadedGradientSync.new_workers(n, timeout)
    results: list[Any] = [None] * n
    errors: dict[int, tuple[int, BaseException]] = {}
    seq = itertools.count()
    lock = threading.Lock()

    ended = [threading.Event() for _ in range(n)]

    def body(i: int) -> None:
        try:
            results[i] = fn(syncs[i])
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised by the caller
            if syncs[i].aborted:
                setattr(exc, AFTER_ABORT, True)
            with lock:
                errors[i] = (next(seq), exc)
            syncs[i].abort(f"worker {i} raised {type(exc).__name__}: {exc}")
        finally:
            ended[i].set()

    threads = [
        threading.Thread(target=body, args=(i,), name=f"asyncnet-sync-worker-{i}", daemon=True) for i in range(n)
    ]
    started = []
    try:
        for t in threads:
            t.start()
            started.append(t)
        _wait_all(ended[: len(started)])
    except BaseException:
        # KeyboardInterrupt while waiting (or a failed start): stop the peers, then wait for them.
        syncs[0].abort("interrupted in the parent")
        _wait_all(ended[: len(started)])
        for t in started:
            t.join()
        raise
    for t in started:
        t.join()
    if errors:
        raise attach_errors(errors)
    return results


def _wait_all(ended: list[threading.Event]) -> None:
    """Wait until every worker has ended, in short waits that keep Ctrl-C responsive. Events,
    not ``Thread.join``: Python 3.11's join, interrupted by a signal handler that raises, marks
    the thread it waited for as stopped while it still runs, so a later join returns at once
    and the caller could leave a worker running into interpreter exit."""
    for e in ended:
        while not e.wait(0.5):
            pass


# -- running workers in processes ---------------------------------------------------------------


class _Payload:
    """``fn``, carried to a child beside the spawn pipe rather than through it.

    ``Process.start()`` (spawn) writes the whole pickled process object into a pipe while it
    still holds that pipe's read end itself. A child that dies before reading it all (it fails
    importing the main module, e.g. a script without ``if __name__ == "__main__":``) leaves the
    parent blocked in that write forever once the data outgrows the pipe buffer (64 KiB), and a
    ``partial`` holding a dataset easily does. So ``fn`` is pickled while the process starts
    (the spawning context is set, so locks and connections pickle as usual) into a file, and
    the child loads it from there, inside its error handling.
    """

    def __init__(self, fn: Callable[[Any], Any], path: str):
        self.fn = fn
        self.path = path

    def __reduce__(self) -> tuple:
        with open(self.path, "wb") as f:
            f.write(ForkingPickler.dumps(self.fn))
        return (_PayloadRef, (self.path,))


class _PayloadRef:
    """The child's side of :class:`_Payload`: :meth:`load` reads ``fn`` and removes the file."""

    def __init__(self, path: str):
        self.path = path

    def load(self) -> Callable[[Any], Any]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        return ForkingPickler.loads(data)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _child_main(payload: _PayloadRef, sync: ProcessGradientSync, conn: Any) -> None:
    """A worker process: see :func:`run_process_workers` for the rules it follows."""
    # Started with SIGINT and SIGTERM blocked (the parent blocks them while it spawns): Ctrl-C,
    # which the terminal sends to the whole process group, is the parent's to handle (it aborts
    # the group), so this process ignores it; SIGTERM keeps its default (a quiet exit).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    parent_gone = _watch_parent(sync, os.path.dirname(payload.path))
    try:
        try:
            sync._bind(ready=False)
            fn = payload.load()
            sync._bind()  # ready: the peers' timeouts count from the last worker's start
            result = fn(sync)
        except BaseException as exc:  # noqa: BLE001 - shipped to the parent
            tb = traceback.format_exc()
            if sync._engine is not None and sync._engine.aborted:
                setattr(exc, AFTER_ABORT, True)  # only a consequence of a peer's failure
            try:
                sync.abort(f"worker {sync.worker_id} raised {type(exc).__name__}: {exc}")
            except SyncError:  # the group is gone already (the parent closed it, or died)
                pass
            finally:
                _send(conn, ("err", exc, tb))
        else:
            _send(conn, ("ok", result))
    finally:
        parent_gone()
        sync._detach()
        conn.close()


def _watch_parent(sync: ProcessGradientSync, payload_dir: str) -> Callable[[], None]:
    """Die with the parent: a daemon thread waits on the pipe that closes when the parent
    process is gone (however it died), then unlinks the group's segments and the payload folder
    (nobody else is left to), aborts the group (waking the peers) and exits. Returns the
    clean-up, for the main thread to run too if it ends first (its exit would cut the thread
    short)."""
    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:  # pragma: no cover - not a spawned child
        return lambda: None
    sentinel = parent.sentinel
    lock = threading.Lock()
    done: list[bool] = []

    def cleanup() -> None:
        if not mp_wait([sentinel], 0):
            return  # the parent lives: it cleans up
        with lock:  # once, by whichever thread comes first; the other waits for it
            if done:
                return
            done.append(True)
            _cleanup_orphaned(sync, payload_dir)

    def watch() -> None:
        mp_wait([sentinel])
        try:
            cleanup()
        finally:
            os._exit(70)  # EX_SOFTWARE; nobody is left to read it

    threading.Thread(target=watch, name="asyncnet-parent-watchdog", daemon=True).start()
    return cleanup


def _cleanup_orphaned(sync: ProcessGradientSync, payload_dir: str) -> None:
    """The parent died: unlink the group's names first (the main thread may end this process as
    soon as it sees the abort), release what the dead parent had registered with its resource
    tracker (so no false leak warning), then wake the peers."""
    parent = mp.parent_process()
    steps = (
        sync._unlink_group_orphaned,
        lambda: shutil.rmtree(payload_dir, ignore_errors=True),
        lambda: parent is not None and parent.pid is not None and release_segments_of(parent.pid),
        lambda: sync._engine is not None and sync._engine.abort("the parent process died"),
    )
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - e.g. the main thread unmapped the group meanwhile
            pass


def _send(conn: Any, msg: tuple) -> None:
    """Send ``msg`` pickled by value: with plain pickle, not the multiprocessing pickler, which
    would pass a torch tensor as a handle on shared memory that is gone once this process exits."""
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - the result or error did not pickle (any error of its __reduce__)
        what = "error" if msg[0] == "err" else "result"
        original = msg[1]
        detail = msg[2] if msg[0] == "err" else ""
        data = pickle.dumps(
            (
                "err",
                RuntimeError(
                    f"the worker's {what} could not be sent to the parent ({exc}): {type(original).__name__}: {original}"
                ),
                detail,
            )
        )
    try:
        conn.send_bytes(data)
    except OSError:  # the parent is gone (its watchdog is about to end this process)
        pass


def run_process_workers(n: int, fn: Callable[[Any], Any], timeout: float | None) -> list[Any]:
    """The ``backend="processes"`` half of :func:`~asyncnet.sync.run_parallel_workers`.

    Rules, beyond the runner's: every child dies with this process (a watchdog thread in it
    notices, unlinks the group's segments and exits); children ignore Ctrl-C (the terminal sends
    it to the whole process group: this process handles it, aborting the group); results and
    errors travel by value (plain pickle), so torch tensors arrive whole.
    """
    ctx = mp.get_context("spawn")
    syncs = ProcessGradientSync.new_workers(n, timeout)
    group = syncs[0]._owner
    assert group is not None
    results: list[Any] = [None] * n
    errors: dict[int, tuple[int, BaseException]] = {}
    seq = itertools.count()
    procs: list[Any] = []
    conns: list[Any] = []
    interrupted = False
    payload_dir = tempfile.mkdtemp(prefix=f"{FN_DIR_PREFIX}{os.getpid()}_")
    try:
        resource_tracker.ensure_running()  # it would unblock the signals blocked below, when it starts
        for i in range(n):
            r, w = ctx.Pipe(duplex=False)
            conns.append(r)
            payload = _Payload(fn, os.path.join(payload_dir, f"worker{i}.pickle"))
            p = ctx.Process(
                target=_child_main, args=(payload, syncs[i], w), name=f"asyncnet-sync-worker-{i}", daemon=True
            )
            # No signal may interrupt a start half-way (a child not yet in ``procs`` would never
            # be reaped); the child starts with them blocked and sets its own handling.
            old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                p.start()
                procs.append(p)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            w.close()
            group.set_pid(i, p.pid)
        grace = 5.0 if timeout is None else max(1.0, 2 * timeout)
        _supervise(procs, conns, group, results, errors, seq, grace)
    except BaseException as exc:
        interrupted = True
        group.abort(f"interrupted in the parent ({type(exc).__name__})")
        raise
    finally:
        _reap(procs, 1.0 if interrupted else 5.0)
        for c in conns:
            c.close()
        shutil.rmtree(payload_dir, ignore_errors=True)
        ProcessGradientSync.close_group(syncs)
    if errors:
        raise attach_errors(errors)
    return results


_EXIT_GRACE = 10.0  # seconds a worker may take to exit after it sent its result
_KILL_GRACE = 2.0  # seconds from SIGTERM to SIGKILL for a worker being terminated


def _supervise(procs, conns, group: _Group, results, errors, seq, grace: float) -> None:
    """Collect results; abort the group at the first error or early exit.

    Like a nursery cancelling its children: workers still running ``grace`` seconds after the
    first failure (stuck outside any sync call, where the abort cannot reach them) are terminated
    (SIGTERM, then SIGKILL ``_KILL_GRACE`` seconds later: a stopped worker holds SIGTERM), and so is a worker still running ``_EXIT_GRACE`` seconds after it sent its result (something
    in it, such as a non-daemon thread, keeps it from exiting); its result stands.
    """
    n = len(procs)
    done = [False] * n  # its message (result or error) arrived
    closed = [False] * n  # its end of the pipe is closed: nothing more can come
    done_at: dict[int, float] = {}
    terminated: dict[int, float] = {}  # worker -> when it was sent SIGTERM
    killed: set[int] = set()
    failed_at: float | None = None

    def take(i: int) -> None:
        try:
            data = conns[i].recv_bytes()
        except (EOFError, OSError):
            closed[i] = True
            return
        done[i] = closed[i] = True
        done_at[i] = time.monotonic()
        try:
            msg = ForkingPickler.loads(data)
        except Exception as exc:  # noqa: BLE001 - e.g. an exception class whose __init__ takes other args
            msg = (
                "err",
                SyncError(
                    f"worker {i}'s result or error could not be unpickled in the parent: {type(exc).__name__}: {exc}"
                ),
                "",
            )
        if msg[0] == "ok":
            results[i] = msg[1]
        else:
            exc = msg[1]
            notes = list(getattr(exc, "__notes__", []))
            notes.append(f"traceback in worker process {i}:\n{msg[2]}")
            exc.__notes__ = notes
            errors[i] = (next(seq), exc)
            group.abort(f"worker {i} raised {type(exc).__name__}: {exc}")

    alive = set(range(n))
    while alive:
        now = time.monotonic()
        if errors and failed_at is None:
            failed_at = now
        for i in alive - terminated.keys():
            stuck_after_failure = failed_at is not None and now - failed_at > grace
            stuck_after_result = done[i] and now - done_at[i] > _EXIT_GRACE
            if stuck_after_failure or stuck_after_result:
                if stuck_after_result and not stuck_after_failure:
                    warnings.warn(
                        f"worker {i} sent its result but was still running {_EXIT_GRACE:g} s later "
                        "(a non-daemon thread?); it was terminated",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                procs[i].terminate()
                terminated[i] = now
        for i, since in terminated.items():  # SIGTERM is held while a worker is stopped (SIGSTOP) or ignored
            if i in alive and i not in killed and now - since > _KILL_GRACE:
                procs[i].kill()
                killed.add(i)
        waitables = {procs[i].sentinel: i for i in alive}
        waitables.update({conns[i]: i for i in alive if not closed[i]})
        for obj in mp_wait(list(waitables), timeout=0.5):
            i = waitables[obj]
            if obj is conns[i]:
                if not closed[i]:
                    take(i)
                continue
            if i not in alive:
                continue
            if not closed[i] and conns[i].poll():
                take(i)
            procs[i].join()
            alive.discard(i)
            if not done[i] and i in terminated:
                errors[i] = (
                    next(seq),
                    SyncAbortedError(f"worker {i} was terminated: still running {grace:g} s after a peer failed"),
                )
            elif not done[i]:
                code = procs[i].exitcode
                hint = ""
                if code == 1:  # an uncaught exception outside fn: the child failed at start-up
                    hint = (
                        " (it failed at start-up, see its traceback on stderr: fn and its module must be "
                        "importable in a fresh process, and a script must guard its entry point with "
                        "if __name__ == '__main__':)"
                    )
                exc = WorkerDiedError(
                    f"worker {i} (pid {procs[i].pid}) died with exit code {code} before returning{hint}"
                )
                errors[i] = (next(seq), exc)
                group.abort(str(exc))


def _reap(procs, grace: float) -> None:
    """Join every started child: ``grace`` seconds to exit by itself, then SIGTERM, then SIGKILL."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(2.0)
        if p.is_alive():
            p.kill()
            p.join()
