"""kizzasi's data-parallel helpers, in asyncnet.

kizzasi is a family of Rust crates for machine learning; its ``kizzasi-model`` crate has a
``distributed`` module that defined ``GradientSync``, ``LocalGradientSync``,
``ThreadedGradientSync`` and ``run_parallel_workers`` (asyncnet's :mod:`asyncnet.sync` keeps
those names and their meaning) and, around them, the helpers below: ``partition_indices``,
``average_gradients``, ``sgd_step``, ``SharedGradientStore``, ``DataParallelModel``,
``DistributedConfig``, ``GradientStrategy``, ``CommBackend`` and its weight checkpoints. This
module gives them kizzasi's names and meaning, without its faults: every wait has a timeout and
an abort, sums run in worker order, ``broadcast_weights`` broadcasts, and every gradient
(biases included) is synced. They are also importable from :mod:`asyncnet.sync`.

- :func:`partition_indices`: round-robin shard of a dataset for one rank;
- :func:`average_gradients`: mean of named buffers over workers, summed in worker order;
- :func:`sgd_step`: ``w -= lr * g`` in place, names without a weight skipped;
- :class:`SharedGradientStore`: ``push(rank, grads)`` then ``all_reduce_mean(rank)``, returning
  as soon as every rank has pushed (one thread may push for several), self-draining, with
  ``clear()``, a timeout and ``abort()``;
- :class:`DataParallelModel`: one replica of the weights per rank, kept identical by a real
  ``broadcast_weights`` and by applying the same averaged step everywhere (every gradient,
  biases included, is synced);
- :class:`DistributedConfig`, :class:`GradientStrategy`, :class:`CommBackend`: plain settings;
- :class:`CheckpointManager`, :class:`CheckpointMetadata`: kizzasi's weight + bias checkpoints (npz,
  crash-safe, last K kept; kizzasi's JSON ones read too) and best-loss tracking.

    >>> import numpy as np
    >>> partition_indices(10, 3, 1)
    [1, 4, 7]
    >>> average_gradients([{"w": np.array([2.0, 4.0])}, {"w": np.array([4.0, 8.0])}])["w"]
    array([3., 6.])
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet._atomicio import atomic_write_npz
from asyncnet.errors import CheckpointError, SyncAbortedError, SyncError, SyncMismatchError, SyncTimeoutError
from asyncnet.sync.base import GradientSync, LocalGradientSync

__all__ = [
    "partition_indices",
    "average_gradients",
    "sgd_step",
    "SharedGradientStore",
    "DataParallelModel",
    "DistributedConfig",
    "GradientStrategy",
    "CommBackend",
    "CheckpointManager",
    "CheckpointMetadata",
]


def _check_rank(rank: int, world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")


def _float_copy(value: Any) -> np.ndarray:
    """A fresh floating-point array of ``value`` (an array or a list; integers become float64)."""
    a = np.asarray(value)
    return np.array(a, dtype=np.result_type(a, np.float32), copy=True)


def partition_indices(total: int, world_size: int, rank: int) -> list[int]:
    """Indices ``rank, rank + world_size, ...`` below ``total``: a round-robin shard.

    >>> partition_indices(7, 2, 0)
    [0, 2, 4, 6]
    """
    _check_rank(rank, world_size)
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be an int >= 0, got {total!r}")
    return list(range(rank, total, world_size))


def average_gradients(per_worker: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The mean of each named buffer over the workers (summed in worker order).

    Every worker must have the same names with the same shapes; otherwise a
    ``SyncMismatchError`` names each worker's buffers. Inputs are not modified.
    """
    if len(per_worker) == 0:
        raise ValueError("average_gradients needs at least one worker's gradients")
    layouts = [{k: np.shape(v) for k, v in g.items()} for g in per_worker]
    if any(lay != layouts[0] for lay in layouts[1:]):
        desc = "; ".join(f"worker {i}: {lay}" for i, lay in enumerate(layouts))
        raise SyncMismatchError(f"workers have different gradient buffers: {desc}")
    out = {}
    for name in per_worker[0]:
        acc = _float_copy(per_worker[0][name])
        for g in per_worker[1:]:
            acc += g[name]
        acc /= len(per_worker)
        out[name] = acc
    return out


def sgd_step(weights: Mapping[str, np.ndarray], grads: Mapping[str, Any], lr: float) -> list[str]:
    """``weights[name] -= lr * grads[name]`` in place; returns the names updated.

    Gradients whose name has no weight are skipped (the reference's rule); a shape mismatch is a
    ``ValueError``. A weight is a numpy array or, as kizzasi's ``Vec<f32>``, a list (updated in
    place too).
    """
    updated = []
    for name, g in grads.items():
        w = weights.get(name)
        if w is None:
            continue
        if np.shape(w) != np.shape(g):
            raise ValueError(f"sgd_step: weight {name!r} has shape {np.shape(w)}, gradient {np.shape(g)}")
        if isinstance(w, np.ndarray):
            w -= lr * np.asarray(g, dtype=w.dtype)
        elif isinstance(w, list):
            w[:] = (np.asarray(w, dtype=np.float64) - lr * np.asarray(g, dtype=np.float64)).tolist()
        else:  # an update of anything else would be lost (e.g. a tuple) or silently rebound
            raise TypeError(f"sgd_step: weight {name!r} must be a numpy array or a list, got {type(w).__name__}")
        updated.append(name)
    return updated


class SharedGradientStore:
    """kizzasi's gradient store: ranks ``push`` named gradients, then ``all_reduce_mean``.

    ``all_reduce_mean(rank)`` returns as soon as every rank has pushed this round (at once if
    they already have, so one thread may push for several ranks), with the mean of each buffer
    summed in rank order (the same bits for every caller); a rank that has not pushed this round
    gets kizzasi's "not all ranks have submitted" :class:`~asyncnet.SyncError` at once (its own
    gradients are missing: waiting could only end in the timeout). The round drains itself once every
    rank has read the mean; :meth:`clear` resets it by hand (kizzasi's escape hatch, and what
    a single thread pushing for every rank calls after its step). A rank pushing again after
    reading the mean waits until the round drained; a push only its own thread could unblock is
    a :class:`~asyncnet.SyncError` at once. Waits end after ``timeout`` seconds
    (:class:`~asyncnet.SyncTimeoutError` naming the ranks not pushed) or at :meth:`abort`.

        >>> import numpy as np
        >>> store = SharedGradientStore(2, timeout=5)
        >>> store.push(0, {"w": np.array([2.0])}); store.push(1, {"w": np.array([4.0])})
        >>> store.all_reduce_mean(0)["w"]
        array([3.])
        >>> store.clear()
    """

    def __init__(self, world_size: int, timeout: float | None = None):
        _check_rank(0, world_size)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self._n = world_size
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: list[dict[str, np.ndarray] | None] = [None] * world_size
        self._pushers: list[int | None] = [None] * world_size  # thread of each push, to refuse self-deadlocks
        self._result: dict[str, np.ndarray] | SyncError | None = None
        self._departed: set[int] = set()
        self._aborted: str | None = None

    @property
    def world_size(self) -> int:
        return self._n

    def push(self, rank: int, grads: Mapping[str, Any]) -> None:
        """Store a copy of ``rank``'s gradients for this round (waits while its previous round drains).

        A wait only this thread could end (``rank`` pushed again from this thread before reading
        the mean, or every rank still to read pushed by this thread) is a
        :class:`~asyncnet.SyncError` at once, not a wait that never ends.
        """
        _check_rank(rank, self._n)
        copy = {k: _float_copy(v) for k, v in grads.items()}
        with self._cond:
            if self._slots[rank] is not None:
                self._refuse_self_deadlock(rank)
            self._wait(
                lambda: self._slots[rank] is None,
                f"rank {rank} push: its previous round has not drained",
                lambda: sorted(set(range(self._n)) - self._departed),
            )
            self._slots[rank] = copy
            self._pushers[rank] = threading.get_ident()
            self._cond.notify_all()

    def _refuse_self_deadlock(self, rank: int) -> None:
        """Raise when ``rank``'s slot can only be freed by reads this very thread would have to make.

        That is: ``rank`` itself pushed by this thread and not read yet (a second push for the same
        round), or every rank still to read pushed by this thread (one thread driving every rank).
        """
        me = threading.get_ident()
        unread = [r for r in range(self._n) if r not in self._departed]
        if rank in unread and self._pushers[rank] == me:
            raise SyncError(
                f"rank {rank} push: rank {rank} already pushed this round from this thread and has not "
                f"read the mean; call all_reduce_mean({rank}) (or clear()) before pushing again"
            )
        if all(self._pushers[r] == me for r in unread):
            raise SyncError(
                f"rank {rank} push: this round has not drained (ranks {unread} have not read the mean) "
                f"and this thread pushed them itself, so waiting would never end; read the mean "
                f"for them (all_reduce_mean) or call clear() first"
            )

    def all_reduce_mean(self, rank: int) -> dict[str, np.ndarray]:
        """The mean of each buffer over the ranks, once every rank has pushed this round."""
        _check_rank(rank, self._n)
        with self._cond:
            if self._result is None and self._slots[rank] is None:  # kizzasi's error, not a wait nobody can end
                missing = [r for r, s in enumerate(self._slots) if s is None]
                raise SyncError(
                    f"rank {rank} all_reduce_mean: not all ranks have submitted gradients (ranks {missing} "
                    f"have not pushed this round, rank {rank} among them)"
                )
            self._wait(
                lambda: self._result is not None or all(s is not None for s in self._slots),
                f"rank {rank} all_reduce_mean",
                lambda: [r for r, s in enumerate(self._slots) if s is None],
            )
            if self._result is None:
                self._result = _mean_of(self._slots)
            result = self._result
            self._departed.add(rank)
            if len(self._departed) == self._n:
                self._reset()
        if isinstance(result, SyncError):
            raise type(result)(str(result))
        return {k: v.copy() for k, v in result.items()}

    def clear(self) -> None:
        """Forget every pushed gradient and the current mean: the next round starts clean."""
        with self._cond:
            self._reset()

    def abort(self, reason: str = "aborted") -> None:
        """Wake every waiting call with :class:`~asyncnet.SyncAbortedError` (and every later one)."""
        with self._cond:
            self._aborted = reason
            self._cond.notify_all()

    def _reset(self) -> None:
        self._slots = [None] * self._n
        self._pushers = [None] * self._n
        self._result = None
        self._departed = set()
        self._cond.notify_all()

    def _wait(self, ready: Callable[[], bool], what: str, missing: Callable[[], list[int]]) -> None:
        """Wait (holding the condition) until ``ready()``, the timeout, or an abort."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while not ready():
            if self._aborted is not None:
                raise SyncAbortedError(f"{what}: the store was aborted ({self._aborted})")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                gone = missing()
                raise SyncTimeoutError(f"{what}: ranks {gone} did not push within {self.timeout} s", gone)
            self._cond.wait(left)
        if self._aborted is not None:
            raise SyncAbortedError(f"{what}: the store was aborted ({self._aborted})")


def _mean_of(slots: Sequence[Mapping[str, np.ndarray] | None]) -> dict[str, np.ndarray] | SyncError:
    """The rank-order mean of every rank's buffers, or the mismatch every rank will see."""
    try:
        return average_gradients([s for s in slots if s is not None])
    except SyncMismatchError as e:
        return e


class DataParallelModel:
    """One rank's replica of a model's weights, synced through a :class:`GradientSync`.

    Ranks start from the same weights by :meth:`broadcast_weights` (a real broadcast from
    ``root``), then :meth:`step` averages every gradient over the ranks and applies the same SGD
    step to each replica, so replicas stay bit-identical. With ``sync=None`` (or a
    :class:`LocalGradientSync`) it is a plain single-rank model that never blocks.

    kizzasi's form ``DataParallelModel(weights, DistributedConfig(...))`` is accepted: world size
    1 (or ``NO_SYNC``) gives a local model; with a larger world size and no sync handle the model
    cannot reach its peers, so its ``step`` and ``broadcast_weights`` raise
    :class:`~asyncnet.SyncError` at once (kizzasi's blocks forever in ``step``). kizzasi's
    :meth:`new_ranks` builds every rank's model of one group. ``weights`` is the live map, and
    ``weights()`` (kizzasi's spelling) a snapshot copy of it.

        >>> import numpy as np
        >>> m = DataParallelModel({"w": np.ones(2)})
        >>> _ = m.step({"w": np.array([1.0, 2.0])}, lr=0.5)
        >>> m.weights["w"]
        array([0.5, 0. ])
    """

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        sync: GradientSync | DistributedConfig | None = None,
        config: DistributedConfig | None = None,
    ):
        if isinstance(sync, DistributedConfig):
            if config is not None:
                raise ValueError("DataParallelModel: a DistributedConfig given twice (positionally and as config=)")
            sync, config = None, sync
        self.config = config
        self.sync: GradientSync = _sync_for(sync, config)
        self._no_sync = config is not None and config.strategy is GradientStrategy.NO_SYNC
        self.weights = _WeightMap((k, _float_copy(v)) for k, v in weights.items())
        self._names = sorted(self.weights)

    @classmethod
    def new_ranks(cls, weights: Mapping[str, Any], config: DistributedConfig) -> list[DataParallelModel]:
        """kizzasi's constructor of a whole group: one model per rank ``0 .. world_size - 1``.

        Each starts from a copy of ``weights`` with ``config`` (its rank replaced); with
        ``ALL_REDUCE`` and more than one rank they share one in-process group (threads: run each
        rank's ``step`` in its own thread), each applying the same averaged step.
        """
        n = config.world_size
        if config.strategy is GradientStrategy.ALL_REDUCE and n > 1:
            from asyncnet.sync.threaded import ThreadedGradientSync

            handles: list[GradientSync | None] = list(ThreadedGradientSync.new_workers(n, timeout=config.timeout))
        else:
            handles = [None] * n
        return [cls(weights, h, config=dataclasses.replace(config, rank=r)) for r, h in enumerate(handles)]

    @property
    def rank(self) -> int:
        return self.config.rank if self.config is not None else self.sync.worker_id

    @property
    def world_size(self) -> int:
        return self.config.world_size if self.config is not None else self.sync.num_workers

    def broadcast_weights(self, root: int = 0) -> None:
        """Copy rank ``root``'s weights into every replica (every rank must call it)."""
        self.sync.broadcast([self.weights[k] for k in self._names], root=root)

    def step(self, grads: Mapping[str, Any], lr: float) -> dict[str, np.ndarray]:
        """Average ``grads`` (every weight's gradient) over the ranks, then apply ``w -= lr * g``."""
        if sorted(grads) != self._names:
            raise ValueError(f"step needs a gradient for every weight {self._names}, got {sorted(grads)}")
        synced = [np.array(grads[k], dtype=self.weights[k].dtype, copy=True) for k in self._names]
        if not self._no_sync:
            self.sync.sync_gradients(synced)
        avg = dict(zip(self._names, synced))
        sgd_step(self.weights, avg, lr)
        return avg


class _WeightMap(dict):
    """The live weight map (a dict); calling it, kizzasi's ``weights()``, gives a snapshot copy."""

    def __call__(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.items()}


class _UnreachableSync:
    """The sync of a multi-rank model built from settings alone: every exchange is an error at once."""

    is_distributed = True

    def __init__(self, config: DistributedConfig):
        self.num_workers, self.worker_id = config.world_size, config.rank

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise SyncError(
            f"DataParallelModel: DistributedConfig(world_size={self.num_workers}, rank={self.worker_id}) "
            "has no way to reach the other ranks: build the group with DataParallelModel.new_ranks, "
            "or pass this rank's sync handle (sync=ThreadedGradientSync.new_workers(n)[rank], or a "
            "process or torch handle)"
        )

    sync_gradients = broadcast = _refuse


def _sync_for(sync: GradientSync | None, config: DistributedConfig | None) -> GradientSync:
    """The sync handle a DataParallelModel uses, checked against ``config`` (kizzasi's meaning)."""
    if config is None:
        return sync if sync is not None else LocalGradientSync()
    if config.strategy is GradientStrategy.REDUCE_TO_ROOT and config.world_size > 1:
        raise ValueError(
            "DataParallelModel: strategy REDUCE_TO_ROOT would leave the replicas different; "
            "expected ALL_REDUCE or NO_SYNC"
        )
    if sync is None:
        if config.world_size > 1 and config.strategy is GradientStrategy.ALL_REDUCE:
            return _UnreachableSync(config)  # type: ignore[return-value]
        return LocalGradientSync()
    if (sync.num_workers, sync.worker_id) != (config.world_size, config.rank):
        raise SyncMismatchError(
            f"DataParallelModel: config says world_size={config.world_size}, rank={config.rank}; "
            f"the sync handle is worker {sync.worker_id} of {sync.num_workers}"
        )
    return sync


class GradientStrategy(enum.Enum):
    """How gradients are combined: all-reduce (everyone gets the mean), to the root only, or not at all."""

    ALL_REDUCE = "all_reduce"
    REDUCE_TO_ROOT = "reduce_to_root"
    NO_SYNC = "no_sync"
    AllReduce = "all_reduce"  # kizzasi's names, aliases of the members above
    ReduceToRoot = "reduce_to_root"
    NoSync = "no_sync"


class CommBackend(enum.Enum):
    """Where workers live: in this machine (threads or processes), or torch.distributed."""

    IN_PROCESS = "in_process"
    EXTERNAL = "external"
    InProcess = "in_process"  # kizzasi's names, aliases of the members above
    External = "external"


@dataclass(frozen=True, init=False)
class DistributedConfig:
    """Settings of a data-parallel run, validated on creation.

    ``grad_strategy`` is kizzasi's name of ``strategy``, as a keyword and as an attribute.

        >>> DistributedConfig(world_size=4, rank=1).is_distributed
        True
        >>> DistributedConfig(grad_strategy=GradientStrategy.NoSync).strategy
        <GradientStrategy.NO_SYNC: 'no_sync'>
    """

    world_size: int = 1
    rank: int = 0
    strategy: GradientStrategy = GradientStrategy.ALL_REDUCE
    backend: CommBackend = CommBackend.IN_PROCESS
    timeout: float | None = None
    bucket_mb: float = 25.0

    def __init__(
        self,
        world_size: int = 1,
        rank: int = 0,
        strategy: GradientStrategy | str | None = None,
        backend: CommBackend | str = CommBackend.IN_PROCESS,
        timeout: float | None = None,
        bucket_mb: float = 25.0,
        *,
        grad_strategy: GradientStrategy | str | None = None,
    ):
        if strategy is not None and grad_strategy is not None:
            raise ValueError("DistributedConfig: give strategy or grad_strategy (kizzasi's name), not both")
        chosen = strategy if strategy is not None else grad_strategy
        values = {
            "world_size": world_size,
            "rank": rank,
            "backend": backend,
            "timeout": timeout,
            "bucket_mb": bucket_mb,
            "strategy": GradientStrategy.ALL_REDUCE if chosen is None else chosen,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    def __post_init__(self) -> None:
        _check_rank(self.rank, self.world_size)
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, got {self.timeout!r}")
        if not self.bucket_mb > 0:
            raise ValueError(f"bucket_mb must be > 0, got {self.bucket_mb!r}")
        if not isinstance(self.strategy, GradientStrategy):
            object.__setattr__(self, "strategy", GradientStrategy(self.strategy))
        if not isinstance(self.backend, CommBackend):
            object.__setattr__(self, "backend", CommBackend(self.backend))

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def grad_strategy(self) -> GradientStrategy:
        """kizzasi's name of :attr:`strategy`."""
        return self.strategy

    @classmethod
    def from_env(cls, **overrides: Any) -> DistributedConfig:
        """Read ``WORLD_SIZE`` and ``RANK`` as ``torchrun`` sets them (external backend when > 1)."""
        ws, rank = _env_int("WORLD_SIZE", 1), _env_int("RANK", 0)
        kw: dict[str, Any] = {"world_size": ws, "rank": rank}
        if ws > 1:
            kw["backend"] = CommBackend.EXTERNAL
        kw.update(overrides)
        return cls(**kw)


def _env_int(name: str, default: int) -> int:
    """The integer environment variable ``name`` (``default`` when unset), or a ValueError naming it."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"DistributedConfig.from_env: {name}={raw!r} is not an integer") from None


@dataclass
class CheckpointMetadata:
    """kizzasi's checkpoint metadata: epoch, step, losses and named metrics (builder methods return self).

    >>> CheckpointMetadata(5, 1000).with_val_loss(0.5).with_metric("accuracy", 0.95).metrics
    {'accuracy': 0.95}
    """

    epoch: int
    step: int
    val_loss: float | None = None
    train_loss: float | None = None
    best_val_loss: float | None = None
    timestamp: str = dataclasses.field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    model_type: str = "unknown"
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    def with_val_loss(self, loss: float) -> CheckpointMetadata:
        self.val_loss = loss
        return self

    def with_train_loss(self, loss: float) -> CheckpointMetadata:
        self.train_loss = loss
        return self

    def with_metric(self, name: str, value: float) -> CheckpointMetadata:
        self.metrics[name] = value
        return self


class CheckpointManager:
    """kizzasi's CheckpointManager for a weight vector and a bias: npz files in one folder.

    ``save_weights(weights, bias, step)`` writes ``weights_step_<step>.npz`` crash-safely and
    returns its path, keeping the newest ``max_checkpoints`` files (kizzasi's default 5) by
    step; ``load_weights(path)`` gives ``(weights, bias)`` back, from these files or from
    kizzasi's ``weights_step_<step>.json``; :meth:`list_weight_checkpoints`, :meth:`latest` and
    :meth:`load_latest` find them. Files are plain npz, read without pickle. ``is_best`` /
    ``update_best`` track the best validation loss as kizzasi's do.

        >>> import numpy as np, tempfile
        >>> manager = CheckpointManager(tempfile.mkdtemp(), max_checkpoints=2)
        >>> path = manager.save_weights(np.array([1.0, 2.0], np.float32), 0.42, step=100)
        >>> weights, bias = CheckpointManager.load_weights(path)
        >>> weights, round(bias, 6), manager.latest() == path
        (array([1., 2.], dtype=float32), 0.42, True)
    """

    _NAME = re.compile(r"^weights_step_(\d+)\.(npz|json)$")

    def __init__(self, checkpoint_dir: str | os.PathLike[str], max_checkpoints: int = 5, keep_best: int = 3):
        for name, value in (("max_checkpoints", max_checkpoints), ("keep_best", keep_best)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.checkpoint_dir = os.fspath(checkpoint_dir)
        self.max_checkpoints = max_checkpoints
        self.keep_best = keep_best
        self.best_checkpoint: CheckpointMetadata | None = None

    def weights_path(self, step: int) -> str:
        """Where :meth:`save_weights` writes the checkpoint of ``step``."""
        return os.path.join(self.checkpoint_dir, f"weights_step_{step}.npz")

    def checkpoint_path(self, epoch: int) -> str:
        """kizzasi's path of a whole-model checkpoint of ``epoch`` (nothing here writes it)."""
        return os.path.join(self.checkpoint_dir, f"checkpoint_epoch_{epoch}.bin")

    def best_checkpoint_path(self) -> str:
        """kizzasi's path of the best whole-model checkpoint (nothing here writes it)."""
        return os.path.join(self.checkpoint_dir, "best_checkpoint.bin")

    def is_best(self, val_loss: float) -> bool:
        """True when ``val_loss`` beats the best recorded one (or none is recorded)."""
        best = None if self.best_checkpoint is None else self.best_checkpoint.val_loss
        return best is None or val_loss < best

    def update_best(self, metadata: CheckpointMetadata) -> None:
        """Record ``metadata`` as the best when its ``val_loss`` is set and beats the best."""
        if metadata.val_loss is not None and self.is_best(metadata.val_loss):
            self.best_checkpoint = metadata

    def save_weights(self, weights: Any, bias: Any, step: int) -> str:
        """Write ``weights`` (an array) and ``bias`` (a scalar or array) for ``step``; returns the path."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        w = np.asarray(weights)
        b = np.asarray(bias)
        for name, a in (("weights", w), ("bias", b)):
            if a.dtype.kind not in "biuf":
                raise CheckpointError(f"save_weights: expected numeric {name}, got dtype {a.dtype}")
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        path = atomic_write_npz(
            self.weights_path(int(step)), {"weights": w, "bias": b, "step": np.asarray(int(step), np.int64)}
        )
        for old in self.checkpoints()[: -self.max_checkpoints]:
            os.remove(old)
        return path

    @staticmethod
    def load_weights(path: str | os.PathLike[str]) -> tuple[np.ndarray, Any]:
        """``(weights, bias)`` from a file :meth:`save_weights` (or kizzasi) wrote; a 0-d bias is a float."""
        data = _read_checkpoint(path)
        bias = data["bias"]
        return data["weights"], (bias.item() if bias.ndim == 0 else bias)

    def list_weight_checkpoints(self) -> list[tuple[int, str]]:
        """kizzasi's listing: ``(step, path)`` of every ``weights_step_<step>`` file, ascending step."""
        try:
            names = os.listdir(self.checkpoint_dir)
        except FileNotFoundError:
            return []
        found = sorted((int(m.group(1)), n) for n in names if (m := self._NAME.match(n)))
        return [(step, os.path.join(self.checkpoint_dir, n)) for step, n in found]

    def checkpoints(self) -> list[str]:
        """Paths of the checkpoints in the folder, oldest step first."""
        return [path for _, path in self.list_weight_checkpoints()]

    def latest(self) -> str | None:
        """The newest checkpoint's path, or None when there is none."""
        paths = self.checkpoints()
        return paths[-1] if paths else None

    def load_latest(self) -> tuple[np.ndarray, Any, int]:
        """``(weights, bias, step)`` of the newest checkpoint; :class:`~asyncnet.CheckpointError` if none."""
        path = self.latest()
        if path is None:
            raise CheckpointError(f"no checkpoint (weights_step_*.npz) in {self.checkpoint_dir!r}")
        weights, bias = self.load_weights(path)
        return weights, bias, int(_read_checkpoint(path)["step"])


def _read_checkpoint(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    path = os.fspath(path)
    try:
        data = _read_json_checkpoint(path) if path.endswith(".json") else _read_npz(path)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path!r} does not exist") from None
    except (OSError, ValueError, EOFError) as e:  # not an npz, truncated, or an object array
        raise CheckpointError(f"checkpoint {path!r} is not a readable checkpoint file: {e}") from None
    missing = {"weights", "bias", "step"} - set(data)
    if missing:
        raise CheckpointError(f"checkpoint {path!r} lacks {sorted(missing)}; expected weights, bias and step")
    return data


def _read_npz(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _read_json_checkpoint(path: str) -> dict[str, np.ndarray]:
    """kizzasi's ``{"step": N, "bias": b, "weights": [...]}``, as float32 like kizzasi's f32."""
    import json

    with open(path, encoding="utf-8") as f:
        obj = json.load(f)  # a JSONDecodeError is a ValueError
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object with step, bias and weights")
    out = {}
    for key, kinds in (("weights", (list,)), ("bias", (int, float)), ("step", (int,))):
        if key not in obj:
            continue
        value = obj[key]
        items = value if isinstance(value, list) else [value]
        if not isinstance(value, kinds) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
            raise ValueError(f"field {key!r} is not {'a list of numbers' if key == 'weights' else 'a number'}")
        out[key] = np.asarray(value, np.int64 if key == "step" else np.float32)
    return out
