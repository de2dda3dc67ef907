"""Caffe2's ``data_workers``: Python threads that fetch data and feed a net through blob queues.

``init_data_input_workers(net, ["data", "label"], fetch_fun, batch_size)`` adds one
``DequeueBlobs`` op per input blob to ``net`` (a ``core.Net`` or a ``ModelHelper``) and makes
fetcher threads calling ``fetch_fun(worker_id, batch_size)``, which returns one numpy array per
input blob (any number of samples). An enqueuer thread joins the fetched chunks into batches of
exactly ``batch_size`` samples along each input's batch column (``batch_columns``, default 0),
unless ``dont_rebatch``, and puts each input's batch into its own queue (capacity 4) with
``SafeEnqueueBlobs``. ``coordinator.start()`` starts the threads; ``coordinator.stop()`` closes
the queues (waking every blocked enqueue and dequeue) and joins the threads.

    >>> import numpy as np
    >>> from caffe2.python import core, data_workers, workspace
    >>> def fetch(worker_id, batch_size):
    ...     x = np.random.rand(3, 2).astype(np.float32)
    ...     return [x, x[:, 0].copy()]
    >>> net = core.Net("doc_feed")
    >>> coordinator = data_workers.init_data_input_workers(
    ...     net, ["x", "first"], fetch, batch_size=5, num_worker_threads=1, input_source_name="doc")
    >>> coordinator.start()
    >>> _ = workspace.CreateNet(net); _ = workspace.RunNet(net)
    >>> x, first = workspace.FetchBlob("x"), workspace.FetchBlob("first")
    >>> x.shape, bool((x[:, 0] == first).all())
    ((5, 2), True)
    >>> coordinator.stop_coordinator("doc")
    Wait for workers to die: doc
    All workers terminated: True
"""

from __future__ import annotations

import logging
import queue as pyqueue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope, workspace
from caffe2.python.parallel_workers import (
    GlobalWorkerCoordinator,
    Metrics,
    State,
    Worker,
    WorkerCoordinator,
    run_worker,
)

log = logging.getLogger("data_workers")
log.setLevel(logging.INFO)
LOG_INT_SECS = 60
GET_SECS = 0.5  # the enqueuer and fetchers look at the coordinator's state at least this often

__all__ = [
    "init_data_input_workers",
    "get_worker_ids",
    "BatchFeeder",
    "GlobalCoordinator",
    "DataWorker",
    "enqueuer",
    "global_coordinator",
]


def get_worker_ids(num_workers: int) -> list[int]:
    return list(range(num_workers))


def init_data_input_workers(
    net: Any,
    input_blob_names: Sequence[str],
    fetch_fun: Callable[[int, int], Sequence[np.ndarray] | None],
    batch_size: int,
    num_worker_threads: int = 2,
    input_source_name: str = "train",
    max_buffered_batches: int = 800,
    init_fun: Callable[[Any, Any], Any] | None = None,
    external_loggers: list[Any] | None = None,
    dont_rebatch: bool = False,
    batch_columns: Sequence[int] | None = None,
    timeout: float = 600,
) -> GlobalCoordinator:
    """Feed ``input_blob_names`` of ``net`` from ``fetch_fun`` on worker threads (see the module
    doc); returns the global coordinator (``start()``, ``stop()``, ``stop_coordinator(name)``)."""
    device_option = scope.CurrentDeviceScope() or caffe2_pb2.DeviceOption(device_type=caffe2_pb2.CPU)
    metrics = Metrics(external_loggers)
    feeder = BatchFeeder(
        net,
        input_blob_names,
        batch_size,
        device_option,
        scope.CurrentNameScope(),
        input_source_name,
        global_coordinator.get_queue(input_source_name, max_buffered_batches),
        metrics,
        dont_rebatch,
        batch_columns,
        timeout=timeout,
    )
    ids = [global_coordinator.get_new_worker_id() for _ in range(num_worker_threads)]
    coordinator = WorkerCoordinator(input_source_name, ids, init_fun, feeder)
    workers = [
        threading.Thread(
            target=run_worker,
            name=f"data_workers fetcher id {i}",
            args=[coordinator, DataWorker(coordinator, i, fetch_fun, metrics, batch_size, feeder)],
        )
        for i in ids
    ]
    workers.append(
        threading.Thread(
            target=enqueuer,
            name=f"Enqueuer {input_source_name} {scope.CurrentNameScope()}",
            args=[coordinator, feeder],
        )
    )
    coordinator._workers = workers
    global_coordinator.add(coordinator)
    return global_coordinator


class BatchFeeder(State):
    """Joins fetched chunks into batches and enqueues them into one Caffe2 queue per input blob."""

    def __init__(
        self,
        net: Any,
        input_blob_names: Sequence[str],
        batch_size: int,
        device_option: Any,
        namescope: str,
        input_source_name: str,
        queue: pyqueue.Queue,
        metrics: Metrics,
        dont_rebatch: bool,
        batch_columns: Sequence[int] | None,
        timeout: float = 600,
    ):
        self._counter = 0
        self._input_blob_names = list(input_blob_names)
        self._batch_size = batch_size
        self._internal_queue = queue
        self._queues: list[Any] = []
        self._device_option = device_option
        self._namescope = namescope
        self._timeout = timeout
        self._input_source_name = input_source_name
        self._c2_queue_capacity = 4
        self._inputs = 0
        self._prev_seconds = time.time()
        self._last_warning = time.time()
        self._dont_rebatch = dont_rebatch
        self._metrics = metrics
        self._batch_columns = list(batch_columns) if batch_columns is not None else [0] * len(self._input_blob_names)
        if len(self._batch_columns) != len(self._input_blob_names):
            raise ValueError(
                f"expected a batch column per input blob ({len(self._input_blob_names)}), "
                f"got {len(self._batch_columns)}"
            )
        self._create_caffe2_queues(net)
        self._create_caffe2_ops(net)
        self._init_scratch()

    def start(self) -> None:
        self._inputs = 0
        self._prev_seconds = time.time()

    def stop(self) -> None:
        try:
            for q in self._queues:
                workspace.RunOperatorOnce(core.CreateOperator("CloseBlobsQueue", [q], []))
        finally:
            self._log_inputs_per_interval(0, force=True)

    def cleanup(self) -> None:
        _free([*self._scratch_blob.values(), *self._scratch_status.values()])

    # -- the Python-side queue ------------------------------------------------------------------

    def _get(self, coordinator: WorkerCoordinator) -> list[np.ndarray] | None:
        start = last_warning = time.time()
        while coordinator.is_active():
            try:
                return self._internal_queue.get(block=True, timeout=GET_SECS)
            except pyqueue.Empty:
                if time.time() - last_warning > 10.0:
                    log.warning("** Data input is slow: (still) no data in %s secs.", time.time() - start)
                    last_warning = time.time()
        return None

    def _validate_chunk(self, chunk: Sequence[np.ndarray] | None) -> bool:
        if chunk is None:
            log.warning("Fetcher function returned None")
            return False
        if len(chunk) != len(self._input_blob_names):
            raise ValueError(
                f"expected the fetcher to return {len(self._input_blob_names)} arrays "
                f"(one per input blob {self._input_blob_names}), got {len(chunk)}"
            )
        for d in chunk:
            if not isinstance(d, np.ndarray):
                raise TypeError(f"expected the fetcher to return numpy arrays, got {type(d).__name__}")
        if not self._dont_rebatch:
            cols = self._batch_columns
            n0 = chunk[0].shape[cols[0]]
            for j, d in enumerate(chunk[1:], start=1):
                if d.shape[cols[j]] != n0:
                    raise ValueError(
                        f"each returned input must have an equal number of samples: input 0 has {n0}, "
                        f"input {j} has {d.shape[cols[j]]} (batch columns {cols})"
                    )
        if len(chunk) == 0:
            log.warning("Worker provided zero length input")
            return False
        return True

    def put(self, chunk: Sequence[np.ndarray] | None, coordinator: WorkerCoordinator) -> None:
        """Add a fetched chunk to the Python-side queue, waiting while it is full (and active)."""
        if not self._validate_chunk(chunk):
            return
        while coordinator.is_active():
            qsize = self._internal_queue.qsize()
            if qsize < 2 and time.time() - self._last_warning > LOG_INT_SECS:
                log.warning(
                    "Warning, data loading lagging behind: queue size=%s, name=%s", qsize, self._input_source_name
                )
                self._last_warning = time.time()
            try:
                self._internal_queue.put(chunk, block=True, timeout=GET_SECS)
            except pyqueue.Full:
                log.debug("Queue full: stalling fetchers...")
                continue
            self._counter += 1
            self._log_inputs_per_interval(chunk[0].shape[0])  # type: ignore[index]
            return

    # -- batches into the Caffe2 queues --------------------------------------------------------

    def _enqueue_batch_direct(self, coordinator: WorkerCoordinator) -> None:
        data = self._get(coordinator)
        if data is None or not coordinator.is_active():
            return
        for name, q, arr in zip(self._input_blob_names, self._queues, data):
            self._enqueue(name, q, arr)

    def _collect(self, coordinator: WorkerCoordinator) -> list[np.ndarray] | None:
        """Chunks joined along their batch columns until there are at least batch_size samples."""
        batch: list[np.ndarray] | None = None
        col = self._batch_columns[0]
        while (batch is None or batch[0].shape[col] < self._batch_size) and coordinator.is_active():
            chunk = self._get(coordinator)
            if chunk is None:
                continue
            if batch is None:
                batch = [np.array(c, copy=True) for c in chunk]
            else:
                batch = [np.concatenate([b, c], axis=k) for b, c, k in zip(batch, chunk, self._batch_columns)]
        return batch

    def _enqueue_batch(self, coordinator: WorkerCoordinator) -> None:
        """Enqueue one batch of exactly batch_size samples (the rest goes back to the Python-side
        queue), or whatever one chunk holds when ``dont_rebatch``."""
        if self._dont_rebatch:
            self._enqueue_batch_direct(coordinator)
            return
        batch = self._collect(coordinator)
        if batch is None:
            return
        start = time.time()
        try:
            if batch[0].shape[self._batch_columns[0]] > self._batch_size:
                parts = [np.split(b, [self._batch_size], axis=k) for b, k in zip(batch, self._batch_columns)]
                batch = [p[0] for p in parts]
                try:
                    self._internal_queue.put([p[1] for p in parts], block=False)
                except pyqueue.Full:
                    pass
            if coordinator.is_active():
                for name, q, arr in zip(self._input_blob_names, self._queues, batch):
                    self._enqueue(name, q, arr)
        finally:
            self._metrics.put_metric("enqueue_time", time.time() - start)

    def _init_scratch(self) -> None:
        self._scratch_blob: dict[str, Any] = {}
        self._scratch_status: dict[str, Any] = {}
        for name in self._input_blob_names:
            scratch = f"{self._namescope}{name}_scratch_{self._input_source_name}"
            self._scratch_blob[name] = core.BlobReference(scratch)
            self._scratch_status[name] = core.BlobReference(scratch + "_status")
        for b in [*self._scratch_blob.values(), *self._scratch_status.values()]:
            workspace.FeedBlob(b, np.array([], np.float32), device_option=self._device_option)

    def _enqueue(self, blob_name: str, queue: Any, data: np.ndarray) -> None:
        """Put one input's batch into its Caffe2 queue (waits while the queue is full)."""
        scratch = self._scratch_blob[blob_name]
        workspace.FeedBlob(scratch, data, device_option=self._device_option)
        op = core.CreateOperator(
            "SafeEnqueueBlobs",
            [queue, scratch],
            [scratch, self._scratch_status[blob_name]],
            device_option=self._device_option,
        )
        workspace.RunOperatorOnce(op)

    def _create_caffe2_queues(self, net: Any) -> None:
        for name in self._input_blob_names:
            q = core.ScopedBlobReference(f"{name}_c2queue_{self._input_source_name}")
            workspace.RunOperatorOnce(
                core.CreateOperator("CreateBlobsQueue", [], [q], num_blobs=1, capacity=self._c2_queue_capacity)
            )
            self._queues.append(q)

    def _create_caffe2_ops(self, net: Any) -> None:
        for q, name in zip(self._queues, self._input_blob_names):
            net.DequeueBlobs(q, name, timeout_secs=float(self._timeout))

    def _log_inputs_per_interval(self, inputs: int, force: bool = False) -> None:
        self._inputs += inputs
        now = time.time()
        delta = now - self._prev_seconds
        if delta >= LOG_INT_SECS or force:
            per_sec = int(self._inputs / delta) if delta > 0 else 0
            qsize = self._internal_queue.qsize()
            log.info("%s/%s: %s inputs/sec", self._input_source_name, self._namescope, per_sec)
            log.info("-- queue: %s batches", qsize)
            self._metrics.put_metric("inputs_per_sec", per_sec, False)
            self._metrics.put_metric("queue_size", qsize, False)
            self._metrics.put_metric("time_elapsed", delta, False)
            self._metrics.log_metrics()
            self._metrics.reset_metrics()
            self._inputs = 0
            self._prev_seconds = now


def _free(blobs: Sequence[Any]) -> None:
    """Release the memory of ``blobs`` (Caffe2's ``Free``): each existing one becomes an empty array."""
    for b in blobs:
        if workspace.HasBlob(b):
            workspace.FeedBlob(b, np.array([], np.float32))


class GlobalCoordinator(GlobalWorkerCoordinator):
    """The global coordinator, with one Python-side queue per input source name."""

    def __init__(self) -> None:
        super().__init__()
        self._queues: dict[str, pyqueue.Queue] = {}

    def get_queue(self, queue_name: str, max_buffered_batches: int) -> pyqueue.Queue:
        if not isinstance(max_buffered_batches, int):
            raise TypeError(f"expected an int max_buffered_batches, got {type(max_buffered_batches).__name__}")
        if queue_name not in self._queues:
            self._queues[queue_name] = pyqueue.Queue(maxsize=max_buffered_batches)
        return self._queues[queue_name]

    def reset_data_input(self, namescope: str, name: str, net: Any, batch_size: int) -> None:
        """Feed ``net`` (a new net) from the workers named ``name`` under ``namescope``, in batches of ``batch_size``."""
        log.info("Reset data input %s, batch size %s: ", name, batch_size)
        for c in self._coordinators:
            if c._worker_name == name and c._state._namescope == namescope:  # type: ignore[union-attr]
                c._state._batch_size = batch_size  # type: ignore[union-attr]
                c._state._create_caffe2_ops(net)  # type: ignore[union-attr]


class DataWorker(Worker):
    """A fetcher thread's worker: calls ``fetch_fun(worker_id, batch_size)`` and hands the chunk on."""

    def __init__(
        self,
        coordinator: WorkerCoordinator,
        worker_id: int,
        worker_fun: Callable[[int, int], Any],
        metrics: Metrics,
        batch_size: int,
        batch_feeder: BatchFeeder,
    ):
        super().__init__(coordinator, worker_id, worker_fun=worker_fun, metrics=metrics)
        self._batch_size = batch_size
        self._batch_feeder = batch_feeder

    def run(self) -> None:
        self._batch_feeder.put(self._worker_fun(self._worker_id, self._batch_size), self._coordinator)  # type: ignore[misc]

    def finish(self) -> None:
        self._metrics.put_metric("fetcher_time", time.time() - self._start_time)  # type: ignore[union-attr]


global_coordinator = GlobalCoordinator()


def enqueuer(coordinator: WorkerCoordinator, batch_feeder: BatchFeeder) -> None:
    """The enqueuer thread: batches into the Caffe2 queues while the coordinator is active."""
    while coordinator.is_active():
        batch_feeder._enqueue_batch(coordinator)
