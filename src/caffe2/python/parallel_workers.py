"""Caffe2's ``parallel_workers``: a function run in a loop on worker threads, started and
stopped together through a coordinator.

    >>> import threading
    >>> from caffe2.python import parallel_workers
    >>> seen = threading.Event()
    >>> coordinator = parallel_workers.init_workers(lambda worker_id: seen.wait(0.01) or seen.set(),
    ...                                             num_worker_threads=1, worker_name="doc")
    >>> coordinator.start(); seen.wait(10)
    True
    >>> coordinator.stop_coordinator("doc")  # doctest: +ELLIPSIS
    Wait for workers to die: doc
    All workers terminated: True
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger("parallel_workers")
log.setLevel(logging.INFO)
LOG_INT_SECS = 60
JOIN_SECS = 5.0  # how long stop waits for each worker thread (one may be blocked in I/O)

__all__ = [
    "init_workers",
    "Metrics",
    "State",
    "WorkerCoordinator",
    "GlobalWorkerCoordinator",
    "Worker",
    "run_worker",
    "global_coordinator",
]


def init_workers(
    worker_fun: Callable[[int], Any],
    num_worker_threads: int = 2,
    worker_name: str = "train",
    init_fun: Callable[[Any, Any], Any] | None = None,
    external_loggers: list[Any] | None = None,
    shutdown_fun: Callable[[], Any] | None = None,
) -> GlobalWorkerCoordinator:
    """Threads calling ``worker_fun(worker_id)`` in a loop once started; returns the global coordinator."""
    metrics = Metrics(external_loggers)
    ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = WorkerCoordinator(worker_name, ids, init_fun, shutdown_fun=shutdown_fun)
    coordinator._workers = [
        threading.Thread(
            target=run_worker,
            name=f"parallel_workers worker id {i}",
            args=[coordinator, Worker(coordinator, i, worker_fun, metrics)],
        )
        for i in ids
    ]
    global_coordinator.add(coordinator)
    return global_coordinator


class Metrics:
    """Sums of named values (and their counts), passed to external loggers' ``log(metrics)``."""

    def __init__(self, external_loggers: list[Any] | None):
        self._metrics: collections.defaultdict[str, float] = collections.defaultdict(float)
        self._external_loggers = external_loggers
        self._lock = threading.Lock()

    def reset_metrics(self) -> None:
        with self._lock:
            self._metrics = collections.defaultdict(float)

    def log_metrics(self) -> None:
        for logger in self._external_loggers or ():
            try:
                logger.log(self._metrics)
            except Exception as e:  # noqa: BLE001  (a logger's failure never stops the workers)
                print(f"Failed to call ExternalLogger: {e}")

    def put_metric(self, key: str, value: float, count: bool = True) -> None:
        with self._lock:
            self._metrics[key] += value
            if count:
                self._metrics[f"{key}_count"] += 1


class State:
    """What a coordinator starts, stops and cleans up besides its threads."""

    def start(self) -> None:
        """Called once when the coordinator starts."""

    def stop(self) -> None:
        """Called when the coordinator stops (before its threads are joined)."""

    def cleanup(self) -> None:
        """Called after every thread ended."""


class WorkerCoordinator:
    """The threads of one named group of workers, active between start and stop."""

    def __init__(
        self,
        worker_name: str,
        worker_ids: list[int],
        init_fun: Callable[[Any, Any], Any] | None,
        state: State | None = None,
        shutdown_fun: Callable[[], Any] | None = None,
    ):
        self._active = True
        self._started = False
        self._workers: list[threading.Thread] = []
        self._worker_name = worker_name
        self._worker_ids = worker_ids
        self._init_fun = init_fun
        self._state = state
        self._shutdown_fun = shutdown_fun

    def is_active(self) -> bool:
        return self._active

    def init(self, global_coordinator: Any) -> None:
        if self._init_fun and not self._started:
            self._init_fun(self, global_coordinator)

    def _start(self) -> None:
        if self._started:
            return
        self._active = True
        self._started = True
        if self._state:
            self._state.start()
        for w in self._workers:
            w.daemon = True
            w.start()

    def _stop(self, reason: Any = None) -> None:
        self._active = False
        if reason is not None:
            log.error("Data input failed due to an error: %s", reason)
        if self._shutdown_fun and self._started:
            self._shutdown_fun()
        if self._state:
            self._state.stop()
        self._started = False

    def _wait_finish(self, cleanup: Any = None) -> bool:
        print(f"Wait for workers to die: {self._worker_name}")
        for w in self._workers:
            if w is not threading.current_thread() and w.ident is not None:
                w.join(JOIN_SECS)
        success = True
        for w in self._workers:
            if w.is_alive():
                print(f"Worker {w} failed to close while waiting")
                success = False
        if success and self._state:
            self._state.cleanup()
        print(f"All workers terminated: {success}")
        return success

    def get_worker_ids(self) -> list[int]:
        return self._worker_ids


class GlobalWorkerCoordinator:
    """Every coordinator of the process: ``start`` runs their init functions, then starts them."""

    def __init__(self) -> None:
        self._coordinators: list[WorkerCoordinator] = []
        self._fetcher_id_seq = 0
        self._worker_ids: list[int] = []
        self.register_shutdown_handler()

    def add(self, coordinator: WorkerCoordinator) -> None:
        self._coordinators.append(coordinator)

    def get_new_worker_id(self) -> int:
        worker_id = self._fetcher_id_seq
        self._worker_ids.append(worker_id)
        self._fetcher_id_seq += 1
        return worker_id

    def get_worker_ids(self) -> list[int]:
        return self._worker_ids

    def start(self) -> None:
        for c in self._coordinators:  # every init before any thread starts
            c.init(self)
        for c in self._coordinators:
            c._start()

    def stop(self) -> bool:
        """Stop every coordinator and wait for its threads; whether all of them ended."""
        for c in self._coordinators:
            c._stop()
        success = all([c._wait_finish() for c in self._coordinators])
        self._coordinators = []
        return success

    def stop_coordinator(self, worker_name: str) -> None:
        """Stop the coordinators named ``worker_name`` and forget them."""
        for c in self._coordinators:
            if c._worker_name == worker_name:
                c._stop()
                c._wait_finish()
        self._coordinators = [c for c in self._coordinators if c._worker_name != worker_name]

    def register_shutdown_handler(self) -> None:
        atexit.register(self.stop)


class Worker:
    """One worker thread's function, timed into the metrics; an exception stops its coordinator."""

    def __init__(
        self,
        coordinator: WorkerCoordinator,
        worker_id: int,
        worker_fun: Callable[..., Any] | None = None,
        metrics: Metrics | None = None,
    ):
        self._coordinator = coordinator
        self._worker_id = worker_id
        self._worker_fun = worker_fun
        self._metrics = metrics
        self._start_time = time.time()

    def start(self) -> None:
        self._start_time = time.time()

    def run(self) -> None:
        self._worker_fun(self._worker_id)  # type: ignore[misc]

    def handle_exception(self, e: BaseException) -> None:
        traceback.print_exc()
        log.exception("Exception in worker %s", self._worker_id)
        self._coordinator._stop(f"Exception in worker {self._worker_id}: {e}")

    def finish(self) -> None:
        if self._metrics is not None:
            self._metrics.put_metric("worker_time", time.time() - self._start_time)
            self._metrics.log_metrics()


global_coordinator = GlobalWorkerCoordinator()


def run_worker(coordinator: WorkerCoordinator, worker: Worker) -> None:
    """Run ``worker`` again and again while its coordinator is active."""
    while coordinator.is_active():
        worker.start()
        try:
            worker.run()
        except Exception as e:  # noqa: BLE001  (Caffe2's: any failure stops the coordinator)
            worker.handle_exception(e)
        finally:
            worker.finish()
