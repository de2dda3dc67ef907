"""The ``hogwild`` trainer: W workers update one set of parameters without locks.

The parameters (and the optimizer state) exist once: with threads, every worker's workspace
holds the *same* numpy arrays; with processes, views of one shared-memory segment. Each
worker trains on its own disjoint part of every epoch's data and its update net writes the
shared arrays in place, racing with the others by design (Niu et al., 2011: sparse-ish updates
make the races harmless). A worker's step takes ``batch_size / W`` samples, so W workers have
as many samples in flight as one sync step. The only synchronized state:

- the step counter, one int64 blob incremented by the ``AtomicIter`` op under a shared mutex
  (it feeds the learning-rate policy and counts the steps of all workers together);
- the stop flag, an atomic bool checked before every step; worker 0 sets it when the test
  accuracy reaches the target, and every worker stops at the end of that epoch.

At each epoch end the workers meet through the GradientSync (a 4-number round), worker 0
evaluates the shared parameters, and a second round hands its figures to everyone.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

import numpy as np

import asyncnet as an
from asyncnet.train.data import Dataset, epoch_batches, num_batches, worker_samples
from asyncnet.train.report import EpochMetrics
from asyncnet.train.trainers._common import (HOGWILD_STALE_WORKERS, EpochClock, Resume, TrainConfig, WorkerNets,
                                             WorkerResult, build_model, click_figures, diverged, wants_checkpoints)
from asyncnet.train.trainers.sync import TRACE_STEP

__all__ = ["run_hogwild", "hogwild_worker", "ITER_BLOB"]

ITER_BLOB = "iter"

log = logging.getLogger("asyncnet.train")


def initial_state(cfg: TrainConfig, ds: Dataset) -> dict[str, np.ndarray]:
    """Every array the init net makes (parameters, optimizer state), plus the step counter."""
    model = build_model(cfg, ds.input_dim, ds.num_classes)
    ws = an.Workspace()
    ws.run_net_once(model.init_net)
    state = {k: np.ascontiguousarray(ws.fetch(k)) for k in ws.blobs() if isinstance(ws.fetch(k), np.ndarray)}
    state.setdefault(_iter_blob(model), np.zeros(1, np.int64))
    return state


def _iter_blob(model: Any) -> str:
    return getattr(model, "iter_blob", ITER_BLOB)


def hogwild_worker(cfg: TrainConfig, ds: Dataset, state: dict[str, np.ndarray], mutex: Any, stop: Any,
                   sync: Any, reporter: Any = None, start_epoch: int = 0) -> WorkerResult:
    """One Hogwild worker: train on the shared ``state`` from epoch ``start_epoch + 1`` until
    the epochs end or ``stop`` is set."""
    world, rank = sync.num_workers, sync.worker_id
    model = build_model(cfg, ds.input_dim, ds.num_classes)
    nets = WorkerNets(cfg, model, shared=state, iter_op="AtomicIter", mutex=mutex,
                      feeds=ds.feeds if ds.log is not None else None)
    result = WorkerResult(rank)
    try:
        sync.sync_gradients(np.zeros(1))  # start together: no epoch times a peer's start-up
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            metrics, arrays = _epoch(cfg, ds, nets, sync, stop, epoch, result, reporter)
            result.epochs.append(metrics)
            if reporter is not None:
                reporter.epoch_end(metrics, arrays)
            if stop.load():
                break
        if rank == 0:
            result.params = nets.params()
    except BaseException:
        stop.store(True)  # the others stop at their next step; the runner aborts their syncs
        raise
    finally:
        nets.close()
    return result


def _epoch(cfg: TrainConfig, ds: Dataset, nets: WorkerNets, sync: Any, stop: Any, epoch: int,
           result: WorkerResult, reporter: Any) -> tuple[EpochMetrics, dict[str, np.ndarray] | None]:
    """One epoch; returns its metrics and, when ``reporter`` saves the run, a copy of the shared
    arrays taken while every worker waits between the two epoch-end rounds (they hold still)."""
    world, rank = sync.num_workers, sync.worker_id
    xw, yw = worker_samples(ds.x_train, ds.y_train, epoch, cfg.seed, world, rank)
    batch = max(1, cfg.batch_size // world)  # as many samples in flight as one sync step
    if reporter is not None:
        reporter.epoch_start(epoch, num_batches(len(xw), batch))
    clock = EpochClock()
    clock.start()
    for b, (xb, yb) in enumerate(epoch_batches(xw, yw, batch, epoch, cfg.seed + 1 + rank)):
        if stop.load() or getattr(sync, "aborted", False):  # aborted: a peer failed or the run was interrupted;
            break  # the sync below raises SyncAbortedError
        if cfg.trace and result.trace_events is None and b == TRACE_STEP:
            (loss, acc), result.trace_events = nets.traced_step(xb, yb, rank)
        else:
            loss, acc = nets.step(xb, yb)
        if not math.isfinite(loss):
            raise diverged(cfg, f"epoch {epoch}, step {b + 1} (worker {rank})", loss)
        clock.add(loss, acc, len(xb))
        result.steps += 1
        if reporter is not None:
            reporter.batch(loss, acc, len(xb))
    stats = clock.stats()
    sync.sync_gradients(stats)  # everyone finished the epoch: the shared parameters hold still
    clock.stop()
    step = nets.iteration()  # every worker is between the two rounds: nobody steps
    arrays = nets.params() if wants_checkpoints(reporter) else None
    figures = np.zeros(3, np.float64)  # test loss, accuracy, AUC (NaN for a classifier)
    if rank == 0:
        figures[:] = nets.evaluate(ds.x_test, ds.y_test)
        if not math.isfinite(figures[0]):
            raise diverged(cfg, f"the end of epoch {epoch} (test loss)", float(figures[0]))
        if cfg.target_accuracy is not None and figures[1] >= cfg.target_accuracy:
            stop.store(True)
        figures[2] = 0.0 if math.isnan(figures[2]) else figures[2]  # NaN would poison the round's mean
        figures *= world  # the mean of (world * x, 0, ..., 0) is x: rank 0's figures reach all
    sync.sync_gradients(figures)
    batches = max(stats[2], 1.0)
    metrics = EpochMetrics(epoch=epoch, train_loss=float(stats[0] / batches), train_accuracy=float(stats[1] / batches),
                           test_loss=float(figures[0]), test_accuracy=float(figures[1]),
                           samples=int(round(stats[3] * world)), seconds=clock.seconds, lr=nets.lr(), step=step,
                           **(click_figures(ds, float(figures[0]), float(figures[2])) if ds.log is not None else {}))
    return metrics, arrays


def _process_worker(cfg: TrainConfig, ds: Dataset, spec: Any, mutex: Any, stop: Any, start_epoch: int,
                    sync: Any) -> WorkerResult:
    from asyncnet._shm import SharedArrays

    shared = SharedArrays.attach(spec)
    try:
        return hogwild_worker(cfg, ds, shared.arrays, mutex, stop, sync, start_epoch=start_epoch)
    finally:
        shared.close()


def run_hogwild(cfg: TrainConfig, ds: Dataset, reporter: Any = None, resume: Resume | None = None) -> list[WorkerResult]:
    """Run the Hogwild trainer on threads or processes (from ``resume`` if given); results in worker order."""
    from asyncnet.sync import run_parallel_workers

    if cfg.workers > HOGWILD_STALE_WORKERS:
        touched = ("of dlrm touches every parameter of its MLPs (only its embedding tables are updated by row)"
                   if cfg.model == "dlrm" else "of this dense model touches every parameter")
        log.warning("hogwild with %d workers: every step reads parameters up to %d updates old, and every update "
                    "%s; expect stale gradients to slow training or make it diverge (use fewer workers, a lower lr, "
                    "or --mode sync)", cfg.workers, cfg.workers - 1, touched)
    if cfg.optimizer == "adam":
        log.warning("hogwild with adam: the workers race on its two moment arrays, and one worker's first moment over "
                    "another's near-zero second moment can make a huge step; use --optimizer sgd or momentum")
    state = initial_state(cfg, ds)
    start = 0
    if resume is not None:
        for name, value in resume.arrays.items():
            np.copyto(state[name], value)
        start = resume.start_epoch
    if cfg.backend == "threads":
        from asyncnet.atomic import AtomicBool, Mutex

        mutex, stop = Mutex(), AtomicBool(False)

        def fn(sync: Any) -> WorkerResult:
            return hogwild_worker(cfg, ds, state, mutex, stop, sync, reporter if sync.worker_id == 0 else None, start)

        return run_parallel_workers(cfg.num_workers, fn, backend="threads", timeout=cfg.timeout)
    if cfg.backend == "processes":
        from asyncnet.atomic import SharedAtomicBool, SharedMutex
        from asyncnet._shm import SharedArrays

        mutex = SharedMutex()  # its ``with`` locks it, so it is closed explicitly
        try:
            with SharedArrays.create(state) as shared, SharedAtomicBool(False) as stop:
                fn = partial(_process_worker, cfg, ds, shared.spec, mutex, stop, start)
                results = run_parallel_workers(cfg.num_workers, fn, backend="processes", timeout=cfg.timeout)
        finally:
            mutex.close()
        if reporter is not None:
            for m in results[0].epochs:
                reporter.epoch_end(m)
        return results
    raise ValueError(f"hogwild runs on the threads or processes backend, not {cfg.backend!r} "
                     "(lock-free shared parameters need shared memory)")
