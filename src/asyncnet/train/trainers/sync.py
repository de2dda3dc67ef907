"""The ``local`` and ``sync`` trainers: one worker, or W data-parallel replicas.

Every step, each of the W workers takes its contiguous shard of the same global batch, runs
its train net (forward, backward, ``Allreduce`` of the gradients through the GradientSync,
update) and so applies the same averaged gradient to the same parameters: the replicas stay
bit-identical. The batch order, the shards and the reduction order (worker order) do not
depend on timing, so a run with a fixed seed gives the same bits every time, on threads or
processes alike.

At the end of each epoch the workers average their train statistics through the same sync
(one tiny round) and each evaluates its replica on the test set (identical replicas, so every
worker agrees on when to stop early).

    >>> from asyncnet.train.trainers import TrainConfig, train
    >>> result = train(TrainConfig(mode="sync", workers=2, epochs=1))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from asyncnet.train.data import Dataset, epoch_batches, num_batches, shard
from asyncnet.train.report import EpochMetrics
from asyncnet.train.trainers._common import (EpochClock, Resume, TrainConfig, WorkerNets, WorkerResult, build_model,
                                             click_figures, diverged, wants_checkpoints)

__all__ = ["sync_worker", "run_sync"]

TRACE_STEP = 1  # every worker traces the second step of its first epoch (the first one warms caches up)


def sync_worker(cfg: TrainConfig, ds: Dataset, sync: Any, reporter: Any = None, resume: Resume | None = None) -> WorkerResult:
    """Train one data-parallel worker to the end; ``sync`` is any GradientSync. With ``resume``
    the worker starts from that checkpoint, at the epoch after its last one."""
    world, rank = sync.num_workers, sync.worker_id
    model = build_model(cfg, ds.input_dim, ds.num_classes)
    nets = WorkerNets(cfg, model, sync=sync, feeds=ds.feeds if ds.log is not None else None)
    result = WorkerResult(rank)
    try:
        if resume is not None:
            nets.load(resume.arrays)
        if world > 1:
            sync.sync_gradients(np.zeros(1))  # start together: no epoch times a peer's start-up
        for epoch in range((resume.start_epoch if resume else 0) + 1, cfg.epochs + 1):
            metrics = _epoch(cfg, ds, nets, sync, epoch, result, reporter)
            result.epochs.append(metrics)
            if reporter is not None:
                reporter.epoch_end(metrics, nets.params() if wants_checkpoints(reporter) else None)
            if cfg.target_accuracy is not None and metrics.test_accuracy >= cfg.target_accuracy:
                break
        if rank == 0:
            result.params = nets.params()
    finally:
        nets.close()
    return result


def _epoch(cfg: TrainConfig, ds: Dataset, nets: WorkerNets, sync: Any, epoch: int, result: WorkerResult,
           reporter: Any) -> EpochMetrics:
    world, rank = sync.num_workers, sync.worker_id
    if reporter is not None:
        reporter.epoch_start(epoch, num_batches(len(ds.x_train), cfg.batch_size, world))
    clock = EpochClock()
    for b, (xb, yb) in enumerate(epoch_batches(ds.x_train, ds.y_train, cfg.batch_size, epoch, cfg.seed, world)):
        xs, ys = shard(xb, yb, world, rank)
        clock.start()
        if cfg.trace and result.trace_events is None and b == TRACE_STEP:
            (loss, acc), result.trace_events = nets.traced_step(xs, ys, rank)
        else:
            loss, acc = nets.step(xs, ys)
        clock.stop()
        if not math.isfinite(loss):
            raise diverged(cfg, f"epoch {epoch}, step {b + 1} (worker {rank})", loss)
        clock.add(loss, acc, len(xb))
        result.steps += 1
        if reporter is not None:
            reporter.batch(loss, acc, len(xb))
    stats = clock.stats()
    if world > 1:
        sync.sync_gradients(stats)  # mean over the workers of [loss_sum, acc_sum, batches, samples]
    test_loss, test_acc, test_auc = nets.evaluate(ds.x_test, ds.y_test)
    if not math.isfinite(test_loss):
        raise diverged(cfg, f"the end of epoch {epoch} (test loss, worker {rank})", test_loss)
    return EpochMetrics(epoch=epoch, train_loss=float(stats[0] / stats[2]), train_accuracy=float(stats[1] / stats[2]),
                        test_loss=test_loss, test_accuracy=test_acc, samples=clock.samples, seconds=clock.seconds,
                        lr=nets.lr(), step=nets.iteration(), **click_figures(ds, test_loss, test_auc))


def run_sync(cfg: TrainConfig, ds: Dataset, reporter: Any = None, resume: Resume | None = None) -> list[WorkerResult]:
    """Run the local or sync trainer on threads or processes; results in worker order.

    With threads, worker 0 drives ``reporter`` live; with processes the epochs are reported
    when the workers are done.
    """
    from asyncnet.sync import LocalGradientSync, run_parallel_workers

    if cfg.num_workers == 1:
        return [sync_worker(cfg, ds, LocalGradientSync(), reporter, resume)]
    if cfg.backend == "threads":
        def fn(sync: Any) -> WorkerResult:
            return sync_worker(cfg, ds, sync, reporter if sync.worker_id == 0 else None, resume)

        return run_parallel_workers(cfg.num_workers, fn, backend="threads", timeout=cfg.timeout)
    if cfg.backend == "processes":
        results = run_parallel_workers(cfg.num_workers, partial(sync_worker, cfg, ds, reporter=None, resume=resume),
                                       backend="processes", timeout=cfg.timeout)
        if reporter is not None:
            for m in results[0].epochs:
                reporter.epoch_end(m)
        return results
    raise ValueError(f"run_sync handles the threads and processes backends, not {cfg.backend!r}")
