"""The one epoch loop, its strategies (local, sync, Hogwild) and its launchers (threads,
processes, torchrun).

Every worker runs :func:`run_worker`: for each epoch, the strategy's batches (one training step
each, the loss checked by the :class:`DivergenceGuard`), then the strategy's end of epoch (the
figures every worker agrees on), then rank 0 saves the run (:class:`~asyncnet.train.report.RunWriter`)
and reports. A strategy supplies the sharding, the update and the end-of-epoch hooks:

- **sync** (and **local**, one worker): every step each of the W workers takes its contiguous
  shard of the same global batch; the train net all-reduces the gradients (bucketed
  ``AllreduceStart``/``Wait``) and applies the same mean to the same parameters, so the
  replicas stay bit-identical and a fixed seed gives the same bits on threads or processes.
  At the epoch's end the workers average their train figures (``sync.all_reduce_mean``) and
  each evaluates its replica (identical replicas agree on when to stop).
- **hogwild**: one set of parameters (the same arrays, or one shared-memory segment across
  processes), updated in place by every worker without locks (Niu et al. 2011); each worker
  trains on its own part of the epoch, ``batch_size / W`` samples a step; the step counter is
  an ``AtomicIter`` under a shared mutex, and an atomic stop flag ends the run early. At the
  epoch's end the workers meet (``all_reduce_mean`` of their figures), rank 0 snapshots and
  evaluates the parameters while they hold still, and ``broadcast`` hands its figures to all.

Batches are a pure function of (seed, epoch), so a resumed run (:class:`Resume`) sees the data
it would have seen unbroken; the random ops (Dropout) of each worker are seeded from (seed,
rank) and their generators' states are checkpointed with the parameters (every worker's,
gathered by :func:`gather_random_states`), so in sync mode a resumed run, also from a
checkpoint taken inside an epoch (``checkpoint_every``), gives the bits of an unbroken one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from asyncnet.errors import TrainConfigError, TrainingDivergedError
from asyncnet.model.checkpoint import RANDOM
from asyncnet.train.config import HOGWILD_STALE_WORKERS, TrainConfig
from asyncnet.train.data import Dataset, epoch_batches, num_batches, shard, worker_samples
from asyncnet.train.program import Program, build_program
from asyncnet.train.report import EpochMetrics
from asyncnet.train.worker import STATE_WORDS, EpochClock, WorkerNets, WorkerResult

__all__ = [
    "Resume",
    "DivergenceGuard",
    "run_worker",
    "launch",
    "SyncStrategy",
    "HogwildStrategy",
    "TRACE_STEP",
    "TRAINER_SYNC",
    "check_trainer_sync",
    "gather_random_states",
    "restore_random_states",
]

log = logging.getLogger("asyncnet.train")

TRACE_STEP = 1  # every worker traces the second step of its first epoch (the first one warms caches up)


@dataclass(frozen=True)
class Resume:
    """Where a resumed run starts: the checkpoint's arrays (parameters, optimizer state,
    ``iter``), the epochs already trained (their metrics) and, for a checkpoint taken inside an
    epoch, ``partial``: that epoch's number, its batches done and their statistics."""

    arrays: dict[str, np.ndarray]
    epochs: tuple[EpochMetrics, ...] = ()
    partial: dict[str, Any] | None = None

    @property
    def start_epoch(self) -> int:
        """The last epoch already trained (0: none)."""
        return len(self.epochs)


class DivergenceGuard:
    """Fails the run at a loss that is not finite or that exploded: above ``factor`` times a
    reference, log(classes) for a classifier (its loss at chance: 2.30 for 10 classes), else the
    first step's loss. ``factor`` 0 keeps only the NaN/inf check.

        >>> g = DivergenceGuard(TrainConfig(), classes=10)
        >>> g.check(2.0, "step 1")
        >>> g.check(1e4, "step 2")
        Traceback (most recent call last):
        ...
        asyncnet.errors.TrainingDivergedError: training diverged: the loss is 1e+04 at step 2, above 100 x log(10 classes) = 230; lower the learning rate (lr 0.2, --lr), or turn the check off with --divergence-factor 0
    """

    def __init__(self, cfg: TrainConfig, classes: int | None):
        self.cfg = cfg
        self.factor = float(cfg.divergence_factor)
        self.limit = self.factor * math.log(classes) if classes and classes >= 2 and self.factor else None
        self.what = f"{self.factor:g} x log({classes} classes)" if self.limit is not None else ""

    def check(self, loss: float, where: str) -> None:
        """Raise :class:`TrainingDivergedError` when ``loss`` (at ``where``) diverged."""
        if not math.isfinite(loss):
            raise TrainingDivergedError(f"training diverged: the loss is {loss} at {where}; {self._fix()}")
        if self.limit is None:
            if not self.factor or loss <= 0:
                return
            self.limit, self.what = self.factor * loss, f"{self.factor:g} x the first step's loss"
        if loss > self.limit:
            raise TrainingDivergedError(
                f"training diverged: the loss is {loss:.3g} at {where}, above {self.what} = "
                f"{self.limit:.3g}; {self._fix()}, or turn the check off with "
                "--divergence-factor 0"
            )

    def _fix(self) -> str:
        fix = f"lower the learning rate (lr {self.cfg.lr:g}, --lr)"
        if self.cfg.mode == "hogwild":
            fix += f" or the number of Hogwild workers ({self.cfg.workers}, --workers)"
        return fix


def click_figures(ds: Any, test_loss: float, test_auc: float) -> dict[str, float]:
    """The EpochMetrics fields of a click model (``test_auc`` not NaN): AUC, log loss and the
    ground truth's AUC; none for a classifier."""
    if math.isnan(test_auc):
        return {}
    return {"test_auc": float(test_auc), "test_log_loss": float(test_loss), "optimal_auc": ds.optimal_auc()}


#: what the trainers use of a sync: the Allreduce ops call only ``sync_gradients``; the epoch
#: loop also meets (``barrier``), averages its figures (``all_reduce_mean``) and hands rank 0's
#: to the others (``broadcast``)
TRAINER_SYNC = ("num_workers", "worker_id", "sync_gradients", "barrier", "all_reduce_mean", "broadcast")


def check_trainer_sync(sync: Any) -> None:
    """Raise one :class:`~asyncnet.errors.TrainConfigError` naming every member of
    :data:`TRAINER_SYNC` that ``sync`` lacks (a user's sync written for the Allreduce op alone).

        >>> class OnlyGradients:
        ...     num_workers, worker_id = 1, 0
        ...     def sync_gradients(self, grads): pass
        >>> check_trainer_sync(OnlyGradients())
        Traceback (most recent call last):
        ...
        asyncnet.errors.TrainConfigError: the trainers need a sync with num_workers, worker_id, sync_gradients(grads), barrier(), all_reduce_mean(values) and broadcast(values, root) (the asyncnet.sync.GradientSync protocol); OnlyGradients lacks barrier, all_reduce_mean, broadcast
    """
    attrs = ("num_workers", "worker_id")
    missing = [m for m in TRAINER_SYNC if not (hasattr(sync, m) if m in attrs else callable(getattr(sync, m, None)))]
    if missing:
        raise TrainConfigError(
            "the trainers need a sync with num_workers, worker_id, sync_gradients(grads), barrier(), "
            "all_reduce_mean(values) and broadcast(values, root) (the asyncnet.sync.GradientSync "
            f"protocol); {type(sync).__name__} lacks {', '.join(missing)}"
        )


def gather_random_states(strategy: Any) -> np.ndarray | None:
    """Every worker's random generators, uint64 [workers, ops, words], on every worker (one
    broadcast round per worker, each word sent as two exact 32-bit halves in float64); None,
    with no round, for a model without random ops. Every worker calls it at the same point."""
    nets, world, rank = strategy.nets, strategy.world, strategy.rank
    if not nets.random_ops:
        return None
    mine = nets.random_states()
    out = np.zeros((world, *mine.shape), np.uint64)
    for root in range(world):
        halves = _halves(mine) if root == rank else np.zeros(2 * mine.size, np.float64)
        if world > 1:
            strategy.sync.broadcast(halves, root=root)
        out[root] = _joined(halves).reshape(mine.shape)
    return out


def _halves(words: np.ndarray) -> np.ndarray:
    w = words.reshape(-1)
    return np.stack([w >> np.uint64(32), w & np.uint64(0xFFFFFFFF)], axis=1).astype(np.float64).reshape(-1)


def _joined(halves: np.ndarray) -> np.ndarray:
    hl = halves.reshape(-1, 2).astype(np.uint64)
    return (hl[:, 0] << np.uint64(32)) | hl[:, 1]


def restore_random_states(strategy: Any, arrays: dict[str, np.ndarray] | None) -> None:
    """Continue this worker's random generators from a checkpoint's :data:`RANDOM` entry; a
    checkpoint of another number of workers or random ops leaves them as seeded (logged)."""
    states = None if not arrays else arrays.get(RANDOM)
    nets = strategy.nets
    if states is None or not nets.random_ops:
        return
    want = (strategy.world, nets.random_ops, STATE_WORDS)
    if states.shape != want:
        log.warning(
            "the checkpoint's random generators are for [workers, ops, words] = %s, this run has %s: "
            "the Dropout masks start from the seed",
            list(states.shape),
            list(want),
        )
        return
    nets.set_random_states(states[strategy.rank])


def _with_states(arrays: dict[str, np.ndarray], states: np.ndarray | None) -> dict[str, np.ndarray]:
    if states is not None:
        arrays[RANDOM] = states
    return arrays


# -- strategies ------------------------------------------------------------------------------
class SyncStrategy:
    """Data-parallel replicas (one of them: local mode): sharded global batches, all-reduced
    gradients, figures averaged at the epoch's end."""

    mid_epoch_checkpoints = True

    def __init__(self, cfg: TrainConfig, ds: Dataset, program: Program, sync: Any):
        check_trainer_sync(sync)
        self.cfg, self.ds, self.sync = cfg, ds, sync
        self.world, self.rank = sync.num_workers, sync.worker_id
        self.nets = WorkerNets(cfg, program, sync=sync, feeds=ds.feeds if ds.log is not None else None, rank=self.rank)

    def start(self, resume: Resume | None) -> None:
        if resume is not None:
            self.nets.load(resume.arrays)
            restore_random_states(self, resume.arrays)
        if self.world > 1:
            self.sync.barrier()  # start together: no epoch times a peer's start-up

    def num_batches(self) -> int:
        return num_batches(len(self.ds.x_train), self.cfg.batch_size, self.world)

    def batches(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """(this worker's shard, the global batch's size) of every step of ``epoch``."""
        for xb, yb in epoch_batches(
            self.ds.x_train, self.ds.y_train, self.cfg.batch_size, epoch, self.cfg.seed, self.world
        ):
            xs, ys = shard(xb, yb, self.world, self.rank)
            yield xs, ys, len(xb)

    def keep_going(self) -> bool:
        return True

    def gather_clocks(self, clock: EpochClock) -> list[dict[str, Any]]:
        """Every worker's epoch statistics so far (one broadcast round per worker), as a
        checkpoint inside an epoch keeps them."""
        out = []
        for root in range(self.world):
            figures = clock.figures() if root == self.rank else np.zeros(5, np.float64)
            if self.world > 1:
                self.sync.broadcast(figures, root=root)
            out.append(EpochClock.from_figures(figures).state())
        return out

    def end_epoch(self, epoch: int, clock: EpochClock, snapshot: bool) -> tuple[EpochMetrics, dict[str, Any] | None]:
        stats = clock.stats()
        if self.world > 1:
            self.sync.all_reduce_mean(stats)  # mean over the workers of [loss_sum, acc_sum, batches, samples]
        test_loss, test_acc, test_auc = self.nets.evaluate(self.ds.x_test, self.ds.y_test)
        metrics = EpochMetrics(
            epoch=epoch,
            train_loss=float(stats[0] / stats[2]),
            train_accuracy=float(stats[1] / stats[2]),
            test_loss=test_loss,
            test_accuracy=test_acc,
            samples=clock.samples,
            seconds=clock.seconds,
            lr=self.nets.lr(),
            step=self.nets.iteration(),
            **click_figures(self.ds, test_loss, test_auc),
        )
        return metrics, (self.nets.params() if snapshot else None)

    def stop_after(self, metrics: EpochMetrics) -> bool:
        return self.cfg.target_accuracy is not None and metrics.test_accuracy >= self.cfg.target_accuracy

    def failed(self) -> None:
        pass


class HogwildStrategy:
    """Lock-free workers on one set of parameters ``state`` (updated in place), a shared
    ``mutex`` for the step counter and a shared ``stop`` flag."""

    mid_epoch_checkpoints = False  # the workers never hold still inside an epoch

    def __init__(
        self,
        cfg: TrainConfig,
        ds: Dataset,
        program: Program,
        sync: Any,
        state: dict[str, np.ndarray],
        mutex: Any,
        stop: Any,
    ):
        check_trainer_sync(sync)
        self.cfg, self.ds, self.sync, self.stop = cfg, ds, sync, stop
        self.world, self.rank = sync.num_workers, sync.worker_id
        self.batch = max(1, cfg.batch_size // self.world)  # as many samples in flight as one sync step
        self.nets = WorkerNets(
            cfg,
            program,
            shared=state,
            iter_op="AtomicIter",
            mutex=mutex,
            feeds=ds.feeds if ds.log is not None else None,
            rank=self.rank,
        )
        self._part: tuple[np.ndarray, np.ndarray] | None = None

    def start(self, resume: Resume | None) -> None:
        if resume is not None:
            restore_random_states(self, resume.arrays)
        self.sync.barrier()  # the state is loaded by the launcher; start together

    def _samples(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        return worker_samples(self.ds.x_train, self.ds.y_train, epoch, self.cfg.seed, self.world, self.rank)

    def num_batches(self) -> int:
        xw, _ = self._part if self._part is not None else self._samples(1)
        return num_batches(len(xw), self.batch)

    def batches(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        self._part = xw, yw = self._samples(epoch)
        for xb, yb in epoch_batches(xw, yw, self.batch, epoch, self.cfg.seed + 1 + self.rank):
            yield xb, yb, len(xb)

    def keep_going(self) -> bool:
        # aborted: a peer failed or the run was interrupted; the next round raises SyncAbortedError
        return not (self.stop.load() or getattr(self.sync, "aborted", False))

    def end_epoch(self, epoch: int, clock: EpochClock, snapshot: bool) -> tuple[EpochMetrics, dict[str, Any] | None]:
        stats = clock.stats()
        self.sync.all_reduce_mean(stats)  # everyone finished the epoch: the shared parameters hold still
        clock.stop()
        step = self.nets.iteration()  # every worker is between the two rounds: nobody steps
        arrays = self.nets.params() if snapshot else None
        figures = np.zeros(3, np.float64)  # test loss, accuracy, AUC (NaN for a classifier)
        if self.rank == 0:
            figures[:] = self.nets.evaluate(self.ds.x_test, self.ds.y_test)
            target = self.cfg.target_accuracy
            if math.isfinite(figures[0]) and target is not None and figures[1] >= target:
                self.stop.store(True)
            figures[2] = 0.0 if math.isnan(figures[2]) else figures[2]
        self.sync.broadcast(figures, root=0)  # rank 0's figures reach every worker
        batches = max(stats[2], 1.0)
        metrics = EpochMetrics(
            epoch=epoch,
            train_loss=float(stats[0] / batches),
            train_accuracy=float(stats[1] / batches),
            test_loss=float(figures[0]),
            test_accuracy=float(figures[1]),
            samples=int(round(stats[3] * self.world)),
            seconds=clock.seconds,
            lr=self.nets.lr(),
            step=step,
            **(click_figures(self.ds, float(figures[0]), float(figures[2])) if self.ds.log is not None else {}),
        )
        return metrics, arrays

    def stop_after(self, metrics: EpochMetrics) -> bool:
        return bool(self.stop.load())

    def failed(self) -> None:
        self.stop.store(True)  # the others stop at their next step; the runner aborts their syncs


# -- the loop --------------------------------------------------------------------------------
def run_worker(
    cfg: TrainConfig,
    strategy: Any,
    program: Program,
    reporter: Any = None,
    resume: Resume | None = None,
    writer: Any = None,
) -> WorkerResult:
    """Train one worker to the end with ``strategy``; rank 0 saves the run through ``writer``
    (a :class:`~asyncnet.train.report.RunWriter`) and drives ``reporter``."""
    rank = strategy.rank
    nets = strategy.nets
    result = WorkerResult(rank)
    guard = DivergenceGuard(cfg, program.classes)
    try:
        strategy.start(resume)
        first = (resume.start_epoch if resume else 0) + 1
        for epoch in range(first, cfg.epochs + 1):
            partial_state = resume.partial if resume is not None and epoch == first else None
            metrics = _epoch(cfg, strategy, program, epoch, result, reporter, writer, guard, partial_state)
            result.epochs.append(metrics)
            if strategy.stop_after(metrics):
                break
        if rank == 0:
            result.params = nets.params()
    except BaseException:
        strategy.failed()
        raise
    finally:
        nets.close()
    return result


def _epoch(
    cfg: TrainConfig,
    strategy: Any,
    program: Program,
    epoch: int,
    result: WorkerResult,
    reporter: Any,
    writer: Any,
    guard: DivergenceGuard,
    resumed: dict[str, Any] | None,
) -> EpochMetrics:
    nets, rank = strategy.nets, strategy.rank
    skip = int(resumed["batches"]) if resumed and resumed.get("epoch") == epoch else 0
    clock = EpochClock.restored(resumed["workers"][rank]) if skip else EpochClock()
    # every worker takes part in a save's rounds, whether or not it holds the writer (under torchrun
    # only rank 0 does): the rounds must not depend on anything that differs between ranks
    every = cfg.checkpoint_every if strategy.mid_epoch_checkpoints else None
    writer = writer if rank == 0 else None
    whole = not strategy.mid_epoch_checkpoints  # Hogwild times the epoch through its first round
    if reporter is not None:
        reporter.epoch_start(epoch, strategy.num_batches())
    if whole:
        clock.start()
    for b, (xb, yb, samples) in enumerate(strategy.batches(epoch)):
        if b < skip:
            continue
        if not strategy.keep_going():
            break
        if not whole:
            clock.start()
        if cfg.trace and result.trace_events is None and b == TRACE_STEP:
            (loss, acc), result.trace_events = nets.traced_step(xb, yb, rank)
        else:
            loss, acc = nets.step(xb, yb)
        if not whole:
            clock.stop()
        guard.check(loss, f"epoch {epoch}, step {b + 1} (worker {rank})")
        clock.add(loss, acc, samples)
        result.steps += 1
        if reporter is not None:
            reporter.batch(loss, acc, samples)
        if every and nets.iteration() % every == 0:  # the same step on every replica
            clocks = strategy.gather_clocks(clock)
            states = gather_random_states(strategy)
            if writer is not None:
                writer.mid_epoch(
                    program, _with_states(nets.params(), states), {"epoch": epoch, "batches": b + 1, "workers": clocks}
                )
    metrics, arrays = strategy.end_epoch(epoch, clock, snapshot=writer is not None)
    states = gather_random_states(strategy)  # every worker, every epoch: the final checkpoint has them too
    if rank == 0:
        result.random_states = states
    if arrays is not None:
        _with_states(arrays, states)
    guard.check(metrics.test_loss, f"the end of epoch {epoch} (test loss, worker {rank})")
    if writer is not None:
        writer.epoch_end(program, arrays, metrics)
    if reporter is not None:
        reporter.epoch_end(metrics)
    return metrics


# -- launchers -------------------------------------------------------------------------------
def launch(
    cfg: TrainConfig,
    ds: Dataset,
    model: Any = None,
    reporter: Any = None,
    resume: Resume | None = None,
    writer: Any = None,
) -> list[WorkerResult]:
    """Run every worker of ``cfg`` (threads or processes; the torch backend is
    :func:`launch_torch`); results in worker order. ``model``: a user's model (a ModelHelper
    or a function building one), else ``cfg.model``. With threads worker 0 drives
    ``reporter`` live; with processes the epochs are reported when the workers are done."""
    if cfg.mode == "hogwild":
        return _launch_hogwild(cfg, ds, model, reporter, resume, writer)
    from asyncnet.sync import LocalGradientSync, run_parallel_workers

    if cfg.num_workers == 1:
        return [_sync_worker(cfg, ds, model, reporter, resume, writer, LocalGradientSync())]
    if cfg.backend == "threads":

        def fn(sync: Any) -> WorkerResult:
            return _sync_worker(cfg, ds, model, reporter if sync.worker_id == 0 else None, resume, writer, sync)

        return run_parallel_workers(cfg.num_workers, fn, backend="threads", timeout=cfg.timeout)
    if cfg.backend == "processes":
        fn = partial(_sync_worker, cfg, ds, model, None, resume, writer)
        return _replayed(run_parallel_workers(cfg.num_workers, fn, backend="processes", timeout=cfg.timeout), reporter)
    raise ValueError(f"launch handles the threads and processes backends, not {cfg.backend!r}")


def _sync_worker(
    cfg: TrainConfig, ds: Dataset, model: Any, reporter: Any, resume: Resume | None, writer: Any, sync: Any
) -> WorkerResult:
    program = build_program(cfg, ds.input_dim, ds.num_classes, model)
    return run_worker(cfg, SyncStrategy(cfg, ds, program, sync), program, reporter, resume, writer)


def _replayed(results: list[WorkerResult], reporter: Any) -> list[WorkerResult]:
    if reporter is not None:
        for m in results[0].epochs:
            reporter.epoch_end(m)
    return results


def initial_state(cfg: TrainConfig, ds: Dataset, model: Any = None) -> dict[str, np.ndarray]:
    """Every array the init net makes (parameters, optimizer state, the step counter)."""
    import asyncnet as an

    program = build_program(cfg, ds.input_dim, ds.num_classes, model)
    ws = an.Workspace()
    ws.run_net_once(program.init_net)
    # asarray(order="C"), not ascontiguousarray: that one makes a 0-d blob 1-d
    state = {k: np.asarray(ws.fetch(k), order="C") for k in ws.blobs() if isinstance(ws.fetch(k), np.ndarray)}
    state.setdefault("iter", np.zeros(1, np.int64))
    return state


def _hogwild_worker(
    cfg: TrainConfig,
    ds: Dataset,
    model: Any,
    state: dict[str, np.ndarray],
    mutex: Any,
    stop: Any,
    reporter: Any,
    resume: Resume | None,
    writer: Any,
    sync: Any,
) -> WorkerResult:
    program = build_program(cfg, ds.input_dim, ds.num_classes, model)
    return run_worker(
        cfg, HogwildStrategy(cfg, ds, program, sync, state, mutex, stop), program, reporter, resume, writer
    )


def _hogwild_process(
    cfg: TrainConfig,
    ds: Dataset,
    model: Any,
    spec: Any,
    mutex: Any,
    stop: Any,
    resume: Resume | None,
    writer: Any,
    sync: Any,
) -> WorkerResult:
    import warnings

    from asyncnet._shm import SharedArrays
    from asyncnet.atomic import OwnerDiedWarning

    shared = SharedArrays.attach(spec)
    try:
        with warnings.catch_warnings():
            # a peer that died holding the step counter's mutex fails the whole run, and the
            # supervisor's one line names it: the lock's own warning would be a second line
            warnings.simplefilter("ignore", OwnerDiedWarning)
            return _hogwild_worker(cfg, ds, model, shared.arrays, mutex, stop, None, resume, writer, sync)
    finally:
        shared.close()


def _launch_hogwild(
    cfg: TrainConfig, ds: Dataset, model: Any, reporter: Any, resume: Resume | None, writer: Any
) -> list[WorkerResult]:
    from asyncnet.sync import run_parallel_workers

    _warn_hogwild(cfg)
    state = initial_state(cfg, ds, model)
    if resume is not None:
        for name, value in resume.arrays.items():
            if name != RANDOM:
                np.copyto(state[name], value)
        # the arrays are in the shared state already; each worker continues its own generators
        resume = Resume({k: v for k, v in resume.arrays.items() if k == RANDOM}, resume.epochs)
    if cfg.backend == "threads":
        from asyncnet.atomic import AtomicBool, Mutex

        mutex, stop = Mutex(), AtomicBool(False)

        def fn(sync: Any) -> WorkerResult:
            return _hogwild_worker(
                cfg, ds, model, state, mutex, stop, reporter if sync.worker_id == 0 else None, resume, writer, sync
            )

        return run_parallel_workers(cfg.num_workers, fn, backend="threads", timeout=cfg.timeout)
    if cfg.backend == "processes":
        from asyncnet._shm import SharedArrays
        from asyncnet.atomic import SharedAtomicBool, SharedMutex

        pmutex = SharedMutex()  # its ``with`` locks it, so it is closed explicitly
        try:
            with SharedArrays.create(state) as shared, SharedAtomicBool(False) as pstop:
                fn = partial(_hogwild_process, cfg, ds, model, shared.spec, pmutex, pstop, resume, writer)
                results = run_parallel_workers(cfg.num_workers, fn, backend="processes", timeout=cfg.timeout)
        finally:
            pmutex.close()
        return _replayed(results, reporter)
    raise ValueError(
        f"hogwild runs on the threads or processes backend, not {cfg.backend!r} "
        "(lock-free shared parameters need shared memory)"
    )


def _warn_hogwild(cfg: TrainConfig) -> None:
    if cfg.workers > HOGWILD_STALE_WORKERS:
        touched = (
            "of dlrm touches every parameter of its MLPs (only its embedding tables are updated by row)"
            if cfg.model == "dlrm"
            else "of this dense model touches every parameter"
        )
        log.warning(
            "hogwild with %d workers: every step reads parameters up to %d updates old, and every update "
            "%s; expect stale gradients to slow training or make it diverge (use fewer workers, a lower lr, "
            "or --mode sync)",
            cfg.workers,
            cfg.workers - 1,
            touched,
        )
    if cfg.optimizer == "adam":
        log.warning(
            "hogwild with adam: the workers race on its two moment arrays, and one worker's first moment over "
            "another's near-zero second moment can make a huge step; use --optimizer sgd or momentum"
        )


def launch_torch(
    cfg: TrainConfig,
    ds: Dataset,
    model: Any = None,
    reporter: Any = None,
    resume: Resume | None = None,
    writer: Any = None,
) -> tuple[TrainConfig, WorkerResult, int]:
    """Run this torchrun rank's worker(s) in the ``torch.distributed`` process group (made from
    torchrun's environment when none exists yet); returns the config (workers = ranks x
    threads), rank 0's result here, and this rank."""
    if cfg.mode != "sync":
        raise ValueError(
            f"--backend torch trains in sync mode (data-parallel ranks), not {cfg.mode}: "
            "hogwild needs shared memory and local has one worker"
        )
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is an optional dependency
        raise ValueError("--backend torch needs PyTorch: pip install 'asyncnet[torch]'") from None
    from datetime import timedelta

    if dist.is_initialized():
        return _run_ranks(cfg, ds, model, reporter, resume, writer)
    if not under_torchrun():
        raise ValueError(
            "--backend torch runs under torchrun, e.g. torchrun --nproc-per-node 2 -m asyncnet train --backend torch"
        )
    from asyncnet._parent_watch import watch_parent

    with watch_parent() as watch:  # torchrun's agent killed: this rank stops instead of training on as an orphan
        with watch.hard():  # the store's connect holds the GIL: the watching thread cannot run
            dist.init_process_group("gloo", timeout=timedelta(seconds=cfg.timeout))
        try:
            return _run_ranks(cfg, ds, model, reporter, resume, writer)
        finally:
            dist.destroy_process_group()


def _run_ranks(
    cfg: TrainConfig, ds: Dataset, model: Any, reporter: Any, resume: Resume | None, writer: Any
) -> tuple[TrainConfig, WorkerResult, int]:
    """This rank's worker(s) in the initialized ``torch.distributed`` process group."""
    import torch.distributed as dist

    from asyncnet.sync import LocalGradientSync, TorchDistributedGradientSync

    world, rank = dist.get_world_size(), dist.get_rank()
    threads = cfg.threads_per_rank
    cfg = cfg.with_(workers=world * threads)
    sync = TorchDistributedGradientSync() if world > 1 else LocalGradientSync()
    main = rank == 0
    if threads == 1:
        result = _sync_worker(cfg, ds, model, reporter if main else None, resume, writer if main else None, sync)
    else:  # threads x ranks: threads average in shared memory, one all-reduce per rank
        from asyncnet.sync.hierarchical import run_hierarchical

        def fn(s: Any) -> WorkerResult:
            lead = s.worker_id == 0
            return _sync_worker(cfg, ds, model, reporter if lead else None, resume, writer if lead else None, s)

        result = run_hierarchical(threads, sync, fn, cfg.timeout)[0]
    return cfg, result, rank


def under_torchrun() -> bool:
    """True when torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is set."""
    import os

    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
